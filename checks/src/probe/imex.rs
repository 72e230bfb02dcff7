//! Probe: what a node shows of IMEX, the service that lets the GPUs of one
//! multi-node NVLink domain import each other's memory (NVIDIA's IMEX
//! guide): the channel device nodes a process needs to use fabric memory,
//! the driver's channel major in /proc/devices, the daemon's configuration
//! under /etc/nvidia-imex, and what `nvidia-imex-ctl` says of the local
//! daemon (`-q`) and of the domain (`-N -j`), each run bounded in time.
//!
//! /dev, /etc and /proc are read under folders that stand for them
//! (`GPUCHECK_DEV_ROOT`, `GPUCHECK_ETC_ROOT`, `GPUCHECK_PROC_ROOT`), as
//! sysfs is, so tests read fixture trees. Plain facts; `fabric.mnnvl`
//! judges them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use crate::machine::{CommandAnswer, ImexConfig, ImexDaemon, ImexFacts};

use super::process::{run_bounded, RunError};
use super::sysfs::proc_root;

/// The tool that asks the IMEX daemon (installed with the nvidia-imex
/// package, beside the daemon).
pub const IMEX_CTL: &str = "nvidia-imex-ctl";

/// How long one `nvidia-imex-ctl` query may take: it asks the local daemon
/// over its command port and answers at once when the daemon is up; sites
/// bound it at 6 s in their Slurm prologs (`timeout 6 nvidia-imex-ctl -N
/// -j`, the GB200 IMEX prolog NVIDIA's Slurm guidance builds on), so 5 s
/// keeps two queries inside the check's budget.
pub const IMEX_CTL_TIMEOUT: Duration = Duration::from_secs(5);

/// The default nodes file (IMEX_NODE_CONFIG_FILE's default in the
/// config.cfg the nvidia-imex package installs).
pub const DEFAULT_NODES_FILE: &str = "/etc/nvidia-imex/nodes_config.cfg";

/// The most of a config or nodes file read: an NVL72 domain lists 18
/// trays, a large one a few hundred addresses.
const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// The folder that stands for /dev: `GPUCHECK_DEV_ROOT` when set.
pub fn dev_root() -> PathBuf {
    crate::seam::env("GPUCHECK_DEV_ROOT").map_or_else(|| PathBuf::from("/dev"), PathBuf::from)
}

/// The folder that stands for /etc: `GPUCHECK_ETC_ROOT` when set.
pub fn etc_root() -> PathBuf {
    crate::seam::env("GPUCHECK_ETC_ROOT").map_or_else(|| PathBuf::from("/etc"), PathBuf::from)
}

/// Everything below but NVIDIA_IMEX_CHANNELS (an environment variable the
/// caller reads through the seam), recorded under `imex::facts` with the
/// folders and PATH it read.
pub fn facts(dev: &Path, etc: &Path, path_var: Option<&OsString>) -> ImexFacts {
    let proc = proc_root();
    let args = format!(
        "{}, {}, {}, {}",
        dev.display(),
        etc.display(),
        proc.display(),
        path_var.map(|p| p.to_string_lossy()).unwrap_or_default()
    );
    crate::seam::answer("imex::facts", &args, || {
        let ctl = on_path(IMEX_CTL, path_var);
        ImexFacts {
            channels_major: channels_major(&proc),
            channels: channels(dev),
            channels_env: None,
            config: config(etc),
            daemon: ask(ctl.as_deref(), &["-q"]),
            domain: ask(ctl.as_deref(), &["-N", "-j"]),
            host_service_enabled: host_service_enabled(etc),
            daemons: daemons(&proc),
        }
    })
}

/// The nvidia-imex processes under `proc`, and whether each runs in a
/// Kubernetes pod (its `cgroup` names `kubepods`).
fn daemons(proc: &Path) -> Vec<ImexDaemon> {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let read = |p: &Path| {
        crate::input::read_regular(p, MAX_CONFIG_BYTES)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let mut found: Vec<ImexDaemon> = entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            (read(&e.path().join("comm")).trim() == "nvidia-imex").then(|| ImexDaemon {
                pid,
                in_pod: read(&e.path().join("cgroup")).contains("kubepods"),
            })
        })
        .collect();
    found.sort_by_key(|d| d.pid);
    found
}

/// `name` in an absolute PATH entry, executable.
fn on_path(name: &str, path_var: Option<&OsString>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The `nvidia-caps-imex-channels` line of /proc/devices ("234
/// nvidia-caps-imex-channels").
fn channels_major(proc: &Path) -> Option<u32> {
    let bytes = crate::input::read_regular(&proc.join("devices"), MAX_CONFIG_BYTES).ok()?;
    String::from_utf8_lossy(&bytes).lines().find_map(|line| {
        let (major, name) = line.trim().split_once(char::is_whitespace)?;
        (name.trim() == "nvidia-caps-imex-channels")
            .then(|| major.parse().ok())
            .flatten()
    })
}

/// The N of every `<dev>/nvidia-caps-imex-channels/channelN`, sorted.
fn channels(dev: &Path) -> Vec<u32> {
    let mut found: Vec<u32> = std::fs::read_dir(dev.join("nvidia-caps-imex-channels"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix("channel")?.parse().ok()
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort_unstable();
    found
}

/// A `/etc/...` path from a config file, under the folder standing for /etc.
fn under_etc(etc: &Path, path: &str) -> PathBuf {
    match path.strip_prefix("/etc/") {
        Some(rest) => etc.join(rest),
        None => PathBuf::from(path),
    }
}

/// config.cfg's `KEY=VALUE` lines (`#` comments), and the nodes file.
fn config(etc: &Path) -> Option<ImexConfig> {
    let bytes =
        crate::input::read_regular(&etc.join("nvidia-imex/config.cfg"), MAX_CONFIG_BYTES).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let setting = |key: &str| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().to_string())
    };
    let nodes_file = setting("IMEX_NODE_CONFIG_FILE")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_NODES_FILE.to_string());
    let nodes = crate::input::read_regular(&under_etc(etc, &nodes_file), MAX_CONFIG_BYTES)
        .ok()
        .map(|b| {
            String::from_utf8_lossy(&b)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect()
        });
    Some(ImexConfig {
        nodes_file,
        nodes,
        cmd_enabled: setting("IMEX_CMD_ENABLED").map(|v| v == "1"),
    })
}

/// The host's nvidia-imex.service is enabled: systemd's `enable` links it
/// into a target's `.wants` folder.
fn host_service_enabled(etc: &Path) -> bool {
    let wants = etc.join("systemd/system/multi-user.target.wants/nvidia-imex.service");
    std::fs::symlink_metadata(wants).is_ok()
}

/// One bounded run of `nvidia-imex-ctl ARGS`.
fn ask(ctl: Option<&Path>, args: &[&str]) -> CommandAnswer {
    let Some(ctl) = ctl else {
        return CommandAnswer::NotInstalled;
    };
    let mut cmd = Command::new(ctl);
    cmd.args(args);
    match run_bounded(cmd, IMEX_CTL_TIMEOUT) {
        Ok(out) if out.code == Some(0) => CommandAnswer::Output(out.stdout),
        Ok(out) => {
            let text = if out.stderr.trim().is_empty() {
                out.stdout
            } else {
                out.stderr
            };
            let how = match (out.code, out.signal) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(sig)) => format!("signal {sig}"),
                (None, None) => "no exit code".to_string(),
            };
            CommandAnswer::Failed(format!("{how}: {}", text.trim()))
        }
        Err(RunError::Timeout { secs, .. }) => CommandAnswer::TimedOut(secs),
        Err(e) => CommandAnswer::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn channels_config_and_major_are_read_under_their_roots() {
        let root = tempfile::tempdir().expect("tempdir");
        let dev = root.path().join("dev");
        let etc = root.path().join("etc");
        fs::create_dir_all(dev.join("nvidia-caps-imex-channels")).expect("dev");
        for name in ["channel0", "channel12", "other"] {
            fs::write(dev.join("nvidia-caps-imex-channels").join(name), b"").expect("node");
        }
        fs::create_dir_all(etc.join("nvidia-imex")).expect("etc");
        fs::write(
            etc.join("nvidia-imex/config.cfg"),
            "# comment\nIMEX_CMD_ENABLED=1\nIMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes.cfg\n",
        )
        .expect("config");
        fs::write(
            etc.join("nvidia-imex/nodes.cfg"),
            "10.0.0.1\n\n# spare\n10.0.0.2\n",
        )
        .expect("nodes");
        assert_eq!(channels(&dev), [0, 12]);
        let c = config(&etc).expect("config read");
        assert_eq!(c.nodes_file, "/etc/nvidia-imex/nodes.cfg");
        assert_eq!(c.nodes, Some(vec!["10.0.0.1".into(), "10.0.0.2".into()]));
        assert_eq!(c.cmd_enabled, Some(true));
        fs::write(
            root.path().join("devices"),
            "Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n",
        )
        .expect("devices");
        assert_eq!(channels_major(root.path()), Some(234));
        assert_eq!(channels_major(&etc), None);
        assert!(!host_service_enabled(&etc));
        for (pid, comm, cgroup) in [
            (
                "812",
                "nvidia-imex\n",
                "0::/system.slice/nvidia-imex.service\n",
            ),
            (
                "4410",
                "nvidia-imex\n",
                "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-9.scope\n",
            ),
            ("77", "bash\n", "0::/user.slice\n"),
        ] {
            let dir = root.path().join(pid);
            fs::create_dir_all(&dir).expect("pid dir");
            fs::write(dir.join("comm"), comm).expect("comm");
            fs::write(dir.join("cgroup"), cgroup).expect("cgroup");
        }
        assert_eq!(
            daemons(root.path()),
            [
                ImexDaemon {
                    pid: 812,
                    in_pod: false
                },
                ImexDaemon {
                    pid: 4410,
                    in_pod: true
                }
            ]
        );
    }

    #[test]
    fn a_missing_tool_is_not_installed_and_a_failing_one_says_why() {
        assert_eq!(ask(None, &["-q"]), CommandAnswer::NotInstalled);
        match ask(Some(Path::new("/bin/false")), &["-q"]) {
            CommandAnswer::Failed(why) => assert!(why.starts_with("exit code 1"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}

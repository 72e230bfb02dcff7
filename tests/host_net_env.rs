//! The host, net and env checks through the real binary, as a user runs them:
//! `gpucheck --only ID --json -` with the environment a test sets, asserting
//! the verdict, the summary and hint a person reads, and the exit code. The
//! facts behind each expectation (device nodes, /dev/shm, limits, sockets)
//! are read here independently of gpucheck's own probes.

mod common;

use std::ffi::OsStr;
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use common::{assert_valid_json_report, gpucheck, result, stdout};

/// What one check reported, and gpucheck's exit code.
struct Report {
    status: String,
    summary: String,
    hint: String,
    json: serde_json::Value,
    exit: i32,
}

impl Report {
    fn fact(&self, key: &str) -> String {
        self.json["facts"][key].as_str().unwrap_or("").to_string()
    }
    fn metric(&self, name: &str) -> Option<f64> {
        self.json["metrics"]
            .as_array()?
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["value"].as_f64())
    }
}

/// Run `gpucheck --only id --json -` as `cmd` is set up, and check that the
/// exit code follows the verdict (fail -> 1, anything else here -> 0).
fn run_check(mut cmd: Command, id: &str) -> Report {
    let out = cmd
        .args(["--only", id, "--json", "-"])
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    let r = result(&doc, id).clone();
    let report = Report {
        status: r["status"].as_str().unwrap_or("").to_string(),
        summary: r["summary"].as_str().unwrap_or("").to_string(),
        hint: r["hint"].as_str().unwrap_or("").to_string(),
        exit: out.status.code().unwrap_or(-1),
        json: r,
    };
    let expected_exit = if matches!(report.status.as_str(), "fail" | "error") {
        1
    } else {
        0
    };
    assert_eq!(
        report.exit, expected_exit,
        "{id}: exit code does not follow the verdict {}: {}",
        report.status, report.summary
    );
    report
}

fn check(id: &str, env: &[(&str, &str)]) -> Report {
    let mut cmd = gpucheck();
    cmd.envs(env.iter().copied());
    // These tests judge the environment alone: keep a real driver, where the
    // suite runs on a GPU host, out of it (tests/visible_devices.rs covers
    // the cross-check against GPUs with the fake NVML).
    cmd.args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]);
    run_check(cmd, id)
}

// ---------------------------------------------------------------- host.devices

#[test]
fn host_devices_reports_the_nodes_as_they_are() {
    let r = check("host.devices", &[]);
    let required = ["/dev/nvidiactl", "/dev/nvidia-uvm"];
    let gpu_nodes: Vec<String> = std::fs::read_dir("/dev")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix("nvidia")
                        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                })
                .collect()
        })
        .unwrap_or_default();
    let all_open = required
        .iter()
        .map(|p| p.to_string())
        .chain(gpu_nodes.iter().map(|n| format!("/dev/{n}")))
        .all(|p| std::fs::File::open(p).is_ok());
    if !gpu_nodes.is_empty() && all_open {
        assert_eq!(r.status, "pass", "{}", r.summary);
        assert_eq!(r.metric("gpu_device_nodes"), Some(gpu_nodes.len() as f64));
        return;
    }
    if Path::new("/dev/dxg").exists()
        && !Path::new("/dev/nvidiactl").exists()
        && gpu_nodes.is_empty()
    {
        assert_eq!(r.status, "skip", "WSL 2: {}", r.summary);
        return;
    }
    // Bare metal with the driver loaded and a setuid-root nvidia-modprobe:
    // CUDA creates missing nodes on first use, so missing ones only warn.
    let container = gpucheck_checks::probe::system::host_facts().container;
    let only_missing = required
        .iter()
        .map(|p| p.to_string())
        .chain(gpu_nodes.iter().map(|n| format!("/dev/{n}")))
        .all(|p| std::fs::File::open(&p).is_ok() || !Path::new(&p).exists());
    let setuid_modprobe = ["/usr/bin", "/usr/sbin", "/bin", "/sbin"].iter().any(|d| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("{d}/nvidia-modprobe"))
            .is_ok_and(|m| m.uid() == 0 && m.mode() & 0o4000 != 0)
    });
    if only_missing
        && container.is_none()
        && Path::new("/proc/driver/nvidia/version").exists()
        && setuid_modprobe
    {
        assert_eq!(r.status, "warn", "{}", r.summary);
        assert!(r.summary.contains("creates them"), "{}", r.summary);
        return;
    }
    assert_eq!(r.status, "fail", "{}", r.summary);
    if !Path::new("/dev/nvidiactl").exists() {
        assert!(r.summary.contains("/dev/nvidiactl"), "{}", r.summary);
        // The hint fits where gpucheck runs: a container needs GPUs passed
        // in, bare metal needs the driver.
        let expected = match container.as_deref() {
            Some("kubernetes") => "nvidia.com/gpu",
            Some("podman") => "--device nvidia.com/gpu=all",
            Some(_) => "docker run --gpus all",
            None if Path::new("/proc/driver/nvidia/version").exists() => "nvidia-smi",
            None => "modprobe nvidia",
        };
        assert!(
            r.hint.contains(expected),
            "expected {expected:?} in {}",
            r.hint
        );
    }
}

// ---------------------------------------------------------------- host.shm

#[test]
fn host_shm_measures_dev_shm() {
    let r = check("host.shm", &[]);
    let Ok(v) = nix::sys::statvfs::statvfs("/dev/shm") else {
        assert_eq!(r.status, "fail", "{}", r.summary);
        assert!(r.summary.contains("does not exist"), "{}", r.summary);
        return;
    };
    let size_mib = (v.blocks() * v.fragment_size()) / (1024 * 1024);
    assert_eq!(r.metric("shm_size"), Some(size_mib as f64));
    // Free space moves while the suite runs; judge it only far from the line.
    let free_mib = (v.blocks_available() * v.fragment_size()) / (1024 * 1024);
    let tmpfs = nix::sys::statfs::statfs("/dev/shm")
        .map(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
        .unwrap_or(true);
    let expected: &[&str] = if size_mib < 256 {
        &["fail"]
    } else if size_mib < 1024 || !tmpfs || free_mib < 128 {
        &["warn"]
    } else if free_mib > 512 {
        &["pass"]
    } else {
        &["pass", "warn"]
    };
    assert!(
        expected.contains(&r.status.as_str()),
        "{size_mib} MiB gave {}: {}",
        r.status,
        r.summary
    );
    if r.status != "pass" {
        assert!(
            r.hint.contains("--shm-size=16g")
                || r.hint.contains("medium: Memory")
                || r.hint.contains("ls -la /dev/shm"),
            "{}",
            r.hint
        );
    }
}

// ---------------------------------------------------------------- host.limits

/// The process's (soft, hard) RLIMIT_NOFILE.
fn nofile() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    assert_eq!(rc, 0, "getrlimit");
    (l.rlim_cur, l.rlim_max)
}

/// gpucheck with its soft limits lowered: RLIMIT_NOFILE to `nofile_soft`,
/// RLIMIT_MEMLOCK to `memlock_bytes` (hard limits untouched).
fn with_low_limits(nofile_soft: u64, memlock_bytes: u64) -> Command {
    let mut cmd = gpucheck();
    // SAFETY: only async-signal-safe calls (getrlimit/setrlimit) between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for (res, soft) in [
                (libc::RLIMIT_NOFILE, nofile_soft),
                (libc::RLIMIT_MEMLOCK, memlock_bytes),
            ] {
                let mut l = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(res, &mut l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                l.rlim_cur = soft.min(l.rlim_max);
                if libc::setrlimit(res, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd
}

#[test]
fn host_limits_warns_on_a_low_open_files_limit() {
    let (_, hard) = nofile();
    let r = run_check(with_low_limits(1024, 64 * 1024), "host.limits");
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert!(
        r.summary.contains("open files limit is 1024, below 65536"),
        "{}",
        r.summary
    );
    assert_eq!(r.metric("nofile_soft"), Some(1024.0));
    if hard == libc::RLIM_INFINITY || hard >= 65536 {
        assert!(r.hint.contains("ulimit -n 65536"), "{}", r.hint);
    } else {
        assert!(r.hint.contains("--ulimit nofile=65536:65536"), "{}", r.hint);
    }
    // The lowered memlock limit is reported; it is a problem only with RDMA.
    assert_eq!(r.fact("memlock"), "64 KiB");
    let rdma = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count() > 0)
        .unwrap_or(false);
    assert_eq!(
        r.summary.contains("memlock is 64 KiB"),
        rdma,
        "{}",
        r.summary
    );
}

// ---------------------------------------------------------------- net.loopback

#[test]
fn net_loopback_exchanges_bytes() {
    let r = check("net.loopback", &[]);
    assert_eq!(r.status, "pass", "{}", r.summary);
    let has_v6 = std::fs::read_to_string("/proc/net/if_inet6")
        .map(|t| {
            t.lines()
                .any(|l| l.starts_with("00000000000000000000000000000001"))
        })
        .unwrap_or(false);
    if has_v6 {
        assert_eq!(r.summary, "TCP over 127.0.0.1 and ::1 works");
    } else {
        assert!(r.summary.contains("IPv6 not configured"), "{}", r.summary);
    }
}

// ---------------------------------------------------------------- net.master_port

#[test]
fn net_master_port_taken_names_this_process_and_a_free_port() {
    let held = TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    let port = held.local_addr().expect("local addr").port();
    let r = check("net.master_port", &[("MASTER_PORT", &port.to_string())]);
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert!(
        r.summary.contains(&format!(
            "MASTER_PORT {port} is already listened on by pid {}",
            std::process::id()
        )),
        "{}",
        r.summary
    );
    let suggested: u16 = r
        .fact("suggested_port")
        .parse()
        .unwrap_or_else(|_| panic!("no suggested port in {}", r.json));
    assert_ne!(suggested, port);
    assert!(
        r.hint.contains(&format!("export MASTER_PORT={suggested}")),
        "{}",
        r.hint
    );
    assert!(
        r.hint.contains(&format!("kill {}", std::process::id())),
        "{}",
        r.hint
    );
    drop(held);
}

#[test]
fn net_master_port_held_by_the_launching_torchrun_passes() {
    // This test process plays the torchrun agent: it holds the port and is
    // gpucheck's parent, and the worker environment names a torchrun run.
    let held = TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    let port = held.local_addr().expect("local addr").port();
    let r = check(
        "net.master_port",
        &[
            ("MASTER_PORT", &port.to_string()),
            ("TORCHELASTIC_RUN_ID", "gpucheck-test"),
        ],
    );
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert!(
        r.summary.contains(&format!("pid {}", std::process::id())),
        "{}",
        r.summary
    );
    assert!(
        r.summary.contains("which launched gpucheck"),
        "{}",
        r.summary
    );
    drop(held);
}

#[test]
fn net_master_port_free_passes() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let r = check("net.master_port", &[("MASTER_PORT", &port.to_string())]);
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(
        r.summary,
        format!("MASTER_PORT {port} is free on this machine")
    );
}

#[test]
fn net_master_port_rejects_values_that_are_not_ports() {
    for bad in ["70000", "0", "http", "-1"] {
        let r = check("net.master_port", &[("MASTER_PORT", bad)]);
        assert_eq!(r.status, "fail", "{bad}: {}", r.summary);
        assert_eq!(
            r.summary,
            format!("MASTER_PORT=\"{bad}\" is not a port number (an integer 1-65535)")
        );
        assert!(r.hint.contains("export MASTER_PORT=29500"), "{}", r.hint);
    }
}

#[test]
fn net_master_port_on_a_remote_master_is_skipped() {
    // TEST-NET-3 (RFC 5737): never an address of this machine.
    let r = check("net.master_port", &[("MASTER_ADDR", "203.0.113.7")]);
    assert_eq!(r.status, "skip", "{}", r.summary);
    assert!(
        r.summary.contains("can only be checked on the master node"),
        "{}",
        r.summary
    );
}

// ---------------------------------------------------------------- net.master_addr

#[test]
fn net_master_addr_unset_passes() {
    let r = check("net.master_addr", &[]);
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert!(r.summary.starts_with("MASTER_ADDR unset"), "{}", r.summary);
}

#[test]
fn net_master_addr_that_does_not_resolve_fails() {
    // .invalid never resolves (RFC 6761); a resolver that cannot even say so
    // within the bounded wait fails the check too.
    let r = check(
        "net.master_addr",
        &[("MASTER_ADDR", "no-such-host.invalid")],
    );
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert!(
        r.summary.contains("MASTER_ADDR=\"no-such-host.invalid\""),
        "{}",
        r.summary
    );
}

#[test]
fn net_master_addr_on_loopback_warns_only_across_nodes() {
    let r = check(
        "net.master_addr",
        &[
            ("MASTER_ADDR", "127.0.1.1"),
            ("WORLD_SIZE", "16"),
            ("LOCAL_WORLD_SIZE", "8"),
        ],
    );
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert!(
        r.summary.contains("other nodes cannot reach it"),
        "{}",
        r.summary
    );
    assert!(r.hint.contains("127.0.1.1 in /etc/hosts"), "{}", r.hint);

    let r = check(
        "net.master_addr",
        &[
            ("MASTER_ADDR", "127.0.0.1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "8"),
        ],
    );
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert!(r.summary.contains("fine on a single node"), "{}", r.summary);
}

// ---------------------------------------------------------------- env.cuda_visible_devices

#[test]
fn cuda_visible_devices_unset_sees_all_gpus() {
    let r = check("env.cuda_visible_devices", &[]);
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(r.summary, "CUDA_VISIBLE_DEVICES unset: all GPUs visible");
}

#[test]
fn cuda_visible_devices_reports_what_the_driver_drops() {
    let r = check(
        "env.cuda_visible_devices",
        &[
            ("CUDA_VISIBLE_DEVICES", "0,1,foo,2"),
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ],
    );
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert!(r.summary.contains("entry 3 (\"foo\")"), "{}", r.summary);
    assert!(
        r.summary.contains("everything after it (\"2\")"),
        "{}",
        r.summary
    );
    assert!(
        r.summary.contains("cuda:0 -> 0, cuda:1 -> 1"),
        "{}",
        r.summary
    );
    assert_eq!(r.metric("visible_devices"), Some(2.0));
    assert!(
        r.hint.contains("export CUDA_VISIBLE_DEVICES=0,1,2"),
        "{}",
        r.hint
    );
}

#[test]
fn cuda_visible_devices_values_that_hide_every_gpu_fail() {
    for (value, says) in [
        ("", "set but empty"),
        ("-1", "hides every GPU"),
        ("0,0", "names \"0\" twice"),
    ] {
        let r = check(
            "env.cuda_visible_devices",
            &[("CUDA_VISIBLE_DEVICES", value)],
        );
        assert_eq!(r.status, "fail", "{value:?}: {}", r.summary);
        assert!(r.summary.contains(says), "{value:?}: {}", r.summary);
        assert_eq!(r.metric("visible_devices"), Some(0.0), "{value:?}");
    }
}

#[test]
fn cuda_visible_devices_huge_value_gives_a_short_report() {
    // About 110 KiB, near the kernel's 128 KiB limit on one env string.
    let value = (0..20_000)
        .map(|i| i.to_string())
        .chain(["foo".to_string()])
        .collect::<Vec<_>>()
        .join(",");
    let r = check(
        "env.cuda_visible_devices",
        &[
            ("CUDA_VISIBLE_DEVICES", &value),
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ],
    );
    assert_eq!(
        r.status,
        "fail",
        "{}",
        &r.summary[..r.summary.len().min(300)]
    );
    assert!(r.summary.len() < 600, "{} chars", r.summary.len());
    assert!(r.hint.len() < 400, "{} chars", r.hint.len());
    assert!(
        r.summary.contains("cuda:7 -> 7, … (20000 in all)"),
        "{}",
        r.summary
    );
    assert_eq!(r.metric("visible_devices"), Some(20000.0));
}

#[test]
fn cuda_visible_devices_uuid_prefix_passes() {
    let r = check(
        "env.cuda_visible_devices",
        &[("CUDA_VISIBLE_DEVICES", "GPU-abc")],
    );
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(r.fact("cuda_visible_effective"), "cuda:0 -> GPU-abc");
}

#[test]
fn cuda_visible_devices_indices_without_pci_order_warn() {
    let r = check(
        "env.cuda_visible_devices",
        &[("CUDA_VISIBLE_DEVICES", "1,0")],
    );
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert!(
        r.hint.contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"),
        "{}",
        r.hint
    );
}

#[test]
fn nvidia_visible_devices_void_warns() {
    let r = check(
        "env.cuda_visible_devices",
        &[("NVIDIA_VISIBLE_DEVICES", "void")],
    );
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert!(r.summary.contains("mounts no GPU"), "{}", r.summary);
    assert!(r.hint.contains("--gpus all"), "{}", r.hint);
}

// ---------------------------------------------------------------- env.torchrun

#[test]
fn torchrun_not_launched_is_skipped() {
    let r = check("env.torchrun", &[]);
    assert_eq!(r.status, "skip", "{}", r.summary);
    assert!(
        r.summary.starts_with("not launched by torchrun"),
        "{}",
        r.summary
    );
}

#[test]
fn torchrun_consistent_layout_passes() {
    let r = check(
        "env.torchrun",
        &[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ],
    );
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(
        r.summary,
        "rank 5 of 8, local rank 1 of 4, master 10.0.0.1:29500"
    );
}

#[test]
fn torchrun_inconsistent_layout_fails() {
    let r = check(
        "env.torchrun",
        &[
            ("RANK", "8"),
            ("WORLD_SIZE", "8"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ],
    );
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert_eq!(
        r.summary,
        "RANK=8 is not below WORLD_SIZE=8 (ranks run 0..7)"
    );
    assert!(r.hint.contains("torchrun"), "{}", r.hint);

    let r = check("env.torchrun", &[("RANK", "0")]);
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert!(
        r.summary.contains("RANK is set but WORLD_SIZE is not"),
        "{}",
        r.summary
    );
}

#[test]
fn torchrun_hostile_bytes_are_echoed_safely() {
    // Not UTF-8, an escape sequence and a newline.
    let hostile = OsStr::from_bytes(b"\xff\x1b[2J\n7");
    let mut cmd = gpucheck();
    cmd.env("RANK", hostile).env("WORLD_SIZE", "8");
    let r = run_check(cmd, "env.torchrun");
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert!(
        r.summary
            .starts_with("RANK=\"\u{fffd}\\u{1b}[2J\\n7\" is not an integer >= 0"),
        "{}",
        r.summary
    );
    assert!(!r.summary.contains('\u{1b}') && !r.summary.contains('\n'));
}

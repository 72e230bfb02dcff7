//! The host, net and env checks through the real binary, as a user runs them:
//! `gpucheck --only ID --json -` with the environment a test sets, asserting
//! the verdict, the summary and hint a person reads, and the exit code. Where
//! a verdict hangs on the machine (device nodes, /dev/shm, RDMA devices,
//! loopback), gpucheck runs in namespaces of its own that a test sets up, so
//! the expectation is fixed wherever the suite runs.

mod common;

use std::ffi::OsStr;
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

use common::{assert_valid_json_report, gpucheck, result, root, stdout};

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
/// exit code follows the verdict (fail -> 1; skip -> 1 too, since a check
/// named with --only that did not run verified nothing; else 0).
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
    let expected_exit = if matches!(report.status.as_str(), "fail" | "error" | "skip") {
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

// ---------------------------------------------------------------- namespaces

/// gpucheck started in namespaces of its own (`unshare`: a user namespace,
/// in which this user is root, plus `spaces`, e.g. "--mount" or "--net"),
/// after `setup`, shell commands run as that root, changed what it sees: a
/// /dev/shm of a set size, a /dev that holds only the nodes a test made, a
/// /sys/class with an RDMA device, a loopback interface that is down. The
/// host itself is not touched, so each verdict is fixed whatever machine the
/// suite runs on. Needs util-linux `unshare` and unprivileged user
/// namespaces (allowed by default on Linux distributions and CI machines).
fn in_namespace(spaces: &str, setup: &str) -> Command {
    let scrubbed = gpucheck();
    let mut cmd = Command::new("unshare");
    for (k, v) in scrubbed.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.args(["--user", "--map-root-user", spaces, "sh", "-ec"])
        .arg(format!("{setup}\nexec \"$0\" \"$@\""))
        .arg(common::bin())
        .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]);
    cmd
}

/// Fail with a clear message when the namespaces cannot be made here.
fn assert_namespaces(spaces: &str) {
    let probe = Command::new("unshare")
        .args(["--user", "--map-root-user", spaces, "true"])
        .output()
        .expect("run unshare (util-linux)");
    assert!(
        probe.status.success(),
        "these tests need unprivileged user namespaces (`unshare --user --map-root-user {spaces} \
         true` failed: {})",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
}

/// [`run_check`] on gpucheck in namespaces set up by [`in_namespace`].
fn check_in_namespace(spaces: &str, setup: &str, id: &str) -> Report {
    assert_namespaces(spaces);
    run_check(in_namespace(spaces, setup), id)
}

/// A directory laid out as /dev, with the named entries as empty files (an
/// open(2) on each succeeds, as on a working device node), to be mounted over
/// /dev in a namespace.
fn dev_tree(files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in files {
        let path = dir.path().join(f);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, b"").expect("write");
    }
    dir
}

// ---------------------------------------------------------------- host.devices

#[test]
fn host_devices_pass_when_every_node_opens() {
    let dev = dev_tree(&[
        "null",
        "nvidiactl",
        "nvidia-uvm",
        "nvidia0",
        "nvidia1",
        "nvidia-modeset",
    ]);
    let r = check_in_namespace(
        "--mount",
        &format!("mount --bind '{}' /dev", dev.path().display()),
        "host.devices",
    );
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(
        r.summary,
        "/dev/nvidiactl, /dev/nvidia-uvm and 2 GPU nodes (/dev/nvidia0../dev/nvidia1) open"
    );
    assert_eq!(r.metric("gpu_device_nodes"), Some(2.0));
}

#[test]
fn host_devices_fail_on_a_node_without_a_driver_behind_it() {
    // open(2) on a socket says ENXIO, as a node whose kernel module is
    // gone does.
    let dev = dev_tree(&["null", "nvidiactl", "nvidia-uvm", "nvidia0"]);
    let _socket = std::os::unix::net::UnixListener::bind(dev.path().join("nvidia1"))
        .expect("bind a unix socket");
    let r = check_in_namespace(
        "--mount",
        &format!("mount --bind '{}' /dev", dev.path().display()),
        "host.devices",
    );
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert_eq!(r.summary, "no driver behind /dev/nvidia1 (ENXIO/ENODEV)");
    assert!(r.hint.contains("sudo modprobe nvidia"), "{}", r.hint);
    assert_eq!(r.metric("gpu_device_nodes"), Some(2.0));
}

#[test]
fn host_devices_on_this_machine_pass_only_when_every_node_opens() {
    // The real /dev: a pass needs every node to open; anything else names
    // what to do.
    let r = check("host.devices", &[]);
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
    let all_open = !gpu_nodes.is_empty()
        && ["nvidiactl", "nvidia-uvm"]
            .iter()
            .map(|n| n.to_string())
            .chain(gpu_nodes.iter().cloned())
            .all(|n| std::fs::File::open(format!("/dev/{n}")).is_ok());
    assert_eq!(r.status == "pass", all_open, "{}: {}", r.status, r.summary);
    if r.status == "pass" {
        assert_eq!(r.metric("gpu_device_nodes"), Some(gpu_nodes.len() as f64));
    } else if r.status != "skip" {
        assert!(!r.hint.is_empty(), "{} without a hint", r.status);
    }
}

// ---------------------------------------------------------------- host.shm

/// host.shm with a tmpfs of `size` mounted on /dev/shm.
fn shm_of(size: &str) -> Report {
    check_in_namespace(
        "--mount",
        &format!("mount -t tmpfs -o size={size} tmpfs /dev/shm"),
        "host.shm",
    )
}

#[test]
fn host_shm_of_dockers_default_size_fails() {
    let r = shm_of("64m");
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert_eq!(
        r.summary,
        "/dev/shm is only 64 MiB (Docker's default), below 256 MiB: NCCL shared-memory \
         transfers and DataLoader workers will fail ('unhandled system error', 'Bus error')"
    );
    assert!(
        r.hint.contains("--shm-size=16g") || r.hint.contains("medium: Memory"),
        "{}",
        r.hint
    );
    assert_eq!(r.metric("shm_size"), Some(64.0));
}

#[test]
fn host_shm_below_one_gib_warns() {
    let r = shm_of("512m");
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert_eq!(
        r.summary,
        "/dev/shm is 512 MiB, below the 1.0 GiB NCCL recommends; large batches or many \
         DataLoader workers can run out"
    );
}

#[test]
fn host_shm_of_sixteen_gib_passes() {
    let r = shm_of("16g");
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(r.summary, "/dev/shm is 16.0 GiB (16.0 GiB free)");
    assert_eq!(r.metric("shm_available"), Some(16.0 * 1024.0));
}

#[test]
fn host_shm_missing_fails() {
    let dev = dev_tree(&["null"]);
    let r = check_in_namespace(
        "--mount",
        &format!("mount --bind '{}' /dev", dev.path().display()),
        "host.shm",
    );
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert_eq!(
        r.summary,
        "/dev/shm does not exist: NCCL's shared-memory transport and DataLoader workers need it"
    );
}

// ---------------------------------------------------------------- host.limits

/// gpucheck's soft and hard limits lowered before it starts:
/// RLIMIT_NOFILE to `nofile`, RLIMIT_MEMLOCK to `memlock_bytes`.
fn with_low_limits(mut cmd: Command, nofile: u64, memlock_bytes: u64) -> Command {
    // SAFETY: only async-signal-safe calls (getrlimit/setrlimit) between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for (res, value) in [
                (libc::RLIMIT_NOFILE, nofile),
                (libc::RLIMIT_MEMLOCK, memlock_bytes),
            ] {
                let mut l = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(res, &mut l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                l.rlim_max = value.min(l.rlim_max);
                l.rlim_cur = l.rlim_max;
                if libc::setrlimit(res, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd
}

/// host.limits with 1024 open files and 64 KiB of locked memory, seeing
/// the RDMA devices `rdma` in /sys/class/infiniband and, when `uverbs`,
/// /dev/infiniband/uverbs0.
fn limits_with(rdma: &[&str], uverbs: bool) -> Report {
    let mut setup = "mount -t tmpfs tmpfs /sys/class\nmount -t tmpfs tmpfs /dev".to_string();
    for d in rdma {
        setup.push_str(&format!("\nmkdir -p /sys/class/infiniband/{d}"));
    }
    if uverbs {
        setup.push_str("\nmkdir /dev/infiniband\ntouch /dev/infiniband/uverbs0");
    }
    assert_namespaces("--mount");
    run_check(
        with_low_limits(in_namespace("--mount", &setup), 1024, 64 * 1024),
        "host.limits",
    )
}

#[test]
fn host_limits_warns_on_a_low_open_files_limit() {
    let r = limits_with(&[], false);
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert_eq!(
        r.summary,
        "open files limit is 1024, below 65536: DataLoader workers and NCCL can hit 'Too many \
         open files'"
    );
    assert_eq!(
        r.hint,
        "`docker run --ulimit nofile=65536:65536`, or `* - nofile 65536` in \
         /etc/security/limits.conf (LimitNOFILE=65536 for systemd)"
    );
    assert_eq!(r.metric("nofile_soft"), Some(1024.0));
    // Without RDMA devices the low memlock limit is only reported.
    assert_eq!(r.fact("memlock"), "64 KiB");
    assert_eq!(r.fact("rdma_devices"), "none");
}

#[test]
fn host_limits_warns_on_a_low_memlock_limit_with_rdma_devices() {
    let r = limits_with(&["mlx5_0", "mlx5_1"], true);
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert!(
        r.summary.starts_with(
            "memlock is 64 KiB with RDMA devices (mlx5_0, mlx5_1): NCCL cannot register its \
             InfiniBand buffers; open files limit is 1024"
        ),
        "{}",
        r.summary
    );
    assert!(
        r.hint.starts_with("`docker run --ulimit memlock=-1`"),
        "{}",
        r.hint
    );
    assert_eq!(r.fact("rdma_devices"), "mlx5_0, mlx5_1");
}

#[test]
fn host_limits_says_rdma_devices_that_cannot_be_opened_need_passing_in() {
    let r = limits_with(&["mlx5_0"], false);
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert!(
        r.summary.contains("/dev/infiniband/uverbs* is missing"),
        "{}",
        r.summary
    );
    assert!(
        r.hint
            .contains("--device=/dev/infiniband --ulimit memlock=-1"),
        "{}",
        r.hint
    );
}

#[test]
fn host_limits_reads_the_rdma_devices_under_the_sysfs_root_fabric_rdma_reads() {
    // The same tree fabric.rdma and nccl.env read: four HCAs.
    let mut cmd = with_low_limits(gpucheck(), 1024, 64 * 1024);
    cmd.env(
        "GPUCHECK_SYSFS_ROOT",
        root().join("tests/fixtures/sysfs/ndr_active"),
    );
    let r = run_check(cmd, "host.limits");
    assert_eq!(r.fact("rdma_devices"), "mlx5_0, mlx5_1, mlx5_2, mlx5_3");
    assert_eq!(r.status, "warn", "{}", r.summary);
}

// ---------------------------------------------------------------- net.loopback

#[test]
fn net_loopback_with_lo_down_fails() {
    // A new network namespace starts with its loopback interface down.
    let r = check_in_namespace("--net", "true", "net.loopback");
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert!(
        r.summary.starts_with("TCP over 127.0.0.1 failed at "),
        "{}",
        r.summary
    );
    assert!(r.hint.contains("ip link set lo up"), "{}", r.hint);
}

#[test]
fn net_loopback_over_ipv4_and_ipv6_passes() {
    let r = check_in_namespace(
        "--net",
        "ip link set lo up\nsysctl -qw net.ipv6.conf.lo.disable_ipv6=0",
        "net.loopback",
    );
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(r.summary, "TCP over 127.0.0.1 and ::1 works");
    assert_eq!(r.fact("ipv6"), "works");
}

#[test]
fn net_loopback_without_ipv6_passes_and_says_so() {
    let r = check_in_namespace(
        "--net",
        "ip link set lo up\nsysctl -qw net.ipv6.conf.lo.disable_ipv6=1 2>/dev/null || true",
        "net.loopback",
    );
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(
        r.summary,
        "TCP over 127.0.0.1 works; IPv6 not configured (no ::1), which DDP does not need"
    );
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
    let suggested = r.json["facts"]["suggested_port"]
        .as_u64()
        .unwrap_or_else(|| panic!("no suggested port (a number) in {}", r.json));
    assert_ne!(suggested, u64::from(port));
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

#[test]
fn net_checks_never_echo_a_password_in_master_addr() {
    for id in ["net.master_addr", "net.master_port"] {
        let out = gpucheck()
            .env("MASTER_ADDR", "alice:hunter2@127.0.0.1")
            .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
            .args(["--only", id, "--json", "-"])
            .output()
            .expect("run gpucheck");
        let json = stdout(&out);
        let doc = assert_valid_json_report(&json);
        assert!(
            !json.contains("hunter2"),
            "{id} echoes the password: {json}"
        );
        let summary = result(&doc, id)["summary"].as_str().unwrap_or("");
        assert!(
            summary.contains("MASTER_ADDR=\"alice:***@127.0.0.1\""),
            "{id}: {summary}"
        );
    }
}

#[test]
fn env_torchrun_never_echoes_a_password_in_master_addr() {
    let out = gpucheck()
        .env("MASTER_ADDR", "alice:hunter2@127.0.0.1")
        .env("MASTER_PORT", "29500")
        .args(["--only", "env.torchrun", "--json", "-"])
        .output()
        .expect("run gpucheck");
    let json = stdout(&out);
    let doc = assert_valid_json_report(&json);
    assert!(
        !json.contains("hunter2"),
        "env.torchrun echoes the password: {json}"
    );
    let summary = result(&doc, "env.torchrun")["summary"]
        .as_str()
        .unwrap_or("");
    assert!(summary.contains("alice:***@127.0.0.1"), "{summary}");
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

// ---------------------------------------------------------------- nccl.env: socket links

/// nccl.env publishes the interfaces NCCL's sockets would use with their
/// link speed from sysfs (a fixture tree through GPUCHECK_SYSFS_ROOT), for
/// `gpucheck cluster`'s fleet.allreduce; its own verdict is unchanged. `lo`
/// is on every host, and NCCL uses it when NCCL_SOCKET_IFNAME names it.
#[test]
fn nccl_env_publishes_the_socket_interfaces_and_their_link_speed() {
    let sysfs = tempfile::tempdir().expect("a temporary folder");
    let net = sysfs.path().join("class/net/lo");
    std::fs::create_dir_all(&net).expect("make the fixture tree");
    std::fs::write(net.join("speed"), "25000\n").expect("write the speed");
    let root = sysfs.path().to_string_lossy().into_owned();
    let env = [
        ("NCCL_SOCKET_IFNAME", "=lo"),
        ("GPUCHECK_SYSFS_ROOT", &root),
    ];
    let r = check("nccl.env", &env);
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert_eq!(
        r.summary,
        "1 NCCL setting looks right: NCCL_SOCKET_IFNAME==lo"
    );
    assert_eq!(
        r.json["data"]["socket_links"],
        serde_json::json!({"links": [{"interface": "lo", "speed_gbps": 25.0}]})
    );

    // -1 is the kernel's "unknown": kept unknown, never guessed.
    std::fs::write(net.join("speed"), "-1\n").expect("write the speed");
    let r = check("nccl.env", &env);
    assert_eq!(
        r.json["data"]["socket_links"],
        serde_json::json!({"links": [{"interface": "lo", "speed_gbps": null}]})
    );

    // An interface that matches nothing: no links to publish, same failure.
    let r = check(
        "nccl.env",
        &[
            ("NCCL_SOCKET_IFNAME", "=nosuch0"),
            ("GPUCHECK_SYSFS_ROOT", &root),
        ],
    );
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert!(r.json["data"].get("socket_links").is_none(), "{}", r.json);
}

// ---------------------------------------------------------------- nccl.env: values

/// The /etc/nccl.conf AWS's Deep Learning Containers ship (a real file,
/// tests/fixtures/nccl/README.md) is read and passes without a warning.
#[test]
fn nccl_env_passes_the_aws_deep_learning_container_nccl_conf() {
    let conf = root().join("tests/fixtures/nccl/aws-dlc-etc-nccl.conf");
    let conf = conf.to_string_lossy().into_owned();
    let r = check("nccl.env", &[("NCCL_CONF_FILE", &conf)]);
    assert_eq!(r.status, "pass", "{}", r.summary);
    assert!(
        r.summary.contains("NCCL_SOCKET_IFNAME=^docker0"),
        "{}",
        r.summary
    );
    assert_eq!(
        r.fact("NCCL_SOCKET_IFNAME"),
        format!("^docker0 (from {conf})")
    );
}

/// Values NCCL ignores warn naming what NCCL accepts; an algorithm NCCL
/// does not know fails, as newer NCCL refuses it at init.
#[test]
fn nccl_env_judges_values_by_nccls_grammar() {
    let r = check("nccl.env", &[("NCCL_DEBUG", "DEBUG")]);
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert_eq!(r.summary, "NCCL_DEBUG=\"DEBUG\" is not a value NCCL knows");
    assert!(
        r.hint
            .contains("VERSION, WARN, INFO, ABORT, TRACE (any case)"),
        "{}",
        r.hint
    );

    let r = check("nccl.env", &[("NCCL_ALGO", "ring;tree")]);
    assert_eq!(r.status, "fail", "{}", r.summary);
    assert_eq!(
        r.summary,
        "NCCL_ALGO=\"ring;tree\" names what NCCL does not know: \"tree\" without a function: prefix"
    );

    let r = check("nccl.env", &[("NCCL_IB_TIMEOUT", "40")]);
    assert_eq!(r.status, "warn", "{}", r.summary);
    assert!(r.hint.contains("from 0 to 31"), "{}", r.hint);
}

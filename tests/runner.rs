//! The runner and the CLI contract through the real binary: exit codes 0/1/2,
//! one-line usage errors, `exec`, timeouts of child-isolated checks that leave
//! nothing running, and SIGTERM still producing a report.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

fn assert_one_line_error(out: &std::process::Output, needle: &str) {
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(out));
    let err = stderr(out);
    let first = err.lines().next().unwrap_or("");
    assert!(first.starts_with("gpucheck: "), "{err}");
    assert!(first.contains(needle), "expected '{needle}' in: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    assert!(
        err.lines().count() <= 2,
        "more than a one-line error: {err}"
    );
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["--only", "gpu.eccc"], "unknown check or group 'gpu.eccc'"),
        (
            &["--skip", "nonsense.*"],
            "unknown check or group 'nonsense.*'",
        ),
        (&["--timeout", "0"], "--timeout"),
        (&["--timeout", "abc"], "--timeout"),
        (&["--format", "yaml"], "yaml"),
        (&["--color", "sometimes"], "sometimes"),
        (
            &["--profile", "huge"],
            "'huge' for '--profile <PROFILE>' (possible values: quick, standard, full, health, burn)",
        ),
        (&["--onyl", "gpu"], "'--onyl' found; did you mean '--only'?"),
        (
            &["--only", "ddp"],
            "--only ddp selects only ddp.benchmark, which runs under a larger profile: add \
             --profile full, or name it (--only ddp.benchmark)",
        ),
        (&["--timeout", "1e-9"], "at least 0.001 seconds"),
        (&["--timeout", "1e999"], "at most 86400 seconds"),
        (&["--skip", &"*".repeat(60)], "runs no checks"),
        (
            &["--only", &format!("{}x", "*".repeat(60))],
            "unknown check or group",
        ),
        (&["--min-scaling", "2"], "between 0 and 1"),
        (
            &["--junit", "/nonexistent/dir/report.xml"],
            "cannot write the JUnit report to /nonexistent/dir/report.xml",
        ),
        (
            &["--json", "/nonexistent/dir/report.json"],
            "cannot write the JSON report",
        ),
        (&["--json", "-", "--junit", "-"], "both ask for stdout"),
        (
            &["--format", "json", "--junit", "-"],
            "--format json and --junit - both ask for stdout",
        ),
        (&["explain", "no.such"], "unknown check 'no.such'"),
        (&["--no-such-flag"], "--no-such-flag"),
        (&["exec", "--only", "env.torchrun"], "CMD"),
    ];
    for (args, needle) in cases {
        let out = gpucheck().args(*args).output().unwrap();
        assert_one_line_error(&out, needle);
        assert!(stdout(&out).is_empty(), "{args:?} printed to stdout");
    }
}

#[test]
fn json_and_junit_into_one_file_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = gpucheck()
        .current_dir(dir.path())
        .args([
            "--only", "host.shm", "--json", "r.out", "--junit", "./r.out",
        ])
        .output()
        .unwrap();
    assert_one_line_error(&out, "--json and --junit both name r.out");
    // Devices take any number of writers.
    let ok = gpucheck()
        .args(["--only", "host.shm", "--quiet"])
        .args(["--json", "/dev/null", "--junit", "/dev/null"])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
}

#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    use std::os::unix::ffi::OsStrExt;
    for value in [
        std::ffi::OsStr::new("lots"),
        std::ffi::OsStr::from_bytes(b"\xff"),
    ] {
        let out = gpucheck()
            .args(["--only", "env.torchrun"])
            .env("GPUCHECK_EXPECT_GPUS", value)
            .output()
            .unwrap();
        assert_one_line_error(&out, "(the value comes from $GPUCHECK_EXPECT_GPUS)");
    }
    // Typed on the command line: the flag is the culprit, not the variable.
    let out = gpucheck()
        .args(["--only", "env.torchrun", "--expect-gpus", "x"])
        .env("GPUCHECK_EXPECT_GPUS", "lots")
        .output()
        .unwrap();
    assert_one_line_error(&out, "invalid value 'x' for '--expect-gpus <N>'");
    assert!(!stderr(&out).contains("comes from"), "{}", stderr(&out));
}

#[test]
fn a_report_file_that_fails_on_write_still_shows_the_results() {
    // Opens fine, refuses the write: the checks have run by then, so their
    // table still comes out, and the error (exit 2) names the file.
    if !Path::new("/dev/full").exists() {
        return;
    }
    let out = gpucheck()
        .args(["--only", "env.torchrun", "--json", "/dev/full"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stdout(&out).contains("env.torchrun"), "{}", stdout(&out));
    assert!(stdout(&out).contains("READY"), "{}", stdout(&out));
    assert!(
        stderr(&out).starts_with("gpucheck: cannot write /dev/full: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_unknown_id_suggests_the_nearest_one_not_every_id() {
    let out = gpucheck().args(["--only", "gpu.ecs"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("did you mean gpu.ecc?"), "{err}");
    assert!(err.lines().all(|l| l.chars().count() < 160), "{err}");
    let out = gpucheck()
        .args(["--skip", "nothing_like_it"])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("`gpucheck list` shows every check"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn exit_0_when_nothing_fails_and_1_when_something_does() {
    let ok = gpucheck()
        .args(["--only", "env.torchrun", "--quiet"])
        .envs([
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "2"),
        ])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    assert!(stdout(&ok).starts_with("READY"), "{}", stdout(&ok));

    let bad = gpucheck()
        .args(["--only", "env.torchrun", "--quiet"])
        .envs([("RANK", "3"), ("WORLD_SIZE", "2")])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "{}", stdout(&bad));
    assert!(stdout(&bad).starts_with("NOT READY"), "{}", stdout(&bad));
    assert!(
        stdout(&bad).contains("see env.torchrun"),
        "{}",
        stdout(&bad)
    );
}

#[test]
fn strict_turns_a_warning_into_exit_1() {
    let args = ["--only", "nccl.env", "--quiet"];
    let plain = gpucheck()
        .args(args)
        .env("NCCL_DEBUG", "TRACE")
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), Some(0), "{}", stdout(&plain));
    assert!(stdout(&plain).contains("1 warned"), "{}", stdout(&plain));
    let strict = gpucheck()
        .args(args)
        .arg("--strict")
        .env("NCCL_DEBUG", "TRACE")
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(1), "{}", stdout(&strict));
    assert!(stdout(&strict).contains("--strict"), "{}", stdout(&strict));
}

#[test]
fn skip_reason_names_the_failed_need() {
    // torch.cuda needs torch.import; a Python that does not exist fails the
    // choice of interpreter, which is a skip, so torch.cuda is skipped too.
    let out = gpucheck()
        .args(["--only", "torch.import,torch.cuda", "--json", "-"])
        .args(["--python", "/nonexistent/python3"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cuda = result(&doc, "torch.cuda");
    assert_eq!(cuda["status"], "skip");
    assert!(
        cuda["summary"]
            .as_str()
            .unwrap()
            .starts_with("needs torch.import, which"),
        "{cuda}"
    );
}

#[test]
fn exec_replaces_itself_with_the_command_on_pass() {
    let child = gpucheck()
        .args([
            "exec",
            "--only",
            "env.torchrun",
            "--",
            "sh",
            "-c",
            "echo pid=$$",
        ])
        .envs([("RANK", "0"), ("WORLD_SIZE", "1")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Same PID: gpucheck exec'd the command instead of spawning it.
    assert_eq!(stdout(&out).trim(), format!("pid={pid}"));
    // The report went to stderr, stdout belongs to the command.
    assert!(stderr(&out).contains("READY"), "{}", stderr(&out));
}

#[test]
fn exec_does_not_run_the_command_on_fail() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let out = gpucheck()
        .args(["exec", "--only", "env.torchrun", "--", "touch"])
        .arg(&marker)
        .envs([("RANK", "5"), ("WORLD_SIZE", "2")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!marker.exists(), "the command ran although a check failed");
    assert!(stdout(&out).is_empty());
    assert!(
        stderr(&out).contains("not running touch"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("env.torchrun"), "{}", stderr(&out));

    let warn = gpucheck()
        .args([
            "exec",
            "--on-fail",
            "warn",
            "--only",
            "env.torchrun",
            "--",
            "touch",
        ])
        .arg(&marker)
        .envs([("RANK", "5"), ("WORLD_SIZE", "2")])
        .output()
        .unwrap();
    assert_eq!(warn.status.code(), Some(0), "{}", stderr(&warn));
    assert!(marker.exists(), "--on-fail warn must run the command");
}

/// The ignored-signal mask (SigIgn) of the process that `exec` became.
fn exec_sig_ignored(ignore_sigint_first: bool) -> u64 {
    let mut cmd = gpucheck();
    cmd.args(["exec", "--only", "host.shm", "--quiet", "--"])
        .args(["grep", "^SigIgn:", "/proc/self/status"]);
    if ignore_sigint_first {
        // As a background job of a non-interactive shell starts.
        // SAFETY: setting a signal disposition between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                nix::sys::signal::signal(
                    nix::sys::signal::Signal::SIGINT,
                    nix::sys::signal::SigHandler::SigIgn,
                )
                .map(|_| ())
                .map_err(std::io::Error::from)
            });
        }
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let hex = text.trim().trim_start_matches("SigIgn:").trim();
    u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("no SigIgn line: {text}"))
}

#[test]
fn exec_hands_the_command_the_signals_as_gpucheck_found_them() {
    let bit = |sig: i32| 1u64 << (sig - 1);
    // Rust ignores SIGPIPE for itself; CMD must not inherit that, or `yes |
    // head` inside it never ends by SIGPIPE. SIGINT/SIGTERM stay default.
    let mask = exec_sig_ignored(false);
    assert_eq!(
        mask & (bit(libc::SIGPIPE) | bit(libc::SIGINT) | bit(libc::SIGTERM)),
        0,
        "SigIgn {mask:x}"
    );
    // Started with SIGINT ignored: CMD keeps it ignored (gpucheck's own
    // Ctrl-C handler must not turn it back into the default on exec).
    let mask = exec_sig_ignored(true);
    assert_ne!(mask & bit(libc::SIGINT), 0, "SigIgn {mask:x}");
    assert_eq!(mask & bit(libc::SIGPIPE), 0, "SigIgn {mask:x}");
}

#[test]
fn exec_passes_non_utf8_arguments_through() {
    use std::os::unix::ffi::OsStrExt;
    let arg = std::ffi::OsStr::from_bytes(b"--data=caf\xe9");
    let out = gpucheck()
        .args([
            "exec", "--only", "host.shm", "--quiet", "--", "printf", "%s",
        ])
        .arg(arg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out.stdout, b"--data=caf\xe9");
}

#[test]
fn exec_quiet_json_still_writes_the_json_report_to_stderr() {
    // --quiet shortens the table only, as it does without exec.
    let out = gpucheck()
        .args(["exec", "--quiet", "--format", "json", "--only", "host.shm"])
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = assert_valid_json_report(&stderr(&out));
    assert_eq!(doc["exit_code"], 0);
}

#[test]
fn exec_of_a_missing_command_exits_127() {
    let out = gpucheck()
        .args(["exec", "--only", "host.shm", "--", "/nonexistent/cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("cannot run /nonexistent/cmd"),
        "{}",
        stderr(&out)
    );
}

fn hang_python() -> std::path::PathBuf {
    root().join("tests/fixtures/hang-python.sh")
}

#[test]
fn child_timeout_kills_the_whole_tree() {
    let mark = format!("gpucheck-runner-timeout-{}", std::process::id());
    let out = gpucheck()
        .args([
            "--only",
            "torch.import",
            "--timeout",
            "2",
            "--json",
            "-",
            "--python",
        ])
        .arg(hang_python())
        .env("GPUCHECK_TEST_MARK", &mark)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = result(&doc, "torch.import");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .starts_with("timed out after 2 s"),
        "{r}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        processes_matching(&mark),
        Vec::new(),
        "processes survived gpucheck"
    );
}

/// Start `cmd` with the hanging fake Python marked `mark`, and return once
/// that Python runs.
fn spawn_probing(mut cmd: std::process::Command, mark: &str) -> std::process::Child {
    let child = cmd
        .env("GPUCHECK_TEST_MARK", mark)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while processes_matching(&format!("{mark}-main")).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the probe never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// The parent pid of `pid`, from /proc.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which may hold spaces: state, then ppid.
    stat.get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// [`spawn_probing`], then send `signal` to gpucheck and return what it did.
fn interrupt_while_probing(
    cmd: std::process::Command,
    mark: &str,
    signal: nix::sys::signal::Signal,
) -> std::process::Output {
    let child = spawn_probing(cmd, mark);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn sigterm_kills_children_and_still_reports() {
    let mark = format!("gpucheck-runner-sigterm-{}", std::process::id());
    let mut cmd = gpucheck();
    cmd.args(["--only", "torch.import", "--json", "-", "--python"])
        .arg(hang_python());
    let out = interrupt_while_probing(cmd, &mark, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["interrupted"], "SIGTERM");
    let r = result(&doc, "torch.import");
    assert_eq!(r["status"], "error");
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("interrupted by SIGTERM"),
        "{r}"
    );
    assert!(
        r["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("stopped by SIGTERM while this check ran"),
        "{r}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        processes_matching(&mark),
        Vec::new(),
        "processes survived gpucheck"
    );
}

#[test]
fn a_run_killed_before_it_ends_leaves_no_partial_report() {
    let mark = format!("gpucheck-runner-killed-report-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut cmd = gpucheck();
    cmd.args(["--only", "torch.import", "--json"])
        .arg(&report)
        .arg("--python")
        .arg(hang_python());
    let child = spawn_probing(cmd, &mark);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), None);
    // Whole or absent: never an empty or half-written r.json.
    assert!(!report.exists(), "a SIGKILLed run left r.json behind");
    kill_marked(&mark);
}

/// SIGKILL whatever carries `mark` (clean-up after a test that killed
/// gpucheck itself).
fn kill_marked(mark: &str) {
    for (pid, _) in processes_matching(mark) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[test]
fn a_probe_killed_from_outside_is_an_error_pointing_at_the_oom_killer() {
    let mark = format!("gpucheck-runner-oomkill-{}", std::process::id());
    let mut cmd = gpucheck();
    cmd.args(["--only", "torch.import", "--json", "-", "--python"])
        .arg(hang_python());
    let child = spawn_probing(cmd, &mark);
    // What the OOM killer does: SIGKILL the isolated probe (this run's only
    // `__child`, running this build's binary).
    let needle = format!("{} __child torch.import", bin().display());
    let probes: Vec<(u32, String)> = processes_matching(&needle)
        .into_iter()
        .filter(|(pid, _)| parent_of(*pid) == Some(child.id()))
        .collect();
    assert_eq!(probes.len(), 1, "{probes:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(probes[0].0 as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = result(&doc, "torch.import");
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(r["summary"], "probe crashed: SIGKILL", "{r}");
    assert!(r["hint"].as_str().unwrap().contains("OOM killer"), "{r}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(processes_matching(&mark), Vec::new(), "processes survived");
}

#[test]
fn sighup_from_a_closed_terminal_also_stops_the_run_cleanly() {
    let mark = format!("gpucheck-runner-sighup-{}", std::process::id());
    let mut cmd = gpucheck();
    cmd.args(["--only", "torch.import", "--json", "-", "--python"])
        .arg(hang_python());
    let out = interrupt_while_probing(cmd, &mark, nix::sys::signal::Signal::SIGHUP);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["interrupted"], "SIGHUP");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        processes_matching(&mark),
        Vec::new(),
        "processes survived gpucheck"
    );
}

#[test]
fn a_signal_the_caller_ignored_does_not_interrupt() {
    // Started with SIGINT ignored (a background job of a script): Ctrl-C
    // meant for the script must not stop gpucheck; the check runs into its
    // timeout instead.
    let mark = format!("gpucheck-runner-ignored-{}", std::process::id());
    let mut cmd = gpucheck();
    cmd.args(["--only", "torch.import", "--timeout", "3", "--json", "-"])
        .arg("--python")
        .arg(hang_python());
    // SAFETY: setting a signal disposition between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGINT,
                nix::sys::signal::SigHandler::SigIgn,
            )
            .map(|_| ())
            .map_err(std::io::Error::from)
        });
    }
    let out = interrupt_while_probing(cmd, &mark, nix::sys::signal::Signal::SIGINT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc.get("interrupted").is_none(), "{doc}");
    let r = result(&doc, "torch.import");
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .starts_with("timed out after 3 s"),
        "{r}"
    );
}

#[test]
fn exec_does_not_run_the_command_after_an_interrupt_even_with_on_fail_warn() {
    let mark = format!("gpucheck-runner-exec-int-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut cmd = gpucheck();
    cmd.args(["exec", "--on-fail", "warn", "--only", "torch.import"])
        .arg("--python")
        .arg(hang_python())
        .args(["--", "touch"])
        .arg(&ran);
    let out = interrupt_while_probing(cmd, &mark, nix::sys::signal::Signal::SIGINT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!ran.exists(), "Ctrl-C must stop exec from running CMD");
    assert!(
        stderr(&out).contains("not running touch: interrupted by SIGINT"),
        "{}",
        stderr(&out)
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        processes_matching(&mark),
        Vec::new(),
        "processes survived gpucheck"
    );
}

#[test]
fn list_and_explain_cover_the_catalog() {
    let out = gpucheck()
        .args(["list", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rows.len() >= 8);
    for row in &rows {
        let id = row["id"].as_str().unwrap();
        let ex = gpucheck().args(["explain", id]).output().unwrap();
        assert_eq!(ex.status.code(), Some(0), "explain {id}");
        assert!(stdout(&ex).starts_with(id), "{}", stdout(&ex));
        assert!(stdout(&ex).len() > 150, "explain {id} is too thin");
    }
    let table = gpucheck().arg("list").output().unwrap();
    assert!(stdout(&table).contains("host.shm"));
}

#[test]
fn list_fits_the_terminal_and_pads_no_row() {
    let text = stdout(
        &gpucheck()
            .arg("list")
            .env_remove("COLUMNS")
            .output()
            .unwrap(),
    );
    for line in text.lines() {
        assert_eq!(line, line.trim_end(), "padded: {line:?}");
    }
    let text = stdout(
        &gpucheck()
            .arg("list")
            .env("COLUMNS", "80")
            .output()
            .unwrap(),
    );
    assert!(text.contains("nccl.nic_path"), "{text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "wider than 80: {line:?}");
    }
}

#[test]
fn list_says_fleet_checks_run_only_under_gpucheck_cluster() {
    let out = gpucheck()
        .args(["list", "--format", "json"])
        .output()
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let (fleet, node): (Vec<_>, Vec<_>) = rows
        .iter()
        .partition(|r| r["group"].as_str() == Some("fleet"));
    assert!(!fleet.is_empty());
    for row in fleet {
        assert_eq!(row["profile"], "cluster", "{row}");
    }
    for row in node {
        let profile = row["profile"].as_str().unwrap_or("");
        let expected: &[&str] = match row["group"].as_str() {
            // The job checks run only under `gpucheck job`.
            Some("job") => &["job"],
            _ => &["quick", "standard", "full", "burn"],
        };
        assert!(expected.contains(&profile), "{row}");
    }
    let table = stdout(&gpucheck().arg("list").output().unwrap());
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with("fleet.torch "))
        .unwrap_or_else(|| panic!("no fleet.torch in:\n{table}"));
    assert_eq!(line.split_whitespace().nth(2), Some("cluster"), "{line}");
    let explain = stdout(
        &gpucheck()
            .args(["explain", "fleet.torch"])
            .output()
            .unwrap(),
    );
    assert!(explain.contains("runs in: gpucheck cluster"), "{explain}");
}

#[test]
fn help_documents_exit_codes_and_completions_work() {
    let out = gpucheck().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("2  usage or configuration error"),
        "{}",
        stdout(&out)
    );
    // The exit codes read on an 80-column terminal, line by line.
    let text = stdout(&out);
    let codes = text.split("Exit codes:").nth(1).unwrap_or_default();
    for line in codes.lines() {
        assert!(line.chars().count() <= 80, "wider than 80: {line:?}");
    }
    // -h names every profile, burn included.
    let short = stdout(&gpucheck().arg("-h").output().unwrap());
    assert!(short.contains("burn (burn-in"), "{short}");
    let comp = gpucheck().args(["completions", "bash"]).output().unwrap();
    assert_eq!(comp.status.code(), Some(0));
    assert!(stdout(&comp).contains("gpucheck"));
}

#[test]
fn closed_stdout_pipe_is_not_an_error() {
    // A pipe whose reader is already gone: every write gets EPIPE, however
    // little is written (`gpucheck list | head -0`, a consumer that quit).
    let cases: &[&[&str]] = &[
        &["list"],
        &["list", "--format", "json"],
        &["explain", "host.shm"],
        &["completions", "bash"],
        &["completions", "zsh"],
        &["--only", "host.shm"],
        &["--only", "host.shm", "--json", "-"],
    ];
    for args in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = gpucheck()
            .args(*args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_full_stdout_is_a_one_line_error() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return; // no /dev/full in this sandbox: nothing to test
    };
    let out = gpucheck()
        .arg("list")
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_one_line_error(&out, "cannot write to stdout");
}

#[test]
fn an_unwritable_stderr_changes_no_exit_code() {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full")
    };
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    let failing = [("RANK", "3"), ("WORLD_SIZE", "2")];
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(&[&str], Env, i32)] = &[
        (&["--bogus"], &[], 2),
        (&["--only", "no.such"], &[], 2),
        (
            &["exec", "--only", "env.torchrun", "--", "sh", "-c", "exit 7"],
            &[("RANK", "0"), ("WORLD_SIZE", "1")],
            7,
        ),
        (
            &["exec", "--only", "env.torchrun", "--", "true"],
            &failing,
            1,
        ),
        (
            &["exec", "--only", "host.shm", "--", "/nonexistent/cmd"],
            &[],
            127,
        ),
    ];
    for (args, env, code) in cases {
        for (what, stderr) in [
            ("/dev/full", Stdio::from(full())),
            ("closed", closed().into()),
        ] {
            let out = gpucheck()
                .args(*args)
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(stderr)
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(*code),
                "{args:?} with stderr {what}"
            );
        }
    }
}

/// The `nobody` user and group.
const NOBODY: u32 = 65534;

#[test]
fn a_thread_that_cannot_start_is_that_checks_error_and_the_run_goes_on() {
    // RLIMIT_NPROC counts a user's processes and threads, and is not
    // enforced for root: gpucheck runs as `nobody` with room for itself and
    // one isolated probe, so the thread that feeds the probe its input
    // cannot start (what `prlimit --nproc=4` did to a user's run).
    assert!(
        unsafe { libc::geteuid() } == 0,
        "this test needs root: it runs gpucheck as nobody under RLIMIT_NPROC"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let junit = dir.path().join("r.xml");
    let mut cmd = gpucheck();
    cmd.args(["--only", "torch.import", "--json", "-", "--junit"])
        .arg(&junit)
        .arg("--python")
        .arg(hang_python());
    // SAFETY: plain syscalls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 2,
                rlim_max: 2,
            };
            if libc::setrlimit(libc::RLIMIT_NPROC, &limit) != 0
                || libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc = assert_valid_json_report(&stdout(&out));
    let r = result(&doc, "torch.import");
    assert_eq!(r["status"], "error", "{r}");
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .starts_with("could not start a thread to feed the isolated probe: "),
        "{r}"
    );
    assert!(r["hint"].as_str().unwrap().contains("ulimit -u"), "{r}");
    assert_valid_junit(&junit);
}

/// The kernel's name for where `pid` sleeps ("hrtimer_nanosleep" between
/// tries to open a FIFO that has no reader yet), from /proc.
fn wchan(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default()
}

#[test]
fn a_signal_before_the_checks_start_still_ends_in_a_report_and_exit_1() {
    // `--json FIFO` holds gpucheck before any check runs, waiting for the
    // FIFO's reader: a SIGTERM there must not kill it, nor leave it
    // waiting for a reader that never comes.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("report.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let child = gpucheck()
        .args(["--only", "env.torchrun", "--quiet", "--json"])
        .arg(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    // The wait for a reader sleeps between tries to open the FIFO.
    while !wchan(child.id()).contains("nanosleep") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "gpucheck never waited for the FIFO's reader (wchan {:?})",
            wchan(child.id())
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("interrupted by SIGTERM"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains(&format!(
            "the JSON report was not written to {}: no reader opened the FIFO",
            fifo.display()
        )),
        "{}",
        stderr(&out)
    );
}

/// Wait up to 10 s for every process carrying `mark` to be gone; the
/// survivors otherwise (killed here, so they do not outlive the test).
fn survivors_after_waiting(mark: &str) -> Vec<(u32, String)> {
    let start = Instant::now();
    while !processes_matching(mark).is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = processes_matching(mark);
    kill_marked(mark);
    left
}

#[test]
fn every_catchable_stop_signal_is_an_interruption_that_leaves_nothing_behind() {
    use nix::sys::signal::Signal;
    for signal in [
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
        Signal::SIGXCPU,
    ] {
        let mark = format!("gpucheck-runner-{}-{}", signal.as_str(), std::process::id());
        let mut cmd = gpucheck();
        cmd.args(["--only", "torch.import", "--json", "-", "--python"])
            .arg(hang_python());
        let out = interrupt_while_probing(cmd, &mark, signal);
        assert_eq!(out.status.code(), Some(1), "{signal}: {}", stderr(&out));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["interrupted"], signal.as_str());
        assert_eq!(survivors_after_waiting(&mark), Vec::new(), "{signal}");
    }
}

#[test]
fn nothing_an_isolated_probe_started_outlives_a_sigkilled_gpucheck() {
    // The fake Python leaves one process in its own group and one in a
    // session of its own; gpucheck gets no chance to clean up.
    let mark = format!("gpucheck-runner-sigkill-{}", std::process::id());
    let mut cmd = gpucheck();
    cmd.args(["--only", "torch.import", "--json", "-", "--python"])
        .arg(hang_python());
    let out = interrupt_while_probing(cmd, &mark, nix::sys::signal::Signal::SIGKILL);
    assert_eq!(out.status.code(), None);
    assert_eq!(
        survivors_after_waiting(&mark),
        Vec::new(),
        "processes survived a SIGKILLed gpucheck"
    );
}

// ---------------------------------------------------------------------------
// Forgiving the usual slips

fn run_args(args: &[&str]) -> std::process::Output {
    gpucheck().args(args).output().expect("run gpucheck")
}

#[test]
fn explain_suggests_the_nearest_id_and_takes_a_group() {
    let out = run_args(&["explain", "nccl.allredce"]);
    assert_one_line_error(&out, "did you mean nccl.allreduce?");
    let out = run_args(&["explain", "ncl"]);
    assert_one_line_error(&out, "did you mean nccl?");
    let out = run_args(&["explain", "nccl"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for id in ["nccl.library", "nccl.env", "nccl.allreduce"] {
        assert!(text.contains(&format!("{id} — ")), "{id} in:\n{text}");
    }
}

#[test]
fn misplaced_arguments_are_shown_where_they_go() {
    let out = run_args(&["exec", "--profile", "quick", "echo", "hi"]);
    assert_one_line_error(
        &out,
        "put -- before the command: gpucheck exec --profile quick -- echo hi",
    );
    let out = run_args(&["--profile", "quick", "exec", "--", "true"]);
    assert_one_line_error(
        &out,
        "run options go after the subcommand: gpucheck exec --profile quick -- true",
    );
    let out = run_args(&["--timeout", "-1"]);
    assert_one_line_error(&out, "invalid value '-1' for '--timeout <SECS>'");
}

#[test]
fn the_verdict_says_how_many_more_checks_to_see() {
    // A driver hung in a query fails every gpu check after it.
    let lib = build_fixture_lib("fake_nvml.c", "nvml", "libnvidia-ml.so.1");
    let out = gpucheck()
        .env(
            "FAKE_NVML_SCENARIO",
            root().join("tests/fixtures/nvml/hang_ecc.scenario"),
        )
        .args([
            "--only",
            "gpu",
            "--skip",
            common::LOAD_CHECKS,
            "--quiet",
            "--timeout",
            "2",
            "--nvml-lib",
        ])
        .arg(lib)
        .output()
        .expect("run gpucheck");
    let line = stdout(&out);
    let failed: usize = line
        .split(", ")
        .find_map(|p| p.strip_suffix(" failed"))
        .and_then(|n| n.parse().ok())
        .expect("a failed count");
    assert!(failed > 4, "{line}");
    assert!(
        line.trim_end()
            .ends_with(&format!(" and {} more", failed - 4)),
        "{line}"
    );
}

#[test]
fn exec_on_fail_warn_says_it_runs_the_command_anyway() {
    let out = gpucheck()
        .args([
            "exec",
            "--only",
            "net.master_port",
            "--on-fail",
            "warn",
            "--",
            "echo",
            "ran",
        ])
        .env("MASTER_PORT", "not-a-port")
        .output()
        .expect("run gpucheck");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "ran\n");
    assert!(
        stderr(&out).contains("gpucheck: checks failed; running echo anyway (--on-fail warn)"),
        "{}",
        stderr(&out)
    );
    // The help says where `--json -` goes under exec.
    let help = stdout(&run_args(&["exec", "--help"]));
    assert!(
        help.contains("- for stderr: stdout belongs to CMD"),
        "{help}"
    );
}

#[test]
fn a_gate_that_verified_nothing_is_not_ready_and_runs_nothing() {
    // No GPU here: both checks skip. Named with --only, their skip is no
    // pass: exec must not start the command.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let out = gpucheck()
        .args([
            "exec",
            "--only",
            "nccl.allreduce,gpu.compute",
            "--",
            "touch",
        ])
        .arg(&marker)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!marker.exists(), "the command ran: {err}");
    assert!(
        err.contains("NOT READY (not verified: gpu.compute, nccl.allreduce)"),
        "{err}"
    );
    // A group whose every check skipped verified nothing either.
    let out = gpucheck()
        .args(["--only", "nccl.allreduce", "--json", "-"])
        .output()
        .unwrap();
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(doc["exit_code"], 1);
    assert_eq!(doc["unverified"], serde_json::json!(["nccl.allreduce"]));
    // Routine skips (no RDMA device) beside checks that ran stay skips.
    let out = gpucheck()
        .args(["--only", "env.torchrun,fabric.r*", "--quiet"])
        .env("GPUCHECK_SYSFS_ROOT", dir.path())
        .envs([("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")])
        .envs([("LOCAL_WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1")])
        .env("MASTER_PORT", "29500")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("1 skipped"), "{}", stdout(&out));
}

/// Under --only the header says what ran, not the profile whose list
/// --only replaced; the JSON report carries the patterns as given.
#[test]
fn the_header_says_only_what_ran_under_only() {
    let out = gpucheck()
        .args(["--only", "gpu.count,host.shm", "--color", "never"])
        .output()
        .unwrap();
    let text = stdout(&out);
    let header = text.lines().next().unwrap_or_default();
    assert!(header.ends_with(" · only gpu.count,host.shm"), "{header}");
    assert!(!header.contains("profile"), "{header}");
    let out = gpucheck()
        .args(["--only", "host.shm", "--profile", "quick", "--json", "-"])
        .output()
        .unwrap();
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(doc["only"], serde_json::json!(["host.shm"]));
    // Without --only: the profile, and no `only` in the report.
    let out = gpucheck()
        .args(["--profile", "quick", "--json", "-"])
        .output()
        .unwrap();
    let doc = assert_valid_json_report(&stdout(&out));
    assert!(doc.get("only").is_none(), "{doc}");
}

/// `exec --json -`: the report goes to stderr (stdout is CMD's), and
/// automation reads that stream as one JSON document: gpucheck's notes
/// about CMD (not run, run anyway, cannot be started) stay off it and the
/// exit code says what happened.
#[test]
fn exec_json_on_stderr_is_one_json_document_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    // One GPU where 8 are expected fails gpu.count; 1 expected passes.
    for (args, cmd, code) in [
        (vec!["--expect-gpus", "8"], "touch", Some(1)),
        (
            vec!["--expect-gpus", "8", "--on-fail", "warn"],
            "/nonexistent/cmd",
            Some(127),
        ),
        (vec!["--expect-gpus", "1"], "/nonexistent/cmd", Some(127)),
    ] {
        let out = gpucheck()
            .env("FAKE_NVML_SCENARIO", nvml_scenario("single_gpu"))
            .arg("exec")
            .arg("--nvml-lib")
            .arg(fake_nvml())
            .args(["--only", "gpu.count"])
            .args(&args)
            .args(["--json", "-", "--"])
            .arg(cmd)
            .arg(&marker)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), code, "{args:?}: {}", stderr(&out));
        assert_valid_json_report(&stderr(&out));
        assert!(!marker.exists(), "{args:?}: the command ran");
    }
    // With the table on stderr the notes stay: a person reads them.
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", nvml_scenario("single_gpu"))
        .args([
            "exec",
            "--only",
            "gpu.count",
            "--expect-gpus",
            "8",
            "--nvml-lib",
        ])
        .arg(fake_nvml())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("gpucheck: not running true: checks failed"),
        "{}",
        stderr(&out)
    );
}

//! Probe helper: run an outside program in its own process group under a
//! timeout, capture its output, and kill the whole group when it ends, so
//! nothing a probe starts outlives it.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::prctl;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind};
use thiserror::Error;

/// What a program printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    /// Exit code, None when killed by a signal.
    pub code: Option<i32>,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Error, serde::Serialize, serde::Deserialize)]
pub enum RunError {
    #[error("cannot start {program}: {reason}")]
    Spawn { program: String, reason: String },
    #[error("timed out after {secs:.0} s")]
    Timeout {
        secs: f64,
        stdout: String,
        stderr: String,
    },
}

/// Keep at most the last this-many bytes of each stream: results and errors
/// come at the end, so a chatty program (NCCL_DEBUG=TRACE) loses its start.
const MAX_CAPTURE: usize = 1 << 20;

/// A stream being read to its end on a thread of its own, keeping the last
/// [`MAX_CAPTURE`] bytes, so what was read so far can be taken at any time.
pub struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    done: thread::JoinHandle<()>,
}

/// Start reading `r` to its end in the background. Fails when no thread can
/// be started (a low `ulimit -u` or `ulimit -v`).
pub fn capture(mut r: impl Read + Send + 'static) -> std::io::Result<Capture> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buf);
    let done = thread::Builder::new()
        .name("capture".into())
        .spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match r.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => keep_bounded(&sink, &chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        })?;
    Ok(Capture { buf, done })
}

/// Like [`capture`], line by line: each line (its newline included) goes
/// to `keep` first, and only lines it returns true for are kept. For the
/// child protocol's live lines (progress, a partial result), which the
/// reader acts on as they come and which must not fill the buffer.
pub fn capture_lines(
    r: impl Read + Send + 'static,
    mut keep: impl FnMut(&[u8]) -> bool + Send + 'static,
) -> std::io::Result<Capture> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buf);
    let done = thread::Builder::new()
        .name("capture".into())
        .spawn(move || {
            let mut r = std::io::BufReader::new(r);
            let mut line = Vec::new();
            loop {
                line.clear();
                match std::io::BufRead::read_until(&mut r, b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) if keep(&line) => keep_bounded(&sink, &line),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        })?;
    Ok(Capture { buf, done })
}

/// Append `bytes`, dropping the oldest once the buffer is twice
/// [`MAX_CAPTURE`] (trimmed to it when taken).
fn keep_bounded(sink: &Mutex<Vec<u8>>, bytes: &[u8]) {
    let mut buf = sink.lock().unwrap_or_else(|p| p.into_inner());
    buf.extend_from_slice(bytes);
    if buf.len() > 2 * MAX_CAPTURE {
        let excess = buf.len() - MAX_CAPTURE;
        buf.drain(..excess);
    }
}

impl Capture {
    /// What was read by the time the stream ended, or by `deadline` if it has
    /// not ended by then: a process that escaped every kill (one stuck in the
    /// driver in uninterruptible sleep, a daemon in another session) can hold
    /// the pipe open forever, and gpucheck must not wait on it.
    pub fn finish_by(self, deadline: Instant) -> Vec<u8> {
        while !self.done.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let mut buf = std::mem::take(&mut *self.buf.lock().unwrap_or_else(|p| p.into_inner()));
        if buf.len() > MAX_CAPTURE {
            let excess = buf.len() - MAX_CAPTURE;
            buf.drain(..excess);
        }
        buf
    }
}

/// How long to wait for a SIGKILLed process to be gone, and for its output
/// pipes to close, before giving up on it. A process in uninterruptible sleep
/// inside a driver (a hung GPU) does not die until the driver lets go.
pub const KILL_GRACE: Duration = Duration::from_secs(3);

/// Wait for `child`, already sent SIGKILL, at most `grace`; None when it is
/// still there (unkillable for now; left behind rather than waited on).
pub fn wait_killed(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
            _ => return None,
        }
    }
}

/// SIGKILL a whole process group; ESRCH (already gone) is fine.
pub fn kill_group(pgid: i32) {
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
}

/// Make `cmd` start in a process group of its own (so the whole group can be
/// killed at once) and die with the process that started it (SIGKILL on the
/// parent's death, so not even a SIGKILLed gpucheck leaves it behind).
pub fn isolate(cmd: &mut Command) {
    cmd.process_group(0);
    // SAFETY: prctl is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            prctl::set_pdeathsig(Signal::SIGKILL)?;
            Ok(())
        });
    }
}

/// Make this process the "child subreaper" of everything it starts: a
/// process whose parent dies is re-parented to it instead of init, so
/// [`reap_descendants`] can find and kill it even if it left its probe's
/// process group (torchrun workers, daemons that setsid).
pub fn become_subreaper() {
    let _ = prctl::set_child_subreaper(true);
}

/// Undo [`become_subreaper`] (before `exec` hands the process to a command).
pub fn stop_being_subreaper() {
    let _ = prctl::set_child_subreaper(false);
}

/// The parent and the process group of `pid`, from /proc/PID/stat.
pub fn parent_and_group(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may itself contain ") ".
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut f = rest.split_whitespace();
    let _state = f.next()?;
    let ppid: i32 = f.next()?.parse().ok()?;
    let pgrp: i32 = f.next()?.parse().ok()?;
    Some((ppid, pgrp))
}

/// Direct children of `parent`: (pid, process group).
fn children_of(parent: i32) -> Vec<(i32, i32)> {
    proc_pids()
        .filter_map(|pid| {
            let (ppid, pgrp) = parent_and_group(pid)?;
            (ppid == parent).then_some((pid, pgrp))
        })
        .collect()
}

/// Kill and reap every process this one started that is still around: its
/// own children (with their process groups) and, through the subreaper, any
/// orphaned descendant. Bounded: gives up after about a second of trying.
pub fn reap_descendants() {
    let me = std::process::id() as i32;
    let own_group = nix::unistd::getpgrp().as_raw();
    for _ in 0..100 {
        let kids = children_of(me);
        if kids.is_empty() {
            return;
        }
        for (pid, pgrp) in kids {
            if pgrp != own_group {
                kill_group(pgrp);
            }
            let pid = Pid::from_raw(pid);
            let _ = kill(pid, Signal::SIGKILL);
            let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Run `cmd` (stdin closed, stdout/stderr captured) in a new process group
/// that dies with its parent, wait at most `timeout`, then kill the group.
pub fn run_bounded(cmd: Command, timeout: Duration) -> Result<Output, RunError> {
    run_bounded_then(cmd, timeout, || {})
}

/// How a supervised process ended.
#[derive(Debug)]
pub enum Ending {
    /// It exited (or died of a signal) by itself before the deadline.
    Exited(ExitStatus),
    /// The deadline passed first.
    TimedOut,
    /// The caller's `stop` said to give up (gpucheck was interrupted).
    Stopped,
    /// Waiting on it failed.
    WaitFailed(String),
    /// No thread could be started to read its output (a low `ulimit -u`
    /// or `ulimit -v`); it was killed at once.
    Unwatched(String),
}

/// What [`supervise`] saw.
#[derive(Debug)]
pub struct Supervised {
    pub ending: Ending,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// False when the process was still there [`KILL_GRACE`] after SIGKILL
    /// (stuck in the kernel) and was left behind.
    pub reaped: bool,
}

/// Watch `child` (started with [`isolate`] and piped stdout/stderr) until it
/// exits, `timeout` passes or `stop()` returns true; then SIGKILL its whole
/// group, wait for it at most [`KILL_GRACE`], call `cleanup` (for processes
/// that left the group, which would hold the pipes open), and collect its
/// output, also bounded. Nothing here waits without a limit.
pub fn supervise(
    child: Child,
    timeout: Duration,
    stop: impl Fn() -> bool,
    cleanup: impl FnOnce(),
) -> Supervised {
    supervise_with(child, timeout, stop, cleanup, capture, capture)
}

/// [`supervise`], each stderr line handed to `keep_err` as it comes (see
/// [`capture_lines`]); the lines it returns false for are not collected.
pub fn supervise_lines(
    child: Child,
    timeout: Duration,
    stop: impl Fn() -> bool,
    cleanup: impl FnOnce(),
    keep_err: impl FnMut(&[u8]) -> bool + Send + 'static,
) -> Supervised {
    supervise_with(child, timeout, stop, cleanup, capture, |e| {
        capture_lines(e, keep_err)
    })
}

/// [`supervise`], each stdout line handed to `keep_out` as it comes (see
/// [`capture_lines`]); the lines it returns false for are not collected.
pub fn supervise_out_lines(
    child: Child,
    timeout: Duration,
    stop: impl Fn() -> bool,
    cleanup: impl FnOnce(),
    keep_out: impl FnMut(&[u8]) -> bool + Send + 'static,
) -> Supervised {
    supervise_with(
        child,
        timeout,
        stop,
        cleanup,
        |o| capture_lines(o, keep_out),
        capture,
    )
}

fn supervise_with(
    mut child: Child,
    timeout: Duration,
    stop: impl Fn() -> bool,
    cleanup: impl FnOnce(),
    capture_out: impl FnOnce(std::process::ChildStdout) -> std::io::Result<Capture>,
    capture_err: impl FnOnce(std::process::ChildStderr) -> std::io::Result<Capture>,
) -> Supervised {
    let pgid = child.id() as i32;
    let out = child.stdout.take().map(capture_out).transpose();
    let err = child.stderr.take().map(capture_err).transpose();
    let (out, err) = match (out, err) {
        (Ok(out), Ok(err)) => (out, err),
        (Err(e), _) | (_, Err(e)) => {
            kill_group(pgid);
            let reaped = wait_killed(&mut child, KILL_GRACE).is_some();
            cleanup();
            return Supervised {
                ending: Ending::Unwatched(e.to_string()),
                stdout: Vec::new(),
                stderr: Vec::new(),
                reaped,
            };
        }
    };
    let deadline = Instant::now() + timeout;
    let ending = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ending::Exited(s),
            Ok(None) => {}
            Err(e) => break Ending::WaitFailed(e.to_string()),
        }
        if stop() {
            break Ending::Stopped;
        }
        if Instant::now() >= deadline {
            break Ending::TimedOut;
        }
        thread::sleep(Duration::from_millis(2));
    };
    // Whatever happened, nothing in the group may survive.
    kill_group(pgid);
    let reaped = wait_killed(&mut child, KILL_GRACE).is_some();
    cleanup();
    let pipes_deadline = Instant::now() + KILL_GRACE;
    let collect = |c: Option<Capture>| c.map(|c| c.finish_by(pipes_deadline)).unwrap_or_default();
    Supervised {
        ending,
        stdout: collect(out),
        stderr: collect(err),
        reaped,
    }
}

/// [`run_bounded`], calling `cleanup` after the group kill and before
/// collecting the output: for programs (torchrun) that start processes in
/// sessions of their own, which a group kill misses and which would hold the
/// output pipes open.
pub fn run_bounded_then(
    mut cmd: Command,
    timeout: Duration,
    cleanup: impl FnOnce(),
) -> Result<Output, RunError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    isolate(&mut cmd);
    let child = cmd.spawn().map_err(|e| RunError::Spawn {
        program: program.clone(),
        reason: e.to_string(),
    })?;
    let seen = supervise(child, timeout, || false, cleanup);
    if let Ending::Unwatched(reason) = &seen.ending {
        return Err(RunError::Spawn {
            program,
            reason: format!("no thread to read its output: {reason}"),
        });
    }
    let stdout = String::from_utf8_lossy(&seen.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&seen.stderr).into_owned();
    match seen.ending {
        Ending::Exited(s) => Ok(Output {
            stdout,
            stderr,
            code: s.code(),
            signal: s.signal(),
        }),
        Ending::TimedOut | Ending::Stopped | Ending::WaitFailed(_) | Ending::Unwatched(_) => {
            Err(RunError::Timeout {
                secs: timeout.as_secs_f64(),
                stdout,
                stderr,
            })
        }
    }
}

/// Every pid listed in /proc (none when /proc cannot be read).
pub fn proc_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
}

/// The pids of the processes whose argument list has an element equal to
/// `arg` (zombies have none).
pub fn pids_with_arg(arg: &OsStr) -> Vec<i32> {
    let me = std::process::id();
    let mut system = System::new();
    system.refresh_processes_specifics(
        ProcessesToUpdate::All,
        true,
        ProcessRefreshKind::nothing().with_cmd(UpdateKind::Always),
    );
    let mut pids: Vec<i32> = system
        .processes()
        .values()
        // Threads are listed as processes of their own; their leader counts.
        .filter(|p| p.thread_kind().is_none() && p.pid().as_u32() != me)
        .filter(|p| p.cmd().iter().any(|a| a == arg))
        .filter_map(|p| i32::try_from(p.pid().as_u32()).ok())
        .collect();
    pids.sort_unstable();
    pids
}

/// SIGKILL every process whose argument list contains `arg` (a unique
/// temporary path, so only processes this run started), then wait up to
/// `grace` for them to go. Returns how many were killed.
pub fn kill_processes_with_arg(arg: &OsStr, grace: Duration) -> usize {
    let pids = pids_with_arg(arg);
    for pid in &pids {
        // ESRCH (already gone) is fine.
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    let deadline = Instant::now() + grace;
    while !pids_with_arg(arg).is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    pids.len()
}

/// The last `lines` non-empty lines of `text`, for showing a failure's tail.
pub fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_exit_code() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let o = run_bounded(cmd, Duration::from_secs(10)).unwrap();
        assert_eq!(
            (o.stdout.as_str(), o.stderr.as_str(), o.code),
            ("out\n", "err\n", Some(3))
        );
    }

    #[test]
    fn timeout_kills_grandchildren_too() {
        let marker = format!("gpucheck-test-{}", std::process::id());
        let mut cmd = Command::new("bash");
        // The grandchild holds the pipes open; only a group kill ends it.
        cmd.args([
            "-c",
            &format!("(exec -a {marker} sleep 300) & exec -a {marker} sleep 301"),
        ]);
        let err = run_bounded(cmd, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, RunError::Timeout { .. }));
        let left = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|c| String::from_utf8_lossy(c).contains(&marker))
            .count();
        assert_eq!(left, 0, "a process of the group survived");
    }

    #[test]
    fn output_is_collected_even_when_an_escaped_process_holds_the_pipe() {
        // The grandchild starts a session of its own, so the group kill
        // misses it, and it keeps stdout open: gpucheck must still return,
        // with what was printed, instead of waiting for the pipe to close.
        let marker = format!("gpucheck-test-escaped-{}", std::process::id());
        let mut cmd = Command::new("bash");
        cmd.args([
            "-c",
            &format!("setsid bash -c 'exec -a {marker} sleep 300' & echo started; exit 0"),
        ]);
        let o = run_bounded(cmd, Duration::from_secs(20));
        kill_processes_with_arg(OsStr::new(&marker), Duration::from_secs(5));
        let o = o.unwrap();
        assert_eq!((o.stdout.as_str(), o.code), ("started\n", Some(0)));
    }

    #[test]
    fn a_chatty_program_keeps_its_last_lines() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo RESULT",
        ]);
        let o = run_bounded(cmd, Duration::from_secs(20)).unwrap();
        assert!(o.stdout.len() <= MAX_CAPTURE, "{}", o.stdout.len());
        assert!(o.stdout.ends_with("RESULT\n"));
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let err =
            run_bounded(Command::new("/nonexistent/prog"), Duration::from_secs(1)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot start /nonexistent/prog"),
            "{err}"
        );
    }

    #[test]
    fn processes_are_found_and_killed_by_an_exact_argument() {
        let marker = format!("/tmp/gpucheck-test-arg-{}.py", std::process::id());
        let mut child = Command::new("bash")
            .args(["-c", &format!("exec -a {marker} sleep 300")])
            .process_group(0)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while pids_with_arg(OsStr::new(&marker)).is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(pids_with_arg(OsStr::new(&marker)), vec![child.id() as i32]);
        // A prefix of the argument is not a match.
        assert!(pids_with_arg(OsStr::new(&marker[..marker.len() - 3])).is_empty());
        let killed = kill_processes_with_arg(OsStr::new(&marker), Duration::from_secs(5));
        assert_eq!(killed, 1);
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(pids_with_arg(OsStr::new(&marker)).is_empty());
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\n\nb\nc\n", 2), "b\nc");
    }
}

//! Probe helper: run an outside program in its own process group under a
//! timeout, capture its output, and kill the whole group when it ends, so
//! nothing a probe starts outlives it.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use thiserror::Error;

/// What a program printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    /// Exit code, None when killed by a signal.
    pub code: Option<i32>,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Error)]
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

/// Keep at most this much of each stream.
const MAX_CAPTURE: u64 = 1 << 20;

fn capture(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.by_ref().take(MAX_CAPTURE).read_to_end(&mut buf);
        // Drain the rest so the writer never blocks on a full pipe.
        let _ = std::io::copy(&mut r, &mut std::io::sink());
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// SIGKILL a whole process group; ESRCH (already gone) is fine.
pub fn kill_group(pgid: i32) {
    // SAFETY: plain syscall on a process group this process created.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// Make `cmd` start in a process group of its own (so the whole group can be
/// killed at once) and die with the process that started it (SIGKILL on the
/// parent's death, so not even a SIGKILLed gpucheck leaves it behind).
pub fn isolate(cmd: &mut Command) {
    cmd.process_group(0);
    // SAFETY: prctl is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// Run `cmd` (stdin closed, stdout/stderr captured) in a new process group
/// that dies with its parent, wait at most `timeout`, then kill the group.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<Output, RunError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    isolate(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| RunError::Spawn {
        program,
        reason: e.to_string(),
    })?;
    let pgid = child.id() as i32;
    let out = child.stdout.take().map(capture);
    let err = child.stderr.take().map(capture);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
            _ => break None,
        }
    };
    kill_group(pgid);
    let _ = child.wait();
    let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
    match status {
        Some(s) => Ok(Output {
            stdout,
            stderr,
            code: s.code(),
            signal: s.signal(),
        }),
        None => Err(RunError::Timeout {
            secs: timeout.as_secs_f64(),
            stdout,
            stderr,
        }),
    }
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
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\n\nb\nc\n", 2), "b\nc");
    }
}

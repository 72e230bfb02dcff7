//! A watched job's rank processes, between two samples: how each is doing
//! in /proc (state, CPU time) and, the moment one ends, how it ended. Ends
//! are seen through a pidfd per rank (Linux 5.3+), which becomes readable
//! when the process exits, before its launcher reaps it: its zombie's
//! /proc/PID/stat still carries the exit status then (torchrun polls its
//! workers every 0.1 s, so the watch reads it first). Nothing is sent to
//! the processes, and nothing here goes through the capture seam: a watch
//! keeps what its diagnosis reads, not every sample.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::domain::watch::Exit;

/// One rank's process at one moment, from /proc/PID/stat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    pub state: char,
    /// User and system CPU time so far, in seconds.
    pub cpu_s: f64,
    /// The exit status, once the process is a zombie.
    pub exit: Option<Exit>,
}

/// A process's state and CPU time now; None once it is gone.
pub fn proc_sample(pid: i32) -> Option<ProcSample> {
    let stat = procfs::process::Process::new(pid).ok()?.stat().ok()?;
    let ticks = procfs::ticks_per_second().max(1) as f64;
    Some(ProcSample {
        state: stat.state,
        cpu_s: (stat.utime + stat.stime) as f64 / ticks,
        exit: (stat.state == 'Z')
            .then(|| stat.exit_code.map(Exit::from_wait_status))
            .flatten(),
    })
}

/// The processes watched for their end, each through its pidfd.
#[derive(Debug, Default)]
pub struct ExitWatch {
    fds: BTreeMap<i32, OwnedFd>,
    /// Processes watched without a pidfd (an older kernel): polled.
    polled: Vec<i32>,
}

impl ExitWatch {
    /// Watch `pid` (again: a no-op).
    pub fn add(&mut self, pid: i32) {
        if self.fds.contains_key(&pid) || self.polled.contains(&pid) {
            return;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd >= 0 {
            // SAFETY: a fresh descriptor this process owns alone.
            let owned = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            self.fds.insert(pid, owned);
        } else {
            self.polled.push(pid);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.fds.is_empty() && self.polled.is_empty()
    }

    /// Wait up to `timeout` for watched processes to end; each that ended is
    /// returned once, with its exit status where its zombie still showed it.
    pub fn wait(&mut self, timeout: Duration) -> Vec<(i32, Exit)> {
        let ended = self.poll_fds(timeout);
        let mut out: Vec<(i32, Exit)> = ended.into_iter().map(|p| (p, exit_of(p))).collect();
        for pid in &out {
            self.fds.remove(&pid.0);
        }
        let (gone, alive): (Vec<i32>, Vec<i32>) = self
            .polled
            .iter()
            .partition(|&&p| proc_sample(p).is_none_or(|s| s.state == 'Z'));
        self.polled = alive;
        out.extend(gone.into_iter().map(|p| (p, exit_of(p))));
        out
    }

    fn poll_fds(&self, timeout: Duration) -> Vec<i32> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        if self.fds.is_empty() {
            std::thread::sleep(timeout);
            return Vec::new();
        }
        let pids: Vec<i32> = self.fds.keys().copied().collect();
        let mut fds: Vec<PollFd> = self
            .fds
            .values()
            .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
            .collect();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        if poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        )
        .unwrap_or(0)
            <= 0
        {
            return Vec::new();
        }
        pids.into_iter()
            .zip(&fds)
            .filter(|(_, f)| f.revents().is_some_and(|r| !r.is_empty()))
            .map(|(p, _)| p)
            .collect()
    }
}

/// How `pid` ended, from its zombie's stat; [`Exit::Unseen`] once reaped.
fn exit_of(pid: i32) -> Exit {
    proc_sample(pid)
        .and_then(|s| s.exit)
        .unwrap_or(Exit::Unseen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn an_exit_code_is_read_from_the_zombie_before_it_is_reaped() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 0.2; exit 3"])
            .spawn()
            .unwrap();
        let mut w = ExitWatch::default();
        w.add(child.id() as i32);
        let mut ended = Vec::new();
        for _ in 0..50 {
            ended = w.wait(Duration::from_millis(100));
            if !ended.is_empty() {
                break;
            }
        }
        assert_eq!(ended, vec![(child.id() as i32, Exit::Code(3))]);
        assert!(w.is_empty());
        let _ = child.wait();
    }

    #[test]
    fn a_signal_is_read_as_one() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let mut w = ExitWatch::default();
        w.add(pid);
        assert!(w.wait(Duration::from_millis(50)).is_empty());
        let before = proc_sample(pid).unwrap();
        assert!(before.exit.is_none() && before.state != 'Z');
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let ended = w.wait(Duration::from_secs(5));
        assert_eq!(ended, vec![(pid, Exit::Signal(9))]);
        let _ = child.wait();
        assert!(proc_sample(pid).is_none());
    }
}

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

/// One rank's process at one moment, from /proc/PID/stat and its main
/// thread's /proc/PID/task/PID/{stat,status}.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    pub state: char,
    /// The main thread's user and system CPU time so far, in seconds.
    pub cpu_s: f64,
    /// The main thread's context switches so far (voluntary and not): a
    /// thread blocked in a collective, a sleep or a stop makes none; a
    /// training loop makes some at every step.
    pub switches: Option<u64>,
    /// The exit status, once the process is a zombie.
    pub exit: Option<Exit>,
}

/// A process's state and CPU time now; None once it is gone.
pub fn proc_sample(pid: i32) -> Option<ProcSample> {
    let process = procfs::process::Process::new(pid).ok()?;
    let stat = process.stat().ok()?;
    let main = process.task_main_thread().ok();
    let main_stat = main.as_ref().and_then(|t| t.stat().ok());
    let switches = main
        .and_then(|t| t.status().ok())
        .and_then(|s| Some(s.voluntary_ctxt_switches? + s.nonvoluntary_ctxt_switches?));
    let ticks = procfs::ticks_per_second().max(1) as f64;
    let (utime, stime) = main_stat.map_or((stat.utime, stat.stime), |m| (m.utime, m.stime));
    Some(ProcSample {
        state: stat.state,
        cpu_s: (utime + stime) as f64 / ticks,
        switches,
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

/// An [`ExitWatch`] on a thread of its own, so that an end is read the
/// moment it happens whatever its owner is doing (a diagnosis takes
/// seconds; a launcher reaps its workers within 0.1 s). The thread ends
/// when its owner drops it.
pub struct ExitThread {
    add: std::sync::mpsc::Sender<i32>,
    ended: std::sync::mpsc::Receiver<(i32, Exit)>,
}

/// How often the exit thread looks for new pids to watch.
const EXIT_THREAD_SLICE: Duration = Duration::from_millis(100);

impl ExitThread {
    pub fn start() -> ExitThread {
        let (add, pids) = std::sync::mpsc::channel::<i32>();
        let (tell, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut w = ExitWatch::default();
            loop {
                loop {
                    match pids.try_recv() {
                        Ok(pid) => w.add(pid),
                        Err(std::sync::mpsc::TryRecvError::Empty) => break,
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                    }
                }
                for e in w.wait(EXIT_THREAD_SLICE) {
                    if tell.send(e).is_err() {
                        return;
                    }
                }
            }
        });
        ExitThread { add, ended }
    }

    /// Watch `pid` (again: a no-op).
    pub fn add(&self, pid: i32) {
        let _ = self.add.send(pid);
    }

    /// The ends seen so far, waiting up to `timeout` for the first.
    pub fn wait(&self, timeout: Duration) -> Vec<(i32, Exit)> {
        let mut out: Vec<(i32, Exit)> = self.ended.recv_timeout(timeout).into_iter().collect();
        out.extend(self.ended.try_iter());
        out
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
    fn the_exit_thread_reads_an_end_while_its_owner_is_busy() {
        let t = ExitThread::start();
        let mut child = Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
        t.add(child.id() as i32);
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            t.wait(Duration::from_secs(5)),
            vec![(child.id() as i32, Exit::Code(7))]
        );
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

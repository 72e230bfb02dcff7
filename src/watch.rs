//! `gpucheck exec --watch -- CMD` and `gpucheck job --watch`: keep looking
//! at a running job and name its crash, hang or straggler as it happens.
//!
//! The loop wakes every [`SLICE`] to pass signals on to CMD, to see CMD
//! end, and to read the exit status of any rank that just ended (its pidfd,
//! `probe::exits`); every period it samples every rank (`job::watch::sample`)
//! and hands the samples to `domain::watch`. A suspected hang runs the full
//! diagnosis as a separate `gpucheck job --pid ...` process, bounded in
//! time, whose JSON report says whether the job is hung; under `--on-hang
//! stop` the job's process group then gets SIGTERM, SIGKILL after
//! [`STOP_GRACE`], and gpucheck exits [`EXIT_STOPPED_HUNG`]. The reports
//! (`--json`, `--junit`, `--markdown`, `--html`) are rewritten whenever the verdict
//! changes and at the end; `--prom` every period.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpucheck_checks::domain::watch::{Ended, Event, Exit, Watcher};
use gpucheck_checks::domain::watch_summary::{Merge, NodeDiagnosis, RankEnd};
use gpucheck_checks::job::watch::{self as watch_check, Last, Verdict};
use gpucheck_checks::probe::exits::ExitThread;
use gpucheck_checks::probe::process;
use gpucheck_checks::probe::ranks::{self, RankProcess};
use gpucheck_checks::{Check, Outcome, Status};

use crate::cli::{OnHang, OutputArgs, WatchFlags};
use crate::cluster::watch::{Heard, Link};
use crate::model::{CheckResult, Run};
use crate::report::Format;
use crate::{interrupt, output, pipeline};

mod nodes;

/// The exit code after the watch ended a hung job (`--on-hang stop`): the
/// code `timeout(1)` exits with when it ends a command that ran too long,
/// which retry rules already read as "hung, start again".
pub const EXIT_STOPPED_HUNG: u8 = 124;
/// Between SIGTERM and SIGKILL when the watch ends a hung job: time for
/// torchrun to pass the SIGTERM on and its workers to exit.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often the loop wakes between samples.
const SLICE: Duration = Duration::from_millis(200);
/// The diagnosis (`gpucheck job`) ends within this, or is killed.
const DIAGNOSIS_TIMEOUT: Duration = Duration::from_secs(120);
/// Look for the job's ranks again at least this often while none ended
/// (a rank restarted by torchrun's elastic agent gets a new pid).
const REDISCOVER: Duration = Duration::from_secs(30);
/// `job --watch` ends once no rank of the job has been seen for this long.
const GONE_AFTER: Duration = Duration::from_secs(3);

/// The sampling period for a hang threshold: six samples within it, from
/// one to five seconds apart.
pub fn period_for(hang_after_s: f64) -> Duration {
    Duration::from_secs_f64((hang_after_s / 6.0).clamp(1.0, 5.0))
}

/// What the watch needs from the command line.
pub struct Settings {
    pub flags: WatchFlags,
    pub output: OutputArgs,
    pub capture: Option<PathBuf>,
    pub nvml_lib: Option<PathBuf>,
    pub kernel_log: Option<PathBuf>,
}

/// The job watched: CMD started by `exec --watch` (its pid is its process
/// group), or a job started elsewhere (`job --watch`, under `--pid`).
#[derive(Debug, Clone, Copy)]
pub enum Target {
    Child(i32),
    Attached(Option<i32>),
}

/// The watch's whole state between slices.
struct State<'a> {
    s: &'a Settings,
    target: Target,
    start: Instant,
    watcher: Watcher,
    verdict: Verdict,
    exits: ExitThread,
    ranks: Vec<RankProcess>,
    last: BTreeMap<u32, Last>,
    round: u64,
    last_tick: Option<Instant>,
    last_found: Option<Instant>,
    last_seen: Option<Instant>,
    /// The diagnosis's results, shown after job.watch in the reports.
    diagnosis: Vec<CheckResult>,
    written: Option<(Status, String)>,
    child_status: Option<u8>,
    /// The stop signal passed on to CMD: the ranks' ends that follow are
    /// its doing, no crash.
    passed_on: Option<i32>,
    /// Across nodes: the link to the other nodes, node 0's merge of their
    /// summaries, this node's ranks' ends (sent with its summary), and the
    /// nodes said to be silent.
    link: Option<Link>,
    merge: Merge,
    ends: Vec<RankEnd>,
    silent_said: Vec<u32>,
    /// Node 0: the diagnosis asked of other nodes (order number, when,
    /// which nodes); another node: its answer to node 0's last ask.
    asked: Option<nodes::Asked>,
    orders: u64,
    answer: Option<NodeDiagnosis>,
}

/// Watch `target` until it ends (or, attached, until a stop signal);
/// returns gpucheck's exit code.
pub fn watch(target: Target, s: &Settings, link: Option<Link>) -> anyhow::Result<u8> {
    let mut st = State::new(target, s);
    st.link = link;
    st.say(&format!(
        "watching the job (hang after {}, every {:.1} s)",
        describe_hang_after(s.flags.hang_after),
        period_for(st.watcher.hang_after_s()).as_secs_f64()
    ));
    loop {
        if let Some(code) = st.step()? {
            st.write_reports(true)?;
            return Ok(code);
        }
    }
}

fn describe_hang_after(given: Option<f64>) -> String {
    match given {
        Some(s) => format!("{s} s"),
        None => "the larger of 60 s and 5x the longest wait seen".to_string(),
    }
}

impl<'a> State<'a> {
    fn new(target: Target, s: &'a Settings) -> State<'a> {
        State {
            s,
            target,
            start: Instant::now(),
            watcher: Watcher::new(s.flags.hang_after),
            verdict: Verdict::default(),
            exits: ExitThread::start(),
            ranks: Vec::new(),
            last: BTreeMap::new(),
            round: 0,
            last_tick: None,
            last_found: None,
            last_seen: None,
            diagnosis: Vec::new(),
            written: None,
            child_status: None,
            passed_on: None,
            link: None,
            merge: Merge::default(),
            ends: Vec::new(),
            silent_said: Vec::new(),
            asked: None,
            orders: 0,
            answer: None,
        }
    }

    fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// One slice: signals, ends, a sample when due. Some(code) ends the watch.
    fn step(&mut self) -> anyhow::Result<Option<u8>> {
        if let Some(code) = self.signalled() {
            return Ok(Some(code));
        }
        self.discover();
        if let Some(code) = self.listen() {
            return Ok(Some(code));
        }
        for (pid, exit) in self.exits.wait(SLICE) {
            self.rank_ended(pid, exit);
        }
        if let Some(code) = self.reap() {
            return Ok(Some(code));
        }
        if self.job_gone() {
            self.say("the job's ranks are gone: the watch ends");
            return Ok(Some(self.attached_exit_code()));
        }
        if self.tick_due() {
            if let Some(code) = self.tick()? {
                return Ok(Some(code));
            }
        }
        Ok(None)
    }

    /// A stop signal: passed on to CMD (which then ends, and so does the
    /// watch), or the end of an attached watch.
    fn signalled(&mut self) -> Option<u8> {
        let sig = interrupt::take_interrupt()?;
        match self.target {
            Target::Child(pgid) => {
                self.passed_on = Some(sig);
                self.say(&format!(
                    "passing {} on to the command",
                    interrupt::signal_name(sig)
                ));
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pgid),
                    nix::sys::signal::Signal::try_from(sig).ok(),
                );
                None
            }
            Target::Attached(_) => {
                self.say(&format!(
                    "stopped by {}: the job goes on",
                    interrupt::signal_name(sig)
                ));
                Some(self.attached_exit_code())
            }
        }
    }

    /// Reap CMD and any orphan re-parented to gpucheck (the subreaper);
    /// Some(CMD's code) once CMD is gone.
    fn reap(&mut self) -> Option<u8> {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        let Target::Child(child) = self.target else {
            return None;
        };
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid.as_raw() == child => {
                    self.child_status = Some(code.clamp(0, 255) as u8);
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid.as_raw() == child => {
                    self.child_status = Some(128 + sig as u8);
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let code = self.child_status?;
        self.say(&format!("the command ended (exit code {code})"));
        // Anything it left behind goes with it (the link's payload, a
        // child too, after it handed on the watch's end).
        process::kill_group(child);
        self.close_link();
        process::reap_descendants();
        Some(code)
    }

    fn attached_exit_code(&self) -> u8 {
        if self.verdict.stopped {
            return EXIT_STOPPED_HUNG;
        }
        let failed = self.verdict.hang.is_some() || self.verdict.crash.is_some();
        u8::from(failed)
    }

    /// An attached watch's job is gone: its ranks ended a while ago, or
    /// `--pid`'s process ended before any rank was seen.
    fn job_gone(&self) -> bool {
        let Target::Attached(pid) = self.target else {
            return false;
        };
        if !self.ranks.is_empty() {
            return false;
        }
        match self.last_seen {
            Some(t) => t.elapsed() > GONE_AFTER,
            None => pid.is_some_and(|p| !alive(p)),
        }
    }

    /// Find the job's ranks when none is known, one ended, or a while passed.
    fn discover(&mut self) {
        let due = self.ranks.is_empty() || self.last_found.is_none_or(|t| t.elapsed() > REDISCOVER);
        if !due || self.last_found.is_some_and(|t| t.elapsed() < SLICE * 5) {
            return;
        }
        self.last_found = Some(Instant::now());
        let root = match self.target {
            Target::Child(pid) => Some(pid),
            Target::Attached(pid) => pid,
        };
        let Ok(found) = ranks::find(root) else {
            return;
        };
        for r in &found {
            self.exits.add(r.pid);
        }
        let new: Vec<u32> = found
            .iter()
            .filter(|r| !self.ranks.iter().any(|k| k.pid == r.pid))
            .map(|r| r.rank)
            .collect();
        if !new.is_empty() {
            let pids: Vec<String> = found
                .iter()
                .map(|r| format!("{}:{}", r.rank, r.pid))
                .collect();
            self.say(&format!("ranks found (rank:pid): {}", pids.join(" ")));
        }
        self.ranks = found;
    }

    fn rank_ended(&mut self, pid: i32, exit: Exit) {
        let Some(i) = self.ranks.iter().position(|r| r.pid == pid) else {
            return;
        };
        let r = self.ranks.remove(i);
        self.last.remove(&r.rank);
        self.last_found = None;
        if self.passed_on.is_some() || self.verdict.stopped {
            self.watcher.forget(r.rank);
            let words = watch_check::exit_words(exit, false);
            self.say(&format!(
                "rank {} {words} (the job was being stopped)",
                r.rank
            ));
            return;
        }
        let oom = exit == Exit::Signal(libc::SIGKILL) && oom_killed(pid, self.s);
        self.ends.push(RankEnd {
            rank: r.rank,
            pid,
            exit,
            oom,
            at_unix: unix_now(),
        });
        let ended = Ended {
            rank: r.rank,
            pid,
            exit,
            oom,
            at_s: self.now_s(),
        };
        if let Some(e) = self.watcher.ended(ended) {
            if matches!(e, Event::Crash { .. }) && self.verdict.crash.is_none() {
                self.verdict.crash = Some(e.clone());
            }
            self.log(&e);
        }
        self.last_found = None;
    }

    fn tick_due(&self) -> bool {
        let period = period_for(self.watcher.hang_after_s());
        !self.ranks.is_empty() && self.last_tick.is_none_or(|t| t.elapsed() >= period)
    }

    /// Sample every rank, judge, act.
    fn tick(&mut self) -> anyhow::Result<Option<u8>> {
        let dt = self.last_tick.map_or(0.0, |t| t.elapsed().as_secs_f64());
        self.last_tick = Some(Instant::now());
        self.last_seen = Some(Instant::now());
        self.round += 1;
        let samples = watch_check::sample(
            &self.ranks,
            &self.last,
            self.round,
            dt,
            self.s.nvml_lib.as_deref(),
        );
        for s in &samples {
            self.last.insert(
                s.rank,
                Last {
                    cpu_s: s.cpu_s,
                    at: s.at.clone(),
                },
            );
        }
        let samples = self.whole_job(samples);
        let events = self.watcher.observe(self.now_s(), &samples);
        for e in &events {
            self.log(e);
        }
        for e in events {
            if let Event::HangSuspected { waiting, .. } = &e {
                if self.follows() {
                    self.say("node 0 judges the whole job: no diagnosis here");
                    continue;
                }
                if self.ask_nodes(waiting) {
                    continue;
                }
                if let Some(code) = self.diagnose() {
                    return Ok(Some(code));
                }
            }
            if let Event::HangCleared { .. } = e {
                self.verdict.hang = None;
                self.asked = None;
            }
        }
        if let Some(code) = self.answers() {
            return Ok(Some(code));
        }
        self.write_reports(false)?;
        Ok(None)
    }

    /// The full `gpucheck job` diagnosis of this node's ranks: its
    /// `job.hang` result (None: no report came).
    fn local_hang(&mut self) -> Option<CheckResult> {
        let Some(run) = diagnosis(self.target, self.s) else {
            self.say("the diagnosis gave no report");
            return None;
        };
        let hang = run.results.iter().find(|r| r.id == "job.hang").cloned();
        self.diagnosis = run.results;
        hang
    }

    /// Diagnose this node's ranks; a confirmed hang is the verdict (and,
    /// under `--on-hang stop`, the job's end).
    fn diagnose(&mut self) -> Option<u8> {
        let Some(hang) = self
            .local_hang()
            .filter(|h| h.outcome.status == Status::Fail)
        else {
            self.say("diagnosis: not a hang");
            return None;
        };
        let action = hang.outcome.action.unwrap_or_default();
        self.confirmed(
            hang.outcome.summary.clone(),
            hang.outcome.ranks.clone(),
            action,
        )
    }

    /// A hang confirmed by a diagnosis: the verdict, and under `--on-hang
    /// stop` the job's end on every node; Some(exit code) then.
    fn confirmed(
        &mut self,
        summary: String,
        ranks: Vec<u32>,
        action: gpucheck_checks::domain::action::Action,
    ) -> Option<u8> {
        self.verdict.hang = Some((summary.clone(), ranks, action));
        self.note(&format!("hang confirmed: {summary}"));
        if self.s.flags.on_hang == OnHang::Report {
            return None;
        }
        if let Some(link) = self.link.as_ref().filter(|l| l.leads()) {
            self.say("ordering every node to end its ranks");
            link.order_stop();
        }
        self.stop_job();
        Some(EXIT_STOPPED_HUNG)
    }

    /// End the hung job: SIGTERM to its launcher's process group, SIGKILL
    /// to what is left after [`STOP_GRACE`].
    fn stop_job(&mut self) {
        let group = launcher_group(self.target, &self.ranks);
        let pids: Vec<i32> = self.ranks.iter().map(|r| r.pid).collect();
        self.note(&format!(
            "ending the hung job: SIGTERM to {}",
            group.map_or_else(|| "its ranks".to_string(), |g| format!("process group {g}"))
        ));
        signal_all(group, &pids, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && pids.iter().any(|&p| alive(p)) {
            self.reap();
            std::thread::sleep(SLICE / 2);
        }
        signal_all(group, &pids, nix::sys::signal::Signal::SIGKILL);
        if let Target::Child(_) = self.target {
            self.close_link();
            process::reap_descendants();
        }
        self.verdict.stopped = true;
    }

    fn log(&mut self, e: &Event) {
        let words = watch_check::event_words(e) + &self.on_nodes(e);
        self.note(&words);
    }

    /// An event: kept for the report and said on stderr.
    fn note(&mut self, line: &str) {
        let t = self.now_s();
        self.verdict.log.push((t, line.to_string()));
        self.say(line);
    }

    fn say(&self, line: &str) {
        if !self.s.output.quiet {
            say!("gpucheck watch [{:>7.1} s]: {line}", self.now_s());
        }
    }

    /// The watch's run: job.watch first, then the last diagnosis's results.
    fn run(&self) -> Run {
        let ranks = self
            .ranks
            .len()
            .max(self.last.len())
            .max(self.merge.ranks().len());
        let outcome = watch_check::outcome(&self.verdict, &self.watcher, self.now_s(), ranks);
        let check = &gpucheck_checks::job::Watch;
        let mut results = vec![CheckResult {
            id: check.id().to_string(),
            title: check.title().to_string(),
            group: "job".to_string(),
            profile: check.profile(),
            outcome: Outcome {
                duration_ms: self.start.elapsed().as_secs_f64() * 1000.0,
                ..outcome
            },
        }];
        results.extend(self.diagnosis.iter().cloned());
        pipeline::run_of(
            gpucheck_checks::job::JOB_PROFILE,
            results,
            started_unix(self.start),
        )
    }

    /// Rewrite the report files: when the verdict changed (or `last`), and
    /// `--prom` every time.
    fn write_reports(&mut self, last: bool) -> anyhow::Result<()> {
        let run = self.run();
        let head = run
            .results
            .first()
            .map(|r| (r.outcome.status, r.outcome.summary.clone()));
        let changed = head != self.written;
        let o = &self.s.output;
        let mut files = vec![(Format::Prom, o.prom.as_deref())];
        if changed || last {
            files.extend([
                (Format::Json, o.json.as_deref()),
                (Format::Junit, o.junit.as_deref()),
                (Format::Markdown, o.markdown.as_deref()),
                (Format::Html, o.html.as_deref()),
            ]);
            self.written = head;
        }
        let files: Vec<_> = files
            .into_iter()
            .filter(|(_, p)| p.is_some_and(|p| p.as_os_str() != "-"))
            .collect();
        let outputs = output::plan(Format::Table, &files).map_err(crate::UsageError)?;
        outputs
            .write_files_with(&run, |format, text| match format {
                Format::Prom => text + &crate::report::prom::watch_series(&self.watcher),
                _ => text,
            })
            .map_err(crate::UsageError)?;
        Ok(())
    }
}

/// Whether the kernel log says the OOM killer killed `pid`.
fn oom_killed(pid: i32, s: &Settings) -> bool {
    use gpucheck_checks::probe::{kernel_log, sysfs};
    let wait = Duration::from_secs(3);
    kernel_log::read_kernel_log(s.kernel_log.as_deref(), sysfs::boot_epoch(), wait)
        .is_ok_and(|log| log.oom_kills.iter().any(|k| k.pid == pid as u32))
}

/// Run `gpucheck job` on the watched job as a process of its own, its
/// table on gpucheck's stderr; its JSON report, when it wrote one.
fn diagnosis(target: Target, s: &Settings) -> Option<Run> {
    let json = tempfile::Builder::new()
        .prefix("gpucheck-watch-")
        .suffix(".json")
        .tempfile()
        .ok()?;
    let exe = std::env::current_exe().ok()?;
    let mut cmd = Command::new(exe);
    cmd.args(["job", "--color", "never", "--json"])
        .arg(json.path());
    let pid = match target {
        Target::Child(pid) => Some(pid),
        Target::Attached(pid) => pid,
    };
    if let Some(pid) = pid {
        cmd.arg("--pid").arg(pid.to_string());
    }
    for (flag, path) in [
        ("--nvml-lib", &s.nvml_lib),
        ("--kernel-log", &s.kernel_log),
        ("--capture", &s.capture),
    ] {
        if let Some(p) = path {
            cmd.arg(flag).arg(p);
        }
    }
    if s.output.quiet {
        cmd.arg("--quiet");
    }
    let out = process::run_bounded(cmd, DIAGNOSIS_TIMEOUT).ok()?;
    if !s.output.quiet {
        let _ = crate::emit_to(std::io::stderr().lock(), "stderr", &out.stdout);
    }
    let text = std::fs::read_to_string(json.path()).ok()?;
    serde_json::from_str(&text).ok()
}

/// The process group to end: CMD's own, else the `--pid`'s or the ranks'
/// launcher's, unless that is gpucheck's own group.
fn launcher_group(target: Target, ranks: &[RankProcess]) -> Option<i32> {
    let own = nix::unistd::getpgrp().as_raw();
    let top = match target {
        Target::Child(pid) => return Some(pid),
        Target::Attached(Some(pid)) => pid,
        Target::Attached(None) => {
            let first = ranks.first()?;
            process::parent_and_group(first.pid)
                .map(|(ppid, _)| ppid)
                .filter(|&p| p > 1)?
        }
    };
    process::parent_and_group(top)
        .map(|(_, group)| group)
        .filter(|&g| g != own && g > 1)
}

fn signal_all(group: Option<i32>, pids: &[i32], sig: nix::sys::signal::Signal) {
    use nix::sys::signal::{kill, killpg};
    use nix::unistd::Pid;
    if let Some(g) = group {
        let _ = killpg(Pid::from_raw(g), sig);
    }
    for &p in pids {
        let _ = kill(Pid::from_raw(p), sig);
    }
}

fn alive(pid: i32) -> bool {
    gpucheck_checks::probe::exits::proc_sample(pid).is_some_and(|s| s.state != 'Z')
}

/// Seconds since the Unix epoch, now.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn started_unix(start: Instant) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    now.saturating_sub(start.elapsed().as_secs())
}

/// Give the terminal to CMD's process group when gpucheck holds it (its
/// stdin is a terminal in the foreground): Ctrl-C then reaches CMD as it
/// would without gpucheck, and CMD may read the terminal. Returns the
/// group to give it back to.
pub fn hand_terminal(child_group: i32) -> Option<nix::unistd::Pid> {
    use nix::unistd::{getpgrp, tcgetpgrp, tcsetpgrp, Pid};
    let stdin = std::io::stdin();
    let own = getpgrp();
    if tcgetpgrp(&stdin).ok()? != own {
        return None;
    }
    tcsetpgrp(&stdin, Pid::from_raw(child_group)).ok()?;
    Some(own)
}

/// Take the terminal back after CMD ended ([`hand_terminal`]).
pub fn take_terminal(own: Option<nix::unistd::Pid>) {
    use nix::sys::signal::{signal, SigHandler, Signal};
    let Some(own) = own else { return };
    // A background group that sets the terminal's group gets SIGTTOU.
    // SAFETY: setting a plain disposition; no handler code runs.
    unsafe {
        let old = signal(Signal::SIGTTOU, SigHandler::SigIgn);
        let _ = nix::unistd::tcsetpgrp(std::io::stdin(), own);
        if let Ok(old) = old {
            let _ = signal(Signal::SIGTTOU, old);
        }
    }
}

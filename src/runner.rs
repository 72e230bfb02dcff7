//! The runner: selects checks (profile, `--only`, `--skip`), runs them in
//! CATALOG order, resolves `needs`, enforces timeouts, and runs `child`
//! checks in a re-executed copy of gpucheck in its own process group so a hung
//! or crashing probe (CUDA, NCCL, Python) can be killed, group and all.
//!
//! Nothing gpucheck starts outlives it: a child's whole process group is
//! killed when the child exits, times out, or gpucheck is interrupted.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use gpucheck_checks::domain::text;
use gpucheck_checks::probe::process::{
    isolate, kill_group, reap_descendants, supervise_lines, wait_killed, Ending, KILL_GRACE,
};
use gpucheck_checks::probe::{CHILD_ENV, PARTIAL_PREFIX, PROGRESS_PREFIX, STAGE_PREFIX};
use gpucheck_checks::seam;
use gpucheck_checks::{
    Cause, Check, Context, Isolation, Options, Outcome, Profile, Status, CATALOG,
};
use nix::sys::signal::Signal;
use thiserror::Error;

use crate::interrupt::{self, interrupted, signal_name};
use crate::model::CheckResult;

/// Keep at most this much of a child's stderr (the tail) for error reports.
const STDERR_TAIL_BYTES: usize = 4096;
/// What to do when a thread or process cannot be started.
const LIMITS_HINT: &str = "the process/thread limit (`ulimit -u`) or the address-space limit \
                           (`ulimit -v`) is too low for gpucheck: raise it and run again";
/// Exit status of an isolated child that stopped because gpucheck died or
/// a stop signal reached it (normally never seen: it kills its own group).
const EXIT_GUARD: i32 = 3;
/// How often the runner wakes to look for a signal while waiting on a check.
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Error, PartialEq)]
pub enum SelectError {
    #[error("unknown check or group '{pattern}' in --{flag}; {hint}")]
    Unknown {
        flag: &'static str,
        pattern: String,
        /// The nearest id or group, else where to find them all.
        hint: String,
    },
    #[error("--{flag} got an empty pattern")]
    Empty { flag: &'static str },
    #[error("the selection runs no checks (--only and --skip cancel out)")]
    Nothing,
    #[error(
        "--only {pattern} selects only {checks}, which {verb} under a larger profile: add \
         --profile {profile}, or name {them} (--only {ids})"
    )]
    AboveProfile {
        pattern: String,
        checks: String,
        verb: &'static str,
        profile: &'static str,
        them: &'static str,
        ids: String,
    },
}

/// Checks of these profiles put the GPUs under load or run for minutes:
/// a group or a glob in `--only` selects them only when the profile
/// includes them (an exact id always does), so `--only gpu` in a health
/// check stays the seconds it was.
fn long_running(check: &dyn Check) -> bool {
    matches!(check.profile(), Profile::Full | Profile::Burn)
}

/// One `--only`/`--skip` pattern: a check id, a group (`gpu` or `gpu.*`), or
/// a glob with `*`, `?` and `[...]` (`*.driver`).
struct Pattern<'a> {
    text: &'a str,
    /// The compiled glob; None when the text is no valid glob (then only an
    /// exact id or group can match). globset compiles to a regular
    /// expression, so no pattern (`**********x`) can take exponential time.
    glob: Option<globset::GlobMatcher>,
}

impl<'a> Pattern<'a> {
    fn new(text: &'a str) -> Self {
        let glob = globset::GlobBuilder::new(text)
            .literal_separator(false)
            .build()
            .ok()
            .map(|g| g.compile_matcher());
        Pattern { text, glob }
    }

    /// True when this pattern selects the check `id`.
    fn selects(&self, id: &str) -> bool {
        let group = id.split('.').next().unwrap_or(id);
        self.text == id
            || self.text == group
            || self.text.strip_suffix(".*") == Some(group)
            || self.glob.as_ref().is_some_and(|g| g.is_match(id))
    }

    /// Whether `--only` with this pattern runs `check` under `profile`:
    /// every check it names, except a long-running one the profile leaves
    /// out, which only its exact id selects.
    fn runs(&self, check: &dyn Check, profile: Profile) -> bool {
        self.text == check.id()
            || (self.selects(check.id()) && (!long_running(check) || profile.includes(check)))
    }
}

fn compile(patterns: &[String]) -> Vec<Pattern<'_>> {
    patterns.iter().map(|p| Pattern::new(p.trim())).collect()
}

/// True when `pattern` selects the check `id`.
/// Edits (insertions, deletions, substitutions, swaps of neighbours) within
/// which a misspelt check id or group is taken for the nearest one.
const MAX_TYPO_EDITS: usize = 3;

/// The check id or group nearest to `typed`, if it is near enough.
pub fn closest_name(typed: &str) -> Option<&'static str> {
    let mut names: Vec<&'static str> = CATALOG.iter().map(|c| c.id()).collect();
    for c in CATALOG {
        if !names.contains(&c.group()) {
            names.push(c.group());
        }
    }
    names
        .into_iter()
        .map(|n| (edit_distance(typed, n), n))
        .filter(|(d, _)| *d <= MAX_TYPO_EDITS)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// Optimal string alignment distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
fn matches(pattern: &str, id: &str) -> bool {
    Pattern::new(pattern).selects(id)
}

/// The checks to run, in CATALOG order. `--only` ignores the profile,
/// except that a group or glob never pulls in a long-running check the
/// profile leaves out ([`long_running`]).
pub fn select(
    profile: Profile,
    only: &[String],
    skip: &[String],
) -> Result<Vec<&'static dyn Check>, SelectError> {
    let (only_p, skip_p) = (compile(only), compile(skip));
    for (flag, patterns, compiled) in [("only", only, &only_p), ("skip", skip, &skip_p)] {
        for (p, pattern) in patterns.iter().zip(compiled) {
            if p.trim().is_empty() {
                return Err(SelectError::Empty { flag });
            }
            if !CATALOG.iter().any(|c| pattern.selects(c.id())) {
                return Err(SelectError::Unknown {
                    flag,
                    pattern: p.clone(),
                    hint: match closest_name(p) {
                        Some(name) => format!("did you mean {name}?"),
                        None => "`gpucheck list` shows every check".to_string(),
                    },
                });
            }
        }
    }
    let picked: Vec<&'static dyn Check> = CATALOG
        .iter()
        .copied()
        .filter(|c| {
            if only.is_empty() {
                profile.includes(*c)
            } else {
                only_p.iter().any(|p| p.runs(*c, profile))
            }
        })
        .filter(|c| !skip_p.iter().any(|p| p.selects(c.id())))
        .collect();
    if picked.is_empty() {
        return Err(above_profile(profile, only, &only_p).unwrap_or(SelectError::Nothing));
    }
    Ok(picked)
}

/// Why `--only` selected nothing when its patterns name only long-running
/// checks the profile leaves out.
fn above_profile(profile: Profile, only: &[String], patterns: &[Pattern]) -> Option<SelectError> {
    let named: Vec<&dyn Check> = CATALOG
        .iter()
        .copied()
        .filter(|c| patterns.iter().any(|p| p.selects(c.id())))
        .collect();
    if named.is_empty()
        || named
            .iter()
            .any(|c| !long_running(*c) || profile.includes(*c))
    {
        return None;
    }
    let ids: Vec<&str> = named.iter().map(|c| c.id()).collect();
    let burn = named.iter().all(|c| c.profile() == Profile::Burn);
    let one = ids.len() == 1;
    Some(SelectError::AboveProfile {
        pattern: only.join(","),
        checks: ids.join(", "),
        verb: if one { "runs" } else { "run" },
        profile: if burn { "burn" } else { "full" },
        them: if one { "it" } else { "them" },
        ids: ids.join(","),
    })
}

/// Run the selected checks in order. `timeout_override` is `--timeout`;
/// `deadline`, when set, ends the whole run: no check waits past it, and a
/// check whose turn comes after it is skipped.
pub fn run_checks(
    checks: &[&'static dyn Check],
    options: &Options,
    timeout_override: Option<Duration>,
    deadline: Option<Instant>,
) -> Vec<CheckResult> {
    let mut results: Vec<CheckResult> = Vec::with_capacity(checks.len());
    let mut earlier: BTreeMap<String, Outcome> = BTreeMap::new();
    for (done, check) in checks.iter().enumerate() {
        crate::progress::check_started(done, check.id());
        let started = Instant::now();
        let mut outcome = if let Some(sig) = interrupted() {
            Outcome::skip(format!("not run: gpucheck was interrupted by {sig}"))
                .with_cause(Cause::Interrupted { signal: sig })
        } else if let Some((need, status)) = failed_need(*check, &earlier) {
            Outcome::skip(format!("needs {need}, which {}", past_tense(status)))
                .with_cause(Cause::NeedsFailed { need })
        } else if deadline.is_some_and(|d| started >= d) {
            Outcome::skip("not run: the run's time budget was spent by the checks before it")
        } else {
            let mut timeout = timeout_override.unwrap_or_else(|| check.timeout());
            if let Some(d) = deadline {
                timeout = timeout.min(d - started);
            }
            let mut options = options.clone();
            options.timeout_s = timeout.as_secs_f64();
            let ctx = Context {
                options,
                earlier: earlier.clone(),
            };
            // Under replay nothing can hang or crash: every check runs here,
            // and one that timed out in the captured run times out again.
            seam::begin_check(check.id());
            if let Some(recorded) = seam::replayed_timeout::<Outcome>(check.id()) {
                recorded
            } else {
                let outcome = match check.isolation() {
                    Isolation::Child if !seam::is_replay() => run_in_child(*check, &ctx, timeout),
                    _ => run_in_process(*check, ctx, timeout),
                };
                if outcome.cause.as_ref().is_some_and(|c| c.is_timeout()) {
                    seam::keep_timeout(check.id(), &outcome);
                }
                outcome
            }
        };
        outcome.drop_non_finite_metrics();
        outcome.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        earlier.insert(check.id().to_string(), outcome.clone());
        results.push(CheckResult {
            id: check.id().to_string(),
            title: check.title().to_string(),
            group: check.group().to_string(),
            profile: check.profile(),
            outcome,
        });
    }
    results
}

fn past_tense(status: Status) -> &'static str {
    match status {
        Status::Fail => "failed",
        Status::Error => "errored",
        Status::Skip => "was skipped",
        Status::Warn => "warned",
        Status::Pass => "passed",
    }
}

/// The first `needs` entry that ran and did not pass or warn. Needs that were
/// not selected in this run are not enforced: the check probes for itself.
fn failed_need(check: &dyn Check, earlier: &BTreeMap<String, Outcome>) -> Option<(String, Status)> {
    check.needs().iter().find_map(|need| {
        earlier
            .get(*need)
            .filter(|o| !o.status.satisfies_needs())
            .map(|o| (need.to_string(), o.status))
    })
}

fn timeout_outcome(check: &dyn Check, timeout: Duration, stage: Option<&str>) -> Outcome {
    // "2", "1.5", "0.005": as given, never rounded down to "0.0".
    Outcome::fail(
        text::timed_out(timeout.as_secs_f64(), stage),
        check.timeout_hint(),
    )
    .with_cause(Cause::TimedOut {
        after_s: timeout.as_secs_f64(),
        stage: stage.map(str::to_string),
    })
}

fn interrupted_outcome(sig: &str) -> Outcome {
    Outcome::error(format!("interrupted by {sig} before it finished"))
        .with_hint(format!(
            "gpucheck was stopped by {sig} while this check ran, so it has no verdict; run \
             gpucheck again and let it finish"
        ))
        .with_cause(Cause::Interrupted {
            signal: sig.to_string(),
        })
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Run a check on a worker thread and stop waiting at the timeout. A hung
/// in-process probe cannot be killed; its thread is abandoned and dies with
/// gpucheck at exit.
fn run_in_process(check: &'static dyn Check, ctx: Context, timeout: Duration) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name(check.id().to_string())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check.run(&ctx)));
            let _ = tx.send(result);
        });
    if let Err(e) = spawned {
        return Outcome::error(format!("could not start a thread for the check: {e}"))
            .with_hint(LIMITS_HINT);
    }
    let deadline = Instant::now() + timeout;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return timeout_outcome(check, timeout, None).with_cause(Cause::TimedOut {
                after_s: timeout.as_secs_f64(),
                stage: check.timeout_stage(),
            });
        }
        match rx.recv_timeout(POLL.min(deadline - now)) {
            Ok(Ok(outcome)) => return outcome,
            Ok(Err(payload)) if payload.downcast_ref::<seam::Miss>().is_some() => {
                let miss = payload.downcast_ref::<seam::Miss>();
                return Outcome::skip(miss.map(seam::Miss::reason).unwrap_or_default()).with_fact(
                    "capture_key",
                    miss.map(|m| m.key.clone()).unwrap_or_default(),
                );
            }
            Ok(Err(panic)) => {
                return Outcome::error(format!(
                    "gpucheck bug: the check panicked: {}",
                    panic_message(panic.as_ref())
                ))
                .with_hint("please report this with the output of `gpucheck --json -`")
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(sig) = interrupted() {
                    return interrupted_outcome(&sig);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Outcome::error("the check's thread ended without a result")
            }
        }
    }
}

/// A child's stderr line as it comes: its progress goes to the progress
/// line and its latest partial outcome into `partial`, neither kept;
/// everything else is kept for the error report.
fn live_line(line: &[u8], partial: &std::sync::Mutex<Option<Outcome>>) -> bool {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\n', '\r']);
    if let Some(step) = text.strip_prefix(PROGRESS_PREFIX) {
        crate::progress::step(step);
        return false;
    }
    if let Some(json) = text.strip_prefix(PARTIAL_PREFIX) {
        if let Ok(o) = serde_json::from_str::<Outcome>(json) {
            *partial.lock().unwrap_or_else(|e| e.into_inner()) = Some(o);
        }
        return false;
    }
    true
}

/// The tail of a child's stderr, without stage markers, for error reports.
fn stderr_tail(stderr: &str) -> String {
    let text: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with(STAGE_PREFIX) && !l.trim().is_empty())
        .collect();
    let joined = text.join("\n");
    if joined.len() <= STDERR_TAIL_BYTES {
        return joined;
    }
    let mut start = joined.len() - STDERR_TAIL_BYTES;
    while !joined.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &joined[start..])
}

fn last_stage(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(STAGE_PREFIX))
        .map(|s| s.trim().to_string())
}

/// Run a check in `gpucheck __child ID`, in its own process group, with the
/// context on stdin and the outcome as JSON on stdout.
/// Start `gpucheck __child ID` isolated, with `ctx` fed to its stdin by a
/// thread of its own; the error is the check's outcome.
fn start_child(check: &dyn Check, ctx: &Context) -> Result<std::process::Child, Box<Outcome>> {
    let exe = std::env::current_exe()
        .map_err(|e| Outcome::error(format!("cannot find gpucheck's own binary: {e}")))
        .map_err(Box::new)?;
    let input = serde_json::to_vec(ctx)
        .map_err(|e| Outcome::error(format!("cannot encode the check context: {e}")))
        .map_err(Box::new)?;
    let mut cmd = Command::new(exe);
    cmd.arg("__child")
        .arg(check.id())
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A toolkit stub libcuda.so first on LD_LIBRARY_PATH: start the child
    // without it, so cudarc there loads the driver cuda.driver judges.
    let path = std::env::var_os("LD_LIBRARY_PATH");
    if let Some((path, stub)) = gpucheck_checks::probe::cuda::child_library_path(path.as_deref()) {
        cmd.env("LD_LIBRARY_PATH", path)
            .env(gpucheck_checks::probe::cuda::STUB_ENV, stub);
    }
    if seam::is_recording() {
        cmd.env(seam::RECORD_ENV, "1");
    } else {
        cmd.env_remove(seam::RECORD_ENV);
    }
    isolate(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| {
        Box::new(
            Outcome::error(format!("cannot start the isolated probe: {e}")).with_hint(LIMITS_HINT),
        )
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        // On a thread: the context can outgrow the pipe buffer (every earlier
        // outcome rides along), and a child stuck before reading it must not
        // hold the runner past the deadline. A child that dies before reading
        // its input shows up in what the supervisor sees.
        let writer = thread::Builder::new()
            .name("child-input".into())
            .spawn(move || {
                let _ = stdin.write_all(&input);
            });
        if let Err(e) = writer {
            kill_group(child.id() as i32);
            let _ = wait_killed(&mut child, KILL_GRACE);
            return Err(Box::new(
                Outcome::error(format!(
                    "could not start a thread to feed the isolated probe: {e}"
                ))
                .with_hint(LIMITS_HINT),
            ));
        }
    }
    Ok(child)
}

fn run_in_child(check: &dyn Check, ctx: &Context, timeout: Duration) -> Outcome {
    let child = match start_child(check, ctx) {
        Ok(child) => child,
        Err(outcome) => return *outcome,
    };
    let pgid = child.id();
    let partial = Arc::new(std::sync::Mutex::new(None::<Outcome>));
    let latest = Arc::clone(&partial);
    // Before the pipes are read to their end, anything the child started
    // that escaped its group is killed too: it could hold them open forever.
    let seen = supervise_lines(
        child,
        timeout,
        || interrupted().is_some(),
        reap_descendants,
        move |line| live_line(line, &latest),
    );
    // A probe killed at its timeout or by an interruption could not remove
    // the payload files it wrote: they are removed here.
    gpucheck_checks::probe::python::remove_payload_dirs_of(pgid);
    let err = String::from_utf8_lossy(&seen.stderr);
    let with_tail = |mut o: Outcome| {
        let tail = stderr_tail(&err);
        if !tail.is_empty() {
            o.facts.insert("stderr_tail".to_string(), tail.into());
        }
        o
    };

    let mut ended = match seen.ending {
        Ending::Exited(status) => Ok(status),
        Ending::WaitFailed(e) => Err(Outcome::error(format!("cannot wait for the probe: {e}"))),
        Ending::Unwatched(e) => Err(Outcome::error(format!(
            "could not start a thread to read the isolated probe's output: {e}"
        ))
        .with_hint(LIMITS_HINT)),
        Ending::Stopped => Err(stopped_outcome(&partial)),
        // A timeout: name the stage it hung in, when the child said.
        Ending::TimedOut => Err(with_tail(timeout_outcome(
            check,
            timeout,
            last_stage(&err).as_deref(),
        ))),
    };
    if !seen.reaped {
        if let Err(o) = &mut ended {
            o.facts.insert(
                "unkillable_pid".to_string(),
                format!(
                    "{pgid}: still there {} s after SIGKILL, so stuck in the kernel \
                     (a hung driver: look for Xid errors in `dmesg`); gpucheck left it behind",
                    KILL_GRACE.as_secs()
                )
                .into(),
            );
        }
    }
    let status = match ended {
        Ok(s) => s,
        Err(o) => return o,
    };
    if let Some(sig) = status.signal() {
        return with_tail(
            Outcome::error(format!("probe crashed: {}", signal_name(sig)))
                .with_hint(crash_hint(sig))
                .with_cause(Cause::Signal {
                    signal: signal_name(sig),
                }),
        );
    }
    match serde_json::from_slice::<ChildReply>(&seen.stdout) {
        Ok(reply) => {
            if let Some(seam) = seam::global() {
                seam.keep(reply.answers);
            }
            reply.outcome
        }
        Err(_) => with_tail(Outcome::error(format!(
            "the isolated probe exited with status {} without a result",
            status.code().unwrap_or(-1)
        ))),
    }
}

/// An isolated check stopped by an interruption: what it had done so far
/// when it said (a burn's finished rounds), else no verdict.
fn stopped_outcome(partial: &std::sync::Mutex<Option<Outcome>>) -> Outcome {
    let sig = interrupted().unwrap_or_else(|| "a signal".to_string());
    match partial.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(o) => o.with_cause(Cause::Interrupted { signal: sig }),
        None => interrupted_outcome(&sig),
    }
}

/// What an isolated child writes on its stdout: its outcome and, when the
/// run records a capture, every answer its probes got.
#[derive(serde::Serialize, serde::Deserialize)]
struct ChildReply {
    outcome: Outcome,
    #[serde(default)]
    answers: seam::Answers,
}

/// What to do about an isolated probe that died of signal `sig`.
fn crash_hint(sig: i32) -> String {
    match sig {
        // Nothing crashes into SIGKILL: the kernel's OOM killer or someone
        // else killed it (gpucheck's own kill is a timeout, reported as such).
        libc::SIGKILL => "the probe was killed from outside: look for the OOM killer in \
                          `dmesg` (out of host memory), or a process manager that kills \
                          long-running processes"
            .to_string(),
        _ => "the driver or library crashed inside the isolated probe; run it again with \
              --verbose, and check `dmesg` for Xid errors"
            .to_string(),
    }
}

/// In `gpucheck __child`: make sure nothing this child starts outlives
/// gpucheck, even a gpucheck killed by SIGKILL, which cleans up nothing.
/// The child becomes the subreaper of what it starts, and asks the kernel
/// for SIGTERM (a stop signal, caught) instead of SIGKILL when gpucheck
/// dies; a watcher thread then kills every descendant (its own group, the
/// probes' groups, anything that left for a session of its own) and last
/// its own group, itself included. Without a thread (a low `ulimit -u`) the
/// child keeps dying by SIGKILL with gpucheck, as before.
fn guard_child_tree() {
    use gpucheck_checks::probe::process;
    use nix::sys::prctl;
    let parent = nix::unistd::getppid();
    process::become_subreaper();
    let watcher = thread::Builder::new()
        .name("child-guard".into())
        .spawn(move || loop {
            // SIGTERM from the kernel, another stop signal, or a new parent
            // (gpucheck died before the death signal was changed).
            if interrupted().is_some() || nix::unistd::getppid() != parent {
                process::reap_descendants();
                process::kill_group(nix::unistd::getpgrp().as_raw());
                std::process::exit(EXIT_GUARD);
            }
            thread::sleep(POLL);
        });
    if watcher.is_ok() && interrupt::handles(libc::SIGTERM) {
        let _ = prctl::set_pdeathsig(Signal::SIGTERM);
    }
}

/// `gpucheck __child ID`: read the context from stdin, run the check, write
/// the outcome as JSON to the original stdout. While the check runs, fd 1
/// points at stderr so library noise (NCCL_DEBUG, Python) cannot corrupt the
/// result.
pub fn child_main(id: &str) -> i32 {
    let Some(check) = gpucheck_checks::find(id) else {
        say!("gpucheck: __child: unknown check '{id}'");
        return 2;
    };
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        say!("gpucheck: __child: cannot read the context: {e}");
        return 2;
    }
    let ctx: Context = match serde_json::from_slice(&input) {
        Ok(c) => c,
        Err(e) => {
            say!("gpucheck: __child: bad context: {e}");
            return 2;
        }
    };
    let Ok(result_fd) = nix::unistd::dup(1) else {
        say!("gpucheck: __child: cannot duplicate stdout");
        return 2;
    };
    guard_child_tree();
    if std::env::var_os(seam::RECORD_ENV).is_some() {
        seam::install(seam::Mode::Record(Default::default()));
    }
    let _ = nix::unistd::dup2(2, 1);
    seam::begin_check(id);
    let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check.run(&ctx))) {
        Ok(o) => o,
        Err(p) => Outcome::error(format!(
            "gpucheck bug: the check panicked: {}",
            panic_message(p.as_ref())
        )),
    };
    let mut outcome = outcome;
    outcome.drop_non_finite_metrics();
    let reply = ChildReply {
        outcome,
        answers: seam::global().map(|s| s.recorded()).unwrap_or_default(),
    };
    let json = serde_json::to_vec(&reply).unwrap_or_default();
    // SAFETY: result_fd is the dup of the original stdout, owned here.
    let mut file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(result_fd) };
    if file.write_all(&json).is_err() {
        return 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_globs_leave_out_the_long_checks_the_profile_does_not_run() {
        let ids = |profile, only: &[&str]| {
            let only: Vec<String> = only.iter().map(|s| s.to_string()).collect();
            select(profile, &only, &[]).map(|c| c.iter().map(|c| c.id()).collect::<Vec<_>>())
        };
        let gpu = ids(Profile::Standard, &["gpu"]).unwrap();
        assert!(
            gpu.contains(&"gpu.ecc") && gpu.contains(&"gpu.topology"),
            "{gpu:?}"
        );
        assert!(!gpu
            .iter()
            .any(|id| ["gpu.compute", "gpu.burn"].contains(id)));
        // A quick profile still gets a group's standard checks, as before.
        assert!(ids(Profile::Quick, &["nccl"])
            .unwrap()
            .contains(&"nccl.allreduce"));
        let full = ids(Profile::Full, &["gpu.*"]).unwrap();
        assert!(full.contains(&"gpu.compute") && !full.contains(&"gpu.burn"));
        assert!(ids(Profile::Burn, &["gpu"]).unwrap().contains(&"gpu.burn"));
        // An exact id always selects its check.
        assert_eq!(
            ids(Profile::Quick, &["gpu.compute"]).unwrap(),
            ["gpu.compute"]
        );
        assert_eq!(
            ids(Profile::Standard, &["ddp"]).unwrap_err().to_string(),
            "--only ddp selects only ddp.benchmark, which runs under a larger profile: add \
             --profile full, or name it (--only ddp.benchmark)"
        );
        assert_eq!(
            ids(Profile::Quick, &["gpu.burn*"]).unwrap_err().to_string(),
            "--only gpu.burn* selects only gpu.burn, which runs under a larger profile: add \
             --profile burn, or name it (--only gpu.burn)"
        );
    }

    #[test]
    fn patterns_match_ids_groups_and_globs() {
        assert!(matches("host.shm", "host.shm"));
        assert!(matches("host", "host.shm"));
        assert!(matches("host.*", "host.shm"));
        assert!(matches("*.shm", "host.shm"));
        assert!(matches("h?st.s*", "host.shm"));
        assert!(!matches("hos", "host.shm"));
        assert!(!matches("net", "host.shm"));
        assert!(!matches("host.sh", "host.shm"));
        assert!(matches("*", "host.shm"));
        assert!(matches("host.sh?", "host.shm"));
        assert!(!matches("host.shm?", "host.shm"));
        assert!(matches("*s*m", "host.shm"));
        assert!(!matches("*s*x", "host.shm"));
        assert!(matches("**.*", "host.shm"));
    }

    #[test]
    fn many_stars_cannot_hang_the_glob() {
        // The old recursive matcher took exponential time on this (minutes).
        let p = format!("{}x", "*".repeat(40));
        assert!(!matches(&p, "env.cuda_visible_devices"));
        let p = "*a".repeat(30) + "*";
        assert!(!matches(&p, "env.cuda_visible_devices"));
        assert!(matches(&"*".repeat(40), "env.cuda_visible_devices"));
    }

    #[test]
    fn unknown_pattern_is_an_error_naming_the_nearest_id() {
        let Err(err) = select(Profile::Standard, &["gpu.eccc".to_string()], &[]) else {
            panic!("an unknown id must be rejected")
        };
        let msg = err.to_string();
        assert!(
            msg.contains("unknown check or group 'gpu.eccc' in --only"),
            "{msg}"
        );
        assert!(msg.ends_with("did you mean gpu.ecc?"), "{msg}");
    }

    #[test]
    fn quick_profile_excludes_standard_checks() {
        let quick = select(Profile::Quick, &[], &[]).unwrap();
        assert!(quick.iter().all(|c| c.profile() == Profile::Quick));
        let full = select(Profile::Full, &[], &[]).unwrap();
        let apart = CATALOG.iter().filter(|c| c.profile() == Profile::Burn);
        assert_eq!(full.len(), CATALOG.len() - apart.count());
    }

    #[test]
    fn only_ignores_profile_and_skip_removes() {
        let picked = select(
            Profile::Quick,
            &["host".to_string()],
            &["host.shm".to_string()],
        )
        .unwrap();
        let ids: Vec<&str> = picked.iter().map(|c| c.id()).collect();
        assert!(ids.contains(&"host.devices"));
        assert!(!ids.contains(&"host.shm"));
    }

    #[test]
    fn skip_everything_is_an_error() {
        assert!(matches!(
            select(Profile::Full, &[], &["*".to_string()]),
            Err(SelectError::Nothing)
        ));
    }

    #[test]
    fn timeout_summary_shows_the_timeout_as_given() {
        let check = CATALOG[0];
        let summary =
            |secs: f64, stage| timeout_outcome(check, Duration::from_secs_f64(secs), stage).summary;
        assert_eq!(summary(2.0, None), "timed out after 2 s");
        assert_eq!(
            summary(1.25, Some("cuInit")),
            "timed out after 1.25 s in cuInit"
        );
        // Not "0.0 s" for a short --timeout.
        assert_eq!(summary(0.005, None), "timed out after 0.005 s");
        let o = timeout_outcome(check, Duration::from_secs(2), None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.hint.unwrap_or_default().contains("--timeout SECS"));
    }

    /// A check whose per-GPU metric is NaN (a division by a zero time).
    struct NanMetric;

    impl Check for NanMetric {
        fn id(&self) -> &'static str {
            "test.nan"
        }
        fn title(&self) -> &'static str {
            "NaN metric"
        }
        fn profile(&self) -> Profile {
            Profile::Quick
        }
        fn explain(&self) -> &'static str {
            "test"
        }
        fn run(&self, _: &Context) -> Outcome {
            Outcome::pass("ran").with_device(gpucheck_checks::DeviceResult {
                index: 0,
                label: None,
                name: "GPU".into(),
                uuid: None,
                status: Status::Pass,
                summary: "ok".into(),
                metrics: vec![gpucheck_checks::Metric {
                    name: "busbw".into(),
                    value: f64::NAN,
                    unit: "GB/s".into(),
                }],
            })
        }
    }

    #[test]
    fn a_nan_metric_never_reaches_a_report() {
        let results = run_checks(&[&NanMetric], &Options::default(), None, None);
        let o = &results[0].outcome;
        assert_eq!((o.status, o.summary.as_str()), (Status::Pass, "ran"));
        assert!(o.devices[0].metrics.is_empty(), "{o:?}");
    }

    /// A check whose probe found no answer in the capture.
    struct MissingAnswer;

    impl Check for MissingAnswer {
        fn id(&self) -> &'static str {
            "test.miss"
        }
        fn title(&self) -> &'static str {
            "Missing answer"
        }
        fn profile(&self) -> Profile {
            Profile::Quick
        }
        fn explain(&self) -> &'static str {
            "test"
        }
        fn run(&self, _: &Context) -> Outcome {
            std::panic::resume_unwind(Box::new(seam::Miss {
                key: "net::resolve(node01)".into(),
                why: String::new(),
            }))
        }
    }

    #[test]
    fn a_probe_answer_missing_from_the_capture_skips_the_check_by_name() {
        let results = run_checks(&[&MissingAnswer], &Options::default(), None, None);
        let o = &results[0].outcome;
        assert_eq!(o.status, Status::Skip, "{o:?}");
        assert_eq!(o.summary, "the capture holds no network answer");
        assert_eq!(
            o.facts.get("capture_key").map(|v| v.to_string()).as_deref(),
            Some("net::resolve(node01)")
        );
    }

    #[test]
    fn a_killed_probe_points_at_the_oom_killer_a_crash_at_the_driver() {
        assert!(crash_hint(libc::SIGKILL).contains("OOM killer"));
        assert!(!crash_hint(libc::SIGKILL).contains("crashed"));
        assert!(crash_hint(libc::SIGSEGV).contains("Xid"));
        assert!(crash_hint(libc::SIGABRT).contains("crashed inside the isolated probe"));
    }

    #[test]
    fn a_childs_live_lines_are_acted_on_and_not_kept() {
        let partial = std::sync::Mutex::new(None);
        assert!(!live_line(
            b"gpucheck-progress: round 2 \xc2\xb7 5s done\n",
            &partial
        ));
        let json = serde_json::to_string(&Outcome::error("interrupted after 1 round")).unwrap();
        let line = format!("{PARTIAL_PREFIX}{json}\n");
        assert!(!live_line(line.as_bytes(), &partial));
        let kept = partial.lock().unwrap().clone().map(|o| o.summary);
        assert_eq!(kept.as_deref(), Some("interrupted after 1 round"));
        // A partial that does not parse replaces nothing.
        assert!(!live_line(b"gpucheck-partial: {not json\n", &partial));
        assert!(partial.lock().unwrap().is_some());
        assert!(live_line(b"gpucheck-stage: cuInit\n", &partial));
        assert!(live_line(b"NCCL WARN something\n", &partial));
    }

    #[test]
    fn stage_and_tail_parsing() {
        let err = "noise\ngpucheck-stage: cuInit\nmore\ngpucheck-stage: ncclCommInitAll\n";
        assert_eq!(last_stage(err).as_deref(), Some("ncclCommInitAll"));
        assert_eq!(stderr_tail(err), "noise\nmore");
    }
}

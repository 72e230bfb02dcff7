//! Watching a running job over time (`gpucheck exec --watch`, `gpucheck
//! job --watch`): from a sample of every rank every few seconds, when the
//! job stopped making progress (a hang to diagnose), when it only paused
//! outside collectives (a checkpoint, a slow start: said, never alarmed),
//! which rank keeps arriving late (a straggler), and which rank ended first
//! and how (a crash). Pure: the samples come from the watch's probes, the
//! events go to the `job.watch` outcome and the watch's report.
//!
//! The rules, each chosen so that a healthy job is never called hung:
//! - A rank moved between two samples when its recorder's running number
//!   changed (where the recorder is read at both), else when its main
//!   thread ran at all (a context switch: a thread blocked in a collective,
//!   a sleep or a stop makes none, a training loop some at every step),
//!   used more than [`BUSY_CPU_SHARE`] of a core, or its stack's place
//!   changed. A rank outside collectives whose GPU is at least
//!   [`GPU_BUSY_PCT`] busy moves (a long kernel its thread waits on).
//! - A hang is suspected when at least one rank waits on its peers (in a
//!   collective, or in backward under DDP), every waiting rank has been
//!   still for `hang_after`, and no rank outside a collective moved in that
//!   time either: a rank busy in its own code while the others wait for it
//!   is a pause the report names, never a hang to act on.
//! - Every rank outside collectives for `hang_after` is a pause (a
//!   checkpoint, evaluation, data preparation before the first
//!   collective), said once with where each rank was, and never a hang.
//! - The default `hang_after` adapts: the larger of [`MIN_HANG_AFTER_S`] and
//!   [`HANG_AFTER_STEPS`] times the longest wait in a collective that later
//!   ended (the slowest step seen so far).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::domain::stacks::{Activity, Where};
use crate::domain::watch_late::{Entered, Lateness};

/// The least default `hang_after`: PyTorch's own NCCL watchdog waits 10
/// minutes by default; a minute still pages someone nine minutes sooner,
/// and no healthy step of a DDP job waits a minute in one collective.
pub const MIN_HANG_AFTER_S: f64 = 60.0;
/// The default `hang_after` in units of the longest wait seen to end: a
/// job whose slowest step so far waited 30 s is called hung after 150 s.
pub const HANG_AFTER_STEPS: f64 = 5.0;
/// A rank using more than this share of one core between two samples is
/// working (a hung gloo rank waits at ~0 %; a Python loop computing or
/// writing uses most of a core).
pub const BUSY_CPU_SHARE: f64 = 0.10;
/// A rank outside collectives whose GPU is at least this busy is at work
/// (a long kernel its host thread waits on uses no CPU and keeps its stack
/// still). Not for a rank in a collective: NCCL's kernels keep a GPU at
/// 100 % while they wait.
pub const GPU_BUSY_PCT: u32 = 50;
/// Samples a straggler is judged over (a sliding window).
pub const STRAGGLER_WINDOW: usize = 20;
/// A rank is a straggler when caught outside collectives while the others
/// waited in at least this many of the window's samples...
pub const STRAGGLER_MIN_CAUGHT: usize = 5;
/// ... and in at least this share of the samples where any rank waited.
pub const STRAGGLER_SHARE: f64 = 0.5;

/// One rank at one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub rank: u32,
    /// /proc's state letter (R, S, D, T, Z).
    pub state: char,
    /// Its main thread's CPU time so far (user + system), in seconds.
    pub cpu_s: f64,
    /// Its main thread's context switches so far, where /proc shows them.
    pub switches: Option<u64>,
    /// Where its main thread was, when its stack was read.
    pub at: Option<Where>,
    /// Its recorder's running number (entries recorded + retired), when read.
    pub recorder: Option<u64>,
    /// Its recorder's latest collectives with their entry times, when read
    /// (`domain::watch_late`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entered: Vec<Entered>,
    /// NVML's utilisation of the GPU the rank's process is on (the
    /// busiest, on several), percent, where there is a GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_pct: Option<u32>,
}

/// How a rank's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// Gone before its status could be read (its launcher reaped it first).
    Unseen,
}

impl Exit {
    /// From a `waitpid` status word (as /proc/PID/stat's `exit_code`).
    pub fn from_wait_status(status: i32) -> Exit {
        let signal = status & 0x7f;
        if signal == 0 {
            Exit::Code((status >> 8) & 0xff)
        } else {
            Exit::Signal(signal)
        }
    }

    /// A failure of the rank's own: a non-zero code or a signal. An end
    /// whose status was not seen is none: nothing says it failed.
    pub fn is_failure(self) -> bool {
        matches!(self, Exit::Code(c) if c != 0) || matches!(self, Exit::Signal(_))
    }
}

/// A rank's process that ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub rank: u32,
    pub pid: i32,
    pub exit: Exit,
    /// The kernel's OOM killer killed it.
    pub oom: bool,
    pub at_s: f64,
}

/// What the watch saw happen.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The waiting ranks have been still in `collective` for `still_s`:
    /// time for the full diagnosis.
    HangSuspected {
        waiting: Vec<u32>,
        collective: String,
        still_s: f64,
    },
    /// A suspected hang moved again.
    HangCleared { after_s: f64 },
    /// Ranks wait while others work outside collectives.
    WaitingOnBusy {
        waiting: Vec<u32>,
        busy: Vec<(u32, Where)>,
        for_s: f64,
    },
    /// Every rank outside collectives for `for_s` (not a hang).
    Paused {
        at: Vec<(u32, Option<Where>)>,
        for_s: f64,
    },
    /// A pause ended: some rank waits in a collective again, or (with
    /// `moved_on`) every rank left the code it paused in without being
    /// caught in a collective yet (a checkpoint after a slow start).
    Resumed { after_s: f64, moved_on: bool },
    /// The first rank to end with a failure, with where it was last seen.
    Crash {
        rank: u32,
        pid: i32,
        exit: Exit,
        oom: bool,
        last: Option<Where>,
    },
    /// A rank that ended after another rank's crash (the launcher's teardown).
    TornDown { rank: u32, exit: Exit },
    /// A rank caught outside collectives while the others waited, again and
    /// again over the window.
    Straggler {
        rank: u32,
        caught: usize,
        of: usize,
        at: Option<Where>,
    },
    /// A rank whose recorder shows it entering collectives late, again and
    /// again (its median lateness over the last `compared` collectives).
    LateStraggler {
        rank: u32,
        median_ms: f64,
        compared: usize,
    },
    /// A straggler named earlier is no longer late.
    StragglerCleared { rank: u32 },
}

/// One rank's history so far.
#[derive(Debug, Clone)]
struct Track {
    last: Sample,
    last_s: f64,
    /// Since when it has not moved.
    still_since_s: f64,
}

/// The watch's memory of the job.
#[derive(Debug, Clone, Default)]
pub struct Watcher {
    /// `--hang-after`, when given; else [`Watcher::hang_after_s`] adapts.
    pub fixed_hang_after_s: Option<f64>,
    tracks: BTreeMap<u32, Track>,
    /// The longest wait in a collective that ended, in seconds.
    longest_wait_s: f64,
    /// The watch's start, and the last sample where a rank waited.
    started_s: Option<f64>,
    last_waiting_s: Option<f64>,
    suspected_since: Option<f64>,
    paused_said: bool,
    /// Where each rank was (function and file) when the pause was said.
    paused_in: BTreeMap<u32, (String, String)>,
    busy_said: bool,
    /// Per sample where some rank waited, over the last
    /// [`STRAGGLER_WINDOW`]: the ranks caught outside collectives then.
    window: VecDeque<Vec<u32>>,
    stragglers: Vec<u32>,
    /// Lateness from the recorders, where they are read: then the rule
    /// for stragglers instead of the stacks'.
    lateness: Lateness,
    ended: Vec<Ended>,
}

impl Watcher {
    pub fn new(fixed_hang_after_s: Option<f64>) -> Watcher {
        Watcher {
            fixed_hang_after_s,
            ..Watcher::default()
        }
    }

    /// How long the waiting ranks must stay still before a hang is
    /// suspected: `--hang-after`, else the adaptive default.
    pub fn hang_after_s(&self) -> f64 {
        self.fixed_hang_after_s
            .unwrap_or_else(|| MIN_HANG_AFTER_S.max(HANG_AFTER_STEPS * self.longest_wait_s))
    }

    /// The longest wait in one collective seen to end so far.
    pub fn longest_wait_s(&self) -> f64 {
        self.longest_wait_s
    }

    /// Seconds each rank has been still, as of its last sample.
    pub fn still_for(&self) -> Vec<(u32, f64)> {
        self.tracks
            .iter()
            .map(|(r, t)| (*r, t.last_s - t.still_since_s))
            .collect()
    }

    /// The ranks named stragglers now.
    pub fn stragglers(&self) -> &[u32] {
        &self.stragglers
    }

    /// Take one sample of every rank still running; returns what changed.
    pub fn observe(&mut self, now_s: f64, samples: &[Sample]) -> Vec<Event> {
        self.started_s.get_or_insert(now_s);
        for s in samples {
            self.track(now_s, s);
        }
        let mut events = Vec::new();
        events.extend(self.judge_hang(now_s, samples));
        events.extend(self.judge_pause(now_s, samples));
        events.extend(self.judge_stragglers(now_s, samples));
        events
    }

    fn track(&mut self, now_s: f64, s: &Sample) {
        let Some(t) = self.tracks.get_mut(&s.rank) else {
            self.tracks.insert(
                s.rank,
                Track {
                    last: s.clone(),
                    last_s: now_s,
                    still_since_s: now_s,
                },
            );
            return;
        };
        if moved(&t.last, s, now_s - t.last_s) {
            // It moved somewhere between the two samples: the later bound.
            let waited = now_s - t.still_since_s;
            if t.last
                .at
                .as_ref()
                .is_some_and(|w| w.activity.waits_on_peers())
            {
                self.longest_wait_s = self.longest_wait_s.max(waited);
            }
            t.still_since_s = now_s;
        }
        t.last = s.clone();
        t.last_s = now_s;
    }

    fn still_s(&self, rank: u32, now_s: f64) -> f64 {
        self.tracks
            .get(&rank)
            .map_or(0.0, |t| now_s - t.still_since_s)
    }

    fn judge_hang(&mut self, now_s: f64, samples: &[Sample]) -> Option<Event> {
        let waiting: Vec<&Sample> = samples.iter().filter(|s| waits(s)).collect();
        let limit = self.hang_after_s();
        let held =
            !waiting.is_empty() && waiting.iter().all(|s| self.still_s(s.rank, now_s) >= limit);
        let busy: Vec<(u32, Where)> = samples
            .iter()
            .filter(|s| !waits(s) && self.still_s(s.rank, now_s) < limit)
            .filter_map(|s| Some((s.rank, s.at.clone()?)))
            .collect();
        if held && busy.is_empty() {
            self.busy_said = false;
            if self.suspected_since.is_some() {
                return None;
            }
            self.suspected_since = Some(now_s);
            return Some(Event::HangSuspected {
                waiting: waiting.iter().map(|s| s.rank).collect(),
                collective: collective_of(&waiting),
                still_s: waiting
                    .iter()
                    .map(|s| self.still_s(s.rank, now_s))
                    .fold(f64::INFINITY, f64::min),
            });
        }
        // Said once the others work for real (moved at this very sample),
        // not while a rank only just stopped outside a collective.
        let working = busy.iter().any(|(r, _)| self.still_s(*r, now_s) == 0.0);
        if held && working && !self.busy_said {
            self.busy_said = true;
            let for_s = self.still_s(waiting[0].rank, now_s);
            return Some(Event::WaitingOnBusy {
                waiting: waiting.iter().map(|s| s.rank).collect(),
                busy,
                for_s,
            });
        }
        if held {
            return None;
        }
        self.busy_said = false;
        let since = self.suspected_since.take()?;
        Some(Event::HangCleared {
            after_s: now_s - since,
        })
    }

    fn judge_pause(&mut self, now_s: f64, samples: &[Sample]) -> Option<Event> {
        if samples.iter().any(waits) {
            let last = self.last_waiting_s.replace(now_s);
            if !std::mem::take(&mut self.paused_said) {
                return None;
            }
            let from = last.or(self.started_s).unwrap_or(now_s);
            return Some(Event::Resumed {
                after_s: now_s - from,
                moved_on: false,
            });
        }
        let from = self.last_waiting_s.or(self.started_s)?;
        if self.paused_said && self.moved_on(samples) {
            // A new pause starts where the ranks are now.
            self.paused_said = false;
            self.last_waiting_s = Some(now_s);
            return Some(Event::Resumed {
                after_s: now_s - from,
                moved_on: true,
            });
        }
        if self.paused_said || samples.is_empty() || now_s - from < self.hang_after_s() {
            return None;
        }
        self.paused_said = true;
        self.paused_in = samples
            .iter()
            .filter_map(|s| Some((s.rank, code_of(s.at.as_ref()?)?)))
            .collect();
        Some(Event::Paused {
            at: samples.iter().map(|s| (s.rank, s.at.clone())).collect(),
            for_s: now_s - from,
        })
    }

    /// Every rank whose stack was read is in other code than where the
    /// pause was said (another function or file).
    fn moved_on(&self, samples: &[Sample]) -> bool {
        let now: Vec<(u32, (String, String))> = samples
            .iter()
            .filter_map(|s| Some((s.rank, code_of(s.at.as_ref()?)?)))
            .collect();
        !now.is_empty()
            && now
                .iter()
                .all(|(r, c)| self.paused_in.get(r).is_some_and(|p| p != c))
    }

    fn judge_stragglers(&mut self, now_s: f64, samples: &[Sample]) -> Vec<Event> {
        // A sample counts while the collectives move (a waiting rank moved
        // since the last one): a rank outside them during a hang is no
        // straggler.
        let any_waits = samples
            .iter()
            .any(|s| waits(s) && self.still_s(s.rank, now_s) == 0.0);
        let outside: Vec<u32> = samples
            .iter()
            .filter(|s| s.at.is_some() && !waits(s))
            .map(|s| s.rank)
            .collect();
        let caught = if any_waits && 2 * outside.len() < samples.len() {
            outside
        } else {
            Vec::new()
        };
        if any_waits {
            self.window.push_back(caught);
            if self.window.len() > STRAGGLER_WINDOW {
                self.window.pop_front();
            }
        }
        let now = self.late_now(samples);
        let mut events: Vec<Event> = now
            .iter()
            .filter(|(rank, _)| !self.stragglers.contains(rank))
            .map(|(_, e)| e.clone())
            .collect();
        for &rank in &self.stragglers {
            if !now.iter().any(|(r, _)| *r == rank) {
                events.push(Event::StragglerCleared { rank });
            }
        }
        self.stragglers = now.into_iter().map(|(r, _)| r).collect();
        events
    }

    /// The stragglers now, each with the event that names it: from the
    /// recorders' entry times where any rank's lateness was measured, else
    /// from the stacks' window.
    fn late_now(&mut self, samples: &[Sample]) -> Vec<(u32, Event)> {
        let entered: Vec<(u32, &[Entered])> = samples
            .iter()
            .filter(|s| !s.entered.is_empty())
            .map(|s| (s.rank, s.entered.as_slice()))
            .collect();
        self.lateness.take(&entered);
        if self.lateness.measured() {
            return self
                .lateness
                .stragglers()
                .into_iter()
                .map(|l| {
                    let e = Event::LateStraggler {
                        rank: l.rank,
                        median_ms: l.median_ms,
                        compared: l.compared,
                    };
                    (l.rank, e)
                })
                .collect();
        }
        let of = self.window.len();
        straggling(&self.window)
            .into_iter()
            .map(|(rank, caught)| {
                let at = samples
                    .iter()
                    .find(|s| s.rank == rank)
                    .and_then(|s| s.at.clone());
                (
                    rank,
                    Event::Straggler {
                        rank,
                        caught,
                        of,
                        at,
                    },
                )
            })
            .collect()
    }

    /// A rank's process ended: the first failure is the crash; ranks that
    /// end after it are the launcher's teardown; a clean exit is no event.
    pub fn ended(&mut self, e: Ended) -> Option<Event> {
        let last = self.tracks.remove(&e.rank).and_then(|t| t.last.at);
        self.lateness.forget(e.rank);
        let crashed_before = self.ended.iter().any(|x| x.exit.is_failure());
        self.ended.push(e.clone());
        if !e.exit.is_failure() {
            return None;
        }
        if crashed_before {
            return Some(Event::TornDown {
                rank: e.rank,
                exit: e.exit,
            });
        }
        Some(Event::Crash {
            rank: e.rank,
            pid: e.pid,
            exit: e.exit,
            oom: e.oom,
            last,
        })
    }

    /// A rank's process ended in a way that says nothing of the job (the
    /// watch or its user ended the job): forgotten, no event.
    pub fn forget(&mut self, rank: u32) {
        self.tracks.remove(&rank);
        self.lateness.forget(rank);
    }

    /// The first rank that ended with a failure, if any did.
    pub fn first_crash(&self) -> Option<&Ended> {
        self.ended.iter().find(|e| e.exit.is_failure())
    }
}

/// A rank that waits on its peers at this sample.
fn waits(s: &Sample) -> bool {
    s.at.as_ref().is_some_and(|w| w.activity.waits_on_peers())
}

/// Whether a rank moved between two samples `dt_s` apart.
fn moved(before: &Sample, now: &Sample, dt_s: f64) -> bool {
    let outside = now
        .at
        .as_ref()
        .is_some_and(|w| !w.activity.waits_on_peers());
    if outside && now.gpu_pct.is_some_and(|p| p >= GPU_BUSY_PCT) {
        return true;
    }
    if let (Some(a), Some(b)) = (before.recorder, now.recorder) {
        return a != b;
    }
    let busy = now.cpu_s - before.cpu_s > BUSY_CPU_SHARE * dt_s.max(f64::EPSILON);
    let woke = matches!((before.switches, now.switches), (Some(a), Some(b)) if a != b);
    busy || woke || (before.at.is_some() && now.at.is_some() && before.at != now.at)
}

/// The collective the waiting ranks are in ("all_reduce", "backward").
fn collective_of(waiting: &[&Sample]) -> String {
    let mut names: Vec<String> = waiting
        .iter()
        .filter_map(|s| s.at.as_ref())
        .map(|w| match &w.activity {
            Activity::Collective(op) => op.clone(),
            _ => "backward".to_string(),
        })
        .collect();
    names.sort();
    names.dedup();
    names.join(" / ")
}

/// The ranks caught late in enough of the window's samples, with their
/// count, when no other rank is caught as often.
fn straggling(window: &VecDeque<Vec<u32>>) -> Vec<(u32, usize)> {
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for caught in window {
        for &r in caught {
            *counts.entry(r).or_default() += 1;
        }
    }
    let needed = STRAGGLER_MIN_CAUGHT.max((STRAGGLER_SHARE * window.len() as f64).ceil() as usize);
    counts.into_iter().filter(|(_, c)| *c >= needed).collect()
}

/// The code a rank is in: its frame's function and file.
fn code_of(w: &Where) -> Option<(String, String)> {
    let f = w.frame.as_ref()?;
    Some((f.function.clone(), f.file.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::stacks::Frame;

    fn at(activity: Activity, line: u32) -> Option<Where> {
        Some(Where {
            activity,
            frame: Some(Frame {
                function: "train".into(),
                file: "/job/train.py".into(),
                line,
                code: None,
                not_read: None,
            }),
        })
    }

    fn coll(line: u32) -> Option<Where> {
        at(Activity::Collective("all_reduce".into()), line)
    }

    fn s(rank: u32, cpu_s: f64, at: Option<Where>) -> Sample {
        Sample {
            rank,
            state: 'S',
            cpu_s,
            switches: None,
            at,
            recorder: None,
            entered: Vec::new(),
            gpu_pct: None,
        }
    }

    /// Run `ticks` samples 2 s apart from `make(t)`; every event with its time.
    fn run(w: &mut Watcher, ticks: u32, make: impl Fn(f64) -> Vec<Sample>) -> Vec<(f64, Event)> {
        let mut out = Vec::new();
        for i in 0..ticks {
            let t = f64::from(i) * 2.0;
            out.extend(w.observe(t, &make(t)).into_iter().map(|e| (t, e)));
        }
        out
    }

    #[test]
    fn a_sleeping_rank_with_the_others_waiting_is_a_suspected_hang_after_hang_after() {
        let mut w = Watcher::new(Some(10.0));
        let ev = run(&mut w, 10, |_| {
            vec![
                s(0, 1.0, coll(40)),
                s(1, 1.0, at(Activity::Sleep, 30)),
                s(2, 1.0, coll(40)),
            ]
        });
        let hangs: Vec<_> = ev
            .iter()
            .filter(|(_, e)| matches!(e, Event::HangSuspected { .. }))
            .collect();
        assert_eq!(hangs.len(), 1, "{ev:?}");
        let (
            t,
            Event::HangSuspected {
                waiting,
                collective,
                ..
            },
        ) = hangs[0]
        else {
            unreachable!()
        };
        assert_eq!(*t, 10.0);
        assert_eq!(waiting, &vec![0, 2]);
        assert_eq!(collective, "all_reduce");
    }

    #[test]
    fn a_job_burning_cpu_in_the_same_place_is_not_still() {
        let mut w = Watcher::new(Some(10.0));
        let ev = run(&mut w, 12, |t| vec![s(0, t, coll(40)), s(1, t, coll(40))]);
        assert!(ev.is_empty(), "{ev:?}");
    }

    #[test]
    fn a_recorder_that_moves_outweighs_a_still_stack_and_one_that_does_not_outweighs_cpu() {
        let mut w = Watcher::new(Some(6.0));
        let moving = run(&mut w, 8, |t| {
            let mut r = s(0, 0.0, coll(40));
            r.recorder = Some(t as u64);
            vec![r]
        });
        assert!(moving.is_empty(), "{moving:?}");
        let mut w = Watcher::new(Some(6.0));
        let spinning = run(&mut w, 8, |t| {
            let mut r = s(0, t, coll(40));
            r.recorder = Some(7);
            vec![r]
        });
        assert!(
            matches!(spinning[0].1, Event::HangSuspected { .. }),
            "{spinning:?}"
        );
    }

    #[test]
    fn a_main_thread_that_ran_moved_and_one_that_made_no_switch_did_not() {
        let woke = |n: u64| Sample {
            switches: Some(n),
            ..s(0, 0.0, coll(40))
        };
        assert!(moved(&woke(10), &woke(11), 2.0));
        assert!(!moved(&woke(10), &woke(10), 2.0));
        let mut w = Watcher::new(Some(6.0));
        let ev = run(&mut w, 10, |t| {
            vec![woke(t as u64), s(1, 0.0, at(Activity::Sleep, 3))]
        });
        assert!(
            !ev.iter()
                .any(|(_, e)| matches!(e, Event::HangSuspected { .. })),
            "{ev:?}"
        );
    }

    #[test]
    fn a_rank_outside_collectives_while_the_others_hang_is_no_straggler() {
        let mut w = Watcher::new(Some(60.0));
        let ev = run(&mut w, 15, |_| {
            vec![
                s(0, 0.0, coll(40)),
                s(1, 0.0, at(Activity::Sleep, 33)),
                s(2, 0.0, coll(40)),
            ]
        });
        assert!(ev.is_empty(), "{ev:?}");
    }

    #[test]
    fn every_rank_outside_collectives_is_a_pause_said_once_then_resumed() {
        let mut w = Watcher::new(Some(10.0));
        let ev = run(&mut w, 30, |t| {
            if t < 40.0 {
                vec![
                    s(0, 0.0, at(Activity::Elsewhere, 80)),
                    s(1, 0.0, at(Activity::Elsewhere, 80)),
                ]
            } else {
                vec![s(0, t, coll(40)), s(1, t, coll(40))]
            }
        });
        let kinds: Vec<&str> = ev
            .iter()
            .map(|(_, e)| match e {
                Event::Paused { .. } => "paused",
                Event::Resumed { .. } => "resumed",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, vec!["paused", "resumed"], "{ev:?}");
        assert!(
            matches!(ev[1], (40.0, Event::Resumed { after_s, moved_on: false }) if after_s >= 40.0)
        );
    }

    #[test]
    fn a_slow_start_then_a_checkpoint_never_caught_in_a_collective_are_two_pauses() {
        let mut w = Watcher::new(Some(10.0));
        let in_fn = |function: &str, line| {
            Some(Where {
                activity: Activity::Elsewhere,
                frame: Some(Frame {
                    function: function.into(),
                    file: "/job/train.py".into(),
                    line,
                    code: None,
                    not_read: None,
                }),
            })
        };
        let ev = run(&mut w, 40, |t| {
            let (f, line) = if t < 30.0 {
                ("main", 71)
            } else {
                ("save_checkpoint", 65)
            };
            vec![s(0, 0.0, in_fn(f, line)), s(1, 0.0, in_fn(f, line))]
        });
        let kinds: Vec<&str> = ev
            .iter()
            .map(|(_, e)| match e {
                Event::Paused { .. } => "paused",
                Event::Resumed { moved_on: true, .. } => "moved on",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, vec!["paused", "moved on", "paused"], "{ev:?}");
        let Some((at_s, Event::Paused { at, for_s })) = ev.last() else {
            panic!("{ev:?}")
        };
        assert_eq!(*at_s, 40.0);
        assert!(*for_s >= 10.0 && *for_s < 12.0, "{for_s}");
        let f = at[0].1.as_ref().and_then(|w| w.frame.as_ref());
        assert_eq!(f.map(|f| f.function.as_str()), Some("save_checkpoint"));
    }

    #[test]
    fn a_pause_moving_inside_one_function_is_one_pause() {
        let mut w = Watcher::new(Some(10.0));
        let ev = run(&mut w, 40, |t| {
            let line = 80 + (t as u32 % 7);
            vec![
                s(0, t, at(Activity::Elsewhere, line)),
                s(1, t, at(Activity::Elsewhere, line)),
            ]
        });
        let pauses = ev
            .iter()
            .filter(|(_, e)| matches!(e, Event::Paused { .. }))
            .count();
        assert_eq!(pauses, 1, "{ev:?}");
        assert!(!ev.iter().any(|(_, e)| matches!(e, Event::Resumed { .. })));
    }

    #[test]
    fn ranks_waiting_on_a_busy_rank_are_said_but_never_a_hang() {
        let mut w = Watcher::new(Some(10.0));
        let ev = run(&mut w, 20, |t| {
            vec![
                s(0, t, at(Activity::Elsewhere, 12)),
                s(1, 0.0, coll(40)),
                s(2, 0.0, coll(40)),
            ]
        });
        assert!(
            !ev.iter()
                .any(|(_, e)| matches!(e, Event::HangSuspected { .. })),
            "{ev:?}"
        );
        let busy: Vec<_> = ev
            .iter()
            .filter_map(|(_, e)| match e {
                Event::WaitingOnBusy { waiting, busy, .. } => Some((waiting.clone(), busy[0].0)),
                _ => None,
            })
            .collect();
        assert_eq!(busy, vec![(vec![1, 2], 0)]);
    }

    #[test]
    fn a_hang_that_moves_again_is_said_to_have_cleared() {
        let mut w = Watcher::new(Some(4.0));
        let ev = run(&mut w, 8, |t| {
            let cpu = if t < 10.0 { 0.0 } else { t };
            vec![s(0, cpu, coll(40)), s(1, cpu, coll(40))]
        });
        assert!(matches!(ev[0].1, Event::HangSuspected { .. }), "{ev:?}");
        assert!(matches!(ev[1].1, Event::HangCleared { .. }), "{ev:?}");
    }

    #[test]
    fn the_default_hang_after_grows_with_the_longest_wait_seen_to_end() {
        let mut w = Watcher::new(None);
        assert_eq!(w.hang_after_s(), MIN_HANG_AFTER_S);
        // A 20 s wait in all_reduce that then ends.
        run(&mut w, 14, |t| {
            let cpu = if t < 20.0 { 0.0 } else { t };
            vec![s(0, cpu, coll(40))]
        });
        assert_eq!(w.longest_wait_s(), 20.0);
        assert_eq!(w.hang_after_s(), 100.0);
    }

    #[test]
    fn a_rank_caught_outside_while_the_others_wait_again_and_again_is_a_straggler() {
        let mut w = Watcher::new(Some(60.0));
        let ev = run(&mut w, 12, |t| {
            vec![
                s(0, t, coll(40)),
                s(1, t, at(Activity::Sleep, 33)),
                s(2, t, coll(40)),
            ]
        });
        let named: Vec<u32> = ev
            .iter()
            .filter_map(|(_, e)| match e {
                Event::Straggler { rank, .. } => Some(*rank),
                _ => None,
            })
            .collect();
        assert_eq!(named, vec![1]);
        assert_eq!(w.stragglers(), &[1]);
    }

    /// Rank `rank`'s recorder at tick `t`: its last 16 collectives, a step
    /// every 100 ms, `late_ms` late.
    fn with_entries(mut x: Sample, t: f64, late_ms: f64) -> Sample {
        let upto = (t * 10.0) as u64 + 16;
        x.recorder = Some(upto);
        x.entered = (upto - 15..=upto)
            .map(|seq| Entered {
                group: "0".into(),
                seq,
                at_ms: 5e12 + seq as f64 * 100.0 + late_ms,
            })
            .collect();
        x
    }

    #[test]
    fn where_recorders_are_read_a_rank_late_into_every_collective_is_named_from_them() {
        let mut w = Watcher::new(Some(60.0));
        let ev = run(&mut w, 6, |t| {
            vec![
                with_entries(s(0, t, coll(40)), t, 0.0),
                with_entries(s(1, t, coll(40)), t, 150.0),
                with_entries(s(2, t, coll(40)), t, 2.0),
            ]
        });
        let named: Vec<(u32, f64)> = ev
            .iter()
            .filter_map(|(_, e)| match e {
                Event::LateStraggler {
                    rank, median_ms, ..
                } => Some((*rank, *median_ms)),
                _ => None,
            })
            .collect();
        assert_eq!(named, vec![(1, 150.0)], "{ev:?}");
        assert_eq!(w.stragglers(), &[1]);
    }

    #[test]
    fn where_recorders_say_no_one_is_late_the_stacks_name_no_straggler() {
        // Rank 1 is caught outside collectives at every sample (its step
        // runs while the others have entered), but its recorder shows it
        // entering every collective with the others: no straggler.
        let mut w = Watcher::new(Some(60.0));
        let ev = run(&mut w, 12, |t| {
            vec![
                with_entries(s(0, t, coll(40)), t, 0.0),
                with_entries(s(1, t, at(Activity::Sleep, 33)), t, 1.0),
                with_entries(s(2, t, coll(40)), t, 0.0),
            ]
        });
        assert!(
            !ev.iter()
                .any(|(_, e)| matches!(e, Event::Straggler { .. } | Event::LateStraggler { .. })),
            "{ev:?}"
        );
    }

    #[test]
    fn a_rank_outside_collectives_whose_gpu_is_busy_is_at_work_not_hung() {
        // Rank 1 waits on a long kernel: no CPU, the same stack, its GPU
        // at 97 %; the others wait in all_reduce (their GPUs at 100 % too:
        // NCCL's kernels spin, which says nothing).
        let mut w = Watcher::new(Some(10.0));
        let gpu = |mut x: Sample, pct: u32| {
            x.gpu_pct = Some(pct);
            x
        };
        let ev = run(&mut w, 10, |_| {
            vec![
                gpu(s(0, 1.0, coll(40)), 100),
                gpu(s(1, 1.0, at(Activity::Elsewhere, 12)), 97),
                gpu(s(2, 1.0, coll(40)), 100),
            ]
        });
        assert!(
            !ev.iter()
                .any(|(_, e)| matches!(e, Event::HangSuspected { .. })),
            "{ev:?}"
        );
        assert!(
            ev.iter()
                .any(|(_, e)| matches!(e, Event::WaitingOnBusy { .. })),
            "{ev:?}"
        );
        let idle = run(&mut Watcher::new(Some(10.0)), 10, |_| {
            vec![
                gpu(s(0, 1.0, coll(40)), 100),
                gpu(s(1, 1.0, at(Activity::Elsewhere, 12)), 0),
                gpu(s(2, 1.0, coll(40)), 100),
            ]
        });
        assert!(
            idle.iter()
                .any(|(_, e)| matches!(e, Event::HangSuspected { .. })),
            "{idle:?}"
        );
    }

    #[test]
    fn ranks_caught_outside_by_turns_are_no_stragglers() {
        let mut w = Watcher::new(Some(60.0));
        let ev = run(&mut w, 20, |t| {
            let late = (t / 2.0) as u32 % 3;
            (0..3)
                .map(|r| {
                    s(
                        r,
                        t,
                        if r == late {
                            at(Activity::Elsewhere, 9)
                        } else {
                            coll(40)
                        },
                    )
                })
                .collect()
        });
        assert!(ev.is_empty(), "{ev:?}");
    }

    #[test]
    fn the_first_failed_rank_is_the_crash_and_the_rest_are_the_teardown() {
        let mut w = Watcher::new(Some(10.0));
        w.observe(
            0.0,
            &[s(0, 0.0, coll(40)), s(1, 0.0, at(Activity::Elsewhere, 7))],
        );
        let first = w.ended(Ended {
            rank: 1,
            pid: 11,
            exit: Exit::Code(3),
            oom: false,
            at_s: 1.0,
        });
        let Some(Event::Crash {
            rank: 1,
            exit: Exit::Code(3),
            last: Some(last),
            ..
        }) = first
        else {
            panic!("{first:?}")
        };
        assert_eq!(last.frame.map(|f| f.line), Some(7));
        let then = w.ended(Ended {
            rank: 0,
            pid: 10,
            exit: Exit::Signal(15),
            oom: false,
            at_s: 1.2,
        });
        assert_eq!(
            then,
            Some(Event::TornDown {
                rank: 0,
                exit: Exit::Signal(15)
            })
        );
        assert_eq!(w.first_crash().map(|e| e.rank), Some(1));
    }

    #[test]
    fn a_clean_exit_is_no_crash() {
        let mut w = Watcher::new(Some(10.0));
        assert_eq!(
            w.ended(Ended {
                rank: 0,
                pid: 1,
                exit: Exit::Code(0),
                oom: false,
                at_s: 0.0
            }),
            None
        );
        assert!(w.first_crash().is_none());
    }

    #[test]
    fn wait_statuses_read_as_codes_and_signals() {
        assert_eq!(Exit::from_wait_status(3 << 8), Exit::Code(3));
        assert_eq!(Exit::from_wait_status(9), Exit::Signal(9));
        assert_eq!(Exit::from_wait_status(6 | 0x80), Exit::Signal(6));
    }
}

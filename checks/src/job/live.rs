//! Gathering a running job's state on this node (`gpucheck job` without
//! `--traces`): its ranks from /proc, then each rank's Python stack (its
//! worker server's `dump_traceback`, else py-spy) at [`LOOKS`] moments
//! across [`WINDOW`], and its Flight Recorder (from its worker server) at
//! the first and the last. They tell a stuck job from one that moves:
//! collectives recorded in between, and ranks that stayed at one place.
//! Nothing is sent that stops a rank.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::domain::flight::RankTrace;
use crate::domain::stacks::{self, Activity, Where};
use crate::domain::watch_late::{Entered, ENTERED_KEPT};
use crate::probe::fr_dump;
use crate::probe::kernel_log::{self, KernelLog, OomKill, XidEvent};
use crate::probe::rank_state;
use crate::probe::ranks::RankProcess;

/// Time from the first look at the job to the last.
pub const WINDOW: Duration = Duration::from_millis(2000);
/// Looks at each rank's stack across [`WINDOW`]: enough that a rank that
/// spends most of a step somewhere is caught there.
pub const LOOKS: u32 = 9;

/// What the two looks found.
#[derive(Debug, Default)]
pub struct Live {
    /// The job's ranks on this node, by rank.
    pub ranks: Vec<RankProcess>,
    /// Where each rank's main thread was, per look.
    pub samples: Vec<Vec<(u32, Where)>>,
    /// How each rank's stack was read ("worker server", "py-spy").
    pub stack_source: BTreeMap<u32, &'static str>,
    /// How each rank's recorder was read ("worker server", "dump pipe",
    /// "dump file").
    pub recorder_source: BTreeMap<u32, &'static str>,
    /// (rank, why) for each rank whose stack or recorder could not be read.
    pub errors: Vec<(u32, String)>,
    /// Collectives recorded between the looks, over the ranks whose
    /// recorder was read at both; None when none was.
    pub progress: Option<u64>,
    /// Each rank's process state after the looks (R, S, D, T, or ? gone).
    pub states_after: Vec<(u32, char)>,
    /// The node's kernel log, where it could be read.
    pub kernel_log: Option<KernelLog>,
    /// This node is one of several the job was watched on at once
    /// (`--nnodes`): its WORLD_SIZE spans them.
    pub across_nodes: bool,
}

impl Live {
    /// When the job's first rank here started, seconds after boot.
    pub fn started_after_boot_s(&self) -> Option<f64> {
        self.ranks
            .iter()
            .map(|r| r.started_after_boot_s)
            .min_by(f64::total_cmp)
    }

    /// The Xid events logged since the job started.
    pub fn xids_since_start(&self) -> Vec<&XidEvent> {
        let (Some(log), Some(start)) = (&self.kernel_log, self.started_after_boot_s()) else {
            return Vec::new();
        };
        log.events
            .iter()
            .filter(|e| e.since_boot_s.is_some_and(|s| s >= start))
            .collect()
    }

    /// The processes the OOM killer killed since the job started.
    pub fn oom_kills_since_start(&self) -> Vec<&OomKill> {
        let (Some(log), Some(start)) = (&self.kernel_log, self.started_after_boot_s()) else {
            return Vec::new();
        };
        log.oom_kills
            .iter()
            .filter(|k| k.since_boot_s.is_some_and(|s| s >= start))
            .collect()
    }

    pub fn rank(&self, rank: u32) -> Option<&RankProcess> {
        self.ranks.iter().find(|r| r.rank == rank)
    }

    /// The ranks caught in the data loader at a third of the looks or more.
    pub fn caught_loading(&self) -> Vec<u32> {
        self.ranks
            .iter()
            .map(|r| r.rank)
            .filter(|rank| {
                let caught = self
                    .samples
                    .iter()
                    .flatten()
                    .filter(|(r, w)| r == rank && w.activity == Activity::DataLoading)
                    .count();
                !self.samples.is_empty() && 3 * caught >= self.samples.len()
            })
            .collect()
    }

    /// One look's stacks, as a sample (and how each was read, or why not).
    fn take_stacks(&mut self, look: &[Look]) {
        let mut sample = Vec::new();
        for l in look {
            match &l.stack {
                Ok((w, how)) => {
                    sample.push((l.rank, w.clone()));
                    self.stack_source.insert(l.rank, how);
                }
                Err(e) => self.errors.push((l.rank, e.clone())),
            }
        }
        self.samples.push(sample);
    }

    /// Where `rank` was at the last look.
    pub fn last_where(&self, rank: u32) -> Option<&Where> {
        self.samples
            .last()?
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, w)| w)
    }
}

/// One rank at one look.
struct Look {
    rank: u32,
    trace: Option<Result<RankTrace, String>>,
    /// Where the recorder came from, when it was asked for.
    recorder: Option<&'static str>,
    stack: Result<(Where, &'static str), String>,
}

/// Look at every rank [`LOOKS`] times across [`WINDOW`] (recorders at the
/// first and last look) and keep the last look's recorders as the job's
/// traces.
pub fn gather(
    ranks: Vec<RankProcess>,
    kernel_log: Option<&std::path::Path>,
) -> (Vec<RankTrace>, Vec<(u32, String)>, Live) {
    crate::probe::progress("watching the job's ranks for 2 s");
    let pause = WINDOW / (LOOKS - 1);
    let mut looks: Vec<Vec<Look>> = Vec::new();
    for i in 0..LOOKS {
        if i > 0 {
            std::thread::sleep(pause);
        }
        let recorders = i == 0 || i == LOOKS - 1;
        looks.push(look_all(&ranks, i, recorders));
    }
    let (first, last) = (&looks[0], &looks[looks.len() - 1]);
    let mut live = Live {
        progress: progress(first, last),
        ..Live::default()
    };
    for look in &looks {
        live.take_stacks(look);
    }
    let mut traces = Vec::new();
    let mut unreadable = Vec::new();
    for l in looks.pop().unwrap_or_default() {
        if let Some(how) = l.recorder {
            live.recorder_source.insert(l.rank, how);
        }
        match l.trace {
            Some(Ok(t)) => traces.push(t),
            Some(Err(e)) => unreadable.push((l.rank, e)),
            None => {}
        }
    }
    live.errors.sort();
    live.errors.dedup();
    live.states_after = ranks
        .iter()
        .map(|r| (r.rank, crate::probe::ranks::state_of(r.pid)))
        .collect();
    live.ranks = ranks;
    let wait = Duration::from_secs(3);
    live.kernel_log =
        kernel_log::read_kernel_log(kernel_log, crate::probe::sysfs::boot_epoch(), wait).ok();
    (traces, unreadable, live)
}

fn look_all(ranks: &[RankProcess], sample: u32, recorders: bool) -> Vec<Look> {
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|r| s.spawn(move || look(r, sample, recorders)))
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    })
}

fn look(r: &RankProcess, sample: u32, recorders: bool) -> Look {
    let (trace, recorder) = if recorders {
        recorder(r, sample)
    } else {
        (None, None)
    };
    Look {
        rank: r.rank,
        trace,
        recorder,
        stack: stack(r, sample),
    }
}

/// The rank's Flight Recorder: from its worker server, else through its
/// dump pipe, else a dump it wrote by itself since it started.
fn recorder(
    r: &RankProcess,
    sample: u32,
) -> (Option<Result<RankTrace, String>>, Option<&'static str>) {
    if let Some(socket) = r.worker_socket.as_deref() {
        let trace =
            rank_state::ask_worker(r.pid, socket, "fr_trace_json", sample).and_then(|json| {
                let source = format!("rank {}'s worker server", r.rank);
                fr_dump::parse(r.rank, &source, json.into_bytes())
            });
        return (Some(trace), Some("worker server"));
    }
    let Some(prefix) = r.dump_prefix.as_deref() else {
        return (None, None);
    };
    if let Some(stem) = r.dump_pipe.as_deref() {
        let trace = rank_state::dump_via_pipe(r.pid, r.rank, stem, prefix, sample);
        return (Some(trace), Some("dump pipe"));
    }
    match rank_state::dump_written(r.pid, r.rank, prefix, r.started_s) {
        Some(trace) => (Some(trace), Some("dump file")),
        None => (None, None),
    }
}

/// Where the rank's main thread is, by its worker server, else py-spy.
fn stack(r: &RankProcess, sample: u32) -> Result<(Where, &'static str), String> {
    let (threads, how) = match r.worker_socket.as_deref() {
        Some(socket) => match rank_state::ask_worker(r.pid, socket, "dump_traceback", sample) {
            Ok(text) => (stacks::from_faulthandler(&text), "worker server"),
            Err(_) => py_spy(r, sample)?,
        },
        None => py_spy(r, sample)?,
    };
    let mut main = stacks::main_thread(&threads)
        .ok_or("its stack shows no Python thread")?
        .clone();
    for f in main.frames.iter_mut().filter(|f| !f.is_library()).take(3) {
        match rank_state::source_line(r.pid, &f.file, f.line) {
            Ok(code) => f.code = code,
            Err(why) => f.not_read = Some(why),
        }
    }
    Ok((stacks::classify(&main), how))
}

fn py_spy(r: &RankProcess, sample: u32) -> Result<(Vec<stacks::Thread>, &'static str), String> {
    let json = rank_state::py_spy(r.pid, r.bin_dir.as_deref(), sample)?;
    Ok((stacks::from_pyspy(&json)?, "py-spy"))
}

/// The seam's sample number of the watch's reads: one key a rank, so a
/// watch under `--capture` keeps only its latest answer in memory.
const WATCH_SAMPLE: u32 = u32::MAX;

/// Where the rank's main thread is now (`job.watch`'s samples).
pub fn where_now(r: &RankProcess) -> Result<Where, String> {
    stack(r, WATCH_SAMPLE).map(|(w, _)| w)
}

/// The running number of the rank's recorder (entries recorded plus
/// retired), from a live source only: its worker server or its dump pipe.
/// A dump the rank wrote earlier says nothing of its progress now.
pub fn recorder_look(r: &RankProcess) -> Option<(u64, Vec<Entered>)> {
    if r.worker_socket.is_none() && r.dump_pipe.is_none() {
        return None;
    }
    let (trace, _) = recorder(r, WATCH_SAMPLE);
    let t = trace?.ok()?;
    let id = t.entries.iter().map(|e| e.record_id + 1).max().unwrap_or(0);
    let progress = id + t.entries.iter().filter(|e| e.retired).count() as u64;
    Some((progress, latest_entered(&t)))
}

/// A recorder's latest collectives ([`ENTERED_KEPT`]) with their entry
/// times, for lateness while the job runs.
fn latest_entered(t: &RankTrace) -> Vec<Entered> {
    let mut v: Vec<&crate::domain::flight::Entry> = t
        .entries
        .iter()
        .filter(|e| !e.is_p2p && e.collective_seq > 0 && e.time_created_ns > 0)
        .collect();
    v.sort_by_key(|e| e.record_id);
    v.iter()
        .rev()
        .take(ENTERED_KEPT)
        .rev()
        .map(|e| Entered {
            group: e.group.to_string(),
            seq: e.collective_seq,
            at_ms: e.time_created_ns as f64 / 1e6,
        })
        .collect()
}

/// Collectives recorded between the looks, summed over the ranks whose
/// recorder was read at both (by the recorder's own running number).
fn progress(first: &[Look], second: &[Look]) -> Option<u64> {
    let last_id = |l: &Look| -> Option<(u32, u64, usize)> {
        let t = l.trace.as_ref()?.as_ref().ok()?;
        let id = t.entries.iter().map(|e| e.record_id + 1).max().unwrap_or(0);
        let retired = t.entries.iter().filter(|e| e.retired).count();
        Some((l.rank, id, retired))
    };
    let before: BTreeMap<u32, (u64, usize)> = first
        .iter()
        .filter_map(last_id)
        .map(|(r, i, n)| (r, (i, n)))
        .collect();
    let mut any = false;
    let mut moved = 0u64;
    for (rank, id, retired) in second.iter().filter_map(last_id) {
        if let Some((id0, retired0)) = before.get(&rank) {
            any = true;
            moved += id.saturating_sub(*id0) + retired.saturating_sub(*retired0) as u64;
        }
    }
    any.then_some(moved)
}

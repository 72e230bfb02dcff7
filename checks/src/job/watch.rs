//! job.watch: a running job watched over time (`gpucheck exec --watch`,
//! `gpucheck job --watch`). Every sample reads each rank's /proc state and
//! CPU time, its recorder's running number where it serves one (worker
//! server, dump pipe), and its Python stack (worker server, else py-spy)
//! when it might be still; `domain::watch` judges the samples. The outcome
//! says what the watch saw: a crash, a hang (the full diagnosis is
//! `gpucheck job`'s own, run by the watch), a straggler, a pause.

use std::collections::BTreeMap;

use crate::domain::action::Action;
use crate::domain::stacks::Where;
use crate::domain::watch::{Event, Exit, Sample, Watcher, BUSY_CPU_SHARE};
use crate::domain::watch_late::{Entered, ENTERED_KEPT};
use crate::probe::exits::proc_sample;
use crate::probe::ranks::RankProcess;
use crate::probe::{as_rank, nccl_inspector, nvml};
use crate::{Context, DataTable, Outcome, Profile};

/// The check that names what a watch saw; it runs only under `--watch`.
pub struct Watch;

impl crate::Check for Watch {
    fn id(&self) -> &'static str {
        "job.watch"
    }
    fn title(&self) -> &'static str {
        "Watch: a running job's hang, crash or straggler, named as it happens"
    }
    fn profile(&self) -> Profile {
        super::JOB_PROFILE
    }
    fn timeout(&self) -> std::time::Duration {
        super::TIMEOUT
    }
    fn explain(&self) -> &'static str {
        EXPLAIN
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        Outcome::skip("not applicable: job.watch runs under gpucheck exec --watch or job --watch")
    }
}

const EXPLAIN: &str =
    "Under `gpucheck exec --watch -- CMD` or `gpucheck job --watch`, gpucheck keeps \
looking at the job's ranks (the processes with RANK and WORLD_SIZE under CMD or --pid) every few \
seconds: each rank's /proc state and CPU time, its Flight Recorder's progress where it serves one \
(a worker server, the NCCL dump pipe that exec sets up), and its Python stack (py-spy \
--nonblocking, or the worker server) while it might be still. Nothing is signalled or paused.

A rank moved when its recorder's running number changed (where read), else when its stack's \
place changed or it used more than 10% of a core. A hang is suspected when the ranks waiting on \
their peers (in a collective, or in backward under DDP) have all been still for --hang-after \
seconds and no rank outside a collective moved either; the watch then runs the full `gpucheck \
job` diagnosis (stacks, recorders, NCCL RAS once, NVML, the kernel log) and reports its verdict. \
The default --hang-after is the larger of 60 s and 5 times the longest wait in one collective \
seen to end so far. Every rank outside collectives for that long (a checkpoint, evaluation, data \
preparation before the first collective) is a pause: said, never an alarm. A rank busy in its \
own code while the others wait for it is said, never acted on.

fail: a rank ended with a failure (the first one, with its exit code or signal, the OOM killer \
where the kernel log says so, and its last frame; the ranks the launcher ended after it are \
named as its teardown), or the diagnosis confirmed a hang (its ranks and collective; under \
--on-hang stop the job was ended and gpucheck exits 124).
warn: a rank caught outside collectives while the others waited in at least half of the last \
20 samples (a straggler), named while the job runs.
pass: the job ran (or runs) with none of these.";

/// Read stacks of ranks that are busy on the CPU only every this many
/// samples: they moved anyway; their stack only says where they are.
pub const BUSY_STACK_EVERY: u64 = 3;

/// What the watch keeps of a rank between samples.
#[derive(Debug, Clone, Default)]
pub struct Last {
    pub cpu_s: f64,
    pub at: Option<Where>,
}

/// Sample every rank once (`round` numbers the samples); stacks are read
/// in parallel, each bounded by its reader's own timeout.
pub fn sample(
    ranks: &[RankProcess],
    last: &BTreeMap<u32, Last>,
    round: u64,
    dt_s: f64,
    nvml_lib: Option<&std::path::Path>,
) -> Vec<Sample> {
    let mut samples = sample_each(ranks, last, round, dt_s);
    let mut inspected = inspector_entries(ranks);
    let gpus = gpu_busy(nvml_lib);
    for s in &mut samples {
        let pid = ranks.iter().find(|r| r.rank == s.rank).map(|r| r.pid);
        s.gpu_pct = pid.and_then(|p| gpus.get(&p).copied());
        // NCCL's own start times, where its Inspector writes them, rather
        // than the recorder's (when the host enqueued the collective).
        if let Some(entered) = pid.and_then(|p| inspected.remove(&p)) {
            s.entered = entered;
        }
    }
    samples
}

/// NVML's utilisation of each GPU, by the pids it lists on it (the busiest
/// GPU of a process on several); empty without NVML.
fn gpu_busy(nvml_lib: Option<&std::path::Path>) -> BTreeMap<i32, u32> {
    let mut out: BTreeMap<i32, u32> = BTreeMap::new();
    for gpu in nvml::processes(nvml_lib).unwrap_or_default() {
        let Ok(facts) = gpu.facts else { continue };
        let (Ok(pct), Ok(procs)) = (facts.utilization_pct, facts.processes) else {
            continue;
        };
        for p in procs {
            let Ok(pid) = i32::try_from(p.pid) else {
                continue;
            };
            let e = out.entry(pid).or_default();
            *e = (*e).max(pct);
        }
    }
    out
}

/// Bounds of the watch's read of an Inspector folder each period: the last
/// collectives only.
const INSPECTOR_LIMITS: nccl_inspector::Limits = nccl_inspector::Limits {
    max_file: 16 << 30,
    tail: 256 << 10,
    max_files: 4096,
    recent: ENTERED_KEPT,
};

/// Each rank's latest collectives from NCCL's Inspector output, by pid:
/// each folder read once, as the user of a rank that names it.
fn inspector_entries(ranks: &[RankProcess]) -> BTreeMap<i32, Vec<Entered>> {
    let mut folders: BTreeMap<&str, i32> = BTreeMap::new();
    for r in ranks {
        if let Some(d) = r.inspector_dir.as_deref() {
            folders.entry(d).or_insert(r.pid);
        }
    }
    let mut out: BTreeMap<i32, Vec<Entered>> = BTreeMap::new();
    for (dir, pid) in folders {
        // The folder as the rank sees it (its root), read with its rights.
        let path = std::path::PathBuf::from(format!("/proc/{pid}/root{dir}"));
        let read = as_rank::run(pid, |_| {
            Ok(nccl_inspector::read_dir_within(&path, INSPECTOR_LIMITS))
        });
        let Ok(Ok(found)) = read else { continue };
        for comm in found.ranks {
            let Some(p) = comm.pid.and_then(|p| i32::try_from(p).ok()) else {
                continue;
            };
            out.entry(p)
                .or_default()
                .extend(comm.colls.iter().filter_map(|c| {
                    let us = c.kernel_start_us.or(c.start_us)?;
                    Some(Entered {
                        group: comm.comm.clone(),
                        seq: c.seq,
                        at_ms: us as f64 / 1000.0,
                    })
                }));
        }
    }
    out
}

fn sample_each(
    ranks: &[RankProcess],
    last: &BTreeMap<u32, Last>,
    round: u64,
    dt_s: f64,
) -> Vec<Sample> {
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|r| s.spawn(move || sample_one(r, last.get(&r.rank), round, dt_s)))
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().ok().flatten())
            .collect()
    })
}

fn sample_one(r: &RankProcess, last: Option<&Last>, round: u64, dt_s: f64) -> Option<Sample> {
    let proc = proc_sample(r.pid).filter(|p| p.state != 'Z')?;
    let busy = last.is_some_and(|l| proc.cpu_s - l.cpu_s > BUSY_CPU_SHARE * dt_s);
    let stale = last.and_then(|l| l.at.clone());
    let at = if busy && round % BUSY_STACK_EVERY != 0 && stale.is_some() {
        stale
    } else {
        super::live::where_now(r).ok().or(stale)
    };
    let look = super::live::recorder_look(r);
    Some(Sample {
        rank: r.rank,
        state: proc.state,
        cpu_s: proc.cpu_s,
        switches: proc.switches,
        at,
        recorder: look.as_ref().map(|l| l.0),
        entered: look.map(|l| l.1).unwrap_or_default(),
        gpu_pct: None,
    })
}

/// "6.5 s": a measured time, to a tenth of a second.
fn secs(s: f64) -> String {
    format!(
        "{} s",
        crate::domain::text::seconds((s * 10.0).round() / 10.0)
    )
}

/// "exited with code 3", "was killed by SIGKILL".
pub fn exit_words(exit: Exit, oom: bool) -> String {
    match exit {
        Exit::Code(c) => format!("exited with code {c}"),
        Exit::Signal(_) if oom => "was killed by the kernel's OOM killer (SIGKILL)".to_string(),
        Exit::Signal(s) => format!("was killed by {}", signal_name(s)),
        Exit::Unseen => "ended (its exit status was reaped before it could be read)".to_string(),
    }
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// One event as a line of the watch's log.
pub fn event_words(e: &Event) -> String {
    let at = |w: &Option<Where>| w.as_ref().map_or_else(String::new, where_words);
    match e {
        Event::HangSuspected { waiting, collective, still_s } => format!(
            "{} {} still in {collective} for {}: diagnosing",
            super::ranks_phrase(waiting),
            if waiting.len() == 1 { "has been" } else { "have been" },
            secs(*still_s)
        ),
        Event::HangCleared { after_s } => {
            format!("the job moves again: the hang cleared after {}", secs(*after_s))
        }
        Event::WaitingOnBusy { waiting, busy, for_s } => format!(
            "{} wait for {}, at work outside collectives ({}), for {}: no hang while it works",
            super::ranks_phrase(waiting),
            super::ranks_phrase(&busy.iter().map(|b| b.0).collect::<Vec<_>>()),
            busy.iter().map(|(r, w)| format!("rank {r} {}", where_words(w))).collect::<Vec<_>>().join("; "),
            secs(*for_s)
        ),
        Event::Paused { at: ranks, for_s } => format!(
            "every rank has been outside collectives for {} (not a hang): {}",
            secs(*for_s),
            ranks.iter().map(|(r, w)| format!("rank {r} {}", at(w))).collect::<Vec<_>>().join("; ")
        ),
        Event::Resumed { after_s, moved_on: false } => {
            format!("the ranks are back in collectives after a pause of {}", secs(*after_s))
        }
        Event::Resumed { after_s, moved_on: true } => format!(
            "the ranks moved on from where they paused, after {} (not yet seen in a collective)",
            secs(*after_s)
        ),
        Event::Crash { rank, pid, exit, oom, last } => crash_words(*rank, *pid, *exit, *oom, last),
        Event::TornDown { rank, exit } => {
            format!("rank {rank} {} after it (the launcher's teardown)", exit_words(*exit, false))
        }
        Event::Straggler { rank, caught, of, at: w } => format!(
            "rank {rank} straggles: caught outside collectives while the others waited in {caught} of \
             the last {of} samples{}",
            w.as_ref().map(|w| format!(", {}", where_words(w))).unwrap_or_default()
        ),
        Event::LateStraggler { rank, median_ms, compared } => format!(
            "rank {rank} straggles: it starts collectives {median_ms:.0} ms after the first rank \
             (median of the last {compared}, by the start times its recorder or NCCL's Inspector \
             wrote)"
        ),
        Event::StragglerCleared { rank } => format!("rank {rank} no longer straggles"),
    }
}

fn crash_words(rank: u32, pid: i32, exit: Exit, oom: bool, last: &Option<Where>) -> String {
    let seen = last
        .as_ref()
        .map(|w| format!("; last seen {}", where_words(w)))
        .unwrap_or_default();
    format!(
        "rank {rank} (pid {pid}) {} first{seen}",
        exit_words(exit, oom)
    )
}

/// "in all_reduce at train.py:41 in step (`dist.all_reduce(t)`)".
pub fn where_words(w: &Where) -> String {
    match &w.frame {
        Some(f) => format!("{} at {}", w.activity.words(), f.shown()),
        None => w.activity.words(),
    }
}

/// What the watch concludes so far.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// The first failed rank's event, if any.
    pub crash: Option<Event>,
    /// The diagnosis's confirmed hang: its summary, ranks, and the action.
    pub hang: Option<(String, Vec<u32>, Action)>,
    /// The job was ended by the watch (`--on-hang stop`).
    pub stopped: bool,
    /// Every event with its time since the watch started.
    pub log: Vec<(f64, String)>,
}

/// job.watch's outcome from the verdict so far and the watcher's memory.
pub fn outcome(v: &Verdict, w: &Watcher, watched_s: f64, ranks: usize) -> Outcome {
    let o = base(v, w, watched_s, ranks);
    let o = o
        .with_metric("watched_s", watched_s, "s")
        .with_metric("hang_after_s", w.hang_after_s(), "s")
        .with_fact("ranks_watched", ranks as i64);
    if v.log.is_empty() {
        return o;
    }
    o.with_table(DataTable {
        title: "What the watch saw".to_string(),
        header: vec!["after".to_string(), "event".to_string()],
        rows: v
            .log
            .iter()
            .map(|(t, line)| vec![format!("{t:.1} s"), line.clone()])
            .collect(),
        legend: None,
    })
}

fn base(v: &Verdict, w: &Watcher, watched_s: f64, ranks: usize) -> Outcome {
    if let Some((summary, blamed, action)) = &v.hang {
        let stopped = if v.stopped {
            "; the watch ended the job"
        } else {
            ""
        };
        return Outcome::fail(
            format!("the job hung: {summary}{stopped}"),
            "see job.hang for the ranks and their frames; the job cannot go on by itself",
        )
        .with_action(*action, Vec::new())
        .with_ranks(blamed.clone(), None);
    }
    if let Some(Event::Crash {
        rank,
        pid,
        exit,
        oom,
        last,
    }) = &v.crash
    {
        let hint = if *oom {
            "the node ran out of memory: lower the batch size or num_workers, or give the job \
             more memory (a container's memory limit)"
        } else {
            "read that rank's own output (its traceback) first: the other ranks' errors follow \
             from it"
        };
        return Outcome::fail(crash_words(*rank, *pid, *exit, *oom, last), hint)
            .with_action(Action::RestartJob, Vec::new())
            .with_ranks(vec![*rank], None);
    }
    if !w.stragglers().is_empty() {
        return Outcome::warn(
            format!(
                "{} straggle: caught outside collectives while the others waited, again and again",
                super::ranks_phrase(w.stragglers())
            ),
            "every other rank waits for it at every step: look at what it does before each \
             collective (its data loader's num_workers and pin_memory, a slower GPU, another \
             process on its GPU, a rank-specific branch such as logging on rank 0)",
        )
        .with_ranks(w.stragglers().to_vec(), None);
    }
    Outcome::pass(format!(
        "watched {ranks} rank{} for {}: no crash, no hang (hang after {}), no straggler",
        if ranks == 1 { "" } else { "s" },
        secs(watched_s),
        secs(w.hang_after_s())
    ))
}

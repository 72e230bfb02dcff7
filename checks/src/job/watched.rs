//! job.traces on a job watched live: which ranks run here and in what
//! state, whether this node runs as many as the job says it should, and
//! whose recorder and stack could be read.

use super::live::Live;
use super::{hang_live, ranks_phrase, Job};
use crate::domain::job::rank_list;
use crate::probe::ranks::RankProcess;
use crate::Outcome;

pub fn judge(job: &Job, live: &Live) -> Outcome {
    let found: Vec<u32> = live.ranks.iter().map(|r| r.rank).collect();
    let pids: Vec<String> = live.ranks.iter().map(|r| r.pid.to_string()).collect();
    let base = |o: Outcome| {
        o.with_fact("ranks_here", rank_list(&found))
            .with_fact("pids", pids.join(", "))
            .with_fact("recorders_read", job.traces.len())
            .with_table(hang_live::where_table(live))
    };
    let killed = oom_words(live);
    if let Some(o) = states(live).or_else(|| too_few(live)) {
        let mut o = o;
        if let Some(k) = killed {
            o.summary = format!("{}; {k}", o.summary);
        }
        return base(o);
    }
    if let Some(k) = killed {
        return base(Outcome::warn(
            k,
            "the node ran out of memory while the job ran: a DataLoader worker or a process \
             beside the job was killed; lower num_workers or the batch size, or give the job \
             more memory (a container's memory limit)",
        ));
    }
    if let Some(o) = recorder_off(live).or_else(|| unreadable(job, live)) {
        return base(o);
    }
    let world = live.ranks.first().map_or(0, |r| r.world_size);
    let sources = sources(live, job);
    base(Outcome::pass(format!(
        "{} of a {world}-rank job run here (pids {}); {sources}",
        ranks_phrase(&found),
        pids.join(", ")
    )))
}

/// Ranks whose environment turns the Flight Recorder off.
fn recorder_off(live: &Live) -> Option<Outcome> {
    let off: Vec<u32> = live
        .ranks
        .iter()
        .filter(|r| r.fr_buffer.as_deref().is_some_and(|b| b.trim() == "0"))
        .map(|r| r.rank)
        .collect();
    (!off.is_empty()).then(|| {
        Outcome::warn(
            format!(
                "{} run with TORCH_FR_BUFFER_SIZE=0: the Flight Recorder is off",
                ranks_phrase(&off)
            ),
            "unset it (the default records 2,000 collectives) so the next hang shows its \
             collectives; stacks are judged meanwhile",
        )
    })
}

/// No rank's stack nor recorder could be read: what is missing.
fn unreadable(job: &Job, live: &Live) -> Option<Outcome> {
    if !live.stack_source.is_empty() || !job.traces.is_empty() {
        return None;
    }
    let why = live.errors.first().map_or("", |(_, e)| e.as_str());
    Some(Outcome::warn(
        format!("no rank's state could be read: {why}"),
        "run gpucheck job as the job's user or root, with py-spy installed (pip install \
         py-spy), or give each rank a worker server (wrap its main in \
         torch.distributed.elastic.control_plane.worker_main() with its own \
         TORCH_WORKER_SERVER_SOCKET)",
    ))
}

/// Ranks stopped, gone or stuck in the kernel after the looks.
fn states(live: &Live) -> Option<Outcome> {
    let with = |letters: &[char]| -> Vec<u32> {
        live.states_after
            .iter()
            .filter(|(_, s)| letters.contains(s))
            .map(|(r, _)| *r)
            .collect()
    };
    let stopped = with(&['T', 't']);
    if !stopped.is_empty() {
        return Some(
            Outcome::fail(
                format!(
                    "{} stopped (SIGSTOP, a debugger, Ctrl-Z)",
                    ranks_phrase(&stopped)
                ),
                "a stopped rank holds every other rank in its next collective: resume it \
                 (`kill -CONT PID`) or detach the debugger",
            )
            .with_ranks(stopped, None),
        );
    }
    let gone = with(&['?', 'Z', 'X']);
    if !gone.is_empty() {
        return Some(
            Outcome::fail(
                format!("{} exited while gpucheck looked", ranks_phrase(&gone)),
                "a rank that dies leaves the others waiting in their next collective: read \
                 its log; `dmesg` shows an out-of-memory kill",
            )
            .with_ranks(gone, None),
        );
    }
    let kernel = with(&['D']);
    (!kernel.is_empty()).then(|| {
        Outcome::warn(
            format!(
                "{} in uninterruptible sleep (state D): waiting in the kernel, on a driver or \
                 a file system",
                ranks_phrase(&kernel)
            ),
            "look at `dmesg` (Xid errors, hung task warnings) and the file systems the job \
             reads; a rank that stays in D cannot be killed until the kernel lets go",
        )
        .with_ranks(kernel, None)
    })
}

/// The ranks this node should run: LOCAL_WORLD_SIZE, else the whole world
/// when the job's master is this machine's loopback (a one-node job, unless
/// it was watched on several nodes at once).
fn expected_here(r: &RankProcess, across_nodes: bool) -> Option<u32> {
    r.local_world_size.or_else(|| {
        if across_nodes {
            return None;
        }
        let addr = r
            .master
            .as_deref()?
            .rsplit_once(':')
            .map_or(r.master.as_deref()?, |(a, _)| a);
        let loopback = addr == "localhost" || addr.starts_with("127.") || addr == "::1";
        loopback.then_some(r.world_size)
    })
}

/// Fewer ranks here than the job's launch variables say.
fn too_few(live: &Live) -> Option<Outcome> {
    let first = live.ranks.first()?;
    let expected = expected_here(first, live.across_nodes)?;
    let here = live.ranks.len() as u32;
    if here >= expected {
        return None;
    }
    let present: Vec<u32> = live
        .ranks
        .iter()
        .map(|r| r.local_rank.unwrap_or(r.rank))
        .collect();
    let missing: Vec<u32> = (0..expected).filter(|l| !present.contains(l)).collect();
    let what = if first.local_world_size.is_some() {
        format!("LOCAL_WORLD_SIZE={expected}")
    } else {
        format!("WORLD_SIZE={expected} with its master on this machine")
    };
    Some(Outcome::fail(
        format!(
            "{here} of {expected} ranks run here ({what}); local {} not running",
            ranks_phrase(&missing)
        ),
        "start one process per rank (torchrun --nproc-per-node N script.py), or set \
         WORLD_SIZE to the number of processes started: the ranks that run wait at init or \
         in their first collective for the ones that never started",
    ))
}

/// "recorders read from 3 worker servers; stacks by py-spy".
fn sources(live: &Live, job: &Job) -> String {
    let mut how: Vec<&str> = live.stack_source.values().copied().collect();
    how.sort_unstable();
    how.dedup();
    let mut from: Vec<&str> = live.recorder_source.values().copied().collect();
    from.sort_unstable();
    from.dedup();
    let recorders = match (job.traces.len(), from.as_slice()) {
        (0, _) => {
            "no recorder to read (no worker server, dump pipe or dump since the start)".to_string()
        }
        (n, [one]) => format!("recorders of {n} ranks read from their {one}s"),
        (n, _) => format!("recorders of {n} ranks read from their {}", from.join(", ")),
    };
    let stacks = match how.as_slice() {
        [] => "no stack could be read".to_string(),
        list => format!("stacks by {}", list.join(" and ")),
    };
    let recorders_unread = job
        .unreadable
        .iter()
        .map(|u| format!("rank {}'s recorder: {}", u.rank, u.error));
    let errors: Vec<String> = live
        .errors
        .iter()
        .map(|(r, e)| format!("rank {r}: {e}"))
        .chain(recorders_unread)
        .take(3)
        .collect();
    if errors.is_empty() {
        format!("{recorders}; {stacks}")
    } else {
        format!("{recorders}; {stacks}; {}", errors.join("; "))
    }
}

/// "the kernel's OOM killer killed pid 4242 (python) at 5120.4 s after
/// boot, after the job started", for every kill since the job started.
fn oom_words(live: &Live) -> Option<String> {
    let kills = live.oom_kills_since_start();
    let first = kills.first()?;
    let more = match kills.len() {
        1 => String::new(),
        n => format!(" ({} kills in all)", n),
    };
    Some(format!(
        "the kernel's OOM killer killed pid {} ({}) at {}, after the job started{more}",
        first.pid, first.name, first.when
    ))
}

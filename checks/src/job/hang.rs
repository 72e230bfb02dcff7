//! job.hang: where the job's ranks first disagree (the wavefront), and the
//! ranks at fault there: the ones that never joined the collective the
//! others wait in, or entered it with another op, size or dtype.

use super::{hang_live, job_check, ranks_phrase, Job};
use crate::domain::job::{self, rank_list, Blamed, WaveKind, Wavefront};
use crate::{Collective, DataTable, Outcome};

job_check!(
    Hang,
    "job.hang",
    "Hang or desync: the ranks at the wavefront",
    "Compares every rank's Flight Recorder entries, per process group and collective sequence \
number, and finds the first sequence at which the ranks disagree: the wavefront. Of all groups, \
the earliest in time is the cause (a group stuck later waits on it).

What it names, never blaming the healthy majority:
- ranks that never enqueued the collective the others wait in (a rank that skipped it, sleeps, \
is stuck in a data loader or an `if rank == 0` branch, or died: a rank with no dump that the \
others wait for is named too);
- ranks that entered it with another collective, tensor size or dtype than a strict majority \
(a desync); with no majority (two ranks) every side is named as a mismatch between them;
- a few ranks that called a collective the rest never called.
Sequence numbers decide, not the entries' state: after gloo's timeout every waiting rank's entry \
reads completed and retired although the collective never ran.

When every rank entered the same collective alike and it does not finish, no rank is blamed: \
that is not a code path but the network, a GPU or NCCL itself (run gpucheck on the job's nodes: \
the fabric, gpu and nccl checks; dmesg for Xid errors).

Uneven all-gathers and all-to-alls, coalesced groups and the out-of-place broadcast and reduce \
are matched as PyTorch's own analyzer matches them; point-to-point sends and receives are not \
judged here.

fail: the ranks at the wavefront, with the group, sequence and collective, and what the \
others were doing (JSON: `ranks` and `collective`).
pass: every group's ranks agree up to their last collective and it finished.

Live (`gpucheck job` on the job's node): collectives recorded between the first and last look, \
2 s apart, mean the job moves (pass). Otherwise the recorders' wavefront is judged as above, with \
each named rank's Python frame; without recorders (no worker server), the stacks read at nine \
moments: the ranks that stayed outside collectives at every moment while the others waited in \
one are named with their frame (a sleep, the data loader, their own code). Every rank in the \
same collective at every moment, with no recorder to show whether it finishes, is a warning. \
Watched on one node of several, a rank of another node is never blamed from here: the node says \
its ranks wait for ranks elsewhere; with --nnodes on every node, node rank 0 judges the whole \
job over every node's ranks.",
    judge
);

/// At most this many blamed ranks get a row of their own in the table.
const MAX_ROWS: usize = 32;

pub fn judge(job: &Job) -> Outcome {
    if let Some(moving) = job.live.as_ref().and_then(hang_live::moving) {
        return moving;
    }
    let Some(mut w) = job::wavefront(&job.traces, &job.members) else {
        if let Some(live) = &job.live {
            return hang_live::from_stacks(live);
        }
        return Outcome::pass(format!(
            "no disagreement: in {} the ranks agree up to their last collective, and it \
             finished",
            groups_phrase(job)
        ));
    };
    let collective = Collective {
        group: w.group.name.clone(),
        group_desc: w.group.desc.clone(),
        seq: w.seq,
        op: w.op.clone(),
    };
    if let Some(live) = &job.live {
        // Watched on one node of several: a rank of another node is not
        // blamed from here, where nothing of it was seen.
        if !w.blamed.is_empty() && !w.blamed.iter().any(|b| live.rank(b.rank).is_some()) {
            return hang_live::elsewhere(&w, live).with_ranks(Vec::new(), Some(collective));
        }
        if !w.blamed.is_empty() {
            w.blamed.retain(|b| live.rank(b.rank).is_some());
        }
    }
    let (mut summary, hint) = words(&w);
    if let Some(live) = &job.live {
        let places: Vec<String> = w
            .blamed
            .iter()
            .filter_map(|b| hang_live::where_is(live, b.rank))
            .collect();
        if !places.is_empty() {
            summary = format!("{summary}; {}", places.join("; "));
        }
    }
    Outcome::fail(summary, hint)
        .with_ranks(w.blamed_ranks(), Some(collective))
        .with_fact("group", w.group.label())
        .with_fact("seq", w.seq)
        .with_fact("collective", w.call.clone())
        .with_fact("waiting", rank_list(&w.waiting))
        .with_table(table(&w.blamed))
}

fn groups_phrase(job: &Job) -> String {
    match job.members.groups.len() {
        1 => "its one process group".to_string(),
        n => format!("all {n} process groups"),
    }
}

/// "all_reduce #6 of group 0 (default_pg)".
fn at(w: &Wavefront) -> String {
    format!("{} #{} of {}", w.op, w.seq, w.group.label())
}

fn words(w: &Wavefront) -> (String, String) {
    let blamed = ranks_phrase(&w.blamed_ranks());
    let waiting = ranks_phrase(&w.waiting);
    let (wait, call) = match w.waiting.len() {
        1 => ("waits", "calls"),
        _ => ("wait", "call"),
    };
    let first = w.blamed.first().map_or("", |b| b.doing.as_str());
    let one = w.blamed.len() == 1;
    match w.kind {
        WaveKind::NotJoined => (
            format!(
                "{blamed} never joined {}: {waiting} {wait} in it{}",
                at(w),
                if one {
                    format!("; {blamed} {first}")
                } else {
                    String::new()
                }
            ),
            format!(
                "{blamed} took another code path or is stuck outside collectives (a data \
                 loader, an `if rank == ...` branch, a sleep, a crash): look at its stack \
                 (`py-spy dump --pid PID`) and its log; the waiting ranks are healthy"
            ),
        ),
        WaveKind::Ahead => (
            format!(
                "{blamed} called {} as #{}, which {waiting} never called",
                w.call, w.seq
            ),
            format!(
                "a collective inside a branch only {blamed} takes (`if rank == ...`): every \
                 rank of {} must call the same collectives in the same order",
                w.group.label()
            ),
        ),
        WaveKind::Mismatch => (
            format!(
                "{blamed} {first} of {}, where {waiting} {call} {}",
                w.group.label(),
                w.call
            ),
            format!(
                "a desync: {blamed} passes another collective, shape or dtype at the same \
                 point; find the rank-dependent code or data (uneven batches, a rank-specific \
                 branch) that changes it"
            ),
        ),
        WaveKind::Split => (
            format!(
                "{blamed} disagree at #{} of {}: {}",
                w.seq,
                w.group.label(),
                sides(&w.blamed)
            ),
            "with no majority either side may be wrong: compare the two code paths (the \
             tensors' shapes and dtypes, the collective called) at this step"
                .to_string(),
        ),
        WaveKind::Stuck => (
            format!(
                "every rank ({}) entered {} alike and it did not finish: not a code path",
                rank_list(&w.waiting),
                at(w)
            ),
            "the network, a GPU or NCCL: run `gpucheck` (the fabric, gpu and nccl checks) on \
             the job's nodes, look for Xid errors in `dmesg`, and rerun with NCCL_DEBUG=INFO"
                .to_string(),
        ),
    }
}

/// "rank 0 called all_reduce [4] Float, rank 1 called all_reduce [6] Float".
fn sides(blamed: &[Blamed]) -> String {
    let parts: Vec<String> = blamed
        .iter()
        .take(4)
        .map(|b| format!("rank {} {}", b.rank, b.doing))
        .collect();
    parts.join("; ")
}

fn table(blamed: &[Blamed]) -> DataTable {
    let mut rows: Vec<Vec<String>> = blamed
        .iter()
        .take(MAX_ROWS)
        .map(|b| vec![b.rank.to_string(), b.doing.clone()])
        .collect();
    if blamed.len() > MAX_ROWS {
        rows.push(vec![
            "...".to_string(),
            format!("{} more ranks", blamed.len() - MAX_ROWS),
        ]);
    }
    DataTable {
        title: "Ranks at the wavefront".to_string(),
        header: vec!["rank".to_string(), "what it did".to_string()],
        rows,
        legend: None,
    }
}

//! job.traces: what the job's Flight Recorder dumps hold, which ranks left
//! none, and which files could not be read.

use super::{ranks_phrase, Job};
use crate::domain::text::cut;
use crate::identity::check;
use crate::Outcome;

check!(
    Traces,
    "job.traces",
    "Flight Recorder dumps of every rank",
    "Reads every file in the --traces folder whose name ends in a rank number (rank_0, \
nccl_trace_rank_7, _dump_12, fr_3.json), pickle or JSON, Flight Recorder format 2.4 to 2.10, and \
rebuilds who is in which process group from the dumps themselves (pg_config, else the entries \
and pg_status: torch 2.15's gloo dumps name their group config wrongly).

A dump is a file from elsewhere: pickles are decoded by gpucheck itself, which knows only the \
data opcodes the Flight Recorder writes and refuses any that would import or call code (nothing \
is ever executed); sizes, nesting and counts are bounded.

fail: a rank's file cannot be read (refused, truncated, not a dump): the file is named; the \
other ranks are still judged. Every dump empty: the recorder was off in the job \
(TORCH_FR_BUFFER_SIZE=0): set TORCH_FR_BUFFER_SIZE=2000 (the default) for the next run.
warn: ranks of the job left no dump (a rank that crashed or was killed writes none; so does one \
hung outside Python): what the other ranks waited for is still shown by job.hang.
pass: every rank of the job left a readable dump.

Live (`gpucheck job` on the job's node, no --traces): the ranks found here (processes with RANK \
and WORLD_SIZE in their environment), how their stacks and recorders were read, and a table of \
where each rank is. fail: a rank stopped (SIGSTOP, a debugger) or exited while gpucheck looked; \
fewer ranks here than LOCAL_WORLD_SIZE (or a one-node WORLD_SIZE) says (with the processes the \
kernel's OOM killer killed since the job started). warn: an OOM kill since the job started; a \
rank in state D \
(stuck in the kernel), the recorder turned off (TORCH_FR_BUFFER_SIZE=0), or no rank's state \
readable (no worker server, no py-spy or no ptrace rights: what is missing is named).",
    profile: super::JOB_PROFILE,
    timeout: super::TIMEOUT,
    run: |check, ctx| super::judged(check, ctx, judge),
);

/// Longest error text kept from a file's reader.
const MAX_ERROR: usize = 200;

pub fn judge(job: &Job) -> Outcome {
    if let Some(live) = &job.live {
        return super::watched::judge(job, live);
    }
    let read = job.traces.len();
    let entries: usize = job.traces.iter().map(|t| t.entries.len()).sum();
    let mut versions: Vec<&str> = job.traces.iter().map(|t| t.version.as_str()).collect();
    versions.sort_unstable();
    versions.dedup();
    let base = |o: Outcome| {
        o.with_fact("ranks_read", read)
            .with_fact("world_size", job.members.world.len())
            .with_fact("entries", entries)
            .with_fact("format_versions", versions.join(", "))
            .with_fact("folder", job.dir.display().to_string())
    };
    if let Some(o) = unreadable(job) {
        return base(o);
    }
    if read > 0 && entries == 0 {
        return base(Outcome::fail(
            format!("the {read} dumps hold no entries: the Flight Recorder was off in the job"),
            "set TORCH_FR_BUFFER_SIZE=2000 (its default; 0 turns it off) in the job's \
             environment, and dump again when it hangs",
        ));
    }
    let missing = &job.members.missing;
    if !missing.is_empty() {
        return base(
            Outcome::warn(
                format!(
                    "{} of {} left no dump in {}",
                    ranks_phrase(missing),
                    job.members.world.len(),
                    job.dir.display()
                ),
                "a rank that crashed, was killed or hangs outside Python writes no dump: look \
                 at its log and its node (`gpucheck` there); job.hang shows what the others \
                 waited for",
            )
            .with_ranks(missing.clone(), None),
        );
    }
    base(Outcome::pass(format!(
        "{read} ranks' dumps read ({entries} entries, format {})",
        versions.join(", ")
    )))
}

/// A fail naming the files that could not be read.
fn unreadable(job: &Job) -> Option<Outcome> {
    let first = job.unreadable.first()?;
    let ranks: Vec<u32> = job.unreadable.iter().map(|u| u.rank).collect();
    let more = match job.unreadable.len() {
        1 => String::new(),
        n => format!(" (and {} more: {})", n - 1, ranks_phrase(&ranks[1..])),
    };
    Some(
        Outcome::fail(
            format!(
                "rank {}'s dump {} cannot be read: {}{more}",
                first.rank,
                cut(&first.file, MAX_ERROR),
                cut(&first.error, MAX_ERROR)
            ),
            "the other ranks are judged without it; a dump from another tool or a file \
             damaged in transfer: dump that rank again (TORCH_FR_DUMP_TEMP_FILE, or \
             torch's _dump_fr_trace)",
        )
        .with_ranks(ranks, None),
    )
}

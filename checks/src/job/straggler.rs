//! job.straggler: a rank that enters collectives late again and again, so
//! every other rank waits for it at every step.

use super::{job_check, Job};
use crate::domain::job::{self, STRAGGLER_MIN_COMPARED, STRAGGLER_MIN_MS};
use crate::{DeviceResult, Metric, Outcome, Status};

job_check!(
    Straggler,
    "job.straggler",
    "Straggler: a rank that enters collectives late, repeatedly",
    "For every collective all of a process group's ranks entered alike, compares when each rank \
enqueued it (time_created_ns) with the median of the others. A rank whose median lateness over at \
least 5 collectives is 20 ms or more is a straggler: every other rank waits for it at every \
step, so the whole job runs at its pace. One late entry (a checkpoint, a garbage collection) is \
noise and is not named.

The times are each rank's wall clock: ranks on different nodes compare well when the nodes' \
clocks are in sync (NTP or PTP; `gpucheck cluster` checks fleet.clock).

fail: the straggling rank, how late (median and worst) and over how many collectives, per rank \
in the JSON's devices rows. Look at what that rank does before each collective: its data loader \
(num_workers, pin_memory), a slower GPU or CPU, another process on its GPU, a rank-specific \
branch (logging, evaluation on rank 0).
pass: no rank is late by 20 ms or more in the median.",
    judge
);

pub fn judge(job: &Job) -> Outcome {
    let found = job::stragglers(&job.traces, &job.members);
    let Some(worst) = found
        .iter()
        .max_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
    else {
        return Outcome::pass(format!(
            "no rank enters collectives late: every rank's median lateness is under {} ms \
             (over {} collectives or more)",
            STRAGGLER_MIN_MS, STRAGGLER_MIN_COMPARED
        ));
    };
    let ranks: Vec<u32> = found.iter().map(|s| s.rank).collect();
    let others = match found.len() {
        1 => String::new(),
        n => format!(
            " ({} stragglers in all: ranks {})",
            n,
            job::rank_list(&ranks)
        ),
    };
    let summary = format!(
        "rank {} starts collectives {:.0} ms after the median of the others over the last {} \
         of {} (worst {:.0} ms){others}",
        worst.rank,
        worst.median_ms,
        worst.compared,
        worst.group.label(),
        worst.worst_ms
    );
    let mut hint = format!(
        "every rank waits for rank {} at every step: look at what it does before each \
         collective (its data loader's num_workers and pin_memory, a rank-specific branch such \
         as logging or evaluation, another process on its GPU) and run `gpucheck --profile \
         full` on its node",
        worst.rank
    );
    let mut summary = summary;
    if let Some((seen, cause)) = job
        .live
        .as_ref()
        .and_then(|l| super::hang_live::busy_at(l, worst.rank))
    {
        summary = format!("{summary}; {seen}");
        hint = cause;
    }
    let mut o = Outcome::fail(summary, hint)
        .with_ranks(ranks, None)
        .with_fact("group", worst.group.label())
        .with_metric("lateness_median_ms", worst.median_ms, "ms")
        .with_metric("lateness_worst_ms", worst.worst_ms, "ms");
    for s in &found {
        o = o.with_device(DeviceResult {
            index: s.rank,
            label: Some(format!("rank {}", s.rank)),
            name: String::new(),
            uuid: None,
            status: Status::Fail,
            summary: format!(
                "{:.0} ms late in the median, worst {:.0} ms, over {} collectives",
                s.median_ms, s.worst_ms, s.compared
            ),
            metrics: vec![Metric {
                name: "lateness_median_ms".to_string(),
                value: s.median_ms,
                unit: "ms".to_string(),
            }],
        });
    }
    o
}

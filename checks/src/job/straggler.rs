//! job.straggler: a rank that enters collectives late again and again, so
//! every other rank waits for it at every step.

use super::Job;
use crate::domain::action::Action;
use crate::domain::job::{
    self, LateEntry, LATE_ONCE_MIN_MS, LATE_ONCE_SPREAD_FACTOR, STRAGGLER_MIN_COMPARED,
    STRAGGLER_MIN_MS,
};
use crate::facts::job::{Lateness, RankLateness};
use crate::identity::check;
use crate::{DeviceResult, Metric, Outcome, Status};

check!(
    Straggler,
    "job.straggler",
    "Straggler: a rank that enters collectives late, repeatedly",
    "For every collective all of a process group's ranks entered alike, compares when each rank \
enqueued it (time_created_ns) with the median of the others. A rank whose median lateness over at \
least 5 collectives is 20 ms or more is a straggler: every other rank waits for it at every \
step, so the whole job runs at its pace. One late entry (a checkpoint, a garbage collection) is \
noise and is not named as a straggler.

One collective entered far later than the others is named once, as a warning: a lateness of 2 s or \
more that is also beyond 20 times the group's usual spread (the 90th percentile of every rank's \
lateness there), against the median of the other ranks. The job went on, but every other rank \
waited that long for it (a checkpoint, an evaluation or a log flush on one rank, a stalled file \
system or data loader). 2 s is five times the noise a garbage collection or a data loader's \
hiccup gives (the 400 ms of the straggler_once fixture) and far below any collective timeout; the \
spread factor keeps a job whose ranks routinely drift (unsynchronised clocks) from naming its drift.

The times are each rank's wall clock: ranks on different nodes compare well when the nodes' \
clocks are in sync (NTP or PTP; `gpucheck cluster` checks fleet.clock).

fail: the straggling rank, how late (median and worst) and over how many collectives, per rank \
in the JSON's devices rows. Look at what that rank does before each collective: its data loader \
(num_workers, pin_memory), a slower GPU or CPU, another process on its GPU, a rank-specific \
branch (logging, evaluation on rank 0).
warn: a rank entered one collective seconds late, with the collective and the ranks that waited.
pass: no rank is late by 20 ms or more in the median, and none once by seconds.
skip: lateness was not measured: no rank's Flight Recorder was read, or the recorders share fewer \
than 5 collectives every rank entered alike (a verdict either way would be a guess).
Measured, every verdict carries each rank's median and worst lateness (JSON: \
`data.job_lateness`), which `--html` charts.",
    profile: super::JOB_PROFILE,
    timeout: super::TIMEOUT,
    run: |check, ctx| super::judged(check, ctx, judge),
);

pub fn judge(job: &Job) -> Outcome {
    let judged = verdict(job);
    match judged.status {
        Status::Skip => judged,
        _ => judged.publish(&lateness(job)),
    }
}

/// Every rank's lateness, straggler or not, for the reports that draw
/// it.
fn lateness(job: &Job) -> Lateness {
    Lateness {
        straggler_ms: STRAGGLER_MIN_MS,
        ranks: job::lateness_in(&job.index().timing)
            .into_iter()
            .map(|s| RankLateness {
                rank: s.rank,
                median_ms: s.median_ms,
                worst_ms: s.worst_ms,
                compared: s.compared,
            })
            .collect(),
    }
}

fn verdict(job: &Job) -> Outcome {
    let found = &job.index().stragglers;
    let Some(worst) = found
        .iter()
        .max_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
    else {
        let late = job::late_entries_in(&job.index().timing);
        if let Some(o) = late_once(&late) {
            return o;
        }
        if let Some(o) = not_measured(job) {
            return o;
        }
        return Outcome::pass(format!(
            "no rank enters collectives late: every rank's median lateness is under {} ms \
             (over {} collectives or more), and none entered one {:.0} s late",
            STRAGGLER_MIN_MS,
            STRAGGLER_MIN_COMPARED,
            LATE_ONCE_MIN_MS / 1e3
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
    for s in found {
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

/// Lateness not measured: no recorder was read, or the ranks' recorders
/// share too few collectives to judge a median by. Saying "no rank is
/// late" there would claim what nothing measured.
fn not_measured(job: &Job) -> Option<Outcome> {
    if job.traces.is_empty() {
        return Some(Outcome::skip(
            "lateness not measured: no rank's Flight Recorder could be read (the job runs \
             without TORCH_NCCL_TRACE_BUFFER_SIZE, or without a worker server, dump pipe or \
             dumps gpucheck can read)",
        ));
    }
    let compared = job::lateness_evidence_in(&job.index().timing);
    (compared < STRAGGLER_MIN_COMPARED).then(|| {
        Outcome::skip(format!(
            "lateness not measured: the ranks' recorders share {compared} collective(s) entered \
             alike, and a median needs {STRAGGLER_MIN_COMPARED}"
        ))
    })
}

/// A warning naming the ranks that entered one collective seconds late.
fn late_once(late: &[LateEntry]) -> Option<Outcome> {
    let worst = late.first()?;
    let mut ranks: Vec<u32> = late.iter().map(|l| l.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let others = if worst.others.is_empty() {
        "the other ranks".to_string()
    } else {
        super::ranks_phrase(&worst.others)
    };
    let more = match late.len() {
        1 => String::new(),
        n => format!(
            " ({} late entries in all: ranks {})",
            n,
            job::rank_list(&ranks)
        ),
    };
    Some(
        Outcome::warn(
            format!(
                "rank {} entered {} #{} of {} {:.1} s after {others}{more}",
                worst.rank,
                worst.op,
                worst.seq,
                worst.group.label(),
                worst.late_ms / 1e3
            ),
            format!(
                "the job went on, but every other rank waited {:.1} s for rank {} there: look \
                 at what it did before that collective (a checkpoint, an evaluation or a log \
                 flush on one rank, a stalled file system or data loader); named once it is \
                 {:.0} s late and {:.0} times the job's usual spread",
                worst.late_ms / 1e3,
                worst.rank,
                LATE_ONCE_MIN_MS / 1e3,
                LATE_ONCE_SPREAD_FACTOR
            ),
        )
        .with_ranks(ranks, None)
        .with_action(Action::None, Vec::new())
        .with_fact("group", worst.group.label())
        .with_fact("seq", worst.seq)
        .with_metric("late_once_ms", worst.late_ms, "ms"),
    )
}

#[cfg(test)]
mod tests {
    use super::super::Job;
    use crate::domain::job;
    use crate::facts::job::Lateness;
    use crate::Status;

    fn fixture(case: &str) -> Job {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/flight_recorder")
            .join(case);
        Job::read(&dir).expect("the fixture reads")
    }

    #[test]
    fn the_shared_index_judges_as_each_judgement_alone() {
        for case in [
            "straggler-json",
            "straggler_once",
            "two_groups",
            "missing_rank",
            "skip",
        ] {
            let job = fixture(case);
            let index = job.index();
            let (traces, members) = (&job.traces, &job.members);
            assert_eq!(index.stragglers, job::stragglers(traces, members), "{case}");
            assert_eq!(index.waves, job::wavefronts(traces, members), "{case}");
            let timing = &index.timing;
            assert_eq!(job::lateness_in(timing), job::lateness(traces, members));
            assert_eq!(
                job::late_entries_in(timing),
                job::late_entries(traces, members)
            );
        }
    }

    #[test]
    fn no_recorder_read_is_lateness_not_measured_never_a_pass() {
        let o = super::judge(&Job::default());
        assert_eq!(o.status, Status::Skip, "{}", o.summary);
        assert!(
            o.summary.starts_with("lateness not measured"),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("Flight Recorder"), "{}", o.summary);
    }

    #[test]
    fn recorders_sharing_too_few_collectives_measure_nothing() {
        let mut job = fixture("healthy-json");
        for t in &mut job.traces {
            t.entries.truncate(3);
        }
        let o = super::judge(&job);
        assert_eq!(o.status, Status::Skip, "{}", o.summary);
        assert!(o.summary.contains("share 3 collective(s)"), "{}", o.summary);
    }

    #[test]
    fn a_healthy_jobs_recorders_pass_and_a_late_rank_fails() {
        let o = super::judge(&fixture("healthy-json"));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        let o = super::judge(&fixture("straggler-json"));
        assert_eq!(o.status, Status::Fail, "{}", o.summary);
        assert!(!o.ranks.is_empty());
    }

    #[test]
    fn every_ranks_lateness_is_published_the_stragglers_above_the_line() {
        let o = super::judge(&fixture("straggler-json"));
        let late: Lateness = o.fact().expect("the lateness is published");
        let job = fixture("straggler-json");
        assert_eq!(late.ranks.len(), job.traces.len(), "{late:?}");
        for r in &late.ranks {
            let named = o.ranks.contains(&r.rank);
            assert_eq!(named, r.median_ms >= late.straggler_ms, "{r:?}");
        }
        let skipped = super::judge(&Job::default());
        assert!(skipped.fact::<Lateness>().is_none(), "not measured: none");
    }
}

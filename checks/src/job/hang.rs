//! job.hang: where the job's ranks first disagree (the wavefront), and the
//! ranks at fault there: the ones that never joined the collective the
//! others wait in, or entered it with another op, size or dtype.

use super::{hang_live, ranks_phrase, Job};
use crate::domain::action::Action;
use crate::domain::job::{rank_list, Blamed, WaveKind, Wavefront};
use crate::facts::job::{self as facts, GroupWave, RankState, WavefrontMap};
use crate::identity::check;
use crate::{Collective, DataTable, Outcome};

check!(
    Hang,
    "job.hang",
    "Hang or desync: the ranks at the wavefront",
    "Compares every rank's Flight Recorder entries, per process group and collective sequence \
number, and finds in each group the first sequence at which its ranks disagree: the wavefront. \
Every group's own culprits are named (two groups held up by two ranks name both); a rank that \
waits inside another group's collective is not a culprit of the group it has not reached.

What it names, never blaming the healthy majority:
- ranks that never enqueued the collective the others wait in (a rank that skipped it, sleeps, \
is stuck in a data loader or an `if rank == 0` branch, or died: a rank with no dump that the \
others wait for is named too);
- ranks that entered it with another collective, tensor shapes or dtypes than a strict majority \
(a desync); with no majority (two ranks) every side is named as a mismatch between them;
- a few ranks that called a collective the rest never called.
Sequence numbers decide, not the entries' state: after gloo's timeout every waiting rank's entry \
reads completed and retired although the collective never ran.

What must agree is what PyTorch's analyzer compares (torch.distributed.flight_recorder), op by \
op: input shapes (not for all-to-all and scatter), output shapes (not for all-to-all and gather), \
the sets of input dtypes (not for broadcast and scatter) and of output dtypes (not for gather); \
the uneven _v variants leave out the side that differs by design, a barrier compares its type \
only, and a coalesced group compares its ops one by one (an out-of-place broadcast of another \
size inside an uneven all-gather is a mismatch). Dtypes written as one plain name (older dumps) \
count as that name. The out-of-place broadcast and reduce match the in-place ones; \
point-to-point sends and receives are not judged here.

When every rank entered the same collective alike, no rank is blamed, and it is a hang only \
with evidence that the job stopped there: a rank's entry timed out, a backend that records \
completion (NCCL) retired it without completing it, a rank recorded another collective later \
than its timeout, or (live) no rank's recorder moved in 2 s. Then it is not a code path but the \
network, a GPU or NCCL (run gpucheck on the job's nodes: the fabric, gpu and nccl checks; dmesg \
for Xid errors). Without such evidence it is a warning: any dump of a running job shows its last \
collective in flight. Where one rank finished it, it ran: gloo (torch 2.15) records no \
completion and retires a finished collective a moment after it returns, so a job that ended \
normally shows its last collective retired on some ranks and not yet on others.

fail: the ranks at each wavefront, with the group, sequence and collective, and what the \
others were doing (JSON: `ranks`, and `collective` for the earliest wavefront).
warn: every rank inside the same collective, with nothing that shows the job stopped.
pass: every group's ranks agree up to their last collective and it finished (or is finishing).
Judged from recorders, every verdict carries each group's ranks at its wavefront as runs of ranks \
in the same state (JSON: `data.job_wavefront`), which `--html` draws.

Live (`gpucheck job` on the job's node): collectives recorded between the first and last look, \
2 s apart, mean the job moves (pass). Recorders read at both looks that did not move are judged \
as above, with each named rank's Python frame; recorders read at one look only are not enough \
(a running job's ranks are a collective apart as often as not), and without them (no worker \
server, a dump too slow to come) the stacks read at nine \
moments: the ranks that stayed outside collectives at every moment while the others waited in \
one are named with their frame (a sleep, the data loader, their own code). Every rank in the \
same collective at every moment, with no recorder to show whether it finishes, is a warning. \
Watched on one node of several, a rank of another node is never blamed from here: the node says \
its ranks wait for ranks elsewhere; with --nnodes on every node, node rank 0 judges the whole \
job over every node's ranks.",
    profile: super::JOB_PROFILE,
    timeout: super::TIMEOUT,
    run: |check, ctx| super::judged(check, ctx, judge),
);

/// At most this many blamed ranks get a row of their own in the table.
const MAX_ROWS: usize = 32;

pub fn judge(job: &Job) -> Outcome {
    if let Some(moving) = job.live.as_ref().and_then(hang_live::moving) {
        return moving;
    }
    let mut waves = job.index().waves.clone();
    if let Some(live) = job.live.as_ref().filter(|l| l.progress.is_none()) {
        waves.retain(|w| stands_read_once(w, live));
    }
    if waves.is_empty() {
        if let Some(live) = &job.live {
            return hang_live::from_stacks(live);
        }
        return Outcome::pass(format!(
            "no disagreement: in {} the ranks agree up to their last collective, and it \
             finished",
            groups_phrase(job)
        ))
        .publish(&picture(job, &waves));
    }
    if let Some(live) = &job.live {
        if let Some(elsewhere) = here_only(&mut waves, live) {
            return elsewhere;
        }
    }
    let judged = if waves[0].kind == WaveKind::Stuck {
        stuck(job, &waves[0])
    } else {
        blame(job, &waves)
    };
    judged.publish(&picture(job, &waves))
}

/// Every group's ranks at its wavefront (`waves`, the ones judged), as
/// runs of ranks in the same state, for the reports that draw them.
fn picture(job: &Job, waves: &[Wavefront]) -> WavefrontMap {
    let groups = job
        .members
        .groups
        .values()
        .filter(|g| !g.members.is_empty())
        .map(|g| {
            let wave = waves.iter().find(|w| w.group.name == g.name);
            let mut ranks: Vec<(u32, RankState, String)> = g
                .members
                .iter()
                .map(|r| {
                    let (state, doing) = state_at(wave, *r);
                    (*r, state, doing)
                })
                .collect();
            ranks.sort_by_key(|(r, _, _)| *r);
            ranks.dedup_by_key(|(r, _, _)| *r);
            GroupWave {
                group: g.label(),
                seq: wave.map(|w| w.seq),
                call: wave.map_or_else(String::new, |w| w.call.clone()),
                runs: facts::runs(&ranks),
            }
        })
        .collect();
    WavefrontMap {
        world_size: job.members.world.iter().max().map_or(0, |r| r + 1),
        groups,
    }
}

/// Where `rank` stands at its group's wavefront (None: the group agrees),
/// with what it did where it is named.
fn state_at(wave: Option<&Wavefront>, rank: u32) -> (RankState, String) {
    let Some(w) = wave else {
        return (RankState::Agrees, String::new());
    };
    if let Some(b) = w.blamed.iter().find(|b| b.rank == rank) {
        let state = match w.kind {
            WaveKind::NotJoined => RankState::Behind,
            WaveKind::Ahead => RankState::Ahead,
            WaveKind::Mismatch | WaveKind::Split => RankState::Mismatch,
            WaveKind::Stuck => RankState::Stuck,
        };
        return (state, b.doing.clone());
    }
    match (w.waiting.contains(&rank), w.kind) {
        (true, WaveKind::Stuck) => (RankState::Stuck, String::new()),
        // The majority never called what the few called: they agree.
        (true, WaveKind::Ahead) => (RankState::Agrees, String::new()),
        (true, _) => (RankState::Waiting, String::new()),
        (false, _) => (RankState::Elsewhere, String::new()),
    }
}

/// Live, with recorders not read at both looks: one read of a running job
/// finds a rank a collective behind (or ahead) as readily as a hang does,
/// so such a wavefront stands only where the stacks name the same ranks
/// (they stayed outside collectives at every look while the others
/// waited); else the stacks decide alone. A desync (another op, shape or
/// dtype) is a fault however the job moves, and every rank inside one
/// collective is judged by [`stuck`].
fn stands_read_once(w: &Wavefront, live: &super::live::Live) -> bool {
    if !matches!(w.kind, WaveKind::NotJoined | WaveKind::Ahead) {
        return true;
    }
    let Some(v) = crate::domain::stacks::judge(&live.samples) else {
        return false;
    };
    let named: Vec<u32> = v.blamed.iter().map(|(r, _)| *r).collect();
    w.blamed.iter().all(|b| named.contains(&b.rank))
}

/// Watched on one node of several: a rank of another node is not blamed
/// from here, where nothing of it was seen. The verdict when every
/// wavefront waits for ranks elsewhere only.
fn here_only(waves: &mut Vec<Wavefront>, live: &super::live::Live) -> Option<Outcome> {
    let here =
        |w: &Wavefront| w.blamed.is_empty() || w.blamed.iter().any(|b| live.rank(b.rank).is_some());
    if !waves.iter().any(here) {
        let first = &waves[0];
        return Some(
            hang_live::elsewhere(first, live).with_ranks(Vec::new(), Some(collective(first))),
        );
    }
    waves.retain(here);
    for w in waves.iter_mut() {
        w.blamed.retain(|b| live.rank(b.rank).is_some());
    }
    None
}

/// The fail naming every wavefront's culprits (`waves` is not empty).
fn blame(job: &Job, waves: &[Wavefront]) -> Outcome {
    let mut summary = waves
        .iter()
        .map(|w| words(w).0)
        .collect::<Vec<_>>()
        .join("; and ");
    let mut hint = words(&waves[0]).1;
    if waves.len() > 1 {
        hint = format!(
            "each of these {} process groups waits for its own rank(s): {hint}",
            waves.len()
        );
    }
    let mut blamed: Vec<u32> = waves.iter().flat_map(Wavefront::blamed_ranks).collect();
    blamed.sort_unstable();
    blamed.dedup();
    if let Some(live) = &job.live {
        let places: Vec<String> = blamed
            .iter()
            .filter_map(|r| hang_live::where_is(live, *r))
            .collect();
        if !places.is_empty() {
            summary = format!("{summary}; {}", places.join("; "));
        }
    }
    let w = &waves[0];
    Outcome::fail(summary, hint)
        .with_ranks(blamed, Some(collective(w)))
        .with_fact("group", w.group.label())
        .with_fact("seq", w.seq)
        .with_fact("collective", w.call.clone())
        .with_fact("waiting", rank_list(&w.waiting))
        .with_fact("wavefronts", waves.len())
        .with_table(table(waves))
}

fn collective(w: &Wavefront) -> Collective {
    Collective {
        group: w.group.name.clone(),
        group_desc: w.group.desc.clone(),
        seq: w.seq,
        op: w.op.clone(),
    }
}

/// Every rank entered the same collective alike: a hang below the code
/// (fail) only where something shows the job stopped there: the dumps
/// themselves, or a live job whose recorders did not move; otherwise what
/// any look at a running job shows (warn).
fn stuck(job: &Job, w: &Wavefront) -> Outcome {
    let still = job
        .live
        .as_ref()
        .and_then(|l| l.progress)
        .filter(|n| *n == 0)
        .map(|_| {
            format!(
                "no rank's recorder moved in {:.0} s",
                super::live::WINDOW.as_secs_f64()
            )
        });
    let facts = |o: Outcome| {
        o.with_ranks(Vec::new(), Some(collective(w)))
            .with_fact("group", w.group.label())
            .with_fact("seq", w.seq)
            .with_fact("collective", w.call.clone())
            .with_fact("waiting", rank_list(&w.waiting))
    };
    let every = format!("every rank ({})", rank_list(&w.waiting));
    match w.stopped.clone().or(still) {
        Some(why) => facts(Outcome::fail(
            format!(
                "{every} entered {} alike and it did not finish ({why}): not a code path",
                at(w)
            ),
            "the network, a GPU or NCCL: run `gpucheck` (the fabric, gpu and nccl checks) on \
             the job's nodes, look for Xid errors in `dmesg`, and rerun with NCCL_DEBUG=INFO",
        )),
        None => facts(
            Outcome::warn(
                format!(
                    "{every} is inside {} alike, and nothing shows that the job stopped there: \
                 any dump of a running job shows its last collective in flight",
                    at(w)
                ),
                "not a hang by this evidence: dump again after the collective's timeout (a rank \
             that does not return from it by then has stopped), or run `gpucheck job` on the \
             job's node, which sees whether the recorders move",
            )
            .with_action(Action::None, Vec::new()),
        ),
    }
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
            format!("every rank ({}) is inside {}", rank_list(&w.waiting), at(w)),
            String::new(),
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

/// The named ranks, each with the collective it holds up and what it did.
fn table(waves: &[Wavefront]) -> DataTable {
    let all: Vec<(&Wavefront, &Blamed)> = waves
        .iter()
        .flat_map(|w| w.blamed.iter().map(move |b| (w, b)))
        .collect();
    let mut rows: Vec<Vec<String>> = all
        .iter()
        .take(MAX_ROWS)
        .map(|(w, b)| vec![b.rank.to_string(), at(w), b.doing.clone()])
        .collect();
    if all.len() > MAX_ROWS {
        rows.push(vec![
            "...".to_string(),
            String::new(),
            format!("{} more ranks", all.len() - MAX_ROWS),
        ]);
    }
    DataTable {
        title: "Ranks at the wavefront".to_string(),
        header: ["rank", "holds up", "what it did"]
            .map(String::from)
            .to_vec(),
        rows,
        legend: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::live::Live;
    use super::super::Job;
    use crate::facts::job::{RankState, WavefrontMap};
    use crate::probe::ranks::RankProcess;
    use crate::Status;

    /// A fixture case's dumps as the recorders of a job watched live on
    /// one node, whose recorders moved by `progress` between the looks
    /// (None: read once, a dump file).
    fn live(case: &str, progress: Option<u64>) -> Job {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/flight_recorder")
            .join(case);
        let mut job = Job::read(&dir).expect("the fixture reads");
        job.live = Some(Live {
            ranks: job
                .traces
                .iter()
                .map(|t| RankProcess {
                    pid: 1000 + t.rank as i32,
                    rank: t.rank,
                    world_size: job.traces.len() as u32,
                    ..RankProcess::default()
                })
                .collect(),
            progress,
            ..Live::default()
        });
        job
    }

    #[test]
    fn every_rank_in_flight_is_a_hang_only_when_the_recorders_did_not_move() {
        // Read once (a dump file, a single sample): in flight, not hung.
        let o = super::judge(&live("all_stuck-json", None));
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(o.ranks.is_empty());
        assert!(
            o.summary.contains("nothing shows that the job stopped"),
            "{}",
            o.summary
        );
        assert!(o.tables.is_empty(), "no empty table");
        // Read twice, 2 s apart, and nothing moved: stopped.
        let o = super::judge(&live("all_stuck-json", Some(0)));
        assert_eq!(o.status, Status::Fail, "{}", o.summary);
        assert!(
            o.summary.contains("no rank's recorder moved in 2 s"),
            "{}",
            o.summary
        );
        assert!(o.tables.is_empty(), "no empty table");
    }

    #[test]
    fn live_recorders_read_once_blame_nobody_the_stacks_do_not() {
        // A running job's recorders read at one look only find rank 2 a
        // collective behind; nothing shows it stopped, and no stack was
        // read: nobody is blamed.
        let o = super::judge(&live("skip-json", None));
        assert!(o.ranks.is_empty(), "{}", o.summary);
        assert_ne!(o.status, Status::Fail, "{}", o.summary);
        // Read at both looks and nothing moved: rank 2 is named.
        let o = super::judge(&live("skip-json", Some(0)));
        assert_eq!((o.status, o.ranks.clone()), (Status::Fail, vec![2]));
    }

    /// A fixture case read from its dump files, not live.
    fn dumps(case: &str) -> Job {
        let mut job = live(case, None);
        job.live = None;
        job
    }

    #[test]
    fn the_picture_marks_the_named_ranks_and_the_ranks_waiting() {
        let o = super::judge(&dumps("missing_rank"));
        let map: WavefrontMap = o.fact().expect("the wavefront is published");
        let named: Vec<u32> = map
            .groups
            .iter()
            .flat_map(|g| g.runs.iter().filter(|r| r.state.is_named()))
            .flat_map(|r| r.first..=r.last)
            .collect();
        assert_eq!(named, o.ranks, "{map:?}");
        let g = &map.groups[0];
        assert!(g.seq.is_some(), "{g:?}");
        assert!(g.runs.iter().any(|r| r.state == RankState::Waiting));
        let covered: u32 = g.runs.iter().map(|r| r.len()).sum();
        assert_eq!(covered, map.world_size, "{map:?}");
    }

    #[test]
    fn every_group_of_two_groups_has_its_own_row_and_culprit() {
        let o = super::judge(&dumps("two_groups"));
        let map: WavefrontMap = o.fact().expect("the wavefront is published");
        let with_culprit = map
            .groups
            .iter()
            .filter(|g| g.runs.iter().any(|r| r.state.is_named()))
            .count();
        assert_eq!(with_culprit, 2, "{map:?}");
    }

    #[test]
    fn a_finished_job_is_drawn_as_groups_that_agree() {
        let o = super::judge(&dumps("finished-json"));
        let map: WavefrontMap = o.fact().expect("the wavefront is published");
        assert!(map
            .groups
            .iter()
            .flat_map(|g| &g.runs)
            .all(|r| r.state == RankState::Agrees));
    }

    #[test]
    fn from_dumps_in_flight_is_a_warning_and_a_finished_job_passes() {
        let mut job = live("all_stuck", None);
        job.live = None;
        let o = super::judge(&job);
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(
            o.summary.starts_with("every rank (0-2) is inside"),
            "{}",
            o.summary
        );
        let mut job = live("finished-json", None);
        job.live = None;
        assert_eq!(super::judge(&job).status, Status::Pass);
    }
}

//! job.hang on a job watched live: a job whose recorders moved between the
//! two looks is not hung; one that did not is judged by its recorders'
//! wavefront (as from dumps), else by where its ranks' stacks stayed.

use super::live::{Live, WINDOW};
use super::ranks_phrase;
use crate::domain::job::{rank_list, Wavefront};
use crate::domain::stacks::{self, Activity, Where};
use crate::{DataTable, Outcome};

/// A pass when collectives were recorded between the two looks.
pub fn moving(live: &Live) -> Option<Outcome> {
    let n = live.progress.filter(|n| *n > 0)?;
    Some(
        Outcome::pass(format!(
            "the job is moving: its ranks recorded {n} collective steps in {:.0} s",
            WINDOW.as_secs_f64()
        ))
        .with_fact("recorded_in_window", n),
    )
}

/// The wavefront waits for ranks of other nodes only: this node's ranks
/// are not at fault, and those ranks were not looked at.
pub fn elsewhere(w: &Wavefront, live: &Live) -> Outcome {
    let others = ranks_phrase(&w.blamed_ranks());
    let here: Vec<u32> = w
        .waiting
        .iter()
        .copied()
        .filter(|r| live.rank(*r).is_some())
        .collect();
    let waiting = match here.as_slice() {
        [] => "this node's ranks wait".to_string(),
        [_] => format!("this node's {} waits", ranks_phrase(&here)),
        _ => format!("this node's {} wait", ranks_phrase(&here)),
    };
    let run = if w.blamed.len() == 1 {
        "runs on another node"
    } else {
        "run on other nodes"
    };
    Outcome::fail(
        format!(
            "{waiting} in {} #{} of {} for {others}, which {run}: no rank here is at fault",
            w.op,
            w.seq,
            w.group.label()
        ),
        format!(
            "run `gpucheck job` on the nodes of {others}, or gather every rank's dumps into one \
             folder and run `gpucheck job --traces DIR`"
        ),
    )
    .with_fact("waiting", rank_list(&w.waiting))
}

/// "rank 2 is asleep in time.sleep at train.py:7 (`time.sleep(600)`)".
pub fn where_is(live: &Live, rank: u32) -> Option<String> {
    let w = live.last_where(rank)?;
    let on: Vec<&str> = live
        .rank(rank)
        .map(|r| {
            [r.node.as_deref(), r.gpu.as_deref()]
                .into_iter()
                .flatten()
                .collect()
        })
        .unwrap_or_default();
    let who = match on.as_slice() {
        [] => format!("rank {rank}"),
        list => format!("rank {rank} (on {})", list.join(", ")),
    };
    Some(match &w.frame {
        Some(f) => format!("{who} is {} at {}", w.activity.words(), f.shown()),
        None => format!("{who} is {}", w.activity.words()),
    })
}

/// The verdict from the ranks' stacks alone (no recorder disagreement).
pub fn from_stacks(live: &Live) -> Outcome {
    let Some(v) = stacks::judge(&live.samples) else {
        return all_alike(live);
    };
    let blamed: Vec<u32> = v.blamed.iter().map(|(r, _)| *r).collect();
    let named = ranks_phrase(&blamed);
    let waiting = ranks_phrase(&v.waiting);
    let places: Vec<String> = blamed.iter().filter_map(|r| where_is(live, *r)).collect();
    let wait_op = live
        .last_where(v.waiting[0])
        .map(|w| w.activity.words())
        .unwrap_or_default();
    let secs = WINDOW.as_secs_f64();
    let (summary, hint) = if v.ahead {
        (
            format!(
                "{named} stayed in a collective for {secs:.0} s that {waiting} never entered: {}",
                places.join("; ")
            ),
            format!(
                "a collective only {named} calls (an `if rank == ...` branch): every rank must \
                 call the same collectives in the same order"
            ),
        )
    } else {
        (
            format!(
                "{waiting} wait ({wait_op}) for {named}, which stayed outside collectives for \
                 {secs:.0} s: {}",
                places.join("; ")
            ),
            cause_hint(
                &v.blamed
                    .iter()
                    .map(|(_, w)| &w.activity)
                    .collect::<Vec<_>>(),
            ),
        )
    };
    Outcome::fail(summary, hint)
        .with_ranks(blamed, None)
        .with_fact("waiting", rank_list(&v.waiting))
}

/// What to do about ranks stuck at one kind of place.
fn cause_hint(activities: &[&Activity]) -> String {
    if activities.iter().all(|a| **a == Activity::DataLoading) {
        return "the data loader: a dataset that blocks (a file system, a network fetch) or \
                a worker that died; look at its stack and the data source"
            .to_string();
    }
    if activities.iter().all(|a| **a == Activity::Sleep) {
        return "a sleep on the code path of these ranks only (a retry loop, a wait for a \
                file): the waiting ranks are healthy"
            .to_string();
    }
    "these ranks took another code path (an `if rank == ...` branch, an exception caught \
     and retried): the frame shown is where; the waiting ranks are healthy"
        .to_string()
}

/// No rank stands out by its stack.
fn all_alike(live: &Live) -> Outcome {
    let all: Vec<&Activity> = live
        .samples
        .iter()
        .flatten()
        .map(|(_, w)| &w.activity)
        .collect();
    let same_place = live.samples.len() > 1
        && live.samples.windows(2).all(|w| w[0] == w[1])
        && !all.is_empty()
        && all.iter().all(|a| a.waits_on_peers());
    if same_place && live.progress.is_none() {
        return Outcome::warn(
            format!(
                "every rank was {} at every look across {:.0} s: the job may be stuck below \
                 Python (the network, a GPU, NCCL), or spend its time there",
                all[0].words(),
                WINDOW.as_secs_f64()
            ),
            "no rank's recorder could be read, so nothing shows whether \
             collectives finish: run `gpucheck` on the node (fabric, gpu, nccl checks) and \
             look for Xid errors in dmesg; give each rank a worker server (worker_main() \
             with its own TORCH_WORKER_SERVER_SOCKET) to see its recorder",
        );
    }
    Outcome::pass("no rank stands out: the ranks' stacks moved or agree")
}

/// Where every rank was at the last look.
pub fn where_table(live: &Live) -> DataTable {
    let rows = live
        .ranks
        .iter()
        .map(|r| {
            let w = live.last_where(r.rank);
            vec![
                r.rank.to_string(),
                r.pid.to_string(),
                w.map_or_else(|| "unknown".to_string(), |w| w.activity.words()),
                w.and_then(|w| w.frame.as_ref())
                    .map_or_else(String::new, |f| f.shown()),
            ]
        })
        .collect();
    DataTable {
        title: "Where each rank is".to_string(),
        header: ["rank", "pid", "doing", "frame"].map(String::from).to_vec(),
        rows,
        legend: None,
    }
}

/// Where a late rank was caught outside a collective more often than the
/// other ranks were caught at that same place (the step's common code is
/// not its cause), and what to do about it: ("rank 1 was caught loading
/// data ... at data.py:12 in __getitem__", hint).
pub fn busy_at(live: &Live, rank: u32) -> Option<(String, String)> {
    let others = live.ranks.len().saturating_sub(1).max(1) as f64;
    let place = |w: &Where| {
        (
            w.activity.clone(),
            w.frame.as_ref().map(|f| (f.file.clone(), f.line)),
        )
    };
    let mut best: Option<(f64, &Where)> = None;
    for (_, w) in live
        .samples
        .iter()
        .flatten()
        .filter(|(r, w)| *r == rank && !w.activity.waits_on_peers())
    {
        let count = |mine: bool| {
            live.samples
                .iter()
                .flatten()
                .filter(|(r, o)| (*r == rank) == mine && place(o) == place(w))
                .count() as f64
        };
        let lead = count(true) - count(false) / others;
        if lead > 0.0 && best.is_none_or(|(b, _)| lead > b) {
            best = Some((lead, w));
        }
    }
    let w = best?.1;
    let at = w
        .frame
        .as_ref()
        .map(|f| format!(" at {}", f.shown()))
        .unwrap_or_default();
    let seen = format!("rank {rank} was caught {}{at}", w.activity.words());
    let hint = match w.activity {
        Activity::DataLoading => format!(
            "rank {rank} waits for its batches: raise its DataLoader's num_workers, set \
             pin_memory=True and persistent_workers=True, and look at what its dataset does per \
             item (the frame shown)"
        ),
        _ => format!(
            "every rank waits for rank {rank} at every step, and its stack shows where: the \
             frame shown (a rank-specific branch such as logging or evaluation, a sleep, \
             work done on one rank only)"
        ),
    };
    Some((seen, hint))
}

#[cfg(test)]
mod tests {
    use super::super::live::Live;
    use super::super::Job;
    use crate::domain::job;
    use crate::probe::ranks::RankProcess;
    use crate::Status;

    /// The `skip` fixture (rank 2 never joined all_reduce #6) as node A of a
    /// two-node job sees it: its own ranks' recorders, and `here` running.
    fn watched(here: &[u32]) -> Job {
        watched_case("skip-json", here)
    }

    fn watched_case(case: &str, here: &[u32]) -> Job {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/flight_recorder")
            .join(case);
        let mut job = Job::read(&dir).expect("the fixture reads");
        job.traces.retain(|t| here.contains(&t.rank));
        let ranks: Vec<u32> = job.traces.iter().map(|t| t.rank).collect();
        job.members = job::membership(&job.traces, &ranks);
        job.live = Some(Live {
            ranks: here
                .iter()
                .map(|r| RankProcess {
                    pid: 1000 + *r as i32,
                    rank: *r,
                    world_size: 3,
                    ..RankProcess::default()
                })
                .collect(),
            progress: Some(0),
            ..Live::default()
        });
        job
    }

    #[test]
    fn a_rank_of_another_node_is_not_blamed_from_here() {
        let o = super::super::hang::judge(&watched(&[0, 1]));
        assert_eq!(o.status, Status::Fail);
        assert!(o.ranks.is_empty(), "nobody here is blamed: {:?}", o.ranks);
        assert!(
            o.summary
                .contains("this node's ranks 0, 1 wait in all_reduce #6")
                && o.summary.contains("for rank 2, which runs on another node"),
            "{}",
            o.summary
        );
        assert!(o
            .hint
            .as_deref()
            .unwrap_or("")
            .contains("gpucheck job` on the nodes of rank 2"));
    }

    #[test]
    fn every_rank_here_stuck_alike_is_not_a_code_path_not_another_node() {
        let o = super::super::hang::judge(&watched_case("all_stuck-json", &[0, 1, 2]));
        assert_eq!(o.status, Status::Fail);
        assert!(o.ranks.is_empty());
        assert!(o.summary.contains("not a code path"), "{}", o.summary);
        assert!(!o.summary.contains("other nodes"), "{}", o.summary);
    }

    #[test]
    fn a_rank_of_this_node_is_blamed_as_from_dumps() {
        let o = super::super::hang::judge(&watched(&[0, 1, 2]));
        assert_eq!(o.ranks, vec![2]);
        assert!(
            o.summary.contains("rank 2 never joined all_reduce #6"),
            "{}",
            o.summary
        );
    }
}

//! What the job checks found, rank by rank, for the reports that draw it
//! (the HTML report's wavefront and lateness pictures): plain data in the
//! JSON report's `data`, so a reporter never parses a summary back.

use serde::{Deserialize, Serialize};

use crate::Fact;

/// Where each rank of each process group stands at the group's wavefront
/// (job.hang): ranks in the same state drawn as runs, so a 1,024-rank job
/// with one rank behind is three runs, not 1,024 rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WavefrontMap {
    /// The highest global rank of the job plus one: the width of the
    /// picture.
    pub world_size: u32,
    /// Every process group, in the dumps' order of names.
    pub groups: Vec<GroupWave>,
}

impl Fact for WavefrontMap {
    const KEY: &'static str = "job_wavefront";
}

/// One process group's ranks at its wavefront.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupWave {
    /// "group 0 (default_pg)".
    pub group: String,
    /// The collective sequence number of the wavefront; None where the
    /// group's ranks agree up to their last collective.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The majority's (or waiting ranks') call there: "all_reduce [4] float".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub call: String,
    /// The group's members, by rank, as runs of consecutive ranks in the
    /// same state.
    pub runs: Vec<RankRun>,
}

/// Consecutive global ranks (`first..=last`) in the same state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankRun {
    pub first: u32,
    pub last: u32,
    pub state: RankState,
    /// For named ranks: what they did ("left no dump", "last enqueued
    /// all_reduce #5 (completed)").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub doing: String,
}

impl RankRun {
    /// How many ranks the run covers.
    pub fn len(&self) -> u32 {
        self.last - self.first + 1
    }

    /// Never true: a run holds at least one rank.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A rank's state at its group's wavefront.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankState {
    /// Inside the collective of the wavefront, waiting for the others.
    Waiting,
    /// Named: never joined the collective the others wait in.
    Behind,
    /// Named: called a collective the rest never called.
    Ahead,
    /// Named: entered it with another op, shape or dtype.
    Mismatch,
    /// Every rank is inside it alike and it did not finish.
    Stuck,
    /// No wavefront in this group: its ranks agree.
    Agrees,
    /// A member with no part in the wavefront (no record of it).
    Elsewhere,
}

impl RankState {
    /// As the reports say it.
    pub fn words(self) -> &'static str {
        match self {
            RankState::Waiting => "waiting",
            RankState::Behind => "never joined",
            RankState::Ahead => "ahead",
            RankState::Mismatch => "mismatch",
            RankState::Stuck => "inside, not finishing",
            RankState::Agrees => "agrees",
            RankState::Elsewhere => "no record",
        }
    }

    /// True for the states of the ranks a check names.
    pub fn is_named(self) -> bool {
        matches!(
            self,
            RankState::Behind | RankState::Ahead | RankState::Mismatch
        )
    }
}

/// `ranks` (rank, state, what it did), sorted by rank, as runs: a run ends
/// where the state or the words change or a rank is skipped (a group of
/// the even ranks is one run per rank).
pub fn runs(ranks: &[(u32, RankState, String)]) -> Vec<RankRun> {
    let mut out: Vec<RankRun> = Vec::new();
    for (rank, state, doing) in ranks {
        match out.last_mut() {
            Some(r)
                if r.last.checked_add(1) == Some(*rank)
                    && r.state == *state
                    && r.doing == *doing =>
            {
                r.last = *rank;
            }
            _ => out.push(RankRun {
                first: *rank,
                last: *rank,
                state: *state,
                doing: doing.clone(),
            }),
        }
    }
    out
}

/// Every rank's lateness into collectives (job.straggler), straggler or
/// not, where it was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lateness {
    /// The least median lateness that makes a straggler, ms.
    pub straggler_ms: f64,
    pub ranks: Vec<RankLateness>,
}

impl Fact for Lateness {
    const KEY: &'static str = "job_lateness";
}

/// One rank's lateness against the median of the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankLateness {
    pub rank: u32,
    /// Median over the compared collectives, ms (negative: early).
    pub median_ms: f64,
    pub worst_ms: f64,
    /// How many collectives were compared.
    pub compared: usize,
}

#[cfg(test)]
mod tests {
    use super::RankState::{Agrees, Behind, Waiting};
    use super::*;

    fn states(list: &[(u32, RankState)]) -> Vec<(u32, RankState, String)> {
        list.iter().map(|(r, s)| (*r, *s, String::new())).collect()
    }

    fn spans(runs: &[RankRun]) -> Vec<(u32, u32, RankState)> {
        runs.iter().map(|r| (r.first, r.last, r.state)).collect()
    }

    #[test]
    fn no_ranks_are_no_runs() {
        assert!(runs(&[]).is_empty());
    }

    #[test]
    fn one_rank_is_one_run_of_one() {
        let r = runs(&states(&[(7, Waiting)]));
        assert_eq!(spans(&r), [(7, 7, Waiting)]);
        assert_eq!(r[0].len(), 1);
    }

    #[test]
    fn a_thousand_ranks_with_one_behind_are_three_runs() {
        let list: Vec<(u32, RankState)> = (0..1024)
            .map(|r| (r, if r == 137 { Behind } else { Waiting }))
            .collect();
        let r = runs(&states(&list));
        assert_eq!(
            spans(&r),
            [(0, 136, Waiting), (137, 137, Behind), (138, 1023, Waiting)]
        );
        assert_eq!(r.iter().map(RankRun::len).sum::<u32>(), 1024);
    }

    #[test]
    fn the_first_and_last_ranks_behind_are_runs_at_the_ends() {
        let list = [(0, Behind), (1, Waiting), (2, Waiting), (3, Behind)];
        assert_eq!(
            spans(&runs(&states(&list))),
            [(0, 0, Behind), (1, 2, Waiting), (3, 3, Behind)]
        );
    }

    #[test]
    fn a_skipped_rank_ends_a_run() {
        let list = [(0, Agrees), (2, Agrees), (4, Agrees), (5, Agrees)];
        assert_eq!(
            spans(&runs(&states(&list))),
            [(0, 0, Agrees), (2, 2, Agrees), (4, 5, Agrees)]
        );
    }

    #[test]
    fn other_words_end_a_run_in_the_same_state() {
        let list = vec![
            (3, Behind, "left no dump".to_string()),
            (4, Behind, "left no dump".to_string()),
            (5, Behind, "holds no entries".to_string()),
        ];
        let r = runs(&list);
        assert_eq!(spans(&r), [(3, 4, Behind), (5, 5, Behind)]);
        assert_eq!(r[1].doing, "holds no entries");
    }

    #[test]
    fn alternating_states_are_one_run_each() {
        let list: Vec<(u32, RankState)> = (0..8)
            .map(|r| (r, if r % 2 == 0 { Waiting } else { Behind }))
            .collect();
        assert_eq!(runs(&states(&list)).len(), 8);
    }

    #[test]
    fn the_highest_rank_does_not_overflow() {
        let list = [(u32::MAX - 1, Waiting), (u32::MAX, Waiting)];
        assert_eq!(
            spans(&runs(&states(&list))),
            [(u32::MAX - 1, u32::MAX, Waiting)]
        );
    }

    #[test]
    fn only_the_culprits_states_are_named() {
        assert!(Behind.is_named() && RankState::Mismatch.is_named());
        assert!(!Waiting.is_named() && !Agrees.is_named() && !RankState::Stuck.is_named());
    }

    #[test]
    fn the_facts_round_trip_through_json() {
        let map = WavefrontMap {
            world_size: 4,
            groups: vec![GroupWave {
                group: "group 0 (default_pg)".into(),
                seq: Some(6),
                call: "all_reduce".into(),
                runs: runs(&states(&[(0, Waiting), (1, Behind)])),
            }],
        };
        let v = serde_json::to_value(&map).expect("serialises");
        assert_eq!(v["groups"][0]["runs"][1]["state"], "behind");
        let back: WavefrontMap = serde_json::from_value(v).expect("reads back");
        assert_eq!(back, map);
    }
}

//! Lateness into collectives from the ranks' recorders, while the job
//! runs (`gpucheck exec --watch`, `gpucheck job --watch`): where the watch
//! reads a rank's Flight Recorder (worker server, dump pipe), each sample
//! carries the entry times of the rank's last few collectives; once every
//! rank that reports entries of a group has entered one collective, each
//! rank's lateness is its entry time minus the earliest. A rank whose
//! median lateness over its last [`LATE_WINDOW`] collectives (at least
//! [`STRAGGLER_MIN_COMPARED`]) reaches [`STRAGGLER_MIN_MS`] is a straggler,
//! by the same rule as `job.straggler` on dumps.
//!
//! Pure: entry times in, stragglers out. Across nodes, node 0 puts every
//! node's entry times on its own clock first (`domain::watch_summary`).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

pub use crate::domain::job::{STRAGGLER_MIN_COMPARED, STRAGGLER_MIN_MS};

/// Collectives a rank's lateness is judged over (a sliding window).
pub const LATE_WINDOW: usize = 50;
/// Entries a sample carries of a rank's recorder (its latest): enough to
/// overlap between ranks read a few milliseconds apart at any step rate.
pub const ENTERED_KEPT: usize = 16;
/// Collectives waited on at most per group: one that some rank never
/// entered (a hang, a rank whose recorder is not read) is dropped.
const PENDING_MAX: usize = 256;

/// A rank entered a collective.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entered {
    pub group: String,
    pub seq: u64,
    /// When, in milliseconds since the Unix epoch (the recorder's
    /// `time_created_ns`).
    pub at_ms: f64,
}

/// A rank late into collectives, from its recorder.
#[derive(Debug, Clone, PartialEq)]
pub struct Late {
    pub rank: u32,
    pub median_ms: f64,
    pub compared: usize,
}

/// The lateness seen so far.
#[derive(Debug, Clone, Default)]
pub struct Lateness {
    /// (group, seq) -> rank -> entry time, until every reporting rank entered.
    pending: BTreeMap<(String, u64), BTreeMap<u32, f64>>,
    /// The highest seq judged per group: older entries are not taken again.
    judged: BTreeMap<String, u64>,
    late: BTreeMap<u32, VecDeque<f64>>,
}

impl Lateness {
    /// Take one sample's entries: `(rank, its latest entries)`.
    pub fn take(&mut self, samples: &[(u32, &[Entered])]) {
        let mut reporting: BTreeMap<&str, usize> = BTreeMap::new();
        for (rank, entered) in samples {
            let mut groups: Vec<&str> = entered.iter().map(|e| e.group.as_str()).collect();
            groups.sort_unstable();
            groups.dedup();
            groups
                .iter()
                .for_each(|g| *reporting.entry(g).or_default() += 1);
            for e in entered.iter() {
                if self.judged.get(&e.group).is_some_and(|&j| e.seq <= j) {
                    continue;
                }
                let key = (e.group.clone(), e.seq);
                self.pending.entry(key).or_default().insert(*rank, e.at_ms);
            }
        }
        let complete: Vec<(String, u64)> = self
            .pending
            .iter()
            .filter(|((g, _), ranks)| {
                let want = reporting.get(g.as_str()).copied().unwrap_or(0);
                want >= 2 && ranks.len() >= want
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in complete {
            if let Some(ranks) = self.pending.remove(&key) {
                self.judge_one(&ranks);
                let j = self.judged.entry(key.0).or_default();
                *j = (*j).max(key.1);
            }
        }
        self.forget_old();
    }

    fn judge_one(&mut self, ranks: &BTreeMap<u32, f64>) {
        let first = ranks.values().copied().fold(f64::INFINITY, f64::min);
        for (&rank, &at) in ranks {
            let w = self.late.entry(rank).or_default();
            w.push_back(at - first);
            if w.len() > LATE_WINDOW {
                w.pop_front();
            }
        }
    }

    /// Drop what was judged already and what waits too long.
    fn forget_old(&mut self) {
        let judged = &self.judged;
        self.pending
            .retain(|(g, s), _| judged.get(g).is_none_or(|&j| *s > j));
        while self.pending.len() > PENDING_MAX {
            self.pending.pop_first();
        }
    }

    /// The ranks late now, latest first.
    pub fn stragglers(&self) -> Vec<Late> {
        let mut out: Vec<Late> = self
            .late
            .iter()
            .filter(|(_, w)| w.len() >= STRAGGLER_MIN_COMPARED)
            .map(|(&rank, w)| Late {
                rank,
                median_ms: median(w),
                compared: w.len(),
            })
            .filter(|l| l.median_ms >= STRAGGLER_MIN_MS)
            .collect();
        out.sort_by(|a, b| b.median_ms.total_cmp(&a.median_ms));
        out
    }

    /// Whether any rank's lateness was measured.
    pub fn measured(&self) -> bool {
        !self.late.is_empty()
    }

    /// A rank ended: its lateness goes with it.
    pub fn forget(&mut self, rank: u32) {
        self.late.remove(&rank);
        for ranks in self.pending.values_mut() {
            ranks.remove(&rank);
        }
    }
}

fn median(w: &VecDeque<f64>) -> f64 {
    let mut v: Vec<f64> = w.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rank's last `kept` entries of group "0" at step `upto`, a step
    /// every 100 ms, `late` ms late on the ranks given.
    fn entries(rank: u32, upto: u64, kept: u64, late: &[(u32, f64)]) -> Vec<Entered> {
        let extra = late.iter().find(|(r, _)| *r == rank).map_or(0.0, |l| l.1);
        (upto.saturating_sub(kept - 1)..=upto)
            .map(|seq| Entered {
                group: "0".into(),
                seq,
                at_ms: 1_000_000.0 + seq as f64 * 100.0 + extra + f64::from(rank) * 0.1,
            })
            .collect()
    }

    fn run(ranks: u32, periods: u64, late: &[(u32, f64)]) -> Lateness {
        let mut l = Lateness::default();
        for p in 1..=periods {
            let all: Vec<(u32, Vec<Entered>)> = (0..ranks)
                .map(|r| (r, entries(r, p * 10, 16, late)))
                .collect();
            let view: Vec<(u32, &[Entered])> =
                all.iter().map(|(r, e)| (*r, e.as_slice())).collect();
            l.take(&view);
        }
        l
    }

    #[test]
    fn a_rank_150_ms_late_into_every_collective_is_named() {
        let l = run(3, 10, &[(1, 150.0)]);
        let s = l.stragglers();
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].rank, 1);
        assert!((s[0].median_ms - 149.9).abs() < 0.5, "{s:?}");
        assert_eq!(s[0].compared, LATE_WINDOW);
    }

    #[test]
    fn ranks_within_a_few_ms_are_no_stragglers_but_are_measured() {
        let l = run(4, 10, &[(2, 5.0)]);
        assert!(l.stragglers().is_empty());
        assert!(l.measured());
    }

    #[test]
    fn too_few_shared_collectives_name_no_one() {
        let mut l = Lateness::default();
        let a = entries(0, 3, 3, &[]);
        let b = entries(1, 3, 3, &[(1, 500.0)]);
        l.take(&[(0, &a), (1, &b)]);
        assert!(l.stragglers().is_empty());
    }

    #[test]
    fn a_collective_is_judged_once_even_when_read_again() {
        let mut l = Lateness::default();
        let a = entries(0, 20, 16, &[]);
        let b = entries(1, 20, 16, &[(1, 300.0)]);
        for _ in 0..5 {
            l.take(&[(0, &a), (1, &b)]);
        }
        assert_eq!(l.stragglers()[0].compared, 16);
    }

    #[test]
    fn a_collective_one_rank_never_entered_waits_and_is_bounded() {
        let mut l = Lateness::default();
        for p in 1..100u64 {
            let a = entries(0, p * 10, 16, &[]);
            let b = entries(1, 5, 5, &[]);
            l.take(&[(0, &a), (1, &b)]);
        }
        assert!(l.pending.len() <= PENDING_MAX);
        assert!(l.stragglers().is_empty());
    }

    #[test]
    fn a_single_reporting_rank_is_compared_with_no_one() {
        let mut l = Lateness::default();
        let a = entries(0, 40, 16, &[(0, 999.0)]);
        l.take(&[(0, &a)]);
        assert!(!l.measured());
    }

    #[test]
    fn a_rank_that_ended_is_forgotten() {
        let mut l = run(3, 10, &[(1, 150.0)]);
        l.forget(1);
        assert!(l.stragglers().is_empty());
    }
}

//! A job watched across nodes (`gpucheck job --watch --nnodes N ...`):
//! what each node sends node rank 0 every period, and node 0's merge of
//! them into one view of the whole job for `domain::watch`.
//!
//! A node's summary is its ranks' latest samples (state, CPU time, context
//! switches, the recorder's running number, and where the rank stood when
//! its stack was read: one frame) and the ends of its ranks seen so far. It
//! stays a few hundred bytes a rank, whatever the recorders hold: node 0
//! keeps one summary per node, so 1,000 nodes of 8 ranks take a few MiB.
//!
//! A summary comes from another machine: node 0 takes it only when it is
//! newer than the last from that node, names no more than
//! [`MAX_NODE_RANKS`] ranks, no rank another node already named, and its
//! texts are cut to [`MAX_TEXT`] characters.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::domain::action::Action;
use crate::domain::stacks::Where;
use crate::domain::watch::{Ended, Exit, Sample};
use crate::domain::watch_late::ENTERED_KEPT;

/// The most ranks one node's summary may name (the rendezvous's own bound
/// on a node's ranks).
pub const MAX_NODE_RANKS: usize = 1024;
/// The longest text kept from a summary (host names, a frame's function,
/// file and source line).
pub const MAX_TEXT: usize = 400;
/// The most uncertain clock offset against node 0 under which a node's
/// entry times are compared with other nodes' (half of the least lateness
/// called late, `watch_late::STRAGGLER_MIN_MS`).
pub const MAX_CLOCK_UNCERTAINTY_S: f64 = 0.010;
/// The most rank ends one summary carries (a node's ranks restarted a few
/// times by an elastic agent).
pub const MAX_ENDS: usize = 4 * MAX_NODE_RANKS;

/// What one node sends node 0 each period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    pub node: u32,
    pub host: String,
    /// The node's sample round: one more each period.
    pub round: u64,
    pub samples: Vec<Sample>,
    /// Every end of this node's ranks seen since its watch started.
    #[serde(default)]
    pub ended: Vec<RankEnd>,
    /// Its own ranks' diagnosis (`gpucheck job` on that node), last asked
    /// for by node 0.
    #[serde(default)]
    pub diagnosis: Option<NodeDiagnosis>,
}

/// A node's diagnosis of its own ranks, asked for by node 0's order `order`
/// when the whole job looked hung and a rank of that node was not in the
/// collective: `job.hang`'s verdict there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeDiagnosis {
    pub order: u64,
    /// `job.hang` failed: a hang, confirmed where the culprit runs.
    pub hang: bool,
    pub summary: String,
    pub ranks: Vec<u32>,
    #[serde(default)]
    pub action: Option<Action>,
}

/// A rank of the node that ended, as its node saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankEnd {
    pub rank: u32,
    pub pid: i32,
    pub exit: Exit,
    #[serde(default)]
    pub oom: bool,
    /// When, in seconds since the Unix epoch on that node's clock.
    pub at_unix: f64,
}

impl NodeSummary {
    /// A summary fit to send: every text cut to [`MAX_TEXT`].
    pub fn clean(mut self) -> NodeSummary {
        cut(&mut self.host);
        if let Some(d) = &mut self.diagnosis {
            cut(&mut d.summary);
            d.ranks.truncate(MAX_NODE_RANKS);
        }
        for s in &mut self.samples {
            if let Some(w) = &mut s.at {
                clean_where(w);
            }
            let keep = s.entered.len().saturating_sub(ENTERED_KEPT);
            s.entered.drain(..keep);
            s.entered.iter_mut().for_each(|e| cut(&mut e.group));
        }
        self
    }
}

fn cut(text: &mut String) {
    if text.chars().count() > MAX_TEXT {
        *text = text.chars().take(MAX_TEXT).collect();
    }
}

fn clean_where(w: &mut Where) {
    if let crate::domain::stacks::Activity::Collective(op) = &mut w.activity {
        cut(op);
    }
    if let Some(f) = &mut w.frame {
        cut(&mut f.function);
        cut(&mut f.file);
        f.code.iter_mut().for_each(cut);
        f.not_read.iter_mut().for_each(cut);
    }
}

/// One node as node 0 last heard from it.
#[derive(Debug, Clone)]
struct Heard {
    summary: NodeSummary,
    /// When node 0 took it, on node 0's watch clock.
    at_s: f64,
}

/// Node 0's view of every node's latest summary.
#[derive(Debug, Clone, Default)]
pub struct Merge {
    nodes: BTreeMap<u32, Heard>,
    /// Rank -> the node that named it first.
    owner: BTreeMap<u32, u32>,
    /// Ends already handed on: (node, rank, pid).
    passed: BTreeSet<(u32, u32, i32)>,
    /// Each other node's clock against node 0's (offset, uncertainty), as
    /// the rendezvous measured it.
    clocks: BTreeMap<u32, (f64, f64)>,
}

impl Merge {
    /// Take a node's summary, or say why it is not taken.
    pub fn take(&mut self, at_s: f64, summary: NodeSummary) -> Result<(), String> {
        let node = summary.node;
        if summary.samples.len() > MAX_NODE_RANKS || summary.ended.len() > MAX_ENDS {
            return Err(format!(
                "node {node}'s summary names more than {MAX_NODE_RANKS} ranks"
            ));
        }
        if let Some(h) = self.nodes.get(&node) {
            if summary.round <= h.summary.round {
                return Err(format!(
                    "node {node}'s summary of round {} is not newer than round {}",
                    summary.round, h.summary.round
                ));
            }
        }
        if let Some((rank, other)) = summary
            .samples
            .iter()
            .find_map(|s| Some((s.rank, *self.owner.get(&s.rank).filter(|&&o| o != node)?)))
        {
            return Err(format!(
                "node {node} names rank {rank}, which node {other} runs"
            ));
        }
        for s in &summary.samples {
            self.owner.insert(s.rank, node);
        }
        let summary = summary.clean();
        self.nodes.insert(node, Heard { summary, at_s });
        Ok(())
    }

    /// A node's clock: node 0's clock minus the node's, and how sure.
    pub fn set_clock(&mut self, node: u32, offset_s: f64, uncertainty_s: f64) {
        self.clocks.insert(node, (offset_s, uncertainty_s));
    }

    /// Every node's latest samples, by rank: the whole job's sample for
    /// `Watcher::observe`. Entry times go onto node 0's clock; those of a
    /// node whose clock is not known closely enough are left out.
    pub fn samples(&self) -> Vec<Sample> {
        let mut all: Vec<Sample> = Vec::new();
        for (&node, h) in &self.nodes {
            let shift_ms = match self.clocks.get(&node) {
                _ if node == 0 => Some(0.0),
                Some(&(offset, sure)) if sure <= MAX_CLOCK_UNCERTAINTY_S => Some(offset * 1000.0),
                _ => None,
            };
            all.extend(h.summary.samples.iter().cloned().map(|mut s| {
                match shift_ms {
                    Some(ms) => s.entered.iter_mut().for_each(|e| e.at_ms += ms),
                    None => s.entered.clear(),
                }
                s
            }));
        }
        all.sort_by_key(|s| s.rank);
        all
    }

    /// The ends not handed on before, oldest first, each with its time on
    /// node 0's watch clock (`unix_to_s` turns a node's Unix time into it).
    pub fn new_ends(&mut self, unix_to_s: impl Fn(f64) -> f64) -> Vec<(u32, Ended)> {
        let mut out = Vec::new();
        for (&node, h) in &self.nodes {
            for e in &h.summary.ended {
                if self.passed.insert((node, e.rank, e.pid)) {
                    let ended = Ended {
                        rank: e.rank,
                        pid: e.pid,
                        exit: e.exit,
                        oom: e.oom,
                        at_s: unix_to_s(e.at_unix),
                    };
                    out.push((node, ended));
                }
            }
        }
        out.sort_by(|a, b| a.1.at_s.total_cmp(&b.1.at_s));
        out
    }

    /// The nodes not heard from for `after_s` or more: (node, host, seconds).
    pub fn silent(&self, now_s: f64, after_s: f64) -> Vec<(u32, String, f64)> {
        self.nodes
            .iter()
            .filter(|(_, h)| now_s - h.at_s >= after_s)
            .map(|(&n, h)| (n, h.summary.host.clone(), now_s - h.at_s))
            .collect()
    }

    /// Every rank of the nodes heard from, in order.
    pub fn ranks(&self) -> Vec<u32> {
        self.owner.keys().copied().collect()
    }

    /// The node a rank runs on, with its host.
    pub fn node_of(&self, rank: u32) -> Option<(u32, &str)> {
        let node = *self.owner.get(&rank)?;
        Some((node, self.nodes.get(&node)?.summary.host.as_str()))
    }

    /// A node's host, as its summary says.
    pub fn host(&self, node: u32) -> Option<&str> {
        Some(self.nodes.get(&node)?.summary.host.as_str())
    }

    /// The latest diagnosis a node sent in answer to `order`.
    pub fn diagnosis(&self, node: u32, order: u64) -> Option<&NodeDiagnosis> {
        let d = self.nodes.get(&node)?.summary.diagnosis.as_ref()?;
        (d.order == order).then_some(d)
    }

    /// The nodes heard from.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// A node is gone (its watch ended): its ranks leave the whole view.
    pub fn remove(&mut self, node: u32) {
        self.nodes.remove(&node);
        self.owner.retain(|_, n| *n != node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::stacks::{Activity, Frame};

    fn sample(rank: u32, cpu_s: f64, at: Option<Activity>) -> Sample {
        Sample {
            rank,
            state: 'S',
            cpu_s,
            switches: Some(7),
            at: at.map(|activity| Where {
                activity,
                frame: Some(Frame {
                    function: "step".into(),
                    file: "train.py".into(),
                    line: 41,
                    code: Some("loss.backward()".into()),
                    not_read: None,
                }),
            }),
            recorder: None,
            entered: Vec::new(),
            gpu_pct: None,
        }
    }

    fn summary(node: u32, round: u64, ranks: std::ops::Range<u32>) -> NodeSummary {
        NodeSummary {
            node,
            host: format!("node{node}"),
            round,
            samples: ranks
                .map(|r| sample(r, 1.0, Some(Activity::Backward)))
                .collect(),
            ended: Vec::new(),
            diagnosis: None,
        }
    }

    #[test]
    fn every_nodes_ranks_make_one_sample_of_the_job_in_rank_order() {
        let mut m = Merge::default();
        m.take(1.0, summary(1, 1, 4..8)).unwrap();
        m.take(1.0, summary(0, 1, 0..4)).unwrap();
        let ranks: Vec<u32> = m.samples().iter().map(|s| s.rank).collect();
        assert_eq!(ranks, (0..8).collect::<Vec<_>>());
        assert_eq!(m.ranks(), ranks);
        assert_eq!(m.node_of(5), Some((1, "node1")));
        assert_eq!(m.nodes(), 2);
    }

    #[test]
    fn an_old_or_repeated_round_is_refused() {
        let mut m = Merge::default();
        m.take(1.0, summary(1, 5, 0..2)).unwrap();
        let e = m.take(2.0, summary(1, 5, 0..2)).unwrap_err();
        assert!(e.contains("not newer than round 5"), "{e}");
        assert!(m.take(2.0, summary(1, 4, 0..2)).is_err());
        assert!(m.take(2.0, summary(1, 6, 0..2)).is_ok());
    }

    #[test]
    fn a_rank_named_by_two_nodes_is_refused_from_the_second() {
        let mut m = Merge::default();
        m.take(1.0, summary(0, 1, 0..4)).unwrap();
        let e = m.take(1.0, summary(1, 1, 3..6)).unwrap_err();
        assert_eq!(e, "node 1 names rank 3, which node 0 runs");
        assert_eq!(m.samples().len(), 4);
    }

    #[test]
    fn a_summary_naming_too_many_ranks_is_refused() {
        let mut m = Merge::default();
        let e = m
            .take(1.0, summary(2, 1, 0..(MAX_NODE_RANKS as u32 + 1)))
            .unwrap_err();
        assert!(e.contains("more than 1024 ranks"), "{e}");
    }

    #[test]
    fn long_texts_are_cut() {
        let mut m = Merge::default();
        let mut s = summary(0, 1, 0..1);
        s.host = "h".repeat(10_000);
        s.samples[0]
            .at
            .as_mut()
            .unwrap()
            .frame
            .as_mut()
            .unwrap()
            .file = "f".repeat(5_000);
        m.take(1.0, s).unwrap();
        let got = m.samples();
        let frame = got[0].at.as_ref().unwrap().frame.as_ref().unwrap();
        assert_eq!(frame.file.len(), MAX_TEXT);
        assert_eq!(m.node_of(0).unwrap().1.len(), MAX_TEXT);
    }

    #[test]
    fn each_end_is_handed_on_once_oldest_first() {
        let mut m = Merge::default();
        let mut a = summary(0, 1, 0..2);
        a.ended.push(RankEnd {
            rank: 1,
            pid: 11,
            exit: Exit::Signal(9),
            oom: false,
            at_unix: 1000.5,
        });
        let mut b = summary(1, 1, 2..4);
        b.ended.push(RankEnd {
            rank: 3,
            pid: 33,
            exit: Exit::Code(3),
            oom: false,
            at_unix: 1000.0,
        });
        m.take(5.0, a.clone()).unwrap();
        m.take(5.0, b).unwrap();
        let ends = m.new_ends(|u| u - 990.0);
        let got: Vec<(u32, u32, f64)> = ends.iter().map(|(n, e)| (*n, e.rank, e.at_s)).collect();
        assert_eq!(got, vec![(1, 3, 10.0), (0, 1, 10.5)]);
        a.round = 2;
        m.take(6.0, a).unwrap();
        assert!(m.new_ends(|u| u).is_empty());
    }

    #[test]
    fn a_diagnosis_counts_only_for_the_order_it_answers() {
        let mut m = Merge::default();
        let mut s = summary(1, 1, 0..2);
        s.diagnosis = Some(NodeDiagnosis {
            order: 2,
            hang: true,
            summary: "rank 1 never joined all_reduce".into(),
            ranks: vec![1],
            action: Some(Action::RestartJob),
        });
        m.take(1.0, s).unwrap();
        assert!(m.diagnosis(1, 1).is_none());
        assert_eq!(m.diagnosis(1, 2).map(|d| d.ranks.clone()), Some(vec![1]));
        assert!(m.diagnosis(0, 2).is_none());
    }

    #[test]
    fn entry_times_go_onto_node_0s_clock_or_are_left_out() {
        use crate::domain::watch_late::Entered;
        let with_entry = |node: u32, ranks: std::ops::Range<u32>| {
            let mut s = summary(node, 1, ranks);
            for x in &mut s.samples {
                x.entered = vec![Entered {
                    group: "0".into(),
                    seq: 7,
                    at_ms: 1000.0,
                }];
            }
            s
        };
        let mut m = Merge::default();
        m.take(1.0, with_entry(0, 0..1)).unwrap();
        m.take(1.0, with_entry(1, 1..2)).unwrap();
        m.take(1.0, with_entry(2, 2..3)).unwrap();
        m.set_clock(1, 0.250, 0.002);
        m.set_clock(2, 0.0, 0.5);
        let at: Vec<Option<f64>> = m
            .samples()
            .iter()
            .map(|s| s.entered.first().map(|e| e.at_ms))
            .collect();
        assert_eq!(at, vec![Some(1000.0), Some(1250.0), None]);
    }

    #[test]
    fn a_node_not_heard_from_is_silent() {
        let mut m = Merge::default();
        m.take(1.0, summary(0, 1, 0..2)).unwrap();
        m.take(9.0, summary(1, 1, 2..4)).unwrap();
        assert_eq!(m.silent(12.0, 10.0), vec![(0, "node0".to_string(), 11.0)]);
        m.remove(0);
        assert!(m.silent(12.0, 10.0).is_empty());
        assert_eq!(m.node_of(0), None);
    }

    #[test]
    fn a_summary_stays_small_per_rank() {
        let s = summary(0, 1, 0..8);
        let bytes = serde_json::to_vec(&s).unwrap().len();
        assert!(bytes < 8 * 400, "{bytes} bytes for 8 ranks");
        let back: NodeSummary = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}

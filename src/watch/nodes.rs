//! The watch across nodes (`--watch --nnodes N ...`), its part of the
//! watch's loop: every other node sends its summary each period and acts
//! on node 0's orders; node 0 merges every node's summary with its own
//! ranks' samples, so `domain::watch` judges the whole job, and names each
//! rank with its node.

use gpucheck_checks::domain::watch::{Event, Sample};
use gpucheck_checks::domain::watch_summary::{NodeDiagnosis, NodeSummary};
use gpucheck_checks::Status;

use super::{period_for, unix_now, Heard, State, DIAGNOSIS_TIMEOUT, EXIT_STOPPED_HUNG};

/// Node 0's ask for other nodes' diagnoses, while it waits for them.
#[derive(Debug, Clone)]
pub(super) struct Asked {
    n: u64,
    at_s: f64,
    nodes: Vec<u32>,
}

/// A node not heard from for this many periods (and at least
/// [`SILENT_MIN_S`]) is said to be silent.
const SILENT_PERIODS: f64 = 4.0;
const SILENT_MIN_S: f64 = 15.0;

impl State<'_> {
    /// Another node with its link up: node 0 judges the whole job.
    pub(super) fn follows(&self) -> bool {
        self.link.as_ref().is_some_and(|l| !l.leads() && l.up())
    }

    /// End the link to the other nodes (node 0 hands its last order on
    /// first).
    pub(super) fn close_link(&mut self) {
        if let Some(link) = self.link.as_mut() {
            link.close();
        }
    }

    fn leads(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.leads())
    }

    /// Read the link; Some(exit code) when node 0 ordered this node's
    /// ranks ended.
    pub(super) fn listen(&mut self) -> Option<u8> {
        let heard = self.link.as_mut().map(|l| l.heard()).unwrap_or_default();
        for h in heard {
            match h {
                Heard::Joined { nodes, missing } => {
                    for &(node, clock) in &nodes {
                        if let Some((offset, sure)) = clock {
                            self.merge.set_clock(node, offset, sure);
                        }
                    }
                    let mut line = format!("{} nodes joined the watch", nodes.len());
                    if !missing.is_empty() {
                        line += &format!(
                            " (not: node {:?}; the watch judges those that did)",
                            missing
                        );
                    }
                    self.say(&line);
                }
                Heard::Summary(s) => {
                    if let Err(why) = self.merge.take(self.now_s(), s) {
                        self.say(&format!("a summary was not taken: {why}"));
                    }
                }
                Heard::Unreadable { node, why } => {
                    self.say(&format!("node {node}'s summary could not be read: {why}"));
                }
                Heard::Diagnose(n) => self.answer_ask(n),
                Heard::Stop => {
                    self.note("node 0 found the job hung: ending this node's ranks");
                    self.stop_job();
                    return Some(EXIT_STOPPED_HUNG);
                }
                Heard::End => self.say("node 0's watch ended: this node watches its own ranks"),
                Heard::Lost(why) => self.say(&format!(
                    "the link to the other nodes is gone ({why}): this node watches its own ranks"
                )),
            }
        }
        self.remote_ends();
        None
    }

    /// Node 0: the ranks of other nodes that ended, judged as this node's.
    fn remote_ends(&mut self) {
        if !self.leads() {
            return;
        }
        let start_unix = unix_now() - self.now_s();
        let own = self.link.as_ref().map_or(0, |l| l.node_rank);
        for (node, e) in self.merge.new_ends(|u| u - start_unix) {
            if node == own {
                continue;
            }
            if let Some(ev) = self.watcher.ended(e) {
                if matches!(ev, Event::Crash { .. }) && self.verdict.crash.is_none() {
                    self.verdict.crash = Some(ev.clone());
                }
                self.log(&ev);
            }
        }
    }

    /// This period's samples of the whole job: node 0 adds every node's
    /// latest; another node sends its own to node 0.
    pub(super) fn whole_job(&mut self, own: Vec<Sample>) -> Vec<Sample> {
        let Some(link) = self.link.as_ref() else {
            return own;
        };
        let summary = NodeSummary {
            node: link.node_rank,
            host: link.host.clone(),
            round: self.round,
            samples: own.clone(),
            ended: self.ends.clone(),
            diagnosis: self.answer.clone(),
        };
        if !link.leads() {
            link.send(&summary.clean());
            return own;
        }
        let now = self.now_s();
        if let Err(why) = self.merge.take(now, summary) {
            self.say(&format!("this node's own summary was not taken: {why}"));
        }
        self.say_silent(now);
        self.merge.samples()
    }

    /// Node 0, a hang suspected: when ranks of other nodes are not in the
    /// collective, ask those nodes to diagnose their ranks (where the
    /// culprit runs, its node's own `gpucheck job` can confirm it); true
    /// when asked, so that node 0 does not judge alone.
    pub(super) fn ask_nodes(&mut self, waiting: &[u32]) -> bool {
        let Some(link) = self.link.as_ref().filter(|l| l.leads() && l.up()) else {
            return false;
        };
        let own = link.node_rank;
        let mut nodes: Vec<u32> = self
            .merge
            .ranks()
            .into_iter()
            .filter(|r| !waiting.contains(r))
            .filter_map(|r| self.merge.node_of(r).map(|(n, _)| n))
            .filter(|&n| n != own)
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.is_empty() {
            return false;
        }
        self.orders += 1;
        link.order_diagnosis(self.orders);
        self.say(&format!("asking node {nodes:?} to diagnose its ranks"));
        self.asked = Some(Asked {
            n: self.orders,
            at_s: self.now_s(),
            nodes,
        });
        true
    }

    /// Node 0: the asked nodes' answers; a hang one of them confirmed is
    /// the verdict. Some(exit code) when the watch ended the job.
    pub(super) fn answers(&mut self) -> Option<u8> {
        let asked = self.asked.clone()?;
        let answers: Vec<(u32, NodeDiagnosis)> = asked
            .nodes
            .iter()
            .filter_map(|&n| Some((n, self.merge.diagnosis(n, asked.n)?.clone())))
            .collect();
        if let Some((node, d)) = answers.iter().find(|(_, d)| d.hang) {
            self.asked = None;
            let host = self.merge.host(*node).unwrap_or_default();
            let summary = format!("node {node} ({host}): {}", d.summary);
            return self.confirmed(summary, d.ranks.clone(), d.action.unwrap_or_default());
        }
        let late = self.now_s() - asked.at_s > (DIAGNOSIS_TIMEOUT * 2).as_secs_f64();
        if answers.len() == asked.nodes.len() || late {
            self.asked = None;
            let said = if late {
                "gave no answer in time"
            } else {
                "found no hang"
            };
            self.say(&format!("the nodes' diagnosis {said}: not a hang"));
        }
        None
    }

    /// Another node: node 0 asks for this node's diagnosis; the answer
    /// goes with the next summaries.
    fn answer_ask(&mut self, n: u64) {
        self.say("node 0 asks for this node's diagnosis");
        let hang = self.local_hang();
        let failed = hang
            .as_ref()
            .is_some_and(|h| h.outcome.status == Status::Fail);
        self.answer = Some(NodeDiagnosis {
            order: n,
            hang: failed,
            summary: hang
                .as_ref()
                .map_or("no report".to_string(), |h| h.outcome.summary.clone()),
            ranks: hang
                .as_ref()
                .map_or(Vec::new(), |h| h.outcome.ranks.clone()),
            action: hang.and_then(|h| h.outcome.action),
        });
    }

    fn say_silent(&mut self, now: f64) {
        let own = self.link.as_ref().map_or(0, |l| l.node_rank);
        let after = (SILENT_PERIODS * period_for(self.watcher.hang_after_s()).as_secs_f64())
            .max(SILENT_MIN_S);
        for (node, host, for_s) in self.merge.silent(now, after) {
            if node != own && !self.silent_said.contains(&node) {
                self.silent_said.push(node);
                self.note(&format!(
                    "node {node} ({host}) sent no summary for {for_s:.0} s: its watch or the node \
                     is gone; its ranks are judged as last seen"
                ));
            }
        }
    }

    /// Node 0 of a job across nodes: which node runs the ranks an event
    /// names (for a hang: the ranks not in the collective).
    pub(super) fn on_nodes(&self, e: &Event) -> String {
        if !self.leads() || self.merge.nodes() < 2 {
            return String::new();
        }
        let ranks: Vec<u32> = match e {
            Event::Crash { rank, .. } | Event::TornDown { rank, .. } => vec![*rank],
            Event::Straggler { rank, .. }
            | Event::LateStraggler { rank, .. }
            | Event::StragglerCleared { rank } => vec![*rank],
            Event::HangSuspected { waiting, .. } => self
                .merge
                .ranks()
                .into_iter()
                .filter(|r| !waiting.contains(r))
                .collect(),
            Event::WaitingOnBusy { busy, .. } => busy.iter().map(|(r, _)| *r).collect(),
            _ => Vec::new(),
        };
        let named: Vec<String> = ranks
            .iter()
            .filter_map(|&r| {
                let (node, host) = self.merge.node_of(r)?;
                Some(format!("rank {r} on node {node} ({host})"))
            })
            .collect();
        match (e, named.is_empty()) {
            (_, true) => String::new(),
            (Event::HangSuspected { .. }, false) => {
                format!("; not in it: {}", named.join(", "))
            }
            _ => format!(" [{}]", named.join(", ")),
        }
    }
}

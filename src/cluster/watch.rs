//! `gpucheck job --watch --nnodes N ...`: the watch's link between nodes.
//! Every node watches its own ranks (`crate::watch`); through the same
//! rendezvous as `gpucheck job --nnodes` (its run identity, token rules
//! and deadlines; no all-reduce), every other node sends node rank 0 its
//! ranks' summary each period (`domain::watch_summary`), and node 0, which
//! judges the whole job, sends back its orders: "stop" (end your ranks: the
//! job is hung, under `--on-hang stop`) and "end" (the watch is over).
//!
//! The link never holds the watch up: it is read without waiting, and a
//! node that loses node 0 goes on watching its own ranks alone.

use std::time::{Duration, Instant};

use gpucheck_checks::domain::watch_summary::NodeSummary;

use super::rendezvous::{Event, Session};
use super::{base_config, checked, Meeting};
use crate::cli::ClusterFlags;
use std::path::Path;

/// What node 0 waits at the end for its payload to hand on "end".
const END_WAIT: Duration = Duration::from_secs(5);

/// What came over the link since the last look.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    /// Node 0: the nodes that joined (node 0 too), each with its clock
    /// against node 0's where measured (offset, uncertainty, seconds), and
    /// those that did not join within the rendezvous timeout.
    Joined {
        nodes: Vec<(u32, Option<(f64, f64)>)>,
        missing: Vec<u32>,
    },
    /// Node 0: a node's summary, newer than its last.
    Summary(NodeSummary),
    /// Node 0: a summary that could not be read, and why.
    Unreadable { node: u32, why: String },
    /// Another node: node 0 asks for this node's diagnosis (order `n`).
    Diagnose(u64),
    /// Another node: node 0 orders every node to end its ranks.
    Stop,
    /// Another node: node 0's watch is over.
    End,
    /// The link is gone (node 0 unreachable, the payload ended): why.
    Lost(String),
}

/// This node's end of the link.
pub struct Link {
    session: Option<Session>,
    pub node_rank: u32,
    pub host: String,
}

impl Link {
    /// Join the watch's rendezvous (the payload runs beside the watch; its
    /// events are read by [`Link::heard`]).
    pub fn start(
        cluster: &ClusterFlags,
        python: Option<&Path>,
        host: &str,
    ) -> anyhow::Result<Link> {
        let meeting = Meeting::resolve(cluster, python)?;
        let mut config = meeting.for_run(base_config(&meeting.id, cluster));
        config.allreduce = false;
        config.pair_steps = 0;
        config.watch = true;
        config.profile = "watch".to_string();
        config.host = checked::clean(host, checked::MAX_HOST);
        let message = serde_json::json!({ "node_rank": config.node_rank, "host": config.host });
        let session = Session::start(
            &meeting.python,
            &config,
            meeting.token.as_ref(),
            &message.to_string(),
        )
        .map_err(|e| anyhow::anyhow!("cannot start the watch's rendezvous: {e}"))?;
        Ok(Link {
            session: Some(session),
            node_rank: config.node_rank,
            host: config.host,
        })
    }

    /// Whether this node judges the whole job.
    pub fn leads(&self) -> bool {
        self.node_rank == 0
    }

    /// Whether the link still runs.
    pub fn up(&self) -> bool {
        self.session.is_some()
    }

    /// Everything heard since the last call, without waiting.
    pub fn heard(&mut self) -> Vec<Heard> {
        let mut out = Vec::new();
        while let Some(session) = self.session.as_mut() {
            let Some(next) = session.try_next() else {
                break;
            };
            match next {
                Ok(event) => out.extend(heard(event)),
                Err(why) => out.push(Heard::Lost(checked::clean(&why, 600))),
            }
            // The payload ended, or said it cannot go on.
            if matches!(out.last(), Some(Heard::Lost(_))) {
                self.session = None;
            }
        }
        out
    }

    /// Another node: this period's summary for node 0.
    pub fn send(&self, summary: &NodeSummary) {
        if let (Some(s), Ok(line)) = (&self.session, serde_json::to_string(summary)) {
            s.send(line);
        }
    }

    /// Node 0: order every other node to end its ranks.
    pub fn order_stop(&self) {
        self.order("stop", 0);
    }

    /// Node 0: ask every other node for its ranks' diagnosis, order `n`.
    pub fn order_diagnosis(&self, n: u64) {
        self.order("diagnose", n);
    }

    fn order(&self, order: &str, n: u64) {
        if let Some(s) = &self.session {
            s.send(serde_json::json!({ "order": order, "n": n }).to_string());
        }
    }

    /// End the link: node 0 tells the others the watch is over and waits
    /// a moment for its payload to hand that on.
    pub fn close(&mut self) {
        let Some(mut session) = self.session.take() else {
            return;
        };
        if self.node_rank != 0 {
            return;
        }
        session.send(r#"{"order": "end", "n": 0}"#.to_string());
        let deadline = Instant::now() + END_WAIT;
        while let Ok(e) = session.next(deadline, "the other nodes to read the end") {
            if matches!(e, Event::Done {} | Event::Error { .. }) {
                break;
            }
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
    }
}

/// A joined node's clock against node 0's, where the payload measured it.
fn clock(node: &serde_json::Value) -> Option<(f64, f64)> {
    let c = node.get("clock")?;
    let offset = c.get("offset_s")?.as_f64()?;
    let sure = c.get("uncertainty_s")?.as_f64()?;
    (offset.is_finite() && sure.is_finite() && sure >= 0.0).then_some((offset, sure))
}

/// What one payload event means to the watch.
fn heard(event: Event) -> Option<Heard> {
    match event {
        Event::Gathered { nodes, missing, .. } => Some(Heard::Joined {
            nodes: nodes
                .iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, clock(v))))
                .collect(),
            missing,
        }),
        Event::Summary { node, summary } => {
            Some(match serde_json::from_value::<NodeSummary>(summary) {
                Ok(s) if s.node == node => Heard::Summary(s),
                Ok(s) => Heard::Unreadable {
                    node,
                    why: format!("its summary names node {}", s.node),
                },
                Err(e) => Heard::Unreadable {
                    node,
                    why: checked::clean(&e.to_string(), 200),
                },
            })
        }
        Event::Order { order, n } => match order.as_str() {
            "diagnose" => Some(Heard::Diagnose(n)),
            "stop" => Some(Heard::Stop),
            "end" => Some(Heard::End),
            _ => None,
        },
        Event::Error { stage, detail, .. } => Some(Heard::Lost(format!(
            "{stage}: {}",
            checked::clean(&detail, 600)
        ))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_for_another_node_is_unreadable() {
        let summary = serde_json::json!({
            "node": 2, "host": "b", "round": 1, "samples": [], "ended": []
        });
        assert_eq!(
            heard(Event::Summary { node: 1, summary }),
            Some(Heard::Unreadable {
                node: 1,
                why: "its summary names node 2".into()
            })
        );
    }

    #[test]
    fn a_summary_that_is_no_summary_is_unreadable() {
        let summary = serde_json::json!({ "node": 1, "round": "x" });
        assert!(matches!(
            heard(Event::Summary { node: 1, summary }),
            Some(Heard::Unreadable { node: 1, .. })
        ));
    }

    #[test]
    fn orders_and_errors_are_heard() {
        let stop = Event::Order {
            order: "stop".into(),
            n: 0,
        };
        assert_eq!(heard(stop), Some(Heard::Stop));
        let ask = Event::Order {
            order: "diagnose".into(),
            n: 3,
        };
        assert_eq!(heard(ask), Some(Heard::Diagnose(3)));
        let odd = Event::Order {
            order: "dance".into(),
            n: 0,
        };
        assert_eq!(heard(odd), None);
        let gone = Event::Error {
            stage: "gone".into(),
            detail: "node 0's store closed".into(),
            resolved: vec![],
            missing: vec![],
        };
        assert_eq!(
            heard(gone),
            Some(Heard::Lost("gone: node 0's store closed".into()))
        );
    }
}

//! The fleet checks of `gpucheck cluster`: judged on node rank 0 over every
//! node's gathered report. Each is a pure function of the [`Fleet`] (the
//! node reports as typed data), so unit tests feed synthetic fleets.
//!
//! They implement [`Check`] so that `gpucheck list` and `gpucheck explain`
//! know them like every other check, but they are listed in
//! [`FLEET_CATALOG`], not in [`crate::CATALOG`]: a single machine cannot run
//! them, and `gpucheck run` never selects them. Typed facts are read from
//! each node's results by type ([`FleetNode::fact`]), never from text.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::text;
use crate::{Check, Fact, Outcome, Profile};

mod allreduce;
mod clock;
mod gpus;
mod hosts;
mod load;
mod nccl_env;
mod nvlink;
mod pairs;
mod rendezvous;
mod verdicts;
mod versions;

pub use allreduce::AllReduce;
pub use clock::Clock;
pub use gpus::Gpus;
pub use hosts::Hosts;
pub use load::GpuLoad;
pub use nccl_env::NcclEnv;
pub use nvlink::Nvlink;
pub use pairs::Pairs;
pub use rendezvous::Rendezvous;
pub use verdicts::LocalVerdicts;
pub use versions::{CudaDriver, Driver, Nccl, Torch};

/// What the cluster payload's own `import torch` said on a node: the same
/// interpreter that trains, so it stands in when `torch.import` did not run
/// (the quick profile).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PayloadTorch {
    /// `torch.__version__`: "2.15.0+cu132".
    pub version: Option<String>,
    /// `torch.version.cuda`: None for a CPU-only build.
    pub cuda_build: Option<String>,
    /// `torch.cuda.nccl.version()` as "2.27.7", None without NCCL.
    pub nccl_version: Option<String>,
}

/// A node's wall clock against node 0's, measured through the store: node 0
/// writes its clock into the store every few milliseconds while it waits for
/// the others; a node reads it and brackets the read with its own clock.
/// The true offset lies within `offset_s ± uncertainty_s` (half the round
/// trip plus node 0's write interval).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockReading {
    /// Node 0's clock minus this node's clock, seconds.
    pub offset_s: f64,
    pub uncertainty_s: f64,
}

/// One node's part of the cross-node all-reduce over every rank of every
/// node (one rank per GPU with NCCL, `--nproc` ranks with gloo on CPU), as
/// node 0's payload gathered it from the node's ranks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeAllReduce {
    /// "nccl" or "gloo".
    pub backend: String,
    pub bytes: u64,
    /// Every element held the expected sum afterwards.
    #[serde(default)]
    pub verified: Option<bool>,
    /// The fastest of the timed all-reduces on this node's slowest rank,
    /// seconds.
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Bus bandwidth as nccl-tests defines it: bytes / time * 2(n-1)/n.
    #[serde(default)]
    pub busbw_gbps: Option<f64>,
    #[serde(default)]
    pub error: Option<String>,
    /// Ranks in the all-reduce, every node's together.
    #[serde(default)]
    pub world_size: Option<u32>,
    /// This node's ranks in it.
    #[serde(default)]
    pub local_ranks: Option<u32>,
    /// Its global ranks that gave no result at all before node 0 stopped
    /// waiting (died, or hung past the timeout) and whose end nobody saw.
    #[serde(default)]
    pub silent_ranks: Vec<u32>,
    /// Its ranks that ended without a result, as their node's payload saw
    /// them end.
    #[serde(default)]
    pub exits: Vec<RankExit>,
    /// This node's ranks failed only because a rank elsewhere stopped first.
    #[serde(default)]
    pub waited: bool,
}

/// How one rank's process ended without giving a result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankExit {
    pub rank: u32,
    /// "killed by SIGABRT", "exited with status 1".
    pub how: String,
    /// The last line it wrote to its stderr.
    #[serde(default)]
    pub last_line: Option<String>,
    /// NCCL's watchdog took it down: it waited on another rank.
    #[serde(default)]
    pub watchdog: bool,
}

/// One node rank claimed by two nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Duplicate {
    pub node_rank: u32,
    /// The host (and pid) that holds the rank, and the one refused.
    pub first: String,
    pub second: String,
}

/// The pair all-reduces of the slow-node search: every pair measured, the
/// rounds they ran in (the retest included), and why any stopped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PairTable {
    /// A failed pair has a NaN bandwidth (slow, for the reading).
    pub pairs: Vec<crate::domain::pairs::PairBandwidth>,
    pub rounds: u32,
    /// "pair (1, 2): rank 3: DistBackendError: ...".
    pub errors: Vec<String>,
}

/// One node's gathered report, as the fleet checks read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetNode {
    pub node_rank: u32,
    pub hostname: String,
    /// Every local check's (id, outcome), in run order.
    pub results: Vec<(String, Outcome)>,
    /// The node's own exit code for its local checks.
    pub exit_code: i32,
    /// The node's NCCL_* and GLOO_* variables (and CUDA_VISIBLE_DEVICES).
    pub env: BTreeMap<String, String>,
    pub torch: Option<PayloadTorch>,
    /// None on node 0 (the reference) and where the measurement failed.
    pub clock: Option<ClockReading>,
    /// None when the all-reduce did not run (a node missing) or this node
    /// gave no result.
    pub allreduce: Option<NodeAllReduce>,
}

impl FleetNode {
    /// A typed fact one of this node's checks published.
    pub fn fact<F: Fact>(&self) -> Option<F> {
        self.results.iter().rev().find_map(|(_, o)| o.fact::<F>())
    }

    /// "node 2 (gpu-003)".
    pub fn label(&self) -> String {
        format!("node {} ({})", self.node_rank, self.hostname)
    }
}

/// Every node that joined, the node count the job expects, and the ranks
/// that never joined.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fleet {
    pub nnodes: u32,
    pub nodes: Vec<FleetNode>,
    pub missing: Vec<u32>,
    /// Why the rendezvous itself failed on node 0 (the store could not be
    /// started, the payload died), if it did.
    pub rendezvous_error: Option<String>,
    /// "node01:29500" as the nodes were told.
    pub master: String,
    /// `--min-busbw`: the all-reduce's floor, GB/s.
    pub min_busbw_gbps: Option<f64>,
    /// The pair rounds, when they ran (3 nodes or more, after a verified
    /// all-reduce).
    pub pairs: Option<PairTable>,
    /// Node ranks whose entry could not be judged, and why ("sent an
    /// unreadable entry: key ..., NaN, which JSON does not allow").
    pub rejected: Vec<(u32, String)>,
    /// Node ranks that found themselves out of step with node 0 (another
    /// gpucheck, another profile) and said so.
    pub refused: Vec<(u32, String)>,
    /// Node ranks claimed twice.
    pub duplicates: Vec<Duplicate>,
    /// Entries ignored and waited past ("an entry for rank 1 claims rank 0").
    pub ignored: Vec<String>,
    /// Store values that did not verify with the cluster token (ignored).
    pub unverified: u32,
}

/// A fleet check: a [`Check`] (for list and explain) that is judged over the
/// gathered fleet on node rank 0.
pub trait FleetCheck: Check {
    fn judge(&self, fleet: &Fleet) -> Outcome;
}

/// Every fleet check, in report order.
pub static FLEET_CATALOG: &[&dyn FleetCheck] = &[
    &Rendezvous,
    &LocalVerdicts,
    &Gpus,
    &Nvlink,
    &Driver,
    &CudaDriver,
    &Torch,
    &Nccl,
    &NcclEnv,
    &Hosts,
    &Clock,
    &GpuLoad,
    &AllReduce,
    &Pairs,
];

/// Look a fleet check up by id.
pub fn find(id: &str) -> Option<&'static dyn FleetCheck> {
    FLEET_CATALOG.iter().copied().find(|c| c.id() == id)
}

/// What a fleet check's `run` says when run as a local check (it never is
/// by gpucheck itself: `run` selects from the per-node catalog).
pub fn not_local() -> Outcome {
    Outcome::skip("a fleet check: `gpucheck cluster` judges it on node rank 0 over every node")
}

/// The profile every fleet check is listed under: they run with any profile.
pub const FLEET_PROFILE: Profile = Profile::Quick;

/// "nodes 0, 1, 3" / "node 2 (gpu-003)": a list of nodes for a summary.
pub fn nodes_phrase(nodes: &[&FleetNode]) -> String {
    match nodes {
        [one] => one.label(),
        many => {
            let ranks: Vec<String> = many.iter().map(|n| n.node_rank.to_string()).collect();
            format!("nodes {}", text::list_cut(&ranks, 8))
        }
    }
}

/// Compare one value across nodes. `value_of` gives a node's value (None
/// when the node did not report it). Pass when every reporting node agrees;
/// fail naming the nodes that differ from the most common value and theirs.
pub fn agreement(
    fleet: &Fleet,
    what: &str,
    value_of: impl Fn(&FleetNode) -> Option<String>,
    not_reported: &str,
    hint: &str,
) -> Outcome {
    let mut groups: Vec<(String, Vec<&FleetNode>)> = Vec::new();
    let mut silent: Vec<&FleetNode> = Vec::new();
    for node in &fleet.nodes {
        match value_of(node) {
            Some(v) => match groups.iter_mut().find(|(g, _)| *g == v) {
                Some((_, members)) => members.push(node),
                None => groups.push((v, vec![node])),
            },
            None => silent.push(node),
        }
    }
    let unknown = if silent.is_empty() {
        String::new()
    } else {
        format!(" ({} did not report it)", nodes_phrase(&silent))
    };
    // Most common value first; a tie goes to the value node 0 has.
    groups.sort_by_key(|(_, m)| std::cmp::Reverse(m.len()));
    match groups.as_slice() {
        [] => Outcome::skip(format!("no node reported its {what}: {not_reported}")),
        [(v, members)] => Outcome::pass(format!(
            "{what} {v} on {}{unknown}",
            text::counted(members.len(), "node", "nodes")
        ))
        .with_fact(what, v.clone()),
        [(common, members), rest @ ..] => {
            let odd: Vec<String> = rest
                .iter()
                .map(|(v, m)| {
                    format!(
                        "{} {} {v}",
                        nodes_phrase(m),
                        if m.len() == 1 { "has" } else { "have" }
                    )
                })
                .collect();
            Outcome::fail(
                format!(
                    "{what} differs: {}; {} {} {common}{unknown}",
                    odd.join("; "),
                    nodes_phrase(members),
                    if members.len() == 1 { "has" } else { "have" },
                ),
                hint,
            )
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A node with a hostname and nothing else.
    pub fn node(rank: u32, host: &str) -> FleetNode {
        FleetNode {
            node_rank: rank,
            hostname: host.to_string(),
            ..Default::default()
        }
    }

    pub fn fleet(nodes: Vec<FleetNode>) -> Fleet {
        Fleet {
            nnodes: nodes.len() as u32,
            nodes,
            master: "node0:29500".into(),
            ..Default::default()
        }
    }

    /// Attach a published fact to a node, as check `id` would.
    pub fn with_fact<F: Fact>(mut n: FleetNode, id: &str, fact: &F) -> FleetNode {
        n.results
            .push((id.to_string(), Outcome::pass("ok").publish(fact)));
        n
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::Status;
    use std::collections::HashSet;

    #[test]
    fn fleet_ids_are_unique_documented_and_apart_from_the_node_catalog() {
        let mut seen = HashSet::new();
        for c in FLEET_CATALOG {
            assert!(seen.insert(c.id()), "duplicate {}", c.id());
            assert_eq!(c.group(), "fleet", "{}", c.id());
            assert!(c.explain().len() > 80, "{} explain too short", c.id());
            assert!(crate::CATALOG.iter().all(|d| d.id() != c.id()));
            assert_eq!(c.run(&crate::Context::default()).status, Status::Skip);
        }
    }

    #[test]
    fn agreement_names_the_odd_node_and_both_values() {
        let f = fleet(vec![node(0, "a"), node(1, "b"), node(2, "c")]);
        let o = agreement(
            &f,
            "driver",
            |n| {
                Some(
                    if n.node_rank == 2 {
                        "550.54.15"
                    } else {
                        "570.86.15"
                    }
                    .to_string(),
                )
            },
            "",
            "align them",
        );
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "driver differs: node 2 (c) has 550.54.15; nodes 0, 1 have 570.86.15"
        );
        assert_eq!(o.hint.as_deref(), Some("align them"));
    }

    #[test]
    fn agreement_passes_skips_and_counts_silent_nodes() {
        let f = fleet(vec![node(0, "a"), node(1, "b")]);
        let o = agreement(
            &f,
            "torch",
            |n| (n.node_rank == 0).then(|| "2.15".to_string()),
            "",
            "",
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "torch 2.15 on 1 node (node 1 (b) did not report it)"
        );
        let o = agreement(&f, "torch", |_| None, "run a standard profile", "");
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("run a standard profile"));
    }
}

//! fleet.nccl_env: the NCCL_* and GLOO_* settings that every node must
//! share.

use crate::identity::check;
use std::collections::BTreeSet;

use super::{Fleet, FleetCheck, FleetNode};
use crate::domain::text;
use crate::Outcome;

check!(
    NcclEnv,
    "fleet.nccl_env",
    "Same NCCL/Gloo settings on every node",
    "The NCCL_* and GLOO_* variables that must agree across a job have the same value (or are \
unset) on every node: the network choice (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_DISABLE, \
NCCL_NET, NCCL_NET_PLUGIN, NCCL_IB_GID_INDEX, GLOO_SOCKET_IFNAME) and the algorithm choice \
(NCCL_PROTO, NCCL_ALGO, NCCL_CROSS_NIC...). Per-node debugging variables (NCCL_DEBUG, \
NCCL_DEBUG_FILE...) may differ.

Why it matters: NCCL picks transports and algorithms per rank; when one node uses TCP over \
eth0 and the others InfiniBand, or one forces another protocol, the first collective hangs \
or runs at a fraction of the speed, and nothing names the node.

Fix: set these variables once for the whole job (the sbatch script, the pod template), not \
per node; the report names the node whose value differs and both values.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

/// Variables that may differ per node: logging and debugging only.
const PER_NODE: &[&str] = &[
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_RAS_ENABLE",
];

/// True for a variable every node must agree on.
pub fn must_agree(name: &str) -> bool {
    (name.starts_with("NCCL_") || name.starts_with("GLOO_")) && !PER_NODE.contains(&name)
}

impl FleetCheck for NcclEnv {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

fn value(node: &FleetNode, name: &str) -> String {
    node.env
        .get(name)
        .map(|v| text::plain_or_quoted(v))
        .unwrap_or_else(|| "unset".to_string())
}

fn evaluate(fleet: &Fleet) -> Outcome {
    let names: BTreeSet<&str> = fleet
        .nodes
        .iter()
        .flat_map(|n| n.env.keys().map(String::as_str))
        .filter(|k| must_agree(k))
        .collect();
    let mut differences = Vec::new();
    for name in &names {
        let outcome = super::agreement(fleet, name, |n| Some(value(n, name)), "", "");
        if outcome.status.is_failure() {
            differences.push(outcome.summary);
        }
    }
    if differences.is_empty() {
        return Outcome::pass(if names.is_empty() {
            "no NCCL_*/GLOO_* variable set on any node".to_string()
        } else {
            format!(
                "{} the same on every node",
                text::list_cut(&names.iter().copied().collect::<Vec<_>>(), 8)
            )
        });
    }
    Outcome::fail(
        differences.join(" | "),
        "set NCCL_*/GLOO_* once for the whole job (the sbatch script, the pod template), not per \
         node",
    )
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::Status;

    fn with_env(mut n: FleetNode, pairs: &[(&str, &str)]) -> FleetNode {
        for (k, v) in pairs {
            n.env.insert(k.to_string(), v.to_string());
        }
        n
    }

    #[test]
    fn a_node_with_another_interface_is_named_with_both_values() {
        let f = fleet(vec![
            with_env(node(0, "a"), &[("NCCL_SOCKET_IFNAME", "eth0")]),
            with_env(node(1, "b"), &[("NCCL_SOCKET_IFNAME", "ib0")]),
            with_env(node(2, "c"), &[("NCCL_SOCKET_IFNAME", "eth0")]),
        ]);
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NCCL_SOCKET_IFNAME differs: node 1 (b) has ib0; nodes 0, 2 have eth0"
        );
    }

    #[test]
    fn unset_on_one_node_differs_debug_variables_do_not_count() {
        let f = fleet(vec![
            with_env(
                node(0, "a"),
                &[("NCCL_IB_DISABLE", "1"), ("NCCL_DEBUG", "INFO")],
            ),
            with_env(node(1, "b"), &[("NCCL_DEBUG", "WARN")]),
        ]);
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NCCL_IB_DISABLE differs: node 1 (b) has unset; node 0 (a) has 1"
        );
        let f = fleet(vec![
            with_env(node(0, "a"), &[("NCCL_DEBUG", "INFO")]),
            with_env(node(1, "b"), &[]),
        ]);
        assert_eq!(evaluate(&f).status, Status::Pass);
    }
}

//! fleet.local: every node's own checks passed.

use super::{Fleet, FleetCheck, FleetNode};
use crate::domain::action::Action;
use crate::domain::text;
use crate::identity::check;
use crate::{Cause, Outcome, Status};

check!(
    LocalVerdicts,
    "fleet.local",
    "Every node is ready on its own",
    "Every node's local checks (the chosen profile, the same checks as `gpucheck run`) \
ended ready (exit code 0).

Why it matters: one node with a failed GPU, a full /dev/shm or a broken torch stops the \
whole job: DDP runs at the pace of its worst rank and dies with it.

Fix: the fleet report names each node that is not ready and its failing check ids; run \
`gpucheck explain ID` for what to do, or drain the node and start the job without it.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for LocalVerdicts {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

/// The ids of a node's failing (or erroring) local checks.
pub fn failing_ids(node: &FleetNode) -> Vec<&str> {
    node.results
        .iter()
        .filter(|(_, o)| o.status.is_failure())
        .map(|(id, _)| id.as_str())
        .collect()
}

fn evaluate(fleet: &Fleet) -> Outcome {
    let bad: Vec<String> = fleet
        .nodes
        .iter()
        .filter(|n| n.exit_code != 0)
        .map(|n| {
            let ids = failing_ids(n);
            if ids.is_empty() {
                format!("{}: exit code {}", n.label(), n.exit_code)
            } else {
                format!("{}: {}", n.label(), text::list_cut(&ids, 6))
            }
        })
        .collect();
    if bad.is_empty() {
        return Outcome::pass(format!(
            "all {} that joined are ready",
            text::counted(fleet.nodes.len(), "node", "nodes")
        ));
    }
    Outcome::fail(
        format!(
            "{} of {} not ready: {}",
            bad.len(),
            text::counted(fleet.nodes.len(), "node", "nodes"),
            text::list_cut(&bad, 8)
        ),
        "see each node's failing checks below (`gpucheck explain ID`), or drain those nodes",
    )
    .with_action(worst_action(fleet), Vec::new())
}

/// The most drastic of the not-ready nodes' own run-level actions: what the
/// fleet needs done before the job can start.
fn worst_action(fleet: &Fleet) -> Action {
    fleet
        .nodes
        .iter()
        .filter(|n| n.exit_code != 0)
        .map(|n| node_action(&n.results))
        .max()
        .unwrap_or(Action::FixConfig)
}

/// A node's run-level action, as its own report gives it (`gpucheck run
/// --json`'s top-level `action`): every warn-or-worse result's action
/// resolved, a result that failed for the same cause as another taking
/// that check's action, and the most drastic of them.
pub fn node_action(results: &[(String, Outcome)]) -> Action {
    let resolved: Vec<(&str, Outcome)> = results
        .iter()
        .map(|(id, o)| {
            let mut o = o.clone();
            o.resolve_action(id);
            (id.as_str(), o)
        })
        .collect();
    resolved
        .iter()
        .filter_map(|(_, o)| {
            let origin = match &o.cause {
                Some(Cause::SameCause { check }) if o.status >= Status::Warn => {
                    resolved.iter().find(|(id, _)| id == check)
                }
                _ => None,
            };
            origin.and_then(|(_, origin)| origin.action).or(o.action)
        })
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::Status;

    #[test]
    fn the_action_is_the_most_drastic_of_the_nodes_not_ready() {
        let mut bad = node(1, "gpu-002");
        bad.exit_code = 1;
        bad.results = vec![
            ("gpu.ecc".into(), Outcome::fail("remap pending", "reset")),
            ("host.shm".into(), Outcome::warn("small", "grow")),
        ];
        let mut f = fleet(vec![node(0, "gpu-001"), bad]);
        f.nnodes = 2;
        assert_eq!(evaluate(&f).action, Some(Action::ResetGpu));
    }

    #[test]
    fn the_action_is_the_nodes_own_not_that_of_a_failure_with_the_same_cause() {
        // No GPU passed into the container: host.devices says fix_config,
        // and the driver checks that fail for the same cause take it, as
        // the node's own report does (their default is fix_install).
        let same = |id: &str| {
            Outcome::fail(format!("{id} — same cause as host.devices"), "see").with_cause(
                Cause::SameCause {
                    check: "host.devices".into(),
                },
            )
        };
        let mut bad = node(1, "gpu-002");
        bad.exit_code = 1;
        bad.results = vec![
            (
                "host.devices".into(),
                Outcome::fail("no device nodes", "--gpus all"),
            ),
            ("gpu.driver".into(), same("gpu.driver")),
            ("cuda.driver".into(), same("cuda.driver")),
        ];
        assert_eq!(node_action(&bad.results), Action::FixConfig);
        let mut f = fleet(vec![node(0, "gpu-001"), bad]);
        f.nnodes = 2;
        assert_eq!(evaluate(&f).action, Some(Action::FixConfig));
    }

    #[test]
    fn names_the_node_and_its_failing_checks() {
        let mut bad = node(1, "gpu-002");
        bad.exit_code = 1;
        bad.results = vec![
            ("gpu.driver".into(), Outcome::pass("ok")),
            ("gpu.ecc".into(), Outcome::fail("3 uncorrectable", "drain")),
            ("host.shm".into(), Outcome::warn("small", "grow")),
        ];
        let o = evaluate(&fleet(vec![node(0, "gpu-001"), bad]));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "1 of 2 nodes not ready: node 1 (gpu-002): gpu.ecc"
        );
    }

    #[test]
    fn all_ready_passes() {
        let o = evaluate(&fleet(vec![node(0, "a"), node(1, "b"), node(2, "c")]));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "all 3 nodes that joined are ready");
    }
}

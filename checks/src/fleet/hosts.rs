//! fleet.hosts: one node rank per host.

use super::{Fleet, FleetCheck, FleetNode};
use crate::identity::check;
use crate::Outcome;

check!(
    Hosts,
    "fleet.hosts",
    "One node rank per host",
    "Every node rank runs on a host of its own (by hostname).

Why it matters: two node ranks on one host usually mean a launcher mistake (srun with \
--ntasks-per-node 2, a pod template scheduled twice on one machine): both start \
--nproc-per-node workers on the same GPUs. On a workstation trial (--nnodes 2 on one \
machine) it is on purpose, so it is reported as a warning, never a failure.

Fix: start one gpucheck (and one torchrun) per node: `srun --ntasks-per-node 1`, a pod \
anti-affinity rule, or one hostfile entry per machine.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for Hosts {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

fn evaluate(fleet: &Fleet) -> Outcome {
    let mut shared: Vec<(String, Vec<&FleetNode>)> = Vec::new();
    for n in &fleet.nodes {
        match shared.iter_mut().find(|(h, _)| *h == n.hostname) {
            Some((_, v)) => v.push(n),
            None => shared.push((n.hostname.clone(), vec![n])),
        }
    }
    let hosts = shared.len();
    shared.retain(|(_, v)| v.len() > 1);
    if shared.is_empty() {
        return Outcome::pass(format!("{hosts} nodes on {hosts} distinct hosts"));
    }
    let text: Vec<String> = shared
        .iter()
        .map(|(h, v)| {
            let ranks: Vec<String> = v.iter().map(|n| n.node_rank.to_string()).collect();
            format!("node ranks {} share host {h}", ranks.join(", "))
        })
        .collect();
    Outcome::warn(
        format!("{} (a trial on one machine is fine)", text.join("; ")),
        "on a real cluster start one gpucheck per node (`srun --ntasks-per-node 1`, pod \
         anti-affinity)",
    )
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::Status;

    #[test]
    fn shared_hosts_are_a_warning_naming_the_ranks() {
        let o = evaluate(&fleet(vec![node(0, "ws"), node(1, "ws"), node(2, "b")]));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.starts_with("node ranks 0, 1 share host ws"),
            "{}",
            o.summary
        );
        let o = evaluate(&fleet(vec![node(0, "a"), node(1, "b")]));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "2 nodes on 2 distinct hosts");
    }
}

//! fleet.nvlink_domains: the fleet's multi-node NVLink domains (nodes whose
//! GPUs share a cluster UUID and clique), and the nodes that should share
//! one and do not.

use super::{nodes_phrase, Fleet, FleetCheck, FleetNode};
use crate::domain::nvlink_fabric::uuid_text;
use crate::domain::text::counted;
use crate::facts::fabric::NvlinkDomains;
use crate::identity::check;
use crate::Outcome;

/// GPUs in one GB200 / GB300 NVL72 NVLink domain (18 compute trays of 4
/// GPUs; NVIDIA GB200 NVL72 datasheet): a job of at most this many GPUs
/// can run inside one domain.
const NVL72_GPUS: u32 = 72;

check!(
    Nvlink,
    "fleet.nvlink_domains",
    "Multi-node NVLink domains",
    "Lists the fleet's multi-node NVLink domains (GB200 / GB300 NVL72 racks): the nodes whose GPUs \
registered with one cluster UUID and clique, as fabric.mnnvl found them on each node.

Why it matters: NCCL uses NVLink between nodes (MNNVL) only among GPUs of one cluster UUID and \
clique (NVIDIA/nccl src/mnnvl.cc); between domains, and to a node in none, traffic goes over the \
network, an order of magnitude slower.

Verdicts: a node whose GPUs registered with no multi-node fabric (or failed to register) beside \
nodes that share a domain fails: the job's traffic to it leaves NVLink (fabric.mnnvl on that node \
says why). Nodes of one cluster UUID in different cliques warn (the rack is partitioned between \
them). A job spread over several domains warns when it would fit in one (72 GPUs of an NVL72) and \
passes otherwise, naming the domains either way. Fleets with no multi-node NVLink skip.

Fix: place the job inside one NVLink domain (a Slurm topology block or segment, a Kubernetes \
ComputeDomain), and have a node whose registration failed repaired or drained.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for Nvlink {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

/// Each domain with its nodes, in order of first appearance.
type Domains<'a> = Vec<((String, u32), Vec<&'a FleetNode>)>;

fn evaluate(fleet: &Fleet) -> Outcome {
    let mut domains: Domains = Vec::new();
    let mut outside: Vec<&FleetNode> = Vec::new();
    let mut silent: Vec<&FleetNode> = Vec::new();
    let mut gpus = 0;
    for node in &fleet.nodes {
        let Some(fact) = node.fact::<NvlinkDomains>() else {
            silent.push(node);
            continue;
        };
        gpus += fact.gpus;
        if fact.domains.is_empty() {
            if fact.fabric_gpus > 0 {
                outside.push(node);
            }
            continue;
        }
        for d in &fact.domains {
            let key = (d.cluster_uuid.clone(), d.clique_id);
            match domains.iter_mut().find(|(k, _)| *k == key) {
                Some((_, nodes)) => nodes.push(node),
                None => domains.push((key, vec![node])),
            }
        }
    }
    if domains.is_empty() {
        return Outcome::skip(format!(
            "no node is in a multi-node NVLink domain{}",
            unreported(&silent)
        ));
    }
    let listed = list(&domains);
    if !outside.is_empty() {
        return Outcome::fail(
            format!(
                "{} in no NVLink domain beside {listed}: the job's traffic to {} leaves NVLink",
                nodes_phrase(&outside),
                if outside.len() == 1 { "it" } else { "them" }
            ),
            "a node whose GPUs did not register with the rack's NVLink fabric (fabric.mnnvl on it \
             says why: registration failed, stuck, or a zero cluster UUID) reaches the others \
             over the network only: repair it (reboot, or ask the provider) or leave it out of \
             the job",
        );
    }
    let summary = format!("{listed}{}", unreported(&silent));
    if domains.len() == 1 {
        return Outcome::pass(summary);
    }
    let one_cluster = domains.iter().all(|((u, _), _)| *u == domains[0].0 .0);
    if one_cluster {
        return Outcome::warn(
            format!("{summary}: NCCL does not use NVLink between cliques of one rack"),
            "the rack's NVLink partitions put these nodes in different cliques: ask the rack's \
             operator for one partition across the job's trays, or place the job inside one",
        );
    }
    let text = format!(
        "{summary}: traffic between the {} domains leaves NVLink",
        domains.len()
    );
    if gpus <= NVL72_GPUS {
        Outcome::warn(
            text,
            format!(
                "the job's {gpus} GPUs would fit in one NVL72 domain ({NVL72_GPUS} GPUs): place it \
                 inside one (a Slurm topology block or segment, a Kubernetes ComputeDomain)"
            ),
        )
    } else {
        Outcome::pass(text)
    }
}

/// "nodes 0, 1 in cluster X clique 2; node 2 (c) in cluster Y clique 5".
fn list(domains: &Domains) -> String {
    domains
        .iter()
        .map(|((uuid, clique), nodes)| {
            format!(
                "{} in NVLink domain cluster {} clique {clique}",
                nodes_phrase(nodes),
                uuid_text(uuid)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn unreported(silent: &[&FleetNode]) -> String {
    if silent.is_empty() {
        String::new()
    } else {
        format!(
            " ({} did not report: fabric.mnnvl did not run)",
            counted(silent.len(), "node", "nodes")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::facts::fabric::NvlinkDomain;
    use crate::Status;

    const A: &str = "6a130f54faaa4b8f847fbe44ab70f917";
    const B: &str = "dc6e40c4d72243579ba65291dd461278";

    fn tray(rank: u32, uuid: &str, clique: u32) -> FleetNode {
        let fact = NvlinkDomains {
            domains: vec![NvlinkDomain {
                cluster_uuid: uuid.into(),
                clique_id: clique,
                gpus: vec![0, 1, 2, 3],
            }],
            fabric_gpus: 4,
            unregistered_gpus: 0,
            gpus: 4,
        };
        with_fact(node(rank, &format!("tray{rank}")), "fabric.mnnvl", &fact)
    }

    fn outside(rank: u32) -> FleetNode {
        let fact = NvlinkDomains {
            fabric_gpus: 4,
            unregistered_gpus: 4,
            gpus: 4,
            ..NvlinkDomains::default()
        };
        with_fact(node(rank, &format!("tray{rank}")), "fabric.mnnvl", &fact)
    }

    #[test]
    fn one_domain_passes_naming_it() {
        let o = evaluate(&fleet(vec![tray(0, A, 7), tray(1, A, 7)]));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "nodes 0, 1 in NVLink domain cluster 6a130f54-faaa-4b8f-847f-be44ab70f917 clique 7"
        );
    }

    #[test]
    fn a_node_in_no_domain_beside_a_domain_fails() {
        let o = evaluate(&fleet(vec![tray(0, A, 7), tray(1, A, 7), outside(2)]));
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .starts_with("node 2 (tray2) in no NVLink domain beside nodes 0, 1"));
        assert!(o.summary.ends_with("the job's traffic to it leaves NVLink"));
    }

    #[test]
    fn two_cliques_of_one_rack_warn() {
        let o = evaluate(&fleet(vec![tray(0, A, 7), tray(1, A, 8)]));
        assert_eq!(o.status, Status::Warn);
        assert!(o
            .summary
            .ends_with("NCCL does not use NVLink between cliques of one rack"));
    }

    #[test]
    fn two_racks_warn_when_the_job_fits_in_one_and_pass_when_not() {
        let o = evaluate(&fleet(vec![tray(0, A, 7), tray(1, B, 2)]));
        assert_eq!(o.status, Status::Warn);
        assert!(o
            .summary
            .ends_with("traffic between the 2 domains leaves NVLink"));
        assert!(o
            .hint
            .as_deref()
            .unwrap_or("")
            .contains("the job's 8 GPUs would fit"));
        let mut nodes: Vec<FleetNode> = (0..18).map(|r| tray(r, A, 7)).collect();
        nodes.extend((18..36).map(|r| tray(r, B, 2)));
        assert_eq!(evaluate(&fleet(nodes)).status, Status::Pass);
    }

    #[test]
    fn no_multi_node_fabric_skips_and_silent_nodes_are_counted() {
        let hgx = NvlinkDomains {
            fabric_gpus: 8,
            gpus: 8,
            ..NvlinkDomains::default()
        };
        let f = fleet(vec![
            with_fact(node(0, "a"), "fabric.mnnvl", &hgx),
            node(1, "b"),
        ]);
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.summary,
            "no node is in a multi-node NVLink domain (1 node did not report: fabric.mnnvl did \
             not run)"
        );
    }
}

//! fleet.pairs: all-reduces between node pairs, run concurrently (disjoint
//! pairs, a few rounds, then a retest of each slow node against a node that
//! passed), read by `domain::pairs` into "node 7 (gpu-007): 38 GB/s against
//! 3 healthy partners, others 180-190 GB/s".

use super::{Fleet, FleetCheck};
use crate::domain::pairs::{self, gbps, Diagnosis, PairBandwidth};
use crate::domain::text;
use crate::identity::check;
use crate::{DataTable, Outcome};

check!(
    Pairs,
    "fleet.pairs",
    "Slow node or link between nodes",
    "After the all-reduce across every node passes, with 3 nodes or more, node rank 0 pairs the \
nodes up and every pair runs an all-reduce over the GPUs of its two nodes, all pairs of a \
round at once (disjoint pairs, 3 rounds, or fewer when that covers every pair, so each node \
meets up to 3 partners). A second pass retests each node that was slow with every partner \
against a node that passed and that it has not met. A pair below 70 % of the median pair is \
slow. A node slow with every partner while those partners are fast with others is a slow node \
(fails); a slow pair of two nodes fast elsewhere is a slow link (fails); a node slow only with \
partners that are unproven themselves is a suspect (warns). With gloo on CPU the figures are \
reported, not judged (the CPUs, not the network, set them).

Why it matters: one slow node or link sets the pace of every step of a data-parallel job: \
the all-reduce across the whole fleet only says the cluster is slow; the pairs say where.

Fix: on the named node, check its NICs (`ibstat`, `ethtool`, `mlxlink`), their PCIe links \
and NUMA placement, and NCCL_IB_HCA; for a slow link, the cables and switch ports between \
the two nodes; rerun with NCCL_DEBUG=INFO to see the transport NCCL chose.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for Pairs {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

fn table(pairs: &[PairBandwidth], host: &dyn Fn(u32) -> String) -> DataTable {
    DataTable {
        title: "Pair all-reduces".into(),
        header: ["nodes", "hosts", "bus bandwidth (GB/s)"]
            .map(String::from)
            .to_vec(),
        rows: pairs
            .iter()
            .map(|p| {
                vec![
                    format!("{} + {}", p.a, p.b),
                    format!("{} + {}", host(p.a), host(p.b)),
                    gbps(p.busbw_gbps),
                ]
            })
            .collect(),
        legend: None,
    }
}

fn evaluate(fleet: &Fleet) -> Outcome {
    let Some(t) = &fleet.pairs else {
        return Outcome::skip(if fleet.nnodes < pairs::MIN_NODES {
            "fewer than 3 nodes: the all-reduce across the nodes is the only pair".to_string()
        } else {
            "not run: the all-reduce across every node did not pass".to_string()
        });
    };
    let host = |n: u32| {
        fleet
            .nodes
            .iter()
            .find(|x| x.node_rank == n)
            .map_or_else(|| "?".to_string(), |x| x.hostname.clone())
    };
    let measured: Vec<f64> = t
        .pairs
        .iter()
        .map(|p| p.busbw_gbps)
        .filter(|b| b.is_finite())
        .collect();
    let (lo, hi) = measured
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &b| {
            (lo.min(b), hi.max(b))
        });
    let range = match measured.len() {
        0 => String::new(),
        _ if gbps(lo) == gbps(hi) => format!(": {} GB/s", gbps(lo)),
        _ => format!(": {}-{} GB/s", gbps(lo), gbps(hi)),
    };
    let head = format!(
        "{} in {}{range}",
        text::counted(t.pairs.len(), "pair", "pairs"),
        text::counted(t.rounds as usize, "round", "rounds")
    );
    let out = judge_table(fleet, t, &head, &host);
    out.with_table(table(&t.pairs, &host))
}

/// The verdict over the measured table.
fn judge_table(
    fleet: &Fleet,
    t: &super::PairTable,
    head: &str,
    host: &dyn Fn(u32) -> String,
) -> Outcome {
    let hint =
        "on the named node, check its NICs (ibstat, ethtool, mlxlink), their PCIe links and \
                NUMA placement and NCCL_IB_HCA; for a link, the cables and switch ports between \
                the two nodes; rerun with NCCL_DEBUG=INFO";
    if !t.errors.is_empty() {
        return Outcome::fail(
            format!(
                "{head}; a pair all-reduce failed: {}",
                text::list_cut(&t.errors, 3)
            ),
            hint,
        );
    }
    let found = pairs::diagnose(&t.pairs);
    if found.is_empty() {
        return Outcome::pass(format!("{head}, no slow node or link"));
    }
    let said: Vec<String> = found
        .iter()
        .map(|d| pairs::describe(d, &t.pairs, host))
        .collect();
    let on_cpu = fleet.nodes.iter().any(|n| {
        n.allreduce
            .as_ref()
            .is_some_and(|a| a.backend.eq_ignore_ascii_case("gloo"))
    });
    if on_cpu {
        return Outcome::pass(format!(
            "{head} (gloo on CPU: reported, not judged): {}",
            said.join("; ")
        ));
    }
    let proven = found
        .iter()
        .any(|d| !matches!(d, Diagnosis::Suspect { .. }));
    let summary = format!("{head}; {}", said.join("; "));
    if proven {
        Outcome::fail(summary, hint)
    } else {
        Outcome::warn(summary, hint)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{NodeAllReduce, PairTable};
    use super::*;
    use crate::Status;

    fn nccl_fleet(n: u32, bw: impl Fn(u32, u32) -> f64) -> Fleet {
        let nodes = (0..n)
            .map(|r| {
                let mut x = node(r, &format!("gpu-{:03}", r + 1));
                x.allreduce = Some(NodeAllReduce {
                    backend: "nccl".into(),
                    verified: Some(true),
                    ..Default::default()
                });
                x
            })
            .collect();
        let mut f = fleet(nodes);
        let mut table = Vec::new();
        let mut rounds = 0;
        for pass in 1..=3 {
            for round in pairs::plan(n, pass, &table) {
                rounds += 1;
                for (a, b) in round {
                    table.push(PairBandwidth {
                        a,
                        b,
                        busbw_gbps: bw(a, b),
                    });
                }
            }
        }
        f.pairs = Some(PairTable {
            pairs: table,
            rounds,
            errors: Vec::new(),
        });
        f
    }

    #[test]
    fn a_slow_node_fails_naming_it_against_its_healthy_partners() {
        let f = nccl_fleet(8, |a, b| if a == 6 || b == 6 { 38.0 } else { 185.0 });
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "13 pairs in 4 rounds: 38-185 GB/s; node 6 (gpu-007): 38 GB/s against 4 healthy \
             partners, others 185 GB/s"
        );
        assert!(o.hint.unwrap_or_default().contains("NCCL_IB_HCA"));
        // Three rounds, then the retest against one more healthy node.
        assert_eq!(o.tables[0].rows.len(), 13);
        assert_eq!(o.tables[0].rows[0][1], "gpu-001 + gpu-008");
    }

    #[test]
    fn a_healthy_fleet_passes_with_its_range_and_the_table() {
        let f = nccl_fleet(4, |a, _| 180.0 + a as f64);
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "6 pairs in 3 rounds: 180-182 GB/s, no slow node or link"
        );
        assert_eq!(o.tables[0].rows.len(), 6);
    }

    #[test]
    fn on_cpu_slow_pairs_are_reported_not_judged() {
        let mut f = nccl_fleet(4, |a, b| if a == 3 || b == 3 { 0.2 } else { 1.5 });
        for n in &mut f.nodes {
            if let Some(a) = n.allreduce.as_mut() {
                a.backend = "gloo".into();
            }
        }
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .contains("(gloo on CPU: reported, not judged): node 3 (gpu-004)"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn a_failed_pair_fails_and_too_few_nodes_skip() {
        let mut f = nccl_fleet(3, |_, _| 100.0);
        if let Some(t) = f.pairs.as_mut() {
            t.errors
                .push("pair (0, 2): rank 2: DistBackendError: timed out".into());
        }
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.ends_with(
                "a pair all-reduce failed: pair (0, 2): rank 2: DistBackendError: timed out"
            ),
            "{}",
            o.summary
        );
        let mut two = fleet(vec![node(0, "a"), node(1, "b")]);
        assert_eq!(evaluate(&two).status, Status::Skip);
        two.nnodes = 4;
        assert_eq!(
            evaluate(&two).summary,
            "not run: the all-reduce across every node did not pass"
        );
    }
}

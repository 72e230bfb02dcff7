//! Localising a slow node or link from pairwise all-reduce bandwidths:
//! which node pairs to measure together (disjoint pairs, a few rounds, run
//! concurrently), how to read the table, and which second-pass pairs settle
//! what the first pass left open. Pure: the table is given; the collective
//! that fills it lives elsewhere.
//!
//! The reading: a pair is slow when its bus bandwidth is below
//! [`SLOW_FRACTION`] of the median pair. A node whose every measured pair is
//! slow, with at least one partner that is fast elsewhere, is a slow node;
//! a slow pair whose two nodes are both fast elsewhere is a slow link.
//! Anything else stays a suspect, for the retest against healthy partners.

/// A pair below this share of the median pair is slow. Repeated nccl-tests
/// runs on a healthy fabric vary by a few percent, and a degraded link
/// (a port down in a bond, a PCIe link trained at a lower width, a NIC on
/// the far NUMA node) costs a third or more, so 70 % separates the two.
pub const SLOW_FRACTION: f64 = 0.7;

/// The first pass runs at most this many rounds of disjoint pairs: with
/// three partners each, a slow node is slow three times over and each of its
/// partners is measured with two other nodes, enough to tell a node from a
/// link; every pair is one all-reduce time, so more rounds cost more than
/// they tell.
pub const PAIR_ROUNDS: usize = 3;

/// Below this many nodes there is nothing to localise: with two nodes the
/// one pair is the whole fleet's all-reduce.
pub const MIN_NODES: u32 = 3;

/// The pass-th plan of pair rounds (pass 1, 2, ...), given what the earlier
/// passes measured: pass 1 is the first [`PAIR_ROUNDS`] rounds, pass 2 the
/// [`retest`] round (when it has pairs), and then nothing. Fewer nodes
/// need fewer rounds: [`rounds`] stops once every pair has met.
pub fn plan(nodes: u32, pass: u32, results: &[PairBandwidth]) -> Vec<Vec<(u32, u32)>> {
    match pass {
        _ if nodes < MIN_NODES => Vec::new(),
        1 => rounds(nodes, PAIR_ROUNDS),
        2 => {
            let second = retest(results);
            if second.is_empty() {
                Vec::new()
            } else {
                vec![second]
            }
        }
        _ => Vec::new(),
    }
}

/// One measured pair: the all-reduce bus bandwidth between nodes `a` and `b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairBandwidth {
    pub a: u32,
    pub b: u32,
    pub busbw_gbps: f64,
}

/// What the table says about the fleet.
#[derive(Debug, Clone, PartialEq)]
pub enum Diagnosis {
    /// Every pair with this node is slow, and its partners are fast with
    /// others: `busbw` against each healthy partner.
    SlowNode { node: u32, busbw: Vec<f64> },
    /// Both nodes are fast with others, slow together.
    SlowLink { a: u32, b: u32, busbw_gbps: f64 },
    /// Slow with every partner, but no partner is known healthy: retest it.
    Suspect { node: u32 },
}

/// The pairing rounds for `nodes` nodes: each round is a set of disjoint
/// pairs that can run at the same time (the circle method of a round-robin
/// tournament; with an odd count one node rests each round). At most
/// `max_rounds` rounds; `nodes - 1` rounds (or `nodes` when odd) cover
/// every pair once.
pub fn rounds(nodes: u32, max_rounds: usize) -> Vec<Vec<(u32, u32)>> {
    if nodes < 2 {
        return Vec::new();
    }
    // A ghost seat makes the count even; its partner rests that round.
    let seats = nodes + nodes % 2;
    let ghost = (nodes % 2 == 1).then_some(seats - 1);
    let total = (seats - 1) as usize;
    let mut out = Vec::new();
    for round in 0..total.min(max_rounds) {
        // Seat 0 stays; the others rotate by one each round.
        let at = |pos: u32| -> u32 {
            if pos == 0 {
                0
            } else {
                1 + (pos - 1 + round as u32) % (seats - 1)
            }
        };
        let pairs: Vec<(u32, u32)> = (0..seats / 2)
            .map(|i| (at(i), at(seats - 1 - i)))
            .filter(|(a, b)| Some(*a) != ghost && Some(*b) != ghost)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        out.push(pairs);
    }
    out
}

/// The median of the measured bandwidths (0 for none).
pub fn median(results: &[PairBandwidth]) -> f64 {
    let v: Vec<f64> = results.iter().map(|p| p.busbw_gbps).collect();
    super::stats::median(&v).unwrap_or(0.0)
}

/// Slow, or not a number (a failed measurement counts as slow).
fn is_slow(p: &PairBandwidth, median: f64) -> bool {
    p.busbw_gbps.is_nan() || p.busbw_gbps < SLOW_FRACTION * median
}

/// The pairs `node` was measured in.
fn pairs_of(results: &[PairBandwidth], node: u32) -> impl Iterator<Item = &PairBandwidth> {
    results.iter().filter(move |p| p.a == node || p.b == node)
}

fn partner(p: &PairBandwidth, node: u32) -> u32 {
    if p.a == node {
        p.b
    } else {
        p.a
    }
}

/// True when `node` has at least one fast pair.
fn fast_somewhere(results: &[PairBandwidth], node: u32, median: f64) -> bool {
    pairs_of(results, node).any(|p| !is_slow(p, median))
}

/// Read the table: slow nodes, slow links and suspects, in node order.
pub fn diagnose(results: &[PairBandwidth]) -> Vec<Diagnosis> {
    let m = median(results);
    let mut nodes: Vec<u32> = results.iter().flat_map(|p| [p.a, p.b]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut out = Vec::new();
    for &node in &nodes {
        if fast_somewhere(results, node, m) {
            continue;
        }
        let healthy: Vec<f64> = pairs_of(results, node)
            .filter(|p| fast_somewhere(results, partner(p, node), m))
            .map(|p| p.busbw_gbps)
            .collect();
        out.push(if healthy.is_empty() {
            Diagnosis::Suspect { node }
        } else {
            Diagnosis::SlowNode {
                node,
                busbw: healthy,
            }
        });
    }
    for p in results.iter().filter(|p| is_slow(p, m)) {
        if fast_somewhere(results, p.a, m) && fast_somewhere(results, p.b, m) {
            out.push(Diagnosis::SlowLink {
                a: p.a,
                b: p.b,
                busbw_gbps: p.busbw_gbps,
            });
        }
    }
    out
}

/// The second pass: each node slow with every partner so far is paired
/// with a node that was fast somewhere and that it has not met yet; pairs
/// are disjoint, so they run at once. Nodes without such a partner left
/// are not retested.
pub fn retest(results: &[PairBandwidth]) -> Vec<(u32, u32)> {
    let m = median(results);
    let mut nodes: Vec<u32> = results.iter().flat_map(|p| [p.a, p.b]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let healthy: Vec<u32> = nodes
        .iter()
        .copied()
        .filter(|n| fast_somewhere(results, *n, m))
        .collect();
    let mut busy: Vec<u32> = Vec::new();
    let mut plan = Vec::new();
    for &node in nodes.iter().filter(|n| !healthy.contains(n)) {
        let met: Vec<u32> = pairs_of(results, node).map(|p| partner(p, node)).collect();
        if let Some(&h) = healthy
            .iter()
            .find(|h| !met.contains(h) && !busy.contains(h))
        {
            busy.extend([node, h]);
            plan.push((node.min(h), node.max(h)));
        }
    }
    plan
}

/// A bus bandwidth as a person reads it: "185" from 10 GB/s up, "0.42"
/// below (gloo on CPU), "failed" for a failed pair.
pub fn gbps(v: f64) -> String {
    if v.is_nan() {
        "failed".to_string()
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// "node 7 (gpu-007): 38 GB/s against 3 healthy partners, others 180-190
/// GB/s"; `host` names a node rank.
pub fn describe(d: &Diagnosis, results: &[PairBandwidth], host: &dyn Fn(u32) -> String) -> String {
    let m = median(results);
    let fast: Vec<f64> = results
        .iter()
        .filter(|p| !is_slow(p, m))
        .map(|p| p.busbw_gbps)
        .collect();
    let others = match (
        fast.iter().copied().reduce(f64::min),
        fast.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) if gbps(lo) != gbps(hi) => {
            format!(", others {}-{} GB/s", gbps(lo), gbps(hi))
        }
        (Some(lo), _) => format!(", others {} GB/s", gbps(lo)),
        _ => String::new(),
    };
    let name = |n: u32| format!("node {n} ({})", host(n));
    match d {
        Diagnosis::SlowNode { node, busbw } => {
            let worst = busbw.iter().copied().fold(f64::INFINITY, f64::min);
            format!(
                "{}: {} GB/s against {} healthy {}{others}",
                name(*node),
                gbps(worst),
                busbw.len(),
                if busbw.len() == 1 {
                    "partner"
                } else {
                    "partners"
                }
            )
        }
        Diagnosis::SlowLink { a, b, busbw_gbps } => format!(
            "the link between {} and {}: {} GB/s, both fast with others{others}",
            name(*a),
            name(*b),
            gbps(*busbw_gbps)
        ),
        Diagnosis::Suspect { node } => format!(
            "{}: slow with every partner measured, none known healthy: retest it{others}",
            name(*node)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The measured table: `bw(a, b)` for each pair.
    fn table(pairs: &[(u32, u32)], bw: impl Fn(u32, u32) -> f64) -> Vec<PairBandwidth> {
        pairs
            .iter()
            .map(|&(a, b)| PairBandwidth {
                a,
                b,
                busbw_gbps: bw(a, b),
            })
            .collect()
    }

    fn first_rounds(n: u32, k: usize) -> Vec<(u32, u32)> {
        rounds(n, k).into_iter().flatten().collect()
    }

    #[test]
    fn rounds_are_disjoint_and_cover_every_pair_once() {
        for n in [2u32, 3, 4, 7, 8, 16] {
            let all = rounds(n, usize::MAX);
            let mut seen = HashSet::new();
            for round in &all {
                let mut busy = HashSet::new();
                for &(a, b) in round {
                    assert!(a < b && b < n, "{n}: ({a},{b})");
                    assert!(
                        busy.insert(a) && busy.insert(b),
                        "{n}: a node twice in a round"
                    );
                    assert!(seen.insert((a, b)), "{n}: ({a},{b}) twice");
                }
                assert_eq!(round.len() as u32, n / 2, "{n}: a round is not full");
            }
            assert_eq!(seen.len() as u32, n * (n - 1) / 2, "{n}");
        }
        assert!(rounds(1, 3).is_empty());
        assert_eq!(rounds(16, 3).len(), 3);
    }

    #[test]
    fn one_slow_node_is_named_against_its_healthy_partners() {
        let pairs = first_rounds(8, 3);
        let results = table(&pairs, |a, b| if a == 7 || b == 7 { 38.0 } else { 185.0 });
        let d = diagnose(&results);
        assert_eq!(d.len(), 1, "{d:?}");
        let Diagnosis::SlowNode { node, busbw } = &d[0] else {
            panic!("{d:?}")
        };
        assert_eq!((*node, busbw.len()), (7, 3));
        let host = |n: u32| format!("gpu-{:03}", n + 1);
        assert_eq!(
            describe(&d[0], &results, &host),
            "node 7 (gpu-008): 38 GB/s against 3 healthy partners, others 185 GB/s"
        );
    }

    #[test]
    fn a_slow_link_between_two_good_nodes_is_a_link_not_a_node() {
        let pairs = first_rounds(6, 3);
        let (x, y) = pairs[1];
        let results = table(&pairs, |a, b| {
            if (a, b) == (x, y) {
                60.0
            } else {
                180.0 + a as f64
            }
        });
        assert_eq!(
            diagnose(&results),
            vec![Diagnosis::SlowLink {
                a: x,
                b: y,
                busbw_gbps: 60.0
            }]
        );
    }

    #[test]
    fn a_node_slow_with_only_suspects_is_retested_against_a_healthy_one() {
        // Two slow nodes that met each other and nobody else in round one.
        let results = vec![
            PairBandwidth {
                a: 0,
                b: 1,
                busbw_gbps: 40.0,
            },
            PairBandwidth {
                a: 2,
                b: 3,
                busbw_gbps: 180.0,
            },
            PairBandwidth {
                a: 4,
                b: 5,
                busbw_gbps: 182.0,
            },
        ];
        assert_eq!(
            diagnose(&results),
            vec![
                Diagnosis::Suspect { node: 0 },
                Diagnosis::Suspect { node: 1 }
            ]
        );
        let plan = retest(&results);
        assert_eq!(plan, vec![(0, 2), (1, 3)]);
        // The retest: node 0 is fine with node 2, node 1 is slow with node 3.
        let mut all = results.clone();
        all.push(PairBandwidth {
            a: 0,
            b: 2,
            busbw_gbps: 181.0,
        });
        all.push(PairBandwidth {
            a: 1,
            b: 3,
            busbw_gbps: 41.0,
        });
        let d = diagnose(&all);
        assert_eq!(
            d,
            vec![Diagnosis::SlowNode {
                node: 1,
                busbw: vec![40.0, 41.0]
            }]
        );
    }

    #[test]
    fn the_plan_is_a_few_rounds_then_the_retest_then_nothing() {
        assert!(
            plan(2, 1, &[]).is_empty(),
            "two nodes: one pair, nothing to localise"
        );
        assert_eq!(
            plan(3, 1, &[]).concat(),
            vec![(1, 2), (0, 1), (0, 2)],
            "three nodes: every pair, one per round"
        );
        assert_eq!(plan(4, 1, &[]).len(), 3);
        assert_eq!(plan(64, 1, &[]).len(), PAIR_ROUNDS);
        let pairs = first_rounds(8, 3);
        let healthy = table(&pairs, |_, _| 180.0);
        assert!(plan(8, 2, &healthy).is_empty(), "nothing to retest");
        let suspects = vec![
            PairBandwidth {
                a: 0,
                b: 1,
                busbw_gbps: 40.0,
            },
            PairBandwidth {
                a: 2,
                b: 3,
                busbw_gbps: 180.0,
            },
        ];
        assert_eq!(plan(4, 2, &suspects), vec![vec![(0, 2), (1, 3)]]);
        assert!(plan(4, 3, &suspects).is_empty());
    }

    #[test]
    fn small_bandwidths_keep_two_decimals() {
        let pairs = first_rounds(4, 3);
        let results = table(&pairs, |a, b| {
            if a == 3 || b == 3 {
                0.012
            } else {
                0.15 + 0.1 * a as f64
            }
        });
        let d = diagnose(&results);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            describe(&d[0], &results, &|_| "vm".to_string()),
            "node 3 (vm): 0.01 GB/s against 3 healthy partners, others 0.15-0.25 GB/s"
        );
    }

    #[test]
    fn a_healthy_fleet_has_nothing_to_say_and_nan_is_slow() {
        let pairs = first_rounds(8, 3);
        let results = table(&pairs, |a, _| 178.0 + a as f64);
        assert!(diagnose(&results).is_empty());
        assert!(retest(&results).is_empty());
        let mut with_nan = results.clone();
        with_nan[0].busbw_gbps = f64::NAN;
        assert!(is_slow(&with_nan[0], median(&with_nan)));
        assert_eq!(median(&[]), 0.0);
    }
}

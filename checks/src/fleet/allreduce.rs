//! fleet.allreduce: one all-reduce across every node, verified and timed.

use super::{Fleet, FleetCheck, FleetNode};
use crate::domain::text;
use crate::facts::fabric::{NicLinks, SocketLinks};
use crate::identity::check;
use crate::{DataTable, Outcome};

/// The all-reduce warns below this share of the per-node NIC line rate.
/// NCCL's inter-node ring all-reduce moves 2(n-1)/n of the data through
/// each node's NICs, so its bus bandwidth approaches the node's aggregate
/// NIC rate: nccl-tests on InfiniBand NDR clusters report 85-95 % of it at
/// large sizes (NVIDIA's DGX SuperPOD reference figures and the NCCL
/// performance guides). The 64 MiB measured here sits below the plateau, so
/// the floor is set at half: below it NCCL is not using every NIC, has
/// fallen back to TCP sockets, or a link is degraded.
pub const MIN_NIC_FRACTION: f64 = 0.5;

check!(
    AllReduce,
    "fleet.allreduce",
    "All-reduce across the nodes",
    "Once every node has joined, the nodes run one all-reduce together through \
torch.distributed over every GPU of every node: one rank (one process) per GPU torch sees \
with NCCL, or --nproc ranks per node (default 1) on the CPU with gloo; --ddp-backend and \
--ddp-device choose. Node rank 0 gives each node its first rank from the rank counts the \
nodes report, so nodes with different GPU counts work. Every rank checks that every element \
holds the expected sum; the time is the slowest rank's. Bus bandwidth is reported as \
nccl-tests defines it, bytes / time x 2(n-1)/n with n the world size. It fails below \
--min-busbw when given; with NCCL it warns below half of what the slowest node's links carry \
together: a node's RDMA ports (fabric.rdma's active ports) when it has any and NCCL may use them (not \
with NCCL_IB_DISABLE=1 or NCCL_NET=Socket), else the \
network interfaces NCCL's sockets use (those NCCL_SOCKET_IFNAME selects, or NCCL's own choice, \
as nccl.env found them) at their Ethernet link speeds (/sys/class/net/<if>/speed). When a \
node's interface has no known speed (down, or virtual) that node may be the slowest, so the \
figure is not judged against the links at all. A healthy inter-node ring \
reaches most of the per-node NIC line rate. With gloo on CPU the figure is reported, not \
judged against the NICs.

When a rank dies or hangs mid all-reduce, the other ranks' collectives fail too; each \
collective is waited for with a deadline, each node records how its ranks ended (exit status \
or signal, last stderr line), and only the node of the rank that stopped first is named, \
with the ranks that merely waited on it counted (a rank NCCL's watchdog took down only \
waited).

Why it matters: this is the first thing DDP does between nodes. A firewall on NCCL's or \
gloo's ports, a wrong NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME, an InfiniBand port down or a \
misconfigured RDMA device makes it hang or fail here, in seconds, instead of in the job.

Fix: the error names the node; check the interfaces NCCL/gloo use (NCCL_SOCKET_IFNAME, \
GLOO_SOCKET_IFNAME, NCCL_IB_HCA), that the nodes reach each other on all ports (not only the \
master port), and run with NCCL_DEBUG=INFO for NCCL's own account.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for AllReduce {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

fn evaluate(fleet: &Fleet) -> Outcome {
    let with: Vec<&FleetNode> = fleet
        .nodes
        .iter()
        .filter(|n| n.allreduce.is_some())
        .collect();
    if with.is_empty() {
        return Outcome::skip(if fleet.nnodes <= 1 {
            "one node: nothing to reduce across nodes".to_string()
        } else if !fleet.missing.is_empty() || !fleet.rejected.is_empty() {
            "not run: not every node joined".to_string()
        } else {
            "not run: no node reported an all-reduce".to_string()
        });
    }
    let hint = "check that the nodes reach each other on every port, and the interfaces \
                NCCL/gloo use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_HCA); rerun \
                with NCCL_DEBUG=INFO";
    let broken = broken_nodes(fleet);
    if !broken.is_empty() {
        return Outcome::fail(
            format!(
                "the all-reduce across nodes failed: {}",
                text::list_cut(&broken, 4)
            ),
            hint,
        );
    }
    let first = with[0].allreduce.clone().unwrap_or_default();
    let busbw = with
        .iter()
        .filter_map(|n| n.allreduce.as_ref()?.busbw_gbps)
        .fold(f64::INFINITY, f64::min);
    let what = format!(
        "{} all-reduce of {} MiB across {} verified",
        first.backend,
        first.bytes >> 20,
        text::counted(fleet.nodes.len(), "node", "nodes")
    );
    let bw = if busbw.is_finite() {
        format!(": {}{busbw:.2} GB/s bus bandwidth", world_phrase(fleet))
    } else {
        String::new()
    };
    let out = judge_busbw(fleet, &first.backend, busbw, format!("{what}{bw}"))
        .with_table(per_node(fleet));
    let out = match first.world_size {
        Some(w) => out.with_metric("world_size", w as f64, "count"),
        None => out,
    };
    if busbw.is_finite() {
        out.with_metric("busbw", busbw, "GB/s")
    } else {
        out
    }
}

/// What went wrong on which node. When ranks stopped first (died, hung,
/// or ended without a result), only their nodes are named and the ranks
/// that merely waited on them are counted; otherwise each node's error.
fn broken_nodes(fleet: &Fleet) -> Vec<String> {
    let mut first: Vec<String> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut waited = 0;
    for n in &fleet.nodes {
        let Some(a) = &n.allreduce else {
            failed.push(format!("{}: no result (timed out?)", n.label()));
            continue;
        };
        let stopped = stopped_ranks(a);
        let watchdog: Vec<String> = a
            .exits
            .iter()
            .filter(|e| e.watchdog)
            .map(|e| format!("rank {} was aborted by NCCL's watchdog", e.rank))
            .collect();
        if !stopped.is_empty() {
            first.push(format!("{}: {}", n.label(), stopped.join("; ")));
        } else if a.waited && (a.error.is_some() || !watchdog.is_empty()) {
            waited += 1;
            continue;
        }
        match (&a.error, a.verified) {
            (Some(e), _) => failed.push(format!("{}: {e}", n.label())),
            (None, Some(true)) => {}
            (None, _) if !stopped.is_empty() => {}
            (None, _) if !watchdog.is_empty() => {
                failed.push(format!("{}: {}", n.label(), watchdog.join("; ")))
            }
            (None, _) => failed.push(format!("{}: the sum was not verified", n.label())),
        }
    }
    first.extend(failed);
    if waited > 0 {
        first.push(format!(
            "the ranks of {} failed only waiting for it",
            text::counted(waited, "other node", "other nodes")
        ));
    }
    first
}

/// A node's ranks that stopped without a result: "rank 2 was killed by
/// SIGABRT (last words: ...)", "no result from rank 2 (the node died or
/// hung)". A rank NCCL's watchdog took down only waited and is not one.
fn stopped_ranks(a: &super::NodeAllReduce) -> Vec<String> {
    let mut out: Vec<String> = a
        .exits
        .iter()
        .filter(|e| !e.watchdog)
        .map(|e| {
            let last = e
                .last_line
                .as_deref()
                .map(|l| format!(" (its last words: {l})"))
                .unwrap_or_default();
            format!("rank {} {} without a result{last}", e.rank, e.how)
        })
        .collect();
    if !a.silent_ranks.is_empty() {
        let ranks: Vec<String> = a.silent_ranks.iter().map(u32::to_string).collect();
        out.push(format!(
            "no result from {} {} (the node died or hung)",
            if ranks.len() == 1 { "rank" } else { "ranks" },
            text::list_cut(&ranks, 4)
        ));
    }
    out
}

/// One row per node: its ranks, whether they verified, its slowest rank's
/// time and the bus bandwidth that time gives.
fn per_node(fleet: &Fleet) -> DataTable {
    let rows = fleet
        .nodes
        .iter()
        .map(|n| {
            let a = n.allreduce.clone().unwrap_or_default();
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
            vec![
                n.label(),
                opt(a.local_ranks.map(|r| r.to_string())),
                match (a.error.is_none(), a.verified) {
                    (true, Some(true)) => "yes".to_string(),
                    _ => "no".to_string(),
                },
                opt(a.seconds.map(|s| format!("{:.2}", s * 1000.0))),
                opt(a.busbw_gbps.map(|b| format!("{b:.2}"))),
            ]
        })
        .collect();
    DataTable {
        title: "All-reduce per node".into(),
        header: [
            "node",
            "ranks",
            "verified",
            "time (ms)",
            "bus bandwidth (GB/s)",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        legend: Some("time: the node's slowest rank, fastest of 3 timed all-reduces".into()),
    }
}

/// "16 ranks (8 per node), " or "12 ranks (per node: 8, 4), "; empty when
/// the nodes did not say.
fn world_phrase(fleet: &Fleet) -> String {
    let counts: Vec<u32> = fleet
        .nodes
        .iter()
        .filter_map(|n| n.allreduce.as_ref()?.local_ranks)
        .collect();
    let Some(world) = fleet
        .nodes
        .iter()
        .find_map(|n| n.allreduce.as_ref()?.world_size)
    else {
        return String::new();
    };
    let per_node = match counts.as_slice() {
        [first, rest @ ..] if rest.iter().all(|c| c == first) => format!("{first} per node"),
        _ => {
            let each: Vec<String> = counts.iter().map(u32::to_string).collect();
            format!("per node: {}", text::list_cut(&each, 8))
        }
    };
    format!(
        "{} ({per_node}), ",
        text::counted(world as usize, "rank", "ranks")
    )
}

/// The links a node sends through to the other nodes, and what they carry
/// together, GB/s.
#[derive(Debug, Clone, PartialEq)]
struct NodeLinks {
    gbytes_per_s: f64,
    /// "node 1 (n1)".
    node: String,
    /// None: its RDMA ports; Some: the interfaces NCCL's sockets use,
    /// "eth0 100 Gb/s, eth1 100 Gb/s".
    sockets: Option<String>,
}

/// What a node said about its links.
#[derive(Debug, Clone, PartialEq)]
enum Reported {
    Links(NodeLinks),
    /// Socket interfaces, one of them of unknown speed: the node's rate is
    /// unknown.
    Unknown,
    /// Neither RDMA ports nor socket interfaces (the checks did not run).
    Nothing,
}

/// NCCL on this node goes over sockets although it may have RDMA ports:
/// NCCL_IB_DISABLE set to a non-zero number ("NCCL will fall back to using
/// IP sockets"), or NCCL_NET=Socket (NCCL's environment variables docs).
fn rdma_turned_off(n: &FleetNode) -> bool {
    let ib_disabled = n
        .env
        .get("NCCL_IB_DISABLE")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .is_some_and(|v| v != 0);
    let socket_net = n
        .env
        .get("NCCL_NET")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("socket"));
    ib_disabled || socket_net
}

/// A node's RDMA ports when it reports any and NCCL may use them (NCCL
/// prefers them), else the interfaces its sockets use.
fn node_links(n: &FleetNode) -> Reported {
    let rdma = n.fact::<NicLinks>().filter(|l| !l.links.is_empty());
    if let Some(links) = rdma.filter(|_| !rdma_turned_off(n)) {
        return Reported::Links(NodeLinks {
            gbytes_per_s: links.aggregate_gbytes_per_s(),
            node: n.label(),
            sockets: None,
        });
    }
    let Some(links) = n.fact::<SocketLinks>().filter(|l| !l.links.is_empty()) else {
        return Reported::Nothing;
    };
    let Some(gbytes_per_s) = links.aggregate_gbytes_per_s() else {
        return Reported::Unknown;
    };
    let each: Vec<String> = links
        .links
        .iter()
        .map(|l| {
            format!(
                "{} {}",
                l.interface,
                gbits(l.speed_gbps.unwrap_or_default())
            )
        })
        .collect();
    Reported::Links(NodeLinks {
        gbytes_per_s,
        node: n.label(),
        sockets: Some(text::list_cut(&each, 4)),
    })
}

/// "100 Gb/s", "2.5 Gb/s".
fn gbits(gbps: f64) -> String {
    if gbps.fract() == 0.0 {
        format!("{gbps:.0} Gb/s")
    } else {
        format!("{gbps} Gb/s")
    }
}

/// "25 GB/s", "1.25 GB/s": whole numbers from 10 up.
fn gbytes(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0} GB/s")
    } else {
        format!("{x:.2} GB/s")
    }
}

/// The slowest node's links, over the nodes that reported theirs; None when
/// none did, or when a node's rate is unknown (it may be the slowest: the
/// bound is then unknown, and not guessed).
fn slowest_links(fleet: &Fleet) -> Option<NodeLinks> {
    let mut slowest: Option<NodeLinks> = None;
    for n in &fleet.nodes {
        match node_links(n) {
            Reported::Unknown => return None,
            Reported::Nothing => {}
            Reported::Links(l) => {
                if slowest
                    .as_ref()
                    .is_none_or(|s| l.gbytes_per_s < s.gbytes_per_s)
                {
                    slowest = Some(l);
                }
            }
        }
    }
    slowest
}

/// --min-busbw is the hard floor; with NCCL, half the NICs' rate warns.
fn judge_busbw(fleet: &Fleet, backend: &str, busbw: f64, said: String) -> Outcome {
    let hint = "find the slow link: the nodes' NICs (ibstat, ethtool), NCCL_DEBUG=INFO for the \
                transport NCCL chose, NCCL_IB_HCA";
    if let Some(min) = fleet.min_busbw_gbps.filter(|min| busbw < *min) {
        return Outcome::fail(format!("{said}, below --min-busbw {min}"), hint);
    }
    if backend.eq_ignore_ascii_case("gloo") {
        return Outcome::pass(said);
    }
    let Some(links) = slowest_links(fleet) else {
        return Outcome::pass(said);
    };
    let nic = links.gbytes_per_s;
    let slow = busbw < MIN_NIC_FRACTION * nic;
    match (&links.sockets, slow) {
        (None, true) => Outcome::warn(
            format!(
                "{said}, below half of the {nic:.0} GB/s the RDMA ports of {} carry together",
                links.node
            ),
            hint,
        ),
        (None, false) => Outcome::pass(format!(
            "{said} ({:.0} % of the NICs' {nic:.0} GB/s)",
            100.0 * busbw / nic
        )),
        (Some(each), true) => Outcome::warn(
            format!(
                "{said}, below half of the {} the network interfaces NCCL's sockets use on {} \
                 carry together ({each}; no RDMA port)",
                gbytes(nic),
                links.node
            ),
            "find the slow link: the interfaces' speeds and errors (ethtool, ip -s link), \
             NCCL_SOCKET_IFNAME (every fast interface, the same on every node), NCCL_DEBUG=INFO \
             for the transport NCCL chose",
        ),
        (Some(_), false) => Outcome::pass(format!(
            "{said} ({:.0} % of the {} of the network interfaces NCCL's sockets use)",
            100.0 * busbw / nic,
            gbytes(nic)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::NodeAllReduce;
    use super::*;
    use crate::Status;

    fn reduced(rank: u32, busbw: f64) -> FleetNode {
        let mut n = node(rank, &format!("n{rank}"));
        n.allreduce = Some(NodeAllReduce {
            backend: "gloo".into(),
            bytes: 8 << 20,
            verified: Some(true),
            seconds: Some(0.01),
            busbw_gbps: Some(busbw),
            error: None,
            world_size: None,
            local_ranks: None,
            ..Default::default()
        });
        n
    }

    #[test]
    fn verified_all_reduce_passes_with_the_slowest_busbw() {
        let o = evaluate(&fleet(vec![
            reduced(0, 2.5),
            reduced(1, 2.0),
            reduced(2, 2.4),
        ]));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "gloo all-reduce of 8 MiB across 3 nodes verified: 2.00 GB/s bus bandwidth"
        );
        let mut f = fleet(vec![reduced(0, 2.5), reduced(1, 2.0)]);
        f.min_busbw_gbps = Some(10.0);
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.ends_with("below --min-busbw 10"), "{}", o.summary);
    }

    #[test]
    fn a_node_with_an_error_or_no_result_is_named() {
        let mut bad = reduced(1, 0.0);
        if let Some(a) = bad.allreduce.as_mut() {
            a.error = Some("DistBackendError: connection refused".into());
        }
        let mut silent = node(2, "n2");
        silent.allreduce = None;
        let o = evaluate(&fleet(vec![reduced(0, 1.0), bad, silent]));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "the all-reduce across nodes failed: node 1 (n1): DistBackendError: connection \
             refused, node 2 (n2): no result (timed out?)"
        );
    }

    #[test]
    fn a_node_that_died_is_named_first() {
        let timed_out = |r: u32| {
            let mut n = reduced(r, 0.0);
            if let Some(a) = n.allreduce.as_mut() {
                a.verified = Some(false);
                a.error = Some(format!(
                    "rank {r}: DistStoreError: wait timeout after 30000ms"
                ));
            }
            n
        };
        let mut dead = reduced(2, 0.0);
        if let Some(a) = dead.allreduce.as_mut() {
            a.verified = Some(false);
            a.silent_ranks = vec![4, 5];
        }
        let o = evaluate(&fleet(vec![timed_out(0), timed_out(1), dead]));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.starts_with(
                "the all-reduce across nodes failed: node 2 (n2): no result from ranks 4, 5 (the \
                 node died or hung), node 0 (n0): rank 0: DistStoreError"
            ),
            "{}",
            o.summary
        );
    }

    #[test]
    fn only_the_node_of_the_rank_that_stopped_first_is_named() {
        let waited = |r: u32| {
            let mut n = reduced(r, 0.0);
            if let Some(a) = n.allreduce.as_mut() {
                a.verified = Some(false);
                a.waited = true;
                a.error = Some(format!(
                    "rank {r}: DistBackendError: Connection closed by peer"
                ));
            }
            n
        };
        let mut aborted = reduced(2, 0.0);
        if let Some(a) = aborted.allreduce.as_mut() {
            a.verified = Some(false);
            a.exits = vec![super::super::RankExit {
                rank: 2,
                how: "was killed by SIGABRT".into(),
                last_line: Some("Fatal Python error: Aborted".into()),
                watchdog: false,
            }];
        }
        let o = evaluate(&fleet(vec![waited(0), waited(1), aborted.clone()]));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "the all-reduce across nodes failed: node 2 (n2): rank 2 was killed by SIGABRT \
             without a result (its last words: Fatal Python error: Aborted), the ranks of 2 other \
             nodes failed only waiting for it"
        );
        assert!(!o.summary.contains("node 0"), "{}", o.summary);
        // With NCCL, the waiting ranks may be taken down by NCCL's watchdog
        // instead of failing: they still only waited.
        let mut by_watchdog = waited(1);
        if let Some(a) = by_watchdog.allreduce.as_mut() {
            a.error = None;
            a.exits = vec![super::super::RankExit {
                rank: 1,
                how: "was killed by SIGABRT".into(),
                last_line: Some("Watchdog caught collective operation timeout".into()),
                watchdog: true,
            }];
        }
        let o = evaluate(&fleet(vec![waited(0), by_watchdog.clone(), aborted]));
        assert!(
            o.summary
                .ends_with("the ranks of 2 other nodes failed only waiting for it"),
            "{}",
            o.summary
        );
        // Nobody stopped first: the watchdog's abort is named as such.
        if let Some(a) = by_watchdog.allreduce.as_mut() {
            a.waited = false;
        }
        let o = evaluate(&fleet(vec![reduced(0, 1.0), by_watchdog]));
        assert_eq!(
            o.summary,
            "the all-reduce across nodes failed: node 1 (n1): rank 1 was aborted by NCCL's \
             watchdog"
        );
    }

    #[test]
    fn not_run_is_a_skip_that_says_why() {
        let mut f = fleet(vec![node(0, "a")]);
        f.nnodes = 2;
        f.missing = vec![1];
        assert_eq!(evaluate(&f).summary, "not run: not every node joined");
        assert_eq!(evaluate(&fleet(vec![node(0, "a")])).status, Status::Skip);
    }

    fn with_world(mut n: FleetNode, world: u32, local: u32, backend: &str) -> FleetNode {
        if let Some(a) = n.allreduce.as_mut() {
            a.world_size = Some(world);
            a.local_ranks = Some(local);
            a.backend = backend.into();
        }
        n
    }

    fn nic(n: FleetNode, ports: usize, gbps: f64) -> FleetNode {
        let links = NicLinks {
            links: (0..ports)
                .map(|i| crate::facts::fabric::NicLink {
                    port: format!("mlx5_{i}/1"),
                    link_layer: Some("InfiniBand".into()),
                    rate_gbps: gbps,
                })
                .collect(),
        };
        with_fact(n, "fabric.rdma", &links)
    }

    #[test]
    fn the_world_size_and_ranks_per_node_are_reported() {
        let f = fleet(vec![
            with_world(reduced(0, 2.5), 12, 8, "gloo"),
            with_world(reduced(1, 2.0), 12, 4, "gloo"),
        ]);
        let o = evaluate(&f);
        assert_eq!(
            o.summary,
            "gloo all-reduce of 8 MiB across 2 nodes verified: 12 ranks (per node: 8, 4), 2.00 \
             GB/s bus bandwidth"
        );
        assert_eq!(o.metric("world_size"), Some(12.0));
        assert_eq!(
            o.tables[0].rows[1],
            ["node 1 (n1)", "4", "yes", "10.00", "2.00"].map(String::from)
        );
    }

    #[test]
    fn with_nccl_busbw_is_judged_against_the_nodes_nics() {
        // 8 x 400 Gb/s NDR per node: 400 GB/s together.
        let node = |r, bw| nic(with_world(reduced(r, bw), 16, 8, "nccl"), 8, 400.0);
        let o = evaluate(&fleet(vec![node(0, 360.0), node(1, 350.0)]));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary.ends_with("(88 % of the NICs' 400 GB/s)"),
            "{}",
            o.summary
        );
        let o = evaluate(&fleet(vec![node(0, 360.0), node(1, 120.0)]));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains(
                "120.00 GB/s bus bandwidth, below half of the 400 GB/s the RDMA ports of node 0 \
                 (n0) carry together"
            ),
            "{}",
            o.summary
        );
        // gloo on CPU: reported only, whatever the NICs.
        let cpu = |r, bw| nic(with_world(reduced(r, bw), 2, 1, "gloo"), 8, 400.0);
        assert_eq!(
            evaluate(&fleet(vec![cpu(0, 1.0), cpu(1, 1.0)])).status,
            Status::Pass
        );
        // --min-busbw stays the hard floor.
        let mut f = fleet(vec![node(0, 360.0), node(1, 350.0)]);
        f.min_busbw_gbps = Some(370.0);
        assert_eq!(evaluate(&f).status, Status::Fail);
    }

    fn sockets(n: FleetNode, links: &[(&str, Option<f64>)]) -> FleetNode {
        let links = SocketLinks {
            links: links
                .iter()
                .map(|(interface, speed)| crate::facts::fabric::SocketLink {
                    interface: interface.to_string(),
                    speed_gbps: *speed,
                })
                .collect(),
        };
        with_fact(n, "nccl.env", &links)
    }

    fn nccl(r: u32, bw: f64) -> FleetNode {
        with_world(reduced(r, bw), 16, 8, "nccl")
    }

    const TWO_100GBE: &[(&str, Option<f64>)] = &[("eth0", Some(100.0)), ("eth1", Some(100.0))];

    #[test]
    fn rdma_ports_win_over_socket_interfaces() {
        // 8 x 400 Gb/s NDR and 2 x 100 GbE: NCCL goes over the RDMA ports.
        let node = |r, bw| sockets(nic(nccl(r, bw), 8, 400.0), TWO_100GBE);
        let o = evaluate(&fleet(vec![node(0, 100.0), node(1, 100.0)]));
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(
            o.summary.ends_with(
                "below half of the 400 GB/s the RDMA ports of node 0 (n0) carry together"
            ),
            "{}",
            o.summary
        );
    }

    #[test]
    fn with_ib_disabled_the_socket_interfaces_carry_the_traffic() {
        // NCCL_IB_DISABLE=1 (or NCCL_NET=Socket) on a node with 8 x 400 Gb/s
        // NDR: NCCL uses its 2 x 100 GbE, and 20 GB/s is most of those.
        for (name, value) in [("NCCL_IB_DISABLE", "1"), ("NCCL_NET", "Socket")] {
            let node = |r, bw| {
                let mut n = sockets(nic(nccl(r, bw), 8, 400.0), TWO_100GBE);
                n.env.insert(name.to_string(), value.to_string());
                n
            };
            let o = evaluate(&fleet(vec![node(0, 20.0), node(1, 22.0)]));
            assert_eq!(o.status, Status::Pass, "{name}={value}: {}", o.summary);
            assert!(
                o.summary
                    .ends_with("of the 25 GB/s of the network interfaces NCCL's sockets use)"),
                "{}",
                o.summary
            );
        }
        // NCCL_IB_DISABLE=0 leaves the RDMA ports in use.
        let node = |r, bw| {
            let mut n = sockets(nic(nccl(r, bw), 8, 400.0), TWO_100GBE);
            n.env.insert("NCCL_IB_DISABLE".into(), "0".into());
            n
        };
        let o = evaluate(&fleet(vec![node(0, 20.0), node(1, 22.0)]));
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
    }

    #[test]
    fn without_rdma_busbw_is_judged_against_the_socket_interfaces() {
        let node = |r, bw| sockets(nccl(r, bw), TWO_100GBE);
        let o = evaluate(&fleet(vec![node(0, 20.0), node(1, 22.0)]));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary.ends_with(
                "20.00 GB/s bus bandwidth (80 % of the 25 GB/s of the network interfaces \
                 NCCL's sockets use)"
            ),
            "{}",
            o.summary
        );
    }

    #[test]
    fn slow_busbw_over_two_100gbe_warns_naming_the_node_and_the_rate() {
        let fast = sockets(nccl(0, 11.0), &[("eth0", Some(400.0))]);
        let slow = sockets(nccl(1, 11.0), TWO_100GBE);
        let o = evaluate(&fleet(vec![fast, slow]));
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(
            o.summary.ends_with(
                "11.00 GB/s bus bandwidth, below half of the 25 GB/s the network interfaces \
                 NCCL's sockets use on node 1 (n1) carry together (eth0 100 Gb/s, eth1 100 \
                 Gb/s; no RDMA port)"
            ),
            "{}",
            o.summary
        );
        assert!(o.hint.unwrap().contains("NCCL_SOCKET_IFNAME"));
        // gloo on CPU: reported only.
        let cpu = |r| sockets(with_world(reduced(r, 0.5), 2, 1, "gloo"), TWO_100GBE);
        assert_eq!(evaluate(&fleet(vec![cpu(0), cpu(1)])).status, Status::Pass);
    }

    #[test]
    fn a_socket_interface_of_unknown_speed_is_not_judged() {
        let node = |r| sockets(nccl(r, 1.0), &[("eth0", Some(100.0)), ("lo", None)]);
        let o = evaluate(&fleet(vec![node(0), node(1)]));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary.ends_with("1.00 GB/s bus bandwidth"),
            "{}",
            o.summary
        );
        // One node of unknown rate may be the slowest: no judgement at all.
        let known = sockets(nccl(1, 1.0), TWO_100GBE);
        let o = evaluate(&fleet(vec![node(0), known.clone()]));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        // A node that reported no links (nccl.env did not run) leaves the
        // others judged.
        let o = evaluate(&fleet(vec![nccl(0, 1.0), known]));
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(o.summary.contains("on node 1 (n1)"), "{}", o.summary);
        // --min-busbw stays the floor.
        let mut f = fleet(vec![node(0), node(1)]);
        f.min_busbw_gbps = Some(5.0);
        assert_eq!(evaluate(&f).status, Status::Fail);
    }

    #[test]
    fn link_rates_are_written_readably() {
        assert_eq!(gbits(100.0), "100 Gb/s");
        assert_eq!(gbits(2.5), "2.5 Gb/s");
        assert_eq!(gbytes(25.0), "25 GB/s");
        assert_eq!(gbytes(1.25), "1.25 GB/s");
    }
}

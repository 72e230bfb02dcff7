//! fleet.allreduce: one all-reduce across every node, verified and timed.

use super::{Fleet, FleetCheck, FleetNode};
use crate::domain::text;
use crate::Outcome;

fleet_check!(
    AllReduce,
    "fleet.allreduce",
    "All-reduce across the nodes",
    "Once every node has joined, the nodes run one all-reduce together through \
torch.distributed (one rank per node: GPU 0 with NCCL when torch sees a GPU, else the CPU \
with gloo; --ddp-backend and --ddp-device choose), check that every element holds the \
expected sum, and time it. Bus bandwidth is reported as nccl-tests defines it (bytes / time \
x 2(n-1)/n) and fails below --min-busbw when given.

Why it matters: this is the first thing DDP does between nodes. A firewall on NCCL's or \
gloo's ports, a wrong NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME, an InfiniBand port down or a \
misconfigured RDMA device makes it hang or fail here, in seconds, instead of in the job.

Fix: the error names the node; check the interfaces NCCL/gloo use (NCCL_SOCKET_IFNAME, \
GLOO_SOCKET_IFNAME, NCCL_IB_HCA), that the nodes reach each other on all ports (not only the \
master port), and run with NCCL_DEBUG=INFO for NCCL's own account."
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
        } else if !fleet.missing.is_empty() {
            "not run: not every node joined".to_string()
        } else {
            "not run: no node reported an all-reduce".to_string()
        });
    }
    let hint = "check that the nodes reach each other on every port, and the interfaces \
                NCCL/gloo use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_HCA); rerun \
                with NCCL_DEBUG=INFO";
    let mut broken: Vec<String> = Vec::new();
    for n in &fleet.nodes {
        match &n.allreduce {
            None => broken.push(format!("{}: no result (timed out?)", n.label())),
            Some(a) => match (&a.error, a.verified) {
                (Some(e), _) => broken.push(format!("{}: {e}", n.label())),
                (None, Some(true)) => {}
                (None, _) => broken.push(format!("{}: the sum was not verified", n.label())),
            },
        }
    }
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
        format!(": {busbw:.2} GB/s bus bandwidth")
    } else {
        String::new()
    };
    let out = match fleet.min_busbw_gbps {
        Some(min) if busbw < min => Outcome::fail(
            format!("{what}{bw}, below --min-busbw {min}"),
            "find the slow link: the nodes' NICs (ibstat, ethtool), NCCL_DEBUG=INFO for the \
             transport NCCL chose, NCCL_IB_HCA",
        ),
        _ => Outcome::pass(format!("{what}{bw}")),
    };
    if busbw.is_finite() {
        out.with_metric("busbw", busbw, "GB/s")
    } else {
        out
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
    fn not_run_is_a_skip_that_says_why() {
        let mut f = fleet(vec![node(0, "a")]);
        f.nnodes = 2;
        f.missing = vec![1];
        assert_eq!(evaluate(&f).summary, "not run: not every node joined");
        assert_eq!(evaluate(&fleet(vec![node(0, "a")])).status, Status::Skip);
    }
}

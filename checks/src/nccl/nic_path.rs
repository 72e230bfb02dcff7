//! `nccl.nic_path`: the all-reduce again with NCCL's peer-to-peer and
//! shared-memory transports off, so the traffic takes the network path it
//! takes between nodes; its bus bandwidth beside the NVLink/P2P figure.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::allreduce::{bandwidth_gbps, evaluate_failure, GIVE_UP_SHARE};
use crate::facts::nccl::NcclChoice;
use crate::probe::nccl::{self as probe, AllReduceFailure, AllReducePlan, AllReduceRun};
use crate::{Check, Context, Isolation, Outcome, Profile};

/// The message size: nccl.allreduce's standard size, large enough for a
/// bandwidth figure (nccl-tests reaches its plateau well below it).
pub const NIC_PATH_BYTES: u64 = 256 << 20;
/// Time for the one size (warm-up plus timed iterations), roughly.
const BUDGET: Duration = Duration::from_secs(5);
/// Start nothing new once this share of the timeout has passed.
const DEADLINE_SHARE: f64 = 0.6;

/// The variables that take NCCL off NVLink/PCIe P2P and shared memory
/// (NCCL environment variable reference: NCCL_P2P_DISABLE,
/// NCCL_SHM_DISABLE), leaving the network transport (IB/RoCE, a plugin or
/// sockets), as between nodes.
pub const NIC_PATH_ENV: [(&str, &str); 2] = [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")];

pub struct NicPath;

/// What `nccl.nic_path` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct NicPathFacts {
    pub run: Result<AllReduceRun, AllReduceFailure>,
    /// nccl.allreduce's bus bandwidth in this run (the NVLink/P2P path).
    pub p2p_busbw_gbps: Option<f64>,
}

impl Check for NicPath {
    fn id(&self) -> &'static str {
        "nccl.nic_path"
    }
    fn title(&self) -> &'static str {
        "NCCL all-reduce through the network path"
    }
    fn profile(&self) -> Profile {
        Profile::Full
    }
    fn needs(&self) -> &'static [&'static str] {
        &["nccl.allreduce"]
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn explain(&self) -> &'static str {
        "Runs the 256 MiB all-reduce of nccl.allreduce again with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1, so NCCL cannot use NVLink, PCIe peer-to-peer or shared memory between the GPUs and sends the traffic through its network transport (InfiniBand/RoCE, a network plugin, or TCP sockets), the way it travels between nodes. Every element of the result is checked, and the bus bandwidth is reported beside the NVLink/P2P figure of nccl.allreduce.\n\n\
         A multi-node DDP job's all-reduce is bound by this path, not by NVLink: a figure far below \
         the NICs' line rate here (a 400 Gb/s NDR port carries about 50 GB/s) means the job will be \
         network-bound before it leaves the node — a NIC on the wrong PCIe switch, no GPUDirect RDMA \
         (see fabric.gpudirect), NCCL on sockets (see fabric.net_plugin, fabric.rdma). Wrong results \
         or an NCCL error fail: the streams and the communicators' asynchronous error are polled \
         together, so a network or peer error is reported in NCCL's own words (ncclGetErrorString, \
         ncclGetLastError) and the communicators aborted rather than hanging to the timeout; \
         NCCL_DEBUG=INFO shows which transport (`NET/IB`, `NET/Socket`) it took. The bandwidth is \
         reported, not judged."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        if !crate::probe::cuda::libcuda_present() {
            return evaluate_failure(&AllReduceFailure::NoDriver);
        }
        let Some(nccl_lib) = nccl_lib(ctx) else {
            return Outcome::skip("no NCCL chosen in this run (nccl.library did not run)");
        };
        // Only this isolated child's environment: NCCL reads it at init.
        for (k, v) in NIC_PATH_ENV {
            std::env::set_var(k, v);
        }
        let timeout_s = if ctx.options.timeout_s > 0.0 {
            ctx.options.timeout_s
        } else {
            self.timeout().as_secs_f64()
        };
        let plan = AllReducePlan {
            nccl_lib,
            sizes: vec![NIC_PATH_BYTES],
            budget_per_size: BUDGET,
            deadline: Some(Instant::now() + Duration::from_secs_f64(timeout_s * DEADLINE_SHARE)),
            give_up: Some(Instant::now() + Duration::from_secs_f64(timeout_s * GIVE_UP_SHARE)),
        };
        evaluate(&NicPathFacts {
            run: probe::run_allreduce(&plan),
            p2p_busbw_gbps: ctx
                .earlier("nccl.allreduce")
                .and_then(|o| o.metric("busbw_gbps")),
        })
    }
}

fn nccl_lib(ctx: &Context) -> Option<PathBuf> {
    ctx.fact::<NcclChoice>()
        .map(|c| c.path)
        .or_else(|| ctx.options.nccl_lib.clone())
}

/// Judge the network-path all-reduce.
pub fn evaluate(f: &NicPathFacts) -> Outcome {
    let run = match &f.run {
        Ok(run) => run,
        Err(failure) => return evaluate_failure(failure),
    };
    let n = run.gpus.len() as u32;
    if n < 2 {
        return Outcome::skip("one GPU: there is no traffic between GPUs to send over the network");
    }
    let Some(r) = run.results.iter().rev().find(|r| r.iters > 0) else {
        return Outcome::skip(format!(
            "{} MiB does not fit in free GPU memory twice",
            NIC_PATH_BYTES >> 20
        ));
    };
    if r.wrong > 0 {
        return Outcome::fail(
            format!(
                "the all-reduce over the network path returned {} wrong elements",
                r.wrong
            ),
            "with P2P and shared memory off NCCL sends through its network transport: check \
             the NICs and their driver (fabric.rdma), and run with NCCL_DEBUG=WARN to see NCCL's \
             view",
        );
    }
    let (_, busbw) = bandwidth_gbps(r.bytes, r.time_us / 1e6, n);
    let beside = f
        .p2p_busbw_gbps
        .map(|p| format!(" (NVLink/P2P path: {p:.1} GB/s)"))
        .unwrap_or_default();
    Outcome::pass(format!(
        "busbw {busbw:.1} GB/s at {} MiB over {n} GPUs with NCCL_P2P_DISABLE=1 \
         NCCL_SHM_DISABLE=1{beside}, results verified",
        r.bytes >> 20
    ))
    .with_metric("nic_path_busbw_gbps", busbw, "GB/s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nccl::{GpuDesc, SizeResult};
    use crate::Status;

    fn run(gpus: u32, wrong: u64) -> AllReduceRun {
        AllReduceRun {
            gpus: (0..gpus)
                .map(|i| GpuDesc {
                    ordinal: i,
                    name: "NVIDIA H100 80GB HBM3".into(),
                    uuid: None,
                    free_bytes: None,
                    total_bytes: None,
                })
                .collect(),
            nccl_version: None,
            tuning: Vec::new(),
            repeats: Vec::new(),
            results: vec![SizeResult {
                bytes: NIC_PATH_BYTES,
                count: NIC_PATH_BYTES / 4,
                warmup_iters: 5,
                iters: 20,
                // 256 MiB in 10 ms: algbw 26.8, busbw 46.98 GB/s over 8.
                time_us: 10_000.0,
                wrong,
                wrong_per_rank: vec![wrong],
                first_wrong: None,
            }],
            skipped_for_memory: vec![],
            skipped_for_time: vec![],
        }
    }

    #[test]
    fn the_network_path_figure_is_reported_beside_the_p2p_one() {
        let o = evaluate(&NicPathFacts {
            run: Ok(run(8, 0)),
            p2p_busbw_gbps: Some(452.0),
        });
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "busbw 47.0 GB/s at 256 MiB over 8 GPUs with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
             (NVLink/P2P path: 452.0 GB/s), results verified"
        );
        assert!(o.metric("nic_path_busbw_gbps").is_some());
    }

    #[test]
    fn wrong_results_fail_and_one_gpu_skips() {
        let o = evaluate(&NicPathFacts {
            run: Ok(run(2, 3)),
            p2p_busbw_gbps: None,
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("3 wrong elements"), "{}", o.summary);
        let o = evaluate(&NicPathFacts {
            run: Ok(run(1, 0)),
            p2p_busbw_gbps: None,
        });
        assert_eq!(o.status, Status::Skip);
        let o = evaluate(&NicPathFacts {
            run: Err(AllReduceFailure::NoDriver),
            p2p_busbw_gbps: None,
        });
        assert_ne!(o.status, Status::Pass);
    }
}

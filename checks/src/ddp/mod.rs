//! The ddp group: a real DistributedDataParallel training run through the
//! user's own Python, torch and torchrun, measuring whether adding GPUs
//! actually makes training faster and whether DDP really keeps the ranks in
//! sync.
//!
//! One check, `ddp.benchmark` (benchmark.rs); what it runs comes from the
//! options (plan.rs), a run that did not finish is judged in failure.rs, and
//! the launch itself (torchrun's command line, running it, reading the
//! payload's records) is `probe::ddp`.

use std::time::Duration;

use crate::domain::text::plural;

pub mod benchmark;
pub mod failure;
pub mod plan;

pub use benchmark::Benchmark;

/// Default time limit of the whole check: torch import and rendezvous take
/// seconds, a healthy 8-GPU node finishes well under a minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

/// What to do when the benchmark hangs (also the runner's timeout hint).
const HANG_HINT: &str = "a DDP rank stopped making progress: rerun with NCCL_DEBUG=INFO and \
     TORCH_DISTRIBUTED_DEBUG=DETAIL to see the collective it is stuck in, look for Xid errors \
     (`dmesg`) and a GPU stuck at 100 % (`nvidia-smi`), try NCCL_P2P_DISABLE=1 or \
     NCCL_SHM_DISABLE=1 to isolate a broken transport; a busy machine may only need more time \
     (--timeout SECS), or leave the benchmark out with --skip ddp.benchmark";

/// "ranks 0, 2" / "rank 1".
fn rank_list(ranks: &[u32]) -> String {
    let names: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    format!("rank{} {}", plural(ranks.len()), names.join(", "))
}

//! The nccl checks: is there an NCCL a job will load, is NCCL configured so it
//! will not silently misbehave, and does a real all-reduce over every visible
//! GPU return the right numbers at the bandwidth this topology should reach.
//!
//! One file (or folder) per check: `library`, `env`, `allreduce`, `nic_path`. Each
//! probes through `probe::nccl` and hands plain facts to a pure `evaluate_*`
//! function next to its unit tests, which drive every verdict through it.

pub mod allreduce;
pub mod env;
pub mod library;
pub mod nic_path;

pub use allreduce::AllReduce;
pub use env::Env;
pub use library::Library;
pub use nic_path::NicPath;

/// The install hint when no NCCL is found (NCCL's install guide: the PyPI
/// wheels nvidia-nccl-cu12 / -cu13 that torch depends on, or the libnccl2
/// package from NVIDIA's CUDA apt repository).
const INSTALL_HINT: &str = "install NCCL where the job runs: `pip install nvidia-nccl-cu12` \
     (nvidia-nccl-cu13 for CUDA 13 builds of torch) in the training environment, or \
     `apt install libnccl2` from NVIDIA's CUDA repository; or point gpucheck at a copy with \
     --nccl-lib PATH (GPUCHECK_NCCL_LIB)";

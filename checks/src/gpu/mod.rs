//! The gpu checks: what NVML says about the driver and every GPU, judged for a
//! multi-GPU DDP job. Each check asks the NVML probe for plain facts and hands
//! them to a pure `evaluate_*` function; all of them are NVML queries only, so
//! they run in-process in the quick profile.
//!
//! Per-GPU problems become findings; a check's verdict is its worst finding,
//! its summary names the GPUs, and its hint says what to run on which GPU
//! (hints that apply to several GPUs are merged into one with the list).
//!
//! One file per check, each with its thresholds, probe call, pure
//! `evaluate_*` function and unit tests; `common` holds what they share (the
//! NVML budget, unreadable readings, NVML failures, GPUs gpu.count found
//! lost) and `job` which GPUs CUDA_VISIBLE_DEVICES gives a job.
//!
//! gpu.driver publishes [`crate::facts::nvml::NvmlDriver`] and gpu.count
//! [`crate::facts::nvml::NvmlInventory`]. The per-GPU checks need only
//! gpu.driver: a GPU fallen off the bus is gpu.count's failure, and they
//! judge the GPUs that answer and mark the lost one.

mod burn;
mod common;
mod compute;
mod count;
mod driver;
mod ecc;
mod job;
mod memory;
mod mode;
mod nvlink_errors;
mod p2p_bandwidth;
mod pcie;
mod processes;
mod throttle;
mod topology;
mod under_load;

pub use burn::{evaluate as evaluate_burn, Burn, BurnFacts, Round, RoundGpu, MAX_DURATION};
pub use common::nvml_failure_outcome;
pub use compute::{evaluate as evaluate_compute, Compute, ComputeFacts, ComputeGpu};
pub use count::{evaluate_count, Count};
pub use driver::{evaluate_driver, judge_driver, Driver};
pub use ecc::{
    evaluate_ecc, Ecc, EccThresholds, MAX_RETIRED_PAGES, MAX_UNCORRECTABLE_ROW_REMAPS,
    MAX_VOLATILE_UNCORRECTED_ECC, WARN_RETIRED_PAGES, WARN_VOLATILE_CORRECTED_ECC,
};
pub use job::{job_gpus, job_gpus_in_order, JobGpus};
pub use memory::{evaluate as evaluate_memory, Memory, MemoryFacts, MemoryGpu};
pub use mode::{evaluate_mode, Mode};
pub use p2p_bandwidth::{
    evaluate as evaluate_p2p_bandwidth, P2pBandwidth, P2pFacts, PairFigure, PairLink,
};
pub use pcie::{evaluate_pcie, Pcie, PcieThresholds, BUSY_UTILIZATION_PCT};
pub use processes::{evaluate_processes, Processes};
pub use throttle::{evaluate_throttle, Throttle};
pub use topology::{evaluate_topology, evaluate_topology_beside_lost, Topology};

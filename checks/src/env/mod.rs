//! The env checks: environment variables that silently change what a DDP job
//! sees — which GPUs CUDA enumerates (CUDA_VISIBLE_DEVICES and friends,
//! [`cuda_visible_devices`]) and the rank layout torchrun hands each process
//! (RANK, WORLD_SIZE, ..., [`torchrun`]).
//!
//! One file per check, with its thresholds, its pure evaluate function and
//! its unit tests; [`device_text`] is how both show devices. The rules for
//! reading CUDA_VISIBLE_DEVICES and mapping it onto NVML's GPUs are shared
//! knowledge in [`crate::domain::visible_devices`].

pub mod cuda_visible_devices;
mod device_text;
pub mod torchrun;

pub use cuda_visible_devices::{evaluate_visibility, CudaVisibleDevices, VisibilityFacts};
pub use torchrun::{evaluate_launch, LaunchFacts, Torchrun};

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

use std::path::PathBuf;

use crate::domain::compat::{install_torch_command, wheel_for_driver, CudaVersion};
use crate::facts::cuda::known_driver;
use crate::facts::torch::{TorchInfo, TorchMissing};
use crate::Context;

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

/// The other ways to an NCCL, after the wheel.
const INSTALL_ELSE: &str = "or `apt install libnccl2` from NVIDIA's CUDA repository; or point \
     gpucheck at a copy with --nccl-lib PATH (GPUCHECK_NCCL_LIB)";

/// What this run knows about the wheel that would bring NCCL into the
/// training Python, from the facts earlier checks published.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NcclWheel {
    /// torch.import found no torch in this Python: torch's CUDA wheels
    /// bring NCCL (nvidia-nccl-cu*), so installing torch is the fix.
    pub torch_missing: Option<PathBuf>,
    /// The CUDA version the installed torch was built for.
    pub torch_cuda: Option<CudaVersion>,
    /// The newest CUDA version the driver supports.
    pub driver_cuda: Option<CudaVersion>,
}

impl NcclWheel {
    /// What torch.import and the driver checks found in this run (the
    /// driver's CUDA version as torch.import's install hint reads it, which
    /// may ask NVML).
    pub fn for_run(ctx: &Context) -> Self {
        NcclWheel {
            driver_cuda: known_driver(ctx).0.map(|(cuda, _)| cuda),
            ..Self::of_torch(ctx)
        }
    }

    /// What torch.import found in this run: no torch, or torch's CUDA build.
    pub fn of_torch(ctx: &Context) -> Self {
        NcclWheel {
            torch_missing: ctx.fact::<TorchMissing>().map(|m| m.python),
            torch_cuda: ctx
                .fact::<TorchInfo>()
                .as_ref()
                .and_then(TorchInfo::cuda_version),
            driver_cuda: None,
        }
    }

    /// How to install an NCCL a job loads: torch itself when the training
    /// Python has none (the command torch.import gives), the NCCL wheel of
    /// torch's CUDA major, or of the wheels this driver runs; the generic
    /// advice when nothing is known.
    pub fn install_hint(&self) -> String {
        if let Some(python) = &self.torch_missing {
            return format!(
                "the training Python has no torch, and torch's CUDA wheels bring NCCL \
                 (nvidia-nccl-cu*): install it with {}; {INSTALL_ELSE}",
                install_torch_command(python, self.driver_cuda)
            );
        }
        let (major, why) = match (self.torch_cuda, self.driver_cuda) {
            (Some(t), _) => (t.major, format!("this torch is a CUDA {t} build")),
            (None, Some(d)) => match wheel_for_driver(d) {
                Some(w) => (
                    w.cuda.major,
                    format!(
                        "for CUDA {} builds of torch, which this CUDA {d} driver runs",
                        w.cuda.major
                    ),
                ),
                None => return INSTALL_HINT.to_string(),
            },
            (None, None) => return INSTALL_HINT.to_string(),
        };
        format!(
            "install NCCL where the job runs: `pip install nvidia-nccl-cu{major}` ({why}) in the \
             training environment, {INSTALL_ELSE}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_torch_means_installing_torch_for_the_driver_not_a_cu12_wheel() {
        let mut wheel = NcclWheel {
            torch_missing: Some(PathBuf::from("/opt/py/bin/python3")),
            torch_cuda: None,
            driver_cuda: None,
        };
        let hint = wheel.install_hint();
        assert!(
            hint.starts_with(
                "the training Python has no torch, and torch's CUDA wheels bring NCCL \
                 (nvidia-nccl-cu*): install it with `/opt/py/bin/python3 -m pip install torch`;"
            ),
            "{hint}"
        );
        assert!(!hint.contains("cu12"), "{hint}");
        assert!(hint.contains("apt install libnccl2"), "{hint}");
        // With the driver's CUDA version known: torch.import's very command.
        wheel.driver_cuda = Some(CudaVersion::new(12, 8));
        let hint = wheel.install_hint();
        assert!(
            hint.contains(&install_torch_command(
                std::path::Path::new("/opt/py/bin/python3"),
                Some(CudaVersion::new(12, 8))
            )),
            "{hint}"
        );
        assert!(
            hint.contains("--index-url https://download.pytorch.org/whl/cu128"),
            "{hint}"
        );
    }

    #[test]
    fn the_nccl_wheel_follows_torch_else_the_driver() {
        let cu13_torch = NcclWheel {
            torch_cuda: Some(CudaVersion::new(13, 2)),
            driver_cuda: Some(CudaVersion::new(12, 8)),
            ..NcclWheel::default()
        };
        assert!(
            cu13_torch.install_hint().starts_with(
                "install NCCL where the job runs: `pip install nvidia-nccl-cu13` (this torch is \
                 a CUDA 13.2 build)"
            ),
            "{}",
            cu13_torch.install_hint()
        );
        let cu12_driver = NcclWheel {
            driver_cuda: Some(CudaVersion::new(12, 8)),
            ..NcclWheel::default()
        };
        assert!(
            cu12_driver
                .install_hint()
                .contains("`pip install nvidia-nccl-cu12` (for CUDA 12 builds of torch, which this CUDA 12.8 driver runs)"),
            "{}",
            cu12_driver.install_hint()
        );
        assert_eq!(NcclWheel::default().install_hint(), INSTALL_HINT);
    }
}

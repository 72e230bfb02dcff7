//! The torch checks: the answer to "my torch says CUDA isn't available" and
//! "no kernel image is available for execution on the device" before a job
//! starts.
//!
//! `torch.import` runs the introspection payload with the Python that will
//! train and publishes what it found as [`TorchInfo`] (with human-readable
//! facts for the reports); `torch.cuda`, `torch.arch` and `torch.nccl` read
//! that fact (or run the payload themselves when torch.import was not
//! selected) and judge it against NVML and the CUDA driver.

use std::time::Duration;

use crate::facts::cuda::known_driver;
use crate::facts::nvml::gpus_for_run;
use crate::probe::nvml::{GpuInfo, NvmlFailure};
use crate::probe::python::PythonSource;
use crate::probe::torch::{probe_torch, TorchProbeError};
use crate::{Context, Outcome};

pub use crate::facts::torch::{TorchDevice, TorchInfo};

pub mod arch;
pub mod cuda;
pub mod import;
pub mod nccl;

pub use arch::TorchArch;
pub use cuda::TorchCuda;
pub use import::TorchImport;
pub use nccl::TorchNccl;

/// How long the payload may take inside the check's own timeout: a little
/// less, so the payload is stopped before the runner gives up on the check
/// and the verdict can name the stage torch hung in.
fn payload_budget(timeout_s: f64) -> Duration {
    let margin = (timeout_s * 0.25).min(0.3);
    Duration::from_secs_f64((timeout_s - margin).max(0.1))
}

/// Run the payload for a check, within that check's timeout. A timeout is
/// reported against the check's timeout, as the runner would report it.
fn run_for(ctx: &Context) -> (Option<PythonSource>, Result<TorchInfo, TorchProbeError>) {
    let (choice, result) = probe_torch(
        ctx.options.python.as_deref(),
        payload_budget(ctx.options.timeout_s),
    );
    let result = result.map_err(|e| match e {
        TorchProbeError::Timeout {
            python,
            stage,
            stderr_tail,
            ..
        } => TorchProbeError::Timeout {
            python,
            secs: ctx.options.timeout_s,
            stage,
            stderr_tail,
        },
        other => other,
    });
    (choice.map(|c| c.source), result)
}

/// torch.import's result for a dependent check, or the payload run here
/// when torch.import was not selected. Err is the dependent's verdict.
fn torch_info(ctx: &Context) -> Result<TorchInfo, Box<Outcome>> {
    if let Some(info) = ctx.fact::<TorchInfo>() {
        return Ok(info);
    }
    if ctx.earlier("torch.import").is_some() {
        return Err(Box::new(Outcome::error(
            "torch.import ran but its facts could not be read back",
        )));
    }
    run_for(ctx)
        .1
        .map_err(|e| Box::new(failure_verdict(ctx, &e)))
}

/// The verdict when the payload gave no TorchInfo; a missing torch is
/// judged against the CUDA version the driver supports, when known.
fn failure_verdict(ctx: &Context, e: &TorchProbeError) -> Outcome {
    let driver_cuda = match e {
        TorchProbeError::NotInstalled { .. } => known_driver(ctx).0.map(|(cuda, _)| cuda),
        _ => None,
    };
    import::probe_failure(e, driver_cuda)
}

/// Timeout of the dependent torch checks: instant with torch.import's
/// facts, a payload run (an `import torch`) without them.
const DEPENDENT_TIMEOUT: Duration = Duration::from_secs(60);

/// What NVML says about the GPUs, for the torch checks.
#[derive(Debug, Clone, PartialEq)]
pub enum NvmlView {
    Gpus(Vec<GpuInfo>),
    /// NVML could not be used: why, and whether that means there is no
    /// NVIDIA driver here (library missing, driver not loaded) rather than
    /// a driver that does not answer.
    Unavailable {
        why: String,
        no_driver: bool,
    },
}

impl NvmlView {
    /// NVML's GPUs for this run (see [`gpus_for_run`]).
    pub fn for_run(ctx: &Context) -> NvmlView {
        match gpus_for_run(ctx) {
            Ok(g) => NvmlView::Gpus(g),
            Err(e) => {
                let (why, no_driver) = match e {
                    NvmlFailure::LibraryNotFound { .. } => {
                        ("NVML (libnvidia-ml.so.1) not found".to_string(), true)
                    }
                    NvmlFailure::DriverNotLoaded => {
                        ("the NVIDIA driver is not loaded".to_string(), true)
                    }
                    NvmlFailure::LibRmVersionMismatch => (
                        "NVML and the kernel driver versions differ".to_string(),
                        false,
                    ),
                    NvmlFailure::NoPermission => ("no permission to use NVML".to_string(), false),
                    NvmlFailure::Other { detail } => (detail, false),
                };
                NvmlView::Unavailable { why, no_driver }
            }
        }
    }

    fn gpu_count(&self) -> u32 {
        match self {
            NvmlView::Gpus(g) => g.len() as u32,
            NvmlView::Unavailable { .. } => 0,
        }
    }
}

/// The first sentence of torch's message ("RuntimeError: Found no NVIDIA
/// driver on your system."), for one-line summaries.
pub fn first_sentence(s: &str) -> &str {
    match s.find(". ") {
        Some(i) => &s[..=i],
        None => s,
    }
}

/// What the unit tests of the torch checks share: real torch builds and
/// GPUs.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::PathBuf;

    use super::TorchInfo;
    use crate::domain::compat::WHEELS;
    use crate::probe::nvml::GpuInfo;

    pub fn archs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    pub fn wheel(index: &str) -> Vec<String> {
        archs(WHEELS.iter().find(|w| w.index == index).unwrap().archs)
    }

    pub fn cu132_cpu_box() -> TorchInfo {
        TorchInfo {
            python: PathBuf::from("/venv/bin/python"),
            python_version: Some("3.11.9".to_string()),
            torch_version: "2.15.0+cu132".to_string(),
            torch_path: Some("/venv/lib/python3.11/site-packages/torch".to_string()),
            cuda_build: Some("13.2".to_string()),
            cuda_available: false,
            unavailable_reason: Some(
                "RuntimeError: Found no NVIDIA driver on your system.".to_string(),
            ),
            device_count: 0,
            devices: vec![],
            arch_list: wheel("cu132"),
            cudnn_version: Some("9.26.0".to_string()),
            nccl_available: Some(true),
            nccl_version: Some("2.30.7".to_string()),
            import_time_s: Some(3.1),
            loaded_libraries: vec!["/venv/nvidia/cu13/lib/libcudart.so.13".to_string()],
            query_errors: vec![],
        }
    }

    pub fn gpu(i: u32, name: &str, cc: (u32, u32)) -> GpuInfo {
        GpuInfo {
            index: i,
            name: name.to_string(),
            uuid: format!("GPU-{i}"),
            pci_bus_id: String::new(),
            memory_total_mib: 81920,
            compute_capability: Some(cc),
            mig_enabled: Some(false),
            mig_uuids: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every file of the group, as compiled.
    const SOURCES: &[(&str, &str)] = &[
        ("mod.rs", include_str!("mod.rs")),
        ("import.rs", include_str!("import.rs")),
        ("cuda.rs", include_str!("cuda.rs")),
        ("arch.rs", include_str!("arch.rs")),
        ("nccl.rs", include_str!("nccl.rs")),
    ];

    #[test]
    fn the_torch_group_imports_no_other_group() {
        for group in ["env", "gpu", "nccl", "net", "host", "ddp", "cuda"] {
            for (file, src) in SOURCES {
                for path in [format!("crate::{group}::"), format!("crate::{group};")] {
                    assert!(!src.contains(&path), "torch/{file} uses {path}");
                }
            }
        }
    }
}

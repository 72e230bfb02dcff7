//! What the CUDA driver said in this run, published by `cuda.driver`
//! ([`DriverCuda`]) and read by cuda.runtime and torch.cuda, and
//! [`known_driver`]: the driver as this run knows it without loading libcuda.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::domain::compat::CudaVersion;
use crate::facts::nvml::driver_for_run;
use crate::{Context, Fact, Outcome};

/// cuda.driver's findings about libcuda.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriverCuda {
    /// cuDriverGetVersion: the newest CUDA this driver supports.
    pub cuda_driver_version: Option<CudaVersion>,
    /// How many devices cuDeviceGetCount gave, when cuInit worked.
    pub device_count: Option<u32>,
    /// The libcuda file the probe mapped.
    pub libcuda: Option<PathBuf>,
    /// Why the driver is not usable (cuda.driver failed): its verdict and
    /// fix, the likeliest reason torch sees no GPU.
    pub failure: Option<DriverFailure>,
}

impl Fact for DriverCuda {
    const KEY: &'static str = "cuda_driver";
}

/// A failing cuda.driver's verdict, carried to the checks that explain
/// their own failure by it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriverFailure {
    pub summary: String,
    pub hint: Option<String>,
}

impl DriverCuda {
    /// The devices CUDA enumerates, when cuda.driver worked.
    pub fn working_device_count(&self) -> Option<u32> {
        self.failure
            .is_none()
            .then_some(self.device_count)
            .flatten()
    }
}

/// What cuda.driver found in this run: its published fact, or, when the
/// runner decided its outcome (a timeout, a crash), that failure.
pub fn driver_cuda_for_run(ctx: &Context) -> Option<DriverCuda> {
    if let Some(d) = ctx.fact::<DriverCuda>() {
        return Some(d);
    }
    let o: &Outcome = ctx.earlier("cuda.driver")?;
    o.status.is_failure().then(|| DriverCuda {
        cuda_driver_version: None,
        device_count: None,
        libcuda: None,
        failure: Some(DriverFailure {
            summary: o.summary.clone(),
            hint: o.hint.clone(),
        }),
    })
}

/// Where a driver's CUDA version came from: libcuda's own answer.
pub const FROM_LIBCUDA: &str = "cuDriverGetVersion";
/// Where a driver's CUDA version came from: NVML's view of the system driver.
pub const FROM_NVML: &str = "NVML";

/// The driver as this run already knows it, without loading libcuda: the
/// CUDA version it supports (from cuda.driver's cuDriverGetVersion, else
/// NVML) with where that came from, and its version ("570.86.15", from
/// NVML or /proc/driver/nvidia/version). Shared by cuda.runtime and
/// torch.cuda.
pub fn known_driver(ctx: &Context) -> (Option<(CudaVersion, &'static str)>, Option<String>) {
    let nvml_driver = driver_for_run(ctx).ok();
    let version = nvml_driver
        .as_ref()
        .map(|d| d.driver_version.clone())
        .or_else(crate::probe::cuda::kernel_driver_version);
    let cuda = ctx
        .fact::<DriverCuda>()
        .and_then(|d| d.cuda_driver_version)
        .map(|c| (c, FROM_LIBCUDA))
        .or_else(|| {
            nvml_driver
                .as_ref()
                .and_then(|d| d.cuda_driver_version)
                .and_then(CudaVersion::from_encoded)
                .map(|c| (c, FROM_NVML))
        });
    (cuda, version)
}

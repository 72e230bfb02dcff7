//! Probe: everything gpucheck asks NVML (libnvidia-ml.so.1, through
//! nvml-wrapper). Returns plain structs; no NVML type leaves this file.
//!
//! STUB: the public surface below is the contract other checks (cuda.*, torch.*,
//! nccl.*, env.cuda_visible_devices) build on; the NVML work fills it in.

use std::path::Path;

/// Driver-level facts.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverInfo {
    /// e.g. "570.86.15"
    pub driver_version: String,
    /// e.g. "12.570.86.15"
    pub nvml_version: String,
    /// The CUDA version the driver supports, as CUDA encodes it (12080 = 12.8).
    pub cuda_driver_version: Option<i32>,
}

/// One physical GPU as NVML sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    /// "GPU-xxxxxxxx-...."
    pub uuid: String,
    /// "00000000:18:00.0"
    pub pci_bus_id: String,
    pub memory_total_mib: u64,
    /// (major, minor), e.g. (9, 0) for H100.
    pub compute_capability: Option<(u32, u32)>,
    /// None when MIG is not supported.
    pub mig_enabled: Option<bool>,
    /// UUIDs of the MIG instances ("MIG-...") when MIG is enabled.
    pub mig_uuids: Vec<String>,
}

/// Why NVML could not be used. Each has its own verdict and hint.
#[derive(Debug, Clone, PartialEq)]
pub enum NvmlFailure {
    /// libnvidia-ml.so.1 could not be loaded (no driver, or a container started
    /// without the NVIDIA runtime).
    LibraryNotFound {
        detail: String,
    },
    DriverNotLoaded,
    LibRmVersionMismatch,
    NoPermission,
    Other {
        detail: String,
    },
}

/// Driver, NVML and supported CUDA versions. `lib` overrides the library path.
pub fn driver(lib: Option<&Path>) -> Result<DriverInfo, NvmlFailure> {
    let _ = lib;
    Err(NvmlFailure::LibraryNotFound {
        detail: "NVML probe not implemented yet".to_string(),
    })
}

/// Every GPU NVML sees, in NVML index order.
pub fn gpus(lib: Option<&Path>) -> Result<Vec<GpuInfo>, NvmlFailure> {
    let _ = lib;
    Err(NvmlFailure::LibraryNotFound {
        detail: "NVML probe not implemented yet".to_string(),
    })
}

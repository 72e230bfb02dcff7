//! What the machine is, as the probes find it and `domain/` reasons about
//! it: the types both use, so `domain/` never imports `probe/`
//! (`probe::nvml` re-exports them).

/// One physical GPU as NVML sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    /// "GPU-xxxxxxxx-...."
    pub uuid: String,
    /// "00000000:18:00.0"
    pub pci_bus_id: String,
    /// 0 when NVML could not say.
    pub memory_total_mib: u64,
    /// (major, minor), e.g. (9, 0) for H100.
    pub compute_capability: Option<(u32, u32)>,
    /// None when MIG is not supported.
    pub mig_enabled: Option<bool>,
    /// UUIDs of the MIG instances ("MIG-...") when MIG is enabled.
    pub mig_uuids: Vec<String>,
}

/// Why one query on one GPU has no answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Unavailable {
    /// NVML_ERROR_NOT_SUPPORTED, or the function is missing in this driver:
    /// shown as "n/a", never a failure.
    NotSupported,
    /// NVML_ERROR_GPU_IS_LOST: the GPU has fallen off the bus.
    GpuLost,
    /// Any other NVML error, as NVML words it.
    Failed(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::NotSupported => f.write_str("n/a"),
            Unavailable::GpuLost => f.write_str("GPU is lost (fallen off the bus)"),
            Unavailable::Failed(e) => write!(f, "NVML error: {e}"),
        }
    }
}

/// The answer to one query on one GPU.
pub type Reading<T> = Result<T, Unavailable>;

/// A GPU NVML counts but could not describe (its handle or identity failed).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuError {
    pub index: u32,
    pub error: Unavailable,
}

/// NVML's clock event reason bits (nvml.h, nvmlClocksEventReason*).
pub mod reason {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
    pub const DISPLAY_CLOCK_SETTING: u64 = 0x100;
}

/// One reading of a GPU while it is under load: what holds its clocks
/// down, and how much device memory is free (the memory test sizes from
/// it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoadReading {
    pub sm_clock_mhz: Reading<u32>,
    /// nvmlDeviceGetPowerUsage, milliwatts.
    pub power_mw: Reading<u32>,
    /// nvmlDeviceGetEnforcedPowerLimit, milliwatts.
    pub power_limit_mw: Reading<u32>,
    pub temperature_c: Reading<u32>,
    /// Clock event (throttle) reason bits, see [`reason`].
    pub throttle_reasons: Reading<u64>,
    pub memory_free_bytes: Reading<u64>,
}

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
    /// An answer that says the GPU or its driver is in a bad state: the
    /// machine's fault, not a question gpucheck could not ask.
    Faulted(GpuFault),
    /// Any other NVML error, as NVML words it: gpucheck could not ask
    /// (no permission, blocked by the OS, a bad argument, ...).
    Failed(String),
}

impl Unavailable {
    /// The GPU or its driver is at fault (lost, or another [`GpuFault`]).
    pub fn is_machine_fault(&self) -> bool {
        matches!(self, Unavailable::GpuLost | Unavailable::Faulted(_))
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::NotSupported => f.write_str("n/a"),
            Unavailable::GpuLost => f.write_str("GPU is lost (fallen off the bus)"),
            Unavailable::Faulted(fault) => fault.fmt(f),
            Unavailable::Failed(e) => write!(f, "NVML error: {e}"),
        }
    }
}

/// NVML return codes that report a fault of the GPU or of the driver
/// holding it (nvml.h, `nvmlReturn_t`), apart from GPU_IS_LOST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GpuFault {
    /// NVML_ERROR_UNKNOWN, "an internal driver error occurred": what
    /// `nvidia-smi` prints as "Unknown Error" for every field of a GPU the
    /// driver has wedged on.
    InternalError,
    /// NVML_ERROR_RESET_REQUIRED: the GPU needs a reset before it can be
    /// used again.
    ResetRequired,
    /// NVML_ERROR_IRQ_ISSUE: the kernel driver detected an interrupt
    /// problem with the GPU.
    IrqIssue,
    /// NVML_ERROR_CORRUPTED_INFOROM: the GPU's infoROM is corrupted.
    CorruptedInfoRom,
    /// NVML_ERROR_INSUFFICIENT_POWER: the GPU's external power cables are
    /// not properly attached.
    InsufficientPower,
}

impl std::fmt::Display for GpuFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GpuFault::InternalError => {
                "Unknown Error (NVML_ERROR_UNKNOWN: an internal driver error)"
            }
            GpuFault::ResetRequired => "the GPU requires a reset (NVML_ERROR_RESET_REQUIRED)",
            GpuFault::IrqIssue => {
                "the driver detected an interrupt problem with the GPU (NVML_ERROR_IRQ_ISSUE)"
            }
            GpuFault::CorruptedInfoRom => "the infoROM is corrupted (NVML_ERROR_CORRUPTED_INFOROM)",
            GpuFault::InsufficientPower => {
                "external power cables not properly attached (NVML_ERROR_INSUFFICIENT_POWER)"
            }
        })
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

/// A GPU's multi-node NVLink fabric registration as NVML reports it, raw:
/// decoding and judging live in `domain::nvlink_fabric`. Read with
/// nvmlDeviceGetGpuFabricInfoV (struct v3, else v2) or, on drivers without
/// it, nvmlDeviceGetGpuFabricInfo (v1).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FabricInfo {
    /// The struct version that answered: 3 (healthSummary, nvml.h 13.0),
    /// 2 (healthMask, nvml.h 12.4) or 1 (nvml.h 12.0).
    pub struct_version: u8,
    /// nvmlGpuFabricState_t: 1 not started, 2 in progress, 3 completed
    /// (0, not supported, is answered as NOT_SUPPORTED instead).
    pub state: u8,
    /// nvmlReturn_t of the registration; meaningful once completed.
    pub status: i32,
    pub clique_id: u32,
    /// 32 hex digits; all zeros when the GPU is in no multi-node fabric.
    pub cluster_uuid: String,
    /// NVML_GPU_FABRIC_HEALTH_MASK_* (v2 and v3).
    pub health_mask: Option<u32>,
    /// NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3).
    pub health_summary: Option<u8>,
}

/// What a node shows of IMEX, the service that lets GPUs of one NVLink
/// domain import each other's memory across nodes (NVIDIA's IMEX guide).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImexFacts {
    /// The `nvidia-caps-imex-channels` major in /proc/devices (the driver
    /// registers it when it supports IMEX channels, R550 and later).
    pub channels_major: Option<u32>,
    /// The N of each /dev/nvidia-caps-imex-channels/channelN present.
    pub channels: Vec<u32>,
    /// NVIDIA_IMEX_CHANNELS, as the container runtime reads it.
    pub channels_env: Option<String>,
    /// /etc/nvidia-imex/config.cfg, when present.
    pub config: Option<ImexConfig>,
    /// `nvidia-imex-ctl -q`: the local daemon's state.
    pub daemon: CommandAnswer,
    /// `nvidia-imex-ctl -N -j`: the domain's state.
    pub domain: CommandAnswer,
    /// The host's nvidia-imex.service is enabled (a `*.wants/` link under
    /// /etc/systemd/system).
    pub host_service_enabled: bool,
    /// The nvidia-imex processes /proc shows (all of them only from the
    /// host's PID namespace).
    #[serde(default)]
    pub daemons: Vec<ImexDaemon>,
}

/// One running nvidia-imex.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImexDaemon {
    pub pid: u32,
    /// Its cgroup is a Kubernetes pod's (`kubepods`): a DRA driver's
    /// ComputeDomain daemon, not the host's service.
    pub in_pod: bool,
}

/// /etc/nvidia-imex/config.cfg's settings gpucheck reads, and the nodes
/// file it names.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImexConfig {
    /// IMEX_NODE_CONFIG_FILE (default /etc/nvidia-imex/nodes_config.cfg).
    pub nodes_file: String,
    /// The nodes file's addresses; `None` when it cannot be read.
    pub nodes: Option<Vec<String>>,
    /// IMEX_CMD_ENABLED: `nvidia-imex-ctl` asks the daemon through it.
    pub cmd_enabled: Option<bool>,
}

/// What one bounded run of a tool gave.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum CommandAnswer {
    /// Not on PATH.
    #[default]
    NotInstalled,
    /// Exited 0 with this output.
    Output(String),
    /// Exited otherwise, with this (stderr, else stdout) text.
    Failed(String),
    /// Did not answer within its time.
    TimedOut(f64),
}

//! Probe: everything gpucheck asks NVML (libnvidia-ml.so.1, through
//! nvml-wrapper). Returns plain structs; no NVML type leaves this file.
//!
//! NVML is loaded and initialised once per process and shared, as the
//! `bottom` codebase does: the first caller's result (a working `Nvml` or the
//! reason it failed) is cached in a `OnceLock`. nvml-wrapper resolves every
//! symbol lazily, so a function an old driver lacks shows up as "not
//! supported" on the query that needs it, never as a load failure.
//!
//! NVML calls can hang inside the driver (a GPU fallen off the bus, a wedged
//! kernel module). The runner abandons a check's thread at its timeout; this
//! module remembers which NVML call is still in flight, so the timeout can
//! name it ([`hung_call`]) and later probes fail at once instead of queueing
//! behind a driver that is not answering.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

pub use crate::machine::{
    reason, FabricInfo, GpuError, GpuFault, GpuInfo, LoadReading, Reading, Unavailable,
};

use nvml_wrapper::enum_wrappers::device::{
    ComputeMode as NvmlComputeMode, EccCounter, MemoryError, P2pCapabilitiesIndex,
    P2pStatus as NvmlP2pStatus, TopologyLevel,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};

/// The soname the driver installs and the NVIDIA Container Toolkit mounts.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// Driver-level facts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DriverInfo {
    /// e.g. "570.86.15"
    pub driver_version: String,
    /// e.g. "12.570.86.15"
    pub nvml_version: String,
    /// The CUDA version the driver supports, as CUDA encodes it (12080 = 12.8).
    pub cuda_driver_version: Option<i32>,
}

/// Why NVML could not be used. Each has its own verdict and hint.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum NvmlFailure {
    /// libnvidia-ml.so.1 could not be loaded (no driver, or a container started
    /// without the NVIDIA runtime).
    LibraryNotFound {
        detail: String,
    },
    DriverNotLoaded,
    LibRmVersionMismatch,
    NoPermission,
    /// Anything else, including "an earlier NVML call is still hung".
    Other {
        detail: String,
    },
}

impl std::fmt::Display for NvmlFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlFailure::LibraryNotFound { detail } => write!(f, "cannot load NVML: {detail}"),
            NvmlFailure::DriverNotLoaded => f.write_str("NVML_ERROR_DRIVER_NOT_LOADED"),
            NvmlFailure::LibRmVersionMismatch => f.write_str("NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
            NvmlFailure::NoPermission => f.write_str("NVML_ERROR_NO_PERMISSION"),
            NvmlFailure::Other { detail } => f.write_str(detail),
        }
    }
}

/// Which GPU a per-GPU fact is about.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuRef {
    pub index: u32,
    /// "(unknown)" when NVML could not say.
    pub name: String,
    pub uuid: Option<String>,
}

/// Facts about one GPU; `facts` is an error when the GPU could not be opened.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PerGpu<T> {
    pub gpu: GpuRef,
    pub facts: Reading<T>,
}

/// ECC mode, error counters, retired pages and remapped rows of one GPU.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EccFacts {
    /// ECC enabled now (`current`) and after the next reset (`pending`).
    pub mode: Reading<EccMode>,
    /// Since the driver loaded.
    pub volatile_uncorrected: Reading<u64>,
    pub volatile_corrected: Reading<u64>,
    /// Over the GPU's lifetime.
    pub aggregate_uncorrected: Reading<u64>,
    /// Pages retired for multiple single-bit errors (pre-Ampere).
    pub retired_pages_sbe: Reading<u32>,
    /// Pages retired for a double-bit error (pre-Ampere).
    pub retired_pages_dbe: Reading<u32>,
    /// Pages waiting for a reset to be retired (pre-Ampere).
    pub pages_pending_retirement: Reading<bool>,
    /// Row remapping (Ampere and later).
    pub remapped_rows: Reading<RemappedRows>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EccMode {
    pub current: bool,
    pub pending: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    /// A remap is waiting for a GPU reset.
    pub pending: bool,
    /// A remap failed: the memory cannot be repaired in the field.
    pub failed: bool,
}

/// PCIe link state of one GPU.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PcieFacts {
    pub link_gen: Reading<u32>,
    pub max_link_gen: Reading<u32>,
    pub link_width: Reading<u32>,
    pub max_link_width: Reading<u32>,
    /// GPU utilization over NVML's last sample period, percent.
    pub utilization_pct: Reading<u32>,
}

/// Why the clocks are held down: NVML's clocks-event (throttle) reason bits,
/// one reading per sample, first to last. A reading after the first that
/// fails is left out.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThrottleFacts {
    pub samples: Reading<Vec<u64>>,
}

/// How [`throttle`] samples: `samples` readings `interval` apart, taken
/// only when the first reading of some GPU has a bit of `again_if` (one
/// reading otherwise).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThrottleSampling {
    pub samples: u32,
    pub interval: std::time::Duration,
    pub again_if: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

/// Compute, persistence and MIG mode of one GPU.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModeFacts {
    pub compute_mode: Reading<ComputeMode>,
    pub persistence: Reading<bool>,
    /// MIG now and after the next reset.
    pub mig: Reading<MigMode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MigMode {
    pub current: bool,
    pub pending: bool,
}

/// A process holding memory on a GPU.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// NVML's name for it, else /proc/PID/cmdline or comm; None when the
    /// process is not visible from here (another PID namespace).
    pub name: Option<String>,
    /// None when the driver does not say (e.g. under MIG without privileges).
    pub used_mib: Option<u64>,
    pub graphics: bool,
}

/// Who holds a GPU: the processes NVML lists, and what the GPU shows in
/// use whether or not NVML can list who uses it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProcessFacts {
    pub processes: Reading<Vec<GpuProcess>>,
    /// Device memory in use, MiB (nvmlDeviceGetMemoryInfo's `used`), by
    /// every process, listed or not. A capture made before it was probed
    /// replays it as not reported.
    #[serde(default = "not_captured")]
    pub memory_used_mib: Reading<u64>,
    /// GPU utilisation over NVML's last sample period, percent (as for
    /// [`PcieFacts::utilization_pct`]); replayed like `memory_used_mib`.
    #[serde(default = "not_captured")]
    pub utilization_pct: Reading<u32>,
}

/// A reading an older capture does not hold: not reported.
fn not_captured<T>() -> Reading<T> {
    Err(Unavailable::NotSupported)
}

/// Common ancestor of two GPUs in the PCIe tree (nvidia-smi topo -m's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Ancestor {
    /// Same board (multi-GPU board).
    Internal,
    /// At most one PCIe switch between them (PIX).
    Single,
    /// Several PCIe switches, no host bridge (PXB).
    Multiple,
    /// Through a PCIe host bridge, usually the CPU (PHB).
    HostBridge,
    /// Between host bridges within one NUMA node (NODE).
    Node,
    /// Across NUMA nodes, over the inter-socket link (SYS).
    System,
}

/// NVML's P2P status for one capability between two GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum P2pStatus {
    Ok,
    ChipsetNotSupported,
    GpuNotSupported,
    TopologyNotSupported,
    DisabledByRegkey,
    NotSupported,
    Unknown,
}

/// What the far end of an NVLink is.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum NvLinkRemote {
    /// Another GPU of this host, by NVML index.
    Gpu(u32),
    Switch,
    /// Something else (an IBM NPU, a GPU NVML does not show here).
    Other(String),
    /// NVML could not say.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NvLinkState {
    pub link: u32,
    pub active: bool,
    pub remote: NvLinkRemote,
    /// The link's error counters (read for active links only).
    pub errors: NvLinkErrors,
}

/// nvmlDeviceGetNvLinkErrorCounter for one link, counted since the driver
/// loaded (or the counters were reset); None where NVML could not say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NvLinkErrors {
    /// NVML_NVLINK_ERROR_DL_REPLAY: packets the link sent again.
    pub replay: Option<u64>,
    /// NVML_NVLINK_ERROR_DL_RECOVERY: times the link failed and retrained.
    pub recovery: Option<u64>,
    /// NVML_NVLINK_ERROR_DL_CRC_FLIT + _CRC_DATA: data received damaged.
    pub crc: Option<u64>,
}

/// The error counters of an active link.
fn nvlink_errors(wrapper: &nvml_wrapper::nv_link::NvLink<'_, '_>) -> NvLinkErrors {
    let count = |c: ErrorCounter| {
        read("nvmlDeviceGetNvLinkErrorCounter", || {
            wrapper.error_counter(c)
        })
        .ok()
    };
    let crc = match (
        count(ErrorCounter::DlCrcFlit),
        count(ErrorCounter::DlCrcData),
    ) {
        (None, None) => None,
        (flit, data) => Some(flit.unwrap_or(0).saturating_add(data.unwrap_or(0))),
    };
    NvLinkErrors {
        replay: count(ErrorCounter::DlReplay),
        recovery: count(ErrorCounter::DlRecovery),
        crc,
    }
}

/// Topology between two GPUs (`a` < `b`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PairFacts {
    pub a: u32,
    pub b: u32,
    pub ancestor: Reading<Ancestor>,
    pub p2p_read: Reading<P2pStatus>,
    pub p2p_write: Reading<P2pStatus>,
    pub p2p_nvlink: Reading<P2pStatus>,
}

/// A GPU's place in the NVSwitch fabric (nvmlDeviceGetGpuFabricInfo,
/// Hopper and later): on NVSwitch systems the fabric manager must finish
/// registering every GPU before CUDA can use it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FabricState {
    NotStarted,
    InProgress,
    /// Registered.
    Completed,
    /// Registration finished with this error.
    Failed(String),
}

/// The GPU-to-GPU topology of the host.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TopologyFacts {
    pub gpus: Vec<GpuRef>,
    /// Per GPU (same order): its NVLinks, or why there are none to show
    /// (NotSupported = no NVLink on this GPU).
    pub nvlinks: Vec<Reading<Vec<NvLinkState>>>,
    /// Every pair a < b.
    pub pairs: Vec<PairFacts>,
}

// ---------------------------------------------------------------------------
// The shared NVML instance and the in-flight call

/// The library path it was loaded from (None = default) and the outcome.
static NVML: OnceLock<(Option<PathBuf>, Result<Nvml, NvmlFailure>)> = OnceLock::new();

/// The NVML call running now. Checks run one after another, so a call still
/// in flight when a new probe starts belongs to a thread the runner gave up
/// on: that call is hung.
static IN_FLIGHT: Mutex<Option<&'static str>> = Mutex::new(None);

/// An NVML answer's capture key: the `--nvml-lib` it was asked through.
fn lib_key(lib: Option<&Path>) -> String {
    lib.map(|p| p.display().to_string()).unwrap_or_default()
}

/// The NVML function that has not returned, if one is hung.
pub fn hung_call() -> Option<&'static str> {
    *IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Marks an NVML call in flight for as long as it lives.
struct InFlight;

impl InFlight {
    fn enter(name: &'static str) -> InFlight {
        *IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner()) = Some(name);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Run one NVML call, marked in flight under its C name.
fn call<T>(name: &'static str, f: impl FnOnce() -> T) -> T {
    let _mark = InFlight::enter(name);
    f()
}

fn hung_failure(name: &str) -> NvmlFailure {
    NvmlFailure::Other {
        detail: format!(
            "NVML has not returned from {name} (called by an earlier check); the driver is not answering"
        ),
    }
}

fn init_failure(e: NvmlError) -> NvmlFailure {
    match e {
        NvmlError::LibloadingError(e) => NvmlFailure::LibraryNotFound {
            detail: e.to_string(),
        },
        NvmlError::LibraryNotFound => NvmlFailure::LibraryNotFound {
            detail: "NVML_ERROR_LIBRARY_NOT_FOUND".to_string(),
        },
        NvmlError::DriverNotLoaded => NvmlFailure::DriverNotLoaded,
        NvmlError::LibRmVersionMismatch => NvmlFailure::LibRmVersionMismatch,
        NvmlError::NoPermission => NvmlFailure::NoPermission,
        NvmlError::FailedToLoadSymbol(s) => NvmlFailure::Other {
            detail: format!("the library is not a usable NVML ({s})"),
        },
        e => NvmlFailure::Other {
            detail: format!("nvmlInit_v2 failed: {e}"),
        },
    }
}

/// The process-wide NVML, loading and initialising it on first use.
fn nvml(lib: Option<&Path>) -> Result<&'static Nvml, NvmlFailure> {
    if let Some(name) = hung_call() {
        return Err(hung_failure(name));
    }
    let (loaded_from, result) = NVML.get_or_init(|| {
        let path: &OsStr = lib.map_or(OsStr::new(DEFAULT_LIBRARY), |p| p.as_os_str());
        let result = call("nvmlInit_v2", || Nvml::builder().lib_path(path).init());
        (lib.map(Path::to_path_buf), result.map_err(init_failure))
    });
    if loaded_from.as_deref() != lib {
        return Err(NvmlFailure::Other {
            detail: format!(
                "NVML was already loaded from {} in this process",
                loaded_from
                    .as_deref()
                    .map_or(DEFAULT_LIBRARY.into(), |p| p.display().to_string())
            ),
        });
    }
    result.as_ref().map_err(Clone::clone)
}

fn unavailable(e: NvmlError) -> Unavailable {
    match e {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => Unavailable::NotSupported,
        NvmlError::GpuLost => Unavailable::GpuLost,
        NvmlError::Unknown => Unavailable::Faulted(GpuFault::InternalError),
        NvmlError::ResetRequired => Unavailable::Faulted(GpuFault::ResetRequired),
        NvmlError::IrqIssue => Unavailable::Faulted(GpuFault::IrqIssue),
        NvmlError::CorruptedInfoROM => Unavailable::Faulted(GpuFault::CorruptedInfoRom),
        NvmlError::InsufficientPower => Unavailable::Faulted(GpuFault::InsufficientPower),
        // No permission, blocked by the OS, a bad argument or an
        // uninitialised library: gpucheck could not ask.
        e => Unavailable::Failed(e.to_string()),
    }
}

/// One NVML query, marked in flight, with its error sorted.
fn read<T>(name: &'static str, f: impl FnOnce() -> Result<T, NvmlError>) -> Reading<T> {
    call(name, f).map_err(unavailable)
}

fn other(e: NvmlError) -> NvmlFailure {
    NvmlFailure::Other {
        detail: e.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Driver and inventory

/// [`driver_live`] through the boundary: recorded under `nvml::driver`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn driver(lib: Option<&Path>) -> Result<DriverInfo, NvmlFailure> {
    crate::seam::answer("nvml::driver", &lib_key(lib), || driver_live(lib))
}

/// Driver, NVML and supported CUDA versions. `lib` overrides the library path.
fn driver_live(lib: Option<&Path>) -> Result<DriverInfo, NvmlFailure> {
    let nvml = nvml(lib)?;
    let driver_version =
        call("nvmlSystemGetDriverVersion", || nvml.sys_driver_version()).map_err(other)?;
    let nvml_version =
        call("nvmlSystemGetNVMLVersion", || nvml.sys_nvml_version()).map_err(other)?;
    let cuda_driver_version = read("nvmlSystemGetCudaDriverVersion_v2", || {
        nvml.sys_cuda_driver_version()
    })
    .or_else(|_| {
        // Drivers before the _v2 entry point have the original one.
        read("nvmlSystemGetCudaDriverVersion", || {
            let sym = nvml_sym(nvml.lib().nvmlSystemGetCudaDriverVersion.as_ref())?;
            let mut version: i32 = 0;
            // SAFETY: the symbol has this signature in every NVML; `version`
            // outlives the call.
            nvml_try(unsafe { sym(&mut version) })?;
            Ok(version)
        })
    })
    .ok();
    Ok(DriverInfo {
        driver_version,
        nvml_version,
        cuda_driver_version,
    })
}

fn device_count(nvml: &Nvml) -> Result<u32, NvmlFailure> {
    call("nvmlDeviceGetCount_v2", || nvml.device_count()).map_err(other)
}

fn device(nvml: &Nvml, index: u32) -> Reading<Device<'_>> {
    read("nvmlDeviceGetHandleByIndex_v2", || {
        nvml.device_by_index(index)
    })
}

fn gpu_ref(device: &Reading<Device<'_>>, index: u32) -> GpuRef {
    let (name, uuid) = match device {
        Ok(d) => (
            read("nvmlDeviceGetName", || d.name()).ok(),
            read("nvmlDeviceGetUUID", || d.uuid()).ok(),
        ),
        Err(_) => (None, None),
    };
    GpuRef {
        index,
        name: name.unwrap_or_else(|| "(unknown)".to_string()),
        uuid,
    }
}

/// Probe every GPU with `f`, which gets the GPU's handle.
fn per_gpu<T>(
    lib: Option<&Path>,
    f: impl Fn(&Nvml, &Device<'_>) -> T,
) -> Result<Vec<PerGpu<T>>, NvmlFailure> {
    let nvml = nvml(lib)?;
    let count = device_count(nvml)?;
    Ok((0..count)
        .map(|index| {
            let device = device(nvml, index);
            let gpu = gpu_ref(&device, index);
            let facts = device.map(|d| f(nvml, &d));
            PerGpu { gpu, facts }
        })
        .collect())
}

/// Device memory as (total, used), MiB.
fn memory_mib(device: &Device<'_>) -> Reading<(u64, u64)> {
    read("nvmlDeviceGetMemoryInfo_v2", || device.memory_info())
        .map(|m| (m.total, m.used))
        .or_else(|_| {
            // Drivers before R510 have only the original entry point.
            read("nvmlDeviceGetMemoryInfo", || {
                let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetMemoryInfo.as_ref())?;
                // SAFETY: plain C struct of three u64, written by the call.
                let mut memory = unsafe { std::mem::zeroed() };
                nvml_try(unsafe { sym(device.handle(), &mut memory) })?;
                Ok((memory.total, memory.used))
            })
        })
        .map(|(total, used)| (total / (1024 * 1024), used / (1024 * 1024)))
}

/// Upper bound on the MIG slots asked about, whatever the driver answers:
/// an A100/H100 has at most 7 GPU instances (NVIDIA MIG user guide); the
/// margin leaves room for future parts while a bogus count cannot turn into
/// billions of calls.
const MAX_MIG_SLOTS: u32 = 64;

fn describe(nvml: &Nvml, index: u32) -> Result<GpuInfo, GpuError> {
    let fail = |error| GpuError { index, error };
    let device = device(nvml, index).map_err(fail)?;
    let name = read("nvmlDeviceGetName", || device.name()).map_err(fail)?;
    let uuid = read("nvmlDeviceGetUUID", || device.uuid()).map_err(fail)?;
    let pci = read("nvmlDeviceGetPciInfo_v3", || device.pci_info()).map_err(fail)?;
    let compute_capability = read("nvmlDeviceGetCudaComputeCapability", || {
        device.cuda_compute_capability()
    })
    .ok()
    .and_then(|cc| Some((u32::try_from(cc.major).ok()?, u32::try_from(cc.minor).ok()?)));
    let mig_enabled = read("nvmlDeviceGetMigMode", || device.mig_mode())
        .ok()
        .map(|m| m.current == 1);
    let mut mig_uuids = Vec::new();
    if mig_enabled == Some(true) {
        let max = read("nvmlDeviceGetMaxMigDeviceCount", || {
            device.mig_device_count()
        })
        .unwrap_or(0)
        .min(MAX_MIG_SLOTS);
        for slot in 0..max {
            // Empty slots answer NOT_FOUND.
            if let Ok(mig) = read("nvmlDeviceGetMigDeviceHandleByIndex", || {
                device.mig_device_by_index(slot)
            }) {
                if let Ok(uuid) = read("nvmlDeviceGetUUID", || mig.uuid()) {
                    mig_uuids.push(uuid);
                }
            }
        }
    }
    Ok(GpuInfo {
        index,
        name,
        uuid,
        pci_bus_id: pci.bus_id,
        memory_total_mib: memory_mib(&device).map_or(0, |(total, _)| total),
        compute_capability,
        mig_enabled,
        mig_uuids,
    })
}

/// [`inventory_live`] through the boundary: recorded under `nvml::inventory`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn inventory(lib: Option<&Path>) -> Result<Vec<Result<GpuInfo, GpuError>>, NvmlFailure> {
    crate::seam::answer("nvml::inventory", &lib_key(lib), || inventory_live(lib))
}

/// Every GPU NVML counts, in NVML index order, each described or with the
/// reason it could not be (a GPU fallen off the bus).
fn inventory_live(lib: Option<&Path>) -> Result<Vec<Result<GpuInfo, GpuError>>, NvmlFailure> {
    let nvml = nvml(lib)?;
    let count = device_count(nvml)?;
    Ok((0..count).map(|index| describe(nvml, index)).collect())
}

/// Every GPU NVML sees, in NVML index order (GPUs NVML counts but cannot
/// open are left out; `inventory` reports them).
pub fn gpus(lib: Option<&Path>) -> Result<Vec<GpuInfo>, NvmlFailure> {
    Ok(inventory(lib)?.into_iter().filter_map(Result::ok).collect())
}

// ---------------------------------------------------------------------------
// Per-GPU health

/// Count of retired pages for one cause, through the raw call (nvml-wrapper
/// only offers the full list, which needs a second entry point).
fn retired_page_count(device: &Device<'_>, cause: u32) -> Result<u32, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetRetiredPages.as_ref())?;
    let mut count: u32 = 0;
    // SAFETY: asking for the count only: a zero-sized buffer and a null
    // address pointer, as nvml.h documents.
    let code = unsafe { sym(device.handle(), cause, &mut count, std::ptr::null_mut()) };
    match nvml_try(code) {
        Ok(()) | Err(NvmlError::InsufficientSize(_)) => Ok(count),
        Err(e) => Err(e),
    }
}

/// Remapped rows through the raw call: nvml-wrapper 0.13 has no method.
fn remapped_rows(device: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: four out-parameters, each a valid u32 for the whole call.
    nvml_try(unsafe {
        sym(
            device.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    })?;
    Ok(RemappedRows {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failed: failure != 0,
    })
}

/// nvmlPageRetirementCause_t.
const CAUSE_MULTIPLE_SINGLE_BIT: u32 = 0;
const CAUSE_DOUBLE_BIT: u32 = 1;

/// [`ecc_live`] through the boundary: recorded under `nvml::ecc`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn ecc(lib: Option<&Path>) -> Result<Vec<PerGpu<EccFacts>>, NvmlFailure> {
    crate::seam::answer("nvml::ecc", &lib_key(lib), || ecc_live(lib))
}

/// ECC facts of every GPU.
fn ecc_live(lib: Option<&Path>) -> Result<Vec<PerGpu<EccFacts>>, NvmlFailure> {
    per_gpu(lib, |_, d| EccFacts {
        mode: read("nvmlDeviceGetEccMode", || d.is_ecc_enabled()).map(|m| EccMode {
            current: m.currently_enabled,
            pending: m.pending_enabled,
        }),
        volatile_uncorrected: read("nvmlDeviceGetTotalEccErrors", || {
            d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        }),
        volatile_corrected: read("nvmlDeviceGetTotalEccErrors", || {
            d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
        }),
        aggregate_uncorrected: read("nvmlDeviceGetTotalEccErrors", || {
            d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
        }),
        retired_pages_sbe: read("nvmlDeviceGetRetiredPages", || {
            retired_page_count(d, CAUSE_MULTIPLE_SINGLE_BIT)
        }),
        retired_pages_dbe: read("nvmlDeviceGetRetiredPages", || {
            retired_page_count(d, CAUSE_DOUBLE_BIT)
        }),
        pages_pending_retirement: read("nvmlDeviceGetRetiredPagesPendingStatus", || {
            d.are_pages_pending_retired()
        }),
        remapped_rows: read("nvmlDeviceGetRemappedRows", || remapped_rows(d)),
    })
}

/// [`pcie_live`] through the boundary: recorded under `nvml::pcie`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn pcie(lib: Option<&Path>) -> Result<Vec<PerGpu<PcieFacts>>, NvmlFailure> {
    crate::seam::answer("nvml::pcie", &lib_key(lib), || pcie_live(lib))
}

/// PCIe link facts of every GPU.
fn pcie_live(lib: Option<&Path>) -> Result<Vec<PerGpu<PcieFacts>>, NvmlFailure> {
    per_gpu(lib, |_, d| PcieFacts {
        link_gen: read("nvmlDeviceGetCurrPcieLinkGeneration", || {
            d.current_pcie_link_gen()
        }),
        max_link_gen: read("nvmlDeviceGetMaxPcieLinkGeneration", || {
            d.max_pcie_link_gen()
        }),
        link_width: read("nvmlDeviceGetCurrPcieLinkWidth", || {
            d.current_pcie_link_width()
        }),
        max_link_width: read("nvmlDeviceGetMaxPcieLinkWidth", || d.max_pcie_link_width()),
        utilization_pct: read("nvmlDeviceGetUtilizationRates", || d.utilization_rates())
            .map(|u| u.gpu),
    })
}

fn throttle_reasons(device: &Device<'_>) -> Reading<u64> {
    read("nvmlDeviceGetCurrentClocksThrottleReasons", || {
        device.current_throttle_reasons()
    })
    .map(|r| r.bits())
}

/// [`throttle_live`] through the boundary: recorded under `nvml::throttle`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn throttle(
    lib: Option<&Path>,
    sampling: &ThrottleSampling,
) -> Result<Vec<PerGpu<ThrottleFacts>>, NvmlFailure> {
    crate::seam::answer("nvml::throttle", &lib_key(lib), || {
        throttle_live(lib, sampling)
    })
}

/// Clock throttle reasons of every GPU: one reading each, then, when some
/// GPU's first reading has a bit of `sampling.again_if`, more readings of
/// every GPU `sampling.interval` apart (a reason can be there for one
/// reading only: NVML says HW Slowdown "may be also reported during PState
/// or clock change").
fn throttle_live(
    lib: Option<&Path>,
    sampling: &ThrottleSampling,
) -> Result<Vec<PerGpu<ThrottleFacts>>, NvmlFailure> {
    let nvml = nvml(lib)?;
    let count = device_count(nvml)?;
    let devices: Vec<Reading<Device<'_>>> = (0..count).map(|i| device(nvml, i)).collect();
    let mut samples: Vec<Reading<Vec<u64>>> = devices
        .iter()
        .map(|d| match d {
            Ok(d) => throttle_reasons(d).map(|bits| vec![bits]),
            Err(e) => Err(e.clone()),
        })
        .collect();
    let again = samples
        .iter()
        .any(|s| s.as_ref().is_ok_and(|v| v[0] & sampling.again_if != 0));
    for _ in 1..if again { sampling.samples } else { 1 } {
        std::thread::sleep(sampling.interval);
        for (d, s) in devices.iter().zip(samples.iter_mut()) {
            if let (Ok(d), Ok(v)) = (d, s) {
                v.extend(throttle_reasons(d).ok());
            }
        }
    }
    Ok(devices
        .iter()
        .zip(0..)
        .zip(samples)
        .map(|((d, index), samples)| PerGpu {
            gpu: gpu_ref(d, index),
            facts: match d {
                Ok(_) => Ok(ThrottleFacts { samples }),
                Err(e) => Err(e.clone()),
            },
        })
        .collect())
}

/// One [`LoadReading`] of every GPU now, through the boundary (the memory
/// test sizes itself from the free memory it reports).
pub fn load_readings(lib: Option<&Path>) -> Result<Vec<PerGpu<LoadReading>>, NvmlFailure> {
    crate::seam::answer("nvml::load_readings", &lib_key(lib), || {
        load_readings_live(lib)
    })
}

/// One [`LoadReading`] of every GPU, for sampling while a load runs (the
/// samples are kept with the load run's answer, [`crate::probe::load::run`]).
pub fn load_readings_live(lib: Option<&Path>) -> Result<Vec<PerGpu<LoadReading>>, NvmlFailure> {
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
    per_gpu(lib, |_, d| LoadReading {
        sm_clock_mhz: read("nvmlDeviceGetClockInfo", || d.clock_info(Clock::SM)),
        power_mw: read("nvmlDeviceGetPowerUsage", || d.power_usage()),
        power_limit_mw: read("nvmlDeviceGetEnforcedPowerLimit", || {
            d.enforced_power_limit()
        }),
        temperature_c: read("nvmlDeviceGetTemperature", || {
            d.temperature(TemperatureSensor::Gpu)
        }),
        throttle_reasons: throttle_reasons(d),
        memory_free_bytes: read("nvmlDeviceGetMemoryInfo_v2", || d.memory_info()).map(|m| m.free),
    })
}

/// [`modes_live`] through the boundary: recorded under `nvml::modes`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn modes(lib: Option<&Path>) -> Result<Vec<PerGpu<ModeFacts>>, NvmlFailure> {
    crate::seam::answer("nvml::modes", &lib_key(lib), || modes_live(lib))
}

/// Compute, persistence and MIG modes of every GPU.
fn modes_live(lib: Option<&Path>) -> Result<Vec<PerGpu<ModeFacts>>, NvmlFailure> {
    per_gpu(lib, |_, d| ModeFacts {
        compute_mode: read("nvmlDeviceGetComputeMode", || d.compute_mode()).map(|m| match m {
            NvmlComputeMode::Default => ComputeMode::Default,
            NvmlComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
            NvmlComputeMode::Prohibited => ComputeMode::Prohibited,
            NvmlComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
        }),
        persistence: read("nvmlDeviceGetPersistenceMode", || d.is_in_persistent_mode()),
        mig: read("nvmlDeviceGetMigMode", || d.mig_mode()).map(|m| MigMode {
            current: m.current == 1,
            pending: m.pending == 1,
        }),
    })
}

/// A process's name as the driver knows it, else as /proc shows it here.
fn process_name(nvml: &Nvml, pid: u32) -> Option<String> {
    let from_nvml = read("nvmlSystemGetProcessName", || {
        nvml.sys_process_name(pid, 256)
    })
    .ok()
    .filter(|n| !n.trim().is_empty());
    from_nvml.or_else(|| proc_name(pid))
}

/// /proc/PID/cmdline (arguments joined), else /proc/PID/comm.
fn proc_name(pid: u32) -> Option<String> {
    const MAX_CHARS: usize = 80;
    let dir = PathBuf::from("/proc").join(pid.to_string());
    let cmdline = std::fs::read(dir.join("cmdline"))
        .ok()
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|s| !s.is_empty());
    let name = cmdline.or_else(|| {
        std::fs::read_to_string(dir.join("comm"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })?;
    Some(if name.chars().count() > MAX_CHARS {
        format!("{}…", name.chars().take(MAX_CHARS).collect::<String>())
    } else {
        name
    })
}

/// nvmlProcessInfo_v1_t: the layout the unsuffixed entry points keep.
#[repr(C)]
#[derive(Clone, Copy)]
struct ProcessInfoV1 {
    pid: std::ffi::c_uint,
    used_gpu_memory: std::ffi::c_ulonglong,
}

/// NVML_VALUE_NOT_AVAILABLE for a process's memory (nvml.h).
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// (nvmlDevice_t, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos)
/// -> nvmlReturn_t.
type ProcessesV1 = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    *mut std::ffi::c_uint,
    *mut ProcessInfoV1,
) -> std::ffi::c_uint;

/// One process list through the original entry point (`symbol`, which every
/// driver still exports with the v1 layout): drivers before R510 lack the
/// _v3 functions nvml-wrapper calls.
fn processes_v1(
    library: &libloading::Library,
    symbol: &[u8],
    device: &Device<'_>,
) -> Result<Vec<(u32, UsedGpuMemory)>, NvmlError> {
    // SAFETY: the symbol has this signature in every NVML (nvml.h,
    // nvmlDeviceGetComputeRunningProcesses / ...Graphics...).
    let sym = unsafe { library.get::<ProcessesV1>(symbol) }
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let mut count: std::ffi::c_uint = 0;
    // SAFETY: asking for the count: a zero-sized buffer and a null pointer.
    match nvml_try(unsafe { sym(device.handle().cast(), &mut count, std::ptr::null_mut()) }) {
        Ok(()) => return Ok(Vec::new()),
        Err(NvmlError::InsufficientSize(_)) => {}
        Err(e) => return Err(e),
    }
    // Headroom for processes that start between the two calls.
    let mut count = count.saturating_add(8);
    let mut infos = vec![
        ProcessInfoV1 {
            pid: 0,
            used_gpu_memory: 0,
        };
        count as usize
    ];
    // SAFETY: `infos` holds `count` elements for the whole call.
    nvml_try(unsafe { sym(device.handle().cast(), &mut count, infos.as_mut_ptr()) })?;
    infos.truncate(count as usize);
    Ok(infos
        .into_iter()
        .map(|p| {
            let used = match p.used_gpu_memory {
                VALUE_NOT_AVAILABLE => UsedGpuMemory::Unavailable,
                bytes => UsedGpuMemory::Used(bytes),
            };
            (p.pid, used)
        })
        .collect())
}

/// One kind of process list: the _v3 entry point through nvml-wrapper, else
/// (a driver without it) the `original` one.
fn process_list(
    (newer, query): (
        &'static str,
        impl FnOnce() -> Result<Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>, NvmlError>,
    ),
    original: &'static str,
    library: Option<&libloading::Library>,
    device: &Device<'_>,
) -> Reading<Vec<(u32, UsedGpuMemory)>> {
    let listed = read(newer, || {
        query().map(|l| l.into_iter().map(|p| (p.pid, p.used_gpu_memory)).collect())
    });
    match (listed, library) {
        (Err(Unavailable::NotSupported), Some(library)) => read(original, || {
            processes_v1(library, original.as_bytes(), device)
        }),
        (listed, _) => listed,
    }
}

/// [`processes_live`] through the boundary: recorded under `nvml::processes`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn processes(lib: Option<&Path>) -> Result<Vec<PerGpu<ProcessFacts>>, NvmlFailure> {
    crate::seam::answer("nvml::processes", &lib_key(lib), || processes_live(lib))
}

/// Processes holding memory on every GPU (compute and graphics).
fn processes_live(lib: Option<&Path>) -> Result<Vec<PerGpu<ProcessFacts>>, NvmlFailure> {
    // A second handle on the library NVML already loaded (the loader hands
    // back the same one), for the entry points nvml-wrapper does not bind.
    let path: &OsStr = lib.map_or(OsStr::new(DEFAULT_LIBRARY), |p| p.as_os_str());
    // SAFETY: the library is already loaded and initialised by nvml().
    let loaded = nvml(lib).and_then(|_| {
        unsafe { libloading::Library::new(path) }.map_err(|e| NvmlFailure::Other {
            detail: e.to_string(),
        })
    });
    let library = loaded.as_ref().ok();
    per_gpu(lib, |nvml, d| {
        let compute = process_list(
            ("nvmlDeviceGetComputeRunningProcesses_v3", || {
                d.running_compute_processes()
            }),
            "nvmlDeviceGetComputeRunningProcesses",
            library,
            d,
        );
        let graphics = process_list(
            ("nvmlDeviceGetGraphicsRunningProcesses_v3", || {
                d.running_graphics_processes()
            }),
            "nvmlDeviceGetGraphicsRunningProcesses",
            library,
            d,
        );
        let processes = match (compute, graphics) {
            (Err(e), Err(_)) => Err(e),
            (compute, graphics) => {
                let mut list = Vec::new();
                for (infos, is_graphics) in [(compute, false), (graphics, true)] {
                    for (pid, used) in infos.unwrap_or_default() {
                        // A process with both contexts is listed once.
                        if list.iter().any(|q: &GpuProcess| q.pid == pid) {
                            continue;
                        }
                        list.push(GpuProcess {
                            pid,
                            name: process_name(nvml, pid),
                            used_mib: match used {
                                UsedGpuMemory::Used(bytes) => Some(bytes / (1024 * 1024)),
                                UsedGpuMemory::Unavailable => None,
                            },
                            graphics: is_graphics,
                        });
                    }
                }
                Ok(list)
            }
        };
        ProcessFacts {
            processes,
            memory_used_mib: memory_mib(d).map(|(_, used)| used),
            utilization_pct: read("nvmlDeviceGetUtilizationRates", || d.utilization_rates())
                .map(|u| u.gpu),
        }
    })
}

// ---------------------------------------------------------------------------
// Topology

fn ancestor(level: TopologyLevel) -> Ancestor {
    match level {
        TopologyLevel::Internal => Ancestor::Internal,
        TopologyLevel::Single => Ancestor::Single,
        TopologyLevel::Multiple => Ancestor::Multiple,
        TopologyLevel::HostBridge => Ancestor::HostBridge,
        TopologyLevel::Node => Ancestor::Node,
        TopologyLevel::System => Ancestor::System,
    }
}

fn p2p(status: NvmlP2pStatus) -> P2pStatus {
    match status {
        NvmlP2pStatus::Ok => P2pStatus::Ok,
        NvmlP2pStatus::ChipsetNotSupported => P2pStatus::ChipsetNotSupported,
        NvmlP2pStatus::GpuNotSupported => P2pStatus::GpuNotSupported,
        NvmlP2pStatus::IohTopologyNotSupported => P2pStatus::TopologyNotSupported,
        NvmlP2pStatus::DisabledByRegkey => P2pStatus::DisabledByRegkey,
        NvmlP2pStatus::NotSupported => P2pStatus::NotSupported,
        NvmlP2pStatus::Unknown => P2pStatus::Unknown,
    }
}

/// nvmlIntNvLinkDeviceType_t.
const NVLINK_DEVICE_GPU: u32 = 0;
const NVLINK_DEVICE_SWITCH: u32 = 2;

/// The remote device type through the raw call: nvml-wrapper 0.13's
/// `remote_device_type` never reads the answer back.
fn remote_device_type(device: &Device<'_>, link: u32) -> Result<u32, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetNvLinkRemoteDeviceType
            .as_ref(),
    )?;
    let mut kind: u32 = u32::MAX;
    // SAFETY: one out-parameter, valid for the call.
    nvml_try(unsafe { sym(device.handle(), link, &mut kind) })?;
    Ok(kind)
}

/// nvmlGpuFabricState_t (nvml.h).
const FABRIC_STATE_NOT_SUPPORTED: u8 = 0;
const FABRIC_STATE_NOT_STARTED: u8 = 1;
const FABRIC_STATE_IN_PROGRESS: u8 = 2;
const FABRIC_STATE_COMPLETED: u8 = 3;

/// The fabric state through the raw call: nvml-wrapper 0.13 has no method.
fn fabric_state(device: &Device<'_>) -> Result<FabricState, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetGpuFabricInfo.as_ref())?;
    // SAFETY: a plain C struct (UUID bytes, a return code, two integers),
    // written by the call.
    let mut info = unsafe { std::mem::zeroed() };
    nvml_try(unsafe { sym(device.handle(), &mut info) })?;
    match info.state {
        FABRIC_STATE_NOT_SUPPORTED => Err(NvmlError::NotSupported),
        FABRIC_STATE_NOT_STARTED => Ok(FabricState::NotStarted),
        FABRIC_STATE_IN_PROGRESS => Ok(FabricState::InProgress),
        FABRIC_STATE_COMPLETED => Ok(match info.status {
            0 => FabricState::Completed,
            code => FabricState::Failed(nvml_return_name(code as i32)),
        }),
        other => Err(NvmlError::UnexpectedVariant(u32::from(other))),
    }
}

/// nvmlReturn_t values nvml-wrapper 0.13 does not name (nvml.h 11.8 and
/// later): a fabric registration that completed with one of them would read
/// "unexpected enum variant value".
const NVML_ERROR_INSUFFICIENT_RESOURCES: i32 = 23;
const NVML_ERROR_FREQ_NOT_SUPPORTED: i32 = 24;
const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: i32 = 25;
const NVML_ERROR_DEPRECATED: i32 = 26;
const NVML_ERROR_NOT_READY: i32 = 27;
const NVML_ERROR_GPU_NOT_FOUND: i32 = 28;
const NVML_ERROR_INVALID_STATE: i32 = 29;

/// The nvml.h name of a return code, as `nvidia-smi -q` and NVML's
/// documentation spell it.
pub fn nvml_return_name(code: i32) -> String {
    let name = match code {
        0 => "NVML_SUCCESS",
        1 => "NVML_ERROR_UNINITIALIZED",
        2 => "NVML_ERROR_INVALID_ARGUMENT",
        3 => "NVML_ERROR_NOT_SUPPORTED",
        4 => "NVML_ERROR_NO_PERMISSION",
        6 => "NVML_ERROR_NOT_FOUND",
        7 => "NVML_ERROR_INSUFFICIENT_SIZE",
        8 => "NVML_ERROR_INSUFFICIENT_POWER",
        9 => "NVML_ERROR_DRIVER_NOT_LOADED",
        10 => "NVML_ERROR_TIMEOUT",
        11 => "NVML_ERROR_IRQ_ISSUE",
        12 => "NVML_ERROR_LIBRARY_NOT_FOUND",
        13 => "NVML_ERROR_FUNCTION_NOT_FOUND",
        14 => "NVML_ERROR_CORRUPTED_INFOROM",
        15 => "NVML_ERROR_GPU_IS_LOST",
        16 => "NVML_ERROR_RESET_REQUIRED",
        17 => "NVML_ERROR_OPERATING_SYSTEM",
        18 => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        19 => "NVML_ERROR_IN_USE",
        20 => "NVML_ERROR_MEMORY",
        21 => "NVML_ERROR_NO_DATA",
        22 => "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
        NVML_ERROR_INSUFFICIENT_RESOURCES => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        NVML_ERROR_FREQ_NOT_SUPPORTED => "NVML_ERROR_FREQ_NOT_SUPPORTED",
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH => "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        NVML_ERROR_DEPRECATED => "NVML_ERROR_DEPRECATED",
        NVML_ERROR_NOT_READY => "NVML_ERROR_NOT_READY",
        NVML_ERROR_GPU_NOT_FOUND => "NVML_ERROR_GPU_NOT_FOUND",
        NVML_ERROR_INVALID_STATE => "NVML_ERROR_INVALID_STATE",
        999 => "NVML_ERROR_UNKNOWN",
        other => return format!("NVML error {other}"),
    };
    name.to_string()
}

/// nvmlGpuFabricInfo_v2_t as nvml.h 12.4 lays it out, for its size only
/// (nvml-wrapper does not export the raw structs): v3 appends
/// `healthSummary`.
#[repr(C)]
struct FabricInfoV2Layout {
    version: u32,
    cluster_uuid: [u8; 16],
    status: i32,
    clique_id: u32,
    state: u8,
    health_mask: u32,
}

/// NVML_STRUCT_VERSION(GpuFabricInfo, N) (nvml.h): the struct's size with
/// the version in the top byte.
fn fabric_struct_version(size: usize, version: u32) -> u32 {
    size as u32 | (version << 24)
}

/// One GPU's fabric info, the newest way the driver answers: struct v3,
/// then v2 when the driver does not know v3 (ARGUMENT_VERSION_MISMATCH),
/// then the v1 call when the driver has no nvmlDeviceGetGpuFabricInfoV
/// (before R550) or knows neither layout.
fn fabric_info_of(device: &Device<'_>) -> Result<FabricInfo, NvmlError> {
    let lib = device.nvml().lib();
    let Ok(sym) = nvml_sym(lib.nvmlDeviceGetGpuFabricInfoV.as_ref()) else {
        return fabric_info_v1(device);
    };
    // SAFETY: a plain C struct (nvmlGpuFabricInfo_v3_t) written by the
    // call, its `version` set first as nvml.h asks.
    let mut info = unsafe { std::mem::zeroed() };
    let v3_size = std::mem::size_of_val(&info);
    let mut version = 3;
    set_struct_version(&mut info, fabric_struct_version(v3_size, 3));
    let mut code = unsafe { sym(device.handle(), &mut info) };
    if code == NVML_ERROR_ARGUMENT_VERSION_MISMATCH as u32 {
        // A driver before nvml.h 13.0 knows v2 only: the same struct less
        // its last field, which it then leaves alone.
        version = 2;
        let v2_size = std::mem::size_of::<FabricInfoV2Layout>();
        set_struct_version(&mut info, fabric_struct_version(v2_size, 2));
        code = unsafe { sym(device.handle(), &mut info) };
    }
    if code == NVML_ERROR_ARGUMENT_VERSION_MISMATCH as u32 {
        // Neither versioned layout is known: the unversioned call answers.
        return fabric_info_v1(device);
    }
    nvml_try(code)?;
    let answer = fabric_answer(
        version as u8,
        info.state,
        info.status,
        info.cliqueId,
        info.clusterUuid,
    )?;
    Ok(FabricInfo {
        health_mask: Some(info.healthMask),
        health_summary: (version == 3).then_some(info.healthSummary),
        ..answer
    })
}

/// Write a versioned NVML struct's `version`, its first field (a u32).
fn set_struct_version<T>(info: &mut T, version: u32) {
    assert!(std::mem::size_of::<T>() >= 4);
    // SAFETY: `T` is a repr(C) NVML struct whose first field is the u32
    // `version`; the assert keeps the write inside it.
    unsafe { (info as *mut T).cast::<u32>().write(version) }
}

fn fabric_info_v1(device: &Device<'_>) -> Result<FabricInfo, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetGpuFabricInfo.as_ref())?;
    // SAFETY: a plain C struct (nvmlGpuFabricInfo_t) written by the call.
    let mut info = unsafe { std::mem::zeroed() };
    nvml_try(unsafe { sym(device.handle(), &mut info) })?;
    fabric_answer(1, info.state, info.status, info.cliqueId, info.clusterUuid)
}

/// The fields every version has; state 0 (not supported) is NOT_SUPPORTED.
fn fabric_answer(
    struct_version: u8,
    state: u8,
    status: u32,
    clique_id: u32,
    uuid: [u8; 16],
) -> Result<FabricInfo, NvmlError> {
    if state == FABRIC_STATE_NOT_SUPPORTED {
        return Err(NvmlError::NotSupported);
    }
    Ok(FabricInfo {
        struct_version,
        state,
        status: status as i32,
        clique_id,
        cluster_uuid: uuid.iter().map(|b| format!("{b:02x}")).collect(),
        health_mask: None,
        health_summary: None,
    })
}

/// [`fabric_info_live`] through the boundary: recorded under
/// `nvml::fabric_info` with the `--nvml-lib` it used.
pub fn fabric_info(lib: Option<&Path>) -> Result<Vec<Reading<FabricInfo>>, NvmlFailure> {
    crate::seam::answer("nvml::fabric_info", &lib_key(lib), || fabric_info_live(lib))
}

/// Every GPU's fabric info, in NVML index order; NotSupported where the GPU
/// is in no NVLink fabric NVML manages (PCIe GPUs, GPUs before Hopper).
fn fabric_info_live(lib: Option<&Path>) -> Result<Vec<Reading<FabricInfo>>, NvmlFailure> {
    Ok(per_gpu(lib, |_, d| {
        read("nvmlDeviceGetGpuFabricInfoV", || fabric_info_of(d))
    })?
    .into_iter()
    .map(|g| g.facts.and_then(|info| info))
    .collect())
}

/// Upper bound on NVLinks per GPU (NVML_NVLINK_MAX_LINKS in nvml.h).
const NVLINK_MAX_LINKS: u32 = 18;

fn nvlinks(device: &Device<'_>, buses: &[Option<(u32, u32, u32)>]) -> Reading<Vec<NvLinkState>> {
    let mut links = Vec::new();
    for link in 0..NVLINK_MAX_LINKS {
        let wrapper = device.link_wrapper_for(link);
        let active = match read("nvmlDeviceGetNvLinkState", || wrapper.is_active()) {
            Ok(a) => a,
            // Links past the last one this GPU has answer INVALID_ARGUMENT
            // (or NOT_SUPPORTED); a GPU without NVLink answers NOT_SUPPORTED
            // for link 0.
            Err(Unavailable::NotSupported) | Err(Unavailable::Failed(_)) if link > 0 => break,
            Err(e) => return Err(e),
        };
        let remote_bus = read("nvmlDeviceGetNvLinkRemotePciInfo_v2", || {
            wrapper.remote_pci_info()
        })
        .ok();
        let kind = read("nvmlDeviceGetNvLinkRemoteDeviceType", || {
            remote_device_type(device, link)
        })
        .ok();
        let peer = remote_bus.as_ref().and_then(|p| {
            buses
                .iter()
                .position(|b| *b == Some((p.domain, p.bus, p.device)))
        });
        let remote = match (peer, kind) {
            (Some(i), _) => NvLinkRemote::Gpu(i as u32),
            (None, Some(NVLINK_DEVICE_SWITCH)) => NvLinkRemote::Switch,
            (None, Some(NVLINK_DEVICE_GPU)) => NvLinkRemote::Other(format!(
                "GPU {}",
                remote_bus.map(|p| p.bus_id).unwrap_or_default()
            )),
            (None, Some(_)) => NvLinkRemote::Other("NPU".to_string()),
            // Without the device type (older drivers), a peer that is not
            // one of our GPUs is an NVSwitch.
            (None, None) if remote_bus.is_some() => NvLinkRemote::Switch,
            (None, None) => NvLinkRemote::Unknown,
        };
        let errors = if active {
            nvlink_errors(&wrapper)
        } else {
            NvLinkErrors::default()
        };
        links.push(NvLinkState {
            link,
            active,
            remote,
            errors,
        });
    }
    Ok(links)
}

/// [`fabric_live`] through the boundary: recorded under `nvml::fabric`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn fabric(lib: Option<&Path>) -> Result<Vec<Reading<FabricState>>, NvmlFailure> {
    crate::seam::answer("nvml::fabric", &lib_key(lib), || fabric_live(lib))
}

/// Every GPU's NVSwitch fabric state, in NVML index order; NotSupported
/// where there is no NVSwitch fabric (PCIe GPUs, GPUs before Hopper, older
/// drivers).
fn fabric_live(lib: Option<&Path>) -> Result<Vec<Reading<FabricState>>, NvmlFailure> {
    Ok(per_gpu(lib, |_, d| {
        read("nvmlDeviceGetGpuFabricInfo", || fabric_state(d))
    })?
    .into_iter()
    .map(|g| g.facts.and_then(|state| state))
    .collect())
}

/// [`topology_live`] through the boundary: recorded under `nvml::topology`
/// with the `--nvml-lib` it used; NVML's errors (NOT_SUPPORTED included)
/// are part of the answer.
pub fn topology(lib: Option<&Path>) -> Result<TopologyFacts, NvmlFailure> {
    crate::seam::answer("nvml::topology", &lib_key(lib), || topology_live(lib))
}

/// The GPU-to-GPU topology: common ancestors, P2P status, NVLinks.
fn topology_live(lib: Option<&Path>) -> Result<TopologyFacts, NvmlFailure> {
    let nvml = nvml(lib)?;
    let count = device_count(nvml)?;
    let devices: Vec<Reading<Device<'_>>> = (0..count).map(|i| device(nvml, i)).collect();
    let gpus: Vec<GpuRef> = devices
        .iter()
        .zip(0..)
        .map(|(d, i)| gpu_ref(d, i))
        .collect();
    let buses: Vec<Option<(u32, u32, u32)>> = devices
        .iter()
        .map(|d| {
            let d = d.as_ref().ok()?;
            let pci = read("nvmlDeviceGetPciInfo_v3", || d.pci_info()).ok()?;
            Some((pci.domain, pci.bus, pci.device))
        })
        .collect();
    let nvlinks = devices
        .iter()
        .map(|d| match d {
            Ok(d) => self::nvlinks(d, &buses),
            Err(e) => Err(e.clone()),
        })
        .collect();
    let mut pairs = Vec::new();
    for a in 0..devices.len() {
        for b in a + 1..devices.len() {
            let (da, db) = match (&devices[a], &devices[b]) {
                (Ok(da), Ok(db)) => (da, db),
                (Err(e), _) | (_, Err(e)) => {
                    pairs.push(PairFacts {
                        a: a as u32,
                        b: b as u32,
                        ancestor: Err(e.clone()),
                        p2p_read: Err(e.clone()),
                        p2p_write: Err(e.clone()),
                        p2p_nvlink: Err(e.clone()),
                    });
                    continue;
                }
            };
            let status = |index| read("nvmlDeviceGetP2PStatus", || da.p2p_status(db, index));
            // topology_common_ancestor takes the peer by value: hand it a
            // second wrapper around the same handle.
            // SAFETY: `db`'s handle came from this `nvml`, which lives for
            // the whole process.
            let peer = unsafe { Device::new(db.handle(), nvml) };
            pairs.push(PairFacts {
                a: a as u32,
                b: b as u32,
                ancestor: read("nvmlDeviceGetTopologyCommonAncestor", || {
                    da.topology_common_ancestor(peer)
                })
                .map(ancestor),
                p2p_read: status(P2pCapabilitiesIndex::Read).map(p2p),
                p2p_write: status(P2pCapabilitiesIndex::Write).map(p2p),
                p2p_nvlink: status(P2pCapabilitiesIndex::NvLink).map(p2p),
            });
        }
    }
    Ok(TopologyFacts {
        gpus,
        nvlinks,
        pairs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_call_left_hanging_makes_later_probes_fail_at_once() {
        let (release, wait) = mpsc::channel::<()>();
        let (entered, is_in) = mpsc::channel::<()>();
        let hung = std::thread::spawn(move || {
            call("nvmlDeviceGetEccMode", || {
                let _ = entered.send(());
                let _ = wait.recv();
            })
        });
        is_in.recv().expect("the call started");
        assert_eq!(hung_call(), Some("nvmlDeviceGetEccMode"));
        // Checked before NVML is touched: no library is loaded here.
        let Err(NvmlFailure::Other { detail }) = driver(None) else {
            panic!("a probe behind a hung call must fail")
        };
        assert!(
            detail.starts_with("NVML has not returned from nvmlDeviceGetEccMode"),
            "{detail}"
        );
        let _ = release.send(());
        hung.join().expect("the call returns");
        assert_eq!(hung_call(), None);
    }

    #[test]
    fn proc_names_a_process_by_its_command_line() {
        let me = proc_name(std::process::id()).expect("this process is visible");
        let exe = std::env::current_exe().expect("own path");
        let name = exe.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(me.contains(name), "{me}");
        assert_eq!(proc_name(u32::MAX), None);
    }

    #[test]
    fn unavailable_readings_say_na_or_why() {
        assert_eq!(Unavailable::NotSupported.to_string(), "n/a");
        assert_eq!(
            Unavailable::GpuLost.to_string(),
            "GPU is lost (fallen off the bus)"
        );
        assert_eq!(
            unavailable(NvmlError::FailedToLoadSymbol("x".into())),
            Unavailable::NotSupported
        );
        assert_eq!(
            unavailable(NvmlError::NotSupported),
            Unavailable::NotSupported
        );
        assert_eq!(unavailable(NvmlError::GpuLost), Unavailable::GpuLost);
        // The GPU or its driver at fault, against gpucheck not able to ask.
        assert_eq!(
            unavailable(NvmlError::Unknown),
            Unavailable::Faulted(GpuFault::InternalError)
        );
        assert_eq!(
            unavailable(NvmlError::ResetRequired),
            Unavailable::Faulted(GpuFault::ResetRequired)
        );
        assert!(unavailable(NvmlError::IrqIssue).is_machine_fault());
        for asked_badly in [
            NvmlError::NoPermission,
            NvmlError::OperatingSystem,
            NvmlError::InvalidArg,
            NvmlError::Uninitialized,
        ] {
            let u = unavailable(asked_badly);
            assert!(matches!(u, Unavailable::Failed(_)), "{u:?}");
            assert!(!u.is_machine_fault());
        }
    }

    #[test]
    fn init_errors_map_to_their_failures() {
        assert_eq!(
            init_failure(NvmlError::DriverNotLoaded),
            NvmlFailure::DriverNotLoaded
        );
        assert_eq!(
            init_failure(NvmlError::LibRmVersionMismatch),
            NvmlFailure::LibRmVersionMismatch
        );
        assert_eq!(
            init_failure(NvmlError::NoPermission),
            NvmlFailure::NoPermission
        );
        assert!(matches!(
            init_failure(NvmlError::LibraryNotFound),
            NvmlFailure::LibraryNotFound { .. }
        ));
    }
}

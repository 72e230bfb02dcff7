//! Probe: the CUDA driver (libcuda, through cudarc) and the CUDA runtime
//! libraries (libcudart) a training job would load.
//!
//! cudarc loads libcuda lazily and panics when it is missing or lacks a
//! symbol, so presence is tested first with cudarc's own non-panicking
//! `is_culib_present`, and any panic left is caught and turned into a plain
//! error. Everything here loads driver code: callers run it in a
//! child-isolated check. Nothing here judges; the cuda checks do.

use std::path::{Path, PathBuf};

use cudarc::driver::{result, sys, CudaContext, DriverError};

use super::libs::{self, FoundLib, SearchPlaces};
use super::stage;

pub use crate::domain::compat::CudaVersion;

/// A failed driver API call, with the driver's own name for the error.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CudaCallError {
    /// The driver function that failed ("cuInit").
    pub call: String,
    /// The CUresult code (802).
    pub code: i32,
    /// "CUDA_ERROR_SYSTEM_NOT_READY", from cuGetErrorName when it answers.
    pub name: Option<String>,
    /// cuGetErrorString's sentence, when it answers.
    pub description: Option<String>,
}

impl CudaCallError {
    fn from_driver(call: impl Into<String>, e: DriverError) -> Self {
        CudaCallError {
            call: call.into(),
            code: e.0 as i32,
            name: e
                .error_name()
                .ok()
                .map(|s| s.to_string_lossy().into_owned()),
            description: e
                .error_string()
                .ok()
                .map(|s| s.to_string_lossy().into_owned()),
        }
    }
}

/// Why the driver could not be probed at all.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DriverProbeError {
    /// No libcuda could be loaded under any of the names cudarc tries.
    LibraryNotFound { tried: Vec<String> },
    /// A driver call before any device was touched failed (cuInit, ...);
    /// what was learnt before it comes along.
    Call {
        error: CudaCallError,
        library: Option<PathBuf>,
        cuda_driver_version: Option<CudaVersion>,
    },
    /// libcuda lacks a function cudarc needs (a driver older than CUDA 12),
    /// or cudarc gave up in another way; the panic message.
    Library { detail: String },
}

/// What a host -> device -> host copy of a small buffer gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RoundTrip {
    /// Every byte came back as written.
    Verified { bytes: usize },
    /// The bytes differ from the first differing offset on.
    Mismatch { bytes: usize, first_bad: usize },
}

/// One CUDA device as the driver API sees it (Default: nothing known yet).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceProbe {
    pub ordinal: u32,
    pub name: Option<String>,
    pub compute_capability: Option<(u32, u32)>,
    pub total_mem_mib: Option<u64>,
    /// NVML's spelling of the device's UUID: "GPU-..." for a whole GPU,
    /// "MIG-..." for a MIG instance (see [`device_uuid`]).
    pub uuid: Option<String>,
    /// cuDeviceGetPCIBusId: "00000000:18:00.0".
    pub pci_bus_id: Option<String>,
    /// cuMemGetInfo in this process's context: what a job could still
    /// allocate; None when no context was made.
    pub free_mem_mib: Option<u64>,
    /// Context creation and the copy; None when contexts were not asked for.
    pub context: Option<Result<RoundTrip, CudaCallError>>,
}

/// Everything the driver probe found out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DriverProbe {
    /// The libcuda file the process mapped (from /proc/self/maps).
    pub library: Option<PathBuf>,
    /// cuDriverGetVersion: the newest CUDA this driver supports.
    pub cuda_driver_version: Option<CudaVersion>,
    pub device_count: u32,
    pub devices: Vec<DeviceProbe>,
    /// The CUDA toolkit's stub `libcuda.so` that comes first on the user's
    /// LD_LIBRARY_PATH: the child ran without its folder, or (in-process)
    /// the probe went around it to libcuda.so.1 by hand, trying no contexts.
    pub stub_first: Option<PathBuf>,
}

/// Size of the buffer copied to each device and back.
const ROUND_TRIP_BYTES: usize = 64 * 1024;

/// The bytes written to device `ordinal`: a pattern that differs per device
/// and per offset, so a copy from the wrong place or a stuck bit shows.
pub fn round_trip_pattern(ordinal: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i as u32)
                .wrapping_mul(31)
                .wrapping_add(ordinal.wrapping_mul(7).wrapping_add(1))
                % 251) as u8
        })
        .collect()
}

/// Compare what came back with what was written.
pub fn compare_round_trip(sent: &[u8], back: &[u8]) -> RoundTrip {
    match sent
        .iter()
        .zip(back.iter())
        .position(|(a, b)| a != b)
        .or(if sent.len() == back.len() {
            None
        } else {
            Some(sent.len().min(back.len()))
        }) {
        None => RoundTrip::Verified { bytes: sent.len() },
        Some(first_bad) => RoundTrip::Mismatch {
            bytes: sent.len(),
            first_bad,
        },
    }
}

/// [`libcuda_present_live`] through the boundary ([`crate::seam`]).
pub fn libcuda_present() -> bool {
    crate::seam::answer("cuda::libcuda_present", "", libcuda_present_live)
}

/// True when some libcuda can be loaded the way cudarc will load it.
fn libcuda_present_live() -> bool {
    // SAFETY: only dlopen/dlclose of the candidate names; no call into it.
    unsafe { sys::is_culib_present() }
}

/// The library names cudarc tries, in order.
pub fn libcuda_candidates() -> Vec<String> {
    cudarc::get_lib_name_candidates("cuda")
}

/// The first mapped file of this process whose name starts with `prefix`
/// ("libcuda.so"), read from /proc/self/maps.
pub fn mapped_library(prefix: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    find_mapped(&maps, prefix)
}

/// The first path in /proc/<pid>/maps text whose file name starts with
/// `prefix`. The path is the rest of the line from its first '/' (the
/// address, permission, offset, device and inode fields never hold one), so
/// folders with spaces survive; a " (deleted)" mark is dropped.
pub fn find_mapped(maps: &str, prefix: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(|l| l.find('/').map(|i| &l[i..]))
        .map(|p| PathBuf::from(p.strip_suffix(" (deleted)").unwrap_or(p)))
        .find(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with(prefix))
                .unwrap_or(false)
        })
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "cudarc panicked".to_string())
}

/// Run `f`, turning a cudarc panic (missing library or symbol) into an error.
fn no_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_text(p.as_ref()))
}

/// [`driver_cuda_version_live`] through the boundary ([`crate::seam`]).
pub fn driver_cuda_version() -> Option<CudaVersion> {
    crate::seam::answer("cuda::driver_cuda_version", "", || {
        driver_cuda_version_live()
    })
}

/// The newest CUDA version the installed driver supports, from
/// cuDriverGetVersion (no cuInit, no GPU needed). None without a libcuda.
fn driver_cuda_version_live() -> Option<CudaVersion> {
    if !libcuda_present() {
        return None;
    }
    stage("cuDriverGetVersion");
    no_panic(|| {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: plain out-parameter call into libcuda.
        let rc = unsafe { sys::cuDriverGetVersion(&mut v) };
        (rc == sys::CUresult::CUDA_SUCCESS).then_some(v)
    })
    .ok()
    .flatten()
    .and_then(CudaVersion::from_encoded)
}

/// [`probe_driver_live`] through the boundary ([`crate::seam`]).
pub fn probe_driver(contexts: bool) -> Result<DriverProbe, DriverProbeError> {
    crate::seam::answer("cuda::probe_driver", &contexts.to_string(), || {
        probe_driver_live(contexts)
    })
}

/// Load libcuda, cuInit, read the driver version and the device count, and,
/// with `contexts`, retain the primary context of every device and copy a
/// small buffer there and back. Each step is marked with [`stage`] so a
/// hang names it.
fn probe_driver_live(contexts: bool) -> Result<DriverProbe, DriverProbeError> {
    stage("dlopen libcuda");
    // cudarc loads `libcuda.so` before `libcuda.so.1`: with the toolkit's
    // stubs folder on LD_LIBRARY_PATH it would get the stub, which fails
    // every call, where PyTorch (which loads libcuda.so.1) works.
    // The runner starts a child without the stubs folder (see
    // [`child_library_path`]); run in-process with it still first, go
    // around it by hand.
    if let Some(stub) = stub_libcuda_first(
        crate::seam::env("LD_LIBRARY_PATH")
            .map(std::ffi::OsString::from)
            .as_deref(),
    ) {
        if let Some(probe) = soname::probe(stub) {
            return probe;
        }
    }
    if !libcuda_present() {
        return Err(DriverProbeError::LibraryNotFound {
            tried: libcuda_candidates(),
        });
    }
    match no_panic(|| probe_loaded(contexts)) {
        Ok(r) => r.map(|p| DriverProbe {
            stub_first: stub_first_on_path(),
            ..p
        }),
        Err(detail) => Err(DriverProbeError::Library { detail }),
    }
}

fn probe_loaded(contexts: bool) -> Result<DriverProbe, DriverProbeError> {
    stage("cuDriverGetVersion");
    let mut encoded: std::ffi::c_int = 0;
    // SAFETY: plain out-parameter call; valid before cuInit.
    let rc = unsafe { sys::cuDriverGetVersion(&mut encoded) };
    let cuda_driver_version = if rc == sys::CUresult::CUDA_SUCCESS {
        CudaVersion::from_encoded(encoded)
    } else {
        None
    };
    let library = mapped_library("libcuda.so");

    let failed = |call: &str, e: DriverError| DriverProbeError::Call {
        error: CudaCallError::from_driver(call, e),
        library: library.clone(),
        cuda_driver_version,
    };
    stage("cuInit");
    result::init().map_err(|e| failed("cuInit", e))?;
    stage("cuDeviceGetCount");
    let count = result::device::get_count().map_err(|e| failed("cuDeviceGetCount", e))?;
    let device_count = count.max(0) as u32;

    let mut devices = Vec::with_capacity(device_count as usize);
    for ordinal in 0..device_count {
        devices.push(probe_device(ordinal, contexts));
    }
    Ok(DriverProbe {
        library,
        cuda_driver_version,
        device_count,
        devices,
        stub_first: None,
    })
}

fn probe_device(ordinal: u32, contexts: bool) -> DeviceProbe {
    stage(&format!("cuDeviceGet (device {ordinal})"));
    let mut dev = DeviceProbe {
        ordinal,
        ..DeviceProbe::default()
    };
    let cu_device = match result::device::get(ordinal as i32) {
        Ok(d) => d,
        Err(e) => {
            dev.context = Some(Err(CudaCallError::from_driver("cuDeviceGet", e)));
            return dev;
        }
    };
    dev.name = result::device::get_name(cu_device).ok();
    // SAFETY: attribute and memory queries on a device handle the driver gave us.
    unsafe {
        let major = result::device::get_attribute(
            cu_device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        );
        let minor = result::device::get_attribute(
            cu_device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        );
        if let (Ok(major), Ok(minor)) = (major, minor) {
            dev.compute_capability = Some((major.max(0) as u32, minor.max(0) as u32));
        }
        dev.total_mem_mib = result::device::total_mem(cu_device)
            .ok()
            .map(|b| b as u64 / (1024 * 1024));
    }
    dev.uuid = device_uuid(cu_device);
    dev.pci_bus_id = pci_bus_id(cu_device);
    if contexts {
        dev.context = Some(round_trip(ordinal, &mut dev.free_mem_mib));
    }
    dev
}

/// A CUDA device UUID in NVML's spelling: PREFIX-8-4-4-4-12 hex digits.
pub fn format_uuid(prefix: &str, bytes: &[std::ffi::c_char; 16]) -> String {
    let hex: String = bytes.iter().map(|&b| format!("{:02x}", b as u8)).collect();
    format!(
        "{prefix}-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The device's UUID as NVML writes it. cuDeviceGetUuid_v2 (CUDA 11.4+)
/// gives a MIG instance's own UUID where the v1 entry point gives its
/// parent GPU's (CUDA driver API reference); so v2 answering differently
/// from v1 marks a MIG instance, spelled "MIG-..." as NVML does. A driver
/// without v2 gets the v1 answer.
pub fn device_uuid(dev: sys::CUdevice) -> Option<String> {
    let get = |f: unsafe fn(*mut sys::CUuuid, sys::CUdevice) -> sys::CUresult| {
        let mut u = std::mem::MaybeUninit::<sys::CUuuid>::zeroed();
        // SAFETY: an out-parameter call on a device handle the driver gave;
        // cudarc panics (caught here) when the symbol is missing.
        no_panic(|| unsafe { f(u.as_mut_ptr(), dev) })
            .ok()
            .filter(|rc| *rc == sys::CUresult::CUDA_SUCCESS)
            // SAFETY: the call succeeded and filled the struct.
            .map(|_| unsafe { u.assume_init() }.bytes)
    };
    let v1 = get(sys::cuDeviceGetUuid);
    let v2 = get(sys::cuDeviceGetUuid_v2);
    match (v1, v2) {
        (Some(gpu), Some(own)) if gpu != own => Some(format_uuid("MIG", &own)),
        (_, Some(own)) => Some(format_uuid("GPU", &own)),
        (Some(gpu), None) => Some(format_uuid("GPU", &gpu)),
        (None, None) => None,
    }
}

/// cuDeviceGetPCIBusId, upper-case hex as NVML writes it.
fn pci_bus_id(dev: sys::CUdevice) -> Option<String> {
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: the buffer's length is passed; the driver NUL-terminates.
    let rc = no_panic(|| unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), 32, dev) }).ok()?;
    if rc != sys::CUresult::CUDA_SUCCESS {
        return None;
    }
    // SAFETY: NUL-terminated within the buffer (checked by from_bytes_until_nul).
    let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
    let text = std::ffi::CStr::from_bytes_until_nul(&bytes).ok()?;
    Some(text.to_string_lossy().to_uppercase())
}

fn round_trip(ordinal: u32, free_mem_mib: &mut Option<u64>) -> Result<RoundTrip, CudaCallError> {
    stage(&format!("cuDevicePrimaryCtxRetain (device {ordinal})"));
    let ctx = CudaContext::new(ordinal as usize)
        .map_err(|e| CudaCallError::from_driver("cuDevicePrimaryCtxRetain", e))?;
    stage(&format!("cuMemGetInfo (device {ordinal})"));
    *free_mem_mib = ctx.mem_get_info().ok().map(|(free, _)| free as u64 >> 20);
    let stream = ctx.default_stream();
    let sent = round_trip_pattern(ordinal, ROUND_TRIP_BYTES);
    stage(&format!("cuMemcpyHtoD (device {ordinal})"));
    let on_device = stream
        .clone_htod(&sent)
        .map_err(|e| CudaCallError::from_driver("cuMemcpyHtoD", e))?;
    stage(&format!("cuMemcpyDtoH (device {ordinal})"));
    let back = stream
        .clone_dtoh(&on_device)
        .map_err(|e| CudaCallError::from_driver("cuMemcpyDtoH", e))?;
    stage(&format!("cuStreamSynchronize (device {ordinal})"));
    stream
        .synchronize()
        .map_err(|e| CudaCallError::from_driver("cuStreamSynchronize", e))?;
    Ok(compare_round_trip(&sent, &back))
}

/// Set by the runner in a child-isolated check's environment when the
/// user's LD_LIBRARY_PATH puts a CUDA toolkit stub `libcuda.so` first: the
/// stub's path. The child's own LD_LIBRARY_PATH then lacks the stubs
/// folder (see [`child_library_path`]).
pub const STUB_ENV: &str = "GPUCHECK_LIBCUDA_STUB";

/// A toolkit `stubs` folder holding a `libcuda.so`.
fn is_stub_dir(dir: &Path) -> bool {
    dir.file_name().is_some_and(|n| n == "stubs") && dir.join("libcuda.so").exists()
}

/// The LD_LIBRARY_PATH for a child-isolated check, when a stub `libcuda.so`
/// comes first on `ld_library_path`: the same folders without the stubs
/// folders, and the stub. cudarc tries `libcuda.so` before `libcuda.so.1`
/// and the loader reads LD_LIBRARY_PATH only when a process starts, so the
/// child must start without the stubs folder to load the driver's
/// libcuda.so.1, the library cuda.driver judges. A stubs folder holds
/// link-time stubs only, never a libcuda.so.1, so nothing else changes.
pub fn child_library_path(
    ld_library_path: Option<&std::ffi::OsStr>,
) -> Option<(std::ffi::OsString, PathBuf)> {
    let stub = stub_libcuda_first(ld_library_path)?;
    let kept: Vec<PathBuf> = std::env::split_paths(ld_library_path?)
        .filter(|d| !is_stub_dir(d))
        .collect();
    Some((std::env::join_paths(kept).ok()?, stub))
}

/// [`stub_first_on_path_live`] through the boundary ([`crate::seam`]).
pub fn stub_first_on_path() -> Option<PathBuf> {
    crate::seam::answer("cuda::stub_first_on_path", "", stub_first_on_path_live)
}

/// The stub `libcuda.so` the user's LD_LIBRARY_PATH puts first: as the
/// runner recorded it for this child ([`STUB_ENV`]), else as found on this
/// process's LD_LIBRARY_PATH.
fn stub_first_on_path_live() -> Option<PathBuf> {
    crate::seam::env(STUB_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            stub_libcuda_first(
                crate::seam::env("LD_LIBRARY_PATH")
                    .map(std::ffi::OsString::from)
                    .as_deref(),
            )
        })
}

/// The `libcuda.so` the loader finds first on LD_LIBRARY_PATH, when it lies
/// in a CUDA toolkit `stubs` folder (`/usr/local/cuda/lib64/stubs`): a
/// library for linking only, whose every call fails with
/// CUDA_ERROR_STUB_LIBRARY.
pub fn stub_libcuda_first(ld_library_path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(ld_library_path?)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join("libcuda.so"))
        .find(|p| p.exists())
        .filter(|p| {
            p.parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "stubs")
        })
}

/// The driver probed through `libcuda.so.1` itself, looked up by hand
/// because cudarc would take the stub `libcuda.so` first: version, cuInit,
/// the devices and their properties; no contexts.
mod soname {
    use std::ffi::{c_char, c_int, c_uint, CStr};
    use std::path::PathBuf;

    use super::DriverProbeError;
    use super::{mapped_library, stage, CudaCallError, CudaVersion, DeviceProbe, DriverProbe};

    type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
    type ErrorText = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;

    /// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR (cuda.h).
    const CC_MAJOR: c_int = 75;
    const CC_MINOR: c_int = 76;

    struct Driver {
        lib: libloading::Library,
    }

    impl Driver {
        /// A function of libcuda by name. `T` must be its C signature
        /// from cuda.h, as each caller's type says.
        fn sym<T: Copy>(&self, name: &str) -> Result<T, DriverProbeError> {
            // SAFETY: the caller names the function's signature from cuda.h.
            unsafe { self.lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| DriverProbeError::Library {
                    detail: format!("Missing symbol {name}: {e}"),
                })
        }

        fn text(&self, f: &str, code: c_int) -> Option<String> {
            let f: ErrorText = self.sym(f).ok()?;
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: out-parameter call; the driver hands back a static string.
            let rc = unsafe { f(code, &mut p) };
            // SAFETY: a non-null answer is a NUL-terminated static string.
            (rc == 0 && !p.is_null())
                .then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        }

        fn error(&self, call: &str, code: c_int) -> CudaCallError {
            CudaCallError {
                call: call.to_string(),
                code,
                name: self.text("cuGetErrorName", code),
                description: self.text("cuGetErrorString", code),
            }
        }

        /// Call an `int f(int *out)` function; Err is the CUresult.
        fn int_out(&self, name: &str) -> Result<Result<c_int, c_int>, DriverProbeError> {
            let f: IntOut = self.sym(name)?;
            let mut v: c_int = 0;
            // SAFETY: plain out-parameter call.
            let rc = unsafe { f(&mut v) };
            Ok(if rc == 0 { Ok(v) } else { Err(rc) })
        }

        fn device(&self, ordinal: u32) -> DeviceProbe {
            stage(&format!("cuDeviceGet (device {ordinal})"));
            let mut dev = DeviceProbe {
                ordinal,
                ..DeviceProbe::default()
            };
            let get: Result<unsafe extern "C" fn(*mut c_int, c_int) -> c_int, _> =
                self.sym("cuDeviceGet");
            let mut handle: c_int = 0;
            // SAFETY: out-parameter call with the ordinal.
            match get.map(|f| unsafe { f(&mut handle, ordinal as c_int) }) {
                Ok(0) => {}
                Ok(rc) => {
                    dev.context = Some(Err(self.error("cuDeviceGet", rc)));
                    return dev;
                }
                Err(_) => return dev,
            }
            if let Ok(f) = self
                .sym::<unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int>("cuDeviceGetName")
            {
                let mut buf = [0 as c_char; 256];
                // SAFETY: the buffer's length is passed; the driver NUL-terminates.
                if unsafe { f(buf.as_mut_ptr(), buf.len() as c_int, handle) } == 0 {
                    // SAFETY: NUL-terminated within the buffer.
                    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
                    dev.name = Some(name.to_string_lossy().into_owned());
                }
            }
            if let Ok(f) = self.sym::<unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int>(
                "cuDeviceGetAttribute",
            ) {
                let (mut major, mut minor): (c_int, c_int) = (0, 0);
                // SAFETY: out-parameter calls on a device handle the driver gave.
                let ok = unsafe {
                    f(&mut major, CC_MAJOR, handle) == 0 && f(&mut minor, CC_MINOR, handle) == 0
                };
                if ok {
                    dev.compute_capability = Some((major.max(0) as u32, minor.max(0) as u32));
                }
            }
            if let Ok(f) =
                self.sym::<unsafe extern "C" fn(*mut usize, c_int) -> c_int>("cuDeviceTotalMem_v2")
            {
                let mut bytes: usize = 0;
                // SAFETY: out-parameter call on a device handle the driver gave.
                if unsafe { f(&mut bytes, handle) } == 0 {
                    dev.total_mem_mib = Some(bytes as u64 / (1024 * 1024));
                }
            }
            dev
        }
    }

    /// None when libcuda.so.1 does not load (no driver: then the stub's
    /// own error says what is wrong).
    pub fn probe(stub: PathBuf) -> Option<Result<DriverProbe, DriverProbeError>> {
        // SAFETY: loading the driver library runs its initialisers, as
        // cudarc's own load does.
        let lib = unsafe { libloading::Library::new("libcuda.so.1") }.ok()?;
        Some(probe_with(&Driver { lib }, stub))
    }

    fn probe_with(d: &Driver, stub: PathBuf) -> Result<DriverProbe, DriverProbeError> {
        let library = mapped_library("libcuda.so");
        stage("cuDriverGetVersion");
        let cuda_driver_version = d
            .int_out("cuDriverGetVersion")?
            .ok()
            .and_then(CudaVersion::from_encoded);
        let failed = |call: &str, rc: c_int| DriverProbeError::Call {
            error: d.error(call, rc),
            library: library.clone(),
            cuda_driver_version,
        };
        stage("cuInit");
        let init: unsafe extern "C" fn(c_uint) -> c_int = d.sym("cuInit")?;
        // SAFETY: cuInit(0), as every CUDA program starts.
        let rc = unsafe { init(0) };
        if rc != 0 {
            return Err(failed("cuInit", rc));
        }
        stage("cuDeviceGetCount");
        let count = d
            .int_out("cuDeviceGetCount")?
            .map_err(|rc| failed("cuDeviceGetCount", rc))?;
        let device_count = count.max(0) as u32;
        Ok(DriverProbe {
            library,
            cuda_driver_version,
            device_count,
            devices: (0..device_count).map(|i| d.device(i)).collect(),
            stub_first: Some(stub),
        })
    }
}

/// One libcudart on disk and the version it reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuntimeCopy {
    pub lib: FoundLib,
    /// cudaRuntimeGetVersion, or why it could not be read.
    pub version: Result<CudaVersion, String>,
}

/// [`find_runtimes_live`] through the boundary ([`crate::seam`]).
pub fn find_runtimes(site_packages: &[PathBuf]) -> Vec<RuntimeCopy> {
    crate::seam::answer("cuda::find_runtimes", &format!("{site_packages:?}"), || {
        find_runtimes_live(site_packages)
    })
}

/// Every libcudart a job could load (LD_LIBRARY_PATH, the loader's cache,
/// system folders, CUDA_HOME/CUDA_PATH, /usr/local/cuda*, and the wheels of
/// the Python environment whose site-packages are given), with versions.
fn find_runtimes_live(site_packages: &[PathBuf]) -> Vec<RuntimeCopy> {
    let places = SearchPlaces::from_env(None, site_packages);
    libs::find(&places, "libcudart.so")
        .into_iter()
        .map(|lib| {
            stage(&format!("cudaRuntimeGetVersion ({})", lib.path.display()));
            let version = libs::call_version_fn(&lib.path, "cudaRuntimeGetVersion").and_then(|v| {
                CudaVersion::from_encoded(v).ok_or_else(|| format!("implausible version {v}"))
            });
            RuntimeCopy { lib, version }
        })
        .collect()
}

/// [`compat_libcuda_dirs_live`] through the boundary ([`crate::seam`]).
pub fn compat_libcuda_dirs(ld_library_path: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    crate::seam::answer(
        "cuda::compat_libcuda_dirs",
        &ld_library_path
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        || compat_libcuda_dirs_live(ld_library_path),
    )
}

/// Folders on LD_LIBRARY_PATH that hold a libcuda from the cuda-compat
/// (forward compatibility) package, which replaces the system driver's
/// libcuda. The package installs to /usr/local/cuda-X.Y/compat, so only
/// folders with a `compat` path component count.
fn compat_libcuda_dirs_live(ld_library_path: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let Some(v) = ld_library_path else {
        return Vec::new();
    };
    std::env::split_paths(v)
        .filter(|d| !d.as_os_str().is_empty() && is_compat_path(d))
        .filter(|d| {
            std::fs::read_dir(d)
                .map(|rd| {
                    rd.flatten()
                        .any(|e| libs::name_matches(&e.file_name().to_string_lossy(), "libcuda.so"))
                })
                .unwrap_or(false)
        })
        .collect()
}

/// [`kernel_driver_version_live`] through the boundary ([`crate::seam`]).
pub fn kernel_driver_version() -> Option<String> {
    crate::seam::answer("cuda::kernel_driver_version", "", || {
        kernel_driver_version_live()
    })
}

/// The kernel module's version ("570.86.15") from /proc/driver/nvidia/version,
/// under the folder that stands for /proc (GPUCHECK_PROC_ROOT), as the other
/// /proc readers do.
fn kernel_driver_version_live() -> Option<String> {
    kernel_driver_version_in(&super::sysfs::proc_root())
}

/// [`kernel_driver_version`] under `proc` (standing for /proc).
pub fn kernel_driver_version_in(proc: &Path) -> Option<String> {
    // A regular file (as /proc's are), read without waiting and within a
    // bound: the folder may be a tree someone else made.
    let bytes = crate::input::read_regular(&proc.join("driver/nvidia/version"), 64 * 1024).ok()?;
    parse_proc_driver_version(&String::from_utf8_lossy(&bytes))
}

/// Parse "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Tue ..."
/// (also the "Open Kernel Module" variant).
pub fn parse_proc_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    let after = line.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// Whether `path` looks like a library under a forward-compatibility folder.
pub fn is_compat_path(path: &Path) -> bool {
    path.components()
        .any(|c| c.as_os_str().to_string_lossy() == "compat")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_decode_like_cuda() {
        assert_eq!(
            CudaVersion::from_encoded(12080),
            Some(CudaVersion::new(12, 8))
        );
        assert_eq!(
            CudaVersion::from_encoded(13020),
            Some(CudaVersion::new(13, 2))
        );
        assert_eq!(
            CudaVersion::from_encoded(11040),
            Some(CudaVersion::new(11, 4))
        );
        assert_eq!(CudaVersion::from_encoded(0), None);
        assert_eq!(CudaVersion::parse("13.2"), Some(CudaVersion::new(13, 2)));
        assert_eq!(CudaVersion::parse("12.8.90"), Some(CudaVersion::new(12, 8)));
        assert_eq!(CudaVersion::parse("none"), None);
        assert_eq!(CudaVersion::new(12, 10).to_string(), "12.10");
        assert!(CudaVersion::new(12, 10) > CudaVersion::new(12, 9));
    }

    #[test]
    fn round_trip_comparison_finds_the_first_bad_byte() {
        let sent = round_trip_pattern(3, 1000);
        assert_eq!(
            compare_round_trip(&sent, &sent),
            RoundTrip::Verified { bytes: 1000 }
        );
        let mut back = sent.clone();
        back[517] ^= 0x10;
        assert_eq!(
            compare_round_trip(&sent, &back),
            RoundTrip::Mismatch {
                bytes: 1000,
                first_bad: 517
            }
        );
        assert_eq!(
            compare_round_trip(&sent, &sent[..10]),
            RoundTrip::Mismatch {
                bytes: 1000,
                first_bad: 10
            }
        );
        assert_ne!(round_trip_pattern(0, 64), round_trip_pattern(1, 64));
    }

    #[test]
    fn proc_driver_version_parses_both_module_kinds() {
        let closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Tue Jan 14 00:00:00 UTC 2025\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(
            parse_proc_driver_version(closed).as_deref(),
            Some("570.86.15")
        );
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)\n";
        assert_eq!(
            parse_proc_driver_version(open).as_deref(),
            Some("580.65.06")
        );
        assert_eq!(parse_proc_driver_version("garbage"), None);
    }

    #[test]
    fn compat_dirs_are_the_ones_holding_a_libcuda() {
        let dir = tempfile::tempdir().unwrap();
        let compat = dir.path().join("cuda-13.0/compat");
        let other = dir.path().join("lib");
        let fake = dir.path().join("fixtures/cuda");
        for d in [&compat, &other, &fake] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(compat.join("libcuda.so.580.65.06"), b"x").unwrap();
        std::fs::write(other.join("libcudart.so.13"), b"x").unwrap();
        // A libcuda elsewhere on the path is not the compat package.
        std::fs::write(fake.join("libcuda.so.1"), b"x").unwrap();
        let v = std::env::join_paths([&other, &fake, &compat]).unwrap();
        assert_eq!(compat_libcuda_dirs(Some(&v)), vec![compat.clone()]);
        assert!(is_compat_path(&compat.join("libcuda.so.1")));
        assert!(!is_compat_path(&other.join("libcuda.so.1")));
    }

    #[test]
    fn the_kernel_module_version_is_read_under_the_proc_root() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/proc/open");
        assert_eq!(
            kernel_driver_version_in(&root).as_deref(),
            Some("570.86.15")
        );
        assert_eq!(kernel_driver_version_in(&root.join("missing")), None);
    }

    #[test]
    fn a_child_starts_without_the_stubs_folder() {
        let dir = tempfile::tempdir().unwrap();
        let stubs = dir.path().join("cuda-12.8/lib64/stubs");
        let driver = dir.path().join("driver");
        for d in [&stubs, &driver] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(stubs.join("libcuda.so"), b"x").unwrap();
        let path = std::env::join_paths([&stubs, &driver]).unwrap();
        let (child, stub) = child_library_path(Some(&path)).unwrap();
        assert_eq!(child, driver.as_os_str());
        assert_eq!(stub, stubs.join("libcuda.so"));
        // A real libcuda.so first: the child inherits the path as it is.
        std::fs::write(driver.join("libcuda.so"), b"x").unwrap();
        let path = std::env::join_paths([&driver, &stubs]).unwrap();
        assert_eq!(child_library_path(Some(&path)), None);
        assert_eq!(child_library_path(None), None);
    }

    #[test]
    fn a_stub_libcuda_counts_only_when_it_comes_first() {
        let dir = tempfile::tempdir().unwrap();
        let stubs = dir.path().join("cuda-12.8/lib64/stubs");
        let driver = dir.path().join("driver");
        for d in [&stubs, &driver] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(stubs.join("libcuda.so"), b"x").unwrap();
        let first = std::env::join_paths([&stubs, &driver]).unwrap();
        assert_eq!(
            stub_libcuda_first(Some(&first)),
            Some(stubs.join("libcuda.so"))
        );
        // A real libcuda.so before the stubs is what the loader takes.
        std::fs::write(driver.join("libcuda.so"), b"x").unwrap();
        let after = std::env::join_paths([&driver, &stubs]).unwrap();
        assert_eq!(stub_libcuda_first(Some(&after)), None);
        assert_eq!(stub_libcuda_first(None), None);
    }

    #[test]
    fn mapped_paths_keep_their_spaces() {
        let maps = "\
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0 
7f1c2b000000-7f1c2b400000 r-xp 00000000 fd:01 1234                       /opt/my drivers/lib/libcuda.so.570.86.15
7f1c2c000000-7f1c2c100000 r-xp 00000000 fd:01 99 /tmp/x/libcudart.so.13 (deleted)
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
";
        assert_eq!(
            find_mapped(maps, "libcuda.so"),
            Some(PathBuf::from("/opt/my drivers/lib/libcuda.so.570.86.15"))
        );
        assert_eq!(
            find_mapped(maps, "libcudart.so"),
            Some(PathBuf::from("/tmp/x/libcudart.so.13"))
        );
        assert_eq!(find_mapped(maps, "libnccl.so"), None);
    }

    #[test]
    fn uuids_are_spelled_like_nvml() {
        let bytes: [std::ffi::c_char; 16] =
            std::array::from_fn(|i| (0x10 * i as u8 + 1) as std::ffi::c_char);
        assert_eq!(
            format_uuid("GPU", &bytes),
            "GPU-01112131-4151-6171-8191-a1b1c1d1e1f1"
        );
    }

    #[test]
    fn round_trip_pattern_takes_any_ordinal() {
        // A driver may report any device count; the pattern must not overflow.
        assert_eq!(round_trip_pattern(u32::MAX, 4).len(), 4);
    }

    #[test]
    fn mapped_library_finds_libc() {
        // Every Rust test binary on Linux maps libc.
        let p = mapped_library("libc.so").or_else(|| mapped_library("libc-"));
        assert!(p.is_some());
    }
}

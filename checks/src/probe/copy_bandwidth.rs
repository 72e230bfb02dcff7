//! Probe: pinned host-to-device and device-to-host copy bandwidth of every
//! CUDA device, timed with CUDA events around cuMemcpyHtoDAsync /
//! cuMemcpyDtoHAsync on a stream of the device's primary context, best of a
//! few repeats (the method of CUDA's bandwidthTest sample). Loads libcuda and
//! creates contexts, so the check that calls it runs child-isolated.

use std::ffi::{c_char, c_void, CStr};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use cudarc::driver::{result, sys, DriverError};

use super::stage;

/// The buffer each copy moves: a few hundred MiB, large enough that launch
/// overhead is noise (bandwidthTest's "range" mode reaches its plateau from
/// tens of MiB).
pub const COPY_BYTES: usize = 256 << 20;
/// The smallest buffer worth timing when little device memory is free.
pub const MIN_COPY_BYTES: usize = 16 << 20;
/// Repeats per direction; the best counts (the first one pays for TLB and
/// clock ramp-up).
pub const REPEATS: usize = 3;
/// Stop repeating a direction once its copies took this long: a link that
/// slow is measured well enough, and the check keeps to its budget.
pub const DIRECTION_BUDGET: Duration = Duration::from_secs(1);

/// A failed driver call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CopyError {
    /// "cuMemHostAlloc".
    pub call: String,
    /// "CUDA_ERROR_OUT_OF_MEMORY", or the code when the driver has no name.
    pub error: String,
}

impl CopyError {
    fn new(call: &str, e: DriverError) -> Self {
        let error = e
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("error {}", e.0 as i32));
        CopyError {
            call: call.to_string(),
            error,
        }
    }
}

/// What one device's copies measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CopyRates {
    pub bytes: usize,
    /// Best host-to-device rate, GB/s (1e9 bytes per second).
    pub h2d_gbps: f64,
    pub d2h_gbps: f64,
}

/// One CUDA device.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeviceCopy {
    pub ordinal: u32,
    pub name: Option<String>,
    /// cuDeviceGetPCIBusId: "0000:18:00.0".
    pub pci_bus_id: Option<String>,
    /// Where the measuring thread ran and the pinned buffer was allocated:
    /// the GPU's own NUMA node, when sysfs names its CPUs and the thread
    /// could be bound to them.
    pub bound: Option<Locality>,
    pub rates: Result<CopyRates, CopyError>,
}

/// A GPU's place among the host's CPUs, from sysfs: the PCI device's
/// `numa_node` and `local_cpulist` (what NVML's nvmlDeviceGetCpuAffinity
/// reports too).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Locality {
    /// None where the kernel says -1 (no NUMA).
    pub numa_node: Option<u32>,
    /// "0-31,64-95", as sysfs writes it.
    pub cpulist: String,
}

/// A CPU list as the kernel writes it ("0-3,8,10-11") into CPU numbers.
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for range in text.trim().split(',').filter(|r| !r.is_empty()) {
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let c: usize = range.trim().parse().ok()?;
                (c, c)
            }
        };
        if hi < lo {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// [`locality_live`] through the boundary ([`crate::seam`]).
pub fn locality(sysfs: &Path, pci_bus_id: &str) -> Option<Locality> {
    crate::seam::answer(
        "copy_bandwidth::locality",
        &format!("{}, {pci_bus_id}", sysfs.display()),
        || locality_live(sysfs, pci_bus_id),
    )
}

/// The locality of the GPU at `pci_bus_id` ("00000000:18:00.0", CUDA's
/// spelling) under `sysfs` (standing for /sys):
/// `bus/pci/devices/0000:18:00.0/{local_cpulist,numa_node}`.
fn locality_live(sysfs: &Path, pci_bus_id: &str) -> Option<Locality> {
    let slot = crate::domain::xid::PciSlot::parse(pci_bus_id)?;
    let dir = sysfs.join(format!("bus/pci/devices/{slot}.0"));
    let cpulist = super::sysfs::attr(&dir.join("local_cpulist"))?;
    parse_cpulist(&cpulist)?;
    let numa_node = super::sysfs::attr(&dir.join("numa_node"))
        .and_then(|n| n.parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    Some(Locality { numa_node, cpulist })
}

/// The calling thread bound to some CPUs; its old affinity back on drop.
struct Binding {
    saved: CpuSet,
}

impl Binding {
    /// Bind the calling thread to `cpus`; None when that fails (CPUs this
    /// process may not use, as in a container's cpuset).
    fn to(cpus: &[usize]) -> Option<Binding> {
        let me = Pid::from_raw(0);
        let saved = sched_getaffinity(me).ok()?;
        let mut set = CpuSet::new();
        for &c in cpus {
            set.set(c).ok()?;
        }
        sched_setaffinity(me, &set).ok()?;
        Some(Binding { saved })
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        let _ = sched_setaffinity(Pid::from_raw(0), &self.saved);
    }
}

/// Why no device could be measured at all.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CopyProbeError {
    /// No libcuda could be loaded.
    NoLibcuda,
    /// cuInit or cuDeviceGetCount failed, or cudarc gave up (a symbol
    /// missing from an old driver).
    Driver(String),
    /// cuInit answered CUDA_ERROR_STUB_LIBRARY: the libcuda loaded (this
    /// file) is the CUDA toolkit's link-time stub.
    StubLibrary(std::path::PathBuf),
}

/// [`measure_all_live`] through the boundary ([`crate::seam`]).
pub fn measure_all() -> Result<Vec<DeviceCopy>, CopyProbeError> {
    crate::seam::answer("copy_bandwidth::measure_all", "", measure_all_live)
}

/// Measure every device the driver lists.
fn measure_all_live() -> Result<Vec<DeviceCopy>, CopyProbeError> {
    if !super::cuda::libcuda_present() {
        return Err(CopyProbeError::NoLibcuda);
    }
    let run = std::panic::catch_unwind(|| -> Result<Vec<DeviceCopy>, CopyProbeError> {
        stage("cuInit");
        result::init().map_err(|e| {
            let stub = (e.0 == sys::CUresult::CUDA_ERROR_STUB_LIBRARY)
                .then(|| super::cuda::mapped_library("libcuda.so"))
                .flatten();
            stub.map_or_else(
                || CopyProbeError::Driver(describe("cuInit", e)),
                CopyProbeError::StubLibrary,
            )
        })?;
        let count = result::device::get_count()
            .map_err(|e| CopyProbeError::Driver(describe("cuDeviceGetCount", e)))?;
        Ok((0..count.max(0) as u32).map(measure_device).collect())
    });
    run.unwrap_or_else(|_| {
        Err(CopyProbeError::Driver(
            "the CUDA driver API panicked".into(),
        ))
    })
}

fn describe(call: &str, e: DriverError) -> String {
    let e = CopyError::new(call, e);
    format!("{} failed: {}", e.call, e.error)
}

/// [`measure_again_live`] through the boundary ([`crate::seam`]).
pub fn measure_again(ordinal: u32) -> DeviceCopy {
    crate::seam::answer(
        "copy_bandwidth::measure_again",
        &crate::seam::nth(&ordinal.to_string()),
        || measure_again_live(ordinal),
    )
}

/// Measure one device again (cuInit has run): a figure under its threshold
/// is measured again before it counts.
fn measure_again_live(ordinal: u32) -> DeviceCopy {
    std::panic::catch_unwind(|| measure_device(ordinal)).unwrap_or_else(|_| DeviceCopy {
        ordinal,
        name: None,
        pci_bus_id: None,
        bound: None,
        rates: Err(CopyError {
            call: "cuInit".into(),
            error: "the CUDA driver API panicked".into(),
        }),
    })
}

/// Measure one device from a thread bound to its NUMA node's CPUs, so the
/// pinned buffer is allocated (and first touched) there and no copy crosses
/// the CPU interconnect: nvbandwidth's method (it sets the CPU affinity
/// NVML reports for the GPU before allocating host memory). Unbound when
/// sysfs does not say or the binding is refused.
fn measure_device(ordinal: u32) -> DeviceCopy {
    stage(&format!("cuDeviceGet (device {ordinal})"));
    let device = result::device::get(ordinal as i32);
    let name = device.ok().and_then(|d| result::device::get_name(d).ok());
    let pci_bus_id = device.ok().and_then(pci_bus_id);
    let place = pci_bus_id
        .as_deref()
        .and_then(|id| locality(&super::sysfs::sysfs_root(), id));
    let binding = place
        .as_ref()
        .and_then(|p| Binding::to(&parse_cpulist(&p.cpulist)?));
    let bound = binding.as_ref().and(place);
    let rates = match device {
        Ok(d) => measure_on(d, ordinal),
        Err(e) => Err(CopyError::new("cuDeviceGet", e)),
    };
    drop(binding);
    DeviceCopy {
        ordinal,
        name,
        pci_bus_id,
        bound,
        rates,
    }
}

fn pci_bus_id(device: sys::CUdevice) -> Option<String> {
    let mut buf = [0 as c_char; 32];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
    let rc = unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, device) };
    (rc == sys::CUresult::CUDA_SUCCESS).then(|| {
        // SAFETY: NUL-terminated by the driver (the buffer's last byte is 0).
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    })
}

/// Buffers and handles of one measurement, released on drop.
struct Resources {
    host: *mut c_void,
    dev: sys::CUdeviceptr,
    stream: sys::CUstream,
    events: [sys::CUevent; 2],
}

impl Drop for Resources {
    fn drop(&mut self) {
        // SAFETY: each handle is null/0 or was created by the driver in
        // this context and is released once.
        unsafe {
            for e in self.events.into_iter().filter(|e| !e.is_null()) {
                let _ = result::event::destroy(e);
            }
            if !self.stream.is_null() {
                let _ = result::stream::destroy(self.stream);
            }
            if self.dev != 0 {
                let _ = result::free_sync(self.dev);
            }
            if !self.host.is_null() {
                let _ = result::free_host(self.host);
            }
        }
    }
}

/// The buffer size for `free` bytes of device memory: [`COPY_BYTES`], or a
/// quarter of what is free, at least [`MIN_COPY_BYTES`].
pub fn buffer_bytes(free: usize) -> usize {
    COPY_BYTES.min(free / 4).max(MIN_COPY_BYTES)
}

fn measure_on(device: sys::CUdevice, ordinal: u32) -> Result<CopyRates, CopyError> {
    stage(&format!("cuDevicePrimaryCtxRetain (device {ordinal})"));
    // SAFETY: retain/set_current/release on a device handle from the driver.
    let ctx = unsafe { result::primary_ctx::retain(device) }
        .map_err(|e| CopyError::new("cuDevicePrimaryCtxRetain", e))?;
    let measured = unsafe { result::ctx::set_current(ctx) }
        .map_err(|e| CopyError::new("cuCtxSetCurrent", e))
        .and_then(|()| timed_copies(ordinal));
    // SAFETY: balances the retain above.
    let _ = unsafe { result::primary_ctx::release(device) };
    measured
}

fn timed_copies(ordinal: u32) -> Result<CopyRates, CopyError> {
    let (free, _) = result::mem_get_info().map_err(|e| CopyError::new("cuMemGetInfo", e))?;
    let bytes = buffer_bytes(free);
    let mut r = Resources {
        host: std::ptr::null_mut(),
        dev: 0,
        stream: std::ptr::null_mut(),
        events: [std::ptr::null_mut(); 2],
    };
    stage(&format!("cuMemHostAlloc (device {ordinal})"));
    // SAFETY: plain allocations in the current context; freed by Resources.
    unsafe {
        r.host = result::malloc_host(bytes, 0).map_err(|e| CopyError::new("cuMemHostAlloc", e))?;
        std::ptr::write_bytes(r.host.cast::<u8>(), 0x5a, bytes);
        r.dev = result::malloc_sync(bytes).map_err(|e| CopyError::new("cuMemAlloc", e))?;
        // Written once before any copy is timed, so no first-touch cost of
        // the allocation lands in a measurement.
        result::memset_d8_sync(r.dev, 0, bytes).map_err(|e| CopyError::new("cuMemsetD8", e))?;
    }
    r.stream = result::stream::create(result::stream::StreamKind::NonBlocking)
        .map_err(|e| CopyError::new("cuStreamCreate", e))?;
    for e in &mut r.events {
        *e = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|err| CopyError::new("cuEventCreate", err))?;
    }
    stage(&format!("cuMemcpyHtoDAsync (device {ordinal})"));
    let h2d = best_rate(&r, bytes, true)?;
    stage(&format!("cuMemcpyDtoHAsync (device {ordinal})"));
    let d2h = best_rate(&r, bytes, false)?;
    Ok(CopyRates {
        bytes,
        h2d_gbps: h2d,
        d2h_gbps: d2h,
    })
}

/// The best of up to [`REPEATS`] event-timed copies one way, GB/s.
fn best_rate(r: &Resources, bytes: usize, to_device: bool) -> Result<f64, CopyError> {
    let (call, copy_call) = if to_device {
        ("cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync")
    } else {
        ("cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync")
    };
    let started = Instant::now();
    let mut best_ms = f32::INFINITY;
    for _ in 0..REPEATS {
        // SAFETY: host and device buffers are `bytes` long and live in `r`;
        // the stream and events belong to the current context; the event
        // synchronize below completes the copy before the buffers are reused.
        unsafe {
            let host = std::slice::from_raw_parts_mut(r.host.cast::<u8>(), bytes);
            result::event::record(r.events[0], r.stream)
                .map_err(|e| CopyError::new("cuEventRecord", e))?;
            let copied = if to_device {
                result::memcpy_htod_async(r.dev, host, r.stream)
            } else {
                result::memcpy_dtoh_async(host, r.dev, r.stream)
            };
            copied.map_err(|e| CopyError::new(copy_call, e))?;
            result::event::record(r.events[1], r.stream)
                .map_err(|e| CopyError::new("cuEventRecord", e))?;
            result::event::synchronize(r.events[1])
                .map_err(|e| CopyError::new("cuEventSynchronize", e))?;
            let ms = result::event::elapsed(r.events[0], r.events[1])
                .map_err(|e| CopyError::new("cuEventElapsedTime", e))?;
            best_ms = best_ms.min(ms);
        }
        if started.elapsed() > DIRECTION_BUDGET {
            break;
        }
    }
    if !(best_ms.is_finite() && best_ms > 0.0) {
        return Err(CopyError {
            call: call.to_string(),
            error: format!("events measured {best_ms} ms"),
        });
    }
    Ok(bytes as f64 / (f64::from(best_ms) * 1e6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_as_the_kernel_writes_them() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("1"), Some(vec![1]));
        assert_eq!(parse_cpulist(""), None);
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
    }

    #[test]
    fn a_gpus_locality_from_sysfs_by_cudas_bus_id() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("bus/pci/devices/0000:9a:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("local_cpulist"), "48-95,144-191\n").unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        assert_eq!(
            locality(dir.path(), "00000000:9A:00.0"),
            Some(Locality {
                numa_node: Some(1),
                cpulist: "48-95,144-191".into()
            })
        );
        std::fs::write(dev.join("numa_node"), "-1\n").unwrap();
        assert_eq!(
            locality(dir.path(), "00000000:9A:00.0").unwrap().numa_node,
            None
        );
        assert_eq!(locality(dir.path(), "00000000:18:00.0"), None);
    }

    #[test]
    fn buffers_shrink_with_free_memory_but_not_below_the_floor() {
        assert_eq!(buffer_bytes(80 << 30), COPY_BYTES);
        assert_eq!(buffer_bytes(256 << 20), 64 << 20);
        assert_eq!(buffer_bytes(1 << 20), MIN_COPY_BYTES);
    }
}

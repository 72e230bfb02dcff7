//! The cuda checks: does the CUDA driver initialise and work on every GPU
//! (`cuda.driver`), and will the CUDA runtime a job loads run on this driver
//! (`cuda.runtime`).
//!
//! Both load driver or runtime code, so both run child-isolated. The
//! knowledge — which toolkit needs which driver, what each CUDA error means
//! and how to fix it — lives in pure functions here and is unit-tested from
//! real cases.

use std::path::PathBuf;
use std::time::Duration;

use crate::domain::text::quote_value;
use crate::domain::visible_devices::{
    map_visible_devices, parse_cuda_visible_devices, DeviceToken, NvmlGpu, VisibleDevices,
};
use crate::probe::cuda::{
    self as cuda_probe, CudaCallError, CudaVersion, DriverProbe, DriverProbeError, RoundTrip,
};
use crate::probe::host::env_lossy;
use crate::probe::libs::LibSource;
use crate::probe::{nvml, python};
use crate::{Check, Context, DataTable, DeviceResult, Isolation, Outcome, Profile, Status};

// ---------------------------------------------------------------------------
// Compatibility knowledge
// ---------------------------------------------------------------------------

/// A driver branch version ("570.86.15"), compared field by field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DriverVersion {
    parts: Vec<u32>,
    text: String,
}

impl DriverVersion {
    pub fn parse(s: &str) -> Option<Self> {
        let text = s.trim();
        let parts: Option<Vec<u32>> = text.split('.').map(|p| p.parse().ok()).collect();
        parts.filter(|p| !p.is_empty()).map(|parts| DriverVersion {
            parts,
            text: text.to_string(),
        })
    }
}

impl std::fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// CUDA toolkit release -> minimum Linux x86-64 driver at its GA. Source:
/// CUDA release notes "Table 3", as collected in
/// ../shared/reference/facts.md ("CUDA toolkit -> minimum Linux driver").
/// 13.1's figure is inferred from the cuda-compat packages there.
pub const TOOLKIT_MIN_DRIVER: &[(CudaVersion, &str)] = &[
    (CudaVersion::new(11, 0), "450.36.06"),
    (CudaVersion::new(11, 4), "470.42.01"),
    (CudaVersion::new(11, 8), "520.61.05"),
    (CudaVersion::new(12, 0), "525.60.13"),
    (CudaVersion::new(12, 1), "530.30.02"),
    (CudaVersion::new(12, 2), "535.54.03"),
    (CudaVersion::new(12, 3), "545.23.06"),
    (CudaVersion::new(12, 4), "550.54.14"),
    (CudaVersion::new(12, 5), "555.42.02"),
    (CudaVersion::new(12, 6), "560.28.03"),
    (CudaVersion::new(12, 8), "570.26"),
    (CudaVersion::new(12, 9), "575.51.03"),
    (CudaVersion::new(13, 0), "580.65.06"),
    (CudaVersion::new(13, 1), "590.44.01"),
];

/// Minor-version compatibility floor per CUDA major: any driver at or above
/// it runs every runtime of that major, with a limited feature set (no JIT
/// of PTX newer than the driver). Source: docs.nvidia.com/deploy/
/// cuda-compatibility ("Minor Version Compatibility", Table 1) and facts.md:
/// 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580 (the first 580
/// production driver, 13.0's GA driver, is 580.65.06).
pub const MINOR_VERSION_FLOOR: &[(u32, &str)] =
    &[(11, "450.80.02"), (12, "525.60.13"), (13, "580.65.06")];

/// The driver a runtime needs for full (native) support, when the table
/// knows that exact release.
pub fn native_min_driver(runtime: CudaVersion) -> Option<&'static str> {
    TOOLKIT_MIN_DRIVER
        .iter()
        .find(|(v, _)| *v == runtime)
        .map(|(_, d)| *d)
}

/// The minor-version compatibility floor of a CUDA major.
pub fn minor_version_floor(major: u32) -> Option<&'static str> {
    MINOR_VERSION_FLOOR
        .iter()
        .find(|(m, _)| *m == major)
        .map(|(_, d)| *d)
}

/// Whether a CUDA runtime runs on a driver, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeCompat {
    /// The driver supports this CUDA version or newer.
    Native,
    /// Same major, older minor: runs through minor-version compatibility.
    MinorVersion { floor: &'static str },
    /// Does not run; `need` is the driver to install.
    Incompatible { need: String },
}

/// Judge a runtime against the CUDA version the driver supports
/// (cuDriverGetVersion) and, when known, the driver's own version.
pub fn runtime_compat(
    runtime: CudaVersion,
    driver_cuda: CudaVersion,
    driver_version: Option<&DriverVersion>,
) -> RuntimeCompat {
    if driver_cuda >= runtime {
        return RuntimeCompat::Native;
    }
    let floor = minor_version_floor(runtime.major);
    let need = floor
        .or_else(|| native_min_driver(runtime))
        .map(|d| format!(">= {d}"))
        .unwrap_or_else(|| format!("supporting CUDA {runtime}"));
    if runtime.major == driver_cuda.major {
        if let Some(floor) = floor {
            let below_floor = match (driver_version, DriverVersion::parse(floor)) {
                (Some(have), Some(floor)) => *have < floor,
                _ => false,
            };
            if !below_floor {
                return RuntimeCompat::MinorVersion { floor };
            }
        }
    }
    RuntimeCompat::Incompatible { need }
}

/// The two concrete fixes for a runtime the driver cannot run: the driver
/// to install, or the torch build that fits the driver instead.
pub fn incompatible_fix(runtime: CudaVersion, driver_cuda: CudaVersion, need: &str) -> String {
    let native = native_min_driver(runtime)
        .map(|d| format!(" ({d} or newer supports {runtime} fully)"))
        .unwrap_or_else(|| {
            format!(" (`nvidia-smi` must then show \"CUDA Version\" >= {runtime} for full support)")
        });
    let wheel = match crate::torch::wheel_for_driver(driver_cuda) {
        Some(w) => format!(
            "or use a PyTorch build for CUDA {} that this driver runs: {}{}",
            w.cuda,
            crate::torch::replace_torch_command(w.index),
            if w.cuda > driver_cuda {
                " (through minor-version compatibility)"
            } else {
                ""
            }
        ),
        None => format!("or use software built for CUDA {driver_cuda} or older"),
    };
    format!("install an NVIDIA driver {need}{native}, {wheel}")
}

// ---------------------------------------------------------------------------
// CUDA errors: names, meanings, fixes
// ---------------------------------------------------------------------------

/// What a CUDA driver error means for someone about to train, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorAdvice {
    pub name: &'static str,
    pub meaning: &'static str,
    pub fix: String,
}

/// The advice for a CUresult code. `cvd` is CUDA_VISIBLE_DEVICES when set.
/// Codes from cuda.h (CUresult); fixes from the CUDA driver API docs, the
/// CUDA compatibility guide (803/804) and the Fabric Manager guide (802).
pub fn error_advice(code: i32, cvd: Option<&str>) -> Option<ErrorAdvice> {
    let hidden = match cvd {
        Some(v) => format!(
            "CUDA_VISIBLE_DEVICES is set to {}: an empty, '-1' or invalid first entry hides every GPU (`unset CUDA_VISIBLE_DEVICES` to test, see env.cuda_visible_devices); ",
            quote_value(v)
        ),
        None => String::new(),
    };
    let (name, meaning, fix) = match code {
        3 => (
            "CUDA_ERROR_NOT_INITIALIZED",
            "the driver was not initialised",
            "check that `nvidia-smi` works and that the kernel module is loaded (`lsmod | grep nvidia`); reinstall the driver if libcuda and the module disagree".to_string(),
        ),
        4 => (
            "CUDA_ERROR_DEINITIALIZED",
            "the driver is shutting down",
            "run again; if it persists, check `dmesg` for driver errors".to_string(),
        ),
        2 => (
            "CUDA_ERROR_OUT_OF_MEMORY",
            "no GPU memory left to create a context",
            "other processes hold the GPU memory: find them with `nvidia-smi` (see gpu.processes) and stop them".to_string(),
        ),
        34 => (
            "CUDA_ERROR_STUB_LIBRARY",
            "the CUDA toolkit's stub libcuda (lib64/stubs) was loaded instead of the driver's",
            "remove the `.../lib64/stubs` folder from LD_LIBRARY_PATH; the real libcuda.so.1 comes with the NVIDIA driver (in containers: the NVIDIA Container Toolkit, `docker run --gpus all`)".to_string(),
        ),
        46 => (
            "CUDA_ERROR_DEVICE_UNAVAILABLE",
            "the GPU is busy or unavailable (compute mode Exclusive Process held by another process, or Prohibited)",
            "check `nvidia-smi -q -d COMPUTE` and other processes on the GPU (gpu.processes); `sudo nvidia-smi -c DEFAULT` restores shared mode".to_string(),
        ),
        100 => (
            "CUDA_ERROR_NO_DEVICE",
            "no CUDA-capable device is visible to this process",
            format!("{hidden}in a container, start it with the NVIDIA runtime (`docker run --gpus all`, NVIDIA Container Toolkit) and check NVIDIA_VISIBLE_DEVICES; on the host, check that `nvidia-smi` lists the GPUs"),
        ),
        101 => (
            "CUDA_ERROR_INVALID_DEVICE",
            "a device ordinal is not valid",
            format!("{hidden}check that CUDA_VISIBLE_DEVICES names GPUs that exist (`nvidia-smi -L`)"),
        ),
        214 => (
            "CUDA_ERROR_ECC_UNCORRECTABLE",
            "an uncorrectable ECC error was detected on the GPU",
            "reset the GPU (`sudo nvidia-smi -r -i N` with nothing running on it) or reboot; if it recurs, the GPU needs service (see gpu.ecc)".to_string(),
        ),
        304 => (
            "CUDA_ERROR_OPERATING_SYSTEM",
            "an operating-system call inside the driver failed (often a missing /dev/nvidia-uvm or wrong device-node permissions)",
            "check `ls -l /dev/nvidia*`; create missing nodes with `sudo nvidia-modprobe -u -c=0` or `sudo modprobe nvidia-uvm`; in containers, use the NVIDIA Container Toolkit so the device nodes are passed in".to_string(),
        ),
        800 => (
            "CUDA_ERROR_NOT_PERMITTED",
            "the operation is not permitted",
            "check the user's access to /dev/nvidia* (`ls -l /dev/nvidia*`, the video/render groups)".to_string(),
        ),
        802 => (
            "CUDA_ERROR_SYSTEM_NOT_READY",
            "the system is not ready: on NVSwitch systems (HGX/DGX) the Fabric Manager is not running or the NVLink fabric is not initialised",
            "start the Fabric Manager: `sudo systemctl start nvidia-fabricmanager` (and `sudo systemctl enable nvidia-fabricmanager`); its version must match the driver exactly — see `journalctl -u nvidia-fabricmanager` and `nvidia-smi -q | grep -i -A2 fabric`".to_string(),
        ),
        803 => (
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            "the libcuda in use does not match the kernel driver (a cuda-compat forward-compatibility libcuda for another driver branch, or a driver upgrade without reboot)",
            "remove the cuda-compat folder from LD_LIBRARY_PATH (or install the compat package made for this driver branch); after a driver upgrade, reboot or reload the nvidia modules".to_string(),
        ),
        804 => (
            "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            "forward compatibility (cuda-compat) is in use on a GPU that does not support it: only data-center GPUs do",
            "remove the cuda-compat folder from LD_LIBRARY_PATH and use a CUDA / PyTorch build the installed driver supports, or upgrade the driver".to_string(),
        ),
        805..=809 => (
            "CUDA_ERROR_MPS_*",
            "the CUDA MPS server or client failed",
            "check the MPS daemon (`nvidia-cuda-mps-control`), or stop it (`echo quit | nvidia-cuda-mps-control`) and unset CUDA_MPS_PIPE_DIRECTORY".to_string(),
        ),
        999 => (
            "CUDA_ERROR_UNKNOWN",
            "unknown error: usually a GPU in a bad state (after an Xid error), or on workstations the nvidia_uvm module after suspend/resume",
            "look for Xid errors (`sudo dmesg | grep -i xid`); reset the GPU (`sudo nvidia-smi -r -i N` with nothing running on it) or reboot; after suspend/resume: `sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm`".to_string(),
        ),
        _ => return None,
    };
    Some(ErrorAdvice { name, meaning, fix })
}

/// "CUDA_ERROR_SYSTEM_NOT_READY (802)", preferring the driver's own name.
pub fn error_label(e: &CudaCallError) -> String {
    let name = e
        .name
        .clone()
        .or_else(|| error_advice(e.code, None).map(|a| a.name.to_string()))
        .unwrap_or_else(|| "CUDA error".to_string());
    format!("{name} ({})", e.code)
}

fn generic_fix() -> String {
    "check that `nvidia-smi` works and look for driver errors in `sudo dmesg | grep -i -E 'nvrm|xid'`; reset the GPU or reboot if the driver is wedged".to_string()
}

// ---------------------------------------------------------------------------
// NVML, asked again only when it answers
// ---------------------------------------------------------------------------

/// Why NVML must not be asked again in this run: an earlier gpu.* check
/// timed out on it. A hung NVML would hang the next caller too, and a
/// child-isolated check starts NVML afresh, so it would wait out its whole
/// timeout for an answer that is already known not to come.
pub fn nvml_hung(ctx: &Context) -> Option<String> {
    ctx.earlier
        .iter()
        .filter(|(id, _)| id.starts_with("gpu."))
        .find(|(_, o)| o.summary.starts_with("timed out"))
        .map(|(id, _)| format!("NVML did not answer in {id}"))
}

/// NVML's GPU list for this run, unless NVML is known to hang.
pub fn nvml_gpus(ctx: &Context) -> Result<Vec<nvml::GpuInfo>, nvml::NvmlFailure> {
    if let Some(detail) = nvml_hung(ctx) {
        return Err(nvml::NvmlFailure::Other { detail });
    }
    crate::probe::stage("NVML device list");
    nvml::gpus(ctx.options.nvml_lib.as_deref())
}

/// NVML's driver facts for this run, unless NVML is known to hang.
pub fn nvml_driver(ctx: &Context) -> Option<nvml::DriverInfo> {
    if nvml_hung(ctx).is_some() {
        return None;
    }
    crate::probe::stage("NVML driver version");
    nvml::driver(ctx.options.nvml_lib.as_deref()).ok()
}

// ---------------------------------------------------------------------------
// cuda.driver
// ---------------------------------------------------------------------------

/// How many CUDA devices this process should see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// Exactly this many, and why (`NVML sees 8 GPUs`).
    Exactly { count: u32, from: String },
    /// At least this many (`--expect-gpus 8`).
    AtLeast { count: u32, from: String },
    /// No prediction, and why.
    Unknown { why: String },
}

/// How many devices CUDA enumerates for a parsed CUDA_VISIBLE_DEVICES on
/// these GPUs, following PyTorch's emulation of the driver
/// (torch/cuda/__init__.py, `_device_count_nvml` and
/// `_transform_uuid_to_ordinals`): indices stop at the first one out of
/// range, a UUID entry must prefix exactly one GPU's UUID (else the list
/// stops there), and naming a GPU twice leaves none. None when MIG entries
/// make it unpredictable from GPU-level facts.
pub fn visible_count(v: &VisibleDevices, gpus: &[nvml::GpuInfo]) -> Option<u32> {
    let gpus: Vec<NvmlGpu> = gpus.iter().map(NvmlGpu::from).collect();
    let mapping = map_visible_devices(v.effective(), &gpus);
    if mapping.duplicate.is_some() {
        return Some(0);
    }
    if mapping.mig_count() > 0
        || v.effective()
            .iter()
            .any(|t| matches!(t, DeviceToken::Mig(_)))
    {
        return None;
    }
    Some(mapping.targets.len() as u32)
}

/// What NVML and CUDA_VISIBLE_DEVICES predict for the CUDA device count;
/// without NVML, `--expect-gpus N` gives a floor.
pub fn predict_devices(
    nvml_gpus: Option<&[nvml::GpuInfo]>,
    cvd: Option<&str>,
    expect_gpus: Option<u32>,
) -> Expectation {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    match nvml_gpus {
        Some(gpus) => {
            if gpus.iter().any(|g| g.mig_enabled == Some(true)) {
                return Expectation::Unknown {
                    why: "MIG is enabled, so CUDA enumerates MIG instances, not GPUs".to_string(),
                };
            }
            let seen = format!("NVML sees {} GPU{}", gpus.len(), plural(gpus.len()));
            match cvd {
                None => Expectation::Exactly {
                    count: gpus.len() as u32,
                    from: seen,
                },
                Some(v) => match visible_count(&parse_cuda_visible_devices(v), gpus) {
                    Some(n) => Expectation::Exactly {
                        count: n,
                        from: format!(
                            "{seen} and CUDA_VISIBLE_DEVICES={} selects {n}",
                            quote_value(v)
                        ),
                    },
                    None => Expectation::Unknown {
                        why: format!(
                            "CUDA_VISIBLE_DEVICES={} names MIG instances",
                            quote_value(v)
                        ),
                    },
                },
            }
        }
        None => match (expect_gpus, cvd) {
            (Some(n), None) => Expectation::AtLeast {
                count: n,
                from: format!("--expect-gpus {n}"),
            },
            _ => Expectation::Unknown {
                why: "NVML is not available to count the GPUs".to_string(),
            },
        },
    }
}

/// Everything `cuda.driver` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverFacts {
    pub probe: Result<DriverProbe, DriverProbeError>,
    pub expected: Expectation,
    pub cuda_visible_devices: Option<String>,
    /// Whether contexts and copies were asked for (standard profile).
    pub contexts: bool,
}

const NO_LIBCUDA_HINT: &str = "libcuda.so.1 comes with the NVIDIA driver, not with CUDA or PyTorch. In a container, start it with the NVIDIA runtime (`docker run --gpus all ...` with the NVIDIA Container Toolkit; Kubernetes: the NVIDIA device plugin) and keep NVIDIA_DRIVER_CAPABILITIES including `compute`; on a host, install the driver (e.g. `sudo apt install nvidia-driver-570-server` or the cuda-drivers package) and check `nvidia-smi`";

fn call_failure(e: &CudaCallError, cvd: Option<&str>) -> Outcome {
    let label = error_label(e);
    match error_advice(e.code, cvd) {
        Some(a) => Outcome::fail(format!("{} failed: {label}: {}", e.call, a.meaning), a.fix),
        None => {
            let desc = e
                .description
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            Outcome::fail(format!("{} failed: {label}{desc}", e.call), generic_fix())
        }
    }
}

/// Judge the driver probe.
pub fn evaluate_driver(f: &DriverFacts) -> Outcome {
    let cvd = f.cuda_visible_devices.as_deref();
    let probe = match &f.probe {
        Err(DriverProbeError::LibraryNotFound { .. }) => {
            return Outcome::fail(
                "libcuda.so.1 not found: no NVIDIA driver is usable in this environment",
                NO_LIBCUDA_HINT,
            )
        }
        Err(DriverProbeError::Call {
            error,
            library,
            cuda_driver_version,
        }) => {
            let mut o = call_failure(error, cvd);
            if let Some(v) = cuda_driver_version {
                o = o.with_fact("cuda_driver_version", v.to_string());
            }
            if let Some(lib) = library {
                o = o.with_fact("libcuda", lib.display().to_string());
            }
            return o;
        }
        Err(DriverProbeError::Library { detail }) => {
            if let Some(symbol) = detail
                .strip_prefix("Missing symbol ")
                .and_then(|s| s.split(':').next())
            {
                return Outcome::fail(
                    format!("libcuda has no {symbol}: the driver is older than CUDA 12"),
                    "install a current NVIDIA driver (CUDA 12 drivers are >= 525.60.13); `nvidia-smi` shows the CUDA version it supports",
                );
            }
            return Outcome::error(format!("could not use libcuda: {detail}"));
        }
        Ok(p) => p,
    };
    let version = probe
        .cuda_driver_version
        .map(|v| format!("CUDA {v} driver"))
        .unwrap_or_else(|| "CUDA driver".to_string());
    let mut out = Outcome::pass("").with_metric("device_count", probe.device_count as f64, "count");
    if let Some(v) = probe.cuda_driver_version {
        out = out.with_fact("cuda_driver_version", v.to_string());
    }
    if let Some(lib) = &probe.library {
        out = out.with_fact("libcuda", lib.display().to_string());
        if cuda_probe::is_compat_path(lib) {
            out = out.with_fact(
                "forward_compat",
                format!("libcuda from a cuda-compat folder: {}", lib.display()),
            );
        }
    }
    out = out.with_fact("device_count", probe.device_count.to_string());

    // Per device: context + copy.
    let mut worst = Status::Pass;
    let mut bad: Vec<String> = Vec::new();
    let mut hints: Vec<String> = Vec::new();
    for d in &probe.devices {
        let name = d
            .name
            .clone()
            .unwrap_or_else(|| "unknown device".to_string());
        let mut info = Vec::new();
        if let Some((ma, mi)) = d.compute_capability {
            info.push(format!("compute {ma}.{mi}"));
        }
        if let Some(m) = d.total_mem_mib {
            info.push(format!("{m} MiB"));
        }
        let info = info.join(", ");
        let (status, summary) = match &d.context {
            None => (Status::Pass, info.clone()),
            Some(Ok(RoundTrip::Verified { bytes })) => (
                Status::Pass,
                format!("context and {} KiB copy verified; {info}", bytes / 1024),
            ),
            Some(Ok(RoundTrip::Mismatch { bytes, first_bad })) => {
                hints.push(format!(
                    "cuda:{} returned different bytes than were written: the GPU or its memory is faulty — check `nvidia-smi -q -d ECC,ROW_REMAPPER`, run `dcgmi diag -r 2`, reset the GPU (`sudo nvidia-smi -r -i N`) or take it out of service",
                    d.ordinal
                ));
                (
                    Status::Fail,
                    format!(
                        "copy of {} KiB came back wrong from byte {first_bad} on",
                        bytes / 1024
                    ),
                )
            }
            Some(Err(e)) => {
                let label = error_label(e);
                let advice = error_advice(e.code, cvd);
                hints.push(format!(
                    "cuda:{}: {}",
                    d.ordinal,
                    advice
                        .as_ref()
                        .map(|a| a.fix.clone())
                        .unwrap_or_else(generic_fix)
                ));
                (
                    Status::Fail,
                    format!(
                        "{} failed: {label}{}",
                        e.call,
                        advice
                            .map(|a| format!(": {}", a.meaning))
                            .unwrap_or_default()
                    ),
                )
            }
        };
        if status != Status::Pass {
            bad.push(format!("cuda:{} ({name}): {summary}", d.ordinal));
        }
        worst = worst.worst(status);
        out = out.with_device(DeviceResult {
            index: d.ordinal,
            label: None,
            name,
            uuid: None,
            status,
            summary,
            metrics: Vec::new(),
        });
    }

    // Count against the prediction.
    let n = probe.device_count;
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    // (what is wrong, whether CUDA sees more than predicted)
    let count_problem = match &f.expected {
        Expectation::Exactly { count, from } if *count != n => Some((
            format!("CUDA sees {n} device{} but {from}", plural(n)),
            n > *count,
        )),
        Expectation::AtLeast { count, from } if n < *count => Some((
            format!(
                "CUDA sees {n} device{} but {from} expects at least {count}",
                plural(n)
            ),
            false,
        )),
        _ => None,
    };
    if n == 0 {
        return Outcome {
            status: Status::Fail,
            summary: format!("the {version} initialised but sees no devices"),
            hint: error_advice(100, cvd).map(|a| a.fix),
            ..out
        };
    }
    if let Some((problem, more_than_predicted)) = count_problem {
        let hint = if more_than_predicted {
            // No GPU is missing: the prediction and the driver disagree.
            "CUDA enumerates more devices than predicted: check that CUDA_VISIBLE_DEVICES selects what you intend (`nvidia-smi -L` lists the GPUs and their UUIDs), and that NVML and libcuda (fact libcuda) come from the same driver installation (--nvml-lib, LD_LIBRARY_PATH)"
        } else {
            "a GPU that NVML lists but CUDA cannot use is usually in a bad state or has fallen off the bus: check `nvidia-smi -q`, `sudo dmesg | grep -i xid`, reset it (`sudo nvidia-smi -r -i N`) or reboot; in a container, check NVIDIA_VISIBLE_DEVICES / --gpus"
        };
        hints.insert(0, hint.to_string());
        worst = Status::Fail;
        bad.insert(0, problem);
    }
    if worst != Status::Pass {
        out.status = worst;
        out.summary = bad.join("; ");
        return out.with_hint(hints.join("; "));
    }
    let work = if f.contexts {
        "; a context and a verified host-device copy on each"
    } else {
        ""
    };
    let note = match &f.expected {
        Expectation::Exactly { from, .. } => format!(" (as {from})"),
        _ => String::new(),
    };
    out.summary = format!("{version}, {n} device{}{note}{work}", plural(n));
    out
}

/// `cuda.driver`: libcuda loads, cuInit works, the device count is what
/// NVML predicts, and every device takes a context and a copy.
pub struct CudaDriver;

/// cuInit on an 8-GPU node without persistence mode can take several
/// seconds, and each context another fraction of one.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(30);

impl Check for CudaDriver {
    fn id(&self) -> &'static str {
        "cuda.driver"
    }
    fn title(&self) -> &'static str {
        "CUDA driver and contexts"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        DRIVER_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        "the CUDA driver did not answer: usually a GPU in a bad state or a driver waiting on hardware — look for Xid errors (`sudo dmesg | grep -i xid`), check `nvidia-smi`, reset the GPU or reboot; enable persistence mode (`sudo nvidia-smi -pm 1` or nvidia-persistenced) so cuInit does not re-initialise every GPU; give it longer with --timeout SECS".to_string()
    }
    fn explain(&self) -> &'static str {
        "Loads the CUDA driver library (libcuda) the way PyTorch does, initialises it, counts the devices, and creates a context on every visible GPU with a small verified host-to-device-to-host copy.\n\n\
Why it matters: every CUDA process, and so every DDP rank, starts with cuInit and a context on its GPU. A driver that NVML can talk to may still refuse CUDA: the Fabric Manager not running on an NVSwitch system (CUDA_ERROR_SYSTEM_NOT_READY, 802), a forward-compatibility libcuda that does not fit the driver or the GPU (803, 804), a GPU in a bad state (999), or a GPU NVML lists but CUDA cannot use. Any of these makes torch.cuda report no GPUs or one rank fail at start-up, and the whole job with it.\n\n\
How to fix: libcuda missing means no driver in this environment — in a container, run it with the NVIDIA runtime (`docker run --gpus all`); on a host, install the driver. 802: `sudo systemctl start nvidia-fabricmanager` (its version must match the driver). 803/804: remove the cuda-compat folder from LD_LIBRARY_PATH or upgrade the driver. 100: check CUDA_VISIBLE_DEVICES and the container's GPU access. 999 or a wrong copy: look for Xid errors in `dmesg`, reset the GPU (`sudo nvidia-smi -r -i N`) or reboot. A device count below NVML's: find the missing GPU with `nvidia-smi -q` and `dmesg`.\n\n\
The device count is compared with NVML's GPU count when CUDA_VISIBLE_DEVICES is unset and MIG is off; without NVML, `--expect-gpus N` gives the floor."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let cvd = env_lossy("CUDA_VISIBLE_DEVICES");
        let nvml_gpus = nvml_gpus(ctx).ok();
        let contexts = ctx.options.profile >= Profile::Standard;
        let facts = DriverFacts {
            probe: cuda_probe::probe_driver(contexts),
            expected: predict_devices(
                nvml_gpus.as_deref(),
                cvd.as_deref(),
                ctx.options.expect_gpus,
            ),
            cuda_visible_devices: cvd,
            contexts,
        };
        evaluate_driver(&facts)
    }
}

// ---------------------------------------------------------------------------
// cuda.runtime
// ---------------------------------------------------------------------------

/// One libcudart found on disk, as judged.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeEntry {
    pub path: PathBuf,
    pub source: LibSource,
    pub version: Result<CudaVersion, String>,
}

/// The driver side of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverSide {
    /// The newest CUDA the driver supports.
    pub cuda: CudaVersion,
    /// "570.86.15", when NVML or /proc tells.
    pub version: Option<String>,
    /// Where `cuda` came from: [`FROM_LIBCUDA`] or [`FROM_NVML`].
    pub from: &'static str,
}

/// Everything `cuda.runtime` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeFacts {
    pub runtimes: Vec<RuntimeEntry>,
    pub driver: Option<DriverSide>,
    /// LD_LIBRARY_PATH folders holding a libcuda (cuda-compat).
    pub compat_dirs: Vec<PathBuf>,
}

/// Copies a training job loads for sure: a wrong one there fails; a wrong
/// one elsewhere (a system toolkit) only warns, since a job may never load it.
fn loaded_by_jobs(source: LibSource) -> bool {
    matches!(
        source,
        LibSource::PythonWheel
            | LibSource::PythonEnvLib
            | LibSource::LdLibraryPath
            | LibSource::Explicit
    )
}

/// Judge every runtime found against the driver.
pub fn evaluate_runtime(f: &RuntimeFacts) -> Outcome {
    let describe = |r: &RuntimeEntry| match &r.version {
        Ok(v) => format!("libcudart {v} from {}", r.source.describe()),
        Err(_) => format!("{} ({})", r.path.display(), r.source.describe()),
    };
    let found: Vec<String> = f.runtimes.iter().map(describe).collect();
    let mut base = Outcome::pass("");
    for (i, r) in f.runtimes.iter().enumerate() {
        let v = match &r.version {
            Ok(v) => v.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        base = base.with_fact(
            &format!("libcudart_{i}"),
            format!("{} = {v}", r.path.display()),
        );
    }
    if let Some(first) = f.runtimes.iter().find_map(|r| r.version.as_ref().ok()) {
        base = base.with_fact("cuda_runtime_version", first.to_string());
    }
    let compat_note = if f.compat_dirs.is_empty() {
        String::new()
    } else {
        let dirs: Vec<String> = f
            .compat_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        base = base.with_fact("forward_compat", dirs.join(", "));
        format!(
            "; forward compatibility in use: cuda-compat libcuda on LD_LIBRARY_PATH ({}), which works only on data-center GPUs",
            dirs.join(", ")
        )
    };
    if f.runtimes.is_empty() {
        return Outcome {
            status: Status::Skip,
            summary: format!(
                "no CUDA runtime library (libcudart) found on the loader's path, in /usr/local/cuda* or in the Python environment{compat_note}"
            ),
            ..base
        };
    }
    let Some(driver) = &f.driver else {
        return Outcome {
            status: Status::Skip,
            summary: format!(
                "found {}; no NVIDIA driver (libcuda or NVML) to compare with, so whether it runs here cannot be judged{compat_note}",
                found.join(", ")
            ),
            ..base
        };
    };
    let driver_label = match &driver.version {
        Some(v) => format!("driver {v} (CUDA {})", driver.cuda),
        None => format!("the driver (CUDA {})", driver.cuda),
    };
    base = base.with_fact("driver_cuda_version", driver.cuda.to_string());
    let have = driver.version.as_deref().and_then(DriverVersion::parse);

    let mut status = Status::Pass;
    let mut problems: Vec<String> = Vec::new();
    let mut hints: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for r in &f.runtimes {
        let (row_status, verdict) = match &r.version {
            Err(e) => {
                problems.push(format!(
                    "cannot read the version of {}: {e}",
                    r.path.display()
                ));
                hints.push(format!(
                    "{} may be damaged or for another architecture; reinstall the package that owns it",
                    r.path.display()
                ));
                (Status::Warn, format!("version unreadable: {e}"))
            }
            Ok(v) => match runtime_compat(*v, driver.cuda, have.as_ref()) {
                RuntimeCompat::Native => (Status::Pass, "runs natively".to_string()),
                RuntimeCompat::MinorVersion { floor } => {
                    problems.push(format!(
                        "libcudart {v} from {} runs on {driver_label} only through minor-version compatibility",
                        r.source.describe()
                    ));
                    hints.push(format!(
                        "CUDA {v} on a CUDA {} driver works (drivers >= {floor} run every {}.x runtime), but PTX newer than the driver cannot be JIT-compiled (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) and some features are missing; upgrade the driver to one supporting CUDA {v} to remove the caveat",
                        driver.cuda, v.major
                    ));
                    (Status::Warn, "minor-version compatibility".to_string())
                }
                RuntimeCompat::Incompatible { need } => {
                    let s = if loaded_by_jobs(r.source) {
                        Status::Fail
                    } else {
                        Status::Warn
                    };
                    problems.push(format!(
                        "libcudart {v} at {} (from {}) is newer than {driver_label} supports",
                        r.path.display(),
                        r.source.describe()
                    ));
                    hints.push(incompatible_fix(*v, driver.cuda, &need));
                    (s, format!("needs a driver {need}"))
                }
            },
        };
        status = status.worst(row_status);
        rows.push(vec![
            r.path.display().to_string(),
            r.source.describe().to_string(),
            r.version
                .as_ref()
                .map(|v| v.to_string())
                .unwrap_or_else(|_| "?".to_string()),
            verdict,
        ]);
    }
    base = base.with_table(DataTable {
        title: "CUDA runtimes".to_string(),
        header: vec![
            "library".to_string(),
            "found in".to_string(),
            "CUDA".to_string(),
            "on this driver".to_string(),
        ],
        rows,
        legend: Some(format!(
            "driver side: CUDA {} from {}",
            driver.cuda, driver.from
        )),
    });
    hints.dedup();
    if status == Status::Pass {
        base.summary = format!(
            "{} run{} on {driver_label}{compat_note}",
            found.join(", "),
            if found.len() == 1 { "s" } else { "" }
        );
        return base;
    }
    base.status = status;
    base.summary = format!("{}{compat_note}", problems.join("; "));
    base.with_hint(hints.join("; "))
}

/// `cuda.runtime`: the CUDA runtimes a job would load, and whether the
/// driver runs them.
pub struct CudaRuntime;

/// [`DriverSide::from`]: libcuda's own answer.
pub const FROM_LIBCUDA: &str = "cuDriverGetVersion";
/// [`DriverSide::from`]: NVML's view of the system driver.
pub const FROM_NVML: &str = "NVML";

/// The driver as this run already knows it, without loading libcuda: the
/// CUDA version it supports (from cuda.driver's cuDriverGetVersion, else
/// NVML) with where that came from, and its version ("570.86.15", from
/// NVML or /proc/driver/nvidia/version). Shared by cuda.runtime and
/// torch.cuda.
pub fn known_driver(ctx: &Context) -> (Option<(CudaVersion, &'static str)>, Option<String>) {
    let nvml_driver = nvml_driver(ctx);
    let version = nvml_driver
        .as_ref()
        .map(|d| d.driver_version.clone())
        .or_else(cuda_probe::kernel_driver_version);
    let cuda = ctx
        .earlier("cuda.driver")
        .and_then(|o| o.facts.get("cuda_driver_version"))
        .and_then(|v| CudaVersion::parse(v))
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

impl CudaRuntime {
    /// cuda.driver already asked libcuda; otherwise NVML, otherwise ask
    /// libcuda here (this check is child-isolated). With a cuda-compat
    /// libcuda on LD_LIBRARY_PATH (`forward_compat`), NVML describes the
    /// system driver while jobs load the compat libcuda, which supports a
    /// newer CUDA: then libcuda is asked before NVML.
    fn driver_side(ctx: &Context, forward_compat: bool) -> Option<DriverSide> {
        let (known, version) = known_driver(ctx);
        let ask_libcuda = || cuda_probe::driver_cuda_version().map(|c| (c, FROM_LIBCUDA));
        let (cuda, from) = match known {
            Some((nvml_cuda, FROM_NVML)) if forward_compat => {
                ask_libcuda().or(Some((nvml_cuda, FROM_NVML)))
            }
            Some(known) => Some(known),
            None => ask_libcuda(),
        }?;
        Some(DriverSide {
            cuda,
            version,
            from,
        })
    }
}

impl Check for CudaRuntime {
    fn id(&self) -> &'static str {
        "cuda.runtime"
    }
    fn title(&self) -> &'static str {
        "CUDA runtime vs driver"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(20)
    }
    fn explain(&self) -> &'static str {
        "Finds every CUDA runtime library (libcudart) a training job could load and checks that the installed driver runs each one.\n\n\
Where it looks: CUDA_HOME / CUDA_PATH, /usr/local/cuda*, LD_LIBRARY_PATH, the dynamic loader's cache and system folders, and the nvidia-* wheels inside the chosen Python environment (site-packages/nvidia/*/lib; PyTorch's own wheels bring their runtime there, e.g. nvidia/cu13/lib/libcudart.so.13). Each copy's version is read with cudaRuntimeGetVersion, which answers without a GPU.\n\n\
Why it matters for DDP: a runtime newer than the driver fails at the first CUDA call (\"CUDA driver version is insufficient for CUDA runtime version\"), and torch then reports no GPU. Within one CUDA major version, a driver at or above the minor-version compatibility floor (12.x: 525.60.13, 13.x: 580) still runs newer runtimes, with a limited feature set: PTX newer than the driver cannot be JIT-compiled. Forward compatibility through the cuda-compat package on LD_LIBRARY_PATH works only on data-center GPUs.\n\n\
How to fix: install a driver that supports the runtime (the hint names the version), or replace torch with a build for the CUDA version the driver supports (`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cuXYZ`; without the uninstall pip keeps the installed torch). A copy found only in a system toolkit warns rather than fails, since a PyTorch job does not load it. With no driver at all the runtimes are listed and the comparison is skipped."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let site_packages = python::find_python(ctx.options.python.as_deref())
            .map(|p| python::site_packages(&p.path))
            .unwrap_or_default();
        let runtimes = cuda_probe::find_runtimes(&site_packages)
            .into_iter()
            .map(|c| RuntimeEntry {
                path: c.lib.path,
                source: c.lib.source,
                version: c.version,
            })
            .collect();
        let compat_dirs =
            cuda_probe::compat_libcuda_dirs(std::env::var_os("LD_LIBRARY_PATH").as_deref());
        let facts = RuntimeFacts {
            runtimes,
            driver: Self::driver_side(ctx, !compat_dirs.is_empty()),
            compat_dirs,
        };
        evaluate_runtime(&facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::cuda::DeviceProbe;

    fn v(major: u32, minor: u32) -> CudaVersion {
        CudaVersion::new(major, minor)
    }
    fn dv(s: &str) -> DriverVersion {
        DriverVersion::parse(s).unwrap()
    }

    // ---- compatibility table, real cases ----

    #[test]
    fn driver_versions_compare_numerically() {
        assert!(dv("570.86.15") > dv("570.26"));
        assert!(dv("525.60.13") < dv("525.105.17"));
        assert!(dv("450.80.02") > dv("450.36.06"));
        assert_eq!(dv("580.65.06").to_string(), "580.65.06");
        assert_eq!(DriverVersion::parse("abc"), None);
    }

    #[test]
    fn a100_cu118_wheel_on_driver_470_uses_minor_version_compat() {
        // Driver 470.57.02 reports CUDA 11.4; the cu118 wheel brings 11.8.
        assert_eq!(
            runtime_compat(v(11, 8), v(11, 4), Some(&dv("470.57.02"))),
            RuntimeCompat::MinorVersion { floor: "450.80.02" }
        );
    }

    #[test]
    fn h100_on_driver_525_with_cu124_wheel_uses_minor_version_compat() {
        assert_eq!(
            runtime_compat(v(12, 4), v(12, 0), Some(&dv("525.60.13"))),
            RuntimeCompat::MinorVersion { floor: "525.60.13" }
        );
    }

    #[test]
    fn driver_580_with_cu132_wheel_uses_minor_version_compat() {
        assert_eq!(
            runtime_compat(v(13, 2), v(13, 0), Some(&dv("580.65.06"))),
            RuntimeCompat::MinorVersion { floor: "580.65.06" }
        );
    }

    #[test]
    fn driver_535_cannot_run_a_cuda_13_wheel() {
        assert_eq!(
            runtime_compat(v(13, 2), v(12, 2), Some(&dv("535.104.05"))),
            RuntimeCompat::Incompatible {
                need: ">= 580.65.06".to_string()
            }
        );
        let fix = incompatible_fix(v(13, 2), v(12, 2), ">= 580.65.06");
        assert!(
            fix.contains("install an NVIDIA driver >= 580.65.06"),
            "{fix}"
        );
        assert!(fix.contains("whl/cu121"), "{fix}");
    }

    #[test]
    fn driver_470_cannot_run_a_cuda_12_wheel() {
        let c = runtime_compat(v(12, 1), v(11, 4), Some(&dv("470.57.02")));
        assert_eq!(
            c,
            RuntimeCompat::Incompatible {
                need: ">= 525.60.13".to_string()
            }
        );
        let fix = incompatible_fix(v(12, 1), v(11, 4), ">= 525.60.13");
        assert!(
            fix.contains("530.30.02 or newer supports 12.1 fully"),
            "{fix}"
        );
        assert!(fix.contains("whl/cu118"), "{fix}");
        assert!(fix.contains("minor-version compatibility"), "{fix}");
    }

    #[test]
    fn newer_driver_runs_older_runtime_natively() {
        assert_eq!(
            runtime_compat(v(12, 6), v(12, 8), Some(&dv("570.86.15"))),
            RuntimeCompat::Native
        );
        assert_eq!(
            runtime_compat(v(11, 8), v(13, 0), None),
            RuntimeCompat::Native
        );
        assert_eq!(
            runtime_compat(v(13, 2), v(13, 2), None),
            RuntimeCompat::Native
        );
    }

    #[test]
    fn cuda_11_0_ga_driver_is_below_the_11x_floor() {
        // 450.36.06 shipped with 11.0 but minor-version compat starts at 450.80.02.
        assert!(matches!(
            runtime_compat(v(11, 8), v(11, 0), Some(&dv("450.36.06"))),
            RuntimeCompat::Incompatible { .. }
        ));
    }

    // ---- cuda.driver verdicts ----

    fn healthy(n: u32) -> DriverProbe {
        DriverProbe {
            library: Some(PathBuf::from(
                "/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15",
            )),
            cuda_driver_version: Some(v(12, 8)),
            device_count: n,
            devices: (0..n)
                .map(|i| DeviceProbe {
                    ordinal: i,
                    name: Some("NVIDIA H100 80GB HBM3".to_string()),
                    compute_capability: Some((9, 0)),
                    total_mem_mib: Some(81559),
                    context: Some(Ok(RoundTrip::Verified { bytes: 65536 })),
                })
                .collect(),
        }
    }

    fn facts(probe: Result<DriverProbe, DriverProbeError>, expected: Expectation) -> DriverFacts {
        DriverFacts {
            probe,
            expected,
            cuda_visible_devices: None,
            contexts: true,
        }
    }

    fn call_failed(error: CudaCallError) -> Result<DriverProbe, DriverProbeError> {
        Err(DriverProbeError::Call {
            error,
            library: None,
            cuda_driver_version: Some(v(12, 8)),
        })
    }

    fn call_err(call: &str, code: i32) -> CudaCallError {
        CudaCallError {
            call: call.to_string(),
            code,
            name: None,
            description: None,
        }
    }

    #[test]
    fn healthy_driver_passes_and_matches_nvml() {
        let o = evaluate_driver(&facts(
            Ok(healthy(8)),
            Expectation::Exactly {
                count: 8,
                from: "NVML sees 8 GPUs".to_string(),
            },
        ));
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.summary
                .contains("CUDA 12.8 driver, 8 devices (as NVML sees 8 GPUs)"),
            "{}",
            o.summary
        );
        assert_eq!(o.devices.len(), 8);
        assert_eq!(o.facts["cuda_driver_version"], "12.8");
        assert_eq!(o.facts["device_count"], "8");
        assert_eq!(o.hint, None);
    }

    #[test]
    fn missing_libcuda_fails_with_the_container_hint() {
        let o = evaluate_driver(&facts(
            Err(DriverProbeError::LibraryNotFound { tried: vec![] }),
            Expectation::Unknown { why: String::new() },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("libcuda.so.1 not found"));
        assert!(o.hint.unwrap().contains("docker run --gpus all"));
    }

    #[test]
    fn fabric_manager_not_running_is_named() {
        let o = evaluate_driver(&facts(
            call_failed(call_err("cuInit", 802)),
            Expectation::Unknown { why: String::new() },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802)"),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("Fabric Manager"));
        assert!(o
            .hint
            .unwrap()
            .contains("systemctl start nvidia-fabricmanager"));
    }

    #[test]
    fn no_device_mentions_cuda_visible_devices_when_set() {
        let mut f = facts(
            call_failed(call_err("cuInit", 100)),
            Expectation::Unknown { why: String::new() },
        );
        f.cuda_visible_devices = Some("-1".to_string());
        let o = evaluate_driver(&f);
        assert!(o.summary.contains("CUDA_ERROR_NO_DEVICE (100)"));
        let hint = o.hint.unwrap();
        assert!(
            hint.contains("CUDA_VISIBLE_DEVICES is set to \"-1\""),
            "{hint}"
        );
        assert!(hint.contains("--gpus all"));
    }

    #[test]
    fn forward_compat_errors_are_explained() {
        for (code, needle) in [
            (803, "does not match the kernel driver"),
            (804, "only data-center GPUs"),
        ] {
            let o = evaluate_driver(&facts(
                call_failed(call_err("cuInit", code)),
                Expectation::Unknown { why: String::new() },
            ));
            assert_eq!(o.status, Status::Fail);
            assert!(o.summary.contains(needle), "{code}: {}", o.summary);
            assert!(o.hint.unwrap().contains("cuda-compat"));
        }
    }

    #[test]
    fn unknown_error_suggests_reset() {
        let o = evaluate_driver(&facts(
            call_failed(call_err("cuInit", 999)),
            Expectation::Unknown { why: String::new() },
        ));
        assert!(o.summary.contains("CUDA_ERROR_UNKNOWN (999)"));
        let hint = o.hint.unwrap();
        assert!(hint.contains("nvidia-smi -r"), "{hint}");
        assert!(hint.contains("xid"), "{hint}");
    }

    #[test]
    fn unlisted_error_uses_the_driver_description() {
        let mut e = call_err("cuInit", 222);
        e.name = Some("CUDA_ERROR_UNSUPPORTED_PTX_VERSION".to_string());
        e.description =
            Some("the provided PTX was compiled with an unsupported toolchain.".to_string());
        let o = evaluate_driver(&facts(
            call_failed(e),
            Expectation::Unknown { why: String::new() },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222): the provided PTX"),
            "{}",
            o.summary
        );
        assert!(o.hint.unwrap().contains("dmesg"));
    }

    #[test]
    fn missing_symbol_means_an_old_driver() {
        let o = evaluate_driver(&facts(
            Err(DriverProbeError::Library {
                detail: "Missing symbol cuDevicePrimaryCtxRelease_v2: undefined symbol".to_string(),
            }),
            Expectation::Unknown { why: String::new() },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("cuDevicePrimaryCtxRelease_v2"));
        assert!(o.hint.unwrap().contains("525.60.13"));
    }

    #[test]
    fn fewer_cuda_devices_than_nvml_fails() {
        let o = evaluate_driver(&facts(
            Ok(healthy(7)),
            Expectation::Exactly {
                count: 8,
                from: "NVML sees 8 GPUs".to_string(),
            },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("CUDA sees 7 devices but NVML sees 8 GPUs"),
            "{}",
            o.summary
        );
        assert!(o.hint.unwrap().contains("fallen off the bus"));
    }

    #[test]
    fn more_cuda_devices_than_predicted_does_not_blame_a_missing_gpu() {
        let o = evaluate_driver(&facts(
            Ok(healthy(8)),
            Expectation::Exactly {
                count: 2,
                from: "NVML sees 8 GPUs and CUDA_VISIBLE_DEVICES=\"0,1\" selects 2".to_string(),
            },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("CUDA sees 8 devices but NVML sees 8 GPUs"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(
            hint.starts_with("CUDA enumerates more devices than predicted"),
            "{hint}"
        );
        assert!(hint.contains("CUDA_VISIBLE_DEVICES"), "{hint}");
        assert!(!hint.contains("fallen off the bus"), "{hint}");
    }

    #[test]
    fn expect_gpus_is_a_floor_without_nvml() {
        let at_least = |n| Expectation::AtLeast {
            count: n,
            from: format!("--expect-gpus {n}"),
        };
        let o = evaluate_driver(&facts(Ok(healthy(2)), at_least(4)));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("CUDA sees 2 devices but --expect-gpus 4 expects at least 4"),
            "{}",
            o.summary
        );
        let o = evaluate_driver(&facts(Ok(healthy(4)), at_least(2)));
        assert_eq!(o.status, Status::Pass, "{o:?}");
    }

    #[test]
    fn zero_devices_fails() {
        let o = evaluate_driver(&facts(
            Ok(healthy(0)),
            Expectation::Unknown { why: String::new() },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("sees no devices"));
        assert!(o.hint.is_some());
    }

    #[test]
    fn context_failure_on_one_device_fails_that_device() {
        let mut p = healthy(4);
        p.devices[2].context = Some(Err(call_err("cuDevicePrimaryCtxRetain", 999)));
        let o = evaluate_driver(&facts(Ok(p), Expectation::Unknown { why: String::new() }));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("cuda:2"), "{}", o.summary);
        assert!(
            o.summary
                .contains("cuDevicePrimaryCtxRetain failed: CUDA_ERROR_UNKNOWN (999)"),
            "{}",
            o.summary
        );
        assert_eq!(o.devices[2].status, Status::Fail);
        assert_eq!(o.devices[1].status, Status::Pass);
        assert!(o.hint.unwrap().starts_with("cuda:2:"));
    }

    #[test]
    fn corrupted_copy_fails() {
        let mut p = healthy(2);
        p.devices[1].context = Some(Ok(RoundTrip::Mismatch {
            bytes: 65536,
            first_bad: 0,
        }));
        let o = evaluate_driver(&facts(Ok(p), Expectation::Unknown { why: String::new() }));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("came back wrong"), "{}", o.summary);
        assert!(o.hint.unwrap().contains("dcgmi diag"));
    }

    #[test]
    fn compat_libcuda_is_reported() {
        let mut p = healthy(1);
        p.library = Some(PathBuf::from(
            "/usr/local/cuda-13.0/compat/libcuda.so.580.65.06",
        ));
        let o = evaluate_driver(&facts(Ok(p), Expectation::Unknown { why: String::new() }));
        assert_eq!(o.status, Status::Pass);
        assert!(o.facts["forward_compat"].contains("/usr/local/cuda-13.0/compat"));
    }

    #[test]
    fn a_timed_out_gpu_check_keeps_nvml_from_being_asked_again() {
        let mut ctx = Context::default();
        assert_eq!(nvml_hung(&ctx), None);
        ctx.earlier.insert(
            "gpu.driver".to_string(),
            Outcome::fail("libnvidia-ml.so.1 not found", "install the driver"),
        );
        assert_eq!(nvml_hung(&ctx), None);
        ctx.earlier.insert(
            "gpu.ecc".to_string(),
            Outcome::fail("timed out after 10 s", "x"),
        );
        assert_eq!(
            nvml_hung(&ctx).as_deref(),
            Some("NVML did not answer in gpu.ecc")
        );
        assert!(matches!(
            nvml_gpus(&ctx),
            Err(nvml::NvmlFailure::Other { .. })
        ));
        assert_eq!(nvml_driver(&ctx), None);
    }

    #[test]
    fn prediction_uses_nvml_only_when_it_can() {
        let gpu = |i: u32, mig: Option<bool>| nvml::GpuInfo {
            index: i,
            name: "NVIDIA A100-SXM4-80GB".to_string(),
            uuid: format!("GPU-{i}"),
            pci_bus_id: String::new(),
            memory_total_mib: 81920,
            compute_capability: Some((8, 0)),
            mig_enabled: mig,
            mig_uuids: vec![],
        };
        let gpus = vec![gpu(0, Some(false)), gpu(1, Some(false))];
        assert_eq!(
            predict_devices(Some(&gpus), None, None),
            Expectation::Exactly {
                count: 2,
                from: "NVML sees 2 GPUs".to_string()
            }
        );
        assert_eq!(
            predict_devices(Some(&gpus), Some("1"), None),
            Expectation::Exactly {
                count: 1,
                from: "NVML sees 2 GPUs and CUDA_VISIBLE_DEVICES=\"1\" selects 1".to_string()
            }
        );
        let count = |v: &str| match predict_devices(Some(&gpus), Some(v), None) {
            Expectation::Exactly { count, .. } => Some(count),
            _ => None,
        };
        // Out-of-range index ends the list; invalid entries too; duplicates hide all.
        assert_eq!(count("0,5,1"), Some(1));
        assert_eq!(count("1,foo,0"), Some(1));
        assert_eq!(count("0,0"), Some(0));
        assert_eq!(count(""), Some(0));
        assert_eq!(count("GPU-1"), Some(1));
        // "GPU-" prefixes both UUIDs: ambiguous, so nothing.
        assert_eq!(count("GPU-"), Some(0));
        assert_eq!(count("MIG-0123abcd"), None);
        let mig = vec![gpu(0, Some(true))];
        assert!(matches!(
            predict_devices(Some(&mig), None, None),
            Expectation::Unknown { .. }
        ));
        assert!(matches!(
            predict_devices(None, None, Some(8)),
            Expectation::AtLeast { count: 8, .. }
        ));
        assert!(matches!(
            predict_devices(None, None, None),
            Expectation::Unknown { .. }
        ));
    }

    // ---- cuda.runtime verdicts ----

    fn wheel_runtime(version: CudaVersion) -> RuntimeEntry {
        RuntimeEntry {
            path: PathBuf::from(
                "/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13",
            ),
            source: LibSource::PythonWheel,
            version: Ok(version),
        }
    }

    fn driver(cuda: CudaVersion, version: Option<&str>) -> Option<DriverSide> {
        Some(DriverSide {
            cuda,
            version: version.map(str::to_string),
            from: "cuDriverGetVersion",
        })
    }

    #[test]
    fn no_driver_lists_the_runtimes_and_skips() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![wheel_runtime(v(13, 2))],
            driver: None,
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.contains("found libcudart 13.2 from Python wheel"),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("no NVIDIA driver"));
        assert_eq!(o.facts["cuda_runtime_version"], "13.2");
    }

    #[test]
    fn no_runtime_at_all_skips() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![],
            driver: driver(v(12, 8), None),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("no CUDA runtime library"));
    }

    #[test]
    fn wheel_runtime_newer_than_driver_fails_with_both_fixes() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![wheel_runtime(v(13, 2))],
            driver: driver(v(12, 8), Some("570.86.15")),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("libcudart 13.2"), "{}", o.summary);
        assert!(
            o.summary
                .contains("newer than driver 570.86.15 (CUDA 12.8) supports"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(
            hint.contains("install an NVIDIA driver >= 580.65.06"),
            "{hint}"
        );
        assert!(
            hint.contains("`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu128`"),
            "{hint}"
        );
        assert_eq!(o.tables[0].rows[0][3], "needs a driver >= 580.65.06");
    }

    #[test]
    fn system_toolkit_newer_than_driver_only_warns() {
        let mut r = wheel_runtime(v(13, 0));
        r.path = PathBuf::from("/usr/local/cuda-13.0/lib64/libcudart.so.13");
        r.source = LibSource::CudaInstall;
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![r],
            driver: driver(v(12, 2), Some("535.104.05")),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Warn);
    }

    #[test]
    fn minor_version_compat_warns_with_ptx_caveat() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![wheel_runtime(v(13, 2))],
            driver: driver(v(13, 0), Some("580.65.06")),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("minor-version compatibility"));
        assert!(o.hint.unwrap().contains("PTX"));
    }

    #[test]
    fn matching_driver_passes_and_compat_is_reported() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![wheel_runtime(v(12, 6))],
            driver: driver(v(12, 8), Some("570.86.15")),
            compat_dirs: vec![PathBuf::from("/usr/local/cuda-12.8/compat")],
        });
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(o.summary.contains("libcudart 12.6 from Python wheel (site-packages/nvidia) runs on driver 570.86.15 (CUDA 12.8)"), "{}", o.summary);
        assert!(
            o.summary.contains("forward compatibility in use"),
            "{}",
            o.summary
        );
        assert_eq!(o.facts["forward_compat"], "/usr/local/cuda-12.8/compat");
    }

    #[test]
    fn unreadable_runtime_warns() {
        let mut r = wheel_runtime(v(12, 0));
        r.version = Err("cannot load: wrong ELF class".to_string());
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![r],
            driver: driver(v(12, 8), None),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("cannot read the version"));
    }
}

//! `cuda.driver`: libcuda loads, cuInit works, the device count is what
//! NVML predicts, and every device takes a context and a verified copy.

use std::time::Duration;

use super::errors::{error_advice, error_label, generic_fix};
use crate::domain::compat::{
    incompatible_fix, too_old_for_current_torch, CudaVersion, DriverVersion,
};
use crate::domain::cuda_devices::{gpus_cuda_does_not_enumerate, predict_devices, Expectation};
use crate::domain::text::{list_cut, plural};
use crate::facts::cuda::{DriverCuda, DriverFailure};
use crate::facts::driver::NoDriverHere;
use crate::facts::nvml::{driver_for_run, gpus_for_run};
use crate::probe::cuda::{
    self as cuda_probe, CudaCallError, DeviceProbe, DriverProbe, DriverProbeError, RoundTrip,
};
use crate::probe::host::env_lossy;
use crate::probe::nvml::GpuInfo;
use crate::{Check, Context, DeviceResult, Finding, Findings, Isolation, Outcome, Profile, Status};

/// Everything `cuda.driver` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverFacts {
    pub probe: Result<DriverProbe, DriverProbeError>,
    pub expected: Expectation,
    /// NVML's GPUs (empty without NVML), to name one CUDA does not see.
    pub nvml_gpus: Vec<GpuInfo>,
    pub cuda_visible_devices: Option<String>,
    /// The driver's version ("570.86.15"), from NVML or the kernel module.
    pub driver_version: Option<String>,
    /// Whether contexts and copies were asked for (standard profile).
    pub contexts: bool,
    /// An earlier check's finding that no driver reaches this environment:
    /// a libcuda that is not found follows from it.
    pub first_cause: Option<NoDriverHere>,
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

/// Judge the driver probe, and publish what it found ([`DriverCuda`]) for
/// cuda.runtime and torch.cuda.
pub fn evaluate_driver(f: &DriverFacts) -> Outcome {
    let cvd = f.cuda_visible_devices.as_deref();
    let (outcome, usable) = match &f.probe {
        Err(e) => (probe_error(e, cvd, f.first_cause.as_ref()), false),
        Ok(p) => judge_probe(f, p, cvd),
    };
    let fact = driver_fact(&f.probe, &outcome, usable);
    outcome.publish(&fact)
}

/// No libcuda.so.1: the same cause as an earlier check's missing driver,
/// or the first cause (this check carries the fix and says so for later
/// checks).
fn no_libcuda(first: Option<&NoDriverHere>) -> Outcome {
    const FOUND: &str = "libcuda.so.1 not found";
    match first {
        Some(first) => first.follows(FOUND),
        None => Outcome::fail(
            format!("{FOUND}: no NVIDIA driver is usable in this environment"),
            NO_LIBCUDA_HINT,
        )
        .publish(&NoDriverHere {
            check: "cuda.driver".to_string(),
            reason: "no NVIDIA driver library here".to_string(),
        }),
    }
}

/// The typed fact behind the verdict. `usable`: the devices CUDA enumerates
/// all work, whatever the verdict says about a GPU it does not enumerate;
/// then no failure is carried, and later checks run on those devices.
fn driver_fact(
    probe: &Result<DriverProbe, DriverProbeError>,
    o: &Outcome,
    usable: bool,
) -> DriverCuda {
    let (cuda_driver_version, device_count, libcuda) = match probe {
        Ok(p) => (
            p.cuda_driver_version,
            Some(p.device_count),
            p.library.clone(),
        ),
        Err(DriverProbeError::Call {
            library,
            cuda_driver_version,
            ..
        }) => (*cuda_driver_version, None, library.clone()),
        Err(_) => (None, None, None),
    };
    DriverCuda {
        cuda_driver_version,
        device_count,
        libcuda,
        failure: (o.status.is_failure() && !usable).then(|| DriverFailure {
            summary: o.summary.clone(),
            hint: o.hint.clone(),
        }),
    }
}

/// cuInit's answer when no device is visible to the process (CUDA Driver
/// API, CUresult).
const CUDA_ERROR_NO_DEVICE: i32 = 100;

/// The verdict when the driver could not be probed at all.
fn probe_error(e: &DriverProbeError, cvd: Option<&str>, first: Option<&NoDriverHere>) -> Outcome {
    match e {
        DriverProbeError::LibraryNotFound { .. } => no_libcuda(first),
        DriverProbeError::Call {
            error,
            library,
            cuda_driver_version,
        } => {
            let mut o = match first {
                // No device node at all: CUDA can see no device either.
                Some(first) if error.code == CUDA_ERROR_NO_DEVICE => {
                    first.follows(&format!("{} failed: {}", error.call, error_label(error)))
                }
                _ => call_failure(error, cvd),
            };
            if let Some(v) = cuda_driver_version {
                o = o.with_fact("cuda_driver_version", v.to_string());
            }
            if let Some(lib) = library {
                o = o.with_fact("libcuda", lib.display().to_string());
            }
            o
        }
        DriverProbeError::Library { detail } => {
            if let Some(symbol) = detail
                .strip_prefix("Missing symbol ")
                .and_then(|s| s.split(':').next())
            {
                return Outcome::fail(
                    format!("libcuda has no {symbol}: the driver is older than CUDA 12"),
                    "install a current NVIDIA driver (CUDA 12 drivers are >= 525.60.13); `nvidia-smi` shows the CUDA version it supports",
                );
            }
            Outcome::error(format!("could not use libcuda: {detail}"))
        }
    }
}

/// The report facts of a working driver.
fn driver_facts(probe: &DriverProbe) -> Outcome {
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
    out.with_fact("device_count", probe.device_count)
}

/// Free memory below this share of the GPU's total warns: a training job
/// sizes its batch to the whole GPU, so with another process holding over
/// 90% it runs out of memory at its first batch.
const LOW_FREE_SHARE: f64 = 0.10;
/// Free memory below this warns where other processes hold at least half
/// the GPU: a DDP rank needs room for its CUDA context (~0.5 GiB on Hopper),
/// NCCL's buffers (hundreds of MiB on 8 GPUs) and DDP's gradient buckets
/// (25 MiB each, a copy of every gradient) before the model and a batch. A
/// small GPU that is mostly free is small, not taken: not warned.
const LOW_FREE_MIB: u64 = 2048;

fn gib(mib: u64) -> String {
    format!("{:.1} GiB", mib as f64 / 1024.0)
}

/// A device with almost no memory free (another process holds it).
fn low_memory_finding(d: &DeviceProbe, name: &str) -> Option<Finding> {
    let (free, total) = (d.free_mem_mib?, d.total_mem_mib?);
    let below_share = (free as f64) < total as f64 * LOW_FREE_SHARE;
    let below_floor = free < LOW_FREE_MIB && free < total / 2;
    if total == 0 || !(below_share || below_floor) {
        return None;
    }
    let text = format!(
        "cuda:{} ({name}): only {} of {} free",
        d.ordinal,
        gib(free),
        gib(total)
    );
    Some(Finding::new(None, Status::Warn, text).hint(
        "other processes hold the memory of the GPUs named: a job started on them runs out of \
         memory at its first batch; find the processes with gpu.processes (`nvidia-smi`) and \
         stop them, or leave those GPUs out with CUDA_VISIBLE_DEVICES",
    ))
}

/// One device's row, and what is wrong with it (a context or copy that
/// failed, almost no free memory).
fn judge_device(d: &DeviceProbe, cvd: Option<&str>) -> (DeviceResult, Vec<Finding>) {
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
    let (summary, hint) = match &d.context {
        None => (info, None),
        Some(Ok(RoundTrip::Verified { bytes })) => (
            format!("context and {} KiB copy verified; {info}", bytes / 1024),
            None,
        ),
        Some(Ok(RoundTrip::Mismatch { bytes, first_bad })) => (
            format!(
                "copy of {} KiB came back wrong from byte {first_bad} on",
                bytes / 1024
            ),
            Some(format!(
                "cuda:{} returned different bytes than were written: the GPU or its memory is faulty — check `nvidia-smi -q -d ECC,ROW_REMAPPER`, run `dcgmi diag -r 2`, reset the GPU (`sudo nvidia-smi -r -i N`) or take it out of service",
                d.ordinal
            )),
        ),
        Some(Err(e)) => {
            let advice = error_advice(e.code, cvd);
            let meaning = advice
                .as_ref()
                .map(|a| format!(": {}", a.meaning))
                .unwrap_or_default();
            let fix = advice.map(|a| a.fix).unwrap_or_else(generic_fix);
            (
                format!("{} failed: {}{meaning}", e.call, error_label(e)),
                Some(format!("cuda:{}: {fix}", d.ordinal)),
            )
        }
    };
    let mut status = if hint.is_some() {
        Status::Fail
    } else {
        Status::Pass
    };
    let mut findings: Vec<Finding> = hint
        .map(|h| {
            Finding::new(
                None,
                Status::Fail,
                format!("cuda:{} ({name}): {summary}", d.ordinal),
            )
            .hint(h)
        })
        .into_iter()
        .collect();
    let mut summary = summary;
    if let Some(low) = low_memory_finding(d, &name) {
        if status == Status::Pass {
            status = Status::Warn;
            summary = format!("{summary}; only {} free", gib(d.free_mem_mib.unwrap_or(0)));
        }
        findings.push(low);
    }
    let row = DeviceResult {
        index: d.ordinal,
        label: None,
        name,
        uuid: None,
        status,
        summary,
        metrics: Vec::new(),
    };
    (row, findings)
}

/// A device count that differs from the prediction.
fn count_finding(expected: &Expectation, n: u32) -> Option<Finding> {
    let devices = format!("{n} device{}", plural(n as usize));
    let (problem, more_than_predicted) = match expected {
        Expectation::Exactly { count, from } if *count != n => {
            (format!("CUDA sees {devices} but {from}"), n > *count)
        }
        Expectation::AtLeast { count, from } if n < *count => (
            format!("CUDA sees {devices} but {from} expects at least {count}"),
            false,
        ),
        _ => return None,
    };
    let hint = if more_than_predicted {
        // No GPU is missing: the prediction and the driver disagree.
        "CUDA enumerates more devices than predicted: check that CUDA_VISIBLE_DEVICES selects what you intend (`nvidia-smi -L` lists the GPUs and their UUIDs), and that NVML and libcuda (fact libcuda) come from the same driver installation (--nvml-lib, LD_LIBRARY_PATH)"
    } else {
        "a GPU that NVML lists but CUDA cannot use is usually in a bad state or has fallen off the bus: check `nvidia-smi -q`, `sudo dmesg | grep -i xid`, reset it (`sudo nvidia-smi -r -i N`) or reboot; in a container, check NVIDIA_VISIBLE_DEVICES / --gpus"
    };
    Some(Finding::new(None, Status::Fail, problem).hint(hint))
}

/// A driver that runs no current PyTorch build: the first check to see it
/// says it, with the driver to install or the older build that still runs.
fn too_old_finding(cuda: CudaVersion, version: Option<&str>) -> Option<Finding> {
    let have = version.and_then(DriverVersion::parse);
    let (wheel, need) = too_old_for_current_torch(cuda, have.as_ref())?;
    let named = version.map(|v| format!(" ({v})")).unwrap_or_default();
    let text = format!(
        "the CUDA {cuda} driver{named} runs no current PyTorch build: the oldest, {} (CUDA {}, torch {}), needs a driver {need}",
        wheel.index, wheel.cuda, wheel.torch
    );
    Some(Finding::new(None, Status::Warn, text).hint(incompatible_fix(wheel.cuda, cuda, &need)))
}

/// The toolkit's stub libcuda comes first on LD_LIBRARY_PATH, and the
/// driver's libcuda.so.1 (`works`) was reached around it.
fn stub_finding(stub: &std::path::Path, works: &str) -> Finding {
    let dir = stub
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    Finding::new(
        None,
        Status::Warn,
        format!(
            "{works} through libcuda.so.1, but the CUDA toolkit's stub {} comes first on LD_LIBRARY_PATH: programs that load libcuda.so get the stub and fail with CUDA_ERROR_STUB_LIBRARY (34); gpucheck's CUDA checks run without that folder and load libcuda.so.1",
            stub.display()
        ),
    )
    .hint(format!(
        "remove {dir} from LD_LIBRARY_PATH: the stubs are for linking when building, never for running (PyTorch loads libcuda.so.1 and is not affected; cudarc, some JAX and CuPy builds load libcuda.so)"
    ))
}

/// Judge a driver that initialised: the device count, then every device.
/// Also says whether every device CUDA enumerates works (see
/// [`driver_fact`]).
fn judge_probe(f: &DriverFacts, probe: &DriverProbe, cvd: Option<&str>) -> (Outcome, bool) {
    let version = probe
        .cuda_driver_version
        .map(|v| format!("CUDA {v} driver"))
        .unwrap_or_else(|| "CUDA driver".to_string());
    let mut out = driver_facts(probe);
    let mut findings = Findings::new();
    for d in &probe.devices {
        let (row, finding) = judge_device(d, cvd);
        out = out.with_device(row);
        findings.items.extend(finding);
    }
    let n = probe.device_count;
    if n == 0 {
        let o = Outcome {
            status: Status::Fail,
            summary: format!("the {version} initialised but sees no devices"),
            hint: error_advice(100, cvd).map(|a| a.fix),
            ..out
        };
        return (o, false);
    }
    let usable = !findings.worst().is_failure();
    if let Some(mut problem) = count_finding(&f.expected, n) {
        if cvd.is_none() {
            problem.text.push_str(&not_enumerated(&f.nvml_gpus, probe));
        }
        findings.items.insert(0, problem);
    }
    if let Some(old) = probe
        .cuda_driver_version
        .and_then(|c| too_old_finding(c, f.driver_version.as_deref()))
    {
        findings.push(old);
    }
    if let Some(stub) = &probe.stub_first {
        findings.push(stub_finding(
            stub,
            &format!("{version}, {n} device{}", plural(n as usize)),
        ));
        out = out.with_fact("libcuda_stub", stub.display().to_string());
    }
    let tried = probe.devices.iter().any(|d| d.context.is_some());
    let work = if f.contexts && tried {
        "; a context and a verified host-device copy on each"
    } else {
        ""
    };
    let note = match &f.expected {
        Expectation::Exactly { from, .. } => format!(" (as {from})"),
        _ => String::new(),
    };
    let verdict = findings.conclude(
        format!("{version}, {n} device{}{note}{work}", plural(n as usize)),
        Vec::new(),
    );
    let o = Outcome {
        status: verdict.status,
        summary: verdict.summary,
        hint: verdict.hint,
        ..out
    };
    (o, usable)
}

/// "; CUDA does not enumerate GPU 5 (GPU-..., PCI 00000000:AB:00.0)": the
/// NVML GPUs no CUDA device matches, or nothing when none can be named.
fn not_enumerated(nvml_gpus: &[GpuInfo], probe: &DriverProbe) -> String {
    let cuda: Vec<(Option<String>, Option<String>)> = probe
        .devices
        .iter()
        .map(|d| (d.uuid.clone(), d.pci_bus_id.clone()))
        .collect();
    let missing: Vec<String> = gpus_cuda_does_not_enumerate(nvml_gpus, &cuda)
        .iter()
        .map(|g| format!("GPU {} ({}, PCI {})", g.index, g.uuid, g.pci_bus_id))
        .collect();
    if missing.is_empty() || missing.len() >= nvml_gpus.len() {
        return String::new();
    }
    format!(
        "; CUDA does not enumerate {}",
        list_cut(&missing, MISSING_GPUS_NAMED)
    )
}

/// GPUs named in full when CUDA misses several (the rest are counted).
const MISSING_GPUS_NAMED: usize = 4;

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
How to fix: libcuda missing means no driver in this environment — in a container, run it with the NVIDIA runtime (`docker run --gpus all`); on a host, install the driver. 802: `sudo systemctl start nvidia-fabricmanager` (its version must match the driver). 803/804: remove the cuda-compat folder from LD_LIBRARY_PATH or upgrade the driver. 100: check CUDA_VISIBLE_DEVICES and the container's GPU access. 999 or a wrong copy: look for Xid errors in `dmesg`, reset the GPU (`sudo nvidia-smi -r -i N`) or reboot. A device count below NVML's names the GPU CUDA does not enumerate (its UUID and PCI bus id): find why with `nvidia-smi -q` and `dmesg`; the checks after this one run on the devices CUDA does enumerate. A GPU with under 10% of its memory free, or under 2 GiB while others hold over half of it, warns: another process holds it (gpu.processes). A driver that runs no current PyTorch build (a CUDA 11.x driver) warns with the driver to install. The CUDA toolkit's stub libcuda (a `stubs` folder) first on LD_LIBRARY_PATH warns: programs that load libcuda.so get the stub, and the folder should come off LD_LIBRARY_PATH. gpucheck's own CUDA checks (this one, cuda.copy_bandwidth, nccl.allreduce, nccl.nic_path) start without that folder, so they all load the driver's libcuda.so.1; a stub loaded anyway (CUDA_ERROR_STUB_LIBRARY, 34) is named in their verdicts.\n\n\
The device count is compared with NVML's GPU count when CUDA_VISIBLE_DEVICES is unset and MIG is off; without NVML, `--expect-gpus N` gives the floor."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let cvd = env_lossy("CUDA_VISIBLE_DEVICES");
        let nvml_gpus = gpus_for_run(ctx).ok();
        let contexts = ctx.options.profile >= Profile::Standard;
        let facts = DriverFacts {
            probe: cuda_probe::probe_driver(contexts),
            nvml_gpus: nvml_gpus.clone().unwrap_or_default(),
            expected: predict_devices(
                nvml_gpus.as_deref(),
                cvd.as_deref(),
                ctx.options.expect_gpus,
            ),
            cuda_visible_devices: cvd,
            driver_version: driver_for_run(ctx)
                .ok()
                .map(|d| d.driver_version)
                .or_else(cuda_probe::kernel_driver_version),
            contexts,
            first_cause: NoDriverHere::in_run(ctx),
        };
        evaluate_driver(&facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nvml;
    use crate::Cause;
    use std::path::PathBuf;

    fn v(major: u32, minor: u32) -> CudaVersion {
        CudaVersion::new(major, minor)
    }

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
                    uuid: Some(format!("GPU-fa4e000{i}-1111-4222-8333-00000000000{i}")),
                    pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + i)),
                    free_mem_mib: Some(80_000),
                    context: Some(Ok(RoundTrip::Verified { bytes: 65536 })),
                })
                .collect(),
            stub_first: None,
        }
    }

    fn facts(probe: Result<DriverProbe, DriverProbeError>, expected: Expectation) -> DriverFacts {
        DriverFacts {
            probe,
            expected,
            nvml_gpus: Vec::new(),
            cuda_visible_devices: None,
            driver_version: None,
            contexts: true,
            first_cause: None,
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
        assert_eq!(o.facts["device_count"], crate::FactValue::Integer(8));
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
    fn missing_libcuda_after_an_earlier_missing_driver_points_to_it() {
        let mut f = facts(
            Err(DriverProbeError::LibraryNotFound { tried: vec![] }),
            Expectation::Unknown { why: String::new() },
        );
        f.first_cause = Some(NoDriverHere {
            check: "gpu.driver".into(),
            reason: "no NVIDIA driver library here".into(),
        });
        let o = evaluate_driver(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "libcuda.so.1 not found — same cause as gpu.driver (no NVIDIA driver library here)"
        );
        let hint = o.hint.clone().unwrap_or_default();
        assert!(hint.starts_with("see gpu.driver: its fix"), "{hint}");
        assert!(!hint.contains("docker run"), "{hint}");
        assert_eq!(
            o.cause,
            Some(Cause::SameCause {
                check: "gpu.driver".into()
            })
        );
        // Later checks still learn that the driver is unusable.
        assert!(o.fact::<DriverCuda>().unwrap().failure.is_some());
        // Alone, it is the first cause and says so for the checks after it.
        f.first_cause = None;
        let o = evaluate_driver(&f);
        assert_eq!(
            o.fact::<NoDriverHere>().map(|c| c.check),
            Some("cuda.driver".into())
        );
    }

    #[test]
    fn no_device_after_no_device_node_at_all_points_to_host_devices() {
        let mut f = facts(
            call_failed(call_err("cuInit", 100)),
            Expectation::Unknown { why: String::new() },
        );
        f.first_cause = Some(NoDriverHere {
            check: "host.devices".into(),
            reason: "no GPU was passed into this docker container".into(),
        });
        let o = evaluate_driver(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "cuInit failed: CUDA_ERROR_NO_DEVICE (100) — same cause as host.devices (no GPU was \
             passed into this docker container)"
        );
        assert!(!o.hint.clone().unwrap_or_default().contains("docker run"));
        assert_eq!(o.facts["cuda_driver_version"], "12.8");
        // Another cuInit error has a cause of its own.
        f.probe = call_failed(call_err("cuInit", 802));
        assert!(evaluate_driver(&f).summary.contains("802"));
        assert_eq!(evaluate_driver(&f).cause, None);
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

    /// NVML's view of the GPUs `healthy` describes.
    fn nvml_gpus(n: u32) -> Vec<nvml::GpuInfo> {
        (0..n)
            .map(|i| nvml::GpuInfo {
                index: i,
                name: "NVIDIA H100 80GB HBM3".to_string(),
                uuid: format!("GPU-fa4e000{i}-1111-4222-8333-00000000000{i}"),
                pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
                memory_total_mib: 81559,
                compute_capability: Some((9, 0)),
                mig_enabled: Some(false),
                mig_uuids: vec![],
            })
            .collect()
    }

    #[test]
    fn the_gpu_cuda_does_not_enumerate_is_named_and_the_others_stay_usable() {
        // CUDA sees GPUs 0-4, 6, 7 of NVML's eight.
        let mut p = healthy(8);
        p.devices.remove(5);
        p.device_count = 7;
        let mut f = facts(
            Ok(p),
            Expectation::Exactly {
                count: 8,
                from: "NVML sees 8 GPUs".to_string(),
            },
        );
        f.nvml_gpus = nvml_gpus(8);
        let o = evaluate_driver(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "CUDA sees 7 devices but NVML sees 8 GPUs; CUDA does not enumerate GPU 5 \
             (GPU-fa4e0005-1111-4222-8333-000000000005, PCI 00000000:1D:00.0)"
        );
        assert!(o.hint.as_deref().unwrap().contains("fallen off the bus"));
        // The seven work: later checks run on them.
        let d = o.fact::<DriverCuda>().unwrap();
        assert_eq!(d.failure, None);
        assert_eq!(d.working_device_count(), Some(7));
        // A context failing on one of them is a driver that does not work.
        let mut p = healthy(7);
        p.devices[2].context = Some(Err(call_err("cuDevicePrimaryCtxRetain", 999)));
        f.probe = Ok(p);
        let d = evaluate_driver(&f).fact::<DriverCuda>().unwrap();
        assert!(d.failure.is_some());
    }

    #[test]
    fn a_gpu_with_almost_no_free_memory_warns_naming_it() {
        let mut p = healthy(2);
        p.devices[1].free_mem_mib = Some(102);
        let o = evaluate_driver(&facts(Ok(p), Expectation::Unknown { why: String::new() }));
        assert_eq!(o.status, Status::Warn, "{o:?}");
        assert_eq!(
            o.summary,
            "cuda:1 (NVIDIA H100 80GB HBM3): only 0.1 GiB of 79.6 GiB free"
        );
        assert!(o.hint.as_deref().unwrap().contains("gpu.processes"));
        assert_eq!(o.devices[1].status, Status::Warn);
        assert_eq!(o.devices[0].status, Status::Pass);
        // 10% of 80 GiB free, 2 GiB on a small GPU, and a tiny GPU that is
        // all free are enough; 1.5 GiB of 12 GiB is not.
        for (free, total) in [(8_200, 81_559), (2_048, 4_096), (96, 96)] {
            let mut p = healthy(1);
            p.devices[0].free_mem_mib = Some(free);
            p.devices[0].total_mem_mib = Some(total);
            let o = evaluate_driver(&facts(Ok(p), Expectation::Unknown { why: String::new() }));
            assert_eq!(o.status, Status::Pass, "{free} of {total}: {o:?}");
        }
        let mut p = healthy(1);
        p.devices[0].free_mem_mib = Some(1_536);
        p.devices[0].total_mem_mib = Some(12_288);
        let o = evaluate_driver(&facts(Ok(p), Expectation::Unknown { why: String::new() }));
        assert_eq!(o.status, Status::Warn, "{o:?}");
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
    fn a_driver_that_runs_no_current_torch_warns_with_both_fixes() {
        let mut p = healthy(8);
        p.cuda_driver_version = Some(v(11, 4));
        let mut f = facts(
            Ok(p),
            Expectation::Exactly {
                count: 8,
                from: "NVML sees 8 GPUs".to_string(),
            },
        );
        f.driver_version = Some("470.57.02".to_string());
        let o = evaluate_driver(&f);
        assert_eq!(o.status, Status::Warn, "{o:?}");
        assert_eq!(
            o.summary,
            "the CUDA 11.4 driver (470.57.02) runs no current PyTorch build: the oldest, cu126 (CUDA 12.6, torch 2.6 and newer), needs a driver >= 525.60.13"
        );
        let hint = o.hint.unwrap();
        assert!(
            hint.contains("install an NVIDIA driver >= 525.60.13"),
            "{hint}"
        );
        assert!(hint.contains("whl/cu118"), "{hint}");
        // CUDA 12.0 runs cu126 through minor-version compatibility.
        let mut p = healthy(1);
        p.cuda_driver_version = Some(v(12, 0));
        let o = evaluate_driver(&facts(Ok(p), Expectation::Unknown { why: String::new() }));
        assert_eq!(o.status, Status::Pass, "{o:?}");
    }

    #[test]
    fn compat_libcuda_is_reported() {
        let mut p = healthy(1);
        p.library = Some(PathBuf::from(
            "/usr/local/cuda-13.0/compat/libcuda.so.580.65.06",
        ));
        let o = evaluate_driver(&facts(Ok(p), Expectation::Unknown { why: String::new() }));
        assert_eq!(o.status, Status::Pass);
        assert!(o.facts["forward_compat"]
            .to_string()
            .contains("/usr/local/cuda-13.0/compat"));
    }

    #[test]
    fn a_timed_out_gpu_check_keeps_nvml_from_being_asked_again() {
        use crate::facts::nvml::{driver_for_run, nvml_hung};
        let mut ctx = Context::default();
        assert_eq!(nvml_hung(&ctx), None);
        ctx.earlier.insert(
            "gpu.driver".to_string(),
            Outcome::fail("libnvidia-ml.so.1 not found", "install the driver"),
        );
        assert_eq!(nvml_hung(&ctx), None);
        ctx.earlier.insert(
            "gpu.ecc".to_string(),
            Outcome::fail("timed out after 10 s", "x").with_cause(Cause::TimedOut {
                after_s: 10.0,
                stage: None,
            }),
        );
        assert_eq!(
            nvml_hung(&ctx).as_deref(),
            Some("NVML did not answer in gpu.ecc")
        );
        assert!(matches!(
            gpus_for_run(&ctx),
            Err(nvml::NvmlFailure::Other { .. })
        ));
        assert!(driver_for_run(&ctx).is_err());
    }

    #[test]
    fn the_driver_fact_carries_the_version_count_and_failure() {
        let o = evaluate_driver(&facts(
            Ok(healthy(8)),
            Expectation::Unknown { why: String::new() },
        ));
        let d = o.fact::<DriverCuda>().unwrap();
        assert_eq!(d.cuda_driver_version, Some(v(12, 8)));
        assert_eq!(d.working_device_count(), Some(8));
        let o = evaluate_driver(&facts(
            call_failed(call_err("cuInit", 802)),
            Expectation::Unknown { why: String::new() },
        ));
        let d = o.fact::<DriverCuda>().unwrap();
        assert_eq!(d.cuda_driver_version, Some(v(12, 8)));
        assert_eq!(d.working_device_count(), None);
        assert!(d.failure.unwrap().summary.contains("802"));
    }
}

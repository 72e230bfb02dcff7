//! The gpu checks: what NVML says about the driver and every GPU, judged for a
//! multi-GPU DDP job. Each check asks the NVML probe for plain facts and hands
//! them to a pure `evaluate_*` function; all of them are NVML queries only, so
//! they run in-process in the quick profile.
//!
//! Per-GPU problems become findings; a check's verdict is its worst finding,
//! its summary names the GPUs, and its hint says what to run on which GPU
//! (hints that apply to several GPUs are merged into one with the list).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::probe::nvml::{
    self, reason, Ancestor, ComputeMode, DriverInfo, EccFacts, GpuError, GpuInfo, GpuRef,
    ModeFacts, NvLinkRemote, NvLinkState, NvmlFailure, P2pStatus, PcieFacts, PerGpu, ProcessFacts,
    Reading, ThrottleFacts, TopologyFacts, Unavailable,
};
use crate::{Check, Context, DataTable, DeviceResult, Metric, Outcome, Profile, Status};

// ---------------------------------------------------------------------------
// Thresholds

/// Any volatile uncorrectable ECC error fails: gcm, Azure and Imbue all do
/// (reference/facts.md, "Health thresholds others use").
pub const MAX_VOLATILE_UNCORRECTED_ECC: u64 = 0;
/// Warn above Azure's DRAM correctable-error limit of 20,000,000
/// (reference/facts.md; gcm fails only above 50,000,000).
pub const WARN_VOLATILE_CORRECTED_ECC: u64 = 20_000_000;
/// DCGM's soft limit on retired pages: warn above 15 (reference/facts.md).
pub const WARN_RETIRED_PAGES: u32 = 15;
/// DCGM's retired-page limit: fail above 63 (reference/facts.md).
pub const MAX_RETIRED_PAGES: u32 = 63;
/// DCGM's limit of 512 uncorrectable row remaps (reference/facts.md).
pub const MAX_UNCORRECTABLE_ROW_REMAPS: u32 = 512;
/// A GPU at or above this utilization is busy: its PCIe link should run at
/// its maximum generation (the driver drops the generation only at idle to
/// save power; DCGM judges the link under load, reference/facts.md).
pub const BUSY_UTILIZATION_PCT: u32 = 10;

/// The first NVML call loads the library and, without persistence mode,
/// initialises every GPU; NVIDIA documents this as taking seconds on a
/// multi-GPU node. 10 s covers a slow 8-GPU init and still bounds a hang.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(10);
/// Once NVML is up, a check is a few dozen queries of well under a
/// millisecond each; 5 s is a thousandfold margin and bounds a wedged driver,
/// so a hang costs at most 10 s (init) + 5 s (one check) before the rest are
/// skipped or fail at once (the probe remembers the hung call).
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// ECC and memory-health thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct EccThresholds {
    pub max_volatile_uncorrected: u64,
    pub warn_volatile_corrected: u64,
    pub warn_retired_pages: u32,
    pub max_retired_pages: u32,
    pub max_uncorrectable_row_remaps: u32,
}

impl Default for EccThresholds {
    fn default() -> Self {
        EccThresholds {
            max_volatile_uncorrected: MAX_VOLATILE_UNCORRECTED_ECC,
            warn_volatile_corrected: WARN_VOLATILE_CORRECTED_ECC,
            warn_retired_pages: WARN_RETIRED_PAGES,
            max_retired_pages: MAX_RETIRED_PAGES,
            max_uncorrectable_row_remaps: MAX_UNCORRECTABLE_ROW_REMAPS,
        }
    }
}

/// PCIe link thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct PcieThresholds {
    pub busy_utilization_pct: u32,
}

impl Default for PcieThresholds {
    fn default() -> Self {
        PcieThresholds {
            busy_utilization_pct: BUSY_UTILIZATION_PCT,
        }
    }
}

// ---------------------------------------------------------------------------
// Findings: per-GPU observations, merged into one outcome

/// One observation about one GPU (or about the host when `gpu` is None).
/// `hint` may use `{gpus}` ("GPU 3" / "GPUs 3, 5") and `{ids}` ("3,5", for
/// nvidia-smi -i); findings with the same hint template share one hint.
#[derive(Debug, Clone)]
struct Finding {
    gpu: Option<u32>,
    status: Status,
    text: String,
    hint: Option<String>,
}

impl Finding {
    fn new(gpu: Option<u32>, status: Status, text: impl Into<String>) -> Self {
        Finding {
            gpu,
            status,
            text: text.into(),
            hint: None,
        }
    }

    fn hint(mut self, template: impl Into<String>) -> Self {
        self.hint = Some(template.into());
        self
    }
}

fn gpus_phrase(ids: &[u32]) -> String {
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    if ids.len() == 1 {
        format!("GPU {}", list[0])
    } else {
        format!("GPUs {}", list.join(", "))
    }
}

fn ids_phrase(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Summary texts for the findings at `status`, at most four.
fn summary_of(findings: &[&Finding]) -> String {
    const SHOWN: usize = 4;
    let mut parts: Vec<String> = findings
        .iter()
        .take(SHOWN)
        .map(|f| match f.gpu {
            Some(g) => format!("GPU {g}: {}", f.text),
            None => f.text.clone(),
        })
        .collect();
    if findings.len() > SHOWN {
        parts.push(format!("and {} more", findings.len() - SHOWN));
    }
    parts.join("; ")
}

/// The hints of every warn-or-worse finding, worst first, each template once
/// with the list of GPUs it applies to.
fn hints_of(findings: &[Finding]) -> String {
    let mut ordered: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.status >= Status::Warn)
        .collect();
    ordered.sort_by(|a, b| b.status.cmp(&a.status));
    let mut templates: Vec<(&str, Vec<u32>)> = Vec::new();
    for f in ordered {
        let Some(t) = f.hint.as_deref() else { continue };
        match templates.iter_mut().find(|(x, _)| *x == t) {
            Some((_, ids)) => {
                if let Some(g) = f.gpu {
                    if !ids.contains(&g) {
                        ids.push(g);
                    }
                }
            }
            None => templates.push((t, f.gpu.into_iter().collect())),
        }
    }
    templates
        .into_iter()
        .map(|(t, ids)| {
            t.replace("{gpus}", &gpus_phrase(&ids))
                .replace("{ids}", &ids_phrase(&ids))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One per-GPU verdict from that GPU's findings; `ok_text` when it has none.
fn device_result(
    gpu: &GpuRef,
    findings: &[Finding],
    ok_text: String,
    metrics: Vec<Metric>,
) -> DeviceResult {
    let mine: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.gpu == Some(gpu.index))
        .collect();
    let status = mine
        .iter()
        .map(|f| f.status)
        .fold(Status::Pass, Status::worst);
    let mut texts: Vec<&str> = mine
        .iter()
        .filter(|f| f.status >= Status::Warn)
        .map(|f| f.text.as_str())
        .collect();
    let notes: Vec<&str> = mine
        .iter()
        .filter(|f| f.status < Status::Warn)
        .map(|f| f.text.as_str())
        .collect();
    let summary = if texts.is_empty() {
        let mut s = ok_text;
        if !notes.is_empty() {
            s = format!("{s} ({})", notes.join("; "));
        }
        s
    } else {
        texts.extend(notes);
        texts.join("; ")
    };
    DeviceResult {
        index: gpu.index,
        name: gpu.name.clone(),
        uuid: gpu.uuid.clone(),
        status,
        summary,
        metrics,
    }
}

/// The check's outcome: worst finding wins; `pass_summary` when all passed.
fn conclude(pass_summary: String, findings: &[Finding], devices: Vec<DeviceResult>) -> Outcome {
    let status = findings
        .iter()
        .map(|f| f.status)
        .chain(devices.iter().map(|d| d.status))
        .fold(Status::Pass, Status::worst);
    let summary = if status < Status::Warn {
        pass_summary
    } else {
        let worst: Vec<&Finding> = findings.iter().filter(|f| f.status == status).collect();
        summary_of(&worst)
    };
    let mut outcome = Outcome::new(status, summary).with_hint(hints_of(findings));
    outcome.devices = devices;
    outcome
}

fn metric(name: &str, value: f64, unit: &str) -> Metric {
    Metric {
        name: name.to_string(),
        value,
        unit: unit.to_string(),
    }
}

/// A value or "n/a" for display.
fn shown<T: std::fmt::Display>(r: &Reading<T>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(Unavailable::NotSupported) => "n/a".to_string(),
        Err(e) => format!("? ({e})"),
    }
}

const GPU_LOST_HINT: &str =
    "{gpus} fell off the bus: look for Xid 79 in `sudo dmesg | grep -i xid`, \
drain the node and reboot it (a GPU reset is rarely enough); if it recurs, have the GPU, its riser \
and its power cabling checked";

/// Findings for a reading that has no value: lost GPUs fail, NVML errors are
/// gpucheck not finding out, "not supported" is fine and says nothing.
fn unreadable(gpu: u32, what: &str, e: &Unavailable) -> Option<Finding> {
    match e {
        Unavailable::NotSupported => None,
        Unavailable::GpuLost => Some(
            Finding::new(Some(gpu), Status::Fail, "GPU is lost (fallen off the bus)")
                .hint(GPU_LOST_HINT),
        ),
        Unavailable::Failed(msg) => Some(
            Finding::new(
                Some(gpu),
                Status::Error,
                format!("could not read {what}: {msg}"),
            )
            .hint(
                "NVML answered with an error: run `nvidia-smi -q -i {ids}` to see what the driver \
                 reports, and check `sudo dmesg` for NVRM/Xid messages",
            ),
        ),
    }
}

/// The findings of GPUs NVML counts but could not open.
fn open_failures<T>(gpus: &[PerGpu<T>]) -> Vec<Finding> {
    gpus.iter()
        .filter_map(|g| match &g.facts {
            Ok(_) => None,
            Err(e) => unreadable(g.gpu.index, "the GPU", e).or_else(|| {
                Some(Finding::new(
                    Some(g.gpu.index),
                    Status::Skip,
                    "not supported on this GPU",
                ))
            }),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// NVML itself

fn lib(ctx: &Context) -> Option<&Path> {
    ctx.options.nvml_lib.as_deref()
}

/// The verdict when NVML cannot be used at all, with a hint per cause.
pub fn nvml_failure_outcome(failure: &NvmlFailure, lib: Option<&Path>) -> Outcome {
    match failure {
        NvmlFailure::LibraryNotFound { detail } => match lib {
            Some(path) => Outcome::fail(
                format!("cannot load NVML from --nvml-lib {}: {detail}", path.display()),
                "check the path given to --nvml-lib (it must be the driver's libnvidia-ml.so.1), \
                 or leave the flag out to use the system's",
            ),
            None => Outcome::fail(
                format!(
                    "NVIDIA driver library {} not found: no driver here, or a container without GPU access",
                    nvml::DEFAULT_LIBRARY
                ),
                "on a host, install the NVIDIA driver (e.g. `sudo apt install nvidia-driver-570-server`, \
                 or NVIDIA's .run / CUDA repo packages) and check `nvidia-smi`; in a container, start it \
                 with `docker run --gpus all` (needs the NVIDIA Container Toolkit: \
                 `sudo nvidia-ctk runtime configure --runtime=docker`), or on Kubernetes request \
                 `nvidia.com/gpu` resources; or point gpucheck at the library with --nvml-lib PATH",
            )
            .with_fact("nvml_error", detail.clone()),
        },
        NvmlFailure::DriverNotLoaded => Outcome::fail(
            "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)",
            "load it with `sudo modprobe nvidia`; if that fails, `sudo dmesg | grep -i nvrm` says why: \
             Secure Boot refusing an unsigned module (enroll the MOK key or sign it), or a DKMS build \
             that failed after a kernel upgrade (reinstall the driver for the running kernel: \
             `sudo dkms autoinstall`)",
        ),
        NvmlFailure::LibRmVersionMismatch => Outcome::fail(
            "driver/library version mismatch (NVML_ERROR_LIB_RM_VERSION_MISMATCH): the NVML library \
             does not match the loaded kernel module",
            "the driver was upgraded without reloading the kernel module: reboot, or stop everything \
             using the GPUs (nvidia-persistenced, DCGM, Xorg) and reload the modules: \
             `sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia`; \
             compare `cat /proc/driver/nvidia/version` with the installed package; in a container, \
             the image must not ship its own driver libraries",
        ),
        NvmlFailure::NoPermission => Outcome::fail(
            "no permission to talk to the NVIDIA driver (NVML_ERROR_NO_PERMISSION)",
            "check the device nodes: `ls -l /dev/nvidia*` should be readable and writable by your \
             user (crw-rw-rw-, or your user in the owning group; the driver's NVreg_DeviceFileMode \
             and NVreg_DeviceFileGID set this); in a container pass them through (`--gpus all`), \
             and with SELinux check `ausearch -m avc`",
        ),
        NvmlFailure::Other { detail } => Outcome::fail(
            format!("NVML failed: {detail}"),
            "run `nvidia-smi` to see the driver's own error and check `sudo dmesg` for NVRM/Xid \
             messages; a GPU reset (`sudo nvidia-smi -r`) or reboot clears a wedged driver",
        ),
    }
}

/// What the runner shows when an NVML check times out.
fn nvml_timeout_hint(id: &str) -> String {
    let what = match nvml::hung_call() {
        Some(call) => format!("NVML did not return from {call}"),
        None => "NVML did not answer".to_string(),
    };
    format!(
        "{what}: the driver looks hung. Look for Xid errors (`sudo dmesg | grep -i xid`) and a GPU \
         that fell off the bus (`nvidia-smi`, `lspci | grep -i nvidia`); a GPU reset or a reboot \
         usually clears it. Without persistence mode the first NVML call initialises every GPU and \
         can take seconds: enable it (`sudo nvidia-smi -pm 1`) or give it longer with --timeout SECS; \
         or leave this check out with --skip {id}"
    )
}

/// CUDA's version encoding (12080) as people write it ("12.8").
fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

// ---------------------------------------------------------------------------
// gpu.driver

/// Judge NVML's initialisation and report the versions.
pub fn evaluate_driver(facts: &Result<DriverInfo, NvmlFailure>, lib: Option<&Path>) -> Outcome {
    let library = lib.map_or(nvml::DEFAULT_LIBRARY.to_string(), |p| {
        p.display().to_string()
    });
    match facts {
        Err(f) => nvml_failure_outcome(f, lib).with_fact("nvml_library", library),
        Ok(d) => {
            let cuda = d
                .cuda_driver_version
                .map_or("n/a".to_string(), cuda_version);
            Outcome::pass(format!(
                "driver {}, NVML {}, supports CUDA {cuda}",
                d.driver_version, d.nvml_version
            ))
            .with_fact("driver_version", d.driver_version.clone())
            .with_fact("nvml_version", d.nvml_version.clone())
            .with_fact("cuda_driver_version", cuda)
            .with_fact("nvml_library", library)
        }
    }
}

pub struct Driver;

impl Check for Driver {
    fn id(&self) -> &'static str {
        "gpu.driver"
    }
    fn title(&self) -> &'static str {
        "NVIDIA driver and NVML"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn timeout(&self) -> Duration {
        DRIVER_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Loads the NVIDIA Management Library (libnvidia-ml.so.1) and reports the driver version, the NVML \
version and the newest CUDA version the driver supports.

Every GPU check, and PyTorch itself, needs a working driver: if NVML cannot start, no CUDA program \
can either. The CUDA version shown is the ceiling for the CUDA runtime a PyTorch wheel may bundle.

Library not found: there is no NVIDIA driver on this machine, or the container was started without \
GPU access. Install the driver on the host, and start containers with `docker run --gpus all` (NVIDIA \
Container Toolkit) or request nvidia.com/gpu on Kubernetes. --nvml-lib PATH points at a library \
elsewhere.

Driver not loaded: the kernel module is missing. `sudo modprobe nvidia`; `dmesg | grep -i nvrm` \
explains a refusal (Secure Boot, a DKMS build that failed after a kernel upgrade).

Driver/library version mismatch: the driver package was upgraded but the old kernel module is still \
loaded. Reboot, or stop every GPU user and reload the nvidia modules.

No permission: the /dev/nvidia* device nodes are not accessible to this user or container."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        evaluate_driver(&nvml::driver(lib(ctx)), lib(ctx))
    }
}

// ---------------------------------------------------------------------------
// gpu.count

fn gpu_line(g: &GpuInfo) -> String {
    let memory = if g.memory_total_mib > 0 {
        format!("{} MiB", g.memory_total_mib)
    } else {
        "memory n/a".to_string()
    };
    let cc = g
        .compute_capability
        .map_or("cc n/a".to_string(), |(a, b)| format!("cc {a}.{b}"));
    let mut line = format!("{}, {memory}, {cc}, {}", g.name, g.pci_bus_id);
    if g.mig_enabled == Some(true) {
        line.push_str(&format!(", MIG on ({} instances)", g.mig_uuids.len()));
    }
    line
}

/// Judge the GPU inventory: none, fewer than expected, unopenable, mixed.
pub fn evaluate_count(inventory: &[Result<GpuInfo, GpuError>], expect: Option<u32>) -> Outcome {
    let mut findings = Vec::new();
    let mut devices = Vec::new();
    let mut outcome_facts = BTreeMap::new();
    let good: Vec<&GpuInfo> = inventory.iter().filter_map(|g| g.as_ref().ok()).collect();
    for slot in inventory {
        match slot {
            Ok(g) => {
                outcome_facts.insert(
                    format!("gpu{}", g.index),
                    format!("{} {}", gpu_line(g), g.uuid),
                );
                devices.push(DeviceResult {
                    index: g.index,
                    name: g.name.clone(),
                    uuid: Some(g.uuid.clone()),
                    status: Status::Pass,
                    summary: gpu_line(g),
                    metrics: vec![metric("memory_total", g.memory_total_mib as f64, "MiB")],
                });
            }
            Err(e) => {
                let f = unreadable(e.index, "the GPU", &e.error).unwrap_or_else(|| {
                    Finding::new(
                        Some(e.index),
                        Status::Error,
                        "NVML cannot describe this GPU",
                    )
                });
                let f = Finding {
                    status: f.status.worst(Status::Fail),
                    text: format!("counted but cannot be opened: {}", e.error),
                    hint: f.hint.or(Some(GPU_LOST_HINT.to_string())),
                    ..f
                };
                devices.push(DeviceResult {
                    index: e.index,
                    name: "(unknown)".to_string(),
                    uuid: None,
                    status: f.status,
                    summary: f.text.clone(),
                    metrics: Vec::new(),
                });
                findings.push(f);
            }
        }
    }

    let seen = good.len() as u32;
    if inventory.is_empty() {
        findings.push(Finding::new(None, Status::Fail, "NVML sees no GPUs").hint(
            "the driver is loaded but shows no GPU: in a container, pass them in (`docker run \
                 --gpus all`, or NVIDIA_VISIBLE_DEVICES=all with the NVIDIA runtime); on a host, \
                 check `lspci | grep -i nvidia` and `sudo dmesg | grep -i nvrm` (a GPU the driver \
                 failed to initialise, or one excluded by the kernel command line)",
        ));
    }
    if let Some(expected) = expect {
        if seen < expected {
            findings.push(
                Finding::new(
                    None,
                    Status::Fail,
                    format!("{seen} GPUs usable, expected {expected} (--expect-gpus)"),
                )
                .hint(format!(
                    "{} of the expected GPUs are missing: `nvidia-smi -L` lists what the driver \
                     sees and `lspci | grep -i nvidia` what the PCIe bus sees; a GPU that fell off \
                     the bus shows as Xid 79 in `sudo dmesg`; in a container check --gpus / \
                     NVIDIA_VISIBLE_DEVICES; otherwise reboot or reseat the card",
                    expected - seen
                )),
            );
        }
    }

    // Group by model, in index order of first appearance.
    let mut models: Vec<(&str, Vec<u32>)> = Vec::new();
    for g in &good {
        match models.iter_mut().find(|(n, _)| *n == g.name) {
            Some((_, ids)) => ids.push(g.index),
            None => models.push((g.name.as_str(), vec![g.index])),
        }
    }
    let model_list = models
        .iter()
        .map(|(n, ids)| format!("{}x {n}", ids.len()))
        .collect::<Vec<_>>()
        .join(", ");
    if models.len() > 1 {
        let largest = models
            .iter()
            .max_by_key(|(_, ids)| ids.len())
            .map(|(_, ids)| ids.clone())
            .unwrap_or_default();
        let groups = models
            .iter()
            .map(|(n, ids)| format!("{}x {n} ({})", ids.len(), gpus_phrase(ids)))
            .collect::<Vec<_>>()
            .join(", ");
        findings.push(
            Finding::new(None, Status::Warn, format!("mixed GPU models: {groups}")).hint(format!(
                "DDP waits for the slowest GPU at every step, so the faster ones idle: run one model \
                 per job, e.g. `CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={}` (NVML's order \
                 is PCI bus order)",
                ids_phrase(&largest)
            )),
        );
    }

    let pass_summary = match expect {
        Some(e) => format!("{seen} GPUs (expected {e}): {model_list}"),
        None => format!("{seen} GPUs: {model_list}"),
    };
    let mut outcome =
        conclude(pass_summary, &findings, devices).with_metric("gpu_count", seen as f64, "count");
    outcome.facts.extend(outcome_facts);
    if !model_list.is_empty() {
        outcome = outcome.with_fact("gpu_models", model_list);
    }
    outcome
}

pub struct Count;

impl Check for Count {
    fn id(&self) -> &'static str {
        "gpu.count"
    }
    fn title(&self) -> &'static str {
        "GPU inventory"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.driver"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Lists every GPU NVML sees with its index, name, UUID, PCI bus id, memory and compute capability, \
and checks the count against --expect-gpus.

A DDP job is sized for a number of GPUs; a node that silently lost one (a GPU fallen off the bus, a \
container given fewer devices) starts a smaller or failing job. Zero GPUs means nothing can train.

Fewer than expected: compare `nvidia-smi -L` with `lspci | grep -i nvidia`; a GPU the bus still \
shows but the driver does not has usually failed (Xid 79 in dmesg: reboot, then service). In a \
container check --gpus / NVIDIA_VISIBLE_DEVICES.

Mixed models warn: DDP synchronises gradients every step, so the whole job runs at the slowest GPU's \
pace. Pin a job to one model with CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=..."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::inventory(lib(ctx)) {
            Ok(inventory) => evaluate_count(&inventory, ctx.options.expect_gpus),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

// ---------------------------------------------------------------------------
// gpu.ecc

const RESET_HINT: &str = "{gpus} must be reset to finish retiring or remapping bad memory: stop \
its jobs, then `sudo nvidia-smi -r -i {ids}` or reboot";
const RMA_HINT: &str = "{gpus} has run out of memory repair: take it out of service and contact \
the vendor for a replacement (RMA); `nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT -i {ids}` shows \
the details";

/// Judge ECC state, error counters, retired pages and remapped rows.
pub fn evaluate_ecc(gpus: &[PerGpu<EccFacts>], t: &EccThresholds) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    let mut supported = 0;
    for g in gpus {
        let i = g.gpu.index;
        let Ok(f) = &g.facts else {
            devices.push(device_result(&g.gpu, &findings, "n/a".into(), Vec::new()));
            continue;
        };
        let mut metrics = Vec::new();
        let ecc_supported = !matches!(f.mode, Err(Unavailable::NotSupported));
        if ecc_supported {
            supported += 1;
        }
        match &f.mode {
            Ok(m) if !m.current => findings.push(
                Finding::new(
                    Some(i),
                    Status::Warn,
                    if m.pending {
                        "ECC off (on after the next reset)"
                    } else {
                        "ECC off"
                    },
                )
                .hint(
                    "with ECC off, memory errors corrupt training silently: enable it with \
                     `sudo nvidia-smi -i {ids} -e 1`, then reset the GPU or reboot",
                ),
            ),
            Ok(_) => {}
            Err(e) => findings.extend(unreadable(i, "the ECC mode", e)),
        }
        match &f.volatile_uncorrected {
            Ok(n) => {
                metrics.push(metric("ecc_volatile_uncorrected", *n as f64, "count"));
                if *n > t.max_volatile_uncorrected {
                    findings.push(
                        Finding::new(
                            Some(i),
                            Status::Fail,
                            format!("{n} uncorrectable ECC errors since the driver loaded"),
                        )
                        .hint(
                            "{gpus} hit uncorrectable memory errors (the jobs on it were killed): \
                             drain it and reset it (`sudo nvidia-smi -r -i {ids}`) or reboot; if \
                             they return, have it serviced (`sudo dmesg | grep -i xid` shows Xid \
                             48/63/64/94/95)",
                        ),
                    );
                }
            }
            Err(e) => findings.extend(unreadable(i, "the uncorrectable ECC count", e)),
        }
        match &f.volatile_corrected {
            Ok(n) => {
                metrics.push(metric("ecc_volatile_corrected", *n as f64, "count"));
                if *n > t.warn_volatile_corrected {
                    findings.push(
                        Finding::new(
                            Some(i),
                            Status::Warn,
                            format!(
                                "{n} correctable ECC errors since the driver loaded (above {})",
                                t.warn_volatile_corrected
                            ),
                        )
                        .hint(
                            "correctable errors are repaired, but a count this high often comes \
                             before uncorrectable ones: watch `nvidia-smi -q -d ECC -i {ids}` and \
                             plan to have {gpus} serviced",
                        ),
                    );
                }
            }
            Err(e) => findings.extend(unreadable(i, "the correctable ECC count", e)),
        }
        if let Ok(n) = &f.aggregate_uncorrected {
            metrics.push(metric("ecc_aggregate_uncorrected", *n as f64, "count"));
        }
        let retired = match (&f.retired_pages_sbe, &f.retired_pages_dbe) {
            (Ok(a), Ok(b)) => Some(a + b),
            (Ok(a), Err(_)) | (Err(_), Ok(a)) => Some(*a),
            (Err(e), Err(_)) => {
                findings.extend(unreadable(i, "the retired pages", e));
                None
            }
        };
        if let Some(n) = retired {
            metrics.push(metric("retired_pages", n as f64, "count"));
            if n > t.max_retired_pages {
                findings.push(
                    Finding::new(
                        Some(i),
                        Status::Fail,
                        format!("{n} retired memory pages (limit {})", t.max_retired_pages),
                    )
                    .hint(RMA_HINT),
                );
            } else if n > t.warn_retired_pages {
                findings.push(
                    Finding::new(
                        Some(i),
                        Status::Warn,
                        format!(
                            "{n} retired memory pages (more than {})",
                            t.warn_retired_pages
                        ),
                    )
                    .hint(
                        "{gpus} keeps retiring memory pages: watch the count with `nvidia-smi -q \
                         -d PAGE_RETIREMENT -i {ids}` and plan a replacement before it reaches the \
                         limit",
                    ),
                );
            }
        }
        match &f.pages_pending_retirement {
            Ok(true) => findings.push(
                Finding::new(Some(i), Status::Fail, "memory pages pending retirement")
                    .hint(RESET_HINT),
            ),
            Ok(false) => {}
            Err(e) => findings.extend(unreadable(i, "the page retirement status", e)),
        }
        match &f.remapped_rows {
            Ok(r) => {
                metrics.push(metric(
                    "remapped_rows_correctable",
                    r.correctable as f64,
                    "count",
                ));
                metrics.push(metric(
                    "remapped_rows_uncorrectable",
                    r.uncorrectable as f64,
                    "count",
                ));
                if r.failed {
                    findings.push(
                        Finding::new(Some(i), Status::Fail, "row remapping failed").hint(RMA_HINT),
                    );
                } else if r.uncorrectable > t.max_uncorrectable_row_remaps {
                    findings.push(
                        Finding::new(
                            Some(i),
                            Status::Fail,
                            format!(
                                "{} rows remapped for uncorrectable errors (limit {})",
                                r.uncorrectable, t.max_uncorrectable_row_remaps
                            ),
                        )
                        .hint(RMA_HINT),
                    );
                }
                if r.pending {
                    findings.push(
                        Finding::new(Some(i), Status::Fail, "row remap pending").hint(RESET_HINT),
                    );
                }
            }
            Err(e) => findings.extend(unreadable(i, "the remapped rows", e)),
        }
        let ok = if ecc_supported {
            format!(
                "ECC on, {} uncorrectable, {} correctable",
                shown(&f.volatile_uncorrected),
                shown(&f.volatile_corrected)
            )
        } else {
            "ECC not supported (n/a)".to_string()
        };
        devices.push(device_result(&g.gpu, &findings, ok, metrics));
    }
    if supported == 0 && findings.iter().all(|f| f.status < Status::Warn) {
        let mut o = Outcome::skip(format!(
            "ECC not supported on {} (typical of GeForce cards): nothing to check",
            if gpus.len() == 1 {
                "this GPU"
            } else {
                "these GPUs"
            }
        ));
        o.devices = devices;
        return o;
    }
    let pass = format!(
        "{} GPUs: no uncorrectable ECC errors, nothing pending retirement or remap",
        gpus.len()
    );
    conclude(pass, &findings, devices)
}

pub struct Ecc;

impl Check for Ecc {
    fn id(&self) -> &'static str {
        "gpu.ecc"
    }
    fn title(&self) -> &'static str {
        "ECC and memory health"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.count"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Checks every GPU's memory health: ECC mode, uncorrectable and correctable ECC error counts since \
the driver loaded, retired pages, and row remapping.

A DDP job is only as reliable as its least healthy GPU: one uncorrectable memory error kills the \
process on that GPU and with it the whole job, or, with ECC off, silently corrupts the weights.

Uncorrectable errors (any, as gcm, Azure and Imbue judge it) fail: drain the GPU and reset it \
(`sudo nvidia-smi -r -i N`) or reboot; if they return, have it serviced. Pages pending retirement or \
a row remap pending also fail: the repair completes only after a GPU reset or reboot. A failed row \
remap, more than 512 uncorrectable row remaps or more than 63 retired pages (DCGM's limits) mean the \
memory cannot be repaired in the field: RMA.

Very high correctable counts (above 20 million, Azure's limit) and more than 15 retired pages warn: \
watch them. ECC off warns (`sudo nvidia-smi -e 1`, then reset). GPUs without ECC (GeForce) are not \
applicable and skip."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::ecc(lib(ctx)) {
            Ok(gpus) => evaluate_ecc(&gpus, &EccThresholds::default()),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

// ---------------------------------------------------------------------------
// gpu.pcie

/// Judge the PCIe links: width below maximum warns; a lower generation warns
/// only while the GPU is busy (it drops at idle to save power).
pub fn evaluate_pcie(gpus: &[PerGpu<PcieFacts>], t: &PcieThresholds) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    let mut readable = 0;
    for g in gpus {
        let i = g.gpu.index;
        let Ok(f) = &g.facts else {
            devices.push(device_result(&g.gpu, &findings, "n/a".into(), Vec::new()));
            continue;
        };
        let mut metrics = Vec::new();
        for (name, r) in [
            ("pcie_link_gen", &f.link_gen),
            ("pcie_link_gen_max", &f.max_link_gen),
            ("pcie_link_width", &f.link_width),
            ("pcie_link_width_max", &f.max_link_width),
        ] {
            match r {
                Ok(v) => metrics.push(metric(
                    name,
                    *v as f64,
                    if name.contains("width") {
                        "lanes"
                    } else {
                        "gen"
                    },
                )),
                Err(e) => findings.extend(unreadable(i, "the PCIe link", e)),
            }
        }
        if let Ok(u) = &f.utilization_pct {
            metrics.push(metric("utilization", *u as f64, "%"));
        }
        if let (Ok(w), Ok(max)) = (&f.link_width, &f.max_link_width) {
            readable += 1;
            if w < max {
                findings.push(
                    Finding::new(Some(i), Status::Warn, format!("PCIe link x{w} of x{max}")).hint(
                        "{gpus} trained a narrower PCIe link than it supports, cutting host<->GPU \
                         bandwidth: reseat the card or its riser, check the slot's lane setting \
                         (bifurcation) in the BIOS, and compare LnkSta with LnkCap in \
                         `sudo lspci -vv -d 10de:`",
                    ),
                );
            }
        }
        if let (Ok(gen), Ok(max)) = (&f.link_gen, &f.max_link_gen) {
            if gen < max {
                match &f.utilization_pct {
                    Ok(u) if *u >= t.busy_utilization_pct => findings.push(
                        Finding::new(
                            Some(i),
                            Status::Warn,
                            format!("PCIe Gen{gen} of Gen{max} while {u} % busy"),
                        )
                        .hint(
                            "under load the link should run at its top generation: check the \
                             BIOS PCIe speed setting, risers and retimers, and `nvidia-smi -q -d \
                             PCIE -i {ids}` for a growing replay counter",
                        ),
                    ),
                    Ok(_) => findings.push(Finding::new(
                        Some(i),
                        Status::Pass,
                        format!("Gen{gen} of Gen{max} at idle: normal power saving"),
                    )),
                    Err(_) => findings.push(Finding::new(
                        Some(i),
                        Status::Pass,
                        format!(
                            "Gen{gen} of Gen{max}, utilization n/a (the generation drops at idle)"
                        ),
                    )),
                }
            }
        }
        let ok = format!(
            "Gen{} x{} (max Gen{} x{})",
            shown(&f.link_gen),
            shown(&f.link_width),
            shown(&f.max_link_gen),
            shown(&f.max_link_width)
        );
        devices.push(device_result(&g.gpu, &findings, ok, metrics));
    }
    if readable == 0 && findings.iter().all(|f| f.status < Status::Warn) {
        let mut o = Outcome::skip("PCIe link width not reported by these GPUs (n/a)");
        o.devices = devices;
        return o;
    }
    let idle_note = if findings.iter().any(|f| f.status == Status::Pass) {
        " (idle GPUs at a lower generation: normal)"
    } else {
        ""
    };
    let pass = format!("{readable} GPUs at full PCIe link width{idle_note}");
    conclude(pass, &findings, devices)
}

pub struct Pcie;

impl Check for Pcie {
    fn id(&self) -> &'static str {
        "gpu.pcie"
    }
    fn title(&self) -> &'static str {
        "PCIe link"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.count"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Compares each GPU's current PCIe link width and generation with the maximum it supports.

Data loading, host-to-device copies and, on machines without NVLink, NCCL's GPU-to-GPU traffic all \
cross PCIe; a link that trained at x8 instead of x16 halves that bandwidth for the whole job.

Width below the maximum warns (\"x8 of x16\"): reseat the card or riser, check the BIOS lane \
(bifurcation) settings, and compare LnkSta with LnkCap in `sudo lspci -vv -d 10de:`.

The generation drops at idle to save power, so a lower generation on an idle GPU is normal and only \
noted. It warns only while the GPU is busy (10 % utilization or more): check the BIOS PCIe speed, \
risers and retimers, and the PCIe replay counter in `nvidia-smi -q -d PCIE`."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::pcie(lib(ctx)) {
            Ok(gpus) => evaluate_pcie(&gpus, &PcieThresholds::default()),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

// ---------------------------------------------------------------------------
// gpu.throttle

const COOLING_HINT: &str = "{gpus} is throttling for heat: check airflow, fans or liquid cooling \
and the inlet temperature (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i {ids}`)";

/// Judge the clock throttle reasons of every GPU.
pub fn evaluate_throttle(gpus: &[PerGpu<ThrottleFacts>]) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    let mut readable = 0;
    let mut idle = 0;
    for g in gpus {
        let i = g.gpu.index;
        let Ok(f) = &g.facts else {
            devices.push(device_result(&g.gpu, &findings, "n/a".into(), Vec::new()));
            continue;
        };
        let bits = match &f.reasons {
            Ok(b) => *b,
            Err(e) => {
                findings.extend(unreadable(i, "the throttle reasons", e));
                devices.push(device_result(&g.gpu, &findings, "n/a".into(), Vec::new()));
                continue;
            }
        };
        readable += 1;
        if bits & reason::HW_SLOWDOWN != 0 {
            findings.push(
                Finding::new(
                    Some(i),
                    Status::Fail,
                    "hardware slowdown (clocks cut by half or more)",
                )
                .hint(
                    "{gpus} is in hardware slowdown: check temperatures and power with \
                         `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {ids}`, the cooling, \
                         and the power supply (a PSU or chassis power-brake signal also asserts \
                         it); `sudo dmesg | grep -i xid` may say more",
                ),
            );
        }
        if bits & reason::HW_THERMAL_SLOWDOWN != 0 {
            findings.push(
                Finding::new(Some(i), Status::Warn, "hardware thermal slowdown").hint(COOLING_HINT),
            );
        }
        if bits & reason::SW_THERMAL_SLOWDOWN != 0 {
            findings.push(
                Finding::new(Some(i), Status::Warn, "software thermal slowdown").hint(COOLING_HINT),
            );
        }
        if bits & reason::HW_POWER_BRAKE_SLOWDOWN != 0 {
            findings.push(
                Finding::new(Some(i), Status::Warn, "power brake slowdown").hint(
                    "the system asserted the external power brake on {gpus}: check the power \
                     supplies' health and redundancy and the chassis power policy (the BMC's \
                     event log)",
                ),
            );
        }
        for (bit, note) in [
            (reason::GPU_IDLE, "idle"),
            (
                reason::APPLICATIONS_CLOCKS_SETTING,
                "application clocks set",
            ),
            (reason::SW_POWER_CAP, "at its power cap (normal under load)"),
            (reason::SYNC_BOOST, "sync boost"),
            (reason::DISPLAY_CLOCK_SETTING, "display clock setting"),
        ] {
            if bits & bit != 0 {
                findings.push(Finding::new(Some(i), Status::Pass, note));
            }
        }
        if bits & reason::GPU_IDLE != 0 {
            idle += 1;
        }
        devices.push(device_result(
            &g.gpu,
            &findings,
            "no slowdown".into(),
            vec![metric("clock_event_reasons", bits as f64, "bitmask")],
        ));
    }
    if readable == 0 && findings.iter().all(|f| f.status < Status::Warn) {
        let mut o = Outcome::skip("clock throttle reasons not reported by these GPUs (n/a)");
        o.devices = devices;
        return o;
    }
    let pass = if idle > 0 {
        format!("{readable} GPUs: no slowdown ({idle} idle)")
    } else {
        format!("{readable} GPUs: no slowdown")
    };
    conclude(pass, &findings, devices)
}

pub struct Throttle;

impl Check for Throttle {
    fn id(&self) -> &'static str {
        "gpu.throttle"
    }
    fn title(&self) -> &'static str {
        "Clock throttling"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.count"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Reads why each GPU's clocks are held below their maximum right now (NVML's clock event reasons).

DDP runs in lockstep: one GPU slowed by heat or power drags every step of every rank down to its \
pace.

Hardware slowdown fails: the board cut its clocks by half or more (overheating, a power-supply or \
chassis power-brake signal). Check `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`, cooling and \
power. Hardware or software thermal slowdown and power-brake slowdown warn: fix airflow and cooling, \
or the power supplies.

Idle, application clocks, the software power cap (normal when the GPU works at its power limit), \
sync boost and display clocks are normal and only noted."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::throttle(lib(ctx)) {
            Ok(gpus) => evaluate_throttle(&gpus),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

// ---------------------------------------------------------------------------
// gpu.mode

/// Judge compute mode, persistence mode and MIG.
pub fn evaluate_mode(gpus: &[PerGpu<ModeFacts>]) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    for g in gpus {
        let i = g.gpu.index;
        let Ok(f) = &g.facts else {
            devices.push(device_result(&g.gpu, &findings, "n/a".into(), Vec::new()));
            continue;
        };
        let compute = match &f.compute_mode {
            Ok(ComputeMode::Prohibited) => {
                findings.push(
                    Finding::new(Some(i), Status::Fail, "compute mode Prohibited").hint(
                        "no CUDA process may use {gpus}: `sudo nvidia-smi -i {ids} -c DEFAULT`",
                    ),
                );
                "Prohibited"
            }
            Ok(ComputeMode::ExclusiveProcess) | Ok(ComputeMode::ExclusiveThread) => {
                findings.push(Finding::new(
                    Some(i),
                    Status::Pass,
                    "Exclusive Process: one process per GPU, fine for one DDP rank per GPU",
                ));
                "Exclusive Process"
            }
            Ok(ComputeMode::Default) => "Default",
            Err(e) => {
                findings.extend(unreadable(i, "the compute mode", e));
                "n/a"
            }
        };
        let persistence = match &f.persistence {
            Ok(true) => "on",
            Ok(false) => {
                findings.push(
                    Finding::new(Some(i), Status::Warn, "persistence mode off").hint(
                        "without persistence mode every CUDA start re-initialises {gpus} \
                         (seconds of first-call latency, a slower torchrun start): enable the \
                         daemon with `sudo systemctl enable --now nvidia-persistenced`, or \
                         `sudo nvidia-smi -i {ids} -pm 1`",
                    ),
                );
                "off"
            }
            Err(e) => {
                findings.extend(unreadable(i, "the persistence mode", e));
                "n/a"
            }
        };
        let mig = match &f.mig {
            Ok(m) => {
                if m.current {
                    findings.push(Finding::new(Some(i), Status::Warn, "MIG enabled").hint(
                        "NCCL and DDP cannot span MIG instances: each instance is a separate \
                         device that sees no peer, so one job cannot train across them (one \
                         process per instance only); to train on whole GPUs disable MIG with \
                         `sudo nvidia-smi -i {ids} -mig 0`, then reset the GPU \
                         (`sudo nvidia-smi -r -i {ids}`)",
                    ));
                }
                if m.current != m.pending {
                    findings.push(
                        Finding::new(
                            Some(i),
                            Status::Warn,
                            format!(
                                "MIG {} after the next reset",
                                if m.pending { "on" } else { "off" }
                            ),
                        )
                        .hint(
                            "a MIG mode change waits for a reset of {gpus}: \
                             `sudo nvidia-smi -r -i {ids}` or reboot",
                        ),
                    );
                }
                if m.current {
                    "on"
                } else {
                    "off"
                }
            }
            Err(e) => {
                findings.extend(unreadable(i, "the MIG mode", e));
                "n/a"
            }
        };
        let ok = format!("compute {compute}, persistence {persistence}, MIG {mig}");
        devices.push(device_result(&g.gpu, &findings, ok, Vec::new()));
    }
    let notes = if findings.iter().any(|f| f.status == Status::Pass) {
        " (Exclusive Process: one process per GPU)"
    } else {
        ""
    };
    let pass = format!(
        "{} GPUs: compute mode usable, persistence on, MIG off{notes}",
        gpus.len()
    );
    conclude(pass, &findings, devices)
}

pub struct Mode;

impl Check for Mode {
    fn id(&self) -> &'static str {
        "gpu.mode"
    }
    fn title(&self) -> &'static str {
        "Compute, persistence and MIG modes"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.count"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Checks each GPU's compute mode, persistence mode and MIG mode.

Compute mode Prohibited fails: no CUDA process may use the GPU (`sudo nvidia-smi -i N -c DEFAULT`). \
Exclusive Process is fine for DDP, which runs one process per GPU, but nothing else can share the \
GPU; it is noted.

Persistence mode off warns: the driver tears the GPU down when the last client exits, so every CUDA \
start pays seconds of initialisation and torchrun's ranks start slowly. Enable nvidia-persistenced \
(`sudo systemctl enable --now nvidia-persistenced`) or `sudo nvidia-smi -pm 1`.

MIG enabled warns: NCCL and DDP cannot span MIG instances (each is a separate device that sees no \
peer), so a multi-GPU job cannot use them. Disable it with `sudo nvidia-smi -i N -mig 0` and reset \
the GPU; a pending MIG change also needs that reset."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::modes(lib(ctx)) {
            Ok(gpus) => evaluate_mode(&gpus),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

// ---------------------------------------------------------------------------
// gpu.processes

fn process_text(p: &nvml::GpuProcess) -> String {
    let name = p
        .name
        .clone()
        .unwrap_or_else(|| "(not visible here: another container or PID namespace)".to_string());
    let memory = p
        .used_mib
        .map_or("memory n/a".to_string(), |m| format!("{m} MiB"));
    format!("pid {} {name} ({memory})", p.pid)
}

/// Judge the processes already holding GPU memory; `own_pid` is gpucheck.
pub fn evaluate_processes(gpus: &[PerGpu<ProcessFacts>], own_pid: u32) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    let mut busy: Vec<(u32, Vec<String>)> = Vec::new();
    let mut free: Vec<u32> = Vec::new();
    let mut pids: Vec<u32> = Vec::new();
    let mut readable = 0;
    for g in gpus {
        let i = g.gpu.index;
        let list = match &g.facts {
            Ok(ProcessFacts {
                processes: Ok(list),
            }) => list,
            Ok(ProcessFacts { processes: Err(e) }) => {
                findings.extend(unreadable(i, "the process list", e));
                devices.push(device_result(&g.gpu, &findings, "n/a".into(), Vec::new()));
                continue;
            }
            Err(_) => {
                devices.push(device_result(&g.gpu, &findings, "n/a".into(), Vec::new()));
                continue;
            }
        };
        readable += 1;
        let others: Vec<&nvml::GpuProcess> = list.iter().filter(|p| p.pid != own_pid).collect();
        if others.is_empty() {
            free.push(i);
        } else {
            let texts: Vec<String> = others.iter().map(|p| process_text(p)).collect();
            for p in &others {
                if !pids.contains(&p.pid) {
                    pids.push(p.pid);
                }
            }
            findings.push(Finding::new(Some(i), Status::Warn, texts.join(", ")));
            busy.push((i, texts));
        }
        let used: u64 = others.iter().filter_map(|p| p.used_mib).sum();
        devices.push(device_result(
            &g.gpu,
            &findings,
            "no other processes".into(),
            vec![
                metric("other_processes", others.len() as f64, "count"),
                metric("other_processes_memory", used as f64, "MiB"),
            ],
        ));
    }
    if readable == 0 && findings.iter().all(|f| f.status < Status::Warn) {
        let mut o = Outcome::skip("process lists not reported by these GPUs (n/a)");
        o.devices = devices;
        return o;
    }
    let process_count = pids.len();
    let mut outcome = if busy.is_empty() {
        conclude(
            format!("no other processes on the {readable} GPUs"),
            &findings,
            devices,
        )
    } else {
        let ids: Vec<u32> = busy.iter().map(|(i, _)| *i).collect();
        let summary = if busy.len() == 1 {
            format!(
                "someone else's job is on GPU {}: {}",
                busy[0].0,
                busy[0].1.join(", ")
            )
        } else {
            format!(
                "other processes hold memory on {}: {}",
                gpus_phrase(&ids),
                busy.iter()
                    .map(|(i, t)| format!("GPU {i}: {}", t.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        };
        let kill = pids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        let mut hint = format!(
            "DDP on a shared GPU runs out of memory or slows down: see them with `nvidia-smi`, wait \
             for that job or stop it (`kill {kill}`)"
        );
        if !free.is_empty() {
            hint.push_str(&format!(
                ", or train on the free GPUs: `CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={}`",
                ids_phrase(&free)
            ));
        }
        let mut o = conclude(String::new(), &findings, devices);
        if o.status == Status::Warn {
            o.summary = summary;
            o.hint = Some(hint);
        }
        o
    };
    outcome = outcome.with_metric("other_processes", process_count as f64, "count");
    outcome
}

pub struct Processes;

impl Check for Processes {
    fn id(&self) -> &'static str {
        "gpu.processes"
    }
    fn title(&self) -> &'static str {
        "Other processes on the GPUs"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.count"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Lists the processes that already hold memory on each GPU, with pid, name and MiB.

A DDP job assumes the GPUs are its own: someone else's job on GPU 3 takes memory (the job dies with \
out-of-memory on that rank) and compute (every step waits for the slowest rank).

Any other process warns, naming it (\"someone else's job is on GPU 3\"). See them with `nvidia-smi`, \
wait for the job or stop it, or run on the free GPUs with CUDA_DEVICE_ORDER=PCI_BUS_ID \
CUDA_VISIBLE_DEVICES=... Inside a container, processes of other containers show by pid only."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::processes(lib(ctx)) {
            Ok(gpus) => evaluate_processes(&gpus, std::process::id()),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

// ---------------------------------------------------------------------------
// gpu.topology

const TOPOLOGY_LEGEND: &str = "X = the GPU itself; NV# = # NVLinks between the pair (direct or \
through NVSwitch); PIX = at most one PCIe switch between them; PXB = several PCIe switches, no host \
bridge; PHB = through a PCIe host bridge (the CPU); NODE = across host bridges within one NUMA node; \
SYS = across NUMA nodes (the CPU interconnect); INT = same board; n/a = NVML could not say";

const P2P_LEGEND: &str = "OK = peer-to-peer reads and writes work; CNS = chipset does not support \
P2P; GNS = GPU does not support P2P; TNS = topology does not support P2P (often PCIe ACS / IOMMU); \
RK = disabled by a driver registry key; NS = not supported; U = unknown; R:/W: = read and write \
differ; n/a = NVML could not say";

fn ancestor_code(a: Ancestor) -> &'static str {
    match a {
        Ancestor::Internal => "INT",
        Ancestor::Single => "PIX",
        Ancestor::Multiple => "PXB",
        Ancestor::HostBridge => "PHB",
        Ancestor::Node => "NODE",
        Ancestor::System => "SYS",
    }
}

fn p2p_code(s: P2pStatus) -> &'static str {
    match s {
        P2pStatus::Ok => "OK",
        P2pStatus::ChipsetNotSupported => "CNS",
        P2pStatus::GpuNotSupported => "GNS",
        P2pStatus::TopologyNotSupported => "TNS",
        P2pStatus::DisabledByRegkey => "RK",
        P2pStatus::NotSupported => "NS",
        P2pStatus::Unknown => "U",
    }
}

fn p2p_words(s: P2pStatus) -> &'static str {
    match s {
        P2pStatus::Ok => "OK",
        P2pStatus::ChipsetNotSupported => "chipset does not support P2P",
        P2pStatus::GpuNotSupported => "GPU does not support P2P",
        P2pStatus::TopologyNotSupported => "PCIe topology does not support P2P",
        P2pStatus::DisabledByRegkey => "disabled by a driver registry key",
        P2pStatus::NotSupported => "not supported",
        P2pStatus::Unknown => "unknown",
    }
}

fn p2p_hint(s: P2pStatus) -> &'static str {
    match s {
        P2pStatus::GpuNotSupported => {
            "these GPUs do not support peer-to-peer (typical of GeForce cards): NCCL copies through \
             host memory, so expect lower all-reduce bandwidth; nothing to fix in software"
        }
        P2pStatus::DisabledByRegkey => {
            "a driver registry key disables P2P: look for NVreg_RegistryDwords in \
             /etc/modprobe.d/*.conf (e.g. RMForceP2PType), remove it and reload the driver"
        }
        _ => {
            "without P2P, GPU-to-GPU traffic goes through host memory. Often PCIe ACS or the IOMMU \
             blocks it: check `sudo lspci -vvv | grep ACSCtl` (SrcValid+ on the bridges above the \
             GPUs means ACS is on), disable ACS in the BIOS or boot with `iommu=pt`; run with \
             NCCL_P2P_DISABLE=1 to confirm the job works without P2P"
        }
    }
}

fn active_links(links: &Reading<Vec<NvLinkState>>) -> Vec<&NvLinkState> {
    match links {
        Ok(l) => l.iter().filter(|s| s.active).collect(),
        Err(_) => Vec::new(),
    }
}

/// NVLinks between GPUs `a` and `b`: direct ones plus those through
/// NVSwitches (as many as the side with fewer switch links has).
fn shared_nvlinks(t: &TopologyFacts, a: usize, b: usize) -> usize {
    let direct = active_links(&t.nvlinks[a])
        .iter()
        .filter(|l| l.remote == NvLinkRemote::Gpu(b as u32))
        .count();
    let switch = |i: usize| {
        active_links(&t.nvlinks[i])
            .iter()
            .filter(|l| l.remote == NvLinkRemote::Switch)
            .count()
    };
    direct + switch(a).min(switch(b))
}

/// Read and write P2P together: usable when both work.
fn p2p_pair(read: &Reading<P2pStatus>, write: &Reading<P2pStatus>) -> Option<(P2pStatus, String)> {
    match (read, write) {
        (Ok(r), Ok(w)) if r == w => Some((*r, p2p_code(*r).to_string())),
        (Ok(r), Ok(w)) => {
            let worst = if *r != P2pStatus::Ok { *r } else { *w };
            Some((worst, format!("R:{} W:{}", p2p_code(*r), p2p_code(*w))))
        }
        (Ok(s), Err(_)) | (Err(_), Ok(s)) => Some((*s, p2p_code(*s).to_string())),
        (Err(_), Err(_)) => None,
    }
}

/// Judge the GPU-to-GPU topology: P2P between every pair, NVLinks up.
pub fn evaluate_topology(t: &TopologyFacts) -> Outcome {
    let n = t.gpus.len();
    if n == 0 {
        return Outcome::skip("no GPUs: no topology to check");
    }
    let mut findings = Vec::new();
    let mut devices = Vec::new();
    for (i, links) in t.nvlinks.iter().enumerate() {
        let gpu = &t.gpus[i];
        let (ok, metrics) = match links {
            Ok(l) => {
                let up = l.iter().filter(|s| s.active).count();
                let down: Vec<u32> = l.iter().filter(|s| !s.active).map(|s| s.link).collect();
                if up > 0 && !down.is_empty() {
                    findings.push(
                        Finding::new(
                            Some(gpu.index),
                            Status::Warn,
                            format!(
                                "{up} of {} NVLinks active (down: link {})",
                                l.len(),
                                down.iter()
                                    .map(u32::to_string)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                        .hint(
                            "an NVLink of {gpus} is down, so its traffic shares the remaining \
                             links or falls back to PCIe: check `nvidia-smi nvlink -s -i {ids}` \
                             and `nvidia-smi nvlink -e -i {ids}`, `sudo dmesg | grep -i xid` (Xid \
                             74), and on NVSwitch systems `systemctl status nvidia-fabricmanager`; \
                             a GPU reset or reboot may retrain the link, otherwise it needs \
                             service",
                        ),
                    );
                }
                let to_switch = l
                    .iter()
                    .any(|s| s.active && s.remote == NvLinkRemote::Switch);
                let text = if l.is_empty() {
                    "no NVLink".to_string()
                } else if to_switch {
                    format!("{up}/{} NVLinks active (to NVSwitch)", l.len())
                } else {
                    format!("{up}/{} NVLinks active", l.len())
                };
                (
                    text,
                    vec![
                        metric("nvlinks_active", up as f64, "count"),
                        metric("nvlinks", l.len() as f64, "count"),
                    ],
                )
            }
            Err(Unavailable::NotSupported) => ("no NVLink".to_string(), Vec::new()),
            Err(e) => {
                findings.extend(unreadable(gpu.index, "the NVLinks", e));
                ("NVLinks n/a".to_string(), Vec::new())
            }
        };
        devices.push(device_result(gpu, &findings, ok, metrics));
    }
    if n == 1 {
        let mut o = conclude(
            "single GPU: no peer links to check".to_string(),
            &findings,
            devices,
        );
        if o.status == Status::Pass {
            o.summary = "single GPU: no peer links to check".to_string();
        }
        return o;
    }

    let mut topo = vec![vec![String::new(); n]; n];
    let mut p2p = vec![vec![String::new(); n]; n];
    for (i, row) in topo.iter_mut().enumerate() {
        row[i] = "X".to_string();
        p2p[i][i] = "X".to_string();
    }
    let mut no_p2p = 0;
    let mut nvlink_pairs = 0;
    for pair in &t.pairs {
        let (a, b) = (pair.a as usize, pair.b as usize);
        if a >= n || b >= n {
            continue;
        }
        let links = shared_nvlinks(t, a, b);
        let cell = if links > 0 {
            format!("NV{links}")
        } else {
            match &pair.ancestor {
                Ok(x) => ancestor_code(*x).to_string(),
                Err(_) => "n/a".to_string(),
            }
        };
        topo[a][b] = cell.clone();
        topo[b][a] = cell;
        let nvlink_ok = pair.p2p_nvlink == Ok(P2pStatus::Ok);
        let pcie = p2p_pair(&pair.p2p_read, &pair.p2p_write);
        let p2p_cell = match (&pcie, nvlink_ok) {
            (_, true) => "OK".to_string(),
            (Some((_, code)), false) => code.clone(),
            (None, false) => "n/a".to_string(),
        };
        p2p[a][b] = p2p_cell.clone();
        p2p[b][a] = p2p_cell;
        let pair_name = format!("GPU{a}-GPU{b}");
        if links > 0 {
            nvlink_pairs += 1;
            if !nvlink_ok && pair.p2p_nvlink.is_ok() {
                findings.push(
                    Finding::new(
                        None,
                        Status::Warn,
                        format!("{pair_name}: NVLinks up but P2P over NVLink unavailable"),
                    )
                    .hint(
                        "on NVSwitch systems (HGX/DGX) the fabric manager must run, at the \
                         driver's version: `sudo systemctl enable --now nvidia-fabricmanager`; \
                         `nvidia-smi -q | grep -i -A2 fabric` shows its state",
                    ),
                );
            }
        }
        if !nvlink_ok {
            if let Some((status, _)) = pcie {
                if status != P2pStatus::Ok {
                    no_p2p += 1;
                    findings.push(
                        Finding::new(
                            None,
                            Status::Warn,
                            format!("no P2P between {pair_name} ({})", p2p_words(status)),
                        )
                        .hint(p2p_hint(status)),
                    );
                }
            }
        }
    }
    let header: Vec<String> = std::iter::once(String::new())
        .chain((0..n).map(|i| format!("GPU{i}")))
        .collect();
    let rows = |m: Vec<Vec<String>>| -> Vec<Vec<String>> {
        m.into_iter()
            .enumerate()
            .map(|(i, r)| std::iter::once(format!("GPU{i}")).chain(r).collect())
            .collect()
    };
    let pairs = n * (n - 1) / 2;
    let pass = if nvlink_pairs == pairs {
        format!("{n} GPUs: P2P between all {pairs} pairs, all over NVLink")
    } else {
        format!("{n} GPUs: P2P between all {pairs} pairs")
    };
    let mut outcome = conclude(pass, &findings, devices);
    if no_p2p > 1 && outcome.status == Status::Warn {
        // Keep the summary short on a box where no pair has P2P.
        let first = findings
            .iter()
            .find(|f| f.text.starts_with("no P2P"))
            .map(|f| f.text.clone())
            .unwrap_or_default();
        let rest: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.status == Status::Warn && !f.text.starts_with("no P2P"))
            .collect();
        let mut summary = format!("no P2P between {no_p2p} of {pairs} GPU pairs ({first}, ...)");
        if !rest.is_empty() {
            summary = format!("{summary}; {}", summary_of(&rest));
        }
        outcome.summary = summary;
    }
    outcome
        .with_metric("p2p_pairs_unavailable", no_p2p as f64, "count")
        .with_table(DataTable {
            title: "GPU topology".to_string(),
            header: header.clone(),
            rows: rows(topo),
            legend: Some(TOPOLOGY_LEGEND.to_string()),
        })
        .with_table(DataTable {
            title: "GPU P2P read/write".to_string(),
            header,
            rows: rows(p2p),
            legend: Some(P2P_LEGEND.to_string()),
        })
}

pub struct Topology;

impl Check for Topology {
    fn id(&self) -> &'static str {
        "gpu.topology"
    }
    fn title(&self) -> &'static str {
        "GPU topology (P2P, NVLink)"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.count"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Maps how the GPUs reach each other: peer-to-peer (P2P) read/write status and NVLink for every \
pair, their common PCIe ancestor, and how many NVLinks each GPU has up; drawn like \
`nvidia-smi topo -m`.

NCCL's all-reduce, the heart of DDP, moves gradients GPU to GPU. With P2P it copies directly over \
NVLink or PCIe; without it every byte detours through host memory, which is several times slower. \
All GPUs NVML sees are judged, since a DDP job normally uses them all.

No P2P between a pair warns. On servers this is usually PCIe ACS or the IOMMU: check \
`sudo lspci -vvv | grep ACSCtl`, disable ACS in the BIOS or boot with iommu=pt, and run with \
NCCL_P2P_DISABLE=1 to confirm the job works without it. GeForce cards do not support P2P at all \
(nothing to fix). A GPU with some NVLinks down while others are up warns: check \
`nvidia-smi nvlink -s`, Xid 74 in dmesg and, on NVSwitch systems, nvidia-fabricmanager; a reset may \
retrain the link. A single GPU has nothing to check."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::topology(lib(ctx)) {
            Ok(t) => evaluate_topology(&t),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

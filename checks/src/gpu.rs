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
    self, reason, Ancestor, ComputeMode, DriverInfo, EccFacts, FabricState, GpuError, GpuInfo,
    GpuRef, ModeFacts, NvLinkRemote, NvLinkState, NvmlFailure, P2pStatus, PcieFacts, PerGpu,
    ProcessFacts, Reading, ThrottleFacts, TopologyFacts, Unavailable,
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

/// "1 GPU", "8 GPUs".
fn gpu_count(n: usize) -> String {
    match n {
        1 => "1 GPU".to_string(),
        n => format!("{n} GPUs"),
    }
}

fn ids_phrase(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Summary of findings, grouped per GPU in order of appearance ("GPU 3: a,
/// b; GPU 5: c"), at most four groups.
fn summary_of(findings: &[&Finding]) -> String {
    const SHOWN: usize = 4;
    let mut groups: Vec<(Option<u32>, Vec<&str>)> = Vec::new();
    for f in findings {
        match groups
            .iter_mut()
            .find(|(g, _)| f.gpu.is_some() && *g == f.gpu)
        {
            Some((_, texts)) => texts.push(&f.text),
            None => groups.push((f.gpu, vec![&f.text])),
        }
    }
    let mut parts: Vec<String> = groups
        .iter()
        .take(SHOWN)
        .map(|(gpu, texts)| match gpu {
            Some(g) => format!("GPU {g}: {}", texts.join(", ")),
            None => texts.join(", "),
        })
        .collect();
    if groups.len() > SHOWN {
        parts.push(format!("and {} more", groups.len() - SHOWN));
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
    ordered.sort_by_key(|f| std::cmp::Reverse(f.status));
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
        .join("; ")
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
        label: None,
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
                    label: None,
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
                    label: None,
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
                    format!(
                        "{} usable, expected {expected} (--expect-gpus)",
                        gpu_count(seen as usize)
                    ),
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

    // Group by model, in index order of first appearance, with the compute
    // capability of each model.
    let mut models: Vec<(&str, Vec<u32>)> = Vec::new();
    let mut capability: Vec<Option<(u32, u32)>> = Vec::new();
    for g in &good {
        match models.iter_mut().find(|(n, _)| *n == g.name) {
            Some((_, ids)) => ids.push(g.index),
            None => {
                models.push((g.name.as_str(), vec![g.index]));
                capability.push(g.compute_capability);
            }
        }
    }
    let model_list = models
        .iter()
        .map(|(n, ids)| format!("{}x {n}", ids.len()))
        .collect::<Vec<_>>()
        .join(", ");
    if models.len() > 1 {
        // Suggest the largest group; between equal groups the newer
        // architecture (higher compute capability), then the first.
        let largest = models
            .iter()
            .zip(&capability)
            .enumerate()
            .max_by(|(ia, ((_, a), ca)), (ib, ((_, b), cb))| {
                a.len().cmp(&b.len()).then(ca.cmp(cb)).then(ib.cmp(ia))
            })
            .map(|(_, ((_, ids), _))| ids.clone())
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
        Some(e) => format!("{} (expected {e}): {model_list}", gpu_count(seen as usize)),
        None => format!("{}: {model_list}", gpu_count(seen as usize)),
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
            Ok(m) if !m.current && m.pending => findings.push(
                Finding::new(Some(i), Status::Warn, "ECC off (on after the next reset)").hint(
                    "ECC is switched on for {gpus} but takes effect only after a reset: stop its \
                     jobs, then `sudo nvidia-smi -r -i {ids}` or reboot",
                ),
            ),
            Ok(m) if !m.current => {
                findings.push(Finding::new(Some(i), Status::Warn, "ECC off").hint(
                    "with ECC off, memory errors corrupt training silently: enable it with \
                     `sudo nvidia-smi -i {ids} -e 1`, then reset the GPU or reboot",
                ))
            }
            Ok(m) if !m.pending => findings.push(
                Finding::new(
                    Some(i),
                    Status::Warn,
                    "ECC on now, off after the next reset",
                )
                .hint(
                    "ECC was switched off for {gpus} and goes off at its next reset or reboot, \
                         after which memory errors corrupt training silently: keep it on with \
                         `sudo nvidia-smi -i {ids} -e 1`",
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
            (Ok(a), Ok(b)) => Some(a.saturating_add(*b)),
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
            "ECC not supported on {} (n/a; GeForce cards have none): nothing to check",
            if gpus.len() == 1 {
                "this GPU"
            } else {
                "these GPUs"
            }
        ));
        o.devices = devices;
        return o;
    }
    let with_ecc = if supported == gpus.len() {
        gpu_count(supported)
    } else {
        format!("{supported} of {} GPUs with ECC", gpus.len())
    };
    let pending_known = gpus.iter().any(|g| {
        g.facts
            .as_ref()
            .is_ok_and(|f| f.pages_pending_retirement.is_ok() || f.remapped_rows.is_ok())
    });
    let pass = if pending_known {
        format!("{with_ecc}: no uncorrectable ECC errors, nothing pending retirement or remap")
    } else {
        format!("{with_ecc}: no uncorrectable ECC errors")
    };
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
    let widths: Vec<u32> = gpus
        .iter()
        .filter_map(|g| g.facts.as_ref().ok()?.link_width.as_ref().ok().copied())
        .collect();
    let width = match widths.first() {
        Some(w) if widths.iter().all(|x| x == w) => format!(" (x{w})"),
        _ => String::new(),
    };
    let pass = format!(
        "{} at full PCIe link width{width}{idle_note}",
        gpu_count(readable)
    );
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
        format!("{}: no slowdown ({idle} idle)", gpu_count(readable))
    } else {
        format!("{}: no slowdown", gpu_count(readable))
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
    // The distinct values seen, for the summary.
    let mut seen: [Vec<&str>; 3] = Default::default();
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
            Ok(ComputeMode::ExclusiveProcess) => {
                findings.push(Finding::new(
                    Some(i),
                    Status::Pass,
                    "Exclusive Process: one process per GPU, fine for one DDP rank per GPU",
                ));
                "Exclusive Process"
            }
            Ok(ComputeMode::ExclusiveThread) => {
                // CUDA deprecated it in 8.0: only the thread that created the
                // context may use the GPU, and PyTorch's autograd runs the
                // backward pass on its own per-device threads.
                findings.push(
                    Finding::new(
                        Some(i),
                        Status::Warn,
                        "compute mode Exclusive Thread (deprecated)",
                    )
                    .hint(
                        "in Exclusive Thread mode only one thread may use {gpus}, but PyTorch \
                         runs the backward pass on separate threads: \
                         `sudo nvidia-smi -i {ids} -c EXCLUSIVE_PROCESS` (one process per GPU) \
                         or `-c DEFAULT`",
                    ),
                );
                "Exclusive Thread"
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
        for (values, value) in seen.iter_mut().zip([compute, persistence, mig]) {
            if !values.contains(&value) {
                values.push(value);
            }
        }
    }
    let all_na = seen.iter().all(|v| v.iter().all(|x| *x == "n/a"));
    if all_na && findings.iter().all(|f| f.status < Status::Warn) {
        let mut o =
            Outcome::skip("compute, persistence and MIG modes not reported by these GPUs (n/a)");
        o.devices = devices;
        return o;
    }
    let pass = format!(
        "{}: compute {}, persistence {}, MIG {}",
        gpu_count(gpus.len()),
        seen[0].join("/"),
        seen[1].join("/"),
        seen[2].join("/")
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
GPU; it is noted. The deprecated Exclusive Thread mode warns: PyTorch uses a GPU from several threads.

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
/// Only the GPUs of the job (`job`, else every GPU) are judged: a job on a
/// GPU CUDA_VISIBLE_DEVICES leaves out is noted.
pub fn evaluate_processes(
    gpus: &[PerGpu<ProcessFacts>],
    own_pid: u32,
    job: Option<&JobGpus>,
) -> Outcome {
    let in_job = |i: u32| job.is_none_or(|j| j.gpus.contains(&i));
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    let mut busy: Vec<(u32, Vec<String>)> = Vec::new();
    let mut free: Vec<u32> = Vec::new();
    // The jobs' pids, and whether each is visible from here.
    let mut pids: Vec<(u32, bool)> = Vec::new();
    let mut display_gpus: Vec<u32> = Vec::new();
    let mut outside: Vec<u32> = Vec::new();
    let mut readable = 0;
    let mut judged = 0;
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
        if in_job(i) {
            judged += 1;
        }
        let others: Vec<&nvml::GpuProcess> = list.iter().filter(|p| p.pid != own_pid).collect();
        // A process with only a graphics context is a display server or
        // desktop (Xorg, gnome-shell) on a workstation GPU: it is noted,
        // never called someone's job, and never offered to `kill`.
        let (display, jobs): (Vec<&nvml::GpuProcess>, Vec<&nvml::GpuProcess>) =
            others.iter().partition(|p| p.graphics);
        if !display.is_empty() {
            let texts: Vec<String> = display.iter().map(|p| process_text(p)).collect();
            findings.push(Finding::new(
                Some(i),
                Status::Pass,
                format!("graphics only: {}", texts.join(", ")),
            ));
            display_gpus.push(i);
        }
        if jobs.is_empty() {
            free.push(i);
        } else if !in_job(i) {
            let texts: Vec<String> = jobs.iter().map(|p| process_text(p)).collect();
            findings.push(Finding::new(
                Some(i),
                Status::Pass,
                format!(
                    "not in CUDA_VISIBLE_DEVICES, not judged: {}",
                    texts.join(", ")
                ),
            ));
            outside.push(i);
        } else {
            let texts: Vec<String> = jobs.iter().map(|p| process_text(p)).collect();
            for p in &jobs {
                if !pids.iter().any(|(pid, _)| *pid == p.pid) {
                    pids.push((p.pid, p.name.is_some()));
                }
            }
            findings.push(Finding::new(Some(i), Status::Warn, texts.join(", ")));
            busy.push((i, texts));
        }
        let used: u64 = others.iter().filter_map(|p| p.used_mib).sum();
        let ok = if !jobs.is_empty() {
            "other processes"
        } else if !display.is_empty() {
            "no other compute processes"
        } else {
            "no other processes"
        };
        devices.push(device_result(
            &g.gpu,
            &findings,
            ok.into(),
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
        let selected = job.map_or(String::new(), |j| {
            format!(" in CUDA_VISIBLE_DEVICES={}", j.cuda_visible_devices)
        });
        let kind = if display_gpus.is_empty() {
            ""
        } else {
            "compute "
        };
        let mut pass = format!(
            "no other {kind}processes on {}{selected}",
            match judged {
                1 => "the GPU".to_string(),
                n => format!("the {n} GPUs"),
            }
        );
        let mut notes = Vec::new();
        if !display_gpus.is_empty() {
            notes.push(format!(
                "display/graphics only on {}",
                gpus_phrase(&display_gpus)
            ));
        }
        if !outside.is_empty() {
            notes.push(format!(
                "other jobs on {}, not selected",
                gpus_phrase(&outside)
            ));
        }
        if !notes.is_empty() {
            pass.push_str(&format!(" ({})", notes.join("; ")));
        }
        conclude(pass, &findings, devices)
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
        let listed = |visible: bool, sep: &str| {
            pids.iter()
                .filter(|(_, v)| *v == visible)
                .map(|(pid, _)| pid.to_string())
                .collect::<Vec<_>>()
                .join(sep)
        };
        let (here, elsewhere) = (listed(true, " "), listed(false, ", "));
        let mut hint = "DDP on a shared GPU runs out of memory or slows down: see them with \
                        `nvidia-smi`, wait for that job or stop it"
            .to_string();
        if !here.is_empty() {
            hint.push_str(&format!(" (`kill {here}`)"));
        }
        if !elsewhere.is_empty() {
            // A pid this PID namespace does not show may be another
            // process's number here: never offer to kill it from here.
            hint.push_str(&format!(
                "; pid {elsewhere} runs outside this container or PID namespace: stop it from \
                 the host"
            ));
        }
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
CUDA_VISIBLE_DEVICES=... Inside a container, processes of other containers show by pid only.

A process with only a graphics context (a display server such as Xorg or gnome-shell on a \
workstation GPU) is noted, not warned: it is not a training job and must not be killed. Only the \
GPUs CUDA_VISIBLE_DEVICES selects are judged (every GPU when it is unset); jobs on the others are \
noted."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::processes(lib(ctx)) {
            Ok(gpus) => {
                let refs: Vec<GpuRef> = gpus.iter().map(|g| g.gpu.clone()).collect();
                let job = job_from_env(&refs);
                evaluate_processes(&gpus, std::process::id(), job.as_ref())
            }
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

// ---------------------------------------------------------------------------
// gpu.topology

const TOPOLOGY_LEGEND: &str = "\
X    = the GPU itself
NV#  = # NVLinks between the pair (direct or through NVSwitch)
PIX  = at most one PCIe switch between them
PXB  = several PCIe switches, no host bridge
PHB  = through a PCIe host bridge (the CPU)
NODE = across PCIe host bridges within one NUMA node
SYS  = across NUMA nodes (the CPU interconnect)
INT  = on the same board
n/a  = NVML could not say";

const P2P_LEGEND: &str = "\
OK   = peer-to-peer reads and writes work
CNS  = the chipset does not support P2P
GNS  = the GPU does not support P2P
TNS  = the topology does not support P2P (often PCIe ACS / IOMMU)
DR   = disabled by a driver registry key
NS   = not supported
U    = unknown
R:x W:y = reads (x) and writes (y) differ
n/a  = NVML could not say";

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
        P2pStatus::DisabledByRegkey => "DR",
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

/// The active NVLinks of GPU `i` (none when NVML could not say).
fn active_links(t: &TopologyFacts, i: usize) -> Vec<&NvLinkState> {
    match t.nvlinks.get(i) {
        Some(Ok(l)) => l.iter().filter(|s| s.active).collect(),
        _ => Vec::new(),
    }
}

/// NVLinks between GPUs `a` and `b`: direct ones plus those through
/// NVSwitches (as many as the side with fewer switch links has).
fn shared_nvlinks(t: &TopologyFacts, a: usize, b: usize) -> usize {
    let direct = active_links(t, a)
        .iter()
        .filter(|l| l.remote == NvLinkRemote::Gpu(b as u32))
        .count();
    let switch = |i: usize| {
        active_links(t, i)
            .iter()
            .filter(|l| l.remote == NvLinkRemote::Switch)
            .count()
    };
    direct + switch(a).min(switch(b))
}

/// What a GPU's NVSwitch fabric state says: until the fabric manager has
/// registered the GPU, CUDA cannot initialise on it (cudaErrorSystemNotReady;
/// NVIDIA Fabric Manager user guide).
fn fabric_finding(gpu: u32, fabric: &Reading<FabricState>) -> Option<Finding> {
    const FABRIC_HINT: &str = "the NVSwitch fabric of {gpus} is not up, and CUDA cannot start on \
        it until it is: start the fabric manager, at exactly the driver's version \
        (`sudo systemctl enable --now nvidia-fabricmanager`), check it with \
        `systemctl status nvidia-fabricmanager` and `journalctl -u nvidia-fabricmanager`, and \
        `nvidia-smi -q -i {ids} | grep -i -A3 fabric` shows each GPU's state";
    let text = match fabric {
        Ok(FabricState::Completed) => return None,
        Ok(FabricState::NotStarted) => "NVSwitch fabric not started (fabric manager)".to_string(),
        Ok(FabricState::InProgress) => {
            "NVSwitch fabric registration still in progress (fabric manager)".to_string()
        }
        Ok(FabricState::Failed(e)) => format!("NVSwitch fabric registration failed: {e}"),
        Err(e) => return unreadable(gpu, "the NVSwitch fabric state", e),
    };
    Some(Finding::new(Some(gpu), Status::Fail, text).hint(FABRIC_HINT))
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

/// The GPUs a DDP job started here will use, when CUDA_VISIBLE_DEVICES
/// names some of them: only pairs among them are judged.
#[derive(Debug, Clone, PartialEq)]
pub struct JobGpus {
    /// NVML indices, in CUDA_VISIBLE_DEVICES order.
    pub gpus: Vec<u32>,
    /// The variable's value, for the summary.
    pub cuda_visible_devices: String,
}

/// The GPUs CUDA_VISIBLE_DEVICES selects, mapped as env.cuda_visible_devices
/// maps it. None (judge every GPU) when it is unset, selects every GPU, or
/// selects nothing usable (MIG devices, a duplicate: env.cuda_visible_devices
/// judges that).
pub fn job_gpus(cuda_visible_devices: Option<&str>, gpus: &[GpuRef]) -> Option<JobGpus> {
    let value = cuda_visible_devices?;
    let nvml_gpus: Vec<crate::domain::visible_devices::NvmlGpu> = gpus
        .iter()
        .map(|g| crate::domain::visible_devices::NvmlGpu {
            index: g.index,
            name: g.name.clone(),
            uuid: g.uuid.clone(),
            ..Default::default()
        })
        .collect();
    let parsed = crate::domain::visible_devices::parse_cuda_visible_devices(value);
    let mapping =
        crate::domain::visible_devices::map_visible_devices(parsed.effective(), &nvml_gpus);
    let selected: Vec<u32> = mapping
        .targets
        .iter()
        .map(|t| match t {
            crate::domain::visible_devices::Target::Gpu(i) => Some(*i),
            crate::domain::visible_devices::Target::Mig { .. } => None,
        })
        .collect::<Option<_>>()?;
    if mapping.duplicate.is_some() || selected.is_empty() || selected.len() == gpus.len() {
        return None;
    }
    Some(JobGpus {
        gpus: selected,
        cuda_visible_devices: value.to_string(),
    })
}

/// [`job_gpus`], unless CUDA's order may differ from NVML's: indices in
/// CUDA_VISIBLE_DEVICES count in CUDA_DEVICE_ORDER, which is FASTEST_FIRST
/// unless set to PCI_BUS_ID (CUDA Programming Guide, "CUDA Environment
/// Variables"); NVML counts in PCI bus order. Both agree on a host with one
/// GPU model (ties are broken by PCI bus id); on a mixed host indices cannot
/// be mapped, and every GPU is judged.
pub fn job_gpus_in_order(
    cuda_visible_devices: Option<&str>,
    cuda_device_order: Option<&str>,
    gpus: &[GpuRef],
) -> Option<JobGpus> {
    let job = job_gpus(cuda_visible_devices, gpus)?;
    let by_index =
        crate::domain::visible_devices::parse_cuda_visible_devices(&job.cuda_visible_devices)
            .names_indices();
    let pci_order = cuda_device_order.is_some_and(|o| o.trim() == "PCI_BUS_ID");
    let mixed = gpus.windows(2).any(|w| w[0].name != w[1].name);
    if by_index && !pci_order && mixed {
        return None;
    }
    Some(job)
}

/// The job's GPUs from this process's environment.
fn job_from_env(gpus: &[GpuRef]) -> Option<JobGpus> {
    use crate::probe::host::env_lossy;
    job_gpus_in_order(
        env_lossy("CUDA_VISIBLE_DEVICES").as_deref(),
        env_lossy("CUDA_DEVICE_ORDER").as_deref(),
        gpus,
    )
}

/// Judge the GPU-to-GPU topology: P2P between every pair of the job's GPUs
/// (every GPU unless `job` narrows it), NVLinks up, and each GPU's NVSwitch
/// fabric registered (`fabric`, per GPU in NVML order; empty when unknown).
pub fn evaluate_topology(
    t: &TopologyFacts,
    fabric: &[Reading<FabricState>],
    job: Option<&JobGpus>,
) -> Outcome {
    let n = t.gpus.len();
    if n == 0 {
        return Outcome::skip("no GPUs: no topology to check");
    }
    let in_job = |i: usize| job.is_none_or(|j| j.gpus.contains(&(i as u32)));
    let job_size = (0..n).filter(|i| in_job(*i)).count();
    let mut findings = Vec::new();
    let mut devices = Vec::new();
    for (i, links) in t.nvlinks.iter().enumerate() {
        let Some(gpu) = t.gpus.get(i) else { break };
        if !in_job(i) {
            findings.push(Finding::new(
                Some(gpu.index),
                Status::Pass,
                "not in CUDA_VISIBLE_DEVICES, not judged",
            ));
        } else if let Some(state) = fabric.get(i) {
            findings.extend(fabric_finding(gpu.index, state));
        }
        let (ok, metrics) = match links {
            Ok(l) => {
                let up = l.iter().filter(|s| s.active).count();
                let down: Vec<u32> = l.iter().filter(|s| !s.active).map(|s| s.link).collect();
                if up > 0 && !down.is_empty() && in_job(i) {
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
                if in_job(i) {
                    findings.extend(unreadable(gpu.index, "the NVLinks", e));
                }
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
    // The pairs judged: those between GPUs of the job.
    let pairs = job_size * job_size.saturating_sub(1) / 2;
    let mut p2p_ok = 0;
    let mut nvlink_pairs = 0;
    // Pairs without P2P, by reason.
    let mut no_p2p: Vec<(P2pStatus, Vec<String>)> = Vec::new();
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
        if !(in_job(a) && in_job(b)) {
            // Drawn, not judged: a job here will not use this pair.
            continue;
        }
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
        match pcie {
            _ if nvlink_ok => p2p_ok += 1,
            Some((P2pStatus::Ok, _)) => p2p_ok += 1,
            Some((status, _)) => match no_p2p.iter_mut().find(|(s, _)| *s == status) {
                Some((_, names)) => names.push(pair_name),
                None => no_p2p.push((status, vec![pair_name])),
            },
            None => {}
        }
    }
    const NAMED_PAIRS: usize = 3;
    for (status, names) in &no_p2p {
        let which = if names.len() <= NAMED_PAIRS {
            names.join(", ")
        } else {
            format!("{} of {pairs} GPU pairs", names.len())
        };
        findings.push(
            Finding::new(
                None,
                Status::Warn,
                format!("no P2P between {which} ({})", p2p_words(*status)),
            )
            .hint(p2p_hint(*status)),
        );
    }
    let unavailable: usize = no_p2p.iter().map(|(_, names)| names.len()).sum();
    let header: Vec<String> = std::iter::once(String::new())
        .chain((0..n).map(|i| format!("GPU{i}")))
        .collect();
    let rows = |m: Vec<Vec<String>>| -> Vec<Vec<String>> {
        m.into_iter()
            .enumerate()
            .map(|(i, r)| std::iter::once(format!("GPU{i}")).chain(r).collect())
            .collect()
    };
    let p2p_na = pairs.saturating_sub(p2p_ok + unavailable);
    let nvlink_known = t
        .nvlinks
        .iter()
        .any(|l| matches!(l, Ok(links) if !links.is_empty()));
    let tables = [
        DataTable {
            title: "GPU topology".to_string(),
            header: header.clone(),
            rows: rows(topo),
            legend: Some(TOPOLOGY_LEGEND.to_string()),
        },
        DataTable {
            title: "GPU P2P read/write".to_string(),
            header,
            rows: rows(p2p),
            legend: Some(P2P_LEGEND.to_string()),
        },
    ];
    let selected = job.map(|j| format!(" in CUDA_VISIBLE_DEVICES={}", j.cuda_visible_devices));
    if job_size < 2 {
        let mut o = conclude(
            format!(
                "one GPU{}: no peer links to check",
                selected.as_deref().unwrap_or_default()
            ),
            &findings,
            devices,
        );
        o.tables = tables.to_vec();
        return o;
    }
    if p2p_na == pairs && !nvlink_known && findings.iter().all(|f| f.status < Status::Warn) {
        let mut o = Outcome::skip("P2P status and NVLinks not reported by these GPUs (n/a)");
        o.devices = devices;
        o.tables = tables.to_vec();
        return o;
    }
    let gpus = format!("{job_size} GPUs{}", selected.as_deref().unwrap_or_default());
    let mut pass = match (job_size, p2p_na) {
        (2, 0) => format!("{gpus}: P2P between them"),
        (_, 0) => format!("{gpus}: P2P between all {pairs} pairs"),
        _ => format!("{gpus}: P2P between {p2p_ok} of {pairs} pairs, n/a for {p2p_na}"),
    };
    if nvlink_pairs == pairs {
        pass.push_str(if job_size == 2 {
            ", over NVLink"
        } else {
            ", all over NVLink"
        });
    } else if nvlink_pairs > 0 {
        pass.push_str(&format!(", {nvlink_pairs} over NVLink"));
    }
    let mut outcome = conclude(pass, &findings, devices);
    outcome.tables = tables.to_vec();
    outcome.with_metric("p2p_pairs_unavailable", unavailable as f64, "count")
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
The pairs judged are those between the GPUs a job started here will use: the ones \
CUDA_VISIBLE_DEVICES selects, or every GPU when it is unset; the matrix always shows the whole \
machine.

No P2P between a pair warns. On servers this is usually PCIe ACS or the IOMMU: check \
`sudo lspci -vvv | grep ACSCtl`, disable ACS in the BIOS or boot with iommu=pt, and run with \
NCCL_P2P_DISABLE=1 to confirm the job works without it. GeForce cards do not support P2P at all \
(nothing to fix). A GPU with some NVLinks down while others are up warns: check \
`nvidia-smi nvlink -s`, Xid 74 in dmesg and, on NVSwitch systems, nvidia-fabricmanager; a reset may \
retrain the link. A single GPU has nothing to check.

On NVSwitch systems (HGX/DGX, Hopper and later) a GPU the fabric manager has not registered fails: \
CUDA cannot start on it until it is. Start the fabric manager at the driver's version \
(`sudo systemctl enable --now nvidia-fabricmanager`) and read `journalctl -u nvidia-fabricmanager`."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match nvml::topology(lib(ctx)) {
            Ok(t) => {
                // The fabric state lives beside the topology facts; a failure
                // to read it leaves it unknown, never fails the check.
                let fabric = nvml::fabric(lib(ctx)).unwrap_or_default();
                evaluate_topology(&t, &fabric, job_from_env(&t.gpus).as_ref())
            }
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nvml::{
        EccMode, GpuProcess, MigMode, PairFacts, RemappedRows, ThrottleFacts,
    };

    fn gpu(index: u32) -> GpuRef {
        GpuRef {
            index,
            name: "NVIDIA H100 80GB HBM3".to_string(),
            uuid: Some(format!("GPU-{index}")),
        }
    }

    fn per<T>(index: u32, facts: T) -> PerGpu<T> {
        PerGpu {
            gpu: gpu(index),
            facts: Ok(facts),
        }
    }

    fn lost<T>(index: u32) -> PerGpu<T> {
        PerGpu {
            gpu: gpu(index),
            facts: Err(Unavailable::GpuLost),
        }
    }

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    // --- gpu.driver --------------------------------------------------------

    #[test]
    fn driver_pass_reports_versions() {
        let o = evaluate_driver(
            &Ok(DriverInfo {
                driver_version: "570.86.15".into(),
                nvml_version: "12.570.86.15".into(),
                cuda_driver_version: Some(12080),
            }),
            None,
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "driver 570.86.15, NVML 12.570.86.15, supports CUDA 12.8"
        );
        assert_eq!(o.facts["cuda_driver_version"], "12.8");
        assert_eq!(o.facts["nvml_library"], "libnvidia-ml.so.1");
        assert_eq!(o.hint, None);
    }

    #[test]
    fn driver_without_cuda_version_says_na() {
        let o = evaluate_driver(
            &Ok(DriverInfo {
                driver_version: "418.226.00".into(),
                nvml_version: "10.418.226.00".into(),
                cuda_driver_version: None,
            }),
            None,
        );
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.ends_with("supports CUDA n/a"), "{}", o.summary);
    }

    #[test]
    fn library_not_found_points_at_driver_install_and_container_runtime() {
        let o = evaluate_driver(
            &Err(NvmlFailure::LibraryNotFound {
                detail: "libnvidia-ml.so.1: cannot open shared object file".into(),
            }),
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .starts_with("NVIDIA driver library libnvidia-ml.so.1 not found"));
        assert!(
            hint(&o).contains("install the NVIDIA driver"),
            "{}",
            hint(&o)
        );
        assert!(hint(&o).contains("docker run --gpus all"), "{}", hint(&o));
        assert!(
            hint(&o).contains("nvidia-ctk runtime configure"),
            "{}",
            hint(&o)
        );
        assert_eq!(
            o.facts["nvml_error"],
            "libnvidia-ml.so.1: cannot open shared object file"
        );
    }

    #[test]
    fn library_not_found_at_the_given_path_blames_the_flag() {
        let path = Path::new("/opt/x/libnvidia-ml.so.1");
        let o = evaluate_driver(
            &Err(NvmlFailure::LibraryNotFound {
                detail: "no such file".into(),
            }),
            Some(path),
        );
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "cannot load NVML from --nvml-lib /opt/x/libnvidia-ml.so.1: no such file"
        );
        assert!(hint(&o).starts_with("check the path given to --nvml-lib"));
    }

    #[test]
    fn each_init_failure_has_its_own_hint() {
        let cases = [
            (
                NvmlFailure::DriverNotLoaded,
                "NVML_ERROR_DRIVER_NOT_LOADED",
                "sudo modprobe nvidia",
            ),
            (
                NvmlFailure::LibRmVersionMismatch,
                "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
                "reboot, or stop everything using the GPUs",
            ),
            (
                NvmlFailure::NoPermission,
                "NVML_ERROR_NO_PERMISSION",
                "ls -l /dev/nvidia*",
            ),
            (
                NvmlFailure::Other {
                    detail: "nvmlInit_v2 failed: Unknown".into(),
                },
                "NVML failed: nvmlInit_v2 failed: Unknown",
                "run `nvidia-smi`",
            ),
        ];
        for (failure, summary, hint_text) in cases {
            let o = evaluate_driver(&Err(failure), None);
            assert_eq!(o.status, Status::Fail);
            assert!(o.summary.contains(summary), "{}", o.summary);
            assert!(hint(&o).contains(hint_text), "{}", hint(&o));
        }
    }

    // --- gpu.count ---------------------------------------------------------

    fn info(index: u32, name: &str, cc: (u32, u32)) -> Result<GpuInfo, GpuError> {
        Ok(GpuInfo {
            index,
            name: name.to_string(),
            uuid: format!("GPU-{index}"),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
            memory_total_mib: 81559,
            compute_capability: Some(cc),
            mig_enabled: Some(false),
            mig_uuids: Vec::new(),
        })
    }

    const H100: &str = "NVIDIA H100 80GB HBM3";
    const A100: &str = "NVIDIA A100-SXM4-80GB";

    #[test]
    fn count_passes_and_lists_every_gpu() {
        let inv: Vec<_> = (0..8).map(|i| info(i, H100, (9, 0))).collect();
        let o = evaluate_count(&inv, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "8 GPUs: 8x NVIDIA H100 80GB HBM3");
        assert_eq!(o.metric("gpu_count"), Some(8.0));
        assert_eq!(o.devices.len(), 8);
        assert_eq!(
            o.devices[1].summary,
            "NVIDIA H100 80GB HBM3, 81559 MiB, cc 9.0, 00000000:19:00.0"
        );
        assert_eq!(o.facts["gpu_models"], "8x NVIDIA H100 80GB HBM3");
        assert!(o.facts["gpu1"].ends_with("GPU-1"));
    }

    #[test]
    fn zero_gpus_fail() {
        let o = evaluate_count(&[], None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "NVML sees no GPUs");
        assert!(hint(&o).contains("docker run --gpus all"));
    }

    #[test]
    fn fewer_than_expected_fail_and_more_pass() {
        let inv: Vec<_> = (0..4).map(|i| info(i, H100, (9, 0))).collect();
        let o = evaluate_count(&inv, Some(8));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "4 GPUs usable, expected 8 (--expect-gpus)");
        assert!(hint(&o).starts_with("4 of the expected GPUs are missing"));
        assert!(hint(&o).contains("nvidia-smi -L"));
        let o = evaluate_count(&inv, Some(2));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "4 GPUs (expected 2): 4x NVIDIA H100 80GB HBM3");
    }

    #[test]
    fn mixed_models_warn_and_suggest_the_largest_group() {
        let inv = vec![
            info(0, A100, (8, 0)),
            info(1, H100, (9, 0)),
            info(2, H100, (9, 0)),
            info(3, H100, (9, 0)),
        ];
        let o = evaluate_count(&inv, None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "mixed GPU models: 1x NVIDIA A100-SXM4-80GB (GPU 0), 3x NVIDIA H100 80GB HBM3 (GPUs 1, 2, 3)"
        );
        assert!(hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1,2,3"));
        assert!(hint(&o).contains("slowest GPU"));
    }

    #[test]
    fn mixed_models_of_equal_count_prefer_the_newer_architecture() {
        let inv = vec![
            info(0, A100, (8, 0)),
            info(1, A100, (8, 0)),
            info(2, H100, (9, 0)),
            info(3, H100, (9, 0)),
        ];
        let o = evaluate_count(&inv, None);
        assert_eq!(o.status, Status::Warn);
        assert!(
            hint(&o).contains("CUDA_VISIBLE_DEVICES=2,3"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn a_gpu_that_cannot_be_opened_fails_the_count() {
        let inv = vec![
            info(0, H100, (9, 0)),
            Err(GpuError {
                index: 1,
                error: Unavailable::GpuLost,
            }),
        ];
        let o = evaluate_count(&inv, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: counted but cannot be opened: GPU is lost (fallen off the bus)"
        );
        assert!(hint(&o).starts_with("GPU 1 fell off the bus"));
        assert_eq!(o.devices[1].status, Status::Fail);
        assert_eq!(o.metric("gpu_count"), Some(1.0));
    }

    // --- gpu.ecc -----------------------------------------------------------

    fn healthy_ecc() -> EccFacts {
        EccFacts {
            mode: Ok(EccMode {
                current: true,
                pending: true,
            }),
            volatile_uncorrected: Ok(0),
            volatile_corrected: Ok(0),
            aggregate_uncorrected: Ok(0),
            retired_pages_sbe: Err(Unavailable::NotSupported),
            retired_pages_dbe: Err(Unavailable::NotSupported),
            pages_pending_retirement: Err(Unavailable::NotSupported),
            remapped_rows: Ok(RemappedRows::default()),
        }
    }

    fn ecc_with(f: impl Fn(&mut EccFacts)) -> Outcome {
        let mut sick = healthy_ecc();
        f(&mut sick);
        evaluate_ecc(
            &[per(0, healthy_ecc()), per(1, sick)],
            &EccThresholds::default(),
        )
    }

    #[test]
    fn healthy_ecc_passes() {
        let o = ecc_with(|_| {});
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "2 GPUs: no uncorrectable ECC errors, nothing pending retirement or remap"
        );
        assert_eq!(
            o.devices[0].summary,
            "ECC on, 0 uncorrectable, 0 correctable"
        );
        assert_eq!(o.hint, None);
    }

    #[test]
    fn any_volatile_uncorrectable_error_fails() {
        let o = ecc_with(|f| f.volatile_uncorrected = Ok(1));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: 1 uncorrectable ECC errors since the driver loaded"
        );
        assert!(hint(&o).starts_with("GPU 1 hit uncorrectable memory errors"));
        assert!(hint(&o).contains("sudo nvidia-smi -r -i 1"));
        assert_eq!(o.devices[0].status, Status::Pass);
        assert_eq!(o.devices[1].status, Status::Fail);
    }

    #[test]
    fn pages_pending_retirement_fail_with_a_reset_hint() {
        let o = ecc_with(|f| {
            f.remapped_rows = Err(Unavailable::NotSupported);
            f.retired_pages_dbe = Ok(2);
            f.retired_pages_sbe = Ok(0);
            f.pages_pending_retirement = Ok(true);
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 1: memory pages pending retirement");
        assert!(hint(&o).starts_with("GPU 1 must be reset"));
        assert!(hint(&o).contains("sudo nvidia-smi -r -i 1"));
    }

    #[test]
    fn a_pending_row_remap_fails_with_a_reset_hint() {
        let o = ecc_with(|f| {
            f.remapped_rows = Ok(RemappedRows {
                correctable: 0,
                uncorrectable: 1,
                pending: true,
                failed: false,
            })
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 1: row remap pending");
        assert!(hint(&o).contains("must be reset to finish retiring or remapping"));
    }

    #[test]
    fn a_failed_row_remap_fails_with_rma() {
        let o = ecc_with(|f| {
            f.remapped_rows = Ok(RemappedRows {
                failed: true,
                ..RemappedRows::default()
            })
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 1: row remapping failed");
        assert!(hint(&o).contains("RMA"), "{}", hint(&o));
    }

    #[test]
    fn uncorrectable_row_remaps_fail_above_the_dcgm_limit() {
        let at = ecc_with(|f| {
            f.remapped_rows = Ok(RemappedRows {
                uncorrectable: MAX_UNCORRECTABLE_ROW_REMAPS,
                ..RemappedRows::default()
            })
        });
        assert_eq!(at.status, Status::Pass);
        let over = ecc_with(|f| {
            f.remapped_rows = Ok(RemappedRows {
                uncorrectable: MAX_UNCORRECTABLE_ROW_REMAPS + 1,
                ..RemappedRows::default()
            })
        });
        assert_eq!(over.status, Status::Fail);
        assert_eq!(
            over.summary,
            "GPU 1: 513 rows remapped for uncorrectable errors (limit 512)"
        );
        assert!(hint(&over).contains("RMA"));
    }

    #[test]
    fn retired_pages_warn_above_15_and_fail_above_63() {
        let pages = |n: u32| {
            ecc_with(move |f| {
                f.retired_pages_sbe = Ok(n);
                f.retired_pages_dbe = Ok(0);
                f.pages_pending_retirement = Ok(false);
            })
        };
        assert_eq!(pages(15).status, Status::Pass);
        let warn = pages(16);
        assert_eq!(warn.status, Status::Warn);
        assert_eq!(
            warn.summary,
            "GPU 1: 16 retired memory pages (more than 15)"
        );
        assert!(hint(&warn).contains("plan a replacement"));
        assert_eq!(pages(63).status, Status::Warn);
        let fail = pages(64);
        assert_eq!(fail.status, Status::Fail);
        assert_eq!(fail.summary, "GPU 1: 64 retired memory pages (limit 63)");
        assert!(hint(&fail).contains("RMA"));
    }

    #[test]
    fn very_many_correctable_errors_warn() {
        let at = ecc_with(|f| f.volatile_corrected = Ok(WARN_VOLATILE_CORRECTED_ECC));
        assert_eq!(at.status, Status::Pass);
        let o = ecc_with(|f| f.volatile_corrected = Ok(WARN_VOLATILE_CORRECTED_ECC + 1));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 1: 20000001 correctable ECC errors since the driver loaded (above 20000000)"
        );
        assert!(hint(&o).contains("nvidia-smi -q -d ECC -i 1"));
    }

    #[test]
    fn ecc_off_warns() {
        let o = ecc_with(|f| {
            f.mode = Ok(EccMode {
                current: false,
                pending: false,
            })
        });
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: ECC off");
        assert!(hint(&o).contains("sudo nvidia-smi -i 1 -e 1"));
    }

    #[test]
    fn absurd_retired_page_counts_fail_without_overflowing() {
        let o = ecc_with(|f| {
            f.retired_pages_sbe = Ok(u32::MAX);
            f.retired_pages_dbe = Ok(5);
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            format!("GPU 1: {} retired memory pages (limit 63)", u32::MAX)
        );
    }

    #[test]
    fn ecc_switched_on_but_not_yet_reset_says_reset_only() {
        let o = ecc_with(|f| {
            f.mode = Ok(EccMode {
                current: false,
                pending: true,
            })
        });
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: ECC off (on after the next reset)");
        assert!(hint(&o).contains("sudo nvidia-smi -r -i 1"), "{}", hint(&o));
        assert!(!hint(&o).contains("-e 1"), "{}", hint(&o));
    }

    #[test]
    fn ecc_switched_off_for_the_next_reset_warns() {
        let o = ecc_with(|f| {
            f.mode = Ok(EccMode {
                current: true,
                pending: false,
            })
        });
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: ECC on now, off after the next reset");
        assert!(
            hint(&o).contains("sudo nvidia-smi -i 1 -e 1"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn ecc_not_supported_anywhere_is_not_applicable() {
        let geforce = || EccFacts {
            mode: Err(Unavailable::NotSupported),
            volatile_uncorrected: Err(Unavailable::NotSupported),
            volatile_corrected: Err(Unavailable::NotSupported),
            aggregate_uncorrected: Err(Unavailable::NotSupported),
            retired_pages_sbe: Err(Unavailable::NotSupported),
            retired_pages_dbe: Err(Unavailable::NotSupported),
            pages_pending_retirement: Err(Unavailable::NotSupported),
            remapped_rows: Err(Unavailable::NotSupported),
        };
        let o = evaluate_ecc(
            &[per(0, geforce()), per(1, geforce())],
            &EccThresholds::default(),
        );
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.starts_with("ECC not supported on these GPUs"));
        assert_eq!(o.devices[0].summary, "ECC not supported (n/a)");
        // One GPU with ECC among GPUs without: judged, and said so.
        let o = evaluate_ecc(
            &[per(0, healthy_ecc()), per(1, geforce())],
            &EccThresholds::default(),
        );
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.starts_with("1 of 2 GPUs with ECC"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn an_nvml_error_is_an_error_and_a_lost_gpu_a_failure() {
        let o =
            ecc_with(|f| f.volatile_uncorrected = Err(Unavailable::Failed("Unknown Error".into())));
        assert_eq!(o.status, Status::Error);
        assert_eq!(
            o.summary,
            "GPU 1: could not read the uncorrectable ECC count: Unknown Error"
        );
        assert!(hint(&o).contains("nvidia-smi -q -i 1"));
        let o = evaluate_ecc(&[per(0, healthy_ecc()), lost(1)], &EccThresholds::default());
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 1: GPU is lost (fallen off the bus)");
        assert!(hint(&o).contains("Xid 79"));
    }

    #[test]
    fn one_hint_names_every_gpu_it_applies_to() {
        let sick = || {
            let mut f = healthy_ecc();
            f.volatile_uncorrected = Ok(3);
            f
        };
        let o = evaluate_ecc(
            &[per(0, healthy_ecc()), per(1, sick()), per(3, sick())],
            &EccThresholds::default(),
        );
        assert_eq!(o.status, Status::Fail);
        assert!(
            hint(&o).starts_with("GPUs 1, 3 hit uncorrectable"),
            "{}",
            hint(&o)
        );
        assert!(
            hint(&o).contains("sudo nvidia-smi -r -i 1,3"),
            "{}",
            hint(&o)
        );
        assert_eq!(hint(&o).matches("hit uncorrectable").count(), 1);
    }

    // --- gpu.pcie ----------------------------------------------------------

    fn link(gen: u32, max_gen: u32, width: u32, max_width: u32, util: Reading<u32>) -> PcieFacts {
        PcieFacts {
            link_gen: Ok(gen),
            max_link_gen: Ok(max_gen),
            link_width: Ok(width),
            max_link_width: Ok(max_width),
            utilization_pct: util,
        }
    }

    #[test]
    fn full_links_pass() {
        let o = evaluate_pcie(
            &[per(0, link(5, 5, 16, 16, Ok(0)))],
            &PcieThresholds::default(),
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "1 GPU at full PCIe link width (x16)");
        assert_eq!(o.devices[0].summary, "Gen5 x16 (max Gen5 x16)");
    }

    #[test]
    fn a_narrow_link_warns() {
        let o = evaluate_pcie(
            &[
                per(0, link(5, 5, 16, 16, Ok(0))),
                per(1, link(5, 5, 8, 16, Ok(0))),
            ],
            &PcieThresholds::default(),
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: PCIe link x8 of x16");
        assert!(hint(&o).starts_with("GPU 1 trained a narrower PCIe link"));
        assert!(hint(&o).contains("bifurcation"));
    }

    #[test]
    fn a_lower_generation_is_normal_at_idle_and_warns_when_busy() {
        let t = PcieThresholds::default();
        let idle = evaluate_pcie(&[per(0, link(1, 5, 16, 16, Ok(0)))], &t);
        assert_eq!(idle.status, Status::Pass);
        assert_eq!(
            idle.summary,
            "1 GPU at full PCIe link width (x16) (idle GPUs at a lower generation: normal)"
        );
        assert!(idle.devices[0]
            .summary
            .contains("Gen1 of Gen5 at idle: normal power saving"));
        let below = evaluate_pcie(
            &[per(0, link(3, 5, 16, 16, Ok(BUSY_UTILIZATION_PCT - 1)))],
            &t,
        );
        assert_eq!(below.status, Status::Pass);
        let busy = evaluate_pcie(&[per(0, link(3, 5, 16, 16, Ok(BUSY_UTILIZATION_PCT)))], &t);
        assert_eq!(busy.status, Status::Warn);
        assert_eq!(busy.summary, "GPU 0: PCIe Gen3 of Gen5 while 10 % busy");
        assert!(hint(&busy).contains("nvidia-smi -q -d PCIE -i 0"));
        let unknown = evaluate_pcie(
            &[per(0, link(3, 5, 16, 16, Err(Unavailable::NotSupported)))],
            &t,
        );
        assert_eq!(unknown.status, Status::Pass);
        assert!(unknown.devices[0].summary.contains("utilization n/a"));
    }

    #[test]
    fn pcie_not_reported_skips() {
        let na = PcieFacts {
            link_gen: Err(Unavailable::NotSupported),
            max_link_gen: Err(Unavailable::NotSupported),
            link_width: Err(Unavailable::NotSupported),
            max_link_width: Err(Unavailable::NotSupported),
            utilization_pct: Err(Unavailable::NotSupported),
        };
        let o = evaluate_pcie(&[per(0, na)], &PcieThresholds::default());
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.summary,
            "PCIe link width not reported by these GPUs (n/a)"
        );
    }

    // --- gpu.throttle ------------------------------------------------------

    fn throttled(bits: u64) -> Outcome {
        evaluate_throttle(&[
            per(
                0,
                ThrottleFacts {
                    reasons: Ok(reason::GPU_IDLE),
                },
            ),
            per(1, ThrottleFacts { reasons: Ok(bits) }),
        ])
    }

    #[test]
    fn idle_and_power_cap_are_normal() {
        let o = throttled(reason::SW_POWER_CAP | reason::APPLICATIONS_CLOCKS_SETTING);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "2 GPUs: no slowdown (1 idle)");
        assert_eq!(
            o.devices[1].summary,
            "no slowdown (application clocks set; at its power cap (normal under load))"
        );
        assert_eq!(o.hint, None);
    }

    #[test]
    fn hardware_slowdown_fails() {
        let o = throttled(reason::HW_SLOWDOWN);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: hardware slowdown (clocks cut by half or more)"
        );
        assert!(hint(&o).contains("nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i 1"));
    }

    #[test]
    fn thermal_and_power_brake_slowdowns_warn() {
        for (bit, text, needle) in [
            (
                reason::HW_THERMAL_SLOWDOWN,
                "hardware thermal slowdown",
                "throttling for heat",
            ),
            (
                reason::SW_THERMAL_SLOWDOWN,
                "software thermal slowdown",
                "throttling for heat",
            ),
            (
                reason::HW_POWER_BRAKE_SLOWDOWN,
                "power brake slowdown",
                "external power brake",
            ),
        ] {
            let o = throttled(bit);
            assert_eq!(o.status, Status::Warn, "{text}");
            assert_eq!(o.summary, format!("GPU 1: {text}"));
            assert!(hint(&o).contains(needle), "{}", hint(&o));
        }
    }

    #[test]
    fn throttle_reasons_not_reported_skip() {
        let o = evaluate_throttle(&[per(
            0,
            ThrottleFacts {
                reasons: Err(Unavailable::NotSupported),
            },
        )]);
        assert_eq!(o.status, Status::Skip);
    }

    // --- gpu.mode ----------------------------------------------------------

    fn mode(compute: ComputeMode, persistence: bool, mig: (bool, bool)) -> ModeFacts {
        ModeFacts {
            compute_mode: Ok(compute),
            persistence: Ok(persistence),
            mig: Ok(MigMode {
                current: mig.0,
                pending: mig.1,
            }),
        }
    }

    #[test]
    fn default_modes_pass() {
        let o = evaluate_mode(&[per(0, mode(ComputeMode::Default, true, (false, false)))]);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "1 GPU: compute Default, persistence on, MIG off");
    }

    #[test]
    fn prohibited_compute_mode_fails() {
        let o = evaluate_mode(&[per(0, mode(ComputeMode::Prohibited, true, (false, false)))]);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 0: compute mode Prohibited");
        assert_eq!(
            hint(&o),
            "no CUDA process may use GPU 0: `sudo nvidia-smi -i 0 -c DEFAULT`"
        );
    }

    #[test]
    fn exclusive_process_passes_with_a_note() {
        let o = evaluate_mode(&[
            per(0, mode(ComputeMode::ExclusiveProcess, true, (false, false))),
            per(1, mode(ComputeMode::Default, true, (false, false))),
        ]);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "2 GPUs: compute Exclusive Process/Default, persistence on, MIG off"
        );
        assert!(o.devices[0]
            .summary
            .contains("one process per GPU, fine for one DDP rank"));
    }

    #[test]
    fn exclusive_thread_warns_and_says_how_to_switch() {
        let o = evaluate_mode(&[per(
            3,
            mode(ComputeMode::ExclusiveThread, true, (false, false)),
        )]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 3: compute mode Exclusive Thread (deprecated)"
        );
        assert!(
            hint(&o).contains("`sudo nvidia-smi -i 3 -c EXCLUSIVE_PROCESS`"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn persistence_off_warns() {
        let o = evaluate_mode(&[per(2, mode(ComputeMode::Default, false, (false, false)))]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 2: persistence mode off");
        assert!(hint(&o).contains("nvidia-persistenced"));
        assert!(hint(&o).contains("sudo nvidia-smi -i 2 -pm 1"));
    }

    #[test]
    fn mig_enabled_or_pending_warns() {
        let o = evaluate_mode(&[per(0, mode(ComputeMode::Default, true, (true, true)))]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 0: MIG enabled");
        assert!(hint(&o).starts_with("NCCL and DDP cannot span MIG instances"));
        assert!(hint(&o).contains("sudo nvidia-smi -i 0 -mig 0"));
        let o = evaluate_mode(&[per(0, mode(ComputeMode::Default, true, (false, true)))]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 0: MIG on after the next reset");
        assert!(hint(&o).contains("waits for a reset of GPU 0"));
    }

    #[test]
    fn modes_not_reported_skip() {
        let o = evaluate_mode(&[per(
            0,
            ModeFacts {
                compute_mode: Err(Unavailable::NotSupported),
                persistence: Err(Unavailable::NotSupported),
                mig: Err(Unavailable::NotSupported),
            },
        )]);
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("(n/a)"));
    }

    // --- gpu.processes -----------------------------------------------------

    fn procs(list: Vec<GpuProcess>) -> ProcessFacts {
        ProcessFacts {
            processes: Ok(list),
        }
    }

    fn process(pid: u32, name: Option<&str>, mib: Option<u64>) -> GpuProcess {
        GpuProcess {
            pid,
            name: name.map(str::to_string),
            used_mib: mib,
            graphics: false,
        }
    }

    #[test]
    fn no_other_processes_pass() {
        let o = evaluate_processes(&[per(0, procs(vec![])), per(1, procs(vec![]))], 1, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "no other processes on the 2 GPUs");
    }

    #[test]
    fn someone_elses_job_warns_with_pid_name_and_memory() {
        let o = evaluate_processes(
            &[
                per(0, procs(vec![])),
                per(
                    1,
                    procs(vec![process(4242, Some("python train.py"), Some(12000))]),
                ),
                per(2, procs(vec![])),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "someone else's job is on GPU 1: pid 4242 python train.py (12000 MiB)"
        );
        assert!(hint(&o).contains("kill 4242"));
        assert!(hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,2"));
        assert_eq!(o.metric("other_processes"), Some(1.0));
    }

    #[test]
    fn processes_on_every_gpu_warn_without_a_free_gpu_suggestion() {
        let o = evaluate_processes(
            &[
                per(0, procs(vec![process(7, None, None)])),
                per(1, procs(vec![process(7, None, None)])),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.starts_with(
            "other processes hold memory on GPUs 0, 1: GPU 0: pid 7 (not visible here"
        ));
        assert!(o.summary.contains("memory n/a"));
        assert!(!hint(&o).contains("CUDA_VISIBLE_DEVICES"));
        // pid 7 is not visible here: stopped from the host, never `kill`ed
        // from here, where 7 may be another process.
        assert!(!hint(&o).contains("kill"), "{}", hint(&o));
        assert!(
            hint(&o).contains(
                "pid 7 runs outside this container or PID namespace: stop it from the host"
            ),
            "{}",
            hint(&o)
        );
    }

    fn display(pid: u32, name: &str, mib: u64) -> GpuProcess {
        GpuProcess {
            graphics: true,
            ..process(pid, Some(name), Some(mib))
        }
    }

    #[test]
    fn a_display_server_is_noted_not_warned() {
        let o = evaluate_processes(
            &[
                per(0, procs(vec![display(1523, "/usr/lib/xorg/Xorg", 48)])),
                per(1, procs(vec![])),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "no other compute processes on the 2 GPUs (display/graphics only on GPU 0)"
        );
        assert_eq!(o.hint, None);
        assert_eq!(
            o.devices[0].summary,
            "no other compute processes (graphics only: pid 1523 /usr/lib/xorg/Xorg (48 MiB))"
        );
    }

    #[test]
    fn a_job_next_to_a_display_server_warns_and_spares_the_display() {
        let o = evaluate_processes(
            &[
                per(
                    0,
                    procs(vec![
                        display(1523, "Xorg", 48),
                        process(4242, Some("python train.py"), Some(12000)),
                    ]),
                ),
                per(1, procs(vec![display(1600, "gnome-shell", 20)])),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "someone else's job is on GPU 0: pid 4242 python train.py (12000 MiB)"
        );
        let h = hint(&o);
        assert!(h.contains("(`kill 4242`)"), "{h}");
        assert!(!h.contains("1523") && !h.contains("1600"), "{h}");
        // GPU 1 has only the desktop on it: free to train on.
        assert!(h.contains("CUDA_VISIBLE_DEVICES=1"), "{h}");
    }

    #[test]
    fn a_job_on_a_gpu_cuda_visible_devices_leaves_out_is_noted_not_warned() {
        let gpus = [
            per(0, procs(vec![])),
            per(
                1,
                procs(vec![process(4242, Some("python train.py"), Some(12000))]),
            ),
            per(2, procs(vec![])),
        ];
        let refs: Vec<GpuRef> = gpus.iter().map(|g| g.gpu.clone()).collect();
        let job = job_gpus(Some("0,2"), &refs);
        let o = evaluate_processes(&gpus, 1, job.as_ref());
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "no other processes on the 2 GPUs in CUDA_VISIBLE_DEVICES=0,2 (other jobs on GPU 1, \
             not selected)"
        );
        assert_eq!(o.hint, None);
        assert_eq!(
            o.devices[1].summary,
            "other processes (not in CUDA_VISIBLE_DEVICES, not judged: pid 4242 python train.py \
             (12000 MiB))"
        );
        // Selecting the busy GPU warns as before.
        let job = job_gpus(Some("1,2"), &refs);
        let o = evaluate_processes(&gpus, 1, job.as_ref());
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.starts_with("someone else's job is on GPU 1"));
    }

    #[test]
    fn gpuchecks_own_process_does_not_count() {
        let o = evaluate_processes(
            &[per(
                0,
                procs(vec![process(99, Some("gpucheck"), Some(300))]),
            )],
            99,
            None,
        );
        assert_eq!(o.status, Status::Pass);
    }

    #[test]
    fn process_lists_not_reported_skip() {
        let o = evaluate_processes(
            &[per(
                0,
                ProcessFacts {
                    processes: Err(Unavailable::NotSupported),
                },
            )],
            1,
            None,
        );
        assert_eq!(o.status, Status::Skip);
    }

    // --- gpu.topology ------------------------------------------------------

    fn links(remote: NvLinkRemote, up: u32, down: u32) -> Reading<Vec<NvLinkState>> {
        Ok((0..up + down)
            .map(|link| NvLinkState {
                link,
                active: link < up,
                remote: remote.clone(),
            })
            .collect())
    }

    fn topology(
        n: u32,
        nvlinks: impl Fn(u32) -> Reading<Vec<NvLinkState>>,
        pcie: Reading<P2pStatus>,
        nvlink_p2p: impl Fn(u32, u32) -> Reading<P2pStatus>,
    ) -> TopologyFacts {
        let mut pairs = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                pairs.push(PairFacts {
                    a,
                    b,
                    ancestor: Ok(if a / 2 == b / 2 {
                        Ancestor::Single
                    } else {
                        Ancestor::System
                    }),
                    p2p_read: pcie.clone(),
                    p2p_write: pcie.clone(),
                    p2p_nvlink: nvlink_p2p(a, b),
                });
            }
        }
        TopologyFacts {
            gpus: (0..n).map(gpu).collect(),
            nvlinks: (0..n).map(nvlinks).collect(),
            pairs,
        }
    }

    fn no_nvlink(_: u32) -> Reading<Vec<NvLinkState>> {
        Err(Unavailable::NotSupported)
    }

    #[test]
    fn nvswitch_box_passes_with_an_nv18_matrix() {
        let t = topology(
            4,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "4 GPUs: P2P between all 6 pairs, all over NVLink"
        );
        let m = &o.tables[0];
        assert_eq!(m.header, ["", "GPU0", "GPU1", "GPU2", "GPU3"]);
        assert_eq!(m.rows[0], ["GPU0", "X", "NV18", "NV18", "NV18"]);
        assert_eq!(m.rows[3][1], "NV18");
        assert!(m.legend.as_deref().unwrap_or("").contains("NV#"));
        assert_eq!(o.tables[1].rows[2], ["GPU2", "OK", "OK", "X", "OK"]);
        assert_eq!(o.devices[0].summary, "18/18 NVLinks active (to NVSwitch)");
    }

    #[test]
    fn direct_nvlinks_are_counted_per_pair() {
        let t = topology(
            2,
            |i| links(NvLinkRemote::Gpu(1 - i), 4, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "2 GPUs: P2P between them, over NVLink");
        assert_eq!(o.tables[0].rows[1], ["GPU1", "NV4", "X"]);
    }

    #[test]
    fn pcie_only_box_with_p2p_passes_and_shows_the_pcie_path() {
        let t = topology(4, no_nvlink, Ok(P2pStatus::Ok), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "4 GPUs: P2P between all 6 pairs");
        assert_eq!(o.tables[0].rows[0], ["GPU0", "X", "PIX", "SYS", "SYS"]);
        assert_eq!(o.devices[2].summary, "no NVLink");
    }

    #[test]
    fn no_p2p_over_the_chipset_warns_with_the_acs_hint() {
        let t = topology(2, no_nvlink, Ok(P2pStatus::ChipsetNotSupported), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "no P2P between GPU0-GPU1 (chipset does not support P2P)"
        );
        assert!(hint(&o).contains("sudo lspci -vvv | grep ACSCtl"));
        assert!(hint(&o).contains("iommu=pt"));
        assert!(hint(&o).contains("NCCL_P2P_DISABLE=1"));
        assert_eq!(o.tables[1].rows[0], ["GPU0", "X", "CNS"]);
        assert_eq!(o.metric("p2p_pairs_unavailable"), Some(1.0));
    }

    #[test]
    fn many_pairs_without_p2p_are_counted_not_listed() {
        let t = topology(8, no_nvlink, Ok(P2pStatus::TopologyNotSupported), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "no P2P between 28 of 28 GPU pairs (PCIe topology does not support P2P)"
        );
    }

    #[test]
    fn geforce_p2p_and_regkey_have_their_own_hints() {
        let t = topology(2, no_nvlink, Ok(P2pStatus::GpuNotSupported), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert!(hint(&o).contains("nothing to fix in software"));
        let t = topology(2, no_nvlink, Ok(P2pStatus::DisabledByRegkey), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert!(hint(&o).contains("NVreg_RegistryDwords"));
        // nvidia-smi topo -p2p's code for it.
        assert_eq!(o.tables[1].rows[0][2], "DR");
    }

    #[test]
    fn some_nvlinks_down_warn() {
        let t = topology(
            2,
            |i| {
                if i == 1 {
                    links(NvLinkRemote::Switch, 16, 2)
                } else {
                    links(NvLinkRemote::Switch, 18, 0)
                }
            },
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 1: 16 of 18 NVLinks active (down: link 16, 17)"
        );
        assert!(hint(&o).contains("nvidia-smi nvlink -s -i 1"));
        assert_eq!(o.tables[0].rows[0][2], "NV16");
    }

    #[test]
    fn nvlinks_up_without_nvlink_p2p_point_at_the_fabric_manager() {
        let t = topology(
            2,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::NotSupported),
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU0-GPU1: NVLinks up but P2P over NVLink unavailable"
        );
        assert!(hint(&o).contains("nvidia-fabricmanager"));
    }

    /// 4 GPUs, P2P only between GPU0 and GPU1 (the chipset refuses the rest).
    fn p2p_only_between_0_and_1() -> TopologyFacts {
        let mut t = topology(4, no_nvlink, Ok(P2pStatus::ChipsetNotSupported), |_, _| {
            Err(Unavailable::NotSupported)
        });
        for p in t.pairs.iter_mut().filter(|p| (p.a, p.b) == (0, 1)) {
            p.p2p_read = Ok(P2pStatus::Ok);
            p.p2p_write = Ok(P2pStatus::Ok);
        }
        t
    }

    #[test]
    fn only_the_pairs_cuda_visible_devices_selects_are_judged() {
        let t = p2p_only_between_0_and_1();
        // Every GPU: the pairs without P2P warn.
        let all = evaluate_topology(&t, &[], None);
        assert_eq!(all.status, Status::Warn);
        assert_eq!(
            all.summary,
            "no P2P between 5 of 6 GPU pairs (chipset does not support P2P)"
        );
        // CUDA_VISIBLE_DEVICES=1,0: the job's one pair has P2P.
        let job = job_gpus(Some("1,0"), &t.gpus).expect("two of four GPUs selected");
        assert_eq!(job.gpus, [1, 0]);
        let o = evaluate_topology(&t, &[], Some(&job));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "2 GPUs in CUDA_VISIBLE_DEVICES=1,0: P2P between them"
        );
        assert_eq!(o.hint, None);
        assert_eq!(o.metric("p2p_pairs_unavailable"), Some(0.0));
        // The matrix still shows the whole machine; the rest is not judged.
        assert_eq!(o.tables[1].rows[2][4], "CNS");
        assert_eq!(
            o.devices[3].summary,
            "no NVLink (not in CUDA_VISIBLE_DEVICES, not judged)"
        );
        // A job on GPUs 0 and 2 crosses a pair without P2P.
        let job = job_gpus(Some("GPU-0,GPU-2"), &t.gpus).expect("UUIDs select");
        let o = evaluate_topology(&t, &[], Some(&job));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "no P2P between GPU0-GPU2 (chipset does not support P2P)"
        );
    }

    #[test]
    fn indices_on_a_mixed_host_are_mapped_only_in_pci_bus_order() {
        let mut gpus: Vec<GpuRef> = (0..4).map(gpu).collect();
        // One model: CUDA's order is NVML's.
        assert!(job_gpus_in_order(Some("0,1"), None, &gpus).is_some());
        gpus[3].name = "NVIDIA A100-SXM4-80GB".to_string();
        // Mixed, FASTEST_FIRST: index 0 may be any GPU, so judge them all.
        assert_eq!(job_gpus_in_order(Some("0,1"), None, &gpus), None);
        assert_eq!(
            job_gpus_in_order(Some("0,1"), Some("FASTEST_FIRST"), &gpus),
            None
        );
        assert_eq!(
            job_gpus_in_order(Some("0,1"), Some("PCI_BUS_ID"), &gpus).map(|j| j.gpus),
            Some(vec![0, 1])
        );
        // UUIDs name GPUs whatever the order.
        assert_eq!(
            job_gpus_in_order(Some("GPU-3,GPU-1"), None, &gpus).map(|j| j.gpus),
            Some(vec![3, 1])
        );
    }

    #[test]
    fn facts_with_fewer_nvlink_rows_than_gpus_do_not_panic() {
        let mut t = topology(
            3,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        t.nvlinks.truncate(1);
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(o.tables[0].rows[0][2], "PIX");
    }

    /// 4 GPUs on NVSwitches, judged with each GPU's fabric state.
    fn nvswitch_box(fabric: impl Fn(u32) -> Reading<FabricState>) -> Outcome {
        let t = topology(
            4,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        let fabric: Vec<Reading<FabricState>> = (0..4).map(fabric).collect();
        evaluate_topology(&t, &fabric, None)
    }

    #[test]
    fn a_registered_fabric_passes() {
        let o = nvswitch_box(|_| Ok(FabricState::Completed));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "4 GPUs: P2P between all 6 pairs, all over NVLink"
        );
    }

    #[test]
    fn a_fabric_not_started_fails_and_says_start_the_fabric_manager() {
        let o = nvswitch_box(|_| Ok(FabricState::NotStarted));
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .starts_with("GPU 0: NVSwitch fabric not started (fabric manager); GPU 1: "));
        let h = hint(&o);
        assert!(
            h.starts_with("the NVSwitch fabric of GPUs 0, 1, 2, 3 is not up"),
            "{h}"
        );
        assert!(
            h.contains("`sudo systemctl enable --now nvidia-fabricmanager`"),
            "{h}"
        );
        assert!(
            h.contains("nvidia-smi -q -i 0,1,2,3 | grep -i -A3 fabric"),
            "{h}"
        );
    }

    #[test]
    fn a_fabric_in_progress_or_failed_fails() {
        let o = nvswitch_box(|i| {
            Ok(match i {
                1 => FabricState::InProgress,
                2 => FabricState::Failed("Unknown Error".into()),
                _ => FabricState::Completed,
            })
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: NVSwitch fabric registration still in progress (fabric manager); GPU 2: \
             NVSwitch fabric registration failed: Unknown Error"
        );
        assert!(hint(&o).contains("GPUs 1, 2"), "{}", hint(&o));
    }

    #[test]
    fn one_selected_gpu_has_no_peer_links_to_check() {
        let t = p2p_only_between_0_and_1();
        let job = job_gpus(Some("3"), &t.gpus).expect("one GPU selected");
        let o = evaluate_topology(&t, &[], Some(&job));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "one GPU in CUDA_VISIBLE_DEVICES=3: no peer links to check"
        );
        assert_eq!(o.tables.len(), 2);
    }

    #[test]
    fn cuda_visible_devices_that_selects_all_or_nothing_usable_judges_every_gpu() {
        let gpus: Vec<GpuRef> = (0..4).map(gpu).collect();
        assert_eq!(job_gpus(None, &gpus), None);
        assert_eq!(job_gpus(Some("0,1,2,3"), &gpus), None);
        assert_eq!(job_gpus(Some(""), &gpus), None);
        assert_eq!(
            job_gpus(Some("0,1,0"), &gpus),
            None,
            "a duplicate hides all"
        );
        assert_eq!(job_gpus(Some("MIG-1234"), &gpus), None);
        // Entries after one beyond the count are hidden, as CUDA does.
        assert_eq!(
            job_gpus(Some("2,9,1"), &gpus).map(|j| j.gpus),
            Some(vec![2])
        );
    }

    #[test]
    fn one_gpu_has_nothing_to_check_and_none_skips() {
        let o = evaluate_topology(
            &topology(1, no_nvlink, Ok(P2pStatus::Ok), |_, _| Ok(P2pStatus::Ok)),
            &[],
            None,
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "single GPU: no peer links to check");
        let o = evaluate_topology(
            &topology(0, no_nvlink, Ok(P2pStatus::Ok), |_, _| Ok(P2pStatus::Ok)),
            &[],
            None,
        );
        assert_eq!(o.status, Status::Skip);
    }

    #[test]
    fn p2p_not_reported_skips_or_says_na() {
        let na = || Err(Unavailable::NotSupported);
        let o = evaluate_topology(&topology(3, no_nvlink, na(), |_, _| na()), &[], None);
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.summary,
            "P2P status and NVLinks not reported by these GPUs (n/a)"
        );
        assert_eq!(o.tables[1].rows[0], ["GPU0", "X", "n/a", "n/a"]);
        // Some pairs known, some not.
        let mut t = topology(3, no_nvlink, Ok(P2pStatus::Ok), |_, _| na());
        t.pairs[2].p2p_read = na();
        t.pairs[2].p2p_write = na();
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "3 GPUs: P2P between 2 of 3 pairs, n/a for 1");
    }

    #[test]
    fn timeout_hint_names_the_check() {
        assert!(Ecc.timeout_hint().contains("--skip gpu.ecc"));
        assert!(Driver.timeout() > Ecc.timeout());
    }
}

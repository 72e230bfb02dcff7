//! What every gpu check shares: the NVML query budget, how a reading NVML
//! could not give becomes a finding, a GPU's row in the report, and the
//! verdict when NVML cannot be used at all.

use std::path::Path;
use std::time::Duration;

use crate::domain::action::Action;
use crate::domain::text::gpus_phrase;
use crate::domain::xid::XidAction;
use crate::facts::nvml::NvmlInventory;
use crate::facts::Cause;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{self, GpuFault, GpuRef, NvmlFailure, PerGpu, Reading, Unavailable};
use crate::{Context, DeviceResult, Metric, Outcome, Status};

/// Once NVML is up, a check is a few dozen queries of well under a
/// millisecond each; 5 s is a thousandfold margin and bounds a wedged driver,
/// so a hang costs at most 10 s (init) + 5 s (one check) before the rest are
/// skipped or fail at once (the probe remembers the hung call).
pub(super) const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// "1,5": GPU indices as `nvidia-smi -i` and CUDA_VISIBLE_DEVICES take them.
pub(super) fn ids_phrase(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// A GPU's row in the report, before its findings are judged.
pub(super) fn row(gpu: &GpuRef, metrics: Vec<Metric>) -> DeviceResult {
    DeviceResult {
        index: gpu.index,
        label: None,
        name: gpu.name.clone(),
        uuid: gpu.uuid.clone(),
        status: Status::Pass,
        summary: String::new(),
        metrics,
    }
}

/// The row of a GPU without readings: its findings, else "n/a".
pub(super) fn na_row(gpu: &GpuRef, findings: &Findings) -> DeviceResult {
    findings.device_result(row(gpu, Vec::new()), "n/a".into())
}

/// A value or "n/a" for display.
pub(super) fn shown<T: std::fmt::Display>(r: &Reading<T>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(Unavailable::NotSupported) => "n/a".to_string(),
        Err(e) => format!("? ({e})"),
    }
}

pub(super) const GPU_LOST_HINT: &str =
    "{gpus} fell off the bus: look for Xid 79 in `sudo dmesg | grep -i xid`, \
drain the node and reboot it (a GPU reset is rarely enough); if it recurs, have the GPU, its riser \
and its power cabling checked";

/// Findings for a reading that has no value: a lost or faulted GPU fails
/// (the machine's fault), other NVML errors are gpucheck not finding out,
/// "not supported" is fine and says nothing.
pub(super) fn unreadable(gpu: u32, what: &str, e: &Unavailable) -> Option<Finding> {
    match e {
        Unavailable::NotSupported => None,
        Unavailable::GpuLost => Some(
            Finding::new(Some(gpu), Status::Fail, "GPU is lost (fallen off the bus)")
                .hint(GPU_LOST_HINT),
        ),
        Unavailable::Faulted(fault) => Some(
            Finding::new(
                Some(gpu),
                Status::Fail,
                format!("reading {what} answers {fault}"),
            )
            .hint(fault_hint(*fault))
            .action(Action::for_xid(fault_class(*fault))),
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

/// What a faulted GPU needs, in the Xid catalog's classes: a wedged driver
/// or lost interrupts as Xid 79 (RESTART_BM), a reset request as RESET_GPU,
/// a corrupted infoROM or unplugged power as CHECK_MECHANICALS and beyond.
fn fault_class(fault: GpuFault) -> XidAction {
    match fault {
        GpuFault::InternalError | GpuFault::IrqIssue => XidAction::RebootNode,
        GpuFault::ResetRequired => XidAction::ResetGpu,
        GpuFault::CorruptedInfoRom | GpuFault::InsufficientPower => XidAction::Service,
    }
}

fn fault_hint(fault: GpuFault) -> &'static str {
    match fault {
        GpuFault::InternalError => {
            "the driver has wedged on {gpus} (`nvidia-smi -q -i {ids}` shows \"Unknown Error\" \
             in its fields): look for the Xid that started it in `sudo dmesg | grep -i xid`, drain \
             the node and reboot it; if it recurs after a reboot, have the GPU serviced"
        }
        GpuFault::IrqIssue => {
            "the driver lost {gpus}'s interrupts (`sudo dmesg | grep -i nvrm` says more): drain \
             the node and reboot it; if it recurs, have the GPU, its slot and riser checked"
        }
        GpuFault::ResetRequired => {
            "reset {gpus} while nothing runs on it: `sudo nvidia-smi -r -i {ids}`; if the reset \
             fails, drain the node and reboot it"
        }
        GpuFault::CorruptedInfoRom => {
            "the infoROM of {gpus} (its on-board record of ECC and retired pages) is corrupted: \
             drain the node and have the GPU reflashed or replaced by the vendor"
        }
        GpuFault::InsufficientPower => {
            "{gpus} lacks power: drain the node and reseat the GPU's auxiliary power cables; \
             check the power supply feeding them"
        }
    }
}

/// The findings of GPUs NVML counts but could not open.
pub(super) fn open_failures<T>(gpus: &[PerGpu<T>]) -> Findings {
    let items = gpus
        .iter()
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
        .collect();
    Findings { items }
}

// ---------------------------------------------------------------------------
// A GPU lost before this check: gpu.count's verdict, not repeated

/// The row of a GPU gpu.count already failed as lost.
pub(super) const LOST_ROW: &str = "lost (fallen off the bus): gpu.count fails it";

/// Why there is nothing to judge: gpu.count failed and no GPU it counted
/// answers (none at all, a hung NVML). A lost GPU alone does not stop the
/// later checks: they judge the GPUs that answer.
pub(super) fn nothing_counted(ctx: &Context) -> Option<Outcome> {
    let count = ctx.earlier.get("gpu.count")?;
    if count.status.satisfies_needs() {
        return None;
    }
    let answering = ctx
        .fact::<NvmlInventory>()
        .and_then(|inventory| inventory.gpus().ok())
        .is_some_and(|gpus| !gpus.is_empty());
    if answering {
        return None;
    }
    let verdict = match count.status {
        Status::Error => "errored",
        Status::Skip => "was skipped",
        _ => "failed",
    };
    Some(
        Outcome::skip(format!("needs gpu.count, which {verdict}")).with_cause(Cause::NeedsFailed {
            need: "gpu.count".to_string(),
        }),
    )
}

/// The GPUs gpu.count published as lost (fallen off the bus) or faulted
/// in this run.
pub(super) fn lost_in_count(ctx: &Context) -> Vec<u32> {
    ctx.fact::<NvmlInventory>()
        .map(|inventory| lost_in(&inventory))
        .unwrap_or_default()
}

/// The GPUs an inventory counts but found lost or faulted.
fn lost_in(inventory: &NvmlInventory) -> Vec<u32> {
    match &inventory.0 {
        Ok(list) => list
            .iter()
            .filter_map(|g| match g {
                Err(e) if e.error.is_machine_fault() => Some(e.index),
                _ => None,
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Judge the GPUs that answer. A GPU that gpu.count already failed as lost
/// or faulted (`reported`) and that answers the same here is gpu.count's
/// verdict: it is left out of `evaluate` and marked by [`mark_lost`]. When
/// no GPU answers, every GPU is judged as it is.
pub(super) fn judge_answering<T>(
    gpus: Vec<PerGpu<T>>,
    reported: &[u32],
    evaluate: impl FnOnce(&[PerGpu<T>]) -> Outcome,
) -> Outcome {
    let (lost, answering): (Vec<PerGpu<T>>, Vec<PerGpu<T>>) = gpus.into_iter().partition(|g| {
        reported.contains(&g.gpu.index)
            && g.facts
                .as_ref()
                .err()
                .is_some_and(Unavailable::is_machine_fault)
    });
    if answering.is_empty() {
        return evaluate(&lost);
    }
    let lost: Vec<(GpuRef, Unavailable)> = lost
        .into_iter()
        .filter_map(|g| g.facts.err().map(|e| (g.gpu, e)))
        .collect();
    mark_lost(evaluate(&answering), &lost)
}

/// Mark the GPUs another check failed as lost or faulted: a skipped row
/// each and a note after the summary; the verdict stays that of the GPUs
/// that answered.
pub(super) fn mark_lost(mut outcome: Outcome, lost: &[(GpuRef, Unavailable)]) -> Outcome {
    if lost.is_empty() {
        return outcome;
    }
    outcome
        .devices
        .retain(|d| !lost.iter().any(|(g, _)| g.index == d.index));
    for (g, error) in lost {
        let summary = match error {
            Unavailable::GpuLost => LOST_ROW.to_string(),
            e => format!("unusable, {e}: gpu.count fails it"),
        };
        outcome.devices.push(DeviceResult {
            status: Status::Skip,
            summary,
            ..row(g, Vec::new())
        });
    }
    outcome.devices.sort_by_key(|d| d.index);
    let ids: Vec<u32> = lost.iter().map(|(g, _)| g.index).collect();
    let state = if lost.iter().all(|(_, e)| *e == Unavailable::GpuLost) {
        "lost"
    } else {
        "unusable"
    };
    outcome.summary = format!(
        "{}; {} {state}: see gpu.count",
        outcome.summary,
        gpus_phrase(&ids)
    );
    outcome
}

// ---------------------------------------------------------------------------
// NVML itself

pub(super) fn lib(ctx: &Context) -> Option<&Path> {
    ctx.options.nvml_lib.as_deref()
}

/// The verdict when NVML cannot be used at all, with a hint and a repair
/// action per cause.
pub fn nvml_failure_outcome(failure: &NvmlFailure, lib: Option<&Path>) -> Outcome {
    nvml_failure_verdict(failure, lib).with_action(nvml_failure_action(failure, lib), Vec::new())
}

/// No library: a flag to fix or a driver to install; a version mismatch
/// or a driver that stopped answering: reboot; anything else: a reset
/// clears a wedged driver (the hint says so).
fn nvml_failure_action(failure: &NvmlFailure, lib: Option<&Path>) -> Action {
    match failure {
        NvmlFailure::LibraryNotFound { .. } if lib.is_some() => Action::FixConfig,
        NvmlFailure::LibraryNotFound { .. } | NvmlFailure::DriverNotLoaded => Action::FixInstall,
        NvmlFailure::NoPermission => Action::FixConfig,
        NvmlFailure::LibRmVersionMismatch => Action::RebootNode,
        NvmlFailure::Other { detail } if detail.starts_with("NVML has not returned") => {
            Action::RebootNode
        }
        NvmlFailure::Other { .. } => Action::ResetGpu,
    }
}

fn nvml_failure_verdict(failure: &NvmlFailure, lib: Option<&Path>) -> Outcome {
    match failure {
        NvmlFailure::LibraryNotFound { detail } => library_not_found(detail, lib),
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

/// NVML's library could not be loaded: from the flag's path, or from the
/// system's library search.
fn library_not_found(detail: &str, lib: Option<&Path>) -> Outcome {
    match lib {
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
        .with_fact("nvml_error", detail),
    }
}

/// What the runner shows when an NVML check times out.
pub(super) fn nvml_timeout_hint(id: &str) -> String {
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

#[cfg(test)]
pub(crate) mod testing {
    //! Fact builders the gpu checks' unit tests share.

    use crate::probe::nvml::{GpuRef, PerGpu, Unavailable};
    use crate::Outcome;

    pub fn gpu(index: u32) -> GpuRef {
        GpuRef {
            index,
            name: "NVIDIA H100 80GB HBM3".to_string(),
            uuid: Some(format!("GPU-{index}")),
        }
    }

    pub fn per<T>(index: u32, facts: T) -> PerGpu<T> {
        PerGpu {
            gpu: gpu(index),
            facts: Ok(facts),
        }
    }

    /// Facts of GPU `index`, a `name` as NVML gives it.
    pub fn named<T>(index: u32, name: &str, facts: T) -> PerGpu<T> {
        PerGpu {
            gpu: GpuRef {
                name: name.to_string(),
                ..gpu(index)
            },
            facts: Ok(facts),
        }
    }

    pub fn lost<T>(index: u32) -> PerGpu<T> {
        PerGpu {
            gpu: gpu(index),
            facts: Err(Unavailable::GpuLost),
        }
    }

    pub fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }
}

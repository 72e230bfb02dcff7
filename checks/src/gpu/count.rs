//! gpu.count: every GPU NVML sees, against --expect-gpus, and whether the
//! models are mixed. Publishes [`NvmlInventory`] for later checks.

use std::collections::BTreeMap;
use std::time::Duration;

use super::common::{
    ids_phrase, lib, nvml_failure_outcome, nvml_timeout_hint, unreadable, GPU_LOST_HINT,
    QUERY_TIMEOUT,
};
use crate::domain::action::Action;
use crate::domain::text::{gpu_count, gpus_phrase};
use crate::facts::nvml::NvmlInventory;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{self, GpuError, GpuInfo};
use crate::{Check, Context, DeviceResult, FactValue, Metric, Outcome, Profile, Status};

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
    let mut findings = Findings::new();
    let mut devices = Vec::new();
    let mut outcome_facts = BTreeMap::new();
    for slot in inventory {
        match slot {
            Ok(g) => {
                outcome_facts.insert(
                    format!("gpu{}", g.index),
                    FactValue::from(format!("{} {}", gpu_line(g), g.uuid)),
                );
                devices.push(described_row(g));
            }
            Err(e) => {
                let f = unopenable(e);
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
    let good: Vec<&GpuInfo> = inventory.iter().filter_map(|g| g.as_ref().ok()).collect();
    let seen = good.len() as u32;
    findings
        .items
        .extend(missing_gpus(inventory.is_empty(), seen, expect));
    let (model_list, mixed) = models(&good);
    findings.items.extend(mixed);

    let pass_summary = match expect {
        Some(e) => format!("{} (expected {e}): {model_list}", gpu_count(seen as usize)),
        None => format!("{}: {model_list}", gpu_count(seen as usize)),
    };
    let mut outcome =
        findings
            .conclude(pass_summary, devices)
            .with_metric("gpu_count", seen as f64, "count");
    outcome.facts.extend(outcome_facts);
    if !model_list.is_empty() {
        outcome = outcome.with_fact("gpu_models", model_list);
    }
    outcome
}

/// The row of a GPU NVML described.
fn described_row(g: &GpuInfo) -> DeviceResult {
    DeviceResult {
        index: g.index,
        label: None,
        name: g.name.clone(),
        uuid: Some(g.uuid.clone()),
        status: Status::Pass,
        summary: gpu_line(g),
        metrics: vec![Metric::new(
            "memory_total",
            g.memory_total_mib as f64,
            "MiB",
        )],
    }
}

/// A GPU NVML counts but cannot open fails the count when NVML's answer is
/// the machine's fault (lost, a wedged driver, a reset needed: with that
/// fault's action), and is an error when gpucheck could not ask.
fn unopenable(e: &GpuError) -> Finding {
    let f = unreadable(e.index, "the GPU", &e.error).unwrap_or_else(|| {
        Finding::new(
            Some(e.index),
            Status::Error,
            "NVML cannot describe this GPU",
        )
    });
    Finding {
        status: f.status.worst(Status::Fail),
        text: format!("counted but cannot be opened: {}", e.error),
        hint: f.hint.or(Some(GPU_LOST_HINT.to_string())),
        ..f
    }
}

/// No GPU at all, or fewer usable than --expect-gpus.
fn missing_gpus(none: bool, seen: u32, expect: Option<u32>) -> Vec<Finding> {
    let mut findings = Vec::new();
    if none {
        findings.push(Finding::new(None, Status::Fail, "NVML sees no GPUs").hint(
            "the driver is loaded but shows no GPU: in a container, pass them in (`docker run \
                 --gpus all`, or NVIDIA_VISIBLE_DEVICES=all with the NVIDIA runtime); on a host, \
                 check `lspci | grep -i nvidia` and `sudo dmesg | grep -i nvrm` (a GPU the driver \
                 failed to initialise, or one excluded by the kernel command line)",
        )
        .action(Action::FixConfig));
    }
    if let Some(expected) = expect.filter(|e| seen < *e) {
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
    findings
}

/// "8x NVIDIA H100 80GB HBM3", and a warning when the models are mixed.
fn models(good: &[&GpuInfo]) -> (String, Option<Finding>) {
    // Group by model, in index order of first appearance, with the compute
    // capability of each model.
    let mut models: Vec<(&str, Vec<u32>)> = Vec::new();
    let mut capability: Vec<Option<(u32, u32)>> = Vec::new();
    for g in good {
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
    if models.len() < 2 {
        return (model_list, None);
    }
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
    let warning = Finding::new(None, Status::Warn, format!("mixed GPU models: {groups}"))
        .hint(format!(
            "DDP waits for the slowest GPU at every step, so the faster ones idle: run one model \
             per job, e.g. `CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={}` (NVML's order \
             is PCI bus order)",
            ids_phrase(&largest)
        ))
        .action(Action::FixConfig);
    (model_list, Some(warning))
}

pub struct Count;

impl Check for Count {
    fn id(&self) -> &'static str {
        "gpu.count"
    }
    fn title(&self) -> &'static str {
        "GPU inventory"
    }
    fn health(&self) -> bool {
        true
    }
    fn timeout_stage(&self) -> Option<String> {
        crate::probe::nvml::hung_call().map(str::to_string)
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
        let inventory = nvml::inventory(lib(ctx));
        let outcome = match &inventory {
            Ok(list) => evaluate_count(list, ctx.options.expect_gpus),
            Err(f) => nvml_failure_outcome(f, lib(ctx)),
        };
        outcome.publish(&NvmlInventory(inventory))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::testing::*;
    use crate::probe::nvml::{GpuError, GpuFault, GpuInfo, Unavailable};
    use crate::Status;

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
        assert!(o.facts["gpu1"].to_string().ends_with("GPU-1"));
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

    fn unopened(index: u32, error: Unavailable) -> Result<GpuInfo, GpuError> {
        Err(GpuError { index, error })
    }

    #[test]
    fn a_gpu_the_driver_wedged_on_fails_with_a_reboot() {
        // nvidia-smi's "Unable to determine the device handle for GPU
        // 0000:BA:00.0: Unknown Error": NVML_ERROR_UNKNOWN on the handle.
        let inv = vec![
            info(0, H100, (9, 0)),
            unopened(1, Unavailable::Faulted(GpuFault::InternalError)),
        ];
        let o = evaluate_count(&inv, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: counted but cannot be opened: Unknown Error (NVML_ERROR_UNKNOWN: an internal \
             driver error)"
        );
        assert_eq!(o.action, Some(Action::RebootNode));
        assert_eq!(o.action_gpus, vec![1]);
        assert!(
            hint(&o).starts_with("the driver has wedged on GPU 1"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.devices[1].status, Status::Fail);
    }

    #[test]
    fn each_gpu_fault_fails_with_its_own_action() {
        for (fault, action) in [
            (GpuFault::ResetRequired, Action::ResetGpu),
            (GpuFault::IrqIssue, Action::RebootNode),
            (GpuFault::CorruptedInfoRom, Action::ServiceHardware),
            (GpuFault::InsufficientPower, Action::ServiceHardware),
        ] {
            let o = evaluate_count(&[unopened(0, Unavailable::Faulted(fault))], None);
            assert_eq!(o.status, Status::Fail, "{fault:?}");
            assert_eq!(o.action, Some(action), "{fault:?}");
        }
    }

    #[test]
    fn a_gpu_gpucheck_may_not_open_is_its_own_error() {
        // NO_PERMISSION: gpucheck could not ask, the GPU is not known bad.
        let inv = vec![unopened(
            0,
            Unavailable::Failed("the current user does not have permission".into()),
        )];
        let o = evaluate_count(&inv, None);
        assert_eq!(o.status, Status::Error);
        assert!(hint(&o).starts_with("NVML answered with an error"));
    }
}

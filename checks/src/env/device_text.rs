//! How the env checks show CUDA devices and the GPUs they map to: "cuda:0 ->
//! GPU 2", "GPU 2 (NVIDIA H100 80GB HBM3, GPU-...)", "8x NVIDIA H100", and
//! the per-device rows of `--verbose`.

use crate::domain::text::{counted, list_cut};
use crate::domain::visible_devices::{NvmlGpu, Target};
use crate::{DeviceResult, Status};

/// Longest list of devices a summary spells out before it cuts.
pub(super) const SUMMARY_MAX_DEVICES: usize = 8;

pub(super) fn gpu_of(gpus: &[NvmlGpu], index: u32) -> Option<&NvmlGpu> {
    gpus.iter().find(|g| g.index == index)
}

/// The GPU a target is or lives on.
fn parent_gpu(t: &Target) -> u32 {
    match t {
        Target::Gpu(i) | Target::Mig { gpu: i, .. } => *i,
    }
}

/// "GPU 2", or "MIG-... on GPU 1".
pub(super) fn target_short(t: &Target) -> String {
    match t {
        Target::Gpu(i) => format!("GPU {i}"),
        Target::Mig { gpu, id } => format!("{id} on GPU {gpu}"),
    }
}

/// "GPU 2 (NVIDIA H100 80GB HBM3, GPU-...)".
pub(super) fn target_long(t: &Target, gpus: &[NvmlGpu]) -> String {
    let (gpu, mig) = match t {
        Target::Gpu(i) => (*i, None),
        Target::Mig { gpu, id } => (*gpu, Some(id)),
    };
    let g = gpu_of(gpus, gpu);
    let name = g.map_or("(unknown)", |g| g.name.as_str());
    let uuid = g.and_then(|g| g.uuid.as_deref()).unwrap_or("UUID n/a");
    match mig {
        Some(id) => format!("{id} on GPU {gpu} ({name}, {uuid})"),
        None if g.is_some_and(|g| g.mig_enabled) => {
            format!("GPU {gpu} ({name}, {uuid}; in MIG mode, CUDA uses one of its MIG devices)")
        }
        None => format!("GPU {gpu} ({name}, {uuid})"),
    }
}

/// "cuda:0 -> GPU 2, cuda:1 -> GPU 5", or "none".
pub(super) fn targets_short(targets: &[Target]) -> String {
    if targets.is_empty() {
        return "none".into();
    }
    targets
        .iter()
        .enumerate()
        .map(|(i, t)| format!("cuda:{i} -> {}", target_short(t)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The mapping as a summary shows it: one device in full, several by GPU
/// number with the models they are.
pub(super) fn targets_summary(targets: &[Target], gpus: &[NvmlGpu]) -> String {
    match targets {
        [] => "no GPU".into(),
        [only] => format!("cuda:0 -> {}", target_long(only, gpus)),
        _ => {
            let each: Vec<String> = targets
                .iter()
                .enumerate()
                .map(|(i, t)| format!("cuda:{i} -> {}", target_short(t)))
                .collect();
            let names: Vec<&str> = targets
                .iter()
                .map(|t| gpu_of(gpus, parent_gpu(t)).map_or("(unknown)", |g| g.name.as_str()))
                .collect();
            format!(
                "{} ({})",
                list_cut(&each, SUMMARY_MAX_DEVICES),
                models(&names)
            )
        }
    }
}

/// "8x NVIDIA H100 80GB HBM3" or "4x A, 4x B", in order of first appearance.
pub(super) fn models(names: &[&str]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for n in names {
        match counts.iter_mut().find(|(m, _)| m == n) {
            Some((_, c)) => *c += 1,
            None => counts.push((n, 1)),
        }
    }
    counts
        .iter()
        .map(|(m, c)| format!("{c}x {m}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "8x A, 8x B" for all the GPUs.
pub(super) fn gpu_models(gpus: &[NvmlGpu]) -> String {
    let names: Vec<&str> = gpus.iter().map(|g| g.name.as_str()).collect();
    models(&names)
}

pub(super) fn distinct_models(gpus: &[NvmlGpu]) -> usize {
    let mut names: Vec<&str> = gpus.iter().map(|g| g.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names.len()
}

/// "1 device", "2 devices".
pub(super) fn devices_text(n: usize) -> String {
    counted(n, "device", "devices")
}

/// "8 GPUs (0-7)".
pub(super) fn gpu_count_text(n: usize) -> String {
    match n {
        0 => "no GPU".into(),
        1 => "1 GPU (0)".into(),
        n => format!("{n} GPUs (0-{})", n - 1),
    }
}

/// Per-device rows: cuda ordinal, the GPU's name and UUID (the MIG UUID for
/// a MIG device), and the mapping in words.
pub(super) fn device_rows(
    targets: &[Target],
    gpus: &[NvmlGpu],
    order_caveat: bool,
) -> Vec<DeviceResult> {
    targets
        .iter()
        .enumerate()
        .map(|(ordinal, t)| {
            let (gpu, uuid) = match t {
                Target::Gpu(i) => (*i, gpu_of(gpus, *i).and_then(|g| g.uuid.clone())),
                Target::Mig { gpu, id } => (*gpu, Some(id.clone())),
            };
            let mut summary = format!("cuda:{ordinal} -> {}", target_long(t, gpus));
            if order_caveat {
                summary.push_str(
                    " if CUDA counted in PCI order; it counts fastest-first here (CUDA_DEVICE_ORDER is not PCI_BUS_ID)",
                );
            }
            DeviceResult {
                index: ordinal as u32,
                label: Some(format!("cuda:{ordinal}")),
                name: gpu_of(gpus, gpu).map_or_else(|| "(unknown)".into(), |g| g.name.clone()),
                uuid,
                status: Status::Pass,
                summary,
                metrics: Vec::new(),
            }
        })
        .collect()
}

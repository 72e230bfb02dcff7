//! fleet.gpus: the same GPU model and count on every node, counted after
//! each node's CUDA_VISIBLE_DEVICES.

use super::{agreement, Fleet, FleetCheck, FleetNode};
use crate::domain::cuda_devices::visible_count;
use crate::domain::visible_devices::parse_cuda_visible_devices;
use crate::facts::nvml::NvmlInventory;
use crate::identity::check;
use crate::Outcome;

check!(
    Gpus,
    "fleet.gpus",
    "Same GPU model and count on every node",
    "Every node has the same GPU model and the same number of GPUs visible to the job (NVML's \
inventory from gpu.count, narrowed by the node's CUDA_VISIBLE_DEVICES).

Why it matters: torchrun starts --nproc-per-node workers on every node; a node with fewer \
GPUs fails to start its ranks (or shares a GPU between two), and a node with a slower model \
sets the pace of every step.

Fix: schedule the job on identical nodes (a SLURM partition or constraint, a Kubernetes \
node selector on the GPU product label), and check CUDA_VISIBLE_DEVICES on the named node.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for Gpus {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        agreement(
            fleet,
            "GPU set",
            gpus_of,
            "gpu.count did not run or NVML failed on every node",
            "run the job on identical nodes, or fix the GPU count (CUDA_VISIBLE_DEVICES, a \
             lost GPU) on the named nodes",
        )
    }
}

/// "8x NVIDIA H100 80GB HBM3", "4 visible of 8x NVIDIA A100-SXM4-80GB",
/// "1x A + 1x B".
fn gpus_of(node: &FleetNode) -> Option<String> {
    let gpus = node.fact::<NvmlInventory>()?.gpus().ok()?;
    let mut models: Vec<(String, usize)> = Vec::new();
    for g in &gpus {
        match models.iter_mut().find(|(m, _)| *m == g.name) {
            Some((_, n)) => *n += 1,
            None => models.push((g.name.clone(), 1)),
        }
    }
    let all = if models.is_empty() {
        "no GPUs".to_string()
    } else {
        models
            .iter()
            .map(|(m, n)| format!("{n}x {m}"))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    let visible = node
        .env
        .get("CUDA_VISIBLE_DEVICES")
        .map(|v| visible_count(&parse_cuda_visible_devices(v), &gpus));
    Some(match visible {
        Some(Some(n)) if n as usize != gpus.len() => format!("{n} visible of {all}"),
        Some(None) => format!("{all} (MIG instances visible)"),
        _ => all,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::nvml::GpuInfo;
    use crate::Status;

    fn inventory(names: &[&str]) -> NvmlInventory {
        NvmlInventory(Ok(names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                Ok(GpuInfo {
                    index: i as u32,
                    name: n.to_string(),
                    uuid: format!("GPU-{i:08}"),
                    pci_bus_id: format!("00000000:{:02X}:00.0", i + 1),
                    memory_total_mib: 81559,
                    compute_capability: Some((9, 0)),
                    mig_enabled: Some(false),
                    mig_uuids: Vec::new(),
                })
            })
            .collect()))
    }

    const H100: &str = "NVIDIA H100 80GB HBM3";

    #[test]
    fn a_node_with_fewer_visible_gpus_is_named() {
        let mut b = with_fact(node(1, "b"), "gpu.count", &inventory(&[H100; 8]));
        b.env
            .insert("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into());
        let f = fleet(vec![
            with_fact(node(0, "a"), "gpu.count", &inventory(&[H100; 8])),
            b,
            with_fact(node(2, "c"), "gpu.count", &inventory(&[H100; 8])),
        ]);
        let o = Gpus.judge(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            format!(
                "GPU set differs: node 1 (b) has 4 visible of 8x {H100}; nodes 0, 2 have 8x {H100}"
            )
        );
    }

    #[test]
    fn same_model_and_count_passes_mixed_models_show() {
        let f = fleet(vec![
            with_fact(node(0, "a"), "gpu.count", &inventory(&[H100; 2])),
            with_fact(
                node(1, "b"),
                "gpu.count",
                &inventory(&[H100, "NVIDIA A100"]),
            ),
        ]);
        let o = Gpus.judge(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("1x NVIDIA H100 80GB HBM3 + 1x NVIDIA A100"),
            "{}",
            o.summary
        );
        let f = fleet(vec![
            with_fact(node(0, "a"), "gpu.count", &inventory(&[H100; 2])),
            with_fact(node(1, "b"), "gpu.count", &inventory(&[H100; 2])),
        ]);
        assert_eq!(
            Gpus.judge(&f).summary,
            format!("GPU set 2x {H100} on 2 nodes")
        );
    }
}

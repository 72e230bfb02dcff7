//! The GPUs a DDP job started here will use: those CUDA_VISIBLE_DEVICES
//! selects, mapped onto NVML's GPUs as CUDA maps them. gpu.processes and
//! gpu.topology judge only these.

use crate::domain::visible_devices::{
    map_visible_devices, parse_cuda_visible_devices, NvmlGpu, Target,
};
use crate::probe::nvml::GpuRef;

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
    let nvml_gpus: Vec<NvmlGpu> = gpus
        .iter()
        .map(|g| NvmlGpu {
            index: g.index,
            name: g.name.clone(),
            uuid: g.uuid.clone(),
            ..Default::default()
        })
        .collect();
    let parsed = parse_cuda_visible_devices(value);
    let mapping = map_visible_devices(parsed.effective(), &nvml_gpus);
    let selected: Vec<u32> = mapping
        .targets
        .iter()
        .map(|t| match t {
            Target::Gpu(i) => Some(*i),
            Target::Mig { .. } => None,
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
    let by_index = parse_cuda_visible_devices(&job.cuda_visible_devices).names_indices();
    let pci_order = cuda_device_order.is_some_and(|o| o.trim() == "PCI_BUS_ID");
    let mixed = gpus.windows(2).any(|w| w[0].name != w[1].name);
    if by_index && !pci_order && mixed {
        return None;
    }
    Some(job)
}

/// The job's GPUs from this process's environment.
pub(super) fn job_from_env(gpus: &[GpuRef]) -> Option<JobGpus> {
    use crate::probe::host::env_lossy;
    job_gpus_in_order(
        env_lossy("CUDA_VISIBLE_DEVICES").as_deref(),
        env_lossy("CUDA_DEVICE_ORDER").as_deref(),
        gpus,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::testing::*;
    use crate::probe::nvml::GpuRef;

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
}

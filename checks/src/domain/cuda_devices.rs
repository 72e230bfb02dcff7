//! How many devices the CUDA driver should enumerate in this process: what
//! NVML counts, narrowed by CUDA_VISIBLE_DEVICES as the driver reads it, or
//! the `--expect-gpus` floor. Shared by cuda.driver and torch.cuda.

use crate::domain::text::{gpu_count, quote_value};
use crate::domain::visible_devices::{
    map_visible_devices, parse_cuda_visible_devices, DeviceToken, NvmlGpu, VisibleDevices,
};
use crate::machine::GpuInfo;

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
pub fn visible_count(v: &VisibleDevices, gpus: &[GpuInfo]) -> Option<u32> {
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
    nvml_gpus: Option<&[GpuInfo]>,
    cvd: Option<&str>,
    expect_gpus: Option<u32>,
) -> Expectation {
    match nvml_gpus {
        Some(gpus) => {
            if gpus.iter().any(|g| g.mig_enabled == Some(true)) {
                return Expectation::Unknown {
                    why: "MIG is enabled, so CUDA enumerates MIG instances, not GPUs".to_string(),
                };
            }
            let seen = format!("NVML sees {}", gpu_count(gpus.len()));
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

/// The NVML GPUs no CUDA device corresponds to, when every GPU is visible
/// (CUDA_VISIBLE_DEVICES unset, MIG off): a CUDA device matches a GPU by
/// UUID (cuDeviceGetUuid against nvmlDeviceGetUUID), else by PCI bus id.
/// Empty when a CUDA device carries neither, since then no GPU can be named.
pub fn gpus_cuda_does_not_enumerate<'a>(
    nvml_gpus: &'a [GpuInfo],
    cuda: &[(Option<String>, Option<String>)],
) -> Vec<&'a GpuInfo> {
    if cuda
        .iter()
        .any(|(uuid, bus)| uuid.is_none() && bus.is_none())
    {
        return Vec::new();
    }
    let same_bus = |a: &str, b: &str| pci_address(a).is_some_and(|x| Some(x) == pci_address(b));
    nvml_gpus
        .iter()
        .filter(|g| g.mig_enabled != Some(true))
        .filter(|g| {
            !cuda.iter().any(|(uuid, bus)| {
                uuid.as_deref()
                    .is_some_and(|u| u.eq_ignore_ascii_case(&g.uuid))
                    || bus.as_deref().is_some_and(|b| same_bus(b, &g.pci_bus_id))
            })
        })
        .collect()
}

/// A PCI address as (domain, bus, device, function). CUDA writes the
/// domain with 4 hex digits ("0000:3B:00.0", cuDeviceGetPCIBusId), NVML
/// with 8 ("00000000:3B:00.0", nvmlDeviceGetPciInfo's busId), so the
/// strings never compare equal; the numbers do.
fn pci_address(text: &str) -> Option<(u32, u8, u8, u8)> {
    let (rest, function) = text.trim().rsplit_once('.')?;
    let mut parts = rest.split(':');
    let (domain, bus, device) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some((
        u32::from_str_radix(domain, 16).ok()?,
        u8::from_str_radix(bus, 16).ok()?,
        u8::from_str_radix(device, 16).ok()?,
        u8::from_str_radix(function, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_cuda_does_not_enumerate_is_found_by_uuid_or_bus_id() {
        let gpu = |i: u32| GpuInfo {
            index: i,
            name: "NVIDIA H100 80GB HBM3".to_string(),
            uuid: format!("GPU-{i}"),
            pci_bus_id: format!("00000000:{i:02X}:00.0"),
            memory_total_mib: 81559,
            compute_capability: Some((9, 0)),
            mig_enabled: Some(false),
            mig_uuids: vec![],
        };
        let gpus: Vec<GpuInfo> = (0..4).map(gpu).collect();
        let some = |s: &str| Some(s.to_string());
        // GPU 2 is missing; GPU 3 matches by bus id only (lower case).
        let cuda = vec![
            (some("GPU-0"), None),
            (some("gpu-1"), some("00000000:01:00.0")),
            (None, some("00000000:03:00.0")),
        ];
        let missing = gpus_cuda_does_not_enumerate(&gpus, &cuda);
        assert_eq!(missing.iter().map(|g| g.index).collect::<Vec<_>>(), [2]);
        // CUDA's 4-digit domain against NVML's 8-digit one.
        let cuda = vec![
            (some("GPU-0"), None),
            (None, some("0000:01:00.0")),
            (None, some("0000:03:00.0")),
        ];
        let missing = gpus_cuda_does_not_enumerate(&gpus, &cuda);
        assert_eq!(missing.iter().map(|g| g.index).collect::<Vec<_>>(), [2]);
        assert_eq!(pci_address("0000:3b:00.0"), pci_address("00000000:3B:00.0"));
        assert_eq!(pci_address("garbage"), None);
        // A device with neither id: nothing can be named.
        let cuda = vec![(some("GPU-0"), None), (None, None)];
        assert!(gpus_cuda_does_not_enumerate(&gpus, &cuda).is_empty());
    }

    #[test]
    fn prediction_uses_nvml_only_when_it_can() {
        let gpu = |i: u32, mig: Option<bool>| GpuInfo {
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
}

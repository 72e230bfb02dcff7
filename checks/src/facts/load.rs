//! Each GPU's figures under load, published by `gpu.compute`
//! ([`ComputeLoad`]: GEMM TFLOPS) and `gpu.memory` ([`MemoryLoad`]: copy
//! and triad GB/s), so that `gpucheck cluster`'s `fleet.gpu_load` compares
//! every GPU of the fleet with the others of its model.

use serde::{Deserialize, Serialize};

use crate::domain::qualify::{CPU_SIBLING_FLOOR, SIBLING_FLOOR};
use crate::probe::load::LoadDevice;
use crate::Fact;

impl LoadDevice {
    /// Below this share of the median of its kind a figure measured here is
    /// slow: [`SIBLING_FLOOR`] on the GPUs, [`CPU_SIBLING_FLOOR`] when the CPU
    /// stands in for them.
    pub fn sibling_floor(self) -> f64 {
        match self {
            LoadDevice::Cuda => SIBLING_FLOOR,
            LoadDevice::Cpu => CPU_SIBLING_FLOOR,
        }
    }
}

/// One GPU's figures; a figure the load did not give is None.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadGpu {
    /// NVML's index.
    pub index: u32,
    /// NVML's name: "NVIDIA H100 80GB HBM3".
    pub name: String,
    #[serde(default)]
    pub uuid: Option<String>,
    #[serde(default)]
    pub bf16_tflops: Option<f64>,
    #[serde(default)]
    pub tf32_tflops: Option<f64>,
    #[serde(default)]
    pub copy_gbps: Option<f64>,
    #[serde(default)]
    pub triad_gbps: Option<f64>,
}

impl LoadGpu {
    /// A GPU with no figure yet; a blank UUID is none.
    pub fn new(index: u32, name: &str, uuid: Option<&str>) -> LoadGpu {
        LoadGpu {
            index,
            name: name.to_string(),
            uuid: uuid.filter(|u| !u.is_empty()).map(str::to_string),
            ..LoadGpu::default()
        }
    }
}

/// Every GPU one load measured, and where the load ran (the CPU stands in
/// for the GPUs in gpucheck's tests, and its figures are the CPU's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadFigures {
    pub device: LoadDevice,
    pub gpus: Vec<LoadGpu>,
}

/// Figures that are not finite are no figures.
fn finite(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite())
}

/// `gpu.compute`'s bf16 and TF32 GEMM TFLOPS per GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputeLoad(pub LoadFigures);

impl Fact for ComputeLoad {
    const KEY: &'static str = "compute_load";
}

impl ComputeLoad {
    /// Each GPU as (GPU, bf16, TF32).
    pub fn new(
        device: LoadDevice,
        gpus: impl IntoIterator<Item = (LoadGpu, Option<f64>, Option<f64>)>,
    ) -> ComputeLoad {
        let gpus = gpus
            .into_iter()
            .map(|(g, bf16, tf32)| LoadGpu {
                bf16_tflops: finite(bf16),
                tf32_tflops: finite(tf32),
                ..g
            })
            .collect();
        ComputeLoad(LoadFigures { device, gpus })
    }
}

/// `gpu.memory`'s copy and triad GB/s per GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryLoad(pub LoadFigures);

impl Fact for MemoryLoad {
    const KEY: &'static str = "memory_load";
}

impl MemoryLoad {
    /// Each GPU as (GPU, copy, triad).
    pub fn new(
        device: LoadDevice,
        gpus: impl IntoIterator<Item = (LoadGpu, Option<f64>, Option<f64>)>,
    ) -> MemoryLoad {
        let gpus = gpus
            .into_iter()
            .map(|(g, copy, triad)| LoadGpu {
                copy_gbps: finite(copy),
                triad_gbps: finite(triad),
                ..g
            })
            .collect();
        MemoryLoad(LoadFigures { device, gpus })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    #[test]
    fn figures_travel_through_an_outcome_and_non_finite_ones_are_none() {
        let fact = ComputeLoad::new(
            LoadDevice::Cuda,
            [(
                LoadGpu::new(3, "NVIDIA H100 80GB HBM3", Some("GPU-1")),
                Some(712.5),
                Some(f64::NAN),
            )],
        );
        let back: ComputeLoad = Outcome::pass("ok").publish(&fact).fact().expect("a fact");
        assert_eq!(back, fact);
        let g = &back.0.gpus[0];
        assert_eq!(
            (g.index, g.bf16_tflops, g.tf32_tflops),
            (3, Some(712.5), None)
        );
        assert_eq!(g.uuid.as_deref(), Some("GPU-1"));
        assert_eq!(LoadGpu::new(0, "x", Some("")).uuid, None);
        let mem = MemoryLoad::new(
            LoadDevice::Cpu,
            [(LoadGpu::new(0, "x", None), None, Some(9.5))],
        );
        let back: MemoryLoad = Outcome::pass("ok").publish(&mem).fact().expect("a fact");
        assert_eq!(back.0.device, LoadDevice::Cpu);
        assert_eq!(back.0.gpus[0].triad_gbps, Some(9.5));
    }
}

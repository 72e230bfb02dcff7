//! What the load checks (gpu.compute, gpu.memory, gpu.p2p_bandwidth)
//! share: which GPUs to load, which Python runs the load, how a load that
//! gave no figures becomes the verdict, and each GPU's NVML readings taken
//! while it ran.

use std::time::Duration;

use crate::domain::sku::{self, Sku};
use crate::facts::load::LoadGpu;
use crate::facts::nvml::gpus_for_run;
use crate::probe::load::{LoadDevice, LoadError, Sample};
use crate::probe::nvml::{GpuInfo, LoadReading};
use crate::probe::python::{find_python, PythonChoice};
use crate::{Context, Outcome};

/// Everything a load needs before it starts.
pub(super) struct LoadPlan {
    pub gpus: Vec<GpuInfo>,
    pub python: PythonChoice,
    pub device: LoadDevice,
}

/// The GPUs and the Python, or the outcome that says why there is no load.
pub(super) fn plan(ctx: &Context) -> Result<LoadPlan, Box<Outcome>> {
    let gpus = match gpus_for_run(ctx) {
        Ok(g) if g.is_empty() => return Err(Box::new(Outcome::skip("no GPUs to put under load"))),
        Ok(g) => g,
        Err(e) => return Err(Box::new(Outcome::skip(format!("NVML lists no GPUs: {e}")))),
    };
    if let Some(g) = gpus.iter().find(|g| g.mig_enabled == Some(true)) {
        return Err(Box::new(Outcome::skip(format!(
            "GPU {} is in MIG mode: load figures of a MIG slice say nothing about the GPU",
            g.index
        ))));
    }
    let python = find_python(ctx.options.python.as_deref()).map_err(|e| {
        Box::new(
            Outcome::skip(format!("no Python to run the load with: {e}"))
                .with_hint("name the interpreter that will train with --python PATH"),
        )
    })?;
    Ok(LoadPlan {
        gpus,
        python,
        device: LoadDevice::from_env(),
    })
}

impl LoadPlan {
    pub fn indices(&self) -> Vec<u32> {
        self.gpus.iter().map(|g| g.index).collect()
    }

    /// The name of the GPU `index`, as NVML gives it.
    pub fn name(&self, index: u32) -> String {
        self.gpus
            .iter()
            .find(|g| g.index == index)
            .map_or_else(|| "(unknown)".into(), |g| g.name.clone())
    }

    /// The part GPU `index` is in the SKU table, for its peak figures; none
    /// when the CPU stands in for the GPUs (its figures say nothing of the part).
    pub fn part(&self, index: u32) -> Option<&'static Sku> {
        match self.device {
            LoadDevice::Cuda => sku::by_nvml_name(&self.name(index)),
            LoadDevice::Cpu => None,
        }
    }

    /// The GPU `index` as a load fact names it: NVML's name and UUID.
    pub fn load_gpu(&self, index: u32) -> LoadGpu {
        let uuid = self.gpus.iter().find(|g| g.index == index);
        LoadGpu::new(index, &self.name(index), uuid.map(|g| g.uuid.as_str()))
    }
}

/// The time left for the load in a check with timeout `timeout_s`, less
/// what the check needs around it.
pub(super) fn payload_timeout(ctx: &Context, default: Duration) -> Duration {
    let t = if ctx.options.timeout_s > 0.0 {
        Duration::from_secs_f64(ctx.options.timeout_s)
    } else {
        default
    };
    t.saturating_sub(Duration::from_secs(2))
        .max(Duration::from_secs(1))
}

/// The outcome of a load that gave no figures.
pub(super) fn load_failed(e: &LoadError, what: &str) -> Outcome {
    match e {
        LoadError::TimedOut { .. } => Outcome::fail(
            format!("the {what} load did not finish: {e}"),
            "a GPU that hangs under load is faulty or its driver is wedged: look for Xid errors in \
             `sudo dmesg`; give it longer with --timeout SECS",
        ),
        LoadError::Reported(msg) if msg.contains("is_available") => Outcome::skip(format!(
            "the training Python's torch cannot use CUDA ({msg}); torch.cuda says why"
        )),
        LoadError::Reported(msg) if msg.starts_with("ModuleNotFoundError") => Outcome::skip(
            format!("the training Python has no torch ({msg}); torch.import says so"),
        ),
        _ => Outcome::error(format!("the {what} load gave no figures: {e}")),
    }
}

/// GPU `index`'s readings across every sample, in order.
pub(super) fn readings_of(samples: &[Sample], index: u32) -> Vec<LoadReading> {
    samples
        .iter()
        .filter_map(|s| s.gpus.iter().find(|(i, _)| *i == index))
        .map(|(_, r)| r.clone())
        .collect()
}

/// "1,410-1,980 MHz", "max 700 W of 700", "max 87 °C" from readings.
pub(super) fn readings_summary(readings: &[LoadReading]) -> (String, String, String) {
    use crate::domain::qualify::thousands;
    let clocks: Vec<u32> = readings
        .iter()
        .filter_map(|r| r.sm_clock_mhz.clone().ok())
        .collect();
    let clock = match (clocks.iter().min(), clocks.iter().max()) {
        (Some(lo), Some(hi)) if lo == hi => thousands(*lo),
        (Some(lo), Some(hi)) => format!("{}-{}", thousands(*lo), thousands(*hi)),
        _ => "n/a".into(),
    };
    let power = readings
        .iter()
        .filter_map(|r| r.power_mw.clone().ok())
        .max()
        .map(|p| p / 1000);
    let limit = readings
        .iter()
        .find_map(|r| r.power_limit_mw.clone().ok())
        .map(|l| l / 1000);
    let power = match (power, limit) {
        (Some(p), Some(l)) => format!("{p} / {l}"),
        (Some(p), None) => p.to_string(),
        _ => "n/a".into(),
    };
    let temp = readings
        .iter()
        .filter_map(|r| r.temperature_c.clone().ok())
        .max()
        .map_or_else(|| "n/a".into(), |t| t.to_string());
    (clock, power, temp)
}

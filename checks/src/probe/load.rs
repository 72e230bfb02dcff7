//! Probe: put the GPUs under load with the embedded payload
//! checks/payloads/qualify.py, run in the training Python, and sample NVML
//! every [`SAMPLE_INTERVAL`] while it runs. The payload runs in a process
//! group of its own that dies with this process; at its end, its timeout or
//! an interruption the whole group is killed, so nothing it started stays.
//! Returns plain structs: the payload's figures and the NVML samples.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::probe::nvml::{self, LoadReading};
use crate::probe::process::{self, Ending};
use crate::probe::python::{PayloadError, PayloadFile};

/// The payload, embedded so the binary stays one file.
pub const QUALIFY_PY: &str = include_str!("../../payloads/qualify.py");
/// Prefix of the payload's result line on stdout.
const RESULT_MARK: &str = "GPUCHECK_QUALIFY ";
/// Prefix of the payload's progress lines on stderr.
const STAGE_MARK: &str = "GPUCHECK_QUALIFY_STAGE ";

/// `GPUCHECK_LOAD_DEVICE=cpu` runs the load on the CPU instead of the GPUs:
/// the same payload and judging on a machine without one (gpucheck's tests).
pub const LOAD_DEVICE_ENV: &str = "GPUCHECK_LOAD_DEVICE";

/// How often NVML is read while the load runs: NVML's own power and clock
/// readings refresh about every 100 ms (nvidia-smi's `--loop-ms` floor),
/// so faster sampling only repeats readings.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Where the load runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadDevice {
    Cuda,
    Cpu,
}

impl LoadDevice {
    /// `cpu` when [`LOAD_DEVICE_ENV`] says so, else the GPUs.
    pub fn from_env() -> LoadDevice {
        match crate::seam::env(LOAD_DEVICE_ENV).as_deref() {
            Some("cpu") => LoadDevice::Cpu,
            _ => LoadDevice::Cuda,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LoadDevice::Cuda => "cuda",
            LoadDevice::Cpu => "cpu",
        }
    }
}

/// One NVML reading of every GPU, `at_s` seconds after the load started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub at_s: f64,
    pub gpus: Vec<(u32, LoadReading)>,
}

/// What a load run returned: the payload's document and the samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadRun<T> {
    pub result: T,
    pub samples: Vec<Sample>,
    pub elapsed_s: f64,
}

/// Why a load run gave no figures.
#[derive(Debug, Clone, PartialEq, Error, Serialize, Deserialize)]
pub enum LoadError {
    #[error(transparent)]
    Payload(PayloadError),
    #[error("the load did not finish in {secs:.0} s (last stage: {stage})")]
    TimedOut { secs: f64, stage: String },
    #[error("the load payload ended without a result ({ending}): {tail}")]
    NoResult { ending: String, tail: String },
    #[error("the load payload could not run: {0}")]
    Reported(String),
}

/// What one run of the payload reports on every mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PayloadDoc<G> {
    #[serde(default)]
    pub error: Option<String>,
    /// GPU index (as text) -> its figures.
    #[serde(default = "BTreeMap::new")]
    pub gpus: BTreeMap<String, G>,
    #[serde(default)]
    pub pairs: Vec<PairCopy>,
}

/// One GPU's GEMM figures and its seeded results compared.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ComputeFigures {
    pub error: Option<String>,
    pub name: String,
    pub bf16_tflops: Option<f64>,
    pub tf32_tflops: Option<f64>,
    /// Elements of the small fp32 GEMM outside the bound from float64.
    pub reference_bad: u64,
    pub reference_max_error: f64,
    /// How many other GPUs of its model its seeded bf16 result was
    /// compared with, bit for bit; how many elements differ from the
    /// result most of them share, and the largest difference.
    pub compared_with: u32,
    pub differing_elements: u64,
    pub largest_difference: f64,
}

/// One GPU's bandwidth and pattern-test figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryFigures {
    pub error: Option<String>,
    pub copy_gbps: Option<f64>,
    pub triad_gbps: Option<f64>,
    pub pattern_bytes: u64,
    pub patterns_done: u32,
    pub patterns_planned: u32,
    pub bad_words: u64,
    pub first_bad: Option<BadRange>,
}

/// The first range of device addresses that read back wrong.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BadRange {
    pub pattern: String,
    pub first: u64,
    pub last: u64,
}

/// One ordered pair's copy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PairCopy {
    pub src: u32,
    pub dst: u32,
    pub peer_access: Option<bool>,
    pub gbps: Option<f64>,
    pub error: Option<String>,
}

/// Run the payload in `mode` on `gpus` with `python`, under `timeout`,
/// reading NVML (`nvml_lib`) every [`SAMPLE_INTERVAL`] while it runs;
/// through the boundary, every run its own answer (a figure measured again
/// is a second run), the figures and samples kept as measured.
pub fn run<G: Serialize + DeserializeOwned + Default>(
    python: &Path,
    mode: &str,
    args: &[String],
    gpus: &[u32],
    device: LoadDevice,
    timeout: Duration,
    nvml_lib: Option<&Path>,
) -> Result<LoadRun<PayloadDoc<G>>, LoadError> {
    let ids: Vec<String> = gpus.iter().map(u32::to_string).collect();
    let key = format!("{mode} {} gpus {}", args.join(" "), ids.join(","));
    crate::seam::answer("load::run", &crate::seam::nth(&key), || {
        run_live(python, mode, args, gpus, device, timeout, nvml_lib)
    })
}

fn run_live<G: DeserializeOwned + Default>(
    python: &Path,
    mode: &str,
    args: &[String],
    gpus: &[u32],
    device: LoadDevice,
    timeout: Duration,
    nvml_lib: Option<&Path>,
) -> Result<LoadRun<PayloadDoc<G>>, LoadError> {
    let (_file, child) = spawn(python, mode, args, gpus, device)?;
    let start = Instant::now();
    let samples = RefCell::new(Vec::new());
    let next = RefCell::new(start);
    let seen = process::supervise(
        child,
        timeout,
        || {
            if Instant::now() >= *next.borrow() {
                *next.borrow_mut() += SAMPLE_INTERVAL;
                samples.borrow_mut().extend(sample(nvml_lib, start));
            }
            false
        },
        || {},
    );
    let elapsed_s = start.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&seen.stdout);
    let stderr = String::from_utf8_lossy(&seen.stderr);
    let result = match seen.ending {
        Ending::TimedOut => {
            return Err(LoadError::TimedOut {
                secs: timeout.as_secs_f64(),
                stage: last_stage(&stderr).unwrap_or("start-up").to_string(),
            })
        }
        ending => parse::<G>(&stdout).ok_or_else(|| LoadError::NoResult {
            ending: format!("{ending:?}"),
            tail: process::tail(&stderr, 3),
        })?,
    };
    if let Some(e) = &result.error {
        return Err(LoadError::Reported(e.clone()));
    }
    Ok(LoadRun {
        result,
        samples: samples.into_inner(),
        elapsed_s,
    })
}

/// The payload written out and started in `mode` on `gpus`, in a process
/// group of its own, its stdout and stderr piped; the file lives as long
/// as the value returned.
pub(super) fn spawn(
    python: &Path,
    mode: &str,
    args: &[String],
    gpus: &[u32],
    device: LoadDevice,
) -> Result<(PayloadFile, Child), LoadError> {
    let file = PayloadFile::write("qualify", QUALIFY_PY).map_err(LoadError::Payload)?;
    let ids: Vec<String> = gpus.iter().map(u32::to_string).collect();
    let mut cmd = file.command(python);
    cmd.arg(file.path())
        .arg(mode)
        .args(["--device", device.as_str(), "--gpus", &ids.join(",")])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if device == LoadDevice::Cuda {
        // CUDA ordinals in PCI bus order, which is NVML's index order.
        cmd.env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            .env("CUDA_VISIBLE_DEVICES", ids.join(","));
    }
    process::isolate(&mut cmd);
    crate::probe::stage(&format!("load payload ({mode})"));
    let child = cmd.spawn().map_err(|e| {
        LoadError::Payload(PayloadError::Run(process::RunError::Spawn {
            program: python.display().to_string(),
            reason: e.to_string(),
        }))
    })?;
    Ok((file, child))
}

/// One reading of every GPU; none when NVML is not usable.
pub(super) fn sample(nvml_lib: Option<&Path>, start: Instant) -> Option<Sample> {
    let readings = nvml::load_readings_live(nvml_lib).ok()?;
    Some(Sample {
        at_s: start.elapsed().as_secs_f64(),
        gpus: readings
            .into_iter()
            .filter_map(|g| Some((g.gpu.index, g.facts.ok()?)))
            .collect(),
    })
}

pub(super) fn last_stage(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(STAGE_MARK))
}

/// The payload's result line.
pub fn parse<G: DeserializeOwned>(stdout: &str) -> Option<PayloadDoc<G>> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(RESULT_MARK))?;
    serde_json::from_str(line).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_is_found_among_other_output() {
        let out = "warning: something\nGPUCHECK_QUALIFY {\"gpus\": {\"1\": {\"name\": \"cpu\", \
                   \"bf16_tflops\": 1.5, \"differing_elements\": 3}}}\n";
        let doc: PayloadDoc<ComputeFigures> = parse(out).expect("parsed");
        assert_eq!(doc.gpus["1"].bf16_tflops, Some(1.5));
        assert_eq!(doc.gpus["1"].differing_elements, 3);
        assert!(parse::<ComputeFigures>("no result").is_none());
    }

    #[test]
    fn the_last_stage_names_where_it_was() {
        let err = "GPUCHECK_QUALIFY_STAGE import torch\nGPUCHECK_QUALIFY_STAGE bf16 GEMM\n";
        assert_eq!(last_stage(err), Some("bf16 GEMM"));
    }
}

//! `gpu.compute`: dense GEMMs on every GPU at once through the training
//! Python's torch (the cuBLAS the job uses), in bf16 and in TF32, sampled
//! through NVML while they run; the same seeded GEMM on every GPU compared
//! bit for bit, and a small one against float64 on the CPU.

use std::time::Duration;

use super::under_load::{self, load_failed, readings_of, readings_summary, LoadPlan};
use crate::domain::qualify::{below_siblings, better_of, cause_under_load, span, tflops};
use crate::facts::load::ComputeLoad;
use crate::probe::load::{self, ComputeFigures, LoadDevice, PayloadDoc, Sample};
use crate::probe::nvml::LoadReading;
use crate::{
    Check, Context, DataTable, DeviceResult, Finding, Findings, Isolation, Metric, Outcome,
    Profile, Status,
};

/// Seconds of GEMMs per precision on a GPU: cuBLAS reaches its steady rate
/// within a few hundred milliseconds, and 3 s is 30 NVML samples, enough to
/// see a clock sag or a power cap being reached.
pub const GPU_SECONDS_PER_PRECISION: f64 = 3.0;
/// The same on the CPU standing in for GPUs (tests): the code path, not
/// the figure, is what runs there.
pub const CPU_SECONDS_PER_PRECISION: f64 = 0.25;

/// Below this share of the part's dense bf16 peak a GPU warns: cuBLAS
/// reaches 60-80 % of the datasheet's dense peak on large square bf16
/// GEMMs (H100 SXM 650-750 of 989 TFLOPS in NVIDIA's and PyTorch's
/// published matmul benchmarks); under half is a GPU held down. The TF32
/// GEMM is judged by the same share of the part's dense TF32 peak.
pub const PEAK_FLOOR: f64 = 0.5;

/// The seed of the inputs every GPU multiplies.
const SEED: u64 = 20_260_101;

pub struct Compute;

/// One GPU's figures and what NVML read while it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeGpu {
    pub index: u32,
    pub name: String,
    pub figures: ComputeFigures,
    pub readings: Vec<LoadReading>,
    /// The part's dense bf16 peak (the SKU table); None for a part the
    /// table lacks or a load run on the CPU.
    pub peak_bf16_tflops: Option<f64>,
    /// The part's dense TF32 peak, likewise.
    pub peak_tf32_tflops: Option<f64>,
}

/// What `gpu.compute` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeFacts {
    /// Below this share of its siblings' median a GPU is slow: `SIBLING_FLOOR`,
    /// or `CPU_SIBLING_FLOOR` when the CPU stands in for the GPUs.
    pub sibling_floor: f64,
    pub gpus: Vec<ComputeGpu>,
}

const SLOW_HINT: &str =
    "{gpus} computes slower than the rest and the job waits for it every step: \
see `nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE -i {ids}` under load; check the power limit \
(`nvidia-smi -q -d POWER`), airflow and fans, and look for Xid errors in `sudo dmesg`; if it stays \
slow, drain the node and have the GPU replaced";

const WRONG_HINT: &str =
    "{gpus} returned wrong results without an error (silent data corruption): \
drain the node, run `dcgmi diag -r 3 -i {ids}` and have the GPU replaced if this repeats; no job \
should train on it";

const BELOW_PEAK_HINT: &str = "{gpus} runs GEMMs far below what the part reaches: check the power \
limit (`nvidia-smi -q -d POWER -i {ids}`), application clocks (`nvidia-smi -q -d CLOCK`) and \
cooling";

impl Check for Compute {
    fn id(&self) -> &'static str {
        "gpu.compute"
    }
    fn title(&self) -> &'static str {
        "GEMM throughput and results under load"
    }
    fn profile(&self) -> Profile {
        Profile::Full
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.driver"]
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(90)
    }
    fn explain(&self) -> &'static str {
        "Runs dense square GEMMs (torch.matmul, 8192 x 8192) on every GPU at once through the training Python's torch, so through the cuBLAS the job will use: 3 s in bf16, then 3 s in fp32 with TF32 allowed, and reports the achieved TFLOPS of each GPU in a table. NVML is read every 100 ms while they run: SM clock, power draw against the enforced limit, temperature and the clock event (throttle) reasons.\n\n\
         DDP runs at the speed of its slowest rank, and the GPU that hurts most says nothing at \
         idle: its clocks sag only under load (a power cap, HW slowdown, a failing fan). A GPU \
         below 85% of the median of the GPUs of its model fails, naming it and the cause NVML \
         showed under load (\"power cap 700 W reached at 1,410 MHz\", \"HW slowdown while at \
         87 °C\"); one slow with no visible cause still fails. A GPU below the floor is measured again first and judged on its better run. A GPU below half of its part's \
         dense bf16 peak, or half of its dense TF32 peak, warns (the SKU table; a part, or a \
         precision, without a figure there is judged against its siblings only).\n\n\
         Silent data corruption: every GPU multiplies the same seeded bf16 inputs (2048 x 2048); \
         GPUs of one model running one cuBLAS produce identical bits, so a GPU whose result \
         differs from the one most of them share fails with \"computed wrong results\", the \
         element count and the largest difference. A small fp32 GEMM (512 x 512, TF32 off) is \
         also checked element by element against float64 on the CPU, within n·u·(|A|·|B|) \
         (u = 2^-24, the worst-case bound for a dot product of length n). This catches a GPU \
         that computes wrong in these kernels at this moment; it does not prove a GPU sound: \
         corruption that depends on other kernels, data, temperature or hours of load escapes \
         a few seconds of GEMMs (the burn profile runs longer). With one GPU of a model there \
         is nothing to compare bits with; the float64 reference still runs.\n\n\
         Fixes: a slow GPU with a cause: its power limit (`nvidia-smi -q -d POWER`), cooling, \
         `sudo dmesg` for Xid errors; wrong results: drain the node, `dcgmi diag -r 3`, replace \
         the GPU."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let plan = match under_load::plan(ctx) {
            Ok(p) => p,
            Err(o) => return *o,
        };
        let first = match measure(ctx, &plan) {
            Ok(facts) => facts,
            Err(o) => return *o,
        };
        // A GPU below its siblings is measured again before it fails: a
        // figure can dip for a moment (another tenant's burst, a clock
        // change), a slow GPU stays slow.
        if !any_below_siblings(&first) {
            return judged(&plan, &first);
        }
        match measure(ctx, &plan) {
            Ok(second) => judged(&plan, &best_of(first, second)),
            Err(_) => judged(&plan, &first),
        }
    }
}

/// The verdict, with every GPU's figures published for `fleet.gpu_load`.
fn judged(plan: &LoadPlan, f: &ComputeFacts) -> Outcome {
    let gpus = f.gpus.iter().map(|g| {
        let r = &g.figures;
        (plan.load_gpu(g.index), r.bf16_tflops, r.tf32_tflops)
    });
    evaluate(f).publish(&ComputeLoad::new(plan.device, gpus))
}

/// The GEMM payload's arguments: each precision's seconds and the seed.
pub(super) fn payload_args(device: LoadDevice) -> Vec<String> {
    let seconds = match device {
        LoadDevice::Cuda => GPU_SECONDS_PER_PRECISION,
        LoadDevice::Cpu => CPU_SECONDS_PER_PRECISION,
    };
    vec![
        "--seconds".to_string(),
        seconds.to_string(),
        "--seed".into(),
        SEED.to_string(),
    ]
}

/// Run the GEMM payload on every GPU and gather its figures and readings.
pub(super) fn measure(ctx: &Context, plan: &LoadPlan) -> Result<ComputeFacts, Box<Outcome>> {
    let run = load::run::<ComputeFigures>(
        &plan.python.path,
        "compute",
        &payload_args(plan.device),
        &plan.indices(),
        plan.device,
        under_load::payload_timeout(ctx, self_timeout()),
        ctx.options.nvml_lib.as_deref(),
    )
    .map_err(|e| Box::new(load_failed(&e, "GEMM")))?;
    Ok(facts(plan, &run.result, &run.samples))
}

/// Every planned GPU's figures from one GEMM run, with its NVML readings
/// while the run lasted.
pub(super) fn facts(
    plan: &LoadPlan,
    doc: &PayloadDoc<ComputeFigures>,
    samples: &[Sample],
) -> ComputeFacts {
    let gpus = plan
        .gpus
        .iter()
        .map(|g| {
            let figures = doc
                .gpus
                .get(&g.index.to_string())
                .cloned()
                .unwrap_or_else(|| ComputeFigures {
                    error: Some("the payload reported nothing for it".into()),
                    ..ComputeFigures::default()
                });
            let part = plan.part(g.index);
            ComputeGpu {
                index: g.index,
                name: plan.name(g.index),
                figures,
                readings: readings_of(samples, g.index),
                peak_bf16_tflops: part.and_then(|s| s.bf16_dense_tflops),
                peak_tf32_tflops: part.and_then(|s| s.tf32_dense_tflops),
            }
        })
        .collect();
    ComputeFacts {
        sibling_floor: plan.device.sibling_floor(),
        gpus,
    }
}

/// Whether some GPU's figure is below its siblings' floor.
fn any_below_siblings(f: &ComputeFacts) -> bool {
    let mut findings = Findings::new();
    judge_siblings(f, "bf16", |r| r.bf16_tflops, &mut findings);
    judge_siblings(f, "TF32", |r| r.tf32_tflops, &mut findings);
    !findings.is_empty()
}

/// Each GPU's better figures of two runs, every reading of both, and every
/// wrong result either saw.
fn best_of(first: ComputeFacts, second: ComputeFacts) -> ComputeFacts {
    let gpus = first
        .gpus
        .into_iter()
        .map(|mut g| {
            if let Some(o) = second.gpus.iter().find(|o| o.index == g.index) {
                let (a, b) = (&mut g.figures, &o.figures);
                a.bf16_tflops = better_of(a.bf16_tflops, b.bf16_tflops);
                a.tf32_tflops = better_of(a.tf32_tflops, b.tf32_tflops);
                if b.differing_elements > a.differing_elements {
                    a.differing_elements = b.differing_elements;
                    a.largest_difference = b.largest_difference;
                }
                if b.reference_bad > a.reference_bad {
                    a.reference_bad = b.reference_bad;
                    a.reference_max_error = b.reference_max_error;
                }
                g.readings.extend(o.readings.iter().cloned());
            }
            g
        })
        .collect();
    ComputeFacts {
        sibling_floor: first.sibling_floor,
        gpus,
    }
}

fn self_timeout() -> Duration {
    Compute.timeout()
}

/// Findings for one precision: GPUs far below the median of their model.
fn judge_siblings(
    f: &ComputeFacts,
    precision: &str,
    pick: fn(&ComputeFigures) -> Option<f64>,
    out: &mut Findings,
) {
    for g in &f.gpus {
        let Some(value) = pick(&g.figures) else {
            continue;
        };
        // One slow GPU is slow in both precisions: named once, for bf16.
        let named = |x: &Finding| x.gpu == Some(g.index) && x.hint.as_deref() == Some(SLOW_HINT);
        if out.items.iter().any(named) {
            continue;
        }
        let all: Vec<f64> = f
            .gpus
            .iter()
            .filter(|o| o.name == g.name)
            .filter_map(|o| pick(&o.figures))
            .collect();
        let Some(slow) = below_siblings(value, &all, f.sibling_floor) else {
            continue;
        };
        let cause = cause_under_load(&g.readings).unwrap_or_else(|| {
            "no cause visible under load: clocks, power and temperature normal".into()
        });
        out.push(
            Finding::new(
                Some(g.index),
                Status::Fail,
                format!(
                    "{precision} GEMM {} TFLOPS, {:.0}% of its siblings' median {} ({cause})",
                    tflops(value),
                    slow.percent(),
                    tflops(slow.median)
                ),
            )
            .hint(SLOW_HINT),
        );
    }
}

/// Findings for one GPU's seeded results.
fn judge_results(g: &ComputeGpu, out: &mut Findings) {
    let r = &g.figures;
    if r.differing_elements > 0 {
        out.push(
            Finding::new(
                Some(g.index),
                Status::Fail,
                format!(
                    "computed wrong results: {} of the seeded bf16 GEMM differ from what the \
                     other GPUs computed (largest difference {:.3e})",
                    elements(r.differing_elements),
                    r.largest_difference
                ),
            )
            .hint(WRONG_HINT),
        );
    }
    if r.reference_bad > 0 {
        out.push(
            Finding::new(
                Some(g.index),
                Status::Fail,
                format!(
                    "computed wrong results: {} of an fp32 GEMM outside the rounding bound \
                     from float64 (largest error {:.3e})",
                    elements(r.reference_bad),
                    r.reference_max_error
                ),
            )
            .hint(WRONG_HINT),
        );
    }
}

/// "1 element", "3 elements".
fn elements(n: u64) -> String {
    if n == 1 {
        "1 element".into()
    } else {
        format!("{n} elements")
    }
}

/// Findings for one precision: the GPU far below its part's dense peak
/// (none where the SKU table has no peak for it).
fn judge_peak(
    g: &ComputeGpu,
    precision: &str,
    value: Option<f64>,
    peak: Option<f64>,
    out: &mut Findings,
) {
    let (Some(peak), Some(value)) = (peak, value) else {
        return;
    };
    if value < PEAK_FLOOR * peak {
        let cause = cause_under_load(&g.readings).map_or_else(String::new, |c| format!(" ({c})"));
        out.push(
            Finding::new(
                Some(g.index),
                Status::Warn,
                format!(
                    "{precision} GEMM {} TFLOPS, {:.0}% of the part's dense peak {}{cause}",
                    tflops(value),
                    100.0 * value / peak,
                    tflops(peak)
                ),
            )
            .hint(BELOW_PEAK_HINT),
        );
    }
}

/// Judge the GEMMs.
pub fn evaluate(f: &ComputeFacts) -> Outcome {
    let mut findings = Findings::new();
    for g in &f.gpus {
        if let Some(e) = &g.figures.error {
            findings.push(Finding::new(
                Some(g.index),
                Status::Error,
                format!("the GEMM load failed on it: {e}"),
            ));
        }
        judge_results(g, &mut findings);
        judge_peak(
            g,
            "bf16",
            g.figures.bf16_tflops,
            g.peak_bf16_tflops,
            &mut findings,
        );
        judge_peak(
            g,
            "TF32",
            g.figures.tf32_tflops,
            g.peak_tf32_tflops,
            &mut findings,
        );
    }
    judge_siblings(f, "bf16", |r| r.bf16_tflops, &mut findings);
    judge_siblings(f, "TF32", |r| r.tf32_tflops, &mut findings);
    let devices = f.gpus.iter().map(|g| device_row(g, &findings)).collect();
    let bf16: Vec<f64> = f
        .gpus
        .iter()
        .filter_map(|g| g.figures.bf16_tflops)
        .collect();
    let compared = f.gpus.iter().any(|g| g.figures.compared_with > 0);
    let pass = format!(
        "bf16 GEMM on {} GPU{}: {}; results {}",
        f.gpus.len(),
        if f.gpus.len() == 1 { "" } else { "s" },
        span(&bf16, tflops, "TFLOPS"),
        if compared {
            "bit-identical across GPUs and within bounds of float64"
        } else {
            "within bounds of float64"
        }
    );
    findings.conclude(pass, devices).with_table(table(f))
}

fn device_row(g: &ComputeGpu, findings: &Findings) -> DeviceResult {
    let mut metrics = Vec::new();
    if let Some(v) = g.figures.bf16_tflops {
        metrics.push(Metric::new("bf16_tflops", v, "TFLOPS"));
    }
    if let Some(v) = g.figures.tf32_tflops {
        metrics.push(Metric::new("tf32_tflops", v, "TFLOPS"));
    }
    if let Some(c) = g
        .readings
        .iter()
        .filter_map(|r| r.sm_clock_mhz.clone().ok())
        .min()
    {
        metrics.push(Metric::new("sm_clock_min_mhz", f64::from(c), "MHz"));
    }
    let row = DeviceResult {
        index: g.index,
        label: None,
        name: g.name.clone(),
        uuid: None,
        status: Status::Pass,
        summary: String::new(),
        metrics,
    };
    let ok = g.figures.bf16_tflops.map_or_else(
        || "no figure".into(),
        |v| format!("bf16 {} TFLOPS", tflops(v)),
    );
    findings.device_result(row, ok)
}

fn table(f: &ComputeFacts) -> DataTable {
    let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), tflops);
    let rows = f
        .gpus
        .iter()
        .map(|g| {
            let (clock, power, temp) = readings_summary(&g.readings);
            let bits = if g.figures.error.is_some() {
                "-".to_string()
            } else if g.figures.differing_elements + g.figures.reference_bad > 0 {
                "WRONG".into()
            } else {
                "ok".into()
            };
            vec![
                g.index.to_string(),
                opt(g.figures.bf16_tflops),
                opt(g.figures.tf32_tflops),
                clock,
                power,
                temp,
                bits,
            ]
        })
        .collect();
    DataTable {
        title: "GEMM under load".into(),
        header: [
            "GPU",
            "bf16 TFLOPS",
            "TF32 TFLOPS",
            "SM MHz",
            "max W / limit",
            "max °C",
            "results",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        legend: Some("NVML read every 100 ms while the GEMMs ran".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::qualify::SIBLING_FLOOR;
    use crate::probe::nvml::reason;

    fn reading(clock: u32, power_w: u32, temp: u32, reasons: u64) -> LoadReading {
        LoadReading {
            sm_clock_mhz: Ok(clock),
            power_mw: Ok(power_w * 1000),
            power_limit_mw: Ok(700_000),
            temperature_c: Ok(temp),
            throttle_reasons: Ok(reasons),
            memory_free_bytes: Ok(80 << 30),
        }
    }

    fn gpu(index: u32, bf16: f64, readings: Vec<LoadReading>) -> ComputeGpu {
        ComputeGpu {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            figures: ComputeFigures {
                name: "NVIDIA H100 80GB HBM3".into(),
                bf16_tflops: Some(bf16),
                tf32_tflops: Some(bf16 / 2.0),
                compared_with: 7,
                ..ComputeFigures::default()
            },
            readings,
            peak_bf16_tflops: Some(989.0),
            peak_tf32_tflops: Some(494.7),
        }
    }

    fn eight(slow: Option<(u32, f64, Vec<LoadReading>)>) -> ComputeFacts {
        let steady = vec![reading(1980, 600, 60, 0); 3];
        let mut gpus: Vec<ComputeGpu> = (0..8)
            .map(|i| gpu(i, 700.0 + f64::from(i), steady.clone()))
            .collect();
        if let Some((i, v, r)) = slow {
            gpus[i as usize] = gpu(i, v, r);
        }
        ComputeFacts {
            sibling_floor: SIBLING_FLOOR,
            gpus,
        }
    }

    #[test]
    fn eight_even_gpus_pass_with_their_range() {
        let o = evaluate(&eight(None));
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert_eq!(
            o.summary,
            "bf16 GEMM on 8 GPUs: 700-707 TFLOPS; results bit-identical across GPUs and within bounds of float64"
        );
        assert_eq!(o.tables[0].rows.len(), 8);
    }

    #[test]
    fn a_power_capped_slow_gpu_fails_naming_the_cap() {
        let capped = vec![
            reading(1980, 500, 60, 0),
            reading(1410, 700, 66, reason::SW_POWER_CAP),
        ];
        let o = evaluate(&eight(Some((3, 480.0, capped))));
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert!(
            o.summary.starts_with(
                "GPU 3: bf16 GEMM 480 TFLOPS, 68% of its siblings' median 703 (power cap 700 W reached at 1,410 MHz)"
            ),
            "{}",
            o.summary
        );
        assert!(
            o.hint
                .as_deref()
                .unwrap_or("")
                .starts_with("GPU 3 computes slower"),
            "{o:?}"
        );
        assert_eq!(o.devices[3].status, Status::Fail);
        assert_eq!(o.devices[2].status, Status::Pass);
    }

    #[test]
    fn a_slow_gpu_without_a_visible_cause_still_fails() {
        let o = evaluate(&eight(Some((5, 400.0, vec![reading(1980, 400, 55, 0)]))));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("no cause visible under load"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn a_gpu_that_computes_wrong_fails_with_the_count_and_largest_difference() {
        let mut f = eight(None);
        f.gpus[6].figures.differing_elements = 3;
        f.gpus[6].figures.largest_difference = 0.5;
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 6: computed wrong results: 3 elements of the seeded bf16 GEMM differ from what the \
             other GPUs computed (largest difference 5.000e-1)"
        );
        assert!(o
            .hint
            .as_deref()
            .unwrap_or("")
            .contains("silent data corruption"));
        assert_eq!(o.tables[0].rows[6][6], "WRONG");
    }

    #[test]
    fn an_error_beyond_the_float64_bound_fails() {
        let mut f = eight(None);
        f.gpus[0].figures.reference_bad = 1;
        f.gpus[0].figures.reference_max_error = 1.0;
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("outside the rounding bound from float64"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn all_gpus_far_below_the_peak_warn_against_the_sku() {
        let capped = vec![reading(1100, 400, 60, 0)];
        let gpus = (0..2).map(|i| gpu(i, 300.0, capped.clone())).collect();
        let o = evaluate(&ComputeFacts {
            sibling_floor: SIBLING_FLOOR,
            gpus,
        });
        assert_eq!(o.status, Status::Warn, "{o:?}");
        assert!(
            o.summary.contains("30% of the part's dense peak 989"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn an_unknown_part_is_judged_against_its_siblings_only() {
        let mut f = eight(None);
        for g in &mut f.gpus {
            g.peak_bf16_tflops = None;
            g.peak_tf32_tflops = None;
            g.figures.bf16_tflops = Some(100.0);
            g.figures.tf32_tflops = Some(50.0);
        }
        assert_eq!(evaluate(&f).status, Status::Pass);
    }

    #[test]
    fn a_tf32_figure_far_below_the_peak_warns_naming_tf32_and_the_peak() {
        let mut f = eight(None);
        for g in &mut f.gpus {
            g.figures.tf32_tflops = Some(150.0);
        }
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Warn, "{o:?}");
        assert!(
            o.summary
                .contains("TF32 GEMM 150 TFLOPS, 30% of the part's dense peak 495"),
            "{}",
            o.summary
        );
        assert!(!o.summary.contains("bf16 GEMM"), "{}", o.summary);
        assert!(
            o.hint
                .as_deref()
                .unwrap_or("")
                .contains("runs GEMMs far below what the part reaches"),
            "{o:?}"
        );
        assert_eq!(o.devices[0].status, Status::Warn);
    }

    #[test]
    fn without_a_tf32_peak_the_tf32_figure_is_judged_against_siblings_only() {
        let mut f = eight(None);
        for g in &mut f.gpus {
            g.peak_tf32_tflops = None;
            g.figures.tf32_tflops = Some(150.0);
        }
        // Far below any TF32 peak, but even across the GPUs: nothing to say.
        assert_eq!(evaluate(&f).status, Status::Pass);
        // One far below its siblings fails in the siblings' wording.
        f.gpus[2].figures.tf32_tflops = Some(75.0);
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert!(
            o.summary
                .starts_with("GPU 2: TF32 GEMM 75 TFLOPS, 50% of its siblings' median 150"),
            "{}",
            o.summary
        );
        assert!(!o.summary.contains("dense peak"), "{}", o.summary);
    }

    #[test]
    fn a_gpu_the_load_failed_on_is_an_error() {
        let mut f = eight(None);
        f.gpus[1].figures = ComputeFigures {
            error: Some("RuntimeError: CUDA error: an illegal memory access".into()),
            ..ComputeFigures::default()
        };
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Error);
        assert!(o.summary.contains("illegal memory access"));
    }
}

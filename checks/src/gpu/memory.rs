//! `gpu.memory`: device-memory bandwidth of every GPU (a copy and a triad
//! over a buffer far larger than L2) judged against its siblings and its
//! part's HBM figure, and a pattern test (walking ones and zeros,
//! address-in-address, seeded random: write, read back, compare) over most
//! of the memory NVML says is free, in a bounded time. A GPU another
//! process uses gets no pattern test: the memory is the job's.

use std::time::Duration;

use super::under_load::{self, load_failed, readings_of, readings_summary, LoadPlan};
use crate::domain::qualify::{
    below_siblings, better_of, cause_under_load, memory_gbps as gbps, span,
};
use crate::facts::load::MemoryLoad;
use crate::probe::load::{self, LoadDevice, MemoryFigures, PayloadDoc, Sample};
use crate::probe::nvml::{self, LoadReading};
use crate::{
    Check, Context, DataTable, DeviceResult, Finding, Findings, Isolation, Metric, Outcome,
    Profile, Status,
};

/// Seconds of load per GPU: a third for the copy and triad, the rest for
/// the patterns. 18 patterns over 80 GB at 3 TB/s take about 2 s, so 4 s
/// covers them on a Hopper part with room; a slower part tests fewer
/// patterns and says how many.
pub const GPU_SECONDS: f64 = 6.0;
/// The same on the CPU standing in for GPUs (tests).
pub const CPU_SECONDS: f64 = 1.5;

/// Share of the free memory the pattern test takes: the payload's own
/// CUDA context, cuBLAS workspace and the compare temporaries (a 128 MiB
/// slice at a time) need the rest.
pub const PATTERN_SHARE: f64 = 0.85;
/// Kept free besides, bytes: the CUDA context and torch's allocator
/// (about 500 MiB on Hopper, `nvidia-smi` of an idle torch process).
pub const PATTERN_RESERVE: u64 = 1 << 30;

/// Below this share of the part's peak HBM bandwidth a GPU warns: STREAM
/// triads through torch reach 80-90 % of the datasheet figure on A100 and
/// H100 (NVIDIA's and the BabelStream authors' published runs); under 60 %
/// is HBM held down.
pub const PEAK_FLOOR: f64 = 0.6;

const SEED: u64 = 20_260_102;

pub struct Memory;

/// One GPU's figures, readings and what was planned for it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryGpu {
    pub index: u32,
    pub name: String,
    pub figures: MemoryFigures,
    pub readings: Vec<LoadReading>,
    /// The part's peak memory bandwidth, GB/s (None: unknown part, or CPU).
    pub peak_gbps: Option<f64>,
    /// Why it had no pattern test (another process uses it), if so.
    pub busy: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemoryFacts {
    /// Below this share of its siblings' median a GPU is slow: `SIBLING_FLOOR`,
    /// or `CPU_SIBLING_FLOOR` when the CPU stands in for the GPUs.
    pub sibling_floor: f64,
    pub gpus: Vec<MemoryGpu>,
}

const SLOW_HINT: &str = "{gpus} moves memory slower than the rest and the job waits for it: see \
`nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE -i {ids}` under load (memory clock, HW slowdown), \
check cooling, and look for Xid errors in `sudo dmesg`; if it stays slow, have the GPU replaced";

const BAD_HINT: &str = "{gpus} read back memory that was not what was written: drain the node, \
check `nvidia-smi -q -d ECC,ROW_REMAPPER -i {ids}` and run `dcgmi diag -r 3 -i {ids}`; have the GPU \
replaced if it repeats";

const BELOW_PEAK_HINT: &str =
    "{gpus} reaches far less memory bandwidth than the part should: check \
the memory clock (`nvidia-smi -q -d CLOCK -i {ids}`), the power limit and cooling";

impl Check for Memory {
    fn id(&self) -> &'static str {
        "gpu.memory"
    }
    fn title(&self) -> &'static str {
        "Device memory bandwidth and patterns"
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
        "Measures device-memory bandwidth on every GPU at once through the training Python's torch: a copy and a triad (a = b + 3c) over 1 GiB buffers, far past L2, for 2 s; then a pattern test over 85% of the memory NVML says is free, less 1 GiB for the CUDA context (never more than is free): walking ones and zeros, every word holding its own index (address-in-address) and seeded random values, each written, read back and compared, for at most 4 s, reporting the first bad address range and the count of bad words. NVML is read every 100 ms meanwhile.\n\n\
         A GPU whose HBM is slower than its siblings' (memory clock held down, HW slowdown) makes \
         every DDP step wait for it; a word that reads back wrong is memory that will corrupt \
         training silently if ECC does not catch it. A GPU below 85% of its siblings' median \
         triad fails (measured again first, judged on its better run), naming it and the cause NVML showed under load; below 60% of its part's \
         HBM figure (the SKU table) warns; any bad word fails.\n\n\
         A GPU that another process uses (NVML lists a compute process on it) gets the \
         bandwidth figures but no pattern test, and the report says so: its memory belongs to \
         that job. The pattern test covers the memory free at that moment, not what the driver \
         or other processes hold, and the patterns that fit in the time bound (the report says \
         how many). Fixes: `nvidia-smi -q -d ECC,ROW_REMAPPER`, `dcgmi diag -r 3`, cooling, or \
         replacing the GPU."
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
        // Measured again before a GPU fails against its siblings.
        let mut below = Findings::new();
        judge_siblings(&first, &mut below);
        if below.is_empty() {
            return judged(&plan, &first);
        }
        match measure(ctx, &plan) {
            Ok(second) => judged(&plan, &best_of(first, second)),
            Err(_) => judged(&plan, &first),
        }
    }
}

/// The verdict, with every GPU's figures published for `fleet.gpu_load`.
fn judged(plan: &LoadPlan, f: &MemoryFacts) -> Outcome {
    let gpus = f.gpus.iter().map(|g| {
        let r = &g.figures;
        (plan.load_gpu(g.index), r.copy_gbps, r.triad_gbps)
    });
    evaluate(f).publish(&MemoryLoad::new(plan.device, gpus))
}

/// A GPU's index, the bytes its pattern test may take, and why it has
/// none when another process uses the GPU.
pub(super) type PatternSize = (u32, u64, Option<String>);

/// How many bytes the pattern test may take on each GPU, and which GPUs
/// are busy: from NVML's free memory and process list now.
pub(super) fn pattern_plan(ctx: &Context, plan: &LoadPlan) -> Vec<PatternSize> {
    let lib = ctx.options.nvml_lib.as_deref();
    let free = nvml::load_readings(lib).unwrap_or_default();
    let procs = nvml::processes(lib).unwrap_or_default();
    plan.gpus
        .iter()
        .map(|g| {
            let free_bytes = free
                .iter()
                .find(|r| r.gpu.index == g.index)
                .and_then(|r| r.facts.as_ref().ok()?.memory_free_bytes.clone().ok())
                .unwrap_or(0);
            let users = procs
                .iter()
                .find(|p| p.gpu.index == g.index)
                .and_then(|p| p.facts.as_ref().ok()?.processes.clone().ok())
                .map_or(0, |list| list.iter().filter(|p| !p.graphics).count());
            let busy = (users > 0).then(|| {
                format!(
                    "no pattern test: {users} other process{} use{} it",
                    if users == 1 { "" } else { "es" },
                    if users == 1 { "s" } else { "" }
                )
            });
            (g.index, pattern_bytes(free_bytes, busy.is_some()), busy)
        })
        .collect()
}

/// The pattern test's size: [`PATTERN_SHARE`] of the free memory less
/// [`PATTERN_RESERVE`], never above what is free; none on a busy GPU.
pub fn pattern_bytes(free: u64, busy: bool) -> u64 {
    if busy {
        return 0;
    }
    let share = (free as f64 * PATTERN_SHARE) as u64;
    share.min(free.saturating_sub(PATTERN_RESERVE))
}

/// The memory payload's seconds for `device`.
fn seconds(device: LoadDevice) -> f64 {
    match device {
        LoadDevice::Cuda => GPU_SECONDS,
        LoadDevice::Cpu => CPU_SECONDS,
    }
}

/// The memory payload's arguments: its seconds, the seed and each GPU's
/// pattern-test bytes.
fn payload_args(device: LoadDevice, sizes: &[PatternSize]) -> Vec<String> {
    vec![
        "--seconds".to_string(),
        seconds(device).to_string(),
        "--seed".into(),
        SEED.to_string(),
        "--pattern-bytes".into(),
        pattern_bytes_arg(sizes),
    ]
}

/// The burn's arguments for its memory rounds: their seconds and each
/// GPU's pattern-test bytes (the burn's own --seconds and --seed are the
/// GEMMs').
pub(super) fn burn_args(device: LoadDevice, sizes: &[PatternSize]) -> Vec<String> {
    vec![
        "--memory-seconds".to_string(),
        seconds(device).to_string(),
        "--pattern-bytes".into(),
        pattern_bytes_arg(sizes),
    ]
}

/// "0:BYTES,1:BYTES", as the payload reads --pattern-bytes.
fn pattern_bytes_arg(sizes: &[PatternSize]) -> String {
    let bytes: Vec<String> = sizes.iter().map(|(i, b, _)| format!("{i}:{b}")).collect();
    bytes.join(",")
}

pub(super) fn measure(ctx: &Context, plan: &LoadPlan) -> Result<MemoryFacts, Box<Outcome>> {
    let sizes = pattern_plan(ctx, plan);
    let run = load::run::<MemoryFigures>(
        &plan.python.path,
        "memory",
        &payload_args(plan.device, &sizes),
        &plan.indices(),
        plan.device,
        under_load::payload_timeout(ctx, Memory.timeout()),
        ctx.options.nvml_lib.as_deref(),
    )
    .map_err(|e| Box::new(load_failed(&e, "memory")))?;
    Ok(facts(plan, &run.result, &run.samples, &sizes))
}

/// Every planned GPU's figures from one memory run (`sizes` as planned for
/// it), with its NVML readings while the run lasted.
pub(super) fn facts(
    plan: &LoadPlan,
    doc: &PayloadDoc<MemoryFigures>,
    samples: &[Sample],
    sizes: &[PatternSize],
) -> MemoryFacts {
    let gpus = plan
        .gpus
        .iter()
        .zip(sizes)
        .map(|(g, (_, _, busy))| MemoryGpu {
            index: g.index,
            name: plan.name(g.index),
            figures: doc
                .gpus
                .get(&g.index.to_string())
                .cloned()
                .unwrap_or_else(|| MemoryFigures {
                    error: Some("the payload reported nothing for it".into()),
                    ..MemoryFigures::default()
                }),
            readings: readings_of(samples, g.index),
            peak_gbps: plan.part(g.index).and_then(|s| s.memory_bandwidth_gbps),
            busy: busy.clone(),
        })
        .collect();
    MemoryFacts {
        sibling_floor: plan.device.sibling_floor(),
        gpus,
    }
}

/// Each GPU's better bandwidth of two runs, every reading of both, and the
/// bad words of both.
fn best_of(first: MemoryFacts, second: MemoryFacts) -> MemoryFacts {
    let gpus = first
        .gpus
        .into_iter()
        .map(|mut g| {
            if let Some(o) = second.gpus.iter().find(|o| o.index == g.index) {
                let (a, b) = (&mut g.figures, &o.figures);
                a.copy_gbps = better_of(a.copy_gbps, b.copy_gbps);
                a.triad_gbps = better_of(a.triad_gbps, b.triad_gbps);
                if a.bad_words == 0 {
                    a.bad_words = b.bad_words;
                    a.first_bad = b.first_bad.clone();
                }
                g.readings.extend(o.readings.iter().cloned());
            }
            g
        })
        .collect();
    MemoryFacts {
        sibling_floor: first.sibling_floor,
        gpus,
    }
}

fn judge_siblings(f: &MemoryFacts, out: &mut Findings) {
    for g in &f.gpus {
        let Some(value) = g.figures.triad_gbps else {
            continue;
        };
        let all: Vec<f64> = f
            .gpus
            .iter()
            .filter(|o| o.name == g.name)
            .filter_map(|o| o.figures.triad_gbps)
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
                    "memory triad {} GB/s, {:.0}% of its siblings' median {} ({cause})",
                    gbps(value),
                    slow.percent(),
                    gbps(slow.median)
                ),
            )
            .hint(SLOW_HINT),
        );
    }
}

fn judge_gpu(g: &MemoryGpu, out: &mut Findings) {
    let r = &g.figures;
    if let Some(e) = &r.error {
        out.push(Finding::new(
            Some(g.index),
            Status::Error,
            format!("the memory load failed on it: {e}"),
        ));
        return;
    }
    if r.bad_words > 0 {
        let range = r.first_bad.as_ref().map_or_else(String::new, |b| {
            format!(
                "; first bad range 0x{:x}-0x{:x} under {}",
                b.first, b.last, b.pattern
            )
        });
        out.push(
            Finding::new(
                Some(g.index),
                Status::Fail,
                format!(
                    "{} word{} of device memory read back wrong{range}",
                    r.bad_words,
                    if r.bad_words == 1 { "" } else { "s" }
                ),
            )
            .hint(BAD_HINT),
        );
    }
    if let Some(busy) = &g.busy {
        out.push(Finding::new(Some(g.index), Status::Pass, busy.clone()));
    } else if r.patterns_planned > 0 && r.patterns_done < r.patterns_planned {
        out.push(Finding::new(
            Some(g.index),
            Status::Pass,
            format!(
                "{} of {} patterns in the time bound",
                r.patterns_done, r.patterns_planned
            ),
        ));
    }
    if let (Some(peak), Some(triad)) = (g.peak_gbps, r.triad_gbps) {
        if triad < PEAK_FLOOR * peak {
            out.push(
                Finding::new(
                    Some(g.index),
                    Status::Warn,
                    format!(
                        "memory triad {} GB/s, {:.0}% of the part's {} GB/s",
                        gbps(triad),
                        100.0 * triad / peak,
                        gbps(peak)
                    ),
                )
                .hint(BELOW_PEAK_HINT),
            );
        }
    }
}

/// Judge the bandwidth and pattern figures.
pub fn evaluate(f: &MemoryFacts) -> Outcome {
    let mut findings = Findings::new();
    for g in &f.gpus {
        judge_gpu(g, &mut findings);
    }
    judge_siblings(f, &mut findings);
    let devices = f.gpus.iter().map(|g| device_row(g, &findings)).collect();
    let tested: u64 = f.gpus.iter().map(|g| g.figures.pattern_bytes).sum();
    let triads: Vec<f64> = f.gpus.iter().filter_map(|g| g.figures.triad_gbps).collect();
    let pass = format!(
        "memory on {} GPU{}: triad {}; {} pattern-tested, no bad word",
        f.gpus.len(),
        if f.gpus.len() == 1 { "" } else { "s" },
        span(&triads, gbps, "GB/s"),
        size(tested)
    );
    findings.conclude(pass, devices).with_table(table(f))
}

/// "68 GiB", "32 MiB".
fn size(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        format!("{} GiB", (bytes as f64 / GIB as f64).round())
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

fn device_row(g: &MemoryGpu, findings: &Findings) -> DeviceResult {
    let mut metrics = Vec::new();
    if let Some(v) = g.figures.copy_gbps {
        metrics.push(Metric::new("copy_gbps", v, "GB/s"));
    }
    if let Some(v) = g.figures.triad_gbps {
        metrics.push(Metric::new("triad_gbps", v, "GB/s"));
    }
    metrics.push(Metric::new(
        "pattern_bytes",
        g.figures.pattern_bytes as f64,
        "B",
    ));
    metrics.push(Metric::new(
        "bad_words",
        g.figures.bad_words as f64,
        "count",
    ));
    let row = DeviceResult {
        index: g.index,
        label: None,
        name: g.name.clone(),
        uuid: None,
        status: Status::Pass,
        summary: String::new(),
        metrics,
    };
    let ok = g
        .figures
        .triad_gbps
        .map_or_else(|| "no figure".into(), |v| format!("triad {} GB/s", gbps(v)));
    findings.device_result(row, ok)
}

fn table(f: &MemoryFacts) -> DataTable {
    let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), gbps);
    let rows = f
        .gpus
        .iter()
        .map(|g| {
            let (clock, _, temp) = readings_summary(&g.readings);
            let r = &g.figures;
            let patterns = if g.busy.is_some() {
                "busy".to_string()
            } else {
                format!(
                    "{}, {}/{}",
                    size(r.pattern_bytes),
                    r.patterns_done,
                    r.patterns_planned
                )
            };
            vec![
                g.index.to_string(),
                opt(r.copy_gbps),
                opt(r.triad_gbps),
                patterns,
                r.bad_words.to_string(),
                clock,
                temp,
            ]
        })
        .collect();
    DataTable {
        title: "Device memory under load".into(),
        header: [
            "GPU",
            "copy GB/s",
            "triad GB/s",
            "patterns",
            "bad words",
            "SM MHz",
            "max °C",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        legend: Some(
            "copy counts bytes read + written; patterns: size tested, patterns done/planned".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::qualify::SIBLING_FLOOR;
    use crate::probe::load::BadRange;
    use crate::probe::nvml::reason;

    fn reading(temp: u32, reasons: u64) -> LoadReading {
        LoadReading {
            sm_clock_mhz: Ok(1980),
            power_mw: Ok(400_000),
            power_limit_mw: Ok(700_000),
            temperature_c: Ok(temp),
            throttle_reasons: Ok(reasons),
            memory_free_bytes: Ok(80 << 30),
        }
    }

    fn gpu(index: u32, triad: f64) -> MemoryGpu {
        MemoryGpu {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            figures: MemoryFigures {
                copy_gbps: Some(triad * 0.95),
                triad_gbps: Some(triad),
                pattern_bytes: 68 << 30,
                patterns_done: 18,
                patterns_planned: 18,
                ..MemoryFigures::default()
            },
            readings: vec![reading(60, 0)],
            peak_gbps: Some(3350.0),
            busy: None,
        }
    }

    fn four() -> MemoryFacts {
        MemoryFacts {
            sibling_floor: SIBLING_FLOOR,
            gpus: (0..4)
                .map(|i| gpu(i, 2900.0 + 10.0 * f64::from(i)))
                .collect(),
        }
    }

    #[test]
    fn even_gpus_pass_with_the_tested_size() {
        let o = evaluate(&four());
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert_eq!(
            o.summary,
            "memory on 4 GPUs: triad 2,900-2,930 GB/s; 272 GiB pattern-tested, no bad word"
        );
    }

    #[test]
    fn slow_hbm_fails_naming_the_gpu_and_the_slowdown() {
        let mut f = four();
        f.gpus[2].figures.triad_gbps = Some(1500.0);
        f.gpus[2].readings = vec![reading(70, 0), reading(88, reason::HW_SLOWDOWN)];
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 2: memory triad 1,500 GB/s, 52% of its siblings' median 2,905 (HW slowdown while at 88 °C)"
        );
    }

    #[test]
    fn a_bad_word_fails_with_its_range() {
        let mut f = four();
        f.gpus[1].figures.bad_words = 2;
        f.gpus[1].figures.first_bad = Some(BadRange {
            pattern: "address in address".into(),
            first: 0x7f00_0000_1000,
            last: 0x7f00_0000_1007,
        });
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: 2 words of device memory read back wrong; first bad range \
             0x7f0000001000-0x7f0000001007 under address in address"
        );
        assert!(o.hint.unwrap_or_default().contains("ROW_REMAPPER"));
    }

    #[test]
    fn a_busy_gpu_gets_no_pattern_test_and_says_so() {
        let mut f = four();
        f.gpus[3].busy = Some("no pattern test: 1 other process uses it".into());
        f.gpus[3].figures.pattern_bytes = 0;
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.devices[3].summary,
            "triad 2,930 GB/s (no pattern test: 1 other process uses it)"
        );
        assert_eq!(o.tables[0].rows[3][3], "busy");
    }

    #[test]
    fn all_far_below_the_parts_figure_warn() {
        let f = MemoryFacts {
            sibling_floor: SIBLING_FLOOR,
            gpus: (0..2).map(|i| gpu(i, 1200.0)).collect(),
        };
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("36% of the part's 3,350 GB/s"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn the_pattern_size_never_exceeds_free_memory() {
        assert_eq!(pattern_bytes(80 << 30, false), (80u64 << 30) * 85 / 100);
        assert_eq!(pattern_bytes(2 << 30, false), 1 << 30);
        assert_eq!(pattern_bytes(512 << 20, false), 0);
        assert_eq!(pattern_bytes(80 << 30, true), 0);
    }
}

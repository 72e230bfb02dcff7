//! `gpu.burn` (`--profile burn --duration 10m`): the gpu.compute and
//! gpu.memory loads in rounds for the whole duration, in one load process
//! (probe::burn), NVML sampled throughout; names the GPU whose throughput,
//! clocks or temperature degrade over time, that computes wrong in any
//! round, or that logs an Xid during the burn.

use std::time::Duration;

use super::compute::{self, ComputeFacts};
use super::memory::{self, MemoryFacts};
use super::under_load::{self, load_failed};
use crate::domain::qualify::{
    degraded_below, median, temperature_climbing, thousands, CPU_SIBLING_FLOOR, DEGRADED_SHARE,
};
use crate::domain::xid::PciSlot;
use crate::facts::load::{ComputeLoad, LoadGpu, MemoryLoad};
use crate::probe::burn::BurnLoad;
use crate::probe::kernel_log::{self, XidEvent};
use crate::probe::load::{LoadDevice, LoadError};
use crate::{Check, Context, DataTable, Finding, Findings, Isolation, Outcome, Profile, Status};

/// The burn's length without `--duration`: DCGM's long diagnostic
/// (`dcgmi diag -r 3`) runs 10-15 minutes.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(600);
/// The longest burn: a day.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Each round gets this long before the load counts as hung (the first
/// includes the payload's start: torch's import and CUDA's on every GPU).
const ROUND_TIMEOUT: Duration = Duration::from_secs(90);
/// How long reading the kernel log may take (journalctl on a busy host).
const KERNEL_LOG_WAIT: Duration = Duration::from_secs(5);

pub struct Burn;

/// One GPU's figures in one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundGpu {
    pub index: u32,
    pub bf16_tflops: Option<f64>,
    pub triad_gbps: Option<f64>,
    pub min_clock_mhz: Option<u32>,
    pub max_temp_c: Option<u32>,
    /// Elements that differed from the other GPUs or from float64.
    pub wrong_elements: u64,
    pub bad_words: u64,
}

/// One round: when it ended, seconds into the burn, and every GPU's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub at_s: f64,
    pub gpus: Vec<RoundGpu>,
}

/// What `gpu.burn` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct BurnFacts {
    pub planned_s: f64,
    pub ran_s: f64,
    pub rounds: Vec<Round>,
    /// Xid events the kernel logged during the burn, with the GPU (NVML
    /// index) they name when known.
    pub new_xids: Vec<(Option<u32>, XidEvent)>,
    /// Why the burn stopped before its time, if it did.
    pub stopped: Option<String>,
    /// Below this share of its first third a figure degraded:
    /// [`DEGRADED_SHARE`], or [`CPU_SIBLING_FLOOR`] on the CPU.
    pub degraded_share: f64,
}

const DEGRADED_HINT: &str = "{gpus} slows down the longer it runs: watch `nvidia-smi -q -d \
PERFORMANCE,TEMPERATURE,POWER -i {ids} -l 1` under load, check airflow, fans and the inlet \
temperature, and have the GPU or its cooling serviced; a job on it will slow down the same way";

const WRONG_HINT: &str = "{gpus} returned wrong results during the burn (silent data corruption): \
drain the node, run `dcgmi diag -r 3 -i {ids}` and have the GPU replaced";

const STOPPED_HINT: &str =
    "the load stopped before the burn's end: a round that hangs means a GPU \
that hangs under load or a wedged driver; look for Xid errors in `sudo dmesg`, run the burn \
again, and drain the node if it stops again";

const XID_HINT: &str = "{gpus} logged an Xid under load: look it up in `sudo dmesg | grep -i xid` \
(NVIDIA's Xid catalog says what each means) and drain the node until it is understood";

impl Check for Burn {
    fn id(&self) -> &'static str {
        "gpu.burn"
    }
    fn title(&self) -> &'static str {
        "Burn-in under sustained load"
    }
    fn profile(&self) -> Profile {
        Profile::Burn
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.driver"]
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    /// The longest burn and a round's margin; the burn ends itself at its
    /// --duration, and every round's load has its own timeout.
    fn timeout(&self) -> Duration {
        MAX_DURATION + 3 * ROUND_TIMEOUT
    }
    fn explain(&self) -> &'static str {
        "Selected by --profile burn (after the quick checks): repeats the gpu.compute load (bf16 and TF32 GEMMs, the seeded results compared between GPUs and against float64) and the gpu.memory load (copy, triad, patterns) in rounds for --duration (default 10m, at most 24h), NVML sampled every 100 ms throughout, and reports every round's figures per GPU in a table. One load process runs every round, so the GPUs do not idle between rounds while Python and CUDA start again; a round that does not end within 90 s is a hung load.\n\n\
         Some GPUs pass a minute of load and fail after ten: cooling that cannot keep up, a \
         power stage that overheats, memory that errs only when hot. A GPU fails when its bf16 \
         TFLOPS, memory triad or lowest SM clock in the last third of the rounds averages below \
         90% of the first third, when it computes wrong or reads back a bad word in any round, \
         or when the kernel logs an Xid for it during the burn; it warns when its temperature \
         climbs by more than 15 °C and ends above 80 °C. Fewer than three rounds say nothing \
         about degradation, and the report says so.\n\n\
         On a terminal the progress line shows the round, the time done and left, and each \
         GPU's bf16 TFLOPS in the round before (never in a report). Interrupting the burn \
         (Ctrl-C) ends it at once and kills its load; the report then shows the rounds that \
         had finished: gpu.burn fails if they found a fault, else it has no verdict (error). \
         Fixes: cooling (airflow, fans, inlet temperature), the power limit, `dcgmi diag -r 3`, \
         the Xid's own guidance; a GPU that degrades or computes wrong is to be replaced."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let plan = match under_load::plan(ctx) {
            Ok(p) => p,
            Err(o) => return *o,
        };
        let planned = ctx
            .options
            .burn_duration_s
            .map_or(DEFAULT_DURATION, Duration::from_secs_f64)
            .min(MAX_DURATION);
        let xids_before = xid_events(ctx);
        let sizes = memory::pattern_plan(ctx, &plan);
        let mut args = compute::payload_args(plan.device);
        args.extend(memory::burn_args(plan.device, &sizes));
        args.extend(["--duration".to_string(), planned.as_secs_f64().to_string()]);
        let load = BurnLoad {
            python: &plan.python.path,
            args,
            gpus: plan.indices(),
            device: plan.device,
            round_timeout: ROUND_TIMEOUT,
            timeout: planned + 2 * ROUND_TIMEOUT,
            nvml_lib: ctx.options.nvml_lib.as_deref(),
        };
        let mut f = BurnFacts {
            planned_s: planned.as_secs_f64(),
            ran_s: 0.0,
            rounds: Vec::new(),
            new_xids: Vec::new(),
            stopped: None,
            degraded_share: match plan.device {
                LoadDevice::Cuda => DEGRADED_SHARE,
                LoadDevice::Cpu => CPU_SIBLING_FLOOR,
            },
        };
        let next_round = |n: usize, at_s: f64, last: Option<&Round>| {
            crate::probe::stage(&format!("burn round {n}"));
            let done = Duration::from_secs_f64(at_s);
            crate::probe::progress(&progress_text(n, done, planned, last));
        };
        next_round(1, 0.0, None);
        let end = crate::probe::burn::burn(&load, |r| {
            // The round's samples once, on the compute side (see round()).
            let c = compute::facts(&plan, &r.compute, &r.samples);
            let m = memory::facts(&plan, &r.memory, &[], &sizes);
            f.rounds.push(round(r.at_s, &c, &m));
            f.ran_s = r.at_s;
            next_round(f.rounds.len() + 1, r.at_s, f.rounds.last());
            crate::probe::partial(&so_far(&f));
        });
        match end.stopped {
            // A round that hung, the first one too, is the burn's own
            // finding: --timeout (load_failed's hint) does not lengthen it.
            Some(e) if !f.rounds.is_empty() || matches!(e, LoadError::TimedOut { .. }) => {
                f.stopped = Some(stopped_text(&e, f.rounds.len()));
            }
            // No load could run at all (no CUDA in torch, no torch): the
            // verdict gpu.compute gives it.
            Some(e) => return load_failed(&e, "burn"),
            None => {}
        }
        f.new_xids = new_events(&xids_before, &xid_events_again(ctx), &plan.gpus);
        f.ran_s = end.elapsed_s;
        let gpus: Vec<LoadGpu> = plan.gpus.iter().map(|g| plan.load_gpu(g.index)).collect();
        let (compute, memory) = fleet_figures(&gpus, plan.device, &f);
        evaluate(&f).publish(&compute).publish(&memory)
    }
}

/// Each GPU's median bf16 TFLOPS and triad GB/s over the rounds, as the
/// load checks publish theirs, so that `gpucheck cluster --profile burn`
/// compares them across the fleet (fleet.gpu_load).
pub fn fleet_figures(
    gpus: &[LoadGpu],
    device: LoadDevice,
    f: &BurnFacts,
) -> (ComputeLoad, MemoryLoad) {
    let of = |i: u32, pick: fn(&RoundGpu) -> Option<f64>| median(&series(f, i, pick));
    let compute = gpus
        .iter()
        .map(|g| (g.clone(), of(g.index, |r| r.bf16_tflops), None));
    let memory = gpus
        .iter()
        .map(|g| (g.clone(), None, of(g.index, |r| r.triad_gbps)));
    (
        ComputeLoad::new(device, compute),
        MemoryLoad::new(device, memory),
    )
}

/// The progress line's step before round `n`: the time done and left, and
/// each GPU's bf16 TFLOPS in the round before.
pub fn progress_text(
    n: usize,
    elapsed: Duration,
    planned: Duration,
    last: Option<&Round>,
) -> String {
    let left = planned.saturating_sub(elapsed);
    let mut text = format!("round {n} · {} done, {} left", clock(elapsed), clock(left));
    if let Some(r) = last {
        let figures: Vec<String> = r
            .gpus
            .iter()
            .map(|g| {
                let t = g.bf16_tflops.map_or_else(|| "-".into(), short);
                format!("{}:{t}", g.index)
            })
            .collect();
        text.push_str(&format!(" · bf16 TFLOPS {}", figures.join(" ")));
    }
    text
}

/// A figure in three digits or so: "812", "45.2", "0.052".
fn short(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// "1h02m", "7m05s", "42s".
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// What the rounds so far come to, as reported when the run is
/// interrupted before the burn ends: a fault found stands (fail);
/// otherwise there is no verdict (error), and the rounds' table shows
/// what ran. Xids are not looked for (the kernel log is read at the end).
pub fn so_far(f: &BurnFacts) -> Outcome {
    let mut o = evaluate(f);
    let ran = format!(
        "interrupted after {} in {:.0} of {:.0} s",
        n_rounds(f.rounds.len()),
        f.ran_s,
        f.planned_s
    );
    if o.status >= Status::Fail {
        o.summary = format!("{}; {ran}", o.summary);
        return o;
    }
    o.status = Status::Error;
    o.summary = format!(
        "{ran}: no GPU degraded or computed wrong in them (the kernel log was not read again)"
    );
    o.hint = Some(
        "the burn was stopped before its --duration, so it has no verdict; run it again and let \
         it finish"
            .into(),
    );
    o.action = None;
    o.action_gpus.clear();
    o
}

/// The kernel log's Xid events before the burn (none when it cannot be read).
fn xid_events(ctx: &Context) -> Vec<XidEvent> {
    kernel_log::read_kernel_log(ctx.options.kernel_log.as_deref(), None, KERNEL_LOG_WAIT)
        .map(|l| l.events)
        .unwrap_or_default()
}

/// The kernel log's Xid events after the burn, read again.
fn xid_events_again(ctx: &Context) -> Vec<XidEvent> {
    kernel_log::read_kernel_log_again(ctx.options.kernel_log.as_deref(), KERNEL_LOG_WAIT)
        .map(|l| l.events)
        .unwrap_or_default()
}

/// Events in `after` beyond those in `before`, each with its GPU.
pub fn new_events(
    before: &[XidEvent],
    after: &[XidEvent],
    gpus: &[crate::probe::nvml::GpuInfo],
) -> Vec<(Option<u32>, XidEvent)> {
    let mut seen = before.to_vec();
    let mut out = Vec::new();
    for e in after {
        if let Some(i) = seen.iter().position(|s| s == e) {
            seen.remove(i);
            continue;
        }
        let gpu = gpus
            .iter()
            .find(|g| PciSlot::parse(&g.pci_bus_id) == Some(e.slot))
            .map(|g| g.index);
        out.push((gpu, e.clone()));
    }
    out
}

/// One round's figures from its compute and memory runs; the round's NVML
/// readings are those of the compute facts, which hold the whole round's.
fn round(at_s: f64, c: &ComputeFacts, m: &MemoryFacts) -> Round {
    let gpus = c
        .gpus
        .iter()
        .map(|g| {
            let mem = m.gpus.iter().find(|x| x.index == g.index);
            let (clocks, temps): (Vec<_>, Vec<_>) = g
                .readings
                .iter()
                .map(|r| (r.sm_clock_mhz.clone().ok(), r.temperature_c.clone().ok()))
                .unzip();
            RoundGpu {
                index: g.index,
                bf16_tflops: g.figures.bf16_tflops,
                triad_gbps: mem.and_then(|x| x.figures.triad_gbps),
                min_clock_mhz: clocks.into_iter().flatten().min(),
                max_temp_c: temps.into_iter().flatten().max(),
                wrong_elements: g.figures.differing_elements + g.figures.reference_bad,
                bad_words: mem.map_or(0, |x| x.figures.bad_words),
            }
        })
        .collect();
    Round { at_s, gpus }
}

/// One GPU's series of a figure across the rounds.
fn series(f: &BurnFacts, index: u32, pick: impl Fn(&RoundGpu) -> Option<f64>) -> Vec<f64> {
    f.rounds
        .iter()
        .filter_map(|r| r.gpus.iter().find(|g| g.index == index).and_then(&pick))
        .collect()
}

fn judge_gpu(f: &BurnFacts, index: u32, out: &mut Findings) {
    let fell = |what: &str, unit: &str, s: Vec<f64>, out: &mut Findings| {
        if let Some((first, last)) = degraded_below(&s, f.degraded_share) {
            out.push(
                Finding::new(
                    Some(index),
                    Status::Fail,
                    format!("{what} fell from {first:.3} to {last:.3} {unit} over the burn"),
                )
                .hint(DEGRADED_HINT),
            );
        }
    };
    fell(
        "bf16 GEMM",
        "TFLOPS",
        series(f, index, |g| g.bf16_tflops),
        out,
    );
    fell(
        "memory triad",
        "GB/s",
        series(f, index, |g| g.triad_gbps),
        out,
    );
    let clocks = series(f, index, |g| g.min_clock_mhz.map(f64::from));
    if let Some((first, last)) = degraded_below(&clocks, DEGRADED_SHARE) {
        out.push(
            Finding::new(
                Some(index),
                Status::Fail,
                format!(
                    "SM clock fell from {} to {} MHz over the burn",
                    thousands(first.round() as u32),
                    thousands(last.round() as u32)
                ),
            )
            .hint(DEGRADED_HINT),
        );
    }
    let temps = series(f, index, |g| g.max_temp_c.map(f64::from));
    if let Some((first, last)) = temperature_climbing(&temps) {
        out.push(
            Finding::new(
                Some(index),
                Status::Warn,
                format!("temperature climbed from {first:.0} to {last:.0} °C over the burn"),
            )
            .hint(DEGRADED_HINT),
        );
    }
    let wrong: u64 = series(f, index, |g| Some(g.wrong_elements as f64))
        .iter()
        .sum::<f64>() as u64;
    let bad: u64 = series(f, index, |g| Some(g.bad_words as f64))
        .iter()
        .sum::<f64>() as u64;
    if wrong > 0 {
        out.push(
            Finding::new(
                Some(index),
                Status::Fail,
                format!("computed wrong results during the burn: {wrong} elements in all"),
            )
            .hint(WRONG_HINT),
        );
    }
    if bad > 0 {
        out.push(
            Finding::new(
                Some(index),
                Status::Fail,
                format!("{bad} words of device memory read back wrong during the burn"),
            )
            .hint(WRONG_HINT),
        );
    }
}

/// Judge the rounds.
pub fn evaluate(f: &BurnFacts) -> Outcome {
    let mut findings = Findings::new();
    let mut indices: Vec<u32> = f
        .rounds
        .iter()
        .flat_map(|r| r.gpus.iter().map(|g| g.index))
        .collect();
    indices.sort_unstable();
    indices.dedup();
    for &i in &indices {
        judge_gpu(f, i, &mut findings);
    }
    for (gpu, e) in &f.new_xids {
        let text = format!(
            "logged Xid {} during the burn ({})",
            e.code,
            e.detail.trim()
        );
        findings.push(Finding::new(*gpu, Status::Fail, text).hint(XID_HINT));
    }
    if let Some(why) = &f.stopped {
        findings.add(
            Status::Fail,
            format!(
                "the burn stopped after {} in {:.0} of {:.0} s: {why}",
                n_rounds(f.rounds.len()),
                f.ran_s,
                f.planned_s
            ),
            Some(STOPPED_HINT.into()),
        );
    }
    if f.rounds.is_empty() && f.stopped.is_none() {
        return Outcome::skip("no round of load fitted in the duration");
    }
    let note = if f.rounds.len() < 3 {
        "; fewer than 3 rounds, so degradation was not judged"
    } else {
        ""
    };
    let bf16: Vec<f64> = f
        .rounds
        .iter()
        .flat_map(|r| r.gpus.iter().filter_map(|g| g.bf16_tflops))
        .collect();
    let pass = format!(
        "{} in {:.0} s on {} GPUs, median bf16 {:.3} TFLOPS: steady throughput, clocks \
         and temperature, no wrong result, no Xid{note}",
        n_rounds(f.rounds.len()),
        f.ran_s,
        indices.len(),
        median(&bf16).unwrap_or(0.0)
    );
    findings
        .conclude(pass, Vec::new())
        .with_metric("burn_rounds", f.rounds.len() as f64, "count")
        .with_metric("burn_seconds", f.ran_s, "s")
        .with_table(table(f))
}

/// "1 round", "14 rounds".
fn n_rounds(n: usize) -> String {
    format!("{n} round{}", if n == 1 { "" } else { "s" })
}

/// Why the load ended before the burn's time, as the finding says it.
fn stopped_text(e: &LoadError, finished: usize) -> String {
    match e {
        LoadError::TimedOut { secs, stage } => format!(
            "round {} did not end within {secs:.0} s (last stage: {stage})",
            finished + 1
        ),
        e => e.to_string(),
    }
}

fn table(f: &BurnFacts) -> DataTable {
    let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.3}"));
    let rows = f
        .rounds
        .iter()
        .enumerate()
        .flat_map(|(n, r)| {
            r.gpus.iter().map(move |g| {
                vec![
                    (n + 1).to_string(),
                    format!("{:.0}", r.at_s),
                    g.index.to_string(),
                    opt(g.bf16_tflops),
                    opt(g.triad_gbps),
                    g.min_clock_mhz.map_or_else(|| "-".into(), thousands),
                    g.max_temp_c.map_or_else(|| "-".into(), |t| t.to_string()),
                ]
            })
        })
        .collect();
    DataTable {
        title: "Burn rounds".into(),
        header: [
            "round",
            "at s",
            "GPU",
            "bf16 TFLOPS",
            "triad GB/s",
            "min SM MHz",
            "max °C",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        legend: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(n: usize, gpu1: impl Fn(usize) -> RoundGpu) -> BurnFacts {
        let steady = |i: u32| RoundGpu {
            index: i,
            bf16_tflops: Some(700.0),
            triad_gbps: Some(2900.0),
            min_clock_mhz: Some(1980),
            max_temp_c: Some(60),
            ..RoundGpu::default()
        };
        BurnFacts {
            planned_s: 600.0,
            ran_s: 600.0,
            rounds: (0..n)
                .map(|k| Round {
                    at_s: 30.0 * (k + 1) as f64,
                    gpus: vec![steady(0), gpu1(k)],
                })
                .collect(),
            new_xids: Vec::new(),
            stopped: None,
            degraded_share: DEGRADED_SHARE,
        }
    }

    fn warming(k: usize) -> RoundGpu {
        RoundGpu {
            index: 1,
            bf16_tflops: Some(700.0 - 30.0 * k as f64),
            triad_gbps: Some(2900.0),
            min_clock_mhz: Some(1980 - 60 * k as u32),
            max_temp_c: Some(62 + 4 * k as u32),
            ..RoundGpu::default()
        }
    }

    #[test]
    fn steady_rounds_pass() {
        let f = rounds(6, |_| RoundGpu {
            index: 1,
            bf16_tflops: Some(698.0),
            triad_gbps: Some(2910.0),
            min_clock_mhz: Some(1965),
            max_temp_c: Some(61),
            ..RoundGpu::default()
        });
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.summary.starts_with("6 rounds in 600 s on 2 GPUs"),
            "{}",
            o.summary
        );
        assert_eq!(o.tables[0].rows.len(), 12);
    }

    #[test]
    fn a_gpu_that_warms_into_throttling_is_named_with_what_fell() {
        let o = evaluate(&rounds(9, warming));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("GPU 1: bf16 GEMM fell from 670.000 to 490.000 TFLOPS"),
            "{}",
            o.summary
        );
        assert!(
            o.summary.contains("SM clock fell from 1,920 to 1,560 MHz"),
            "{}",
            o.summary
        );
        assert!(o.hint.unwrap_or_default().starts_with("GPU 1 slows down"));
    }

    #[test]
    fn a_climbing_temperature_alone_warns() {
        let o = evaluate(&rounds(6, |k| RoundGpu {
            index: 1,
            bf16_tflops: Some(700.0),
            triad_gbps: Some(2900.0),
            min_clock_mhz: Some(1980),
            max_temp_c: Some(64 + 6 * k as u32),
            ..RoundGpu::default()
        }));
        assert_eq!(o.status, Status::Warn, "{o:?}");
        assert!(
            o.summary.contains("temperature climbed from 67 to 91 °C"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn a_wrong_result_in_one_round_fails() {
        let o = evaluate(&rounds(4, |k| RoundGpu {
            index: 1,
            bf16_tflops: Some(700.0),
            wrong_elements: u64::from(k == 2),
            ..RoundGpu::default()
        }));
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .contains("computed wrong results during the burn: 1 elements"));
    }

    #[test]
    fn an_xid_during_the_burn_fails_naming_the_gpu() {
        let mut f = rounds(3, |_| RoundGpu {
            index: 1,
            ..RoundGpu::default()
        });
        f.new_xids.push((
            Some(1),
            XidEvent {
                slot: PciSlot::parse("0000:2a:00.0").expect("slot"),
                code: 79,
                logged_as_xid: true,
                when: "now".into(),
                since_boot_s: None,
                detail: "GPU has fallen off the bus.".into(),
            },
        ));
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: logged Xid 79 during the burn (GPU has fallen off the bus.)"
        );
    }

    #[test]
    fn two_rounds_say_nothing_about_degradation() {
        let o = evaluate(&rounds(2, warming));
        assert_eq!(o.status, Status::Pass);
        assert!(o
            .summary
            .ends_with("fewer than 3 rounds, so degradation was not judged"));
    }

    #[test]
    fn the_progress_step_shows_the_round_the_time_and_each_gpus_tflops() {
        let planned = Duration::from_secs(600);
        assert_eq!(
            progress_text(1, Duration::ZERO, planned, None),
            "round 1 · 0s done, 10m00s left"
        );
        let f = rounds(2, warming);
        assert_eq!(
            progress_text(3, Duration::from_secs(130), planned, f.rounds.last()),
            "round 3 · 2m10s done, 7m50s left · bf16 TFLOPS 0:700 1:670"
        );
        let mut cpu = f.rounds[0].clone();
        cpu.gpus[0].bf16_tflops = Some(0.0523);
        cpu.gpus[1].bf16_tflops = None;
        assert_eq!(
            progress_text(
                2,
                Duration::from_secs(3725),
                Duration::from_secs(7200),
                Some(&cpu)
            ),
            "round 2 · 1h02m done, 57m55s left · bf16 TFLOPS 0:0.052 1:-"
        );
        assert_eq!(
            progress_text(9, Duration::from_secs(700), planned, None),
            "round 9 · 11m40s done, 0s left"
        );
    }

    #[test]
    fn an_interrupted_burn_without_a_fault_has_no_verdict_but_shows_its_rounds() {
        let mut f = rounds(4, warming);
        f.ran_s = 130.4;
        f.rounds.iter_mut().for_each(|r| r.gpus.truncate(1));
        let o = so_far(&f);
        assert_eq!(o.status, Status::Error, "{o:?}");
        assert_eq!(
            o.summary,
            "interrupted after 4 rounds in 130 of 600 s: no GPU degraded or computed wrong in \
             them (the kernel log was not read again)"
        );
        let hint = o.hint.as_deref().unwrap_or("");
        assert!(hint.contains("run it again and let it finish"), "{hint}");
        assert!(!hint.contains("  "), "double spaces: {hint}");
        assert_eq!(o.action, None, "the runner sets none for an interruption");
        assert_eq!(o.tables[0].rows.len(), 4);
    }

    #[test]
    fn a_burn_whose_round_hung_fails_naming_the_round_and_the_time() {
        let mut f = rounds(1, warming);
        f.ran_s = 121.0;
        let hung = LoadError::TimedOut {
            secs: 90.0,
            stage: "patterns".into(),
        };
        f.stopped = Some(stopped_text(&hung, f.rounds.len()));
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert_eq!(
            o.summary,
            "the burn stopped after 1 round in 121 of 600 s: round 2 did not end within 90 s \
             (last stage: patterns)"
        );
        assert!(
            o.hint.as_deref().unwrap_or("").contains("sudo dmesg"),
            "{o:?}"
        );
    }

    #[test]
    fn a_first_round_that_hung_fails_with_the_burns_own_hint() {
        let mut f = rounds(0, warming);
        f.ran_s = 90.0;
        let hung = LoadError::TimedOut {
            secs: 90.0,
            stage: "import torch".into(),
        };
        f.stopped = Some(stopped_text(&hung, 0));
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert_eq!(
            o.summary,
            "the burn stopped after 0 rounds in 90 of 600 s: round 1 did not end within 90 s \
             (last stage: import torch)"
        );
        assert!(
            !o.hint.as_deref().unwrap_or("").contains("--timeout"),
            "{o:?}"
        );
    }

    #[test]
    fn an_interrupted_burn_that_found_a_fault_fails_with_it() {
        let mut f = rounds(6, warming);
        f.ran_s = 200.0;
        let o = so_far(&f);
        assert_eq!(o.status, Status::Fail, "{o:?}");
        assert!(o.summary.starts_with("GPU 1: "), "{}", o.summary);
        assert!(
            o.summary
                .ends_with("; interrupted after 6 rounds in 200 of 600 s"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn the_fleet_gets_each_gpus_median_over_the_rounds() {
        let gpus = [
            LoadGpu::new(0, "NVIDIA H100 80GB HBM3", Some("GPU-a")),
            LoadGpu::new(1, "NVIDIA H100 80GB HBM3", None),
        ];
        let (compute, memory) = fleet_figures(&gpus, LoadDevice::Cuda, &rounds(5, warming));
        let bf16: Vec<_> = compute.0.gpus.iter().map(|g| g.bf16_tflops).collect();
        assert_eq!(bf16, [Some(700.0), Some(640.0)], "GPU 1's middle round");
        assert_eq!(compute.0.gpus[0].uuid.as_deref(), Some("GPU-a"));
        assert_eq!(compute.0.gpus[1].tf32_tflops, None);
        let triad: Vec<_> = memory.0.gpus.iter().map(|g| g.triad_gbps).collect();
        assert_eq!(triad, [Some(2900.0), Some(2900.0)]);
        let (none, _) = fleet_figures(&gpus, LoadDevice::Cuda, &rounds(0, warming));
        assert_eq!(none.0.gpus[0].bf16_tflops, None, "no round, no figure");
    }

    #[test]
    fn events_logged_before_the_burn_are_not_new() {
        let e = |code| XidEvent {
            slot: PciSlot::parse("0000:2a:00.0").expect("slot"),
            code,
            logged_as_xid: true,
            when: "t".into(),
            since_boot_s: None,
            detail: String::new(),
        };
        let fresh = new_events(&[e(13)], &[e(13), e(48)], &[]);
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0].1.code, 48);
    }
}

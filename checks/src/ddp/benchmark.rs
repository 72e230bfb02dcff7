//! `ddp.benchmark`: a real DistributedDataParallel training run through the
//! user's own Python, torch and torchrun (launched and read by
//! `probe::ddp`), judged on scaling efficiency, stragglers and whether the
//! ranks' weights stayed identical.

use std::time::Duration;

use super::failure::evaluate_failure;
use super::plan::{budget, plan};
use super::{rank_list, DEFAULT_TIMEOUT, HANG_HINT};
use crate::probe::ddp::{self as probe, BenchFacts, LaunchError, RankStats};
use crate::probe::python;
use crate::{
    Check, Context, DataTable, DdpDevice, DeviceResult, Finding, Findings, Isolation, Metric,
    Options, Outcome, Profile, Status,
};

/// Scaling efficiency below which adding GPUs is judged not worth it: N GPUs
/// deliver less than half of N times one GPU. The brief's floor; a healthy
/// node is far above it (facts.md "DDP scaling": ResNet-50 on 8x V100 about
/// 93 %, pytorch benchmarks/distributed/ddp; the seed guides expect about 3.5x
/// on 4 GPUs, 0.875).
pub const FAIL_BELOW_EFFICIENCY: f64 = 0.5;
/// Below this a node works but loses a fifth or more of its GPUs to
/// communication or stragglers; the healthy figures above (0.875-0.93) sit
/// clearly over it.
pub const WARN_BELOW_EFFICIENCY: f64 = 0.8;
/// A rank whose local compute time (the same work on every rank) is over this
/// multiple of the median rank's is a straggler. gpucheck's choice: run-to-run
/// noise of identical GPUs on identical work is a few per cent, and DDP runs
/// every step at the pace of its slowest rank.
pub const STRAGGLER_RATIO: f64 = 1.15;
/// Above this share of a step spent waiting on the gradient all-reduce, the
/// advice for a slow run points at the interconnect rather than at compute.
/// gpucheck's choice: DDP overlaps all-reduce with backward, so on a healthy
/// node little of it is exposed.
pub const COMM_BOUND_SHARE: f64 = 0.3;

/// `ddp.benchmark`.
pub struct Benchmark;

impl Check for Benchmark {
    fn id(&self) -> &'static str {
        "ddp.benchmark"
    }
    fn title(&self) -> &'static str {
        "DDP scaling benchmark"
    }
    fn profile(&self) -> Profile {
        Profile::Full
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        DEFAULT_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        HANG_HINT.to_string()
    }
    fn explain(&self) -> &'static str {
        "Runs a short real DistributedDataParallel training job through torchrun and checks that \
         adding GPUs speeds training up and that DDP keeps every rank's weights identical.\n\n\
         gpucheck launches `python -m torch.distributed.run` with the Python the training job will \
         use (--python, $VIRTUAL_ENV, $CONDA_PREFIX, then python3), one process per visible GPU \
         (--nproc N overrides), on a loopback port it verified free. The model is a stack of \
         transformer-style MLP blocks (--ddp-model small ~2 M, medium ~67 M, large ~268 M \
         parameters) trained on synthetic data made on the device, in bf16 autocast where the GPU \
         supports it, with DDP's default 25 MB gradient buckets. Rank 0 first trains it alone \
         (world size 1); then all ranks train it under DDP (world size N). Scaling efficiency is \
         the N-rank throughput divided by N times the one-rank throughput. Each rank reports its \
         step time (p50/p95) and the share of a step spent waiting on communication, measured as \
         the forward+backward time of synchronised steps minus that of the same steps under \
         `ddp.no_sync()`, i.e. the all-reduce time the backward pass could not hide. At the end \
         every rank fingerprints its parameters (a float64 sum and a hash of the exact bits) and \
         the fingerprints are compared.\n\n\
         Why it matters: every other check looks at one part (driver, NCCL, network); this one \
         runs the stack the training job will run. A node whose GPUs work but talk over a slow \
         path, share a PCIe switch badly, throttle, or wait on one slow GPU trains at a fraction \
         of what it costs. Ranks whose weights differ after synchronised steps mean DDP's \
         all-reduce is returning wrong data: training would silently diverge.\n\n\
         Verdicts on GPUs: efficiency below 0.5 fails and below 0.8 warns (--min-scaling X sets \
         the failure floor); a rank whose compute time is over 1.15x the median warns and is named \
         with its GPU UUID; differing weights fail. On CPUs (--ddp-device cpu, gloo) the numbers \
         are reported but not judged; the weight check still applies. With the default NCCL \
         backend on a machine without NVIDIA GPUs the check is skipped.\n\n\
         How to fix: low efficiency with a large communication share points at the interconnect: \
         compare `nccl.allreduce` bus bandwidth, look at `nvidia-smi topo -m` (GPUs should reach \
         each other over NV# links, not SYS), and make sure NCCL_P2P_DISABLE and NCCL_SHM_DISABLE \
         are not set. Low efficiency with little communication points at stragglers or CPU \
         contention: check the named GPU with `nvidia-smi -q -d PERFORMANCE` for throttling and \
         the host for other busy processes. A failed worker is shown with its error; a hang shows \
         where each rank was: rerun with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL, and \
         check `dmesg` for Xid errors."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        run_benchmark(&ctx.options)
    }
}

fn run_benchmark(options: &Options) -> Outcome {
    let plan = match plan(options) {
        Ok(p) => p,
        Err(e) => return e.outcome(),
    };
    if plan.device == DdpDevice::Cuda && !probe::gpu_device_nodes_present() {
        return Outcome::skip(
            "no GPU on this machine (no /dev/nvidia* device), so no DDP run on CUDA with NCCL",
        )
        .with_hint(
            "to benchmark DDP on CPUs instead: --ddp-device cpu (uses the gloo backend; numbers \
             are reported, not judged)",
        );
    }
    let py = match python::find_python(options.python.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            return Outcome::fail(
                format!("no Python to run torchrun with: {e}"),
                "point gpucheck at the training environment's interpreter with --python PATH \
                 (or activate its virtualenv/conda environment)",
            )
        }
    };
    let launched = match probe::run(&py.path, &plan, budget(options.timeout_s)) {
        Ok(l) => l,
        Err(LaunchError::NoStorePort(e)) => {
            return Outcome::fail(
                format!("cannot find a free TCP port for the rendezvous store: {e}"),
                "the loopback interface must be up (`ip link set lo up`); see net.loopback",
            )
        }
        Err(LaunchError::Payload(e)) => {
            return Outcome::error(format!("cannot start the benchmark: {e}"))
                .with_hint("TMPDIR must be writable (the payload is written there)")
        }
    };
    let judged = match launched.run {
        probe::BenchRun::Finished(facts) => evaluate(
            &facts,
            &Thresholds::new(options.min_scaling, plan.device == DdpDevice::Cuda),
        ),
        probe::BenchRun::Failed(failure) => evaluate_failure(&failure),
    };
    judged
        .with_fact("python", python::name_of(&py.path).display().to_string())
        .with_fact("launcher", launched.launcher)
}

// ---------------------------------------------------------------------------

/// The numbers a finished run is judged by.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// Efficiency below this fails (`--min-scaling`, default 0.5).
    pub fail_below: f64,
    /// Efficiency below this warns (0.8).
    pub warn_below: f64,
    pub straggler_ratio: f64,
    /// False on CPUs: speed is reported, not judged.
    pub judge_speed: bool,
}

impl Thresholds {
    pub fn new(min_scaling: Option<f64>, on_gpus: bool) -> Thresholds {
        Thresholds {
            fail_below: min_scaling.unwrap_or(FAIL_BELOW_EFFICIENCY),
            warn_below: WARN_BELOW_EFFICIENCY,
            straggler_ratio: STRAGGLER_RATIO,
            judge_speed: on_gpus,
        }
    }
}

/// The median, 0 for none.
fn median(values: &[f64]) -> f64 {
    crate::domain::stats::median(values).unwrap_or(0.0)
}

fn rate(samples_per_s: f64) -> String {
    if samples_per_s >= 100.0 {
        format!("{samples_per_s:.0}")
    } else {
        format!("{samples_per_s:.1}")
    }
}

/// What a finished run measured, computed once for the verdict, the numbers
/// and the per-rank rows.
struct Measures {
    world: u32,
    /// Every rank's numbers, in rank order.
    ranks: Vec<RankStats>,
    efficiency: f64,
    speedup: f64,
    /// Median rank's share of a step waiting on the all-reduce.
    comm_share: f64,
    /// Median rank's compute time (forward+backward under no_sync), ms.
    compute_median: f64,
    stragglers: Vec<u32>,
    /// Ranks whose weights differ from rank 0's.
    diverged: Vec<u32>,
    /// Ranks whose weights are NaN or infinite.
    non_finite: Vec<u32>,
    /// "7440 samples/s on 8 GPU ranks (nccl) vs 1000 on 1 (...)".
    throughput: String,
}

impl Measures {
    fn of(facts: &BenchFacts, t: &Thresholds) -> Measures {
        let world = facts.multi.world_size.max(1);
        let mut ranks = facts.ranks.clone();
        ranks.sort_by_key(|r| r.rank);
        let efficiency = facts.multi.samples_per_s / (world as f64 * facts.single.samples_per_s);
        let speedup = facts.multi.samples_per_s / facts.single.samples_per_s;
        let comm_share = median(
            &ranks
                .iter()
                .map(RankStats::comm_wait_share)
                .collect::<Vec<_>>(),
        );
        let compute_median = median(
            &ranks
                .iter()
                .map(|r| r.fwd_bwd_local_p50_ms)
                .collect::<Vec<_>>(),
        );
        let stragglers = if t.judge_speed && world > 1 && compute_median > 0.0 {
            ranks
                .iter()
                .filter(|r| r.fwd_bwd_local_p50_ms > t.straggler_ratio * compute_median)
                .map(|r| r.rank)
                .collect()
        } else {
            Vec::new()
        };
        // Synchronisation: every rank's weights must match rank 0's bit for bit.
        let reference = &ranks[0];
        let diverged = ranks
            .iter()
            .filter(|r| {
                r.param_hash != reference.param_hash
                    || r.param_sum.map(f64::to_bits) != reference.param_sum.map(f64::to_bits)
            })
            .map(|r| r.rank)
            .collect();
        // The same synthetic data trains to finite weights on healthy hardware.
        let non_finite = ranks
            .iter()
            .filter(|r| r.param_sum.is_none())
            .map(|r| r.rank)
            .collect();
        let throughput = throughput(facts, world, speedup, efficiency);
        Measures {
            world,
            ranks,
            efficiency,
            speedup,
            comm_share,
            compute_median,
            stragglers,
            diverged,
            non_finite,
            throughput,
        }
    }

    fn step_p50_median(&self) -> f64 {
        median(&self.ranks.iter().map(|r| r.step_p50_ms).collect::<Vec<_>>())
    }

    fn step_p95_worst(&self) -> f64 {
        self.ranks.iter().map(|r| r.step_p95_ms).fold(0.0, f64::max)
    }
}

/// The throughput sentence every verdict on a finished run starts with.
fn throughput(facts: &BenchFacts, world: u32, speedup: f64, efficiency: f64) -> String {
    let on = if facts.setup.device == "cuda" {
        format!("{world} GPU ranks ({})", facts.setup.backend)
    } else {
        format!("{world} CPU ranks ({})", facts.setup.backend)
    };
    if world > 1 {
        format!(
            "{} samples/s on {on} vs {} on 1 ({speedup:.2}x, efficiency {efficiency:.2})",
            rate(facts.multi.samples_per_s),
            rate(facts.single.samples_per_s),
        )
    } else {
        format!(
            "{} samples/s on 1 rank ({}) under DDP vs {} without",
            rate(facts.multi.samples_per_s),
            facts.setup.backend,
            rate(facts.single.samples_per_s),
        )
    }
}

/// What to say when a run that finished is missing what it is judged by.
const REPORT_HINT: &str =
    "please report this with the output of `gpucheck --only ddp.benchmark --json -`";

/// Judge a finished run.
pub fn evaluate(facts: &BenchFacts, t: &Thresholds) -> Outcome {
    if let Some(incomplete) = incomplete(facts) {
        return incomplete;
    }
    let m = Measures::of(facts, t);
    let mut outcome = with_numbers(verdict(facts, &m, t), facts, &m, t);
    for device in rank_rows(&m) {
        outcome = outcome.with_device(device);
    }
    outcome
        .with_table(throughput_table(facts, &m))
        .with_table(ranks_table(&m))
}

/// Every rank must have reported, with a usable throughput.
fn incomplete(facts: &BenchFacts) -> Option<Outcome> {
    let world = facts.multi.world_size.max(1);
    let missing: Vec<u32> = (0..world)
        .filter(|r| !facts.ranks.iter().any(|s| s.rank == *r))
        .collect();
    if !missing.is_empty() {
        return Some(
            Outcome::error(format!(
                "the benchmark finished without results for {}",
                rank_list(&missing)
            ))
            .with_hint(REPORT_HINT),
        );
    }
    let usable = |x: f64| x.is_finite() && x > 0.0;
    if !usable(facts.single.samples_per_s) || !usable(facts.multi.samples_per_s) {
        return Some(
            Outcome::error("the benchmark reported no usable throughput").with_hint(REPORT_HINT),
        );
    }
    None
}

/// Broken weights first (they make every number moot), then whether there is
/// anything to scale or judge, then the verdict on speed.
fn verdict(facts: &BenchFacts, m: &Measures, t: &Thresholds) -> Outcome {
    let throughput = &m.throughput;
    if !m.non_finite.is_empty() {
        Outcome::fail(
            format!(
                "training produced NaN or infinite parameters on {}",
                rank_list(&m.non_finite)
            ),
            "the same synthetic model trains to finite weights on healthy hardware, so a GPU \
             computed garbage (or its data was corrupted in flight): check the GPUs for errors \
             (`dmesg` for Xid, `nvidia-smi -q -d ECC`) and run the GPU vendor's diagnostics \
             (`dcgmi diag -r 2`)",
        )
    } else if !m.diverged.is_empty() {
        Outcome::fail(
            format!(
                "ranks diverged: gradients are not being synchronised ({} ended with parameters \
                 different from rank 0's after {} synchronised steps)",
                rank_list(&m.diverged),
                facts.setup.warmup_steps + facts.setup.timed_steps
            ),
            "DDP's all-reduce returned different data on different ranks, so training would \
             silently drift apart: check the GPUs and links for errors (`dmesg` for Xid, \
             `nvidia-smi -q -d ECC`), run nccl-tests `all_reduce_perf -c 1` to check results, \
             and unset NCCL_ALGO / NCCL_PROTO overrides",
        )
    } else if m.world == 1 {
        Outcome::pass(format!(
            "{throughput}; one process, so nothing to scale (more GPUs, or --nproc N, to measure \
             scaling)"
        ))
    } else if !t.judge_speed {
        Outcome::pass(format!(
            "{throughput}; parameters identical on all ranks; report only on CPUs"
        ))
    } else {
        judge_speed(m, t)
    }
}

/// The verdict on speed, on GPUs, for a run whose ranks stayed in sync:
/// efficiency under a floor, and stragglers.
fn judge_speed(m: &Measures, t: &Thresholds) -> Outcome {
    let mut findings = Findings::new();
    let mut summary = m.throughput.clone();
    if let Some((finding, floor)) = efficiency_finding(m, t) {
        summary.push_str(&format!(": under the {floor}"));
        findings.push(finding);
    }
    let stragglers: Vec<&RankStats> = m
        .ranks
        .iter()
        .filter(|r| m.stragglers.contains(&r.rank))
        .collect();
    if !stragglers.is_empty() {
        let named: Vec<String> = stragglers
            .iter()
            .map(|r| {
                format!(
                    "rank {} on {} computes {:.2}x slower than the median rank",
                    r.rank,
                    r.device_label(),
                    r.fwd_bwd_local_p50_ms / m.compute_median
                )
            })
            .collect();
        summary.push_str(&format!("; straggler: {}", named.join("; ")));
        findings.push(Finding::new(None, Status::Warn, "straggler").hint(
            "DDP runs every step at the pace of its slowest rank: check the named GPU for thermal \
             or power throttling (`nvidia-smi -q -d PERFORMANCE,CLOCK -i UUID`), a degraded PCIe \
             link (gpu.pcie) and other processes on it (`nvidia-smi`)",
        ));
    }
    let status = findings.worst();
    if status == Status::Pass {
        summary.push_str("; parameters identical on all ranks");
    }
    Outcome::new(status, summary).with_hint(findings.hints())
}

/// Scaling under the warning or failure floor: the finding, with its hint
/// pointing at the interconnect or at compute, and the floor as the summary
/// names it ("0.50 failure floor").
fn efficiency_finding(m: &Measures, t: &Thresholds) -> Option<(Finding, String)> {
    let (status, floor) = if m.efficiency < t.fail_below {
        (Status::Fail, format!("{:.2} failure floor", t.fail_below))
    } else if m.efficiency < t.warn_below {
        (Status::Warn, format!("{:.2} warning floor", t.warn_below))
    } else {
        return None;
    };
    let hint = if m.comm_share >= COMM_BOUND_SHARE {
        format!(
            "{:.0} % of each step waits on the gradient all-reduce, so the interconnect is the \
             limit: compare nccl.allreduce bus bandwidth, check `nvidia-smi topo -m` (GPUs \
             should reach each other over NV# links, not SYS or PHB), and make sure \
             NCCL_P2P_DISABLE / NCCL_SHM_DISABLE are not set",
            m.comm_share * 100.0
        )
    } else {
        format!(
            "only {:.0} % of a step waits on communication, so the ranks are slower together \
             than alone for another reason: a straggler GPU (throttling: `nvidia-smi -q -d \
             PERFORMANCE`), CPU contention (other busy processes, too few cores per rank), or \
             a GPU shared with another job (`nvidia-smi`)",
            m.comm_share * 100.0
        )
    };
    // --min-scaling moves only the failure floor: offering it for a warning
    // would send the user to a flag that cannot clear it.
    let hint = if status == Status::Fail {
        format!(
            "{hint}; if this node is known to scale this way, set your own floor with \
             --min-scaling X (now {:.2})",
            t.fail_below
        )
    } else {
        hint
    };
    Some((
        Finding::new(None, status, "low scaling efficiency").hint(hint),
        floor,
    ))
}

/// The run's numbers and facts, whatever the verdict.
fn with_numbers(outcome: Outcome, facts: &BenchFacts, m: &Measures, t: &Thresholds) -> Outcome {
    let setup = &facts.setup;
    let outcome = outcome
        .with_metric("world_size", m.world as f64, "count")
        .with_metric("parameters", setup.parameters as f64, "count")
        .with_metric("throughput_world1", facts.single.samples_per_s, "samples/s")
        .with_metric("throughput_worldn", facts.multi.samples_per_s, "samples/s")
        .with_metric("speedup", m.speedup, "x")
        .with_metric("scaling_efficiency", m.efficiency, "ratio")
        .with_metric("comm_wait_share", m.comm_share * 100.0, "%")
        .with_metric("step_p50_ms", m.step_p50_median(), "ms")
        .with_metric("step_p95_ms", m.step_p95_worst(), "ms")
        .with_metric("step_world1_p50_ms", facts.single.step_p50_ms, "ms")
        .with_fact("torch_version", setup.torch_version.clone())
        .with_fact("backend", setup.backend.clone())
        .with_fact("device", setup.device.clone())
        .with_fact(
            "model",
            format!(
                "{} ({:.1} M parameters, {} samples x {} tokens per rank, {})",
                setup.model,
                setup.parameters as f64 / 1e6,
                setup.samples_per_rank,
                setup.tokens_per_sample,
                setup.precision
            ),
        )
        .with_fact(
            "sync_verification",
            if m.diverged.is_empty() {
                format!(
                    "passed: parameters identical on all {} ranks (hash {})",
                    m.world, m.ranks[0].param_hash
                )
            } else {
                format!("failed: {} differ from rank 0", rank_list(&m.diverged))
            },
        );
    if m.world > 1 && t.judge_speed {
        outcome.with_metric("efficiency_fail_below", t.fail_below, "ratio")
    } else {
        outcome
    }
}

/// One row per rank: its step and compute times, and whether it straggles or
/// diverged.
fn rank_rows(m: &Measures) -> Vec<DeviceResult> {
    m.ranks
        .iter()
        .map(|r| {
            let straggler = m.stragglers.contains(&r.rank);
            let broken = m.diverged.contains(&r.rank) || m.non_finite.contains(&r.rank);
            let status = if broken {
                Status::Fail
            } else if straggler {
                Status::Warn
            } else {
                Status::Pass
            };
            let mut summary = format!(
                "step p50 {:.1} ms, p95 {:.1} ms; compute p50 {:.1} ms; {:.0} % waiting on \
                 all-reduce",
                r.step_p50_ms,
                r.step_p95_ms,
                r.fwd_bwd_local_p50_ms,
                r.comm_wait_share() * 100.0
            );
            if straggler {
                summary.push_str(&format!(
                    "; straggler: {:.2}x the median compute time",
                    r.fwd_bwd_local_p50_ms / m.compute_median
                ));
            }
            if broken {
                summary.push_str("; parameters differ from rank 0");
            }
            DeviceResult {
                index: r.rank,
                label: Some(format!("rank {}", r.rank)),
                name: match r.device_index {
                    Some(i) => format!("cuda:{i} {}", r.device_name),
                    None => r.device_name.clone(),
                },
                uuid: r.device_uuid.clone(),
                status,
                summary,
                metrics: vec![
                    Metric::new("step_p50_ms", r.step_p50_ms, "ms"),
                    Metric::new("step_p95_ms", r.step_p95_ms, "ms"),
                    Metric::new("compute_p50_ms", r.fwd_bwd_local_p50_ms, "ms"),
                    Metric::new("comm_wait_share", r.comm_wait_share() * 100.0, "%"),
                ],
            }
        })
        .collect()
}

/// Throughput alone and under DDP.
fn throughput_table(facts: &BenchFacts, m: &Measures) -> DataTable {
    DataTable {
        title: "DDP throughput".to_string(),
        header: ["world size", "samples/s", "step p50 ms", "step p95 ms"]
            .map(String::from)
            .to_vec(),
        rows: vec![
            vec![
                "1".to_string(),
                rate(facts.single.samples_per_s),
                format!("{:.1}", facts.single.step_p50_ms),
                format!("{:.1}", facts.single.step_p95_ms),
            ],
            vec![
                m.world.to_string(),
                rate(facts.multi.samples_per_s),
                format!("{:.1}", m.step_p50_median()),
                format!("{:.1}", m.step_p95_worst()),
            ],
        ],
        legend: Some(format!(
            "scaling efficiency {:.2} = {} / ({} x {}); {:.0} % of a step waits on the gradient \
             all-reduce (median rank)",
            m.efficiency,
            rate(facts.multi.samples_per_s),
            m.world,
            rate(facts.single.samples_per_s),
            m.comm_share * 100.0
        )),
    }
}

/// Every rank's numbers and weight fingerprint.
fn ranks_table(m: &Measures) -> DataTable {
    DataTable {
        title: "DDP ranks".to_string(),
        header: [
            "rank",
            "device",
            "step p50 ms",
            "step p95 ms",
            "compute p50 ms",
            "comm wait %",
            "params",
        ]
        .map(String::from)
        .to_vec(),
        rows: m
            .ranks
            .iter()
            .map(|r| {
                vec![
                    r.rank.to_string(),
                    r.device_label(),
                    format!("{:.1}", r.step_p50_ms),
                    format!("{:.1}", r.step_p95_ms),
                    format!("{:.1}", r.fwd_bwd_local_p50_ms),
                    format!("{:.0}", r.comm_wait_share() * 100.0),
                    if m.diverged.contains(&r.rank) {
                        format!("DIFFER ({})", r.param_hash)
                    } else {
                        format!("same ({})", r.param_hash)
                    },
                ]
            })
            .collect(),
        legend: Some(
            "compute = forward+backward under ddp.no_sync(); comm wait = (synchronised \
             forward+backward - compute) / step"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ddp::{parse_records, MultiStats, Setup, SingleStats};

    fn setup(device: &str, backend: &str, world: u32) -> Setup {
        Setup {
            torch_version: "2.15.0+cu132".to_string(),
            backend: backend.to_string(),
            device: device.to_string(),
            world_size: world,
            model: "medium".to_string(),
            parameters: 67_000_000,
            samples_per_rank: 32,
            tokens_per_sample: 512,
            precision: "bf16 autocast".to_string(),
            warmup_steps: 5,
            timed_steps: 20,
            no_sync_steps: 10,
        }
    }

    /// A rank on GPU `rank` with the given local compute time and exposed
    /// all-reduce wait, both in ms.
    fn gpu_rank(rank: u32, compute_ms: f64, wait_ms: f64) -> RankStats {
        let step = compute_ms + wait_ms + 5.0;
        RankStats {
            rank,
            local_rank: rank,
            device_name: "NVIDIA H100 80GB HBM3".to_string(),
            device_uuid: Some(format!("GPU-0000000{rank}-aaaa-bbbb-cccc-dddddddddddd")),
            device_index: Some(rank),
            wall_s: step * 20.0 / 1000.0,
            step_p50_ms: step,
            step_p95_ms: step * 1.05,
            fwd_bwd_sync_p50_ms: compute_ms + wait_ms,
            fwd_bwd_local_p50_ms: compute_ms,
            param_sum: Some(1302.327074834025),
            param_hash: "7663258649c4e81c".to_string(),
        }
    }

    /// A finished run on `world` GPUs with the given efficiency.
    fn gpu_run(world: u32, efficiency: f64, wait_ms: f64) -> BenchFacts {
        let single = 1000.0;
        BenchFacts {
            setup: setup("cuda", "nccl", world),
            single: SingleStats {
                samples_per_s: single,
                step_p50_ms: 32.0,
                step_p95_ms: 33.0,
            },
            multi: MultiStats {
                world_size: world,
                samples_per_s: single * world as f64 * efficiency,
            },
            ranks: (0..world).map(|r| gpu_rank(r, 30.0, wait_ms)).collect(),
        }
    }

    fn cpu_run(efficiency: f64) -> BenchFacts {
        let mut f = gpu_run(2, efficiency, 20.0);
        f.setup = setup("cpu", "gloo", 2);
        for r in &mut f.ranks {
            r.device_name = "cpu".to_string();
            r.device_uuid = None;
            r.device_index = None;
        }
        f
    }

    fn gpu() -> Thresholds {
        Thresholds::new(None, true)
    }

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    #[test]
    fn good_scaling_on_gpus_passes_with_numbers() {
        let o = evaluate(&gpu_run(8, 0.93, 2.0), &gpu());
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "7440 samples/s on 8 GPU ranks (nccl) vs 1000 on 1 (7.44x, efficiency 0.93); \
             parameters identical on all ranks"
        );
        assert_eq!(o.hint, None);
        assert!((o.metric("scaling_efficiency").unwrap() - 0.93).abs() < 1e-9);
        assert_eq!(o.metric("throughput_world1"), Some(1000.0));
        assert_eq!(o.metric("world_size"), Some(8.0));
        assert_eq!(o.metric("efficiency_fail_below"), Some(0.5));
        // 2 ms of 37 ms exposed.
        assert!((o.metric("comm_wait_share").unwrap() - 200.0 / 37.0).abs() < 1e-9);
        assert_eq!(o.devices.len(), 8);
        assert!(o.devices.iter().all(|d| d.status == Status::Pass));
        assert_eq!(
            o.devices[3].uuid.as_deref(),
            Some("GPU-00000003-aaaa-bbbb-cccc-dddddddddddd")
        );
        assert_eq!(o.devices[3].name, "cuda:3 NVIDIA H100 80GB HBM3");
        assert_eq!(o.devices[3].label.as_deref(), Some("rank 3"));
        assert!(o.facts["sync_verification"]
            .to_string()
            .starts_with("passed: parameters identical on all 8"));
        assert_eq!(o.tables[0].rows[1][0], "8");
        assert_eq!(o.tables[1].rows.len(), 8);
    }

    #[test]
    fn middling_scaling_with_exposed_communication_warns_about_the_interconnect() {
        let o = evaluate(&gpu_run(8, 0.7, 20.0), &gpu());
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary
                .ends_with("(5.60x, efficiency 0.70): under the 0.80 warning floor"),
            "{}",
            o.summary
        );
        assert!(hint(&o).starts_with("36 % of each step waits on the gradient all-reduce"));
        assert!(hint(&o).contains("nvidia-smi topo -m"), "{}", hint(&o));
        // --min-scaling moves only the 0.50 failure floor; it cannot clear
        // this warning, so the hint must not offer it.
        assert!(!hint(&o).contains("--min-scaling"), "{}", hint(&o));
    }

    #[test]
    fn middling_scaling_without_communication_points_at_compute() {
        let o = evaluate(&gpu_run(4, 0.7, 1.0), &gpu());
        assert_eq!(o.status, Status::Warn);
        assert!(
            hint(&o).starts_with("only 3 % of a step waits on communication"),
            "{}",
            hint(&o)
        );
        assert!(hint(&o).contains("CPU contention"), "{}", hint(&o));
    }

    #[test]
    fn poor_scaling_fails() {
        let o = evaluate(&gpu_run(8, 0.4, 40.0), &gpu());
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("3200 samples/s on 8 GPU ranks (nccl) vs 1000 on 1 (3.20x, efficiency 0.40): under the 0.50 failure floor"),
            "{}",
            o.summary
        );
        assert!(hint(&o).contains("interconnect"), "{}", hint(&o));
    }

    #[test]
    fn min_scaling_moves_the_failure_floor_both_ways() {
        let strict = Thresholds::new(Some(0.9), true);
        let o = evaluate(&gpu_run(8, 0.85, 2.0), &strict);
        assert_eq!(o.status, Status::Fail, "{}", o.summary);
        assert!(
            o.summary.ends_with("under the 0.90 failure floor"),
            "{}",
            o.summary
        );
        assert!(hint(&o).contains("(now 0.90)"), "{}", hint(&o));
        assert_eq!(o.metric("efficiency_fail_below"), Some(0.9));

        let lenient = Thresholds::new(Some(0.3), true);
        let o = evaluate(&gpu_run(8, 0.4, 2.0), &lenient);
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(
            o.summary.ends_with("under the 0.80 warning floor"),
            "{}",
            o.summary
        );
        // The warning floor stays at 0.80 whatever --min-scaling says, so a
        // warning must not send the user to --min-scaling.
        assert!(!hint(&o).contains("--min-scaling"), "{}", hint(&o));
        let o = evaluate(&gpu_run(8, 0.7, 2.0), &gpu());
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(!hint(&o).contains("--min-scaling"), "{}", hint(&o));
    }

    #[test]
    fn a_straggler_warns_naming_its_gpu() {
        let mut facts = gpu_run(8, 0.9, 2.0);
        facts.ranks[5].fwd_bwd_local_p50_ms = 30.0 * 1.3;
        let o = evaluate(&facts, &gpu());
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.ends_with(
                "; straggler: rank 5 on cuda:5 NVIDIA H100 80GB HBM3 \
                 (GPU-00000005-aaaa-bbbb-cccc-dddddddddddd) computes 1.30x slower than the \
                 median rank"
            ),
            "{}",
            o.summary
        );
        assert!(hint(&o).starts_with("DDP runs every step at the pace of its slowest rank"));
        assert_eq!(o.devices[5].status, Status::Warn);
        assert!(o.devices[5].summary.contains("straggler: 1.30x"));
        assert_eq!(o.devices[4].status, Status::Pass);
    }

    #[test]
    fn a_rank_just_under_the_straggler_ratio_passes() {
        let mut facts = gpu_run(8, 0.9, 2.0);
        facts.ranks[5].fwd_bwd_local_p50_ms = 30.0 * 1.14;
        assert_eq!(evaluate(&facts, &gpu()).status, Status::Pass);
    }

    #[test]
    fn diverged_ranks_fail_on_gpus_and_on_cpus() {
        let mut facts = gpu_run(4, 0.95, 2.0);
        facts.ranks[2].param_hash = "0000000000000001".to_string();
        let o = evaluate(&facts, &gpu());
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "ranks diverged: gradients are not being synchronised (rank 2 ended with parameters \
             different from rank 0's after 25 synchronised steps)"
        );
        assert!(hint(&o).contains("all_reduce_perf -c 1"), "{}", hint(&o));
        assert_eq!(o.devices[2].status, Status::Fail);
        assert!(o.facts["sync_verification"]
            .to_string()
            .starts_with("failed: rank 2"));

        let mut facts = cpu_run(0.6);
        facts.ranks[1].param_sum = facts.ranks[1].param_sum.map(|s| s + 1e-9);
        let o = evaluate(&facts, &Thresholds::new(None, false));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.starts_with("ranks diverged"), "{}", o.summary);
    }

    #[test]
    fn non_finite_parameters_fail() {
        let mut facts = gpu_run(2, 0.95, 2.0);
        for r in &mut facts.ranks {
            r.param_sum = None;
        }
        let o = evaluate(&facts, &gpu());
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "training produced NaN or infinite parameters on ranks 0, 1"
        );
        assert!(hint(&o).contains("dcgmi diag"), "{}", hint(&o));
        assert!(o.devices.iter().all(|d| d.status == Status::Fail));
        // The payload writes NaN as null.
        let p = parse_records(
            "@@gpucheck-ddp@@ {\"rank\":0,\"local_rank\":0,\"device_name\":\"cpu\",\"wall_s\":1.0,\
             \"step_p50_ms\":1.0,\"step_p95_ms\":1.0,\"fwd_bwd_sync_p50_ms\":1.0,\
             \"fwd_bwd_local_p50_ms\":1.0,\"param_sum\":null,\"param_hash\":\"0\",\"kind\":\"rank\"}",
        );
        assert_eq!(p.ranks[0].param_sum, None);
    }

    #[test]
    fn cpu_runs_are_reported_not_judged() {
        let mut facts = cpu_run(0.3);
        facts.ranks[1].fwd_bwd_local_p50_ms *= 2.0;
        let o = evaluate(&facts, &Thresholds::new(None, false));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "600 samples/s on 2 CPU ranks (gloo) vs 1000 on 1 (0.60x, efficiency 0.30); \
             parameters identical on all ranks; report only on CPUs"
        );
        assert_eq!(o.hint, None);
        assert_eq!(o.metric("efficiency_fail_below"), None);
        assert!(o.devices.iter().all(|d| d.status == Status::Pass));
        assert_eq!(o.devices[0].name, "cpu");
        assert_eq!(o.devices[0].label.as_deref(), Some("rank 0"));
        assert_eq!(o.devices[0].uuid, None);
    }

    #[test]
    fn one_rank_has_nothing_to_scale() {
        let o = evaluate(&gpu_run(1, 0.97, 0.0), &gpu());
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.starts_with("970 samples/s on 1 rank (nccl) under DDP vs 1000 without; one process, so nothing to scale"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn missing_ranks_or_throughput_are_errors() {
        let mut facts = gpu_run(4, 0.9, 2.0);
        facts.ranks.remove(3);
        let o = evaluate(&facts, &gpu());
        assert_eq!(o.status, Status::Error);
        assert_eq!(
            o.summary,
            "the benchmark finished without results for rank 3"
        );

        let mut facts = gpu_run(4, 0.9, 2.0);
        facts.single.samples_per_s = 0.0;
        assert_eq!(evaluate(&facts, &gpu()).status, Status::Error);
    }

    #[test]
    fn comm_wait_share_is_the_exposed_all_reduce() {
        let r = gpu_rank(0, 30.0, 10.0);
        assert!((r.comm_wait_share() - 10.0 / 45.0).abs() < 1e-12);
        // Noise can make no_sync steps slower than synced ones: never negative.
        let mut r = gpu_rank(0, 30.0, 0.0);
        r.fwd_bwd_local_p50_ms = 31.0;
        assert_eq!(r.comm_wait_share(), 0.0);
    }

    #[test]
    fn the_check_is_a_child_isolated_full_profile_check() {
        let c = Benchmark;
        assert_eq!(c.profile(), Profile::Full);
        assert_eq!(c.isolation(), Isolation::Child);
        assert_eq!(c.timeout(), Duration::from_secs(180));
        assert!(c.timeout_hint().contains("TORCH_DISTRIBUTED_DEBUG=DETAIL"));
        assert!(crate::find("ddp.benchmark").is_some());
        let first = c.explain().split("\n\n").next().unwrap();
        assert!(!first.contains('\n') && first.ends_with('.'), "{first}");
    }
}

//! `nccl.allreduce`: a real all-reduce over every visible GPU, verified
//! element by element and judged against the topology's bus bandwidth.

mod reference;

pub use reference::{
    expected_busbw, expected_busbw_for, link_facts, Expectation, NvLinkFacts, PcieFacts,
    TopologyFacts,
};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::library::{evaluate_library, winner};
use super::INSTALL_HINT;
use crate::domain::compat;
use crate::domain::text::{gpu_count, list_cut, plural};
use crate::facts::cuda::driver_cuda_for_run;
use crate::facts::nccl::NcclChoice;
use crate::facts::nvml::gpus_for_run;
use crate::facts::xid::XidHistory;
use crate::probe::nccl::{
    self as probe, AllReduceFailure, AllReducePlan, AllReduceRun, SizeResult,
};
use crate::probe::nvml as nv;
use crate::{
    Cause, Check, Context, DataTable, DeviceResult, Isolation, Metric, Outcome, Profile, Status,
};

/// `nccl.allreduce`: a real all-reduce over every visible GPU.
pub struct AllReduce;

/// The message size the standard profile runs and the smallest size whose
/// bandwidth is judged: small messages are latency-bound (facts.md, "judge
/// bandwidth at >= 256 MiB").
pub const STANDARD_BYTES: u64 = 256 << 20;
/// The full profile's sweep, like all_reduce_perf -b 8 -e 1G -f 2.
pub const SWEEP_MIN_BYTES: u64 = 8;
pub const SWEEP_MAX_BYTES: u64 = 1 << 30;
/// Below this fraction of the expected bus bandwidth: warn (nccl-tests fails a
/// run below 0.9x of NCCL_TESTS_MIN_BW; facts.md).
pub const WARN_RATIO: f64 = 0.9;
/// Below this fraction: fail (half the bandwidth is a broken link or a
/// fallback transport, not noise).
pub const FAIL_RATIO: f64 = 0.5;
/// Share of the check's timeout after which no new size is started, leaving
/// the rest for the size in flight, verification and teardown.
const DEADLINE_SHARE: f64 = 0.6;
/// Share of the check's timeout after which a collective still running is
/// aborted and reported as stuck (before the runner kills the child, so
/// the verdict names the GPUs that never finished).
pub const GIVE_UP_SHARE: f64 = 0.85;
/// Time to spend per message size (warm-up + timed loop).
const STANDARD_BUDGET: Duration = Duration::from_secs(3);
const SWEEP_BUDGET: Duration = Duration::from_millis(800);

/// Message sizes for a profile: 256 MiB, or 8 B .. 1 GiB by factors of two.
pub fn plan_sizes(profile: Profile) -> Vec<u64> {
    match profile {
        Profile::Full => std::iter::successors(Some(SWEEP_MIN_BYTES), |b| Some(b * 2))
            .take_while(|&b| b <= SWEEP_MAX_BYTES)
            .collect(),
        _ => vec![STANDARD_BYTES],
    }
}

/// nccl-tests' definitions (src/all_reduce.cu, doc/PERFORMANCE.md):
/// algbw = bytes / time; busbw = algbw x 2(n-1)/n, the traffic each rank's
/// links carry in a ring all-reduce, comparable across rank counts. GB/s are
/// 1e9 bytes per second. Returns (algbw, busbw).
pub fn bandwidth_gbps(bytes: u64, seconds: f64, nranks: u32) -> (f64, f64) {
    if seconds <= 0.0 || nranks == 0 {
        return (0.0, 0.0);
    }
    let algbw = bytes as f64 / seconds / 1e9;
    let n = f64::from(nranks);
    (algbw, algbw * 2.0 * (n - 1.0) / n)
}

/// Everything nccl.allreduce judges.
#[derive(Debug, Clone, PartialEq)]
pub struct AllReduceFacts {
    pub run: AllReduceRun,
    pub topology: TopologyFacts,
    pub nccl_path: String,
}

/// User-set limits.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AllReduceThresholds {
    /// `--min-busbw GBPS`: an explicit floor replacing the topology's figure.
    pub min_busbw_gbps: Option<f64>,
}

const WRONG_HINT: &str = "the GPUs or the links between them corrupt data. Check \
     `nvidia-smi -q -d ECC` and `dmesg` for Xid errors (gpu.ecc), and run again with \
     NCCL_P2P_DISABLE=1: if that passes, peer-to-peer over PCIe is broken (PCIe ACS or the IOMMU \
     redirecting P2P: disable ACS, or boot with iommu=pt). Do not train on this machine until it \
     passes";

const SLOW_HINT: &str = "look for what slows the links: `nvidia-smi topo -m` (GPUs meeting at \
     SYS/PHB instead of NV#/PIX), gpu.topology and gpu.pcie above (P2P unavailable, a link at x8 \
     or an older generation), NVLink errors (`nvidia-smi nvlink -e`), NCCL_P2P_DISABLE / \
     NCCL_SHM_DISABLE / NCCL_ALGO in the environment (nccl.env), other jobs on the GPUs \
     (gpu.processes); NCCL_DEBUG=INFO shows the transport NCCL chose. Compare with nccl-tests' \
     all_reduce_perf";

fn size_row(r: &SizeResult, nranks: u32) -> Vec<String> {
    let (algbw, busbw) = bandwidth_gbps(r.bytes, r.time_us / 1e6, nranks);
    vec![
        r.bytes.to_string(),
        r.count.to_string(),
        "float".to_string(),
        format!("{:.1}", r.time_us),
        format!("{algbw:.2}"),
        if nranks > 1 {
            format!("{busbw:.2}")
        } else {
            "n/a".to_string()
        },
        r.wrong.to_string(),
    ]
}

fn sweep_table(run: &AllReduceRun) -> DataTable {
    let n = run.gpus.len() as u32;
    DataTable {
        title: format!("NCCL all-reduce, float32 sum, {}", gpu_count(n as usize)),
        header: [
            "size (B)",
            "count",
            "type",
            "time (us)",
            "algbw (GB/s)",
            "busbw (GB/s)",
            "#wrong",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows: run.results.iter().map(|r| size_row(r, n)).collect(),
        legend: Some(
            "algbw = size / time; busbw = algbw x 2(n-1)/n (nccl-tests' definitions, so the \
             numbers compare with all_reduce_perf); time is the mean of the timed iterations, \
             slowest GPU"
                .to_string(),
        ),
    }
}

/// The algorithm NCCL's tuning log says it chose for `bytes`, if it said.
fn algorithm_at(run: &AllReduceRun, bytes: u64) -> Option<&str> {
    run.tuning
        .iter()
        .rev()
        .find(|c| c.bytes == bytes)
        .map(|c| c.algorithm.as_str())
}

/// How a size measures up: its busbw over the reference for its size and
/// algorithm, or, without a reference, its busbw.
fn size_score(facts: &AllReduceFacts, r: &SizeResult) -> f64 {
    let n = facts.run.gpus.len() as u32;
    let (_, busbw) = bandwidth_gbps(r.bytes, r.time_us / 1e6, n);
    match expected_busbw_for(&facts.topology, algorithm_at(&facts.run, r.bytes), r.bytes) {
        Some(e) if e.busbw_gbps > 0.0 => busbw / e.busbw_gbps,
        _ => busbw,
    }
}

/// The size whose bandwidth is judged: among sizes of at least
/// [`STANDARD_BYTES`], the one closest to (or furthest above) the reference
/// for its own size and algorithm; with an explicit floor and nothing that
/// large (too little GPU memory), the largest size that ran.
fn judged_size(facts: &AllReduceFacts, explicit_floor: bool) -> Option<&SizeResult> {
    let mut timed = facts.run.results.iter().filter(|r| r.time_us > 0.0);
    let best = timed
        .clone()
        .filter(|r| r.bytes >= STANDARD_BYTES)
        .max_by(|a, b| size_score(facts, a).total_cmp(&size_score(facts, b)));
    match best {
        Some(r) => Some(r),
        None if explicit_floor => timed.next_back(),
        None => None,
    }
}

fn device_rows(run: &AllReduceRun) -> Vec<DeviceResult> {
    run.gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let wrong: u64 = run
                .results
                .iter()
                .filter_map(|r| r.wrong_per_rank.get(i))
                .sum();
            let metrics = g
                .free_bytes
                .map(|free| Metric::new("free_memory", (free >> 20) as f64, "MiB"))
                .into_iter()
                .collect();
            DeviceResult {
                index: g.ordinal,
                label: None,
                name: g.name.clone(),
                uuid: None,
                status: if wrong > 0 {
                    Status::Fail
                } else {
                    Status::Pass
                },
                summary: if wrong > 0 {
                    format!("{wrong} wrong element{}", plural(wrong as usize))
                } else {
                    "results verified".to_string()
                },
                metrics,
            }
        })
        .collect()
}

fn gpu_label(run: &AllReduceRun) -> String {
    let n = run.gpus.len();
    let first = run.gpus.first().map(|g| g.name.as_str()).unwrap_or("GPU");
    if run.gpus.iter().all(|g| g.name == first) {
        format!("{n}x {first}")
    } else {
        let names: Vec<&str> = run.gpus.iter().map(|g| g.name.as_str()).collect();
        names.join(" + ")
    }
}

/// Judge a completed all-reduce run: wrong data outranks everything, then
/// the bus bandwidth against an explicit floor or the topology's reference.
pub fn evaluate_allreduce(facts: &AllReduceFacts, th: &AllReduceThresholds) -> Outcome {
    let run = &facts.run;
    let judged = if run.results.is_empty() {
        Outcome::fail(
            "no all-reduce size finished inside the time budget",
            SLOW_HINT,
        )
    } else if let Some(wrong) = wrong_data(run) {
        wrong
    } else {
        judge_bandwidth(facts, th)
    };
    with_run(judged, facts)
}

/// What every verdict on a run carries: the library, the GPUs, the sweep
/// table, the sizes left out and one row per GPU.
fn with_run(outcome: Outcome, facts: &AllReduceFacts) -> Outcome {
    let run = &facts.run;
    let mut o = outcome
        .with_fact("nccl_path", facts.nccl_path.clone())
        .with_fact("gpus", gpu_label(run))
        .with_metric("gpus", run.gpus.len() as f64, "count")
        .with_table(sweep_table(run));
    if let Some(v) = run.nccl_version {
        o = o.with_fact("nccl_version", v.to_string());
    }
    let sizes = |bytes: &[u64]| -> String {
        let sizes: Vec<String> = bytes.iter().map(|&b| probe::format_bytes(b)).collect();
        sizes.join(", ")
    };
    if !run.skipped_for_memory.is_empty() {
        o = o.with_fact("sizes_skipped_for_memory", sizes(&run.skipped_for_memory));
    }
    if !run.skipped_for_time.is_empty() {
        o = o.with_fact("sizes_skipped_for_time", sizes(&run.skipped_for_time));
    }
    if let Some(choice) = algorithm_at_largest(run) {
        o = o.with_fact("nccl_algorithm", choice);
    }
    o.devices = device_rows(run);
    o
}

/// "NVLS, protocol Simple, at 256 MiB": what NCCL's tuning log says it chose
/// for the largest size that ran (the one bandwidth is judged at).
fn algorithm_at_largest(run: &AllReduceRun) -> Option<String> {
    let largest = run.results.last()?.bytes;
    let c = run.tuning.iter().rev().find(|c| c.bytes == largest)?;
    Some(format!(
        "{}, protocol {}, at {}",
        c.algorithm,
        c.protocol,
        probe::format_bytes(largest)
    ))
}

/// A failure naming the first wrong element, when any element was wrong.
fn wrong_data(run: &AllReduceRun) -> Option<Outcome> {
    let n = run.gpus.len() as u64;
    let total_wrong: u64 = run.results.iter().map(|r| r.wrong).sum();
    if total_wrong == 0 {
        return None;
    }
    let detail = run
        .results
        .iter()
        .find(|r| r.wrong > 0)
        .and_then(|r| r.first_wrong.map(|w| (r, w)))
        .map(|(r, w)| {
            format!(
                "{} of {} elements wrong at {} (first: GPU {}, element {}: got {}, expected {})",
                r.wrong,
                r.count * n,
                probe::format_bytes(r.bytes),
                w.rank,
                w.index,
                w.got,
                w.expected
            )
        })
        .unwrap_or_else(|| format!("{total_wrong} elements wrong"));
    Some(
        Outcome::fail(
            format!("all-reduce returned wrong data: {detail}"),
            WRONG_HINT,
        )
        .with_metric("wrong_elements", total_wrong as f64, "count"),
    )
}

/// The bandwidth verdict on a run whose results were right, with the
/// judged size's numbers.
fn judge_bandwidth(facts: &AllReduceFacts, th: &AllReduceThresholds) -> Outcome {
    let run = &facts.run;
    let n = run.gpus.len() as u32;
    let judged_opt = judged_size(facts, th.min_busbw_gbps.is_some());
    // Without a judged size (too little memory for 256 MiB), still show the
    // largest size's numbers.
    let Some(judged) = judged_opt.or_else(|| run.results.iter().rev().find(|r| r.time_us > 0.0))
    else {
        return Outcome::error("the all-reduce ran but CUDA events reported no time");
    };
    // Measured again when low: the verdict is the median run's.
    let runs = runs_of(run, judged);
    let judged = if judged_opt.is_some() {
        median_run(&runs)
    } else {
        judged
    };
    let (algbw, busbw) = bandwidth_gbps(judged.bytes, judged.time_us / 1e6, n);
    let size = probe::format_bytes(judged.bytes);
    let nccl = run
        .nccl_version
        .map(|v| format!("NCCL {v}"))
        .unwrap_or_else(|| "NCCL".to_string());
    let measured = format!("busbw {busbw:.1} GB/s at {size} over {n} GPUs ({nccl})");
    let verdict = if n == 1 {
        Outcome::pass(format!(
            "{nccl} initialised and ran a verified all-reduce on 1 GPU ({:.0} us at {size}); bus \
             bandwidth is not meaningful with one GPU",
            judged.time_us
        ))
    } else if judged_opt.is_none() {
        Outcome::pass(format!(
            "{measured}, results verified; bandwidth not judged: the largest size that fit in \
             free GPU memory was {size} (< {})",
            probe::format_bytes(STANDARD_BYTES)
        ))
    } else if let Some(floor) = th.min_busbw_gbps {
        against_floor(&measured, busbw, floor)
    } else {
        against_reference(&measured, busbw, facts, judged.bytes)
    };
    let mut verdict = verdict;
    if runs.len() > 1 && judged_opt.is_some() && n > 1 {
        let low = runs.iter().filter(|r| is_low(facts, th, r)).count();
        verdict.summary.push_str(&format!(
            "; low in {low} of {} runs (the median counts)",
            runs.len()
        ));
        verdict = verdict
            .with_metric("runs", runs.len() as f64, "count")
            .with_metric("low_runs", low as f64, "count");
    }
    let o = verdict
        .with_metric("algbw_gbps", algbw, "GB/s")
        .with_metric("time_us", judged.time_us, "us")
        .with_metric("message_bytes", judged.bytes as f64, "B");
    if n > 1 {
        o.with_metric("busbw_gbps", busbw, "GB/s")
    } else {
        o
    }
}

/// Runs of a judged figure in all: a figure under its threshold is measured
/// again before it fails, and the median of three runs decides, so one
/// noisy reading (another job's burst, a clock ramping up) never fails a
/// node and one lucky reading never passes one (the complaint about
/// single-sample gates in DCGM's and Azure's health-check trackers).
pub const REPEAT_RUNS: usize = 3;

/// Every run of the judged size: the first pass's and the repeats.
fn runs_of<'a>(run: &'a AllReduceRun, judged: &'a SizeResult) -> Vec<&'a SizeResult> {
    std::iter::once(judged)
        .chain(run.repeats.iter().filter(|r| r.bytes == judged.bytes))
        .collect()
}

/// The run with the median bus bandwidth (the faster of the middle two).
fn median_run<'a>(runs: &[&'a SizeResult]) -> &'a SizeResult {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| b.time_us.total_cmp(&a.time_us));
    sorted[sorted.len() / 2]
}

/// Whether a run's bus bandwidth is under its threshold: `--min-busbw`,
/// else [`WARN_RATIO`] of the reference for its size and algorithm.
fn is_low(facts: &AllReduceFacts, th: &AllReduceThresholds, r: &SizeResult) -> bool {
    let n = facts.run.gpus.len() as u32;
    let (_, busbw) = bandwidth_gbps(r.bytes, r.time_us / 1e6, n);
    if let Some(floor) = th.min_busbw_gbps {
        return busbw < floor;
    }
    expected_busbw_for(&facts.topology, algorithm_at(&facts.run, r.bytes), r.bytes)
        .is_some_and(|e| busbw < WARN_RATIO * e.busbw_gbps)
}

/// The size to measure again: the judged one, while its first run is under
/// its threshold and fewer than [`REPEAT_RUNS`] ran. None for wrong data
/// (that fails as it is), one GPU or an unjudged run.
pub fn repeat_size(facts: &AllReduceFacts, th: &AllReduceThresholds) -> Option<u64> {
    let run = &facts.run;
    if run.gpus.len() < 2 || wrong_data(run).is_some() {
        return None;
    }
    let judged = judged_size(facts, th.min_busbw_gbps.is_some())?;
    let runs = runs_of(run, judged);
    (runs.len() < REPEAT_RUNS && is_low(facts, th, judged)).then_some(judged.bytes)
}

/// Bus bandwidth against `--min-busbw`.
fn against_floor(measured: &str, busbw: f64, floor: f64) -> Outcome {
    let o = if busbw < floor {
        Outcome::fail(
            format!("{measured}, below --min-busbw {floor:.1}"),
            SLOW_HINT,
        )
    } else {
        Outcome::pass(format!(
            "{measured}, results verified; at least --min-busbw {floor:.1}"
        ))
    };
    o.with_metric("min_busbw_gbps", floor, "GB/s")
}

/// Bus bandwidth against what this topology should reach: below
/// [`FAIL_RATIO`] fails, below [`WARN_RATIO`] warns.
fn against_reference(measured: &str, busbw: f64, facts: &AllReduceFacts, bytes: u64) -> Outcome {
    let algorithm = algorithm_at(&facts.run, bytes);
    let Some(expect) = expected_busbw_for(&facts.topology, algorithm, bytes) else {
        return Outcome::pass(format!(
            "{measured}, results verified; not judged: no reference figure for {} (set one \
             with --min-busbw GBPS)",
            gpu_label(&facts.run)
        ));
    };
    let ratio = busbw / expect.busbw_gbps;
    let reference = format!(
        "expected about {:.0} GB/s ({})",
        expect.busbw_gbps, expect.basis
    );
    let o = if ratio < FAIL_RATIO {
        Outcome::fail(
            format!("{measured}: {:.0}% of the {reference}", ratio * 100.0),
            SLOW_HINT,
        )
    } else if ratio < WARN_RATIO {
        Outcome::warn(
            format!("{measured}: {:.0}% of the {reference}", ratio * 100.0),
            SLOW_HINT,
        )
    } else {
        Outcome::pass(format!("{measured}, results verified; {reference}"))
    };
    o.with_metric("expected_busbw_gbps", expect.busbw_gbps, "GB/s")
        .with_fact("busbw_reference", expect.basis)
}

/// A CUDA error inside this check's own test program is not by itself
/// evidence of a broken GPU (the test's own memory or NCCL's use of it can
/// raise one on a healthy machine), so the hint asks for the evidence that
/// would call for a reset instead of prescribing one.
const PROBE_CUDA_ERROR_HINT: &str =
    "a CUDA error inside gpucheck's own test does not by itself mean the GPU is broken: look for \
     Xid errors since boot (fabric.xid, `sudo dmesg | grep -i xid`) and the GPU's state in \
     `nvidia-smi -q` (gpu.ecc, gpu.driver); run again with NCCL_DEBUG=WARN, and with \
     NCCL_P2P_DISABLE=1 to see whether GPU peer-to-peer is involved";

/// A CUDA error (other than out of memory) in this check's own program:
/// "reset" only with an Xid since boot that calls for one.
fn cuda_failure(failure: &AllReduceFailure, xids: Option<&XidHistory>) -> Outcome {
    let AllReduceFailure::Cuda { step, gpu, error } = failure else {
        return evaluate_failure(failure);
    };
    let on = gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default();
    let summary = format!("CUDA could not {step}{on}: {error}");
    let evidence: Vec<String> = xids
        .map(|x| x.needing_reset())
        .unwrap_or_default()
        .iter()
        .map(|e| match e.gpu {
            Some(g) => format!("Xid {} on GPU {g} ({})", e.code, e.pci),
            None => format!("Xid {} on the GPU at PCI {}", e.code, e.pci),
        })
        .collect();
    if evidence.is_empty() {
        return Outcome::fail(summary, PROBE_CUDA_ERROR_HINT);
    }
    Outcome::fail(
        summary,
        format!(
            "fabric.xid found {} since boot: NVIDIA's Xid catalog says a GPU named there must be \
             reset (`sudo nvidia-smi -r -i N` with nothing running on it) or the node rebooted \
             before it is trusted again",
            list_cut(&evidence, 3)
        ),
    )
}

/// cuInit answered CUDA_ERROR_STUB_LIBRARY: the libcuda loaded is the CUDA
/// toolkit's link-time stub, not the driver's.
pub fn stub_loaded(error: &str, library: &std::path::Path) -> Outcome {
    Outcome::fail(
        compat::stub_libcuda_summary(library, error),
        compat::stub_libcuda_hint(library),
    )
}

/// Turn a run that could not finish into a verdict.
pub fn evaluate_failure(failure: &AllReduceFailure) -> Outcome {
    evaluate_failure_with(failure, None)
}

/// [`evaluate_failure`] with what fabric.xid found since boot: a CUDA error
/// in this check's own program says "reset" only where an Xid after which
/// NVIDIA's catalog calls for a reset backs it.
pub fn evaluate_failure_with(failure: &AllReduceFailure, xids: Option<&XidHistory>) -> Outcome {
    if let AllReduceFailure::Cuda { error, .. } = failure {
        if !error.contains("OUT_OF_MEMORY") {
            return cuda_failure(failure, xids);
        }
    }
    match failure {
        AllReduceFailure::NoDriver => Outcome::skip(
            "no NVIDIA driver: libcuda.so.1 cannot be loaded, so there is no GPU to run NCCL on",
        ),
        AllReduceFailure::NoGpu => Outcome::skip(
            "CUDA sees no GPU (check CUDA_VISIBLE_DEVICES and env.cuda_visible_devices)",
        ),
        AllReduceFailure::DriverInit {
            error,
            library: Some(lib),
        } if error.contains("STUB_LIBRARY") => stub_loaded(error, lib),
        AllReduceFailure::DriverInit { error, .. } => Outcome::fail(
            format!("the CUDA driver did not initialise (cuInit: {error})"),
            "see cuda.driver for the cause and its fix (`gpucheck --only cuda.driver`)",
        ),
        AllReduceFailure::NcclLoad { path, detail } => Outcome::fail(
            format!("cannot use NCCL from {}: {detail}", path.display()),
            INSTALL_HINT,
        ),
        AllReduceFailure::Cuda { step, gpu, error } => {
            let on = gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default();
            Outcome::fail(
                format!("CUDA could not {step}{on}: {error}"),
                "another process holds the GPU's memory (gpu.processes, `nvidia-smi`); stop it \
                 or pick other GPUs with CUDA_VISIBLE_DEVICES",
            )
        }
        AllReduceFailure::Nccl {
            step,
            code,
            message,
            last_error,
        } => {
            let why = last_error
                .as_ref()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default();
            Outcome::fail(
                format!("{step} failed: {message}{why}"),
                "run again with NCCL_DEBUG=WARN (INFO for the full story) to read NCCL's reason. \
                 Common causes: /dev/shm too small in a container (`--shm-size=1g` or \
                 `--ipc=host`; host.shm), GPU peer-to-peer blocked by PCIe ACS or the IOMMU \
                 (retry with NCCL_P2P_DISABLE=1 to confirm), a mismatched or broken NCCL \
                 install (nccl.library), NCCL_* settings naming interfaces that do not exist \
                 (nccl.env)",
            )
            .with_fact("nccl_error_code", *code)
        }
        AllReduceFailure::Stuck { step, gpus, waited } => Outcome::fail(
            format!(
                "{step} had not completed on GPU {} after {:.0} s, and NCCL reported no error; \
                 the communicators were aborted",
                gpus.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                waited.as_secs_f64()
            ),
            "NCCL hung without an error. Run again with NCCL_DEBUG=WARN (INFO for more) to see \
             where; retry with NCCL_P2P_DISABLE=1 to see whether GPU peer-to-peer (PCIe ACS, \
             the IOMMU) is involved, check `dmesg` for Xid errors and `nvidia-smi topo -m`; on a \
             slow box give it longer with --timeout SECS",
        ),
        AllReduceFailure::NoMemory { gpu, free_bytes } => Outcome::fail(
            format!(
                "GPU {gpu} has only {} MiB free: not enough for NCCL and the test buffers",
                free_bytes >> 20
            ),
            "another process holds the GPU's memory (gpu.processes, `nvidia-smi`); stop it or \
             pick other GPUs with CUDA_VISIBLE_DEVICES",
        ),
    }
}

/// A skip when cuda.driver found the devices CUDA enumerates unusable (its
/// fact carries a failure); a GPU it does not enumerate is no reason to
/// skip: the all-reduce runs on the others.
fn driver_unusable(ctx: &Context) -> Option<Outcome> {
    let driver = driver_cuda_for_run(ctx)?;
    driver.failure.as_ref()?;
    Some(
        Outcome::skip("needs cuda.driver, which failed").with_cause(Cause::NeedsFailed {
            need: "cuda.driver".to_string(),
        }),
    )
}

/// The NCCL library to run: the one nccl.library chose in this run, else
/// found the same way now.
fn nccl_to_run(ctx: &Context) -> Result<PathBuf, Box<Outcome>> {
    if let Some(choice) = ctx.fact::<NcclChoice>() {
        return Ok(choice.path);
    }
    let facts = probe::library_facts(
        ctx.options.nccl_lib.as_deref(),
        ctx.options.python.as_deref(),
    );
    match winner(&facts) {
        Some(c) if !facts.explicit_missing => Ok(c.path.clone()),
        _ => Err(Box::new(evaluate_library(&facts, None))),
    }
}

/// Topology facts for the GPUs that ran: names from CUDA; NVLink and PCIe
/// from NVML, matched to the CUDA devices by UUID (CUDA's order and
/// CUDA_VISIBLE_DEVICES differ from NVML's indices). Without NVML, or when
/// a GPU cannot be matched, names only.
fn topology(run: &AllReduceRun, ctx: &Context) -> TopologyFacts {
    let mut t = TopologyFacts {
        gpu_names: run.gpus.iter().map(|g| g.name.clone()).collect(),
        nvlink: None,
        pcie: None,
    };
    let Some(uuids) = run
        .gpus
        .iter()
        .map(|g| g.uuid.clone())
        .collect::<Option<Vec<String>>>()
    else {
        return t;
    };
    let Ok(infos) = gpus_for_run(ctx) else {
        return t;
    };
    let nvml_lib = ctx.options.nvml_lib.as_deref();
    crate::probe::stage("NVML topology");
    let Some(indices) = uuids
        .iter()
        .map(|u| infos.iter().find(|g| g.uuid == *u).map(|g| g.index))
        .collect::<Option<Vec<u32>>>()
    else {
        return t;
    };
    let pcie = nv::pcie(nvml_lib).unwrap_or_default();
    let topo = nv::topology(nvml_lib).ok();
    (t.nvlink, t.pcie) = link_facts(&indices, &infos, &pcie, topo.as_ref());
    t
}

impl Check for AllReduce {
    fn id(&self) -> &'static str {
        "nccl.allreduce"
    }
    fn title(&self) -> &'static str {
        "NCCL all-reduce"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn needs(&self) -> &'static [&'static str] {
        // Not cuda.driver: its verdict fails for a GPU CUDA does not
        // enumerate, and the all-reduce still runs on the ones it does;
        // run() reads its fact instead (driver_unusable).
        &["nccl.library"]
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn timeout_hint(&self) -> String {
        "NCCL hung. On one machine the usual cause is GPU peer-to-peer traffic blocked by PCIe ACS \
         or the IOMMU: retry with NCCL_P2P_DISABLE=1 to confirm (if that passes, disable ACS or \
         boot with iommu=pt). Run with NCCL_DEBUG=WARN (INFO for more) to see NCCL's log, check \
         `dmesg` for Xid errors and `nvidia-smi topo -m`; on a slow box give it longer with \
         --timeout SECS"
            .to_string()
    }
    fn explain(&self) -> &'static str {
        "Runs a real NCCL all-reduce over every visible GPU, checks every element of the result and \
judges the bus bandwidth against what this topology should reach.\n\n\
One process builds a communicator over all visible GPUs (ncclCommInitAll), fills float32 buffers \
with a rank-specific integer pattern so the sum is exact, warms up, then times the all-reduce \
with CUDA events and copies every GPU's result back to compare each element. It reports time, \
algbw = bytes / time and busbw = algbw x 2(n-1)/n, the definitions nccl-tests uses, so the \
numbers compare with all_reduce_perf. The standard profile runs one 256 MiB message; the full \
profile sweeps 8 B to 1 GiB by factors of two (latency at small sizes, bandwidth at large) and \
reports a per-size table. Sizes that do not fit twice in free GPU memory are left out.\n\n\
Why it matters for DDP: DDP is an all-reduce of the gradients every step. A hang here is a hang \
at the first backward pass; a wrong sum is silent corruption of the model; a bus bandwidth far \
below the hardware's is every step running slow on a 1,000-GPU-hour job.\n\n\
Verdicts: wrong results fail. Bus bandwidth (judged at 256 MiB or more, at the size that comes \
closest to its own reference) below 90% of the expected figure warns (nccl-tests' own \
NCCL_TESTS_MIN_BW rule) and below 50% fails. The expected figure is per message size and \
algorithm: on 8x H100/H200 SXM about 450 GB/s only when NCCL's tuning log shows NVLink SHARP \
(NVLS, NVLSTree) at 1 GiB or more (NVLS reaches its peak only with large messages), else Ring's \
about 370 — also when NCCL did not log its choice (NCCL 2.18 and 2.19 do not; a user's \
NCCL_DEBUG settings replace the log gpucheck asks for). The algorithm and protocol NCCL chose \
are recorded as the fact nccl_algorithm, read from NCCL_DEBUG_SUBSYS=TUNING in both of NCCL's \
spellings (NCCL >= 2.24: RING, NVLS_TREE, COLLNET_DIRECT, COLLNET_CHAIN, PAT). 8x A100 SXM about \
230; other machines are judged from the NVLink or PCIe links; --min-busbw GBPS sets an explicit \
floor instead. A bus bandwidth under its threshold is measured twice more on the same \
communicators and the median of the three runs decides, so one noisy reading never fails a \
node; the verdict then says how many runs were low (low in 1 of 3 runs). \
With one GPU the all-reduce still exercises NCCL's init and kernels, but bus bandwidth is not \
meaningful. While a collective runs, the streams (cuStreamQuery) and every communicator's \
asynchronous error (ncclCommGetAsyncError) are polled together, as NCCL's documentation and \
nccl-tests do: a network or peer error fails with NCCL's own error and last-error text and the \
communicators are aborted (ncclCommAbort), instead of hanging in cuStreamSynchronize; a \
collective still running at 85% of the timeout with no error from NCCL is aborted and reported \
with the GPUs that never finished; a hang inside an NCCL call is killed at the timeout and \
reported with the step it hung in.\n\n\
Fixes: for hangs and wrong data, retry with NCCL_P2P_DISABLE=1 — if that works, GPU P2P is \
broken by PCIe ACS or the IOMMU (disable ACS, iommu=pt); NCCL_DEBUG=WARN shows NCCL's reason. For \
low bandwidth, see gpu.topology, gpu.pcie and nccl.env, and `nvidia-smi topo -m`."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        // No driver: say so before looking for NCCL.
        if !crate::probe::cuda::libcuda_present() {
            return evaluate_failure(&AllReduceFailure::NoDriver);
        }
        if let Some(skip) = driver_unusable(ctx) {
            return skip;
        }
        let nccl_lib = match nccl_to_run(ctx) {
            Ok(p) => p,
            Err(o) => return *o,
        };
        let timeout_s = if ctx.options.timeout_s > 0.0 {
            ctx.options.timeout_s
        } else {
            self.timeout().as_secs_f64()
        };
        let profile = ctx.options.profile;
        let plan = AllReducePlan {
            nccl_lib: nccl_lib.clone(),
            sizes: plan_sizes(profile),
            budget_per_size: if profile == Profile::Full {
                SWEEP_BUDGET
            } else {
                STANDARD_BUDGET
            },
            deadline: Some(Instant::now() + Duration::from_secs_f64(timeout_s * DEADLINE_SHARE)),
            give_up: Some(Instant::now() + Duration::from_secs_f64(timeout_s * GIVE_UP_SHARE)),
        };
        let th = AllReduceThresholds {
            min_busbw_gbps: ctx.options.min_busbw_gbps,
        };
        let nccl_path = nccl_lib.display().to_string();
        let mut topo: Option<TopologyFacts> = None;
        let mut again = |run: &AllReduceRun| {
            let topology = topo.get_or_insert_with(|| topology(run, ctx)).clone();
            repeat_size(
                &AllReduceFacts {
                    run: run.clone(),
                    topology,
                    nccl_path: nccl_path.clone(),
                },
                &th,
            )
        };
        match probe::run_allreduce_again(&plan, &mut again) {
            Ok(run) => {
                let facts = AllReduceFacts {
                    topology: topo.unwrap_or_else(|| topology(&run, ctx)),
                    run,
                    nccl_path,
                };
                evaluate_allreduce(&facts, &th)
            }
            Err(f) => evaluate_failure_with(&f, ctx.fact::<XidHistory>().as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nccl::{GpuDesc, NcclVersion, WrongValue};
    use std::path::PathBuf;

    const WHEEL: &str = "/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2";

    fn v(major: u32, minor: u32, patch: u32) -> NcclVersion {
        NcclVersion {
            major,
            minor,
            patch,
        }
    }

    // ---- nccl.allreduce ---------------------------------------------------

    const MIB: u64 = 1 << 20;

    #[test]
    fn bus_bandwidth_matches_nccl_tests() {
        // 8 ranks, 256 MiB in 1.0 ms: algbw = 268435456 B / 1 ms = 268.4 GB/s,
        // busbw = algbw x 2*7/8 = 469.8 GB/s (nccl-tests all_reduce.cu).
        let (algbw, busbw) = bandwidth_gbps(256 * MIB, 1.0e-3, 8);
        assert!((algbw - 268.435456).abs() < 1e-9, "{algbw}");
        assert!((busbw - 469.762048).abs() < 1e-9, "{busbw}");
        // Two ranks: busbw = algbw; one rank: no bus traffic.
        let (a2, b2) = bandwidth_gbps(MIB, 1.0e-3, 2);
        assert!((a2 - b2).abs() < 1e-12);
        assert_eq!(bandwidth_gbps(MIB, 1.0e-3, 1).1, 0.0);
        assert_eq!(bandwidth_gbps(MIB, 0.0, 8), (0.0, 0.0));
    }

    #[test]
    fn profiles_pick_sizes() {
        assert_eq!(plan_sizes(Profile::Standard), vec![256 * MIB]);
        let sweep = plan_sizes(Profile::Full);
        assert_eq!(sweep.len(), 28);
        assert_eq!(sweep[0], 8);
        assert_eq!(*sweep.last().unwrap(), 1 << 30);
        assert!(sweep.windows(2).all(|w| w[1] == 2 * w[0]));
    }

    fn names(n: usize, name: &str) -> Vec<String> {
        vec![name.to_string(); n]
    }

    fn size(bytes: u64, time_us: f64, n: usize) -> SizeResult {
        SizeResult {
            bytes,
            count: bytes / 4,
            warmup_iters: 5,
            iters: 20,
            time_us,
            wrong: 0,
            wrong_per_rank: vec![0; n],
            first_wrong: None,
        }
    }

    fn facts(n: usize, name: &str, results: Vec<SizeResult>) -> AllReduceFacts {
        AllReduceFacts {
            run: AllReduceRun {
                gpus: (0..n as u32)
                    .map(|i| GpuDesc {
                        ordinal: i,
                        name: name.to_string(),
                        uuid: None,
                        free_bytes: Some(70 << 30),
                        total_bytes: Some(80 << 30),
                    })
                    .collect(),
                nccl_version: Some(v(2, 27, 7)),
                results,
                skipped_for_memory: vec![],
                skipped_for_time: vec![],
                tuning: vec![],
                repeats: vec![],
            },
            topology: TopologyFacts {
                gpu_names: names(n, name),
                ..Default::default()
            },
            nccl_path: WHEEL.to_string(),
        }
    }

    /// Time in us for `bytes` to reach `busbw` GB/s over `n` ranks.
    fn time_for(bytes: u64, busbw: f64, n: u32) -> f64 {
        let algbw = busbw * f64::from(n) / (2.0 * f64::from(n - 1));
        bytes as f64 / (algbw * 1e9) * 1e6
    }

    const H100: &str = "NVIDIA H100 80GB HBM3";

    #[test]
    fn allreduce_at_the_expected_bandwidth_passes() {
        let f = facts(
            8,
            H100,
            vec![size(256 * MIB, time_for(256 * MIB, 460.0, 8), 8)],
        );
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "busbw 460.0 GB/s at 256 MiB over 8 GPUs (NCCL 2.27.7), results verified; expected \
             about 370 GB/s (measured on 8x H100 SXM systems with Ring: NCCL did not log its \
             algorithm (450 GB/s needs NVLink SHARP at 1 GiB or more))"
        );
        assert!((o.metric("busbw_gbps").unwrap() - 460.0).abs() < 1e-6);
        assert_eq!(o.metric("expected_busbw_gbps"), Some(370.0));
        assert_eq!(o.facts["gpus"], "8x NVIDIA H100 80GB HBM3");
        assert_eq!(o.devices.len(), 8);
        assert!(o.devices.iter().all(|d| d.status == Status::Pass));
        let t = &o.tables[0];
        assert_eq!(t.header[5], "busbw (GB/s)");
        assert_eq!(t.rows[0][0], "268435456");
        assert_eq!(t.rows[0][1], "67108864");
        assert_eq!(t.rows[0][5], "460.00");
        assert_eq!(t.rows[0][6], "0");
    }

    #[test]
    fn allreduce_below_ninety_percent_warns_and_below_half_fails() {
        let f = facts(
            8,
            H100,
            vec![size(256 * MIB, time_for(256 * MIB, 300.0, 8), 8)],
        );
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "busbw 300.0 GB/s at 256 MiB over 8 GPUs (NCCL 2.27.7): 81% of the expected about \
             370 GB/s (measured on 8x H100 SXM systems with Ring: NCCL did not log its \
             algorithm (450 GB/s needs NVLink SHARP at 1 GiB or more))"
        );
        assert!(o.hint.unwrap().contains("nvidia-smi topo -m"));
        let f = facts(
            8,
            H100,
            vec![size(256 * MIB, time_for(256 * MIB, 100.0, 8), 8)],
        );
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains(": 27% of the expected"), "{}", o.summary);
    }

    #[test]
    fn allreduce_wrong_results_fail_naming_the_gpu() {
        let mut r = size(256 * MIB, 1000.0, 2);
        r.wrong = 12;
        r.wrong_per_rank = vec![0, 12];
        r.first_wrong = Some(WrongValue {
            rank: 1,
            index: 4096,
            got: 7.0,
            expected: 5.0,
        });
        let o = evaluate_allreduce(&facts(2, H100, vec![r]), &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "all-reduce returned wrong data: 12 of 134217728 elements wrong at 256 MiB (first: \
             GPU 1, element 4096: got 7, expected 5)"
        );
        assert!(o.hint.as_deref().unwrap().contains("NCCL_P2P_DISABLE=1"));
        assert_eq!(o.devices[0].status, Status::Pass);
        assert_eq!(o.devices[1].status, Status::Fail);
        assert_eq!(o.devices[1].summary, "12 wrong elements");
        assert_eq!(o.metric("wrong_elements"), Some(12.0));
    }

    #[test]
    fn allreduce_on_one_gpu_passes_without_busbw() {
        let f = facts(1, H100, vec![size(256 * MIB, 150.0, 1)]);
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "NCCL 2.27.7 initialised and ran a verified all-reduce on 1 GPU (150 us at 256 MiB); \
             bus bandwidth is not meaningful with one GPU"
        );
        assert_eq!(o.metric("busbw_gbps"), None);
        assert_eq!(o.tables[0].rows[0][5], "n/a");
        // A floor cannot apply to one GPU either.
        let o = evaluate_allreduce(
            &f,
            &AllReduceThresholds {
                min_busbw_gbps: Some(100.0),
            },
        );
        assert_eq!(o.status, Status::Pass);
    }

    #[test]
    fn allreduce_without_a_reference_reports_unjudged() {
        let name = "NVIDIA GeForce RTX 4090";
        let f = facts(
            2,
            name,
            vec![size(256 * MIB, time_for(256 * MIB, 9.0, 2), 2)],
        );
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "busbw 9.0 GB/s at 256 MiB over 2 GPUs (NCCL 2.27.7), results verified; not judged: \
             no reference figure for 2x NVIDIA GeForce RTX 4090 (set one with --min-busbw GBPS)"
        );
    }

    #[test]
    fn allreduce_explicit_floor_replaces_the_reference() {
        let f = facts(
            8,
            H100,
            vec![size(256 * MIB, time_for(256 * MIB, 460.0, 8), 8)],
        );
        let strict = AllReduceThresholds {
            min_busbw_gbps: Some(470.0),
        };
        let o = evaluate_allreduce(&f, &strict);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "busbw 460.0 GB/s at 256 MiB over 8 GPUs (NCCL 2.27.7), below --min-busbw 470.0"
        );
        assert_eq!(o.metric("min_busbw_gbps"), Some(470.0));
        let lenient = AllReduceThresholds {
            min_busbw_gbps: Some(100.0),
        };
        let f = facts(
            8,
            H100,
            vec![size(256 * MIB, time_for(256 * MIB, 300.0, 8), 8)],
        );
        assert_eq!(evaluate_allreduce(&f, &lenient).status, Status::Pass);
    }

    #[test]
    fn allreduce_limited_by_memory_is_not_judged_unless_a_floor_is_given() {
        let mut f = facts(
            8,
            H100,
            vec![size(16 * MIB, time_for(16 * MIB, 20.0, 8), 8)],
        );
        f.run.skipped_for_memory = vec![256 * MIB];
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "busbw 20.0 GB/s at 16 MiB over 8 GPUs (NCCL 2.27.7), results verified; bandwidth not \
             judged: the largest size that fit in free GPU memory was 16 MiB (< 256 MiB)"
        );
        assert!((o.metric("busbw_gbps").unwrap() - 20.0).abs() < 1e-6);
        assert_eq!(o.facts["sizes_skipped_for_memory"], "256 MiB");
        let o = evaluate_allreduce(
            &f,
            &AllReduceThresholds {
                min_busbw_gbps: Some(50.0),
            },
        );
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.starts_with("busbw 20.0 GB/s at 16 MiB"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn sweep_is_tabulated_and_judged_at_its_best_large_size() {
        let results: Vec<SizeResult> = plan_sizes(Profile::Full)
            .into_iter()
            .map(|b| {
                // Latency-bound below 1 MiB, bandwidth-bound above.
                let bw = if b >= 256 * MIB {
                    if b == 512 * MIB {
                        470.0
                    } else {
                        455.0
                    }
                } else {
                    5.0
                };
                size(b, time_for(b, bw, 8).max(20.0), 8)
            })
            .collect();
        let o = evaluate_allreduce(&facts(8, H100, results), &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary.starts_with("busbw 470.0 GB/s at 512 MiB"),
            "{}",
            o.summary
        );
        let t = &o.tables[0];
        assert_eq!(t.rows.len(), 28);
        assert_eq!(
            t.rows[0][..3],
            ["8".to_string(), "2".to_string(), "float".to_string()]
        );
        assert_eq!(
            t.header,
            [
                "size (B)",
                "count",
                "type",
                "time (us)",
                "algbw (GB/s)",
                "busbw (GB/s)",
                "#wrong"
            ]
        );
    }

    #[test]
    fn the_algorithm_nccl_chose_at_the_judged_size_is_recorded() {
        let mut f = facts(8, "NVIDIA H100 80GB HBM3", vec![size(256 << 20, 1000.0, 8)]);
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert!(!o.facts.contains_key("nccl_algorithm"));
        let choice = |bytes: u64, algorithm: &str| probe::TuningChoice {
            bytes,
            algorithm: algorithm.into(),
            protocol: "Simple".into(),
        };
        f.run.tuning = vec![
            choice(256 << 20, "Ring"),
            choice(1 << 20, "Tree"),
            choice(256 << 20, "NVLS"),
        ];
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(
            o.facts["nccl_algorithm"],
            "NVLS, protocol Simple, at 256 MiB"
        );
        // 380 GB/s on 8x H100 at 1 GiB: 84% of NVLS's 450 warns; with Ring
        // chosen it is judged against Ring's 370 and passes.
        let gib = 1u64 << 30;
        let mut f = facts(
            8,
            "NVIDIA H100 80GB HBM3",
            vec![size(gib, time_for(gib, 380.0, 8), 8)],
        );
        f.run.tuning = vec![choice(gib, "NVLS")];
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Warn, "{o:?}");
        f.run.tuning = vec![choice(gib, "Ring")];
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.summary.ends_with(
                "expected about 370 GB/s (measured on 8x H100 SXM systems with NCCL's Ring \
                 algorithm, which NCCL chose here)"
            ),
            "{}",
            o.summary
        );
    }

    #[test]
    fn a_healthy_nvls_box_is_judged_at_the_size_and_algorithm_it_ran() {
        // nccl-tests' curve on a healthy 8x H100 with NVLS: ~370 at 256 MiB,
        // ~420 at 512 MiB, ~480 at 1 GiB. Judging 256 MiB against NVLS's
        // peak warned on every such box; judged per size and algorithm it
        // passes, at the size that reaches its own reference best.
        let curve = [(256 << 20, 368.0), (512 << 20, 420.0), (1u64 << 30, 478.0)];
        let mut f = facts(
            8,
            H100,
            curve
                .iter()
                .map(|&(b, bw)| size(b, time_for(b, bw, 8), 8))
                .collect(),
        );
        f.run.tuning = curve
            .iter()
            .map(|&(b, _)| probe::TuningChoice {
                bytes: b,
                algorithm: "NVLS".into(),
                protocol: "Simple".into(),
            })
            .collect();
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        // 420 of Ring's 370 at 512 MiB is the best showing.
        assert!(
            o.summary.starts_with("busbw 420.0 GB/s at 512 MiB"),
            "{}",
            o.summary
        );
        // 1 GiB alone is held to NVLS's 450.
        let mut large = f.clone();
        large.run.results.drain(..2);
        let o = evaluate_allreduce(&large, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(o.metric("expected_busbw_gbps"), Some(450.0));
        // Only 256 MiB ran (the standard profile): Ring's figure, pass.
        f.run.results.truncate(1);
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(o.metric("expected_busbw_gbps"), Some(370.0));
        // And a box that stays at 300 GB/s still warns.
        let mut slow = f.clone();
        slow.run.results = vec![size(256 << 20, time_for(256 << 20, 300.0, 8), 8)];
        let o = evaluate_allreduce(&slow, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
    }

    #[test]
    fn a_low_figure_is_measured_again_and_the_median_decides() {
        let b = 256 * MIB;
        let run = |bw: f64| size(b, time_for(b, bw, 8), 8);
        let th = AllReduceThresholds::default();
        // 8x H100, Ring's 370: 200 GB/s is low, 380 is not.
        let mut f = facts(8, H100, vec![run(200.0)]);
        assert_eq!(repeat_size(&f, &th), Some(b));
        f.run.repeats = vec![run(380.0)];
        assert_eq!(repeat_size(&f, &th), Some(b), "three runs in all");
        f.run.repeats.push(run(375.0));
        assert_eq!(repeat_size(&f, &th), None);
        // One noisy reading: the median is 375, a pass that says so.
        let o = evaluate_allreduce(&f, &th);
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary.starts_with("busbw 375.0 GB/s at 256 MiB"),
            "{}",
            o.summary
        );
        assert!(
            o.summary
                .ends_with("; low in 1 of 3 runs (the median counts)"),
            "{}",
            o.summary
        );
        assert_eq!(o.metric("low_runs"), Some(1.0));
        // Low twice: the median is low, and the verdict says how often.
        f.run.repeats = vec![run(190.0), run(380.0)];
        let o = evaluate_allreduce(&f, &th);
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(o.summary.contains("busbw 200.0 GB/s"), "{}", o.summary);
        assert!(o
            .summary
            .ends_with("; low in 2 of 3 runs (the median counts)"));
        // Not low the first time, wrong data, or an explicit floor met:
        // nothing to measure again.
        assert_eq!(repeat_size(&facts(8, H100, vec![run(380.0)]), &th), None);
        let floor = AllReduceThresholds {
            min_busbw_gbps: Some(150.0),
        };
        assert_eq!(repeat_size(&facts(8, H100, vec![run(200.0)]), &floor), None);
        let mut wrong = facts(8, H100, vec![run(200.0)]);
        wrong.run.results[0].wrong = 1;
        assert_eq!(repeat_size(&wrong, &th), None);
    }

    #[test]
    fn allreduce_with_no_finished_size_fails() {
        let mut f = facts(2, H100, vec![]);
        f.run.skipped_for_time = vec![256 * MIB];
        let o = evaluate_allreduce(&f, &AllReduceThresholds::default());
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.facts["sizes_skipped_for_time"], "256 MiB");
    }

    #[test]
    fn allreduce_failures_map_to_verdicts() {
        let o = evaluate_failure(&AllReduceFailure::NoDriver);
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.starts_with("no NVIDIA driver"));
        assert_eq!(
            evaluate_failure(&AllReduceFailure::NoGpu).status,
            Status::Skip
        );
        let o = evaluate_failure(&AllReduceFailure::DriverInit {
            error: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH".into(),
            library: Some(PathBuf::from("/usr/lib64/libcuda.so.1")),
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.hint.unwrap().contains("--only cuda.driver"));
        let o = evaluate_failure(&AllReduceFailure::DriverInit {
            error: "CUDA_ERROR_STUB_LIBRARY".into(),
            library: Some(PathBuf::from("/usr/local/cuda/lib64/stubs/libcuda.so.1")),
        });
        assert_eq!(
            o.summary,
            "the libcuda loaded, /usr/local/cuda/lib64/stubs/libcuda.so.1, is the CUDA toolkit's \
             stub, not the NVIDIA driver (cuInit: CUDA_ERROR_STUB_LIBRARY)"
        );
        assert!(o
            .hint
            .unwrap()
            .starts_with("take /usr/local/cuda/lib64/stubs off LD_LIBRARY_PATH"));
        let o = evaluate_failure(&AllReduceFailure::Nccl {
            step: "ncclCommInitAll".into(),
            code: 2,
            message: "unhandled system error".into(),
            last_error: Some("Cuda failure 'out of memory'".into()),
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "ncclCommInitAll failed: unhandled system error (Cuda failure 'out of memory')"
        );
        let hint = o.hint.unwrap();
        assert!(
            hint.contains("NCCL_DEBUG=WARN") && hint.contains("--shm-size=1g"),
            "{hint}"
        );
        let o = evaluate_failure(&AllReduceFailure::Cuda {
            step: "allocate the send buffer".into(),
            gpu: Some(3),
            error: "CUDA_ERROR_OUT_OF_MEMORY".into(),
        });
        assert_eq!(
            o.summary,
            "CUDA could not allocate the send buffer on GPU 3: CUDA_ERROR_OUT_OF_MEMORY"
        );
        assert!(o.hint.unwrap().contains("gpu.processes"));
        // An illegal address raised in the check's own program: no reset
        // without evidence, which fabric.xid and NVML give.
        let o = evaluate_failure(&AllReduceFailure::Cuda {
            step: "ncclAllReduce 32 MiB (warm-up)".into(),
            gpu: Some(0),
            error: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
        });
        let hint = o.hint.unwrap();
        assert!(!hint.contains("reset"), "{hint}");
        assert!(hint.contains("fabric.xid"), "{hint}");
        // A job-class Xid (31, the page fault such an error logs) is no
        // evidence either; an Xid 79 on a GPU is.
        let seen = |code| crate::facts::xid::XidSeen {
            pci: "0000:ab:00".into(),
            gpu: Some(5),
            code,
            count: 1,
        };
        let illegal = AllReduceFailure::Cuda {
            step: "ncclAllReduce 32 MiB (warm-up)".into(),
            gpu: Some(0),
            error: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
        };
        let history = |codes: &[u32]| XidHistory {
            events: codes.iter().map(|&c| seen(c)).collect(),
        };
        let o = evaluate_failure_with(&illegal, Some(&history(&[31])));
        assert!(!o.hint.unwrap().contains("reset"));
        let o = evaluate_failure_with(&illegal, Some(&history(&[31, 79])));
        let hint = o.hint.unwrap();
        assert!(
            hint.starts_with("fabric.xid found Xid 79 on GPU 5 (0000:ab:00) since boot"),
            "{hint}"
        );
        assert!(hint.contains("must be reset"), "{hint}");
        let o = evaluate_failure(&AllReduceFailure::NoMemory {
            gpu: 0,
            free_bytes: 3 << 20,
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.starts_with("GPU 0 has only 3 MiB free"));
        let o = evaluate_failure(&AllReduceFailure::NcclLoad {
            path: PathBuf::from("/x/libnccl.so.2"),
            detail: "has no ncclCommInitAll (not an NCCL 2 library?)".into(),
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.hint.unwrap().contains("nvidia-nccl-cu12"));
    }

    #[test]
    fn runs_the_nccl_the_library_check_chose() {
        let choice = NcclChoice {
            path: PathBuf::from(WHEEL),
            real_path: PathBuf::from(WHEEL),
            version: v(2, 27, 7),
            source: "Python wheel (site-packages/nvidia)".to_string(),
            copies: 1,
        };
        let mut ctx = Context::default();
        ctx.options.nccl_lib = Some(PathBuf::from("/nonexistent/libnccl.so.2"));
        ctx.earlier.insert(
            "nccl.library".to_string(),
            Outcome::pass("NCCL 2.27.7").publish(&choice),
        );
        assert_eq!(nccl_to_run(&ctx).ok(), Some(PathBuf::from(WHEEL)));
        // Without it, the search runs again and judges what it finds.
        ctx.earlier.clear();
        let o = nccl_to_run(&ctx).unwrap_err();
        assert_eq!(
            o.summary,
            "--nccl-lib /nonexistent/libnccl.so.2 is not a file"
        );
    }

    #[test]
    fn timeout_hint_names_the_p2p_experiment() {
        let h = AllReduce.timeout_hint();
        assert!(
            h.contains("NCCL_P2P_DISABLE=1") && h.contains("NCCL_DEBUG=WARN"),
            "{h}"
        );
    }
}

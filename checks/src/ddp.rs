//! The ddp group: a real DistributedDataParallel training run through the
//! user's own Python, torch and torchrun, measuring whether adding GPUs
//! actually makes training faster and whether DDP really keeps the ranks in
//! sync.
//!
//! The payload (checks/payloads/ddp_bench.py) is launched as
//! `python -m torch.distributed.run` on a loopback port gpucheck found free.
//! Rank 0 first trains a synthetic model alone (world size 1), then every rank
//! trains it under DDP (world size N). Rank 0 reports the numbers as marked
//! JSON lines on stdout; [`parse_records`] reads them, [`evaluate`] judges a
//! finished run and [`evaluate_failure`] one that did not finish. Both are
//! pure and unit-tested per verdict.
//!
//! torchrun starts every worker in a session of its own, so killing torchrun's
//! process group misses them. The payload asks the kernel to kill it when
//! torchrun dies (PR_SET_PDEATHSIG), and when torchrun ends gpucheck also
//! kills any process still running the payload's unique temporary file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

use crate::probe::process::{self, Output, RunError};
use crate::probe::python::{self, PayloadFile};
use crate::{
    Check, Context, DataTable, DdpModel, DeviceResult, Isolation, Options, Outcome, Profile, Status,
};

/// The benchmark program, embedded so gpucheck stays one file.
const PAYLOAD: &str = include_str!("../payloads/ddp_bench.py");
/// Prefix of every protocol line the payload writes on stdout.
const MARK: &str = "@@gpucheck-ddp@@ ";

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
/// Processes for a CPU benchmark when --nproc is not given.
pub const CPU_DEFAULT_NPROC: u32 = 2;
/// Default time limit of the whole check: torch import and rendezvous take
/// seconds, a healthy 8-GPU node finishes well under a minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

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

/// What to do when the benchmark hangs (also the runner's timeout hint).
const HANG_HINT: &str = "a DDP rank stopped making progress: rerun with NCCL_DEBUG=INFO and \
     TORCH_DISTRIBUTED_DEBUG=DETAIL to see the collective it is stuck in, look for Xid errors \
     (`dmesg`) and a GPU stuck at 100 % (`nvidia-smi`), try NCCL_P2P_DISABLE=1 or \
     NCCL_SHM_DISABLE=1 to isolate a broken transport; a busy machine may only need more time \
     (--timeout SECS), or leave the benchmark out with --skip ddp.benchmark";

// ---------------------------------------------------------------------------
// What to run
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchDevice {
    Cuda,
    Cpu,
}

impl BenchDevice {
    pub fn as_str(self) -> &'static str {
        match self {
            BenchDevice::Cuda => "cuda",
            BenchDevice::Cpu => "cpu",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Nccl,
    Gloo,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Nccl => "nccl",
            Backend::Gloo => "gloo",
        }
    }
}

/// How many processes torchrun starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nproc {
    Count(u32),
    /// One per GPU torch can see (`--nproc-per-node gpu`: torchrun counts
    /// them with torch.cuda.device_count(), honouring CUDA_VISIBLE_DEVICES).
    EveryGpu,
}

/// The benchmark to run, from the options.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub device: BenchDevice,
    pub backend: Backend,
    pub nproc: Nproc,
    pub model: DdpModel,
    pub warmup_steps: u32,
    pub timed_steps: u32,
    pub no_sync_steps: u32,
}

/// Steps per phase (warm-up, timed, no_sync). GPU steps take tens of
/// milliseconds; CPU steps are slower and the numbers are report-only there.
const CUDA_STEPS: (u32, u32, u32) = (5, 20, 10);
const CPU_STEPS: (u32, u32, u32) = (2, 8, 4);

/// Options that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("unknown DDP device '{0}'")]
    UnknownDevice(String),
    #[error("unknown DDP backend '{0}'")]
    UnknownBackend(String),
    #[error("--ddp-backend nccl cannot run on --ddp-device cpu: NCCL only moves GPU memory")]
    NcclOnCpu,
}

impl PlanError {
    /// gpucheck could not run the benchmark it was asked for: an `error`
    /// naming the flags that work.
    pub fn outcome(&self) -> Outcome {
        let hint = match self {
            PlanError::UnknownDevice(_) => "use --ddp-device cuda or --ddp-device cpu",
            PlanError::UnknownBackend(_) => "use --ddp-backend nccl or --ddp-backend gloo",
            PlanError::NcclOnCpu => "benchmark on CPUs with --ddp-backend gloo --ddp-device cpu",
        };
        Outcome::error(self.to_string()).with_hint(hint)
    }
}

/// Decide device, backend and process count. Defaults: NCCL on CUDA, one
/// process per GPU; `--ddp-device cpu` alone means gloo with 2 processes.
pub fn plan(options: &Options) -> Result<Plan, PlanError> {
    let device = match options.ddp_device.as_deref() {
        None | Some("cuda") => BenchDevice::Cuda,
        Some("cpu") => BenchDevice::Cpu,
        Some(other) => return Err(PlanError::UnknownDevice(other.to_string())),
    };
    let backend = match (options.ddp_backend.as_deref(), device) {
        (None, BenchDevice::Cuda) | (Some("nccl"), BenchDevice::Cuda) => Backend::Nccl,
        (None, BenchDevice::Cpu) | (Some("gloo"), _) => Backend::Gloo,
        (Some("nccl"), BenchDevice::Cpu) => return Err(PlanError::NcclOnCpu),
        (Some(other), _) => return Err(PlanError::UnknownBackend(other.to_string())),
    };
    let nproc = match (options.nproc, device) {
        (Some(n), _) => Nproc::Count(n.max(1)),
        (None, BenchDevice::Cuda) => Nproc::EveryGpu,
        (None, BenchDevice::Cpu) => Nproc::Count(CPU_DEFAULT_NPROC),
    };
    let (warmup_steps, timed_steps, no_sync_steps) = match device {
        BenchDevice::Cuda => CUDA_STEPS,
        BenchDevice::Cpu => CPU_STEPS,
    };
    Ok(Plan {
        device,
        backend,
        nproc,
        model: options.ddp_model,
        warmup_steps,
        timed_steps,
        no_sync_steps,
    })
}

/// The time the benchmark may take: the check's timeout less a margin for
/// gpucheck to kill what is left and report, so the check's own (more
/// precise) verdict wins over the runner's.
pub fn budget(timeout_s: f64) -> Duration {
    let total = if timeout_s > 0.0 {
        timeout_s
    } else {
        DEFAULT_TIMEOUT.as_secs_f64()
    };
    let margin = (total * 0.1).clamp(0.5, 5.0);
    Duration::from_secs_f64((total - margin).max(0.5))
}

/// True when this machine has an NVIDIA (or ROCm, or WSL) GPU device node:
/// without one no GPU can be used, and starting Python would only confirm it.
fn gpu_device_nodes_present() -> bool {
    ["/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd"]
        .iter()
        .any(|p| Path::new(p).exists())
}

/// A port for the rendezvous store: one the kernel hands out as free, then
/// verified with the net probe's check, which binds it the way PyTorch's
/// TCPStore server does (the wildcard address, IPv6 dual-stack then IPv4).
/// There is a window between this and torchrun's bind, as with any free-port
/// search.
fn free_store_port() -> std::io::Result<u16> {
    let mut last = None;
    for _ in 0..5 {
        let port = std::net::TcpListener::bind(("0.0.0.0", 0))?
            .local_addr()?
            .port();
        match crate::probe::net::store_port_free(port) {
            Ok(()) => return Ok(port),
            Err(e) => last = Some(e.to_string()),
        }
    }
    Err(std::io::Error::other(last.unwrap_or_default()))
}

/// `python -m torch.distributed.run ... payload ...`: single node, c10d
/// rendezvous on 127.0.0.1:port, no restarts, a short monitor interval so a
/// dead worker ends the run promptly.
fn torchrun_command(
    python: &Path,
    script: &Path,
    plan: &Plan,
    port: u16,
    budget: Duration,
) -> Command {
    let mut cmd = python::python_command(python);
    // torchrun takes PET_* variables as defaults for its own flags (a stray
    // PET_TEE or PET_REDIRECTS would hide the workers' output); the
    // benchmark's launch is gpucheck's own.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PET_") {
            cmd.env_remove(&key);
        }
    }
    let nproc = match plan.nproc {
        Nproc::Count(n) => n.to_string(),
        Nproc::EveryGpu => "gpu".to_string(),
    };
    cmd.args(["-m", "torch.distributed.run", "--nnodes", "1"])
        .args(["--nproc-per-node", &nproc])
        .args(["--rdzv-backend", "c10d"])
        .args(["--rdzv-endpoint", &format!("127.0.0.1:{port}")])
        .args(["--rdzv-id", &format!("gpucheck-ddp-{}", std::process::id())])
        .args(["--max-restarts", "0", "--monitor-interval", "0.2"])
        .arg(script)
        .args(["--device", plan.device.as_str()])
        .args(["--backend", plan.backend.as_str()])
        .args(["--model", plan.model.as_str()])
        .args(["--warmup", &plan.warmup_steps.to_string()])
        .args(["--steps", &plan.timed_steps.to_string()])
        .args(["--no-sync-steps", &plan.no_sync_steps.to_string()])
        .args(["--pg-timeout-s", &format!("{:.0}", budget.as_secs_f64())]);
    // After one worker fails, give the others 5 s to stop before SIGKILL
    // (torchrun's default is 30 s); an NCCL error aborts the process instead
    // of leaving it blocked in a collective.
    for (key, value) in [
        ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "5"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    ] {
        if std::env::var_os(key).is_none() {
            cmd.env(key, value);
        }
    }
    cmd
}

fn run_benchmark(options: &Options) -> Outcome {
    let plan = match plan(options) {
        Ok(p) => p,
        Err(e) => return e.outcome(),
    };
    if plan.device == BenchDevice::Cuda && !gpu_device_nodes_present() {
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
    let port = match free_store_port() {
        Ok(p) => p,
        Err(e) => {
            return Outcome::fail(
                format!("cannot find a free TCP port for the rendezvous store: {e}"),
                "the loopback interface must be up (`ip link set lo up`); see net.loopback",
            )
        }
    };
    let file = match PayloadFile::write("ddp_bench", PAYLOAD) {
        Ok(f) => f,
        Err(e) => {
            return Outcome::error(format!("cannot start the benchmark: {e}"))
                .with_hint("TMPDIR must be writable (the payload is written there)")
        }
    };
    let budget = budget(options.timeout_s);
    let cmd = torchrun_command(&py.path, file.path(), &plan, port, budget);
    let launcher = describe_command(&cmd, file.path());
    crate::probe::stage("torchrun");
    let result = process::run_bounded_then(cmd, budget, || {
        process::kill_processes_with_arg(file.path().as_os_str(), Duration::from_secs(2));
    });
    let judged = match interpret(result, &py.path.display().to_string()) {
        BenchRun::Finished(facts) => evaluate(
            &facts,
            &Thresholds::new(options.min_scaling, plan.device == BenchDevice::Cuda),
        ),
        BenchRun::Failed(failure) => evaluate_failure(&failure),
    };
    judged
        .with_fact("python", py.path.display().to_string())
        .with_fact("launcher", launcher)
}

/// The command line as a person would retype it, the temporary script shown
/// by its name.
fn describe_command(cmd: &Command, script: &Path) -> String {
    let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
    for a in cmd.get_args() {
        if a == script.as_os_str() {
            words.push("ddp_bench.py".to_string());
        } else {
            words.push(a.to_string_lossy().into_owned());
        }
    }
    words.join(" ")
}

// ---------------------------------------------------------------------------
// What came back
// ---------------------------------------------------------------------------

/// Rank 0's description of the run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Setup {
    pub torch_version: String,
    pub backend: String,
    pub device: String,
    pub world_size: u32,
    pub model: String,
    pub parameters: u64,
    pub samples_per_rank: u32,
    pub tokens_per_sample: u32,
    pub precision: String,
    pub warmup_steps: u32,
    pub timed_steps: u32,
    pub no_sync_steps: u32,
}

/// Rank 0 training alone.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SingleStats {
    pub samples_per_s: f64,
    pub step_p50_ms: f64,
    pub step_p95_ms: f64,
}

/// All ranks under DDP: global throughput.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MultiStats {
    pub world_size: u32,
    pub samples_per_s: f64,
}

/// One rank's numbers under DDP.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RankStats {
    pub rank: u32,
    pub local_rank: u32,
    /// GPU name ("NVIDIA H100 80GB HBM3") or "cpu".
    pub device_name: String,
    /// "GPU-xxxxxxxx-..." on CUDA.
    #[serde(default)]
    pub device_uuid: Option<String>,
    /// torch's device index (cuda:N) on CUDA.
    #[serde(default)]
    pub device_index: Option<u32>,
    pub wall_s: f64,
    pub step_p50_ms: f64,
    pub step_p95_ms: f64,
    /// Forward+backward of a synchronised step (includes the exposed
    /// all-reduce wait).
    pub fwd_bwd_sync_p50_ms: f64,
    /// Forward+backward under no_sync(): this rank's compute alone.
    pub fwd_bwd_local_p50_ms: f64,
    /// Float64 sum of every parameter; None when it is NaN or infinite.
    pub param_sum: Option<f64>,
    pub param_hash: String,
}

impl RankStats {
    /// Share of a synchronised step spent waiting on the gradient all-reduce
    /// that the backward pass did not hide.
    pub fn comm_wait_share(&self) -> f64 {
        if self.step_p50_ms <= 0.0 {
            return 0.0;
        }
        ((self.fwd_bwd_sync_p50_ms - self.fwd_bwd_local_p50_ms) / self.step_p50_ms).clamp(0.0, 1.0)
    }

    /// "cuda:3 NVIDIA H100 80GB HBM3 (GPU-...)" or "cpu".
    fn device_label(&self) -> String {
        let mut s = match self.device_index {
            Some(i) => format!("cuda:{i} {}", self.device_name),
            None => self.device_name.clone(),
        };
        if let Some(uuid) = &self.device_uuid {
            s.push_str(&format!(" ({uuid})"));
        }
        s
    }
}

/// An exception a rank reported before it died.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct WorkerError {
    pub rank: u32,
    /// The exception type ("RuntimeError"), or "no_gpu".
    pub error: String,
    pub message: String,
    #[serde(default)]
    pub traceback: String,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum Record {
    Stage { rank: u32, stage: String },
    Setup(Setup),
    Single(SingleStats),
    Rank(RankStats),
    Multi(MultiStats),
    Error(WorkerError),
    Done {},
}

/// Everything the payload said, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub setup: Option<Setup>,
    pub single: Option<SingleStats>,
    pub multi: Option<MultiStats>,
    pub ranks: Vec<RankStats>,
    /// In the order they were reported: the first is the root cause.
    pub errors: Vec<WorkerError>,
    /// The last stage each rank reported.
    pub stages: BTreeMap<u32, String>,
    pub done: bool,
}

/// Read the payload's protocol lines from torchrun's stdout; other lines and
/// lines that do not parse are noise.
pub fn parse_records(stdout: &str) -> Parsed {
    let mut p = Parsed::default();
    for line in stdout.lines() {
        let Some(at) = line.find(MARK) else { continue };
        let Ok(record) = serde_json::from_str::<Record>(&line[at + MARK.len()..]) else {
            continue;
        };
        match record {
            Record::Stage { rank, stage } => {
                p.stages.insert(rank, stage);
            }
            Record::Setup(s) => p.setup = Some(s),
            Record::Single(s) => p.single = Some(s),
            Record::Rank(r) => p.ranks.push(r),
            Record::Multi(m) => p.multi = Some(m),
            Record::Error(e) => p.errors.push(e),
            Record::Done {} => p.done = true,
        }
    }
    p
}

/// A benchmark that ran to the end.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchFacts {
    pub setup: Setup,
    pub single: SingleStats,
    pub multi: MultiStats,
    pub ranks: Vec<RankStats>,
}

/// How a run that did not finish ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The interpreter could not be started.
    NotStarted {
        reason: String,
    },
    TimedOut {
        secs: f64,
    },
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// A benchmark that did not finish.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFailure {
    pub ending: Ending,
    pub parsed: Parsed,
    /// The last lines of torchrun's and the workers' stderr and of stdout
    /// that was not protocol.
    pub tail: String,
    pub python: String,
}

/// How a benchmark went.
#[derive(Debug, Clone, PartialEq)]
pub enum BenchRun {
    Finished(BenchFacts),
    Failed(RunFailure),
}

/// Lines of output kept for a failure report.
const TAIL_LINES: usize = 40;

fn noise_tail(stdout: &str, stderr: &str) -> String {
    let noise: String = stdout
        .lines()
        .filter(|l| !l.contains(MARK))
        .chain(stderr.lines())
        .collect::<Vec<_>>()
        .join("\n");
    process::tail(&noise, TAIL_LINES)
}

/// Turn what torchrun left behind into a finished benchmark or a failure.
pub fn interpret(result: Result<Output, RunError>, python: &str) -> BenchRun {
    let (ending, stdout, stderr) = match result {
        Ok(o) => (
            Ending::Exited {
                code: o.code,
                signal: o.signal,
            },
            o.stdout,
            o.stderr,
        ),
        Err(RunError::Timeout {
            secs,
            stdout,
            stderr,
        }) => (Ending::TimedOut { secs }, stdout, stderr),
        Err(RunError::Spawn { program, reason }) => (
            Ending::NotStarted {
                reason: format!("{program}: {reason}"),
            },
            String::new(),
            String::new(),
        ),
    };
    let parsed = parse_records(&stdout);
    let succeeded = matches!(ending, Ending::Exited { code: Some(0), .. });
    if succeeded && parsed.done && parsed.errors.is_empty() {
        if let (Some(setup), Some(single), Some(multi)) =
            (&parsed.setup, &parsed.single, &parsed.multi)
        {
            return BenchRun::Finished(BenchFacts {
                setup: setup.clone(),
                single: single.clone(),
                multi: multi.clone(),
                ranks: parsed.ranks.clone(),
            });
        }
    }
    BenchRun::Failed(RunFailure {
        ending,
        tail: noise_tail(&stdout, &stderr),
        parsed,
        python: python.to_string(),
    })
}

// ---------------------------------------------------------------------------
// Judging
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

fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

fn rate(samples_per_s: f64) -> String {
    if samples_per_s >= 100.0 {
        format!("{samples_per_s:.0}")
    } else {
        format!("{samples_per_s:.1}")
    }
}

/// "ranks 0, 2" / "rank 1".
fn rank_list(ranks: &[u32]) -> String {
    let names: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    match ranks.len() {
        1 => format!("rank {}", names[0]),
        _ => format!("ranks {}", names.join(", ")),
    }
}

/// Judge a finished run.
pub fn evaluate(facts: &BenchFacts, t: &Thresholds) -> Outcome {
    let world = facts.multi.world_size.max(1);
    let on = if facts.setup.device == "cuda" {
        format!("{world} GPU ranks ({})", facts.setup.backend)
    } else {
        format!("{world} CPU ranks ({})", facts.setup.backend)
    };

    // Every rank must have reported, with a usable timing.
    let mut missing: Vec<u32> = (0..world)
        .filter(|r| !facts.ranks.iter().any(|s| s.rank == *r))
        .collect();
    missing.sort_unstable();
    if !missing.is_empty() {
        return Outcome::error(format!(
            "the benchmark finished without results for {}",
            rank_list(&missing)
        ))
        .with_hint(
            "please report this with the output of `gpucheck --only ddp.benchmark --json -`",
        );
    }
    let usable = |x: f64| x.is_finite() && x > 0.0;
    if !usable(facts.single.samples_per_s) || !usable(facts.multi.samples_per_s) {
        return Outcome::error("the benchmark reported no usable throughput").with_hint(
            "please report this with the output of `gpucheck --only ddp.benchmark --json -`",
        );
    }

    let mut ranks = facts.ranks.clone();
    ranks.sort_by_key(|r| r.rank);
    let efficiency = facts.multi.samples_per_s / (world as f64 * facts.single.samples_per_s);
    let speedup = facts.multi.samples_per_s / facts.single.samples_per_s;
    let comm_share = median(
        &ranks
            .iter()
            .map(|r| r.comm_wait_share())
            .collect::<Vec<_>>(),
    );
    let compute_median = median(
        &ranks
            .iter()
            .map(|r| r.fwd_bwd_local_p50_ms)
            .collect::<Vec<_>>(),
    );
    let stragglers: Vec<&RankStats> = if t.judge_speed && world > 1 && compute_median > 0.0 {
        ranks
            .iter()
            .filter(|r| r.fwd_bwd_local_p50_ms > t.straggler_ratio * compute_median)
            .collect()
    } else {
        Vec::new()
    };

    // Synchronisation: every rank's weights must match rank 0's bit for bit.
    let reference = &ranks[0];
    let diverged: Vec<u32> = ranks
        .iter()
        .filter(|r| {
            r.param_hash != reference.param_hash
                || r.param_sum.map(f64::to_bits) != reference.param_sum.map(f64::to_bits)
        })
        .map(|r| r.rank)
        .collect();
    // The same synthetic data trains to finite weights on healthy hardware.
    let non_finite: Vec<u32> = ranks
        .iter()
        .filter(|r| r.param_sum.is_none())
        .map(|r| r.rank)
        .collect();

    let throughput = if world > 1 {
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
    };

    let mut outcome = if !non_finite.is_empty() {
        Outcome::fail(
            format!(
                "training produced NaN or infinite parameters on {}",
                rank_list(&non_finite)
            ),
            "the same synthetic model trains to finite weights on healthy hardware, so a GPU \
             computed garbage (or its data was corrupted in flight): check the GPUs for errors \
             (`dmesg` for Xid, `nvidia-smi -q -d ECC`) and run the GPU vendor's diagnostics \
             (`dcgmi diag -r 2`)",
        )
    } else if !diverged.is_empty() {
        Outcome::fail(
            format!(
                "ranks diverged: gradients are not being synchronised ({} ended with parameters \
                 different from rank 0's after {} synchronised steps)",
                rank_list(&diverged),
                facts.setup.warmup_steps + facts.setup.timed_steps
            ),
            "DDP's all-reduce returned different data on different ranks, so training would \
             silently drift apart: check the GPUs and links for errors (`dmesg` for Xid, \
             `nvidia-smi -q -d ECC`), run nccl-tests `all_reduce_perf -c 1` to check results, \
             and unset NCCL_ALGO / NCCL_PROTO overrides",
        )
    } else if world == 1 {
        Outcome::pass(format!(
            "{throughput}; one process, so nothing to scale (more GPUs, or --nproc N, to measure \
             scaling)"
        ))
    } else if !t.judge_speed {
        Outcome::pass(format!(
            "{throughput}; parameters identical on all ranks; report only on CPUs"
        ))
    } else {
        judge_speed(
            &throughput,
            efficiency,
            comm_share,
            &stragglers,
            compute_median,
            t,
        )
    };

    outcome = outcome
        .with_metric("world_size", world as f64, "count")
        .with_metric("parameters", facts.setup.parameters as f64, "count")
        .with_metric("throughput_world1", facts.single.samples_per_s, "samples/s")
        .with_metric("throughput_worldn", facts.multi.samples_per_s, "samples/s")
        .with_metric("speedup", speedup, "x")
        .with_metric("scaling_efficiency", efficiency, "ratio")
        .with_metric("comm_wait_share", comm_share * 100.0, "%")
        .with_metric(
            "step_p50_ms",
            median(&ranks.iter().map(|r| r.step_p50_ms).collect::<Vec<_>>()),
            "ms",
        )
        .with_metric(
            "step_p95_ms",
            ranks.iter().map(|r| r.step_p95_ms).fold(0.0, f64::max),
            "ms",
        )
        .with_metric("step_world1_p50_ms", facts.single.step_p50_ms, "ms")
        .with_fact("torch_version", facts.setup.torch_version.clone())
        .with_fact("backend", facts.setup.backend.clone())
        .with_fact("device", facts.setup.device.clone())
        .with_fact(
            "model",
            format!(
                "{} ({:.1} M parameters, {} samples x {} tokens per rank, {})",
                facts.setup.model,
                facts.setup.parameters as f64 / 1e6,
                facts.setup.samples_per_rank,
                facts.setup.tokens_per_sample,
                facts.setup.precision
            ),
        )
        .with_fact(
            "sync_verification",
            if diverged.is_empty() {
                format!(
                    "passed: parameters identical on all {world} ranks (hash {})",
                    reference.param_hash
                )
            } else {
                format!("failed: {} differ from rank 0", rank_list(&diverged))
            },
        );
    if world > 1 && t.judge_speed {
        outcome = outcome.with_metric("efficiency_fail_below", t.fail_below, "ratio");
    }

    for r in &ranks {
        let straggler = stragglers.iter().any(|s| s.rank == r.rank);
        let is_diverged = diverged.contains(&r.rank) || non_finite.contains(&r.rank);
        let status = if is_diverged {
            Status::Fail
        } else if straggler {
            Status::Warn
        } else {
            Status::Pass
        };
        let mut summary = format!(
            "step p50 {:.1} ms, p95 {:.1} ms; compute p50 {:.1} ms; {:.0} % waiting on all-reduce",
            r.step_p50_ms,
            r.step_p95_ms,
            r.fwd_bwd_local_p50_ms,
            r.comm_wait_share() * 100.0
        );
        if straggler {
            summary.push_str(&format!(
                "; straggler: {:.2}x the median compute time",
                r.fwd_bwd_local_p50_ms / compute_median
            ));
        }
        if is_diverged {
            summary.push_str("; parameters differ from rank 0");
        }
        outcome = outcome.with_device(DeviceResult {
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
                metric("step_p50_ms", r.step_p50_ms, "ms"),
                metric("step_p95_ms", r.step_p95_ms, "ms"),
                metric("compute_p50_ms", r.fwd_bwd_local_p50_ms, "ms"),
                metric("comm_wait_share", r.comm_wait_share() * 100.0, "%"),
            ],
        });
    }

    outcome
        .with_table(DataTable {
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
                    world.to_string(),
                    rate(facts.multi.samples_per_s),
                    format!(
                        "{:.1}",
                        median(&ranks.iter().map(|r| r.step_p50_ms).collect::<Vec<_>>())
                    ),
                    format!(
                        "{:.1}",
                        ranks.iter().map(|r| r.step_p95_ms).fold(0.0, f64::max)
                    ),
                ],
            ],
            legend: Some(format!(
                "scaling efficiency {efficiency:.2} = {} / ({world} x {}); {:.0} % of a step waits \
                 on the gradient all-reduce (median rank)",
                rate(facts.multi.samples_per_s),
                rate(facts.single.samples_per_s),
                comm_share * 100.0
            )),
        })
        .with_table(DataTable {
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
            rows: ranks
                .iter()
                .map(|r| {
                    vec![
                        r.rank.to_string(),
                        r.device_label(),
                        format!("{:.1}", r.step_p50_ms),
                        format!("{:.1}", r.step_p95_ms),
                        format!("{:.1}", r.fwd_bwd_local_p50_ms),
                        format!("{:.0}", r.comm_wait_share() * 100.0),
                        if diverged.contains(&r.rank) {
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
        })
}

fn metric(name: &str, value: f64, unit: &str) -> crate::Metric {
    crate::Metric {
        name: name.to_string(),
        value,
        unit: unit.to_string(),
    }
}

/// The verdict on speed, on GPUs, for a run whose ranks stayed in sync.
fn judge_speed(
    throughput: &str,
    efficiency: f64,
    comm_share: f64,
    stragglers: &[&RankStats],
    compute_median: f64,
    t: &Thresholds,
) -> Outcome {
    let mut hints: Vec<String> = Vec::new();
    let mut status = Status::Pass;
    let mut summary = throughput.to_string();

    if efficiency < t.warn_below || efficiency < t.fail_below {
        status = if efficiency < t.fail_below {
            Status::Fail
        } else {
            Status::Warn
        };
        let floor = if status == Status::Fail {
            t.fail_below
        } else {
            t.warn_below
        };
        summary.push_str(&format!(
            ": under the {floor:.2} {} floor",
            if status == Status::Fail {
                "failure"
            } else {
                "warning"
            }
        ));
        if comm_share >= COMM_BOUND_SHARE {
            hints.push(format!(
                "{:.0} % of each step waits on the gradient all-reduce, so the interconnect is the \
                 limit: compare nccl.allreduce bus bandwidth, check `nvidia-smi topo -m` (GPUs \
                 should reach each other over NV# links, not SYS or PHB), and make sure \
                 NCCL_P2P_DISABLE / NCCL_SHM_DISABLE are not set",
                comm_share * 100.0
            ));
        } else {
            hints.push(format!(
                "only {:.0} % of a step waits on communication, so the ranks are slower together \
                 than alone for another reason: a straggler GPU (throttling: `nvidia-smi -q -d \
                 PERFORMANCE`), CPU contention (other busy processes, too few cores per rank), or \
                 a GPU shared with another job (`nvidia-smi`)",
                comm_share * 100.0
            ));
        }
        // --min-scaling moves only the failure floor: offering it for a
        // warning would send the user to a flag that cannot clear it.
        if status == Status::Fail {
            hints.push(format!(
                "if this node is known to scale this way, set your own floor with --min-scaling X \
                 (now {:.2})",
                t.fail_below
            ));
        }
    }
    if !stragglers.is_empty() {
        status = status.worst(Status::Warn);
        let named: Vec<String> = stragglers
            .iter()
            .map(|r| {
                format!(
                    "rank {} on {} computes {:.2}x slower than the median rank",
                    r.rank,
                    r.device_label(),
                    r.fwd_bwd_local_p50_ms / compute_median
                )
            })
            .collect();
        summary.push_str(&format!("; straggler: {}", named.join("; ")));
        hints.push(
            "DDP runs every step at the pace of its slowest rank: check the named GPU for thermal \
             or power throttling (`nvidia-smi -q -d PERFORMANCE,CLOCK -i UUID`), a degraded PCIe \
             link (gpu.pcie) and other processes on it (`nvidia-smi`)"
                .to_string(),
        );
    }
    if status == Status::Pass {
        summary.push_str("; parameters identical on all ranks");
    }
    Outcome::new(status, summary).with_hint(hints.join("; "))
}

/// "ranks 0, 1 at 'world size 2: warm-up'; rank 3 never reported".
fn describe_stages(parsed: &Parsed) -> String {
    if parsed.stages.is_empty() {
        return "before any worker reported (torch import or rendezvous)".to_string();
    }
    let mut by_stage: Vec<(String, Vec<u32>)> = Vec::new();
    for (rank, stage) in &parsed.stages {
        match by_stage.iter_mut().find(|(s, _)| s == stage) {
            Some((_, ranks)) => ranks.push(*rank),
            None => by_stage.push((stage.clone(), vec![*rank])),
        }
    }
    let mut parts: Vec<String> = by_stage
        .iter()
        .map(|(stage, ranks)| format!("{} at '{stage}'", rank_list(ranks)))
        .collect();
    if let Some(setup) = &parsed.setup {
        let silent: Vec<u32> = (0..setup.world_size)
            .filter(|r| !parsed.stages.contains_key(r))
            .collect();
        if !silent.is_empty() {
            parts.push(format!("{} never reported", rank_list(&silent)));
        }
    }
    parts.join("; ")
}

fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() <= max {
        line.to_string()
    } else {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// Judge a run that did not finish: a worker error, a hang, a launcher that
/// could not start.
pub fn evaluate_failure(f: &RunFailure) -> Outcome {
    let tail_has = |needle: &str| f.tail.contains(needle);
    let mut outcome = if let Some(root) = f.parsed.errors.first() {
        let others: Vec<u32> = f
            .parsed
            .errors
            .iter()
            .skip(1)
            .map(|e| e.rank)
            .filter(|r| *r != root.rank)
            .collect();
        let then = if others.is_empty() {
            String::new()
        } else {
            format!(" ({} failed after it)", rank_list(&others))
        };
        if root.error == "no_gpu" {
            Outcome::fail(
                format!("rank {} has no GPU: {}{then}", root.rank, root.message),
                "start at most one process per visible GPU: lower --nproc, or check \
                 CUDA_VISIBLE_DEVICES",
            )
        } else {
            let message = first_line(&root.message, 300);
            let hint = if message.contains("out of memory") {
                "the model does not fit in GPU memory next to what is already there: free the \
                 GPU (`nvidia-smi` shows who holds memory) or use --ddp-model small"
            } else if message.contains("NCCL") || message.contains("nccl") {
                "NCCL failed between the ranks: rerun with NCCL_DEBUG=INFO and --verbose to see \
                 the transport and the failing call in the output tail, compare nccl.allreduce, \
                 and check `dmesg` for Xid errors"
            } else {
                "a DDP worker died; --verbose (or --json -) shows its traceback and the \
                 launcher's output: fix what they name, or rerun with NCCL_DEBUG=INFO \
                 TORCH_DISTRIBUTED_DEBUG=DETAIL"
            };
            Outcome::fail(
                format!("rank {} failed: {}: {message}{then}", root.rank, root.error),
                hint,
            )
        }
    } else {
        match &f.ending {
            Ending::NotStarted { reason } => Outcome::fail(
                format!("cannot start the benchmark: {reason}"),
                "point gpucheck at the training environment's interpreter with --python PATH",
            ),
            Ending::TimedOut { secs } => Outcome::fail(
                format!(
                    "timed out after {secs:.0} s: {}",
                    describe_stages(&f.parsed)
                ),
                HANG_HINT,
            ),
            Ending::Exited { .. }
                if tail_has("No module named torch") || tail_has("No module named 'torch'") =>
            {
                Outcome::fail(
                    format!("torch is not installed for {}", f.python),
                    format!(
                        "install PyTorch into the training environment (`{} -m pip install \
                         torch`), or point gpucheck at the right interpreter with --python PATH",
                        f.python
                    ),
                )
            }
            Ending::Exited { .. } if tail_has("Cuda is not available") => Outcome::fail(
                format!(
                    "torch ({}) sees no CUDA GPU, so torchrun cannot start a worker per GPU",
                    f.python
                ),
                "install a CUDA build of torch that this driver supports (see the torch checks), \
                 check CUDA_VISIBLE_DEVICES, or benchmark on CPUs with --ddp-device cpu",
            ),
            Ending::Exited {
                signal: Some(sig), ..
            } => Outcome::fail(
                format!(
                    "torchrun was killed by signal {sig} before the benchmark finished ({})",
                    describe_stages(&f.parsed)
                ),
                "check `dmesg` for the kernel's out-of-memory killer, or for whatever else \
                 stopped it",
            ),
            Ending::Exited { code: Some(0), .. } => Outcome::error(
                "torchrun exited cleanly but the benchmark reported no result",
            )
            .with_hint(
                "please report this with the output of `gpucheck --only ddp.benchmark --json -`",
            ),
            Ending::Exited { code, .. } => Outcome::fail(
                {
                    let status = code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "?".to_string());
                    if f.parsed.done {
                        format!(
                            "torchrun exited with status {status} after the benchmark \
                             finished, while shutting down"
                        )
                    } else {
                        format!(
                            "torchrun exited with status {status} before the benchmark \
                             finished ({})",
                            describe_stages(&f.parsed)
                        )
                    }
                },
                "--verbose (or --json -) shows the launcher's output tail; fix what it names",
            ),
        }
    };
    if let Some(root) = f.parsed.errors.first() {
        if !root.traceback.is_empty() {
            outcome = outcome.with_fact("worker_traceback", root.traceback.clone());
        }
    }
    if !f.tail.is_empty() {
        outcome = outcome.with_fact("stderr_tail", f.tail.clone());
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

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

    // ---- plan -------------------------------------------------------------

    fn opts(backend: Option<&str>, device: Option<&str>, nproc: Option<u32>) -> Options {
        Options {
            ddp_backend: backend.map(String::from),
            ddp_device: device.map(String::from),
            nproc,
            ..Options::default()
        }
    }

    #[test]
    fn default_plan_is_nccl_on_every_gpu() {
        let p = plan(&opts(None, None, None)).unwrap();
        assert_eq!(
            (p.device, p.backend, p.nproc, p.model),
            (
                BenchDevice::Cuda,
                Backend::Nccl,
                Nproc::EveryGpu,
                DdpModel::Medium
            )
        );
        assert_eq!((p.warmup_steps, p.timed_steps, p.no_sync_steps), CUDA_STEPS);
    }

    #[test]
    fn cpu_alone_means_gloo_with_two_processes() {
        let p = plan(&opts(None, Some("cpu"), None)).unwrap();
        assert_eq!(
            (p.device, p.backend, p.nproc),
            (BenchDevice::Cpu, Backend::Gloo, Nproc::Count(2))
        );
        let p = plan(&opts(Some("gloo"), Some("cpu"), Some(3))).unwrap();
        assert_eq!(p.nproc, Nproc::Count(3));
        // gloo alone still runs on the GPUs.
        let p = plan(&opts(Some("gloo"), None, None)).unwrap();
        assert_eq!(
            (p.device, p.backend, p.nproc),
            (BenchDevice::Cuda, Backend::Gloo, Nproc::EveryGpu)
        );
    }

    #[test]
    fn nccl_on_cpu_is_an_error_naming_the_flags_that_work() {
        let err = plan(&opts(Some("nccl"), Some("cpu"), None)).unwrap_err();
        assert_eq!(err, PlanError::NcclOnCpu);
        let o = err.outcome();
        assert_eq!(o.status, Status::Error);
        assert!(
            o.summary.contains("NCCL only moves GPU memory"),
            "{}",
            o.summary
        );
        assert_eq!(
            hint(&o),
            "benchmark on CPUs with --ddp-backend gloo --ddp-device cpu"
        );
        let o = plan(&opts(Some("mpi"), None, None)).unwrap_err().outcome();
        assert_eq!(o.summary, "unknown DDP backend 'mpi'");
        assert!(hint(&o).contains("--ddp-backend gloo"));
    }

    #[test]
    fn budget_leaves_a_margin_under_the_timeout() {
        assert_eq!(budget(180.0), Duration::from_secs(175));
        assert_eq!(budget(25.0), Duration::from_secs_f64(22.5));
        assert_eq!(budget(2.0), Duration::from_secs_f64(1.5));
        assert_eq!(budget(0.0), Duration::from_secs(175));
    }

    #[test]
    fn torchrun_command_is_a_single_node_c10d_launch() {
        let p = plan(&opts(Some("gloo"), Some("cpu"), Some(2))).unwrap();
        let script = Path::new("/tmp/gpucheck-ddp_bench-abc.py");
        let cmd = torchrun_command(
            Path::new("/venv/bin/python"),
            script,
            &p,
            29555,
            Duration::from_secs(60),
        );
        let line = describe_command(&cmd, script);
        assert!(
            line.starts_with(
                "/venv/bin/python -m torch.distributed.run --nnodes 1 --nproc-per-node 2 \
                 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29555"
            ),
            "{line}"
        );
        assert!(line.contains("--max-restarts 0"), "{line}");
        assert!(
            line.ends_with(
                "ddp_bench.py --device cpu --backend gloo --model medium --warmup 2 --steps 8 \
                 --no-sync-steps 4 --pg-timeout-s 60"
            ),
            "{line}"
        );
        let every = plan(&opts(None, None, None)).unwrap();
        let cmd = torchrun_command(
            Path::new("python3"),
            script,
            &every,
            1,
            Duration::from_secs(60),
        );
        assert!(describe_command(&cmd, script).contains("--nproc-per-node gpu"));
    }

    #[test]
    fn free_port_can_be_bound_again() {
        let port = free_store_port().unwrap();
        assert_ne!(port, 0);
        std::net::TcpListener::bind(("0.0.0.0", port)).unwrap();
    }

    // ---- parsing ----------------------------------------------------------

    const GOOD_STDOUT: &str = r#"some torch noise
@@gpucheck-ddp@@ {"stage":"import torch","kind":"stage","rank":0}
@@gpucheck-ddp@@ {"stage":"import torch","kind":"stage","rank":1}
@@gpucheck-ddp@@ {"torch_version":"2.15.0+cu132","backend":"gloo","device":"cpu","world_size":2,"model":"small","parameters":2104832,"samples_per_rank":8,"tokens_per_sample":16,"precision":"fp32","warmup_steps":2,"timed_steps":8,"no_sync_steps":4,"kind":"setup","rank":0}
@@gpucheck-ddp@@ {"samples_per_s":300.0,"step_p50_ms":26.0,"step_p95_ms":28.0,"kind":"single","rank":0}
@@gpucheck-ddp@@ {"not json
[rank1]: @@gpucheck-ddp@@ {"stage":"finished","kind":"stage","rank":1}
@@gpucheck-ddp@@ {"rank":0,"local_rank":0,"device_name":"cpu","device_uuid":null,"device_index":null,"wall_s":0.2,"step_p50_ms":26.5,"step_p95_ms":29.6,"fwd_bwd_sync_p50_ms":25.6,"fwd_bwd_local_p50_ms":14.3,"param_sum":1302.327074834025,"param_hash":"7663258649c4e81c","kind":"rank"}
@@gpucheck-ddp@@ {"rank":1,"local_rank":1,"device_name":"cpu","device_uuid":null,"device_index":null,"wall_s":0.21,"step_p50_ms":26.1,"step_p95_ms":34.5,"fwd_bwd_sync_p50_ms":25.3,"fwd_bwd_local_p50_ms":15.9,"param_sum":1302.327074834025,"param_hash":"7663258649c4e81c","kind":"rank"}
@@gpucheck-ddp@@ {"world_size":2,"samples_per_s":450.0,"kind":"multi","rank":0}
@@gpucheck-ddp@@ {"kind":"future_kind","rank":0}
@@gpucheck-ddp@@ {"kind":"done","rank":0}
@@gpucheck-ddp@@ {"stage":"finished","kind":"stage","rank":0}
"#;

    #[test]
    fn protocol_lines_are_read_and_noise_ignored() {
        let p = parse_records(GOOD_STDOUT);
        assert!(p.done);
        assert_eq!(p.setup.as_ref().unwrap().world_size, 2);
        assert_eq!(p.single.as_ref().unwrap().samples_per_s, 300.0);
        assert_eq!(p.multi.as_ref().unwrap().samples_per_s, 450.0);
        assert_eq!(p.ranks.len(), 2);
        assert_eq!(p.ranks[1].fwd_bwd_local_p50_ms, 15.9);
        assert!(p.errors.is_empty());
        // The last stage per rank, also from a line torch prefixed.
        assert_eq!(p.stages.get(&0).map(String::as_str), Some("finished"));
        assert_eq!(p.stages.get(&1).map(String::as_str), Some("finished"));
    }

    fn exited(code: i32, stdout: &str, stderr: &str) -> Result<Output, RunError> {
        Ok(Output {
            stdout: stdout.to_string(),
            stderr: stderr.to_string(),
            code: Some(code),
            signal: None,
        })
    }

    fn failed(run: BenchRun) -> RunFailure {
        match run {
            BenchRun::Failed(f) => f,
            BenchRun::Finished(f) => panic!("expected a failure, got {f:?}"),
        }
    }

    #[test]
    fn a_clean_exit_with_results_is_a_finished_run() {
        match interpret(exited(0, GOOD_STDOUT, "warnings"), "python") {
            BenchRun::Finished(f) => {
                assert_eq!(f.multi.world_size, 2);
                assert_eq!(f.ranks.len(), 2);
            }
            BenchRun::Failed(f) => panic!("{f:?}"),
        }
    }

    #[test]
    fn a_worker_error_is_a_failure_even_with_some_results() {
        let stdout = format!(
            "{GOOD_STDOUT}@@gpucheck-ddp@@ {{\"error\":\"RuntimeError\",\"message\":\"boom\",\"traceback\":\"tb\",\"kind\":\"error\",\"rank\":1}}\n"
        );
        let f = failed(interpret(
            exited(1, &stdout, "Traceback\nChildFailedError"),
            "python",
        ));
        assert_eq!(f.parsed.errors[0].rank, 1);
        assert_eq!(
            f.ending,
            Ending::Exited {
                code: Some(1),
                signal: None
            }
        );
        // Protocol lines stay out of the tail; the noise is kept.
        assert!(!f.tail.contains(MARK), "{}", f.tail);
        assert!(f.tail.contains("some torch noise") && f.tail.ends_with("ChildFailedError"));
    }

    #[test]
    fn a_timeout_and_a_spawn_failure_are_failures() {
        let f = failed(interpret(
            Err(RunError::Timeout {
                secs: 22.5,
                stdout: GOOD_STDOUT.to_string(),
                stderr: String::new(),
            }),
            "python",
        ));
        assert_eq!(f.ending, Ending::TimedOut { secs: 22.5 });
        let f = failed(interpret(
            Err(RunError::Spawn {
                program: "/x/python".to_string(),
                reason: "Permission denied".to_string(),
            }),
            "/x/python",
        ));
        assert!(matches!(f.ending, Ending::NotStarted { .. }));
        // A clean exit that never said "done" is not a finished run either.
        let f = failed(interpret(exited(0, "nothing", ""), "python"));
        assert_eq!(evaluate_failure(&f).status, Status::Error);
    }

    // ---- evaluate: finished runs -------------------------------------------

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
        assert!(o.facts["sync_verification"].starts_with("passed: parameters identical on all 8"));
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
        assert!(o.facts["sync_verification"].starts_with("failed: rank 2"));

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

    // ---- evaluate_failure ---------------------------------------------------

    fn failure(ending: Ending, stdout: &str, tail: &str) -> RunFailure {
        RunFailure {
            ending,
            parsed: parse_records(stdout),
            tail: tail.to_string(),
            python: "/venv/bin/python".to_string(),
        }
    }

    fn error_line(rank: u32, error: &str, message: &str) -> String {
        format!(
            "{MARK}{}\n",
            serde_json::json!({"kind": "error", "rank": rank, "error": error,
                "message": message, "traceback": format!("Traceback\n{error}: {message}")})
        )
    }

    const EXIT_1: Ending = Ending::Exited {
        code: Some(1),
        signal: None,
    };

    #[test]
    fn a_failed_worker_is_named_with_its_error_first() {
        let stdout = error_line(1, "RuntimeError", "boom\nsecond line")
            + &error_line(0, "RuntimeError", "Connection closed by peer");
        let o = evaluate_failure(&failure(EXIT_1, &stdout, "ChildFailedError"));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "rank 1 failed: RuntimeError: boom (rank 0 failed after it)"
        );
        assert!(hint(&o).starts_with("a DDP worker died"), "{}", hint(&o));
        assert_eq!(
            o.facts["worker_traceback"],
            "Traceback\nRuntimeError: boom\nsecond line"
        );
        assert_eq!(o.facts["stderr_tail"], "ChildFailedError");
    }

    #[test]
    fn out_of_memory_and_nccl_errors_get_their_own_hints() {
        let o = evaluate_failure(&failure(
            EXIT_1,
            &error_line(
                0,
                "OutOfMemoryError",
                "CUDA out of memory. Tried to allocate 2 GiB",
            ),
            "",
        ));
        assert!(hint(&o).contains("--ddp-model small"), "{}", hint(&o));
        let o = evaluate_failure(&failure(
            EXIT_1,
            &error_line(
                3,
                "DistBackendError",
                "NCCL error in: ProcessGroupNCCL.cpp, unhandled system error",
            ),
            "",
        ));
        assert!(o
            .summary
            .starts_with("rank 3 failed: DistBackendError: NCCL error"));
        assert!(hint(&o).starts_with("NCCL failed between the ranks: rerun with NCCL_DEBUG=INFO"));
    }

    #[test]
    fn a_rank_without_a_gpu_says_to_lower_nproc() {
        let o = evaluate_failure(&failure(
            EXIT_1,
            &error_line(
                2,
                "no_gpu",
                "local rank 2 has no GPU: torch sees 2 CUDA device(s)",
            ),
            "",
        ));
        assert_eq!(
            o.summary,
            "rank 2 has no GPU: local rank 2 has no GPU: torch sees 2 CUDA device(s)"
        );
        assert!(hint(&o).contains("lower --nproc"), "{}", hint(&o));
    }

    #[test]
    fn a_timeout_says_where_every_rank_was() {
        let stdout = r#"@@gpucheck-ddp@@ {"torch_version":"2","backend":"nccl","device":"cuda","world_size":4,"model":"small","parameters":1,"samples_per_rank":1,"tokens_per_sample":1,"precision":"fp32","warmup_steps":1,"timed_steps":1,"no_sync_steps":1,"kind":"setup","rank":0}
@@gpucheck-ddp@@ {"stage":"world size 4: warm-up","kind":"stage","rank":0}
@@gpucheck-ddp@@ {"stage":"world size 4: warm-up","kind":"stage","rank":1}
@@gpucheck-ddp@@ {"stage":"DDP setup","kind":"stage","rank":2}
"#;
        let o = evaluate_failure(&failure(Ending::TimedOut { secs: 22.5 }, stdout, ""));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "timed out after 22 s: ranks 0, 1 at 'world size 4: warm-up'; rank 2 at 'DDP \
             setup'; rank 3 never reported"
        );
        assert_eq!(hint(&o), HANG_HINT);
        assert!(HANG_HINT.contains("NCCL_DEBUG=INFO"));
        let o = evaluate_failure(&failure(Ending::TimedOut { secs: 60.0 }, "", ""));
        assert_eq!(
            o.summary,
            "timed out after 60 s: before any worker reported (torch import or rendezvous)"
        );
    }

    #[test]
    fn launcher_failures_are_explained() {
        let o = evaluate_failure(&failure(
            EXIT_1,
            "",
            "python: Error while finding module specification for 'torch.distributed.run' \
             (ModuleNotFoundError: No module named 'torch')",
        ));
        assert_eq!(o.summary, "torch is not installed for /venv/bin/python");
        assert!(hint(&o).contains("/venv/bin/python -m pip install torch"));

        let o = evaluate_failure(&failure(EXIT_1, "", "ValueError: Cuda is not available."));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("sees no CUDA GPU"), "{}", o.summary);
        assert!(hint(&o).contains("--ddp-device cpu"));

        let o = evaluate_failure(&failure(
            Ending::Exited {
                code: None,
                signal: Some(9),
            },
            "",
            "",
        ));
        assert!(o.summary.starts_with("torchrun was killed by signal 9"));
        assert!(hint(&o).contains("out-of-memory killer"));

        let o = evaluate_failure(&failure(
            Ending::Exited {
                code: Some(2),
                signal: None,
            },
            "",
            "torchrun: error: unrecognized arguments",
        ));
        assert_eq!(
            o.summary,
            "torchrun exited with status 2 before the benchmark finished (before any worker \
             reported (torch import or rendezvous))"
        );
        assert_eq!(
            o.facts["stderr_tail"],
            "torchrun: error: unrecognized arguments"
        );

        let o = evaluate_failure(&failure(EXIT_1, GOOD_STDOUT, "Segmentation fault"));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "torchrun exited with status 1 after the benchmark finished, while shutting down"
        );

        let o = evaluate_failure(&failure(
            Ending::NotStarted {
                reason: "/x/python: Permission denied".to_string(),
            },
            "",
            "",
        ));
        assert_eq!(
            o.summary,
            "cannot start the benchmark: /x/python: Permission denied"
        );
        assert!(hint(&o).contains("--python PATH"));
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

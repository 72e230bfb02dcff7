//! Probe: a DistributedDataParallel benchmark run through the user's own
//! Python, torch and torchrun, and what it reported.
//!
//! The payload (checks/payloads/ddp_bench.py) is launched as
//! `python -m torch.distributed.run` on a loopback port found free. Rank 0
//! first trains a synthetic model alone (world size 1), then every rank
//! trains it under DDP (world size N). Rank 0 reports the numbers as marked
//! JSON lines on stdout; [`parse_records`] reads them and [`interpret`] turns
//! what torchrun left behind into a finished run or a failure, plain data for
//! the ddp check to judge.
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

use super::process::{self, Output, RunError};
use super::python::{self, PayloadError, PayloadFile};
use crate::{DdpBackend, DdpDevice, DdpModel};

/// The benchmark program, embedded so gpucheck stays one file.
const PAYLOAD: &str = include_str!("../../payloads/ddp_bench.py");
/// Prefix of every protocol line the payload writes on stdout.
pub const MARK: &str = "@@gpucheck-ddp@@ ";

/// How many processes torchrun starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nproc {
    Count(u32),
    /// One per GPU torch can see (`--nproc-per-node gpu`: torchrun counts
    /// them with torch.cuda.device_count(), honouring CUDA_VISIBLE_DEVICES).
    EveryGpu,
}

/// The benchmark to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub device: DdpDevice,
    pub backend: DdpBackend,
    pub nproc: Nproc,
    pub model: DdpModel,
    pub warmup_steps: u32,
    pub timed_steps: u32,
    pub no_sync_steps: u32,
}

/// True when this machine has an NVIDIA (or ROCm, or WSL) GPU device node:
/// without one no GPU can be used, and starting Python would only confirm it.
pub fn gpu_device_nodes_present() -> bool {
    crate::seam::answer("ddp::gpu_device_nodes_present", "", || {
        ["/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd"]
            .iter()
            .any(|p| Path::new(p).exists())
    })
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

/// The address this node's agent publishes for the single-node rendezvous.
const LOCAL_ADDR: &str = "127.0.0.1";

/// How long finding torch's launcher may take (a Python start, no import).
const FIND_TORCHRUN_TIMEOUT: Duration = Duration::from_secs(10);

/// How `python`'s torchrun spells its --local-addr option, when it has one.
/// Without it, c10d rendezvous publishes `socket.getfqdn()` as the master
/// address, and where the hostname does not resolve (cloud VMs, pods) the
/// workers cannot connect (pytorch/pytorch#73656, #150532). Read from
/// torch/distributed/run.py, found without importing torch.
fn torchrun_local_addr_flag(python: &Path) -> Option<&'static str> {
    let mut cmd = python::python_command(python);
    cmd.args([
        "-c",
        "import importlib.util as u; s = u.find_spec('torch'); \
         print((s.submodule_search_locations or [''])[0] if s else '')",
    ]);
    let out = process::run_bounded(cmd, FIND_TORCHRUN_TIMEOUT).ok()?;
    let torch = out.stdout.trim();
    if out.code != Some(0) || torch.is_empty() {
        return None;
    }
    let run_py = std::fs::read_to_string(Path::new(torch).join("distributed/run.py")).ok()?;
    local_addr_flag(&run_py)
}

/// The spelling of torchrun's --local-addr option in the source of
/// torch/distributed/run.py (torch 2.x: "--local-addr" with "--local_addr"
/// as its alias), or None when this torch has none.
pub fn local_addr_flag(run_py: &str) -> Option<&'static str> {
    ["--local-addr", "--local_addr"]
        .into_iter()
        .find(|flag| run_py.contains(&format!("\"{flag}\"")))
}

/// `python -m torch.distributed.run ... payload ...`: single node, c10d
/// rendezvous on 127.0.0.1:port (this node's address pinned to 127.0.0.1
/// where torchrun takes `local_addr_flag`), no restarts, a short monitor
/// interval so a dead worker ends the run promptly.
fn torchrun_command(
    python: &Path,
    script: &Path,
    plan: &Plan,
    port: u16,
    budget: Duration,
    local_addr_flag: Option<&str>,
) -> Command {
    let mut cmd = python::python_command(python);
    // torchrun takes PET_* variables as defaults for its own flags (a stray
    // PET_TEE or PET_REDIRECTS would hide the workers' output); the
    // benchmark's launch is gpucheck's own.
    for key in crate::seam::env_names() {
        if key.starts_with("PET_") {
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
        .args(["--rdzv-id", &format!("gpucheck-ddp-{}", std::process::id())]);
    if let Some(flag) = local_addr_flag {
        cmd.args([flag, LOCAL_ADDR]);
    }
    cmd.args(["--max-restarts", "0", "--monitor-interval", "0.2"])
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
        if crate::seam::env(key).is_none() {
            cmd.env(key, value);
        }
    }
    cmd
}

/// Why the benchmark could not be launched at all.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum LaunchError {
    /// No free TCP port for the rendezvous store.
    NoStorePort(String),
    /// The payload could not be written.
    Payload(PayloadError),
}

/// A benchmark that was launched: how it went, and the command line.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Launched {
    pub run: BenchRun,
    /// The launch as a person would retype it (the payload by its name).
    pub launcher: String,
}

/// Launch the benchmark with `python`'s torchrun and wait for it at most
/// `budget`; then kill whatever still runs the payload.
pub fn run(python: &Path, plan: &Plan, budget: Duration) -> Result<Launched, LaunchError> {
    crate::seam::answer(
        "ddp::run",
        &format!("{}, {plan:?}", python.display()),
        || {
            let port = free_store_port().map_err(|e| LaunchError::NoStorePort(e.to_string()))?;
            let file = PayloadFile::write("ddp_bench", PAYLOAD).map_err(LaunchError::Payload)?;
            let local_addr = torchrun_local_addr_flag(python);
            let cmd = torchrun_command(python, file.path(), plan, port, budget, local_addr);
            let launcher = describe_command(&cmd, file.path());
            super::stage("torchrun");
            let result = process::run_bounded_then(cmd, budget, || {
                process::kill_processes_with_arg(file.path().as_os_str(), Duration::from_secs(2));
            });
            Ok(Launched {
                run: interpret(result, &python.display().to_string()),
                launcher,
            })
        },
    )
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
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
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
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
pub struct SingleStats {
    pub samples_per_s: f64,
    pub step_p50_ms: f64,
    pub step_p95_ms: f64,
}

/// All ranks under DDP: global throughput.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
pub struct MultiStats {
    pub world_size: u32,
    pub samples_per_s: f64,
}

/// One rank's numbers under DDP.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
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
    pub fn device_label(&self) -> String {
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
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BenchFacts {
    pub setup: Setup,
    pub single: SingleStats,
    pub multi: MultiStats,
    pub ranks: Vec<RankStats>,
}

/// How a run that did not finish ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunFailure {
    pub ending: Ending,
    pub parsed: Parsed,
    /// The last lines of torchrun's and the workers' stderr and of stdout
    /// that was not protocol.
    pub tail: String,
    pub python: String,
}

/// How a benchmark went.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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

// ---- parsing ----------------------------------------------------------

/// A healthy two-rank CPU run as torchrun's stdout shows it.
#[cfg(test)]
pub const GOOD_STDOUT: &str = r#"some torch noise
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

/// What a finished torchrun run gives: exit `code` with this output.
#[cfg(test)]
pub fn exited(code: i32, stdout: &str, stderr: &str) -> Result<Output, RunError> {
    Ok(Output {
        stdout: stdout.to_string(),
        stderr: stderr.to_string(),
        code: Some(code),
        signal: None,
    })
}

/// The failure of a run the test expects to have failed.
#[cfg(test)]
pub fn failed(run: BenchRun) -> RunFailure {
    match run {
        BenchRun::Failed(f) => f,
        BenchRun::Finished(f) => panic!("expected a failure, got {f:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DdpModel;

    fn cpu_plan(nproc: Nproc) -> Plan {
        Plan {
            device: DdpDevice::Cpu,
            backend: DdpBackend::Gloo,
            nproc,
            model: DdpModel::Medium,
            warmup_steps: 2,
            timed_steps: 8,
            no_sync_steps: 4,
        }
    }

    #[test]
    fn torchrun_command_is_a_single_node_c10d_launch() {
        let p = cpu_plan(Nproc::Count(2));
        let script = Path::new("/tmp/gpucheck-ddp_bench-abc.py");
        let cmd = torchrun_command(
            Path::new("/venv/bin/python"),
            script,
            &p,
            29555,
            Duration::from_secs(60),
            None,
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
        let every = Plan {
            nproc: Nproc::EveryGpu,
            ..cpu_plan(Nproc::Count(1))
        };
        let cmd = torchrun_command(
            Path::new("python3"),
            script,
            &every,
            1,
            Duration::from_secs(60),
            None,
        );
        assert!(describe_command(&cmd, script).contains("--nproc-per-node gpu"));
    }

    #[test]
    fn the_launch_pins_the_local_address_where_torchrun_takes_it() {
        let script = Path::new("/tmp/gpucheck-ddp_bench-abc.py");
        let cmd = torchrun_command(
            Path::new("/venv/bin/python"),
            script,
            &cpu_plan(Nproc::Count(2)),
            29555,
            Duration::from_secs(60),
            Some("--local-addr"),
        );
        let line = describe_command(&cmd, script);
        assert!(
            line.contains("--rdzv-endpoint 127.0.0.1:29555 --rdzv-id")
                && line.contains(" --local-addr 127.0.0.1 --max-restarts 0"),
            "{line}"
        );
        // Which spelling this torch's launcher has, from its source.
        let new = "parser.add_argument(\n    \"--local-addr\",\n    \"--local_addr\",";
        assert_eq!(local_addr_flag(new), Some("--local-addr"));
        let old = "parser.add_argument(\"--local_addr\", default=None";
        assert_eq!(local_addr_flag(old), Some("--local_addr"));
        assert_eq!(
            local_addr_flag("parser.add_argument(\"--master_addr\""),
            None
        );
    }

    #[test]
    fn free_port_can_be_bound_again() {
        let port = free_store_port().unwrap();
        assert_ne!(port, 0);
        std::net::TcpListener::bind(("0.0.0.0", port)).unwrap();
    }

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
}

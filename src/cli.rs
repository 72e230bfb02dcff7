//! The command line: `gpucheck [run]`, `list`, `explain ID`, `exec -- CMD`,
//! `completions SHELL`, and the hidden `__child` used for isolated checks.
//! Every definition here also feeds the man page and shell completions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use gpucheck_checks::{DdpBackend, DdpDevice, DdpModel, Profile};

use crate::report::Format;

pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  no check failed (warnings allowed)
  1  at least one check failed or errored (or warned, under --strict),
     the run was interrupted, or it verified nothing (every check skipped,
     or a check named with --only skipped)
  2  usage or configuration error (bad flag, unknown check id,
     unwritable report path); 1 under --profile health (Docker reserves 2)";

#[derive(Debug, Parser)]
#[command(
    name = "gpucheck",
    version,
    about = "Is this machine ready for multi-GPU PyTorch DDP training? Checks driver to DDP step and says what to fix.",
    long_about = "gpucheck runs an ordered set of checks, from the GPU driver through CUDA, PyTorch and NCCL \
to a DDP step, and reports each as pass / warn / fail / skip / error with a concrete hint. \
Run it before torchrun, as a container ENTRYPOINT (gpucheck exec -- torchrun ...) or HEALTHCHECK \
(gpucheck --profile health --quiet), or in CI (gpucheck --junit report.xml --json report.json).",
    after_help = EXIT_CODES_HELP,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the checks (the default when no subcommand is given).
    #[command(after_help = EXIT_CODES_HELP)]
    Run(RunArgs),
    /// List the checks: id, group, profile, title.
    List(ListArgs),
    /// Explain a check: what it checks, why it matters for DDP, how to fix it.
    Explain {
        /// Check id (host.shm) or group (nccl: every check of it).
        id: String,
    },
    /// Run the checks, then replace gpucheck with CMD if they pass (for ENTRYPOINT).
    #[command(
        after_help = "On pass, gpucheck execs CMD (it keeps gpucheck's PID and gets the \
signals). On fail, the report goes to stderr and gpucheck exits 1 without running CMD, unless \
--on-fail warn. Interrupted during the checks (Ctrl-C, SIGTERM, SIGHUP or another stop signal), it exits 1 without running CMD. \
If CMD cannot be started, the exit code is 127 (not found) or 126.\n\nWith --watch, gpucheck stays CMD's \
parent and watches the job: a crashed rank, a hang (diagnosed as gpucheck job does) or a straggler is \
named on stderr within seconds; gpucheck exits with CMD's exit code, or 124 when --on-hang stop \
ended a hung job.\n\nExample: gpucheck exec --profile quick -- torchrun --nproc-per-node 8 train.py"
    )]
    #[command(
        mut_arg("json", |a| a.help("Also write the JSON report to FILE (- for stderr: stdout belongs to CMD).")),
        mut_arg("junit", |a| a.help("Also write the JUnit XML report to FILE (- for stderr: stdout belongs to CMD)."))
    )]
    Exec(ExecArgs),
    /// Check every node of a multi-node job together: run on every node; node rank 0 gathers
    /// the reports through torch.distributed and names the node that is not ready.
    #[command(after_help = CLUSTER_HELP)]
    Cluster(ClusterArgs),
    /// Judge a running or hung distributed job, live on its node or from its ranks' Flight
    /// Recorder dumps: name the ranks at fault, the collective and why.
    #[command(after_help = JOB_HELP)]
    Job(JobArgs),
    /// Print shell completions for SHELL to stdout.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Run the checks and keep every answer the probes got in FILE (= a run with --capture FILE),
    /// for `--replay` on any machine or to attach to a bug report (with --redact).
    #[command(after_help = CAPTURE_HELP)]
    Capture(CaptureArgs),
    /// Internal: run one check in this process and write its outcome as JSON.
    #[command(name = "__child", hide = true)]
    Child {
        /// The check id.
        id: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnFail {
    /// Report to stderr and exit 1 without running CMD.
    Exit,
    /// Report to stderr and run CMD anyway.
    Warn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    Quick,
    Standard,
    Full,
    Health,
    Burn,
}

impl RunArgs {
    /// The profile given with --profile, else standard. A replay resolves
    /// its own default (the capture's profile) in the pipeline's plan.
    pub fn profile(&self) -> Profile {
        self.profile.map(Profile::from).unwrap_or(Profile::Standard)
    }
}

impl From<ProfileArg> for Profile {
    fn from(p: ProfileArg) -> Self {
        match p {
            ProfileArg::Quick => Profile::Quick,
            ProfileArg::Standard => Profile::Standard,
            ProfileArg::Full => Profile::Full,
            ProfileArg::Health => Profile::Health,
            ProfileArg::Burn => Profile::Burn,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DdpModelArg {
    Small,
    Medium,
    Large,
}

impl From<DdpModelArg> for DdpModel {
    fn from(m: DdpModelArg) -> Self {
        match m {
            DdpModelArg::Small => DdpModel::Small,
            DdpModelArg::Medium => DdpModel::Medium,
            DdpModelArg::Large => DdpModel::Large,
        }
    }
}

/// Options shared by `run` and `exec`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Which checks to run: quick, standard, full (each adds to the one before), health (for
    /// HEALTHCHECK) or burn (burn-in for --duration); --help lists what each holds.
    /// Default: standard; under --replay, the capture's own.
    #[arg(
        long,
        value_enum,
        long_help = profiles_help(),
        help_heading = "Selection"
    )]
    pub profile: Option<ProfileArg>,
    /// Run only these checks: ids (gpu.ecc), groups (gpu, net.*) or globs (*.driver).
    /// Comma-separated or repeated. Ignores the profile, except that a group or glob
    /// selects a full or burn check (the load checks, ddp.benchmark) only under a
    /// profile that runs it; its exact id always selects it.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "PATTERN",
        help_heading = "Selection"
    )]
    pub only: Vec<String>,
    /// Skip these checks (ids, groups or globs; comma-separated or repeated).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "PATTERN",
        help_heading = "Selection"
    )]
    pub skip: Vec<String>,
    /// Per-check timeout in seconds, overriding every check's default.
    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse_timeout,
        allow_negative_numbers = true,
        help_heading = "Selection"
    )]
    pub timeout: Option<f64>,
    /// How long --profile burn keeps the GPUs under load: 90s, 10m, 2h (default 10m).
    #[arg(
        long,
        value_name = "TIME",
        value_parser = parse_duration,
        help_heading = "Selection"
    )]
    pub duration: Option<f64>,

    #[command(flatten)]
    pub output: OutputArgs,

    /// Also keep every answer the probes got in FILE, a capture that `--replay` judges again anywhere.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "replay",
        help_heading = "Capture and replay"
    )]
    pub capture: Option<PathBuf>,
    /// Judge a capture instead of this machine: the checks of its profile (or --profile's) run against FILE's answers.
    #[arg(long, value_name = "FILE", help_heading = "Capture and replay")]
    pub replay: Option<PathBuf>,
    /// In the capture, replace host and user names, IP and MAC addresses, serials, part numbers and GPU UUIDs.
    #[arg(long, help_heading = "Capture and replay")]
    pub redact: bool,

    /// Expect at least N GPUs; fewer fails gpu.count.
    #[arg(
        long,
        value_name = "N",
        env = "GPUCHECK_EXPECT_GPUS",
        help_heading = "Machine"
    )]
    pub expect_gpus: Option<u32>,
    /// Load this libnvidia-ml.so instead of the system's.
    #[arg(long, value_name = "PATH", help_heading = "Machine")]
    pub nvml_lib: Option<PathBuf>,
    /// Use this libnccl.so.2 for the NCCL checks.
    #[arg(
        long,
        value_name = "PATH",
        env = "GPUCHECK_NCCL_LIB",
        help_heading = "Machine"
    )]
    pub nccl_lib: Option<PathBuf>,
    /// The Python that will train (default: $VIRTUAL_ENV, the environment gpucheck is installed in, $CONDA_PREFIX, then python3 on PATH).
    #[arg(
        long,
        value_name = "PATH",
        env = "GPUCHECK_PYTHON",
        help_heading = "Machine"
    )]
    pub python: Option<PathBuf>,
    /// Fail nccl.allreduce (and, under `cluster`, fleet.allreduce) below this bus bandwidth (GB/s) instead of the topology's expectation.
    #[arg(
        long,
        value_name = "GBPS",
        value_parser = parse_positive,
        allow_negative_numbers = true,
        help_heading = "Machine"
    )]
    pub min_busbw: Option<f64>,
    /// Read Xid errors from this kernel log (syslog, dmesg or journalctl -k output) instead of /dev/kmsg.
    #[arg(long, value_name = "PATH", help_heading = "Machine")]
    pub kernel_log: Option<PathBuf>,

    /// DDP benchmark world size (default: the visible GPU count); under `cluster`, the ranks each node brings to the cross-node all-reduce.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024), help_heading = "DDP benchmark")]
    pub nproc: Option<u32>,
    /// DDP benchmark model size.
    #[arg(
        long,
        value_enum,
        default_value = "medium",
        help_heading = "DDP benchmark"
    )]
    pub ddp_model: DdpModelArg,
    /// DDP benchmark process-group backend.
    #[arg(long, value_enum, help_heading = "DDP benchmark")]
    pub ddp_backend: Option<DdpBackend>,
    /// DDP benchmark device (cpu runs the benchmark with gloo on CPUs, report only).
    #[arg(long, value_enum, help_heading = "DDP benchmark")]
    pub ddp_device: Option<DdpDevice>,
    /// Fail the DDP benchmark when scaling efficiency is below X (0-1; default 0.5, warn below 0.8).
    #[arg(
        long,
        value_name = "X",
        value_parser = parse_fraction,
        allow_negative_numbers = true,
        help_heading = "DDP benchmark"
    )]
    pub min_scaling: Option<f64>,
}

/// How the report reads and where it goes: shared by every command that
/// reports a run (`run`, `exec`, `capture`, `cluster`, `job`).
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Format for stdout.
    #[arg(long, value_enum, default_value = "table", help_heading = "Output")]
    pub format: Format,
    /// Also write the JSON report to FILE (- for stdout).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub json: Option<PathBuf>,
    /// Also write the JUnit XML report to FILE (- for stdout).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub junit: Option<PathBuf>,
    /// Also write the Prometheus text report to FILE, for node_exporter's textfile collector (- for stdout).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub prom: Option<PathBuf>,
    /// Also write the Markdown report to FILE, e.g. $GITHUB_STEP_SUMMARY (- for stdout).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub markdown: Option<PathBuf>,
    /// Also write a self-contained HTML page to FILE, to attach to an incident: the verdict, the fixes and, for a job, its wavefront and each rank's lateness (- for stdout).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub html: Option<PathBuf>,
    /// Colour in the table: auto (only on a terminal, never with NO_COLOR), always, never.
    #[arg(long, value_enum, default_value = "auto", help_heading = "Output")]
    pub color: ColorChoice,
    /// Show metrics and per-GPU rows in the table.
    #[arg(short, long, help_heading = "Output")]
    pub verbose: bool,
    /// Print only the one-line verdict (reports given with --json/--junit are still written).
    #[arg(short, long, conflicts_with = "verbose", help_heading = "Output")]
    pub quiet: bool,
    /// Treat warnings as failures (exit 1).
    #[arg(long, help_heading = "Output")]
    pub strict: bool,
}

pub const JOB_HELP: &str = "\
Without --traces: looks at the job running on this node (its ranks are the processes with RANK \
and WORLD_SIZE in their environment, or --pid's): each rank's Python stack (its worker server, \
else py-spy) and Flight Recorder (its worker server) for 2 s, NVML's process lists and the \
kernel log's Xids since the job started. Nothing is stopped. job.traces (the ranks and their \
state), job.hang (the ranks the others wait for, with their frame), job.straggler, job.gpus \
(each rank's GPU, placement mistakes, Xids since the start), job.fabric (the RDMA ports its \
NCCL_IB_HCA selects that are down), job.nccl_ras (NCCL's RAS, asked once).\n\n\
With --traces DIR: reads every file in DIR whose name ends in a rank number (rank_0, \
nccl_trace_rank_7, fr_3.json), pickle or JSON, and judges the job: job.traces (which ranks left \
a readable dump), job.hang (the ranks at the wavefront of a hang or desync, never the waiting \
majority) and job.straggler (a rank that enters collectives late, again and again). Pickles are \
decoded without running any of their code.\n\n\
Exit codes: 0 nothing wrong, 1 a problem is named (or a dump cannot be read), 2 usage, no \
rank's dump in DIR, or no job running here.\n\n\
With --nnodes N (and --node-rank, --master-addr, --master-port) on every node: the nodes meet \
through gpucheck cluster's rendezvous and node rank 0 judges the whole job.\n\n\
With --watch: keeps watching the running job until it ends, naming a crashed rank, a hang (then \
diagnosed as above) or a straggler as it happens; exit 124 when --on-hang stop ended a hung job. \
With --watch and --nnodes on every node, each node sends node rank 0 a summary of its ranks every \
period; node 0 judges the whole job, asks the culprit's node for its diagnosis, and under \
--on-hang stop has every node end its ranks.\n\n\
Examples: gpucheck job --pid 41872; gpucheck job --traces /shared/fr-dumps/ --json job.json; \
gpucheck job --watch --hang-after 120";

/// `gpucheck job`.
#[derive(Debug, Clone, Args)]
pub struct JobArgs {
    /// The folder of the job's Flight Recorder dumps, one file per rank (TORCH_FR_DUMP_TEMP_FILE's
    /// folder, or where the job's dumps were gathered).
    #[arg(long, value_name = "DIR", conflicts_with = "pid")]
    pub traces: Option<PathBuf>,
    /// Look only at the job under this process (its launcher, or one of its ranks), when
    /// several jobs run on this node.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pub pid: Option<i32>,
    /// The training Python, which runs the cross-node rendezvous under --nnodes (default:
    /// $VIRTUAL_ENV, $CONDA_PREFIX, python3 on PATH).
    #[arg(
        long,
        value_name = "PATH",
        env = "GPUCHECK_PYTHON",
        help_heading = "Machine"
    )]
    pub python: Option<PathBuf>,
    /// Load this libnvidia-ml.so instead of the system's (job.gpus).
    #[arg(long, value_name = "PATH", help_heading = "Machine")]
    pub nvml_lib: Option<PathBuf>,
    /// Read Xid events from this file instead of the kernel's own log (job.gpus).
    #[arg(long, value_name = "PATH", help_heading = "Machine")]
    pub kernel_log: Option<PathBuf>,
    /// Also keep every answer gpucheck got from the job, its node and its dumps in FILE, a
    /// capture that `gpucheck job --replay FILE` judges again anywhere.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "replay",
        help_heading = "Capture and replay"
    )]
    pub capture: Option<PathBuf>,
    /// Judge a job's capture (made with `gpucheck job --capture`) instead of a job.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["traces", "pid"], help_heading = "Capture and replay")]
    pub replay: Option<PathBuf>,
    /// In the capture, replace host and user names, IP and MAC addresses, serials and GPU UUIDs.
    #[arg(long, help_heading = "Capture and replay")]
    pub redact: bool,
    /// Per-check timeout in seconds, overriding every job check's default (60).
    #[arg(long, value_name = "SECS", value_parser = parse_timeout, allow_negative_numbers = true)]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub watch: WatchFlags,
    /// Watch the job on every node at once (run on each, with --nnodes ...): node rank 0
    /// gathers every node's ranks through the same rendezvous as `gpucheck cluster` and
    /// judges the whole job.
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What a watch does when the diagnosis confirms a hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnHang {
    /// Write the reports and keep watching (a hang that clears is said to have cleared).
    Report,
    /// Ask the hung ranks' recorders to dump, keep the capture, then end the job (SIGTERM to
    /// the launcher's process group, SIGKILL after 10 s) and exit 124.
    Stop,
}

/// `--watch` and its options (`gpucheck exec`, `gpucheck job`).
#[derive(Debug, Clone, Args)]
pub struct WatchFlags {
    /// Keep watching the running job: name a crashed rank, a hang or a straggler within
    /// seconds, as it happens, with no change to the training code.
    #[arg(long, help_heading = "Watch")]
    pub watch: bool,
    /// Suspect a hang when the ranks waiting in a collective have not moved for SECONDS
    /// (default: the larger of 60 s and 5 times the longest wait seen to end).
    #[arg(long, value_name = "SECONDS", requires = "watch", value_parser = parse_hang_after, help_heading = "Watch")]
    pub hang_after: Option<f64>,
    /// What to do once a hang is confirmed.
    #[arg(
        long,
        value_enum,
        default_value = "report",
        requires = "watch",
        help_heading = "Watch"
    )]
    pub on_hang: OnHang,
}

/// `--hang-after`: a number of seconds, at least 1.
fn parse_hang_after(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (1.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds from 1 to 86400")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// What to do when a check fails: exit 1 without running CMD, or warn and run it.
    #[arg(long, value_enum, default_value = "exit")]
    pub on_fail: OnFail,
    /// Gate on the whole job (`gpucheck cluster` on every node): run CMD only when every
    /// node is ready. Takes the cluster flags (--nnodes, --node-rank, --master-addr...).
    #[arg(long)]
    pub cluster: bool,
    #[command(flatten)]
    pub cluster_flags: ClusterFlags,
    /// Under --watch, gpucheck stays CMD's parent (CMD runs in a process group of its own,
    /// the signals gpucheck gets are passed on to it) and exits with CMD's exit code.
    #[command(flatten)]
    pub watch: WatchFlags,
    /// The command to run when the checks pass. Passed on byte for byte
    /// (arguments need not be UTF-8).
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub command: Vec<std::ffi::OsString>,
}

pub const CAPTURE_HELP: &str = "\
A capture holds what NVML, CUDA, NCCL, the training Python, /sys, /proc and the environment \
answered, the options and the profile; `gpucheck --replay FILE` judges it again on any machine, \
without a GPU. Secrets never enter it; --redact also replaces host names, IP and MAC addresses, \
serial and part numbers and GPU UUIDs by placeholders.\n\n\
Reporting a problem: attach the file written by `gpucheck capture --redact report.capture.json`.";

#[derive(Debug, Clone, Args)]
pub struct CaptureArgs {
    /// Where to write the capture (JSON).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Print the list as a table or as JSON.
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

/// "90s", "10m", "2h" or a number of seconds, to seconds.
fn parse_duration(s: &str) -> Result<f64, String> {
    let (number, scale) = match s.trim().char_indices().last() {
        Some((i, 's')) => (&s[..i], 1.0),
        Some((i, 'm')) => (&s[..i], 60.0),
        Some((i, 'h')) => (&s[..i], 3600.0),
        _ => (s, 1.0),
    };
    let most = gpucheck_checks::gpu::MAX_DURATION.as_secs_f64();
    match number.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v * scale <= most => Ok(v * scale),
        // Refused rather than cut short: a burn asked for 25h must not
        // quietly end after 24.
        Ok(v) if v > 0.0 => Err(format!(
            "'{s}' is longer than a burn runs (at most {}h)",
            most / 3600.0
        )),
        _ => Err(format!(
            "'{s}' is not a duration (a positive number with s, m or h: 90s, 10m, 2h)"
        )),
    }
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if v.is_nan() || v <= 0.0 {
        return Err(format!("must be more than 0 seconds, got '{s}'"));
    }
    // Below a millisecond every check "times out" before it starts.
    if v < MIN_TIMEOUT_S {
        return Err(format!(
            "must be at least {MIN_TIMEOUT_S} seconds, got '{s}'"
        ));
    }
    if v > MAX_TIMEOUT_S {
        return Err(format!(
            "must be at most {MAX_TIMEOUT_S} seconds (a day), got '{s}'"
        ));
    }
    Ok(v)
}

/// Bounds of `--timeout`: a millisecond, a day.
const MIN_TIMEOUT_S: f64 = 0.001;
const MAX_TIMEOUT_S: f64 = 86_400.0;

fn parse_positive(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("must be a positive number, got '{s}'"));
    }
    Ok(v)
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if !(v > 0.0 && v <= 1.0) {
        return Err(format!("must be between 0 and 1 (e.g. 0.8), got '{s}'"));
    }
    Ok(v)
}

/// Each profile, what it is for, and the checks it holds, drawn from the
/// catalog: a whole group is named once (`gpu.*`), and each level names
/// only what it adds to the one before. `--help` and the README show these.
pub fn profile_rows() -> Vec<(Profile, &'static str, String)> {
    let mut rows = Vec::new();
    let mut before: Vec<&str> = Vec::new();
    for (profile, about) in [
        (
            Profile::Quick,
            "NVML, device nodes, host, fabric and launch settings; no CUDA, no Python",
        ),
        (
            Profile::Standard,
            "the default; adds CUDA, PyTorch and NCCL",
        ),
        (
            Profile::Full,
            "adds the NCCL size sweep in nccl.allreduce, the DDP benchmark and the GPU load checks (about a minute on 8 GPUs)",
        ),
        (
            Profile::Health,
            "for HEALTHCHECK: is the hardware still healthy while a job runs on it? \
             No launch preconditions (ports, launch variables), which a running job changes",
        ),
        (
            Profile::Burn,
            "burn-in: the quick checks, then compute and memory load repeated for --duration",
        ),
    ] {
        let ids: Vec<&str> = profile.checks().iter().map(|c| c.id()).collect();
        let apart = matches!(profile, Profile::Health | Profile::Burn);
        let shown: Vec<&str> = if apart {
            ids.clone()
        } else {
            ids.iter()
                .copied()
                .filter(|id| !before.contains(id))
                .collect()
        };
        rows.push((profile, about, compact_ids(&shown)));
        if !apart {
            before = ids;
        }
    }
    rows
}

/// `--profile`'s long help: [`profile_rows`].
pub fn profiles_help() -> String {
    let mut text = String::from(
        "Which checks to run (default: standard; under --replay, the profile the capture \
         ran).\n",
    );
    for (profile, about, ids) in profile_rows() {
        text.push_str(&format!("\n{} ({about}): {ids}", profile.as_str()));
    }
    text
}

/// `gpu.driver, gpu.count, ...` with every group that is whole written
/// `gpu.*`.
pub fn compact_ids(ids: &[&str]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut done: Vec<&str> = Vec::new();
    for id in ids {
        let group = id.split('.').next().unwrap_or(id);
        if done.contains(&group) {
            continue;
        }
        let members: Vec<&str> = gpucheck_checks::CATALOG
            .iter()
            .map(|c| c.id())
            .filter(|c| c.split('.').next() == Some(group))
            .collect();
        if members.len() > 1 && members.iter().all(|m| ids.contains(m)) {
            out.push(format!("{group}.*"));
            done.push(group);
        } else {
            out.push(id.to_string());
        }
    }
    out.join(", ")
}

/// The command line as shell completion sees it: without the hidden
/// internal subcommand, and with every check id and group offered for
/// `--only`, `--skip` and `explain` (only offered: the parser itself also
/// takes globs, so it is not restricted to these).
pub fn completion_command() -> clap::Command {
    let mut names: Vec<&'static str> = Vec::new();
    for c in gpucheck_checks::CATALOG {
        for name in [c.group(), c.id()] {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let offer = |cmd: clap::Command| {
        cmd.mut_args(|a| match a.get_id().as_str() {
            "only" | "skip" | "id" => a.value_parser(clap::builder::PossibleValuesParser::new(
                names.iter().copied(),
            )),
            _ => a,
        })
    };
    let full = command();
    let subcommands: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .map(offer)
        .collect();
    let mut top = clap::Command::new("gpucheck")
        .version(env!("CARGO_PKG_VERSION"))
        .args_conflicts_with_subcommands(true)
        .args(full.get_arguments().cloned())
        .subcommands(subcommands);
    top = offer(top);
    top
}

/// The clap command, for the man page and completions.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_consistent() {
        command().debug_assert();
    }

    fn completion_script(shell: clap_complete::Shell) -> String {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut completion_command(), "gpucheck", &mut script);
        String::from_utf8_lossy(&script).into_owned()
    }

    #[test]
    fn completions_offer_check_ids_and_hide_the_internal_subcommand() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let script = completion_script(shell);
            assert!(!script.contains("__child"), "{shell}");
            assert!(script.contains("nccl.allreduce"), "{shell}");
        }
        // bash: `explain <TAB>` and `--only <TAB>` list the ids and groups.
        let bash = completion_script(clap_complete::Shell::Bash);
        let explain = &bash[bash
            .find("gpucheck__subcmd__explain)")
            .expect("explain case")..];
        let explain = &explain[..explain.find(";;").unwrap_or(explain.len())];
        assert!(
            explain.contains("host.shm") && explain.contains(" nccl "),
            "{explain}"
        );
        let only = &bash[bash.find("--only)").expect("--only case")..];
        let only = &only[..only.find(";;").unwrap_or(only.len())];
        assert!(only.contains("gpu.ecc"), "{only}");
        // The parser itself still takes globs.
        assert!(Cli::try_parse_from(["gpucheck", "--only", "*.driver"]).is_ok());
    }

    #[test]
    fn timeout_zero_rejected() {
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("-1").is_err());
        assert!(parse_timeout("nan").is_err());
        assert_eq!(parse_timeout("1.5"), Ok(1.5));
        assert_eq!(parse_timeout("0.001"), Ok(0.001));
        let tiny = parse_timeout("1e-300").unwrap_err();
        assert!(tiny.contains("at least 0.001 seconds"), "{tiny}");
        let huge = parse_timeout("1e400").unwrap_err();
        assert!(huge.contains("at most 86400 seconds"), "{huge}");
        assert!(parse_timeout("inf").unwrap_err().contains("at most"));
    }

    #[test]
    fn scaling_must_be_a_fraction() {
        assert!(parse_fraction("0").is_err());
        assert!(parse_fraction("1.5").is_err());
        assert_eq!(parse_fraction("0.8"), Ok(0.8));
    }
}

pub const CLUSTER_HELP: &str = "\
Every node runs the same command. Node count, node rank and master come from the flags, then \
torchrun's PET_NNODES / PET_NODE_RANK / PET_MASTER_ADDR / PET_MASTER_PORT, then SLURM \
(SLURM_NNODES or SLURM_JOB_NUM_NODES, SLURM_NODEID, the first host of SLURM_JOB_NODELIST), then \
MASTER_ADDR / MASTER_PORT. Node rank 0 prints the fleet report (and writes --json); the other \
nodes print their own verdict and the fleet's. Every node exits 1 when the fleet is not ready.

Examples:
  srun --nodes 16 --ntasks-per-node 1 gpucheck cluster --json fleet.json
  gpucheck cluster --nnodes 4 --node-rank 2 --master-addr node01 --master-port 29400";

/// The default --rdzv-timeout: nodes of one job start within seconds of
/// each other, but their local checks can take up to the full profile's
/// 90 s budget before they reach the rendezvous.
pub const DEFAULT_RDZV_TIMEOUT_S: f64 = 120.0;

#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub cluster: ClusterFlags,
}

/// Who this node is in the job and how long to wait for the others
/// (`gpucheck cluster`, `gpucheck exec --cluster`).
#[derive(Debug, Clone, Args)]
pub struct ClusterFlags {
    /// Number of nodes in the job (default: $PET_NNODES, $SLURM_NNODES).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000), help_heading = "Cluster")]
    pub nnodes: Option<u32>,
    /// This node's rank, 0 to N-1 (default: $PET_NODE_RANK, $SLURM_NODEID).
    #[arg(long, value_name = "R", help_heading = "Cluster")]
    pub node_rank: Option<u32>,
    /// Node rank 0's address (default: $PET_MASTER_ADDR, the first host of
    /// $SLURM_JOB_NODELIST, $MASTER_ADDR).
    #[arg(long, value_name = "HOST", help_heading = "Cluster")]
    pub master_addr: Option<String>,
    /// The rendezvous port on node rank 0 (default: $PET_MASTER_PORT,
    /// $MASTER_PORT, 29500).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..), help_heading = "Cluster")]
    pub master_port: Option<u16>,
    /// How long to wait for every node to join, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_RDZV_TIMEOUT_S, value_parser = parse_rdzv_timeout, help_heading = "Cluster")]
    pub rdzv_timeout: f64,
    /// The id every node of this run shares (default: $GPUCHECK_RUN_ID,
    /// SLURM's job and step, $TORCHELASTIC_RUN_ID, else one node 0 makes);
    /// a node of another run on the same port is refused.
    #[arg(long, value_name = "ID", help_heading = "Cluster")]
    pub run_id: Option<String>,
    /// A file holding the secret every node shares (default:
    /// $GPUCHECK_CLUSTER_TOKEN): every store value is then authenticated
    /// (HMAC-SHA256) and values that do not verify are ignored.
    #[arg(long, value_name = "PATH", help_heading = "Cluster")]
    pub token_file: Option<PathBuf>,
}

impl ClusterFlags {
    /// True when a node identity flag was given (they need `exec --cluster`).
    pub fn identity_given(&self) -> bool {
        self.nnodes.is_some()
            || self.node_rank.is_some()
            || self.master_addr.is_some()
            || self.master_port.is_some()
            || self.run_id.is_some()
            || self.token_file.is_some()
    }
}

fn parse_rdzv_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(1.0..=86_400.0).contains(&v) {
        return Err(format!("must be between 1 and 86400 seconds, got '{s}'"));
    }
    Ok(v)
}

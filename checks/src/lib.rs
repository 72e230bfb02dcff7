//! The knowledge of gpucheck: what to probe on a machine that is about to run
//! multi-GPU PyTorch DDP, and how to judge what was found.
//!
//! Every check is a unit struct implementing [`Check`], listed once in the
//! ordered [`CATALOG`]. Its position there is its run order and its order in
//! `gpucheck list`, the man page and every report. A check probes facts from
//! the outside world (the `probe` modules), hands them to a pure `evaluate`
//! function with named thresholds, and returns an [`Outcome`]. Checks never
//! print; the binary's runner and reporters do the rest.
//!
//! # Map
//!
//! ```text
//! lib.rs        Check, Context, Options, CATALOG (run order)
//! outcome.rs    Outcome, Status, Metric, DeviceResult, DataTable, FactValue
//! findings.rs   Finding/Findings: worst verdict wins, hints joined once
//! identity.rs   check!: the one shape a fleet or job check declares its
//!               identity (id, title, profile, explain text, run) with
//! facts/        typed facts a check publishes and later checks read by type
//!               (NVML's driver and GPUs, the CUDA driver, torch, NCCL, the
//!               first check to find no driver here) and the Cause (timed
//!               out in a stage, a signal, ..., same cause as another check)
//! domain/       pure knowledge no check owns: text helpers, CUDA_VISIBLE_DEVICES
//!               rules, driver/CUDA/wheel tables, launcher defaults, Xid
//!               catalog, redaction of secrets
//! seam/         the probe boundary: live, record (--capture) or replay
//!               (--replay); the capture document and --redact
//! probe/        the outside world, one file per source (NVML, libcuda,
//!               libnccl, Python/torch, /proc, /sys, sockets, kernel log,
//!               processes); plain structs out, no judging
//! <group>/      one folder per check group (host, gpu, env, cuda, torch,
//!               net, fabric, nccl, ddp): one file per check with its
//!               thresholds, evaluate function and unit tests
//! ```
//!
//! Where to add a check: a file in its group's folder (a new group is a new
//! folder), a line in [`CATALOG`], a row in the README's check table (a test
//! says so). A group imports only the crate root, `domain`, `facts`,
//! `findings`, `identity` and `probe` (a test fails otherwise); what
//! another check found reaches it as a typed fact (`ctx.fact::<T>()`),
//! never as report text.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod domain;
pub mod facts;
pub mod findings;
pub mod fleet;
mod identity;
pub mod input;
pub mod machine;
pub mod options;
pub mod outcome;
pub mod probe;
pub mod seam;

pub mod cuda;
pub mod ddp;
pub mod env;
pub mod fabric;
pub mod gpu;
pub mod host;
pub mod job;
pub mod nccl;
pub mod net;
pub mod torch;

pub use facts::{Cause, Fact};
pub use findings::{Finding, Findings};
pub use options::{DdpBackend, DdpDevice};
pub use outcome::{Collective, DataTable, DeviceResult, FactValue, Metric, Outcome, Status};

/// The lowest profile that includes a check. Profiles nest:
/// quick ⊂ standard ⊂ full. `health` stands apart: it is no level, it holds
/// the checks whose [`Check::health`] is true.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// NVML, device nodes, host, fabric and launch settings; no CUDA, no Python (< 1 s).
    Quick,
    /// Adds CUDA contexts, the NCCL all-reduce and torch introspection (< 15 s).
    #[default]
    Standard,
    /// Adds the NCCL size sweep and the DDP benchmark (< 90 s).
    Full,
    /// Is this node's hardware still healthy? (HEALTHCHECK: NVML, device
    /// nodes; no launch preconditions, which a running job itself breaks.)
    /// Never a check's own profile.
    Health,
    /// Burn-in: the quick checks, then `gpu.burn` repeats the compute and
    /// memory load for `--duration` while sampling. Stands apart like
    /// `health`.
    Burn,
    /// `gpucheck job`: the job checks over a distributed job's ranks,
    /// which no machine profile selects.
    Job,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Quick => "quick",
            Profile::Standard => "standard",
            Profile::Full => "full",
            Profile::Health => "health",
            Profile::Burn => "burn",
            Profile::Job => "job",
        }
    }

    /// True when this profile selects `check` (without --only / --skip).
    pub fn includes(self, check: &dyn Check) -> bool {
        match self {
            Profile::Health => check.health(),
            Profile::Burn => matches!(check.profile(), Profile::Quick | Profile::Burn),
            Profile::Job => check.profile() == Profile::Job,
            level => check.profile() <= level,
        }
    }

    /// The checks this profile selects, in run order.
    pub fn checks(self) -> Vec<&'static dyn Check> {
        CATALOG
            .iter()
            .copied()
            .filter(|c| self.includes(*c))
            .collect()
    }
}

/// Where a check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// In gpucheck's own process, on a worker thread under the timeout.
    InProcess,
    /// In a re-executed copy of gpucheck in its own process group, for
    /// anything that can hang or crash (CUDA contexts, NCCL, Python/torch).
    Child,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::InProcess => "in-process",
            Isolation::Child => "child",
        }
    }
}

/// Model size for the DDP benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DdpModel {
    Small,
    #[default]
    Medium,
    Large,
}

impl DdpModel {
    pub fn as_str(self) -> &'static str {
        match self {
            DdpModel::Small => "small",
            DdpModel::Medium => "medium",
            DdpModel::Large => "large",
        }
    }
}

/// Everything the user told gpucheck that a check may need. Plain data, so it
/// crosses into child-isolated checks as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// The selected profile (the sweep in `nccl.allreduce` depends on it).
    pub profile: Profile,
    /// `--nvml-lib PATH`: load this libnvidia-ml instead of the system one.
    pub nvml_lib: Option<PathBuf>,
    /// `--nccl-lib PATH` / GPUCHECK_NCCL_LIB.
    pub nccl_lib: Option<PathBuf>,
    /// `--python PATH` / GPUCHECK_PYTHON: the interpreter that will train.
    pub python: Option<PathBuf>,
    /// `--expect-gpus N` / GPUCHECK_EXPECT_GPUS.
    pub expect_gpus: Option<u32>,
    /// `--min-busbw GBPS`: explicit all-reduce bus bandwidth floor.
    pub min_busbw_gbps: Option<f64>,
    /// `--nproc N`: DDP world size (default: visible GPU count).
    pub nproc: Option<u32>,
    /// `--ddp-model`.
    pub ddp_model: DdpModel,
    /// `--ddp-backend nccl|gloo` (default nccl).
    pub ddp_backend: Option<DdpBackend>,
    /// `--ddp-device cuda|cpu` (default cuda).
    pub ddp_device: Option<DdpDevice>,
    /// `--min-scaling X`: DDP scaling efficiency floor.
    pub min_scaling: Option<f64>,
    /// `--kernel-log PATH`: read Xid events from this file instead of the
    /// kernel's own log.
    #[serde(default)]
    pub kernel_log: Option<PathBuf>,
    /// `--duration`: how long `gpu.burn` keeps the GPUs under load, seconds.
    #[serde(default)]
    pub burn_duration_s: Option<f64>,
    /// `gpucheck job --traces DIR`: the folder of the job's Flight
    /// Recorder dumps, one file per rank.
    #[serde(default)]
    pub traces: Option<PathBuf>,
    /// `gpucheck job` without `--traces`: look at the job running on this
    /// node (under `--pid` when given).
    #[serde(default)]
    pub live_job: bool,
    /// `gpucheck job --pid PID`: the job's launcher or one of its ranks.
    #[serde(default)]
    pub job_pid: Option<i32>,
    /// `gpucheck job --nnodes N ...`: this node's part of the job is
    /// published (job.traces' `job_share`) for node rank 0 to judge.
    #[serde(default)]
    pub share_job: bool,
    /// Effective timeout of the check being run, seconds (the runner fills it
    /// in so a check can budget its own sub-steps).
    pub timeout_s: f64,
}

/// What a check sees when it runs: the options, and the outcomes of every
/// check that ran before it in this run (by id).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Context {
    pub options: Options,
    pub earlier: BTreeMap<String, Outcome>,
}

impl Context {
    /// The outcome of an earlier check in this run, if it ran.
    pub fn earlier(&self, id: &str) -> Option<&Outcome> {
        self.earlier.get(id)
    }

    /// A typed fact published by an earlier check of this run (the latest
    /// one to publish it, in catalog order).
    pub fn fact<F: Fact>(&self) -> Option<F> {
        CATALOG
            .iter()
            .rev()
            .filter_map(|c| self.earlier.get(c.id()))
            .find_map(Outcome::fact::<F>)
    }
}

/// One check. Implementations are unit structs listed in [`CATALOG`].
pub trait Check: Sync + Send {
    /// Stable, dotted, lowercase id (`gpu.ecc`). Never renamed once released.
    fn id(&self) -> &'static str;
    /// Short title for tables and JUnit.
    fn title(&self) -> &'static str;
    /// The group is the part of the id before the first dot.
    fn group(&self) -> &'static str {
        let id = self.id();
        id.split('.').next().unwrap_or(id)
    }
    /// The lowest profile that includes this check.
    fn profile(&self) -> Profile;
    /// True when the `health` profile holds this check: it tells whether the
    /// node's hardware still works while a job runs on it (NVML, device
    /// nodes, Xid), never whether a job could start (ports, launch
    /// variables), which a running job itself changes.
    fn health(&self) -> bool {
        false
    }
    /// What the check was waiting for when it timed out in-process (the NVML
    /// call that never returned), for the report's cause and the verdict.
    fn timeout_stage(&self) -> Option<String> {
        None
    }
    /// Ids that must have passed (or warned) first, or this check is skipped.
    fn needs(&self) -> &'static [&'static str] {
        &[]
    }
    fn isolation(&self) -> Isolation {
        Isolation::InProcess
    }
    /// Default timeout; `--timeout SECS` overrides it.
    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    /// What to do when the check times out (the runner reports the timeout).
    fn timeout_hint(&self) -> String {
        format!(
            "the probe did not answer in time; look for a hung driver (`dmesg` for Xid errors), \
             give it longer with --timeout SECS, or leave it out with --skip {}",
            self.id()
        )
    }
    /// What it checks, why it matters for DDP, how to fix each failure.
    fn explain(&self) -> &'static str;
    /// Probe, judge, return the verdict. Never prints.
    fn run(&self, ctx: &Context) -> Outcome;
}

/// Every check, in run order.
pub static CATALOG: &[&dyn Check] = &[
    // host
    &host::Devices,
    &host::Shm,
    &host::Limits,
    // gpu
    &gpu::Driver,
    &gpu::Count,
    &gpu::Ecc,
    &gpu::Pcie,
    &gpu::Throttle,
    &gpu::Mode,
    &gpu::Processes,
    &gpu::Topology,
    &gpu::Compute,
    &gpu::Memory,
    &gpu::P2pBandwidth,
    &gpu::Burn,
    // env
    &env::CudaVisibleDevices,
    &env::Torchrun,
    // cuda
    &cuda::CudaDriver,
    &cuda::CudaRuntime,
    &cuda::CopyBandwidth,
    // torch
    &torch::TorchImport,
    &torch::TorchCuda,
    &torch::TorchArch,
    &torch::TorchNccl,
    // net
    &net::Loopback,
    &net::MasterAddr,
    &net::MasterPort,
    // fabric
    &fabric::Xid,
    &fabric::Mnnvl,
    &fabric::Rdma,
    &fabric::GpuDirect,
    &fabric::NetPlugin,
    // nccl
    &nccl::Library,
    &nccl::Env,
    &nccl::AllReduce,
    &nccl::NicPath,
    // ddp
    &ddp::Benchmark,
];

/// Look a check up by id.
/// Look a check up by id (a node check, or a fleet check of `gpucheck
/// cluster`, for `explain`).
pub fn find(id: &str) -> Option<&'static dyn Check> {
    CATALOG
        .iter()
        .copied()
        .find(|c| c.id() == id)
        .or_else(|| fleet::find(id).map(|c| c as &dyn Check))
        .or_else(|| job::find(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_unique_and_well_formed() {
        let mut seen = HashSet::new();
        for c in CATALOG {
            let id = c.id();
            assert!(seen.insert(id), "duplicate id {id}");
            let parts: Vec<&str> = id.split('.').collect();
            assert_eq!(parts.len(), 2, "{id} must be group.name");
            for p in parts {
                assert!(!p.is_empty(), "{id} has an empty part");
                assert!(
                    p.chars()
                        .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_'),
                    "{id} must be lowercase [a-z0-9_]"
                );
            }
        }
    }

    #[test]
    fn every_need_names_an_earlier_check() {
        for (i, c) in CATALOG.iter().enumerate() {
            for need in c.needs() {
                let pos = CATALOG.iter().position(|d| d.id() == *need);
                match pos {
                    Some(p) => assert!(p < i, "{} needs {need}, which runs later", c.id()),
                    None => panic!("{} needs unknown check {need}", c.id()),
                }
            }
        }
    }

    #[test]
    fn explain_and_title_present() {
        for c in CATALOG {
            assert!(c.title().len() > 3, "{} has no title", c.id());
            assert!(c.explain().len() > 80, "{} explain text too short", c.id());
        }
    }

    #[test]
    fn groups_are_contiguous() {
        let mut closed = HashSet::new();
        let mut current = "";
        for c in CATALOG {
            if c.group() != current {
                assert!(closed.insert(current), "group {current} split");
                current = c.group();
                assert!(!closed.contains(current), "group {current} split");
            }
        }
    }

    #[test]
    fn timeouts_are_positive() {
        for c in CATALOG {
            assert!(c.timeout() > Duration::ZERO, "{}", c.id());
        }
    }

    /// Every `.rs` file under `checks/src/<dir>`, recursively.
    fn sources_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return out;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(sources_under(&p));
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn a_check_group_imports_no_other_group() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let groups: Vec<&str> = {
            let mut g: Vec<&str> = CATALOG.iter().map(|c| c.group()).collect();
            g.dedup();
            g
        };
        let mut offences = Vec::new();
        for group in &groups {
            let files = sources_under(&src.join(group));
            assert!(
                !files.is_empty(),
                "group {group} has no folder checks/src/{group}/"
            );
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                for other in groups.iter().filter(|o| *o != group) {
                    for needle in [
                        format!("crate::{other}::"),
                        format!("crate::{other}}}"),
                        format!("crate::{other};"),
                    ] {
                        if text.contains(&needle) {
                            offences.push(format!("{} uses {needle}", file.display()));
                        }
                    }
                }
            }
        }
        for shared in ["domain", "facts", "probe"] {
            for file in sources_under(&src.join(shared)) {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                for group in &groups {
                    let needle = format!("crate::{group}::");
                    if text.contains(&needle) {
                        offences.push(format!("{} (shared) uses {needle}", file.display()));
                    }
                }
            }
        }
        // domain/ is pure knowledge: the types it shares with the probes
        // live in machine.rs, so it never reaches probe/.
        for file in sources_under(&src.join("domain")) {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            for needle in ["crate::probe", "super::probe", "super::super::probe"] {
                if text.contains(needle) {
                    offences.push(format!("{} (domain) uses {needle}", file.display()));
                }
            }
        }
        assert!(
            offences.is_empty(),
            "check groups must not import each other, nor domain/ probe/:\n{}",
            offences.join("\n")
        );
    }
}

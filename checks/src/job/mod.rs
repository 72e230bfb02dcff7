//! The job checks of `gpucheck job --traces DIR`: a running (or hung) job
//! judged from its ranks' Flight Recorder dumps. `job.traces` says what the
//! dumps hold and which ranks left none; `job.hang` names the ranks at the
//! wavefront of a hang or desync; `job.straggler` the ranks that enter
//! collectives late again and again. The judging is `domain::job`'s; the
//! dumps are read once per run (`probe::fr_dump`) and shared by the
//! three checks.
//!
//! They are listed in [`JOB_CATALOG`], not in [`crate::CATALOG`]: a machine
//! check run never selects them, and `gpucheck job` runs only them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::domain::flight::RankTrace;
use crate::domain::job::{self, Membership};
use crate::probe::fr_dump;
use crate::{Check, Context, Outcome, Profile};

mod fabric;
mod gpus;
mod hang;
mod hang_live;
pub mod live;
mod ras;
mod straggler;
mod traces;
pub mod watch;
mod watched;

pub use fabric::Fabric;
pub use gpus::Gpus;
pub use hang::Hang;
pub use ras::NcclRas;
pub use straggler::Straggler;
pub use traces::Traces;
pub use watch::Watch;

/// Every job check, in run order.
pub static JOB_CATALOG: &[&dyn Check] = &[&Traces, &Hang, &Straggler, &Gpus, &Fabric, &NcclRas];

/// The job checks of `gpucheck job --traces DIR` (the rest need the node
/// the job runs on).
pub static TRACES_CATALOG: &[&dyn Check] = &[&Traces, &Hang, &Straggler];

/// The profile of every job check and of a `gpucheck job` run.
pub const JOB_PROFILE: Profile = Profile::Job;

/// What node rank 0 judges over the whole job, merged from every node's
/// [`JobShare`] (`gpucheck job --nnodes N`): the hang and the stragglers,
/// each check with its judge (the caller times the judging).
pub static WHOLE_JOB: &[(&dyn Check, Judge)] =
    &[(&Hang, hang::judge), (&Straggler, straggler::judge)];

/// A job check's judging of the dumps read.
pub type Judge = fn(&Job) -> Outcome;

/// A job check by id (job.watch too, which runs only under a watch).
pub fn find(id: &str) -> Option<&'static dyn Check> {
    let watch: &'static dyn Check = &Watch;
    JOB_CATALOG
        .iter()
        .copied()
        .chain(std::iter::once(watch))
        .find(|c| c.id() == id)
}

/// A rank's file that could not be read, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Unreadable {
    pub rank: u32,
    pub file: String,
    pub error: String,
}

/// The job as its dumps describe it.
#[derive(Debug, Default)]
pub struct Job {
    pub dir: PathBuf,
    pub traces: Vec<RankTrace>,
    pub unreadable: Vec<Unreadable>,
    pub members: Membership,
    /// What was seen of the running job, when it was looked at live.
    pub live: Option<live::Live>,
    /// The groups' wavefronts, entry times and stragglers, built on first
    /// use and shared by job.hang, job.straggler and job.gpus (the traces
    /// and members are not changed once a check has judged them).
    index: OnceLock<job::Index>,
}

impl Job {
    /// The judges' [`job::Index`] of the dumps, built once.
    pub fn index(&self) -> &job::Index {
        self.index
            .get_or_init(|| job::index(&self.traces, &self.members))
    }

    /// Read every rank's dump in `dir` and rebuild the job's membership.
    pub fn read(dir: &Path) -> Result<Job, String> {
        let read = fr_dump::read_dir(dir)?;
        let unreadable: Vec<Unreadable> = read
            .unreadable
            .into_iter()
            .map(|(rank, file, error)| Unreadable {
                rank,
                file: file.display().to_string(),
                error,
            })
            .collect();
        let mut file_ranks: Vec<u32> = read.traces.iter().map(|t| t.rank).collect();
        file_ranks.extend(unreadable.iter().map(|u| u.rank));
        let members = job::membership(&read.traces, &file_ranks);
        Ok(Job {
            dir: dir.to_path_buf(),
            traces: read.traces,
            unreadable,
            members,
            live: None,
            index: OnceLock::new(),
        })
    }

    /// Look at the job running on this node (under `pid` when given).
    pub fn watch(
        pid: Option<i32>,
        kernel_log: Option<&Path>,
        across_nodes: bool,
    ) -> Result<Job, String> {
        let ranks = crate::probe::ranks::find(pid)?;
        if ranks.is_empty() {
            return Err("no rank of a job runs here".to_string());
        }
        let (traces, unreadable, mut live) = live::gather(ranks, kernel_log);
        live.across_nodes = across_nodes;
        let unreadable: Vec<Unreadable> = unreadable
            .into_iter()
            .map(|(rank, error)| Unreadable {
                rank,
                file: format!("rank {rank}'s worker server"),
                error,
            })
            .collect();
        let mut with_recorder: Vec<u32> = traces.iter().map(|t| t.rank).collect();
        with_recorder.extend(unreadable.iter().map(|u| u.rank));
        let members = job::membership(&traces, &with_recorder);
        Ok(Job {
            dir: PathBuf::new(),
            traces,
            unreadable,
            members,
            live: Some(live),
            index: OnceLock::new(),
        })
    }
}

/// What one node of a job watched across nodes hands node rank 0: its
/// ranks, their recorders and where their stacks were, and whether they
/// moved. Published on job.traces when the run is one node of several.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct JobShare {
    pub ranks: Vec<crate::probe::ranks::RankProcess>,
    pub traces: Vec<RankTrace>,
    pub unreadable: Vec<Unreadable>,
    /// Where each rank's main thread was, at every look.
    pub samples: Vec<Vec<(u32, crate::domain::stacks::Where)>>,
    pub progress: Option<u64>,
}

impl crate::Fact for JobShare {
    const KEY: &'static str = "job_share";
}

impl JobShare {
    /// This node's part of the job.
    pub fn of(job: &Job) -> Option<JobShare> {
        let live = job.live.as_ref()?;
        Some(JobShare {
            ranks: live.ranks.clone(),
            traces: job.traces.clone(),
            unreadable: job.unreadable.clone(),
            samples: live.samples.clone(),
            progress: live.progress,
        })
    }
}

impl Job {
    /// The whole job from every node's share: its ranks, recorders and
    /// stacks together, moving when any node's recorders moved.
    pub fn merged(shares: Vec<JobShare>) -> Job {
        let mut traces: Vec<RankTrace> = Vec::new();
        let mut unreadable = Vec::new();
        let mut live = live::Live::default();
        let looks = shares.iter().map(|s| s.samples.len()).max().unwrap_or(0);
        live.samples = vec![Vec::new(); looks];
        for share in shares {
            for t in share.traces {
                if !traces.iter().any(|have| have.rank == t.rank) {
                    traces.push(t);
                }
            }
            unreadable.extend(share.unreadable);
            live.ranks.extend(share.ranks);
            for (i, sample) in share.samples.into_iter().enumerate() {
                live.samples[i].extend(sample);
            }
            live.progress = match (live.progress, share.progress) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
        }
        traces.sort_by_key(|t| t.rank);
        live.ranks.sort_by_key(|r| r.rank);
        let mut with_recorder: Vec<u32> = traces.iter().map(|t| t.rank).collect();
        with_recorder.extend(unreadable.iter().map(|u: &Unreadable| u.rank));
        let members = job::membership(&traces, &with_recorder);
        Job {
            dir: PathBuf::new(),
            traces,
            unreadable,
            members,
            live: Some(live),
            index: OnceLock::new(),
        }
    }
}

/// The dumps of this run's `--traces` folder, read by the first job check
/// that asks and shared with the others.
fn job(ctx: &Context) -> Result<Arc<Job>, String> {
    static READ: Mutex<Option<Arc<Job>>> = Mutex::new(None);
    let mut cached = READ.lock().unwrap_or_else(|e| e.into_inner());
    let dir = ctx.options.traces.clone().unwrap_or_default();
    if let Some(j) = cached.as_ref().filter(|j| j.dir == dir) {
        return Ok(Arc::clone(j));
    }
    let j = Arc::new(match ctx.options.traces.as_deref() {
        Some(dir) => Job::read(dir)?,
        None if ctx.options.live_job => {
            let o = &ctx.options;
            let mut job = Job::watch(o.job_pid, o.kernel_log.as_deref(), o.share_job)?;
            gpus::name_rank_gpus(ctx, &mut job);
            job
        }
        None => return Err("no --traces folder was given".to_string()),
    });
    *cached = Some(Arc::clone(&j));
    Ok(j)
}

/// job.traces' outcome carries this node's [`JobShare`] when the run is
/// one node of several (`share_job`).
fn shared(ctx: &Context, id: &str, job: &Job, outcome: Outcome) -> Outcome {
    match JobShare::of(job) {
        Some(share) if ctx.options.share_job && id == "job.traces" => outcome.publish(&share),
        _ => outcome,
    }
}

/// The outcome of a job check whose dumps could not be read at all.
fn unread(e: &str) -> Outcome {
    Outcome::error(format!("the job's dumps could not be read: {e}"))
}

/// A job check's `run`: the dumps read, then handed to `judge`.
fn judged(check: &dyn Check, ctx: &Context, judge: Judge) -> Outcome {
    match job(ctx) {
        Ok(job) => shared(ctx, check.id(), &job, judge(&job)),
        Err(e) => unread(&e),
    }
}

/// A job check's time limit: reading 1,024 ranks' dumps of 2,000 entries
/// takes about a second; a folder on a slow shared file system gets more.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// "rank 3" / "ranks 0, 1".
pub fn ranks_phrase(ranks: &[u32]) -> String {
    match ranks {
        [one] => format!("rank {one}"),
        many => format!("ranks {}", job::rank_list(many)),
    }
}

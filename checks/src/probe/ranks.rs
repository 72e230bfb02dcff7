//! Finding a running job's ranks on this node: the processes whose
//! environment carries `RANK` and `WORLD_SIZE` (torchrun's workers, a
//! plain `python` launched per rank), or SLURM's `SLURM_PROCID` and
//! `SLURM_NTASKS` for a Python started by `srun`, read from /proc. Only
//! /proc is read: nothing is sent to the processes.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;

use serde::{Deserialize, Serialize};

/// One rank process of a job on this node, as /proc shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankProcess {
    pub pid: i32,
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: Option<u32>,
    pub local_world_size: Option<u32>,
    /// `MASTER_ADDR:MASTER_PORT`, where set.
    pub master: Option<String>,
    /// TORCHELASTIC_RUN_ID, else SLURM_JOB_ID.
    pub run_id: Option<String>,
    /// Seconds since the epoch the process started.
    pub started_s: u64,
    /// Seconds after boot the process started (the kernel log's clock).
    #[serde(default)]
    pub started_after_boot_s: f64,
    /// /proc's state letter: R, S, D (uninterruptible), T (stopped), Z.
    pub state: char,
    /// `TORCH_WORKER_SERVER_SOCKET`: the rank's worker server, if it runs one.
    pub worker_socket: Option<String>,
    /// `TORCH_NCCL_DEBUG_INFO_PIPE_FILE` (or `TORCH_FR_DEBUG_INFO_PIPE_FILE`):
    /// the stem of the rank's dump pipe, `<stem><rank>.pipe`.
    #[serde(default)]
    pub dump_pipe: Option<String>,
    /// Where the rank's recorder dumps: `TORCH_FR_DUMP_TEMP_FILE` (or
    /// `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`), else torch's default under the
    /// rank's HOME; the rank number is appended.
    #[serde(default)]
    pub dump_prefix: Option<String>,
    /// `NCCL_IB_HCA`, as set: the RDMA ports the job's NCCL may use.
    #[serde(default)]
    pub ib_hca: Option<String>,
    /// `NCCL_RAS_ADDR`, as set: where the job's NCCL RAS listens.
    #[serde(default)]
    pub ras_addr: Option<String>,
    /// False when `NCCL_RAS_ENABLE=0` turns RAS off.
    #[serde(default)]
    pub ras_off: bool,
    /// `TORCH_FR_BUFFER_SIZE` (or its older name), as set.
    pub fr_buffer: Option<String>,
    /// `NCCL_INSPECTOR_DUMP_DIR`, where the rank's NCCL loads a profiler
    /// plugin with `NCCL_INSPECTOR_ENABLE=1` and the folder is absolute:
    /// where NCCL's Inspector writes the rank's collectives.
    #[serde(default)]
    pub inspector_dir: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`, as set.
    pub visible_devices: Option<String>,
    /// "node 1 (gpu-017)": the node it runs on, when the job was watched on
    /// several nodes at once (filled by node rank 0).
    #[serde(default)]
    pub node: Option<String>,
    /// "GPU 3 (GPU-8e6..., 00000000:1B:00.0)": the GPU NVML lists it on.
    #[serde(default)]
    pub gpu: Option<String>,
    /// The command line, joined (cut to a readable length).
    pub cmd: String,
    /// The folder of the program that runs it (where a venv's py-spy sits).
    pub bin_dir: Option<String>,
}

impl RankProcess {
    /// Which job the rank belongs to: ranks of one job share it.
    pub fn job_key(&self) -> String {
        format!(
            "{} world {} {}",
            self.master.as_deref().unwrap_or("?"),
            self.world_size,
            self.run_id.as_deref().unwrap_or("")
        )
    }
}

/// The job's ranks on this node (every process under `pid` when given),
/// by rank. More than one job here without `pid` is an error naming them.
pub fn find(pid: Option<i32>) -> Result<Vec<RankProcess>, String> {
    let key = pid.map_or_else(|| "all".to_string(), |p| p.to_string());
    crate::seam::answer("ranks::find", &key, || find_live(pid))
}

fn find_live(pid: Option<i32>) -> Result<Vec<RankProcess>, String> {
    let me = std::process::id() as i32;
    let all = procfs::process::all_processes().map_err(|e| format!("cannot list /proc: {e}"))?;
    let mut found: Vec<(i32, RankProcess)> = Vec::new();
    let mut parent: HashMap<i32, i32> = HashMap::new();
    for p in all.flatten() {
        let Ok(stat) = p.stat() else { continue };
        parent.insert(p.pid, stat.ppid);
        if p.pid == me {
            continue;
        }
        if let Some(r) = rank_process(&p, &stat) {
            found.push((stat.ppid, r));
        }
    }
    if let Some(top) = pid {
        if procfs::process::Process::new(top).is_err() {
            return Err(format!("no process {top}"));
        }
        found.retain(|(_, r)| descends(r.pid, top, &parent));
    }
    let ranks = leaders(found);
    one_job(ranks)
}

/// Whether `pid` is `top` or runs under it.
fn descends(mut pid: i32, top: i32, parent: &HashMap<i32, i32>) -> bool {
    for _ in 0..64 {
        if pid == top {
            return true;
        }
        match parent.get(&pid) {
            Some(&p) if p > 0 && p != pid => pid = p,
            _ => return false,
        }
    }
    false
}

/// The rank processes themselves, not what they started: a DataLoader
/// worker (or a `timeout` wrapper's child) inherits its rank's environment;
/// of a chain of processes with one job and rank, the Python nearest the
/// top is the rank.
fn leaders(found: Vec<(i32, RankProcess)>) -> Vec<RankProcess> {
    let pids: HashMap<i32, (String, u32, bool)> = found
        .iter()
        .map(|(_, r)| (r.pid, (r.job_key(), r.rank, is_python(r))))
        .collect();
    found
        .iter()
        .filter(|(ppid, r)| match pids.get(ppid) {
            // Under a process of the same rank: a worker of it, unless that
            // parent is a wrapper and this is the Python.
            Some((job, rank, py)) if *job == r.job_key() && *rank == r.rank => !*py && is_python(r),
            _ => true,
        })
        .filter(|(_, r)| {
            // A wrapper (`timeout`, a shell) whose Python child is the rank.
            is_python(r)
                || !found.iter().any(|(pp, c)| {
                    *pp == r.pid && c.rank == r.rank && c.job_key() == r.job_key() && is_python(c)
                })
        })
        .map(|(_, r)| r.clone())
        .collect()
}

fn is_python(r: &RankProcess) -> bool {
    let program = r.cmd.split_whitespace().next().unwrap_or("");
    program
        .rsplit('/')
        .next()
        .unwrap_or("")
        .starts_with("python")
}

/// The ranks of the one job on this node, by rank.
fn one_job(ranks: Vec<RankProcess>) -> Result<Vec<RankProcess>, String> {
    let mut jobs: BTreeMap<String, Vec<RankProcess>> = BTreeMap::new();
    for r in ranks {
        jobs.entry(r.job_key()).or_default().push(r);
    }
    if jobs.len() > 1 {
        let list: Vec<String> = jobs
            .iter()
            .map(|(key, rs)| {
                let pids: Vec<String> = rs.iter().map(|r| r.pid.to_string()).collect();
                format!("{key} (pids {})", pids.join(", "))
            })
            .collect();
        return Err(format!(
            "{} jobs run here: {}; name one with --pid (its launcher's or a rank's pid)",
            jobs.len(),
            list.join("; ")
        ));
    }
    let mut ranks = jobs.into_values().next().unwrap_or_default();
    ranks.sort_by_key(|r| (r.rank, r.pid));
    Ok(ranks)
}

/// A process as a rank of a job, when its environment says it is one.
fn rank_process(p: &procfs::process::Process, stat: &procfs::process::Stat) -> Option<RankProcess> {
    let env = p.environ().ok()?;
    let var = |name: &str| -> Option<String> {
        env.get(&OsString::from(name))
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| !v.is_empty())
    };
    let num = |name: &str| var(name).and_then(|v| v.trim().parse::<u32>().ok());
    let cmd_parts = p.cmdline().unwrap_or_default();
    let cmd = crate::domain::text::cut(&cmd_parts.join(" "), 300);
    let (rank, world) = match (num("RANK"), num("WORLD_SIZE")) {
        (Some(r), Some(w)) => (r, w),
        // srun starts the Python itself; the script reads SLURM_PROCID.
        _ if cmd_parts.first().is_some_and(|c| c.contains("python")) => {
            (num("SLURM_PROCID")?, num("SLURM_NTASKS")?)
        }
        _ => return None,
    };
    let master = var("MASTER_ADDR").map(|a| match var("MASTER_PORT") {
        Some(port) => format!("{a}:{port}"),
        None => a,
    });
    Some(RankProcess {
        pid: p.pid,
        rank,
        world_size: world,
        local_rank: num("LOCAL_RANK").or_else(|| num("SLURM_LOCALID")),
        local_world_size: num("LOCAL_WORLD_SIZE").or_else(|| num("SLURM_NTASKS_PER_NODE")),
        master,
        run_id: var("TORCHELASTIC_RUN_ID").or_else(|| var("SLURM_JOB_ID")),
        started_s: started_s(stat.starttime),
        started_after_boot_s: stat.starttime as f64 / procfs::ticks_per_second().max(1) as f64,
        state: stat.state,
        worker_socket: var("TORCH_WORKER_SERVER_SOCKET"),
        fr_buffer: var("TORCH_FR_BUFFER_SIZE").or_else(|| var("TORCH_NCCL_TRACE_BUFFER_SIZE")),
        ib_hca: var("NCCL_IB_HCA"),
        inspector_dir: var("NCCL_INSPECTOR_DUMP_DIR").filter(|d| {
            d.starts_with('/')
                && var("NCCL_PROFILER_PLUGIN").is_some()
                && var("NCCL_INSPECTOR_ENABLE").is_some_and(|v| v.trim() == "1")
        }),
        ras_addr: var("NCCL_RAS_ADDR"),
        ras_off: var("NCCL_RAS_ENABLE").is_some_and(|v| v.trim() == "0"),
        dump_pipe: var("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
            .or_else(|| var("TORCH_FR_DEBUG_INFO_PIPE_FILE")),
        dump_prefix: var("TORCH_FR_DUMP_TEMP_FILE")
            .or_else(|| var("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"))
            .or_else(|| var("HOME").map(|h| format!("{h}/.cache/torch/comm_lib_trace_rank_"))),
        visible_devices: var("CUDA_VISIBLE_DEVICES"),
        node: None,
        gpu: None,
        cmd,
        bin_dir: p
            .cmdline()
            .ok()
            .and_then(|c| c.into_iter().next())
            .filter(|c| c.contains('/'))
            .and_then(|c| {
                let dir = std::path::Path::new(&c).parent()?.to_path_buf();
                let cwd = p.cwd().ok()?;
                Some(cwd.join(dir).display().to_string())
            }),
    })
}

/// A process's start (clock ticks after boot) as seconds since the epoch.
fn started_s(ticks: u64) -> u64 {
    let boot = procfs::boot_time_secs().unwrap_or(0);
    boot + ticks / procfs::ticks_per_second().max(1)
}

/// A process's state letter now ('?' once it is gone).
pub fn state_of(pid: i32) -> char {
    crate::seam::answer("ranks::state_of", &pid.to_string(), || {
        procfs::process::Process::new(pid)
            .and_then(|p| p.stat())
            .map_or('?', |s| s.state)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(pid: i32, rank: u32, cmd: &str) -> RankProcess {
        RankProcess {
            pid,
            rank,
            world_size: 2,
            master: Some("127.0.0.1:29500".into()),
            cmd: cmd.into(),
            ..RankProcess::default()
        }
    }

    #[test]
    fn a_data_loader_worker_is_not_a_rank_of_its_own() {
        let found = vec![
            (1, rank(10, 0, "python train.py")),
            (10, rank(11, 0, "python train.py")),
            (1, rank(20, 1, "python train.py")),
        ];
        let pids: Vec<i32> = leaders(found).iter().map(|r| r.pid).collect();
        assert_eq!(pids, vec![10, 20]);
    }

    #[test]
    fn a_wrapper_gives_way_to_its_python() {
        let found = vec![
            (1, rank(10, 0, "timeout 60 python train.py")),
            (10, rank(11, 0, "/venv/bin/python3 train.py")),
        ];
        let pids: Vec<i32> = leaders(found).iter().map(|r| r.pid).collect();
        assert_eq!(pids, vec![11]);
    }

    #[test]
    fn two_jobs_without_a_pid_are_named() {
        let mut other = rank(30, 0, "python b.py");
        other.master = Some("127.0.0.1:29600".into());
        let e = one_job(vec![rank(10, 0, "python a.py"), other]).unwrap_err();
        assert!(e.contains("2 jobs run here") && e.contains("--pid"), "{e}");
        assert!(e.contains("pids 10") && e.contains("pids 30"), "{e}");
    }

    #[test]
    fn ancestry_is_followed_to_the_launcher() {
        let parent: HashMap<i32, i32> = [(11, 10), (10, 5), (5, 1)].into_iter().collect();
        assert!(descends(11, 5, &parent));
        assert!(!descends(11, 7, &parent));
    }
}

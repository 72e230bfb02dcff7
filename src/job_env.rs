//! What `gpucheck exec` adds to the job's environment so that its state
//! can be had in seconds when it hangs: a per-job folder for the Flight
//! Recorder's dumps (`TORCH_FR_DUMP_TEMP_FILE`) and the per-rank dump pipes
//! (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`, with `TORCH_FR_BUFFER_SIZE`, without
//! which torch makes no pipe), and a per-job NCCL RAS port
//! (`NCCL_RAS_ADDR`), each only when the user did not set it; and what in
//! the environment turns the recorder off.

use std::path::{Path, PathBuf};

/// The variables to add, and warnings about the ones already set.
#[derive(Debug, Default, PartialEq)]
pub struct Prepared {
    pub set: Vec<(String, String)>,
    pub warnings: Vec<String>,
    /// The folder the dumps will land in, when gpucheck chose it.
    pub dump_dir: Option<PathBuf>,
}

/// The additions for a job whose environment `var` reads, its dumps in
/// `dir` (made by the caller) and its RAS on `ras_port`.
pub fn prepare(var: impl Fn(&str) -> Option<String>, dir: &Path, ras_port: u16) -> Prepared {
    let mut p = Prepared::default();
    if var("TORCH_FR_DUMP_TEMP_FILE").is_none() && var("TORCH_NCCL_DEBUG_INFO_TEMP_FILE").is_none()
    {
        p.set.push((
            "TORCH_FR_DUMP_TEMP_FILE".into(),
            format!("{}/fr_rank_", dir.display()),
        ));
        p.dump_dir = Some(dir.to_path_buf());
    }
    if var("TORCH_NCCL_DEBUG_INFO_PIPE_FILE").is_none() {
        p.set.push((
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE".into(),
            format!("{}/pipe_rank_", dir.display()),
        ));
    }
    // torch makes the dump pipe only when a buffer size is set in the
    // environment (its default of 2,000 is not enough for the pipe).
    if var("TORCH_FR_BUFFER_SIZE").is_none() && var("TORCH_NCCL_TRACE_BUFFER_SIZE").is_none() {
        p.set.push(("TORCH_FR_BUFFER_SIZE".into(), "2000".into()));
    }
    if var("NCCL_RAS_ADDR").is_none() && ras_port != 0 {
        p.set
            .push(("NCCL_RAS_ADDR".into(), format!("localhost:{ras_port}")));
    }
    let zero = |name: &str| var(name).is_some_and(|v| v.trim() == "0");
    for name in ["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"] {
        if zero(name) {
            p.warnings.push(format!(
                "{name}=0 turns the Flight Recorder off: a hang will leave no record of its \
                 collectives (unset it; the default keeps 2,000)"
            ));
        }
    }
    if zero("TORCH_NCCL_DUMP_ON_TIMEOUT") {
        p.warnings.push(
            "TORCH_NCCL_DUMP_ON_TIMEOUT=0: a collective that times out writes no dump \
             (unset it; dumps are on by default)"
                .into(),
        );
    }
    p
}

/// The job's folder: `$TMPDIR/gpucheck-job-<id>`, the id from the run's
/// identity (GPUCHECK_RUN_ID, SLURM_JOB_ID, TORCHELASTIC_RUN_ID) else this
/// process's id.
pub fn job_dir(var: impl Fn(&str) -> Option<String>) -> PathBuf {
    let id = ["GPUCHECK_RUN_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"]
        .iter()
        .find_map(|n| var(n))
        .map(|v| {
            v.chars()
                .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
                .collect()
        })
        .filter(|v: &String| !v.is_empty() && v != "." && v != "..")
        .unwrap_or_else(|| std::process::id().to_string());
    std::env::temp_dir().join(format!("gpucheck-job-{id}"))
}

/// A free TCP port on the loopback for the job's RAS (0 when none).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn an_unprepared_job_gets_its_dump_path_pipe_and_ras_port() {
        let p = prepare(env(&[]), Path::new("/tmp/gpucheck-job-7"), 40123);
        assert_eq!(
            p.set,
            vec![
                (
                    "TORCH_FR_DUMP_TEMP_FILE".into(),
                    "/tmp/gpucheck-job-7/fr_rank_".into()
                ),
                (
                    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE".into(),
                    "/tmp/gpucheck-job-7/pipe_rank_".into()
                ),
                ("TORCH_FR_BUFFER_SIZE".into(), "2000".into()),
                ("NCCL_RAS_ADDR".into(), "localhost:40123".into()),
            ]
        );
        assert!(p.warnings.is_empty());
        assert_eq!(
            p.dump_dir.as_deref(),
            Some(Path::new("/tmp/gpucheck-job-7"))
        );
    }

    #[test]
    fn what_the_user_set_is_kept() {
        let p = prepare(
            env(&[
                ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/shared/dumps/r"),
                ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "/x/p"),
                ("NCCL_RAS_ADDR", "localhost:28028"),
                ("TORCH_NCCL_TRACE_BUFFER_SIZE", "4000"),
            ]),
            Path::new("/tmp/j"),
            40123,
        );
        assert!(p.set.is_empty(), "{:?}", p.set);
        assert_eq!(p.dump_dir, None);
    }

    #[test]
    fn a_recorder_turned_off_is_warned_about() {
        let p = prepare(
            env(&[
                ("TORCH_FR_BUFFER_SIZE", "0"),
                ("TORCH_NCCL_DUMP_ON_TIMEOUT", "0"),
            ]),
            Path::new("/tmp/j"),
            0,
        );
        assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
        assert!(p.warnings[0].contains("TORCH_FR_BUFFER_SIZE=0"));
        assert!(
            !p.set.iter().any(|(k, _)| k == "NCCL_RAS_ADDR"),
            "no port, no RAS address"
        );
    }

    #[test]
    fn the_job_folder_follows_the_run_identity_and_stays_one_name() {
        let d = job_dir(env(&[("SLURM_JOB_ID", "4242")]));
        assert!(d.ends_with("gpucheck-job-4242"), "{}", d.display());
        let d = job_dir(env(&[("GPUCHECK_RUN_ID", "../../etc")]));
        assert!(d.ends_with("gpucheck-job-....etc"), "{}", d.display());
    }
}

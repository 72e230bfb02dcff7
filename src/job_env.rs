//! What `gpucheck exec` adds to the job's environment so that its state
//! can be had in seconds when it hangs: a per-job folder for the Flight
//! Recorder's dumps (`TORCH_FR_DUMP_TEMP_FILE`) and the per-rank dump pipes
//! (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`, with `TORCH_FR_BUFFER_SIZE`, without
//! which torch makes no pipe), and a per-job NCCL RAS port
//! (`NCCL_RAS_ADDR`), each only when the user did not set it; NCCL's
//! Inspector profiler plugin, where one is installed beside the job's NCCL
//! and the user set no profiler plugin and none of the Inspector's
//! variables; and what in the environment turns the recorder off.

use std::path::{Path, PathBuf};

/// The variables to add, and warnings about the ones already set.
#[derive(Debug, Default, PartialEq)]
pub struct Prepared {
    pub set: Vec<(String, String)>,
    pub warnings: Vec<String>,
    /// The folder the dumps will land in, when gpucheck chose it.
    pub dump_dir: Option<PathBuf>,
    /// The folder NCCL's Inspector writes its per-collective records in:
    /// gpucheck's choice, or the user's where they turned it on.
    pub inspector_dir: Option<PathBuf>,
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

/// The Inspector plugin's library, as NVIDIA's Makefile names it.
pub const INSPECTOR_LIB: &str = "libnccl-profiler-inspector.so";

/// The Inspector's own variables (NCCL 2.28 to 2.30, `inspector.cc`): a
/// user who set any of them configured it, and gpucheck adds none.
const INSPECTOR_VARS: &[&str] = &[
    "NCCL_INSPECTOR_ENABLE",
    "NCCL_INSPECTOR_DUMP_DIR",
    "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS",
    "NCCL_INSPECTOR_DUMP_THREAD_ENABLE",
    "NCCL_INSPECTOR_DUMP_VERBOSE",
    "NCCL_INSPECTOR_PROM_DUMP",
    "NCCL_INSPECTOR_ENABLE_P2P",
    "NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES",
    "NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING",
    "NCCL_INSPECTOR_DUMP_COLL_RING_SIZE",
    "NCCL_INSPECTOR_DUMP_P2P_RING_SIZE",
    "NCCL_INSPECTOR_COLL_POOL_SIZE",
    "NCCL_INSPECTOR_P2P_POOL_SIZE",
    "NCCL_INSPECTOR_COMM_POOL_SIZE",
    "NCCL_INSPECTOR_POOL_GROW",
];

/// The Inspector plugin installed with the NCCL whose `libnccl.so.2` is in
/// `nccl_dir`, if any. NVIDIA ships it in no package: not in the libnccl2
/// .deb or .rpm, nor in the .txz or the pip wheel (nvidia-nccl-cu12/13)
/// made from it, which hold libnccl alone (NVIDIA/nccl `pkg/`); it is
/// built from NCCL's source (`ext-profiler/inspector/` in 2.28,
/// `plugins/profiler/inspector/` from 2.29.7) and copied where the image's
/// maker chooses. So it is looked for beside libnccl (an image that
/// installed it with its NCCL) and in the source tree of a NCCL built in
/// place (`<src>/build/lib/libnccl.so.2`); a pip wheel's NCCL has none,
/// and there only a `NCCL_PROFILER_PLUGIN` the user set loads it.
pub fn inspector_beside(nccl_dir: &Path) -> Option<PathBuf> {
    let src = nccl_dir.parent().and_then(Path::parent);
    let in_tree = ["plugins/profiler/inspector", "ext-profiler/inspector"];
    std::iter::once(nccl_dir.join(INSPECTOR_LIB))
        .chain(
            src.into_iter()
                .flat_map(|s| in_tree.iter().map(move |d| s.join(d).join(INSPECTOR_LIB))),
        )
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
}

/// Add NCCL's Inspector to `p` when `plugin` (its library, found by
/// [`inspector_beside`]) is there and the user set neither
/// `NCCL_PROFILER_PLUGIN` nor any of the Inspector's variables: enabled,
/// writing to `<dir>/nccl-inspector` every second (its default writes only
/// when a communicator ends) with the start times of each collective
/// (verbose). Where the user turned the Inspector on themselves, their
/// dump folder is where it writes.
pub fn prepare_inspector(
    p: &mut Prepared,
    var: impl Fn(&str) -> Option<String>,
    dir: &Path,
    plugin: Option<&Path>,
) {
    let users = INSPECTOR_VARS.iter().any(|n| var(n).is_some());
    if users || var("NCCL_PROFILER_PLUGIN").is_some() {
        let on = var("NCCL_INSPECTOR_ENABLE").is_some_and(|v| v.trim() == "1");
        if on && var("NCCL_PROFILER_PLUGIN").is_some() {
            p.inspector_dir = var("NCCL_INSPECTOR_DUMP_DIR").map(PathBuf::from);
        }
        return;
    }
    let Some(plugin) = plugin else { return };
    let out = dir.join("nccl-inspector");
    p.set.extend(
        [
            ("NCCL_PROFILER_PLUGIN", plugin.display().to_string()),
            ("NCCL_INSPECTOR_ENABLE", "1".into()),
            ("NCCL_INSPECTOR_DUMP_DIR", out.display().to_string()),
            (
                "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS",
                "1000000".into(),
            ),
            ("NCCL_INSPECTOR_DUMP_VERBOSE", "1".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    p.inspector_dir = Some(out);
}

/// The Inspector beside the first NCCL the job could load that has one
/// (LD_LIBRARY_PATH, the loader's cache, system and CUDA folders, as
/// `probe::libs` searches; not Python wheels, which never carry it).
pub fn job_inspector() -> Option<PathBuf> {
    use gpucheck_checks::probe::libs;
    let places = libs::SearchPlaces::from_env(None, &[]);
    libs::find(&places, "libnccl.so")
        .iter()
        .filter_map(|f| f.path.parent())
        .find_map(inspector_beside)
}

/// The job's folder could not be made: take back what would write in it
/// (the recorder's dumps and pipes, gpucheck's Inspector).
pub fn without_job_dir(p: &mut Prepared) {
    let ours = p.set.iter().any(|(k, _)| k == "NCCL_INSPECTOR_ENABLE");
    p.set.retain(|(k, _)| {
        !k.starts_with("TORCH_") && !k.starts_with("NCCL_INSPECTOR_") && k != "NCCL_PROFILER_PLUGIN"
    });
    p.dump_dir = None;
    if ours {
        p.inspector_dir = None;
    }
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
    fn the_inspector_is_set_only_where_its_plugin_is_and_the_user_set_nothing() {
        let dir = Path::new("/tmp/gpucheck-job-7");
        let lib = Path::new("/opt/nccl/lib/libnccl-profiler-inspector.so");
        let mut p = Prepared::default();
        prepare_inspector(&mut p, env(&[]), dir, None);
        assert_eq!(p, Prepared::default(), "no plugin, nothing set");
        prepare_inspector(&mut p, env(&[]), dir, Some(lib));
        let names: Vec<&str> = p.set.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "NCCL_PROFILER_PLUGIN",
                "NCCL_INSPECTOR_ENABLE",
                "NCCL_INSPECTOR_DUMP_DIR",
                "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS",
                "NCCL_INSPECTOR_DUMP_VERBOSE",
            ]
        );
        assert_eq!(p.set[0].1, lib.display().to_string());
        assert_eq!(p.set[2].1, "/tmp/gpucheck-job-7/nccl-inspector");
        assert_eq!(p.inspector_dir, Some(dir.join("nccl-inspector")));
    }

    #[test]
    fn the_users_profiler_or_inspector_settings_are_kept() {
        let dir = Path::new("/tmp/j");
        let lib = Path::new("/x/libnccl-profiler-inspector.so");
        for user in [
            &[("NCCL_PROFILER_PLUGIN", "/opt/my-profiler.so")][..],
            &[("NCCL_INSPECTOR_DUMP_VERBOSE", "0")][..],
            &[("NCCL_INSPECTOR_ENABLE", "0")][..],
        ] {
            let mut p = Prepared::default();
            prepare_inspector(&mut p, env(user), dir, Some(lib));
            assert_eq!(p, Prepared::default(), "{user:?}");
        }
        // The user's own Inspector: gpucheck reads where they had it write.
        let mut p = Prepared::default();
        let user = [
            ("NCCL_PROFILER_PLUGIN", "/y/libnccl-profiler-inspector.so"),
            ("NCCL_INSPECTOR_ENABLE", "1"),
            ("NCCL_INSPECTOR_DUMP_DIR", "/shared/insp"),
        ];
        prepare_inspector(&mut p, env(&user), dir, Some(lib));
        assert!(p.set.is_empty());
        assert_eq!(p.inspector_dir, Some(PathBuf::from("/shared/insp")));
    }

    #[test]
    fn without_its_folder_the_job_keeps_only_its_ras_port() {
        let dir = Path::new("/tmp/j");
        let mut p = prepare(env(&[]), dir, 40123);
        prepare_inspector(&mut p, env(&[]), dir, Some(Path::new("/x/lib.so")));
        without_job_dir(&mut p);
        assert_eq!(
            p.set,
            vec![("NCCL_RAS_ADDR".into(), "localhost:40123".into())]
        );
        assert_eq!((p.dump_dir, p.inspector_dir), (None, None));
    }

    #[test]
    fn the_plugin_is_found_beside_libnccl_or_in_a_built_source_tree() {
        let root = tempfile::tempdir().unwrap();
        let lib = root.path().join("build/lib");
        std::fs::create_dir_all(&lib).unwrap();
        assert_eq!(inspector_beside(&lib), None);
        let in_tree = root.path().join("plugins/profiler/inspector");
        std::fs::create_dir_all(&in_tree).unwrap();
        std::fs::write(in_tree.join(INSPECTOR_LIB), b"x").unwrap();
        assert_eq!(inspector_beside(&lib), Some(in_tree.join(INSPECTOR_LIB)));
        std::fs::write(lib.join(INSPECTOR_LIB), b"x").unwrap();
        assert_eq!(inspector_beside(&lib), Some(lib.join(INSPECTOR_LIB)));
        // A folder of that name is no library.
        let other = root.path().join("other");
        std::fs::create_dir_all(other.join(INSPECTOR_LIB)).unwrap();
        assert_eq!(inspector_beside(&other), None);
    }

    #[test]
    fn the_job_folder_follows_the_run_identity_and_stays_one_name() {
        let d = job_dir(env(&[("SLURM_JOB_ID", "4242")]));
        assert!(d.ends_with("gpucheck-job-4242"), "{}", d.display());
        let d = job_dir(env(&[("GPUCHECK_RUN_ID", "../../etc")]));
        assert!(d.ends_with("gpucheck-job-....etc"), "{}", d.display());
    }
}

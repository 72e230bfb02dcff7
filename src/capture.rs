//! `--capture FILE` and `--replay FILE` on the binary's side: set the probe
//! boundary's mode (`gpucheck_checks::seam`) before the checks run, and
//! write the capture document after them. Planned before any check runs,
//! so a bad capture file or an unwritable path is a one-line error, exit 2.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gpucheck_checks::facts::nvml::{NvmlDriver, NvmlInventory};
use gpucheck_checks::input;
use gpucheck_checks::seam::capture::{Capture, Machine, CAPTURE_VERSION, MAX_CAPTURE_BYTES};
use gpucheck_checks::seam::{self, Mode};
use gpucheck_checks::{Fact, Options};

use gpucheck_checks::domain::text::{cut, list_cut};

use crate::cli::RunArgs;
use crate::model::Run;
use crate::report::bounded;
use crate::report::text::clean;

/// What the run does at the probe boundary.
#[derive(Debug, Clone)]
pub enum Plan {
    Live,
    /// Keep every answer and write them to `path` at the end.
    Record {
        path: PathBuf,
        redact: bool,
    },
    /// Answer from this capture.
    Replay(Box<Capture>),
}

/// The boundary's plan for `args`, or the one-line reason it cannot be.
pub fn plan(args: &RunArgs) -> Result<Plan, String> {
    plan_for(
        args.capture.as_deref(),
        args.replay.as_deref(),
        args.redact,
        MAX_CAPTURE_BYTES,
    )
}

/// The boundary's plan from `--capture`, `--replay` and `--redact`; a
/// capture file larger than `max_bytes` is refused unread
/// ([`MAX_CAPTURE_BYTES`] for a machine's, `MAX_JOB_CAPTURE_BYTES` for a
/// job's, which holds every rank's dump).
pub fn plan_for(
    capture: Option<&Path>,
    replay: Option<&Path>,
    redact: bool,
    max_bytes: u64,
) -> Result<Plan, String> {
    if redact && capture.is_none() {
        return Err("--redact needs --capture FILE (or `gpucheck capture FILE`)".to_string());
    }
    if let Some(path) = replay {
        let shown = path.display().to_string();
        // A regular file of at most `max_bytes`, read without waiting:
        // a FIFO with no writer would hold gpucheck before its run (and a
        // blocked read does not notice Ctrl-C).
        let bytes = input::read_regular(path, max_bytes)
            .map_err(|e| format!("cannot read the capture {shown}: {e}"))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{shown} is not a gpucheck capture (not UTF-8 text)"))?;
        // The error may quote the file (a version, serde's "unknown variant
        // `...`"): one line of readable length, whatever it holds.
        let mut capture = Capture::parse(&shown, &text)
            .map_err(|e| clean(&cut(&e.to_string(), bounded::TEXT_MAX_CHARS)))?;
        drop(text);
        // The answers go to the boundary once (`start`), not copied there.
        let answers = std::mem::take(&mut capture.answers);
        if let Ok(mut held) = REPLAY_ANSWERS.lock() {
            *held = Some(answers);
        }
        return Ok(Plan::Replay(Box::new(capture)));
    }
    let Some(path) = capture else {
        return Ok(Plan::Live);
    };
    writable(path)?;
    Ok(Plan::Record {
        path: path.to_path_buf(),
        redact,
    })
}

/// The folder of `path` takes a new file (tried, then removed).
fn writable(path: &Path) -> Result<(), String> {
    let dir = folder_of(path);
    let refuse = |e: std::io::Error| format!("cannot write the capture {}: {e}", path.display());
    // The capture replaces the file by rename, so a FIFO, device or folder
    // in its place is refused (renamed over, /dev/null would be gone); a
    // symbolic link is replaced, as a report's is.
    // A link to a device or a pipe, or to a descriptor (`/dev/stdout`), is
    // refused with it.
    if crate::output::names_a_descriptor(path) {
        return Err(format!(
            "cannot write the capture {}: it names an open file descriptor, not a regular file",
            path.display()
        ));
    }
    let followed = std::fs::metadata(path).ok();
    if let Some(m) = std::fs::symlink_metadata(path)
        .ok()
        .map(|m| match followed {
            Some(f) if m.file_type().is_symlink() && !f.is_file() => f,
            _ => m,
        })
    {
        if !m.is_file() && !m.file_type().is_symlink() {
            return Err(format!(
                "cannot write the capture {}: {}",
                path.display(),
                input::Refused::NotAFile(input::kind(&m.file_type()))
            ));
        }
    }
    // The folder first, for the OS's own words (tempfile's error adds the
    // temporary file's name).
    std::fs::metadata(dir).map_err(refuse)?;
    tempfile::NamedTempFile::new_in(dir)
        .map(drop)
        .map_err(|e| refuse(std::io::Error::from(e.kind())))
}

fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The options a replay runs with: the capture's (its probes asked with
/// those paths), with the profile chosen now and any threshold given now.
pub fn replay_options(capture: &Capture, now: &Options) -> Options {
    Options {
        profile: now.profile,
        expect_gpus: now.expect_gpus.or(capture.options.expect_gpus),
        min_busbw_gbps: now.min_busbw_gbps.or(capture.options.min_busbw_gbps),
        min_scaling: now.min_scaling.or(capture.options.min_scaling),
        ..capture.options.clone()
    }
}

/// The replayed capture's answers, from [`plan_for`] to [`start`]: the
/// largest part of a capture, moved rather than copied (a copy would double
/// a replay's memory), so `Plan::Replay`'s capture holds none.
static REPLAY_ANSWERS: std::sync::Mutex<Option<seam::Answers>> = std::sync::Mutex::new(None);

/// Set the boundary's mode for this process; before the first check.
pub fn start(plan: &Plan) {
    match plan {
        Plan::Live => {}
        Plan::Record { .. } => {
            seam::install(Mode::Record(Default::default()));
        }
        Plan::Replay(capture) => {
            let answers = REPLAY_ANSWERS.lock().ok().and_then(|mut a| a.take());
            seam::install(Mode::Replay(
                answers.unwrap_or_else(|| capture.answers.clone()),
            ));
            // Every miss says how the capture was made: a check the
            // capture's own profile never ran has no answers in it.
            seam::set_replay_note(format!(
                "captured with --profile {}",
                capture.profile.as_str()
            ));
        }
    }
}

/// After the checks: write the capture when recording. The error is one line.
pub fn finish(plan: &Plan, options: &Options, run: &Run) -> Result<(), String> {
    let Plan::Record { path, redact } = plan else {
        return Ok(());
    };
    let mut capture = Capture {
        capture_version: CAPTURE_VERSION,
        gpucheck_version: env!("CARGO_PKG_VERSION").to_string(),
        profile: run.profile,
        captured_at_unix: run.started_at_unix,
        redacted: false,
        machine: machine(run),
        options: options.clone(),
        answers: seam::global().map(|s| s.recorded()).unwrap_or_default(),
    };
    keep_nvml_facts(&mut capture, run);
    if *redact {
        capture = seam::redact::redact(&capture);
    }
    write_whole(path, &capture.to_text())
        .map_err(|e| format!("cannot write the capture {}: {e}", path.display()))
}

/// Write `text` as the file at `path` the way the reports are written: a
/// hidden temporary file beside it (0666 less the umask, or the old file's
/// permissions), on disk, then renamed into place.
fn write_whole(path: &Path, text: &str) -> std::io::Result<()> {
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(path.file_name().unwrap_or_default());
    prefix.push(".");
    let mut temp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(folder_of(path))?;
    temp.write_all(text.as_bytes())?;
    if let Ok(old) = std::fs::metadata(path) {
        temp.as_file().set_permissions(old.permissions())?;
    }
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// What gpu.driver and gpu.count published is what NVML answered them:
/// kept as the answers a later check's own NVML question gets
/// (`facts::nvml`), the same key `probe::nvml` records them under, so a
/// capture holds them even when those checks ran in a child.
fn keep_nvml_facts(capture: &mut Capture, run: &Run) {
    let lib = capture
        .options
        .nvml_lib
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    for (entry, fact) in [
        ("nvml::driver", NvmlDriver::KEY),
        ("nvml::inventory", NvmlInventory::KEY),
    ] {
        let published = run
            .results
            .iter()
            .rev()
            .find_map(|r| r.outcome.data.get(fact));
        if let Some(v) = published {
            capture
                .answers
                .entry(seam::key(entry, &lib))
                .or_insert_with(|| v.clone());
        }
    }
    // NVML that failed in gpu.driver fails every later inventory the same
    // way (facts::nvml::inventory_for_run), with no gpu.count to publish it.
    let driver = capture
        .answers
        .get(&seam::key("nvml::driver", &lib))
        .cloned();
    if let Some(failure) = driver.filter(|d| d.get("Err").is_some()) {
        capture
            .answers
            .entry(seam::key("nvml::inventory", &lib))
            .or_insert(failure);
    }
}

/// Whose machine the run was on: the host, and the GPUs and driver NVML
/// described to the gpu checks.
fn machine(run: &Run) -> Machine {
    let fact = |key: &str| {
        run.results
            .iter()
            .rev()
            .find_map(|r| r.outcome.data.get(key).cloned())
    };
    let driver = fact(NvmlDriver::KEY)
        .and_then(|v| serde_json::from_value::<NvmlDriver>(v).ok())
        .and_then(|d| d.0.ok())
        .map(|d| d.driver_version);
    let gpus = fact(NvmlInventory::KEY)
        .and_then(|v| serde_json::from_value::<NvmlInventory>(v).ok())
        .and_then(|i| i.gpus().ok())
        .unwrap_or_default();
    Machine {
        hostname: run.host.hostname.clone(),
        os: run.host.os.clone(),
        kernel: run.host.kernel.clone(),
        gpus: gpus.iter().map(|g| g.name.clone()).collect(),
        gpu_uuids: gpus.iter().map(|g| g.uuid.clone()).collect(),
        driver,
    }
}

/// The line a replay prints above its table: whose machine it is.
pub fn header(capture: &Capture) -> String {
    let m = &capture.machine;
    let gpus = match m.gpus.len() {
        0 => "no GPUs described".to_string(),
        n => {
            let mut names: Vec<String> = m.gpus.iter().map(|g| foreign(g)).collect();
            names.dedup();
            format!(
                "{n} GPU{} ({})",
                if n == 1 { "" } else { "s" },
                list_cut(&names, 4)
            )
        }
    };
    let when = chrono::DateTime::from_timestamp(capture.captured_at_unix as i64, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| capture.captured_at_unix.to_string());
    let line = format!(
        "replay of {}: {}, driver {}, {} profile, captured {when} by gpucheck {}{}",
        foreign(&m.hostname),
        gpus,
        foreign(m.driver.as_deref().unwrap_or("unknown")),
        capture.profile.as_str(),
        foreign(&capture.gpucheck_version),
        if capture.redacted { " (redacted)" } else { "" }
    );
    // One line, whatever the file held: no control character acts on the
    // terminal, and no line break forges a line of the report.
    format!("{}\n", clean(&line))
}

/// A string from the capture file as the header shows it: cut to a name's
/// length (saying how much was left out) and made safe for one line.
fn foreign(text: &str) -> String {
    clean(&cut(text, bounded::NAME_MAX_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucheck_checks::Profile;

    fn capture() -> Capture {
        Capture {
            capture_version: CAPTURE_VERSION,
            gpucheck_version: "0.1.0".into(),
            profile: Profile::Standard,
            captured_at_unix: 1_796_150_000,
            redacted: true,
            machine: Machine {
                hostname: "host-1".into(),
                gpus: vec!["NVIDIA H100 80GB HBM3".into(); 8],
                driver: Some("570.86.15".into()),
                ..Machine::default()
            },
            options: Options {
                expect_gpus: Some(8),
                python: Some("/opt/venv/bin/python".into()),
                ..Options::default()
            },
            answers: Default::default(),
        }
    }

    #[test]
    fn the_header_names_the_machine_its_gpus_driver_and_when() {
        assert_eq!(
            header(&capture()),
            "replay of host-1: 8 GPUs (NVIDIA H100 80GB HBM3), driver 570.86.15, standard \
             profile, captured 2026-12-01 18:33 UTC by gpucheck 0.1.0 (redacted)\n"
        );
        let mut bare = capture();
        bare.machine.gpus.clear();
        bare.machine.driver = None;
        assert!(header(&bare).contains("no GPUs described, driver unknown"));
    }

    #[test]
    fn the_header_is_one_safe_line_of_readable_length_whatever_the_file_holds() {
        let mut c = capture();
        c.machine.hostname = format!(
            "evil\u{1b}[2J\u{1b}[31mX\nREADY: 99 passed{}",
            "h".repeat(50 << 20)
        );
        c.machine.gpus = vec![format!("GPU\u{7}{}", "g".repeat(1000)); 8];
        let h = header(&c);
        assert_eq!(h.lines().count(), 1, "{h}");
        assert!(!h.chars().any(|c| c.is_control() && c != '\n'), "{h}");
        assert!(h.starts_with("replay of evil\\u{1b}[2J\\u{1b}[31mX READY: 99 passed"));
        assert!(h.contains(" more characters): 8 GPUs (GPU\\u{7}ggg"), "{h}");
        assert!(h.len() < 1000, "{} bytes", h.len());
    }

    #[test]
    fn a_refusal_quoting_the_file_is_one_line_of_readable_length() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.json");
        let mut doc = serde_json::to_value(capture()).unwrap();
        doc["profile"] = serde_json::json!(format!("x\u{1b}[2J\n{}", "y".repeat(1 << 20)));
        std::fs::write(&file, doc.to_string()).unwrap();
        let err = plan_for(None, Some(&file), false, MAX_CAPTURE_BYTES).unwrap_err();
        assert!(
            err.contains("is a damaged capture: unknown variant"),
            "{err}"
        );
        assert!(err.contains("more characters)"), "{err}");
        assert!(err.len() < 2100, "{} bytes", err.len());
        assert!(!err.chars().any(char::is_control), "{err}");
    }

    #[test]
    fn a_replay_asks_with_the_captured_options_and_judges_with_todays_thresholds() {
        let now = Options {
            profile: Profile::Quick,
            python: Some("/usr/bin/python3".into()),
            min_busbw_gbps: Some(300.0),
            ..Options::default()
        };
        let o = replay_options(&capture(), &now);
        assert_eq!(o.profile, Profile::Quick);
        assert_eq!(o.python.as_deref(), Some(Path::new("/opt/venv/bin/python")));
        assert_eq!(o.expect_gpus, Some(8));
        assert_eq!(o.min_busbw_gbps, Some(300.0));
    }
}

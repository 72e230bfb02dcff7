//! Facts from the outside world, one file per source. Probes return plain
//! structs; they never judge and never print.

pub mod as_rank;
pub mod burn;
pub mod copy_bandwidth;
pub mod cuda;
pub mod ddp;
pub mod exits;
pub mod fr_dump;
pub mod fr_json;
pub mod fr_pickle;
pub mod host;
pub mod imex;
pub mod kernel_log;
pub mod libs;
pub mod load;
pub mod nccl;
pub mod nccl_inspector;
pub mod nccl_ras;
pub mod net;
pub mod net_plugin;
pub mod nvml;
pub mod process;
pub mod python;
pub mod rank_state;
pub mod ranks;
pub mod sysfs;
pub mod system;
pub mod torch;

/// The child protocol, part 1: the runner sets this variable in the
/// environment of `gpucheck __child ID`, so the probes know they run isolated.
pub const CHILD_ENV: &str = "GPUCHECK_CHILD";

/// The child protocol, part 2: a line on an isolated child's stderr that
/// starts with this names the stage it entered (see [`stage`]); the runner
/// reports the last one when the child times out.
pub const STAGE_PREFIX: &str = "gpucheck-stage: ";

/// Mark the stage a child-isolated probe is entering ("cuInit",
/// "ncclCommInitAll"), so that a timeout can say where it hung. Writes one
/// protocol line to stderr, and only inside an isolated child.
pub fn stage(name: &str) {
    if std::env::var_os(CHILD_ENV).is_some() {
        child_line(STAGE_PREFIX, name);
    }
}

/// The child protocol, part 3: a line on an isolated child's stderr that
/// starts with this is the running check's progress (see [`progress`]),
/// shown on the terminal's progress line and never in a report.
pub const PROGRESS_PREFIX: &str = "gpucheck-progress: ";

/// The child protocol, part 4: a line that starts with this carries, as
/// JSON, the outcome of what a long check has done so far (see
/// [`partial`]): the runner reports the latest one when the run is
/// interrupted before the check ends.
pub const PARTIAL_PREFIX: &str = "gpucheck-partial: ";

static PROGRESS_HOOK: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Where [`progress`] goes for a check that runs in gpucheck's own process
/// (the progress line); set once by the binary.
pub fn set_progress_hook(hook: fn(&str)) {
    let _ = PROGRESS_HOOK.set(hook);
}

/// Say how far a long check is ("round 3 · 2m10s done, 7m50s left"): a
/// protocol line inside an isolated child, else the progress hook.
pub fn progress(text: &str) {
    let text = text.replace(['\n', '\r'], " ");
    if std::env::var_os(CHILD_ENV).is_some() {
        child_line(PROGRESS_PREFIX, &text);
    } else if let Some(hook) = PROGRESS_HOOK.get() {
        hook(&text);
    }
}

/// Hand the runner the outcome of what ran so far, to be reported if the
/// run is interrupted before the check returns; inside an isolated child
/// only (in gpucheck's own process an interruption ends nothing early).
pub fn partial(outcome: &crate::Outcome) {
    if std::env::var_os(CHILD_ENV).is_some() {
        if let Ok(json) = serde_json::to_string(outcome) {
            child_line(PARTIAL_PREFIX, &json);
        }
    }
}

/// One protocol line on stderr, written whole.
fn child_line(prefix: &str, text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{prefix}{text}\n").as_bytes());
}

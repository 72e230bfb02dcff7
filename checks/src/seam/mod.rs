//! The probe boundary: the one way a check reaches the outside world.
//!
//! Every probe entry point (an NVML query, a sysfs read, the training
//! Python's answer, an environment variable) hands its live work to
//! [`answer`] as a closure. What happens then is the run's [`Mode`]:
//!
//! - **live** (the default): the closure runs; nothing is kept.
//! - **record** (`--capture FILE`): the closure runs and its answer is kept,
//!   serialised, under the entry point's name and arguments
//!   (`"sysfs::rdma_ports(/sys)"`); the runner writes them all into the
//!   capture document ([`capture`]). A child-isolated check records in its
//!   own process and sends its answers back with its outcome.
//! - **replay** (`--replay FILE`): the answer comes from the capture and the
//!   closure never runs. An answer that is not there (a newer probe, a
//!   profile the capture did not run) is an explicit miss: the probe unwinds
//!   with a [`Miss`] (through `resume_unwind`, so no panic message is
//!   printed) and the runner turns it into the check's `skip` with the
//!   reason in a user's words ("the capture holds no CUDA driver answer
//!   (captured with --profile quick)") and the key as a fact. Nothing is
//!   ever made up. Under
//!   replay nothing can hang, so the runner runs child-isolated checks in
//!   its own process.
//!
//! Wrap a probe's whole body, outermost: a [`Miss`] must unwind straight
//! to the runner, so `answer` is never called inside a thread the probe
//! starts itself (a bounded wait) or inside its own `catch_unwind` (the
//! cudarc guard in probe/cuda.rs); the live closure may do both.
//!
//! The mode is process-global, set once by the runner before the first
//! check runs ([`install`]); without it every probe is live, as in unit
//! tests.
//!
//! Environment variables go through [`env`] and [`env_names`]
//! (`probe::host::env_lossy` is [`env`]). `GPUCHECK_CHILD` (probe/mod.rs) is
//! the child protocol, not a fact about the machine.

pub mod capture;
#[cfg(test)]
mod entry_points;
pub mod redact;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::domain::redact::{redact_url_credentials, redact_value};

/// Recorded answers: the key (entry point and arguments) to the answer.
pub type Answers = BTreeMap<String, Value>;

/// The environment variable that tells `gpucheck __child` to record.
pub const RECORD_ENV: &str = "GPUCHECK_SEAM_RECORD";

/// How probes answer in this process.
#[derive(Debug)]
pub enum Mode {
    /// Ask the machine.
    Live,
    /// Ask the machine and keep every answer.
    Record(Mutex<Answers>),
    /// Answer from a capture; never ask the machine.
    Replay(Answers),
}

/// One boundary with its mode; the process has at most one, installed by
/// the runner ([`install`]), and tests build their own.
#[derive(Debug)]
pub struct Seam {
    mode: Mode,
}

/// A probe's answer that the capture does not hold (or holds in a shape
/// this gpucheck cannot read). Carried by unwinding to the runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    pub key: String,
    /// Empty when the key is absent; why the answer could not be read otherwise.
    pub why: String,
}

impl Miss {
    /// The check's skip reason, in a user's words: what the capture lacks
    /// ("the capture holds no CUDA driver answer") and, under a replay, how
    /// it was made ("captured with --profile quick": a capture holds only
    /// what its own run asked). The key itself (`cuda::probe_driver(true)`)
    /// goes into the skip's facts ([`Miss::key`]), not its summary.
    pub fn reason(&self) -> String {
        let what = answer_named(&self.key);
        let note = REPLAY_NOTE
            .get()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        if self.why.is_empty() {
            format!("the capture holds no {what}{note}")
        } else {
            format!(
                "the capture's {what} is in a shape this gpucheck cannot read ({}){note}",
                self.why
            )
        }
    }
}

/// How a replay's capture was made, said after every miss's reason
/// ("captured with --profile quick"); set once, before the first check.
static REPLAY_NOTE: OnceLock<String> = OnceLock::new();

/// Say how the replayed capture was made, for every [`Miss::reason`].
pub fn set_replay_note(note: impl Into<String>) {
    let _ = REPLAY_NOTE.set(note.into());
}

/// What the answer under `key` (`entry(args)`) is, in a user's words:
/// the entry point's source ("NVML", "CUDA driver"), and the file or
/// variable it reads where there is one.
pub fn answer_named(key: &str) -> String {
    let (entry, args) = match key.split_once('(') {
        Some((entry, rest)) => (entry, rest.strip_suffix(')').unwrap_or(rest)),
        None => (key, ""),
    };
    let source = entry.split("::").next().unwrap_or(entry);
    match (source, entry) {
        ("env", "env") => format!("value for ${args}"),
        ("env", _) => "list of environment variable names".to_string(),
        ("sysfs", "sysfs::attr") => format!("reading of {args}"),
        ("sysfs", _) => "reading of /sys and /proc".to_string(),
        ("cuda", "cuda::probe_driver") => "CUDA driver answer".to_string(),
        ("cuda", _) => "CUDA library answer".to_string(),
        ("nvml", _) => "NVML answer".to_string(),
        ("nccl", "nccl::run_allreduce") => "NCCL all-reduce run".to_string(),
        ("nccl", _) => "NCCL answer".to_string(),
        ("net_plugin", _) => "NCCL network plugin answer".to_string(),
        ("net", _) => "network answer".to_string(),
        ("host", "host::device_nodes_in") => format!("listing of {args}"),
        ("host", "host::shm_at") => format!("reading of {args}"),
        ("host" | "system", _) => "host answer".to_string(),
        ("python" | "torch", _) => "Python and PyTorch answer".to_string(),
        ("kernel_log", _) => "kernel log".to_string(),
        ("load", _) => "GPU load run".to_string(),
        ("ddp", _) => "DDP benchmark answer".to_string(),
        ("copy_bandwidth", _) => "copy bandwidth measurement".to_string(),
        ("gpu", _) => "GPU answer".to_string(),
        ("fr_dump" | "ranks" | "rank_state", _) => "job's rank answer".to_string(),
        ("nccl_ras", _) => "NCCL RAS status".to_string(),
        ("nccl_inspector", _) => "NCCL Inspector output".to_string(),
        ("imex", _) => "IMEX answer".to_string(),
        _ => format!("answer for {entry}"),
    }
}

impl Seam {
    pub fn new(mode: Mode) -> Self {
        Seam { mode }
    }

    /// The answer of entry point `entry` called with `args`, per the mode.
    pub fn answer<T: Serialize + DeserializeOwned>(
        &self,
        entry: &str,
        args: &str,
        live: impl FnOnce() -> T,
    ) -> Result<T, Miss> {
        self.answer_as(entry, args, live, |v| serde_json::to_value(v).ok())
    }

    /// [`Seam::answer`], recording what `record` makes of the live answer
    /// (the answer with its secrets taken out) instead of the answer.
    pub fn answer_as<T: Serialize + DeserializeOwned>(
        &self,
        entry: &str,
        args: &str,
        live: impl FnOnce() -> T,
        record: impl FnOnce(&T) -> Option<Value>,
    ) -> Result<T, Miss> {
        let key = key(entry, args);
        match &self.mode {
            Mode::Live => Ok(live()),
            Mode::Record(kept) => {
                let value = live();
                if let Some(json) = record(&value) {
                    if let Ok(mut kept) = kept.lock() {
                        kept.entry(key).or_insert(json);
                    }
                }
                Ok(value)
            }
            Mode::Replay(answers) => match answers.get(&key) {
                None => Err(Miss {
                    key,
                    why: String::new(),
                }),
                Some(v) => serde_json::from_value(v.clone()).map_err(|e| Miss {
                    key,
                    why: format!("recorded in another shape: {e}"),
                }),
            },
        }
    }

    /// Keep answers recorded elsewhere (an isolated child's), first one wins.
    pub fn keep(&self, answers: Answers) {
        if let Mode::Record(kept) = &self.mode {
            if let Ok(mut kept) = kept.lock() {
                for (k, v) in answers {
                    kept.entry(k).or_insert(v);
                }
            }
        }
    }

    /// Every answer recorded so far (empty unless recording).
    pub fn recorded(&self) -> Answers {
        match &self.mode {
            Mode::Record(kept) => kept.lock().map(|k| k.clone()).unwrap_or_default(),
            _ => Answers::new(),
        }
    }

    pub fn is_replay(&self) -> bool {
        matches!(self.mode, Mode::Replay(_))
    }

    pub fn is_recording(&self) -> bool {
        matches!(self.mode, Mode::Record(_))
    }
}

impl Seam {
    /// The value recorded under `key`, under replay (None otherwise).
    fn replayed(&self, key: &str) -> Option<&Value> {
        match &self.mode {
            Mode::Replay(answers) => answers.get(key),
            _ => None,
        }
    }
}

/// The entry under which the runner keeps the outcome of a check that
/// timed out while recording.
pub const TIMED_OUT: &str = "runner::timed_out";

/// Keep `outcome`, the timeout of check `id`, while recording: a hung
/// probe gave no answer to keep, so the replay gives this verdict instead
/// of a skip.
pub fn keep_timeout<T: Serialize>(id: &str, outcome: &T) {
    if let Some(seam) = global().filter(|s| s.is_recording()) {
        if let Ok(v) = serde_json::to_value(outcome) {
            seam.keep(Answers::from([(key(TIMED_OUT, id), v)]));
        }
    }
}

/// Under replay, the outcome of check `id` when it timed out in the run
/// captured (see [`keep_timeout`]).
pub fn replayed_timeout<T: DeserializeOwned>(id: &str) -> Option<T> {
    let v = global()?.replayed(&key(TIMED_OUT, id))?;
    serde_json::from_value(v.clone()).ok()
}

/// An answer's key: `entry` alone, or `entry(args)`.
pub fn key(entry: &str, args: &str) -> String {
    if args.is_empty() {
        entry.to_string()
    } else {
        format!("{entry}({args})")
    }
}

/// The check running now and the questions it asked that [`nth`] numbers.
static ASKED: std::sync::Mutex<(String, Vec<String>)> =
    std::sync::Mutex::new((String::new(), Vec::new()));

/// A check starts (in gpucheck, or in its isolated child): [`nth`] counts
/// its questions from here, under its id, so the numbering is the same
/// whether it ran in a child (recording) or in-process (replay).
pub fn begin_check(id: &str) {
    let mut asked = ASKED.lock().unwrap_or_else(|e| e.into_inner());
    *asked = (id.to_string(), Vec::new());
}

/// `args` numbered by how often the running check has asked with them
/// (`"gpu.compute/3#1"`, `"gpu.compute/3#2"`): a probe that measures the
/// same thing again (a figure under its threshold measured twice more)
/// keys each repeat apart, and a replay, asking in the same order, gets
/// each repeat's own answer.
pub fn nth(args: &str) -> String {
    let mut asked = ASKED.lock().unwrap_or_else(|e| e.into_inner());
    asked.1.push(args.to_string());
    let n = asked.1.iter().filter(|a| *a == args).count();
    format!("{}/{args}#{n}", asked.0)
}

static GLOBAL: OnceLock<Seam> = OnceLock::new();

/// Set this process's mode, once, before the first check runs. False when
/// a mode was already set (it stays).
pub fn install(mode: Mode) -> bool {
    GLOBAL.set(Seam::new(mode)).is_ok()
}

/// This process's boundary, when the runner installed one.
pub fn global() -> Option<&'static Seam> {
    GLOBAL.get()
}

/// True under `--replay`.
pub fn is_replay() -> bool {
    global().is_some_and(Seam::is_replay)
}

/// True under `--capture`.
pub fn is_recording() -> bool {
    global().is_some_and(Seam::is_recording)
}

/// The one call every probe entry point makes: `live` asks the machine;
/// under replay the capture answers instead, and a missing answer unwinds
/// with a [`Miss`] that the runner reports as the check's skip.
pub fn answer<T: Serialize + DeserializeOwned>(
    entry: &str,
    args: &str,
    live: impl FnOnce() -> T,
) -> T {
    let Some(seam) = global() else {
        return live();
    };
    match seam.answer(entry, args, live) {
        Ok(v) => v,
        // No panic hook runs for resume_unwind: nothing is printed.
        Err(miss) => std::panic::resume_unwind(Box::new(miss)),
    }
}

/// [`answer`], recorded as `kept` makes it (secrets taken out): under
/// replay the check sees what was recorded, as a report would show it.
pub fn answer_kept<T: Serialize + DeserializeOwned>(
    entry: &str,
    args: &str,
    live: impl FnOnce() -> T,
    kept: impl FnOnce(&T) -> T,
) -> T {
    let Some(seam) = global() else {
        return live();
    };
    let record = |v: &T| serde_json::to_value(kept(v)).ok();
    match seam.answer_as(entry, args, live, record) {
        Ok(v) => v,
        Err(miss) => std::panic::resume_unwind(Box::new(miss)),
    }
}

/// A `NAME=value` configuration text (nccl.conf) as a capture may keep
/// it: each value by the environment's rules, other lines as they are.
pub fn conf_without_secrets(text: &str) -> String {
    let mut out: Vec<String> = text
        .lines()
        .map(|line| match line.split_once('=') {
            Some((name, value)) if !name.trim_start().starts_with('#') => {
                format!("{name}={}", without_secrets(name.trim(), value))
            }
            _ => line.to_string(),
        })
        .collect();
    if text.ends_with('\n') {
        out.push(String::new());
    }
    out.join("\n")
}

/// The skip reason when `payload` (what a check's unwinding carried) is a
/// [`Miss`].
pub fn miss_reason(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload.downcast_ref::<Miss>().map(Miss::reason)
}

/// An environment variable the checks read, as text (non-UTF-8 bytes
/// replaced), through the boundary: recorded with secrets redacted (the
/// reports' own rules: secret-looking names, passwords in addresses), and
/// under replay read from the capture.
pub fn env(name: &str) -> Option<String> {
    let live = || std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    if !is_recording() {
        return answer("env", name, live);
    }
    let value = live();
    let kept = value.as_deref().map(|v| without_secrets(name, v));
    if let Some(seam) = global() {
        seam.keep(Answers::from([(
            key("env", name),
            serde_json::to_value(&kept).unwrap_or(Value::Null),
        )]));
    }
    value
}

/// The names of every environment variable set (for the probes that look
/// for a family: `NCCL_*`, `FI_*`), through the boundary.
pub fn env_names() -> Vec<String> {
    answer("env::names", "", || {
        let mut names: Vec<String> = std::env::vars_os()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    })
}

/// `value` of `name` as a capture may keep it.
fn without_secrets(name: &str, value: &str) -> String {
    let value = redact_value(name, value);
    if value.contains('@') {
        redact_url_credentials(&value)
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_asks_the_machine_and_keeps_nothing() {
        let seam = Seam::new(Mode::Live);
        assert_eq!(seam.answer("x", "", || 7u32), Ok(7));
        assert!(seam.recorded().is_empty());
    }

    #[test]
    fn record_keeps_the_first_answer_under_entry_and_arguments() {
        let seam = Seam::new(Mode::Record(Mutex::new(Answers::new())));
        assert_eq!(
            seam.answer("sysfs::attr", "/sys/x", || "1".to_string()),
            Ok("1".into())
        );
        assert_eq!(
            seam.answer("sysfs::attr", "/sys/x", || "2".to_string()),
            Ok("2".into())
        );
        let kept = seam.recorded();
        assert_eq!(kept.get("sysfs::attr(/sys/x)"), Some(&Value::from("1")));
    }

    #[test]
    fn replay_answers_from_the_capture_without_asking() {
        let answers = Answers::from([("gpu::count(0)".to_string(), Value::from(8))]);
        let seam = Seam::new(Mode::Replay(answers));
        let asked = std::cell::Cell::new(false);
        let got = seam.answer("gpu::count", "0", || {
            asked.set(true);
            1u32
        });
        assert_eq!(got, Ok(8));
        assert!(!asked.get(), "replay must never run the live probe");
    }

    #[test]
    fn repeats_of_one_question_are_numbered_apart_per_check() {
        begin_check("x.first");
        assert_eq!(nth("gpu-7"), "x.first/gpu-7#1");
        assert_eq!(nth("gpu-8"), "x.first/gpu-8#1");
        assert_eq!(nth("gpu-7"), "x.first/gpu-7#2");
        begin_check("x.second");
        assert_eq!(nth("gpu-7"), "x.second/gpu-7#1");
    }

    #[test]
    fn a_missing_answer_is_an_explicit_miss_naming_what_is_missing() {
        let seam = Seam::new(Mode::Replay(Answers::new()));
        let miss = seam.answer("net::resolve", "node01", || 0u8).unwrap_err();
        assert_eq!(miss.reason(), "the capture holds no network answer");
        assert_eq!(miss.key, "net::resolve(node01)");
    }

    #[test]
    fn a_miss_says_what_is_missing_in_a_users_words() {
        for (key, named) in [
            ("cuda::probe_driver(true)", "CUDA driver answer"),
            ("nvml::inventory(target/libnvidia-ml.so.1)", "NVML answer"),
            ("sysfs::attr(/proc/uptime)", "reading of /proc/uptime"),
            ("env(NCCL_IB_HCA)", "value for $NCCL_IB_HCA"),
            (
                "python::python_env(/usr/bin/python3)",
                "Python and PyTorch answer",
            ),
        ] {
            assert_eq!(answer_named(key), named, "{key}");
        }
    }

    #[test]
    fn an_answer_of_another_shape_is_a_miss_not_a_default() {
        let answers = Answers::from([("n".to_string(), Value::from("eight"))]);
        let seam = Seam::new(Mode::Replay(answers));
        let miss = seam.answer("n", "", || 0u32).unwrap_err();
        assert!(
            miss.reason()
                .starts_with("the capture's answer for n is in a shape this gpucheck cannot read (recorded in another shape"),
            "{miss:?}"
        );
    }

    #[test]
    fn a_miss_unwinds_to_the_runner_silently_and_is_recognised() {
        let caught = std::panic::catch_unwind(|| {
            std::panic::resume_unwind(Box::new(Miss {
                key: "env(RANK)".into(),
                why: String::new(),
            }))
        })
        .unwrap_err();
        assert_eq!(
            miss_reason(caught.as_ref()).as_deref(),
            Some("the capture holds no value for $RANK")
        );
        let other = std::panic::catch_unwind(|| panic!("a bug")).unwrap_err();
        assert_eq!(miss_reason(other.as_ref()), None);
    }

    #[test]
    fn a_recorded_timeout_is_found_under_replay_only() {
        let answers = Answers::from([(key(TIMED_OUT, "gpu.ecc"), Value::from("fail"))]);
        let seam = Seam::new(Mode::Replay(answers));
        assert_eq!(
            seam.replayed(&key(TIMED_OUT, "gpu.ecc")),
            Some(&Value::from("fail"))
        );
        assert_eq!(seam.replayed(&key(TIMED_OUT, "gpu.pcie")), None);
        let live = Seam::new(Mode::Live);
        assert_eq!(live.replayed(&key(TIMED_OUT, "gpu.ecc")), None);
    }

    #[test]
    fn recorded_configuration_files_lose_their_secrets() {
        let text = "# NCCL_IB_HCA=mlx5\nNCCL_SOCKET_IFNAME=eth0\nNCCL_AUTH_TOKEN = s3cr3t\n\n";
        assert_eq!(
            conf_without_secrets(text),
            "# NCCL_IB_HCA=mlx5\nNCCL_SOCKET_IFNAME=eth0\nNCCL_AUTH_TOKEN =***\n\n"
        );
        assert_eq!(conf_without_secrets("A=1"), "A=1");
    }

    #[test]
    fn recorded_environment_values_lose_their_secrets() {
        assert_eq!(without_secrets("HF_TOKEN", "hf_abc"), "***");
        assert_eq!(
            without_secrets("MASTER_ADDR", "tcp://user:pw@node01:29500"),
            "tcp://user:***@node01:29500"
        );
        assert_eq!(without_secrets("NCCL_SOCKET_IFNAME", "eth0"), "eth0");
    }
}

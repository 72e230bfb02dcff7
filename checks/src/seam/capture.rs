//! The capture document: every answer the probes got in one run, with
//! what it takes to replay them (the options, the profile) and whose
//! machine it was. Versioned by [`CAPTURE_VERSION`] and described by
//! `schema/capture.schema.json` (regenerate with
//! `GPUCHECK_UPDATE_SCHEMA=1 cargo test capture_schema_file`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use super::Answers;
use crate::{Options, Profile};

/// The capture format this gpucheck writes and reads. Bump it when an
/// older gpucheck could no longer read what a newer one writes.
pub const CAPTURE_VERSION: u32 = 1;

/// The largest capture file `--replay` reads: 8 MiB. A standard run of an
/// 8-GPU H100 box is about 90 KB (`tests/replays/`); a full run of the
/// largest node (32 GPUs, every all-reduce repeat and copy rate kept) stays
/// well under 1 MB. A bigger file describes no machine, and parsed it costs
/// memory in proportion: about 35 times its size at worst (a file of
/// nothing but small numbers), so under 300 MiB at this bound.
pub const MAX_CAPTURE_BYTES: u64 = 8 * 1024 * 1024;

/// The largest capture `gpucheck job --replay` reads: 64 MiB. A job's
/// capture holds every rank's parsed Flight Recorder dump (about 350 bytes
/// an entry, 2,000 entries a rank by default: 0.7 MB a rank), so this is
/// about 90 ranks with full buffers; parsed, such a file costs about 12
/// times its size (measured: 376 MiB for 30 MiB of 48 ranks), and
/// [`MAX_CAPTURE_VALUES`] bounds a denser one.
pub const MAX_JOB_CAPTURE_BYTES: u64 = 64 * 1024 * 1024;

/// The most JSON values (numbers, strings, lists, objects...) a capture
/// may hold: 6 million. Parsed, each costs up to about 70 bytes (measured:
/// a file of nothing but small numbers), so a capture of any size within
/// its bound parses in under about 450 MiB. A standard 8-GPU capture holds
/// about 3,000; a job's holds about 20 a Flight Recorder entry (2,000
/// entries a rank by default: 150 ranks).
pub const MAX_CAPTURE_VALUES: usize = 6_000_000;

/// The most GPUs one machine can have: the NVIDIA driver's
/// `NV_MAX_DEVICES` ("the maximum number of GPUs supported in a single
/// system", `nvlimits.h` in open-gpu-kernel-modules). NVML numbers its
/// devices below it, and the largest nodes sold (HGX-2, DGX-2) carry 16.
pub const MAX_GPUS_PER_NODE: usize = 32;

/// One run's answers from the outside world.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Capture {
    /// The format of this document ([`CAPTURE_VERSION`]).
    pub capture_version: u32,
    pub gpucheck_version: String,
    /// The profile the capture ran (a replay of a larger one misses answers).
    pub profile: Profile,
    /// When the run started, Unix seconds.
    pub captured_at_unix: u64,
    /// True when `--redact` replaced host names, addresses, serials and UUIDs.
    #[serde(default)]
    pub redacted: bool,
    /// Whose machine this is, for the line a replay prints above its table.
    pub machine: Machine,
    /// The options the run had (paths, thresholds): a replay uses them, so
    /// its probes ask with the same arguments.
    #[schemars(with = "Value")]
    pub options: Options,
    /// Every answer, by entry point and arguments (`env(RANK)`,
    /// `sysfs::rdma_ports(/sys)`), as the probe returned it.
    pub answers: Answers,
}

/// Whose machine a capture is from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Machine {
    pub hostname: String,
    pub os: String,
    pub kernel: String,
    /// GPU models NVML described, one per GPU ("NVIDIA H100 80GB HBM3").
    #[serde(default)]
    pub gpus: Vec<String>,
    /// Their UUIDs, in the same order.
    #[serde(default)]
    pub gpu_uuids: Vec<String>,
    /// The NVIDIA driver version, when NVML answered.
    #[serde(default)]
    pub driver: Option<String>,
}

/// Why a capture file cannot be replayed; one line each.
#[derive(Debug, Error, PartialEq)]
pub enum CaptureError {
    #[error("{path} is not JSON: {detail}")]
    NotJson { path: String, detail: String },
    #[error("{path} is not a gpucheck capture (no capture_version)")]
    NotACapture { path: String },
    #[error(
        "{path} has capture_version {found}; this gpucheck {ours} reads capture_version \
         {CAPTURE_VERSION}: replay it with the gpucheck it names ({by})"
    )]
    Version {
        path: String,
        found: String,
        ours: String,
        by: String,
    },
    #[error("{path} is a damaged capture: {detail}")]
    Malformed { path: String, detail: String },
    #[error(
        "{path} holds more than {MAX_CAPTURE_VALUES} JSON values, more than any capture \
         (parsed, each costs memory)"
    )]
    TooManyValues { path: String },
    /// Answers no machine could give: judging them would only judge the
    /// file (and a file that claims 10,000 GPUs costs gigabytes to judge).
    #[error("{path} describes no real machine: {detail}")]
    Impossible { path: String, detail: String },
}

impl Capture {
    /// Read a capture document; `path` is only for the messages.
    pub fn parse(path: &str, text: &str) -> Result<Capture, CaptureError> {
        if json_values_over(text, MAX_CAPTURE_VALUES) {
            return Err(CaptureError::TooManyValues {
                path: path.to_string(),
            });
        }
        let doc: Value = serde_json::from_str(text).map_err(|e| CaptureError::NotJson {
            path: path.to_string(),
            detail: e.to_string(),
        })?;
        let Some(version) = doc.get("capture_version") else {
            return Err(CaptureError::NotACapture {
                path: path.to_string(),
            });
        };
        if version.as_u64() != Some(u64::from(CAPTURE_VERSION)) {
            return Err(CaptureError::Version {
                path: path.to_string(),
                found: version.to_string(),
                ours: env!("CARGO_PKG_VERSION").to_string(),
                by: doc
                    .get("gpucheck_version")
                    .and_then(Value::as_str)
                    .map_or_else(
                        || "an unknown version".to_string(),
                        |v| format!("gpucheck {v}"),
                    ),
            });
        }
        let capture: Capture =
            serde_json::from_value(doc).map_err(|e| CaptureError::Malformed {
                path: path.to_string(),
                detail: e.to_string(),
            })?;
        match capture.impossible() {
            Some(detail) => Err(CaptureError::Impossible {
                path: path.to_string(),
                detail,
            }),
            None => Ok(capture),
        }
    }

    /// What no real machine could have answered, if anything: more GPUs
    /// than one node holds ([`MAX_GPUS_PER_NODE`]), or GPU counts that
    /// disagree between answers that describe the same GPUs (NVML's
    /// per-GPU answers each hold one entry per GPU its inventory
    /// described; the machine line names the same GPUs).
    pub fn impossible(&self) -> Option<String> {
        let m = &self.machine;
        let most = MAX_GPUS_PER_NODE;
        let limit =
            format!("one machine holds at most {most} (the NVIDIA driver's NV_MAX_DEVICES)");
        if m.gpus.len() > most {
            return Some(format!("its machine has {} GPUs; {limit}", m.gpus.len()));
        }
        if !m.gpu_uuids.is_empty() && m.gpu_uuids.len() != m.gpus.len() {
            return Some(format!(
                "its machine names {} GPU models but {} GPU UUIDs",
                m.gpus.len(),
                m.gpu_uuids.len()
            ));
        }
        // GPUs per NVML library the probes asked (the key's argument).
        let mut described: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
        let mut per_gpu: Vec<(&str, &str, usize)> = Vec::new();
        for (key, answer) in &self.answers {
            if key.starts_with("kernel_log::") {
                // Xids name their GPU by PCI slot: one boot of one machine
                // logs them for at most as many GPUs as it holds.
                let events = answer.pointer("/Ok/events").and_then(Value::as_array);
                let slots: std::collections::BTreeSet<String> = events
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.get("slot").map(Value::to_string))
                    .collect();
                if slots.len() > most {
                    return Some(format!(
                        "its kernel log has Xids of {} GPUs; {limit}",
                        slots.len()
                    ));
                }
                continue;
            }
            let Some(rest) = key.strip_prefix("nvml::") else {
                continue;
            };
            let (entry, lib) = match rest.split_once('(') {
                Some((e, l)) => (e, l.strip_suffix(')').unwrap_or(l)),
                None => (rest, ""),
            };
            let Some(ok) = answer.get("Ok") else {
                continue;
            };
            let lists: Vec<(&str, usize)> = match ok {
                Value::Array(list) => vec![("GPUs", list.len())],
                Value::Object(o) if entry == "topology" => ["gpus", "nvlinks"]
                    .into_iter()
                    .filter_map(|f| Some((f, o.get(f)?.as_array()?.len())))
                    .collect(),
                _ => continue,
            };
            for (what, n) in lists {
                if n > most {
                    let what = if what == "nvlinks" {
                        "GPUs' NVLinks"
                    } else {
                        "GPUs"
                    };
                    return Some(format!("its NVML {entry} answer lists {n} {what}; {limit}"));
                }
            }
            if entry == "inventory" {
                let Value::Array(list) = ok else { continue };
                let found = list.iter().filter(|g| g.get("Ok").is_some()).count();
                described.insert(lib, (found, list.len()));
            } else if entry == "topology" {
                let gpus = ok.get("gpus").and_then(Value::as_array).map_or(0, Vec::len);
                per_gpu.push(("topology", lib, gpus));
                if let Some(links) = ok.get("nvlinks").and_then(Value::as_array) {
                    if links.len() != gpus {
                        return Some(format!(
                            "its NVML topology answer has NVLinks for {} GPUs but names {gpus}",
                            links.len()
                        ));
                    }
                }
                if let Some(pairs) = ok.get("pairs").and_then(Value::as_array) {
                    let most_pairs = gpus * gpus.saturating_sub(1) / 2;
                    if pairs.len() > most_pairs {
                        return Some(format!(
                            "its NVML topology answer has {} GPU pairs among {gpus} GPUs, \
                             which have {most_pairs}",
                            pairs.len()
                        ));
                    }
                }
            } else if let Value::Array(list) = ok {
                per_gpu.push((entry, lib, list.len()));
            }
        }
        // A GPU NVML lost is an error in the inventory; the per-GPU answers
        // list it (as an error) or leave it out.
        for (entry, lib, n) in per_gpu {
            match described.get(lib) {
                Some(&(found, listed)) if n != found && n != listed => {
                    return Some(format!(
                        "its NVML {entry} answer describes {n} GPUs, its inventory {listed}"
                    ))
                }
                _ => {}
            }
        }
        if !m.gpus.is_empty() && described.len() == 1 {
            let found = described.values().next().map_or(0, |&(found, _)| found);
            if found != m.gpus.len() {
                return Some(format!(
                    "its machine has {} GPUs, its NVML inventory {found}",
                    m.gpus.len()
                ));
            }
        }
        None
    }

    /// The document as a file holds it: pretty JSON and a final newline.
    pub fn to_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// True when `text` (JSON) holds more than `max` values, counted without
/// parsing: every value but the first follows a `,` or opens a list or an
/// object, so those outside strings bound the count from above.
fn json_values_over(text: &str, max: usize) -> bool {
    let mut count = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b'[' | b'{' => {
                count += 1;
                if count > max {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// The JSON Schema of the capture document, as committed.
pub fn schema() -> String {
    let schema = schemars::schema_for!(Capture);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../schema/capture.schema.json");

    fn sample() -> Capture {
        Capture {
            capture_version: CAPTURE_VERSION,
            gpucheck_version: "0.1.0".into(),
            profile: Profile::Quick,
            captured_at_unix: 1_790_000_000,
            redacted: false,
            machine: Machine {
                hostname: "gpu-001".into(),
                ..Machine::default()
            },
            options: Options::default(),
            answers: Answers::from([("env(RANK)".to_string(), Value::from("0"))]),
        }
    }

    #[test]
    fn capture_schema_file_is_up_to_date() {
        let fresh = schema();
        if std::env::var_os("GPUCHECK_UPDATE_SCHEMA").is_some() {
            std::fs::write(SCHEMA_FILE, &fresh).expect("write schema/capture.schema.json");
            return;
        }
        let committed = std::fs::read_to_string(SCHEMA_FILE).unwrap_or_default();
        assert!(
            committed == fresh,
            "schema/capture.schema.json differs from checks/src/seam/capture.rs; if the change \
             is intended, run `GPUCHECK_UPDATE_SCHEMA=1 cargo test capture_schema_file` (and \
             bump CAPTURE_VERSION when an older gpucheck could not read the new document)"
        );
    }

    #[test]
    fn a_capture_reads_back_as_written() {
        let c = sample();
        assert_eq!(Capture::parse("c.json", &c.to_text()), Ok(c));
    }

    #[test]
    fn another_version_is_refused_naming_both() {
        let text = sample()
            .to_text()
            .replace("\"capture_version\": 1", "\"capture_version\": 99");
        let err = Capture::parse("old.json", &text).unwrap_err().to_string();
        assert!(err.contains("old.json has capture_version 99"), "{err}");
        assert!(err.contains("reads capture_version 1"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    /// A capture of `n` GPUs: the machine line, NVML's inventory and one
    /// per-GPU answer.
    fn of_gpus(n: usize) -> Capture {
        let mut c = sample();
        c.machine.gpus = vec!["NVIDIA H100 80GB HBM3".into(); n];
        c.machine.gpu_uuids = (0..n).map(|i| format!("GPU-{i}")).collect();
        let gpu = serde_json::json!({"Ok": {"index": 0, "name": "NVIDIA H100 80GB HBM3"}});
        c.answers.insert(
            "nvml::inventory(lib)".into(),
            serde_json::json!({ "Ok": vec![gpu; n] }),
        );
        c.answers.insert(
            "nvml::ecc(lib)".into(),
            serde_json::json!({ "Ok": vec![serde_json::json!({"facts": {}}); n] }),
        );
        c
    }

    fn refusal(c: &Capture) -> String {
        Capture::parse("c.json", &c.to_text())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_capture_of_a_real_machine_is_no_impossible_one() {
        for n in [0, 1, 8, MAX_GPUS_PER_NODE] {
            assert_eq!(of_gpus(n).impossible(), None, "{n} GPUs");
        }
    }

    #[test]
    fn more_gpus_than_a_node_holds_is_refused_naming_the_bound() {
        assert_eq!(
            refusal(&of_gpus(10_000)),
            "c.json describes no real machine: its machine has 10000 GPUs; one machine holds at \
             most 32 (the NVIDIA driver's NV_MAX_DEVICES)"
        );
        let mut c = of_gpus(8);
        c.answers.insert(
            "nvml::inventory(lib)".into(),
            serde_json::json!({ "Ok": vec![serde_json::json!({"Ok": {}}); 33] }),
        );
        assert!(refusal(&c).ends_with(
            "its NVML inventory answer lists 33 GPUs; one machine holds at most 32 (the NVIDIA \
             driver's NV_MAX_DEVICES)"
        ));
    }

    #[test]
    fn xids_of_more_gpus_than_a_node_holds_are_refused() {
        let mut c = of_gpus(8);
        let events = |n: u32| -> Vec<Value> {
            (0..n)
                .map(|bus| serde_json::json!({"code": 79, "slot": {"bus": bus, "device": 0, "domain": 0}}))
                .collect()
        };
        c.answers.insert(
            "kernel_log::read_kernel_log".into(),
            serde_json::json!({"Ok": {"events": events(32)}}),
        );
        assert_eq!(c.impossible(), None);
        c.answers.insert(
            "kernel_log::read_kernel_log".into(),
            serde_json::json!({"Ok": {"events": events(40_000)}}),
        );
        assert!(refusal(&c).ends_with(
            "its kernel log has Xids of 40000 GPUs; one machine holds at most 32 (the NVIDIA \
             driver's NV_MAX_DEVICES)"
        ));
    }

    #[test]
    fn counts_that_disagree_between_answers_are_refused_naming_both() {
        let mut c = of_gpus(8);
        c.answers.insert(
            "nvml::ecc(lib)".into(),
            serde_json::json!({ "Ok": vec![serde_json::json!({"facts": {}}); 7] }),
        );
        assert_eq!(
            refusal(&c),
            "c.json describes no real machine: its NVML ecc answer describes 7 GPUs, its \
             inventory 8"
        );
        let mut c = of_gpus(8);
        c.machine.gpus.pop();
        assert!(refusal(&c).ends_with("its machine names 7 GPU models but 8 GPU UUIDs"));
        let mut c = of_gpus(8);
        c.machine.gpus.pop();
        c.machine.gpu_uuids.pop();
        assert!(refusal(&c).ends_with("its machine has 7 GPUs, its NVML inventory 8"));
        // A GPU NVML lost is in the inventory as an error, and in the other
        // answers as one or not at all: no disagreement.
        let mut c = of_gpus(7);
        c.answers
            .get_mut("nvml::inventory(lib)")
            .and_then(|v| v["Ok"].as_array_mut())
            .unwrap()
            .push(serde_json::json!({"Err": "GpuIsLost"}));
        assert_eq!(c.impossible(), None);
        c.answers
            .get_mut("nvml::ecc(lib)")
            .and_then(|v| v["Ok"].as_array_mut())
            .unwrap()
            .push(serde_json::json!({"Err": "GpuIsLost"}));
        assert_eq!(c.impossible(), None);
    }

    #[test]
    fn values_are_counted_outside_strings_without_parsing() {
        assert!(!json_values_over(r#"{"a": [1, 2, 3]}"#, 5));
        assert!(json_values_over(r#"{"a": [1, 2, 3], "b": 4}"#, 5));
        assert!(!json_values_over(r#"{"a": "x,y,[z]{\",\\"}"#, 2));
        let many = format!("[{}0]", "0,".repeat(MAX_CAPTURE_VALUES));
        let err = Capture::parse("n.json", &many).unwrap_err().to_string();
        assert_eq!(
            err,
            "n.json holds more than 6000000 JSON values, more than any capture (parsed, each \
             costs memory)"
        );
    }

    #[test]
    fn a_report_or_garbage_is_refused_in_one_line() {
        let report = r#"{"format_version": 2, "results": []}"#;
        assert_eq!(
            Capture::parse("r.json", report).unwrap_err().to_string(),
            "r.json is not a gpucheck capture (no capture_version)"
        );
        let err = Capture::parse("g.json", "{not json")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("g.json is not JSON: "), "{err}");
        let damaged = r#"{"capture_version": 1, "answers": 3}"#;
        let err = Capture::parse("d.json", damaged).unwrap_err().to_string();
        assert!(err.starts_with("d.json is a damaged capture: "), "{err}");
    }
}

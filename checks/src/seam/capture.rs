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
}

impl Capture {
    /// Read a capture document; `path` is only for the messages.
    pub fn parse(path: &str, text: &str) -> Result<Capture, CaptureError> {
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
        serde_json::from_value(doc).map_err(|e| CaptureError::Malformed {
            path: path.to_string(),
            detail: e.to_string(),
        })
    }

    /// The document as a file holds it: pretty JSON and a final newline.
    pub fn to_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }
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

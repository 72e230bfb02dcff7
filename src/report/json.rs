//! The JSON report: one pretty-printed document, `format_version` first, for
//! pipelines and dashboards. Its JSON Schema is generated from the very types
//! serialised here ([`Run`] and what it holds) and committed as
//! `schema/report.schema.json`; a test fails when the two drift apart, and the
//! integration tests validate real `gpucheck --json` output against it.
//! Regenerate it with `GPUCHECK_UPDATE_SCHEMA=1 cargo test schema_file`.
//!
//! Strings are emitted as they are (serde_json escapes control characters),
//! so a consumer sees exactly what a check found, hostile bytes included.

use gpucheck_checks::domain::action::Action;
use schemars::JsonSchema;
use serde::Serialize;

use super::{Reporter, Run};

pub struct Json;

/// The document: the run, every result with its repair action, and the
/// run's most drastic action after the results.
#[derive(Serialize, JsonSchema)]
#[schemars(title = "gpucheck report")]
struct Document {
    #[serde(flatten)]
    run: Run,
    /// The most drastic repair action of any result (`none` when nothing
    /// warned or failed), least to most drastic: `none`, `fix_config`,
    /// `fix_install`, `restart_job`, `reset_gpu`, `reboot_node`,
    /// `service_hardware`, `contact_provider`.
    action: Action,
}

impl Reporter for Json {
    fn render(&self, run: &Run) -> String {
        let run = run.with_actions();
        let doc = Document {
            action: run.action(),
            run,
        };
        // Serialising plain data with string keys cannot fail.
        let mut s = serde_json::to_string_pretty(&doc).unwrap_or_else(|e| {
            format!(
                "{{\"format_version\":{},\"error\":\"{e}\"}}",
                super::FORMAT_VERSION
            )
        });
        s.push('\n');
        s
    }
}

/// The JSON Schema of the report, generated from the types.
#[cfg(test)]
pub fn schema() -> String {
    let schema = schemars::schema_for!(Document);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;
    use serde_json::{json, Value};

    const SCHEMA_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/report.schema.json");

    fn errors_against_schema(doc: &Value) -> Vec<String> {
        let schema: Value = serde_json::from_str(&schema()).expect("generated schema is JSON");
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        validator.iter_errors(doc).map(|e| e.to_string()).collect()
    }

    fn rendered(run: &Run) -> Value {
        serde_json::from_str(&Json.render(run)).expect("the report is JSON")
    }

    #[test]
    fn schema_file_is_up_to_date() {
        let fresh = schema();
        if std::env::var_os("GPUCHECK_UPDATE_SCHEMA").is_some() {
            std::fs::write(SCHEMA_FILE, &fresh).expect("write schema/report.schema.json");
            return;
        }
        let committed = std::fs::read_to_string(SCHEMA_FILE).unwrap_or_default();
        assert!(
            committed == fresh,
            "schema/report.schema.json differs from the types in src/report; if the change is \
             intended, run `GPUCHECK_UPDATE_SCHEMA=1 cargo test schema_file` (and bump \
             FORMAT_VERSION when it is incompatible)"
        );
    }

    #[test]
    fn every_status_validates_and_keeps_run_order() {
        let run = fixtures::every_status();
        let doc = rendered(&run);
        assert_eq!(errors_against_schema(&doc), Vec::<String>::new());
        let ids: Vec<&str> = doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            [
                "gpu.topology",
                "gpu.ecc",
                "host.shm",
                "nccl.allreduce",
                "net.master_port"
            ]
        );
        // The outcome is flattened into each result, not nested.
        let ecc = &doc["results"][1];
        assert_eq!(ecc["status"], "fail");
        assert_eq!(ecc["metrics"][0]["name"], "ecc_uncorrectable");
        assert_eq!(ecc["devices"][1]["status"], "fail");
        assert!(ecc.get("outcome").is_none());
        assert_eq!(doc["results"][0]["tables"][0]["header"][1], "GPU0");
        assert_eq!(doc["counts"]["total"], 5);
        assert_eq!(doc["exit_code"], 1);
        // format_version leads the document, so `head` shows it.
        assert!(Json.render(&run).starts_with("{\n  \"format_version\": 3,"));
        // The failed ECC check names its default action, the run its most
        // drastic one; a pass names none.
        assert_eq!(ecc["action"], "reset_gpu");
        assert_eq!(ecc["action_gpus"], json!([1]));
        assert_eq!(doc["results"][2]["action"], "fix_config");
        assert!(doc["results"][0].get("action").is_none());
        assert_eq!(doc["action"], "reset_gpu");
    }

    #[test]
    fn hostile_strings_round_trip_exactly() {
        let run = fixtures::hostile();
        let text = Json.render(&run);
        // Control characters are escaped, never raw (a raw ESC would recolour a terminal).
        assert!(!text.contains('\u{1b}') && !text.contains('\u{1}'));
        assert!(text.contains("\\u001b[31m"));
        let doc: Value = serde_json::from_str(&text).expect("hostile report is still JSON");
        assert_eq!(errors_against_schema(&doc), Vec::<String>::new());
        let back: Run = serde_json::from_value(doc).expect("deserialises into a Run");
        assert_eq!(back, run.with_actions());
    }

    #[test]
    fn schema_rejects_documents_missing_what_consumers_rely_on() {
        let good = rendered(&fixtures::every_status());
        let broken = |f: &dyn Fn(&mut Value)| {
            let mut d = good.clone();
            f(&mut d);
            errors_against_schema(&d)
        };
        let cases: Vec<(&str, Vec<String>)> = vec![
            (
                "no status",
                broken(&|d| {
                    d["results"][0].as_object_mut().unwrap().remove("status");
                }),
            ),
            (
                "unknown status",
                broken(&|d| d["results"][0]["status"] = json!("ok")),
            ),
            (
                "no summary",
                broken(&|d| {
                    d["results"][1].as_object_mut().unwrap().remove("summary");
                }),
            ),
            (
                "no duration",
                broken(&|d| {
                    d["results"][1]
                        .as_object_mut()
                        .unwrap()
                        .remove("duration_ms");
                }),
            ),
            (
                "bad id",
                broken(&|d| d["results"][0]["id"] = json!("GPU ecc")),
            ),
            ("format 1", broken(&|d| d["format_version"] = json!(1))),
            ("exit 3", broken(&|d| d["exit_code"] = json!(3))),
            (
                "no counts",
                broken(&|d| {
                    d.as_object_mut().unwrap().remove("counts");
                }),
            ),
            (
                "metric without unit",
                broken(&|d| {
                    d["results"][1]["metrics"][0]
                        .as_object_mut()
                        .unwrap()
                        .remove("unit");
                }),
            ),
            (
                "no host",
                broken(&|d| {
                    d.as_object_mut().unwrap().remove("host");
                }),
            ),
        ];
        for (what, errors) in cases {
            assert!(
                !errors.is_empty(),
                "the schema accepts a report with {what}"
            );
        }
    }
}

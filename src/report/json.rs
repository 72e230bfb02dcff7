//! The JSON report: one document, `format_version` first, validated in the
//! tests against the committed schema (schema/report.schema.json).

use super::{Reporter, Run};

pub struct Json;

impl Reporter for Json {
    fn render(&self, run: &Run) -> String {
        // Serialising plain data with string keys cannot fail.
        let mut s = serde_json::to_string_pretty(run).unwrap_or_else(|e| {
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
    let schema = schemars::schema_for!(Run);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

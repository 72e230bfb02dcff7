//! Reporters: each is a pure render of a whole [`Run`] into text. Writing
//! files or stdout is the caller's job (`main`), so several reporters can run
//! at once and none of them ever probes the machine.

use gpucheck_checks::probe::system::HostFacts;
use gpucheck_checks::{Outcome, Profile, Status};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod json;
pub mod junit;
pub mod table;

/// Version of the JSON report layout. Bump on any incompatible change.
pub const FORMAT_VERSION: u32 = 1;

/// One check's result in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckResult {
    pub id: String,
    pub title: String,
    pub group: String,
    pub profile: Profile,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Verdict counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Counts {
    pub pass: u32,
    pub warn: u32,
    pub fail: u32,
    pub skip: u32,
    pub error: u32,
    pub total: u32,
}

/// A whole run: what every reporter renders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Run {
    pub format_version: u32,
    pub tool: String,
    pub tool_version: String,
    pub profile: Profile,
    pub strict: bool,
    /// Seconds since the Unix epoch when the run started.
    pub started_at_unix: u64,
    pub duration_ms: f64,
    pub host: HostFacts,
    pub results: Vec<CheckResult>,
    pub counts: Counts,
    /// Set when SIGINT/SIGTERM stopped the run early ("SIGINT").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// The exit code gpucheck returns for this run: 0, 1 or 2.
    pub exit_code: i32,
}

impl Run {
    /// Count verdicts.
    pub fn count(results: &[CheckResult]) -> Counts {
        let mut c = Counts::default();
        for r in results {
            match r.outcome.status {
                Status::Pass => c.pass += 1,
                Status::Warn => c.warn += 1,
                Status::Fail => c.fail += 1,
                Status::Skip => c.skip += 1,
                Status::Error => c.error += 1,
            }
            c.total += 1;
        }
        c
    }

    /// The exit code the results call for (0 or 1).
    pub fn exit_code_for(counts: &Counts, strict: bool) -> i32 {
        if counts.fail > 0 || counts.error > 0 || (strict && counts.warn > 0) {
            1
        } else {
            0
        }
    }

    /// The groups in run order, each with its results.
    pub fn groups(&self) -> Vec<(&str, Vec<&CheckResult>)> {
        let mut out: Vec<(&str, Vec<&CheckResult>)> = Vec::new();
        for r in &self.results {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, v)) => v.push(r),
                None => out.push((r.group.as_str(), vec![r])),
            }
        }
        out
    }

    /// The one-line verdict every format ends with.
    pub fn verdict_line(&self) -> String {
        let c = &self.counts;
        let head = match self.exit_code {
            0 if c.warn > 0 => "READY (with warnings)",
            0 => "READY",
            _ if c.fail == 0 && c.error == 0 => "NOT READY (warnings under --strict)",
            _ => "NOT READY",
        };
        let mut line = format!(
            "{head}: {} passed, {} warned, {} failed, {} errors, {} skipped in {:.2} s",
            c.pass,
            c.warn,
            c.fail,
            c.error,
            c.skip,
            self.duration_ms / 1000.0
        );
        if let Some(sig) = &self.interrupted {
            line.push_str(&format!(" (interrupted by {sig})"));
        }
        if self.exit_code != 0 {
            let firsts: Vec<&str> = self
                .results
                .iter()
                .filter(|r| {
                    r.outcome.status.is_failure()
                        || (self.strict && r.outcome.status == Status::Warn)
                })
                .map(|r| r.id.as_str())
                .take(4)
                .collect();
            if !firsts.is_empty() {
                line.push_str(&format!(" — see {}", firsts.join(", ")));
            }
        }
        line
    }
}

/// A report format: a pure function of the run.
pub trait Reporter {
    fn render(&self, run: &Run) -> String;
}

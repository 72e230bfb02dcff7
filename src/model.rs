//! The model of a run: what the runner produces and every reporter reads.
//! Plain data only: nothing here probes the machine or writes anywhere, and
//! the JSON report is this model serialised (its schema is generated from
//! these types).

use gpucheck_checks::domain::action::Action;
use gpucheck_checks::domain::text::{list_cut, seconds};
use gpucheck_checks::{Cause, Outcome, Profile, Status};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Version of the JSON report layout. Bump on any incompatible change.
/// 2: a result's `facts` carry counts and yes/no as JSON numbers and
/// booleans (1 had every fact as a string).
/// 3: every warn, fail and error result carries a repair `action` (with
/// `action_gpus` / `action_port`), and the report the run's most drastic
/// `action` at top level.
pub const FORMAT_VERSION: u32 = 3;

/// One check's result in a run: the check's identity followed by its outcome
/// (status, summary, hint, metrics, devices, facts, tables, duration_ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = duration_is_required)]
pub struct CheckResult {
    /// Stable dotted id, `group.name` (`gpu.ecc`); `--only`/`--skip` take it.
    #[schemars(regex(pattern = r"^[a-z0-9_]+\.[a-z0-9_]+$"))]
    pub id: String,
    pub title: String,
    /// The part of the id before the dot (`gpu`).
    pub group: String,
    /// The lowest profile that includes the check.
    pub profile: Profile,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// `Outcome::duration_ms` has a serde default (a check's own Outcome has no
/// duration until the runner stamps it), so schemars leaves it optional; in a
/// report it is always there, so the schema requires it.
fn duration_is_required(schema: &mut schemars::Schema) {
    if let Some(serde_json::Value::Array(required)) = schema.get_mut("required") {
        let field = serde_json::Value::from("duration_ms");
        if !required.contains(&field) {
            required.push(field);
        }
    }
}

/// The verdict names at most this many checks to look at, then "and N more".
const SEE_MAX: usize = 4;

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

/// A whole gpucheck run: what every reporter renders, and the document
/// `gpucheck --json` writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "gpucheck report")]
pub struct Run {
    /// Version of this layout; bumped on any incompatible change.
    #[schemars(extend("const" = FORMAT_VERSION))]
    pub format_version: u32,
    /// Always "gpucheck".
    #[schemars(extend("const" = "gpucheck"))]
    pub tool: String,
    pub tool_version: String,
    /// The profile that selected the checks.
    pub profile: Profile,
    /// The `--only` patterns that chose the checks in place of the
    /// profile's list (absent: the profile's checks ran).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
    /// Whether warnings count as failures (`--strict`).
    pub strict: bool,
    /// Seconds since the Unix epoch when the run started.
    pub started_at_unix: u64,
    /// Wall time of the whole run in milliseconds.
    pub duration_ms: f64,
    pub host: HostFacts,
    /// One entry per selected check, in run order.
    pub results: Vec<CheckResult>,
    pub counts: Counts,
    /// Set when a stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1...)
    /// stopped the run early ("SIGINT").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// The checks whose skip kept the run from being ready: those named by
    /// their exact id with `--only`, or every check when all of them
    /// skipped. A gate never says ready about a check it did not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<String>,
    /// The exit code gpucheck returns for this run: 0, 1 or 2.
    #[schemars(range(min = 0, max = 2))]
    pub exit_code: i32,
}

impl Run {
    /// The run with every result's repair action resolved (see
    /// [`Outcome::resolve_action`]); a result that failed because another
    /// did (`same cause`) takes that check's action and GPUs. Every
    /// reporter renders this.
    pub fn with_actions(&self) -> Run {
        let mut run = self.clone();
        for r in &mut run.results {
            r.outcome.resolve_action(&r.id);
        }
        let resolved = run.results.clone();
        for r in &mut run.results {
            let Some(Cause::SameCause { check }) = &r.outcome.cause else {
                continue;
            };
            let Some(origin) = resolved.iter().find(|o| &o.id == check) else {
                continue;
            };
            if r.outcome.status >= Status::Warn && origin.outcome.action.is_some() {
                r.outcome.action = origin.outcome.action;
                r.outcome.action_gpus = origin.outcome.action_gpus.clone();
                r.outcome.action_port = origin.outcome.action_port.clone();
            }
        }
        run
    }

    /// The most drastic repair action of the run (`none` when nothing
    /// warned or failed): what a drain policy reads.
    pub fn action(&self) -> Action {
        self.with_actions()
            .results
            .iter()
            .filter_map(|r| r.outcome.action)
            .max()
            .unwrap_or_default()
    }

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
        // A health check answers "is the hardware still healthy?", a job
        // run "is something wrong with this job?", the other profiles "is
        // it ready for a job?".
        let (yes, no) = match self.profile {
            Profile::Health => ("HEALTHY", "NOT HEALTHY"),
            // A job is judged, not readied: did its dumps name a problem?
            Profile::Job => ("NO PROBLEM FOUND", "PROBLEM FOUND"),
            _ => ("READY", "NOT READY"),
        };
        let head = match self.exit_code {
            0 if c.warn > 0 => format!("{yes} (with warnings)"),
            0 => yes.to_string(),
            _ if c.fail == 0 && c.error == 0 && !self.unverified.is_empty() => {
                format!(
                    "{no} (not verified: {})",
                    list_cut(&self.unverified, SEE_MAX)
                )
            }
            _ if c.fail == 0 && c.error == 0 => format!("{no} (warnings under --strict)"),
            _ => no.to_string(),
        };
        let reason = match self.profile {
            Profile::Health => self.hang_reason(),
            _ => None,
        };
        let mut line = format!(
            "{head}: {}{} passed, {} warned, {} failed, {} {}, {} skipped in {:.2} s",
            reason
                .as_ref()
                .map(|(text, _)| format!("{text}; "))
                .unwrap_or_default(),
            c.pass,
            c.warn,
            c.fail,
            c.error,
            if c.error == 1 { "error" } else { "errors" },
            c.skip,
            self.duration_ms / 1000.0
        );
        if let Some(sig) = &self.interrupted {
            line.push_str(&format!(" (interrupted by {sig})"));
        }
        if self.exit_code != 0 {
            // The check that hung first leads: the reason names it.
            let hung = reason.as_ref().map(|(_, id)| *id);
            let failing: Vec<&str> = self
                .results
                .iter()
                .filter(|r| {
                    r.outcome.status.is_failure()
                        || (self.strict && r.outcome.status == Status::Warn)
                        || self.unverified.contains(&r.id)
                })
                .map(|r| r.id.as_str())
                .collect();
            // Named in report order. A failure that follows from another's
            // (same cause) is counted, not named: it points at the check
            // that carries the fix, which is named. The check that hung
            // first leads: the reason names it.
            let follows = |id: &str| {
                self.results
                    .iter()
                    .any(|r| r.id == id && matches!(r.outcome.cause, Some(Cause::SameCause { .. })))
            };
            let (mut named, followers): (Vec<&str>, Vec<&str>) =
                failing.iter().partition(|id| !follows(id));
            let followers = if named.is_empty() {
                named = followers;
                Vec::new()
            } else {
                followers
            };
            named.sort_by_key(|id| Some(*id) != hung);
            let more = named.len().saturating_sub(SEE_MAX);
            let firsts: Vec<&str> = named.iter().copied().take(SEE_MAX).collect();
            if !firsts.is_empty() {
                line.push_str(&format!(" — see {}", firsts.join(", ")));
            }
            if more > 0 {
                line.push_str(&format!(" and {more} more"));
            }
            match (followers.len(), named.len()) {
                (0, _) => {}
                (1, 1) => line.push_str(" (1 more failure follows from it)"),
                (1, _) => line.push_str(" (1 more failure follows from these)"),
                (n, 1) => line.push_str(&format!(" ({n} more failures follow from it)")),
                (n, _) => line.push_str(&format!(" ({n} more failures follow from these)")),
            }
        }
        line
    }

    /// The first check that timed out, said as the reason of a verdict
    /// ("NVML did not answer (nvmlInit_v2 hung)"), with its id. Every NVML
    /// function's name starts with `nvml`: such a stage is the driver's.
    fn hang_reason(&self) -> Option<(String, &str)> {
        self.results.iter().find_map(|r| match &r.outcome.cause {
            Some(Cause::TimedOut { after_s, stage }) => {
                let text = match stage {
                    Some(call) if call.starts_with("nvml") => {
                        format!("NVML did not answer ({call} hung)")
                    }
                    Some(stage) => format!("{} did not answer in {stage}", r.id),
                    None => format!("{} did not answer in {} s", r.id, seconds(*after_s)),
                };
                Some((text, r.id.as_str()))
            }
            _ => None,
        })
    }
}

// The host a run happened on, as every report shows it: plain data, filled
// by `main` from the system probe before the checks run.
// (No doc comment: it would change the committed schema's text.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostFacts {
    pub hostname: String,
    /// PRETTY_NAME from /etc/os-release.
    pub os: String,
    /// Kernel release (uname -r).
    pub kernel: String,
    pub arch: String,
    /// CPU model name from /proc/cpuinfo.
    pub cpu: String,
    pub cpu_count: u32,
    pub memory_total_mib: u64,
    /// "docker", "podman", "kubernetes", "containerd", "lxc", or null on bare metal / VM.
    pub container: Option<String>,
}

/// Hand-built runs for the reporters' unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use gpucheck_checks::{DataTable, DeviceResult, Metric};

    /// What a hostile environment can put into a report: C0 controls, an ANSI
    /// escape, a CDATA terminator, markup, both quotes and an XML-forbidden
    /// noncharacter.
    pub const HOSTILE: &str = "\u{1}\u{1b}[31m]]><x>&\"' \u{FFFF}";

    pub fn host() -> HostFacts {
        HostFacts {
            hostname: "gpu-node-7".into(),
            os: "Ubuntu 22.04.4 LTS".into(),
            kernel: "5.15.0-105-generic".into(),
            arch: "x86_64".into(),
            cpu: "AMD EPYC 9654 96-Core Processor".into(),
            cpu_count: 192,
            memory_total_mib: 2_063_000,
            container: Some("docker".into()),
        }
    }

    pub fn result(id: &str, profile: Profile, outcome: Outcome) -> CheckResult {
        CheckResult {
            id: id.into(),
            title: format!("title of {id}"),
            group: id.split('.').next().unwrap_or(id).into(),
            profile,
            outcome,
        }
    }

    pub fn run(results: Vec<CheckResult>, strict: bool) -> Run {
        let counts = Run::count(&results);
        Run {
            format_version: FORMAT_VERSION,
            tool: "gpucheck".into(),
            tool_version: "0.1.0".into(),
            profile: Profile::Standard,
            only: Vec::new(),
            strict,
            started_at_unix: 1_767_225_600, // 2026-01-01T00:00:00Z
            duration_ms: 1234.5,
            host: host(),
            exit_code: Run::exit_code_for(&counts, strict),
            results,
            counts,
            interrupted: None,
            unverified: Vec::new(),
        }
    }

    /// `nvidia-smi topo -m` for two GPUs, as the NVML check reports it.
    pub fn topology() -> DataTable {
        DataTable {
            title: "GPU topology".into(),
            header: ["", "GPU0", "GPU1", "CPU Affinity", "NUMA Affinity"]
                .map(String::from)
                .to_vec(),
            rows: vec![
                ["GPU0", " X ", "NV18", "0-95", "0"]
                    .map(String::from)
                    .to_vec(),
                ["GPU1", "NV18", " X ", "0-95", "0"]
                    .map(String::from)
                    .to_vec(),
            ],
            legend: Some(
                "X    = Self\nNV#  = Connection traversing a bonded set of # NVLinks".into(),
            ),
        }
    }

    /// One check of every verdict, in three groups, with the data a real
    /// run carries (metrics, facts, devices, a topology matrix).
    pub fn every_status() -> Run {
        let gpu0 = DeviceResult {
            index: 0,
            label: None,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: Some("GPU-0aa".into()),
            status: Status::Pass,
            summary: "ECC on, 0 uncorrectable".into(),
            metrics: vec![Metric {
                name: "ecc_uncorrectable".into(),
                value: 0.0,
                unit: "count".into(),
            }],
        };
        let gpu1 = DeviceResult {
            index: 1,
            label: None,
            status: Status::Fail,
            summary: "3 uncorrectable ECC errors".into(),
            uuid: None,
            metrics: vec![Metric {
                name: "ecc_uncorrectable".into(),
                value: 3.0,
                unit: "count".into(),
            }],
            ..gpu0.clone()
        };
        run(
            vec![
                result(
                    "gpu.topology",
                    Profile::Quick,
                    Outcome::pass("2 GPUs, every pair on NVLink").with_table(topology()),
                ),
                result(
                    "gpu.ecc",
                    Profile::Quick,
                    Outcome::fail(
                        "GPU1 has 3 uncorrectable ECC errors",
                        "drain the node and run `nvidia-smi -q -d ECC`; reset with `nvidia-smi -r -i 1`",
                    )
                    .with_metric("ecc_uncorrectable", 3.0, "count")
                    .with_fact("driver", "570.86.15")
                    .with_device(gpu0)
                    .with_device(gpu1),
                ),
                result(
                    "host.shm",
                    Profile::Quick,
                    Outcome::warn(
                        "/dev/shm is 64 MiB",
                        "docker run --shm-size=16g (or --ipc=host)",
                    )
                    .with_metric("shm_size", 64.0, "MiB"),
                ),
                result(
                    "nccl.allreduce",
                    Profile::Standard,
                    Outcome::skip("needs gpu.ecc, which failed"),
                ),
                result(
                    "net.master_port",
                    Profile::Quick,
                    Outcome::error("probe crashed: SIGSEGV"),
                ),
            ],
            false,
        )
    }

    /// Hostile text in every free-text field a reporter renders.
    pub fn hostile() -> Run {
        let mut table = topology();
        table.title = HOSTILE.into();
        table.rows[0][1] = HOSTILE.into();
        table.legend = Some(HOSTILE.into());
        let device = DeviceResult {
            index: 0,
            label: None,
            name: HOSTILE.into(),
            uuid: Some(HOSTILE.into()),
            status: Status::Warn,
            summary: HOSTILE.into(),
            metrics: Vec::new(),
        };
        let mut r = run(
            vec![
                result(
                    "env.torchrun",
                    Profile::Quick,
                    Outcome::fail(HOSTILE, HOSTILE)
                        .with_metric(HOSTILE, 1.5, HOSTILE)
                        .with_fact(HOSTILE, HOSTILE)
                        .with_device(device)
                        .with_table(table),
                ),
                result("env.rank", Profile::Quick, Outcome::warn(HOSTILE, HOSTILE)),
                result("env.skip", Profile::Quick, Outcome::skip(HOSTILE)),
                result(
                    "env.error",
                    Profile::Quick,
                    Outcome::error(HOSTILE).with_hint(HOSTILE),
                ),
            ],
            false,
        );
        r.results[0].title = HOSTILE.into();
        r.host.hostname = HOSTILE.into();
        r.host.os = HOSTILE.into();
        r.host.container = Some(HOSTILE.into());
        r.interrupted = Some(HOSTILE.into());
        r
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{result, run};
    use super::*;

    #[test]
    fn the_verdict_names_independent_failures_in_report_order_and_counts_those_that_follow() {
        let follows = |summary: &str| {
            Outcome::fail(summary, "see host.devices: its fix clears this failure too").with_cause(
                Cause::SameCause {
                    check: "host.devices".into(),
                },
            )
        };
        let r = run(
            vec![
                result(
                    "host.devices",
                    Profile::Quick,
                    Outcome::fail("no nodes", "x"),
                ),
                result("gpu.driver", Profile::Quick, follows("no libnvidia-ml")),
                result("cuda.driver", Profile::Standard, follows("no libcuda")),
                result(
                    "torch.import",
                    Profile::Standard,
                    Outcome::fail("no torch", "x"),
                ),
                result(
                    "nccl.library",
                    Profile::Standard,
                    Outcome::fail("no nccl", "x"),
                ),
            ],
            false,
        );
        assert!(
            r.verdict_line().ends_with(
                "— see host.devices, torch.import, nccl.library (2 more failures follow \
                     from these)"
            ),
            "{}",
            r.verdict_line()
        );
    }
}

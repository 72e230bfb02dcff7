//! The result of one check: a verdict, a one-line summary, a concrete hint, and
//! the numbers and per-GPU rows behind it. Checks build an `Outcome`; the runner
//! stamps its duration; reporters render it. An `Outcome` is plain data so it
//! can cross the process boundary of a child-isolated check as JSON.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::domain::action::{self, Action};
use crate::facts::{Cause, Fact};

/// The verdict of a check.
///
/// `fail` means the machine or environment is wrong; `error` means gpucheck
/// could not find out (a bug, a crash); `warn` means it will work but slower or
/// fragile; `skip` means not applicable or a prerequisite failed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Skip,
    Warn,
    Fail,
    Error,
}

impl Status {
    /// Lower-case name as used in every report.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skip => "skip",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Error => "error",
        }
    }

    /// True for the verdicts that make the exit code 1.
    pub fn is_failure(self) -> bool {
        matches!(self, Status::Fail | Status::Error)
    }

    /// True for the verdicts that let a dependent check run (`needs`).
    pub fn satisfies_needs(self) -> bool {
        matches!(self, Status::Pass | Status::Warn)
    }

    /// The worse of two verdicts (pass < skip < warn < fail < error).
    pub fn worst(self, other: Status) -> Status {
        self.max(other)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named number with its unit, e.g. `busbw` = 431.2 `GB/s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Metric {
    /// snake_case name saying what it is (`busbw_gbps`, `shm_size`).
    pub name: String,
    pub value: f64,
    /// Unit as a person would write it (`GB/s`, `MiB`, `ms`, `%`, `count`).
    pub unit: String,
}

/// A per-GPU (or per-rank) sub-result of a check that looks at each device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceResult {
    /// NVML index of the GPU (or rank, for per-rank results).
    pub index: u32,
    /// How reports name the row ("rank 1", "cuda:0"); `GPU<index>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    pub status: Status,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
}

/// A small table of data that belongs to a check: the GPU topology matrix, the
/// NCCL size sweep. JSON carries it as data; the table reporter draws it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DataTable {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Optional text printed under the table (a legend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legend: Option<String>,
}

/// The value of a report fact: text (versions, paths, lists as people read
/// them), or a number or yes/no that JSON carries with its own type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum FactValue {
    Bool(bool),
    Integer(i64),
    Number(f64),
    Text(String),
}

impl FactValue {
    /// The text, for a textual fact.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FactValue::Text(s) => Some(s),
            _ => None,
        }
    }

    /// A number JSON cannot carry (NaN, infinity) is no fact.
    fn is_finite(&self) -> bool {
        !matches!(self, FactValue::Number(v) if !v.is_finite())
    }
}

/// As the table, JUnit and Markdown show it: the text, or the number or
/// `true`/`false` written out.
impl std::fmt::Display for FactValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FactValue::Bool(b) => write!(f, "{b}"),
            FactValue::Integer(i) => write!(f, "{i}"),
            FactValue::Number(v) => write!(f, "{v}"),
            FactValue::Text(s) => f.write_str(s),
        }
    }
}

impl From<String> for FactValue {
    fn from(s: String) -> Self {
        FactValue::Text(s)
    }
}

impl From<&str> for FactValue {
    fn from(s: &str) -> Self {
        FactValue::Text(s.to_string())
    }
}

impl From<&String> for FactValue {
    fn from(s: &String) -> Self {
        FactValue::Text(s.clone())
    }
}

impl From<bool> for FactValue {
    fn from(b: bool) -> Self {
        FactValue::Bool(b)
    }
}

impl From<f64> for FactValue {
    fn from(v: f64) -> Self {
        FactValue::Number(v)
    }
}

macro_rules! integer_fact {
    ($($t:ty),*) => {$(
        impl From<$t> for FactValue {
            fn from(v: $t) -> Self {
                i64::try_from(v).map_or(FactValue::Number(v as f64), FactValue::Integer)
            }
        }
    )*};
}
integer_fact!(i32, i64, u16, u32, u64, usize);

impl PartialEq<str> for FactValue {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == Some(other)
    }
}

impl PartialEq<&str> for FactValue {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}

/// A collective of a distributed job: the process group, its sequence
/// number there and the op (`all_reduce`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Collective {
    /// The process group's name ("0").
    pub group: String,
    /// Its description ("default_pg"); empty when the dumps give none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group_desc: String,
    /// The collective's sequence number in the group.
    pub seq: u64,
    pub op: String,
}

/// Everything a check found out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Outcome {
    pub status: Status,
    /// One line saying what was found.
    pub summary: String,
    /// What to do about it, concretely: the command, the flag, the package.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The repair action a warn or worse calls for, from the least to the
    /// most drastic: `fix_config`, `fix_install`, `restart_job`,
    /// `reset_gpu`, `reboot_node`, `service_hardware`, `contact_provider`.
    /// Every warn, fail and error of a report carries one; a pass or skip
    /// carries none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// The GPUs (NVML indices) the action applies to; empty when it is
    /// about the node as a whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_gpus: Vec<u32>,
    /// The network port it applies to (`mlx5_0/1`), where it is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_port: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceResult>,
    /// Facts worth keeping in reports: versions and paths as text, counts
    /// and yes/no as JSON numbers and booleans.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub facts: BTreeMap<String, FactValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<DataTable>,
    /// Typed facts this check published for later checks (and for the fleet
    /// checks of `gpucheck cluster`), by [`Fact::KEY`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, serde_json::Value>,
    /// The global ranks a job check names (`gpucheck job`): the ranks at
    /// fault, never the healthy ones; empty for every machine check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<u32>,
    /// The collective a job check's finding is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<Collective>,
    /// Why the runner gave this outcome (a timeout, a signal, a failed
    /// prerequisite); absent when the check itself decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// Wall time of the check in milliseconds, stamped by the runner.
    #[serde(default)]
    pub duration_ms: f64,
}

impl Outcome {
    pub fn new(status: Status, summary: impl Into<String>) -> Self {
        Outcome {
            status,
            summary: summary.into(),
            hint: None,
            action: None,
            action_gpus: Vec::new(),
            action_port: None,
            metrics: Vec::new(),
            devices: Vec::new(),
            facts: BTreeMap::new(),
            tables: Vec::new(),
            data: BTreeMap::new(),
            ranks: Vec::new(),
            collective: None,
            cause: None,
            duration_ms: 0.0,
        }
    }

    pub fn pass(summary: impl Into<String>) -> Self {
        Self::new(Status::Pass, summary)
    }

    pub fn warn(summary: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(Status::Warn, summary).with_hint(hint)
    }

    pub fn fail(summary: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(Status::Fail, summary).with_hint(hint)
    }

    /// Not applicable, or a prerequisite failed; `reason` says which.
    pub fn skip(reason: impl Into<String>) -> Self {
        Self::new(Status::Skip, reason)
    }

    /// gpucheck could not find out.
    pub fn error(summary: impl Into<String>) -> Self {
        Self::new(Status::Error, summary)
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        let hint = hint.into();
        self.hint = if hint.is_empty() { None } else { Some(hint) };
        self
    }

    /// Add a named number. A non-finite value (NaN, infinity) is not a
    /// measurement and is left out: JSON cannot carry it.
    pub fn with_metric(mut self, name: &str, value: f64, unit: &str) -> Self {
        if !value.is_finite() {
            return self;
        }
        self.metrics.push(Metric {
            name: name.to_string(),
            value,
            unit: unit.to_string(),
        });
        self
    }

    /// Add a report fact: text, a count, a number or a yes/no. A
    /// non-finite number is left out, as for metrics.
    pub fn with_fact(mut self, key: &str, value: impl Into<FactValue>) -> Self {
        let value = value.into();
        if value.is_finite() {
            self.facts.insert(key.to_string(), value);
        }
        self
    }

    /// Publish a typed fact for later checks. A fact that cannot be
    /// serialised (never the case for plain structs) is left out.
    pub fn publish<F: Fact>(mut self, fact: &F) -> Self {
        if let Ok(v) = serde_json::to_value(fact) {
            self.data.insert(F::KEY.to_string(), v);
        }
        self
    }

    /// A typed fact this outcome carries.
    pub fn fact<F: Fact>(&self) -> Option<F> {
        self.data
            .get(F::KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }

    /// Name the repair action and the GPUs it applies to.
    pub fn with_action(mut self, action: Action, gpus: Vec<u32>) -> Self {
        self.action = Some(action);
        self.action_gpus = gpus;
        self
    }

    /// Make the action what a report shows for check `check_id`: none for
    /// a pass or skip; for a warn or worse the one the check chose, else
    /// none for a check interrupted before its verdict, else
    /// `reboot_node` for an NVML call that hung (the driver is wedged),
    /// else the check's default, applied to the GPUs whose rows are warn or
    /// worse.
    pub fn resolve_action(&mut self, check_id: &str) {
        if self.status < Status::Warn {
            self.action = None;
            self.action_gpus.clear();
            self.action_port = None;
            return;
        }
        if self.action.is_some() {
            return;
        }
        // Stopped by a signal with no verdict: nothing to repair, run again.
        if self.status == Status::Error && matches!(self.cause, Some(Cause::Interrupted { .. })) {
            self.action = Some(Action::None);
            return;
        }
        let nvml_hung = matches!(
            &self.cause,
            Some(Cause::TimedOut { stage: Some(call), .. }) if call.starts_with("nvml")
        );
        self.action = Some(if nvml_hung {
            Action::RebootNode
        } else {
            action::default_for(check_id)
        });
        if self.action_gpus.is_empty() {
            self.action_gpus = self
                .devices
                .iter()
                .filter(|d| d.status >= Status::Warn && d.label.is_none())
                .map(|d| d.index)
                .collect();
        }
    }

    /// Name the ranks a job check blames and the collective it is about.
    pub fn with_ranks(mut self, ranks: Vec<u32>, collective: Option<Collective>) -> Self {
        self.ranks = ranks;
        self.collective = collective;
        self
    }

    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }

    pub fn with_device(mut self, device: DeviceResult) -> Self {
        self.devices.push(device);
        self
    }

    pub fn with_table(mut self, table: DataTable) -> Self {
        self.tables.push(table);
        self
    }

    /// Leave out every non-finite metric value, the per-device ones
    /// included (built directly, they bypass [`Outcome::with_metric`]): JSON
    /// would carry NaN as `null`, which breaks the report's schema and the
    /// result of a child-isolated check on its way back to the runner.
    pub fn drop_non_finite_metrics(&mut self) {
        self.metrics.retain(|m| m.value.is_finite());
        self.facts.retain(|_, v| v.is_finite());
        for d in &mut self.devices {
            d.metrics.retain(|m| m.value.is_finite());
        }
    }

    /// The value of a metric by name, if present.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_orders_pass_skip_warn_fail_error() {
        assert_eq!(Status::Pass.worst(Status::Warn), Status::Warn);
        assert_eq!(Status::Fail.worst(Status::Warn), Status::Fail);
        assert_eq!(Status::Fail.worst(Status::Error), Status::Error);
        assert_eq!(Status::Skip.worst(Status::Pass), Status::Skip);
    }

    #[test]
    fn outcome_round_trips_through_json() {
        let o = Outcome::fail("x8 of x16", "reseat the card")
            .with_metric("pcie_link_width", 8.0, "lanes")
            .with_fact("driver", "570.86.15");
        let s = serde_json::to_string(&o).unwrap();
        let back: Outcome = serde_json::from_str(&s).unwrap();
        assert_eq!(o, back);
        assert_eq!(back.metric("pcie_link_width"), Some(8.0));
    }

    #[test]
    fn non_finite_metrics_are_left_out() {
        let o = Outcome::pass("x")
            .with_metric("a", f64::NAN, "ms")
            .with_metric("b", f64::INFINITY, "ms")
            .with_metric("c", 1.0, "ms");
        assert_eq!(o.metrics.len(), 1);
        assert!(serde_json::from_str::<Outcome>(&serde_json::to_string(&o).unwrap()).is_ok());
    }

    #[test]
    fn non_finite_device_metrics_are_dropped_before_crossing_json() {
        let metric = |value| Metric {
            name: "busbw".into(),
            value,
            unit: "GB/s".into(),
        };
        let mut o = Outcome::pass("x").with_device(DeviceResult {
            index: 0,
            label: None,
            name: "GPU".into(),
            uuid: None,
            status: Status::Pass,
            summary: "ok".into(),
            metrics: vec![metric(f64::NAN), metric(2.0), metric(f64::NEG_INFINITY)],
        });
        o.metrics.push(metric(f64::INFINITY));
        // As it is, the outcome does not survive a JSON round trip.
        assert!(serde_json::from_str::<Outcome>(&serde_json::to_string(&o).unwrap()).is_err());
        o.drop_non_finite_metrics();
        assert!(o.metrics.is_empty());
        assert_eq!(o.devices[0].metrics, vec![metric(2.0)]);
        let back: Outcome = serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        assert_eq!(back, o);
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct DriverSeen {
        version: String,
        gpus: u32,
    }
    impl Fact for DriverSeen {
        const KEY: &'static str = "test_driver_seen";
    }

    #[test]
    fn published_facts_survive_json_and_are_read_by_type() {
        let fact = DriverSeen {
            version: "570.86.15".into(),
            gpus: 8,
        };
        let o = Outcome::pass("ok").publish(&fact);
        let back: Outcome = serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        assert_eq!(back.fact::<DriverSeen>(), Some(fact));
        assert_eq!(Outcome::pass("x").fact::<DriverSeen>(), None);
    }

    #[test]
    fn facts_keep_their_json_type_and_read_as_text() {
        let o = Outcome::pass("ok")
            .with_fact("driver", "570.86.15")
            .with_fact("device_count", 8u32)
            .with_fact("ratio", 0.5)
            .with_fact("persistence", true)
            .with_fact("nan", f64::NAN);
        let json = serde_json::to_value(&o).unwrap();
        assert_eq!(
            json["facts"],
            serde_json::json!({
                "driver": "570.86.15",
                "device_count": 8,
                "ratio": 0.5,
                "persistence": true
            })
        );
        let back: Outcome = serde_json::from_value(json).unwrap();
        assert_eq!(back, o);
        let shown: Vec<String> = o.facts.values().map(ToString::to_string).collect();
        assert_eq!(shown, ["8", "570.86.15", "true", "0.5"]);
        assert_eq!(o.facts["driver"], "570.86.15");
        // A whole number written as a float stays a float.
        let two: FactValue = serde_json::from_str("2.0").unwrap();
        assert_eq!(two, FactValue::Number(2.0));
        assert_eq!(two.to_string(), "2");
    }

    #[test]
    fn empty_hint_is_none() {
        assert_eq!(Outcome::pass("ok").with_hint("").hint, None);
    }
}

//! Typed facts that one check publishes and later checks read, and the
//! runner's record of why an outcome is what it is.
//!
//! A check that learns something others need (the NVML view of the GPUs, the
//! CUDA driver's version, what torch is) publishes it as a plain serialisable
//! struct implementing [`Fact`]; later checks read it by type with
//! [`crate::Context::fact`]. Facts travel inside the [`crate::Outcome`], so
//! they cross the process boundary of child-isolated checks and land in the
//! JSON report (where the fleet checks of `gpucheck cluster` read them from
//! every node). Report text is derived from facts, never parsed back.

pub mod cuda;
pub mod driver;
pub mod fabric;
pub mod job;
pub mod load;
pub mod nccl;
pub mod nvml;
pub mod torch;
pub mod xid;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A typed fact. `KEY` is its stable name in the outcome's `data` map and in
/// the JSON report.
pub trait Fact: Serialize + DeserializeOwned {
    const KEY: &'static str;
}

/// Why an outcome is what it is, when the runner (not the check) decided it,
/// or when the check's failure follows from an earlier check's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Cause {
    /// The check did not finish within its timeout; `stage` is the last
    /// stage a child-isolated probe announced.
    TimedOut {
        after_s: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stage: Option<String>,
    },
    /// The child-isolated probe was killed by a signal.
    Signal { signal: String },
    /// gpucheck was interrupted while the check ran.
    Interrupted { signal: String },
    /// A check this one needs did not pass or warn.
    NeedsFailed { need: String },
    /// The check panicked or its worker could not be started.
    Internal { message: String },
    /// The failure has the same cause as `check`'s, an earlier check that
    /// carries the fix (no NVIDIA driver reaches this environment).
    SameCause { check: String },
}

impl Cause {
    pub fn is_timeout(&self) -> bool {
        matches!(self, Cause::TimedOut { .. })
    }
}

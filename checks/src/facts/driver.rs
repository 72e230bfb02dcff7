//! The first cause of a node no NVIDIA driver reaches ([`NoDriverHere`]):
//! published by the first check that finds it (host.devices: no device node
//! at all; gpu.driver, cuda.driver: no driver library), read by the later
//! checks that fail for the same reason. One check carries the fix; the
//! others say they follow from it and point to it.

use serde::{Deserialize, Serialize};

use crate::{Cause, Context, Fact, Outcome};

/// No NVIDIA driver reaches this environment: a container given no GPU, or a
/// host without the driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoDriverHere {
    /// The check that found it first; its hint is the fix.
    pub check: String,
    /// What it found, in a few words ("no GPU was passed into this docker
    /// container").
    pub reason: String,
}

impl Fact for NoDriverHere {
    const KEY: &'static str = "no_driver_here";
}

impl NoDriverHere {
    /// The first cause found in this run, if any. Only the first finder
    /// publishes it, so the latest publisher is the first.
    pub fn in_run(ctx: &Context) -> Option<Self> {
        ctx.fact::<Self>()
    }

    /// A later check's failure that follows from this cause: what that check
    /// found, the check that carries the fix, and no fix of its own.
    pub fn follows(&self, found: &str) -> Outcome {
        Outcome::fail(
            format!("{found} — same cause as {} ({})", self.check, self.reason),
            format!("see {}: its fix clears this failure too", self.check),
        )
        .with_cause(Cause::SameCause {
            check: self.check.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    #[test]
    fn a_dependent_names_the_first_cause_and_does_not_repeat_its_fix() {
        let first = NoDriverHere {
            check: "host.devices".into(),
            reason: "no GPU was passed into this docker container".into(),
        };
        let o = first.follows("libcuda.so.1 not found");
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "libcuda.so.1 not found — same cause as host.devices (no GPU was passed into this \
             docker container)"
        );
        assert_eq!(
            o.hint.as_deref(),
            Some("see host.devices: its fix clears this failure too")
        );
        assert_eq!(
            o.cause,
            Some(Cause::SameCause {
                check: "host.devices".into()
            })
        );
    }
}

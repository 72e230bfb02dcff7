//! gpu.throttle: why each GPU's clocks are held down right now (NVML's clock
//! event reasons): hardware slowdown fails, heat and power brakes warn.

use std::time::Duration;

use super::common::{
    judge_answering, lib, lost_in_count, na_row, nothing_counted, nvml_failure_outcome,
    nvml_timeout_hint, open_failures, row, unreadable, QUERY_TIMEOUT,
};
use crate::domain::text::gpu_count;
use crate::findings::Finding;
use crate::probe::nvml::{self, reason, PerGpu, ThrottleFacts};
use crate::{Check, Context, Metric, Outcome, Profile, Status};

const COOLING_HINT: &str = "{gpus} is throttling for heat: check airflow, fans or liquid cooling \
and the inlet temperature (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i {ids}`)";

/// Judge the clock throttle reasons of every GPU.
pub fn evaluate_throttle(gpus: &[PerGpu<ThrottleFacts>]) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    let mut readable = 0;
    let mut idle = 0;
    for g in gpus {
        let i = g.gpu.index;
        let Ok(f) = &g.facts else {
            devices.push(na_row(&g.gpu, &findings));
            continue;
        };
        let bits = match &f.reasons {
            Ok(b) => *b,
            Err(e) => {
                findings
                    .items
                    .extend(unreadable(i, "the throttle reasons", e));
                devices.push(na_row(&g.gpu, &findings));
                continue;
            }
        };
        readable += 1;
        if bits & reason::HW_SLOWDOWN != 0 {
            findings.push(
                Finding::new(
                    Some(i),
                    Status::Fail,
                    "hardware slowdown (clocks cut by half or more)",
                )
                .hint(
                    "{gpus} is in hardware slowdown: check temperatures and power with \
                         `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {ids}`, the cooling, \
                         and the power supply (a PSU or chassis power-brake signal also asserts \
                         it); `sudo dmesg | grep -i xid` may say more",
                ),
            );
        }
        if bits & reason::HW_THERMAL_SLOWDOWN != 0 {
            findings.push(
                Finding::new(Some(i), Status::Warn, "hardware thermal slowdown").hint(COOLING_HINT),
            );
        }
        if bits & reason::SW_THERMAL_SLOWDOWN != 0 {
            findings.push(
                Finding::new(Some(i), Status::Warn, "software thermal slowdown").hint(COOLING_HINT),
            );
        }
        if bits & reason::HW_POWER_BRAKE_SLOWDOWN != 0 {
            findings.push(
                Finding::new(Some(i), Status::Warn, "power brake slowdown").hint(
                    "the system asserted the external power brake on {gpus}: check the power \
                     supplies' health and redundancy and the chassis power policy (the BMC's \
                     event log)",
                ),
            );
        }
        for (bit, note) in [
            (reason::GPU_IDLE, "idle"),
            (
                reason::APPLICATIONS_CLOCKS_SETTING,
                "application clocks set",
            ),
            (reason::SW_POWER_CAP, "at its power cap (normal under load)"),
            (reason::SYNC_BOOST, "sync boost"),
            (reason::DISPLAY_CLOCK_SETTING, "display clock setting"),
        ] {
            if bits & bit != 0 {
                findings.push(Finding::new(Some(i), Status::Pass, note));
            }
        }
        if bits & reason::GPU_IDLE != 0 {
            idle += 1;
        }
        devices.push(findings.device_result(
            row(
                &g.gpu,
                vec![Metric::new("clock_event_reasons", bits as f64, "bitmask")],
            ),
            "no slowdown".into(),
        ));
    }
    if readable == 0 && findings.worst() < Status::Warn {
        let mut o = Outcome::skip("clock throttle reasons not reported by these GPUs (n/a)");
        o.devices = devices;
        return o;
    }
    let pass = if idle > 0 {
        format!("{}: no slowdown ({idle} idle)", gpu_count(readable))
    } else {
        format!("{}: no slowdown", gpu_count(readable))
    };
    findings.conclude(pass, devices)
}

pub struct Throttle;

impl Check for Throttle {
    fn id(&self) -> &'static str {
        "gpu.throttle"
    }
    fn title(&self) -> &'static str {
        "Clock throttling"
    }
    fn health(&self) -> bool {
        true
    }
    fn timeout_stage(&self) -> Option<String> {
        crate::probe::nvml::hung_call().map(str::to_string)
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.driver"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Reads why each GPU's clocks are held below their maximum right now (NVML's clock event reasons).

DDP runs in lockstep: one GPU slowed by heat or power drags every step of every rank down to its \
pace.

Hardware slowdown fails: the board cut its clocks by half or more (overheating, a power-supply or \
chassis power-brake signal). Check `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`, cooling and \
power. Hardware or software thermal slowdown and power-brake slowdown warn: fix airflow and cooling, \
or the power supplies.

Idle, application clocks, the software power cap (normal when the GPU works at its power limit), \
sync boost and display clocks are normal and only noted."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        if let Some(skip) = nothing_counted(ctx) {
            return skip;
        }
        match nvml::throttle(lib(ctx)) {
            Ok(gpus) => judge_answering(gpus, &lost_in_count(ctx), evaluate_throttle),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::testing::*;
    use crate::probe::nvml::{reason, ThrottleFacts, Unavailable};
    use crate::Status;

    fn throttled(bits: u64) -> Outcome {
        evaluate_throttle(&[
            per(
                0,
                ThrottleFacts {
                    reasons: Ok(reason::GPU_IDLE),
                },
            ),
            per(1, ThrottleFacts { reasons: Ok(bits) }),
        ])
    }

    #[test]
    fn idle_and_power_cap_are_normal() {
        let o = throttled(reason::SW_POWER_CAP | reason::APPLICATIONS_CLOCKS_SETTING);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "2 GPUs: no slowdown (1 idle)");
        assert_eq!(
            o.devices[1].summary,
            "no slowdown (application clocks set; at its power cap (normal under load))"
        );
        assert_eq!(o.hint, None);
    }

    #[test]
    fn hardware_slowdown_fails() {
        let o = throttled(reason::HW_SLOWDOWN);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: hardware slowdown (clocks cut by half or more)"
        );
        assert!(hint(&o).contains("nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i 1"));
    }

    #[test]
    fn thermal_and_power_brake_slowdowns_warn() {
        for (bit, text, needle) in [
            (
                reason::HW_THERMAL_SLOWDOWN,
                "hardware thermal slowdown",
                "throttling for heat",
            ),
            (
                reason::SW_THERMAL_SLOWDOWN,
                "software thermal slowdown",
                "throttling for heat",
            ),
            (
                reason::HW_POWER_BRAKE_SLOWDOWN,
                "power brake slowdown",
                "external power brake",
            ),
        ] {
            let o = throttled(bit);
            assert_eq!(o.status, Status::Warn, "{text}");
            assert_eq!(o.summary, format!("GPU 1: {text}"));
            assert!(hint(&o).contains(needle), "{}", hint(&o));
        }
    }

    #[test]
    fn throttle_reasons_not_reported_skip() {
        let o = evaluate_throttle(&[per(
            0,
            ThrottleFacts {
                reasons: Err(Unavailable::NotSupported),
            },
        )]);
        assert_eq!(o.status, Status::Skip);
    }
}

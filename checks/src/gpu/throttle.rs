//! gpu.throttle: why each GPU's clocks are held down right now (NVML's clock
//! event reasons), read again over a second when hardware slowdown shows:
//! lasting hardware slowdown (or with heat or the power brake) fails, a
//! passing one warns, heat and power brakes warn.

use std::time::Duration;

use super::common::{
    judge_answering, lib, lost_in_count, na_row, nothing_counted, nvml_failure_outcome,
    nvml_timeout_hint, open_failures, row, unreadable, QUERY_TIMEOUT,
};
use crate::domain::text::gpu_count;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{self, reason, PerGpu, ThrottleFacts, ThrottleSampling};
use crate::{Check, Context, Metric, Outcome, Profile, Status};

/// How many times the reasons are read when the first reading shows
/// hardware slowdown, and how far apart: five readings over one second.
/// NVML's documentation of nvmlClocksEventReasonHwSlowdown: it "may be also
/// reported during PState or clock change", so one reading proves nothing;
/// a slowdown that is still there a second later is not a clock change.
pub const THROTTLE_SAMPLES: u32 = 5;
pub const THROTTLE_SAMPLE_INTERVAL: Duration = Duration::from_millis(250);

/// What gpu.throttle asks the probe for.
pub fn sampling() -> ThrottleSampling {
    ThrottleSampling {
        samples: THROTTLE_SAMPLES,
        interval: THROTTLE_SAMPLE_INTERVAL,
        again_if: reason::HW_SLOWDOWN,
    }
}

/// Reasons that explain a hardware slowdown: heat or the power brake.
const SLOWDOWN_EVIDENCE: u64 =
    reason::HW_THERMAL_SLOWDOWN | reason::SW_THERMAL_SLOWDOWN | reason::HW_POWER_BRAKE_SLOWDOWN;

const COOLING_HINT: &str = "{gpus} is throttling for heat: check airflow, fans or liquid cooling \
and the inlet temperature (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i {ids}`)";

const HW_SLOWDOWN_HINT: &str = "{gpus} is in hardware slowdown: check temperatures and power with \
`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {ids}`, the cooling, and the power supply (a PSU \
or chassis power-brake signal also asserts it); `sudo dmesg | grep -i xid` may say more";

/// Hardware slowdown fails when it lasts through every sample (more than
/// one) or comes with heat or the power brake; seen in some samples only,
/// it is likely a P-state or clock change and warns.
fn hw_slowdown(i: u32, samples: &[u64]) -> Option<Finding> {
    let seen = samples
        .iter()
        .filter(|b| *b & reason::HW_SLOWDOWN != 0)
        .count();
    if seen == 0 {
        return None;
    }
    let n = samples.len();
    let evidence = samples.iter().any(|b| b & SLOWDOWN_EVIDENCE != 0);
    let of = format!("in {seen} of {n} readings over {} s", sampled_seconds(n));
    Some(if evidence || (seen == n && n > 1) {
        Finding::new(
            Some(i),
            Status::Fail,
            format!("hardware slowdown (clocks cut by half or more) {of}"),
        )
        .hint(HW_SLOWDOWN_HINT)
    } else {
        Finding::new(
            Some(i),
            Status::Warn,
            format!("hardware slowdown {of}, without heat or power brake"),
        )
        .hint(
            "NVML also reports hardware slowdown for a moment during P-state or clock changes: \
             run gpucheck again, or watch `nvidia-smi -q -d PERFORMANCE -i {ids}` for a few \
             seconds; if {gpus} stays in hardware slowdown, check its power and cooling",
        )
    })
}

/// The seconds `n` readings span.
fn sampled_seconds(n: usize) -> String {
    let span = THROTTLE_SAMPLE_INTERVAL.as_secs_f64() * n.saturating_sub(1) as f64;
    crate::domain::text::seconds(span)
}

/// Heat and the power brake warn; the normal reasons are noted.
fn other_reasons(i: u32, bits: u64, findings: &mut Findings) {
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
}

/// Judge the clock throttle reasons of every GPU, over all its readings.
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
        let samples = match &f.samples {
            Ok(v) if !v.is_empty() => v.as_slice(),
            Ok(_) => &[][..],
            Err(e) => {
                findings
                    .items
                    .extend(unreadable(i, "the throttle reasons", e));
                devices.push(na_row(&g.gpu, &findings));
                continue;
            }
        };
        let Some(last) = samples.last() else {
            devices.push(na_row(&g.gpu, &findings));
            continue;
        };
        readable += 1;
        let seen = samples.iter().fold(0, |all, b| all | b);
        findings.items.extend(hw_slowdown(i, samples));
        other_reasons(i, seen, &mut findings);
        if last & reason::GPU_IDLE != 0 {
            idle += 1;
        }
        devices.push(findings.device_result(
            row(
                &g.gpu,
                vec![Metric::new("clock_event_reasons", seen as f64, "bitmask")],
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

Hardware slowdown means the board cut its clocks by half or more (overheating, a power-supply or \
chassis power-brake signal), but NVML also reports it for a moment during P-state or clock changes. \
When the first reading shows it, the reasons are read 5 times over a second: hardware slowdown in \
every reading, or with thermal or power-brake slowdown, fails (check `nvidia-smi -q -d \
PERFORMANCE,TEMPERATURE,POWER`, cooling and power); seen in some readings only, it warns and the \
result says in how many. Hardware or software thermal slowdown and power-brake slowdown warn: fix airflow and cooling, \
or the power supplies.

Idle, application clocks, the software power cap (normal when the GPU works at its power limit), \
sync boost and display clocks are normal and only noted."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        if let Some(skip) = nothing_counted(ctx) {
            return skip;
        }
        match nvml::throttle(lib(ctx), &sampling()) {
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

    fn sampled(samples: &[u64]) -> Outcome {
        evaluate_throttle(&[
            per(
                0,
                ThrottleFacts {
                    samples: Ok(vec![reason::GPU_IDLE]),
                },
            ),
            per(
                1,
                ThrottleFacts {
                    samples: Ok(samples.to_vec()),
                },
            ),
        ])
    }

    fn throttled(bits: u64) -> Outcome {
        sampled(&[bits])
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
    fn hardware_slowdown_in_every_reading_fails() {
        let o = sampled(&[reason::HW_SLOWDOWN; THROTTLE_SAMPLES as usize]);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: hardware slowdown (clocks cut by half or more) in 5 of 5 readings over 1 s"
        );
        assert!(hint(&o).contains("nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i 1"));
    }

    #[test]
    fn one_hardware_slowdown_reading_among_several_warns() {
        // A P-state or clock change: there once, gone in the next readings.
        let mut samples = vec![reason::GPU_IDLE; THROTTLE_SAMPLES as usize];
        samples[0] = reason::HW_SLOWDOWN;
        let o = sampled(&samples);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 1: hardware slowdown in 1 of 5 readings over 1 s, without heat or power brake"
        );
        assert!(
            hint(&o).contains("P-state or clock changes"),
            "{}",
            hint(&o)
        );
        assert!(hint(&o).contains("-i 1"), "{}", hint(&o));
        // One reading alone cannot show that it lasts.
        assert_eq!(throttled(reason::HW_SLOWDOWN).status, Status::Warn);
    }

    #[test]
    fn hardware_slowdown_with_heat_or_the_power_brake_fails_at_once() {
        for evidence in [
            reason::HW_POWER_BRAKE_SLOWDOWN,
            reason::HW_THERMAL_SLOWDOWN,
            reason::SW_THERMAL_SLOWDOWN,
        ] {
            let o = sampled(&[reason::HW_SLOWDOWN | evidence, reason::GPU_IDLE]);
            assert_eq!(o.status, Status::Fail, "{evidence:#x}");
            assert_eq!(
                o.summary,
                "GPU 1: hardware slowdown (clocks cut by half or more) in 1 of 2 readings over \
                 0.25 s"
            );
        }
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
    fn sampling_reads_again_only_for_hardware_slowdown() {
        let s = sampling();
        assert_eq!(s.again_if, reason::HW_SLOWDOWN);
        let span = s.interval * (s.samples - 1);
        assert_eq!(span, Duration::from_secs(1));
        assert!(span < QUERY_TIMEOUT / 2, "sampling fits the check's budget");
    }

    #[test]
    fn throttle_reasons_not_reported_skip() {
        let o = evaluate_throttle(&[per(
            0,
            ThrottleFacts {
                samples: Err(Unavailable::NotSupported),
            },
        )]);
        assert_eq!(o.status, Status::Skip);
    }
}

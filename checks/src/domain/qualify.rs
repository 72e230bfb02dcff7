//! Pure judges of GPUs under load, shared by the load checks (gpu.compute,
//! gpu.memory, gpu.p2p_bandwidth) and the burn profile: a figure against
//! its siblings' median, against what the part should reach, the cause a
//! GPU's NVML readings show under load, and a figure that degrades over
//! time.

use crate::machine::{reason, LoadReading};

/// Below this share of its siblings' median a GPU is the slow rank: GPUs of
/// one model running the same GEMM or copy in the same box measure within
/// a few per cent of each other (NVIDIA's DCGM diagnostic targeted-stress
/// and memory-bandwidth plugins, and MLPerf submissions, show 2-5 %
/// spreads); 15 % is a GPU the whole DDP job waits for every step.
pub const SIBLING_FLOOR: f64 = 0.85;

/// The same floor when a CPU stands in for the GPUs (`GPUCHECK_LOAD_DEVICE=cpu`,
/// gpucheck's tests): the "GPUs" then share cores with everything else on
/// the machine, whose load moves one figure by up to half (measured on
/// 2-core CI machines), so only a far slower one is judged slow.
pub const CPU_SIBLING_FLOOR: f64 = 0.5;

/// Power at or above this share of the enforced limit counts as "at the
/// cap": the power controller holds a capped GPU within a few per cent of
/// its limit (`nvidia-smi -q -d POWER` under load).
pub const AT_POWER_CAP: f64 = 0.97;

/// An SM clock that falls below this share of the highest one seen during
/// the same load has sagged: boost clocks move in 15 MHz steps and stay
/// within a few per cent under steady load unless something holds them
/// down.
pub const CLOCK_SAG: f64 = 0.9;

/// A figure whose last third averages below this share of its first third
/// degraded during a burn (a GPU warming into thermal throttling loses
/// 10-30 %; steady ones stay within a few per cent).
pub const DEGRADED_SHARE: f64 = 0.9;

/// A temperature that climbs more than this over a burn and ends above
/// [`HOT_C`] is still climbing toward its slowdown point.
pub const TEMP_CLIMB_C: f64 = 15.0;
/// Hopper and Ampere data-centre parts slow down at 85-90 °C
/// (`nvidia-smi -q -d TEMPERATURE`: GPU Slowdown Temp); 80 °C leaves
/// little margin.
pub const HOT_C: f64 = 80.0;

pub use super::stats::median;

/// A figure far below its siblings': (its value, the siblings' median).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BelowSiblings {
    pub value: f64,
    pub median: f64,
}

impl BelowSiblings {
    pub fn percent(&self) -> f64 {
        100.0 * self.value / self.median
    }
}

/// Whether `value` is below `floor` of the median of `all` (which holds
/// it). Fewer than two figures have no siblings.
pub fn below_siblings(value: f64, all: &[f64], floor: f64) -> Option<BelowSiblings> {
    if all.len() < 2 {
        return None;
    }
    let median = median(all)?;
    (median > 0.0 && value < floor * median).then_some(BelowSiblings { value, median })
}

/// What the NVML readings taken under load show holding a GPU back, as a
/// person would say it ("power cap 700 W reached at 1,410 MHz", "HW slowdown
/// while at 87 °C"); None when nothing is visible.
pub fn cause_under_load(readings: &[LoadReading]) -> Option<String> {
    let max_temp = readings
        .iter()
        .filter_map(|r| r.temperature_c.clone().ok())
        .max();
    let at_temp = |what: &str| match max_temp {
        Some(t) => format!("{what} while at {t} °C"),
        None => what.to_string(),
    };
    let any = |bits: u64| {
        readings
            .iter()
            .any(|r| r.throttle_reasons.as_ref().is_ok_and(|m| m & bits != 0))
    };
    if any(reason::HW_THERMAL_SLOWDOWN) {
        return Some(at_temp("HW thermal slowdown"));
    }
    if any(reason::HW_POWER_BRAKE_SLOWDOWN) {
        return Some(at_temp("HW power brake slowdown"));
    }
    if any(reason::HW_SLOWDOWN) {
        return Some(at_temp("HW slowdown"));
    }
    if any(reason::SW_THERMAL_SLOWDOWN) {
        return Some(at_temp("thermal slowdown"));
    }
    if let Some(cap) = power_cap(readings) {
        return Some(cap);
    }
    clock_sag(readings)
}

/// "power cap 700 W reached at 1,410 MHz" when a reading is at the limit
/// or NVML says SW power cap.
fn power_cap(readings: &[LoadReading]) -> Option<String> {
    let capped: Vec<&LoadReading> = readings
        .iter()
        .filter(|r| {
            let flagged = r
                .throttle_reasons
                .as_ref()
                .is_ok_and(|m| m & reason::SW_POWER_CAP != 0);
            let at_limit = matches!((&r.power_mw, &r.power_limit_mw),
                (Ok(p), Ok(l)) if *l > 0 && f64::from(*p) >= AT_POWER_CAP * f64::from(*l));
            flagged || at_limit
        })
        .collect();
    let first = capped.first()?;
    let limit = first.power_limit_mw.as_ref().ok().map(|l| l / 1000);
    let clock = capped
        .iter()
        .filter_map(|r| r.sm_clock_mhz.as_ref().ok().copied())
        .min();
    let mut text = match limit {
        Some(l) => format!("power cap {l} W reached"),
        None => "power cap reached".to_string(),
    };
    if let Some(c) = clock {
        text.push_str(&format!(" at {} MHz", thousands(c)));
    }
    Some(text)
}

/// "SM clock sagged from 1,980 to 1,410 MHz" when it fell by more than
/// [`CLOCK_SAG`] allows.
fn clock_sag(readings: &[LoadReading]) -> Option<String> {
    let clocks: Vec<u32> = readings
        .iter()
        .filter_map(|r| r.sm_clock_mhz.as_ref().ok().copied())
        .collect();
    let hi = *clocks.iter().max()?;
    let lo = *clocks.iter().min()?;
    (f64::from(lo) < CLOCK_SAG * f64::from(hi)).then(|| {
        format!(
            "SM clock sagged from {} to {} MHz",
            thousands(hi),
            thousands(lo)
        )
    })
}

/// The better (higher) of a figure measured twice; either alone when the
/// other run gave none.
pub fn better_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// A GEMM figure: "712", or "0.215" below 10 (CPU figures).
pub fn tflops(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.0}")
    }
}

/// A device-memory bandwidth: "2,950" GB/s, or "12.3" below 100 (CPU figures).
pub fn memory_gbps(x: f64) -> String {
    if x < 100.0 {
        format!("{x:.1}")
    } else {
        thousands(x.round() as u32)
    }
}

/// The span of `values` as `show` writes them, with `unit`: "700-712
/// TFLOPS", "712 TFLOPS" when both ends read alike, "no figures".
pub fn span(values: &[f64], show: fn(f64) -> String, unit: &str) -> String {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    match values.len() {
        0 => "no figures".into(),
        _ if show(lo) == show(hi) => format!("{} {unit}", show(lo)),
        _ => format!("{}-{} {unit}", show(lo), show(hi)),
    }
}

/// 1410 -> "1,410".
pub fn thousands(v: u32) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A figure that fell during a burn: the mean of its first third and of
/// its last third, when the last is below [`DEGRADED_SHARE`] of the first.
/// Fewer than three points say nothing.
pub fn degraded(series: &[f64]) -> Option<(f64, f64)> {
    degraded_below(series, DEGRADED_SHARE)
}

/// [`degraded`] with another share: [`CPU_SIBLING_FLOOR`] when the CPU
/// stands in for the GPUs, whose figures move with the machine's load.
pub fn degraded_below(series: &[f64], share: f64) -> Option<(f64, f64)> {
    let (first, last) = thirds(series)?;
    (first > 0.0 && last < share * first).then_some((first, last))
}

/// A temperature that climbed by more than [`TEMP_CLIMB_C`] and ended
/// above [`HOT_C`]: (first third's mean, last third's mean).
pub fn temperature_climbing(series: &[f64]) -> Option<(f64, f64)> {
    let (first, last) = thirds(series)?;
    (last - first > TEMP_CLIMB_C && last > HOT_C).then_some((first, last))
}

fn thirds(series: &[f64]) -> Option<(f64, f64)> {
    if series.len() < 3 {
        return None;
    }
    let k = series.len() / 3;
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    Some((mean(&series[..k]), mean(&series[series.len() - k..])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Unavailable;

    fn reading(clock: u32, power_w: u32, temp: u32, reasons: u64) -> LoadReading {
        LoadReading {
            sm_clock_mhz: Ok(clock),
            power_mw: Ok(power_w * 1000),
            power_limit_mw: Ok(700_000),
            temperature_c: Ok(temp),
            throttle_reasons: Ok(reasons),
            memory_free_bytes: Ok(80 << 30),
        }
    }

    #[test]
    fn the_slowest_of_eight_below_the_floor_is_named() {
        let all = [700.0, 702.0, 698.0, 705.0, 701.0, 699.0, 703.0, 480.0];
        let slow = below_siblings(480.0, &all, SIBLING_FLOOR).expect("slow");
        assert_eq!(slow.median, 700.5);
        assert_eq!(slow.percent().round(), 69.0);
        assert!(below_siblings(698.0, &all, SIBLING_FLOOR).is_none());
    }

    #[test]
    fn one_gpu_has_no_siblings() {
        assert!(below_siblings(10.0, &[10.0], SIBLING_FLOOR).is_none());
        assert!(below_siblings(10.0, &[], SIBLING_FLOOR).is_none());
    }

    #[test]
    fn a_power_cap_names_the_limit_and_the_clock() {
        let r = [reading(1980, 400, 60, 0), reading(1410, 695, 70, 0)];
        assert_eq!(
            cause_under_load(&r).as_deref(),
            Some("power cap 700 W reached at 1,410 MHz")
        );
    }

    #[test]
    fn a_sw_power_cap_bit_counts_below_the_limit_too() {
        let r = [reading(1500, 500, 60, reason::SW_POWER_CAP)];
        assert_eq!(
            cause_under_load(&r).as_deref(),
            Some("power cap 700 W reached at 1,500 MHz")
        );
    }

    #[test]
    fn hw_slowdown_names_the_temperature_and_wins_over_the_cap() {
        let r = [
            reading(1980, 695, 70, 0),
            reading(990, 690, 87, reason::HW_SLOWDOWN),
        ];
        assert_eq!(
            cause_under_load(&r).as_deref(),
            Some("HW slowdown while at 87 °C")
        );
    }

    #[test]
    fn a_sagging_clock_without_a_reason_is_named() {
        let r = [reading(1980, 400, 60, 0), reading(1200, 380, 61, 0)];
        assert_eq!(
            cause_under_load(&r).as_deref(),
            Some("SM clock sagged from 1,980 to 1,200 MHz")
        );
    }

    #[test]
    fn steady_readings_show_no_cause() {
        let r = [reading(1980, 500, 60, 0), reading(1965, 520, 62, 0)];
        assert_eq!(cause_under_load(&r), None);
        assert_eq!(cause_under_load(&[]), None);
    }

    #[test]
    fn unreadable_values_are_left_out() {
        let mut r = reading(1400, 0, 0, reason::HW_SLOWDOWN);
        r.temperature_c = Err(Unavailable::NotSupported);
        assert_eq!(cause_under_load(&[r]).as_deref(), Some("HW slowdown"));
    }

    #[test]
    fn a_falling_series_is_degraded_and_a_steady_one_is_not() {
        let falling = [
            700.0, 705.0, 698.0, 650.0, 600.0, 560.0, 540.0, 530.0, 520.0,
        ];
        let (first, last) = degraded(&falling).expect("degraded");
        assert!(first > 700.0 && last < 531.0, "{first} {last}");
        assert!(degraded(&[700.0, 690.0, 705.0, 698.0, 702.0, 695.0]).is_none());
        assert!(degraded(&[700.0, 100.0]).is_none());
    }

    #[test]
    fn a_climbing_hot_temperature_is_named() {
        assert!(temperature_climbing(&[60.0, 64.0, 70.0, 76.0, 82.0, 86.0]).is_some());
        assert!(temperature_climbing(&[40.0, 50.0, 60.0, 66.0, 70.0, 72.0]).is_none());
    }

    #[test]
    fn the_better_of_two_runs_is_the_higher_or_the_one_there_is() {
        assert_eq!(better_of(Some(1.0), Some(2.0)), Some(2.0));
        assert_eq!(better_of(None, Some(2.0)), Some(2.0));
        assert_eq!(better_of(Some(1.0), None), Some(1.0));
        assert_eq!(better_of(None, None), None);
    }

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(tflops(712.4), "712");
        assert_eq!(tflops(0.2154), "0.215");
        assert_eq!(memory_gbps(2949.6), "2,950");
        assert_eq!(memory_gbps(12.34), "12.3");
        assert_eq!(span(&[712.2, 700.1], tflops, "TFLOPS"), "700-712 TFLOPS");
        assert_eq!(span(&[712.2, 711.9], tflops, "TFLOPS"), "712 TFLOPS");
        assert_eq!(span(&[], memory_gbps, "GB/s"), "no figures");
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(1410), "1,410");
        assert_eq!(thousands(990), "990");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}

//! gpu.pcie: each GPU's PCIe link width and generation against the most it
//! supports, judged with the GPU's load (the generation drops at idle).

use std::time::Duration;

use super::common::{
    judge_answering, lib, lost_in_count, na_row, nothing_counted, nvml_failure_outcome,
    nvml_timeout_hint, open_failures, row, shown, unreadable, QUERY_TIMEOUT,
};
use crate::domain::text::gpu_count;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{self, PcieFacts, PerGpu};
use crate::{Check, Context, Metric, Outcome, Profile, Status};

/// A GPU at or above this utilization is busy: its PCIe link should run at
/// its maximum generation (the driver drops the generation only at idle to
/// save power; DCGM judges the link under load, reference/facts.md).
pub const BUSY_UTILIZATION_PCT: u32 = 10;

/// PCIe link thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct PcieThresholds {
    pub busy_utilization_pct: u32,
}

impl Default for PcieThresholds {
    fn default() -> Self {
        PcieThresholds {
            busy_utilization_pct: BUSY_UTILIZATION_PCT,
        }
    }
}

/// Judge the PCIe links: width below maximum warns; a lower generation warns
/// only while the GPU is busy (it drops at idle to save power).
pub fn evaluate_pcie(gpus: &[PerGpu<PcieFacts>], t: &PcieThresholds) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    let mut readable = 0;
    for g in gpus {
        let i = g.gpu.index;
        let Ok(f) = &g.facts else {
            devices.push(na_row(&g.gpu, &findings));
            continue;
        };
        let metrics = link_metrics(i, f, &mut findings);
        if let (Ok(w), Ok(max)) = (&f.link_width, &f.max_link_width) {
            readable += 1;
            findings.items.extend(narrow_link(i, *w, *max));
        }
        findings.items.extend(slow_link(i, f, t));
        let ok = format!(
            "Gen{} x{} (max Gen{} x{})",
            shown(&f.link_gen),
            shown(&f.link_width),
            shown(&f.max_link_gen),
            shown(&f.max_link_width)
        );
        devices.push(findings.device_result(row(&g.gpu, metrics), ok));
    }
    if readable == 0 && findings.worst() < Status::Warn {
        let mut o = Outcome::skip("PCIe link width not reported by these GPUs (n/a)");
        o.devices = devices;
        return o;
    }
    let idle_note = if findings.items.iter().any(|f| f.status == Status::Pass) {
        " (idle GPUs at a lower generation: normal)"
    } else {
        ""
    };
    let widths: Vec<u32> = gpus
        .iter()
        .filter_map(|g| g.facts.as_ref().ok()?.link_width.as_ref().ok().copied())
        .collect();
    let width = match widths.first() {
        Some(w) if widths.iter().all(|x| x == w) => format!(" (x{w})"),
        _ => String::new(),
    };
    let pass = format!(
        "{} at full PCIe link width{width}{idle_note}",
        gpu_count(readable)
    );
    findings.conclude(pass, devices)
}

/// Each link reading as a metric; an unreadable one is a finding.
fn link_metrics(i: u32, f: &PcieFacts, findings: &mut Findings) -> Vec<Metric> {
    let mut metrics = Vec::new();
    for (name, r) in [
        ("pcie_link_gen", &f.link_gen),
        ("pcie_link_gen_max", &f.max_link_gen),
        ("pcie_link_width", &f.link_width),
        ("pcie_link_width_max", &f.max_link_width),
    ] {
        match r {
            Ok(v) => metrics.push(Metric::new(
                name,
                *v as f64,
                if name.contains("width") {
                    "lanes"
                } else {
                    "gen"
                },
            )),
            Err(e) => findings.items.extend(unreadable(i, "the PCIe link", e)),
        }
    }
    if let Ok(u) = &f.utilization_pct {
        metrics.push(Metric::new("utilization", *u as f64, "%"));
    }
    metrics
}

/// A link narrower than the GPU supports warns.
fn narrow_link(i: u32, w: u32, max: u32) -> Option<Finding> {
    (w < max).then(|| {
        Finding::new(Some(i), Status::Warn, format!("PCIe link x{w} of x{max}")).hint(
            "{gpus} trained a narrower PCIe link than it supports, cutting host<->GPU \
             bandwidth: reseat the card or its riser, check the slot's lane setting \
             (bifurcation) in the BIOS, and compare LnkSta with LnkCap in \
             `sudo lspci -vv -d 10de:`",
        )
    })
}

/// A lower generation than the GPU supports warns while it is busy and is
/// noted at idle, where the driver drops it to save power.
fn slow_link(i: u32, f: &PcieFacts, t: &PcieThresholds) -> Option<Finding> {
    let (Ok(gen), Ok(max)) = (&f.link_gen, &f.max_link_gen) else {
        return None;
    };
    if gen >= max {
        return None;
    }
    Some(match &f.utilization_pct {
        Ok(u) if *u >= t.busy_utilization_pct => Finding::new(
            Some(i),
            Status::Warn,
            format!("PCIe Gen{gen} of Gen{max} while {u} % busy"),
        )
        .hint(
            "under load the link should run at its top generation: check the \
             BIOS PCIe speed setting, risers and retimers, and `nvidia-smi -q -d \
             PCIE -i {ids}` for a growing replay counter",
        ),
        Ok(_) => Finding::new(
            Some(i),
            Status::Pass,
            format!("Gen{gen} of Gen{max} at idle: normal power saving"),
        ),
        Err(_) => Finding::new(
            Some(i),
            Status::Pass,
            format!("Gen{gen} of Gen{max}, utilization n/a (the generation drops at idle)"),
        ),
    })
}

pub struct Pcie;

impl Check for Pcie {
    fn id(&self) -> &'static str {
        "gpu.pcie"
    }
    fn title(&self) -> &'static str {
        "PCIe link"
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
        "Compares each GPU's current PCIe link width and generation with the maximum it supports.

Data loading, host-to-device copies and, on machines without NVLink, NCCL's GPU-to-GPU traffic all \
cross PCIe; a link that trained at x8 instead of x16 halves that bandwidth for the whole job.

Width below the maximum warns (\"x8 of x16\"): reseat the card or riser, check the BIOS lane \
(bifurcation) settings, and compare LnkSta with LnkCap in `sudo lspci -vv -d 10de:`.

The generation drops at idle to save power, so a lower generation on an idle GPU is normal and only \
noted. It warns only while the GPU is busy (10 % utilization or more): check the BIOS PCIe speed, \
risers and retimers, and the PCIe replay counter in `nvidia-smi -q -d PCIE`."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        if let Some(skip) = nothing_counted(ctx) {
            return skip;
        }
        match nvml::pcie(lib(ctx)) {
            Ok(gpus) => judge_answering(gpus, &lost_in_count(ctx), |gpus| {
                evaluate_pcie(gpus, &PcieThresholds::default())
            }),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::testing::*;
    use crate::probe::nvml::{PcieFacts, Reading, Unavailable};
    use crate::Status;

    fn link(gen: u32, max_gen: u32, width: u32, max_width: u32, util: Reading<u32>) -> PcieFacts {
        PcieFacts {
            link_gen: Ok(gen),
            max_link_gen: Ok(max_gen),
            link_width: Ok(width),
            max_link_width: Ok(max_width),
            utilization_pct: util,
        }
    }

    #[test]
    fn full_links_pass() {
        let o = evaluate_pcie(
            &[per(0, link(5, 5, 16, 16, Ok(0)))],
            &PcieThresholds::default(),
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "1 GPU at full PCIe link width (x16)");
        assert_eq!(o.devices[0].summary, "Gen5 x16 (max Gen5 x16)");
    }

    #[test]
    fn a_narrow_link_warns() {
        let o = evaluate_pcie(
            &[
                per(0, link(5, 5, 16, 16, Ok(0))),
                per(1, link(5, 5, 8, 16, Ok(0))),
            ],
            &PcieThresholds::default(),
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: PCIe link x8 of x16");
        assert!(hint(&o).starts_with("GPU 1 trained a narrower PCIe link"));
        assert!(hint(&o).contains("bifurcation"));
    }

    #[test]
    fn a_lower_generation_is_normal_at_idle_and_warns_when_busy() {
        let t = PcieThresholds::default();
        let idle = evaluate_pcie(&[per(0, link(1, 5, 16, 16, Ok(0)))], &t);
        assert_eq!(idle.status, Status::Pass);
        assert_eq!(
            idle.summary,
            "1 GPU at full PCIe link width (x16) (idle GPUs at a lower generation: normal)"
        );
        assert!(idle.devices[0]
            .summary
            .contains("Gen1 of Gen5 at idle: normal power saving"));
        let below = evaluate_pcie(
            &[per(0, link(3, 5, 16, 16, Ok(BUSY_UTILIZATION_PCT - 1)))],
            &t,
        );
        assert_eq!(below.status, Status::Pass);
        let busy = evaluate_pcie(&[per(0, link(3, 5, 16, 16, Ok(BUSY_UTILIZATION_PCT)))], &t);
        assert_eq!(busy.status, Status::Warn);
        assert_eq!(busy.summary, "GPU 0: PCIe Gen3 of Gen5 while 10 % busy");
        assert!(hint(&busy).contains("nvidia-smi -q -d PCIE -i 0"));
        let unknown = evaluate_pcie(
            &[per(0, link(3, 5, 16, 16, Err(Unavailable::NotSupported)))],
            &t,
        );
        assert_eq!(unknown.status, Status::Pass);
        assert!(unknown.devices[0].summary.contains("utilization n/a"));
    }

    #[test]
    fn pcie_not_reported_skips() {
        let na = PcieFacts {
            link_gen: Err(Unavailable::NotSupported),
            max_link_gen: Err(Unavailable::NotSupported),
            link_width: Err(Unavailable::NotSupported),
            max_link_width: Err(Unavailable::NotSupported),
            utilization_pct: Err(Unavailable::NotSupported),
        };
        let o = evaluate_pcie(&[per(0, na)], &PcieThresholds::default());
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.summary,
            "PCIe link width not reported by these GPUs (n/a)"
        );
    }
}

//! gpu.pcie: each GPU's PCIe link width and generation against the most it
//! supports, judged with the GPU's load (both drop at idle), and its slot
//! against the card (the model table's width, or its siblings').

use std::time::Duration;

use super::common::{
    judge_answering, lib, lost_in_count, na_row, nothing_counted, nvml_failure_outcome,
    nvml_timeout_hint, open_failures, row, shown, unreadable, QUERY_TIMEOUT,
};
use crate::domain::sku;
use crate::domain::text::gpu_count;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{self, PcieFacts, PerGpu};
use crate::{Check, Context, Metric, Outcome, Profile, Status};

/// A GPU at or above this utilization is busy: its PCIe link should run at
/// its maximum generation and width (NVML's nvmlDeviceGetCurrPcieLinkWidth
/// and ...Generation: the current value "may be reduced when the GPU is not
/// in use"; DCGM judges the link under load, reference/facts.md).
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

/// Judge the PCIe links. The driver lowers both the generation and the
/// width of an idle GPU's link to save power (NVML: the current values "may
/// be reduced when the GPU is not in use"), so either below its maximum
/// warns only while the GPU is busy. A slot narrower than the card (NVML's
/// maximum width is the card's and the slot's lesser) warns at any load:
/// against the model table's width, or for a model the table lacks, against
/// the widest sibling of the same model.
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
        if f.link_width.is_ok() && f.max_link_width.is_ok() {
            readable += 1;
        }
        findings.items.extend(narrow_slot(g, gpus));
        findings.items.extend(below_max(i, Lane::Width, f, t));
        findings.items.extend(below_max(i, Lane::Gen, f, t));
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
    findings.conclude(pass_summary(gpus, readable, &findings), devices)
}

/// "8 GPUs at full PCIe link width (x16)", with a note for idle links that
/// run slower; a GPU whose link runs narrower is named first, with the
/// widths of its identical siblings (same model, same maximum), which tell
/// a link narrowed at idle from one that trained narrow.
fn pass_summary(gpus: &[PerGpu<PcieFacts>], readable: usize, findings: &Findings) -> String {
    let noted = |what: &str| {
        findings
            .items
            .iter()
            .any(|f| f.status == Status::Pass && f.text.starts_with(what))
    };
    let idle_note = match (noted("x"), noted("Gen")) {
        (true, true) => " (idle GPUs at a lower width and generation: normal)",
        (true, false) => " (idle GPUs at a lower width: normal)",
        (false, true) => " (idle GPUs at a lower generation: normal)",
        (false, false) => "",
    };
    let narrow: Vec<String> = gpus.iter().filter_map(|g| narrow_link(g, gpus)).collect();
    let full: Vec<u32> = gpus
        .iter()
        .filter_map(|g| {
            let (now, max) = widths(g)?;
            (now >= max).then_some(max)
        })
        .collect();
    let width = match full.first() {
        Some(w) if full.iter().all(|x| x == w) => format!(" (x{w})"),
        _ => String::new(),
    };
    let at_full = match (narrow.is_empty(), full.len()) {
        (true, _) => format!("{} at full PCIe link width{width}", gpu_count(readable)),
        (false, 0) => String::new(),
        (false, n) => format!("; {} at full PCIe link width{width}", gpu_count(n)),
    };
    format!("{}{at_full}{idle_note}", narrow.join("; "))
}

/// A GPU's current and maximum link width, when both are read.
fn widths(g: &PerGpu<PcieFacts>) -> Option<(u32, u32)> {
    let f = g.facts.as_ref().ok()?;
    Some((
        *f.link_width.as_ref().ok()?,
        *f.max_link_width.as_ref().ok()?,
    ))
}

/// "GPU 3 at PCIe x8 of x16 while its 3 identical siblings run x16: ...",
/// for a GPU whose link runs below its maximum width (not busy: a busy one
/// warns).
fn narrow_link(g: &PerGpu<PcieFacts>, gpus: &[PerGpu<PcieFacts>]) -> Option<String> {
    let (now, max) = widths(g)?;
    if now >= max {
        return None;
    }
    let siblings: Vec<u32> = gpus
        .iter()
        .filter(|o| o.gpu.index != g.gpu.index && o.gpu.name == g.gpu.name)
        .filter_map(widths)
        .filter(|(_, m)| *m == max)
        .map(|(w, _)| w)
        .collect();
    let link = format!("GPU {} at PCIe x{now} of x{max}", g.gpu.index);
    let they = match siblings.len() {
        1 => "its identical sibling runs".to_string(),
        n => format!("its {n} identical siblings run"),
    };
    Some(match siblings.first() {
        None => format!("{link}, no identical sibling to compare with"),
        Some(w) if siblings.iter().all(|x| x == w) && *w > now => format!(
            "{link} while {they} x{w}: recheck it under load (an idle link may narrow, a \
             degraded one stays narrow)"
        ),
        Some(w) if siblings.iter().all(|x| x == w) => format!("{link}, as {they} x{w}"),
        Some(_) => {
            let list: Vec<String> = siblings.iter().map(|w| format!("x{w}")).collect();
            format!("{link} while {they} {}", list.join(", "))
        }
    })
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

const NARROW_SLOT_HINT: &str = "{gpus} can train no wider than its slot allows, cutting \
host<->GPU bandwidth for good: move it to a full x16 slot, or check the riser and the slot's lane \
setting (bifurcation) in the BIOS; `sudo lspci -vv -d 10de:` shows LnkCap";

/// The widest the card itself can run: the model table's width, else the
/// widest maximum among the GPUs of the same name here (None: no wider
/// reference).
fn card_width(g: &PerGpu<PcieFacts>, gpus: &[PerGpu<PcieFacts>]) -> Option<(u32, bool)> {
    if let Some(p) = sku::by_nvml_name(&g.gpu.name).and_then(|s| s.pcie) {
        return Some((p.width, true));
    }
    gpus.iter()
        .filter(|o| o.gpu.name == g.gpu.name)
        .filter_map(|o| o.facts.as_ref().ok()?.max_link_width.as_ref().ok().copied())
        .max()
        .map(|w| (w, false))
}

/// A slot (or riser) narrower than the card: NVML's maximum width below what
/// the card has. It does not change with load.
fn narrow_slot(g: &PerGpu<PcieFacts>, gpus: &[PerGpu<PcieFacts>]) -> Option<Finding> {
    let max = *g.facts.as_ref().ok()?.max_link_width.as_ref().ok()?;
    let (card, from_table) = card_width(g, gpus)?;
    (max < card).then(|| {
        let text = if from_table {
            format!("PCIe slot x{max}: the card takes x{card}")
        } else {
            format!(
                "PCIe slot x{max} while its siblings have x{card} (model not in gpucheck's table)"
            )
        };
        Finding::new(Some(g.gpu.index), Status::Warn, text).hint(NARROW_SLOT_HINT)
    })
}

/// Which half of the link is judged.
#[derive(Clone, Copy)]
enum Lane {
    Width,
    Gen,
}

/// A width or generation below the maximum warns while the GPU is busy and
/// is noted at idle, where the driver lowers both to save power.
fn below_max(i: u32, lane: Lane, f: &PcieFacts, t: &PcieThresholds) -> Option<Finding> {
    let (now, max) = match lane {
        Lane::Width => (&f.link_width, &f.max_link_width),
        Lane::Gen => (&f.link_gen, &f.max_link_gen),
    };
    let (Ok(now), Ok(max)) = (now, max) else {
        return None;
    };
    if now >= max {
        return None;
    }
    let (link, what) = match lane {
        Lane::Width => (format!("x{now} of x{max}"), "width"),
        Lane::Gen => (format!("Gen{now} of Gen{max}"), "generation"),
    };
    Some(match &f.utilization_pct {
        Ok(u) if *u >= t.busy_utilization_pct => Finding::new(
            Some(i),
            Status::Warn,
            format!("PCIe {link} while {u} % busy"),
        )
        .hint(match lane {
            Lane::Width => {
                "{gpus} runs a narrower PCIe link under load than its slot offers, \
                         cutting host<->GPU bandwidth: reseat the card or its riser, check the \
                         slot's lane setting (bifurcation) in the BIOS, and compare LnkSta with \
                         LnkCap in `sudo lspci -vv -d 10de:`"
            }
            Lane::Gen => {
                "under load the link should run at its top generation: check the \
                         BIOS PCIe speed setting, risers and retimers, and `nvidia-smi -q -d \
                         PCIE -i {ids}` for a growing replay counter"
            }
        }),
        Ok(_) => Finding::new(
            Some(i),
            Status::Pass,
            format!("{link} at idle: normal power saving"),
        ),
        Err(_) => Finding::new(
            Some(i),
            Status::Pass,
            format!("{link}, utilization n/a (the {what} drops at idle)"),
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
        "Compares each GPU's current PCIe link width and generation with the maximum it supports, and \
that maximum with what the card itself has.

Data loading, host-to-device copies and, on machines without NVLink, NCCL's GPU-to-GPU traffic all \
cross PCIe; a link that trained at x8 instead of x16 halves that bandwidth for the whole job.

The driver lowers both the width and the generation of an idle GPU's link to save power (NVML: the \
current values \"may be reduced when the GPU is not in use\"; an idle L4, A10G or T4 shows x8 of \
x16), so a narrower or slower link on an idle GPU is normal and only noted. The summary names a GPU \
whose link runs narrower with the width its identical siblings run at: one GPU at x8 while its \
idle siblings keep x16 is worth rechecking under load. It warns only while the \
GPU is busy (10 % utilization or more): \"x8 of x16 while 95 % busy\" means reseat the card or \
riser, check the BIOS lane (bifurcation) and PCIe speed settings, risers and retimers, and compare \
LnkSta with LnkCap in `sudo lspci -vv -d 10de:`.

A slot narrower than the card warns at any load (\"PCIe slot x8: the card takes x16\"): NVML's \
maximum width is the lesser of the card's and the slot's, and it is compared with the width of the \
model in gpucheck's table; for a model the table lacks, with the widest GPU of the same model here, \
and the result says so."
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
    fn a_narrow_link_warns_under_load_and_is_normal_at_idle() {
        let t = PcieThresholds::default();
        let busy = evaluate_pcie(
            &[
                per(0, link(5, 5, 16, 16, Ok(0))),
                per(1, link(5, 5, 8, 16, Ok(95))),
            ],
            &t,
        );
        assert_eq!(busy.status, Status::Warn);
        assert_eq!(busy.summary, "GPU 1: PCIe x8 of x16 while 95 % busy");
        assert!(hint(&busy).starts_with("GPU 1 runs a narrower PCIe link under load"));
        assert!(hint(&busy).contains("bifurcation"));
        // An idle L4 / A10G / T4 shows x8 of x16: power saving, not a fault.
        let idle = evaluate_pcie(
            &[
                named(0, "NVIDIA L4", link(1, 4, 8, 16, Ok(0))),
                named(1, "NVIDIA L4", link(4, 4, 16, 16, Ok(0))),
            ],
            &t,
        );
        assert_eq!(idle.status, Status::Pass, "{}", idle.summary);
        assert_eq!(
            idle.summary,
            "GPU 0 at PCIe x8 of x16 while its identical sibling runs x16: recheck it under load \
             (an idle link may narrow, a degraded one stays narrow); 1 GPU at full PCIe link \
             width (x16) (idle GPUs at a lower width and generation: normal)"
        );
        // Alone, the width is said without a comparison.
        let alone = evaluate_pcie(&[named(0, "NVIDIA L4", link(1, 4, 8, 16, Ok(0)))], &t);
        assert_eq!(
            alone.summary,
            "GPU 0 at PCIe x8 of x16, no identical sibling to compare with (idle GPUs at a lower \
             width and generation: normal)"
        );
        assert!(
            idle.devices[0]
                .summary
                .contains("x8 of x16 at idle: normal power saving"),
            "{}",
            idle.devices[0].summary
        );
        let below = evaluate_pcie(
            &[per(0, link(5, 5, 8, 16, Ok(BUSY_UTILIZATION_PCT - 1)))],
            &t,
        );
        assert_eq!(below.status, Status::Pass);
        let unknown = evaluate_pcie(
            &[per(0, link(5, 5, 8, 16, Err(Unavailable::NotSupported)))],
            &t,
        );
        assert_eq!(unknown.status, Status::Pass);
        assert!(unknown.devices[0]
            .summary
            .contains("x8 of x16, utilization n/a (the width drops at idle)"));
    }

    #[test]
    fn an_idle_narrow_link_is_named_beside_its_siblings_width() {
        // One GPU of four at Gen3 x8 of Gen5 x16, its siblings at x16, all
        // idle: a note, never "all GPUs at full width".
        let o = evaluate_pcie(
            &[
                per(0, link(1, 5, 16, 16, Ok(0))),
                per(1, link(1, 5, 16, 16, Ok(0))),
                per(2, link(3, 5, 8, 16, Ok(0))),
                per(3, link(1, 5, 16, 16, Ok(0))),
            ],
            &PcieThresholds::default(),
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "GPU 2 at PCIe x8 of x16 while its 3 identical siblings run x16: recheck it under \
             load (an idle link may narrow, a degraded one stays narrow); 3 GPUs at full PCIe \
             link width (x16) (idle GPUs at a lower width and generation: normal)"
        );
        // Siblings as narrow: the same idle power saving on each.
        let o = evaluate_pcie(
            &[
                named(0, "NVIDIA L4", link(1, 4, 8, 16, Ok(0))),
                named(1, "NVIDIA L4", link(1, 4, 8, 16, Ok(0))),
            ],
            &PcieThresholds::default(),
        );
        assert!(
            o.summary.starts_with(
                "GPU 0 at PCIe x8 of x16, as its identical sibling runs x8; GPU 1 at PCIe x8 of \
                 x16, as its identical sibling runs x8 (idle"
            ),
            "{}",
            o.summary
        );
    }

    #[test]
    fn a_slot_narrower_than_the_card_warns_at_any_load() {
        let t = PcieThresholds::default();
        // An H100 (x16 in the table) whose maximum is x8: the slot's.
        let o = evaluate_pcie(
            &[
                per(0, link(5, 5, 16, 16, Ok(0))),
                per(1, link(1, 5, 8, 8, Ok(0))),
            ],
            &t,
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: PCIe slot x8: the card takes x16");
        assert!(hint(&o).contains("full x16 slot"), "{}", hint(&o));
        // A model the table lacks: against its widest sibling, said so.
        let card = "NVIDIA GeForce RTX 4080 SUPER";
        let o = evaluate_pcie(
            &[
                named(0, card, link(4, 4, 16, 16, Ok(0))),
                named(1, card, link(4, 4, 4, 4, Ok(0))),
            ],
            &t,
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 1: PCIe slot x4 while its siblings have x16 (model not in gpucheck's table)"
        );
        // Alone, an unknown model has nothing to be compared with.
        let o = evaluate_pcie(&[named(0, card, link(4, 4, 8, 8, Ok(0)))], &t);
        assert_eq!(o.status, Status::Pass);
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

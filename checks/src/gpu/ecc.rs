//! gpu.ecc: memory health of every GPU (ECC mode, error counts, retired
//! pages, remapped rows) against the limits DCGM, gcm and Azure use.

use std::time::Duration;

use super::common::{
    judge_answering, lib, lost_in_count, na_row, nothing_counted, nvml_failure_outcome,
    nvml_timeout_hint, open_failures, row, shown, unreadable, QUERY_TIMEOUT,
};
use crate::domain::action::Action;
use crate::domain::sku;
use crate::domain::text::gpu_count;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{self, EccFacts, EccMode, PerGpu, Reading, RemappedRows, Unavailable};
use crate::{Check, Context, DeviceResult, Metric, Outcome, Profile, Status};

/// Any volatile uncorrectable ECC error fails: gcm, Azure and Imbue all do
/// (reference/facts.md, "Health thresholds others use").
pub const MAX_VOLATILE_UNCORRECTED_ECC: u64 = 0;
/// Warn above Azure's DRAM correctable-error limit of 20,000,000
/// (reference/facts.md; gcm fails only above 50,000,000).
pub const WARN_VOLATILE_CORRECTED_ECC: u64 = 20_000_000;
/// DCGM's soft limit on retired pages: warn above 15 (reference/facts.md).
pub const WARN_RETIRED_PAGES: u32 = 15;
/// DCGM's retired-page limit: fail above 63 (reference/facts.md).
pub const MAX_RETIRED_PAGES: u32 = 63;
/// DCGM's limit of 512 uncorrectable row remaps (reference/facts.md).
pub const MAX_UNCORRECTABLE_ROW_REMAPS: u32 = 512;

/// ECC and memory-health thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct EccThresholds {
    pub max_volatile_uncorrected: u64,
    pub warn_volatile_corrected: u64,
    pub warn_retired_pages: u32,
    pub max_retired_pages: u32,
    pub max_uncorrectable_row_remaps: u32,
}

impl Default for EccThresholds {
    fn default() -> Self {
        EccThresholds {
            max_volatile_uncorrected: MAX_VOLATILE_UNCORRECTED_ECC,
            warn_volatile_corrected: WARN_VOLATILE_CORRECTED_ECC,
            warn_retired_pages: WARN_RETIRED_PAGES,
            max_retired_pages: MAX_RETIRED_PAGES,
            max_uncorrectable_row_remaps: MAX_UNCORRECTABLE_ROW_REMAPS,
        }
    }
}

const RESET_HINT: &str = "{gpus} must be reset to finish retiring or remapping bad memory: stop \
its jobs, then `sudo nvidia-smi -r -i {ids}` or reboot";
const RMA_HINT: &str = "{gpus} has run out of memory repair: take it out of service and contact \
the vendor for a replacement (RMA); `nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT -i {ids}` shows \
the details";

/// What ECC mode a GPU should be in: the model table's word, else its
/// siblings'.
#[derive(Debug, Clone, Copy, PartialEq)]
enum EccDefault {
    /// A data-centre part: it ships with ECC on.
    On,
    /// A GeForce or workstation part: it ships with ECC off.
    Off,
    /// A model gpucheck's table lacks: judged against the other GPUs here.
    Unknown,
}

fn ecc_default(name: &str) -> EccDefault {
    match sku::by_nvml_name(name) {
        Some(s) if s.ecc_default_on => EccDefault::On,
        Some(_) => EccDefault::Off,
        None => EccDefault::Unknown,
    }
}

fn ecc_on_now(g: &PerGpu<EccFacts>) -> bool {
    matches!(&g.facts, Ok(f) if matches!(f.mode, Ok(m) if m.current))
}

/// Judge ECC state, error counters, retired pages and remapped rows.
pub fn evaluate_ecc(gpus: &[PerGpu<EccFacts>], t: &EccThresholds) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    let mut supported = 0;
    let mut on = 0;
    let siblings_on = gpus.iter().any(ecc_on_now);
    for g in gpus {
        let i = g.gpu.index;
        let Ok(f) = &g.facts else {
            devices.push(na_row(&g.gpu, &findings));
            continue;
        };
        let mut metrics = Vec::new();
        let ecc_supported = !matches!(f.mode, Err(Unavailable::NotSupported));
        if ecc_supported {
            supported += 1;
        }
        if ecc_on_now(g) {
            on += 1;
        }
        let default = ecc_default(&g.gpu.name);
        findings
            .items
            .extend(ecc_mode(i, &f.mode, default, siblings_on));
        error_counts(i, f, t, &mut findings, &mut metrics);
        retired_pages(i, f, t, &mut findings, &mut metrics);
        remapped_rows(i, &f.remapped_rows, t, &mut findings, &mut metrics);
        let ok = match &f.mode {
            Ok(m) if !m.current => "ECC off".to_string(),
            _ if ecc_supported => format!(
                "ECC on, {} uncorrectable, {} correctable",
                shown(&f.volatile_uncorrected),
                shown(&f.volatile_corrected)
            ),
            _ => "ECC not supported (n/a)".to_string(),
        };
        devices.push(findings.device_result(row(&g.gpu, metrics), ok));
    }
    if on == 0 && findings.worst() < Status::Warn {
        return without_ecc(gpus, supported, devices);
    }
    let with_ecc = if on == gpus.len() {
        gpu_count(on)
    } else {
        format!("{on} of {} GPUs with ECC on", gpus.len())
    };
    let pending_known = gpus.iter().any(|g| {
        g.facts
            .as_ref()
            .is_ok_and(|f| f.pages_pending_retirement.is_ok() || f.remapped_rows.is_ok())
    });
    let pass = if pending_known {
        format!("{with_ecc}: no uncorrectable ECC errors, nothing pending retirement or remap")
    } else {
        format!("{with_ecc}: no uncorrectable ECC errors")
    };
    findings.conclude(pass, devices)
}

/// The verdict where no GPU has ECC on and nothing is wrong: not
/// applicable where no GPU offers ECC, else a pass that says ECC is off as
/// the cards ship.
fn without_ecc(gpus: &[PerGpu<EccFacts>], supported: usize, devices: Vec<DeviceResult>) -> Outcome {
    let these = if gpus.len() == 1 {
        "this GPU"
    } else {
        "these GPUs"
    };
    let mut o = if supported == 0 {
        Outcome::skip(format!(
            "ECC not supported on {these} (n/a): nothing to check"
        ))
    } else {
        let known = gpus
            .iter()
            .all(|g| ecc_default(&g.gpu.name) == EccDefault::Off);
        let why = if known {
            "as the card ships (the default of GeForce and workstation cards)"
        } else {
            "on every GPU here (a model gpucheck's table lacks: judged against its siblings)"
        };
        Outcome::pass(format!(
            "{}: ECC off, {why}; error counts not kept",
            gpu_count(gpus.len())
        ))
    };
    o.devices = devices;
    o
}

const ECC_ON_HINT: &str = "with ECC off, memory errors corrupt training silently: enable it \
with `sudo nvidia-smi -i {ids} -e 1`, then reset the GPU or reboot";

/// ECC off, or switched on or off for the next reset. ECC off where the
/// part ships with it off (GeForce, workstation cards) is the card's
/// default and only noted; for a model the table lacks, it warns only when
/// another GPU here has ECC on.
fn ecc_mode(
    i: u32,
    mode: &Reading<EccMode>,
    default: EccDefault,
    siblings_on: bool,
) -> Option<Finding> {
    match mode {
        Ok(m) if !m.current && m.pending => Some(
            Finding::new(Some(i), Status::Warn, "ECC off (on after the next reset)")
                .hint(
                    "ECC is switched on for {gpus} but takes effect only after a reset: stop its \
                 jobs, then `sudo nvidia-smi -r -i {ids}` or reboot",
                )
                .action(Action::ResetGpu),
        ),
        Ok(m) if !m.current => Some(match default {
            EccDefault::On => Finding::new(Some(i), Status::Warn, "ECC off")
                .hint(ECC_ON_HINT)
                .action(Action::FixConfig),
            EccDefault::Unknown if siblings_on => Finding::new(
                Some(i),
                Status::Warn,
                "ECC off while other GPUs here have it on",
            )
            .hint(ECC_ON_HINT)
            .action(Action::FixConfig),
            EccDefault::Off => Finding::new(Some(i), Status::Pass, "the card's default"),
            EccDefault::Unknown => Finding::new(
                Some(i),
                Status::Pass,
                "as on the other GPUs here; model not in gpucheck's table",
            ),
        }),
        Ok(m) if !m.pending => Some(
            Finding::new(
                Some(i),
                Status::Warn,
                "ECC on now, off after the next reset",
            )
            .hint(
                "ECC was switched off for {gpus} and goes off at its next reset or reboot, \
                     after which memory errors corrupt training silently: keep it on with \
                     `sudo nvidia-smi -i {ids} -e 1`",
            )
            .action(Action::FixConfig),
        ),
        Ok(_) => None,
        Err(e) => unreadable(i, "the ECC mode", e),
    }
}

/// Uncorrectable errors since the driver loaded fail; very many correctable
/// ones warn.
fn error_counts(
    i: u32,
    f: &EccFacts,
    t: &EccThresholds,
    findings: &mut Findings,
    metrics: &mut Vec<Metric>,
) {
    match &f.volatile_uncorrected {
        Ok(n) => {
            metrics.push(Metric::new("ecc_volatile_uncorrected", *n as f64, "count"));
            if *n > t.max_volatile_uncorrected {
                findings.push(
                    Finding::new(
                        Some(i),
                        Status::Fail,
                        format!("{n} uncorrectable ECC errors since the driver loaded"),
                    )
                    .hint(
                        "{gpus} hit uncorrectable memory errors (the jobs on it were killed): \
                         drain it and reset it (`sudo nvidia-smi -r -i {ids}`) or reboot; if \
                         they return, have it serviced (`sudo dmesg | grep -i xid` shows Xid \
                         48/63/64/94/95)",
                    )
                    .action(Action::ResetGpu),
                );
            }
        }
        Err(e) => findings
            .items
            .extend(unreadable(i, "the uncorrectable ECC count", e)),
    }
    match &f.volatile_corrected {
        Ok(n) => {
            metrics.push(Metric::new("ecc_volatile_corrected", *n as f64, "count"));
            if *n > t.warn_volatile_corrected {
                findings.push(
                    Finding::new(
                        Some(i),
                        Status::Warn,
                        format!(
                            "{n} correctable ECC errors since the driver loaded (above {})",
                            t.warn_volatile_corrected
                        ),
                    )
                    .hint(
                        "correctable errors are repaired, but a count this high often comes \
                         before uncorrectable ones: watch `nvidia-smi -q -d ECC -i {ids}` and \
                         plan to have {gpus} serviced",
                    )
                    .action(Action::ServiceHardware),
                );
            }
        }
        Err(e) => findings
            .items
            .extend(unreadable(i, "the correctable ECC count", e)),
    }
    if let Ok(n) = &f.aggregate_uncorrected {
        metrics.push(Metric::new("ecc_aggregate_uncorrected", *n as f64, "count"));
    }
}

/// Retired pages above DCGM's limits, and pages waiting for a reset to be
/// retired.
fn retired_pages(
    i: u32,
    f: &EccFacts,
    t: &EccThresholds,
    findings: &mut Findings,
    metrics: &mut Vec<Metric>,
) {
    let retired = match (&f.retired_pages_sbe, &f.retired_pages_dbe) {
        (Ok(a), Ok(b)) => Some(a.saturating_add(*b)),
        (Ok(a), Err(_)) | (Err(_), Ok(a)) => Some(*a),
        (Err(e), Err(_)) => {
            findings.items.extend(unreadable(i, "the retired pages", e));
            None
        }
    };
    if let Some(n) = retired {
        metrics.push(Metric::new("retired_pages", n as f64, "count"));
        if n > t.max_retired_pages {
            findings.push(
                Finding::new(
                    Some(i),
                    Status::Fail,
                    format!("{n} retired memory pages (limit {})", t.max_retired_pages),
                )
                .hint(RMA_HINT)
                .action(Action::ServiceHardware),
            );
        } else if n > t.warn_retired_pages {
            findings.push(
                Finding::new(
                    Some(i),
                    Status::Warn,
                    format!(
                        "{n} retired memory pages (more than {})",
                        t.warn_retired_pages
                    ),
                )
                .hint(
                    "{gpus} keeps retiring memory pages: watch the count with `nvidia-smi -q \
                     -d PAGE_RETIREMENT -i {ids}` and plan a replacement before it reaches the \
                     limit",
                )
                .action(Action::ServiceHardware),
            );
        }
    }
    match &f.pages_pending_retirement {
        Ok(true) => findings.push(
            Finding::new(Some(i), Status::Fail, "memory pages pending retirement")
                .hint(RESET_HINT)
                .action(Action::ResetGpu),
        ),
        Ok(false) => {}
        Err(e) => findings
            .items
            .extend(unreadable(i, "the page retirement status", e)),
    }
}

/// Row remapping that failed or ran past DCGM's limit, and a remap waiting
/// for a reset.
fn remapped_rows(
    i: u32,
    rows: &Reading<RemappedRows>,
    t: &EccThresholds,
    findings: &mut Findings,
    metrics: &mut Vec<Metric>,
) {
    let r = match rows {
        Ok(r) => r,
        Err(e) => {
            findings.items.extend(unreadable(i, "the remapped rows", e));
            return;
        }
    };
    metrics.push(Metric::new(
        "remapped_rows_correctable",
        r.correctable as f64,
        "count",
    ));
    metrics.push(Metric::new(
        "remapped_rows_uncorrectable",
        r.uncorrectable as f64,
        "count",
    ));
    if r.failed {
        findings.push(
            Finding::new(Some(i), Status::Fail, "row remapping failed")
                .hint(RMA_HINT)
                .action(Action::ServiceHardware),
        );
    } else if r.uncorrectable > t.max_uncorrectable_row_remaps {
        findings.push(
            Finding::new(
                Some(i),
                Status::Fail,
                format!(
                    "{} rows remapped for uncorrectable errors (limit {})",
                    r.uncorrectable, t.max_uncorrectable_row_remaps
                ),
            )
            .hint(RMA_HINT)
            .action(Action::ServiceHardware),
        );
    }
    if r.pending {
        findings.push(
            Finding::new(Some(i), Status::Fail, "row remap pending")
                .hint(RESET_HINT)
                .action(Action::ResetGpu),
        );
    }
}

pub struct Ecc;

impl Check for Ecc {
    fn id(&self) -> &'static str {
        "gpu.ecc"
    }
    fn title(&self) -> &'static str {
        "ECC and memory health"
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
        "Checks every GPU's memory health: ECC mode, uncorrectable and correctable ECC error counts since \
the driver loaded, retired pages, and row remapping.

A DDP job is only as reliable as its least healthy GPU: one uncorrectable memory error kills the \
process on that GPU and with it the whole job, or, with ECC off, silently corrupts the weights.

Uncorrectable errors (any, as gcm, Azure and Imbue judge it) fail: drain the GPU and reset it \
(`sudo nvidia-smi -r -i N`) or reboot; if they return, have it serviced. Pages pending retirement or \
a row remap pending also fail: the repair completes only after a GPU reset or reboot. A failed row \
remap, more than 512 uncorrectable row remaps or more than 63 retired pages (DCGM's limits) mean the \
memory cannot be repaired in the field: RMA.

Very high correctable counts (above 20 million, Azure's limit) and more than 15 retired pages warn: \
watch them. ECC off warns on parts that ship with it on (data-centre GPUs: `sudo nvidia-smi -e 1`, \
then reset). GeForce and workstation cards (RTX 4090, RTX 6000 Ada, RTX A5000, RTX PRO 6000) ship \
with ECC off: that passes and says it is the card's default. For a model gpucheck's table does not \
know, ECC off warns only when another GPU of the machine has it on, and the result says it was \
judged against its siblings. GPUs that offer no ECC at all (RTX 3090 and older GeForce) are not \
applicable and skip.

Repair action: reset_gpu for uncorrectable errors, pending retirements and pending row remaps; \
service_hardware for a failed remap, counts past the limits, pages still being retired and very \
high correctable counts; fix_config for ECC switched off; for the GPUs concerned."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        if let Some(skip) = nothing_counted(ctx) {
            return skip;
        }
        match nvml::ecc(lib(ctx)) {
            Ok(gpus) => judge_answering(gpus, &lost_in_count(ctx), |gpus| {
                evaluate_ecc(gpus, &EccThresholds::default())
            }),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::judge_answering;
    use crate::gpu::common::testing::*;
    use crate::gpu::Driver;
    use crate::probe::nvml::{EccFacts, EccMode, RemappedRows, Unavailable};
    use crate::Status;

    fn healthy_ecc() -> EccFacts {
        EccFacts {
            mode: Ok(EccMode {
                current: true,
                pending: true,
            }),
            volatile_uncorrected: Ok(0),
            volatile_corrected: Ok(0),
            aggregate_uncorrected: Ok(0),
            retired_pages_sbe: Err(Unavailable::NotSupported),
            retired_pages_dbe: Err(Unavailable::NotSupported),
            pages_pending_retirement: Err(Unavailable::NotSupported),
            remapped_rows: Ok(RemappedRows::default()),
        }
    }

    fn ecc_with(f: impl Fn(&mut EccFacts)) -> Outcome {
        let mut sick = healthy_ecc();
        f(&mut sick);
        evaluate_ecc(
            &[per(0, healthy_ecc()), per(1, sick)],
            &EccThresholds::default(),
        )
    }

    #[test]
    fn healthy_ecc_passes() {
        let o = ecc_with(|_| {});
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "2 GPUs: no uncorrectable ECC errors, nothing pending retirement or remap"
        );
        assert_eq!(
            o.devices[0].summary,
            "ECC on, 0 uncorrectable, 0 correctable"
        );
        assert_eq!(o.hint, None);
    }

    #[test]
    fn any_volatile_uncorrectable_error_fails() {
        let o = ecc_with(|f| f.volatile_uncorrected = Ok(1));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: 1 uncorrectable ECC errors since the driver loaded"
        );
        assert!(hint(&o).starts_with("GPU 1 hit uncorrectable memory errors"));
        assert!(hint(&o).contains("sudo nvidia-smi -r -i 1"));
        assert_eq!(o.devices[0].status, Status::Pass);
        assert_eq!(o.devices[1].status, Status::Fail);
    }

    #[test]
    fn pages_pending_retirement_fail_with_a_reset_hint() {
        let o = ecc_with(|f| {
            f.remapped_rows = Err(Unavailable::NotSupported);
            f.retired_pages_dbe = Ok(2);
            f.retired_pages_sbe = Ok(0);
            f.pages_pending_retirement = Ok(true);
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 1: memory pages pending retirement");
        assert!(hint(&o).starts_with("GPU 1 must be reset"));
        assert!(hint(&o).contains("sudo nvidia-smi -r -i 1"));
    }

    #[test]
    fn a_pending_row_remap_fails_with_a_reset_hint() {
        let o = ecc_with(|f| {
            f.remapped_rows = Ok(RemappedRows {
                correctable: 0,
                uncorrectable: 1,
                pending: true,
                failed: false,
            })
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 1: row remap pending");
        assert!(hint(&o).contains("must be reset to finish retiring or remapping"));
    }

    #[test]
    fn a_failed_row_remap_fails_with_rma() {
        let o = ecc_with(|f| {
            f.remapped_rows = Ok(RemappedRows {
                failed: true,
                ..RemappedRows::default()
            })
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 1: row remapping failed");
        assert!(hint(&o).contains("RMA"), "{}", hint(&o));
    }

    #[test]
    fn uncorrectable_row_remaps_fail_above_the_dcgm_limit() {
        let at = ecc_with(|f| {
            f.remapped_rows = Ok(RemappedRows {
                uncorrectable: MAX_UNCORRECTABLE_ROW_REMAPS,
                ..RemappedRows::default()
            })
        });
        assert_eq!(at.status, Status::Pass);
        let over = ecc_with(|f| {
            f.remapped_rows = Ok(RemappedRows {
                uncorrectable: MAX_UNCORRECTABLE_ROW_REMAPS + 1,
                ..RemappedRows::default()
            })
        });
        assert_eq!(over.status, Status::Fail);
        assert_eq!(
            over.summary,
            "GPU 1: 513 rows remapped for uncorrectable errors (limit 512)"
        );
        assert!(hint(&over).contains("RMA"));
    }

    #[test]
    fn retired_pages_warn_above_15_and_fail_above_63() {
        let pages = |n: u32| {
            ecc_with(move |f| {
                f.retired_pages_sbe = Ok(n);
                f.retired_pages_dbe = Ok(0);
                f.pages_pending_retirement = Ok(false);
            })
        };
        assert_eq!(pages(15).status, Status::Pass);
        let warn = pages(16);
        assert_eq!(warn.status, Status::Warn);
        assert_eq!(
            warn.summary,
            "GPU 1: 16 retired memory pages (more than 15)"
        );
        assert!(hint(&warn).contains("plan a replacement"));
        assert_eq!(pages(63).status, Status::Warn);
        let fail = pages(64);
        assert_eq!(fail.status, Status::Fail);
        assert_eq!(fail.summary, "GPU 1: 64 retired memory pages (limit 63)");
        assert!(hint(&fail).contains("RMA"));
    }

    #[test]
    fn very_many_correctable_errors_warn() {
        let at = ecc_with(|f| f.volatile_corrected = Ok(WARN_VOLATILE_CORRECTED_ECC));
        assert_eq!(at.status, Status::Pass);
        let o = ecc_with(|f| f.volatile_corrected = Ok(WARN_VOLATILE_CORRECTED_ECC + 1));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 1: 20000001 correctable ECC errors since the driver loaded (above 20000000)"
        );
        assert!(hint(&o).contains("nvidia-smi -q -d ECC -i 1"));
    }

    #[test]
    fn ecc_off_warns() {
        let o = ecc_with(|f| {
            f.mode = Ok(EccMode {
                current: false,
                pending: false,
            })
        });
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: ECC off");
        assert!(hint(&o).contains("sudo nvidia-smi -i 1 -e 1"));
    }

    #[test]
    fn absurd_retired_page_counts_fail_without_overflowing() {
        let o = ecc_with(|f| {
            f.retired_pages_sbe = Ok(u32::MAX);
            f.retired_pages_dbe = Ok(5);
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            format!("GPU 1: {} retired memory pages (limit 63)", u32::MAX)
        );
    }

    fn ecc_off() -> EccFacts {
        EccFacts {
            mode: Ok(EccMode {
                current: false,
                pending: false,
            }),
            volatile_uncorrected: Err(Unavailable::NotSupported),
            volatile_corrected: Err(Unavailable::NotSupported),
            aggregate_uncorrected: Err(Unavailable::NotSupported),
            retired_pages_sbe: Err(Unavailable::NotSupported),
            retired_pages_dbe: Err(Unavailable::NotSupported),
            pages_pending_retirement: Err(Unavailable::NotSupported),
            remapped_rows: Ok(RemappedRows::default()),
        }
    }

    #[test]
    fn ecc_off_on_cards_that_ship_with_it_off_passes() {
        for name in [
            "NVIDIA GeForce RTX 4090",
            "NVIDIA RTX 6000 Ada Generation",
            "NVIDIA RTX A5000",
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        ] {
            let o = evaluate_ecc(
                &[named(0, name, ecc_off()), named(1, name, ecc_off())],
                &EccThresholds::default(),
            );
            assert_eq!(o.status, Status::Pass, "{name}: {}", o.summary);
            assert_eq!(
                o.summary,
                "2 GPUs: ECC off, as the card ships (the default of GeForce and workstation \
                 cards); error counts not kept"
            );
            assert_eq!(o.devices[1].summary, "ECC off (the card's default)");
            assert_eq!(o.hint, None);
        }
    }

    #[test]
    fn ecc_off_on_a_data_centre_part_warns_beside_a_workstation_card() {
        let o = evaluate_ecc(
            &[
                named(0, "NVIDIA RTX A6000", ecc_off()),
                named(1, "NVIDIA A10G", ecc_off()),
            ],
            &EccThresholds::default(),
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: ECC off");
        assert!(
            hint(&o).contains("sudo nvidia-smi -i 1 -e 1"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.devices[0].status, Status::Pass);
    }

    #[test]
    fn an_unknown_model_is_judged_against_its_siblings_and_says_so() {
        let card = "NVIDIA GeForce RTX 4080 SUPER";
        let all_off = evaluate_ecc(
            &[named(0, card, ecc_off()), named(1, card, ecc_off())],
            &EccThresholds::default(),
        );
        assert_eq!(all_off.status, Status::Pass);
        assert!(
            all_off.summary.contains("judged against its siblings"),
            "{}",
            all_off.summary
        );
        let one_off = evaluate_ecc(
            &[named(0, card, healthy_ecc()), named(1, card, ecc_off())],
            &EccThresholds::default(),
        );
        assert_eq!(one_off.status, Status::Warn);
        assert_eq!(
            one_off.summary,
            "GPU 1: ECC off while other GPUs here have it on"
        );
        assert!(hint(&one_off).contains("-e 1"), "{}", hint(&one_off));
    }

    #[test]
    fn ecc_switched_on_but_not_yet_reset_says_reset_only() {
        let o = ecc_with(|f| {
            f.mode = Ok(EccMode {
                current: false,
                pending: true,
            })
        });
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: ECC off (on after the next reset)");
        assert!(hint(&o).contains("sudo nvidia-smi -r -i 1"), "{}", hint(&o));
        assert!(!hint(&o).contains("-e 1"), "{}", hint(&o));
    }

    #[test]
    fn ecc_switched_off_for_the_next_reset_warns() {
        let o = ecc_with(|f| {
            f.mode = Ok(EccMode {
                current: true,
                pending: false,
            })
        });
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 1: ECC on now, off after the next reset");
        assert!(
            hint(&o).contains("sudo nvidia-smi -i 1 -e 1"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn ecc_not_supported_anywhere_is_not_applicable() {
        let geforce = || EccFacts {
            mode: Err(Unavailable::NotSupported),
            volatile_uncorrected: Err(Unavailable::NotSupported),
            volatile_corrected: Err(Unavailable::NotSupported),
            aggregate_uncorrected: Err(Unavailable::NotSupported),
            retired_pages_sbe: Err(Unavailable::NotSupported),
            retired_pages_dbe: Err(Unavailable::NotSupported),
            pages_pending_retirement: Err(Unavailable::NotSupported),
            remapped_rows: Err(Unavailable::NotSupported),
        };
        let o = evaluate_ecc(
            &[per(0, geforce()), per(1, geforce())],
            &EccThresholds::default(),
        );
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.summary,
            "ECC not supported on these GPUs (n/a): nothing to check"
        );
        assert_eq!(o.devices[0].summary, "ECC not supported (n/a)");
        // One GPU with ECC among GPUs without: judged, and said so.
        let o = evaluate_ecc(
            &[per(0, healthy_ecc()), per(1, geforce())],
            &EccThresholds::default(),
        );
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.starts_with("1 of 2 GPUs with ECC on"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn an_nvml_error_is_an_error_and_a_lost_gpu_a_failure() {
        let o =
            ecc_with(|f| f.volatile_uncorrected = Err(Unavailable::Failed("Unknown Error".into())));
        assert_eq!(o.status, Status::Error);
        assert_eq!(
            o.summary,
            "GPU 1: could not read the uncorrectable ECC count: Unknown Error"
        );
        assert!(hint(&o).contains("nvidia-smi -q -i 1"));
        let o = evaluate_ecc(&[per(0, healthy_ecc()), lost(1)], &EccThresholds::default());
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 1: GPU is lost (fallen off the bus)");
        assert!(hint(&o).contains("Xid 79"));
    }

    #[test]
    fn one_hint_names_every_gpu_it_applies_to() {
        let sick = || {
            let mut f = healthy_ecc();
            f.volatile_uncorrected = Ok(3);
            f
        };
        let o = evaluate_ecc(
            &[per(0, healthy_ecc()), per(1, sick()), per(3, sick())],
            &EccThresholds::default(),
        );
        assert_eq!(o.status, Status::Fail);
        assert!(
            hint(&o).starts_with("GPUs 1, 3 hit uncorrectable"),
            "{}",
            hint(&o)
        );
        assert!(
            hint(&o).contains("sudo nvidia-smi -r -i 1,3"),
            "{}",
            hint(&o)
        );
        assert_eq!(hint(&o).matches("hit uncorrectable").count(), 1);
    }

    #[test]
    fn a_gpu_the_count_found_lost_is_marked_and_the_rest_judged() {
        let mut sick = healthy_ecc();
        sick.volatile_uncorrected = Ok(2);
        let judge = |gpus: &[PerGpu<EccFacts>]| evaluate_ecc(gpus, &EccThresholds::default());
        let gpus = || vec![per(0, healthy_ecc()), lost(1), per(2, sick.clone())];
        // gpu.count failed GPU 1 as lost: its verdict, marked here.
        let o = judge_answering(gpus(), &[1], judge);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 2: 2 uncorrectable ECC errors since the driver loaded; GPU 1 lost: see gpu.count"
        );
        assert!(!hint(&o).contains("fell off the bus"), "{}", hint(&o));
        let rows: Vec<(u32, Status)> = o.devices.iter().map(|d| (d.index, d.status)).collect();
        assert_eq!(
            rows,
            [(0, Status::Pass), (1, Status::Skip), (2, Status::Fail)]
        );
        assert_eq!(
            o.devices[1].summary,
            "lost (fallen off the bus): gpu.count fails it"
        );
        // Without gpu.count's word, the lost GPU fails here.
        let o = judge_answering(gpus(), &[], judge);
        assert!(o.summary.starts_with("GPU 1: GPU is lost"), "{}", o.summary);
        assert!(hint(&o).contains("GPU 1 fell off the bus"), "{}", hint(&o));
    }

    #[test]
    fn timeout_hint_names_the_check() {
        assert!(Ecc.timeout_hint().contains("--skip gpu.ecc"));
        assert!(Driver.timeout() > Ecc.timeout());
    }
}

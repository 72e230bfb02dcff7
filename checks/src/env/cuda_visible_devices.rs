//! env.cuda_visible_devices: which GPUs a CUDA process will see, in which
//! order, and what CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES and
//! CUDA_DEVICE_ORDER silently hide. The parsing and mapping rules live in
//! [`crate::domain::visible_devices`]; this file judges what they say.

use super::device_text::{
    device_rows, devices_text, distinct_models, gpu_count_text, gpu_models, gpu_of, target_long,
    target_short, targets_short, targets_summary, SUMMARY_MAX_DEVICES,
};
use crate::domain::text::{list_cut, quote_value, seconds};
use crate::domain::visible_devices::{
    map_visible_devices, parse_cuda_visible_devices, repaired_visible_devices,
    repaired_visible_devices_on, DeviceToken, Mapping, NvmlGpu, Target, Unresolved, VisibleDevices,
};
use crate::facts::nvml::{inventory_for_run, nvml_hung, wait_for};
use crate::findings::{Finding, Findings};
use crate::probe::host::env_lossy;
use crate::probe::nvml;
use crate::{Check, Context, DeviceResult, Outcome, Profile, Status};

pub struct CudaVisibleDevices;

/// What `env.cuda_visible_devices` judges: the variables as set (lossy), and
/// the GPUs NVML reports (`None` when NVML is not usable).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VisibilityFacts {
    pub cuda_visible_devices: Option<String>,
    pub nvidia_visible_devices: Option<String>,
    pub cuda_device_order: Option<String>,
    pub gpus: Option<Vec<NvmlGpu>>,
}

/// Longest corrected CUDA_VISIBLE_DEVICES a hint offers (24 full GPU UUIDs).
const REPAIR_MAX_CHARS: usize = 1024;

/// Most entries the `cuda_visible_effective` fact spells out (no node has
/// more GPUs; a hostile value may have thousands of entries).
const FACT_MAX_DEVICES: usize = 64;

/// The summary note when NVML could not be asked.
const NOT_CROSS_CHECKED: &str = "not checked against the GPUs: NVML not usable";

/// The GPUs NVML reports, or why the cross-check is not possible. NVML is
/// not asked when gpu.driver already found it unusable; otherwise the GPU
/// list is the one gpu.count published, or asked now under the shared hang
/// guard: a hung driver is gpu.driver's verdict, not this one's.
fn nvml_gpus(ctx: &Context) -> Result<Vec<NvmlGpu>, String> {
    if let Some(driver) = ctx.earlier("gpu.driver") {
        if !driver.status.satisfies_needs() {
            return Err(format!(
                "not possible: NVML is not usable (gpu.driver: {})",
                driver.status
            ));
        }
    }
    match inventory_for_run(ctx).0 {
        Ok(inventory) => Ok(NvmlGpu::from_inventory(&inventory)),
        // A call still in flight, and no earlier check that found NVML
        // hung: this check's own query timed out in it.
        Err(_) if nvml_hung(ctx).is_none() && nvml::hung_call().is_some() => Err(format!(
            "not possible: NVML did not answer within {} s{} (see gpu.driver)",
            seconds(wait_for(ctx).as_secs_f64()),
            nvml::hung_call()
                .map(|c| format!(", stuck in {c}"))
                .unwrap_or_default()
        )),
        Err(failure) => Err(format!("not possible: NVML is not usable ({failure})")),
    }
}

impl Check for CudaVisibleDevices {
    fn id(&self) -> &'static str {
        "env.cuda_visible_devices"
    }
    fn title(&self) -> &'static str {
        "CUDA_VISIBLE_DEVICES"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Parses CUDA_VISIBLE_DEVICES exactly as the CUDA driver does, maps every entry onto the GPUs NVML reports, and says which GPUs a CUDA process will see, in which order, and what the value silently hides.\n\n\
         The variable is a comma list of indices, GPU-<uuid> (or a unique prefix) and MIG-<uuid> \
         entries. CUDA stops reading at the first entry it cannot use and hides that entry and \
         everything after it without any message: `0,1,foo,2` gives two GPUs, not three, and on \
         an 8-GPU machine `0,9,1` gives one, because index 9 names no GPU. A UUID prefix that \
         matches no GPU, or more than one, ends the list the same way. An empty value or `-1` \
         hides every GPU, and naming a GPU twice (`0,0`, or an index and that GPU's UUID) \
         leaves none at all. A CUDA process can use only one MIG device, however many are \
         listed. DDP then fails with 'invalid device ordinal' or runs on fewer GPUs than \
         planned. An index with text after it (`1gpu`) is read as the number.\n\n\
         With a working driver the check shows the result as cuda:N -> GPU M (model, UUID), \
         with nvidia-smi's GPU numbers, in the summary and as per-device rows (`--verbose`). \
         Without one it judges the value alone and says the cross-check was not possible; \
         gpu.driver reports why.\n\n\
         Indices count GPUs in CUDA's enumeration order, which is fastest-first unless \
         CUDA_DEVICE_ORDER=PCI_BUS_ID; only then do they match nvidia-smi's numbering on a \
         machine with mixed GPU models. gpucheck warns when the list names indices and the order \
         is not PCI_BUS_ID. Inside containers, NVIDIA_VISIBLE_DEVICES tells the NVIDIA runtime \
         which GPUs to mount; `void` or `none` mounts none.\n\n\
         Fix: list each GPU once, separated by commas only, using indices below the GPU count \
         (`CUDA_VISIBLE_DEVICES=0,1,2,3`) or UUIDs from `nvidia-smi -L` (stable across reboots \
         and orderings; a prefix must be unique), `export CUDA_DEVICE_ORDER=PCI_BUS_ID`, give \
         each process its own MIG device or disable MIG to train on whole GPUs, or unset the \
         variable to use every GPU."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let (gpus, not_checked) = match nvml_gpus(ctx) {
            Ok(g) => (Some(g), None),
            Err(why) => (None, Some(why)),
        };
        let o = evaluate_visibility(&VisibilityFacts {
            cuda_visible_devices: env_lossy("CUDA_VISIBLE_DEVICES"),
            nvidia_visible_devices: env_lossy("NVIDIA_VISIBLE_DEVICES"),
            cuda_device_order: env_lossy("CUDA_DEVICE_ORDER"),
            gpus,
        });
        match not_checked {
            Some(why) => o.with_fact("gpu_cross_check", why),
            None => o,
        }
    }
}

/// What judging CUDA_VISIBLE_DEVICES found, and what CUDA will show.
#[derive(Default)]
struct Judged {
    findings: Findings,
    /// The mapping note leads the summary even when a warning decides the
    /// verdict: the mapping onto real GPUs is what a person looks for first.
    lead: bool,
    /// How many devices CUDA will enumerate; `None` when unknown.
    visible: Option<usize>,
    /// "cuda:0 -> GPU 2, ..." for the facts.
    effective: Option<String>,
    devices: Vec<DeviceResult>,
}

/// A machine-wide finding with its hint.
fn finding(status: Status, text: impl Into<String>, hint: impl Into<String>) -> Finding {
    Finding::new(None, status, text).hint(hint)
}

/// A note: what CUDA will see, when nothing is wrong with it.
fn note(text: impl Into<String>) -> Finding {
    Finding::new(None, Status::Pass, text)
}

/// Judge the GPU visibility variables.
pub fn evaluate_visibility(f: &VisibilityFacts) -> Outcome {
    let gpus = f.gpus.as_deref();
    let order = f.cuda_device_order.as_deref().map(str::trim);
    let pci_order = order == Some("PCI_BUS_ID");
    let mixed_models = gpus.is_some_and(|g| distinct_models(g) > 1);
    let mut indices = false;
    let mut judged = match f.cuda_visible_devices.as_deref() {
        None => judge_unset(gpus, pci_order),
        Some(value) => {
            let p = parse_cuda_visible_devices(value);
            indices = p.names_indices();
            judge_cuda_visible_devices(value, &p, gpus, !pci_order && mixed_models)
        }
    };
    if let Some(runtime) = container_runtime(f.nvidia_visible_devices.as_deref()) {
        judged.findings.push(runtime);
    }
    if let Some(order) = device_order(order, indices, gpus, mixed_models) {
        judged.findings.push(order);
    }
    conclude(f, judged)
}

/// NVIDIA_VISIBLE_DEVICES values that leave the container without GPUs.
fn container_runtime(nvidia_visible_devices: Option<&str>) -> Option<Finding> {
    const HINT: &str = "start the container with `--gpus all` (or `-e NVIDIA_VISIBLE_DEVICES=all`)";
    match nvidia_visible_devices.map(str::trim) {
        Some(v @ ("void" | "")) => Some(finding(
            Status::Warn,
            format!(
                "NVIDIA_VISIBLE_DEVICES={}: the NVIDIA container runtime mounts no GPU (and no driver) into the container",
                quote_value(v)
            ),
            HINT,
        )),
        Some("none") => Some(finding(
            Status::Warn,
            "NVIDIA_VISIBLE_DEVICES=\"none\": the NVIDIA container runtime mounts the driver but no GPU",
            HINT,
        )),
        _ => None,
    }
}

/// CUDA_DEVICE_ORDER: an unknown value, or indices counted fastest-first.
fn device_order(
    order: Option<&str>,
    indices: bool,
    gpus: Option<&[NvmlGpu]>,
    mixed_models: bool,
) -> Option<Finding> {
    match order {
        Some("PCI_BUS_ID") => None,
        Some(o) if o != "FASTEST_FIRST" => Some(finding(
            Status::Warn,
            format!(
                "CUDA_DEVICE_ORDER={} is not a value CUDA knows (PCI_BUS_ID or FASTEST_FIRST)",
                quote_value(o)
            ),
            "`export CUDA_DEVICE_ORDER=PCI_BUS_ID`",
        )),
        _ if indices => {
            let base = format!(
                "CUDA_DEVICE_ORDER is {}, so the indices count GPUs fastest-first",
                order
                    .map(quote_value)
                    .unwrap_or_else(|| "unset (FASTEST_FIRST)".into())
            );
            let text = match gpus {
                Some(g) if mixed_models => format!(
                    "{base}, and this machine mixes models ({}): index N may not be nvidia-smi's GPU N, which the mapping shown assumes",
                    gpu_models(g)
                ),
                Some(_) => format!(
                    "{base}, not in nvidia-smi's PCI order; the GPUs here are all one model, so the orders should agree, but only PCI_BUS_ID makes sure"
                ),
                None => format!(
                    "{base} and may not be nvidia-smi's GPUs on a machine with mixed models"
                ),
            };
            Some(finding(
                Status::Warn,
                text,
                "`export CUDA_DEVICE_ORDER=PCI_BUS_ID`, or name the GPUs by UUID (`nvidia-smi -L`)",
            ))
        }
        _ => None,
    }
}

/// The summary: the findings of the worst verdict, led by the mapping when
/// only warnings stand against it.
fn summary_of(judged: &Judged) -> String {
    let worst = judged.findings.worst();
    let items = &judged.findings.items;
    let mut parts: Vec<&str> = Vec::new();
    if worst == Status::Warn && judged.lead {
        parts.extend(
            items
                .iter()
                .filter(|x| x.status == Status::Pass)
                .map(|x| x.text.as_str()),
        );
    }
    parts.extend(
        items
            .iter()
            .filter(|x| x.status == worst)
            .map(|x| x.text.as_str()),
    );
    parts.join("; ")
}

/// The outcome: verdict, summary and hints from the findings; lesser
/// warnings keep their hint and are listed as a fact, so a failure stays
/// readable; the mapping and the variables as facts and device rows.
fn conclude(f: &VisibilityFacts, judged: Judged) -> Outcome {
    let worst = judged.findings.worst();
    let lesser = judged
        .findings
        .items
        .iter()
        .filter(|x| x.status != worst && x.status != Status::Pass)
        .map(|x| x.text.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let mut o = Outcome::new(worst, summary_of(&judged)).with_hint(judged.findings.hints());
    if !lesser.is_empty() {
        o = o.with_fact("also", lesser);
    }
    if let Some(n) = judged.visible {
        o = o.with_metric("visible_devices", n as f64, "count");
    }
    if let Some(e) = judged.effective {
        o = o.with_fact("cuda_visible_effective", e);
    }
    o = o.with_fact(
        "gpu_cross_check",
        match &f.gpus {
            Some(g) => format!("{} from NVML", gpu_count_text(g.len())),
            None => "not possible: NVML is not usable (see gpu.driver)".into(),
        },
    );
    for d in judged.devices {
        o = o.with_device(d);
    }
    for (key, value) in [
        ("cuda_visible_devices", &f.cuda_visible_devices),
        ("nvidia_visible_devices", &f.nvidia_visible_devices),
        ("cuda_device_order", &f.cuda_device_order),
    ] {
        o = o.with_fact(
            key,
            value
                .as_deref()
                .map(quote_value)
                .unwrap_or_else(|| "unset".into()),
        );
    }
    o
}

/// CUDA_VISIBLE_DEVICES unset: every GPU, in CUDA's order.
fn judge_unset(gpus: Option<&[NvmlGpu]>, pci_order: bool) -> Judged {
    const UNSET: &str = "CUDA_VISIBLE_DEVICES unset";
    let Some(gpus) = gpus else {
        return Judged {
            findings: Findings {
                items: vec![note(format!("{UNSET}: all GPUs visible"))],
            },
            ..Judged::default()
        };
    };
    let targets: Vec<Target> = gpus.iter().map(|g| Target::Gpu(g.index)).collect();
    let caveat = !pci_order && distinct_models(gpus) > 1;
    let text = match targets.as_slice() {
        [] => format!("{UNSET}: all GPUs visible, but NVML reports none (see gpu.count)"),
        [only] => format!("{UNSET}: cuda:0 -> {}", target_long(only, gpus)),
        _ => {
            let order = if caveat {
                "; CUDA counts them fastest-first (CUDA_DEVICE_ORDER is not PCI_BUS_ID), so cuda:N need not be GPU N"
            } else {
                ", cuda:N -> GPU N"
            };
            format!(
                "{UNSET}: all {} GPUs visible ({}){order}",
                gpus.len(),
                gpu_models(gpus)
            )
        }
    };
    Judged {
        findings: Findings {
            items: vec![note(text)],
        },
        lead: true,
        visible: Some(targets.len()),
        effective: Some(targets_short(&targets)),
        devices: device_rows(&targets, gpus, caveat),
    }
}

/// Hints that offer a corrected CUDA_VISIBLE_DEVICES.
struct Fix<'a> {
    value: &'a str,
    gpus: Option<&'a [NvmlGpu]>,
}

impl Fix<'_> {
    /// "`what`, e.g. `export CUDA_VISIBLE_DEVICES=0,1`, or unset it ...".
    fn hint(&self, what: &str) -> String {
        let repaired = match self.gpus {
            Some(g) => repaired_visible_devices_on(self.value, g),
            None => repaired_visible_devices(self.value),
        };
        // A hint is read by a person: a corrected list longer than a few
        // dozen UUIDs is not offered whole (an env value may be 128 KiB).
        match repaired.filter(|r| r.len() <= REPAIR_MAX_CHARS) {
            Some(r) => format!(
                "{what}, e.g. `export CUDA_VISIBLE_DEVICES={r}`, or unset it to use every GPU"
            ),
            None => format!("{what}, or `unset CUDA_VISIBLE_DEVICES` to use every GPU"),
        }
    }
}

/// "cuda:0 -> 2, cuda:1 -> 0", cut after `max` entries.
fn mapping(tokens: &[DeviceToken], max: usize) -> String {
    let each: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| format!("cuda:{i} -> {t}"))
        .collect();
    list_cut(&each, max)
}

fn judge_cuda_visible_devices(
    value: &str,
    p: &VisibleDevices,
    gpus: Option<&[NvmlGpu]>,
    order_caveat: bool,
) -> Judged {
    let fix = Fix { value, gpus };
    if let Some(f) = hides_everything(value, p, &fix) {
        return Judged {
            findings: Findings { items: vec![f] },
            visible: Some(0),
            effective: Some(if gpus.is_some() {
                "none".into()
            } else {
                String::new()
            }),
            ..Judged::default()
        };
    }
    let mut out = Judged::default();
    // What CUDA shows, in words; a mapping that stops short is a finding.
    let visible_text = match gpus {
        None => {
            out.visible = Some(p.tokens.len());
            out.effective = Some(mapping(&p.tokens, FACT_MAX_DEVICES));
            mapping(&p.tokens, SUMMARY_MAX_DEVICES)
        }
        Some(g) => judge_mapping(value, p, g, order_caveat, &fix, &mut out),
    };
    if out.findings.is_empty() {
        judge_list_end(value, p, gpus, &visible_text, &fix, &mut out);
    }
    entry_warnings(p, gpus, &fix, &mut out.findings);
    out
}

/// Values that leave CUDA no GPU at all: empty, a device named twice, or a
/// first entry CUDA cannot read ("-1").
fn hides_everything(value: &str, p: &VisibleDevices, fix: &Fix) -> Option<Finding> {
    let shown = quote_value(value);
    if value.trim().is_empty() {
        return Some(finding(
            Status::Fail,
            format!("CUDA_VISIBLE_DEVICES is set but empty ({shown}): CUDA sees no GPU"),
            "`unset CUDA_VISIBLE_DEVICES`, or list the GPUs: `export CUDA_VISIBLE_DEVICES=0,1`",
        ));
    }
    if let Some(dup) = &p.duplicate {
        return Some(finding(
            Status::Fail,
            format!(
                "CUDA_VISIBLE_DEVICES={shown} names {} twice: CUDA then sees no GPU at all",
                quote_value(dup)
            ),
            fix.hint("list each GPU once"),
        ));
    }
    let bad = p.invalid.as_ref().filter(|b| b.position == 0)?;
    let text = if value.trim() == "-1" {
        "CUDA_VISIBLE_DEVICES=\"-1\" hides every GPU".to_string()
    } else {
        format!(
            "CUDA_VISIBLE_DEVICES={shown}: the first entry is {}, so CUDA sees no GPU",
            bad.reason
        )
    };
    Some(finding(
        Status::Fail,
        text,
        fix.hint("list the GPUs to train on"),
    ))
}

/// Map the accepted entries onto the GPUs; a mapping that stops, names a
/// GPU twice or lists several MIG devices fails. Returns what CUDA shows.
fn judge_mapping(
    value: &str,
    p: &VisibleDevices,
    g: &[NvmlGpu],
    order_caveat: bool,
    fix: &Fix,
    out: &mut Judged,
) -> String {
    let shown = quote_value(value);
    let m = map_visible_devices(&p.tokens, g);
    let mut shown_targets = m.targets.clone();
    if let Some((pos, why)) = &m.stop {
        let stop = Stop::new(&shown, p, &m, *pos);
        let (text, hint) = match why {
            Unresolved::BeyondCount(i) => stop.beyond_count(*i, g, fix),
            Unresolved::NoMatch => stop.no_match(p, g, fix),
            Unresolved::Ambiguous(matches) => stop.ambiguous(matches, g, fix),
        };
        out.findings.push(finding(Status::Fail, text, hint));
    } else if let Some((first, second)) = m.duplicate {
        shown_targets.clear();
        out.findings.push(finding(
            Status::Fail,
            format!(
                "CUDA_VISIBLE_DEVICES={shown}: entries {} and {} both name {}: CUDA then sees no GPU at all",
                quote_value(&p.tokens[first].to_string()),
                quote_value(&p.tokens[second].to_string()),
                target_short(&m.targets[first])
            ),
            fix.hint("list each GPU once"),
        ));
    } else if m.mig_count() > 1 {
        shown_targets = first_mig_only(&m.targets);
        out.findings
            .push(several_mig_devices(&shown, &m, shown_targets.len()));
    }
    out.visible = Some(shown_targets.len());
    out.effective = Some(targets_short(&shown_targets));
    out.devices = device_rows(&shown_targets, g, order_caveat && p.names_indices());
    targets_summary(&shown_targets, g)
}

/// The first entry that names no device here, in the words every reason
/// shares.
struct Stop<'a> {
    shown: &'a str,
    /// 1-based position among the entries.
    number: usize,
    entry: String,
    /// "CUDA hides it and everything after it (...), so it sees only ...".
    consequence: String,
}

impl<'a> Stop<'a> {
    fn new(shown: &'a str, p: &VisibleDevices, m: &Mapping, pos: usize) -> Self {
        let sees = if m.targets.is_empty() {
            "so it sees no GPU".to_string()
        } else {
            format!("so it sees only {}", targets_short(&m.targets))
        };
        Stop {
            shown,
            number: pos + 1,
            entry: p.tokens[pos].to_string(),
            consequence: format!("{}, {sees}", hides(&hidden_from(p, pos + 1))),
        }
    }

    /// An index at or beyond the GPU count.
    fn beyond_count(&self, i: u32, g: &[NvmlGpu], fix: &Fix) -> (String, String) {
        let text = format!(
            "CUDA_VISIBLE_DEVICES={} names GPU {i} but this machine has {}: {}",
            self.shown,
            gpu_count_text(g.len()),
            self.consequence
        );
        let hint = if g.is_empty() {
            "NVML reports no GPU on this machine (see gpu.count)".to_string()
        } else {
            fix.hint(&format!(
                "use indices 0-{} (`nvidia-smi -L` lists the GPUs)",
                g.len() - 1
            ))
        };
        (text, hint)
    }

    /// A UUID (prefix) no GPU or MIG device has.
    fn no_match(&self, p: &VisibleDevices, g: &[NvmlGpu], fix: &Fix) -> (String, String) {
        let mig = matches!(p.tokens[self.number - 1], DeviceToken::Mig(_));
        let what = if mig { "MIG device" } else { "GPU" };
        let unread: Vec<String> = g
            .iter()
            .filter(|x| x.uuid.is_none())
            .map(|x| format!("GPU {}", x.index))
            .collect();
        let unread = if unread.is_empty() {
            String::new()
        } else {
            format!(" (NVML could not read the UUID of {})", unread.join(", "))
        };
        let text = format!(
            "CUDA_VISIBLE_DEVICES={}: entry {} ({}) matches no {what} on this machine{unread}: {}",
            self.shown,
            self.number,
            quote_value(&self.entry),
            self.consequence
        );
        (text, fix.hint(&self.no_match_hint(g, mig, what)))
    }

    /// The devices to choose from instead, and a case mismatch if that is
    /// all that is wrong.
    fn no_match_hint(&self, g: &[NvmlGpu], mig: bool, what: &str) -> String {
        let choices = valid_choices(g, mig);
        let mut hint = if choices.is_empty() {
            if mig {
                "no GPU here has MIG devices (MIG is off, or no instance is created): name whole GPUs instead (`nvidia-smi -L`)".to_string()
            } else {
                "NVML could read no GPU UUID here: name the GPUs by index".to_string()
            }
        } else {
            format!(
                "the {what}s here are {choices}; use one of these UUIDs or a prefix that names one (`nvidia-smi -L`)"
            )
        };
        let lower = self.entry.to_ascii_lowercase();
        let case = g.iter().find(|x| {
            x.uuid
                .as_deref()
                .is_some_and(|u| u.to_ascii_lowercase().starts_with(&lower))
        });
        if let Some(c) = case {
            hint.push_str(&format!(
                "; GPU {}'s UUID matches {} only ignoring case: write it as `nvidia-smi -L` prints it",
                c.index,
                quote_value(&self.entry)
            ));
        }
        hint
    }

    /// A UUID prefix several devices share.
    fn ambiguous(&self, matches: &[Target], g: &[NvmlGpu], fix: &Fix) -> (String, String) {
        let names: Vec<String> = matches.iter().map(target_short).collect();
        let listed = names
            .iter()
            .take(SUMMARY_MAX_DEVICES)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let more = if names.len() > SUMMARY_MAX_DEVICES {
            ", …"
        } else {
            ""
        };
        let full: Vec<String> = matches
            .iter()
            .take(SUMMARY_MAX_DEVICES)
            .map(|t| match t {
                Target::Gpu(i) => format!(
                    "GPU {i} is {}",
                    gpu_of(g, *i)
                        .and_then(|x| x.uuid.as_deref())
                        .unwrap_or("UUID n/a")
                ),
                Target::Mig { gpu, id } => format!("{id} is on GPU {gpu}"),
            })
            .collect();
        let text = format!(
            "CUDA_VISIBLE_DEVICES={}: entry {} ({}) matches {} devices ({listed}{more}), and CUDA needs a prefix that names one: {}",
            self.shown,
            self.number,
            quote_value(&self.entry),
            matches.len(),
            self.consequence
        );
        let hint = fix.hint(&format!(
            "write enough of the UUID to name one device ({})",
            full.join(", ")
        ));
        (text, hint)
    }
}

/// The targets as CUDA enumerates them: only the first MIG device counts.
/// NVIDIA MIG User Guide, "CUDA Device Enumeration": a CUDA process
/// enumerates a single MIG device, however many are made available
/// (confirmed in pytorch/pytorch#92315).
fn first_mig_only(targets: &[Target]) -> Vec<Target> {
    let mut kept_mig = false;
    let mut shown = targets.to_vec();
    shown.retain(|t| {
        let mig = matches!(t, Target::Mig { .. });
        let keep = !mig || !kept_mig;
        kept_mig |= mig;
        keep
    });
    shown
}

/// Several MIG devices listed: CUDA uses one, DDP cannot span them.
fn several_mig_devices(shown: &str, m: &Mapping, seen: usize) -> Finding {
    let mut mig_gpus: Vec<u32> = m
        .targets
        .iter()
        .filter_map(|t| match t {
            Target::Mig { gpu, .. } => Some(*gpu),
            Target::Gpu(_) => None,
        })
        .collect();
    mig_gpus.dedup();
    let mig_gpus: Vec<String> = mig_gpus.iter().map(u32::to_string).collect();
    finding(
        Status::Fail,
        format!(
            "CUDA_VISIBLE_DEVICES={shown} lists {} MIG devices, but a CUDA process can use only one MIG device: it sees {}, not {}, and DDP cannot span MIG devices",
            m.mig_count(),
            devices_text(seen),
            m.targets.len()
        ),
        format!(
            "give each process one MIG device of its own (`CUDA_VISIBLE_DEVICES=MIG-...`), or disable MIG to train on whole GPUs (`sudo nvidia-smi -i {} -mig 0`, then reset the GPU)",
            mig_gpus.join(",")
        ),
    )
}

/// How the list ends when the mapping did not stop it: a trailing comma, an
/// unreadable entry that hides the rest, or a clean list (the note).
fn judge_list_end(
    value: &str,
    p: &VisibleDevices,
    gpus: Option<&[NvmlGpu]>,
    visible_text: &str,
    fix: &Fix,
    out: &mut Judged,
) {
    let shown = quote_value(value);
    match &p.invalid {
        Some(bad) if bad.raw.trim().is_empty() && p.ignored.is_empty() => {
            out.findings.push(finding(
                Status::Warn,
                format!("CUDA_VISIBLE_DEVICES={shown} ends with a comma; visible: {visible_text}"),
                fix.hint("remove the trailing comma"),
            ));
        }
        Some(bad) => {
            let hidden = if p.ignored.is_empty() {
                String::new()
            } else {
                format!(" and everything after it ({})", quoted_list(&p.ignored))
            };
            out.findings.push(finding(
                Status::Fail,
                format!(
                    "CUDA_VISIBLE_DEVICES={shown}: entry {} ({}) is {}; CUDA silently hides it{hidden}; visible: {visible_text}",
                    bad.position + 1,
                    quote_value(&bad.raw),
                    bad.reason,
                ),
                fix.hint(&format!("fix or remove {}", quote_value(&bad.raw))),
            ));
        }
        None => {
            let text = match gpus {
                Some(_) => format!("CUDA_VISIBLE_DEVICES={shown}: {visible_text}"),
                None => {
                    format!("CUDA_VISIBLE_DEVICES={shown}: {visible_text} ({NOT_CROSS_CHECKED})")
                }
            };
            out.findings.push(note(text));
            out.lead = gpus.is_some();
        }
    }
}

/// Entries CUDA reads other than they look: text after a number, indices
/// mixed with UUIDs, a bare GPU-/MIG- prefix.
fn entry_warnings(p: &VisibleDevices, gpus: Option<&[NvmlGpu]>, fix: &Fix, out: &mut Findings) {
    // One finding for all of them: a value may hold thousands.
    match p.trailing_text.as_slice() {
        [] => {}
        [(raw, i)] => out.push(finding(
            Status::Warn,
            format!(
                "entry {} is read as {i} (CUDA ignores text after the number)",
                quote_value(raw)
            ),
            fix.hint("write plain numbers"),
        )),
        all => {
            let each: Vec<String> = all
                .iter()
                .map(|(raw, i)| format!("{} as {i}", quote_value(raw)))
                .collect();
            out.push(finding(
                Status::Warn,
                format!(
                    "entries are read as numbers, ignoring the text after them: {}",
                    list_cut(&each, SUMMARY_MAX_DEVICES)
                ),
                fix.hint("write plain numbers"),
            ));
        }
    }
    if p.mixes_kinds() {
        out.push(finding(
            Status::Warn,
            "the list mixes indices and UUIDs: PyTorch's own parser (used by torch.cuda.device_count before CUDA starts) reads only entries of the first kind, so it can disagree with CUDA",
            "use one kind, preferably UUIDs from `nvidia-smi -L`",
        ));
    }
    // Without the GPUs, a bare prefix can only be suspected; with them the
    // mapping says whether it names one GPU or several.
    if gpus.is_none()
        && p.tokens
            .iter()
            .any(|t| matches!(t, DeviceToken::Uuid(u) | DeviceToken::Mig(u) if u.len() == 4))
    {
        out.push(finding(
            Status::Warn,
            "an entry is a bare GPU-/MIG- prefix, which matches every GPU and is ambiguous on a machine with more than one",
            "write the UUID (or enough of it to be unique) from `nvidia-smi -L`",
        ));
    }
}

/// The entries CUDA silently drops from position `from` on: accepted ones
/// after it, the invalid one, and everything after that.
fn hidden_from(p: &VisibleDevices, from: usize) -> Vec<String> {
    p.tokens
        .iter()
        .skip(from)
        .map(|t| t.to_string())
        .chain(p.invalid.iter().map(|b| b.raw.clone()))
        .chain(p.ignored.iter().cloned())
        .collect()
}

/// "CUDA hides it and everything after it ("1", "2")".
fn hides(hidden: &[String]) -> String {
    if hidden.is_empty() {
        "CUDA hides it".into()
    } else {
        format!(
            "CUDA hides it and everything after it ({})",
            quoted_list(hidden)
        )
    }
}

/// ""1", "2"", each entry quoted, cut after eight with the count.
fn quoted_list(entries: &[String]) -> String {
    let quoted: Vec<String> = entries.iter().map(|e| quote_value(e)).collect();
    list_cut(&quoted, SUMMARY_MAX_DEVICES)
}

/// The GPUs (or MIG devices) a hint offers instead, at most eight.
fn valid_choices(gpus: &[NvmlGpu], mig: bool) -> String {
    let all: Vec<String> = if mig {
        gpus.iter()
            .flat_map(|g| {
                g.mig_uuids
                    .iter()
                    .map(move |u| format!("{u} (GPU {})", g.index))
            })
            .collect()
    } else {
        gpus.iter()
            .filter_map(|g| g.uuid.as_ref().map(|u| format!("GPU {} {u}", g.index)))
            .collect()
    };
    list_cut(&all, SUMMARY_MAX_DEVICES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::text::quote_value;
    use crate::probe::nvml::{GpuError, GpuInfo};

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    // ---- the verdicts

    fn vis(cvd: Option<&str>, nvd: Option<&str>, order: Option<&str>) -> Outcome {
        evaluate_visibility(&VisibilityFacts {
            cuda_visible_devices: cvd.map(String::from),
            nvidia_visible_devices: nvd.map(String::from),
            cuda_device_order: order.map(String::from),
            gpus: None,
        })
    }

    #[test]
    fn unset_passes_with_all_gpus_visible() {
        let o = vis(None, None, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "CUDA_VISIBLE_DEVICES unset: all GPUs visible");
        assert_eq!(o.metric("visible_devices"), None);
    }

    #[test]
    fn valid_list_with_pci_order_passes_with_mapping() {
        let o = vis(Some("2,0"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="2,0": cuda:0 -> 2, cuda:1 -> 0 (not checked against the GPUs: NVML not usable)"#
        );
        assert_eq!(o.metric("visible_devices"), Some(2.0));
    }

    #[test]
    fn indices_without_pci_order_warn() {
        let o = vis(Some("0,1"), None, None);
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("unset (FASTEST_FIRST)"), "{}", o.summary);
        assert!(
            hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            "{}",
            hint(&o)
        );
        let o = vis(Some("0"), None, Some("FASTEST_FIRST"));
        assert_eq!(o.status, Status::Warn);
    }

    #[test]
    fn uuids_or_unset_do_not_need_pci_order() {
        assert_eq!(vis(Some("GPU-abc"), None, None).status, Status::Pass);
        assert_eq!(vis(None, None, Some("FASTEST_FIRST")).status, Status::Pass);
    }

    #[test]
    fn unknown_device_order_warns() {
        let o = vis(None, None, Some("PCI"));
        assert_eq!(o.status, Status::Warn);
        assert!(o
            .summary
            .contains(r#"CUDA_DEVICE_ORDER="PCI" is not a value CUDA knows"#));
    }

    #[test]
    fn dropped_entries_fail_and_are_named() {
        let o = vis(Some("0,1,foo,2"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="0,1,foo,2": entry 3 ("foo") is not an index, GPU-<uuid> or MIG-<uuid>; CUDA silently hides it and everything after it ("2"); visible: cuda:0 -> 0, cuda:1 -> 1"#
        );
        assert!(
            hint(&o).contains("export CUDA_VISIBLE_DEVICES=0,1,2"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(2.0));
    }

    #[test]
    fn a_failure_keeps_lesser_warnings_out_of_the_summary() {
        let o = vis(Some("0,1,foo,2"), None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(!o.summary.contains("CUDA_DEVICE_ORDER"), "{}", o.summary);
        assert!(
            o.facts
                .get("also")
                .is_some_and(|a| a.to_string().contains("CUDA_DEVICE_ORDER")),
            "{:?}",
            o.facts
        );
        assert!(
            hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn empty_value_fails() {
        let o = vis(Some(""), None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("set but empty"), "{}", o.summary);
        assert!(
            hint(&o).contains("unset CUDA_VISIBLE_DEVICES"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(0.0));
    }

    #[test]
    fn minus_one_fails_hiding_everything() {
        let o = vis(Some("-1"), None, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, r#"CUDA_VISIBLE_DEVICES="-1" hides every GPU"#);
        assert!(
            hint(&o).contains("unset CUDA_VISIBLE_DEVICES"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn duplicate_fails() {
        let o = vis(Some("0,0"), None, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="0,0" names "0" twice: CUDA then sees no GPU at all"#
        );
        assert!(
            hint(&o).contains("export CUDA_VISIBLE_DEVICES=0"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn malformed_first_entry_fails() {
        let o = vis(Some("GPU-xyz"), None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("so CUDA sees no GPU"), "{}", o.summary);
        assert!(o.summary.contains("only hex digits"), "{}", o.summary);
    }

    #[test]
    fn short_uuid_prefix_passes() {
        let o = vis(Some("GPU-abc"), None, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="GPU-abc": cuda:0 -> GPU-abc (not checked against the GPUs: NVML not usable)"#
        );
    }

    #[test]
    fn trailing_comma_warns() {
        let o = vis(Some("0,1,"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("ends with a comma"), "{}", o.summary);
    }

    #[test]
    fn trailing_text_warns() {
        let o = vis(Some("0,1gpu"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains(r#"entry "1gpu" is read as 1"#),
            "{}",
            o.summary
        );
    }

    #[test]
    fn mixed_kinds_warn() {
        let o = vis(Some("0,GPU-abc"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("mixes indices and UUIDs"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn bare_prefix_warns() {
        let o = vis(Some("GPU-"), None, None);
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("bare GPU-/MIG- prefix"), "{}", o.summary);
    }

    #[test]
    fn nvidia_visible_devices_void_and_none_warn() {
        for v in ["void", "none", ""] {
            let o = vis(None, Some(v), None);
            assert_eq!(o.status, Status::Warn, "{v}");
            assert!(
                o.summary.contains("NVIDIA_VISIBLE_DEVICES"),
                "{}",
                o.summary
            );
            assert!(hint(&o).contains("--gpus all"), "{}", hint(&o));
        }
        let o = vis(None, Some("all"), None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.facts
                .get("nvidia_visible_devices")
                .and_then(|v| v.as_str()),
            Some(r#""all""#)
        );
    }

    #[test]
    fn hostile_bytes_are_escaped_in_the_summary() {
        let o = vis(Some("0,\u{1b}[31mx\n"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Fail);
        assert!(!o.summary.contains('\u{1b}'), "{}", o.summary);
        assert!(!o.summary.contains('\n'), "{}", o.summary);
        assert!(o.summary.contains(r"\u{1b}[31mx\n"), "{}", o.summary);
    }

    #[test]
    fn a_huge_value_gets_no_huge_hint() {
        let value = (0..20_000)
            .map(|i| i.to_string())
            .chain(["foo".to_string()])
            .collect::<Vec<_>>()
            .join(",");
        let o = evaluate_visibility(&VisibilityFacts {
            cuda_visible_devices: Some(value),
            cuda_device_order: Some("PCI_BUS_ID".into()),
            ..VisibilityFacts::default()
        });
        assert_eq!(o.status, Status::Fail);
        let hint = o.hint.as_deref().unwrap_or("");
        assert!(hint.len() < 400, "{} chars: {}", hint.len(), &hint[..400]);
        assert!(hint.contains("`unset CUDA_VISIBLE_DEVICES`"), "{hint}");
        assert!(o.summary.len() < 600, "{}", o.summary.len());
        assert!(
            o.summary.contains("cuda:7 -> 7, … (20000 in all)"),
            "{}",
            o.summary
        );
        let effective = o
            .facts
            .get("cuda_visible_effective")
            .and_then(|s| s.as_str())
            .unwrap_or_default();
        assert!(
            effective.starts_with("cuda:0 -> 0, cuda:1 -> 1"),
            "{effective}"
        );
        assert!(
            effective.ends_with("cuda:63 -> 63, … (20000 in all)"),
            "{effective}"
        );
    }

    #[test]
    fn many_entries_with_text_after_the_number_make_one_short_warning() {
        let value = (0..5000)
            .map(|i| format!("{i}gpu"))
            .collect::<Vec<_>>()
            .join(",");
        let o = vis(Some(&value), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains(
                r#"entries are read as numbers, ignoring the text after them: "0gpu" as 0, "1gpu" as 1"#
            ),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("… (5000 in all)"), "{}", o.summary);
        assert!(o.summary.len() < 1000, "{}", o.summary.len());
        assert!(o.hint.as_deref().unwrap_or("").len() < 400);
    }

    #[test]
    fn long_values_are_cut() {
        let long = "7".repeat(500);
        assert!(quote_value(&long).chars().count() < 90);
    }

    // ---- the cross-check against the GPUs NVML reports

    use crate::domain::visible_devices::fixtures::{
        gpu_uuid, gpus_named, h100s, mig_box, mig_uuid, H100,
    };
    const A100: &str = "NVIDIA A100-SXM4-80GB";

    fn on(gpus: &[NvmlGpu], cvd: Option<&str>, order: Option<&str>) -> Outcome {
        evaluate_visibility(&VisibilityFacts {
            cuda_visible_devices: cvd.map(String::from),
            nvidia_visible_devices: None,
            cuda_device_order: order.map(String::from),
            gpus: Some(gpus.to_vec()),
        })
    }

    const PCI: Option<&str> = Some("PCI_BUS_ID");

    fn device_summaries(o: &Outcome) -> Vec<&str> {
        o.devices.iter().map(|d| d.summary.as_str()).collect()
    }

    #[test]
    fn a_huge_value_on_eight_gpus_stays_readable() {
        let value = (0..20_000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let o = on(&h100s(8), Some(&value), PCI);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("names GPU 8"), "{}", &o.summary[..200]);
        assert!(
            o.summary
                .contains(r#"everything after it ("9", "10", "11", "12", "13", "14", "15", "16", … (19991 in all))"#),
            "{}",
            o.summary
        );
        assert!(o.summary.len() < 1500, "{} chars", o.summary.len());
        assert!(o.hint.as_deref().unwrap_or("").len() < 1500);
        assert_eq!(o.metric("visible_devices"), Some(8.0));
    }

    #[test]
    fn unset_with_eight_gpus_maps_every_ordinal() {
        let o = on(&h100s(8), None, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "CUDA_VISIBLE_DEVICES unset: all 8 GPUs visible (8x NVIDIA H100 80GB HBM3), cuda:N -> GPU N"
        );
        assert_eq!(o.metric("visible_devices"), Some(8.0));
        assert_eq!(o.devices.len(), 8);
        let d = &o.devices[3];
        assert_eq!(d.index, 3);
        assert_eq!(d.label.as_deref(), Some("cuda:3"));
        assert_eq!(d.uuid.as_deref(), Some(gpu_uuid(3).as_str()));
        assert_eq!(
            d.summary,
            format!("cuda:3 -> GPU 3 ({H100}, {})", gpu_uuid(3))
        );
        assert_eq!(
            o.facts.get("gpu_cross_check").and_then(|v| v.as_str()),
            Some("8 GPUs (0-7) from NVML")
        );
    }

    #[test]
    fn unset_with_one_gpu_names_it() {
        let o = on(&h100s(1), None, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            format!(
                "CUDA_VISIBLE_DEVICES unset: cuda:0 -> GPU 0 ({H100}, {})",
                gpu_uuid(0)
            )
        );
    }

    #[test]
    fn unset_on_mixed_models_says_cuda_counts_fastest_first() {
        let gpus = gpus_named(&[H100, H100, A100, A100]);
        let o = on(&gpus, None, None);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .contains("2x NVIDIA H100 80GB HBM3, 2x NVIDIA A100-SXM4-80GB"),
            "{}",
            o.summary
        );
        assert!(
            o.summary.contains("fastest-first") && o.summary.contains("need not be GPU N"),
            "{}",
            o.summary
        );
        assert!(o.devices[0].summary.contains("fastest-first"));
        // With PCI order the ordinals are nvidia-smi's.
        let o = on(&gpus, None, PCI);
        assert!(o.summary.ends_with("cuda:N -> GPU N"), "{}", o.summary);
        assert!(!o.devices[0].summary.contains("fastest-first"));
    }

    #[test]
    fn indices_map_to_nvml_gpus() {
        let o = on(&h100s(8), Some("2,5"), PCI);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="2,5": cuda:0 -> GPU 2, cuda:1 -> GPU 5 (2x NVIDIA H100 80GB HBM3)"#
        );
        assert_eq!(
            device_summaries(&o),
            [
                format!("cuda:0 -> GPU 2 ({H100}, {})", gpu_uuid(2)),
                format!("cuda:1 -> GPU 5 ({H100}, {})", gpu_uuid(5)),
            ]
        );
        assert_eq!(o.devices[1].index, 1);
        assert_eq!(o.metric("visible_devices"), Some(2.0));
        assert_eq!(
            o.facts
                .get("cuda_visible_effective")
                .and_then(|v| v.as_str()),
            Some("cuda:0 -> GPU 2, cuda:1 -> GPU 5")
        );
    }

    #[test]
    fn index_beyond_the_count_fails_and_hides_the_rest() {
        let o = on(&h100s(8), Some("0,9,1"), PCI);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="0,9,1" names GPU 9 but this machine has 8 GPUs (0-7): CUDA hides it and everything after it ("1"), so it sees only cuda:0 -> GPU 0"#
        );
        assert!(hint(&o).contains("use indices 0-7"), "{}", hint(&o));
        assert!(
            hint(&o).contains("export CUDA_VISIBLE_DEVICES=0,1`"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(1.0));
        assert_eq!(o.devices.len(), 1);

        let o = on(&h100s(8), Some("8"), PCI);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.ends_with(
                "names GPU 8 but this machine has 8 GPUs (0-7): CUDA hides it, so it sees no GPU"
            ),
            "{}",
            o.summary
        );
        assert!(
            hint(&o).contains("`unset CUDA_VISIBLE_DEVICES`"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(0.0));
        assert!(o.devices.is_empty());
    }

    #[test]
    fn index_beyond_the_count_on_one_gpu() {
        let o = on(&h100s(1), Some("1"), PCI);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("names GPU 1 but this machine has 1 GPU (0)"),
            "{}",
            o.summary
        );
        assert!(hint(&o).contains("use indices 0-0"), "{}", hint(&o));
    }

    #[test]
    fn a_failed_cross_check_keeps_the_order_warning_in_the_hint() {
        let o = on(&h100s(8), Some("1,9"), None);
        assert_eq!(o.status, Status::Fail);
        assert!(!o.summary.contains("CUDA_DEVICE_ORDER"), "{}", o.summary);
        assert!(
            hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn full_uuid_maps_to_its_gpu() {
        let uuid = gpu_uuid(6);
        let o = on(&h100s(8), Some(&uuid), None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            format!("CUDA_VISIBLE_DEVICES=\"{uuid}\": cuda:0 -> GPU 6 ({H100}, {uuid})")
        );
        assert_eq!(o.devices[0].uuid.as_deref(), Some(uuid.as_str()));
    }

    #[test]
    fn unique_uuid_prefix_maps_to_its_gpu() {
        let o = on(&h100s(8), Some("GPU-fa4e0002,GPU-fa4e0007-1111"), None);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .ends_with(": cuda:0 -> GPU 2, cuda:1 -> GPU 7 (2x NVIDIA H100 80GB HBM3)"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn uuid_prefix_matching_two_gpus_fails_naming_them() {
        let o = on(&h100s(2), Some("GPU-fa4e000"), None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="GPU-fa4e000": entry 1 ("GPU-fa4e000") matches 2 devices (GPU 0, GPU 1), and CUDA needs a prefix that names one: CUDA hides it, so it sees no GPU"#
        );
        assert!(
            hint(&o).contains(&format!(
                "write enough of the UUID to name one device (GPU 0 is {}, GPU 1 is {})",
                gpu_uuid(0),
                gpu_uuid(1)
            )),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(0.0));
    }

    #[test]
    fn bare_prefix_is_judged_against_the_gpus() {
        let o = on(&h100s(8), Some("GPU-"), None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("matches 8 devices"), "{}", o.summary);
        assert!(!o.summary.contains("bare"), "{}", o.summary);
        // On a single GPU the bare prefix names it.
        let o = on(&h100s(1), Some("GPU-"), None);
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(o.summary.contains("cuda:0 -> GPU 0"), "{}", o.summary);
    }

    #[test]
    fn uuid_matching_no_gpu_fails_listing_the_valid_ones() {
        let o = on(&h100s(2), Some("GPU-fa4e0001,GPU-dead"), None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="GPU-fa4e0001,GPU-dead": entry 2 ("GPU-dead") matches no GPU on this machine: CUDA hides it, so it sees only cuda:0 -> GPU 1"#
        );
        assert!(
            hint(&o).contains(&format!(
                "the GPUs here are GPU 0 {}, GPU 1 {}",
                gpu_uuid(0),
                gpu_uuid(1)
            )),
            "{}",
            hint(&o)
        );
        assert!(
            hint(&o).contains("export CUDA_VISIBLE_DEVICES=GPU-fa4e0001`"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(1.0));
    }

    #[test]
    fn uuid_in_upper_case_is_pointed_out() {
        let o = on(&h100s(4), Some("GPU-FA4E0002"), None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("matches no GPU"), "{}", o.summary);
        assert!(
            hint(&o).contains("GPU 2's UUID matches \"GPU-FA4E0002\" only ignoring case"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn unreadable_uuid_is_named_when_nothing_matches() {
        let mut gpus = h100s(4);
        gpus[3].uuid = None;
        gpus[3].name = "(unknown)".into();
        let o = on(&gpus, Some("GPU-0123"), None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("matches no GPU on this machine (NVML could not read the UUID of GPU 3)"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn mig_uuid_maps_to_the_gpu_that_owns_it() {
        let mig = mig_uuid(1, 1);
        let o = on(&mig_box(), Some(&mig), None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            format!(
                "CUDA_VISIBLE_DEVICES=\"{mig}\": cuda:0 -> {mig} on GPU 1 (NVIDIA A100-SXM4-40GB, {})",
                gpu_uuid(1)
            )
        );
        assert_eq!(o.devices[0].uuid.as_deref(), Some(mig.as_str()));
        assert_eq!(o.devices[0].name, "NVIDIA A100-SXM4-40GB");
        // A unique prefix of it works too.
        let o = on(
            &mig_box(),
            Some("MIG-fa4e0001-aaaa-4bbb-8ccc-000000000000"),
            None,
        );
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(o.summary.contains(&mig_uuid(1, 0)), "{}", o.summary);
    }

    #[test]
    fn legacy_mig_form_maps_to_the_parent_gpu() {
        let entry = format!("MIG-{}/1/0", gpu_uuid(1));
        let o = on(&mig_box(), Some(&entry), None);
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary.contains(&format!("cuda:0 -> {entry} on GPU 1")),
            "{}",
            o.summary
        );
        // GPU 0 is not in MIG mode: it has no MIG instance to name.
        let entry = format!("MIG-{}/1/0", gpu_uuid(0));
        assert_eq!(on(&mig_box(), Some(&entry), None).status, Status::Fail);
    }

    #[test]
    fn two_mig_devices_fail_because_cuda_uses_one() {
        let value = format!("{},{}", mig_uuid(1, 0), mig_uuid(1, 1));
        let o = on(&mig_box(), Some(&value), None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains(
                "lists 2 MIG devices, but a CUDA process can use only one MIG device: it sees 1 device, not 2"
            ),
            "{}",
            o.summary
        );
        assert!(
            hint(&o).contains("`sudo nvidia-smi -i 1 -mig 0`"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(1.0));
        assert_eq!(o.devices.len(), 1);
    }

    #[test]
    fn mig_uuid_matching_nothing_fails() {
        let o = on(
            &mig_box(),
            Some("MIG-fa4e0001-aaaa-4bbb-8ccc-000000000009"),
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("matches no MIG device"), "{}", o.summary);
        assert!(
            hint(&o).contains(&format!(
                "the MIG devices here are {} (GPU 1)",
                mig_uuid(1, 0)
            )),
            "{}",
            hint(&o)
        );
        // Without MIG anywhere the hint says so.
        let o = on(&h100s(2), Some("MIG-fa4e0001"), None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            hint(&o).contains("no GPU here has MIG devices"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn a_gpu_in_mig_mode_says_cuda_uses_one_mig_device_of_it() {
        let o = on(&mig_box(), Some("1"), PCI);
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary
                .contains("in MIG mode, CUDA uses one of its MIG devices"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn an_index_and_the_uuid_of_the_same_gpu_leave_nothing() {
        let value = format!("0,{}", gpu_uuid(0));
        let o = on(&h100s(8), Some(&value), PCI);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            format!(
                "CUDA_VISIBLE_DEVICES=\"{value}\": entries \"0\" and \"{}\" both name GPU 0: CUDA then sees no GPU at all",
                gpu_uuid(0)
            )
        );
        assert!(
            hint(&o).contains("list each GPU once, e.g. `export CUDA_VISIBLE_DEVICES=0`"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(0.0));
        assert!(o.devices.is_empty());
        // Two prefixes of one UUID do the same.
        let o = on(&h100s(8), Some("GPU-fa4e0003,GPU-fa4e0003-1111"), None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("both name GPU 3"), "{}", o.summary);
    }

    #[test]
    fn mixed_kinds_naming_different_gpus_warn_after_the_mapping() {
        let value = format!("0,{}", gpu_uuid(3));
        let o = on(&h100s(8), Some(&value), PCI);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.starts_with(&format!(
                "CUDA_VISIBLE_DEVICES=\"{value}\": cuda:0 -> GPU 0, cuda:1 -> GPU 3 (2x {H100}); the list mixes indices and UUIDs"
            )),
            "{}",
            o.summary
        );
        assert_eq!(o.metric("visible_devices"), Some(2.0));
    }

    #[test]
    fn indices_without_pci_order_on_one_model_warn_gently() {
        let o = on(&h100s(8), Some("0,1"), None);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.starts_with(
                r#"CUDA_VISIBLE_DEVICES="0,1": cuda:0 -> GPU 0, cuda:1 -> GPU 1 (2x NVIDIA H100 80GB HBM3); CUDA_DEVICE_ORDER is unset (FASTEST_FIRST)"#
            ),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("all one model"), "{}", o.summary);
        assert!(
            hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            "{}",
            hint(&o)
        );
        assert!(!o.devices[0].summary.contains("fastest-first"));
    }

    #[test]
    fn indices_without_pci_order_on_mixed_models_say_the_mapping_may_be_off() {
        let gpus = gpus_named(&[H100, H100, A100, A100]);
        let o = on(&gpus, Some("2"), None);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains(
                "this machine mixes models (2x NVIDIA H100 80GB HBM3, 2x NVIDIA A100-SXM4-80GB)"
            ),
            "{}",
            o.summary
        );
        assert!(
            o.devices[0].summary.starts_with(&format!(
                "cuda:0 -> GPU 2 ({A100}, {}) if CUDA counted in PCI order",
                gpu_uuid(2)
            )),
            "{}",
            o.devices[0].summary
        );
    }

    #[test]
    fn minus_one_and_empty_hide_every_gpu_with_gpus_known() {
        for (value, says) in [("-1", "hides every GPU"), ("", "set but empty")] {
            let o = on(&h100s(8), Some(value), PCI);
            assert_eq!(o.status, Status::Fail, "{value:?}");
            assert!(o.summary.contains(says), "{value:?}: {}", o.summary);
            assert!(
                hint(&o).contains("unset CUDA_VISIBLE_DEVICES"),
                "{}",
                hint(&o)
            );
            assert_eq!(o.metric("visible_devices"), Some(0.0));
            assert!(o.devices.is_empty());
            assert_eq!(
                o.facts
                    .get("cuda_visible_effective")
                    .and_then(|v| v.as_str()),
                Some("none")
            );
        }
    }

    #[test]
    fn invalid_word_after_valid_indices_shows_the_real_gpus() {
        let o = on(&h100s(8), Some("0,1,foo,2"), PCI);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.ends_with(
                "CUDA silently hides it and everything after it (\"2\"); visible: cuda:0 -> GPU 0, cuda:1 -> GPU 1 (2x NVIDIA H100 80GB HBM3)"
            ),
            "{}",
            o.summary
        );
        assert!(
            hint(&o).contains("export CUDA_VISIBLE_DEVICES=0,1,2`"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.devices.len(), 2);
    }

    #[test]
    fn trailing_comma_with_gpus_warns_after_the_mapping() {
        let o = on(&h100s(8), Some("3,"), PCI);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains(&format!(
                "ends with a comma; visible: cuda:0 -> GPU 3 ({H100}, {})",
                gpu_uuid(3)
            )),
            "{}",
            o.summary
        );
    }

    #[test]
    fn long_lists_are_cut_in_the_summary_but_not_in_the_devices() {
        let value = (0..16).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        let o = on(&h100s(16), Some(&value), PCI);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .contains("cuda:7 -> GPU 7, … (16 in all) (16x NVIDIA H100 80GB HBM3)"),
            "{}",
            o.summary
        );
        assert_eq!(o.devices.len(), 16);
    }

    #[test]
    fn without_nvml_the_cross_check_is_noted_not_failed() {
        let o = vis(Some("3"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .ends_with("(not checked against the GPUs: NVML not usable)"),
            "{}",
            o.summary
        );
        assert!(o.devices.is_empty());
        assert!(o
            .facts
            .get("gpu_cross_check")
            .is_some_and(|f| f.to_string().starts_with("not possible")));
        // Unset: the summary stays as it was, the fact says why.
        let o = vis(None, None, None);
        assert_eq!(o.summary, "CUDA_VISIBLE_DEVICES unset: all GPUs visible");
        assert!(o.facts.contains_key("gpu_cross_check"));
    }

    #[test]
    fn nvml_is_not_asked_after_gpu_driver_failed() {
        let mut ctx = Context::default();
        ctx.earlier.insert(
            "gpu.driver".into(),
            Outcome::fail("the NVIDIA kernel driver is not loaded", "modprobe"),
        );
        assert_eq!(
            nvml_gpus(&ctx),
            Err("not possible: NVML is not usable (gpu.driver: fail)".to_string())
        );
    }

    #[test]
    fn nvml_is_not_asked_after_an_earlier_gpu_check_found_it_hung() {
        let mut ctx = Context::default();
        ctx.earlier.insert(
            "gpu.count".into(),
            Outcome::error("timed out").with_cause(crate::facts::Cause::TimedOut {
                after_s: 5.0,
                stage: None,
            }),
        );
        assert_eq!(
            nvml_gpus(&ctx),
            Err("not possible: NVML is not usable (NVML did not answer in gpu.count)".to_string())
        );
    }

    #[test]
    fn inventory_keeps_the_place_of_an_unreadable_gpu() {
        let good = |index: u32| GpuInfo {
            index,
            name: H100.into(),
            uuid: gpu_uuid(index),
            pci_bus_id: "00000000:18:00.0".into(),
            memory_total_mib: 81559,
            compute_capability: Some((9, 0)),
            mig_enabled: Some(false),
            mig_uuids: Vec::new(),
        };
        let gpus = NvmlGpu::from_inventory(&[
            Ok(good(0)),
            Err(GpuError {
                index: 1,
                error: nvml::Unavailable::GpuLost,
            }),
            Ok(good(2)),
        ]);
        assert_eq!(gpus.len(), 3);
        assert_eq!(gpus[1].index, 1);
        assert_eq!(gpus[1].uuid, None);
        // Index 2 is still GPU 2, as CUDA counts it.
        let o = on(&gpus, Some("2"), PCI);
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.contains("cuda:0 -> GPU 2"), "{}", o.summary);
    }
}

//! `fabric.xid`: the NVIDIA Xid errors the kernel logged since boot, judged
//! by NVIDIA's Xid catalog (`domain::xid`), and the NVSwitch SXid errors of
//! the same log, judged by the severity the switch driver gives each and
//! the Fabric Manager guide's tables (`domain::sxid`).

use std::time::Duration;

use crate::domain::action::Action;
use crate::domain::sxid::{sxid_info, SxidSeverity, SxidTable};
use crate::domain::text::{list_cut, plural};
use crate::domain::xid::{judged_action, xid_info, Bucket, PciSlot, XidAction};
use crate::facts::xid::{XidHistory, XidSeen};
use crate::findings::{Finding, Findings};
use crate::probe::kernel_log::{self, KernelLog, SxidEvent, Unreadable, XidEvent};
use crate::probe::nvml::GpuInfo;
use crate::probe::sysfs;
use crate::{Check, Context, DataTable, Outcome, Profile, Status};

/// The longest `journalctl -k -b` may take: it reads the journal files of
/// this boot, well under a second on a healthy host.
const JOURNAL_WAIT: Duration = Duration::from_secs(5);

/// Where NVIDIA documents every code.
const XID_CATALOG_URL: &str = "https://docs.nvidia.com/deploy/xid-errors/";

/// Where NVIDIA documents the NVSwitch SXid errors and their recovery.
const SXID_GUIDE_URL: &str =
    "https://docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf";

pub struct Xid;

/// What `fabric.xid` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct XidFacts {
    pub log: Result<KernelLog, Unreadable>,
    /// NVML's GPUs, to name the GPU behind a PCI address; `Err` says why
    /// NVML could not (the events are then named by address).
    pub gpus: Result<Vec<GpuInfo>, String>,
}

impl Check for Xid {
    fn id(&self) -> &'static str {
        "fabric.xid"
    }
    fn title(&self) -> &'static str {
        "Xid errors since boot"
    }
    fn health(&self) -> bool {
        true
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Reads the NVIDIA driver's Xid error reports from the kernel log since the last boot and judges each by NVIDIA's Xid catalog.\n\n\
         An Xid is the driver's record of a GPU fault. Every code of the catalog (1-172) is known with \
         its immediate action, which the finding names and the verdict follows: IGNORE passes with a \
         note (43 application stopped with the GPU healthy, 63 row remap recorded, 92 high single-bit \
         ECC rate); RESTART_APP warns, the job ended but the GPU is fine (13 graphics engine exception, \
         31 memory page fault, 94 contained ECC error); RESET_GPU fails (46, 48 double-bit ECC, 64 \
         failed row remap, 74 NVLink error, 95 uncontained ECC, 109 context switch timeout, 119 and \
         120 GSP errors); RESTART_BM fails, only a reboot helps (79 GPU fallen off the bus, also when \
         the driver says so in words across several lines). Xid 45 alone warns, beside another Xid it \
         follows that one; NVLink5 Xids 144-150 that say Nonfatal pass; Xid 154 means the recovery \
         action it names. A DDP job that starts on a GPU needing a reset hangs in its first \
         collective or dies with a CUDA error on one rank, and every other rank waits for it until \
         the NCCL timeout.\n\n\
         The log is read from /dev/kmsg when this user may (root, CAP_SYSLOG, or kernel.dmesg_restrict=0); \
         when the ring buffer has already dropped the boot's first messages (its first record's \
         sequence number is not 0) `journalctl -k -b` is read as well, and the result names every \
         source read. Without /dev/kmsg: `journalctl -k -b`, else /var/log/kern.log, /var/log/syslog \
         or /var/log/messages; `--kernel-log PATH` reads a given file (syslog, `dmesg`, `dmesg -T` / \
         `--ctime`, `dmesg --time-format iso`, `journalctl -k` output or saved /dev/kmsg records), \
         for example the host's log mounted into a container. A file that spans reboots is cut at the \
         last kernel boot banner, and dated lines from before this boot are left out and counted. \
         Each GPU is named by its NVML index and UUID through its PCI address.\n\n\
         Fixes: for a reset-class Xid, reset the GPU while nothing runs on it (`nvidia-smi -r -i N`) or \
         drain the node and reboot it. The driver logs no mark of its own when a GPU is reset, so \
         log nvidia-smi's confirmation into the kernel log (`nvidia-smi -r -i N | sudo tee \
         /dev/kmsg`): the Xids of that GPU before its \"GPU ... was successfully reset.\" line are \
         then left out and counted; without it this boot's log keeps the Xid and the check fails \
         until a reboot. For Xid 79, drain and reboot, then check power and risers; an \
         Xid that comes back after a reset means a hardware fault: contact the vendor (RMA). For a \
         job-class Xid, debug the program that hit it (`compute-sanitizer`, CUDA_LAUNCH_BLOCKING=1). \
         When no log can be read the check is skipped with the reason.\n\n\
         Repair action, from the immediate action, for the GPU that logged it: RESTART_APP \
         restart_job, RESET_GPU reset_gpu, RESTART_BM / RESTART_VM reboot_node, CHECK_MECHANICALS \
         service_hardware, CONTACT_SUPPORT / UPDATE_SWFW and unknown codes fix_install.\n\n\
         NVSwitch errors come in the same log as SXid lines (`nvidia-nvswitchN: SXid \
         (PCI:...): CODE, Fatal, Link L ...`), each saying whether it is Fatal or Non-fatal; the \
         name comes from the Fabric Manager user guide's SXid tables where it lists the code. A \
         fatal SXid fails naming the switch, its PCI address and the links, with reboot_node: \
         the switch port stays down, NVLink traffic through it stalls and CUDA jobs end with Xid \
         45, until a system restart resets the switch. A non-fatal SXid (a corrected single-bit \
         ECC error, a link replay) passes with a note. A GPU reset resets no switch, so SXids \
         before a logged GPU reset still count; SXids of earlier boots are left out and counted."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let wait = Duration::try_from_secs_f64(ctx.options.timeout_s * 0.5)
            .ok()
            .filter(|w| !w.is_zero())
            .map_or(JOURNAL_WAIT, |w| w.min(JOURNAL_WAIT));
        let given = ctx.options.kernel_log.as_deref();
        let log = kernel_log::read_kernel_log(given, sysfs::boot_epoch(), wait);
        // Ask NVML only when there is an address to name.
        let any_event = log.as_ref().is_ok_and(|l| !l.events.is_empty());
        // SXids name switches by their own address: NVML is not asked for them.
        let gpus = if any_event {
            crate::facts::nvml::gpus_for_run(ctx).map_err(|e| e.to_string())
        } else {
            Ok(Vec::new())
        };
        evaluate(&XidFacts { log, gpus })
    }
}

/// The events of one code on one GPU.
struct Repeats<'a> {
    slot: PciSlot,
    code: u32,
    count: usize,
    last: &'a XidEvent,
}

/// Judge the Xid events of this boot.
pub fn evaluate(f: &XidFacts) -> Outcome {
    let log = match &f.log {
        Ok(log) => log,
        Err(u) => return unreadable(u),
    };
    let mut findings = Findings::new();
    let mut notes = Vec::new();
    let groups = repeats(&log.events);
    for r in &groups {
        let others: Vec<u32> = groups
            .iter()
            .filter(|g| g.slot == r.slot)
            .map(|g| g.code)
            .collect();
        let finding = judge(r, gpu_at(&f.gpus, r.slot), &others);
        if finding.status == Status::Pass {
            notes.push(finding.text.clone());
        }
        findings.push(finding);
    }
    let switch_groups = sxid_groups(&log.sxids);
    for g in &switch_groups {
        let finding = judge_sxid(g);
        if finding.status == Status::Pass {
            notes.push(finding.text.clone());
        }
        findings.push(finding);
    }
    let source = format!("read from {}", log.source);
    let kinds = if log.sxids.is_empty() {
        "Xid"
    } else {
        "Xid or SXid"
    };
    let pass = if notes.is_empty() {
        format!("no {kinds} errors since boot ({source})")
    } else {
        format!(
            "no {kinds} errors that need action since boot ({source}); noted: {}",
            list_cut(&notes, 3)
        )
    };
    let mut outcome = findings
        .conclude(pass, Vec::new())
        .with_metric("xid_events", log.events.len() as f64, "count")
        .with_fact("kernel_log", log.source.to_string());
    if !log.sxids.is_empty() {
        outcome = outcome.with_metric("sxid_events", log.sxids.len() as f64, "count");
    }
    outcome = outcome.publish(&history(&groups, &f.gpus));
    if !groups.is_empty() {
        outcome = outcome.with_table(event_table(&groups, &f.gpus));
    }
    if !switch_groups.is_empty() {
        outcome = outcome.with_table(sxid_table(&switch_groups));
    }
    if outcome.status >= Status::Warn {
        outcome.summary = format!("{} ({source})", outcome.summary);
    }
    outcome.summary.push_str(&left_out(log));
    outcome
}

/// The fact later checks read: every (GPU, code) seen.
fn history(groups: &[Repeats], gpus: &Result<Vec<GpuInfo>, String>) -> XidHistory {
    XidHistory {
        events: groups
            .iter()
            .map(|r| XidSeen {
                pci: r.slot.to_string(),
                gpu: gpu_at(gpus, r.slot).map(|g| g.index),
                code: r.code,
                count: r.count,
            })
            .collect(),
    }
}

/// What the summary says was left out: "; 2 Xid events of earlier boots
/// ignored", one clause per kind, or nothing.
fn left_out(log: &KernelLog) -> String {
    [
        (log.before_reset, "Xid", "from before a logged GPU reset"),
        (log.earlier_boots, "Xid", "of earlier boots"),
        (log.earlier_boot_sxids, "SXid", "of earlier boots"),
    ]
    .iter()
    .filter(|(n, _, _)| *n > 0)
    .map(|(n, kind, why)| format!("; {n} {kind} event{} {why} ignored", plural(*n)))
    .collect()
}

/// The SXid events of one code and severity on one switch.
struct SwitchRepeats<'a> {
    count: usize,
    /// The switch ports named, in order of first appearance.
    links: Vec<u32>,
    last: &'a SxidEvent,
}

/// SXid events grouped per (switch, code, severity) in order of first
/// appearance.
fn sxid_groups(events: &[SxidEvent]) -> Vec<SwitchRepeats<'_>> {
    let key = |e: &SxidEvent| {
        let s = &e.sxid;
        (s.switch.clone(), s.pci.clone(), s.code, s.severity)
    };
    let mut groups: Vec<SwitchRepeats> = Vec::new();
    for e in events {
        match groups.iter_mut().find(|g| key(g.last) == key(e)) {
            Some(g) => {
                g.count += 1;
                g.last = e;
                if let Some(link) = e.sxid.link.filter(|l| !g.links.contains(l)) {
                    g.links.push(link);
                }
            }
            None => groups.push(SwitchRepeats {
                count: 1,
                links: e.sxid.link.into_iter().collect(),
                last: e,
            }),
        }
    }
    groups
}

/// What an SXid is: the guide's name for its code, else the driver's words.
fn sxid_meaning(e: &SxidEvent) -> String {
    match (sxid_info(e.sxid.code), e.sxid.detail.as_str()) {
        (Some(i), _) => i.name.to_string(),
        (None, "") => "not in the Fabric Manager guide's SXid tables".to_string(),
        (None, words) => words.to_string(),
    }
}

fn links_text(links: &[u32]) -> String {
    let list: Vec<String> = links.iter().map(u32::to_string).collect();
    match list.len() {
        0 => String::new(),
        1 => format!(", link {}", list[0]),
        _ => format!(", links {}", list.join(", ")),
    }
}

/// One (switch, code, severity) group as a finding: fatal fails with a
/// restart of the node (the Fabric Manager guide's recovery: a system
/// restart resets the switch port), non-fatal passes as a note.
fn judge_sxid(g: &SwitchRepeats) -> Finding {
    let e = &g.last.sxid;
    let severity = match e.severity {
        SxidSeverity::Fatal => "fatal",
        SxidSeverity::NonFatal => "non-fatal",
    };
    let times = match g.count {
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    let text = format!(
        "NVSwitch SXid {} ({}), {severity}, {times}, last at {}, on {} (PCI {}){}",
        e.code,
        sxid_meaning(g.last),
        g.last.when,
        e.switch,
        e.pci,
        links_text(&g.links)
    );
    if e.severity == SxidSeverity::NonFatal {
        return Finding::new(None, Status::Pass, text);
    }
    let whole_fabric = sxid_info(e.code).is_some_and(|i| i.table == SxidTable::AlwaysFatal);
    Finding::new(None, Status::Fail, text)
        .action(Action::RebootNode)
        .hint(sxid_reboot_hint(&e.switch, &e.pci, whole_fabric))
}

fn sxid_reboot_hint(switch: &str, pci: &str, whole_fabric: bool) -> String {
    let what = if whole_fabric {
        "the whole NVLink fabric is unusable".to_string()
    } else {
        format!("the port of {switch} (PCI {pci}) stays down")
    };
    format!(
        "drain the node and restart it: after a fatal NVSwitch error {what} until a system \
         restart resets the switch, and NVLink traffic through it stalls (CUDA jobs end with \
         Xid 45) (NVIDIA Fabric Manager user guide, SXid errors: {SXID_GUIDE_URL}); if the SXid \
         comes back after the restart, contact the vendor"
    )
}

/// One row per (switch, code, severity): the switch, its address, the
/// code and its meaning, the severity, the links, how often, the last time.
fn sxid_table(groups: &[SwitchRepeats]) -> DataTable {
    let rows = groups
        .iter()
        .map(|g| {
            let e = &g.last.sxid;
            let links: Vec<String> = g.links.iter().map(u32::to_string).collect();
            let severity = match e.severity {
                SxidSeverity::Fatal => "Fatal",
                SxidSeverity::NonFatal => "Non-fatal",
            };
            vec![
                e.switch.clone(),
                e.pci.clone(),
                e.code.to_string(),
                sxid_meaning(g.last),
                severity.to_string(),
                links.join(" "),
                g.count.to_string(),
                g.last.when.clone(),
            ]
        })
        .collect();
    DataTable {
        title: "NVSwitch SXid events since boot".into(),
        header: [
            "switch", "PCI", "SXid", "meaning", "severity", "links", "count", "last",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        legend: None,
    }
}

/// One row per (GPU, code): the GPU, the code and its meaning, how often,
/// the last time.
fn event_table(groups: &[Repeats], gpus: &Result<Vec<GpuInfo>, String>) -> DataTable {
    let rows = groups
        .iter()
        .map(|r| {
            let gpu = gpu_at(gpus, r.slot).map_or("?".to_string(), |g| g.index.to_string());
            let meaning = xid_info(r.code).map_or("not in NVIDIA's Xid catalog", |i| i.meaning);
            vec![
                gpu,
                r.slot.to_string(),
                r.code.to_string(),
                meaning.to_string(),
                r.count.to_string(),
                r.last.when.clone(),
            ]
        })
        .collect();
    DataTable {
        title: "Xid events since boot".into(),
        header: ["GPU", "PCI", "Xid", "meaning", "count", "last"]
            .map(String::from)
            .to_vec(),
        rows,
        legend: None,
    }
}

/// No log: skip, saying how to give access; a file the user named that
/// cannot be read is an error.
fn unreadable(u: &Unreadable) -> Outcome {
    if u.given {
        return Outcome::error(format!("cannot read --kernel-log {}", u.tried.join("; ")))
            .with_hint(
            "give --kernel-log a readable kernel log (syslog, `dmesg` or `journalctl -k` output)",
        );
    }
    Outcome::skip(format!(
        "no readable kernel log, so Xid errors cannot be checked ({})",
        u.tried.join("; ")
    ))
    .with_hint(
        "run as root or with CAP_SYSLOG, or allow reading the kernel log (`sudo sysctl \
         kernel.dmesg_restrict=0`), or add this user to the adm / systemd-journal group; in a \
         container, mount the host's log and pass it: `--kernel-log /var/log/kern.log`",
    )
}

/// Events grouped per (GPU, code) in order of first appearance.
fn repeats(events: &[XidEvent]) -> Vec<Repeats<'_>> {
    let mut groups: Vec<Repeats> = Vec::new();
    for e in events {
        match groups
            .iter_mut()
            .find(|g| g.slot == e.slot && g.code == e.code)
        {
            Some(g) => {
                g.count += 1;
                g.last = e;
            }
            None => groups.push(Repeats {
                slot: e.slot,
                code: e.code,
                count: 1,
                last: e,
            }),
        }
    }
    groups
}

fn gpu_at(gpus: &Result<Vec<GpuInfo>, String>, slot: PciSlot) -> Option<&GpuInfo> {
    gpus.as_ref()
        .ok()?
        .iter()
        .find(|g| PciSlot::parse(&g.pci_bus_id) == Some(slot))
}

/// One (GPU, code) group as a finding: its verdict from the catalog's
/// immediate action, what happened and when, and what to do.
fn judge(r: &Repeats, gpu: Option<&GpuInfo>, others_on_gpu: &[u32]) -> Finding {
    let info = xid_info(r.code);
    let times = match r.count {
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    let what = match info {
        None => format!("Xid {} (not in NVIDIA's Xid catalog)", r.code),
        Some(i) if i.bucket == Bucket::Xid154 => format!(
            "Xid 154 ({}: {})",
            i.meaning,
            crate::domain::xid::recovery_action(&r.last.detail).unwrap_or("not stated")
        ),
        Some(i) => format!("Xid {} ({})", r.code, i.meaning),
    };
    let whom = match gpu {
        Some(g) => format!("{} ({})", g.pci_bus_id, g.uuid),
        None => format!("GPU at PCI {} (not listed by NVML)", r.slot),
    };
    let action = info.map_or(String::new(), |i| {
        format!("; NVIDIA's immediate action: {}", i.bucket.name())
    });
    let text = format!("{what} {times}, last at {}, on {whom}{action}", r.last.when);
    let class = info.map(|i| judged_action(i, &r.last.detail, others_on_gpu));
    let (status, hint) = match class {
        None => (Status::Warn, lookup_hint(r.code)),
        Some(XidAction::Note) => (Status::Pass, String::new()),
        Some(XidAction::Investigate) => (Status::Warn, investigate_hint(r.code, info)),
        Some(XidAction::RestartApp) => (Status::Warn, restart_hint(gpu, r.slot)),
        Some(XidAction::Service) => (Status::Fail, service_hint(gpu, r.slot)),
        Some(XidAction::ResetGpu) => (Status::Fail, reset_hint(gpu, r.slot)),
        Some(XidAction::RebootNode) => (Status::Fail, reboot_hint(gpu, r.slot)),
    };
    // A code the catalog does not list: update the driver, which knows it.
    let action = class.map_or(Action::FixInstall, Action::for_xid);
    let finding = Finding::new(gpu.map(|g| g.index), status, text).action(action);
    if hint.is_empty() {
        finding
    } else {
        finding.hint(hint)
    }
}

fn lookup_hint(code: u32) -> String {
    format!(
        "look Xid {code} up in NVIDIA's Xid catalog ({XID_CATALOG_URL}) for the action it needs"
    )
}

fn investigate_hint(code: u32, info: Option<&crate::domain::xid::XidInfo>) -> String {
    match info.map(|i| i.bucket) {
        Some(Bucket::ContactSupport) => format!(
            "NVIDIA's catalog says to contact support for Xid {code}: collect `sudo \
             nvidia-bug-report.sh` and send it to your hardware vendor or NVIDIA"
        ),
        Some(Bucket::UpdateSwFw) => "update the NVIDIA driver and GPU firmware to the latest \
             versions (a vGPU guest driver must match the host's)"
            .to_string(),
        _ => lookup_hint(code),
    }
}

fn service_hint(gpu: Option<&GpuInfo>, slot: PciSlot) -> String {
    format!(
        "check that {} is seated and its auxiliary power cables are connected (NVIDIA's \
         CHECK_MECHANICALS); it runs at reduced clocks until then",
        named(gpu, slot)
    )
}

fn named(gpu: Option<&GpuInfo>, slot: PciSlot) -> String {
    match gpu {
        Some(_) => "{gpus}".to_string(),
        None => format!("the GPU at PCI {slot}"),
    }
}

/// Reset, and log the reset: nvidia-smi's "GPU ... was successfully
/// reset." line in the kernel log is where fabric.xid starts counting that
/// GPU's Xids again (the driver logs no mark of its own).
fn reset_hint(gpu: Option<&GpuInfo>, slot: PciSlot) -> String {
    let ids = match gpu {
        Some(_) => "{ids}".to_string(),
        None => format!("{slot}.0"),
    };
    format!(
        "reset {} while no job uses it and log the reset: `nvidia-smi -r -i {ids} | sudo tee \
         /dev/kmsg` (fabric.xid counts only the Xids after nvidia-smi's \"successfully reset\" \
         line; without it this boot's log keeps failing the check until a reboot), or drain the \
         node and reboot it; if the Xid comes back after the reset, contact the vendor (RMA)",
        named(gpu, slot)
    )
}

fn reboot_hint(gpu: Option<&GpuInfo>, slot: PciSlot) -> String {
    format!(
        "drain the node and reboot it: {} fell off the bus and only a reboot brings it back; if \
         it happens again, check its power cables and riser, then contact the vendor (RMA)",
        named(gpu, slot)
    )
}

fn restart_hint(gpu: Option<&GpuInfo>, slot: PciSlot) -> String {
    format!(
        "the driver ended the job on {}; these Xids usually come from the program (an \
         out-of-range access, a faulty kernel): rerun it under `compute-sanitizer` or with \
         CUDA_LAUNCH_BLOCKING=1; if a known-good program hits them too, reset the GPU",
        named(gpu, slot)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::kernel_log::LogSource;

    fn gpu(index: u32, bus: &str) -> GpuInfo {
        GpuInfo {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: format!("GPU-{index}"),
            pci_bus_id: format!("00000000:{bus}:00.0"),
            memory_total_mib: 81559,
            compute_capability: Some((9, 0)),
            mig_enabled: Some(false),
            mig_uuids: vec![],
        }
    }

    fn event(bus: &str, code: u32, when: &str) -> XidEvent {
        XidEvent {
            slot: PciSlot::parse(&format!("0000:{bus}:00")).expect("slot"),
            code,
            logged_as_xid: true,
            when: when.into(),
            since_boot_s: None,
            detail: String::new(),
        }
    }

    fn facts(events: Vec<XidEvent>, earlier_boots: usize) -> XidFacts {
        XidFacts {
            log: Ok(KernelLog {
                source: LogSource::Kmsg,
                events,
                sxids: vec![],
                earlier_boot_sxids: 0,
                earlier_boots,
                before_reset: 0,
                oom_kills: vec![],
            }),
            gpus: Ok(vec![gpu(0, "18"), gpu(2, "3A")]),
        }
    }

    #[test]
    fn no_xid_passes_naming_the_source() {
        let o = evaluate(&facts(vec![], 0));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "no Xid errors since boot (read from /dev/kmsg)");
        assert_eq!(o.hint, None);
    }

    #[test]
    fn fallen_off_the_bus_fails_with_drain_and_counts_repeats() {
        let o = evaluate(&facts(
            vec![
                event("3a", 79, "9.0 s after boot"),
                event("3a", 79, "12.5 s after boot"),
            ],
            0,
        ));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 2: Xid 79 (GPU has fallen off the bus) 2 times, last at 12.5 s after boot, on \
             00000000:3A:00.0 (GPU-2); NVIDIA's immediate action: RESTART_BM (read from /dev/kmsg)"
        );
        let hint = o.hint.unwrap_or_default();
        assert!(
            hint.starts_with("drain the node and reboot it: GPU 2 fell off"),
            "{hint}"
        );
        assert_eq!(
            o.tables[0].rows,
            [[
                "2",
                "0000:3a:00",
                "79",
                "GPU has fallen off the bus",
                "2",
                "12.5 s after boot"
            ]]
        );
    }

    #[test]
    fn reset_class_xid_fails_with_the_reset_command() {
        let o = evaluate(&facts(vec![event("18", 48, "Dec 1 10:00:00")], 0));
        assert_eq!(o.status, Status::Fail);
        let hint = o.hint.unwrap_or_default();
        assert!(
            hint.starts_with(
                "reset GPU 0 while no job uses it and log the reset: `nvidia-smi -r -i 0 | sudo \
                 tee /dev/kmsg`"
            ),
            "{hint}"
        );
        assert!(hint.contains("RMA"), "{hint}");
    }

    #[test]
    fn job_class_xid_warns() {
        let o = evaluate(&facts(vec![event("18", 13, "Dec 1 10:00:00")], 0));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary
                .contains("Xid 13 (Graphics Engine Exception) once"),
            "{}",
            o.summary
        );
        assert!(o.hint.unwrap_or_default().contains("compute-sanitizer"));
    }

    #[test]
    fn informational_xid_passes_with_a_note() {
        let o = evaluate(&facts(vec![event("18", 63, "Dec 1 10:00:00")], 0));
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.starts_with(
                "no Xid errors that need action since boot (read from /dev/kmsg); noted: Xid 63"
            ),
            "{}",
            o.summary
        );
        assert_eq!(o.hint, None);
    }

    #[test]
    fn context_switch_timeout_fails_with_reset_naming_the_catalog_action() {
        let o = evaluate(&facts(vec![event("18", 109, "Dec 1 10:00:00")], 0));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains(
                "Xid 109 (Context Switch Timeout Error) once, last at Dec 1 10:00:00, on \
                 00000000:18:00.0 (GPU-0); NVIDIA's immediate action: RESET_GPU"
            ),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap_or_default();
        assert!(
            hint.starts_with("reset GPU 0 while no job uses it"),
            "{hint}"
        );
        assert!(hint.contains("until a reboot"), "{hint}");
    }

    #[test]
    fn xid_43_alone_passes_as_the_catalog_ignores_it() {
        let o = evaluate(&facts(vec![event("18", 43, "t")], 0));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary
                .contains("noted: Xid 43 (GPU stopped processing) once"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn xid_45_beside_a_reset_class_xid_is_judged_by_that_one() {
        let o = evaluate(&facts(vec![event("18", 62, "t"), event("18", 45, "t")], 0));
        assert_eq!(o.status, Status::Fail);
        assert!(!o.summary.contains("Xid 45"), "{}", o.summary);
        assert!(!o.hint.unwrap_or_default().contains("compute-sanitizer"));
        let alone = evaluate(&facts(vec![event("18", 45, "t")], 0));
        assert_eq!(alone.status, Status::Warn);
    }

    #[test]
    fn xid_154_asking_for_a_reboot_fails_naming_it() {
        let mut e = event("18", 154, "t");
        e.detail =
            "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)".into();
        let o = evaluate(&facts(vec![e], 0));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("Xid 154 (GPU Recovery Action Changed: Node Reboot Required)"),
            "{}",
            o.summary
        );
        assert!(o
            .hint
            .unwrap_or_default()
            .starts_with("drain the node and reboot it"));
    }

    #[test]
    fn unknown_code_warns_naming_it() {
        let o = evaluate(&facts(vec![event("18", 999, "Dec 1 10:00:00")], 0));
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("Xid 999 (not in NVIDIA's Xid catalog)"));
        assert!(o
            .hint
            .unwrap_or_default()
            .starts_with("look Xid 999 up in NVIDIA's Xid catalog"));
    }

    #[test]
    fn an_address_nvml_does_not_list_is_named_by_address() {
        let o = evaluate(&facts(vec![event("db", 119, "t")], 0));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("GPU at PCI 0000:db:00 (not listed by NVML)"),
            "{}",
            o.summary
        );
        assert!(o
            .hint
            .unwrap_or_default()
            .starts_with("reset the GPU at PCI 0000:db:00 while no job uses it and log the reset: `nvidia-smi -r -i 0000:db:00.0 | sudo tee /dev/kmsg`"));
    }

    #[test]
    fn events_before_a_logged_reset_are_counted_in_the_summary() {
        let mut f = facts(vec![], 0);
        if let Ok(log) = &mut f.log {
            log.before_reset = 2;
        }
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .ends_with("; 2 Xid events from before a logged GPU reset ignored"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn earlier_boots_are_counted_in_the_summary() {
        let o = evaluate(&facts(vec![], 3));
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .ends_with("; 3 Xid events of earlier boots ignored"),
            "{}",
            o.summary
        );
    }

    fn sxid_event(line: &str, when: &str) -> SxidEvent {
        SxidEvent {
            sxid: crate::domain::sxid::sxid_in(line).expect("an SXid line"),
            when: when.into(),
            since_boot_s: None,
        }
    }

    fn with_sxids(events: Vec<XidEvent>, sxids: Vec<SxidEvent>) -> XidFacts {
        let mut f = facts(events, 0);
        if let Ok(log) = &mut f.log {
            log.sxids = sxids;
        }
        f
    }

    const FATAL_63: &str =
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up";
    const FATAL_62: &str =
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 62 LTSSM Fault Up";
    const NON_FATAL: &str = "nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 12028, Non-fatal, \
                             Link 41 egress non-posted PRIV error (First)";

    #[test]
    fn a_fatal_sxid_fails_with_a_restart_naming_the_switch_and_links() {
        let o = evaluate(&with_sxids(
            vec![],
            vec![
                sxid_event(FATAL_63, "6781753.4 s after boot"),
                sxid_event(FATAL_62, "6781753.5 s after boot"),
            ],
        ));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NVSwitch SXid 20034 (LTSSM fault up: the link went down from active), fatal, 2 \
             times, last at 6781753.5 s after boot, on nvidia-nvswitch0 (PCI 0000:05:00.0), \
             links 63, 62 (read from /dev/kmsg)"
        );
        assert_eq!(o.action, Some(Action::RebootNode));
        let hint = o.hint.unwrap_or_default();
        assert!(
            hint.starts_with(
                "drain the node and restart it: after a fatal NVSwitch error the port of \
                 nvidia-nvswitch0 (PCI 0000:05:00.0) stays down until a system restart resets \
                 the switch"
            ),
            "{hint}"
        );
        assert_eq!(
            o.tables[0].rows,
            [[
                "nvidia-nvswitch0",
                "0000:05:00.0",
                "20034",
                "LTSSM fault up: the link went down from active",
                "Fatal",
                "63 62",
                "2",
                "6781753.5 s after boot"
            ]]
        );
    }

    #[test]
    fn a_non_fatal_sxid_passes_with_a_note() {
        let o = evaluate(&with_sxids(vec![], vec![sxid_event(NON_FATAL, "t")]));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "no Xid or SXid errors that need action since boot (read from /dev/kmsg); noted: \
             NVSwitch SXid 12028 (egress non-posted PRIV error), non-fatal, once, last at t, on \
             nvidia-nvswitch3 (PCI 0000:c5:00.0), link 41"
        );
        assert_eq!((o.hint, o.action), (None, None));
    }

    #[test]
    fn the_lines_own_word_outranks_the_guides_table() {
        let line = "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 22013, Fatal, Link 4 x";
        let o = evaluate(&with_sxids(vec![], vec![sxid_event(line, "t")]));
        assert_eq!(o.status, Status::Fail);
        let line = "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Non-fatal, Link 4 x";
        let o = evaluate(&with_sxids(vec![], vec![sxid_event(line, "t")]));
        assert_eq!(o.status, Status::Pass);
    }

    #[test]
    fn an_unknown_fatal_sxid_is_named_by_the_drivers_words() {
        let line = "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 29999, Fatal, Link 7 new fault";
        let o = evaluate(&with_sxids(vec![], vec![sxid_event(line, "t")]));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("NVSwitch SXid 29999 (new fault), fatal"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn an_always_fatal_sxid_says_the_whole_fabric_is_down() {
        let line = "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12020, Fatal, Link 7 x";
        let o = evaluate(&with_sxids(vec![], vec![sxid_event(line, "t")]));
        assert!(o
            .hint
            .unwrap_or_default()
            .contains("the whole NVLink fabric is unusable"));
    }

    #[test]
    fn a_fatal_sxid_beside_an_xid_keeps_both_and_their_tables() {
        let o = evaluate(&with_sxids(
            vec![event("18", 13, "t")],
            vec![sxid_event(FATAL_63, "t"), sxid_event(NON_FATAL, "t")],
        ));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.tables.len(), 2);
        assert_eq!(o.tables[0].title, "Xid events since boot");
        assert_eq!(o.tables[1].title, "NVSwitch SXid events since boot");
        assert_eq!(o.tables[1].rows.len(), 2);
        assert!(o
            .metrics
            .iter()
            .any(|m| m.name == "sxid_events" && m.value == 2.0));
    }

    #[test]
    fn sxids_of_earlier_boots_are_counted_in_the_summary() {
        let mut f = facts(vec![], 0);
        if let Ok(log) = &mut f.log {
            log.earlier_boot_sxids = 4;
        }
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .ends_with("; 4 SXid events of earlier boots ignored"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn no_readable_log_skips_with_how_to_give_access() {
        let o = evaluate(&XidFacts {
            log: Err(Unreadable {
                tried: vec!["/dev/kmsg: Operation not permitted (os error 1)".into()],
                given: false,
            }),
            gpus: Ok(vec![]),
        });
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.starts_with("no readable kernel log"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap_or_default();
        assert!(
            hint.contains("CAP_SYSLOG") && hint.contains("--kernel-log"),
            "{hint}"
        );
    }

    #[test]
    fn an_unreadable_given_file_is_an_error() {
        let o = evaluate(&XidFacts {
            log: Err(Unreadable {
                tried: vec!["/x/kern.log: No such file or directory (os error 2)".into()],
                given: true,
            }),
            gpus: Ok(vec![]),
        });
        assert_eq!(o.status, Status::Error);
        assert_eq!(
            o.summary,
            "cannot read --kernel-log /x/kern.log: No such file or directory (os error 2)"
        );
    }
}

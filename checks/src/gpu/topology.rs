//! gpu.topology: how the GPUs reach each other (P2P, NVLink, the PCIe path,
//! the NVSwitch fabric), judged for the pairs of the job's GPUs and drawn for
//! the whole machine like `nvidia-smi topo -m`.

use std::time::Duration;

use super::common::{
    lib, lost_in_count, mark_lost, nothing_counted, nvml_failure_outcome, nvml_timeout_hint, row,
    unreadable, QUERY_TIMEOUT,
};
use super::job::{job_from_env, JobGpus};
use super::nvlink_errors::nvlink_error_findings;
use crate::domain::action::Action;
use crate::domain::sku;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{
    self, Ancestor, FabricState, GpuRef, NvLinkRemote, NvLinkState, P2pStatus, Reading,
    TopologyFacts, Unavailable,
};
use crate::{Check, Context, DataTable, DeviceResult, Metric, Outcome, Profile, Status};

const TOPOLOGY_LEGEND: &str = "\
X    = the GPU itself
NV#  = # NVLinks between the pair (direct or through NVSwitch)
PIX  = at most one PCIe switch between them
PXB  = several PCIe switches, no host bridge
PHB  = through a PCIe host bridge (the CPU)
NODE = across PCIe host bridges within one NUMA node
SYS  = across NUMA nodes (the CPU interconnect)
INT  = on the same board
n/a  = NVML could not say";

const P2P_LEGEND: &str = "\
OK   = peer-to-peer reads and writes work
CNS  = the chipset does not support P2P
GNS  = the GPU does not support P2P
TNS  = the topology does not support P2P (often PCIe ACS / IOMMU)
DR   = disabled by a driver registry key
NS   = not supported
U    = unknown
R:x W:y = reads (x) and writes (y) differ
n/a  = NVML could not say";

fn ancestor_code(a: Ancestor) -> &'static str {
    match a {
        Ancestor::Internal => "INT",
        Ancestor::Single => "PIX",
        Ancestor::Multiple => "PXB",
        Ancestor::HostBridge => "PHB",
        Ancestor::Node => "NODE",
        Ancestor::System => "SYS",
    }
}

fn p2p_code(s: P2pStatus) -> &'static str {
    match s {
        P2pStatus::Ok => "OK",
        P2pStatus::ChipsetNotSupported => "CNS",
        P2pStatus::GpuNotSupported => "GNS",
        P2pStatus::TopologyNotSupported => "TNS",
        P2pStatus::DisabledByRegkey => "DR",
        P2pStatus::NotSupported => "NS",
        P2pStatus::Unknown => "U",
    }
}

fn p2p_words(s: P2pStatus) -> &'static str {
    match s {
        P2pStatus::Ok => "OK",
        P2pStatus::ChipsetNotSupported => "chipset does not support P2P",
        P2pStatus::GpuNotSupported => "GPU does not support P2P",
        P2pStatus::TopologyNotSupported => "PCIe topology does not support P2P",
        P2pStatus::DisabledByRegkey => "disabled by a driver registry key",
        P2pStatus::NotSupported => "not supported",
        P2pStatus::Unknown => "unknown",
    }
}

fn p2p_hint(s: P2pStatus) -> &'static str {
    match s {
        P2pStatus::GpuNotSupported => {
            "these GPUs do not support peer-to-peer (typical of GeForce cards): NCCL copies through \
             host memory, so expect lower all-reduce bandwidth; nothing to fix in software"
        }
        P2pStatus::DisabledByRegkey => {
            "a driver registry key disables P2P: look for NVreg_RegistryDwords in \
             /etc/modprobe.d/*.conf (e.g. RMForceP2PType), remove it and reload the driver"
        }
        _ => {
            "without P2P, GPU-to-GPU traffic goes through host memory. Often PCIe ACS or the IOMMU \
             blocks it: check `sudo lspci -vvv | grep ACSCtl` (SrcValid+ on the bridges above the \
             GPUs means ACS is on), disable ACS in the BIOS or boot with `iommu=pt`; run with \
             NCCL_P2P_DISABLE=1 to confirm the job works without P2P"
        }
    }
}

/// The active NVLinks of GPU `i` (none when NVML could not say).
fn active_links(t: &TopologyFacts, i: usize) -> Vec<&NvLinkState> {
    match t.nvlinks.get(i) {
        Some(Ok(l)) => l.iter().filter(|s| s.active).collect(),
        _ => Vec::new(),
    }
}

/// NVLinks between GPUs `a` and `b`: direct ones plus those through
/// NVSwitches (as many as the side with fewer switch links has).
fn shared_nvlinks(t: &TopologyFacts, a: usize, b: usize) -> usize {
    let direct = active_links(t, a)
        .iter()
        .filter(|l| l.remote == NvLinkRemote::Gpu(b as u32))
        .count();
    let switch = |i: usize| {
        active_links(t, i)
            .iter()
            .filter(|l| l.remote == NvLinkRemote::Switch)
            .count()
    };
    direct + switch(a).min(switch(b))
}

/// What a GPU's NVSwitch fabric state says: until the fabric manager has
/// registered the GPU, CUDA cannot initialise on it (cudaErrorSystemNotReady;
/// NVIDIA Fabric Manager user guide).
fn fabric_finding(gpu: u32, fabric: &Reading<FabricState>) -> Option<Finding> {
    const FABRIC_HINT: &str = "the NVSwitch fabric of {gpus} is not up, and CUDA cannot start on \
        it until it is: start the fabric manager, at exactly the driver's version \
        (`sudo systemctl enable --now nvidia-fabricmanager`), check it with \
        `systemctl status nvidia-fabricmanager` and `journalctl -u nvidia-fabricmanager`, and \
        `nvidia-smi -q -i {ids} | grep -i -A3 fabric` shows each GPU's state; on GB200/GB300 \
        NVL72 racks the NVLink switch trays register the GPUs instead, and fabric.mnnvl says \
        what stops them";
    let text = match fabric {
        Ok(FabricState::Completed) => return None,
        Ok(FabricState::NotStarted) => "NVSwitch fabric not started (fabric manager)".to_string(),
        Ok(FabricState::InProgress) => {
            "NVSwitch fabric registration still in progress (fabric manager)".to_string()
        }
        Ok(FabricState::Failed(e)) => format!("NVSwitch fabric registration failed: {e}"),
        Err(e) => return unreadable(gpu, "the NVSwitch fabric state", e),
    };
    Some(
        Finding::new(Some(gpu), Status::Fail, text)
            .hint(FABRIC_HINT)
            .action(Action::FixInstall),
    )
}

/// Read and write P2P together: usable when both work.
fn p2p_pair(read: &Reading<P2pStatus>, write: &Reading<P2pStatus>) -> Option<(P2pStatus, String)> {
    match (read, write) {
        (Ok(r), Ok(w)) if r == w => Some((*r, p2p_code(*r).to_string())),
        (Ok(r), Ok(w)) => {
            let worst = if *r != P2pStatus::Ok { *r } else { *w };
            Some((worst, format!("R:{} W:{}", p2p_code(*r), p2p_code(*w))))
        }
        (Ok(s), Err(_)) | (Err(_), Ok(s)) => Some((*s, p2p_code(*s).to_string())),
        (Err(_), Err(_)) => None,
    }
}

/// Judge the GPU-to-GPU topology: P2P between every pair of the job's GPUs
/// (every GPU unless `job` narrows it), NVLinks up, and each GPU's NVSwitch
/// fabric registered (`fabric`, per GPU in NVML order; empty when unknown).
pub fn evaluate_topology(
    t: &TopologyFacts,
    fabric: &[Reading<FabricState>],
    job: Option<&JobGpus>,
) -> Outcome {
    evaluate_topology_beside_lost(t, fabric, job, &[])
}

/// [`evaluate_topology`] for the GPUs that answer: those in `lost`, which
/// an earlier check failed as fallen off the bus, are drawn, not judged, and
/// marked lost.
pub fn evaluate_topology_beside_lost(
    t: &TopologyFacts,
    fabric: &[Reading<FabricState>],
    job: Option<&JobGpus>,
    lost: &[u32],
) -> Outcome {
    let n = t.gpus.len();
    if n == 0 {
        return Outcome::skip("no GPUs: no topology to check");
    }
    let is_lost = |i: usize| lost.contains(&(i as u32));
    let in_job = |i: usize| job.is_none_or(|j| j.gpus.contains(&(i as u32))) && !is_lost(i);
    let mut findings = Findings::new();
    findings.items.extend(nvlink_error_findings(t, &in_job));
    let devices = gpu_rows(t, fabric, &in_job, &is_lost, &mut findings);
    let lost_refs: Vec<(GpuRef, Unavailable)> = t
        .gpus
        .iter()
        .zip(&t.nvlinks)
        .filter(|(g, _)| lost.contains(&g.index))
        .map(|(g, links)| {
            let error = links.as_ref().err().cloned();
            (g.clone(), error.unwrap_or(Unavailable::GpuLost))
        })
        .collect();
    mark_lost(
        judge_machine(t, job, &in_job, findings, devices),
        &lost_refs,
    )
}

/// The verdict over the pairs of the job's GPUs that answer, with the
/// machine's matrices.
fn judge_machine(
    t: &TopologyFacts,
    job: Option<&JobGpus>,
    in_job: &dyn Fn(usize) -> bool,
    mut findings: Findings,
    devices: Vec<DeviceResult>,
) -> Outcome {
    let n = t.gpus.len();
    if n == 1 {
        let mut o = findings.conclude("single GPU: no peer links to check", devices);
        if o.status == Status::Pass {
            o.summary = "single GPU: no peer links to check".to_string();
        }
        return o;
    }
    let job_size = (0..n).filter(|i| in_job(*i)).count();
    // The pairs judged: those between GPUs of the job.
    let pairs = job_size * job_size.saturating_sub(1) / 2;
    let tally = judge_pairs(t, in_job, &mut findings);
    no_p2p_findings(&tally.no_p2p, pairs, &mut findings);
    let tables = draw_tables(t);
    let selected = job.map(|j| format!(" in CUDA_VISIBLE_DEVICES={}", j.cuda_visible_devices));
    let selected = selected.as_deref().unwrap_or_default();
    if job_size < 2 {
        let pass = format!("one GPU{selected}: no peer links to check");
        let mut o = findings.conclude(pass, devices);
        o.tables = tables;
        return o;
    }
    let unavailable: usize = tally.no_p2p.iter().map(|(_, names)| names.len()).sum();
    let p2p_na = pairs.saturating_sub(tally.p2p_ok + unavailable + tally.through_cpu);
    let nvlink_known = t
        .nvlinks
        .iter()
        .any(|l| matches!(l, Ok(links) if !links.is_empty()));
    if p2p_na == pairs && !nvlink_known && findings.worst() < Status::Warn {
        let mut o = Outcome::skip("P2P status and NVLinks not reported by these GPUs (n/a)");
        o.devices = devices;
        o.tables = tables;
        return o;
    }
    let pass = pass_summary(&format!("{job_size} GPUs{selected}"), pairs, p2p_na, &tally);
    let mut outcome = findings.conclude(pass, devices);
    outcome.tables = tables;
    outcome
        .with_metric("p2p_pairs_unavailable", unavailable as f64, "count")
        .with_metric("p2p_pairs_through_cpu", tally.through_cpu as f64, "count")
}

/// "8 GPUs: P2P between all 28 pairs, all over NVLink", with the pairs
/// NVML could not say about and those that meet only through the CPU.
fn pass_summary(gpus: &str, pairs: usize, p2p_na: usize, tally: &PairTally) -> String {
    const THROUGH_CPU: &str = "only through the CPU, where NCCL does not use P2P by default";
    if pairs == 1 && tally.through_cpu == 1 {
        return format!("{gpus}: the pair meets {THROUGH_CPU}");
    }
    let mut pass = match (pairs, p2p_na, tally.through_cpu) {
        (1, 0, 0) => format!("{gpus}: P2P between them"),
        (_, 0, 0) => format!("{gpus}: P2P between all {pairs} pairs"),
        (_, 0, _) => format!("{gpus}: P2P between {} of {pairs} pairs", tally.p2p_ok),
        _ => format!(
            "{gpus}: P2P between {} of {pairs} pairs, n/a for {p2p_na}",
            tally.p2p_ok
        ),
    };
    if tally.nvlink_pairs == pairs {
        pass.push_str(if pairs == 1 {
            ", over NVLink"
        } else {
            ", all over NVLink"
        });
    } else if tally.nvlink_pairs > 0 {
        pass.push_str(&format!(", {} over NVLink", tally.nvlink_pairs));
    }
    match tally.through_cpu {
        0 => {}
        1 => pass.push_str(&format!("; 1 pair meets {THROUGH_CPU}")),
        n => pass.push_str(&format!("; {n} pairs meet {THROUGH_CPU}")),
    }
    pass
}

/// The PCIe paths NCCL uses P2P over by default: up to PXB (PIX, PXB, and
/// GPUs on one board). NCCL's ncclTopoCheckP2p (src/graph/paths.cc) caps its
/// P2P level at PATH_PXB on Intel, ARM and Zhaoxin hosts, and elsewhere uses
/// P2P farther only where NVML reports it; so two GPUs that meet only
/// through a CPU (PHB, NODE, SYS: across host bridges or sockets) without
/// P2P are how such servers are built, not a fault to fix.
const NCCL_DEFAULT_P2P_PATHS: [Ancestor; 3] =
    [Ancestor::Internal, Ancestor::Single, Ancestor::Multiple];

/// True when the pair's PCIe path goes through a CPU, where NCCL by default
/// does not use P2P (an unknown path is judged).
fn through_cpu(path: &Reading<Ancestor>) -> bool {
    matches!(path, Ok(a) if !NCCL_DEFAULT_P2P_PATHS.contains(a))
}

/// NVML's answers that blame the path between two GPUs (the chipset, the
/// PCIe topology), not the GPUs (GeForce) or the driver (a registry key):
/// those are judged on every path.
fn refused_by_the_path(s: P2pStatus) -> bool {
    matches!(
        s,
        P2pStatus::ChipsetNotSupported | P2pStatus::TopologyNotSupported
    )
}

/// Each GPU's row: its NVLinks and, for the job's GPUs, its NVSwitch fabric
/// state; GPUs outside the job are noted, not judged.
fn gpu_rows(
    t: &TopologyFacts,
    fabric: &[Reading<FabricState>],
    in_job: &dyn Fn(usize) -> bool,
    is_lost: &dyn Fn(usize) -> bool,
    findings: &mut Findings,
) -> Vec<DeviceResult> {
    let mut devices = Vec::new();
    for (i, links) in t.nvlinks.iter().enumerate() {
        let Some(gpu) = t.gpus.get(i) else { break };
        if is_lost(i) {
            // Marked lost once the verdict is drawn.
        } else if !in_job(i) {
            findings.push(Finding::new(
                Some(gpu.index),
                Status::Pass,
                "not in CUDA_VISIBLE_DEVICES, not judged",
            ));
        } else if let Some(state) = fabric.get(i) {
            findings.items.extend(fabric_finding(gpu.index, state));
        }
        let (ok, metrics) = nvlink_state(gpu, links, in_job(i), findings);
        if in_job(i) {
            findings
                .items
                .extend(fewer_nvlinks_than_the_part(t, gpu, links));
        }
        devices.push(findings.device_result(row(gpu, metrics), ok));
    }
    devices
}

/// A GPU's NVLinks as its row shows them; some down while others are up
/// warns for a GPU of the job.
fn nvlink_state(
    gpu_ref: &GpuRef,
    links: &Reading<Vec<NvLinkState>>,
    judged: bool,
    findings: &mut Findings,
) -> (String, Vec<Metric>) {
    let gpu = gpu_ref.index;
    let l = match links {
        Ok(l) => l,
        Err(Unavailable::NotSupported) => return ("no NVLink".to_string(), Vec::new()),
        Err(e) => {
            // A lost GPU says so once, whether its fabric state or its
            // NVLinks found out first.
            let finding = unreadable(gpu, "the NVLinks", e).filter(|f| !findings.items.contains(f));
            if judged {
                findings.items.extend(finding);
            }
            return ("NVLinks n/a".to_string(), Vec::new());
        }
    };
    let up = l.iter().filter(|s| s.active).count();
    let down: Vec<u32> = l.iter().filter(|s| !s.active).map(|s| s.link).collect();
    if up > 0 && !down.is_empty() && judged {
        let down = down.iter().map(u32::to_string).collect::<Vec<_>>();
        findings.push(
            Finding::new(
                Some(gpu),
                Status::Warn,
                format!(
                    "{up} of {} NVLinks active (down: link {})",
                    l.len(),
                    down.join(", ")
                ),
            )
            .hint(
                "an NVLink of {gpus} is down, so its traffic shares the remaining \
                 links or falls back to PCIe: check `nvidia-smi nvlink -s -i {ids}` \
                 and `nvidia-smi nvlink -e -i {ids}`, `sudo dmesg | grep -i xid` (Xid \
                 74), and on NVSwitch systems `systemctl status nvidia-fabricmanager`; \
                 a GPU reset or reboot may retrain the link, otherwise it needs \
                 service",
            )
            .action(Action::ResetGpu),
        );
    }
    let to_switch = l
        .iter()
        .any(|s| s.active && s.remote == NvLinkRemote::Switch);
    let text = if l.is_empty() {
        "no NVLink".to_string()
    } else if to_switch {
        format!("{up}/{} NVLinks active (to NVSwitch)", l.len())
    } else {
        format!("{up}/{} NVLinks active", l.len())
    };
    let metrics = vec![
        Metric::new("nvlinks_active", up as f64, "count"),
        Metric::new("nvlinks", l.len() as f64, "count"),
    ];
    (text, metrics)
}

/// An NVSwitch or board-wired (SXM) part that NVML shows with fewer NVLinks
/// than the model table gives it: the missing links carry nothing. For a
/// model the table lacks, the most any GPU of the same name here lists is
/// the reference, and the finding says so. Links NVML lists as down are
/// [`nvlink_state`]'s finding; bridged PCIe cards may have no bridge at all.
fn fewer_nvlinks_than_the_part(
    t: &TopologyFacts,
    gpu: &GpuRef,
    links: &Reading<Vec<NvLinkState>>,
) -> Option<Finding> {
    let Ok(l) = links else { return None };
    let (expected, of) = match sku::by_nvml_name(&gpu.name) {
        Some(spec) => (
            spec.nvlink.filter(|n| !n.bridge)?.links as usize,
            spec.model.to_string(),
        ),
        None => (
            t.gpus
                .iter()
                .zip(&t.nvlinks)
                .filter(|(g, _)| g.name == gpu.name && g.index != gpu.index)
                .filter_map(|(_, l)| l.as_ref().ok().map(Vec::len))
                .max()?,
            "its siblings; model not in gpucheck's table".to_string(),
        ),
    };
    (!l.is_empty() && l.len() < expected).then(|| {
        Finding::new(
            Some(gpu.index),
            Status::Warn,
            format!("only {} NVLinks listed ({of}: {expected})", l.len()),
        )
        .hint(
            "NVML lists fewer NVLinks for {gpus} than its model has, so its GPU-to-GPU \
             bandwidth is cut: check `nvidia-smi nvlink -s -i {ids}` and `sudo dmesg | grep -i \
             xid`; a GPU reset or reboot may bring the links back, otherwise the board needs \
             service",
        )
        .action(Action::ResetGpu)
    })
}

/// What the pairs of the job's GPUs showed.
#[derive(Debug, Default)]
struct PairTally {
    /// Pairs with P2P, over NVLink or PCIe.
    p2p_ok: usize,
    /// Pairs joined by NVLink.
    nvlink_pairs: usize,
    /// Pairs without P2P ("GPU0-GPU1"), by reason.
    no_p2p: Vec<(P2pStatus, Vec<String>)>,
    /// Pairs that meet only through a CPU, where NCCL does not use P2P by
    /// default, and whose path refuses P2P: shown, not judged.
    through_cpu: usize,
}

/// Judge P2P between every pair of the job's GPUs: NVLinks up without P2P
/// over them warns (the fabric manager); pairs without P2P are tallied by
/// reason, apart from those that meet only through a CPU.
fn judge_pairs(
    t: &TopologyFacts,
    in_job: &dyn Fn(usize) -> bool,
    findings: &mut Findings,
) -> PairTally {
    let n = t.gpus.len();
    let mut tally = PairTally::default();
    for pair in &t.pairs {
        let (a, b) = (pair.a as usize, pair.b as usize);
        if a >= n || b >= n || !(in_job(a) && in_job(b)) {
            // Drawn, not judged: a job here will not use this pair.
            continue;
        }
        let pair_name = format!("GPU{a}-GPU{b}");
        let nvlink_ok = pair.p2p_nvlink == Ok(P2pStatus::Ok);
        if shared_nvlinks(t, a, b) > 0 {
            tally.nvlink_pairs += 1;
            if !nvlink_ok && pair.p2p_nvlink.is_ok() {
                findings.push(
                    Finding::new(
                        None,
                        Status::Warn,
                        format!("{pair_name}: NVLinks up but P2P over NVLink unavailable"),
                    )
                    .hint(
                        "on NVSwitch systems (HGX/DGX) the fabric manager must run, at the \
                         driver's version: `sudo systemctl enable --now nvidia-fabricmanager`; \
                         `nvidia-smi -q | grep -i -A2 fabric` shows its state",
                    )
                    .action(Action::FixInstall),
                );
            }
        }
        match p2p_pair(&pair.p2p_read, &pair.p2p_write) {
            _ if nvlink_ok => tally.p2p_ok += 1,
            Some((P2pStatus::Ok, _)) => tally.p2p_ok += 1,
            Some((status, _)) if through_cpu(&pair.ancestor) && refused_by_the_path(status) => {
                tally.through_cpu += 1
            }
            Some((status, _)) => match tally.no_p2p.iter_mut().find(|(s, _)| *s == status) {
                Some((_, names)) => names.push(pair_name),
                None => tally.no_p2p.push((status, vec![pair_name])),
            },
            None => {}
        }
    }
    tally
}

/// One warning per reason pairs have no P2P, naming up to three pairs.
fn no_p2p_findings(no_p2p: &[(P2pStatus, Vec<String>)], pairs: usize, findings: &mut Findings) {
    const NAMED_PAIRS: usize = 3;
    for (status, names) in no_p2p {
        let which = if names.len() <= NAMED_PAIRS {
            names.join(", ")
        } else {
            format!("{} of {pairs} GPU pairs", names.len())
        };
        findings.push(
            Finding::new(
                None,
                Status::Warn,
                format!("no P2P between {which} ({})", p2p_words(*status)),
            )
            .hint(p2p_hint(*status)),
        );
    }
}

/// The whole machine's matrices, as `nvidia-smi topo -m` and `topo -p2p rw`
/// draw them: how each pair is joined, and its P2P status.
fn draw_tables(t: &TopologyFacts) -> Vec<DataTable> {
    let n = t.gpus.len();
    let mut topo = vec![vec![String::new(); n]; n];
    let mut p2p = vec![vec![String::new(); n]; n];
    for (i, row) in topo.iter_mut().enumerate() {
        row[i] = "X".to_string();
        p2p[i][i] = "X".to_string();
    }
    for pair in &t.pairs {
        let (a, b) = (pair.a as usize, pair.b as usize);
        if a >= n || b >= n {
            continue;
        }
        let links = shared_nvlinks(t, a, b);
        let cell = if links > 0 {
            format!("NV{links}")
        } else {
            match &pair.ancestor {
                Ok(x) => ancestor_code(*x).to_string(),
                Err(_) => "n/a".to_string(),
            }
        };
        topo[a][b] = cell.clone();
        topo[b][a] = cell;
        let p2p_cell = match p2p_pair(&pair.p2p_read, &pair.p2p_write) {
            _ if pair.p2p_nvlink == Ok(P2pStatus::Ok) => "OK".to_string(),
            Some((_, code)) => code,
            None => "n/a".to_string(),
        };
        p2p[a][b] = p2p_cell.clone();
        p2p[b][a] = p2p_cell;
    }
    let header: Vec<String> = std::iter::once(String::new())
        .chain((0..n).map(|i| format!("GPU{i}")))
        .collect();
    let rows = |m: Vec<Vec<String>>| -> Vec<Vec<String>> {
        m.into_iter()
            .enumerate()
            .map(|(i, r)| std::iter::once(format!("GPU{i}")).chain(r).collect())
            .collect()
    };
    vec![
        DataTable {
            title: "GPU topology".to_string(),
            header: header.clone(),
            rows: rows(topo),
            legend: Some(TOPOLOGY_LEGEND.to_string()),
        },
        DataTable {
            title: "GPU P2P read/write".to_string(),
            header,
            rows: rows(p2p),
            legend: Some(P2P_LEGEND.to_string()),
        },
    ]
}

pub struct Topology;

impl Check for Topology {
    fn id(&self) -> &'static str {
        "gpu.topology"
    }
    fn title(&self) -> &'static str {
        "GPU topology (P2P, NVLink)"
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
        "Maps how the GPUs reach each other: peer-to-peer (P2P) read/write status and NVLink for every \
pair, their common PCIe ancestor, and how many NVLinks each GPU has up; drawn like \
`nvidia-smi topo -m`.

NCCL's all-reduce, the heart of DDP, moves gradients GPU to GPU. With P2P it copies directly over \
NVLink or PCIe; without it every byte detours through host memory, which is several times slower. \
The pairs judged are those between the GPUs a job started here will use: the ones \
CUDA_VISIBLE_DEVICES selects, or every GPU when it is unset; the matrix always shows the whole \
machine.

Pairs that meet only through a CPU (PHB, NODE, SYS: across host bridges or sockets) are shown, \
not judged, when the chipset or the PCIe topology refuses P2P there, as it does on dual-socket \
servers: NCCL by default uses P2P only up to PXB on Intel and ARM hosts, and elsewhere only where \
NVML reports it, so those pairs go through host memory by design.

No P2P between any other pair warns. On servers this is usually PCIe ACS or the IOMMU: check \
`sudo lspci -vvv | grep ACSCtl`, disable ACS in the BIOS or boot with iommu=pt, and run with \
NCCL_P2P_DISABLE=1 to confirm the job works without it. GeForce cards do not support P2P at all \
(nothing to fix). A GPU with some NVLinks down while others are up warns: check \
`nvidia-smi nvlink -s`, Xid 74 in dmesg and, on NVSwitch systems, nvidia-fabricmanager; a reset may \
retrain the link. An SXM part (H100, H200, H800, A100, A800, V100, B200) that NVML lists with fewer \
NVLinks than gpucheck's model table gives it (18 on an H100 SXM) warns too; bridged PCIe cards may \
have no bridge and are not judged so. For a model the table lacks, the reference is the most NVLinks \
another GPU of the same model here lists, and the result says so. NVLink error counters \
(nvmlDeviceGetNvLinkErrorCounter, per active link, counted since the driver loaded) warn for a GPU \
with any recovery (the link failed and retrained) or with replays or CRC errors at least 100 and ten times its siblings' median: a marginal link that runs \
slower and may go down; watch `nvidia-smi nvlink -e`. A single GPU has nothing to check.

On NVSwitch systems (HGX/DGX, Hopper and later) a GPU the fabric manager has not registered fails: \
CUDA cannot start on it until it is. Start the fabric manager at the driver's version \
(`sudo systemctl enable --now nvidia-fabricmanager`) and read `journalctl -u nvidia-fabricmanager`. \
A registration that completed with an error is named by nvml.h (NVML_ERROR_INSUFFICIENT_RESOURCES). \
On GB200/GB300 NVL72 racks the switch trays register the GPUs: fabric.mnnvl judges the registration \
there (time since boot, health mask and summary, NVLink domain, IMEX)."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        if let Some(skip) = nothing_counted(ctx) {
            return skip;
        }
        match nvml::topology(lib(ctx)) {
            Ok(t) => {
                // The fabric state lives beside the topology facts; a failure
                // to read it leaves it unknown, never fails the check.
                let fabric = nvml::fabric(lib(ctx)).unwrap_or_default();
                // GPUs gpu.count failed as lost, and lost here too.
                let lost: Vec<u32> = lost_in_count(ctx)
                    .into_iter()
                    .filter(|i| {
                        let at = t.gpus.iter().position(|g| g.index == *i);
                        at.and_then(|p| t.nvlinks.get(p)).is_some_and(|l| {
                            l.as_ref().err().is_some_and(Unavailable::is_machine_fault)
                        })
                    })
                    .collect();
                // With none answering, every GPU is judged as it is.
                let lost = if lost.len() < t.gpus.len() {
                    lost
                } else {
                    Vec::new()
                };
                let job = job_from_env(&t.gpus);
                evaluate_topology_beside_lost(&t, &fabric, job.as_ref(), &lost)
            }
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::testing::*;
    use crate::gpu::job_gpus;
    use crate::probe::nvml::{
        Ancestor, FabricState, NvLinkRemote, NvLinkState, P2pStatus, PairFacts, Reading,
        TopologyFacts, Unavailable,
    };
    use crate::Status;

    fn links(remote: NvLinkRemote, up: u32, down: u32) -> Reading<Vec<NvLinkState>> {
        Ok((0..up + down)
            .map(|link| NvLinkState {
                link,
                active: link < up,
                remote: remote.clone(),
                errors: Default::default(),
            })
            .collect())
    }

    fn topology(
        n: u32,
        nvlinks: impl Fn(u32) -> Reading<Vec<NvLinkState>>,
        pcie: Reading<P2pStatus>,
        nvlink_p2p: impl Fn(u32, u32) -> Reading<P2pStatus>,
    ) -> TopologyFacts {
        let mut pairs = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                pairs.push(PairFacts {
                    a,
                    b,
                    ancestor: Ok(if a / 2 == b / 2 {
                        Ancestor::Single
                    } else {
                        Ancestor::System
                    }),
                    p2p_read: pcie.clone(),
                    p2p_write: pcie.clone(),
                    p2p_nvlink: nvlink_p2p(a, b),
                });
            }
        }
        TopologyFacts {
            gpus: (0..n).map(gpu).collect(),
            nvlinks: (0..n).map(nvlinks).collect(),
            pairs,
        }
    }

    fn no_nvlink(_: u32) -> Reading<Vec<NvLinkState>> {
        Err(Unavailable::NotSupported)
    }

    #[test]
    fn nvswitch_box_passes_with_an_nv18_matrix() {
        let t = topology(
            4,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "4 GPUs: P2P between all 6 pairs, all over NVLink"
        );
        let m = &o.tables[0];
        assert_eq!(m.header, ["", "GPU0", "GPU1", "GPU2", "GPU3"]);
        assert_eq!(m.rows[0], ["GPU0", "X", "NV18", "NV18", "NV18"]);
        assert_eq!(m.rows[3][1], "NV18");
        assert!(m.legend.as_deref().unwrap_or("").contains("NV#"));
        assert_eq!(o.tables[1].rows[2], ["GPU2", "OK", "OK", "X", "OK"]);
        assert_eq!(o.devices[0].summary, "18/18 NVLinks active (to NVSwitch)");
    }

    #[test]
    fn direct_nvlinks_are_counted_per_pair() {
        // Two RTX A6000 on their NVLink bridge: its four links.
        let mut t = topology(
            2,
            |i| links(NvLinkRemote::Gpu(1 - i), 4, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        for g in &mut t.gpus {
            g.name = "NVIDIA RTX A6000".to_string();
        }
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "2 GPUs: P2P between them, over NVLink");
        assert_eq!(o.tables[0].rows[1], ["GPU1", "NV4", "X"]);
    }

    #[test]
    fn an_sxm_part_with_fewer_nvlinks_than_its_model_warns() {
        // H100 SXM: 18 links in the table; GPU 1 lists 12.
        let t = topology(
            2,
            |i| links(NvLinkRemote::Switch, if i == 1 { 12 } else { 18 }, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 1: only 12 NVLinks listed (H100 SXM5 80GB: 18)"
        );
        assert!(
            hint(&o).contains("nvidia-smi nvlink -s -i 1"),
            "{}",
            hint(&o)
        );
        // A bridged PCIe card (H100 NVL) without its bridges is not judged so.
        let mut t = topology(2, no_nvlink, Ok(P2pStatus::Ok), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        for g in &mut t.gpus {
            g.name = "NVIDIA H100 NVL".to_string();
        }
        assert_eq!(evaluate_topology(&t, &[], None).status, Status::Pass);
        // A model the table lacks: against the other GPUs of its name.
        let mut t = topology(
            3,
            |i| links(NvLinkRemote::Switch, if i == 2 { 9 } else { 18 }, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        for g in &mut t.gpus {
            g.name = "NVIDIA GB300".to_string();
        }
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 2: only 9 NVLinks listed (its siblings; model not in gpucheck's table: 18)"
        );
    }

    #[test]
    fn pcie_only_box_with_p2p_passes_and_shows_the_pcie_path() {
        let t = topology(4, no_nvlink, Ok(P2pStatus::Ok), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "4 GPUs: P2P between all 6 pairs");
        assert_eq!(o.tables[0].rows[0], ["GPU0", "X", "PIX", "SYS", "SYS"]);
        assert_eq!(o.devices[2].summary, "no NVLink");
    }

    #[test]
    fn no_p2p_over_the_chipset_warns_with_the_acs_hint() {
        let t = topology(2, no_nvlink, Ok(P2pStatus::ChipsetNotSupported), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "no P2P between GPU0-GPU1 (chipset does not support P2P)"
        );
        assert!(hint(&o).contains("sudo lspci -vvv | grep ACSCtl"));
        assert!(hint(&o).contains("iommu=pt"));
        assert!(hint(&o).contains("NCCL_P2P_DISABLE=1"));
        assert_eq!(o.tables[1].rows[0], ["GPU0", "X", "CNS"]);
        assert_eq!(o.metric("p2p_pairs_unavailable"), Some(1.0));
    }

    #[test]
    fn many_pairs_without_p2p_are_counted_not_listed() {
        let mut t = topology(8, no_nvlink, Ok(P2pStatus::TopologyNotSupported), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        // One PCIe switch tree: NCCL would use P2P between every pair.
        for p in t.pairs.iter_mut() {
            p.ancestor = Ok(Ancestor::Multiple);
        }
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "no P2P between 28 of 28 GPU pairs (PCIe topology does not support P2P)"
        );
    }

    #[test]
    fn geforce_p2p_and_regkey_have_their_own_hints() {
        let t = topology(2, no_nvlink, Ok(P2pStatus::GpuNotSupported), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert!(hint(&o).contains("nothing to fix in software"));
        let t = topology(2, no_nvlink, Ok(P2pStatus::DisabledByRegkey), |_, _| {
            Ok(P2pStatus::NotSupported)
        });
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert!(hint(&o).contains("NVreg_RegistryDwords"));
        // nvidia-smi topo -p2p's code for it.
        assert_eq!(o.tables[1].rows[0][2], "DR");
    }

    #[test]
    fn some_nvlinks_down_warn() {
        let t = topology(
            2,
            |i| {
                if i == 1 {
                    links(NvLinkRemote::Switch, 16, 2)
                } else {
                    links(NvLinkRemote::Switch, 18, 0)
                }
            },
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 1: 16 of 18 NVLinks active (down: link 16, 17)"
        );
        assert!(hint(&o).contains("nvidia-smi nvlink -s -i 1"));
        assert_eq!(o.tables[0].rows[0][2], "NV16");
    }

    #[test]
    fn nvlinks_up_without_nvlink_p2p_point_at_the_fabric_manager() {
        let t = topology(
            2,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::NotSupported),
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU0-GPU1: NVLinks up but P2P over NVLink unavailable"
        );
        assert!(hint(&o).contains("nvidia-fabricmanager"));
    }

    /// 4 GPUs under PCIe switches, P2P only between GPU0 and GPU1 (the
    /// chipset refuses the rest).
    fn p2p_only_between_0_and_1() -> TopologyFacts {
        let mut t = topology(4, no_nvlink, Ok(P2pStatus::ChipsetNotSupported), |_, _| {
            Err(Unavailable::NotSupported)
        });
        for p in t.pairs.iter_mut() {
            p.ancestor = Ok(Ancestor::Multiple);
        }
        for p in t.pairs.iter_mut().filter(|p| (p.a, p.b) == (0, 1)) {
            p.p2p_read = Ok(P2pStatus::Ok);
            p.p2p_write = Ok(P2pStatus::Ok);
        }
        t
    }

    /// A dual-socket PCIe server: GPUs 0-1 under one switch on socket 0,
    /// GPUs 2-3 on socket 1; NVML answers "chipset not supported" across the
    /// sockets, as it does on such servers.
    fn dual_socket(within: P2pStatus, across: P2pStatus, path: Ancestor) -> TopologyFacts {
        let mut t = topology(4, no_nvlink, Ok(within), |_, _| Ok(P2pStatus::NotSupported));
        for p in t.pairs.iter_mut().filter(|p| p.a / 2 != p.b / 2) {
            p.ancestor = Ok(path);
            p.p2p_read = Ok(across);
            p.p2p_write = Ok(across);
        }
        t
    }

    #[test]
    fn no_p2p_across_sockets_is_shown_not_warned() {
        let t = dual_socket(
            P2pStatus::Ok,
            P2pStatus::ChipsetNotSupported,
            Ancestor::System,
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "4 GPUs: P2P between 2 of 6 pairs; 4 pairs meet only through the CPU, where NCCL \
             does not use P2P by default"
        );
        assert_eq!(o.hint, None);
        // The matrices still show every pair as NVML reports it.
        assert_eq!(o.tables[0].rows[0], ["GPU0", "X", "PIX", "SYS", "SYS"]);
        assert_eq!(o.tables[1].rows[0], ["GPU0", "X", "OK", "CNS", "CNS"]);
        assert_eq!(o.metric("p2p_pairs_unavailable"), Some(0.0));
        assert_eq!(o.metric("p2p_pairs_through_cpu"), Some(4.0));
        // Across host bridges of one socket (NODE, PHB) the same holds.
        for path in [Ancestor::Node, Ancestor::HostBridge] {
            let t = dual_socket(P2pStatus::Ok, P2pStatus::TopologyNotSupported, path);
            assert_eq!(evaluate_topology(&t, &[], None).status, Status::Pass);
        }
    }

    #[test]
    fn no_p2p_under_a_pcie_switch_still_warns_on_a_dual_socket_server() {
        let t = dual_socket(
            P2pStatus::ChipsetNotSupported,
            P2pStatus::ChipsetNotSupported,
            Ancestor::System,
        );
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "no P2P between GPU0-GPU1, GPU2-GPU3 (chipset does not support P2P)"
        );
        assert!(hint(&o).contains("ACSCtl"), "{}", hint(&o));
        assert_eq!(o.metric("p2p_pairs_unavailable"), Some(2.0));
        // A job on one GPU of each socket has no pair NCCL would use P2P for.
        let job = job_gpus(Some("0,2"), &t.gpus).expect("two of four GPUs");
        let o = evaluate_topology(&t, &[], Some(&job));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "2 GPUs in CUDA_VISIBLE_DEVICES=0,2: the pair meets only through the CPU, where \
             NCCL does not use P2P by default"
        );
    }

    #[test]
    fn gpus_or_a_driver_refusing_p2p_warn_on_any_path() {
        for refusal in [P2pStatus::GpuNotSupported, P2pStatus::DisabledByRegkey] {
            let t = dual_socket(P2pStatus::Ok, refusal, Ancestor::System);
            let o = evaluate_topology(&t, &[], None);
            assert_eq!(o.status, Status::Warn, "{refusal:?}");
            assert!(
                o.summary.starts_with("no P2P between 4 of 6 GPU pairs"),
                "{}",
                o.summary
            );
        }
    }

    #[test]
    fn nvlink_across_sockets_is_judged_as_nvlink() {
        let mut t = dual_socket(
            P2pStatus::Ok,
            P2pStatus::ChipsetNotSupported,
            Ancestor::System,
        );
        t.nvlinks = (0..4).map(|_| links(NvLinkRemote::Switch, 18, 0)).collect();
        for p in t.pairs.iter_mut() {
            p.p2p_nvlink = Ok(P2pStatus::NotSupported);
        }
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary
                .starts_with("GPU0-GPU1: NVLinks up but P2P over NVLink unavailable"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn only_the_pairs_cuda_visible_devices_selects_are_judged() {
        let t = p2p_only_between_0_and_1();
        // Every GPU: the pairs without P2P warn.
        let all = evaluate_topology(&t, &[], None);
        assert_eq!(all.status, Status::Warn);
        assert_eq!(
            all.summary,
            "no P2P between 5 of 6 GPU pairs (chipset does not support P2P)"
        );
        // CUDA_VISIBLE_DEVICES=1,0: the job's one pair has P2P.
        let job = job_gpus(Some("1,0"), &t.gpus).expect("two of four GPUs selected");
        assert_eq!(job.gpus, [1, 0]);
        let o = evaluate_topology(&t, &[], Some(&job));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "2 GPUs in CUDA_VISIBLE_DEVICES=1,0: P2P between them"
        );
        assert_eq!(o.hint, None);
        assert_eq!(o.metric("p2p_pairs_unavailable"), Some(0.0));
        // The matrix still shows the whole machine; the rest is not judged.
        assert_eq!(o.tables[1].rows[2][4], "CNS");
        assert_eq!(
            o.devices[3].summary,
            "no NVLink (not in CUDA_VISIBLE_DEVICES, not judged)"
        );
        // A job on GPUs 0 and 2 crosses a pair without P2P.
        let job = job_gpus(Some("GPU-0,GPU-2"), &t.gpus).expect("UUIDs select");
        let o = evaluate_topology(&t, &[], Some(&job));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "no P2P between GPU0-GPU2 (chipset does not support P2P)"
        );
    }

    #[test]
    fn facts_with_fewer_nvlink_rows_than_gpus_do_not_panic() {
        let mut t = topology(
            3,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        t.nvlinks.truncate(1);
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(o.tables[0].rows[0][2], "PIX");
    }

    /// 4 GPUs on NVSwitches, judged with each GPU's fabric state.
    fn nvswitch_box(fabric: impl Fn(u32) -> Reading<FabricState>) -> Outcome {
        let t = topology(
            4,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        let fabric: Vec<Reading<FabricState>> = (0..4).map(fabric).collect();
        evaluate_topology(&t, &fabric, None)
    }

    #[test]
    fn a_registered_fabric_passes() {
        let o = nvswitch_box(|_| Ok(FabricState::Completed));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "4 GPUs: P2P between all 6 pairs, all over NVLink"
        );
    }

    #[test]
    fn a_fabric_not_started_fails_and_says_start_the_fabric_manager() {
        let o = nvswitch_box(|_| Ok(FabricState::NotStarted));
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .starts_with("GPU 0: NVSwitch fabric not started (fabric manager); GPU 1: "));
        let h = hint(&o);
        assert!(
            h.starts_with("the NVSwitch fabric of GPUs 0, 1, 2, 3 is not up"),
            "{h}"
        );
        assert!(
            h.contains("`sudo systemctl enable --now nvidia-fabricmanager`"),
            "{h}"
        );
        assert!(
            h.contains("nvidia-smi -q -i 0,1,2,3 | grep -i -A3 fabric"),
            "{h}"
        );
    }

    #[test]
    fn a_fabric_in_progress_or_failed_fails() {
        let o = nvswitch_box(|i| {
            Ok(match i {
                1 => FabricState::InProgress,
                2 => FabricState::Failed("Unknown Error".into()),
                _ => FabricState::Completed,
            })
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: NVSwitch fabric registration still in progress (fabric manager); GPU 2: \
             NVSwitch fabric registration failed: Unknown Error"
        );
        assert!(hint(&o).contains("GPUs 1, 2"), "{}", hint(&o));
    }

    #[test]
    fn a_lost_gpu_is_drawn_and_marked_and_the_rest_judged() {
        let mut t = topology(
            4,
            |_| links(NvLinkRemote::Switch, 18, 0),
            Ok(P2pStatus::Ok),
            |_, _| Ok(P2pStatus::Ok),
        );
        t.nvlinks[2] = Err(Unavailable::GpuLost);
        for p in t.pairs.iter_mut().filter(|p| p.a == 2 || p.b == 2) {
            p.p2p_read = Err(Unavailable::GpuLost);
            p.p2p_write = Err(Unavailable::GpuLost);
            p.p2p_nvlink = Err(Unavailable::GpuLost);
        }
        let mut fabric = vec![Ok(FabricState::Completed); 4];
        fabric[2] = Err(Unavailable::GpuLost);
        let o = evaluate_topology_beside_lost(&t, &fabric, None, &[2]);
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "3 GPUs: P2P between all 3 pairs, all over NVLink; GPU 2 lost: see gpu.count"
        );
        assert_eq!(o.devices[2].status, Status::Skip);
        assert_eq!(o.tables[1].rows[2], ["GPU2", "n/a", "n/a", "X", "n/a"]);
        // Judged on its own, the lost GPU fails, once.
        let o = evaluate_topology(&t, &fabric, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 2: GPU is lost (fallen off the bus)");
    }

    #[test]
    fn one_selected_gpu_has_no_peer_links_to_check() {
        let t = p2p_only_between_0_and_1();
        let job = job_gpus(Some("3"), &t.gpus).expect("one GPU selected");
        let o = evaluate_topology(&t, &[], Some(&job));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "one GPU in CUDA_VISIBLE_DEVICES=3: no peer links to check"
        );
        assert_eq!(o.tables.len(), 2);
    }

    #[test]
    fn one_gpu_has_nothing_to_check_and_none_skips() {
        let o = evaluate_topology(
            &topology(1, no_nvlink, Ok(P2pStatus::Ok), |_, _| Ok(P2pStatus::Ok)),
            &[],
            None,
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "single GPU: no peer links to check");
        let o = evaluate_topology(
            &topology(0, no_nvlink, Ok(P2pStatus::Ok), |_, _| Ok(P2pStatus::Ok)),
            &[],
            None,
        );
        assert_eq!(o.status, Status::Skip);
    }

    #[test]
    fn p2p_not_reported_skips_or_says_na() {
        let na = || Err(Unavailable::NotSupported);
        let o = evaluate_topology(&topology(3, no_nvlink, na(), |_, _| na()), &[], None);
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.summary,
            "P2P status and NVLinks not reported by these GPUs (n/a)"
        );
        assert_eq!(o.tables[1].rows[0], ["GPU0", "X", "n/a", "n/a"]);
        // Some pairs known, some not.
        let mut t = topology(3, no_nvlink, Ok(P2pStatus::Ok), |_, _| na());
        t.pairs[2].p2p_read = na();
        t.pairs[2].p2p_write = na();
        let o = evaluate_topology(&t, &[], None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "3 GPUs: P2P between 2 of 3 pairs, n/a for 1");
    }
}

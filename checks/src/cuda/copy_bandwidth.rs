//! `cuda.copy_bandwidth`: pinned host<->device copy bandwidth of every GPU,
//! judged against what its PCIe link carries and against its siblings.

use std::path::Path;
use std::time::Duration;

use crate::domain::stats::median;
use crate::domain::xid::PciSlot;
use crate::domain::{compat, pcie};
use crate::facts::nvml::{gpus_for_run, nvml_hung};
use crate::probe::copy_bandwidth::{self as copy_probe, CopyError, CopyProbeError, CopyRates};
use crate::probe::{nvml, sysfs};
use crate::{
    Check, Context, DataTable, DeviceResult, Finding, Findings, Isolation, Outcome, Profile, Status,
};

/// Below this share of its link's rate a copy is slow. A healthy x16 Gen4
/// GPU copies 22-26 GB/s of 31.5 (75-85 %; NVIDIA's bandwidthTest and
/// nvbandwidth reports), Gen5 x16 ~50-55 of 63: half is far outside that.
pub const LINK_FLOOR: f64 = 0.5;
/// Below this share of the median of its siblings a GPU is the odd one out
/// (identical GPUs on identical links measure within a few per cent; 30 %
/// less is a slower path: a link trained down, a GPU on the far socket, a
/// bad riser).
pub const SIBLING_FLOOR: f64 = 0.7;

pub struct CopyBandwidth;

/// A GPU's PCIe link as NVML reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieLink {
    /// The highest generation device and system support (the current one
    /// drops at idle to save power).
    pub gen: u32,
    /// The current width.
    pub width: u32,
}

impl PcieLink {
    /// What the link carries per direction, GB/s.
    pub fn gbps(self) -> Option<f64> {
        pcie::link_gbps(self.gen, self.width)
    }
}

/// One GPU's copies, with what is known of its path to the host.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuCopy {
    /// The NVML index when the bus id matched, else the CUDA ordinal.
    pub index: u32,
    pub name: String,
    pub link: Option<PcieLink>,
    /// The NUMA node of its PCI device (sysfs numa_node), when known.
    pub numa_node: Option<u32>,
    /// The CUDA ordinal, to measure it again.
    pub ordinal: u32,
    /// The CPUs (sysfs local_cpulist) the measuring thread was bound to,
    /// its pinned buffer allocated there; None when it ran unbound.
    pub bound_cpus: Option<String>,
    /// Every successful run, the first pass's first; `rates` is their
    /// median once there are several.
    pub runs: Vec<CopyRates>,
    pub rates: Result<CopyRates, CopyError>,
}

/// Runs in all of a GPU whose first run is slow: it is measured twice
/// more and the median decides, so one noisy reading never flags a GPU
/// (the same rule as nccl.allreduce's REPEAT_RUNS).
pub const REPEAT_RUNS: usize = 3;

/// What `cuda.copy_bandwidth` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyBandwidthFacts {
    pub gpus: Result<Vec<GpuCopy>, CopyProbeError>,
}

impl Check for CopyBandwidth {
    fn id(&self) -> &'static str {
        "cuda.copy_bandwidth"
    }
    fn title(&self) -> &'static str {
        "Host-device copy bandwidth"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn needs(&self) -> &'static [&'static str] {
        &["cuda.driver"]
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn explain(&self) -> &'static str {
        "Copies a pinned host buffer (cuMemHostAlloc, up to 256 MiB, less when little GPU memory is free) to every GPU and back, timed with CUDA events around cuMemcpyHtoDAsync / cuMemcpyDtoHAsync, best of three, and judges each GPU against what its PCIe link carries (generation x width from NVML; per lane and direction Gen3 0.985, Gen4 1.969, Gen5 3.938 GB/s) and against the other GPUs. The numbers are reported in a table.\n\n\
         Each GPU is measured from a thread bound to its own NUMA node's CPUs (sysfs \
         local_cpulist of its PCI device, what NVML's CPU affinity reports), so its pinned buffer \
         is allocated on that node and no copy crosses the CPU interconnect of a dual-socket host \
         (nvbandwidth's method); the table shows the node and the CPUs used, or \"not bound\" \
         where sysfs does not say or the binding is refused. A GPU whose first measurement is \
         slow is measured twice more and the median of the three decides, so one noisy reading \
         never flags a GPU; its row says how many runs were low.\n\n\
         A DDP job moves every batch host-to-device and, with pinned DataLoader memory, at this \
         rate; one GPU behind a slow path (a link trained down to x8 or Gen1, a riser fault, a GPU \
         reached across the CPU interconnect) makes every step wait for it. A healthy x16 Gen4 GPU \
         copies 22-26 GB/s, Gen5 x16 about 50.\n\n\
         Warns for a GPU below half of its link's rate or below 70% of the median of the other \
         GPUs, naming it and its NUMA node. Fixes: reseat the GPU or its riser, check the slot's \
         BIOS link settings and `nvidia-smi -q -d PCIE`, and keep the job's CPU threads and memory \
         on the GPU's NUMA node (`numactl --cpunodebind=N --membind=N`, torchrun's --numa-binding)."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let measured = copy_probe::measure_all();
        let mut gpus = measured.map(|list| {
            let paths = nvml_links(ctx);
            let root = sysfs::sysfs_root();
            list.into_iter()
                .map(|d| {
                    let slot = d.pci_bus_id.as_deref().and_then(PciSlot::parse);
                    let index = slot
                        .and_then(|s| paths.slots.iter().find(|(b, _)| *b == s))
                        .map_or(d.ordinal, |(_, i)| *i);
                    GpuCopy {
                        index,
                        name: d.name.unwrap_or_else(|| "(unknown)".into()),
                        link: paths
                            .links
                            .iter()
                            .find(|(i, _)| *i == index)
                            .map(|(_, l)| *l),
                        numa_node: d
                            .bound
                            .as_ref()
                            .and_then(|b| b.numa_node)
                            .or_else(|| slot.and_then(|s| numa_node(&root, s))),
                        ordinal: d.ordinal,
                        bound_cpus: d.bound.map(|b| b.cpulist),
                        runs: d.rates.iter().cloned().collect(),
                        rates: d.rates,
                    }
                })
                .collect::<Vec<GpuCopy>>()
        });
        if let Ok(gpus) = gpus.as_mut() {
            measure_slow_again(gpus);
        }
        evaluate(&CopyBandwidthFacts { gpus })
    }
}

/// Measure every GPU whose first run is slow until it has [`REPEAT_RUNS`]
/// runs; its rates become their median.
fn measure_slow_again(gpus: &mut [GpuCopy]) {
    for i in slow_gpus(gpus) {
        while gpus[i].runs.len() < REPEAT_RUNS {
            crate::probe::stage(&format!("measure GPU {} again", gpus[i].index));
            match copy_probe::measure_again(gpus[i].ordinal).rates {
                Ok(r) => gpus[i].runs.push(r),
                Err(_) => break,
            }
        }
        if let Some(m) = median_rates(&gpus[i].runs) {
            gpus[i].rates = Ok(m);
        }
    }
}

/// Positions of the GPUs whose rates are slow.
pub fn slow_gpus(gpus: &[GpuCopy]) -> Vec<usize> {
    (0..gpus.len())
        .filter(|&i| match &gpus[i].rates {
            Ok(r) => !slow_reasons(r, &gpus[i], gpus).is_empty(),
            Err(_) => false,
        })
        .collect()
}

/// The per-direction medians of several runs (the faster of the middle two).
pub fn median_rates(runs: &[CopyRates]) -> Option<CopyRates> {
    let pick = |f: fn(&CopyRates) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    Some(CopyRates {
        bytes: runs.first()?.bytes,
        h2d_gbps: pick(|r| r.h2d_gbps)?,
        d2h_gbps: pick(|r| r.d2h_gbps)?,
    })
}

/// "; low in 1 of 3 runs" for a GPU measured more than once.
fn runs_note(g: &GpuCopy, all: &[GpuCopy]) -> String {
    if g.runs.len() < 2 {
        return String::new();
    }
    let low = g
        .runs
        .iter()
        .filter(|r| !slow_reasons(r, g, all).is_empty())
        .count();
    format!(
        " (low in {low} of {} runs; the median counts)",
        g.runs.len()
    )
}

/// What NVML says of the GPUs' PCIe paths.
#[derive(Default)]
struct NvmlPaths {
    /// PCI slot -> NVML index.
    slots: Vec<(PciSlot, u32)>,
    /// NVML index -> link.
    links: Vec<(u32, PcieLink)>,
}

/// NVML's bus ids and PCIe links, or nothing when NVML is unusable or
/// already hung.
fn nvml_links(ctx: &Context) -> NvmlPaths {
    if nvml_hung(ctx).is_some() {
        return NvmlPaths::default();
    }
    let Ok(gpus) = gpus_for_run(ctx) else {
        return NvmlPaths::default();
    };
    let slots = gpus
        .iter()
        .filter_map(|g| Some((PciSlot::parse(&g.pci_bus_id)?, g.index)))
        .collect();
    crate::probe::stage("NVML PCIe links");
    let links = nvml::pcie(ctx.options.nvml_lib.as_deref())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|g| {
            let f = g.facts.ok()?;
            let gen = f.max_link_gen.ok()?;
            let width = f.link_width.ok()?;
            Some((g.gpu.index, PcieLink { gen, width }))
        })
        .collect();
    NvmlPaths { slots, links }
}

/// `<sysfs>/bus/pci/devices/<slot>.0/numa_node`; -1 (no NUMA) is none.
fn numa_node(root: &Path, slot: PciSlot) -> Option<u32> {
    let dir = root.join(format!("bus/pci/devices/{slot}.0/numa_node"));
    sysfs::attr(&dir)?.parse::<i64>().ok()?.try_into().ok()
}

/// "25.3", or "0.25" below 1 GB/s.
fn gbps(x: f64) -> String {
    if x < 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.1}")
    }
}

/// Judge the copies.
pub fn evaluate(f: &CopyBandwidthFacts) -> Outcome {
    let gpus = match &f.gpus {
        Ok(g) if g.is_empty() => return Outcome::skip("no CUDA devices to copy to"),
        Ok(g) => g,
        Err(CopyProbeError::NoLibcuda) => return Outcome::skip("libcuda.so.1 not found"),
        Err(CopyProbeError::StubLibrary(lib)) => return stub_loaded(lib),
        Err(CopyProbeError::Driver(e)) => {
            return Outcome::error(format!("the CUDA driver could not be used: {e}"))
        }
    };
    let mut findings = Findings::new();
    let mut devices = Vec::new();
    for g in gpus {
        judge_gpu(g, gpus, &mut findings);
        let device = DeviceResult {
            index: g.index,
            label: None,
            name: g.name.clone(),
            uuid: None,
            status: Status::Pass,
            summary: String::new(),
            metrics: Vec::new(),
        };
        let ok = match &g.rates {
            Ok(r) => format!(
                "{} GB/s to the GPU, {} GB/s back{}",
                gbps(r.h2d_gbps),
                gbps(r.d2h_gbps),
                runs_note(g, gpus)
            ),
            Err(_) => String::new(),
        };
        devices.push(findings.device_result(device, ok));
    }
    let measured: Vec<&CopyRates> = gpus.iter().filter_map(|g| g.rates.as_ref().ok()).collect();
    let lowest = |pick: fn(&CopyRates) -> f64| {
        measured
            .iter()
            .map(|r| pick(r))
            .fold(f64::INFINITY, f64::min)
    };
    let bound = if gpus.iter().all(|g| g.bound_cpus.is_some()) {
        ", each from the CPUs local to it"
    } else {
        ""
    };
    let pass = format!(
        "pinned copies on {}{bound}: at least {} GB/s host-to-device, {} GB/s device-to-host",
        crate::domain::text::gpu_count(gpus.len()),
        gbps(lowest(|r| r.h2d_gbps)),
        gbps(lowest(|r| r.d2h_gbps))
    );
    let mut o = findings.conclude(pass, devices).with_table(table(gpus));
    if measured.len() == gpus.len() {
        o = o
            .with_metric("min_h2d_gbps", lowest(|r| r.h2d_gbps), "GB/s")
            .with_metric("min_d2h_gbps", lowest(|r| r.d2h_gbps), "GB/s");
    }
    o
}

/// The libcuda loaded is the CUDA toolkit's stub (cuInit answered
/// CUDA_ERROR_STUB_LIBRARY): the environment is wrong, and the file is named.
fn stub_loaded(lib: &Path) -> Outcome {
    Outcome::fail(
        compat::stub_libcuda_summary(lib, "CUDA_ERROR_STUB_LIBRARY"),
        compat::stub_libcuda_hint(lib),
    )
}

/// The finding about one GPU, if any: a failed copy, or rates below its
/// link's or its siblings'.
fn judge_gpu(g: &GpuCopy, all: &[GpuCopy], findings: &mut Findings) {
    let r = match &g.rates {
        Ok(r) => r,
        Err(e) => {
            findings.push(
                Finding::new(
                    Some(g.index),
                    Status::Fail,
                    format!("{} failed: {}", e.call, e.error),
                )
                .hint(
                    "pinned copies fail on {gpus}: check `nvidia-smi` and the kernel log for Xid \
                     errors; in a container, raise the locked-memory limit (`ulimit -l unlimited`, \
                     docker --ulimit memlock=-1)",
                ),
            );
            return;
        }
    };
    let reasons = slow_reasons(r, g, all);
    if reasons.is_empty() {
        return;
    }
    let numa = g
        .numa_node
        .map(|n| format!(" (NUMA node {n})"))
        .unwrap_or_default();
    findings.push(
        Finding::new(
            Some(g.index),
            Status::Warn,
            format!(
                "copies {} GB/s to the GPU and {} GB/s back{numa}: {}{}",
                gbps(r.h2d_gbps),
                gbps(r.d2h_gbps),
                reasons.join(", "),
                runs_note(g, all)
            ),
        )
        .hint(SLOW_PATH_HINT),
    );
}

/// Why rates `r` of GPU `g` are slow: under half its link's rate, or under
/// [`SIBLING_FLOOR`] of the other GPUs' median. Empty when they are not.
fn slow_reasons(r: &CopyRates, g: &GpuCopy, all: &[GpuCopy]) -> Vec<String> {
    let mut reasons = Vec::new();
    if let Some((link, cap)) = g.link.and_then(|l| Some((l, l.gbps()?))) {
        if r.h2d_gbps.min(r.d2h_gbps) < LINK_FLOOR * cap {
            reasons.push(format!(
                "under half of what its PCIe Gen{} x{} link carries ({} GB/s)",
                link.gen,
                link.width,
                gbps(cap)
            ));
        }
    }
    let others: Vec<&CopyRates> = all
        .iter()
        .filter(|o| o.index != g.index)
        .filter_map(|o| o.rates.as_ref().ok())
        .collect();
    let h2d = median(&others.iter().map(|o| o.h2d_gbps).collect::<Vec<_>>());
    let d2h = median(&others.iter().map(|o| o.d2h_gbps).collect::<Vec<_>>());
    for (mine, mid, way) in [(r.h2d_gbps, h2d, "to the GPU"), (r.d2h_gbps, d2h, "back")] {
        if let Some(mid) = mid.filter(|m| mine < SIBLING_FLOOR * m) {
            reasons.push(format!(
                "{:.0}% of the other GPUs' {} GB/s {way}",
                100.0 * mine / mid,
                gbps(mid)
            ));
        }
    }
    reasons
}

const SLOW_PATH_HINT: &str = "look at the PCIe path of {gpus}: `nvidia-smi -q -d PCIE -i {ids}` \
     (a link trained below x16 or its generation: reseat the GPU or riser, check the slot's BIOS \
     settings); keep the job's threads and memory on the GPU's NUMA node (`numactl \
     --cpunodebind=N --membind=N`)";

fn table(gpus: &[GpuCopy]) -> DataTable {
    let rows = gpus
        .iter()
        .map(|g| {
            let link = g
                .link
                .map_or_else(|| "?".to_string(), |l| format!("Gen{} x{}", l.gen, l.width));
            let numa = g.numa_node.map_or_else(|| "?".into(), |n| n.to_string());
            let (h2d, d2h) = match &g.rates {
                Ok(r) => (gbps(r.h2d_gbps), gbps(r.d2h_gbps)),
                Err(e) => (format!("{} failed", e.call), "-".into()),
            };
            let cpus = g.bound_cpus.clone().unwrap_or_else(|| "not bound".into());
            vec![g.index.to_string(), link, numa, h2d, d2h, cpus]
        })
        .collect();
    DataTable {
        title: "Pinned host-device copies".into(),
        header: [
            "GPU",
            "link",
            "NUMA",
            "H2D GB/s",
            "D2H GB/s",
            "measured from CPUs",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        legend: Some(format!(
            "best of {} event-timed copies per direction, from a thread bound to the GPU's NUMA \
             node's CPUs (sysfs local_cpulist) with its pinned buffer allocated there; a GPU \
             under its threshold is measured {} times and the median shown; link: PCIe \
             generation x current width from NVML",
            copy_probe::REPEATS,
            REPEAT_RUNS
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, h2d: f64, d2h: f64, link: Option<(u32, u32)>) -> GpuCopy {
        GpuCopy {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            link: link.map(|(gen, width)| PcieLink { gen, width }),
            numa_node: Some(index / 4),
            ordinal: index,
            bound_cpus: None,
            runs: vec![rates(h2d, d2h)],
            rates: Ok(rates(h2d, d2h)),
        }
    }

    fn rates(h2d: f64, d2h: f64) -> CopyRates {
        CopyRates {
            bytes: copy_probe::COPY_BYTES,
            h2d_gbps: h2d,
            d2h_gbps: d2h,
        }
    }

    fn judge(gpus: Vec<GpuCopy>) -> Outcome {
        evaluate(&CopyBandwidthFacts { gpus: Ok(gpus) })
    }

    #[test]
    fn a_slow_first_run_is_measured_again_and_the_median_decides() {
        let gen4 = Some((4, 16));
        let mut gpus = vec![gpu(0, 24.0, 25.0, gen4), gpu(1, 6.0, 25.0, gen4)];
        assert_eq!(slow_gpus(&gpus), vec![1]);
        // One noisy run of three: the median is healthy, and it says so.
        gpus[1].runs = vec![rates(6.0, 25.0), rates(24.5, 25.0), rates(23.5, 24.0)];
        gpus[1].rates = Ok(median_rates(&gpus[1].runs).unwrap());
        assert!(slow_gpus(&gpus).is_empty());
        let o = judge(gpus.clone());
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.devices[1].summary,
            "23.5 GB/s to the GPU, 25.0 GB/s back (low in 1 of 3 runs; the median counts)"
        );
        // Slow twice: the median is slow, and the warning counts the runs.
        gpus[1].runs = vec![rates(6.0, 25.0), rates(5.5, 25.0), rates(23.5, 24.0)];
        gpus[1].rates = Ok(median_rates(&gpus[1].runs).unwrap());
        let o = judge(gpus);
        assert_eq!(o.status, Status::Warn, "{}", o.summary);
        assert!(
            o.summary
                .ends_with("(low in 2 of 3 runs; the median counts)"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn the_numa_node_each_gpu_was_measured_from_is_reported() {
        let gen4 = Some((4, 16));
        let mut gpus = vec![gpu(0, 24.0, 25.0, gen4), gpu(4, 24.0, 25.0, gen4)];
        gpus[0].bound_cpus = Some("0-47".into());
        gpus[1].bound_cpus = Some("48-95".into());
        let o = judge(gpus.clone());
        assert!(
            o.summary
                .starts_with("pinned copies on 2 GPUs, each from the CPUs local to it: "),
            "{}",
            o.summary
        );
        assert_eq!(o.tables[0].rows[1][2], "1");
        assert_eq!(o.tables[0].rows[1][5], "48-95");
        gpus[1].bound_cpus = None;
        let o = judge(gpus);
        assert!(
            o.summary.starts_with("pinned copies on 2 GPUs: "),
            "{}",
            o.summary
        );
    }

    #[test]
    fn link_rates_follow_the_pcie_generations() {
        let x16 = |gen| PcieLink { gen, width: 16 }.gbps().unwrap_or(0.0);
        assert!((x16(4) - 31.5).abs() < 0.1);
        assert!((x16(5) - 63.0).abs() < 0.1);
        assert!((x16(3) - 15.76).abs() < 0.01);
        assert_eq!(PcieLink { gen: 9, width: 16 }.gbps(), None);
    }

    #[test]
    fn healthy_gen5_gpus_pass_with_the_table() {
        let o = judge((0..8).map(|i| gpu(i, 53.0, 52.0, Some((5, 16)))).collect());
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "pinned copies on 8 GPUs: at least 53.0 GB/s host-to-device, 52.0 GB/s device-to-host"
        );
        assert_eq!(
            o.tables[0].rows[0],
            ["0", "Gen5 x16", "0", "53.0", "52.0", "not bound"]
        );
        assert_eq!(o.metric("min_h2d_gbps"), Some(53.0));
    }

    #[test]
    fn a_gpu_far_below_its_siblings_warns_naming_it_and_its_numa_node() {
        let mut gpus: Vec<GpuCopy> = (0..8).map(|i| gpu(i, 25.0, 26.0, None)).collect();
        gpus[5] = gpu(5, 13.0, 26.0, None);
        let o = judge(gpus);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 5: copies 13.0 GB/s to the GPU and 26.0 GB/s back (NUMA node 1): 52% of the \
             other GPUs' 25.0 GB/s to the GPU"
        );
        assert!(o
            .hint
            .unwrap_or_default()
            .contains("nvidia-smi -q -d PCIE -i 5"));
        assert_eq!(o.devices[5].status, Status::Warn);
        assert_eq!(o.devices[0].status, Status::Pass);
    }

    #[test]
    fn a_gpu_under_half_its_link_warns_even_alone() {
        let o = judge(vec![gpu(0, 12.0, 24.0, Some((4, 16)))]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 0: copies 12.0 GB/s to the GPU and 24.0 GB/s back (NUMA node 0): under half of \
             what its PCIe Gen4 x16 link carries (31.5 GB/s)"
        );
        // 24 of 31.5 GB/s (76 %) is what a healthy Gen4 x16 GPU does.
        assert_eq!(
            judge(vec![gpu(0, 24.0, 24.0, Some((4, 16)))]).status,
            Status::Pass
        );
    }

    #[test]
    fn a_failed_copy_fails_and_no_driver_skips() {
        let mut g = gpu(1, 0.0, 0.0, None);
        g.rates = Err(CopyError {
            call: "cuMemHostAlloc".into(),
            error: "CUDA_ERROR_OUT_OF_MEMORY".into(),
        });
        let o = judge(vec![gpu(0, 25.0, 25.0, None), g]);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "GPU 1: cuMemHostAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"
        );
        assert_eq!(o.tables[0].rows[1][3], "cuMemHostAlloc failed");
        let o = evaluate(&CopyBandwidthFacts {
            gpus: Err(CopyProbeError::NoLibcuda),
        });
        assert_eq!(o.status, Status::Skip);
    }
}

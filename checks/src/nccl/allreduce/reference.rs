//! The bus bandwidth a topology should reach: measured systems, else the
//! NVLink or PCIe links NVML reports.

use crate::probe::nvml as nv;

/// NVLink facts for the GPUs in the communicator (the weakest GPU's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NvLinkFacts {
    /// NVLink generation (nvmlDeviceGetNvLinkVersion): 2 = V100, 3 = A100, 4 = H100, 5 = B200.
    pub version: u32,
    /// Active links on the GPU with the fewest.
    pub active_links: u32,
    /// Every pair of GPUs reaches each other over NVLink (directly or through
    /// NVSwitch). When false a ring must cross PCIe somewhere.
    pub all_pairs: bool,
}

/// PCIe link of the weakest GPU: its maximum generation and width (the
/// current ones drop at idle).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PcieFacts {
    pub generation: u32,
    pub width: u32,
}

/// What is known about the GPUs and their links.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopologyFacts {
    pub gpu_names: Vec<String>,
    pub nvlink: Option<NvLinkFacts>,
    pub pcie: Option<PcieFacts>,
}

/// The bus bandwidth a topology should reach, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    pub busbw_gbps: f64,
    pub basis: String,
}

/// A measured system (facts.md "NCCL all-reduce": observed single-node busbw
/// and Azure's health-check pass marks).
struct KnownSystem {
    /// Every GPU's name contains all of these...
    has: &'static [&'static str],
    /// ...and none of these.
    lacks: &'static [&'static str],
    gpus: usize,
    /// What NCCL's Ring algorithm reaches at large messages: the reference
    /// whenever NVLink SHARP (NVLS) is not known to carry the run.
    ring_gbps: f64,
    /// What NVLS reaches at [`NVLS_PEAK_BYTES`] and above, on systems with
    /// NVSwitches that do NVLink SHARP.
    nvls_gbps: Option<f64>,
    label: &'static str,
}

/// NVLS reaches its peak only with large messages: nccl-tests on 8x H100
/// reach ~480 GB/s from 1-2 GiB, and NCCL's maintainers answer reports of
/// lower figures at 256 MiB with "256M is too small to reach peak" (NVIDIA/
/// nccl issues). Below this size a run is judged against Ring's figure,
/// which NVLS at least matches there.
pub const NVLS_PEAK_BYTES: u64 = 1 << 30;

/// 8x H100/H200 SXM: Ring about 370 GB/s (facts.md: H100 ~370 ring, ~365-370
/// in nccl-tests runs), NVLS 450 from 1 GiB (facts.md: H100 ~480 with NVLS,
/// H200 ~475; Azure's pass marks 460/431: 450 sits between them); 8x A100
/// SXM about 230 (Azure 228; NVSwitch gen 2 has no SHARP); 2x H100 NVL over
/// the NVLink bridge about 208.
const KNOWN_SYSTEMS: &[KnownSystem] = &[
    KnownSystem {
        has: &["H100"],
        lacks: &["PCIe", "NVL"],
        gpus: 8,
        ring_gbps: 370.0,
        nvls_gbps: Some(450.0),
        label: "8x H100 SXM",
    },
    KnownSystem {
        has: &["H200"],
        lacks: &["NVL", "GH200"],
        gpus: 8,
        ring_gbps: 370.0,
        nvls_gbps: Some(450.0),
        label: "8x H200 SXM",
    },
    KnownSystem {
        has: &["A100", "SXM"],
        lacks: &[],
        gpus: 8,
        ring_gbps: 230.0,
        nvls_gbps: None,
        label: "8x A100 SXM",
    },
    KnownSystem {
        has: &["H100", "NVL"],
        lacks: &[],
        gpus: 2,
        ring_gbps: 208.0,
        nvls_gbps: None,
        label: "2x H100 NVL (NVLink bridge)",
    },
];

/// NCCL's NVLink SHARP algorithms: NVLS and NVLSTree (spelled NVLS_TREE by
/// NCCL >= 2.24's tuning log).
pub fn is_nvls(algorithm: &str) -> bool {
    algorithm.to_ascii_uppercase().starts_with("NVLS")
}

/// Unidirectional GB/s of one NVLink by generation (NVIDIA NVLink page:
/// per-GPU bidirectional P100 160 GB/s over 4 links, V100 300/6, A100 600/12,
/// H100 900/18, B200 1800/18).
fn nvlink_gbps_per_link(version: u32) -> Option<f64> {
    match version {
        1 => Some(20.0),
        2..=4 => Some(25.0),
        5 => Some(50.0),
        _ => None,
    }
}

/// Share of the raw NVLink rate a ring all-reduce reaches: 8x A100 ~230 of
/// 300, 8x H100 ~370 (ring) of 450, 2x H100 NVL ~208 of 300 (facts.md).
const NVLINK_EFFICIENCY: f64 = 0.7;

/// Share of the raw PCIe rate a ring all-reduce reaches on PCIe-only boxes:
/// facts.md's low ends (4x RTX 4090 18-22 GB/s on Gen4 x16 = 31.5 raw; RTX
/// 5090 28-35 on Gen5 x16 = 63 raw) are about 0.55 of the link.
const PCIE_EFFICIENCY: f64 = 0.55;

/// The bus bandwidth a run of `bytes` per rank should reach with the
/// algorithm NCCL chose (its tuning log; None when NCCL did not say: NCCL
/// 2.18 and 2.19 log no choice, and a user's NCCL_DEBUG settings replace the
/// log gpucheck asks for). On a known system: NVLS's figure only for an
/// NVLS run at [`NVLS_PEAK_BYTES`] or more; every other run (Ring, Tree,
/// CollNet, PAT, an NVLS run below its peak size, or an algorithm unknown)
/// against Ring's. Elsewhere the link-derived bound of [`expected_busbw`].
pub fn expected_busbw_for(
    t: &TopologyFacts,
    algorithm: Option<&str>,
    bytes: u64,
) -> Option<Expectation> {
    let Some(known) = KNOWN_SYSTEMS.iter().find(|k| known_system_matches(k, t)) else {
        return expected_busbw(t);
    };
    let measured = format!("measured on {} systems", known.label);
    let Some(nvls) = known.nvls_gbps else {
        return Some(Expectation {
            busbw_gbps: known.ring_gbps,
            basis: measured,
        });
    };
    let peak = crate::probe::nccl::format_bytes(NVLS_PEAK_BYTES);
    let (busbw_gbps, basis) = match algorithm {
        Some(a) if is_nvls(a) && bytes >= NVLS_PEAK_BYTES => (
            nvls,
            format!("{measured} with NVLink SHARP ({a}) at {peak} or more"),
        ),
        Some(a) if is_nvls(a) => (
            known.ring_gbps,
            format!(
                "{measured} with Ring; NCCL chose {a}, whose {nvls:.0} GB/s needs messages of \
                 {peak} or more"
            ),
        ),
        Some(a) => (
            known.ring_gbps,
            format!("{measured} with NCCL's {a} algorithm, which NCCL chose here"),
        ),
        None => (
            known.ring_gbps,
            format!(
                "{measured} with Ring: NCCL did not log its algorithm ({nvls:.0} GB/s needs \
                 NVLink SHARP at {peak} or more)"
            ),
        ),
    };
    Some(Expectation { busbw_gbps, basis })
}

fn known_system_matches(k: &KnownSystem, t: &TopologyFacts) -> bool {
    !t.gpu_names.is_empty()
        && t.gpu_names.len() == k.gpus
        && t.gpu_names.iter().all(|name| {
            k.has.iter().all(|h| name.contains(h)) && !k.lacks.iter().any(|l| name.contains(l))
        })
}

/// The bus bandwidth this topology should reach: a measured figure for
/// known systems, else a bound from NVLink (when every pair is linked), else
/// from PCIe. None when nothing is known (the check then reports without
/// judging).
pub fn expected_busbw(t: &TopologyFacts) -> Option<Expectation> {
    if let Some(k) = KNOWN_SYSTEMS.iter().find(|k| known_system_matches(k, t)) {
        return Some(Expectation {
            busbw_gbps: k.nvls_gbps.unwrap_or(k.ring_gbps),
            basis: format!("measured on {} systems", k.label),
        });
    }
    if let Some(nv) = t.nvlink.filter(|nv| nv.all_pairs && nv.active_links > 0) {
        if let Some(per_link) = nvlink_gbps_per_link(nv.version) {
            let raw = per_link * f64::from(nv.active_links);
            return Some(Expectation {
                busbw_gbps: raw * NVLINK_EFFICIENCY,
                basis: format!(
                    "{:.0}% of {} NVLink{} links at {per_link:.0} GB/s each",
                    NVLINK_EFFICIENCY * 100.0,
                    nv.active_links,
                    nv.version
                ),
            });
        }
    }
    if let Some(p) = t.pcie.filter(|p| p.width > 0) {
        if let Some(raw) = crate::domain::pcie::link_gbps(p.generation, p.width) {
            return Some(Expectation {
                busbw_gbps: raw * PCIE_EFFICIENCY,
                basis: format!(
                    "{:.0}% of PCIe Gen{} x{} ({raw:.1} GB/s)",
                    PCIE_EFFICIENCY * 100.0,
                    p.generation,
                    p.width
                ),
            });
        }
    }
    None
}
/// NVLink generation by architecture (compute capability major): Pascal
/// NVLink1, Volta 2, Ampere 3, Hopper 4, Blackwell 5 (NVIDIA NVLink page).
fn nvlink_generation(cc_major: u32) -> Option<u32> {
    match cc_major {
        6 => Some(1),
        7 => Some(2),
        8 => Some(3),
        9 => Some(4),
        10 => Some(5),
        _ => None,
    }
}

/// The link facts of the GPUs in the communicator (their NVML indices),
/// from NVML's plain facts: the weakest GPU's maximum PCIe generation and
/// width; its active NVLink count and generation, and whether every pair
/// reaches the other over NVLink (NVML's NVLink P2P status).
pub fn link_facts(
    indices: &[u32],
    infos: &[nv::GpuInfo],
    pcie: &[nv::PerGpu<nv::PcieFacts>],
    topo: Option<&nv::TopologyFacts>,
) -> (Option<NvLinkFacts>, Option<PcieFacts>) {
    let links: Option<Vec<(u32, u32)>> = indices
        .iter()
        .map(|i| {
            let p = pcie
                .iter()
                .find(|p| p.gpu.index == *i)?
                .facts
                .as_ref()
                .ok()?;
            Some((
                *p.max_link_gen.as_ref().ok()?,
                *p.max_link_width.as_ref().ok()?,
            ))
        })
        .collect();
    let pcie_facts = links.and_then(|l| {
        Some(PcieFacts {
            generation: l.iter().map(|x| x.0).min()?,
            width: l.iter().map(|x| x.1).min()?,
        })
    });

    let nvlink = topo.and_then(|t| {
        let active: Vec<u32> = indices
            .iter()
            .map(|i| {
                t.gpus
                    .iter()
                    .position(|g| g.index == *i)
                    .and_then(|pos| t.nvlinks.get(pos))
                    .and_then(|l| l.as_ref().ok())
                    .map(|l| l.iter().filter(|x| x.active).count() as u32)
                    .unwrap_or(0)
            })
            .collect();
        let active_links = active.iter().copied().min()?;
        if active_links == 0 {
            return None;
        }
        let version = indices
            .iter()
            .map(|i| {
                let info = infos.iter().find(|g| g.index == *i)?;
                nvlink_generation(info.compute_capability?.0)
            })
            .collect::<Option<Vec<u32>>>()?
            .into_iter()
            .min()?;
        let all_pairs = indices.iter().enumerate().all(|(k, &a)| {
            indices[k + 1..].iter().all(|&b| {
                let (lo, hi) = (a.min(b), a.max(b));
                t.pairs
                    .iter()
                    .any(|p| p.a == lo && p.b == hi && p.p2p_nvlink == Ok(nv::P2pStatus::Ok))
            })
        });
        Some(NvLinkFacts {
            version,
            active_links,
            all_pairs,
        })
    });
    (nvlink, pcie_facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: &str = "NVIDIA H100 80GB HBM3";

    fn names(n: usize, name: &str) -> Vec<String> {
        vec![name.to_string(); n]
    }

    #[test]
    fn expected_busbw_for_known_systems() {
        let t = |n, name: &str| TopologyFacts {
            gpu_names: names(n, name),
            ..Default::default()
        };
        let e = expected_busbw(&t(8, "NVIDIA H100 80GB HBM3")).unwrap();
        assert_eq!(e.busbw_gbps, 450.0);
        assert_eq!(e.basis, "measured on 8x H100 SXM systems");
        assert_eq!(
            expected_busbw(&t(8, "NVIDIA H200")).unwrap().busbw_gbps,
            450.0
        );
        assert_eq!(
            expected_busbw(&t(8, "NVIDIA A100-SXM4-80GB"))
                .unwrap()
                .busbw_gbps,
            230.0
        );
        assert_eq!(
            expected_busbw(&t(2, "NVIDIA H100 NVL")).unwrap().busbw_gbps,
            208.0
        );
        // Not the SXM systems: PCIe cards, Grace Hopper, other counts, mixes.
        assert_eq!(expected_busbw(&t(8, "NVIDIA H100 PCIe")), None);
        assert_eq!(expected_busbw(&t(8, "NVIDIA GH200 480GB")), None);
        assert_eq!(expected_busbw(&t(4, "NVIDIA H100 80GB HBM3")), None);
        let mut mixed = t(8, "NVIDIA H100 80GB HBM3");
        mixed.gpu_names[3] = "NVIDIA H100 PCIe".into();
        assert_eq!(expected_busbw(&mixed), None);
    }

    #[test]
    fn the_nvls_figure_holds_only_for_nvls_at_large_messages() {
        let h100 = TopologyFacts {
            gpu_names: names(8, H100),
            ..Default::default()
        };
        let gib = 1u64 << 30;
        let at = |a: Option<&str>, bytes| expected_busbw_for(&h100, a, bytes).unwrap();
        // NVLS (either spelling of NVLSTree too) from 1 GiB: 450.
        for a in ["NVLS", "NVLSTree", "NVLS_TREE"] {
            let e = at(Some(a), gib);
            assert_eq!(e.busbw_gbps, 450.0, "{a}");
            assert_eq!(
                e.basis,
                format!("measured on 8x H100 SXM systems with NVLink SHARP ({a}) at 1 GiB or more")
            );
        }
        // NVLS at 256 MiB has not reached its peak: Ring's figure.
        let e = at(Some("NVLS"), 256 << 20);
        assert_eq!(e.busbw_gbps, 370.0);
        assert_eq!(
            e.basis,
            "measured on 8x H100 SXM systems with Ring; NCCL chose NVLS, whose 450 GB/s needs \
             messages of 1 GiB or more"
        );
        // Ring, and NCCL >= 2.24's other names, at any size: Ring's.
        for a in ["Ring", "COLLNET_DIRECT", "COLLNET_CHAIN", "PAT", "Tree"] {
            assert_eq!(at(Some(a), 2 * gib).busbw_gbps, 370.0, "{a}");
        }
        // Not logged (NCCL 2.18/2.19, or the user's NCCL_DEBUG): Ring's.
        let e = at(None, 2 * gib);
        assert_eq!(e.busbw_gbps, 370.0);
        assert!(
            e.basis.contains("NCCL did not log its algorithm"),
            "{}",
            e.basis
        );
        // Systems without NVLS have one figure whatever NCCL chose.
        let a100 = TopologyFacts {
            gpu_names: names(8, "NVIDIA A100-SXM4-80GB"),
            ..Default::default()
        };
        let e = expected_busbw_for(&a100, None, 256 << 20).unwrap();
        assert_eq!(
            (e.busbw_gbps, e.basis.as_str()),
            (230.0, "measured on 8x A100 SXM systems")
        );
        // Nothing known about the system: the links decide, as before.
        assert_eq!(
            expected_busbw_for(&TopologyFacts::default(), Some("NVLS"), gib),
            None
        );
    }

    #[test]
    fn expected_busbw_from_links() {
        // 4 of an 8x H100 box: 18 NVLink4 links through NVSwitch.
        let nv = TopologyFacts {
            gpu_names: names(4, "NVIDIA H100 80GB HBM3"),
            nvlink: Some(NvLinkFacts {
                version: 4,
                active_links: 18,
                all_pairs: true,
            }),
            pcie: Some(PcieFacts {
                generation: 5,
                width: 16,
            }),
        };
        let e = expected_busbw(&nv).unwrap();
        assert!((e.busbw_gbps - 315.0).abs() < 1e-9, "{}", e.busbw_gbps);
        assert_eq!(e.basis, "70% of 18 NVLink4 links at 25 GB/s each");
        // Bridged pairs only: a ring crosses PCIe, judge by PCIe.
        let mut pairs = nv.clone();
        pairs.nvlink = Some(NvLinkFacts {
            version: 4,
            active_links: 12,
            all_pairs: false,
        });
        let e = expected_busbw(&pairs).unwrap();
        assert!((e.busbw_gbps - 0.55 * 3.938 * 16.0).abs() < 1e-9);
        assert_eq!(e.basis, "55% of PCIe Gen5 x16 (63.0 GB/s)");
        // A Gen4 box of GeForce cards: about 17 GB/s, matching the 18-22 seen.
        let gen4 = TopologyFacts {
            gpu_names: names(4, "NVIDIA GeForce RTX 4090"),
            nvlink: None,
            pcie: Some(PcieFacts {
                generation: 4,
                width: 16,
            }),
        };
        let e = expected_busbw(&gen4).unwrap();
        assert!((17.0..18.0).contains(&e.busbw_gbps), "{}", e.busbw_gbps);
        // Nothing known.
        assert_eq!(expected_busbw(&TopologyFacts::default()), None);
    }

    fn nv_infos(n: u32, cc: (u32, u32)) -> Vec<nv::GpuInfo> {
        (0..n)
            .map(|i| nv::GpuInfo {
                index: i,
                name: H100.to_string(),
                uuid: format!("GPU-{i}"),
                pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
                memory_total_mib: 81559,
                compute_capability: Some(cc),
                mig_enabled: Some(false),
                mig_uuids: vec![],
            })
            .collect()
    }

    fn gpu_ref(i: u32) -> nv::GpuRef {
        nv::GpuRef {
            index: i,
            name: H100.to_string(),
            uuid: Some(format!("GPU-{i}")),
        }
    }

    fn nv_pcie(widths: &[u32], gen: u32) -> Vec<nv::PerGpu<nv::PcieFacts>> {
        widths
            .iter()
            .zip(0..)
            .map(|(&w, i)| nv::PerGpu {
                gpu: gpu_ref(i),
                facts: Ok(nv::PcieFacts {
                    link_gen: Ok(1),
                    max_link_gen: Ok(gen),
                    link_width: Ok(w),
                    max_link_width: Ok(w),
                    utilization_pct: Ok(0),
                }),
            })
            .collect()
    }

    /// `links[i]` active NVLinks per GPU; `linked(a, b)` says whether NVML
    /// reports NVLink P2P between a pair.
    fn nv_topo(links: &[u32], linked: impl Fn(u32, u32) -> bool) -> nv::TopologyFacts {
        let n = links.len() as u32;
        let mut pairs = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                let nvl = if linked(a, b) {
                    nv::P2pStatus::Ok
                } else {
                    nv::P2pStatus::NotSupported
                };
                pairs.push(nv::PairFacts {
                    a,
                    b,
                    ancestor: Ok(nv::Ancestor::System),
                    p2p_read: Ok(nv::P2pStatus::Ok),
                    p2p_write: Ok(nv::P2pStatus::Ok),
                    p2p_nvlink: Ok(nvl),
                });
            }
        }
        nv::TopologyFacts {
            gpus: (0..n).map(gpu_ref).collect(),
            nvlinks: links
                .iter()
                .map(|&k| {
                    if k == 0 {
                        Err(nv::Unavailable::NotSupported)
                    } else {
                        Ok((0..k)
                            .map(|l| nv::NvLinkState {
                                link: l,
                                active: true,
                                remote: nv::NvLinkRemote::Switch,
                                errors: Default::default(),
                            })
                            .collect())
                    }
                })
                .collect(),
            pairs,
        }
    }

    #[test]
    fn links_of_four_gpus_on_an_nvswitch_box() {
        let infos = nv_infos(8, (9, 0));
        let pcie = nv_pcie(&[16; 8], 5);
        let topo = nv_topo(&[18; 8], |_, _| true);
        let (nvlink, pcie) = link_facts(&[2, 3, 5, 7], &infos, &pcie, Some(&topo));
        assert_eq!(
            nvlink,
            Some(NvLinkFacts {
                version: 4,
                active_links: 18,
                all_pairs: true
            })
        );
        assert_eq!(
            pcie,
            Some(PcieFacts {
                generation: 5,
                width: 16
            })
        );
        let t = TopologyFacts {
            gpu_names: names(4, H100),
            nvlink,
            pcie,
        };
        assert!((expected_busbw(&t).unwrap().busbw_gbps - 315.0).abs() < 1e-9);
    }

    #[test]
    fn links_of_bridged_pairs_fall_back_to_pcie() {
        let infos = nv_infos(4, (8, 6));
        let pcie = nv_pcie(&[16, 16, 8, 16], 4);
        // 0-1 and 2-3 bridged; a ring over all four crosses PCIe.
        let topo = nv_topo(&[4; 4], |a, b| (a, b) == (0, 1) || (a, b) == (2, 3));
        let (nvlink, pcie) = link_facts(&[0, 1, 2, 3], &infos, &pcie, Some(&topo));
        assert_eq!(nvlink.map(|l| (l.version, l.all_pairs)), Some((3, false)));
        // The weakest link: GPU 2 at x8.
        assert_eq!(
            pcie,
            Some(PcieFacts {
                generation: 4,
                width: 8
            })
        );
        let t = TopologyFacts {
            gpu_names: names(4, "NVIDIA RTX A6000"),
            nvlink,
            pcie,
        };
        assert_eq!(
            expected_busbw(&t).unwrap().basis,
            "55% of PCIe Gen4 x8 (15.8 GB/s)"
        );
        // Just one bridged pair: NVLink carries the ring.
        let (nvlink, _) = link_facts(&[0, 1], &infos, &nv_pcie(&[16; 4], 4), Some(&topo));
        assert_eq!(nvlink.map(|l| l.all_pairs), Some(true));
    }

    #[test]
    fn links_without_nvlink_or_without_answers() {
        let infos = nv_infos(2, (8, 9));
        let topo = nv_topo(&[0, 0], |_, _| false);
        let (nvlink, pcie) = link_facts(&[0, 1], &infos, &nv_pcie(&[16, 16], 4), Some(&topo));
        assert_eq!(nvlink, None);
        assert_eq!(pcie.map(|p| p.generation), Some(4));
        // NVML could not read one GPU's PCIe link: no PCIe bound at all.
        let mut partial = nv_pcie(&[16, 16], 4);
        partial[1].facts = Err(nv::Unavailable::NotSupported);
        assert_eq!(link_facts(&[0, 1], &infos, &partial, None), (None, None));
    }
}

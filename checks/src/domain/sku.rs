//! What each GPU model should show on a healthy machine: the ECC mode it
//! ships with, its NVLinks, its PCIe link, its memory bandwidth, its peak
//! dense bf16 / fp16 tensor throughput and whether its NVSwitch fabric does
//! NVLS. Judges look a GPU up here by the name NVML gives (or its PCI device
//! id); a model that is not listed is judged against its siblings only, and
//! the judge says so.
//!
//! Figures are NVIDIA's (the datasheet or architecture whitepaper named
//! beside each entry); PCI device ids are those of the PCI ID Repository
//! (pci-ids.ucw.cz, `10de` NVIDIA Corporation). TFLOPS are dense (without
//! 2:4 sparsity), with FP32 accumulation, which is what PyTorch's autocast
//! matmuls use: on GeForce parts that is half the FP16-accumulate figure.

/// Which market a part is built for; it decides the ECC default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Data-centre parts (Tesla, A/H/B/L series): ECC on as shipped.
    DataCentre,
    /// Workstation parts (RTX A / Ada / PRO): ECC supported, off as shipped.
    Workstation,
    /// GeForce: ECC off as shipped (RTX 40 and 50) or not offered at all.
    GeForce,
}

/// A part's NVLinks: how many and how fast each is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NvLinkSpec {
    pub links: u32,
    /// Per link, both directions together, GB/s (NVIDIA quotes totals as
    /// links x this).
    pub gbps_per_link: f64,
    /// The links exist only with an NVLink bridge fitted (PCIe cards): a
    /// card without one shows none, which is not a fault.
    pub bridge: bool,
}

/// The PCIe link the part itself trains at best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieSpec {
    pub gen: u32,
    pub width: u32,
}

/// What one GPU model should show.
#[derive(Debug, Clone, PartialEq)]
pub struct Sku {
    /// The model as NVIDIA sells it.
    pub model: &'static str,
    /// PCI device ids (vendor 0x10de).
    pub pci_device_ids: &'static [u16],
    /// The names NVML gives it, without the "NVIDIA " that newer drivers
    /// put in front (older ones leave it out).
    pub nvml_names: &'static [&'static str],
    pub segment: Segment,
    /// ECC on as the part ships. Where this is false, ECC off is the
    /// card's default, not a fault.
    pub ecc_default_on: bool,
    /// None: the part has no NVLink.
    pub nvlink: Option<NvLinkSpec>,
    pub pcie: PcieSpec,
    /// Peak memory bandwidth, GB/s.
    pub memory_bandwidth_gbps: f64,
    /// Peak dense bf16 tensor TFLOPS; None where the part has no bf16
    /// (Volta, Turing) or NVIDIA publishes no figure.
    pub bf16_dense_tflops: Option<f64>,
    /// Peak dense fp16 tensor TFLOPS; None where NVIDIA publishes none.
    pub fp16_dense_tflops: Option<f64>,
    /// The part's NVSwitch fabric offers NVLink SHARP (NVLS): Hopper and
    /// Blackwell SXM on third-generation NVSwitch and later.
    pub nvls: bool,
}

const GEN3_X16: PcieSpec = PcieSpec { gen: 3, width: 16 };
const GEN4_X16: PcieSpec = PcieSpec { gen: 4, width: 16 };
const GEN5_X16: PcieSpec = PcieSpec { gen: 5, width: 16 };

/// NVLink 2 (V100), 3 (A100) and 4 (H100) links carry 50 GB/s each (25 GB/s
/// per direction): 6, 12 and 18 links make NVIDIA's 300, 600 and 900 GB/s.
const NVLINK_50: f64 = 50.0;
/// NVLink 5 (B200): 18 links, 1.8 TB/s, 100 GB/s each.
const NVLINK_100: f64 = 100.0;
/// GA102's four x4 bridge links: 112.5 GB/s together (A40, RTX A5000/A6000,
/// RTX 3090 datasheets).
const NVLINK_GA102: f64 = 28.125;

const fn sxm(links: u32, gbps_per_link: f64) -> Option<NvLinkSpec> {
    Some(NvLinkSpec {
        links,
        gbps_per_link,
        bridge: false,
    })
}

const fn bridged(links: u32, gbps_per_link: f64) -> Option<NvLinkSpec> {
    Some(NvLinkSpec {
        links,
        gbps_per_link,
        bridge: true,
    })
}

/// A data-centre part: ECC on as shipped. The arguments are the table's
/// columns, in [`Sku`]'s field order.
#[allow(clippy::too_many_arguments)]
const fn dc(
    model: &'static str,
    pci_device_ids: &'static [u16],
    nvml_names: &'static [&'static str],
    nvlink: Option<NvLinkSpec>,
    pcie: PcieSpec,
    memory_bandwidth_gbps: f64,
    bf16_dense_tflops: Option<f64>,
    fp16_dense_tflops: Option<f64>,
    nvls: bool,
) -> Sku {
    Sku {
        model,
        pci_device_ids,
        nvml_names,
        segment: Segment::DataCentre,
        ecc_default_on: true,
        nvlink,
        pcie,
        memory_bandwidth_gbps,
        bf16_dense_tflops,
        fp16_dense_tflops,
        nvls,
    }
}

/// A workstation or GeForce part: ECC off as shipped (or not offered); one
/// TFLOPS figure serves bf16 and fp16, which these parts run at one rate.
#[allow(clippy::too_many_arguments)]
const fn desk(
    model: &'static str,
    pci_device_ids: &'static [u16],
    nvml_names: &'static [&'static str],
    segment: Segment,
    nvlink: Option<NvLinkSpec>,
    pcie: PcieSpec,
    memory_bandwidth_gbps: f64,
    dense_tflops: f64,
) -> Sku {
    Sku {
        model,
        pci_device_ids,
        nvml_names,
        segment,
        ecc_default_on: false,
        nvlink,
        pcie,
        memory_bandwidth_gbps,
        bf16_dense_tflops: Some(dense_tflops),
        fp16_dense_tflops: Some(dense_tflops),
        nvls: false,
    }
}

/// Every model gpucheck knows.
pub static SKUS: &[Sku] = &[
    // NVIDIA H100 Tensor Core GPU datasheet: SXM 3.35 TB/s, bf16/fp16 1,979
    // TFLOPS with sparsity (989 dense), NVLink 900 GB/s, PCIe Gen5.
    dc(
        "H100 SXM5 80GB",
        &[0x2330],
        &["H100 80GB HBM3"],
        sxm(18, NVLINK_50),
        GEN5_X16,
        3350.0,
        Some(989.0),
        Some(989.0),
        true,
    ),
    // Same datasheet, H100 PCIe: 2 TB/s, 1,513 sparse (756 dense), NVLink
    // bridge 600 GB/s.
    dc(
        "H100 PCIe",
        &[0x2331],
        &["H100 PCIe"],
        bridged(12, NVLINK_50),
        GEN5_X16,
        2000.0,
        Some(756.0),
        Some(756.0),
        false,
    ),
    // Same datasheet, H100 NVL: 94 GB, 3.9 TB/s, 1,671 sparse (835 dense),
    // NVLink bridge 600 GB/s.
    dc(
        "H100 NVL",
        &[0x2321],
        &["H100 NVL"],
        bridged(12, NVLINK_50),
        GEN5_X16,
        3900.0,
        Some(835.0),
        Some(835.0),
        false,
    ),
    // NVIDIA H200 Tensor Core GPU datasheet: SXM 4.8 TB/s, 1,979 sparse
    // (989 dense), NVLink 900 GB/s.
    dc(
        "H200 SXM 141GB",
        &[0x2335],
        &["H200"],
        sxm(18, NVLINK_50),
        GEN5_X16,
        4800.0,
        Some(989.0),
        Some(989.0),
        true,
    ),
    // Same datasheet, H200 NVL: 4.8 TB/s, 1,671 sparse (835 dense), NVLink
    // bridge 900 GB/s.
    dc(
        "H200 NVL",
        &[0x233b],
        &["H200 NVL"],
        bridged(18, NVLINK_50),
        GEN5_X16,
        4800.0,
        Some(835.0),
        Some(835.0),
        false,
    ),
    // NVIDIA H800 SXM5 product brief: H100 SXM compute and memory, NVLink
    // cut to 400 GB/s (8 links).
    dc(
        "H800 SXM5",
        &[0x2324],
        &["H800"],
        sxm(8, NVLINK_50),
        GEN5_X16,
        3350.0,
        Some(989.0),
        Some(989.0),
        true,
    ),
    // NVIDIA H800 PCIe product brief: H100 PCIe figures, NVLink bridge
    // 400 GB/s.
    dc(
        "H800 PCIe",
        &[0x2322],
        &["H800 PCIe"],
        bridged(8, NVLINK_50),
        GEN5_X16,
        2000.0,
        Some(756.0),
        Some(756.0),
        false,
    ),
    // NVIDIA A100 Tensor Core GPU datasheet: bf16/fp16 312 TFLOPS dense
    // (624 sparse), NVLink 600 GB/s, PCIe Gen4; 40GB 1,555 GB/s, 80GB SXM
    // 2,039 GB/s, 80GB PCIe 1,935 GB/s.
    dc(
        "A100 SXM4 40GB",
        &[0x20b0],
        &["A100-SXM4-40GB"],
        sxm(12, NVLINK_50),
        GEN4_X16,
        1555.0,
        Some(312.0),
        Some(312.0),
        false,
    ),
    dc(
        "A100 SXM4 80GB",
        &[0x20b2],
        &["A100-SXM4-80GB"],
        sxm(12, NVLINK_50),
        GEN4_X16,
        2039.0,
        Some(312.0),
        Some(312.0),
        false,
    ),
    dc(
        "A100 PCIe 40GB",
        &[0x20b1, 0x20f1],
        &["A100-PCIE-40GB"],
        bridged(12, NVLINK_50),
        GEN4_X16,
        1555.0,
        Some(312.0),
        Some(312.0),
        false,
    ),
    dc(
        "A100 PCIe 80GB",
        &[0x20b5],
        &["A100 80GB PCIe"],
        bridged(12, NVLINK_50),
        GEN4_X16,
        1935.0,
        Some(312.0),
        Some(312.0),
        false,
    ),
    // NVIDIA A800 product briefs: A100 compute and memory, NVLink cut to
    // 400 GB/s (8 links).
    dc(
        "A800 SXM4 80GB",
        &[0x20f3],
        &["A800-SXM4-80GB"],
        sxm(8, NVLINK_50),
        GEN4_X16,
        2039.0,
        Some(312.0),
        Some(312.0),
        false,
    ),
    dc(
        "A800 SXM4 40GB",
        &[0x20bd],
        &["A800-SXM4-40GB"],
        sxm(8, NVLINK_50),
        GEN4_X16,
        1555.0,
        Some(312.0),
        Some(312.0),
        false,
    ),
    dc(
        "A800 PCIe 80GB",
        &[0x20f5],
        &["A800 80GB PCIe"],
        bridged(8, NVLINK_50),
        GEN4_X16,
        1935.0,
        Some(312.0),
        Some(312.0),
        false,
    ),
    dc(
        "A800 PCIe 40GB",
        &[0x20f6],
        &["A800 40GB PCIe"],
        bridged(8, NVLINK_50),
        GEN4_X16,
        1555.0,
        Some(312.0),
        Some(312.0),
        false,
    ),
    // NVIDIA A10 datasheet: 600 GB/s GDDR6, bf16/fp16 125 TFLOPS dense
    // (250 sparse), PCIe Gen4 x16, no NVLink.
    dc(
        "A10",
        &[0x2236],
        &["A10"],
        None,
        GEN4_X16,
        600.0,
        Some(125.0),
        Some(125.0),
        false,
    ),
    // A10G (AWS G5): the A10's GA102 and memory; NVIDIA publishes no
    // datasheet or tensor figure for it (AWS G5 instance page: 24 GB,
    // 600 GB/s).
    dc(
        "A10G",
        &[0x2237],
        &["A10G"],
        None,
        GEN4_X16,
        600.0,
        None,
        None,
        false,
    ),
    // NVIDIA A30 datasheet: 933 GB/s HBM2, bf16/fp16 165 dense (330
    // sparse), NVLink bridge 200 GB/s, PCIe Gen4.
    dc(
        "A30",
        &[0x20b7],
        &["A30"],
        bridged(4, NVLINK_50),
        GEN4_X16,
        933.0,
        Some(165.0),
        Some(165.0),
        false,
    ),
    // NVIDIA A40 datasheet: 696 GB/s GDDR6 with ECC, bf16/fp16 149.7 dense
    // (299.4 sparse), NVLink bridge 112.5 GB/s, PCIe Gen4.
    dc(
        "A40",
        &[0x2235],
        &["A40"],
        bridged(4, NVLINK_GA102),
        GEN4_X16,
        696.0,
        Some(149.7),
        Some(149.7),
        false,
    ),
    // NVIDIA L4 datasheet: 300 GB/s GDDR6, bf16/fp16 242 sparse (121
    // dense), PCIe Gen4 x16, no NVLink.
    dc(
        "L4",
        &[0x27b8],
        &["L4"],
        None,
        GEN4_X16,
        300.0,
        Some(121.0),
        Some(121.0),
        false,
    ),
    // NVIDIA L40 datasheet: 864 GB/s GDDR6 with ECC, bf16/fp16 362 sparse
    // (181 dense), PCIe Gen4 x16, no NVLink.
    dc(
        "L40",
        &[0x26b5],
        &["L40"],
        None,
        GEN4_X16,
        864.0,
        Some(181.0),
        Some(181.0),
        false,
    ),
    // NVIDIA L40S datasheet: 864 GB/s, bf16/fp16 733 sparse (362 dense),
    // PCIe Gen4 x16, no NVLink.
    dc(
        "L40S",
        &[0x26b9],
        &["L40S"],
        None,
        GEN4_X16,
        864.0,
        Some(362.0),
        Some(362.0),
        false,
    ),
    // NVIDIA T4 datasheet: 320 GB/s GDDR6, mixed-precision fp16 65 TFLOPS,
    // no bf16 (Turing), PCIe Gen3 x16.
    dc(
        "T4",
        &[0x1eb8],
        &["Tesla T4"],
        None,
        GEN3_X16,
        320.0,
        None,
        Some(65.0),
        false,
    ),
    // NVIDIA V100 datasheet: 900 GB/s HBM2, no bf16 (Volta); SXM2 125 fp16
    // tensor TFLOPS with NVLink 300 GB/s (6 links), PCIe 112; V100S PCIe
    // 130 TFLOPS and 1,134 GB/s.
    dc(
        "V100 SXM2",
        &[0x1db1, 0x1db5, 0x1df5],
        &["Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"],
        sxm(6, NVLINK_50),
        GEN3_X16,
        900.0,
        None,
        Some(125.0),
        false,
    ),
    dc(
        "V100 PCIe",
        &[0x1db4, 0x1db6],
        &["Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"],
        None,
        GEN3_X16,
        900.0,
        None,
        Some(112.0),
        false,
    ),
    dc(
        "V100S PCIe",
        &[0x1df6],
        &["Tesla V100S-PCIE-32GB"],
        None,
        GEN3_X16,
        1134.0,
        None,
        Some(130.0),
        false,
    ),
    // NVIDIA HGX B200 datasheet (per GPU, 1,000 W): 8 TB/s HBM3e, bf16/fp16
    // 4.5 PFLOPS sparse (2,250 dense), NVLink 5 1.8 TB/s (18 links).
    dc(
        "B200",
        &[0x2901, 0x2909],
        &["B200"],
        sxm(18, NVLINK_100),
        GEN5_X16,
        8000.0,
        Some(2250.0),
        Some(2250.0),
        true,
    ),
    // NVIDIA Ampere GA102 whitepaper, RTX 3090: 936 GB/s GDDR6X, bf16/fp16
    // with FP32 accumulate 71 dense (142 with FP16 accumulate), NVLink
    // bridge 112.5 GB/s; no ECC.
    desk(
        "GeForce RTX 3090",
        &[0x2204],
        &["GeForce RTX 3090"],
        Segment::GeForce,
        bridged(4, NVLINK_GA102),
        GEN4_X16,
        936.0,
        71.0,
    ),
    // NVIDIA Ada Lovelace whitepaper, RTX 4090: 1,008 GB/s GDDR6X, fp16/bf16
    // with FP32 accumulate 165.2 dense; no NVLink; ECC offered, off as
    // shipped.
    desk(
        "GeForce RTX 4090",
        &[0x2684],
        &["GeForce RTX 4090"],
        Segment::GeForce,
        None,
        GEN4_X16,
        1008.0,
        165.2,
    ),
    // NVIDIA RTX Blackwell whitepaper, RTX 5090: 1,792 GB/s GDDR7, fp16/bf16
    // with FP32 accumulate 209.5 dense, PCIe Gen5 x16, no NVLink.
    desk(
        "GeForce RTX 5090",
        &[0x2b85],
        &["GeForce RTX 5090"],
        Segment::GeForce,
        None,
        GEN5_X16,
        1792.0,
        209.5,
    ),
    // NVIDIA RTX 6000 Ada Generation datasheet: 960 GB/s GDDR6 with ECC,
    // 1,457 FP8 sparse TFLOPS (364.2 fp16/bf16 dense), no NVLink.
    desk(
        "RTX 6000 Ada Generation",
        &[0x26b1],
        &["RTX 6000 Ada Generation"],
        Segment::Workstation,
        None,
        GEN4_X16,
        960.0,
        364.2,
    ),
    // NVIDIA RTX A5000 datasheet: 768 GB/s GDDR6 with ECC, 222.2 sparse
    // tensor TFLOPS (111.1 dense), NVLink bridge 112.5 GB/s.
    desk(
        "RTX A5000",
        &[0x2231],
        &["RTX A5000"],
        Segment::Workstation,
        bridged(4, NVLINK_GA102),
        GEN4_X16,
        768.0,
        111.1,
    ),
    // NVIDIA RTX A6000 datasheet: 768 GB/s GDDR6 with ECC, 309.7 sparse
    // tensor TFLOPS (154.8 dense), NVLink bridge 112.5 GB/s.
    desk(
        "RTX A6000",
        &[0x2230],
        &["RTX A6000"],
        Segment::Workstation,
        bridged(4, NVLINK_GA102),
        GEN4_X16,
        768.0,
        154.8,
    ),
    // NVIDIA RTX PRO 6000 Blackwell datasheet and RTX Blackwell whitepaper:
    // 96 GB GDDR7 with ECC, 1,792 GB/s, fp16/bf16 with FP32 accumulate 503.8
    // dense, PCIe Gen5 x16, no NVLink (Workstation, Max-Q and Server
    // Editions share the GB202 figures; the Max-Q runs lower clocks).
    desk(
        "RTX PRO 6000 Blackwell",
        &[0x2bb1, 0x2bb4, 0x2bb5],
        &[
            "RTX PRO 6000 Blackwell Workstation Edition",
            "RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            "RTX PRO 6000 Blackwell Server Edition",
        ],
        Segment::Workstation,
        None,
        GEN5_X16,
        1792.0,
        503.8,
    ),
];

/// The model NVML names `name` ("NVIDIA H100 80GB HBM3", or "Tesla T4",
/// or an older driver's "A100-SXM4-40GB"), if gpucheck knows it.
pub fn by_nvml_name(name: &str) -> Option<&'static Sku> {
    let name = name.trim();
    let bare = name
        .strip_prefix("NVIDIA ")
        .or_else(|| name.strip_prefix("nvidia "))
        .unwrap_or(name)
        .trim();
    SKUS.iter().find(|s| {
        s.nvml_names
            .iter()
            .any(|n| n.eq_ignore_ascii_case(bare) || n.eq_ignore_ascii_case(name))
    })
}

/// The model with PCI device id `device_id` (the upper 16 bits of NVML's
/// `pciDeviceId`, whose lower 16 are the vendor 0x10de).
pub fn by_pci_device_id(device_id: u16) -> Option<&'static Sku> {
    SKUS.iter().find(|s| s.pci_device_ids.contains(&device_id))
}

/// NVML's combined `pciDeviceId` (device << 16 | vendor) to a model.
pub fn by_nvml_pci_id(pci_device_id: u32) -> Option<&'static Sku> {
    const NVIDIA_VENDOR: u32 = 0x10de;
    if pci_device_id & 0xffff != NVIDIA_VENDOR {
        return None;
    }
    by_pci_device_id((pci_device_id >> 16) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_nvml_gives_find_their_model() {
        for (name, model) in [
            ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
            ("NVIDIA H100 PCIe", "H100 PCIe"),
            ("NVIDIA H100 NVL", "H100 NVL"),
            ("NVIDIA H200", "H200 SXM 141GB"),
            ("NVIDIA H800", "H800 SXM5"),
            ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
            ("A100-SXM4-40GB", "A100 SXM4 40GB"),
            ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
            ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
            ("NVIDIA A800-SXM4-80GB", "A800 SXM4 80GB"),
            ("NVIDIA A10G", "A10G"),
            ("NVIDIA A10", "A10"),
            ("NVIDIA L40S", "L40S"),
            ("NVIDIA L4", "L4"),
            ("Tesla T4", "T4"),
            ("Tesla V100-SXM2-32GB", "V100 SXM2"),
            ("NVIDIA B200", "B200"),
            ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
            ("GeForce RTX 3090", "GeForce RTX 3090"),
            ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada Generation"),
            (
                "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "RTX PRO 6000 Blackwell",
            ),
        ] {
            assert_eq!(by_nvml_name(name).map(|s| s.model), Some(model), "{name}");
        }
        assert_eq!(by_nvml_name("NVIDIA GeForce GTX 1080"), None);
        // A prefix of a longer name is not that model.
        assert_eq!(by_nvml_name("NVIDIA H100"), None);
    }

    #[test]
    fn pci_device_ids_find_their_model() {
        assert_eq!(
            by_nvml_pci_id(0x2330_10de).map(|s| s.model),
            Some("H100 SXM5 80GB")
        );
        assert_eq!(by_nvml_pci_id(0x27b8_10de).map(|s| s.model), Some("L4"));
        assert_eq!(by_pci_device_id(0x1eb8).map(|s| s.model), Some("T4"));
        // Another vendor's id is not looked up.
        assert_eq!(by_nvml_pci_id(0x2330_1002), None);
        assert_eq!(by_pci_device_id(0xffff), None);
    }

    #[test]
    fn ecc_ships_on_exactly_on_data_centre_parts() {
        for s in SKUS {
            assert_eq!(
                s.ecc_default_on,
                s.segment == Segment::DataCentre,
                "{}",
                s.model
            );
        }
        assert!(
            !by_nvml_name("NVIDIA RTX A5000")
                .expect("known")
                .ecc_default_on
        );
        assert!(by_nvml_name("NVIDIA A10G").expect("known").ecc_default_on);
    }

    #[test]
    fn every_entry_is_consistent() {
        let mut ids = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for s in SKUS {
            assert!(!s.pci_device_ids.is_empty(), "{}", s.model);
            for id in s.pci_device_ids {
                assert!(ids.insert(*id), "device id {id:#x} listed twice");
            }
            for n in s.nvml_names {
                assert!(names.insert(n.to_ascii_lowercase()), "{n} listed twice");
                assert!(!n.starts_with("NVIDIA "), "{n}: leave the prefix out");
            }
            assert!(s.memory_bandwidth_gbps > 0.0, "{}", s.model);
            assert!(
                s.pcie.width == 16 && (3..=5).contains(&s.pcie.gen),
                "{}",
                s.model
            );
            // NVLS needs NVSwitch-attached (SXM) NVLinks.
            if s.nvls {
                assert!(s.nvlink.is_some_and(|l| !l.bridge), "{}", s.model);
            }
        }
    }

    #[test]
    fn nvlink_totals_match_nvidias_figures() {
        let total = |name: &str| {
            let l = by_nvml_name(name).and_then(|s| s.nvlink).expect("NVLink");
            f64::from(l.links) * l.gbps_per_link
        };
        assert_eq!(total("NVIDIA H100 80GB HBM3"), 900.0);
        assert_eq!(total("NVIDIA H800"), 400.0);
        assert_eq!(total("NVIDIA A100-SXM4-80GB"), 600.0);
        assert_eq!(total("NVIDIA A800-SXM4-80GB"), 400.0);
        assert_eq!(total("Tesla V100-SXM2-16GB"), 300.0);
        assert_eq!(total("NVIDIA B200"), 1800.0);
        assert_eq!(total("NVIDIA A40"), 112.5);
        assert_eq!(by_nvml_name("NVIDIA L40S").and_then(|s| s.nvlink), None);
    }
}

//! What each GPU model should show on a healthy machine: the ECC mode it
//! ships with, its NVLinks, its PCIe link, its memory bandwidth, its peak
//! dense bf16 / fp16 / TF32 tensor throughput and whether its NVSwitch
//! fabric does NVLS. Judges look a GPU up here by the name NVML gives (or
//! its PCI device id); a model that is not listed is judged against its
//! siblings only, and the judge says so.
//!
//! Every figure names where it was read, beside its entry: NVIDIA's
//! datasheet, product brief or architecture whitepaper where its text could
//! be read (directly or as reproduced by a page that quotes it), else the
//! public page that gave it, named as such. A figure no source confirmed is
//! `None` (unknown): judges then fall back to sibling comparison, as for a
//! model not listed. A PCIe link is also confirmed by a real healthy
//! machine's `nvidia-smi -a` dump (tests/fixtures/nvml/REAL-DUMPS.md): NVML's
//! maximum link is the lower of the card's and the slot's, so a dump that
//! shows Gen N x16 proves the card does Gen N x16.
//!
//! TFLOPS are dense (without 2:4 structured sparsity). NVIDIA's datasheets
//! print the sparse figure with an asterisk ("* with sparsity"); the dense
//! figure is half of it. TF32 likewise: Ampere and later parts print it
//! "with sparsity"; Volta and Turing have no TF32. Where a datasheet gives
//! FP16 with FP16 and with FP32 accumulation, the FP32-accumulate figure is
//! kept: it is what PyTorch's autocast matmuls use.
//!
//! PCI device ids are those of the PCI ID Repository's `pci.ids` (vendor
//! `10de` NVIDIA Corporation), read at github.com/pciutils/pciids commit
//! c1c12547 (2026-08-22); every id below is listed there under the model's
//! name.

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
    /// None: the part has no NVLink, or no source confirmed its links.
    pub nvlink: Option<NvLinkSpec>,
    /// None: no source confirmed the part's link.
    pub pcie: Option<PcieSpec>,
    /// Peak memory bandwidth, GB/s; None where no source confirmed it.
    pub memory_bandwidth_gbps: Option<f64>,
    /// Peak dense bf16 tensor TFLOPS; None where the part has no bf16
    /// (Volta, Turing) or no source confirmed a figure.
    pub bf16_dense_tflops: Option<f64>,
    /// Peak dense fp16 tensor TFLOPS; None where no source confirmed one.
    pub fp16_dense_tflops: Option<f64>,
    /// Peak dense TF32 tensor TFLOPS (what an fp32 matmul with TF32
    /// allowed runs on); None where the part has no TF32 (Volta, Turing) or
    /// no source confirmed a figure.
    pub tf32_dense_tflops: Option<f64>,
    /// The part's NVSwitch fabric offers NVLink SHARP (NVLS): Hopper and
    /// Blackwell SXM on third-generation NVSwitch and later. False also
    /// where no source confirmed it.
    pub nvls: bool,
}

const GEN3_X16: Option<PcieSpec> = Some(PcieSpec { gen: 3, width: 16 });
const GEN4_X16: Option<PcieSpec> = Some(PcieSpec { gen: 4, width: 16 });
const GEN5_X16: Option<PcieSpec> = Some(PcieSpec { gen: 5, width: 16 });

/// NVLink 2 (V100), 3 (A100) and 4 (H100) links carry 50 GB/s each, both
/// directions together: a V100-SXM2 has "6 NVLinks", each "25GB/s in
/// uni-direction" (Dell EMC Ready Solutions for AI, Deep Learning with
/// NVIDIA, v1.0, 3.1.3); A100 has "a total of 12 links, ... 600GB/s"
/// (Fudzilla on NVIDIA's A100 launch); HGX H100 gives "18x NVIDIA NVLink
/// connections per GPU, 900GB/s" (NVIDIA's HGX H100 text as quoted on
/// themop.ru).
const NVLINK_50: f64 = 50.0;
/// NVLink 5 (B200): 18 links, 1.8 TB/s, 100 GB/s each (NVIDIA HGX B200
/// datasheet).
const NVLINK_100: f64 = 100.0;
/// GA102's bridge links: NVIDIA A40 datasheet "NVIDIA NVLink 112.5 GB/s
/// (bidirectional)". The total is the datasheet's; its split into four
/// links no source read here confirmed (judges read only SXM links).
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
    pcie: Option<PcieSpec>,
    memory_bandwidth_gbps: Option<f64>,
    bf16_dense_tflops: Option<f64>,
    fp16_dense_tflops: Option<f64>,
    tf32_dense_tflops: Option<f64>,
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
        tf32_dense_tflops,
        nvls,
    }
}

/// A workstation or GeForce part: ECC off as shipped (or not offered); one
/// TFLOPS figure serves bf16 and fp16, which these parts run at one rate;
/// TF32 has its own.
#[allow(clippy::too_many_arguments)]
const fn desk(
    model: &'static str,
    pci_device_ids: &'static [u16],
    nvml_names: &'static [&'static str],
    segment: Segment,
    nvlink: Option<NvLinkSpec>,
    pcie: Option<PcieSpec>,
    memory_bandwidth_gbps: Option<f64>,
    dense_tflops: Option<f64>,
    tf32_dense_tflops: Option<f64>,
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
        bf16_dense_tflops: dense_tflops,
        fp16_dense_tflops: dense_tflops,
        tf32_dense_tflops,
        nvls: false,
    }
}

/// Every model gpucheck knows.
pub static SKUS: &[Sku] = &[
    // NVIDIA H100 Tensor Core GPU datasheet, H100 SXM (as tabled, with its
    // footnote link, on glennklockwood.com/garden/processors/h100):
    // BF16/FP16 989.4 dense, 1978.9 with sparsity; TF32 494.7 dense, 989.4
    // with sparsity (the datasheet as reproduced by HPC Technologies, named
    // at H100 PCIe: "TF32 Tensor Core 989 TFLOPS*", "Specifications 1/2
    // lower without sparsity"); 3.35 TB/s; NVLink
    // 900 GB/s over 18 links (NVLINK_50). PCIe Gen5 x16: the real HGX H100
    // dump (healthy_h100_sxm_x8). NVLS: NVSwitch gen 3 (HGX H100).
    dc(
        "H100 SXM5 80GB",
        &[0x2330],
        &["H100 80GB HBM3"],
        sxm(18, NVLINK_50),
        GEN5_X16,
        Some(3350.0),
        Some(989.4),
        Some(989.4),
        Some(494.7),
        true,
    ),
    // NVIDIA H100 datasheet as reproduced by HPC Technologies
    // (archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html): H100 PCIe
    // BF16/FP16 1,513 TFLOPS and TF32 756 TFLOPS "shown with sparsity", so
    // 756.5 and 378 dense;
    // 2,000 GB/s (also the H100 PCIe product brief PB-11133-001: "greater
    // than 2,000 gigabytes per second"); "NVLINK: 600GB/s" (a bridged pair,
    // 12 links); "PCIe Gen5: 128GB/s", i.e. Gen5 x16.
    dc(
        "H100 PCIe",
        &[0x2331],
        &["H100 PCIe"],
        bridged(12, NVLINK_50),
        GEN5_X16,
        Some(2000.0),
        Some(756.5),
        Some(756.5),
        Some(378.0),
        false,
    ),
    // H100 NVL (pci.ids: "GH100 [H100L 94GB]"): NVLink 600 GB/s between a
    // bridged pair (clawkipedia.org/wiki/nvidia-h100, after NVIDIA's H100
    // page); PCIe Gen5 x16 from the real dump (healthy_h100_nvl_x2).
    // Memory bandwidth and TFLOPS: the pages read disagree (3.93 TB/s, and
    // a 4.8 TB/s that is the H200's) and no NVIDIA text was found, so
    // unknown (TF32 too).
    dc(
        "H100 NVL",
        &[0x2321],
        &["H100 NVL"],
        bridged(12, NVLINK_50),
        GEN5_X16,
        None,
        None,
        None,
        None,
        false,
    ),
    // H200 SXM: GH100 with HBM3e, compute "functionally identical" to H100
    // (aiwiki.ai/wiki/nvidia_h200, after NVIDIA's H200 page), so H100 SXM's
    // 989.4 dense (itkb.uw.cz's dense table: "~989") and TF32 494.7 dense;
    // 4.8 TB/s; NVLink
    // 900 GB/s on the HGX board, as H100's 18 links. PCIe Gen5 x16: the
    // real dump (healthy_h200).
    dc(
        "H200 SXM 141GB",
        &[0x2335],
        &["H200"],
        sxm(18, NVLINK_50),
        GEN5_X16,
        Some(4800.0),
        Some(989.4),
        Some(989.4),
        Some(494.7),
        true,
    ),
    // H200 NVL: "141 GB at 4.8 TB/s on its SXM and NVL boards" (aiwiki.ai,
    // after NVIDIA's H200 page). Its NVLink bridges, PCIe link and TFLOPS
    // (bf16, fp16, TF32): no source read here, so unknown.
    dc(
        "H200 NVL",
        &[0x233b],
        &["H200 NVL"],
        None,
        None,
        Some(4800.0),
        None,
        None,
        None,
        false,
    ),
    // H800 (SXM5): NVLink cut to "400 GB/s total aggregate bidirectional"
    // (philisun.com's H800 vs H100 analysis; no NVIDIA product brief was
    // found), so 8 links of NVLINK_50; memory "largely consistent" with
    // H100 SXM's 3.35 TB/s (same page). TFLOPS, PCIe link and NVLS: no
    // source, so unknown.
    dc(
        "H800 SXM5",
        &[0x2324],
        &["H800"],
        sxm(8, NVLINK_50),
        None,
        Some(3350.0),
        None,
        None,
        None,
        false,
    ),
    // H800 PCIe: no source for any figure was found, so all unknown.
    dc(
        "H800 PCIe",
        &[0x2322],
        &["H800 PCIe"],
        None,
        None,
        None,
        None,
        None,
        None,
        false,
    ),
    // NVIDIA A100 Tensor Core GPU datasheet (as tabled, with its footnote
    // link, on glennklockwood.com/garden/processors/A100, and on the
    // Paderborn PC2 wiki's "NVIDIA A100 40GB with NVLINK" page: "312 TFLOPS
    // / 624 TFLOPS*", "*With sparsity"): BF16/FP16 312 dense; TF32 156
    // dense, 312 with sparsity (glennklockwood's table); 40GB
    // 1,555 GB/s, 80GB SXM 2,039 GB/s; NVLink 600 GB/s over 12 links
    // (NVLINK_50). PCIe Gen4 x16: the real dumps (netdata's a100-sxm4-mig,
    // a100_sxm_x4_remap_pending).
    dc(
        "A100 SXM4 40GB",
        &[0x20b0],
        &["A100-SXM4-40GB"],
        sxm(12, NVLINK_50),
        GEN4_X16,
        Some(1555.0),
        Some(312.0),
        Some(312.0),
        Some(156.0),
        false,
    ),
    dc(
        "A100 SXM4 80GB",
        &[0x20b2],
        &["A100-SXM4-80GB"],
        sxm(12, NVLINK_50),
        GEN4_X16,
        Some(2039.0),
        Some(312.0),
        Some(312.0),
        Some(156.0),
        false,
    ),
    // A100 PCIe 40GB: the datasheet's compute; 1,555 GB/s and PCIe 4.0 x16
    // (sysrqmts.com's A100 PCIe page). Its NVLink bridge ("NVLink Bridge for
    // up to 2 GPUs", NVIDIA's A100 page as quoted on xynio.com): no figure,
    // so unknown.
    dc(
        "A100 PCIe 40GB",
        &[0x20b1, 0x20f1],
        &["A100-PCIE-40GB"],
        None,
        GEN4_X16,
        Some(1555.0),
        Some(312.0),
        Some(312.0),
        Some(156.0),
        false,
    ),
    // A100 PCIe 80GB: the datasheet's compute; its memory bandwidth, PCIe
    // link and NVLink bridge were not confirmed by a source read here.
    dc(
        "A100 PCIe 80GB",
        &[0x20b5],
        &["A100 80GB PCIe"],
        None,
        None,
        None,
        Some(312.0),
        Some(312.0),
        Some(156.0),
        false,
    ),
    // A800: "only the interconnect was throttled", NVLink 600 -> 400 GB/s,
    // compute, memory and Tensor Cores unchanged (aiwiki.ai/wiki/nvidia_a800;
    // no NVIDIA product brief was found): the A100's figures with 8 SXM
    // links. The PCIe cards' bridges: unknown.
    dc(
        "A800 SXM4 80GB",
        &[0x20f3],
        &["A800-SXM4-80GB"],
        sxm(8, NVLINK_50),
        GEN4_X16,
        Some(2039.0),
        Some(312.0),
        Some(312.0),
        Some(156.0),
        false,
    ),
    dc(
        "A800 SXM4 40GB",
        &[0x20bd],
        &["A800-SXM4-40GB"],
        sxm(8, NVLINK_50),
        GEN4_X16,
        Some(1555.0),
        Some(312.0),
        Some(312.0),
        Some(156.0),
        false,
    ),
    dc(
        "A800 PCIe 80GB",
        &[0x20f5],
        &["A800 80GB PCIe"],
        None,
        None,
        None,
        Some(312.0),
        Some(312.0),
        Some(156.0),
        false,
    ),
    dc(
        "A800 PCIe 40GB",
        &[0x20f6],
        &["A800 40GB PCIe"],
        None,
        GEN4_X16,
        Some(1555.0),
        Some(312.0),
        Some(312.0),
        Some(156.0),
        false,
    ),
    // A10: 600 GB/s GDDR6 and PCIe 4.0 x16 (sysrqmts.com's A10 PCIe page:
    // 600.2 GB/s; the real dump healthy_a10: Gen4 x16), no NVLink. Its
    // tensor TFLOPS: NVIDIA's A10 datasheet was not found, so unknown.
    dc(
        "A10",
        &[0x2236],
        &["A10"],
        None,
        GEN4_X16,
        Some(600.0),
        None,
        None,
        None,
        false,
    ),
    // A10G (AWS G5): NVIDIA publishes no datasheet for it; "24 gigabytes of
    // GDDR6 VRAM with a memory bandwidth of 600 gigabytes per second", the
    // A10's (baseten.co, "NVIDIA A10 vs A10G"); no NVLink (AWS's G5 table
    // as gathered on gist.github.com/askainet: interconnect "NA"). PCIe
    // Gen4 x16 and ECC on: the real dump healthy_a10g (NVIDIA/DCGM#232).
    // Tensor TFLOPS: unknown.
    dc(
        "A10G",
        &[0x2237],
        &["A10G"],
        None,
        GEN4_X16,
        Some(600.0),
        None,
        None,
        None,
        false,
    ),
    // A30 (pci.ids: "GA100GL [A30 PCIe]"): NVIDIA's A30 datasheet was not
    // found and no other page gave its figures, so all unknown.
    dc(
        "A30",
        &[0x20b7],
        &["A30"],
        None,
        None,
        None,
        None,
        None,
        None,
        false,
    ),
    // NVIDIA A40 datasheet (as reproduced on ecer.com): 48 GB GDDR6 with
    // ECC, 696 GB/s; "Peak BF16 Tensor TFLOPS with FP32 Accumulate 149.7 |
    // 299.4*" (FP16 with FP16 accumulate the same); "Peak TF32 Tensor
    // TFLOPS 74.8 | 149.6*" (hmc-tech.com's A40 table: 74.83); NVLink
    // 112.5 GB/s bidirectional; PCIe Gen4 64 GB/s (x16; the real dump
    // healthy_a40_x10).
    dc(
        "A40",
        &[0x2235],
        &["A40"],
        bridged(4, NVLINK_GA102),
        GEN4_X16,
        Some(696.0),
        Some(149.7),
        Some(149.7),
        Some(74.8),
        false,
    ),
    // NVIDIA L4: 300 GB/s GDDR6, "242 TFLOPS in FP16 Tensor Core
    // operations (with sparsity)" (NVIDIA's L4 datasheet as summarised on
    // grokipedia.com's L4 vs L40S page), so 121 dense; BF16 runs at the
    // FP16 rate on Ada (hmc-tech.com's L4 table lists both alike). TF32
    // "120 TFLOPS | Sparsity" (NVIDIA's L4 figures in sourcecode.com's
    // product compare), so 60 dense. PCIe 4.0 x16 (the real dump
    // healthy_l4), no NVLink.
    dc(
        "L4",
        &[0x27b8],
        &["L4"],
        None,
        GEN4_X16,
        Some(300.0),
        Some(121.0),
        Some(121.0),
        Some(60.0),
        false,
    ),
    // NVIDIA L40 / L40S datasheet table (as reproduced on mullet.se, "*
    // With Sparsity"): 48 GB GDDR6 with ECC, 864 GB/s, PCIe Gen4 x16; L40
    // BF16 and FP16 Tensor "181.05 | 362.1*", L40S "362.05 | 733*" (the
    // L40S's printed sparse figure is not twice its dense one; the dense
    // figure is the one kept); TF32 Tensor L40 "90.5 | 181*", L40S
    // "183 | 366*".
    // No NVLink ("NVLink is not supported", itcreations.com's L40S page).
    dc(
        "L40",
        &[0x26b5],
        &["L40"],
        None,
        GEN4_X16,
        Some(864.0),
        Some(181.05),
        Some(181.05),
        Some(90.5),
        false,
    ),
    dc(
        "L40S",
        &[0x26b9],
        &["L40S"],
        None,
        GEN4_X16,
        Some(864.0),
        Some(362.05),
        Some(362.05),
        Some(183.0),
        false,
    ),
    // T4: 320 GB/s GDDR6, PCIe 3.0 x16, FP16 65 TFLOPS (sysrqmts.com's T4
    // page: 65.13; NVIDIA's launch figure, FP16 peak 65 T, as quoted on
    // gist.github.com/hewumars); Turing has no bf16, no TF32 and no
    // sparsity.
    dc(
        "T4",
        &[0x1eb8],
        &["Tesla T4"],
        None,
        GEN3_X16,
        Some(320.0),
        None,
        Some(65.0),
        None,
        false,
    ),
    // V100 SXM2: 900 GB/s and 6 NVLinks (Dell EMC's Deep Learning with
    // NVIDIA reference guide, 3.1.3); "up to 125 TFLOPS of deep learning
    // performance" (grokipedia's Tesla V100 page, after NVIDIA's V100
    // datasheet); Volta has no bf16, no TF32 and no sparsity. PCIe Gen3
    // x16 (the real dump healthy_v100_sxm2_x8; lambda's gpu_specs table).
    dc(
        "V100 SXM2",
        &[0x1db1, 0x1db5, 0x1df5],
        &["Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"],
        sxm(6, NVLINK_50),
        GEN3_X16,
        Some(900.0),
        None,
        Some(125.0),
        None,
        false,
    ),
    // V100 PCIe and V100S PCIe: PCIe 3.0 x16 (sysrqmts.com's V100 PCIe
    // page; lambda's gpu_specs table), no NVLink. Their memory bandwidth
    // and tensor TFLOPS: NVIDIA's datasheet was not found, so unknown.
    dc(
        "V100 PCIe",
        &[0x1db4, 0x1db6],
        &["Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"],
        None,
        GEN3_X16,
        None,
        None,
        None,
        None,
        false,
    ),
    dc(
        "V100S PCIe",
        &[0x1df6],
        &["Tesla V100S-PCIE-32GB"],
        None,
        GEN3_X16,
        None,
        None,
        None,
        None,
        false,
    ),
    // NVIDIA HGX B200 datasheet (per GPU, 1,000 W): 8 TB/s HBM3e, bf16/fp16
    // 4.5 PFLOPS with sparsity (2,250 dense; hmc-tech.com's B200 table
    // likewise: "FP16-32 2.25 PFLOPS, Sparse 4.5"), TF32 2.2 PFLOPS with
    // sparsity (the datasheet's per-GPU table as quoted on
    // zdszero.github.io; 1,100 dense on glennklockwood.com's B200 page),
    // NVLink 5 1.8 TB/s over 18 links, PCIe Gen5 x16.
    dc(
        "B200",
        &[0x2901, 0x2909],
        &["B200"],
        sxm(18, NVLINK_100),
        GEN5_X16,
        Some(8000.0),
        Some(2250.0),
        Some(2250.0),
        Some(1100.0),
        true,
    ),
    // GeForce RTX 3090: 936 GB/s GDDR6X; "FP16 TFLOPS (Sparsity) 142
    // (285)" is with FP16 accumulate (Tom's Hardware's RTX 3090 table);
    // the FP32-accumulate figure and TF32 no page read here gave, so
    // unknown. No
    // ECC (the real dump healthy_rtx3090_x2: N/A); PCIe Gen4 x16 (same
    // dump). Its NVLink bridge: no figure read, so unknown.
    desk(
        "GeForce RTX 3090",
        &[0x2204],
        &["GeForce RTX 3090"],
        Segment::GeForce,
        None,
        GEN4_X16,
        Some(936.0),
        None,
        None,
    ),
    // GeForce RTX 4090: 1,008 GB/s and 165 TFLOPS "dense bf16 tensor cores"
    // (gist.github.com/mikasenghaas, "Accelerator Intensity"); TF32 82.58
    // dense, 165.15 with sparsity (waredb.com's RTX 4090 table; hmc-tech.com
    // likewise 82.58); ECC offered,
    // off as shipped (the real dumps: "Disabled"); PCIe Gen4 x16 (the real
    // dump healthy_rtx4090_x8); no NVLink.
    desk(
        "GeForce RTX 4090",
        &[0x2684],
        &["GeForce RTX 4090"],
        Segment::GeForce,
        None,
        GEN4_X16,
        Some(1008.0),
        Some(165.0),
        Some(82.6),
    ),
    // GeForce RTX 5090: 1,792 GB/s GDDR7 (spheron.network's RTX 5090
    // datasheet table, and the RTX Blackwell whitepaper as summarised on
    // libertify.com); PCIe Gen5 x16 (the real dump healthy_rtx5090); no
    // NVLink. Its FP32-accumulate tensor figure no page read here gave
    // (spheron's 838.4 is sparse with FP16 accumulate), so unknown; TF32
    // likewise.
    desk(
        "GeForce RTX 5090",
        &[0x2b85],
        &["GeForce RTX 5090"],
        Segment::GeForce,
        None,
        GEN5_X16,
        Some(1792.0),
        None,
        None,
    ),
    // RTX 6000 Ada Generation: 48 GB GDDR6 with ECC (sourcecode.com's
    // product compare), ECC off as shipped (the real dump: "Disabled"),
    // PCIe Gen4 x16 (same dump), no NVLink. Its memory bandwidth and tensor
    // TFLOPS (TF32 too): NVIDIA's datasheet was not found, so unknown.
    desk(
        "RTX 6000 Ada Generation",
        &[0x26b1],
        &["RTX 6000 Ada Generation"],
        Segment::Workstation,
        None,
        GEN4_X16,
        None,
        None,
        None,
    ),
    // RTX A5000: NVIDIA's datasheet was not found, so all unknown.
    desk(
        "RTX A5000",
        &[0x2231],
        &["RTX A5000"],
        Segment::Workstation,
        None,
        None,
        None,
        None,
        None,
    ),
    // RTX A6000: 48 GB GDDR6 with ECC, 768 GB/s (techbriefly.com on
    // NVIDIA's launch; sysrqmts.com's A6000 table), PCIe 4.0 x16 (the real
    // dump healthy_rtx_a6000_x9). Its NVLink bridge ("connect two cards")
    // and tensor TFLOPS (TF32 too): no figure read, so unknown.
    desk(
        "RTX A6000",
        &[0x2230],
        &["RTX A6000"],
        Segment::Workstation,
        None,
        GEN4_X16,
        Some(768.0),
        None,
        None,
    ),
    // NVIDIA RTX PRO 6000 Blackwell datasheet and RTX Blackwell whitepaper:
    // 96 GB GDDR7 with ECC, 1,792 GB/s, fp16/bf16 with FP32 accumulate 503.8
    // dense, PCIe Gen5 x16, no NVLink (Workstation, Max-Q and Server
    // Editions share the GB202 figures; the Max-Q runs lower clocks). TF32
    // 251.9 dense, 503.8 with sparsity (hmc-tech.com's RTX PRO 6000
    // Blackwell table; the datasheet text read here gave none).
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
        Some(1792.0),
        Some(503.8),
        Some(251.9),
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
            assert!(
                s.memory_bandwidth_gbps.is_none_or(|b| b > 0.0),
                "{}",
                s.model
            );
            assert!(
                s.pcie
                    .is_none_or(|p| p.width == 16 && (3..=5).contains(&p.gen)),
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

    #[test]
    fn tflops_are_the_datasheets_dense_figures_not_its_sparse_ones() {
        let bf16 = |name: &str| by_nvml_name(name).and_then(|s| s.bf16_dense_tflops);
        // The datasheets print "1,979*", "1,513*", "624*", "362.1*" and
        // "4.5 PF*" with sparsity: the table holds half of each.
        assert_eq!(bf16("NVIDIA H100 80GB HBM3"), Some(989.4));
        assert_eq!(bf16("NVIDIA H100 PCIe"), Some(1513.0 / 2.0));
        assert_eq!(bf16("NVIDIA A100-SXM4-40GB"), Some(624.0 / 2.0));
        assert_eq!(bf16("NVIDIA L40"), Some(362.1 / 2.0));
        assert_eq!(bf16("NVIDIA B200"), Some(4500.0 / 2.0));
        // Volta and Turing have no bf16; their fp16 tensor figure stays.
        assert_eq!(bf16("Tesla T4"), None);
        assert_eq!(
            by_nvml_name("Tesla T4").and_then(|s| s.fp16_dense_tflops),
            Some(65.0)
        );
    }

    #[test]
    fn tf32_figures_are_the_datasheets_dense_ones() {
        let tf32 = |name: &str| by_nvml_name(name).and_then(|s| s.tf32_dense_tflops);
        // The datasheets print "989*", "756*", "312*", "366*", "120*" and
        // "2.2 PF*" with sparsity: the table holds half of each.
        assert_eq!(tf32("NVIDIA H100 80GB HBM3"), Some(989.4 / 2.0));
        assert_eq!(tf32("NVIDIA H100 PCIe"), Some(756.0 / 2.0));
        assert_eq!(tf32("NVIDIA A100-SXM4-80GB"), Some(312.0 / 2.0));
        assert_eq!(tf32("NVIDIA L40S"), Some(366.0 / 2.0));
        assert_eq!(tf32("NVIDIA L4"), Some(120.0 / 2.0));
        assert_eq!(tf32("NVIDIA B200"), Some(2200.0 / 2.0));
        // Volta and Turing have no TF32.
        assert_eq!(tf32("Tesla T4"), None);
        assert_eq!(tf32("Tesla V100-SXM2-32GB"), None);
        assert_eq!(tf32("NVIDIA H100 NVL"), None);
    }

    #[test]
    fn tf32_runs_at_half_the_bf16_rate_wherever_both_are_known() {
        // Tensor cores from Ampere on run TF32 at half their bf16 rate; a
        // sparse figure entered as dense would be twice that. The datasheets
        // round: the B200's "2.2 PF*" is 2.25 rounded down, the L40S's 183
        // is above 362.05 / 2.
        let mut both = 0;
        for s in SKUS {
            if let (Some(tf32), Some(bf16)) = (s.tf32_dense_tflops, s.bf16_dense_tflops) {
                let ratio = tf32 / (bf16 / 2.0);
                assert!((0.97..=1.03).contains(&ratio), "{}: {ratio}", s.model);
                both += 1;
            }
        }
        assert!(both >= 10, "{both}");
    }

    #[test]
    fn a_figure_no_source_confirmed_is_unknown() {
        let a30 = by_nvml_name("NVIDIA A30").expect("known");
        assert_eq!(
            (
                a30.nvlink,
                a30.pcie,
                a30.memory_bandwidth_gbps,
                a30.bf16_dense_tflops,
                a30.tf32_dense_tflops
            ),
            (None, None, None, None, None)
        );
        // A known part with an unconfirmed link falls back to siblings: the
        // PCIe judge finds no width here.
        assert_eq!(by_nvml_name("NVIDIA H800 PCIe").and_then(|s| s.pcie), None);
        // The A10G's memory is the A10's, by a third-party page.
        assert_eq!(
            by_nvml_name("NVIDIA A10G").and_then(|s| s.memory_bandwidth_gbps),
            Some(600.0)
        );
    }
}

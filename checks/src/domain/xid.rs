//! NVIDIA's Xid catalog, reduced to what a DDP job needs to know: what an
//! Xid code means and what has to happen before the GPU can be trusted
//! again. Pure knowledge; the `fabric.xid` check judges with it.
//!
//! Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
//! https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
//! (Ampere and newer; mnemonic, description and "Resolution Bucket
//! (Immediate Action)" per code: IGNORE, RESTART_APP, RESET_GPU, RESTART_BM
//! = reboot the node, or a WORKFLOW_* whose text says "a GPU reset or node
//! reboot is needed"), with NVIDIA Health Validation's Xid checks
//! (https://docs.nvidia.com/health-validation/reference/checks/xid.md),
//! which drain the node for 46, 48, 64, 74, 79, 95, 119, 120 and the like.
//!
//! Every code the catalog lists is here with its immediate action; the
//! verdict class follows that action (43: IGNORE, so a healthy GPU after
//! an application fault passes; 109: RESET_GPU). Where the action depends
//! on the message or on other Xids (45, 144-150, 154) [`judged_action`]
//! reads them; where the catalog names none (162-172) the class is
//! gpucheck's reading of the trigger text, marked at the entry.

/// What gpucheck makes of an Xid: the verdict class its immediate action
/// implies. Ordered by how much the GPU needs before it is trusted again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum XidAction {
    /// Informational: nothing to do now (IGNORE: 63 a row was remapped, 43
    /// "the GPU remains in a healthy state").
    Note,
    /// Worth a look, the GPU itself is not known to be broken
    /// (CONTACT_SUPPORT, UPDATE_SWFW, and codes the catalog gives no
    /// immediate action).
    Investigate,
    /// The job that hit it ended (or will), the GPU itself is fine:
    /// restart the application (RESTART_APP).
    RestartApp,
    /// Hands on the machine: seating and power cables (CHECK_MECHANICALS).
    Service,
    /// The GPU must be reset before it is trusted again (RESET_GPU); drain
    /// the node when that is not possible while jobs run.
    ResetGpu,
    /// Only a restart of the node (RESTART_BM) or of the VM that owns the
    /// GPU (RESTART_VM) brings it back: drain the node.
    RebootNode,
}

/// The catalog's "Resolution Bucket (Immediate Action)" of a code, as
/// NVIDIA names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Ignore,
    ContactSupport,
    RestartApp,
    ResetGpu,
    RestartBm,
    RestartVm,
    CheckMechanicals,
    UpdateSwFw,
    /// "If UVM/vGPU is being utilized, RESET_GPU; otherwise IGNORE". CUDA
    /// always runs on the nvidia-uvm module, so for a training node: reset.
    CheckUvm,
    /// "Solo: RESTART_FM; Not Solo: IGNORE (follow other Xid)".
    WorkflowXid45,
    /// "Solo: RESET_GPU; w/ 63 or 64: DRAIN_AND_RESET".
    WorkflowXid48,
    /// 74: "A GPU reset or node reboot is needed to clear this error".
    WorkflowNvlinkErr,
    /// 144-150: decoded from the message; the decode sheet's fatal ones
    /// are RESET_GPU, its non-fatal ones IGNORE.
    WorkflowNvlink5Err,
    /// 154: "Follow XID 154 reported guidance", the recovery action its
    /// text names.
    Xid154,
    /// The catalog names no immediate action (162-172, newest codes);
    /// gpucheck's reading of its trigger text decides.
    NoneGiven,
}

impl Bucket {
    /// The bucket as the catalog spells it.
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Ignore => "IGNORE",
            Bucket::ContactSupport => "CONTACT_SUPPORT",
            Bucket::RestartApp => "RESTART_APP",
            Bucket::ResetGpu => "RESET_GPU",
            Bucket::RestartBm => "RESTART_BM",
            Bucket::RestartVm => "RESTART_VM",
            Bucket::CheckMechanicals => "CHECK_MECHANICALS",
            Bucket::UpdateSwFw => "UPDATE_SWFW",
            Bucket::CheckUvm => "CHECK_UVM",
            Bucket::WorkflowXid45 => "WORKFLOW_XID_45",
            Bucket::WorkflowXid48 => "WORKFLOW_XID_48",
            Bucket::WorkflowNvlinkErr => "WORKFLOW_NVLINK_ERR",
            Bucket::WorkflowNvlink5Err => "WORKFLOW_NVLINK5_ERR",
            Bucket::Xid154 => "XID_154",
            Bucket::NoneGiven => "none given",
        }
    }

    /// The class this bucket implies before the message is read.
    const fn action(self) -> XidAction {
        match self {
            Bucket::Ignore | Bucket::Xid154 => XidAction::Note,
            Bucket::ContactSupport | Bucket::UpdateSwFw | Bucket::NoneGiven => {
                XidAction::Investigate
            }
            Bucket::RestartApp | Bucket::WorkflowXid45 => XidAction::RestartApp,
            Bucket::CheckMechanicals => XidAction::Service,
            Bucket::ResetGpu
            | Bucket::CheckUvm
            | Bucket::WorkflowXid48
            | Bucket::WorkflowNvlinkErr
            | Bucket::WorkflowNvlink5Err => XidAction::ResetGpu,
            Bucket::RestartBm | Bucket::RestartVm => XidAction::RebootNode,
        }
    }
}

/// One catalog entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidInfo {
    pub code: u32,
    /// NVIDIA's mnemonic ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR").
    pub mnemonic: &'static str,
    /// NVIDIA's description ("Unused": the code is not raised on Ampere
    /// and newer GPUs).
    pub meaning: &'static str,
    pub bucket: Bucket,
    /// The class before the message is read (see [`judged_action`]).
    pub action: XidAction,
}

const fn x(code: u32, mnemonic: &'static str, meaning: &'static str, bucket: Bucket) -> XidInfo {
    XidInfo {
        code,
        mnemonic,
        meaning,
        bucket,
        action: bucket.action(),
    }
}

/// A code the catalog gives no immediate action: gpucheck's class.
const fn n(code: u32, mnemonic: &'static str, meaning: &'static str, action: XidAction) -> XidInfo {
    XidInfo {
        code,
        mnemonic,
        meaning,
        bucket: Bucket::NoneGiven,
        action,
    }
}

use Bucket::*;
use XidAction::{Investigate, Note, ResetGpu as Reset};

/// Every code of NVIDIA's Xid catalog (its "XIDs" sheet, codes 1-172),
/// with the immediate action the catalog gives it.
pub const XID_CATALOG: &[XidInfo] = &[
    x(
        1,
        "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD",
        "Unused",
        ContactSupport,
    ),
    x(
        2,
        "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD",
        "Unused",
        ContactSupport,
    ),
    x(
        3,
        "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD",
        "Unused",
        ContactSupport,
    ),
    x(
        4,
        "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY",
        "Unused",
        ContactSupport,
    ),
    x(
        5,
        "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW",
        "Unused",
        ContactSupport,
    ),
    x(
        6,
        "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR",
        "Unused",
        ContactSupport,
    ),
    x(
        7,
        "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR",
        "Unused",
        ContactSupport,
    ),
    x(
        8,
        "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
        "GPU stopped processing",
        Bucket::RestartApp,
    ),
    x(
        9,
        "ROBUST_CHANNEL_GR_ERROR_INSTANCE",
        "Unused",
        ContactSupport,
    ),
    x(
        10,
        "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP",
        "Unused",
        ContactSupport,
    ),
    x(
        11,
        "ROBUST_CHANNEL_GR_ERROR_MISSING_HW",
        "Invalid or corrupted push buffer stream",
        Bucket::RestartApp,
    ),
    x(
        12,
        "ROBUST_CHANNEL_GR_ERROR_SW_METHOD",
        "Unused",
        ContactSupport,
    ),
    x(
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION",
        "Graphics Engine Exception",
        Bucket::RestartApp,
    ),
    x(
        14,
        "ROBUST_CHANNEL_FAKE_ERROR",
        "Fake or injected error from userspace",
        Ignore,
    ),
    x(
        15,
        "ROBUST_CHANNEL_SCANLINE_TIMEOUT",
        "Unused",
        ContactSupport,
    ),
    x(
        16,
        "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT",
        "Unused",
        ContactSupport,
    ),
    x(
        17,
        "ROBUST_CHANNEL_PARAMETER_ERROR",
        "Unused",
        ContactSupport,
    ),
    x(
        18,
        "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR",
        "Unused",
        ContactSupport,
    ),
    x(
        19,
        "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER",
        "Unused",
        ContactSupport,
    ),
    x(
        20,
        "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD",
        "Unused",
        ContactSupport,
    ),
    x(
        21,
        "ROBUST_CHANNEL_ME_ERROR_SW_METHOD",
        "Unused",
        ContactSupport,
    ),
    x(
        22,
        "ROBUST_CHANNEL_VP_ERROR_SW_METHOD",
        "Unused",
        ContactSupport,
    ),
    x(
        23,
        "ROBUST_CHANNEL_RC_LOGGING_ENABLED",
        "Unused",
        ContactSupport,
    ),
    x(
        24,
        "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT",
        "Unused",
        ContactSupport,
    ),
    x(
        25,
        "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY",
        "Invalid or illegal push buffer stream",
        Bucket::RestartApp,
    ),
    x(
        26,
        "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT",
        "Unused",
        ContactSupport,
    ),
    x(27, "ROBUST_CHANNEL_VP_ERROR", "Unused", ContactSupport),
    x(28, "ROBUST_CHANNEL_VP2_ERROR", "Unused", ContactSupport),
    x(29, "ROBUST_CHANNEL_BSP_ERROR", "Unused", ContactSupport),
    x(
        30,
        "ROBUST_CHANNEL_BAD_ADDR_ACCESS",
        "Unused",
        ContactSupport,
    ),
    x(
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault",
        Bucket::RestartApp,
    ),
    x(
        32,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        "Invalid or corrupted push buffer stream",
        Bucket::RestartApp,
    ),
    x(33, "ROBUST_CHANNEL_SEC_ERROR", "Unused", ContactSupport),
    x(34, "ROBUST_CHANNEL_MSVLD_ERROR", "Unused", ContactSupport),
    x(35, "ROBUST_CHANNEL_MSPDEC_ERROR", "Unused", ContactSupport),
    x(36, "ROBUST_CHANNEL_MSPPP_ERROR", "Unused", ContactSupport),
    x(
        37,
        "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD",
        "Driver firmware error",
        Ignore,
    ),
    x(
        38,
        "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT",
        "Driver firmware error",
        Ignore,
    ),
    x(
        39,
        "ROBUST_CHANNEL_CE0_ERROR",
        "Copy Engine Exception",
        Bucket::RestartApp,
    ),
    x(
        40,
        "ROBUST_CHANNEL_CE1_ERROR",
        "Copy Engine Exception",
        Bucket::RestartApp,
    ),
    x(
        41,
        "ROBUST_CHANNEL_CE2_ERROR",
        "Copy Engine Exception",
        Bucket::RestartApp,
    ),
    x(42, "ROBUST_CHANNEL_VIC_ERROR", "Unused", ContactSupport),
    x(
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "GPU stopped processing",
        Ignore,
    ),
    x(
        44,
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        "Graphics Engine fault during context switch",
        Ignore,
    ),
    x(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup, due to previous errors",
        WorkflowXid45,
    ),
    x(
        46,
        "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR",
        "GPU stopped processing",
        Bucket::ResetGpu,
    ),
    x(47, "ROBUST_CHANNEL_NVENC0_ERROR", "Unused", ContactSupport),
    x(
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "Double Bit ECC Error",
        WorkflowXid48,
    ),
    x(
        49,
        "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY",
        "Unused",
        ContactSupport,
    ),
    x(
        50,
        "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR",
        "Unused",
        ContactSupport,
    ),
    x(
        51,
        "SILENT_RUNNING_STRESS_TEST_FAILURE",
        "Unused",
        ContactSupport,
    ),
    x(
        52,
        "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE",
        "Unused",
        ContactSupport,
    ),
    x(
        53,
        "SILENT_RUNNING_TEMP_REDUCED_CLOCKING",
        "Unused",
        ContactSupport,
    ),
    x(
        54,
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "Auxiliary power is not connected to the GPU board",
        CheckMechanicals,
    ),
    x(
        55,
        "SILENT_RUNNING_TEMPERATURE_READ_ERROR",
        "Unused",
        ContactSupport,
    ),
    x(56, "DISPLAY_CHANNEL_EXCEPTION", "Unused", ContactSupport),
    x(
        57,
        "FB_LINK_TRAINING_FAILURE_ERROR",
        "Unused",
        ContactSupport,
    ),
    x(58, "FB_MEMORY_ERROR", "Unused", ContactSupport),
    x(59, "PMU_ERROR", "Unused", ContactSupport),
    x(
        60,
        "ROBUST_CHANNEL_SEC2_ERROR",
        "Video processor exception",
        Bucket::RestartApp,
    ),
    x(61, "PMU_BREAKPOINT", "Unused", ContactSupport),
    x(
        62,
        "PMU_HALT_ERROR",
        "Internal micro-controller halt",
        Bucket::ResetGpu,
    ),
    x(
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "GPU memory remapping event",
        Ignore,
    ),
    x(
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "GPU memory remapping failure",
        Bucket::ResetGpu,
    ),
    x(65, "ROBUST_CHANNEL_NVENC1_ERROR", "Unused", ContactSupport),
    x(
        66,
        "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION",
        "Illegal access by driver",
        Ignore,
    ),
    x(
        67,
        "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION",
        "Illegal access by driver",
        Ignore,
    ),
    x(
        68,
        "ROBUST_CHANNEL_NVDEC0_ERROR",
        "NVDEC0 Exception",
        Bucket::RestartApp,
    ),
    x(
        69,
        "ROBUST_CHANNEL_GR_CLASS_ERROR",
        "Graphics Engine class error",
        Bucket::RestartApp,
    ),
    x(
        70,
        "ROBUST_CHANNEL_CE3_ERROR",
        "CE3: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        71,
        "ROBUST_CHANNEL_CE4_ERROR",
        "CE4: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        72,
        "ROBUST_CHANNEL_CE5_ERROR",
        "CE5: Unknown Error",
        Bucket::RestartApp,
    ),
    x(73, "ROBUST_CHANNEL_NVENC2_ERROR", "Unused", ContactSupport),
    x(74, "NVLINK_ERROR", "NVLINK Error", WorkflowNvlinkErr),
    x(
        75,
        "ROBUST_CHANNEL_CE6_ERROR",
        "CE6: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        76,
        "ROBUST_CHANNEL_CE7_ERROR",
        "CE7: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        77,
        "ROBUST_CHANNEL_CE8_ERROR",
        "CE8: Unknown Error",
        Bucket::RestartApp,
    ),
    x(78, "VGPU_START_ERROR", "vGPU Start Error", UpdateSwFw),
    x(
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "GPU has fallen off the bus",
        RestartBm,
    ),
    x(
        80,
        "PBDMA_PUSHBUFFER_CRC_MISMATCH",
        "Corrupted data sent to GPU",
        Bucket::RestartApp,
    ),
    x(
        81,
        "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR",
        "Unused",
        ContactSupport,
    ),
    x(
        82,
        "ROBUST_CHANNEL_NVJPG0_ERROR",
        "NVJPG0 Error",
        Bucket::RestartApp,
    ),
    x(
        83,
        "ROBUST_CHANNEL_NVDEC1_ERROR",
        "NVDEC1 Error",
        Bucket::RestartApp,
    ),
    x(
        84,
        "ROBUST_CHANNEL_NVDEC2_ERROR",
        "NVDEC2 Error",
        Bucket::RestartApp,
    ),
    x(
        85,
        "ROBUST_CHANNEL_CE9_ERROR",
        "CE9: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        86,
        "ROBUST_CHANNEL_OFA0_ERROR",
        "OFA Exception",
        Bucket::RestartApp,
    ),
    x(87, "NVTELEMETRY_DRIVER_REPORT", "Unused", ContactSupport),
    x(
        88,
        "ROBUST_CHANNEL_NVDEC3_ERROR",
        "NVDEC3 Error",
        Bucket::RestartApp,
    ),
    x(
        89,
        "ROBUST_CHANNEL_NVDEC4_ERROR",
        "NVDEC4 Error",
        Bucket::RestartApp,
    ),
    x(90, "LTC_ERROR", "Unused", ContactSupport),
    x(91, "RESERVED_XID", "Unused", ContactSupport),
    x(
        92,
        "EXCESSIVE_SBE_INTERRUPTS",
        "High single-bit ECC error rate",
        Ignore,
    ),
    x(
        93,
        "INFOROM_ERASE_LIMIT_EXCEEDED",
        "Non-fatal violation of provisioned InfoROM wear limit",
        Ignore,
    ),
    x(
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "Contained memory error",
        Bucket::RestartApp,
    ),
    x(
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "Uncontained memory error",
        Bucket::ResetGpu,
    ),
    x(
        96,
        "ROBUST_CHANNEL_NVDEC5_ERROR",
        "NVDEC5 Error",
        Bucket::RestartApp,
    ),
    x(
        97,
        "ROBUST_CHANNEL_NVDEC6_ERROR",
        "NVDEC6 Error",
        Bucket::RestartApp,
    ),
    x(
        98,
        "ROBUST_CHANNEL_NVDEC7_ERROR",
        "NVDEC7 Error",
        Bucket::RestartApp,
    ),
    x(
        99,
        "ROBUST_CHANNEL_NVJPG1_ERROR",
        "NVJPG1 Error",
        Bucket::RestartApp,
    ),
    x(
        100,
        "ROBUST_CHANNEL_NVJPG2_ERROR",
        "NVJPG2 Error",
        Bucket::RestartApp,
    ),
    x(
        101,
        "ROBUST_CHANNEL_NVJPG3_ERROR",
        "NVJPG3 Error",
        Bucket::RestartApp,
    ),
    x(
        102,
        "ROBUST_CHANNEL_NVJPG4_ERROR",
        "NVJPG4 Error",
        Bucket::RestartApp,
    ),
    x(
        103,
        "ROBUST_CHANNEL_NVJPG5_ERROR",
        "NVJPG5 Error",
        Bucket::RestartApp,
    ),
    x(
        104,
        "ROBUST_CHANNEL_NVJPG6_ERROR",
        "NVJPG6 Error",
        Bucket::RestartApp,
    ),
    x(
        105,
        "ROBUST_CHANNEL_NVJPG7_ERROR",
        "NVJPG7 Error",
        Bucket::RestartApp,
    ),
    x(106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", Ignore),
    x(
        107,
        "SMBPBI_TEST_MESSAGE_SILENT",
        "SMBPBI Test Message Silent",
        Ignore,
    ),
    x(108, "NVLINK_REMOTE_TRANSLATION_ERROR", "Unused", Ignore),
    x(
        109,
        "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
        "Context Switch Timeout Error",
        Bucket::ResetGpu,
    ),
    x(
        110,
        "SEC_FAULT_ERROR",
        "Security Fault Error",
        Bucket::ResetGpu,
    ),
    x(111, "BUNDLE_ERROR_EVENT", "Unused", ContactSupport),
    x(112, "DISP_SUPERVISOR_ERROR", "Unused", ContactSupport),
    x(113, "DP_LT_FAILURE", "Unused", ContactSupport),
    x(114, "HEAD_RG_UNDERFLOW", "Unused", ContactSupport),
    x(115, "CORE_CHANNEL_REGS", "Unused", ContactSupport),
    x(116, "WINDOW_CHANNEL_REGS", "Unused", ContactSupport),
    x(117, "CURSOR_CHANNEL_REGS", "Unused", ContactSupport),
    x(118, "HEAD_REGS", "Unused", ContactSupport),
    x(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", Bucket::ResetGpu),
    x(120, "GSP_ERROR", "GSP Error", Bucket::ResetGpu),
    x(121, "C2C_ERROR", "C2C Error", Ignore),
    x(122, "SPI_PMU_RPC_READ_FAIL", "Unused", ContactSupport),
    x(123, "SPI_PMU_RPC_WRITE_FAIL", "Unused", ContactSupport),
    x(124, "SPI_PMU_RPC_ERASE_FAIL", "Unused", ContactSupport),
    x(125, "INFOROM_FS_ERROR", "Unused", ContactSupport),
    x(
        126,
        "ROBUST_CHANNEL_CE10_ERROR",
        "CE10: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        127,
        "ROBUST_CHANNEL_CE11_ERROR",
        "CE11: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        128,
        "ROBUST_CHANNEL_CE12_ERROR",
        "CE12: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        129,
        "ROBUST_CHANNEL_CE13_ERROR",
        "CE13: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        130,
        "ROBUST_CHANNEL_CE14_ERROR",
        "CE14: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        131,
        "ROBUST_CHANNEL_CE15_ERROR",
        "CE15: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        132,
        "ROBUST_CHANNEL_CE16_ERROR",
        "CE16: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        133,
        "ROBUST_CHANNEL_CE17_ERROR",
        "CE17: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        134,
        "ROBUST_CHANNEL_CE18_ERROR",
        "CE18: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        135,
        "ROBUST_CHANNEL_CE19_ERROR",
        "CE19: Unknown Error",
        Bucket::RestartApp,
    ),
    x(
        136,
        "ALI_TRAINING_FAIL",
        "Link Training Failed",
        Bucket::ResetGpu,
    ),
    x(137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", Ignore),
    x(138, "ROBUST_CHANNEL_DLA_ERROR", "Unused", ContactSupport),
    x(
        139,
        "ROBUST_CHANNEL_OFA1_ERROR",
        "OFA1 Error",
        Bucket::RestartApp,
    ),
    x(
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "ECC Unrecovered Error",
        Bucket::ResetGpu,
    ),
    x(
        141,
        "ROBUST_CHANNEL_FAST_PATH_ERROR",
        "CUDA Fast Path Error",
        Ignore,
    ),
    x(
        142,
        "ROBUST_CHANNEL_NVENC3_ERROR",
        "NVENC3 Error",
        ContactSupport,
    ),
    x(
        143,
        "GPU_INIT_ERROR",
        "GPU Initialization Error",
        Bucket::ResetGpu,
    ),
    x(
        144,
        "NVLINK_SAW_ERROR",
        "NVLINK: SAW Error",
        WorkflowNvlink5Err,
    ),
    x(
        145,
        "NVLINK_RLW_ERROR",
        "NVLINK: RLW Error",
        WorkflowNvlink5Err,
    ),
    x(
        146,
        "NVLINK_TLW_ERROR",
        "NVLINK: TLW Error",
        WorkflowNvlink5Err,
    ),
    x(
        147,
        "NVLINK_TREX_ERROR",
        "NVLINK: TREX Error",
        WorkflowNvlink5Err,
    ),
    x(
        148,
        "NVLINK_NVLPW_CTRL_ERROR",
        "NVLINK: NVLPW_CTRL Error",
        WorkflowNvlink5Err,
    ),
    x(
        149,
        "NVLINK_NETIR_ERROR",
        "NVLINK: NETIR Error",
        WorkflowNvlink5Err,
    ),
    x(
        150,
        "NVLINK_MSE_ERROR",
        "NVLINK: MSE Error",
        WorkflowNvlink5Err,
    ),
    x(
        151,
        "ROBUST_CHANNEL_KEY_ROTATION_ERROR",
        "Key rotation Error",
        RestartVm,
    ),
    x(
        152,
        "ROBUST_CHANNEL_DLA_SMMU_ERROR",
        "DLA SMMU Error",
        Ignore,
    ),
    x(
        153,
        "ROBUST_CHANNEL_DLA_TIMEOUT",
        "DLA timeout Error",
        Ignore,
    ),
    x(
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        "GPU Recovery Action Changed",
        Xid154,
    ),
    x(
        155,
        "NVLINK_SW_DEFINED_ERROR",
        "NVLINK: SW Defined Error",
        Bucket::ResetGpu,
    ),
    x(
        156,
        "RESOURCE_RETIREMENT_EVENT",
        "Resource Retirement Event",
        Bucket::ResetGpu,
    ),
    x(
        157,
        "RESOURCE_RETIREMENT_FAILURE",
        "Resource Retirement Failure",
        Ignore,
    ),
    x(
        158,
        "GPU_FATAL_TIMEOUT",
        "GPU Fatal Timeout",
        Bucket::ResetGpu,
    ),
    x(
        159,
        "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        "CHI Non-Data Error",
        CheckUvm,
    ),
    x(
        160,
        "CHANNEL_RETIREMENT_EVENT",
        "Channel Retirement Event",
        Ignore,
    ),
    x(
        161,
        "CHANNEL_RETIREMENT_FAILURE",
        "Channel Retirement Failure",
        Ignore,
    ),
    n(
        162,
        "PSHC_REENGAGED",
        "Power Smoothing HW Circuitry capability reengaged",
        Note,
    ),
    n(
        163,
        "PSHC_DISENGAGED",
        "Power Smoothing HW Circuitry capability disengaged",
        Note,
    ),
    n(
        164,
        "PSHC_LOW_LIFETIME",
        "Power Smoothing HW Circuitry low lifetime reached",
        Note,
    ),
    n(
        165,
        "PSHC_ZERO_LIFETIME",
        "Power Smoothing HW Circuitry lifetime exhausted",
        Investigate,
    ),
    n(
        166,
        "NVLINK_SECURE_CRYPTO_ERR",
        "CC traffic seen prior to link properly being configured for encrypted traffic",
        Investigate,
    ),
    n(167, "PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", Reset),
    n(
        168,
        "REDUCED_GPU_MEMORY_CAPACITY",
        "Errors found in WPR (write protected region)",
        Investigate,
    ),
    n(
        169,
        "SEC2_HALT_ERROR",
        "Internal micro-controller halt",
        Reset,
    ),
    n(
        170,
        "NVLINK_SECURE_OTHER",
        "Interrupt seen in CC mode",
        Investigate,
    ),
    n(
        171,
        "UNCORRECTABLE_DRAM_ERROR",
        "Details of an Xid 48 (DRAM)",
        Note,
    ),
    n(
        172,
        "UNCORRECTABLE_SRAM_ERROR",
        "Details of an Xid 48 (SRAM)",
        Note,
    ),
];

/// The catalog entry of an Xid code, if the catalog lists it.
pub fn xid_info(code: u32) -> Option<&'static XidInfo> {
    XID_CATALOG.iter().find(|e| e.code == code)
}

/// The class of one Xid once its message and the other codes logged for
/// the same GPU are known: Xid 45 with another Xid follows that one
/// ("Not Solo: IGNORE"), an NVLink5 Xid (144-150) that says it is
/// non-fatal is ignored, Xid 154 means the recovery action it names.
pub fn judged_action(info: &XidInfo, detail: &str, others_on_gpu: &[u32]) -> XidAction {
    match info.bucket {
        WorkflowXid45 if others_on_gpu.iter().any(|&c| c != 45) => XidAction::Note,
        WorkflowNvlink5Err if says_nonfatal(detail) => XidAction::Note,
        Xid154 => match recovery_action(detail) {
            Some(a) if a.contains("Reboot") => XidAction::RebootNode,
            Some(a) if a.contains("Reset") || a.contains("Drain") => XidAction::ResetGpu,
            _ => XidAction::Note,
        },
        _ => info.action,
    }
}

/// "NETIR_LINK_EVT  Nonfatal  XC0 ..." (the severity word after the
/// sub-component of an NVLink5 Xid).
fn says_nonfatal(detail: &str) -> bool {
    detail
        .split_whitespace()
        .take(3)
        .any(|w| w.eq_ignore_ascii_case("nonfatal") || w.eq_ignore_ascii_case("non-fatal"))
}

/// "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
/// Required)" -> "GPU Reset Required".
pub fn recovery_action(detail: &str) -> Option<&str> {
    let to = &detail[detail.rfind(" to ")? + 4..];
    let inner = to.split_once('(')?.1;
    Some(inner.split_once(')')?.0.trim())
}

/// A PCI address as the NVIDIA driver logs it, reduced to domain, bus and
/// device ("0000:3b:00", "PCI:0000:3B:00", NVML's "00000000:3B:00.0" all
/// name the same GPU).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct PciSlot {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
}

impl PciSlot {
    /// Parse "[PCI:]DOMAIN:BUS:DEVICE[.FUNCTION]" (hex, any case). `None`
    /// for anything else.
    pub fn parse(text: &str) -> Option<PciSlot> {
        let t = text.trim();
        let t = t.strip_prefix("PCI:").unwrap_or(t);
        let t = t.split('.').next().unwrap_or(t);
        let mut parts = t.split(':');
        let (d, b, v) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || [d, b, v].iter().any(|p| p.is_empty() || p.len() > 8) {
            return None;
        }
        Some(PciSlot {
            domain: u32::from_str_radix(d, 16).ok()?,
            bus: u8::from_str_radix(b, 16).ok()?,
            device: u8::from_str_radix(v, 16).ok()?,
        })
    }
}

impl std::fmt::Display for PciSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}",
            self.domain, self.bus, self.device
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use XidAction as A;

    /// The codes and immediate actions of NVIDIA's catalog ("XIDs" sheet),
    /// written out once more by hand from the page so a slip in the table
    /// shows: (first code, last code, bucket) runs.
    const CATALOG_RUNS: &[(u32, u32, &str)] = &[
        (1, 7, "CONTACT_SUPPORT"),
        (8, 8, "RESTART_APP"),
        (9, 10, "CONTACT_SUPPORT"),
        (11, 11, "RESTART_APP"),
        (12, 12, "CONTACT_SUPPORT"),
        (13, 13, "RESTART_APP"),
        (14, 14, "IGNORE"),
        (15, 24, "CONTACT_SUPPORT"),
        (25, 25, "RESTART_APP"),
        (26, 30, "CONTACT_SUPPORT"),
        (31, 32, "RESTART_APP"),
        (33, 36, "CONTACT_SUPPORT"),
        (37, 38, "IGNORE"),
        (39, 41, "RESTART_APP"),
        (42, 42, "CONTACT_SUPPORT"),
        (43, 44, "IGNORE"),
        (45, 45, "WORKFLOW_XID_45"),
        (46, 46, "RESET_GPU"),
        (47, 47, "CONTACT_SUPPORT"),
        (48, 48, "WORKFLOW_XID_48"),
        (49, 53, "CONTACT_SUPPORT"),
        (54, 54, "CHECK_MECHANICALS"),
        (55, 59, "CONTACT_SUPPORT"),
        (60, 60, "RESTART_APP"),
        (61, 61, "CONTACT_SUPPORT"),
        (62, 62, "RESET_GPU"),
        (63, 63, "IGNORE"),
        (64, 64, "RESET_GPU"),
        (65, 65, "CONTACT_SUPPORT"),
        (66, 67, "IGNORE"),
        (68, 72, "RESTART_APP"),
        (73, 73, "CONTACT_SUPPORT"),
        (74, 74, "WORKFLOW_NVLINK_ERR"),
        (75, 77, "RESTART_APP"),
        (78, 78, "UPDATE_SWFW"),
        (79, 79, "RESTART_BM"),
        (80, 80, "RESTART_APP"),
        (81, 81, "CONTACT_SUPPORT"),
        (82, 86, "RESTART_APP"),
        (87, 87, "CONTACT_SUPPORT"),
        (88, 89, "RESTART_APP"),
        (90, 91, "CONTACT_SUPPORT"),
        (92, 93, "IGNORE"),
        (94, 94, "RESTART_APP"),
        (95, 95, "RESET_GPU"),
        (96, 105, "RESTART_APP"),
        (106, 108, "IGNORE"),
        (109, 110, "RESET_GPU"),
        (111, 118, "CONTACT_SUPPORT"),
        (119, 120, "RESET_GPU"),
        (121, 121, "IGNORE"),
        (122, 125, "CONTACT_SUPPORT"),
        (126, 135, "RESTART_APP"),
        (136, 136, "RESET_GPU"),
        (137, 137, "IGNORE"),
        (138, 138, "CONTACT_SUPPORT"),
        (139, 139, "RESTART_APP"),
        (140, 140, "RESET_GPU"),
        (141, 141, "IGNORE"),
        (142, 142, "CONTACT_SUPPORT"),
        (143, 143, "RESET_GPU"),
        (144, 150, "WORKFLOW_NVLINK5_ERR"),
        (151, 151, "RESTART_VM"),
        (152, 153, "IGNORE"),
        (154, 154, "XID_154"),
        (155, 156, "RESET_GPU"),
        (157, 157, "IGNORE"),
        (158, 158, "RESET_GPU"),
        (159, 159, "CHECK_UVM"),
        (160, 161, "IGNORE"),
        (162, 172, "none given"),
    ];

    #[test]
    fn every_catalog_code_is_listed_with_its_immediate_action() {
        let mut expected = 0;
        for &(first, last, bucket) in CATALOG_RUNS {
            for code in first..=last {
                let info = xid_info(code).unwrap_or_else(|| panic!("Xid {code} missing"));
                assert_eq!(info.bucket.name(), bucket, "Xid {code}");
                expected += 1;
            }
        }
        assert_eq!(XID_CATALOG.len(), expected);
        assert_eq!(xid_info(0), None);
        assert_eq!(xid_info(173), None);
    }

    #[test]
    fn the_class_follows_the_immediate_action() {
        for (code, class) in [
            (109, A::ResetGpu),
            (43, A::Note),
            (13, A::RestartApp),
            (31, A::RestartApp),
            (94, A::RestartApp),
            (48, A::ResetGpu),
            (74, A::ResetGpu),
            (95, A::ResetGpu),
            (119, A::ResetGpu),
            (155, A::ResetGpu),
            (79, A::RebootNode),
            (151, A::RebootNode),
            (54, A::Service),
            (3, A::Investigate),
            (63, A::Note),
            (92, A::Note),
        ] {
            assert_eq!(xid_info(code).map(|e| e.action), Some(class), "Xid {code}");
        }
    }

    #[test]
    fn xid_45_with_another_xid_follows_that_one() {
        let info = xid_info(45).expect("45");
        assert_eq!(judged_action(info, "", &[]), A::RestartApp);
        assert_eq!(judged_action(info, "", &[45, 62]), A::Note);
    }

    #[test]
    fn xid_154_means_the_recovery_action_it_names() {
        let info = xid_info(154).expect("154");
        let said = |to: &str| {
            judged_action(
                info,
                &format!("GPU recovery action changed from 0x0 (None) to {to}"),
                &[],
            )
        };
        assert_eq!(said("0x1 (GPU Reset Required)"), A::ResetGpu);
        assert_eq!(said("0x4 (Drain and Reset)"), A::ResetGpu);
        assert_eq!(said("0x2 (Node Reboot Required)"), A::RebootNode);
        assert_eq!(said("0x0 (None)"), A::Note);
        assert_eq!(judged_action(info, "garbage", &[]), A::Note);
    }

    #[test]
    fn an_nvlink5_xid_that_says_nonfatal_is_ignored() {
        let info = xid_info(149).expect("149");
        assert_eq!(
            judged_action(info, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x0)", &[]),
            A::ResetGpu
        );
        assert_eq!(
            judged_action(info, "NETIR_BER_EVENT  Nonfatal  XC0 i0 Link 01 (0x0)", &[]),
            A::Note
        );
    }

    #[test]
    fn log_and_nvml_addresses_name_the_same_slot() {
        let log = PciSlot::parse("PCI:0000:3b:00");
        assert_eq!(log, PciSlot::parse("0000:3B:00"));
        assert_eq!(log, PciSlot::parse("00000000:3B:00.0"));
        assert_eq!(log.map(|s| s.to_string()).as_deref(), Some("0000:3b:00"));
    }

    #[test]
    fn garbage_is_no_slot() {
        for bad in [
            "",
            "PCI:",
            "0000:3b",
            "zz:3b:00",
            "0000:3b:00:01",
            "0000:1ff:00",
        ] {
            assert_eq!(PciSlot::parse(bad), None, "{bad}");
        }
    }
}

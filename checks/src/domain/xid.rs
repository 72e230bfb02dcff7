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
//! Where gpucheck departs from the immediate-action bucket, on purpose:
//! 43 (bucket IGNORE: "the GPU remains in a healthy state") and 45
//! (WORKFLOW_XID_45: IGNORE unless alone) still end the job that hit them,
//! so they warn (RestartApp) rather than pass; 155 (NVLINK_SW_DEFINED_ERROR,
//! Blackwell) is left out because the catalog's trigger includes intentional
//! link sleep transitions, which a healthy idle GPU logs.

/// What the catalog says must happen after an Xid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum XidAction {
    /// Informational: a recorded event, nothing to do now (63: a row was
    /// remapped; 92: a high single-bit ECC rate).
    Note,
    /// The job that hit it ended (or will), the GPU itself is fine:
    /// restart the application (RESTART_APP).
    RestartApp,
    /// The GPU must be reset before it is trusted again (RESET_GPU); drain
    /// the node when that is not possible while jobs run.
    ResetGpu,
    /// Only a node reboot brings the GPU back (RESTART_BM), often not even
    /// that: drain the node.
    RebootNode,
}

/// One catalog entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidInfo {
    pub code: u32,
    /// NVIDIA's short description.
    pub meaning: &'static str,
    pub action: XidAction,
}

const fn x(code: u32, meaning: &'static str, action: XidAction) -> XidInfo {
    XidInfo {
        code,
        meaning,
        action,
    }
}

use XidAction::{Note, RebootNode, ResetGpu, RestartApp};

/// The codes a training node meets, from NVIDIA's Xid catalog (Ampere and
/// newer, with the long-standing codes of older GPUs).
pub const XID_CATALOG: &[XidInfo] = &[
    x(8, "GPU stopped processing (idle timeout)", RestartApp),
    x(13, "graphics engine exception", RestartApp),
    x(31, "GPU memory page fault", RestartApp),
    x(32, "invalid or corrupted push buffer stream", RestartApp),
    // FECS watchdog timeout; bucket IGNORE (NVIDIA software/firmware).
    x(38, "driver firmware error", Note),
    x(
        43,
        "GPU stopped processing (the application hit a fault and was stopped)",
        RestartApp,
    ),
    x(45, "preemptive cleanup after an earlier error", RestartApp),
    x(46, "GPU stopped processing", ResetGpu),
    x(48, "double-bit ECC error", ResetGpu),
    x(61, "internal micro-controller breakpoint", ResetGpu),
    x(62, "internal micro-controller halt", ResetGpu),
    x(63, "ECC page retirement or row remapping recorded", Note),
    x(64, "ECC page retirement or row remapping failed", ResetGpu),
    x(68, "video decoder exception", RestartApp),
    x(69, "graphics engine class error", RestartApp),
    x(74, "NVLink error", ResetGpu),
    x(79, "GPU has fallen off the bus", RebootNode),
    x(92, "high single-bit ECC error rate", Note),
    x(93, "InfoROM wear limit exceeded (non-fatal)", Note),
    x(94, "contained memory (ECC) error", RestartApp),
    x(95, "uncontained memory (ECC) error", ResetGpu),
    x(109, "context switch timeout", RestartApp),
    x(119, "GSP RPC timeout", ResetGpu),
    x(120, "GSP error", ResetGpu),
    x(121, "C2C link error", Note),
    x(
        140,
        "unrecovered ECC error (escaped page offlining and row remapping)",
        ResetGpu,
    ),
    x(143, "GPU initialization failure", ResetGpu),
    x(144, "NVLink SAW error", ResetGpu),
    x(145, "NVLink RLW error", ResetGpu),
    x(146, "NVLink TLW error", ResetGpu),
    x(147, "NVLink TREX error", ResetGpu),
    x(148, "NVLink NVLPW control error", ResetGpu),
    x(149, "NVLink NETIR error", ResetGpu),
    x(150, "NVLink MSE error", ResetGpu),
    // Informational: it states the recovery action of the Xid it comes
    // with ("None" ... "Node Reboot Required"), which is judged on its own.
    x(
        154,
        "GPU recovery action changed (see the Xid it accompanies)",
        Note,
    ),
    x(156, "resource retirement event", ResetGpu),
    x(157, "resource retirement failure", Note),
];

/// The catalog entry of an Xid code, if gpucheck knows it.
pub fn xid_info(code: u32) -> Option<&'static XidInfo> {
    XID_CATALOG.iter().find(|e| e.code == code)
}

/// A PCI address as the NVIDIA driver logs it, reduced to domain, bus and
/// device ("0000:3b:00", "PCI:0000:3B:00", NVML's "00000000:3B:00.0" all
/// name the same GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

    #[test]
    fn the_codes_named_by_nvidia_have_their_action() {
        for code in [48, 64, 74, 95, 119, 120] {
            assert_eq!(xid_info(code).map(|e| e.action), Some(ResetGpu), "{code}");
        }
        assert_eq!(xid_info(79).map(|e| e.action), Some(RebootNode));
        for code in [13, 31, 43, 45, 94] {
            assert_eq!(xid_info(code).map(|e| e.action), Some(RestartApp), "{code}");
        }
        for code in [63, 92] {
            assert_eq!(xid_info(code).map(|e| e.action), Some(Note), "{code}");
        }
        assert_eq!(xid_info(9999), None);
    }

    #[test]
    fn immediate_actions_follow_nvidias_catalog() {
        // RESET_GPU (or "a GPU reset or node reboot is needed") in the catalog.
        for code in [46, 62, 140, 156] {
            assert_eq!(xid_info(code).map(|e| e.action), Some(ResetGpu), "{code}");
        }
        // IGNORE, or informational about another Xid.
        for code in [38, 93, 121, 154, 157] {
            assert_eq!(xid_info(code).map(|e| e.action), Some(Note), "{code}");
        }
        // Intentional NVLink sleep raises it on healthy Blackwell GPUs.
        assert_eq!(xid_info(155), None);
    }

    #[test]
    fn catalog_codes_are_unique() {
        let mut codes: Vec<u32> = XID_CATALOG.iter().map(|e| e.code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), XID_CATALOG.len());
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

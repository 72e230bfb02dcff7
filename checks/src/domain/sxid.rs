//! NVSwitch SXid errors ("Switch Xids"): how the NVSwitch driver writes one
//! into the kernel log, and the Fabric Manager user guide's tables of them.
//! Pure knowledge; the `fabric.xid` check judges with it.
//!
//! The driver writes each error as a few lines with the same number:
//!
//! ```text
//! nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up
//! nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine instance 00
//! nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, ...}
//! ```
//!
//! Only the first kind says whether the error is `Fatal` or `Non-fatal`;
//! that word is what gpucheck judges by, and the one line per error it
//! counts (the "Severity" and "Data" lines repeat it). The number adds a
//! name from the guide where the guide lists it.
//!
//! Source: NVIDIA, "Fabric Manager User Guide" (DU-09883-001 v1.3, October
//! 2023, https://docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf),
//! appendix "NVSwitch SXid errors": the tables "Non-Fatal NVSwitch SXid
//! Errors", "Fatal NVSwitch SXid Errors" and "Always Fatal NVSwitch SXid
//! Errors" (names as transcribed in leptonai/gpud's SXid catalog, Apache
//! 2.0). A fatal SXid leaves the switch port (or the whole fabric, for an
//! always-fatal one) unusable until the system is restarted, which resets
//! the switch; NVLink traffic through it stalls and CUDA jobs end with
//! Xid 45. A non-fatal one needs nothing (single-bit ECC errors the switch
//! corrects, link replays). NVIDIA's Xid documentation notes SXids apply to
//! Hopper and earlier switch generations.

/// What the driver's line says of the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SxidSeverity {
    NonFatal,
    Fatal,
}

/// The guide's table a known SXid number is listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SxidTable {
    NonFatal,
    /// Fatal to the port: restart to bring the switch port back.
    Fatal,
    /// Fatal to the whole fabric: the host must be restarted.
    AlwaysFatal,
}

/// One SXid number the guide lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SxidInfo {
    pub code: u32,
    pub name: &'static str,
    pub table: SxidTable,
}

const fn entry(code: u32, name: &'static str, table: SxidTable) -> SxidInfo {
    SxidInfo { code, name, table }
}

use SxidTable::{AlwaysFatal, Fatal, NonFatal};

/// The SXid numbers the Fabric Manager guide names (DU-09883-001 v1.3).
pub const SXID_CATALOG: &[SxidInfo] = &[
    entry(11004, "ingress invalid ACL", NonFatal),
    entry(11012, "single-bit ECC error", NonFatal),
    entry(11021, "single-bit ECC error", NonFatal),
    entry(11022, "single-bit ECC error", NonFatal),
    entry(11023, "single-bit ECC error", NonFatal),
    entry(12021, "single-bit ECC error", NonFatal),
    entry(12023, "single-bit ECC error", NonFatal),
    entry(12028, "egress non-posted PRIV error", NonFatal),
    entry(15008, "single-bit ECC error", NonFatal),
    entry(15011, "single-bit ECC error", NonFatal),
    entry(19049, "single-bit ECC error", NonFatal),
    entry(19084, "AN1 heartbeat timeout error", NonFatal),
    entry(20001, "TX replay error", NonFatal),
    entry(20012, "broken or inconsistent connection", NonFatal),
    entry(22013, "Minion link DLREQ interrupt", NonFatal),
    entry(24001, "single-bit ECC error", NonFatal),
    entry(11001, "ingress invalid command", Fatal),
    entry(11009, "ingress invalid VCSet", Fatal),
    entry(11013, "ingress header DBE", Fatal),
    entry(12001, "egress crossbar overflow", Fatal),
    entry(12002, "egress packet route", Fatal),
    entry(12022, "egress input ECC DBE error", Fatal),
    entry(12024, "egress output ECC DBE error", Fatal),
    entry(14017, "TS ATO timeout", Fatal),
    entry(15001, "route buffer over/underflow", Fatal),
    entry(19047, "NCISOC HDR ECC DBE error", Fatal),
    entry(
        20034,
        "LTSSM fault up: the link went down from active",
        Fatal,
    ),
    entry(22012, "Minion link NA interrupt", Fatal),
    entry(24007, "sourcetrack timeout error", Fatal),
    entry(12020, "egress sequence ID error", AlwaysFatal),
    entry(22003, "Minion halt", AlwaysFatal),
    entry(22011, "Minion exterror", AlwaysFatal),
    entry(23001, "ingress SRC-VC buffer overflow", AlwaysFatal),
    entry(23002, "ingress SRC-VC buffer underflow", AlwaysFatal),
    entry(23003, "egress DST-VC credit overflow", AlwaysFatal),
    entry(23004, "egress DST-VC credit underflow", AlwaysFatal),
];

/// The guide's entry for an SXid number, if it lists one.
pub fn sxid_info(code: u32) -> Option<&'static SxidInfo> {
    SXID_CATALOG.iter().find(|i| i.code == code)
}

/// One SXid line that says its severity, taken apart.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sxid {
    /// The switch's device name: "nvidia-nvswitch3".
    pub switch: String,
    /// The switch's PCI address as logged: "0000:c5:00.0".
    pub pci: String,
    pub code: u32,
    pub severity: SxidSeverity,
    /// The switch port ("Link 41"), when the line names one.
    pub link: Option<u32>,
    /// The driver's words after the severity and link.
    pub detail: String,
}

/// The SXid a kernel message reports, if it is a line that says its
/// severity: "nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 12028, Non-fatal,
/// Link 41 egress non-posted PRIV error (First)". The driver's "Severity
/// N ..." and "Data {...}" lines for the same error are no SXid here.
pub fn sxid_in(message: &str) -> Option<Sxid> {
    let at = message.find("nvidia-nvswitch")?;
    let (switch, rest) = message[at..].split_once(':')?;
    let index = &switch["nvidia-nvswitch".len()..];
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let rest = rest.trim_start().strip_prefix("SXid (")?;
    let (address, rest) = rest.split_once(')')?;
    let pci = address.strip_prefix("PCI:").unwrap_or(address).trim();
    let rest = rest.strip_prefix(':')?.trim_start();
    let (code, rest) = rest.split_once(',')?;
    let code = code.trim().parse().ok()?;
    let (word, rest) = rest.split_once(',').unwrap_or((rest, ""));
    let severity = match word.trim() {
        w if w.eq_ignore_ascii_case("fatal") => SxidSeverity::Fatal,
        w if w.eq_ignore_ascii_case("non-fatal") => SxidSeverity::NonFatal,
        _ => return None,
    };
    let (link, detail) = link_of(rest.trim());
    Some(Sxid {
        switch: switch.to_string(),
        pci: pci.to_string(),
        code,
        severity,
        link,
        detail: detail.to_string(),
    })
}

/// "Link 41 egress ..." -> (Some(41), "egress ..."); else (None, all).
fn link_of(rest: &str) -> (Option<u32>, &str) {
    let Some(after) = rest.strip_prefix("Link ") else {
        return (None, rest);
    };
    let (number, detail) = after.split_once(' ').unwrap_or((after, ""));
    match number.parse() {
        Ok(link) => (Some(link), detail.trim()),
        Err(_) => (None, rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fatal_line_gives_switch_address_code_link_and_words() {
        let s = sxid_in(
            "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
        )
        .expect("fatal line");
        assert_eq!(
            s,
            Sxid {
                switch: "nvidia-nvswitch0".into(),
                pci: "0000:07:00.0".into(),
                code: 20034,
                severity: SxidSeverity::Fatal,
                link: Some(30),
                detail: "LTSSM Fault Up".into(),
            }
        );
    }

    #[test]
    fn a_non_fatal_line_with_or_without_a_link_parses() {
        let s = sxid_in(
            "nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 12028, Non-fatal, Link 41 egress \
             non-posted PRIV error (First)",
        )
        .expect("non-fatal line");
        assert_eq!(
            (s.severity, s.link, s.detail.as_str()),
            (
                SxidSeverity::NonFatal,
                Some(41),
                "egress non-posted PRIV error (First)"
            )
        );
        let old = sxid_in(
            "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 10001, Non-fatal, PRI WRITE SYSB \
             error, instance=3",
        )
        .expect("no link");
        assert_eq!(
            (old.link, old.detail.as_str()),
            (None, "PRI WRITE SYSB error, instance=3")
        );
    }

    #[test]
    fn the_severity_and_data_lines_of_the_same_error_are_no_sxid() {
        for line in [
            "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 \
             Sub-engine instance 00",
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000}",
            "nvidia-nvswitch0: SXid (PCI:0004:00:00.0): 26006, SOE HALTED",
            "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Li",
        ] {
            let parsed = sxid_in(line);
            let kept = line.ends_with("Li");
            assert_eq!(parsed.is_some(), kept, "{line}");
        }
    }

    #[test]
    fn garbage_is_no_sxid_and_no_panic() {
        for bad in [
            "",
            "nvidia-nvswitch2: open (major=510)",
            "nvidia-nvswitch: SXid (PCI:0000:07:00.0): 1, Fatal",
            "nvidia-nvswitchX: SXid (PCI:0000:07:00.0): 1, Fatal",
            "nvidia-nvswitch0: SXid (PCI:0000:07:00.0",
            "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): x, Fatal",
            "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 20034",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
            "nvidia-nvswitch0: SXid (é): 1, ü",
        ] {
            assert_eq!(sxid_in(bad), None, "{bad:?}");
        }
        let line = "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 3é0 x";
        for (cut, _) in line.char_indices() {
            let _ = sxid_in(&line[..cut]);
            let _ = sxid_in(&line[cut..]);
        }
    }

    #[test]
    fn the_catalog_names_known_numbers_once() {
        assert_eq!(sxid_info(20034).map(|i| i.table), Some(SxidTable::Fatal));
        assert_eq!(sxid_info(22013).map(|i| i.table), Some(SxidTable::NonFatal));
        assert_eq!(
            sxid_info(12020).map(|i| i.table),
            Some(SxidTable::AlwaysFatal)
        );
        assert_eq!(sxid_info(1), None);
        let mut codes: Vec<u32> = SXID_CATALOG.iter().map(|i| i.code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), SXID_CATALOG.len());
    }
}

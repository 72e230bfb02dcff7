//! Probe: NVIDIA Xid events in the kernel log since boot. Reads the kernel's
//! ring buffer (/dev/kmsg) when this user may, else the journal
//! (`journalctl -k -b`), else the syslog files; or the file the user named
//! (`--kernel-log`). Lines are parsed here into [`XidEvent`]s; the
//! `fabric.xid` check judges them.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::domain::xid::PciSlot;

/// Where the events were read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSource {
    Kmsg,
    Journal,
    File(PathBuf),
}

impl std::fmt::Display for LogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogSource::Kmsg => f.write_str("/dev/kmsg"),
            LogSource::Journal => f.write_str("journalctl -k -b"),
            LogSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One Xid (or "fallen off the bus") line of the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidEvent {
    pub slot: PciSlot,
    pub code: u32,
    /// False for a "GPU has fallen off the bus" line without an Xid number
    /// (counted as Xid 79, which is what it means).
    pub logged_as_xid: bool,
    /// When, as the log says it: "Dec  1 10:02:03", or "412.5 s after boot".
    pub when: String,
    /// The driver's words after the code ("pid=..., GPU has fallen off the bus.").
    pub detail: String,
}

/// What the kernel log holds for this boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLog {
    pub source: LogSource,
    pub events: Vec<XidEvent>,
    /// Xid events a file still held from earlier boots, left out.
    pub earlier_boots: usize,
}

/// No log could be read; each attempt with why it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub tried: Vec<String>,
    /// True when the user named the file (`--kernel-log`).
    pub given: bool,
}

/// Syslog files tried when neither /dev/kmsg nor the journal answers.
const SYSLOG_FILES: &[&str] = &["/var/log/kern.log", "/var/log/syslog", "/var/log/messages"];

/// The most of a log file read (its end): a busy host's kern.log reaches
/// gigabytes, and the current boot is at the end.
const MAX_LOG_BYTES: u64 = 64 << 20;

/// One read() of /dev/kmsg returns one record; the kernel's limit is 8 KiB
/// (CONSOLE_EXT_LOG_MAX), a smaller buffer fails with EINVAL.
const KMSG_RECORD_MAX: usize = 16 << 10;

/// The Xid events of this boot from the first source that can be read.
pub fn read_kernel_log(
    given: Option<&Path>,
    boot_epoch: Option<i64>,
    timeout: Duration,
) -> Result<KernelLog, Unreadable> {
    if let Some(path) = given {
        return read_file(path, boot_epoch).map_err(|e| Unreadable {
            tried: vec![format!("{}: {e}", path.display())],
            given: true,
        });
    }
    let mut tried = Vec::new();
    match read_kmsg(Path::new("/dev/kmsg")) {
        Ok(events) => return Ok(this_boot(LogSource::Kmsg, events)),
        Err(e) => tried.push(format!("/dev/kmsg: {e}")),
    }
    match read_journal(timeout) {
        Ok(text) => {
            let (events, _) = parse_log(&text, None);
            return Ok(this_boot(LogSource::Journal, events));
        }
        Err(e) => tried.push(format!("journalctl: {e}")),
    }
    for f in SYSLOG_FILES {
        match read_file(Path::new(f), boot_epoch) {
            Ok(log) => return Ok(log),
            Err(e) => tried.push(format!("{f}: {e}")),
        }
    }
    Err(Unreadable {
        tried,
        given: false,
    })
}

fn this_boot(source: LogSource, events: Vec<XidEvent>) -> KernelLog {
    KernelLog {
        source,
        events,
        earlier_boots: 0,
    }
}

/// Read a syslog, journal or dmesg dump, keeping only this boot's events.
pub fn read_file(path: &Path, boot_epoch: Option<i64>) -> io::Result<KernelLog> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let skipped = len > MAX_LOG_BYTES;
    if skipped {
        file.seek(SeekFrom::Start(len - MAX_LOG_BYTES))?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if skipped {
        // The first line was cut in the middle.
        text = text
            .split_once('\n')
            .map(|(_, r)| r.to_string())
            .unwrap_or_default();
    }
    let (events, earlier_boots) = parse_log(&text, boot_epoch);
    Ok(KernelLog {
        source: LogSource::File(path.to_path_buf()),
        events,
        earlier_boots,
    })
}

/// Read the kernel ring buffer without blocking: one record per read, until
/// EAGAIN. Needs CAP_SYSLOG where kernel.dmesg_restrict=1.
pub fn read_kmsg(path: &Path) -> io::Result<Vec<XidEvent>> {
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut buf = vec![0u8; KMSG_RECORD_MAX];
    let mut events = Vec::new();
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                if let Some(event) = parse_kmsg_record(&record) {
                    add_event(&mut events, event);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            // EPIPE: the record was overwritten while we read; go on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(events)
}

/// `journalctl -k -b -o short-monotonic`, bounded by `timeout`. An answer
/// without a single kernel line means this user may not read the system
/// journal (it then shows only the user's own), not a quiet kernel.
fn read_journal(timeout: Duration) -> Result<String, String> {
    let path = std::env::var_os("PATH");
    let Some(journalctl) = super::python::which("journalctl", path.as_ref()) else {
        return Err("not installed".into());
    };
    let mut cmd = Command::new(journalctl);
    cmd.args(["-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"]);
    let out = super::process::run_bounded(cmd, timeout).map_err(|e| e.to_string())?;
    if out.code != Some(0) {
        let why = out.stderr.lines().next().unwrap_or("").trim().to_string();
        return Err(format!("exit status {:?}: {why}", out.code));
    }
    if !out.stdout.lines().any(|l| l.starts_with('[')) {
        return Err("no kernel messages for this boot (this user may not read the system journal: groups adm or systemd-journal)".into());
    }
    Ok(out.stdout)
}

/// One /dev/kmsg record: "PRI,SEQ,USEC,FLAGS[,...];MESSAGE\n KEY=VALUE...".
pub fn parse_kmsg_record(record: &str) -> Option<XidEvent> {
    let (header, rest) = record.split_once(';')?;
    let usec: u64 = header.split(',').nth(2)?.parse().ok()?;
    let message = rest.lines().next()?;
    xid_in(message, after_boot(usec as f64 / 1e6))
}

fn after_boot(secs: f64) -> String {
    format!("{secs:.1} s after boot")
}

/// One line of a log file, taken apart.
struct LogLine<'a> {
    when: String,
    /// Seconds since the epoch, when the line carries a full date.
    epoch: Option<i64>,
    message: &'a str,
}

/// Parse a log: syslog lines ("Dec  1 10:02:03 host kernel: ..." or
/// RFC 3339 "2026-12-01T10:02:03.5+00:00 host kernel: ..."), `dmesg` and
/// `journalctl -o short-monotonic` lines ("[  412.5] ..."), or /dev/kmsg
/// records. Returns this boot's events and how many earlier ones were cut:
/// the boot is the last kernel banner ("Linux version", "Command line:"),
/// and a dated line before `boot_epoch` belongs to an earlier boot.
pub fn parse_log(text: &str, boot_epoch: Option<i64>) -> (Vec<XidEvent>, usize) {
    let mut events: Vec<XidEvent> = Vec::new();
    let mut earlier = 0;
    for raw in text.lines() {
        let Some(line) = split_line(raw) else {
            continue;
        };
        let before_boot = matches!((line.epoch, boot_epoch), (Some(t), Some(b)) if t < b - 1);
        if is_boot_banner(line.message) {
            earlier += events.len();
            events.clear();
            continue;
        }
        if let Some(event) = xid_in(line.message, line.when) {
            if before_boot {
                earlier += 1;
            } else {
                add_event(&mut events, event);
            }
        }
    }
    (events, earlier)
}

/// Add an event, counting one fall off the bus once: the driver logs
/// "Xid 79" and "GPU ... has fallen off the bus" for the same event.
fn add_event(events: &mut Vec<XidEvent>, event: XidEvent) {
    let same_fall = |a: &XidEvent, b: &XidEvent| a.slot == b.slot && a.code == 79 && b.code == 79;
    if !event.logged_as_xid
        && events
            .iter()
            .any(|e| e.logged_as_xid && same_fall(e, &event))
    {
        return;
    }
    if event.logged_as_xid {
        events.retain(|e| e.logged_as_xid || !same_fall(e, &event));
    }
    events.push(event);
}

fn is_boot_banner(message: &str) -> bool {
    message.starts_with("Linux version ") || message.starts_with("Command line:")
}

/// Take the time stamps off a line, down to the kernel's message.
fn split_line(raw: &str) -> Option<LogLine<'_>> {
    let raw = raw.trim_end();
    if let Some(event_line) = kmsg_line(raw) {
        return Some(event_line);
    }
    let (when, epoch, rest) = if let Some((stamp, rest)) = bsd_stamp(raw) {
        (Some(squeeze(stamp)), None, rest)
    } else if let Some((stamp, epoch, rest)) = rfc3339_stamp(raw) {
        (Some(stamp.to_string()), epoch, rest)
    } else {
        (None, None, raw)
    };
    // "host kernel: [ 412.5] NVRM: ..." (syslog) or "[ 412.5] host
    // kernel: NVRM: ..." (journalctl -o short-monotonic).
    let (mono, message) = monotonic_stamp(strip_host_kernel(rest));
    let message = strip_host_kernel(message);
    let when = when
        .or(mono.map(after_boot))
        .unwrap_or_else(|| "time not logged".into());
    Some(LogLine {
        when,
        epoch,
        message,
    })
}

/// A /dev/kmsg record saved as a line ("6,1234,412500000,-;NVRM: ...").
fn kmsg_line(raw: &str) -> Option<LogLine<'_>> {
    let (header, message) = raw.split_once(';')?;
    let fields: Vec<&str> = header.split(',').collect();
    if fields.len() < 4
        || !fields[..3]
            .iter()
            .all(|f| f.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let usec: u64 = fields[2].parse().ok()?;
    Some(LogLine {
        when: after_boot(usec as f64 / 1e6),
        epoch: None,
        message,
    })
}

/// "Dec  1 10:02:03 rest" (RFC 3164: no year, local time).
fn bsd_stamp(raw: &str) -> Option<(&str, &str)> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let stamp = raw.get(..15)?;
    let b = stamp.as_bytes();
    let month = stamp.get(..3)?;
    let ok = MONTHS.contains(&month) && b[3] == b' ' && b[9] == b':' && b[12] == b':';
    ok.then(|| (stamp, raw[15..].trim_start()))
}

/// "2026-12-01T10:02:03.123456+00:00 rest" (RFC 3339, rsyslog's
/// high-precision format and `journalctl -o short-iso`).
fn rfc3339_stamp(raw: &str) -> Option<(&str, Option<i64>, &str)> {
    let (stamp, rest) = raw.split_once(' ')?;
    let b = stamp.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    Some((stamp, rfc3339_epoch(stamp), rest))
}

/// Seconds since the epoch of an RFC 3339 time stamp (offset applied).
fn rfc3339_epoch(stamp: &str) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| stamp.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let tail = &stamp[19..];
    let zone = tail.trim_start_matches(|c: char| c == '.' || c.is_ascii_digit());
    let offset = match zone {
        "Z" | "" => 0,
        z if z.len() == 6 && (z.starts_with('+') || z.starts_with('-')) => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let hours: i64 = z.get(1..3)?.parse().ok()?;
            let mins: i64 = z.get(4..6)?.parse().ok()?;
            sign * (hours * 3600 + mins * 60)
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// "[  412.500000] message" -> (412.5, "message").
fn monotonic_stamp(rest: &str) -> (Option<f64>, &str) {
    let Some(inner) = rest.strip_prefix('[') else {
        return (None, rest);
    };
    match inner.split_once(']') {
        Some((num, message)) => match num.trim().parse::<f64>() {
            Ok(secs) if secs.is_finite() => (Some(secs), message.trim_start()),
            _ => (None, rest),
        },
        None => (None, rest),
    }
}

/// "gpu07 kernel: message" -> "message".
fn strip_host_kernel(s: &str) -> &str {
    match s.split_once(" kernel: ") {
        Some((host, message)) if !host.contains(' ') => message,
        _ => s,
    }
}

fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The Xid event a kernel message reports, if it is one:
/// "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.",
/// the older "NVRM: Xid (0000:3b:00): 13, ...", or
/// "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus." (counted as 79).
pub fn xid_in(message: &str, when: String) -> Option<XidEvent> {
    let nvrm = &message[message.find("NVRM:")? + "NVRM:".len()..];
    if let Some(i) = nvrm.find("Xid (") {
        let after = &nvrm[i + "Xid (".len()..];
        let (address, rest) = after.split_once(')')?;
        let slot = PciSlot::parse(address)?;
        let rest = rest.trim_start_matches(':').trim_start();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let code = digits.parse().ok()?;
        let detail = rest[digits.len()..]
            .trim_start_matches(',')
            .trim()
            .to_string();
        return Some(XidEvent {
            slot,
            code,
            logged_as_xid: true,
            when,
            detail,
        });
    }
    if !nvrm.contains("fallen off the bus") {
        return None;
    }
    let slot = nvrm
        .split_whitespace()
        .find_map(|w| PciSlot::parse(w.trim_end_matches([':', ',', ';'])))?;
    Some(XidEvent {
        slot,
        code: 79,
        logged_as_xid: false,
        when,
        detail: "GPU has fallen off the bus".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(s: &str) -> PciSlot {
        PciSlot::parse(s).expect("valid slot")
    }

    #[test]
    fn both_xid_forms_and_the_bare_fallen_off_line_parse() {
        let new = xid_in(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=2154, name=python, GPU has fallen off the bus.",
            "t".into(),
        )
        .expect("new form");
        assert_eq!(
            (new.slot, new.code, new.logged_as_xid),
            (slot("0000:3b:00"), 79, true)
        );
        assert_eq!(
            new.detail,
            "pid=2154, name=python, GPU has fallen off the bus."
        );
        let old = xid_in(
            "NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120",
            "t".into(),
        )
        .expect("old form");
        assert_eq!((old.slot, old.code), (slot("0000:01:00"), 31));
        let bare = xid_in(
            "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
            "t".into(),
        )
        .expect("fallen off");
        assert_eq!(
            (bare.slot, bare.code, bare.logged_as_xid),
            (slot("0000:3b:00"), 79, false)
        );
    }

    #[test]
    fn one_fall_off_the_bus_logged_twice_counts_once() {
        let text = "[ 9.0] NVRM: Xid (PCI:0000:3a:00): 79, pid=1, GPU has fallen off the bus.\n\
                    [ 9.1] NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus.\n\
                    [ 20.0] NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n\
                    [ 20.1] NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n";
        let (events, _) = parse_log(text, None);
        let seen: Vec<(String, bool)> = events
            .iter()
            .map(|e| (e.slot.to_string(), e.logged_as_xid))
            .collect();
        assert_eq!(
            seen,
            [
                ("0000:3a:00".to_string(), true),
                ("0000:18:00".to_string(), true)
            ]
        );
    }

    #[test]
    fn any_cut_of_lines_with_multibyte_text_is_no_panic() {
        let lines = [
            "Dec  1 10:02:03 gpu07 kernel: [  412.5] NVRM: Xid (PCI:0000:3b:00): 79, ü→ bus.",
            "2026-12-01T10:02:03.5+00:00 gpu07 kernel: NVRM: Xid (0000:3b:00): 13, ñ",
            "6,1,5,-;NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus. ✓",
            "ééé Dec  1 10:02:03 h kernel: NVRM: Xid (PCI:0000:3b:00): 48, x",
            "[ 1é] NVRM: Xid (PCI:0000:3b:00): 48",
        ];
        for line in lines {
            for (cut, _) in line.char_indices() {
                let _ = parse_log(&line[..cut], Some(0));
                let _ = parse_log(&line[cut..], Some(0));
            }
        }
        let (events, _) = parse_log(&lines.join("\n"), None);
        assert_eq!(events.len(), 4);
    }

    #[test]
    fn the_real_kmsg_reads_to_its_end_or_says_why_not() {
        match read_kmsg(Path::new("/dev/kmsg")) {
            Ok(events) => assert!(events.iter().all(|e| e.when.ends_with("s after boot"))),
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    io::ErrorKind::PermissionDenied | io::ErrorKind::NotFound
                ),
                "{e}"
            ),
        }
    }

    #[test]
    fn garbage_lines_are_no_events() {
        for bad in [
            "",
            "NVRM: Xid",
            "NVRM: Xid (PCI:zz:00): 79, x",
            "NVRM: Xid (PCI:0000:3b:00): pid=1",
            "NVRM: Xid (PCI:0000:3b:00",
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.86.15",
            "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
            "NVRM: GPU has fallen off the bus.",
            "\u{fffd}\u{fffd}NVRM:\u{fffd}",
        ] {
            assert_eq!(xid_in(bad, "t".into()), None, "{bad:?}");
        }
    }

    #[test]
    fn syslog_dmesg_and_kmsg_lines_give_their_time() {
        let text = "Dec  1 10:02:03 gpu07 kernel: [  412.500000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n\
                    [  413.25] NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception\n\
                    6,1234,414000000,-;NVRM: Xid (PCI:0000:2a:00): 31, fault\n\
                    2099-01-02T03:04:05.000001+00:00 gpu07 kernel: NVRM: Xid (PCI:0000:5d:00): 48, DBE\n";
        let (events, earlier) = parse_log(text, None);
        let whens: Vec<&str> = events.iter().map(|e| e.when.as_str()).collect();
        assert_eq!(
            whens,
            [
                "Dec 1 10:02:03",
                "413.2 s after boot",
                "414.0 s after boot",
                "2099-01-02T03:04:05.000001+00:00"
            ]
        );
        assert_eq!(earlier, 0);
    }

    #[test]
    fn a_file_is_cut_at_the_last_boot_banner() {
        let text = "Nov 30 08:00:00 h kernel: [ 10.0] NVRM: Xid (PCI:0000:3b:00): 79, old\n\
                    Nov 30 08:00:01 h kernel: [ 11.0] NVRM: Xid (PCI:0000:3b:00): 48, old\n\
                    Dec  1 09:00:00 h kernel: [    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02)\n\
                    Dec  1 09:00:00 h kernel: [    0.000000] Command line: BOOT_IMAGE=/vmlinuz\n\
                    Dec  1 10:00:00 h kernel: [ 3600.0] NVRM: Xid (PCI:0000:3b:00): 63, row remap\n";
        let (events, earlier) = parse_log(text, None);
        assert_eq!(events.iter().map(|e| e.code).collect::<Vec<_>>(), [63]);
        assert_eq!(earlier, 2);
    }

    #[test]
    fn dated_lines_before_the_boot_time_are_earlier_boots() {
        let boot = rfc3339_epoch("2026-12-01T09:00:00+00:00");
        let text = "2026-12-01T08:59:00+00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, old\n\
                    2026-12-01T10:59:00+02:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, before boot in UTC\n\
                    2026-12-01T09:05:00Z h kernel: NVRM: Xid (PCI:0000:3b:00): 48, new\n";
        let (events, earlier) = parse_log(text, boot);
        assert_eq!(events.iter().map(|e| e.code).collect::<Vec<_>>(), [48]);
        assert_eq!(earlier, 2);
    }

    #[test]
    fn epoch_of_known_dates() {
        assert_eq!(rfc3339_epoch("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            rfc3339_epoch("2000-03-01T00:00:00+01:00"),
            Some(951_865_200)
        );
        assert_eq!(rfc3339_epoch("2000-03-01T00:00:00 junk"), None);
    }

    #[test]
    fn kmsg_records_carry_seconds_since_boot() {
        let e = parse_kmsg_record(
            "3,812,95123456,-;NVRM: Xid (PCI:0000:3b:00): 119, Timeout waiting for RPC from GSP!\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n",
        )
        .expect("record");
        assert_eq!((e.code, e.when.as_str()), (119, "95.1 s after boot"));
        assert_eq!(parse_kmsg_record("garbage"), None);
        assert_eq!(
            parse_kmsg_record("6,1,notanumber,-;NVRM: Xid (0000:3b:00): 79, x"),
            None
        );
    }

    #[test]
    fn a_missing_file_is_an_error_and_bad_bytes_are_no_panic() {
        let missing = read_file(Path::new("/nonexistent/kern.log"), None);
        assert_eq!(
            missing.map_err(|e| e.kind()).err(),
            Some(io::ErrorKind::NotFound)
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kern.log");
        let mut bytes =
            b"Dec  1 10:00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, \xff\xfe bad\n".to_vec();
        bytes.extend_from_slice(b"\xff\xff\xff\n[ broken\n");
        std::fs::write(&path, bytes).expect("write");
        let log = read_file(&path, None).expect("read");
        assert_eq!(log.events.len(), 1);
        assert_eq!(log.events[0].code, 79);
    }
}

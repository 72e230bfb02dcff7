//! Probe: NVIDIA Xid events in the kernel log since boot. Reads the kernel's
//! ring buffer (/dev/kmsg) when this user may, and the journal
//! (`journalctl -k -b`) too when the ring buffer has already dropped the
//! boot's first messages; else the journal alone, else the syslog files; or
//! the file the user named (`--kernel-log`). Lines are parsed here into
//! [`XidEvent`]s and NVSwitch [`SxidEvent`]s; the `fabric.xid` check judges
//! them.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::domain::sxid::{sxid_in, Sxid};
use crate::domain::xid::PciSlot;

/// Where the events were read from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LogSource {
    Kmsg,
    Journal,
    File(PathBuf),
    /// /dev/kmsg, whose ring buffer no longer held the boot's first `lost`
    /// records, with the journal read for them (`Ok`) or why it could not
    /// be (`Err`).
    KmsgWrapped {
        lost: u64,
        journal: Result<(), String>,
    },
}

impl std::fmt::Display for LogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogSource::Kmsg => f.write_str("/dev/kmsg"),
            LogSource::Journal => f.write_str("journalctl -k -b"),
            LogSource::File(p) => write!(f, "{}", p.display()),
            LogSource::KmsgWrapped { lost, journal } => match journal {
                Ok(()) => write!(
                    f,
                    "/dev/kmsg and journalctl -k -b, as the ring buffer no longer holds the \
                     boot's first {lost} messages"
                ),
                Err(why) => write!(
                    f,
                    "/dev/kmsg only, which no longer holds the boot's first {lost} messages; \
                     journalctl: {why}"
                ),
            },
        }
    }
}

/// One Xid (or "fallen off the bus") line of the driver.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct XidEvent {
    pub slot: PciSlot,
    pub code: u32,
    /// False for a "GPU has fallen off the bus" line without an Xid number
    /// (counted as Xid 79, which is what it means).
    pub logged_as_xid: bool,
    /// When, as the log says it: "Dec  1 10:02:03", or "412.5 s after boot".
    pub when: String,
    /// Seconds since boot, where the log says it (dmesg, kmsg, journal).
    pub since_boot_s: Option<f64>,
    /// The driver's words after the code ("pid=..., GPU has fallen off the bus.").
    pub detail: String,
}

/// One NVSwitch SXid line that says its severity (see `domain::sxid`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SxidEvent {
    pub sxid: Sxid,
    /// When, as the log says it (as [`XidEvent::when`]).
    pub when: String,
    pub since_boot_s: Option<f64>,
}

/// A process the kernel's OOM killer killed ("Out of memory: Killed
/// process 1234 (python) ...", or the memory cgroup's own).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OomKill {
    pub pid: u32,
    pub name: String,
    /// When, as the log says it (as [`XidEvent::when`]).
    pub when: String,
    pub since_boot_s: Option<f64>,
}

/// The OOM kill a kernel message reports, if any.
pub fn oom_in(message: &str, when: String) -> Option<OomKill> {
    let rest = message.split_once("Killed process ")?.1;
    let (pid, rest) = rest.split_once(' ')?;
    let name = rest.strip_prefix('(')?.split_once(')')?.0;
    Some(OomKill {
        pid: pid.parse().ok()?,
        name: name.to_string(),
        when,
        since_boot_s: None,
    })
}

/// What the kernel log holds for this boot: the events judged, never the
/// log's other lines (so a capture keeps only these).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KernelLog {
    pub source: LogSource,
    pub events: Vec<XidEvent>,
    /// NVSwitch SXid events of this boot (none in a capture older than
    /// their reading).
    #[serde(default)]
    pub sxids: Vec<SxidEvent>,
    /// SXid events a file still held from earlier boots, left out.
    #[serde(default)]
    pub earlier_boot_sxids: usize,
    /// Xid events a file still held from earlier boots, left out.
    pub earlier_boots: usize,
    /// Processes the OOM killer killed this boot (none in a capture older
    /// than their reading).
    #[serde(default)]
    pub oom_kills: Vec<OomKill>,
    /// Xid events of a GPU logged before a later "GPU ... was successfully
    /// reset." line for it, left out.
    pub before_reset: usize,
}

/// No log could be read; each attempt with why it failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// Where the live log is looked for: the real machine's places, or a test's.
pub struct LiveSources<'a> {
    pub kmsg: &'a Path,
    /// The PATH journalctl is looked up in.
    pub path: Option<OsString>,
    pub syslog_files: &'a [&'a str],
}

/// The Xid events of this boot from the first source that can be read,
/// through the boundary: a capture keeps the parsed events (the lines
/// judged), never the log. `boot_epoch` depends on the clock, so the key
/// holds only the named file.
pub fn read_kernel_log(
    given: Option<&Path>,
    boot_epoch: Option<i64>,
    timeout: Duration,
) -> Result<KernelLog, Unreadable> {
    let args = given.map(|p| p.display().to_string()).unwrap_or_default();
    crate::seam::answer("kernel_log::read_kernel_log", &args, || {
        read_kernel_log_live(given, boot_epoch, timeout)
    })
}

/// The kernel log read again after a load ran on the GPUs (the burn's
/// "any new Xid?"), each reading its own answer in a capture (numbered
/// with [`crate::seam::nth`]), apart from the snapshot fabric.xid judged.
pub fn read_kernel_log_again(
    given: Option<&Path>,
    timeout: Duration,
) -> Result<KernelLog, Unreadable> {
    let args = given.map(|p| p.display().to_string()).unwrap_or_default();
    crate::seam::answer(
        "kernel_log::read_kernel_log_again",
        &crate::seam::nth(&args),
        || read_kernel_log_live(given, None, timeout),
    )
}

fn read_kernel_log_live(
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
    let live = LiveSources {
        kmsg: Path::new("/dev/kmsg"),
        path: crate::seam::env("PATH").map(OsString::from),
        syslog_files: SYSLOG_FILES,
    };
    read_live(&live, boot_epoch, timeout)
}

/// /dev/kmsg (with the journal where the ring buffer has wrapped), else the
/// journal, else the syslog files.
pub fn read_live(
    live: &LiveSources,
    boot_epoch: Option<i64>,
    timeout: Duration,
) -> Result<KernelLog, Unreadable> {
    let mut tried = Vec::new();
    match read_kmsg(live.kmsg) {
        Ok(k) if k.first_seq.is_some_and(|s| s > 0) => {
            return Ok(with_journal(k, live.path.as_ref(), timeout))
        }
        Ok(k) => {
            return Ok(KernelLog {
                before_reset: k.before_reset,
                oom_kills: k.oom_kills,
                ..this_boot(LogSource::Kmsg, k.events, k.sxids)
            })
        }
        Err(e) => tried.push(format!("{}: {e}", live.kmsg.display())),
    }
    match read_journal(live.path.as_ref(), timeout) {
        Ok(text) => {
            let parsed = parse_log(&text, None);
            return Ok(KernelLog {
                oom_kills: parsed.oom_kills,
                ..this_boot(LogSource::Journal, parsed.events, parsed.sxids)
            });
        }
        Err(e) => tried.push(format!("journalctl: {e}")),
    }
    for f in live.syslog_files {
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

/// The ring buffer starts after the boot's first records (kernel ABI
/// `dev-kmsg`: a record's sequence number counts from 0 at boot), so the
/// journal, which keeps them, is read for the events before its first
/// record.
fn with_journal(k: KmsgRead, path: Option<&OsString>, timeout: Duration) -> KernelLog {
    let lost = k.first_seq.unwrap_or(0);
    let journal = read_journal(path, timeout).map(|text| parse_log(&text, None));
    let mut events = Vec::new();
    let mut sxids = Vec::new();
    let mut oom_kills = Vec::new();
    // The journal holds the whole boot, so its count of events before a
    // reset is the whole count.
    let mut before_reset = k.before_reset;
    if let Ok(early) = &journal {
        let first = k.first_s.unwrap_or(f64::INFINITY);
        let before_ring = |t: Option<f64>| t.is_none_or(|t| t < first);
        before_reset = before_reset.max(early.before_reset);
        early
            .events
            .iter()
            .filter(|e| before_ring(e.since_boot_s))
            .for_each(|e| add_event(&mut events, e.clone()));
        sxids.extend(
            early
                .sxids
                .iter()
                .filter(|e| before_ring(e.since_boot_s))
                .cloned(),
        );
        oom_kills.extend(
            early
                .oom_kills
                .iter()
                .filter(|e| before_ring(e.since_boot_s))
                .cloned(),
        );
    }
    oom_kills.extend(k.oom_kills);
    k.events.into_iter().for_each(|e| add_event(&mut events, e));
    sxids.extend(k.sxids);
    let journal = journal.map(|_| ());
    KernelLog {
        before_reset,
        oom_kills,
        ..this_boot(LogSource::KmsgWrapped { lost, journal }, events, sxids)
    }
}

fn this_boot(source: LogSource, events: Vec<XidEvent>, sxids: Vec<SxidEvent>) -> KernelLog {
    KernelLog {
        source,
        events,
        sxids,
        earlier_boot_sxids: 0,
        earlier_boots: 0,
        before_reset: 0,
        oom_kills: Vec::new(),
    }
}

/// The last `max` bytes of what `stream` gives until its end, and whether
/// anything before them was left out.
fn tail(stream: &mut impl Read, max: usize) -> io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut cut = false;
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        bytes.extend_from_slice(&chunk[..n]);
        // Drop the front in one move once twice the bound has gathered.
        if bytes.len() > 2 * max {
            bytes.drain(..bytes.len() - max);
            cut = true;
        }
    }
    if bytes.len() > max {
        bytes.drain(..bytes.len() - max);
        cut = true;
    }
    Ok((bytes, cut))
}

/// Read a syslog, journal or dmesg dump, keeping only this boot's events.
pub fn read_file(path: &Path, boot_epoch: Option<i64>) -> io::Result<KernelLog> {
    let mut file = File::open(path)?;
    let meta = file.metadata()?;
    let len = meta.len();
    let mut skipped = meta.is_file() && len > MAX_LOG_BYTES;
    if skipped {
        file.seek(SeekFrom::Start(len - MAX_LOG_BYTES))?;
    }
    let bytes = if meta.is_file() {
        // A log still being written is read no further than its bound.
        let mut bytes = Vec::new();
        file.take(MAX_LOG_BYTES).read_to_end(&mut bytes)?;
        bytes
    } else {
        // A pipe (`--kernel-log <(journalctl -k)`) or a device: read to its
        // end keeping only its last MAX_LOG_BYTES, so memory stays bounded
        // however much it gives (the check's timeout bounds the time).
        let (bytes, cut) = tail(&mut file, MAX_LOG_BYTES as usize)?;
        skipped = cut;
        bytes
    };
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if skipped {
        // The first line was cut in the middle.
        text = text
            .split_once('\n')
            .map(|(_, r)| r.to_string())
            .unwrap_or_default();
    }
    let parsed = parse_log(&text, boot_epoch);
    Ok(KernelLog {
        source: LogSource::File(path.to_path_buf()),
        events: parsed.events,
        sxids: parsed.sxids,
        earlier_boot_sxids: parsed.earlier_boot_sxids,
        earlier_boots: parsed.earlier_boots,
        before_reset: parsed.before_reset,
        oom_kills: parsed.oom_kills,
    })
}

/// What /dev/kmsg held.
#[derive(Debug)]
pub struct KmsgRead {
    pub events: Vec<XidEvent>,
    pub sxids: Vec<SxidEvent>,
    /// The first record's sequence number: above 0 when the ring buffer
    /// has dropped the boot's first records.
    pub first_seq: Option<u64>,
    /// The first record's time, in seconds since boot.
    pub first_s: Option<f64>,
    /// Events left out as logged before their GPU's reset.
    pub before_reset: usize,
    pub oom_kills: Vec<OomKill>,
}

/// Read the kernel ring buffer without blocking: one record per read, until
/// EAGAIN (a saved copy in a plain file gives many records per read, one a
/// line). Needs CAP_SYSLOG where kernel.dmesg_restrict=1.
pub fn read_kmsg(path: &Path) -> io::Result<KmsgRead> {
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut buf = vec![0u8; KMSG_RECORD_MAX];
    let mut read = KmsgRead {
        events: Vec::new(),
        sxids: Vec::new(),
        first_seq: None,
        first_s: None,
        before_reset: 0,
        oom_kills: Vec::new(),
    };
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let chunk = String::from_utf8_lossy(&buf[..n]);
                for record in chunk.split('\n').filter(|l| !l.starts_with(' ')) {
                    take_record(&mut read, record);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            // EPIPE: the record was overwritten while we read; go on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(read)
}

fn take_record(read: &mut KmsgRead, record: &str) {
    if read.first_seq.is_none() {
        let mut fields = record.split(';').next().unwrap_or("").split(',');
        read.first_seq = fields.nth(1).and_then(|f| f.parse().ok());
        read.first_s = fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .map(|us| us as f64 / 1e6);
        if read.first_s.is_none() {
            read.first_seq = None;
        }
    }
    if let Some(slot) = kmsg_line(record).and_then(|l| reset_in(l.message)) {
        read.before_reset += forget_before_reset(&mut read.events, slot);
    } else if let Some(event) = parse_kmsg_record(record) {
        add_event(&mut read.events, event);
    } else if let Some(event) = parse_kmsg_sxid(record) {
        read.sxids.push(event);
    } else if let Some(line) = kmsg_line(record) {
        if let Some(mut kill) = oom_in(line.message, line.when.clone()) {
            kill.since_boot_s = line.since_boot_s;
            read.oom_kills.push(kill);
        }
    }
}

/// The GPU a "GPU 00000000:3B:00.0 was successfully reset." line names:
/// nvidia-smi's words after `nvidia-smi -r`, written into the kernel log
/// (`nvidia-smi -r -i N | sudo tee /dev/kmsg`) to mark the reset. The
/// driver logs nothing of its own when a GPU is reset and re-initialised,
/// so this is the mark gpucheck counts from.
fn reset_in(message: &str) -> Option<PciSlot> {
    let before = &message[..message.find(" was successfully reset")?];
    before.split_whitespace().last().and_then(PciSlot::parse)
}

/// Drop the events of `slot` logged so far; how many.
fn forget_before_reset(events: &mut Vec<XidEvent>, slot: PciSlot) -> usize {
    let before = events.len();
    events.retain(|e| e.slot != slot);
    before - events.len()
}

/// `journalctl -k -b -o short-monotonic`, bounded by `timeout`. An answer
/// without a single kernel line means this user may not read the system
/// journal (it then shows only the user's own), not a quiet kernel.
fn read_journal(path: Option<&OsString>, timeout: Duration) -> Result<String, String> {
    let Some(journalctl) = super::python::which("journalctl", path) else {
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
/// A message of several lines arrives as one, its line breaks escaped
/// ("\\x0a", kernel ABI `dev-kmsg`).
pub fn parse_kmsg_record(record: &str) -> Option<XidEvent> {
    let line = kmsg_line(record.lines().next()?)?;
    let message = line.message.replace("\\x0a", " ");
    let mut event = xid_in(&message, line.when)?;
    event.since_boot_s = line.since_boot_s;
    Some(event)
}

/// The NVSwitch SXid a /dev/kmsg record reports, if any.
fn parse_kmsg_sxid(record: &str) -> Option<SxidEvent> {
    let line = kmsg_line(record.lines().next()?)?;
    Some(SxidEvent {
        sxid: sxid_in(line.message)?,
        when: line.when,
        since_boot_s: line.since_boot_s,
    })
}

fn after_boot(secs: f64) -> String {
    format!("{secs:.1} s after boot")
}

/// One line of a log file, taken apart.
struct LogLine<'a> {
    when: String,
    /// Seconds since the epoch, when the line carries a full date.
    epoch: Option<i64>,
    since_boot_s: Option<f64>,
    message: &'a str,
}

/// Lines after "NVRM: The NVIDIA GPU <address>" that may still carry the
/// rest of its message ("... installed in this system has" / "fallen off
/// the bus and is not responding to commands.").
const SPLIT_MESSAGE_LINES: usize = 3;

/// A "The NVIDIA GPU <address>" line waiting for the rest of its message.
struct Pending {
    slot: PciSlot,
    when: String,
    since_boot_s: Option<f64>,
    lines_left: usize,
}

/// Parse a log: syslog lines ("Dec  1 10:02:03 host kernel: ..." or
/// RFC 3339 "2026-12-01T10:02:03.5+00:00 host kernel: ..."), `dmesg` and
/// `journalctl -o short-monotonic` lines ("[  412.5] ..."), `dmesg -T` /
/// `--ctime` ("[Sun Jul 28 09:15:27 2024] ...") and `dmesg --time-format
/// iso` lines (with `-x`'s "kern  :warn  : " before them), or /dev/kmsg
/// records. Returns this boot's events and how many earlier ones were cut:
/// the boot is the last kernel banner ("Linux version", "Command line:"),
/// and a dated line before `boot_epoch` belongs to an earlier boot. A GPU's
/// events before a later reset mark (see [`reset_in`]) are left out too (a
/// GPU reset resets no NVSwitch: SXids stay).
pub fn parse_log(text: &str, boot_epoch: Option<i64>) -> Parsed {
    let mut events: Vec<XidEvent> = Vec::new();
    let mut earlier = 0;
    let mut before_reset = 0;
    let mut pending: Option<Pending> = None;
    let mut sxids = SxidsOfBoot::default();
    let mut oom_kills: Vec<OomKill> = Vec::new();
    for raw in text.lines() {
        let Some(line) = split_line(raw) else {
            continue;
        };
        let before_boot = matches!((line.epoch, boot_epoch), (Some(t), Some(b)) if t < b - 1);
        if is_boot_banner(line.message) {
            earlier += events.len() + before_reset;
            events.clear();
            before_reset = 0;
            pending = None;
            sxids.new_boot();
            oom_kills.clear();
            continue;
        }
        if let Some(mut kill) = oom_in(line.message, line.when.clone()) {
            kill.since_boot_s = line.since_boot_s;
            if !before_boot {
                oom_kills.push(kill);
            }
            continue;
        }
        if let Some(slot) = reset_in(line.message) {
            before_reset += forget_before_reset(&mut events, slot);
            continue;
        }
        if sxids.take(&line, before_boot) {
            continue;
        }
        let event = xid_in(line.message, line.when.clone())
            .map(|mut e| {
                e.since_boot_s = line.since_boot_s;
                e
            })
            .or_else(|| rest_of_split_message(&mut pending, &line));
        if let Some(event) = event {
            if before_boot {
                earlier += 1;
            } else {
                add_event(&mut events, event);
            }
        }
    }
    Parsed {
        events,
        earlier_boots: earlier,
        before_reset,
        sxids: sxids.events,
        earlier_boot_sxids: sxids.earlier,
        oom_kills,
    }
}

/// A log taken apart: this boot's events, and what was left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub events: Vec<XidEvent>,
    pub earlier_boots: usize,
    pub before_reset: usize,
    pub sxids: Vec<SxidEvent>,
    pub earlier_boot_sxids: usize,
    pub oom_kills: Vec<OomKill>,
}

/// The SXid events of the boot being read, and those of earlier boots
/// counted.
#[derive(Default)]
struct SxidsOfBoot {
    events: Vec<SxidEvent>,
    earlier: usize,
}

impl SxidsOfBoot {
    /// A boot banner: what was read so far is of an earlier boot.
    fn new_boot(&mut self) {
        self.earlier += self.events.len();
        self.events.clear();
    }

    /// Keep the line's SXid, if it holds one; whether it did.
    fn take(&mut self, line: &LogLine, before_boot: bool) -> bool {
        let Some(sxid) = sxid_in(line.message) else {
            return false;
        };
        if before_boot {
            self.earlier += 1;
        } else {
            self.events.push(SxidEvent {
                sxid,
                when: line.when.clone(),
                since_boot_s: line.since_boot_s,
            });
        }
        true
    }
}

/// The driver prints "The NVIDIA GPU 0000:b3:00.0 / (PCI ID: 10de:26b5)
/// installed in this system has / fallen off the bus and is not responding
/// to commands." as one message of three lines, each its own log line
/// (dmesg indents the later ones, syslog dates each). The GPU is lost:
/// counted as Xid 79.
fn rest_of_split_message(pending: &mut Option<Pending>, line: &LogLine) -> Option<XidEvent> {
    let nvrm = line.message.split_once("NVRM:")?.1.trim();
    if let Some(address) = nvrm.strip_prefix("The NVIDIA GPU ") {
        *pending = PciSlot::parse(address.split_whitespace().next()?).map(|slot| Pending {
            slot,
            when: line.when.clone(),
            since_boot_s: line.since_boot_s,
            lines_left: SPLIT_MESSAGE_LINES,
        });
        return None;
    }
    let p = pending.as_mut()?;
    if nvrm.contains("fallen off the bus") {
        let p = pending.take()?;
        return Some(XidEvent {
            slot: p.slot,
            code: 79,
            logged_as_xid: false,
            when: p.when,
            since_boot_s: p.since_boot_s,
            detail: "GPU has fallen off the bus".into(),
        });
    }
    p.lines_left -= 1;
    if p.lines_left == 0 {
        *pending = None;
    }
    None
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
    let raw = strip_decoded_level(raw);
    let (when, epoch, rest) = if let Some((stamp, rest)) = bsd_stamp(raw) {
        (Some(squeeze(stamp)), None, rest)
    } else if let Some((stamp, epoch, rest)) = rfc3339_stamp(raw) {
        (Some(stamp.to_string()), epoch, rest)
    } else if let Some((stamp, epoch, rest)) = ctime_stamp(raw) {
        (Some(stamp), epoch, rest)
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
        since_boot_s: mono,
        message,
    })
}

/// "kern  :warn  : rest" (`dmesg -x`) -> "rest".
fn strip_decoded_level(raw: &str) -> &str {
    let mut parts = raw.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(facility), Some(level), Some(rest))
            if is_word(facility.trim_end()) && is_word(level.trim()) && rest.starts_with(' ') =>
        {
            rest.trim_start()
        }
        _ => raw,
    }
}

fn is_word(s: &str) -> bool {
    !s.is_empty() && s.len() <= 8 && s.bytes().all(|b| b.is_ascii_lowercase())
}

/// "[Sun Jul 28 09:15:27 2024] rest" (`dmesg -T` / `--ctime`, local time).
fn ctime_stamp(raw: &str) -> Option<(String, Option<i64>, &str)> {
    let (inner, rest) = raw.strip_prefix('[')?.split_once(']')?;
    let f: Vec<&str> = inner.split_whitespace().collect();
    let [_, month, day, hms, year] = f[..] else {
        return None;
    };
    let month = month_number(month)?;
    let num = |t: &str| t.parse::<i64>().ok();
    let mut hms = hms.split(':').map(num);
    let (h, mi, s) = (hms.next()??, hms.next()??, hms.next()??);
    let epoch = local_epoch(num(year)?, month, num(day)?, h, mi, s);
    Some((f.join(" "), epoch, rest.trim_start()))
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn month_number(name: &str) -> Option<i64> {
    MONTHS.iter().position(|m| *m == name).map(|i| i as i64 + 1)
}

/// Seconds since the epoch of a local date and time (mktime, the zone of
/// this machine, as `dmesg -T` printed it).
fn local_epoch(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    let int = |v: i64| i32::try_from(v).ok();
    // SAFETY: an all-zero `tm` is a valid value; mktime only reads and
    // normalises the struct it is given.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = int(y - 1900)?;
    tm.tm_mon = int(mo - 1)?;
    tm.tm_mday = int(d)?;
    tm.tm_hour = int(h)?;
    tm.tm_min = int(mi)?;
    tm.tm_sec = int(s)?;
    tm.tm_isdst = -1;
    // SAFETY: `tm` is a valid, exclusively borrowed struct.
    let t = unsafe { libc::mktime(&mut tm) };
    (t != -1).then_some(t as i64)
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
    let secs = usec as f64 / 1e6;
    Some(LogLine {
        when: after_boot(secs),
        epoch: None,
        since_boot_s: Some(secs),
        message,
    })
}

/// "Dec  1 10:02:03 rest" (RFC 3164: no year, local time).
fn bsd_stamp(raw: &str) -> Option<(&str, &str)> {
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
    // `dmesg --time-format iso` writes the fraction after a comma.
    let zone = tail.trim_start_matches(|c: char| c == '.' || c == ',' || c.is_ascii_digit());
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
            since_boot_s: None,
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
        since_boot_s: None,
        detail: "GPU has fallen off the bus".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_read_with_their_time_and_only_of_this_boot() {
        let log = "[    0.000000] Linux version 6.8.0\n\
[  100.000000] Out of memory: Killed process 1000 (python) total-vm:1kB, anon-rss:1kB\n\
[    0.000000] Linux version 6.8.0\n\
[ 5120.443001] Memory cgroup out of memory: Killed process 4242 (pt_main_thread) total-vm:9kB, anon-rss:8kB, file-rss:0kB\n\
[ 5121.000000] oom_reaper: reaped process 4242 (pt_main_thread), now anon-rss:0kB\n";
        let parsed = parse_log(log, None);
        assert_eq!(parsed.oom_kills.len(), 1, "{:?}", parsed.oom_kills);
        let k = &parsed.oom_kills[0];
        assert_eq!((k.pid, k.name.as_str()), (4242, "pt_main_thread"));
        assert_eq!(k.since_boot_s, Some(5120.443001));
        assert!(parsed.events.is_empty());
    }

    #[test]
    fn a_stream_keeps_only_its_last_bytes() {
        let mut text: &[u8] = b"0123456789";
        assert_eq!(tail(&mut text, 4).unwrap(), (b"6789".to_vec(), true));
        let mut short: &[u8] = b"ab";
        assert_eq!(tail(&mut short, 4).unwrap(), (b"ab".to_vec(), false));
        let big = vec![b'x'; 300 * 1024];
        let (kept, cut) = tail(&mut big.as_slice(), 100 * 1024).unwrap();
        assert_eq!((kept.len(), cut), (100 * 1024, true));
    }

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
        let events = parse_log(text, None).events;
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
        let events = parse_log(&lines.join("\n"), None).events;
        assert_eq!(events.len(), 4);
    }

    #[test]
    fn the_real_kmsg_reads_to_its_end_or_says_why_not() {
        match read_kmsg(Path::new("/dev/kmsg")) {
            Ok(k) => assert!(k.events.iter().all(|e| e.when.ends_with("s after boot"))),
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
        let Parsed {
            events,
            earlier_boots: earlier,
            ..
        } = parse_log(text, None);
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
        let Parsed {
            events,
            earlier_boots: earlier,
            ..
        } = parse_log(text, None);
        assert_eq!(events.iter().map(|e| e.code).collect::<Vec<_>>(), [63]);
        assert_eq!(earlier, 2);
    }

    #[test]
    fn dated_lines_before_the_boot_time_are_earlier_boots() {
        let boot = rfc3339_epoch("2026-12-01T09:00:00+00:00");
        let text = "2026-12-01T08:59:00+00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, old\n\
                    2026-12-01T10:59:00+02:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, before boot in UTC\n\
                    2026-12-01T09:05:00Z h kernel: NVRM: Xid (PCI:0000:3b:00): 48, new\n";
        let Parsed {
            events,
            earlier_boots: earlier,
            ..
        } = parse_log(text, boot);
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

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/kernel_log")
            .join(name)
    }

    fn codes_and_slots(events: &[XidEvent]) -> Vec<(u32, String)> {
        events
            .iter()
            .map(|e| (e.code, e.slot.to_string()))
            .collect()
    }

    #[test]
    fn the_fallen_off_message_split_over_dmesg_lines_is_a_lost_gpu() {
        let text = "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n\
                    \x20              NVRM: (PCI ID: 10de:26b5) installed in this system has\n\
                    \x20              NVRM: fallen off the bus and is not responding to commands.\n\
                    [ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).\n";
        let events = parse_log(text, None).events;
        assert_eq!(codes_and_slots(&events), [(79, "0000:b3:00".to_string())]);
        assert_eq!(events[0].when, "1843.3 s after boot");
        assert!(!events[0].logged_as_xid);
    }

    #[test]
    fn the_split_message_in_syslog_and_in_one_kmsg_record_is_a_lost_gpu() {
        let syslog = "Jan  5 10:00:00 h kernel: NVRM: The NVIDIA GPU 0000:3b:00.0\n\
                      Jan  5 10:00:00 h kernel: NVRM: (PCI ID: 10de:2330) installed in this system has\n\
                      Jan  5 10:00:00 h kernel: NVRM: fallen off the bus and is not responding to commands.\n";
        let events = parse_log(syslog, None).events;
        assert_eq!(codes_and_slots(&events), [(79, "0000:3b:00".to_string())]);
        let record = "3,812,95123456,-;NVRM: The NVIDIA GPU 0000:3b:00.0\\x0aNVRM: (PCI ID: \
                      10de:2330) installed in this system has\\x0aNVRM: fallen off the bus and is \
                      not responding to commands.\n SUBSYSTEM=pci\n";
        let e = parse_kmsg_record(record).expect("one record");
        assert_eq!((e.code, e.slot.to_string()), (79, "0000:3b:00".to_string()));
    }

    #[test]
    fn the_start_of_a_split_message_alone_is_no_event() {
        let text = "[ 1.0] NVRM: The NVIDIA GPU 0000:b3:00.0\n\
                    [ 1.1] NVRM: (PCI ID: 10de:26b5) installed in this system is\n\
                    [ 1.2] NVRM: supported through the NVIDIA 580.xx Legacy drivers.\n\
                    [ 1.3] NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n\
                    [ 9.0] NVRM: something else fallen off the bus\n";
        assert_eq!(parse_log(text, None).events, []);
    }

    #[test]
    fn dmesg_ctime_lines_are_dated_and_cut_at_this_boot() {
        let boot = local_epoch(2024, 8, 1, 0, 0, 0);
        let text = "[Wed Jul 31 23:14:18 2024] NVRM: Xid (PCI:0000:00:05): 79, pid=1, GPU has fallen off the bus.\n\
                    [Mon Aug  5 03:54:13 2024] NVRM: Xid (PCI:0000:00:07): 31, pid=2, Ch 00000008\n";
        let Parsed {
            events,
            earlier_boots: earlier,
            ..
        } = parse_log(text, boot);
        assert_eq!(codes_and_slots(&events), [(31, "0000:00:07".to_string())]);
        assert_eq!(events[0].when, "Mon Aug 5 03:54:13 2024");
        assert_eq!(earlier, 1);
    }

    #[test]
    fn dmesg_iso_lines_with_decoded_levels_are_dated() {
        let text = "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', x\n\
                    kern  :warn  : 2025-01-21T04:41:44,287197+00:00 NVRM: Xid (PCI:0000:38:00): 43, pid=2924364\n";
        let boot = rfc3339_epoch("2025-01-21T04:41:44+00:00");
        let Parsed {
            events,
            earlier_boots: earlier,
            ..
        } = parse_log(text, boot);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].when, "2025-01-21T04:41:44,283302+00:00");
        assert_eq!(earlier, 0);
        let later_boot = rfc3339_epoch("2025-01-22T00:00:00+00:00");
        let later = parse_log(text, later_boot);
        assert_eq!((later.events, later.earlier_boots), (vec![], 2));
    }

    /// A PATH holding only a fake `journalctl` that prints `journal` when
    /// asked for this boot's kernel messages.
    fn fake_journalctl(journal: &Path) -> (tempfile::TempDir, OsString) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("journalctl");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\ncase \"$*\" in *-k*-b*) exec cat '{}';; esac\nexit 1\n",
                journal.display()
            ),
        )
        .expect("write");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = OsString::from(dir.path());
        (dir, path)
    }

    fn live<'a>(kmsg: &'a Path, path: Option<OsString>) -> LiveSources<'a> {
        LiveSources {
            kmsg,
            path,
            syslog_files: &[],
        }
    }

    #[test]
    fn a_wrapped_ring_buffer_is_completed_from_the_journal() {
        let kmsg = fixture("kmsg-wrapped.kmsg");
        let (_dir, path) = fake_journalctl(&fixture("journal-early.txt"));
        let log = read_live(&live(&kmsg, Some(path)), None, Duration::from_secs(5)).expect("read");
        // The early Xid 48 only the journal still has, and the Xid 119 both
        // have, counted once.
        let seen: Vec<(u32, &str)> = log
            .events
            .iter()
            .map(|e| (e.code, e.when.as_str()))
            .collect();
        assert_eq!(
            seen,
            [(48, "120.5 s after boot"), (119, "300.0 s after boot")]
        );
        assert_eq!(
            log.source.to_string(),
            "/dev/kmsg and journalctl -k -b, as the ring buffer no longer holds the boot's \
             first 5000 messages"
        );
    }

    #[test]
    fn a_wrapped_ring_buffer_without_a_journal_says_what_is_missing() {
        let kmsg = fixture("kmsg-wrapped.kmsg");
        let empty = tempfile::tempdir().expect("tempdir");
        let path = Some(OsString::from(empty.path()));
        let log = read_live(&live(&kmsg, path), None, Duration::from_secs(5)).expect("read");
        assert_eq!(log.events.iter().map(|e| e.code).collect::<Vec<_>>(), [119]);
        assert_eq!(
            log.source.to_string(),
            "/dev/kmsg only, which no longer holds the boot's first 5000 messages; journalctl: \
             not installed"
        );
    }

    #[test]
    fn a_ring_buffer_from_boot_on_is_read_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kmsg = dir.path().join("kmsg");
        std::fs::write(
            &kmsg,
            "6,0,0,-;Linux version 6.8.0\n4,1,300000000,-;NVRM: Xid (PCI:0000:3b:00): 119, x\n",
        )
        .expect("write");
        let (_j, path) = fake_journalctl(&fixture("journal-early.txt"));
        let log = read_live(&live(&kmsg, Some(path)), None, Duration::from_secs(5)).expect("read");
        assert_eq!(log.source, LogSource::Kmsg);
        assert_eq!(log.events.iter().map(|e| e.code).collect::<Vec<_>>(), [119]);
    }

    /// The NVSwitch lines of one error (leptonai/gpud's SXid README, Apache
    /// 2.0), then a non-fatal one (NVIDIA/nvtrust issue 124).
    const SXID_DMESG: &str = "\
[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up
[6781753.404848] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine instance 00
[6781753.406566] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000, 0x00000000}
[6781754.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt
";

    #[test]
    fn sxid_lines_that_say_their_severity_are_read_with_their_time() {
        let parsed = parse_log(SXID_DMESG, None);
        assert_eq!(parsed.events, []);
        let seen: Vec<(&str, u32, Option<u32>, &str)> = parsed
            .sxids
            .iter()
            .map(|e| {
                (
                    e.sxid.switch.as_str(),
                    e.sxid.code,
                    e.sxid.link,
                    e.when.as_str(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "nvidia-nvswitch1",
                    20034,
                    Some(48),
                    "6781753.4 s after boot"
                ),
                (
                    "nvidia-nvswitch3",
                    22013,
                    Some(44),
                    "6781754.2 s after boot"
                )
            ]
        );
    }

    #[test]
    fn sxids_before_the_boot_banner_or_the_boot_time_are_earlier_boots() {
        let text = format!(
            "{SXID_DMESG}[    0.000000] Linux version 6.8.0-45-generic\n\
             [ 50.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 1 x\n"
        );
        let parsed = parse_log(&text, None);
        assert_eq!(parsed.sxids.len(), 1);
        assert_eq!(parsed.earlier_boot_sxids, 2);
        let boot = rfc3339_epoch("2026-12-01T09:00:00+00:00");
        let dated = "2026-12-01T08:00:00+00:00 h kernel: nvidia-nvswitch0: SXid \
                     (PCI:0000:05:00.0): 20034, Fatal, Link 1 x\n";
        let parsed = parse_log(dated, boot);
        assert_eq!((parsed.sxids.len(), parsed.earlier_boot_sxids), (0, 1));
    }

    #[test]
    fn a_gpu_reset_mark_keeps_the_sxids() {
        let text = format!("{SXID_DMESG}[ 9e6] GPU 00000000:3B:00.0 was successfully reset.\n");
        assert_eq!(parse_log(&text, None).sxids.len(), 2);
    }

    #[test]
    fn kmsg_records_carry_sxids() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kmsg = dir.path().join("kmsg");
        std::fs::write(
            &kmsg,
            "3,0,100000000,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 \
             LTSSM Fault Up\n SUBSYSTEM=pci\n\
             3,1,100000100,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x1}\n",
        )
        .expect("write");
        let k = read_kmsg(&kmsg).expect("read");
        assert_eq!(k.sxids.len(), 1);
        assert_eq!(k.sxids[0].when, "100.0 s after boot");
        assert_eq!(k.sxids[0].since_boot_s, Some(100.0));
    }

    #[test]
    fn xids_before_nvidia_smis_reset_line_are_left_out() {
        let text = "[ 100.0] NVRM: Xid (PCI:0000:3b:00): 119, pid=1, Timeout\n\
                    [ 101.0] NVRM: Xid (PCI:0000:18:00): 48, pid=1, DBE\n\
                    [ 200.0] GPU 00000000:3B:00.0 was successfully reset.\n\
                    [ 300.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=2, later\n";
        let parsed = parse_log(text, None);
        let seen: Vec<(u32, String)> = codes_and_slots(&parsed.events);
        assert_eq!(
            seen,
            [
                (48, "0000:18:00".to_string()),
                (13, "0000:3b:00".to_string())
            ]
        );
        assert_eq!(parsed.before_reset, 1);
        // The same mark as a /dev/kmsg record (written with `tee /dev/kmsg`).
        let dir = tempfile::tempdir().expect("tempdir");
        let kmsg = dir.path().join("kmsg");
        std::fs::write(
            &kmsg,
            "3,0,100000000,-;NVRM: Xid (PCI:0000:3b:00): 119, x\n\
             12,1,200000000,-;GPU 00000000:3B:00.0 was successfully reset.\\x0aAll done.\n",
        )
        .expect("write");
        let k = read_kmsg(&kmsg).expect("read");
        assert_eq!((k.events.len(), k.before_reset), (0, 1));
    }
}

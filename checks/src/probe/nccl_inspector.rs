//! Reading the output folder of NCCL's Inspector profiler plugin: the
//! recent collectives of every rank, per communicator, and how late each
//! rank started them.
//!
//! What the Inspector is, from NVIDIA/nccl (read at commit 5067397, NCCL
//! 2.30; `plugins/profiler/inspector/README.md`, `inspector.cc`,
//! `inspector_json.cc`, `inspector_plugin.cc`, `Makefile`):
//! - It first ships in NCCL 2.28.3-1 (commit f1308997), as source under
//!   `ext-profiler/inspector/`; NCCL 2.29.7-1 moved it to
//!   `plugins/profiler/inspector/`. It is built apart from NCCL (`make` in
//!   that folder, needing CUDA) into `libnccl-profiler-inspector.so`. No
//!   package of NVIDIA's carries it: the libnccl2 .deb
//!   (`pkg/debian/libnccl2.install.in`), the .rpm (`pkg/redhat/nccl.spec.in`),
//!   the .txz (`pkg/txz/create_txz.sh.in`: `bin`, `include`, `lib` of the
//!   NCCL build, which does not build it) and the pip wheel made from that
//!   .txz (`pkg/python_wheel/build_wheel.sh`) hold libnccl only.
//! - It is loaded by `NCCL_PROFILER_PLUGIN` (a path, or a name NCCL expands
//!   to `libnccl-profiler-<name>.so`, `src/plugin/plugin_open.cc`) and does
//!   nothing unless `NCCL_INSPECTOR_ENABLE=1`. Its other variables
//!   (`inspector.cc`): `NCCL_INSPECTOR_DUMP_DIR` (default
//!   `nccl-inspector-<SLURM_JOBID>` or `nccl-inspector-unknown-jobid` in
//!   the working folder), `NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS`
//!   (default -1: written only when the communicator ends; 0: as fast as it
//!   can; N: every N µs), `NCCL_INSPECTOR_DUMP_THREAD_ENABLE` (1),
//!   `NCCL_INSPECTOR_DUMP_VERBOSE` (0; 1 adds the start and stop times read
//!   here), `NCCL_INSPECTOR_PROM_DUMP` (0; 1 writes Prometheus text
//!   instead of JSON), `NCCL_INSPECTOR_ENABLE_P2P` (1),
//!   `NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES` (8192: smaller operations are not
//!   recorded), `NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING` (1),
//!   `NCCL_INSPECTOR_DUMP_COLL_RING_SIZE` / `_P2P_RING_SIZE` (1024) and
//!   pool sizes.
//! - It writes one file per process, `<dump dir>/<hostname>-pid<pid>.log`
//!   (`inspectorStateDumpJSON`), appended to for the life of the process:
//!   one JSON object per line, per completed operation per communicator
//!   (`inspectorCommInfoDumpColl`). Each has `header` {`id`: the
//!   communicator's hash as "0x…", `comm_name` (2.30), `rank` in that
//!   communicator, `n_ranks`, `nnodes`}, `metadata`
//!   {`inspector_output_format_version` "v4.0", `git_rev`,
//!   `rec_mechanism`, `dump_timestamp_us`, `hostname`, `pid`} and either
//!   `coll_perf` {`coll` ("AllReduce"…), `coll_sn` (NCCL's per-communicator
//!   sequence number of the collective, the same on every rank),
//!   `coll_msg_size_bytes`, `coll_exec_time_us`, `coll_timing_source`
//!   ("kernel_gpu", "kernel_cpu", "collective_cpu"), `coll_algobw_gbs`,
//!   `coll_busbw_gbs`, and with verbose on `event_trace_sn` and
//!   `event_trace_ts` {`coll_start_ts`: when the rank's NCCL started the
//!   collective on the host, `coll_stop_ts`, `kernel_events`: per channel
//!   `kernel_start_ts`, `kernel_stop_ts`, `kernel_record_ts`}} or
//!   `p2p_perf` (the same with `p2p_` names and `p2p_peer`). Times are
//!   `gettimeofday` microseconds (`inspectorGetTime`): comparable across
//!   hosts only as far as their clocks agree. Numbers are printed with
//!   `%lf`, a NaN as the string "nan" (`json.cc`). The README puts a record
//!   at 200 to 500 bytes; a verbose one adds about 200 bytes a channel.
//!
//! Safety: the folder and its files come from the job. Only regular files
//! are opened, without waiting (a FIFO is refused at once, see
//! `crate::input`); a file over [`Limits::max_file`] is refused; of a file
//! only its last [`Limits::tail`] bytes are read (the file grows for the
//! life of the job), the first line of that window dropped when the window
//! starts mid-file; a last line with no newline yet that does not parse is
//! being written, and is left for the next read; any other line that is
//! not JSON makes that file unreadable, the others are still read.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Bounds on what one read of an Inspector folder takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// A file larger than this is refused (the README's 200 to 500 bytes a
    /// record put 16 GiB at 30 million collectives or more).
    pub max_file: u64,
    /// Bytes read from the end of each file.
    pub tail: u64,
    /// Files read from one folder, at most.
    pub max_files: usize,
    /// Collectives kept per rank and communicator, the most recent.
    pub recent: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file: 16 << 30,
            tail: 4 << 20,
            max_files: 4096,
            recent: 512,
        }
    }
}

/// One collective as one rank recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Coll {
    /// `coll_sn`: the same collective has the same number on every rank.
    pub seq: u64,
    /// `coll`: "AllReduce", "AllGather", ...
    pub kind: String,
    pub msg_bytes: u64,
    /// `coll_exec_time_us`.
    pub exec_us: Option<u64>,
    /// `coll_timing_source`.
    pub timing: Option<String>,
    pub busbw_gbs: Option<f64>,
    /// `coll_start_ts` (verbose only): the rank's NCCL started it, µs since
    /// the epoch.
    pub start_us: Option<u64>,
    /// The earliest `kernel_start_ts` (verbose only): its kernel ran.
    pub kernel_start_us: Option<u64>,
    /// The latest `kernel_stop_ts` (verbose only).
    pub kernel_stop_us: Option<u64>,
}

/// One rank of one communicator: what one process wrote about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankComm {
    /// `header.id`: the communicator's hash.
    pub comm: String,
    pub comm_name: Option<String>,
    /// The rank in this communicator.
    pub rank: u32,
    pub n_ranks: u32,
    pub hostname: Option<String>,
    pub pid: Option<u64>,
    pub file: PathBuf,
    /// The latest `dump_timestamp_us` seen.
    pub dumped_us: Option<u64>,
    /// The most recent collectives, by sequence number.
    pub colls: Vec<Coll>,
}

/// A file that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unreadable {
    pub file: PathBuf,
    pub why: String,
}

/// What an Inspector folder holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// By communicator, then rank.
    pub ranks: Vec<RankComm>,
    pub unreadable: Vec<Unreadable>,
    /// Files whose last line was still being written.
    pub partial_lines: usize,
}

/// Read the Inspector folder `dir` within the default [`Limits`].
pub fn read_dir(dir: &Path) -> Result<Output, String> {
    read_dir_within(dir, Limits::default())
}

/// Read the Inspector folder `dir` within `limits`: every
/// `<host>-pid<pid>.log` in it.
pub fn read_dir_within(dir: &Path, limits: Limits) -> Result<Output, String> {
    let key = format!("{} {limits:?}", dir.display());
    crate::seam::answer("nccl_inspector::read_dir", &key, || read_live(dir, limits))
}

fn read_live(dir: &Path, limits: Limits) -> Result<Output, String> {
    let mut out = Output::default();
    let mut by_key: BTreeMap<(String, u32, PathBuf), RankComm> = BTreeMap::new();
    for file in log_files(dir, limits.max_files)? {
        let parsed = read_tail(&file, limits)
            .and_then(|(text, from_start)| parse_lines(&file, &text, from_start, limits.recent));
        match parsed {
            Ok((ranks, partial)) => {
                out.partial_lines += usize::from(partial);
                for r in ranks {
                    by_key.insert((r.comm.clone(), r.rank, r.file.clone()), r);
                }
            }
            Err(why) => out.unreadable.push(Unreadable { file, why }),
        }
    }
    out.ranks = by_key.into_values().collect();
    Ok(out)
}

/// The `*.log` entries of `dir`, sorted; a folder that cannot be listed
/// is an error, one with too many such files too.
fn log_files(dir: &Path, max: usize) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_dir() {
        return Err("not a folder".to_string());
    }
    let listing = std::fs::read_dir(dir).map_err(|e| format!("cannot list it: {e}"))?;
    let mut files: Vec<PathBuf> = listing
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.path())
        .collect();
    if files.len() > max {
        return Err(format!("more than {max} .log files"));
    }
    files.sort();
    Ok(files)
}

/// The last `limits.tail` bytes of the regular file `path` as text, and
/// whether they start at the file's start.
fn read_tail(path: &Path, limits: Limits) -> Result<(String, bool), String> {
    let mut file = crate::input::open_regular(path, limits.max_file).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let from = len.saturating_sub(limits.tail);
    file.seek(SeekFrom::Start(from))
        .map_err(|e| format!("cannot seek in it: {e}"))?;
    let mut bytes = Vec::new();
    file.take(limits.tail)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    Ok((String::from_utf8_lossy(&bytes).into_owned(), from == 0))
}

/// The records of one file's text, per communicator and rank, and whether
/// its last line was cut short. `from_start` false: the text starts
/// mid-file, its first line is dropped.
pub fn parse_lines(
    file: &Path,
    text: &str,
    from_start: bool,
    recent: usize,
) -> Result<(Vec<RankComm>, bool), String> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let last = lines.pop().unwrap_or_default();
    if !from_start && !lines.is_empty() {
        lines.remove(0);
    }
    let mut ranks: BTreeMap<(String, u32), RankComm> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec: Line = serde_json::from_str(line)
            .map_err(|e| format!("line {} of what was read is not JSON: {e}", n + 1))?;
        add(&mut ranks, file, rec);
    }
    let mut partial = false;
    if !last.trim().is_empty() {
        match serde_json::from_str::<Line>(last) {
            Ok(rec) => add(&mut ranks, file, rec),
            Err(_) => partial = true,
        }
    }
    let mut out: Vec<RankComm> = ranks.into_values().collect();
    for r in &mut out {
        r.colls.sort_by_key(|c| c.seq);
        r.colls.dedup_by_key(|c| c.seq);
        let extra = r.colls.len().saturating_sub(recent);
        r.colls.drain(..extra);
    }
    Ok((out, partial))
}

/// One line as the Inspector writes it; every field optional, so that
/// other versions' records still read.
#[derive(Deserialize)]
struct Line {
    header: Option<Header>,
    metadata: Option<Metadata>,
    coll_perf: Option<CollPerf>,
}

#[derive(Deserialize)]
struct Header {
    id: Option<String>,
    comm_name: Option<String>,
    rank: Option<u32>,
    n_ranks: Option<u32>,
}

#[derive(Deserialize)]
struct Metadata {
    dump_timestamp_us: Option<u64>,
    hostname: Option<String>,
    pid: Option<u64>,
}

#[derive(Deserialize)]
struct CollPerf {
    coll: Option<String>,
    coll_sn: Option<u64>,
    coll_msg_size_bytes: Option<u64>,
    coll_exec_time_us: Option<u64>,
    coll_timing_source: Option<String>,
    /// A number, or "nan" (how the Inspector writes a NaN).
    coll_busbw_gbs: Option<serde_json::Value>,
    event_trace_ts: Option<TraceTs>,
}

#[derive(Deserialize)]
struct TraceTs {
    coll_start_ts: Option<u64>,
    #[serde(default)]
    kernel_events: Vec<KernelTs>,
}

#[derive(Deserialize)]
struct KernelTs {
    kernel_start_ts: Option<u64>,
    kernel_stop_ts: Option<u64>,
}

/// Add one line's collective to its rank; a line without a communicator,
/// rank or sequence number (a P2P record, another kind) adds nothing.
fn add(ranks: &mut BTreeMap<(String, u32), RankComm>, file: &Path, rec: Line) {
    let (Some(h), Some(c)) = (rec.header, rec.coll_perf) else {
        return;
    };
    let (Some(comm), Some(rank), Some(seq)) = (h.id, h.rank, c.coll_sn) else {
        return;
    };
    let meta = rec.metadata;
    let entry = ranks
        .entry((comm.clone(), rank))
        .or_insert_with(|| RankComm {
            comm,
            comm_name: h.comm_name,
            rank,
            n_ranks: h.n_ranks.unwrap_or(0),
            hostname: meta.as_ref().and_then(|m| m.hostname.clone()),
            pid: meta.as_ref().and_then(|m| m.pid),
            file: file.to_path_buf(),
            dumped_us: None,
            colls: Vec::new(),
        });
    let dumped = meta.and_then(|m| m.dump_timestamp_us);
    entry.dumped_us = entry.dumped_us.max(dumped);
    entry.colls.push(coll_of(seq, c));
}

fn coll_of(seq: u64, c: CollPerf) -> Coll {
    let ts = c.event_trace_ts;
    let kernels = ts
        .as_ref()
        .map(|t| t.kernel_events.as_slice())
        .unwrap_or(&[]);
    let nonzero = |v: Option<u64>| v.filter(|t| *t > 0);
    Coll {
        seq,
        kind: c.coll.unwrap_or_default(),
        msg_bytes: c.coll_msg_size_bytes.unwrap_or(0),
        exec_us: c.coll_exec_time_us,
        timing: c.coll_timing_source,
        busbw_gbs: c.coll_busbw_gbs.and_then(|v| v.as_f64()),
        start_us: nonzero(ts.as_ref().and_then(|t| t.coll_start_ts)),
        kernel_start_us: kernels
            .iter()
            .filter_map(|k| nonzero(k.kernel_start_ts))
            .min(),
        kernel_stop_us: kernels
            .iter()
            .filter_map(|k| nonzero(k.kernel_stop_ts))
            .max(),
    }
}

/// How late one rank of one communicator started its recent collectives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankLateness {
    pub comm: String,
    pub rank: u32,
    pub hostname: Option<String>,
    pub pid: Option<u64>,
    /// Per shared collective, oldest first: this rank's start minus the
    /// earliest rank's, in milliseconds.
    pub late_ms: Vec<f64>,
    /// The collectives' sequence numbers, as `late_ms`.
    pub seqs: Vec<u64>,
}

/// Per rank, its lateness over the last `last` collectives that every
/// rank of its communicator recorded with a start time. A collective's
/// start is its kernel's start where every rank has one (when the GPU got
/// there), else NCCL's host-side start where every rank has that; one
/// with neither on every rank is left out. A communicator with a rank
/// missing gives nothing.
pub fn lateness(ranks: &[RankComm], last: usize) -> Vec<RankLateness> {
    let mut comms: BTreeMap<&str, Vec<&RankComm>> = BTreeMap::new();
    for r in ranks {
        comms.entry(r.comm.as_str()).or_default().push(r);
    }
    comms
        .into_values()
        .flat_map(|members| comm_lateness(&members, last))
        .collect()
}

fn comm_lateness(members: &[&RankComm], last: usize) -> Vec<RankLateness> {
    let mut members: Vec<&RankComm> = members.to_vec();
    members.sort_by_key(|r| r.rank);
    members.dedup_by_key(|r| r.rank);
    let n = members.first().map_or(0, |r| r.n_ranks as usize);
    if members.len() < 2 || members.len() != n {
        return Vec::new();
    }
    let by_seq: Vec<BTreeMap<u64, &Coll>> = members
        .iter()
        .map(|r| r.colls.iter().map(|c| (c.seq, c)).collect())
        .collect();
    let mut shared: Vec<(u64, Vec<u64>)> = by_seq[0]
        .keys()
        .filter_map(|seq| {
            let colls: Option<Vec<&Coll>> = by_seq.iter().map(|m| m.get(seq).copied()).collect();
            starts(&colls?).map(|s| (*seq, s))
        })
        .collect();
    let extra = shared.len().saturating_sub(last);
    shared.drain(..extra);
    members
        .iter()
        .enumerate()
        .map(|(i, r)| RankLateness {
            comm: r.comm.clone(),
            rank: r.rank,
            hostname: r.hostname.clone(),
            pid: r.pid,
            late_ms: shared
                .iter()
                .map(|(_, s)| {
                    let first = s.iter().min().copied().unwrap_or(0);
                    s[i].saturating_sub(first) as f64 / 1000.0
                })
                .collect(),
            seqs: shared.iter().map(|(seq, _)| *seq).collect(),
        })
        .collect()
}

/// One collective's start on every rank: kernel starts if all have one,
/// else host starts if all have one.
fn starts(colls: &[&Coll]) -> Option<Vec<u64>> {
    let kernel: Option<Vec<u64>> = colls.iter().map(|c| c.kernel_start_us).collect();
    kernel.or_else(|| colls.iter().map(|c| c.start_us).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn fixture() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/nccl_inspector/three_ranks")
    }

    #[test]
    fn three_ranks_are_read_per_communicator_with_their_starts() {
        let out = read_dir(&fixture()).unwrap();
        assert!(out.unreadable.is_empty(), "{:?}", out.unreadable);
        assert_eq!(out.partial_lines, 1, "rank 2's last record is half written");
        let ranks: Vec<u32> = out.ranks.iter().map(|r| r.rank).collect();
        assert_eq!(ranks, vec![0, 1, 2]);
        let r2 = &out.ranks[2];
        assert_eq!(r2.comm, "0x7f8c496ae9f661");
        assert_eq!(r2.comm_name.as_deref(), Some("DP Group 0"));
        assert_eq!(
            (r2.hostname.as_deref(), r2.pid),
            (Some("node-b"), Some(52007))
        );
        let seqs: Vec<u64> = r2.colls.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, (100..108).collect::<Vec<_>>(), "108 is not read yet");
        let c = &r2.colls[0];
        assert_eq!((c.kind.as_str(), c.msg_bytes), ("AllReduce", 26_214_400));
        assert_eq!(c.start_us, Some(1_765_120_000_151_700));
        assert_eq!(c.kernel_start_us, Some(1_765_120_000_151_760));
        assert!(c.exec_us.is_some() && c.kernel_stop_us.is_some());
        // Rank 1's P2P record is no collective.
        assert_eq!(out.ranks[1].colls.len(), 8);
    }

    #[test]
    fn the_late_rank_is_about_150_ms_late_in_every_collective() {
        let out = read_dir(&fixture()).unwrap();
        let late = lateness(&out.ranks, 5);
        assert_eq!(late.len(), 3);
        for l in &late {
            assert_eq!(l.seqs, vec![103, 104, 105, 106, 107]);
        }
        assert!(late[0].late_ms.iter().all(|ms| *ms < 1.0), "{:?}", late[0]);
        assert!(late[1].late_ms.iter().all(|ms| *ms < 10.0), "{:?}", late[1]);
        assert!(
            late[2].late_ms.iter().all(|ms| (145.0..160.0).contains(ms)),
            "{:?}",
            late[2]
        );
    }

    #[test]
    fn a_communicator_with_a_rank_missing_gives_no_lateness() {
        let mut out = read_dir(&fixture()).unwrap();
        out.ranks.remove(1);
        assert!(lateness(&out.ranks, 5).is_empty());
    }

    #[test]
    fn host_starts_are_used_where_a_kernel_start_is_missing() {
        let mut out = read_dir(&fixture()).unwrap();
        for r in &mut out.ranks {
            r.colls[7].kernel_start_us = None;
        }
        let late = lateness(&out.ranks, 1);
        assert_eq!(late[2].seqs, vec![107]);
        assert!(
            (145.0..160.0).contains(&late[2].late_ms[0]),
            "{:?}",
            late[2]
        );
    }

    #[test]
    fn a_window_that_starts_mid_file_drops_its_first_line_and_keeps_the_recent() {
        let dir = tempfile::tempdir().unwrap();
        let src = std::fs::read_to_string(fixture().join("node-a-pid41001.log")).unwrap();
        let file = dir.path().join("h-pid1.log");
        std::fs::write(&file, &src).unwrap();
        let limits = Limits {
            tail: (src.len() / 2) as u64,
            recent: 2,
            ..Limits::default()
        };
        let out = read_dir_within(dir.path(), limits).unwrap();
        assert!(out.unreadable.is_empty(), "{:?}", out.unreadable);
        let seqs: Vec<u64> = out.ranks[0].colls.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, vec![106, 107]);
    }

    #[test]
    fn a_fifo_and_an_oversized_file_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("h-pid1.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::copy(
            fixture().join("node-a-pid41001.log"),
            dir.path().join("h-pid2.log"),
        )
        .unwrap();
        let limits = Limits {
            max_file: 1000,
            ..Limits::default()
        };
        let start = Instant::now();
        let out = read_dir_within(dir.path(), limits).unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(out.ranks.is_empty());
        assert_eq!(out.unreadable.len(), 2, "{:?}", out.unreadable);
        assert!(
            out.unreadable[0].why.contains("FIFO"),
            "{:?}",
            out.unreadable
        );
        assert!(
            out.unreadable[1].why.contains("more than"),
            "{:?}",
            out.unreadable
        );
    }

    #[test]
    fn a_nan_bandwidth_is_no_number_and_no_error() {
        let src = std::fs::read_to_string(fixture().join("node-a-pid41001.log")).unwrap();
        let line = src.lines().next().unwrap();
        let start = line.find("\"coll_busbw_gbs\":").unwrap() + "\"coll_busbw_gbs\":".len();
        let end = start + line[start..].find(',').unwrap();
        let nan = format!("{}\"nan\"{}\n", &line[..start], &line[end..]);
        let (ranks, partial) = parse_lines(Path::new("x.log"), &nan, true, 10).unwrap();
        assert!(!partial);
        assert_eq!(ranks[0].colls[0].busbw_gbs, None);
        assert_eq!(ranks[0].colls[0].seq, 100);
    }

    #[test]
    fn malformed_json_is_that_files_error_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("h-pid1.log"), "{\"header\": nope}\n{}\n").unwrap();
        std::fs::copy(
            fixture().join("node-a-pid41001.log"),
            dir.path().join("h-pid2.log"),
        )
        .unwrap();
        let out = read_dir(dir.path()).unwrap();
        assert_eq!(out.ranks.len(), 1);
        assert_eq!(out.unreadable.len(), 1);
        assert!(out.unreadable[0].file.ends_with("h-pid1.log"));
        assert!(
            out.unreadable[0].why.contains("not JSON"),
            "{:?}",
            out.unreadable
        );
        assert!(
            read_dir(&dir.path().join("h-pid2.log")).is_err(),
            "a file is no folder"
        );
    }
}

//! Reading a folder of Flight Recorder dumps, one file per rank, pickle or
//! JSON, format 2.4 to 2.10, into `domain::flight`'s plain data.
//!
//! A dump is a file from elsewhere: only regular files are opened (a FIFO
//! never blocks the read), each is size-checked before it is read and read
//! no further than [`MAX_FILE`], pickles are decoded by `fr_pickle` (which
//! never runs code) and JSON by serde_json (nesting limited to 128). One
//! bad file is that rank's error; the others are still read.
//!
//! A pickle's entries are folded into [`Entry`]s pair by pair as the
//! decoder sets them (`Entries`), never built as dicts; a JSON dump's
//! are read from its decoded dicts by the same `Building::pair`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::flight::{Dtypes, Entry, GroupConfig, GroupStatus, RankTrace, Shapes, State};
use crate::probe::fr_json;
use crate::probe::fr_pickle::{self, Fold, PVal};

/// Keys whose values no judge reads: left unread, never built (a stack of
/// 5 to 30 frames in every entry is most of a dump).
const UNREAD: &[&str] = &["frames"];

/// The largest dump read: the recorder's 2,000 entries with stacks take a
/// few MiB; 64 MiB leaves room for 20,000 entries.
pub const MAX_FILE: u64 = 64 * 1024 * 1024;
/// Most rank files read from one folder.
pub const MAX_RANKS: usize = 100_000;
/// Most entries kept from one dump.
pub const MAX_ENTRIES: usize = 100_000;

/// Every rank's dump in a folder.
#[derive(Debug, Default)]
pub struct Dumps {
    pub traces: Vec<RankTrace>,
    /// (rank, file, why) for each file that could not be read.
    pub unreadable: Vec<(u32, PathBuf, String)>,
}

/// The rank a file's name ends in: its last run of digits, before an
/// optional `.json`, `.pkl` or `.pickle`.
fn rank_of(name: &str) -> Option<u32> {
    let stem = [".json", ".pkl", ".pickle"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
        .unwrap_or(name);
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits > 9 {
        return None;
    }
    stem[stem.len() - digits..].parse().ok()
}

/// The regular files of `dir` whose name ends in a rank number, by rank.
/// Two files for one rank, or a folder that cannot be listed, is an error.
pub fn rank_files(dir: &Path) -> Result<Vec<(u32, PathBuf)>, String> {
    let key = dir.display().to_string();
    crate::seam::answer("fr_dump::rank_files", &key, || list_rank_files(dir))
}

fn list_rank_files(dir: &Path) -> Result<Vec<(u32, PathBuf)>, String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_dir() {
        return Err("not a folder".to_string());
    }
    let listing = std::fs::read_dir(dir).map_err(|e| format!("cannot list it: {e}"))?;
    let mut found: BTreeMap<u32, PathBuf> = BTreeMap::new();
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rank) = rank_of(&name) else { continue };
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        if let Some(other) = found.insert(rank, entry.path()) {
            return Err(format!(
                "two files for rank {rank}: {} and {name}",
                other.file_name().unwrap_or_default().to_string_lossy()
            ));
        }
        if found.len() > MAX_RANKS {
            return Err(format!("more than {MAX_RANKS} rank files"));
        }
    }
    Ok(found.into_iter().collect())
}

/// Read every rank's dump of `dir`, a few files at a time: each reader
/// takes the next file not yet taken, so a slow file holds up one reader
/// and never leaves the others idle. At most one file's bytes per reader
/// are held at a time.
pub fn read_dir(dir: &Path) -> Result<Dumps, String> {
    let files = rank_files(dir)?;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let take = || next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut results: Vec<(usize, Result<RankTrace, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers.min(files.len()))
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = take();
                        let Some((r, p)) = files.get(i) else { break };
                        done.push((i, read_dump(*r, p)));
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    // A reader that failed outright leaves its files unreadable, never
    // missing: a missing rank is a finding of its own.
    let mut seen = vec![false; files.len()];
    results.iter().for_each(|(i, _)| seen[*i] = true);
    let failed = (0..files.len()).filter(|i| !seen[*i]);
    results.extend(failed.map(|i| (i, Err("reading it failed".to_string()))));
    results.sort_by_key(|(i, _)| *i);
    let mut out = Dumps::default();
    for (i, r) in results {
        match r {
            Ok(t) => out.traces.push(t),
            Err(e) => out.unreadable.push((files[i].0, files[i].1.clone(), e)),
        }
    }
    Ok(out)
}

/// Read one rank's dump.
pub fn read_dump(rank: u32, path: &Path) -> Result<RankTrace, String> {
    let key = path.display().to_string();
    crate::seam::answer("fr_dump::read_dump", &key, || read_one(rank, path))
}

fn read_one(rank: u32, path: &Path) -> Result<RankTrace, String> {
    parse(rank, &path.display().to_string(), read_bounded(path)?)
}

/// One rank's dump from its bytes (pickle or JSON); `source` names where
/// they came from, for messages.
pub fn parse(rank: u32, source: &str, bytes: Vec<u8>) -> Result<RankTrace, String> {
    let mut entries = Entries::default();
    let doc = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(0x80) => fr_pickle::decode_folding(&bytes, UNREAD, Some(&mut entries))?,
        Some(b'{') => {
            fr_json::decode(&bytes, UNREAD).map_err(|e| format!("not valid JSON: {e}"))?
        }
        Some(_) => return Err("neither a pickle nor JSON".to_string()),
        None => return Err("empty".to_string()),
    };
    let mut t = normalise(&doc, entries)?;
    t.rank = rank;
    t.file = source.to_string();
    Ok(t)
}

/// The file's bytes, if it is a regular file of at most [`MAX_FILE`].
/// Checked before it is opened, and again on what was opened (without
/// blocking or following a link), in case the name changed in between.
fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    regular_and_small(&std::fs::symlink_metadata(path).map_err(|e| e.to_string())?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    regular_and_small(&meta)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_FILE)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

fn regular_and_small(meta: &std::fs::Metadata) -> Result<(), String> {
    if !meta.is_file() {
        return Err("not a regular file".to_string());
    }
    if meta.len() > MAX_FILE {
        return Err(format!(
            "{} MiB, larger than a dump can be ({} MiB)",
            meta.len() / (1024 * 1024),
            MAX_FILE / (1024 * 1024)
        ));
    }
    Ok(())
}

/// The pairs of a dict, or an error naming `what`.
fn dict<'d, 'a>(v: &'d PVal<'a>, what: &str) -> Result<&'d [(Cow<'a, str>, PVal<'a>)], String> {
    match v {
        PVal::Dict(d) => Ok(d),
        _ => Err(format!("{what} is not a dict")),
    }
}

/// A dump's entries as a pickle sets their pairs ([`Fold`]): each folded
/// straight into an [`Entry`], with no dict of it ever built.
#[derive(Default)]
struct Entries<'a> {
    shared: Shared<'a>,
    built: Vec<Building>,
}

impl<'a> Fold<'a> for Entries<'a> {
    fn key(&self) -> &str {
        "entries"
    }

    fn open(&mut self) -> Result<usize, String> {
        if self.built.len() >= MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
        self.built.push(Building::default());
        Ok(self.built.len() - 1)
    }

    fn pair(&mut self, n: usize, key: &str, value: PVal<'a>) -> Result<(), String> {
        let b = self.built.get_mut(n).ok_or("an entry never opened")?;
        b.pair(key, &value, &mut self.shared)
    }
}

fn normalise<'a>(doc: &PVal<'a>, mut folded: Entries<'a>) -> Result<RankTrace, String> {
    let top = dict(doc, "the dump").map_err(|_| "not a Flight Recorder dump (no dict at top)")?;
    let mut t = RankTrace::default();
    let mut entries = None;
    for (k, v) in top {
        match &**k {
            "version" => t.version = text(v),
            "pg_config" => t.groups = groups(v),
            "pg_status" => t.status = status(v),
            "entries" => entries = Some(v),
            _ => {}
        }
    }
    let list = match entries {
        Some(PVal::List(l)) => l,
        Some(_) => return Err("`entries` is not a list".to_string()),
        None if !t.version.is_empty() => return Ok(t),
        None => return Err("not a Flight Recorder dump (no `entries`)".to_string()),
    };
    if list.len() > MAX_ENTRIES {
        return Err(format!("more than {MAX_ENTRIES} entries"));
    }
    t.entries = list
        .iter()
        .map(|e| {
            let b = match e {
                PVal::Folded(n) => folded.built.get(*n).cloned().ok_or("never opened")?,
                other => Building::of(other, &mut folded.shared)?,
            };
            b.finish(&mut folded.shared)
        })
        .enumerate()
        .map(|(i, e)| e.map_err(|m: String| format!("entry {i}: {m}")))
        .collect::<Result<_, _>>()?;
    t.status = by_group_name(std::mem::take(&mut t.status), &folded.shared.pg_names);
    Ok(t)
}

/// `pg_status` is keyed by this process's own index of each group
/// (`pg_id`), which need not be the group's name (torch 2.15: a subgroup
/// named "2" is index 1 on its ranks): re-key it by name where the entries
/// pair the two, and drop what no entry names. Older dumps, whose entries
/// name groups by index, keep their keys.
fn by_group_name(
    status: BTreeMap<String, GroupStatus>,
    names: &HashMap<String, Arc<str>>,
) -> BTreeMap<String, GroupStatus> {
    if names.is_empty() {
        return status;
    }
    status
        .into_iter()
        .filter_map(|(k, st)| names.get(&k).map(|n| (n.to_string(), st)))
        .collect()
}

fn text(v: &PVal) -> String {
    match v {
        PVal::Str(s) => s.to_string(),
        PVal::Int(n) => n.to_string(),
        _ => String::new(),
    }
}

/// An integer that may come as a number or as text ("5", "-1"); negative
/// means none.
fn count(v: &PVal) -> Option<u64> {
    match v {
        PVal::Int(n) => u64::try_from(*n).ok(),
        PVal::Float(f) if *f >= 0.0 && f.is_finite() => Some(*f as u64),
        PVal::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn groups(v: &PVal) -> BTreeMap<String, GroupConfig> {
    let Ok(d) = dict(v, "pg_config") else {
        return BTreeMap::new();
    };
    d.iter()
        .filter_map(|(k, g)| {
            let mut cfg = GroupConfig::default();
            for (key, val) in dict(g, "a group").ok()? {
                match &**key {
                    "name" => cfg.name = text(val),
                    "desc" => cfg.desc = text(val),
                    "ranks" => cfg.ranks = ranks(val),
                    _ => {}
                }
            }
            Some((k.to_string(), cfg))
        })
        .collect()
}

/// A group's ranks: "[0, 1, 2]" as torch writes them, or a list.
fn ranks(v: &PVal) -> Vec<u32> {
    let all: Vec<u64> = match v {
        PVal::Str(s) => s
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .filter_map(|r| r.trim().parse().ok())
            .collect(),
        PVal::List(l) => l.iter().filter_map(count).collect(),
        _ => Vec::new(),
    };
    all.into_iter()
        .filter_map(|r| u32::try_from(r).ok())
        .collect()
}

fn status(v: &PVal) -> BTreeMap<String, GroupStatus> {
    let Ok(d) = dict(v, "pg_status") else {
        return BTreeMap::new();
    };
    d.iter()
        .filter_map(|(k, s)| {
            let mut st = GroupStatus::default();
            for (key, val) in dict(s, "a status").ok()? {
                match &**key {
                    "last_enqueued_collective" => st.last_enqueued = count(val),
                    "last_started_collective" => st.last_started = count(val),
                    "last_completed_collective" => st.last_completed = count(val),
                    _ => {}
                }
            }
            Some((k.to_string(), st))
        })
        .collect()
}

/// Texts, shapes and dtype lists already seen in this dump, shared by the
/// entries that repeat them. Texts are known by the input's own bytes
/// (a text copied out of it, not being UTF-8, is only looked up).
#[derive(Default)]
struct Shared<'d> {
    texts: HashMap<&'d str, Arc<str>>,
    shapes: HashMap<Vec<Vec<i64>>, Shapes>,
    dtypes: HashMap<Vec<Arc<str>>, Dtypes>,
    /// Each `pg_id` with the group name its entries give it.
    pg_names: HashMap<String, Arc<str>>,
}

impl<'d> Shared<'d> {
    fn text(&mut self, v: &PVal<'d>) -> Arc<str> {
        match v {
            PVal::Str(Cow::Borrowed(s)) => self.borrowed(s),
            PVal::Str(Cow::Owned(s)) => self
                .texts
                .get(s.as_str())
                .cloned()
                .unwrap_or_else(|| Arc::from(&**s)),
            other => Arc::from(text(other)),
        }
    }

    fn borrowed(&mut self, s: &'d str) -> Arc<str> {
        self.texts.entry(s).or_insert_with(|| Arc::from(s)).clone()
    }

    fn shapes(&mut self, v: &PVal) -> Result<Shapes, String> {
        let PVal::List(list) = v else {
            return Ok(Shapes::default());
        };
        if list.len() > MAX_SHAPES {
            return Err(format!("more than {MAX_SHAPES} tensor shapes"));
        }
        let shapes = list
            .iter()
            .map(|s| match s {
                PVal::List(d) => Ok(d
                    .iter()
                    .filter_map(|x| match x {
                        PVal::Int(i) => Some(*i),
                        _ => None,
                    })
                    .collect()),
                _ => Err("a tensor shape that is not a list".to_string()),
            })
            .collect::<Result<Vec<Vec<i64>>, String>>()?;
        Ok(self
            .shapes
            .entry(shapes)
            .or_insert_with_key(|k| Arc::new(k.clone()))
            .clone())
    }

    /// A list of dtype names, or one name as a plain string (older
    /// writers; PyTorch's own analyzer tests write `"float32"`).
    fn dtypes(&mut self, v: &PVal<'d>) -> Dtypes {
        let names: Vec<Arc<str>> = match v {
            PVal::List(list) => list.iter().take(MAX_SHAPES).map(|d| self.text(d)).collect(),
            PVal::Str(s) if !s.trim().is_empty() => vec![self.text(v)],
            _ => return Dtypes::default(),
        };
        self.dtypes
            .entry(names)
            .or_insert_with_key(|k| Arc::new(k.clone()))
            .clone()
    }
}

/// One entry as its pairs arrive, in any order: an [`Entry`] and the
/// fields that are only known once all have.
#[derive(Default, Clone)]
struct Building {
    e: Entry,
    created: Option<u64>,
    seq: Option<u64>,
    seq_id: Option<u64>,
    pg_id: Option<Arc<str>>,
    is_p2p: Option<bool>,
}

impl Building {
    /// An entry that was decoded as a dict (a JSON dump's).
    fn of<'d>(v: &PVal<'d>, shared: &mut Shared<'d>) -> Result<Building, String> {
        let mut b = Building::default();
        for (k, val) in dict(v, "the entry")? {
            b.pair(k, val, shared)?;
        }
        Ok(b)
    }

    fn pair<'d>(&mut self, k: &str, val: &PVal<'d>, shared: &mut Shared<'d>) -> Result<(), String> {
        let e = &mut self.e;
        match k {
            "time_created_ns" => {
                self.created = Some(count(val).ok_or("time_created_ns is not a number")?);
            }
            "collective_seq_id" => self.seq = count(val),
            "seq_id" => self.seq_id = count(val),
            "pg_id" => self.pg_id = Some(shared.text(val)),
            "process_group" => {
                if let PVal::List(pg) = val {
                    e.group = pg.first().map(|g| shared.text(g)).unwrap_or_default();
                    e.group_desc = pg.get(1).map(|g| shared.text(g)).unwrap_or_default();
                }
            }
            "profiling_name" => e.op = op_of(val, shared),
            "record_id" => e.record_id = count(val).unwrap_or(0),
            "p2p_seq_id" => e.p2p_seq = count(val).unwrap_or(0),
            "input_sizes" => e.input_sizes = shared.shapes(val)?,
            "input_dtypes" => e.input_dtypes = shared.dtypes(val),
            "output_sizes" => e.output_sizes = shared.shapes(val)?,
            "output_dtypes" => e.output_dtypes = shared.dtypes(val),
            "state" => e.state = state(val),
            "retired" => e.retired = matches!(val, PVal::Bool(true)),
            "time_discovered_completed_ns" => e.time_completed_ns = count(val).filter(|t| *t > 0),
            "duration_ms" => e.duration_ms = number(val),
            "timeout_ms" => e.timeout_ms = count(val),
            "is_p2p" => self.is_p2p = Some(matches!(val, PVal::Bool(true))),
            _ => {}
        }
        Ok(())
    }

    fn finish(self, shared: &mut Shared) -> Result<Entry, String> {
        let mut e = self.e;
        e.time_created_ns = self.created.ok_or("no time_created_ns")?;
        e.collective_seq = self.seq.or(self.seq_id).unwrap_or(0);
        match self.pg_id {
            Some(id) if e.group.is_empty() => e.group = id,
            Some(id) => {
                let name = Arc::clone(&e.group);
                shared.pg_names.entry(id.to_string()).or_insert(name);
            }
            None => {}
        }
        e.is_p2p = self.is_p2p.unwrap_or(matches!(&*e.op, "send" | "recv"));
        Ok(e)
    }
}

/// `profiling_name` without its backend prefix.
fn op_of<'d>(v: &PVal<'d>, shared: &mut Shared<'d>) -> Arc<str> {
    match v {
        PVal::Str(Cow::Borrowed(name)) => {
            shared.borrowed(name.split_once(':').map_or(*name, |(_, op)| op))
        }
        other => {
            let name = text(other);
            Arc::from(name.split_once(':').map_or(name.as_str(), |(_, op)| op))
        }
    }
}

fn state(v: &PVal) -> State {
    match v {
        PVal::Str(s) if &**s == "completed" => State::Completed,
        PVal::Str(s) if &**s == "started" => State::Started,
        _ => State::Scheduled,
    }
}

fn number(v: &PVal) -> Option<f64> {
    match v {
        PVal::Float(f) => Some(*f),
        PVal::Int(i) => Some(*i as f64),
        _ => None,
    }
}

/// Kept shapes per tensor list: more is no dump.
const MAX_SHAPES: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_rank_is_its_last_digits() {
        assert_eq!(rank_of("nccl_trace_rank_7"), Some(7));
        assert_eq!(rank_of("_dump_12"), Some(12));
        assert_eq!(rank_of("fr_3.json"), Some(3));
        assert_eq!(rank_of("rank12.pkl"), Some(12));
        assert_eq!(rank_of("notes.txt"), None);
        assert_eq!(rank_of("x_12345678901234"), None);
    }

    #[test]
    fn older_key_names_read() {
        let doc = serde_json::json!({"version": "2.4", "entries": [
            {"seq_id": 3, "pg_id": 0, "profiling_name": "nccl:all_reduce",
             "time_created_ns": 5, "state": "completed", "input_sizes": [[4]]}
        ]});
        let t = normalise(&PVal::from_json(doc), Entries::default()).expect("reads");
        assert_eq!(t.entries[0].collective_seq, 3);
        assert_eq!(&*t.entries[0].group, "0");
        assert_eq!(&*t.entries[0].op, "all_reduce");
    }

    #[test]
    fn pg_status_is_keyed_by_the_group_name_its_entries_give_its_pg_id() {
        // torch 2.15: subgroup "2" is this process's pg_id 1.
        let doc = serde_json::json!({"version": "2.10",
        "pg_status": {"0": {"last_enqueued_collective": "5"},
                      "1": {"last_enqueued_collective": "3"}},
        "entries": [
            {"pg_id": 0, "process_group": ["0", "default_pg"], "time_created_ns": 1},
            {"pg_id": 1, "process_group": ["2", "undefined"], "time_created_ns": 2}
        ]});
        let t = normalise(&PVal::from_json(doc), Entries::default()).expect("reads");
        assert_eq!(t.status["2"].last_enqueued, Some(3));
        assert_eq!(t.status["0"].last_enqueued, Some(5));
        assert!(!t.status.contains_key("1"));
    }

    #[test]
    fn dtypes_read_as_a_list_or_as_one_plain_name() {
        let doc = serde_json::json!({"version": "2.8", "entries": [
            {"collective_seq_id": "1", "process_group": ["0", "default"],
             "profiling_name": "nccl:all_reduce", "time_created_ns": 0,
             "input_sizes": [[4, 4]], "output_sizes": [[4, 4]],
             "input_dtypes": "float32", "output_dtypes": ""},
            {"collective_seq_id": 2, "process_group": ["0", "default"],
             "profiling_name": "gloo:broadcast", "time_created_ns": 0,
             "input_dtypes": ["Float", "Double"], "output_dtypes": ["Float"]}
        ]});
        let t = normalise(&PVal::from_json(doc), Entries::default()).expect("reads");
        let names = |d: &Dtypes| d.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&t.entries[0].input_dtypes), ["float32"]);
        assert!(t.entries[0].output_dtypes.is_empty());
        assert_eq!(t.entries[0].output_sizes.as_slice(), [vec![4, 4]]);
        assert_eq!(t.entries[0].collective_seq, 1);
        assert_eq!(names(&t.entries[1].input_dtypes), ["Float", "Double"]);
        assert_eq!(names(&t.entries[1].output_dtypes), ["Float"]);
    }

    #[test]
    fn wrong_types_are_named() {
        let doc = serde_json::json!({"entries": "all"});
        let e = normalise(&PVal::from_json(doc), Entries::default()).expect_err("refused");
        assert!(e.contains("entries"), "{e}");
        let doc = serde_json::json!({"entries": [{"time_created_ns": "soon"}]});
        let e = normalise(&PVal::from_json(doc), Entries::default()).expect_err("refused");
        assert!(e.contains("time_created_ns"), "{e}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("rank_0");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        assert!(read_dump(0, &fifo)
            .expect_err("refused")
            .contains("regular"));
        let big = dir.path().join("rank_1");
        std::fs::File::create(&big)
            .and_then(|f| f.set_len(MAX_FILE + 1))
            .expect("sparse");
        assert!(read_dump(1, &big).expect_err("refused").contains("larger"));
    }

    #[test]
    fn a_real_torch_dump_reads_its_key_fields() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/flight_recorder"
        );
        let path = format!("{dir}/finished/comm_lib_trace_rank_1");
        let t = read_dump(1, Path::new(&path)).expect("reads");
        assert_eq!((t.rank, t.version.as_str()), (1, "2.10"));
        assert_eq!(t.groups[""].ranks, [0, 1, 2]);
        assert_eq!(t.status["0"].last_completed, Some(8));
        assert_eq!(t.entries.len(), 8);
        let e = &t.entries[0];
        assert_eq!(
            (&*e.op, &*e.group, &*e.group_desc),
            ("all_reduce", "0", "default_pg")
        );
        assert_eq!(
            (e.collective_seq, e.record_id, e.state),
            (1, 0, State::Scheduled)
        );
        assert_eq!(e.input_sizes.as_slice(), [vec![4]]);
        assert_eq!(&*e.input_dtypes[0], "Float");
        assert_eq!(e.time_created_ns, 1_796_623_437_324_439_110);
        assert_eq!(e.timeout_ms, Some(10_000));
        assert!(e.retired && !e.is_p2p);
        let last = &t.entries[7];
        assert_eq!((&*last.op, last.collective_seq), ("barrier", 8));
        // The JSON dump of the same kind of job reads alike.
        let json = format!("{dir}/straggler-json/comm_lib_trace_rank_0.json");
        let j = read_dump(0, Path::new(&json)).expect("reads");
        assert_eq!(j.entries.len(), 45);
        assert_eq!(j.status["0"].last_enqueued, Some(45));
        assert_eq!(&*j.entries[0].op, "all_reduce");
    }

    #[test]
    fn entries_folded_as_a_pickle_sets_them_read_as_entries_built_as_dicts() {
        let root = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/flight_recorder"
        );
        let mut compared = 0;
        for dir in std::fs::read_dir(root).expect("fixtures").flatten() {
            let Ok(files) = rank_files(&dir.path()) else {
                continue;
            };
            for (rank, path) in files {
                let bytes = std::fs::read(&path).expect("reads");
                if bytes.first() != Some(&0x80) {
                    continue;
                }
                let doc = fr_pickle::decode(&bytes, UNREAD).expect("decodes");
                let mut built = normalise(&doc, Entries::default()).expect("normalises");
                built.rank = rank;
                built.file = path.display().to_string();
                let folded = read_dump(rank, &path).expect("reads");
                assert_eq!(folded, built, "{}", path.display());
                compared += 1;
            }
        }
        assert!(compared >= 40, "{compared} pickles compared");
    }

    #[test]
    fn entries_past_the_most_kept_are_refused_before_they_are_folded() {
        // One byte a new entry, each of which costs an entry's room where
        // it is folded; all thrown away (POP_MARK) before the list is
        // ever added to, so the list's own length never shows them.
        let mut p = b"\x80\x02}X\x07\x00\x00\x00entries](".to_vec();
        p.extend(std::iter::repeat_n(b'}', MAX_ENTRIES + 1));
        p.extend(b"1s.");
        let e = parse(0, "x", p).expect_err("refused");
        assert!(e.contains("more than 100000 entries"), "{e}");
    }

    #[test]
    fn a_bad_dump_is_its_ranks_error() {
        assert!(parse(0, "x", b"\x80\x02}.".to_vec())
            .expect_err("no entries")
            .contains("entries"));
        assert!(parse(0, "x", b"{\"entries\": [".to_vec())
            .expect_err("truncated")
            .contains("JSON"));
        assert!(parse(0, "x", b"\x80\x02]q\x00(".to_vec())
            .expect_err("truncated")
            .contains("truncated"));
        assert!(parse(0, "x", b"  ".to_vec())
            .expect_err("empty")
            .contains("empty"));
        // Frames of any shape are left unread, never an error.
        let odd = br#"{"version": "2.10", "entries": [{"time_created_ns": 1, "frames": 5}]}"#;
        assert_eq!(parse(0, "x", odd.to_vec()).expect("reads").entries.len(), 1);
    }
}

//! Reading a folder of Flight Recorder dumps, one file per rank, pickle or
//! JSON, format 2.4 to 2.10, into `domain::flight`'s plain data.
//!
//! A dump is a file from elsewhere: only regular files are opened (a FIFO
//! never blocks the read), each is size-checked before it is read and read
//! no further than [`MAX_FILE`], pickles are decoded by `fr_pickle` (which
//! never runs code) and JSON by serde_json (nesting limited to 128). One
//! bad file is that rank's error; the others are still read.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::domain::flight::{Entry, GroupConfig, GroupStatus, RankTrace, State};
use crate::probe::fr_pickle;

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

/// Read every rank's dump of `dir`, a few files at a time.
pub fn read_dir(dir: &Path) -> Result<Dumps, String> {
    let files = rank_files(dir)?;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let chunk = files.len().div_ceil(workers).max(1);
    let results: Vec<Result<RankTrace, (u32, PathBuf, String)>> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|(r, p)| read_dump(*r, p).map_err(|e| (*r, p.clone(), e)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut out = Dumps::default();
    for r in results {
        match r {
            Ok(t) => out.traces.push(t),
            Err(e) => out.unreadable.push(e),
        }
    }
    Ok(out)
}

/// Read one rank's dump.
pub fn read_dump(rank: u32, path: &Path) -> Result<RankTrace, String> {
    let bytes = read_bounded(path)?;
    let doc: Value = match bytes.first() {
        Some(0x80) => fr_pickle::decode(&bytes)?,
        Some(b'{') | Some(b' ') | Some(b'\n') => {
            serde_json::from_slice(&bytes).map_err(|e| format!("not valid JSON: {e}"))?
        }
        Some(_) => return Err("neither a pickle nor JSON".to_string()),
        None => return Err("empty".to_string()),
    };
    let mut t = normalise(&doc)?;
    t.rank = rank;
    t.file = path.display().to_string();
    Ok(t)
}

/// The file's bytes, if it is a regular file of at most [`MAX_FILE`].
fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
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
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

fn normalise(doc: &Value) -> Result<RankTrace, String> {
    let top = doc
        .as_object()
        .ok_or("not a Flight Recorder dump (no dict at top)")?;
    let entries = match top.get("entries") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err("`entries` is not a list".to_string()),
        None if top.contains_key("version") => return Ok(RankTrace::default()),
        None => return Err("not a Flight Recorder dump (no `entries`)".to_string()),
    };
    if entries.len() > MAX_ENTRIES {
        return Err(format!("more than {MAX_ENTRIES} entries"));
    }
    Ok(RankTrace {
        version: text(top.get("version")),
        groups: groups(top.get("pg_config")),
        status: status(top.get("pg_status")),
        entries: entries
            .iter()
            .enumerate()
            .map(|(i, e)| entry(e).map_err(|m| format!("entry {i}: {m}")))
            .collect::<Result<_, _>>()?,
        ..RankTrace::default()
    })
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// An integer that may come as a number or as text ("5", "-1"); negative
/// means none.
fn count(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn groups(v: Option<&Value>) -> BTreeMap<String, GroupConfig> {
    let Some(Value::Object(m)) = v else {
        return BTreeMap::new();
    };
    m.iter()
        .filter_map(|(k, g)| {
            let g = g.as_object()?;
            let ranks = match g.get("ranks") {
                Some(Value::String(s)) => parse_ranks(s),
                Some(Value::Array(a)) => a.iter().filter_map(|r| count(Some(r))).collect(),
                _ => Vec::new(),
            };
            Some((
                k.clone(),
                GroupConfig {
                    name: text(g.get("name")),
                    desc: text(g.get("desc")),
                    ranks: ranks
                        .into_iter()
                        .filter_map(|r| u32::try_from(r).ok())
                        .collect(),
                },
            ))
        })
        .collect()
}

/// "[0, 1, 2]" as torch writes a group's ranks.
fn parse_ranks(s: &str) -> Vec<u64> {
    s.trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect()
}

fn status(v: Option<&Value>) -> BTreeMap<String, GroupStatus> {
    let Some(Value::Object(m)) = v else {
        return BTreeMap::new();
    };
    m.iter()
        .filter_map(|(k, s)| {
            let s = s.as_object()?;
            Some((
                k.clone(),
                GroupStatus {
                    last_enqueued: count(s.get("last_enqueued_collective")),
                    last_started: count(s.get("last_started_collective")),
                    last_completed: count(s.get("last_completed_collective")),
                },
            ))
        })
        .collect()
}

fn entry(v: &Value) -> Result<Entry, String> {
    let e = v.as_object().ok_or("not a dict")?;
    let created = e.get("time_created_ns").ok_or("no time_created_ns")?;
    let time_created_ns = count(Some(created)).ok_or("time_created_ns is not a number")?;
    let (group, group_desc) = match e.get("process_group") {
        Some(Value::Array(pg)) => (text(pg.first()), text(pg.get(1))),
        _ => (text(e.get("pg_id")), String::new()),
    };
    let profiling_name = text(e.get("profiling_name"));
    let op = profiling_name
        .split_once(':')
        .map_or(profiling_name.as_str(), |(_, op)| op)
        .to_string();
    let seq = e.get("collective_seq_id").or_else(|| e.get("seq_id"));
    let is_p2p = match e.get("is_p2p") {
        Some(Value::Bool(b)) => *b,
        _ => matches!(op.as_str(), "send" | "recv"),
    };
    Ok(Entry {
        record_id: count(e.get("record_id")).unwrap_or(0),
        group,
        group_desc,
        collective_seq: count(seq).unwrap_or(0),
        p2p_seq: count(e.get("p2p_seq_id")).unwrap_or(0),
        op_id: count(e.get("op_id")).unwrap_or(0),
        op,
        profiling_name,
        input_sizes: shapes(e.get("input_sizes"))?,
        input_dtypes: strings(e.get("input_dtypes")),
        output_sizes: shapes(e.get("output_sizes"))?,
        output_dtypes: strings(e.get("output_dtypes")),
        state: match text(e.get("state")).as_str() {
            "completed" => State::Completed,
            "started" => State::Started,
            _ => State::Scheduled,
        },
        retired: matches!(e.get("retired"), Some(Value::Bool(true))),
        time_created_ns,
        time_started_ns: count(e.get("time_discovered_started_ns")).filter(|t| *t > 0),
        time_completed_ns: count(e.get("time_discovered_completed_ns")).filter(|t| *t > 0),
        duration_ms: e.get("duration_ms").and_then(Value::as_f64),
        timeout_ms: count(e.get("timeout_ms")),
        is_p2p,
    })
}

/// Kept shapes per tensor list: more is no dump.
const MAX_SHAPES: usize = 4096;

fn shapes(v: Option<&Value>) -> Result<Vec<Vec<i64>>, String> {
    let Some(Value::Array(list)) = v else {
        return Ok(Vec::new());
    };
    if list.len() > MAX_SHAPES {
        return Err(format!("more than {MAX_SHAPES} tensor shapes"));
    }
    list.iter()
        .map(|s| match s {
            Value::Array(d) => Ok(d.iter().filter_map(Value::as_i64).collect()),
            _ => Err("a tensor shape that is not a list".to_string()),
        })
        .collect()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a.iter().take(MAX_SHAPES).map(|s| text(Some(s))).collect(),
        _ => Vec::new(),
    }
}

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
        let t = normalise(&doc).expect("reads");
        assert_eq!(t.entries[0].collective_seq, 3);
        assert_eq!(t.entries[0].group, "0");
        assert_eq!(t.entries[0].op, "all_reduce");
    }

    #[test]
    fn wrong_types_are_named() {
        let doc = serde_json::json!({"entries": "all"});
        assert!(normalise(&doc).expect_err("refused").contains("entries"));
        let doc = serde_json::json!({"entries": [{"time_created_ns": "soon"}]});
        assert!(normalise(&doc)
            .expect_err("refused")
            .contains("time_created_ns"));
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
}

//! `gpucheck job --traces DIR` through the real binary, on real Flight
//! Recorder dumps that torch 2.15's gloo wrote from small misbehaving jobs
//! (`tests/fixtures/flight_recorder/`, made by its `make.py`; `CASES.md`
//! there is the ground truth), in pickle and in JSON, and on hostile files
//! written here: the ranks named, the collective, the exit code, and that
//! no healthy rank is ever blamed.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;

fn fixture(case: &str) -> PathBuf {
    root().join("tests/fixtures/flight_recorder").join(case)
}

fn job(dir: &Path, extra: &[&str]) -> Output {
    gpucheck()
        .args(["job", "--traces"])
        .arg(dir)
        .args(extra)
        .output()
        .expect("gpucheck runs")
}

/// `gpucheck job --traces DIR --json -`: exit code and the validated report.
fn judged(dir: &Path) -> (i32, serde_json::Value) {
    let out = job(dir, &["--json", "-"]);
    let doc = assert_valid_json_report(&stdout(&out));
    (out.status.code().unwrap_or(-1), doc)
}

fn ranks(doc: &serde_json::Value, id: &str) -> Vec<u64> {
    result(doc, id)["ranks"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .unwrap_or_default()
}

/// What a case must come out as.
struct Case {
    name: &'static str,
    exit: i32,
    /// job.hang's status and blamed ranks.
    hang: (&'static str, &'static [u64]),
    /// The collective job.hang names: (op, seq).
    at: Option<(&'static str, u64)>,
    /// job.straggler's blamed ranks.
    stragglers: &'static [u64],
}

const CASES: &[Case] = &[
    Case {
        name: "healthy",
        exit: 0,
        hang: ("pass", &[]),
        at: None,
        stragglers: &[],
    },
    Case {
        name: "skip",
        exit: 1,
        hang: ("fail", &[2]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "skip-timeout",
        exit: 1,
        hang: ("fail", &[2]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "wrong_op",
        exit: 1,
        hang: ("fail", &[1]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "wrong_size",
        exit: 1,
        hang: ("fail", &[0]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "wrong_dtype",
        exit: 1,
        hang: ("fail", &[2]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "sleep",
        exit: 1,
        hang: ("fail", &[1]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "ddp_sleep",
        exit: 1,
        hang: ("fail", &[0]),
        at: Some(("all_reduce", 16)),
        stragglers: &[],
    },
    Case {
        name: "two_ranks_mismatch",
        exit: 1,
        hang: ("fail", &[0, 1]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "subgroup",
        exit: 1,
        hang: ("fail", &[3]),
        at: Some(("all_reduce", 4)),
        stragglers: &[],
    },
    // Caught in flight, with nothing in the dumps that says it stopped.
    Case {
        name: "all_stuck",
        exit: 0,
        hang: ("warn", &[]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "two_groups",
        exit: 1,
        hang: ("fail", &[1, 3]),
        at: Some(("all_reduce", 3)),
        stragglers: &[],
    },
    // Named once, as a warning: the job went on.
    Case {
        name: "late_once",
        exit: 0,
        hang: ("pass", &[]),
        at: None,
        stragglers: &[2],
    },
    Case {
        name: "finished",
        exit: 0,
        hang: ("pass", &[]),
        at: None,
        stragglers: &[],
    },
    Case {
        name: "missing_rank",
        exit: 1,
        hang: ("fail", &[2]),
        at: Some(("all_reduce", 6)),
        stragglers: &[],
    },
    Case {
        name: "straggler",
        exit: 1,
        hang: ("pass", &[]),
        at: None,
        stragglers: &[3],
    },
    Case {
        name: "straggler_once",
        exit: 0,
        hang: ("pass", &[]),
        at: None,
        stragglers: &[],
    },
];

fn assert_case(case: &Case, dir: &Path) {
    let (code, doc) = judged(dir);
    let what = format!("{} ({})", case.name, dir.display());
    assert_eq!(code, case.exit, "{what}: exit code; {doc:#}");
    assert_eq!(status_of(&doc, "job.hang"), case.hang.0, "{what}: {doc:#}");
    assert_eq!(ranks(&doc, "job.hang"), case.hang.1, "{what}: blamed ranks");
    if let Some((op, seq)) = case.at {
        let c = &result(&doc, "job.hang")["collective"];
        assert_eq!(c["op"], op, "{what}: {c}");
        assert_eq!(c["seq"], seq, "{what}: {c}");
    }
    assert_eq!(
        ranks(&doc, "job.straggler"),
        case.stragglers,
        "{what}: stragglers; {}",
        text_field(&doc, "job.straggler", "summary")
    );
    assert_eq!(doc["exit_code"], case.exit, "{what}");
}

#[test]
fn every_case_names_exactly_the_ranks_at_fault_in_pickle_and_json() {
    for case in CASES {
        assert_case(case, &fixture(case.name));
        assert_case(case, &fixture(&format!("{}-json", case.name)));
    }
}

/// JSON dumps in the shapes of PyTorch's own analyzer tests
/// (test/distributed/flight_recorder/test_fr_analysis.py): dtypes as plain
/// strings, sequence ids as text, an uneven all-gather as coalesced
/// out-of-place broadcasts.
const ANALYZER_CASES: &[Case] = &[
    Case {
        name: "analyzer_dtype-json",
        exit: 1,
        hang: ("fail", &[2]),
        at: Some(("all_reduce", 3)),
        stragglers: &[],
    },
    Case {
        name: "analyzer_coalesced-json",
        exit: 1,
        hang: ("fail", &[1]),
        at: Some(("ALLGATHER_coalesced", 3)),
        stragglers: &[],
    },
];

#[test]
fn the_analyzers_own_formats_name_the_odd_rank() {
    for case in ANALYZER_CASES {
        assert_case(case, &fixture(case.name));
    }
    let out = job(&fixture("analyzer_dtype-json"), &[]);
    let text = stdout(&out);
    assert!(
        text.contains("rank 2 called all_reduce [4, 4] float64 as #3 of group 0 (default)"),
        "{text}"
    );
    let out = job(&fixture("analyzer_coalesced-json"), &[]);
    let text = stdout(&out);
    assert!(
        text.contains(
            "rank 1 called _broadcast_oop [5, 5] float32 as op 2 of 2 in ALLGATHER_coalesced #3"
        ),
        "{text}"
    );
}

#[test]
fn two_groups_name_each_their_own_culprit_and_no_waiting_rank() {
    for case in ["two_groups", "two_groups-json"] {
        let out = job(&fixture(case), &[]);
        let text = stdout(&out);
        assert!(
            text.contains(
                "rank 1 never joined all_reduce #3 of group 1 (ranks 0, 1): rank 0 waits in it"
            ) && text.contains(
                "rank 3 never joined all_reduce #3 of group 2 (ranks 2, 3): rank 2 waits in it"
            ),
            "{text}"
        );
        assert!(text.contains("holds up"), "{text}");
    }
}

#[test]
fn a_single_late_entry_of_seconds_is_named_with_its_collective() {
    let (_, doc) = judged(&fixture("late_once"));
    assert_eq!(status_of(&doc, "job.straggler"), "warn", "{doc:#}");
    let summary = text_field(&doc, "job.straggler", "summary");
    assert!(
        summary.starts_with("rank 2 entered all_reduce #7 of group 0 (default_pg) 3.")
            && summary.ends_with(" s after ranks 0, 1"),
        "{summary}"
    );
    // The job went on: nothing to restart.
    assert_eq!(result(&doc, "job.straggler")["action"], "none", "{doc:#}");
}

#[test]
fn a_finished_or_running_job_is_never_called_hung_and_no_table_is_empty() {
    // A gloo job that ended normally, dumped as its last barrier returned.
    let out = job(&fixture("finished"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(!text.contains("did not finish"), "{text}");
    // Caught in flight: every rank named in the words, none blamed, and
    // no empty table.
    let out = job(&fixture("all_stuck"), &[]);
    let text = stdout(&out);
    assert!(
        text.contains("every rank (0-2) is inside all_reduce #6 of group 0 (default_pg) alike"),
        "{text}"
    );
    assert!(!text.contains("Ranks at the wavefront"), "{text}");
    let (_, doc) = judged(&fixture("all_stuck"));
    assert_eq!(result(&doc, "job.hang")["action"], "none", "{doc:#}");
}

#[test]
fn the_table_names_the_rank_the_collective_and_what_the_others_do() {
    let out = job(&fixture("skip"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "rank 2 never joined all_reduce #6 of group 0 (default_pg): ranks 0, 1 wait in it"
        ),
        "{text}"
    );
    assert!(text.contains("last enqueued all_reduce #5"), "{text}");
    assert!(
        text.contains("NOT READY") || text.contains("1 failed"),
        "{text}"
    );
}

#[test]
fn json_on_stdout_blames_the_same_ranks_as_json_in_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("job.json");
    let out = job(
        &fixture("skip"),
        &["--json", file.to_str().unwrap_or_default()],
    );
    let from_file = assert_valid_json_report(&std::fs::read_to_string(&file).expect("written"));
    let (code, from_stdout) = judged(&fixture("skip"));
    assert_eq!(out.status.code(), Some(code));
    assert_eq!(
        ranks(&from_file, "job.hang"),
        ranks(&from_stdout, "job.hang")
    );
    assert_eq!(from_file["exit_code"], from_stdout["exit_code"]);
}

/// A copy of a fixture case in a temporary folder, less some ranks' files.
fn copy_without(case: &str, drop_ranks: &[u32]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for e in std::fs::read_dir(fixture(case)).expect("fixture").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let stem = name.trim_end_matches(".json");
        let rank: Option<u32> = stem.rsplit('_').next().and_then(|r| r.parse().ok());
        if rank.is_some_and(|r| drop_ranks.contains(&r)) {
            continue;
        }
        std::fs::copy(e.path(), dir.path().join(&name)).expect("copy");
    }
    dir
}

#[test]
fn a_missing_rank_is_named_and_never_a_healthy_one_blamed() {
    // The rank at fault left no dump: the others wait for it.
    let dir = copy_without("skip", &[2]);
    let (code, doc) = judged(dir.path());
    assert_eq!(code, 1);
    assert_eq!(ranks(&doc, "job.hang"), [2], "{doc:#}");
    assert!(text_field(&doc, "job.hang", "summary").contains("rank 2 never joined"));
    assert_eq!(status_of(&doc, "job.traces"), "warn");
    assert_eq!(ranks(&doc, "job.traces"), [2]);
    // A healthy rank left no dump: the one at fault is still named alone.
    let dir = copy_without("skip", &[1]);
    let (code, doc) = judged(dir.path());
    assert_eq!(code, 1);
    assert_eq!(ranks(&doc, "job.hang"), [2], "{doc:#}");
    assert!(text_field(&doc, "job.traces", "summary").contains("rank 1 of 3 left no dump"));
}

#[test]
fn pickle_and_json_dumps_mix_in_one_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (case, rank) in [("skip", 0), ("skip-json", 1), ("skip", 2)] {
        let src = std::fs::read_dir(fixture(case))
            .expect("fixture")
            .flatten()
            .find(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.trim_end_matches(".json").ends_with(&format!("_{rank}"))
            })
            .expect("the rank's file");
        std::fs::copy(src.path(), dir.path().join(src.file_name())).expect("copy");
    }
    let (code, doc) = judged(dir.path());
    assert_eq!((code, ranks(&doc, "job.hang")), (1, vec![2]), "{doc:#}");
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    let mut f = std::fs::File::create(dir.join(name)).expect("create");
    f.write_all(bytes).expect("write");
}

/// Peak resident memory of the largest child this test binary waited for,
/// MiB (no other test here starts a large one).
fn children_peak_mib() -> i64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    usage.ru_maxrss / 1024
}

#[test]
fn hostile_dumps_are_refused_by_name_and_nothing_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    // The healthy ranks: two real dumps.
    for e in std::fs::read_dir(fixture("healthy"))
        .expect("fixture")
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.ends_with("_0") || n.ends_with("_1") {
            std::fs::copy(e.path(), dir.path().join(&n)).expect("copy");
        }
    }
    // Would run `touch marker` under pickle.load.
    let code = format!("cos\nsystem\n(S'touch {}'\ntR.", marker.display());
    write(dir.path(), "rank_2", code.as_bytes());
    // Truncated, and nested a million deep.
    write(
        dir.path(),
        "rank_3",
        b"\x80\x02}q\x00(X\x07\x00\x00\x00version",
    );
    let mut deep = b"\x80\x02".to_vec();
    deep.extend(std::iter::repeat_n(b']', 1_000_000));
    write(dir.path(), "rank_4", &deep);
    // A memo bomb: each list holds its predecessor ten times.
    let mut bomb = b"\x80\x02]q\x00".to_vec();
    for i in 1..=40u8 {
        bomb.extend(b"(");
        bomb.extend(std::iter::repeat_n([b'h', i - 1], 10).flatten());
        bomb.extend([b'l', b'q', i]);
    }
    bomb.push(b'.');
    write(dir.path(), "rank_5", &bomb);
    // Wrong types, in JSON.
    write(
        dir.path(),
        "rank_6.json",
        br#"{"version": "2.10", "entries": "all of them"}"#,
    );
    // 200 MB, sparse.
    let big = std::fs::File::create(dir.path().join("rank_7")).expect("create");
    big.set_len(200 * 1024 * 1024).expect("sparse file");
    let started = Instant::now();
    let (code, doc) = judged(dir.path());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(!marker.exists(), "the pickle's code ran");
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(status_of(&doc, "job.traces"), "fail");
    assert_eq!(ranks(&doc, "job.traces"), [2, 3, 4, 5, 6, 7], "{doc:#}");
    assert!(text_field(&doc, "job.traces", "summary").contains("rank_2"));
    // The healthy ranks are never the ones blamed.
    for r in ranks(&doc, "job.hang") {
        assert!(r >= 2, "healthy rank {r} blamed: {doc:#}");
    }
    assert!(children_peak_mib() < 256, "{} MiB", children_peak_mib());
}

fn assert_usage_error(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.lines().next().is_some_and(|l| l.contains(needle)),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_folder_without_rank_dumps_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "notes.txt", b"hello");
    assert_usage_error(&job(dir.path(), &[]), "no rank's dump");
    assert_usage_error(&job(&dir.path().join("nowhere"), &[]), "--traces");
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let started = Instant::now();
    assert_usage_error(&job(&fifo, &[]), "--traces");
    assert!(started.elapsed() < Duration::from_secs(5));
    let out = gpucheck().arg("job").output().expect("runs");
    assert_usage_error(&out, "--traces");
}

#[test]
fn list_and_explain_know_the_job_checks() {
    let out = gpucheck().arg("list").output().expect("runs");
    let text = stdout(&out);
    for id in ["job.traces", "job.hang", "job.straggler"] {
        assert!(text.contains(id), "{text}");
    }
    let out = gpucheck()
        .args(["explain", "job.hang"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("wavefront"));
}

/// A JSON dump rewritten in an older format's key names (2.4: `seq_id`,
/// `pg_id` without `process_group`, no `pg_status`, no `is_p2p`).
fn as_format_2_4(doc: &mut serde_json::Value) {
    doc["version"] = "2.4".into();
    if let Some(top) = doc.as_object_mut() {
        top.remove("pg_status");
    }
    for e in doc["entries"].as_array_mut().into_iter().flatten() {
        let Some(e) = e.as_object_mut() else { continue };
        if let Some(seq) = e.remove("collective_seq_id") {
            e.insert("seq_id".into(), seq);
        }
        for key in [
            "process_group",
            "is_p2p",
            "p2p_seq_id",
            "time_discovered_started_ns",
        ] {
            e.remove(key);
        }
    }
}

#[test]
fn older_format_versions_read_with_their_key_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    for e in std::fs::read_dir(fixture("skip-json"))
        .expect("fixture")
        .flatten()
    {
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(e.path()).expect("read")).expect("JSON");
        as_format_2_4(&mut doc);
        let name = e.file_name().to_string_lossy().into_owned();
        write(dir.path(), &name, doc.to_string().as_bytes());
    }
    let (code, doc) = judged(dir.path());
    assert_eq!((code, ranks(&doc, "job.hang")), (1, vec![2]), "{doc:#}");
    assert!(text_field(&doc, "job.traces", "summary").contains("format 2.4"));
    assert_eq!(result(&doc, "job.hang")["collective"]["seq"], 6);
}

#[test]
fn every_reporter_carries_the_job_verdict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let out = job(
        &fixture("wrong_op"),
        &[
            "--junit",
            &path("job.xml"),
            "--prom",
            &path("job.prom"),
            "--markdown",
            &path("job.md"),
            "--html",
            &path("job.html"),
            "--quiet",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("PROBLEM FOUND"),
        "{}",
        stdout(&out)
    );
    assert_valid_junit(&dir.path().join("job.xml"));
    let xml = std::fs::read_to_string(dir.path().join("job.xml")).expect("junit");
    assert!(
        xml.contains("name=\"job.hang\"") && xml.contains("<failure"),
        "{xml}"
    );
    let prom = std::fs::read_to_string(dir.path().join("job.prom")).expect("prom");
    assert!(prom.contains("job.hang"), "{prom}");
    let md = std::fs::read_to_string(dir.path().join("job.md")).expect("markdown");
    assert!(md.contains("rank 1 called broadcast"), "{md}");
    let html = std::fs::read_to_string(dir.path().join("job.html")).expect("html");
    assert!(html.contains("rank 1 called broadcast"), "{html}");
}

//! The reports as a user and a CI pipeline get them from the real binary:
//! JSON valid against the committed schema, JUnit valid against the Jenkins
//! XSD, several reports from one run, `--quiet`, colour control, and report
//! paths that cannot be written.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{
    assert_valid_json_report, assert_valid_junit, build_fixture_lib, gpucheck, root, stderr, stdout,
};

/// Run gpucheck with `args` (quick profile: the reports are under test, not
/// the checks).
fn run(args: &[&str]) -> Output {
    gpucheck()
        .args(["--profile", "quick"])
        .args(args)
        .output()
        .expect("run gpucheck")
}

/// Run gpucheck under a pseudo-terminal (through the venv's Python `pty`
/// module), so that `--color auto` sees a TTY. `env` is added to the same
/// scrubbed environment `common::gpucheck()` uses.
fn run_on_tty(args: &[&str], env: &[(&str, &str)]) -> (String, i32) {
    const PTY: &str = r#"
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(status))
"#;
    let template = gpucheck();
    let mut cmd = Command::new(common::venv_python());
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    // No progress line among the bytes read back (tests/progress.rs reads
    // it off a real screen); colour does not look at TERM.
    cmd.env("TERM", "dumb");
    cmd.envs(env.iter().copied());
    cmd.arg("-c").arg(PTY).arg(common::bin());
    cmd.args(["--profile", "quick"]).args(args);
    let out = cmd.output().expect("run gpucheck under a pty");
    (stdout(&out), out.status.code().unwrap_or(-1))
}

fn exit_code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// The value of the suite property `name` in a JUnit document.
fn junit_property(xml: &str, name: &str) -> String {
    let key = format!("<property name=\"{name}\" value=\"");
    let start = xml
        .find(&key)
        .unwrap_or_else(|| panic!("no property {name} in\n{xml}"))
        + key.len();
    let end = xml[start..].find('"').expect("closing quote") + start;
    xml[start..end]
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The table on stdout: its last line is the verdict, and every check of the
/// JSON report has its row, in the same order.
fn assert_table_matches(table: &str, doc: &serde_json::Value) {
    let last = table.lines().last().unwrap_or("");
    assert!(
        last.starts_with("READY") || last.starts_with("NOT READY"),
        "the table does not end with the verdict:\n{table}"
    );
    let mut rest = table;
    for r in doc["results"].as_array().expect("results") {
        let id = r["id"].as_str().expect("id");
        let pos = rest
            .find(&format!(" {id} "))
            .unwrap_or_else(|| panic!("{id} missing or out of order in:\n{table}"));
        rest = &rest[pos + id.len()..];
    }
}

#[test]
fn json_on_stdout_validates_and_matches_the_exit_code() {
    let out = run(&["--json", "-"]);
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(doc["format_version"], 3);
    assert_eq!(doc["tool"], "gpucheck");
    assert_eq!(doc["profile"], "quick");
    let results = doc["results"].as_array().expect("results");
    assert!(!results.is_empty(), "no results in {doc}");
    assert_eq!(doc["counts"]["total"], results.len());
    assert_eq!(doc["exit_code"], exit_code(&out));
    // stdout carries only the document.
    assert!(stdout(&out).trim_start().starts_with('{'));
    assert!(stdout(&out).trim_end().ends_with('}'));
}

#[test]
fn format_json_is_the_same_document() {
    let out = run(&["--format", "json"]);
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(doc["exit_code"], exit_code(&out));
}

#[test]
fn junit_file_validates_while_stdout_stays_the_table() {
    let dir = tempfile::tempdir().expect("temp dir");
    let xml_path = dir.path().join("report.xml");
    let out = run(&["--junit", xml_path.to_str().expect("utf-8 path")]);
    assert_valid_junit(&xml_path);
    let xml = std::fs::read_to_string(&xml_path).expect("JUnit report written");
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
    assert!(xml.contains("<testsuites name=\"gpucheck\""));
    let table = stdout(&out);
    assert!(!table.contains("<?xml"), "XML on stdout:\n{table}");
    assert_eq!(
        table.lines().last().unwrap_or(""),
        junit_property(&xml, "gpucheck.verdict")
    );
    assert_eq!(
        junit_property(&xml, "gpucheck.exit_code"),
        exit_code(&out).to_string()
    );
}

#[test]
fn json_and_junit_files_in_one_run_with_the_table_on_stdout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let json_path = dir.path().join("a.json");
    let xml_path = dir.path().join("b.xml");
    let out = run(&[
        "--json",
        json_path.to_str().expect("utf-8 path"),
        "--junit",
        xml_path.to_str().expect("utf-8 path"),
    ]);
    let doc = assert_valid_json_report(&std::fs::read_to_string(&json_path).expect("a.json"));
    assert_valid_junit(&xml_path);
    let xml = std::fs::read_to_string(&xml_path).expect("b.xml");
    // Both describe the same run.
    let total = doc["counts"]["total"].as_u64().expect("total");
    assert!(xml.contains(&format!("<testsuites name=\"gpucheck\" tests=\"{total}\"")));
    for r in doc["results"].as_array().expect("results") {
        let id = r["id"].as_str().expect("id");
        let group = r["group"].as_str().expect("group");
        assert!(
            xml.contains(&format!("<testcase name=\"{id}\" classname=\"{group}\"")),
            "{id} missing from the JUnit report"
        );
        assert_eq!(
            junit_property(&xml, &format!("gpucheck.status.{id}")),
            r["status"].as_str().expect("status")
        );
    }
    assert_table_matches(&stdout(&out), &doc);
    assert_eq!(doc["exit_code"], exit_code(&out));
}

#[test]
fn format_junit_on_stdout_validates() {
    let dir = tempfile::tempdir().expect("temp dir");
    for args in [&["--format", "junit"][..], &["--junit", "-"][..]] {
        let out = run(args);
        let xml = stdout(&out);
        assert!(xml.starts_with("<?xml"), "{args:?} printed:\n{xml}");
        let path = dir.path().join("stdout.xml");
        std::fs::write(&path, &xml).expect("write");
        assert_valid_junit(&path);
    }
}

#[test]
fn json_and_junit_cannot_both_take_stdout() {
    let out = run(&["--json", "-", "--junit", "-"]);
    assert_eq!(exit_code(&out), 2);
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("both ask for stdout"));
}

#[test]
fn quiet_prints_exactly_the_verdict_line_and_still_writes_reports() {
    let dir = tempfile::tempdir().expect("temp dir");
    let json_path = dir.path().join("q.json");
    let out = run(&["--quiet", "--json", json_path.to_str().expect("utf-8 path")]);
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "--quiet printed:\n{text}");
    assert!(text.ends_with('\n'));
    let line = text.trim_end();
    assert!(
        line.starts_with("READY") || line.starts_with("NOT READY"),
        "{line}"
    );
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let doc = assert_valid_json_report(&std::fs::read_to_string(&json_path).expect("q.json"));
    assert_eq!(doc["exit_code"], exit_code(&out));
}

#[test]
fn verbose_adds_durations_to_the_table() {
    let terse = stdout(&run(&[]));
    let verbose = stdout(&run(&["--verbose"]));
    assert!(!terse.contains(" took "));
    let rows = verbose
        .lines()
        .filter(|l| l.trim_start().starts_with("took "))
        .count();
    let doc = assert_valid_json_report(&stdout(&run(&["--json", "-"])));
    assert_eq!(rows, doc["results"].as_array().expect("results").len());
    // --verbose adds the host details line under the header.
    assert!(verbose.lines().nth(1).unwrap_or("").starts_with("kernel "));
}

#[test]
fn color_always_colours_and_never_does_not() {
    let always = stdout(&run(&["--color", "always"]));
    assert!(always.contains("\u{1b}["), "no ANSI escapes:\n{always}");
    let never = stdout(&run(&["--color", "never"]));
    assert!(!never.contains('\u{1b}'), "{never}");
    // An explicit --color always wins over NO_COLOR.
    let forced = gpucheck()
        .args(["--profile", "quick", "--color", "always"])
        .env("NO_COLOR", "1")
        .output()
        .expect("run gpucheck");
    assert!(stdout(&forced).contains("\u{1b}["));
    // JSON is never coloured.
    let json = stdout(&run(&["--color", "always", "--json", "-"]));
    assert!(!json.contains('\u{1b}'));
}

#[test]
fn color_auto_follows_the_terminal_and_no_color() {
    let (tty, _) = run_on_tty(&[], &[]);
    assert!(tty.contains("\u{1b}["), "no colour on a TTY:\n{tty}");
    let (no_color, _) = run_on_tty(&[], &[("NO_COLOR", "1")]);
    assert!(
        !no_color.contains('\u{1b}'),
        "colour despite NO_COLOR:\n{no_color}"
    );
    assert!(no_color.contains("READY"));
    let (never, _) = run_on_tty(&["--color", "never"], &[]);
    assert!(!never.contains('\u{1b}'));
    // Not a TTY (a pipe): no colour.
    let piped = stdout(&run(&[]));
    assert!(!piped.contains('\u{1b}'));
}

#[test]
fn an_unwritable_report_path_is_a_usage_error() {
    for flag in ["--junit", "--json"] {
        let target = Path::new("/nonexistent/dir/x.out");
        let out = run(&[flag, target.to_str().expect("utf-8")]);
        assert_eq!(exit_code(&out), 2, "{flag}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{flag}: not one line:\n{err}");
        assert!(err.starts_with("gpucheck: cannot write the "), "{err}");
        assert!(err.contains("/nonexistent/dir/x.out"), "{err}");
        // Nothing ran, nothing was printed.
        assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    }
}

/// Hostile text in the environment variables the env and net checks read
/// and quote back (RANK, MASTER_ADDR, CUDA_VISIBLE_DEVICES...): every report
/// still validates and the table never passes a raw control character to the
/// terminal. Checks that do not echo a value yet still exercise the path; once
/// env.torchrun quotes RANK, the last assertions see the text itself.
#[test]
fn hostile_environment_values_cannot_break_any_report() {
    const HOSTILE: &str = "\u{1}\u{1b}[31m]]><x>&\"' \u{FFFF}";
    let dir = tempfile::tempdir().expect("temp dir");
    let json_path = dir.path().join("h.json");
    let xml_path = dir.path().join("h.xml");
    let mut cmd = gpucheck();
    for var in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
    ] {
        cmd.env(var, HOSTILE);
    }
    let out = cmd
        .args(["--profile", "quick", "--verbose", "--color", "never"])
        .arg("--json")
        .arg(&json_path)
        .arg("--junit")
        .arg(&xml_path)
        .output()
        .expect("run gpucheck");
    assert_ne!(exit_code(&out), 2, "{}", stderr(&out));
    let json = std::fs::read_to_string(&json_path).expect("h.json");
    let doc = assert_valid_json_report(&json);
    assert_valid_junit(&xml_path);
    let table = stdout(&out);
    assert!(
        !table.contains('\u{1b}') && !table.contains('\u{1}'),
        "{table}"
    );
    assert_table_matches(&table, &doc);
    if json.contains("\\u0001\\u001b[31m]]><x>&\\\"'") {
        // A check quoted the value: the table shows it, escaped.
        assert!(table.contains("\\u{1}\\u{1b}[31m]]><x>&\"'"), "{table}");
    }
}

/// The files in `dir` (hidden ones included) with their contents, sorted.
fn files_in(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("read the folder")
        .map(|e| {
            let e = e.expect("a folder entry");
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_refused_command_leaves_every_file_as_it_was() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("keep.txt"), "precious\n").expect("write keep.txt");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--json", "keep.txt", "--junit", "keep.txt"],
            "--json and --junit both name keep.txt",
        ),
        (
            &["--json", "keep.txt", "--junit", "/nonexistent/dir/r.xml"],
            "cannot write the JUnit report to /nonexistent/dir/r.xml",
        ),
        (
            &["--junit", "keep.txt", "--json", "keep.txt/r.json"],
            "cannot write the JSON report to keep.txt/r.json",
        ),
        (
            &["--json", "keep.txt", "--only", "no.such"],
            "unknown check",
        ),
    ];
    for (args, needle) in cases {
        let out = gpucheck()
            .current_dir(dir.path())
            .args(["--only", "env.torchrun"])
            .args(*args)
            .output()
            .expect("run gpucheck");
        assert_eq!(exit_code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
        assert_eq!(
            files_in(dir.path()),
            vec![("keep.txt".to_string(), "precious\n".to_string())],
            "{args:?} touched the folder"
        );
    }
}

#[test]
fn a_report_replaces_a_symlink_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("other.txt"), "precious\n").expect("write other.txt");
    std::os::unix::fs::symlink("other.txt", dir.path().join("r.json")).expect("symlink");
    let out = gpucheck()
        .current_dir(dir.path())
        .args(["--only", "host.shm", "--quiet", "--json", "r.json"])
        .output()
        .expect("run gpucheck");
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    let meta = std::fs::symlink_metadata(dir.path().join("r.json")).expect("r.json");
    assert!(meta.is_file(), "r.json is still a symlink");
    let files = files_in(dir.path());
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    // No temporary file left beside the report.
    assert_eq!(names, ["other.txt", "r.json"]);
    assert_eq!(files[0].1, "precious\n");
    assert_valid_json_report(&files[1].1);
}

#[test]
fn a_rewritten_report_keeps_the_old_file_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("r.xml");
    std::fs::write(&path, "old\n").expect("write r.xml");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let out = gpucheck()
        .args(["--only", "host.shm", "--quiet", "--junit"])
        .arg(&path)
        .output()
        .expect("run gpucheck");
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    let meta = std::fs::metadata(&path).expect("r.xml");
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert_valid_junit(&path);
}

/// gpucheck against the fake NVML (tests/fixtures/fake_nvml.c) with a
/// driver that is not loaded: long hints on every failing row.
fn run_driver_not_loaded(envs: &[(&str, &str)], args: &[&str]) -> String {
    let lib = build_fixture_lib("fake_nvml.c", "nvml", "libnvidia-ml.so.1");
    let out = gpucheck()
        .env(
            "FAKE_NVML_SCENARIO",
            root().join("tests/fixtures/nvml/init_driver_not_loaded.scenario"),
        )
        .envs(envs.iter().copied())
        .args(["--profile", "quick", "--color", "never", "--nvml-lib"])
        .arg(lib)
        .args(args)
        .output()
        .expect("run gpucheck");
    stdout(&out)
}

#[test]
fn the_table_fits_80_columns_and_json_is_not_wrapped() {
    let fits = |table: &str| {
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines.iter().any(|l| l.contains("→ fix (")),
            "no hint in:\n{table}"
        );
        // The verdict stays one line, the last (`tail -1`).
        for line in &lines[..lines.len() - 1] {
            assert!(
                line.chars().count() <= 80,
                "{} columns: {line}",
                line.chars().count()
            );
        }
    };
    fits(&run_driver_not_loaded(&[("COLUMNS", "80")], &[]));
    // A terminal that does not say its width (a fresh pty) gets 80.
    let (tty, _) = run_on_tty(&["--color", "never", "--only", "host,gpu.driver"], &[]);
    fits(&tty);
    // A pipe without COLUMNS keeps each summary and hint on one line.
    let piped = run_driver_not_loaded(&[], &[]);
    assert!(piped.lines().any(|l| l.chars().count() > 100), "{piped}");
    // A wider terminal gets longer lines.
    let wide = run_driver_not_loaded(&[("COLUMNS", "300")], &[]);
    assert!(wide.lines().any(|l| l.chars().count() > 100), "{wide}");
    // JSON keeps each hint whole.
    let json = run_driver_not_loaded(&[("COLUMNS", "80")], &["--format", "json"]);
    let doc = assert_valid_json_report(&json);
    let hint = doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["id"] == "gpu.driver")
        .and_then(|r| r["hint"].as_str())
        .expect("gpu.driver has a hint")
        .to_string();
    assert!(hint.len() > 80 && !hint.contains('\n'), "{hint}");
}

#[test]
fn explain_is_wrapped_to_the_terminal() {
    for id in ["nccl.allreduce", "gpu.driver", "host.devices"] {
        let out = gpucheck()
            .env("COLUMNS", "80")
            .args(["explain", id])
            .output()
            .expect("run gpucheck");
        let text = stdout(&out);
        assert!(text.lines().count() > 5, "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{id}: {line}");
        }
    }
}

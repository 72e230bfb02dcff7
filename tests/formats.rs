//! The Prometheus and Markdown reports and the GitHub Actions annotations as
//! the real binary writes them, read back with each format's own parser:
//! `prometheus_client`'s text parser and `markdown-it-py` (both pinned in
//! scripts/setup-venv.sh), on runs against the fake NVML.

mod common;

use std::path::Path;
use std::process::Output;

use common::{fake_nvml, gpucheck, root, stderr, stdout, venv_python};
use serde_json::Value;

/// The gpu checks against the fake NVML in `scenario`, with `args`.
fn run_gpu(scenario: &str, envs: &[(&str, &str)], args: &[&str]) -> Output {
    gpucheck()
        .envs(envs.iter().copied())
        .env(
            "FAKE_NVML_SCENARIO",
            root().join(format!("tests/fixtures/nvml/{scenario}.scenario")),
        )
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args([
            "--only",
            "gpu",
            "--skip",
            common::LOAD_CHECKS,
            "--color",
            "never",
        ])
        .args(args)
        .output()
        .expect("run gpucheck")
}

/// Python that parses Prometheus text from stdin with prometheus_client,
/// applies the naming rules `promtool check metrics` lints (promtool itself
/// runs in `promtool_accepts_the_metrics` where it is on PATH)
/// and prints the samples as JSON: [[name, labels, value], ...].
const PROM_PARSE: &str = r##"
import json, re, sys
from prometheus_client.parser import text_string_to_metric_families
text = sys.stdin.read()
assert text.endswith("\n"), "no final newline"
problems, samples, seen, families = [], [], set(), set()
for fam in text_string_to_metric_families(text):
    families.add(fam.name)
    if not fam.name.startswith("gpucheck_"): problems.append(f"{fam.name}: no gpucheck_ prefix")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", fam.name): problems.append(f"{fam.name}: not snake case")
    if not fam.documentation: problems.append(f"{fam.name}: no HELP")
    if fam.type != "gauge": problems.append(f"{fam.name}: type {fam.type}")
    if fam.name.endswith("_total"): problems.append(f"{fam.name}: _total on a gauge")
    for bad in ("milliseconds", "millis", "_ms", "gbps", "mib", "_gb", "percent", "bits"):
        if bad in fam.name: problems.append(f"{fam.name}: non-base unit {bad}")
    for s in fam.samples:
        for k in s.labels:
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) or k.startswith("__"):
                problems.append(f"{s.name}: label {k}")
        key = (s.name, tuple(sorted(s.labels.items())))
        if key in seen: problems.append(f"duplicate series {key}")
        seen.add(key)
        if s.timestamp is not None: problems.append(f"{s.name}: timestamp")
        samples.append([s.name, s.labels, s.value])
for name in families:
    if f"# TYPE {name} gauge" not in text: problems.append(f"{name}: no TYPE line")
if problems: sys.exit("\n".join(problems))
print(json.dumps(samples))
"##;

/// Parse and lint Prometheus text; the samples as (name, labels, value).
pub fn parse_prom(text: &str) -> Vec<(String, Value, f64)> {
    use std::io::Write;
    let mut child = std::process::Command::new(venv_python())
        .args(["-c", PROM_PARSE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "Prometheus text does not parse or lint:\n{}\n{text}",
        stderr(&out)
    );
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON from python");
    doc.as_array()
        .expect("array")
        .iter()
        .map(|s| {
            (
                s[0].as_str().unwrap_or("").to_string(),
                s[1].clone(),
                s[2].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect()
}

/// The value of the sample `name` whose labels include every pair in `want`.
fn sample(samples: &[(String, Value, f64)], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, labels, _)| n == name && want.iter().all(|(k, v)| labels[*k] == *v))
        .map(|(_, _, v)| *v)
}

fn prom_of(scenario: &str, dir: &Path) -> (Output, Vec<(String, Value, f64)>) {
    let path = dir.join("gpucheck.prom");
    let out = run_gpu(
        scenario,
        &[],
        &["--prom", path.to_str().expect("utf-8 path")],
    );
    let text = std::fs::read_to_string(&path).expect("the .prom file is written");
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "gpucheck.prom")
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
    (out, parse_prom(&text))
}

#[test]
fn prometheus_file_of_a_healthy_h100x8_says_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, samples) = prom_of("h100x8", dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(sample(&samples, "gpucheck_ready", &[]), Some(1.0));
    assert_eq!(sample(&samples, "gpucheck_exit_code", &[]), Some(0.0));
    assert_eq!(
        sample(&samples, "gpucheck_run_action", &[("action", "none")]),
        Some(1.0)
    );
    assert!(samples.iter().all(|(n, _, _)| n != "gpucheck_action"));
    let stamp = sample(&samples, "gpucheck_last_run_timestamp_seconds", &[]).expect("timestamp");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(
        (now - stamp).abs() < 600.0,
        "timestamp {stamp} vs now {now}"
    );
    let ecc = [("check", "gpu.ecc"), ("group", "gpu")];
    assert_eq!(
        sample(
            &samples,
            "gpucheck_check_status",
            &[ecc[0], ecc[1], ("status", "pass")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &samples,
            "gpucheck_check_status",
            &[ecc[0], ecc[1], ("status", "fail")]
        ),
        Some(0.0)
    );
    assert!(sample(&samples, "gpucheck_check_duration_seconds", &ecc).is_some());
    let gpus: Vec<_> = samples
        .iter()
        .filter(|(n, l, v)| {
            n == "gpucheck_gpu_check_status"
                && l["check"] == "gpu.ecc"
                && l["status"] == "pass"
                && *v == 1.0
        })
        .collect();
    assert_eq!(gpus.len(), 8, "one passing series per GPU");
    let uuids: Vec<_> = samples
        .iter()
        .filter(|(n, _, v)| n == "gpucheck_gpu_info" && *v == 1.0)
        .collect();
    assert_eq!(uuids.len(), 8, "one gpucheck_gpu_info per GPU");
    assert!(uuids
        .iter()
        .all(|(_, l, _)| l["uuid"].as_str().is_some_and(|u| u.starts_with("GPU-"))));
}

#[test]
fn prometheus_file_of_a_failing_ecc_names_the_check_and_the_gpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, samples) = prom_of("ecc_remap", dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(sample(&samples, "gpucheck_ready", &[]), Some(0.0));
    assert_eq!(sample(&samples, "gpucheck_exit_code", &[]), Some(1.0));
    let failing: Vec<_> = samples
        .iter()
        .filter(|(n, l, v)| n == "gpucheck_check_status" && l["status"] == "fail" && *v == 1.0)
        .map(|(_, l, _)| l["check"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(failing.contains(&"gpu.ecc".to_string()), "{failing:?}");
    assert!(samples
        .iter()
        .any(|(n, l, v)| n == "gpucheck_gpu_check_status"
            && l["check"] == "gpu.ecc"
            && l["status"] == "fail"
            && *v == 1.0));
}

/// The failing ECC check's repair action, as prometheus_client reads it:
/// `gpucheck_action{action="reset_gpu",check="gpu.ecc",gpu="3"} 1`, and the
/// run's most drastic action the one `gpucheck_run_action` series at 1. A
/// lost GPU's action (reboot_node) names that GPU; no action series carries
/// an empty label.
#[test]
fn prometheus_file_names_each_repair_action_its_check_and_gpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, samples) = prom_of("ecc_remap", dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let want = [("action", "reset_gpu"), ("check", "gpu.ecc"), ("gpu", "3")];
    assert_eq!(sample(&samples, "gpucheck_action", &want), Some(1.0));
    let ecc_gpus: Vec<&str> = samples
        .iter()
        .filter(|(n, l, _)| n == "gpucheck_action" && l["check"] == "gpu.ecc")
        .map(|(_, l, _)| l["gpu"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ecc_gpus, ["3"]);
    let headline: Vec<&str> = samples
        .iter()
        .filter(|(n, _, v)| n == "gpucheck_run_action" && *v == 1.0)
        .map(|(_, l, _)| l["action"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(headline, ["reset_gpu"]);
    assert!(samples
        .iter()
        .filter(|(n, _, _)| n.starts_with("gpucheck_action"))
        .all(|(_, l, _)| l["profile"] == "standard"
            && l.as_object().is_some_and(|m| m.values().all(|v| v != ""))));

    let (_, lost) = prom_of("gpu_lost", tempfile::tempdir().expect("tempdir").path());
    let want = [
        ("action", "reboot_node"),
        ("check", "gpu.count"),
        ("gpu", "2"),
    ];
    assert_eq!(sample(&lost, "gpucheck_action", &want), Some(1.0));
    assert_eq!(
        sample(&lost, "gpucheck_run_action", &[("action", "reboot_node")]),
        Some(1.0)
    );
}

/// GPU 2 fell off the bus (NVML counts it but cannot open it, so no UUID):
/// the per-GPU series carry no `uuid` (a lost GPU's series would change
/// identity; node_exporter fills a label its family's other series carry
/// with "" and Prometheus reads that as no label), gpucheck_gpu_info names
/// the seven others, and every series names the profile, so a file of
/// another profile beside this one repeats none of them.
#[test]
fn prometheus_file_of_a_lost_gpu_keeps_uuids_off_the_status_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, samples) = prom_of("gpu_lost", dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(samples.iter().all(|(_, l, _)| l["profile"] == "standard"));
    let per_gpu = |gpu: &str| {
        samples
            .iter()
            .filter(|(n, l, _)| n == "gpucheck_gpu_check_status" && l["gpu"] == gpu)
            .count()
    };
    assert!(per_gpu("2") > 0, "GPU 2 has per-GPU series");
    assert!(samples
        .iter()
        .filter(|(n, _, _)| n == "gpucheck_gpu_check_status")
        .all(|(_, l, _)| l.get("uuid").is_none()));
    let info: Vec<&str> = samples
        .iter()
        .filter(|(n, _, _)| n == "gpucheck_gpu_info")
        .map(|(_, l, _)| l["gpu"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(info, ["0", "1", "3", "4", "5", "6", "7"]);
}

/// Python that parses Markdown with markdown-it-py (CommonMark with GFM
/// tables) and prints each table as JSON: [[cell text, ...], ...] per table.
const MD_TABLES: &str = r##"
import json, sys
from markdown_it import MarkdownIt
tokens = MarkdownIt("commonmark").enable("table").parse(sys.stdin.read())
tables, row, cell = [], None, None
for t in tokens:
    if t.type == "table_open": tables.append([])
    if t.type == "tr_open": row = []; tables[-1].append(row)
    if t.type == "inline" and row is not None: row.append("".join(c.content for c in t.children if c.type in ("text", "code_inline")))
    if t.type == "table_close": row = None
print(json.dumps(tables))
"##;

fn markdown_tables(text: &str) -> Vec<Vec<Vec<String>>> {
    use std::io::Write;
    let mut child = std::process::Command::new(venv_python())
        .args(["-c", MD_TABLES])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(out.status.success(), "markdown-it failed on:\n{text}");
    serde_json::from_str(&stdout(&out)).expect("JSON from python")
}

#[test]
fn markdown_summary_of_a_failing_ecc_puts_it_first_with_its_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("summary.md");
    let out = run_gpu(
        "ecc_remap",
        &[],
        &["--markdown", path.to_str().expect("utf-8")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = std::fs::read_to_string(&path).expect("the Markdown file is written");
    assert!(text.starts_with("### ❌ gpucheck: NOT READY"), "{text}");
    let tables = markdown_tables(&text);
    let attention = &tables[0];
    assert_eq!(attention[0], ["Check", "Status", "Summary", "Fix"]);
    assert!(tables
        .iter()
        .all(|t| t.iter().all(|r| r.len() == t[0].len())));
    let ecc = attention
        .iter()
        .find(|r| r[0] == "gpu.ecc")
        .unwrap_or_else(|| panic!("gpu.ecc in {attention:?}"));
    assert_eq!(ecc[1], "✘ FAIL");
    assert!(
        ecc[3].starts_with("reset_gpu: "),
        "the repair action, then the fix for gpu.ecc: {ecc:?}"
    );
    assert!(text.contains("<details><summary>Passed and skipped checks"));
    let folded = tables.last().expect("the folded table");
    assert!(
        folded
            .iter()
            .any(|r| r[0] == "gpu.count" && r[1] == "✔ pass"),
        "{folded:?}"
    );
    assert!(
        tables.iter().any(|t| t[0].iter().any(|c| c == "GPU0")),
        "the topology matrix"
    );
}

#[test]
fn under_github_actions_failures_become_annotations_beside_the_table() {
    let gha = [("GITHUB_ACTIONS", "true")];
    let out = run_gpu("ecc_remap", &gha, &[]);
    let text = stdout(&out);
    let ecc = text
        .lines()
        .find(|l| l.starts_with("::error title=gpu.ecc::"))
        .unwrap_or_else(|| panic!("no annotation for gpu.ecc:\n{text}"));
    assert!(ecc.contains(" — fix (reset_gpu): "), "{ecc}");
    assert!(
        text.find("NOT READY") < text.find("::error"),
        "annotations after the table"
    );
    // Outside GitHub Actions: none.
    let plain = run_gpu("ecc_remap", &[], &[]);
    assert!(!stdout(&plain).contains("::error"), "{}", stdout(&plain));
    assert!(!stderr(&plain).contains("::error"));
}

#[test]
fn under_github_actions_a_machine_report_on_stdout_stays_whole() {
    let gha = [("GITHUB_ACTIONS", "true")];
    let out = run_gpu("ecc_remap", &gha, &["--format", "json"]);
    let doc = common::assert_valid_json_report(&stdout(&out));
    assert_eq!(doc["exit_code"], 1);
    assert!(
        stderr(&out)
            .lines()
            .any(|l| l.starts_with("::error title=gpu.ecc::")),
        "annotations on stderr: {}",
        stderr(&out)
    );
}

/// `promtool check metrics`, Prometheus's own linter, on a real run. Debian's
/// `prometheus` package (a whole server) carries it; scripts/test-release.sh,
/// which CI runs, unpacks promtool from it and runs this test. Without it on
/// PATH the naming rules are still checked by `parse_prom` above.
#[test]
#[ignore = "needs promtool on PATH: scripts/test-release.sh (CI) unpacks it from Debian's prometheus package and runs this with --ignored"]
fn promtool_accepts_the_metrics() {
    use std::io::Write;
    for scenario in ["h100x8", "ecc_remap"] {
        let out = run_gpu(scenario, &[], &["--format", "prom"]);
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool on PATH");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(&out.stdout)
            .expect("write");
        let lint = child.wait_with_output().expect("promtool");
        assert!(
            lint.status.success() && lint.stdout.is_empty() && lint.stderr.is_empty(),
            "promtool on {scenario}: {}{}",
            stdout(&lint),
            stderr(&lint)
        );
    }
}

#[test]
fn two_reports_on_stdout_or_in_one_file_are_refused_before_any_check() {
    let out = gpucheck()
        .args(["--profile", "quick", "--prom", "-", "--markdown", "-"])
        .output()
        .expect("run gpucheck");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        "gpucheck: --prom - and --markdown - both ask for stdout; write one of them to a file"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let same = dir.path().join("r");
    let same = same.to_str().expect("utf-8");
    let out = gpucheck()
        .args(["--profile", "quick", "--prom", same, "--json", same])
        .output()
        .expect("run gpucheck");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("both name"), "{}", stderr(&out));
}

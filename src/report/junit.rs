//! The JUnit XML report, for CI systems (Jenkins, GitLab, GitHub test
//! reporters): `testsuites` > one `testsuite` per check group in run order >
//! one `testcase` per check (`classname` = group, `name` = id, `time` in
//! seconds).
//!
//! Verdicts: `fail` -> `<failure type="fail">`, `error` -> `<error
//! type="error">`, `skip` -> `<skipped>` with the reason as its message,
//! `warn` -> a passing test case (or, under `--strict`, where warnings make
//! the exit code 1, a `<failure type="warn">`, so CI shows what failed the
//! job). The hint, metrics, facts, per-GPU rows and data tables go into the
//! test case's `system-out`; the hint also into the failure's body.
//!
//! JUnit has no warning status, and a consumer that shows a case's output
//! only when it fails (GitLab, gitlab-org/gitlab#370760) shows a warned
//! check as passed. So a warn is said where junit2html and Jenkins show text
//! on a passing case: `system-err` holds `warning: SUMMARY` (and the fix),
//! and the suite's `system-out` lists its warned checks; `--strict` makes
//! it a failure every consumer shows.
//!
//! What the Jenkins schema (`junit-10.xsd`, the strictest common consumer)
//! allows shapes the rest: a `testcase` cannot hold `properties`, so every
//! check's verdict (warnings included) is a suite-level property
//! `gpucheck.status.<id>`; `testsuites` cannot hold `properties` either, so
//! the run's and the host's properties are on the first suite, once. quick-junit 0.5
//! writes a `disabled` attribute on every `testsuite`, which that schema
//! rejects: it is removed after serialising (the skip count goes into the
//! allowed `skipped` attribute instead).
//!
//! XML 1.0 cannot carry some characters at all (most C0 controls, U+FFFE,
//! U+FFFF), not even escaped. Text from the machine may contain them (an
//! environment value, a driver string), so every string is cleaned first:
//! ANSI colour sequences are dropped and other forbidden characters become
//! U+FFFD, so the document always parses and validates.

use std::time::Duration;

use gpucheck_checks::Status;
use quick_junit::{
    NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite, XmlString,
};

use super::text::{badge, data_table_lines, device_lines, duration_text, metric_text};
use super::{CheckResult, Reporter, Run};

pub struct Junit;

impl Reporter for Junit {
    fn render(&self, run: &Run) -> String {
        let report = report(&run.with_actions());
        match report.to_string() {
            Ok(xml) => without_disabled(&xml).unwrap_or(xml),
            // Writing into memory does not fail; should quick-junit ever
            // refuse, CI still gets a document that says so.
            Err(e) => fallback(&e.to_string()),
        }
    }
}

/// The quick-junit model of the run.
fn report(run: &Run) -> Report {
    let mut report = Report::new("gpucheck");
    report.set_time(seconds(run.duration_ms));
    let started =
        chrono::DateTime::from_timestamp(i64::try_from(run.started_at_unix).unwrap_or(0), 0);
    let run_properties = run_properties(run);
    for (i, (group, results)) in run.groups().into_iter().enumerate() {
        let mut suite = TestSuite::new(xml_text(group));
        if let Some(t) = started {
            suite.set_timestamp(t);
        }
        suite.set_time(seconds(
            results.iter().map(|r| r.outcome.duration_ms.max(0.0)).sum(),
        ));
        if i == 0 {
            suite.add_properties(run_properties.iter().map(|(k, v)| Property::new(k, v)));
        }
        for r in &results {
            suite.add_property(Property::new(
                format!("gpucheck.status.{}", xml_text(&r.id)),
                r.outcome.status.as_str(),
            ));
            for (k, v) in action_properties(r) {
                suite.add_property(Property::new(k, v));
            }
            suite.add_test_case(test_case(r, run.strict));
        }
        let warned: Vec<String> = results
            .iter()
            .filter(|r| r.outcome.status == Status::Warn)
            .map(|r| format!("warning: {}: {}", r.id, r.outcome.summary))
            .collect();
        if !warned.is_empty() {
            suite.set_system_out(xml_text(&warned.join("\n")));
        }
        // quick-junit 0.5 counts skipped test cases as `disabled`; the
        // schema's name for them is `skipped`.
        suite.extra.insert(
            XmlString::new("skipped"),
            XmlString::new(suite.disabled.to_string()),
        );
        suite.extra.insert(
            XmlString::new("hostname"),
            XmlString::new(xml_text(&run.host.hostname)),
        );
        report.add_test_suite(suite);
    }
    report
}

/// What the first suite carries: the tool, the run and the host.
fn run_properties(run: &Run) -> Vec<(String, String)> {
    let h = &run.host;
    let mut props = vec![
        ("gpucheck.version", run.tool_version.clone()),
        ("gpucheck.profile", run.profile.as_str().to_string()),
        ("gpucheck.strict", run.strict.to_string()),
        ("gpucheck.exit_code", run.exit_code.to_string()),
        ("gpucheck.verdict", run.verdict_line()),
        ("gpucheck.action", run.action().as_str().to_string()),
        ("host.hostname", h.hostname.clone()),
        ("host.os", h.os.clone()),
        ("host.kernel", h.kernel.clone()),
        ("host.arch", h.arch.clone()),
        ("host.cpu", h.cpu.clone()),
        ("host.cpu_count", h.cpu_count.to_string()),
        ("host.memory_total_mib", h.memory_total_mib.to_string()),
        (
            "host.container",
            h.container.clone().unwrap_or_else(|| "none".to_string()),
        ),
    ];
    if let Some(sig) = &run.interrupted {
        props.push(("gpucheck.interrupted", sig.clone()));
    }
    props
        .into_iter()
        .map(|(k, v)| (k.to_string(), xml_text(&v)))
        .collect()
}

/// A warn-or-worse result's repair action (`gpucheck.action.<id>` =
/// `reset_gpu`) and what it applies to (`gpucheck.action_gpus.<id>` = `1,5`,
/// `gpucheck.action_port.<id>` = `mlx5_0/1`), as suite properties like its
/// verdict.
fn action_properties(r: &CheckResult) -> Vec<(String, String)> {
    let o = &r.outcome;
    let Some(action) = o.action else {
        return Vec::new();
    };
    let id = xml_text(&r.id);
    let mut props = vec![(format!("gpucheck.action.{id}"), action.as_str().to_string())];
    if !o.action_gpus.is_empty() {
        let gpus: Vec<String> = o.action_gpus.iter().map(u32::to_string).collect();
        props.push((format!("gpucheck.action_gpus.{id}"), gpus.join(",")));
    }
    if let Some(port) = &o.action_port {
        props.push((format!("gpucheck.action_port.{id}"), xml_text(port)));
    }
    props
}

fn test_case(r: &CheckResult, strict: bool) -> TestCase {
    let o = &r.outcome;
    let summary = xml_text(&o.summary);
    let body = |label: &str| {
        let mut text = format!("{label}: {summary}");
        if let Some(hint) = &o.hint {
            text.push_str(&format!("\nfix: {}", xml_text(hint)));
        }
        text
    };
    let status = match o.status {
        Status::Pass => TestCaseStatus::success(),
        Status::Warn if !strict => TestCaseStatus::success(),
        Status::Warn => non_success(NonSuccessKind::Failure, "warn", &summary, body("warn")),
        Status::Fail => non_success(NonSuccessKind::Failure, "fail", &summary, body("fail")),
        Status::Error => non_success(NonSuccessKind::Error, "error", &summary, body("error")),
        Status::Skip => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(summary.clone());
            s
        }
    };
    let mut case = TestCase::new(xml_text(&r.id), status);
    case.set_classname(xml_text(&r.group));
    case.set_time(seconds(o.duration_ms));
    case.set_system_out(system_out(r));
    if o.status == Status::Warn {
        // A passing case that warned says so where passing cases' text is
        // shown (a warn under --strict is a failure and says so there).
        let mut warning = format!("warning: {summary}");
        if let Some(hint) = &o.hint {
            warning.push_str(&format!("\nfix: {}", xml_text(hint)));
        }
        case.set_system_err(warning);
    }
    case
}

fn non_success(kind: NonSuccessKind, ty: &str, message: &str, body: String) -> TestCaseStatus {
    let mut s = TestCaseStatus::non_success(kind);
    s.set_type(ty);
    s.set_message(message);
    s.set_description(body);
    s
}

/// Everything the check found, as plain text: the same words the table
/// report shows under `--verbose`.
fn system_out(r: &CheckResult) -> String {
    let o = &r.outcome;
    let mut lines = vec![
        format!("{}  {}  {}", badge(o.status), r.id, o.summary),
        format!("title: {}", r.title),
    ];
    if let Some(hint) = &o.hint {
        lines.push(format!("fix: {hint}"));
    }
    lines.extend(o.metrics.iter().map(metric_text));
    lines.extend(o.facts.iter().map(|(k, v)| format!("{k}: {v}")));
    lines.extend(device_lines(&o.devices));
    for t in &o.tables {
        lines.push(String::new());
        lines.extend(data_table_lines(t));
    }
    lines.push(format!("took {}", duration_text(o.duration_ms)));
    xml_text(&lines.join("\n"))
}

/// Milliseconds as a Duration; negative or non-finite (never expected)
/// become zero rather than a panic.
fn seconds(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default()
}

/// True for the characters XML 1.0 allows in a document
/// (https://www.w3.org/TR/xml/#charsets).
fn is_xml_char(c: char) -> bool {
    matches!(c,
        '\t' | '\n' | '\r'
        | '\u{20}'..='\u{D7FF}'
        | '\u{E000}'..='\u{FFFD}'
        | '\u{10000}'..='\u{10FFFF}')
}

/// `text` made safe for XML 1.0: ANSI escape sequences (`ESC [ ... m`)
/// removed, every other forbidden character replaced with U+FFFD so that
/// something visibly marks the spot.
pub(super) fn xml_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            // CSI: parameters and intermediates, then one final byte @..~.
            chars.next();
            for n in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&n) {
                    break;
                }
            }
            continue;
        }
        out.push(if is_xml_char(c) { c } else { '\u{FFFD}' });
    }
    out
}

/// The document without the `disabled` attribute on `testsuite`, which the
/// Jenkins schema does not allow. Rewrites the start tags through quick-xml
/// and copies everything else byte for byte. `None` if the document does not
/// read back (the caller then keeps it as it was: still well-formed).
fn without_disabled(xml: &str) -> Option<String> {
    use quick_xml::events::{BytesStart, Event};

    fn strip(tag: &BytesStart<'_>) -> Option<BytesStart<'static>> {
        let mut out = BytesStart::new("testsuite");
        for attr in tag.attributes() {
            let attr = attr.ok()?;
            if attr.key.as_ref() != b"disabled" {
                out.push_attribute(attr);
            }
        }
        Some(out)
    }

    let mut reader = quick_xml::Reader::from_str(xml);
    let mut writer = quick_xml::Writer::new(Vec::with_capacity(xml.len()));
    loop {
        let event = match reader.read_event().ok()? {
            Event::Eof => break,
            Event::Start(tag) if tag.name().as_ref() == b"testsuite" => Event::Start(strip(&tag)?),
            Event::Empty(tag) if tag.name().as_ref() == b"testsuite" => Event::Empty(strip(&tag)?),
            other => other,
        };
        writer.write_event(event).ok()?;
    }
    String::from_utf8(writer.into_inner()).ok()
}

/// A minimal valid document reporting that the real one could not be made.
fn fallback(reason: &str) -> String {
    let reason = quick_xml::escape::escape(xml_text(reason)).into_owned();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <testsuites name=\"gpucheck\" tests=\"1\" failures=\"0\" errors=\"1\">\n\
         <testsuite name=\"gpucheck\" tests=\"1\" failures=\"0\" errors=\"1\">\n\
         <testcase name=\"gpucheck.junit\" classname=\"gpucheck\">\
         <error type=\"error\" message=\"cannot write the JUnit report: {reason}\"/></testcase>\n\
         </testsuite>\n</testsuites>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// Validate with the venv's xmlschema against the Jenkins XSD, the way
    /// tests/common/mod.rs does for the binary's output.
    fn assert_valid(xml: &str) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("report.xml");
        std::fs::write(&path, xml).expect("write report");
        let xsd = root().join("schema/junit-10.xsd");
        let python = root().join(".venv/bin/python");
        assert!(python.exists(), "{} missing", python.display());
        let out = Command::new(python)
            .args([
                "-c",
                "import sys, xmlschema; xmlschema.XMLSchema(sys.argv[1]).validate(sys.argv[2]); print('valid')",
            ])
            .arg(&xsd)
            .arg(&path)
            .output()
            .expect("run the XSD validator");
        assert!(
            out.status.success(),
            "does not validate against {}:\n{}\n{xml}",
            Path::new(&xsd).display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The element `<tag ...>` of the test case named `id`, up to its end.
    fn case<'a>(xml: &'a str, id: &str) -> &'a str {
        let start = xml
            .find(&format!("<testcase name=\"{id}\""))
            .unwrap_or_else(|| panic!("no testcase {id} in\n{xml}"));
        let end = xml[start..]
            .find("</testcase>")
            .map_or(xml.len(), |e| start + e);
        &xml[start..end]
    }

    #[test]
    fn every_status_maps_to_its_junit_element_and_validates() {
        let xml = Junit.render(&fixtures::every_status());
        assert_valid(&xml);
        // The failed ECC check's repair action and its GPU, and the run's.
        assert!(xml.contains("<property name=\"gpucheck.action.gpu.ecc\" value=\"reset_gpu\"/>"));
        assert!(xml.contains("<property name=\"gpucheck.action_gpus.gpu.ecc\" value=\"1\"/>"));
        assert!(xml.contains("<property name=\"gpucheck.action\" value=\"reset_gpu\"/>"));
        assert!(!xml.contains("gpucheck.action.gpu.topology"));
        let ecc = case(&xml, "gpu.ecc");
        assert!(ecc.contains("classname=\"gpu\""), "{ecc}");
        assert!(
            ecc.contains("<failure message=\"GPU1 has 3 uncorrectable ECC errors\" type=\"fail\">")
        );
        assert!(ecc.contains("fix: drain the node and run `nvidia-smi -q -d ECC`"));
        assert!(ecc.contains("ecc_uncorrectable = 3 count"));
        assert!(ecc.contains("GPU1  NVIDIA H100 80GB HBM3  ✘ FAIL  3 uncorrectable ECC errors"));
        let err = case(&xml, "net.master_port");
        assert!(err.contains("<error message=\"probe crashed: SIGSEGV\" type=\"error\""));
        let skip = case(&xml, "nccl.allreduce");
        assert!(skip.contains("<skipped message=\"needs gpu.ecc, which failed\"/>"));
        // A warning passes, says so in its output and in a suite property.
        let shm = case(&xml, "host.shm");
        assert!(!shm.contains("<failure") && !shm.contains("<error"));
        assert!(shm.contains("! warn  host.shm  /dev/shm is 64 MiB"));
        assert!(shm.contains("fix: docker run --shm-size=16g"));
        assert!(xml.contains("<property name=\"gpucheck.status.host.shm\" value=\"warn\"/>"));
        // ... and where consumers show a passing case's text: its
        // system-err, and its suite's system-out.
        assert!(
            shm.contains("<system-err>warning: /dev/shm is 64 MiB"),
            "{shm}"
        );
        assert!(
            xml.contains("<system-out>warning: host.shm: /dev/shm is 64 MiB"),
            "{xml}"
        );
        assert!(!case(&xml, "gpu.ecc").contains("<system-err>"));
        // The topology matrix rides along in system-out.
        assert!(case(&xml, "gpu.topology").contains("GPU0   X    NV18  0-95          0"));
    }

    #[test]
    fn suites_follow_groups_with_counts_host_facts_and_times() {
        let xml = Junit.render(&fixtures::every_status());
        let suites: Vec<&str> = xml
            .lines()
            .filter(|l| l.trim_start().starts_with("<testsuite "))
            .collect();
        assert_eq!(suites.len(), 4, "{xml}");
        assert!(suites[0].contains("name=\"gpu\" tests=\"2\" errors=\"0\" failures=\"1\""));
        assert!(suites[2].contains("name=\"nccl\" tests=\"1\""));
        assert!(suites[2].contains("skipped=\"1\""));
        assert!(suites[0].contains("timestamp=\"2026-01-01T00:00:00.000+00:00\""));
        assert!(suites[0].contains("hostname=\"gpu-node-7\""));
        assert!(!xml.contains("disabled="), "{xml}");
        assert!(xml.contains(
            "<testsuites name=\"gpucheck\" tests=\"5\" failures=\"1\" errors=\"1\" time=\"1.234\">"
        ));
        assert_eq!(
            xml.matches("<property name=\"host.os\" value=\"Ubuntu 22.04.4 LTS\"/>")
                .count(),
            1
        );
        // Once, on the first suite.
        let first_suite = &xml[..xml.find("</testsuite>").unwrap_or(0)];
        assert!(first_suite.contains("<property name=\"host.os\""), "{xml}");
        assert!(xml.contains("<property name=\"gpucheck.verdict\" value=\"NOT READY: "));
    }

    #[test]
    fn strict_turns_a_warning_into_a_failure() {
        let mut run = fixtures::every_status();
        run.strict = true;
        let xml = Junit.render(&run);
        assert_valid(&xml);
        assert!(case(&xml, "host.shm")
            .contains("<failure message=\"/dev/shm is 64 MiB\" type=\"warn\">"));
    }

    #[test]
    fn hostile_strings_still_validate() {
        let xml = Junit.render(&fixtures::hostile());
        assert_valid(&xml);
        assert!(!xml.contains('\u{1}') && !xml.contains('\u{1b}') && !xml.contains('\u{FFFF}'));
        // The markup arrives as text, escaped, with the forbidden characters marked.
        assert!(
            xml.contains("\u{FFFD}]]&gt;&lt;x&gt;&amp;&quot;&apos; \u{FFFD}"),
            "{xml}"
        );
    }

    #[test]
    fn an_empty_run_is_a_valid_empty_report() {
        let xml = Junit.render(&fixtures::run(Vec::new(), false));
        assert_valid(&xml);
        assert!(xml.contains("tests=\"0\""));
    }

    #[test]
    fn the_fallback_document_validates() {
        assert_valid(&fallback("boom \u{1} <&>"));
    }

    #[test]
    fn xml_text_keeps_text_and_drops_what_xml_forbids() {
        assert_eq!(xml_text("GPU0 — NV18\tok\n"), "GPU0 — NV18\tok\n");
        assert_eq!(xml_text("\u{1b}[1;31mred\u{1b}[0m"), "red");
        assert_eq!(
            xml_text("a\u{0}b\u{FFFE}c\u{FFFF}"),
            "a\u{FFFD}b\u{FFFD}c\u{FFFD}"
        );
        assert_eq!(xml_text("\u{1F680}"), "\u{1F680}");
    }
}

//! The Markdown report (`--markdown FILE`): GitHub-flavoured Markdown for
//! `$GITHUB_STEP_SUMMARY`, GitLab and pull-request comments. The verdict
//! first, then a table of the checks that need attention with their fixes,
//! the data tables (topology matrix, bandwidth sweeps), and the passing and
//! skipped checks folded in a `<details>` block.
//!
//! Every piece of machine text goes through [`inline`]: it can neither end a
//! table cell, open a code span or link, nor inject HTML.

use gpucheck_checks::{DataTable, Status};

use super::text::{badge, duration_text, metric_text};
use super::{CheckResult, Reporter, Run};

pub struct Markdown;

/// Machine text made safe inside a GFM table cell or a line of Markdown:
/// HTML's `&`, `<`, `>` as entities, Markdown's punctuation that starts
/// emphasis, code, links or a cell border backslash-escaped, line breaks as
/// `<br>`, and other control characters shown escaped (`\u{1b}`).
pub fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        for c in line.chars() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' | '#' | '!' => {
                    out.push('\\');
                    out.push(c);
                }
                '\t' | '\r' => out.push(' '),
                c if c.is_control()
                    || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
                {
                    // `\u{1b}` spelt with its backslash escaped.
                    out.push_str(&c.escape_default().to_string().replace('\\', "\\\\"))
                }
                c => out.push(c),
            }
        }
        if lines.peek().is_some() {
            out.push_str("<br>");
        }
    }
    out
}

/// One GFM table: a header row, its delimiter row, the body rows, every row
/// padded to the same number of cells.
fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let width = rows
        .iter()
        .map(Vec::len)
        .chain([header.len()])
        .max()
        .unwrap_or(0)
        .max(1);
    let line = |cells: &[String]| {
        let mut cells: Vec<String> = cells.to_vec();
        cells.resize(width, String::new());
        format!("| {} |\n", cells.join(" | "))
    };
    let mut out = line(header);
    out.push_str(&format!("|{}\n", "---|".repeat(width)));
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

fn strings(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// The check's id as code (ids are `[a-z0-9_.]`, safe in a code span).
fn id_cell(r: &CheckResult) -> String {
    format!("`{}`", r.id)
}

/// The Fix cell: the repair action as code, then the hint ("`reset_gpu`:
/// drain the node ..."). Action names are `[a-z_]`, safe in a code span.
fn fix_cell(o: &gpucheck_checks::Outcome) -> String {
    let hint = o.hint.as_deref().map(inline).unwrap_or_default();
    match super::text::shown_action(o) {
        Some(action) if hint.is_empty() => format!("`{action}`"),
        Some(action) => format!("`{action}`: {hint}"),
        None => hint,
    }
}

/// The non-passing checks with their fixes, one row per check, then one
/// row per GPU that did not pass under it.
fn attention(needs: &[&CheckResult]) -> String {
    let mut rows = Vec::new();
    for r in needs {
        rows.push(vec![
            id_cell(r),
            badge(r.outcome.status).to_string(),
            inline(&r.outcome.summary),
            fix_cell(&r.outcome),
        ]);
        for d in r
            .outcome
            .devices
            .iter()
            .filter(|d| d.status != Status::Pass)
        {
            let gpu = d
                .label
                .as_deref()
                .map(inline)
                .unwrap_or_else(|| format!("GPU{}", d.index));
            rows.push(vec![
                format!("↳ {gpu}"),
                badge(d.status).to_string(),
                inline(&format!("{}: {}", d.name, d.summary)),
                String::new(),
            ]);
        }
    }
    table(&strings(&["Check", "Status", "Summary", "Fix"]), &rows)
}

/// A data table under a heading naming it and the check it came from.
fn data_table(r: &CheckResult, t: &DataTable) -> String {
    let mut out = format!("#### {} ({})\n\n", inline(&t.title), id_cell(r));
    let rows: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|row| row.iter().map(|c| inline(c.trim())).collect())
        .collect();
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut header: Vec<String> = t.header.iter().map(|h| inline(h.trim())).collect();
    if !header.is_empty() && header.len() + 1 == width {
        header.insert(0, String::new());
    }
    out.push_str(&table(&header, &rows));
    if let Some(legend) = &t.legend {
        out.push_str(&format!("\n{}\n", inline(legend)));
    }
    out.push('\n');
    out
}

impl Reporter for Markdown {
    fn render(&self, run: &Run) -> String {
        let run = &run.with_actions();
        let glyph = if run.exit_code == 0 { "✅" } else { "❌" };
        let mut out = format!("### {glyph} gpucheck: {}\n\n", inline(&run.verdict_line()));
        out.push_str(&format!(
            "{} · {} · {} · {} · gpucheck {}\n\n",
            inline(&run.host.hostname),
            inline(&run.host.os),
            inline(&run.host.arch),
            if run.only.is_empty() {
                format!("profile `{}`", run.profile.as_str())
            } else {
                format!("only `{}`", inline(&run.only.join(",")))
            },
            inline(&run.tool_version),
        ));
        let needs: Vec<&CheckResult> = run
            .results
            .iter()
            .filter(|r| {
                matches!(
                    r.outcome.status,
                    Status::Fail | Status::Error | Status::Warn
                )
            })
            .collect();
        if !needs.is_empty() {
            out.push_str("#### Needs attention\n\n");
            out.push_str(&attention(&needs));
            out.push('\n');
        }
        for r in &run.results {
            for t in &r.outcome.tables {
                out.push_str(&data_table(r, t));
            }
        }
        let rest: Vec<&CheckResult> = run
            .results
            .iter()
            .filter(|r| !needs.iter().any(|n| n.id == r.id))
            .collect();
        if !rest.is_empty() {
            out.push_str(&format!(
                "<details><summary>Passed and skipped checks ({})</summary>\n\n",
                rest.len()
            ));
            let rows: Vec<Vec<String>> = rest
                .iter()
                .map(|r| {
                    let metrics: Vec<String> = r
                        .outcome
                        .metrics
                        .iter()
                        .map(|m| inline(&metric_text(m)))
                        .collect();
                    vec![
                        id_cell(r),
                        badge(r.outcome.status).to_string(),
                        inline(&r.outcome.summary),
                        metrics.join("<br>"),
                        duration_text(r.outcome.duration_ms),
                    ]
                })
                .collect();
            out.push_str(&table(
                &strings(&["Check", "Status", "Summary", "Metrics", "Time"]),
                &rows,
            ));
            out.push_str("\n</details>\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;

    #[test]
    fn inline_text_cannot_break_a_cell_or_inject_html() {
        assert_eq!(inline("a|b"), "a\\|b");
        assert_eq!(inline("`x`"), "\\`x\\`");
        assert_eq!(inline("<script>"), "&lt;script&gt;");
        assert_eq!(inline("one\ntwo"), "one<br>two");
        assert_eq!(inline("\u{1b}[31m"), "\\\\u{1b}\\[31m");
    }

    #[test]
    fn failures_come_first_with_their_fixes_and_passes_are_folded() {
        let text = Markdown.render(&fixtures::every_status());
        let attention = text.find("#### Needs attention").expect("attention table");
        let details = text.find("<details>").expect("details");
        assert!(attention < details);
        assert!(text.contains(
            "| `gpu.ecc` | ✘ FAIL | GPU1 has 3 uncorrectable ECC errors | `reset_gpu`: drain the node and run \\`nvidia-smi -q -d ECC\\`; reset with \\`nvidia-smi -r -i 1\\` |"
        ), "{text}");
        assert!(text.contains("| ↳ GPU1 | ✘ FAIL |"));
        assert!(text.contains(
            "| `host.shm` | ! warn | /dev/shm is 64 MiB | `fix_config`: docker run --shm-size=16g (or --ipc=host) |"
        ), "{text}");
        assert!(
            text.contains(
                "| `net.master_port` | ? ERROR | probe crashed: SIGSEGV | `fix_config` |"
            ),
            "an action without a hint: {text}"
        );
        assert!(text[details..].contains("| `gpu.topology` | ✔ pass |"));
        assert!(text.contains("#### GPU topology (`gpu.topology`)"));
        assert!(text.starts_with("### ❌ gpucheck: NOT READY"));
    }

    /// The hostile run through markdown-it-py (the test venv's, GFM tables
    /// on): every table keeps its shape, no HTML but ours gets through, and
    /// the hostile text reads back whole in the cells.
    #[test]
    fn hostile_text_keeps_the_tables_whole_in_a_markdown_parser() {
        let shapes = parse(&Markdown.render(&fixtures::hostile()));
        assert!(shapes.contains("tables 3"), "{shapes}");
        assert!(!shapes.contains("ragged"), "{shapes}");
        assert!(!shapes.contains("html <x>"), "{shapes}");
        // The control characters read as their escapes, the rest as is.
        let whole = "\ncell \\u{1}\\u{1b}[31m]]><x>&\"' \u{FFFF}\n";
        assert!(shapes.matches(whole).count() >= 5, "{shapes}");
    }

    /// Parse with markdown-it-py; one line per finding.
    pub(super) fn parse(text: &str) -> String {
        use std::io::Write;
        const PY: &str = r##"
import sys
from markdown_it import MarkdownIt
md = MarkdownIt("commonmark").enable("table")
tokens = md.parse(sys.stdin.read())
out, tables, row, widths = [], 0, None, []
for t in tokens:
    if t.type == "table_open": tables += 1; widths = []
    if t.type == "tr_open": row = 0
    if t.type in ("th_open", "td_open"): row += 1
    if t.type == "tr_close": widths.append(row)
    if t.type == "table_close" and len(set(widths)) != 1: out.append(f"ragged {widths}")
    if t.type == "html_block": out.append("html " + t.content.strip())
    if t.type == "inline":
        for c in t.children or []:
            if c.type == "html_inline": out.append("html " + c.content)
            if c.type == "text": out.append("cell " + c.content)
out.append(f"tables {tables}")
print("\n".join(out))
"##;
        let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
        let mut child = std::process::Command::new(python)
            .args(["-c", PY])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the test venv's python (scripts/setup-venv.sh)");
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(text.as_bytes()).expect("write to python");
        }
        let out = child.wait_with_output().expect("python");
        assert!(out.status.success(), "markdown-it failed on:\n{text}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

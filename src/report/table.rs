//! The table report: what a person reads in a terminal, or pastes into an
//! issue. One header line naming the host, then the checks grouped by check
//! group in run order, one line per check (status badge, id, summary), the
//! fix under every row that did not pass, the check's data tables (the GPU
//! topology matrix, the NCCL size sweep), and the one-line verdict last.
//!
//! Layout choices:
//! - Plain aligned lines, not a boxed grid: they survive copy-paste into an
//!   issue or a chat, `grep` finds a check with its verdict on one line, and
//!   nothing is lost when the terminal is narrower than the table.
//! - Summaries and hints are wrapped at spaces to the terminal
//!   width (COLUMNS, else the terminal's size, else 80; the caller decides),
//!   continued under their own first column. A command in backticks is
//!   broken only when it cannot fit on a line of its own, so a command that
//!   fits still pastes into a shell whole. The id column is as wide as the
//!   longest selected id (16 at most: a longer id pushes its own summary
//!   right). The verdict, last, wraps the same way; it stays one line when
//!   nothing is wrapped (a pipe without COLUMNS), for `tail -1`.
//! - The badge carries the verdict in words ("✘ FAIL"), so the table reads
//!   the same without colour; colour is only added when the caller says so.
//! - Data tables are drawn without `--verbose`: for the checks that have
//!   them, they are the result. `--verbose` adds metrics, facts, per-GPU rows
//!   and durations.
//! - Text from the machine (environment values, driver strings) is shown with
//!   control characters escaped (`\u{1b}`), so a hostile value cannot recolour
//!   or rewrite the terminal.

use gpucheck_checks::Status;

use super::text::{badge, clean, data_table_lines, device_lines, duration_text, metric_text, wrap};
use super::{CheckResult, Reporter, Run};

pub struct Table {
    /// Add ANSI colour (the caller decides from the TTY, NO_COLOR and --color).
    pub color: bool,
    /// Add metrics, facts, per-device rows and durations.
    pub verbose: bool,
    /// Only the verdict line.
    pub quiet: bool,
    /// Wrap to this many columns; None: one line per summary and hint.
    pub width: Option<usize>,
}

/// Width of the badge column: the longest badge is "? ERROR".
const BADGE_WIDTH: usize = 7;
/// Ids longer than this push their own summary right instead of widening the
/// column for every row.
const ID_WIDTH_MAX: usize = 16;
/// Indent of check rows under their group heading.
const ROW_INDENT: &str = "  ";
/// Indent of everything under a check row (hint, tables, verbose details):
/// the id column.
const DETAIL_INDENT: &str = "           ";
/// Width of "→ fix: " before a hint.
const HINT_MARK_WIDTH: usize = 7;
/// Indent of a wrapped verdict's continuation lines.
const VERDICT_INDENT: &str = "  ";

impl Reporter for Table {
    fn render(&self, run: &Run) -> String {
        if self.color {
            // colored consults NO_COLOR, CLICOLOR and the TTY itself unless
            // overridden; the caller has already decided. Only ever set to
            // true: with colour off nothing here calls colored at all.
            colored::control::set_override(true);
        }
        if self.quiet {
            // The verdict alone, as a health check logs it: never coloured.
            return format!("{}\n", clean(&run.verdict_line()));
        }
        let run = &run.with_actions();
        let mut lines: Vec<String> = Vec::new();
        // The header wraps like the rest (an --only list makes it long).
        lines.extend(self.wrapped(&self.header(run), 0, VERDICT_INDENT.len()));
        if self.verbose {
            lines.push(host_line(run));
        }
        if run.results.is_empty() {
            lines.push(String::new());
            lines.push("no checks ran".to_string());
        }
        let id_width = run
            .results
            .iter()
            .map(|r| r.id.chars().count())
            .max()
            .unwrap_or(0)
            .min(ID_WIDTH_MAX);
        for (group, results) in run.groups() {
            push_blank(&mut lines);
            lines.push(self.paint_heading(&clean(group)));
            for r in results {
                self.check_lines(r, id_width, &mut lines);
            }
        }
        push_blank(&mut lines);
        // The verdict, last: wrapped like the rest on a terminal or under
        // COLUMNS; one line when the table is not wrapped (a pipe without
        // COLUMNS, where scripts read it with `tail -1`). --quiet and the
        // JUnit report carry it as one line.
        let verdict = clean(&run.verdict_line());
        for (i, piece) in self
            .wrapped(&verdict, 0, VERDICT_INDENT.len())
            .into_iter()
            .enumerate()
        {
            let indent = if i == 0 { "" } else { VERDICT_INDENT };
            lines.push(format!("{indent}{}", self.paint_verdict(run, &piece)));
        }
        let mut out = String::new();
        for line in lines {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

impl Table {
    fn header(&self, run: &Run) -> String {
        let h = &run.host;
        let mut parts = vec![
            format!("{} {}", clean(&run.tool), clean(&run.tool_version)),
            clean(&h.hostname),
            clean(&h.os),
        ];
        if let Some(c) = &h.container {
            parts.push(clean(c));
        }
        // What ran: the --only patterns in place of the profile's list (the
        // profile still said when it is not the default: a group selects a
        // full check only under a profile that runs it).
        if run.only.is_empty() {
            parts.push(format!("profile {}", run.profile.as_str()));
        } else {
            parts.push(format!("only {}", clean(&run.only.join(","))));
            if run.profile != gpucheck_checks::Profile::Standard {
                parts.push(format!("profile {}", run.profile.as_str()));
            }
        }
        if run.strict {
            parts.push("strict".to_string());
        }
        parts.join(" · ")
    }

    /// The row of one check and everything under it.
    fn check_lines(&self, r: &CheckResult, id_width: usize, lines: &mut Vec<String>) {
        let o = &r.outcome;
        // One row per check: a line break in a summary is text from the
        // machine (a process's command line), shown escaped.
        let first = escaped_line(o.summary.trim_end_matches('\n'));
        let badge = format!("{:<BADGE_WIDTH$}", badge(o.status));
        let id = format!("{:<id_width$}", clean(&r.id));
        let row_prefix = ROW_INDENT.len() + BADGE_WIDTH + 2 + id.chars().count() + 2;
        let mut first_lines = self.wrapped(&first, row_prefix, row_prefix).into_iter();
        lines.push(format!(
            "{ROW_INDENT}{}  {id}  {}",
            self.paint(&badge, o.status),
            first_lines.next().unwrap_or_default()
        ));
        for more in first_lines {
            lines.push(format!("{}{more}", " ".repeat(row_prefix)));
        }
        if o.status != Status::Pass {
            match &o.hint {
                Some(hint) => {
                    let mark = fix_mark(o);
                    let arrow = self.paint(&mark, o.status);
                    let first = DETAIL_INDENT.len() + mark.chars().count() + 1;
                    let under = DETAIL_INDENT.len() + HINT_MARK_WIDTH;
                    let mut first_line = true;
                    for part in hint.lines() {
                        let lead = if first_line { first } else { under };
                        for piece in self.wrapped(&clean(part), lead, under) {
                            if first_line {
                                lines.push(format!("{DETAIL_INDENT}{arrow} {piece}"));
                                first_line = false;
                            } else {
                                lines.push(format!(
                                    "{DETAIL_INDENT}{}{piece}",
                                    " ".repeat(HINT_MARK_WIDTH)
                                ));
                            }
                        }
                    }
                }
                // A check that failed without saying how to fix it still
                // points somewhere useful.
                None if o.status != Status::Skip => lines.push(format!(
                    "{DETAIL_INDENT}{} gpucheck explain {}",
                    self.paint("→ more:", o.status),
                    clean(&r.id)
                )),
                None => {}
            }
        }
        if self.verbose {
            for m in &o.metrics {
                lines.push(format!("{DETAIL_INDENT}{}", metric_text(m)));
            }
            for (k, v) in &o.facts {
                lines.push(format!(
                    "{DETAIL_INDENT}{}: {}",
                    clean(k),
                    clean(&v.to_string())
                ));
            }
            for line in device_lines(&o.devices) {
                lines.push(format!("{DETAIL_INDENT}{line}"));
            }
            lines.push(format!(
                "{DETAIL_INDENT}took {}",
                duration_text(o.duration_ms)
            ));
        }
        // A blank line above and below each drawn table keeps the next
        // check's row from reading as part of it.
        for t in &o.tables {
            push_blank(lines);
            for line in data_table_lines(t) {
                lines.push(format!("{DETAIL_INDENT}{line}"));
            }
            lines.push(String::new());
        }
    }

    /// `text` as lines that fit the width after prefixes of `first` and
    /// `rest` columns; one line when the table is not wrapped.
    fn wrapped(&self, text: &str, first: usize, rest: usize) -> Vec<String> {
        match self.width {
            Some(width) => wrap(text, width, first, rest),
            None => vec![text.to_string()],
        }
    }

    fn paint(&self, text: &str, status: Status) -> String {
        if !self.color {
            return text.to_string();
        }
        use colored::Colorize;
        match status {
            Status::Pass => text.green().to_string(),
            Status::Warn => text.yellow().bold().to_string(),
            Status::Fail => text.red().bold().to_string(),
            Status::Error => text.magenta().bold().to_string(),
            Status::Skip => text.dimmed().to_string(),
        }
    }

    fn paint_heading(&self, text: &str) -> String {
        if !self.color {
            return text.to_string();
        }
        use colored::Colorize;
        text.bold().underline().to_string()
    }

    fn paint_verdict(&self, run: &Run, line: &str) -> String {
        if !self.color {
            return line.to_string();
        }
        use colored::Colorize;
        let c = &run.counts;
        if run.exit_code != 0 {
            line.red().bold().to_string()
        } else if c.warn > 0 {
            line.yellow().bold().to_string()
        } else {
            line.green().bold().to_string()
        }
    }
}

/// `text` as one line: line breaks and tabs escaped (`\n`), everything else
/// as [`clean`] shows it.
fn escaped_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' | '\t' => out.extend(c.escape_default()),
            c => out.push_str(&clean(c.encode_utf8(&mut [0; 4]))),
        }
    }
    out
}

/// One empty line, unless the last line already is one.
fn push_blank(lines: &mut Vec<String>) {
    if lines.last().is_some_and(|l| !l.is_empty()) {
        lines.push(String::new());
    }
}

/// The host in more detail, for --verbose.
fn host_line(run: &Run) -> String {
    let h = &run.host;
    format!(
        "kernel {} · {} · {} · {} CPUs · {} GiB memory",
        clean(&h.kernel),
        clean(&h.arch),
        clean(&h.cpu),
        h.cpu_count,
        h.memory_total_mib / 1024
    )
}

/// "→ fix:" before a hint, with the repair action where there is one:
/// "→ fix (reset_gpu):". The GPUs it applies to are in the hint's words.
fn fix_mark(o: &gpucheck_checks::Outcome) -> String {
    match super::text::shown_action(o) {
        Some(action) => format!("→ fix ({action}):"),
        None => "→ fix:".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;
    use crate::report::text::number_text;
    use gpucheck_checks::DataTable;

    fn plain(verbose: bool) -> Table {
        Table {
            color: false,
            verbose,
            quiet: false,
            width: None,
        }
    }

    /// The line of the report that starts with `prefix` after trimming.
    fn line_of<'a>(out: &'a str, prefix: &str) -> &'a str {
        out.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{out}"))
    }

    /// The line right after the first line containing `needle`.
    fn line_after<'a>(out: &'a str, needle: &str) -> &'a str {
        let mut it = out.lines().skip_while(|l| !l.contains(needle));
        it.next();
        it.next().unwrap_or("")
    }

    #[test]
    fn every_status_has_its_badge_and_word() {
        let out = plain(false).render(&fixtures::every_status());
        assert!(line_of(&out, "✔ pass").contains("gpu.topology"));
        assert!(line_of(&out, "✘ FAIL").contains("gpu.ecc"));
        assert!(line_of(&out, "! warn").contains("host.shm  "));
        assert!(line_of(&out, "- skip").contains("needs gpu.ecc, which failed"));
        assert!(line_of(&out, "? ERROR").contains("probe crashed: SIGSEGV"));
        // Badge, id and summary on one line, columns aligned across groups.
        let ecc = line_of(&out, "✘ FAIL");
        let shm = line_of(&out, "! warn");
        assert_eq!(
            ecc.find("GPU1 has").map(|i| ecc[..i].chars().count()),
            shm.find("/dev/shm").map(|i| shm[..i].chars().count())
        );
    }

    #[test]
    fn the_fix_is_on_its_own_line_under_every_row_that_did_not_pass() {
        let out = plain(false).render(&fixtures::every_status());
        assert_eq!(
            line_after(&out, "gpu.ecc").trim(),
            "→ fix (reset_gpu): drain the node and run `nvidia-smi -q -d ECC`; reset with \
             `nvidia-smi -r -i 1`"
        );
        assert_eq!(
            line_after(&out, "host.shm").trim(),
            "→ fix (fix_config): docker run --shm-size=16g (or --ipc=host)"
        );
        // An error without a hint still points somewhere.
        assert_eq!(
            line_after(&out, "net.master_port").trim(),
            "→ more: gpucheck explain net.master_port"
        );
        // The skip reason is the row's summary; no fix line for a skip.
        assert!(!line_after(&out, "nccl.allreduce").contains('→'));
        // A pass has no fix line.
        assert!(!line_after(&out, "gpu.topology").contains('→'));
    }

    #[test]
    fn groups_in_run_order_with_headings_and_verdict_last() {
        let run = fixtures::every_status();
        let out = plain(false).render(&run);
        let headings: Vec<&str> = out
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with(' '))
            .collect();
        assert!(headings[0].starts_with("gpucheck 0.1.0 · gpu-node-7 · Ubuntu 22.04.4 LTS"));
        assert_eq!(&headings[1..5], ["gpu", "host", "nccl", "net"]);
        assert_eq!(out.lines().last(), Some(run.verdict_line().as_str()));
        assert!(run.verdict_line().starts_with("NOT READY"));
    }

    #[test]
    fn topology_matrix_is_drawn_like_nvidia_smi_topo_without_verbose() {
        let out = plain(false).render(&fixtures::every_status());
        let lines: Vec<&str> = out.lines().collect();
        let title = lines
            .iter()
            .position(|l| l.trim() == "GPU topology")
            .expect("table title");
        let matrix: Vec<&str> = lines[title + 1..title + 4]
            .iter()
            .map(|l| l.trim_start())
            .collect();
        assert_eq!(
            matrix,
            [
                "GPU0  GPU1  CPU Affinity  NUMA Affinity",
                "GPU0   X    NV18  0-95          0",
                "GPU1  NV18   X    0-95          0",
            ]
        );
        // The header row starts under the first GPU column, not the corner.
        assert_eq!(lines[title + 1].find("GPU0"), lines[title + 2].find(" X "));
        assert_eq!(lines[title + 4].trim(), "Legend:");
        assert_eq!(lines[title + 5].trim(), "X    = Self");
    }

    #[test]
    fn numeric_columns_are_right_aligned() {
        let t = DataTable {
            title: "all_reduce sweep".into(),
            header: ["size", "busbw GB/s"].map(String::from).to_vec(),
            rows: vec![
                ["8 MiB", "95.5"].map(String::from).to_vec(),
                ["1 GiB", "431.25"].map(String::from).to_vec(),
            ],
            legend: None,
        };
        let lines = data_table_lines(&t);
        assert_eq!(
            lines,
            [
                "all_reduce sweep",
                "  size   busbw GB/s",
                "  8 MiB        95.5",
                "  1 GiB      431.25",
            ]
        );
    }

    #[test]
    fn verbose_adds_metrics_facts_devices_and_duration() {
        let run = fixtures::every_status();
        let terse = plain(false).render(&run);
        let out = plain(true).render(&run);
        for line in [
            "ecc_uncorrectable = 3 count",
            "driver: 570.86.15",
            "shm_size = 64 MiB",
            "kernel 5.15.0-105-generic · x86_64 · AMD EPYC 9654 96-Core Processor · 192 CPUs · 2014 GiB memory",
        ] {
            assert!(out.lines().any(|l| l.trim() == line), "{line:?} missing:\n{out}");
            assert!(!terse.contains(line), "{line:?} shown without --verbose");
        }
        let gpu1 = line_of(&out, "GPU1  NVIDIA");
        assert_eq!(
            gpu1.trim_start(),
            "GPU1  NVIDIA H100 80GB HBM3  ✘ FAIL  3 uncorrectable ECC errors"
        );
        assert_eq!(
            line_after(&out, "GPU1  NVIDIA").trim(),
            "ecc_uncorrectable = 3 count"
        );
        assert!(out.contains("took 0 ms"));
    }

    #[test]
    fn quiet_is_the_verdict_alone() {
        let run = fixtures::every_status();
        let t = Table {
            color: false,
            verbose: false,
            quiet: true,
            width: None,
        };
        assert_eq!(t.render(&run), format!("{}\n", run.verdict_line()));
    }

    #[test]
    fn colour_only_when_asked() {
        let run = fixtures::every_status();
        let plain_out = plain(true).render(&run);
        assert!(!plain_out.contains('\u{1b}'));
        let coloured = Table {
            color: true,
            verbose: false,
            quiet: false,
            width: None,
        }
        .render(&run);
        assert!(
            coloured.contains("\u{1b}[1;31m✘ FAIL \u{1b}[0m"),
            "{coloured}"
        );
        assert!(coloured.contains("\u{1b}[32m✔ pass \u{1b}[0m"));
        // Same words with the escapes removed.
        assert_eq!(strip_ansi(&coloured), plain(false).render(&run));
    }

    #[test]
    fn no_trailing_whitespace_and_reasonable_width() {
        let run = fixtures::every_status();
        let out = plain(true).render(&run);
        for l in out.lines() {
            assert_eq!(l, l.trim_end(), "trailing whitespace: {l:?}");
            // The verdict line is shared by every format and may name up to
            // four checks; it is the one line allowed to run long. A fix
            // line carries its repair action ("→ fix (reset_gpu):").
            if l != run.verdict_line() {
                assert!(l.chars().count() <= 112, "line over 112 columns: {l:?}");
            }
        }
    }

    #[test]
    fn hostile_text_cannot_drive_the_terminal() {
        let out = plain(true).render(&fixtures::hostile());
        assert!(!out.contains('\u{1b}'), "raw ESC in:\n{out}");
        assert!(!out.contains('\u{1}'));
        assert!(out.contains("\\u{1}\\u{1b}[31m]]><x>&\"'"));
        // Still one line per check: nothing in the text broke the layout.
        assert!(line_of(&out, "✘ FAIL").contains("env.torchrun"));
        assert!(line_of(&out, "? ERROR").contains("env.error"));
    }

    #[test]
    fn numbers_read_like_numbers() {
        assert_eq!(number_text(8.0), "8");
        assert_eq!(number_text(431.25), "431.2");
        assert_eq!(number_text(0.1 + 0.2), "0.3");
        assert_eq!(number_text(12.345), "12.35");
        assert_eq!(number_text(0.000123456), "0.000123");
        assert_eq!(number_text(-3.5), "-3.5");
        assert_eq!(number_text(f64::NAN), "NaN");
        assert_eq!(duration_text(2412.0), "2.41 s");
        assert_eq!(duration_text(12.34), "12 ms");
        assert_eq!(duration_text(0.0587), "0.06 ms");
        assert_eq!(duration_text(0.0), "0 ms");
    }

    fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for n in chars.by_ref() {
                    if n.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn a_line_break_in_a_summary_is_shown_escaped_on_its_row() {
        let run = fixtures::run(
            vec![fixtures::result(
                "gpu.processes",
                gpucheck_checks::Profile::Quick,
                gpucheck_checks::Outcome::warn(
                    "pid 42 python -c 'import os\nos.system(1)' (1024 MiB)",
                    "stop it",
                ),
            )],
            false,
        );
        let out = plain(false).render(&run);
        assert!(
            out.contains("gpu.processes  pid 42 python -c 'import os\\nos.system(1)' (1024 MiB)\n"),
            "{out}"
        );
        assert!(
            !out.lines().any(|l| l.trim_start().starts_with("os.system")),
            "{out}"
        );
    }

    #[test]
    fn wrapped_to_80_columns_with_commands_kept_whole() {
        let hint =
            "no GPU was passed into this container: start it with `docker run --gpus all ...` \
                    (needs the NVIDIA Container Toolkit on the host: \
                    `sudo nvidia-ctk runtime configure --runtime=docker`), or in Kubernetes \
                    request the nvidia.com/gpu resource";
        let run = fixtures::run(
            vec![fixtures::result(
                "host.devices",
                gpucheck_checks::Profile::Quick,
                gpucheck_checks::Outcome::fail("a summary ".repeat(20).trim_end(), hint),
            )],
            false,
        );
        let table = Table {
            width: Some(80),
            ..plain(false)
        };
        let out = table.render(&run);
        let body: Vec<&str> = out.lines().collect();
        // Every line, the verdict too.
        for line in &body {
            assert!(line.chars().count() <= 80, "{line:?} in\n{out}");
        }
        assert!(
            out.contains("`sudo nvidia-ctk runtime configure --runtime=docker`"),
            "{out}"
        );
        assert!(out.contains("`docker run --gpus all ...`"), "{out}");
        // The id column is as wide as the id, not 24.
        assert!(out.contains("✘ FAIL   host.devices  a summary"), "{out}");
        // Continuations start under their own first column.
        let hint_lines: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.contains("→ fix (fix_config):"))
            .take(3)
            .collect();
        assert!(hint_lines[1].starts_with(&" ".repeat(18)), "{out}");
    }

    #[test]
    fn the_verdict_wraps_at_the_width_and_stays_one_line_unwrapped() {
        let run = fixtures::every_status();
        let verdict = run.verdict_line();
        assert!(verdict.chars().count() > 40, "{verdict}");
        let narrow = Table {
            width: Some(40),
            ..plain(false)
        };
        let out = narrow.render(&run);
        let tail: Vec<&str> = out
            .lines()
            .skip_while(|l| !verdict.starts_with(l.trim()) || l.is_empty())
            .collect();
        assert!(tail.len() > 1, "{out}");
        for line in &tail {
            assert!(line.chars().count() <= 40, "{line:?} in\n{out}");
        }
        let joined: Vec<&str> = tail.iter().map(|l| l.trim()).collect();
        assert_eq!(joined.join(" "), verdict);
        // Not wrapped (a pipe without COLUMNS): one line, the last.
        let out = plain(false).render(&run);
        assert_eq!(out.lines().last(), Some(verdict.as_str()));
    }
}

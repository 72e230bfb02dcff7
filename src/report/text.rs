//! Text helpers every reporter shares: the verdict badge, machine text made
//! safe for one line, numbers, metrics and durations as a person reads them,
//! and the per-GPU rows and data tables drawn as aligned plain lines.

use comfy_table::CellAlignment;
use gpucheck_checks::domain::action::Action;
use gpucheck_checks::{DataTable, DeviceResult, Metric, Outcome, Status};

/// The repair action a person is shown beside a hint: `none` (a check
/// interrupted before its verdict: nothing to repair) is not shown.
pub fn shown_action(o: &Outcome) -> Option<Action> {
    o.action.filter(|a| *a != Action::None)
}

/// The verdict as a person reads it without colour: a glyph and a word,
/// upper case where the exit code turns to 1.
pub fn badge(status: Status) -> &'static str {
    match status {
        Status::Pass => "✔ pass",
        Status::Warn => "! warn",
        Status::Fail => "✘ FAIL",
        Status::Skip => "- skip",
        Status::Error => "? ERROR",
    }
}

/// Text from the machine made safe for a terminal and for one line: tabs
/// and line breaks become spaces; other control characters (ESC, BEL, C1)
/// and the bidirectional overrides are shown escaped (`\u{1b}`) instead of
/// being acted on.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' | '\n' | '\r' => out.push(' '),
            c if c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                out.extend(c.escape_default())
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` (as it is when it fits) broken at spaces into lines of at most `width` columns, the first
/// `first` columns and the others `rest` columns narrower (their prefixes).
/// A span in backticks is a command: it is broken only when it cannot fit
/// on a line of its own, so a command that fits still pastes whole.
pub fn wrap(text: &str, width: usize, first: usize, rest: usize) -> Vec<String> {
    if first + text.chars().count() <= width {
        return vec![text.to_string()];
    }
    let mut words: Vec<String> = Vec::new();
    let mut in_command = false;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        match words.last_mut() {
            Some(last) if in_command => {
                last.push(' ');
                last.push_str(word);
            }
            _ => words.push(word.to_string()),
        }
        if word.matches('`').count() % 2 == 1 {
            in_command = !in_command;
        }
    }
    let room = |lines: &Vec<String>| {
        let used = if lines.is_empty() { first } else { rest };
        width.saturating_sub(used).max(MIN_WRAP_COLUMNS)
    };
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in words {
        let fits = |line: &str, lines: &Vec<String>| {
            let len = line.chars().count();
            len + usize::from(len > 0) + word.chars().count() <= room(lines)
        };
        if fits(&line, &lines) {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&word);
            continue;
        }
        if !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        if word.chars().count() <= room(&lines) || !word.contains(' ') {
            line = word;
        } else {
            // A command too long for any line: broken at its spaces.
            let used = if lines.is_empty() { first } else { rest };
            let mut parts = wrap(&word.replace('`', "\u{0}"), width, used, rest);
            for p in parts.iter_mut() {
                *p = p.replace('\u{0}', "`");
            }
            line = parts.pop().unwrap_or_default();
            lines.extend(parts);
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// A line never gets narrower than this, whatever the prefix.
const MIN_WRAP_COLUMNS: usize = 20;

/// A number as a person reads it: integers without a fraction, others with
/// about three significant digits (the JSON report has the exact value).
pub fn number_text(value: f64) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    let magnitude = value.abs();
    if value.fract() == 0.0 && magnitude < 1e15 {
        return format!("{value:.0}");
    }
    let decimals = if magnitude >= 100.0 {
        1
    } else if magnitude >= 1.0 {
        2
    } else {
        // 0.0123 -> 3 decimals ... 0.000123 -> 6; tiny values stop at 12.
        (2 - magnitude.log10().floor() as i32).clamp(3, 12) as usize
    };
    let s = format!("{value:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// `name = value unit`.
pub fn metric_text(m: &Metric) -> String {
    let unit = clean(&m.unit);
    if unit.is_empty() {
        format!("{} = {}", clean(&m.name), number_text(m.value))
    } else {
        format!("{} = {} {unit}", clean(&m.name), number_text(m.value))
    }
}

/// A duration in milliseconds as "0.06 ms", "12 ms" or "2.41 s".
pub fn duration_text(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        let s = format!("{:.2}", ms.max(0.0));
        format!("{} ms", s.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// Per-device rows (GPU index, name, verdict, summary), each followed by
/// that device's metrics on a line of their own.
pub fn device_lines(devices: &[DeviceResult]) -> Vec<String> {
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            vec![
                d.label
                    .as_deref()
                    .map(clean)
                    .unwrap_or_else(|| format!("GPU{}", d.index)),
                clean(&d.name),
                badge(d.status).to_string(),
                clean(&d.summary),
            ]
        })
        .collect();
    let mut lines = Vec::new();
    // One line per row: no header, and cells never wrap.
    for (line, d) in aligned(None, &rows).into_iter().zip(devices) {
        lines.push(line);
        if !d.metrics.is_empty() {
            let metrics: Vec<String> = d.metrics.iter().map(metric_text).collect();
            lines.push(format!("      {}", metrics.join(", ")));
        }
    }
    lines
}

/// A [`DataTable`] drawn compactly, the way `nvidia-smi topo -m` draws the
/// topology: the title, a borderless matrix with the header as first row,
/// columns of numbers right-aligned, then the legend.
///
/// A matrix whose header is one cell shorter than its rows gets an empty
/// corner cell, so `["GPU0", "GPU1"]` over rows `["GPU0", " X ", "NV18"]`
/// lines up.
pub fn data_table_lines(t: &DataTable) -> Vec<String> {
    let mut lines = vec![clean(&t.title)];
    let width = t.rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut header: Vec<String> = t.header.iter().map(|h| clean(h)).collect();
    if !header.is_empty() && header.len() + 1 == width {
        header.insert(0, String::new());
    }
    let rows: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| r.iter().map(|c| clean(c)).collect())
        .collect();
    let header = (!header.is_empty()).then_some(header);
    lines.extend(
        aligned(header.as_deref(), &rows)
            .into_iter()
            .map(|l| format!("  {l}")),
    );
    if let Some(legend) = &t.legend {
        lines.push("Legend:".to_string());
        lines.extend(legend.lines().map(|l| format!("  {}", clean(l))));
    }
    lines
}

/// Rows of cells in columns two spaces apart, without borders or trailing
/// spaces. A column of numbers of different widths (a bandwidth sweep) is
/// right-aligned so the digits line up; everything else is left-aligned, as
/// in `nvidia-smi topo -m`.
fn aligned(header: Option<&[String]>, rows: &[Vec<String>]) -> Vec<String> {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    if let Some(h) = header {
        table.set_header(h);
    }
    for r in rows {
        table.add_row(r);
    }
    let columns = rows
        .iter()
        .map(Vec::len)
        .chain(header.map(<[String]>::len))
        .max()
        .unwrap_or(0);
    for i in 0..columns {
        let body: Vec<&str> = rows
            .iter()
            .filter_map(|r| r.get(i))
            .map(|c| c.trim())
            .filter(|c| !c.is_empty())
            .collect();
        let numeric = !body.is_empty() && body.iter().all(|c| c.parse::<f64>().is_ok());
        let ragged = body
            .iter()
            .any(|c| c.chars().count() != body[0].chars().count());
        if let Some(col) = table.column_mut(i) {
            col.set_padding((0, 2));
            if numeric && ragged {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
    }
    // The default content arrangement never wraps a cell, whatever the
    // terminal width.
    table.lines().map(|l| l.trim_end().to_string()).collect()
}

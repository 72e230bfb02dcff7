//! The HTML report: one self-contained page to attach to an incident. The
//! verdict, every result that needs attention with its fix and action,
//! and for a job the pictures the job checks publish: the wavefront (each
//! process group's ranks, in runs of the same state, the named ranks
//! marked), each rank's lateness into collectives, and what every check
//! says about each named rank (its frame, its GPU, its node's faults).
//!
//! Choices:
//! - Nothing leaves the page: no script, no font, no image but inline SVG,
//!   and a Content-Security-Policy that forbids loading anything, so the
//!   file opens the same offline, in a mail client or a ticket system.
//! - Every string of the report (a frame, a host name, a dump's op) is
//!   escaped ([`escape`]): a frame named `<script>` stays text.
//! - Drawn from the report only ([`WavefrontMap`], [`Lateness`] in the
//!   results' `data`): a 1,024-rank job is a few runs per group and a
//!   bucketed chart, not 1,024 rows.

use gpucheck_checks::facts::job::{GroupWave, Lateness, RankRun, RankState, WavefrontMap};
use gpucheck_checks::{DataTable, Status};

use super::text::{badge, number_text, shown_action};
use super::{CheckResult, Reporter, Run};

pub struct Html;

/// Text made safe as HTML text and as a quoted attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Tabs and line breaks read as spaces in HTML anyway; as
            // spaces in the file too, no line of it is forged.
            '\t' | '\n' | '\r' => out.push(' '),
            // NUL and the other controls are parse errors in HTML: shown
            // as the replacement character.
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The page's only style: inline, as the policy allows nothing else.
const STYLE: &str =
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}\
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ccc;padding:2px 6px;\
text-align:left;vertical-align:top}code,.mono{font-family:ui-monospace,monospace}\
.fail,.error{color:#b00}.warn{color:#a60}.pass{color:#070}.skip{color:#666}\
.sw{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:middle}\
svg text{font:11px system-ui,sans-serif}td.pass,td.warn,td.fail,td.skip,td.error{white-space:nowrap}";

/// The policy: nothing loads (no script, style sheet, font or frame),
/// inline style and data: images only.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

impl Reporter for Html {
    fn render(&self, run: &Run) -> String {
        let run = &run.with_actions();
        let mut out = String::new();
        out.push_str(&head(run));
        out.push_str(&attention(run));
        for r in &run.results {
            if let Some(map) = r.outcome.fact::<WavefrontMap>() {
                out.push_str(&wavefront_section(&map));
            }
        }
        for r in &run.results {
            if let Some(late) = r.outcome.fact::<Lateness>() {
                out.push_str(&lateness_section(&late, &r.outcome.ranks));
            }
        }
        out.push_str(&named_ranks(run));
        out.push_str(&every_check(run));
        out.push_str("</body>\n</html>\n");
        out
    }
}

/// The document's head, the verdict and where it ran.
fn head(run: &Run) -> String {
    let verdict = escape(&run.verdict_line());
    let class = if run.exit_code == 0 { "pass" } else { "fail" };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width\">\n\
         <title>gpucheck: {verdict}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1 class=\"{class}\" id=\"verdict\">gpucheck: {verdict}</h1>\n\
         <p>{} · {} · gpucheck {} · exit code {}</p>\n",
        escape(&run.host.hostname),
        escape(&run.host.os),
        escape(&run.tool_version),
        run.exit_code
    )
}

/// Every warn, fail and error: summary, fix and repair action.
fn attention(run: &Run) -> String {
    let needs: Vec<&CheckResult> = run
        .results
        .iter()
        .filter(|r| r.outcome.status >= Status::Warn)
        .collect();
    if needs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Needs attention</h2>\n<table>\n<tr><th>check</th><th>status</th>\
         <th>summary</th><th>fix</th><th>action</th></tr>\n",
    );
    for r in needs {
        let o = &r.outcome;
        out.push_str(&format!(
            "<tr><td><code>{}</code></td><td class=\"{}\">{}</td><td>{}</td><td>{}</td>\
             <td><code>{}</code></td></tr>\n",
            escape(&r.id),
            o.status.as_str(),
            escape(badge(o.status)),
            escape(&o.summary),
            escape(o.hint.as_deref().unwrap_or("")),
            shown_action(o).map_or("", |a| a.as_str())
        ));
    }
    out.push_str("</table>\n");
    out
}

/// Every check, one line each.
fn every_check(run: &Run) -> String {
    let mut out = String::from("<h2>Every check</h2>\n<table>\n");
    for r in &run.results {
        out.push_str(&format!(
            "<tr><td><code>{}</code></td><td class=\"{}\">{}</td><td>{}</td></tr>\n",
            escape(&r.id),
            r.outcome.status.as_str(),
            escape(badge(r.outcome.status)),
            escape(&r.outcome.summary)
        ));
    }
    out.push_str("</table>\n");
    out
}

/// Width of the drawings, in SVG units (they scale to the page).
const PLOT_W: f64 = 1000.0;
/// At most this many named runs get a label under their group's bar; the
/// rest are in the list below it and in each segment's tooltip.
const MAX_MARKS: usize = 8;
/// At most this many runs of a group are listed in words.
const MAX_LISTED: usize = 40;

/// The colour a state is drawn in: the named states warm, the rest cool.
fn colour(state: RankState) -> &'static str {
    match state {
        RankState::Waiting => "#9ecae1",
        RankState::Agrees => "#a1d99b",
        RankState::Behind => "#d62728",
        RankState::Ahead => "#ff7f0e",
        RankState::Mismatch => "#9467bd",
        RankState::Stuck => "#fdae6b",
        RankState::Elsewhere => "#d9d9d9",
    }
}

/// "rank 7", "ranks 0-136".
fn span_words(r: &RankRun) -> String {
    match r.first == r.last {
        true => format!("rank {}", r.first),
        false => format!("ranks {}-{}", r.first, r.last),
    }
}

/// What a run's tooltip and list line say.
fn run_words(g: &GroupWave, r: &RankRun) -> String {
    let mut s = format!("{}: {}", span_words(r), r.state.words());
    if let (Some(seq), false) = (g.seq, matches!(r.state, RankState::Agrees)) {
        s.push_str(&format!(" at #{seq} ({})", g.call));
    }
    if !r.doing.is_empty() {
        s.push_str(&format!("; {}", r.doing));
    }
    s
}

/// The wavefront: one bar per process group, ranks left to right.
fn wavefront_section(map: &WavefrontMap) -> String {
    const ROW_H: f64 = 64.0;
    let world = f64::from(map.world_size.max(1));
    let scale = PLOT_W / world;
    let height = ROW_H * map.groups.len() as f64;
    let mut svg = format!(
        "<svg id=\"wavefront\" width=\"100%\" viewBox=\"0 0 {PLOT_W} {height}\" role=\"img\">\n"
    );
    for (i, g) in map.groups.iter().enumerate() {
        svg.push_str(&group_bar(g, i as f64 * ROW_H, scale));
    }
    svg.push_str("</svg>\n");
    let mut out = format!(
        "<h2>Wavefront</h2>\n<p>Each process group's {} ranks, left to right: where each \
         stands at the group's first disagreement.</p>\n{}{svg}",
        map.world_size,
        legend(map)
    );
    for g in &map.groups {
        out.push_str(&run_list(g));
    }
    out
}

/// One group's bar at `top`: its label, a segment per run, and the named
/// runs marked under it.
fn group_bar(g: &GroupWave, top: f64, scale: f64) -> String {
    let mut at = match g.seq {
        Some(seq) => format!("{}: #{seq} {}", g.group, g.call),
        None => format!("{}: agree up to their last collective", g.group),
    };
    at = escape(&at);
    let bar_y = top + 16.0;
    let mut out = format!("<text x=\"0\" y=\"{}\">{at}</text>\n", top + 12.0);
    for r in &g.runs {
        let named = r.state.is_named();
        let min_w = if named { 3.0 } else { 0.5 };
        out.push_str(&format!(
            "<rect x=\"{:.2}\" y=\"{bar_y}\" width=\"{:.2}\" height=\"18\" fill=\"{}\">\
             <title>{}</title></rect>\n",
            f64::from(r.first) * scale,
            (f64::from(r.len()) * scale).max(min_w),
            colour(r.state),
            escape(&run_words(g, r))
        ));
    }
    for r in g.runs.iter().filter(|r| r.state.is_named()).take(MAX_MARKS) {
        let mid = (f64::from(r.first) + f64::from(r.len()) / 2.0) * scale;
        let x = mid.clamp(30.0, PLOT_W - 30.0);
        out.push_str(&format!(
            "<path d=\"M{mid:.2} {y} l-4 7 h8 z\" fill=\"#222\"/>\
             <text x=\"{x:.2}\" y=\"{}\" text-anchor=\"middle\" class=\"culprit\">{}</text>\n",
            bar_y + 37.0,
            escape(&span_words(r)),
            y = bar_y + 18.0
        ));
    }
    out
}

/// The states drawn, with their colours.
fn legend(map: &WavefrontMap) -> String {
    let mut seen: Vec<RankState> = Vec::new();
    for r in map.groups.iter().flat_map(|g| &g.runs) {
        if !seen.contains(&r.state) {
            seen.push(r.state);
        }
    }
    let items: Vec<String> = seen
        .iter()
        .map(|s| {
            format!(
                "<span class=\"sw\" style=\"background:{}\"></span>{}",
                colour(*s),
                s.words()
            )
        })
        .collect();
    format!("<p>{}</p>\n", items.join(""))
}

/// A group's runs in words: every run where they are few, else the named
/// ones first.
fn run_list(g: &GroupWave) -> String {
    let mut shown: Vec<&RankRun> = g.runs.iter().collect();
    if shown.len() > MAX_LISTED {
        shown.sort_by_key(|r| !r.state.is_named());
        shown.truncate(MAX_LISTED);
    }
    let mut out = format!("<p><b>{}</b></p>\n<ul>\n", escape(&g.group));
    for r in &shown {
        out.push_str(&format!(
            "<li><span class=\"sw\" style=\"background:{}\"></span>{}</li>\n",
            colour(r.state),
            escape(&run_words(g, r))
        ));
    }
    if g.runs.len() > shown.len() {
        out.push_str(&format!(
            "<li>... {} more runs of ranks</li>\n",
            g.runs.len() - shown.len()
        ));
    }
    out.push_str("</ul>\n");
    out
}

/// The lateness chart's plot area: its top, height and left margin (for
/// the axis labels), in SVG units.
const CHART_TOP: f64 = 10.0;
const CHART_H: f64 = 180.0;
const CHART_LEFT: f64 = 60.0;

/// At most this many bars in the lateness chart: more ranks share a bar
/// (the latest of them drawn), so one straggler of 1,024 still shows.
const MAX_BARS: usize = 256;

/// One bar of the lateness chart: the latest rank of a few.
struct Bar {
    first: u32,
    last: u32,
    /// The latest rank of them, and its median lateness, ms.
    rank: u32,
    median_ms: f64,
}

/// The ranks, by rank, in at most [`MAX_BARS`] bars.
fn bars(late: &Lateness) -> Vec<Bar> {
    let mut ranks = late.ranks.clone();
    ranks.sort_by_key(|r| r.rank);
    let per = ranks.len().div_ceil(MAX_BARS).max(1);
    ranks
        .chunks(per)
        .filter_map(|chunk| {
            let latest = chunk
                .iter()
                .max_by(|a, b| a.median_ms.total_cmp(&b.median_ms))?;
            Some(Bar {
                first: chunk.first()?.rank,
                last: chunk.last()?.rank,
                rank: latest.rank,
                median_ms: latest.median_ms,
            })
        })
        .collect()
}

/// Each rank's median lateness into collectives, the straggler line
/// dashed across.
fn lateness_section(late: &Lateness, named: &[u32]) -> String {
    let bars = bars(late);
    if bars.is_empty() {
        return String::new();
    }
    let top = bars
        .iter()
        .map(|b| b.median_ms)
        .fold(late.straggler_ms, f64::max)
        * 1.15;
    let width = (PLOT_W - CHART_LEFT) / bars.len() as f64;
    let y = |ms: f64| CHART_TOP + CHART_H * (1.0 - ms.max(0.0) / top);
    let mut svg = format!(
        "<svg id=\"lateness\" width=\"100%\" viewBox=\"0 0 {PLOT_W} {}\" role=\"img\">\n",
        CHART_TOP + CHART_H + 30.0
    );
    for (i, b) in bars.iter().enumerate() {
        svg.push_str(&lateness_bar(
            b,
            CHART_LEFT + i as f64 * width,
            width,
            y(b.median_ms),
            late,
        ));
    }
    svg.push_str(&format!(
        "<line x1=\"{CHART_LEFT}\" x2=\"{PLOT_W}\" y1=\"{line:.2}\" y2=\"{line:.2}\" stroke=\"#b00\" \
         stroke-dasharray=\"6 4\"/>\n<text x=\"{CHART_LEFT}\" y=\"{:.2}\" fill=\"#b00\">straggler: \
         {} ms</text>\n<text x=\"0\" y=\"{:.2}\">{} ms</text><text x=\"0\" y=\"{:.2}\">0 ms</text>\n\
         <text x=\"{CHART_LEFT}\" y=\"{:.2}\">rank {}</text><text x=\"{PLOT_W}\" y=\"{:.2}\" \
         text-anchor=\"end\">rank {}</text>\n</svg>\n",
        y(late.straggler_ms) - 4.0,
        number_text(late.straggler_ms),
        y(top) + 10.0,
        number_text(top.round()),
        y(0.0),
        CHART_TOP + CHART_H + 20.0,
        bars[0].first,
        CHART_TOP + CHART_H + 20.0,
        bars[bars.len() - 1].last,
        line = y(late.straggler_ms)
    ));
    let shared = match bars.len() < late.ranks.len() {
        true => " Each bar is a few ranks, drawn as the latest of them.",
        false => "",
    };
    format!(
        "<h2>Lateness into collectives</h2>\n<p>Each rank's median lateness entering a \
         collective, against the median of the others (job.straggler); {}.{shared}</p>\n{svg}",
        match named.is_empty() {
            true => "no rank is named".to_string(),
            false => format!("named: rank {}", join_ranks(named)),
        }
    )
}

/// One bar at `x`, its top at `bar_top`, with its tooltip.
fn lateness_bar(b: &Bar, x: f64, width: f64, bar_top: f64, late: &Lateness) -> String {
    let over = b.median_ms >= late.straggler_ms;
    let who = match b.first == b.last {
        true => format!("rank {}", b.rank),
        false => format!("ranks {}-{} (latest: rank {})", b.first, b.last, b.rank),
    };
    let mut out = format!(
        "<rect x=\"{x:.2}\" y=\"{bar_top:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\">\
         <title>{who}: {} ms late in the median</title></rect>\n",
        (width * 0.9).max(0.5),
        (CHART_TOP + CHART_H - bar_top).max(0.5),
        if over { "#d62728" } else { "#6baed6" },
        number_text(b.median_ms)
    );
    if over {
        out.push_str(&format!(
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\" class=\"culprit\">rank {}</text>\n",
            (x + width / 2.0).clamp(30.0, PLOT_W - 30.0),
            (bar_top - 3.0).max(10.0),
            b.rank
        ));
    }
    out
}

fn join_ranks(ranks: &[u32]) -> String {
    let words: Vec<String> = ranks.iter().map(u32::to_string).collect();
    words.join(", ")
}

/// At most this many named ranks get a section of their own.
const MAX_NAMED: usize = 32;

/// Each rank a check names, with what every check says about it: its
/// rows in the checks' tables (the frame it was in, its GPU and the
/// node's faults) and its per-rank rows.
fn named_ranks(run: &Run) -> String {
    let mut ranks: Vec<u32> = run
        .results
        .iter()
        .flat_map(|r| r.outcome.ranks.iter().copied())
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    if ranks.is_empty() {
        return String::new();
    }
    let mut out = String::from("<h2>Named ranks</h2>\n");
    for rank in ranks.iter().take(MAX_NAMED) {
        out.push_str(&format!(
            "<h3 id=\"rank-{rank}\" class=\"culprit\">rank {rank}</h3>\n"
        ));
        for r in &run.results {
            out.push_str(&about_rank(r, *rank));
        }
    }
    if ranks.len() > MAX_NAMED {
        out.push_str(&format!(
            "<p>... and {} more ranks.</p>\n",
            ranks.len() - MAX_NAMED
        ));
    }
    out
}

/// What `r` says about `rank`: its verdict where it names the rank (a
/// node's Xid on the rank's GPU, a missing dump), its rows of `r`'s
/// tables and devices.
fn about_rank(r: &CheckResult, rank: u32) -> String {
    let mut out = String::new();
    if r.outcome.ranks.contains(&rank) {
        out.push_str(&format!(
            "<p><code>{}</code> <span class=\"{}\">{}</span>: {}</p>\n",
            escape(&r.id),
            r.outcome.status.as_str(),
            escape(badge(r.outcome.status)),
            escape(&r.outcome.summary)
        ));
    }
    for t in &r.outcome.tables {
        let rows = rows_of(t, rank);
        if rows.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "<p><code>{}</code>: {}</p>\n<table>\n<tr>",
            escape(&r.id),
            escape(&t.title)
        ));
        for h in &t.header {
            out.push_str(&format!("<th>{}</th>", escape(h)));
        }
        out.push_str("</tr>\n");
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .map(|c| format!("<td class=\"mono\">{}</td>", escape(c)))
                .collect();
            out.push_str(&format!("<tr>{}</tr>\n", cells.concat()));
        }
        out.push_str("</table>\n");
    }
    let label = format!("rank {rank}");
    for d in r
        .outcome
        .devices
        .iter()
        .filter(|d| d.label.as_deref() == Some(label.as_str()))
    {
        out.push_str(&format!(
            "<p>{label} in <code>{}</code> <span class=\"{}\">{}</span>: {}</p>\n",
            escape(&r.id),
            d.status.as_str(),
            escape(badge(d.status)),
            escape(&d.summary)
        ));
    }
    out
}

/// The rows of `t` about `rank`: its `rank` column is the rank, or its
/// `ranks` column lists it.
fn rows_of(t: &DataTable, rank: u32) -> Vec<&Vec<String>> {
    let column = |name: &str| t.header.iter().position(|h| h == name);
    let (one, many) = (column("rank"), column("ranks"));
    t.rows
        .iter()
        .filter(|row| {
            let cell = |i: Option<usize>| i.and_then(|i| row.get(i)).map(String::as_str);
            cell(one).is_some_and(|c| c.trim() == rank.to_string())
                || cell(many).is_some_and(|c| lists_rank(c, rank))
        })
        .collect()
}

/// Whether a rank list as the reports write it ("0-3, 5", "7") holds
/// `rank`. A part cut short ("... (64 ranks)") holds none.
pub fn lists_rank(list: &str, rank: u32) -> bool {
    list.split(',').any(|part| {
        let part = part.trim();
        match part.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                (Ok(a), Ok(b)) => (a..=b).contains(&rank),
                _ => false,
            },
            None => part.parse::<u32>() == Ok(rank),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{self, result, run, HOSTILE};
    use gpucheck_checks::facts::job::{runs, RankLateness};
    use gpucheck_checks::{DeviceResult, Outcome, Profile};

    const SCRIPT: &str = "<script>alert(1)</script>";

    /// A job of `world` ranks whose rank `culprit` never joined, with
    /// `text` in every string a dump, a stack or a host gives.
    fn job_run(world: u32, culprit: u32, text: &str) -> Run {
        let states: Vec<(u32, RankState, String)> = (0..world)
            .map(|r| match r == culprit {
                true => (r, RankState::Behind, text.to_string()),
                false => (r, RankState::Waiting, String::new()),
            })
            .collect();
        let map = WavefrontMap {
            world_size: world,
            groups: vec![GroupWave {
                group: text.into(),
                seq: Some(6),
                call: text.into(),
                runs: runs(&states),
            }],
        };
        let frames = DataTable {
            title: text.into(),
            header: ["rank", "pid", "doing", "frame"].map(String::from).to_vec(),
            rows: vec![vec![
                culprit.to_string(),
                "1".into(),
                text.into(),
                text.into(),
            ]],
            legend: None,
        };
        let gpus = DataTable {
            title: "The job's GPUs".into(),
            header: ["gpu", "uuid", "ranks"].map(String::from).to_vec(),
            rows: vec![vec!["0".into(), text.into(), format!("0-{}", world - 1)]],
            legend: None,
        };
        let late = Lateness {
            straggler_ms: 20.0,
            ranks: (0..world)
                .map(|rank| RankLateness {
                    rank,
                    median_ms: if rank == culprit { 300.0 } else { 0.5 },
                    worst_ms: 400.0,
                    compared: 9,
                })
                .collect(),
        };
        let hang = Outcome::fail(text, text)
            .with_ranks(vec![culprit], None)
            .with_table(frames)
            .publish(&map);
        let straggler = Outcome::fail(text, text)
            .with_ranks(vec![culprit], None)
            .with_device(DeviceResult {
                index: culprit,
                label: Some(format!("rank {culprit}")),
                name: String::new(),
                uuid: None,
                status: Status::Fail,
                summary: text.into(),
                metrics: Vec::new(),
            })
            .publish(&late);
        let mut r = run(
            vec![
                result("job.hang", Profile::Quick, hang),
                result("job.straggler", Profile::Quick, straggler),
                result(
                    "job.gpus",
                    Profile::Quick,
                    Outcome::warn(text, text).with_table(gpus),
                ),
            ],
            false,
        );
        r.host.hostname = text.into();
        r
    }

    fn page(r: &Run) -> String {
        Html.render(r)
    }

    #[test]
    fn a_frame_named_script_stays_text_everywhere() {
        let html = page(&job_run(4, 2, SCRIPT));
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn hostile_text_opens_no_tag_and_ends_no_attribute() {
        for html in [page(&fixtures::hostile()), page(&job_run(4, 1, HOSTILE))] {
            assert!(!html.contains("<x>"), "{html}");
            assert!(!html.contains("\u{1b}"), "{html}");
            assert!(!html.contains("&\"'"), "{html}");
            assert!(html.contains("&lt;x&gt;&amp;&quot;&#39;"));
        }
    }

    #[test]
    fn the_page_loads_nothing_from_anywhere() {
        let html = page(&job_run(1024, 700, "train.py:12 in step"));
        assert!(html.contains(CSP));
        for outside in ["http://", "https://", "src=", "<script", "<link", "url("] {
            assert!(!html.contains(outside), "{outside}");
        }
    }

    #[test]
    fn the_verdict_and_each_fix_and_action_are_on_the_page() {
        let r = job_run(4, 2, "x");
        let html = page(&r);
        assert!(html.contains(&escape(&r.verdict_line())));
        assert!(html.contains("<td>x</td><td>x</td>"), "summary and fix");
        assert!(html.contains("<code>restart_job</code>"), "{html}");
    }

    #[test]
    fn a_thousand_ranks_draw_three_segments_and_mark_the_culprit() {
        let html = page(&job_run(1024, 700, "x"));
        let wave = &html[html.find("id=\"wavefront\"").expect("drawn")..];
        let wave = &wave[..wave.find("</svg>").expect("closed")];
        assert_eq!(wave.matches("<rect").count(), 3, "{wave}");
        assert!(wave.contains(">rank 700</text>"), "{wave}");
        assert!(html.contains("ranks 0-699: waiting at #6"));
        assert!(html.contains("ranks 701-1023: waiting at #6"));
        let chart = &html[html.find("id=\"lateness\"").expect("charted")..];
        assert_eq!(chart.matches("<rect").count(), MAX_BARS);
        assert!(chart.contains(">rank 700</text>"));
    }

    #[test]
    fn a_named_rank_gathers_its_frame_its_gpu_and_its_rows() {
        let html = page(&job_run(8, 3, "train.py:12 in step"));
        let own = &html[html.find("id=\"rank-3\"").expect("a section")..];
        assert!(own.contains("<th>frame</th>"), "{own}");
        assert!(own.contains("The job&#39;s GPUs"), "{own}");
        assert!(own.contains("<code>job.straggler</code>"), "{own}");
        assert!(!html.contains("id=\"rank-2\""), "only named ranks");
    }

    #[test]
    fn a_node_fault_naming_the_rank_is_joined_to_it() {
        let mut r = job_run(8, 3, "x");
        r.results.push(result(
            "job.gpus",
            Profile::Quick,
            Outcome::fail("Xid 79 on GPU 3 (ranks 3)", "reset it").with_ranks(vec![3], None),
        ));
        let html = page(&r);
        let own = &html[html.find("id=\"rank-3\"").expect("a section")..];
        assert!(own.contains("Xid 79 on GPU 3"), "{own}");
    }

    #[test]
    fn a_run_without_job_data_is_the_verdict_and_its_checks() {
        let html = page(&fixtures::every_status());
        assert!(!html.contains("Wavefront") && !html.contains("Named ranks"));
        assert!(html.contains("<h2>Every check</h2>"));
        assert!(html.ends_with("</html>\n"));
    }

    #[test]
    fn markup_in_text_stays_text() {
        assert_eq!(
            escape("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
    }

    #[test]
    fn quotes_cannot_end_an_attribute() {
        assert_eq!(escape("a\" onload=\"x"), "a&quot; onload=&quot;x");
        assert_eq!(escape("it's"), "it&#39;s");
    }

    #[test]
    fn an_ampersand_is_escaped_once_and_entities_stay_literal() {
        assert_eq!(escape("a & b"), "a &amp; b");
        assert_eq!(escape("&lt;"), "&amp;lt;");
    }

    #[test]
    fn control_characters_become_the_replacement_character() {
        assert_eq!(escape("a\u{0}b\u{1b}[31m"), "a\u{fffd}b\u{fffd}[31m");
        assert_eq!(escape("tab\tline\nREADY\r"), "tab line READY ");
    }

    #[test]
    fn plain_and_non_ascii_text_is_unchanged() {
        assert_eq!(escape(""), "");
        assert_eq!(
            escape("train.py:12 in step — ✔ µs"),
            "train.py:12 in step — ✔ µs"
        );
    }

    #[test]
    fn rank_lists_hold_their_ranges_and_single_ranks() {
        assert!(lists_rank("0-3, 5", 0) && lists_rank("0-3, 5", 3));
        assert!(lists_rank("0-3, 5", 5));
        assert!(!lists_rank("0-3, 5", 4) && !lists_rank("0-3, 5", 6));
        assert!(lists_rank("7", 7) && !lists_rank("17", 7));
        assert!(lists_rank("2, 3", 3));
    }

    #[test]
    fn a_cut_or_foreign_rank_list_holds_nothing() {
        assert!(!lists_rank("0-3, ... (64 ranks)", 40));
        assert!(!lists_rank("", 0) && !lists_rank("?", 0) && !lists_rank("a-b", 0));
    }

    #[test]
    fn a_thousand_ranks_share_at_most_the_bars_drawn() {
        let late = Lateness {
            straggler_ms: 20.0,
            ranks: (0..1024)
                .map(|rank| gpucheck_checks::facts::job::RankLateness {
                    rank,
                    median_ms: if rank == 700 { 250.0 } else { 1.0 },
                    worst_ms: 0.0,
                    compared: 9,
                })
                .collect(),
        };
        let b = bars(&late);
        assert_eq!(b.len(), MAX_BARS);
        assert_eq!((b[0].first, b[b.len() - 1].last), (0, 1023));
        let latest = b
            .iter()
            .find(|b| b.median_ms > 20.0)
            .expect("the straggler's bar");
        assert_eq!(latest.rank, 700);
        let few = Lateness {
            straggler_ms: 20.0,
            ranks: late.ranks[..3].to_vec(),
        };
        assert_eq!(bars(&few).len(), 3);
    }
}

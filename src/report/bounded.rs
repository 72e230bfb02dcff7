//! Every string a report shows, cut to a readable length. Much of a run's
//! text comes from elsewhere: a capture someone else wrote (`--replay`),
//! a Flight Recorder dump, a kernel log, an NCCL configuration file, the
//! environment, sysfs. A 50 MB host name must not become a 50 MB table,
//! JUnit file or Prometheus label; so before any reporter renders a run,
//! each string is cut ([`cut`], which says how much it left out). JSON
//! keeps the same cut values, so every report of one run agrees. Control
//! characters are each reporter's to escape (`text::clean` for the table,
//! Markdown and annotations; XML, JSON and Prometheus escaping for theirs).

use gpucheck_checks::domain::text::cut;
use gpucheck_checks::FactValue;

use super::Run;

/// The longest name a report shows: a host, an OS, a kernel, a CPU, a GPU
/// model, a label, a metric or fact name, a table heading. Host names stop
/// at 253 characters (DNS); the longest GPU model is under 40.
pub const NAME_MAX_CHARS: usize = 256;

/// The longest sentence a report shows: a summary, a hint, a table cell
/// or legend, a fact's text. The longest any check writes is about 500
/// characters (a hint naming a command); this leaves four times that.
pub const TEXT_MAX_CHARS: usize = 2000;

/// A name is one line: a line break in one (`evil\nREADY: 99 passed` as a
/// host name) would forge a line of a report that keeps its text raw (an
/// XML attribute, a Prometheus label), so it becomes a space.
fn name(s: &mut String) {
    if s.len() > NAME_MAX_CHARS {
        *s = cut(s, NAME_MAX_CHARS);
    }
    let line_break = |c: char| {
        matches!(
            c,
            '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        )
    };
    if s.contains(line_break) {
        *s = s.replace(line_break, " ");
    }
}

fn text(s: &mut String) {
    if s.len() > TEXT_MAX_CHARS {
        *s = cut(s, TEXT_MAX_CHARS);
    }
}

/// Every string inside a JSON value (a check's published facts), cut as
/// text; object keys as names.
fn value(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) => text(s),
        serde_json::Value::Array(items) => items.iter_mut().for_each(value),
        serde_json::Value::Object(map) => {
            if map.keys().any(|k| k.len() > NAME_MAX_CHARS) {
                let entries = std::mem::take(map);
                for (mut k, v) in entries {
                    name(&mut k);
                    map.insert(k, v);
                }
            }
            map.values_mut().for_each(value);
        }
        _ => {}
    }
}

/// `run` with every string cut to [`NAME_MAX_CHARS`] or [`TEXT_MAX_CHARS`].
pub fn cut_long_strings(run: &mut Run) {
    let h = &mut run.host;
    for s in [
        &mut h.hostname,
        &mut h.os,
        &mut h.kernel,
        &mut h.arch,
        &mut h.cpu,
    ] {
        name(s);
    }
    h.container.as_mut().map(name);
    name(&mut run.tool_version);
    run.interrupted.as_mut().map(name);
    run.unverified.iter_mut().for_each(name);
    for r in &mut run.results {
        name(&mut r.id);
        name(&mut r.title);
        name(&mut r.group);
        let o = &mut r.outcome;
        text(&mut o.summary);
        o.hint.as_mut().map(text);
        o.action_port.as_mut().map(name);
        for m in &mut o.metrics {
            name(&mut m.name);
            name(&mut m.unit);
        }
        for d in &mut o.devices {
            d.label.as_mut().map(name);
            name(&mut d.name);
            d.uuid.as_mut().map(name);
            text(&mut d.summary);
            for m in &mut d.metrics {
                name(&mut m.name);
                name(&mut m.unit);
            }
        }
        if o.facts.keys().any(|k| k.len() > NAME_MAX_CHARS) {
            let facts = std::mem::take(&mut o.facts);
            for (mut k, v) in facts {
                name(&mut k);
                o.facts.insert(k, v);
            }
        }
        for v in o.facts.values_mut() {
            if let FactValue::Text(s) = v {
                text(s);
            }
        }
        for t in &mut o.tables {
            name(&mut t.title);
            t.header.iter_mut().for_each(name);
            t.rows.iter_mut().flatten().for_each(text);
            t.legend.as_mut().map(text);
        }
        o.data.values_mut().for_each(value);
        if let Some(c) = &mut o.collective {
            name(&mut c.group);
            name(&mut c.group_desc);
            name(&mut c.op);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;

    #[test]
    fn a_long_foreign_string_is_cut_saying_so_and_a_short_one_kept() {
        let mut run = fixtures::every_status();
        run.host.hostname = format!("evil\n{}", "h".repeat(50 << 20));
        run.results[0].outcome.summary = "x".repeat(TEXT_MAX_CHARS + 10);
        run.results[0].outcome.data.insert(
            "nvml_inventory".into(),
            serde_json::json!({"Ok": [{"name": "n".repeat(5000)}]}),
        );
        let kept = run.results[1].outcome.summary.clone();
        cut_long_strings(&mut run);
        assert!(run.host.hostname.starts_with("evil hhh"), "one line");
        assert!(
            run.host
                .hostname
                .ends_with(&format!("... ({} more characters)", (50 << 20) + 5 - 256)),
            "{}",
            &run.host.hostname[250..]
        );
        assert!(run.host.hostname.chars().count() < NAME_MAX_CHARS + 40);
        assert!(run.results[0]
            .outcome
            .summary
            .ends_with("... (10 more characters)"));
        let name = run.results[0].outcome.data["nvml_inventory"]["Ok"][0]["name"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(name.ends_with("... (3000 more characters)"), "{name}");
        assert_eq!(run.results[1].outcome.summary, kept);
    }
}

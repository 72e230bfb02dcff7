//! Values from the store, checked before they are judged or printed: a
//! node's entry is read strictly (serde_json refuses NaN and Infinity, the
//! payload writes JSON with `allow_nan=False`), its report must be of this
//! gpucheck's `format_version`, its own rank must match its key, its
//! all-reduce figures finite and positive, its counts bounded, and every
//! string that may reach a terminal is cut and stripped of control
//! characters. One bad entry is that node's error, never the fleet's.

use serde_json::Value;

use super::rendezvous::Joined;
use super::NodeMessage;
use crate::model::{Run, FORMAT_VERSION};

/// The longest line kept from another node (a check's summary or hint).
pub const MAX_LINE: usize = 600;
/// A host name is at most 253 characters (RFC 1035's 255 octets on the wire).
pub const MAX_HOST: usize = 253;
/// The most ranks a node may say it runs (the payload's MAX_LOCAL_RANKS).
pub const MAX_LOCAL_RANKS: u32 = 1024;
/// The slowest all-reduce time accepted, seconds: each collective is bounded
/// by the all-reduce timeout (30 s) well below this.
pub const MAX_SECONDS: f64 = 3600.0;
/// The fastest accepted: a collective across processes costs at least a
/// kernel launch or a syscall round trip (microseconds); the payload's
/// MIN_SECONDS.
pub const MIN_SECONDS: f64 = 1e-6;

/// `text` fit for a terminal: every control character (the ESC of an
/// escape sequence, CR, BEL, C1) replaced by a space, cut to `limit`
/// characters.
pub fn clean(text: &str, limit: usize) -> String {
    let kept: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if kept.chars().count() <= limit {
        return kept;
    }
    let mut cut: String = kept.chars().take(limit.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn clean_opt(text: &mut Option<String>) {
    if let Some(t) = text.as_mut() {
        *t = clean(t, MAX_LINE);
    }
}

/// Node `rank`'s entry as node 0's payload gathered it, checked.
pub fn entry(rank: u32, value: Value) -> Result<(Joined, NodeMessage), String> {
    let mut joined: Joined = serde_json::from_value(value)
        .map_err(|e| format!("sent an entry this gpucheck cannot read: {e}"))?;
    let format = joined
        .message
        .get("report")
        .and_then(|r| r.get("format_version"));
    if let Some(v) = format.and_then(Value::as_u64) {
        if v != u64::from(FORMAT_VERSION) {
            return Err(format!(
                "sent a report of format_version {v}; this gpucheck reads format_version \
                 {FORMAT_VERSION}: run the same gpucheck on every node"
            ));
        }
    }
    let mut message: NodeMessage = serde_json::from_value(joined.message.clone())
        .map_err(|e| format!("sent a report this gpucheck cannot read: {e}"))?;
    if message.node_rank != rank {
        return Err(format!(
            "sent a report that claims node rank {}",
            message.node_rank
        ));
    }
    if message.report.format_version != FORMAT_VERSION {
        return Err(format!(
            "sent a report without format_version {FORMAT_VERSION}"
        ));
    }
    sanitize_run(&mut message.report);
    message.env = std::mem::take(&mut message.env)
        .into_iter()
        .map(|(k, v)| (clean(&k, 80), clean(&v, MAX_LINE)))
        .collect();
    message.tool_version = clean(&message.tool_version, 40);
    if let Some(a) = joined.allreduce.as_mut() {
        allreduce(a).map_err(|e| format!("sent an unreadable all-reduce result: {e}"))?;
    }
    if let Some(c) = joined.clock {
        if !(c.offset_s.is_finite() && c.uncertainty_s.is_finite() && c.uncertainty_s >= 0.0) {
            return Err("sent a clock reading that is not a number".into());
        }
    }
    Ok((joined, message))
}

/// Every string of a node's report that reaches a terminal, cleaned.
pub fn sanitize_run(run: &mut Run) {
    run.host.hostname = clean(&run.host.hostname, MAX_HOST);
    run.tool_version = clean(&run.tool_version, 40);
    for r in &mut run.results {
        r.id = clean(&r.id, 80);
        r.title = clean(&r.title, 120);
        r.outcome.summary = clean(&r.outcome.summary, MAX_LINE);
        clean_opt(&mut r.outcome.hint);
        for d in &mut r.outcome.devices {
            d.name = clean(&d.name, 120);
            clean_opt(&mut d.label);
        }
    }
}

/// "-1", "3600", "1e-300": short whatever the magnitude.
fn number(x: f64) -> String {
    if x != 0.0 && !(1e-3..1e7).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// A node's all-reduce figures: finite and positive, counts bounded,
/// strings cleaned.
fn allreduce(a: &mut gpucheck_checks::fleet::NodeAllReduce) -> Result<(), String> {
    let within = |v: Option<f64>, what: &str, least: f64, most: f64| match v {
        Some(x) if !(x.is_finite() && x > least && x <= most) => Err(format!(
            "{what} is {}, outside ({}, {}]",
            number(x),
            number(least),
            number(most)
        )),
        _ => Ok(()),
    };
    within(a.seconds, "its time", MIN_SECONDS, MAX_SECONDS)?;
    within(a.busbw_gbps, "its bus bandwidth", 0.0, 1e6)?;
    if let Some(n) = a.local_ranks.filter(|n| !(1..=MAX_LOCAL_RANKS).contains(n)) {
        return Err(format!("it says it ran {n} ranks"));
    }
    a.backend = clean(&a.backend, 20);
    clean_opt(&mut a.error);
    for e in &mut a.exits {
        e.how = clean(&e.how, 60);
        clean_opt(&mut e.last_line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;

    fn message(rank: u32, run: &Run) -> Value {
        serde_json::json!({
            "message": {
                "node_rank": rank,
                "tool_version": "0.1.0",
                "report": run,
                "env": {"NCCL_DEBUG": "INFO\u{1b}[2J"},
            },
            "torch": null,
            "clock": null,
            "allreduce": null,
        })
    }

    #[test]
    fn escape_sequences_are_stripped_and_long_text_cut() {
        assert_eq!(clean("gpu\u{1b}[2J-01\r\u{7}", 80), "gpu [2J-01  ");
        assert_eq!(clean("abcdef", 4), "abc…");
        let mut run = fixtures::every_status();
        run.host.hostname = "evil\u{1b}]0;owned\u{7}".into();
        let (_, m) = entry(1, message(1, &run)).unwrap();
        assert_eq!(m.report.host.hostname, "evil ]0;owned ");
        assert_eq!(m.env["NCCL_DEBUG"], "INFO [2J");
    }

    #[test]
    fn another_rank_another_format_and_bad_figures_are_that_nodes_error() {
        let run = fixtures::every_status();
        let err = entry(2, message(1, &run)).unwrap_err();
        assert_eq!(err, "sent a report that claims node rank 1");
        let mut v = message(1, &run);
        v["message"]["report"]["format_version"] = 7.into();
        let err = entry(1, v).unwrap_err();
        assert!(
            err.starts_with(
                "sent a report of format_version 7; this gpucheck reads format_version 3"
            ),
            "{err}"
        );
        let mut v = message(1, &run);
        v["message"]["report"]
            .as_object_mut()
            .unwrap()
            .remove("results");
        let err = entry(1, v).unwrap_err();
        assert!(err.contains("missing field `results`"), "{err}");
        let mut v = message(1, &run);
        v["allreduce"] = serde_json::json!({"backend": "gloo", "bytes": 8, "seconds": -1.0});
        let err = entry(1, v).unwrap_err();
        assert_eq!(
            err,
            "sent an unreadable all-reduce result: its time is -1, outside (1e-6, 3600]"
        );
        let mut v = message(1, &run);
        v["allreduce"] = serde_json::json!({"backend": "gloo", "bytes": 8, "local_ranks": 5000});
        assert!(entry(1, v).unwrap_err().contains("5000 ranks"));
        let mut v = message(1, &run);
        v["allreduce"] = serde_json::json!({"backend": "gloo", "bytes": 8, "seconds": 1e-300});
        assert!(
            entry(1, v)
                .unwrap_err()
                .contains("its time is 1e-300, outside"),
            "1e-300 s is no time"
        );
        assert!(serde_json::from_str::<Value>("{\"seconds\": NaN}").is_err());
    }
}

//! env.torchrun: the rank layout torchrun hands each process (RANK,
//! WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
//! valid where set and consistent with each other.

use crate::domain::launch::parse_master_port;
use crate::domain::redact::redact_url_credentials;
use crate::domain::text::{plain_or_quoted, quote_value};
use crate::findings::{Finding, Findings};
use crate::probe::host::env_lossy;
use crate::{Check, Context, Outcome, Profile, Status};

pub struct Torchrun;

/// The launcher variables as set (lossy); `None` when unset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchFacts {
    pub rank: Option<String>,
    pub world_size: Option<String>,
    pub local_rank: Option<String>,
    pub local_world_size: Option<String>,
    pub master_addr: Option<String>,
    pub master_port: Option<String>,
}

impl Check for Torchrun {
    fn id(&self) -> &'static str {
        "env.torchrun"
    }
    fn title(&self) -> &'static str {
        "torchrun environment"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Checks that the launcher variables RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, where set, are valid and agree with each other.\n\n\
         torchrun hands every worker these variables and `init_process_group(init_method=\"env://\")` \
         reads them. A rank outside the world, a local world larger than the whole world, or \
         RANK without WORLD_SIZE makes the job hang at rendezvous or crash with a ValueError \
         far from the cause. Stale values left in a shell from an earlier run do the same to the \
         next launch.\n\n\
         The check is skipped when none of them is set (gpucheck was not started by torchrun). \
         It fails on values that are not integers in range (RANK and LOCAL_RANK from 0, \
         WORLD_SIZE and LOCAL_WORLD_SIZE from 1, MASTER_PORT 1-65535), on RANK >= WORLD_SIZE, \
         LOCAL_RANK >= LOCAL_WORLD_SIZE or LOCAL_WORLD_SIZE > WORLD_SIZE, and on RANK without \
         WORLD_SIZE or the reverse; it warns on LOCAL_RANK without LOCAL_WORLD_SIZE and on a \
         rank layout without MASTER_ADDR/MASTER_PORT.\n\n\
         Fix: launch with torchrun, which sets all of them consistently, or correct the job \
         script that exports them; clear stale ones with `unset RANK WORLD_SIZE LOCAL_RANK \
         LOCAL_WORLD_SIZE`."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        evaluate_launch(&LaunchFacts {
            rank: env_lossy("RANK"),
            world_size: env_lossy("WORLD_SIZE"),
            local_rank: env_lossy("LOCAL_RANK"),
            local_world_size: env_lossy("LOCAL_WORLD_SIZE"),
            // Credentials in the address never reach a report.
            master_addr: env_lossy("MASTER_ADDR").map(|a| redact_url_credentials(&a)),
            master_port: env_lossy("MASTER_PORT"),
        })
    }
}

/// What a person does about any of these findings.
const LAUNCH_HINT: &str =
    "these come from the launcher: launch with torchrun (it sets all of them \
                consistently) or fix the job script that exports them; clear stale ones with \
                `unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE`";

/// Parse a launcher integer (Python's int(): surrounding whitespace allowed)
/// that must be at least `min`.
fn launch_int(name: &str, raw: &str, min: u64) -> Result<u64, String> {
    match raw.trim().parse::<u64>() {
        Ok(v) if v >= min => Ok(v),
        _ => Err(format!(
            "{name}={} is not an integer >= {min}",
            quote_value(raw)
        )),
    }
}

/// The rank layout as numbers, where set and valid.
#[derive(Debug, Clone, Copy, Default)]
struct Layout {
    rank: Option<u64>,
    world: Option<u64>,
    local_rank: Option<u64>,
    local_world: Option<u64>,
}

fn fail(text: impl Into<String>) -> Finding {
    Finding::new(None, Status::Fail, text)
}

fn warn(text: impl Into<String>) -> Finding {
    Finding::new(None, Status::Warn, text)
}

/// Judge the launcher variables.
pub fn evaluate_launch(f: &LaunchFacts) -> Outcome {
    let vars = [
        &f.rank,
        &f.world_size,
        &f.local_rank,
        &f.local_world_size,
        &f.master_addr,
        &f.master_port,
    ];
    if vars.iter().all(|v| v.is_none()) {
        return Outcome::skip(
            "not launched by torchrun: none of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, \
             MASTER_ADDR, MASTER_PORT is set",
        );
    }
    let mut findings = Findings::new();
    let layout = parse_values(f, &mut findings);
    check_layout(f, layout, &mut findings);
    check_missing(f, &mut findings);
    // A failure lists the warnings after it; a warning lists warnings.
    let worst = findings.worst();
    if worst >= Status::Warn {
        let texts: Vec<&str> = findings
            .items
            .iter()
            .filter(|x| x.status >= Status::Warn)
            .map(|x| x.text.as_str())
            .collect();
        return Outcome::new(worst, texts.join("; ")).with_hint(LAUNCH_HINT);
    }
    Outcome::pass(launch_summary(f, layout))
}

/// Every value that is set must read as what it is: integers in range, a
/// port number, a non-empty address.
fn parse_values(f: &LaunchFacts, findings: &mut Findings) -> Layout {
    let mut int = |name: &str, v: &Option<String>, min: u64| -> Option<u64> {
        let raw = v.as_deref()?;
        launch_int(name, raw, min)
            .map_err(|e| findings.push(fail(e)))
            .ok()
    };
    let layout = Layout {
        rank: int("RANK", &f.rank, 0),
        world: int("WORLD_SIZE", &f.world_size, 1),
        local_rank: int("LOCAL_RANK", &f.local_rank, 0),
        local_world: int("LOCAL_WORLD_SIZE", &f.local_world_size, 1),
    };
    if let Some(raw) = f.master_port.as_deref() {
        if let Err(e) = parse_master_port(raw) {
            findings.push(fail(e));
        }
    }
    if let Some(addr) = f.master_addr.as_deref() {
        if addr.trim().is_empty() {
            findings.push(fail("MASTER_ADDR is set but empty"));
        }
    }
    layout
}

/// Ranks within their worlds, and the pairs env:// needs set together.
fn check_layout(f: &LaunchFacts, l: Layout, findings: &mut Findings) {
    match (&f.rank, &f.world_size) {
        (Some(_), None) => findings.push(fail(
            "RANK is set but WORLD_SIZE is not: env:// initialisation needs both",
        )),
        (None, Some(_)) => findings.push(fail(
            "WORLD_SIZE is set but RANK is not: env:// initialisation needs both",
        )),
        _ => {}
    }
    if let (Some(r), Some(w)) = (l.rank, l.world) {
        if r >= w {
            findings.push(fail(format!(
                "RANK={r} is not below WORLD_SIZE={w} (ranks run 0..{})",
                w - 1
            )));
        }
    }
    if let (Some(lr), Some(lw)) = (l.local_rank, l.local_world) {
        if lr >= lw {
            findings.push(fail(format!(
                "LOCAL_RANK={lr} is not below LOCAL_WORLD_SIZE={lw} (local ranks run 0..{})",
                lw - 1
            )));
        }
    }
    if let (Some(lw), Some(w)) = (l.local_world, l.world) {
        if lw > w {
            findings.push(fail(format!(
                "LOCAL_WORLD_SIZE={lw} is larger than WORLD_SIZE={w}"
            )));
        }
    }
}

/// Half-set local pairs and a rank layout without a master to meet at.
fn check_missing(f: &LaunchFacts, findings: &mut Findings) {
    match (&f.local_rank, &f.local_world_size) {
        (Some(_), None) => findings.push(warn("LOCAL_RANK is set but LOCAL_WORLD_SIZE is not")),
        (None, Some(_)) => findings.push(warn("LOCAL_WORLD_SIZE is set but LOCAL_RANK is not")),
        _ => {}
    }
    let ranked = f.rank.is_some() || f.world_size.is_some();
    if !ranked && f.local_rank.is_some() {
        findings.push(warn("LOCAL_RANK is set without RANK and WORLD_SIZE"));
    }
    if ranked {
        let missing: Vec<&str> = [
            ("MASTER_ADDR", &f.master_addr),
            ("MASTER_PORT", &f.master_port),
        ]
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(n, _)| *n)
        .collect();
        if !missing.is_empty() {
            findings.push(warn(format!(
                "{} unset: env:// initialisation needs {}",
                missing.join(" and "),
                if missing.len() == 1 { "it" } else { "them" }
            )));
        }
    }
}

/// "rank 5 of 8, local rank 1 of 4, master 10.0.0.1:29500".
fn launch_summary(f: &LaunchFacts, l: Layout) -> String {
    let mut parts = Vec::new();
    if let (Some(r), Some(w)) = (l.rank, l.world) {
        parts.push(format!("rank {r} of {w}"));
    }
    if let (Some(lr), Some(lw)) = (l.local_rank, l.local_world) {
        parts.push(format!("local rank {lr} of {lw}"));
    }
    let master = match (f.master_addr.as_deref(), f.master_port.as_deref()) {
        (Some(a), Some(p)) => Some(format!(
            "master {}:{}",
            plain_or_quoted(a),
            plain_or_quoted(p)
        )),
        (Some(a), None) => Some(format!("master {}", plain_or_quoted(a))),
        (None, Some(p)) => Some(format!("master port {}", plain_or_quoted(p))),
        (None, None) => None,
    };
    if parts.is_empty() {
        return format!(
            "not launched by torchrun yet; {} set (torchrun overrides it for its workers)",
            master.unwrap_or_default()
        );
    }
    let mut s = parts.join(", ");
    if let Some(m) = master {
        s.push_str(&format!(", {m}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    fn launch(
        rank: Option<&str>,
        world: Option<&str>,
        local_rank: Option<&str>,
        local_world: Option<&str>,
        addr: Option<&str>,
        port: Option<&str>,
    ) -> Outcome {
        let s = |v: Option<&str>| v.map(String::from);
        evaluate_launch(&LaunchFacts {
            rank: s(rank),
            world_size: s(world),
            local_rank: s(local_rank),
            local_world_size: s(local_world),
            master_addr: s(addr),
            master_port: s(port),
        })
    }

    #[test]
    fn torchrun_unset_skips() {
        let o = launch(None, None, None, None, None, None);
        assert_eq!(o.status, Status::Skip);
        assert!(o
            .summary
            .starts_with("not launched by torchrun: none of RANK, WORLD_SIZE"));
    }

    #[test]
    fn torchrun_full_consistent_set_passes() {
        let o = launch(
            Some("5"),
            Some("8"),
            Some("1"),
            Some("4"),
            Some("10.0.0.1"),
            Some("29500"),
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "rank 5 of 8, local rank 1 of 4, master 10.0.0.1:29500"
        );
    }

    #[test]
    fn torchrun_only_master_vars_pass() {
        let o = launch(None, None, None, None, Some("10.0.0.1"), Some("29501"));
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.starts_with("not launched by torchrun yet"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn torchrun_rank_out_of_world_fails() {
        let o = launch(Some("8"), Some("8"), None, None, Some("h"), Some("1"));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "RANK=8 is not below WORLD_SIZE=8 (ranks run 0..7)"
        );
        assert!(hint(&o).contains("torchrun"), "{}", hint(&o));
    }

    #[test]
    fn torchrun_local_rank_out_of_local_world_fails() {
        let o = launch(
            Some("0"),
            Some("8"),
            Some("4"),
            Some("4"),
            Some("h"),
            Some("1"),
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .contains("LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"));
    }

    #[test]
    fn torchrun_local_world_larger_than_world_fails() {
        let o = launch(
            Some("0"),
            Some("4"),
            Some("0"),
            Some("8"),
            Some("h"),
            Some("1"),
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .contains("LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4"));
    }

    #[test]
    fn torchrun_partial_sets_fail() {
        let o = launch(Some("0"), None, None, None, None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("RANK is set but WORLD_SIZE is not"),
            "{}",
            o.summary
        );
        let o = launch(None, Some("2"), None, None, None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("WORLD_SIZE is set but RANK is not"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn torchrun_bad_integers_fail_echoing_the_value() {
        let o = launch(Some("one"), Some("0"), None, None, Some("h"), Some("1"));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains(r#"RANK="one" is not an integer >= 0"#),
            "{}",
            o.summary
        );
        assert!(
            o.summary
                .contains(r#"WORLD_SIZE="0" is not an integer >= 1"#),
            "{}",
            o.summary
        );
        let o = launch(Some("-1"), Some("2"), None, None, Some("h"), Some("1"));
        assert_eq!(o.status, Status::Fail);
    }

    #[test]
    fn torchrun_bad_master_port_fails() {
        let o = launch(Some("0"), Some("1"), None, None, Some("h"), Some("port"));
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .contains(r#"MASTER_PORT="port" is not a port number"#));
        let o = launch(None, None, None, None, Some(""), None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("MASTER_ADDR is set but empty"));
    }

    #[test]
    fn torchrun_missing_master_warns() {
        let o = launch(Some("0"), Some("2"), Some("0"), Some("2"), None, None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "MASTER_ADDR and MASTER_PORT unset: env:// initialisation needs them"
        );
    }

    #[test]
    fn torchrun_local_pair_half_set_warns() {
        let o = launch(Some("0"), Some("2"), Some("0"), None, Some("h"), Some("1"));
        assert_eq!(o.status, Status::Warn);
        assert!(o
            .summary
            .contains("LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"));
        let o = launch(None, None, Some("0"), None, None, None);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("without RANK and WORLD_SIZE"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn torchrun_whitespace_around_integers_is_accepted() {
        let o = launch(Some(" 1"), Some("2 "), None, None, Some("h"), Some("29500"));
        assert_eq!(o.status, Status::Pass);
    }

    #[test]
    fn torchrun_hostile_master_addr_is_escaped() {
        let o = launch(None, None, None, None, Some("evil\u{7}\nhost"), Some("1"));
        assert_eq!(o.status, Status::Pass);
        assert!(!o.summary.contains('\n'), "{}", o.summary);
        assert!(!o.summary.contains('\u{7}'), "{}", o.summary);
    }
}

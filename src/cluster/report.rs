//! The fleet report: what node rank 0 prints and writes with `--json`, and
//! the lines the other nodes print. Plain data and pure rendering; its JSON
//! Schema is generated from these types and committed as
//! `schema/fleet.schema.json` (regenerate with
//! `GPUCHECK_UPDATE_SCHEMA=1 cargo test fleet_schema_file`).

use gpucheck_checks::domain::action::Action;
use std::collections::BTreeMap;

use gpucheck_checks::domain::text::list_cut;
use gpucheck_checks::Status;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::{CheckResult, Counts, Run};

/// Version of the fleet report layout. Bump on any incompatible change.
/// 2: the node results' `facts` are typed as in the node report's format 2.
/// 3: every node names its most drastic repair `action`, and every warn,
/// fail and error result (the fleet's and the nodes') its own.
pub const FLEET_FORMAT_VERSION: u32 = 3;

/// One node in the fleet report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeEntry {
    pub node_rank: u32,
    /// The node's hostname.
    pub host: String,
    /// Its local checks, as `gpucheck run --json` reports them.
    pub results: Vec<CheckResult>,
    pub counts: Counts,
    /// The node's own exit code for its local checks.
    pub exit_code: i32,
    /// The most drastic repair action of its local checks (`none` when
    /// none warned or failed): what to do with this node.
    #[serde(default)]
    pub action: Action,
    /// The NCCL_*, GLOO_* and CUDA_VISIBLE_DEVICES variables it ran with.
    pub env: BTreeMap<String, String>,
    /// Node 0's clock minus this node's, seconds (absent on node 0 and where
    /// it was not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_s: Option<f64>,
}

/// A node rank that reached the store but could not be judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RejectedNode {
    pub node_rank: u32,
    /// "sent an unreadable entry: key gpucheck/RUN/node/2, NaN, ..."
    pub reason: String,
}

/// The whole fleet: what `gpucheck cluster --json` writes on node rank 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "gpucheck fleet report")]
pub struct FleetReport {
    /// Version of this layout; bumped on any incompatible change.
    #[schemars(extend("const" = FLEET_FORMAT_VERSION))]
    pub format_version: u32,
    /// Always "gpucheck".
    #[schemars(extend("const" = "gpucheck"))]
    pub tool: String,
    pub tool_version: String,
    /// The node count every node was told.
    pub nnodes: u32,
    /// "host:port" of node rank 0's store.
    pub master: String,
    /// The run every node agreed on (`--run-id`, the launcher's, or the one
    /// node 0 made); every store key of the rendezvous lives under it.
    #[serde(default)]
    pub run_id: String,
    /// Every node that joined, by node rank.
    pub nodes: Vec<NodeEntry>,
    /// Node ranks that never joined.
    pub missing_node_ranks: Vec<u32>,
    /// A job watched on every node (`gpucheck job --nnodes N`): `fleet`
    /// holds the checks judged over the whole job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub job: bool,
    /// Node ranks whose entry could not be judged (unreadable, another
    /// format) or that refused to join, and why.
    #[serde(default)]
    pub rejected_nodes: Vec<RejectedNode>,
    /// Store values that did not verify with the cluster token, ignored.
    #[serde(default)]
    pub unverified_values: u32,
    /// The fleet checks (`fleet.*`), judged on node rank 0.
    pub fleet: Vec<CheckResult>,
    /// Verdict counts of the fleet checks.
    pub counts: Counts,
    /// The exit code every node returns: 0 ready, 1 not ready.
    #[schemars(range(min = 0, max = 2))]
    pub exit_code: i32,
    /// The most drastic repair action of the fleet checks (`none` when
    /// nothing warned or failed), as `gpucheck run --json`'s top-level
    /// `action` is of its results: fleet.local's is the most drastic of the
    /// not-ready nodes' own.
    #[serde(default)]
    pub action: Action,
}

/// The fleet's run-level action: the most drastic of its checks' resolved
/// actions.
pub fn fleet_action(fleet: &[CheckResult]) -> Action {
    fleet
        .iter()
        .filter_map(|r| r.outcome.action)
        .max()
        .unwrap_or_default()
}

fn symbol(status: Status) -> &'static str {
    match status {
        Status::Pass => "✔ pass ",
        Status::Warn => "! warn ",
        Status::Fail => "✘ FAIL ",
        Status::Skip => "- skip ",
        Status::Error => "✘ ERROR",
    }
}

/// A node's one-line local verdict: "node 1 (gpu-002): NOT READY — gpu.ecc".
pub fn node_line(node_rank: u32, run: &Run) -> String {
    format!(
        "node {node_rank} ({}): {}",
        run.host.hostname,
        run.verdict_line()
    )
}

impl FleetReport {
    /// The fleet's one-line verdict.
    pub fn verdict_line(&self) -> String {
        let c = &self.counts;
        let head = match (self.job, self.exit_code) {
            (true, 0) => "JOB: NO PROBLEM FOUND",
            (true, _) => "JOB: PROBLEM FOUND",
            (false, 0) if c.warn > 0 => "FLEET READY (with warnings)",
            (false, 0) => "FLEET READY",
            (false, _) => "FLEET NOT READY",
        };
        let good = if self.job { "with no problem" } else { "ready" };
        let mut line = format!(
            "{head}: {} of {} nodes joined, {} {good}",
            self.nodes.len(),
            self.nnodes,
            self.nodes.iter().filter(|n| n.exit_code == 0).count()
        );
        let failing: Vec<&str> = self
            .fleet
            .iter()
            .filter(|r| r.outcome.status.is_failure())
            .map(|r| r.id.as_str())
            .collect();
        if !failing.is_empty() {
            line.push_str(&format!(" — see {}", failing.join(", ")));
        }
        line
    }

    /// The text node 0 prints: fleet checks, one line per node, details.
    pub fn render_text(&self, verbose: bool) -> String {
        let mut out = format!(
            "gpucheck {} · cluster of {} nodes · master {}\n\nfleet\n",
            self.tool_version, self.nnodes, self.master
        );
        let width = self.fleet.iter().map(|r| r.id.len()).max().unwrap_or(0);
        for r in &self.fleet {
            let o = &r.outcome;
            out.push_str(&format!(
                "  {}  {:width$}  {}\n",
                symbol(o.status),
                r.id,
                o.summary
            ));
            if o.status != Status::Pass {
                if let Some(h) = &o.hint {
                    let mark = o
                        .action
                        .map_or("→ fix:".to_string(), |a| format!("→ fix ({a}):"));
                    out.push_str(&format!("  {:7}  {:width$}  {mark} {h}\n", "", ""));
                }
            }
        }
        if verbose {
            for t in self.fleet.iter().flat_map(|r| &r.outcome.tables) {
                out.push('\n');
                for line in crate::report::text::data_table_lines(t) {
                    out.push_str(&format!("  {line}\n"));
                }
            }
        }
        out.push_str("\nnodes\n");
        for n in &self.nodes {
            let failing: Vec<&str> = n
                .results
                .iter()
                .filter(|r| r.outcome.status.is_failure())
                .map(|r| r.id.as_str())
                .collect();
            let (good, bad) = match self.job {
                true => ("no problem found", "problem found"),
                false => ("ready", "not ready"),
            };
            let mut state = if n.exit_code == 0 {
                good.to_string()
            } else if failing.is_empty() {
                format!("{bad} (exit code {})", n.exit_code)
            } else {
                format!("{bad}: {}", failing.join(", "))
            };
            if n.action != Action::None {
                state.push_str(&format!(" → {}", n.action));
            }
            out.push_str(&format!(
                "  node {:<4} {:<24} {state}\n",
                n.node_rank, n.host
            ));
        }
        for r in &self.missing_node_ranks {
            let why = self
                .rejected_nodes
                .iter()
                .find(|n| n.node_rank == *r)
                .map(|n| format!("refused to join: {}", n.reason))
                .unwrap_or_else(|| "never joined".to_string());
            out.push_str(&format!("  node {r:<4} {:<24} {why}\n", "?"));
        }
        for n in &self.rejected_nodes {
            if !self.missing_node_ranks.contains(&n.node_rank) {
                out.push_str(&format!(
                    "  node {:<4} {:<24} {}\n",
                    n.node_rank, "?", n.reason
                ));
            }
        }
        let details = self.details(verbose);
        if !details.is_empty() {
            out.push_str("\ndetails\n");
            out.push_str(&details);
        }
        out.push('\n');
        out.push_str(&self.verdict_line());
        out.push('\n');
        out
    }

    /// What failed on which node (and, verbose, what warned). A failure
    /// that several nodes report word for word (the same missing driver on
    /// every node of a bad image) is shown once, naming those nodes.
    fn details(&self, verbose: bool) -> String {
        let mut seen: Vec<(&CheckResult, Vec<(u32, &str)>)> = Vec::new();
        for n in &self.nodes {
            for r in &n.results {
                let o = &r.outcome;
                if !(o.status.is_failure() || (verbose && o.status == Status::Warn)) {
                    continue;
                }
                let same = |(first, _): &&mut (&CheckResult, Vec<(u32, &str)>)| {
                    first.id == r.id
                        && first.outcome.status == o.status
                        && first.outcome.summary == o.summary
                        && first.outcome.hint == o.hint
                };
                match seen.iter_mut().find(same) {
                    Some((_, nodes)) => nodes.push((n.node_rank, &n.host)),
                    None => seen.push((r, vec![(n.node_rank, &n.host)])),
                }
            }
        }
        let mut out = String::new();
        for (r, nodes) in seen {
            let o = &r.outcome;
            out.push_str(&format!(
                "  {} {} {}: {}\n",
                nodes_named(&nodes),
                symbol(o.status).trim(),
                r.id,
                o.summary
            ));
            if let Some(h) = &o.hint {
                out.push_str(&format!("      → fix: {h}\n"));
            }
        }
        out
    }
}

/// "node 1 (gpu-001)", "nodes 0, 1, 2 (vm)" when they share a host name,
/// else "nodes 0 (gpu-000), 3 (gpu-003)"; at most 8 named.
fn nodes_named(nodes: &[(u32, &str)]) -> String {
    match nodes {
        [(rank, host)] => format!("node {rank} ({host})"),
        [(_, host), rest @ ..] if rest.iter().all(|(_, h)| h == host) => {
            let ranks: Vec<String> = nodes.iter().map(|(r, _)| r.to_string()).collect();
            format!("nodes {} ({host})", list_cut(&ranks, 8))
        }
        _ => {
            let each: Vec<String> = nodes.iter().map(|(r, h)| format!("{r} ({h})")).collect();
            format!("nodes {}", list_cut(&each, 8))
        }
    }
}

/// The JUnit report of the fleet: one testsuite per node (`node0`,
/// `node1`...) with its local checks, plus one (`fleet`) for the fleet
/// checks, rendered by the JUnit reporter from a run that holds them all.
/// `base` is node 0's own run (its host, start time, profile).
pub fn junit(report: &FleetReport, base: &Run) -> String {
    let mut results: Vec<CheckResult> = report.fleet.clone();
    for n in &report.nodes {
        results.extend(n.results.iter().cloned().map(|mut r| {
            r.group = format!("node{}", n.node_rank);
            r
        }));
    }
    let run = Run {
        counts: Run::count(&results),
        results,
        exit_code: report.exit_code,
        ..base.clone()
    };
    crate::report::Format::Junit.render(&run, crate::report::Style::default())
}

/// The JSON Schema of the fleet report, generated from the types.
#[cfg(test)]
pub fn schema() -> String {
    let schema = schemars::schema_for!(FleetReport);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;
    use gpucheck_checks::{Outcome, Profile};

    fn report() -> FleetReport {
        let ok = fixtures::run(
            vec![fixtures::result(
                "gpu.driver",
                Profile::Quick,
                Outcome::pass("570"),
            )],
            false,
        );
        let bad = fixtures::every_status();
        let entry = |rank: u32, run: &Run| NodeEntry {
            node_rank: rank,
            host: format!("gpu-00{rank}"),
            results: run.with_actions().results,
            counts: run.counts,
            exit_code: run.exit_code,
            action: run.action(),
            env: BTreeMap::new(),
            clock_offset_s: None,
        };
        let fleet = vec![
            fixtures::result(
                "fleet.rendezvous",
                Profile::Quick,
                Outcome::pass("all 3 joined"),
            ),
            fixtures::result(
                "fleet.local",
                Profile::Quick,
                Outcome::fail("1 of 2 nodes not ready: node 1 (gpu-001): gpu.ecc", "drain")
                    .with_action(Action::ResetGpu, Vec::new()),
            ),
        ];
        let counts = Run::count(&fleet);
        let action = fleet_action(&fleet);
        FleetReport {
            format_version: FLEET_FORMAT_VERSION,
            tool: "gpucheck".into(),
            tool_version: "0.1.0".into(),
            nnodes: 3,
            master: "gpu-000:29500".into(),
            run_id: "slurm-8841.0".into(),
            nodes: vec![entry(0, &ok), entry(1, &bad)],
            missing_node_ranks: vec![2],
            job: false,
            rejected_nodes: Vec::new(),
            unverified_values: 0,
            fleet,
            counts,
            exit_code: 1,
            action,
        }
    }

    #[test]
    fn text_lists_fleet_checks_nodes_and_what_failed_where() {
        let text = report().render_text(false);
        assert!(text.contains("✘ FAIL   fleet.local"), "{text}");
        assert!(
            text.contains("node 0    gpu-000                  ready"),
            "{text}"
        );
        assert!(
            text.contains(
                "node 1    gpu-001                  not ready: gpu.ecc, net.master_port → reset_gpu"
            ),
            "{text}"
        );
        assert!(
            text.contains("node 2    ?                        never joined"),
            "{text}"
        );
        assert!(
            text.contains("node 1 (gpu-001) ✘ FAIL gpu.ecc: GPU1 has 3 uncorrectable"),
            "{text}"
        );
        assert!(text.ends_with("FLEET NOT READY: 2 of 3 nodes joined, 1 ready — see fleet.local\n"));
    }

    #[test]
    fn a_failure_every_node_shares_is_shown_once_naming_the_nodes() {
        let mut r = report();
        let bad = r.nodes[1].clone();
        for rank in [2, 3] {
            r.nodes.push(NodeEntry {
                node_rank: rank,
                host: format!("gpu-00{rank}"),
                ..bad.clone()
            });
        }
        r.missing_node_ranks.clear();
        let text = r.render_text(false);
        assert!(
            text.contains(
                "  nodes 1 (gpu-001), 2 (gpu-002), 3 (gpu-003) ✘ FAIL gpu.ecc: GPU1 has 3 uncorrectable"
            ),
            "{text}"
        );
        assert_eq!(text.matches("FAIL gpu.ecc:").count(), 1, "{text}");
        assert_eq!(
            nodes_named(&[(0, "vm"), (1, "vm"), (2, "vm")]),
            "nodes 0, 1, 2 (vm)"
        );
    }

    #[test]
    fn junit_has_a_suite_per_node_and_one_for_the_fleet() {
        let xml = junit(&report(), &fixtures::every_status());
        for suite in ["name=\"fleet\"", "name=\"node0\"", "name=\"node1\""] {
            assert!(
                xml.contains(&format!("<testsuite {suite}")),
                "{suite}: {xml}"
            );
        }
        assert!(
            xml.contains("name=\"gpu.ecc\" classname=\"node1\""),
            "{xml}"
        );
    }

    #[test]
    fn fleet_schema_file_matches_the_types() {
        const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/fleet.schema.json");
        let fresh = schema();
        if std::env::var_os("GPUCHECK_UPDATE_SCHEMA").is_some() {
            std::fs::write(FILE, &fresh).expect("write schema/fleet.schema.json");
        }
        let committed = std::fs::read_to_string(FILE).unwrap_or_default();
        assert!(
            committed == fresh,
            "schema/fleet.schema.json differs from the types in src/cluster/report.rs; if the \
             change is intended, run `GPUCHECK_UPDATE_SCHEMA=1 cargo test fleet_schema_file` \
             (and bump FLEET_FORMAT_VERSION if it is incompatible)"
        );
    }

    #[test]
    fn the_report_validates_against_its_schema() {
        let schema: serde_json::Value = serde_json::from_str(&schema()).unwrap();
        let doc = serde_json::to_value(report()).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:#?}");
        // The fleet names what to do, as a node's own report does; each
        // node names what to do with it, a ready one nothing.
        assert_eq!(doc["action"], "reset_gpu");
        assert_eq!(doc["nodes"][0]["action"], "none");
        assert_eq!(doc["nodes"][1]["action"], "reset_gpu");
        let ecc = &doc["nodes"][1]["results"][1];
        assert_eq!(
            (&ecc["id"], &ecc["action"]),
            (&"gpu.ecc".into(), &"reset_gpu".into())
        );
    }
}

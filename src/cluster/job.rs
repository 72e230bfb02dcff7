//! `gpucheck job --nnodes N ...`: the job watched on every node at once.
//! Each node looks at its own ranks (`gpucheck job`'s checks, publishing
//! its [`JobShare`]) and joins the same rendezvous as `gpucheck cluster`
//! (its run identity, token rules and deadlines; no all-reduce); node rank
//! 0 merges every node's share and judges the whole job: the hang's
//! wavefront and the stragglers across nodes, each rank named with its
//! node.

use gpucheck_checks::fleet::Fleet;
use gpucheck_checks::job::{self as job_checks, Job, JobShare};

use super::rendezvous::{Joined, Session};
use super::report::FleetReport;
use super::{base_config, fleet_env, fleet_report, fleet_result, follow, lead};
use super::{note_unauthenticated, show};
use super::{Meeting, NodeMessage, Outputs};
use crate::cli::JobArgs;
use crate::model::{CheckResult, Run};
use crate::UsageError;

/// Run this node's part of the job watched across nodes; the exit code.
pub fn job(args: &JobArgs) -> anyhow::Result<u8> {
    if args.traces.is_some() || args.replay.is_some() || args.capture.is_some() {
        return Err(UsageError(
            "--nnodes watches a running job on every node; --traces, --capture and --replay \
             judge one node's or one folder's"
                .into(),
        )
        .into());
    }
    super::unwritten(&args.output)?;
    let meeting = Meeting::resolve(&args.cluster, args.python.as_deref())?;
    let token = meeting.token.as_ref();
    let node_rank = meeting.id.node_rank.value;
    let outputs = Outputs::plan(&args.output, node_rank == 0)?;
    let run = local(args)?;
    let own = NodeMessage {
        node_rank,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        report: run.clone(),
        env: fleet_env(),
    };
    let mut config = meeting.for_run(base_config(&meeting.id, &args.cluster));
    config.allreduce = false;
    config.pair_steps = 0;
    config.profile = "job".to_string();
    config.host = super::checked::clean(&run.host.hostname, super::checked::MAX_HOST);
    let session = Session::start(
        &meeting.python,
        &config,
        token,
        &serde_json::to_string(&own)?,
    );
    if node_rank == 0 {
        let strict = args.output.strict;
        let judged =
            |f: &Fleet, raw: &[(u32, Joined, NodeMessage)], id: &str| judge(f, raw, id, strict);
        let report = lead(session, &config, token, &own, None, judged);
        outputs.finish(&report, &run, &args.output, false)?;
        let hosts: Vec<&str> = report.nodes.iter().map(|n| n.host.as_str()).collect();
        note_unauthenticated(false, token.is_none(), &config.master_addr, &hosts);
        Ok(report.exit_code.clamp(0, 255) as u8)
    } else {
        let verdict = follow(session, &config, token);
        let text = format!(
            "{}\n{}\n",
            super::report::node_line(node_rank, &run),
            verdict.line
        );
        show(&text, false)?;
        Ok(verdict.exit_code.max(run.exit_code).clamp(0, 255) as u8)
    }
}

/// This node's look at its own ranks (its reports go into the job's
/// report, not to files of their own).
fn local(args: &JobArgs) -> anyhow::Result<Run> {
    let mut local = args.clone();
    local.output.json = None;
    local.output.junit = None;
    local.output.format = crate::report::Format::Table;
    let plan = crate::pipeline::job_plan(&local)?;
    Ok(crate::pipeline::execute(&plan, local.output.strict))
}

/// Node rank 0: the whole job from every node's share, judged; each node's
/// own results kept without its share (the merged verdict holds it).
fn judge(
    fleet: &Fleet,
    raw: &[(u32, Joined, NodeMessage)],
    run_id: &str,
    strict: bool,
) -> FleetReport {
    let shares: Vec<JobShare> = raw
        .iter()
        .filter_map(|(r, _, m)| {
            let traces = m.report.results.iter().find(|r| r.id == "job.traces")?;
            let mut share = traces.outcome.fact::<JobShare>()?;
            let node = format!("node {r} ({})", m.report.host.hostname);
            share
                .ranks
                .iter_mut()
                .for_each(|p| p.node = Some(node.clone()));
            Some(share)
        })
        .collect();
    let whole = Job::merged(shares);
    let results = whole_results(&whole);
    let raw: Vec<(u32, Joined, NodeMessage)> = raw
        .iter()
        .map(|(r, j, m)| {
            let mut m = m.clone();
            for res in &mut m.report.results {
                res.outcome
                    .data
                    .remove(<JobShare as gpucheck_checks::Fact>::KEY);
            }
            (*r, j.clone(), m)
        })
        .collect();
    let mut report = fleet_report(fleet, &raw, run_id, strict, results);
    report.job = true;
    report
}

/// The whole job's checks, each judged and timed.
fn whole_results(whole: &Job) -> Vec<CheckResult> {
    job_checks::WHOLE_JOB
        .iter()
        .map(|(check, judge)| fleet_result(*check, || judge(whole)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_job_is_timed_while_it_is_judged() {
        let results = whole_results(&Job::merged(Vec::new()));
        let ids: Vec<&str> = results.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["job.hang", "job.straggler"]);
        for r in &results {
            assert!(
                r.outcome.duration_ms > 0.0,
                "{}: {}",
                r.id,
                r.outcome.duration_ms
            );
        }
    }
}

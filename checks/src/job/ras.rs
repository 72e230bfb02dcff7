//! job.nccl_ras: on a job watched live, NCCL's own view of it. NCCL 2.24
//! and later run RAS in every process; where the job's ranks load such an
//! NCCL and something listens on the job's RAS address, gpucheck asks it
//! once for its verbose status (never in a loop: NCCL 2.26 and 2.27 have
//! crashed jobs under polling, NVIDIA/nccl#1718, #1762) and names the
//! processes, ranks and nodes it reports dead, unresponsive, missing or in
//! error.

use std::time::Duration;

use super::ranks_phrase;
use crate::domain::action::Action;
use crate::domain::ras::{self, RasFinding, RasJudgement};
use crate::probe::ranks::RankProcess;
use crate::probe::{nccl_ras, net, rank_state};
use crate::{Check, Context, Outcome, Profile};

pub struct NcclRas;

impl Check for NcclRas {
    fn id(&self) -> &'static str {
        "job.nccl_ras"
    }
    fn title(&self) -> &'static str {
        "NCCL RAS: what NCCL itself says of the job"
    }
    fn profile(&self) -> Profile {
        super::JOB_PROFILE
    }
    fn timeout(&self) -> Duration {
        super::TIMEOUT
    }
    fn explain(&self) -> &'static str {
        "On a job watched live: when the job's ranks load NCCL 2.24 or later (read from their \
memory maps) and something listens on the job's RAS address (NCCL_RAS_ADDR, default \
localhost:28028, in the ranks' network namespace), asks NCCL's RAS once for its verbose status \
(CLIENT PROTOCOL 2, TIMEOUT 2, VERBOSE STATUS; 5 s at most) and reads what it says of every \
communicator. It never asks twice: NCCL 2.26 and 2.27 have crashed jobs whose RAS was polled.

fail: processes RAS declared dead or that gave it no data (stopped, hung as a whole, their node \
unreachable), ranks missing from a running communicator, ranks that reported an NCCL error: \
with the ranks (where RAS numbers them as the job does), processes and nodes.
warn: RAS did not answer within 5 s (a process that does not answer holds it up).
pass: every communicator reports in; what one look cannot settle (collective counts that differ \
while the job runs) is said, not blamed.
skip: the ranks load no NCCL, an NCCL without RAS (before 2.24), RAS turned off \
(NCCL_RAS_ENABLE=0), nothing listens on its address (no NCCL communicator yet), or the job was \
judged from dumps. The version is read by loading the ranks' NCCL, except where gpucheck runs as \
root for another user's job and that user could have put or changed the file: then from its \
\"NCCL version\" string, read as that user."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let job = match super::job(ctx) {
            Ok(j) => j,
            Err(e) => return super::unread(&e),
        };
        let Some(live) = &job.live else {
            return Outcome::skip("the job was judged from its dumps, not on its node");
        };
        let Some(first) = live.ranks.first() else {
            return Outcome::skip("no rank runs here");
        };
        match asked(first) {
            Ok(text) => judged(&text, live),
            Err(skip) => *skip,
        }
    }
}

/// RAS's status text, or the skip (or warning) that says why it was not
/// had.
fn asked(rank: &RankProcess) -> Result<String, Box<Outcome>> {
    if rank.ras_off {
        return Err(Box::new(Outcome::skip(
            "NCCL_RAS_ENABLE=0 turns NCCL's RAS off in the job",
        )));
    }
    let v = match rank_state::nccl_version(rank.pid) {
        Some(Ok((_, v))) => (v.major, v.minor, v.patch),
        Some(Err(why)) => return Err(Box::new(Outcome::skip(why))),
        None => {
            return Err(Box::new(Outcome::skip(
                "the job's ranks load no NCCL (a gloo or CPU job)",
            )))
        }
    };
    if !ras::ras_supported(v) {
        return Err(Box::new(Outcome::skip(format!(
            "the job's NCCL {}.{}.{} has no RAS (2.24 and later)",
            v.0, v.1, v.2
        ))));
    }
    let addr = ras::client_addr(rank.ras_addr.as_deref());
    let port = addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok());
    if !port.is_some_and(|p| rank_state::listening(rank.pid, p)) {
        return Err(Box::new(Outcome::skip(format!(
            "nothing listens on the job's RAS address {addr} (no NCCL communicator yet)"
        ))));
    }
    nccl_ras::ask(&addr).map_err(|e| {
        Box::new(Outcome::warn(
            format!("NCCL's RAS at {addr} did not give its status: {e}"),
            "a process that does not answer holds RAS up: job.hang and job.traces show which \
             ranks stopped moving",
        ))
    })
}

fn judged(text: &str, live: &super::live::Live) -> Outcome {
    let status = match ras::parse(text) {
        Ok(s) => s,
        Err(e) => return Outcome::warn(format!("NCCL's RAS answered, but not a status: {e}"), ""),
    };
    let judgement = ras::judge(&status);
    if judgement.faults.is_empty() {
        let notes: Vec<&str> = judgement.notes.iter().map(|n| n.why.as_str()).collect();
        return Outcome::pass(match notes.as_slice() {
            [] => "every communicator reports in to NCCL's RAS".to_string(),
            list => format!("no fault in NCCL's RAS status; {}", list.join("; ")),
        });
    }
    fail(&judgement, live)
}

/// The faults RAS names, with the ranks of this node its processes are.
fn fail(judgement: &RasJudgement, live: &super::live::Live) -> Outcome {
    let mut ranks = judgement.ranks_at_fault();
    let here: Vec<u32> = judgement
        .faults
        .iter()
        .flat_map(|f: &RasFinding| f.processes.iter())
        .filter(|p| {
            p.host
                .parse()
                .is_ok_and(|ip| net::is_local(ip, &net::local_addresses()))
        })
        .filter_map(|p| {
            live.ranks
                .iter()
                .find(|r| i64::from(r.pid) == i64::from(p.pid))
        })
        .map(|r| r.rank)
        .collect();
    ranks.extend(here);
    ranks.sort_unstable();
    ranks.dedup();
    let hosts = judgement.hosts_at_fault();
    let why: Vec<&str> = judgement.faults.iter().map(|f| f.why.as_str()).collect();
    let mut summary = format!("NCCL's RAS: {}", why.join("; "));
    if !ranks.is_empty() {
        summary.push_str(&format!(" ({})", ranks_phrase(&ranks)));
    }
    let hint = match hosts.as_slice() {
        [] => "look at the processes named: their logs, and `gpucheck` on their node".to_string(),
        list => format!(
            "run `gpucheck` (and `gpucheck job`) on {}: the node's GPUs, network and processes",
            list.join(", ")
        ),
    };
    Outcome::fail(summary, hint)
        .with_ranks(ranks, None)
        .with_action(Action::RestartJob, Vec::new())
}

//! fleet.rendezvous: every node of the job joined the rendezvous.

use super::{Fleet, FleetCheck};
use crate::domain::text;
use crate::identity::check;
use crate::Outcome;

check!(
    Rendezvous,
    "fleet.rendezvous",
    "Every node joined the rendezvous",
    "Every node of the job (node ranks 0 to nnodes-1) reached node rank 0's store \
(torch.distributed's TCPStore at the master address and port) within --rdzv-timeout \
and handed over its report, each node rank claimed by exactly one node of this run, each \
entry readable and consistent with its key. Nodes of another run on the same port (another \
run id or node count) are refused at the handshake; a node of this run with another gpucheck \
or profile refuses to join and says why; a node rank claimed twice names both hosts; an \
entry that cannot be judged (not JSON, a NaN, another format_version) is that node's error \
while the others are judged. With GPUCHECK_CLUSTER_TOKEN (or --token-file) every store value \
carries an HMAC-SHA256 over its key and body, and values that do not verify are ignored and \
counted here.

Why it matters: a DDP job waits for every rank at init_process_group; a node that never \
comes (not scheduled, crashed, wrong master address, a firewall between the nodes) makes \
the whole job hang until torch's own timeout, often 30 minutes, with no name on it.

Fix: look at the named node: did its gpucheck start (srun / the pod's logs)? Did it say \
it cannot reach the master (address, resolved IPs, port, error)? Check that every node \
resolves the master's name to an address it can reach, that the port is open between the \
nodes, and that --nnodes matches the number of nodes started. Give every node its own \
--node-rank, the same gpucheck and flags, and, where other processes can reach the master \
port, a shared GPUCHECK_CLUSTER_TOKEN.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

impl FleetCheck for Rendezvous {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        evaluate(fleet)
    }
}

fn evaluate(fleet: &Fleet) -> Outcome {
    if let Some(err) = &fleet.rendezvous_error {
        return Outcome::fail(
            format!("the rendezvous at {} failed: {err}", fleet.master),
            "make sure the master port is free on node rank 0 and that torch.distributed \
             imports in the training Python (--python)",
        );
    }
    let problems = problems(fleet);
    if problems.is_empty() {
        return Outcome::pass(format!(
            "all {} joined at {}{}",
            text::counted(fleet.nnodes as usize, "node", "nodes"),
            fleet.master,
            ignored(fleet)
        ));
    }
    Outcome::fail(
        format!("{}{}", problems.join("; "), ignored(fleet)),
        format!(
            "check that gpucheck started on the missing nodes and that they reach {} (their \
             own output names the address and the error); --nnodes must match the nodes \
             started, every node needs its own --node-rank, and every node the same gpucheck \
             and flags",
            fleet.master
        ),
    )
}

/// Everything that keeps a node rank out of the judgement, each named.
fn problems(fleet: &Fleet) -> Vec<String> {
    let mut out: Vec<String> = fleet
        .duplicates
        .iter()
        .map(|d| {
            format!(
                "node rank {} was claimed twice: by {} (it holds it) and by {}",
                d.node_rank, d.first, d.second
            )
        })
        .collect();
    out.extend(
        fleet
            .rejected
            .iter()
            .map(|(r, why)| format!("node {r} {why}")),
    );
    out.extend(
        fleet
            .refused
            .iter()
            .map(|(r, why)| format!("node {r} refused to join: {why}")),
    );
    let missing: Vec<String> = fleet
        .missing
        .iter()
        .filter(|r| !fleet.refused.iter().any(|(f, _)| f == *r))
        .map(u32::to_string)
        .collect();
    if !missing.is_empty() {
        out.push(format!(
            "{} of {} never joined: node {} {}",
            missing.len(),
            text::counted(fleet.nnodes as usize, "node", "nodes"),
            if missing.len() == 1 { "rank" } else { "ranks" },
            text::list_cut(&missing, 16)
        ));
    }
    out
}

/// "; 2 store values that did not verify were ignored; an entry for rank
/// 1 claims rank 0: ignored" (empty when there was nothing to ignore).
fn ignored(fleet: &Fleet) -> String {
    let mut out = String::new();
    if fleet.unverified > 0 {
        out.push_str(&format!(
            "; {} that did not verify with the cluster token {} ignored",
            text::counted(fleet.unverified as usize, "store value", "store values"),
            if fleet.unverified == 1 { "was" } else { "were" }
        ));
    }
    if !fleet.ignored.is_empty() {
        out.push_str(&format!("; {}", text::list_cut(&fleet.ignored, 3)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::Status;

    #[test]
    fn names_the_missing_ranks() {
        let mut f = fleet(vec![node(0, "a"), node(1, "b")]);
        f.nnodes = 4;
        f.missing = vec![2, 3];
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "2 of 4 nodes never joined: node ranks 2, 3");
    }

    #[test]
    fn all_joined_passes_and_a_store_failure_fails() {
        let f = fleet(vec![node(0, "a"), node(1, "b")]);
        assert_eq!(evaluate(&f).summary, "all 2 nodes joined at node0:29500");
        let mut f = f;
        f.rendezvous_error = Some("EADDRINUSE".into());
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("EADDRINUSE"), "{}", o.summary);
    }

    #[test]
    fn a_rank_claimed_twice_and_a_broken_entry_are_named_with_the_rest_judged() {
        let mut f = fleet(vec![node(0, "a"), node(1, "b")]);
        f.nnodes = 4;
        f.duplicates = vec![crate::fleet::Duplicate {
            node_rank: 1,
            first: "b (pid 10)".into(),
            second: "c (pid 20)".into(),
        }];
        f.rejected = vec![(
            2,
            "sent an unreadable entry: key gpucheck/r/node/2, NaN, which JSON does not allow"
                .into(),
        )];
        f.missing = vec![3];
        f.unverified = 2;
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "node rank 1 was claimed twice: by b (pid 10) (it holds it) and by c (pid 20); node 2 \
             sent an unreadable entry: key gpucheck/r/node/2, NaN, which JSON does not allow; 1 \
             of 4 nodes never joined: node rank 3; 2 store values that did not verify with the \
             cluster token were ignored"
        );
    }

    #[test]
    fn ignored_and_unverified_values_are_reported_without_failing() {
        let mut f = fleet(vec![node(0, "a"), node(1, "b")]);
        f.unverified = 1;
        f.ignored = vec!["an entry for rank 1 claims rank 0: ignored".into()];
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.ends_with(
                "; 1 store value that did not verify with the cluster token was ignored; an \
                 entry for rank 1 claims rank 0: ignored"
            ),
            "{}",
            o.summary
        );
        f.refused = vec![(
            1,
            "node 0 runs gpucheck 0.1.0; node 1 runs gpucheck 0.2.0".into(),
        )];
        f.missing = vec![1];
        let o = evaluate(&f);
        assert!(
            o.summary
                .starts_with("node 1 refused to join: node 0 runs gpucheck 0.1.0"),
            "{}",
            o.summary
        );
        assert!(!o.summary.contains("never joined"), "{}", o.summary);
    }
}

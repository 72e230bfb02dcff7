//! fleet.rendezvous: every node of the job joined the rendezvous.

use super::{Fleet, FleetCheck};
use crate::domain::text;
use crate::Outcome;

fleet_check!(
    Rendezvous,
    "fleet.rendezvous",
    "Every node joined the rendezvous",
    "Every node of the job (node ranks 0 to nnodes-1) reached node rank 0's store \
(torch.distributed's TCPStore at the master address and port) within --rdzv-timeout \
and handed over its report.

Why it matters: a DDP job waits for every rank at init_process_group; a node that never \
comes (not scheduled, crashed, wrong master address, a firewall between the nodes) makes \
the whole job hang until torch's own timeout, often 30 minutes, with no name on it.

Fix: look at the named node: did its gpucheck start (srun / the pod's logs)? Did it say \
it cannot reach the master (address, resolved IPs, port, error)? Check that every node \
resolves the master's name to an address it can reach, that the port is open between the \
nodes, and that --nnodes matches the number of nodes started."
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
    if fleet.missing.is_empty() {
        return Outcome::pass(format!(
            "all {} joined at {}",
            text::counted(fleet.nnodes as usize, "node", "nodes"),
            fleet.master
        ));
    }
    let ranks: Vec<String> = fleet.missing.iter().map(u32::to_string).collect();
    Outcome::fail(
        format!(
            "{} of {} never joined: node {} {}",
            fleet.missing.len(),
            text::counted(fleet.nnodes as usize, "node", "nodes"),
            if ranks.len() == 1 { "rank" } else { "ranks" },
            text::list_cut(&ranks, 16)
        ),
        format!(
            "check that gpucheck started on the missing nodes and that they reach {} (their \
             own output names the address and the error); --nnodes must match the nodes started",
            fleet.master
        ),
    )
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
}

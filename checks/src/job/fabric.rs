//! job.fabric: on a job watched live, the RDMA ports the job's NCCL was
//! told to use (its ranks' NCCL_IB_HCA) that are not up now: a port that
//! went down under a running job stalls its collectives or drops it to a
//! slower path.

use std::time::Duration;

use crate::domain::action::Action;
use crate::domain::hca::HcaFilter;
use crate::probe::sysfs::{self, RdmaPort};
use crate::{Check, Context, Outcome, Profile};

pub struct Fabric;

impl Check for Fabric {
    fn id(&self) -> &'static str {
        "job.fabric"
    }
    fn title(&self) -> &'static str {
        "The RDMA ports the job's NCCL uses"
    }
    fn profile(&self) -> Profile {
        super::JOB_PROFILE
    }
    fn timeout(&self) -> Duration {
        super::TIMEOUT
    }
    fn explain(&self) -> &'static str {
        "On a job watched live whose ranks set NCCL_IB_HCA: reads every RDMA port under \
/sys/class/infiniband and the ports NCCL_IB_HCA selects (NCCL's own rules: `^` excludes, `=` \
names exactly, `device:port`).

fail: a selected port is not ACTIVE (DOWN, INIT, a physical state other than LinkUp): the \
job's traffic over it stalls or fails; service_hardware (the cable, the transceiver, the \
switch port), then restart the job.
pass: every selected port is ACTIVE.
skip: the ranks set no NCCL_IB_HCA (NCCL picks among the active ports by itself), or the job \
was judged from dumps."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let job = match super::job(ctx) {
            Ok(j) => j,
            Err(e) => return super::unread(&e),
        };
        let Some(live) = &job.live else {
            return Outcome::skip("the job was judged from its dumps, not on its node");
        };
        let Some(hca) = live.ranks.iter().find_map(|r| r.ib_hca.clone()) else {
            return Outcome::skip(
                "the job's ranks set no NCCL_IB_HCA: NCCL uses the ports that are up",
            );
        };
        match sysfs::rdma_ports(&sysfs::sysfs_root()) {
            Ok(ports) => judge(&hca, &ports),
            Err(e) => Outcome::error(format!("the RDMA ports could not be read: {e}")),
        }
    }
}

/// The ports `hca` selects that are not up, as a verdict.
pub fn judge(hca: &str, ports: &[RdmaPort]) -> Outcome {
    let filter = HcaFilter::parse(hca);
    let selected: Vec<&RdmaPort> = ports
        .iter()
        .filter(|p| filter.selects(&p.device, p.port))
        .collect();
    if selected.is_empty() {
        return Outcome::fail(
            format!("NCCL_IB_HCA={hca} selects no RDMA port of this node"),
            "set NCCL_IB_HCA to this node's ports (`ibv_devinfo` lists them), or unset it",
        )
        .with_action(Action::FixConfig, Vec::new());
    }
    let down: Vec<String> = selected
        .iter()
        .filter(|p| !up(p))
        .map(|p| {
            format!(
                "{}/{} {}",
                p.device,
                p.port,
                p.state.as_deref().unwrap_or("state unreadable")
            )
        })
        .collect();
    if down.is_empty() {
        let names: Vec<String> = selected
            .iter()
            .map(|p| format!("{}/{}", p.device, p.port))
            .collect();
        return Outcome::pass(format!(
            "the ports NCCL_IB_HCA={hca} selects are up: {}",
            names.join(", ")
        ));
    }
    Outcome::fail(
        format!(
            "RDMA ports the job's NCCL uses (NCCL_IB_HCA={hca}) are down: {}",
            down.join(", ")
        ),
        "the job's traffic over them stalls or fails: check the cable, transceiver and switch \
         port (`ibstat`), then restart the job; drain the node meanwhile",
    )
    .with_action(Action::ServiceHardware, Vec::new())
}

/// ACTIVE with its physical link up ("4: ACTIVE", "5: LinkUp").
fn up(p: &RdmaPort) -> bool {
    let active = p.state.as_deref().is_some_and(|s| s.contains("ACTIVE"));
    let linked = p.phys_state.as_deref().is_none_or(|s| s.contains("LinkUp"));
    active && linked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    fn port(device: &str, state: &str, phys: &str) -> RdmaPort {
        RdmaPort {
            device: device.into(),
            port: 1,
            state: Some(state.into()),
            phys_state: Some(phys.into()),
            ..RdmaPort::default()
        }
    }

    #[test]
    fn a_selected_port_down_fails_and_one_left_out_does_not() {
        let ports = [
            port("mlx5_0", "4: ACTIVE", "5: LinkUp"),
            port("mlx5_3", "1: DOWN", "3: Disabled"),
        ];
        let o = judge("mlx5_0,mlx5_3", &ports);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("mlx5_3/1 1: DOWN"), "{}", o.summary);
        assert_eq!(o.action, Some(Action::ServiceHardware));
        assert_eq!(judge("mlx5_0", &ports).status, Status::Pass);
        assert_eq!(judge("^mlx5_3", &ports).status, Status::Pass);
        assert_eq!(
            judge("=mlx5_9", &ports).status,
            Status::Fail,
            "selects nothing"
        );
    }
}

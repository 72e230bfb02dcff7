//! The repair action: what an operator (or the automation that drains
//! nodes) should do about a warn-or-worse result, as one word from a small
//! set ordered by how drastic it is. A check chooses it where it makes a
//! finding, from the source where one exists (NVIDIA's Xid catalog's
//! immediate action, the ECC and row-remapping guidance); a warn or fail
//! that names none gets its check's default from [`DEFAULT_ACTIONS`], which
//! names every check (a test says so).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::domain::xid::XidAction;

/// What to do, from least to most drastic. The order is the one a drain
/// policy compares: the most drastic action of a run is its headline.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Nothing to do (every pass and skip).
    #[default]
    None,
    /// Change a setting or a launch variable (environment, container
    /// flags, limits, GPU modes); no package or hardware changes.
    FixConfig,
    /// Install, upgrade or repair software: the driver, CUDA, torch, NCCL
    /// and their kernel modules.
    FixInstall,
    /// The GPU is fine, the job that hit the fault is not: stop what holds
    /// the GPU and start the job again (Xid RESTART_APP).
    RestartJob,
    /// Reset the GPU while nothing runs on it (`nvidia-smi -r -i N`), or
    /// drain and reboot when it cannot be reset (Xid RESET_GPU, pending
    /// row remaps and page retirements).
    ResetGpu,
    /// Drain the node and reboot it (Xid RESTART_BM / RESTART_VM, a GPU
    /// fallen off the bus, a hung driver).
    RebootNode,
    /// Drain the node, then hands on the hardware: reseat, cooling, power,
    /// replace or RMA (failed row remapping, uncorrectable errors past the
    /// limits, a degraded link, Xid CHECK_MECHANICALS).
    ServiceHardware,
    /// Outside this node: the fabric, the subnet manager, the cloud
    /// provider (an InfiniBand port down, slow inter-node links).
    ContactProvider,
}

impl Action {
    /// Every action, least drastic first.
    pub const ALL: [Action; 8] = [
        Action::None,
        Action::FixConfig,
        Action::FixInstall,
        Action::RestartJob,
        Action::ResetGpu,
        Action::RebootNode,
        Action::ServiceHardware,
        Action::ContactProvider,
    ];

    /// The name every report uses (`reset_gpu`).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::FixConfig => "fix_config",
            Action::FixInstall => "fix_install",
            Action::RestartJob => "restart_job",
            Action::ResetGpu => "reset_gpu",
            Action::RebootNode => "reboot_node",
            Action::ServiceHardware => "service_hardware",
            Action::ContactProvider => "contact_provider",
        }
    }

    /// The action an Xid's judged class calls for. A class that only
    /// warrants a look (CONTACT_SUPPORT, UPDATE_SWFW, no immediate action)
    /// is software first: update the driver and firmware.
    pub fn for_xid(class: XidAction) -> Action {
        match class {
            XidAction::Note => Action::None,
            XidAction::Investigate => Action::FixInstall,
            XidAction::RestartApp => Action::RestartJob,
            XidAction::Service => Action::ServiceHardware,
            XidAction::ResetGpu => Action::ResetGpu,
            XidAction::RebootNode => Action::RebootNode,
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A check's action for a warn or fail that names none, by check id. One
/// line per check of `CATALOG` and of the fleet catalog; the README's
/// "Repair actions" section lists the same.
pub const DEFAULT_ACTIONS: &[(&str, Action)] = &[
    ("host.devices", Action::FixConfig),
    ("host.shm", Action::FixConfig),
    ("host.limits", Action::FixConfig),
    ("gpu.driver", Action::FixInstall),
    ("gpu.count", Action::RebootNode),
    ("gpu.ecc", Action::ResetGpu),
    ("gpu.pcie", Action::ServiceHardware),
    ("gpu.throttle", Action::ServiceHardware),
    ("gpu.mode", Action::FixConfig),
    ("gpu.processes", Action::RestartJob),
    ("gpu.topology", Action::FixConfig),
    // A GPU slower than its siblings under load, computing wrong, with bad
    // memory or a weak peer link: drain it and have the hardware seen to.
    ("gpu.compute", Action::ServiceHardware),
    ("gpu.memory", Action::ServiceHardware),
    ("gpu.p2p_bandwidth", Action::ServiceHardware),
    ("gpu.burn", Action::ServiceHardware),
    ("env.cuda_visible_devices", Action::FixConfig),
    ("env.torchrun", Action::FixConfig),
    ("cuda.driver", Action::FixInstall),
    ("cuda.runtime", Action::FixInstall),
    ("cuda.copy_bandwidth", Action::ServiceHardware),
    ("torch.import", Action::FixInstall),
    ("torch.cuda", Action::FixInstall),
    ("torch.arch", Action::FixInstall),
    ("torch.nccl", Action::FixInstall),
    ("net.loopback", Action::FixConfig),
    ("net.master_addr", Action::FixConfig),
    ("net.master_port", Action::FixConfig),
    ("fabric.xid", Action::RestartJob),
    ("fabric.mnnvl", Action::ContactProvider),
    ("fabric.rdma", Action::ContactProvider),
    ("fabric.gpudirect", Action::FixInstall),
    ("fabric.net_plugin", Action::FixInstall),
    ("nccl.library", Action::FixInstall),
    ("nccl.env", Action::FixConfig),
    ("nccl.allreduce", Action::FixConfig),
    ("nccl.nic_path", Action::FixConfig),
    ("ddp.benchmark", Action::FixConfig),
    ("fleet.rendezvous", Action::FixConfig),
    ("fleet.local", Action::FixConfig),
    ("fleet.gpus", Action::FixConfig),
    ("fleet.nvlink_domains", Action::ContactProvider),
    ("fleet.driver", Action::FixInstall),
    ("fleet.cuda_driver", Action::FixInstall),
    ("fleet.torch", Action::FixInstall),
    ("fleet.nccl", Action::FixInstall),
    ("fleet.nccl_env", Action::FixConfig),
    ("fleet.hosts", Action::FixConfig),
    ("fleet.clock", Action::FixConfig),
    // A GPU slower than its model elsewhere in the fleet: drain its node
    // and have the hardware (or the node's power and cooling) seen to.
    ("fleet.gpu_load", Action::ServiceHardware),
    ("fleet.allreduce", Action::ContactProvider),
    ("fleet.pairs", Action::ContactProvider),
    // A dump that cannot be read or a rank that left none: see to how the
    // job records and dumps.
    ("job.traces", Action::FixConfig),
    // A code path that diverged (or a rank that died): fix and restart;
    // a node fault that explains it names its own, more drastic action.
    ("job.hang", Action::RestartJob),
    ("job.straggler", Action::RestartJob),
    ("job.gpus", Action::RestartJob),
    ("job.nccl_ras", Action::RestartJob),
    ("job.fabric", Action::ServiceHardware),
];

/// The default action of a check (`fix_config` for an id no table line
/// names, which a unit test keeps from happening for a catalogued check).
pub fn default_for(check_id: &str) -> Action {
    DEFAULT_ACTIONS
        .iter()
        .find(|(id, _)| *id == check_id)
        .map_or(Action::FixConfig, |(_, a)| *a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_declares_a_default_action() {
        let ids = crate::CATALOG
            .iter()
            .map(|c| c.id())
            .chain(crate::fleet::FLEET_CATALOG.iter().map(|c| c.id()))
            .chain(crate::job::JOB_CATALOG.iter().map(|c| c.id()));
        for id in ids {
            let declared = DEFAULT_ACTIONS.iter().find(|(i, _)| *i == id);
            assert!(
                declared.is_some_and(|(_, a)| *a != Action::None),
                "{id} declares no default repair action in domain::action::DEFAULT_ACTIONS"
            );
        }
    }

    #[test]
    fn every_default_names_a_check_once() {
        let mut seen = std::collections::HashSet::new();
        for (id, _) in DEFAULT_ACTIONS {
            assert!(seen.insert(id), "{id} is declared twice");
            assert!(crate::find(id).is_some(), "{id} is no check");
        }
    }

    #[test]
    fn actions_order_by_how_drastic_they_are_and_name_themselves() {
        let mut sorted = Action::ALL;
        sorted.sort();
        assert_eq!(sorted, Action::ALL);
        for a in Action::ALL {
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(json, a.as_str());
        }
        assert!(Action::ResetGpu < Action::ServiceHardware);
    }

    #[test]
    fn xid_classes_map_to_the_catalog_immediate_actions() {
        assert_eq!(Action::for_xid(XidAction::ResetGpu), Action::ResetGpu);
        assert_eq!(Action::for_xid(XidAction::RebootNode), Action::RebootNode);
        assert_eq!(Action::for_xid(XidAction::RestartApp), Action::RestartJob);
        assert_eq!(Action::for_xid(XidAction::Service), Action::ServiceHardware);
    }
}

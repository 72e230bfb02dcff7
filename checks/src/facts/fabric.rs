//! The links NCCL will send through between nodes: the RDMA ports
//! `fabric.rdma` found, and the interfaces NCCL's socket transport uses as
//! `nccl.env` found them. Published for the fleet checks of `gpucheck
//! cluster`, which judge the cross-node all-reduce against what these links
//! can carry.

use serde::{Deserialize, Serialize};

use crate::Fact;

/// One active RDMA port that NCCL_IB_HCA (or its absence) selects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicLink {
    /// "mlx5_0/1".
    pub port: String,
    /// "InfiniBand" or "Ethernet" (RoCE).
    pub link_layer: Option<String>,
    /// The port's rate, Gb/s (sysfs `rate`: "400 Gb/sec (4X NDR)" -> 400).
    pub rate_gbps: f64,
}

/// Every active, selected RDMA port with a known rate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NicLinks {
    pub links: Vec<NicLink>,
}

impl NicLinks {
    /// What the node can send between nodes at once, GB/s (bytes): the sum
    /// of its ports' line rates, as NCCL spreads its rings over every NIC.
    pub fn aggregate_gbytes_per_s(&self) -> f64 {
        self.links.iter().map(|l| l.rate_gbps).sum::<f64>() / 8.0
    }
}

impl Fact for NicLinks {
    const KEY: &'static str = "nic_links";
}

/// One network interface NCCL's socket transport sends through between
/// nodes, as `nccl.env` found it: those NCCL_SOCKET_IFNAME selects, or NCCL's
/// own choice without it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SocketLink {
    /// "eth0".
    pub interface: String,
    /// The link speed, Gb/s (sysfs `class/net/<if>/speed`, Mb/s: 100000 ->
    /// 100); `None` when the kernel does not say (a link that is down, a
    /// virtual device such as lo).
    pub speed_gbps: Option<f64>,
}

/// Every interface with an address that NCCL's sockets would use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketLinks {
    pub links: Vec<SocketLink>,
}

impl SocketLinks {
    /// What the node can send between nodes at once, GB/s (bytes): the sum
    /// of its interfaces' link speeds, as NCCL's socket transport opens
    /// connections over every interface it found. `None` when there is none,
    /// or when any of them has no known speed: the total is then unknown.
    pub fn aggregate_gbytes_per_s(&self) -> Option<f64> {
        if self.links.is_empty() {
            return None;
        }
        let speeds: Option<Vec<f64>> = self.links.iter().map(|l| l.speed_gbps).collect();
        Some(speeds?.iter().sum::<f64>() / 8.0)
    }
}

impl Fact for SocketLinks {
    const KEY: &'static str = "socket_links";
}

/// One NVLink domain a node's GPUs registered in: GPUs sharing a cluster
/// UUID and clique (what NCCL requires to use NVLink between nodes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvlinkDomain {
    /// 32 hex digits.
    pub cluster_uuid: String,
    pub clique_id: u32,
    /// NVML indices.
    pub gpus: Vec<u32>,
}

/// The node's multi-node NVLink domains as `fabric.mnnvl` found them, for
/// `fleet.nvlink_domains`: published wherever NVML answered, empty when no
/// GPU is in a multi-node fabric.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvlinkDomains {
    pub domains: Vec<NvlinkDomain>,
    /// GPUs that report an NVLink fabric at all (any state); 0 on PCIe
    /// GPUs and GPUs before Hopper.
    pub fabric_gpus: u32,
    /// GPUs whose registration is not complete, or completed with an error.
    pub unregistered_gpus: u32,
    /// GPUs on the node.
    pub gpus: u32,
}

impl Fact for NvlinkDomains {
    const KEY: &'static str = "nvlink_domains";
}

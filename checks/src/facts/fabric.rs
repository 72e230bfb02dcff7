//! The RDMA ports NCCL will send through between nodes, as `fabric.rdma`
//! found them: published for the fleet checks of `gpucheck cluster`, which
//! judge the cross-node all-reduce against what these links can carry.

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

//! The fabric checks: what lies below NCCL on a node about to join a
//! multi-node job — GPUs that logged fatal Xid errors since boot, the
//! InfiniBand / RoCE ports NCCL sends through, and whether those NICs can
//! reach GPU memory directly (GPUDirect RDMA), and whether the network
//! plugin NCCL needs on EFA / GPUDirect-TCPX hosts loads, and on NVL72 racks
//! whether NCCL can use NVLink between trays (fabric, IMEX). One file per check.

mod gpudirect;
mod mnnvl;
mod net_plugin;
mod rdma;
mod xid;

pub use gpudirect::{GpuDirect, GpuDirectFacts};
pub use mnnvl::{Mnnvl, MnnvlFacts};
pub use net_plugin::{NetPlugin, NetPluginFacts};
pub use rdma::{
    is_datacentre_gpu, multi_node_reason, HcaFilter, Rdma, RdmaFacts, ROCE_MIN_NETDEV_MTU,
};
pub use xid::{Xid, XidFacts};

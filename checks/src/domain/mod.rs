//! Pure knowledge that no check owns: text helpers every summary uses, the
//! CUDA_VISIBLE_DEVICES rules, the driver / CUDA / wheel tables, the
//! launcher's defaults, the Xid and NVSwitch SXid catalogs. Nothing here
//! probes the machine or builds an `Outcome`; every group may import it, and
//! it imports no group.

pub mod action;
pub mod compat;
pub mod cuda_devices;
pub mod flight;
pub mod hca;
pub mod hostlist;
pub mod job;
pub mod launch;
pub mod nvlink_fabric;
pub mod pairs;
pub mod pcie;
pub mod placement;
pub mod qualify;
pub mod ras;
pub mod redact;
pub mod sku;
pub mod stacks;
pub mod stats;
pub mod sxid;
pub mod text;
pub mod visible_devices;
pub mod watch;
pub mod watch_late;
pub mod watch_summary;
pub mod xid;

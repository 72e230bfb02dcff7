//! The Xid errors the kernel logged since boot, published by `fabric.xid`
//! and read by checks whose own CUDA errors need evidence before they tell
//! the user a GPU must be reset (`nccl.allreduce`).

use serde::{Deserialize, Serialize};

use crate::domain::xid::{xid_info, XidAction};
use crate::Fact;

/// Every (GPU, Xid code) seen since boot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct XidHistory {
    pub events: Vec<XidSeen>,
}

/// One Xid code on one GPU, and how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct XidSeen {
    /// The PCI address the driver logged ("0000:ab:00").
    pub pci: String,
    /// NVML's index of the GPU at that address, when known.
    pub gpu: Option<u32>,
    pub code: u32,
    pub count: usize,
}

impl Fact for XidHistory {
    const KEY: &'static str = "xid_history";
}

impl XidHistory {
    /// The events after which NVIDIA's Xid catalog says the GPU must be
    /// reset or the node rebooted before it is trusted again.
    pub fn needing_reset(&self) -> Vec<&XidSeen> {
        self.events
            .iter()
            .filter(|e| xid_info(e.code).is_some_and(|i| i.action >= XidAction::ResetGpu))
            .collect()
    }
}

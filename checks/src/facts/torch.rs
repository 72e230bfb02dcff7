//! What the training Python's torch is, published by `torch.import` and read
//! by the torch, nccl and ddp checks (and by the fleet checks per node), or
//! that it has none ([`TorchMissing`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::domain::compat::CudaVersion;
pub use crate::probe::torch::{TorchDevice, TorchInfo};
use crate::Fact;

impl Fact for TorchInfo {
    const KEY: &'static str = "torch";
}

impl TorchInfo {
    /// The CUDA version torch was built for; None for a CPU-only build.
    pub fn cuda_version(&self) -> Option<CudaVersion> {
        self.cuda_build.as_deref().and_then(CudaVersion::parse)
    }
}

/// The training Python has no torch (torch.import's verdict): what brings
/// torch's libraries (NCCL) is installing torch there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TorchMissing {
    /// The interpreter, as it names itself (`sys.executable`).
    pub python: PathBuf,
}

impl Fact for TorchMissing {
    const KEY: &'static str = "torch_missing";
}

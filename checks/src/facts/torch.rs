//! What the training Python's torch is, published by `torch.import` and read
//! by the torch, nccl and ddp checks (and by the fleet checks per node).

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

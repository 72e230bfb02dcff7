//! What the training Python's torch is, published by `torch.import` and read
//! by the torch, nccl and ddp checks (and by the fleet checks per node).

pub use crate::probe::torch::{TorchDevice, TorchInfo};
use crate::Fact;

impl Fact for TorchInfo {
    const KEY: &'static str = "torch";
}

//! The NCCL a job on this machine loads, as `nccl.library` chose it:
//! published for `nccl.allreduce` (which runs that copy) and for the fleet
//! checks, which compare it across nodes.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::probe::nccl::NcclVersion;
use crate::Fact;

/// The libnccl.so.2 a program asking the loader for it gets first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclChoice {
    /// The path as found (often the `libnccl.so.2` symlink).
    pub path: PathBuf,
    /// The file it resolves to.
    pub real_path: PathBuf,
    pub version: NcclVersion,
    /// Where it was found, as reports say it ("Python wheel
    /// (site-packages/nvidia)").
    pub source: String,
    /// How many copies of libnccl the search found.
    pub copies: usize,
}

impl Fact for NcclChoice {
    const KEY: &'static str = "nccl_choice";
}

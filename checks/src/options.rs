//! Choices the user makes on the command line that checks read, as enums
//! clap parses directly (so a value that is not one of them is refused with
//! exit 2 before anything runs, and no check ever sees an unknown name).

use serde::{Deserialize, Serialize};

/// `--ddp-backend`: the process-group backend of the DDP benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DdpBackend {
    Nccl,
    Gloo,
}

impl DdpBackend {
    /// The name torch.distributed and the command line use.
    pub fn as_str(self) -> &'static str {
        match self {
            DdpBackend::Nccl => "nccl",
            DdpBackend::Gloo => "gloo",
        }
    }
}

/// `--ddp-device`: where the DDP benchmark trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DdpDevice {
    Cuda,
    Cpu,
}

impl DdpDevice {
    /// The name torch and the command line use.
    pub fn as_str(self) -> &'static str {
        match self {
            DdpDevice::Cuda => "cuda",
            DdpDevice::Cpu => "cpu",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn command_line_names_are_the_ones_torch_uses() {
        for b in DdpBackend::value_variants() {
            let v = b.to_possible_value().map(|p| p.get_name().to_string());
            assert_eq!(v.as_deref(), Some(b.as_str()));
            assert_eq!(
                serde_json::to_string(b).ok(),
                Some(format!("\"{}\"", b.as_str()))
            );
        }
        for d in DdpDevice::value_variants() {
            let v = d.to_possible_value().map(|p| p.get_name().to_string());
            assert_eq!(v.as_deref(), Some(d.as_str()));
            assert_eq!(
                serde_json::to_string(d).ok(),
                Some(format!("\"{}\"", d.as_str()))
            );
        }
    }
}

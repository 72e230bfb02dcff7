//! Probe: nccl (to be written).

//! The nccl checks (to be written).

//! Probe: nvml (to be written).

//! Probe: host (to be written).

//! Probe: python (to be written).

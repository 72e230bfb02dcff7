//! Probe: net (to be written).

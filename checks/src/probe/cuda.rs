//! Probe: cuda (to be written).

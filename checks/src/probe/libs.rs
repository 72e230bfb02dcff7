//! Probe: libs (to be written).

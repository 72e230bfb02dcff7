//! The gpu checks (to be written).

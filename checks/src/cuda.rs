//! The cuda checks (to be written).

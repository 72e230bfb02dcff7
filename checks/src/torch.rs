//! The torch checks (to be written).

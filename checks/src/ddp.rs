//! The ddp checks (to be written).

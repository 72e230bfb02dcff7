//! The net checks: the TCP rendezvous every DDP job starts with. Ranks find
//! each other through a TCPStore that rank 0 serves on MASTER_ADDR:MASTER_PORT,
//! so loopback TCP must work, MASTER_ADDR must resolve to something the other
//! nodes can reach, and MASTER_PORT must be free on the master. One file per
//! check, with its `evaluate` function and its unit tests.

pub mod loopback;
pub mod master_addr;
pub mod master_port;

pub use loopback::{evaluate_loopback, Loopback, LoopbackFacts};
pub use master_addr::{evaluate_master_addr, MasterAddr, MasterAddrFacts};
pub use master_port::{evaluate_master_port, MasterLocation, MasterPort, MasterPortFacts};

//! Facts from the outside world, one file per source. Probes return plain
//! structs; they never judge and never print.

pub mod cuda;
pub mod ddp;
pub mod host;
pub mod libs;
pub mod nccl;
pub mod net;
pub mod nvml;
pub mod process;
pub mod python;
pub mod system;
pub mod torch;

/// Mark the stage a child-isolated probe is entering ("cuInit",
/// "ncclCommInitAll"), so that a timeout can say where it hung. Writes one
/// protocol line to stderr, and only inside an isolated child.
pub fn stage(name: &str) {
    if std::env::var_os("GPUCHECK_CHILD").is_some() {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "gpucheck-stage: {name}");
    }
}

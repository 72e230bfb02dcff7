//! Facts from the outside world, one file per source. Probes return plain
//! structs; they never judge and never print.

pub mod copy_bandwidth;
pub mod cuda;
pub mod ddp;
pub mod host;
pub mod kernel_log;
pub mod libs;
pub mod load;
pub mod nccl;
pub mod net;
pub mod net_plugin;
pub mod nvml;
pub mod process;
pub mod python;
pub mod sysfs;
pub mod system;
pub mod torch;

/// The child protocol, part 1: the runner sets this variable in the
/// environment of `gpucheck __child ID`, so the probes know they run isolated.
pub const CHILD_ENV: &str = "GPUCHECK_CHILD";

/// The child protocol, part 2: a line on an isolated child's stderr that
/// starts with this names the stage it entered (see [`stage`]); the runner
/// reports the last one when the child times out.
pub const STAGE_PREFIX: &str = "gpucheck-stage: ";

/// Mark the stage a child-isolated probe is entering ("cuInit",
/// "ncclCommInitAll"), so that a timeout can say where it hung. Writes one
/// protocol line to stderr, and only inside an isolated child.
pub fn stage(name: &str) {
    if std::env::var_os(CHILD_ENV).is_some() {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{STAGE_PREFIX}{name}");
    }
}

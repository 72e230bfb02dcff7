//! The host checks: what the machine (or container) underneath the GPUs must
//! provide before any CUDA call can work well — the NVIDIA device nodes, a
//! /dev/shm large enough for NCCL and DataLoader workers, and resource limits
//! that do not choke RDMA or file-descriptor passing. One file per check,
//! with its thresholds, its `evaluate` function and its unit tests.

pub mod devices;
pub mod limits;
pub mod shm;

pub use devices::{evaluate_devices, Devices, DevicesFacts};
pub use limits::{evaluate_limits, Limits, LimitsThresholds, NOFILE_WARN_BELOW};
pub use shm::{evaluate_shm, Shm, ShmThresholds, SHM_FAIL_BELOW_MIB, SHM_WARN_BELOW_MIB};

const MIB: u64 = 1024 * 1024;

/// "64 MiB", "1.0 GiB", "23.5 GiB".
fn show_mib(mib: u64) -> String {
    if mib >= 1024 {
        format!("{:.1} GiB", mib as f64 / 1024.0)
    } else {
        format!("{mib} MiB")
    }
}

/// A byte count in MiB/GiB, or KiB below one MiB ("64 KiB", "8 MiB").
fn show_bytes(bytes: u64) -> String {
    if bytes >= MIB {
        show_mib(bytes / MIB)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_the_unit_a_person_expects() {
        assert_eq!(show_mib(64), "64 MiB");
        assert_eq!(show_mib(1024), "1.0 GiB");
        assert_eq!(show_mib(24 * 1024 + 512), "24.5 GiB");
        assert_eq!(show_bytes(64 * 1024), "64 KiB");
        assert_eq!(show_bytes(8 * MIB), "8 MiB");
    }
}

//! The cuda checks: does the CUDA driver initialise and work on every GPU
//! (`cuda.driver`), and will the CUDA runtime a job loads run on this driver
//! (`cuda.runtime`).
//!
//! Both load driver or runtime code, so both run child-isolated. The
//! knowledge they share with the torch checks (which toolkit needs which
//! driver, which wheel fits a driver) lives in `domain::compat`; what each
//! CUDA error means and how to fix it lives in [`errors`]. cuda.driver
//! publishes [`crate::facts::cuda::DriverCuda`] for the checks after it.

pub mod copy_bandwidth;
pub mod driver;
pub mod errors;
pub mod runtime;

pub use copy_bandwidth::CopyBandwidth;
pub use driver::CudaDriver;
pub use runtime::CudaRuntime;

#[cfg(test)]
mod tests {
    /// Every file of the group, as compiled.
    const SOURCES: &[(&str, &str)] = &[
        ("mod.rs", include_str!("mod.rs")),
        ("copy_bandwidth.rs", include_str!("copy_bandwidth.rs")),
        ("driver.rs", include_str!("driver.rs")),
        ("errors.rs", include_str!("errors.rs")),
        ("runtime.rs", include_str!("runtime.rs")),
    ];

    #[test]
    fn the_cuda_group_imports_no_other_group() {
        for group in ["env", "gpu", "nccl", "net", "host", "ddp", "torch"] {
            for (file, src) in SOURCES {
                for path in [format!("crate::{group}::"), format!("crate::{group};")] {
                    assert!(!src.contains(&path), "cuda/{file} uses {path}");
                }
            }
        }
    }
}

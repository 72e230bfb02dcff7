//! gpu.driver: can NVML start, and which driver, NVML and CUDA versions it
//! reports. Publishes [`NvmlDriver`] for later checks.

use std::path::Path;
use std::time::Duration;

use super::common::{lib, nvml_failure_outcome, nvml_timeout_hint};
use crate::facts::driver::NoDriverHere;
use crate::facts::nvml::NvmlDriver;
use crate::probe::nvml::{self, DriverInfo, NvmlFailure};
use crate::{Check, Context, Outcome, Profile};

/// The first NVML call loads the library and, without persistence mode,
/// initialises every GPU; NVIDIA documents this as taking seconds on a
/// multi-GPU node. 10 s covers a slow 8-GPU init and still bounds a hang.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(10);

/// CUDA's version encoding (12080) as people write it ("12.8").
fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Judge NVML's initialisation and report the versions.
pub fn evaluate_driver(facts: &Result<DriverInfo, NvmlFailure>, lib: Option<&Path>) -> Outcome {
    let library = lib.map_or(nvml::DEFAULT_LIBRARY.to_string(), |p| {
        p.display().to_string()
    });
    match facts {
        Err(f) => nvml_failure_outcome(f, lib).with_fact("nvml_library", library),
        Ok(d) => {
            let cuda = d
                .cuda_driver_version
                .map_or("n/a".to_string(), cuda_version);
            Outcome::pass(format!(
                "driver {}, NVML {}, supports CUDA {cuda}",
                d.driver_version, d.nvml_version
            ))
            .with_fact("driver_version", d.driver_version.clone())
            .with_fact("nvml_version", d.nvml_version.clone())
            .with_fact("cuda_driver_version", cuda)
            .with_fact("nvml_library", library)
        }
    }
}

/// [`evaluate_driver`], with a missing driver said once. When an earlier
/// check found that no driver reaches this environment (`first`), a driver
/// library that is not found, or a kernel module that is not loaded,
/// follows from it; when none did, a library that is not found is the first
/// cause, and this check publishes it for the checks after it. A library
/// given with --nvml-lib is judged on its own: the user asked about it.
pub fn judge_driver(
    facts: &Result<DriverInfo, NvmlFailure>,
    lib: Option<&Path>,
    first: Option<&NoDriverHere>,
) -> Outcome {
    let found = match (facts, lib) {
        (Err(NvmlFailure::LibraryNotFound { .. }), None) => {
            format!("NVIDIA driver library {} not found", nvml::DEFAULT_LIBRARY)
        }
        (Err(NvmlFailure::DriverNotLoaded), None) if first.is_some() => {
            "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)".to_string()
        }
        _ => return evaluate_driver(facts, lib),
    };
    match first {
        Some(first) => {
            let mut o = first.follows(&found);
            o.facts = evaluate_driver(facts, lib).facts;
            o
        }
        None => evaluate_driver(facts, lib).publish(&NoDriverHere {
            check: "gpu.driver".to_string(),
            reason: "no NVIDIA driver library here".to_string(),
        }),
    }
}

pub struct Driver;

impl Check for Driver {
    fn id(&self) -> &'static str {
        "gpu.driver"
    }
    fn title(&self) -> &'static str {
        "NVIDIA driver and NVML"
    }
    fn health(&self) -> bool {
        true
    }
    fn timeout_stage(&self) -> Option<String> {
        crate::probe::nvml::hung_call().map(str::to_string)
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn timeout(&self) -> Duration {
        DRIVER_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Loads the NVIDIA Management Library (libnvidia-ml.so.1) and reports the driver version, the NVML \
version and the newest CUDA version the driver supports.

Every GPU check, and PyTorch itself, needs a working driver: if NVML cannot start, no CUDA program \
can either. The CUDA version shown is the ceiling for the CUDA runtime a PyTorch wheel may bundle.

Library not found: there is no NVIDIA driver on this machine, or the container was started without \
GPU access. Install the driver on the host, and start containers with `docker run --gpus all` (NVIDIA \
Container Toolkit) or request nvidia.com/gpu on Kubernetes. --nvml-lib PATH points at a library \
elsewhere.

Driver not loaded: the kernel module is missing. `sudo modprobe nvidia`; `dmesg | grep -i nvrm` \
explains a refusal (Secure Boot, a DKMS build that failed after a kernel upgrade).

Driver/library version mismatch: the driver package was upgraded but the old kernel module is still \
loaded. Reboot, or stop every GPU user and reload the nvidia modules.

No permission: the /dev/nvidia* device nodes are not accessible to this user or container."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let facts = nvml::driver(lib(ctx));
        let first = NoDriverHere::in_run(ctx);
        judge_driver(&facts, lib(ctx), first.as_ref()).publish(&NvmlDriver(facts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::testing::*;
    use crate::probe::nvml::{DriverInfo, NvmlFailure};
    use crate::Status;

    #[test]
    fn driver_pass_reports_versions() {
        let o = evaluate_driver(
            &Ok(DriverInfo {
                driver_version: "570.86.15".into(),
                nvml_version: "12.570.86.15".into(),
                cuda_driver_version: Some(12080),
            }),
            None,
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "driver 570.86.15, NVML 12.570.86.15, supports CUDA 12.8"
        );
        assert_eq!(o.facts["cuda_driver_version"], "12.8");
        assert_eq!(o.facts["nvml_library"], "libnvidia-ml.so.1");
        assert_eq!(o.hint, None);
    }

    #[test]
    fn driver_without_cuda_version_says_na() {
        let o = evaluate_driver(
            &Ok(DriverInfo {
                driver_version: "418.226.00".into(),
                nvml_version: "10.418.226.00".into(),
                cuda_driver_version: None,
            }),
            None,
        );
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.ends_with("supports CUDA n/a"), "{}", o.summary);
    }

    #[test]
    fn library_not_found_points_at_driver_install_and_container_runtime() {
        let o = evaluate_driver(
            &Err(NvmlFailure::LibraryNotFound {
                detail: "libnvidia-ml.so.1: cannot open shared object file".into(),
            }),
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .starts_with("NVIDIA driver library libnvidia-ml.so.1 not found"));
        assert!(
            hint(&o).contains("install the NVIDIA driver"),
            "{}",
            hint(&o)
        );
        assert!(hint(&o).contains("docker run --gpus all"), "{}", hint(&o));
        assert!(
            hint(&o).contains("nvidia-ctk runtime configure"),
            "{}",
            hint(&o)
        );
        assert_eq!(
            o.facts["nvml_error"],
            "libnvidia-ml.so.1: cannot open shared object file"
        );
    }

    #[test]
    fn a_missing_driver_found_earlier_is_not_fixed_twice() {
        let first = NoDriverHere {
            check: "host.devices".into(),
            reason: "no GPU was passed into this docker container".into(),
        };
        let not_found = Err(NvmlFailure::LibraryNotFound {
            detail: "libnvidia-ml.so.1: cannot open shared object file".into(),
        });
        let o = judge_driver(&not_found, None, Some(&first));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NVIDIA driver library libnvidia-ml.so.1 not found — same cause as host.devices (no \
             GPU was passed into this docker container)"
        );
        assert!(
            hint(&o).starts_with("see host.devices: its fix"),
            "{}",
            hint(&o)
        );
        assert!(!hint(&o).contains("docker run"), "{}", hint(&o));
        assert_eq!(o.facts["nvml_library"], "libnvidia-ml.so.1");
        assert_eq!(o.fact::<NoDriverHere>(), None);
        let o = judge_driver(&Err(NvmlFailure::DriverNotLoaded), None, Some(&first));
        assert!(
            o.summary.starts_with(
                "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED) — same \
                 cause as host.devices"
            ),
            "{}",
            o.summary
        );
        // A --nvml-lib that points at nothing is the flag's fault; one
        // that loads is judged on its own.
        let given = Some(Path::new("/opt/x.so"));
        let o = judge_driver(&not_found, given, Some(&first));
        assert!(hint(&o).starts_with("check the path given to --nvml-lib"));
        let o = judge_driver(&Err(NvmlFailure::DriverNotLoaded), given, Some(&first));
        assert!(hint(&o).contains("sudo modprobe nvidia"), "{}", hint(&o));
        // Found first here: the full fix, published for the checks after.
        let o = judge_driver(&not_found, None, None);
        assert!(hint(&o).contains("docker run --gpus all"), "{}", hint(&o));
        assert_eq!(
            o.fact::<NoDriverHere>().map(|c| c.check),
            Some("gpu.driver".into())
        );
        // Not loaded, with nothing found before: its own fix, no first cause.
        let o = judge_driver(&Err(NvmlFailure::DriverNotLoaded), None, None);
        assert!(hint(&o).contains("sudo modprobe nvidia"), "{}", hint(&o));
        assert_eq!(o.fact::<NoDriverHere>(), None);
    }

    #[test]
    fn library_not_found_at_the_given_path_blames_the_flag() {
        let path = Path::new("/opt/x/libnvidia-ml.so.1");
        let o = evaluate_driver(
            &Err(NvmlFailure::LibraryNotFound {
                detail: "no such file".into(),
            }),
            Some(path),
        );
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "cannot load NVML from --nvml-lib /opt/x/libnvidia-ml.so.1: no such file"
        );
        assert!(hint(&o).starts_with("check the path given to --nvml-lib"));
    }

    #[test]
    fn each_init_failure_has_its_own_hint() {
        let cases = [
            (
                NvmlFailure::DriverNotLoaded,
                "NVML_ERROR_DRIVER_NOT_LOADED",
                "sudo modprobe nvidia",
            ),
            (
                NvmlFailure::LibRmVersionMismatch,
                "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
                "reboot, or stop everything using the GPUs",
            ),
            (
                NvmlFailure::NoPermission,
                "NVML_ERROR_NO_PERMISSION",
                "ls -l /dev/nvidia*",
            ),
            (
                NvmlFailure::Other {
                    detail: "nvmlInit_v2 failed: Unknown".into(),
                },
                "NVML failed: nvmlInit_v2 failed: Unknown",
                "run `nvidia-smi`",
            ),
        ];
        for (failure, summary, hint_text) in cases {
            let o = evaluate_driver(&Err(failure), None);
            assert_eq!(o.status, Status::Fail);
            assert!(o.summary.contains(summary), "{}", o.summary);
            assert!(hint(&o).contains(hint_text), "{}", hint(&o));
        }
    }
}

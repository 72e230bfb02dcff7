//! What each CUDA driver error means for someone about to train, and the
//! fix: the knowledge behind cuda.driver's verdicts.

use crate::domain::text::quote_value;
use crate::probe::cuda::CudaCallError;

/// What a CUDA driver error means for someone about to train, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorAdvice {
    pub name: &'static str,
    pub meaning: &'static str,
    pub fix: String,
}

/// The advice for a CUresult code. `cvd` is CUDA_VISIBLE_DEVICES when set.
/// Codes from cuda.h (CUresult); fixes from the CUDA driver API docs, the
/// CUDA compatibility guide (803/804) and the Fabric Manager guide (802).
pub fn error_advice(code: i32, cvd: Option<&str>) -> Option<ErrorAdvice> {
    let hidden = match cvd {
        Some(v) => format!(
            "CUDA_VISIBLE_DEVICES is set to {}: an empty, '-1' or invalid first entry hides every GPU (`unset CUDA_VISIBLE_DEVICES` to test, see env.cuda_visible_devices); ",
            quote_value(v)
        ),
        None => String::new(),
    };
    let (name, meaning, fix) = match code {
        3 => (
            "CUDA_ERROR_NOT_INITIALIZED",
            "the driver was not initialised",
            "check that `nvidia-smi` works and that the kernel module is loaded (`lsmod | grep nvidia`); reinstall the driver if libcuda and the module disagree".to_string(),
        ),
        4 => (
            "CUDA_ERROR_DEINITIALIZED",
            "the driver is shutting down",
            "run again; if it persists, check `dmesg` for driver errors".to_string(),
        ),
        2 => (
            "CUDA_ERROR_OUT_OF_MEMORY",
            "no GPU memory left to create a context",
            "other processes hold the GPU memory: find them with `nvidia-smi` (see gpu.processes) and stop them".to_string(),
        ),
        34 => (
            "CUDA_ERROR_STUB_LIBRARY",
            "the CUDA toolkit's stub libcuda (lib64/stubs) was loaded instead of the driver's",
            "remove the `.../lib64/stubs` folder from LD_LIBRARY_PATH; the real libcuda.so.1 comes with the NVIDIA driver (in containers: the NVIDIA Container Toolkit, `docker run --gpus all`)".to_string(),
        ),
        46 => (
            "CUDA_ERROR_DEVICE_UNAVAILABLE",
            "the GPU is busy or unavailable (compute mode Exclusive Process held by another process, or Prohibited)",
            "check `nvidia-smi -q -d COMPUTE` and other processes on the GPU (gpu.processes); `sudo nvidia-smi -c DEFAULT` restores shared mode".to_string(),
        ),
        100 => (
            "CUDA_ERROR_NO_DEVICE",
            "no CUDA-capable device is visible to this process",
            format!("{hidden}in a container, start it with the NVIDIA runtime (`docker run --gpus all`, NVIDIA Container Toolkit) and check NVIDIA_VISIBLE_DEVICES; on the host, check that `nvidia-smi` lists the GPUs"),
        ),
        101 => (
            "CUDA_ERROR_INVALID_DEVICE",
            "a device ordinal is not valid",
            format!("{hidden}check that CUDA_VISIBLE_DEVICES names GPUs that exist (`nvidia-smi -L`)"),
        ),
        214 => (
            "CUDA_ERROR_ECC_UNCORRECTABLE",
            "an uncorrectable ECC error was detected on the GPU",
            "reset the GPU (`sudo nvidia-smi -r -i N` with nothing running on it) or reboot; if it recurs, the GPU needs service (see gpu.ecc)".to_string(),
        ),
        304 => (
            "CUDA_ERROR_OPERATING_SYSTEM",
            "an operating-system call inside the driver failed (often a missing /dev/nvidia-uvm or wrong device-node permissions)",
            "check `ls -l /dev/nvidia*`; create missing nodes with `sudo nvidia-modprobe -u -c=0` or `sudo modprobe nvidia-uvm`; in containers, use the NVIDIA Container Toolkit so the device nodes are passed in".to_string(),
        ),
        800 => (
            "CUDA_ERROR_NOT_PERMITTED",
            "the operation is not permitted",
            "check the user's access to /dev/nvidia* (`ls -l /dev/nvidia*`, the video/render groups)".to_string(),
        ),
        802 => (
            "CUDA_ERROR_SYSTEM_NOT_READY",
            "the system is not ready: on NVSwitch systems (HGX/DGX) the Fabric Manager is not running or the NVLink fabric is not initialised",
            "start the Fabric Manager: `sudo systemctl start nvidia-fabricmanager` (and `sudo systemctl enable nvidia-fabricmanager`); its version must match the driver exactly — see `journalctl -u nvidia-fabricmanager` and `nvidia-smi -q | grep -i -A2 fabric`".to_string(),
        ),
        803 => (
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            "the libcuda in use does not match the kernel driver (a cuda-compat forward-compatibility libcuda for another driver branch, or a driver upgrade without reboot)",
            "remove the cuda-compat folder from LD_LIBRARY_PATH (or install the compat package made for this driver branch); after a driver upgrade, reboot or reload the nvidia modules".to_string(),
        ),
        804 => (
            "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            "forward compatibility (cuda-compat) is in use on a GPU that does not support it: only data-center GPUs do",
            "remove the cuda-compat folder from LD_LIBRARY_PATH and use a CUDA / PyTorch build the installed driver supports, or upgrade the driver".to_string(),
        ),
        805..=809 => (
            "CUDA_ERROR_MPS_*",
            "the CUDA MPS server or client failed",
            "check the MPS daemon (`nvidia-cuda-mps-control`), or stop it (`echo quit | nvidia-cuda-mps-control`) and unset CUDA_MPS_PIPE_DIRECTORY".to_string(),
        ),
        999 => (
            "CUDA_ERROR_UNKNOWN",
            "unknown error: usually a GPU in a bad state (after an Xid error), or on workstations the nvidia_uvm module after suspend/resume",
            "look for Xid errors (`sudo dmesg | grep -i xid`); reset the GPU (`sudo nvidia-smi -r -i N` with nothing running on it) or reboot; after suspend/resume: `sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm`".to_string(),
        ),
        _ => return None,
    };
    Some(ErrorAdvice { name, meaning, fix })
}

/// "CUDA_ERROR_SYSTEM_NOT_READY (802)", preferring the driver's own name.
pub fn error_label(e: &CudaCallError) -> String {
    let name = e
        .name
        .clone()
        .or_else(|| error_advice(e.code, None).map(|a| a.name.to_string()))
        .unwrap_or_else(|| "CUDA error".to_string());
    format!("{name} ({})", e.code)
}

pub fn generic_fix() -> String {
    "check that `nvidia-smi` works and look for driver errors in `sudo dmesg | grep -i -E 'nvrm|xid'`; reset the GPU or reboot if the driver is wedged".to_string()
}

//! Probe: what the PyTorch of the training Python can do with CUDA, from the
//! embedded payload checks/payloads/torch_info.py run with that Python under
//! a timeout. The payload prints one marked JSON line; everything else it or
//! torch prints is ignored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::process::{tail, RunError};
use super::python::{self, FindPythonError, PayloadError, PythonChoice};

/// The payload, embedded so the binary stays one file.
pub const TORCH_INFO_PY: &str = include_str!("../../payloads/torch_info.py");

/// Prefix of the payload's result line on stdout.
pub const RESULT_MARK: &str = "GPUCHECK_TORCH_INFO ";
/// Prefix of the payload's progress lines on stderr.
pub const STAGE_MARK: &str = "GPUCHECK_TORCH_STAGE ";

/// One GPU as torch sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TorchDevice {
    pub index: u32,
    pub name: String,
    pub capability: (u32, u32),
}

/// What the payload found out.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TorchInfo {
    pub python: PathBuf,
    pub python_version: Option<String>,
    /// "2.15.0+cu132"
    pub torch_version: String,
    /// The torch package folder.
    pub torch_path: Option<String>,
    /// `torch.version.cuda`: "13.2", None for a CPU-only build.
    pub cuda_build: Option<String>,
    pub cuda_available: bool,
    /// Why CUDA is unavailable, in torch's words (torch.cuda.init()'s error,
    /// or the warning is_available() raised).
    pub unavailable_reason: Option<String>,
    pub device_count: u32,
    pub devices: Vec<TorchDevice>,
    /// `torch.cuda.get_arch_list()`: "sm_90", "compute_120", ...
    pub arch_list: Vec<String>,
    /// "9.26.0"
    pub cudnn_version: Option<String>,
    /// `torch.distributed.is_nccl_available()`, None when unknown.
    pub nccl_available: Option<bool>,
    /// `torch.cuda.nccl.version()` as "2.27.7".
    pub nccl_version: Option<String>,
    pub import_time_s: Option<f64>,
    /// CUDA/NCCL/cuDNN libraries mapped into the process after the queries.
    pub loaded_libraries: Vec<String>,
    /// Queries that raised, as "key: Error: message".
    pub query_errors: Vec<String>,
}

/// Why the payload gave no [`TorchInfo`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum TorchProbeError {
    NoPython(FindPythonError),
    /// `import torch` raised ModuleNotFoundError for torch itself.
    NotInstalled {
        python: PathBuf,
        detail: String,
    },
    /// `import torch` raised something else (a missing .so, a symbol clash).
    ImportFailed {
        python: PathBuf,
        detail: String,
    },
    /// The interpreter was killed by a signal (a crash in torch's libraries).
    Crashed {
        python: PathBuf,
        signal: i32,
        stderr_tail: String,
    },
    Timeout {
        python: PathBuf,
        secs: f64,
        /// The payload's last stage ("import torch").
        stage: Option<String>,
        stderr_tail: String,
    },
    /// The interpreter could not be started.
    Spawn {
        python: PathBuf,
        detail: String,
    },
    /// The payload ended without a result line.
    NoResult {
        python: PathBuf,
        code: Option<i32>,
        stderr_tail: String,
    },
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RawDevice {
    index: u32,
    name: String,
    capability: Vec<u32>,
}

/// The payload's JSON, every field optional.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RawInfo {
    python: Option<String>,
    python_version: Option<String>,
    not_installed: bool,
    import_error: Option<String>,
    import_time_s: Option<f64>,
    torch_version: Option<String>,
    torch_path: Option<String>,
    cuda_build: Option<String>,
    cuda_available: Option<bool>,
    cuda_warnings: Vec<String>,
    unavailable_reason: Option<String>,
    arch_list: Vec<String>,
    device_count: Option<u32>,
    devices: Vec<RawDevice>,
    cudnn_version: Option<i64>,
    nccl_available: Option<bool>,
    nccl_version: Option<String>,
    loaded_libraries: Vec<String>,
    errors: std::collections::BTreeMap<String, String>,
}

/// cuDNN's integer version as "9.26.0": cuDNN 9 encodes
/// major*10000 + minor*100 + patch, cuDNN 8 and older major*1000 + minor*100 + patch.
pub fn cudnn_version_string(v: i64) -> String {
    if v >= 90000 {
        format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100)
    }
}

/// The last line of `stdout` carrying the result mark, parsed.
pub fn parse_output(python: &Path, stdout: &str) -> Option<Result<TorchInfo, TorchProbeError>> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.trim_start().strip_prefix(RESULT_MARK))?;
    let raw: RawInfo = serde_json::from_str(line.trim()).ok()?;
    let python = raw
        .python
        .clone()
        .map(PathBuf::from)
        .unwrap_or_else(|| python.to_path_buf());
    if let Some(detail) = raw.import_error {
        return Some(Err(if raw.not_installed {
            TorchProbeError::NotInstalled { python, detail }
        } else {
            TorchProbeError::ImportFailed { python, detail }
        }));
    }
    let unavailable_reason = raw.unavailable_reason.or_else(|| {
        raw.cuda_warnings
            .iter()
            .find(|w| w.contains("CUDA"))
            .cloned()
    });
    let cuda_available = raw.cuda_available.unwrap_or(false);
    Some(Ok(TorchInfo {
        python,
        python_version: raw.python_version,
        torch_version: raw.torch_version.unwrap_or_else(|| "unknown".to_string()),
        torch_path: raw.torch_path,
        cuda_build: raw.cuda_build.filter(|s| !s.trim().is_empty()),
        cuda_available,
        unavailable_reason: if cuda_available {
            None
        } else {
            unavailable_reason
        },
        device_count: raw.device_count.unwrap_or(0),
        devices: raw
            .devices
            .into_iter()
            .filter(|d| d.capability.len() == 2)
            .map(|d| TorchDevice {
                index: d.index,
                name: d.name,
                capability: (d.capability[0], d.capability[1]),
            })
            .collect(),
        arch_list: raw.arch_list,
        cudnn_version: raw
            .cudnn_version
            .filter(|v| *v > 0)
            .map(cudnn_version_string),
        nccl_available: raw.nccl_available,
        nccl_version: raw.nccl_version,
        import_time_s: raw.import_time_s,
        loaded_libraries: raw.loaded_libraries,
        query_errors: raw
            .errors
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect(),
    }))
}

fn last_stage(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(STAGE_MARK))
        .map(|s| s.trim().to_string())
}

fn clean_tail(stderr: &str) -> String {
    let kept: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with(STAGE_MARK))
        .collect();
    tail(&kept.join("\n"), 8)
}

/// Run the payload with `python` under `timeout`.
pub fn run_torch_payload(python: &Path, timeout: Duration) -> Result<TorchInfo, TorchProbeError> {
    crate::seam::answer(
        "torch::run_torch_payload",
        &python.display().to_string(),
        || {
            super::stage("python torch_info.py");
            let out =
                match python::run_payload(python, "torch-info", TORCH_INFO_PY, &[], &[], timeout) {
                    Ok(o) => o,
                    Err(PayloadError::Run(RunError::Timeout { secs, stderr, .. })) => {
                        return Err(TorchProbeError::Timeout {
                            python: python.to_path_buf(),
                            secs,
                            stage: last_stage(&stderr),
                            stderr_tail: clean_tail(&stderr),
                        })
                    }
                    Err(e) => {
                        return Err(TorchProbeError::Spawn {
                            python: python.to_path_buf(),
                            detail: e.to_string(),
                        })
                    }
                };
            if let Some(r) = parse_output(python, &out.stdout) {
                return r;
            }
            match out.signal {
                Some(signal) => Err(TorchProbeError::Crashed {
                    python: python.to_path_buf(),
                    signal,
                    stderr_tail: clean_tail(&out.stderr),
                }),
                None => Err(TorchProbeError::NoResult {
                    python: python.to_path_buf(),
                    code: out.code,
                    stderr_tail: clean_tail(&out.stderr),
                }),
            }
        },
    )
}

/// Find the training Python (`--python`, VIRTUAL_ENV, CONDA_PREFIX,
/// python3) and run the payload with it.
pub fn probe_torch(
    explicit: Option<&Path>,
    timeout: Duration,
) -> (Option<PythonChoice>, Result<TorchInfo, TorchProbeError>) {
    crate::seam::answer(
        "torch::probe_torch",
        &explicit
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        || match python::find_python(explicit) {
            Ok(choice) => {
                let r = run_torch_payload(&choice.path, timeout);
                (Some(choice), r)
            }
            Err(e) => (None, Err(TorchProbeError::NoPython(e))),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU_BOX: &str = r#"some noise from a plugin
GPUCHECK_TORCH_INFO {"python": "/venv/bin/python", "python_version": "3.11.9", "errors": {}, "import_time_s": 3.2, "torch_version": "2.15.0+cu132", "torch_path": "/venv/lib/python3.11/site-packages/torch", "cuda_build": "13.2", "cuda_available": false, "cuda_warnings": [], "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], "device_count": 0, "unavailable_reason": "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx", "cudnn_version": 92600, "nccl_available": true, "nccl_version": "2.30.7", "loaded_libraries": ["/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13"]}
more noise
"#;

    #[test]
    fn parses_the_marked_line_among_noise() {
        let info = parse_output(Path::new("/x"), CPU_BOX).unwrap().unwrap();
        assert_eq!(info.torch_version, "2.15.0+cu132");
        assert_eq!(info.cuda_build.as_deref(), Some("13.2"));
        assert!(!info.cuda_available);
        assert!(info
            .unavailable_reason
            .as_deref()
            .unwrap()
            .contains("Found no NVIDIA driver"));
        assert_eq!(info.arch_list.len(), 6);
        assert_eq!(info.cudnn_version.as_deref(), Some("9.26.0"));
        assert_eq!(info.nccl_version.as_deref(), Some("2.30.7"));
        assert_eq!(info.python, PathBuf::from("/venv/bin/python"));
        assert_eq!(info.import_time_s, Some(3.2));
    }

    #[test]
    fn not_installed_and_broken_imports_differ() {
        let nf = "GPUCHECK_TORCH_INFO {\"not_installed\": true, \"import_error\": \"ModuleNotFoundError: No module named 'torch'\"}\n";
        assert!(matches!(
            parse_output(Path::new("/p"), nf),
            Some(Err(TorchProbeError::NotInstalled { .. }))
        ));
        let broken = "GPUCHECK_TORCH_INFO {\"import_error\": \"OSError: libcudnn.so.9: cannot open shared object file\"}\n";
        match parse_output(Path::new("/p"), broken) {
            Some(Err(TorchProbeError::ImportFailed { python, detail })) => {
                assert_eq!(python, PathBuf::from("/p"));
                assert!(detail.contains("libcudnn.so.9"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_mark_or_bad_json_is_no_result() {
        assert!(parse_output(Path::new("/p"), "hello\n").is_none());
        assert!(parse_output(Path::new("/p"), "GPUCHECK_TORCH_INFO {not json\n").is_none());
    }

    #[test]
    fn gpu_devices_are_parsed() {
        let s = "GPUCHECK_TORCH_INFO {\"torch_version\": \"2.7.1+cu128\", \"cuda_build\": \"12.8\", \"cuda_available\": true, \"device_count\": 2, \"devices\": [{\"index\": 0, \"name\": \"NVIDIA H100 80GB HBM3\", \"capability\": [9, 0]}, {\"index\": 1, \"name\": \"NVIDIA H100 80GB HBM3\", \"capability\": [9, 0]}]}";
        let info = parse_output(Path::new("/p"), s).unwrap().unwrap();
        assert_eq!(info.device_count, 2);
        assert_eq!(info.devices[1].capability, (9, 0));
        assert_eq!(info.unavailable_reason, None);
    }

    #[test]
    fn cudnn_versions_decode_both_schemes() {
        assert_eq!(cudnn_version_string(92600), "9.26.0");
        assert_eq!(cudnn_version_string(90100), "9.1.0");
        assert_eq!(cudnn_version_string(8902), "8.9.2");
    }

    #[test]
    fn stage_and_tail_of_stderr() {
        let err = "GPUCHECK_TORCH_STAGE import torch\nwarning: x\nGPUCHECK_TORCH_STAGE torch.cuda.is_available\n";
        assert_eq!(last_stage(err).as_deref(), Some("torch.cuda.is_available"));
        assert_eq!(clean_tail(err), "warning: x");
    }
}

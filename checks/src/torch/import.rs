//! `torch.import`: the training Python imports torch; what it is. Publishes
//! [`TorchInfo`] for the checks after it; the report's facts are derived
//! from it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::{first_sentence, run_for, TorchInfo};
use crate::domain::compat::{install_torch_command, CudaVersion};
use crate::domain::text::{plural, timed_out};
use crate::facts::torch::TorchMissing;
use crate::probe::python::{FindPythonError, PythonSource};
use crate::probe::torch::TorchProbeError;
use crate::{Check, Context, FactValue, Isolation, Outcome, Profile};

const CPU_ONLY: &str = "none (CPU-only build)";

/// The facts torch.import reports from what it found: words, counts and
/// yes/no (a JSON boolean).
pub fn report_facts(info: &TorchInfo) -> BTreeMap<String, FactValue> {
    let mut f = BTreeMap::new();
    let mut put = |k: &str, v: FactValue| {
        f.insert(k.to_string(), v);
    };
    put("python", info.python.display().to_string().into());
    if let Some(v) = &info.python_version {
        put("python_version", v.into());
    }
    put("torch_version", (&info.torch_version).into());
    if let Some(p) = &info.torch_path {
        put("torch_path", p.into());
    }
    put(
        "torch_cuda",
        info.cuda_build
            .clone()
            .unwrap_or_else(|| CPU_ONLY.to_string())
            .into(),
    );
    put("cuda_available", info.cuda_available.into());
    if let Some(r) = &info.unavailable_reason {
        put("cuda_unavailable_reason", r.into());
    }
    put("cuda_device_count", info.device_count.into());
    for d in &info.devices {
        put(
            &format!("cuda_device_{}", d.index),
            format!(
                "{}, compute capability {}.{}",
                d.name, d.capability.0, d.capability.1
            )
            .into(),
        );
    }
    put("arch_list", info.arch_list.join(" ").into());
    if let Some(v) = &info.cudnn_version {
        put("cudnn_version", v.into());
    }
    if let Some(nccl) = info.nccl_available {
        put("nccl_available", nccl.into());
    }
    if let Some(v) = &info.nccl_version {
        put("nccl_version", v.into());
    }
    if !info.loaded_libraries.is_empty() {
        put(
            "cuda_libraries_loaded",
            info.loaded_libraries.join(", ").into(),
        );
    }
    if !info.query_errors.is_empty() {
        put("torch_query_errors", info.query_errors.join("; ").into());
    }
    f
}

/// The command that installs the torch build this driver runs into the
/// training Python (a plain `pip install torch` without a known driver).
pub fn install_torch_hint(python: &Path, driver_cuda: Option<CudaVersion>) -> String {
    let cmd = install_torch_command(python, driver_cuda);
    format!(
        "install PyTorch into the Python that will train: {cmd}; or point gpucheck at the Python that has it with --python PATH"
    )
}

/// The verdict when the payload gave no TorchInfo. Shared by torch.import
/// and by the torch checks that run the payload themselves. A training
/// Python without torch fails (a DDP job dies at `import torch`), with the
/// build for `driver_cuda`, the CUDA version the driver supports.
pub fn probe_failure(e: &TorchProbeError, driver_cuda: Option<CudaVersion>) -> Outcome {
    match e {
        TorchProbeError::NoPython(FindPythonError::NotFound) => Outcome::skip(format!(
            "{}; pass the Python that will train with --python PATH",
            FindPythonError::NotFound
        )),
        TorchProbeError::NoPython(err @ FindPythonError::ExplicitMissing { .. }) => Outcome::fail(
            format!("the Python named for training is missing: {err}"),
            "fix the path given with --python / GPUCHECK_PYTHON (e.g. `--python $VIRTUAL_ENV/bin/python`)",
        ),
        TorchProbeError::NotInstalled { python, detail } => Outcome::fail(
            format!("torch is not installed for {} ({detail})", python.display()),
            install_torch_hint(python, driver_cuda),
        )
        .with_fact("python", python.display().to_string())
        .publish(&TorchMissing {
            python: python.clone(),
        }),
        TorchProbeError::ImportFailed { python, detail } => import_failed(python, detail),
        TorchProbeError::Crashed {
            python,
            signal,
            stderr_tail,
        } => {
            let mut o = Outcome::fail(
                format!(
                    "importing torch crashed {} with signal {signal}",
                    python.display()
                ),
                "run `python -X faulthandler -c 'import torch; torch.cuda.is_available()'` to see where; a crash here usually means mismatched CUDA libraries on LD_LIBRARY_PATH or a broken driver install",
            );
            if !stderr_tail.is_empty() {
                o = o.with_fact("stderr_tail", stderr_tail.clone());
            }
            o
        }
        TorchProbeError::Timeout {
            python,
            secs,
            stage,
            stderr_tail,
        } => payload_timed_out(python, *secs, stage.as_deref(), stderr_tail),
        TorchProbeError::Spawn { python, detail } => Outcome::error(format!(
            "cannot run {}: {detail}",
            python.display()
        )),
        TorchProbeError::NoResult {
            python,
            code,
            stderr_tail,
        } => {
            let mut o = Outcome::error(format!(
                "the torch payload exited with status {} without a result ({})",
                code.unwrap_or(-1),
                python.display()
            ));
            if !stderr_tail.is_empty() {
                o = o.with_fact("stderr_tail", stderr_tail.clone());
            }
            o
        }
    }
}

/// A failure names how the Python was chosen when something the user
/// believes active was passed over on the way ($VIRTUAL_ENV pointing at a
/// folder with no Python), so "torch is not installed for /usr/bin/python3"
/// is not a riddle. With no Python at all, a $VIRTUAL_ENV that is set held
/// none either (it would have been chosen).
pub fn with_python_choice(
    mut o: Outcome,
    source: Option<&PythonSource>,
    e: &TorchProbeError,
    virtual_env: Option<&std::ffi::OsStr>,
) -> Outcome {
    let passed_over = match source {
        Some(PythonSource::Conda { passed_over } | PythonSource::Path { passed_over }) => {
            !passed_over.is_empty()
        }
        _ => false,
    };
    if let Some(s) = source.filter(|_| passed_over) {
        o.summary = format!("{} (Python from {})", o.summary, s.describe());
        return o.with_fact("python_source", s.describe());
    }
    let venv = virtual_env.filter(|v| !v.is_empty());
    if let (TorchProbeError::NoPython(FindPythonError::NotFound), Some(v)) = (e, venv) {
        let shown = crate::domain::text::quote_value(&v.to_string_lossy());
        o.summary = format!("{}; $VIRTUAL_ENV={shown} holds no Python", o.summary);
        let fix = "the virtual environment $VIRTUAL_ENV names is gone or has no bin/python: \
                   activate the one that will train, or unset VIRTUAL_ENV";
        let hint = match o.hint.take().filter(|h| !h.is_empty()) {
            Some(h) => format!("{fix}; {h}"),
            None => fix.to_string(),
        };
        o = o.with_hint(hint);
    }
    o
}

/// `import torch` raised: the fix the error points at.
fn import_failed(python: &std::path::Path, detail: &str) -> Outcome {
    let fix = if detail.contains("undefined symbol") {
        "a library on LD_LIBRARY_PATH shadows the one torch was built with (often libnccl, libcudnn or libcublas from a system CUDA): run with LD_LIBRARY_PATH unset to confirm, then remove that folder from it"
    } else if detail.contains("cannot open shared object file") {
        "a library torch needs is missing from the environment: reinstall torch so pip brings its nvidia-* dependencies (`pip install --force-reinstall torch`), or fix LD_LIBRARY_PATH"
    } else {
        "reinstall torch in this environment (`pip install --force-reinstall torch`) and run `python -c 'import torch'` to see the full error"
    };
    Outcome::fail(
        format!("`import torch` fails in {}: {detail}", python.display()),
        fix,
    )
    .with_fact("python", python.display().to_string())
}

/// The payload did not finish: where it hung says whether the file system
/// or the driver is to blame.
fn payload_timed_out(
    python: &std::path::Path,
    secs: f64,
    stage: Option<&str>,
    stderr_tail: &str,
) -> Outcome {
    const SLOW_IMPORT: &str = "a slow `import torch` is usually a network file system (NFS/Lustre home or venv) or a cold page cache: time it with `python -X importtime -c 'import torch'`, or give it longer with --timeout SECS";
    const DRIVER_HANG: &str = "a hang inside torch's CUDA calls points at the driver: look for Xid errors (`sudo dmesg | grep -i xid`), check `nvidia-smi` and cuda.driver's verdict, reset the GPU or reboot";
    let hint = match stage {
        Some("import torch") => SLOW_IMPORT.to_string(),
        Some(s) if s.starts_with("torch.cuda") => DRIVER_HANG.to_string(),
        _ => format!("{DRIVER_HANG}; {SLOW_IMPORT}"),
    };
    let mut o = Outcome::fail(
        format!("{} ({})", timed_out(secs, stage), python.display()),
        hint,
    );
    if !stderr_tail.is_empty() {
        o = o.with_fact("stderr_tail", stderr_tail.to_string());
    }
    o
}

/// Judge a successful payload run: torch imports, so this passes; the
/// summary says what it is and whether it sees CUDA, in torch's own words.
pub fn evaluate_import(info: &TorchInfo, source: Option<PythonSource>) -> Outcome {
    let build = match &info.cuda_build {
        Some(c) => format!("CUDA {c} build"),
        None => "CPU-only build".to_string(),
    };
    let from = source
        .map(|s| format!(" (from {})", s.describe()))
        .unwrap_or_default();
    let cuda = if info.cuda_available {
        format!(
            "CUDA available with {} device{}",
            info.device_count,
            plural(info.device_count as usize)
        )
    } else {
        match &info.unavailable_reason {
            Some(r) => format!("torch.cuda.is_available() is False: {}", first_sentence(r)),
            None => "torch.cuda.is_available() is False".to_string(),
        }
    };
    let archs = if info.arch_list.is_empty() {
        String::new()
    } else {
        format!("; archs {}", info.arch_list.join(" "))
    };
    let mut o = Outcome::pass(format!(
        "torch {} ({build}) in {}{from}{archs}; {cuda}",
        info.torch_version,
        info.python.display()
    ));
    o.facts = report_facts(info);
    if let Some(t) = info.import_time_s {
        o = o.with_metric("import_time_s", t, "s");
    }
    o = o.publish(info);
    o
}

/// `torch.import`: the training Python imports torch; what it is.
pub struct TorchImport;

impl Check for TorchImport {
    fn id(&self) -> &'static str {
        "torch.import"
    }
    fn title(&self) -> &'static str {
        "PyTorch imports"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        // A cold `import torch` on a network file system takes tens of seconds.
        Duration::from_secs(60)
    }
    fn explain(&self) -> &'static str {
        "Imports PyTorch with the Python that will train and records what it is: version, the CUDA version it was built for, whether it sees CUDA (and why not), its GPU architectures, cuDNN and NCCL versions, import time, and the CUDA libraries it actually loaded.\n\n\
The Python is the one a job would use: --python PATH (or GPUCHECK_PYTHON), else the active virtual environment ($VIRTUAL_ENV), else the active conda environment ($CONDA_PREFIX), else python3 on PATH; a $VIRTUAL_ENV or $CONDA_PREFIX that holds no Python is passed over, and the result says so, also when the check fails. The introspection runs in that Python as a separate process under a timeout; each query is guarded, so a CPU-only machine or a broken driver still gives an answer.\n\n\
Why it matters for DDP: every rank imports torch first. A torch that fails to import (a missing libcudnn, a library on LD_LIBRARY_PATH that shadows torch's own), that is a CPU-only build, or that is built for a newer CUDA than the driver supports, ends the job before the first step. torch.cuda, torch.arch and torch.nccl judge what this check found.\n\n\
How to fix: no Python at all is a skip (name the Python with --python); a training Python without torch fails, since every rank dies at `import torch`: the hint gives the install command for the build the driver runs. An import failure names the error: reinstall torch (`pip install --force-reinstall torch`) or remove the shadowing folder from LD_LIBRARY_PATH."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let (source, result) = run_for(ctx);
        match result {
            Ok(info) => evaluate_import(&info, source),
            Err(e) => with_python_choice(
                super::failure_verdict(ctx, &e),
                source.as_ref(),
                &e,
                std::env::var_os("VIRTUAL_ENV").as_deref(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::testing::cu132_cpu_box;
    use crate::torch::TorchDevice;
    use crate::Status;

    /// The verdict without a known driver.
    fn probe_failure(e: &TorchProbeError) -> Outcome {
        super::probe_failure(e, None)
    }

    #[test]
    fn a_failure_names_a_virtual_env_that_was_passed_over() {
        let e = TorchProbeError::NotInstalled {
            python: "/usr/bin/python3".into(),
            detail: "No module named 'torch'".into(),
        };
        let source = PythonSource::Path {
            passed_over: vec![
                "$VIRTUAL_ENV=\"/gone/venv\" holds no Python, so it was passed over".into(),
            ],
        };
        let o = with_python_choice(probe_failure(&e), Some(&source), &e, None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.ends_with(
                "(Python from python3 on PATH; $VIRTUAL_ENV=\"/gone/venv\" holds no Python, so \
                 it was passed over)"
            ),
            "{}",
            o.summary
        );
        // Nothing passed over: the verdict as it was.
        let plain = PythonSource::Path {
            passed_over: vec![],
        };
        let o = with_python_choice(probe_failure(&e), Some(&plain), &e, None);
        assert_eq!(o.summary, probe_failure(&e).summary);
    }

    #[test]
    fn no_python_at_all_says_virtual_env_held_none() {
        let e = TorchProbeError::NoPython(FindPythonError::NotFound);
        let venv = std::ffi::OsStr::new("/gone/venv");
        let o = with_python_choice(probe_failure(&e), None, &e, Some(venv));
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary
                .ends_with("; $VIRTUAL_ENV=\"/gone/venv\" holds no Python"),
            "{}",
            o.summary
        );
        assert!(o
            .hint
            .unwrap_or_default()
            .starts_with("the virtual environment $VIRTUAL_ENV names is gone"));
    }

    #[test]
    fn import_publishes_what_it_found_for_the_checks_after_it() {
        let mut t = cu132_cpu_box();
        t.cuda_available = true;
        t.unavailable_reason = None;
        t.device_count = 2;
        t.devices = vec![
            TorchDevice {
                index: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                capability: (9, 0),
            },
            TorchDevice {
                index: 1,
                name: "NVIDIA H100 80GB HBM3".into(),
                capability: (9, 0),
            },
        ];
        t.query_errors = vec!["cudnn_version: RuntimeError: x".into()];
        let o = evaluate_import(&t, Some(PythonSource::VirtualEnv));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.fact::<TorchInfo>(), Some(t.clone()));
        let mut ctx = Context::default();
        ctx.earlier.insert("torch.import".into(), o.clone());
        assert_eq!(ctx.fact::<TorchInfo>(), Some(t));
        assert_eq!(
            o.facts["cuda_device_0"],
            "NVIDIA H100 80GB HBM3, compute capability 9.0"
        );
        assert_eq!(o.facts["cuda_available"], FactValue::Bool(true));
        assert_eq!(o.facts["cuda_device_count"], FactValue::Integer(2));
        // A CPU-only build says so in words.
        let cpu = TorchInfo {
            cuda_build: None,
            arch_list: vec![],
            ..cu132_cpu_box()
        };
        assert_eq!(report_facts(&cpu)["torch_cuda"], "none (CPU-only build)");
    }

    #[test]
    fn import_pass_explains_no_driver() {
        let o = evaluate_import(&cu132_cpu_box(), Some(PythonSource::Explicit));
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.starts_with("torch 2.15.0+cu132 (CUDA 13.2 build) in /venv/bin/python (from --python / GPUCHECK_PYTHON)"), "{}", o.summary);
        assert!(
            o.summary.contains(
                "torch.cuda.is_available() is False: RuntimeError: Found no NVIDIA driver"
            ),
            "{}",
            o.summary
        );
        assert_eq!(o.metric("import_time_s"), Some(3.1));
        assert_eq!(o.facts["nccl_version"], "2.30.7");
    }

    #[test]
    fn no_torch_fails_with_the_build_the_driver_runs() {
        let e = TorchProbeError::NotInstalled {
            python: "/venv/bin/python".into(),
            detail: "ModuleNotFoundError: No module named 'torch'".into(),
        };
        let o = super::probe_failure(&e, Some(CudaVersion::new(12, 2)));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.hint.as_deref(),
            Some("install PyTorch into the Python that will train: `/venv/bin/python -m pip install torch --index-url https://download.pytorch.org/whl/cu121` (CUDA 12.1, which this CUDA 12.2 driver runs); or point gpucheck at the Python that has it with --python PATH")
        );
    }

    #[test]
    fn import_failures_map_to_skip_or_fail() {
        let o = probe_failure(&TorchProbeError::NoPython(FindPythonError::NotFound));
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("--python PATH"));
        let o = probe_failure(&TorchProbeError::NoPython(
            FindPythonError::ExplicitMissing {
                path: "/nope/python".into(),
                from: "--python / GPUCHECK_PYTHON".into(),
            },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("/nope/python"));
        let o = probe_failure(&TorchProbeError::NotInstalled {
            python: "/usr/bin/python3".into(),
            detail: "ModuleNotFoundError: No module named 'torch'".into(),
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .contains("torch is not installed for /usr/bin/python3"));
        assert!(o
            .hint
            .unwrap()
            .contains("`/usr/bin/python3 -m pip install torch`"));
        let o = probe_failure(&TorchProbeError::ImportFailed {
            python: "/p".into(),
            detail: "ImportError: /x/libtorch_cuda.so: undefined symbol: ncclCommSplit".into(),
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.hint.unwrap().contains("LD_LIBRARY_PATH"));
        let o = probe_failure(&TorchProbeError::ImportFailed {
            python: "/p".into(),
            detail:
                "OSError: libcudnn.so.9: cannot open shared object file: No such file or directory"
                    .into(),
        });
        assert!(o.hint.unwrap().contains("--force-reinstall"));
        let o = probe_failure(&TorchProbeError::Timeout {
            python: "/p".into(),
            secs: 58.0,
            stage: Some("torch.cuda.is_available".into()),
            stderr_tail: String::new(),
        });
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("timed out after 58 s in torch.cuda.is_available"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("Xid"), "{hint}");
        assert!(!hint.contains("importtime"), "{hint}");
        // Stuck in the import itself: a file-system matter, not the driver.
        let o = probe_failure(&TorchProbeError::Timeout {
            python: "/p".into(),
            secs: 60.0,
            stage: Some("import torch".into()),
            stderr_tail: String::new(),
        });
        assert!(
            o.summary
                .starts_with("timed out after 60 s in import torch"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("python -X importtime"), "{hint}");
        assert!(!hint.contains("Xid"), "{hint}");
        let o = probe_failure(&TorchProbeError::Crashed {
            python: "/p".into(),
            signal: 11,
            stderr_tail: "Segmentation fault".into(),
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.facts["stderr_tail"], "Segmentation fault");
    }
}

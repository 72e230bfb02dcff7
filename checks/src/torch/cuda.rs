//! `torch.cuda`: torch sees the GPUs NVML and the driver see; when it sees
//! none, the likeliest reason from what the other checks found.

use std::time::Duration;

use super::{first_sentence, torch_info, NvmlView, TorchInfo, DEPENDENT_TIMEOUT};
use crate::domain::compat::{
    incompatible_fix, minor_version_floor, replace_torch_command, runtime_compat, wheel_for_driver,
    CudaVersion, DriverVersion, RuntimeCompat, WHEELS,
};
use crate::domain::cuda_devices::{predict_devices, Expectation};
use crate::domain::text::{gpu_count, plural, quote_value};
use crate::domain::visible_devices::parse_cuda_visible_devices;
use crate::facts::cuda::{driver_cuda_for_run, known_driver};
use crate::probe::host::env_lossy;
use crate::{Check, Context, Outcome, Profile, Status};

/// Everything `torch.cuda` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct TorchCudaFacts {
    pub torch: TorchInfo,
    pub nvml: NvmlView,
    /// cuda.driver's device count, when it ran and worked.
    pub cuda_driver_devices: Option<u32>,
    /// The CUDA version the driver supports (cuda.driver or NVML).
    pub driver_cuda: Option<CudaVersion>,
    /// The driver's version ("570.86.15"), when known.
    pub driver_version: Option<String>,
    /// cuda.driver's summary and hint when it ran and failed (or crashed):
    /// the CUDA driver's own error, the likeliest reason torch sees no GPU.
    pub cuda_driver_failure: Option<(String, Option<String>)>,
    pub cuda_visible_devices: Option<String>,
}

/// Whether CUDA_VISIBLE_DEVICES hides every GPU (empty, "-1", an invalid
/// first entry, or a GPU named twice), as the CUDA driver reads it.
pub fn cvd_hides_everything(v: &str) -> bool {
    parse_cuda_visible_devices(v).effective().is_empty()
}

fn driver_need(cuda: CudaVersion) -> String {
    minor_version_floor(cuda.major)
        .map(|f| format!("an NVIDIA driver >= {f}"))
        .unwrap_or_else(|| format!("a driver supporting CUDA {cuda}"))
}

/// The CUDA build of torch to install for a driver supporting `driver`.
fn wheel_hint(driver: Option<CudaVersion>) -> String {
    let w = driver
        .and_then(wheel_for_driver)
        .unwrap_or(&WHEELS[WHEELS.len() - 1]);
    format!(
        "install a CUDA build of torch: {} (CUDA {}, torch {})",
        replace_torch_command(w.index),
        w.cuda,
        w.torch
    )
}

/// "1 device", "8 devices".
fn devices(n: u32) -> String {
    format!("{n} device{}", plural(n as usize))
}

/// Judge torch's view of CUDA.
pub fn evaluate_cuda(f: &TorchCudaFacts) -> Outcome {
    let t = &f.torch;
    let nvml_gpus = f.nvml.gpu_count();
    // A CPU-only build never sees a GPU.
    let Some(torch_cuda) = t.cuda_version() else {
        if nvml_gpus > 0 {
            return Outcome::fail(
                format!(
                    "torch {} is a CPU-only build (torch.version.cuda is None), but NVML sees {}",
                    t.torch_version,
                    gpu_count(nvml_gpus as usize)
                ),
                wheel_hint(f.driver_cuda),
            );
        }
        return Outcome::skip(format!(
            "not applicable: torch {} is a CPU-only build and there is no NVIDIA GPU here",
            t.torch_version
        ));
    };
    if t.cuda_available {
        return judge_available(f, torch_cuda);
    }
    let reason = t
        .unavailable_reason
        .as_deref()
        .map(|r| format!(" ({})", first_sentence(r)))
        .unwrap_or_default();
    if nvml_gpus > 0 || f.cuda_driver_devices.unwrap_or(0) > 0 {
        return judge_unavailable(f, torch_cuda, &reason);
    }
    match &f.nvml {
        NvmlView::Unavailable {
            why,
            no_driver: false,
        } => Outcome::skip(format!(
            "cannot judge: torch sees no GPU{reason} and NVML cannot say whether there are any ({why}); see gpu.driver"
        )),
        _ => Outcome::skip(format!(
            "not applicable: no NVIDIA driver/GPU on this machine{}; torch {} is a CUDA {torch_cuda} build and would need {}{reason}",
            match &f.nvml {
                NvmlView::Unavailable { why, .. } => format!(" ({why})"),
                NvmlView::Gpus(_) => String::new(),
            },
            t.torch_version,
            driver_need(torch_cuda)
        )),
    }
}

/// torch sees CUDA: it must count the devices the driver (or NVML and
/// CUDA_VISIBLE_DEVICES) predict.
fn judge_available(f: &TorchCudaFacts, torch_cuda: CudaVersion) -> Outcome {
    let t = &f.torch;
    let expected = f
        .cuda_driver_devices
        .map(|n| (n, format!("the CUDA driver sees {n} (cuda.driver)")))
        .or_else(|| match &f.nvml {
            NvmlView::Gpus(g) => {
                match predict_devices(Some(g), f.cuda_visible_devices.as_deref(), None) {
                    Expectation::Exactly { count, from } => Some((count, from)),
                    _ => None,
                }
            }
            NvmlView::Unavailable { .. } => None,
        });
    let mut names: Vec<String> = t.devices.iter().map(|d| d.name.clone()).collect();
    names.dedup();
    let names = if names.is_empty() {
        String::new()
    } else {
        format!(" ({})", names.join(", "))
    };
    let o = Outcome::pass(format!(
        "CUDA {torch_cuda} available in torch with {}{names}",
        devices(t.device_count)
    ))
    .with_metric("torch_device_count", t.device_count as f64, "count");
    match expected {
        Some((n, from)) if n != t.device_count => Outcome {
            status: Status::Fail,
            summary: format!("torch sees {} but {from}", devices(t.device_count)),
            ..o
        }
        .with_hint(
            "torch and gpucheck should see the same GPUs: compare CUDA_VISIBLE_DEVICES in the job's environment, and the libcuda torch loaded (cuda_libraries_loaded in torch.import's facts) with the driver's",
        ),
        _ => o,
    }
}

/// torch sees no GPU although the machine has some: a driver too old for
/// the build, CUDA_VISIBLE_DEVICES, or the CUDA driver's own failure.
fn judge_unavailable(f: &TorchCudaFacts, torch_cuda: CudaVersion, reason: &str) -> Outcome {
    let nvml_gpus = f.nvml.gpu_count();
    let seen = if nvml_gpus > 0 {
        format!("NVML sees {}", gpu_count(nvml_gpus as usize))
    } else {
        "the CUDA driver sees devices".to_string()
    };
    if let Some(driver) = f.driver_cuda {
        let have = f.driver_version.as_deref().and_then(DriverVersion::parse);
        if let RuntimeCompat::Incompatible { need } =
            runtime_compat(torch_cuda, driver, have.as_ref())
        {
            return Outcome::fail(
                format!(
                    "torch.cuda.is_available() is False although {seen}: torch is built for CUDA {torch_cuda} and the driver{} supports only CUDA {driver}{reason}",
                    f.driver_version.as_deref().map(|v| format!(" ({v})")).unwrap_or_default()
                ),
                incompatible_fix(torch_cuda, driver, &need),
            );
        }
    }
    if let Some(v) = f
        .cuda_visible_devices
        .as_deref()
        .filter(|v| cvd_hides_everything(v))
    {
        return Outcome::fail(
            format!(
                "torch.cuda.is_available() is False although {seen}: CUDA_VISIBLE_DEVICES={} hides every GPU",
                quote_value(v)
            ),
            "unset CUDA_VISIBLE_DEVICES, or set it to the GPUs this job should use (e.g. CUDA_VISIBLE_DEVICES=0,1,2,3); see env.cuda_visible_devices",
        );
    }
    if let Some((summary, hint)) = &f.cuda_driver_failure {
        return Outcome::fail(
            format!(
                "torch.cuda.is_available() is False although {seen}: the CUDA driver fails (cuda.driver: {summary}){reason}"
            ),
            hint.clone().unwrap_or_else(|| {
                "see cuda.driver's verdict for the fix; `python -c 'import torch; torch.cuda.init()'` shows torch's error".to_string()
            }),
        );
    }
    Outcome::fail(
        format!("torch.cuda.is_available() is False although {seen}{reason}"),
        "see cuda.driver's verdict for the driver's own error; `python -c 'import torch; torch.cuda.init()'` shows torch's; check CUDA_VISIBLE_DEVICES and that the job's container has GPU access",
    )
}

/// `torch.cuda`: torch sees the GPUs NVML and the driver see.
pub struct TorchCuda;

impl Check for TorchCuda {
    fn id(&self) -> &'static str {
        "torch.cuda"
    }
    fn title(&self) -> &'static str {
        "PyTorch sees the GPUs"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn needs(&self) -> &'static [&'static str] {
        &["torch.import"]
    }
    fn timeout(&self) -> Duration {
        DEPENDENT_TIMEOUT
    }
    fn explain(&self) -> &'static str {
        "Checks that torch.cuda.is_available() is True when the machine has NVIDIA GPUs, and that torch counts as many devices as the CUDA driver.\n\n\
Why it matters for DDP: \"torch says CUDA isn't available\" is the most common way a GPU job dies on a new machine or image, and each rank needs its own GPU. When torch sees no GPU although NVML does, this check names the likely cause from what the other checks found: a CPU-only wheel (torch.version.cuda is None), a driver too old for the CUDA version the wheel was built for, CUDA_VISIBLE_DEVICES hiding every GPU, or the CUDA driver itself failing (cuda.driver's error, e.g. the Fabric Manager not running).\n\n\
How to fix: for a CPU-only wheel, replace it with a CUDA build (`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu128`, choosing the CUDA version your driver supports; without the uninstall pip keeps the installed torch); for a driver that is too old, install a newer driver or a torch built for an older CUDA (the hint names both); for CUDA_VISIBLE_DEVICES, unset it or list the GPUs the job should use; for a failing CUDA driver, cuda.driver's fix. On a machine with no NVIDIA driver or GPU at all this check is a skip that says what the build would need."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let torch = match torch_info(ctx) {
            Ok(t) => t,
            Err(o) => return *o,
        };
        let cuda_driver = driver_cuda_for_run(ctx);
        let cuda_driver_devices = cuda_driver.as_ref().and_then(|d| d.working_device_count());
        let cuda_driver_failure = cuda_driver
            .and_then(|d| d.failure)
            .map(|e| (e.summary, e.hint));
        let (known, driver_version) = known_driver(ctx);
        let driver_cuda = known.map(|(cuda, _)| cuda);
        evaluate_cuda(&TorchCudaFacts {
            torch,
            nvml: NvmlView::for_run(ctx),
            cuda_driver_devices,
            driver_cuda,
            driver_version,
            cuda_driver_failure,
            cuda_visible_devices: env_lossy("CUDA_VISIBLE_DEVICES"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::testing::{cu132_cpu_box, gpu};
    use crate::torch::TorchDevice;

    fn cuda_facts(torch: TorchInfo, nvml: NvmlView) -> TorchCudaFacts {
        TorchCudaFacts {
            torch,
            nvml,
            cuda_driver_devices: None,
            driver_cuda: None,
            driver_version: None,
            cuda_driver_failure: None,
            cuda_visible_devices: None,
        }
    }

    #[test]
    fn no_driver_is_a_skip_that_says_what_the_build_needs() {
        let o = evaluate_cuda(&cuda_facts(
            cu132_cpu_box(),
            NvmlView::Unavailable {
                why: "NVML (libnvidia-ml.so.1) not found".into(),
                no_driver: true,
            },
        ));
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.contains("no NVIDIA driver/GPU on this machine"),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("torch 2.15.0+cu132 is a CUDA 13.2 build and would need an NVIDIA driver >= 580.65.06"), "{}", o.summary);
    }

    #[test]
    fn a_hung_nvml_is_not_mistaken_for_no_driver() {
        let o = evaluate_cuda(&cuda_facts(
            cu132_cpu_box(),
            NvmlView::Unavailable {
                why: "NVML did not answer in gpu.driver".into(),
                no_driver: false,
            },
        ));
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.starts_with("cannot judge: torch sees no GPU"),
            "{}",
            o.summary
        );
        assert!(
            o.summary.contains("NVML did not answer in gpu.driver"),
            "{}",
            o.summary
        );
        assert!(!o.summary.contains("no NVIDIA driver/GPU"), "{}", o.summary);
    }

    #[test]
    fn cpu_only_wheel_on_a_gpu_box_fails() {
        let t = TorchInfo {
            cuda_build: None,
            torch_version: "2.7.1+cpu".into(),
            ..cu132_cpu_box()
        };
        let mut f = cuda_facts(
            t,
            NvmlView::Gpus(vec![gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0))]),
        );
        f.driver_cuda = Some(CudaVersion::new(12, 8));
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("CPU-only build (torch.version.cuda is None), but NVML sees 1 GPU"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("whl/cu128"), "{hint}");
        // A CPU build is installed: a plain `pip install torch` would be a no-op.
        assert!(
            hint.contains("`pip uninstall -y torch && pip install torch --index-url"),
            "{hint}"
        );
    }

    #[test]
    fn driver_too_old_for_the_wheel_is_named() {
        let mut f = cuda_facts(
            cu132_cpu_box(),
            NvmlView::Gpus(
                (0..8)
                    .map(|i| gpu(i, "NVIDIA H100 80GB HBM3", (9, 0)))
                    .collect(),
            ),
        );
        f.driver_cuda = Some(CudaVersion::new(12, 2));
        f.driver_version = Some("535.104.05".into());
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("NVML sees 8 GPUs: torch is built for CUDA 13.2 and the driver (535.104.05) supports only CUDA 12.2"), "{}", o.summary);
        let hint = o.hint.unwrap();
        assert!(hint.contains(">= 580.65.06"), "{hint}");
        assert!(hint.contains("whl/cu121"), "{hint}");
    }

    #[test]
    fn cuda_visible_devices_hiding_everything_is_named() {
        let mut f = cuda_facts(
            cu132_cpu_box(),
            NvmlView::Gpus(vec![gpu(0, "NVIDIA L40S", (8, 9))]),
        );
        f.cuda_visible_devices = Some("".into());
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("CUDA_VISIBLE_DEVICES=\"\" hides every GPU"),
            "{}",
            o.summary
        );
        assert!(cvd_hides_everything("-1"));
        assert!(cvd_hides_everything("0,0"));
        assert!(cvd_hides_everything("foo,0"));
        assert!(!cvd_hides_everything("0,1"));
    }

    #[test]
    fn unavailable_for_another_reason_quotes_torch() {
        let mut t = cu132_cpu_box();
        t.unavailable_reason = Some("RuntimeError: CUDA unknown error".into());
        let mut f = cuda_facts(t, NvmlView::Gpus(vec![gpu(0, "NVIDIA H100", (9, 0))]));
        f.driver_cuda = Some(CudaVersion::new(13, 2));
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("CUDA unknown error"));
        assert!(o.hint.unwrap().contains("cuda.driver"));
    }

    #[test]
    fn a_failing_cuda_driver_is_named_as_the_cause() {
        let mut t = cu132_cpu_box();
        t.unavailable_reason = Some("RuntimeError: CUDA driver initialization failed".into());
        let mut f = cuda_facts(
            t,
            NvmlView::Gpus(
                (0..8)
                    .map(|i| gpu(i, "NVIDIA H100 80GB HBM3", (9, 0)))
                    .collect(),
            ),
        );
        f.driver_cuda = Some(CudaVersion::new(13, 2));
        f.cuda_driver_failure = Some((
            "cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802): the system is not ready".into(),
            Some("start the Fabric Manager: `sudo systemctl start nvidia-fabricmanager`".into()),
        ));
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.starts_with("torch.cuda.is_available() is False although NVML sees 8 GPUs: the CUDA driver fails (cuda.driver: cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802)"),
            "{}",
            o.summary
        );
        assert!(
            o.hint
                .unwrap()
                .contains("systemctl start nvidia-fabricmanager"),
            "the fix is cuda.driver's"
        );
        // A driver too old for the wheel is still the more precise cause.
        f.driver_cuda = Some(CudaVersion::new(12, 8));
        let o = evaluate_cuda(&f);
        assert!(
            o.summary.contains("supports only CUDA 12.8"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn available_with_matching_count_passes_and_mismatch_fails() {
        let mut t = cu132_cpu_box();
        t.cuda_available = true;
        t.unavailable_reason = None;
        t.device_count = 8;
        t.devices = (0..8)
            .map(|i| TorchDevice {
                index: i,
                name: "NVIDIA H100 80GB HBM3".into(),
                capability: (9, 0),
            })
            .collect();
        let mut f = cuda_facts(
            t.clone(),
            NvmlView::Unavailable {
                why: "x".into(),
                no_driver: true,
            },
        );
        f.cuda_driver_devices = Some(8);
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.summary
                .contains("CUDA 13.2 available in torch with 8 devices (NVIDIA H100 80GB HBM3)"),
            "{}",
            o.summary
        );
        f.cuda_driver_devices = Some(7);
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("torch sees 8 devices but the CUDA driver sees 7 (cuda.driver)"),
            "{}",
            o.summary
        );
    }

    // ---- torch.nccl ----
}

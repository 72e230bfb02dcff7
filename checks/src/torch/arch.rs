//! `torch.arch`: the installed torch carries GPU code for every GPU's
//! compute capability.

use std::time::Duration;

use super::{torch_info, NvmlView, TorchInfo, DEPENDENT_TIMEOUT};
use crate::domain::compat::{
    arch_support, replace_torch_command, wheels_covering, ArchSupport, WHEELS,
};
use crate::{Check, Context, DeviceResult, Finding, Findings, Outcome, Profile, Status};

/// What to install so a device of capability `cc` gets machine code.
pub fn build_for(cc: (u32, u32)) -> String {
    let covering = wheels_covering(cc);
    let Some(newest) = covering.last() else {
        return format!(
            "no official PyTorch wheel has machine code for compute {}.{}; build PyTorch from source with TORCH_CUDA_ARCH_LIST=\"{}.{}\"",
            cc.0, cc.1, cc.0, cc.1
        );
    };
    let names: Vec<&str> = covering.iter().map(|w| w.index).collect();
    let newest_all = WHEELS.last().map(|w| w.index).unwrap_or("");
    let dropped = if newest.index != newest_all {
        format!("; builds newer than {} dropped it", newest.index)
    } else {
        String::new()
    };
    format!(
        "builds with machine code for compute {}.{}: {}{dropped}; e.g. {} (torch {})",
        cc.0,
        cc.1,
        names.join(", "),
        replace_torch_command(newest.index),
        newest.torch
    )
}

/// A GPU to check against torch's architectures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchTarget {
    pub index: u32,
    pub name: String,
    pub capability: (u32, u32),
}

/// How one GPU runs the build: its row summary, and what is wrong.
fn judge_target(
    g: &ArchTarget,
    archs: &[String],
    arch_text: &str,
) -> (Status, String, Option<Finding>) {
    let (ma, mi) = g.capability;
    match arch_support(g.capability, archs) {
        ArchSupport::Native { arch, exact: true } => {
            (Status::Pass, format!("compute {ma}.{mi}: {arch}"), None)
        }
        ArchSupport::Native { arch, exact: false } => (
            Status::Pass,
            format!("compute {ma}.{mi}: runs {arch} machine code (no sm_{ma}{mi}-specific build)"),
            None,
        ),
        ArchSupport::Jit { arch } => {
            let finding = Finding::new(
                None,
                Status::Warn,
                format!(
                    "GPU {} {} (compute {ma}.{mi}) runs only through {arch} PTX",
                    g.index, g.name
                ),
            )
            .hint(format!(
                "PTX is JIT-compiled at first use (slow start-up, cached in ~/.nv/ComputeCache) and may not reach machine-code speed; {}",
                build_for(g.capability)
            ));
            (
                Status::Warn,
                format!("compute {ma}.{mi}: JIT from {arch}"),
                Some(finding),
            )
        }
        ArchSupport::None => {
            let finding = Finding::new(
                None,
                Status::Fail,
                format!(
                    "GPU {} {} (compute {ma}.{mi}) cannot run this torch: it has code only for {arch_text} (\"no kernel image is available for execution on the device\")",
                    g.index, g.name
                ),
            )
            .hint(build_for(g.capability));
            (
                Status::Fail,
                format!("compute {ma}.{mi}: no sm_{ma}x code and no usable PTX"),
                Some(finding),
            )
        }
    }
}

/// Judge every GPU against the build's architecture list. `targets_from`
/// says where the GPUs came from ("torch", "NVML").
pub fn evaluate_arch(t: &TorchInfo, targets: &[ArchTarget], targets_from: &str) -> Outcome {
    if t.cuda_build.is_none() {
        return Outcome::skip(format!(
            "not applicable: torch {} is a CPU-only build with no GPU code",
            t.torch_version
        ));
    }
    if t.arch_list.is_empty() {
        return Outcome::skip(format!(
            "torch {} did not report its GPU architectures (torch.cuda.get_arch_list() is empty)",
            t.torch_version
        ));
    }
    let archs = t.arch_list.join(" ");
    if targets.is_empty() {
        return Outcome::skip(format!(
            "no GPU visible to check against; torch {} carries code for {archs}",
            t.torch_version
        ))
        .with_fact("arch_list", archs);
    }
    let mut findings = Findings::new();
    let mut rows = Vec::new();
    for g in targets {
        let (status, summary, finding) = judge_target(g, &t.arch_list, &archs);
        findings.items.extend(finding);
        rows.push(DeviceResult {
            index: g.index,
            label: None,
            name: g.name.clone(),
            uuid: None,
            status,
            summary,
            metrics: Vec::new(),
        });
    }
    let mut caps: Vec<String> = targets
        .iter()
        .map(|g| format!("{}.{}", g.capability.0, g.capability.1))
        .collect();
    caps.dedup();
    let pass = format!(
        "torch {} has machine code for every GPU ({} from {targets_from}: compute {})",
        t.torch_version,
        targets.len(),
        caps.join(", ")
    );
    findings.conclude(pass, rows).with_fact("arch_list", archs)
}

/// `torch.arch`: the wheel has code for every GPU's compute capability.
pub struct TorchArch;

impl Check for TorchArch {
    fn id(&self) -> &'static str {
        "torch.arch"
    }
    fn title(&self) -> &'static str {
        "PyTorch GPU architectures"
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
        "Checks that the installed PyTorch carries GPU code for the compute capability of every GPU, from torch.cuda.get_arch_list().\n\n\
A GPU runs machine code (sm_XY) built for its own major version with an equal or lower minor (sm_86 runs on an 8.9 L40S), or PTX (compute_XY) JIT-compiled for any capability at or above XY. Otherwise every kernel fails with \"no kernel image is available for execution on the device\". Official wheels drop old GPUs and add new ones per CUDA version: an RTX 5090 (compute 12.0) needs a cu128 or newer wheel; a V100 (7.0) is not in the CUDA 13 wheels, nor in cu128 from torch 2.11 on (cu126 still carries it).\n\n\
Why it matters for DDP: the job imports and even reports CUDA available, then dies at the first kernel on every rank. PTX-only support works but JIT-compiles at start-up, which is slow and may not reach machine-code speed (warn).\n\n\
How to fix: install a wheel whose architecture list covers the GPU; the hint names the builds that do (from the wheel table in facts.md) and the pip command. GPUs come from torch itself when it sees them, else from NVML."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let torch = match torch_info(ctx) {
            Ok(t) => t,
            Err(o) => return *o,
        };
        let (targets, from) = if !torch.devices.is_empty() {
            (
                torch
                    .devices
                    .iter()
                    .map(|d| ArchTarget {
                        index: d.index,
                        name: d.name.clone(),
                        capability: d.capability,
                    })
                    .collect(),
                "torch",
            )
        } else {
            match NvmlView::for_run(ctx) {
                NvmlView::Gpus(g) => (
                    g.iter()
                        .filter_map(|g| {
                            g.compute_capability.map(|cc| ArchTarget {
                                index: g.index,
                                name: g.name.clone(),
                                capability: cc,
                            })
                        })
                        .collect(),
                    "NVML",
                ),
                NvmlView::Unavailable { .. } => (Vec::new(), "NVML"),
            }
        };
        evaluate_arch(&torch, &targets, from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::testing::{archs, cu132_cpu_box, wheel};

    fn target(i: u32, name: &str, cc: (u32, u32)) -> ArchTarget {
        ArchTarget {
            index: i,
            name: name.to_string(),
            capability: cc,
        }
    }

    // ---- arch matching, real cases ----

    #[test]
    fn rtx_5090_with_cu126_wheel_has_no_kernel_image() {
        let t = TorchInfo {
            arch_list: wheel("cu126"),
            torch_version: "2.6.0+cu126".into(),
            ..cu132_cpu_box()
        };
        assert_eq!(arch_support((12, 0), &t.arch_list), ArchSupport::None);
        let o = evaluate_arch(&t, &[target(0, "NVIDIA GeForce RTX 5090", (12, 0))], "NVML");
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("GPU 0 NVIDIA GeForce RTX 5090 (compute 12.0) cannot run this torch"),
            "{}",
            o.summary
        );
        assert!(
            o.summary
                .contains("sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("cu128, cu130, cu132"), "{hint}");
        assert!(hint.contains("whl/cu132"), "{hint}");
    }

    #[test]
    fn v100_with_cu130_wheel_is_dropped() {
        let t = TorchInfo {
            arch_list: wheel("cu130"),
            torch_version: "2.9.0+cu130".into(),
            ..cu132_cpu_box()
        };
        // compute_120 PTX cannot go down to 7.0.
        assert_eq!(arch_support((7, 0), &t.arch_list), ArchSupport::None);
        let o = evaluate_arch(&t, &[target(0, "Tesla V100-SXM2-32GB", (7, 0))], "NVML");
        assert_eq!(o.status, Status::Fail);
        let hint = o.hint.unwrap();
        // cu128's newest torch (2.11, what `--index-url .../cu128` installs)
        // has no sm_70 either: the working command is cu126's.
        assert!(
            hint.contains("compute 7.0: cu118, cu121, cu124, cu126;"),
            "{hint}"
        );
        assert!(
            hint.contains("builds newer than cu126 dropped it"),
            "{hint}"
        );
        assert!(
            hint.contains("`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu126` (torch 2.6 and newer)"),
            "{hint}"
        );
        assert!(!hint.contains("whl/cu128"), "{hint}");
    }

    #[test]
    fn l40s_with_cu121_runs_sm86_code() {
        let t = TorchInfo {
            arch_list: wheel("cu121"),
            ..cu132_cpu_box()
        };
        assert_eq!(
            arch_support((8, 9), &t.arch_list),
            ArchSupport::Native {
                arch: "sm_86".to_string(),
                exact: false
            }
        );
        let o = evaluate_arch(&t, &[target(0, "NVIDIA L40S", (8, 9))], "NVML");
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(o.devices[0].summary.contains("runs sm_86 machine code"));
    }

    #[test]
    fn ptx_only_warns_about_jit() {
        let t = TorchInfo {
            arch_list: archs(&["sm_80", "compute_80"]),
            ..cu132_cpu_box()
        };
        assert_eq!(
            arch_support((9, 0), &t.arch_list),
            ArchSupport::Jit {
                arch: "compute_80".to_string()
            }
        );
        let o = evaluate_arch(&t, &[target(3, "NVIDIA H100 80GB HBM3", (9, 0))], "torch");
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains(
            "GPU 3 NVIDIA H100 80GB HBM3 (compute 9.0) runs only through compute_80 PTX"
        ));
        assert!(o.hint.unwrap().contains("JIT-compiled"));
    }

    #[test]
    fn no_gpu_skips_but_lists_the_archs() {
        let o = evaluate_arch(&cu132_cpu_box(), &[], "NVML");
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.contains("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn cpu_build_skips_arch() {
        let t = TorchInfo {
            cuda_build: None,
            arch_list: vec![],
            ..cu132_cpu_box()
        };
        assert_eq!(
            evaluate_arch(&t, &[target(0, "x", (9, 0))], "NVML").status,
            Status::Skip
        );
    }

    #[test]
    fn kepler_has_no_current_wheel() {
        assert!(build_for((3, 5)).contains("build PyTorch from source"));
        assert!(build_for((3, 7)).contains("cu118"));
    }
}

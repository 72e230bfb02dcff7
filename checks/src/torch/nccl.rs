//! `torch.nccl`: NCCL is available in torch, and which version.

use std::time::Duration;

use super::{torch_info, TorchInfo, DEPENDENT_TIMEOUT};
use crate::domain::compat::replace_torch_command;
use crate::{Check, Context, Outcome, Profile};

/// Judge torch's NCCL. Exposes the version as facts["nccl_version"]
/// ("2.27.7"), the key the nccl checks compare with.
pub fn evaluate_nccl(t: &TorchInfo) -> Outcome {
    if t.cuda_build.is_none() {
        return Outcome::skip(format!(
            "not applicable: torch {} is a CPU-only build, without NCCL (see torch.cuda)",
            t.torch_version
        ));
    }
    match (t.nccl_available, &t.nccl_version) {
        (Some(false), _) => Outcome::fail(
            format!(
                "torch {} was built without NCCL: DDP with backend=\"nccl\" cannot start",
                t.torch_version
            ),
            format!(
                "install an official Linux CUDA wheel of torch, which bundles NCCL ({}); gloo works on GPUs but is far slower",
                replace_torch_command("cu128")
            ),
        ),
        (_, Some(v)) => Outcome::pass(format!("NCCL {v} available in torch {}", t.torch_version))
            .with_fact("nccl_version", v.clone()),
        (None, None) => {
            let why = t
                .query_errors
                .iter()
                .find(|e| e.starts_with("nccl_available:"))
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            Outcome::warn(
                format!(
                    "could not tell whether torch {} has NCCL: torch.distributed.is_nccl_available() did not answer{why}",
                    t.torch_version
                ),
                "run `python -c 'import torch.distributed as d; print(d.is_available(), d.is_nccl_available())'` to see the error; a torch.distributed that fails to import cannot run DDP",
            )
        }
        (Some(true), None) => Outcome::warn(
            format!("torch {} reports NCCL but not its version", t.torch_version),
            "run `python -c 'import torch; print(torch.cuda.nccl.version())'` to see why; the NCCL library torch loads may be damaged",
        ),
    }
}

/// `torch.nccl`: NCCL is available in torch, and which version.
pub struct TorchNccl;

impl Check for TorchNccl {
    fn id(&self) -> &'static str {
        "torch.nccl"
    }
    fn title(&self) -> &'static str {
        "PyTorch NCCL"
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
        "Checks that torch.distributed has the NCCL backend and reports the NCCL version torch uses.\n\n\
Why it matters for DDP: multi-GPU DDP runs on NCCL (init_process_group(\"nccl\")); a torch without it cannot start the job, and the NCCL version torch loads (usually its own, from the nvidia-nccl wheel) is the one that runs the all-reduce — the nccl checks compare it with the library gpucheck finds (fact nccl_version).\n\n\
How to fix: replace torch with an official Linux CUDA build, which bundles NCCL (`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu128`). A CPU-only build is a skip (see torch.cuda)."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match torch_info(ctx) {
            Ok(t) => evaluate_nccl(&t),
            Err(o) => *o,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::testing::cu132_cpu_box;
    use crate::Status;

    #[test]
    fn nccl_verdicts() {
        let o = evaluate_nccl(&cu132_cpu_box());
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.facts["nccl_version"], "2.30.7");
        assert!(o.summary.contains("NCCL 2.30.7"));
        let o = evaluate_nccl(&TorchInfo {
            nccl_available: Some(false),
            nccl_version: None,
            ..cu132_cpu_box()
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.hint.unwrap().contains("bundles NCCL"));
        let o = evaluate_nccl(&TorchInfo {
            nccl_version: None,
            ..cu132_cpu_box()
        });
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("reports NCCL but not its version"));
        // The availability query itself raised: say so, not "reports NCCL".
        let o = evaluate_nccl(&TorchInfo {
            nccl_available: None,
            nccl_version: None,
            query_errors: vec![
                "nccl_available: ImportError: cannot import name 'ProcessGroup'".into(),
            ],
            ..cu132_cpu_box()
        });
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary
                .starts_with("could not tell whether torch 2.15.0+cu132 has NCCL"),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("ImportError"), "{}", o.summary);
        assert!(!o.summary.contains("reports NCCL"), "{}", o.summary);
        assert!(o.hint.unwrap().contains("is_nccl_available()"));
        let o = evaluate_nccl(&TorchInfo {
            cuda_build: None,
            ..cu132_cpu_box()
        });
        assert_eq!(o.status, Status::Skip);
    }
}

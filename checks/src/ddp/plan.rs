//! What the DDP benchmark runs, from the options: device, backend, process
//! count and steps per phase; and how long it may take.

use std::time::Duration;

use super::DEFAULT_TIMEOUT;
use crate::probe::ddp::{Nproc, Plan};
use crate::{DdpBackend, DdpDevice, Options, Outcome};

/// Processes for a CPU benchmark when --nproc is not given.
pub const CPU_DEFAULT_NPROC: u32 = 2;

/// Steps per phase (warm-up, timed, no_sync). GPU steps take tens of
/// milliseconds; CPU steps are slower and the numbers are report-only there.
const CUDA_STEPS: (u32, u32, u32) = (5, 20, 10);
const CPU_STEPS: (u32, u32, u32) = (2, 8, 4);

/// Options that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--ddp-backend nccl cannot run on --ddp-device cpu: NCCL only moves GPU memory")]
    NcclOnCpu,
}

impl PlanError {
    /// gpucheck could not run the benchmark it was asked for: an `error`
    /// naming the flags that work.
    pub fn outcome(&self) -> Outcome {
        let hint = match self {
            PlanError::NcclOnCpu => "benchmark on CPUs with --ddp-backend gloo --ddp-device cpu",
        };
        Outcome::error(self.to_string()).with_hint(hint)
    }
}

/// Decide device, backend and process count. Defaults: NCCL on CUDA, one
/// process per GPU; `--ddp-device cpu` alone means gloo with 2 processes.
pub fn plan(options: &Options) -> Result<Plan, PlanError> {
    let device = options.ddp_device.unwrap_or(DdpDevice::Cuda);
    let backend = match (options.ddp_backend, device) {
        (Some(DdpBackend::Nccl), DdpDevice::Cpu) => return Err(PlanError::NcclOnCpu),
        (Some(backend), _) => backend,
        (None, DdpDevice::Cuda) => DdpBackend::Nccl,
        (None, DdpDevice::Cpu) => DdpBackend::Gloo,
    };
    let nproc = match (options.nproc, device) {
        (Some(n), _) => Nproc::Count(n.max(1)),
        (None, DdpDevice::Cuda) => Nproc::EveryGpu,
        (None, DdpDevice::Cpu) => Nproc::Count(CPU_DEFAULT_NPROC),
    };
    let (warmup_steps, timed_steps, no_sync_steps) = match device {
        DdpDevice::Cuda => CUDA_STEPS,
        DdpDevice::Cpu => CPU_STEPS,
    };
    Ok(Plan {
        device,
        backend,
        nproc,
        model: options.ddp_model,
        warmup_steps,
        timed_steps,
        no_sync_steps,
    })
}

/// The time the benchmark may take: the check's timeout less a margin for
/// gpucheck to kill what is left and report, so the check's own (more
/// precise) verdict wins over the runner's.
pub fn budget(timeout_s: f64) -> Duration {
    let total = if timeout_s > 0.0 {
        timeout_s
    } else {
        DEFAULT_TIMEOUT.as_secs_f64()
    };
    let margin = (total * 0.1).clamp(0.5, 5.0);
    Duration::from_secs_f64((total - margin).max(0.5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DdpModel, Status};

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    // ---- plan -------------------------------------------------------------

    use DdpBackend::{Gloo, Nccl};
    use DdpDevice::Cpu;

    pub(crate) fn opts(
        backend: Option<DdpBackend>,
        device: Option<DdpDevice>,
        nproc: Option<u32>,
    ) -> Options {
        Options {
            ddp_backend: backend,
            ddp_device: device,
            nproc,
            ..Options::default()
        }
    }

    #[test]
    fn default_plan_is_nccl_on_every_gpu() {
        let p = plan(&opts(None, None, None)).unwrap();
        assert_eq!(
            (p.device, p.backend, p.nproc, p.model),
            (
                DdpDevice::Cuda,
                DdpBackend::Nccl,
                Nproc::EveryGpu,
                DdpModel::Medium
            )
        );
        assert_eq!((p.warmup_steps, p.timed_steps, p.no_sync_steps), CUDA_STEPS);
    }

    #[test]
    fn cpu_alone_means_gloo_with_two_processes() {
        let p = plan(&opts(None, Some(Cpu), None)).unwrap();
        assert_eq!(
            (p.device, p.backend, p.nproc),
            (DdpDevice::Cpu, DdpBackend::Gloo, Nproc::Count(2))
        );
        let p = plan(&opts(Some(Gloo), Some(Cpu), Some(3))).unwrap();
        assert_eq!(p.nproc, Nproc::Count(3));
        // gloo alone still runs on the GPUs.
        let p = plan(&opts(Some(Gloo), None, None)).unwrap();
        assert_eq!(
            (p.device, p.backend, p.nproc),
            (DdpDevice::Cuda, DdpBackend::Gloo, Nproc::EveryGpu)
        );
    }

    #[test]
    fn nccl_on_cpu_is_an_error_naming_the_flags_that_work() {
        let err = plan(&opts(Some(Nccl), Some(Cpu), None)).unwrap_err();
        assert_eq!(err, PlanError::NcclOnCpu);
        let o = err.outcome();
        assert_eq!(o.status, Status::Error);
        assert!(
            o.summary.contains("NCCL only moves GPU memory"),
            "{}",
            o.summary
        );
        assert_eq!(
            hint(&o),
            "benchmark on CPUs with --ddp-backend gloo --ddp-device cpu"
        );
    }

    #[test]
    fn budget_leaves_a_margin_under_the_timeout() {
        assert_eq!(budget(180.0), Duration::from_secs(175));
        assert_eq!(budget(25.0), Duration::from_secs_f64(22.5));
        assert_eq!(budget(2.0), Duration::from_secs_f64(1.5));
        assert_eq!(budget(0.0), Duration::from_secs(175));
    }
}

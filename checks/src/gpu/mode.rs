//! gpu.mode: compute mode, persistence mode and MIG of every GPU.

use std::time::Duration;

use super::common::{
    judge_answering, lib, lost_in_count, na_row, nothing_counted, nvml_failure_outcome,
    nvml_timeout_hint, open_failures, row, unreadable, QUERY_TIMEOUT,
};
use crate::domain::text::gpu_count;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{self, ComputeMode, MigMode, ModeFacts, PerGpu, Reading};
use crate::{Check, Context, Outcome, Profile, Status};

/// Judge compute mode, persistence mode and MIG.
pub fn evaluate_mode(gpus: &[PerGpu<ModeFacts>]) -> Outcome {
    let mut findings = open_failures(gpus);
    let mut devices = Vec::new();
    // The distinct values seen, for the summary.
    let mut seen: [Vec<&str>; 3] = Default::default();
    for g in gpus {
        let i = g.gpu.index;
        let Ok(f) = &g.facts else {
            devices.push(na_row(&g.gpu, &findings));
            continue;
        };
        let compute = compute_mode(i, &f.compute_mode, &mut findings);
        let persistence = persistence_mode(i, &f.persistence, &mut findings);
        let mig = mig_mode(i, &f.mig, &mut findings);
        let ok = format!("compute {compute}, persistence {persistence}, MIG {mig}");
        devices.push(findings.device_result(row(&g.gpu, Vec::new()), ok));
        for (values, value) in seen.iter_mut().zip([compute, persistence, mig]) {
            if !values.contains(&value) {
                values.push(value);
            }
        }
    }
    let all_na = seen.iter().all(|v| v.iter().all(|x| *x == "n/a"));
    if all_na && findings.worst() < Status::Warn {
        let mut o =
            Outcome::skip("compute, persistence and MIG modes not reported by these GPUs (n/a)");
        o.devices = devices;
        return o;
    }
    let pass = format!(
        "{}: compute {}, persistence {}, MIG {}",
        gpu_count(gpus.len()),
        seen[0].join("/"),
        seen[1].join("/"),
        seen[2].join("/")
    );
    findings.conclude(pass, devices)
}

/// Prohibited fails, Exclusive Thread warns, Exclusive Process is noted.
fn compute_mode(i: u32, mode: &Reading<ComputeMode>, findings: &mut Findings) -> &'static str {
    match mode {
        Ok(ComputeMode::Prohibited) => {
            findings.push(
                Finding::new(Some(i), Status::Fail, "compute mode Prohibited")
                    .hint("no CUDA process may use {gpus}: `sudo nvidia-smi -i {ids} -c DEFAULT`"),
            );
            "Prohibited"
        }
        Ok(ComputeMode::ExclusiveProcess) => {
            findings.push(Finding::new(
                Some(i),
                Status::Pass,
                "Exclusive Process: one process per GPU, fine for one DDP rank per GPU",
            ));
            "Exclusive Process"
        }
        Ok(ComputeMode::ExclusiveThread) => {
            // CUDA deprecated it in 8.0: only the thread that created the
            // context may use the GPU, and PyTorch's autograd runs the
            // backward pass on its own per-device threads.
            findings.push(
                Finding::new(
                    Some(i),
                    Status::Warn,
                    "compute mode Exclusive Thread (deprecated)",
                )
                .hint(
                    "in Exclusive Thread mode only one thread may use {gpus}, but PyTorch \
                     runs the backward pass on separate threads: \
                     `sudo nvidia-smi -i {ids} -c EXCLUSIVE_PROCESS` (one process per GPU) \
                     or `-c DEFAULT`",
                ),
            );
            "Exclusive Thread"
        }
        Ok(ComputeMode::Default) => "Default",
        Err(e) => {
            findings.items.extend(unreadable(i, "the compute mode", e));
            "n/a"
        }
    }
}

/// Persistence mode off warns.
fn persistence_mode(i: u32, persistence: &Reading<bool>, findings: &mut Findings) -> &'static str {
    match persistence {
        Ok(true) => "on",
        Ok(false) => {
            findings.push(
                Finding::new(Some(i), Status::Warn, "persistence mode off").hint(
                    "without persistence mode every CUDA start re-initialises {gpus} \
                     (seconds of first-call latency, a slower torchrun start): enable the \
                     daemon with `sudo systemctl enable --now nvidia-persistenced`, or \
                     `sudo nvidia-smi -i {ids} -pm 1`",
                ),
            );
            "off"
        }
        Err(e) => {
            findings
                .items
                .extend(unreadable(i, "the persistence mode", e));
            "n/a"
        }
    }
}

/// MIG on, or a MIG change waiting for a reset, warns.
fn mig_mode(i: u32, mig: &Reading<MigMode>, findings: &mut Findings) -> &'static str {
    match mig {
        Ok(m) => {
            if m.current {
                findings.push(Finding::new(Some(i), Status::Warn, "MIG enabled").hint(
                    "NCCL and DDP cannot span MIG instances: each instance is a separate \
                     device that sees no peer, so one job cannot train across them (one \
                     process per instance only); to train on whole GPUs disable MIG with \
                     `sudo nvidia-smi -i {ids} -mig 0`, then reset the GPU \
                     (`sudo nvidia-smi -r -i {ids}`)",
                ));
            }
            if m.current != m.pending {
                findings.push(
                    Finding::new(
                        Some(i),
                        Status::Warn,
                        format!(
                            "MIG {} after the next reset",
                            if m.pending { "on" } else { "off" }
                        ),
                    )
                    .hint(
                        "a MIG mode change waits for a reset of {gpus}: \
                         `sudo nvidia-smi -r -i {ids}` or reboot",
                    ),
                );
            }
            if m.current {
                "on"
            } else {
                "off"
            }
        }
        Err(e) => {
            findings.items.extend(unreadable(i, "the MIG mode", e));
            "n/a"
        }
    }
}

pub struct Mode;

impl Check for Mode {
    fn id(&self) -> &'static str {
        "gpu.mode"
    }
    fn title(&self) -> &'static str {
        "Compute, persistence and MIG modes"
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
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.driver"]
    }
    fn timeout(&self) -> Duration {
        QUERY_TIMEOUT
    }
    fn timeout_hint(&self) -> String {
        nvml_timeout_hint(self.id())
    }
    fn explain(&self) -> &'static str {
        "Checks each GPU's compute mode, persistence mode and MIG mode.

Compute mode Prohibited fails: no CUDA process may use the GPU (`sudo nvidia-smi -i N -c DEFAULT`). \
Exclusive Process is fine for DDP, which runs one process per GPU, but nothing else can share the \
GPU; it is noted. The deprecated Exclusive Thread mode warns: PyTorch uses a GPU from several threads.

Persistence mode off warns: the driver tears the GPU down when the last client exits, so every CUDA \
start pays seconds of initialisation and torchrun's ranks start slowly. Enable nvidia-persistenced \
(`sudo systemctl enable --now nvidia-persistenced`) or `sudo nvidia-smi -pm 1`.

MIG enabled warns: NCCL and DDP cannot span MIG instances (each is a separate device that sees no \
peer), so a multi-GPU job cannot use them. Disable it with `sudo nvidia-smi -i N -mig 0` and reset \
the GPU; a pending MIG change also needs that reset."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        if let Some(skip) = nothing_counted(ctx) {
            return skip;
        }
        match nvml::modes(lib(ctx)) {
            Ok(gpus) => judge_answering(gpus, &lost_in_count(ctx), evaluate_mode),
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::testing::*;
    use crate::probe::nvml::{ComputeMode, MigMode, ModeFacts, Unavailable};
    use crate::Status;

    fn mode(compute: ComputeMode, persistence: bool, mig: (bool, bool)) -> ModeFacts {
        ModeFacts {
            compute_mode: Ok(compute),
            persistence: Ok(persistence),
            mig: Ok(MigMode {
                current: mig.0,
                pending: mig.1,
            }),
        }
    }

    #[test]
    fn default_modes_pass() {
        let o = evaluate_mode(&[per(0, mode(ComputeMode::Default, true, (false, false)))]);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "1 GPU: compute Default, persistence on, MIG off");
    }

    #[test]
    fn prohibited_compute_mode_fails() {
        let o = evaluate_mode(&[per(0, mode(ComputeMode::Prohibited, true, (false, false)))]);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "GPU 0: compute mode Prohibited");
        assert_eq!(
            hint(&o),
            "no CUDA process may use GPU 0: `sudo nvidia-smi -i 0 -c DEFAULT`"
        );
    }

    #[test]
    fn exclusive_process_passes_with_a_note() {
        let o = evaluate_mode(&[
            per(0, mode(ComputeMode::ExclusiveProcess, true, (false, false))),
            per(1, mode(ComputeMode::Default, true, (false, false))),
        ]);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "2 GPUs: compute Exclusive Process/Default, persistence on, MIG off"
        );
        assert!(o.devices[0]
            .summary
            .contains("one process per GPU, fine for one DDP rank"));
    }

    #[test]
    fn exclusive_thread_warns_and_says_how_to_switch() {
        let o = evaluate_mode(&[per(
            3,
            mode(ComputeMode::ExclusiveThread, true, (false, false)),
        )]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "GPU 3: compute mode Exclusive Thread (deprecated)"
        );
        assert!(
            hint(&o).contains("`sudo nvidia-smi -i 3 -c EXCLUSIVE_PROCESS`"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn persistence_off_warns() {
        let o = evaluate_mode(&[per(2, mode(ComputeMode::Default, false, (false, false)))]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 2: persistence mode off");
        assert!(hint(&o).contains("nvidia-persistenced"));
        assert!(hint(&o).contains("sudo nvidia-smi -i 2 -pm 1"));
    }

    #[test]
    fn mig_enabled_or_pending_warns() {
        let o = evaluate_mode(&[per(0, mode(ComputeMode::Default, true, (true, true)))]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 0: MIG enabled");
        assert!(hint(&o).starts_with("NCCL and DDP cannot span MIG instances"));
        assert!(hint(&o).contains("sudo nvidia-smi -i 0 -mig 0"));
        let o = evaluate_mode(&[per(0, mode(ComputeMode::Default, true, (false, true)))]);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "GPU 0: MIG on after the next reset");
        assert!(hint(&o).contains("waits for a reset of GPU 0"));
    }

    #[test]
    fn modes_not_reported_skip() {
        let o = evaluate_mode(&[per(
            0,
            ModeFacts {
                compute_mode: Err(Unavailable::NotSupported),
                persistence: Err(Unavailable::NotSupported),
                mig: Err(Unavailable::NotSupported),
            },
        )]);
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("(n/a)"));
    }
}

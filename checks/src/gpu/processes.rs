//! gpu.processes: who else holds memory on the job's GPUs. Display servers
//! are noted, jobs on GPUs CUDA_VISIBLE_DEVICES leaves out are noted, any
//! other process warns with its pid, name and memory.

use std::time::Duration;

use super::common::{
    ids_phrase, judge_answering, lib, lost_in_count, na_row, nothing_counted, nvml_failure_outcome,
    nvml_timeout_hint, open_failures, row, unreadable, QUERY_TIMEOUT,
};
use super::job::{job_from_env, JobGpus};
use crate::domain::text::gpus_phrase;
use crate::findings::{Finding, Findings};
use crate::probe::nvml::{self, GpuProcess, GpuRef, PerGpu, ProcessFacts};
use crate::{Check, Context, DeviceResult, Metric, Outcome, Profile, Status};

fn process_text(p: &GpuProcess) -> String {
    let name = p
        .name
        .clone()
        .unwrap_or_else(|| "(not visible here: another container or PID namespace)".to_string());
    let memory = p
        .used_mib
        .map_or("memory n/a".to_string(), |m| format!("{m} MiB"));
    format!("pid {} {name} ({memory})", p.pid)
}

/// Judge the processes already holding GPU memory; `own_pid` is gpucheck.
/// Only the GPUs of the job (`job`, else every GPU) are judged: a job on a
/// GPU CUDA_VISIBLE_DEVICES leaves out is noted.
pub fn evaluate_processes(
    gpus: &[PerGpu<ProcessFacts>],
    own_pid: u32,
    job: Option<&JobGpus>,
) -> Outcome {
    let in_job = |i: u32| job.is_none_or(|j| j.gpus.contains(&i));
    let mut occupancy = Occupancy {
        findings: open_failures(gpus),
        ..Occupancy::default()
    };
    for g in gpus {
        match &g.facts {
            Ok(ProcessFacts {
                processes: Ok(list),
            }) => occupancy.classify(&g.gpu, list, own_pid, in_job(g.gpu.index)),
            Ok(ProcessFacts { processes: Err(e) }) => {
                let f = &mut occupancy.findings;
                f.items
                    .extend(unreadable(g.gpu.index, "the process list", e));
                occupancy.devices.push(na_row(&g.gpu, f));
            }
            Err(_) => {
                let row = na_row(&g.gpu, &occupancy.findings);
                occupancy.devices.push(row);
            }
        }
    }
    if occupancy.readable == 0 && occupancy.findings.worst() < Status::Warn {
        let mut o = Outcome::skip("process lists not reported by these GPUs (n/a)");
        o.devices = occupancy.devices;
        return o;
    }
    let process_count = occupancy.pids.len();
    let outcome = if occupancy.busy.is_empty() {
        occupancy.nothing_in_the_way(job)
    } else {
        occupancy.shared()
    };
    outcome.with_metric("other_processes", process_count as f64, "count")
}

/// Who holds each GPU, GPU by GPU: what the verdict is drawn from.
#[derive(Default)]
struct Occupancy {
    findings: Findings,
    devices: Vec<DeviceResult>,
    /// The job's GPUs that others' jobs hold, with those jobs.
    busy: Vec<(u32, Vec<String>)>,
    /// GPUs no compute job holds.
    free: Vec<u32>,
    /// The others' jobs' pids, and whether each is visible from here.
    pids: Vec<(u32, bool)>,
    /// GPUs with a display server or desktop.
    display: Vec<u32>,
    /// GPUs outside the job that others' jobs hold.
    outside: Vec<u32>,
    /// GPUs whose process list NVML gave.
    readable: usize,
    /// Of those, the job's.
    judged: usize,
}

impl Occupancy {
    /// Classify one GPU by the processes on it other than gpucheck.
    fn classify(&mut self, gpu: &GpuRef, list: &[GpuProcess], own_pid: u32, in_job: bool) {
        let i = gpu.index;
        self.readable += 1;
        if in_job {
            self.judged += 1;
        }
        let others: Vec<&GpuProcess> = list.iter().filter(|p| p.pid != own_pid).collect();
        // A process with only a graphics context is a display server or
        // desktop (Xorg, gnome-shell) on a workstation GPU: it is noted,
        // never called someone's job, and never offered to `kill`.
        let (display, jobs): (Vec<&GpuProcess>, Vec<&GpuProcess>) =
            others.iter().partition(|p| p.graphics);
        let texts =
            |ps: &[&GpuProcess]| -> Vec<String> { ps.iter().map(|p| process_text(p)).collect() };
        if !display.is_empty() {
            self.findings.push(Finding::new(
                Some(i),
                Status::Pass,
                format!("graphics only: {}", texts(&display).join(", ")),
            ));
            self.display.push(i);
        }
        if jobs.is_empty() {
            self.free.push(i);
        } else if !in_job {
            self.findings.push(Finding::new(
                Some(i),
                Status::Pass,
                format!(
                    "not in CUDA_VISIBLE_DEVICES, not judged: {}",
                    texts(&jobs).join(", ")
                ),
            ));
            self.outside.push(i);
        } else {
            for p in &jobs {
                if !self.pids.iter().any(|(pid, _)| *pid == p.pid) {
                    self.pids.push((p.pid, p.name.is_some()));
                }
            }
            self.findings
                .push(Finding::new(Some(i), Status::Warn, texts(&jobs).join(", ")));
            self.busy.push((i, texts(&jobs)));
        }
        let used: u64 = others.iter().filter_map(|p| p.used_mib).sum();
        let ok = if !jobs.is_empty() {
            "other processes"
        } else if !display.is_empty() {
            "no other compute processes"
        } else {
            "no other processes"
        };
        let metrics = vec![
            Metric::new("other_processes", others.len() as f64, "count"),
            Metric::new("other_processes_memory", used as f64, "MiB"),
        ];
        let device = self.findings.device_result(row(gpu, metrics), ok.into());
        self.devices.push(device);
    }

    /// No one else's job on the job's GPUs: pass, noting displays and jobs
    /// on the GPUs left out.
    fn nothing_in_the_way(self, job: Option<&JobGpus>) -> Outcome {
        let selected = job.map_or(String::new(), |j| {
            format!(" in CUDA_VISIBLE_DEVICES={}", j.cuda_visible_devices)
        });
        let kind = if self.display.is_empty() {
            ""
        } else {
            "compute "
        };
        let mut pass = format!(
            "no other {kind}processes on {}{selected}",
            match self.judged {
                1 => "the GPU".to_string(),
                n => format!("the {n} GPUs"),
            }
        );
        let mut notes = Vec::new();
        if !self.display.is_empty() {
            notes.push(format!(
                "display/graphics only on {}",
                gpus_phrase(&self.display)
            ));
        }
        if !self.outside.is_empty() {
            notes.push(format!(
                "other jobs on {}, not selected",
                gpus_phrase(&self.outside)
            ));
        }
        if !notes.is_empty() {
            pass.push_str(&format!(" ({})", notes.join("; ")));
        }
        self.findings.conclude(pass, self.devices)
    }

    /// Someone else's job on the job's GPUs: warn naming them, with how to
    /// stop them or which GPUs are free.
    fn shared(self) -> Outcome {
        let busy = &self.busy;
        let ids: Vec<u32> = busy.iter().map(|(i, _)| *i).collect();
        let summary = if busy.len() == 1 {
            format!(
                "someone else's job is on GPU {}: {}",
                busy[0].0,
                busy[0].1.join(", ")
            )
        } else {
            format!(
                "other processes hold memory on {}: {}",
                gpus_phrase(&ids),
                busy.iter()
                    .map(|(i, t)| format!("GPU {i}: {}", t.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        };
        let listed = |visible: bool, sep: &str| {
            self.pids
                .iter()
                .filter(|(_, v)| *v == visible)
                .map(|(pid, _)| pid.to_string())
                .collect::<Vec<_>>()
                .join(sep)
        };
        let (here, elsewhere) = (listed(true, " "), listed(false, ", "));
        let mut hint = "DDP on a shared GPU runs out of memory or slows down: see them with \
                        `nvidia-smi`, wait for that job or stop it"
            .to_string();
        if !here.is_empty() {
            hint.push_str(&format!(" (`kill {here}`)"));
        }
        if !elsewhere.is_empty() {
            // A pid this PID namespace does not show may be another
            // process's number here: never offer to kill it from here.
            hint.push_str(&format!(
                "; pid {elsewhere} runs outside this container or PID namespace: stop it from \
                 the host"
            ));
        }
        if !self.free.is_empty() {
            hint.push_str(&format!(
                ", or train on the free GPUs: `CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={}`",
                ids_phrase(&self.free)
            ));
        }
        let mut o = self.findings.conclude(String::new(), self.devices);
        if o.status == Status::Warn {
            o.summary = summary;
            o.hint = Some(hint);
        }
        o
    }
}

pub struct Processes;

impl Check for Processes {
    fn id(&self) -> &'static str {
        "gpu.processes"
    }
    fn title(&self) -> &'static str {
        "Other processes on the GPUs"
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
        "Lists the processes that already hold memory on each GPU, with pid, name and MiB.

A DDP job assumes the GPUs are its own: someone else's job on GPU 3 takes memory (the job dies with \
out-of-memory on that rank) and compute (every step waits for the slowest rank).

Any other process warns, naming it (\"someone else's job is on GPU 3\"). See them with `nvidia-smi`, \
wait for the job or stop it, or run on the free GPUs with CUDA_DEVICE_ORDER=PCI_BUS_ID \
CUDA_VISIBLE_DEVICES=... Inside a container, processes of other containers show by pid only.

A process with only a graphics context (a display server such as Xorg or gnome-shell on a \
workstation GPU) is noted, not warned: it is not a training job and must not be killed. Only the \
GPUs CUDA_VISIBLE_DEVICES selects are judged (every GPU when it is unset); jobs on the others are \
noted."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        if let Some(skip) = nothing_counted(ctx) {
            return skip;
        }
        match nvml::processes(lib(ctx)) {
            Ok(gpus) => {
                let refs: Vec<GpuRef> = gpus.iter().map(|g| g.gpu.clone()).collect();
                let job = job_from_env(&refs);
                judge_answering(gpus, &lost_in_count(ctx), |gpus| {
                    evaluate_processes(gpus, std::process::id(), job.as_ref())
                })
            }
            Err(f) => nvml_failure_outcome(&f, lib(ctx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::common::testing::*;
    use crate::gpu::job_gpus;
    use crate::probe::nvml::{GpuProcess, GpuRef, ProcessFacts, Unavailable};
    use crate::Status;

    fn procs(list: Vec<GpuProcess>) -> ProcessFacts {
        ProcessFacts {
            processes: Ok(list),
        }
    }

    fn process(pid: u32, name: Option<&str>, mib: Option<u64>) -> GpuProcess {
        GpuProcess {
            pid,
            name: name.map(str::to_string),
            used_mib: mib,
            graphics: false,
        }
    }

    #[test]
    fn no_other_processes_pass() {
        let o = evaluate_processes(&[per(0, procs(vec![])), per(1, procs(vec![]))], 1, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "no other processes on the 2 GPUs");
    }

    #[test]
    fn someone_elses_job_warns_with_pid_name_and_memory() {
        let o = evaluate_processes(
            &[
                per(0, procs(vec![])),
                per(
                    1,
                    procs(vec![process(4242, Some("python train.py"), Some(12000))]),
                ),
                per(2, procs(vec![])),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "someone else's job is on GPU 1: pid 4242 python train.py (12000 MiB)"
        );
        assert!(hint(&o).contains("kill 4242"));
        assert!(hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,2"));
        assert_eq!(o.metric("other_processes"), Some(1.0));
    }

    #[test]
    fn processes_on_every_gpu_warn_without_a_free_gpu_suggestion() {
        let o = evaluate_processes(
            &[
                per(0, procs(vec![process(7, None, None)])),
                per(1, procs(vec![process(7, None, None)])),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.starts_with(
            "other processes hold memory on GPUs 0, 1: GPU 0: pid 7 (not visible here"
        ));
        assert!(o.summary.contains("memory n/a"));
        assert!(!hint(&o).contains("CUDA_VISIBLE_DEVICES"));
        // pid 7 is not visible here: stopped from the host, never `kill`ed
        // from here, where 7 may be another process.
        assert!(!hint(&o).contains("kill"), "{}", hint(&o));
        assert!(
            hint(&o).contains(
                "pid 7 runs outside this container or PID namespace: stop it from the host"
            ),
            "{}",
            hint(&o)
        );
    }

    fn display(pid: u32, name: &str, mib: u64) -> GpuProcess {
        GpuProcess {
            graphics: true,
            ..process(pid, Some(name), Some(mib))
        }
    }

    #[test]
    fn a_display_server_is_noted_not_warned() {
        let o = evaluate_processes(
            &[
                per(0, procs(vec![display(1523, "/usr/lib/xorg/Xorg", 48)])),
                per(1, procs(vec![])),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "no other compute processes on the 2 GPUs (display/graphics only on GPU 0)"
        );
        assert_eq!(o.hint, None);
        assert_eq!(
            o.devices[0].summary,
            "no other compute processes (graphics only: pid 1523 /usr/lib/xorg/Xorg (48 MiB))"
        );
    }

    #[test]
    fn a_job_next_to_a_display_server_warns_and_spares_the_display() {
        let o = evaluate_processes(
            &[
                per(
                    0,
                    procs(vec![
                        display(1523, "Xorg", 48),
                        process(4242, Some("python train.py"), Some(12000)),
                    ]),
                ),
                per(1, procs(vec![display(1600, "gnome-shell", 20)])),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "someone else's job is on GPU 0: pid 4242 python train.py (12000 MiB)"
        );
        let h = hint(&o);
        assert!(h.contains("(`kill 4242`)"), "{h}");
        assert!(!h.contains("1523") && !h.contains("1600"), "{h}");
        // GPU 1 has only the desktop on it: free to train on.
        assert!(h.contains("CUDA_VISIBLE_DEVICES=1"), "{h}");
    }

    #[test]
    fn a_job_on_a_gpu_cuda_visible_devices_leaves_out_is_noted_not_warned() {
        let gpus = [
            per(0, procs(vec![])),
            per(
                1,
                procs(vec![process(4242, Some("python train.py"), Some(12000))]),
            ),
            per(2, procs(vec![])),
        ];
        let refs: Vec<GpuRef> = gpus.iter().map(|g| g.gpu.clone()).collect();
        let job = job_gpus(Some("0,2"), &refs);
        let o = evaluate_processes(&gpus, 1, job.as_ref());
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "no other processes on the 2 GPUs in CUDA_VISIBLE_DEVICES=0,2 (other jobs on GPU 1, \
             not selected)"
        );
        assert_eq!(o.hint, None);
        assert_eq!(
            o.devices[1].summary,
            "other processes (not in CUDA_VISIBLE_DEVICES, not judged: pid 4242 python train.py \
             (12000 MiB))"
        );
        // Selecting the busy GPU warns as before.
        let job = job_gpus(Some("1,2"), &refs);
        let o = evaluate_processes(&gpus, 1, job.as_ref());
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.starts_with("someone else's job is on GPU 1"));
    }

    #[test]
    fn gpuchecks_own_process_does_not_count() {
        let o = evaluate_processes(
            &[per(
                0,
                procs(vec![process(99, Some("gpucheck"), Some(300))]),
            )],
            99,
            None,
        );
        assert_eq!(o.status, Status::Pass);
    }

    #[test]
    fn process_lists_not_reported_skip() {
        let o = evaluate_processes(
            &[per(
                0,
                ProcessFacts {
                    processes: Err(Unavailable::NotSupported),
                },
            )],
            1,
            None,
        );
        assert_eq!(o.status, Status::Skip);
    }
}

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

/// Device memory in use beyond what the listed processes hold that says a
/// job NVML cannot list is on the GPU, however idle: more than a CUDA
/// context alone (some 300-600 MiB on an A100 or H100) and far above what
/// an idle GPU shows used (a few MiB: nvmlDeviceGetMemoryInfo_v2's `used`
/// leaves the driver's reservation out).
pub const UNLISTED_MEMORY_MIB: u64 = 1024;

/// Unlisted memory that, with the GPU busy, is a running job: about one
/// CUDA context's worth (a kernel cannot run without one). Old drivers
/// whose process lists miss other PID namespaces show this: 558-814 MiB at
/// 78 % with no process listed (nvidia-docker issue 759, two Tesla M40s).
pub const UNLISTED_CONTEXT_MIB: u64 = 256;

/// Utilisation that says someone's kernels are running. NVML averages it
/// over its last sample period (between 1/6 s and 1 s, nvml.h), so a job
/// that just ended still shows it: without memory in use it is a note.
pub const BUSY_UTILIZATION_PCT: u32 = 10;

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

/// What a GPU's own numbers show beyond the processes NVML lists.
#[derive(Debug, PartialEq)]
pub enum UnlistedUse {
    /// Nothing, or the GPU does not report them.
    Nothing,
    /// Busy without memory held: said on the GPU's row, not warned.
    Note(String),
    /// Memory (and utilisation) that a job NVML cannot list holds.
    Job(String),
}

/// Judge a GPU's memory in use and utilisation against what the listed
/// processes (`listed`, gpucheck's own included) account for.
pub fn unlisted_use(facts: &ProcessFacts, listed: &[GpuProcess]) -> UnlistedUse {
    let util = facts.utilization_pct.as_ref().ok().copied();
    let busy = util.is_some_and(|u| u >= BUSY_UTILIZATION_PCT);
    // Memory a listed process holds without saying how much cannot be
    // told apart from anyone else's: only the utilisation is read then.
    let listed_mib: Option<u64> = listed.iter().map(|p| p.used_mib).sum();
    let unlisted = match (&facts.memory_used_mib, listed_mib) {
        (Ok(used), Some(listed)) => Some(used.saturating_sub(listed)),
        _ => None,
    };
    match (unlisted, util) {
        (Some(mib), _) if mib >= UNLISTED_MEMORY_MIB || (busy && mib >= UNLISTED_CONTEXT_MIB) => {
            let busy_text = util.map_or(String::new(), |u| format!(", {u}% busy,"));
            UnlistedUse::Job(format!(
                "{mib} MiB in use{busy_text} by no process NVML lists (a job in another \
                 container or PID namespace)"
            ))
        }
        // Busy with a process listed: that process is busy.
        (_, Some(u)) if busy && listed.is_empty() => UnlistedUse::Note(match unlisted {
            Some(mib) => format!(
                "{u}% busy in NVML's last sample with {mib} MiB in use: a job that just ended"
            ),
            None => format!("{u}% busy in NVML's last sample with no process listed"),
        }),
        _ => UnlistedUse::Nothing,
    }
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
            Ok(
                facts @ ProcessFacts {
                    processes: Ok(list),
                    ..
                },
            ) => occupancy.classify(&g.gpu, facts, list, own_pid, in_job(g.gpu.index)),
            Ok(ProcessFacts {
                processes: Err(e), ..
            }) => {
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
    /// The job's GPUs whose memory a process NVML cannot list holds.
    unlisted: Vec<u32>,
    /// GPUs whose process list NVML gave.
    readable: usize,
    /// Of those, the job's.
    judged: usize,
}

impl Occupancy {
    /// Classify one GPU by the processes on it other than gpucheck.
    fn classify(
        &mut self,
        gpu: &GpuRef,
        facts: &ProcessFacts,
        list: &[GpuProcess],
        own_pid: u32,
        in_job: bool,
    ) {
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
        for p in &jobs {
            if in_job && !self.pids.iter().any(|(pid, _)| *pid == p.pid) {
                self.pids.push((p.pid, p.name.is_some()));
            }
        }
        let mut job_texts = texts(&jobs);
        match unlisted_use(facts, list) {
            UnlistedUse::Job(text) => {
                job_texts.push(text);
                if in_job {
                    self.unlisted.push(i);
                }
            }
            UnlistedUse::Note(text) => {
                self.findings
                    .push(Finding::new(Some(i), Status::Pass, text))
            }
            UnlistedUse::Nothing => {}
        }
        self.record_jobs(i, job_texts.clone(), in_job);
        let used: u64 = others.iter().filter_map(|p| p.used_mib).sum();
        let ok = if !job_texts.is_empty() {
            "other processes"
        } else if !display.is_empty() {
            "no other compute processes"
        } else {
            "no other processes"
        };
        let mut metrics = vec![
            Metric::new("other_processes", others.len() as f64, "count"),
            Metric::new("other_processes_memory", used as f64, "MiB"),
        ];
        if let Ok(used) = facts.memory_used_mib {
            metrics.push(Metric::new("memory_used", used as f64, "MiB"));
        }
        if let Ok(util) = facts.utilization_pct {
            metrics.push(Metric::new("utilization", util as f64, "%"));
        }
        let device = self.findings.device_result(row(gpu, metrics), ok.into());
        self.devices.push(device);
    }

    /// A GPU's jobs (listed, or seen only in its numbers): none is a free
    /// GPU, on a GPU outside the job a note, on the job's GPU a warning.
    fn record_jobs(&mut self, i: u32, jobs: Vec<String>, in_job: bool) {
        if jobs.is_empty() {
            self.free.push(i);
        } else if !in_job {
            self.findings.push(Finding::new(
                Some(i),
                Status::Pass,
                format!(
                    "not in CUDA_VISIBLE_DEVICES, not judged: {}",
                    jobs.join(", ")
                ),
            ));
            self.outside.push(i);
        } else {
            self.findings
                .push(Finding::new(Some(i), Status::Warn, jobs.join(", ")));
            self.busy.push((i, jobs));
        }
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
        if !self.unlisted.is_empty() {
            // NVML lists only the processes of this PID namespace (and,
            // on older drivers, none inside a container).
            hint.push_str(&format!(
                "; no process NVML lists holds the memory in use on {}: run `nvidia-smi` on the \
                 host (or in a container started with --pid=host) to name it",
                gpus_phrase(&self.unlisted)
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
CUDA_VISIBLE_DEVICES=... Inside a container, processes of other containers show by pid only, or not at all: a GPU \
whose memory is in use beyond what the listed processes hold (1 GiB or more, or 256 MiB or more while \
it is 10 % busy or more) warns the same way, with the MiB and utilisation NVML reports; a GPU busy \
with no memory in use (a job that just ended) is noted.

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

    /// A GPU whose memory in use is what its listed processes hold, idle.
    fn procs(list: Vec<GpuProcess>) -> ProcessFacts {
        let used = list.iter().filter_map(|p| p.used_mib).sum();
        ProcessFacts {
            processes: Ok(list),
            memory_used_mib: Ok(used),
            utilization_pct: Ok(0),
        }
    }

    /// A GPU showing `used_mib` in use at `util` % with `list` listed.
    fn numbers(list: Vec<GpuProcess>, used_mib: u64, util: u32) -> ProcessFacts {
        ProcessFacts {
            memory_used_mib: Ok(used_mib),
            utilization_pct: Ok(util),
            ..procs(list)
        }
    }

    #[test]
    fn a_busy_gpu_whose_job_nvml_cannot_list_warns_with_its_numbers() {
        // nvidia-docker issue 759: two Tesla M40s at 78 %, 814 and 558 MiB
        // used, "Processes:" empty inside the container.
        let o = evaluate_processes(
            &[
                per(0, numbers(vec![], 814, 78)),
                per(1, numbers(vec![], 558, 78)),
                per(2, numbers(vec![], 0, 0)),
            ],
            1,
            None,
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "other processes hold memory on GPUs 0, 1: GPU 0: 814 MiB in use, 78% busy, by no \
             process NVML lists (a job in another container or PID namespace); GPU 1: 558 MiB in \
             use, 78% busy, by no process NVML lists (a job in another container or PID \
             namespace)"
        );
        let h = hint(&o);
        assert!(
            h.contains("no process NVML lists holds the memory in use on GPUs 0, 1"),
            "{h}"
        );
        assert!(!h.contains("kill"), "{h}");
        assert!(h.contains("CUDA_VISIBLE_DEVICES=2"), "{h}");
        let metric = |name: &str| {
            let m = o.devices[0].metrics.iter().find(|m| m.name == name);
            m.map(|m| m.value)
        };
        assert_eq!(metric("utilization"), Some(78.0));
        assert_eq!(metric("memory_used"), Some(814.0));
    }

    #[test]
    fn memory_held_by_an_unlisted_job_warns_even_when_idle() {
        // docker/for-linux issue 1531: an RTX 4090 at 0 % with 7325 MiB used
        // and no process listed.
        let o = evaluate_processes(&[per(0, numbers(vec![], 7325, 0))], 1, None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "someone else's job is on GPU 0: 7325 MiB in use, 0% busy, by no process NVML lists \
             (a job in another container or PID namespace)"
        );
    }

    #[test]
    fn the_thresholds_of_unlisted_use() {
        let at = |used, util| unlisted_use(&numbers(vec![], used, util), &[]);
        assert_eq!(at(UNLISTED_MEMORY_MIB - 1, 0), UnlistedUse::Nothing);
        assert!(matches!(at(UNLISTED_MEMORY_MIB, 0), UnlistedUse::Job(_)));
        let busy = BUSY_UTILIZATION_PCT;
        assert!(matches!(
            at(UNLISTED_CONTEXT_MIB, busy),
            UnlistedUse::Job(_)
        ));
        assert!(matches!(
            at(UNLISTED_CONTEXT_MIB, busy - 1),
            UnlistedUse::Nothing
        ));
        // Busy with no memory held: a job that just ended, a note.
        assert_eq!(
            at(UNLISTED_CONTEXT_MIB - 1, 100),
            UnlistedUse::Note(
                "100% busy in NVML's last sample with 255 MiB in use: a job that just ended".into()
            )
        );
        // Memory and utilisation of the listed processes are theirs.
        let listed = vec![process(4242, Some("python"), Some(12000))];
        let facts = numbers(listed.clone(), 12100, 100);
        assert_eq!(unlisted_use(&facts, &listed), UnlistedUse::Nothing);
        let facts = numbers(listed.clone(), 12000 + UNLISTED_MEMORY_MIB, 100);
        assert!(matches!(unlisted_use(&facts, &listed), UnlistedUse::Job(_)));
        // A listed process that does not say its memory: no unlisted sum.
        let unmeasured = vec![process(7, None, None)];
        assert_eq!(
            unlisted_use(&numbers(unmeasured.clone(), 40000, 0), &unmeasured),
            UnlistedUse::Nothing
        );
        // Not reported (an older capture, MIG): judged on the list alone.
        let mut facts = procs(vec![]);
        facts.memory_used_mib = Err(Unavailable::NotSupported);
        facts.utilization_pct = Err(Unavailable::NotSupported);
        assert_eq!(unlisted_use(&facts, &[]), UnlistedUse::Nothing);
    }

    #[test]
    fn a_busy_gpu_with_no_memory_in_use_passes_with_a_note() {
        let o = evaluate_processes(&[per(0, numbers(vec![], 0, 100))], 1, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "no other processes on the GPU");
        assert!(o.devices[0].summary.contains("a job that just ended"));
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
                    ..procs(vec![])
                },
            )],
            1,
            None,
        );
        assert_eq!(o.status, Status::Skip);
    }
}

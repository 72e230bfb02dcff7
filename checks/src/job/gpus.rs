//! job.gpus: on a job watched live, which GPU each rank holds (NVML's
//! process lists), whether the placement wastes GPUs, and the Xid events
//! logged on them since the job started, joined to the ranks they hit.

use std::time::Duration;

use super::{ranks_phrase, Job};
use crate::domain::action::Action;
use crate::domain::job::rank_list;
use crate::domain::placement::{self, Fault, GpuLoad, Verdict};
use crate::domain::qualify;
use crate::domain::xid::{self, PciSlot};
use crate::probe::nvml;
use crate::{Check, Context, DataTable, Outcome, Profile};

pub struct Gpus;

impl Check for Gpus {
    fn id(&self) -> &'static str {
        "job.gpus"
    }
    fn title(&self) -> &'static str {
        "The job's GPUs: placement and faults since it started"
    }
    fn profile(&self) -> Profile {
        super::JOB_PROFILE
    }
    fn timeout(&self) -> Duration {
        super::TIMEOUT
    }
    fn explain(&self) -> &'static str {
        "On a job watched live (`gpucheck job` on one of its nodes), maps each rank to the GPU \
its process holds (NVML's process lists), and reads the kernel log for Xid events logged after \
the job's first rank started.

fail: a GPU NVML counts but the driver lost (or needs reset) while the job runs, with the ranks \
found on no other GPU; an Xid since the job started that needs a GPU reset, a node reboot or hands on the \
hardware, with the GPU (index, UUID, bus id) and the ranks on it, and the repair action; \
several ranks on one GPU while other GPUs hold none (no torch.cuda.set_device(LOCAL_RANK)).
fail (too): the straggler job.straggler names runs on a GPU that NVML shows held back now (HW \
or thermal slowdown: service_hardware; the power cap: fix_config; an SM clock under 85% of its \
siblings' with no reason: reset_gpu).
warn: a GPU that holds no rank; every GPU with a rank under 40 % busy while ranks' stacks are \
in the data loader (raise DataLoader num_workers, pin_memory=True); an Xid that asks for a \
look or a restart of the job.
pass: one rank per GPU, no Xid since the job started.
skip: no rank holds a GPU (a CPU job), no NVIDIA driver, or the job was judged from dumps."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let job = match super::job(ctx) {
            Ok(j) => j,
            Err(e) => return super::unread(&e),
        };
        let Some(live) = &job.live else {
            return Outcome::skip("the job was judged from its dumps, not on its node");
        };
        let inventory = crate::facts::nvml::inventory_for_run(ctx);
        let gpus = match inventory.gpus() {
            Ok(g) => g,
            Err(e) => return Outcome::skip(format!("no GPU to look at: {e}")),
        };
        let loads = loads(ctx, live, &gpus);
        if let Some(lost) = lost_gpu(&inventory, &loads, live) {
            return lost.with_table(table(&loads));
        }
        let faults = faults_since_start(&job, &loads);
        let loading = live.caught_loading();
        let verdict = placement::judge(&loads, live.ranks.len(), &faults, &loading);
        let slow = match verdict {
            Verdict::Faults(_) | Verdict::Shared { .. } | Verdict::NoGpuRanks => None,
            _ => slow_straggler_gpu(ctx, &job, &loads),
        };
        slow.unwrap_or_else(|| words(verdict, &loads))
            .with_table(table(&loads))
    }
}

/// A GPU NVML counts but the driver lost or wedged while the job runs:
/// the ranks found on no other GPU are the ones that ran on it.
fn lost_gpu(
    inventory: &crate::facts::nvml::NvmlInventory,
    loads: &[GpuLoad],
    live: &super::live::Live,
) -> Option<Outcome> {
    let list = inventory.0.as_ref().ok()?;
    let lost = list
        .iter()
        .filter_map(|g| g.as_ref().err())
        .find(|e| e.error.is_machine_fault())?;
    let placed: Vec<u32> = loads.iter().flat_map(|g| g.ranks.iter().copied()).collect();
    let unplaced: Vec<u32> = live
        .ranks
        .iter()
        .map(|r| r.rank)
        .filter(|r| !placed.contains(r))
        .collect();
    let who = match (placed.is_empty(), unplaced.is_empty()) {
        (false, false) => format!("; {} on no other GPU, so on it", ranks_phrase(&unplaced)),
        _ => String::new(),
    };
    let action = fault_action(&lost.error);
    let named = if placed.is_empty() {
        Vec::new()
    } else {
        unplaced
    };
    Some(
        Outcome::fail(
            format!(
                "GPU {} is counted but cannot be opened: {}, while the job runs{who}",
                lost.index, lost.error
            ),
            format!(
                "the GPU is gone from the driver: the job cannot go on on this node; drain it \
                 ({}), and restart the job from its last checkpoint on healthy nodes",
                action.as_str()
            ),
        )
        .with_ranks(named, None)
        .with_action(action, vec![lost.index]),
    )
}

/// The repair a GPU's NVML fault calls for: a reset where NVML says one is
/// needed, else a reboot (a GPU lost, a wedged driver).
fn fault_action(error: &crate::machine::Unavailable) -> Action {
    use crate::machine::{GpuFault, Unavailable};
    match error {
        Unavailable::Faulted(GpuFault::ResetRequired) => Action::ResetGpu,
        _ => Action::RebootNode,
    }
}

/// Each rank's GPU as NVML lists its process ("GPU 3 (uuid, bus id)"),
/// for the verdicts that name the rank; nothing where NVML cannot say.
pub fn name_rank_gpus(ctx: &Context, job: &mut Job) {
    let Some(live) = job.live.as_mut() else {
        return;
    };
    let Ok(gpus) = crate::facts::nvml::inventory_for_run(ctx).gpus() else {
        return;
    };
    let loads = loads(ctx, live, &gpus);
    for r in &mut live.ranks {
        r.gpu = loads
            .iter()
            .find(|g| g.ranks.contains(&r.rank))
            .map(|g| format!("GPU {} ({}, {})", g.index, g.uuid, g.bus_id));
    }
}

/// Each GPU with the job's ranks on it (NVML's process lists) and how
/// busy it is.
fn loads(
    ctx: &Context,
    live: &super::live::Live,
    gpus: &[crate::machine::GpuInfo],
) -> Vec<GpuLoad> {
    let procs = nvml::processes(ctx.options.nvml_lib.as_deref()).unwrap_or_default();
    let rank_pids: Vec<(u32, u32)> = live.ranks.iter().map(|r| (r.rank, r.pid as u32)).collect();
    gpus.iter()
        .map(|g| {
            let facts = procs.iter().find(|p| p.gpu.index == g.index);
            let ok = facts.and_then(|p| p.facts.as_ref().ok());
            let pids: Vec<u32> = ok
                .and_then(|f| f.processes.as_ref().ok())
                .map(|ps| ps.iter().map(|p| p.pid).collect())
                .unwrap_or_default();
            let on = placement::ranks_on(&[(g.index, pids)], &rank_pids);
            GpuLoad {
                index: g.index,
                uuid: g.uuid.clone(),
                bus_id: g.pci_bus_id.clone(),
                utilization_pct: ok.and_then(|f| f.utilization_pct.as_ref().ok().copied()),
                ranks: on.get(&g.index).cloned().unwrap_or_default(),
            }
        })
        .collect()
}

/// Xid events logged after the job's first rank started, on this node.
fn faults_since_start(job: &Job, gpus: &[GpuLoad]) -> Vec<Fault> {
    let Some(live) = &job.live else {
        return Vec::new();
    };
    live.xids_since_start()
        .into_iter()
        .filter_map(|e| {
            let info = xid::xid_info(e.code)?;
            let gpu = gpus
                .iter()
                .find(|g| PciSlot::parse(&g.bus_id) == Some(e.slot));
            Some(Fault {
                gpu: gpu.map(|g| g.index),
                bus_id: gpu.map_or_else(|| format!("{:?}", e.slot), |g| g.bus_id.clone()),
                code: e.code,
                mnemonic: info.mnemonic.to_string(),
                action: xid::judged_action(info, &e.detail, &[]),
                when: e.when.clone(),
            })
        })
        .collect()
}

/// A straggler whose GPU NVML shows held back now (HW slowdown, thermal
/// slowdown, the power cap, an SM clock below its siblings'): the rank,
/// the GPU and the cause, joined.
fn slow_straggler_gpu(ctx: &Context, job: &Job, gpus: &[GpuLoad]) -> Option<Outcome> {
    let stragglers = &job.index().stragglers;
    if stragglers.is_empty() {
        return None;
    }
    let readings = nvml::load_readings(ctx.options.nvml_lib.as_deref()).ok()?;
    let clocks: Vec<f64> = readings
        .iter()
        .filter(|r| {
            gpus.iter()
                .any(|g| g.index == r.gpu.index && !g.ranks.is_empty())
        })
        .filter_map(|r| {
            r.facts
                .as_ref()
                .ok()?
                .sm_clock_mhz
                .as_ref()
                .ok()
                .map(|c| f64::from(*c))
        })
        .collect();
    stragglers.iter().find_map(|s| {
        let gpu = gpus.iter().find(|g| g.ranks.contains(&s.rank))?;
        let reading = readings
            .iter()
            .find(|r| r.gpu.index == gpu.index)?
            .facts
            .as_ref()
            .ok()?;
        let cause = qualify::cause_under_load(std::slice::from_ref(reading)).or_else(|| {
            let clock = f64::from(*reading.sm_clock_mhz.as_ref().ok()?);
            let below = qualify::below_siblings(clock, &clocks, qualify::SIBLING_FLOOR)?;
            Some(format!(
                "SM clock {clock:.0} MHz, {:.0}% of its siblings' median",
                below.percent()
            ))
        })?;
        let (action, hint) = straggler_action(&cause);
        Some(
            Outcome::fail(
                format!(
                    "rank {} is the straggler ({:.0} ms late in the median), and its GPU {} \
                     ({}, {}) shows {cause}",
                    s.rank, s.median_ms, gpu.index, gpu.uuid, gpu.bus_id
                ),
                hint,
            )
            .with_ranks(vec![s.rank], None)
            .with_action(action, vec![gpu.index]),
        )
    })
}

/// The repair a slow GPU's cause calls for, and what to do.
fn straggler_action(cause: &str) -> (Action, &'static str) {
    if cause.starts_with("HW") || cause.contains("thermal") {
        (
            Action::ServiceHardware,
            "the GPU slows itself down (cooling, power delivery): drain the node, check its \
             fans, airflow and power cables, and restart the job on healthy nodes",
        )
    } else if cause.starts_with("power cap") {
        (
            Action::FixConfig,
            "the GPU's power limit holds its clock down: restore the default limit (nvidia-smi \
             -q -d POWER shows it; nvidia-smi -pl sets it) on this GPU",
        )
    } else {
        (
            Action::ResetGpu,
            "the GPU runs slower than its siblings with no reason NVML names: reset it \
             (nvidia-smi -r) when the node is drained, and run gpucheck --profile full",
        )
    }
}

fn words(v: Verdict, gpus: &[GpuLoad]) -> Outcome {
    match v {
        Verdict::Faults(list) => faults(&list, gpus),
        Verdict::Shared { gpu, ranks, idle } => Outcome::fail(
            format!(
                "{} all run on GPU {gpu}; GPU {} hold{} no rank",
                ranks_phrase(&ranks),
                rank_list(&idle),
                if idle.len() == 1 { "s" } else { "" }
            ),
            "each rank must pick its own GPU: torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"])) \
             before init_process_group, and tensors and the model on that device \
             (device_ids=[local_rank] for DDP)",
        )
        .with_ranks(ranks, None)
        .with_action(Action::RestartJob, vec![gpu]),
        Verdict::Unused { gpus: idle, ranks } => Outcome::warn(
            format!("GPU {} hold no rank of the job ({ranks} ranks here)", rank_list(&idle)),
            format!(
                "start one rank per GPU (torchrun --nproc-per-node {}), or hide the unused GPUs \
                 with CUDA_VISIBLE_DEVICES if they are meant for another job",
                gpus.len()
            ),
        ),
        Verdict::Starved { util_max, loading } => Outcome::warn(
            format!(
                "every GPU with a rank is under {}% busy (at most {util_max}%) while {} load data",
                placement::STARVED_PCT,
                ranks_phrase(&loading)
            ),
            "the GPUs wait for batches: raise the DataLoader's num_workers, set pin_memory=True \
             and persistent_workers=True, and move decoding or augmentation off the main process",
        )
        .with_ranks(loading, None),
        Verdict::Fine(pairs) => {
            let list: Vec<String> = pairs.iter().map(|(r, g)| format!("rank {r} on GPU {g}")).collect();
            Outcome::pass(format!("one rank per GPU ({}); no Xid since the job started", list.join(", ")))
        }
        Verdict::NoGpuRanks => Outcome::skip("no rank of the job holds a GPU here (a CPU job)"),
    }
}

/// The worst Xid since the job started, with its GPU, ranks and action.
fn faults(list: &[(Fault, Vec<u32>)], gpus: &[GpuLoad]) -> Outcome {
    let Some((worst, ranks)) = list.iter().max_by_key(|(f, _)| f.action) else {
        return Outcome::pass("no Xid since the job started");
    };
    let gpu = worst.gpu.and_then(|i| gpus.iter().find(|g| g.index == i));
    let which = gpu.map_or_else(
        || format!("the GPU at {}", worst.bus_id),
        |g| format!("GPU {} ({}, {})", g.index, g.uuid, g.bus_id),
    );
    let who = if ranks.is_empty() {
        "no rank of the job runs on it".to_string()
    } else {
        format!(
            "{} run{} on it",
            ranks_phrase(ranks),
            if ranks.len() == 1 { "s" } else { "" }
        )
    };
    let summary = format!(
        "{which} logged Xid {} ({}) at {}, after the job started; {who}",
        worst.code, worst.mnemonic, worst.when
    );
    let action = Action::for_xid(worst.action);
    let hint = format!(
        "the job's trouble on this node starts at that GPU ({}): drain the node from the job, \
         repair it, and restart the job from its last checkpoint on healthy nodes",
        action.as_str()
    );
    let gpus_named: Vec<u32> = worst.gpu.into_iter().collect();
    let outcome = match action {
        Action::None | Action::FixInstall | Action::RestartJob => Outcome::warn(summary, hint),
        _ => Outcome::fail(summary, hint),
    };
    outcome
        .with_ranks(ranks.clone(), None)
        .with_action(action, gpus_named)
}

fn table(gpus: &[GpuLoad]) -> DataTable {
    DataTable {
        title: "The job's GPUs".to_string(),
        header: ["gpu", "uuid", "bus id", "busy", "ranks"]
            .map(String::from)
            .to_vec(),
        rows: gpus
            .iter()
            .map(|g| {
                vec![
                    g.index.to_string(),
                    g.uuid.clone(),
                    g.bus_id.clone(),
                    g.utilization_pct
                        .map_or_else(|| "?".to_string(), |u| format!("{u}%")),
                    rank_list(&g.ranks),
                ]
            })
            .collect(),
        legend: None,
    }
}

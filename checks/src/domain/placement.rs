//! Where a running job's ranks sit on this node's GPUs, and what the GPUs
//! went through since the job started: several ranks on one GPU while
//! others idle (no `torch.cuda.set_device(LOCAL_RANK)`), a GPU with no
//! rank, GPUs starved by data loading, and the Xid events that explain a
//! rank's trouble. Pure: NVML's process lists and the kernel log come in
//! as plain facts.

use std::collections::BTreeMap;

use crate::domain::xid::XidAction;

/// One GPU of the node while the job runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuLoad {
    pub index: u32,
    pub uuid: String,
    pub bus_id: String,
    pub utilization_pct: Option<u32>,
    /// The job's ranks whose process holds memory on it.
    pub ranks: Vec<u32>,
}

/// An Xid event logged after the job started, on a GPU of this node.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// The GPU's index, when the event's PCI address is one of NVML's GPUs.
    pub gpu: Option<u32>,
    pub bus_id: String,
    pub code: u32,
    pub mnemonic: String,
    pub action: XidAction,
    pub when: String,
}

/// What the placement shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Xid events since the job started, with the ranks on those GPUs.
    Faults(Vec<(Fault, Vec<u32>)>),
    /// Several ranks share a GPU while other GPUs hold none.
    Shared {
        gpu: u32,
        ranks: Vec<u32>,
        idle: Vec<u32>,
    },
    /// GPUs that hold no rank of the job.
    Unused { gpus: Vec<u32>, ranks: usize },
    /// Every GPU with a rank under [`STARVED_PCT`] while ranks load data.
    Starved { util_max: u32, loading: Vec<u32> },
    /// One rank per GPU: (rank, gpu).
    Fine(Vec<(u32, u32)>),
    /// No rank holds a GPU: a CPU job.
    NoGpuRanks,
}

/// Utilisation under which a GPU of a data-loading job is starved.
pub const STARVED_PCT: u32 = 40;

/// Judge the placement of `ranks` (how many run here) on `gpus`; `faults`
/// are the Xid events since the job started; `loading` the ranks whose
/// stacks were in the data loader.
pub fn judge(gpus: &[GpuLoad], ranks: usize, faults: &[Fault], loading: &[u32]) -> Verdict {
    if !faults.is_empty() {
        return Verdict::Faults(
            faults
                .iter()
                .map(|f| {
                    let on = f
                        .gpu
                        .and_then(|g| gpus.iter().find(|l| l.index == g))
                        .map(|l| l.ranks.clone())
                        .unwrap_or_default();
                    (f.clone(), on)
                })
                .collect(),
        );
    }
    let used: Vec<&GpuLoad> = gpus.iter().filter(|g| !g.ranks.is_empty()).collect();
    if used.is_empty() {
        return Verdict::NoGpuRanks;
    }
    let idle: Vec<u32> = gpus
        .iter()
        .filter(|g| g.ranks.is_empty())
        .map(|g| g.index)
        .collect();
    if let Some(crowded) = used.iter().find(|g| g.ranks.len() > 1) {
        if !idle.is_empty() {
            return Verdict::Shared {
                gpu: crowded.index,
                ranks: crowded.ranks.clone(),
                idle,
            };
        }
    }
    let util: Vec<u32> = used.iter().filter_map(|g| g.utilization_pct).collect();
    let util_max = util.iter().copied().max();
    if let Some(max) = util_max.filter(|m| *m < STARVED_PCT && util.len() == used.len()) {
        if !loading.is_empty() {
            return Verdict::Starved {
                util_max: max,
                loading: loading.to_vec(),
            };
        }
    }
    if !idle.is_empty() && ranks < gpus.len() {
        return Verdict::Unused { gpus: idle, ranks };
    }
    let mut pairs: Vec<(u32, u32)> = used
        .iter()
        .flat_map(|g| g.ranks.iter().map(move |r| (*r, g.index)))
        .collect();
    pairs.sort_unstable();
    Verdict::Fine(pairs)
}

/// Each rank's GPUs, from the pids NVML lists per GPU.
pub fn ranks_on(gpu_pids: &[(u32, Vec<u32>)], rank_pids: &[(u32, u32)]) -> BTreeMap<u32, Vec<u32>> {
    let mut by_gpu: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (gpu, pids) in gpu_pids {
        let mut ranks: Vec<u32> = rank_pids
            .iter()
            .filter(|(_, pid)| pids.contains(pid))
            .map(|(r, _)| *r)
            .collect();
        ranks.sort_unstable();
        by_gpu.insert(*gpu, ranks);
    }
    by_gpu
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, ranks: &[u32], util: u32) -> GpuLoad {
        GpuLoad {
            index,
            uuid: format!("GPU-{index}"),
            bus_id: format!("00000000:{:02x}:00.0", 0x18 + index),
            utilization_pct: Some(util),
            ranks: ranks.to_vec(),
        }
    }

    #[test]
    fn four_ranks_on_gpu_zero_is_named_with_the_idle_gpus() {
        let gpus = [
            gpu(0, &[0, 1, 2, 3], 99),
            gpu(1, &[], 0),
            gpu(2, &[], 0),
            gpu(3, &[], 0),
        ];
        assert_eq!(
            judge(&gpus, 4, &[], &[]),
            Verdict::Shared {
                gpu: 0,
                ranks: vec![0, 1, 2, 3],
                idle: vec![1, 2, 3]
            }
        );
    }

    #[test]
    fn one_rank_per_gpu_is_fine() {
        let gpus = [gpu(0, &[0], 90), gpu(1, &[1], 91)];
        assert_eq!(
            judge(&gpus, 2, &[], &[]),
            Verdict::Fine(vec![(0, 0), (1, 1)])
        );
    }

    #[test]
    fn a_gpu_without_a_rank_is_unused() {
        let gpus = [gpu(0, &[0], 90), gpu(1, &[1], 91), gpu(2, &[], 0)];
        assert_eq!(
            judge(&gpus, 2, &[], &[]),
            Verdict::Unused {
                gpus: vec![2],
                ranks: 2
            }
        );
    }

    #[test]
    fn low_utilisation_with_ranks_in_the_data_loader_is_starved() {
        let gpus = [gpu(0, &[0], 12), gpu(1, &[1], 30)];
        assert_eq!(
            judge(&gpus, 2, &[], &[1]),
            Verdict::Starved {
                util_max: 30,
                loading: vec![1]
            }
        );
        assert_eq!(
            judge(&gpus, 2, &[], &[]),
            Verdict::Fine(vec![(0, 0), (1, 1)]),
            "no loader: fine"
        );
        let busy = [gpu(0, &[0], 12), gpu(1, &[1], 80)];
        assert!(matches!(judge(&busy, 2, &[], &[1]), Verdict::Fine(_)));
    }

    #[test]
    fn an_xid_since_the_start_names_the_ranks_on_its_gpu() {
        let gpus = [gpu(0, &[0], 90), gpu(1, &[1], 0)];
        let f = Fault {
            gpu: Some(1),
            bus_id: "00000000:19:00.0".into(),
            code: 79,
            mnemonic: "GPU_HAS_FALLEN_OFF_THE_BUS".into(),
            action: XidAction::RebootNode,
            when: "412.5 s after boot".into(),
        };
        match judge(&gpus, 2, &[f], &[]) {
            Verdict::Faults(list) => assert_eq!(list[0].1, vec![1]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_rank_on_a_gpu_is_a_cpu_job() {
        assert_eq!(judge(&[gpu(0, &[], 0)], 3, &[], &[]), Verdict::NoGpuRanks);
        assert_eq!(judge(&[], 3, &[], &[]), Verdict::NoGpuRanks);
    }

    #[test]
    fn pids_map_to_ranks() {
        let m = ranks_on(
            &[(0, vec![100, 101]), (1, vec![])],
            &[(0, 100), (1, 101), (2, 102)],
        );
        assert_eq!(m[&0], vec![0, 1]);
        assert!(m[&1].is_empty());
    }
}

//! gpu.topology's rule for NVLink error counters: which GPU's counts stand
//! out enough to warn.
//!
//! The counters (nvmlDeviceGetNvLinkErrorCounter) count since the driver
//! loaded, so a healthy link that has run for months can show a few replays
//! and CRC errors; what matters is a recovery at all, or replays and CRC
//! errors far above the GPU's siblings, which see the same traffic.

use crate::domain::action::Action;
use crate::findings::Finding;
use crate::probe::nvml::{NvLinkErrors, NvLinkState, TopologyFacts};
use crate::Status;

/// Recoveries from this many warn: a recovery is the link failing and
/// retraining (traffic stalls meanwhile, and a link that keeps recovering
/// goes down: Xid 74). DCGM's NVLink health watch reports any recovery error
/// as critical (DCGM_FR_NVLINK_ERROR_CRITICAL), while it judges replay and
/// CRC errors by rate.
pub const RECOVERY_WARN: u64 = 1;
/// Replays, or CRC errors, warn from this many on one GPU's links...
pub const REPLAY_CRC_MIN: u64 = 100;
/// ...when also this many times the median of the other judged GPUs: the
/// siblings ran the same all-reduces over the same kind of link, so a GPU
/// ten times above them has a marginal link, not a busy one.
pub const SIBLING_RATIO: u64 = 10;

/// One GPU's counters, summed over its active links.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Totals {
    replay: u64,
    recovery: u64,
    crc: u64,
}

fn totals(links: &[NvLinkState]) -> Totals {
    links
        .iter()
        .filter(|l| l.active)
        .fold(Totals::default(), |t, l| Totals {
            replay: t.replay + l.errors.replay.unwrap_or(0),
            recovery: t.recovery + l.errors.recovery.unwrap_or(0),
            crc: t.crc + l.errors.crc.unwrap_or(0),
        })
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// "link 2: 1200 replays, 3 recoveries" for each link with errors.
fn link_counts(links: &[NvLinkState]) -> String {
    let describe = |e: &NvLinkErrors| {
        [
            (e.replay, "replay", "replays"),
            (e.recovery, "recovery", "recoveries"),
            (e.crc, "CRC error", "CRC errors"),
        ]
        .iter()
        .filter_map(|&(n, one, many)| {
            let n = n.filter(|n| *n > 0)?;
            Some(format!("{n} {}", if n == 1 { one } else { many }))
        })
        .collect::<Vec<_>>()
        .join(", ")
    };
    links
        .iter()
        .filter(|l| l.active)
        .map(|l| (l.link, describe(&l.errors)))
        .filter(|(_, d)| !d.is_empty())
        .map(|(link, d)| format!("link {link}: {d}"))
        .collect::<Vec<_>>()
        .join("; ")
}

const HINT: &str = "the NVLinks of {gpus} log errors well above their siblings': a marginal link \
     replays and retrains, running slower, and may go down (Xid 74). Watch whether the counts \
     grow (`nvidia-smi nvlink -e -i {ids}`), look for Xid 74 in `sudo dmesg | grep -i xid`, and \
     run `dcgmi diag -r 2`; a link that keeps recovering needs the GPU or baseboard serviced";

/// A warning for each judged GPU whose NVLink errors stand out: any
/// recovery, or replays / CRC errors at least [`REPLAY_CRC_MIN`] and
/// [`SIBLING_RATIO`] times the other judged GPUs' median.
pub fn nvlink_error_findings(t: &TopologyFacts, judged: &dyn Fn(usize) -> bool) -> Vec<Finding> {
    let per_gpu: Vec<(usize, &Vec<NvLinkState>, Totals)> = t
        .nvlinks
        .iter()
        .enumerate()
        .filter(|(i, _)| judged(*i))
        .filter_map(|(i, l)| l.as_ref().ok().map(|l| (i, l, totals(l))))
        .collect();
    let stands_out = |i: usize, mine: u64, of: fn(&Totals) -> u64| {
        let others = per_gpu
            .iter()
            .filter(|(j, _, _)| *j != i)
            .map(|(_, _, t)| of(t))
            .collect();
        mine >= REPLAY_CRC_MIN && mine >= median(others).saturating_mul(SIBLING_RATIO)
    };
    per_gpu
        .iter()
        .filter(|(i, _, n)| {
            n.recovery >= RECOVERY_WARN
                || stands_out(*i, n.replay, |t| t.replay)
                || stands_out(*i, n.crc, |t| t.crc)
        })
        .filter_map(|(i, links, _)| {
            let gpu = t.gpus.get(*i)?;
            let text = format!("NVLink errors ({})", link_counts(links));
            Some(
                Finding::new(Some(gpu.index), Status::Warn, text)
                    .hint(HINT)
                    .action(Action::ServiceHardware),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nvml::{GpuRef, NvLinkRemote};

    /// Eight GPUs with 18 NVLinks each to the NVSwitch; `errors(gpu, link)`.
    fn machine(errors: impl Fn(u32, u32) -> NvLinkErrors) -> TopologyFacts {
        TopologyFacts {
            gpus: (0..8)
                .map(|i| GpuRef {
                    index: i,
                    name: "NVIDIA H100 80GB HBM3".to_string(),
                    uuid: Some(format!("GPU-{i}")),
                })
                .collect(),
            nvlinks: (0..8)
                .map(|g| {
                    Ok((0..18)
                        .map(|link| NvLinkState {
                            link,
                            active: true,
                            remote: NvLinkRemote::Switch,
                            errors: errors(g, link),
                        })
                        .collect())
                })
                .collect(),
            pairs: Vec::new(),
        }
    }

    fn counts(replay: u64, recovery: u64, crc: u64) -> NvLinkErrors {
        NvLinkErrors {
            replay: Some(replay),
            recovery: Some(recovery),
            crc: Some(crc),
        }
    }

    #[test]
    fn a_recovery_or_replays_far_above_the_siblings_warn() {
        let t = machine(|g, l| match (g, l) {
            (4, 2) => counts(1200, 3, 0),
            (1, 0) => counts(2, 0, 0),
            _ => counts(0, 0, 0),
        });
        let f = nvlink_error_findings(&t, &|_| true);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].gpu, Some(4));
        assert_eq!(f[0].status, Status::Warn);
        assert_eq!(
            f[0].text,
            "NVLink errors (link 2: 1200 replays, 3 recoveries)"
        );
        // Replays alone, far above the siblings; GPUs outside the job are not judged.
        let t = machine(|g, _| counts(if g == 6 { 50 } else { 1 }, 0, 0));
        let f = nvlink_error_findings(&t, &|_| true);
        assert_eq!(f.iter().map(|f| f.gpu).collect::<Vec<_>>(), [Some(6)]);
        assert!(nvlink_error_findings(&t, &|i| i != 6).is_empty());
        // Every GPU as high (months of uptime): nobody stands out.
        let t = machine(|_, _| counts(500, 0, 40));
        assert!(nvlink_error_findings(&t, &|_| true).is_empty());
        // CRC errors stand out like replays.
        let t = machine(|g, l| counts(0, 0, if g == 3 && l == 7 { 150 } else { 0 }));
        let f = nvlink_error_findings(&t, &|_| true);
        assert_eq!(f[0].text, "NVLink errors (link 7: 150 CRC errors)");
    }
}

//! `host.limits`: RLIMIT_MEMLOCK where RDMA devices exist, and
//! RLIMIT_NOFILE.

use super::show_bytes;
use crate::probe::host::{self as hp, LimitsFacts};
use crate::{Check, Context, Finding, Findings, Outcome, Profile, Status};

/// Below this RLIMIT_NOFILE warns. PyTorch's default `file_descriptor`
/// sharing strategy keeps one descriptor open per tensor a DataLoader worker
/// hands over (torch.multiprocessing docs, "Sharing strategies"), and NCCL
/// opens sockets per peer. No vendor publishes a floor; 65536 is the figure
/// gpucheck's design chose, well above the 1024 many distributions default to.
pub const NOFILE_WARN_BELOW: u64 = 65536;

pub struct Limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsThresholds {
    pub nofile_warn_below: u64,
}

impl Default for LimitsThresholds {
    fn default() -> Self {
        LimitsThresholds {
            nofile_warn_below: NOFILE_WARN_BELOW,
        }
    }
}

impl Check for Limits {
    fn id(&self) -> &'static str {
        "host.limits"
    }
    fn title(&self) -> &'static str {
        "Resource limits"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Checks RLIMIT_MEMLOCK (unlimited where RDMA devices exist) and RLIMIT_NOFILE (at least 65536) of the processes started from here.\n\n\
         NCCL's InfiniBand/RoCE (and AWS EFA) transport registers its buffers with the RDMA \
         device, which pins memory and counts against the locked-memory limit; with Docker's \
         default of a few MiB it fails ('ibv_reg_mr failed', 'Cannot allocate memory') or falls \
         back to slow TCP sockets. Without RDMA devices the limit does not matter to NCCL and is \
         only reported. When sysfs lists RDMA devices but /dev/infiniband/uverbs* is missing (a \
         container not given them), NCCL cannot use InfiniBand at all, whatever the limit: pass \
         them in with `--device=/dev/infiniband`.\n\n\
         The open-files limit matters because DataLoader workers hand tensors to the trainer as \
         file descriptors and NCCL opens sockets per peer: a low limit ends in 'Too many open \
         files' or 'received 0 items of ancdata'.\n\n\
         Docker: `docker run --ulimit memlock=-1 --ulimit nofile=65536:65536 ...`. Bare metal: add \
         `* - memlock unlimited` and `* - nofile 65536` to /etc/security/limits.conf (or \
         LimitMEMLOCK=infinity / LimitNOFILE=65536 for systemd services) and log in again. When only \
         the soft open-files limit is low, `ulimit -n 65536` in the launch script is enough."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        match hp::limits() {
            Ok(f) => evaluate_limits(&f, &LimitsThresholds::default()),
            Err(e) => Outcome::error(e),
        }
    }
}

/// Judge the limits: each problem is a warning with its fix; without one the
/// summary lists the limits as they are.
pub fn evaluate_limits(f: &LimitsFacts, t: &LimitsThresholds) -> Outcome {
    let mut findings = Findings::new();
    let mut notes = Vec::new();
    judge_memlock(f, &mut findings, &mut notes);
    judge_nofile(f, t, &mut findings, &mut notes);
    let mut o = findings.conclude(notes.join(", "), vec![]);
    if let Some(soft) = f.nofile.soft {
        o = o.with_metric("nofile_soft", soft as f64, "count");
    }
    if let Some(hard) = f.nofile.hard {
        o = o.with_metric("nofile_hard", hard as f64, "count");
    }
    if let Some(bytes) = f.memlock.soft {
        o = o.with_metric("memlock_soft", (bytes / 1024) as f64, "KiB");
    }
    o.with_fact(
        "memlock",
        f.memlock
            .soft
            .map(show_bytes)
            .unwrap_or_else(|| "unlimited".into()),
    )
    .with_fact(
        "rdma_devices",
        if f.rdma_devices.is_empty() {
            "none".to_string()
        } else {
            f.rdma_devices.join(", ")
        },
    )
}

/// RLIMIT_MEMLOCK matters only where NCCL can use RDMA devices.
fn judge_memlock(f: &LimitsFacts, findings: &mut Findings, notes: &mut Vec<String>) {
    let Some(bytes) = f.memlock.soft else {
        notes.push("memlock unlimited".to_string());
        return;
    };
    if f.rdma_devices.is_empty() {
        notes.push(format!(
            "memlock {} (no RDMA devices, so NCCL does not need more)",
            show_bytes(bytes)
        ));
        return;
    }
    let devices = f.rdma_devices.join(", ");
    if !f.uverbs_nodes {
        // sysfs shows the host's RDMA devices, but without the uverbs
        // nodes no process here can open them: NCCL uses TCP sockets
        // between nodes, and the memlock limit is not what stops it.
        findings.push(
            Finding::new(
                None,
                Status::Warn,
                format!(
                    "memlock is {} and RDMA devices ({devices}) are listed, but \
                     /dev/infiniband/uverbs* is missing: NCCL cannot use InfiniBand here and \
                     falls back to TCP sockets between nodes",
                    show_bytes(bytes)
                ),
            )
            .hint(
                "for a multi-node job, pass the RDMA devices in with the limit: `docker run \
                 --device=/dev/infiniband --ulimit memlock=-1 ...` (Kubernetes: the RDMA device \
                 plugin; bare metal: `sudo modprobe ib_uverbs`); a single-node job does not need them",
            ),
        );
        return;
    }
    findings.push(
        Finding::new(
            None,
            Status::Warn,
            format!(
                "memlock is {} with RDMA devices ({devices}): NCCL cannot register its \
                 InfiniBand buffers",
                show_bytes(bytes)
            ),
        )
        .hint(if f.memlock.hard.is_none() {
            "the hard limit is unlimited: add `ulimit -l unlimited` to the launch script"
        } else {
            "`docker run --ulimit memlock=-1`, or `* - memlock unlimited` in \
             /etc/security/limits.conf (LimitMEMLOCK=infinity for systemd)"
        }),
    );
}

/// RLIMIT_NOFILE below the floor warns; the fix depends on the hard limit.
fn judge_nofile(
    f: &LimitsFacts,
    t: &LimitsThresholds,
    findings: &mut Findings,
    notes: &mut Vec<String>,
) {
    match f.nofile.soft {
        Some(soft) if soft < t.nofile_warn_below => findings.push(
            Finding::new(
                None,
                Status::Warn,
                format!(
                    "open files limit is {soft}, below {}: DataLoader workers and NCCL can hit \
                     'Too many open files'",
                    t.nofile_warn_below
                ),
            )
            .hint(if f.nofile.hard.is_none_or(|h| h >= t.nofile_warn_below) {
                "the hard limit allows more: add `ulimit -n 65536` to the launch script"
            } else {
                "`docker run --ulimit nofile=65536:65536`, or `* - nofile 65536` in \
                 /etc/security/limits.conf (LimitNOFILE=65536 for systemd)"
            }),
        ),
        Some(soft) => notes.push(format!("nofile {soft}")),
        None => notes.push("nofile unlimited".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::MIB;
    use super::*;
    use crate::probe::host::Rlimit;
    use crate::Status;

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    fn limits(memlock: Option<u64>, nofile: (u64, Option<u64>), rdma: &[&str]) -> Outcome {
        evaluate_limits(
            &LimitsFacts {
                memlock: Rlimit {
                    soft: memlock,
                    hard: memlock,
                },
                nofile: Rlimit {
                    soft: Some(nofile.0),
                    hard: nofile.1,
                },
                rdma_devices: rdma.iter().map(|s| s.to_string()).collect(),
                uverbs_nodes: !rdma.is_empty(),
            },
            &LimitsThresholds::default(),
        )
    }

    #[test]
    fn limits_pass_when_unlimited_and_high() {
        let o = limits(None, (1_048_576, Some(1_048_576)), &["mlx5_0"]);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "memlock unlimited, nofile 1048576");
        assert_eq!(o.metric("nofile_soft"), Some(1_048_576.0));
    }

    #[test]
    fn limits_memlock_with_rdma_warns() {
        let o = limits(Some(8 * MIB), (65536, Some(65536)), &["mlx5_0", "mlx5_1"]);
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("memlock is 8 MiB"), "{}", o.summary);
        assert!(o.summary.contains("mlx5_0, mlx5_1"), "{}", o.summary);
        assert!(hint(&o).contains("--ulimit memlock=-1"), "{}", hint(&o));
        assert!(hint(&o).contains("limits.conf"), "{}", hint(&o));
        assert_eq!(o.metric("memlock_soft"), Some(8192.0));
    }

    #[test]
    fn limits_low_soft_memlock_under_an_unlimited_hard_limit_says_ulimit_l() {
        let o = evaluate_limits(
            &LimitsFacts {
                memlock: Rlimit {
                    soft: Some(64 * 1024),
                    hard: None,
                },
                nofile: Rlimit {
                    soft: Some(1_048_576),
                    hard: Some(1_048_576),
                },
                rdma_devices: vec!["mlx5_0".into()],
                uverbs_nodes: true,
            },
            &LimitsThresholds::default(),
        );
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("memlock is 64 KiB"), "{}", o.summary);
        assert_eq!(
            hint(&o),
            "the hard limit is unlimited: add `ulimit -l unlimited` to the launch script"
        );
    }

    #[test]
    fn limits_rdma_listed_but_not_openable_says_pass_the_devices_in() {
        let o = evaluate_limits(
            &LimitsFacts {
                memlock: Rlimit {
                    soft: Some(8 * MIB),
                    hard: Some(8 * MIB),
                },
                nofile: Rlimit {
                    soft: Some(1_048_576),
                    hard: Some(1_048_576),
                },
                rdma_devices: vec!["mlx5_0".into()],
                uverbs_nodes: false,
            },
            &LimitsThresholds::default(),
        );
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.starts_with("memlock is 8 MiB"), "{}", o.summary);
        assert!(
            o.summary.contains("/dev/infiniband/uverbs* is missing"),
            "{}",
            o.summary
        );
        assert!(
            hint(&o).contains("--device=/dev/infiniband --ulimit memlock=-1"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn limits_memlock_without_rdma_is_only_reported() {
        let o = limits(Some(64 * 1024), (65536, Some(65536)), &[]);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.contains("memlock 64 KiB (no RDMA devices"),
            "{}",
            o.summary
        );
        assert_eq!(
            o.facts.get("rdma_devices").and_then(|v| v.as_str()),
            Some("none")
        );
    }

    #[test]
    fn limits_low_nofile_with_low_hard_limit_says_ulimit_flag() {
        let o = limits(None, (20000, Some(20000)), &[]);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("open files limit is 20000"),
            "{}",
            o.summary
        );
        assert!(
            hint(&o).contains("--ulimit nofile=65536:65536"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn limits_low_soft_nofile_with_high_hard_limit_says_ulimit_n() {
        let o = limits(None, (1024, Some(524288)), &[]);
        assert_eq!(o.status, Status::Warn);
        assert!(hint(&o).contains("ulimit -n 65536"), "{}", hint(&o));
        assert!(!hint(&o).contains("--ulimit"), "{}", hint(&o));
    }

    #[test]
    fn limits_both_problems_are_reported_together() {
        let o = limits(Some(64 * 1024), (1024, Some(1024)), &["efa_0"]);
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("memlock is 64 KiB"), "{}", o.summary);
        assert!(
            o.summary.contains("open files limit is 1024"),
            "{}",
            o.summary
        );
        assert!(hint(&o).contains("memlock=-1"), "{}", hint(&o));
        assert!(hint(&o).contains("nofile=65536:65536"), "{}", hint(&o));
    }
}

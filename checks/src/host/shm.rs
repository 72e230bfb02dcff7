//! `host.shm`: a /dev/shm large enough for NCCL's shared-memory transport
//! and DataLoader workers.

use super::{show_mib, MIB};
use crate::probe::host::{self as hp, ShmFacts};
use crate::probe::system;
use crate::{Check, Context, Outcome, Profile};

/// Below this /dev/shm fails. Docker's default is 64 MB, which breaks NCCL's
/// shared-memory transport and DataLoader workers (facts.md, "/dev/shm";
/// NCCL troubleshooting guide).
pub const SHM_FAIL_BELOW_MIB: u64 = 256;
/// Below this /dev/shm warns: NCCL's troubleshooting guide asks for
/// `--shm-size=1g` at least (facts.md, "/dev/shm").
pub const SHM_WARN_BELOW_MIB: u64 = 1024;

pub struct Shm;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmThresholds {
    pub fail_below_mib: u64,
    pub warn_below_mib: u64,
}

impl Default for ShmThresholds {
    fn default() -> Self {
        ShmThresholds {
            fail_below_mib: SHM_FAIL_BELOW_MIB,
            warn_below_mib: SHM_WARN_BELOW_MIB,
        }
    }
}

impl Check for Shm {
    fn id(&self) -> &'static str {
        "host.shm"
    }
    fn title(&self) -> &'static str {
        "Shared memory"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Checks that /dev/shm exists, is memory-backed and is large enough (fail below 256 MiB, warn below 1 GiB).\n\n\
         NCCL moves data between GPUs of one node through shared-memory segments in /dev/shm when \
         they cannot use NVLink or P2P, and PyTorch DataLoader workers hand every batch to the \
         training process through it. Docker gives a container 64 MB by default, which makes NCCL \
         fail with 'unhandled system error' and DataLoader workers die with 'Bus error' or \
         'No space left on device' as soon as batches grow.\n\n\
         Docker: `docker run --shm-size=16g ...` or share the host's IPC namespace with \
         `--ipc=host`. Kubernetes: mount an emptyDir with `medium: Memory` (and a sizeLimit) at \
         /dev/shm. Bare metal: `sudo mount -o remount,size=16G /dev/shm` (and make it permanent in \
         /etc/fstab).\n\n\
         A /dev/shm that is large but nearly full usually holds segments left behind by killed jobs \
         (`ls -la /dev/shm`); remove the stale ones."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        evaluate_shm(
            &hp::shm(),
            system::container().as_deref(),
            &ShmThresholds::default(),
        )
    }
}

/// Judge /dev/shm against the thresholds.
pub fn evaluate_shm(shm: &ShmFacts, container: Option<&str>, t: &ShmThresholds) -> Outcome {
    let fix = shm_fix(container);
    let (size_bytes, available_bytes, tmpfs) = match shm {
        ShmFacts::Missing => {
            return Outcome::fail(
                "/dev/shm does not exist: NCCL's shared-memory transport and DataLoader workers need it",
                fix,
            )
        }
        ShmFacts::Unreadable(e) => {
            return Outcome::error(format!("could not query /dev/shm: {e}"))
                .with_hint("check `df -h /dev/shm` and `mount | grep shm`")
        }
        ShmFacts::Mounted {
            size_bytes,
            available_bytes,
            tmpfs,
        } => (*size_bytes, *available_bytes, *tmpfs),
    };
    let size_mib = size_bytes / MIB;
    let free_mib = available_bytes / MIB;
    let with_metrics = |o: Outcome| {
        o.with_metric("shm_size", size_mib as f64, "MiB")
            .with_metric("shm_available", free_mib as f64, "MiB")
    };
    let docker_default = if (60..=64).contains(&size_mib) {
        " (Docker's default)"
    } else {
        ""
    };
    if size_mib < t.fail_below_mib {
        return with_metrics(Outcome::fail(
            format!(
                "/dev/shm is only {}{docker_default}, below {}: NCCL shared-memory transfers and \
                 DataLoader workers will fail ('unhandled system error', 'Bus error')",
                show_mib(size_mib),
                show_mib(t.fail_below_mib)
            ),
            fix,
        ));
    }
    if size_mib < t.warn_below_mib {
        return with_metrics(Outcome::warn(
            format!(
                "/dev/shm is {}, below the {} NCCL recommends; large batches or many DataLoader \
                 workers can run out",
                show_mib(size_mib),
                show_mib(t.warn_below_mib)
            ),
            fix,
        ));
    }
    if !tmpfs {
        return with_metrics(Outcome::warn(
            format!(
                "/dev/shm ({}) is not a tmpfs: shared-memory traffic goes through a disk filesystem",
                show_mib(size_mib)
            ),
            fix,
        ));
    }
    if free_mib < t.fail_below_mib {
        return with_metrics(Outcome::warn(
            format!(
                "/dev/shm is {} but only {} is free",
                show_mib(size_mib),
                show_mib(free_mib)
            ),
            "remove segments left by killed jobs: `ls -la /dev/shm` (nccl-*, torch_* owned by \
             processes that no longer run)",
        ));
    }
    with_metrics(Outcome::pass(format!(
        "/dev/shm is {} ({} free)",
        show_mib(size_mib),
        show_mib(free_mib)
    )))
}

fn shm_fix(container: Option<&str>) -> String {
    match container {
        Some("kubernetes") => {
            "mount an emptyDir with `medium: Memory` (sizeLimit: 16Gi) at /dev/shm \
             in the pod spec"
                .to_string()
        }
        Some(_) => "restart the container with `--shm-size=16g` (or `--ipc=host`); in Kubernetes, \
             mount an emptyDir with `medium: Memory` at /dev/shm"
            .to_string(),
        None => "`sudo mount -o remount,size=16G /dev/shm` (make it permanent in /etc/fstab); in \
             Docker use `--shm-size=16g` or `--ipc=host`"
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    fn mounted(size_mib: u64, free_mib: u64, tmpfs: bool) -> ShmFacts {
        ShmFacts::Mounted {
            size_bytes: size_mib * MIB,
            available_bytes: free_mib * MIB,
            tmpfs,
        }
    }

    fn shm(f: ShmFacts, container: Option<&str>) -> Outcome {
        evaluate_shm(&f, container, &ShmThresholds::default())
    }

    #[test]
    fn shm_docker_default_fails_with_shm_size_hint() {
        let o = shm(mounted(64, 64, true), Some("docker"));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("64 MiB (Docker's default)"),
            "{}",
            o.summary
        );
        assert!(hint(&o).contains("--shm-size=16g"), "{}", hint(&o));
        assert!(hint(&o).contains("--ipc=host"), "{}", hint(&o));
        assert_eq!(o.metric("shm_size"), Some(64.0));
    }

    #[test]
    fn shm_small_in_kubernetes_says_emptydir() {
        let o = shm(mounted(128, 128, true), Some("kubernetes"));
        assert_eq!(o.status, Status::Fail);
        assert!(hint(&o).contains("medium: Memory"), "{}", hint(&o));
    }

    #[test]
    fn shm_below_one_gib_warns() {
        let o = shm(mounted(512, 512, true), Some("docker"));
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("512 MiB"), "{}", o.summary);
        assert!(hint(&o).contains("--shm-size=16g"), "{}", hint(&o));
    }

    #[test]
    fn shm_thresholds_are_exclusive_bounds() {
        assert_eq!(shm(mounted(256, 256, true), None).status, Status::Warn);
        assert_eq!(shm(mounted(1024, 1024, true), None).status, Status::Pass);
    }

    #[test]
    fn shm_large_passes_with_metrics() {
        let o = shm(mounted(24 * 1024, 20 * 1024, true), None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "/dev/shm is 24.0 GiB (20.0 GiB free)");
        assert_eq!(o.metric("shm_available"), Some(20.0 * 1024.0));
    }

    #[test]
    fn shm_missing_fails() {
        let o = shm(ShmFacts::Missing, None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("does not exist"), "{}", o.summary);
        assert!(hint(&o).contains("remount,size=16G"), "{}", hint(&o));
    }

    #[test]
    fn shm_unreadable_is_an_error() {
        let o = shm(ShmFacts::Unreadable("Permission denied".into()), None);
        assert_eq!(o.status, Status::Error);
        assert!(o.summary.contains("Permission denied"));
    }

    #[test]
    fn shm_not_tmpfs_warns() {
        let o = shm(mounted(50 * 1024, 50 * 1024, false), None);
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("not a tmpfs"), "{}", o.summary);
    }

    #[test]
    fn shm_nearly_full_warns_about_stale_segments() {
        let o = shm(mounted(16 * 1024, 100, true), None);
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("only 100 MiB is free"), "{}", o.summary);
        assert!(hint(&o).contains("ls -la /dev/shm"), "{}", hint(&o));
    }
}

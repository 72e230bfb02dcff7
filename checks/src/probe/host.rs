//! Probe: the host underneath the GPUs — the NVIDIA device nodes a CUDA
//! process opens, the /dev/shm that NCCL and DataLoader workers share memory
//! through, the resource limits a training process inherits, and environment
//! variables read without trusting their bytes. Plain facts; the host and env
//! checks judge them.

use std::fs;
use std::io;
use std::path::Path;

use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};

/// An environment variable as text, with any invalid UTF-8 replaced (values
/// are echoed in reports; the reporters escape what is left). `None` when unset.
/// Read through the probe boundary ([`crate::seam::env`]), so a capture
/// keeps it and a replay answers it.
pub fn env_lossy(name: &str) -> Option<String> {
    crate::seam::env(name)
}

/// What opening a device node read-only said.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NodeState {
    /// Opened (and closed again).
    Openable,
    /// ENOENT: the node does not exist.
    Missing,
    /// EACCES / EPERM: it exists but this user may not open it.
    PermissionDenied,
    /// ENXIO / ENODEV: the node exists but no driver answers behind it
    /// (stale node, kernel module not loaded).
    NoDriver,
    /// Anything else, as the OS worded it.
    Other(String),
}

/// One device node and what opening it said.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceNode {
    pub path: String,
    pub state: NodeState,
}

/// The NVIDIA device nodes a CUDA process needs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceNodes {
    /// /dev/nvidiactl, the driver's control node.
    pub control: DeviceNode,
    /// /dev/nvidia-uvm, unified memory (every CUDA context needs it).
    pub uvm: DeviceNode,
    /// /dev/nvidia0, /dev/nvidia1, ... in numeric order (one per GPU).
    pub gpus: Vec<DeviceNode>,
}

/// Probe the NVIDIA device nodes under /dev.
pub fn device_nodes() -> DeviceNodes {
    device_nodes_in(Path::new("/dev"))
}

/// Probe the NVIDIA device nodes under `dev` (a directory laid out like /dev).
pub fn device_nodes_in(dev: &Path) -> DeviceNodes {
    crate::seam::answer("host::device_nodes_in", &dev.display().to_string(), || {
        let node = |name: &str| {
            let path = dev.join(name);
            DeviceNode {
                path: path.to_string_lossy().into_owned(),
                state: open_state(&path),
            }
        };
        let mut minors: Vec<u32> = fs::read_dir(dev)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| gpu_minor(&e.file_name().to_string_lossy()))
                    .collect()
            })
            .unwrap_or_default();
        minors.sort_unstable();
        DeviceNodes {
            control: node("nvidiactl"),
            uvm: node("nvidia-uvm"),
            gpus: minors
                .into_iter()
                .map(|m| node(&format!("nvidia{m}")))
                .collect(),
        }
    })
}

/// The minor number of a per-GPU node name (`nvidia3` -> 3); `None` for
/// nvidiactl, nvidia-uvm, nvidia-modeset and anything else.
pub fn gpu_minor(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("nvidia")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn open_state(path: &Path) -> NodeState {
    // Read-only, like a permission probe; the descriptor closes on drop.
    match fs::OpenOptions::new().read(true).open(path) {
        Ok(_) => NodeState::Openable,
        Err(e) => classify_open_error(&e),
    }
}

/// Map an open(2) error to a [`NodeState`].
pub fn classify_open_error(e: &io::Error) -> NodeState {
    match e.raw_os_error() {
        Some(libc::ENOENT) => NodeState::Missing,
        Some(libc::EACCES) | Some(libc::EPERM) => NodeState::PermissionDenied,
        Some(libc::ENXIO) | Some(libc::ENODEV) => NodeState::NoDriver,
        _ => NodeState::Other(e.to_string()),
    }
}

/// The first line of /proc/driver/nvidia/version when the NVIDIA kernel
/// module is loaded ("NVRM version: NVIDIA UNIX x86_64 Kernel Module 570.86.15 ...").
pub fn kernel_module_version() -> Option<String> {
    crate::seam::answer("host::kernel_module_version", "", || {
        fs::read_to_string("/proc/driver/nvidia/version")
            .ok()
            .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
            .filter(|l| !l.is_empty())
    })
}

/// Where the NVIDIA user-space driver looks for nvidia-modprobe.
const NVIDIA_MODPROBE_PATHS: &[&str] = &[
    "/usr/bin/nvidia-modprobe",
    "/usr/sbin/nvidia-modprobe",
    "/bin/nvidia-modprobe",
    "/sbin/nvidia-modprobe",
];

/// The path of an nvidia-modprobe that is setuid root, if one is installed.
/// The CUDA and NVML libraries fork/exec it when a device node is missing,
/// so such a node is created on first use (nvidia-modprobe(1): "installed
/// setuid root" by nvidia-installer; "the NVIDIA user-space driver
/// components will fork(2)/exec(3) it when needed").
pub fn setuid_nvidia_modprobe() -> Option<String> {
    crate::seam::answer("host::setuid_nvidia_modprobe", "", || {
        NVIDIA_MODPROBE_PATHS
            .iter()
            .find(|p| is_setuid_root(Path::new(p)))
            .map(|p| p.to_string())
    })
}

/// True for a regular file owned by root with the setuid bit set.
pub fn is_setuid_root(path: &Path) -> bool {
    crate::seam::answer("host::is_setuid_root", &path.display().to_string(), || {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(path)
            .map(|m| m.is_file() && m.uid() == 0 && m.mode() & 0o4000 != 0)
            .unwrap_or(false)
    })
}

/// What statvfs/statfs said about /dev/shm.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ShmFacts {
    /// /dev/shm does not exist.
    Missing,
    /// It exists but could not be queried.
    Unreadable(String),
    Mounted {
        size_bytes: u64,
        available_bytes: u64,
        /// True when the filesystem is a tmpfs (memory-backed).
        tmpfs: bool,
    },
}

/// Probe /dev/shm.
pub fn shm() -> ShmFacts {
    shm_at(Path::new("/dev/shm"))
}

/// Probe a shared-memory mount point at `path`.
// The statvfs field types are 32-bit on some targets, hence the casts.
#[allow(clippy::unnecessary_cast)]
pub fn shm_at(path: &Path) -> ShmFacts {
    crate::seam::answer("host::shm_at", &path.display().to_string(), || {
        match nix::sys::statvfs::statvfs(path) {
            Err(nix::errno::Errno::ENOENT) => ShmFacts::Missing,
            Err(e) => ShmFacts::Unreadable(e.desc().to_string()),
            Ok(v) => {
                let frsize = v.fragment_size() as u64;
                let tmpfs = nix::sys::statfs::statfs(path)
                    .map(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
                    .unwrap_or(true);
                ShmFacts::Mounted {
                    size_bytes: (v.blocks() as u64).saturating_mul(frsize),
                    available_bytes: (v.blocks_available() as u64).saturating_mul(frsize),
                    tmpfs,
                }
            }
        }
    })
}

/// A resource limit pair; `None` means unlimited (RLIM_INFINITY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rlimit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// The limits a training process started from here inherits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LimitsFacts {
    /// RLIMIT_MEMLOCK in bytes.
    pub memlock: Rlimit,
    /// RLIMIT_NOFILE (open file descriptors).
    pub nofile: Rlimit,
    /// RDMA devices under /sys/class/infiniband (mlx5_0, efa_0, ...).
    pub rdma_devices: Vec<String>,
    /// /dev/infiniband/uverbs* exists: a process here can open the RDMA
    /// devices (sysfs lists the host's devices even in a container that was
    /// not given them).
    pub uverbs_nodes: bool,
}

/// Probe RLIMIT_MEMLOCK, RLIMIT_NOFILE and the RDMA devices.
pub fn limits() -> Result<LimitsFacts, String> {
    crate::seam::answer("host::limits", "", || {
        let read = |r: Resource, name: &str| {
            getrlimit(r)
                .map(|(soft, hard)| Rlimit {
                    soft: finite(soft),
                    hard: finite(hard),
                })
                .map_err(|e| format!("getrlimit({name}) failed: {}", e.desc()))
        };
        let mut rdma_devices: Vec<String> =
            fs::read_dir(super::sysfs::sysfs_root().join("class/infiniband"))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
        rdma_devices.sort();
        Ok(LimitsFacts {
            memlock: read(Resource::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK")?,
            nofile: read(Resource::RLIMIT_NOFILE, "RLIMIT_NOFILE")?,
            rdma_devices,
            uverbs_nodes: fs::read_dir("/dev/infiniband")
                .map(|d| {
                    d.flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with("uverbs"))
                })
                .unwrap_or(false),
        })
    })
}

// rlim_t is 32-bit on some targets, hence the cast.
#[allow(clippy::unnecessary_cast)]
fn finite(v: libc::rlim_t) -> Option<u64> {
    if v == RLIM_INFINITY {
        None
    } else {
        Some(v as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_minor_takes_only_numbered_nodes() {
        assert_eq!(gpu_minor("nvidia0"), Some(0));
        assert_eq!(gpu_minor("nvidia12"), Some(12));
        assert_eq!(gpu_minor("nvidiactl"), None);
        assert_eq!(gpu_minor("nvidia-uvm"), None);
        assert_eq!(gpu_minor("nvidia-modeset"), None);
        assert_eq!(gpu_minor("nvidia"), None);
        assert_eq!(gpu_minor("nvme0"), None);
    }

    #[test]
    fn open_errors_are_told_apart() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(classify_open_error(&e(libc::ENOENT)), NodeState::Missing);
        assert_eq!(
            classify_open_error(&e(libc::EACCES)),
            NodeState::PermissionDenied
        );
        assert_eq!(classify_open_error(&e(libc::ENXIO)), NodeState::NoDriver);
        assert!(matches!(
            classify_open_error(&e(libc::EIO)),
            NodeState::Other(_)
        ));
    }

    #[test]
    fn device_nodes_are_found_and_opened_in_a_dev_tree() {
        let dev = tempfile::tempdir().expect("tempdir");
        for name in ["nvidiactl", "nvidia10", "nvidia2", "nvidia-modeset"] {
            fs::write(dev.path().join(name), b"").expect("write node");
        }
        let nodes = device_nodes_in(dev.path());
        assert_eq!(nodes.control.state, NodeState::Openable);
        assert_eq!(nodes.uvm.state, NodeState::Missing);
        let names: Vec<&str> = nodes
            .gpus
            .iter()
            .map(|n| n.path.rsplit('/').next().unwrap_or(""))
            .collect();
        assert_eq!(names, ["nvidia2", "nvidia10"]);
        assert!(nodes.gpus.iter().all(|n| n.state == NodeState::Openable));
    }

    #[test]
    fn empty_dev_tree_has_no_nodes() {
        let dev = tempfile::tempdir().expect("tempdir");
        let nodes = device_nodes_in(dev.path());
        assert_eq!(nodes.control.state, NodeState::Missing);
        assert!(nodes.gpus.is_empty());
    }

    #[test]
    fn shm_probe_reads_a_real_mount_and_a_missing_one() {
        let tmp = tempfile::tempdir().expect("tempdir");
        match shm_at(tmp.path()) {
            ShmFacts::Mounted { size_bytes, .. } => assert!(size_bytes > 0),
            other => panic!("expected a mounted filesystem, got {other:?}"),
        }
        assert_eq!(shm_at(&tmp.path().join("nope")), ShmFacts::Missing);
    }

    #[test]
    fn setuid_root_is_told_from_a_plain_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = dir.path().join("nvidia-modprobe");
        fs::write(&plain, b"").expect("write");
        // Owned by the test user (or root without the setuid bit): not it.
        assert!(!is_setuid_root(&plain));
        assert!(!is_setuid_root(&dir.path().join("missing")));
        assert!(!is_setuid_root(dir.path()));
    }

    #[test]
    fn limits_probe_answers() {
        let l = limits().expect("getrlimit works");
        assert!(l.nofile.soft.unwrap_or(u64::MAX) > 0);
    }
}

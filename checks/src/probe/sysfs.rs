//! Probe: the RDMA ports and kernel modules sysfs shows, and the NVIDIA
//! kernel module's /proc entry. Every read goes through a root folder that
//! stands for /sys (`GPUCHECK_SYSFS_ROOT`) or /proc (`GPUCHECK_PROC_ROOT`),
//! so tests read fixture trees. Plain facts; the fabric checks judge them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The folder that stands for /sys: `GPUCHECK_SYSFS_ROOT` when set.
pub fn sysfs_root() -> PathBuf {
    crate::seam::env("GPUCHECK_SYSFS_ROOT").map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
}

/// When this boot began, in seconds since the epoch: now minus
/// `<proc>/uptime`.
pub fn boot_epoch() -> Option<i64> {
    let secs = uptime_secs()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(now.as_secs() as i64 - secs as i64)
}

/// Seconds since this boot began (`<proc>/uptime`'s first field).
pub fn uptime_secs() -> Option<f64> {
    let uptime = attr(&proc_root().join("uptime"))?;
    uptime.split_whitespace().next()?.parse().ok()
}

/// The folder that stands for /proc: `GPUCHECK_PROC_ROOT` when set.
pub fn proc_root() -> PathBuf {
    crate::seam::env("GPUCHECK_PROC_ROOT").map_or_else(|| PathBuf::from("/proc"), PathBuf::from)
}

/// The most of one attribute read: sysfs gives at most a page (4 KiB).
const MAX_ATTR_BYTES: u64 = 64 * 1024;

/// A sysfs attribute as trimmed text (bytes that are not UTF-8 replaced);
/// `None` when it cannot be read (absent, or EINVAL for an unset GID type).
pub fn attr(path: &Path) -> Option<String> {
    crate::seam::answer("sysfs::attr", &path.display().to_string(), || {
        // A regular file (sysfs and /proc attributes are), read without
        // waiting: a FIFO in a tree that stands for /sys is not read.
        crate::input::read_regular(path, MAX_ATTR_BYTES)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
    })
}

/// One GID table entry of a port with an address.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gid {
    pub index: u32,
    /// "0000:0000:0000:0000:0000:ffff:0a00:0001".
    pub gid: String,
    /// "RoCE v2", "IB/RoCE v1"; `None` when sysfs does not say.
    pub kind: Option<String>,
}

/// A network interface of an RDMA device and its MTU.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Netdev {
    pub name: String,
    pub mtu: Option<u32>,
}

/// One port of an RDMA device (`class/infiniband/<device>/ports/<port>`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RdmaPort {
    /// "mlx5_0".
    pub device: String,
    pub port: u32,
    /// "4: ACTIVE"; `None` when unreadable.
    pub state: Option<String>,
    /// "5: LinkUp".
    pub phys_state: Option<String>,
    /// "400 Gb/sec (4X NDR)".
    pub rate: Option<String>,
    /// "InfiniBand" or "Ethernet" (RoCE).
    pub link_layer: Option<String>,
    /// The GIDs that are not all zero.
    pub gids: Vec<Gid>,
    /// The device's network interfaces (`device/net/*`).
    pub netdevs: Vec<Netdev>,
}

/// Every port of every RDMA device under `<root>/class/infiniband`, sorted.
/// No such folder is no devices; any other error on it is returned.
pub fn rdma_ports(root: &Path) -> Result<Vec<RdmaPort>, String> {
    crate::seam::answer("sysfs::rdma_ports", &root.display().to_string(), || {
        let class = root.join("class/infiniband");
        let devices = match fs::read_dir(&class) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("cannot list {}: {e}", class.display())),
        };
        let mut ports = Vec::new();
        for dev in devices.flatten() {
            let device = dev.file_name().to_string_lossy().into_owned();
            let dir = dev.path();
            let netdevs = netdevs_of(root, &dir);
            for (port, port_dir) in numbered_entries(&dir.join("ports")) {
                ports.push(RdmaPort {
                    device: device.clone(),
                    port,
                    state: attr(&port_dir.join("state")),
                    phys_state: attr(&port_dir.join("phys_state")),
                    rate: attr(&port_dir.join("rate")),
                    link_layer: attr(&port_dir.join("link_layer")),
                    gids: gids_of(&port_dir),
                    netdevs: netdevs.clone(),
                });
            }
        }
        ports.sort_by(|a, b| (&a.device, a.port).cmp(&(&b.device, b.port)));
        Ok(ports)
    })
}

/// The entries of `dir` whose names are numbers, sorted by number.
fn numbered_entries(dir: &Path) -> Vec<(u32, PathBuf)> {
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// The zero GID: an unused table entry.
const ZERO_GID: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

fn gids_of(port_dir: &Path) -> Vec<Gid> {
    numbered_entries(&port_dir.join("gids"))
        .into_iter()
        .filter_map(|(index, path)| {
            let gid = attr(&path)?;
            (!gid.is_empty() && gid != ZERO_GID).then(|| Gid {
                index,
                kind: attr(&port_dir.join("gid_attrs/types").join(index.to_string()))
                    .filter(|k| !k.is_empty()),
                gid,
            })
        })
        .collect()
}

/// The network interfaces of an RDMA device (`device/net/<name>`), with
/// the MTU from `class/net/<name>/mtu`.
fn netdevs_of(root: &Path, device_dir: &Path) -> Vec<Netdev> {
    let mut names: Vec<String> = fs::read_dir(device_dir.join("device/net"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| Netdev {
            mtu: attr(&root.join("class/net").join(&name).join("mtu")).and_then(|m| m.parse().ok()),
            name,
        })
        .collect()
}

/// What decides whether a NIC can read and write GPU memory.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PeerMemFacts {
    /// `<sysfs>/module/nvidia_peermem` exists (driver R470+).
    pub nvidia_peermem: bool,
    /// `<sysfs>/module/nv_peer_mem` exists (the older Mellanox module).
    pub nv_peer_mem: bool,
    /// `<sysfs>/module/nvidia/version`: "570.86.15".
    pub nvidia_module: Option<String>,
    /// First line of `<proc>/driver/nvidia/version`.
    pub nvidia_proc_version: Option<String>,
    /// Kernel release: `<proc>/sys/kernel/osrelease`, else uname.
    pub kernel_release: Option<String>,
}

/// Read the GPUDirect RDMA facts through the two roots.
pub fn peermem_facts(sys: &Path, proc: &Path) -> PeerMemFacts {
    crate::seam::answer(
        "sysfs::peermem_facts",
        &format!("{}, {}", sys.display(), proc.display()),
        || {
            let kernel_release = attr(&proc.join("sys/kernel/osrelease"))
                .filter(|r| !r.is_empty())
                .or_else(|| {
                    nix::sys::utsname::uname()
                        .ok()
                        .map(|u| u.release().to_string_lossy().into_owned())
                });
            PeerMemFacts {
                nvidia_peermem: sys.join("module/nvidia_peermem").is_dir(),
                nv_peer_mem: sys.join("module/nv_peer_mem").is_dir(),
                nvidia_module: attr(&sys.join("module/nvidia/version")).filter(|v| !v.is_empty()),
                nvidia_proc_version: attr(&proc.join("driver/nvidia/version"))
                    .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
                    .filter(|l| !l.is_empty()),
                kernel_release,
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &[u8]) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    #[test]
    fn ports_gids_and_netdevs_are_read_from_the_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = dir.path();
        let port = "class/infiniband/mlx5_0/ports/1";
        write(r, &format!("{port}/state"), b"4: ACTIVE\n");
        write(r, &format!("{port}/phys_state"), b"5: LinkUp\n");
        write(r, &format!("{port}/rate"), b"200 Gb/sec (4X HDR)\n");
        write(r, &format!("{port}/link_layer"), b"Ethernet\n");
        write(
            r,
            &format!("{port}/gids/0"),
            b"fe80:0000:0000:0000:0a00:00ff:fe00:0001\n",
        );
        write(
            r,
            &format!("{port}/gids/1"),
            b"0000:0000:0000:0000:0000:ffff:0a00:0001\n",
        );
        write(
            r,
            &format!("{port}/gids/2"),
            format!("{ZERO_GID}\n").as_bytes(),
        );
        write(r, &format!("{port}/gid_attrs/types/1"), b"RoCE v2\n");
        write(r, "class/infiniband/mlx5_0/device/net/eth2/ifindex", b"4\n");
        write(r, "class/net/eth2/mtu", b"9000\n");
        let ports = rdma_ports(r).expect("read");
        assert_eq!(ports.len(), 1);
        let p = &ports[0];
        assert_eq!((p.device.as_str(), p.port), ("mlx5_0", 1));
        assert_eq!(p.state.as_deref(), Some("4: ACTIVE"));
        assert_eq!(p.gids.len(), 2);
        assert_eq!(p.gids[0].kind, None);
        assert_eq!(p.gids[1].kind.as_deref(), Some("RoCE v2"));
        assert_eq!(
            p.netdevs,
            [Netdev {
                name: "eth2".into(),
                mtu: Some(9000)
            }]
        );
    }

    #[test]
    fn no_class_folder_is_no_devices() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(rdma_ports(dir.path()), Ok(vec![]));
    }

    #[test]
    fn module_and_kernel_facts_come_through_the_roots() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (sys, proc) = (dir.path().join("sys"), dir.path().join("proc"));
        write(&sys, "module/nvidia_peermem/refcnt", b"0\n");
        write(&sys, "module/nvidia/version", b"570.86.15\n");
        write(&proc, "sys/kernel/osrelease", b"6.8.0-45-generic\n");
        write(
            &proc,
            "driver/nvidia/version",
            b"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\nGCC version: gcc 12\n",
        );
        let f = peermem_facts(&sys, &proc);
        assert!(f.nvidia_peermem && !f.nv_peer_mem);
        assert_eq!(f.nvidia_module.as_deref(), Some("570.86.15"));
        assert_eq!(f.kernel_release.as_deref(), Some("6.8.0-45-generic"));
        assert!(f
            .nvidia_proc_version
            .is_some_and(|v| v.contains("Open Kernel Module")));
    }
}

//! Host facts every report carries: hostname, OS, kernel, CPU, memory and
//! whether we run inside a container. Read through sysinfo (uname,
//! /etc/os-release, /proc/cpuinfo, /proc/meminfo) plus the container markers;
//! never fails (unknown fields are "unknown").

use std::fs;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sysinfo::{CpuRefreshKind, MemoryRefreshKind, System};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostFacts {
    pub hostname: String,
    /// PRETTY_NAME from /etc/os-release.
    pub os: String,
    /// Kernel release (uname -r).
    pub kernel: String,
    pub arch: String,
    /// CPU model name from /proc/cpuinfo.
    pub cpu: String,
    pub cpu_count: u32,
    pub memory_total_mib: u64,
    /// "docker", "podman", "kubernetes", "containerd", "lxc", or null on bare metal / VM.
    pub container: Option<String>,
}

/// Gather the host facts. Cheap: uname, /etc/os-release, the CPU list
/// and /proc/meminfo, nothing per process.
pub fn host_facts() -> HostFacts {
    crate::seam::answer("system::host_facts", "", || {
        let mut system = System::new();
        system.refresh_cpu_list(CpuRefreshKind::nothing());
        system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
        let unknown = || "unknown".to_string();
        HostFacts {
            hostname: System::host_name().unwrap_or_else(unknown),
            os: pretty_name(&fs::read_to_string("/etc/os-release").unwrap_or_default())
                .or_else(|| os_name(System::name(), System::os_version()))
                .unwrap_or_else(unknown),
            kernel: System::kernel_version().unwrap_or_else(unknown),
            arch: System::cpu_arch(),
            cpu: system
                .cpus()
                .first()
                .map(|c| c.brand().trim().to_string())
                .filter(|b| !b.is_empty())
                .unwrap_or_else(unknown),
            cpu_count: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(0),
            memory_total_mib: system.total_memory() / (1024 * 1024),
            container: container(),
        }
    })
}

/// PRETTY_NAME from os-release text ("Ubuntu 22.04.4 LTS"). sysinfo reads
/// only NAME and VERSION_ID, which lose the point release and "LTS".
fn pretty_name(os_release: &str) -> Option<String> {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}

/// "Ubuntu 22.04", from os-release's NAME and VERSION_ID (or lsb-release),
/// where there is no PRETTY_NAME.
fn os_name(name: Option<String>, version: Option<String>) -> Option<String> {
    match (name, version) {
        (Some(n), Some(v)) => Some(format!("{n} {v}")),
        (n, _) => n,
    }
}

/// The container runtime gpucheck runs under ("docker", "kubernetes", ...),
/// `None` on bare metal or a VM. Cheap: a few file tests.
pub fn container() -> Option<String> {
    crate::seam::answer("system::container", "", || {
        detect_container(
            std::path::Path::new("/.dockerenv").exists(),
            std::path::Path::new("/run/.containerenv").exists(),
            crate::seam::env("KUBERNETES_SERVICE_HOST").is_some(),
            &fs::read_to_string("/proc/1/cgroup").unwrap_or_default(),
            crate::seam::env("container").as_deref(),
        )
    })
}

/// Pure container detection from the usual markers.
pub fn detect_container(
    dockerenv: bool,
    containerenv: bool,
    kubernetes: bool,
    pid1_cgroup: &str,
    container_var: Option<&str>,
) -> Option<String> {
    if kubernetes || pid1_cgroup.contains("kubepods") {
        return Some("kubernetes".to_string());
    }
    if dockerenv || pid1_cgroup.contains("/docker") {
        return Some("docker".to_string());
    }
    if containerenv || container_var == Some("podman") {
        return Some("podman".to_string());
    }
    if pid1_cgroup.contains("containerd") {
        return Some("containerd".to_string());
    }
    if container_var == Some("lxc") || pid1_cgroup.contains("/lxc") {
        return Some("lxc".to_string());
    }
    container_var
        .filter(|v| !v.is_empty())
        .map(|v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_is_the_pretty_name() {
        assert_eq!(
            pretty_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(pretty_name("NAME=x\nPRETTY_NAME=\"\"\n"), None);
    }

    #[test]
    fn os_name_joins_name_and_version() {
        assert_eq!(
            os_name(Some("Ubuntu".into()), Some("22.04".into())).as_deref(),
            Some("Ubuntu 22.04")
        );
        assert_eq!(
            os_name(Some("Arch Linux".into()), None).as_deref(),
            Some("Arch Linux")
        );
        assert_eq!(os_name(None, Some("12".into())), None);
    }

    #[test]
    fn detects_containers() {
        assert_eq!(
            detect_container(true, false, false, "", None).as_deref(),
            Some("docker")
        );
        assert_eq!(
            detect_container(false, false, false, "0::/kubepods/burstable/pod1", None).as_deref(),
            Some("kubernetes")
        );
        assert_eq!(
            detect_container(false, true, false, "", None).as_deref(),
            Some("podman")
        );
        assert_eq!(detect_container(false, false, false, "0::/", None), None);
    }

    #[test]
    fn host_facts_never_fail() {
        let h = host_facts();
        assert!(!h.hostname.is_empty());
        assert!(h.cpu_count >= 1);
        assert!(h.memory_total_mib > 0);
        assert_ne!(h.cpu, "unknown");
        assert_ne!(h.kernel, "unknown");
    }
}

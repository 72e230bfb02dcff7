//! Host facts every report carries: hostname, OS, kernel, CPU, memory and
//! whether we run inside a container. Read from /proc, /etc and uname; never
//! fails (unknown fields are "unknown").

use std::fs;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// Gather the host facts. Cheap (a handful of small file reads).
pub fn host_facts() -> HostFacts {
    let uts = nix::sys::utsname::uname().ok();
    let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uts.as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_else(|| "unknown".to_string())
    };
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let os_release = fs::read_to_string("/etc/os-release").unwrap_or_default();
    HostFacts {
        hostname: field(|u| u.nodename()),
        os: parse_os_release(&os_release).unwrap_or_else(|| "unknown".to_string()),
        kernel: field(|u| u.release()),
        arch: field(|u| u.machine()),
        cpu: parse_cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".to_string()),
        cpu_count: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(0),
        memory_total_mib: parse_mem_total_kib(&meminfo).unwrap_or(0) / 1024,
        container: container(),
    }
}

/// The container runtime gpucheck runs under ("docker", "kubernetes", ...),
/// `None` on bare metal or a VM. Cheap: a few file tests.
pub fn container() -> Option<String> {
    detect_container(
        std::path::Path::new("/.dockerenv").exists(),
        std::path::Path::new("/run/.containerenv").exists(),
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        &fs::read_to_string("/proc/1/cgroup").unwrap_or_default(),
        std::env::var("container").ok().as_deref(),
    )
}

fn parse_os_release(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
}

fn parse_cpu_model(text: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn parse_mem_total_kib(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
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
    fn parses_proc_files() {
        assert_eq!(
            parse_os_release("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            parse_cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 9654\n").as_deref(),
            Some("AMD EPYC 9654")
        );
        assert_eq!(
            parse_mem_total_kib("MemTotal:       24576000 kB\n"),
            Some(24576000)
        );
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
    }
}

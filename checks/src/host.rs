//! The host checks: what the machine (or container) underneath the GPUs must
//! provide before any CUDA call can work well — the NVIDIA device nodes, a
//! /dev/shm large enough for NCCL and DataLoader workers, and resource limits
//! that do not choke RDMA or file-descriptor passing.

use crate::probe::host::{self as hp, DeviceNode, DeviceNodes, LimitsFacts, NodeState, ShmFacts};
use crate::probe::system;
use crate::{Check, Context, Outcome, Profile};

const MIB: u64 = 1024 * 1024;

// ---------------------------------------------------------------- host.devices

pub struct Devices;

/// What `host.devices` judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicesFacts {
    pub nodes: DeviceNodes,
    /// "docker", "kubernetes", ... or `None` on bare metal / a VM.
    pub container: Option<String>,
    /// First line of /proc/driver/nvidia/version, when the module is loaded.
    pub kernel_module: Option<String>,
    /// A setuid-root nvidia-modprobe (its path): CUDA and NVML run it to
    /// create a missing node on first use.
    pub nvidia_modprobe: Option<String>,
    /// /dev/dxg exists: WSL 2, where CUDA reaches the GPU through the
    /// DirectX kernel interface and there are no /dev/nvidia* nodes.
    pub wsl_dxg: bool,
}

impl Check for Devices {
    fn id(&self) -> &'static str {
        "host.devices"
    }
    fn title(&self) -> &'static str {
        "NVIDIA device nodes"
    }
    fn health(&self) -> bool {
        true
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Checks that /dev/nvidiactl, /dev/nvidia-uvm and one /dev/nvidiaN node per GPU exist and can be opened by this user.\n\n\
         Every CUDA process, and therefore every DDP rank, talks to the driver through these device \
         files. When they are missing the driver reports no devices at all (cuInit fails with \
         CUDA_ERROR_NO_DEVICE or 'unknown error'), whatever the installed driver and libraries say. \
         gpucheck opens each node read-only and tells a missing node (ENOENT) from one this user may \
         not open (EACCES) and from a node with no driver behind it (ENXIO).\n\n\
         In a container the nodes are missing because no GPU was passed in: start it with \
         `docker run --gpus all` (NVIDIA Container Toolkit on the host), `podman run --device \
         nvidia.com/gpu=all`, or request the `nvidia.com/gpu` resource in the Kubernetes pod spec.\n\n\
         On bare metal, missing nodes mean the driver is not installed or not loaded: install it, run \
         `sudo modprobe nvidia` (and `nvidia-uvm`), and check with `nvidia-smi`, which also creates \
         the nodes. With the driver loaded and nvidia-modprobe installed setuid root, the first \
         CUDA or NVML call creates missing nodes itself, so that is only a warning: create them at \
         boot anyway, or containers started earlier will lack them. Under WSL 2 CUDA goes through \
         /dev/dxg and there are no such nodes, so the check is skipped. A permission error means the user is not in the group that owns the nodes \
         (`ls -l /dev/nvidia*`, usually `video`)."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        evaluate_devices(&DevicesFacts {
            nodes: hp::device_nodes(),
            container: system::host_facts().container,
            kernel_module: hp::kernel_module_version(),
            nvidia_modprobe: hp::setuid_nvidia_modprobe(),
            wsl_dxg: std::path::Path::new("/dev/dxg").exists(),
        })
    }
}

/// Judge the device nodes: every required node must open.
pub fn evaluate_devices(f: &DevicesFacts) -> Outcome {
    let required: Vec<&DeviceNode> = [&f.nodes.control, &f.nodes.uvm]
        .into_iter()
        .chain(f.nodes.gpus.iter())
        .collect();
    let with = |pred: fn(&NodeState) -> bool| -> Vec<&str> {
        required
            .iter()
            .filter(|n| pred(&n.state))
            .map(|n| n.path.as_str())
            .collect()
    };
    let mut missing = with(|s| *s == NodeState::Missing);
    if f.nodes.gpus.is_empty() {
        missing.push("/dev/nvidiaN (no GPU node at all)");
    }
    let denied = with(|s| *s == NodeState::PermissionDenied);
    let no_driver = with(|s| *s == NodeState::NoDriver);
    let other: Vec<String> = required
        .iter()
        .filter_map(|n| match &n.state {
            NodeState::Other(e) => Some(format!("{} ({e})", n.path)),
            _ => None,
        })
        .collect();

    let gpu_nodes = f.nodes.gpus.len() as f64;
    if missing.is_empty() && denied.is_empty() && no_driver.is_empty() && other.is_empty() {
        return Outcome::pass(format!(
            "/dev/nvidiactl, /dev/nvidia-uvm and {} GPU node{} ({}) open",
            f.nodes.gpus.len(),
            if f.nodes.gpus.len() == 1 { "" } else { "s" },
            node_range(&f.nodes.gpus)
        ))
        .with_metric("gpu_device_nodes", gpu_nodes, "count");
    }

    // Bare metal with the driver loaded: the first CUDA or NVML call runs the
    // setuid nvidia-modprobe, which loads nvidia-uvm and creates the missing
    // nodes (nvidia-modprobe(1)), so the job works; only a container
    // started before they exist cannot get them.
    let created_on_first_use = denied.is_empty()
        && no_driver.is_empty()
        && other.is_empty()
        && f.container.is_none()
        && f.kernel_module.is_some();
    if let (true, Some(modprobe)) = (created_on_first_use, &f.nvidia_modprobe) {
        return Outcome::warn(
            format!(
                "missing: {}; the driver is loaded and {modprobe} (setuid root) creates them when \
                 CUDA first starts",
                missing.join(", ")
            ),
            "create them now with `sudo nvidia-modprobe -u -c=0` (nvidia-uvm) and `sudo \
             nvidia-smi` (every /dev/nvidiaN), and have them made at boot (nvidia-persistenced \
             or a udev rule) so containers started on this host get them too",
        )
        .with_metric("gpu_device_nodes", gpu_nodes, "count");
    }

    // NVIDIA, "CUDA on WSL User Guide": the GPU is reached through /dev/dxg
    // and the driver libraries in /usr/lib/wsl/lib; nvidia* nodes never exist.
    if f.wsl_dxg && f.nodes.control.state == NodeState::Missing && f.nodes.gpus.is_empty() {
        return Outcome::skip(
            "WSL 2 (/dev/dxg present): CUDA reaches the GPU through /dev/dxg, not /dev/nvidia* \
             nodes; gpu.driver tells whether the driver answers",
        );
    }

    let place = match &f.container {
        Some(c) => format!(" inside this {c} container"),
        None => String::new(),
    };
    let mut parts = Vec::new();
    let mut hints = Vec::new();
    let none_at_all = f.nodes.control.state == NodeState::Missing
        && f.nodes.uvm.state == NodeState::Missing
        && f.nodes.gpus.is_empty();
    if none_at_all {
        parts.push(format!(
            "no NVIDIA device nodes{place}: /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia0.. \
             are all missing"
        ));
        hints.push(missing_hint(f, &missing));
    } else if !missing.is_empty() {
        parts.push(format!("missing{place}: {}", missing.join(", ")));
        hints.push(missing_hint(f, &missing));
    }
    if !denied.is_empty() {
        parts.push(format!(
            "permission denied (EACCES) opening {}",
            denied.join(", ")
        ));
        hints.push(if f.container.is_some() {
            "the container may not open the GPU nodes: pass GPUs with `--gpus all` (or the \
             nvidia.com/gpu resource) rather than bare --device flags, and run as a user in the \
             group that owns them (`ls -l /dev/nvidia*`)"
                .to_string()
        } else {
            "add the user to the group that owns the nodes (`ls -l /dev/nvidia*`, usually video: \
             `sudo usermod -aG video $USER`, then log in again), or fix the driver's \
             NVreg_DeviceFileMode / udev rule"
                .to_string()
        });
    }
    if !no_driver.is_empty() {
        parts.push(format!(
            "no driver behind {} (ENXIO/ENODEV)",
            no_driver.join(", ")
        ));
        hints.push(
            "the node exists but the kernel module does not answer: `sudo modprobe nvidia` \
             (and `sudo modprobe nvidia-uvm`), then look at `dmesg | grep -i nvrm`"
                .to_string(),
        );
    }
    if !other.is_empty() {
        parts.push(format!("cannot open {}", other.join(", ")));
        hints.push("look at `dmesg | grep -i nvrm` and `ls -l /dev/nvidia*`".to_string());
    }
    Outcome::fail(parts.join("; "), hints.join("; also ")).with_metric(
        "gpu_device_nodes",
        gpu_nodes,
        "count",
    )
}

fn missing_hint(f: &DevicesFacts, missing: &[&str]) -> String {
    match f.container.as_deref() {
        Some("kubernetes") => "no GPU was assigned to this pod: request it in the pod spec \
             (resources.limits: nvidia.com/gpu: N), which needs the NVIDIA device plugin or GPU \
             Operator on the node"
            .to_string(),
        Some("podman") => "no GPU was passed into this container: `podman run --device \
             nvidia.com/gpu=all ...` (CDI spec from `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)"
            .to_string(),
        Some(_) => "no GPU was passed into this container: start it with `docker run --gpus all ...` \
             (needs the NVIDIA Container Toolkit on the host: `sudo nvidia-ctk runtime configure \
             --runtime=docker`), or in Kubernetes request the nvidia.com/gpu resource"
            .to_string(),
        None => match &f.kernel_module {
            None => "the NVIDIA kernel module is not loaded: install the driver, run `sudo modprobe \
                 nvidia`, and check with `nvidia-smi`"
                .to_string(),
            Some(_) if missing.iter().all(|m| m.contains("nvidia-uvm")) => {
                "the nvidia-uvm module is not loaded: `sudo modprobe nvidia-uvm` (or `sudo \
                 nvidia-modprobe -u -c=0`)"
                    .to_string()
            }
            Some(_) => "the driver is loaded but its device nodes were not created: run `sudo \
                 nvidia-smi` once (or `sudo nvidia-modprobe -u -c=0`), or enable \
                 nvidia-persistenced so they exist at boot"
                .to_string(),
        },
    }
}

/// "/dev/nvidia0../dev/nvidia7" or the single node.
fn node_range(gpus: &[DeviceNode]) -> String {
    match (gpus.first(), gpus.last()) {
        (Some(a), Some(b)) if gpus.len() > 1 => format!("{}..{}", a.path, b.path),
        (Some(a), _) => a.path.clone(),
        _ => "none".to_string(),
    }
}

// ---------------------------------------------------------------- host.shm

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
            system::host_facts().container.as_deref(),
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

/// "64 MiB", "1.0 GiB", "23.5 GiB".
fn show_mib(mib: u64) -> String {
    if mib >= 1024 {
        format!("{:.1} GiB", mib as f64 / 1024.0)
    } else {
        format!("{mib} MiB")
    }
}

// ---------------------------------------------------------------- host.limits

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

/// Judge the limits.
pub fn evaluate_limits(f: &LimitsFacts, t: &LimitsThresholds) -> Outcome {
    let mut problems = Vec::new();
    let mut hints = Vec::new();
    let mut notes = Vec::new();

    match f.memlock.soft {
        None => notes.push("memlock unlimited".to_string()),
        Some(bytes) if !f.rdma_devices.is_empty() && !f.uverbs_nodes => {
            // sysfs shows the host's RDMA devices, but without the uverbs
            // nodes no process here can open them: NCCL uses TCP sockets
            // between nodes, and the memlock limit is not what stops it.
            problems.push(format!(
                "memlock is {} and RDMA devices ({}) are listed, but /dev/infiniband/uverbs* is \
                 missing: NCCL cannot use InfiniBand here and falls back to TCP sockets between nodes",
                show_bytes(bytes),
                f.rdma_devices.join(", ")
            ));
            hints.push(
                "for a multi-node job, pass the RDMA devices in with the limit: `docker run \
                 --device=/dev/infiniband --ulimit memlock=-1 ...` (Kubernetes: the RDMA device \
                 plugin; bare metal: `sudo modprobe ib_uverbs`); a single-node job does not need them",
            );
        }
        Some(bytes) if !f.rdma_devices.is_empty() => {
            problems.push(format!(
                "memlock is {} with RDMA devices ({}): NCCL cannot register its InfiniBand buffers",
                show_bytes(bytes),
                f.rdma_devices.join(", ")
            ));
            hints.push(if f.memlock.hard.is_none() {
                "the hard limit is unlimited: add `ulimit -l unlimited` to the launch script"
            } else {
                "`docker run --ulimit memlock=-1`, or `* - memlock unlimited` in \
                 /etc/security/limits.conf (LimitMEMLOCK=infinity for systemd)"
            });
        }
        Some(bytes) => notes.push(format!(
            "memlock {} (no RDMA devices, so NCCL does not need more)",
            show_bytes(bytes)
        )),
    }

    match f.nofile.soft {
        Some(soft) if soft < t.nofile_warn_below => {
            problems.push(format!(
                "open files limit is {soft}, below {}: DataLoader workers and NCCL can hit 'Too many open files'",
                t.nofile_warn_below
            ));
            if f.nofile.hard.is_none_or(|h| h >= t.nofile_warn_below) {
                hints
                    .push("the hard limit allows more: add `ulimit -n 65536` to the launch script");
            } else {
                hints.push(
                    "`docker run --ulimit nofile=65536:65536`, or `* - nofile 65536` in \
                     /etc/security/limits.conf (LimitNOFILE=65536 for systemd)",
                );
            }
        }
        Some(soft) => notes.push(format!("nofile {soft}")),
        None => notes.push("nofile unlimited".to_string()),
    }

    let mut o = if problems.is_empty() {
        Outcome::pass(notes.join(", "))
    } else {
        Outcome::warn(problems.join("; "), hints.join("; "))
    };
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

fn show_bytes(bytes: u64) -> String {
    if bytes >= MIB {
        show_mib(bytes / MIB)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::host::Rlimit;
    use crate::Status;

    fn node(path: &str, state: NodeState) -> DeviceNode {
        DeviceNode {
            path: path.to_string(),
            state,
        }
    }

    fn healthy_nodes(gpus: u32) -> DeviceNodes {
        DeviceNodes {
            control: node("/dev/nvidiactl", NodeState::Openable),
            uvm: node("/dev/nvidia-uvm", NodeState::Openable),
            gpus: (0..gpus)
                .map(|i| node(&format!("/dev/nvidia{i}"), NodeState::Openable))
                .collect(),
        }
    }

    fn missing_nodes() -> DeviceNodes {
        DeviceNodes {
            control: node("/dev/nvidiactl", NodeState::Missing),
            uvm: node("/dev/nvidia-uvm", NodeState::Missing),
            gpus: vec![],
        }
    }

    fn devices(nodes: DeviceNodes, container: Option<&str>, module: bool) -> Outcome {
        evaluate_devices(&DevicesFacts {
            nodes,
            container: container.map(String::from),
            kernel_module: module.then(|| "NVRM version: 570.86.15".to_string()),
            nvidia_modprobe: None,
            wsl_dxg: false,
        })
    }

    fn devices_with_modprobe(nodes: DeviceNodes, container: Option<&str>, module: bool) -> Outcome {
        evaluate_devices(&DevicesFacts {
            nodes,
            container: container.map(String::from),
            kernel_module: module.then(|| "NVRM version: 570.86.15".to_string()),
            nvidia_modprobe: Some("/usr/bin/nvidia-modprobe".into()),
            wsl_dxg: false,
        })
    }

    #[test]
    fn devices_on_wsl2_are_not_applicable() {
        let o = evaluate_devices(&DevicesFacts {
            nodes: missing_nodes(),
            container: None,
            kernel_module: None,
            nvidia_modprobe: None,
            wsl_dxg: true,
        });
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.starts_with("WSL 2 (/dev/dxg present)"),
            "{}",
            o.summary
        );
        // A WSL distribution that does have nvidia nodes is judged as usual.
        let mut nodes = healthy_nodes(1);
        nodes.uvm.state = NodeState::Missing;
        let o = evaluate_devices(&DevicesFacts {
            nodes,
            container: None,
            kernel_module: None,
            nvidia_modprobe: None,
            wsl_dxg: true,
        });
        assert_eq!(o.status, Status::Fail);
    }

    #[test]
    fn devices_missing_uvm_on_bare_metal_with_setuid_modprobe_warns() {
        let mut nodes = healthy_nodes(8);
        nodes.uvm.state = NodeState::Missing;
        let o = devices_with_modprobe(nodes, None, true);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "missing: /dev/nvidia-uvm; the driver is loaded and /usr/bin/nvidia-modprobe \
             (setuid root) creates them when CUDA first starts"
        );
        assert!(
            hint(&o).contains("sudo nvidia-modprobe -u -c=0"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("gpu_device_nodes"), Some(8.0));
    }

    #[test]
    fn devices_missing_with_setuid_modprobe_still_fail_where_it_cannot_help() {
        // In a container nvidia-modprobe cannot create host nodes.
        let mut nodes = healthy_nodes(2);
        nodes.uvm.state = NodeState::Missing;
        let o = devices_with_modprobe(nodes.clone(), Some("docker"), true);
        assert_eq!(o.status, Status::Fail);
        assert!(hint(&o).contains("--gpus all"), "{}", hint(&o));
        // Without the kernel module there is nothing to create nodes for.
        let o = devices_with_modprobe(missing_nodes(), None, false);
        assert_eq!(o.status, Status::Fail);
        assert!(hint(&o).contains("modprobe nvidia"), "{}", hint(&o));
        // A node that exists but may not be opened is not a missing one.
        nodes.gpus[1].state = NodeState::PermissionDenied;
        let o = devices_with_modprobe(nodes, None, true);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("permission denied"), "{}", o.summary);
    }

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    #[test]
    fn devices_pass_when_all_nodes_open() {
        let o = devices(healthy_nodes(8), None, true);
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.contains("8 GPU nodes"), "{}", o.summary);
        assert!(
            o.summary.contains("/dev/nvidia0../dev/nvidia7"),
            "{}",
            o.summary
        );
        assert_eq!(o.metric("gpu_device_nodes"), Some(8.0));
    }

    #[test]
    fn devices_missing_in_docker_says_gpus_all() {
        let o = devices(missing_nodes(), Some("docker"), false);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "no NVIDIA device nodes inside this docker container: /dev/nvidiactl, \
             /dev/nvidia-uvm and /dev/nvidia0.. are all missing"
        );
        assert!(hint(&o).contains("--gpus all"), "{}", hint(&o));
        assert!(
            hint(&o).contains("NVIDIA Container Toolkit"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn devices_missing_in_kubernetes_says_gpu_resource() {
        let o = devices(missing_nodes(), Some("kubernetes"), false);
        assert_eq!(o.status, Status::Fail);
        assert!(hint(&o).contains("nvidia.com/gpu"), "{}", hint(&o));
    }

    #[test]
    fn devices_missing_in_podman_says_cdi() {
        let o = devices(missing_nodes(), Some("podman"), false);
        assert!(
            hint(&o).contains("--device nvidia.com/gpu=all"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn devices_missing_on_bare_metal_without_module_says_load_driver() {
        let o = devices(missing_nodes(), None, false);
        assert_eq!(o.status, Status::Fail);
        assert!(!o.summary.contains("container"), "{}", o.summary);
        assert!(hint(&o).contains("modprobe nvidia"), "{}", hint(&o));
        assert!(hint(&o).contains("nvidia-smi"), "{}", hint(&o));
    }

    #[test]
    fn devices_missing_uvm_only_on_bare_metal_says_modprobe_uvm() {
        let mut nodes = healthy_nodes(2);
        nodes.uvm.state = NodeState::Missing;
        let o = devices(nodes, None, true);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "missing: /dev/nvidia-uvm");
        assert!(hint(&o).contains("modprobe nvidia-uvm"), "{}", hint(&o));
    }

    #[test]
    fn devices_missing_with_module_loaded_says_create_nodes() {
        let mut nodes = missing_nodes();
        nodes.uvm.state = NodeState::Openable;
        let o = devices(nodes, None, true);
        assert_eq!(
            o.summary,
            "missing: /dev/nvidiactl, /dev/nvidiaN (no GPU node at all)"
        );
        assert!(hint(&o).contains("sudo nvidia-smi"), "{}", hint(&o));
    }

    #[test]
    fn devices_permission_denied_is_told_apart_from_missing() {
        let mut nodes = healthy_nodes(2);
        nodes.gpus[1].state = NodeState::PermissionDenied;
        let o = devices(nodes, None, true);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "permission denied (EACCES) opening /dev/nvidia1");
        assert!(!o.summary.contains("missing"));
        assert!(hint(&o).contains("usermod -aG video"), "{}", hint(&o));
    }

    #[test]
    fn devices_permission_denied_in_container_mentions_gpus_flag() {
        let mut nodes = healthy_nodes(1);
        nodes.control.state = NodeState::PermissionDenied;
        let o = devices(nodes, Some("docker"), false);
        assert!(hint(&o).contains("--gpus all"), "{}", hint(&o));
    }

    #[test]
    fn devices_without_driver_behind_node() {
        let mut nodes = healthy_nodes(1);
        nodes.gpus[0].state = NodeState::NoDriver;
        let o = devices(nodes, None, false);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("no driver behind /dev/nvidia0"),
            "{}",
            o.summary
        );
        assert!(hint(&o).contains("dmesg"), "{}", hint(&o));
    }

    #[test]
    fn devices_other_error_is_named() {
        let mut nodes = healthy_nodes(1);
        nodes.control.state = NodeState::Other("Input/output error".into());
        let o = devices(nodes, None, true);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("/dev/nvidiactl (Input/output error)"),
            "{}",
            o.summary
        );
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
            o.facts.get("rdma_devices").map(String::as_str),
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

//! `host.devices`: the NVIDIA device nodes every CUDA process opens.

use crate::domain::text::counted;
use crate::facts::driver::NoDriverHere;
use crate::probe::host::{self as hp, DeviceNode, DeviceNodes, NodeState};
use crate::probe::system;
use crate::{Check, Context, Finding, Findings, Outcome, Profile, Status};

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
            container: system::container(),
            kernel_module: hp::kernel_module_version(),
            nvidia_modprobe: hp::setuid_nvidia_modprobe(),
            wsl_dxg: std::path::Path::new("/dev/dxg").exists(),
        })
    }
}

/// The required nodes (control, uvm, every GPU node) sorted by what opening
/// them said.
struct NodeProblems<'a> {
    missing: Vec<&'a str>,
    denied: Vec<&'a str>,
    no_driver: Vec<&'a str>,
    other: Vec<String>,
}

impl<'a> NodeProblems<'a> {
    fn of(nodes: &'a DeviceNodes) -> Self {
        let required: Vec<&DeviceNode> = [&nodes.control, &nodes.uvm]
            .into_iter()
            .chain(nodes.gpus.iter())
            .collect();
        let with = |pred: fn(&NodeState) -> bool| -> Vec<&'a str> {
            required
                .iter()
                .filter(|n| pred(&n.state))
                .map(|n| n.path.as_str())
                .collect()
        };
        let mut missing = with(|s| *s == NodeState::Missing);
        if nodes.gpus.is_empty() {
            missing.push("/dev/nvidiaN (no GPU node at all)");
        }
        NodeProblems {
            missing,
            denied: with(|s| *s == NodeState::PermissionDenied),
            no_driver: with(|s| *s == NodeState::NoDriver),
            other: required
                .iter()
                .filter_map(|n| match &n.state {
                    NodeState::Other(e) => Some(format!("{} ({e})", n.path)),
                    _ => None,
                })
                .collect(),
        }
    }

    /// Nothing but missing nodes (none refused, none without a driver).
    fn only_missing(&self) -> bool {
        self.denied.is_empty() && self.no_driver.is_empty() && self.other.is_empty()
    }

    fn none(&self) -> bool {
        self.missing.is_empty() && self.only_missing()
    }
}

/// Judge the device nodes: every required node must open.
pub fn evaluate_devices(f: &DevicesFacts) -> Outcome {
    let problems = NodeProblems::of(&f.nodes);
    let with_count =
        |o: Outcome| o.with_metric("gpu_device_nodes", f.nodes.gpus.len() as f64, "count");
    if problems.none() {
        return with_count(Outcome::pass(format!(
            "/dev/nvidiactl, /dev/nvidia-uvm and {} ({}) open",
            counted(f.nodes.gpus.len(), "GPU node", "GPU nodes"),
            node_range(&f.nodes.gpus)
        )));
    }
    if let Some(warned) = created_on_first_use(f, &problems) {
        return with_count(warned);
    }
    // NVIDIA, "CUDA on WSL User Guide": the GPU is reached through /dev/dxg
    // and the driver libraries in /usr/lib/wsl/lib; nvidia* nodes never exist.
    if f.wsl_dxg && f.nodes.control.state == NodeState::Missing && f.nodes.gpus.is_empty() {
        return Outcome::skip(
            "WSL 2 (/dev/dxg present): CUDA reaches the GPU through /dev/dxg, not /dev/nvidia* \
             nodes; gpu.driver tells whether the driver answers",
        );
    }
    let outcome = with_count(node_findings(f, &problems).conclude("", vec![]));
    match no_driver_here(f) {
        Some(cause) => outcome.publish(&cause),
        None => outcome,
    }
}

/// No device node at all, in a container (no GPU passed in) or on a host
/// without the kernel module (no driver): the first cause of the driver
/// library checks' failures too, published so they point here.
fn no_driver_here(f: &DevicesFacts) -> Option<NoDriverHere> {
    if !no_nodes_at_all(&f.nodes) {
        return None;
    }
    let reason = match (f.container.as_deref(), &f.kernel_module) {
        (Some("kubernetes"), _) => "no GPU was assigned to this pod".to_string(),
        (Some(c), _) => format!("no GPU was passed into this {c} container"),
        (None, None) => "the NVIDIA kernel module is not loaded".to_string(),
        (None, Some(_)) => return None,
    };
    Some(NoDriverHere {
        check: "host.devices".to_string(),
        reason,
    })
}

fn no_nodes_at_all(nodes: &DeviceNodes) -> bool {
    nodes.control.state == NodeState::Missing
        && nodes.uvm.state == NodeState::Missing
        && nodes.gpus.is_empty()
}

/// Bare metal with the driver loaded: the first CUDA or NVML call runs the
/// setuid nvidia-modprobe, which loads nvidia-uvm and creates the missing
/// nodes (nvidia-modprobe(1)), so the job works; only a container started
/// before they exist cannot get them. A warning then, else `None`.
fn created_on_first_use(f: &DevicesFacts, p: &NodeProblems) -> Option<Outcome> {
    let modprobe = f.nvidia_modprobe.as_deref()?;
    if !(p.only_missing() && f.container.is_none() && f.kernel_module.is_some()) {
        return None;
    }
    Some(Outcome::warn(
        format!(
            "missing: {}; the driver is loaded and {modprobe} (setuid root) creates them when \
             CUDA first starts",
            p.missing.join(", ")
        ),
        "create them now with `sudo nvidia-modprobe -u -c=0` (nvidia-uvm) and `sudo \
         nvidia-smi` (every /dev/nvidiaN), and have them made at boot (nvidia-persistenced \
         or a udev rule) so containers started on this host get them too",
    ))
}

/// One failing finding per kind of problem; each hint after the first
/// reads "also ...".
fn node_findings(f: &DevicesFacts, p: &NodeProblems) -> Findings {
    let place = match &f.container {
        Some(c) => format!(" inside this {c} container"),
        None => String::new(),
    };
    let mut findings = Findings::new();
    let mut fail = |text: String, hint: String| {
        let hint = if findings.is_empty() {
            hint
        } else {
            format!("also {hint}")
        };
        findings.push(Finding::new(None, Status::Fail, text).hint(hint));
    };
    if no_nodes_at_all(&f.nodes) {
        fail(
            format!(
                "no NVIDIA device nodes{place}: /dev/nvidiactl, /dev/nvidia-uvm and \
                 /dev/nvidia0.. are all missing"
            ),
            missing_hint(f, &p.missing),
        );
    } else if !p.missing.is_empty() {
        fail(
            format!("missing{place}: {}", p.missing.join(", ")),
            missing_hint(f, &p.missing),
        );
    }
    if !p.denied.is_empty() {
        fail(
            format!("permission denied (EACCES) opening {}", p.denied.join(", ")),
            denied_hint(f.container.is_some()).to_string(),
        );
    }
    if !p.no_driver.is_empty() {
        fail(
            format!("no driver behind {} (ENXIO/ENODEV)", p.no_driver.join(", ")),
            "the node exists but the kernel module does not answer: `sudo modprobe nvidia` \
             (and `sudo modprobe nvidia-uvm`), then look at `dmesg | grep -i nvrm`"
                .to_string(),
        );
    }
    if !p.other.is_empty() {
        fail(
            format!("cannot open {}", p.other.join(", ")),
            "look at `dmesg | grep -i nvrm` and `ls -l /dev/nvidia*`".to_string(),
        );
    }
    findings
}

fn denied_hint(in_container: bool) -> &'static str {
    if in_container {
        "the container may not open the GPU nodes: pass GPUs with `--gpus all` (or the \
         nvidia.com/gpu resource) rather than bare --device flags, and run as a user in the \
         group that owns them (`ls -l /dev/nvidia*`)"
    } else {
        "add the user to the group that owns the nodes (`ls -l /dev/nvidia*`, usually video: \
         `sudo usermod -aG video $USER`, then log in again), or fix the driver's \
         NVreg_DeviceFileMode / udev rule"
    }
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

#[cfg(test)]
mod tests {
    use super::*;
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
    fn no_node_at_all_is_published_as_the_first_cause_of_a_missing_driver() {
        let reason = |o: &Outcome| o.fact::<NoDriverHere>().map(|f| (f.check, f.reason));
        let first = |r: &str| Some(("host.devices".to_string(), r.to_string()));
        assert_eq!(
            reason(&devices(missing_nodes(), Some("docker"), false)),
            first("no GPU was passed into this docker container")
        );
        assert_eq!(
            reason(&devices(missing_nodes(), Some("kubernetes"), false)),
            first("no GPU was assigned to this pod")
        );
        assert_eq!(
            reason(&devices(missing_nodes(), None, false)),
            first("the NVIDIA kernel module is not loaded")
        );
        // A loaded driver without nodes is a problem of its own; nodes that
        // exist say the driver is reached.
        assert_eq!(reason(&devices(missing_nodes(), None, true)), None);
        let mut nodes = healthy_nodes(2);
        nodes.uvm.state = NodeState::Missing;
        assert_eq!(reason(&devices(nodes, Some("docker"), true)), None);
        assert_eq!(reason(&devices(healthy_nodes(2), None, true)), None);
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
}

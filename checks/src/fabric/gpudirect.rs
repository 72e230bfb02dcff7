//! `fabric.gpudirect`: can the RDMA NICs read and write GPU memory directly
//! (GPUDirect RDMA), through nvidia-peermem or through DMA-BUF?

use crate::domain::text::{list_cut, quote_value};
use crate::probe::host::env_lossy;
use crate::probe::sysfs::{self, PeerMemFacts};
use crate::{Check, Context, Outcome, Profile};

/// The first kernel whose RDMA core registers DMA-BUF memory
/// (ib_umem_dmabuf, Linux 5.12; NVIDIA GPU Operator, "GPUDirect RDMA":
/// DMA-BUF needs Linux 5.12 or later and the open GPU kernel module).
pub const DMABUF_MIN_KERNEL: (u32, u32) = (5, 12);

/// The words /proc/driver/nvidia/version uses for the open GPU kernel
/// module ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64 ...").
const OPEN_MODULE_WORDS: &str = "Open Kernel Module";

pub struct GpuDirect;

/// What `fabric.gpudirect` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuDirectFacts {
    /// The RDMA devices (names), or why they could not be listed.
    pub rdma_devices: Result<Vec<String>, String>,
    /// How many NVIDIA GPUs NVML sees, or why it cannot say.
    pub gpus: Result<usize, String>,
    pub peermem: PeerMemFacts,
    /// NCCL_DMABUF_ENABLE, when set.
    pub nccl_dmabuf_enable: Option<String>,
}

impl Check for GpuDirect {
    fn id(&self) -> &'static str {
        "fabric.gpudirect"
    }
    fn title(&self) -> &'static str {
        "GPUDirect RDMA"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "On a machine with RDMA NICs and NVIDIA GPUs, checks that the NICs can register GPU memory: the nvidia_peermem module is loaded (/sys/module/nvidia_peermem, or the older nv_peer_mem), or the DMA-BUF route is open (Linux 5.12 or later with the open GPU kernel module).\n\n\
         With GPUDirect RDMA the NIC reads gradients straight from GPU memory and writes them into \
         the peer's; without it NCCL stages every transfer through host memory, which costs PCIe \
         bandwidth and CPU time and typically cuts inter-node all-reduce bandwidth substantially \
         (NCCL_DEBUG=INFO then shows no `GDRDMA` in its transport lines).\n\n\
         Fixes: `sudo modprobe nvidia-peermem` (shipped with the driver since R470; load it at boot \
         through /etc/modules-load.d, or with the GPU Operator's `driver.rdma.enabled=true`), or use \
         DMA-BUF: the open GPU kernel module (`nvidia-open` packages), a 5.12+ kernel, and NCCL 2.13 \
         or newer with NCCL_DMABUF_ENABLE left at its default (1). Without RDMA devices or NVIDIA \
         GPUs the check is skipped."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let root = sysfs::sysfs_root();
        let rdma_devices = sysfs::rdma_ports(&root).map(|ports| {
            let mut names: Vec<String> = ports.into_iter().map(|p| p.device).collect();
            names.dedup();
            names
        });
        // NVML only matters when there is a NIC to register GPU memory with.
        let gpus = if rdma_devices.as_ref().is_ok_and(|d| !d.is_empty()) {
            crate::facts::nvml::gpus_for_run(ctx)
                .map(|g| g.len())
                .map_err(|e| e.to_string())
        } else {
            Ok(0)
        };
        evaluate(&GpuDirectFacts {
            rdma_devices,
            gpus,
            peermem: sysfs::peermem_facts(&root, &sysfs::proc_root()),
            nccl_dmabuf_enable: env_lossy("NCCL_DMABUF_ENABLE"),
        })
    }
}

/// "6.8.0-45-generic" -> (6, 8).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Judge whether GPU memory is registrable by the NICs.
pub fn evaluate(f: &GpuDirectFacts) -> Outcome {
    let devices = match &f.rdma_devices {
        Ok(d) if d.is_empty() => return Outcome::skip(
            "no RDMA devices: GPUDirect RDMA does not apply (NCCL uses TCP sockets between nodes)",
        ),
        Ok(d) => d,
        Err(e) => return Outcome::skip(format!("RDMA devices cannot be listed: {e}")),
    };
    match &f.gpus {
        Ok(0) => return Outcome::skip("no NVIDIA GPUs: GPUDirect RDMA does not apply"),
        Err(e) => return Outcome::skip(format!("NVIDIA GPUs cannot be listed ({e})")),
        Ok(_) => {}
    }
    let nics = list_cut(devices, 4);
    let p = &f.peermem;
    if p.nvidia_peermem || p.nv_peer_mem {
        let module = if p.nvidia_peermem {
            "nvidia_peermem"
        } else {
            "nv_peer_mem (the older Mellanox module; nvidia-peermem replaces it since driver R470)"
        };
        return Outcome::pass(format!(
            "{module} is loaded: {nics} can read and write GPU memory directly"
        ))
        .with_fact("gpudirect_route", "peermem");
    }
    let kernel = p.kernel_release.as_deref().and_then(kernel_version);
    let kernel_ok = kernel.is_some_and(|k| k >= DMABUF_MIN_KERNEL);
    let open_module = p
        .nvidia_proc_version
        .as_deref()
        .is_some_and(|v| v.contains(OPEN_MODULE_WORDS));
    let dmabuf_off = f.nccl_dmabuf_enable.as_deref().map(str::trim) == Some("0");
    if kernel_ok && open_module && !dmabuf_off {
        return Outcome::pass(format!(
            "DMA-BUF: kernel {}, open GPU kernel module {}: {nics} can register GPU memory \
             (NCCL 2.13 or newer uses it)",
            p.kernel_release.as_deref().unwrap_or("?"),
            p.nvidia_module.as_deref().unwrap_or("loaded")
        ))
        .with_fact("gpudirect_route", "dma-buf");
    }
    let mut missing = vec!["nvidia_peermem is not loaded".to_string()];
    if !kernel_ok {
        missing.push(match (&p.kernel_release, kernel) {
            (Some(r), Some(_)) => format!("kernel {r} is older than 5.12 (no DMA-BUF)"),
            (Some(r), None) => format!("kernel release {} not understood", quote_value(r)),
            (None, _) => "the kernel version is unknown".into(),
        });
    }
    if !open_module {
        missing.push(match (&p.nvidia_proc_version, &p.nvidia_module) {
            (Some(_), _) => "the NVIDIA kernel module is the proprietary one (no DMA-BUF)".into(),
            (None, Some(v)) => format!("NVIDIA kernel module {v}: open or proprietary unknown"),
            (None, None) => "the NVIDIA kernel module is not loaded".into(),
        });
    }
    if dmabuf_off {
        missing.push(format!(
            "NCCL_DMABUF_ENABLE={} turns DMA-BUF off",
            quote_value(f.nccl_dmabuf_enable.as_deref().unwrap_or(""))
        ));
    }
    Outcome::warn(
        format!(
            "no GPUDirect RDMA for {nics}: {}; NCCL will stage inter-node traffic through host \
             memory, at a fraction of the bandwidth",
            missing.join(", ")
        ),
        "load the peer-memory module: `sudo modprobe nvidia-peermem` (and list it in \
         /etc/modules-load.d/ to load it at boot); or use DMA-BUF: the open GPU kernel module \
         (`nvidia-open`), Linux 5.12 or later and NCCL 2.13 or newer with NCCL_DMABUF_ENABLE \
         unset or 1",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    const OPEN: &str =
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build";
    const PROPRIETARY: &str =
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Release Build";

    fn facts(peermem: bool, kernel: &str, proc_version: &str) -> GpuDirectFacts {
        GpuDirectFacts {
            rdma_devices: Ok(vec!["mlx5_0".into(), "mlx5_1".into()]),
            gpus: Ok(8),
            peermem: PeerMemFacts {
                nvidia_peermem: peermem,
                nv_peer_mem: false,
                nvidia_module: Some("570.86.15".into()),
                nvidia_proc_version: Some(proc_version.into()),
                kernel_release: Some(kernel.into()),
            },
            nccl_dmabuf_enable: None,
        }
    }

    #[test]
    fn peermem_loaded_passes() {
        let o = evaluate(&facts(true, "6.8.0-45-generic", PROPRIETARY));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "nvidia_peermem is loaded: mlx5_0, mlx5_1 can read and write GPU memory directly"
        );
    }

    #[test]
    fn dmabuf_route_passes_with_open_module_and_new_kernel() {
        let o = evaluate(&facts(false, "6.8.0-45-generic", OPEN));
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary
                .starts_with("DMA-BUF: kernel 6.8.0-45-generic, open GPU kernel module 570.86.15"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn proprietary_module_without_peermem_warns_with_both_fixes() {
        let o = evaluate(&facts(false, "6.8.0-45-generic", PROPRIETARY));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "no GPUDirect RDMA for mlx5_0, mlx5_1: nvidia_peermem is not loaded, the NVIDIA kernel \
             module is the proprietary one (no DMA-BUF); NCCL will stage inter-node traffic through \
             host memory, at a fraction of the bandwidth"
        );
        let hint = o.hint.unwrap_or_default();
        assert!(
            hint.contains("`sudo modprobe nvidia-peermem`") && hint.contains("DMA-BUF"),
            "{hint}"
        );
    }

    #[test]
    fn old_kernel_or_dmabuf_turned_off_warns() {
        let o = evaluate(&facts(false, "5.4.0-150-generic", OPEN));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary
                .contains("kernel 5.4.0-150-generic is older than 5.12"),
            "{}",
            o.summary
        );
        let mut off = facts(false, "6.8.0", OPEN);
        off.nccl_dmabuf_enable = Some("0".into());
        let o = evaluate(&off);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary
                .contains("NCCL_DMABUF_ENABLE=\"0\" turns DMA-BUF off"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn no_rdma_or_no_gpus_skip_with_the_reason() {
        let mut f = facts(false, "6.8.0", OPEN);
        f.rdma_devices = Ok(vec![]);
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.starts_with("no RDMA devices"));
        let mut f = facts(false, "6.8.0", OPEN);
        f.gpus = Err("cannot load NVML: libnvidia-ml.so.1: not found".into());
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("libnvidia-ml.so.1"));
    }

    #[test]
    fn kernel_versions_parse_and_garbage_is_unknown() {
        assert_eq!(kernel_version("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(kernel_version("5.12"), Some((5, 12)));
        assert_eq!(kernel_version("garbage"), None);
        let mut f = facts(false, "garbage", OPEN);
        f.peermem.kernel_release = Some("garbage".into());
        assert_eq!(evaluate(&f).status, Status::Warn);
    }
}

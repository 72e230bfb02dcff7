//! fleet.driver, fleet.cuda_driver, fleet.torch, fleet.nccl: the versions
//! every node must share, read from each node's typed facts.

use super::{agreement, Fleet, FleetCheck, FleetNode};
use crate::domain::compat::CudaVersion;
use crate::facts::cuda::DriverCuda;
use crate::facts::nvml::NvmlDriver;
use crate::facts::torch::TorchInfo;
use crate::identity::check;
use crate::Outcome;

check!(
    Driver,
    "fleet.driver",
    "Same NVIDIA driver on every node",
    "Every node reports the same NVIDIA driver version (NVML's, published by gpu.driver).

Why it matters: NCCL's cross-node protocols and the CUDA features torch uses depend on \
the driver; a node left on an old driver after a fleet upgrade is the classic source of \
hangs and crashes that only happen at scale, on one node.

Fix: upgrade (or pin) the named node to the fleet's driver version; in Kubernetes, use \
the same GPU operator driver version on every node pool.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

check!(
    CudaDriver,
    "fleet.cuda_driver",
    "Same CUDA driver version on every node",
    "Every node's driver supports the same CUDA version (cuDriverGetVersion from \
cuda.driver, else NVML's view).

Why it matters: a torch wheel built for a newer CUDA than one node's driver supports fails \
on that node only (or falls back to slow paths with forward compatibility); the job then \
dies at the first collective.

Fix: align the drivers (see fleet.driver); the node named is the one that differs.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

check!(
    Torch,
    "fleet.torch",
    "Same torch version and CUDA build on every node",
    "Every node's training Python imports the same torch version, built for the same CUDA \
(torch.import's facts, else what the cluster payload's own `import torch` saw: the same \
interpreter).

Why it matters: DDP exchanges buckets and state between ranks; different torch versions \
can differ in bucket layout, collectives and default settings, and fail in ways that look \
like network errors. Different CUDA builds usually mean different NCCL builds too.

Fix: install the same wheel on every node (pin torch==X.Y.Z+cuNNN in the image or the \
environment), or use one container image for the whole job.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

check!(
    Nccl,
    "fleet.nccl",
    "Same NCCL version on every node",
    "Every node's torch loads the same NCCL version (torch.cuda.nccl.version()).

Why it matters: NCCL's wire protocol is only guaranteed between identical versions; a mix \
can hang in the first all-reduce or corrupt nothing but be slow. NCCL comes with the torch \
wheel unless LD_LIBRARY_PATH or LD_PRELOAD brings another one.

Fix: use the same torch wheel everywhere and do not point LD_LIBRARY_PATH at a different \
libnccl on some nodes.",
    profile: super::FLEET_PROFILE,
    run: |_, _| super::not_local(),
);

const SAME_IMAGE: &str = "run every node from one image (or pin the same versions), then \
                          run gpucheck cluster again";

impl FleetCheck for Driver {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        agreement(
            fleet,
            "driver",
            |n| match n.fact::<NvmlDriver>()?.0 {
                Ok(d) => Some(d.driver_version),
                Err(_) => None,
            },
            "gpu.driver did not run or NVML failed on every node",
            "upgrade the named nodes to the driver the others run (drain them until then)",
        )
    }
}

fn cuda_driver_of(n: &FleetNode) -> Option<CudaVersion> {
    n.fact::<DriverCuda>()
        .and_then(|d| d.cuda_driver_version)
        .or_else(|| {
            n.fact::<NvmlDriver>()?
                .0
                .ok()?
                .cuda_driver_version
                .and_then(CudaVersion::from_encoded)
        })
}

impl FleetCheck for CudaDriver {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        agreement(
            fleet,
            "CUDA driver version",
            |n| cuda_driver_of(n).map(|c| c.to_string()),
            "neither cuda.driver nor gpu.driver reported one",
            "align the drivers of the named nodes with the others (see fleet.driver)",
        )
    }
}

/// torch's version and CUDA build: torch.import's fact, else the payload's.
fn torch_of(n: &FleetNode) -> Option<String> {
    let (version, cuda) = match n.fact::<TorchInfo>() {
        Some(t) => (t.torch_version, t.cuda_build),
        None => {
            let t = n.torch.clone()?;
            (t.version?, t.cuda_build)
        }
    };
    Some(match cuda {
        Some(c) => format!("{version} (CUDA {c})"),
        None => format!("{version} (CPU-only build)"),
    })
}

impl FleetCheck for Torch {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        agreement(
            fleet,
            "torch",
            torch_of,
            "torch could not be imported on any node",
            SAME_IMAGE,
        )
    }
}

impl FleetCheck for Nccl {
    fn judge(&self, fleet: &Fleet) -> Outcome {
        agreement(
            fleet,
            "NCCL",
            |n| {
                n.fact::<TorchInfo>()
                    .and_then(|t| t.nccl_version)
                    .or_else(|| n.torch.clone()?.nccl_version)
            },
            "no node's torch has NCCL (CPU-only builds)",
            SAME_IMAGE,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::PayloadTorch;
    use super::*;
    use crate::probe::nvml::{DriverInfo, NvmlFailure};
    use crate::Status;

    fn driver(version: &str, cuda: i32) -> NvmlDriver {
        NvmlDriver(Ok(DriverInfo {
            driver_version: version.into(),
            nvml_version: format!("12.{version}"),
            cuda_driver_version: Some(cuda),
        }))
    }

    #[test]
    fn a_node_on_another_driver_is_named_with_both_versions() {
        let f = fleet(vec![
            with_fact(node(0, "a"), "gpu.driver", &driver("570.86.15", 12080)),
            with_fact(node(1, "b"), "gpu.driver", &driver("570.86.15", 12080)),
            with_fact(node(2, "c"), "gpu.driver", &driver("550.54.15", 12040)),
        ]);
        let o = Driver.judge(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "driver differs: node 2 (c) has 550.54.15; nodes 0, 1 have 570.86.15"
        );
        let o = CudaDriver.judge(&f);
        assert_eq!(
            o.summary,
            "CUDA driver version differs: node 2 (c) has 12.4; nodes 0, 1 have 12.8"
        );
    }

    #[test]
    fn nvml_failure_on_a_node_is_not_a_version() {
        let f = fleet(vec![
            with_fact(node(0, "a"), "gpu.driver", &driver("570.86.15", 12080)),
            with_fact(
                node(1, "b"),
                "gpu.driver",
                &NvmlDriver(Err(NvmlFailure::DriverNotLoaded)),
            ),
        ]);
        let o = Driver.judge(&f);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.contains("node 1 (b) did not report it"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn torch_from_the_payload_when_torch_import_did_not_run() {
        let mut a = node(0, "a");
        a.torch = Some(PayloadTorch {
            version: Some("2.15.0+cpu".into()),
            cuda_build: None,
            nccl_version: None,
        });
        let mut b = node(1, "b");
        b.torch = Some(PayloadTorch {
            version: Some("2.15.0+cu132".into()),
            cuda_build: Some("13.2".into()),
            nccl_version: Some("2.27.7".into()),
        });
        let o = Torch.judge(&fleet(vec![a.clone(), b]));
        assert_eq!(
            o.summary,
            "torch differs: node 1 (b) has 2.15.0+cu132 (CUDA 13.2); node 0 (a) has 2.15.0+cpu (CPU-only build)"
        );
        let o = Nccl.judge(&fleet(vec![a]));
        assert_eq!(o.status, Status::Skip);
    }
}

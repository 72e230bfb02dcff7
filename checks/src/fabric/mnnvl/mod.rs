//! `fabric.mnnvl`: on GB200 / GB300 NVL72 racks (multi-node NVLink), is
//! this node ready for NCCL to use NVLink between trays? Every GPU
//! registered with the fabric and healthy (NVML's fabric info v3/v2/v1),
//! all of them in one NVLink domain (cluster UUID and clique), an IMEX
//! channel in this container with the IMEX daemon READY in a domain that is
//! UP, and the job's NCCL settings and version not turning MNNVL off.
//! Systems without a multi-node fabric (PCIe GPUs, HGX with a zero cluster
//! UUID) are skipped: it does not apply.

mod gpus;
mod imex;

use std::time::Duration;

use crate::domain::action::Action;
use crate::domain::nvlink_fabric::{in_multi_node_fabric, NCCL_MNNVL_MIN, STATE_COMPLETED};
use crate::domain::text::{counted, gpus_phrase};
use crate::facts::fabric::{NvlinkDomain, NvlinkDomains};
use crate::findings::{Finding, Findings};
use crate::probe::host::env_lossy;
use crate::probe::imex::{dev_root, etc_root, ImexFacts};
use crate::probe::nvml::{self, FabricInfo, NvmlFailure, Reading};
use crate::probe::sysfs;
use crate::probe::torch::TorchInfo;
use crate::{Check, Context, Outcome, Profile, Status};

pub struct Mnnvl;

/// What `fabric.mnnvl` judges.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MnnvlFacts {
    /// Each GPU (NVML index) with its fabric info.
    pub gpus: Vec<(u32, Reading<FabricInfo>)>,
    /// Seconds since boot, when known.
    pub uptime_secs: Option<f64>,
    /// IMEX, read only where a GPU is in a multi-node fabric.
    pub imex: Option<ImexFacts>,
    /// The NCCL the job loads (torch's), "2.21.5".
    pub nccl_version: Option<String>,
}

impl Check for Mnnvl {
    fn id(&self) -> &'static str {
        "fabric.mnnvl"
    }
    fn title(&self) -> &'static str {
        "Multi-node NVLink (NVL72 fabric, IMEX)"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["gpu.driver"]
    }
    fn timeout(&self) -> Duration {
        // Two bounded nvidia-imex-ctl queries and the NVML calls.
        Duration::from_secs(15)
    }
    fn explain(&self) -> &'static str {
        EXPLAIN
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let lib = ctx.options.nvml_lib.as_deref();
        let gpus = match nvml::fabric_info(lib) {
            Ok(list) => list.into_iter().zip(0..).map(|(r, i)| (i, r)).collect(),
            Err(f) => return unreadable(&f),
        };
        let mut facts = MnnvlFacts {
            gpus,
            uptime_secs: sysfs::uptime_secs(),
            ..MnnvlFacts::default()
        };
        if facts
            .gpus
            .iter()
            .any(|(_, r)| r.as_ref().is_ok_and(in_multi_node_fabric))
        {
            let path = env_lossy("PATH").map(std::ffi::OsString::from);
            let mut imex = crate::probe::imex::facts(&dev_root(), &etc_root(), path.as_ref());
            imex.channels_env = env_lossy("NVIDIA_IMEX_CHANNELS");
            facts.imex = Some(imex);
            facts.nccl_version = ctx.fact::<TorchInfo>().and_then(|t| t.nccl_version);
        }
        evaluate(&facts)
    }
}

fn unreadable(f: &NvmlFailure) -> Outcome {
    Outcome::skip(format!("NVML cannot be asked for the NVLink fabric: {f}"))
}

/// Judge the node's multi-node NVLink readiness.
pub fn evaluate(f: &MnnvlFacts) -> Outcome {
    if f.gpus.is_empty() {
        return Outcome::skip("no GPUs: no NVLink fabric to check");
    }
    let mut findings = Findings::new();
    for (gpu, reading) in &f.gpus {
        findings
            .items
            .extend(gpus::gpu_findings(*gpu, reading, f.uptime_secs));
    }
    let domains = gpus::domains(&f.gpus);
    findings.items.extend(gpus::split_finding(&domains));
    let multi: Vec<&((String, u32), Vec<u32>)> =
        domains.iter().filter(|(k, _)| !k.0.is_empty()).collect();
    let published = published(f, &domains);
    if multi.is_empty() && findings.worst() < Status::Warn {
        return Outcome::skip(does_not_apply(f)).publish(&published);
    }
    if let Some(imex) = &f.imex {
        findings.items.extend(imex::channel_findings(imex));
        findings.items.extend(imex::daemon_findings(imex));
        findings.items.extend(imex::domain_findings(imex));
        findings.items.extend(imex::two_daemons_finding(imex));
    }
    findings.items.extend(nccl_findings(f));
    let pass = match (multi.first(), &f.imex) {
        (Some((key, ids)), Some(imex)) => format!(
            "{} in NVLink domain {}; {}",
            gpus_phrase(ids),
            gpus::domain_text(key),
            imex::imex_text(imex)
        ),
        (Some((key, ids)), None) => {
            format!(
                "{} in NVLink domain {}",
                gpus_phrase(ids),
                gpus::domain_text(key)
            )
        }
        (None, _) => "no GPU in a multi-node NVLink fabric".to_string(),
    };
    let mut outcome = findings.conclude(pass, Vec::new());
    if let Some((_, ids)) = multi.first() {
        outcome = outcome.with_metric("nvlink_domain_gpus", ids.len() as f64, "GPUs");
    }
    outcome.publish(&published)
}

/// The node's NVLink domains, for the fleet.
fn published(f: &MnnvlFacts, domains: &[((String, u32), Vec<u32>)]) -> NvlinkDomains {
    let fabric: Vec<&FabricInfo> = f.gpus.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
    NvlinkDomains {
        domains: domains
            .iter()
            .filter(|(k, _)| !k.0.is_empty())
            .map(|((uuid, clique), gpus)| NvlinkDomain {
                cluster_uuid: uuid.clone(),
                clique_id: *clique,
                gpus: gpus.clone(),
            })
            .collect(),
        fabric_gpus: fabric.len() as u32,
        unregistered_gpus: fabric
            .iter()
            .filter(|i| i.state != STATE_COMPLETED || i.status != 0)
            .count() as u32,
        gpus: f.gpus.len() as u32,
    }
}

/// Why the check does not apply.
fn does_not_apply(f: &MnnvlFacts) -> String {
    let registered: Vec<u32> = f
        .gpus
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(g, _)| *g)
        .collect();
    if registered.is_empty() {
        return "multi-node NVLink fabric does not apply: no GPU reports an NVLink fabric \
                (PCIe GPUs, GPUs before Hopper, or a driver before R525)"
            .to_string();
    }
    format!(
        "multi-node NVLink fabric does not apply: {} registered with a single-node NVLink \
         fabric (cluster UUID all zeros, as on HGX/DGX)",
        counted(registered.len(), "GPU", "GPUs")
    )
}

/// The job's NCCL against a multi-node fabric (its settings are nccl.env's).
fn nccl_findings(f: &MnnvlFacts) -> Vec<Finding> {
    let mut out = Vec::new();
    let old = f.nccl_version.as_deref().and_then(|v| {
        let parts: Vec<u32> = v.split('.').filter_map(|p| p.parse().ok()).collect();
        let found = match parts[..] {
            [major, minor, patch, ..] => (major, minor, patch),
            _ => return None,
        };
        (found < NCCL_MNNVL_MIN).then(|| v.to_string())
    });
    if let Some(v) = old {
        out.push(
            Finding::new(
                None,
                Status::Warn,
                format!("NCCL {v} predates multi-node NVLink (2.20.3)"),
            )
            .hint(
                "NCCL before 2.20.3 sends between trays over the network although they share \
                 NVLink: install a PyTorch build with NCCL 2.20.3 or later (nvidia-nccl-cu12 \
                 wheel)",
            )
            .action(Action::FixInstall),
        );
    }
    out
}

const EXPLAIN: &str = "\
On GB200 and GB300 NVL72 racks the 72 GPUs of 18 compute trays share one NVLink domain, and NCCL \
sends between trays over NVLink (MNNVL, NCCL 2.20.3 and later) only when every GPU's fabric \
registration completed with healthy routes, the trays agree on cluster UUID and clique, the \
process holds an IMEX channel and the IMEX daemon is READY in a domain that is UP. Otherwise NCCL \
falls back to the network between trays, or the job dies on CUDA_ERROR_NOT_PERMITTED from a \
fabric cuMemCreate.

Per GPU, from nvmlDeviceGetGpuFabricInfoV (struct v3 with healthSummary, else v2 with \
healthMask; nvmlDeviceGetGpuFabricInfo on drivers without it): registration not started fails \
(start the fabric manager; on NVL72 the switch trays' NMX controller registers the GPUs); in \
progress warns in the first 10 minutes after boot and fails later (stuck: reset the GPUs); \
completed with an error fails and names it (NVML_ERROR_INSUFFICIENT_RESOURCES: the rack had no \
room, ask the provider). The health summary unhealthy fails, limited capacity warns; the mask's \
fields: degraded bandwidth warns, route unhealthy fails, route recovery and access-timeout \
recovery warn (transient), an incorrect configuration (wrong system GUID or chassis serial, no \
partition, too few NVLinks, incompatible firmware, invalid location, GPU state invalid) fails, \
and a multi-node GPU not assigned to a partition fails. A node whose GPUs sit in different \
cluster UUIDs or cliques fails.

IMEX: no /dev/nvidia-caps-imex-channels/channelN in this container fails (create channel0 on \
the host, set NVIDIA_IMEX_CHANNELS=0 or request a ComputeDomain channel); `nvidia-imex-ctl -q` \
other than READY fails (INITIALIZING and INIT_GPU warn), `nvidia-imex-ctl -N -j` DEGRADED warns \
and DOWN fails, naming the nodes not READY; IMEX versions that differ across the domain warn; a \
host nvidia-imex.service (enabled or running) beside a Kubernetes DRA driver's IMEX daemon (an \
nvidia-imex process in a kubepods cgroup) fails: one of them cannot get the IMEX session. \
Each query is bounded to 5 s. An NCCL older than 2.20.3 (torch's) warns: it predates MNNVL; \
nccl.env warns for NCCL_MNNVL_ENABLE=0, NCCL_CUMEM_ENABLE=0 and NCCL_NVLS_ENABLE=0 on such a node.

GPUs without a multi-node fabric (PCIe GPUs, an HGX H100 whose GPUs register with a cluster \
UUID of all zeros) skip: it does not apply. /dev, /etc and /proc are read under \
GPUCHECK_DEV_ROOT, GPUCHECK_ETC_ROOT and GPUCHECK_PROC_ROOT when set.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::imex::CommandAnswer;
    use crate::probe::nvml::Unavailable;

    const UUID: &str = "dc6e40c4d72243579ba65291dd461278";

    fn tray(n: u32) -> Vec<(u32, Reading<FabricInfo>)> {
        (0..n)
            .map(|i| {
                (
                    i,
                    Ok(FabricInfo {
                        struct_version: 3,
                        state: 3,
                        status: 0,
                        clique_id: 32766,
                        cluster_uuid: UUID.into(),
                        health_mask: Some(0x11aa),
                        health_summary: Some(1),
                    }),
                )
            })
            .collect()
    }

    fn ready_imex() -> ImexFacts {
        ImexFacts {
            channels_major: Some(234),
            channels: vec![0],
            daemon: CommandAnswer::Output("READY\n".into()),
            domain: CommandAnswer::Output(
                r#"{"status":"UP","nodes":{"0":{"status":"READY","host":"10.0.0.1"}}}"#.into(),
            ),
            ..ImexFacts::default()
        }
    }

    fn healthy() -> MnnvlFacts {
        MnnvlFacts {
            gpus: tray(4),
            uptime_secs: Some(3600.0),
            imex: Some(ready_imex()),
            nccl_version: Some("2.27.7".into()),
        }
    }

    #[test]
    fn a_healthy_nvl72_tray_passes_naming_its_domain() {
        let o = evaluate(&healthy());
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "GPUs 0, 1, 2, 3 in NVLink domain cluster dc6e40c4-d722-4357-9ba6-5291dd461278 clique \
             32766; IMEX channel0, daemon READY, domain UP with 1 nodes"
        );
    }

    #[test]
    fn an_hgx_h100_with_a_zero_uuid_skips_as_not_applying() {
        let mut f = healthy();
        for (_, r) in &mut f.gpus {
            if let Ok(i) = r {
                i.cluster_uuid = "0".repeat(32);
                i.health_mask = Some(0);
                i.health_summary = Some(0);
            }
        }
        f.imex = None;
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary
                .starts_with("multi-node NVLink fabric does not apply: 4 GPUs"),
            "{}",
            o.summary
        );
        f.gpus = vec![(0, Err(Unavailable::NotSupported))];
        assert!(evaluate(&f)
            .summary
            .contains("no GPU reports an NVLink fabric"));
    }

    #[test]
    fn an_nccl_before_2_20_3_warns() {
        let mut f = healthy();
        f.nccl_version = Some("2.19.3".into());
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "NCCL 2.19.3 predates multi-node NVLink (2.20.3)");
        f.nccl_version = Some("2.20.3".into());
        assert_eq!(evaluate(&f).status, Status::Pass);
    }

    #[test]
    fn a_tray_without_a_channel_fails() {
        let mut f = healthy();
        if let Some(i) = &mut f.imex {
            i.channels.clear();
        }
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.action, Some(Action::FixConfig));
    }
}

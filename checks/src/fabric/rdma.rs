//! `fabric.rdma`: the InfiniBand / RoCE ports NCCL will send through between
//! nodes: up, configured by a subnet manager, at the rate of their siblings,
//! RoCE ports with a routable GID and jumbo frames, and NCCL_IB_HCA naming
//! ports that exist and are up.

use crate::domain::action::Action;
pub use crate::domain::hca::HcaFilter;
use crate::domain::text::{counted, list_cut, quote_value};
use crate::findings::Findings;
use crate::probe::host::env_lossy;
use crate::probe::sysfs::{self, RdmaPort};
use crate::{Check, Context, DataTable, Outcome, Profile, Status};

/// The smallest netdev MTU that gives RoCE its largest frame (4096 bytes):
/// the RoCE MTU is the largest IB MTU (256..4096) that fits in the Ethernet
/// MTU with the RoCE headers, so a 1500-byte interface runs RoCE at 1024
/// (NVIDIA MLNX_OFED / DOCA docs, "RoCE MTU": set the Ethernet MTU to at
/// least 4200 for a 4096 RoCE MTU; NCCL's tuning guides use 9000).
pub const ROCE_MIN_NETDEV_MTU: u32 = 4200;

/// sysfs `state` numbers (include/rdma/ib_verbs.h, enum ib_port_state).
const PORT_INIT: u32 = 2;
const PORT_ARMED: u32 = 3;
const PORT_ACTIVE: u32 = 4;
const PORT_ACTIVE_DEFER: u32 = 5;

pub struct Rdma;

/// What `fabric.rdma` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct RdmaFacts {
    /// Every port under `<sysfs>/class/infiniband`, or why it could not be listed.
    pub ports: Result<Vec<RdmaPort>, String>,
    /// NCCL_IB_HCA, when set.
    pub nccl_ib_hca: Option<String>,
    /// Why the launcher's environment says this run spans nodes
    /// ("WORLD_SIZE=16 > LOCAL_WORLD_SIZE=8"), if it does.
    pub multi_node: Option<String>,
    /// The name of a data-centre GPU on this machine, when there is one
    /// (asked of NVML only for a multi-node run without RDMA devices).
    pub datacentre_gpu: Option<String>,
}

/// NVIDIA data-centre GPU families (the model in the product name), the
/// parts multi-node clusters are built from.
const DATACENTRE_FAMILIES: &[&str] = &[
    "V100", "T4", "A10", "A16", "A30", "A40", "A100", "A800", "H20", "H100", "H200", "H800",
    "GH200", "L4", "L20", "L40", "B100", "B200", "B300", "GB200", "GB300",
];

/// Whether an NVML product name ("NVIDIA H100 80GB HBM3", "NVIDIA L40S")
/// names a data-centre part; "NVIDIA RTX A4000" does not.
pub fn is_datacentre_gpu(name: &str) -> bool {
    name.split_whitespace().any(|token| {
        let letters = token.chars().take_while(char::is_ascii_uppercase).count();
        let digits = token[letters..]
            .chars()
            .take_while(char::is_ascii_digit)
            .count();
        letters > 0 && digits > 0 && DATACENTRE_FAMILIES.contains(&&token[..letters + digits])
    })
}

/// Why the launcher's environment says this run spans nodes: torchrun's
/// WORLD_SIZE above LOCAL_WORLD_SIZE, or Slurm's node count above 1.
pub fn multi_node_reason(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let num = |k: &str| env(k).and_then(|v| v.trim().parse::<u64>().ok());
    if let (Some(world), Some(local)) = (num("WORLD_SIZE"), num("LOCAL_WORLD_SIZE")) {
        if world > local {
            return Some(format!("WORLD_SIZE={world} > LOCAL_WORLD_SIZE={local}"));
        }
    }
    ["SLURM_JOB_NUM_NODES", "SLURM_NNODES"]
        .iter()
        .find_map(|k| num(k).filter(|n| *n > 1).map(|n| format!("{k}={n}")))
}

impl Check for Rdma {
    fn id(&self) -> &'static str {
        "fabric.rdma"
    }
    fn title(&self) -> &'static str {
        "RDMA ports (InfiniBand, RoCE)"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Checks every port of every RDMA device under /sys/class/infiniband: its state, physical state, rate and link layer, and for RoCE ports their GIDs and the network interface's MTU. NCCL_IB_HCA, when set, must select ports that exist and are active.\n\n\
         Between nodes NCCL sends DDP's gradients through these ports (GPUDirect RDMA where it can); \
         without them it falls back to TCP sockets at a fraction of the bandwidth. A port that is \
         DOWN or Polling has no link (cable, transceiver or switch port); one in INIT has a link but \
         no subnet manager has configured it, so no traffic passes. NCCL builds its rings across \
         every NIC, so one port slower than its siblings sets the pace for all. A RoCE port needs a \
         RoCE v2 GID, which comes from an IP address on its interface, and jumbo frames (an MTU of \
         at least 4200) for 4096-byte RoCE frames.\n\n\
         Fixes: reseat or replace the cable and check the switch port (`ibstat`, `mlxlink`); start a \
         subnet manager (`opensm` on one node, or the switch's / UFM's SM); give the RoCE interface \
         an IP address and raise its MTU (`ip link set DEV mtu 9000`, and on the switch ports); set \
         NCCL_IB_HCA to the ports that are wired (`^=mlx5_1` leaves one out). With no RDMA device \
         the check is skipped (NCCL will use TCP sockets between nodes), except in a multi-node \
         run (WORLD_SIZE above LOCAL_WORLD_SIZE, or a Slurm job over several nodes) on \
         data-centre GPUs, where it warns."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let ports = sysfs::rdma_ports(&sysfs::sysfs_root());
        let multi_node = multi_node_reason(env_lossy);
        // NVML only matters for a multi-node run without RDMA devices.
        let datacentre_gpu = match (&ports, &multi_node) {
            (Ok(p), Some(_)) if p.is_empty() => crate::facts::nvml::gpus_for_run(ctx)
                .ok()
                .and_then(|g| g.into_iter().map(|g| g.name).find(|n| is_datacentre_gpu(n))),
            _ => None,
        };
        evaluate(&RdmaFacts {
            ports,
            nccl_ib_hca: env_lossy("NCCL_IB_HCA").filter(|v| !v.trim().is_empty()),
            multi_node,
            datacentre_gpu,
        })
    }
}

fn port_name(p: &RdmaPort) -> String {
    format!("{}/{}", p.device, p.port)
}

/// "4: ACTIVE" -> 4.
fn state_number(state: &str) -> Option<u32> {
    state.split(':').next()?.trim().parse().ok()
}

/// "4: ACTIVE" -> "ACTIVE"; "5: LinkUp" -> "LinkUp".
fn state_word(state: &str) -> &str {
    state.split_once(':').map_or(state, |(_, w)| w.trim())
}

/// "400 Gb/sec (4X NDR)" -> 400.
fn rate_gbps(rate: &str) -> Option<f64> {
    rate.split_whitespace().next()?.parse().ok()
}

fn is_active(p: &RdmaPort) -> bool {
    p.state
        .as_deref()
        .and_then(state_number)
        .is_some_and(|s| s == PORT_ACTIVE || s == PORT_ACTIVE_DEFER)
}

fn is_roce(p: &RdmaPort) -> bool {
    p.link_layer.as_deref() == Some("Ethernet")
}

/// Judge the RDMA ports.
pub fn evaluate(f: &RdmaFacts) -> Outcome {
    let ports = match &f.ports {
        Ok(p) => p,
        Err(e) => return Outcome::skip(format!("RDMA devices cannot be listed: {e}")),
    };
    let filter = f.nccl_ib_hca.as_deref().map(HcaFilter::parse);
    if ports.is_empty() {
        return no_ports(f, filter.as_ref());
    }
    let selected: Vec<&RdmaPort> = ports
        .iter()
        .filter(|p| filter.as_ref().is_none_or(|h| h.selects(&p.device, p.port)))
        .collect();
    let mut findings = Findings::new();
    if let (Some(value), Some(h)) = (f.nccl_ib_hca.as_deref(), filter.as_ref()) {
        hca_findings(&mut findings, value, h, ports);
    }
    for p in &selected {
        if is_active(p) {
            if is_roce(p) {
                roce_findings(&mut findings, p);
            }
        } else {
            findings.push(inactive_finding(p));
        }
    }
    rate_findings(&mut findings, &selected);
    let active: Vec<&&RdmaPort> = selected.iter().filter(|p| is_active(p)).collect();
    let chosen = f
        .nccl_ib_hca
        .as_deref()
        .map(|v| format!(" (NCCL_IB_HCA={})", quote_value(v)))
        .unwrap_or_default();
    let pass = format!(
        "{} active{chosen}{}",
        counted(active.len(), "RDMA port", "RDMA ports"),
        describe_active(&active)
    );
    let links = crate::facts::fabric::NicLinks {
        links: active
            .iter()
            .filter_map(|p| {
                Some(crate::facts::fabric::NicLink {
                    port: port_name(p),
                    link_layer: p.link_layer.clone(),
                    rate_gbps: rate_gbps(p.rate.as_deref()?)?,
                })
            })
            .collect(),
    };
    findings
        .conclude(pass, Vec::new())
        .with_metric("rdma_ports_active", active.len() as f64, "count")
        .with_table(port_table(ports, filter.as_ref()))
        .publish(&links)
}

/// No RDMA device: sockets only, unless NCCL_IB_HCA asks for ports (fail)
/// or data-centre GPUs are about to train across nodes (warn).
fn no_ports(f: &RdmaFacts, filter: Option<&HcaFilter>) -> Outcome {
    if let (None, Some(why), Some(gpu)) = (filter, &f.multi_node, &f.datacentre_gpu) {
        return Outcome::warn(
            format!(
                "no RDMA devices in a multi-node run ({why}) on {gpu}: NCCL will send the \
                 gradients between nodes over TCP sockets, far below what these GPUs need"
            ),
            "give the container the RDMA devices (`--device /dev/infiniband`, the RDMA device \
             plugin on Kubernetes), or load the NIC driver (`modprobe mlx5_ib`; `ibv_devinfo` \
             lists the devices); on a cloud, use the instance type and network plugin with RDMA \
             (EFA, GPUDirect-TCPX)",
        );
    }
    match (f.nccl_ib_hca.as_deref(), filter) {
        (Some(v), Some(h)) if !h.exclude => Outcome::fail(
            format!(
                "NCCL_IB_HCA={} selects RDMA ports, but this machine has no RDMA devices",
                quote_value(v)
            ),
            "give the container the RDMA devices (`--device /dev/infiniband` and the RDMA \
             device plugin on Kubernetes), load the NIC driver (`modprobe mlx5_ib`), or unset \
             NCCL_IB_HCA to use TCP sockets",
        ),
        _ => Outcome::skip("no RDMA devices: NCCL will use TCP sockets between nodes"),
    }
}

/// NCCL_IB_HCA entries that name nothing, or a list that selects nothing.
fn hca_findings(findings: &mut Findings, value: &str, h: &HcaFilter, ports: &[RdmaPort]) {
    let hint = "set NCCL_IB_HCA to devices and ports this machine has (`ibv_devinfo -l`; \
                `mlx5_0:1,mlx5_1:1`, or `=mlx5_0` for an exact name), or unset it";
    if !h.exclude {
        for e in &h.entries {
            if !ports.iter().any(|p| h.entry_matches(e, &p.device, p.port)) {
                let name = match e.1 {
                    Some(port) => format!("{}:{port}", e.0),
                    None => e.0.clone(),
                };
                let have: Vec<String> = ports.iter().map(port_name).collect();
                findings.add(
                    Status::Fail,
                    format!(
                        "NCCL_IB_HCA names {name}, which matches no RDMA port (this machine has {})",
                        list_cut(&have, 6)
                    ),
                    Some(hint.into()),
                );
            }
        }
    }
    if !ports.iter().any(|p| h.selects(&p.device, p.port)) {
        findings.add(
            Status::Fail,
            format!(
                "NCCL_IB_HCA={} selects none of the RDMA ports",
                quote_value(value)
            ),
            Some(hint.into()),
        );
    }
}

/// A port NCCL will use that is not ACTIVE.
fn inactive_finding(p: &RdmaPort) -> crate::Finding {
    let name = port_name(p);
    let state = p.state.as_deref().map_or("state unreadable", state_word);
    let phys = p.phys_state.as_deref().map_or("?", state_word);
    let number = p.state.as_deref().and_then(state_number);
    let text = format!("{name} is {state} ({phys})");
    let leave_out = format!(
        "if {name} is not wired on purpose, leave it out: NCCL_IB_HCA=^={}:{}",
        p.device, p.port
    );
    let hint = match number {
        Some(PORT_INIT) | Some(PORT_ARMED) if !is_roce(p) => format!(
            "{name} has a link but no subnet manager configured it: start one on the fabric \
             (`opensm` on one node, or enable the SM on the switch / UFM; `sminfo` shows it)"
        ),
        Some(_) => format!(
            "{name} has no working link: check its cable, transceiver and switch port \
             (`ibstat {} {}`, `mlxlink -d {} -p {}`); {leave_out}",
            p.device, p.port, p.device, p.port
        ),
        None => format!("cannot read the state of {name}; {leave_out}"),
    };
    let text = if matches!(number, Some(PORT_INIT) | Some(PORT_ARMED)) && !is_roce(p) {
        format!("{text}: no subnet manager")
    } else {
        text
    };
    // No subnet manager: the fabric's business; no link: the cable's.
    let action = match number {
        Some(PORT_INIT) | Some(PORT_ARMED) if !is_roce(p) => Action::ContactProvider,
        Some(_) => Action::ServiceHardware,
        None => Action::FixConfig,
    };
    crate::Finding::new(None, Status::Fail, text)
        .hint(hint)
        .action(action)
        .port(format!("{}/{}", p.device, p.port))
}

/// A RoCE port needs a routable RoCE v2 GID and jumbo frames.
fn roce_findings(findings: &mut Findings, p: &RdmaPort) {
    let name = port_name(p);
    let netdevs: Vec<&str> = p.netdevs.iter().map(|n| n.name.as_str()).collect();
    let dev = netdevs.first().copied().unwrap_or("its interface");
    let routable_v2 = p.gids.iter().any(|g| {
        g.kind.as_deref() == Some("RoCE v2") && !g.gid.to_ascii_lowercase().starts_with("fe80:")
    });
    if !routable_v2 {
        findings.add(
            Status::Warn,
            format!("{name} (RoCE) has no RoCE v2 GID with an IP address"),
            Some(format!(
                "give {dev} an IP address (RoCE v2 GIDs are made from the interface's addresses) \
                 and check the GID table (`show_gids`, or NCCL_IB_GID_INDEX)"
            )),
        );
    }
    for n in &p.netdevs {
        if let Some(mtu) = n.mtu.filter(|m| *m < ROCE_MIN_NETDEV_MTU) {
            findings.add(
                Status::Warn,
                format!(
                    "{name} (RoCE) runs over {} with MTU {mtu}: RoCE frames smaller than 4096 bytes",
                    n.name
                ),
                Some(format!(
                    "raise the MTU of {} and its switch ports to 9000 (`ip link set {} mtu 9000`)",
                    n.name, n.name
                )),
            );
        }
    }
}

/// An active port slower than the fastest of its kind (same link layer).
fn rate_findings(findings: &mut Findings, selected: &[&RdmaPort]) {
    let active: Vec<&&RdmaPort> = selected.iter().filter(|p| is_active(p)).collect();
    for p in &active {
        let Some(mine) = p.rate.as_deref().and_then(rate_gbps) else {
            continue;
        };
        let fastest = active
            .iter()
            .filter(|o| o.link_layer == p.link_layer)
            .filter_map(|o| Some((rate_gbps(o.rate.as_deref()?)?, *o)))
            .reduce(|a, b| if b.0 > a.0 { b } else { a });
        if let Some((_, other)) = fastest.filter(|(top, _)| mine < *top) {
            let name = port_name(p);
            findings.add(
                Status::Warn,
                format!(
                    "{name} runs at {}, {} at {}",
                    p.rate.as_deref().unwrap_or(""),
                    port_name(other),
                    other.rate.as_deref().unwrap_or("")
                ),
                Some(format!(
                    "NCCL's rings run at the slowest NIC's pace: check the cable or transceiver \
                     and the switch port of {name} (`ibstat {} {}`, `mlxlink -d {} -p {}`)",
                    p.device, p.port, p.device, p.port
                )),
            );
        }
    }
}

/// ": mlx5_0/1 400 Gb/sec (4X NDR), ..." or, when all share one rate,
/// " at 400 Gb/sec (4X NDR): mlx5_0/1, mlx5_1/1".
fn describe_active(active: &[&&RdmaPort]) -> String {
    let rate = |p: &RdmaPort| p.rate.clone().unwrap_or_else(|| "rate unknown".into());
    let Some(first) = active.first() else {
        return String::new();
    };
    if active.iter().all(|p| p.rate == first.rate) {
        let names: Vec<String> = active.iter().map(|p| port_name(p)).collect();
        format!(" at {}: {}", rate(first), list_cut(&names, 8))
    } else {
        let described: Vec<String> = active
            .iter()
            .map(|p| format!("{} {}", port_name(p), rate(p)))
            .collect();
        format!(": {}", list_cut(&described, 4))
    }
}

fn port_table(ports: &[RdmaPort], filter: Option<&HcaFilter>) -> DataTable {
    let rows = ports
        .iter()
        .map(|p| {
            let netdevs: Vec<String> = p
                .netdevs
                .iter()
                .map(|n| match n.mtu {
                    Some(m) => format!("{} (MTU {m})", n.name),
                    None => n.name.clone(),
                })
                .collect();
            let used = filter.is_none_or(|h| h.selects(&p.device, p.port));
            vec![
                port_name(p),
                p.state.as_deref().map_or("?", state_word).to_string(),
                p.phys_state.as_deref().map_or("?", state_word).to_string(),
                p.rate.clone().unwrap_or_else(|| "?".into()),
                p.link_layer.clone().unwrap_or_else(|| "?".into()),
                netdevs.join(", "),
                if used { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    DataTable {
        title: "RDMA ports".into(),
        header: [
            "port",
            "state",
            "physical",
            "rate",
            "link layer",
            "interface",
            "NCCL uses",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        legend: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::sysfs::{Gid, Netdev};

    fn ib(device: &str, state: &str, phys: &str, rate: &str) -> RdmaPort {
        RdmaPort {
            device: device.into(),
            port: 1,
            state: Some(state.into()),
            phys_state: Some(phys.into()),
            rate: Some(rate.into()),
            link_layer: Some("InfiniBand".into()),
            gids: vec![],
            netdevs: vec![],
        }
    }

    const NDR: &str = "400 Gb/sec (4X NDR)";

    fn active(device: &str) -> RdmaPort {
        ib(device, "4: ACTIVE", "5: LinkUp", NDR)
    }

    fn roce(gid_kind: &str, gid: &str, mtu: u32) -> RdmaPort {
        RdmaPort {
            link_layer: Some("Ethernet".into()),
            gids: vec![Gid {
                index: 3,
                gid: gid.into(),
                kind: Some(gid_kind.into()),
            }],
            netdevs: vec![Netdev {
                name: "eth2".into(),
                mtu: Some(mtu),
            }],
            ..ib("mlx5_0", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")
        }
    }

    const V4_GID: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";

    fn facts(ports: Vec<RdmaPort>, hca: Option<&str>) -> RdmaFacts {
        RdmaFacts {
            ports: Ok(ports),
            nccl_ib_hca: hca.map(String::from),
            multi_node: None,
            datacentre_gpu: None,
        }
    }

    #[test]
    fn no_devices_in_a_multi_node_run_on_datacentre_gpus_warns() {
        let mut f = facts(vec![], None);
        f.multi_node = Some("WORLD_SIZE=16 > LOCAL_WORLD_SIZE=8".into());
        f.datacentre_gpu = Some("NVIDIA H100 80GB HBM3".into());
        let o = evaluate(&f);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.starts_with(
                "no RDMA devices in a multi-node run (WORLD_SIZE=16 > LOCAL_WORLD_SIZE=8) on NVIDIA H100 80GB HBM3"
            ),
            "{}",
            o.summary
        );
        assert!(o.hint.unwrap_or_default().contains("/dev/infiniband"));
        f.datacentre_gpu = None;
        assert_eq!(evaluate(&f).status, Status::Skip);
    }

    #[test]
    fn datacentre_parts_and_multi_node_runs_are_recognised() {
        for name in [
            "NVIDIA H100 80GB HBM3",
            "NVIDIA L40S",
            "NVIDIA A100-SXM4-80GB",
            "Tesla V100-SXM2-32GB",
        ] {
            assert!(is_datacentre_gpu(name), "{name}");
        }
        for name in ["NVIDIA GeForce RTX 4090", "NVIDIA RTX A4000", "garbage", ""] {
            assert!(!is_datacentre_gpu(name), "{name}");
        }
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            multi_node_reason(env(&[("WORLD_SIZE", "16"), ("LOCAL_WORLD_SIZE", "8")])).as_deref(),
            Some("WORLD_SIZE=16 > LOCAL_WORLD_SIZE=8")
        );
        assert_eq!(
            multi_node_reason(env(&[("WORLD_SIZE", "8"), ("LOCAL_WORLD_SIZE", "8")])),
            None
        );
        assert_eq!(
            multi_node_reason(env(&[("SLURM_NNODES", "4")])).as_deref(),
            Some("SLURM_NNODES=4")
        );
        assert_eq!(multi_node_reason(env(&[("WORLD_SIZE", "x")])), None);
    }

    #[test]
    fn all_ports_active_pass_with_their_rates() {
        let o = evaluate(&facts(vec![active("mlx5_0"), active("mlx5_1")], None));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "2 RDMA ports active at 400 Gb/sec (4X NDR): mlx5_0/1, mlx5_1/1"
        );
        assert_eq!(o.hint, None);
        assert_eq!(o.metric("rdma_ports_active"), Some(2.0));
        let links = o
            .fact::<crate::facts::fabric::NicLinks>()
            .expect("the active ports are published for the fleet checks");
        assert_eq!(links.links.len(), 2);
        assert_eq!(links.aggregate_gbytes_per_s(), 100.0);
    }

    #[test]
    fn init_port_fails_naming_the_subnet_manager() {
        let o = evaluate(&facts(
            vec![active("mlx5_0"), ib("mlx5_1", "2: INIT", "5: LinkUp", NDR)],
            None,
        ));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "mlx5_1/1 is INIT (LinkUp): no subnet manager");
        assert!(o.hint.unwrap_or_default().contains("`opensm`"));
    }

    #[test]
    fn down_port_fails_naming_cable_and_switch() {
        let o = evaluate(&facts(
            vec![active("mlx5_0"), ib("mlx5_1", "1: DOWN", "2: Polling", NDR)],
            None,
        ));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "mlx5_1/1 is DOWN (Polling)");
        let hint = o.hint.unwrap_or_default();
        assert!(
            hint.contains("cable") && hint.contains("NCCL_IB_HCA=^=mlx5_1:1"),
            "{hint}"
        );
    }

    #[test]
    fn a_slower_port_warns_naming_both_rates() {
        let o = evaluate(&facts(
            vec![
                active("mlx5_0"),
                ib("mlx5_1", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)"),
            ],
            None,
        ));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "mlx5_1/1 runs at 200 Gb/sec (4X HDR), mlx5_0/1 at 400 Gb/sec (4X NDR)"
        );
        assert!(o.hint.unwrap_or_default().contains("slowest NIC"));
    }

    #[test]
    fn roce_with_a_v2_gid_and_jumbo_frames_passes() {
        let o = evaluate(&facts(vec![roce("RoCE v2", V4_GID, 9000)], None));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
    }

    #[test]
    fn roce_without_a_v2_gid_warns() {
        let o = evaluate(&facts(vec![roce("IB/RoCE v1", V4_GID, 9000)], None));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "mlx5_0/1 (RoCE) has no RoCE v2 GID with an IP address"
        );
        assert!(o
            .hint
            .unwrap_or_default()
            .starts_with("give eth2 an IP address"));
        let link_local = evaluate(&facts(
            vec![roce(
                "RoCE v2",
                "fe80:0000:0000:0000:0a00:00ff:fe00:0001",
                9000,
            )],
            None,
        ));
        assert_eq!(link_local.status, Status::Warn);
    }

    #[test]
    fn roce_with_a_small_mtu_warns() {
        let o = evaluate(&facts(vec![roce("RoCE v2", V4_GID, 1500)], None));
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("eth2 with MTU 1500"), "{}", o.summary);
        assert!(o
            .hint
            .unwrap_or_default()
            .contains("`ip link set eth2 mtu 9000`"));
    }

    #[test]
    fn no_devices_skip_and_an_hca_list_without_devices_fails() {
        let o = evaluate(&facts(vec![], None));
        assert_eq!(o.status, Status::Skip);
        assert_eq!(
            o.summary,
            "no RDMA devices: NCCL will use TCP sockets between nodes"
        );
        let o = evaluate(&facts(vec![], Some("mlx5_0")));
        assert_eq!(o.status, Status::Fail);
        assert!(o.hint.unwrap_or_default().contains("/dev/infiniband"));
        assert_eq!(
            evaluate(&facts(vec![], Some("^mlx5_0"))).status,
            Status::Skip
        );
    }

    #[test]
    fn hca_list_naming_a_missing_device_fails() {
        let o = evaluate(&facts(vec![active("mlx5_0")], Some("mlx5_0:1,mlx5_9")));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NCCL_IB_HCA names mlx5_9, which matches no RDMA port (this machine has mlx5_0/1)"
        );
        assert!(o.hint.unwrap_or_default().contains("ibv_devinfo -l"));
    }

    #[test]
    fn hca_list_selecting_a_down_port_fails_and_excluding_it_passes() {
        let ports = vec![
            active("mlx5_0"),
            ib("mlx5_1", "1: DOWN", "3: Disabled", NDR),
        ];
        let o = evaluate(&facts(ports.clone(), Some("=mlx5_1")));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "mlx5_1/1 is DOWN (Disabled)");
        let o = evaluate(&facts(ports, Some("^=mlx5_1")));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "1 RDMA port active (NCCL_IB_HCA=\"^=mlx5_1\") at 400 Gb/sec (4X NDR): mlx5_0/1"
        );
    }

    #[test]
    fn hca_syntax_follows_nccl() {
        let p = active("mlx5_10");
        assert!(
            HcaFilter::parse("mlx5_1").selects(&p.device, p.port),
            "prefix match"
        );
        assert!(
            !HcaFilter::parse("=mlx5_1").selects(&p.device, p.port),
            "exact match"
        );
        assert!(!HcaFilter::parse("^mlx5").selects(&p.device, p.port));
        assert!(HcaFilter::parse("mlx5_10:1").selects(&p.device, p.port));
        assert!(!HcaFilter::parse("mlx5_10:2").selects(&p.device, p.port));
    }

    #[test]
    fn unlistable_devices_skip_with_the_reason() {
        let o = evaluate(&RdmaFacts {
            ports: Err("cannot list /sys/class/infiniband: Permission denied".into()),
            ..facts(vec![], None)
        });
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("Permission denied"));
    }

    #[test]
    fn unreadable_state_fails_without_panic() {
        let mut p = active("mlx5_0");
        p.state = None;
        p.rate = Some("garbage".into());
        let o = evaluate(&facts(vec![p], None));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("state unreadable"));
    }
}

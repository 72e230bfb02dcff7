//! Each GPU's fabric registration and health, and whether a node's GPUs
//! share one NVLink domain: findings for `fabric.mnnvl`.

use crate::domain::action::Action;
use crate::domain::nvlink_fabric::{
    decode_health_mask, in_multi_node_fabric, incorrect_configuration_text, is_zero_uuid, summary,
    uuid_text, Flag, Summary, CONFIG_NONE, CONFIG_NOT_SUPPORTED, REGISTRATION_GRACE_SECS,
    STATE_COMPLETED, STATE_IN_PROGRESS, STATE_NOT_STARTED,
};
use crate::domain::text::gpus_phrase;
use crate::findings::Finding;
use crate::probe::nvml::{nvml_return_name, FabricInfo, Reading, Unavailable};
use crate::Status;

/// NVML_ERROR_INSUFFICIENT_RESOURCES (nvml.h 11.8): the fabric had no room
/// for the GPU (Azure/azhpc-images#506: "Status: Insufficient Resources",
/// clique 0, zero cluster UUID).
const STATUS_INSUFFICIENT_RESOURCES: i32 = 23;

const NOT_STARTED_HINT: &str = "nothing has registered {gpus} with the NVLink fabric yet: on \
    HGX/DGX systems start the fabric manager at the driver's version (`sudo systemctl enable \
    --now nvidia-fabricmanager`; B200/B300 also need `nvidia-nvlsm`); on GB200/GB300 NVL72 racks \
    the NVLink switch trays' NMX controller registers the GPUs: ask the rack's operator whether \
    its fabric manager is running. `nvidia-smi -q -i {ids} | grep -A12 Fabric` shows the state";

const WAIT_HINT: &str = "the NVLink fabric is still registering {gpus}, as it does in the first \
    minutes after a boot: wait and run gpucheck again; CUDA cannot start on a GPU until it is \
    registered";

const STUCK_HINT: &str = "{gpus} should have finished registering with the NVLink fabric by \
    now: check the fabric manager (`systemctl status nvidia-fabricmanager`, and `nvidia-nvlsm` \
    on B200/B300; on NVL72 racks the switch trays' NMX controller) and its log; a fabric \
    manager restarted after the GPUs registered leaves them stuck until they are reset \
    (`sudo nvidia-smi -r -i {ids}`)";

const RESOURCES_HINT: &str = "the NVLink fabric had no room for {gpus} (a partition or route \
    table the fabric manager could not give): this is the rack's side, not the node's; ask \
    the provider or the rack's operator to repair the NVLink partition, then reboot the node \
    so the GPUs register again";

const FAILED_HINT: &str = "registration of {gpus} with the NVLink fabric failed: reboot the \
    node so the driver registers them again, and read the fabric manager's log (`journalctl \
    -u nvidia-fabricmanager`; on NVL72 racks the NMX controller's) for the cause";

const HEALTH_HINT: &str = "the NVLink fabric reports {gpus} unhealthy (`nvidia-smi -q -i {ids} \
    | grep -A12 Fabric` shows which field): NCCL falls back to the network between trays or \
    fails; drain the node and have the rack's NVLink (trays, cables, switch trays) serviced";

const TRANSIENT_HINT: &str = "the NVLink fabric is recovering a route of {gpus}: traffic may \
    stall meanwhile; run gpucheck again in a few minutes, and have the rack serviced if it \
    keeps recovering";

const CONFIG_HINT: &str = "the NVLink fabric found {gpus} configured wrongly for the rack \
    (system GUID, chassis serial, location or firmware): the tray's identity or firmware must \
    match what the rack's fabric manager expects; ask the provider or the rack's operator";

const SPLIT_HINT: &str = "NCCL uses NVLink between trays only among GPUs of one cluster UUID and \
    clique (src/mnnvl.cc): a node whose GPUs sit in different NVLink domains sends between \
    them over the network; the rack's NVLink partition must hold all of them (ask the \
    provider or the rack's operator)";

/// What a reading of one GPU's fabric says.
pub fn gpu_findings(gpu: u32, reading: &Reading<FabricInfo>, uptime: Option<f64>) -> Vec<Finding> {
    let info = match reading {
        Ok(info) => info,
        Err(Unavailable::NotSupported) => return Vec::new(),
        Err(e) => {
            return vec![Finding::new(
                Some(gpu),
                Status::Warn,
                format!("fabric info unreadable: {e}"),
            )]
        }
    };
    match info.state {
        STATE_NOT_STARTED => vec![Finding::new(
            Some(gpu),
            Status::Fail,
            "NVLink fabric registration not started",
        )
        .hint(NOT_STARTED_HINT)
        .action(Action::FixInstall)],
        STATE_IN_PROGRESS => vec![in_progress(gpu, uptime)],
        STATE_COMPLETED if info.status != 0 => vec![failed(gpu, info.status)],
        STATE_COMPLETED => health_findings(gpu, info),
        other => vec![Finding::new(
            Some(gpu),
            Status::Warn,
            format!("NVLink fabric state {other}, which nvml.h does not define"),
        )],
    }
}

/// Registration under way: expected right after boot, stuck later.
fn in_progress(gpu: u32, uptime: Option<f64>) -> Finding {
    match uptime {
        Some(secs) if secs < REGISTRATION_GRACE_SECS => Finding::new(
            Some(gpu),
            Status::Warn,
            format!(
                "NVLink fabric registration in progress, {:.0} s after boot",
                secs
            ),
        )
        .hint(WAIT_HINT)
        .action(Action::None),
        Some(secs) => Finding::new(
            Some(gpu),
            Status::Fail,
            format!(
                "NVLink fabric registration still in progress {:.0} min after boot",
                secs / 60.0
            ),
        )
        .hint(STUCK_HINT)
        .action(Action::ResetGpu),
        None => Finding::new(
            Some(gpu),
            Status::Fail,
            "NVLink fabric registration in progress (boot time unknown)",
        )
        .hint(STUCK_HINT)
        .action(Action::ResetGpu),
    }
}

fn failed(gpu: u32, status: i32) -> Finding {
    let f = Finding::new(
        Some(gpu),
        Status::Fail,
        format!(
            "NVLink fabric registration failed: {}",
            nvml_return_name(status)
        ),
    );
    if status == STATUS_INSUFFICIENT_RESOURCES {
        f.hint(RESOURCES_HINT).action(Action::ContactProvider)
    } else {
        f.hint(FAILED_HINT).action(Action::RebootNode)
    }
}

/// A registered GPU: its health summary (v3) and mask (v2, v3).
fn health_findings(gpu: u32, info: &FabricInfo) -> Vec<Finding> {
    let mut out = Vec::new();
    let bad = |status: Status, text: String| Finding::new(Some(gpu), status, text);
    match info.health_summary.map(summary) {
        Some(Summary::Unhealthy) => out.push(
            bad(Status::Fail, "NVLink fabric health: unhealthy".into())
                .hint(HEALTH_HINT)
                .action(Action::ServiceHardware),
        ),
        Some(Summary::LimitedCapacity) => out.push(
            bad(
                Status::Warn,
                "NVLink fabric health: limited capacity".into(),
            )
            .hint(HEALTH_HINT)
            .action(Action::ServiceHardware),
        ),
        Some(Summary::Other(code)) => out.push(bad(
            Status::Warn,
            format!("NVLink fabric health summary {code}, which nvml.h does not define"),
        )),
        _ => {}
    }
    if let Some(mask) = info.health_mask {
        out.extend(mask_findings(gpu, mask, in_multi_node_fabric(info)));
    }
    out
}

/// The health mask's fields that are set ("true" for a fault, "false" for
/// partition assigned on a multi-node GPU).
fn mask_findings(gpu: u32, mask: u32, multi_node: bool) -> Vec<Finding> {
    let m = decode_health_mask(mask);
    let mut out = Vec::new();
    let mut push = |status, text: &str, hint, action| {
        out.push(
            Finding::new(Some(gpu), status, text)
                .hint(hint)
                .action(action),
        )
    };
    if m.degraded_bandwidth == Flag::True {
        push(
            Status::Warn,
            "NVLink bandwidth degraded",
            HEALTH_HINT,
            Action::ServiceHardware,
        );
    }
    if m.route_unhealthy == Flag::True {
        push(
            Status::Fail,
            "NVLink fabric route unhealthy",
            HEALTH_HINT,
            Action::ServiceHardware,
        );
    }
    if m.route_recovery == Flag::True {
        push(
            Status::Warn,
            "NVLink route recovery in progress",
            TRANSIENT_HINT,
            Action::None,
        );
    }
    if m.access_timeout_recovery == Flag::True {
        push(
            Status::Warn,
            "NVLink access-timeout recovery in progress",
            TRANSIENT_HINT,
            Action::None,
        );
    }
    if multi_node && m.partition_assigned == Flag::False {
        push(
            Status::Fail,
            "not assigned to an NVLink partition",
            CONFIG_HINT,
            Action::ContactProvider,
        );
    }
    out.extend(config_finding(gpu, m.incorrect_configuration));
    let invalid = [
        m.degraded_bandwidth,
        m.route_recovery,
        m.route_unhealthy,
        m.access_timeout_recovery,
        m.partition_assigned,
    ];
    if invalid.contains(&Flag::Invalid) {
        out.push(Finding::new(
            Some(gpu),
            Status::Warn,
            format!("NVLink fabric health mask {mask:#x} holds a value nvml.h does not define"),
        ));
    }
    out
}

/// The incorrect-configuration code, when it names a fault.
fn config_finding(gpu: u32, code: u32) -> Option<Finding> {
    if code == CONFIG_NOT_SUPPORTED || code == CONFIG_NONE {
        return None;
    }
    let action = match code {
        5 => Action::ServiceHardware,
        6 => Action::FixInstall,
        8 => Action::ResetGpu,
        _ => Action::ContactProvider,
    };
    Some(
        Finding::new(
            Some(gpu),
            Status::Fail,
            format!(
                "NVLink fabric configuration incorrect: {}",
                incorrect_configuration_text(code)
            ),
        )
        .hint(CONFIG_HINT)
        .action(action),
    )
}

/// The NVLink domains of this node's registered GPUs: (cluster UUID,
/// clique) with its GPUs, in order of first appearance; GPUs registered
/// without a multi-node fabric (zero UUID) under an empty UUID.
pub fn domains(gpus: &[(u32, Reading<FabricInfo>)]) -> Vec<((String, u32), Vec<u32>)> {
    let mut out: Vec<((String, u32), Vec<u32>)> = Vec::new();
    for (gpu, reading) in gpus {
        let Ok(info) = reading else { continue };
        if info.state != STATE_COMPLETED || info.status != 0 {
            continue;
        }
        let key = if is_zero_uuid(&info.cluster_uuid) {
            (String::new(), 0)
        } else {
            (info.cluster_uuid.clone(), info.clique_id)
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(*gpu),
            None => out.push((key, vec![*gpu])),
        }
    }
    out
}

/// How a domain reads in a summary.
pub fn domain_text(key: &(String, u32)) -> String {
    if key.0.is_empty() {
        "no multi-node NVLink fabric".to_string()
    } else {
        format!("cluster {} clique {}", uuid_text(&key.0), key.1)
    }
}

/// A node's GPUs in more than one NVLink domain (or some in none).
pub fn split_finding(domains: &[((String, u32), Vec<u32>)]) -> Option<Finding> {
    if domains.len() < 2 || domains.iter().all(|(k, _)| k.0.is_empty()) {
        return None;
    }
    let parts: Vec<String> = domains
        .iter()
        .map(|(k, g)| format!("{} in {}", gpus_phrase(g), domain_text(k)))
        .collect();
    Some(
        Finding::new(
            None,
            Status::Fail,
            format!(
                "this node's GPUs are in different NVLink domains: {}",
                parts.join("; ")
            ),
        )
        .hint(SPLIT_HINT)
        .action(Action::ContactProvider),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "dc6e40c4d72243579ba65291dd461278";

    fn info(state: u8, status: i32, mask: Option<u32>, summary: Option<u8>) -> FabricInfo {
        FabricInfo {
            struct_version: 3,
            state,
            status,
            clique_id: 2,
            cluster_uuid: UUID.into(),
            health_mask: mask,
            health_summary: summary,
        }
    }

    fn one(
        reading: Reading<FabricInfo>,
        uptime: Option<f64>,
    ) -> Vec<(Status, String, Option<Action>)> {
        gpu_findings(0, &reading, uptime)
            .into_iter()
            .map(|f| (f.status, f.text, f.action))
            .collect()
    }

    #[test]
    fn every_state_has_its_verdict_and_action() {
        assert!(one(Err(Unavailable::NotSupported), None).is_empty());
        assert_eq!(
            one(Ok(info(1, 0, None, None)), Some(30.0)),
            [(
                Status::Fail,
                "NVLink fabric registration not started".into(),
                Some(Action::FixInstall)
            )]
        );
        assert_eq!(
            one(Ok(info(2, 0, None, None)), Some(90.0)),
            [(
                Status::Warn,
                "NVLink fabric registration in progress, 90 s after boot".into(),
                Some(Action::None)
            )]
        );
        assert_eq!(
            one(Ok(info(2, 0, None, None)), Some(1800.0)),
            [(
                Status::Fail,
                "NVLink fabric registration still in progress 30 min after boot".into(),
                Some(Action::ResetGpu)
            )]
        );
        assert_eq!(one(Ok(info(2, 0, None, None)), None)[0].0, Status::Fail);
        assert!(one(Ok(info(3, 0, Some(0xaa), Some(1))), None).is_empty());
        assert_eq!(one(Ok(info(7, 0, None, None)), None)[0].0, Status::Warn);
    }

    #[test]
    fn a_completed_registration_with_an_error_names_it_by_nvml_h() {
        assert_eq!(
            one(Ok(info(3, 23, None, None)), None),
            [(
                Status::Fail,
                "NVLink fabric registration failed: NVML_ERROR_INSUFFICIENT_RESOURCES".into(),
                Some(Action::ContactProvider)
            )]
        );
        assert_eq!(
            one(Ok(info(3, 999, None, None)), None)[0],
            (
                Status::Fail,
                "NVLink fabric registration failed: NVML_ERROR_UNKNOWN".into(),
                Some(Action::RebootNode)
            )
        );
    }

    #[test]
    fn every_summary_and_mask_field_is_judged() {
        let cases: &[(u32, Option<u8>, Status, &str, Action)] = &[
            (
                0xaa,
                Some(2),
                Status::Fail,
                "NVLink fabric health: unhealthy",
                Action::ServiceHardware,
            ),
            (
                0xaa,
                Some(3),
                Status::Warn,
                "NVLink fabric health: limited capacity",
                Action::ServiceHardware,
            ),
            (
                0xa9,
                Some(1),
                Status::Warn,
                "NVLink bandwidth degraded",
                Action::ServiceHardware,
            ),
            (
                0xa6,
                Some(1),
                Status::Warn,
                "NVLink route recovery in progress",
                Action::None,
            ),
            (
                0x9a,
                Some(1),
                Status::Fail,
                "NVLink fabric route unhealthy",
                Action::ServiceHardware,
            ),
            (
                0x6a,
                Some(1),
                Status::Warn,
                "NVLink access-timeout recovery in progress",
                Action::None,
            ),
            (
                0x21aa,
                Some(1),
                Status::Fail,
                "not assigned to an NVLink partition",
                Action::ContactProvider,
            ),
            (
                0x2aa,
                Some(1),
                Status::Fail,
                "NVLink fabric configuration incorrect: wrong system GUID",
                Action::ContactProvider,
            ),
            (
                0x3aa,
                Some(1),
                Status::Fail,
                "NVLink fabric configuration incorrect: wrong chassis serial number",
                Action::ContactProvider,
            ),
            (
                0x4aa,
                Some(1),
                Status::Fail,
                "NVLink fabric configuration incorrect: no NVLink partition",
                Action::ContactProvider,
            ),
            (
                0x5aa,
                Some(1),
                Status::Fail,
                "NVLink fabric configuration incorrect: not enough NVLinks",
                Action::ServiceHardware,
            ),
            (
                0x6aa,
                Some(1),
                Status::Fail,
                "NVLink fabric configuration incorrect: GPU firmware incompatible with the fabric",
                Action::FixInstall,
            ),
            (
                0x7aa,
                Some(1),
                Status::Fail,
                "NVLink fabric configuration incorrect: invalid location in the rack",
                Action::ContactProvider,
            ),
            (
                0x8aa,
                Some(1),
                Status::Fail,
                "NVLink fabric configuration incorrect: GPU state invalid",
                Action::ResetGpu,
            ),
        ];
        for (mask, summary, status, text, action) in cases {
            let got = one(Ok(info(3, 0, Some(*mask), *summary)), None);
            assert_eq!(
                got,
                [(*status, text.to_string(), Some(*action))],
                "mask {mask:#x}"
            );
        }
        // Healthy: every field false, configuration none, partition assigned.
        assert!(one(Ok(info(3, 0, Some(0x11aa), Some(1))), None).is_empty());
        // A 3 in a 2-bit field is named, not guessed at.
        assert_eq!(
            one(Ok(info(3, 0, Some(0xab), Some(1))), None)[0].0,
            Status::Warn
        );
    }

    #[test]
    fn a_node_split_across_domains_fails_and_one_domain_passes() {
        let mut other = info(3, 0, None, None);
        other.clique_id = 5;
        let gpus = vec![
            (0, Ok(info(3, 0, None, None))),
            (1, Ok(info(3, 0, None, None))),
            (2, Ok(other)),
        ];
        let d = domains(&gpus);
        assert_eq!(d.len(), 2);
        let f = split_finding(&d).expect("split");
        assert_eq!(f.status, Status::Fail);
        assert_eq!(
            f.text,
            "this node's GPUs are in different NVLink domains: GPUs 0, 1 in cluster \
             dc6e40c4-d722-4357-9ba6-5291dd461278 clique 2; GPU 2 in cluster \
             dc6e40c4-d722-4357-9ba6-5291dd461278 clique 5"
        );
        assert!(split_finding(&domains(&gpus[..2])).is_none());
        let mut zero = info(3, 0, None, None);
        zero.cluster_uuid = "0".repeat(32);
        let hgx = vec![(0, Ok(zero.clone())), (1, Ok(zero))];
        assert!(split_finding(&domains(&hgx)).is_none());
    }
}

//! IMEX on a node of a multi-node NVLink domain: a channel this process can
//! use, the local daemon READY, the domain UP. Findings for `fabric.mnnvl`.
//!
//! States as NVIDIA's IMEX guide and DCGM's IMEX module name them: the
//! daemon (`nvidia-imex-ctl -q`) INITIALIZING, STARTING_AUTH_SERVER,
//! WAITING_FOR_PEERS, WAITING_FOR_RECOVERY, INIT_GPU, READY, SHUTTING_DOWN,
//! UNAVAILABLE; the domain (`nvidia-imex-ctl -N -j`, `"status"`) UP,
//! DEGRADED, DOWN, each node with its own `"status"`, `"version"` and
//! `"connections"` (`"CONNECTED"` when up).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::domain::action::Action;
use crate::domain::text::{cut, list_cut, quote_value};
use crate::findings::Finding;
use crate::probe::imex::{CommandAnswer, ImexFacts, IMEX_CTL};
use crate::Status;

/// Longest tool output quoted in a summary.
const QUOTE_CHARS: usize = 120;

const NO_CHANNEL_HINT: &str = "a process needs an IMEX channel device to share GPU memory across \
    trays: without one cuMemCreate with CU_MEM_HANDLE_TYPE_FABRIC fails with \
    CUDA_ERROR_NOT_PERMITTED and NCCL stops with 'MNNVL ... is available but not working' \
    (NVIDIA/nvbandwidth#39). On the host: `sudo mkdir -p /dev/nvidia-caps-imex-channels && sudo \
    mknod /dev/nvidia-caps-imex-channels/channel0 c $(awk '$2==\"nvidia-caps-imex-channels\" \
    {print $1}' /proc/devices) 0` (or load nvidia with NVreg_CreateImexChannel0=1); in a \
    container set NVIDIA_IMEX_CHANNELS=0 (NVIDIA Container Toolkit) or request a ComputeDomain \
    channel (Kubernetes DRA driver)";

const DAEMON_HINT: &str = "the IMEX daemon must be READY on every node of the job: `sudo \
    systemctl status nvidia-imex`, `journalctl -u nvidia-imex`; it waits for peers until every \
    address in its nodes file (/etc/nvidia-imex/nodes_config.cfg) runs IMEX of the same \
    version and can be reached on its port (50000 by default); `nvidia-imex-ctl -N` shows which \
    node is missing";

const CTL_HINT: &str = "nvidia-imex-ctl could not ask the daemon: start it (`sudo systemctl \
    enable --now nvidia-imex`) and set IMEX_CMD_ENABLED=1 in /etc/nvidia-imex/config.cfg so it \
    answers queries";

/// `nvidia-imex-ctl -N -j`, the fields judged.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct DomainStatus {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub nodes: BTreeMap<String, DomainNode>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct DomainNode {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub host: String,
    #[serde(default, rename = "hostName")]
    pub host_name: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub connections: BTreeMap<String, Connection>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Connection {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub host: String,
}

impl DomainNode {
    fn name(&self) -> &str {
        self.host_name.as_deref().unwrap_or(&self.host)
    }
}

/// The channel devices this process can use, against NVIDIA_IMEX_CHANNELS.
pub fn channel_findings(imex: &ImexFacts) -> Vec<Finding> {
    let mut out = Vec::new();
    if imex.channels.is_empty() {
        let why = match imex.channels_major {
            None => "no IMEX channel (the driver lists no nvidia-caps-imex-channels in \
                /proc/devices: IMEX channels need R550 or later)"
                .to_string(),
            Some(_) => "no IMEX channel in /dev/nvidia-caps-imex-channels: fabric memory \
                cannot be shared across trays"
                .to_string(),
        };
        out.push(
            Finding::new(None, Status::Fail, why)
                .hint(NO_CHANNEL_HINT)
                .action(Action::FixConfig),
        );
    }
    if let Some(wanted) = imex.channels_env.as_deref() {
        let missing: Vec<String> = wanted
            .split(',')
            .map(str::trim)
            .filter_map(|c| c.parse::<u32>().ok())
            .filter(|c| !imex.channels.contains(c))
            .map(|c| format!("channel{c}"))
            .collect();
        if !missing.is_empty() && !imex.channels.is_empty() {
            out.push(
                Finding::new(
                    None,
                    Status::Warn,
                    format!(
                        "NVIDIA_IMEX_CHANNELS={} names {} that this container lacks",
                        quote_value(wanted),
                        list_cut(&missing, 4)
                    ),
                )
                .hint(NO_CHANNEL_HINT)
                .action(Action::FixConfig),
            );
        }
    }
    out
}

/// The local daemon's state (`nvidia-imex-ctl -q`).
pub fn daemon_findings(imex: &ImexFacts) -> Vec<Finding> {
    let state = match &imex.daemon {
        CommandAnswer::Output(text) => text.trim().to_string(),
        CommandAnswer::NotInstalled => return not_installed(imex),
        CommandAnswer::Failed(why) => {
            return vec![Finding::new(
                None,
                Status::Warn,
                format!("`{IMEX_CTL} -q` failed: {}", cut(why, QUOTE_CHARS)),
            )
            .hint(CTL_HINT)
            .action(Action::FixInstall)]
        }
        CommandAnswer::TimedOut(secs) => {
            return vec![Finding::new(
                None,
                Status::Warn,
                format!("`{IMEX_CTL} -q` did not answer in {secs:.0} s"),
            )
            .hint(DAEMON_HINT)
            .action(Action::FixInstall)]
        }
    };
    let (status, action) = match state.as_str() {
        "READY" => return Vec::new(),
        // Starting up: right after boot or a restart.
        "INITIALIZING" | "STARTING_AUTH_SERVER" | "INIT_GPU" => (Status::Warn, Action::None),
        "WAITING_FOR_PEERS" => (Status::Fail, Action::FixConfig),
        "WAITING_FOR_RECOVERY" => (Status::Fail, Action::RebootNode),
        _ => (Status::Fail, Action::FixInstall),
    };
    vec![Finding::new(
        None,
        status,
        format!("IMEX daemon {}", cut(&state, QUOTE_CHARS)),
    )
    .hint(DAEMON_HINT)
    .action(action)]
}

/// No nvidia-imex-ctl here: normal in a container (IMEX runs on the host),
/// a fault on a host with no IMEX configured.
fn not_installed(imex: &ImexFacts) -> Vec<Finding> {
    if imex.config.is_some() || !imex.channels.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        None,
        Status::Fail,
        "IMEX is not installed (no nvidia-imex-ctl, no /etc/nvidia-imex/config.cfg) and this \
         node's GPUs are in a multi-node NVLink domain",
    )
    .hint(
        "install the nvidia-imex package at the driver's version, list the domain's node \
         addresses in /etc/nvidia-imex/nodes_config.cfg and `sudo systemctl enable --now \
         nvidia-imex` (NVIDIA's IMEX guide); in Kubernetes the DRA driver's ComputeDomain runs \
         it",
    )
    .action(Action::FixInstall)]
}

/// A host nvidia-imex beside a Kubernetes DRA driver's: the driver's
/// ComputeDomain daemon then cannot allocate the IMEX session ("Failed to
/// allocate Imex session ... NV_ERR_IN_USE", NVIDIA/aicr#2520;
/// kubernetes-sigs/dra-driver-nvidia-gpu#524), never becomes ready, and
/// ComputeDomain workloads hang.
pub fn two_daemons_finding(imex: &ImexFacts) -> Option<Finding> {
    let in_pod = imex.daemons.iter().filter(|d| d.in_pod).count();
    let on_host = imex.daemons.iter().filter(|d| !d.in_pod).count();
    if in_pod == 0 || (on_host == 0 && !imex.host_service_enabled) {
        return None;
    }
    let host = if on_host > 0 {
        "a host nvidia-imex (nvidia-imex.service) runs"
    } else {
        "the host's nvidia-imex.service is enabled"
    };
    Some(
        Finding::new(
            None,
            Status::Fail,
            format!("{host} beside the Kubernetes DRA driver's IMEX daemon"),
        )
        .hint(
            "one node runs one IMEX daemon: with the DRA driver's ComputeDomains disable the \
             host's (`sudo systemctl disable --now nvidia-imex.service && sudo systemctl mask \
             nvidia-imex.service`, NVIDIA's GPU Operator DRA prerequisites), or run the DRA \
             driver in host-managed mode (its HostManagedIMEXDaemon feature gate) instead",
        )
        .action(Action::FixConfig),
    )
}

/// The domain's state (`nvidia-imex-ctl -N -j`).
pub fn domain_findings(imex: &ImexFacts) -> Vec<Finding> {
    let CommandAnswer::Output(text) = &imex.domain else {
        return Vec::new();
    };
    let domain: DomainStatus = match serde_json::from_str(text) {
        Ok(d) => d,
        Err(e) => {
            return vec![Finding::new(
                None,
                Status::Warn,
                format!("`{IMEX_CTL} -N -j` answered what is not its JSON: {e}"),
            )]
        }
    };
    let mut out = Vec::new();
    let down: Vec<String> = domain
        .nodes
        .values()
        .filter(|n| n.status != "READY")
        .map(|n| format!("{} {}", n.name(), n.status))
        .collect();
    let mut unreached: Vec<String> = domain
        .nodes
        .values()
        .flat_map(|n| n.connections.values())
        .filter(|c| c.status != "CONNECTED")
        .map(|c| c.host.clone())
        .collect();
    unreached.sort();
    unreached.dedup();
    let (status, action) = match domain.status.as_str() {
        "UP" => (Status::Pass, Action::None),
        "DEGRADED" => (Status::Warn, Action::ContactProvider),
        _ => (Status::Fail, Action::ContactProvider),
    };
    if status != Status::Pass {
        let mut said = Vec::new();
        if !down.is_empty() {
            said.push(list_cut(&down, 4));
        }
        if !unreached.is_empty() {
            said.push(format!("not connected: {}", list_cut(&unreached, 4)));
        }
        let nodes = if said.is_empty() {
            String::new()
        } else {
            format!(" ({})", said.join("; "))
        };
        out.push(
            Finding::new(
                None,
                status,
                format!("IMEX domain {}{nodes}", domain.status),
            )
            .hint(DAEMON_HINT)
            .action(action),
        );
    }
    out.extend(version_finding(&domain));
    out
}

/// IMEX daemons of different versions do not form a domain (the guide asks
/// for one version across the domain).
fn version_finding(domain: &DomainStatus) -> Option<Finding> {
    let mut versions: Vec<&str> = domain
        .nodes
        .values()
        .filter_map(|n| n.version.as_deref())
        .collect();
    versions.sort_unstable();
    versions.dedup();
    (versions.len() > 1).then(|| {
        Finding::new(
            None,
            Status::Warn,
            format!(
                "IMEX versions differ across the domain: {}",
                versions.join(", ")
            ),
        )
        .hint(DAEMON_HINT)
        .action(Action::FixInstall)
    })
}

/// How IMEX reads in a passing summary.
pub fn imex_text(imex: &ImexFacts) -> String {
    let channels: Vec<String> = imex
        .channels
        .iter()
        .map(|c| format!("channel{c}"))
        .collect();
    let mut parts = vec![format!("IMEX {}", list_cut(&channels, 3))];
    if let CommandAnswer::Output(state) = &imex.daemon {
        parts.push(format!("daemon {}", state.trim()));
    }
    if let CommandAnswer::Output(text) = &imex.domain {
        if let Ok(d) = serde_json::from_str::<DomainStatus>(text) {
            parts.push(format!("domain {} with {} nodes", d.status, d.nodes.len()));
        }
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> ImexFacts {
        ImexFacts {
            channels_major: Some(234),
            channels: vec![0],
            daemon: CommandAnswer::Output("READY\n".into()),
            domain: CommandAnswer::Output(
                r#"{"status":"UP","nodes":{"0":{"status":"READY","host":"10.0.0.1","version":"580.95.05","connections":{}},"1":{"status":"READY","host":"10.0.0.2","version":"580.95.05","connections":{}}}}"#.into(),
            ),
            ..ImexFacts::default()
        }
    }

    fn all(imex: &ImexFacts) -> Vec<(Status, String, Option<Action>)> {
        channel_findings(imex)
            .into_iter()
            .chain(daemon_findings(imex))
            .chain(domain_findings(imex))
            .map(|f| (f.status, f.text, f.action))
            .collect()
    }

    #[test]
    fn a_ready_node_in_an_up_domain_with_a_channel_has_nothing_to_say() {
        assert!(all(&ready()).is_empty());
        assert_eq!(
            imex_text(&ready()),
            "IMEX channel0, daemon READY, domain UP with 2 nodes"
        );
    }

    #[test]
    fn no_channel_fails_and_says_whether_the_driver_has_them() {
        let mut f = ready();
        f.channels.clear();
        let got = all(&f);
        assert_eq!(got[0].0, Status::Fail);
        assert!(got[0]
            .1
            .starts_with("no IMEX channel in /dev/nvidia-caps-imex-channels"));
        assert_eq!(got[0].2, Some(Action::FixConfig));
        f.channels_major = None;
        assert!(all(&f)[0].1.contains("need R550 or later"));
        let mut g = ready();
        g.channels_env = Some("0,3".into());
        assert_eq!(
            all(&g),
            [(
                Status::Warn,
                "NVIDIA_IMEX_CHANNELS=\"0,3\" names channel3 that this container lacks".into(),
                Some(Action::FixConfig)
            )]
        );
    }

    #[test]
    fn every_daemon_state_has_a_verdict() {
        let cases = [
            ("INITIALIZING", Status::Warn, Action::None),
            ("STARTING_AUTH_SERVER", Status::Warn, Action::None),
            ("INIT_GPU", Status::Warn, Action::None),
            ("WAITING_FOR_PEERS", Status::Fail, Action::FixConfig),
            ("WAITING_FOR_RECOVERY", Status::Fail, Action::RebootNode),
            ("SHUTTING_DOWN", Status::Fail, Action::FixInstall),
            ("UNAVAILABLE", Status::Fail, Action::FixInstall),
        ];
        for (state, status, action) in cases {
            let mut f = ready();
            f.daemon = CommandAnswer::Output(format!("{state}\n"));
            assert_eq!(
                all(&f),
                [(status, format!("IMEX daemon {state}"), Some(action))],
                "{state}"
            );
        }
        let mut f = ready();
        f.daemon = CommandAnswer::TimedOut(5.0);
        assert_eq!(all(&f)[0].1, "`nvidia-imex-ctl -q` did not answer in 5 s");
        f.daemon = CommandAnswer::Failed("exit code 1: connection refused".into());
        assert_eq!(all(&f)[0].0, Status::Warn);
    }

    #[test]
    fn a_degraded_or_down_domain_names_its_missing_nodes_and_versions() {
        let mut f = ready();
        f.domain = CommandAnswer::Output(
            r#"{"status":"DEGRADED","nodes":{"0":{"status":"READY","host":"10.0.0.1","version":"580.95.05"},"1":{"status":"UNAVAILABLE","host":"10.0.0.2","hostName":"tray-02","version":"570.124.06","connections":{"0":{"host":"10.0.0.1","status":"CONNECTED"},"1":{"host":"10.0.0.2","status":"DISCONNECTED"}}}}}"#.into(),
        );
        assert_eq!(
            all(&f),
            [
                (
                    Status::Warn,
                    "IMEX domain DEGRADED (tray-02 UNAVAILABLE; not connected: 10.0.0.2)".into(),
                    Some(Action::ContactProvider)
                ),
                (
                    Status::Warn,
                    "IMEX versions differ across the domain: 570.124.06, 580.95.05".into(),
                    Some(Action::FixInstall)
                ),
            ]
        );
        f.domain = CommandAnswer::Output(r#"{"status":"DOWN","nodes":{}}"#.into());
        assert_eq!(
            all(&f)[0],
            (
                Status::Fail,
                "IMEX domain DOWN".into(),
                Some(Action::ContactProvider)
            )
        );
        f.domain = CommandAnswer::Output("not json".into());
        assert_eq!(all(&f)[0].0, Status::Warn);
    }

    #[test]
    fn a_host_daemon_beside_a_dra_daemon_fails_and_either_alone_passes() {
        use crate::probe::imex::ImexDaemon;
        let mut f = ready();
        f.daemons = vec![ImexDaemon {
            pid: 4410,
            in_pod: true,
        }];
        assert!(two_daemons_finding(&f).is_none());
        f.host_service_enabled = true;
        let got = two_daemons_finding(&f).expect("conflict");
        assert_eq!(
            got.text,
            "the host's nvidia-imex.service is enabled beside the Kubernetes DRA driver's IMEX daemon"
        );
        assert_eq!(got.action, Some(Action::FixConfig));
        f.host_service_enabled = false;
        f.daemons.push(ImexDaemon {
            pid: 812,
            in_pod: false,
        });
        assert!(two_daemons_finding(&f)
            .expect("conflict")
            .text
            .starts_with("a host nvidia-imex (nvidia-imex.service) runs beside"));
        f.daemons.retain(|d| !d.in_pod);
        f.host_service_enabled = true;
        assert!(two_daemons_finding(&f).is_none());
    }

    #[test]
    fn imex_missing_fails_on_a_host_and_is_silent_in_a_container_with_a_channel() {
        let mut f = ready();
        f.daemon = CommandAnswer::NotInstalled;
        f.domain = CommandAnswer::NotInstalled;
        assert!(all(&f).is_empty());
        f.channels.clear();
        let got = all(&f);
        assert_eq!(got.len(), 2);
        assert!(got[1].1.starts_with("IMEX is not installed"));
        assert_eq!(got[1].2, Some(Action::FixInstall));
    }
}

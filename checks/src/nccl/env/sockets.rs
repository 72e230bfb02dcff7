//! The interfaces NCCL's socket transport sends through between nodes, and
//! the fact that carries their link speeds to the fleet checks.

use super::NameFilter;
use crate::facts::fabric::{SocketLink, SocketLinks};
use crate::probe::nccl::EnvFacts;

/// The interfaces NCCL's socket transport uses, as NCCL's
/// ncclFindInterfaces picks them (NCCL's src/misc/socket.cc; the
/// NCCL_SOCKET_IFNAME entry of NCCL's Environment Variables documentation):
/// NCCL_SOCKET_IFNAME when it is longer than one character; else the
/// interfaces whose name starts with `ib`; else, when NCCL_COMM_ID is set,
/// those on its subnet; else any but `docker*` and `lo`; else `docker*`;
/// else `lo`. Only interfaces with an IPv4/IPv6 address count.
///
/// `None` when the choice cannot be told: the interfaces could not be
/// listed, or NCCL would pick by NCCL_COMM_ID's subnet (not guessed here).
pub fn socket_interfaces(facts: &EnvFacts) -> Option<Vec<String>> {
    if facts.interfaces_error.is_some() {
        return None;
    }
    let matching = |list: &str| -> Vec<String> {
        let filter = NameFilter::parse(list);
        facts
            .interfaces
            .iter()
            .filter(|i| filter.selects(i, None))
            .cloned()
            .collect()
    };
    // NCCL: `if (env && strlen(env) > 1)`; a shorter value is NCCL's default.
    if let Some(var) = facts
        .get("NCCL_SOCKET_IFNAME")
        .filter(|v| v.value.len() > 1)
    {
        return Some(matching(&var.value));
    }
    let ib = matching("ib");
    if !ib.is_empty() {
        return Some(ib);
    }
    if facts.get("NCCL_COMM_ID").is_some_and(|v| v.value.len() > 1) {
        return None;
    }
    ["^docker,lo", "docker", "lo"]
        .iter()
        .map(|list| matching(list))
        .find(|chosen| !chosen.is_empty())
        .or(Some(Vec::new()))
}

/// The fact for the interfaces NCCL uses, each with its link speed in Mb/s
/// as sysfs gave it (`None`: unknown).
pub fn socket_links(speeds: Vec<(String, Option<u32>)>) -> SocketLinks {
    SocketLinks {
        links: speeds
            .into_iter()
            .map(|(interface, mbps)| SocketLink {
                interface,
                speed_gbps: mbps.map(|m| f64::from(m) / 1000.0),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(interfaces: &[&str], vars: &[(&str, &str)]) -> EnvFacts {
        EnvFacts {
            interfaces: interfaces.iter().map(|i| i.to_string()).collect(),
            ..super::super::tests::env(vars)
        }
    }

    fn chosen(interfaces: &[&str], vars: &[(&str, &str)]) -> Option<Vec<String>> {
        socket_interfaces(&host(interfaces, vars))
    }

    fn names(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn nccl_socket_ifname_selects_the_interfaces() {
        let all = ["docker0", "eth0", "eth1", "ib0", "lo"];
        assert_eq!(
            chosen(&all, &[("NCCL_SOCKET_IFNAME", "eth")]),
            names(&["eth0", "eth1"])
        );
        assert_eq!(
            chosen(&all, &[("NCCL_SOCKET_IFNAME", "=lo")]),
            names(&["lo"])
        );
        assert_eq!(
            chosen(&all, &[("NCCL_SOCKET_IFNAME", "^docker,lo,ib")]),
            names(&["eth0", "eth1"])
        );
        assert_eq!(chosen(&all, &[("NCCL_SOCKET_IFNAME", "=ens9")]), names(&[]));
    }

    #[test]
    fn without_nccl_socket_ifname_it_is_nccls_own_choice() {
        // ib* first, then anything but docker* and lo, then docker*, then lo.
        let all = ["docker0", "eth0", "ib0", "lo"];
        assert_eq!(chosen(&all, &[]), names(&["ib0"]));
        assert_eq!(
            chosen(&["docker0", "enp1s0", "eth0", "lo"], &[]),
            names(&["enp1s0", "eth0"])
        );
        assert_eq!(chosen(&["docker0", "lo"], &[]), names(&["docker0"]));
        assert_eq!(chosen(&["lo"], &[]), names(&["lo"]));
        // One character is too short for NCCL to read it.
        assert_eq!(
            chosen(&all, &[("NCCL_SOCKET_IFNAME", "l")]),
            names(&["ib0"])
        );
        // By NCCL_COMM_ID's subnet: not guessed.
        assert_eq!(
            chosen(&["eth0", "lo"], &[("NCCL_COMM_ID", "10.0.0.1:5000")]),
            None
        );
        let mut unlisted = host(&[], &[]);
        unlisted.interfaces_error = Some("getifaddrs: EPERM".into());
        assert_eq!(socket_interfaces(&unlisted), None);
    }

    #[test]
    fn speeds_become_gbps_and_unknown_stays_unknown() {
        let links = socket_links(vec![
            ("eth0".into(), Some(100_000)),
            ("eth1".into(), Some(100_000)),
        ]);
        assert_eq!(links.links[0].speed_gbps, Some(100.0));
        assert_eq!(links.aggregate_gbytes_per_s(), Some(25.0));
        let links = socket_links(vec![("eth0".into(), Some(100_000)), ("lo".into(), None)]);
        assert_eq!(links.aggregate_gbytes_per_s(), None);
        assert_eq!(socket_links(Vec::new()).aggregate_gbytes_per_s(), None);
    }
}

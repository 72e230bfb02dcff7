//! `net.master_addr`: MASTER_ADDR resolves, binds where it names this
//! machine, and can be reached by the other nodes.

use crate::domain::redact::redact_url_credentials;
use std::net::{IpAddr, Ipv4Addr};

use crate::domain::text::{plain_or_quoted, quote_value};
use crate::probe::host::env_lossy;
use crate::probe::net::{lookup_addr, AddrLookup, ResolvedAddr};
use crate::{Check, Context, Outcome, Profile};

pub struct MasterAddr;

/// What `net.master_addr` judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterAddrFacts {
    /// MASTER_ADDR as set (lossy), `None` when unset.
    pub master_addr: Option<String>,
    /// `None` when there was nothing to look up (unset, empty, whitespace).
    pub lookup: Option<AddrLookup>,
    /// WORLD_SIZE and LOCAL_WORLD_SIZE as set (lossy).
    pub world_size: Option<String>,
    pub local_world_size: Option<String>,
}

impl Check for MasterAddr {
    fn id(&self) -> &'static str {
        "net.master_addr"
    }
    fn title(&self) -> &'static str {
        "MASTER_ADDR"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Checks that MASTER_ADDR resolves, that it can be bound when it names this machine, and that other nodes could reach it.\n\n\
         Every rank connects to the rendezvous store at MASTER_ADDR:MASTER_PORT before anything \
         else happens; a name that does not resolve, or resolves slowly, stalls all ranks until \
         the rendezvous timeout. gpucheck resolves it with the system resolver (/etc/hosts, then \
         DNS) under a bounded wait, and binds each address that belongs to this machine. When \
         none of them can be bound the check fails; when only some cannot (`localhost` listed as \
         ::1 in /etc/hosts on a host without IPv6 on lo) it warns, because PyTorch's store client \
         tries each address in turn and gets through on the next.\n\n\
         A multi-node job (WORLD_SIZE larger than LOCAL_WORLD_SIZE) whose MASTER_ADDR resolves \
         only to loopback cannot work: the other nodes would connect to themselves. Debian and \
         Ubuntu map the host name to 127.0.1.1 in /etc/hosts, so `MASTER_ADDR=$(hostname)` \
         falls into this. Use the master's address on the cluster network (`hostname -I`) or fix \
         /etc/hosts.\n\n\
         Unset is fine: torchrun sets MASTER_ADDR for its workers (localhost with --standalone, \
         the --master-addr / --rdzv-endpoint host otherwise). A name that does not resolve needs \
         /etc/hosts, DNS or an IP address; a slow resolver needs /etc/resolv.conf fixed."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        let master_addr = env_lossy("MASTER_ADDR");
        let lookup = master_addr
            .as_deref()
            .filter(|v| !v.is_empty() && !v.chars().any(|c| c.is_whitespace() || c.is_control()))
            .map(lookup_addr);
        evaluate_master_addr(&MasterAddrFacts {
            master_addr,
            lookup,
            world_size: env_lossy("WORLD_SIZE"),
            local_world_size: env_lossy("LOCAL_WORLD_SIZE"),
        })
    }
}

/// Judge MASTER_ADDR.
pub fn evaluate_master_addr(f: &MasterAddrFacts) -> Outcome {
    let Some(value) = f.master_addr.as_deref() else {
        return Outcome::pass(
            "MASTER_ADDR unset: torchrun sets it for its workers (localhost with --standalone)",
        );
    };
    let redacted = redact_url_credentials(value);
    let shown = quote_value(&redacted);
    if value.is_empty() {
        return Outcome::fail(
            "MASTER_ADDR is set but empty",
            "unset it, or set it to the master node's IP address",
        );
    }
    let Some(lookup) = &f.lookup else {
        return Outcome::fail(
            format!("MASTER_ADDR={shown} is not a host name or IP address (it contains whitespace or control characters)"),
            "set it to the master node's IP address or host name, without spaces",
        );
    };
    match lookup {
        AddrLookup::TimedOut(d) => Outcome::fail(
            format!(
                "resolving MASTER_ADDR={shown} did not finish in {} s",
                d.as_secs()
            ),
            "the resolver is slow or unreachable (check /etc/resolv.conf); put the master in \
             /etc/hosts or use its IP address",
        ),
        AddrLookup::Failed(e) => Outcome::fail(
            format!("MASTER_ADDR={shown} does not resolve: {e}"),
            format!(
                "check the spelling, /etc/hosts and DNS (`getent hosts {}`), or use the \
                 master's IP address",
                plain_or_quoted(&redacted)
            ),
        ),
        AddrLookup::Resolved(addrs) => {
            let list = addrs
                .iter()
                .map(|a| a.ip.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            judge_addresses(f, &shown, addrs, &list).with_fact("master_addr_resolved", list)
        }
    }
}

/// Judge the addresses MASTER_ADDR resolved to (`list`, as shown): each of
/// this machine's must bind, and other nodes must be able to reach one.
fn judge_addresses(
    f: &MasterAddrFacts,
    shown: &str,
    addrs: &[ResolvedAddr],
    list: &str,
) -> Outcome {
    let unbindable: Vec<&ResolvedAddr> = addrs.iter().filter(|a| a.bind_error.is_some()).collect();
    let bind_problem = unbindable.first().map(|bad| {
        let err = bad
            .bind_error
            .as_ref()
            .map(|e| e.to_string())
            .unwrap_or_default();
        format!(
            "{}, an address of this machine, cannot be bound: {err}",
            bad.ip
        )
    });
    // Every address fails: the store cannot listen where the ranks look.
    if let Some(problem) = bind_problem
        .as_ref()
        .filter(|_| unbindable.len() == addrs.len())
    {
        return Outcome::fail(
            if addrs.len() == 1 {
                format!("MASTER_ADDR={shown} resolves to {problem}")
            } else {
                format!("MASTER_ADDR={shown} resolves to {list}, and none can be bound: {problem}")
            },
            "look at `ip addr` (an address still being configured, e.g. IPv6 DAD) and any \
             security policy on bind; or use another of this machine's addresses",
        );
    }
    let unreachable_elsewhere = |a: &ResolvedAddr| a.ip.is_loopback() || a.ip.is_unspecified();
    let loopback_only = addrs.iter().all(unreachable_elsewhere);
    if let Some((world, local)) = multi_node(f).filter(|_| loopback_only) {
        return loopback_across_nodes(shown, addrs, list, world, local);
    }
    // Some address fails but another works: PyTorch's store client tries
    // every address getaddrinfo returns, in turn, until one connects (c10d
    // socket.cpp), so the ranks get through; the name is still fragile.
    if let Some(problem) = bind_problem {
        let usable: Vec<String> = addrs
            .iter()
            .filter(|a| a.bind_error.is_none())
            .map(|a| a.ip.to_string())
            .collect();
        let first_usable = usable.first().cloned().unwrap_or_default();
        return Outcome::warn(
            format!(
                "MASTER_ADDR={shown} resolves to {list}; {problem}; connections fall back to {}",
                usable.join(", ")
            ),
            format!(
                "set MASTER_ADDR={first_usable} to skip the unusable address, or repair it \
                 (`ip addr`; for ::1, `sysctl net.ipv6.conf.lo.disable_ipv6`)"
            ),
        );
    }
    let summary = if loopback_only {
        format!("MASTER_ADDR={shown} resolves to {list} (loopback: fine on a single node)")
    } else if addrs.iter().any(|a| a.local && !unreachable_elsewhere(a)) {
        format!("MASTER_ADDR={shown} resolves to {list}, an address of this machine (the master)")
    } else {
        format!(
            "MASTER_ADDR={shown} resolves to {list}, another machine (reachability is tested when \
             the job starts)"
        )
    };
    Outcome::pass(summary)
}

/// A multi-node job whose master resolves only to loopback: the other
/// nodes would connect to themselves.
fn loopback_across_nodes(
    shown: &str,
    addrs: &[ResolvedAddr],
    list: &str,
    world: u64,
    local: u64,
) -> Outcome {
    let debian = addrs
        .iter()
        .any(|a| a.ip == IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1)));
    let hint = if debian {
        "Debian/Ubuntu map the host name to 127.0.1.1 in /etc/hosts: set MASTER_ADDR to \
         this node's address on the cluster network (`hostname -I`), or fix /etc/hosts"
    } else {
        "set MASTER_ADDR to the master node's address on the cluster network \
         (`hostname -I` on the master)"
    };
    Outcome::warn(
        format!(
            "MASTER_ADDR={shown} resolves only to {list} (loopback), but WORLD_SIZE={world} \
             > LOCAL_WORLD_SIZE={local} spans nodes: the other nodes cannot reach it"
        ),
        hint,
    )
}

/// (WORLD_SIZE, LOCAL_WORLD_SIZE) when both parse and the job spans nodes.
fn multi_node(f: &MasterAddrFacts) -> Option<(u64, u64)> {
    let world: u64 = f.world_size.as_deref()?.trim().parse().ok()?;
    let local: u64 = f.local_world_size.as_deref()?.trim().parse().ok()?;
    (local > 0 && world > local).then_some((world, local))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::net::BindError;
    use crate::Status;
    use std::time::Duration;

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    fn addr(ip: &str, local: bool) -> ResolvedAddr {
        ResolvedAddr {
            ip: ip.parse().unwrap(),
            local,
            bind_error: None,
        }
    }

    fn master_addr(
        value: Option<&str>,
        lookup: Option<AddrLookup>,
        world: Option<&str>,
        local: Option<&str>,
    ) -> Outcome {
        evaluate_master_addr(&MasterAddrFacts {
            master_addr: value.map(String::from),
            lookup,
            world_size: world.map(String::from),
            local_world_size: local.map(String::from),
        })
    }

    #[test]
    fn credentials_in_an_address_are_redacted() {
        assert_eq!(
            redact_url_credentials("alice:hunter2@node0"),
            "alice:***@node0"
        );
        assert_eq!(redact_url_credentials("tok3n@10.0.0.1"), "***@10.0.0.1");
        assert_eq!(
            redact_url_credentials("tcp://bob:p@ss:w0rd@node0:29500"),
            "tcp://bob:***@node0:29500"
        );
        assert_eq!(redact_url_credentials("node0"), "node0");
        assert_eq!(redact_url_credentials("fe80::1%eth0"), "fe80::1%eth0");
        assert_eq!(redact_url_credentials(""), "");
    }

    #[test]
    fn master_addr_with_a_password_never_shows_it() {
        let o = master_addr(
            Some("alice:hunter2@node0"),
            Some(AddrLookup::Failed("Name or service not known".into())),
            None,
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"MASTER_ADDR="alice:***@node0" does not resolve: Name or service not known"#
        );
        assert!(
            hint(&o).contains("getent hosts alice:***@node0"),
            "{}",
            hint(&o)
        );
        let o = master_addr(Some("alice:hunter2@ node0"), None, None, None);
        assert!(!o.summary.contains("hunter2"), "{}", o.summary);
    }

    #[test]
    fn master_addr_unset_passes() {
        let o = master_addr(None, None, None, None);
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.starts_with("MASTER_ADDR unset: torchrun sets it"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn master_addr_empty_fails() {
        let o = master_addr(Some(""), None, None, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "MASTER_ADDR is set but empty");
    }

    #[test]
    fn master_addr_with_whitespace_fails_echoing_it() {
        let o = master_addr(Some("node 0\n"), None, None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains(r#"MASTER_ADDR="node 0\n""#),
            "{}",
            o.summary
        );
    }

    #[test]
    fn master_addr_unresolvable_fails_with_getent_hint() {
        let o = master_addr(
            Some("node0"),
            Some(AddrLookup::Failed("Name or service not known".into())),
            None,
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"MASTER_ADDR="node0" does not resolve: Name or service not known"#
        );
        assert!(hint(&o).contains("getent hosts node0"), "{}", hint(&o));
    }

    #[test]
    fn master_addr_unresolvable_long_name_is_cut_in_the_hint() {
        let long = "n".repeat(5000);
        let o = master_addr(
            Some(&long),
            Some(AddrLookup::Failed("Name or service not known".into())),
            None,
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert!(hint(&o).len() < 300, "{}", hint(&o));
        assert!(
            hint(&o).contains(&format!("getent hosts \"{}\"…", "n".repeat(80))),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn master_addr_slow_resolver_fails() {
        let o = master_addr(
            Some("node0"),
            Some(AddrLookup::TimedOut(Duration::from_secs(3))),
            None,
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("did not finish in 3 s"), "{}", o.summary);
        assert!(hint(&o).contains("/etc/resolv.conf"), "{}", hint(&o));
    }

    #[test]
    fn master_addr_local_unbindable_fails() {
        let mut a = addr("10.0.0.5", true);
        a.bind_error = Some(BindError::Other("Cannot assign requested address".into()));
        let o = master_addr(
            Some("10.0.0.5"),
            Some(AddrLookup::Resolved(vec![a])),
            None,
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("cannot be bound"), "{}", o.summary);
    }

    #[test]
    fn master_addr_local_unbindable_names_the_address_and_error() {
        let mut a = addr("10.0.0.5", true);
        a.bind_error = Some(BindError::NotLocal);
        let o = master_addr(
            Some("node0"),
            Some(AddrLookup::Resolved(vec![a])),
            None,
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "MASTER_ADDR=\"node0\" resolves to 10.0.0.5, an address of this machine, cannot \
             be bound: not an address of this machine (EADDRNOTAVAIL)"
        );
        assert!(hint(&o).contains("ip addr"), "{}", hint(&o));
    }

    #[test]
    fn master_addr_every_address_unbindable_fails() {
        let mut v6 = addr("::1", true);
        v6.bind_error = Some(BindError::NotLocal);
        let mut v4 = addr("127.0.0.1", true);
        v4.bind_error = Some(BindError::Other("Operation not permitted".into()));
        let o = master_addr(
            Some("localhost"),
            Some(AddrLookup::Resolved(vec![v6, v4])),
            None,
            None,
        );
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("resolves to ::1, 127.0.0.1, and none can be bound: ::1"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn master_addr_one_unbindable_address_of_several_warns() {
        // /etc/hosts maps localhost to ::1, but lo has no IPv6: the store
        // client tries ::1, fails at once, and connects over 127.0.0.1.
        let mut v6 = addr("::1", true);
        v6.bind_error = Some(BindError::NotLocal);
        let o = master_addr(
            Some("localhost"),
            Some(AddrLookup::Resolved(vec![v6, addr("127.0.0.1", true)])),
            Some("8"),
            Some("8"),
        );
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "MASTER_ADDR=\"localhost\" resolves to ::1, 127.0.0.1; ::1, an address of this \
             machine, cannot be bound: not an address of this machine (EADDRNOTAVAIL); \
             connections fall back to 127.0.0.1"
        );
        assert!(
            hint(&o).starts_with("set MASTER_ADDR=127.0.0.1 to skip the unusable address"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn master_addr_debian_hostname_on_multi_node_warns() {
        let o = master_addr(
            Some("gpu-node-01"),
            Some(AddrLookup::Resolved(vec![addr("127.0.1.1", true)])),
            Some("16"),
            Some("8"),
        );
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("resolves only to 127.0.1.1"),
            "{}",
            o.summary
        );
        assert!(
            o.summary.contains("WORLD_SIZE=16 > LOCAL_WORLD_SIZE=8"),
            "{}",
            o.summary
        );
        assert!(hint(&o).contains("127.0.1.1 in /etc/hosts"), "{}", hint(&o));
        assert!(hint(&o).contains("hostname -I"), "{}", hint(&o));
    }

    #[test]
    fn master_addr_localhost_on_multi_node_warns_without_debian_story() {
        let o = master_addr(
            Some("localhost"),
            Some(AddrLookup::Resolved(vec![
                addr("127.0.0.1", true),
                addr("::1", true),
            ])),
            Some("4"),
            Some("2"),
        );
        assert_eq!(o.status, Status::Warn);
        assert!(!hint(&o).contains("Debian"), "{}", hint(&o));
    }

    #[test]
    fn master_addr_loopback_on_one_node_passes() {
        let o = master_addr(
            Some("localhost"),
            Some(AddrLookup::Resolved(vec![addr("127.0.0.1", true)])),
            Some("8"),
            Some("8"),
        );
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.contains("fine on a single node"), "{}", o.summary);
    }

    #[test]
    fn master_addr_loopback_with_unparsable_world_size_passes() {
        let o = master_addr(
            Some("127.0.0.1"),
            Some(AddrLookup::Resolved(vec![addr("127.0.0.1", true)])),
            Some("many"),
            Some("8"),
        );
        assert_eq!(o.status, Status::Pass);
    }

    #[test]
    fn master_addr_this_machine_passes() {
        let o = master_addr(
            Some("10.0.0.5"),
            Some(AddrLookup::Resolved(vec![addr("10.0.0.5", true)])),
            Some("16"),
            Some("8"),
        );
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.contains("an address of this machine"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn master_addr_remote_passes() {
        let o = master_addr(
            Some("master.cluster"),
            Some(AddrLookup::Resolved(vec![addr("10.0.0.1", false)])),
            Some("16"),
            Some("8"),
        );
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.contains("another machine"), "{}", o.summary);
        assert_eq!(
            o.facts.get("master_addr_resolved").and_then(|v| v.as_str()),
            Some("10.0.0.1")
        );
    }
}

//! The net checks: the TCP rendezvous every DDP job starts with. Ranks find
//! each other through a TCPStore that rank 0 serves on MASTER_ADDR:MASTER_PORT,
//! so loopback TCP must work, MASTER_ADDR must resolve to something the other
//! nodes can reach, and MASTER_PORT must be free on the master.

use std::net::IpAddr;
use std::time::Duration;

use crate::domain::text::{plain_or_quoted, quote_value};
use crate::probe::host::env_lossy;
use crate::probe::net::{self as np, BindError, EchoResult, PortHolder, Resolution};
use crate::{Check, Context, Outcome, Profile};

pub use crate::domain::launch::{parse_master_port, DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT};
/// How long a name lookup may take before it counts as hung. glibc's own
/// default is 5 s per DNS server and attempt; a master name that takes longer
/// than this would stall every rank's rendezvous as well.
pub const RESOLVE_WAIT: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------- net.loopback

pub struct Loopback;

/// What `net.loopback` judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopbackFacts {
    pub ipv4: EchoResult,
    /// `None` when the host has no ::1 (IPv6 not configured).
    pub ipv6: Option<EchoResult>,
}

impl Check for Loopback {
    fn id(&self) -> &'static str {
        "net.loopback"
    }
    fn title(&self) -> &'static str {
        "TCP loopback"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Checks that a TCP connection over 127.0.0.1 (and ::1 where the host has IPv6) can be opened and carries bytes both ways.\n\n\
         On a single node every DDP rank connects to the rendezvous store over loopback, and \
         NCCL and Gloo bootstrap their own connections over TCP as well. gpucheck listens on an \
         ephemeral port, connects, and exchanges a few bytes each way, so a down `lo` interface, a \
         firewall rule on loopback or a broken network namespace shows up here instead of as a \
         rendezvous timeout minutes into the job.\n\n\
         If 127.0.0.1 fails: bring the interface up (`ip link set lo up`), look for firewall \
         rules that touch lo (`iptables -S`, `nft list ruleset`), and in a container check its \
         network mode. If only ::1 fails, names like `localhost` may resolve to ::1 first: set \
         MASTER_ADDR=127.0.0.1 or repair IPv6 on lo. A host without IPv6 is reported, not failed: \
         DDP does not need it."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        let ipv6 = np::ipv6_loopback_configured()
            .then(|| np::loopback_echo(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)));
        evaluate_loopback(&LoopbackFacts {
            ipv4: np::loopback_echo(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
            ipv6,
        })
    }
}

/// Judge the loopback round trips.
pub fn evaluate_loopback(f: &LoopbackFacts) -> Outcome {
    let v4_problem = match &f.ipv4 {
        EchoResult::Exchanged => None,
        EchoResult::Unavailable(e) => Some(format!("127.0.0.1 is not configured ({e})")),
        EchoResult::Failed { step, error } => {
            Some(format!("TCP over 127.0.0.1 failed at {step}: {error}"))
        }
    };
    if let Some(p) = v4_problem {
        return Outcome::fail(
            p,
            "bring loopback up (`ip link set lo up`) and look for firewall rules on lo \
             (`iptables -S`, `nft list ruleset`); in a container, check its network mode",
        );
    }
    match &f.ipv6 {
        None => Outcome::pass("TCP over 127.0.0.1 works; IPv6 not configured (no ::1), which DDP does not need")
            .with_fact("ipv6", "not configured"),
        Some(EchoResult::Unavailable(e)) => Outcome::pass(format!(
            "TCP over 127.0.0.1 works; IPv6 not configured ({e}), which DDP does not need"
        ))
        .with_fact("ipv6", "not configured"),
        Some(EchoResult::Failed { step, error }) => Outcome::warn(
            format!("TCP over 127.0.0.1 works, but over ::1 it failed at {step}: {error}"),
            "`localhost` may resolve to ::1 first: set MASTER_ADDR=127.0.0.1, or repair IPv6 on lo \
             (`ip -6 addr show lo`, `sysctl net.ipv6.conf.lo.disable_ipv6`)",
        )
        .with_fact("ipv6", "broken"),
        Some(EchoResult::Exchanged) => {
            Outcome::pass("TCP over 127.0.0.1 and ::1 works").with_fact("ipv6", "works")
        }
    }
}

// ---------------------------------------------------------------- net.master_addr

pub struct MasterAddr;

/// One address MASTER_ADDR resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAddr {
    pub ip: IpAddr,
    /// An address of this machine (loopback, unspecified, or on an interface).
    pub local: bool,
    /// For a local address: why binding it failed, if it did.
    pub bind_error: Option<BindError>,
}

/// What MASTER_ADDR's name lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddrLookup {
    Resolved(Vec<ResolvedAddr>),
    Failed(String),
    TimedOut(Duration),
}

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

/// Resolve `host` and classify each address (local or not, bindable or not).
pub fn lookup_addr(host: &str) -> AddrLookup {
    match np::resolve(host, RESOLVE_WAIT) {
        Resolution::Failed(e) => AddrLookup::Failed(e),
        Resolution::TimedOut(d) => AddrLookup::TimedOut(d),
        Resolution::Resolved(ips) => {
            let locals = np::local_addresses();
            AddrLookup::Resolved(
                ips.into_iter()
                    .map(|ip| {
                        let local = np::is_local(ip, &locals);
                        // A link-local IPv6 address binds only with its
                        // interface's scope id, which a name lookup lacks.
                        let link_local = matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local());
                        let bind_error = if local && !link_local {
                            np::try_listen(std::net::SocketAddr::new(ip, 0)).err()
                        } else {
                            None
                        };
                        ResolvedAddr {
                            ip,
                            local,
                            bind_error,
                        }
                    })
                    .collect(),
            )
        }
    }
}

/// Judge MASTER_ADDR.
pub fn evaluate_master_addr(f: &MasterAddrFacts) -> Outcome {
    let Some(value) = f.master_addr.as_deref() else {
        return Outcome::pass(
            "MASTER_ADDR unset: torchrun sets it for its workers (localhost with --standalone)",
        );
    };
    let shown = quote_value(value);
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
    let addrs =
        match lookup {
            AddrLookup::TimedOut(d) => return Outcome::fail(
                format!(
                    "resolving MASTER_ADDR={shown} did not finish in {} s",
                    d.as_secs()
                ),
                "the resolver is slow or unreachable (check /etc/resolv.conf); put the master in \
                 /etc/hosts or use its IP address",
            ),
            AddrLookup::Failed(e) => {
                return Outcome::fail(
                    format!("MASTER_ADDR={shown} does not resolve: {e}"),
                    format!(
                        "check the spelling, /etc/hosts and DNS (`getent hosts {}`), or use the \
                         master's IP address",
                        plain_or_quoted(value)
                    ),
                )
            }
            AddrLookup::Resolved(addrs) => addrs,
        };
    let list = addrs
        .iter()
        .map(|a| a.ip.to_string())
        .collect::<Vec<_>>()
        .join(", ");
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
        )
        .with_fact("master_addr_resolved", list);
    }
    let unreachable_elsewhere = |a: &ResolvedAddr| a.ip.is_loopback() || a.ip.is_unspecified();
    let loopback_only = addrs.iter().all(unreachable_elsewhere);
    if let Some((world, local)) = multi_node(f).filter(|_| loopback_only) {
        let debian = addrs
            .iter()
            .any(|a| a.ip == IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 1, 1)));
        let hint = if debian {
            "Debian/Ubuntu map the host name to 127.0.1.1 in /etc/hosts: set MASTER_ADDR to \
             this node's address on the cluster network (`hostname -I`), or fix /etc/hosts"
        } else {
            "set MASTER_ADDR to the master node's address on the cluster network \
             (`hostname -I` on the master)"
        };
        return Outcome::warn(
            format!(
                "MASTER_ADDR={shown} resolves only to {list} (loopback), but WORLD_SIZE={world} \
                 > LOCAL_WORLD_SIZE={local} spans nodes: the other nodes cannot reach it"
            ),
            hint,
        )
        .with_fact("master_addr_resolved", list);
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
        )
        .with_fact("master_addr_resolved", list);
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
    Outcome::pass(summary).with_fact("master_addr_resolved", list)
}

/// (WORLD_SIZE, LOCAL_WORLD_SIZE) when both parse and the job spans nodes.
fn multi_node(f: &MasterAddrFacts) -> Option<(u64, u64)> {
    let world: u64 = f.world_size.as_deref()?.trim().parse().ok()?;
    let local: u64 = f.local_world_size.as_deref()?.trim().parse().ok()?;
    (local > 0 && world > local).then_some((world, local))
}

// ---------------------------------------------------------------- net.master_port

pub struct MasterPort;

/// Where MASTER_ADDR points, for the port check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterLocation {
    /// This machine: the store will listen here.
    Here,
    /// Another machine (its addresses).
    Elsewhere(Vec<IpAddr>),
    /// The name did not resolve (or timed out); the reason.
    Unresolved(String),
}

/// What `net.master_port` judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterPortFacts {
    /// MASTER_PORT as set (lossy), `None` when unset.
    pub master_port: Option<String>,
    /// MASTER_ADDR as set (lossy), `None` when unset (then 127.0.0.1).
    pub master_addr: Option<String>,
    /// `None` when MASTER_PORT did not parse (nothing was probed).
    pub location: Option<MasterLocation>,
    /// The bind attempt, when the master is here.
    pub bind: Option<Result<(), BindError>>,
    /// Who holds the port, when it was taken.
    pub holder: Option<PortHolder>,
    /// A nearby port verified free by binding it, when it was taken.
    pub suggestion: Option<u16>,
    /// gpucheck runs inside a torchrun-launched process (TORCHELASTIC_RUN_ID,
    /// or RANK and WORLD_SIZE, are set): the launcher's store then rightly
    /// holds the port.
    pub launched_by_torchrun: bool,
}

impl Check for MasterPort {
    fn id(&self) -> &'static str {
        "net.master_port"
    }
    fn title(&self) -> &'static str {
        "MASTER_PORT"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn needs(&self) -> &'static [&'static str] {
        &["net.master_addr"]
    }
    fn explain(&self) -> &'static str {
        "Checks that MASTER_PORT (default 29500) is a valid port and is free on this machine when it is the master.\n\n\
         Rank 0 (or torchrun's agent) serves the rendezvous store on MASTER_PORT, listening on \
         every address of the machine. When another process already listens there, the job dies \
         at start with 'address already in use' (EADDRINUSE) or, worse, the ranks connect to a \
         stale store of an earlier job and hang. gpucheck binds the port the way PyTorch's \
         TCPStore does; when it is taken, it names the owning process (pid and command line, \
         found through /proc/net/tcp and /proc/*/fd) and suggests a nearby port that it verified \
         free by binding it.\n\n\
         Fix: stop the stale process (often a crashed earlier run), or pick the suggested port \
         with `export MASTER_PORT=N` or `torchrun --master-port=N`. When /proc hides the owner \
         (another user's process), `sudo ss -ltnp 'sport = :N'` shows it.\n\n\
         MASTER_PORT must be an integer from 1 to 65535. When MASTER_ADDR names another machine, \
         the port can only be checked there, so the check is skipped. When gpucheck itself runs \
         inside a torchrun worker (TORCHELASTIC_RUN_ID set), a port held by the torchrun agent \
         that launched it is the rendezvous store, as expected, and passes."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        let master_port = env_lossy("MASTER_PORT");
        let master_addr = env_lossy("MASTER_ADDR");
        let mut facts = MasterPortFacts {
            master_port: master_port.clone(),
            master_addr: master_addr.clone(),
            location: None,
            bind: None,
            holder: None,
            suggestion: None,
            launched_by_torchrun: env_lossy("TORCHELASTIC_RUN_ID").is_some()
                || (env_lossy("RANK").is_some() && env_lossy("WORLD_SIZE").is_some()),
        };
        let port = match master_port.as_deref().map(parse_master_port) {
            None => DEFAULT_MASTER_PORT,
            Some(Ok(p)) => p,
            Some(Err(_)) => return evaluate_master_port(&facts),
        };
        let host = master_addr
            .as_deref()
            .unwrap_or(DEFAULT_MASTER_ADDR)
            .to_string();
        let location = match lookup_addr(&host) {
            AddrLookup::Failed(e) => MasterLocation::Unresolved(e),
            AddrLookup::TimedOut(d) => {
                MasterLocation::Unresolved(format!("no answer in {} s", d.as_secs()))
            }
            AddrLookup::Resolved(addrs) if addrs.iter().any(|a| a.local) => MasterLocation::Here,
            AddrLookup::Resolved(addrs) => {
                MasterLocation::Elsewhere(addrs.into_iter().map(|a| a.ip).collect())
            }
        };
        if location == MasterLocation::Here {
            let bind = np::store_port_free(port);
            if bind == Err(BindError::InUse) {
                facts.holder = Some(np::port_holder(port));
            }
            if bind.is_err() {
                facts.suggestion = np::free_port_near(port, np::FREE_PORT_SEARCH_SPAN);
            }
            facts.bind = Some(bind);
        }
        facts.location = Some(location);
        evaluate_master_port(&facts)
    }
}

/// Judge MASTER_PORT.
pub fn evaluate_master_port(f: &MasterPortFacts) -> Outcome {
    let port = match f.master_port.as_deref().map(parse_master_port) {
        None => DEFAULT_MASTER_PORT,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            return Outcome::fail(
                e,
                format!(
                    "`export MASTER_PORT={DEFAULT_MASTER_PORT}` (or any free port above 1024), or \
                     unset it to use torchrun's default {DEFAULT_MASTER_PORT}"
                ),
            )
        }
    };
    let which_port = if f.master_port.is_some() {
        format!("MASTER_PORT {port}")
    } else {
        format!("port {port} (torchrun's default)")
    };
    let addr_shown = match f.master_addr.as_deref() {
        Some(a) => format!("MASTER_ADDR={}", quote_value(a)),
        None => format!("MASTER_ADDR (unset, so {DEFAULT_MASTER_ADDR})"),
    };
    match &f.location {
        None => return Outcome::error("gpucheck bug: MASTER_ADDR was not looked up"),
        Some(MasterLocation::Unresolved(e)) => {
            return Outcome::skip(format!(
                "{addr_shown} does not resolve ({e}), so {which_port} cannot be checked; see net.master_addr"
            ))
        }
        Some(MasterLocation::Elsewhere(ips)) => {
            let list = ips.iter().map(|ip| ip.to_string()).collect::<Vec<_>>().join(", ");
            return Outcome::skip(format!(
                "{addr_shown} ({list}) is another machine: {which_port} can only be checked on the master node"
            ));
        }
        Some(MasterLocation::Here) => {}
    }
    let use_instead = |what: &str| match f.suggestion {
        Some(free) => format!(
            "{what}, or use port {free}, which is free (gpucheck bound it): `export \
             MASTER_PORT={free}` or `torchrun --master-port={free}`"
        ),
        None => format!(
            "{what}; no free port was found within {} of {port}: pick another range",
            np::FREE_PORT_SEARCH_SPAN
        ),
    };
    let with_suggestion = |o: Outcome| match f.suggestion {
        Some(p) => o.with_fact("suggested_port", p.to_string()),
        None => o,
    };
    let bind = match &f.bind {
        None => return Outcome::error("gpucheck bug: the port was not probed"),
        Some(b) => b,
    };
    match bind {
        Ok(()) => Outcome::pass(format!("{which_port} is free on this machine")),
        Err(BindError::InUse) => match &f.holder {
            Some(PortHolder::Processes { owners, listening }) => {
                let launcher = owners
                    .iter()
                    .find(|o| o.ancestor)
                    .filter(|_| f.launched_by_torchrun);
                if let Some(launcher) = launcher {
                    return Outcome::pass(format!(
                        "{which_port} is held by pid {} ({}), which launched gpucheck: that is \
                         the rendezvous store, as expected",
                        launcher.pid, launcher.cmdline
                    ));
                }
                let named = owners
                    .iter()
                    .take(3)
                    .map(|o| format!("pid {} ({})", o.pid, o.cmdline))
                    .collect::<Vec<_>>()
                    .join(", ");
                let more = if owners.len() > 3 {
                    format!(" and {} more", owners.len() - 3)
                } else {
                    String::new()
                };
                let how = if *listening { "listened on" } else { "bound" };
                let kill = owners
                    .iter()
                    .map(|o| o.pid.to_string())
                    .collect::<Vec<_>>()
                    .join(" ");
                with_suggestion(Outcome::fail(
                    format!("{which_port} is already {how} by {named}{more}"),
                    use_instead(&format!("stop it if it is a stale run (`kill {kill}`)")),
                ))
            }
            Some(PortHolder::Hidden { uid, .. }) => with_suggestion(Outcome::fail(
                format!(
                    "{which_port} is already in use by a process of uid {uid} that /proc does not \
                     show to this user"
                ),
                use_instead(&format!("find it with `sudo ss -ltnp 'sport = :{port}'`")),
            )),
            Some(PortHolder::Unlisted) | None => with_suggestion(Outcome::fail(
                format!(
                    "{which_port} is already in use (no socket in /proc/net/tcp names it; it may \
                     have just closed)"
                ),
                use_instead(&format!("look with `ss -ltnp 'sport = :{port}'`")),
            )),
        },
        Err(BindError::Denied) => with_suggestion(Outcome::fail(
            format!("{which_port} cannot be bound: permission denied (ports below 1024 need root)"),
            use_instead("use a port above 1024"),
        )),
        Err(e) => with_suggestion(Outcome::fail(
            format!("{which_port} cannot be bound: {e}"),
            use_instead("look at `ss -ltnp` and the machine's network setup"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::net::PortOwner;
    use crate::Status;

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    // ---- loopback

    #[test]
    fn loopback_both_families_pass() {
        let o = evaluate_loopback(&LoopbackFacts {
            ipv4: EchoResult::Exchanged,
            ipv6: Some(EchoResult::Exchanged),
        });
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "TCP over 127.0.0.1 and ::1 works");
    }

    #[test]
    fn loopback_without_ipv6_passes_and_says_so() {
        let o = evaluate_loopback(&LoopbackFacts {
            ipv4: EchoResult::Exchanged,
            ipv6: None,
        });
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.contains("IPv6 not configured"), "{}", o.summary);
        let o = evaluate_loopback(&LoopbackFacts {
            ipv4: EchoResult::Exchanged,
            ipv6: Some(EchoResult::Unavailable(
                "Cannot assign requested address".into(),
            )),
        });
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.contains("IPv6 not configured"), "{}", o.summary);
    }

    #[test]
    fn loopback_ipv4_failure_fails_naming_the_step() {
        let o = evaluate_loopback(&LoopbackFacts {
            ipv4: EchoResult::Failed {
                step: "connect",
                error: "Connection refused".into(),
            },
            ipv6: None,
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "TCP over 127.0.0.1 failed at connect: Connection refused"
        );
        assert!(hint(&o).contains("ip link set lo up"), "{}", hint(&o));
    }

    #[test]
    fn loopback_ipv4_unconfigured_fails() {
        let o = evaluate_loopback(&LoopbackFacts {
            ipv4: EchoResult::Unavailable("Cannot assign requested address".into()),
            ipv6: None,
        });
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("127.0.0.1 is not configured"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn loopback_ipv6_failure_warns() {
        let o = evaluate_loopback(&LoopbackFacts {
            ipv4: EchoResult::Exchanged,
            ipv6: Some(EchoResult::Failed {
                step: "receive",
                error: "timed out".into(),
            }),
        });
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("::1 it failed at receive"),
            "{}",
            o.summary
        );
        assert!(hint(&o).contains("MASTER_ADDR=127.0.0.1"), "{}", hint(&o));
    }

    // ---- master_addr

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
            o.facts.get("master_addr_resolved").map(String::as_str),
            Some("10.0.0.1")
        );
    }

    #[test]
    fn lookup_classifies_real_addresses() {
        match lookup_addr("127.0.0.1") {
            AddrLookup::Resolved(a) => {
                assert_eq!(a.len(), 1);
                assert!(a[0].local);
                assert_eq!(a[0].bind_error, None);
            }
            other => panic!("{other:?}"),
        }
        match lookup_addr("203.0.113.7") {
            AddrLookup::Resolved(a) => assert!(!a[0].local),
            other => panic!("{other:?}"),
        }
    }

    // ---- master_port

    fn port_facts(port: Option<&str>) -> MasterPortFacts {
        MasterPortFacts {
            master_port: port.map(String::from),
            master_addr: None,
            location: Some(MasterLocation::Here),
            bind: Some(Ok(())),
            holder: None,
            suggestion: None,
            launched_by_torchrun: false,
        }
    }

    #[test]
    fn master_port_parsing() {
        assert_eq!(parse_master_port("29500"), Ok(29500));
        assert_eq!(parse_master_port("1"), Ok(1));
        assert_eq!(parse_master_port("65535"), Ok(65535));
        assert_eq!(parse_master_port(" 29500\n"), Ok(29500));
        for bad in ["0", "65536", "-1", "abc", "", "29500x", "2.9e4", "0x7530"] {
            assert!(parse_master_port(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn master_port_default_free_passes() {
        let o = evaluate_master_port(&port_facts(None));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "port 29500 (torchrun's default) is free on this machine"
        );
    }

    #[test]
    fn master_port_set_free_passes() {
        let o = evaluate_master_port(&port_facts(Some("12345")));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "MASTER_PORT 12345 is free on this machine");
    }

    #[test]
    fn master_port_invalid_fails_naming_the_value() {
        let mut f = port_facts(Some("70000"));
        f.location = None;
        f.bind = None;
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"MASTER_PORT="70000" is not a port number (an integer 1-65535)"#
        );
        assert!(
            hint(&o).contains("export MASTER_PORT=29500"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn master_port_taken_names_owner_and_free_port() {
        let mut f = port_facts(Some("29500"));
        f.bind = Some(Err(BindError::InUse));
        f.holder = Some(PortHolder::Processes {
            owners: vec![PortOwner {
                pid: 4242,
                cmdline: "python train.py".into(),
                ancestor: false,
            }],
            listening: true,
        });
        f.suggestion = Some(29501);
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "MASTER_PORT 29500 is already listened on by pid 4242 (python train.py)"
        );
        assert!(hint(&o).contains("kill 4242"), "{}", hint(&o));
        assert!(
            hint(&o).contains("export MASTER_PORT=29501"),
            "{}",
            hint(&o)
        );
        assert!(hint(&o).contains("--master-port=29501"), "{}", hint(&o));
        assert_eq!(
            o.facts.get("suggested_port").map(String::as_str),
            Some("29501")
        );
    }

    #[test]
    fn master_port_held_by_launching_torchrun_passes() {
        let mut f = port_facts(Some("29500"));
        f.launched_by_torchrun = true;
        f.bind = Some(Err(BindError::InUse));
        f.holder = Some(PortHolder::Processes {
            owners: vec![PortOwner {
                pid: 77,
                cmdline: "torchrun --nproc-per-node 8 train.py".into(),
                ancestor: true,
            }],
            listening: true,
        });
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.contains("pid 77"), "{}", o.summary);
        assert!(
            o.summary.contains("which launched gpucheck"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn master_port_held_by_a_parent_outside_torchrun_fails() {
        let mut f = port_facts(Some("29500"));
        f.bind = Some(Err(BindError::InUse));
        f.holder = Some(PortHolder::Processes {
            owners: vec![PortOwner {
                pid: 77,
                cmdline: "bash run.sh".into(),
                ancestor: true,
            }],
            listening: true,
        });
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("pid 77 (bash run.sh)"), "{}", o.summary);
    }

    #[test]
    fn master_port_hidden_owner_says_permissions_hide_it() {
        let mut f = port_facts(None);
        f.bind = Some(Err(BindError::InUse));
        f.holder = Some(PortHolder::Hidden {
            uid: 1001,
            listening: true,
        });
        f.suggestion = Some(29502);
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("uid 1001"), "{}", o.summary);
        assert!(
            o.summary.contains("does not show to this user"),
            "{}",
            o.summary
        );
        assert!(
            hint(&o).contains("sudo ss -ltnp 'sport = :29500'"),
            "{}",
            hint(&o)
        );
        assert!(hint(&o).contains("MASTER_PORT=29502"), "{}", hint(&o));
    }

    #[test]
    fn master_port_taken_without_free_neighbour_says_so() {
        let mut f = port_facts(None);
        f.bind = Some(Err(BindError::InUse));
        f.holder = Some(PortHolder::Unlisted);
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(hint(&o).contains("no free port was found"), "{}", hint(&o));
    }

    #[test]
    fn master_port_privileged_fails() {
        let mut f = port_facts(Some("80"));
        f.bind = Some(Err(BindError::Denied));
        f.suggestion = Some(81);
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("ports below 1024 need root"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn master_port_remote_master_skips() {
        let mut f = port_facts(None);
        f.master_addr = Some("10.0.0.1".into());
        f.location = Some(MasterLocation::Elsewhere(vec!["10.0.0.1".parse().unwrap()]));
        f.bind = None;
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.contains("can only be checked on the master node"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn master_port_unresolved_master_skips() {
        let mut f = port_facts(None);
        f.master_addr = Some("nowhere".into());
        f.location = Some(MasterLocation::Unresolved(
            "Name or service not known".into(),
        ));
        f.bind = None;
        let o = evaluate_master_port(&f);
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("see net.master_addr"), "{}", o.summary);
    }
}

//! Probe: the TCP side of a DDP rendezvous — loopback sockets that really
//! exchange bytes, name resolution under a bounded wait, which addresses are
//! this machine's, whether a port can be bound the way PyTorch's TCPStore
//! binds it, who holds a port that cannot (from /proc/net/tcp{,6} and
//! /proc/*/fd), and a free port near a given one, verified by binding it.
//! Plain facts; the net checks judge them.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Mutex};
use std::thread;
use std::time::Duration;

use procfs::net::{TcpNetEntry, TcpState};
use procfs::process::FDTarget;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind};

/// How long one loopback step (connect, send, receive) may take. Loopback
/// answers in microseconds; this only bounds a broken stack.
const LOOPBACK_STEP_TIMEOUT: Duration = Duration::from_secs(2);
/// How many ports above (then below) a taken one [`free_port_near`] tries.
pub const FREE_PORT_SEARCH_SPAN: u16 = 100;

// ---------------------------------------------------------------- loopback

/// What a bind-connect-exchange round over one loopback address did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum EchoResult {
    /// Bytes went both ways and came back unchanged.
    Exchanged,
    /// The address family or address is not configured here
    /// (EAFNOSUPPORT / EADDRNOTAVAIL).
    Unavailable(String),
    /// A step failed: which one ("bind", "connect", "send", ...) and the error.
    Failed { step: String, error: String },
}

/// Listen on `ip` (an ephemeral port), connect to it, send a few bytes each
/// way and compare them. Every step is bounded.
pub fn loopback_echo(ip: IpAddr) -> EchoResult {
    crate::seam::answer("net::loopback_echo", &ip.to_string(), || {
        let fail = |step: &'static str| move |e: io::Error| (step, e);
        let run = || -> Result<(), (&'static str, io::Error)> {
            let addr = SocketAddr::new(ip, 0);
            let listener =
                Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
                    .map_err(fail("socket"))?;
            listener.bind(&addr.into()).map_err(fail("bind"))?;
            listener.listen(4).map_err(fail("listen"))?;
            let bound = listener.local_addr().map_err(fail("getsockname"))?;
            let client = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
                .map_err(fail("socket"))?;
            client
                .connect_timeout(&bound, LOOPBACK_STEP_TIMEOUT)
                .map_err(fail("connect"))?;
            // accept(2) honours SO_RCVTIMEO: a connection that a firewall rule
            // redirected elsewhere never arrives, and must not block forever.
            listener
                .set_read_timeout(Some(LOOPBACK_STEP_TIMEOUT))
                .map_err(fail("setsockopt"))?;
            let (server, _) = listener.accept().map_err(fail("accept"))?;
            for s in [&client, &server] {
                s.set_read_timeout(Some(LOOPBACK_STEP_TIMEOUT))
                    .map_err(fail("setsockopt"))?;
                s.set_write_timeout(Some(LOOPBACK_STEP_TIMEOUT))
                    .map_err(fail("setsockopt"))?;
            }
            exchange(&client, &server, b"gpucheck ping")?;
            exchange(&server, &client, b"gpucheck pong")?;
            Ok(())
        };
        match run() {
            Ok(()) => EchoResult::Exchanged,
            Err((_, e))
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAFNOSUPPORT) | Some(libc::EADDRNOTAVAIL)
                ) =>
            {
                EchoResult::Unavailable(e.to_string())
            }
            Err((step, e)) => EchoResult::Failed {
                step: step.to_string(),
                error: e.to_string(),
            },
        }
    })
}

fn exchange(from: &Socket, to: &Socket, msg: &[u8]) -> Result<(), (&'static str, io::Error)> {
    let mut from = from;
    let mut to = to;
    from.write_all(msg).map_err(|e| ("send", e))?;
    let mut got = vec![0u8; msg.len()];
    to.read_exact(&mut got).map_err(|e| ("receive", e))?;
    if got != msg {
        return Err((
            "receive",
            io::Error::new(io::ErrorKind::InvalidData, "the bytes came back altered"),
        ));
    }
    Ok(())
}

/// True when the kernel lists ::1 on an interface (/proc/net/if_inet6). A
/// missing file means IPv6 is disabled or not built in.
pub fn ipv6_loopback_configured() -> bool {
    crate::seam::answer("net::ipv6_loopback_configured", "", || {
        fs::read_to_string("/proc/net/if_inet6")
            .map(|t| if_inet6_has_loopback(&t))
            .unwrap_or(false)
    })
}

/// Whether /proc/net/if_inet6 text lists the address ::1.
pub fn if_inet6_has_loopback(text: &str) -> bool {
    text.lines()
        .any(|l| l.split_whitespace().next() == Some("00000000000000000000000000000001"))
}

// ---------------------------------------------------------------- resolution

/// What resolving a host name gave.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Resolution {
    /// Addresses in the resolver's order, without repeats.
    Resolved(Vec<IpAddr>),
    /// The resolver said no.
    Failed(String),
    /// No answer within the wait.
    TimedOut(Duration),
}

static RESOLVED: Mutex<Option<HashMap<String, Resolution>>> = Mutex::new(None);

/// Resolve `host` with the system resolver (getaddrinfo, so /etc/hosts and
/// DNS as configured), waiting at most `wait`. An IP literal answers without
/// a lookup. Answers are remembered for the life of the process so that two
/// checks looking at the same name wait only once; a resolver that hangs
/// keeps its thread until it returns, and dies with gpucheck.
pub fn resolve(host: &str, wait: Duration) -> Resolution {
    crate::seam::answer("net::resolve", host, || {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Resolution::Resolved(vec![ip]);
        }
        if let Some(known) = RESOLVED
            .lock()
            .ok()
            .and_then(|m| m.as_ref().and_then(|m| m.get(host).cloned()))
        {
            return known;
        }
        let (tx, rx) = mpsc::channel();
        let name = host.to_string();
        let spawned = thread::Builder::new()
            .name("gpucheck-resolve".into())
            .spawn(move || {
                let answer = match (name.as_str(), 0u16).to_socket_addrs() {
                    Ok(addrs) => {
                        let mut ips: Vec<IpAddr> = Vec::new();
                        for a in addrs {
                            let ip = a.ip().to_canonical();
                            if !ips.contains(&ip) {
                                ips.push(ip);
                            }
                        }
                        if ips.is_empty() {
                            Resolution::Failed("no addresses".into())
                        } else {
                            Resolution::Resolved(ips)
                        }
                    }
                    Err(e) => Resolution::Failed(e.to_string()),
                };
                let _ = tx.send(answer);
            });
        let answer = match spawned {
            Err(e) => Resolution::Failed(format!("could not start a resolver thread: {e}")),
            Ok(_) => rx.recv_timeout(wait).unwrap_or(Resolution::TimedOut(wait)),
        };
        if let Ok(mut m) = RESOLVED.lock() {
            m.get_or_insert_with(HashMap::new)
                .insert(host.to_string(), answer.clone());
        }
        answer
    })
}

/// The addresses configured on this machine's interfaces (getifaddrs).
pub fn local_addresses() -> Vec<IpAddr> {
    crate::seam::answer("net::local_addresses", "", || {
        let Ok(ifaddrs) = nix::ifaddrs::getifaddrs() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for ifa in ifaddrs {
            let Some(addr) = ifa.address else { continue };
            let ip = if let Some(v4) = addr.as_sockaddr_in() {
                IpAddr::V4(v4.ip())
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                IpAddr::V6(v6.ip())
            } else {
                continue;
            };
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
        out
    })
}

/// True when `ip` belongs to this machine: loopback (all of 127/8 and ::1),
/// the unspecified address, or an address on one of `locals`.
pub fn is_local(ip: IpAddr, locals: &[IpAddr]) -> bool {
    let ip = ip.to_canonical();
    ip.is_loopback() || ip.is_unspecified() || locals.contains(&ip)
}

// ---------------------------------------------------------------- MASTER_ADDR lookup

/// How long a name lookup may take before it counts as hung. glibc's own
/// default is 5 s per DNS server and attempt; a master name that takes longer
/// than this would stall every rank's rendezvous as well.
pub const RESOLVE_WAIT: Duration = Duration::from_secs(3);

/// One address a master name resolved to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResolvedAddr {
    pub ip: IpAddr,
    /// An address of this machine (loopback, unspecified, or on an interface).
    pub local: bool,
    /// For a local address: why binding it failed, if it did.
    pub bind_error: Option<BindError>,
}

/// What a master name's lookup found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AddrLookup {
    Resolved(Vec<ResolvedAddr>),
    Failed(String),
    TimedOut(Duration),
}

/// Resolve `host` and classify each address (local or not, bindable or not).
pub fn lookup_addr(host: &str) -> AddrLookup {
    crate::seam::answer("net::lookup_addr", host, || {
        match resolve(host, RESOLVE_WAIT) {
            Resolution::Failed(e) => AddrLookup::Failed(e),
            Resolution::TimedOut(d) => AddrLookup::TimedOut(d),
            Resolution::Resolved(ips) => {
                let locals = local_addresses();
                AddrLookup::Resolved(
                    ips.into_iter()
                        .map(|ip| {
                            let local = is_local(ip, &locals);
                            // A link-local IPv6 address binds only with its
                            // interface's scope id, which a name lookup lacks.
                            let link_local =
                                matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local());
                            let bind_error = if local && !link_local {
                                try_listen(SocketAddr::new(ip, 0)).err()
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
    })
}

// ---------------------------------------------------------------- binding

/// Why a bind failed, in the terms a verdict needs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BindError {
    /// EADDRINUSE: something else holds the port.
    InUse,
    /// EACCES: a privileged port (< 1024) without the capability.
    Denied,
    /// EADDRNOTAVAIL: the address is not this machine's.
    NotLocal,
    Other(String),
}

impl BindError {
    fn from_io(e: &io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::EADDRINUSE) => BindError::InUse,
            Some(libc::EACCES) | Some(libc::EPERM) => BindError::Denied,
            Some(libc::EADDRNOTAVAIL) => BindError::NotLocal,
            _ => BindError::Other(e.to_string()),
        }
    }
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindError::InUse => f.write_str("address already in use (EADDRINUSE)"),
            BindError::Denied => f.write_str("permission denied (EACCES)"),
            BindError::NotLocal => f.write_str("not an address of this machine (EADDRNOTAVAIL)"),
            BindError::Other(e) => f.write_str(e),
        }
    }
}

/// Bind and listen on `addr` with SO_REUSEADDR (as servers do, so sockets in
/// TIME_WAIT do not count), then release it. An IPv6 wildcard is bound
/// dual-stack.
pub fn try_listen(addr: SocketAddr) -> Result<(), BindError> {
    crate::seam::answer("net::try_listen", &addr.to_string(), || {
        let attempt = || -> io::Result<()> {
            let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
            s.set_reuse_address(true)?;
            if let SocketAddr::V6(v6) = addr {
                if v6.ip().is_unspecified() {
                    s.set_only_v6(false)?;
                }
            }
            s.bind(&SockAddr::from(addr))?;
            s.listen(1)
        };
        attempt().map_err(|e| BindError::from_io(&e))
    })
}

/// Can the rendezvous store listen on `port`? PyTorch's TCPStore server binds
/// the wildcard address (IPv6 dual-stack first, then IPv4) with SO_REUSEADDR,
/// so a listener on the port on *any* local address blocks it. The port is
/// usable when either wildcard binds; otherwise the IPv6 error is returned
/// unless IPv6 is simply unavailable.
pub fn store_port_free(port: u16) -> Result<(), BindError> {
    crate::seam::answer("net::store_port_free", &port.to_string(), || {
        let Err(v6) = try_listen(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)) else {
            return Ok(());
        };
        match try_listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)) {
            Ok(()) => Ok(()),
            Err(_) if v6 == BindError::InUse => Err(v6),
            Err(v4) => Err(v4),
        }
    })
}

/// A port near `port` that the rendezvous store could listen on right now,
/// verified by binding it the way [`store_port_free`] does: the `span` ports
/// above it first, then the ones below (never below 1024). There is a window
/// between this check and the real bind, as with any free-port search.
pub fn free_port_near(port: u16, span: u16) -> Option<u16> {
    crate::seam::answer("net::free_port_near", &format!("{port}, {span}"), || {
        let above = (1..=span).filter_map(|d| port.checked_add(d));
        let below = (1..=span)
            .filter_map(|d| port.checked_sub(d))
            .filter(|p| *p >= 1024);
        above.chain(below).find(|p| store_port_free(*p).is_ok())
    })
}

// ---------------------------------------------------------------- port owner

/// One socket from /proc/net/tcp or tcp6 bound to the port in question.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcNetSocket {
    /// A LISTEN socket (otherwise bound only, or connected).
    pub listening: bool,
    pub uid: u32,
    pub inode: u64,
}

/// The sockets of a /proc/net/tcp{,6} table whose local port is `port`.
pub fn sockets_on_port(table: &[TcpNetEntry], port: u16) -> Vec<ProcNetSocket> {
    table
        .iter()
        .filter(|e| e.local_address.port() == port)
        .map(|e| ProcNetSocket {
            listening: e.state == TcpState::Listen,
            uid: e.uid,
            inode: e.inode,
        })
        .collect()
}

/// A process holding a socket.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortOwner {
    pub pid: u32,
    /// Its command line (arguments joined by spaces, shortened).
    pub cmdline: String,
    /// True when it is gpucheck's parent, grandparent, ... (e.g. the torchrun
    /// agent that launched the script that runs gpucheck).
    pub ancestor: bool,
}

/// Who holds a TCP port, as far as /proc tells this user.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PortHolder {
    /// The processes with the socket open; `listening` when it is a LISTEN socket.
    Processes {
        owners: Vec<PortOwner>,
        listening: bool,
    },
    /// A socket of user `uid` holds it, but no /proc/*/fd this user may read
    /// names it (another user's process).
    Hidden { uid: u32, listening: bool },
    /// No socket on the port is listed (another network namespace, or it
    /// closed meanwhile).
    Unlisted,
}

/// Find who holds TCP `port`: the socket inode from /proc/net/tcp{,6}, then
/// the processes with a descriptor on that socket (/proc/*/fd).
pub fn port_holder(port: u16) -> PortHolder {
    crate::seam::answer("net::port_holder", &port.to_string(), || {
        let tables = [procfs::net::tcp(), procfs::net::tcp6()];
        let mut sockets: Vec<ProcNetSocket> = tables
            .iter()
            .flatten()
            .flat_map(|t| sockets_on_port(t, port))
            .filter(|s| s.inode != 0)
            .collect();
        let listening = sockets.iter().any(|s| s.listening);
        if listening {
            sockets.retain(|s| s.listening);
        }
        let Some(first) = sockets.first() else {
            return PortHolder::Unlisted;
        };
        let uid = first.uid;
        let inodes: Vec<u64> = sockets.iter().map(|s| s.inode).collect();
        let mut pids = socket_holders(&inodes);
        if pids.is_empty() {
            return PortHolder::Hidden { uid, listening };
        }
        pids.sort_unstable();
        let ancestors = ancestors();
        let commands = command_lines(&pids);
        let owners = pids
            .into_iter()
            .zip(commands)
            .map(|(pid, cmdline)| PortOwner {
                pid,
                cmdline,
                ancestor: ancestors.contains(&pid),
            })
            .collect();
        PortHolder::Processes { owners, listening }
    })
}

/// The pids whose open descriptors include one of the socket `inodes`, as
/// far as this user may read /proc/*/fd.
fn socket_holders(inodes: &[u64]) -> Vec<u32> {
    let Ok(processes) = procfs::process::all_processes() else {
        return Vec::new();
    };
    processes
        .flatten()
        .filter(|p| {
            p.fd().is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| matches!(fd.target, FDTarget::Socket(i) if inodes.contains(&i)))
            })
        })
        .filter_map(|p| u32::try_from(p.pid).ok())
        .collect()
}

/// Most characters of a command line kept in a report.
const CMDLINE_MAX_CHARS: usize = 160;

/// The command lines of `pids`, in order: arguments joined by spaces and
/// shortened; the process name in brackets when the command line is empty
/// (kernel threads); empty brackets for a process that is gone.
pub fn command_lines(pids: &[u32]) -> Vec<String> {
    crate::seam::answer("net::command_lines", &format!("{pids:?}"), || {
        let wanted: Vec<Pid> = pids.iter().map(|p| Pid::from_u32(*p)).collect();
        let mut system = System::new();
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&wanted),
            false,
            ProcessRefreshKind::nothing().with_cmd(UpdateKind::Always),
        );
        wanted
            .iter()
            .map(|pid| match system.process(*pid) {
                Some(p) => shown_command(p.cmd(), &p.name().to_string_lossy()),
                None => "[]".to_string(),
            })
            .collect()
    })
}

/// A command line as a report shows it: the non-empty arguments joined by
/// spaces, cut at [`CMDLINE_MAX_CHARS`]; `[name]` when there are none.
pub fn shown_command(args: &[OsString], name: &str) -> String {
    let joined = args
        .iter()
        .filter(|a| !a.is_empty())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    if joined.is_empty() {
        return format!("[{}]", name.trim());
    }
    if joined.chars().count() > CMDLINE_MAX_CHARS {
        let cut: String = joined.chars().take(CMDLINE_MAX_CHARS).collect();
        format!("{cut}…")
    } else {
        joined
    }
}

/// gpucheck's parent, grandparent, ... up to (not including) pid 0.
fn ancestors() -> Vec<u32> {
    let mut system = System::new();
    let mut out = Vec::new();
    let mut pid = Pid::from_u32(std::process::id());
    for _ in 0..64 {
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[pid]),
            false,
            ProcessRefreshKind::nothing(),
        );
        let Some(parent) = system.process(pid).and_then(|p| p.parent()) else {
            break;
        };
        if parent.as_u32() == 0 || out.contains(&parent.as_u32()) {
            break;
        }
        out.push(parent.as_u32());
        pid = parent;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn ipv4_loopback_exchanges_bytes() {
        assert_eq!(
            loopback_echo(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            EchoResult::Exchanged
        );
    }

    #[test]
    fn a_foreign_address_is_unavailable_not_failed() {
        // TEST-NET-3 (RFC 5737) is never configured on a machine.
        let r = loopback_echo("203.0.113.7".parse().unwrap());
        assert!(matches!(r, EchoResult::Unavailable(_)), "{r:?}");
    }

    #[test]
    fn if_inet6_parsing() {
        let text = "fd000000000000000000000000000002 04 40 00 82     eth0\n\
                    00000000000000000000000000000001 01 80 10 80       lo\n";
        assert!(if_inet6_has_loopback(text));
        assert!(!if_inet6_has_loopback(
            "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
        ));
        assert!(!if_inet6_has_loopback(""));
    }

    #[test]
    fn resolves_literals_and_localhost() {
        assert_eq!(
            resolve("10.1.2.3", Duration::from_secs(1)),
            Resolution::Resolved(vec!["10.1.2.3".parse().unwrap()])
        );
        match resolve("localhost", Duration::from_secs(5)) {
            Resolution::Resolved(ips) => assert!(ips.iter().all(|ip| ip.is_loopback()), "{ips:?}"),
            other => panic!("localhost did not resolve: {other:?}"),
        }
    }

    #[test]
    fn unresolvable_name_fails() {
        // .invalid is reserved never to resolve (RFC 2606).
        let r = resolve("no-such-host.invalid", Duration::from_secs(5));
        assert!(
            matches!(r, Resolution::Failed(_) | Resolution::TimedOut(_)),
            "{r:?}"
        );
    }

    #[test]
    fn locality() {
        let locals = local_addresses();
        assert!(locals.iter().any(|ip| ip.is_loopback()), "{locals:?}");
        assert!(is_local("127.0.1.1".parse().unwrap(), &[]));
        assert!(is_local("::ffff:127.0.0.1".parse().unwrap(), &[]));
        assert!(!is_local("203.0.113.7".parse().unwrap(), &locals));
    }

    #[test]
    fn a_listening_port_is_not_free_and_a_neighbour_is_found() {
        let held = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = held.local_addr().expect("addr").port();
        assert_eq!(store_port_free(port), Err(BindError::InUse));
        let free = free_port_near(port, FREE_PORT_SEARCH_SPAN).expect("a free port nearby");
        assert_ne!(free, port);
        assert!(free.abs_diff(port) <= FREE_PORT_SEARCH_SPAN);
        assert_eq!(store_port_free(free), Ok(()));
    }

    #[test]
    fn the_holder_of_a_port_is_this_process() {
        let held = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = held.local_addr().expect("addr").port();
        match port_holder(port) {
            PortHolder::Processes { owners, listening } => {
                assert!(listening);
                assert!(
                    owners.iter().any(|o| o.pid == std::process::id()),
                    "{owners:?}"
                );
            }
            other => panic!("expected this process, got {other:?}"),
        }
    }

    #[test]
    fn proc_net_tcp_parsing() {
        use procfs::FromBufReadSI;
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:ADF3 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 17565 1 0000 100 0 0 10 0\n\
   1: 0100007F:ADF3 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 17570 1 0000 100 0 0 10 0\n\
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000 100 0 0 10 0\n";
        let table = procfs::net::TcpNetEntries::from_buf_read(
            text.as_bytes(),
            procfs::current_system_info(),
        )
        .expect("a /proc/net/tcp table")
        .0;
        let s = sockets_on_port(&table, 0xADF3);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            ProcNetSocket {
                listening: true,
                uid: 1000,
                inode: 17565
            }
        );
        assert!(!s[1].listening);
        assert_eq!(sockets_on_port(&table, 8080)[0].inode, 99);
        assert!(sockets_on_port(&table, 1).is_empty());
    }

    #[test]
    fn command_lines_are_joined_cut_and_named() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            shown_command(&args(&["python", "", "train.py"]), "python"),
            "python train.py"
        );
        assert_eq!(shown_command(&[], "kworker/0:1\n"), "[kworker/0:1]");
        let long = "x".repeat(500);
        let shown = shown_command(&args(&[&long]), "x");
        assert_eq!(shown.chars().count(), CMDLINE_MAX_CHARS + 1);
        assert!(shown.ends_with('…'));
        let me = command_lines(&[std::process::id()]);
        assert!(me[0].contains("gpucheck"), "{me:?}");
    }

    #[test]
    fn ancestors_include_the_parent() {
        let a = ancestors();
        assert_eq!(
            a.first().copied(),
            Some(std::os::unix::process::parent_id())
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
}

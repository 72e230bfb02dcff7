//! `net.master_port`: MASTER_PORT is a port, and free on the master.

use std::net::IpAddr;

use crate::domain::launch::{parse_master_port, DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT};
use crate::domain::redact::redact_url_credentials;
use crate::domain::text::quote_value;
use crate::probe::host::env_lossy;
use crate::probe::net::{self as np, lookup_addr, AddrLookup, BindError, PortHolder};
use crate::{Check, Context, Outcome, Profile, Status};

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
        let host = master_addr.as_deref().unwrap_or(DEFAULT_MASTER_ADDR);
        probe_master(&mut facts, host, port);
        evaluate_master_port(&facts)
    }
}

/// Where the master is and, when it is this machine, whether `port` binds,
/// who holds it, and a free port near it.
fn probe_master(facts: &mut MasterPortFacts, host: &str, port: u16) {
    let location = match lookup_addr(host) {
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
        Some(a) => format!("MASTER_ADDR={}", quote_value(&redact_url_credentials(a))),
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
    let Some(bind) = &f.bind else {
        return Outcome::error("gpucheck bug: the port was not probed");
    };
    let taken = match bind {
        Ok(()) => return Outcome::pass(format!("{which_port} is free on this machine")),
        Err(BindError::InUse) => match held_by(f, &which_port, port) {
            expected if expected.status == Status::Pass => return expected,
            taken => taken,
        },
        Err(BindError::Denied) => Outcome::fail(
            format!("{which_port} cannot be bound: permission denied (ports below 1024 need root)"),
            use_instead(f, port, "use a port above 1024"),
        ),
        Err(e) => Outcome::fail(
            format!("{which_port} cannot be bound: {e}"),
            use_instead(
                f,
                port,
                "look at `ss -ltnp` and the machine's network setup",
            ),
        ),
    };
    match f.suggestion {
        Some(p) => taken.with_fact("suggested_port", p),
        None => taken,
    }
}

/// The port is in use: a pass when the torchrun agent that launched
/// gpucheck holds it (its rendezvous store), else a failure naming who
/// holds it.
fn held_by(f: &MasterPortFacts, which_port: &str, port: u16) -> Outcome {
    match &f.holder {
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
            Outcome::fail(
                format!("{which_port} is already {how} by {named}{more}"),
                use_instead(
                    f,
                    port,
                    &format!("stop it if it is a stale run (`kill {kill}`)"),
                ),
            )
        }
        Some(PortHolder::Hidden { uid, .. }) => Outcome::fail(
            format!(
                "{which_port} is already in use by a process of uid {uid} that /proc does not \
                 show to this user"
            ),
            use_instead(
                f,
                port,
                &format!("find it with `sudo ss -ltnp 'sport = :{port}'`"),
            ),
        ),
        Some(PortHolder::Unlisted) | None => Outcome::fail(
            format!(
                "{which_port} is already in use (no socket in /proc/net/tcp names it; it may \
                 have just closed)"
            ),
            use_instead(f, port, &format!("look with `ss -ltnp 'sport = :{port}'`")),
        ),
    }
}

/// The hint for a port that cannot be used: `what` to do about it, then the
/// free port nearby, if one was found.
fn use_instead(f: &MasterPortFacts, port: u16, what: &str) -> String {
    match f.suggestion {
        Some(free) => format!(
            "{what}, or use port {free}, which is free (gpucheck bound it): `export \
             MASTER_PORT={free}` or `torchrun --master-port={free}`"
        ),
        None => format!(
            "{what}; no free port was found within {} of {port}: pick another range",
            np::FREE_PORT_SEARCH_SPAN
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::net::PortOwner;

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

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
        assert_eq!(o.facts["suggested_port"], crate::FactValue::Integer(29501));
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
    fn master_port_never_shows_a_password_in_master_addr() {
        let mut f = port_facts(None);
        f.master_addr = Some("alice:hunter2@node0".into());
        f.location = Some(MasterLocation::Unresolved(
            "Name or service not known".into(),
        ));
        f.bind = None;
        let o = evaluate_master_port(&f);
        assert!(
            o.summary
                .starts_with(r#"MASTER_ADDR="alice:***@node0" does not resolve"#),
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

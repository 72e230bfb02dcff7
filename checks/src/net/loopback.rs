//! `net.loopback`: TCP over 127.0.0.1 (and ::1) carries bytes both ways.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::probe::net::{self as np, EchoResult};
use crate::{Check, Context, Outcome, Profile};

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
            .then(|| np::loopback_echo(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        evaluate_loopback(&LoopbackFacts {
            ipv4: np::loopback_echo(IpAddr::V4(Ipv4Addr::LOCALHOST)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

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
                step: "connect".into(),
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
                step: "receive".into(),
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
}

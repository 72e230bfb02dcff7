//! `nccl.env`: NCCL_* settings that make NCCL hang, slow down or be ignored.

mod filter;
mod names;
mod sockets;
mod values;

pub use filter::NameFilter;
pub use names::{closest, edit_distance, KNOWN_NCCL_VARS};
use names::{other_tool, NCCL_TESTS_PREFIX, TORCH_RENAMED};
pub use sockets::{socket_interfaces, socket_links};

use crate::domain::nvlink_fabric::nccl_setting_cost;
use crate::domain::redact::redact_value;
use crate::domain::text::{plain_or_quoted, plural, quote_value};
use crate::facts::fabric::NvlinkDomains;
use crate::probe::nccl::{self as probe, EnvFacts, VarOrigin};
use crate::{Check, Context, Finding, Findings, Outcome, Profile, Status};

/// `nccl.env`: NCCL_* settings that make NCCL hang, slow down or be ignored.
pub struct Env;

/// What nccl.env found, each finding with the variable it is about (the
/// hint names the variable when more than one is flagged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnvFindings {
    pub findings: Findings,
    /// `vars[i]` is the variable `findings.items[i]` is about.
    pub vars: Vec<String>,
}

impl EnvFindings {
    fn flag(&mut self, var: &str, status: Status, text: String, hint: impl Into<String>) {
        self.findings
            .push(Finding::new(None, status, text).hint(hint.into()));
        self.vars.push(var.to_string());
    }

    fn len(&self) -> usize {
        self.vars.len()
    }
}

fn is_set_nonzero(value: &str) -> bool {
    value.trim().parse::<i64>().is_ok_and(|v| v != 0)
}

fn describe_origin(origin: &VarOrigin) -> String {
    match origin {
        VarOrigin::Environment => String::new(),
        VarOrigin::File(p) => format!(" (from {})", p.display()),
    }
}

fn socket_ifname_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    let Some(var) = facts.get("NCCL_SOCKET_IFNAME") else {
        return;
    };
    if facts.interfaces_error.is_some() || var.value.trim().is_empty() {
        return;
    }
    let filter = NameFilter::parse(&var.value);
    let chosen: Vec<&String> = facts
        .interfaces
        .iter()
        .filter(|i| filter.selects(i, None))
        .collect();
    if !chosen.is_empty() {
        return;
    }
    let have = if facts.interfaces.is_empty() {
        "none".to_string()
    } else {
        facts.interfaces.join(", ")
    };
    let unaddressed: Vec<&String> = facts
        .interfaces_without_address
        .iter()
        .filter(|i| filter.selects(i, None))
        .collect();
    if !unaddressed.is_empty() {
        let names: Vec<&str> = unaddressed.iter().map(|s| s.as_str()).collect();
        out.flag(
            "NCCL_SOCKET_IFNAME",
            Status::Fail,
            format!(
                "NCCL_SOCKET_IFNAME={}{} matches only {}, which ha{} no IPv4/IPv6 address, so \
                 NCCL cannot use {}; interfaces with an address: {have}",
                var.value,
                describe_origin(&var.origin),
                names.join(", "),
                if names.len() == 1 { "s" } else { "ve" },
                if names.len() == 1 { "it" } else { "them" },
            ),
            "NCCL's socket transport only uses interfaces with an IP address, so it finds none to \
             bootstrap over and fails or hangs at init. Give the interface an address (for \
             InfiniBand, configure IPoIB; `ip -br addr` shows addresses), or name one that has \
             an address, or unset NCCL_SOCKET_IFNAME and let NCCL choose",
        );
        return;
    }
    let suggestion = filter
        .entries
        .iter()
        .find_map(|(e, _)| closest(e, facts.interfaces.iter().map(String::as_str)))
        .map(|s| format!(" (did you mean {s}?)"))
        .unwrap_or_default();
    out.flag(
        "NCCL_SOCKET_IFNAME",
        Status::Fail,
        format!(
            "NCCL_SOCKET_IFNAME={}{} matches no network interface{suggestion}; this host has: {have}",
            var.value,
            describe_origin(&var.origin)
        ),
        "NCCL finds no interface to bootstrap over and fails or hangs at init. Name an interface \
         that exists: NCCL_SOCKET_IFNAME=eth (prefix), NCCL_SOCKET_IFNAME==eth0 (exact), \
         NCCL_SOCKET_IFNAME=^docker,lo (exclude); or unset it and let NCCL choose (`ip -br link` \
         lists the interfaces)",
    );
}

fn ib_hca_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    let Some(var) = facts.get("NCCL_IB_HCA") else {
        return;
    };
    if var.value.trim().is_empty() {
        return;
    }
    let origin = describe_origin(&var.origin);
    if facts.ib_devices.is_empty() {
        out.flag(
            "NCCL_IB_HCA",
            Status::Warn,
            format!(
                "NCCL_IB_HCA={}{origin} is set but this host shows no InfiniBand/RoCE device \
                 (/sys/class/infiniband is empty)",
                var.value
            ),
            "NCCL falls back to TCP sockets between nodes. In a container, pass the HCAs in \
             (`--device /dev/infiniband`, or the RDMA device plugin on Kubernetes); on a host \
             without InfiniBand, unset NCCL_IB_HCA",
        );
        return;
    }
    let filter = NameFilter::parse(&var.value);
    let mut ports: Vec<String> = Vec::new();
    let mut selected = false;
    for dev in &facts.ib_devices {
        if dev.ports.is_empty() {
            ports.push(dev.name.clone());
            selected |= filter.selects(&dev.name, None);
        }
        for &p in &dev.ports {
            ports.push(format!("{}:{p}", dev.name));
            selected |= filter.selects(&dev.name, Some(p));
        }
    }
    if selected {
        return;
    }
    // A device that exists with a port it lacks, or a near-miss name.
    let suggestion = filter
        .entries
        .iter()
        .find_map(|(e, port)| {
            if let (Some(dev), Some(p)) = (facts.ib_devices.iter().find(|d| d.name == *e), port) {
                let have: Vec<String> = dev.ports.iter().map(u32::to_string).collect();
                return Some(format!(
                    " ({e} has no port {p}; its ports: {})",
                    have.join(", ")
                ));
            }
            closest(e, facts.ib_devices.iter().map(|d| d.name.as_str()))
                .filter(|s| s != e)
                .map(|s| format!(" (did you mean {s}?)"))
        })
        .unwrap_or_default();
    out.flag(
        "NCCL_IB_HCA",
        Status::Fail,
        format!(
            "NCCL_IB_HCA={}{origin} selects none of this host's HCA ports{suggestion}; it has: {}",
            var.value,
            ports.join(", ")
        ),
        "NCCL then finds no usable HCA and falls back to TCP sockets: multi-node traffic runs many \
         times slower without a word. Use names from `ls /sys/class/infiniband` (or `ibv_devinfo \
         -l`): NCCL_IB_HCA=mlx5 (prefix), NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 (exact with ports), or \
         unset it",
    );
}

/// Settings that turn off NCCL's GPU-to-GPU and shared-memory transports.
fn transport_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    if let Some(v) = facts
        .get("NCCL_P2P_DISABLE")
        .filter(|v| is_set_nonzero(&v.value))
    {
        out.flag(
            "NCCL_P2P_DISABLE",
            Status::Warn,
            format!(
                "NCCL_P2P_DISABLE={}{} turns off direct GPU-to-GPU transfers",
                v.value,
                describe_origin(&v.origin)
            ),
            "all-reduce traffic then goes through host memory, several times slower than \
             NVLink or PCIe P2P. It is a workaround for P2P hangs (PCIe ACS / IOMMU): fix those \
             instead (disable ACS, boot with iommu=pt) and unset NCCL_P2P_DISABLE",
        );
    }
    if let Some(v) = facts
        .get("NCCL_P2P_LEVEL")
        // NCCL compares the level with strcmp: "loc" is ignored, not LOC.
        .filter(|v| matches!(v.value.trim(), "LOC" | "0"))
    {
        out.flag(
            "NCCL_P2P_LEVEL",
            Status::Warn,
            format!(
                "NCCL_P2P_LEVEL={}{} never uses GPU-to-GPU P2P",
                v.value,
                describe_origin(&v.origin)
            ),
            "LOC disables P2P like NCCL_P2P_DISABLE=1; unset NCCL_P2P_LEVEL so NCCL picks the \
             level from the topology",
        );
    }
    if let Some(v) = facts
        .get("NCCL_SHM_DISABLE")
        .filter(|v| is_set_nonzero(&v.value))
    {
        out.flag(
            "NCCL_SHM_DISABLE",
            Status::Warn,
            format!(
                "NCCL_SHM_DISABLE={}{} turns off the shared-memory transport",
                v.value,
                describe_origin(&v.origin)
            ),
            "GPUs without P2P then talk over sockets even inside one machine. If it was set \
             because /dev/shm is small in a container, give the container more (`--shm-size=1g` \
             or `--ipc=host`) and unset NCCL_SHM_DISABLE",
        );
    }
}

/// Settings that keep NCCL off the fast paths between GPUs or nodes.
fn network_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    if let Some(v) = facts
        .get("NCCL_IB_DISABLE")
        .filter(|v| is_set_nonzero(&v.value))
    {
        if !facts.ib_devices.is_empty() {
            let names: Vec<&str> = facts.ib_devices.iter().map(|d| d.name.as_str()).collect();
            out.flag(
                "NCCL_IB_DISABLE",
                Status::Warn,
                format!(
                    "NCCL_IB_DISABLE={}{} while this host has InfiniBand/RoCE devices ({})",
                    v.value,
                    describe_origin(&v.origin),
                    names.join(", ")
                ),
                "NCCL uses TCP sockets between nodes instead of RDMA, many times slower; unset \
                 NCCL_IB_DISABLE",
            );
        }
    }
}

/// Settings that force NCCL's choices or its logging: they work, at a cost.
fn override_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    for name in ["NCCL_ALGO", "NCCL_PROTO"] {
        let valid = |v: &&probe::NcclVar| {
            values::grammar_of(name).is_none_or(|g| values::check_value(g, &v.value).is_none())
        };
        if let Some(v) = facts
            .get(name)
            .filter(|v| !v.value.trim().is_empty())
            .filter(valid)
        {
            out.flag(
                name,
                Status::Warn,
                format!(
                    "{name}={}{} forces NCCL's choice for every message size",
                    v.value,
                    describe_origin(&v.origin)
                ),
                format!(
                    "NCCL's documentation lists {name} among the debugging variables not to keep \
                     in production: the forced choice is slower for most sizes and can hang on \
                     some topologies. Unset it unless it works around a known NCCL bug"
                ),
            );
        }
    }
    if let Some(v) = facts.get("NCCL_DEBUG").filter(|v| {
        matches!(
            v.value.trim().to_ascii_uppercase().as_str(),
            "INFO" | "TRACE"
        )
    }) {
        out.flag(
            "NCCL_DEBUG",
            Status::Warn,
            format!(
                "NCCL_DEBUG={}{} logs every NCCL step on every rank",
                v.value,
                describe_origin(&v.origin)
            ),
            "INFO/TRACE slow start-up, flood the job's log and bury real errors; use \
             NCCL_DEBUG=WARN outside debugging sessions",
        );
    }
}

/// Values NCCL ignores without a word (a warning naming what it accepts)
/// or refuses at init (a failure), checked against the grammar NCCL reads
/// each with (`values`).
fn value_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    for var in &facts.vars {
        let value = var.value.as_str();
        // Not UTF-8: flagged as such already.
        if value.is_empty() || facts.not_utf8.contains(&var.name) {
            continue;
        }
        let origin = describe_origin(&var.origin);
        let shown = quote_value(value);
        if let Some(bad) = values::grammar_of(&var.name).and_then(|g| values::check_value(g, value))
        {
            let status = if bad.rejected {
                Status::Fail
            } else {
                Status::Warn
            };
            let text = format!("{}={shown}{origin} {}", var.name, bad.problem);
            out.flag(&var.name, status, text, bad.hint);
            continue;
        }
        let (ports, example) = match var.name.as_str() {
            "NCCL_IB_HCA" => (true, "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1"),
            "NCCL_SOCKET_IFNAME" => (false, "NCCL_SOCKET_IFNAME=^docker0,lo"),
            _ => continue,
        };
        if let Some(problem) = values::list_entry_problem(value, ports) {
            out.flag(
                &var.name,
                Status::Warn,
                format!("{}={shown}{origin}: {problem}", var.name),
                format!(
                    "NCCL matches each entry character for character, so that entry selects \
                     nothing: write the list without spaces, ports as numbers ({example})"
                ),
            );
        }
    }
}

fn name_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    for var in &facts.vars {
        let name = var.name.as_str();
        // Shown cut and quoted when it is long or odd (a 130 KB name).
        let shown = plain_or_quoted(name);
        if KNOWN_NCCL_VARS.binary_search(&name).is_ok()
            || name.starts_with(NCCL_TESTS_PREFIX)
            || other_tool(name).is_some()
        {
            continue;
        }
        if let Some((_, new)) = TORCH_RENAMED.iter().find(|(old, _)| *old == name) {
            out.flag(
                &shown,
                Status::Warn,
                format!("{shown} is PyTorch's old name for {new}"),
                format!(
                    "PyTorch 2.2 renamed it; the old name is deprecated and may stop working: \
                     set {new}={} instead",
                    var.value
                ),
            );
            continue;
        }
        let suggestion = closest(name, KNOWN_NCCL_VARS.iter().copied());
        let (text, hint) = match suggestion {
            Some(s) => (
                format!("{shown}: did you mean {s}?"),
                format!(
                    "NCCL ignores variables it does not know without a word, so {shown}={} has \
                     no effect; rename it to {s}",
                    var.value
                ),
            ),
            None => (
                format!("{shown} is not an NCCL variable"),
                format!(
                    "NCCL ignores variables it does not know without a word, so {shown}={} has no \
                     effect unless a plugin NCCL loads (NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN) \
                     reads it; check the spelling against NCCL's Environment Variables \
                     documentation",
                    var.value
                ),
            ),
        };
        out.flag(&shown, Status::Warn, text, hint);
    }
}

/// Values (or names) that are not UTF-8: NCCL reads the bytes, so what it
/// sees is not what a terminal or this report shows.
fn encoding_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    for name in &facts.not_utf8 {
        let value = facts
            .get(name)
            .map(|v| v.value.as_str())
            .unwrap_or_default();
        let shown = plain_or_quoted(name);
        out.flag(
            &shown,
            Status::Warn,
            format!("{shown}={} is not UTF-8 text", quote_value(value)),
            format!(
                "NCCL reads the value byte for byte, so it gets something other than what a \
                 terminal or this report shows (bytes that are not UTF-8 appear as \u{FFFD}): \
                 set {shown} again in plain ASCII, or unset it"
            ),
        );
    }
}

/// Everything nccl.env looks at, in report order.
pub fn env_findings(facts: &EnvFacts) -> EnvFindings {
    let mut out = EnvFindings::default();
    encoding_findings(facts, &mut out);
    socket_ifname_findings(facts, &mut out);
    ib_hca_findings(facts, &mut out);
    transport_findings(facts, &mut out);
    network_findings(facts, &mut out);
    value_findings(facts, &mut out);
    override_findings(facts, &mut out);
    name_findings(facts, &mut out);
    out
}

/// On a node in a multi-node NVLink domain (GB200/GB300 NVL72, as
/// fabric.mnnvl found it), the settings that turn NVLink between trays or
/// NVLink SHARP off, wherever they are set (environment or nccl.conf).
fn nvlink_domain_findings(facts: &EnvFacts, out: &mut EnvFindings) {
    for var in &facts.vars {
        if let Some((text, hint)) = nccl_setting_cost(&var.name, &var.value) {
            let text = format!("{text}{}", describe_origin(&var.origin));
            out.flag(&var.name, Status::Warn, text, hint);
        }
    }
}

/// Judge the NCCL configuration. Values of names that look like secrets
/// are redacted first, so no summary, hint or fact can echo them.
pub fn evaluate_env(facts: &EnvFacts) -> Outcome {
    evaluate_env_in_domain(facts, false)
}

/// [`evaluate_env`] on a node whose GPUs are in a multi-node NVLink domain
/// when `nvlink_domain`.
pub fn evaluate_env_in_domain(facts: &EnvFacts, nvlink_domain: bool) -> Outcome {
    let facts = &redacted(facts);
    let mut flagged = env_findings(facts);
    if nvlink_domain {
        nvlink_domain_findings(facts, &mut flagged);
    }
    let outcome = if flagged.findings.is_empty() {
        Outcome::pass(settings_summary(facts))
    } else {
        flagged_outcome(&flagged)
    };
    with_env_facts(outcome, facts)
}

/// `facts` with the value of every variable whose name looks like a secret
/// (NCCL_IB_PASSWORD, ..._TOKEN) replaced by `***`.
fn redacted(facts: &EnvFacts) -> EnvFacts {
    let mut facts = facts.clone();
    for v in &mut facts.vars {
        v.value = redact_value(&v.name, &v.value);
    }
    facts
}

/// Nothing flagged: what is set, and what is set for other tools.
fn settings_summary(facts: &EnvFacts) -> String {
    if facts.vars.is_empty() {
        return "no NCCL_* variables set; NCCL chooses its defaults".to_string();
    }
    let (others, nccls): (Vec<&probe::NcclVar>, Vec<&probe::NcclVar>) = facts
        .vars
        .iter()
        .partition(|v| other_tool(&v.name).is_some());
    let names: Vec<String> = nccls
        .iter()
        .map(|v| format!("{}={}", v.name, v.value))
        .collect();
    let mut summary = if names.is_empty() {
        "no NCCL_* variables NCCL reads are set; NCCL chooses its defaults".to_string()
    } else {
        format!(
            "{} NCCL setting{} right: {}",
            names.len(),
            if names.len() == 1 { " looks" } else { "s look" },
            names.join(", ")
        )
    };
    let others: Vec<String> = others
        .iter()
        .map(|v| format!("{} ({})", v.name, other_tool(&v.name).unwrap_or_default()))
        .collect();
    if !others.is_empty() {
        summary.push_str(&format!("; not read by NCCL: {}", others.join(", ")));
    }
    summary
}

/// The worst finding leads the summary with a count of the others; every
/// finding's hint is kept, one a line, each naming its variable when there
/// are several.
fn flagged_outcome(flagged: &EnvFindings) -> Outcome {
    let items = &flagged.findings.items;
    let status = flagged.findings.worst();
    let mut summary = items
        .iter()
        .find(|f| f.status == status)
        .map(|f| f.text.clone())
        .unwrap_or_default();
    if flagged.len() > 1 {
        let more = flagged.len() - 1;
        summary.push_str(&format!(
            "; {more} more NCCL setting{} flagged",
            plural(more)
        ));
    }
    let hint = items
        .iter()
        .zip(&flagged.vars)
        .map(|(f, var)| {
            let hint = f.hint.clone().unwrap_or_default();
            if flagged.len() == 1 {
                hint
            } else {
                format!("{var}: {hint}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    Outcome::new(status, summary).with_hint(hint)
}

/// Every variable as set (and where from), and the host's interfaces and
/// InfiniBand devices, for the report.
fn with_env_facts(mut outcome: Outcome, facts: &EnvFacts) -> Outcome {
    for v in &facts.vars {
        outcome = outcome.with_fact(
            &v.name,
            format!("{}{}", v.value, describe_origin(&v.origin)),
        );
    }
    if !facts.interfaces.is_empty() {
        outcome = outcome.with_fact("interfaces", facts.interfaces.join(", "));
    }
    if !facts.interfaces_without_address.is_empty() {
        outcome = outcome.with_fact(
            "interfaces_without_address",
            facts.interfaces_without_address.join(", "),
        );
    }
    if let Some(e) = &facts.interfaces_error {
        outcome = outcome.with_fact("interfaces", format!("not readable: {e}"));
    }
    if !facts.ib_devices.is_empty() {
        let names: Vec<&str> = facts.ib_devices.iter().map(|d| d.name.as_str()).collect();
        outcome = outcome.with_fact("ib_devices", names.join(", "));
    }
    outcome
}

/// Publish the interfaces NCCL's sockets would use and their link speeds
/// (for `gpucheck cluster`'s fleet.allreduce); the verdict is unchanged.
fn with_socket_links(outcome: Outcome, facts: &EnvFacts) -> Outcome {
    let Some(interfaces) = socket_interfaces(facts).filter(|i| !i.is_empty()) else {
        return outcome;
    };
    let sysfs = crate::probe::sysfs::sysfs_root();
    let speeds = interfaces
        .into_iter()
        .map(|i| {
            let mbps = probe::interface_speed_mbps(&sysfs, &i);
            (i, mbps)
        })
        .collect();
    outcome.publish(&socket_links(speeds))
}

impl Check for Env {
    fn id(&self) -> &'static str {
        "nccl.env"
    }
    fn title(&self) -> &'static str {
        "NCCL environment"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Judges the NCCL_* settings NCCL will read, before NCCL silently hangs, slows down or \
ignores them.\n\n\
Settings come from the environment and from NCCL's configuration files (NCCL_CONF_FILE or \
~/.nccl.conf, then /etc/nccl.conf; the environment wins). NCCL_SOCKET_IFNAME must match at \
least one network interface of this host that has an IP address (NCCL's socket transport skips \
the others; a typo there is a hang or an error at init), using \
NCCL's syntax: comma-separated prefixes, `^` to exclude, `=` for exact names. NCCL_IB_HCA is \
matched the same way, with optional :port, against /sys/class/infiniband. The interfaces NCCL's \
sockets will use (those NCCL_SOCKET_IFNAME selects, or NCCL's own choice: ib* first, else any \
but docker* and lo) are recorded with their link speeds (/sys/class/net/<if>/speed) for \
`gpucheck cluster`, whose fleet.allreduce judges the all-reduce against them when a node has no \
RDMA port.\n\n\
Settings that work but cost speed warn: NCCL_P2P_DISABLE=1, NCCL_P2P_LEVEL=LOC, \
NCCL_SHM_DISABLE=1, NCCL_IB_DISABLE=1 on a host with InfiniBand, a forced NCCL_ALGO or \
NCCL_PROTO, and NCCL_DEBUG=INFO/TRACE outside debugging. NCCL ignores variables it does not know \
without a word, so an unknown NCCL_* name warns with the closest real one (NCCL_SOCKET_IFACE: \
did you mean NCCL_SOCKET_IFNAME?), checked against the names in NCCL's Environment Variables \
documentation. Names other tools read are listed, not flagged: NCCL_VERSION (set by NVIDIA's CUDA \
container images), NCCL_ROOT, NCCL_INCLUDE_DIR, NCCL_LIB_DIR (PyTorch's build), NCCL_HOME \
(nccl-tests), NCCL_FASTRAK_* and NCCL_GPUDIRECTTCPX_* (Google Cloud's network plugins).\n\n\
Values are checked against the grammar NCCL reads them with. A value NCCL ignores without a \
word warns, naming what it accepts: NCCL_SOCKET_FAMILY and NCCL_IB_ADDR_FAMILY other than \
AF_INET / AF_INET6 (exact), NCCL_DEBUG other than VERSION, WARN, INFO, ABORT, TRACE (any case; \
any other value silences even NCCL's warnings), NCCL_LAUNCH_MODE other than PARALLEL / GROUP, \
NCCL_P2P_LEVEL and NCCL_NET_GDR_LEVEL other than LOC, NVL, NVB, C2C, PIX, PXB, PXN, P2C, PHB, \
SYS (exact capitals) or the old numbers, a word where NCCL reads an integer (NCCL_P2P_DISABLE=true \
is read as 0 or ignored) or an integer out of range (NCCL_IB_TIMEOUT 0-31, NCCL_IB_RETRY_CNT \
0-7, NCCL_IB_SL 0-15, NCCL_IB_TC 0-255, NCCL_IB_GID_INDEX -1 or more), and an NCCL_SOCKET_IFNAME \
or NCCL_IB_HCA entry with a space or a port that is not a number. NCCL_ALGO and NCCL_PROTO are \
comma lists of algorithms (Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT) or \
protocols (LL, LL128, Simple), any case, with `^` to exclude and per-function entries after `;` \
(allreduce:ring;broadcast:tree); a name NCCL does not know fails, as newer NCCL refuses it when \
the communicator is created.\n\n\
On a node whose GPUs are in a multi-node NVLink domain (a GB200/GB300 NVL72 tray, as fabric.mnnvl \
found it), NCCL_MNNVL_ENABLE=0, NCCL_CUMEM_ENABLE=0 (NCCL's MNNVL needs cuMem) and \
NCCL_NVLS_ENABLE=0 warn with what they cost: traffic between trays over the network instead of \
NVLink, or all-reduce without the switches' reduction.\n\n\
Fixes: name an interface or HCA that exists (`ip -br link`, `ls /sys/class/infiniband`), or \
unset the variable and let NCCL choose; remove workaround settings once the underlying problem \
(ACS/IOMMU for P2P, /dev/shm size for SHM) is fixed; correct misspelled names and values."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let facts = probe::env_facts();
        let nvlink_domain = ctx
            .fact::<NvlinkDomains>()
            .is_some_and(|d| !d.domains.is_empty());
        with_socket_links(evaluate_env_in_domain(&facts, nvlink_domain), &facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nccl::{IbDevice, NcclVar};
    use std::path::PathBuf;

    // ---- nccl.env ---------------------------------------------------------

    #[test]
    fn settings_that_turn_nvlink_between_trays_off_warn_only_in_an_nvlink_domain() {
        for name in ["NCCL_MNNVL_ENABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"] {
            let facts = env(&[(name, "0")]);
            let o = evaluate_env_in_domain(&facts, true);
            assert_eq!(o.status, Status::Warn, "{name}");
            assert_eq!(o.summary, format!("{name}=0 on a multi-node NVLink rack"));
            assert!(o
                .hint
                .as_deref()
                .unwrap_or("")
                .contains("about 50 GB/s per GPU instead of 900"));
            assert_eq!(evaluate_env(&facts).status, Status::Pass, "{name}");
        }
        let o = evaluate_env_in_domain(&env(&[("NCCL_CUMEM_ENABLE", "1")]), true);
        assert_eq!(o.status, Status::Pass);
    }

    /// A host with docker0, eth0 and lo, and these NCCL variables.
    pub(super) fn env(vars: &[(&str, &str)]) -> EnvFacts {
        EnvFacts {
            vars: vars
                .iter()
                .map(|(n, v)| NcclVar {
                    name: n.to_string(),
                    value: v.to_string(),
                    origin: VarOrigin::Environment,
                })
                .collect(),
            interfaces: vec!["docker0".into(), "eth0".into(), "lo".into()],
            interfaces_without_address: vec![],
            interfaces_error: None,
            ib_devices: vec![],
            not_utf8: vec![],
        }
    }

    fn with_ib(mut f: EnvFacts) -> EnvFacts {
        f.ib_devices = vec![
            IbDevice {
                name: "mlx5_0".into(),
                ports: vec![1],
            },
            IbDevice {
                name: "mlx5_1".into(),
                ports: vec![1],
            },
        ];
        f
    }

    #[test]
    fn env_values_nccl_ignores_warn_naming_what_it_accepts() {
        let o = evaluate_env(&env(&[("NCCL_SOCKET_FAMILY", "IPv6")]));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "NCCL_SOCKET_FAMILY=\"IPv6\" is not a value NCCL knows"
        );
        assert_eq!(
            o.hint.as_deref(),
            Some(
                "NCCL accepts AF_INET, AF_INET6 (exactly, in capitals); with any other value it \
                 uses whichever address family it finds first"
            )
        );
        let o = evaluate_env(&env(&[("NCCL_P2P_DISABLE", "true")]));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "NCCL_P2P_DISABLE=\"true\" is not an integer");
        // NCCL compares levels exactly: "loc" is ignored, not LOC.
        let o = evaluate_env(&env(&[("NCCL_P2P_LEVEL", "loc")]));
        assert_eq!(
            o.summary,
            "NCCL_P2P_LEVEL=\"loc\" is not a level NCCL knows"
        );
    }

    #[test]
    fn env_an_algorithm_nccl_does_not_know_fails() {
        let o = evaluate_env(&env(&[("NCCL_ALGO", "ring,trees")]));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NCCL_ALGO=\"ring,trees\" names what NCCL does not know: \"trees\""
        );
        assert!(o.hint.unwrap_or_default().contains("ncclInvalidUsage"));
        // A valid forced list still warns as a forced choice.
        let o = evaluate_env(&env(&[("NCCL_ALGO", "^tree;allreduce:ring")]));
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("forces NCCL's choice"), "{}", o.summary);
    }

    #[test]
    fn env_an_hca_list_with_a_space_warns() {
        let o = evaluate_env(&with_ib(env(&[("NCCL_IB_HCA", "mlx5_0, mlx5_1")])));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "NCCL_IB_HCA=\"mlx5_0, mlx5_1\": entry \" mlx5_1\" holds a space, which NCCL keeps \
             as part of the name"
        );
    }

    #[test]
    fn env_documented_values_pass() {
        let o = evaluate_env(&with_ib(env(&[
            ("NCCL_SOCKET_FAMILY", "AF_INET6"),
            ("NCCL_DEBUG", "version"),
            ("NCCL_IB_HCA", "^=mlx5_1"),
            ("NCCL_P2P_LEVEL", "NVL"),
            ("NCCL_IB_GID_INDEX", "-1"),
            ("NCCL_IB_TIMEOUT", "22"),
            ("NCCL_SOCKET_IFNAME", "^docker0"),
        ])));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
    }

    #[test]
    fn env_nothing_set_passes() {
        let o = evaluate_env(&env(&[]));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "no NCCL_* variables set; NCCL chooses its defaults"
        );
        assert_eq!(o.hint, None);
    }

    #[test]
    fn env_good_settings_pass_and_are_listed() {
        let o = evaluate_env(&env(&[
            ("NCCL_SOCKET_IFNAME", "eth"),
            ("NCCL_DEBUG", "WARN"),
        ]));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "2 NCCL settings look right: NCCL_SOCKET_IFNAME=eth, NCCL_DEBUG=WARN"
        );
        assert_eq!(o.facts["NCCL_SOCKET_IFNAME"], "eth");
        let o = evaluate_env(&env(&[("NCCL_DEBUG", "WARN")]));
        assert_eq!(o.summary, "1 NCCL setting looks right: NCCL_DEBUG=WARN");
    }

    #[test]
    fn env_socket_ifname_with_a_port_suffix_still_selects_the_interface() {
        let o = evaluate_env(&env(&[("NCCL_SOCKET_IFNAME", "=eth0:1")]));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
    }

    #[test]
    fn env_socket_ifname_naming_an_interface_without_an_address_fails() {
        let mut facts = env(&[("NCCL_SOCKET_IFNAME", "ib")]);
        facts.interfaces_without_address = vec!["ib0".into(), "ib1".into()];
        let o = evaluate_env(&facts);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NCCL_SOCKET_IFNAME=ib matches only ib0, ib1, which have no IPv4/IPv6 address, so \
             NCCL cannot use them; interfaces with an address: docker0, eth0, lo"
        );
        let hint = o.hint.unwrap();
        assert!(
            hint.starts_with("NCCL's socket transport only uses interfaces with an IP address")
                && hint.contains("configure IPoIB")
                && hint.contains("`ip -br addr`"),
            "{hint}"
        );
        assert_eq!(o.facts["interfaces_without_address"], "ib0, ib1");

        // One of them named exactly, and an address elsewhere still chosen.
        let mut facts = env(&[("NCCL_SOCKET_IFNAME", "=ib0")]);
        facts.interfaces_without_address = vec!["ib0".into()];
        let o = evaluate_env(&facts);
        assert!(
            o.summary
                .starts_with("NCCL_SOCKET_IFNAME==ib0 matches only ib0, which has no IPv4/IPv6 address, so NCCL cannot use it;"),
            "{}",
            o.summary
        );
        let mut facts = env(&[("NCCL_SOCKET_IFNAME", "eth,ib")]);
        facts.interfaces_without_address = vec!["ib0".into()];
        assert_eq!(evaluate_env(&facts).status, Status::Pass);
    }

    #[test]
    fn env_socket_ifname_verdicts() {
        for ok in [
            "lo",
            "l",
            "=lo",
            "eth,ib",
            "^docker",
            "^=docker0",
            "=eth0,eth1",
        ] {
            let o = evaluate_env(&env(&[("NCCL_SOCKET_IFNAME", ok)]));
            assert_eq!(o.status, Status::Pass, "{ok}: {}", o.summary);
        }
        for bad in ["=l", "ib", "^docker,eth,lo", "=eth"] {
            let o = evaluate_env(&env(&[("NCCL_SOCKET_IFNAME", bad)]));
            assert_eq!(o.status, Status::Fail, "{bad}: {}", o.summary);
            assert!(
                o.summary.contains("this host has: docker0, eth0, lo"),
                "{}",
                o.summary
            );
            assert!(o.hint.unwrap().contains("fails or hangs at init"));
        }
    }

    #[test]
    fn env_socket_ifname_typo_gets_a_suggestion() {
        let o = evaluate_env(&env(&[("NCCL_SOCKET_IFNAME", "eht0")]));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NCCL_SOCKET_IFNAME=eht0 matches no network interface (did you mean eth0?); this \
             host has: docker0, eth0, lo"
        );
    }

    #[test]
    fn env_settings_from_a_file_say_so() {
        let mut f = env(&[]);
        f.vars.push(NcclVar {
            name: "NCCL_SOCKET_IFNAME".into(),
            value: "=bond0".into(),
            origin: VarOrigin::File(PathBuf::from("/etc/nccl.conf")),
        });
        let o = evaluate_env(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("NCCL_SOCKET_IFNAME==bond0 (from /etc/nccl.conf) matches no"),
            "{}",
            o.summary
        );
        assert_eq!(
            o.facts["NCCL_SOCKET_IFNAME"],
            "=bond0 (from /etc/nccl.conf)"
        );
    }

    #[test]
    fn env_ib_hca_verdicts() {
        for ok in ["mlx5", "=mlx5_0:1", "mlx5_1:1", "^=mlx5_0"] {
            let o = evaluate_env(&with_ib(env(&[("NCCL_IB_HCA", ok)])));
            assert_eq!(o.status, Status::Pass, "{ok}: {}", o.summary);
        }
        let o = evaluate_env(&with_ib(env(&[("NCCL_IB_HCA", "=mlx5_0:2")])));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "NCCL_IB_HCA==mlx5_0:2 selects none of this host's HCA ports (mlx5_0 has no port \
             2; its ports: 1); it has: mlx5_0:1, mlx5_1:1"
        );
        assert!(o.hint.unwrap().contains("falls back to TCP sockets"));
        let o = evaluate_env(&with_ib(env(&[("NCCL_IB_HCA", "=mlx5_2")])));
        assert!(
            o.summary.contains("(did you mean mlx5_0?)"),
            "{}",
            o.summary
        );
        let o = evaluate_env(&with_ib(env(&[("NCCL_IB_HCA", "^mlx5")])));
        assert_eq!(o.status, Status::Fail);
        // Set on a host without HCAs: NCCL falls back, warn.
        let o = evaluate_env(&env(&[("NCCL_IB_HCA", "mlx5")]));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("no InfiniBand/RoCE device"),
            "{}",
            o.summary
        );
        assert!(o.hint.unwrap().contains("--device /dev/infiniband"));
    }

    #[test]
    fn env_transport_switches_warn() {
        let cases: &[(&str, &str, &str)] = &[
            ("NCCL_P2P_DISABLE", "1", "iommu=pt"),
            ("NCCL_P2P_LEVEL", "LOC", "unset NCCL_P2P_LEVEL"),
            ("NCCL_SHM_DISABLE", "1", "--shm-size=1g"),
            ("NCCL_ALGO", "Ring", "debugging variables"),
            ("NCCL_PROTO", "Simple", "debugging variables"),
            ("NCCL_DEBUG", "INFO", "NCCL_DEBUG=WARN"),
            ("NCCL_DEBUG", "trace", "NCCL_DEBUG=WARN"),
        ];
        for (name, value, hint) in cases {
            let o = evaluate_env(&env(&[(name, value)]));
            assert_eq!(o.status, Status::Warn, "{name}={value}");
            assert!(
                o.summary.starts_with(&format!("{name}={value}")),
                "{}",
                o.summary
            );
            assert!(
                o.hint.as_deref().unwrap_or("").contains(hint),
                "{name}: {:?}",
                o.hint
            );
        }
        for (name, value) in [
            ("NCCL_P2P_DISABLE", "0"),
            ("NCCL_P2P_LEVEL", "NVL"),
            ("NCCL_SHM_DISABLE", "0"),
            ("NCCL_DEBUG", "WARN"),
            ("NCCL_IB_DISABLE", "1"),
        ] {
            let o = evaluate_env(&env(&[(name, value)]));
            assert_eq!(o.status, Status::Pass, "{name}={value}: {}", o.summary);
        }
    }

    #[test]
    fn env_ib_disabled_on_an_infiniband_host_warns() {
        let o = evaluate_env(&with_ib(env(&[("NCCL_IB_DISABLE", "1")])));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "NCCL_IB_DISABLE=1 while this host has InfiniBand/RoCE devices (mlx5_0, mlx5_1)"
        );
        assert!(o.hint.unwrap().contains("unset NCCL_IB_DISABLE"));
    }

    #[test]
    fn env_unknown_names_warn_with_the_closest_known_one() {
        let o = evaluate_env(&env(&[("NCCL_SOCKET_IFACE", "eth0")]));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "NCCL_SOCKET_IFACE: did you mean NCCL_SOCKET_IFNAME?"
        );
        assert!(o
            .hint
            .unwrap()
            .contains("NCCL ignores variables it does not know"));
        let o = evaluate_env(&env(&[("NCCL_IB_HCAS", "mlx5")]));
        assert_eq!(o.summary, "NCCL_IB_HCAS: did you mean NCCL_IB_HCA?");
        let o = evaluate_env(&env(&[("NCCL_FROBNICATE_EVERYTHING", "1")]));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "NCCL_FROBNICATE_EVERYTHING is not an NCCL variable"
        );
        // nccl-tests' own settings are not NCCL's, and not typos.
        assert_eq!(
            evaluate_env(&env(&[("NCCL_TESTS_MIN_BW", "400")])).status,
            Status::Pass
        );
    }

    #[test]
    fn env_names_other_tools_read_do_not_warn() {
        // NVIDIA's CUDA images set NCCL_VERSION; PyTorch's build reads NCCL_ROOT.
        let o = evaluate_env(&env(&[
            ("NCCL_VERSION", "2.27.3-1"),
            ("NCCL_ROOT", "/opt/nccl"),
        ]));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert_eq!(
            o.summary,
            "no NCCL_* variables NCCL reads are set; NCCL chooses its defaults; not read by \
             NCCL: NCCL_VERSION (NVIDIA's CUDA container images, recording the NCCL they \
             install), NCCL_ROOT (PyTorch's build)"
        );
        assert_eq!(o.facts["NCCL_VERSION"], "2.27.3-1");
        let o = evaluate_env(&env(&[("NCCL_HOME", "/opt/nccl"), ("NCCL_DEBUG", "WARN")]));
        assert_eq!(
            o.summary,
            "1 NCCL setting looks right: NCCL_DEBUG=WARN; not read by NCCL: NCCL_HOME \
             (nccl-tests' build)"
        );
        // Names Google Cloud's TCPX/TCPXO network plugins read.
        let o = evaluate_env(&env(&[
            ("NCCL_FASTRAK_IFNAME", "eth1,eth2"),
            ("NCCL_GPUDIRECTTCPX_CTRL_DEV", "eth0"),
        ]));
        assert_eq!(o.status, Status::Pass, "{}", o.summary);
        assert!(
            o.summary.ends_with(
                "not read by NCCL: NCCL_FASTRAK_IFNAME (Google Cloud's GPUDirect-TCPXO NCCL \
                 plugin), NCCL_GPUDIRECTTCPX_CTRL_DEV (Google Cloud's GPUDirect-TCPX NCCL plugin)"
            ),
            "{}",
            o.summary
        );
        // Still a typo check for names close to them.
        let o = evaluate_env(&env(&[("NCCL_VERSIN", "2.27.3")]));
        assert_eq!(o.status, Status::Warn);
    }

    #[test]
    fn env_pytorch_old_names_warn_with_the_new_name() {
        let o = evaluate_env(&env(&[("NCCL_ASYNC_ERROR_HANDLING", "1")]));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "NCCL_ASYNC_ERROR_HANDLING is PyTorch's old name for TORCH_NCCL_ASYNC_ERROR_HANDLING"
        );
        assert!(o
            .hint
            .unwrap()
            .contains("set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 instead"));
    }

    #[test]
    fn env_value_that_is_not_utf8_warns() {
        let mut facts = env(&[("NCCL_DEBUG", "WARN\u{fffd}")]);
        facts.not_utf8 = vec!["NCCL_DEBUG".to_string()];
        let o = evaluate_env(&facts);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(o.summary, "NCCL_DEBUG=\"WARN\u{fffd}\" is not UTF-8 text");
        assert!(o.hint.unwrap().contains("byte for byte"));
    }

    #[test]
    fn env_unknown_huge_name_is_shown_cut() {
        let name = format!("NCCL_{}", "X".repeat(100_000));
        let o = evaluate_env(&env(&[(name.as_str(), "1")]));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.ends_with("\"… is not an NCCL variable"),
            "{}",
            &o.summary[..100]
        );
        assert!(o.summary.len() < 200);
    }

    #[test]
    fn env_secret_values_are_redacted_everywhere() {
        let o = evaluate_env(&env(&[
            ("NCCL_IB_PASSWORD", "hunter2"),
            ("NCCL_DEBUG", "WARN"),
        ]));
        let all = serde_json::to_string(&o).unwrap();
        assert!(!all.contains("hunter2"), "{all}");
        assert_eq!(o.facts["NCCL_IB_PASSWORD"], "***");
        assert!(o
            .hint
            .unwrap()
            .contains("NCCL_IB_PASSWORD=*** has no effect"));
        // An InfiniBand partition key is not a secret.
        let o = evaluate_env(&env(&[("NCCL_IB_PKEY", "0x8001")]));
        assert_eq!(o.summary, "1 NCCL setting looks right: NCCL_IB_PKEY=0x8001");
    }

    #[test]
    fn env_worst_finding_leads_and_every_hint_is_kept() {
        let o = evaluate_env(&env(&[
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_SOCKET_IFNAME", "=ens9"),
            ("NCCL_SOCKET_IFACE", "eth0"),
        ]));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("NCCL_SOCKET_IFNAME==ens9 matches no network interface"),
            "{}",
            o.summary
        );
        assert!(
            o.summary.ends_with("; 2 more NCCL settings flagged"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert_eq!(hint.lines().count(), 3, "{hint}");
        assert!(hint.contains("NCCL_DEBUG=WARN"));
        assert!(hint.contains("rename it to NCCL_SOCKET_IFNAME"));
    }
}

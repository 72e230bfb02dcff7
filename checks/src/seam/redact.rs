//! `--redact`: a capture a user can post publicly. Host names, IP and MAC
//! addresses, serial and board part numbers, InfiniBand GUIDs and GPU/MIG
//! UUIDs are replaced by stable placeholders, the same value by the same
//! placeholder everywhere in the file, so a replay still matches a GPU's
//! UUID in `CUDA_VISIBLE_DEVICES` to NVML's and an address to the
//! machine's own. Secrets never enter a capture in the first place (see
//! [`super::env`]).
//!
//! Addresses are those the network probes and the environment gave (the
//! machine's own, MASTER_ADDR's, what a name resolved to), replaced
//! wherever they appear; a dotted version is never taken for one.
//! Placeholders keep each value's shape where a check parses it: IPv4
//! addresses become addresses of TEST-NET-1 (192.0.2.0/24, RFC 5737),
//! IPv6 ones keep their first 64 bits unless global (then 2001:db8::/32,
//! RFC 3849), MACs become locally administered ones (02:00:00:..).
//! Loopback and unspecified addresses say nothing about a machine and stay.
//!
//! User names are replaced like host names (`user-1`) where a path or a
//! variable carries them: the home folders in `HOME`, `PATH`,
//! `NCCL_DEBUG_FILE` and the training Python's path (`/home/alice/...`,
//! `/Users/alice/...`), and the values of `USER`, `LOGNAME` and
//! `SUDO_USER`. A name is replaced as a whole path segment, so a user
//! called `ml` leaves `/opt/mlx` alone; `root` names no person and stays.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::capture::Capture;

/// Environment variables whose values name hosts (torchrun's, SLURM's).
const HOST_VARIABLES: &[&str] = &[
    "MASTER_ADDR",
    "PET_MASTER_ADDR",
    "HOSTNAME",
    "SLURMD_NODENAME",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_STEP_NODELIST",
];

/// Environment variables whose values are a user's name.
const USER_VARIABLES: &[&str] = &["USER", "LOGNAME", "SUDO_USER"];

/// Accounts that name no person.
const SYSTEM_USERS: &[&str] = &["root", "nobody"];

/// A home folder in a path: `/home/NAME`, `/export/home/NAME`, `/Users/NAME`.
static HOME_DIR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"/(?:home|Users)/([^/\s:;,=\x22']+)").expect("valid regex"));

/// Object keys whose values identify one piece of hardware.
const SERIAL_KEYS: &[&str] = &["serial", "serial_number", "board_serial"];
const PART_KEYS: &[&str] = &["board_part_number", "part_number"];
const GUID_KEYS: &[&str] = &["node_guid", "sys_image_guid", "port_guid", "guid"];

static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
        .expect("valid regex")
});
static MAC: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}\b").expect("valid regex"));
static IPV4: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d{1,3}(\.\d{1,3}){3}\b").expect("valid regex"));
/// Candidates only: each is kept when it parses as an address and stands
/// alone (not inside a word such as `std::env`).
static IPV6: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[0-9a-fA-F:]*::?[0-9a-fA-F:]*").expect("valid regex"));

/// The placeholders handed out so far, per kind, so one value always gets
/// the same one.
#[derive(Default)]
struct Placeholders {
    given: BTreeMap<(&'static str, String), String>,
    counts: BTreeMap<&'static str, usize>,
}

impl Placeholders {
    fn get(&mut self, kind: &'static str, value: &str, make: impl Fn(usize) -> String) -> String {
        let key = (kind, value.to_string());
        if let Some(p) = self.given.get(&key) {
            return p.clone();
        }
        let n = self.counts.entry(kind).or_default();
        *n += 1;
        let placeholder = make(*n);
        self.given.insert(key, placeholder.clone());
        placeholder
    }
}

/// The capture with everything that identifies the machine replaced.
pub fn redact(capture: &Capture) -> Capture {
    let mut p = Placeholders::default();
    let hosts = host_names(capture);
    // The machine's own name and its short form are one host.
    let own = &capture.machine.hostname;
    let placeholder = p.get("host", own, |n| format!("host-{n}"));
    if let Some((short, _)) = own.split_once('.') {
        p.given.insert(("host", short.to_string()), placeholder);
    }
    for name in &hosts {
        p.get("host", name, |n| format!("host-{n}"));
    }
    let mut doc = serde_json::to_value(capture).unwrap_or(Value::Null);
    let known = Known {
        addrs: addresses(capture),
        users: user_names(capture, &doc),
        hosts,
    };
    walk(&mut doc, None, &known, &mut p);
    let mut out: Capture = serde_json::from_value(doc).unwrap_or_else(|_| capture.clone());
    out.redacted = true;
    out
}

/// What identifies the source machine, found before anything is replaced.
struct Known {
    /// Host names, longest first.
    hosts: Vec<String>,
    /// User names, each with the pattern of it as a whole path segment;
    /// longest first.
    users: Vec<(String, Regex)>,
    /// The IP addresses the network probes and the environment gave: only
    /// these are replaced, wherever they appear, so that a dotted version
    /// elsewhere (`cudnn 9.1.0.70`) is never taken for one.
    addrs: BTreeSet<String>,
}

/// The addresses in the answers of the network probes and the environment
/// (keys and values), loopback and unspecified left out.
fn addresses(capture: &Capture) -> BTreeSet<String> {
    let mut texts = Vec::new();
    for (key, value) in &capture.answers {
        if key.starts_with("net::") || key.starts_with("env(") {
            texts.push(key.clone());
            strings(value, &mut texts);
        }
    }
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut found = BTreeSet::new();
    for text in &texts {
        for m in IPV4.find_iter(text) {
            let ip = m.as_str().parse::<Ipv4Addr>();
            if ip.is_ok_and(|ip| !ip.is_loopback() && !ip.is_unspecified()) {
                found.insert(m.as_str().to_string());
            }
        }
        for m in IPV6.find_iter(text) {
            let alone = !word(text[..m.start()].chars().next_back())
                && !word(text[m.end()..].chars().next());
            let ip = m.as_str().parse::<Ipv6Addr>();
            if alone && ip.is_ok_and(|ip| !ip.is_loopback() && !ip.is_unspecified()) {
                found.insert(m.as_str().to_string());
            }
        }
    }
    found
}

/// The user names the capture shows: the values of the user variables,
/// the last folder of `HOME`, and every home folder's name in any string
/// (answers' keys included); system accounts left out.
fn user_names(capture: &Capture, doc: &Value) -> Vec<(String, Regex)> {
    let mut names: Vec<String> = Vec::new();
    for var in USER_VARIABLES {
        if let Some(Value::String(v)) = capture.answers.get(&super::key("env", var)) {
            names.push(v.trim().to_string());
        }
    }
    if let Some(Value::String(home)) = capture.answers.get(&super::key("env", "HOME")) {
        if let Some(last) = home.trim_end_matches('/').rsplit('/').next() {
            names.push(last.to_string());
        }
    }
    let mut texts = Vec::new();
    strings(doc, &mut texts);
    for text in &texts {
        names.extend(HOME_DIR.captures_iter(text).map(|c| c[1].to_string()));
    }
    names.retain(|n| n.len() >= 2 && !SYSTEM_USERS.contains(&n.as_str()));
    names.sort_by_key(|n| (std::cmp::Reverse(n.len()), n.clone()));
    names.dedup();
    names
        .into_iter()
        .filter_map(|n| {
            let segment = format!(r"/{}(/|[^\w.-]|$)", regex::escape(&n));
            Regex::new(&segment).ok().map(|r| (n, r))
        })
        .collect()
}

/// Every string in `v` (object keys too), into `out`.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Object(map) => map.iter().for_each(|(k, i)| {
            out.push(k.clone());
            strings(i, out);
        }),
        _ => {}
    }
}

/// The host names the capture knows: the machine's own (and its short
/// name) and those in the host variables, longest first.
fn host_names(capture: &Capture) -> Vec<String> {
    let mut names = vec![capture.machine.hostname.clone()];
    if let Some((short, _)) = capture.machine.hostname.split_once('.') {
        names.push(short.to_string());
    }
    for var in HOST_VARIABLES {
        if let Some(Value::String(v)) = capture.answers.get(&super::key("env", var)) {
            let host = v.rsplit_once('@').map_or(v.as_str(), |(_, h)| h);
            let host = host.split("://").last().unwrap_or(host);
            let host = host.split(':').next().unwrap_or(host);
            if host.parse::<Ipv4Addr>().is_err() {
                names.push(host.to_string());
            }
        }
    }
    names.retain(|n| n.len() >= 2 && n != "localhost");
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    names.dedup();
    names
}

fn walk(v: &mut Value, key: Option<&str>, known: &Known, p: &mut Placeholders) {
    match v {
        Value::String(s) => *s = redact_text(s, key, known, p),
        Value::Array(items) => items.iter_mut().for_each(|i| walk(i, key, known, p)),
        Value::Object(map) => {
            // Keys too: an answer's key holds its arguments (`net::resolve(HOST)`).
            let entries = std::mem::take(map);
            for (k, mut item) in entries {
                walk(&mut item, Some(&k), known, p);
                map.insert(redact_text(&k, None, known, p), item);
            }
        }
        _ => {}
    }
}

fn redact_text(s: &str, key: Option<&str>, known: &Known, p: &mut Placeholders) -> String {
    let key = key.unwrap_or("").to_ascii_lowercase();
    if !s.is_empty() {
        if SERIAL_KEYS.contains(&key.as_str()) {
            return p.get("serial", s, |n| format!("SERIAL-REDACTED-{n}"));
        }
        if PART_KEYS.contains(&key.as_str()) {
            return p.get("part", s, |n| format!("PART-REDACTED-{n}"));
        }
        if GUID_KEYS.contains(&key.as_str()) {
            return p.get("guid", s, |n| format!("{n:016x}"));
        }
    }
    if let Some((user, _)) = known.users.iter().find(|(u, _)| u == s.trim()) {
        return p.get("user", user, |n| format!("user-{n}"));
    }
    let mut out = s.to_string();
    for (user, segment) in &known.users {
        if segment.is_match(&out) {
            let placeholder = p.get("user", user, |n| format!("user-{n}"));
            out = segment
                .replace_all(&out, format!("/{placeholder}${{1}}").as_str())
                .into_owned();
        }
    }
    for host in &known.hosts {
        // As a whole word only: a host called `vm` leaves `/dev/nvme0` alone.
        let Ok(word) = Regex::new(&format!(r"\b{}\b", regex::escape(host))) else {
            continue;
        };
        if word.is_match(&out) {
            let placeholder = p.get("host", host, |n| format!("host-{n}"));
            out = word.replace_all(&out, placeholder.as_str()).into_owned();
        }
    }
    let out = UUID.replace_all(&out, |c: &regex::Captures| {
        let kind = if &c[1] == "GPU" {
            "gpu-uuid"
        } else {
            "mig-uuid"
        };
        let prefix = c[1].to_string();
        p.get(kind, &c[0], |n| format!("{prefix}-REDACTED-{n}"))
    });
    let out = MAC.replace_all(&out, |c: &regex::Captures| {
        p.get("mac", &c[0].to_ascii_lowercase(), |n| {
            format!("02:00:00:00:{:02x}:{:02x}", n / 256, n % 256)
        })
    });
    // A version that happens to have four parts (9.1.0.70) is no address.
    if key.contains("version") {
        return out.into_owned();
    }
    let out = IPV4.replace_all(&out, |c: &regex::Captures| match c[0].parse::<Ipv4Addr>() {
        Ok(_) if known.addrs.contains(&c[0]) => {
            p.get("ipv4", &c[0], |n| format!("192.0.2.{}", n.min(254)))
        }
        _ => c[0].to_string(),
    });
    let text = out.into_owned();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let out = IPV6.replace_all(&text, |c: &regex::Captures| {
        let m = c.get(0).expect("whole match");
        let alone =
            !word(text[..m.start()].chars().next_back()) && !word(text[m.end()..].chars().next());
        match m.as_str().parse::<Ipv6Addr>() {
            Ok(ip) if alone && known.addrs.contains(m.as_str()) => {
                p.get("ipv6", m.as_str(), |n| ipv6_placeholder(ip, n))
            }
            _ => m.as_str().to_string(),
        }
    });
    out.into_owned()
}

/// `ip` with its interface identifier (the last 64 bits, often derived
/// from the MAC) replaced by `n`, and a global prefix by 2001:db8::.
fn ipv6_placeholder(ip: Ipv6Addr, n: usize) -> String {
    if ip.to_ipv4_mapped().is_some() {
        return format!("::ffff:192.0.2.{}", n.min(254));
    }
    let seg = ip.segments();
    let global = seg[0] & 0xe000 == 0x2000;
    let prefix = if global {
        [0x2001, 0xdb8, 0, 0]
    } else {
        [seg[0], seg[1], seg[2], seg[3]]
    };
    let n = n as u64;
    Ipv6Addr::new(
        prefix[0],
        prefix[1],
        prefix[2],
        prefix[3],
        0,
        0,
        (n >> 16) as u16,
        n as u16,
    )
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::capture::{Machine, CAPTURE_VERSION};
    use crate::seam::Answers;

    fn capture(answers: Answers) -> Capture {
        Capture {
            capture_version: CAPTURE_VERSION,
            gpucheck_version: "0.1.0".into(),
            profile: crate::Profile::Quick,
            captured_at_unix: 0,
            redacted: false,
            machine: Machine {
                hostname: "gpu-node-17.example.org".into(),
                gpu_uuids: vec!["GPU-0a1b2c3d-1111-2222-3333-444455556666".into()],
                ..Machine::default()
            },
            options: crate::Options::default(),
            answers,
        }
    }

    #[test]
    fn user_names_in_home_folders_and_user_variables_become_placeholders() {
        let c = capture(Answers::from([
            ("env(HOME)".to_string(), Value::from("/home/alice")),
            ("env(USER)".to_string(), Value::from("alice")),
            (
                "env(NCCL_DEBUG_FILE)".to_string(),
                Value::from("/home/alice/nccl.%h.log"),
            ),
            (
                "env(PATH)".to_string(),
                Value::from("/home/alice/.local/bin:/Users/bob/bin:/usr/bin:/root/bin"),
            ),
            (
                "python::python_env(/home/alice/venv/bin/python)".to_string(),
                serde_json::json!({"python": "/home/alice/venv/bin/python",
                    "site": "/opt/alice-tools/lib", "conf": "/root/.nccl.conf"}),
            ),
        ]));
        let r = redact(&c);
        let text = r.to_text();
        for name in ["/alice/", "/alice\"", "\"alice\"", "/bob/"] {
            assert!(!text.contains(name), "{name} left in:\n{text}");
        }
        assert_eq!(r.answers["env(HOME)"], "/home/user-1");
        assert_eq!(r.answers["env(USER)"], "user-1");
        assert_eq!(
            r.answers["env(NCCL_DEBUG_FILE)"],
            "/home/user-1/nccl.%h.log"
        );
        assert_eq!(
            r.answers["env(PATH)"],
            "/home/user-1/.local/bin:/Users/user-2/bin:/usr/bin:/root/bin"
        );
        // The key is redacted alike, so a replay still finds the answer.
        let python = &r.answers["python::python_env(/home/user-1/venv/bin/python)"];
        assert_eq!(python["python"], "/home/user-1/venv/bin/python");
        assert_eq!(
            python["site"], "/opt/alice-tools/lib",
            "whole segments only"
        );
        assert_eq!(python["conf"], "/root/.nccl.conf");
    }

    #[test]
    fn what_only_looks_like_an_address_is_left_alone() {
        let text = "bus 00000000:18:00.0, driver 570.86.15, cudnn 9.1.0.70, std::env::var, \
                    at 12:34:56, 127.0.0.1 and ::1";
        let c = capture(Answers::from([("t".to_string(), Value::from(text))]));
        assert_eq!(redact(&c).answers["t"], text);
    }

    #[test]
    fn identifying_values_become_stable_placeholders() {
        let c = capture(Answers::from([
            (
                "env(MASTER_ADDR)".to_string(),
                Value::from("trainer-master"),
            ),
            (
                "env(CUDA_VISIBLE_DEVICES)".to_string(),
                Value::from("GPU-0a1b2c3d-1111-2222-3333-444455556666"),
            ),
            (
                "net::local_addresses".to_string(),
                serde_json::json!(["127.0.0.1", "10.4.7.21", "fe80::a00:27ff:fe4e:66a1", "::1"]),
            ),
            (
                "nic".to_string(),
                serde_json::json!({"mac": "0A:00:27:4E:66:A1", "serial": "1652221012345",
                  "board_part_number": "692-2G506-0200-006", "node_guid": "9803:9b03:00a1:b2c3",
                  "driver_version": "9.1.0.70", "log": "gpu-node-17 said hi from 10.4.7.21",
                  "disk": "/dev/gpu-node-170"}),
            ),
        ]));
        let r = redact(&c);
        let text = r.to_text();
        for secret in [
            "gpu-node-17 ",
            "gpu-node-17.",
            "trainer-master",
            "10.4.7.21",
            "0a1b2c3d",
            "0A:00:27",
            "a00:27ff:fe4e:66a1",
            "1652221012345",
            "692-2G506",
            "9803:9b03",
        ] {
            assert!(!text.contains(secret), "{secret} left in:\n{text}");
        }
        assert!(r.redacted);
        assert_eq!(r.machine.hostname, "host-1");
        assert_eq!(r.machine.gpu_uuids, ["GPU-REDACTED-1"]);
        assert_eq!(r.answers["env(CUDA_VISIBLE_DEVICES)"], "GPU-REDACTED-1");
        let addrs = &r.answers["net::local_addresses"];
        assert_eq!(addrs[0], "127.0.0.1");
        assert_eq!(addrs[1], "192.0.2.1");
        assert_eq!(addrs[2], "fe80::1");
        assert_eq!(addrs[3], "::1");
        let nic = &r.answers["nic"];
        assert_eq!(nic["mac"], "02:00:00:00:00:01");
        assert_eq!(nic["serial"], "SERIAL-REDACTED-1");
        assert_eq!(nic["driver_version"], "9.1.0.70");
        assert_eq!(nic["log"], "host-1 said hi from 192.0.2.1");
        assert_eq!(
            nic["disk"], "/dev/gpu-node-170",
            "only whole host names are replaced"
        );
    }
}

//! The env checks: environment variables that silently change what a DDP job
//! sees — which GPUs CUDA enumerates (CUDA_VISIBLE_DEVICES and friends) and
//! the rank layout torchrun hands each process (RANK, WORLD_SIZE, ...).
//!
//! [`parse_cuda_visible_devices`] reads CUDA_VISIBLE_DEVICES the way the CUDA
//! driver does, so a later check can map each token onto the GPUs NVML
//! reports ("cuda:0 -> GPU 2").

use crate::net::parse_master_port;
use crate::probe::host::env_lossy;
use crate::{Check, Context, Outcome, Profile, Status};

/// Longest value echoed into a summary before it is cut.
const ECHO_MAX_CHARS: usize = 80;

/// An environment value as a summary shows it: quoted, with control
/// characters and quotes escaped, cut at 80 characters.
pub fn quote_value(v: &str) -> String {
    if v.chars().count() > ECHO_MAX_CHARS {
        let cut: String = v.chars().take(ECHO_MAX_CHARS).collect();
        format!("{:?}…", cut)
    } else {
        format!("{v:?}")
    }
}

// ---------------------------------------------------------------- parsing CUDA_VISIBLE_DEVICES

/// One entry of CUDA_VISIBLE_DEVICES that CUDA accepts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceToken {
    /// A device ordinal, counted in CUDA's enumeration order (nvidia-smi's
    /// order only with CUDA_DEVICE_ORDER=PCI_BUS_ID).
    Index(u32),
    /// `GPU-<uuid>` as `nvidia-smi -L` prints it, or a unique prefix of it.
    Uuid(String),
    /// `MIG-<uuid>` (R470+) or `MIG-GPU-<uuid>/<gi>/<ci>` (older drivers).
    Mig(String),
}

impl std::fmt::Display for DeviceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceToken::Index(i) => write!(f, "{i}"),
            DeviceToken::Uuid(u) | DeviceToken::Mig(u) => f.write_str(u),
        }
    }
}

/// The entry at which CUDA stopped reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidToken {
    /// 0-based position in the comma-separated list.
    pub position: usize,
    pub raw: String,
    /// Why CUDA cannot use it.
    pub reason: String,
}

/// CUDA_VISIBLE_DEVICES as the CUDA driver reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VisibleDevices {
    /// The entries CUDA accepted, in order, up to the first invalid one.
    pub tokens: Vec<DeviceToken>,
    /// The first entry CUDA could not read: it and every later entry are hidden.
    pub invalid: Option<InvalidToken>,
    /// The raw entries after the invalid one, which CUDA silently ignores.
    pub ignored: Vec<String>,
    /// An entry naming a device a second time; CUDA then exposes no device.
    pub duplicate: Option<String>,
    /// Index entries with text after the number, which CUDA ignores
    /// ("1gpu" is read as 1): (raw entry, index).
    pub trailing_text: Vec<(String, u32)>,
}

impl VisibleDevices {
    /// What CUDA will enumerate, cuda:0 first; empty when a duplicate hides
    /// everything.
    pub fn effective(&self) -> &[DeviceToken] {
        if self.duplicate.is_some() {
            &[]
        } else {
            &self.tokens
        }
    }

    /// True when the accepted entries mix indices with UUIDs.
    pub fn mixes_kinds(&self) -> bool {
        let idx = self
            .tokens
            .iter()
            .any(|t| matches!(t, DeviceToken::Index(_)));
        idx && self
            .tokens
            .iter()
            .any(|t| !matches!(t, DeviceToken::Index(_)))
    }

    /// True when any accepted entry is an index (its meaning then depends on
    /// CUDA_DEVICE_ORDER).
    pub fn names_indices(&self) -> bool {
        self.effective()
            .iter()
            .any(|t| matches!(t, DeviceToken::Index(_)))
    }
}

/// Parse a CUDA_VISIBLE_DEVICES value the way the CUDA driver does.
///
/// Sources: the CUDA Programming Guide, "CUDA Environment Variables"
/// (comma-separated indices or `GPU-`/`MIG-` UUIDs, unique UUID prefixes
/// allowed; an empty value hides every GPU; "0,2,-1,1" shows 0 and 2 because
/// the invalid -1 ends the list), and PyTorch's emulation of the driver in
/// torch/cuda/__init__.py `_parse_visible_devices`, tested against real
/// drivers (test_cuda.py `test_env_var_parsing`): an index is read like
/// strtoul, so leading whitespace and a sign are accepted and text after the
/// digits is ignored ("1gpu2,2ampere" is 1,2; "-0" is 0); an empty entry, a
/// negative number or any other text ends the list; naming a device twice
/// leaves no device at all ("0,1,2,1" is empty).
///
/// Where the two sources are silent this parser decides: `GPU-`/`MIG-` entries
/// are taken verbatim (no whitespace trimmed, as PyTorch does) and must be
/// hex digits and dashes after the prefix, since nothing else can prefix a
/// real UUID; index and UUID entries may be mixed, as the CUDA guide lists
/// both as "GPU identifiers" (the caller warns, because PyTorch does not).
pub fn parse_cuda_visible_devices(value: &str) -> VisibleDevices {
    let mut out = VisibleDevices::default();
    let entries: Vec<&str> = value.split(',').collect();
    for (position, raw) in entries.iter().enumerate() {
        let token = match parse_entry(raw) {
            Ok((token, trailing)) => {
                if let (DeviceToken::Index(i), true) = (&token, trailing) {
                    out.trailing_text.push((raw.to_string(), *i));
                }
                token
            }
            Err(reason) => {
                out.invalid = Some(InvalidToken {
                    position,
                    raw: raw.to_string(),
                    reason,
                });
                out.ignored = entries[position + 1..]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                break;
            }
        };
        if out.tokens.contains(&token) {
            out.duplicate = Some(raw.to_string());
            break;
        }
        out.tokens.push(token);
    }
    out
}

/// One entry: the token and whether an index had text after its digits.
fn parse_entry(raw: &str) -> Result<(DeviceToken, bool), String> {
    if let Some(body) = raw.strip_prefix("GPU-") {
        if !is_uuid_text(body) {
            return Err("not a GPU UUID: only hex digits and dashes follow GPU-".into());
        }
        return Ok((DeviceToken::Uuid(raw.to_string()), false));
    }
    if let Some(body) = raw.strip_prefix("MIG-") {
        if !is_mig_body(body) {
            return Err("not a MIG UUID: expected MIG-<uuid> or MIG-GPU-<uuid>/<gi>/<ci>".into());
        }
        return Ok((DeviceToken::Mig(raw.to_string()), false));
    }
    // strtoul: leading whitespace, an optional sign, digits; the rest ignored.
    let s = raw.trim_start();
    let (negative, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits_len = unsigned.bytes().take_while(|b| b.is_ascii_digit()).count();
    if digits_len == 0 {
        let t = raw.trim();
        return Err(if t.is_empty() {
            "an empty entry".into()
        } else if t.starts_with("GPU-") || t.starts_with("MIG-") {
            "a UUID with spaces around it".into()
        } else if t.to_ascii_uppercase().starts_with("GPU-")
            || t.to_ascii_uppercase().starts_with("MIG-")
        {
            "the GPU-/MIG- prefix must be upper case".into()
        } else {
            "not an index, GPU-<uuid> or MIG-<uuid>".into()
        });
    }
    let digits = &unsigned[..digits_len];
    let trailing = !unsigned[digits_len..].trim().is_empty();
    let value: u64 = digits.parse().unwrap_or(u64::MAX);
    if negative && value != 0 {
        return Err("a negative index, which ends the list".into());
    }
    match u32::try_from(value) {
        Ok(i) => Ok((DeviceToken::Index(i), trailing)),
        Err(_) => Err("an index too large to name a GPU".into()),
    }
}

fn is_uuid_text(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

fn is_mig_body(body: &str) -> bool {
    if body.is_empty() {
        return false;
    }
    match body.strip_prefix("GPU-") {
        Some(rest) => {
            let mut parts = rest.split('/');
            let uuid = parts.next().unwrap_or("");
            let ids: Vec<&str> = parts.collect();
            !uuid.is_empty()
                && is_uuid_text(uuid)
                && ids.len() == 2
                && ids
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        }
        None => is_uuid_text(body),
    }
}

/// A corrected CUDA_VISIBLE_DEVICES: every entry that parses on its own, in
/// order, each device once. `None` when nothing usable is left.
pub fn repaired_visible_devices(value: &str) -> Option<String> {
    let mut kept: Vec<DeviceToken> = Vec::new();
    for raw in value.split(',') {
        if let Ok((token, _)) = parse_entry(raw) {
            if !kept.contains(&token) {
                kept.push(token);
            }
        }
    }
    if kept.is_empty() {
        return None;
    }
    Some(
        kept.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(","),
    )
}

// ---------------------------------------------------------------- env.cuda_visible_devices

pub struct CudaVisibleDevices;

/// What `env.cuda_visible_devices` judges: the variables as set (lossy).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VisibilityFacts {
    pub cuda_visible_devices: Option<String>,
    pub nvidia_visible_devices: Option<String>,
    pub cuda_device_order: Option<String>,
}

impl Check for CudaVisibleDevices {
    fn id(&self) -> &'static str {
        "env.cuda_visible_devices"
    }
    fn title(&self) -> &'static str {
        "CUDA_VISIBLE_DEVICES"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Parses CUDA_VISIBLE_DEVICES exactly as the CUDA driver does and reports which GPUs a CUDA process will see, in which order, and what the value silently hides.\n\n\
         The variable is a comma list of indices, GPU-<uuid> (or a unique prefix) and MIG-<uuid> \
         entries. CUDA stops reading at the first entry it cannot use and hides that entry and \
         everything after it without any message: `0,1,foo,2` gives two GPUs, not three. An \
         empty value or `-1` hides every GPU, and naming a GPU twice (`0,0`) leaves none at all. \
         DDP then fails with 'invalid device ordinal' or runs on fewer GPUs than planned. An \
         index with text after it (`1gpu`) is read as the number.\n\n\
         Indices count GPUs in CUDA's enumeration order, which is fastest-first unless \
         CUDA_DEVICE_ORDER=PCI_BUS_ID; only then do they match nvidia-smi's numbering on a \
         machine with mixed GPU models. gpucheck warns when the list names indices and the order \
         is not PCI_BUS_ID. Inside containers, NVIDIA_VISIBLE_DEVICES tells the NVIDIA runtime \
         which GPUs to mount; `void` or `none` mounts none.\n\n\
         Fix: list each GPU once, separated by commas only (`CUDA_VISIBLE_DEVICES=0,1,2,3`), \
         prefer UUIDs from `nvidia-smi -L` for stable selection, `export \
         CUDA_DEVICE_ORDER=PCI_BUS_ID`, or unset the variable to use every GPU."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        evaluate_visibility(&VisibilityFacts {
            cuda_visible_devices: env_lossy("CUDA_VISIBLE_DEVICES"),
            nvidia_visible_devices: env_lossy("NVIDIA_VISIBLE_DEVICES"),
            cuda_device_order: env_lossy("CUDA_DEVICE_ORDER"),
        })
    }
}

/// One thing the visibility check found.
struct Finding {
    status: Status,
    text: String,
    hint: Option<String>,
}

impl Finding {
    fn note(text: impl Into<String>) -> Self {
        Finding {
            status: Status::Pass,
            text: text.into(),
            hint: None,
        }
    }
    fn new(status: Status, text: impl Into<String>, hint: impl Into<String>) -> Self {
        Finding {
            status,
            text: text.into(),
            hint: Some(hint.into()),
        }
    }
}

/// "cuda:0 -> 2, cuda:1 -> 0".
fn mapping(tokens: &[DeviceToken]) -> String {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| format!("cuda:{i} -> {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Judge the GPU visibility variables.
pub fn evaluate_visibility(f: &VisibilityFacts) -> Outcome {
    let mut findings: Vec<Finding> = Vec::new();
    let mut parsed: Option<VisibleDevices> = None;
    match f.cuda_visible_devices.as_deref() {
        None => findings.push(Finding::note(
            "CUDA_VISIBLE_DEVICES unset: all GPUs visible",
        )),
        Some(value) => {
            let p = parse_cuda_visible_devices(value);
            findings.extend(judge_cuda_visible_devices(value, &p));
            parsed = Some(p);
        }
    }

    match f.nvidia_visible_devices.as_deref().map(str::trim) {
        Some(v @ ("void" | "")) => findings.push(Finding::new(
            Status::Warn,
            format!(
                "NVIDIA_VISIBLE_DEVICES={}: the NVIDIA container runtime mounts no GPU (and no driver) into the container",
                quote_value(v)
            ),
            "start the container with `--gpus all` (or `-e NVIDIA_VISIBLE_DEVICES=all`)",
        )),
        Some("none") => findings.push(Finding::new(
            Status::Warn,
            "NVIDIA_VISIBLE_DEVICES=\"none\": the NVIDIA container runtime mounts the driver but no GPU",
            "start the container with `--gpus all` (or `-e NVIDIA_VISIBLE_DEVICES=all`)",
        )),
        _ => {}
    }

    let order = f.cuda_device_order.as_deref().map(str::trim);
    let indices = parsed.as_ref().is_some_and(|p| p.names_indices());
    match order {
        Some("PCI_BUS_ID") => {}
        Some(o) if o != "FASTEST_FIRST" => findings.push(Finding::new(
            Status::Warn,
            format!(
                "CUDA_DEVICE_ORDER={} is not a value CUDA knows (PCI_BUS_ID or FASTEST_FIRST)",
                quote_value(o)
            ),
            "`export CUDA_DEVICE_ORDER=PCI_BUS_ID`",
        )),
        _ if indices => findings.push(Finding::new(
            Status::Warn,
            format!(
                "CUDA_DEVICE_ORDER is {}, so the indices count GPUs fastest-first and may not be nvidia-smi's GPUs on a machine with mixed models",
                order.map(quote_value).unwrap_or_else(|| "unset (FASTEST_FIRST)".into())
            ),
            "`export CUDA_DEVICE_ORDER=PCI_BUS_ID`, or name the GPUs by UUID (`nvidia-smi -L`)",
        )),
        _ => {}
    }

    let worst = findings
        .iter()
        .map(|x| x.status)
        .fold(Status::Pass, Status::worst);
    // The summary carries the findings of the worst verdict; lesser warnings
    // keep their hint and are listed as a fact, so a failure stays readable.
    let summary = findings
        .iter()
        .filter(|x| x.status == worst)
        .map(|x| x.text.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let lesser = findings
        .iter()
        .filter(|x| x.status != worst && x.status != Status::Pass)
        .map(|x| x.text.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let hint = findings
        .iter()
        .filter(|x| x.status != Status::Pass)
        .filter_map(|x| x.hint.as_deref())
        .collect::<Vec<_>>()
        .join("; ");
    let mut o = Outcome::new(worst, summary).with_hint(hint);
    if !lesser.is_empty() {
        o = o.with_fact("also", lesser);
    }
    if let Some(p) = &parsed {
        o = o
            .with_metric("visible_devices", p.effective().len() as f64, "count")
            .with_fact("cuda_visible_effective", mapping(p.effective()));
    }
    for (key, value) in [
        ("cuda_visible_devices", &f.cuda_visible_devices),
        ("nvidia_visible_devices", &f.nvidia_visible_devices),
        ("cuda_device_order", &f.cuda_device_order),
    ] {
        o = o.with_fact(
            key,
            value
                .as_deref()
                .map(quote_value)
                .unwrap_or_else(|| "unset".into()),
        );
    }
    o
}

fn judge_cuda_visible_devices(value: &str, p: &VisibleDevices) -> Vec<Finding> {
    let shown = quote_value(value);
    let fix = |what: &str| match repaired_visible_devices(value) {
        Some(r) => {
            format!("{what}, e.g. `export CUDA_VISIBLE_DEVICES={r}`, or unset it to use every GPU")
        }
        None => format!("{what}, or `unset CUDA_VISIBLE_DEVICES` to use every GPU"),
    };
    if value.trim().is_empty() {
        return vec![Finding::new(
            Status::Fail,
            format!("CUDA_VISIBLE_DEVICES is set but empty ({shown}): CUDA sees no GPU"),
            "`unset CUDA_VISIBLE_DEVICES`, or list the GPUs: `export CUDA_VISIBLE_DEVICES=0,1`",
        )];
    }
    if let Some(dup) = &p.duplicate {
        return vec![Finding::new(
            Status::Fail,
            format!(
                "CUDA_VISIBLE_DEVICES={shown} names {} twice: CUDA then sees no GPU at all",
                quote_value(dup)
            ),
            fix("list each GPU once"),
        )];
    }
    let mut out = Vec::new();
    match &p.invalid {
        Some(bad) if bad.position == 0 => {
            let text = if value.trim() == "-1" {
                "CUDA_VISIBLE_DEVICES=\"-1\" hides every GPU".to_string()
            } else {
                format!(
                    "CUDA_VISIBLE_DEVICES={shown}: the first entry is {}, so CUDA sees no GPU",
                    bad.reason
                )
            };
            return vec![Finding::new(
                Status::Fail,
                text,
                fix("list the GPUs to train on"),
            )];
        }
        Some(bad) if bad.raw.trim().is_empty() && p.ignored.is_empty() => {
            out.push(Finding::new(
                Status::Warn,
                format!(
                    "CUDA_VISIBLE_DEVICES={shown} ends with a comma; visible: {}",
                    mapping(&p.tokens)
                ),
                fix("remove the trailing comma"),
            ));
        }
        Some(bad) => {
            let hidden = if p.ignored.is_empty() {
                String::new()
            } else {
                format!(
                    " and everything after it ({})",
                    p.ignored
                        .iter()
                        .map(|s| quote_value(s))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            out.push(Finding::new(
                Status::Fail,
                format!(
                    "CUDA_VISIBLE_DEVICES={shown}: entry {} ({}) is {}; CUDA silently hides it{hidden}; visible: {}",
                    bad.position + 1,
                    quote_value(&bad.raw),
                    bad.reason,
                    mapping(&p.tokens)
                ),
                fix(&format!("fix or remove {}", quote_value(&bad.raw))),
            ));
        }
        None => out.push(Finding::note(format!(
            "CUDA_VISIBLE_DEVICES={shown}: {}",
            mapping(&p.tokens)
        ))),
    }
    for (raw, i) in &p.trailing_text {
        out.push(Finding::new(
            Status::Warn,
            format!(
                "entry {} is read as {i} (CUDA ignores text after the number)",
                quote_value(raw)
            ),
            fix("write plain numbers"),
        ));
    }
    if p.mixes_kinds() {
        out.push(Finding::new(
            Status::Warn,
            "the list mixes indices and UUIDs: PyTorch's own parser (used by torch.cuda.device_count before CUDA starts) reads only entries of the first kind, so it can disagree with CUDA",
            "use one kind, preferably UUIDs from `nvidia-smi -L`",
        ));
    }
    if p.tokens
        .iter()
        .any(|t| matches!(t, DeviceToken::Uuid(u) | DeviceToken::Mig(u) if u.len() == 4))
    {
        out.push(Finding::new(
            Status::Warn,
            "an entry is a bare GPU-/MIG- prefix, which matches every GPU and is ambiguous on a machine with more than one",
            "write the UUID (or enough of it to be unique) from `nvidia-smi -L`",
        ));
    }
    out
}

// ---------------------------------------------------------------- env.torchrun

pub struct Torchrun;

/// The launcher variables as set (lossy); `None` when unset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchFacts {
    pub rank: Option<String>,
    pub world_size: Option<String>,
    pub local_rank: Option<String>,
    pub local_world_size: Option<String>,
    pub master_addr: Option<String>,
    pub master_port: Option<String>,
}

impl Check for Torchrun {
    fn id(&self) -> &'static str {
        "env.torchrun"
    }
    fn title(&self) -> &'static str {
        "torchrun environment"
    }
    fn profile(&self) -> Profile {
        Profile::Quick
    }
    fn explain(&self) -> &'static str {
        "Checks that the launcher variables RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, where set, are valid and agree with each other.\n\n\
         torchrun hands every worker these variables and `init_process_group(init_method=\"env://\")` \
         reads them. A rank outside the world, a local world larger than the whole world, or \
         RANK without WORLD_SIZE makes the job hang at rendezvous or crash with a ValueError \
         far from the cause. Stale values left in a shell from an earlier run do the same to the \
         next launch.\n\n\
         The check is skipped when none of them is set (gpucheck was not started by torchrun). \
         It fails on values that are not integers in range (RANK and LOCAL_RANK from 0, \
         WORLD_SIZE and LOCAL_WORLD_SIZE from 1, MASTER_PORT 1-65535), on RANK >= WORLD_SIZE, \
         LOCAL_RANK >= LOCAL_WORLD_SIZE or LOCAL_WORLD_SIZE > WORLD_SIZE, and on RANK without \
         WORLD_SIZE or the reverse; it warns on LOCAL_RANK without LOCAL_WORLD_SIZE and on a \
         rank layout without MASTER_ADDR/MASTER_PORT.\n\n\
         Fix: launch with torchrun, which sets all of them consistently, or correct the job \
         script that exports them; clear stale ones with `unset RANK WORLD_SIZE LOCAL_RANK \
         LOCAL_WORLD_SIZE`."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        evaluate_launch(&LaunchFacts {
            rank: env_lossy("RANK"),
            world_size: env_lossy("WORLD_SIZE"),
            local_rank: env_lossy("LOCAL_RANK"),
            local_world_size: env_lossy("LOCAL_WORLD_SIZE"),
            master_addr: env_lossy("MASTER_ADDR"),
            master_port: env_lossy("MASTER_PORT"),
        })
    }
}

/// Parse a launcher integer (Python's int(): surrounding whitespace allowed)
/// that must be at least `min`.
fn launch_int(name: &str, raw: &str, min: u64) -> Result<u64, String> {
    match raw.trim().parse::<u64>() {
        Ok(v) if v >= min => Ok(v),
        _ => Err(format!(
            "{name}={} is not an integer >= {min}",
            quote_value(raw)
        )),
    }
}

/// Judge the launcher variables.
pub fn evaluate_launch(f: &LaunchFacts) -> Outcome {
    let vars = [
        ("RANK", &f.rank),
        ("WORLD_SIZE", &f.world_size),
        ("LOCAL_RANK", &f.local_rank),
        ("LOCAL_WORLD_SIZE", &f.local_world_size),
        ("MASTER_ADDR", &f.master_addr),
        ("MASTER_PORT", &f.master_port),
    ];
    if vars.iter().all(|(_, v)| v.is_none()) {
        return Outcome::skip(
            "not launched by torchrun: none of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, \
             MASTER_ADDR, MASTER_PORT is set",
        );
    }
    let mut fails: Vec<String> = Vec::new();
    let mut warns: Vec<String> = Vec::new();
    let mut int = |name: &str, v: &Option<String>, min: u64| -> Option<u64> {
        let raw = v.as_deref()?;
        launch_int(name, raw, min).map_err(|e| fails.push(e)).ok()
    };
    let rank = int("RANK", &f.rank, 0);
    let world = int("WORLD_SIZE", &f.world_size, 1);
    let local_rank = int("LOCAL_RANK", &f.local_rank, 0);
    let local_world = int("LOCAL_WORLD_SIZE", &f.local_world_size, 1);
    if let Some(raw) = f.master_port.as_deref() {
        if let Err(e) = parse_master_port(raw) {
            fails.push(e);
        }
    }
    if let Some(addr) = f.master_addr.as_deref() {
        if addr.trim().is_empty() {
            fails.push("MASTER_ADDR is set but empty".into());
        }
    }

    match (&f.rank, &f.world_size) {
        (Some(_), None) => {
            fails.push("RANK is set but WORLD_SIZE is not: env:// initialisation needs both".into())
        }
        (None, Some(_)) => {
            fails.push("WORLD_SIZE is set but RANK is not: env:// initialisation needs both".into())
        }
        _ => {}
    }
    if let (Some(r), Some(w)) = (rank, world) {
        if r >= w {
            fails.push(format!(
                "RANK={r} is not below WORLD_SIZE={w} (ranks run 0..{})",
                w - 1
            ));
        }
    }
    if let (Some(lr), Some(lw)) = (local_rank, local_world) {
        if lr >= lw {
            fails.push(format!(
                "LOCAL_RANK={lr} is not below LOCAL_WORLD_SIZE={lw} (local ranks run 0..{})",
                lw - 1
            ));
        }
    }
    if let (Some(lw), Some(w)) = (local_world, world) {
        if lw > w {
            fails.push(format!(
                "LOCAL_WORLD_SIZE={lw} is larger than WORLD_SIZE={w}"
            ));
        }
    }
    match (&f.local_rank, &f.local_world_size) {
        (Some(_), None) => warns.push("LOCAL_RANK is set but LOCAL_WORLD_SIZE is not".into()),
        (None, Some(_)) => warns.push("LOCAL_WORLD_SIZE is set but LOCAL_RANK is not".into()),
        _ => {}
    }
    let ranked = f.rank.is_some() || f.world_size.is_some();
    if !ranked && f.local_rank.is_some() {
        warns.push("LOCAL_RANK is set without RANK and WORLD_SIZE".into());
    }
    if ranked {
        let missing: Vec<&str> = [
            ("MASTER_ADDR", &f.master_addr),
            ("MASTER_PORT", &f.master_port),
        ]
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(n, _)| *n)
        .collect();
        if !missing.is_empty() {
            warns.push(format!(
                "{} unset: env:// initialisation needs {}",
                missing.join(" and "),
                if missing.len() == 1 { "it" } else { "them" }
            ));
        }
    }

    let hint = "these come from the launcher: launch with torchrun (it sets all of them \
                consistently) or fix the job script that exports them; clear stale ones with \
                `unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE`";
    if !fails.is_empty() {
        fails.extend(warns);
        return Outcome::fail(fails.join("; "), hint);
    }
    if !warns.is_empty() {
        return Outcome::warn(warns.join("; "), hint);
    }

    let mut parts = Vec::new();
    if let (Some(r), Some(w)) = (rank, world) {
        parts.push(format!("rank {r} of {w}"));
    }
    if let (Some(lr), Some(lw)) = (local_rank, local_world) {
        parts.push(format!("local rank {lr} of {lw}"));
    }
    let master = match (f.master_addr.as_deref(), f.master_port.as_deref()) {
        (Some(a), Some(p)) => Some(format!(
            "master {}:{}",
            plain_or_quoted(a),
            plain_or_quoted(p)
        )),
        (Some(a), None) => Some(format!("master {}", plain_or_quoted(a))),
        (None, Some(p)) => Some(format!("master port {}", plain_or_quoted(p))),
        (None, None) => None,
    };
    let summary = if parts.is_empty() {
        format!(
            "not launched by torchrun yet; {} set (torchrun overrides it for its workers)",
            master.unwrap_or_default()
        )
    } else {
        let mut s = parts.join(", ");
        if let Some(m) = master {
            s.push_str(&format!(", {m}"));
        }
        s
    };
    Outcome::pass(summary)
}

/// A value as is when it is short and printable, otherwise as
/// [`quote_value`] shows it.
fn plain_or_quoted(v: &str) -> String {
    let v = v.trim();
    if v.chars().count() <= ECHO_MAX_CHARS
        && v.chars().all(|c| !c.is_control() && !c.is_whitespace())
    {
        v.to_string()
    } else {
        quote_value(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(v: &[u32]) -> Vec<DeviceToken> {
        v.iter().map(|i| DeviceToken::Index(*i)).collect()
    }

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    // ---- the parser, case by case against the documented driver behaviour

    #[test]
    fn parses_plain_and_reordered_indices() {
        assert_eq!(
            parse_cuda_visible_devices("0,1,2,3").tokens,
            idx(&[0, 1, 2, 3])
        );
        // "2,1" hides 0 and enumerates 2 before 1 (CUDA guide).
        let p = parse_cuda_visible_devices("2,1");
        assert_eq!(p.effective(), idx(&[2, 1]).as_slice());
        assert_eq!(p.invalid, None);
    }

    #[test]
    fn negative_index_ends_the_list() {
        // The CUDA guide's own example: 0,2,-1,1 shows 0 and 2.
        let p = parse_cuda_visible_devices("0,2,-1,1");
        assert_eq!(p.effective(), idx(&[0, 2]).as_slice());
        let bad = p.invalid.clone().expect("invalid entry");
        assert_eq!((bad.position, bad.raw.as_str()), (2, "-1"));
        assert_eq!(p.ignored, ["1"]);
    }

    #[test]
    fn invalid_word_hides_the_rest() {
        let p = parse_cuda_visible_devices("0,1,foo,2");
        assert_eq!(p.effective(), idx(&[0, 1]).as_slice());
        assert_eq!(p.invalid.as_ref().map(|b| b.raw.as_str()), Some("foo"));
        assert_eq!(p.ignored, ["2"]);
        // PyTorch's cases: "one,two,3,4" is empty, "4,3,two,one" is 4,3.
        assert!(parse_cuda_visible_devices("one,two,3,4")
            .effective()
            .is_empty());
        assert_eq!(
            parse_cuda_visible_devices("4,3,two,one").effective(),
            idx(&[4, 3]).as_slice()
        );
    }

    #[test]
    fn empty_entry_stops_parsing() {
        let p = parse_cuda_visible_devices("0,1,,2");
        assert_eq!(p.effective(), idx(&[0, 1]).as_slice());
        assert_eq!(
            p.invalid.as_ref().map(|b| b.reason.as_str()),
            Some("an empty entry")
        );
        assert_eq!(p.ignored, ["2"]);
        assert!(parse_cuda_visible_devices("").effective().is_empty());
    }

    #[test]
    fn strtoul_rules_for_indices() {
        // Text after the number is ignored: "1gpu2,2ampere" is 1,2.
        let p = parse_cuda_visible_devices("1gpu2,2ampere");
        assert_eq!(p.effective(), idx(&[1, 2]).as_slice());
        assert_eq!(p.trailing_text.len(), 2);
        // Whitespace and signs: "2, +3, -0, 5" is 2,3,0,5.
        let p = parse_cuda_visible_devices("2, +3, -0, 5");
        assert_eq!(p.effective(), idx(&[2, 3, 0, 5]).as_slice());
        assert!(p.trailing_text.is_empty());
        assert!(parse_cuda_visible_devices("0 , 1").trailing_text.is_empty());
        assert_eq!(
            parse_cuda_visible_devices("99999999999")
                .invalid
                .map(|b| b.reason),
            Some("an index too large to name a GPU".to_string())
        );
    }

    #[test]
    fn duplicates_leave_nothing() {
        let p = parse_cuda_visible_devices("0,1,2,1");
        assert!(p.effective().is_empty());
        assert_eq!(p.duplicate.as_deref(), Some("1"));
        assert!(parse_cuda_visible_devices("0,0").effective().is_empty());
        // The same number written differently is the same device.
        assert!(parse_cuda_visible_devices("1,+1").effective().is_empty());
        // A duplicate after the stop point does not count.
        assert_eq!(
            parse_cuda_visible_devices("0,-1,0").effective(),
            idx(&[0]).as_slice()
        );
    }

    #[test]
    fn uuids_and_mig() {
        let p = parse_cuda_visible_devices("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,GPU-abc");
        assert_eq!(
            p.effective(),
            [
                DeviceToken::Uuid("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6".into()),
                DeviceToken::Uuid("GPU-abc".into())
            ]
            .as_slice()
        );
        let p = parse_cuda_visible_devices(
            "MIG-d9a47cfb-d1f2-d08c-b40e-0812b597ae69,MIG-GPU-8932f937-d72c/1/0",
        );
        assert_eq!(p.effective().len(), 2);
        assert!(matches!(p.effective()[1], DeviceToken::Mig(_)));
        assert!(parse_cuda_visible_devices("GPU-abc,GPU-abc")
            .effective()
            .is_empty());
        // Not hex: no GPU UUID can start like this.
        let p = parse_cuda_visible_devices("GPU-xyz,1");
        assert!(p.effective().is_empty());
        assert_eq!(p.ignored, ["1"]);
        assert!(parse_cuda_visible_devices("MIG-GPU-abc/1")
            .invalid
            .is_some());
        // Whitespace is not trimmed from UUID entries, and the prefix is case-sensitive.
        let p = parse_cuda_visible_devices(" GPU-abc");
        assert_eq!(
            p.invalid.map(|b| b.reason),
            Some("a UUID with spaces around it".to_string())
        );
        let p = parse_cuda_visible_devices("gpu-abc");
        assert_eq!(
            p.invalid.map(|b| b.reason),
            Some("the GPU-/MIG- prefix must be upper case".to_string())
        );
    }

    #[test]
    fn mixed_kinds_are_accepted_and_noticed() {
        let p = parse_cuda_visible_devices("0,GPU-abc");
        assert_eq!(p.effective().len(), 2);
        assert!(p.mixes_kinds());
        assert!(!parse_cuda_visible_devices("0,1").mixes_kinds());
    }

    #[test]
    fn repair_keeps_valid_entries_once() {
        assert_eq!(
            repaired_visible_devices("0,1,foo,2").as_deref(),
            Some("0,1,2")
        );
        assert_eq!(repaired_visible_devices("0,0,1").as_deref(), Some("0,1"));
        assert_eq!(repaired_visible_devices("").as_deref(), None);
        assert_eq!(repaired_visible_devices("-1").as_deref(), None);
    }

    // ---- the verdicts

    fn vis(cvd: Option<&str>, nvd: Option<&str>, order: Option<&str>) -> Outcome {
        evaluate_visibility(&VisibilityFacts {
            cuda_visible_devices: cvd.map(String::from),
            nvidia_visible_devices: nvd.map(String::from),
            cuda_device_order: order.map(String::from),
        })
    }

    #[test]
    fn unset_passes_with_all_gpus_visible() {
        let o = vis(None, None, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.summary, "CUDA_VISIBLE_DEVICES unset: all GPUs visible");
        assert_eq!(o.metric("visible_devices"), None);
    }

    #[test]
    fn valid_list_with_pci_order_passes_with_mapping() {
        let o = vis(Some("2,0"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="2,0": cuda:0 -> 2, cuda:1 -> 0"#
        );
        assert_eq!(o.metric("visible_devices"), Some(2.0));
    }

    #[test]
    fn indices_without_pci_order_warn() {
        let o = vis(Some("0,1"), None, None);
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("unset (FASTEST_FIRST)"), "{}", o.summary);
        assert!(
            hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            "{}",
            hint(&o)
        );
        let o = vis(Some("0"), None, Some("FASTEST_FIRST"));
        assert_eq!(o.status, Status::Warn);
    }

    #[test]
    fn uuids_or_unset_do_not_need_pci_order() {
        assert_eq!(vis(Some("GPU-abc"), None, None).status, Status::Pass);
        assert_eq!(vis(None, None, Some("FASTEST_FIRST")).status, Status::Pass);
    }

    #[test]
    fn unknown_device_order_warns() {
        let o = vis(None, None, Some("PCI"));
        assert_eq!(o.status, Status::Warn);
        assert!(o
            .summary
            .contains(r#"CUDA_DEVICE_ORDER="PCI" is not a value CUDA knows"#));
    }

    #[test]
    fn dropped_entries_fail_and_are_named() {
        let o = vis(Some("0,1,foo,2"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="0,1,foo,2": entry 3 ("foo") is not an index, GPU-<uuid> or MIG-<uuid>; CUDA silently hides it and everything after it ("2"); visible: cuda:0 -> 0, cuda:1 -> 1"#
        );
        assert!(
            hint(&o).contains("export CUDA_VISIBLE_DEVICES=0,1,2"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(2.0));
    }

    #[test]
    fn a_failure_keeps_lesser_warnings_out_of_the_summary() {
        let o = vis(Some("0,1,foo,2"), None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(!o.summary.contains("CUDA_DEVICE_ORDER"), "{}", o.summary);
        assert!(
            o.facts
                .get("also")
                .is_some_and(|a| a.contains("CUDA_DEVICE_ORDER")),
            "{:?}",
            o.facts
        );
        assert!(
            hint(&o).contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn empty_value_fails() {
        let o = vis(Some(""), None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("set but empty"), "{}", o.summary);
        assert!(
            hint(&o).contains("unset CUDA_VISIBLE_DEVICES"),
            "{}",
            hint(&o)
        );
        assert_eq!(o.metric("visible_devices"), Some(0.0));
    }

    #[test]
    fn minus_one_fails_hiding_everything() {
        let o = vis(Some("-1"), None, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, r#"CUDA_VISIBLE_DEVICES="-1" hides every GPU"#);
        assert!(
            hint(&o).contains("unset CUDA_VISIBLE_DEVICES"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn duplicate_fails() {
        let o = vis(Some("0,0"), None, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="0,0" names "0" twice: CUDA then sees no GPU at all"#
        );
        assert!(
            hint(&o).contains("export CUDA_VISIBLE_DEVICES=0"),
            "{}",
            hint(&o)
        );
    }

    #[test]
    fn malformed_first_entry_fails() {
        let o = vis(Some("GPU-xyz"), None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("so CUDA sees no GPU"), "{}", o.summary);
        assert!(o.summary.contains("only hex digits"), "{}", o.summary);
    }

    #[test]
    fn short_uuid_prefix_passes() {
        let o = vis(Some("GPU-abc"), None, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            r#"CUDA_VISIBLE_DEVICES="GPU-abc": cuda:0 -> GPU-abc"#
        );
    }

    #[test]
    fn trailing_comma_warns() {
        let o = vis(Some("0,1,"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("ends with a comma"), "{}", o.summary);
    }

    #[test]
    fn trailing_text_warns() {
        let o = vis(Some("0,1gpu"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains(r#"entry "1gpu" is read as 1"#),
            "{}",
            o.summary
        );
    }

    #[test]
    fn mixed_kinds_warn() {
        let o = vis(Some("0,GPU-abc"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("mixes indices and UUIDs"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn bare_prefix_warns() {
        let o = vis(Some("GPU-"), None, None);
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("bare GPU-/MIG- prefix"), "{}", o.summary);
    }

    #[test]
    fn nvidia_visible_devices_void_and_none_warn() {
        for v in ["void", "none", ""] {
            let o = vis(None, Some(v), None);
            assert_eq!(o.status, Status::Warn, "{v}");
            assert!(
                o.summary.contains("NVIDIA_VISIBLE_DEVICES"),
                "{}",
                o.summary
            );
            assert!(hint(&o).contains("--gpus all"), "{}", hint(&o));
        }
        let o = vis(None, Some("all"), None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.facts.get("nvidia_visible_devices").map(String::as_str),
            Some(r#""all""#)
        );
    }

    #[test]
    fn hostile_bytes_are_escaped_in_the_summary() {
        let o = vis(Some("0,\u{1b}[31mx\n"), None, Some("PCI_BUS_ID"));
        assert_eq!(o.status, Status::Fail);
        assert!(!o.summary.contains('\u{1b}'), "{}", o.summary);
        assert!(!o.summary.contains('\n'), "{}", o.summary);
        assert!(o.summary.contains(r"\u{1b}[31mx\n"), "{}", o.summary);
    }

    #[test]
    fn long_values_are_cut() {
        let long = "7".repeat(500);
        assert!(quote_value(&long).chars().count() < 90);
    }

    // ---- torchrun

    fn launch(
        rank: Option<&str>,
        world: Option<&str>,
        local_rank: Option<&str>,
        local_world: Option<&str>,
        addr: Option<&str>,
        port: Option<&str>,
    ) -> Outcome {
        let s = |v: Option<&str>| v.map(String::from);
        evaluate_launch(&LaunchFacts {
            rank: s(rank),
            world_size: s(world),
            local_rank: s(local_rank),
            local_world_size: s(local_world),
            master_addr: s(addr),
            master_port: s(port),
        })
    }

    #[test]
    fn torchrun_unset_skips() {
        let o = launch(None, None, None, None, None, None);
        assert_eq!(o.status, Status::Skip);
        assert!(o
            .summary
            .starts_with("not launched by torchrun: none of RANK, WORLD_SIZE"));
    }

    #[test]
    fn torchrun_full_consistent_set_passes() {
        let o = launch(
            Some("5"),
            Some("8"),
            Some("1"),
            Some("4"),
            Some("10.0.0.1"),
            Some("29500"),
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "rank 5 of 8, local rank 1 of 4, master 10.0.0.1:29500"
        );
    }

    #[test]
    fn torchrun_only_master_vars_pass() {
        let o = launch(None, None, None, None, Some("10.0.0.1"), Some("29501"));
        assert_eq!(o.status, Status::Pass);
        assert!(
            o.summary.starts_with("not launched by torchrun yet"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn torchrun_rank_out_of_world_fails() {
        let o = launch(Some("8"), Some("8"), None, None, Some("h"), Some("1"));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "RANK=8 is not below WORLD_SIZE=8 (ranks run 0..7)"
        );
        assert!(hint(&o).contains("torchrun"), "{}", hint(&o));
    }

    #[test]
    fn torchrun_local_rank_out_of_local_world_fails() {
        let o = launch(
            Some("0"),
            Some("8"),
            Some("4"),
            Some("4"),
            Some("h"),
            Some("1"),
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .contains("LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"));
    }

    #[test]
    fn torchrun_local_world_larger_than_world_fails() {
        let o = launch(
            Some("0"),
            Some("4"),
            Some("0"),
            Some("8"),
            Some("h"),
            Some("1"),
        );
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .contains("LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4"));
    }

    #[test]
    fn torchrun_partial_sets_fail() {
        let o = launch(Some("0"), None, None, None, None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("RANK is set but WORLD_SIZE is not"),
            "{}",
            o.summary
        );
        let o = launch(None, Some("2"), None, None, None, None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("WORLD_SIZE is set but RANK is not"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn torchrun_bad_integers_fail_echoing_the_value() {
        let o = launch(Some("one"), Some("0"), None, None, Some("h"), Some("1"));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains(r#"RANK="one" is not an integer >= 0"#),
            "{}",
            o.summary
        );
        assert!(
            o.summary
                .contains(r#"WORLD_SIZE="0" is not an integer >= 1"#),
            "{}",
            o.summary
        );
        let o = launch(Some("-1"), Some("2"), None, None, Some("h"), Some("1"));
        assert_eq!(o.status, Status::Fail);
    }

    #[test]
    fn torchrun_bad_master_port_fails() {
        let o = launch(Some("0"), Some("1"), None, None, Some("h"), Some("port"));
        assert_eq!(o.status, Status::Fail);
        assert!(o
            .summary
            .contains(r#"MASTER_PORT="port" is not a port number"#));
        let o = launch(None, None, None, None, Some(""), None);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("MASTER_ADDR is set but empty"));
    }

    #[test]
    fn torchrun_missing_master_warns() {
        let o = launch(Some("0"), Some("2"), Some("0"), Some("2"), None, None);
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "MASTER_ADDR and MASTER_PORT unset: env:// initialisation needs them"
        );
    }

    #[test]
    fn torchrun_local_pair_half_set_warns() {
        let o = launch(Some("0"), Some("2"), Some("0"), None, Some("h"), Some("1"));
        assert_eq!(o.status, Status::Warn);
        assert!(o
            .summary
            .contains("LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"));
        let o = launch(None, None, Some("0"), None, None, None);
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary.contains("without RANK and WORLD_SIZE"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn torchrun_whitespace_around_integers_is_accepted() {
        let o = launch(Some(" 1"), Some("2 "), None, None, Some("h"), Some("29500"));
        assert_eq!(o.status, Status::Pass);
    }

    #[test]
    fn torchrun_hostile_master_addr_is_escaped() {
        let o = launch(None, None, None, None, Some("evil\u{7}\nhost"), Some("1"));
        assert_eq!(o.status, Status::Pass);
        assert!(!o.summary.contains('\n'), "{}", o.summary);
        assert!(!o.summary.contains('\u{7}'), "{}", o.summary);
    }
}

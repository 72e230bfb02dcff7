//! CUDA_VISIBLE_DEVICES as the CUDA driver reads it, and what each entry
//! names on this machine's GPUs. Pure rules: the env check judges with them,
//! the gpu, cuda and torch checks map CUDA ordinals onto NVML's GPUs.

use std::collections::HashSet;

use crate::machine::{GpuError, GpuInfo};

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
    let mut seen: HashSet<DeviceToken> = HashSet::new();
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
        if !seen.insert(token.clone()) {
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
    let mut seen: HashSet<DeviceToken> = HashSet::new();
    for raw in value.split(',') {
        if let Ok((token, _)) = parse_entry(raw) {
            if seen.insert(token.clone()) {
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

// ---------------------------------------------------------------- mapping onto the GPUs

/// One GPU as NVML reports it, with what the cross-check needs, as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NvmlGpu {
    /// NVML's index: nvidia-smi's numbering, which is PCI bus order.
    pub index: u32,
    /// "(unknown)" when NVML could not read it.
    pub name: String,
    /// "GPU-..."; `None` when NVML could not read it.
    pub uuid: Option<String>,
    /// MIG mode is on: CUDA uses one of the GPU's MIG devices, not the GPU.
    pub mig_enabled: bool,
    /// "MIG-..." of every MIG device on the GPU.
    pub mig_uuids: Vec<String>,
}

impl NvmlGpu {
    /// The GPUs of an NVML inventory, in NVML order. A GPU NVML counts but
    /// cannot describe keeps its place (CUDA's indices count it too), with
    /// its name and UUID unknown.
    pub fn from_inventory(inventory: &[Result<GpuInfo, GpuError>]) -> Vec<NvmlGpu> {
        inventory
            .iter()
            .map(|slot| match slot {
                Ok(g) => NvmlGpu::from(g),
                Err(e) => NvmlGpu {
                    index: e.index,
                    name: "(unknown)".into(),
                    ..NvmlGpu::default()
                },
            })
            .collect()
    }
}

impl From<&GpuInfo> for NvmlGpu {
    fn from(g: &GpuInfo) -> Self {
        NvmlGpu {
            index: g.index,
            name: g.name.clone(),
            uuid: Some(g.uuid.clone()),
            mig_enabled: g.mig_enabled == Some(true),
            mig_uuids: g.mig_uuids.clone(),
        }
    }
}

/// The device one CUDA_VISIBLE_DEVICES entry names on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A whole GPU, by NVML index.
    Gpu(u32),
    /// A MIG device: the GPU that owns it, and its identifier (the full
    /// `MIG-<uuid>`, or `MIG-GPU-<uuid>/<gi>/<ci>` as written).
    Mig { gpu: u32, id: String },
}

/// Why CUDA cannot use an entry on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// An index at or beyond the number of GPUs.
    BeyondCount(u32),
    /// A UUID or UUID prefix no GPU (or MIG device) has.
    NoMatch,
    /// A UUID prefix several devices share: CUDA needs one that names one.
    Ambiguous(Vec<Target>),
}

/// CUDA_VISIBLE_DEVICES mapped onto the GPUs NVML reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mapping {
    /// What cuda:0, cuda:1, ... are: one per accepted entry, in order, up
    /// to the first entry that names nothing here.
    pub targets: Vec<Target>,
    /// The first entry naming no device here (its position among the
    /// accepted entries, and why): CUDA hides it and everything after it.
    pub stop: Option<(usize, Unresolved)>,
    /// Two entries naming the same device (their positions): CUDA then
    /// shows no device at all.
    pub duplicate: Option<(usize, usize)>,
}

impl Mapping {
    /// The MIG devices among the targets.
    pub fn mig_count(&self) -> usize {
        self.targets
            .iter()
            .filter(|t| matches!(t, Target::Mig { .. }))
            .count()
    }
}

/// Map the entries CUDA accepted onto the GPUs NVML reports, as the driver
/// does when it starts.
///
/// Sources: the CUDA Programming Guide, "CUDA Environment Variables" (an
/// index names a device in CUDA's order; a UUID may be abbreviated to enough
/// leading characters to name one GPU; "if one of the indices is invalid,
/// only the devices whose index precedes the invalid index are visible"), and
/// PyTorch's emulation of the driver, which it tested against real drivers:
/// torch/cuda/__init__.py `_device_count_nvml` stops at the first index at or
/// beyond NVML's device count, and `_transform_uuid_to_ordinals` stops at the
/// first UUID prefix that matches no GPU or more than one, and returns no
/// device when two entries resolve to the same GPU. MIG UUIDs are matched the
/// same way against the MIG devices NVML lists.
pub fn map_visible_devices(tokens: &[DeviceToken], gpus: &[NvmlGpu]) -> Mapping {
    let mut m = Mapping::default();
    for (position, token) in tokens.iter().enumerate() {
        match resolve(token, gpus) {
            Err(why) => {
                m.stop = Some((position, why));
                break;
            }
            Ok(target) => {
                if let Some(first) = m.targets.iter().position(|t| *t == target) {
                    m.duplicate = Some((first, position));
                    break;
                }
                m.targets.push(target);
            }
        }
    }
    m
}

/// The one device a token names here.
fn resolve(token: &DeviceToken, gpus: &[NvmlGpu]) -> Result<Target, Unresolved> {
    let one = |found: Vec<Target>| match found.len() {
        0 => Err(Unresolved::NoMatch),
        1 => Ok(found.into_iter().next().ok_or(Unresolved::NoMatch)?),
        _ => Err(Unresolved::Ambiguous(found)),
    };
    let uuid_starts =
        |g: &NvmlGpu, prefix: &str| g.uuid.as_deref().is_some_and(|u| u.starts_with(prefix));
    match token {
        DeviceToken::Index(i) => match usize::try_from(*i) {
            Ok(n) if n < gpus.len() => Ok(Target::Gpu(gpus[n].index)),
            _ => Err(Unresolved::BeyondCount(*i)),
        },
        DeviceToken::Uuid(prefix) => one(gpus
            .iter()
            .filter(|g| uuid_starts(g, prefix))
            .map(|g| Target::Gpu(g.index))
            .collect()),
        DeviceToken::Mig(id) => match id.strip_prefix("MIG-").filter(|b| b.starts_with("GPU-")) {
            // The pre-R470 form names the parent GPU and the instance ids.
            Some(legacy) => {
                let parent = legacy.split('/').next().unwrap_or(legacy);
                one(gpus
                    .iter()
                    .filter(|g| g.mig_enabled && uuid_starts(g, parent))
                    .map(|g| Target::Mig {
                        gpu: g.index,
                        id: id.clone(),
                    })
                    .collect())
            }
            None => one(gpus
                .iter()
                .flat_map(|g| {
                    g.mig_uuids
                        .iter()
                        .filter(|u| u.starts_with(id.as_str()))
                        .map(|u| Target::Mig {
                            gpu: g.index,
                            id: u.clone(),
                        })
                })
                .collect()),
        },
    }
}

/// A corrected CUDA_VISIBLE_DEVICES for this machine: every entry that names
/// one device here, in order, each device once, at most one MIG device (all
/// a CUDA process can use). `None` when nothing usable is left.
pub fn repaired_visible_devices_on(value: &str, gpus: &[NvmlGpu]) -> Option<String> {
    let mut kept: Vec<(DeviceToken, Target)> = Vec::new();
    for raw in value.split(',') {
        let Ok((token, _)) = parse_entry(raw) else {
            continue;
        };
        let Ok(target) = resolve(&token, gpus) else {
            continue;
        };
        let second_mig = matches!(target, Target::Mig { .. })
            && kept.iter().any(|(_, t)| matches!(t, Target::Mig { .. }));
        if !second_mig && !kept.iter().any(|(k, t)| *k == token || *t == target) {
            kept.push((token, target));
        }
    }
    if kept.is_empty() {
        return None;
    }
    Some(
        kept.iter()
            .map(|(t, _)| t.to_string())
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// GPUs as NVML lists them, for the tests of CUDA_VISIBLE_DEVICES here and
/// in env.cuda_visible_devices.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::NvmlGpu;

    pub const H100: &str = "NVIDIA H100 80GB HBM3";

    pub fn gpu_uuid(i: u32) -> String {
        format!("GPU-{:08x}-1111-4222-8333-{:012x}", 0xfa4e_0000u32 + i, i)
    }

    pub fn mig_uuid(gpu: u32, slot: u32) -> String {
        format!(
            "MIG-{:08x}-aaaa-4bbb-8ccc-{:012x}",
            0xfa4e_0000u32 + gpu,
            slot
        )
    }

    pub fn gpus_named(names: &[&str]) -> Vec<NvmlGpu> {
        names
            .iter()
            .zip(0u32..)
            .map(|(name, i)| NvmlGpu {
                index: i,
                name: name.to_string(),
                uuid: Some(gpu_uuid(i)),
                mig_enabled: false,
                mig_uuids: Vec::new(),
            })
            .collect()
    }

    pub fn h100s(n: usize) -> Vec<NvmlGpu> {
        gpus_named(&vec![H100; n])
    }

    /// 2x A100 40GB, GPU 1 in MIG mode with two MIG devices (the mig scenario).
    pub fn mig_box() -> Vec<NvmlGpu> {
        let mut g = gpus_named(&["NVIDIA A100-SXM4-40GB"; 2]);
        g[1].mig_enabled = true;
        g[1].mig_uuids = vec![mig_uuid(1, 0), mig_uuid(1, 1)];
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(v: &[u32]) -> Vec<DeviceToken> {
        v.iter().map(|i| DeviceToken::Index(*i)).collect()
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

    // ---- mapping onto the GPUs

    use super::fixtures::{gpu_uuid, h100s, mig_box, mig_uuid};

    #[test]
    fn mapping_stops_at_the_first_entry_naming_nothing() {
        let gpus = h100s(4);
        let m = map_visible_devices(&idx(&[3, 1, 4, 0]), &gpus);
        assert_eq!(m.targets, [Target::Gpu(3), Target::Gpu(1)]);
        assert_eq!(m.stop, Some((2, Unresolved::BeyondCount(4))));
        assert_eq!(m.duplicate, None);
        let m = map_visible_devices(
            &[
                DeviceToken::Uuid("GPU-fa4e0002".into()),
                DeviceToken::Index(2),
                DeviceToken::Index(0),
            ],
            &gpus,
        );
        assert_eq!(m.duplicate, Some((0, 1)));
    }

    #[test]
    fn repair_for_this_machine_keeps_what_names_a_device_once() {
        let gpus = h100s(8);
        assert_eq!(
            repaired_visible_devices_on("0,9,1", &gpus).as_deref(),
            Some("0,1")
        );
        assert_eq!(
            repaired_visible_devices_on(&format!("0,{},1", gpu_uuid(0)), &gpus).as_deref(),
            Some("0,1")
        );
        assert_eq!(repaired_visible_devices_on("9,GPU-dead", &gpus), None);
        let two_migs = format!("{},{}", mig_uuid(1, 0), mig_uuid(1, 1));
        assert_eq!(
            repaired_visible_devices_on(&two_migs, &mig_box()),
            Some(mig_uuid(1, 0))
        );
    }
}

//! Judging a distributed job from its ranks' Flight Recorder records: who is
//! in which process group, where the ranks first disagree (the wavefront of
//! a hang or a desync), and which rank enters collectives late again and
//! again (a straggler). Pure functions of [`RankTrace`]s; the `job` checks
//! turn their answers into verdicts.
//!
//! The rules, each chosen so that a healthy rank is never blamed:
//! - Sequence numbers, not completion flags, say how far a rank got: after
//!   gloo's timeout every waiting rank's entry reads `completed` and
//!   `retired`, although the collective never ran.
//! - At the wavefront, the ranks that never enqueued the collective the
//!   others wait in are named, unless they outnumber the ones that did: then
//!   those few called a collective the rest never called.
//! - Every process group has its own wavefront and its own culprits; a rank
//!   that waits inside another group's collective is not a culprit of the
//!   group it has not reached.
//! - A collective every rank entered is a hang only with evidence that the
//!   job stopped there (a timed-out entry, one retired without completing);
//!   where one rank finished it, it ran. Where the backend records no
//!   completion (gloo), retired is the only sign of done.
//! - A collective entered with another op, size or dtype names the ranks
//!   that differ from a strict majority; with no majority (two ranks, or an
//!   even split) every side is named as a mismatch between them.
//! - What must agree is what PyTorch's analyzer compares, op by op
//!   ([`compared`]): input and output shapes and dtype sets, each coalesced
//!   group's ops one by one; point-to-point operations are paired by their
//!   own sequence and not judged here.
//! - One collective entered seconds late, far beyond the group's usual
//!   spread, is named once ([`late_entries`]); a straggler is late again
//!   and again ([`stragglers`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::flight::{Dtypes, Entry, RankTrace, State};

/// Who the dumps say is in the job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Membership {
    /// Every global rank of the job that the dumps show (from the groups'
    /// member lists and the ranks that left a file).
    pub world: Vec<u32>,
    /// Ranks of the world with no readable dump.
    pub missing: Vec<u32>,
    /// Each process group (by name) with its members.
    pub groups: BTreeMap<String, Group>,
}

/// A process group as rebuilt from every rank's dump.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    pub name: String,
    pub desc: String,
    /// Global ranks; from `pg_config` where any rank had it, else the ranks
    /// whose entries or `pg_status` name the group (the world for the
    /// default group).
    pub members: Vec<u32>,
}

impl Group {
    /// "group 0 (default_pg)", "group 3 (ranks 2, 3)".
    pub fn label(&self) -> String {
        if self.desc.is_empty() || self.desc == "undefined" {
            format!("group {} (ranks {})", self.name, rank_list(&self.members))
        } else {
            format!("group {} ({})", self.name, self.desc)
        }
    }

    fn is_default(&self) -> bool {
        self.desc == "default_pg" || self.name == "0"
    }
}

/// Rebuild the job's membership. `file_ranks` are the ranks that left a
/// file, readable or not (a rank whose file could not be read is not
/// missing; its file is the finding).
pub fn membership(traces: &[RankTrace], file_ranks: &[u32]) -> Membership {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut seen: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut world: BTreeSet<u32> = file_ranks.iter().copied().collect();
    for t in traces {
        for (name, cfg) in &t.groups {
            if name.is_empty() && cfg.name.is_empty() {
                // A group without a name (torch 2.15's gloo dump) still
                // says who is in the job.
                world.extend(cfg.ranks.iter().copied());
                continue;
            }
            let key = if name.is_empty() { &cfg.name } else { name };
            let g = groups.entry(key.clone()).or_default();
            g.name.clone_from(key);
            if g.desc.is_empty() {
                g.desc.clone_from(&cfg.desc);
            }
            if g.members.is_empty() {
                g.members.clone_from(&cfg.ranks);
            }
        }
        for name in t.status.keys().filter(|n| !n.is_empty()) {
            seen.entry(name.clone()).or_default().insert(t.rank);
        }
        // The groups this rank's entries name (a handful, each once).
        let mut named: Vec<(&str, &str)> = Vec::new();
        for e in &t.entries {
            if !named.iter().any(|(g, _)| *g == &*e.group) {
                named.push((&e.group, &e.group_desc));
            }
        }
        for (name, desc) in named {
            seen.entry(name.to_string()).or_default().insert(t.rank);
            let g = groups.entry(name.to_string()).or_default();
            g.name = name.to_string();
            if g.desc.is_empty() {
                g.desc = desc.to_string();
            }
        }
    }
    world.extend(traces.iter().map(|t| t.rank));
    for g in groups.values() {
        world.extend(g.members.iter().copied());
    }
    let world_v: Vec<u32> = world.iter().copied().collect();
    for (name, g) in groups.iter_mut() {
        if g.members.is_empty() {
            g.members = if g.is_default() {
                world_v.clone()
            } else {
                seen.get(name)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default()
            };
        }
    }
    let have: BTreeSet<u32> = file_ranks.iter().copied().collect();
    Membership {
        missing: world.difference(&have).copied().collect(),
        world: world_v,
        groups,
    }
}

/// What kind of disagreement the wavefront is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaveKind {
    /// Blamed ranks never enqueued the collective the others wait in.
    NotJoined,
    /// Blamed ranks (a minority) enqueued a collective the rest never did.
    Ahead,
    /// Blamed ranks entered it with another op, size or dtype than a
    /// strict majority.
    Mismatch,
    /// No majority: every side of the disagreement is named.
    Split,
    /// Every rank with a dump agrees and entered it, and it does not
    /// finish: not a code path (the network, a GPU, a rank without dump).
    Stuck,
}

/// A rank named at the wavefront, with what it was doing.
#[derive(Debug, Clone, PartialEq)]
pub struct Blamed {
    pub rank: u32,
    /// "last enqueued all_reduce #5 (completed)", "called broadcast [4]
    /// float", "holds no entries", "left no dump".
    pub doing: String,
}

/// Where the ranks of the job first disagree.
#[derive(Debug, Clone, PartialEq)]
pub struct Wavefront {
    pub group: Group,
    /// The collective sequence number in that group.
    pub seq: u64,
    /// The majority's (or the waiting ranks') collective: "all_reduce".
    pub op: String,
    /// The majority's call as people read it: "all_reduce [4] float".
    pub call: String,
    pub kind: WaveKind,
    pub blamed: Vec<Blamed>,
    /// The ranks waiting in it (or agreeing with the majority).
    pub waiting: Vec<u32>,
    /// When the first rank enqueued it (wall clock, ns), to order groups.
    pub time_ns: u64,
    /// For [`WaveKind::Stuck`]: what in the dumps shows that the job stopped
    /// there (a timed-out entry, one retired without completing); None when
    /// nothing does, and any dump of a running job reads the same.
    pub stopped: Option<String>,
}

impl Wavefront {
    pub fn blamed_ranks(&self) -> Vec<u32> {
        self.blamed.iter().map(|b| b.rank).collect()
    }
}

/// One sequence number's record on one rank: the entry that stands for it
/// and, for a coalesced group (several ops under one sequence number), the
/// group's ops in the order they were called.
struct Slot<'a> {
    seq: u64,
    entry: &'a Entry,
    parts: Vec<&'a Entry>,
}

/// One rank's collectives in one group, by sequence number.
struct Lane<'a> {
    rank: u32,
    /// Ascending by seq, one slot per seq.
    by_seq: Vec<Slot<'a>>,
    /// The highest sequence it enqueued (entries and `pg_status`).
    last: Option<u64>,
    /// The job's backend records completion (see [`records_completion`]).
    completes: bool,
}

impl<'a> Lane<'a> {
    fn new(t: &'a RankTrace, group: &str, completes: bool) -> Lane<'a> {
        let mut all: Vec<(u64, &Entry)> = t
            .entries
            .iter()
            .filter(|e| &*e.group == group && !e.is_p2p && e.collective_seq > 0)
            .map(|e| (e.collective_seq, e))
            .collect();
        // Stable: the ops of a coalesced group keep their call order.
        all.sort_by_key(|(s, _)| *s);
        let by_seq: Vec<Slot> = all.chunk_by(|a, b| a.0 == b.0).map(slot).collect();
        let from_status = t.status.get(group).and_then(|s| s.last_enqueued);
        let last = by_seq.last().map(|s| s.seq).max(from_status);
        Lane {
            rank: t.rank,
            by_seq,
            last,
            completes,
        }
    }

    fn at(&self, seq: u64) -> Option<&Slot<'a>> {
        self.by_seq
            .binary_search_by_key(&seq, |s| s.seq)
            .ok()
            .map(|i| &self.by_seq[i])
    }

    fn first(&self) -> Option<u64> {
        self.by_seq.first().map(|s| s.seq)
    }

    /// What the rank last did in this group, for a rank that is behind.
    fn last_doing(&self) -> String {
        match self.by_seq.last() {
            Some(s) => format!(
                "last enqueued {} #{} ({})",
                s.entry.op,
                s.seq,
                state_word(s.entry, self.completes)
            ),
            None => "holds no entries for this group".to_string(),
        }
    }
}

/// The slot of one run of entries under one sequence number. A coalesced
/// group records each of its ops and then its own entry ("coalesced",
/// "ALLGATHER_coalesced", ...) under one number: that entry stands for the
/// group and the others are its parts.
fn slot<'a>(run: &[(u64, &'a Entry)]) -> Slot<'a> {
    let seq = run[0].0;
    if let [(_, only)] = run {
        return Slot {
            seq,
            entry: only,
            parts: Vec::new(),
        };
    }
    let marker = run
        .iter()
        .position(|(_, e)| is_group_entry(&e.op))
        .or_else(|| run.iter().rposition(|(_, e)| is_coalesced(&e.op)));
    let entry = marker.map_or(run[0].1, |i| run[i].1);
    let parts = run
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != marker)
        .map(|(_, (_, e))| *e)
        .collect();
    Slot { seq, entry, parts }
}

/// The op a collective is matched by: the out-of-place broadcast and
/// reduce are the same collective as the in-place ones.
pub fn canonical_op(op: &str) -> &str {
    match op {
        "_broadcast_oop" => "broadcast",
        "_reduce_oop" => "reduce",
        "_allgather_base" | "_all_gather_base" | "all_gather_into_tensor" | "allgather" => {
            "all_gather"
        }
        "_reduce_scatter_base" | "reduce_scatter_tensor" | "reducescatter" => "reduce_scatter",
        "allreduce" => "all_reduce",
        other => other,
    }
}

/// An op whose name says coalesced ("coalesced", "allreduce_coalesced").
fn is_coalesced(op: &str) -> bool {
    op.to_ascii_lowercase().contains("coalesced")
}

/// A coalesced group's own entry, as PyTorch's analyzer names them
/// (`match` in torch/distributed/flight_recorder/components/types.py).
fn is_group_entry(op: &str) -> bool {
    let lower = op.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "coalesced" | "allgather_coalesced" | "reduce_scatter_coalesced"
    )
}

/// What must agree across ranks for one op: its input and output shapes,
/// and the sets of its input and output dtypes.
#[derive(Debug, Clone, Copy)]
struct Compared {
    inputs: bool,
    outputs: bool,
    in_dtypes: bool,
    out_dtypes: bool,
}

/// The collectives PyTorch's analyzer knows (`COLLECTIVES` in
/// torch/distributed/flight_recorder/components/types.py), by the name
/// [`canonical_op`] gives them, lower case; those with rules of their own
/// are matched before this list is.
const KNOWN: &[&str] = &[
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_single",
    "all_reduce",
    "all_gather_into_tensor_coalesced",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_tensor_coalesced",
    "all_reduce_barrier",
    "split",
    "new_window",
    "allreduce_coalesced",
];

/// What PyTorch's analyzer compares across ranks for `op` (`Op.match` and
/// `Op.dtype_mismatch`): input shapes except for all-to-all and scatter
/// (only the root sends), output shapes except for all-to-all and gather
/// (only the root receives), the input dtypes except for scatter and
/// broadcast, the output dtypes except for gather. The uneven `_v`
/// variants leave out the side that differs by design; a barrier and a
/// coalesced group's own entry compare their type only, and an op the
/// analyzer does not know its type and dtypes.
fn compared(op: &str) -> Compared {
    let all = Compared {
        inputs: true,
        outputs: true,
        in_dtypes: true,
        out_dtypes: true,
    };
    let none = Compared {
        inputs: false,
        outputs: false,
        in_dtypes: false,
        out_dtypes: false,
    };
    let dtypes = Compared {
        in_dtypes: true,
        out_dtypes: true,
        ..none
    };
    let lower = canonical_op(op).to_ascii_lowercase();
    match lower.as_str() {
        "barrier" => none,
        o if is_group_entry(o) => none,
        o if o.starts_with("all_to_all") || o.starts_with("alltoall") => dtypes,
        "scatter" => Compared {
            outputs: true,
            out_dtypes: true,
            ..none
        },
        "gather" => Compared {
            inputs: true,
            in_dtypes: true,
            ..none
        },
        "broadcast" => Compared {
            in_dtypes: false,
            ..all
        },
        "all_gather_v" => Compared {
            inputs: false,
            ..all
        },
        "reduce_scatter_v" => Compared {
            outputs: false,
            ..all
        },
        o if KNOWN.contains(&o) => all,
        _ => dtypes,
    }
}

/// What must agree across ranks for one collective.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Signature<'a> {
    op: &'a str,
    inputs: Option<&'a [Vec<i64>]>,
    outputs: Option<&'a [Vec<i64>]>,
    /// Sorted and deduplicated: the analyzer compares dtypes as sets.
    in_dtypes: Vec<&'a str>,
    out_dtypes: Vec<&'a str>,
    /// A coalesced group's ops, each compared with the same op of the
    /// group on the other ranks.
    parts: Vec<Signature<'a>>,
}

/// Two slots of one call with the same tensors, op and dtypes: their
/// signatures are equal, known without building them (a false answer
/// says nothing: compare the signatures).
fn plainly_same(a: &Slot, b: &Slot) -> bool {
    let (x, y) = (a.entry, b.entry);
    a.parts.is_empty()
        && b.parts.is_empty()
        && x.op == y.op
        && x.input_sizes == y.input_sizes
        && x.output_sizes == y.output_sizes
        && x.input_dtypes == y.input_dtypes
        && x.output_dtypes == y.output_dtypes
}

fn signature<'a>(s: &Slot<'a>) -> Signature<'a> {
    if s.parts.is_empty() {
        return entry_signature(s.entry);
    }
    Signature {
        op: canonical_op(&s.entry.op),
        inputs: None,
        outputs: None,
        in_dtypes: Vec::new(),
        out_dtypes: Vec::new(),
        parts: s.parts.iter().map(|e| entry_signature(e)).collect(),
    }
}

fn entry_signature(e: &Entry) -> Signature<'_> {
    let op = canonical_op(&e.op);
    let c = compared(op);
    // The analyzer compares dtypes only where the first tensor has a shape.
    let shaped = |s: &[Vec<i64>]| s.first().is_some_and(|d| !d.is_empty());
    Signature {
        op,
        inputs: c.inputs.then_some(e.input_sizes.as_slice()),
        outputs: c.outputs.then_some(e.output_sizes.as_slice()),
        in_dtypes: if c.in_dtypes && shaped(&e.input_sizes) {
            dtype_set(&e.input_dtypes)
        } else {
            Vec::new()
        },
        out_dtypes: if c.out_dtypes && shaped(&e.output_sizes) {
            dtype_set(&e.output_dtypes)
        } else {
            Vec::new()
        },
        parts: Vec::new(),
    }
}

/// Dtype names as a set: sorted, without repeats.
fn dtype_set(d: &Dtypes) -> Vec<&str> {
    let mut v: Vec<&str> = d.iter().map(|n| &**n).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn shapes_text(shapes: &[Vec<i64>]) -> String {
    let parts: Vec<String> = shapes
        .iter()
        .map(|d| {
            let dims: Vec<String> = d.iter().map(i64::to_string).collect();
            format!("[{}]", dims.join(", "))
        })
        .collect();
    parts.join(" ")
}

fn dtypes_text(dtypes: &Dtypes) -> String {
    let mut names: Vec<&str> = dtypes.iter().map(|d| &**d).collect();
    names.dedup();
    names.join(",")
}

/// "all_reduce [4] float", as the table shows a call; an output of
/// another shape or dtype than the input follows an arrow
/// ("all_gather [4] Float -> [4, 4]").
pub fn call_text(e: &Entry) -> String {
    let mut s = e.op.to_string();
    for part in [shapes_text(&e.input_sizes), dtypes_text(&e.input_dtypes)] {
        if !part.is_empty() {
            s.push(' ');
            s.push_str(&part);
        }
    }
    let mut out: Vec<String> = Vec::new();
    if !e.output_sizes.is_empty() && e.output_sizes != e.input_sizes {
        out.push(shapes_text(&e.output_sizes));
    }
    if !e.output_dtypes.is_empty() && e.output_dtypes != e.input_dtypes {
        out.push(dtypes_text(&e.output_dtypes));
    }
    if !out.is_empty() {
        s.push_str(" -> ");
        s.push_str(&out.join(" "));
    }
    s
}

/// A slot as people read it: the call, or a coalesced group and its size.
fn slot_text(s: &Slot) -> String {
    match s.parts.len() {
        0 => call_text(s.entry),
        n => format!("{} of {n} ops", s.entry.op),
    }
}

/// What a rank did at `seq`, against the call it should have matched: for
/// a coalesced group, the first of its ops that differs.
fn doing(s: &Slot, reference: Option<&Signature>) -> String {
    let seq = s.seq;
    let parts: Vec<Signature> = s.parts.iter().map(|e| entry_signature(e)).collect();
    let odd = reference.and_then(|r| {
        (!parts.is_empty() && r.op == canonical_op(&s.entry.op))
            .then(|| (0..parts.len()).find(|i| r.parts.get(*i) != Some(&parts[*i])))?
    });
    match odd {
        Some(i) => format!(
            "called {} as op {} of {} in {} #{seq}",
            call_text(s.parts[i]),
            i + 1,
            parts.len(),
            s.entry.op
        ),
        None => format!("called {} as #{seq}", slot_text(s)),
    }
}

/// A timed-out entry (gloo marks it completed): its span reached its
/// timeout.
fn timed_out(e: &Entry) -> bool {
    let Some(limit) = e.timeout_ms.filter(|t| *t > 0) else {
        return false;
    };
    let span_ms = match (e.time_completed_ns, e.duration_ms) {
        (Some(done), _) if done > e.time_created_ns => {
            Some((done - e.time_created_ns) as f64 / 1e6)
        }
        (_, Some(d)) => Some(d),
        _ => None,
    };
    span_ms.is_some_and(|ms| ms >= limit as f64 * 0.99)
}

/// Whether the job's backend records completion: some entry of some rank
/// reads started or completed (NCCL does; gloo in torch 2.15 leaves every
/// entry `scheduled` and only retires what it is done with).
pub fn records_completion(traces: &[RankTrace]) -> bool {
    completes_in(traces.iter())
}

fn completes_in<'a>(mut traces: impl Iterator<Item = &'a RankTrace>) -> bool {
    traces.any(|t| {
        t.entries
            .iter()
            .any(|e| e.state != State::Scheduled || e.time_completed_ns.is_some())
    })
}

/// The latest time any rank enqueued anything (ns).
fn latest_ns<'a>(traces: impl Iterator<Item = &'a RankTrace>) -> u64 {
    traces
        .flat_map(|t| t.entries.iter().map(|e| e.time_created_ns))
        .max()
        .unwrap_or(0)
}

/// Where an entry had got to, in words.
fn state_word(e: &Entry, completes: bool) -> &'static str {
    if timed_out(e) {
        "timed out"
    } else if finished(e, completes) {
        "completed"
    } else if e.retired {
        "retired without completing"
    } else {
        match e.state {
            State::Started => "started, not finished",
            _ => "not finished",
        }
    }
}

/// Finished for real, not by a timeout: completed, or, where the backend
/// records no completion (gloo), retired.
fn finished(e: &Entry, completes: bool) -> bool {
    !timed_out(e) && (e.state == State::Completed || (e.retired && !completes))
}

/// The wavefront of one group: the first sequence at which its ranks with
/// dumps disagree, or at which they all wait and it does not finish.
pub fn group_wavefront(group: &Group, traces: &[&RankTrace]) -> Option<Wavefront> {
    let completes = completes_in(traces.iter().copied());
    wave_of(group, traces, completes, latest_ns(traces.iter().copied()))
}

fn wave_of(
    group: &Group,
    traces: &[&RankTrace],
    completes: bool,
    latest_ns: u64,
) -> Option<Wavefront> {
    wave_from(group, &lanes_of(group, traces, completes), latest_ns)
}

/// The lanes of a group's members with dumps, in trace order.
fn lanes_of<'a>(group: &Group, traces: &[&'a RankTrace], completes: bool) -> Vec<Lane<'a>> {
    traces
        .iter()
        .filter(|t| group.members.contains(&t.rank))
        .map(|t| Lane::new(t, &group.name, completes))
        .collect()
}

fn wave_from(group: &Group, lanes: &[Lane], latest_ns: u64) -> Option<Wavefront> {
    let top = lanes.iter().filter_map(|l| l.last).max()?;
    // Below the latest first entry some rank's ring buffer has lost it.
    let from = lanes.iter().filter_map(Lane::first).max().unwrap_or(top);
    // The sequences some rank recorded (never the bare numeric range: a
    // dump's numbers are not trusted to be small).
    let seqs: BTreeSet<u64> = lanes
        .iter()
        .flat_map(|l| l.by_seq.iter().map(|s| s.seq))
        .filter(|s| *s >= from)
        .collect();
    for seq in seqs {
        if let Some(w) = judge_seq(group, lanes, seq) {
            return Some(w);
        }
    }
    stuck(group, lanes, top, latest_ns)
}

fn judge_seq(group: &Group, lanes: &[Lane], seq: u64) -> Option<Wavefront> {
    let present: Vec<(&Lane, &Slot)> = lanes
        .iter()
        .filter_map(|l| l.at(seq).map(|s| (l, s)))
        .collect();
    let behind: Vec<&Lane> = lanes
        .iter()
        .filter(|l| l.last.is_none_or(|last| last < seq))
        .collect();
    let (_, first) = *present.first()?;
    // Every rank there, each with the same call: the common case, decided
    // without building a wavefront.
    if behind.is_empty() && present.iter().all(|(_, s)| plainly_same(s, first)) {
        return None;
    }
    let mut w = Wavefront {
        group: group.clone(),
        seq,
        op: canonical_op(&first.entry.op).to_string(),
        call: slot_text(first),
        kind: WaveKind::NotJoined,
        blamed: Vec::new(),
        waiting: present.iter().map(|(l, _)| l.rank).collect(),
        time_ns: present.iter().map(|(_, s)| s.entry.time_created_ns).min()?,
        stopped: None,
    };
    if !behind.is_empty() {
        if behind.len() > present.len() {
            w.kind = WaveKind::Ahead;
            w.blamed = present
                .iter()
                .map(|(l, s)| Blamed {
                    rank: l.rank,
                    doing: format!(
                        "called {} as #{seq}, which the others never called",
                        slot_text(s)
                    ),
                })
                .collect();
            w.waiting = behind.iter().map(|l| l.rank).collect();
        } else {
            w.blamed = behind
                .iter()
                .map(|l| Blamed {
                    rank: l.rank,
                    doing: l.last_doing(),
                })
                .collect();
        }
        return Some(w);
    }
    mismatch(w, &present)
}

/// The disagreement among ranks that all entered `seq`, if any.
fn mismatch(mut w: Wavefront, present: &[(&Lane, &Slot)]) -> Option<Wavefront> {
    let mut sides: BTreeMap<Signature, Vec<(u32, &Slot)>> = BTreeMap::new();
    for (l, s) in present {
        sides.entry(signature(s)).or_default().push((l.rank, s));
    }
    if sides.len() < 2 {
        return None;
    }
    let (major_sig, major) = sides
        .iter()
        .max_by_key(|(_, v)| v.len())
        .map(|(s, v)| (s.clone(), v.clone()))?;
    if major.len() * 2 > present.len() {
        w.kind = WaveKind::Mismatch;
        w.op = major_sig.op.to_string();
        w.call = slot_text(major[0].1);
        w.waiting = major.iter().map(|(r, _)| *r).collect();
        w.blamed = sides
            .iter()
            .filter(|(s, _)| **s != major_sig)
            .flat_map(|(_, v)| v.iter())
            .map(|(r, s)| Blamed {
                rank: *r,
                doing: doing(s, Some(&major_sig)),
            })
            .collect();
    } else {
        w.kind = WaveKind::Split;
        w.waiting.clear();
        let (first_sig, _) = sides.iter().next()?;
        let first_sig = first_sig.clone();
        w.blamed = sides
            .iter()
            .flat_map(|(sig, v)| v.iter().map(move |x| (sig, x)))
            .map(|(sig, (r, s))| Blamed {
                rank: *r,
                doing: if *sig == first_sig {
                    doing(s, None)
                } else {
                    doing(s, Some(&first_sig))
                },
            })
            .collect();
    }
    w.blamed.sort_by_key(|b| b.rank);
    Some(w)
}

/// Every rank entered the group's last collective alike. It is a
/// wavefront only when it has not finished on some rank and finished on
/// none: a rank that finished it shows the collective ran (a dump taken
/// as it returned finds the others retiring it), unless the dumps show
/// that it stopped ([`stop_evidence`]).
fn stuck(group: &Group, lanes: &[Lane], top: u64, latest_ns: u64) -> Option<Wavefront> {
    let at_top: Vec<(&Lane, &Slot)> = lanes
        .iter()
        .filter_map(|l| l.at(top).map(|s| (l, s)))
        .collect();
    let (first_lane, first) = *at_top.first()?;
    let completes = first_lane.completes;
    let done = |s: &Slot| finished(s.entry, completes);
    if at_top.iter().all(|(_, s)| done(s)) {
        return None;
    }
    let stopped = stop_evidence(&at_top, latest_ns);
    if stopped.is_none() && at_top.iter().any(|(_, s)| done(s)) {
        return None;
    }
    Some(Wavefront {
        group: group.clone(),
        seq: top,
        op: canonical_op(&first.entry.op).to_string(),
        call: slot_text(first),
        kind: WaveKind::Stuck,
        blamed: Vec::new(),
        waiting: at_top.iter().map(|(l, _)| l.rank).collect(),
        time_ns: at_top.iter().map(|(_, s)| s.entry.time_created_ns).min()?,
        stopped,
    })
}

/// What in the dumps shows that a collective every rank entered stopped
/// rather than ran on: a rank's entry timed out (its span reached its
/// timeout); a backend that records completion retired it without
/// completing it (NCCL's watchdog retires a collective that timed out or
/// was aborted); or some rank recorded another collective later than the
/// collective's timeout after it began. None when nothing does: then the
/// dumps read as any dump of a running job does.
fn stop_evidence(at_top: &[(&Lane, &Slot)], latest_ns: u64) -> Option<String> {
    if let Some((l, s)) = at_top.iter().find(|(_, s)| timed_out(s.entry)) {
        let secs = s.entry.timeout_ms.unwrap_or(0) as f64 / 1e3;
        return Some(format!(
            "rank {}'s entry timed out after {secs:.0} s",
            l.rank
        ));
    }
    if let Some((l, _)) = at_top
        .iter()
        .find(|(l, s)| l.completes && s.entry.retired && s.entry.state != State::Completed)
    {
        return Some(format!(
            "rank {}'s recorder retired it without completing it (a timeout or an abort)",
            l.rank
        ));
    }
    let began = at_top.iter().map(|(_, s)| s.entry.time_created_ns).min()?;
    let limit_ms = at_top
        .iter()
        .filter_map(|(_, s)| s.entry.timeout_ms.filter(|t| *t > 0))
        .min()?;
    let waited_ms = latest_ns.saturating_sub(began) / 1_000_000;
    (waited_ms >= limit_ms).then(|| {
        format!(
            "a rank recorded a collective {:.0} s after it began, past its timeout of {:.0} s",
            waited_ms as f64 / 1e3,
            limit_ms as f64 / 1e3
        )
    })
}

/// The ranks inside a wavefront's collective, waiting in it.
fn inside(w: &Wavefront) -> Vec<u32> {
    match w.kind {
        WaveKind::NotJoined | WaveKind::Stuck => w.waiting.clone(),
        WaveKind::Ahead | WaveKind::Split => w.blamed_ranks(),
        WaveKind::Mismatch => {
            let mut all = w.waiting.clone();
            all.extend(w.blamed_ranks());
            all
        }
    }
}

/// Every process group's own wavefront, earliest first, each naming only
/// its culprits. A rank named in one group's wavefront that waits inside
/// another group's collective is not a culprit there: it only waits (its
/// own group's culprit is named). A group left with no culprit is not
/// shown, and a group whose ranks all wait alike ([`WaveKind::Stuck`]) is
/// shown only when no group has a culprit (a disagreement explains a stuck
/// group, never the reverse). Where every group's culprits wait in another
/// group (ranks that call two groups' collectives in opposite orders), the
/// earliest wavefront is kept whole. A group whose members all lack dumps
/// has none.
pub fn wavefronts(traces: &[RankTrace], members: &Membership) -> Vec<Wavefront> {
    let refs: Vec<&RankTrace> = traces.iter().collect();
    let completes = records_completion(traces);
    let latest = latest_ns(traces.iter());
    let all: Vec<Wavefront> = members
        .groups
        .values()
        .filter_map(|g| wave_of(g, &refs, completes, latest))
        .map(|w| blame_absent(w, members))
        .collect();
    kept_waves(all)
}

/// Of every group's wavefront, the ones [`wavefronts`] shows.
fn kept_waves(mut all: Vec<Wavefront>) -> Vec<Wavefront> {
    all.sort_by_key(|w| (w.kind == WaveKind::Stuck, w.time_ns));
    let insides: Vec<Vec<u32>> = all.iter().map(inside).collect();
    let mut kept: Vec<Wavefront> = Vec::new();
    for (i, w) in all.iter().enumerate() {
        let mut w = w.clone();
        let waits_elsewhere = |r: u32| (0..all.len()).any(|j| j != i && insides[j].contains(&r));
        w.blamed.retain(|b| !waits_elsewhere(b.rank));
        if !w.blamed.is_empty() || w.kind == WaveKind::Stuck {
            kept.push(w);
        }
    }
    if kept.iter().any(|w| w.kind != WaveKind::Stuck) {
        kept.retain(|w| w.kind != WaveKind::Stuck);
    } else {
        kept.truncate(1);
    }
    if kept.is_empty() {
        kept.extend(all.into_iter().next());
    }
    kept
}

/// What job.hang and job.straggler judge, from one pass over each
/// group's lanes (its members' entries by sequence number, built once):
/// the wavefronts, the entry times of the collectives entered alike, and
/// the stragglers found in them.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// As [`wavefronts`] gives them.
    pub waves: Vec<Wavefront>,
    pub timing: Timing,
    /// As [`stragglers`] gives them.
    pub stragglers: Vec<Straggler>,
}

/// The [`Index`] of a job's dumps.
pub fn index(traces: &[RankTrace], members: &Membership) -> Index {
    let refs: Vec<&RankTrace> = traces.iter().collect();
    let completes = records_completion(traces);
    let latest = latest_ns(traces.iter());
    let mut waves = Vec::new();
    let mut timing = Timing::default();
    for g in members.groups.values() {
        let lanes = lanes_of(g, &refs, completes);
        waves.extend(wave_from(g, &lanes, latest).map(|w| blame_absent(w, members)));
        timing
            .groups
            .extend(times_of(&lanes).map(|t| (g.clone(), t)));
    }
    let stragglers = stragglers_in(&timing);
    Index {
        waves: kept_waves(waves),
        timing,
        stragglers,
    }
}

/// Every rank with a dump waits in a stuck collective: the members without
/// one are what it waits for.
fn blame_absent(mut w: Wavefront, members: &Membership) -> Wavefront {
    let absent: Vec<u32> = w
        .group
        .members
        .iter()
        .copied()
        .filter(|r| members.missing.contains(r))
        .collect();
    if w.kind == WaveKind::Stuck && !absent.is_empty() {
        w.kind = WaveKind::NotJoined;
        w.stopped = None;
        w.blamed = absent
            .into_iter()
            .map(|rank| Blamed {
                rank,
                doing: "left no dump".to_string(),
            })
            .collect();
    }
    w
}

/// The job's first wavefront ([`wavefronts`]' earliest).
pub fn wavefront(traces: &[RankTrace], members: &Membership) -> Option<Wavefront> {
    wavefronts(traces, members).into_iter().next()
}

/// A rank that enters a group's collectives late again and again.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub rank: u32,
    pub group: Group,
    /// Median lateness against the other ranks, ms.
    pub median_ms: f64,
    /// Worst lateness, ms.
    pub worst_ms: f64,
    /// How many collectives were compared.
    pub compared: usize,
}

/// Median lateness (ms) at or above which a rank is a straggler: below it,
/// scheduling and data loading jitter.
pub const STRAGGLER_MIN_MS: f64 = 20.0;
/// Collectives a rank must be compared over before it can be called a
/// straggler: one late entry is noise.
pub const STRAGGLER_MIN_COMPARED: usize = 5;

/// One collective a rank entered far later than the other ranks of its
/// group, once: the job went on, but every other rank waited for it.
#[derive(Debug, Clone, PartialEq)]
pub struct LateEntry {
    pub rank: u32,
    pub group: Group,
    pub seq: u64,
    pub op: String,
    /// How late, against the median of the others, ms.
    pub late_ms: f64,
    /// The ranks that entered it on time.
    pub others: Vec<u32>,
}

/// Lateness (ms) below which one late entry is never named: a garbage
/// collection, a data loader's hiccup or a log flush delays a rank by tens
/// to hundreds of ms now and then (`straggler_once` in the fixtures: 400
/// ms, noise), while a rank that keeps the others waiting for seconds did
/// something of its own (a checkpoint, an evaluation, a stalled file
/// system). 2 s is five times the noise the fixtures show and far below any
/// collective timeout (PyTorch's default: 10 min for NCCL, 30 min for
/// gloo), so such an entry is seen in a job that went on.
pub const LATE_ONCE_MIN_MS: f64 = 2_000.0;
/// ... and it must exceed this many times the group's usual spread (the
/// 90th percentile of every rank's lateness over every compared
/// collective), so that a job whose ranks routinely drift by a second (ranks
/// on nodes with unsynchronised clocks, a straggler that is late at every
/// step) does not name its ordinary drift.
pub const LATE_ONCE_SPREAD_FACTOR: f64 = 20.0;

/// The entry times (ms) of one group's ranks at each collective they all
/// entered alike, with the ranks in lane order.
#[derive(Debug, Clone, Default)]
pub struct Times {
    ranks: Vec<u32>,
    /// (seq, op, one time per rank).
    rows: Vec<(u64, String, Vec<f64>)>,
}

/// Every group's [`Times`]: what lateness is measured on.
#[derive(Debug, Clone, Default)]
pub struct Timing {
    groups: Vec<(Group, Times)>,
}

/// The [`Timing`] of a job's dumps.
pub fn timing(traces: &[RankTrace], members: &Membership) -> Timing {
    let refs: Vec<&RankTrace> = traces.iter().collect();
    let groups = members
        .groups
        .values()
        .filter_map(|g| times_of(&lanes_of(g, &refs, false)).map(|t| (g.clone(), t)))
        .collect();
    Timing { groups }
}

fn times_of(lanes: &[Lane]) -> Option<Times> {
    if lanes.len() < 2 {
        return None;
    }
    let mut rows = Vec::new();
    for seq in lanes[0].by_seq.iter().map(|s| s.seq) {
        let slots: Option<Vec<&Slot>> = lanes.iter().map(|l| l.at(seq)).collect();
        let Some(slots) = slots else { continue };
        let alike = slots.iter().all(|s| plainly_same(s, slots[0])) || {
            let sig = signature(slots[0]);
            slots.iter().all(|s| signature(s) == sig)
        };
        if !alike {
            continue;
        }
        let times = slots
            .iter()
            .map(|s| s.entry.time_created_ns as f64 / 1e6)
            .collect();
        rows.push((seq, canonical_op(&slots[0].entry.op).to_string(), times));
    }
    Some(Times {
        ranks: lanes.iter().map(|l| l.rank).collect(),
        rows,
    })
}

/// The most collectives any process group's ranks all entered alike: how
/// much evidence of lateness the recorders hold (0 when none was read).
pub fn lateness_evidence(traces: &[RankTrace], members: &Membership) -> usize {
    lateness_evidence_in(&timing(traces, members))
}

/// [`lateness_evidence`] of a [`Timing`] built before.
pub fn lateness_evidence_in(timing: &Timing) -> usize {
    timing
        .groups
        .iter()
        .map(|(_, t)| t.rows.len())
        .max()
        .unwrap_or(0)
}

/// Ranks that start collectives late, per group, judged over every
/// collective all the group's ranks with dumps entered alike. Lateness is
/// the rank's enqueue time minus the median of the others'. Where a rank
/// is late in several groups, the group with the most evidence is kept.
pub fn stragglers(traces: &[RankTrace], members: &Membership) -> Vec<Straggler> {
    stragglers_in(&timing(traces, members))
}

/// [`stragglers`] of a [`Timing`] built before.
pub fn stragglers_in(timing: &Timing) -> Vec<Straggler> {
    best_per_rank(timing, STRAGGLER_MIN_MS)
}

/// Every rank's lateness into collectives, as [`stragglers`] measures it
/// (straggler or not), where it was compared over at least
/// [`STRAGGLER_MIN_COMPARED`] collectives; each rank once, in the group
/// with the most evidence, by rank.
pub fn lateness(traces: &[RankTrace], members: &Membership) -> Vec<Straggler> {
    lateness_in(&timing(traces, members))
}

/// [`lateness`] of a [`Timing`] built before.
pub fn lateness_in(timing: &Timing) -> Vec<Straggler> {
    best_per_rank(timing, f64::NEG_INFINITY)
}

/// Each rank's lateness of at least `min_ms`, in the group where it was
/// compared over the most collectives.
fn best_per_rank(timing: &Timing, min_ms: f64) -> Vec<Straggler> {
    let mut best: BTreeMap<u32, Straggler> = BTreeMap::new();
    for (g, times) in &timing.groups {
        for s in group_lateness(g, times)
            .into_iter()
            .filter(|s| s.median_ms >= min_ms)
        {
            let keep = best.get(&s.rank).is_none_or(|b| s.compared > b.compared);
            if keep {
                best.insert(s.rank, s);
            }
        }
    }
    best.into_values().collect()
}

/// Each rank's median and worst lateness in `group`, for the ranks
/// compared over at least [`STRAGGLER_MIN_COMPARED`] collectives.
fn group_lateness(group: &Group, times: &Times) -> Vec<Straggler> {
    let mut late: Vec<Vec<f64>> = vec![Vec::new(); times.ranks.len()];
    let mut sorted: Vec<f64> = Vec::with_capacity(times.ranks.len());
    for (_, _, row) in &times.rows {
        sorted.clone_from(row);
        let all = median(&mut sorted);
        for (i, t) in row.iter().enumerate() {
            // With two ranks the other's time; with more, the median of all
            // (one late rank does not move it).
            let reference = match row.len() {
                2 => row[1 - i],
                _ => all,
            };
            late[i].push(t - reference);
        }
    }
    times
        .ranks
        .iter()
        .zip(late)
        .filter_map(|(rank, mut v)| {
            if v.len() < STRAGGLER_MIN_COMPARED {
                return None;
            }
            let worst = v.iter().copied().fold(f64::MIN, f64::max);
            Some(Straggler {
                rank: *rank,
                group: group.clone(),
                median_ms: median(&mut v),
                worst_ms: worst,
                compared: v.len(),
            })
        })
        .collect()
}

/// Single entries far later than the others ([`LATE_ONCE_MIN_MS`],
/// [`LATE_ONCE_SPREAD_FACTOR`]), latest first. Lateness here is against
/// the median of the other ranks, so that two ranks late together are
/// each seen late.
pub fn late_entries(traces: &[RankTrace], members: &Membership) -> Vec<LateEntry> {
    late_entries_in(&timing(traces, members))
}

/// [`late_entries`] of a [`Timing`] built before.
pub fn late_entries_in(timing: &Timing) -> Vec<LateEntry> {
    let mut found: Vec<LateEntry> = timing
        .groups
        .iter()
        .flat_map(|(g, times)| group_late_entries(g, times))
        .collect();
    found.sort_by(|a, b| b.late_ms.total_cmp(&a.late_ms));
    found
}

fn group_late_entries(group: &Group, times: &Times) -> Vec<LateEntry> {
    // (row, rank index, lateness against the median of the others).
    let mut late: Vec<(usize, usize, f64)> = Vec::new();
    let mut order: Vec<usize> = Vec::with_capacity(times.ranks.len());
    for (r, (_, _, row)) in times.rows.iter().enumerate() {
        order.clear();
        order.extend(0..row.len());
        order.sort_by(|a, b| row[*a].total_cmp(&row[*b]));
        for (p, i) in order.iter().enumerate() {
            late.push((r, *i, row[*i] - median_without(row, &order, p)));
        }
    }
    let mut spread: Vec<f64> = late.iter().map(|(_, _, l)| l.abs()).collect();
    spread.sort_by(f64::total_cmp);
    let p90 = spread.get(spread.len() * 9 / 10).copied().unwrap_or(0.0);
    let limit = LATE_ONCE_MIN_MS.max(LATE_ONCE_SPREAD_FACTOR * p90);
    late.iter()
        .filter(|(_, _, l)| *l >= limit)
        .map(|(r, i, l)| {
            let (seq, op, row) = &times.rows[*r];
            let on_time = |j: usize| j != *i && row[*i] - row[j] >= limit;
            LateEntry {
                rank: times.ranks[*i],
                group: group.clone(),
                seq: *seq,
                op: op.clone(),
                late_ms: *l,
                others: (0..row.len())
                    .filter(|j| on_time(*j))
                    .map(|j| times.ranks[j])
                    .collect(),
            }
        })
        .collect()
}

/// The median of `row` without its element at sorted position `skip`
/// (`order` sorts `row`), in constant time.
fn median_without(row: &[f64], order: &[usize], skip: usize) -> f64 {
    let m = order.len() - 1;
    // The k-th of the others, in sorted order.
    let kth = |k: usize| row[order[if k < skip { k } else { k + 1 }]];
    match m {
        0 => row[order[skip]],
        _ if m % 2 == 1 => kth(m / 2),
        _ => (kth(m / 2 - 1) + kth(m / 2)) / 2.0,
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// "0, 1, 3" or "0-7" for a run of consecutive ranks; long lists are cut
/// ("0-3, 5, 9, ... (12 ranks)").
pub fn rank_list(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 {
            format!("{}-{}", ranks[i], ranks[j])
        } else if j == i + 1 {
            format!("{}, {}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    const MAX_PARTS: usize = 8;
    if parts.len() > MAX_PARTS {
        let n = ranks.len();
        parts.truncate(MAX_PARTS);
        return format!("{}, ... ({n} ranks)", parts.join(", "));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::flight::{GroupConfig, GroupStatus};

    const MS: u64 = 1_000_000;

    fn entry(group: &str, seq: u64, op: &str, size: i64, state: State) -> Entry {
        Entry {
            record_id: seq,
            group: group.into(),
            group_desc: if group == "0" {
                "default_pg".into()
            } else {
                "undefined".into()
            },
            collective_seq: seq,
            op: op.into(),
            input_sizes: vec![vec![size]].into(),
            input_dtypes: vec!["Float".into()].into(),
            state,
            time_created_ns: (1_000 * MS).saturating_add(seq.saturating_mul(100 * MS)),
            ..Default::default()
        }
    }

    /// A rank that ran `done` healthy all-reduces in the default group.
    fn rank(r: u32, done: u64) -> RankTrace {
        RankTrace {
            rank: r,
            file: format!("rank_{r}"),
            version: "2.10".into(),
            entries: (1..=done)
                .map(|s| entry("0", s, "all_reduce", 4, State::Completed))
                .collect(),
            ..Default::default()
        }
    }

    fn with(mut t: RankTrace, e: Entry) -> RankTrace {
        t.entries.push(e);
        t
    }

    fn judge(traces: &[RankTrace]) -> Option<Wavefront> {
        let ranks: Vec<u32> = traces.iter().map(|t| t.rank).collect();
        wavefront(traces, &membership(traces, &ranks))
    }

    fn blamed(traces: &[RankTrace]) -> (WaveKind, Vec<u32>) {
        let w = judge(traces).expect("a wavefront");
        (w.kind, w.blamed_ranks())
    }

    #[test]
    fn a_healthy_job_has_no_wavefront() {
        let t = vec![rank(0, 5), rank(1, 5), rank(2, 5)];
        assert_eq!(judge(&t), None);
        // Gloo (torch 2.15) records no start or completion: its entries
        // stay `scheduled` and are retired once done.
        let gloo: Vec<RankTrace> = (0..3)
            .map(|r| {
                let mut t = rank(r, 5);
                for e in &mut t.entries {
                    e.state = State::Scheduled;
                    e.retired = true;
                }
                t
            })
            .collect();
        assert_eq!(judge(&gloo), None);
    }

    #[test]
    fn the_rank_that_never_enqueued_is_named_not_the_waiting_ones() {
        let hang = entry("0", 6, "all_reduce", 4, State::Started);
        let t = vec![
            with(rank(0, 5), hang.clone()),
            with(rank(1, 5), hang),
            rank(2, 5),
        ];
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.kind, w.blamed_ranks()), (WaveKind::NotJoined, vec![2]));
        assert_eq!(
            (w.seq, w.op.as_str(), w.waiting.clone()),
            (6, "all_reduce", vec![0, 1])
        );
        assert!(
            w.blamed[0].doing.contains("all_reduce #5"),
            "{:?}",
            w.blamed
        );
    }

    #[test]
    fn gloos_completed_and_retired_after_a_timeout_does_not_hide_the_skip() {
        let mut lie = entry("0", 6, "all_reduce", 4, State::Completed);
        lie.retired = true;
        lie.timeout_ms = Some(5_000);
        lie.time_completed_ns = Some(lie.time_created_ns + 5_001 * MS);
        let t = vec![
            with(rank(0, 5), lie.clone()),
            with(rank(1, 5), lie),
            rank(2, 5),
        ];
        assert_eq!(blamed(&t), (WaveKind::NotJoined, vec![2]));
    }

    #[test]
    fn another_op_size_or_dtype_names_only_the_odd_rank() {
        let ar = entry("0", 6, "all_reduce", 4, State::Started);
        let bc = entry("0", 6, "broadcast", 4, State::Started);
        let t = vec![
            with(rank(0, 5), ar.clone()),
            with(rank(1, 5), bc),
            with(rank(2, 5), ar.clone()),
        ];
        assert_eq!(blamed(&t), (WaveKind::Mismatch, vec![1]));
        // The odd rank first in file order is still the odd one.
        let big = entry("0", 6, "all_reduce", 8, State::Started);
        let t = vec![
            with(rank(0, 5), big),
            with(rank(1, 5), ar.clone()),
            with(rank(2, 5), ar.clone()),
        ];
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.kind, w.blamed_ranks()), (WaveKind::Mismatch, vec![0]));
        assert_eq!(w.call, "all_reduce [4] Float");
        let mut double = ar.clone();
        double.input_dtypes = vec!["Double".into()].into();
        let t = vec![
            with(rank(0, 5), ar.clone()),
            with(rank(1, 5), ar),
            with(rank(2, 5), double),
        ];
        assert_eq!(blamed(&t), (WaveKind::Mismatch, vec![2]));
    }

    #[test]
    fn two_ranks_that_disagree_are_both_named() {
        let t = vec![
            with(rank(0, 5), entry("0", 6, "all_reduce", 4, State::Started)),
            with(rank(1, 5), entry("0", 6, "all_reduce", 6, State::Started)),
        ];
        assert_eq!(blamed(&t), (WaveKind::Split, vec![0, 1]));
    }

    #[test]
    fn a_lone_rank_ahead_of_the_rest_is_the_one_named() {
        let extra = entry("0", 6, "all_reduce", 4, State::Started);
        let t = vec![with(rank(0, 5), extra), rank(1, 5), rank(2, 5), rank(3, 5)];
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.kind, w.blamed_ranks()), (WaveKind::Ahead, vec![0]));
        assert_eq!(w.waiting, vec![1, 2, 3]);
    }

    #[test]
    fn every_rank_in_a_collective_that_does_not_finish_blames_none() {
        let hang = entry("0", 6, "all_reduce", 4, State::Started);
        let t: Vec<RankTrace> = (0..4).map(|r| with(rank(r, 5), hang.clone())).collect();
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.kind, w.seq, w.blamed.len()), (WaveKind::Stuck, 6, 0));
        assert_eq!(w.waiting, vec![0, 1, 2, 3]);
        // Gloo's timed-out entries read completed: still stuck.
        let mut lie = entry("0", 6, "all_reduce", 4, State::Completed);
        lie.timeout_ms = Some(1_000);
        lie.duration_ms = Some(1_000.0);
        let t: Vec<RankTrace> = (0..3).map(|r| with(rank(r, 5), lie.clone())).collect();
        assert_eq!(blamed(&t), (WaveKind::Stuck, vec![]));
    }

    #[test]
    fn a_subgroup_hang_names_its_absent_member_and_no_rank_outside_it() {
        let mut t = vec![rank(0, 5), rank(1, 5), rank(2, 5), rank(3, 5)];
        for tr in &mut t {
            tr.groups.insert(
                "1".into(),
                GroupConfig {
                    name: "1".into(),
                    desc: "undefined".into(),
                    ranks: vec![2, 3],
                },
            );
        }
        for s in 1..=2 {
            t[2].entries
                .push(entry("1", s, "all_reduce", 4, State::Completed));
            t[3].entries
                .push(entry("1", s, "all_reduce", 4, State::Completed));
        }
        t[2].entries
            .push(entry("1", 3, "all_reduce", 4, State::Started));
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.kind, w.blamed_ranks()), (WaveKind::NotJoined, vec![3]));
        assert_eq!(w.group.members, vec![2, 3]);
        assert_eq!(w.group.label(), "group 1 (ranks 2, 3)");
    }

    #[test]
    fn a_rank_whose_dump_holds_no_entries_is_named() {
        let t = vec![rank(0, 5), rank(1, 5), rank(2, 0)];
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.kind, w.blamed_ranks()), (WaveKind::NotJoined, vec![2]));
        assert!(w.blamed[0].doing.contains("no entries"));
    }

    /// An entry with output shapes and dtypes as well (`input`, `output`).
    fn call(seq: u64, op: &str, input: &[i64], output: &[i64], dtype: &str) -> Entry {
        let mut e = entry("0", seq, op, 0, State::Completed);
        e.input_sizes = vec![input.to_vec()].into();
        e.output_sizes = vec![output.to_vec()].into();
        e.input_dtypes = vec![dtype.into()].into();
        e.output_dtypes = vec![dtype.into()].into();
        e
    }

    #[test]
    fn uneven_gathers_coalesced_and_out_of_place_calls_match() {
        let mut t = vec![rank(0, 5), rank(1, 5), rank(2, 5)];
        for (i, tr) in t.iter_mut().enumerate() {
            let n = i as i64 + 1;
            // all_gather_v: each rank gives its own size, all get them all.
            tr.entries
                .push(call(6, "all_gather_v", &[n], &[6], "Float"));
            // An uneven all-gather as PyTorch records it: one out-of-place
            // broadcast per rank's part, coalesced.
            for k in 0..3 {
                tr.entries
                    .push(call(7, "_broadcast_oop", &[k + 1], &[k + 1], "Float"));
            }
            tr.entries
                .push(call(7, "ALLGATHER_coalesced", &[], &[], "Float"));
            let bc = if i == 0 {
                "_broadcast_oop"
            } else {
                "broadcast"
            };
            tr.entries.push(call(8, bc, &[4], &[4], "Float"));
            // Only the root's gather holds outputs; only the root's
            // scatter inputs.
            let root = i == 0;
            tr.entries.push(call(
                9,
                "gather",
                &[4],
                if root { &[12] } else { &[] },
                "Float",
            ));
            tr.entries.push(call(
                10,
                "scatter",
                if root { &[12] } else { &[] },
                &[4],
                "Float",
            ));
            let mut send = entry("0", 0, "send", n, State::Started);
            send.is_p2p = true;
            send.p2p_seq = 1;
            tr.entries.push(send);
        }
        assert_eq!(judge(&t), None);
    }

    #[test]
    fn a_coalesced_group_under_one_sequence_matches_as_one() {
        let mut t = vec![rank(0, 5), rank(1, 5), rank(2, 5)];
        for (i, tr) in t.iter_mut().enumerate() {
            // The group's entry comes first on rank 0, last on the others.
            let ops = [
                call(6, "all_reduce", &[2], &[2], "Float"),
                call(6, "all_reduce", &[8], &[8], "Float"),
            ];
            let group = call(6, "coalesced", &[], &[], "Float");
            if i == 0 {
                tr.entries.push(group);
                tr.entries.extend(ops);
            } else {
                tr.entries.extend(ops);
                tr.entries.push(group);
            }
        }
        assert_eq!(judge(&t), None);
    }

    #[test]
    fn an_op_of_another_size_inside_a_coalesced_group_names_its_rank() {
        // PyTorch's test_fr_analysis.py, testBuildDB case 4: an uneven
        // all-gather whose second out-of-place broadcast differs.
        let mut t = vec![rank(0, 5), rank(1, 5), rank(2, 5)];
        for (i, tr) in t.iter_mut().enumerate() {
            let second = if i == 1 { 5 } else { 4 };
            tr.entries
                .push(call(6, "_broadcast_oop", &[4, 4], &[4, 4], "float32"));
            tr.entries.push(call(
                6,
                "_broadcast_oop",
                &[second, second],
                &[second, second],
                "float32",
            ));
            tr.entries
                .push(call(6, "ALLGATHER_coalesced", &[], &[], "float32"));
        }
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.kind, w.blamed_ranks()), (WaveKind::Mismatch, vec![1]));
        assert_eq!(
            w.blamed[0].doing,
            "called _broadcast_oop [5, 5] float32 as op 2 of 2 in ALLGATHER_coalesced #6"
        );
        assert_eq!(w.call, "ALLGATHER_coalesced of 2 ops");
    }

    #[test]
    fn outputs_and_dtype_sets_are_compared_as_pytorchs_analyzer_does() {
        let odd = |e: Entry| {
            let t: Vec<RankTrace> = (0..3)
                .map(|r| {
                    let healthy = call(6, &e.op, &[4, 4], &[4, 4], "float32");
                    with(rank(r, 5), if r == 2 { e.clone() } else { healthy })
                })
                .collect();
            blamed(&t)
        };
        let mismatch = (WaveKind::Mismatch, vec![2]);
        // Out-of-place broadcast: same input, another output.
        assert_eq!(
            odd(call(6, "_broadcast_oop", &[4, 4], &[5, 5], "float32")),
            mismatch
        );
        // test_fr_analysis.py's e10: the output dtype differs (float16).
        let mut half = call(6, "all_reduce", &[4, 4], &[4, 4], "float32");
        half.output_dtypes = vec!["float16".into()].into();
        assert_eq!(odd(half), mismatch);
        // A coalesced all-gather of one entry: another output.
        assert_eq!(
            odd(call(
                6,
                "all_gather_into_tensor_coalesced",
                &[4, 4],
                &[9, 4],
                "float32"
            )),
            mismatch
        );
        // A broadcast's input dtype is not compared (the analyzer's rule);
        // its output dtype is.
        let mut bc = call(6, "broadcast", &[4, 4], &[4, 4], "float32");
        bc.input_dtypes = vec!["float64".into()].into();
        assert_eq!(judge_one(bc.clone()), None);
        bc.output_dtypes = vec!["float64".into()].into();
        assert_eq!(odd(bc), mismatch);
        // Dtypes compare as sets: a repeated name is the same set.
        let mut twice = call(6, "all_reduce", &[4, 4], &[4, 4], "float32");
        twice.input_dtypes = vec!["float32".into(), "float32".into()].into();
        assert_eq!(judge_one(twice), None);
        // all_to_all compares its dtypes only.
        let a2a = call(6, "all_to_all", &[3], &[7], "float32");
        assert_eq!(judge_one(a2a), None);
    }

    /// Ranks 0 and 1 call `all_reduce [4, 4] float32` as #6 and rank 2
    /// calls `e` (with e's op, on every rank the same op): the verdict.
    fn judge_one(e: Entry) -> Option<Wavefront> {
        let t: Vec<RankTrace> = (0..3)
            .map(|r| {
                let healthy = call(6, &e.op, &[4, 4], &[4, 4], "float32");
                with(rank(r, 5), if r == 2 { e.clone() } else { healthy })
            })
            .collect();
        judge(&t)
    }

    #[test]
    fn groups_are_rebuilt_from_entries_when_pg_config_is_broken() {
        let mut t = vec![rank(0, 3), rank(1, 3), rank(3, 3)];
        // torch 2.15's gloo dump: pg_config under an empty name.
        t[0].groups.insert(
            String::new(),
            GroupConfig {
                name: String::new(),
                desc: String::new(),
                ranks: vec![0, 1, 2, 3],
            },
        );
        let m = membership(&t, &[0, 1, 3]);
        assert_eq!(m.world, vec![0, 1, 2, 3]);
        assert_eq!(m.missing, vec![2]);
        assert_eq!(m.groups["0"].members, vec![0, 1, 2, 3]);
        assert_eq!(m.groups["0"].label(), "group 0 (default_pg)");
    }

    #[test]
    fn a_ring_buffer_that_lost_old_entries_blames_nobody() {
        let mut early = rank(0, 30);
        early.entries.drain(..10);
        let t = vec![early, rank(1, 30), rank(2, 30)];
        assert_eq!(judge(&t), None);
    }

    #[test]
    fn huge_sequence_numbers_end_at_once() {
        let far = entry("0", u64::MAX - 1, "all_reduce", 4, State::Started);
        let t = vec![with(rank(0, 5), far), rank(1, 5), rank(2, 5)];
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.kind, w.blamed_ranks()), (WaveKind::Ahead, vec![0]));
        // One against one: the rank that has not joined is named.
        let t = vec![
            with(rank(0, 5), entry("0", u64::MAX, "x", 1, State::Started)),
            rank(1, 5),
        ];
        assert_eq!(blamed(&t), (WaveKind::NotJoined, vec![1]));
    }

    fn straggling(late_ms: &[(u32, u64, u64)], n: u32, steps: u64) -> Vec<Straggler> {
        let t: Vec<RankTrace> = (0..n)
            .map(|r| {
                let mut tr = rank(r, steps);
                for (lr, from, ms) in late_ms.iter().filter(|(lr, _, _)| *lr == r) {
                    let _ = lr;
                    for e in tr.entries.iter_mut().filter(|e| e.collective_seq >= *from) {
                        e.time_created_ns += ms * MS;
                    }
                }
                tr
            })
            .collect();
        let ranks: Vec<u32> = (0..n).collect();
        stragglers(&t, &membership(&t, &ranks))
    }

    #[test]
    fn a_rank_late_every_step_is_a_straggler_with_its_lateness() {
        let s = straggling(&[(3, 1, 150)], 4, 40);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].rank, 3);
        assert!((s[0].median_ms - 150.0).abs() < 1e-6, "{s:?}");
        assert_eq!(s[0].compared, 40);
    }

    #[test]
    fn one_late_entry_is_noise() {
        let t: Vec<RankTrace> = (0..4)
            .map(|r| {
                let mut tr = rank(r, 40);
                if r == 2 {
                    tr.entries[10].time_created_ns += 400 * MS;
                }
                tr
            })
            .collect();
        assert!(stragglers(&t, &membership(&t, &[0, 1, 2, 3])).is_empty());
        // Too few collectives to tell.
        assert!(straggling(&[(1, 1, 500)], 3, 4).is_empty());
    }

    #[test]
    fn with_two_ranks_the_late_one_is_named_not_both() {
        let s = straggling(&[(1, 1, 100)], 2, 10);
        assert_eq!(s.iter().map(|s| s.rank).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn pg_status_counts_as_enqueued() {
        // Rank 2's ring buffer is empty but pg_status says it got to 6.
        let hang = entry("0", 6, "all_reduce", 4, State::Started);
        let mut r2 = rank(2, 0);
        r2.status.insert(
            "0".into(),
            GroupStatus {
                last_enqueued: Some(6),
                last_started: Some(6),
                last_completed: Some(5),
            },
        );
        let t = vec![with(rank(0, 5), hang.clone()), with(rank(1, 5), hang), r2];
        let w = judge(&t).expect("stuck, not blamed");
        assert!(!w.blamed_ranks().contains(&2), "{w:?}");
    }

    #[test]
    fn ranks_that_wait_for_a_rank_without_dump_name_that_rank() {
        let hang = entry("0", 6, "all_reduce", 4, State::Started);
        let mut t = vec![with(rank(0, 5), hang.clone()), with(rank(1, 5), hang)];
        t[0].groups.insert(
            "0".into(),
            GroupConfig {
                name: "0".into(),
                desc: "default_pg".into(),
                ranks: vec![0, 1, 2],
            },
        );
        let w = wavefront(&t, &membership(&t, &[0, 1])).expect("a wavefront");
        assert_eq!((w.kind, w.blamed_ranks()), (WaveKind::NotJoined, vec![2]));
        assert_eq!(w.blamed[0].doing, "left no dump");
        // A missing rank the others do not wait for is not blamed.
        let t = vec![
            with(rank(0, 5), entry("0", 6, "all_reduce", 4, State::Started)),
            rank(2, 5),
        ];
        let w = wavefront(&t, &membership(&t, &[0, 2])).expect("a wavefront");
        assert_eq!(w.blamed_ranks(), vec![2]);
    }

    /// Ranks 0-3 after 5 healthy steps, with groups "1" (ranks 0, 1) and
    /// "2" (ranks 2, 3) from `pg_config`.
    fn two_groups() -> Vec<RankTrace> {
        let mut t: Vec<RankTrace> = (0..4).map(|r| rank(r, 5)).collect();
        for tr in &mut t {
            for (name, ranks) in [("1", vec![0, 1]), ("2", vec![2, 3])] {
                tr.groups.insert(
                    name.into(),
                    GroupConfig {
                        name: name.into(),
                        desc: "undefined".into(),
                        ranks,
                    },
                );
            }
        }
        t
    }

    fn all_waves(t: &[RankTrace]) -> Vec<(String, WaveKind, Vec<u32>)> {
        let ranks: Vec<u32> = t.iter().map(|t| t.rank).collect();
        wavefronts(t, &membership(t, &ranks))
            .into_iter()
            .map(|w| (w.group.name.clone(), w.kind, w.blamed_ranks()))
            .collect()
    }

    #[test]
    fn each_group_held_up_by_its_own_rank_names_both() {
        let mut t = two_groups();
        let mut late = entry("2", 1, "all_reduce", 4, State::Started);
        late.time_created_ns += 5_000 * MS;
        t[0].entries
            .push(entry("1", 1, "all_reduce", 4, State::Started));
        t[2].entries.push(late);
        let waves = all_waves(&t);
        assert_eq!(
            waves,
            vec![
                ("1".to_string(), WaveKind::NotJoined, vec![1]),
                ("2".to_string(), WaveKind::NotJoined, vec![3]),
            ]
        );
        // `wavefront` is the earliest of them.
        let w = judge(&t).expect("a wavefront");
        assert_eq!((w.group.name.as_str(), w.blamed_ranks()), ("1", vec![1]));
    }

    #[test]
    fn a_rank_that_waits_in_another_group_is_never_named() {
        // Group "2": rank 3 never joins #1, rank 2 waits in it. The default
        // group: ranks 0, 1, 3 wait in #6, which rank 2 (waiting in "2")
        // never reached: rank 2 only waits, rank 3 is the culprit.
        let mut t = two_groups();
        let six = entry("0", 6, "all_reduce", 4, State::Started);
        for r in [0, 1, 3] {
            t[r].entries.push(six.clone());
        }
        t[2].entries
            .push(entry("2", 1, "all_reduce", 4, State::Started));
        assert_eq!(
            all_waves(&t),
            vec![("2".to_string(), WaveKind::NotJoined, vec![3])]
        );
        // Ranks 2 and 3 call the two groups' collectives in opposite orders
        // (each waits inside one): the earliest wavefront is kept whole.
        t[3].entries.retain(|e| e.collective_seq != 6);
        t[3].entries
            .push(entry("0", 7, "all_reduce", 4, State::Started));
        let waves = all_waves(&t);
        assert_eq!(waves.len(), 1, "{waves:?}");
        assert!(!waves[0].2.is_empty(), "{waves:?}");
    }

    /// Three gloo ranks (nothing `completed`, finished entries retired)
    /// whose last collective is `last`, retired on the ranks in `retired`.
    fn gloo_job(last: Entry, retired: &[u32]) -> Vec<RankTrace> {
        (0..3)
            .map(|r| {
                let mut t = with(rank(r, 7), last.clone());
                for e in &mut t.entries {
                    e.state = State::Scheduled;
                    e.retired = e.collective_seq < last.collective_seq || retired.contains(&r);
                }
                t
            })
            .collect()
    }

    #[test]
    fn a_gloo_job_that_finished_is_no_hang() {
        // torch 2.15's gloo: the last barrier retired on ranks 0, 1 and not
        // yet on rank 2 when every rank dumped right after it returned.
        let barrier = call(8, "barrier", &[], &[], "");
        assert_eq!(judge(&gloo_job(barrier.clone(), &[0, 1])), None);
        // Retired nowhere yet: in flight, with nothing that says it stopped.
        let w = judge(&gloo_job(barrier, &[])).expect("in flight");
        assert_eq!((w.kind, w.stopped.clone()), (WaveKind::Stuck, None));
        assert_eq!(w.waiting, vec![0, 1, 2], "every rank, not only some");
    }

    #[test]
    fn every_rank_inside_is_a_hang_only_with_evidence_it_stopped() {
        let stuck = |t: &[RankTrace]| judge(t).and_then(|w| w.stopped);
        // NCCL: in flight on every rank (started), nothing more.
        let mut hang = entry("0", 6, "all_reduce", 4, State::Started);
        hang.timeout_ms = Some(600_000);
        let t: Vec<RankTrace> = (0..3).map(|r| with(rank(r, 5), hang.clone())).collect();
        assert_eq!(stuck(&t), None);
        // NCCL's watchdog retired it without completing it.
        let mut gone = t.clone();
        gone[1].entries[5].retired = true;
        let why = stuck(&gone).expect("evidence");
        assert!(why.contains("rank 1's recorder retired it"), "{why}");
        // A rank recorded something past the collective's timeout.
        let mut later = t.clone();
        let mut other = entry("1", 1, "all_reduce", 4, State::Completed);
        other.time_created_ns = hang.time_created_ns + 601_000 * MS;
        later[0].entries.push(other);
        let why = stuck(&later).expect("evidence");
        assert!(why.contains("past its timeout of 600 s"), "{why}");
        // A timed-out entry.
        let mut timed = t;
        timed[2].entries[5].duration_ms = Some(600_000.0);
        let why = stuck(&timed).expect("evidence");
        assert!(
            why.contains("rank 2's entry timed out after 600 s"),
            "{why}"
        );
    }

    fn late_at(n: u32, steps: u64, late: &[(u32, u64, u64)]) -> Vec<RankTrace> {
        (0..n)
            .map(|r| {
                let mut tr = rank(r, steps);
                for (i, e) in tr.entries.iter_mut().enumerate() {
                    // A few ms of ordinary jitter.
                    e.time_created_ns += ((r as u64 * 7 + i as u64 * 3) % 5) * MS;
                    for (lr, seq, ms) in late {
                        if *lr == r && e.collective_seq >= *seq {
                            e.time_created_ns += ms * MS;
                        }
                    }
                }
                tr
            })
            .collect()
    }

    fn late_ranks(t: &[RankTrace]) -> Vec<(u32, u64, i64)> {
        let ranks: Vec<u32> = t.iter().map(|t| t.rank).collect();
        late_entries(t, &membership(t, &ranks))
            .iter()
            .map(|l| (l.rank, l.seq, (l.late_ms / 100.0).round() as i64))
            .collect()
    }

    #[test]
    fn one_collective_entered_seconds_late_is_named_once() {
        // Rank 2 entered #7 20 s after the others, who waited; the job
        // went on (every later step is shifted alike).
        let mut t = late_at(3, 12, &[]);
        for tr in &mut t {
            for e in tr.entries.iter_mut().filter(|e| e.collective_seq >= 7) {
                let wait = if tr.rank == 2 || e.collective_seq > 7 {
                    20_000
                } else {
                    0
                };
                e.time_created_ns += wait * MS;
            }
        }
        let ranks: Vec<u32> = vec![0, 1, 2];
        let late = late_entries(&t, &membership(&t, &ranks));
        assert_eq!(late.len(), 1, "{late:?}");
        assert_eq!((late[0].rank, late[0].seq), (2, 7));
        assert!((late[0].late_ms - 20_000.0).abs() < 10.0, "{late:?}");
        assert_eq!(late[0].others, vec![0, 1]);
        assert!(stragglers(&t, &membership(&t, &ranks)).is_empty());
    }

    #[test]
    fn a_late_entry_within_the_floor_or_the_jobs_spread_is_noise() {
        // 400 ms once (straggler_once): under the 2 s floor.
        assert!(late_ranks(&late_at(4, 40, &[(2, 20, 400)])[..]).is_empty());
        // 3 s once is named ...
        let once = |t: &mut Vec<RankTrace>| {
            for e in t[1].entries.iter_mut().filter(|e| e.collective_seq == 20) {
                e.time_created_ns += 3_000 * MS;
            }
        };
        let mut t = late_at(4, 40, &[]);
        once(&mut t);
        assert_eq!(late_ranks(&t), vec![(1, 20, 30)]);
        // ... but not in a job whose ranks drift by a second at every step.
        let mut drifting: Vec<RankTrace> = late_at(4, 40, &[]);
        for tr in &mut drifting {
            for e in &mut tr.entries {
                e.time_created_ns += (e.collective_seq * 7 + tr.rank as u64 * 13) % 4 * 400 * MS;
            }
        }
        once(&mut drifting);
        assert!(
            late_ranks(&drifting).is_empty(),
            "{:?}",
            late_ranks(&drifting)
        );
    }

    #[test]
    fn the_median_of_the_others_is_the_median_without_the_one() {
        for row in [
            vec![5.0_f64],
            vec![1.0, 9.0],
            vec![3.0, 1.0, 2.0],
            vec![4.0, 8.0, 1.0, 1.0, 30.0, 2.0],
        ] {
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|a, b| row[*a].total_cmp(&row[*b]));
            for (p, i) in order.iter().enumerate() {
                let mut others: Vec<f64> = row
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| j != i)
                    .map(|(_, t)| *t)
                    .collect();
                let expect = if others.is_empty() {
                    row[*i]
                } else {
                    median(&mut others)
                };
                assert_eq!(
                    median_without(&row, &order, p),
                    expect,
                    "{row:?} without {i}"
                );
            }
        }
    }

    #[test]
    fn rank_lists_read_short() {
        assert_eq!(rank_list(&[0, 1, 3]), "0, 1, 3");
        assert_eq!(rank_list(&[0, 1, 2, 3, 7]), "0-3, 7");
        let many: Vec<u32> = (0..40).map(|r| r * 2).collect();
        assert!(rank_list(&many).ends_with("(40 ranks)"));
    }
}

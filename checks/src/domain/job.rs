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
//! - A collective entered with another op, size or dtype names the ranks
//!   that differ from a strict majority; with no majority (two ranks, or an
//!   even split) every side is named as a mismatch between them.
//! - Ops whose sizes legitimately differ across ranks (all-gather,
//!   reduce-scatter, all-to-all, coalesced groups) compare op and dtype
//!   only; point-to-point operations are paired by their own sequence and
//!   not judged here.

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::flight::{Entry, RankTrace, State};

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
}

impl Wavefront {
    pub fn blamed_ranks(&self) -> Vec<u32> {
        self.blamed.iter().map(|b| b.rank).collect()
    }
}

/// One rank's collectives in one group, by sequence number.
struct Lane<'a> {
    rank: u32,
    /// (seq, entry), ascending by seq.
    by_seq: Vec<(u64, &'a Entry)>,
    /// The highest sequence it enqueued (entries and `pg_status`).
    last: Option<u64>,
}

impl<'a> Lane<'a> {
    fn new(t: &'a RankTrace, group: &str) -> Lane<'a> {
        let mut by_seq: Vec<(u64, &Entry)> = t
            .entries
            .iter()
            .filter(|e| &*e.group == group && !e.is_p2p && e.collective_seq > 0)
            .map(|e| (e.collective_seq, e))
            .collect();
        by_seq.sort_by_key(|(s, _)| *s);
        // A coalesced group records its ops under one sequence number: the
        // group's own entry stands for them (the first where none is).
        by_seq.dedup_by(|later, first| {
            let same = later.0 == first.0;
            if same && is_coalesced(&later.1.op) && !is_coalesced(&first.1.op) {
                first.1 = later.1;
            }
            same
        });
        let from_status = t.status.get(group).and_then(|s| s.last_enqueued);
        let last = by_seq.last().map(|(s, _)| *s).max(from_status);
        Lane {
            rank: t.rank,
            by_seq,
            last,
        }
    }

    fn at(&self, seq: u64) -> Option<&'a Entry> {
        self.by_seq
            .binary_search_by_key(&seq, |(s, _)| *s)
            .ok()
            .map(|i| self.by_seq[i].1)
    }

    fn first(&self) -> Option<u64> {
        self.by_seq.first().map(|(s, _)| *s)
    }

    /// What the rank last did in this group, for a rank that is behind.
    fn last_doing(&self) -> String {
        match self.by_seq.last() {
            Some((seq, e)) => format!("last enqueued {} #{seq} ({})", e.op, state_word(e)),
            None => "holds no entries for this group".to_string(),
        }
    }
}

/// The op a collective is matched by: the out-of-place broadcast and
/// reduce are the same collective as the in-place ones.
pub fn canonical_op(op: &str) -> &str {
    match op {
        "_broadcast_oop" => "broadcast",
        "_reduce_oop" => "reduce",
        "_allgather_base" | "all_gather_into_tensor" | "allgather" => "all_gather",
        "_reduce_scatter_base" | "reduce_scatter_tensor" | "reducescatter" => "reduce_scatter",
        "allreduce" => "all_reduce",
        other => other,
    }
}

/// A coalesced group's own entry ("coalesced", "ALLREDUCE_COALESCED").
fn is_coalesced(op: &str) -> bool {
    op.to_ascii_lowercase().contains("coalesced")
}

/// Whether every rank passes the same shapes to `op`.
fn sizes_must_match(op: &str) -> bool {
    let op = canonical_op(op);
    let lower = op.to_ascii_lowercase();
    !(lower.contains("coalesced")
        || lower.contains("gather")
        || lower.contains("scatter")
        || lower.contains("all_to_all")
        || lower.contains("alltoall")
        || lower == "barrier")
}

/// What must agree across ranks for one collective.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Signature<'a> {
    op: &'a str,
    sizes: Option<&'a [Vec<i64>]>,
    dtypes: &'a [std::sync::Arc<str>],
}

fn signature(e: &Entry) -> Signature<'_> {
    let op = canonical_op(&e.op);
    Signature {
        sizes: sizes_must_match(op).then_some(e.input_sizes.as_slice()),
        dtypes: if op == "barrier" {
            &[]
        } else {
            e.input_dtypes.as_slice()
        },
        op,
    }
}

/// "all_reduce [4] float", as the table shows a call.
pub fn call_text(e: &Entry) -> String {
    let mut s = e.op.to_string();
    let shapes: Vec<String> = e
        .input_sizes
        .iter()
        .map(|d| {
            let dims: Vec<String> = d.iter().map(i64::to_string).collect();
            format!("[{}]", dims.join(", "))
        })
        .collect();
    if !shapes.is_empty() {
        s.push(' ');
        s.push_str(&shapes.join(" "));
    }
    let mut dtypes: Vec<&str> = e.input_dtypes.iter().map(|d| &**d).collect();
    dtypes.dedup();
    if !dtypes.is_empty() {
        s.push(' ');
        s.push_str(&dtypes.join(","));
    }
    s
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

/// Where an entry had got to, in words: gloo records no start or
/// completion, and retires what it is done with.
fn state_word(e: &Entry) -> &'static str {
    if timed_out(e) {
        "timed out"
    } else if finished(e) {
        "completed"
    } else {
        match e.state {
            State::Started => "started, not finished",
            _ => "not finished",
        }
    }
}

/// Finished for real: completed (or retired: gloo records no completion
/// and retires what it is done with) and not by a timeout.
fn finished(e: &Entry) -> bool {
    (e.state == State::Completed || e.retired) && !timed_out(e)
}

/// The wavefront of one group: the first sequence at which its ranks with
/// dumps disagree, or at which they all wait and it does not finish.
pub fn group_wavefront(group: &Group, traces: &[&RankTrace]) -> Option<Wavefront> {
    let lanes: Vec<Lane> = traces
        .iter()
        .filter(|t| group.members.contains(&t.rank))
        .map(|t| Lane::new(t, &group.name))
        .collect();
    let top = lanes.iter().filter_map(|l| l.last).max()?;
    // Below the latest first entry some rank's ring buffer has lost it.
    let from = lanes.iter().filter_map(Lane::first).max().unwrap_or(top);
    // The sequences some rank recorded (never the bare numeric range: a
    // dump's numbers are not trusted to be small).
    let seqs: BTreeSet<u64> = lanes
        .iter()
        .flat_map(|l| l.by_seq.iter().map(|(s, _)| *s))
        .filter(|s| *s >= from)
        .collect();
    for seq in seqs {
        if let Some(w) = judge_seq(group, &lanes, seq) {
            return Some(w);
        }
    }
    stuck(group, &lanes, top)
}

fn judge_seq(group: &Group, lanes: &[Lane], seq: u64) -> Option<Wavefront> {
    let present: Vec<(&Lane, &Entry)> = lanes
        .iter()
        .filter_map(|l| l.at(seq).map(|e| (l, e)))
        .collect();
    let behind: Vec<&Lane> = lanes
        .iter()
        .filter(|l| l.last.is_none_or(|last| last < seq))
        .collect();
    let (_, first) = *present.first()?;
    let mut w = Wavefront {
        group: group.clone(),
        seq,
        op: canonical_op(&first.op).to_string(),
        call: call_text(first),
        kind: WaveKind::NotJoined,
        blamed: Vec::new(),
        waiting: present.iter().map(|(l, _)| l.rank).collect(),
        time_ns: present.iter().map(|(_, e)| e.time_created_ns).min()?,
    };
    if !behind.is_empty() {
        if behind.len() > present.len() {
            w.kind = WaveKind::Ahead;
            w.blamed = present
                .iter()
                .map(|(l, e)| Blamed {
                    rank: l.rank,
                    doing: format!(
                        "called {} as #{seq}, which the others never called",
                        call_text(e)
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
fn mismatch(mut w: Wavefront, present: &[(&Lane, &Entry)]) -> Option<Wavefront> {
    let mut sides: BTreeMap<Signature, Vec<(u32, &Entry)>> = BTreeMap::new();
    for (l, e) in present {
        sides.entry(signature(e)).or_default().push((l.rank, e));
    }
    if sides.len() < 2 {
        return None;
    }
    let (major_sig, major) = sides
        .iter()
        .max_by_key(|(_, v)| v.len())
        .map(|(s, v)| (s.clone(), v.clone()))?;
    let seq = w.seq;
    if major.len() * 2 > present.len() {
        w.kind = WaveKind::Mismatch;
        w.op = major_sig.op.to_string();
        w.call = call_text(major[0].1);
        w.waiting = major.iter().map(|(r, _)| *r).collect();
        w.blamed = sides
            .iter()
            .filter(|(s, _)| **s != major_sig)
            .flat_map(|(_, v)| v.iter())
            .map(|(r, e)| Blamed {
                rank: *r,
                doing: format!("called {} as #{seq}", call_text(e)),
            })
            .collect();
    } else {
        w.kind = WaveKind::Split;
        w.waiting.clear();
        w.blamed = sides
            .values()
            .flat_map(|v| v.iter())
            .map(|(r, e)| Blamed {
                rank: *r,
                doing: format!("called {} as #{seq}", call_text(e)),
            })
            .collect();
    }
    w.blamed.sort_by_key(|b| b.rank);
    Some(w)
}

/// Every rank entered the group's last collective alike; it is a
/// wavefront only when it has not finished on some rank.
fn stuck(group: &Group, lanes: &[Lane], top: u64) -> Option<Wavefront> {
    let at_top: Vec<(&Lane, &Entry)> = lanes
        .iter()
        .filter_map(|l| l.at(top).map(|e| (l, e)))
        .collect();
    let (_, first) = *at_top.first()?;
    if at_top.iter().all(|(_, e)| finished(e)) {
        return None;
    }
    Some(Wavefront {
        group: group.clone(),
        seq: top,
        op: canonical_op(&first.op).to_string(),
        call: call_text(first),
        kind: WaveKind::Stuck,
        blamed: Vec::new(),
        waiting: at_top
            .iter()
            .filter(|(_, e)| !finished(e))
            .map(|(l, _)| l.rank)
            .collect(),
        time_ns: at_top.iter().map(|(_, e)| e.time_created_ns).min()?,
    })
}

/// The job's wavefront: of every group's, the earliest in time (a group
/// stuck later is stuck because of it). A group whose members all lack
/// dumps has none.
pub fn wavefront(traces: &[RankTrace], members: &Membership) -> Option<Wavefront> {
    let refs: Vec<&RankTrace> = traces.iter().collect();
    let mut w = members
        .groups
        .values()
        .filter_map(|g| group_wavefront(g, &refs))
        .min_by_key(|w| {
            let rank = match w.kind {
                // A disagreement explains a stuck group, never the reverse.
                WaveKind::Stuck => 1,
                _ => 0,
            };
            (rank, w.time_ns)
        })?;
    // Every rank with a dump waits in it: the members without one are what
    // it waits for.
    let absent: Vec<u32> = w
        .group
        .members
        .iter()
        .copied()
        .filter(|r| members.missing.contains(r))
        .collect();
    if w.kind == WaveKind::Stuck && !absent.is_empty() {
        w.kind = WaveKind::NotJoined;
        w.blamed = absent
            .into_iter()
            .map(|rank| Blamed {
                rank,
                doing: "left no dump".to_string(),
            })
            .collect();
    }
    Some(w)
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

/// Ranks that start collectives late, per group, judged over every
/// collective all the group's ranks with dumps entered alike. Lateness is
/// the rank's enqueue time minus the median of the others'. Where a rank
/// is late in several groups, the group with the most evidence is kept.
pub fn stragglers(traces: &[RankTrace], members: &Membership) -> Vec<Straggler> {
    let refs: Vec<&RankTrace> = traces.iter().collect();
    let mut best: BTreeMap<u32, Straggler> = BTreeMap::new();
    for g in members.groups.values() {
        for s in group_stragglers(g, &refs) {
            let keep = best.get(&s.rank).is_none_or(|b| s.compared > b.compared);
            if keep {
                best.insert(s.rank, s);
            }
        }
    }
    best.into_values().collect()
}

fn group_stragglers(group: &Group, traces: &[&RankTrace]) -> Vec<Straggler> {
    let lanes: Vec<Lane> = traces
        .iter()
        .filter(|t| group.members.contains(&t.rank))
        .map(|t| Lane::new(t, &group.name))
        .collect();
    if lanes.len() < 2 {
        return Vec::new();
    }
    let mut late: Vec<Vec<f64>> = vec![Vec::new(); lanes.len()];
    let mut times: Vec<f64> = Vec::with_capacity(lanes.len());
    let mut sorted: Vec<f64> = Vec::with_capacity(lanes.len());
    for seq in lanes[0].by_seq.iter().map(|(s, _)| *s) {
        let entries: Option<Vec<&Entry>> = lanes.iter().map(|l| l.at(seq)).collect();
        let Some(entries) = entries else { continue };
        let sig = signature(entries[0]);
        if entries.iter().any(|e| signature(e) != sig) {
            continue;
        }
        times.clear();
        times.extend(entries.iter().map(|e| e.time_created_ns as f64 / 1e6));
        sorted.clone_from(&times);
        let all = median(&mut sorted);
        for (i, t) in times.iter().enumerate() {
            // With two ranks the other's time; with more, the median of all
            // (one late rank does not move it).
            let reference = match times.len() {
                2 => times[1 - i],
                _ => all,
            };
            late[i].push(t - reference);
        }
    }
    lanes
        .iter()
        .zip(late)
        .filter_map(|(l, mut v)| {
            if v.len() < STRAGGLER_MIN_COMPARED {
                return None;
            }
            let worst = v.iter().copied().fold(f64::MIN, f64::max);
            let median = median(&mut v);
            (median >= STRAGGLER_MIN_MS).then(|| Straggler {
                rank: l.rank,
                group: group.clone(),
                median_ms: median,
                worst_ms: worst,
                compared: v.len(),
            })
        })
        .collect()
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

    #[test]
    fn uneven_gathers_coalesced_and_out_of_place_calls_match() {
        let mut t = vec![rank(0, 5), rank(1, 5), rank(2, 5)];
        for (i, tr) in t.iter_mut().enumerate() {
            let n = i as i64 + 1;
            tr.entries
                .push(entry("0", 6, "all_gather", n, State::Completed));
            tr.entries
                .push(entry("0", 7, "ALLREDUCE_COALESCED", n, State::Completed));
            let bc = if i == 0 {
                "_broadcast_oop"
            } else {
                "broadcast"
            };
            tr.entries.push(entry("0", 8, bc, 4, State::Completed));
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
            // Each rank's ops of the group differ in shape; the group's
            // entry comes first on rank 0, last on the others.
            let ops = [
                entry("0", 6, "all_reduce", 1 + i as i64, State::Completed),
                entry("0", 6, "all_reduce", 8, State::Completed),
            ];
            let group = entry("0", 6, "coalesced", 0, State::Completed);
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

    #[test]
    fn rank_lists_read_short() {
        assert_eq!(rank_list(&[0, 1, 3]), "0, 1, 3");
        assert_eq!(rank_list(&[0, 1, 2, 3, 7]), "0-3, 7");
        let many: Vec<u32> = (0..40).map(|r| r * 2).collect();
        assert!(rank_list(&many).ends_with("(40 ranks)"));
    }
}

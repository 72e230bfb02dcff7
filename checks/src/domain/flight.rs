//! The Flight Recorder's record of a job, as plain data: what each rank's
//! dump says about the collectives it enqueued, normalised across the dump
//! format's versions (2.4 to 2.10) and its two encodings (pickle, JSON).
//! `probe::fr_dump` reads dumps into these types; `domain::job`
//! judges them. Nothing here reads a file.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// One rank's dump.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankTrace {
    /// The global rank, from the file name (`..._dump_12` is rank 12).
    pub rank: u32,
    /// The file it came from, as given (for messages).
    pub file: String,
    /// The dump's `version` ("2.10"), empty when absent.
    pub version: String,
    /// Process groups this rank knew (`pg_config`), by group name; empty
    /// when the dump's `pg_config` was missing or unreadable.
    pub groups: BTreeMap<String, GroupConfig>,
    /// Per group name, what `pg_status` says this rank last enqueued,
    /// started and completed.
    pub status: BTreeMap<String, GroupStatus>,
    /// The recorded collectives, oldest first.
    pub entries: Vec<Entry>,
}

/// A process group as `pg_config` describes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupConfig {
    /// `name`: the group's name ("0", "1", ...).
    pub name: String,
    /// `desc`: "default_pg", "undefined", a user's description.
    pub desc: String,
    /// Global ranks of its members; empty when unknown.
    pub ranks: Vec<u32>,
}

/// `pg_status` of one group on one rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub last_enqueued: Option<u64>,
    pub last_started: Option<u64>,
    pub last_completed: Option<u64>,
}

/// Where a recorded collective had got to when the dump was taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
    Scheduled,
    Started,
    Completed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Scheduled => "scheduled",
            State::Started => "started",
            State::Completed => "completed",
        }
    }
}

/// Tensor shapes, one per tensor: shared between the entries of a dump
/// that pass the same shapes (a job's every step does).
pub type Shapes = Arc<Vec<Vec<i64>>>;
/// Dtype names, one per tensor, shared like [`Shapes`].
pub type Dtypes = Arc<Vec<Arc<str>>>;

/// One recorded collective (or point-to-point operation) on one rank. A job
/// of 1,024 ranks holds two million of them, so every text and shape list
/// is shared (`Arc`) and what no judgement reads (stacks) is not kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `record_id`: the recorder's own running number on this rank.
    pub record_id: u64,
    /// The process group's name (`process_group[0]`, else `pg_id`).
    pub group: Arc<str>,
    /// The group's description (`process_group[1]`), empty when absent.
    pub group_desc: Arc<str>,
    /// `collective_seq_id` (older dumps: `seq_id`); 0 for point-to-point
    /// operations, which count in `p2p_seq_id` instead.
    pub collective_seq: u64,
    /// `p2p_seq_id`; 0 for collectives.
    pub p2p_seq: u64,
    /// `profiling_name` without its backend prefix ("nccl:all_reduce" is
    /// "all_reduce"): "_broadcast_oop", "send", "ALLREDUCE_COALESCED".
    pub op: Arc<str>,
    /// `input_sizes`: one shape per input tensor.
    pub input_sizes: Shapes,
    /// `input_dtypes`: a list, or one name where older writers give a
    /// plain string.
    pub input_dtypes: Dtypes,
    /// `output_sizes`: one shape per output tensor (an out-of-place
    /// broadcast, an all-gather's result); empty where the dump has none.
    #[serde(default)]
    pub output_sizes: Shapes,
    #[serde(default)]
    pub output_dtypes: Dtypes,
    pub state: State,
    /// `retired`: the recorder has let the entry go (after completion, or
    /// after a timeout, when gloo marks it completed without it being so).
    pub retired: bool,
    /// `time_created_ns`: when the rank enqueued it (wall clock, ns).
    pub time_created_ns: u64,
    /// `time_discovered_completed_ns`, where the backend records it.
    pub time_completed_ns: Option<u64>,
    /// `duration_ms` where the backend measured one.
    pub duration_ms: Option<f64>,
    pub timeout_ms: Option<u64>,
    /// `is_p2p`, else inferred from the name (send, recv).
    pub is_p2p: bool,
}

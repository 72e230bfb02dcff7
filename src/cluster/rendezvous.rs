//! The rendezvous: checks/payloads/cluster.py run with the training Python,
//! in a process group of its own that dies with gpucheck, talking JSON
//! lines: this node's message on its stdin (and, on node 0, a [`PairPlan`]
//! for each "pairs" event, then the fleet verdict once judged), marker lines
//! ("GPUCHECK_CLUSTER {json}") back on its stdout. The exchange itself is
//! torch.distributed's TCPStore; the all-reduce's ranks are the payload's
//! own worker processes, in its process group.
//!
//! Every wait here has a deadline, and the payload's whole group is killed
//! when the session ends, whatever the reason (done, a timeout, Ctrl-C).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use gpucheck_checks::domain::pairs::{self, PairBandwidth};
use gpucheck_checks::fleet::{ClockReading, NodeAllReduce, PayloadTorch};
use gpucheck_checks::probe::python::{start_interactive_payload, InteractivePayload};
use serde::{Deserialize, Serialize};

use super::seal::Token;
use crate::interrupt;

/// The payload, embedded so the binary is all a node needs.
const CLUSTER_PY: &str = include_str!("../../checks/payloads/cluster.py");
const MARK: &str = "GPUCHECK_CLUSTER ";
const STAGE: &str = "GPUCHECK_CLUSTER_STAGE ";
/// How long `import torch` may take on a node before the rendezvous clock
/// starts (a cold page cache on a network filesystem, many nodes at once).
pub const IMPORT_BUDGET: Duration = Duration::from_secs(90);
/// What a node waits for node 0's verdict beyond --rdzv-timeout: node 0's
/// judging and printing.
pub const VERDICT_MARGIN: Duration = Duration::from_secs(10);
/// How long node 0 keeps the store up for the others to read the verdict.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound of the cross-node process group's setup and of each all-reduce.
pub const ALLREDUCE_TIMEOUT: Duration = Duration::from_secs(30);
/// The most pair steps after the all-reduce: the first pass's rounds and
/// the retest round (`domain::pairs::plan`).
pub const PAIR_STEPS: u32 = pairs::PAIR_ROUNDS as u32 + 1;

/// The longest the all-reduce and the pair steps may take once every node
/// joined: each step's process-group setup and collective are bounded by
/// [`ALLREDUCE_TIMEOUT`], and node 0 waits 5 s more per step for the ranks'
/// results (the payload's `worker_budget`, the same sum).
pub fn collective_budget() -> Duration {
    let steps = 1 + PAIR_STEPS;
    ALLREDUCE_TIMEOUT * 2 * steps + Duration::from_secs(5) * steps + Duration::from_secs(10)
}

/// What the payload is told (as JSON in $GPUCHECK_CLUSTER_CONFIG).
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub node_rank: u32,
    pub nnodes: u32,
    pub master_addr: String,
    pub master_port: u16,
    pub rdzv_timeout_s: f64,
    pub margin_s: f64,
    pub ack_timeout_s: f64,
    /// Run the cross-node all-reduce once every node joined.
    pub allreduce: bool,
    /// "nccl" or "gloo"; None: NCCL when torch sees a GPU, else gloo.
    pub backend: Option<String>,
    /// Bound of the process group's setup and of each collective.
    pub allreduce_timeout_s: f64,
    /// Ranks per node instead of one per GPU (`--nproc`; gloo's default 1).
    pub nproc: Option<u32>,
    /// The most pair steps node 0 may publish ([`PAIR_STEPS`]).
    pub pair_steps: u32,
    /// The run every node must share (`identity::run_id`); None: node 0
    /// creates one and the others take it from its run record.
    pub run_id: Option<String>,
    /// Where the run id came from ("--run-id", "$SLURM_JOB_ID ...").
    pub run_id_from: Option<String>,
    /// Compared at the handshake: another gpucheck or profile is refused.
    pub tool_version: String,
    pub profile: String,
    /// This node's host name, for the messages that name it.
    pub host: String,
    /// A job watched across nodes: after the rendezvous, summaries and
    /// orders stream through the store until gpucheck ends (no verdict).
    pub watch: bool,
}

/// One pair all-reduce as node 0's payload measured it.
#[derive(Debug, Clone, Deserialize)]
pub struct PairResult {
    pub a: u32,
    pub b: u32,
    #[serde(default)]
    pub busbw_gbps: Option<f64>,
    #[serde(default)]
    pub error: Option<String>,
}

impl PairResult {
    /// The pair for `domain::pairs`: a failed pair is NaN (slow).
    pub fn bandwidth(&self) -> PairBandwidth {
        PairBandwidth {
            a: self.a,
            b: self.b,
            busbw_gbps: match (&self.error, self.busbw_gbps) {
                (None, Some(b)) => b,
                _ => f64::NAN,
            },
        }
    }
}

/// What node 0 answers a "pairs" event with: the rounds of disjoint pairs
/// to run next (none: the search is over).
#[derive(Debug, Clone, Serialize)]
pub struct PairPlan {
    pub rounds: Vec<Vec<(u32, u32)>>,
}

/// One node's entry in the store: its message (what gpucheck handed over),
/// and what the payload added.
#[derive(Debug, Clone, Deserialize)]
pub struct Joined {
    pub message: serde_json::Value,
    #[serde(default)]
    pub torch: Option<PayloadTorch>,
    #[serde(default)]
    pub clock: Option<ClockReading>,
    #[serde(default)]
    pub allreduce: Option<NodeAllReduce>,
}

/// The verdict node 0 publishes for every node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub exit_code: i32,
    /// "FLEET READY: ..." / "FLEET NOT READY: ... — see fleet.local".
    pub line: String,
    /// The run it judges: a verdict of another run is not this one's.
    #[serde(default)]
    pub run_id: String,
}

/// A node rank that two nodes claimed, as node 0's payload found the note
/// the second claimant left.
#[derive(Debug, Clone, Deserialize)]
pub struct DuplicateNote {
    pub node_rank: u32,
    pub first: String,
    #[serde(default)]
    pub first_pid: Option<u32>,
    pub second: String,
    #[serde(default)]
    pub second_pid: Option<u32>,
}

/// What the payload reports, one marker line each.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// This node is in the store, in run `run_id`.
    Joined {
        #[serde(default)]
        run_id: Option<String>,
    },
    /// Node 0, after the all-reduce: the pairs measured so far; it waits
    /// for a [`PairPlan`] line.
    Pairs { pass: u32, results: Vec<PairResult> },
    Gathered {
        run_id: String,
        nodes: BTreeMap<String, serde_json::Value>,
        missing: Vec<u32>,
        /// Node rank -> why its entry could not be judged.
        #[serde(default)]
        rejected: BTreeMap<String, String>,
        /// Node rank -> why it refused to join (another gpucheck, profile).
        #[serde(default)]
        refused: BTreeMap<String, String>,
        #[serde(default)]
        ignored: Vec<String>,
        #[serde(default)]
        duplicates: Vec<DuplicateNote>,
        #[serde(default)]
        unverified: u32,
        #[serde(default)]
        pairs: Vec<PairResult>,
        #[serde(default)]
        pair_rounds: u32,
    },
    /// Another node: node 0's verdict as stored at `key` (sealed when a
    /// token is shared; gpucheck opens it itself).
    Verdict {
        sealed: String,
        key: String,
        /// The host of a second claimant of this node's rank.
        #[serde(default)]
        duplicate: Option<String>,
        #[serde(default)]
        unverified: u32,
    },
    /// Node 0: every node read the verdict, or the wait for that ended.
    Done {},
    /// Node 0 of a watched job: a node's summary, newer than its last.
    Summary {
        node: u32,
        summary: serde_json::Value,
    },
    /// Another node of a watched job: node 0's order `n` ("diagnose",
    /// "stop", "end").
    Order {
        order: String,
        #[serde(default)]
        n: u64,
    },
    Error {
        stage: String,
        detail: String,
        #[serde(default)]
        resolved: Vec<String>,
        #[serde(default)]
        missing: Vec<u32>,
    },
}

/// A running payload.
pub struct Session {
    events: Receiver<Result<Event, String>>,
    input: Option<Sender<String>>,
    /// Dropped after `input`: the payload is killed with its group then.
    payload: InteractivePayload,
}

impl Session {
    /// Start the payload and hand it this node's message.
    pub fn start(
        python: &Path,
        config: &Config,
        token: Option<&Token>,
        message: &str,
    ) -> Result<Session, String> {
        let config = serde_json::to_string(config).map_err(|e| e.to_string())?;
        let key = token.map(Token::hex);
        let mut env = vec![("GPUCHECK_CLUSTER_CONFIG", config.as_str())];
        if let Some(k) = key.as_deref() {
            env.push(("GPUCHECK_CLUSTER_KEY", k));
        }
        let (payload, pipes) = start_interactive_payload(
            python,
            "cluster",
            CLUSTER_PY,
            &env,
            &["GPUCHECK_CLUSTER_KEY"],
        )?;
        let mut session = Session {
            events: read_events(pipes.stdout)?,
            input: None,
            payload,
        };
        let input = feed(pipes.stdin)?;
        let _ = input.send(message.to_string());
        session.input = Some(input);
        Ok(session)
    }

    /// Hand the payload one more line (a pair plan, node 0's verdict).
    pub fn send(&self, line: String) {
        if let Some(input) = &self.input {
            let _ = input.send(line);
        }
    }

    /// The next event, waiting at most until `deadline`. The error says
    /// why none came: the payload ended (with its last words), the deadline
    /// passed, or gpucheck was interrupted.
    pub fn next(&mut self, deadline: Instant, waiting_for: &str) -> Result<Event, String> {
        loop {
            if let Some(sig) = interrupt::interrupted() {
                return Err(format!(
                    "interrupted by {sig} while waiting for {waiting_for}"
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "no answer while waiting for {waiting_for}: timed out"
                ));
            }
            match self
                .events
                .recv_timeout((deadline - now).min(Duration::from_millis(50)))
            {
                Ok(Ok(event)) => return Ok(event),
                Ok(Err(e)) => return Err(e),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(self.ended(waiting_for)),
            }
        }
    }

    /// The next event if one is there: None when none came yet; an error
    /// once the payload ended (with why).
    pub fn try_next(&mut self) -> Option<Result<Event, String>> {
        match self.events.try_recv() {
            Ok(event) => Some(event),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => Some(Err(self.ended("the watch's summaries"))),
        }
    }

    /// Why the payload stopped talking: its exit and the end of its stderr.
    fn ended(&mut self, waiting_for: &str) -> String {
        let (status, err) = self.payload.ended(Instant::now() + Duration::from_secs(1));
        let err = String::from_utf8_lossy(&err);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.starts_with(STAGE) && !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        let stage = err
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(STAGE))
            .unwrap_or("start");
        let how =
            match status.map(|s| (s.code(), std::os::unix::process::ExitStatusExt::signal(&s))) {
                Some((Some(c), _)) => format!("exited with status {c}"),
                Some((_, Some(s))) => format!("was killed by {}", interrupt::signal_name(s)),
                _ => "stopped answering".to_string(),
            };
        let last = if last.is_empty() {
            String::new()
        } else {
            format!(": {last}")
        };
        format!(
            "the rendezvous payload {how} during '{stage}' while waiting for {waiting_for}{last}"
        )
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Close the payload's input first; the payload itself is killed
        // with its group when its field drops.
        self.input = None;
    }
}

/// Read marker lines from the payload's stdout on a thread of its own.
fn read_events(
    stdout: std::process::ChildStdout,
) -> Result<Receiver<Result<Event, String>>, String> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("cluster-events".into())
        .spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(json) = line.strip_prefix(MARK) {
                    let event = serde_json::from_str::<Event>(json).map_err(|e| {
                        format!("the rendezvous payload said something unreadable: {e}")
                    });
                    if tx.send(event).is_err() {
                        break;
                    }
                }
            }
        })
        .map_err(|e| format!("cannot start a thread to read the payload: {e}"))?;
    Ok(rx)
}

/// Write lines to the payload's stdin on a thread of its own (a report can
/// outgrow the pipe buffer); stdin closes when the sender is dropped.
fn feed(mut stdin: std::process::ChildStdin) -> Result<Sender<String>, String> {
    let (tx, rx) = mpsc::channel::<String>();
    thread::Builder::new()
        .name("cluster-input".into())
        .spawn(move || {
            for line in rx {
                let one_line = line.replace('\n', " ");
                if stdin
                    .write_all(one_line.as_bytes())
                    .and_then(|_| stdin.write_all(b"\n"))
                    .and_then(|_| stdin.flush())
                    .is_err()
                {
                    break;
                }
            }
        })
        .map_err(|e| format!("cannot start a thread to feed the payload: {e}"))?;
    Ok(tx)
}

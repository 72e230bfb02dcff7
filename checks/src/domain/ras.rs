//! NCCL's RAS (reliability, availability and serviceability) status, as
//! plain data, and what it says is at fault.
//!
//! Since NCCL 2.24 every NCCL process runs a RAS thread; the threads watch
//! each other and, asked on their client socket (`NCCL_RAS_ADDR`, default
//! `localhost:28028`), gather a job-wide status: the job summary (nodes,
//! processes, GPUs), each communicator's state, the processes that did not
//! answer or are considered dead, the ranks missing from a communicator,
//! NCCL errors, and ranks whose collective counts or status disagree.
//! `probe::nccl_ras::ask` fetches that text once; [`parse`] reads it and
//! [`judge`] says which ranks, processes and hosts it names, and why.
//! Nothing here touches a socket.
//!
//! Source: NCCL user guide, "Troubleshooting > RAS"
//! (<https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/ras.html>,
//! `docs/userguide/source/troubleshooting/ras.rst` in NVIDIA/nccl), whose
//! sample outputs are the test fixtures in `tests/fixtures/nccl_ras/`, and
//! the line shapes NCCL 2.24 to 2.30 print beyond those samples (NCCL's
//! `src/ras/client_support.cc`: a missing rank with its process, an error
//! block, the version lines). NCCL warns that the text's format "varies
//! from release to release", so the parser keeps what it cannot read as
//! lines and never fails on an unknown one.
//!
//! Ask once. Polling RAS in a loop has crashed jobs: NCCL 2.26.5
//! (NVIDIA/nccl#1718) and 2.27.3 (NVIDIA/nccl#1762, `VERBOSE STATUS` every
//! few seconds on 128 GPUs), and a query during communicator
//! initialisation crashed 2.26.2 (NVIDIA/nccl#1669). gpucheck asks at most
//! once per run, and only where [`ras_supported`] holds.
//!
//! Ranks: RAS numbers a rank within its communicator. Only a communicator
//! as large as the whole job (its size equals the job summary's GPU count)
//! numbers its ranks as the job does (PyTorch's default process group), so
//! only there does a finding carry `global_ranks`; elsewhere it carries
//! `comm_ranks` and the processes and hosts RAS names.

use serde::{Deserialize, Serialize};

/// The first NCCL release with RAS ("Since NCCL 2.24", NCCL user guide,
/// Troubleshooting > RAS).
pub const RAS_FIRST_VERSION: (u32, u32, u32) = (2, 24, 0);

/// Where RAS listens unless `NCCL_RAS_ADDR` says otherwise (NCCL user
/// guide, "RAS Queries": `localhost`, port 28028).
pub const DEFAULT_RAS_ADDR: &str = "localhost:28028";

/// How long RAS waits dead processes out before declaring them dead
/// (NCCL user guide: "if it's unable to do so for 60 seconds, it will
/// declare the process dead").
const RAS_DEAD_AFTER_SECS: u32 = 60;

/// Whether an NCCL of this version runs RAS and can be asked (2.24 on).
/// NCCL 2.26 and 2.27 have crashed jobs when RAS was polled
/// (NVIDIA/nccl#1718, #1762): a caller asks once, never in a loop.
pub fn ras_supported(version: (u32, u32, u32)) -> bool {
    version >= RAS_FIRST_VERSION
}

/// The address RAS listens on, from the value of the job's
/// `NCCL_RAS_ADDR` (`host:port`), or [`DEFAULT_RAS_ADDR`] when it is unset
/// or empty.
pub fn client_addr(nccl_ras_addr: Option<&str>) -> String {
    match nccl_ras_addr.map(str::trim) {
        Some(addr) if !addr.is_empty() => addr.to_string(),
        _ => DEFAULT_RAS_ADDR.to_string(),
    }
}

/// What one RAS status answer says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RasStatus {
    /// "NCCL version 2.26.2 compiled with CUDA 12.4": the NCCL of the
    /// process that answered.
    pub nccl_version: Option<(u32, u32, u32)>,
    /// The job summary's totals.
    pub job: Option<RasJob>,
    /// Nodes the job summary names for running another number of
    /// processes than the rest ("Node 10.0.0.3 running processes ...").
    pub outlier_nodes: Vec<String>,
    /// How long RAS took to gather the communicators ("Communicators...
    /// (2.05s)"); long when a process does not answer.
    pub collection_secs: Option<f64>,
    /// The communicator table, one row per group of like communicators.
    pub groups: Vec<RasCommGroup>,
    /// "No communicator data collected!": no communicator exists yet (or
    /// any more).
    pub no_communicators: bool,
    /// The Errors and Warnings sections, one block per heading.
    pub blocks: Vec<RasBlock>,
}

/// The job summary's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RasJob {
    pub nodes: u32,
    pub processes: u32,
    pub gpus: u32,
}

/// One row of the communicator table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RasCommGroup {
    /// `Group #`: the `<x>` of the `#<x>-<y>` communicator names.
    pub group: u32,
    /// Communicators in the group.
    pub comms: u32,
    pub nodes_per_comm: u32,
    /// "8", or "7-8" when nodes differ.
    pub ranks_per_node: String,
    /// The size of each communicator in the group.
    pub ranks_per_comm: u32,
    pub ranks_in_group: u32,
    /// NOCOMM (UNKNOWN before 2.26), INIT, RUNNING, FINALIZE, ABORT.
    pub status: String,
    /// OK, or some of INCOMPLETE, ERROR, MISMATCH.
    pub errors: Vec<String>,
}

/// A communicator as RAS names it: `#<group>-<index> (<hash>)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RasCommId {
    pub group: u32,
    pub index: u32,
    /// The communicator hash, as in NCCL's debug output.
    pub hash: String,
}

impl RasCommId {
    /// "#0-0 (cf264af53edbe986)".
    pub fn label(&self) -> String {
        format!("#{}-{} ({})", self.group, self.index, self.hash)
    }
}

/// A process RAS names: "Process 3487984 on node 172.16.64.213 managing
/// GPU 5".
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RasProcess {
    pub pid: u32,
    /// The node's address as RAS prints it (an IP address).
    pub host: String,
    /// "5", "0,1", "4 (NVML 6)": CUDA device numbers, NVML's where they
    /// differ.
    pub gpus: String,
}

impl RasProcess {
    /// "process 3487984 on 172.16.64.213 (GPU 5)".
    pub fn phrase(&self) -> String {
        if self.gpus.is_empty() {
            format!("process {} on {}", self.pid, self.host)
        } else {
            let noun = if self.gpus.contains(',') {
                "GPUs"
            } else {
                "GPU"
            };
            format!(
                "process {} on {} ({noun} {})",
                self.pid, self.host, self.gpus
            )
        }
    }
}

/// A rank RAS names inside a communicator block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RasRank {
    /// The rank within its communicator.
    pub rank: u32,
    /// What RAS says of it: its own words on the line ("has status
    /// FINALIZE", "reported Remote process error"), else the count line it
    /// is listed under ("6 ranks have launched up to operation 6649"), else
    /// "missing" for a communicator's missing ranks.
    pub says: String,
    /// Its process, where RAS found it.
    pub process: Option<RasProcess>,
}

/// One block of the Errors or Warnings sections: a job-wide heading
/// (`INCOMPLETE`, `DEAD`, `TIMEOUT`) or a communicator's (`#0-0 (hash)
/// INCOMPLETE|ERROR|MISMATCH`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RasBlock {
    /// The heading's word: INCOMPLETE, DEAD, TIMEOUT, ERROR, MISMATCH (or
    /// one a newer NCCL adds).
    pub kind: String,
    /// The communicator, for a communicator's block.
    pub communicator: Option<RasCommId>,
    /// The count the block's first line gives ("Missing communicator data
    /// from 1 job process", "Encountered 2 communication timeouts").
    pub count: Option<u32>,
    /// The processes it names.
    pub processes: Vec<RasProcess>,
    /// The ranks it names.
    pub ranks: Vec<RasRank>,
    /// Its lines as RAS wrote them, trimmed.
    pub lines: Vec<String>,
}

/// Read a RAS status answer. `Err` when RAS refused the request
/// (`ERROR: ...`) or the text is not a RAS status at all.
pub fn parse(text: &str) -> Result<RasStatus, String> {
    let mut parser = Parser::default();
    for raw in text.lines() {
        parser.line(raw.trim_end_matches('\r'))?;
    }
    parser.finish_block();
    if parser.recognised {
        Ok(parser.status)
    } else {
        Err(not_ras(text))
    }
}

/// What [`parse`] has read so far, line by line.
#[derive(Default)]
struct Parser {
    status: RasStatus,
    /// Whether a line only RAS writes has been seen.
    recognised: bool,
    /// The previous line was the job summary's "(total)" header, so this
    /// one holds the totals.
    job_totals_next: bool,
    /// The Errors or Warnings block being read.
    block: Option<RasBlock>,
    /// The count line ranks are listed under ("6 ranks have ...").
    under: String,
}

impl Parser {
    /// One line, its "\r" gone. `Err` for an `ERROR:` line before any line
    /// RAS writes.
    fn line(&mut self, line: &str) -> Result<(), String> {
        let trimmed = line.trim();
        if let Some(error) = trimmed.strip_prefix("ERROR:") {
            if !self.recognised {
                return Err(format!("NCCL's RAS refused the request: {}", error.trim()));
            }
        }
        if let Some(rest) = trimmed.strip_prefix("NCCL version ") {
            self.status.nccl_version = parse_version(rest);
            self.recognised = true;
        } else if std::mem::take(&mut self.job_totals_next) {
            self.status.job = job_totals(trimmed).or(self.status.job);
        } else if !self.section_line(trimmed) && !self.summary_line(trimmed) {
            self.block_line(line, trimmed);
        }
        Ok(())
    }

    /// A line that heads a part of the status: the job summary's "(total)"
    /// header, a section title, "Communicators... (2.05s)", the
    /// communicator table's header, "No communicator data collected!".
    /// Whether the line was one.
    fn section_line(&mut self, trimmed: &str) -> bool {
        if trimmed.starts_with("(total)") {
            self.job_totals_next = true;
        } else if matches!(trimmed, "Job summary" | "Errors" | "Warnings") {
            self.finish_block();
        } else if let Some(rest) = trimmed.strip_prefix("Communicators...") {
            self.finish_block();
            self.status.collection_secs = collection_secs(rest);
        } else if trimmed.starts_with("Group ") && trimmed.contains("Comms") {
            // The communicator table's header: nothing to keep.
        } else if trimmed == "No communicator data collected!" {
            self.status.no_communicators = true;
        } else {
            return false;
        }
        self.recognised = true;
        true
    }

    /// A row of the communicator table, or a node the job summary names
    /// for running another number of processes. Whether the line was one.
    fn summary_line(&mut self, trimmed: &str) -> bool {
        if let Some(row) = table_row(trimmed) {
            self.status.groups.push(row);
        } else if let Some((node, _)) = trimmed
            .strip_prefix("Node ")
            .and_then(|r| r.split_once(" running process"))
        {
            self.status.outlier_nodes.push(node.to_string());
        } else {
            return false;
        }
        true
    }

    /// A line of the Errors or Warnings sections: a block's heading (flush
    /// left) or a line of the block being read (indented).
    fn block_line(&mut self, line: &str, trimmed: &str) {
        if trimmed.is_empty() {
            return;
        }
        if !line.starts_with(' ') {
            if let Some(heading) = heading(trimmed) {
                self.finish_block();
                self.block = Some(heading);
                self.under.clear();
                self.recognised = true;
            }
        } else if let Some(block) = self.block.as_mut() {
            body_line(block, trimmed, &mut self.under);
        }
    }

    /// Keep the block being read, if any.
    fn finish_block(&mut self) {
        if let Some(b) = self.block.take() {
            self.status.blocks.push(b);
        }
    }
}

/// The line under the job summary's "(total)" header. Under "(total) per
/// node per process (total) (total)": nodes, processes per node, GPUs per
/// process, processes, GPUs; under "(total) (total) (total)" (nodes unlike
/// each other): nodes, processes, GPUs.
fn job_totals(line: &str) -> Option<RasJob> {
    let numbers: Vec<u32> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match numbers.as_slice() {
        [nodes, _, _, processes, gpus] | [nodes, processes, gpus] => Some(RasJob {
            nodes: *nodes,
            processes: *processes,
            gpus: *gpus,
        }),
        _ => None,
    }
}

/// After "Communicators...": " (2.05s)" to 2.05.
fn collection_secs(rest: &str) -> Option<f64> {
    rest.trim()
        .trim_start_matches('(')
        .split(['s', ')'])
        .next()
        .and_then(|s| s.trim().parse().ok())
}

/// Why a text is not a RAS status, quoting its first line.
fn not_ras(text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    format!(
        "the answer is not NCCL's RAS status (it begins {:?})",
        crate::domain::text::cut(first.trim(), 80)
    )
}

/// "2.26.2 compiled with CUDA 12.4" (or "2.27.3+cuda12.9 ...") to (2, 26, 2).
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().next()?;
    let mut parts = word.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .ok()
    });
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// "    0         1         4       7-8        32        32   RUNNING  INCOMPLETE".
fn table_row(line: &str) -> Option<RasCommGroup> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let [group, comms, nodes, per_node, per_comm, in_group, status, errors] = words.as_slice()
    else {
        return None;
    };
    if !status.chars().all(|c| c.is_ascii_uppercase()) {
        return None;
    }
    Some(RasCommGroup {
        group: group.parse().ok()?,
        comms: comms.parse().ok()?,
        nodes_per_comm: nodes.parse().ok()?,
        ranks_per_node: per_node.to_string(),
        ranks_per_comm: per_comm.parse().ok()?,
        ranks_in_group: in_group.parse().ok()?,
        status: status.to_string(),
        errors: errors.split(',').map(str::to_string).collect(),
    })
}

/// A block heading: "DEAD", "INCOMPLETE", "TIMEOUT", or "#0-0
/// (cf264af53edbe986) INCOMPLETE".
fn heading(line: &str) -> Option<RasBlock> {
    if let Some(rest) = line.strip_prefix('#') {
        let (id, rest) = rest.split_once(' ')?;
        let (group, index) = id.split_once('-')?;
        let (hash, kind) = rest.trim().strip_prefix('(')?.split_once(')')?;
        return Some(RasBlock {
            kind: kind.trim().to_string(),
            communicator: Some(RasCommId {
                group: group.parse().ok()?,
                index: index.parse().ok()?,
                hash: hash.to_string(),
            }),
            ..RasBlock::default()
        });
    }
    let word = line.chars().all(|c| c.is_ascii_uppercase() || c == '_');
    (word && line.len() >= 4).then(|| RasBlock {
        kind: line.to_string(),
        ..RasBlock::default()
    })
}

/// One indented line of a block.
fn body_line(block: &mut RasBlock, line: &str, under: &mut String) {
    block.lines.push(line.to_string());
    if block.count.is_none() && block.lines.len() == 1 {
        block.count = first_number(line);
    }
    if let Some(process) = line.strip_prefix("Process ").and_then(process_after) {
        block.processes.push(process);
        return;
    }
    if let Some(rest) = line.strip_prefix("Rank ") {
        block.ranks.extend(rank_line(rest, under));
        return;
    }
    let listed = line
        .strip_prefix("The missing rank")
        .map(|r| (r, "missing"))
        .or_else(|| {
            line.strip_prefix("The unknown rank")
                .map(|r| (r, "status UNKNOWN"))
        });
    if let Some((rest, says)) = listed {
        let list = rest.split_once(':').map(|(_, l)| l).unwrap_or("");
        for rank in rank_list(list) {
            block.ranks.push(RasRank {
                rank,
                says: says.to_string(),
                process: None,
            });
        }
        return;
    }
    // A count line that ranks are listed under: "6 ranks have launched up
    // to operation 6649", "2 ranks reported Internal error",
    // "Asynchronous error on 1 rank".
    if line.contains(" rank") {
        *under = line.to_string();
    }
}

/// "3487984 on node 172.16.64.213 managing GPU 5" (after "Process ", or
/// after "process " in a rank line).
fn process_after(text: &str) -> Option<RasProcess> {
    let (pid, rest) = text.split_once(" on node ")?;
    let (host, gpus) = match rest.split_once(" managing GPU") {
        Some((host, gpus)) => (host, gpus.trim_start_matches('s').trim()),
        None => (rest, ""),
    };
    Some(RasProcess {
        pid: pid.trim().parse().ok()?,
        host: host.trim().to_string(),
        gpus: gpus.to_string(),
    })
}

/// After "Rank ": "21 -- GPU 5 managed by process 3487984 on node
/// 172.16.64.213", "4 has status FINALIZE -- GPU 4 managed by ...",
/// "5 -- [process information not found]", "7 has status UNKNOWN".
fn rank_line(rest: &str, under: &str) -> Vec<RasRank> {
    let (head, tail) = rest.split_once(" -- ").unwrap_or((rest, ""));
    let digits_end = head
        .find(|c: char| !(c.is_ascii_digit() || c == ','))
        .unwrap_or(head.len());
    let own = head[digits_end..].trim();
    let says = if !own.is_empty() {
        own.to_string()
    } else if !under.is_empty() {
        under.to_string()
    } else {
        "named".to_string()
    };
    let process = tail
        .split_once(" managed by process ")
        .and_then(|(gpu, p)| {
            process_after(p).map(|mut process| {
                process.gpus = gpu.trim().trim_start_matches("GPU").trim().to_string();
                process
            })
        });
    rank_list(&head[..digits_end])
        .into_iter()
        .map(|rank| RasRank {
            rank,
            says: says.clone(),
            process: process.clone(),
        })
        .collect()
}

/// "21", "3,5", "3, 5".
fn rank_list(text: &str) -> Vec<u32> {
    text.split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect()
}

fn first_number(line: &str) -> Option<u32> {
    line.split_whitespace().find_map(|w| w.parse().ok())
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RasFindingKind {
    /// Fault: RAS declared processes dead (unreachable for 60 s).
    DeadProcesses,
    /// Fault: processes gave RAS no communicator data (stopped, hung as a
    /// whole or gone, or their node unreachable; RAS runs on its own
    /// thread, so a rank that only waits in a collective still answers).
    UnresponsiveProcesses,
    /// Fault: a communicator is missing ranks' data. A note instead when no
    /// process is unresponsive or dead and the communicator is being
    /// created or torn down (its status INIT, FINALIZE or NOCOMM).
    MissingRanks,
    /// Fault: ranks reported an NCCL error (initialisation or
    /// asynchronous).
    RankErrors,
    /// Note: ranks of a communicator launched different numbers of
    /// collectives. Normal while a job runs; a hang only if it stays so
    /// (one look cannot tell).
    CollectiveCountsDiffer,
    /// Note: ranks of a communicator are in different states (creating or
    /// tearing it down).
    StatusDiffers,
    /// Note: RAS timed out reaching some processes while gathering.
    GatherTimeouts,
    /// Note: the job summary names nodes running another number of
    /// processes than the rest.
    UnevenNodes,
    /// Note: a block this gpucheck does not know.
    #[default]
    Other,
}

/// One thing RAS says, with whom it names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RasFinding {
    pub kind: RasFindingKind,
    /// The communicator, where the finding is about one.
    pub communicator: Option<RasCommId>,
    /// Its size, where the communicator table gives it.
    pub communicator_size: Option<u32>,
    /// Ranks as the communicator numbers them.
    pub comm_ranks: Vec<u32>,
    /// The same ranks as the job numbers them: only for a communicator as
    /// large as the job (see the module's note on ranks); else empty.
    pub global_ranks: Vec<u32>,
    /// The processes named (pid, node address, GPUs).
    pub processes: Vec<RasProcess>,
    /// The nodes named, sorted, once each.
    pub hosts: Vec<String>,
    /// One sentence a user reads.
    pub why: String,
}

/// What a RAS status says, split into faults (something is broken now)
/// and notes (what one look cannot settle, or what is normal in passing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RasJudgement {
    pub faults: Vec<RasFinding>,
    pub notes: Vec<RasFinding>,
}

impl RasJudgement {
    /// The global ranks any fault names, sorted, once each.
    pub fn ranks_at_fault(&self) -> Vec<u32> {
        let mut ranks: Vec<u32> = self
            .faults
            .iter()
            .flat_map(|f| f.global_ranks.iter().copied())
            .collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    }

    /// The nodes any fault names, sorted, once each.
    pub fn hosts_at_fault(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .faults
            .iter()
            .flat_map(|f| f.hosts.iter().cloned())
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }
}

/// Judge a RAS status: which ranks, processes and nodes it names at fault,
/// and why. A healthy job (every communicator RUNNING OK) has no faults and
/// no notes.
pub fn judge(status: &RasStatus) -> RasJudgement {
    let mut judgement = RasJudgement::default();
    // With no process unresponsive or dead, a rank missing from a
    // communicator being created or torn down is one not (or no longer) in
    // it (NCCL user guide, "JSON Output": "corner cases during communicator
    // initialization and termination").
    let processes_lost = status
        .blocks
        .iter()
        .any(|b| b.communicator.is_none() && (b.kind == "DEAD" || b.kind == "INCOMPLETE"));
    for block in &status.blocks {
        let finding = finding(status, block);
        let in_passing = !processes_lost
            && finding.kind == RasFindingKind::MissingRanks
            && block.communicator.as_ref().is_some_and(|c| {
                status.groups.iter().any(|g| {
                    g.group == c.group && !matches!(g.status.as_str(), "RUNNING" | "ABORT")
                })
            });
        match finding.kind {
            RasFindingKind::DeadProcesses
            | RasFindingKind::UnresponsiveProcesses
            | RasFindingKind::MissingRanks
            | RasFindingKind::RankErrors
                if !in_passing =>
            {
                judgement.faults.push(finding)
            }
            _ => judgement.notes.push(finding),
        }
    }
    if !status.outlier_nodes.is_empty() {
        let mut hosts = status.outlier_nodes.clone();
        hosts.sort();
        hosts.dedup();
        judgement.notes.push(RasFinding {
            kind: RasFindingKind::UnevenNodes,
            why: format!(
                "NCCL's RAS counts another number of processes on {} than on the job's other nodes",
                list(&hosts)
            ),
            hosts,
            ..RasFinding::default()
        });
    }
    judgement
}

/// The finding one block makes: whom it names, and why.
fn finding(status: &RasStatus, block: &RasBlock) -> RasFinding {
    let size = communicator_size(status, block);
    let spans_job = matches!((size, status.job), (Some(n), Some(job)) if n == job.gpus && n > 0);
    let processes = named_processes(block);
    let comm_ranks = sorted_once(block.ranks.iter().map(|r| r.rank).collect());
    let comm = block
        .communicator
        .as_ref()
        .map(|c| communicator_phrase(c, size))
        .unwrap_or_default();
    let who = who_phrase(&comm_ranks, spans_job, &processes);
    let (kind, why) = kind_and_why(block, &processes, &comm, &who);
    RasFinding {
        kind,
        communicator: block.communicator.clone(),
        communicator_size: size,
        global_ranks: if spans_job {
            comm_ranks.clone()
        } else {
            Vec::new()
        },
        comm_ranks,
        hosts: sorted_once(processes.iter().map(|p| p.host.clone()).collect()),
        processes,
        why,
    }
}

/// The size of a block's communicator, from the communicator table.
fn communicator_size(status: &RasStatus, block: &RasBlock) -> Option<u32> {
    let c = block.communicator.as_ref()?;
    status
        .groups
        .iter()
        .find(|g| g.group == c.group)
        .map(|g| g.ranks_per_comm)
}

/// The processes a block names, its own and its ranks', sorted, once each.
fn named_processes(block: &RasBlock) -> Vec<RasProcess> {
    let mut processes = block.processes.clone();
    processes.extend(block.ranks.iter().filter_map(|r| r.process.clone()));
    sorted_once(processes)
}

/// The items sorted, once each.
fn sorted_once<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort();
    items.dedup();
    items
}

/// A block's kind of finding and its sentence, by the block's heading: a
/// job-wide one (DEAD, INCOMPLETE, TIMEOUT) or a communicator's
/// (INCOMPLETE, ERROR, MISMATCH). `comm` and `who` are
/// [`communicator_phrase`] and [`who_phrase`].
fn kind_and_why(
    block: &RasBlock,
    processes: &[RasProcess],
    comm: &str,
    who: &str,
) -> (RasFindingKind, String) {
    match (block.communicator.is_some(), block.kind.as_str()) {
        (false, "DEAD") => (RasFindingKind::DeadProcesses, dead_why(block, processes)),
        (false, "INCOMPLETE") => (
            RasFindingKind::UnresponsiveProcesses,
            unresponsive_why(block, processes),
        ),
        (false, "TIMEOUT") => (
            RasFindingKind::GatherTimeouts,
            format!("NCCL's RAS: {}", lowercase_first(first_line(block))),
        ),
        (true, "INCOMPLETE") => (
            RasFindingKind::MissingRanks,
            format!("communicator {comm} is missing the data of {who}"),
        ),
        (true, "ERROR") => (
            RasFindingKind::RankErrors,
            format!("in communicator {comm}, {}", error_phrase(block, who)),
        ),
        (true, "MISMATCH") if block.lines.iter().any(|l| l.contains("operation counts")) => (
            RasFindingKind::CollectiveCountsDiffer,
            counts_differ_why(block, comm, who),
        ),
        (true, "MISMATCH") => (
            RasFindingKind::StatusDiffers,
            status_differs_why(block, comm),
        ),
        _ => (RasFindingKind::Other, other_why(block, comm)),
    }
}

/// Why for a job-wide DEAD block.
fn dead_why(block: &RasBlock, processes: &[RasProcess]) -> String {
    format!(
        "NCCL's RAS considers {} dead: unreachable over its network for {RAS_DEAD_AFTER_SECS} s or more",
        processes_or_count(processes, block.count, "job process", "job processes")
    )
}

/// Why for a job-wide INCOMPLETE block.
fn unresponsive_why(block: &RasBlock, processes: &[RasProcess]) -> String {
    format!(
        "{} gave NCCL's RAS no communicator data: stopped, hung as a whole or gone, or its node unreachable (a rank that only waits in a collective still answers RAS)",
        capitalised(&processes_or_count(
            processes,
            block.count,
            "job process",
            "job processes"
        ))
    )
}

/// Why for a communicator's MISMATCH block on operation counts: its count
/// lines ("6 ranks have launched up to operation 6649"), and the ranks.
fn counts_differ_why(block: &RasBlock, comm: &str, who: &str) -> String {
    let counts = block
        .lines
        .iter()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    let named = if block.ranks.is_empty() {
        String::new()
    } else {
        format!("; RAS names {who}")
    };
    format!(
        "in communicator {comm}, ranks launched different numbers of collectives ({counts}){named}: normal while the job runs, a hang if it stays so"
    )
}

/// Why for a communicator's other MISMATCH block (on status): its lines
/// other than those naming ranks.
fn status_differs_why(block: &RasBlock, comm: &str) -> String {
    let said = block
        .lines
        .iter()
        .filter(|l| !l.starts_with("Rank ") && !l.starts_with("The "))
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "in communicator {comm}, {}: normal while a communicator is created or torn down",
        lowercase_first(&said)
    )
}

/// Why for a block this gpucheck does not know: its heading and first line.
fn other_why(block: &RasBlock, comm: &str) -> String {
    let comm = if comm.is_empty() {
        String::new()
    } else {
        format!("{comm} ")
    };
    let first = first_line(block);
    let first = if first.is_empty() {
        String::new()
    } else {
        format!(": {first}")
    };
    format!("NCCL's RAS: {comm}{}{first}", block.kind)
}

/// A block's first line, or "" when it has none.
fn first_line(block: &RasBlock) -> &str {
    block.lines.first().map(String::as_str).unwrap_or("")
}

/// "#0-0 (cf264af53edbe986, 32 ranks)".
fn communicator_phrase(c: &RasCommId, size: Option<u32>) -> String {
    match size {
        Some(n) => format!("#{}-{} ({}, {n} ranks)", c.group, c.index, c.hash),
        None => c.label(),
    }
}

/// "rank 21", "ranks 3, 5 of the communicator", with their processes.
fn who_phrase(ranks: &[u32], spans_job: bool, processes: &[RasProcess]) -> String {
    let mut s = match ranks.len() {
        0 => "ranks RAS does not list".to_string(),
        1 => format!("rank {}", ranks[0]),
        _ => format!("ranks {}", list(ranks)),
    };
    if !ranks.is_empty() && !spans_job {
        s.push_str(" (numbered within the communicator)");
    }
    if !processes.is_empty() {
        let named: Vec<String> = processes.iter().map(RasProcess::phrase).collect();
        s.push_str(&format!(": {}", list(&named)));
    }
    s
}

/// "process 3487984 on 172.16.64.213 (GPU 5)", or "1 job process" when RAS
/// lists none.
fn processes_or_count(
    processes: &[RasProcess],
    count: Option<u32>,
    one: &str,
    many: &str,
) -> String {
    if processes.is_empty() {
        crate::domain::text::counted(count.unwrap_or(0) as usize, one, many)
    } else {
        let named: Vec<String> = processes.iter().map(RasProcess::phrase).collect();
        list(&named)
    }
}

/// "Asynchronous error on 1 rank; rank 3 reported Remote process error".
fn error_phrase(block: &RasBlock, who: &str) -> String {
    let said: Vec<String> = block
        .ranks
        .iter()
        .filter(|r| r.says.starts_with("reported"))
        .map(|r| format!("rank {} {}", r.rank, r.says))
        .collect();
    let summary: Vec<String> = block
        .lines
        .iter()
        .filter(|l| l.contains(" error") && !l.starts_with("Rank "))
        .map(|l| lowercase_first(l))
        .collect();
    let mut parts = summary;
    parts.extend(said);
    if parts.is_empty() {
        format!("{who} reported an NCCL error")
    } else {
        format!("{} ({who})", parts.join("; "))
    }
}

fn list<T: ToString>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(T::to_string).collect();
    crate::domain::text::list_cut(&items, 16)
}

fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn capitalised(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNING_OK: &str = include_str!("../../../tests/fixtures/nccl_ras/running_ok.txt");
    const MISMATCH_COUNTS: &str =
        include_str!("../../../tests/fixtures/nccl_ras/mismatch_counts.txt");
    const FINALIZE_MISMATCH: &str =
        include_str!("../../../tests/fixtures/nccl_ras/finalize_mismatch.txt");
    const INCOMPLETE: &str = include_str!("../../../tests/fixtures/nccl_ras/incomplete.txt");
    const DEAD: &str = include_str!("../../../tests/fixtures/nccl_ras/dead.txt");

    fn judged(text: &str) -> RasJudgement {
        judge(&parse(text).expect("a RAS status"))
    }

    #[test]
    fn ras_exists_from_nccl_2_24() {
        assert!(!ras_supported((2, 23, 4)));
        assert!(!ras_supported((2, 18, 1)));
        assert!(ras_supported((2, 24, 0)));
        assert!(ras_supported((2, 26, 2)));
        assert!(ras_supported((3, 0, 0)));
    }

    #[test]
    fn the_address_is_nccl_ras_addr_or_localhost_28028() {
        assert_eq!(client_addr(None), "localhost:28028");
        assert_eq!(client_addr(Some("  ")), "localhost:28028");
        assert_eq!(client_addr(Some("10.0.0.7:29000")), "10.0.0.7:29000");
    }

    #[test]
    fn a_job_progressing_normally_names_nothing() {
        let status = parse(RUNNING_OK).unwrap();
        assert_eq!(
            status.job,
            Some(RasJob {
                nodes: 4,
                processes: 32,
                gpus: 32
            })
        );
        assert_eq!(status.collection_secs, Some(0.0));
        assert_eq!(status.groups.len(), 1);
        let g = &status.groups[0];
        assert_eq!(
            (g.group, g.comms, g.ranks_per_comm, g.ranks_in_group),
            (0, 8, 4, 32)
        );
        assert_eq!(
            (g.status.as_str(), g.errors.clone()),
            ("RUNNING", vec!["OK".to_string()])
        );
        let j = judge(&status);
        assert!(j.faults.is_empty() && j.notes.is_empty(), "{j:?}");
    }

    #[test]
    fn a_stopped_process_is_named_with_its_node_and_the_missing_global_rank() {
        let status = parse(INCOMPLETE).unwrap();
        assert_eq!(status.collection_secs, Some(2.05));
        assert_eq!(status.groups[0].errors, vec!["INCOMPLETE"]);
        assert_eq!(status.groups[0].ranks_per_node, "7-8");
        let j = judge(&status);
        assert_eq!(j.faults.len(), 2, "{j:?}");
        let unresponsive = &j.faults[0];
        assert_eq!(unresponsive.kind, RasFindingKind::UnresponsiveProcesses);
        assert_eq!(
            unresponsive.processes,
            vec![RasProcess {
                pid: 3487984,
                host: "172.16.64.213".into(),
                gpus: "5".into()
            }]
        );
        assert_eq!(
            unresponsive.why,
            "Process 3487984 on 172.16.64.213 (GPU 5) gave NCCL's RAS no communicator data: \
             stopped, hung as a whole or gone, or its node unreachable (a rank that only waits in a \
             collective still answers RAS)"
        );
        let missing = &j.faults[1];
        assert_eq!(missing.kind, RasFindingKind::MissingRanks);
        assert_eq!(
            missing.communicator.as_ref().unwrap().label(),
            "#0-0 (cf264af53edbe986)"
        );
        assert_eq!(missing.communicator_size, Some(32));
        // The communicator is the whole job (32 ranks, 32 GPUs): rank 21 is global.
        assert_eq!(missing.global_ranks, vec![21]);
        assert_eq!(
            missing.why,
            "communicator #0-0 (cf264af53edbe986, 32 ranks) is missing the data of rank 21"
        );
        assert_eq!(j.ranks_at_fault(), vec![21]);
        assert_eq!(j.hosts_at_fault(), vec!["172.16.64.213"]);
        // Two timeouts while gathering: said, not blamed.
        assert_eq!(j.notes.len(), 1);
        assert_eq!(j.notes[0].kind, RasFindingKind::GatherTimeouts);
        assert_eq!(
            j.notes[0].why,
            "NCCL's RAS: encountered 2 communication timeouts while gathering communicator data"
        );
    }

    #[test]
    fn a_dead_process_is_a_fault_and_without_the_table_its_rank_stays_the_communicators() {
        let j = judged(DEAD);
        assert_eq!(j.faults.len(), 2, "{j:?}");
        assert_eq!(j.faults[0].kind, RasFindingKind::DeadProcesses);
        assert_eq!(
            j.faults[0].why,
            "NCCL's RAS considers process 3487984 on 172.16.64.213 (GPU 5) dead: unreachable \
             over its network for 60 s or more"
        );
        assert_eq!(j.faults[0].hosts, vec!["172.16.64.213"]);
        // The guide's excerpt has no communicator table: the size of #0-0
        // is unknown, so rank 21 is not claimed to be global rank 21.
        assert_eq!(j.faults[1].comm_ranks, vec![21]);
        assert!(j.faults[1].global_ranks.is_empty());
        assert!(j.faults[1]
            .why
            .contains("rank 21 (numbered within the communicator)"));
        assert!(j.ranks_at_fault().is_empty());
        assert_eq!(j.hosts_at_fault(), vec!["172.16.64.213"]);
    }

    #[test]
    fn ranks_one_collective_behind_are_a_note_naming_them_not_a_fault() {
        let status = parse(MISMATCH_COUNTS).unwrap();
        let block = &status.blocks[0];
        assert_eq!(block.kind, "MISMATCH");
        assert_eq!(block.ranks.len(), 6);
        assert_eq!(
            block.ranks[0].says,
            "6 ranks have launched up to operation 6649"
        );
        assert_eq!(
            block.ranks[0].process,
            Some(RasProcess {
                pid: 483072,
                host: "172.16.64.210".into(),
                gpus: "0".into()
            })
        );
        let j = judge(&status);
        assert!(j.faults.is_empty(), "{j:?}");
        assert_eq!(j.notes.len(), 1);
        let note = &j.notes[0];
        assert_eq!(note.kind, RasFindingKind::CollectiveCountsDiffer);
        assert_eq!(note.global_ranks, vec![0, 2, 3, 4, 5, 7]);
        assert!(note.why.starts_with(
            "in communicator #0-0 (27a079b828ff1a75, 32 ranks), ranks launched different numbers \
             of collectives (26 ranks have launched up to operation 6650; 6 ranks have launched \
             up to operation 6649); RAS names ranks 0, 2, 3, 4, 5, 7: process 483072"
        ), "{}", note.why);
        assert!(note.why.ends_with("a hang if it stays so"));
    }

    #[test]
    fn a_communicator_torn_down_is_a_note_with_each_ranks_status() {
        let status = parse(FINALIZE_MISMATCH).unwrap();
        assert_eq!(status.groups.len(), 3);
        assert_eq!(status.groups[0].status, "FINALIZE");
        assert_eq!(status.groups[0].ranks_per_node, "1-2");
        assert_eq!(status.groups[2].status, "INIT");
        let block = &status.blocks[0];
        let finalize: Vec<u32> = block
            .ranks
            .iter()
            .filter(|r| r.says == "2 ranks have status FINALIZE")
            .map(|r| r.rank)
            .collect();
        assert_eq!(finalize, vec![4, 20]);
        let j = judge(&status);
        assert!(j.faults.is_empty(), "{j:?}");
        assert_eq!(j.notes[0].kind, RasFindingKind::StatusDiffers);
        assert_eq!(j.notes[0].global_ranks, vec![0, 4, 8, 16, 20, 24]);
        assert_eq!(
            j.notes[0].hosts,
            vec![
                "172.16.64.210",
                "172.16.64.212",
                "172.16.64.213",
                "172.16.64.222"
            ]
        );
        assert!(j.notes[0].why.contains("ranks have different status"));
    }

    /// The shape NCCL 2.26 and later print (src/ras/client_support.cc): the
    /// version lines, a missing rank with its process, an asynchronous error
    /// in a communicator smaller than the job.
    const NEWER: &str = "NCCL version 2.27.3+cuda12.9 compiled with CUDA 12.9
CUDA runtime version 12090, driver version 12090

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      2          8            1         16       16

Communicators... (5.012s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         8        16        16   RUNNING  INCOMPLETE
    1         2         1         8         8        16   RUNNING  ERROR

Errors
======

#0-0 (0a1b2c3d4e5f6071) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 11 -- GPU 3 (NVML 7) managed by process 9001 on node 10.0.0.2

#1-1 (1122334455667788) ERROR
  Asynchronous error on 1 rank
  Rank 2 reported Remote process error -- GPU 2 managed by process 9002 on node 10.0.0.2

Warnings
========

";

    #[test]
    fn the_newer_shape_gives_the_version_the_process_and_keeps_sub_communicator_ranks_local() {
        let status = parse(NEWER).unwrap();
        assert_eq!(status.nccl_version, Some((2, 27, 3)));
        assert_eq!(status.collection_secs, Some(5.012));
        let j = judge(&status);
        assert_eq!(j.faults.len(), 2, "{j:?}");
        assert_eq!(j.faults[0].kind, RasFindingKind::MissingRanks);
        assert_eq!(j.faults[0].global_ranks, vec![11]);
        assert_eq!(
            j.faults[0].why,
            "communicator #0-0 (0a1b2c3d4e5f6071, 16 ranks) is missing the data of rank 11: \
             process 9001 on 10.0.0.2 (GPU 3 (NVML 7))"
        );
        let error = &j.faults[1];
        assert_eq!(error.kind, RasFindingKind::RankErrors);
        // An 8-rank communicator in a 16-GPU job: rank 2 is its own numbering.
        assert!(error.global_ranks.is_empty());
        assert_eq!(error.comm_ranks, vec![2]);
        assert_eq!(
            error.why,
            "in communicator #1-1 (1122334455667788, 8 ranks), asynchronous error on 1 rank; \
             rank 2 reported Remote process error (rank 2 (numbered within the communicator): \
             process 9002 on 10.0.0.2 (GPU 2))"
        );
        assert_eq!(j.ranks_at_fault(), vec![11]);
        assert_eq!(j.hosts_at_fault(), vec!["10.0.0.2"]);
    }

    #[test]
    fn uneven_nodes_and_the_three_column_summary_are_read() {
        let text = "Job summary
===========

  Nodes  Processes         GPUs
          per node  per process
      1          7            1
      3          8            1

  Nodes  Processes         GPUs
(total)    (total)      (total)
      4         31           31

The outlier node:
  Node 10.0.0.9 running processes 1,2,3,4,5,6,7
";
        let status = parse(text).unwrap();
        assert_eq!(
            status.job,
            Some(RasJob {
                nodes: 4,
                processes: 31,
                gpus: 31
            })
        );
        let j = judge(&status);
        assert!(j.faults.is_empty());
        assert_eq!(j.notes[0].kind, RasFindingKind::UnevenNodes);
        assert_eq!(j.notes[0].hosts, vec!["10.0.0.9"]);
    }

    #[test]
    fn an_error_answer_or_other_text_is_not_a_status() {
        let refused = parse("ERROR: Unknown command STATUSS\n").unwrap_err();
        assert_eq!(
            refused,
            "NCCL's RAS refused the request: Unknown command STATUSS"
        );
        let other = parse("HTTP/1.1 400 Bad Request\r\n\r\n").unwrap_err();
        assert!(
            other.starts_with("the answer is not NCCL's RAS status"),
            "{other}"
        );
        let empty = parse("").unwrap_err();
        assert!(empty.contains("not NCCL's RAS status"));
    }

    #[test]
    fn no_communicators_yet_is_read_and_names_nothing() {
        let text = "Job summary\n===========\n\n  Nodes  Processes         GPUs  Processes     GPUs\n\
                    (total)   per node  per process    (total)  (total)\n      1          2            1          2        2\n\n\
                    Communicators... (0.000s)\n=============\n\nNo communicator data collected!\n";
        let status = parse(text).unwrap();
        assert!(status.no_communicators);
        assert_eq!(status.job.map(|j| j.gpus), Some(2));
        let j = judge(&status);
        assert!(j.faults.is_empty() && j.notes.is_empty());
    }

    #[test]
    fn a_rank_missing_from_a_communicator_being_torn_down_is_a_note_unless_a_process_is_lost() {
        let torn_down = "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         1         4         4         4  FINALIZE  INCOMPLETE

Errors
======

#0-0 (00000000000000bb) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 3 -- GPU 3 managed by process 77 on node 10.0.0.1
";
        let j = judged(torn_down);
        assert!(j.faults.is_empty(), "{j:?}");
        assert_eq!(j.notes[0].kind, RasFindingKind::MissingRanks);
        let lost = torn_down.replace(
            "#0-0",
            "DEAD\n  1 job process is considered dead (unreachable via the RAS network)\n  \
             Process 77 on node 10.0.0.1 managing GPU 3\n\n#0-0",
        );
        let j = judged(&lost);
        assert_eq!(j.faults.len(), 2, "{j:?}");
        assert_eq!(j.faults[1].kind, RasFindingKind::MissingRanks);
        assert_eq!(j.hosts_at_fault(), vec!["10.0.0.1"]);
    }

    #[test]
    fn old_missing_and_unknown_rank_lists_are_read() {
        let text = "#0-0 (00000000000000aa) INCOMPLETE\n  Missing communicator data from 2 ranks\n  The missing ranks: 3,5\n\n\
                    #0-0 (00000000000000aa) MISMATCH\n  Communicator ranks have different status\n  The unknown ranks: 1,2\n";
        let status = parse(text).unwrap();
        assert_eq!(status.blocks[0].count, Some(2));
        let ranks: Vec<u32> = status.blocks[0].ranks.iter().map(|r| r.rank).collect();
        assert_eq!(ranks, vec![3, 5]);
        assert_eq!(status.blocks[1].ranks[1].says, "status UNKNOWN");
        let j = judge(&status);
        assert_eq!(j.faults.len(), 1);
        assert_eq!(j.faults[0].comm_ranks, vec![3, 5]);
        assert_eq!(j.notes[0].kind, RasFindingKind::StatusDiffers);
    }
}

//! `gpucheck cluster`: every node of a job runs the same command; each runs
//! its local checks exactly as `gpucheck run` does, then the nodes meet
//! through torch.distributed's TCPStore at the master (the payload in
//! `rendezvous.rs`), run the all-reduce over every GPU of every node and,
//! with 3 nodes or more, the pair rounds node rank 0 plans
//! (`domain::pairs::plan`); node rank 0 gathers every node's report, judges
//! the fleet checks (`gpucheck_checks::fleet`), prints the fleet report and
//! publishes the verdict, which every other node reads and prints. Every
//! node exits 1 when the fleet is not ready.
//!
//! `identity.rs` resolves who this node is (flags, torchrun's PET_*, SLURM,
//! MASTER_*); `report.rs` is the fleet report and its text.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpucheck_checks::domain::pairs;
use gpucheck_checks::fleet::{self, Fleet, FleetNode, PairTable};
use gpucheck_checks::probe::python::find_python;
use gpucheck_checks::{Check, Outcome};
use serde::{Deserialize, Serialize};

use crate::cli::{ClusterArgs, ClusterFlags, RunArgs};
use crate::model::{CheckResult, Run};
use crate::report::Format;
use crate::UsageError;

pub mod checked;
pub mod identity;
mod job;
pub mod rendezvous;
pub mod report;
pub mod seal;
pub mod watch;

use identity::IdentityFlags;
pub use job::job;
use rendezvous::{Config, DuplicateNote, Event, Joined, PairPlan, PairResult, Session, Verdict};
use report::{FleetReport, NodeEntry, FLEET_FORMAT_VERSION};
use seal::Token;

/// The largest token file read: a secret is a few dozen bytes (`openssl
/// rand -hex 32` writes 65).
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

impl ClusterFlags {
    /// The cluster token: --token-file, else $GPUCHECK_CLUSTER_TOKEN; an
    /// unreadable or empty one is a usage error.
    fn token(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Token>, UsageError> {
        let (bytes, from) = match &self.token_file {
            // A regular file, read without waiting: a FIFO with no writer
            // would hold gpucheck before its run, deaf to Ctrl-C (a
            // secret that lives in no file goes in $GPUCHECK_CLUSTER_TOKEN).
            Some(p) => (
                gpucheck_checks::input::read_regular(p, MAX_TOKEN_BYTES).map_err(|e| {
                    UsageError(format!("cannot read --token-file {}: {e}", p.display()))
                })?,
                format!("--token-file {}", p.display()),
            ),
            None => match env("GPUCHECK_CLUSTER_TOKEN") {
                Some(t) => (t.into_bytes(), "$GPUCHECK_CLUSTER_TOKEN".to_string()),
                None => return Ok(None),
            },
        };
        Token::new(&bytes)
            .map(Some)
            .ok_or_else(|| UsageError(format!("the cluster token ({from}) is empty")))
    }
}

/// What each node hands over through the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeMessage {
    pub node_rank: u32,
    pub tool_version: String,
    pub report: Run,
    pub env: BTreeMap<String, String>,
}

/// The variables the fleet checks compare across nodes.
fn fleet_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("NCCL_") || k.starts_with("GLOO_") || k == "CUDA_VISIBLE_DEVICES"
        })
        .collect()
}

/// `gpucheck cluster`.
pub fn command(args: &ClusterArgs) -> anyhow::Result<u8> {
    if args.run.replay.is_some() {
        return Err(UsageError(
            "--replay judges one node's capture, while `gpucheck cluster` meets the other nodes \
             live: replay each node's capture with `gpucheck --replay FILE`"
                .into(),
        )
        .into());
    }
    unwritten(&args.run.output)?;
    gate(&args.run, &args.cluster, false)
}

/// `gpucheck exec --cluster -- CMD`: the cluster gate with every report on
/// stderr (stdout belongs to CMD), then CMD when the fleet is ready.
pub fn exec(args: &crate::cli::ExecArgs) -> anyhow::Result<u8> {
    let program = args
        .command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let argv: Vec<std::ffi::CString> = args
        .command
        .iter()
        .map(|a| std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(a.as_os_str())))
        .collect::<Result<_, _>>()
        .map_err(|_| UsageError("the command contains a NUL byte".into()))?;
    if !args.watch.watch {
        // Under --watch, the watch of CMD writes them.
        unwritten(&args.run.output)?;
    }
    let code = gate(&args.run, &args.cluster_flags, true)?;
    // As `exec`: a JSON (or other) report on stderr is all stderr carries.
    let notes = crate::table_on_stream(&args.run.output);
    if let Some(sig) = crate::interrupt::interrupted() {
        if notes {
            say!("gpucheck: not running {program}: interrupted by {sig}");
        }
        return Ok(1);
    }
    if code != 0 && args.on_fail == crate::cli::OnFail::Exit {
        if notes {
            say!(
                "gpucheck: not running {program}: the fleet is not ready (use --on-fail warn to \
                 run it anyway)"
            );
        }
        return Ok(1);
    }
    if args.watch.watch {
        return crate::run_watched(args, &argv, &program, notes);
    }
    crate::become_command(&argv, &program, notes)
}

/// This node's part of a rendezvous, from its flags and environment: who it
/// is, the run every node shares, the cluster token and the Python that
/// meets (`gpucheck cluster`, `job --nnodes`, the watch across nodes).
struct Meeting {
    id: identity::Identity,
    run_id: Option<identity::Sourced<String>>,
    token: Option<Token>,
    python: PathBuf,
}

impl Meeting {
    fn resolve(cluster: &ClusterFlags, python: Option<&std::path::Path>) -> anyhow::Result<Self> {
        let flags = IdentityFlags {
            nnodes: cluster.nnodes,
            node_rank: cluster.node_rank,
            master_addr: cluster.master_addr.clone(),
            master_port: cluster.master_port,
        };
        let env = |k: &str| std::env::var(k).ok();
        let id = identity::resolve(&flags, &env).map_err(UsageError)?;
        let run_id = identity::run_id(cluster.run_id.as_deref(), &env).map_err(UsageError)?;
        let token = cluster.token(&env)?;
        let python = find_python(python)
            .map_err(|e| UsageError(format!("cannot run the rendezvous: {e}")))?;
        Ok(Meeting {
            id,
            run_id,
            token,
            python: python.path,
        })
    }

    /// `config` for this meeting's run: its id and where the id came from.
    fn for_run(&self, config: Config) -> Config {
        Config {
            run_id: self.run_id.as_ref().map(|r| r.value.clone()),
            run_id_from: self.run_id.as_ref().map(|r| r.from.clone()),
            ..config
        }
    }
}

/// Run this node's part of the cluster check; the text goes to stdout, or
/// to stderr when `to_stderr`. Returns the exit code.
fn gate(run_args: &RunArgs, cluster: &ClusterFlags, to_stderr: bool) -> anyhow::Result<u8> {
    let meeting = Meeting::resolve(cluster, run_args.python.as_deref())?;
    let (id, token) = (&meeting.id, meeting.token.as_ref());
    let node_rank = id.node_rank.value;
    let outputs = Outputs::plan(&run_args.output, node_rank == 0)?;
    let run = run_local(run_args)?;
    let own = NodeMessage {
        node_rank,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        report: run.clone(),
        env: fleet_env(),
    };
    let mut config = meeting.for_run(session_config(id, run_args, cluster));
    config.profile = format!("{:?}", run.profile).to_lowercase();
    config.host = checked::clean(&run.host.hostname, checked::MAX_HOST);
    let session = Session::start(
        &meeting.python,
        &config,
        token,
        &serde_json::to_string(&own)?,
    );
    if node_rank == 0 {
        let judged = |f: &Fleet, raw: &[(u32, Joined, NodeMessage)], id: &str| {
            judge(f, raw, id, run_args.output.strict)
        };
        let report = lead(session, &config, token, &own, run_args.min_busbw, judged);
        outputs.finish(&report, &run, &run_args.output, to_stderr)?;
        let hosts: Vec<&str> = report.nodes.iter().map(|n| n.host.as_str()).collect();
        note_unauthenticated(to_stderr, token.is_none(), &config.master_addr, &hosts);
        Ok(report.exit_code.clamp(0, 255) as u8)
    } else {
        let verdict = follow(session, &config, token);
        let text = format!("{}\n{}\n", report::node_line(node_rank, &run), verdict.line);
        show(&text, to_stderr)?;
        note_unauthenticated(to_stderr, token.is_none(), &config.master_addr, &[]);
        Ok(verdict.exit_code.max(run.exit_code).clamp(0, 255) as u8)
    }
}

/// Under `exec --cluster` on a fleet of more than one host without a
/// token, say once that the gate could have been opened by anyone who
/// reaches the port.
fn note_unauthenticated(exec: bool, no_token: bool, master: &str, hosts: &[&str]) {
    if exec && no_token && spans_hosts(master, hosts) {
        say!(
            "gpucheck: note: the rendezvous at {master} is unauthenticated: any process that \
             reaches its port can change this verdict; set GPUCHECK_CLUSTER_TOKEN (or \
             --token-file) on every node"
        );
    }
}

/// Whether the fleet spans more than one host: node 0 knows its nodes'
/// host names; another node knows it when the master is not itself.
fn spans_hosts(master: &str, hosts: &[&str]) -> bool {
    if !hosts.is_empty() {
        return hosts.iter().any(|h| *h != hosts[0]);
    }
    let loopback = master
        .parse::<std::net::IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(master == "localhost");
    !loopback
}

/// This node's local checks, as `gpucheck run` runs them (its reports go
/// into the fleet report, not to files of their own).
fn run_local(run_args: &RunArgs) -> anyhow::Result<Run> {
    let mut local = run_args.clone();
    local.output.json = None;
    local.output.junit = None;
    local.output.format = Format::Table;
    let plan = crate::pipeline::plan(&local)?;
    Ok(crate::pipeline::execute(&plan, local.output.strict))
}

/// What the payload is told.
fn session_config(id: &identity::Identity, run_args: &RunArgs, cluster: &ClusterFlags) -> Config {
    Config {
        backend: match (run_args.ddp_backend, run_args.ddp_device) {
            (_, Some(gpucheck_checks::DdpDevice::Cpu)) => Some("gloo".to_string()),
            (Some(b), _) => Some(format!("{b:?}").to_lowercase()),
            (None, _) => None,
        },
        nproc: run_args.nproc,
        ..base_config(id, cluster)
    }
}

/// What every session is told: who this node is, the deadlines, and the
/// all-reduce with its pair steps (which a job's session leaves out).
fn base_config(id: &identity::Identity, cluster: &ClusterFlags) -> Config {
    Config {
        node_rank: id.node_rank.value,
        nnodes: id.nnodes.value,
        master_addr: id.master_addr.value.clone(),
        master_port: id.master_port.value,
        rdzv_timeout_s: cluster.rdzv_timeout,
        margin_s: rendezvous::VERDICT_MARGIN.as_secs_f64(),
        ack_timeout_s: rendezvous::ACK_TIMEOUT.as_secs_f64(),
        allreduce: true,
        backend: None,
        allreduce_timeout_s: rendezvous::ALLREDUCE_TIMEOUT.as_secs_f64(),
        nproc: None,
        pair_steps: rendezvous::PAIR_STEPS,
        run_id: None,
        run_id_from: None,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        profile: String::new(),
        host: String::new(),
        watch: false,
    }
}

/// The reports a fleet's gate does not write (Prometheus, Markdown, the
/// HTML page are one node's): refused before anything runs, rather than
/// asked for and silently never written.
pub(crate) fn unwritten(output: &crate::cli::OutputArgs) -> Result<(), UsageError> {
    let asked = [
        (output.prom.is_some(), "--prom"),
        (output.markdown.is_some(), "--markdown"),
        (output.html.is_some(), "--html"),
        (output.format == Format::Prom, "--format prom"),
        (output.format == Format::Markdown, "--format markdown"),
        (output.format == Format::Html, "--format html"),
    ];
    match asked.iter().find(|(on, _)| *on) {
        Some((_, flag)) => Err(UsageError(format!(
            "{flag} is one node's report; across nodes node rank 0 writes the whole run's as \
             the table, --json and --junit"
        ))),
        None => Ok(()),
    }
}

/// Where node rank 0's fleet report goes: the format on stdout (`--json -`
/// or `--junit -` ask for it there) and the report files, checked before
/// the checks run.
struct Outputs {
    stream: Format,
    json: Option<ReportOut>,
    junit: Option<ReportOut>,
}

impl Outputs {
    fn plan(output: &crate::cli::OutputArgs, node_0: bool) -> Result<Outputs, UsageError> {
        let dash = Some(std::path::Path::new("-"));
        let stream = match (
            output.json.as_deref() == dash,
            output.junit.as_deref() == dash,
        ) {
            (true, true) => {
                return Err(UsageError(
                    "--json - and --junit - both ask for stdout; write one of them to a file"
                        .into(),
                ))
            }
            (true, false) => Format::Json,
            (false, true) => Format::Junit,
            (false, false) => output.format,
        };
        let planned = |p: &Option<PathBuf>| match p {
            Some(p) if node_0 && p.as_path() != std::path::Path::new("-") => {
                ReportOut::plan(p).map(Some)
            }
            _ => Ok(None),
        };
        Ok(Outputs {
            stream,
            json: planned(&output.json)?,
            junit: planned(&output.junit)?,
        })
    }

    /// Print the fleet report and write its files.
    fn finish(
        self,
        report: &FleetReport,
        run: &Run,
        output: &crate::cli::OutputArgs,
        to_stderr: bool,
    ) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(report)? + "\n";
        let xml = report::junit(report, run);
        let text = match self.stream {
            Format::Json => json.clone(),
            Format::Junit => xml.clone(),
            _ if output.quiet => report.verdict_line() + "\n",
            _ => report.render_text(output.verbose),
        };
        let written: Result<Vec<()>, UsageError> = [(self.json, json), (self.junit, xml)]
            .into_iter()
            .filter_map(|(out, text)| out.map(|o| o.write(&text)))
            .collect();
        show(&text, to_stderr)?;
        written?;
        Ok(())
    }
}

fn show(text: &str, to_stderr: bool) -> anyhow::Result<()> {
    if to_stderr {
        // Advice under exec: a stderr that cannot be written must not keep
        // CMD from running.
        let _ = crate::emit_to(std::io::stderr().lock(), "stderr", text);
        Ok(())
    } else {
        crate::emit(text)
    }
}

/// Node rank 0: gather, judge, publish the verdict, return the report.
fn lead(
    session: Result<Session, String>,
    config: &Config,
    token: Option<&Token>,
    own: &NodeMessage,
    min_busbw: Option<f64>,
    judged: impl Fn(&Fleet, &[(u32, Joined, NodeMessage)], &str) -> FleetReport,
) -> FleetReport {
    let mut fleet = Fleet {
        nnodes: config.nnodes,
        master: format!("{}:{}", config.master_addr, config.master_port),
        min_busbw_gbps: min_busbw,
        ..Default::default()
    };
    let mut session = match session {
        Ok(s) => Some(s),
        Err(e) => {
            fleet.rendezvous_error = Some(e);
            None
        }
    };
    let mut raw: Vec<(u32, Joined, NodeMessage)> = Vec::new();
    let mut run_id = config.run_id.clone().unwrap_or_default();
    if let Some(s) = session.as_mut() {
        let deadline = Instant::now()
            + rendezvous::IMPORT_BUDGET
            + Duration::from_secs_f64(config.rdzv_timeout_s)
            + rendezvous::VERDICT_MARGIN
            + rendezvous::collective_budget();
        match gathered(s, deadline, config.nnodes) {
            Ok(g) => {
                run_id = g.run_id.clone();
                raw = g.nodes;
                fleet.missing = g.missing;
                fleet.pairs = g.pairs;
                fleet.rejected = g.rejected;
                fleet.refused = g.refused;
                fleet.ignored = g.ignored;
                fleet.duplicates = g.duplicates;
                fleet.unverified = g.unverified;
            }
            Err(e) => fleet.rendezvous_error = Some(e),
        }
    }
    if fleet.rendezvous_error.is_some() && raw.is_empty() {
        // Nobody could be heard: the fleet is this node and the unknown rest.
        fleet.missing = (1..config.nnodes).collect();
        let joined = Joined {
            message: serde_json::Value::Null,
            torch: None,
            clock: None,
            allreduce: None,
        };
        raw.push((0, joined, own.clone()));
    }
    fleet.nodes = raw.iter().map(|(r, j, m)| fleet_node(*r, j, m)).collect();
    let report = judged(&fleet, &raw, &run_id);
    if let Some(s) = session.as_mut() {
        publish_verdict(s, &report, token);
    }
    report
}

/// Hand node 0's payload the verdict, sealed here for the key it is stored
/// at, and wait (bounded) while the other nodes read it.
fn publish_verdict(session: &mut Session, report: &FleetReport, token: Option<&Token>) {
    let verdict = Verdict {
        exit_code: report.exit_code,
        line: report.verdict_line(),
        run_id: report.run_id.clone(),
    };
    let key = format!("gpucheck/{}/verdict", report.run_id);
    let body = serde_json::to_string(&verdict).unwrap_or_default();
    let sealed = serde_json::json!({ "sealed": seal::seal(token, &key, &body) });
    session.send(sealed.to_string());
    let _ = session.next(
        Instant::now() + rendezvous::ACK_TIMEOUT + rendezvous::VERDICT_MARGIN,
        "the nodes to read the verdict",
    );
}

/// What node 0's payload gathered.
struct Gathered {
    run_id: String,
    nodes: Vec<(u32, Joined, NodeMessage)>,
    missing: Vec<u32>,
    rejected: Vec<(u32, String)>,
    refused: Vec<(u32, String)>,
    ignored: Vec<String>,
    duplicates: Vec<fleet::Duplicate>,
    unverified: u32,
    pairs: Option<PairTable>,
}

/// Wait for node 0's payload to gather every node's entry, answering its
/// requests for pair rounds on the way (`domain::pairs::plan`).
fn gathered(session: &mut Session, deadline: Instant, nnodes: u32) -> Result<Gathered, String> {
    loop {
        match session.next(deadline, "every node to join")? {
            Event::Joined { .. }
            | Event::Done { .. }
            | Event::Verdict { .. }
            | Event::Summary { .. }
            | Event::Order { .. } => continue,
            Event::Error { stage, detail, .. } => {
                return Err(format!("{stage}: {}", checked::clean(&detail, 600)))
            }
            Event::Pairs { pass, results } => {
                let table: Vec<_> = results.iter().map(PairResult::bandwidth).collect();
                let plan = PairPlan {
                    rounds: pairs::plan(nnodes, pass, &table),
                };
                session.send(serde_json::to_string(&plan).unwrap_or_default());
            }
            Event::Gathered {
                run_id,
                nodes,
                missing,
                rejected,
                refused,
                ignored,
                duplicates,
                unverified,
                pairs,
                pair_rounds,
            } => {
                let (nodes, mut bad) = read_entries(nodes);
                bad.extend(ranked(rejected));
                bad.sort();
                return Ok(Gathered {
                    run_id: checked::clean(&run_id, identity::MAX_RUN_ID),
                    nodes,
                    missing,
                    rejected: bad,
                    refused: ranked(refused),
                    ignored: ignored.iter().map(|i| checked::clean(i, 300)).collect(),
                    duplicates: duplicates.iter().map(duplicate).collect(),
                    unverified,
                    pairs: pair_table(&pairs, pair_rounds),
                });
            }
        }
    }
}

/// "rank" -> text maps from the payload, as (rank, cleaned text).
fn ranked(map: BTreeMap<String, String>) -> Vec<(u32, String)> {
    map.into_iter()
        .filter_map(|(r, why)| Some((r.parse().ok()?, checked::clean(&why, 600))))
        .collect()
}

fn duplicate(d: &DuplicateNote) -> fleet::Duplicate {
    let named = |host: &str, pid: Option<u32>| match pid {
        Some(p) => format!("{} (pid {p})", checked::clean(host, checked::MAX_HOST)),
        None => checked::clean(host, checked::MAX_HOST),
    };
    fleet::Duplicate {
        node_rank: d.node_rank,
        first: named(&d.first, d.first_pid),
        second: named(&d.second, d.second_pid),
    }
}

type Entries = (Vec<(u32, Joined, NodeMessage)>, Vec<(u32, String)>);

/// Every node's store entry, read and checked (`checked::entry`); an entry
/// that fails is that node's error.
fn read_entries(nodes: BTreeMap<String, serde_json::Value>) -> Entries {
    let mut joined = Vec::new();
    let mut unreadable = Vec::new();
    for (rank, value) in nodes {
        let Ok(r) = rank.parse::<u32>() else { continue };
        match checked::entry(r, value) {
            Ok((j, m)) => joined.push((r, j, m)),
            Err(e) => unreadable.push((r, e)),
        }
    }
    (joined, unreadable)
}

/// The pair table for `fleet.pairs`; None when no pair round ran.
fn pair_table(results: &[PairResult], rounds: u32) -> Option<PairTable> {
    if rounds == 0 && results.is_empty() {
        return None;
    }
    Some(PairTable {
        pairs: results.iter().map(PairResult::bandwidth).collect(),
        rounds,
        errors: results
            .iter()
            .filter_map(|p| {
                let e = checked::clean(p.error.as_ref()?, 600);
                Some(format!("pair ({}, {}): {e}", p.a, p.b))
            })
            .collect(),
    })
}

fn fleet_node(rank: u32, joined: &Joined, m: &NodeMessage) -> FleetNode {
    FleetNode {
        node_rank: rank,
        hostname: m.report.host.hostname.clone(),
        results: m
            .report
            .results
            .iter()
            .map(|r| (r.id.clone(), r.outcome.clone()))
            .collect(),
        exit_code: m.report.exit_code,
        env: m.env.clone(),
        torch: joined.torch.clone(),
        clock: joined.clock,
        allreduce: joined.allreduce.clone(),
    }
}

/// Run every fleet check over the gathered fleet.
fn judge(
    fleet: &Fleet,
    raw: &[(u32, Joined, NodeMessage)],
    run_id: &str,
    strict: bool,
) -> FleetReport {
    let results: Vec<CheckResult> = fleet::FLEET_CATALOG
        .iter()
        .map(|c| fleet_result(*c, || c.judge(fleet)))
        .collect();
    fleet_report(fleet, raw, run_id, strict, results)
}

/// The result of a check node rank 0 judges over the whole fleet or job:
/// `judge` run and timed, its action resolved.
fn fleet_result<C: Check + ?Sized>(check: &C, judge: impl FnOnce() -> Outcome) -> CheckResult {
    let started = Instant::now();
    let mut outcome = judge();
    outcome.resolve_action(check.id());
    outcome.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    CheckResult {
        id: check.id().to_string(),
        title: check.title().to_string(),
        group: check.group().to_string(),
        profile: check.profile(),
        outcome,
    }
}

/// The fleet report of `results`, judged over every node's entry.
fn fleet_report(
    fleet: &Fleet,
    raw: &[(u32, Joined, NodeMessage)],
    run_id: &str,
    strict: bool,
    results: Vec<CheckResult>,
) -> FleetReport {
    let counts = Run::count(&results);
    let nodes = raw
        .iter()
        .map(|(r, j, m)| NodeEntry {
            node_rank: *r,
            host: m.report.host.hostname.clone(),
            results: m.report.with_actions().results,
            counts: m.report.counts,
            exit_code: m.report.exit_code,
            action: m.report.action(),
            env: m.env.clone(),
            clock_offset_s: j.clock.map(|c| c.offset_s),
        })
        .collect();
    FleetReport {
        format_version: FLEET_FORMAT_VERSION,
        tool: "gpucheck".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        nnodes: fleet.nnodes,
        master: fleet.master.clone(),
        run_id: run_id.to_string(),
        nodes,
        rejected_nodes: fleet
            .rejected
            .iter()
            .chain(&fleet.refused)
            .map(|(r, why)| report::RejectedNode {
                node_rank: *r,
                reason: why.clone(),
            })
            .collect(),
        unverified_values: fleet.unverified,
        missing_node_ranks: fleet.missing.clone(),
        job: false,
        exit_code: Run::exit_code_for(&counts, strict),
        action: report::fleet_action(&results),
        fleet: results,
        counts,
    }
}

/// Another node: wait for node 0's verdict; no verdict is a failure that
/// says what was tried.
fn follow(session: Result<Session, String>, config: &Config, token: Option<&Token>) -> Verdict {
    let master = format!("{}:{}", config.master_addr, config.master_port);
    let mut session = match session {
        Ok(s) => s,
        Err(e) => return not_ready(format!("cannot start the rendezvous: {e}")),
    };
    let deadline = Instant::now()
        + rendezvous::IMPORT_BUDGET
        + Duration::from_secs_f64(config.rdzv_timeout_s)
        + rendezvous::VERDICT_MARGIN * 2
        + rendezvous::collective_budget();
    let mut run_id = config.run_id.clone();
    loop {
        match session.next(deadline, "node 0's verdict") {
            Ok(Event::Joined { run_id: Some(r) }) => run_id = Some(r),
            Ok(Event::Verdict {
                sealed,
                key,
                duplicate,
                unverified,
            }) => {
                let mut v = opened_verdict(token, &key, &sealed, run_id.as_deref());
                if let Some(host) = duplicate {
                    v.exit_code = v.exit_code.max(1);
                    v.line.push_str(&format!(
                        "\nthis node's rank was also claimed by {}: give every node its own \
                         --node-rank",
                        checked::clean(&host, checked::MAX_HOST)
                    ));
                }
                if unverified > 0 {
                    v.line.push_str(&format!(
                        "\n{} that did not verify with the cluster token {} ignored",
                        gpucheck_checks::domain::text::counted(
                            unverified as usize,
                            "store value",
                            "store values"
                        ),
                        if unverified == 1 { "was" } else { "were" }
                    ));
                }
                return v;
            }
            Ok(Event::Error {
                stage,
                detail,
                resolved,
                missing,
                ..
            }) => return not_ready(error_why(&master, &stage, &detail, &resolved, &missing)),
            Ok(_) => continue,
            Err(e) => return not_ready(format!("{e} (master {master})")),
        }
    }
}

fn not_ready(why: String) -> Verdict {
    Verdict {
        exit_code: 1,
        line: format!("FLEET NOT READY: {why}"),
        run_id: String::new(),
    }
}

/// Node 0's verdict as stored at `key`: opened with the token (gpucheck
/// checks the MAC itself), strictly parsed, of this run, its line cleaned.
fn opened_verdict(token: Option<&Token>, key: &str, sealed: &str, run_id: Option<&str>) -> Verdict {
    let body = match seal::open(token, key, sealed) {
        Ok(b) => b,
        Err(e) => return not_ready(format!("node 0's verdict was refused: {e}")),
    };
    let v: Verdict = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return not_ready(format!("node 0's verdict cannot be read: {e}")),
    };
    if run_id.is_some_and(|r| r != v.run_id) || key != format!("gpucheck/{}/verdict", v.run_id) {
        return not_ready(format!(
            "the verdict read belongs to run {}, not to this one",
            checked::clean(&v.run_id, identity::MAX_RUN_ID)
        ));
    }
    Verdict {
        exit_code: if (0..=2).contains(&v.exit_code) {
            v.exit_code
        } else {
            1
        },
        line: checked::clean(&v.line, 2 * checked::MAX_LINE),
        run_id: v.run_id,
    }
}

/// What a node that got no verdict prints after "FLEET NOT READY: ".
fn error_why(
    master: &str,
    stage: &str,
    detail: &str,
    resolved: &[String],
    missing: &[u32],
) -> String {
    let detail = checked::clean(detail, 2 * checked::MAX_LINE);
    match stage {
        "resolve" | "connect" => format!(
            "cannot reach the master {master} (resolved to {}): {detail}",
            if resolved.is_empty() {
                "nothing".to_string()
            } else {
                resolved.join(", ")
            }
        ),
        "verdict" if !missing.is_empty() => format!(
            "{detail}; node ranks not in the store: {}",
            missing
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "verdict" | "unanswered" | "gone" | "run" | "claim" => detail,
        _ => format!("the rendezvous at {master} failed ({stage}): {detail}"),
    }
}

/// `--json FILE` / `--junit FILE` on node rank 0: checked before the checks
/// run, written whole at the end (a temporary file renamed into place).
struct ReportOut {
    path: PathBuf,
}

impl ReportOut {
    fn plan(path: &std::path::Path) -> Result<ReportOut, UsageError> {
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        if path.is_dir() {
            return Err(UsageError(format!(
                "cannot write a report to {}: it is a folder",
                path.display()
            )));
        }
        tempfile::NamedTempFile::new_in(folder)
            .map_err(|e| UsageError(format!("cannot write a report to {}: {e}", path.display())))?;
        Ok(ReportOut {
            path: path.to_path_buf(),
        })
    }

    fn write(self, text: &str) -> Result<(), UsageError> {
        let fail =
            |e: std::io::Error| UsageError(format!("cannot write {}: {e}", self.path.display()));
        let folder = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        let mut temp = tempfile::NamedTempFile::new_in(folder).map_err(fail)?;
        std::io::Write::write_all(&mut temp, text.as_bytes()).map_err(fail)?;
        temp.persist(&self.path).map_err(|e| fail(e.error))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_result_times_the_judging() {
        let result = fleet_result(&fleet::Hosts, || {
            std::thread::sleep(Duration::from_millis(20));
            Outcome::pass("judged")
        });
        assert_eq!(result.id, "fleet.hosts");
        assert_eq!(result.outcome.summary, "judged");
        assert!(
            result.outcome.duration_ms >= 20.0,
            "{}",
            result.outcome.duration_ms
        );
    }

    #[test]
    fn the_unauthenticated_note_is_for_fleets_of_more_than_one_host() {
        assert!(!spans_hosts("127.0.0.1", &[]));
        assert!(!spans_hosts("localhost", &[]));
        assert!(!spans_hosts("::1", &[]));
        assert!(spans_hosts("node01", &[]));
        assert!(spans_hosts("10.0.0.1", &[]));
        assert!(!spans_hosts("10.0.0.1", &["vm", "vm"]));
        assert!(spans_hosts("127.0.0.1", &["gpu-001", "gpu-002"]));
    }

    #[test]
    fn a_verdict_is_accepted_only_when_its_seal_key_and_run_match() {
        let t = Token::new(b"secret").unwrap();
        let body =
            r#"{"exit_code":0,"line":"FLEET READY: 2 of 2 nodes joined\u001b[2J","run_id":"r1"}"#;
        let key = "gpucheck/r1/verdict";
        let v = opened_verdict(Some(&t), key, &seal::seal(Some(&t), key, body), Some("r1"));
        assert_eq!(v.exit_code, 0);
        assert_eq!(v.line, "FLEET READY: 2 of 2 nodes joined [2J");
        // Unsigned, under another key, of another run, out of range.
        let v = opened_verdict(Some(&t), key, body, Some("r1"));
        assert_eq!(v.exit_code, 1);
        assert!(
            v.line
                .contains("node 0's verdict was refused: it is not sealed"),
            "{}",
            v.line
        );
        let other = "gpucheck/r2/verdict";
        let v = opened_verdict(Some(&t), other, &seal::seal(Some(&t), other, body), None);
        assert_eq!(v.exit_code, 1, "{}", v.line);
        let v = opened_verdict(None, key, body, Some("r2"));
        assert_eq!(v.exit_code, 1);
        assert!(v.line.contains("belongs to run r1"), "{}", v.line);
        let odd = r#"{"exit_code":-7,"line":"x","run_id":"r1"}"#;
        assert_eq!(opened_verdict(None, key, odd, None).exit_code, 1);
    }
}

//! The one run path every subcommand shares: options resolved into a
//! [`Plan`] before anything runs (a bad flag or report path fails fast with
//! exit 2), the plan executed into a [`Run`] by the runner, and the run
//! handed to the reporters ([`report`]). `gpucheck run`, `exec`, `capture`,
//! `cluster` (each node's local checks) and `job` all go through it; they
//! differ only in which checks they plan and where the report goes.

use std::io::IsTerminal;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpucheck_checks::job::{JOB_CATALOG, TRACES_CATALOG};
use gpucheck_checks::probe::fr_dump;
use gpucheck_checks::probe::process;
use gpucheck_checks::seam::capture::MAX_JOB_CAPTURE_BYTES;
use gpucheck_checks::{Options, Profile, Status, CATALOG};

use crate::cli::{ColorChoice, JobArgs, OutputArgs, RunArgs};
use crate::model::{self, CheckResult, HostFacts, Run};
use crate::report::{Format, Style};
use crate::{capture, interrupt, output, progress, runner, terminal_width, UsageError};
use crate::{emit, emit_to, EXIT_NOT_READY, EXIT_USAGE};

/// The health profile's time budget for the whole run when no --timeout is
/// given: it ends, with its verdict, within half of the 10 s the README's
/// HEALTHCHECK gives it (`--timeout=10s`), with room left to start and
/// report.
const HEALTH_BUDGET: Duration = Duration::from_millis(4500);
/// The health profile's per-check timeout when no --timeout is given: a
/// driver that does not answer a health check in 4 s is not healthy.
const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(4);

fn options(args: &RunArgs, profile: Profile) -> Options {
    Options {
        // Health is no level of the checks' own: they run as in quick.
        profile: match profile {
            Profile::Health => Profile::Quick,
            level => level,
        },
        nvml_lib: args.nvml_lib.clone(),
        nccl_lib: args.nccl_lib.clone(),
        python: args.python.clone(),
        expect_gpus: args.expect_gpus,
        min_busbw_gbps: args.min_busbw,
        nproc: args.nproc,
        ddp_model: args.ddp_model.into(),
        ddp_backend: args.ddp_backend,
        ddp_device: args.ddp_device,
        min_scaling: args.min_scaling,
        kernel_log: args.kernel_log.clone(),
        burn_duration_s: args.duration,
        traces: None,
        live_job: false,
        job_pid: None,
        share_job: false,
        timeout_s: 0.0,
    }
}

/// Everything resolved from the run options before any check runs, so a bad
/// path or pattern fails fast with exit 2.
pub struct Plan {
    /// The profile that selected the checks: --profile, else a replay's
    /// capture's own, else standard.
    pub profile: Profile,
    pub checks: Vec<&'static dyn gpucheck_checks::Check>,
    pub options: Options,
    pub timeout: Option<Duration>,
    /// The whole run's budget (the health profile's).
    pub budget: Option<Duration>,
    pub outputs: output::Outputs,
    /// `--capture` / `--replay`: what the run does at the probe boundary.
    pub seam: capture::Plan,
    /// `--quiet`: no progress line either.
    pub quiet: bool,
    /// The check ids `--only` named exactly: their skip is no pass.
    pub named: Vec<String>,
    /// The `--only` patterns, as given: the report's header says them in
    /// place of the profile.
    pub only: Vec<String>,
}

/// Where the reports go, checked before anything runs.
fn outputs(args: &OutputArgs) -> Result<output::Outputs, UsageError> {
    output::plan(
        args.format,
        &[
            (Format::Json, args.json.as_deref()),
            (Format::Junit, args.junit.as_deref()),
            (Format::Prom, args.prom.as_deref()),
            (Format::Markdown, args.markdown.as_deref()),
            (Format::Html, args.html.as_deref()),
        ],
    )
    .map_err(UsageError)
}

/// `gpucheck job --traces DIR`: the job checks over a folder of Flight
/// Recorder dumps. A folder that is not one, or holds no rank's dump, is a
/// usage error (exit 2) before anything is judged.
pub fn job_plan(args: &JobArgs) -> anyhow::Result<Plan> {
    library_files(&[("--nvml-lib", args.nvml_lib.as_deref())]).map_err(UsageError)?;
    let seam = capture::plan_for(
        args.capture.as_deref(),
        args.replay.as_deref(),
        args.redact,
        MAX_JOB_CAPTURE_BYTES,
    )
    .map_err(UsageError)?;
    let options = match (&seam, &args.traces) {
        (capture::Plan::Replay(c), _) => replayed_job_options(c)?,
        (_, Some(dir)) => traces_options(dir)?,
        (_, None) => Options {
            nvml_lib: args.nvml_lib.clone(),
            kernel_log: args.kernel_log.clone(),
            share_job: args.cluster.identity_given(),
            ..live_options(args.pid)?
        },
    };
    Ok(Plan {
        profile: gpucheck_checks::job::JOB_PROFILE,
        checks: match &options.traces {
            Some(_) => TRACES_CATALOG.to_vec(),
            None => JOB_CATALOG.to_vec(),
        },
        options,
        timeout: args.timeout.map(Duration::from_secs_f64),
        budget: None,
        outputs: outputs(&args.output)?,
        seam,
        quiet: args.output.quiet,
        named: Vec::new(),
        only: Vec::new(),
    })
}

/// What `gpucheck job --watch` takes from the command line, checked as a
/// look's are before anything is watched: the library, the capture and the
/// report paths. The job itself may not have started yet.
pub fn check_watch_paths(args: &JobArgs) -> anyhow::Result<()> {
    library_files(&[("--nvml-lib", args.nvml_lib.as_deref())]).map_err(UsageError)?;
    capture::plan_for(
        args.capture.as_deref(),
        None,
        args.redact,
        MAX_JOB_CAPTURE_BYTES,
    )
    .map_err(UsageError)?;
    outputs(&args.output)?;
    Ok(())
}

/// The options a job's capture was made with; a capture of a machine
/// check run is refused.
fn replayed_job_options(c: &gpucheck_checks::seam::capture::Capture) -> anyhow::Result<Options> {
    if c.profile != gpucheck_checks::job::JOB_PROFILE {
        return Err(UsageError(format!(
            "the capture was made by a machine check run (--profile {}), not by gpucheck job: \
             replay it with gpucheck --replay FILE",
            c.profile.as_str()
        ))
        .into());
    }
    Ok(c.options.clone())
}

/// The options of `gpucheck job --traces DIR`, once DIR is known to hold
/// a rank's dump.
fn traces_options(dir: &std::path::Path) -> anyhow::Result<Options> {
    let ranks = fr_dump::rank_files(dir)
        .map_err(|e| UsageError(format!("--traces {}: {e}", dir.display())))?;
    if ranks.is_empty() {
        return Err(UsageError(format!(
            "--traces {}: no rank's dump there (gpucheck job reads the files whose name ends in \
             a rank number: rank_0, nccl_trace_rank_0, fr_0.json)",
            dir.display()
        ))
        .into());
    }
    Ok(Options {
        traces: Some(dir.to_path_buf()),
        ..Options::default()
    })
}

/// The options of `gpucheck job` on a running job, once one is found here.
fn live_options(pid: Option<i32>) -> anyhow::Result<Options> {
    let under = pid.map(|p| format!(" under pid {p}")).unwrap_or_default();
    let ranks = gpucheck_checks::probe::ranks::find(pid)
        .map_err(|e| UsageError(format!("no job to look at{under}: {e}")))?;
    if ranks.is_empty() {
        return Err(UsageError(format!(
            "no job runs here{under}: no process has RANK and WORLD_SIZE in its environment \
             (torchrun's workers, a python launched per rank) or is a python with SLURM_PROCID \
             and SLURM_NTASKS (srun); run gpucheck job on a node of the job, as its user or \
             root, or give --traces DIR"
        ))
        .into());
    }
    Ok(Options {
        live_job: true,
        job_pid: pid,
        ..Options::default()
    })
}

pub fn plan(args: &RunArgs) -> anyhow::Result<Plan> {
    let seam = capture::plan(args).map_err(UsageError)?;
    if let capture::Plan::Replay(c) = &seam {
        if c.profile == gpucheck_checks::job::JOB_PROFILE {
            return Err(UsageError(
                "the capture was made by gpucheck job: replay it with gpucheck job --replay FILE"
                    .to_string(),
            )
            .into());
        }
    }
    library_files(&[
        ("--nvml-lib", args.nvml_lib.as_deref()),
        ("--nccl-lib", args.nccl_lib.as_deref()),
    ])
    .map_err(UsageError)?;
    // A replay judges under the profile its capture ran, unless told
    // otherwise: a quick capture holds no CUDA answers to judge.
    let profile = match (&args.profile, &seam) {
        (None, capture::Plan::Replay(c)) => c.profile,
        _ => args.profile(),
    };
    let checks =
        runner::select(profile, &args.only, &args.skip).map_err(|e| UsageError(e.to_string()))?;
    let outputs = outputs(&args.output)?;
    let health = profile == Profile::Health && args.timeout.is_none();
    let options = match &seam {
        capture::Plan::Replay(c) => capture::replay_options(c, &options(args, profile)),
        _ => options(args, profile),
    };
    Ok(Plan {
        profile,
        checks,
        options,
        seam,
        timeout: match args.timeout {
            Some(t) => Some(Duration::from_secs_f64(t)),
            None if health => Some(HEALTH_CHECK_TIMEOUT),
            None => None,
        },
        budget: health.then_some(HEALTH_BUDGET),
        outputs,
        quiet: args.output.quiet,
        named: args
            .only
            .iter()
            .filter(|p| CATALOG.iter().any(|c| c.id() == p.as_str()))
            .cloned()
            .collect(),
        only: args.only.clone(),
    })
}

/// `--nvml-lib` and `--nccl-lib` name a library file. A FIFO, device or
/// folder there is refused before anything runs: the dlopen that loads
/// the library would wait in the open of a FIFO forever, deaf to Ctrl-C.
/// A path that does not exist is the checks' to report, with their hint.
fn library_files(libraries: &[(&str, Option<&std::path::Path>)]) -> Result<(), String> {
    for (flag, path) in libraries {
        let Some(path) = path else { continue };
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        if !meta.is_file() {
            let kind = gpucheck_checks::input::kind(&meta.file_type());
            return Err(format!(
                "{flag} {}: it is {kind}, not a library file",
                path.display()
            ));
        }
    }
    Ok(())
}

pub fn execute(plan: &Plan, strict: bool) -> Run {
    let profile = plan.profile;
    capture::start(&plan.seam);
    process::become_subreaper();
    let started_at_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let start = Instant::now();
    let host = host_facts(match &plan.seam {
        capture::Plan::Replay(c) => Some(&c.machine),
        _ => None,
    });
    let deadline = plan.budget.map(|b| start + b);
    let shown = progress::Progress::start(plan.checks.len(), plan.quiet);
    let results = runner::run_checks(&plan.checks, &plan.options, plan.timeout, deadline);
    drop(shown);
    process::reap_descendants();
    let counts = Run::count(&results);
    let interrupted = interrupt::interrupted();
    let unverified = unverified(&results, &plan.named);
    let mut exit_code = Run::exit_code_for(&counts, strict);
    if interrupted.is_some() || !unverified.is_empty() {
        exit_code = EXIT_NOT_READY as i32;
    }
    let mut run = Run {
        format_version: model::FORMAT_VERSION,
        tool: "gpucheck".to_string(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        profile,
        only: plan.only.clone(),
        strict,
        started_at_unix,
        duration_ms: start.elapsed().as_secs_f64() * 1000.0,
        host,
        results,
        counts,
        interrupted,
        unverified,
        exit_code,
    };
    if let Err(e) = capture::finish(&plan.seam, &plan.options, &run) {
        say!("gpucheck: {e}");
        run.exit_code = i32::from(EXIT_USAGE);
    }
    run
}

/// A run made of results judged outside the runner (a watch's): this
/// machine's host facts, the counts and exit code the results give.
pub fn run_of(profile: Profile, results: Vec<CheckResult>, started_at_unix: u64) -> Run {
    let counts = Run::count(&results);
    let duration_ms = results.iter().map(|r| r.outcome.duration_ms).sum();
    Run {
        format_version: model::FORMAT_VERSION,
        tool: "gpucheck".to_string(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        profile,
        only: Vec::new(),
        strict: false,
        started_at_unix,
        duration_ms,
        host: host_facts(None),
        results,
        counts,
        interrupted: None,
        unverified: Vec::new(),
        exit_code: Run::exit_code_for(&counts, false),
    }
}

/// The checks whose skip makes the run not ready: every check when all
/// skipped, else those `--only` named by id. A profile's routine skips (no
/// InfiniBand on a single box) beside checks that ran stay skips.
fn unverified(results: &[CheckResult], named: &[String]) -> Vec<String> {
    let skipped = |r: &&CheckResult| r.outcome.status == Status::Skip;
    let all = !results.is_empty() && results.iter().all(|r| skipped(&r));
    results
        .iter()
        .filter(skipped)
        .filter(|r| all || named.contains(&r.id))
        .map(|r| r.id.clone())
        .collect()
}

/// The host, probed once per run for every report; under a replay, the
/// captured host's answer. A capture without it (written by hand, or by an
/// older gpucheck) names the machine its `machine` block describes, never
/// the one replaying it, rather than ending the run.
fn host_facts(captured: Option<&gpucheck_checks::seam::capture::Machine>) -> HostFacts {
    let Ok(h) = std::panic::catch_unwind(gpucheck_checks::probe::system::host_facts) else {
        let known = |s: Option<&String>| s.filter(|s| !s.is_empty()).cloned();
        return HostFacts {
            hostname: known(captured.map(|m| &m.hostname)).unwrap_or_else(|| "unknown".into()),
            os: known(captured.map(|m| &m.os)).unwrap_or_default(),
            kernel: known(captured.map(|m| &m.kernel)).unwrap_or_default(),
            arch: String::new(),
            cpu: String::new(),
            cpu_count: 0,
            memory_total_mib: 0,
            container: None,
        };
    };
    HostFacts {
        hostname: h.hostname,
        os: h.os,
        kernel: h.kernel,
        arch: h.arch,
        cpu: h.cpu,
        cpu_count: h.cpu_count,
        memory_total_mib: h.memory_total_mib,
        container: h.container,
    }
}

pub fn use_color(choice: ColorChoice, stream_is_tty: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            stream_is_tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}

/// How the main stream's table reads on `sink`: in color and as wide as
/// that stream allows.
fn style(shown: Shown, sink: Sink) -> Style {
    match sink {
        Sink::Stdout => stream_style(shown, std::io::stdout()),
        Sink::Stderr => stream_style(shown, std::io::stderr()),
    }
}

/// How the table reads on `stream`: `--color` against whether it is a
/// terminal, and its width.
fn stream_style(shown: Shown, stream: impl std::os::fd::AsFd + IsTerminal) -> Style {
    Style {
        color: use_color(shown.color, stream.is_terminal()),
        verbose: shown.verbose,
        quiet: shown.quiet,
        width: terminal_width(stream),
    }
}

/// Under GitHub Actions (`GITHUB_ACTIONS=true`), the checks that need
/// attention as workflow commands: on stdout beside the table, else on
/// stderr (report/annotations.rs says why).
pub fn annotate(run: &Run, on_stdout: bool) {
    if std::env::var_os("GITHUB_ACTIONS").is_none_or(|v| v != "true") {
        return;
    }
    let text = crate::report::annotations::render(run);
    let _ = if on_stdout {
        emit(&text)
    } else {
        emit_to(std::io::stderr().lock(), "stderr", &text)
    };
}

/// How the report on the main stream reads: the user's `--color`,
/// `--verbose` and `--quiet`.
#[derive(Debug, Clone, Copy)]
pub struct Shown {
    pub color: ColorChoice,
    pub verbose: bool,
    pub quiet: bool,
}

impl From<&OutputArgs> for Shown {
    fn from(args: &OutputArgs) -> Self {
        Shown {
            color: args.color,
            verbose: args.verbose,
            quiet: args.quiet,
        }
    }
}

/// Where the report of a run goes: stdout (`run`, `capture`, `job`), or
/// stderr where stdout belongs to the command gpucheck becomes (`exec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    Stdout,
    Stderr,
}

/// Hand the run to the reporters: the chosen format on the sink, every
/// report file, GitHub annotations. The checks have run, so their report
/// is shown even when a report file cannot be written; that error then
/// ends the command (exit 2). Returns the run's exit code.
pub fn report(plan: Plan, run: &Run, shown: Shown, sink: Sink) -> anyhow::Result<u8> {
    let mut text = plan.outputs.stream_text(run, style(shown, sink));
    let table = plan.outputs.stream_format() == Format::Table;
    if let capture::Plan::Replay(c) = &plan.seam {
        // Whose machine this is: above the table, else on stderr.
        if table && !shown.quiet && sink == Sink::Stdout {
            text.insert_str(0, &capture::header(c));
        } else if !shown.quiet {
            say!("gpucheck: {}", capture::header(c).trim_end());
        }
    }
    let files = plan.outputs.write_files(run).map_err(UsageError);
    match sink {
        Sink::Stdout => emit(&text)?,
        // Advice under exec: a stderr that cannot be written must not keep
        // CMD from running.
        Sink::Stderr => {
            let _ = emit_to(std::io::stderr().lock(), "stderr", &text);
        }
    }
    // Under exec, a report other than the table on stderr is all stderr
    // carries: no annotations beside it.
    if table || sink == Sink::Stdout {
        annotate(run, table && sink == Sink::Stdout);
    }
    files?;
    Ok(run.exit_code.clamp(0, 255) as u8)
}

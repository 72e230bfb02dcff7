//! gpucheck: is this machine ready for multi-GPU PyTorch DDP training?
//!
//! `main` parses the command line, runs the selected checks, hands the whole
//! run to each requested reporter, writes their output, and maps the verdict
//! to an exit code: 0 ready, 1 not ready, 2 usage or configuration error.
//!
//! The binary's layout: `cli.rs` (the command line), `runner.rs` (selection,
//! timeouts, child isolation), `interrupt.rs` (the stop signals and the flag
//! they set), `model.rs` (the run every reporter
//! reads), `output.rs` (where the reports go: planned before the checks
//! run, written whole at the end), `report/` (one reporter per format, and
//! `report/text.rs` for the text they share). Probes and checks live in the
//! `gpucheck-checks` crate.

use std::ffi::CString;
use std::io::{IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use clap::Parser;
use gpucheck_checks::probe::process;
use gpucheck_checks::CATALOG;

/// `eprintln!` that cannot panic: on a closed or full stderr
/// (`2>/dev/full`, `2>&1 | true`) the message is lost, never the exit code.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod capture;
mod cli;
mod cluster;
mod interrupt;
mod job_env;
#[cfg(test)]
mod man;
mod model;
mod output;
mod pipeline;
mod progress;
mod report;
mod runner;
mod watch;

use cli::{Cli, Command, ExecArgs, JobArgs, ListFormat, OnFail, RunArgs};
use pipeline::{Shown, Sink};

/// No check failed (warnings allowed).
const EXIT_READY: u8 = 0;
/// At least one check failed or errored (or warned, under --strict).
const EXIT_NOT_READY: u8 = 1;
/// Usage or configuration error.
const EXIT_USAGE: u8 = 2;

/// A usage or configuration error: one line on stderr, exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

fn main() -> ExitCode {
    // First of all: a stop signal that arrives while the command line is
    // read or a report file is opened still ends in a report and exit 1,
    // not in death by signal.
    interrupt::install_signal_handlers();
    quiet_panics();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 0,
                _ => usage_exit_code(),
            };
            if code == 0 {
                let _ = e.print();
            } else {
                // One line naming the problem, not clap's full usage block.
                let text = e.render().to_string();
                let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
                let mut first = lines
                    .next()
                    .unwrap_or("invalid arguments")
                    .trim_start_matches("error: ")
                    .to_string();
                // "the following required arguments were not provided:" + the list.
                if first.ends_with(':') {
                    if let Some(next) = lines.next() {
                        first = format!("{first} {next}");
                    }
                }
                first.push_str(&usage_error_extra(&e));
                first.push_str(&misplaced_note(&e));
                first.push_str(&env_source_note(&e));
                say!("gpucheck: {first}");
                say!("Run 'gpucheck --help' for usage.");
            }
            return ExitCode::from(code);
        }
    };
    let child = matches!(cli.command, Some(Command::Child { .. }));
    match dispatch(cli) {
        // A stop signal is an interruption at every point, the writing of
        // the report included: exit 1, never "ready".
        Ok(EXIT_READY) if !child && interrupt::interrupted().is_some() => {
            ExitCode::from(EXIT_NOT_READY)
        }
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            say!("gpucheck: {e:#}");
            ExitCode::from(usage_exit_code())
        }
    }
}

/// The exit code of a usage or configuration error: 2, except under
/// `--profile health`, where Docker reserves 2 and a health check that
/// cannot run is unhealthy (1).
fn usage_exit_code() -> u8 {
    // Up to `--`: what follows is exec's command, not gpucheck's options.
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .take_while(|a| a != "--")
        .collect();
    let health = argv.iter().enumerate().any(|(i, a)| {
        a == "--profile=health"
            || (a == "--profile" && argv.get(i + 1).map(String::as_str) == Some("health"))
    });
    if health {
        EXIT_NOT_READY
    } else {
        EXIT_USAGE
    }
}

/// What clap knows beyond its first error line, kept on that line: the
/// accepted values (`--profile huge`) or the flag the user probably meant
/// (`--onyl`).
fn usage_error_extra(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let strings = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => vec![s.clone()],
        Some(ContextValue::Strings(v)) => v.clone(),
        _ => Vec::new(),
    };
    let valid = strings(ContextKind::ValidValue);
    if !valid.is_empty() {
        return format!(" (possible values: {})", valid.join(", "));
    }
    let suggested: Vec<String> = [
        ContextKind::SuggestedArg,
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .flat_map(strings)
    .collect();
    match suggested.first() {
        Some(s) => format!("; did you mean '{s}'?"),
        None => String::new(),
    }
}

/// Where the arguments should have gone, when they are in the wrong place:
/// run options before the subcommand (`gpucheck --profile quick exec -- CMD`)
/// or a command after `exec` without `--` (`gpucheck exec echo hi`). The
/// suggestion is the user's own command line, reordered.
fn misplaced_note(e: &clap::Error) -> String {
    use clap::error::ErrorKind;
    let argv: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let subcommands = ["run", "exec"];
    let Some(at) = argv.iter().position(|a| subcommands.contains(&a.as_str())) else {
        return String::new();
    };
    let dashes = argv.iter().position(|a| a == "--");
    match e.kind() {
        ErrorKind::ArgumentConflict if at > 0 && dashes.is_none_or(|d| d > at) => {
            let mut fixed = vec![argv[at].clone()];
            fixed.extend(argv[..at].iter().cloned());
            fixed.extend(argv[at + 1..].iter().cloned());
            format!(
                "; run options go after the subcommand: gpucheck {}",
                fixed.join(" ")
            )
        }
        ErrorKind::UnknownArgument if argv[at] == "exec" && dashes.is_none() => {
            // The command starts at the word clap did not expect.
            let unexpected = match e.get(clap::error::ContextKind::InvalidArg) {
                Some(clap::error::ContextValue::String(s)) => s.clone(),
                _ => return String::new(),
            };
            let Some(cmd) = argv[at + 1..]
                .iter()
                .position(|a| *a == unexpected)
                .map(|i| at + 1 + i)
            else {
                return String::new();
            };
            let mut fixed: Vec<String> = argv[..cmd].to_vec();
            fixed.push("--".to_string());
            fixed.extend(argv[cmd..].iter().cloned());
            format!("; put -- before the command: gpucheck {}", fixed.join(" "))
        }
        _ => String::new(),
    }
}

/// When a bad value came from an environment variable (GPUCHECK_EXPECT_GPUS)
/// rather than the command line, say so: the user never typed the flag the
/// error names.
fn env_source_note(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let typed = |long: &str| {
        argv.iter().any(|a| {
            let a = a.to_string_lossy();
            a == format!("--{long}") || a.starts_with(&format!("--{long}="))
        })
    };
    let named = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    for arg in cli::command().get_arguments() {
        let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let Some(value) = std::env::var_os(env) else {
            continue;
        };
        let culprit = if e.kind() == ErrorKind::InvalidUtf8 {
            value.to_str().is_none()
        } else {
            named.starts_with(&format!("--{long}"))
        };
        if culprit && !typed(long) {
            return format!(" (the value comes from ${})", env.to_string_lossy());
        }
    }
    String::new()
}

/// Panics are bugs; on worker threads the runner turns them into `error`
/// results, so the default hook's backtrace noise is suppressed there. On the
/// main thread print one line.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        if std::thread::current().name() == Some("main") {
            say!("gpucheck: internal error: {info}");
        }
    }));
}

fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        None => run_command(&cli.run),
        Some(Command::Run(args)) => run_command(&args),
        Some(Command::Capture(c)) => {
            if c.run.capture.is_some() {
                return Err(UsageError("`gpucheck capture FILE` takes no --capture".into()).into());
            }
            let mut args = c.run;
            args.capture = Some(c.file);
            run_command(&args)
        }
        Some(Command::List(args)) => list(args.format),
        Some(Command::Explain { id }) => explain(&id),
        Some(Command::Exec(args)) => exec(&args),
        Some(Command::Cluster(args)) => cluster::command(&args),
        Some(Command::Job(args)) => job(&args),
        Some(Command::Completions { shell }) => {
            // Into memory first: clap_complete panics on a write error
            // (`gpucheck completions bash | head`).
            let mut cmd = cli::completion_command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "gpucheck", &mut script);
            emit(&String::from_utf8_lossy(&script))?;
            Ok(EXIT_READY)
        }
        Some(Command::Child { id }) => Ok(runner::child_main(&id).clamp(0, 255) as u8),
    }
}

/// Columns of a terminal whose width nobody says.
const DEFAULT_WIDTH: usize = 80;

/// The width the table wraps to: $COLUMNS, else the terminal's own width
/// (80 when it does not say). None for a pipe or a file without $COLUMNS:
/// what `grep` and scripts read stays one line per summary and hint.
fn terminal_width(stream: impl std::os::fd::AsFd + IsTerminal) -> Option<usize> {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    if columns.is_some() {
        return columns;
    }
    if !stream.is_terminal() {
        return None;
    }
    let size = terminal_size::terminal_size_of(&stream)
        .map(|(w, _)| usize::from(w.0))
        .filter(|&w| w > 0);
    Some(size.unwrap_or(DEFAULT_WIDTH))
}

/// Print to stdout, treating a closed pipe (`gpucheck | head`) as success.
fn emit(text: &str) -> anyhow::Result<()> {
    emit_to(std::io::stdout().lock(), "stdout", text)
}

/// Print to a stream named `stream` in the error ("stdout", "stderr").
/// A reader that takes nothing holds gpucheck only until a stop signal
/// (`output::write_all_or_stop`); the exit code then says interrupted.
fn emit_to(
    mut out: impl Write + std::os::fd::AsFd + IsTerminal,
    stream: &str,
    text: &str,
) -> anyhow::Result<()> {
    let chunk = output::chunk_for(&out);
    let written = out
        .flush()
        .and_then(|_| output::write_all_or_stop(out.as_fd(), text.as_bytes(), chunk));
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(UsageError(format!("cannot write to {stream}: {e}")).into()),
    }
}

fn run_command(args: &RunArgs) -> anyhow::Result<u8> {
    let plan = pipeline::plan(args)?;
    let run = pipeline::execute(&plan, args.output.strict);
    pipeline::report(plan, &run, Shown::from(&args.output), Sink::Stdout)
}

/// `gpucheck job`: judge a job live on this node, or from its ranks' dumps.
fn job(args: &JobArgs) -> anyhow::Result<u8> {
    if args.cluster.identity_given() && !args.watch.watch {
        return cluster::job(args);
    }
    if args.watch.watch {
        return job_watch(args);
    }
    let plan = pipeline::job_plan(args)?;
    let run = pipeline::execute(&plan, args.output.strict);
    pipeline::report(plan, &run, Shown::from(&args.output), Sink::Stdout)
}

/// `gpucheck job --watch`: watch the job running here until it ends.
fn job_watch(args: &JobArgs) -> anyhow::Result<u8> {
    if args.traces.is_some() || args.replay.is_some() {
        return Err(UsageError(
            "--watch looks at a running job: it takes no --traces or --replay".into(),
        )
        .into());
    }
    if args.cluster.identity_given() && args.capture.is_some() {
        return Err(UsageError(
            "--watch across nodes keeps no --capture: each node's diagnosis is its own".into(),
        )
        .into());
    }
    // The same checks of paths as a look, before anything is watched. A
    // --pid whose ranks are not started yet (a launcher starting) is
    // waited for; without --pid a job must run here already.
    pipeline::check_watch_paths(args)?;
    let found = gpucheck_checks::probe::ranks::find(args.pid).unwrap_or_default();
    let pid_alive =
        |pid: i32| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    if found.is_empty() && !args.pid.is_some_and(pid_alive) {
        let under = args
            .pid
            .map(|p| format!(" under pid {p}"))
            .unwrap_or_default();
        return Err(UsageError(format!(
            "no job to watch{under}: no process has RANK and WORLD_SIZE in its environment \
             (torchrun's workers, a python launched per rank); give --pid of its launcher"
        ))
        .into());
    }
    let settings = watch::Settings {
        flags: args.watch.clone(),
        output: args.output.clone(),
        capture: args.capture.clone(),
        nvml_lib: args.nvml_lib.clone(),
        kernel_log: args.kernel_log.clone(),
    };
    let link = if args.cluster.identity_given() {
        let host = gpucheck_checks::probe::system::host_facts().hostname;
        Some(cluster::watch::Link::start(
            &args.cluster,
            args.python.as_deref(),
            &host,
        )?)
    } else {
        None
    };
    process::become_subreaper();
    watch::watch(watch::Target::Attached(args.pid), &settings, link)
}

fn exec(args: &ExecArgs) -> anyhow::Result<u8> {
    if args.run.replay.is_some() {
        return Err(UsageError(
            "--replay judges a capture, not this machine, so it cannot gate `exec`".into(),
        )
        .into());
    }
    if args.cluster {
        return cluster::exec(args);
    }
    if args.cluster_flags.identity_given() {
        return Err(UsageError(
            "--nnodes, --node-rank, --master-addr and --master-port need --cluster".into(),
        )
        .into());
    }
    let plan = pipeline::plan(&args.run)?;
    let program = args
        .command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let argv: Vec<CString> = args
        .command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| UsageError("the command contains a NUL byte".into()))?;
    // stdout belongs to CMD: the report goes to stderr. A JSON, JUnit,
    // Prometheus or Markdown report there (`--json -`) is all stderr
    // carries: automation that reads it gets one document, so gpucheck's
    // own notes about CMD stay out and the exit code says it (1: not run,
    // 126/127: could not be started).
    let notes = table_on_stream(&args.run.output);
    let note = |text: String| {
        if notes {
            say!("{text}");
        }
    };
    let run = pipeline::execute(&plan, args.run.output.strict);
    pipeline::report(plan, &run, Shown::from(&args.run.output), Sink::Stderr)?;
    if let Some(sig) = &run.interrupted {
        // Ctrl-C means stop, even under --on-fail warn.
        note(format!(
            "gpucheck: not running {program}: interrupted by {sig}"
        ));
        return Ok(EXIT_NOT_READY);
    }
    if run.exit_code != 0 && args.on_fail == OnFail::Exit {
        note(format!(
            "gpucheck: not running {program}: checks failed (use --on-fail warn to run it anyway)"
        ));
        return Ok(EXIT_NOT_READY);
    }
    if run.exit_code != 0 {
        note(format!(
            "gpucheck: checks failed; running {program} anyway (--on-fail warn)"
        ));
    }
    if args.watch.watch {
        return run_watched(args, &argv, &program, notes);
    }
    become_command(&argv, &program, notes)
}

/// `exec --watch`: start CMD as a child in a process group of its own
/// (handed the terminal when gpucheck has it), watch it, and exit with its
/// exit code (or 124 when the watch ended it hung).
pub(crate) fn run_watched(
    args: &ExecArgs,
    argv: &[CString],
    program: &str,
    notes: bool,
) -> anyhow::Result<u8> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    // Across nodes (`exec --cluster --watch`), the watch's own rendezvous
    // starts before CMD: a node that cannot join it runs nothing.
    let link = if args.cluster {
        let host = gpucheck_checks::probe::system::host_facts().hostname;
        Some(cluster::watch::Link::start(
            &args.cluster_flags,
            args.run.python.as_deref(),
            &host,
        )?)
    } else {
        None
    };
    let env = prepared_env(notes, true);
    let mut cmd = std::process::Command::new(std::ffi::OsStr::from_bytes(argv[0].as_bytes()));
    cmd.args(
        argv[1..]
            .iter()
            .map(|a| std::ffi::OsStr::from_bytes(a.as_bytes())),
    );
    cmd.env_clear();
    for kv in &env {
        let kv = kv.as_bytes();
        if let Some(eq) = kv.iter().position(|b| *b == b'=') {
            let (k, v) = (&kv[..eq], &kv[eq + 1..]);
            cmd.env(
                std::ffi::OsStr::from_bytes(k),
                std::ffi::OsStr::from_bytes(v),
            );
        }
    }
    cmd.process_group(0);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            if notes {
                say!("gpucheck: cannot run {program}: {e}");
            }
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let pid = child.id() as i32;
    let terminal = watch::hand_terminal(pid);
    let settings = watch::Settings {
        flags: args.watch.clone(),
        output: args.run.output.clone(),
        capture: args.run.capture.clone(),
        nvml_lib: args.run.nvml_lib.clone(),
        kernel_log: args.run.kernel_log.clone(),
    };
    process::become_subreaper();
    let code = watch::watch(watch::Target::Child(pid), &settings, link);
    watch::take_terminal(terminal);
    code
}

/// Whether the main stream carries the table: no report asked for `-` and
/// `--format table`. Otherwise (`exec --json -`) it carries one document
/// and gpucheck's notes stay off it.
fn table_on_stream(output: &cli::OutputArgs) -> bool {
    let dash = |p: &Option<std::path::PathBuf>| p.as_deref() == Some(std::path::Path::new("-"));
    output.format == report::Format::Table
        && ![
            &output.json,
            &output.junit,
            &output.prom,
            &output.markdown,
            &output.html,
        ]
        .into_iter()
        .any(dash)
}

/// Replace gpucheck with CMD (`exec`); returns only when it cannot be
/// started: 127 (not found) or 126, said on stderr when `notes` allows.
fn become_command(argv: &[CString], program: &str, notes: bool) -> anyhow::Result<u8> {
    let env = prepared_env(notes, false);
    process::stop_being_subreaper();
    interrupt::restore_signals_for_exec();
    // execvpe only returns on failure.
    let Err(err) = nix::unistd::execvpe(&argv[0], argv, &env);
    let code = match err {
        nix::errno::Errno::ENOENT => 127,
        _ => 126,
    };
    // Still gpucheck: a closed stderr must not kill it with SIGPIPE.
    interrupt::ignore_sigpipe();
    if notes {
        say!("gpucheck: cannot run {program}: {}", err.desc());
    }
    Ok(code)
}

/// CMD's environment: gpucheck's own, with what `job_env` adds so that a
/// hang of the job can be looked at in seconds (said on stderr when
/// `notes` allows).
/// The job's environment under `exec`; NCCL's Inspector is turned on only
/// under `--watch` (`watched`), which reads it: its output only grows.
fn prepared_env(notes: bool, watched: bool) -> Vec<CString> {
    use std::os::unix::ffi::OsStrExt;
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
    let dir = job_env::job_dir(var);
    let mut prepared = job_env::prepare(var, &dir, job_env::free_port());
    if watched {
        job_env::prepare_inspector(
            &mut prepared,
            var,
            &dir,
            job_env::job_inspector().as_deref(),
        );
    }
    let writes_in_dir = prepared.dump_dir.is_some() || prepared.inspector_dir.is_some();
    if writes_in_dir && std::fs::create_dir_all(&dir).is_err() {
        job_env::without_job_dir(&mut prepared);
    }
    if notes {
        for w in &prepared.warnings {
            say!("gpucheck: warning: {w}");
        }
        if let Some(d) = &prepared.dump_dir {
            say!(
                "gpucheck: the job's Flight Recorder dumps go to {0} (gpucheck job --traces {0} \
                 reads them; gpucheck job looks at the running job)",
                d.display()
            );
        }
        if let Some((_, lib)) = prepared
            .set
            .iter()
            .find(|(k, _)| k == "NCCL_PROFILER_PLUGIN")
        {
            let d = prepared.inspector_dir.as_deref().unwrap_or(&dir);
            say!(
                "gpucheck: NCCL's Inspector ({lib}) writes the job's per-collective timings to {}",
                d.display()
            );
        }
    }
    let mut env: Vec<(Vec<u8>, Vec<u8>)> = std::env::vars_os()
        .filter(|(k, _)| {
            !prepared
                .set
                .iter()
                .any(|(n, _)| k.as_bytes() == n.as_bytes())
        })
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    env.extend(
        prepared
            .set
            .into_iter()
            .map(|(k, v)| (k.into_bytes(), v.into_bytes())),
    );
    env.into_iter()
        .filter_map(|(mut k, v)| {
            k.push(b'=');
            k.extend(v);
            CString::new(k).ok()
        })
        .collect()
}

fn list(format: ListFormat) -> anyhow::Result<u8> {
    let text = match format {
        ListFormat::Json => {
            let rows: Vec<serde_json::Value> = CATALOG
                .iter()
                .copied()
                .chain(fleet_checks())
                .map(|c| {
                    serde_json::json!({
                        "id": c.id(),
                        "group": c.group(),
                        "profile": listed_profile(c),
                        "isolation": c.isolation(),
                        "timeout_s": c.timeout().as_secs_f64(),
                        "needs": c.needs(),
                        "title": c.title(),
                    })
                })
                .collect();
            format!("{}\n", serde_json::to_string_pretty(&rows)?)
        }
        ListFormat::Table => {
            let mut t = comfy_table::Table::new();
            t.load_preset(comfy_table::presets::NOTHING);
            t.set_header(["ID", "GROUP", "PROFILE", "TITLE"]);
            for c in CATALOG.iter().copied().chain(fleet_checks()) {
                t.add_row([c.id(), c.group(), listed_profile(c), c.title()]);
            }
            // On a terminal (or with $COLUMNS) the titles wrap to its width;
            // no row carries padding past its last word.
            if let Some(width) = terminal_width(std::io::stdout()) {
                t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
                t.set_width(u16::try_from(width).unwrap_or(u16::MAX));
            }
            let rows: Vec<String> = t.lines().map(|l| l.trim_end().to_string()).collect();
            format!("{}\n", rows.join("\n"))
        }
    };
    emit(&text)?;
    Ok(EXIT_READY)
}

/// What `list` shows as a check's profile: the lowest profile that runs it,
/// or `cluster` for a fleet check, which only `gpucheck cluster` runs.
fn listed_profile(check: &dyn gpucheck_checks::Check) -> &'static str {
    if gpucheck_checks::fleet::find(check.id()).is_some() {
        "cluster"
    } else {
        check.profile().as_str()
    }
}

/// The fleet checks of `gpucheck cluster` and the job checks of `gpucheck
/// job`, as checks (for list and explain).
fn fleet_checks() -> impl Iterator<Item = &'static dyn gpucheck_checks::Check> {
    gpucheck_checks::fleet::FLEET_CATALOG
        .iter()
        .map(|c| *c as &dyn gpucheck_checks::Check)
        .chain(gpucheck_checks::job::JOB_CATALOG.iter().copied())
        .chain(std::iter::once(
            &gpucheck_checks::job::Watch as &dyn gpucheck_checks::Check,
        ))
}

/// Every line of `text` wrapped to `width` columns, continued under its own
/// indent.
fn wrap_paragraphs(text: &str, width: usize) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let cols = indent.chars().count();
        for part in report::text::wrap(body, width, cols, cols) {
            out.push_str(indent);
            out.push_str(&part);
            out.push('\n');
        }
    }
    out
}

fn explain(id: &str) -> anyhow::Result<u8> {
    let group = id.strip_suffix(".*").unwrap_or(id);
    let checks: Vec<&dyn gpucheck_checks::Check> = match gpucheck_checks::find(id) {
        Some(check) => vec![check],
        None => CATALOG
            .iter()
            .copied()
            .chain(fleet_checks())
            .filter(|c| c.group() == group)
            .collect(),
    };
    if checks.is_empty() {
        let hint = match runner::closest_name(id) {
            Some(name) => format!("did you mean {name}?"),
            None => "`gpucheck list` shows every check".to_string(),
        };
        return Err(UsageError(format!("unknown check '{id}'; {hint}")).into());
    }
    let texts: Vec<String> = checks.iter().map(|c| explain_text(*c)).collect();
    let text = texts.join("\n");
    match terminal_width(std::io::stdout()) {
        Some(width) => emit(&wrap_paragraphs(&text, width))?,
        None => emit(&text)?,
    }
    Ok(EXIT_READY)
}

/// One check's explanation: title, facts about it, then its own text.
fn explain_text(check: &dyn gpucheck_checks::Check) -> String {
    let needs = if check.needs().is_empty() {
        "nothing".to_string()
    } else {
        check.needs().join(", ")
    };
    let runs_in = if gpucheck_checks::fleet::find(check.id()).is_some() {
        Some("gpucheck cluster, on node rank 0, over every node's report")
    } else if check.id() == "job.watch" {
        Some("gpucheck exec --watch and gpucheck job --watch, while the job runs")
    } else if gpucheck_checks::job::find(check.id()).is_some() {
        Some("gpucheck job, on a running job's node or over its Flight Recorder dumps")
    } else {
        None
    };
    if let Some(runs_in) = runs_in {
        return format!(
            "{id} — {title}\n\nruns in: {runs_in}\n\n{body}\n",
            id = check.id(),
            title = check.title(),
            body = check.explain().trim_end(),
        );
    }
    format!(
        "{id} — {title}\n\nprofile: {profile}   isolation: {iso}   timeout: {t} s   needs: {needs}\n\n{body}\n",
        id = check.id(),
        title = check.title(),
        profile = check.profile().as_str(),
        iso = check.isolation().as_str(),
        t = check.timeout().as_secs_f64(),
        body = check.explain().trim_end(),
    )
}

//! Probe: the Python that will train, and running gpucheck's embedded payloads
//! (checks/payloads/*.py) with it under a timeout.
//!
//! The interpreter is chosen the way a user's job would be launched:
//! `--python PATH` / GPUCHECK_PYTHON, then the active virtual environment
//! (VIRTUAL_ENV), then the environment gpucheck is installed in (`pip install
//! gpucheck` into the training venv, run as `.venv/bin/gpucheck` without
//! activating it), then the active conda environment (CONDA_PREFIX), then
//! `python3` on PATH.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::process::{run_bounded, Output, RunError};
use crate::domain::text::quote_value;

use thiserror::Error;

/// Where the chosen interpreter came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PythonSource {
    /// `--python` or GPUCHECK_PYTHON.
    Explicit,
    VirtualEnv,
    /// The environment gpucheck is installed in (`pip install gpucheck`
    /// into it, run as `<env>/bin/gpucheck` without activating it).
    Installed {
        passed_over: Vec<String>,
    },
    /// `passed_over`: what pointed elsewhere first and was not used, in
    /// words ("$VIRTUAL_ENV=... holds no Python, so it was passed over").
    Conda {
        passed_over: Vec<String>,
    },
    Path {
        passed_over: Vec<String>,
    },
}

/// How `--python` / GPUCHECK_PYTHON is named in messages.
const EXPLICIT: &str = "--python / GPUCHECK_PYTHON";

impl PythonSource {
    /// "python3 on PATH", followed by whatever was passed over on the way.
    pub fn describe(&self) -> String {
        let (what, passed_over): (&str, &[String]) = match self {
            PythonSource::Explicit => (EXPLICIT, &[]),
            PythonSource::VirtualEnv => ("$VIRTUAL_ENV", &[]),
            PythonSource::Installed { passed_over } => {
                ("the environment gpucheck is installed in", passed_over)
            }
            PythonSource::Conda { passed_over } => ("$CONDA_PREFIX", passed_over),
            PythonSource::Path { passed_over } => ("python3 on PATH", passed_over),
        };
        if passed_over.is_empty() {
            what.to_string()
        } else {
            format!("{what}; {}", passed_over.join("; "))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PythonChoice {
    pub path: PathBuf,
    pub source: PythonSource,
}

/// Why no interpreter was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Error, serde::Serialize, serde::Deserialize)]
pub enum FindPythonError {
    #[error("{path} (from {from}) does not exist or is not executable")]
    ExplicitMissing { path: String, from: String },
    #[error("no Python found: --python not given, no $VIRTUAL_ENV or $CONDA_PREFIX, and no python3 on PATH")]
    NotFound,
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Find `name` on a PATH-style list. Only absolute entries count: a
/// relative one (`.`, or the empty entry of a leading, trailing or doubled
/// `:`) names whatever folder gpucheck happens to be started in, which may
/// hold anyone's `python3`.
pub fn which(name: &str, path_var: Option<&OsString>) -> Option<PathBuf> {
    crate::seam::answer(
        "python::which",
        &format!(
            "{name}, {}",
            path_var.map(|p| p.to_string_lossy()).unwrap_or_default()
        ),
        || {
            std::env::split_paths(path_var?)
                .filter(|dir| dir.is_absolute())
                .map(|dir| dir.join(name))
                .find(|p| is_executable(p))
        },
    )
}

/// The relative PATH entries holding an executable `name` that a shell
/// would have run before `chosen` (all of them when nothing was chosen), as
/// the note that says they were skipped.
fn skipped_relative(name: &str, path_var: Option<&OsString>, chosen: Option<&Path>) -> Vec<String> {
    let Some(path_var) = path_var else {
        return Vec::new();
    };
    std::env::split_paths(path_var)
        .take_while(|dir| chosen.is_none_or(|c| c.parent() != Some(dir.as_path())))
        .filter(|dir| !dir.is_absolute() && is_executable(&dir.join(name)))
        .map(|dir| {
            let entry = dir.display().to_string();
            let place = if entry.is_empty() {
                "\"\" (the current folder)".to_string()
            } else {
                format!("{entry:?}")
            };
            format!(
                "the {name} in the relative PATH entry {place} was skipped: it runs whatever folder gpucheck is started in"
            )
        })
        .collect()
}

/// The interpreter of the environment at `prefix`, if it has one.
fn env_python(prefix: &Path) -> Option<PathBuf> {
    ["python", "python3"]
        .iter()
        .map(|name| prefix.join("bin").join(name))
        .find(|candidate| is_executable(candidate))
}

/// Choose the interpreter. Pure apart from file-existence tests, so the order
/// is unit-tested with temporary folders.
pub fn choose_python(
    explicit: Option<&Path>,
    virtual_env: Option<&Path>,
    installed_in: Option<&Path>,
    conda_prefix: Option<&Path>,
    path_var: Option<&OsString>,
) -> Result<PythonChoice, FindPythonError> {
    if let Some(p) = explicit {
        // A bare name ("python3.11") is looked up on PATH like a shell would,
        // even when the current folder has something of that name (a
        // `python/` source folder); `./python3` names a file here.
        let bare = p.components().count() == 1
            && matches!(p.components().next(), Some(std::path::Component::Normal(_)));
        let resolved = if bare {
            which(&p.to_string_lossy(), path_var)
        } else {
            Some(p.to_path_buf())
        };
        return match resolved {
            Some(r) if is_executable(&r) => Ok(PythonChoice {
                path: r,
                source: PythonSource::Explicit,
            }),
            _ => Err(FindPythonError::ExplicitMissing {
                path: p.display().to_string(),
                from: EXPLICIT.to_string(),
            }),
        };
    }
    // An environment variable that points at no Python is passed over, and
    // the choice says so: the user believes that environment is active.
    let mut passed_over = Vec::new();
    for (prefix, var) in [
        (virtual_env, "VIRTUAL_ENV"),
        (installed_in, ""),
        (conda_prefix, "CONDA_PREFIX"),
    ] {
        let Some(prefix) = prefix.filter(|p| !p.as_os_str().is_empty()) else {
            continue;
        };
        match env_python(prefix) {
            Some(path) if var == "VIRTUAL_ENV" => {
                return Ok(PythonChoice {
                    path,
                    source: PythonSource::VirtualEnv,
                })
            }
            Some(path) if var.is_empty() => {
                return Ok(PythonChoice {
                    path,
                    source: PythonSource::Installed { passed_over },
                })
            }
            // A broken environment around gpucheck is not the user's belief.
            None if var.is_empty() => {}
            Some(path) => {
                return Ok(PythonChoice {
                    path,
                    source: PythonSource::Conda { passed_over },
                })
            }
            None => passed_over.push(format!(
                "${var}={} holds no Python, so it was passed over",
                quote_value(&prefix.to_string_lossy())
            )),
        }
    }
    // `uvx` puts its throwaway environment's bin/ first on PATH.
    let in_tool_env = |p: &Path| p.parent().and_then(Path::parent).is_some_and(is_tool_env);
    let found = which("python3", path_var).filter(|p| !in_tool_env(p));
    let found = found.or_else(|| {
        let dirs = std::env::split_paths(path_var?).filter(|d| d.is_absolute());
        let tools = dirs.map(|d| d.join("python3")).filter(|p| is_executable(p));
        let (tool, rest): (Vec<PathBuf>, Vec<PathBuf>) = tools.partition(|p| in_tool_env(p));
        passed_over.extend(tool.iter().map(|p| {
            format!(
                "{} was passed over: it is a tool's own environment (pipx, uv), not one to train in",
                p.display()
            )
        }));
        rest.into_iter().next()
    });
    passed_over.extend(skipped_relative("python3", path_var, found.as_deref()));
    found
        .map(|path| PythonChoice {
            path,
            source: PythonSource::Path { passed_over },
        })
        .ok_or(FindPythonError::NotFound)
}

/// The Python environment the executable `exe` is installed in, when it
/// lies in one's `bin/`: a virtual environment (`pyvenv.cfg`) or a conda one
/// (`conda-meta/`). Not a tool's own environment, which holds gpucheck and
/// nothing to train with: pipx's (`pipx_metadata.json`, `pipx run`'s too),
/// uv's tool environments (`uv-receipt.toml`) and any kept in a cache, as
/// `uvx`'s are (`CACHEDIR.TAG`, the Cache Directory Tagging marker).
pub fn installed_env(exe: &Path) -> Option<PathBuf> {
    let bin = exe.parent()?;
    if bin.file_name()? != "bin" {
        return None;
    }
    let prefix = bin.parent()?;
    let is_env = prefix.join("pyvenv.cfg").is_file() || prefix.join("conda-meta").is_dir();
    (is_env && !is_tool_env(prefix)).then(|| prefix.to_path_buf())
}

/// An environment a tool runner made for one tool (see [`installed_env`]).
fn is_tool_env(prefix: &Path) -> bool {
    ["pipx_metadata.json", "uv-receipt.toml", "CACHEDIR.TAG"]
        .iter()
        .any(|marker| prefix.join(marker).exists())
}

/// [`choose_python`] with this process's environment.
pub fn find_python(explicit: Option<&Path>) -> Result<PythonChoice, FindPythonError> {
    crate::seam::answer(
        "python::find_python",
        &explicit
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        || {
            let venv = crate::seam::env("VIRTUAL_ENV").map(PathBuf::from);
            let conda = crate::seam::env("CONDA_PREFIX").map(PathBuf::from);
            let path = crate::seam::env("PATH").map(OsString::from);
            let installed = std::env::current_exe()
                .ok()
                .and_then(|exe| installed_env(&exe));
            choose_python(
                explicit,
                venv.as_deref(),
                installed.as_deref(),
                conda.as_deref(),
                path.as_ref(),
            )
        },
    )
}

/// An embedded payload written into a folder of its own that gpucheck
/// creates (`$TMPDIR/gpucheck-NAME-PID-XXXXXX/NAME.py`, the folder mode 0700,
/// the file 0600), both removed when dropped. Python puts the script's
/// folder first on `sys.path`, so no one else can place a module there (a
/// `torch.py` left in a shared /tmp would otherwise be imported as torch).
/// Its path is unique, so it also names every process running it. PID is
/// the process that wrote it: a folder whose writer was killed (SIGKILL
/// cannot be caught) is removed by the next payload written, or at once by
/// [`remove_payload_dirs_of`].
pub struct PayloadFile {
    dir: tempfile::TempDir,
    path: PathBuf,
}

/// Start of every payload folder's name.
const PAYLOAD_DIR_PREFIX: &str = "gpucheck-";

impl PayloadFile {
    pub fn write(name: &str, script: &str) -> Result<PayloadFile, PayloadError> {
        let temp_err = |e: std::io::Error| PayloadError::TempFile(e.to_string());
        // Absolute, so that a command run from another folder still finds it.
        let root = std::path::absolute(std::env::temp_dir()).map_err(temp_err)?;
        remove_stale_payload_dirs(&root, None);
        let dir = tempfile::Builder::new()
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .prefix(&format!(
                "{PAYLOAD_DIR_PREFIX}{name}-{}-",
                std::process::id()
            ))
            .tempdir_in(&root)
            .map_err(temp_err)?;
        let path = dir.path().join(format!("{name}.py"));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(temp_err)?;
        file.write_all(script.as_bytes())
            .and_then(|_| file.flush())
            .map_err(temp_err)?;
        Ok(PayloadFile { dir, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The payload's own folder: the working directory of what runs it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// [`python_command`] working in the payload's own folder, so that
    /// neither the script's folder nor the current one (`python -m` puts it
    /// first on `sys.path`) is a folder someone else controls.
    pub fn command(&self, python: &Path) -> Command {
        let mut cmd = python_command(python);
        cmd.current_dir(self.dir());
        cmd
    }
}

/// Remove the payload folders that the process `pid` wrote, for a caller
/// that knows it is gone (the runner, after it killed an isolated check:
/// the killed process could not remove them itself).
pub fn remove_payload_dirs_of(pid: u32) {
    if let Ok(root) = std::path::absolute(std::env::temp_dir()) {
        remove_stale_payload_dirs(&root, Some(pid));
    }
}

/// Remove payload folders in `root` whose writer is gone: those of `pid`
/// when given, else those of any process no longer running. Only this
/// user's folders that look like a payload folder (`gpucheck-NAME-PID-X/`
/// holding `NAME.py`) are touched.
fn remove_stale_payload_dirs(root: &Path, pid: Option<u32>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    // /proc/self belongs to this process's user.
    let Ok(me) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some((name, writer)) = payload_dir_owner(&file_name) else {
            continue;
        };
        let stale = match pid {
            Some(p) => writer == p,
            None => writer != std::process::id() && !process_running(writer),
        };
        let ours = entry
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == me);
        if stale && ours && entry.path().join(format!("{name}.py")).is_file() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether `pid` is a process that still runs (a zombie, killed but not
/// yet reaped by its new parent, does not).
fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "PID (comm) STATE ...": comm may hold anything, the state follows
    // the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// ("torch-info", 1234) from "gpucheck-torch-info-1234-AbC123".
fn payload_dir_owner(file_name: &str) -> Option<(&str, u32)> {
    let rest = file_name.strip_prefix(PAYLOAD_DIR_PREFIX)?;
    let mut parts = rest.rsplitn(3, '-');
    let _random = parts.next().filter(|r| !r.is_empty())?;
    let pid = parts.next()?.parse().ok()?;
    let name = parts.next().filter(|n| !n.is_empty())?;
    Some((name, pid))
}

/// A command running `python` with the environment every payload gets:
/// unbuffered output, no .pyc files beside the script, and neither the
/// script's folder nor the working directory on `sys.path`
/// (PYTHONSAFEPATH, the `-P` of Python 3.11+; older Pythons ignore it, and
/// there the payload's private folder and a working directory only root can
/// write keep foreign modules out). The user's PYTHONPATH and site-packages
/// stay as they are: their torch lives there. It works in `/` unless the
/// caller sets a folder (see [`PayloadFile::command`]); the interpreter's
/// path is made absolute first, so a relative `--python` still names it.
pub fn python_command(python: &Path) -> Command {
    let program = std::path::absolute(python).unwrap_or_else(|_| python.to_path_buf());
    let mut cmd = Command::new(program);
    cmd.env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONSAFEPATH", "1")
        .current_dir("/");
    cmd
}

/// A payload that talks with gpucheck while it runs (the cluster front's
/// rendezvous): started in its own process group with piped stdin, stdout
/// and stderr; killed with its group when dropped.
pub struct InteractivePayload {
    child: std::process::Child,
    stderr: Option<super::process::Capture>,
    _script: PayloadFile,
}

/// The pipes the caller talks to an [`InteractivePayload`] through.
pub struct PayloadPipes {
    pub stdin: std::process::ChildStdin,
    pub stdout: std::process::ChildStdout,
}

/// Start the embedded payload `script` as `name` with `python`, with `env`
/// set and `env_remove` unset. Through the boundary: a replay judges a
/// capture and starts no process, so it is refused there.
pub fn start_interactive_payload(
    python: &Path,
    name: &str,
    script: &str,
    env: &[(&str, &str)],
    env_remove: &[&str],
) -> Result<(InteractivePayload, PayloadPipes), String> {
    use std::process::Stdio;
    if crate::seam::is_replay() {
        return Err(format!("a replay starts no payload ({name})"));
    }
    let file = PayloadFile::write(name, script).map_err(|e| e.to_string())?;
    let mut cmd = python_command(python);
    cmd.arg(file.path());
    for k in env_remove {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    super::process::isolate(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", python.display()))?;
    let (stdout, stdin, stderr) = (child.stdout.take(), child.stdin.take(), child.stderr.take());
    let mut payload = InteractivePayload {
        child,
        stderr: None,
        _script: file,
    };
    let (Some(stdout), Some(stdin), Some(stderr)) = (stdout, stdin, stderr) else {
        return Err("the payload's pipes could not be opened".into());
    };
    payload.stderr = Some(super::process::capture(stderr).map_err(|e| e.to_string())?);
    Ok((payload, PayloadPipes { stdin, stdout }))
}

impl InteractivePayload {
    /// Its exit status (killed with its group when it has not exited
    /// within the grace period) and its stderr, read until `deadline`.
    pub fn ended(
        &mut self,
        deadline: std::time::Instant,
    ) -> (Option<std::process::ExitStatus>, Vec<u8>) {
        let status = super::process::wait_killed(&mut self.child, super::process::KILL_GRACE);
        let err = self
            .stderr
            .take()
            .map(|c| c.finish_by(deadline))
            .unwrap_or_default();
        (status, err)
    }
}

impl Drop for InteractivePayload {
    fn drop(&mut self) {
        super::process::kill_group(self.child.id() as i32);
        let _ = super::process::wait_killed(&mut self.child, super::process::KILL_GRACE);
    }
}

/// Run an embedded payload (`script` is its source) with `python`, passing
/// `args` and extra environment, in its own process group, under `timeout`.
/// The script is written to a private folder of its own, which is also the
/// working directory, removed afterwards.
pub fn run_payload(
    python: &Path,
    name: &str,
    script: &str,
    args: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Output, PayloadError> {
    let file = PayloadFile::write(name, script)?;
    let mut cmd = file.command(python);
    cmd.arg(file.path())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)));
    run_bounded(cmd, timeout).map_err(PayloadError::Run)
}

#[derive(Debug, Clone, PartialEq, Error, serde::Serialize, serde::Deserialize)]
pub enum PayloadError {
    #[error("cannot write the payload to a temporary file: {0}")]
    TempFile(String),
    #[error(transparent)]
    Run(RunError),
}

/// How long the interpreter may take to say where its environment is. A
/// Python starts in well under a second without `site` (`-S`); a pyenv shim
/// adds a shell and `pyenv exec`.
const PREFIX_QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Start of the lines that carry the interpreter's answers.
const PREFIX_MARK: &str = "GPUCHECK_PREFIX ";
const EXECUTABLE_MARK: &str = "GPUCHECK_EXECUTABLE ";

/// What the interpreter says of itself: `sys.prefix`, its environment
/// folder, and `sys.executable`, the interpreter it really is. Only the
/// interpreter can see through a launcher such as a pyenv shim
/// (`~/.pyenv/shims/python3`), whose own folder holds no environment and
/// which runs another file. `-S` skips `site` (faster, and no `.pth` code
/// runs); both `None` when the interpreter does not answer in time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SelfReport {
    prefix: Option<PathBuf>,
    executable: Option<PathBuf>,
}

fn ask_interpreter(python: &Path) -> SelfReport {
    let mut cmd = python_command(python);
    cmd.args([
        "-S",
        "-c",
        &format!(
            "import sys; sys.stdout.write({PREFIX_MARK:?} + sys.prefix + '\\n' + \
             {EXECUTABLE_MARK:?} + (sys.executable or '') + '\\n')"
        ),
    ]);
    let Ok(out) = run_bounded(cmd, PREFIX_QUERY_TIMEOUT) else {
        return SelfReport::default();
    };
    let answer = |mark: &str| {
        out.stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(mark))
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    SelfReport {
        prefix: answer(PREFIX_MARK),
        executable: answer(EXECUTABLE_MARK),
    }
}

/// The training Python's environment, as every check names and searches
/// it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PythonEnv {
    /// The interpreter as it names itself (`sys.executable`, what torch's
    /// payload reports too): a pyenv shim is named by the Python it runs.
    /// The path as chosen when the interpreter does not answer.
    pub name: PathBuf,
    /// Its site-packages folders (see [`site_packages`]).
    pub site_packages: Vec<PathBuf>,
}

/// Ask `python` once where it is and what it runs.
pub fn python_env(python: &Path) -> PythonEnv {
    crate::seam::answer("python::python_env", &python.display().to_string(), || {
        let answer = ask_interpreter(python);
        let mut prefixes: Vec<PathBuf> = answer.prefix.into_iter().collect();
        if let Some(beside) = python.parent().and_then(|bin| bin.parent()) {
            prefixes.push(beside.to_path_buf());
        }
        let mut found = Vec::new();
        for prefix in &prefixes {
            for d in site_packages_under(prefix) {
                if !found.contains(&d) {
                    found.push(d);
                }
            }
        }
        PythonEnv {
            name: answer.executable.unwrap_or_else(|| python.to_path_buf()),
            site_packages: found,
        }
    })
}

/// How every report names the training Python `python`: as it names
/// itself (see [`PythonEnv::name`]).
pub fn name_of(python: &Path) -> PathBuf {
    ask_interpreter(python)
        .executable
        .unwrap_or_else(|| python.to_path_buf())
}

/// The site-packages folders of a Python environment:
/// `<prefix>/lib/python3*/site-packages` and `<prefix>/lib64/...`, for the
/// prefix the interpreter reports (`sys.prefix`) and the folder above its
/// `bin/` (all there is when the interpreter does not answer).
pub fn site_packages(python: &Path) -> Vec<PathBuf> {
    crate::seam::answer(
        "python::site_packages",
        &python.display().to_string(),
        || python_env(python).site_packages,
    )
}

/// `<prefix>/lib{,64}/python3*/site-packages`, resolved, in order.
fn site_packages_under(prefix: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for d in dirs {
            let canon = d.canonicalize().unwrap_or(d);
            if !found.contains(&canon) {
                found.push(canon);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn exe(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn the_environment_gpucheck_is_installed_in_comes_after_virtual_env() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("active");
        let installed = dir.path().join("train");
        let conda = dir.path().join("conda");
        exe(&venv.join("bin/python"));
        exe(&installed.join("bin/python"));
        exe(&conda.join("bin/python"));
        let c = choose_python(None, Some(&venv), Some(&installed), Some(&conda), None).unwrap();
        assert_eq!(c.source, PythonSource::VirtualEnv);
        let c = choose_python(None, None, Some(&installed), Some(&conda), None).unwrap();
        assert_eq!(
            (c.source.describe(), c.path),
            (
                "the environment gpucheck is installed in".to_string(),
                installed.join("bin/python")
            )
        );
        let gone = dir.path().join("gone");
        let c = choose_python(None, Some(&gone), Some(&installed), None, None).unwrap();
        assert!(c.source.describe().contains("passed over"), "{c:?}");
    }

    #[test]
    fn installed_env_is_a_venv_or_conda_env_holding_the_binary_not_a_tools() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join(".venv");
        exe(&venv.join("bin/gpucheck"));
        assert_eq!(
            installed_env(&venv.join("bin/gpucheck")),
            None,
            "no pyvenv.cfg"
        );
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        assert_eq!(
            installed_env(&venv.join("bin/gpucheck")),
            Some(venv.clone())
        );
        let conda = dir.path().join("miniforge/envs/train");
        std::fs::create_dir_all(conda.join("conda-meta")).unwrap();
        assert_eq!(
            installed_env(&conda.join("bin/gpucheck")),
            Some(conda.clone())
        );
        assert_eq!(installed_env(Path::new("/usr/bin/gpucheck")), None);
        std::fs::write(venv.join("pipx_metadata.json"), "{}").unwrap();
        assert_eq!(
            installed_env(&venv.join("bin/gpucheck")),
            None,
            "pipx's own venv"
        );
        let uv_tool = dir.path().join("uv/tools/gpucheck");
        std::fs::create_dir_all(uv_tool.join("bin")).unwrap();
        std::fs::write(uv_tool.join("pyvenv.cfg"), "").unwrap();
        std::fs::write(uv_tool.join("uv-receipt.toml"), "").unwrap();
        assert_eq!(
            installed_env(&uv_tool.join("bin/gpucheck")),
            None,
            "uv's tool env"
        );
        let uvx = dir.path().join("cache/uv/archive-v0/x1");
        std::fs::create_dir_all(uvx.join("bin")).unwrap();
        std::fs::write(uvx.join("pyvenv.cfg"), "").unwrap();
        assert!(installed_env(&uvx.join("bin/gpucheck")).is_some());
        std::fs::write(
            uvx.join("CACHEDIR.TAG"),
            "Signature: 8a477f597d28d172789f06886806bc55",
        )
        .unwrap();
        assert_eq!(
            installed_env(&uvx.join("bin/gpucheck")),
            None,
            "uvx's cached env"
        );
    }

    #[test]
    fn python3_of_a_tool_env_first_on_path_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let uvx = dir.path().join("cache/archive-v0/x1");
        let system = dir.path().join("usr/bin");
        exe(&uvx.join("bin/python3"));
        exe(&system.join("python3"));
        std::fs::write(uvx.join("CACHEDIR.TAG"), "").unwrap();
        let var = std::env::join_paths([uvx.join("bin"), system.clone()]).unwrap();
        let c = choose_python(None, None, None, None, Some(&var)).unwrap();
        assert_eq!(c.path, system.join("python3"));
        assert!(
            c.source.describe().contains("a tool's own environment"),
            "{c:?}"
        );
    }

    #[test]
    fn explicit_wins_then_venv_then_conda_then_path() {
        let dir = tempfile::tempdir().unwrap();
        let explicit = dir.path().join("x/python");
        let venv = dir.path().join("venv");
        let conda = dir.path().join("conda");
        let pathdir = dir.path().join("usr/bin");
        exe(&explicit);
        exe(&venv.join("bin/python"));
        exe(&conda.join("bin/python"));
        exe(&pathdir.join("python3"));
        let path_var = Some(pathdir.clone().into_os_string());

        let c = choose_python(
            Some(&explicit),
            Some(&venv),
            None,
            Some(&conda),
            path_var.as_ref(),
        )
        .unwrap();
        assert_eq!(c.source, PythonSource::Explicit);
        let c = choose_python(None, Some(&venv), None, Some(&conda), path_var.as_ref()).unwrap();
        assert_eq!(
            (c.source, c.path),
            (PythonSource::VirtualEnv, venv.join("bin/python"))
        );
        let c = choose_python(None, None, None, Some(&conda), path_var.as_ref()).unwrap();
        assert_eq!(c.source.describe(), "$CONDA_PREFIX");
        let c = choose_python(None, None, None, None, path_var.as_ref()).unwrap();
        assert_eq!(
            (c.source, c.path),
            (
                PythonSource::Path {
                    passed_over: vec![]
                },
                pathdir.join("python3")
            )
        );
    }

    #[test]
    fn relative_path_entries_are_skipped_and_named_when_they_hold_python3() {
        let dir = tempfile::tempdir().unwrap();
        let abs = dir.path().join("usr/bin");
        exe(&abs.join("python3"));
        // "." and empty entries (a leading, trailing or doubled ':') are
        // never used, whatever they hold.
        for path in [
            format!(".:{}", abs.display()),
            format!(":{}", abs.display()),
            format!("{}:", abs.display()),
            format!("{}::.", abs.display()),
        ] {
            let var = OsString::from(&path);
            assert_eq!(
                which("python3", Some(&var)),
                Some(abs.join("python3")),
                "{path}"
            );
        }
        assert_eq!(which("python3", Some(&OsString::from(".:"))), None);
        // With a python3 in a relative entry before the chosen one (a
        // folder outside the checkout, named relative to the current one),
        // the choice says it was skipped.
        let rel_dir = dir.path().join("here");
        exe(&rel_dir.join("python3"));
        let depth = std::env::current_dir().unwrap().components().count() - 1;
        let cwd_rel = format!(
            "{}{}",
            "../".repeat(depth),
            rel_dir.strip_prefix("/").unwrap().display()
        );
        assert!(Path::new(&cwd_rel).join("python3").is_file());
        let var = OsString::from(format!("{cwd_rel}:{}", abs.display()));
        let c = choose_python(None, None, None, None, Some(&var)).unwrap();
        assert_eq!(c.path, abs.join("python3"));
        assert_eq!(
            c.source.describe(),
            format!("python3 on PATH; the python3 in the relative PATH entry {cwd_rel:?} was skipped: it runs whatever folder gpucheck is started in")
        );
        // After the chosen one it does not matter.
        let var = OsString::from(format!("{}:{cwd_rel}", abs.display()));
        let c = choose_python(None, None, None, None, Some(&var)).unwrap();
        assert_eq!(c.source.describe(), "python3 on PATH");
    }

    #[test]
    fn environments_that_hold_no_python_are_passed_over_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let pathdir = dir.path().join("usr/bin");
        exe(&pathdir.join("python3"));
        let conda = dir.path().join("conda");
        exe(&conda.join("bin/python"));
        let gone = Path::new("/nonexistent/venv");
        let var = Some(pathdir.clone().into_os_string());
        let c = choose_python(None, Some(gone), None, Some(&conda), var.as_ref()).unwrap();
        assert_eq!(
            c.source.describe(),
            "$CONDA_PREFIX; $VIRTUAL_ENV=\"/nonexistent/venv\" holds no Python, so it was passed over"
        );
        let c = choose_python(None, Some(gone), None, Some(gone), var.as_ref()).unwrap();
        assert_eq!(c.path, pathdir.join("python3"));
        assert_eq!(
            c.source.describe(),
            "python3 on PATH; $VIRTUAL_ENV=\"/nonexistent/venv\" holds no Python, so it was passed over; $CONDA_PREFIX=\"/nonexistent/venv\" holds no Python, so it was passed over"
        );
    }

    #[test]
    fn a_bare_explicit_name_is_looked_up_on_path() {
        let dir = tempfile::tempdir().unwrap();
        let pathdir = dir.path().join("bin");
        exe(&pathdir.join("python3.11"));
        let path_var = Some(pathdir.clone().into_os_string());
        // Whatever the current folder holds, a bare name means PATH.
        let c = choose_python(
            Some(Path::new("python3.11")),
            None,
            None,
            None,
            path_var.as_ref(),
        )
        .unwrap();
        assert_eq!(
            (c.source, c.path),
            (PythonSource::Explicit, pathdir.join("python3.11"))
        );
        // The repository's own `src` folder exists in the test's current
        // folder; it must not shadow a `src` on PATH (nor be taken for one).
        assert!(Path::new("src").exists());
        exe(&pathdir.join("src"));
        let c = choose_python(Some(Path::new("src")), None, None, None, path_var.as_ref()).unwrap();
        assert_eq!(c.path, pathdir.join("src"));
        let err = choose_python(
            Some(Path::new("nope3")),
            None,
            None,
            None,
            path_var.as_ref(),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("nope3 (from --python"), "{err}");
    }

    #[test]
    fn missing_explicit_is_an_error_not_a_fallback() {
        let err = choose_python(
            Some(Path::new("/nonexistent/python")),
            None,
            None,
            None,
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/python"), "{err}");
        assert_eq!(
            choose_python(
                None,
                None,
                None,
                None,
                Some(&OsString::from("/nonexistent"))
            )
            .unwrap_err(),
            FindPythonError::NotFound
        );
    }

    #[test]
    fn payload_timeout_is_reported() {
        let py = which("python3", std::env::var_os("PATH").as_ref())
            .expect("the tests need python3 on PATH");
        let err = run_payload(
            &py,
            "t",
            "import time\ntime.sleep(300)\n",
            &[],
            &[],
            Duration::from_millis(800),
        )
        .unwrap_err();
        assert!(
            matches!(err, PayloadError::Run(RunError::Timeout { .. })),
            "{err}"
        );
    }

    #[test]
    fn payload_output_and_exit_code() {
        let py = which("python3", std::env::var_os("PATH").as_ref())
            .expect("the tests need python3 on PATH");
        let out = run_payload(
            &py,
            "t",
            "import sys, os\nprint(os.environ['X'] + sys.argv[1])\nsys.stderr.write('e')\nsys.exit(3)\n",
            &["b".to_string()],
            &[("X".to_string(), "a".to_string())],
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!(out.stdout.trim(), "ab");
        assert_eq!(out.stderr, "e");
        assert_eq!(out.code, Some(3));
    }

    #[test]
    fn payload_folders_are_private_and_removed_when_dropped() {
        use std::os::unix::fs::MetadataExt;
        let file = PayloadFile::write("t-x", "print(1)\n").unwrap();
        let dir = file.dir().to_path_buf();
        assert!(dir.is_absolute());
        assert_eq!(file.path(), dir.join("t-x.py"));
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::metadata(file.path()).unwrap().mode() & 0o777,
            0o600
        );
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(payload_dir_owner(&name), Some(("t-x", std::process::id())));
        drop(file);
        assert!(!dir.exists());
    }

    #[test]
    fn only_payload_folders_of_gone_writers_are_swept() {
        let root = tempfile::tempdir().unwrap();
        let folder = |name: &str, script: Option<&str>| {
            let d = root.path().join(name);
            std::fs::create_dir(&d).unwrap();
            if let Some(s) = script {
                std::fs::write(d.join(s), "").unwrap();
            }
            d
        };
        // A pid no process has (above the kernel's pid_max limit).
        let gone = folder("gpucheck-torch-info-4194305-aB3dE9", Some("torch-info.py"));
        let mine = folder(
            &format!("gpucheck-torch-info-{}-aB3dE9", std::process::id()),
            Some("torch-info.py"),
        );
        let running = folder("gpucheck-ddp_bench-1-aB3dE9", Some("ddp_bench.py"));
        let not_ours = folder("gpucheck-notes-4194305-aB3dE9", Some("other.txt"));
        remove_stale_payload_dirs(root.path(), None);
        assert!(!gone.exists());
        assert!(mine.exists() && running.exists() && not_ours.exists());
        remove_stale_payload_dirs(root.path(), Some(1));
        assert!(!running.exists());
        assert_eq!(payload_dir_owner("gpucheck-x-12-"), None);
        assert_eq!(payload_dir_owner("gpucheck--12-a"), None);
        assert_eq!(payload_dir_owner("gpucheck-a-b-c"), None);
    }

    #[test]
    fn python_runs_outside_any_folder_someone_else_controls() {
        let cmd = python_command(Path::new("bin/python3"));
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/")));
        assert!(Path::new(cmd.get_program()).is_absolute());
        let safe = cmd
            .get_envs()
            .any(|(k, v)| k == "PYTHONSAFEPATH" && v == Some(std::ffi::OsStr::new("1")));
        assert!(safe);
    }

    /// A pyenv-style shim, `<dir>/shims/python3`: a shell script that runs
    /// `body` (the lines the payload would print).
    fn fake_shim(dir: &Path, body: &str) -> PathBuf {
        let shim = dir.join("shims/python3");
        std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
        std::fs::write(&shim, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        shim
    }

    #[test]
    fn a_launcher_in_another_folder_is_asked_where_its_environment_is() {
        // A pyenv-style shim: a script in a folder of its own that runs the
        // environment's Python, whose site-packages lie elsewhere.
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join("versions/3.11.7");
        let site = env.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        let shim = fake_shim(
            dir.path(),
            &format!(
                "echo 'pyenv: note'\necho 'GPUCHECK_PREFIX {}'",
                env.display()
            ),
        );
        assert_eq!(site_packages(&shim), [site.canonicalize().unwrap()]);
        // It did not say what it runs: it is named as chosen.
        assert_eq!(python_env(&shim).name, shim);
        // An interpreter that says nothing: the folder above bin/ is all.
        let venv = dir.path().join("venv");
        let venv_site = venv.join("lib/python3.12/site-packages");
        std::fs::create_dir_all(&venv_site).unwrap();
        let quiet = venv.join("bin/python");
        exe(&quiet);
        assert_eq!(site_packages(&quiet), [venv_site.canonicalize().unwrap()]);
    }

    #[test]
    fn a_shim_is_named_by_the_interpreter_it_runs() {
        // pyenv's layout: ~/.pyenv/shims/python3 runs
        // ~/.pyenv/versions/3.11.7/bin/python3, which names itself.
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join("versions/3.11.7");
        let real = env.join("bin/python3");
        exe(&real);
        let site = env.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        let shim = fake_shim(
            dir.path(),
            &format!(
                "echo 'GPUCHECK_PREFIX {}'\necho 'GPUCHECK_EXECUTABLE {}'",
                env.display(),
                real.display()
            ),
        );
        let found = python_env(&shim);
        assert_eq!(found.name, real);
        assert_eq!(found.site_packages, [site.canonicalize().unwrap()]);
        assert_eq!(name_of(&shim), real);
    }
}

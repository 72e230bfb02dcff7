//! Probe: the Python that will train, and running gpucheck's embedded payloads
//! (checks/payloads/*.py) with it under a timeout.
//!
//! The interpreter is chosen the way a user's job would be launched:
//! `--python PATH` / GPUCHECK_PYTHON, then the active virtual environment
//! (VIRTUAL_ENV), then the active conda environment (CONDA_PREFIX), then
//! `python3` on PATH.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::process::{run_bounded, Output, RunError};

use thiserror::Error;

/// Where the chosen interpreter came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PythonSource {
    /// `--python` or GPUCHECK_PYTHON.
    Explicit,
    VirtualEnv,
    Conda,
    Path,
}

impl PythonSource {
    pub fn describe(self) -> &'static str {
        match self {
            PythonSource::Explicit => "--python / GPUCHECK_PYTHON",
            PythonSource::VirtualEnv => "$VIRTUAL_ENV",
            PythonSource::Conda => "$CONDA_PREFIX",
            PythonSource::Path => "python3 on PATH",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonChoice {
    pub path: PathBuf,
    pub source: PythonSource,
}

/// Why no interpreter was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FindPythonError {
    #[error("{path} (from {from}) does not exist or is not executable")]
    ExplicitMissing { path: String, from: &'static str },
    #[error("no Python found: --python not given, no $VIRTUAL_ENV or $CONDA_PREFIX, and no python3 on PATH")]
    NotFound,
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Find `name` on a PATH-style list.
pub fn which(name: &str, path_var: Option<&OsString>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

/// Choose the interpreter. Pure apart from file-existence tests, so the order
/// is unit-tested with temporary folders.
pub fn choose_python(
    explicit: Option<&Path>,
    virtual_env: Option<&Path>,
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
                from: PythonSource::Explicit.describe(),
            }),
        };
    }
    for (prefix, source) in [
        (virtual_env, PythonSource::VirtualEnv),
        (conda_prefix, PythonSource::Conda),
    ] {
        if let Some(prefix) = prefix.filter(|p| !p.as_os_str().is_empty()) {
            for name in ["python", "python3"] {
                let candidate = prefix.join("bin").join(name);
                if is_executable(&candidate) {
                    return Ok(PythonChoice {
                        path: candidate,
                        source,
                    });
                }
            }
        }
    }
    which("python3", path_var)
        .map(|path| PythonChoice {
            path,
            source: PythonSource::Path,
        })
        .ok_or(FindPythonError::NotFound)
}

/// [`choose_python`] with this process's environment.
pub fn find_python(explicit: Option<&Path>) -> Result<PythonChoice, FindPythonError> {
    let venv = std::env::var_os("VIRTUAL_ENV").map(PathBuf::from);
    let conda = std::env::var_os("CONDA_PREFIX").map(PathBuf::from);
    choose_python(
        explicit,
        venv.as_deref(),
        conda.as_deref(),
        std::env::var_os("PATH").as_ref(),
    )
}

/// An embedded payload written to a private temporary file
/// (`gpucheck-NAME-XXXXXX.py`, mode 0600), removed when dropped. Its path is
/// unique, so it also names every process running it.
pub struct PayloadFile {
    file: tempfile::NamedTempFile,
}

impl PayloadFile {
    pub fn write(name: &str, script: &str) -> Result<PayloadFile, PayloadError> {
        let mut file = tempfile::Builder::new()
            .prefix(&format!("gpucheck-{name}-"))
            .suffix(".py")
            .tempfile()
            .map_err(|e| PayloadError::TempFile(e.to_string()))?;
        file.write_all(script.as_bytes())
            .and_then(|_| file.flush())
            .map_err(|e| PayloadError::TempFile(e.to_string()))?;
        Ok(PayloadFile { file })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }
}

/// A command running `python` with the environment every payload gets
/// (unbuffered output, no .pyc files next to the temporary script).
pub fn python_command(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

/// Run an embedded payload (`script` is its source) with `python`, passing
/// `args` and extra environment, in its own process group, under `timeout`.
/// The script is written to a private temporary file, removed afterwards.
pub fn run_payload(
    python: &Path,
    name: &str,
    script: &str,
    args: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Output, PayloadError> {
    let file = PayloadFile::write(name, script)?;
    let mut cmd = python_command(python);
    cmd.arg(file.path())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)));
    run_bounded(cmd, timeout).map_err(PayloadError::Run)
}

#[derive(Debug, Clone, PartialEq, Error)]
pub enum PayloadError {
    #[error("cannot write the payload to a temporary file: {0}")]
    TempFile(String),
    #[error(transparent)]
    Run(RunError),
}

/// The site-packages folders of a Python environment, found on disk (no
/// interpreter start): `<prefix>/lib/python3*/site-packages` and
/// `<prefix>/lib64/...`, where prefix is the folder above `bin/`.
pub fn site_packages(python: &Path) -> Vec<PathBuf> {
    let Some(prefix) = python.parent().and_then(|bin| bin.parent()) else {
        return Vec::new();
    };
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
            Some(&conda),
            path_var.as_ref(),
        )
        .unwrap();
        assert_eq!(c.source, PythonSource::Explicit);
        let c = choose_python(None, Some(&venv), Some(&conda), path_var.as_ref()).unwrap();
        assert_eq!(
            (c.source, c.path),
            (PythonSource::VirtualEnv, venv.join("bin/python"))
        );
        let c = choose_python(None, None, Some(&conda), path_var.as_ref()).unwrap();
        assert_eq!(c.source, PythonSource::Conda);
        let c = choose_python(None, None, None, path_var.as_ref()).unwrap();
        assert_eq!(
            (c.source, c.path),
            (PythonSource::Path, pathdir.join("python3"))
        );
    }

    #[test]
    fn a_bare_explicit_name_is_looked_up_on_path() {
        let dir = tempfile::tempdir().unwrap();
        let pathdir = dir.path().join("bin");
        exe(&pathdir.join("python3.11"));
        let path_var = Some(pathdir.clone().into_os_string());
        // Whatever the current folder holds, a bare name means PATH.
        let c =
            choose_python(Some(Path::new("python3.11")), None, None, path_var.as_ref()).unwrap();
        assert_eq!(
            (c.source, c.path),
            (PythonSource::Explicit, pathdir.join("python3.11"))
        );
        // The repository's own `src` folder exists in the test's current
        // folder; it must not shadow a `src` on PATH (nor be taken for one).
        assert!(Path::new("src").exists());
        exe(&pathdir.join("src"));
        let c = choose_python(Some(Path::new("src")), None, None, path_var.as_ref()).unwrap();
        assert_eq!(c.path, pathdir.join("src"));
        let err =
            choose_python(Some(Path::new("nope3")), None, None, path_var.as_ref()).unwrap_err();
        assert!(err.to_string().starts_with("nope3 (from --python"), "{err}");
    }

    #[test]
    fn missing_explicit_is_an_error_not_a_fallback() {
        let err =
            choose_python(Some(Path::new("/nonexistent/python")), None, None, None).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/python"), "{err}");
        assert_eq!(
            choose_python(None, None, None, Some(&OsString::from("/nonexistent"))).unwrap_err(),
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
}

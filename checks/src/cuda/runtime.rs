//! `cuda.runtime`: the CUDA runtimes (libcudart) a job would load, and
//! whether the driver runs them.

use std::path::PathBuf;
use std::time::Duration;

use crate::domain::compat::{
    incompatible_fix, runtime_compat, CudaVersion, DriverVersion, RuntimeCompat,
};
use crate::facts::cuda::{known_driver, FROM_LIBCUDA, FROM_NVML};
use crate::probe::cuda as cuda_probe;
use crate::probe::libs::LibSource;
use crate::probe::python;
use crate::{Check, Context, DataTable, Finding, Findings, Isolation, Outcome, Profile, Status};

/// One libcudart found on disk, as judged.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeEntry {
    pub path: PathBuf,
    pub source: LibSource,
    pub version: Result<CudaVersion, String>,
}

/// The driver side of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverSide {
    /// The newest CUDA the driver supports.
    pub cuda: CudaVersion,
    /// "570.86.15", when NVML or /proc tells.
    pub version: Option<String>,
    /// Where `cuda` came from: [`FROM_LIBCUDA`] or [`FROM_NVML`].
    pub from: &'static str,
}

/// Everything `cuda.runtime` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeFacts {
    pub runtimes: Vec<RuntimeEntry>,
    pub driver: Option<DriverSide>,
    /// LD_LIBRARY_PATH folders holding a libcuda (cuda-compat).
    pub compat_dirs: Vec<PathBuf>,
}

/// Copies a training job loads for sure: a wrong one there fails; a wrong
/// one elsewhere (a system toolkit) only warns, since a job may never load it.
fn loaded_by_jobs(source: LibSource) -> bool {
    matches!(
        source,
        LibSource::PythonWheel
            | LibSource::PythonEnvLib
            | LibSource::LdLibraryPath
            | LibSource::Explicit
    )
}

/// The report facts: every copy found, its version, the cuda-compat
/// folders; and the note the summary carries about those.
fn runtime_facts(f: &RuntimeFacts) -> (Outcome, String) {
    let mut base = Outcome::pass("");
    for (i, r) in f.runtimes.iter().enumerate() {
        let v = match &r.version {
            Ok(v) => v.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        base = base.with_fact(
            &format!("libcudart_{i}"),
            format!("{} = {v}", r.path.display()),
        );
    }
    if let Some(first) = f.runtimes.iter().find_map(|r| r.version.as_ref().ok()) {
        base = base.with_fact("cuda_runtime_version", first.to_string());
    }
    if f.compat_dirs.is_empty() {
        return (base, String::new());
    }
    let dirs: Vec<String> = f
        .compat_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    base = base.with_fact("forward_compat", dirs.join(", "));
    let note = format!(
        "; forward compatibility in use: cuda-compat libcuda on LD_LIBRARY_PATH ({}), which works only on data-center GPUs",
        dirs.join(", ")
    );
    (base, note)
}

/// One runtime against the driver: its verdict in the table, and what is
/// wrong with it.
fn judge_runtime(
    r: &RuntimeEntry,
    driver: &DriverSide,
    driver_label: &str,
) -> (String, Option<Finding>) {
    let have = driver.version.as_deref().and_then(DriverVersion::parse);
    let v = match &r.version {
        Err(e) => {
            let finding = Finding::new(
                None,
                Status::Warn,
                format!("cannot read the version of {}: {e}", r.path.display()),
            )
            .hint(format!(
                "{} may be damaged or for another architecture; reinstall the package that owns it",
                r.path.display()
            ));
            return (format!("version unreadable: {e}"), Some(finding));
        }
        Ok(v) => *v,
    };
    match runtime_compat(v, driver.cuda, have.as_ref()) {
        RuntimeCompat::Native => ("runs natively".to_string(), None),
        RuntimeCompat::MinorVersion { floor } => {
            let finding = Finding::new(
                None,
                Status::Warn,
                format!(
                    "libcudart {v} from {} runs on {driver_label} only through minor-version compatibility",
                    r.source.describe()
                ),
            )
            .hint(format!(
                "CUDA {v} on a CUDA {} driver works (drivers >= {floor} run every {}.x runtime), but PTX newer than the driver cannot be JIT-compiled (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) and some features are missing; upgrade the driver to one supporting CUDA {v} to remove the caveat",
                driver.cuda, v.major
            ));
            ("minor-version compatibility".to_string(), Some(finding))
        }
        RuntimeCompat::Incompatible { need } => {
            let status = if loaded_by_jobs(r.source) {
                Status::Fail
            } else {
                Status::Warn
            };
            let finding = Finding::new(
                None,
                status,
                format!(
                    "libcudart {v} at {} (from {}) is newer than {driver_label} supports",
                    r.path.display(),
                    r.source.describe()
                ),
            )
            .hint(incompatible_fix(v, driver.cuda, &need));
            (format!("needs a driver {need}"), Some(finding))
        }
    }
}

/// Judge every runtime found against the driver.
pub fn evaluate_runtime(f: &RuntimeFacts) -> Outcome {
    let describe = |r: &RuntimeEntry| match &r.version {
        Ok(v) => format!("libcudart {v} from {}", r.source.describe()),
        Err(_) => format!("{} ({})", r.path.display(), r.source.describe()),
    };
    let found: Vec<String> = f.runtimes.iter().map(describe).collect();
    let (mut base, compat_note) = runtime_facts(f);
    if f.runtimes.is_empty() {
        return Outcome {
            status: Status::Skip,
            summary: format!(
                "no CUDA runtime library (libcudart) found on the loader's path, in /usr/local/cuda* or in the Python environment{compat_note}"
            ),
            ..base
        };
    }
    let Some(driver) = &f.driver else {
        return Outcome {
            status: Status::Skip,
            summary: format!(
                "found {}; no NVIDIA driver (libcuda or NVML) to compare with, so whether it runs here cannot be judged{compat_note}",
                found.join(", ")
            ),
            ..base
        };
    };
    let driver_label = match &driver.version {
        Some(v) => format!("driver {v} (CUDA {})", driver.cuda),
        None => format!("the driver (CUDA {})", driver.cuda),
    };
    base = base.with_fact("driver_cuda_version", driver.cuda.to_string());
    let mut findings = Findings::new();
    let mut rows = Vec::new();
    for r in &f.runtimes {
        let (verdict, finding) = judge_runtime(r, driver, &driver_label);
        findings.items.extend(finding);
        rows.push(vec![
            r.path.display().to_string(),
            r.source.describe().to_string(),
            r.version
                .as_ref()
                .map(|v| v.to_string())
                .unwrap_or_else(|_| "?".to_string()),
            verdict,
        ]);
    }
    base = base.with_table(DataTable {
        title: "CUDA runtimes".to_string(),
        header: vec![
            "library".to_string(),
            "found in".to_string(),
            "CUDA".to_string(),
            "on this driver".to_string(),
        ],
        rows,
        legend: Some(format!(
            "driver side: CUDA {} from {}",
            driver.cuda, driver.from
        )),
    });
    let verdict = findings.conclude(
        format!(
            "{} run{} on {driver_label}",
            found.join(", "),
            if found.len() == 1 { "s" } else { "" }
        ),
        Vec::new(),
    );
    Outcome {
        status: verdict.status,
        summary: format!("{}{compat_note}", verdict.summary),
        hint: verdict.hint,
        ..base
    }
}

/// `cuda.runtime`: the CUDA runtimes a job would load, and whether the
/// driver runs them.
pub struct CudaRuntime;

impl CudaRuntime {
    /// cuda.driver already asked libcuda; otherwise NVML, otherwise ask
    /// libcuda here (this check is child-isolated). With a cuda-compat
    /// libcuda on LD_LIBRARY_PATH (`forward_compat`), NVML describes the
    /// system driver while jobs load the compat libcuda, which supports a
    /// newer CUDA: then libcuda is asked before NVML.
    fn driver_side(ctx: &Context, forward_compat: bool) -> Option<DriverSide> {
        let (known, version) = known_driver(ctx);
        let ask_libcuda = || cuda_probe::driver_cuda_version().map(|c| (c, FROM_LIBCUDA));
        let (cuda, from) = match known {
            Some((nvml_cuda, FROM_NVML)) if forward_compat => {
                ask_libcuda().or(Some((nvml_cuda, FROM_NVML)))
            }
            Some(known) => Some(known),
            None => ask_libcuda(),
        }?;
        Some(DriverSide {
            cuda,
            version,
            from,
        })
    }
}

impl Check for CudaRuntime {
    fn id(&self) -> &'static str {
        "cuda.runtime"
    }
    fn title(&self) -> &'static str {
        "CUDA runtime vs driver"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(20)
    }
    fn explain(&self) -> &'static str {
        "Finds every CUDA runtime library (libcudart) a training job could load and checks that the installed driver runs each one.\n\n\
Where it looks: CUDA_HOME / CUDA_PATH, /usr/local/cuda*, LD_LIBRARY_PATH, the dynamic loader's cache and system folders, and the nvidia-* wheels inside the chosen Python environment (site-packages/nvidia/*/lib; PyTorch's own wheels bring their runtime there, e.g. nvidia/cu13/lib/libcudart.so.13). Each copy's version is read with cudaRuntimeGetVersion, which answers without a GPU.\n\n\
Why it matters for DDP: a runtime newer than the driver fails at the first CUDA call (\"CUDA driver version is insufficient for CUDA runtime version\"), and torch then reports no GPU. Within one CUDA major version, a driver at or above the minor-version compatibility floor (12.x: 525.60.13, 13.x: 580) still runs newer runtimes, with a limited feature set: PTX newer than the driver cannot be JIT-compiled. Forward compatibility through the cuda-compat package on LD_LIBRARY_PATH works only on data-center GPUs.\n\n\
How to fix: install a driver that supports the runtime (the hint names the version), or replace torch with a build for the CUDA version the driver supports (`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cuXYZ`; without the uninstall pip keeps the installed torch). A copy found only in a system toolkit warns rather than fails, since a PyTorch job does not load it. With no driver at all the runtimes are listed and the comparison is skipped."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let site_packages = python::find_python(ctx.options.python.as_deref())
            .map(|p| python::site_packages(&p.path))
            .unwrap_or_default();
        let runtimes = cuda_probe::find_runtimes(&site_packages)
            .into_iter()
            .map(|c| RuntimeEntry {
                path: c.lib.path,
                source: c.lib.source,
                version: c.version,
            })
            .collect();
        let compat_dirs = cuda_probe::compat_libcuda_dirs(
            crate::seam::env("LD_LIBRARY_PATH")
                .map(std::ffi::OsString::from)
                .as_deref(),
        );
        let facts = RuntimeFacts {
            runtimes,
            driver: Self::driver_side(ctx, !compat_dirs.is_empty()),
            compat_dirs,
        };
        evaluate_runtime(&facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> CudaVersion {
        CudaVersion::new(major, minor)
    }

    fn wheel_runtime(version: CudaVersion) -> RuntimeEntry {
        RuntimeEntry {
            path: PathBuf::from(
                "/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13",
            ),
            source: LibSource::PythonWheel,
            version: Ok(version),
        }
    }

    fn driver(cuda: CudaVersion, version: Option<&str>) -> Option<DriverSide> {
        Some(DriverSide {
            cuda,
            version: version.map(str::to_string),
            from: "cuDriverGetVersion",
        })
    }

    #[test]
    fn no_driver_lists_the_runtimes_and_skips() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![wheel_runtime(v(13, 2))],
            driver: None,
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.contains("found libcudart 13.2 from Python wheel"),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("no NVIDIA driver"));
        assert_eq!(o.facts["cuda_runtime_version"], "13.2");
    }

    #[test]
    fn no_runtime_at_all_skips() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![],
            driver: driver(v(12, 8), None),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("no CUDA runtime library"));
    }

    #[test]
    fn wheel_runtime_newer_than_driver_fails_with_both_fixes() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![wheel_runtime(v(13, 2))],
            driver: driver(v(12, 8), Some("570.86.15")),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("libcudart 13.2"), "{}", o.summary);
        assert!(
            o.summary
                .contains("newer than driver 570.86.15 (CUDA 12.8) supports"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(
            hint.contains("install an NVIDIA driver >= 580.65.06"),
            "{hint}"
        );
        assert!(
            hint.contains("`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu128`"),
            "{hint}"
        );
        assert_eq!(o.tables[0].rows[0][3], "needs a driver >= 580.65.06");
    }

    #[test]
    fn system_toolkit_newer_than_driver_only_warns() {
        let mut r = wheel_runtime(v(13, 0));
        r.path = PathBuf::from("/usr/local/cuda-13.0/lib64/libcudart.so.13");
        r.source = LibSource::CudaInstall;
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![r],
            driver: driver(v(12, 2), Some("535.104.05")),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Warn);
    }

    #[test]
    fn minor_version_compat_warns_with_ptx_caveat() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![wheel_runtime(v(13, 2))],
            driver: driver(v(13, 0), Some("580.65.06")),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("minor-version compatibility"));
        assert!(o.hint.unwrap().contains("PTX"));
    }

    #[test]
    fn matching_driver_passes_and_compat_is_reported() {
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![wheel_runtime(v(12, 6))],
            driver: driver(v(12, 8), Some("570.86.15")),
            compat_dirs: vec![PathBuf::from("/usr/local/cuda-12.8/compat")],
        });
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(o.summary.contains("libcudart 12.6 from Python wheel (site-packages/nvidia) runs on driver 570.86.15 (CUDA 12.8)"), "{}", o.summary);
        assert!(
            o.summary.contains("forward compatibility in use"),
            "{}",
            o.summary
        );
        assert_eq!(o.facts["forward_compat"], "/usr/local/cuda-12.8/compat");
    }

    #[test]
    fn unreadable_runtime_warns() {
        let mut r = wheel_runtime(v(12, 0));
        r.version = Err("cannot load: wrong ELF class".to_string());
        let o = evaluate_runtime(&RuntimeFacts {
            runtimes: vec![r],
            driver: driver(v(12, 8), None),
            compat_dirs: vec![],
        });
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("cannot read the version"));
    }
}

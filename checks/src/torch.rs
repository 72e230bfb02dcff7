//! The torch checks: the answer to "my torch says CUDA isn't available" and
//! "no kernel image is available for execution on the device" before a job
//! starts.
//!
//! `torch.import` runs the introspection payload with the Python that will
//! train and keeps what it found as human-readable facts; `torch.cuda`,
//! `torch.arch` and `torch.nccl` read those facts back through
//! [`TorchInfo::from_outcome`] (or run the payload themselves when
//! torch.import was not selected) and judge them against NVML and the CUDA
//! driver.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::cuda::{
    incompatible_fix, minor_version_floor, predict_devices, runtime_compat, DriverVersion,
    Expectation, RuntimeCompat,
};
use crate::probe::cuda::CudaVersion;
use crate::probe::nvml;
use crate::probe::python::{FindPythonError, PythonSource};
use crate::probe::torch::{probe_torch, TorchDevice, TorchInfo, TorchProbeError};
use crate::{Check, Context, DeviceResult, Isolation, Outcome, Profile, Status};

// ---------------------------------------------------------------------------
// PyTorch wheels: CUDA version, torch versions, architectures
// ---------------------------------------------------------------------------

/// One official PyTorch x86-64 wheel flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wheel {
    /// The index name: `https://download.pytorch.org/whl/<index>`.
    pub index: &'static str,
    pub cuda: CudaVersion,
    /// The torch releases built this way.
    pub torch: &'static str,
    /// `torch.cuda.get_arch_list()` of those builds.
    pub archs: &'static [&'static str],
}

/// Official wheels and their architectures. Source: facts.md "Architectures
/// in official PyTorch x86-64 wheels" (pytorch/pytorch
/// .ci/manywheel/build_cuda.sh; pytorch issues #160269, #172352, #167244).
/// `archs` are those of the newest torch on the index, which is what the
/// suggested `pip install torch --index-url ...` installs: cu128 carried
/// sm_70 only in torch 2.8-2.10 and dropped it in 2.11 (#172352, which
/// sends Volta users to the cu126 build), so it is listed without sm_70 and
/// a V100 is pointed at cu126. cu132 is read off the torch 2.15
/// wheel. facts.md gives cu121 and cu124 together as torch
/// 2.4-2.6; cu121 is listed here up to 2.5, the last release built with it
/// (2.6 shipped cu118, cu124 and cu126).
pub const WHEELS: &[Wheel] = &[
    Wheel {
        index: "cu118",
        cuda: CudaVersion::new(11, 8),
        torch: "2.4-2.7",
        archs: &[
            "sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90",
        ],
    },
    Wheel {
        index: "cu121",
        cuda: CudaVersion::new(12, 1),
        torch: "2.4-2.5",
        archs: &[
            "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90",
        ],
    },
    Wheel {
        index: "cu124",
        cuda: CudaVersion::new(12, 4),
        torch: "2.4-2.6",
        archs: &[
            "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90",
        ],
    },
    Wheel {
        index: "cu126",
        cuda: CudaVersion::new(12, 6),
        torch: "2.6 and newer",
        archs: &[
            "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90",
        ],
    },
    Wheel {
        index: "cu128",
        cuda: CudaVersion::new(12, 8),
        torch: "2.7-2.11",
        archs: &["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    },
    Wheel {
        index: "cu130",
        cuda: CudaVersion::new(13, 0),
        torch: "2.9 and newer",
        archs: &[
            "sm_75",
            "sm_80",
            "sm_86",
            "sm_90",
            "sm_100",
            "sm_120",
            "compute_120",
        ],
    },
    Wheel {
        index: "cu132",
        cuda: CudaVersion::new(13, 2),
        torch: "2.15",
        archs: &["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    },
];

/// The command that replaces the installed torch with the build on the
/// PyTorch index `index` ("cu126"). A plain `pip install torch --index-url
/// ...` does nothing while a torch is installed: the unpinned requirement is
/// already satisfied, whatever CUDA build that torch is ("Requirement already
/// satisfied"), and pip never downgrades to reach the index's newest. So
/// the installed build goes first.
pub fn replace_torch_command(index: &str) -> String {
    format!(
        "`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/{index}`"
    )
}

/// The wheel to suggest for a driver supporting CUDA `driver`: the newest
/// one it runs natively, else the newest of the same major (minor-version
/// compatibility).
pub fn wheel_for_driver(driver: CudaVersion) -> Option<&'static Wheel> {
    WHEELS
        .iter()
        .rev()
        .find(|w| w.cuda <= driver)
        .or_else(|| WHEELS.iter().rev().find(|w| w.cuda.major == driver.major))
}

/// The wheels whose machine code runs on compute capability `cc`.
pub fn wheels_covering(cc: (u32, u32)) -> Vec<&'static Wheel> {
    WHEELS
        .iter()
        .filter(|w| {
            let archs: Vec<String> = w.archs.iter().map(|s| s.to_string()).collect();
            matches!(arch_support(cc, &archs), ArchSupport::Native { .. })
        })
        .collect()
}

/// A `get_arch_list()` entry: `sm_90` (machine code), `compute_90` (PTX),
/// with an optional `a` (arch-specific) or `f` (family) suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arch {
    pub ptx: bool,
    pub major: u32,
    pub minor: u32,
    pub suffix: Option<char>,
}

impl Arch {
    pub fn parse(s: &str) -> Option<Arch> {
        let (ptx, rest) = if let Some(r) = s.strip_prefix("sm_") {
            (false, r)
        } else if let Some(r) = s.strip_prefix("compute_") {
            (true, r)
        } else {
            return None;
        };
        let (digits, suffix) = match rest.chars().last() {
            Some(c @ ('a' | 'f')) => (&rest[..rest.len() - 1], Some(c)),
            _ => (rest, None),
        };
        if digits.len() < 2 || !digits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        Some(Arch {
            ptx,
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
            suffix,
        })
    }

    /// Whether code for this arch runs on a device of capability `cc`:
    /// machine code needs the same major and a minor <= the device's
    /// (arch-specific `a` code only the exact capability); PTX is
    /// JIT-compiled for any capability >= its own. Source: facts.md
    /// "Compute capability" (CUDA programming guide, binary compatibility).
    pub fn runs_on(&self, cc: (u32, u32)) -> bool {
        let mine = (self.major, self.minor);
        match (self.suffix, self.ptx) {
            (Some('a'), _) => mine == cc,
            (_, false) => self.major == cc.0 && self.minor <= cc.1,
            (Some('f'), true) => self.major == cc.0 && self.minor <= cc.1,
            (_, true) => mine <= cc,
        }
    }
}

/// How a build runs on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchSupport {
    /// Machine code; `arch` is the best entry that runs, `exact` when it was
    /// built for this very capability.
    Native {
        arch: String,
        exact: bool,
    },
    /// Only through PTX, JIT-compiled at first use.
    Jit {
        arch: String,
    },
    None,
}

/// The best way `archs` runs on `cc`.
pub fn arch_support(cc: (u32, u32), archs: &[String]) -> ArchSupport {
    let parsed: Vec<(&String, Arch)> = archs
        .iter()
        .filter_map(|s| Arch::parse(s).map(|a| (s, a)))
        .collect();
    let best_native = parsed
        .iter()
        .filter(|(_, a)| !a.ptx && a.runs_on(cc))
        .max_by_key(|(_, a)| (a.major, a.minor));
    if let Some((s, a)) = best_native {
        return ArchSupport::Native {
            arch: s.to_string(),
            exact: (a.major, a.minor) == cc,
        };
    }
    parsed
        .iter()
        .filter(|(_, a)| a.ptx && a.runs_on(cc))
        .max_by_key(|(_, a)| (a.major, a.minor))
        .map(|(s, _)| ArchSupport::Jit {
            arch: s.to_string(),
        })
        .unwrap_or(ArchSupport::None)
}

/// What to install so a device of capability `cc` gets machine code.
pub fn build_for(cc: (u32, u32)) -> String {
    let covering = wheels_covering(cc);
    let Some(newest) = covering.last() else {
        return format!(
            "no official PyTorch wheel has machine code for compute {}.{}; build PyTorch from source with TORCH_CUDA_ARCH_LIST=\"{}.{}\"",
            cc.0, cc.1, cc.0, cc.1
        );
    };
    let names: Vec<&str> = covering.iter().map(|w| w.index).collect();
    let newest_all = WHEELS.last().map(|w| w.index).unwrap_or("");
    let dropped = if newest.index != newest_all {
        format!("; builds newer than {} dropped it", newest.index)
    } else {
        String::new()
    };
    format!(
        "builds with machine code for compute {}.{}: {}{dropped}; e.g. {} (torch {})",
        cc.0,
        cc.1,
        names.join(", "),
        replace_torch_command(newest.index),
        newest.torch
    )
}

// ---------------------------------------------------------------------------
// TorchInfo <-> facts: human-readable, parsed back in one place
// ---------------------------------------------------------------------------

const CPU_ONLY: &str = "none (CPU-only build)";

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

impl TorchInfo {
    /// The facts torch.import reports; [`TorchInfo::from_facts`] reads them back.
    pub fn to_facts(&self) -> BTreeMap<String, String> {
        let mut f = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            f.insert(k.to_string(), v);
        };
        put("python", self.python.display().to_string());
        if let Some(v) = &self.python_version {
            put("python_version", v.clone());
        }
        put("torch_version", self.torch_version.clone());
        if let Some(p) = &self.torch_path {
            put("torch_path", p.clone());
        }
        put(
            "torch_cuda",
            self.cuda_build
                .clone()
                .unwrap_or_else(|| CPU_ONLY.to_string()),
        );
        put("cuda_available", yes_no(self.cuda_available).to_string());
        if let Some(r) = &self.unavailable_reason {
            put("cuda_unavailable_reason", r.clone());
        }
        put("cuda_device_count", self.device_count.to_string());
        for d in &self.devices {
            put(
                &format!("cuda_device_{}", d.index),
                format!(
                    "{}, compute capability {}.{}",
                    d.name, d.capability.0, d.capability.1
                ),
            );
        }
        put("arch_list", self.arch_list.join(" "));
        if let Some(v) = &self.cudnn_version {
            put("cudnn_version", v.clone());
        }
        put(
            "nccl_available",
            self.nccl_available
                .map(yes_no)
                .unwrap_or("unknown")
                .to_string(),
        );
        if let Some(v) = &self.nccl_version {
            put("nccl_version", v.clone());
        }
        if !self.loaded_libraries.is_empty() {
            put("cuda_libraries_loaded", self.loaded_libraries.join(", "));
        }
        if !self.query_errors.is_empty() {
            put("torch_query_errors", self.query_errors.join("; "));
        }
        f
    }

    /// Read back what [`TorchInfo::to_facts`] wrote. None when the facts are
    /// not torch.import's.
    pub fn from_facts(f: &BTreeMap<String, String>) -> Option<TorchInfo> {
        let get = |k: &str| f.get(k).cloned();
        let torch_version = get("torch_version")?;
        let mut devices: Vec<TorchDevice> = f
            .iter()
            .filter_map(|(k, v)| {
                let index = k.strip_prefix("cuda_device_")?.parse().ok()?;
                let (name, cc) = v.rsplit_once(", compute capability ")?;
                let (ma, mi) = cc.split_once('.')?;
                Some(TorchDevice {
                    index,
                    name: name.to_string(),
                    capability: (ma.parse().ok()?, mi.parse().ok()?),
                })
            })
            .collect();
        devices.sort_by_key(|d| d.index);
        Some(TorchInfo {
            python: PathBuf::from(get("python")?),
            python_version: get("python_version"),
            torch_version,
            torch_path: get("torch_path"),
            cuda_build: get("torch_cuda").filter(|v| v != CPU_ONLY),
            cuda_available: get("cuda_available").as_deref() == Some("yes"),
            unavailable_reason: get("cuda_unavailable_reason"),
            device_count: get("cuda_device_count")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            devices,
            arch_list: get("arch_list")
                .map(|v| v.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
            cudnn_version: get("cudnn_version"),
            nccl_available: match get("nccl_available").as_deref() {
                Some("yes") => Some(true),
                Some("no") => Some(false),
                _ => None,
            },
            nccl_version: get("nccl_version"),
            import_time_s: None,
            loaded_libraries: get("cuda_libraries_loaded")
                .map(|v| v.split(", ").map(str::to_string).collect())
                .unwrap_or_default(),
            query_errors: get("torch_query_errors")
                .map(|v| v.split("; ").map(str::to_string).collect())
                .unwrap_or_default(),
        })
    }

    /// torch.import's result, read back for the checks that need it.
    pub fn from_outcome(o: &Outcome) -> Option<TorchInfo> {
        let mut info = TorchInfo::from_facts(&o.facts)?;
        info.import_time_s = o.metric("import_time_s");
        Some(info)
    }

    /// The CUDA version torch was built for.
    pub fn cuda_version(&self) -> Option<CudaVersion> {
        self.cuda_build.as_deref().and_then(CudaVersion::parse)
    }
}

// ---------------------------------------------------------------------------
// torch.import
// ---------------------------------------------------------------------------

/// How long the payload may take inside the check's own timeout: a little
/// less, so the payload is stopped before the runner gives up on the check
/// and the verdict can name the stage torch hung in.
fn payload_budget(timeout_s: f64) -> Duration {
    let margin = (timeout_s * 0.25).min(0.3);
    Duration::from_secs_f64((timeout_s - margin).max(0.1))
}

/// Seconds as the runner prints them ("2", "1.5").
fn secs_label(secs: f64) -> String {
    if secs.fract() == 0.0 {
        format!("{secs:.0}")
    } else {
        format!("{secs:.1}")
    }
}

/// Run the payload for a check, within that check's timeout. A timeout is
/// reported against the check's timeout, as the runner would report it.
fn run_for(ctx: &Context) -> (Option<PythonSource>, Result<TorchInfo, TorchProbeError>) {
    let (choice, result) = probe_torch(
        ctx.options.python.as_deref(),
        payload_budget(ctx.options.timeout_s),
    );
    let result = result.map_err(|e| match e {
        TorchProbeError::Timeout {
            python,
            stage,
            stderr_tail,
            ..
        } => TorchProbeError::Timeout {
            python,
            secs: ctx.options.timeout_s,
            stage,
            stderr_tail,
        },
        other => other,
    });
    (choice.map(|c| c.source), result)
}

const NO_TORCH_HINT: &str = "install PyTorch into the Python that will train (`pip install torch`, or a specific CUDA build: `pip install torch --index-url https://download.pytorch.org/whl/cu128`), or point gpucheck at that Python with --python PATH";

/// The verdict when the payload gave no TorchInfo. Shared by torch.import
/// and by the torch checks that run the payload themselves.
pub fn probe_failure(e: &TorchProbeError) -> Outcome {
    match e {
        TorchProbeError::NoPython(FindPythonError::NotFound) => Outcome::skip(format!(
            "{}; pass the Python that will train with --python PATH",
            FindPythonError::NotFound
        )),
        TorchProbeError::NoPython(err @ FindPythonError::ExplicitMissing { .. }) => Outcome::fail(
            format!("the Python named for training is missing: {err}"),
            "fix the path given with --python / GPUCHECK_PYTHON (e.g. `--python $VIRTUAL_ENV/bin/python`)",
        ),
        TorchProbeError::NotInstalled { python, detail } => Outcome::skip(format!(
            "torch is not installed for {} ({detail})",
            python.display()
        ))
        .with_hint(NO_TORCH_HINT)
        .with_fact("python", python.display().to_string()),
        TorchProbeError::ImportFailed { python, detail } => {
            let fix = if detail.contains("undefined symbol") {
                "a library on LD_LIBRARY_PATH shadows the one torch was built with (often libnccl, libcudnn or libcublas from a system CUDA): run with LD_LIBRARY_PATH unset to confirm, then remove that folder from it"
            } else if detail.contains("cannot open shared object file") {
                "a library torch needs is missing from the environment: reinstall torch so pip brings its nvidia-* dependencies (`pip install --force-reinstall torch`), or fix LD_LIBRARY_PATH"
            } else {
                "reinstall torch in this environment (`pip install --force-reinstall torch`) and run `python -c 'import torch'` to see the full error"
            };
            Outcome::fail(
                format!("`import torch` fails in {}: {detail}", python.display()),
                fix,
            )
            .with_fact("python", python.display().to_string())
        }
        TorchProbeError::Crashed {
            python,
            signal,
            stderr_tail,
        } => {
            let mut o = Outcome::fail(
                format!(
                    "importing torch crashed {} with signal {signal}",
                    python.display()
                ),
                "run `python -X faulthandler -c 'import torch; torch.cuda.is_available()'` to see where; a crash here usually means mismatched CUDA libraries on LD_LIBRARY_PATH or a broken driver install",
            );
            if !stderr_tail.is_empty() {
                o = o.with_fact("stderr_tail", stderr_tail.clone());
            }
            o
        }
        TorchProbeError::Timeout {
            python,
            secs,
            stage,
            stderr_tail,
        } => {
            let place = stage.as_deref().map(|s| format!(" in {s}")).unwrap_or_default();
            const SLOW_IMPORT: &str = "a slow `import torch` is usually a network file system (NFS/Lustre home or venv) or a cold page cache: time it with `python -X importtime -c 'import torch'`, or give it longer with --timeout SECS";
            const DRIVER_HANG: &str = "a hang inside torch's CUDA calls points at the driver: look for Xid errors (`sudo dmesg | grep -i xid`), check `nvidia-smi` and cuda.driver's verdict, reset the GPU or reboot";
            let hint = match stage.as_deref() {
                Some("import torch") => SLOW_IMPORT.to_string(),
                Some(s) if s.starts_with("torch.cuda") => DRIVER_HANG.to_string(),
                _ => format!("{DRIVER_HANG}; {SLOW_IMPORT}"),
            };
            let mut o = Outcome::fail(
                format!(
                    "timed out after {} s{place} ({})",
                    secs_label(*secs),
                    python.display()
                ),
                hint,
            );
            if !stderr_tail.is_empty() {
                o = o.with_fact("stderr_tail", stderr_tail.clone());
            }
            o
        }
        TorchProbeError::Spawn { python, detail } => Outcome::error(format!(
            "cannot run {}: {detail}",
            python.display()
        )),
        TorchProbeError::NoResult {
            python,
            code,
            stderr_tail,
        } => {
            let mut o = Outcome::error(format!(
                "the torch payload exited with status {} without a result ({})",
                code.unwrap_or(-1),
                python.display()
            ));
            if !stderr_tail.is_empty() {
                o = o.with_fact("stderr_tail", stderr_tail.clone());
            }
            o
        }
    }
}

/// Judge a successful payload run: torch imports, so this passes; the
/// summary says what it is and whether it sees CUDA, in torch's own words.
pub fn evaluate_import(info: &TorchInfo, source: Option<PythonSource>) -> Outcome {
    let build = match &info.cuda_build {
        Some(c) => format!("CUDA {c} build"),
        None => "CPU-only build".to_string(),
    };
    let from = source
        .map(|s| format!(" (from {})", s.describe()))
        .unwrap_or_default();
    let cuda = if info.cuda_available {
        format!(
            "CUDA available with {} device{}",
            info.device_count,
            if info.device_count == 1 { "" } else { "s" }
        )
    } else {
        match &info.unavailable_reason {
            Some(r) => format!("torch.cuda.is_available() is False: {}", first_sentence(r)),
            None => "torch.cuda.is_available() is False".to_string(),
        }
    };
    let archs = if info.arch_list.is_empty() {
        String::new()
    } else {
        format!("; archs {}", info.arch_list.join(" "))
    };
    let mut o = Outcome::pass(format!(
        "torch {} ({build}) in {}{from}{archs}; {cuda}",
        info.torch_version,
        info.python.display()
    ));
    o.facts = info.to_facts();
    if let Some(t) = info.import_time_s {
        o = o.with_metric("import_time_s", t, "s");
    }
    o
}

/// `torch.import`: the training Python imports torch; what it is.
pub struct TorchImport;

impl Check for TorchImport {
    fn id(&self) -> &'static str {
        "torch.import"
    }
    fn title(&self) -> &'static str {
        "PyTorch imports"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        // A cold `import torch` on a network file system takes tens of seconds.
        Duration::from_secs(60)
    }
    fn explain(&self) -> &'static str {
        "Imports PyTorch with the Python that will train and records what it is: version, the CUDA version it was built for, whether it sees CUDA (and why not), its GPU architectures, cuDNN and NCCL versions, import time, and the CUDA libraries it actually loaded.\n\n\
The Python is the one a job would use: --python PATH (or GPUCHECK_PYTHON), else the active virtual environment ($VIRTUAL_ENV), else the active conda environment ($CONDA_PREFIX), else python3 on PATH. The introspection runs in that Python as a separate process under a timeout; each query is guarded, so a CPU-only machine or a broken driver still gives an answer.\n\n\
Why it matters for DDP: every rank imports torch first. A torch that fails to import (a missing libcudnn, a library on LD_LIBRARY_PATH that shadows torch's own), that is a CPU-only build, or that is built for a newer CUDA than the driver supports, ends the job before the first step. torch.cuda, torch.arch and torch.nccl judge what this check found.\n\n\
How to fix: no Python or no torch is a skip (install torch, or name the Python with --python). An import failure names the error: reinstall torch (`pip install --force-reinstall torch`) or remove the shadowing folder from LD_LIBRARY_PATH."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let (source, result) = run_for(ctx);
        match result {
            Ok(info) => evaluate_import(&info, source),
            Err(e) => probe_failure(&e),
        }
    }
}

/// torch.import's result for a dependent check, or the payload run here
/// when torch.import was not selected. Err is the dependent's verdict.
fn torch_info(ctx: &Context) -> Result<TorchInfo, Box<Outcome>> {
    if let Some(o) = ctx.earlier("torch.import") {
        return TorchInfo::from_outcome(o).ok_or_else(|| {
            Box::new(Outcome::error(
                "torch.import ran but its facts could not be read back",
            ))
        });
    }
    run_for(ctx).1.map_err(|e| Box::new(probe_failure(&e)))
}

/// Timeout of the dependent torch checks: instant with torch.import's
/// facts, a payload run (an `import torch`) without them.
const DEPENDENT_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// torch.cuda
// ---------------------------------------------------------------------------

/// What NVML says about the GPUs, for the torch checks.
#[derive(Debug, Clone, PartialEq)]
pub enum NvmlView {
    Gpus(Vec<nvml::GpuInfo>),
    /// NVML could not be used: why, and whether that means there is no
    /// NVIDIA driver here (library missing, driver not loaded) rather than
    /// a driver that does not answer.
    Unavailable {
        why: String,
        no_driver: bool,
    },
}

impl NvmlView {
    pub fn probe(ctx: &Context) -> NvmlView {
        match crate::cuda::nvml_gpus(ctx) {
            Ok(g) => NvmlView::Gpus(g),
            Err(e) => {
                let (why, no_driver) = match e {
                    nvml::NvmlFailure::LibraryNotFound { .. } => {
                        ("NVML (libnvidia-ml.so.1) not found".to_string(), true)
                    }
                    nvml::NvmlFailure::DriverNotLoaded => {
                        ("the NVIDIA driver is not loaded".to_string(), true)
                    }
                    nvml::NvmlFailure::LibRmVersionMismatch => (
                        "NVML and the kernel driver versions differ".to_string(),
                        false,
                    ),
                    nvml::NvmlFailure::NoPermission => {
                        ("no permission to use NVML".to_string(), false)
                    }
                    nvml::NvmlFailure::Other { detail } => (detail, false),
                };
                NvmlView::Unavailable { why, no_driver }
            }
        }
    }

    fn gpu_count(&self) -> u32 {
        match self {
            NvmlView::Gpus(g) => g.len() as u32,
            NvmlView::Unavailable { .. } => 0,
        }
    }
}

/// Everything `torch.cuda` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct TorchCudaFacts {
    pub torch: TorchInfo,
    pub nvml: NvmlView,
    /// cuda.driver's device count, when it ran and worked.
    pub cuda_driver_devices: Option<u32>,
    /// The CUDA version the driver supports (cuda.driver or NVML).
    pub driver_cuda: Option<CudaVersion>,
    /// The driver's version ("570.86.15"), when known.
    pub driver_version: Option<String>,
    /// cuda.driver's summary and hint when it ran and failed (or crashed):
    /// the CUDA driver's own error, the likeliest reason torch sees no GPU.
    pub cuda_driver_failure: Option<(String, Option<String>)>,
    pub cuda_visible_devices: Option<String>,
}

/// Whether CUDA_VISIBLE_DEVICES hides every GPU (empty, "-1", an invalid
/// first entry, or a GPU named twice), as the CUDA driver reads it.
pub fn cvd_hides_everything(v: &str) -> bool {
    crate::domain::visible_devices::parse_cuda_visible_devices(v)
        .effective()
        .is_empty()
}

/// The first sentence of torch's message ("RuntimeError: Found no NVIDIA
/// driver on your system."), for one-line summaries.
pub fn first_sentence(s: &str) -> &str {
    match s.find(". ") {
        Some(i) => &s[..=i],
        None => s,
    }
}

fn driver_need(cuda: CudaVersion) -> String {
    minor_version_floor(cuda.major)
        .map(|f| format!("an NVIDIA driver >= {f}"))
        .unwrap_or_else(|| format!("a driver supporting CUDA {cuda}"))
}

/// Judge torch's view of CUDA.
pub fn evaluate_cuda(f: &TorchCudaFacts) -> Outcome {
    let t = &f.torch;
    let nvml_gpus = f.nvml.gpu_count();
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    let wheel_hint = |driver: Option<CudaVersion>| {
        let w = driver
            .and_then(wheel_for_driver)
            .unwrap_or(&WHEELS[WHEELS.len() - 1]);
        format!(
            "install a CUDA build of torch: {} (CUDA {}, torch {})",
            replace_torch_command(w.index),
            w.cuda,
            w.torch
        )
    };

    // A CPU-only build never sees a GPU.
    let Some(torch_cuda) = t.cuda_version() else {
        if nvml_gpus > 0 {
            return Outcome::fail(
                format!(
                    "torch {} is a CPU-only build (torch.version.cuda is None), but NVML sees {nvml_gpus} GPU{}",
                    t.torch_version,
                    plural(nvml_gpus)
                ),
                wheel_hint(f.driver_cuda),
            );
        }
        return Outcome::skip(format!(
            "not applicable: torch {} is a CPU-only build and there is no NVIDIA GPU here",
            t.torch_version
        ));
    };

    if t.cuda_available {
        let expected = f
            .cuda_driver_devices
            .map(|n| (n, format!("the CUDA driver sees {n} (cuda.driver)")))
            .or_else(|| match &f.nvml {
                NvmlView::Gpus(g) => {
                    match predict_devices(Some(g), f.cuda_visible_devices.as_deref(), None) {
                        Expectation::Exactly { count, from } => Some((count, from)),
                        _ => None,
                    }
                }
                NvmlView::Unavailable { .. } => None,
            });
        let mut names: Vec<String> = t.devices.iter().map(|d| d.name.clone()).collect();
        names.dedup();
        let mut o = Outcome::pass(format!(
            "CUDA {torch_cuda} available in torch with {} device{}{}",
            t.device_count,
            plural(t.device_count),
            if names.is_empty() {
                String::new()
            } else {
                format!(" ({})", names.join(", "))
            }
        ))
        .with_metric("torch_device_count", t.device_count as f64, "count");
        if let Some((n, from)) = expected {
            if n != t.device_count {
                o.status = Status::Fail;
                o.summary = format!(
                    "torch sees {} device{} but {from}",
                    t.device_count,
                    plural(t.device_count)
                );
                o = o.with_hint(
                    "torch and gpucheck should see the same GPUs: compare CUDA_VISIBLE_DEVICES in the job's environment, and the libcuda torch loaded (cuda_libraries_loaded in torch.import's facts) with the driver's",
                );
            }
        }
        return o;
    }

    // Not available.
    let reason = t
        .unavailable_reason
        .as_deref()
        .map(|r| format!(" ({})", first_sentence(r)))
        .unwrap_or_default();
    if nvml_gpus > 0 || f.cuda_driver_devices.unwrap_or(0) > 0 {
        let seen = if nvml_gpus > 0 {
            format!("NVML sees {nvml_gpus} GPU{}", plural(nvml_gpus))
        } else {
            "the CUDA driver sees devices".to_string()
        };
        if let Some(driver) = f.driver_cuda {
            let have = f.driver_version.as_deref().and_then(DriverVersion::parse);
            if let RuntimeCompat::Incompatible { need } =
                runtime_compat(torch_cuda, driver, have.as_ref())
            {
                return Outcome::fail(
                    format!(
                        "torch.cuda.is_available() is False although {seen}: torch is built for CUDA {torch_cuda} and the driver{} supports only CUDA {driver}{reason}",
                        f.driver_version.as_deref().map(|v| format!(" ({v})")).unwrap_or_default()
                    ),
                    incompatible_fix(torch_cuda, driver, &need),
                );
            }
        }
        if let Some(v) = f
            .cuda_visible_devices
            .as_deref()
            .filter(|v| cvd_hides_everything(v))
        {
            return Outcome::fail(
                format!(
                    "torch.cuda.is_available() is False although {seen}: CUDA_VISIBLE_DEVICES={} hides every GPU",
                    crate::domain::text::quote_value(v)
                ),
                "unset CUDA_VISIBLE_DEVICES, or set it to the GPUs this job should use (e.g. CUDA_VISIBLE_DEVICES=0,1,2,3); see env.cuda_visible_devices",
            );
        }
        if let Some((summary, hint)) = &f.cuda_driver_failure {
            return Outcome::fail(
                format!(
                    "torch.cuda.is_available() is False although {seen}: the CUDA driver fails (cuda.driver: {summary}){reason}"
                ),
                hint.clone().unwrap_or_else(|| {
                    "see cuda.driver's verdict for the fix; `python -c 'import torch; torch.cuda.init()'` shows torch's error".to_string()
                }),
            );
        }
        return Outcome::fail(
            format!("torch.cuda.is_available() is False although {seen}{reason}"),
            "see cuda.driver's verdict for the driver's own error; `python -c 'import torch; torch.cuda.init()'` shows torch's; check CUDA_VISIBLE_DEVICES and that the job's container has GPU access",
        );
    }
    match &f.nvml {
        NvmlView::Unavailable {
            why,
            no_driver: false,
        } => Outcome::skip(format!(
            "cannot judge: torch sees no GPU{reason} and NVML cannot say whether there are any ({why}); see gpu.driver"
        )),
        _ => Outcome::skip(format!(
            "not applicable: no NVIDIA driver/GPU on this machine{}; torch {} is a CUDA {torch_cuda} build and would need {}{reason}",
            match &f.nvml {
                NvmlView::Unavailable { why, .. } => format!(" ({why})"),
                NvmlView::Gpus(_) => String::new(),
            },
            t.torch_version,
            driver_need(torch_cuda)
        )),
    }
}

/// What cuda.driver found, for torch.cuda: its device count when it
/// worked, its summary and hint when it failed.
fn cuda_driver_verdict(ctx: &Context) -> (Option<u32>, Option<(String, Option<String>)>) {
    match ctx.earlier("cuda.driver") {
        Some(o) if o.status.satisfies_needs() => (
            o.facts.get("device_count").and_then(|v| v.parse().ok()),
            None,
        ),
        Some(o) if matches!(o.status, Status::Fail | Status::Error) => {
            (None, Some((o.summary.clone(), o.hint.clone())))
        }
        _ => (None, None),
    }
}

/// `torch.cuda`: torch sees the GPUs NVML and the driver see.
pub struct TorchCuda;

impl Check for TorchCuda {
    fn id(&self) -> &'static str {
        "torch.cuda"
    }
    fn title(&self) -> &'static str {
        "PyTorch sees the GPUs"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn needs(&self) -> &'static [&'static str] {
        &["torch.import"]
    }
    fn timeout(&self) -> Duration {
        DEPENDENT_TIMEOUT
    }
    fn explain(&self) -> &'static str {
        "Checks that torch.cuda.is_available() is True when the machine has NVIDIA GPUs, and that torch counts as many devices as the CUDA driver.\n\n\
Why it matters for DDP: \"torch says CUDA isn't available\" is the most common way a GPU job dies on a new machine or image, and each rank needs its own GPU. When torch sees no GPU although NVML does, this check names the likely cause from what the other checks found: a CPU-only wheel (torch.version.cuda is None), a driver too old for the CUDA version the wheel was built for, CUDA_VISIBLE_DEVICES hiding every GPU, or the CUDA driver itself failing (cuda.driver's error, e.g. the Fabric Manager not running).\n\n\
How to fix: for a CPU-only wheel, replace it with a CUDA build (`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu128`, choosing the CUDA version your driver supports; without the uninstall pip keeps the installed torch); for a driver that is too old, install a newer driver or a torch built for an older CUDA (the hint names both); for CUDA_VISIBLE_DEVICES, unset it or list the GPUs the job should use; for a failing CUDA driver, cuda.driver's fix. On a machine with no NVIDIA driver or GPU at all this check is a skip that says what the build would need."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let torch = match torch_info(ctx) {
            Ok(t) => t,
            Err(o) => return *o,
        };
        let (cuda_driver_devices, cuda_driver_failure) = cuda_driver_verdict(ctx);
        let (known, driver_version) = crate::cuda::known_driver(ctx);
        let driver_cuda = known.map(|(cuda, _)| cuda);
        evaluate_cuda(&TorchCudaFacts {
            torch,
            nvml: NvmlView::probe(ctx),
            cuda_driver_devices,
            driver_cuda,
            driver_version,
            cuda_driver_failure,
            cuda_visible_devices: crate::probe::host::env_lossy("CUDA_VISIBLE_DEVICES"),
        })
    }
}

// ---------------------------------------------------------------------------
// torch.arch
// ---------------------------------------------------------------------------

/// A GPU to check against torch's architectures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchTarget {
    pub index: u32,
    pub name: String,
    pub capability: (u32, u32),
}

/// Judge every GPU against the build's architecture list. `targets_from`
/// says where the GPUs came from ("torch", "NVML").
pub fn evaluate_arch(t: &TorchInfo, targets: &[ArchTarget], targets_from: &str) -> Outcome {
    if t.cuda_build.is_none() {
        return Outcome::skip(format!(
            "not applicable: torch {} is a CPU-only build with no GPU code",
            t.torch_version
        ));
    }
    if t.arch_list.is_empty() {
        return Outcome::skip(format!(
            "torch {} did not report its GPU architectures (torch.cuda.get_arch_list() is empty)",
            t.torch_version
        ));
    }
    let archs = t.arch_list.join(" ");
    if targets.is_empty() {
        return Outcome::skip(format!(
            "no GPU visible to check against; torch {} carries code for {archs}",
            t.torch_version
        ))
        .with_fact("arch_list", archs);
    }
    let mut out = Outcome::pass("").with_fact("arch_list", archs.clone());
    let mut worst = Status::Pass;
    let mut bad: Vec<String> = Vec::new();
    let mut hints: Vec<String> = Vec::new();
    for g in targets {
        let (ma, mi) = g.capability;
        let (status, summary) = match arch_support(g.capability, &t.arch_list) {
            ArchSupport::Native { arch, exact: true } => {
                (Status::Pass, format!("compute {ma}.{mi}: {arch}"))
            }
            ArchSupport::Native { arch, exact: false } => (
                Status::Pass,
                format!(
                    "compute {ma}.{mi}: runs {arch} machine code (no sm_{ma}{mi}-specific build)"
                ),
            ),
            ArchSupport::Jit { arch } => {
                bad.push(format!(
                    "GPU {} {} (compute {ma}.{mi}) runs only through {arch} PTX",
                    g.index, g.name
                ));
                hints.push(format!(
                    "PTX is JIT-compiled at first use (slow start-up, cached in ~/.nv/ComputeCache) and may not reach machine-code speed; {}",
                    build_for(g.capability)
                ));
                (Status::Warn, format!("compute {ma}.{mi}: JIT from {arch}"))
            }
            ArchSupport::None => {
                bad.push(format!(
                    "GPU {} {} (compute {ma}.{mi}) cannot run this torch: it has code only for {archs} (\"no kernel image is available for execution on the device\")",
                    g.index, g.name
                ));
                hints.push(build_for(g.capability));
                (
                    Status::Fail,
                    format!("compute {ma}.{mi}: no sm_{ma}x code and no usable PTX"),
                )
            }
        };
        worst = worst.worst(status);
        out = out.with_device(DeviceResult {
            index: g.index,
            label: None,
            name: g.name.clone(),
            uuid: None,
            status,
            summary,
            metrics: Vec::new(),
        });
    }
    hints.dedup();
    if worst == Status::Pass {
        let mut caps: Vec<String> = targets
            .iter()
            .map(|g| format!("{}.{}", g.capability.0, g.capability.1))
            .collect();
        caps.dedup();
        out.summary = format!(
            "torch {} has machine code for every GPU ({} from {targets_from}: compute {})",
            t.torch_version,
            targets.len(),
            caps.join(", ")
        );
        return out;
    }
    out.status = worst;
    out.summary = bad.join("; ");
    out.with_hint(hints.join("; "))
}

/// `torch.arch`: the wheel has code for every GPU's compute capability.
pub struct TorchArch;

impl Check for TorchArch {
    fn id(&self) -> &'static str {
        "torch.arch"
    }
    fn title(&self) -> &'static str {
        "PyTorch GPU architectures"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn needs(&self) -> &'static [&'static str] {
        &["torch.import"]
    }
    fn timeout(&self) -> Duration {
        DEPENDENT_TIMEOUT
    }
    fn explain(&self) -> &'static str {
        "Checks that the installed PyTorch carries GPU code for the compute capability of every GPU, from torch.cuda.get_arch_list().\n\n\
A GPU runs machine code (sm_XY) built for its own major version with an equal or lower minor (sm_86 runs on an 8.9 L40S), or PTX (compute_XY) JIT-compiled for any capability at or above XY. Otherwise every kernel fails with \"no kernel image is available for execution on the device\". Official wheels drop old GPUs and add new ones per CUDA version: an RTX 5090 (compute 12.0) needs a cu128 or newer wheel; a V100 (7.0) is not in the CUDA 13 wheels, nor in cu128 from torch 2.11 on (cu126 still carries it).\n\n\
Why it matters for DDP: the job imports and even reports CUDA available, then dies at the first kernel on every rank. PTX-only support works but JIT-compiles at start-up, which is slow and may not reach machine-code speed (warn).\n\n\
How to fix: install a wheel whose architecture list covers the GPU; the hint names the builds that do (from the wheel table in facts.md) and the pip command. GPUs come from torch itself when it sees them, else from NVML."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let torch = match torch_info(ctx) {
            Ok(t) => t,
            Err(o) => return *o,
        };
        let (targets, from) = if !torch.devices.is_empty() {
            (
                torch
                    .devices
                    .iter()
                    .map(|d| ArchTarget {
                        index: d.index,
                        name: d.name.clone(),
                        capability: d.capability,
                    })
                    .collect(),
                "torch",
            )
        } else {
            match NvmlView::probe(ctx) {
                NvmlView::Gpus(g) => (
                    g.iter()
                        .filter_map(|g| {
                            g.compute_capability.map(|cc| ArchTarget {
                                index: g.index,
                                name: g.name.clone(),
                                capability: cc,
                            })
                        })
                        .collect(),
                    "NVML",
                ),
                NvmlView::Unavailable { .. } => (Vec::new(), "NVML"),
            }
        };
        evaluate_arch(&torch, &targets, from)
    }
}

// ---------------------------------------------------------------------------
// torch.nccl
// ---------------------------------------------------------------------------

/// Judge torch's NCCL. Exposes the version as facts["nccl_version"]
/// ("2.27.7"), the key the nccl checks compare with.
pub fn evaluate_nccl(t: &TorchInfo) -> Outcome {
    if t.cuda_build.is_none() {
        return Outcome::skip(format!(
            "not applicable: torch {} is a CPU-only build, without NCCL (see torch.cuda)",
            t.torch_version
        ));
    }
    match (t.nccl_available, &t.nccl_version) {
        (Some(false), _) => Outcome::fail(
            format!(
                "torch {} was built without NCCL: DDP with backend=\"nccl\" cannot start",
                t.torch_version
            ),
            format!(
                "install an official Linux CUDA wheel of torch, which bundles NCCL ({}); gloo works on GPUs but is far slower",
                replace_torch_command("cu128")
            ),
        ),
        (_, Some(v)) => Outcome::pass(format!("NCCL {v} available in torch {}", t.torch_version))
            .with_fact("nccl_version", v.clone()),
        (None, None) => {
            let why = t
                .query_errors
                .iter()
                .find(|e| e.starts_with("nccl_available:"))
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            Outcome::warn(
                format!(
                    "could not tell whether torch {} has NCCL: torch.distributed.is_nccl_available() did not answer{why}",
                    t.torch_version
                ),
                "run `python -c 'import torch.distributed as d; print(d.is_available(), d.is_nccl_available())'` to see the error; a torch.distributed that fails to import cannot run DDP",
            )
        }
        (Some(true), None) => Outcome::warn(
            format!("torch {} reports NCCL but not its version", t.torch_version),
            "run `python -c 'import torch; print(torch.cuda.nccl.version())'` to see why; the NCCL library torch loads may be damaged",
        ),
    }
}

/// `torch.nccl`: NCCL is available in torch, and which version.
pub struct TorchNccl;

impl Check for TorchNccl {
    fn id(&self) -> &'static str {
        "torch.nccl"
    }
    fn title(&self) -> &'static str {
        "PyTorch NCCL"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn needs(&self) -> &'static [&'static str] {
        &["torch.import"]
    }
    fn timeout(&self) -> Duration {
        DEPENDENT_TIMEOUT
    }
    fn explain(&self) -> &'static str {
        "Checks that torch.distributed has the NCCL backend and reports the NCCL version torch uses.\n\n\
Why it matters for DDP: multi-GPU DDP runs on NCCL (init_process_group(\"nccl\")); a torch without it cannot start the job, and the NCCL version torch loads (usually its own, from the nvidia-nccl wheel) is the one that runs the all-reduce — the nccl checks compare it with the library gpucheck finds (fact nccl_version).\n\n\
How to fix: replace torch with an official Linux CUDA build, which bundles NCCL (`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu128`). A CPU-only build is a skip (see torch.cuda)."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        match torch_info(ctx) {
            Ok(t) => evaluate_nccl(&t),
            Err(o) => *o,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn wheel(index: &str) -> Vec<String> {
        archs(WHEELS.iter().find(|w| w.index == index).unwrap().archs)
    }

    fn cu132_cpu_box() -> TorchInfo {
        TorchInfo {
            python: PathBuf::from("/venv/bin/python"),
            python_version: Some("3.11.9".to_string()),
            torch_version: "2.15.0+cu132".to_string(),
            torch_path: Some("/venv/lib/python3.11/site-packages/torch".to_string()),
            cuda_build: Some("13.2".to_string()),
            cuda_available: false,
            unavailable_reason: Some(
                "RuntimeError: Found no NVIDIA driver on your system.".to_string(),
            ),
            device_count: 0,
            devices: vec![],
            arch_list: wheel("cu132"),
            cudnn_version: Some("9.26.0".to_string()),
            nccl_available: Some(true),
            nccl_version: Some("2.30.7".to_string()),
            import_time_s: Some(3.1),
            loaded_libraries: vec!["/venv/nvidia/cu13/lib/libcudart.so.13".to_string()],
            query_errors: vec![],
        }
    }

    fn gpu(i: u32, name: &str, cc: (u32, u32)) -> nvml::GpuInfo {
        nvml::GpuInfo {
            index: i,
            name: name.to_string(),
            uuid: format!("GPU-{i}"),
            pci_bus_id: String::new(),
            memory_total_mib: 81920,
            compute_capability: Some(cc),
            mig_enabled: Some(false),
            mig_uuids: vec![],
        }
    }

    fn target(i: u32, name: &str, cc: (u32, u32)) -> ArchTarget {
        ArchTarget {
            index: i,
            name: name.to_string(),
            capability: cc,
        }
    }

    // ---- arch matching, real cases ----

    #[test]
    fn arch_entries_parse() {
        assert_eq!(
            Arch::parse("sm_90a"),
            Some(Arch {
                ptx: false,
                major: 9,
                minor: 0,
                suffix: Some('a')
            })
        );
        assert_eq!(
            Arch::parse("compute_120"),
            Some(Arch {
                ptx: true,
                major: 12,
                minor: 0,
                suffix: None
            })
        );
        assert_eq!(
            Arch::parse("sm_37").map(|a| (a.major, a.minor)),
            Some((3, 7))
        );
        assert_eq!(Arch::parse("sm_100f").map(|a| a.suffix), Some(Some('f')));
        assert_eq!(Arch::parse("gfx90a"), None);
        assert_eq!(Arch::parse("sm_x"), None);
    }

    #[test]
    fn rtx_5090_with_cu126_wheel_has_no_kernel_image() {
        let t = TorchInfo {
            arch_list: wheel("cu126"),
            torch_version: "2.6.0+cu126".into(),
            ..cu132_cpu_box()
        };
        assert_eq!(arch_support((12, 0), &t.arch_list), ArchSupport::None);
        let o = evaluate_arch(&t, &[target(0, "NVIDIA GeForce RTX 5090", (12, 0))], "NVML");
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("GPU 0 NVIDIA GeForce RTX 5090 (compute 12.0) cannot run this torch"),
            "{}",
            o.summary
        );
        assert!(
            o.summary
                .contains("sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("cu128, cu130, cu132"), "{hint}");
        assert!(hint.contains("whl/cu132"), "{hint}");
    }

    #[test]
    fn v100_with_cu130_wheel_is_dropped() {
        let t = TorchInfo {
            arch_list: wheel("cu130"),
            torch_version: "2.9.0+cu130".into(),
            ..cu132_cpu_box()
        };
        // compute_120 PTX cannot go down to 7.0.
        assert_eq!(arch_support((7, 0), &t.arch_list), ArchSupport::None);
        let o = evaluate_arch(&t, &[target(0, "Tesla V100-SXM2-32GB", (7, 0))], "NVML");
        assert_eq!(o.status, Status::Fail);
        let hint = o.hint.unwrap();
        // cu128's newest torch (2.11, what `--index-url .../cu128` installs)
        // has no sm_70 either: the working command is cu126's.
        assert!(
            hint.contains("compute 7.0: cu118, cu121, cu124, cu126;"),
            "{hint}"
        );
        assert!(
            hint.contains("builds newer than cu126 dropped it"),
            "{hint}"
        );
        assert!(
            hint.contains("`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu126` (torch 2.6 and newer)"),
            "{hint}"
        );
        assert!(!hint.contains("whl/cu128"), "{hint}");
    }

    #[test]
    fn l40s_with_cu121_runs_sm86_code() {
        let t = TorchInfo {
            arch_list: wheel("cu121"),
            ..cu132_cpu_box()
        };
        assert_eq!(
            arch_support((8, 9), &t.arch_list),
            ArchSupport::Native {
                arch: "sm_86".to_string(),
                exact: false
            }
        );
        let o = evaluate_arch(&t, &[target(0, "NVIDIA L40S", (8, 9))], "NVML");
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(o.devices[0].summary.contains("runs sm_86 machine code"));
    }

    #[test]
    fn h100_with_cu124_and_a100_with_cu118_run_natively() {
        assert_eq!(
            arch_support((9, 0), &wheel("cu124")),
            ArchSupport::Native {
                arch: "sm_90".to_string(),
                exact: true
            }
        );
        assert_eq!(
            arch_support((8, 0), &wheel("cu118")),
            ArchSupport::Native {
                arch: "sm_80".to_string(),
                exact: true
            }
        );
        // B300 (10.3) runs sm_100 code.
        assert!(matches!(
            arch_support((10, 3), &wheel("cu132")),
            ArchSupport::Native { .. }
        ));
    }

    #[test]
    fn ptx_only_warns_about_jit() {
        let t = TorchInfo {
            arch_list: archs(&["sm_80", "compute_80"]),
            ..cu132_cpu_box()
        };
        assert_eq!(
            arch_support((9, 0), &t.arch_list),
            ArchSupport::Jit {
                arch: "compute_80".to_string()
            }
        );
        let o = evaluate_arch(&t, &[target(3, "NVIDIA H100 80GB HBM3", (9, 0))], "torch");
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains(
            "GPU 3 NVIDIA H100 80GB HBM3 (compute 9.0) runs only through compute_80 PTX"
        ));
        assert!(o.hint.unwrap().contains("JIT-compiled"));
    }

    #[test]
    fn arch_specific_code_runs_only_on_its_capability() {
        assert_eq!(
            arch_support((10, 0), &archs(&["sm_90a"])),
            ArchSupport::None
        );
        assert!(matches!(
            arch_support((9, 0), &archs(&["sm_90a"])),
            ArchSupport::Native { exact: true, .. }
        ));
    }

    #[test]
    fn no_gpu_skips_but_lists_the_archs() {
        let o = evaluate_arch(&cu132_cpu_box(), &[], "NVML");
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.contains("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn cpu_build_skips_arch() {
        let t = TorchInfo {
            cuda_build: None,
            arch_list: vec![],
            ..cu132_cpu_box()
        };
        assert_eq!(
            evaluate_arch(&t, &[target(0, "x", (9, 0))], "NVML").status,
            Status::Skip
        );
    }

    #[test]
    fn kepler_has_no_current_wheel() {
        assert!(build_for((3, 5)).contains("build PyTorch from source"));
        assert!(build_for((3, 7)).contains("cu118"));
    }

    #[test]
    fn wheel_for_driver_prefers_native_then_minor_compat() {
        assert_eq!(
            wheel_for_driver(CudaVersion::new(12, 8)).unwrap().index,
            "cu128"
        );
        assert_eq!(
            wheel_for_driver(CudaVersion::new(12, 2)).unwrap().index,
            "cu121"
        );
        assert_eq!(
            wheel_for_driver(CudaVersion::new(13, 0)).unwrap().index,
            "cu130"
        );
        assert_eq!(
            wheel_for_driver(CudaVersion::new(13, 9)).unwrap().index,
            "cu132"
        );
        assert_eq!(
            wheel_for_driver(CudaVersion::new(11, 4)).unwrap().index,
            "cu118"
        );
        assert_eq!(wheel_for_driver(CudaVersion::new(10, 2)), None);
    }

    // ---- facts round trip ----

    #[test]
    fn facts_round_trip() {
        let mut t = cu132_cpu_box();
        t.cuda_available = true;
        t.unavailable_reason = None;
        t.device_count = 2;
        t.devices = vec![
            TorchDevice {
                index: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                capability: (9, 0),
            },
            TorchDevice {
                index: 1,
                name: "NVIDIA H100 80GB HBM3".into(),
                capability: (9, 0),
            },
        ];
        t.query_errors = vec!["cudnn_version: RuntimeError: x".into()];
        let o = evaluate_import(&t, Some(PythonSource::VirtualEnv));
        assert_eq!(o.status, Status::Pass);
        let back = TorchInfo::from_outcome(&o).unwrap();
        assert_eq!(back, t);
        // A CPU-only build reads back as None.
        let cpu = TorchInfo {
            cuda_build: None,
            arch_list: vec![],
            ..cu132_cpu_box()
        };
        let back = TorchInfo::from_facts(&cpu.to_facts()).unwrap();
        assert_eq!(back.cuda_build, None);
        assert_eq!(back.arch_list, Vec::<String>::new());
        assert_eq!(TorchInfo::from_facts(&BTreeMap::new()), None);
    }

    // ---- torch.import ----

    #[test]
    fn import_pass_explains_no_driver() {
        let o = evaluate_import(&cu132_cpu_box(), Some(PythonSource::Explicit));
        assert_eq!(o.status, Status::Pass);
        assert!(o.summary.starts_with("torch 2.15.0+cu132 (CUDA 13.2 build) in /venv/bin/python (from --python / GPUCHECK_PYTHON)"), "{}", o.summary);
        assert!(
            o.summary.contains(
                "torch.cuda.is_available() is False: RuntimeError: Found no NVIDIA driver"
            ),
            "{}",
            o.summary
        );
        assert_eq!(o.metric("import_time_s"), Some(3.1));
        assert_eq!(o.facts["nccl_version"], "2.30.7");
    }

    #[test]
    fn import_failures_map_to_skip_or_fail() {
        let o = probe_failure(&TorchProbeError::NoPython(FindPythonError::NotFound));
        assert_eq!(o.status, Status::Skip);
        assert!(o.summary.contains("--python PATH"));
        let o = probe_failure(&TorchProbeError::NoPython(
            FindPythonError::ExplicitMissing {
                path: "/nope/python".into(),
                from: "--python / GPUCHECK_PYTHON",
            },
        ));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("/nope/python"));
        let o = probe_failure(&TorchProbeError::NotInstalled {
            python: "/usr/bin/python3".into(),
            detail: "ModuleNotFoundError: No module named 'torch'".into(),
        });
        assert_eq!(o.status, Status::Skip);
        assert!(o
            .summary
            .contains("torch is not installed for /usr/bin/python3"));
        assert!(o.hint.unwrap().contains("pip install torch"));
        let o = probe_failure(&TorchProbeError::ImportFailed {
            python: "/p".into(),
            detail: "ImportError: /x/libtorch_cuda.so: undefined symbol: ncclCommSplit".into(),
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.hint.unwrap().contains("LD_LIBRARY_PATH"));
        let o = probe_failure(&TorchProbeError::ImportFailed {
            python: "/p".into(),
            detail:
                "OSError: libcudnn.so.9: cannot open shared object file: No such file or directory"
                    .into(),
        });
        assert!(o.hint.unwrap().contains("--force-reinstall"));
        let o = probe_failure(&TorchProbeError::Timeout {
            python: "/p".into(),
            secs: 58.0,
            stage: Some("torch.cuda.is_available".into()),
            stderr_tail: String::new(),
        });
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .starts_with("timed out after 58 s in torch.cuda.is_available"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("Xid"), "{hint}");
        assert!(!hint.contains("importtime"), "{hint}");
        // Stuck in the import itself: a file-system matter, not the driver.
        let o = probe_failure(&TorchProbeError::Timeout {
            python: "/p".into(),
            secs: 60.0,
            stage: Some("import torch".into()),
            stderr_tail: String::new(),
        });
        assert!(
            o.summary
                .starts_with("timed out after 60 s in import torch"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("python -X importtime"), "{hint}");
        assert!(!hint.contains("Xid"), "{hint}");
        let o = probe_failure(&TorchProbeError::Crashed {
            python: "/p".into(),
            signal: 11,
            stderr_tail: "Segmentation fault".into(),
        });
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.facts["stderr_tail"], "Segmentation fault");
    }

    // ---- torch.cuda ----

    fn cuda_facts(torch: TorchInfo, nvml: NvmlView) -> TorchCudaFacts {
        TorchCudaFacts {
            torch,
            nvml,
            cuda_driver_devices: None,
            driver_cuda: None,
            driver_version: None,
            cuda_driver_failure: None,
            cuda_visible_devices: None,
        }
    }

    #[test]
    fn no_driver_is_a_skip_that_says_what_the_build_needs() {
        let o = evaluate_cuda(&cuda_facts(
            cu132_cpu_box(),
            NvmlView::Unavailable {
                why: "NVML (libnvidia-ml.so.1) not found".into(),
                no_driver: true,
            },
        ));
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.contains("no NVIDIA driver/GPU on this machine"),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("torch 2.15.0+cu132 is a CUDA 13.2 build and would need an NVIDIA driver >= 580.65.06"), "{}", o.summary);
    }

    #[test]
    fn a_hung_nvml_is_not_mistaken_for_no_driver() {
        let o = evaluate_cuda(&cuda_facts(
            cu132_cpu_box(),
            NvmlView::Unavailable {
                why: "NVML did not answer in gpu.driver".into(),
                no_driver: false,
            },
        ));
        assert_eq!(o.status, Status::Skip);
        assert!(
            o.summary.starts_with("cannot judge: torch sees no GPU"),
            "{}",
            o.summary
        );
        assert!(
            o.summary.contains("NVML did not answer in gpu.driver"),
            "{}",
            o.summary
        );
        assert!(!o.summary.contains("no NVIDIA driver/GPU"), "{}", o.summary);
    }

    #[test]
    fn cpu_only_wheel_on_a_gpu_box_fails() {
        let t = TorchInfo {
            cuda_build: None,
            torch_version: "2.7.1+cpu".into(),
            ..cu132_cpu_box()
        };
        let mut f = cuda_facts(
            t,
            NvmlView::Gpus(vec![gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0))]),
        );
        f.driver_cuda = Some(CudaVersion::new(12, 8));
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("CPU-only build (torch.version.cuda is None), but NVML sees 1 GPU"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("whl/cu128"), "{hint}");
        // A CPU build is installed: a plain `pip install torch` would be a no-op.
        assert!(
            hint.contains("`pip uninstall -y torch && pip install torch --index-url"),
            "{hint}"
        );
    }

    #[test]
    fn driver_too_old_for_the_wheel_is_named() {
        let mut f = cuda_facts(
            cu132_cpu_box(),
            NvmlView::Gpus(
                (0..8)
                    .map(|i| gpu(i, "NVIDIA H100 80GB HBM3", (9, 0)))
                    .collect(),
            ),
        );
        f.driver_cuda = Some(CudaVersion::new(12, 2));
        f.driver_version = Some("535.104.05".into());
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("NVML sees 8 GPUs: torch is built for CUDA 13.2 and the driver (535.104.05) supports only CUDA 12.2"), "{}", o.summary);
        let hint = o.hint.unwrap();
        assert!(hint.contains(">= 580.65.06"), "{hint}");
        assert!(hint.contains("whl/cu121"), "{hint}");
    }

    #[test]
    fn cuda_visible_devices_hiding_everything_is_named() {
        let mut f = cuda_facts(
            cu132_cpu_box(),
            NvmlView::Gpus(vec![gpu(0, "NVIDIA L40S", (8, 9))]),
        );
        f.cuda_visible_devices = Some("".into());
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("CUDA_VISIBLE_DEVICES=\"\" hides every GPU"),
            "{}",
            o.summary
        );
        assert!(cvd_hides_everything("-1"));
        assert!(cvd_hides_everything("0,0"));
        assert!(cvd_hides_everything("foo,0"));
        assert!(!cvd_hides_everything("0,1"));
    }

    #[test]
    fn unavailable_for_another_reason_quotes_torch() {
        let mut t = cu132_cpu_box();
        t.unavailable_reason = Some("RuntimeError: CUDA unknown error".into());
        let mut f = cuda_facts(t, NvmlView::Gpus(vec![gpu(0, "NVIDIA H100", (9, 0))]));
        f.driver_cuda = Some(CudaVersion::new(13, 2));
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("CUDA unknown error"));
        assert!(o.hint.unwrap().contains("cuda.driver"));
    }

    #[test]
    fn a_failing_cuda_driver_is_named_as_the_cause() {
        let mut t = cu132_cpu_box();
        t.unavailable_reason = Some("RuntimeError: CUDA driver initialization failed".into());
        let mut f = cuda_facts(
            t,
            NvmlView::Gpus(
                (0..8)
                    .map(|i| gpu(i, "NVIDIA H100 80GB HBM3", (9, 0)))
                    .collect(),
            ),
        );
        f.driver_cuda = Some(CudaVersion::new(13, 2));
        f.cuda_driver_failure = Some((
            "cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802): the system is not ready".into(),
            Some("start the Fabric Manager: `sudo systemctl start nvidia-fabricmanager`".into()),
        ));
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.starts_with("torch.cuda.is_available() is False although NVML sees 8 GPUs: the CUDA driver fails (cuda.driver: cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802)"),
            "{}",
            o.summary
        );
        assert!(
            o.hint
                .unwrap()
                .contains("systemctl start nvidia-fabricmanager"),
            "the fix is cuda.driver's"
        );
        // A driver too old for the wheel is still the more precise cause.
        f.driver_cuda = Some(CudaVersion::new(12, 8));
        let o = evaluate_cuda(&f);
        assert!(
            o.summary.contains("supports only CUDA 12.8"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn available_with_matching_count_passes_and_mismatch_fails() {
        let mut t = cu132_cpu_box();
        t.cuda_available = true;
        t.unavailable_reason = None;
        t.device_count = 8;
        t.devices = (0..8)
            .map(|i| TorchDevice {
                index: i,
                name: "NVIDIA H100 80GB HBM3".into(),
                capability: (9, 0),
            })
            .collect();
        let mut f = cuda_facts(
            t.clone(),
            NvmlView::Unavailable {
                why: "x".into(),
                no_driver: true,
            },
        );
        f.cuda_driver_devices = Some(8);
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Pass, "{o:?}");
        assert!(
            o.summary
                .contains("CUDA 13.2 available in torch with 8 devices (NVIDIA H100 80GB HBM3)"),
            "{}",
            o.summary
        );
        f.cuda_driver_devices = Some(7);
        let o = evaluate_cuda(&f);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("torch sees 8 devices but the CUDA driver sees 7 (cuda.driver)"),
            "{}",
            o.summary
        );
    }

    // ---- torch.nccl ----

    #[test]
    fn nccl_verdicts() {
        let o = evaluate_nccl(&cu132_cpu_box());
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.facts["nccl_version"], "2.30.7");
        assert!(o.summary.contains("NCCL 2.30.7"));
        let o = evaluate_nccl(&TorchInfo {
            nccl_available: Some(false),
            nccl_version: None,
            ..cu132_cpu_box()
        });
        assert_eq!(o.status, Status::Fail);
        assert!(o.hint.unwrap().contains("bundles NCCL"));
        let o = evaluate_nccl(&TorchInfo {
            nccl_version: None,
            ..cu132_cpu_box()
        });
        assert_eq!(o.status, Status::Warn);
        assert!(o.summary.contains("reports NCCL but not its version"));
        // The availability query itself raised: say so, not "reports NCCL".
        let o = evaluate_nccl(&TorchInfo {
            nccl_available: None,
            nccl_version: None,
            query_errors: vec![
                "nccl_available: ImportError: cannot import name 'ProcessGroup'".into(),
            ],
            ..cu132_cpu_box()
        });
        assert_eq!(o.status, Status::Warn);
        assert!(
            o.summary
                .starts_with("could not tell whether torch 2.15.0+cu132 has NCCL"),
            "{}",
            o.summary
        );
        assert!(o.summary.contains("ImportError"), "{}", o.summary);
        assert!(!o.summary.contains("reports NCCL"), "{}", o.summary);
        assert!(o.hint.unwrap().contains("is_nccl_available()"));
        let o = evaluate_nccl(&TorchInfo {
            cuda_build: None,
            ..cu132_cpu_box()
        });
        assert_eq!(o.status, Status::Skip);
    }
}

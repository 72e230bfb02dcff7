//! The driver / CUDA / PyTorch-wheel tables: which driver a CUDA toolkit
//! needs, when a newer runtime still runs through minor-version
//! compatibility, which official PyTorch wheel fits a driver, and which GPU
//! architectures each wheel carries, and how a CUDA toolkit stub loaded as
//! the driver is told. Pure knowledge, shared by the cuda, torch and nccl
//! checks; every figure cites its source.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// A CUDA version as the driver and runtime APIs encode it
/// (`1000 * major + 10 * minor`: 12080 is 12.8, 13020 is 13.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CudaVersion {
    pub major: u32,
    pub minor: u32,
}

impl CudaVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        CudaVersion { major, minor }
    }

    /// Decode the integer from cuDriverGetVersion / cudaRuntimeGetVersion.
    pub fn from_encoded(v: i32) -> Option<Self> {
        if v <= 0 {
            return None;
        }
        let v = v as u32;
        Some(CudaVersion {
            major: v / 1000,
            minor: (v % 1000) / 10,
        })
    }

    /// Parse "12.8" (also "12.8.90", as torch.version.cuda or a fact has it).
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().unwrap_or("0").parse().ok()?;
        Some(CudaVersion { major, minor })
    }
}

impl std::fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A driver branch version ("570.86.15"), compared field by field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DriverVersion {
    parts: Vec<u32>,
    text: String,
}

impl DriverVersion {
    pub fn parse(s: &str) -> Option<Self> {
        let text = s.trim();
        let parts: Option<Vec<u32>> = text.split('.').map(|p| p.parse().ok()).collect();
        parts.filter(|p| !p.is_empty()).map(|parts| DriverVersion {
            parts,
            text: text.to_string(),
        })
    }
}

impl std::fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// CUDA toolkit release -> minimum Linux x86-64 driver at its GA. Source:
/// the CUDA Toolkit release notes, "Table 3: CUDA Toolkit and Corresponding
/// Driver Versions" (docs.nvidia.com/cuda/cuda-toolkit-release-notes).
/// 13.1's figure is inferred from NVIDIA's cuda-compat packages.
pub const TOOLKIT_MIN_DRIVER: &[(CudaVersion, &str)] = &[
    (CudaVersion::new(11, 0), "450.36.06"),
    (CudaVersion::new(11, 4), "470.42.01"),
    (CudaVersion::new(11, 8), "520.61.05"),
    (CudaVersion::new(12, 0), "525.60.13"),
    (CudaVersion::new(12, 1), "530.30.02"),
    (CudaVersion::new(12, 2), "535.54.03"),
    (CudaVersion::new(12, 3), "545.23.06"),
    (CudaVersion::new(12, 4), "550.54.14"),
    (CudaVersion::new(12, 5), "555.42.02"),
    (CudaVersion::new(12, 6), "560.28.03"),
    (CudaVersion::new(12, 8), "570.26"),
    (CudaVersion::new(12, 9), "575.51.03"),
    (CudaVersion::new(13, 0), "580.65.06"),
    (CudaVersion::new(13, 1), "590.44.01"),
];

/// Minor-version compatibility floor per CUDA major: any driver at or above
/// it runs every runtime of that major, with a limited feature set (no JIT
/// of PTX newer than the driver). Source: docs.nvidia.com/deploy/
/// cuda-compatibility ("Minor Version Compatibility", Table 1) and facts.md:
/// 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580 (the first 580
/// production driver, 13.0's GA driver, is 580.65.06).
pub const MINOR_VERSION_FLOOR: &[(u32, &str)] =
    &[(11, "450.80.02"), (12, "525.60.13"), (13, "580.65.06")];

/// The driver a runtime needs for full (native) support, when the table
/// knows that exact release.
pub fn native_min_driver(runtime: CudaVersion) -> Option<&'static str> {
    TOOLKIT_MIN_DRIVER
        .iter()
        .find(|(v, _)| *v == runtime)
        .map(|(_, d)| *d)
}

/// The minor-version compatibility floor of a CUDA major.
pub fn minor_version_floor(major: u32) -> Option<&'static str> {
    MINOR_VERSION_FLOOR
        .iter()
        .find(|(m, _)| *m == major)
        .map(|(_, d)| *d)
}

/// Whether a CUDA runtime runs on a driver, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeCompat {
    /// The driver supports this CUDA version or newer.
    Native,
    /// Same major, older minor: runs through minor-version compatibility.
    MinorVersion { floor: &'static str },
    /// Does not run; `need` is the driver to install.
    Incompatible { need: String },
}

/// Judge a runtime against the CUDA version the driver supports
/// (cuDriverGetVersion) and, when known, the driver's own version.
pub fn runtime_compat(
    runtime: CudaVersion,
    driver_cuda: CudaVersion,
    driver_version: Option<&DriverVersion>,
) -> RuntimeCompat {
    if driver_cuda >= runtime {
        return RuntimeCompat::Native;
    }
    let floor = minor_version_floor(runtime.major);
    let need = floor
        .or_else(|| native_min_driver(runtime))
        .map(|d| format!(">= {d}"))
        .unwrap_or_else(|| format!("supporting CUDA {runtime}"));
    if runtime.major == driver_cuda.major {
        if let Some(floor) = floor {
            let below_floor = match (driver_version, DriverVersion::parse(floor)) {
                (Some(have), Some(floor)) => *have < floor,
                _ => false,
            };
            if !below_floor {
                return RuntimeCompat::MinorVersion { floor };
            }
        }
    }
    RuntimeCompat::Incompatible { need }
}

/// The two concrete fixes for a runtime the driver cannot run: the driver
/// to install, or the torch build that fits the driver instead.
pub fn incompatible_fix(runtime: CudaVersion, driver_cuda: CudaVersion, need: &str) -> String {
    let native = native_min_driver(runtime)
        .map(|d| format!(" ({d} or newer supports {runtime} fully)"))
        .unwrap_or_else(|| {
            format!(" (`nvidia-smi` must then show \"CUDA Version\" >= {runtime} for full support)")
        });
    let wheel = match wheel_for_driver(driver_cuda) {
        Some(w) => format!(
            "or use a PyTorch build for CUDA {} that this driver runs: {}{}",
            w.cuda,
            replace_torch_command(w.index),
            if w.cuda > driver_cuda {
                " (through minor-version compatibility)"
            } else {
                ""
            }
        ),
        None => format!("or use software built for CUDA {driver_cuda} or older"),
    };
    format!("install an NVIDIA driver {need}{native}, {wheel}")
}

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

/// The oldest CUDA build current PyTorch releases are still published for
/// (cu126: torch 2.6 and newer, in [`WHEELS`]); cu118 ended with torch 2.7
/// and cu121/cu124 earlier.
pub const OLDEST_CURRENT_WHEEL: &str = "cu126";

/// When a driver supporting CUDA `driver` runs no current PyTorch build,
/// natively or through minor-version compatibility: the oldest current
/// wheel and the driver it needs (">= 525.60.13").
pub fn too_old_for_current_torch(
    driver: CudaVersion,
    version: Option<&DriverVersion>,
) -> Option<(&'static Wheel, String)> {
    let wheel = WHEELS.iter().find(|w| w.index == OLDEST_CURRENT_WHEEL)?;
    match runtime_compat(wheel.cuda, driver, version) {
        RuntimeCompat::Incompatible { need } => Some((wheel, need)),
        _ => None,
    }
}

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

/// The command that installs torch into `python`, a Python without it: the
/// build for the driver's CUDA version when it is known (the newest wheel
/// the driver runs, with why), else a plain `pip install torch`. Shared by
/// every hint that says to install torch (torch.import, nccl.library).
pub fn install_torch_command(python: &std::path::Path, driver_cuda: Option<CudaVersion>) -> String {
    let pip = format!("{} -m pip install torch", python.display());
    match driver_cuda.and_then(|d| wheel_for_driver(d).map(|w| (d, w))) {
        Some((d, w)) => format!(
            "`{pip} --index-url https://download.pytorch.org/whl/{}` (CUDA {}, which this CUDA {d} driver runs)",
            w.index, w.cuda
        ),
        None => format!("`{pip}`"),
    }
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

/// The verdict's words when cuInit answered CUDA_ERROR_STUB_LIBRARY: the
/// libcuda loaded (`library`) is the CUDA toolkit's link-time stub, not the
/// driver's. Every CUDA-using check says it the same way.
pub fn stub_libcuda_summary(library: &Path, error: &str) -> String {
    format!(
        "the libcuda loaded, {}, is the CUDA toolkit's stub, not the NVIDIA driver (cuInit: \
         {error})",
        library.display()
    )
}

/// The fix for [`stub_libcuda_summary`]: the stubs folder off the loader's path.
pub fn stub_libcuda_hint(library: &Path) -> String {
    let dir = library
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    format!(
        "take {dir} off LD_LIBRARY_PATH (and remove any libcuda.so.1 link made to the stub): \
         the stubs are for linking when building, never for running; the driver's \
         libcuda.so.1 comes with the NVIDIA driver (in containers: the NVIDIA Container \
         Toolkit, `docker run --gpus all`)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> CudaVersion {
        CudaVersion::new(major, minor)
    }
    fn dv(s: &str) -> DriverVersion {
        DriverVersion::parse(s).unwrap()
    }

    // ---- compatibility table, real cases ----

    #[test]
    fn driver_versions_compare_numerically() {
        assert!(dv("570.86.15") > dv("570.26"));
        assert!(dv("525.60.13") < dv("525.105.17"));
        assert!(dv("450.80.02") > dv("450.36.06"));
        assert_eq!(dv("580.65.06").to_string(), "580.65.06");
        assert_eq!(DriverVersion::parse("abc"), None);
    }

    #[test]
    fn a100_cu118_wheel_on_driver_470_uses_minor_version_compat() {
        // Driver 470.57.02 reports CUDA 11.4; the cu118 wheel brings 11.8.
        assert_eq!(
            runtime_compat(v(11, 8), v(11, 4), Some(&dv("470.57.02"))),
            RuntimeCompat::MinorVersion { floor: "450.80.02" }
        );
    }

    #[test]
    fn h100_on_driver_525_with_cu124_wheel_uses_minor_version_compat() {
        assert_eq!(
            runtime_compat(v(12, 4), v(12, 0), Some(&dv("525.60.13"))),
            RuntimeCompat::MinorVersion { floor: "525.60.13" }
        );
    }

    #[test]
    fn driver_580_with_cu132_wheel_uses_minor_version_compat() {
        assert_eq!(
            runtime_compat(v(13, 2), v(13, 0), Some(&dv("580.65.06"))),
            RuntimeCompat::MinorVersion { floor: "580.65.06" }
        );
    }

    #[test]
    fn driver_535_cannot_run_a_cuda_13_wheel() {
        assert_eq!(
            runtime_compat(v(13, 2), v(12, 2), Some(&dv("535.104.05"))),
            RuntimeCompat::Incompatible {
                need: ">= 580.65.06".to_string()
            }
        );
        let fix = incompatible_fix(v(13, 2), v(12, 2), ">= 580.65.06");
        assert!(
            fix.contains("install an NVIDIA driver >= 580.65.06"),
            "{fix}"
        );
        assert!(fix.contains("whl/cu121"), "{fix}");
    }

    #[test]
    fn driver_470_cannot_run_a_cuda_12_wheel() {
        let c = runtime_compat(v(12, 1), v(11, 4), Some(&dv("470.57.02")));
        assert_eq!(
            c,
            RuntimeCompat::Incompatible {
                need: ">= 525.60.13".to_string()
            }
        );
        let fix = incompatible_fix(v(12, 1), v(11, 4), ">= 525.60.13");
        assert!(
            fix.contains("530.30.02 or newer supports 12.1 fully"),
            "{fix}"
        );
        assert!(fix.contains("whl/cu118"), "{fix}");
        assert!(fix.contains("minor-version compatibility"), "{fix}");
    }

    #[test]
    fn newer_driver_runs_older_runtime_natively() {
        assert_eq!(
            runtime_compat(v(12, 6), v(12, 8), Some(&dv("570.86.15"))),
            RuntimeCompat::Native
        );
        assert_eq!(
            runtime_compat(v(11, 8), v(13, 0), None),
            RuntimeCompat::Native
        );
        assert_eq!(
            runtime_compat(v(13, 2), v(13, 2), None),
            RuntimeCompat::Native
        );
    }

    #[test]
    fn a_cuda_11_driver_runs_no_current_torch() {
        let (w, need) = too_old_for_current_torch(v(11, 4), Some(&dv("470.57.02"))).unwrap();
        assert_eq!((w.index, need.as_str()), ("cu126", ">= 525.60.13"));
        // 12.0 runs cu126 through minor-version compatibility.
        assert_eq!(
            too_old_for_current_torch(v(12, 0), Some(&dv("525.60.13"))),
            None
        );
        assert_eq!(too_old_for_current_torch(v(12, 8), None), None);
    }

    #[test]
    fn cuda_11_0_ga_driver_is_below_the_11x_floor() {
        // 450.36.06 shipped with 11.0 but minor-version compat starts at 450.80.02.
        assert!(matches!(
            runtime_compat(v(11, 8), v(11, 0), Some(&dv("450.36.06"))),
            RuntimeCompat::Incompatible { .. }
        ));
    }

    fn archs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn wheel(index: &str) -> Vec<String> {
        archs(WHEELS.iter().find(|w| w.index == index).unwrap().archs)
    }

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
}

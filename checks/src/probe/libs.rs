//! Probe: find the shared libraries a training job would load (libcudart,
//! libnccl, ...) everywhere the dynamic loader or a Python wheel would take
//! them from, and read their versions through their own `int f(int*)`
//! version functions (`cudaRuntimeGetVersion`, `ncclGetVersion`), which
//! answer without a GPU.
//!
//! Loading a library runs its constructors; callers do that inside a
//! child-isolated check.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where a copy of a library was found, in the order a job would prefer it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum LibSource {
    /// Named by the user (`--nccl-lib`, GPUCHECK_NCCL_LIB).
    Explicit,
    LdLibraryPath,
    /// The dynamic loader's cache (`ldconfig -p`).
    LdCache,
    /// Distribution folders (/usr/lib/x86_64-linux-gnu, /usr/lib64, ...).
    SystemDir,
    /// $CUDA_HOME / $CUDA_PATH.
    CudaHome,
    /// /usr/local/cuda*.
    CudaInstall,
    /// site-packages/nvidia/*/lib of the chosen Python environment.
    PythonWheel,
    /// The chosen Python environment's own lib folder: where conda-forge's
    /// PyTorch takes its CUDA libraries from ($CONDA_PREFIX/lib).
    PythonEnvLib,
}

impl LibSource {
    pub fn describe(self) -> &'static str {
        match self {
            LibSource::Explicit => "given explicitly",
            LibSource::LdLibraryPath => "LD_LIBRARY_PATH",
            LibSource::LdCache => "ldconfig cache",
            LibSource::SystemDir => "system library folder",
            LibSource::CudaHome => "CUDA_HOME/CUDA_PATH",
            LibSource::CudaInstall => "/usr/local/cuda*",
            LibSource::PythonWheel => "Python wheel (site-packages/nvidia)",
            LibSource::PythonEnvLib => "Python environment's lib folder (conda)",
        }
    }
}

/// One copy of a library on disk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FoundLib {
    /// The path as found (may be a symlink).
    pub path: PathBuf,
    /// The file it resolves to.
    pub real_path: PathBuf,
    pub source: LibSource,
}

/// The folders to search, gathered once from the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SearchPlaces {
    pub explicit: Vec<PathBuf>,
    pub ld_library_path: Vec<PathBuf>,
    /// (file name, path) pairs from the loader cache.
    pub ld_cache: Vec<(String, PathBuf)>,
    pub system_dirs: Vec<PathBuf>,
    pub cuda_home: Vec<PathBuf>,
    pub cuda_install: Vec<PathBuf>,
    pub wheel_dirs: Vec<PathBuf>,
    pub env_lib_dirs: Vec<PathBuf>,
}

/// Distribution library folders the loader searches by default.
const SYSTEM_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
];

/// How long `ldconfig -p` may take (it only reads /etc/ld.so.cache).
const LDCONFIG_TIMEOUT: Duration = Duration::from_secs(3);

/// Parse `ldconfig -p` output: "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/.../libnccl.so.2".
pub fn parse_ldconfig(text: &str) -> Vec<(String, PathBuf)> {
    text.lines()
        .filter_map(|l| {
            let (left, path) = l.split_once(" => ")?;
            let name = left.split_whitespace().next()?;
            Some((name.to_string(), PathBuf::from(path.trim())))
        })
        .collect()
}

fn lib_dirs_of(root: &Path) -> Vec<PathBuf> {
    [
        "lib64",
        "lib",
        "targets/x86_64-linux/lib",
        "targets/sbsa-linux/lib",
    ]
    .iter()
    .map(|d| root.join(d))
    .filter(|d| d.is_dir())
    .collect()
}

/// `site-packages/nvidia/*/lib` (the CUDA/NCCL wheels) and `torch/lib`.
pub fn wheel_dirs(site_packages: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for sp in site_packages {
        if let Ok(entries) = std::fs::read_dir(sp.join("nvidia")) {
            let mut libs: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path().join("lib"))
                .filter(|p| p.is_dir())
                .collect();
            libs.sort();
            dirs.extend(libs);
        }
        let torch_lib = sp.join("torch/lib");
        if torch_lib.is_dir() {
            dirs.push(torch_lib);
        }
    }
    dirs
}

/// The `lib` folder of each environment a `<prefix>/lib/python3.X/site-packages`
/// belongs to (a conda environment keeps its CUDA libraries there).
pub fn env_lib_dirs(site_packages: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for sp in site_packages {
        let lib = sp.parent().and_then(Path::parent).map(Path::to_path_buf);
        if let Some(lib) = lib.filter(|l| l.ends_with("lib") && l.is_dir()) {
            if !dirs.contains(&lib) {
                dirs.push(lib);
            }
        }
    }
    dirs
}

impl SearchPlaces {
    /// Gather the places from this process's environment. `explicit` is a
    /// user-named library; `site_packages` are the chosen Python's.
    pub fn from_env(explicit: Option<&Path>, site_packages: &[PathBuf]) -> SearchPlaces {
        let ld_library_path = crate::seam::env("LD_LIBRARY_PATH")
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let ld_cache = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .iter()
            .find_map(|prog| {
                let mut cmd = Command::new(prog);
                cmd.arg("-p");
                super::process::run_bounded(cmd, LDCONFIG_TIMEOUT)
                    .ok()
                    .filter(|o| o.code == Some(0))
            })
            .map(|o| parse_ldconfig(&o.stdout))
            .unwrap_or_default();
        let cuda_home = ["CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(|name| crate::seam::env(name))
            .flat_map(|v| lib_dirs_of(Path::new(&v)))
            .collect();
        let mut installs: Vec<PathBuf> = std::fs::read_dir("/usr/local")
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("cuda"))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        installs.sort();
        SearchPlaces {
            explicit: explicit.map(|p| vec![p.to_path_buf()]).unwrap_or_default(),
            ld_library_path,
            ld_cache,
            system_dirs: SYSTEM_DIRS
                .iter()
                .map(PathBuf::from)
                .filter(|p| p.is_dir())
                .collect(),
            cuda_home,
            cuda_install: installs.iter().flat_map(|p| lib_dirs_of(p)).collect(),
            wheel_dirs: wheel_dirs(site_packages),
            env_lib_dirs: env_lib_dirs(site_packages),
        }
    }
}

/// True when `file_name` is `stem` or a versioned `stem.N...`.
pub fn name_matches(file_name: &str, stem: &str) -> bool {
    file_name == stem
        || file_name
            .strip_prefix(stem)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

fn in_dir(dir: &Path, stem: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| name_matches(&e.file_name().to_string_lossy(), stem))
        .map(|e| e.path())
        .collect();
    // Prefer the soname-looking shortest names first (libnccl.so.2 before libnccl.so.2.27.3).
    v.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
    v
}

/// Every copy of library `stem` (e.g. "libcudart.so") in search order, one
/// entry per distinct file (symlinks to the same file collapse into the
/// first place that named it).
pub fn find(places: &SearchPlaces, stem: &str) -> Vec<FoundLib> {
    let mut candidates: Vec<(PathBuf, LibSource)> = Vec::new();
    for p in &places.explicit {
        candidates.push((p.clone(), LibSource::Explicit));
    }
    for d in &places.ld_library_path {
        candidates.extend(
            in_dir(d, stem)
                .into_iter()
                .map(|p| (p, LibSource::LdLibraryPath)),
        );
    }
    for (name, path) in &places.ld_cache {
        if name_matches(name, stem) {
            candidates.push((path.clone(), LibSource::LdCache));
        }
    }
    for (dirs, source) in [
        (&places.system_dirs, LibSource::SystemDir),
        (&places.cuda_home, LibSource::CudaHome),
        (&places.cuda_install, LibSource::CudaInstall),
        (&places.wheel_dirs, LibSource::PythonWheel),
        (&places.env_lib_dirs, LibSource::PythonEnvLib),
    ] {
        for d in dirs {
            candidates.extend(in_dir(d, stem).into_iter().map(|p| (p, source)));
        }
    }
    let mut found: Vec<FoundLib> = Vec::new();
    for (path, source) in candidates {
        let Ok(real_path) = path.canonicalize() else {
            continue;
        };
        if !real_path.is_file() || found.iter().any(|f| f.real_path == real_path) {
            continue;
        }
        found.push(FoundLib {
            path,
            real_path,
            source,
        });
    }
    found
}

/// Load `path` and call its `int symbol(int*)` version function (the shape of
/// both `cudaRuntimeGetVersion` and `ncclGetVersion`). Returns the raw
/// integer, or why it could not be read.
pub fn call_version_fn(path: &Path, symbol: &str) -> Result<i32, String> {
    // SAFETY: loading a library runs its initialisers; callers run this in a
    // child-isolated check. The symbol's C signature is `int f(int*)`.
    unsafe {
        let lib = libloading::Library::new(path).map_err(|e| format!("cannot load: {e}"))?;
        let f: libloading::Symbol<unsafe extern "C" fn(*mut i32) -> i32> = lib
            .get(symbol.as_bytes())
            .map_err(|e| format!("no {symbol}: {e}"))?;
        let mut version: i32 = 0;
        let rc = f(&mut version);
        if rc != 0 {
            return Err(format!("{symbol} returned error {rc}"));
        }
        // Keep the library loaded: unloading CUDA libraries at runtime is
        // known to crash some versions, and the child exits soon anyway.
        std::mem::forget(lib);
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ldconfig_lines() {
        let text = "3 libs found in cache `/etc/ld.so.cache'\n\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n";
        let v = parse_ldconfig(text);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].0, "libnccl.so.2");
        assert_eq!(
            v[0].1,
            PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2")
        );
    }

    #[test]
    fn versioned_names_match_only_their_stem() {
        assert!(name_matches("libcudart.so", "libcudart.so"));
        assert!(name_matches("libcudart.so.12", "libcudart.so"));
        assert!(name_matches("libcudart.so.12.8.90", "libcudart.so"));
        assert!(!name_matches("libcudart.so.12.bak", "libcudart.so"));
        assert!(!name_matches("libcudart_static.a", "libcudart.so"));
        assert!(!name_matches("libnccl-net.so", "libnccl.so"));
    }

    #[test]
    fn finds_copies_in_order_and_collapses_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("libnccl.so.2.27.3"), b"x").unwrap();
        std::os::unix::fs::symlink("libnccl.so.2.27.3", a.join("libnccl.so.2")).unwrap();
        std::fs::write(b.join("libnccl.so.2"), b"y").unwrap();
        let places = SearchPlaces {
            ld_library_path: vec![a.clone()],
            wheel_dirs: vec![b.clone()],
            ..Default::default()
        };
        let found = find(&places, "libnccl.so");
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].path, a.join("libnccl.so.2"));
        assert_eq!(found[0].source, LibSource::LdLibraryPath);
        assert_eq!(found[1].source, LibSource::PythonWheel);
    }

    #[test]
    fn a_conda_environments_lib_folder_is_searched() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("env/lib/python3.11/site-packages");
        std::fs::create_dir_all(&sp).unwrap();
        std::fs::write(dir.path().join("env/lib/libcudart.so.12"), b"x").unwrap();
        let places = SearchPlaces {
            env_lib_dirs: env_lib_dirs(&[sp]),
            ..Default::default()
        };
        let found = find(&places, "libcudart.so");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].source, LibSource::PythonEnvLib);
    }

    #[test]
    fn missing_library_version_is_an_error() {
        let err = call_version_fn(Path::new("/nonexistent/libx.so"), "ncclGetVersion").unwrap_err();
        assert!(err.starts_with("cannot load"), "{err}");
    }
}

//! Probe: NCCL, the library every multi-GPU PyTorch job talks through.
//!
//! Three kinds of facts, all plain data:
//! - every `libnccl.so.2` a job could load, where it was found and its
//!   version (`ncclGetVersion` answers without a GPU);
//! - the NCCL configuration NCCL itself would read (NCCL_* variables from the
//!   environment and from NCCL's configuration files), with the host's
//!   network interfaces and InfiniBand devices those variables name;
//! - a single-process all-reduce over every visible GPU (`ncclCommInitAll`),
//!   timed with CUDA events and verified element by element.
//!
//! NCCL is loaded with libloading (cudarc's NCCL loader never tries
//! `libnccl.so.2` and panics when nothing loads); CUDA contexts, memory,
//! streams and events go through cudarc's driver API. Loading either library
//! runs foreign code that can hang or crash, so callers run these probes in a
//! child-isolated check, and [`super::stage`] marks each blocking step.

use std::ffi::{c_char, c_int, c_void, CStr, OsString};
use std::mem::ManuallyDrop;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys, CudaContext, CudaStream};

use super::libs::{self, LibSource, SearchPlaces};
use super::python;
use super::stage;

// ---------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------

/// An NCCL release, e.g. 2.27.7.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// `NCCL_VERSION(X,Y,Z)` in nccl.h (src/nccl.h.in) encodes releases up to 2.8
/// as X*1000 + Y*100 + Z (2.8.4 = 2804) and later ones as X*10000 + Y*100 + Z
/// (2.9.6 = 20906, 2.27.7 = 22707). Old codes never reach 10000, new ones
/// start at 20900, so any code at or above this bound is the new encoding.
const NCCL_NEW_ENCODING_MIN: i32 = 10_000;

impl NcclVersion {
    /// Decode the integer `ncclGetVersion` returns (both encodings).
    pub fn from_code(code: i32) -> Option<NcclVersion> {
        if code <= 0 {
            return None;
        }
        let (major, rest) = if code >= NCCL_NEW_ENCODING_MIN {
            (code / 10_000, code % 10_000)
        } else {
            (code / 1_000, code % 1_000)
        };
        Some(NcclVersion {
            major: major as u32,
            minor: (rest / 100) as u32,
            patch: (rest % 100) as u32,
        })
    }

    /// Read a version from text such as "2.27.7", "2.27.7+cuda12.9" or
    /// "(2, 27, 7)": the first three numbers in it.
    pub fn parse(text: &str) -> Option<NcclVersion> {
        let numbers: Vec<u32> = text
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .take(3)
            .map(|s| s.parse().ok())
            .collect::<Option<Vec<u32>>>()?;
        match numbers[..] {
            [major, minor, patch] => Some(NcclVersion {
                major,
                minor,
                patch,
            }),
            _ => None,
        }
    }
}

impl std::fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

// ---------------------------------------------------------------------------
// Library discovery
// ---------------------------------------------------------------------------

/// The file-name stem of the NCCL library (`libnccl.so`, `.so.2`, `.so.2.27.7`).
pub const NCCL_STEM: &str = "libnccl.so";

/// One copy of libnccl on disk and what loading it said.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NcclCopy {
    /// The path as found (often the `libnccl.so.2` symlink).
    pub path: PathBuf,
    /// The file it resolves to.
    pub real_path: PathBuf,
    pub source: LibSource,
    /// The version, or why it could not be read (does not load, no symbol...).
    pub version: Result<NcclVersion, String>,
}

/// Every copy of NCCL a job on this machine could load, in the order the
/// dynamic loader would prefer them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LibraryFacts {
    /// `--nccl-lib` / GPUCHECK_NCCL_LIB, as given.
    pub explicit: Option<PathBuf>,
    /// The explicit path is not a file.
    pub explicit_missing: bool,
    /// The Python whose site-packages were searched (as it names itself:
    /// [`python::PythonEnv::name`]), or why none was.
    pub python: Result<PathBuf, String>,
    pub copies: Vec<NcclCopy>,
}

/// [`library_facts_live`] through the boundary ([`crate::seam`]).
pub fn library_facts(explicit: Option<&Path>, python_path: Option<&Path>) -> LibraryFacts {
    crate::seam::answer(
        "nccl::library_facts",
        &format!("{explicit:?}, {python_path:?}"),
        || library_facts_live(explicit, python_path),
    )
}

/// Find every libnccl (explicit path, LD_LIBRARY_PATH, loader cache, system
/// folders, CUDA_HOME, /usr/local/cuda*, the chosen Python's nvidia/*/lib and
/// torch/lib) and read each one's version. Loads each copy: run it in a
/// child-isolated check.
fn library_facts_live(explicit: Option<&Path>, python_path: Option<&Path>) -> LibraryFacts {
    let env = python::find_python(python_path)
        .map(|c| python::python_env(&c.path))
        .map_err(|e| e.to_string());
    let site = env
        .as_ref()
        .map(|e| e.site_packages.clone())
        .unwrap_or_default();
    let python = env.map(|e| e.name);
    let places = SearchPlaces::from_env(explicit, &site);
    let copies = libs::find(&places, NCCL_STEM)
        .into_iter()
        .map(|found| {
            stage(&format!("ncclGetVersion {}", found.path.display()));
            let version = libs::call_version_fn(&found.path, "ncclGetVersion").and_then(|code| {
                NcclVersion::from_code(code)
                    .ok_or_else(|| format!("ncclGetVersion returned {code}, not a version"))
            });
            NcclCopy {
                path: found.path,
                real_path: found.real_path,
                source: found.source,
                version,
            }
        })
        .collect();
    LibraryFacts {
        explicit: explicit.map(Path::to_path_buf),
        explicit_missing: explicit.is_some_and(|p| !p.is_file()),
        python,
        copies,
    }
}

// ---------------------------------------------------------------------------
// Configuration: NCCL_* variables, interfaces, InfiniBand devices
// ---------------------------------------------------------------------------

/// Where NCCL would read a variable from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum VarOrigin {
    Environment,
    /// A configuration file (NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf).
    File(PathBuf),
}

/// One NCCL_* setting as NCCL would see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NcclVar {
    pub name: String,
    pub value: String,
    pub origin: VarOrigin,
}

/// An InfiniBand (or RoCE) device from /sys/class/infiniband with its port numbers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IbDevice {
    pub name: String,
    pub ports: Vec<u32>,
}

/// Everything nccl.env judges.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct EnvFacts {
    /// NCCL_* settings, environment first, then files; one entry per name.
    pub vars: Vec<NcclVar>,
    /// Names of the network interfaces NCCL's socket transport can use: those
    /// with an IPv4 or IPv6 address (NCCL's findInterfaces skips the rest),
    /// sorted, unique.
    pub interfaces: Vec<String>,
    /// Interfaces that exist (getifaddrs) but carry no IPv4/IPv6 address, so
    /// NCCL never picks them (an InfiniBand port without IPoIB, a link that
    /// was never configured). Sorted.
    pub interfaces_without_address: Vec<String>,
    /// Why the interfaces could not be listed, if they could not.
    pub interfaces_error: Option<String>,
    pub ib_devices: Vec<IbDevice>,
    /// Names of NCCL_* variables in the environment whose name or value is
    /// not UTF-8 (in `vars` with the bytes that are not shown as U+FFFD).
    pub not_utf8: Vec<String>,
}

impl EnvFacts {
    /// The value NCCL would use for `name`.
    pub fn get(&self, name: &str) -> Option<&NcclVar> {
        self.vars.iter().find(|v| v.name == name)
    }
}

/// Parse an NCCL configuration file: `NAME=VALUE` lines, `#` comments.
pub fn parse_conf(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or("").trim();
            let (name, value) = line.split_once('=')?;
            let name = name.trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return None;
            }
            Some((name.to_string(), value.trim().to_string()))
        })
        .collect()
}

/// Merge NCCL_* settings the way NCCL does: the environment wins, then the
/// files in order (the first file to set a name wins). Sorted by name.
pub fn merge_vars(
    env: impl IntoIterator<Item = (String, String)>,
    files: &[(PathBuf, Vec<(String, String)>)],
) -> Vec<NcclVar> {
    let mut vars: Vec<NcclVar> = Vec::new();
    let mut add = |name: String, value: String, origin: VarOrigin| {
        if name.starts_with("NCCL_") && !vars.iter().any(|v| v.name == name) {
            vars.push(NcclVar {
                name,
                value,
                origin,
            });
        }
    };
    for (name, value) in env {
        add(name, value, VarOrigin::Environment);
    }
    for (path, entries) in files {
        for (name, value) in entries {
            add(name.clone(), value.clone(), VarOrigin::File(path.clone()));
        }
    }
    vars.sort_by(|a, b| a.name.cmp(&b.name));
    vars
}

/// The configuration files NCCL reads, in precedence order: NCCL_CONF_FILE
/// (NCCL >= 2.23) or else ~/.nccl.conf, then /etc/nccl.conf (NCCL
/// "Environment Variables" documentation, docs.nvidia.com/deeplearning/nccl).
/// The largest NCCL configuration file read: NCCL's own are a few lines
/// (`/etc/nccl.conf`); a FIFO, device or folder named by `$NCCL_CONF_FILE`
/// is not read at all (`input::read_regular`), so the check never waits.
const MAX_CONF_BYTES: u64 = 1024 * 1024;

fn conf_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(p) = crate::seam::env("NCCL_CONF_FILE").filter(|p| !p.is_empty()) {
        files.push(PathBuf::from(p));
    } else if let Some(home) = crate::seam::env("HOME").filter(|h| !h.is_empty()) {
        files.push(PathBuf::from(home).join(".nccl.conf"));
    }
    files.push(PathBuf::from("/etc/nccl.conf"));
    files
}

/// The interfaces with an IPv4/IPv6 address, and those without one.
fn interfaces() -> Result<(Vec<String>, Vec<String>), String> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("getifaddrs: {e}"))?;
    let mut with_address: Vec<String> = Vec::new();
    let mut all: Vec<String> = Vec::new();
    for a in addrs {
        let inet = a
            .address
            .as_ref()
            .is_some_and(|s| s.as_sockaddr_in().is_some() || s.as_sockaddr_in6().is_some());
        if inet {
            with_address.push(a.interface_name.clone());
        }
        all.push(a.interface_name);
    }
    with_address.sort();
    with_address.dedup();
    all.sort();
    all.dedup();
    all.retain(|n| with_address.binary_search(n).is_err());
    Ok((with_address, all))
}

/// [`interface_speed_mbps_live`] through the boundary ([`crate::seam`]).
pub fn interface_speed_mbps(sysfs: &Path, name: &str) -> Option<u32> {
    crate::seam::answer(
        "nccl::interface_speed_mbps",
        &format!("{}, {name}", sysfs.display()),
        || interface_speed_mbps_live(sysfs, name),
    )
}

/// The link speed of network interface `name`, Mb/s, from
/// `<sysfs>/class/net/<name>/speed` (`sysfs` stands for /sys: see
/// [`crate::probe::sysfs::sysfs_root`]). `None` when the kernel does not
/// say: the read fails (EINVAL for a link that is down or a virtual device
/// such as lo) or gives -1 (SPEED_UNKNOWN) or another value that is not a
/// positive number.
fn interface_speed_mbps_live(sysfs: &Path, name: &str) -> Option<u32> {
    let path = sysfs.join("class/net").join(name).join("speed");
    crate::probe::sysfs::attr(&path)?
        .parse::<u32>()
        .ok()
        .filter(|&mbps| mbps > 0)
}

/// [`ib_devices_live`] through the boundary ([`crate::seam`]).
pub fn ib_devices(root: &Path) -> Vec<IbDevice> {
    crate::seam::answer("nccl::ib_devices", &root.display().to_string(), || {
        ib_devices_live(root)
    })
}

/// The InfiniBand/RoCE devices under `root`: `<sysfs>/class/infiniband`,
/// where `<sysfs>` is [`crate::probe::sysfs::sysfs_root`], the same folder
/// fabric.rdma reads, so both checks see the same devices.
fn ib_devices_live(root: &Path) -> Vec<IbDevice> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut devices: Vec<IbDevice> = entries
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let mut ports: Vec<u32> = std::fs::read_dir(e.path().join("ports"))
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|p| p.file_name().to_string_lossy().parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            ports.sort_unstable();
            IbDevice { name, ports }
        })
        .collect();
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices
}

/// Gather the NCCL configuration of this process and host.
pub fn env_facts() -> EnvFacts {
    // Each NCCL_* value through seam::env, so a capture keeps it as the
    // reports do (secret-looking values redacted).
    let env: Vec<(String, String)> = crate::seam::env_names()
        .into_iter()
        .filter(|n| n.starts_with("NCCL_"))
        .filter_map(|n| crate::seam::env(&n).map(|v| (n, v)))
        .collect();
    let not_utf8 = crate::seam::answer("nccl::not_utf8_vars", "", || {
        environment_nccl_vars(std::env::vars_os()).1
    });
    let files: Vec<(PathBuf, Vec<(String, String)>)> = conf_files()
        .into_iter()
        .filter_map(|p| {
            let key = p.display().to_string();
            let text = crate::seam::answer_kept(
                "nccl::conf_file",
                &key,
                || {
                    crate::input::read_regular(&p, MAX_CONF_BYTES)
                        .ok()
                        .and_then(|b| String::from_utf8(b).ok())
                },
                |t| t.as_deref().map(crate::seam::conf_without_secrets),
            )?;
            let entries = parse_conf(&text);
            Some((p, entries))
        })
        .collect();
    let found = crate::seam::answer("nccl::interfaces", "", interfaces);
    let ((interfaces, interfaces_without_address), interfaces_error) = match found {
        Ok(v) => (v, None),
        Err(e) => ((Vec::new(), Vec::new()), Some(e)),
    };
    EnvFacts {
        vars: merge_vars(env, &files),
        interfaces,
        interfaces_without_address,
        interfaces_error,
        ib_devices: ib_devices(&crate::probe::sysfs::sysfs_root().join("class/infiniband")),
        not_utf8,
    }
}

/// The environment's NCCL_* variables as text (NCCL reads bytes: a name or
/// value that is not UTF-8 is kept, decoded lossily, and named in the second
/// list).
pub fn environment_nccl_vars(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut text = Vec::new();
    let mut not_utf8 = Vec::new();
    for (name, value) in vars {
        if !name.as_bytes().starts_with(b"NCCL_") {
            continue;
        }
        let (n, v) = (name.to_string_lossy(), value.to_string_lossy());
        if name.to_str().is_none() || value.to_str().is_none() {
            not_utf8.push(n.to_string());
        }
        text.push((n.into_owned(), v.into_owned()));
    }
    (text, not_utf8)
}

// ---------------------------------------------------------------------------
// The all-reduce
// ---------------------------------------------------------------------------

/// `ncclResult_t`.
type NcclResult = c_int;
/// `ncclComm_t`, an opaque pointer.
type NcclComm = *mut c_void;

/// `ncclSuccess` (nccl.h `ncclResult_t`).
const NCCL_SUCCESS: NcclResult = 0;
/// `ncclInProgress`: a non-blocking call has not finished (nccl.h).
const NCCL_IN_PROGRESS: NcclResult = 7;
/// `ncclFloat32` (nccl.h `ncclDataType_t`: ncclInt8 = 0 ... ncclFloat32 = 7).
const NCCL_FLOAT32: c_int = 7;
/// `ncclSum` (nccl.h `ncclRedOp_t`).
const NCCL_SUM: c_int = 0;

type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type CommInitAllFn = unsafe extern "C" fn(*mut NcclComm, c_int, *const c_int) -> NcclResult;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    sys::CUstream,
) -> NcclResult;
type GroupFn = unsafe extern "C" fn() -> NcclResult;
type CommFn = unsafe extern "C" fn(NcclComm) -> NcclResult;
type ErrorStringFn = unsafe extern "C" fn(NcclResult) -> *const c_char;
type LastErrorFn = unsafe extern "C" fn(NcclComm) -> *const c_char;
type AsyncErrorFn = unsafe extern "C" fn(NcclComm, *mut NcclResult) -> NcclResult;

/// The NCCL entry points the all-reduce uses, resolved once. The library is
/// never unloaded (NCCL's threads may still run; the child exits soon).
struct NcclApi {
    _lib: ManuallyDrop<libloading::Library>,
    get_version: GetVersionFn,
    comm_init_all: CommInitAllFn,
    all_reduce: AllReduceFn,
    group_start: GroupFn,
    group_end: GroupFn,
    comm_destroy: CommFn,
    comm_abort: Option<CommFn>,
    get_error_string: ErrorStringFn,
    get_last_error: Option<LastErrorFn>,
    comm_get_async_error: Option<AsyncErrorFn>,
}

fn c_text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: NCCL returns NUL-terminated static or per-thread strings.
    let s = unsafe { CStr::from_ptr(p) }
        .to_string_lossy()
        .trim()
        .to_string();
    (!s.is_empty()).then_some(s)
}

impl NcclApi {
    fn load(path: &Path) -> Result<NcclApi, String> {
        // SAFETY: loading runs NCCL's initialisers; this runs in a child
        // process. Each symbol is cast to its nccl.h signature.
        unsafe {
            let lib = libloading::Library::new(path).map_err(|e| format!("cannot load: {e}"))?;
            fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
                // SAFETY: the caller names the type matching nccl.h.
                unsafe { lib.get::<T>(name.as_bytes()) }
                    .map(|s| *s)
                    .map_err(|_| format!("has no {name} (not an NCCL 2 library?)"))
            }
            Ok(NcclApi {
                get_version: sym(&lib, "ncclGetVersion")?,
                comm_init_all: sym(&lib, "ncclCommInitAll")?,
                all_reduce: sym(&lib, "ncclAllReduce")?,
                group_start: sym(&lib, "ncclGroupStart")?,
                group_end: sym(&lib, "ncclGroupEnd")?,
                comm_destroy: sym(&lib, "ncclCommDestroy")?,
                comm_abort: sym(&lib, "ncclCommAbort").ok(),
                get_error_string: sym(&lib, "ncclGetErrorString")?,
                get_last_error: sym(&lib, "ncclGetLastError").ok(),
                comm_get_async_error: sym(&lib, "ncclCommGetAsyncError").ok(),
                _lib: ManuallyDrop::new(lib),
            })
        }
    }

    fn version(&self) -> Option<NcclVersion> {
        let mut code: c_int = 0;
        // SAFETY: `int ncclGetVersion(int*)`.
        let rc = unsafe { (self.get_version)(&mut code) };
        (rc == NCCL_SUCCESS)
            .then(|| NcclVersion::from_code(code))
            .flatten()
    }

    /// An `Err` for a failed call, with NCCL's own words.
    fn failure(&self, step: &str, rc: NcclResult, comm: NcclComm) -> AllReduceFailure {
        // SAFETY: both return NUL-terminated strings owned by NCCL.
        let message = c_text(unsafe { (self.get_error_string)(rc) })
            .unwrap_or_else(|| format!("NCCL error {rc}"));
        let last = self.get_last_error.and_then(|f| c_text(unsafe { f(comm) }));
        AllReduceFailure::Nccl {
            step: step.to_string(),
            code: rc,
            message,
            last_error: last,
        }
    }

    fn check(&self, step: &str, rc: NcclResult) -> Result<(), AllReduceFailure> {
        if rc == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(self.failure(step, rc, std::ptr::null_mut()))
        }
    }
}

/// One GPU in the communicator.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuDesc {
    /// CUDA ordinal (after CUDA_VISIBLE_DEVICES).
    pub ordinal: u32,
    pub name: String,
    /// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML writes it, to
    /// match this CUDA device with NVML's view of it.
    pub uuid: Option<String>,
    /// Free device memory after NCCL initialised, bytes.
    pub free_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
}

/// The first element that came back wrong.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WrongValue {
    /// Rank = position in the communicator = CUDA ordinal here.
    pub rank: u32,
    pub index: u64,
    pub got: f32,
    pub expected: f32,
}

/// One message size of the all-reduce.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SizeResult {
    pub bytes: u64,
    /// float32 elements per rank.
    pub count: u64,
    pub warmup_iters: u32,
    pub iters: u32,
    /// Mean time of one all-reduce, microseconds: CUDA-event time over the
    /// timed iterations divided by their number, the slowest rank's.
    pub time_us: f64,
    /// Wrong elements summed over ranks.
    pub wrong: u64,
    /// Wrong elements per rank.
    pub wrong_per_rank: Vec<u64>,
    pub first_wrong: Option<WrongValue>,
}

/// What the all-reduce run found.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AllReduceRun {
    pub gpus: Vec<GpuDesc>,
    pub nccl_version: Option<NcclVersion>,
    /// One per size that ran, ascending.
    pub results: Vec<SizeResult>,
    /// Sizes asked for that did not fit in free GPU memory (two buffers each).
    pub skipped_for_memory: Vec<u64>,
    /// Sizes asked for that were left out to stay inside the time budget.
    pub skipped_for_time: Vec<u64>,
    /// The algorithm and protocol NCCL chose, per call, from its tuning log
    /// (empty when the user set NCCL_DEBUG or NCCL logged none).
    pub tuning: Vec<TuningChoice>,
    /// Sizes measured again, in order, after the first pass (see
    /// [`run_allreduce_again`]): a figure under its threshold is measured
    /// again before it fails.
    pub repeats: Vec<SizeResult>,
}

/// One line of NCCL's tuning log: what it chose for a collective.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TuningChoice {
    pub bytes: u64,
    /// "Ring", "Tree", "NVLS", "NVLSTree", "CollNetDirect", "CollNetChain", "PAT".
    pub algorithm: String,
    /// "LL", "LL128", "Simple".
    pub protocol: String,
}

/// NCCL's algorithms in the order of their NCCL_ALGO_* numbers (nccl's
/// src/include/nccl_common.h), as its older tuning lines number them.
const NCCL_ALGORITHMS: [&str; 7] = [
    "Tree",
    "Ring",
    "CollNetDirect",
    "CollNetChain",
    "NVLS",
    "NVLSTree",
    "PAT",
];
/// NCCL_PROTO_* in order.
const NCCL_PROTOCOLS: [&str; 3] = ["LL", "LL128", "Simple"];

/// Parse the line NCCL_DEBUG_SUBSYS=TUNING writes for each collective (rank
/// 0), in either of NCCL's spellings (src/enqueue.cc):
/// `[AllReduce: ]268435456 Bytes -> Algo 1 proto 2 time 2860.2` (numbers,
/// older releases) or `AllReduce: 268435456 Bytes -> Algo NVLS proto Simple
/// channel{Lo..Hi}={0..15}` (names). Lines of other collectives are None.
pub fn parse_tuning_line(line: &str) -> Option<TuningChoice> {
    let (before, after) = line.split_once(" Bytes -> Algo ")?;
    let mut head = before.split_whitespace().rev();
    let bytes: u64 = head.next()?.parse().ok()?;
    if let Some(func) = head.next().filter(|t| t.ends_with(':')) {
        if func != "AllReduce:" {
            return None;
        }
    }
    let mut tail = after.split_whitespace();
    let algo = tail.next()?;
    if tail.next()? != "proto" {
        return None;
    }
    let proto = tail.next()?;
    let name = |token: &str, table: &[&str]| -> Option<String> {
        match token.parse::<usize>() {
            Ok(i) => table.get(i).map(|s| s.to_string()),
            // NCCL >= 2.24 writes ncclAlgoToString's upper-case names
            // with underscores (NVLS_TREE, COLLNET_DIRECT); older releases
            // the names of ncclAlgoStr (NVLSTree, CollNetDirect).
            Err(_) => Some(
                table
                    .iter()
                    .find(|n| n.eq_ignore_ascii_case(&token.replace('_', "")))
                    .map_or_else(|| token.to_string(), |n| n.to_string()),
            ),
        }
    };
    Some(TuningChoice {
        bytes,
        algorithm: name(algo, &NCCL_ALGORITHMS)?,
        protocol: name(proto, &NCCL_PROTOCOLS)?,
    })
}

/// NCCL's tuning log, captured in an unlinked temporary file NCCL writes
/// through /proc/self/fd (nothing is left behind, whatever ends the child).
struct TuningLog {
    file: std::fs::File,
}

impl TuningLog {
    /// Ask NCCL (before it loads: it reads these at init) to log its
    /// algorithm choices to our file, unless the user set NCCL_DEBUG,
    /// NCCL_DEBUG_SUBSYS or NCCL_DEBUG_FILE: theirs win, and then no
    /// choice is recorded.
    fn start() -> Option<TuningLog> {
        let user_set = ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"]
            .iter()
            .any(|v| crate::seam::env(v).is_some());
        if user_set {
            return None;
        }
        let file = tempfile::tempfile().ok()?;
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        std::env::set_var("NCCL_DEBUG", "INFO");
        std::env::set_var("NCCL_DEBUG_SUBSYS", "TUNING");
        std::env::set_var("NCCL_DEBUG_FILE", path);
        Some(TuningLog { file })
    }

    /// Every all-reduce choice logged so far (bounded: the last
    /// TUNING_LOG_MAX_BYTES of the log).
    fn choices(&mut self) -> Vec<TuningChoice> {
        use std::io::{Read, Seek, SeekFrom};
        const TUNING_LOG_MAX_BYTES: u64 = 4 << 20;
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        let start = len.saturating_sub(TUNING_LOG_MAX_BYTES);
        let mut text = Vec::new();
        if self.file.seek(SeekFrom::Start(start)).is_err()
            || self.file.read_to_end(&mut text).is_err()
        {
            return Vec::new();
        }
        String::from_utf8_lossy(&text)
            .lines()
            .filter_map(parse_tuning_line)
            .collect()
    }
}

/// Why the all-reduce did not produce results.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AllReduceFailure {
    /// libcuda.so.1 is not loadable: no NVIDIA driver here.
    NoDriver,
    /// `cuInit` failed (the CUDA error's name), with the libcuda file the
    /// process mapped (the toolkit's stub, when the error says so).
    DriverInit {
        error: String,
        library: Option<PathBuf>,
    },
    /// CUDA sees no GPU.
    NoGpu,
    /// The NCCL library could not be loaded or lacks an entry point.
    NcclLoad { path: PathBuf, detail: String },
    /// A CUDA call failed.
    Cuda {
        step: String,
        gpu: Option<u32>,
        error: String,
    },
    /// An NCCL call failed (its return code, ncclGetErrorString, ncclGetLastError).
    Nccl {
        step: String,
        code: i32,
        message: String,
        last_error: Option<String>,
    },
    /// A collective had not completed when the plan's `give_up` came and
    /// NCCL reported no error: the GPUs whose streams were still running.
    Stuck {
        step: String,
        gpus: Vec<u32>,
        waited: Duration,
    },
    /// Not even the smallest size fits in free GPU memory.
    NoMemory { gpu: u32, free_bytes: u64 },
}

/// How to run the all-reduce.
#[derive(Debug, Clone, PartialEq)]
pub struct AllReducePlan {
    pub nccl_lib: PathBuf,
    /// Message sizes in bytes, ascending, multiples of 4 (float32).
    pub sizes: Vec<u64>,
    /// Time to spend on one size (warm-up plus timed iterations), roughly.
    pub budget_per_size: Duration,
    /// Start no size after the first once this instant has passed.
    pub deadline: Option<Instant>,
    /// Abort the communicators when a collective is still running at this
    /// instant, and say so, instead of being killed at the check's timeout.
    pub give_up: Option<Instant>,
}

/// Warm-up iterations at most (nccl-tests warms up with a few; -w 5 in its
/// src/common.cu defaults).
pub const MAX_WARMUP_ITERS: u32 = 5;
/// Timed iterations at most (nccl-tests' default -n 20).
pub const MAX_TIMED_ITERS: u32 = 20;

/// Bytes left free on each GPU for NCCL's own buffers and lazy connection
/// setup (channels, NVLS buffers): a quarter of free memory, at most 1 GiB.
pub fn nccl_reserve_bytes(free_bytes: u64) -> u64 {
    (free_bytes / 4).min(1 << 30)
}

/// The largest buffer size that fits twice (send + receive) next to NCCL.
pub fn max_buffer_bytes(free_bytes: u64) -> u64 {
    free_bytes.saturating_sub(nccl_reserve_bytes(free_bytes)) / 2
}

/// Split the planned sizes into those that fit in `fit` bytes per buffer
/// (None: unknown, keep all) and those that do not. When some do not, the
/// largest power of two that fits runs in their place (a small GPU still
/// gets a measurement). Both lists stay ascending.
pub fn fit_sizes(planned: &[u64], fit: Option<u64>) -> (Vec<u64>, Vec<u64>) {
    let Some(limit) = fit else {
        return (planned.to_vec(), Vec::new());
    };
    let (mut sizes, skipped): (Vec<u64>, Vec<u64>) = planned.iter().partition(|&&b| b <= limit);
    if !skipped.is_empty() && limit >= 8 {
        let cap = 1u64 << (63 - limit.leading_zeros());
        if sizes.last().is_none_or(|&last| last < cap) {
            sizes.push(cap);
        }
    }
    (sizes, skipped)
}

/// Timed iterations at least, when they fit before the deadline: a mean over
/// several calls, so that one slow call does not decide the figure
/// (gpucheck's choice; nccl-tests times 20 by default).
pub const MIN_TIMED_ITERS: u32 = 5;

/// Two consecutive warm-up calls agree when they differ by at most this
/// share of the slower one: NCCL's lazy connection set-up (part of the first
/// call, which can take seconds) is over. gpucheck's choice: a settled
/// all-reduce varies by a few per cent from call to call.
pub const WARMUP_AGREEMENT: f64 = 0.1;

/// Whether warming up is over, after calls that took `times` (in order) and
/// `spent` in all against a warm-up `budget`: when the last two calls agree,
/// after [`MAX_WARMUP_ITERS`] calls, or when the budget is spent and there
/// are at least two (the first call alone includes the set-up, and the
/// timed loop is sized from a settled call).
pub fn warm_up_done(times: &[Duration], spent: Duration, budget: Duration) -> bool {
    let n = times.len();
    if n as u32 >= MAX_WARMUP_ITERS {
        return true;
    }
    if n < 2 {
        return false;
    }
    let (a, b) = (times[n - 2].as_secs_f64(), times[n - 1].as_secs_f64());
    let agree = (a - b).abs() <= WARMUP_AGREEMENT * a.max(b);
    agree || spent >= budget
}

/// Timed iterations for a size whose settled call takes `one_iter`: as many
/// as fit in `budget`, at least [`MIN_TIMED_ITERS`] and at most
/// [`MAX_TIMED_ITERS`], but no more than fit in `time_left` before the
/// deadline (and always one).
pub fn timed_iters(budget: Duration, time_left: Option<Duration>, one_iter: Duration) -> u32 {
    if one_iter.is_zero() {
        return MAX_TIMED_ITERS;
    }
    let fits = |d: Duration| (d.as_secs_f64() / one_iter.as_secs_f64()).floor() as u32;
    let wanted = fits(budget).clamp(MIN_TIMED_ITERS, MAX_TIMED_ITERS);
    match time_left {
        Some(left) => wanted.min(fits(left)).max(1),
        None => wanted,
    }
}

/// Time for one size: the planned budget, but no more than what is left
/// before the deadline. A size started late (the first one after a slow
/// set-up, which always runs) gets zero and so does the least work that
/// still measures: one warm-up and one timed iteration.
pub fn size_budget(planned: Duration, deadline: Option<Instant>, now: Instant) -> Duration {
    match deadline {
        Some(d) => planned.min(d.saturating_duration_since(now)),
        None => planned,
    }
}

/// Period of the fill pattern: a prime, so that no power-of-two size or
/// chunk boundary lines up with it and a shifted or stale chunk shows.
const PATTERN_PERIOD: u32 = 1021;

/// The value rank `rank` contributes at element `index`: a small integer
/// (1..=1021), different per rank, so every sum is exact in float32 for
/// any realistic rank count (1021 x 16384 < 2^24).
pub fn pattern(index: u64, rank: u32) -> f32 {
    let step = 2 * u64::from(rank) + 1;
    ((index.wrapping_mul(step) + u64::from(rank)) % u64::from(PATTERN_PERIOD) + 1) as f32
}

/// Fill `buf` with rank `rank`'s pattern from element 0.
pub fn fill_pattern(buf: &mut [f32], rank: u32) {
    let period = PATTERN_PERIOD;
    let step = (2 * rank + 1) % period;
    let mut v = rank % period;
    for x in buf.iter_mut() {
        *x = (v + 1) as f32;
        v += step;
        if v >= period {
            v -= period;
        }
    }
}

/// The expected all-reduce sum at element `index` for `n` ranks, by period
/// position (the sum is periodic with [`PATTERN_PERIOD`]).
pub fn expected_table(n: u32) -> Vec<f32> {
    (0..u64::from(PATTERN_PERIOD))
        .map(|i| (0..n).map(|r| pattern(i, r)).sum())
        .collect()
}

/// Compare one rank's result with the expected sums. Returns the number of
/// wrong elements and the first one.
pub fn verify(result: &[f32], expected: &[f32], rank: u32) -> (u64, Option<WrongValue>) {
    let mut wrong = 0u64;
    let mut first = None;
    let period = expected.len();
    if period == 0 {
        return (result.len() as u64, None);
    }
    let mut k = 0usize;
    for (i, &got) in result.iter().enumerate() {
        let want = expected[k];
        // The sums are small integers: exact equality is the right test.
        #[allow(clippy::float_cmp)]
        if got != want {
            wrong += 1;
            if first.is_none() {
                first = Some(WrongValue {
                    rank,
                    index: i as u64,
                    got,
                    expected: want,
                });
            }
        }
        k += 1;
        if k == period {
            k = 0;
        }
    }
    (wrong, first)
}

/// A human size: 8 B, 256 KiB, 1 GiB.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes;
    let mut unit = 0;
    while unit < UNITS.len() - 1 && value >= 1024 && value % 1024 == 0 {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

fn cuda_err(step: &str, gpu: Option<u32>, e: cudarc::driver::DriverError) -> AllReduceFailure {
    // The CUresult's name (CUDA_ERROR_OUT_OF_MEMORY); asking libcuda for the
    // description could itself fail on a broken driver.
    AllReduceFailure::Cuda {
        step: step.to_string(),
        gpu,
        error: format!("{:?}", e.0),
    }
}

/// Device memory from `cuMemAlloc`: ordinary device memory, which peers
/// reach through peer access, as PyTorch's caching allocator gets it
/// (`cudaMalloc`). Not cudarc's `alloc_zeros`: where the GPU supports memory
/// pools that is `cuMemAllocAsync`, pool memory no other GPU may touch
/// unless `cuMemPoolSetAccess` granted it, and NCCL before 2.23 with every
/// rank in one process writes into its peers' buffers directly: an illegal
/// address on a healthy machine (CUDA Programming Guide, stream-ordered
/// allocator; NCCL's NCCL_P2P_DIRECT_DISABLE documentation). Not a
/// `CudaSlice` either: its drop frees with `cuMemFreeAsync` on contexts with
/// pools. Freed with `cuMemFree` on drop.
struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    /// float32 elements.
    len: usize,
}

impl DeviceBuffer {
    fn alloc(
        ctx: &Arc<CudaContext>,
        len: usize,
    ) -> Result<DeviceBuffer, cudarc::driver::DriverError> {
        ctx.bind_to_thread()?;
        // SAFETY: a plain allocation on the context bound just above.
        let ptr = unsafe { result::malloc_sync(len * std::mem::size_of::<f32>()) }?;
        Ok(DeviceBuffer {
            ctx: Arc::clone(ctx),
            ptr,
            len,
        })
    }

    /// Zero the first `count` elements, in `stream`'s order.
    fn zero(&self, stream: &CudaStream, count: usize) -> Result<(), cudarc::driver::DriverError> {
        self.ctx.bind_to_thread()?;
        // SAFETY: `ptr` holds `len` >= `count` floats on the stream's GPU.
        unsafe { result::memset_d8_async(self.ptr, 0, count.min(self.len) * 4, stream.cu_stream()) }
    }

    /// Copy `host` in and wait for the copy.
    fn write(&self, stream: &CudaStream, host: &[f32]) -> Result<(), cudarc::driver::DriverError> {
        self.ctx.bind_to_thread()?;
        let host = &host[..host.len().min(self.len)];
        // SAFETY: `ptr` holds at least host.len() floats; the host slice
        // outlives the copy, which is waited for before returning.
        unsafe { result::memcpy_htod_async(self.ptr, host, stream.cu_stream()) }?;
        stream.synchronize()
    }

    /// Copy the first host.len() elements out and wait for the copy.
    fn read(
        &self,
        stream: &CudaStream,
        host: &mut [f32],
    ) -> Result<(), cudarc::driver::DriverError> {
        self.ctx.bind_to_thread()?;
        let n = host.len().min(self.len);
        // SAFETY: as in `write`, in the other direction.
        unsafe { result::memcpy_dtoh_async(&mut host[..n], self.ptr, stream.cu_stream()) }?;
        stream.synchronize()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // After a sticky fault both calls fail; the process exits soon.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc and is freed once, here.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Everything one rank owns.
struct Rank {
    ordinal: u32,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    send: Option<DeviceBuffer>,
    recv: Option<DeviceBuffer>,
}

/// The communicators; destroyed (or aborted after an error) on drop.
struct Comms<'a> {
    api: &'a NcclApi,
    comms: Vec<NcclComm>,
    broken: bool,
}

impl Drop for Comms<'_> {
    fn drop(&mut self) {
        stage(if self.broken {
            "ncclCommAbort"
        } else {
            "ncclCommDestroy"
        });
        for &c in &self.comms {
            if c.is_null() {
                continue;
            }
            // SAFETY: each comm came from ncclCommInitAll and is released once.
            unsafe {
                match (self.broken, self.api.comm_abort) {
                    (true, Some(abort)) => abort(c),
                    _ => (self.api.comm_destroy)(c),
                };
            }
        }
    }
}

/// Run the all-reduce over every visible GPU with the NCCL at
/// `plan.nccl_lib`. Call only in a child-isolated check.
pub fn run_allreduce(plan: &AllReducePlan) -> Result<AllReduceRun, AllReduceFailure> {
    run_allreduce_again(plan, &mut |_| None)
}

/// An all-reduce's capture key: the library, the sizes and the transports
/// the calling check turned off in this process's environment
/// (nccl.nic_path's NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), which make it
/// another measurement. Read from the process itself, not through the
/// boundary: the check set them, the machine did not.
fn allreduce_key(plan: &AllReducePlan) -> String {
    let off: String = ["NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"]
        .iter()
        .filter_map(|v| std::env::var(v).ok().map(|x| format!(" {v}={x}")))
        .collect();
    format!("{}, {:?}{off}", plan.nccl_lib.display(), plan.sizes)
}

/// [`run_allreduce_again_live`] through the boundary: the measured figures
/// (every size, algorithm and repeat) are the answer, so a replay judges the
/// same numbers; `again` is not asked under replay (its choices are in them).
pub fn run_allreduce_again(
    plan: &AllReducePlan,
    again: &mut dyn FnMut(&AllReduceRun) -> Option<u64>,
) -> Result<AllReduceRun, AllReduceFailure> {
    crate::seam::answer("nccl::run_allreduce", &allreduce_key(plan), || {
        run_allreduce_again_live(plan, again)
    })
}

/// [`run_allreduce`], then, on the same communicators, measure again the
/// size `again` names for the run so far (its verdict is the caller's), for
/// as long as it names one and the plan's deadline has not passed.
fn run_allreduce_again_live(
    plan: &AllReducePlan,
    again: &mut dyn FnMut(&AllReduceRun) -> Option<u64>,
) -> Result<AllReduceRun, AllReduceFailure> {
    let n = gpu_count()?;
    let mut tuning_log = TuningLog::start();
    stage("dlopen libnccl");
    let api = NcclApi::load(&plan.nccl_lib).map_err(|detail| AllReduceFailure::NcclLoad {
        path: plan.nccl_lib.clone(),
        detail,
    })?;
    let nccl_version = api.version();
    let (mut ranks, mut gpus) = open_gpus(n)?;
    let mut comms = init_comms(&api, n)?;
    let (sizes, skipped_for_memory, mut host) =
        allocate_buffers(&plan.sizes, &mut ranks, &mut gpus)?;
    let expected = expected_table(n);
    // One size on the communicators; an error leaves them to be aborted.
    let mut measure = |bytes: u64| {
        one_size(
            &api, &mut comms, &mut ranks, bytes, plan, &expected, &mut host,
        )
        .inspect_err(|_| comms.broken = true)
    };
    let mut results = Vec::with_capacity(sizes.len());
    let mut skipped_for_time = Vec::new();
    for (k, &bytes) in sizes.iter().enumerate() {
        // The first size always runs, however long set-up took: skipping it
        // would report nothing about the all-reduce itself, and a hang in it
        // is the runner's timeout to name.
        if k > 0 && plan.deadline.is_some_and(|d| Instant::now() >= d) {
            skipped_for_time.extend_from_slice(&sizes[k..]);
            break;
        }
        results.push(measure(bytes)?);
    }
    let mut choices = || {
        tuning_log
            .as_mut()
            .map(TuningLog::choices)
            .unwrap_or_default()
    };
    let mut run = AllReduceRun {
        gpus,
        nccl_version,
        results,
        skipped_for_memory,
        skipped_for_time,
        tuning: choices(),
        repeats: Vec::new(),
    };
    while let Some(bytes) = again(&run) {
        if plan.deadline.is_some_and(|d| Instant::now() >= d) || !sizes.contains(&bytes) {
            break;
        }
        run.repeats.push(measure(bytes)?);
        run.tuning = choices();
    }
    drop(comms);
    run.tuning = choices();
    Ok(run)
}

/// Load libcuda, cuInit, and count the GPUs CUDA sees.
fn gpu_count() -> Result<u32, AllReduceFailure> {
    stage("dlopen libcuda.so.1");
    // cudarc panics on first use when libcuda is missing: look first.
    // SAFETY: only tries to dlopen the driver library.
    if !unsafe { sys::is_culib_present() } {
        return Err(AllReduceFailure::NoDriver);
    }
    stage("cuInit");
    match CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(n as u32),
        Ok(_) => Err(AllReduceFailure::NoGpu),
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => Err(AllReduceFailure::NoGpu),
        Err(e) => Err(AllReduceFailure::DriverInit {
            error: format!("{:?}", e.0),
            library: super::cuda::mapped_library("libcuda.so"),
        }),
    }
}

/// One communicator per GPU, all in this process (ncclCommInitAll).
fn init_comms(api: &NcclApi, n: u32) -> Result<Comms<'_>, AllReduceFailure> {
    stage("ncclCommInitAll");
    let devlist: Vec<c_int> = (0..n as c_int).collect();
    let mut comms = Comms {
        api,
        comms: vec![std::ptr::null_mut(); n as usize],
        broken: false,
    };
    // SAFETY: `comms` has room for n communicators; devlist has n ordinals.
    let rc = unsafe { (api.comm_init_all)(comms.comms.as_mut_ptr(), n as c_int, devlist.as_ptr()) };
    if rc != NCCL_SUCCESS {
        comms
            .comms
            .iter_mut()
            .for_each(|c| *c = std::ptr::null_mut());
        return Err(api.failure("ncclCommInitAll", rc, std::ptr::null_mut()));
    }
    Ok(comms)
}

/// A context and a stream on every GPU, and what CUDA says each GPU is.
fn open_gpus(n: u32) -> Result<(Vec<Rank>, Vec<GpuDesc>), AllReduceFailure> {
    let mut ranks: Vec<Rank> = Vec::with_capacity(n as usize);
    let mut gpus: Vec<GpuDesc> = Vec::with_capacity(n as usize);
    for ordinal in 0..n {
        stage(&format!("cuDevicePrimaryCtxRetain GPU {ordinal}"));
        let ctx = CudaContext::new(ordinal as usize)
            .map_err(|e| cuda_err("create a CUDA context", Some(ordinal), e))?;
        // One stream per GPU and explicit synchronisation: cudarc's per-buffer
        // event tracking would only add work inside the timed loop.
        // SAFETY: set before any buffer of this context exists.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| cuda_err("create a stream", Some(ordinal), e))?;
        let name = ctx.name().unwrap_or_else(|_| format!("GPU {ordinal}"));
        let total_bytes = ctx.total_mem().ok().map(|b| b as u64);
        let uuid = super::cuda::device_uuid(ctx.cu_device());
        gpus.push(GpuDesc {
            ordinal,
            name,
            uuid,
            free_bytes: None,
            total_bytes,
        });
        ranks.push(Rank {
            ordinal,
            ctx,
            stream,
            send: None,
            recv: None,
        });
    }

    Ok((ranks, gpus))
}

/// Size the buffers to what is free now that NCCL holds its own, then
/// allocate and fill them: rank r's send buffer holds pattern(i, r). Gives
/// the sizes that fit, those that did not, and a host buffer as large as the
/// largest.
#[allow(clippy::type_complexity)]
fn allocate_buffers(
    planned: &[u64],
    ranks: &mut [Rank],
    gpus: &mut [GpuDesc],
) -> Result<(Vec<u64>, Vec<u64>, Vec<f32>), AllReduceFailure> {
    // Size the buffers to what is free now that NCCL holds its own.
    let mut min_free: Option<(u32, u64)> = None;
    for (rank, gpu) in ranks.iter().zip(gpus.iter_mut()) {
        if let Ok((free, _)) = rank.ctx.mem_get_info() {
            gpu.free_bytes = Some(free as u64);
            if min_free.is_none_or(|(_, f)| (free as u64) < f) {
                min_free = Some((rank.ordinal, free as u64));
            }
        }
    }
    let fit = min_free.map(|(_, free)| max_buffer_bytes(free));
    let (sizes, skipped_for_memory) = fit_sizes(planned, fit);
    let Some(&max_bytes) = sizes.last() else {
        let (gpu, free_bytes) = min_free.unwrap_or((0, 0));
        return Err(AllReduceFailure::NoMemory { gpu, free_bytes });
    };
    let max_count = (max_bytes / 4) as usize;

    // Allocate and fill: rank r's send buffer holds pattern(i, r).
    let mut host: Vec<f32> = vec![0.0; max_count];
    for rank in ranks.iter_mut() {
        let gpu = Some(rank.ordinal);
        stage(&format!("cuMemAlloc GPU {}", rank.ordinal));
        let send = DeviceBuffer::alloc(&rank.ctx, max_count)
            .map_err(|e| cuda_err("allocate the send buffer", gpu, e))?;
        let recv = DeviceBuffer::alloc(&rank.ctx, max_count)
            .map_err(|e| cuda_err("allocate the receive buffer", gpu, e))?;
        fill_pattern(&mut host, rank.ordinal);
        stage(&format!("cuMemcpyHtoD GPU {}", rank.ordinal));
        send.write(&rank.stream, &host)
            .map_err(|e| cuda_err("copy the pattern to the GPU", gpu, e))?;
        rank.send = Some(send);
        rank.recv = Some(recv);
    }

    Ok((sizes, skipped_for_memory, host))
}

/// Launch one all-reduce of `count` floats on every rank, as one NCCL group.
fn launch(
    api: &NcclApi,
    comms: &Comms<'_>,
    ranks: &mut [Rank],
    count: usize,
) -> Result<(), AllReduceFailure> {
    // SAFETY: plain calls with the nccl.h signatures; every pointer is a live
    // device buffer of at least `count` floats on the rank's own GPU, and the
    // stream belongs to that GPU's context.
    unsafe {
        api.check("ncclGroupStart", (api.group_start)())?;
        let mut launched = Ok(());
        for (rank, &comm) in ranks.iter().zip(comms.comms.iter()) {
            let (Some(send), Some(recv)) = (rank.send.as_ref(), rank.recv.as_ref()) else {
                continue;
            };
            let rc = (api.all_reduce)(
                send.ptr as *const c_void,
                recv.ptr as *mut c_void,
                count,
                NCCL_FLOAT32,
                NCCL_SUM,
                comm,
                rank.stream.cu_stream(),
            );
            if rc != NCCL_SUCCESS {
                launched = Err(api.failure("ncclAllReduce", rc, comm));
                break;
            }
        }
        // Always close the group, even after a failed enqueue.
        let end = (api.group_end)();
        launched?;
        if end != NCCL_SUCCESS && end != NCCL_IN_PROGRESS {
            return Err(api.failure("ncclGroupEnd", end, std::ptr::null_mut()));
        }
    }
    Ok(())
}

/// How long to sleep between two looks at the streams and communicators
/// while a collective runs: short next to a 256 MiB all-reduce (a few ms on
/// NVLink), long enough not to busy-spin a core.
const POLL_INTERVAL: Duration = Duration::from_micros(200);

/// Wait for every rank's stream while asking NCCL about every communicator,
/// the way NCCL's documentation ("Communicators": error handling with
/// ncclCommGetAsyncError) and nccl-tests' testStreamSynchronize do: poll
/// cuStreamQuery and ncclCommGetAsyncError together, because after a
/// network or peer error the kernels never finish, so cuStreamSynchronize
/// would block for ever and NCCL's own error (the only account of the
/// fault) would never be read. An error returns at once (the caller
/// aborts the communicators); so does a collective still running at
/// `give_up`.
fn sync_all(
    api: &NcclApi,
    comms: &Comms<'_>,
    ranks: &[Rank],
    what: &str,
    give_up: Option<Instant>,
) -> Result<(), AllReduceFailure> {
    stage(&format!("cuStreamQuery / ncclCommGetAsyncError ({what})"));
    let started = Instant::now();
    let mut running: Vec<&Rank> = ranks.iter().collect();
    loop {
        let mut still = Vec::with_capacity(running.len());
        for rank in running {
            if !stream_done(rank).map_err(|e| cuda_err(what, Some(rank.ordinal), e))? {
                still.push(rank);
            }
        }
        running = still;
        async_errors(api, comms, what)?;
        if running.is_empty() {
            return Ok(());
        }
        if give_up.is_some_and(|d| Instant::now() >= d) {
            return Err(AllReduceFailure::Stuck {
                step: what.to_string(),
                gpus: running.iter().map(|r| r.ordinal).collect(),
                waited: started.elapsed(),
            });
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Whether everything queued on the rank's stream has finished
/// (cuStreamQuery: CUDA_SUCCESS, or CUDA_ERROR_NOT_READY while it runs).
fn stream_done(rank: &Rank) -> Result<bool, cudarc::driver::DriverError> {
    rank.ctx.bind_to_thread()?;
    // SAFETY: the stream belongs to the context bound above.
    match unsafe { sys::cuStreamQuery(rank.stream.cu_stream()) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        e => Err(cudarc::driver::DriverError(e)),
    }
}

/// The first communicator whose asynchronous error is set, as NCCL words it.
fn async_errors(api: &NcclApi, comms: &Comms<'_>, what: &str) -> Result<(), AllReduceFailure> {
    let Some(get) = api.comm_get_async_error else {
        return Ok(());
    };
    for &comm in &comms.comms {
        let mut state: NcclResult = NCCL_SUCCESS;
        // SAFETY: `ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*)`.
        let rc = unsafe { get(comm, &mut state) };
        if rc != NCCL_SUCCESS {
            return Err(api.failure("ncclCommGetAsyncError", rc, comm));
        }
        if state != NCCL_SUCCESS && state != NCCL_IN_PROGRESS {
            return Err(api.failure(what, state, comm));
        }
    }
    Ok(())
}

fn one_size(
    api: &NcclApi,
    comms: &mut Comms<'_>,
    ranks: &mut [Rank],
    bytes: u64,
    plan: &AllReducePlan,
    expected: &[f32],
    host: &mut [f32],
) -> Result<SizeResult, AllReduceFailure> {
    let count = (bytes / 4) as usize;
    let label = format_bytes(bytes);
    let budget = size_budget(plan.budget_per_size, plan.deadline, Instant::now());

    // A stale result must not pass: zero the receive buffers (no expected
    // sum is zero, every contribution is at least 1).
    for rank in ranks.iter() {
        if let Some(recv) = rank.recv.as_ref() {
            recv.zero(&rank.stream, count)
                .map_err(|e| cuda_err("clear the receive buffer", Some(rank.ordinal), e))?;
        }
    }

    let (warmup_iters, last_iter) =
        warm_up(api, comms, ranks, count, budget / 2, &label, plan.give_up)?;
    let time_left = plan
        .deadline
        .map(|d| d.saturating_duration_since(Instant::now()));
    let iters = timed_iters(budget / 2, time_left, last_iter);
    let slowest_ms = time_iterations(api, comms, ranks, count, iters, &label, plan.give_up)?;
    let (wrong_per_rank, first_wrong) = verify_results(ranks, count, expected, host, &label)?;
    Ok(SizeResult {
        bytes,
        count: count as u64,
        warmup_iters,
        iters,
        time_us: slowest_ms * 1000.0 / f64::from(iters.max(1)),
        wrong: wrong_per_rank.iter().sum(),
        wrong_per_rank,
        first_wrong,
    })
}

/// Warm up (connections are set up lazily on the first call) until two
/// consecutive calls agree (see [`warm_up_done`]), and learn how long a
/// settled call takes to size the timed loop. Gives the warm-up iterations
/// run and the last one's time.
fn warm_up(
    api: &NcclApi,
    comms: &Comms<'_>,
    ranks: &mut [Rank],
    count: usize,
    budget: Duration,
    label: &str,
    give_up: Option<Instant>,
) -> Result<(u32, Duration), AllReduceFailure> {
    let warmup_label = format!("ncclAllReduce {label} (warm-up)");
    let mut times: Vec<Duration> = Vec::new();
    let started = Instant::now();
    while !warm_up_done(&times, started.elapsed(), budget) {
        let t = Instant::now();
        stage(&warmup_label);
        launch(api, comms, ranks, count)?;
        sync_all(api, comms, ranks, &warmup_label, give_up)?;
        times.push(t.elapsed());
    }
    let last_iter = times.last().copied().unwrap_or_default();
    let warmup_iters = times.len() as u32;
    Ok((warmup_iters, last_iter))
}

/// `iters` all-reduces between CUDA events on each rank's stream: the
/// slowest GPU's time for all of them, in ms.
fn time_iterations(
    api: &NcclApi,
    comms: &Comms<'_>,
    ranks: &mut [Rank],
    count: usize,
    iters: u32,
    label: &str,
    give_up: Option<Instant>,
) -> Result<f64, AllReduceFailure> {
    // Timing enabled: cudarc creates events without timing unless asked.
    let mut events = Vec::with_capacity(ranks.len());
    for rank in ranks.iter() {
        let gpu = Some(rank.ordinal);
        let start = rank
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda_err("create a CUDA event", gpu, e))?;
        let end = rank
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda_err("create a CUDA event", gpu, e))?;
        start
            .record(&rank.stream)
            .map_err(|e| cuda_err("record a CUDA event", gpu, e))?;
        events.push((start, end));
    }
    let timed_label = format!("ncclAllReduce {label}");
    stage(&timed_label);
    for _ in 0..iters {
        launch(api, comms, ranks, count)?;
    }
    for (rank, (_, end)) in ranks.iter().zip(events.iter()) {
        end.record(&rank.stream)
            .map_err(|e| cuda_err("record a CUDA event", Some(rank.ordinal), e))?;
    }
    sync_all(api, comms, ranks, &timed_label, give_up)?;
    let mut slowest_ms = 0f64;
    for (rank, (start, end)) in ranks.iter().zip(events.iter()) {
        let ms = start
            .elapsed_ms(end)
            .map_err(|e| cuda_err("read the CUDA event timer", Some(rank.ordinal), e))?;
        slowest_ms = slowest_ms.max(f64::from(ms));
    }

    Ok(slowest_ms)
}

/// Copy every rank's result back and check every element: wrong elements
/// per rank, and the first wrong value.
fn verify_results(
    ranks: &[Rank],
    count: usize,
    expected: &[f32],
    host: &mut [f32],
    label: &str,
) -> Result<(Vec<u64>, Option<WrongValue>), AllReduceFailure> {
    let mut wrong_per_rank = Vec::with_capacity(ranks.len());
    let mut first_wrong = None;
    for rank in ranks.iter() {
        stage(&format!(
            "cuMemcpyDtoH GPU {} (verify {label})",
            rank.ordinal
        ));
        let Some(recv) = rank.recv.as_ref() else {
            continue;
        };
        recv.read(&rank.stream, &mut host[..count])
            .map_err(|e| cuda_err("copy the result back", Some(rank.ordinal), e))?;
        let (wrong, first) = verify(&host[..count], expected, rank.ordinal);
        wrong_per_rank.push(wrong);
        if first_wrong.is_none() {
            first_wrong = first;
        }
    }
    Ok((wrong_per_rank, first_wrong))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_both_version_encodings() {
        // nccl.h: NCCL_VERSION(2,8,4) = 2804 (old), NCCL_VERSION(2,9,6) = 20906.
        assert_eq!(NcclVersion::from_code(2804).unwrap().to_string(), "2.8.4");
        assert_eq!(NcclVersion::from_code(2708).unwrap().to_string(), "2.7.8");
        assert_eq!(NcclVersion::from_code(20906).unwrap().to_string(), "2.9.6");
        assert_eq!(NcclVersion::from_code(22707).unwrap().to_string(), "2.27.7");
        assert_eq!(NcclVersion::from_code(21805).unwrap().to_string(), "2.18.5");
        assert_eq!(NcclVersion::from_code(0), None);
        assert_eq!(NcclVersion::from_code(-1), None);
    }

    #[test]
    fn parses_version_text_from_torch() {
        let v = NcclVersion {
            major: 2,
            minor: 27,
            patch: 7,
        };
        assert_eq!(NcclVersion::parse("2.27.7"), Some(v));
        assert_eq!(NcclVersion::parse("(2, 27, 7)"), Some(v));
        assert_eq!(NcclVersion::parse("2.27.7+cuda12.9"), Some(v));
        assert_eq!(NcclVersion::parse("2.27"), None);
        assert_eq!(NcclVersion::parse("unknown"), None);
    }

    #[test]
    fn environment_values_that_are_not_utf8_are_kept_and_named() {
        use std::ffi::OsStr;
        let os = |b: &[u8]| OsStr::from_bytes(b).to_os_string();
        let (vars, not_utf8) = environment_nccl_vars([
            (os(b"NCCL_DEBUG"), os(b"WARN\xff")),
            (os(b"NCCL_IB_HCA"), os(b"mlx5")),
            (os(b"PATH"), os(b"/bin\xff")),
        ]);
        assert_eq!(
            vars,
            vec![
                ("NCCL_DEBUG".to_string(), "WARN\u{fffd}".to_string()),
                ("NCCL_IB_HCA".to_string(), "mlx5".to_string())
            ]
        );
        assert_eq!(not_utf8, vec!["NCCL_DEBUG".to_string()]);
    }

    #[test]
    fn conf_lines_and_precedence() {
        let parsed = parse_conf(
            "# comment\nNCCL_DEBUG=WARN\n  NCCL_SOCKET_IFNAME = =eth0 # trailing\nbad line\n=x\n",
        );
        assert_eq!(
            parsed,
            vec![
                ("NCCL_DEBUG".to_string(), "WARN".to_string()),
                ("NCCL_SOCKET_IFNAME".to_string(), "=eth0".to_string())
            ]
        );
        let user = PathBuf::from("/home/u/.nccl.conf");
        let system = PathBuf::from("/etc/nccl.conf");
        let vars = merge_vars(
            vec![
                ("NCCL_DEBUG".to_string(), "INFO".to_string()),
                ("PATH".to_string(), "/bin".to_string()),
            ],
            &[
                (
                    user.clone(),
                    vec![
                        ("NCCL_DEBUG".to_string(), "WARN".to_string()),
                        ("NCCL_IB_HCA".to_string(), "mlx5".to_string()),
                    ],
                ),
                (
                    system,
                    vec![("NCCL_IB_HCA".to_string(), "mlx4".to_string())],
                ),
            ],
        );
        assert_eq!(vars.len(), 2, "{vars:?}");
        assert_eq!(vars[0].name, "NCCL_DEBUG");
        assert_eq!(
            (vars[0].value.as_str(), &vars[0].origin),
            ("INFO", &VarOrigin::Environment)
        );
        assert_eq!(
            (vars[1].value.as_str(), &vars[1].origin),
            ("mlx5", &VarOrigin::File(user))
        );
    }

    #[test]
    fn ib_devices_and_ports_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        for (dev, ports) in [("mlx5_1", vec!["1"]), ("mlx5_0", vec!["2", "1"])] {
            for p in ports {
                std::fs::create_dir_all(dir.path().join(dev).join("ports").join(p)).unwrap();
            }
        }
        let devs = ib_devices(dir.path());
        assert_eq!(
            devs,
            vec![
                IbDevice {
                    name: "mlx5_0".into(),
                    ports: vec![1, 2]
                },
                IbDevice {
                    name: "mlx5_1".into(),
                    ports: vec![1]
                },
            ]
        );
        assert!(ib_devices(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn interface_speed_from_sysfs_and_unknown_without_guessing() {
        let dir = tempfile::tempdir().unwrap();
        for (iface, speed) in [("eth0", "100000\n"), ("eth1", "-1\n"), ("eth2", "fast")] {
            let d = dir.path().join("class/net").join(iface);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("speed"), speed).unwrap();
        }
        assert_eq!(interface_speed_mbps(dir.path(), "eth0"), Some(100_000));
        assert_eq!(interface_speed_mbps(dir.path(), "eth1"), None, "down");
        assert_eq!(interface_speed_mbps(dir.path(), "eth2"), None);
        assert_eq!(interface_speed_mbps(dir.path(), "lo"), None, "no file");
    }

    #[test]
    fn this_host_has_a_loopback_interface() {
        // lo carries 127.0.0.1, so NCCL could use it.
        let (names, unaddressed) = interfaces().unwrap();
        assert!(names.iter().any(|n| n == "lo"), "{names:?}");
        assert!(!unaddressed.iter().any(|n| n == "lo"), "{unaddressed:?}");
    }

    #[test]
    fn pattern_fill_matches_the_formula_and_sums_are_exact() {
        let mut buf = vec![0f32; 5000];
        for rank in [0u32, 1, 7, 63] {
            fill_pattern(&mut buf, rank);
            for (i, &x) in buf.iter().enumerate() {
                assert_eq!(x, pattern(i as u64, rank), "rank {rank} index {i}");
                assert!((1.0..=PATTERN_PERIOD as f32).contains(&x));
            }
        }
        // Ranks differ, so a rank sending another rank's data is caught.
        assert_ne!(pattern(10, 0), pattern(10, 1));
        let table = expected_table(8);
        assert_eq!(table.len(), PATTERN_PERIOD as usize);
        let direct: f32 = (0..8).map(|r| pattern(3, r)).sum();
        assert_eq!(table[3], direct);
        assert!(table.iter().all(|&s| s >= 8.0 && s.fract() == 0.0));
    }

    #[test]
    fn verify_counts_every_wrong_element() {
        let n = 4;
        let table = expected_table(n);
        let mut result: Vec<f32> = (0..3000u64).map(|i| table[(i % 1021) as usize]).collect();
        assert_eq!(verify(&result, &table, 2), (0, None));
        result[1500] += 1.0;
        result[2999] = 0.0;
        let (wrong, first) = verify(&result, &table, 2);
        assert_eq!(wrong, 2);
        let first = first.unwrap();
        assert_eq!((first.rank, first.index), (2, 1500));
        assert_eq!(first.got, first.expected + 1.0);
        // A buffer still holding zeros (nothing written) is all wrong.
        assert_eq!(verify(&[0.0; 100], &table, 0).0, 100);
    }

    #[test]
    fn iterations_fit_the_budget() {
        let budget = Duration::from_secs(1);
        assert_eq!(
            timed_iters(budget, None, Duration::from_micros(20)),
            MAX_TIMED_ITERS
        );
        assert_eq!(timed_iters(budget, None, Duration::from_millis(100)), 10);
        assert_eq!(timed_iters(budget, None, Duration::ZERO), MAX_TIMED_ITERS);
        // A slow call still gets the minimum, when the deadline allows it.
        let slow = Duration::from_millis(600);
        assert_eq!(timed_iters(budget, None, slow), MIN_TIMED_ITERS);
        let far = Some(Duration::from_secs(30));
        assert_eq!(timed_iters(budget, far, slow), MIN_TIMED_ITERS);
        // Close to the deadline: what fits, and always one.
        let near = Some(Duration::from_millis(1900));
        assert_eq!(timed_iters(budget, near, slow), 3);
        assert_eq!(timed_iters(budget, Some(Duration::ZERO), slow), 1);
    }

    #[test]
    fn warm_up_lasts_until_two_calls_agree() {
        let ms = Duration::from_millis;
        let budget = ms(1500);
        // The first call carries NCCL's connection set-up: never enough.
        assert!(!warm_up_done(&[], ms(0), budget));
        assert!(!warm_up_done(&[ms(4000)], ms(4000), budget));
        // Set-up over, but one settled call is not yet agreement...
        assert!(!warm_up_done(&[ms(4000), ms(40)], ms(4040), ms(5000)));
        // ...two that agree within 10% are.
        assert!(warm_up_done(
            &[ms(4000), ms(40), ms(43)],
            ms(4083),
            ms(5000)
        ));
        assert!(!warm_up_done(&[ms(60), ms(40)], ms(100), budget));
        // Out of budget with two calls, or at the cap: stop anyway.
        assert!(warm_up_done(&[ms(4000), ms(40)], ms(4040), budget));
        let noisy = [ms(10), ms(20), ms(10), ms(20), ms(10)];
        assert!(warm_up_done(&noisy, ms(70), budget));
        // The timed loop is then sized from the settled call, not the set-up.
        assert_eq!(timed_iters(budget / 2, None, ms(43)), 17);
    }

    #[test]
    fn a_size_gets_no_more_time_than_is_left() {
        let now = Instant::now();
        let three = Duration::from_secs(3);
        assert_eq!(size_budget(three, None, now), three);
        assert_eq!(
            size_budget(three, Some(now + Duration::from_secs(10)), now),
            three
        );
        assert_eq!(
            size_budget(three, Some(now + Duration::from_secs(1)), now),
            Duration::from_secs(1)
        );
        // Past the deadline: nothing to spare, so one iteration of each kind.
        let late = size_budget(three, Some(now), now + Duration::from_secs(1));
        assert_eq!(late, Duration::ZERO);
        assert_eq!(
            timed_iters(late / 2, Some(Duration::ZERO), Duration::from_millis(40)),
            1
        );
    }

    #[test]
    fn buffers_leave_room_for_nccl() {
        // 80 GB card: 1 GiB reserved, the rest split over two buffers.
        let free = 79u64 << 30;
        assert_eq!(max_buffer_bytes(free), (78u64 << 30) / 2);
        // A small (or fake) GPU with 64 MiB free keeps a quarter back.
        assert_eq!(max_buffer_bytes(64 << 20), 24 << 20);
        assert_eq!(max_buffer_bytes(0), 0);
    }

    #[test]
    fn sizes_that_do_not_fit_are_replaced_by_the_largest_that_does() {
        let mib = 1u64 << 20;
        // Standard profile on a GPU with room for 36 MiB buffers: run 32 MiB.
        assert_eq!(
            fit_sizes(&[256 * mib], Some(36 * mib)),
            (vec![32 * mib], vec![256 * mib])
        );
        // A sweep keeps what fits; 32 MiB is already in it.
        let sweep: Vec<u64> = (3..=30).map(|p| 1u64 << p).collect();
        let (run, skipped) = fit_sizes(&sweep, Some(36 * mib));
        assert_eq!(*run.last().unwrap(), 32 * mib);
        assert_eq!(run.len() + skipped.len(), sweep.len());
        assert_eq!(skipped[0], 64 * mib);
        // Everything fits, or nothing is known: unchanged.
        assert_eq!(
            fit_sizes(&[256 * mib], Some(1 << 40)),
            (vec![256 * mib], vec![])
        );
        assert_eq!(fit_sizes(&[256 * mib], None), (vec![256 * mib], vec![]));
        // Not even 8 bytes.
        assert_eq!(fit_sizes(&[256 * mib], Some(4)), (vec![], vec![256 * mib]));
    }

    #[test]
    fn nccls_tuning_lines_give_the_algorithm_in_both_spellings() {
        let choice = |b: u64, a: &str, p: &str| TuningChoice {
            bytes: b,
            algorithm: a.into(),
            protocol: p.into(),
        };
        assert_eq!(
            parse_tuning_line(
                "gpu07:3151:3151 [0] NCCL INFO AllReduce: 268435456 Bytes -> Algo NVLS proto \
                 Simple channel{Lo..Hi}={0..15}"
            ),
            Some(choice(268435456, "NVLS", "Simple"))
        );
        assert_eq!(
            parse_tuning_line(
                "NCCL INFO AllReduce: 1024 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..0}"
            ),
            Some(choice(1024, "Tree", "Simple"))
        );
        // NCCL >= 2.24: ncclAlgoToString's names.
        for (logged, name) in [
            ("NVLS_TREE", "NVLSTree"),
            ("COLLNET_DIRECT", "CollNetDirect"),
            ("COLLNET_CHAIN", "CollNetChain"),
            ("PAT", "PAT"),
            ("RING", "Ring"),
        ] {
            assert_eq!(
                parse_tuning_line(&format!(
                    "h:1:1 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo {logged} proto \
                     SIMPLE channel{{Lo..Hi}}={{0..31}}"
                )),
                Some(choice(1 << 30, name, "Simple")),
                "{logged}"
            );
        }
        assert_eq!(
            parse_tuning_line(
                "node-0:309:309 [0] NCCL INFO 33554432 Bytes -> Algo 1 proto 2 time 2860.208008"
            ),
            Some(choice(33554432, "Ring", "Simple"))
        );
        // Other collectives, and other lines, are not the all-reduce's.
        assert_eq!(
            parse_tuning_line("NCCL INFO AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.2"),
            None
        );
        assert_eq!(
            parse_tuning_line("NCCL INFO NCCL version 2.27.7+cuda12.9"),
            None
        );
    }

    #[test]
    fn sizes_print_like_people_write_them() {
        assert_eq!(format_bytes(8), "8 B");
        assert_eq!(format_bytes(256 << 20), "256 MiB");
        assert_eq!(format_bytes(1 << 30), "1 GiB");
        assert_eq!(format_bytes(1536), "1536 B");
    }

    #[test]
    fn missing_nccl_library_is_a_load_error() {
        let err = NcclApi::load(Path::new("/nonexistent/libnccl.so.2"))
            .err()
            .unwrap();
        assert!(err.starts_with("cannot load"), "{err}");
    }
}

//! Probe: does this host need an NCCL network plugin (AWS EFA devices, an
//! NCCL_NET_PLUGIN setting, GCP GPUDirect-TCPX/TCPXO settings), and does the
//! plugin library NCCL would look up load, with which plugin API version.
//!
//! NCCL's lookup (NCCL documentation, "NCCL_NET_PLUGIN" and the net plugin
//! README, github.com/NVIDIA/nccl/tree/master/ext-net): with NCCL_NET_PLUGIN
//! unset it dlopens `libnccl-net.so`; set to a name it dlopens
//! `libnccl-net-<name>.so` (newer NCCL also takes a library file name or
//! path as given); `none` turns external plugins off. A plugin exports
//! versioned structs `ncclNetPlugin_v<N>` whose first field is
//! `const char* name`. Loading a library runs its initialisers, so the check
//! that calls [`load_plugin`] runs child-isolated.

use std::ffi::{c_char, CStr};
use std::path::{Path, PathBuf};

use super::stage;

/// The newest and oldest `ncclNetPlugin_v<N>` NCCL releases have looked for
/// (v2 in NCCL 2.4; v10 in NCCL 2.23, v11 in 2.27); the highest exported
/// one is what NCCL uses.
pub const PLUGIN_API_VERSIONS: std::ops::RangeInclusive<u32> = 2..=12;

/// Where cloud images install their plugin when it is not on the loader's
/// path (AWS EFA installer: aws-ofi-nccl; GCP: the TCPX / TCPXO (FasTrak)
/// and gIB images), so a "not found" can say where a copy lies.
pub const KNOWN_PLUGIN_DIRS: &[&str] = &[
    "/opt/amazon/ofi-nccl/lib",
    "/opt/amazon/ofi-nccl/lib64",
    "/opt/aws-ofi-nccl/lib",
    "/usr/local/tcpx/lib64",
    "/usr/local/fastrak/lib64",
    "/usr/local/gib/lib64",
    "/usr/local/nvidia/lib64",
];

/// The host facts that make a network plugin necessary.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PluginDemand {
    /// AWS EFA devices: RDMA devices named `efa*` or driven by `efa`
    /// (`rdmap16s27` with `device/driver -> .../efa`), or network
    /// interfaces whose driver is `efa`.
    pub efa_devices: Vec<String>,
    /// NCCL_NET_PLUGIN, when set.
    pub nccl_net_plugin: Option<String>,
    /// The NCCL_GPUDIRECTTCPX_* variables set (GCP A3 GPUDirect-TCPX).
    pub tcpx_vars: Vec<String>,
    /// The NCCL_FASTRAK_* variables set (GCP A3 Mega GPUDirect-TCPXO).
    pub tcpxo_vars: Vec<String>,
}

/// EFA devices under `<root>` (a folder standing for /sys).
pub fn efa_devices(root: &Path) -> Vec<String> {
    crate::seam::answer(
        "net_plugin::efa_devices",
        &root.display().to_string(),
        || {
            let ib = root.join("class/infiniband");
            let mut found: Vec<String> = entries(&ib)
                .filter(|name| name.starts_with("efa") || driven_by_efa(&ib.join(name)))
                .collect();
            let net = root.join("class/net");
            found.extend(entries(&net).filter(|name| driven_by_efa(&net.join(name))));
            found.sort();
            found.dedup();
            found
        },
    )
}

/// True when `<dir>/device/driver` links to the `efa` driver.
fn driven_by_efa(dir: &Path) -> bool {
    std::fs::read_link(dir.join("device/driver"))
        .ok()
        .and_then(|t| t.file_name().map(|n| n == "efa"))
        .unwrap_or(false)
}

fn entries(dir: &Path) -> impl Iterator<Item = String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

/// The names of the environment variables set that start with `prefix`.
fn vars_with_prefix(prefix: &str) -> Vec<String> {
    crate::seam::env_names()
        .into_iter()
        .filter(|k| k.starts_with(prefix))
        .collect()
}

/// What this host shows that calls for a plugin.
pub fn demand(sysfs_root: &Path) -> PluginDemand {
    crate::seam::answer(
        "net_plugin::demand",
        &sysfs_root.display().to_string(),
        || PluginDemand {
            efa_devices: efa_devices(sysfs_root),
            nccl_net_plugin: crate::seam::env("NCCL_NET_PLUGIN"),
            tcpx_vars: vars_with_prefix("NCCL_GPUDIRECTTCPX_"),
            tcpxo_vars: vars_with_prefix("NCCL_FASTRAK_"),
        },
    )
}

/// The library names NCCL dlopens for a NCCL_NET_PLUGIN value, in order;
/// empty for `none` (external plugins off).
pub fn plugin_names(setting: Option<&str>) -> Vec<String> {
    match setting.map(str::trim) {
        None | Some("") => vec!["libnccl-net.so".into()],
        Some(v) if v.eq_ignore_ascii_case("none") => Vec::new(),
        Some(v) if v.contains('/') || v.contains(".so") => vec![v.to_string()],
        Some(v) => vec![format!("libnccl-net-{v}.so"), v.to_string()],
    }
}

/// A plugin library that loaded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadedPlugin {
    /// The name dlopen was given.
    pub requested: String,
    /// The file the loader mapped, when /proc/self/maps shows it.
    pub path: Option<PathBuf>,
    /// The highest `ncclNetPlugin_v<N>` exported, and the plugin's own name
    /// from that struct's first field.
    pub api: Option<(u32, Option<String>)>,
}

/// Why no plugin library loaded: one dlopen error per name tried.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginLoadError {
    pub attempts: Vec<(String, String)>,
    /// Copies of the tried names in [`KNOWN_PLUGIN_DIRS`].
    pub elsewhere: Vec<PathBuf>,
}

impl PluginLoadError {
    /// True when every attempt failed because no such file was found (as
    /// opposed to a library that is there but does not load).
    /// dlopen names the missing file first: "libnccl-net.so: cannot open
    /// shared object file"; a missing dependency names the dependency.
    pub fn all_missing(&self) -> bool {
        self.attempts.iter().all(|(name, e)| {
            let file = Path::new(name).file_name().map(|f| f.to_string_lossy());
            let names_it = e.starts_with(&format!("{name}:"))
                || file.is_some_and(|f| e.starts_with(&format!("{f}:")));
            names_it && e.contains("No such file")
        })
    }
}

/// dlopen each name in turn the way NCCL does (loader path, RTLD_NOW), and
/// read the plugin API version of the first that loads. The library stays
/// loaded for the rest of this (isolated) process.
pub fn load_plugin(names: &[String]) -> Result<LoadedPlugin, PluginLoadError> {
    crate::seam::answer("net_plugin::load_plugin", &names.join(", "), || {
        let mut attempts = Vec::new();
        for name in names {
            stage(&format!("dlopen {name}"));
            // SAFETY: loading a library runs its initialisers; this runs in an
            // isolated child process, as NCCL itself would load it.
            match unsafe { libloading::Library::new(name) } {
                Ok(lib) => {
                    let api = plugin_api(&lib);
                    let file = Path::new(name)
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_else(|| name.clone());
                    let path = super::cuda::mapped_library(&file);
                    std::mem::forget(lib);
                    return Ok(LoadedPlugin {
                        requested: name.clone(),
                        path,
                        api,
                    });
                }
                Err(e) => attempts.push((name.clone(), e.to_string())),
            }
        }
        let elsewhere = KNOWN_PLUGIN_DIRS
            .iter()
            .flat_map(|d| names.iter().map(move |n| Path::new(d).join(n)))
            .filter(|p| p.is_file())
            .collect();
        Err(PluginLoadError {
            attempts,
            elsewhere,
        })
    })
}

/// The highest `ncclNetPlugin_v<N>` the library exports and the name in
/// its first field.
fn plugin_api(lib: &libloading::Library) -> Option<(u32, Option<String>)> {
    PLUGIN_API_VERSIONS.rev().find_map(|v| {
        let symbol = format!("ncclNetPlugin_v{v}\0");
        // SAFETY: the symbol is a struct whose first field is
        // `const char* name` in every version of the plugin API.
        unsafe {
            let sym = lib.get::<*const *const c_char>(symbol.as_bytes()).ok()?;
            let plugin: *const *const c_char = *sym;
            if plugin.is_null() {
                return Some((v, None));
            }
            let name = *plugin;
            let name =
                (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned());
            Some((v, name))
        }
    })
}

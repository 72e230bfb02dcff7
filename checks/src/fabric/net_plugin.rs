//! `fabric.net_plugin`: on a host whose network needs an NCCL net plugin
//! (AWS EFA, GCP GPUDirect-TCPX/TCPXO, or one named by NCCL_NET_PLUGIN),
//! does the library NCCL looks up load, and which plugin API does it offer?

use std::time::Duration;

use crate::domain::text::{list_cut, quote_value};
use crate::probe::net_plugin::{self, LoadedPlugin, PluginDemand, PluginLoadError};
use crate::probe::sysfs;
use crate::{Check, Context, Isolation, Outcome, Profile};

pub struct NetPlugin;

/// What `fabric.net_plugin` judges.
#[derive(Debug, Clone, PartialEq)]
pub struct NetPluginFacts {
    pub demand: PluginDemand,
    /// The names NCCL would dlopen ([`net_plugin::plugin_names`]).
    pub names: Vec<String>,
    /// What loading them gave; `None` when nothing calls for a plugin (or
    /// plugins are turned off) and nothing was loaded.
    pub load: Option<Result<LoadedPlugin, PluginLoadError>>,
}

/// The package that provides the plugin each network needs: AWS's
/// aws-ofi-nccl (installed by the EFA installer under /opt/amazon/ofi-nccl),
/// GCP's GPUDirect-TCPX and TCPXO (FasTrak) plugin images.
const EFA_FIX: &str = "install the aws-ofi-nccl plugin (the EFA installer puts it in \
     /opt/amazon/ofi-nccl/lib) and put its folder on LD_LIBRARY_PATH";
const TCPX_FIX: &str = "install the GPUDirect-TCPX plugin (nccl-plugin-gpudirecttcpx, \
     /usr/local/tcpx/lib64 in Google's images) and put its folder on LD_LIBRARY_PATH";
const TCPXO_FIX: &str = "install the GPUDirect-TCPXO (FasTrak) plugin from Google's \
     nccl-plugin-gpudirecttcpx-dev image and put its folder on LD_LIBRARY_PATH";

impl Check for NetPlugin {
    fn id(&self) -> &'static str {
        "fabric.net_plugin"
    }
    fn title(&self) -> &'static str {
        "NCCL network plugin"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn isolation(&self) -> Isolation {
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn explain(&self) -> &'static str {
        "On a host whose network needs an NCCL network plugin — AWS EFA devices (/sys/class/infiniband/efa*, or interfaces driven by `efa`), GCP GPUDirect-TCPX or TCPXO settings (NCCL_GPUDIRECTTCPX_*, NCCL_FASTRAK_*), or any NCCL_NET_PLUGIN setting — loads the plugin library the way NCCL looks it up (`libnccl-net.so`, or `libnccl-net-<NAME>.so` for NCCL_NET_PLUGIN=NAME) in an isolated process, and reads the plugin API version it exports (`ncclNetPlugin_v<N>`) and the plugin's name.\n\n\
         Without its plugin NCCL quietly falls back to its internal TCP sockets transport: the job \
         runs, at a small fraction of the network's bandwidth (NCCL_DEBUG=INFO shows `NET/Plugin: \
         No plugin found` and `Using network Socket`).\n\n\
         Fixes: install the plugin (AWS: aws-ofi-nccl from the EFA installer, /opt/amazon/ofi-nccl/lib; \
         GCP: the GPUDirect-TCPX/TCPXO plugin images) and put its folder on LD_LIBRARY_PATH, or set \
         NCCL_NET_PLUGIN to its name or path. A library that is found but does not load usually \
         misses a dependency (libfabric, the CUDA runtime): `ldd` on it names it. Hosts that need no \
         plugin are skipped."
    }
    fn run(&self, _ctx: &Context) -> Outcome {
        let demand = net_plugin::demand(&sysfs::sysfs_root());
        let names = net_plugin::plugin_names(demand.nccl_net_plugin.as_deref());
        let load = (!reasons(&demand).is_empty() && !names.is_empty())
            .then(|| net_plugin::load_plugin(&names));
        evaluate(&NetPluginFacts {
            demand,
            names,
            load,
        })
    }
}

/// Why this host needs a plugin, one phrase per reason.
fn reasons(d: &PluginDemand) -> Vec<String> {
    let mut why = Vec::new();
    if !d.efa_devices.is_empty() {
        why.push(format!("EFA devices {}", list_cut(&d.efa_devices, 4)));
    }
    if let Some(v) = &d.nccl_net_plugin {
        why.push(format!("NCCL_NET_PLUGIN={}", quote_value(v)));
    }
    if !d.tcpx_vars.is_empty() {
        why.push(format!(
            "GPUDirect-TCPX settings ({})",
            list_cut(&d.tcpx_vars, 2)
        ));
    }
    if !d.tcpxo_vars.is_empty() {
        why.push(format!(
            "GPUDirect-TCPXO settings ({})",
            list_cut(&d.tcpxo_vars, 2)
        ));
    }
    why
}

/// The install fix for the network this host has.
fn install_fix(d: &PluginDemand) -> &'static str {
    if !d.efa_devices.is_empty() {
        EFA_FIX
    } else if !d.tcpxo_vars.is_empty() {
        TCPXO_FIX
    } else if !d.tcpx_vars.is_empty() {
        TCPX_FIX
    } else {
        "install the plugin NCCL_NET_PLUGIN names and put its folder on LD_LIBRARY_PATH, \
         or unset NCCL_NET_PLUGIN if this network needs none"
    }
}

/// Judge the plugin lookup.
pub fn evaluate(f: &NetPluginFacts) -> Outcome {
    let why = reasons(&f.demand);
    if why.is_empty() {
        return Outcome::skip(
            "no network that needs an NCCL plugin (no EFA devices, no NCCL_NET_PLUGIN, no \
             GPUDirect-TCPX/TCPXO settings): NCCL uses its built-in InfiniBand/RoCE or socket \
             transport",
        );
    }
    let why = why.join(", ");
    if f.names.is_empty() {
        if f.demand.efa_devices.is_empty() {
            return Outcome::skip("NCCL_NET_PLUGIN=\"none\": external network plugins are off");
        }
        return Outcome::fail(
            format!(
                "{why}: NCCL_NET_PLUGIN=none turns the network plugin off; NCCL will fall back \
                 to TCP sockets"
            ),
            "unset NCCL_NET_PLUGIN (or set it to `ofi`) so NCCL loads aws-ofi-nccl for EFA",
        );
    }
    match &f.load {
        None => Outcome::skip("the network plugin was not looked up"),
        Some(Ok(p)) => loaded(&why, p, install_fix(&f.demand)),
        Some(Err(e)) => not_loaded(&why, &f.names, e, install_fix(&f.demand)),
    }
}

fn loaded(why: &str, p: &LoadedPlugin, fix: &str) -> Outcome {
    let file = p
        .path
        .as_ref()
        .map_or_else(|| p.requested.clone(), |path| path.display().to_string());
    match &p.api {
        Some((version, name)) => {
            let name = name
                .as_deref()
                .map(|n| format!("plugin {}, ", quote_value(n)))
                .unwrap_or_default();
            Outcome::pass(format!(
                "{file} loads for {why}: {name}ncclNetPlugin_v{version}"
            ))
            .with_fact("net_plugin", file)
            .with_fact("net_plugin_api", format!("v{version}"))
        }
        None => Outcome::fail(
            format!(
                "{file} loads but exports no ncclNetPlugin_v2..v12 symbol: NCCL will not use \
                 it for {why} and will fall back to TCP sockets"
            ),
            format!("it is not an NCCL network plugin NCCL can use; {fix}"),
        ),
    }
}

fn not_loaded(why: &str, names: &[String], e: &PluginLoadError, fix: &str) -> Outcome {
    let tried = names.join(", ");
    if e.all_missing() {
        let hint = match e.elsewhere.first() {
            Some(copy) => format!(
                "a copy lies at {}: add {} to LD_LIBRARY_PATH where the job runs",
                copy.display(),
                copy.parent()
                    .map_or_else(String::new, |d| d.display().to_string())
            ),
            None => fix.to_string(),
        };
        return Outcome::fail(
            format!(
                "{why}, but no {tried} on the loader's path: NCCL will fall back to TCP sockets"
            ),
            hint,
        );
    }
    let detail = e
        .attempts
        .iter()
        .find(|(name, err)| !(err.starts_with(name.as_str()) && err.contains("No such file")))
        .or(e.attempts.first())
        .map(|(_, err)| err.clone())
        .unwrap_or_default();
    Outcome::fail(
        format!(
            "{why}, but the network plugin does not load ({detail}): NCCL will fall back to TCP \
             sockets"
        ),
        format!(
            "`ldd` on the library names what it is missing (libfabric, the CUDA runtime); {fix}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;
    use std::path::PathBuf;

    fn efa() -> PluginDemand {
        PluginDemand {
            efa_devices: vec!["rdmap16s27".into()],
            ..PluginDemand::default()
        }
    }

    fn facts(
        demand: PluginDemand,
        load: Option<Result<LoadedPlugin, PluginLoadError>>,
    ) -> NetPluginFacts {
        let names = net_plugin::plugin_names(demand.nccl_net_plugin.as_deref());
        NetPluginFacts {
            demand,
            names,
            load,
        }
    }

    fn missing() -> PluginLoadError {
        PluginLoadError {
            attempts: vec![(
                "libnccl-net.so".into(),
                "libnccl-net.so: cannot open shared object file: No such file or directory".into(),
            )],
            elsewhere: vec![],
        }
    }

    #[test]
    fn names_follow_nccls_lookup() {
        assert_eq!(net_plugin::plugin_names(None), ["libnccl-net.so"]);
        assert_eq!(
            net_plugin::plugin_names(Some("ofi")),
            ["libnccl-net-ofi.so", "ofi"]
        );
        assert_eq!(
            net_plugin::plugin_names(Some("/opt/x/libnccl-net-gib.so")),
            ["/opt/x/libnccl-net-gib.so"]
        );
        assert!(net_plugin::plugin_names(Some("none")).is_empty());
    }

    #[test]
    fn no_plugin_network_skips_with_the_reason() {
        let o = evaluate(&facts(PluginDemand::default(), None));
        assert_eq!(o.status, Status::Skip);
        assert!(o
            .summary
            .starts_with("no network that needs an NCCL plugin"));
    }

    #[test]
    fn a_loaded_plugin_passes_with_path_name_and_version() {
        let p = LoadedPlugin {
            requested: "libnccl-net.so".into(),
            path: Some(PathBuf::from("/opt/amazon/ofi-nccl/lib/libnccl-net.so")),
            api: Some((8, Some("Libfabric".into()))),
        };
        let o = evaluate(&facts(efa(), Some(Ok(p))));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "/opt/amazon/ofi-nccl/lib/libnccl-net.so loads for EFA devices rdmap16s27: plugin \
             \"Libfabric\", ncclNetPlugin_v8"
        );
    }

    #[test]
    fn a_missing_plugin_fails_with_the_install_fix() {
        let o = evaluate(&facts(efa(), Some(Err(missing()))));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "EFA devices rdmap16s27, but no libnccl-net.so on the loader's path: NCCL will fall \
             back to TCP sockets"
        );
        assert!(o.hint.unwrap_or_default().contains("aws-ofi-nccl"));
        let mut e = missing();
        e.elsewhere = vec![PathBuf::from("/opt/amazon/ofi-nccl/lib/libnccl-net.so")];
        let o = evaluate(&facts(efa(), Some(Err(e))));
        assert_eq!(
            o.hint.as_deref(),
            Some(
                "a copy lies at /opt/amazon/ofi-nccl/lib/libnccl-net.so: add \
                 /opt/amazon/ofi-nccl/lib to LD_LIBRARY_PATH where the job runs"
            )
        );
    }

    #[test]
    fn a_plugin_that_does_not_load_or_has_no_api_fails() {
        let e = PluginLoadError {
            attempts: vec![(
                "libnccl-net.so".into(),
                "libfabric.so.1: cannot open shared object file: No such file or directory".into(),
            )],
            elsewhere: vec![],
        };
        // A missing dependency is not a missing plugin: say what dlopen said.
        let o = evaluate(&facts(efa(), Some(Err(e))));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary
                .contains("does not load (libfabric.so.1: cannot open"),
            "{}",
            o.summary
        );
        let e = PluginLoadError {
            attempts: vec![(
                "libnccl-net.so".into(),
                "libnccl-net.so: undefined symbol: fi_getinfo".into(),
            )],
            elsewhere: vec![],
        };
        let o = evaluate(&facts(efa(), Some(Err(e))));
        assert!(
            o.summary
                .contains("does not load (libnccl-net.so: undefined symbol: fi_getinfo)"),
            "{}",
            o.summary
        );
        let p = LoadedPlugin {
            requested: "libnccl-net.so".into(),
            path: None,
            api: None,
        };
        let o = evaluate(&facts(efa(), Some(Ok(p))));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("exports no ncclNetPlugin"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn plugin_turned_off_fails_on_efa_and_skips_otherwise() {
        let mut d = efa();
        d.nccl_net_plugin = Some("none".into());
        let o = evaluate(&facts(d, None));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.contains("NCCL_NET_PLUGIN=none turns"),
            "{}",
            o.summary
        );
        let d = PluginDemand {
            nccl_net_plugin: Some("none".into()),
            ..PluginDemand::default()
        };
        assert_eq!(evaluate(&facts(d, None)).status, Status::Skip);
    }

    #[test]
    fn tcpx_settings_call_for_the_tcpx_plugin() {
        let d = PluginDemand {
            tcpx_vars: vec!["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME".into()],
            ..PluginDemand::default()
        };
        let o = evaluate(&facts(d, Some(Err(missing()))));
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.starts_with("GPUDirect-TCPX settings"),
            "{}",
            o.summary
        );
        assert!(o.hint.unwrap_or_default().contains("GPUDirect-TCPX plugin"));
    }
}

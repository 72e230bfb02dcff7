//! What NVML said in this run, published by `gpu.driver` ([`NvmlDriver`])
//! and `gpu.count` ([`NvmlInventory`]), and the one way any check gets the
//! GPU list: [`gpus_for_run`], which reuses what was published, never asks a
//! driver that already hung, and bounds its own wait.

use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::probe::nvml::{self, DriverInfo, GpuError, GpuInfo, NvmlFailure};
use crate::{Context, Fact};

/// NVML's driver facts, or why NVML could not be used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmlDriver(pub Result<DriverInfo, NvmlFailure>);

impl Fact for NvmlDriver {
    const KEY: &'static str = "nvml_driver";
}

/// Every GPU NVML counts, each described or with the reason it could not be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmlInventory(pub Result<Vec<Result<GpuInfo, GpuError>>, NvmlFailure>);

impl Fact for NvmlInventory {
    const KEY: &'static str = "nvml_inventory";
}

impl NvmlInventory {
    /// The GPUs NVML could describe (lost ones left out).
    pub fn gpus(&self) -> Result<Vec<GpuInfo>, NvmlFailure> {
        match &self.0 {
            Ok(list) => Ok(list
                .iter()
                .filter_map(|g| g.as_ref().ok().cloned())
                .collect()),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The longest any check waits for NVML on its own: the gpu.* checks'
/// budget. A hung driver is gpu.driver's verdict, not every check's.
pub const NVML_WAIT: Duration = Duration::from_secs(5);

/// Which earlier check found NVML hung (it timed out), if one did.
pub fn nvml_hung(ctx: &Context) -> Option<String> {
    ctx.earlier
        .iter()
        .filter(|(id, _)| id.starts_with("gpu."))
        .find(|(_, o)| o.cause.as_ref().is_some_and(|c| c.is_timeout()))
        .map(|(id, _)| format!("NVML did not answer in {id}"))
}

/// NVML's inventory for this run: the one gpu.count published, else asked
/// now (on a thread, waited for at most [`NVML_WAIT`] and 80% of this
/// check's timeout), unless an earlier check found NVML hung.
pub fn inventory_for_run(ctx: &Context) -> NvmlInventory {
    if let Some(inv) = ctx.fact::<NvmlInventory>() {
        return inv;
    }
    if let Some(detail) = nvml_hung(ctx) {
        return NvmlInventory(Err(NvmlFailure::Other { detail }));
    }
    if let Some(NvmlDriver(Err(e))) = ctx.fact::<NvmlDriver>() {
        return NvmlInventory(Err(e));
    }
    crate::probe::stage("NVML device list");
    NvmlInventory(crate::seam::answer(
        "nvml::inventory",
        &lib_arg(ctx),
        || bounded(ctx, |lib| nvml::inventory(lib.as_deref())),
    ))
}

/// The GPUs NVML describes for this run (see [`inventory_for_run`]).
pub fn gpus_for_run(ctx: &Context) -> Result<Vec<GpuInfo>, NvmlFailure> {
    inventory_for_run(ctx).gpus()
}

/// NVML's driver facts for this run: published by gpu.driver, else asked
/// now under the same guards as [`inventory_for_run`].
pub fn driver_for_run(ctx: &Context) -> Result<DriverInfo, NvmlFailure> {
    if let Some(NvmlDriver(d)) = ctx.fact::<NvmlDriver>() {
        return d;
    }
    if let Some(detail) = nvml_hung(ctx) {
        return Err(NvmlFailure::Other { detail });
    }
    crate::probe::stage("NVML driver version");
    crate::seam::answer("nvml::driver", &lib_arg(ctx), || {
        bounded(ctx, |lib| nvml::driver(lib.as_deref()))
    })
}

/// The `--nvml-lib` an NVML answer was asked through, for its capture key.
fn lib_arg(ctx: &Context) -> String {
    ctx.options
        .nvml_lib
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// How long a check waits for NVML: [`NVML_WAIT`], cut to 80% of the
/// check's own timeout so it has room to report. `--timeout` is the user's
/// number, so an absurd one falls back to the default wait.
pub fn wait_for(ctx: &Context) -> Duration {
    Duration::try_from_secs_f64(ctx.options.timeout_s * 0.8)
        .ok()
        .filter(|w| !w.is_zero())
        .map_or(NVML_WAIT, |w| w.min(NVML_WAIT))
}

/// Run an NVML query on a thread and wait for it at most the NVML budget.
fn bounded<T: Send + 'static>(
    ctx: &Context,
    query: impl FnOnce(Option<std::path::PathBuf>) -> Result<T, NvmlFailure> + Send + 'static,
) -> Result<T, NvmlFailure> {
    let wait = wait_for(ctx);
    let lib = ctx.options.nvml_lib.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("nvml-query".into())
        .spawn(move || {
            let _ = tx.send(query(lib));
        })
        .map_err(|e| NvmlFailure::Other {
            detail: format!("cannot start a thread for NVML ({e})"),
        })?;
    rx.recv_timeout(wait).unwrap_or_else(|_| {
        Err(NvmlFailure::Other {
            detail: format!(
                "NVML did not answer within {} s{}",
                crate::domain::text::seconds(wait.as_secs_f64()),
                nvml::hung_call()
                    .map(|c| format!(" in {c}"))
                    .unwrap_or_default()
            ),
        })
    })
}

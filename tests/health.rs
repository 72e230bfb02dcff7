//! The README's Docker HEALTHCHECK recipe, run as Docker runs it: the command
//! is read from the README's Dockerfile, against the fake NVML
//! (tests/fixtures/fake_nvml.c). A health check asks whether the node's
//! hardware still works while the training job runs, so what the job itself
//! holds (port 29500) must not make it unhealthy, and a hung driver must end
//! it within the budget with the reason on its one line.

mod common;

use std::net::TcpListener;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{fake_nvml, gpucheck, nvml_scenario, root, stderr, stdout};

/// The README Dockerfile's HEALTHCHECK: its `--timeout` in seconds and the
/// gpucheck arguments of its CMD (exec form, a JSON array).
fn readme_healthcheck() -> (f64, Vec<String>) {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("HEALTHCHECK "))
        .expect("the README has a HEALTHCHECK line");
    let timeout = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("--timeout="))
        .and_then(|t| t.strip_suffix('s'))
        .and_then(|t| t.parse().ok())
        .expect("HEALTHCHECK --timeout=Ns");
    let cmd = &line[line.find("CMD ").expect("CMD") + 4..];
    let argv: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
    assert_eq!(argv[0], "gpucheck", "{line}");
    (timeout, argv[1..].to_vec())
}

/// The HEALTHCHECK command on a node whose NVML is the fake in `scenario`.
/// This machine has no /dev/nvidia* nodes, so host.devices is left out with
/// the same --skip a user has; on a GPU node it is part of the check.
fn healthcheck(scenario_name: &str) -> (Output, Duration, f64) {
    let (timeout, args) = readme_healthcheck();
    let started = Instant::now();
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", nvml_scenario(scenario_name))
        .args(&args)
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--skip", "host.devices"])
        .output()
        .expect("run gpucheck");
    (out, started.elapsed(), timeout)
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Hold torchrun's default master port as a running job's rendezvous does.
/// Already held by someone else is as good.
fn hold_master_port() -> Option<TcpListener> {
    TcpListener::bind("127.0.0.1:29500").ok()
}

#[test]
fn a_healthy_node_running_a_job_on_port_29500_is_healthy() {
    let _job = hold_master_port();
    // The port really is held: a launch check sees it.
    let launch = gpucheck()
        .args(["--only", "net.master_port", "--quiet"])
        .output()
        .expect("run gpucheck");
    assert_eq!(code(&launch), 1, "{}", stdout(&launch));

    let (out, _, _) = healthcheck("h100x8");
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let line = stdout(&out);
    assert!(
        line.starts_with("HEALTHY") && line.contains(" 0 failed, 0 errors"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1, "{line}");
}

#[test]
fn the_health_profile_holds_no_launch_preconditions() {
    let (_, args) = readme_healthcheck();
    let run = gpucheck()
        .args(&args)
        .args(["--format", "json"])
        .output()
        .expect("run gpucheck");
    let doc: serde_json::Value = serde_json::from_str(&stdout(&run)).expect("JSON report");
    assert_eq!(doc["profile"], "health");
    let ids: Vec<&str> = doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert!(
        ids.contains(&"host.devices") && ids.contains(&"gpu.ecc"),
        "{ids:?}"
    );
    for launch in ["net.", "env.", "nccl.", "gpu.processes", "cuda.", "torch."] {
        assert!(
            !ids.iter().any(|id| id.starts_with(launch)),
            "{launch} in {ids:?}"
        );
    }
}

/// Scenarios written from real machines' `nvidia-smi -a` dumps (each file
/// names its source; tests/gpu.rs says what each dump warrants).
const REAL_HEALTHY_BOXES: [&str; 15] = [
    "healthy_h100_sxm_x8",
    "healthy_h100_nvl_x2",
    "healthy_h200",
    "healthy_l4",
    "healthy_l40s",
    "healthy_a10",
    "healthy_a40_x10",
    "healthy_rtx4090_x8",
    "healthy_rtx6000ada_x8",
    "healthy_rtx_a6000_x9",
    "healthy_rtx3090_x2",
    "healthy_rtx5090",
    "healthy_v100_sxm2_x8",
    "healthy_a100_mig",
    "healthy_a10g",
];

#[test]
fn real_healthy_boxes_are_healthy() {
    for name in REAL_HEALTHY_BOXES {
        let (out, _, _) = healthcheck(name);
        let line = stdout(&out);
        assert_eq!(code(&out), 0, "{name}: {line}{}", stderr(&out));
        assert!(
            line.starts_with("HEALTHY") && line.contains(" 0 failed, 0 errors"),
            "{name}: {line}"
        );
    }
}

#[test]
fn a_real_a100_with_a_row_remap_pending_is_unhealthy_naming_it() {
    let (out, _, _) = healthcheck("a100_sxm_x4_remap_pending");
    let line = stdout(&out);
    assert_eq!(code(&out), 1, "{line}");
    assert!(
        line.starts_with("NOT HEALTHY")
            && line.contains("1 failed")
            && line.ends_with("see gpu.ecc\n"),
        "{line}"
    );
}

/// The most a health check may take on a hung driver: half of the README's
/// HEALTHCHECK --timeout, and 6 s in any case.
fn budget(healthcheck_timeout_s: f64) -> Duration {
    Duration::from_secs_f64((healthcheck_timeout_s / 2.0).min(6.0))
}

#[test]
fn a_driver_hung_in_init_is_unhealthy_within_the_budget_and_says_so() {
    let (out, took, timeout) = healthcheck("hang_init");
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    assert!(took <= budget(timeout), "took {took:?}");
    let line = stdout(&out);
    assert!(
        line.starts_with("NOT HEALTHY: NVML did not answer (nvmlInit_v2 hung); "),
        "{line}"
    );
    assert!(line.trim_end().ends_with("— see gpu.driver"), "{line}");
}

#[test]
fn a_driver_hung_in_a_query_is_unhealthy_within_the_budget_and_says_so() {
    let (out, took, timeout) = healthcheck("hang_ecc");
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    assert!(took <= budget(timeout), "took {took:?}");
    let line = stdout(&out);
    assert!(
        line.starts_with("NOT HEALTHY: NVML did not answer (nvmlDeviceGetEccMode hung); "),
        "{line}"
    );
    assert!(line.contains("— see gpu.ecc"), "{line}");
}

#[test]
fn a_health_check_that_cannot_run_is_unhealthy_not_exit_2() {
    // Docker reserves exit code 2; the error stays on the line.
    for bad in [
        &["--profile", "health", "--timeout", "soon"][..],
        &["--profile=health", "--skip", "nosuch"][..],
    ] {
        let out = gpucheck().args(bad).output().expect("run gpucheck");
        assert_eq!(code(&out), 1, "{bad:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with("gpucheck: ") && (err.contains("soon") || err.contains("nosuch")),
            "{err}"
        );
    }
    // Outside the health profile it stays a usage error, also when exec's
    // command happens to take `--profile health` itself.
    for bad in [
        &["--skip", "nosuch"][..],
        &[
            "exec",
            "--skip",
            "nosuch",
            "--",
            "tool",
            "--profile",
            "health",
        ][..],
    ] {
        let out = gpucheck().args(bad).output().expect("run gpucheck");
        assert_eq!(code(&out), 2, "{bad:?}: {}", stderr(&out));
    }
}

//! The load checks (gpu.compute, gpu.memory, gpu.p2p_bandwidth) through the
//! real binary, with the load payload run by the real torch of the test
//! virtual environment on the CPU (GPUCHECK_LOAD_DEVICE=cpu: the same code
//! path with small buffers) and NVML's under-load readings scripted in the
//! fake NVML (tests/fixtures/fake_nvml.c: sm_clock=, power_w=, temp_c=,
//! throttle= sequences, one entry per call). What a CPU cannot stand for
//! per "GPU" (one slower than the others, one computing wrong, one word
//! reading back wrong) the payload's GPUCHECK_QUALIFY_TEST_* hooks inject;
//! the payload honours them only on the CPU.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{
    assert_valid_json_report, fake_nvml, gpucheck, nvml_scenario, processes_matching, result, root,
    stdout, text_field, venv_python,
};
use serde_json::Value;

static ONE_LOAD: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// gpucheck with its load on the CPU (GPUCHECK_LOAD_DEVICE=cpu), the fake
/// NVML in `scenario` and `python` as the training Python.
fn on_cpu(scenario: &str, python: &Path) -> Command {
    let mut cmd = gpucheck();
    cmd.env("FAKE_NVML_SCENARIO", nvml_scenario(scenario))
        .env("GPUCHECK_LOAD_DEVICE", "cpu")
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .arg("--python")
        .arg(python);
    cmd
}

/// [`on_cpu`] with the venv's Python, running only gpu.burn for
/// `duration`, reporting JSON on stdout.
fn burn_on_cpu(scenario: &str, duration: &str) -> Command {
    let mut cmd = on_cpu(scenario, &venv_python());
    cmd.args(["--profile", "burn", "--duration", duration])
        .args(["--only", "gpu.burn", "--format", "json"]);
    cmd
}

/// `gpucheck --profile full --only CHECKS --format json` on the CPU against
/// the fake NVML in `scenario`, with extra environment.
fn run(checks: &str, scenario: &str, env: &[(&str, &str)]) -> (Output, Value) {
    // One load at a time: the figures are the CPU's, which parallel tests
    // would share.
    let _turn = ONE_LOAD.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = on_cpu(scenario, &venv_python());
    cmd.args(["--profile", "full", "--only", checks, "--format", "json"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

#[test]
fn a_gpu_whose_clocks_sag_at_the_power_cap_fails_naming_the_cap() {
    let env = [("GPUCHECK_QUALIFY_TEST_SLOW", "1:6")];
    let (out, doc) = run("gpu.compute", "load_power_cap_gpu1", &env);
    assert_eq!(text_field(&doc, "gpu.compute", "status"), "fail", "{doc}");
    let summary = text_field(&doc, "gpu.compute", "summary");
    // bf16 or TF32, whichever fell below the floor first.
    assert!(summary.starts_with("GPU 1: "), "{summary}");
    assert!(summary.contains(" GEMM "), "{summary}");
    assert!(
        summary.ends_with("(power cap 700 W reached at 1,410 MHz)"),
        "{summary}"
    );
    let hint = text_field(&doc, "gpu.compute", "hint");
    assert!(hint.starts_with("GPU 1 computes slower"), "{hint}");
    let table = &result(&doc, "gpu.compute")["tables"][0];
    assert_eq!(table["rows"][1][3], "1,410-1,980", "{doc}");
    assert_eq!(table["rows"][1][4], "700 / 700", "{doc}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_gpu_that_computes_wrong_fails_with_the_count() {
    let env = [("GPUCHECK_QUALIFY_TEST_CORRUPT", "1")];
    let (out, doc) = run("gpu.compute", "load_steady_x2", &env);
    assert_eq!(text_field(&doc, "gpu.compute", "status"), "fail", "{doc}");
    let summary = text_field(&doc, "gpu.compute", "summary");
    assert!(
        summary.starts_with(
            "GPU 1: computed wrong results: 1 element of the seeded bf16 GEMM differ from what \
             the other GPUs computed (largest difference 1.000e0)"
        ),
        "{summary}"
    );
    assert!(
        summary.contains("1 element of an fp32 GEMM outside the rounding bound from float64"),
        "{summary}"
    );
    let table = &result(&doc, "gpu.compute")["tables"][0];
    assert_eq!(table["rows"][0][6], "ok", "{doc}");
    assert_eq!(table["rows"][1][6], "WRONG", "{doc}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn steady_gpus_pass_with_identical_results() {
    let (out, doc) = run("gpu.compute", "load_steady_x2", &[]);
    assert_eq!(text_field(&doc, "gpu.compute", "status"), "pass", "{doc}");
    let summary = text_field(&doc, "gpu.compute", "summary");
    assert!(summary.starts_with("bf16 GEMM on 2 GPUs: "), "{summary}");
    assert!(
        summary.ends_with("results bit-identical across GPUs and within bounds of float64"),
        "{summary}"
    );
    let gpu0 = &result(&doc, "gpu.compute")["devices"][0]["metrics"];
    assert_eq!(gpu0[0]["name"], "bf16_tflops", "{doc}");
    assert!(gpu0[0]["value"].as_f64().unwrap_or(0.0) > 0.0, "{doc}");
    assert_eq!(out.status.code(), Some(0));
}

/// The three load checks on an 8-GPU fake: every GPU measured, every
/// ordered pair in the matrix. (Their time is a benchmark figure, measured
/// by scripts/gpu-smoke.sh and written in the README, never a test.)
#[test]
fn the_load_checks_measure_every_gpu_and_pair_of_an_eight_gpu_node() {
    let checks = "gpu.compute,gpu.memory,gpu.p2p_bandwidth";
    let (_out, doc) = run(checks, "healthy_h100_sxm_x8", &[]);
    for id in checks.split(',') {
        let status = text_field(&doc, id, "status");
        assert!(status == "pass" || status == "fail", "{id}: {doc}");
    }
    let devices = &result(&doc, "gpu.compute")["devices"];
    assert_eq!(devices.as_array().map(Vec::len), Some(8), "{doc}");
    let matrix = &result(&doc, "gpu.p2p_bandwidth")["tables"][0]["rows"];
    assert_eq!(matrix.as_array().map(Vec::len), Some(8), "{doc}");
}

#[test]
fn a_load_that_hangs_times_out_and_leaves_nothing_running() {
    let mark = format!("gpucheck-qualify-hang-{}", std::process::id());
    let out = on_cpu(
        "load_steady_x2",
        &root().join("tests/fixtures/hang-python.sh"),
    )
    .env("GPUCHECK_TEST_MARK", &mark)
    .args(["--profile", "full", "--only", "gpu.compute"])
    .args(["--timeout", "3", "--format", "json"])
    .output()
    .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(text_field(&doc, "gpu.compute", "status"), "fail", "{doc}");
    let summary = text_field(&doc, "gpu.compute", "summary");
    assert!(
        summary.contains("did not finish") || summary.starts_with("timed out after 3 s in load"),
        "{summary}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(processes_matching(&mark), Vec::new());
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn slow_hbm_fails_naming_the_gpu_and_its_hw_slowdown() {
    let env = [("GPUCHECK_QUALIFY_TEST_SLOW", "1:6")];
    let (out, doc) = run("gpu.memory", "load_hw_slowdown_gpu1", &env);
    assert_eq!(text_field(&doc, "gpu.memory", "status"), "fail", "{doc}");
    let summary = text_field(&doc, "gpu.memory", "summary");
    assert!(summary.starts_with("GPU 1: memory triad "), "{summary}");
    assert!(
        summary.ends_with("(HW slowdown while at 87 °C)"),
        "{summary}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_word_that_reads_back_wrong_fails_with_its_address_range() {
    let env = [("GPUCHECK_QUALIFY_TEST_BAD_WORD", "0")];
    let (out, doc) = run("gpu.memory", "load_steady_x2", &env);
    assert_eq!(text_field(&doc, "gpu.memory", "status"), "fail", "{doc}");
    let summary = text_field(&doc, "gpu.memory", "summary");
    assert!(
        summary.starts_with("GPU 0: 1 word of device memory read back wrong; first bad range 0x"),
        "{summary}"
    );
    assert!(
        summary.ends_with("under walking ones 0x0000000000000001"),
        "{summary}"
    );
    let table = &result(&doc, "gpu.memory")["tables"][0];
    assert_eq!(table["rows"][0][4], "1", "{doc}");
    assert_eq!(table["rows"][1][4], "0", "{doc}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_busy_gpu_gets_bandwidth_figures_but_no_pattern_test() {
    let (out, doc) = run("gpu.memory", "load_busy_gpu1", &[]);
    assert_eq!(text_field(&doc, "gpu.memory", "status"), "pass", "{doc}");
    let gpu1 = &result(&doc, "gpu.memory")["devices"][1];
    let summary = gpu1["summary"].as_str().unwrap_or("");
    assert!(
        summary.ends_with("(no pattern test: 1 other process uses it)"),
        "{summary}"
    );
    let table = &result(&doc, "gpu.memory")["tables"][0];
    assert_eq!(table["rows"][1][3], "busy", "{doc}");
    assert_ne!(table["rows"][0][3], "busy", "{doc}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_slow_peer_link_fails_naming_the_pair_and_its_nvlinks() {
    let env = [("GPUCHECK_QUALIFY_TEST_SLOW_PAIR", "2:1:20")];
    let (out, doc) = run("gpu.p2p_bandwidth", "load_steady_x4", &env);
    assert_eq!(
        text_field(&doc, "gpu.p2p_bandwidth", "status"),
        "fail",
        "{doc}"
    );
    let summary = text_field(&doc, "gpu.p2p_bandwidth", "summary");
    assert!(
        summary.contains("GPU 2: copies to GPU 1 over 18 NVLinks "),
        "{summary}"
    );
    let table = &result(&doc, "gpu.p2p_bandwidth")["tables"][0];
    assert_eq!(table["header"][2], "GPU1", "{doc}");
    assert_eq!(table["rows"][2][3], "X", "{doc}");
    assert_eq!(table["rows"].as_array().map(Vec::len), Some(4), "{doc}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_burn_names_the_gpu_whose_clock_falls_and_temperature_climbs() {
    let _turn = ONE_LOAD.lock().unwrap_or_else(|e| e.into_inner());
    let out = burn_on_cpu("load_warming_gpu1", "25s")
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(text_field(&doc, "gpu.burn", "status"), "fail", "{doc}");
    let summary = text_field(&doc, "gpu.burn", "summary");
    assert!(summary.contains("GPU 1: "), "{summary}");
    assert!(summary.contains("SM clock fell from "), "{summary}");
    let gpu1: Vec<&Value> = result(&doc, "gpu.burn")["tables"][0]["rows"]
        .as_array()
        .map(|rows| rows.iter().filter(|r| r[2] == "1").collect())
        .unwrap_or_default();
    assert!(gpu1.len() >= 3, "{doc}");
    assert_eq!(out.status.code(), Some(1));
}

/// A burn whose second round hangs (the payload's CPU-only hook) fails
/// once that round has had its 90 s, with round 1's figures, and leaves
/// nothing running.
#[test]
fn a_burn_whose_round_hangs_fails_after_the_round_timeout_and_leaves_nothing_running() {
    let _turn = ONE_LOAD.lock().unwrap_or_else(|e| e.into_inner());
    let out = burn_on_cpu("load_steady_x2", "10m")
        .env("GPUCHECK_QUALIFY_TEST_HANG_ROUND", "2")
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(text_field(&doc, "gpu.burn", "status"), "fail", "{doc}");
    let summary = text_field(&doc, "gpu.burn", "summary");
    assert!(
        summary.starts_with("the burn stopped after 1 round in "),
        "{summary}"
    );
    assert!(
        summary.ends_with(" of 600 s: round 2 did not end within 90 s (last stage: burn round 2)"),
        "{summary}"
    );
    let rows = result(&doc, "gpu.burn")["tables"][0]["rows"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(rows, 2, "round 1 of both GPUs: {doc}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(processes_matching("qualify.py"), Vec::new());
    assert_eq!(out.status.code(), Some(1));
}

/// The burn goes through the capture seam a round at a time: replayed with
/// neither the fake NVML nor any Python to be found, it gives the same
/// rounds, figures and verdict.
#[test]
fn a_captured_burn_replays_round_by_round_to_the_same_report() {
    let _turn = ONE_LOAD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("burn.json");
    let live = burn_on_cpu("load_steady_x2", "10s")
        .arg("--capture")
        .arg(&file)
        .output()
        .expect("run gpucheck");
    let live = assert_valid_json_report(&stdout(&live));
    let again = gpucheck()
        .env("PATH", "")
        .env_remove("VIRTUAL_ENV")
        .arg("--replay")
        .arg(&file)
        .args(["--profile", "burn", "--duration", "10s"])
        .args(["--only", "gpu.burn", "--format", "json"])
        .output()
        .expect("run gpucheck --replay");
    let again = assert_valid_json_report(&stdout(&again));
    let (a, b) = (result(&live, "gpu.burn"), result(&again, "gpu.burn"));
    assert_eq!(a["status"], "pass", "{a}");
    let rows = a["tables"][0]["rows"].as_array().map_or(0, Vec::len);
    // A round takes about 3 s on the CPU after torch's import: at least
    // two fit in 10 s on a loaded machine too.
    assert!(rows >= 4, "at least 2 rounds of 2 GPUs: {a}");
    for field in ["status", "summary", "hint", "tables", "metrics", "devices"] {
        assert_eq!(a[field], b[field], "{field}");
    }
}

#[test]
fn a_duration_that_is_no_duration_is_a_usage_error() {
    let out = gpucheck()
        .args(["--profile", "burn", "--duration", "soon"])
        .output()
        .expect("run gpucheck");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        common::stderr(&out).contains("'soon' is not a duration"),
        "{}",
        common::stderr(&out)
    );
    // Longer than a burn runs: refused, not cut to 24 h without a word.
    let out = gpucheck()
        .args(["--profile", "burn", "--duration", "25h"])
        .output()
        .expect("run gpucheck");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        common::stderr(&out).contains("'25h' is longer than a burn runs (at most 24h)"),
        "{}",
        common::stderr(&out)
    );
}

/// A 60 s burn on two CPU "GPUs", sent SIGINT once its load process
/// (qualify.py, one for the whole burn) runs, or once it has finished its
/// first round (the payload's round-file hook says so); then nothing of it
/// may be left running.
fn interrupted_burn(after_round: bool) -> (Output, Value) {
    let _turn = ONE_LOAD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("a temporary folder");
    let round_file = dir.path().join("round");
    let mut cmd = burn_on_cpu("load_steady_x2", "60s");
    let child = common::with_sigint_default(&mut cmd)
        .env("GPUCHECK_QUALIFY_TEST_ROUND_FILE", &round_file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start gpucheck");
    let deadline = Instant::now() + Duration::from_secs(45);
    let ready = || match after_round {
        false => !processes_matching("qualify.py").is_empty(),
        true => round_file.exists(),
    };
    while !ready() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ready(), "the load did not start or finish a round in 45 s");
    if after_round {
        // The round's line reaches gpucheck just before the file is
        // written; give its report of the round time to reach the runner.
        std::thread::sleep(Duration::from_secs(1));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("send SIGINT");
    let out = child.wait_with_output().expect("wait for gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(processes_matching("qualify.py"), Vec::new());
    assert_eq!(doc["interrupted"], "SIGINT", "{doc}");
    assert_eq!(out.status.code(), Some(1));
    (out, doc)
}

#[test]
fn an_interrupted_load_leaves_nothing_running() {
    let (_out, doc) = interrupted_burn(false);
    assert_eq!(text_field(&doc, "gpu.burn", "status"), "error", "{doc}");
    assert_eq!(
        text_field(&doc, "gpu.burn", "summary"),
        "interrupted by SIGINT before it finished"
    );
    assert_eq!(result(&doc, "gpu.burn")["action"], "none", "{doc}");
}

#[test]
fn a_burn_interrupted_after_a_round_reports_the_rounds_it_ran() {
    let (_out, doc) = interrupted_burn(true);
    assert_eq!(text_field(&doc, "gpu.burn", "status"), "error", "{doc}");
    let summary = text_field(&doc, "gpu.burn", "summary");
    assert!(summary.starts_with("interrupted after "), "{summary}");
    assert!(
        summary.ends_with(
            " of 60 s: no GPU degraded or computed wrong in them (the kernel log was not read \
             again)"
        ),
        "{summary}"
    );
    let rows = result(&doc, "gpu.burn")["tables"][0]["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(rows.len() >= 2, "both GPUs of round 1: {doc}");
    assert_eq!(rows[0][0], "1", "{doc}");
    assert_eq!(result(&doc, "gpu.burn")["action"], "none", "{doc}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn on_real_gpus_the_load_checks_measure_every_gpu() {
    let out = gpucheck()
        .arg("--python")
        .arg(venv_python())
        .args(["--profile", "full", "--format", "json"])
        .args(["--only", "gpu.compute,gpu.memory,gpu.p2p_bandwidth"])
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    for id in ["gpu.compute", "gpu.memory"] {
        assert_ne!(text_field(&doc, id, "status"), "error", "{doc}");
        assert_ne!(text_field(&doc, id, "status"), "skip", "{doc}");
        for d in result(&doc, id)["devices"].as_array().into_iter().flatten() {
            let first = d["metrics"][0]["value"].as_f64().unwrap_or(0.0);
            assert!(first > 0.0, "{id}: {d}");
        }
    }
    let compute = text_field(&doc, "gpu.compute", "summary");
    assert!(!compute.contains("computed wrong results"), "{compute}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn on_real_gpus_a_short_burn_runs_rounds() {
    let out = gpucheck()
        .arg("--python")
        .arg(venv_python())
        .args([
            "--profile",
            "burn",
            "--duration",
            "90s",
            "--only",
            "gpu.burn",
        ])
        .args(["--format", "json"])
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_ne!(text_field(&doc, "gpu.burn", "status"), "error", "{doc}");
    let rounds = &result(&doc, "gpu.burn")["metrics"][0];
    assert_eq!(rounds["name"], "burn_rounds", "{doc}");
    assert!(rounds["value"].as_f64().unwrap_or(0.0) >= 2.0, "{doc}");
}

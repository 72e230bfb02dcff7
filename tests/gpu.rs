//! The gpu.* checks through the real binary and the real nvml-wrapper code,
//! against a fake libnvidia-ml.so.1 (tests/fixtures/fake_nvml.c) driven by
//! the scenario files in tests/fixtures/nvml/. Each test asserts what a user
//! sees: verdicts, summaries, hints, exit codes, and reports that validate.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    assert_valid_json_report, assert_valid_junit, build_fixture_lib, fake_nvml, gpucheck,
    nvml_scenario, result, root, status_of, stderr, stdout, text_field,
};
use serde_json::Value;

const GPU_CHECKS: [&str; 8] = [
    "gpu.driver",
    "gpu.count",
    "gpu.ecc",
    "gpu.pcie",
    "gpu.throttle",
    "gpu.mode",
    "gpu.processes",
    "gpu.topology",
];

/// The fake NVML as an old driver (fake_nvml_old.c includes fake_nvml.c,
/// which build_fixture_lib's freshness check does not see: drop a stale copy).
fn fake_nvml_old() -> PathBuf {
    let built = root().join("target/fixtures/nvml-old/libnvidia-ml.so.1");
    let source = root().join("tests/fixtures/fake_nvml.c");
    if let (Ok(b), Ok(s)) = (std::fs::metadata(&built), std::fs::metadata(&source)) {
        if s.modified().ok() > b.modified().ok() {
            let _ = std::fs::remove_file(&built);
        }
    }
    build_fixture_lib("fake_nvml_old.c", "nvml-old", "libnvidia-ml.so.1")
}

/// Wait for a spawned gpucheck; a run that does not end within a minute is
/// the bug under test (a hang), not slowness, so it is killed and reported.
fn wait_bounded(mut child: Child) -> Output {
    const LIVENESS: Duration = Duration::from_secs(60);
    let started = Instant::now();
    let mut out_pipe = child.stdout.take().expect("stdout piped");
    let mut err_pipe = child.stderr.take().expect("stderr piped");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for gpucheck") {
            break status;
        }
        if started.elapsed() > LIVENESS {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gpucheck did not exit: an NVML hang was not bounded");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// gpucheck against `lib` in `scenario`, with the JSON report on stdout.
fn run_with(lib: &Path, scenario_name: &str, args: &[&str]) -> (Output, Value) {
    run_with_env(lib, scenario_name, &[], args)
}

/// As `run_with`, with extra environment variables for gpucheck.
fn run_with_env(
    lib: &Path,
    scenario_name: &str,
    envs: &[(&str, &str)],
    args: &[&str],
) -> (Output, Value) {
    let child = gpucheck()
        .envs(envs.iter().copied())
        .env("FAKE_NVML_SCENARIO", nvml_scenario(scenario_name))
        .arg("--nvml-lib")
        .arg(lib)
        .args(["--format", "json", "--color", "never"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpucheck");
    let out = wait_bounded(child);
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

/// The gpu checks only, in `scenario`, JSON on stdout (validated).
fn run_gpu(scenario_name: &str, args: &[&str]) -> (Output, Value) {
    let mut all = vec!["--only", "gpu", "--skip", common::LOAD_CHECKS];
    all.extend_from_slice(args);
    run_with(&fake_nvml(), scenario_name, &all)
}

fn exit_code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn summary(doc: &Value, id: &str) -> String {
    text_field(doc, id, "summary")
}

fn hint(doc: &Value, id: &str) -> String {
    text_field(doc, id, "hint")
}

fn device<'a>(doc: &'a Value, id: &str, index: u64) -> &'a Value {
    result(doc, id)["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|x| x["index"] == index))
        .unwrap_or_else(|| panic!("{id} has no device {index}"))
}

fn table<'a>(doc: &'a Value, id: &str, title: &str) -> &'a Value {
    result(doc, id)["tables"]
        .as_array()
        .and_then(|t| t.iter().find(|x| x["title"] == title))
        .unwrap_or_else(|| panic!("{id} has no table {title}"))
}

/// Cell (row GPU `a`, column GPU `b`) of a GPU matrix table.
fn cell(t: &Value, a: usize, b: usize) -> String {
    t["rows"][a][b + 1].as_str().unwrap_or("").to_string()
}

/// Also write the JUnit report of the same run and validate it against the
/// Jenkins XSD; return its text.
fn junit_of(scenario_name: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("report.xml");
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", nvml_scenario(scenario_name))
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args([
            "--only",
            "gpu",
            "--skip",
            common::LOAD_CHECKS,
            "--quiet",
            "--junit",
        ])
        .arg(&path)
        .args(args)
        .output()
        .expect("run gpucheck");
    assert!(path.exists(), "no JUnit report written: {}", stderr(&out));
    assert_valid_junit(&path);
    std::fs::read_to_string(&path).expect("read the JUnit report")
}

fn assert_all(doc: &Value, ids: &[&str], status: &str) {
    for id in ids {
        assert_eq!(status_of(doc, id), status, "{id}: {}", summary(doc, id));
    }
}

// ---------------------------------------------------------------------------
// Healthy machines

#[test]
fn healthy_8x_h100_with_nvswitch_passes_everything() {
    let (out, doc) = run_gpu("h100x8", &["--expect-gpus", "8"]);
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    assert_all(&doc, &GPU_CHECKS, "pass");
    assert_eq!(
        summary(&doc, "gpu.driver"),
        "driver 570.86.15, NVML 12.570.86.15, supports CUDA 12.8"
    );
    assert_eq!(
        result(&doc, "gpu.driver")["facts"]["cuda_driver_version"],
        "12.8"
    );
    assert_eq!(
        summary(&doc, "gpu.count"),
        "8 GPUs (expected 8): 8x NVIDIA H100 80GB HBM3"
    );
    let gpus = result(&doc, "gpu.count")["devices"]
        .as_array()
        .expect("devices");
    assert_eq!(gpus.len(), 8);
    let gpu3 = device(&doc, "gpu.count", 3);
    assert_eq!(gpu3["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpu3["uuid"], "GPU-fa4e0003-1111-4222-8333-000000000003");
    assert_eq!(
        gpu3["summary"],
        "NVIDIA H100 80GB HBM3, 81559 MiB, cc 9.0, 00000000:5D:00.0"
    );
    // Idle links at Gen1 of Gen5 are power saving, not a warning.
    assert!(
        summary(&doc, "gpu.pcie").contains("idle GPUs at a lower generation: normal"),
        "{}",
        summary(&doc, "gpu.pcie")
    );
    assert!(device(&doc, "gpu.pcie", 0)["summary"]
        .as_str()
        .unwrap_or("")
        .contains("Gen1 of Gen5 at idle: normal power saving"));
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "8 GPUs: P2P between all 28 pairs, all over NVLink"
    );
    let topo = table(&doc, "gpu.topology", "GPU topology");
    assert_eq!(topo["header"][0], "");
    assert_eq!(topo["header"][8], "GPU7");
    assert_eq!(topo["rows"][0][0], "GPU0");
    for a in 0..8 {
        for b in 0..8 {
            let want = if a == b { "X" } else { "NV18" };
            assert_eq!(cell(topo, a, b), want, "GPU{a}-GPU{b}");
        }
    }
    assert!(topo["legend"].as_str().unwrap_or("").contains("NV#"));
    let p2p = table(&doc, "gpu.topology", "GPU P2P read/write");
    assert_eq!(cell(p2p, 2, 6), "OK");
    assert_eq!(
        device(&doc, "gpu.topology", 5)["summary"],
        "18/18 NVLinks active (to NVSwitch)"
    );
}

#[test]
fn healthy_4x_a800_passes_and_reports_validate() {
    let (out, doc) = run_gpu("a800x4", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_all(&doc, &GPU_CHECKS, "pass");
    assert_eq!(
        summary(&doc, "gpu.driver"),
        "driver 535.161.08, NVML 12.535.161.08, supports CUDA 12.2"
    );
    assert_eq!(
        summary(&doc, "gpu.count"),
        "4 GPUs: 4x NVIDIA A800-SXM4-80GB"
    );
    assert_eq!(
        device(&doc, "gpu.count", 0)["summary"],
        "NVIDIA A800-SXM4-80GB, 81920 MiB, cc 8.0, 00000000:18:00.0"
    );
    assert_eq!(
        cell(table(&doc, "gpu.topology", "GPU topology"), 1, 3),
        "NV8"
    );
    let xml = junit_of("a800x4", &[]);
    assert!(xml.contains("name=\"gpu.topology\""), "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
}

#[test]
fn default_library_name_is_found_through_the_loader_path() {
    // No --nvml-lib: gpucheck asks for libnvidia-ml.so.1 as the driver names
    // it, and the loader finds the fake first on LD_LIBRARY_PATH.
    let lib = fake_nvml();
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", nvml_scenario("a800x4"))
        .env("LD_LIBRARY_PATH", lib.parent().expect("fixture dir"))
        .args(["--only", "gpu.driver,gpu.count", "--format", "json"])
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        summary(&doc, "gpu.count"),
        "4 GPUs: 4x NVIDIA A800-SXM4-80GB"
    );
    assert_eq!(
        result(&doc, "gpu.driver")["facts"]["nvml_library"],
        "libnvidia-ml.so.1"
    );
}

#[test]
fn gpu_checks_are_in_the_quick_profile() {
    let (_, doc) = run_with(&fake_nvml(), "h100x8", &["--profile", "quick"]);
    assert_all(&doc, &GPU_CHECKS, "pass");
}

#[test]
fn single_gpu_has_no_peer_links_to_check() {
    let (out, doc) = run_gpu("single_gpu", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.topology"), "pass");
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "single GPU: no peer links to check"
    );
    // One is one GPU, not "1 GPUs".
    assert_eq!(summary(&doc, "gpu.count"), "1 GPU: 1x NVIDIA H100 PCIe");
    assert_eq!(
        summary(&doc, "gpu.processes"),
        "no other processes on the GPU"
    );
}

// ---------------------------------------------------------------------------
// Real machines: scenarios written from public `nvidia-smi -a` dumps (each
// file names its source)

/// What a gpu check may say on a real box beyond "pass": (check, status,
/// summary), each warranted by the dump (see the scenario's comments).
type Warranted = &'static [(&'static str, &'static str, &'static str)];

const NO_P2P_8: (&str, &str, &str) = (
    "gpu.topology",
    "warn",
    "no P2P between 28 of 28 GPU pairs (GPU does not support P2P)",
);

/// Every healthy box from a real dump, with what its dump warrants.
const REAL_HEALTHY_BOXES: &[(&str, Warranted)] = &[
    ("healthy_h100_sxm_x8", &[]),
    ("healthy_h100_nvl_x2", &[]),
    ("healthy_h200", &[]),
    ("healthy_l4", &[]),
    ("healthy_l40s", &[]),
    ("healthy_a10", &[]),
    ("healthy_a40_x10", &[]),
    ("healthy_rtx4090_x8", &[NO_P2P_8]),
    ("healthy_rtx6000ada_x8", &[]),
    ("healthy_rtx_a6000_x9", &[]),
    ("healthy_v100_sxm2_x8", &[]),
    (
        "healthy_a10g",
        &[
            ("gpu.mode", "warn", "GPU 0: persistence mode off"),
            (
                "gpu.processes",
                "warn",
                "someone else's job is on GPU 0: pid 3402470 (not visible here: another \
                 container or PID namespace) (8716 MiB)",
            ),
        ],
    ),
    (
        "healthy_a100_mig",
        &[(
            "gpu.mode",
            "warn",
            "GPU 0: persistence mode off, MIG enabled",
        )],
    ),
    (
        "healthy_rtx3090_x2",
        &[
            (
                "gpu.ecc",
                "skip",
                "ECC not supported on these GPUs (n/a): nothing to check",
            ),
            (
                "gpu.topology",
                "warn",
                "no P2P between GPU0-GPU1 (GPU does not support P2P)",
            ),
        ],
    ),
    (
        "healthy_rtx5090",
        &[(
            "gpu.ecc",
            "skip",
            "ECC not supported on this GPU (n/a): nothing to check",
        )],
    ),
];

/// The quick profile against a real box, without the checks that depend on
/// this test machine rather than the fake driver (no /dev/nvidia* here; port
/// 29500 shared with other test runs).
fn quick_profile(scenario_name: &str) -> (Output, Value) {
    run_with(
        &fake_nvml(),
        scenario_name,
        &[
            "--profile",
            "quick",
            "--skip",
            "host.devices,net.master_port",
        ],
    )
}

#[test]
fn real_healthy_boxes_are_ready_with_no_warning_their_dump_does_not_warrant() {
    for (name, warranted) in REAL_HEALTHY_BOXES {
        let (out, doc) = quick_profile(name);
        assert_eq!(exit_code(&out), 0, "{name}: {}", stderr(&out));
        assert_eq!(doc["exit_code"], 0, "{name}");
        for id in GPU_CHECKS {
            let (status, text) = warranted
                .iter()
                .find(|(check, _, _)| *check == id)
                .map_or(("pass", None), |(_, s, t)| (*s, Some(*t)));
            assert_eq!(
                status_of(&doc, id),
                status,
                "{name} {id}: {}",
                summary(&doc, id)
            );
            if let Some(text) = text {
                assert_eq!(summary(&doc, id), text, "{name} {id}");
            }
        }
    }
}

#[test]
fn real_boxes_idle_links_and_ecc_off_by_default_are_said_so() {
    // An idle L4 at Gen1 x8 of Gen4 x16 (as its dump shows): power saving.
    let (_, doc) = quick_profile("healthy_l4");
    assert_eq!(
        device(&doc, "gpu.pcie", 0)["summary"],
        "Gen1 x8 (max Gen4 x16) (x8 of x16 at idle: normal power saving; Gen1 of Gen4 at idle: \
         normal power saving)"
    );
    // An A10G serving inference at P0 but 0 % busy, x8 of x16 (its dump).
    let (_, doc) = quick_profile("healthy_a10g");
    assert_eq!(
        device(&doc, "gpu.pcie", 0)["summary"],
        "Gen4 x8 (max Gen4 x16) (x8 of x16 at idle: normal power saving)"
    );
    // RTX 4090 and RTX 6000 Ada report ECC "Disabled": their default.
    for name in ["healthy_rtx4090_x8", "healthy_rtx6000ada_x8"] {
        let (_, doc) = quick_profile(name);
        assert_eq!(
            summary(&doc, "gpu.ecc"),
            "8 GPUs: ECC off, as the card ships (the default of GeForce and workstation cards); \
             error counts not kept",
            "{name}"
        );
        assert_eq!(
            device(&doc, "gpu.ecc", 3)["summary"],
            "ECC off (the card's default)"
        );
    }
}

#[test]
fn a_real_v100_cube_mesh_passes_with_its_page_retirement_and_cpu_crossing_pairs() {
    // A DGX-1-style V100 mesh: 16 pairs over NVLink, 12 with no P2P at all
    // (deviceQuery: No), which meet only through the CPU; GPU 4 has retired
    // one page for single-bit errors, nothing pending.
    let (out, doc) = quick_profile("healthy_v100_sxm2_x8");
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "8 GPUs: P2P between 16 of 28 pairs, 16 over NVLink; 12 pairs meet only through the \
         CPU, where NCCL does not use P2P by default"
    );
    assert_eq!(
        summary(&doc, "gpu.ecc"),
        "8 GPUs: no uncorrectable ECC errors, nothing pending retirement or remap"
    );
    assert_eq!(status_of(&doc, "gpu.ecc"), "pass");
}

#[test]
fn a_real_a100_with_a_row_remap_pending_fails_that_gpu_only() {
    let (out, doc) = quick_profile("a100_sxm_x4_remap_pending");
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.ecc"), "fail");
    assert_eq!(summary(&doc, "gpu.ecc"), "GPU 1: row remap pending");
    assert!(hint(&doc, "gpu.ecc").starts_with("GPU 1 must be reset"));
    for id in GPU_CHECKS.iter().filter(|id| **id != "gpu.ecc") {
        assert_eq!(status_of(&doc, id), "pass", "{id}: {}", summary(&doc, id));
    }
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "4 GPUs: P2P between all 6 pairs, all over NVLink"
    );
}

// ---------------------------------------------------------------------------
// Consumer GPUs and missing features

#[test]
fn two_geforce_cards_without_ecc_nvlink_or_p2p() {
    let (out, doc) = run_gpu("geforce2", &[]);
    assert_eq!(exit_code(&out), 0, "warnings only");
    // A real RTX 4090 offers ECC and ships with it off (nvidia-smi:
    // "Disabled"): the card's default, a pass that says so.
    assert_eq!(status_of(&doc, "gpu.ecc"), "pass");
    assert_eq!(
        summary(&doc, "gpu.ecc"),
        "2 GPUs: ECC off, as the card ships (the default of GeForce and workstation cards); \
         error counts not kept"
    );
    assert_eq!(hint(&doc, "gpu.ecc"), "");
    assert_eq!(status_of(&doc, "gpu.pcie"), "pass");
    assert_eq!(status_of(&doc, "gpu.topology"), "warn");
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "no P2P between GPU0-GPU1 (GPU does not support P2P)"
    );
    assert!(hint(&doc, "gpu.topology").contains("nothing to fix in software"));
    assert!(!hint(&doc, "gpu.topology").contains("ACSCtl"));
    let topo = table(&doc, "gpu.topology", "GPU topology");
    assert_eq!(cell(topo, 0, 1), "PHB");
    assert_eq!(
        cell(table(&doc, "gpu.topology", "GPU P2P read/write"), 1, 0),
        "GNS"
    );
    assert_eq!(device(&doc, "gpu.topology", 0)["summary"], "no NVLink");
    // Persistence mode off: slow CUDA starts.
    assert_eq!(status_of(&doc, "gpu.mode"), "warn");
    assert_eq!(
        summary(&doc, "gpu.mode"),
        "GPU 0: persistence mode off; GPU 1: persistence mode off"
    );
    let h = hint(&doc, "gpu.mode");
    assert!(
        h.contains("nvidia-persistenced") && h.contains("nvidia-smi -i 0,1 -pm 1"),
        "{h}"
    );
    // The desktop's Xorg on GPU 0 is a display server, not someone's job:
    // noted, never a warning, never offered to `kill`.
    assert_eq!(status_of(&doc, "gpu.processes"), "pass");
    assert_eq!(
        summary(&doc, "gpu.processes"),
        "no other compute processes on the 2 GPUs (display/graphics only on GPU 0)"
    );
    assert_eq!(hint(&doc, "gpu.processes"), "");
    assert_eq!(
        device(&doc, "gpu.processes", 0)["summary"],
        "no other compute processes (graphics only: pid 1523 /usr/lib/xorg/Xorg (48 MiB))"
    );
    // --strict turns the warnings into exit 1.
    let (strict, _) = run_gpu("geforce2", &["--strict"]);
    assert_eq!(exit_code(&strict), 1);
}

#[test]
fn queries_not_supported_are_na_never_failures() {
    let (out, doc) = run_gpu("unsupported", &[]);
    assert_eq!(exit_code(&out), 0, "{}", stdout(&out));
    assert_all(&doc, &["gpu.driver", "gpu.count"], "pass");
    assert_all(
        &doc,
        &[
            "gpu.ecc",
            "gpu.pcie",
            "gpu.throttle",
            "gpu.mode",
            "gpu.processes",
            "gpu.topology",
        ],
        "skip",
    );
    for id in [
        "gpu.pcie",
        "gpu.throttle",
        "gpu.mode",
        "gpu.processes",
        "gpu.topology",
    ] {
        assert!(
            summary(&doc, id).contains("(n/a)"),
            "{id}: {}",
            summary(&doc, id)
        );
    }
    assert_eq!(
        device(&doc, "gpu.count", 2)["summary"],
        "GRID V100-16Q, memory n/a, cc n/a, 00000000:38:00.0"
    );
}

#[test]
fn an_old_driver_without_the_v3_process_lists_still_names_the_job() {
    let (out, doc) = run_with(
        &fake_nvml_old(),
        "other_process",
        &["--only", "gpu.processes"],
    );
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.processes"), "warn");
    let s = summary(&doc, "gpu.processes");
    assert!(
        s.starts_with("someone else's job is on GPU 1: pid 4242 python (12000 MiB), "),
        "{s}"
    );
    assert!(hint(&doc, "gpu.processes").contains("kill 4242"));
}

#[test]
fn a_busy_gpu_whose_job_nvml_cannot_list_warns_with_what_its_numbers_show() {
    // Two M40s at 78 % holding 814 and 558 MiB, no process listed (a real
    // container's view, on a driver with only the original memory query).
    let (out, doc) = run_with(
        &fake_nvml_old(),
        "unlisted_jobs_m40x2",
        &["--only", "gpu.processes"],
    );
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.processes"), "warn");
    assert_eq!(
        summary(&doc, "gpu.processes"),
        "other processes hold memory on GPUs 0, 1: GPU 0: 814 MiB in use, 78% busy, by no \
         process NVML lists (a job in another container or PID namespace); GPU 1: 558 MiB in \
         use, 78% busy, by no process NVML lists (a job in another container or PID namespace)"
    );
    let h = hint(&doc, "gpu.processes");
    assert!(h.contains("run `nvidia-smi` on the host"), "{h}");
    assert!(!h.contains("kill"), "{h}");
    // Busy with nothing held (the synthetic loaded boxes): still a pass.
    let (_, doc) = run_gpu("thermal", &[]);
    assert_eq!(status_of(&doc, "gpu.processes"), "pass");
    assert!(device(&doc, "gpu.processes", 6)["summary"]
        .as_str()
        .is_some_and(|s| s.contains("a job that just ended")));
}

#[test]
fn an_old_driver_missing_newer_functions_still_works() {
    // The old-driver build lacks nvmlDeviceGetRemappedRows, _MemoryInfo_v2,
    // _MigMode, _ComputeRunningProcesses_v3, _CudaDriverVersion_v2 and more.
    let (out, doc) = run_with(
        &fake_nvml_old(),
        "h100x8",
        &["--only", "gpu", "--skip", common::LOAD_CHECKS],
    );
    assert_eq!(exit_code(&out), 0, "{}", stdout(&out));
    // The original entry points fill in what the newer ones would have.
    assert_eq!(
        result(&doc, "gpu.driver")["facts"]["cuda_driver_version"],
        "12.8"
    );
    assert!(device(&doc, "gpu.count", 0)["summary"]
        .as_str()
        .unwrap_or("")
        .contains("81559 MiB"));
    assert_eq!(status_of(&doc, "gpu.ecc"), "pass");
    let metrics = device(&doc, "gpu.ecc", 0)["metrics"].to_string();
    assert!(!metrics.contains("remapped_rows"), "{metrics}");
    // The process lists come from the original entry points.
    assert_eq!(status_of(&doc, "gpu.processes"), "pass");
    assert_eq!(
        summary(&doc, "gpu.processes"),
        "no other processes on the 8 GPUs"
    );
    assert!(
        summary(&doc, "gpu.mode").contains("MIG n/a"),
        "{}",
        summary(&doc, "gpu.mode")
    );
    assert_eq!(status_of(&doc, "gpu.topology"), "pass");
}

// ---------------------------------------------------------------------------
// Sick machines

#[test]
fn uncorrectable_ecc_and_a_pending_row_remap_fail() {
    let (out, doc) = run_gpu("ecc_remap", &[]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.ecc"), "fail");
    assert_eq!(
        summary(&doc, "gpu.ecc"),
        "GPU 3: 2 uncorrectable ECC errors since the driver loaded, row remap pending"
    );
    let h = hint(&doc, "gpu.ecc");
    assert!(h.contains("sudo nvidia-smi -r -i 3"), "{h}");
    assert!(h.contains("GPU 3 must be reset"), "{h}");
    assert_eq!(device(&doc, "gpu.ecc", 3)["status"], "fail");
    assert_eq!(device(&doc, "gpu.ecc", 2)["status"], "pass");
    // The other checks are not dragged down.
    assert_all(&doc, &["gpu.count", "gpu.pcie", "gpu.topology"], "pass");
    let xml = junit_of("ecc_remap", &[]);
    assert!(xml.contains("<failure"), "{xml}");
}

#[test]
fn a_narrow_link_under_load_or_a_narrow_slot_warns_and_idle_links_do_not() {
    let (out, doc) = run_gpu("pcie_x8", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.pcie"), "warn");
    assert_eq!(
        summary(&doc, "gpu.pcie"),
        "GPU 2: PCIe Gen3 of Gen5 while 95 % busy; GPU 5: PCIe x8 of x16 while 90 % busy; \
         GPU 7: PCIe slot x8: the card takes x16"
    );
    let h = hint(&doc, "gpu.pcie");
    assert!(
        h.contains("GPU 5 runs a narrower PCIe link under load") && h.contains("LnkSta"),
        "{h}"
    );
    assert!(h.contains("GPU 7 can train no wider than its slot"), "{h}");
    assert!(h.contains("nvidia-smi -q -d PCIE -i 2"), "{h}");
    // Idle links, x8 of x16 on GPU 3 included, are power saving.
    for idle in [0, 1, 3, 4, 6] {
        assert_eq!(
            device(&doc, "gpu.pcie", idle)["status"],
            "pass",
            "GPU {idle}"
        );
    }
    assert!(device(&doc, "gpu.pcie", 3)["summary"]
        .as_str()
        .unwrap_or("")
        .contains("x8 of x16 at idle: normal power saving"));
    assert_eq!(device(&doc, "gpu.pcie", 5)["status"], "warn");
    assert_eq!(device(&doc, "gpu.pcie", 7)["status"], "warn");
}

#[test]
fn an_idle_gpu_at_half_width_is_named_beside_its_full_width_siblings() {
    let (out, doc) = run_gpu("pcie_x8_idle_one_of_four", &["--only", "gpu.pcie"]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.pcie"), "pass");
    assert_eq!(
        summary(&doc, "gpu.pcie"),
        "GPU 2 at PCIe x8 of x16 while its 3 identical siblings run x16: recheck it under load \
         (an idle link may narrow, a degraded one stays narrow); 3 GPUs at full PCIe link width \
         (x16) (idle GPUs at a lower width and generation: normal)"
    );
}

#[test]
fn mig_enabled_warns_that_ddp_cannot_span_instances() {
    let (out, doc) = run_gpu("mig", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.mode"), "warn");
    assert_eq!(summary(&doc, "gpu.mode"), "GPU 1: MIG enabled");
    let h = hint(&doc, "gpu.mode");
    assert!(h.contains("cannot span MIG instances"), "{h}");
    assert!(h.contains("sudo nvidia-smi -i 1 -mig 0"), "{h}");
    assert!(device(&doc, "gpu.count", 1)["summary"]
        .as_str()
        .unwrap_or("")
        .ends_with("MIG on (2 instances)"));
}

#[test]
fn another_process_on_gpu_1_is_named() {
    let (out, doc) = run_gpu("other_process", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.processes"), "warn");
    let s = summary(&doc, "gpu.processes");
    assert!(
        s.starts_with("someone else's job is on GPU 1: pid 4242 python (12000 MiB), "),
        "{s}"
    );
    // The second process has no NVML name: /proc names it. It is this test
    // process (gpucheck's parent).
    let me = std::process::id();
    let exe = std::env::current_exe().expect("test binary path");
    let exe_name = exe.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(s.contains(&format!("pid {me} ")), "{s}");
    assert!(s.contains(exe_name), "{s}");
    assert!(s.ends_with("(512 MiB)"), "{s}");
    let h = hint(&doc, "gpu.processes");
    assert!(h.contains(&format!("kill 4242 {me}")), "{h}");
    assert!(h.contains("CUDA_VISIBLE_DEVICES=0,2,3,4,5,6,7"), "{h}");
    assert_eq!(device(&doc, "gpu.processes", 0)["status"], "pass");
}

#[test]
fn another_process_on_a_gpu_outside_cuda_visible_devices_is_only_noted() {
    let (out, doc) = run_with_env(
        &fake_nvml(),
        "other_process",
        &[("CUDA_VISIBLE_DEVICES", "0,2,3")],
        &["--only", "gpu.processes"],
    );
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.processes"), "pass");
    assert_eq!(
        summary(&doc, "gpu.processes"),
        "no other processes on the 3 GPUs in CUDA_VISIBLE_DEVICES=0,2,3 (other jobs on GPU 1, \
         not selected)"
    );
    assert_eq!(hint(&doc, "gpu.processes"), "");
    let gpu1 = device(&doc, "gpu.processes", 1)["summary"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        gpu1.starts_with(
            "other processes (not in CUDA_VISIBLE_DEVICES, not judged: pid 4242 python"
        ),
        "{gpu1}"
    );
}

#[test]
fn mixed_models_warn_and_suggest_one_model() {
    let (out, doc) = run_gpu("mixed", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.count"), "warn");
    assert_eq!(
        summary(&doc, "gpu.count"),
        "mixed GPU models: 4x NVIDIA H100 80GB HBM3 (GPUs 0, 1, 2, 3), \
         4x NVIDIA A100-SXM4-80GB (GPUs 4, 5, 6, 7)"
    );
    let h = hint(&doc, "gpu.count");
    assert!(h.contains("slowest GPU"), "{h}");
    assert!(h.contains("CUDA_VISIBLE_DEVICES=0,1,2,3"), "{h}");
    let topo = table(&doc, "gpu.topology", "GPU topology");
    assert_eq!(cell(topo, 0, 1), "NV18");
    assert_eq!(cell(topo, 0, 5), "NV12");
}

#[test]
fn thermal_slowdown_warns_and_hardware_slowdown_fails() {
    let (out, doc) = run_gpu("thermal", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.throttle"), "warn");
    assert_eq!(
        summary(&doc, "gpu.throttle"),
        "GPU 6: hardware thermal slowdown, software thermal slowdown"
    );
    let h = hint(&doc, "gpu.throttle");
    assert!(h.starts_with("GPU 6 is throttling for heat"), "{h}");
    assert!(
        h.contains("nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i 6"),
        "{h}"
    );
    // The power cap under load is normal.
    assert_eq!(device(&doc, "gpu.throttle", 0)["status"], "pass");
    assert!(device(&doc, "gpu.throttle", 0)["summary"]
        .as_str()
        .unwrap_or("")
        .contains("power cap"));

    // Slowdown with the power brake, in every reading: a failure.
    let (out, doc) = run_gpu("hw_slowdown", &[]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.throttle"), "fail");
    assert_eq!(
        summary(&doc, "gpu.throttle"),
        "GPU 0: hardware slowdown (clocks cut by half or more) in 5 of 5 readings over 1 s"
    );
    let h = hint(&doc, "gpu.throttle");
    assert!(h.contains("PERFORMANCE,TEMPERATURE,POWER -i 0"), "{h}");
    assert!(h.contains("power brake"), "{h}");
}

#[test]
fn one_hardware_slowdown_reading_in_a_clock_change_warns_and_does_not_fail() {
    let started = Instant::now();
    let (out, doc) = run_gpu("hw_slowdown_blip", &[]);
    assert_eq!(exit_code(&out), 0, "{}", summary(&doc, "gpu.throttle"));
    assert_eq!(status_of(&doc, "gpu.throttle"), "warn");
    assert_eq!(
        summary(&doc, "gpu.throttle"),
        "GPU 3: hardware slowdown in 1 of 5 readings over 1 s, without heat or power brake"
    );
    assert!(
        hint(&doc, "gpu.throttle").contains("P-state or clock changes"),
        "{}",
        hint(&doc, "gpu.throttle")
    );
    assert_eq!(device(&doc, "gpu.throttle", 0)["status"], "pass");
    // The readings span a second: the run waits for them, no longer.
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn an_sxm_gpu_listing_fewer_nvlinks_than_its_model_warns() {
    let (out, doc) = run_gpu("nvlink_missing", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.topology"), "warn");
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "GPU 6: only 16 NVLinks listed (H100 SXM5 80GB: 18)"
    );
    assert!(hint(&doc, "gpu.topology").contains("nvidia-smi nvlink -s -i 6"));
    assert_eq!(device(&doc, "gpu.topology", 0)["status"], "pass");
}

#[test]
fn an_nvlink_down_warns() {
    let (out, doc) = run_gpu("nvlink_down", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.topology"), "warn");
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "GPU 3: 16 of 18 NVLinks active (down: link 16, 17)"
    );
    let h = hint(&doc, "gpu.topology");
    assert!(h.contains("nvidia-smi nvlink -s -i 3"), "{h}");
    assert!(h.contains("nvidia-fabricmanager"), "{h}");
    assert_eq!(
        cell(table(&doc, "gpu.topology", "GPU topology"), 3, 0),
        "NV16"
    );
}

#[test]
fn nvlink_errors_that_stand_out_warn_naming_the_gpu_and_link() {
    // GPU 4's link 2: 1,200 replays and 3 recoveries; GPU 1's link 0 has
    // the couple of replays a healthy link can show.
    let (out, doc) = run_gpu("nvlink_errors", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.topology"), "warn");
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "GPU 4: NVLink errors (link 2: 1200 replays, 3 recoveries)"
    );
    let h = hint(&doc, "gpu.topology");
    assert!(h.contains("nvidia-smi nvlink -e -i 4"), "{h}");
    assert_eq!(device(&doc, "gpu.topology", 4)["status"], "warn");
    assert_eq!(device(&doc, "gpu.topology", 1)["status"], "pass");
}

#[test]
fn an_nvlink_down_outside_cuda_visible_devices_is_not_judged() {
    let (out, doc) = run_with_env(
        &fake_nvml(),
        "nvlink_down",
        &[("CUDA_VISIBLE_DEVICES", "0,1,2")],
        &["--only", "gpu", "--skip", common::LOAD_CHECKS],
    );
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.topology"), "pass");
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "3 GPUs in CUDA_VISIBLE_DEVICES=0,1,2: P2P between all 3 pairs, all over NVLink"
    );
    let gpu3 = device(&doc, "gpu.topology", 3);
    assert_eq!(gpu3["status"], "pass");
    assert!(
        gpu3["summary"]
            .as_str()
            .unwrap_or("")
            .ends_with("(not in CUDA_VISIBLE_DEVICES, not judged)"),
        "{gpu3}"
    );
    // Selecting GPU 3 by its UUID brings the down link back into the job.
    let uuid = device(&doc, "gpu.topology", 3)["uuid"]
        .as_str()
        .expect("GPU 3 has a UUID")
        .to_string();
    let (_, doc) = run_with_env(
        &fake_nvml(),
        "nvlink_down",
        &[("CUDA_VISIBLE_DEVICES", &format!("0,{uuid}"))],
        &["--only", "gpu.topology"],
    );
    assert_eq!(status_of(&doc, "gpu.topology"), "warn");
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "GPU 3: 16 of 18 NVLinks active (down: link 16, 17)"
    );
}

#[test]
fn an_nvswitch_fabric_not_started_fails_and_says_start_the_fabric_manager() {
    let (out, doc) = run_gpu("fabric_down", &[]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.topology"), "fail");
    let s = summary(&doc, "gpu.topology");
    assert!(
        s.starts_with("GPU 0: NVSwitch fabric not started (fabric manager); GPU 1: "),
        "{s}"
    );
    let h = hint(&doc, "gpu.topology");
    assert!(
        h.starts_with("the NVSwitch fabric of GPUs 0, 1, 2, 3, 4, 5, 6, 7 is not up"),
        "{h}"
    );
    assert!(
        h.contains("`sudo systemctl enable --now nvidia-fabricmanager`"),
        "{h}"
    );
    // An old driver without the fabric query: not known, not a failure.
    let (_, doc) = run_with(&fake_nvml_old(), "h100x8", &["--only", "gpu.topology"]);
    assert_eq!(status_of(&doc, "gpu.topology"), "pass");
}

#[test]
fn no_p2p_through_the_chipset_points_at_acs_and_iommu() {
    let (out, doc) = run_gpu("no_p2p_acs", &[]);
    assert_eq!(exit_code(&out), 0);
    assert_eq!(status_of(&doc, "gpu.topology"), "warn");
    // The pairs under a PCIe switch warn; those across the sockets (SYS) are
    // shown, not judged: NCCL does not use P2P there by default.
    assert_eq!(
        summary(&doc, "gpu.topology"),
        "no P2P between GPU0-GPU1, GPU2-GPU3 (chipset does not support P2P)"
    );
    let h = hint(&doc, "gpu.topology");
    for needle in ["lspci -vvv | grep ACSCtl", "iommu=pt", "NCCL_P2P_DISABLE=1"] {
        assert!(h.contains(needle), "{needle} missing from {h}");
    }
    let topo = table(&doc, "gpu.topology", "GPU topology");
    assert_eq!(cell(topo, 0, 1), "PXB");
    assert_eq!(cell(topo, 1, 3), "SYS");
    assert_eq!(
        cell(table(&doc, "gpu.topology", "GPU P2P read/write"), 2, 3),
        "CNS"
    );
    assert_eq!(result(&doc, "gpu.topology")["metrics"][0]["value"], 2.0);
}

#[test]
fn prohibited_compute_mode_fails_and_exclusive_process_is_noted() {
    let (out, doc) = run_gpu("prohibited", &[]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.mode"), "fail");
    assert_eq!(summary(&doc, "gpu.mode"), "GPU 1: compute mode Prohibited");
    let h = hint(&doc, "gpu.mode");
    assert!(
        h.starts_with("no CUDA process may use GPU 1: `sudo nvidia-smi -i 1 -c DEFAULT`"),
        "{h}"
    );
    // The persistence warning is still there, after the failure's hint.
    assert!(h.contains("nvidia-smi -i 0,1 -pm 1"), "{h}");
    let gpu0 = device(&doc, "gpu.mode", 0);
    assert_eq!(gpu0["status"], "warn");
    assert!(gpu0["summary"]
        .as_str()
        .unwrap_or("")
        .contains("Exclusive Process"));
}

#[test]
fn a_gpu_fallen_off_the_bus_fails_the_count() {
    let (out, doc) = run_gpu("gpu_lost", &["--expect-gpus", "8"]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.count"), "fail");
    let s = summary(&doc, "gpu.count");
    assert!(
        s.starts_with("GPU 2: counted but cannot be opened: GPU is lost (fallen off the bus)"),
        "{s}"
    );
    assert!(s.contains("7 GPUs usable, expected 8"), "{s}");
    assert!(hint(&doc, "gpu.count").contains("Xid 79"));
    // The other gpu checks judge the seven GPUs that answer and mark the lost
    // one, instead of skipping: one failure for one problem.
    for (id, judged) in [
        (
            "gpu.ecc",
            "7 GPUs: no uncorrectable ECC errors, nothing pending retirement or remap",
        ),
        ("gpu.pcie", "7 GPUs at full PCIe link width (x16)"),
        ("gpu.throttle", "7 GPUs: no slowdown (7 idle)"),
        (
            "gpu.mode",
            "7 GPUs: compute Default, persistence on, MIG off",
        ),
        ("gpu.processes", "no other processes on the 7 GPUs"),
        (
            "gpu.topology",
            "7 GPUs: P2P between all 21 pairs, all over NVLink",
        ),
    ] {
        assert_eq!(status_of(&doc, id), "pass", "{id}: {}", summary(&doc, id));
        assert_eq!(
            summary(&doc, id),
            format!("{judged}; GPU 2 lost: see gpu.count")
        );
        assert_eq!(device(&doc, id, 2)["status"], "skip", "{id}");
        assert_eq!(
            device(&doc, id, 2)["summary"],
            "lost (fallen off the bus): gpu.count fails it"
        );
        assert_eq!(device(&doc, id, 3)["status"], "pass", "{id}");
    }

    // Run alone (its need not selected), gpu.ecc judges the lost GPU itself.
    let (_, doc) = run_with(&fake_nvml(), "gpu_lost", &["--only", "gpu.ecc"]);
    assert_eq!(status_of(&doc, "gpu.ecc"), "fail");
    assert_eq!(
        summary(&doc, "gpu.ecc"),
        "GPU 2: GPU is lost (fallen off the bus)"
    );
    assert_eq!(device(&doc, "gpu.ecc", 3)["status"], "pass");
}

#[test]
fn a_gpu_the_driver_wedged_on_fails_the_count_with_a_reboot() {
    // NVML counts GPU 6 but opening it answers NVML_ERROR_UNKNOWN ("Unknown
    // Error" in nvidia-smi): the machine's fault, not gpucheck's.
    let (out, doc) = run_gpu("gpu_unknown_error", &[]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.count"), "fail");
    assert_eq!(
        summary(&doc, "gpu.count"),
        "GPU 6: counted but cannot be opened: Unknown Error (NVML_ERROR_UNKNOWN: an internal \
         driver error)"
    );
    assert_eq!(result(&doc, "gpu.count")["action"], "reboot_node");
    assert_eq!(
        result(&doc, "gpu.count")["action_gpus"],
        serde_json::json!([6])
    );
    assert!(hint(&doc, "gpu.count").contains("sudo dmesg | grep -i xid"));
    assert_eq!(doc["action"], "reboot_node");
    // The later gpu checks judge the seven GPUs that answer and leave GPU 6
    // to gpu.count: one failure for one problem.
    for id in [
        "gpu.ecc",
        "gpu.pcie",
        "gpu.mode",
        "gpu.processes",
        "gpu.topology",
    ] {
        assert_eq!(status_of(&doc, id), "pass", "{id}: {}", summary(&doc, id));
        assert!(
            summary(&doc, id).ends_with("; GPU 6 unusable: see gpu.count"),
            "{id}: {}",
            summary(&doc, id)
        );
        assert_eq!(device(&doc, id, 6)["status"], "skip", "{id}");
    }
}

#[test]
fn fewer_gpus_than_expected_fail() {
    let (out, doc) = run_gpu("a800x4", &["--expect-gpus", "8"]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.count"), "fail");
    assert_eq!(
        summary(&doc, "gpu.count"),
        "4 GPUs usable, expected 8 (--expect-gpus)"
    );
    assert!(hint(&doc, "gpu.count").starts_with("4 of the expected GPUs are missing"));
    // The environment variable works the same way.
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", nvml_scenario("a800x4"))
        .env("GPUCHECK_EXPECT_GPUS", "4")
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--only", "gpu.count", "--format", "json"])
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(
        summary(&doc, "gpu.count"),
        "4 GPUs (expected 4): 4x NVIDIA A800-SXM4-80GB"
    );
}

#[test]
fn zero_gpus_fail_and_dependents_skip() {
    let (out, doc) = run_gpu("zero_gpus", &[]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.driver"), "pass");
    assert_eq!(status_of(&doc, "gpu.count"), "fail");
    assert_eq!(summary(&doc, "gpu.count"), "NVML sees no GPUs");
    assert!(hint(&doc, "gpu.count").contains("docker run --gpus all"));
    for id in &GPU_CHECKS[2..] {
        assert_eq!(status_of(&doc, id), "skip", "{id}");
        assert_eq!(summary(&doc, id), "needs gpu.count, which failed");
    }
}

// ---------------------------------------------------------------------------
// NVML that cannot start

#[test]
fn driver_not_loaded_says_modprobe() {
    let (out, doc) = run_gpu("init_driver_not_loaded", &[]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.driver"), "fail");
    assert_eq!(
        summary(&doc, "gpu.driver"),
        "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)"
    );
    assert!(hint(&doc, "gpu.driver").starts_with("load it with `sudo modprobe nvidia`"));
    assert_eq!(summary(&doc, "gpu.count"), "needs gpu.driver, which failed");
    // The per-GPU checks need the driver, not a complete count.
    for id in &GPU_CHECKS[2..] {
        assert_eq!(summary(&doc, id), "needs gpu.driver, which failed", "{id}");
    }
    let xml = junit_of("init_driver_not_loaded", &[]);
    assert!(xml.contains("<skipped"), "{xml}");
}

#[test]
fn version_mismatch_says_reboot_or_reload() {
    let (out, doc) = run_gpu("init_version_mismatch", &[]);
    assert_eq!(exit_code(&out), 1);
    assert!(summary(&doc, "gpu.driver").starts_with("driver/library version mismatch"));
    let h = hint(&doc, "gpu.driver");
    assert!(
        h.starts_with("the driver was upgraded without reloading the kernel module: reboot"),
        "{h}"
    );
    assert!(
        h.contains("sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia"),
        "{h}"
    );
}

#[test]
fn no_permission_points_at_the_device_nodes() {
    let (out, doc) = run_gpu("init_no_permission", &[]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(
        summary(&doc, "gpu.driver"),
        "no permission to talk to the NVIDIA driver (NVML_ERROR_NO_PERMISSION)"
    );
    assert!(hint(&doc, "gpu.driver").contains("ls -l /dev/nvidia*"));
}

#[test]
fn a_library_that_is_not_there_fails_cleanly() {
    let missing = root().join("target/fixtures/does-not-exist/libnvidia-ml.so.1");
    let out = gpucheck()
        .arg("--nvml-lib")
        .arg(&missing)
        .args([
            "--only",
            "gpu",
            "--skip",
            common::LOAD_CHECKS,
            "--format",
            "json",
        ])
        .output()
        .expect("run gpucheck");
    assert_eq!(exit_code(&out), 1);
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(status_of(&doc, "gpu.driver"), "fail");
    let s = summary(&doc, "gpu.driver");
    assert!(
        s.starts_with(&format!(
            "cannot load NVML from --nvml-lib {}",
            missing.display()
        )),
        "{s}"
    );
    assert!(hint(&doc, "gpu.driver").contains("check the path given to --nvml-lib"));
    for id in &GPU_CHECKS[1..] {
        assert_eq!(status_of(&doc, id), "skip", "{id}");
    }
    assert!(!stderr(&out).contains("panic"), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------
// NVML that hangs

#[test]
fn nvml_hanging_in_a_call_times_out_and_gpucheck_exits() {
    let (out, doc) = run_gpu("hang_ecc", &["--timeout", "1"]);
    assert_eq!(exit_code(&out), 1);
    assert_all(&doc, &["gpu.driver", "gpu.count"], "pass");
    assert_eq!(status_of(&doc, "gpu.ecc"), "fail");
    assert_eq!(summary(&doc, "gpu.ecc"), "timed out after 1 s");
    let h = hint(&doc, "gpu.ecc");
    assert!(
        h.starts_with("NVML did not return from nvmlDeviceGetEccMode"),
        "{h}"
    );
    assert!(h.contains("--skip gpu.ecc"), "{h}");
    // The checks after it do not queue behind the hung driver.
    for id in &GPU_CHECKS[3..] {
        assert_eq!(status_of(&doc, id), "fail", "{id}");
        assert!(
            summary(&doc, id).contains("NVML has not returned from nvmlDeviceGetEccMode"),
            "{id}: {}",
            summary(&doc, id)
        );
    }
}

#[test]
fn nvml_hanging_in_init_times_out_and_the_rest_skip() {
    let (out, doc) = run_gpu("hang_init", &["--timeout", "1"]);
    assert_eq!(exit_code(&out), 1);
    assert_eq!(status_of(&doc, "gpu.driver"), "fail");
    assert_eq!(summary(&doc, "gpu.driver"), "timed out after 1 s");
    assert!(hint(&doc, "gpu.driver").starts_with("NVML did not return from nvmlInit_v2"));
    assert_eq!(summary(&doc, "gpu.count"), "needs gpu.driver, which failed");
    // The JUnit report of a hung run is still complete and valid.
    let xml = junit_of("hang_init", &["--timeout", "1"]);
    assert!(xml.contains("timed out after 1 s"), "{xml}");
}

#[test]
fn the_driver_and_the_inventory_are_published_as_typed_facts() {
    // Later checks (and `gpucheck cluster`, from every node's report) read
    // what NVML said from the report's data, never from the summary text.
    let (_, doc) = run_gpu("gpu_lost", &[]);
    let driver = &result(&doc, "gpu.driver")["data"]["nvml_driver"]["Ok"];
    assert_eq!(driver["driver_version"], "570.86.15");
    assert_eq!(driver["cuda_driver_version"], 12080);
    let inventory = result(&doc, "gpu.count")["data"]["nvml_inventory"]["Ok"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(inventory.len(), 8);
    assert_eq!(inventory[1]["Ok"]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(inventory[2]["Err"]["error"], "GpuLost");
    // A driver NVML cannot load is published too, as the failure.
    let (_, doc) = run_gpu("init_driver_not_loaded", &[]);
    assert_eq!(
        result(&doc, "gpu.driver")["data"]["nvml_driver"]["Err"],
        "DriverNotLoaded"
    );
}

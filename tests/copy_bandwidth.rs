//! cuda.copy_bandwidth through the real binary against the fake libcuda
//! (tests/fixtures/fake_cuda.c, whose `copy_gbps` key makes host<->device
//! copies take real time at a given rate) and the fake NVML (the PCIe links),
//! with a fixture tree standing for /sys for the GPUs' NUMA nodes.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{
    assert_valid_json_report, build_fixture_lib, gpucheck, result, root, stdout, text_field,
};
use serde_json::Value;

fn fixture(rel: &str) -> PathBuf {
    let p = root().join("tests/fixtures").join(rel);
    assert!(p.exists(), "{} missing", p.display());
    p
}

fn fake_cuda_dir() -> PathBuf {
    let lib = build_fixture_lib("fake_cuda.c", "cuda", "libcuda.so.1");
    lib.parent().expect("a folder").to_path_buf()
}

/// `gpucheck --only cuda.copy_bandwidth` with the fake libcuda in
/// `cuda_scenario` and the fake NVML in `nvml_scenario`.
fn run(cuda_scenario: &str, nvml_scenario: &str) -> (Output, Value) {
    let out = gpucheck()
        .env("LD_LIBRARY_PATH", fake_cuda_dir())
        .env(
            "FAKE_CUDA_SCENARIO",
            fixture(&format!("cuda/{cuda_scenario}.scenario")),
        )
        .env(
            "FAKE_NVML_SCENARIO",
            fixture(&format!("nvml/{nvml_scenario}.scenario")),
        )
        .env("GPUCHECK_SYSFS_ROOT", fixture("sysfs/gpu_numa"))
        .arg("--nvml-lib")
        .arg(build_fixture_lib(
            "fake_nvml.c",
            "nvml",
            "libnvidia-ml.so.1",
        ))
        .args(["--only", "cuda.copy_bandwidth", "--format", "json"])
        .args(["--color", "never"])
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

fn field(doc: &Value, name: &str) -> String {
    text_field(doc, "cuda.copy_bandwidth", name)
}

#[test]
fn steady_copies_near_the_link_rate_pass_with_a_table() {
    let (out, doc) = run("steady-copy-2x", "gen1_x2_pair");
    assert_eq!(field(&doc, "status"), "pass", "{doc}");
    assert!(
        field(&doc, "summary").starts_with("pinned copies on 2 GPUs: at least 0.4"),
        "{doc}"
    );
    let table = &result(&doc, "cuda.copy_bandwidth")["tables"][0];
    assert_eq!(table["header"][3], "H2D GB/s", "{doc}");
    assert_eq!(table["rows"][1][0], "1", "{doc}");
    assert_eq!(table["rows"][1][1], "Gen1 x2", "{doc}");
    assert_eq!(table["rows"][1][2], "1", "{doc}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_gpu_with_slow_copies_warns_naming_it_and_its_numa_node() {
    let (out, doc) = run("slow-copy-gpu1", "gen1_x2_pair");
    assert_eq!(field(&doc, "status"), "warn", "{doc}");
    let summary = field(&doc, "summary");
    assert!(summary.starts_with("GPU 1: copies "), "{summary}");
    assert!(summary.contains("(NUMA node 1)"), "{summary}");
    assert!(!summary.contains("GPU 0"), "{summary}");
    assert!(
        field(&doc, "hint").contains("nvidia-smi -q -d PCIE -i 1"),
        "{doc}"
    );
    let devices = &result(&doc, "cuda.copy_bandwidth")["devices"];
    assert_eq!(devices[0]["status"], "pass", "{doc}");
    assert_eq!(devices[1]["status"], "warn", "{doc}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning exits 0 unless --strict"
    );
}

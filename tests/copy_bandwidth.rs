//! cuda.copy_bandwidth through the real binary against the fake libcuda
//! (tests/fixtures/fake_cuda.c, whose `copy_gbps` key makes host<->device
//! copies take real time at a given rate) and the fake NVML (the PCIe links),
//! with a fixture tree standing for /sys for the GPUs' NUMA nodes.

mod common;

use std::path::{Path, PathBuf};
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
    run_with(
        &fixture(&format!("cuda/{cuda_scenario}.scenario")),
        nvml_scenario,
        &fixture("sysfs/gpu_numa"),
    )
}

/// [`run`] with a fake libcuda scenario file and a tree standing for /sys.
fn run_with(cuda_scenario: &Path, nvml_scenario: &str, sysfs: &Path) -> (Output, Value) {
    let out = gpucheck()
        .env("LD_LIBRARY_PATH", fake_cuda_dir())
        .env("FAKE_CUDA_SCENARIO", cuda_scenario)
        .env(
            "FAKE_NVML_SCENARIO",
            fixture(&format!("nvml/{nvml_scenario}.scenario")),
        )
        .env("GPUCHECK_SYSFS_ROOT", sysfs)
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

#[test]
fn one_noisy_measurement_is_measured_again_and_does_not_warn() {
    // GPU 1's first measurement reads half its rate, the next two normal:
    // the median of three decides, and the GPU's row says it was low once.
    let (out, doc) = run("noisy-copy-gpu1", "gen1_x2_pair");
    assert_eq!(field(&doc, "status"), "pass", "{doc}");
    let devices = &result(&doc, "cuda.copy_bandwidth")["devices"];
    let gpu1 = devices[1]["summary"].as_str().unwrap_or("");
    assert!(
        gpu1.ends_with("back (low in 1 of 3 runs; the median counts)"),
        "{doc}"
    );
    assert_eq!(out.status.code(), Some(0));
}

/// Two CPUs this process may run on (a dual-socket host's two nodes, here).
fn two_allowed_cpus() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    let mut cpus = Vec::new();
    for range in list.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        cpus.extend(lo.parse::<usize>().unwrap()..=hi.parse::<usize>().unwrap());
    }
    assert!(
        cpus.len() >= 2,
        "this test needs two CPUs to stand for two NUMA nodes; allowed: {list}"
    );
    (cpus[0], cpus[cpus.len() - 1])
}

#[test]
fn each_gpu_is_measured_from_its_own_numa_node() {
    // A dual-socket host: GPU 0 on node 0 (CPU a), GPU 1 on node 1 (CPU b).
    // Pinned memory allocated by a thread that may run anywhere crosses the
    // CPU interconnect (the fake's far_gbps, under half the Gen1 x2 link);
    // bound to each GPU's CPUs first, as nvbandwidth does, it does not.
    let (a, b) = two_allowed_cpus();
    let dir = tempfile::tempdir().unwrap();
    for (bus, node, cpu) in [("18", 0, a), ("19", 1, b)] {
        let dev = dir.path().join(format!("bus/pci/devices/0000:{bus}:00.0"));
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("numa_node"), format!("{node}\n")).unwrap();
        std::fs::write(dev.join("local_cpulist"), format!("{cpu}\n")).unwrap();
    }
    let scenario = dir.path().join("far-socket.scenario");
    let steady = std::fs::read_to_string(fixture("cuda/steady-copy-2x.scenario")).unwrap();
    std::fs::write(
        &scenario,
        format!("{steady}numa = 0 {a}\nnuma = 1 {b}\nfar_gbps = 0 0.1 0.1\nfar_gbps = 1 0.1 0.1\n"),
    )
    .unwrap();
    let (out, doc) = run_with(&scenario, "gen1_x2_pair", dir.path());
    assert_eq!(field(&doc, "status"), "pass", "{doc}");
    assert!(
        field(&doc, "summary")
            .starts_with("pinned copies on 2 GPUs, each from the CPUs local to it: "),
        "{doc}"
    );
    let rows = &result(&doc, "cuda.copy_bandwidth")["tables"][0]["rows"];
    assert_eq!(rows[0][2], "0", "{doc}");
    assert_eq!(rows[1][2], "1", "{doc}");
    assert_eq!(rows[0][5], a.to_string().as_str(), "{doc}");
    assert_eq!(rows[1][5], b.to_string().as_str(), "{doc}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_toolkit_stub_loaded_as_the_driver_is_named() {
    // The stub linked as libcuda.so.1 (a container built that way): cuInit
    // answers CUDA_ERROR_STUB_LIBRARY, and the verdict names the file.
    let dir = tempfile::tempdir().unwrap();
    let stub = dir.path().join("libcuda.so.1");
    std::fs::copy(common::stub_libcuda_dir().join("libcuda.so"), &stub).unwrap();
    let out = gpucheck()
        .env("LD_LIBRARY_PATH", dir.path())
        .args(["--only", "cuda.copy_bandwidth", "--format", "json"])
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(field(&doc, "status"), "fail", "{doc}");
    assert_eq!(
        field(&doc, "summary"),
        format!(
            "the libcuda loaded, {}, is the CUDA toolkit's stub, not the NVIDIA driver (cuInit: \
             CUDA_ERROR_STUB_LIBRARY)",
            stub.display()
        )
    );
    assert_eq!(out.status.code(), Some(1));
}

//! The cuda.* and torch.* checks through the real binary.
//!
//! CUDA driver: a fake libcuda.so.1 (tests/fixtures/fake_cuda.c, scenarios
//! in tests/fixtures/cuda/) on LD_LIBRARY_PATH, loaded by the real cudarc
//! code path. CUDA runtime and PyTorch: the real torch 2.15.0+cu132 wheel and
//! its bundled libcudart.so.13 in the test virtual environment (.venv).
//!
//! A few tests reproduce what a host without an NVIDIA driver shows (the CI
//! machine is one). On a host that has a driver they fail, naming what they
//! found, rather than pass without testing: GPU hosts are checked with
//! `scripts/gpu-smoke.sh`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

/// The folder holding the fake libcuda.so.1, built on first use.
fn fake_cuda_dir() -> PathBuf {
    let lib = build_fixture_lib("fake_cuda.c", "cuda", "libcuda.so.1");
    lib.parent()
        .expect("fixture lib has a folder")
        .to_path_buf()
}

fn scenario(name: &str) -> PathBuf {
    let p = root()
        .join("tests/fixtures/cuda")
        .join(format!("{name}.scenario"));
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// LD_LIBRARY_PATH with the fake libcuda's folder first.
fn ld_path_with_fake() -> String {
    let mut dirs = vec![fake_cuda_dir()];
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(dirs)
        .expect("join LD_LIBRARY_PATH")
        .to_string_lossy()
        .into_owned()
}

/// Run gpucheck against the fake libcuda driven by `scenario_name`, with
/// `--json -`; returns the output and the validated report.
fn run_fake(
    scenario_name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Output, serde_json::Value) {
    let mut cmd = gpucheck();
    cmd.args(args)
        .args(["--json", "-"])
        .env("LD_LIBRARY_PATH", ld_path_with_fake())
        .env("FAKE_CUDA_SCENARIO", scenario(scenario_name));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

/// Run gpucheck without the fake, with `--json -`.
fn run_plain(args: &[&str]) -> (Output, serde_json::Value) {
    let out = gpucheck()
        .args(args)
        .args(["--json", "-"])
        .output()
        .expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

fn assert_no_panic(out: &Output) {
    let err = stderr(out);
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "gpucheck panicked:\n{err}"
    );
}

fn field<'a>(r: &'a serde_json::Value, key: &str) -> &'a str {
    r[key].as_str().unwrap_or("")
}

fn fact<'a>(r: &'a serde_json::Value, key: &str) -> &'a str {
    r["facts"][key].as_str().unwrap_or("")
}

/// What shows that this machine has an NVIDIA driver, if anything does.
fn nvidia_driver_evidence() -> Option<String> {
    let version = Path::new("/proc/driver/nvidia/version");
    if version.exists() {
        return Some(version.display().to_string());
    }
    let cache = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    ["libcuda.so", "libnvidia-ml.so"]
        .iter()
        .find(|lib| cache.contains(*lib))
        .map(|lib| format!("{lib} in the ld.so cache"))
}

/// For the tests that reproduce a host without an NVIDIA driver: fail, naming
/// the driver, on a host that has one (such a test cannot run there).
fn require_no_nvidia_driver() {
    if let Some(found) = nvidia_driver_evidence() {
        panic!(
            "this test needs a host without an NVIDIA driver (CI is one), and this one has \
             {found}; on GPU hosts use scripts/gpu-smoke.sh"
        );
    }
}

/// Processes whose environment carries `NAME=VALUE` (for "nothing left
/// running" checks of processes whose command line says nothing).
fn processes_with_env(entry: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if pid == me {
                continue;
            }
            if let Ok(raw) = std::fs::read(e.path().join("environ")) {
                if raw.split(|b| *b == 0).any(|v| v == entry.as_bytes()) {
                    found.push(pid);
                }
            }
        }
    }
    found
}

// ---------------------------------------------------------------- cuda.driver

#[test]
fn cuda_driver_without_libcuda_fails_cleanly() {
    require_no_nvidia_driver();
    let (out, doc) = run_plain(&["--only", "cuda"]);
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        field(r, "summary").starts_with("libcuda.so.1 not found"),
        "{r}"
    );
    assert!(field(r, "hint").contains("docker run --gpus all"), "{r}");
    assert_eq!(status_of(&doc, "cuda.runtime"), "skip");
}

#[test]
fn one_missing_driver_is_fixed_once_and_its_dependents_point_to_it() {
    require_no_nvidia_driver();
    let (out, doc) = run_plain(&["--only", "host.devices,gpu.driver,cuda.driver"]);
    assert_eq!(out.status.code(), Some(1));
    // host.devices finds it first (no device node at all) and carries the fix.
    let first = result(&doc, "host.devices");
    assert_eq!(first["status"], "fail", "{first}");
    let fix = field(first, "hint");
    assert!(
        fix.contains("--gpus all") || fix.contains("install the driver"),
        "{first}"
    );
    for (id, found) in [
        (
            "gpu.driver",
            "NVIDIA driver library libnvidia-ml.so.1 not found",
        ),
        ("cuda.driver", "libcuda.so.1 not found"),
    ] {
        let r = result(&doc, id);
        assert_eq!(r["status"], "fail", "{r}");
        assert!(
            field(r, "summary").starts_with(&format!("{found} — same cause as host.devices (")),
            "{r}"
        );
        assert_eq!(
            field(r, "hint"),
            "see host.devices: its fix clears this failure too"
        );
        assert_eq!(r["cause"]["kind"], "same_cause", "{r}");
        assert_eq!(r["cause"]["check"], "host.devices", "{r}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn cuda_driver_on_this_machines_gpus_passes() {
    // The counterpart of the no-driver test on a GPU host: the real libcuda.
    let (out, doc) = run_plain(&["--only", "cuda.driver"]);
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "pass", "{r}");
    assert!(
        field(r, "summary").ends_with("a context and a verified host-device copy on each"),
        "{r}"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn healthy_fake_driver_passes_with_a_verified_copy_on_each_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("report.xml");
    let (out, doc) = run_fake(
        "healthy-2x-h100",
        &["--only", "cuda.driver", "--junit", junit.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "pass", "{r}");
    assert_eq!(
        field(r, "summary"),
        "CUDA 12.8 driver, 2 devices; a context and a verified host-device copy on each"
    );
    let devices = r["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for d in devices {
        assert_eq!(d["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(d["status"], "pass");
        assert!(
            field(d, "summary")
                .starts_with("context and 64 KiB copy verified; compute 9.0, 81559 MiB"),
            "{d}"
        );
    }
    assert!(
        fact(r, "libcuda").ends_with("target/fixtures/cuda/libcuda.so.1"),
        "{r}"
    );
    assert_eq!(fact(r, "cuda_driver_version"), "12.8");
    assert_valid_junit(&junit);
}

#[test]
fn cuinit_errors_are_named_with_their_fix() {
    let cases = [
        (
            "no-device",
            "cuInit failed: CUDA_ERROR_NO_DEVICE (100)",
            "--gpus all",
        ),
        (
            "fabric-manager-down",
            "cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802)",
            "sudo systemctl start nvidia-fabricmanager",
        ),
        (
            "unknown-error",
            "cuInit failed: CUDA_ERROR_UNKNOWN (999)",
            "sudo nvidia-smi -r -i N",
        ),
    ];
    for (name, summary, hint) in cases {
        let (out, doc) = run_fake(name, &["--only", "cuda.driver"], &[]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let r = result(&doc, "cuda.driver");
        assert_eq!(r["status"], "fail", "{name}: {r}");
        assert!(field(r, "summary").starts_with(summary), "{name}: {r}");
        assert!(field(r, "hint").contains(hint), "{name}: {r}");
        // cuDriverGetVersion answers before cuInit: the version is kept.
        assert_eq!(fact(r, "cuda_driver_version"), "12.8", "{name}: {r}");
    }
}

#[test]
fn no_device_names_a_hiding_cuda_visible_devices() {
    let (_, doc) = run_fake(
        "no-device",
        &["--only", "cuda.driver"],
        &[("CUDA_VISIBLE_DEVICES", "-1")],
    );
    let r = result(&doc, "cuda.driver");
    assert!(
        field(r, "hint").starts_with("CUDA_VISIBLE_DEVICES is set to \"-1\""),
        "{r}"
    );
}

#[test]
fn fewer_cuda_devices_than_expected_fails() {
    // No NVML on this machine: --expect-gpus is the prediction.
    let (out, doc) = run_fake(
        "four-of-eight",
        &["--only", "cuda.driver", "--expect-gpus", "8"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        field(r, "summary")
            .starts_with("CUDA sees 4 devices but --expect-gpus 8 expects at least 8"),
        "{r}"
    );
    assert!(field(r, "hint").contains("fallen off the bus"), "{r}");
    // The same machine with the right expectation passes.
    let (out, doc) = run_fake(
        "four-of-eight",
        &["--only", "cuda.driver", "--expect-gpus", "4"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(status_of(&doc, "cuda.driver"), "pass");
}

#[test]
fn hung_cuinit_times_out_and_leaves_nothing_running() {
    let token = format!("gpucheck-cuda-hang-{}", std::process::id());
    let (out, doc) = run_fake(
        "hang-cuinit",
        &["--only", "cuda.driver", "--timeout", "2"],
        &[("FAKE_CUDA_TEST_TOKEN", &token)],
    );
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "fail", "{r}");
    assert_eq!(field(r, "summary"), "timed out after 2 s in cuInit");
    assert!(field(r, "hint").contains("nvidia-smi -pm 1"), "{r}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        processes_with_env(&format!("FAKE_CUDA_TEST_TOKEN={token}")),
        Vec::<u32>::new(),
        "a process of the hung probe survived"
    );
}

#[test]
fn a_driver_crash_is_an_error_naming_the_signal() {
    let (out, doc) = run_fake(
        "healthy-2x-h100",
        &["--only", "cuda.driver"],
        &[("FAKE_CUDA_CRASH", "cuInit")],
    );
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(field(r, "summary"), "probe crashed: SIGSEGV");
    assert!(field(r, "hint").contains("dmesg"), "{r}");
}

#[test]
fn one_gpu_refusing_a_context_fails_that_gpu() {
    let (out, doc) = run_fake("context-fails-gpu1", &["--only", "cuda.driver"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        field(r, "summary").starts_with(
            "cuda:1 (NVIDIA H100 80GB HBM3): cuDevicePrimaryCtxRetain failed: CUDA_ERROR_UNKNOWN (999)"
        ),
        "{r}"
    );
    assert_eq!(r["devices"][0]["status"], "pass");
    assert_eq!(r["devices"][1]["status"], "fail");
    assert!(
        field(r, "hint").starts_with("cuda:1: look for Xid errors"),
        "{r}"
    );
}

#[test]
fn corrupted_copy_fails_as_faulty_memory() {
    let (_, doc) = run_fake("corrupt-gpu1", &["--only", "cuda.driver"], &[]);
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        field(r, "summary").contains(
            "cuda:1 (NVIDIA H100 80GB HBM3): copy of 64 KiB came back wrong from byte 0 on"
        ),
        "{r}"
    );
    assert!(field(r, "hint").contains("dcgmi diag -r 2"), "{r}");
}

// ---------------------------------------------------------------- cuda.runtime

fn venv_python_arg() -> String {
    venv_python().to_string_lossy().into_owned()
}

#[test]
fn cuda_runtime_versions_the_wheels_libcudart_without_a_driver() {
    require_no_nvidia_driver();
    let py = venv_python_arg();
    let (out, doc) = run_plain(&["--only", "cuda.runtime", "--python", &py]);
    // Named with --only and skipped: not verified, so not ready.
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(doc["unverified"], serde_json::json!(["cuda.runtime"]));
    let r = result(&doc, "cuda.runtime");
    assert_eq!(r["status"], "skip", "{r}");
    assert!(
        field(r, "summary")
            .starts_with("found libcudart 13.2 from Python wheel (site-packages/nvidia)"),
        "{r}"
    );
    assert!(field(r, "summary").contains("no NVIDIA driver"), "{r}");
    assert_eq!(fact(r, "cuda_runtime_version"), "13.2");
    let copies: Vec<&str> = r["facts"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("libcudart_"))
        .filter_map(|(_, v)| v.as_str())
        .collect();
    assert!(
        copies
            .iter()
            .any(|c| c.contains("nvidia/cu13/lib/libcudart.so.13") && c.ends_with(" = 13.2")),
        "{copies:?}"
    );
}

#[test]
fn cuda_runtime_against_fake_drivers() {
    let py = venv_python_arg();
    let args = ["--only", "cuda.runtime", "--python", py.as_str()];

    // CUDA 12.8 driver, CUDA 13.2 wheel: no compatible path.
    let (out, doc) = run_fake("healthy-2x-h100", &args, &[]);
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "cuda.runtime");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(field(r, "summary").starts_with("libcudart 13.2 at "), "{r}");
    assert!(
        field(r, "summary").contains("is newer than the driver (CUDA 12.8) supports"),
        "{r}"
    );
    let hint = field(r, "hint");
    assert!(
        hint.contains("install an NVIDIA driver >= 580.65.06"),
        "{hint}"
    );
    // torch 2.15 is installed: only replacing it reaches cu128's torch.
    assert!(
        hint.contains("`pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu128`"),
        "{hint}"
    );

    // CUDA 13.0 driver: minor-version compatibility.
    let (out, doc) = run_fake("driver-13.0", &args, &[]);
    assert_eq!(out.status.code(), Some(0));
    let r = result(&doc, "cuda.runtime");
    assert_eq!(r["status"], "warn", "{r}");
    assert!(
        field(r, "summary").contains("only through minor-version compatibility"),
        "{r}"
    );
    assert!(field(r, "hint").contains("PTX"), "{r}");

    // CUDA 13.2 driver, with cuda.driver first: native.
    let args_with_driver = ["--only", "cuda", "--python", py.as_str()];
    let (out, doc) = run_fake("driver-13.2", &args_with_driver, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let r = result(&doc, "cuda.runtime");
    assert_eq!(r["status"], "pass", "{r}");
    assert!(
        field(r, "summary")
            .starts_with("libcudart 13.2 from Python wheel (site-packages/nvidia) runs on"),
        "{r}"
    );
    assert_eq!(
        r["tables"][0]["legend"],
        "driver side: CUDA 13.2 from cuDriverGetVersion"
    );
}

#[test]
fn cuda_runtime_with_forward_compat_judges_the_compat_libcuda() {
    // The system driver (NVML) supports CUDA 12.8; a cuda-compat libcuda for
    // CUDA 13.2 is on LD_LIBRARY_PATH, so the wheel's 13.2 runtime runs. The
    // runtime must be judged against the libcuda jobs load, not NVML's.
    let dir = tempfile::tempdir().unwrap();
    let compat = dir.path().join("cuda-13.2/compat");
    std::fs::create_dir_all(&compat).unwrap();
    std::fs::copy(
        fake_cuda_dir().join("libcuda.so.1"),
        compat.join("libcuda.so.1"),
    )
    .unwrap();
    let py = venv_python_arg();
    let mut cmd = gpucheck();
    cmd.args(["--only", "cuda.runtime", "--python", &py, "--json", "-"])
        .env("LD_LIBRARY_PATH", &compat)
        .env("FAKE_CUDA_SCENARIO", scenario("driver-13.2"));
    with_nvml(&mut cmd, &nvml_scenario("h100x8"));
    let out = cmd.output().expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    let r = result(&doc, "cuda.runtime");
    assert_eq!(r["status"], "pass", "{r}");
    assert!(
        field(r, "summary").contains("forward compatibility in use"),
        "{r}"
    );
    assert_eq!(
        r["tables"][0]["legend"],
        "driver side: CUDA 13.2 from cuDriverGetVersion"
    );
    assert_eq!(out.status.code(), Some(0));
}

// ---------------------------------------------------------------- torch.*

#[test]
fn torch_checks_report_the_real_torch() {
    require_no_nvidia_driver();
    let py = venv_python_arg();
    let (out, doc) = run_plain(&["--only", "torch", "--python", &py]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let imp = result(&doc, "torch.import");
    assert_eq!(imp["status"], "pass", "{imp}");
    assert!(fact(imp, "torch_version").starts_with("2.15.0"), "{imp}");
    assert_eq!(fact(imp, "torch_cuda"), "13.2");
    assert_eq!(
        fact(imp, "arch_list"),
        "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
    );
    // Yes/no and counts keep their JSON types.
    assert_eq!(imp["facts"]["cuda_available"], false, "{imp}");
    assert_eq!(imp["facts"]["cuda_device_count"], 0, "{imp}");
    assert!(
        fact(imp, "cuda_unavailable_reason").contains("Found no NVIDIA driver"),
        "{imp}"
    );
    assert!(
        fact(imp, "cuda_libraries_loaded").contains("libcudart.so.13"),
        "{imp}"
    );
    let summary = field(imp, "summary");
    assert!(summary.starts_with("torch 2.15.0"), "{summary}");
    assert!(summary.contains("(CUDA 13.2 build)"), "{summary}");
    assert!(
        summary.contains("torch.cuda.is_available() is False: RuntimeError: Found no NVIDIA driver on your system."),
        "{summary}"
    );
    assert!(imp["metrics"][0]["name"] == "import_time_s", "{imp}");

    let cuda = result(&doc, "torch.cuda");
    assert_eq!(cuda["status"], "skip", "{cuda}");
    let s = field(cuda, "summary");
    assert!(
        s.starts_with("not applicable: no NVIDIA driver/GPU on this machine"),
        "{s}"
    );
    assert!(
        s.contains("is a CUDA 13.2 build and would need an NVIDIA driver >= 580.65.06"),
        "{s}"
    );

    let arch = result(&doc, "torch.arch");
    assert_eq!(arch["status"], "skip", "{arch}");
    assert!(
        field(arch, "summary").ends_with("carries code for sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"),
        "{arch}"
    );

    let nccl = result(&doc, "torch.nccl");
    assert_eq!(nccl["status"], "pass", "{nccl}");
    let v = fact(nccl, "nccl_version");
    let parts: Vec<&str> = v.split('.').collect();
    assert!(
        parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()) && parts[0] == "2",
        "nccl_version {v:?}"
    );
    assert_eq!(fact(imp, "nccl_version"), v);
}

#[test]
fn torch_nccl_alone_runs_the_payload_itself() {
    let py = venv_python_arg();
    let (out, doc) = run_plain(&["--only", "torch.nccl", "--python", &py]);
    assert_eq!(out.status.code(), Some(0));
    let r = result(&doc, "torch.nccl");
    assert_eq!(r["status"], "pass", "{r}");
    assert!(field(r, "summary").starts_with("NCCL 2."), "{r}");
    assert!(
        field(r, "summary").ends_with("available in torch 2.15.0+cu132"),
        "{r}"
    );
}

/// A virtual environment with no packages: a training Python without torch.
fn venv_without_torch(dir: &Path) -> PathBuf {
    let status = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(dir)
        .status()
        .expect("run python3 -m venv");
    assert!(status.success(), "python3 -m venv failed");
    dir.join("bin/python")
}

#[test]
fn a_training_python_without_torch_fails_with_the_install_command() {
    let dir = tempfile::tempdir().unwrap();
    let py = venv_without_torch(&dir.path().join("venv"));
    let py = py.to_string_lossy().into_owned();
    // The fake driver supports CUDA 12.8: the hint installs that build.
    let (out, doc) = run_fake(
        "healthy-2x-h100",
        &["--only", "cuda.driver,torch", "--python", &py],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let imp = result(&doc, "torch.import");
    assert_eq!(imp["status"], "fail", "{imp}");
    // The payload names the interpreter it ran in.
    let summary = field(imp, "summary");
    assert!(summary.starts_with("torch is not installed for /"), "{imp}");
    assert!(
        summary.ends_with("(ModuleNotFoundError: No module named 'torch')"),
        "{imp}"
    );
    let hint = field(imp, "hint");
    assert!(
        hint.contains("-m pip install torch --index-url https://download.pytorch.org/whl/cu128`"),
        "{hint}"
    );
    for id in ["torch.cuda", "torch.arch", "torch.nccl"] {
        assert!(
            field(result(&doc, id), "summary").starts_with("needs torch.import, which"),
            "{id}"
        );
    }
    // Alone (no cuda.driver in the run) it still fails with the command.
    let (out, doc) = run_plain(&["--only", "torch.import", "--python", &py]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let hint = field(result(&doc, "torch.import"), "hint").to_string();
    assert!(hint.contains("-m pip install torch"), "{hint}");
}

#[test]
fn a_missing_python_named_on_the_command_line_fails() {
    let (out, doc) = run_plain(&["--only", "torch.import", "--python", "/nonexistent/python3"]);
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "torch.import");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(field(r, "summary").contains("/nonexistent/python3"), "{r}");
    assert!(field(r, "hint").contains("--python"), "{r}");
}

#[test]
fn a_hanging_torch_is_reported_with_the_stage_it_hung_in() {
    // Stands in for a Python whose torch.cuda.is_available() never returns
    // (a wedged driver): it prints the payload's stage line, then hangs.
    let mark = format!("gpucheck-torch-hang-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("python");
    std::fs::write(
        &py,
        format!(
            "#!/usr/bin/env bash\necho 'GPUCHECK_TORCH_STAGE torch.cuda.is_available' >&2\nexec -a {mark} sleep 300\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, doc) = run_plain(&[
        "--only",
        "torch.import",
        "--timeout",
        "3",
        "--python",
        py.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "torch.import");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        field(r, "summary").starts_with("timed out after 3 s in torch.cuda.is_available"),
        "{r}"
    );
    assert!(field(r, "hint").contains("dmesg"), "{r}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        processes_matching(&mark),
        Vec::new(),
        "the payload survived"
    );
}

// ---------------------------------------------------------------- with the fake NVML

/// The fake NVML from the gpu tests (tests/fixtures/fake_nvml.c).
/// `--nvml-lib` and FAKE_NVML_SCENARIO for a run.
fn with_nvml(cmd: &mut std::process::Command, scenario: &Path) {
    cmd.arg("--nvml-lib")
        .arg(fake_nvml())
        .env("FAKE_NVML_SCENARIO", scenario);
}

fn run_nvml_and_cuda(
    nvml: &Path,
    cuda_devices: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Output, serde_json::Value) {
    let mut cmd = gpucheck();
    cmd.args(args).args(["--json", "-"]);
    with_nvml(&mut cmd, nvml);
    if let Some(devices) = cuda_devices {
        cmd.env("LD_LIBRARY_PATH", ld_path_with_fake())
            .env("FAKE_CUDA_DEVICES", devices);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

#[test]
fn cuda_device_count_is_compared_with_nvml() {
    let h100x8 = nvml_scenario("h100x8");
    let args = ["--only", "cuda.driver"];

    let (out, doc) = run_nvml_and_cuda(&h100x8, Some("8"), &args, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let r = result(&doc, "cuda.driver");
    assert_eq!(
        field(r, "summary"),
        "CUDA 12.8 driver, 8 devices (as NVML sees 8 GPUs); a context and a verified host-device copy on each"
    );

    let (out, doc) = run_nvml_and_cuda(&h100x8, Some("4"), &args, &[]);
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        field(r, "summary").starts_with("CUDA sees 4 devices but NVML sees 8 GPUs"),
        "{r}"
    );

    // CUDA_VISIBLE_DEVICES=0,1 on 8 GPUs: CUDA must see exactly 2.
    let (out, doc) = run_nvml_and_cuda(
        &h100x8,
        Some("2"),
        &args,
        &[("CUDA_VISIBLE_DEVICES", "0,1")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        field(result(&doc, "cuda.driver"), "summary")
            .contains("(as NVML sees 8 GPUs and CUDA_VISIBLE_DEVICES=\"0,1\" selects 2)"),
        "{doc}"
    );
    let (_, doc) = run_nvml_and_cuda(
        &h100x8,
        Some("8"),
        &args,
        &[("CUDA_VISIBLE_DEVICES", "0,1")],
    );
    let r = result(&doc, "cuda.driver");
    assert!(
        field(r, "summary").starts_with(
            "CUDA sees 8 devices but NVML sees 8 GPUs and CUDA_VISIBLE_DEVICES=\"0,1\" selects 2"
        ),
        "{doc}"
    );
    // No GPU is missing here: the hint says so rather than "fallen off the bus".
    assert!(
        field(r, "hint").starts_with("CUDA enumerates more devices than predicted"),
        "{r}"
    );
}

#[test]
fn torch_on_gpus_with_a_driver_too_old_for_its_cuda() {
    // NVML sees 8 H100s on driver 570.86.15 (CUDA 12.8); the venv's torch is
    // a CUDA 13.2 build. No libcuda here, so torch itself sees no GPU.
    require_no_nvidia_driver();
    let py = venv_python_arg();
    let h100x8 = nvml_scenario("h100x8");
    let (out, doc) = run_nvml_and_cuda(
        &h100x8,
        None,
        &["--only", "cuda.runtime,torch", "--python", &py],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));

    let rt = result(&doc, "cuda.runtime");
    assert_eq!(rt["status"], "fail", "{rt}");
    assert!(
        field(rt, "summary").contains("is newer than driver 570.86.15 (CUDA 12.8) supports"),
        "{rt}"
    );
    assert_eq!(
        rt["tables"][0]["legend"],
        "driver side: CUDA 12.8 from NVML"
    );

    let cuda = result(&doc, "torch.cuda");
    assert_eq!(cuda["status"], "fail", "{cuda}");
    assert!(
        field(cuda, "summary").starts_with(
            "torch.cuda.is_available() is False although NVML sees 8 GPUs: torch is built for CUDA 13.2 and the driver (570.86.15) supports only CUDA 12.8"
        ),
        "{cuda}"
    );
    let hint = field(cuda, "hint");
    assert!(
        hint.contains("install an NVIDIA driver >= 580.65.06"),
        "{hint}"
    );
    assert!(hint.contains("whl/cu128"), "{hint}");

    let arch = result(&doc, "torch.arch");
    assert_eq!(arch["status"], "pass", "{arch}");
    assert_eq!(
        field(arch, "summary"),
        "torch 2.15.0+cu132 has machine code for every GPU (8 from NVML: compute 9.0)"
    );
    assert_eq!(arch["devices"].as_array().unwrap().len(), 8);
}

#[test]
fn torch_without_gpus_names_the_failing_cuda_driver() {
    // NVML sees 8 H100s on a CUDA 13.0 driver (the wheel's 13.2 runs through
    // minor-version compatibility), but cuInit fails: Fabric Manager down.
    // torch.cuda must name that, with cuda.driver's fix.
    require_no_nvidia_driver();
    let dir = tempfile::tempdir().unwrap();
    let nvml = dir.path().join("h100x8-r580.scenario");
    std::fs::write(
        &nvml,
        "system driver=580.65.06 nvml=13.580.65.06 cuda=13000\ngpus 8 name=\"NVIDIA H100 80GB HBM3\" mem_mib=81559 cc=9.0\n",
    )
    .unwrap();
    let py = venv_python_arg();
    let mut cmd = gpucheck();
    cmd.args([
        "--only",
        "cuda.driver,torch",
        "--python",
        &py,
        "--json",
        "-",
    ])
    .env("LD_LIBRARY_PATH", ld_path_with_fake())
    .env("FAKE_CUDA_SCENARIO", scenario("fabric-manager-down"))
    .env("FAKE_CUDA_DRIVER_VERSION", "13000");
    with_nvml(&mut cmd, &nvml);
    let out = cmd.output().expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(status_of(&doc, "cuda.driver"), "fail");
    let r = result(&doc, "torch.cuda");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        field(r, "summary").starts_with(
            "torch.cuda.is_available() is False although NVML sees 8 GPUs: the CUDA driver fails (cuda.driver: cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802)"
        ),
        "{r}"
    );
    assert!(
        field(r, "hint").contains("sudo systemctl start nvidia-fabricmanager"),
        "{r}"
    );
}

#[test]
fn torch_arch_fails_for_a_gpu_the_wheel_dropped() {
    // Two V100s (compute 7.0): the CUDA 13 wheels have no sm_70 code.
    let dir = tempfile::tempdir().unwrap();
    let v100 = dir.path().join("v100.scenario");
    std::fs::write(
        &v100,
        "system driver=580.65.06 nvml=13.580.65.06 cuda=13000\ngpus 2 name=\"Tesla V100-SXM2-32GB\" mem_mib=32768 cc=7.0\n",
    )
    .unwrap();
    let py = venv_python_arg();
    let (out, doc) =
        run_nvml_and_cuda(&v100, None, &["--only", "torch.arch", "--python", &py], &[]);
    assert_eq!(out.status.code(), Some(1));
    let r = result(&doc, "torch.arch");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(
        field(r, "summary").starts_with(
            "GPU 0 Tesla V100-SXM2-32GB (compute 7.0) cannot run this torch: it has code only for sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
        ),
        "{r}"
    );
    let hint = field(r, "hint");
    // Not cu128: its newest torch (2.11) dropped sm_70 too.
    assert!(hint.contains("cu118, cu121, cu124, cu126;"), "{hint}");
    assert!(hint.contains("whl/cu126"), "{hint}");
    assert_eq!(r["devices"][1]["status"], "fail");
}

#[test]
fn a_hung_nvml_does_not_hang_the_cuda_checks_too() {
    // gpu.driver times out in nvmlInit_v2; cuda.driver (a fresh child
    // process) must not ask NVML again, or it would hang there as well.
    let (out, doc) = run_nvml_and_cuda(
        &nvml_scenario("hang_init"),
        Some("2"),
        &["--only", "gpu.driver,cuda.driver", "--timeout", "2"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        field(result(&doc, "gpu.driver"), "summary").starts_with("timed out after 2 s"),
        "{doc}"
    );
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "pass", "{r}");
    assert_eq!(
        field(r, "summary"),
        "CUDA 12.8 driver, 2 devices; a context and a verified host-device copy on each"
    );
}

#[test]
fn a_stubs_folder_first_on_the_library_path_warns_and_the_driver_is_still_judged() {
    let ld = std::env::join_paths([common::stub_libcuda_dir(), fake_cuda_dir()]).unwrap();
    let out = gpucheck()
        .args(["--only", "cuda.driver", "--json", "-"])
        .env("LD_LIBRARY_PATH", &ld)
        .env("FAKE_CUDA_SCENARIO", scenario("healthy-2x-h100"))
        .output()
        .expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "warn", "{r}");
    let summary = field(r, "summary");
    assert!(
        summary.starts_with(
            "CUDA 12.8 driver, 2 devices through libcuda.so.1, but the CUDA toolkit's stub"
        ),
        "{summary}"
    );
    assert!(summary.contains("cuda-stub/stubs/libcuda.so"), "{summary}");
    let hint = field(r, "hint");
    assert!(hint.starts_with("remove "), "{hint}");
    assert!(
        hint.contains("cuda-stub/stubs from LD_LIBRARY_PATH"),
        "{hint}"
    );
    assert!(
        fact(r, "libcuda").ends_with("target/fixtures/cuda/libcuda.so.1"),
        "{r}"
    );
    let devices = r["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "{r}");
    assert_eq!(devices[0]["name"], "NVIDIA H100 80GB HBM3");
    // Exit code 0: a warning does not fail the run.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_driver_too_old_for_any_current_torch_is_named_by_cuda_driver() {
    // A CUDA 11.4 driver (the 470 branch): cuInit and contexts work, but no
    // current PyTorch build runs on it.
    let (out, doc) = run_fake(
        "healthy-2x-h100",
        &["--only", "cuda.driver"],
        &[("FAKE_CUDA_DRIVER_VERSION", "11040")],
    );
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "warn", "{r}");
    let summary = field(r, "summary");
    assert!(
        summary.starts_with("the CUDA 11.4 driver runs no current PyTorch build"),
        "{summary}"
    );
    assert!(summary.contains("cu126"), "{summary}");
    let hint = field(r, "hint");
    assert!(
        hint.contains("install an NVIDIA driver >= 525.60.13"),
        "{hint}"
    );
    assert!(hint.contains("whl/cu118"), "{hint}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A CUDA 12.8 driver runs them: no warning.
    let (_, doc) = run_fake("healthy-2x-h100", &["--only", "cuda.driver"], &[]);
    assert_eq!(result(&doc, "cuda.driver")["status"], "pass");
}

// ---------------------------------------------------------------- foreign Python on the payload's path

/// A `torch` module that announces itself and leaves a mark when imported:
/// what anyone could leave in a shared /tmp or in a project folder.
const PLANTED_TORCH: &str = "import os\n\
    open(os.environ['GPUCHECK_TEST_PLANT_MARK'], 'w').write('imported')\n\
    __version__ = '6.6.6+evil'\n";

#[test]
fn a_torch_py_left_in_tmpdir_is_not_imported() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("torch.py"), PLANTED_TORCH).unwrap();
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("planted-torch-ran");
    let py = venv_python_arg();
    let out = gpucheck()
        .args(["--only", "torch.import", "--python", &py, "--json", "-"])
        .env("TMPDIR", tmp.path())
        .env("GPUCHECK_TEST_PLANT_MARK", &mark)
        .output()
        .expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    let imp = result(&doc, "torch.import");
    assert!(fact(imp, "torch_version").starts_with("2.15.0"), "{imp}");
    assert!(!mark.exists(), "the planted torch.py ran");
    // Nothing of the payload is left in TMPDIR, only what was planted.
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["torch.py"]);
}

#[test]
fn a_torch_package_in_the_current_folder_is_not_imported() {
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join("torch")).unwrap();
    std::fs::write(cwd.path().join("torch/__init__.py"), PLANTED_TORCH).unwrap();
    std::fs::write(cwd.path().join("torch.py"), PLANTED_TORCH).unwrap();
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("planted-torch-ran");
    let py = venv_python_arg();
    let out = gpucheck()
        .args(["--only", "torch.import", "--python", &py, "--json", "-"])
        .current_dir(cwd.path())
        .env("GPUCHECK_TEST_PLANT_MARK", &mark)
        .output()
        .expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    let imp = result(&doc, "torch.import");
    assert!(fact(imp, "torch_version").starts_with("2.15.0"), "{imp}");
    assert!(!mark.exists(), "the planted torch package ran");
}

/// The payload folders (`gpucheck-NAME-PID-XXXXXX`) in `dir`.
fn payload_dirs_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gpucheck-"))
        .collect()
}

/// gpucheck running torch.import with a Python that hangs, TMPDIR `tmp`;
/// returns once the payload's folder exists.
fn start_hanging_torch_import(tmp: &Path, bin_dir: &Path) -> std::process::Child {
    let py = bin_dir.join("python");
    std::fs::write(&py, "#!/usr/bin/env bash\nexec sleep 300\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = gpucheck()
        .args(["--only", "torch.import", "--timeout", "60", "--python"])
        .arg(&py)
        .env("TMPDIR", tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start gpucheck");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while payload_dirs_in(tmp).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no payload folder");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

#[test]
fn sigterm_leaves_no_payload_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = tempfile::tempdir().unwrap();
    let mut child = start_hanging_torch_import(tmp.path(), bin_dir.path());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    assert_eq!(payload_dirs_in(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_payload_folder_left_by_a_killed_gpucheck_is_removed_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = tempfile::tempdir().unwrap();
    let mut child = start_hanging_torch_import(tmp.path(), bin_dir.path());
    // SIGKILL: gpucheck cannot clean up, but its isolated check learns of
    // its death and takes its payload with it.
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !payload_dirs_in(tmp.path()).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(payload_dirs_in(tmp.path()), Vec::<String>::new());
    // A folder left by a writer that is gone (a process killed before it
    // could clean up) is removed by the next run.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let stale = tmp
        .path()
        .join(format!("gpucheck-torch_info-{gone_pid}-AbC123"));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("torch_info.py"), "print('left behind')\n").unwrap();
    assert_eq!(payload_dirs_in(tmp.path()).len(), 1);
    let py = venv_python_arg();
    let out = gpucheck()
        .args(["--only", "torch.import", "--python", &py])
        .env("TMPDIR", tmp.path())
        .output()
        .expect("run gpucheck");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(payload_dirs_in(tmp.path()), Vec::<String>::new());
}

// ---------------------------------------------------------------- how the Python is found

/// PATH with the test venv's bin folder (absolute), after `before`.
fn path_with_venv_after(before: &str) -> String {
    let venv_bin = venv_python().parent().unwrap().to_path_buf();
    format!("{before}{}:/usr/bin:/bin", venv_bin.display())
}

#[test]
fn python3_in_a_relative_path_entry_is_skipped_and_said() {
    for before in [".:", ":"] {
        // A python3 in the current folder: what `.` or an empty PATH entry
        // would run.
        let cwd = tempfile::tempdir().unwrap();
        let marks = tempfile::tempdir().unwrap();
        let mark = marks.path().join("relative-python-ran");
        let fake = cwd.path().join("python3");
        std::fs::write(
            &fake,
            format!("#!/bin/sh\ntouch '{}'\nexit 1\n", mark.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = gpucheck()
            .args(["--only", "torch.import", "--json", "-"])
            .current_dir(cwd.path())
            .env("PATH", path_with_venv_after(before))
            .output()
            .expect("run gpucheck");
        assert_no_panic(&out);
        let doc = assert_valid_json_report(&stdout(&out));
        let imp = result(&doc, "torch.import");
        assert!(!mark.exists(), "PATH {before:?}: the relative python3 ran");
        assert_eq!(imp["status"], "pass", "{imp}");
        let summary = field(imp, "summary");
        assert!(
            summary.contains("python3 in the relative PATH entry"),
            "PATH {before:?}: {summary}"
        );
    }
}

#[test]
fn a_virtual_env_that_points_at_nothing_is_said() {
    let out = gpucheck()
        .args(["--only", "torch.import", "--json", "-"])
        .env("PATH", path_with_venv_after(""))
        .env("VIRTUAL_ENV", "/nonexistent/venv")
        .output()
        .expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    let imp = result(&doc, "torch.import");
    assert_eq!(imp["status"], "pass", "{imp}");
    let summary = field(imp, "summary");
    assert!(
        summary.contains(
            "from python3 on PATH; $VIRTUAL_ENV=\"/nonexistent/venv\" holds no Python, so it was passed over"
        ),
        "{summary}"
    );
}

#[test]
fn the_gpu_cuda_does_not_enumerate_is_named_by_uuid_and_bus_id() {
    // NVML lists 8 H100s, CUDA enumerates 7: GPU 5 is missing.
    let mut cmd = gpucheck();
    cmd.args(["--only", "cuda.driver", "--json", "-"])
        .env("LD_LIBRARY_PATH", ld_path_with_fake())
        .env("FAKE_CUDA_SCENARIO", scenario("seven-of-eight"));
    with_nvml(&mut cmd, &nvml_scenario("h100x8"));
    let out = cmd.output().expect("run gpucheck");
    assert_no_panic(&out);
    let doc = assert_valid_json_report(&stdout(&out));
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "fail", "{r}");
    assert_eq!(
        field(r, "summary"),
        "CUDA sees 7 devices but NVML sees 8 GPUs; CUDA does not enumerate GPU 5 \
         (GPU-fa4e0005-1111-4222-8333-000000000005, PCI 00000000:AB:00.0)"
    );
    assert!(field(r, "hint").contains("fallen off the bus"), "{r}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_gpu_another_process_fills_warns_with_its_free_memory() {
    // cuda/nearly-full: GPU 1 has 0.1 GiB of its 80 GiB free.
    let (out, doc) = run_fake("nearly-full", &["--only", "cuda.driver"], &[]);
    let r = result(&doc, "cuda.driver");
    assert_eq!(r["status"], "warn", "{r}");
    assert_eq!(
        field(r, "summary"),
        "cuda:1 (NVIDIA H100 80GB HBM3): only 0.1 GiB of 79.6 GiB free"
    );
    assert!(field(r, "hint").contains("gpu.processes"), "{r}");
    assert_eq!(r["devices"][1]["status"], "warn", "{r}");
    assert_eq!(r["devices"][0]["status"], "pass", "{r}");
    assert_eq!(out.status.code(), Some(0));
}

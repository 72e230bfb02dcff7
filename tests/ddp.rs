//! `ddp.benchmark` through the real binary: a real torchrun launch of the
//! payload with the test virtual environment's torch, gloo on CPU, 2 ranks,
//! the small model. Covers a healthy run, a worker that raises, a worker that
//! hangs, a rank whose weights diverge, and that nothing is left running.
//!
//! The torch runs are serialised (one lock): on a 2-core machine two at once
//! would only slow each other down. Each run gets a temporary directory of
//! its own as TMPDIR, so the payload file, and with it every process the run
//! starts, carries a path no other run (another test, another checkout's test
//! suite on the same machine) can carry: the "nothing left running" check
//! looks for exactly those.

mod common;

use std::process::Output;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

static TORCH_RUNS: Mutex<()> = Mutex::new(());

/// One benchmark run: gpucheck's output, its JSON report, and the TMPDIR it
/// ran with (kept until the leftover check is done).
struct Run {
    out: Output,
    doc: Value,
    tmp: tempfile::TempDir,
}

/// Run `gpucheck --only ddp.benchmark` with gloo on CPU, 2 ranks, the small
/// model, the venv's Python, JSON on stdout, plus `extra` args and env.
fn run_cpu_benchmark(extra_args: &[&str], env: &[(&str, &str)]) -> Run {
    run_cpu_benchmark_in(None, extra_args, env)
}

/// [`run_cpu_benchmark`] started from the folder `cwd`.
fn run_cpu_benchmark_in(
    cwd: Option<&std::path::Path>,
    extra_args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let tmp = tempfile::Builder::new()
        .prefix("gpucheck-ddp-test-")
        .tempdir()
        .expect("temporary directory");
    let mut cmd = common::gpucheck();
    cmd.args([
        "--only",
        "ddp.benchmark",
        "--ddp-backend",
        "gloo",
        "--ddp-device",
        "cpu",
        "--nproc",
        "2",
        "--ddp-model",
        "small",
        "--json",
        "-",
    ])
    .arg("--python")
    .arg(common::venv_python())
    .args(extra_args)
    .env("TMPDIR", tmp.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let out = cmd.output().expect("run gpucheck");
    assert!(
        out.stdout.starts_with(b"{"),
        "stdout is not a JSON report:\n{}\nstderr:\n{}",
        common::stdout(&out),
        common::stderr(&out)
    );
    // Every report, passing or failing, validates against the schema.
    let doc = common::assert_valid_json_report(&common::stdout(&out));
    Run { out, doc, tmp }
}

/// Processes of this run still alive: torchrun and every worker carry the
/// payload file, which lies in the run's own TMPDIR.
fn leftovers(run: &Run) -> Vec<(u32, String)> {
    let dir = run.tmp.path().to_string_lossy().into_owned();
    common::processes_matching(&format!("{dir}/gpucheck-ddp_bench-"))
}

/// Nothing the run started may survive gpucheck. Exited processes can take a
/// moment to be reaped by init, so allow a short grace before failing.
fn assert_nothing_left_running(run: &Run) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = leftovers(run);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!("processes outlived gpucheck: {left:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metric(result: &Value, name: &str) -> f64 {
    result["metrics"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == name))
        .and_then(|m| m["value"].as_f64())
        .unwrap_or_else(|| panic!("no metric {name} in {result:#}"))
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

#[test]
fn cpu_benchmark_reports_both_world_sizes_and_verifies_sync() {
    let _one = TORCH_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_cpu_benchmark(&[], &[]);
    let (out, doc) = (&run.out, &run.doc);
    let r = common::result(doc, "ddp.benchmark");
    assert_eq!(
        text(r, "status"),
        "pass",
        "{r:#}\nstderr:\n{}",
        common::stderr(out)
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(doc["exit_code"], 0);

    let summary = text(r, "summary");
    assert!(
        summary.contains("on 2 CPU ranks (gloo) vs") && summary.ends_with("report only on CPUs"),
        "{summary}"
    );
    assert_eq!(metric(r, "world_size"), 2.0);
    let one = metric(r, "throughput_world1");
    let two = metric(r, "throughput_worldn");
    assert!(one > 0.0 && two > 0.0, "throughput {one} / {two}");
    let efficiency = metric(r, "scaling_efficiency");
    assert!(efficiency > 0.0 && efficiency <= 2.0, "{efficiency}");
    assert!((efficiency - two / (2.0 * one)).abs() < 1e-9);
    let share = metric(r, "comm_wait_share");
    assert!((0.0..=100.0).contains(&share), "{share}");
    assert!(metric(r, "parameters") > 1e6);

    let devices = r["devices"].as_array().expect("per-rank rows");
    assert_eq!(devices.len(), 2, "{r:#}");
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d["index"], i as u64);
        assert_eq!(text(d, "status"), "pass");
        let p50 = metric(d, "step_p50_ms");
        let p95 = metric(d, "step_p95_ms");
        assert!(p50 > 0.0 && p95 >= p50, "rank {i}: p50 {p50} p95 {p95}");
        assert!(metric(d, "compute_p50_ms") > 0.0);
    }
    let facts = &r["facts"];
    assert!(
        text(facts, "sync_verification").starts_with("passed: parameters identical on all 2 ranks"),
        "{facts:#}"
    );
    assert!(text(facts, "torch_version").starts_with("2."), "{facts:#}");
    assert!(
        text(facts, "launcher").contains("-m torch.distributed.run --nnodes 1 --nproc-per-node 2")
    );
    // The venv's torchrun accepts --local-addr: the rendezvous address is
    // pinned to loopback, not the host's FQDN (which may not resolve).
    assert!(
        text(facts, "launcher").contains("--local-addr 127.0.0.1"),
        "{facts:#}"
    );
    // A healthy run carries no failure output.
    assert!(facts.get("stderr_tail").is_none(), "{facts:#}");
    let tables = r["tables"].as_array().expect("tables");
    assert_eq!(tables[0]["rows"][0][0], "1");
    assert_eq!(tables[0]["rows"][1][0], "2");
    // The leftover check looks in the run's TMPDIR, so the run must really
    // have used it: torchrun leaves its torchelastic_* log folder there.
    let used_tmpdir = std::fs::read_dir(run.tmp.path())
        .expect("read TMPDIR")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("torchelastic_"));
    assert!(used_tmpdir, "torchrun did not run with the test's TMPDIR");
    assert_nothing_left_running(&run);
}

#[test]
fn a_torch_package_in_the_current_folder_is_not_what_torchrun_imports() {
    let _one = TORCH_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    // `python -m` puts the current folder first on sys.path: a project
    // folder holding a `torch/` package (or anyone's, in a shared folder)
    // must not be what the benchmark runs.
    let cwd = tempfile::tempdir().expect("temporary directory");
    let marks = tempfile::tempdir().expect("temporary directory");
    let mark = marks.path().join("planted-torch-ran");
    std::fs::create_dir(cwd.path().join("torch")).expect("plant torch/");
    std::fs::write(
        cwd.path().join("torch/__init__.py"),
        "import os\nopen(os.environ['GPUCHECK_TEST_PLANT_MARK'], 'w').write('imported')\n",
    )
    .expect("plant torch/__init__.py");
    let mark_env = mark.to_string_lossy().into_owned();
    let run = run_cpu_benchmark_in(
        Some(cwd.path()),
        &[],
        &[("GPUCHECK_TEST_PLANT_MARK", mark_env.as_str())],
    );
    let r = common::result(&run.doc, "ddp.benchmark");
    assert!(!mark.exists(), "the planted torch package ran: {r:#}");
    assert_eq!(text(r, "status"), "pass", "{r:#}");
    assert_nothing_left_running(&run);
}

#[test]
fn a_failing_worker_fails_the_check_with_its_error() {
    let _one = TORCH_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_cpu_benchmark(&[], &[("GPUCHECK_DDP_TEST_FAIL_RANK", "1")]);
    let (out, doc) = (&run.out, &run.doc);
    let r = common::result(doc, "ddp.benchmark");
    assert_eq!(text(r, "status"), "fail", "{r:#}");
    assert_eq!(out.status.code(), Some(1));
    let summary = text(r, "summary");
    assert!(
        summary.starts_with(
            "rank 1 failed: RuntimeError: gpucheck test hook: rank 1 fails on purpose"
        ),
        "{summary}"
    );
    assert!(text(r, "hint").starts_with("a DDP worker died"), "{r:#}");
    assert!(
        text(&r["facts"], "worker_traceback").contains("raise RuntimeError"),
        "{r:#}"
    );
    // torchrun's own report of the failure is in the captured tail.
    assert!(
        text(&r["facts"], "stderr_tail").contains("ChildFailedError"),
        "{r:#}"
    );
    assert_nothing_left_running(&run);
}

#[test]
fn a_hanging_worker_times_out_saying_where_the_ranks_were() {
    let _one = TORCH_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_cpu_benchmark(
        &["--timeout", "40"],
        &[("GPUCHECK_DDP_TEST_HANG_RANK", "1")],
    );
    let (out, doc) = (&run.out, &run.doc);
    let r = common::result(doc, "ddp.benchmark");
    assert_eq!(text(r, "status"), "fail", "{r:#}");
    assert_eq!(out.status.code(), Some(1));
    let summary = text(r, "summary");
    // The check stops itself a little before the runner's 40 s limit, so the
    // verdict is its own, naming where each rank was.
    assert!(summary.starts_with("timed out after 36 s: "), "{summary}");
    assert!(
        summary.contains("rank") && summary.contains("'world size 2: warm-up'"),
        "{summary}"
    );
    assert!(text(r, "hint").contains("NCCL_DEBUG=INFO"), "{r:#}");
    assert_nothing_left_running(&run);
}

#[test]
fn a_rank_with_different_weights_fails_the_sync_verification() {
    let _one = TORCH_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_cpu_benchmark(&[], &[("GPUCHECK_DDP_TEST_DIVERGE_RANK", "1")]);
    let (out, doc) = (&run.out, &run.doc);
    let r = common::result(doc, "ddp.benchmark");
    assert_eq!(text(r, "status"), "fail", "{r:#}");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(r, "summary").starts_with(
            "ranks diverged: gradients are not being synchronised (rank 1 ended with parameters \
             different from rank 0's"
        ),
        "{r:#}"
    );
    assert_eq!(r["devices"][1]["status"], "fail");
    assert_eq!(r["devices"][0]["status"], "pass");
    assert_nothing_left_running(&run);
}

#[test]
fn nccl_on_cpu_is_a_configuration_error() {
    let out = common::gpucheck()
        .args([
            "--only",
            "ddp.benchmark",
            "--ddp-backend",
            "nccl",
            "--ddp-device",
            "cpu",
            "--json",
            "-",
        ])
        .output()
        .expect("run gpucheck");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let r = common::result(&doc, "ddp.benchmark");
    assert_eq!(text(r, "status"), "error");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(r, "hint"),
        "benchmark on CPUs with --ddp-backend gloo --ddp-device cpu"
    );
}

#[test]
fn without_a_gpu_the_default_benchmark_is_skipped_with_the_cpu_hint() {
    // What a host without a GPU shows (CI is one); on a GPU host this test
    // cannot run, and fails naming the device node rather than pass untested.
    let gpu_node = ["/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    assert!(
        gpu_node.is_none(),
        "this test needs a host without a GPU (CI is one), and this one has {gpu_node:?}; \
         on GPU hosts use scripts/gpu-smoke.sh"
    );
    let out = common::gpucheck()
        .args(["--only", "ddp.benchmark", "--json", "-"])
        .arg("--python")
        .arg(common::venv_python())
        .output()
        .expect("run gpucheck");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let r = common::result(&doc, "ddp.benchmark");
    assert_eq!(text(r, "status"), "skip", "{r:#}");
    // Named with --only and skipped: nothing verified, so not ready.
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(doc["unverified"], serde_json::json!(["ddp.benchmark"]));
    assert!(
        text(r, "summary").starts_with("no GPU on this machine"),
        "{r:#}"
    );
    assert!(text(r, "hint").contains("--ddp-device cpu"), "{r:#}");
}

#[test]
fn the_benchmark_labels_a_mig_instance_with_its_mig_uuid() {
    // cuda/mig-instance: cuDeviceGetUuid_v2 answers the instance's MIG UUID,
    // the v1 entry point (like torch's device properties) the parent GPU's.
    let cuda = common::build_fixture_lib("fake_cuda.c", "cuda", "libcuda.so.1");
    let payload = common::root().join("checks/payloads/ddp_bench.py");
    let script = format!(
        "import importlib.util as u\n\
         s = u.spec_from_file_location('ddp_bench', {:?})\n\
         m = u.module_from_spec(s); s.loader.exec_module(m)\n\
         print(m.cuda_device_uuid(0))\n",
        payload.to_str().unwrap()
    );
    let scenario = |name: &str| {
        common::root()
            .join(format!("tests/fixtures/cuda/{name}.scenario"))
            .to_string_lossy()
            .into_owned()
    };
    let uuid_with = |name: &str| {
        let out = std::process::Command::new(common::venv_python())
            .args(["-c", &script])
            .env("LD_LIBRARY_PATH", cuda.parent().unwrap())
            .env("FAKE_CUDA_SCENARIO", scenario(name))
            .output()
            .expect("run python");
        assert!(out.status.success(), "{}", common::stderr(&out));
        common::stdout(&out).trim().to_string()
    };
    assert_eq!(
        uuid_with("mig-instance"),
        "MIG-fa4e0001-aaaa-4bbb-8ccc-000000000000"
    );
    assert_eq!(
        uuid_with("seven-of-eight"),
        "GPU-fa4e0000-1111-4222-8333-000000000000"
    );
}

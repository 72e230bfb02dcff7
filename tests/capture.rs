//! `gpucheck capture` / `--capture`, `--replay` and `--redact`: a run on
//! the fake NVML (or on this GPU-less machine) is captured, then replayed
//! by a plain gpucheck with no fake library and no --nvml-lib, and both
//! reports must agree on every check whose probes go through the capture.

mod common;

use std::path::Path;
use std::process::Output;

use common::{fake_nvml, gpucheck, nvml_scenario, stderr};
use serde_json::Value;

fn capture(dir: &Path, scenario: Option<&str>, extra: &[&str]) -> (Value, Output) {
    let json = dir.join("live.json");
    let mut cmd = gpucheck();
    cmd.arg("capture").arg(dir.join("c.json"));
    if let Some(s) = scenario {
        cmd.env("FAKE_NVML_SCENARIO", nvml_scenario(s))
            .arg("--nvml-lib")
            .arg(fake_nvml());
    }
    // What the replaying process does not have: if a replay asked the
    // machine instead of the capture, these checks would say otherwise.
    let out = cmd
        .env(
            "GPUCHECK_SYSFS_ROOT",
            common::root().join("tests/fixtures/sysfs/ndr_active"),
        )
        .envs([("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517")])
        .envs([
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "1"),
        ])
        .args(["--profile", "quick", "--json"])
        .arg(&json)
        .args(extra)
        .output()
        .expect("run gpucheck capture");
    let doc =
        std::fs::read_to_string(&json).unwrap_or_else(|_| panic!("no report: {}", stderr(&out)));
    (serde_json::from_str(&doc).expect("JSON report"), out)
}

fn replay(file: &Path, json: &Path) -> (Value, Output) {
    let out = gpucheck()
        .arg("--replay")
        .arg(file)
        .args(["--profile", "quick", "--json"])
        .arg(json)
        .output()
        .expect("run gpucheck --replay");
    let doc =
        std::fs::read_to_string(json).unwrap_or_else(|_| panic!("no report: {}", stderr(&out)));
    (serde_json::from_str(&doc).expect("JSON report"), out)
}

/// What a user sees of a check: status, summary, hint, facts, metrics, devices.
fn seen(doc: &Value) -> Vec<(String, Value)> {
    doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut()
                .expect("result object")
                .remove("duration_ms");
            (r["id"].as_str().unwrap_or("").to_string(), r)
        })
        .collect()
}

fn assert_replays_identically(scenario: Option<&str>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (live, live_out) = capture(dir.path(), scenario, &[]);
    let (again, again_out) = replay(&dir.path().join("c.json"), &dir.path().join("replay.json"));
    for ((id, a), (_, b)) in seen(&live).iter().zip(seen(&again).iter()) {
        assert_eq!(
            a, b,
            "{scenario:?}: {id} differs between the live run and its replay"
        );
    }
    assert_eq!(seen(&live).len(), seen(&again).len());
    assert_eq!(
        live["host"], again["host"],
        "{scenario:?}: the replay names the captured host"
    );
    assert_eq!(
        live_out.status.code(),
        again_out.status.code(),
        "{scenario:?}"
    );
    for id in ["env.torchrun", "fabric.rdma"] {
        assert_ne!(
            common::status_of(&again, id),
            "skip",
            "{scenario:?}: {id} judged the capture"
        );
    }
    for r in again["results"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap_or("");
        assert!(
            !r["summary"]
                .as_str()
                .unwrap_or("")
                .contains("the capture holds no"),
            "{scenario:?}: {id} found its answers in the capture: {r}"
        );
    }
}

/// Every fake NVML scenario but those that hang (they only time out).
#[test]
fn every_fake_machine_replays_to_the_same_report_with_no_fake_library_loaded() {
    let dir = common::root().join("tests/fixtures/nvml");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("scenarios")
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".scenario")
                .map(str::to_string)
        })
        .filter(|n| !n.starts_with("hang_"))
        .collect();
    names.sort();
    assert!(names.len() >= 20, "{names:?}");
    for scenario in &names {
        assert_replays_identically(Some(scenario));
    }
}

/// The standard profile on the fake libcuda (LD_LIBRARY_PATH) and the fake
/// libnccl (--nccl-lib) with an 8-GPU fake NVML: the driver's answers, the
/// library search, the all-reduce's measured figures and the copy rates are
/// all in the capture, so a plain replay (no fake library, no
/// LD_LIBRARY_PATH, no --nccl-lib) gives the same report.
#[test]
fn a_standard_run_on_fake_cuda_and_nccl_replays_to_the_same_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cuda = common::build_fixture_lib("fake_cuda.c", "cuda", "libcuda.so.1");
    let nccl = common::build_fixture_lib("fake_nccl.c", "nccl", "libnccl.so.2");
    let only = "gpu.*,cuda.*,nccl.*,fabric.xid,env.cuda_visible_devices";
    let live_json = dir.path().join("live.json");
    let file = dir.path().join("c.json");
    let live_out = gpucheck()
        .arg("capture")
        .arg(&file)
        .env("FAKE_NVML_SCENARIO", nvml_scenario("h100x8"))
        .env("LD_LIBRARY_PATH", cuda.parent().unwrap())
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .arg("--nccl-lib")
        .arg(&nccl)
        .args(["--profile", "standard", "--only", only, "--json"])
        .arg(&live_json)
        .output()
        .expect("run gpucheck capture");
    let live: Value = serde_json::from_str(
        &std::fs::read_to_string(&live_json)
            .unwrap_or_else(|_| panic!("no report: {}", stderr(&live_out))),
    )
    .expect("JSON report");
    assert_eq!(
        common::status_of(&live, "nccl.allreduce"),
        "pass",
        "{live:#}"
    );
    let again_json = dir.path().join("again.json");
    let again_out = gpucheck()
        .arg("--replay")
        .arg(&file)
        .env_remove("LD_LIBRARY_PATH")
        .args(["--profile", "standard", "--only", only, "--json"])
        .arg(&again_json)
        .output()
        .expect("run gpucheck --replay");
    let again: Value = serde_json::from_str(
        &std::fs::read_to_string(&again_json)
            .unwrap_or_else(|_| panic!("no report: {}", stderr(&again_out))),
    )
    .expect("JSON report");
    let (a, b) = (seen(&live), seen(&again));
    assert!(a.len() >= 10, "{a:?}");
    assert_eq!(a.len(), b.len());
    for ((id, a), (_, b)) in a.iter().zip(b.iter()) {
        assert_eq!(a, b, "{id} differs between the live run and its replay");
    }
    assert_eq!(live_out.status.code(), again_out.status.code());
}

/// A driver that hangs gives no answer to keep: the capture keeps the
/// check's timeout instead, and the replay (where nothing can hang) gives
/// the same verdict and hint, not a skip.
#[test]
fn a_check_that_timed_out_replays_as_the_same_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (live, live_out) = capture(
        dir.path(),
        Some("hang_ecc"),
        &["--only", "gpu.driver,gpu.ecc", "--timeout", "1"],
    );
    assert_eq!(common::status_of(&live, "gpu.ecc"), "fail", "{live:#}");
    let out = gpucheck()
        .arg("--replay")
        .arg(dir.path().join("c.json"))
        .args(["--only", "gpu.driver,gpu.ecc", "--json", "-"])
        .output()
        .expect("run gpucheck --replay");
    let again: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    for ((id, a), (_, b)) in seen(&live).iter().zip(seen(&again).iter()) {
        assert_eq!(a, b, "{id} differs between the live run and its replay");
    }
    assert!(
        common::result(&again, "gpu.ecc")["summary"]
            .as_str()
            .unwrap_or("")
            .contains("timed out"),
        "{again:#}"
    );
    assert_eq!(live_out.status.code(), out.status.code());
}

#[test]
fn a_gpu_less_machine_replays_to_the_same_report() {
    assert_replays_identically(None);
}

#[test]
fn env_cuda_visible_devices_is_judged_again_from_the_captured_nvml_inventory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uuid = "GPU-00000000-0000-0000-0000-0000000000ff";
    let (live, _) = capture(dir.path(), Some("h100x8"), &[]);
    let _ = live;
    let mut cmd = gpucheck();
    let out = cmd
        .env("CUDA_VISIBLE_DEVICES", uuid)
        .arg("--capture")
        .arg(dir.path().join("v.json"))
        .env("FAKE_NVML_SCENARIO", nvml_scenario("h100x8"))
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args([
            "--only",
            "gpu.count,env.cuda_visible_devices",
            "--json",
            "-",
        ])
        .output()
        .expect("run");
    let live: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let (again, _) = {
        let out = gpucheck()
            .arg("--replay")
            .arg(dir.path().join("v.json"))
            .args(["--only", "env.cuda_visible_devices", "--json", "-"])
            .output()
            .expect("run");
        (
            serde_json::from_slice::<Value>(&out.stdout).expect("JSON"),
            out,
        )
    };
    let live_r = common::result(&live, "env.cuda_visible_devices");
    let again_r = common::result(&again, "env.cuda_visible_devices");
    assert_eq!(live_r["status"], "fail", "{live_r}");
    assert_eq!(live_r["summary"], again_r["summary"]);
    assert_eq!(live_r["hint"], again_r["hint"]);
}

#[test]
fn redact_leaves_no_host_name_address_or_uuid_of_the_source_machine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = "trainer-7.cluster.example.net";
    capture(dir.path(), Some("h100x8"), &[]);
    let plain = std::fs::read_to_string(dir.path().join("c.json")).expect("capture");
    let plain: Value = serde_json::from_str(&plain).expect("JSON");
    let red = dir.path().join("red.json");
    let out = gpucheck()
        .env("MASTER_ADDR", master)
        .env("FAKE_NVML_SCENARIO", nvml_scenario("h100x8"))
        .args(["capture", "--redact"])
        .arg(&red)
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--profile", "quick", "--quiet"])
        .output()
        .expect("run");
    let text = std::fs::read_to_string(&red).unwrap_or_else(|_| panic!("{}", stderr(&out)));
    let mut secrets: Vec<String> = vec![master.to_string(), "trainer-7".to_string()];
    secrets.extend(
        plain["machine"]["gpu_uuids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_string()),
    );
    assert_eq!(secrets.len(), 10, "the fake h100x8 has 8 UUIDs");
    for a in plain["answers"]["net::local_addresses"].as_array().unwrap() {
        let a = a.as_str().unwrap();
        if a != "127.0.0.1" && a != "::1" {
            secrets.push(format!("\"{a}\""));
        }
    }
    let host = plain["machine"]["hostname"].as_str().unwrap().to_string();
    let word = regex_free_word(&text, &host);
    assert!(!word, "host name {host} left in the redacted capture");
    for s in &secrets {
        assert!(
            !text.contains(s.as_str()),
            "{s} left in the redacted capture"
        );
    }
    assert!(
        text.contains("GPU-REDACTED-8"),
        "UUIDs become GPU-REDACTED-n"
    );
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(doc["redacted"], true);
    // The redacted capture still replays.
    let (b, out) = replay(&red, &dir.path().join("b.json"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(common::status_of(&b, "net.loopback"), "pass");
}

/// True when `word` appears in `text` as a whole word.
fn regex_free_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
        !part(before) && !part(after)
    })
}

/// A secret in the environment or in an nccl.conf is never written to a
/// capture (a capture is made to be shared), and the replay reports the
/// setting as the live report did.
#[test]
fn secrets_in_the_environment_and_in_nccl_conf_stay_out_of_the_capture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("nccl.conf");
    std::fs::write(
        &conf,
        "NCCL_SOCKET_IFNAME=lo\nNCCL_NET_PASSWORD=conf-pw-4711\n# a comment\n",
    )
    .expect("write nccl.conf");
    let conf = conf.display().to_string();
    let extra = ["--only", "nccl.env"];
    let out = gpucheck()
        .env("NCCL_CONF_FILE", &conf)
        .env("NCCL_IB_SECRET_TOKEN", "env-tok-0815")
        .arg("capture")
        .arg(dir.path().join("c.json"))
        .args(["--profile", "quick", "--json"])
        .arg(dir.path().join("live.json"))
        .args(extra)
        .output()
        .expect("run gpucheck capture");
    let text = std::fs::read_to_string(dir.path().join("c.json"))
        .unwrap_or_else(|_| panic!("no capture: {}", stderr(&out)));
    assert!(text.contains("NCCL_SOCKET_IFNAME=lo"), "{text}");
    assert!(!text.contains("conf-pw-4711"), "{text}");
    assert!(!text.contains("env-tok-0815"), "{text}");
    let live: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("live.json")).expect("live report"),
    )
    .expect("JSON");
    let (replayed, _) = replay(&dir.path().join("c.json"), &dir.path().join("r.json"));
    let status = |d: &Value| common::text_field(d, "nccl.env", "status").to_string();
    assert_eq!(status(&replayed), status(&live), "{replayed}");
    let report = replayed.to_string();
    assert!(!report.contains("conf-pw-4711") && !report.contains("env-tok-0815"));
}

#[test]
fn a_bad_capture_file_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "{not json").unwrap();
    let report = dir.path().join("report.json");
    std::fs::write(&report, r#"{"format_version": 2, "results": []}"#).unwrap();
    let old = dir.path().join("old.json");
    std::fs::write(
        &old,
        r#"{"capture_version": 0, "gpucheck_version": "0.0.1"}"#,
    )
    .unwrap();
    let damaged = dir.path().join("damaged.json");
    std::fs::write(&damaged, r#"{"capture_version": 1, "answers": []}"#).unwrap();
    for (file, says) in [
        (&garbage, "is not JSON"),
        (&report, "is not a gpucheck capture"),
        (&old, "has capture_version 0; this gpucheck"),
        (&damaged, "is a damaged capture"),
        (&dir.path().join("missing.json"), "cannot read the capture"),
    ] {
        let out = gpucheck().arg("--replay").arg(file).output().expect("run");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn the_replay_says_whose_machine_it_is_above_the_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    capture(dir.path(), Some("h100x8"), &[]);
    let out = gpucheck()
        .arg("--replay")
        .arg(dir.path().join("c.json"))
        .args(["--profile", "quick"])
        .output()
        .expect("run");
    let text = common::stdout(&out);
    let first = text.lines().next().unwrap_or_default();
    assert!(first.starts_with("replay of "), "{first}");
    assert!(first.contains("8 GPUs (NVIDIA H100"), "{first}");
    assert!(first.contains("driver "), "{first}");
    assert!(first.contains("captured 20"), "{first}");
}

/// A replay without --profile judges under the profile the capture ran:
/// a quick capture holds no CUDA, Python or NCCL answers, and judging it
/// under the standard profile only skipped them. Asked for a larger
/// profile, the skips say what the capture lacks and how it was made.
#[test]
fn a_replay_judges_under_the_captures_own_profile() {
    let dir = tempfile::tempdir().expect("tempdir");
    capture(dir.path(), Some("h100x8"), &[]);
    let replay = |args: &[&str]| {
        let out = gpucheck()
            .arg("--replay")
            .arg(dir.path().join("c.json"))
            .args(args)
            .args(["--json", "-"])
            .output()
            .expect("run");
        let doc: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", stderr(&out)));
        (out, doc)
    };
    let (out, doc) = replay(&[]);
    assert_eq!(doc["profile"], "quick", "{}", stderr(&out));
    assert!(
        !doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "cuda.driver"),
        "a quick capture judged under another profile: {doc}"
    );
    let (_, doc) = replay(&["--profile", "standard"]);
    assert_eq!(doc["profile"], "standard");
    assert_eq!(common::status_of(&doc, "cuda.driver"), "skip");
    assert_eq!(
        common::text_field(&doc, "cuda.driver", "summary"),
        "the capture holds no CUDA driver answer (captured with --profile quick)"
    );
}

/// Every capture in tests/replays/ replays to the verdicts its
/// `NAME.expected.json` lists (check id -> status).
#[test]
fn every_capture_in_tests_replays_gives_its_expected_verdicts() {
    let dir = common::root().join("tests/replays");
    let (mut seen, mut real) = (0, 0);
    for e in std::fs::read_dir(&dir).expect("tests/replays").flatten() {
        let path = e.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".capture.json") else {
            continue;
        };
        seen += 1;
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{stem}.expected.json")))
                .expect("expected verdicts"),
        )
        .expect("JSON");
        let profile = expected["profile"].as_str().unwrap_or("quick");
        let mut cmd = gpucheck();
        cmd.arg("--replay")
            .arg(&path)
            .args(["--profile", profile, "--json", "-"]);
        // The checks the recording run skipped (what the recording machine
        // could not stand for: a fake machine's absent device nodes).
        if let Some(skip) = expected["skip"].as_str() {
            cmd.args(["--skip", skip]);
        }
        let out = cmd.output().expect("run");
        if expected["source"]
            .as_str()
            .is_some_and(|s| s.contains("nvidia-smi dump"))
        {
            real += 1;
        }
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{name}: {}", stderr(&out)));
        for (id, status) in expected["verdicts"].as_object().expect("verdicts") {
            assert_eq!(&common::result(&doc, id)["status"], status, "{name}: {id}");
        }
        assert_eq!(
            out.status.code(),
            expected["exit_code"].as_i64().map(|c| c as i32),
            "{name}"
        );
    }
    assert!(seen >= 1, "no captures in {}", dir.display());
    assert!(
        real >= 10,
        "only {real} replays of machines built from real nvidia-smi dumps"
    );
}

/// torch.import runs in an isolated child: its answers travel back with
/// its outcome, and its replay (in gpucheck's own process) asks no Python.
#[test]
fn an_isolated_check_records_in_its_child_and_replays_without_python() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.json");
    let live = gpucheck()
        .arg("--capture")
        .arg(&file)
        .arg("--python")
        .arg(common::venv_python())
        .args(["--only", "torch.import", "--json", "-"])
        .output()
        .expect("run");
    let live: Value = serde_json::from_slice(&live.stdout).expect("JSON");
    let captured: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("capture")).expect("JSON");
    let keys: Vec<&String> = captured["answers"].as_object().unwrap().keys().collect();
    assert!(
        keys.iter().any(|k| k.starts_with("torch::probe_torch(")),
        "{keys:?}"
    );
    // No Python to be found: PATH empty, no virtual environment.
    let again = gpucheck()
        .env("PATH", "")
        .env_remove("VIRTUAL_ENV")
        .arg("--replay")
        .arg(&file)
        .args(["--only", "torch.import", "--json", "-"])
        .output()
        .expect("run");
    let again: Value = serde_json::from_slice(&again.stdout).expect("JSON");
    let (a, b) = (
        common::result(&live, "torch.import"),
        common::result(&again, "torch.import"),
    );
    assert_eq!(a["status"], "pass", "{a}");
    for field in ["status", "summary", "hint", "facts"] {
        assert_eq!(a[field], b[field], "{field}");
    }
}

/// A capture that lacks an answer (written by hand, or by an older
/// gpucheck) skips the checks that need it, naming the answer; no panic.
#[test]
fn a_capture_missing_answers_skips_those_checks_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bare.json");
    let bare = serde_json::json!({
        "capture_version": 1, "gpucheck_version": "0.1.0", "profile": "quick",
        "captured_at_unix": 0,
        "machine": {"hostname": "h", "os": "Debian GNU/Linux 11 (bullseye)", "kernel": ""},
        "options": {"profile": "quick", "nvml_lib": null, "nccl_lib": null, "python": null,
            "expect_gpus": null, "min_busbw_gbps": null, "nproc": null, "ddp_model": "medium",
            "ddp_backend": null, "ddp_device": null, "min_scaling": null, "timeout_s": 0.0},
        "answers": {"env(RANK)": "0"}
    });
    std::fs::write(&file, bare.to_string()).unwrap();
    let out = gpucheck()
        .arg("--replay")
        .arg(&file)
        .args(["--profile", "quick", "--json", "-"])
        .output()
        .expect("run");
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", stderr(&out)));
    // Every check skipped: nothing was verified, so the replay is not ready.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        doc["unverified"].as_array().is_some_and(|u| !u.is_empty()),
        "{doc}"
    );
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(
        common::text_field(&doc, "host.shm", "summary"),
        "the capture holds no reading of /dev/shm (captured with --profile quick)"
    );
    assert_eq!(
        common::result(&doc, "host.shm")["facts"]["capture_key"],
        "host::shm_at(/dev/shm)"
    );
    assert_eq!(common::status_of(&doc, "net.loopback"), "skip");
    // Without the host's answer the report names the captured machine,
    // never the one replaying it.
    assert_eq!(doc["host"]["hostname"], "h");
    assert_eq!(doc["host"]["os"], "Debian GNU/Linux 11 (bullseye)");
}

#[test]
fn capture_usage_errors_are_one_line_and_exit_2_before_any_check_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (args, says) in [
        (
            vec!["exec", "--replay", "c.json", "--", "true"],
            "--replay judges a capture, not this machine, so it cannot gate `exec`",
        ),
        (
            vec!["cluster", "--replay", "c.json", "--nnodes", "2"],
            "--replay judges one node's capture, while `gpucheck cluster` meets the other nodes \
             live: replay each node's capture with `gpucheck --replay FILE`",
        ),
        (vec!["--redact"], "--redact needs --capture FILE (or `gpucheck capture FILE`)"),
        (
            vec!["capture", "/nonexistent-folder/c.json"],
            "cannot write the capture /nonexistent-folder/c.json: No such file or directory (os error 2)",
        ),
    ] {
        let out = gpucheck().current_dir(dir.path()).args(&args).output().expect("run");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end(), format!("gpucheck: {says}"), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: no check ran");
    }
}

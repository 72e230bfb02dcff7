//! The repair action through the real binary: every warn, fail and error
//! result of every fake NVML scenario (tests/fixtures/nvml), of the real
//! kernel logs and of the RDMA sysfs trees carries an action from the
//! documented set, with the GPUs or port it applies to, and the report the
//! run's most drastic one; the catalog's and the ECC guidance's choices
//! reach the user as `reset_gpu`, `reboot_node`, `service_hardware`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{assert_valid_json_report, fake_nvml, gpucheck, result, root, stderr, stdout};
use serde_json::Value;

/// The set, least drastic first (README "Repair actions").
const ACTIONS: [&str; 8] = [
    "none",
    "fix_config",
    "fix_install",
    "restart_job",
    "reset_gpu",
    "reboot_node",
    "service_hardware",
    "contact_provider",
];

fn fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures").join(rel)
}

/// `gpucheck --json -` with the fake NVML in the scenario file, extra
/// environment and arguments; the report is validated against its schema.
fn run(scenario: &Path, envs: &[(&str, PathBuf)], args: &[&str]) -> (Output, Value) {
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", scenario)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_os_str())))
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--json", "-", "--color", "never"])
        .args(args)
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

fn rank(action: &str) -> usize {
    ACTIONS
        .iter()
        .position(|a| *a == action)
        .unwrap_or_else(|| panic!("{action:?} is not in the set"))
}

/// What is wrong with the actions of one report (empty: nothing); the
/// warn-or-worse results' actions are added to `seen`.
fn action_problems(doc: &Value, seen: &mut BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut most = 0;
    for r in doc["results"].as_array().expect("results") {
        let id = r["id"].as_str().unwrap_or("?");
        let status = r["status"].as_str().unwrap_or("?");
        let action = r["action"].as_str();
        if matches!(status, "pass" | "skip") {
            if action.is_some() {
                problems.push(format!("{id} ({status}) names action {action:?}"));
            }
            continue;
        }
        let Some(action) = action.filter(|a| ACTIONS.contains(a) && *a != "none") else {
            problems.push(format!("{id} ({status}) has no action from the set: {r}"));
            continue;
        };
        seen.insert(action.to_string());
        most = most.max(rank(action));
        // A check whose GPU rows say which GPUs are at fault names them.
        let failing_gpus: Vec<u64> = r["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| {
                d.get("label").is_none()
                    && matches!(d["status"].as_str(), Some("warn" | "fail" | "error"))
            })
            .filter_map(|d| d["index"].as_u64())
            .collect();
        let gpus: Vec<u64> = r["action_gpus"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_u64)
            .collect();
        if !failing_gpus.is_empty() && gpus.is_empty() && r.get("action_port").is_none() {
            problems.push(format!(
                "{id}: GPUs {failing_gpus:?} are at fault but the action names none"
            ));
        }
    }
    if doc["action"] != ACTIONS[most] {
        problems.push(format!(
            "top-level action {} is not the most drastic, {}",
            doc["action"], ACTIONS[most]
        ));
    }
    problems
}

#[test]
fn every_fake_nvml_scenario_names_an_action_on_every_warning_and_failure() {
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(fixture("nvml"))
        .expect("tests/fixtures/nvml")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "scenario"))
        .collect();
    scenarios.sort();
    assert!(scenarios.len() > 40, "{} scenarios", scenarios.len());
    let clean = fixture("kernel_log/clean.log");
    let clean = clean.to_str().expect("utf-8 path");
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for s in &scenarios {
        let (_, doc) = run(
            s,
            &[],
            &[
                "--profile",
                "quick",
                "--timeout",
                "3",
                "--kernel-log",
                clean,
            ],
        );
        for p in action_problems(&doc, &mut seen) {
            problems.push(format!("{}: {p}", s.display()));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The scenarios reach the catalog's and the guidance's actions, not
    // only the defaults.
    for want in ["fix_config", "reset_gpu", "reboot_node", "service_hardware"] {
        assert!(seen.contains(want), "no scenario reached {want}: {seen:?}");
    }
}

#[test]
fn every_real_kernel_log_names_the_xid_catalogs_action() {
    let h100 = fixture("nvml/h100x8.scenario");
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    let mut logs: Vec<PathBuf> = std::fs::read_dir(fixture("kernel_log/real"))
        .expect("tests/fixtures/kernel_log/real")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    for log in logs.iter().chain([&fixture("kernel_log/kern.log")]) {
        let path = log.to_str().expect("utf-8 path");
        let (_, doc) = run(&h100, &[], &["--only", "fabric.xid", "--kernel-log", path]);
        for p in action_problems(&doc, &mut seen) {
            problems.push(format!("{}: {p}", log.display()));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    for want in ["restart_job", "reset_gpu", "reboot_node"] {
        assert!(seen.contains(want), "no log reached {want}: {seen:?}");
    }
}

#[test]
fn a_gpu_fallen_off_the_bus_is_reboot_node_for_that_gpu() {
    let log = fixture("kernel_log/kern.log");
    let (out, doc) = run(
        &fixture("nvml/h100x8.scenario"),
        &[],
        &[
            "--only",
            "fabric.xid",
            "--kernel-log",
            log.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let xid = result(&doc, "fabric.xid");
    assert_eq!(xid["action"], "reboot_node", "{xid}");
    assert!(
        !xid["action_gpus"].as_array().expect("GPUs").is_empty(),
        "{xid}"
    );
    assert_eq!(doc["action"], "reboot_node");
}

#[test]
fn a_pending_row_remap_is_reset_gpu_and_a_failed_one_service_hardware() {
    let (_, doc) = run(
        &fixture("nvml/ecc_remap.scenario"),
        &[],
        &["--only", "gpu.ecc"],
    );
    let ecc = result(&doc, "gpu.ecc");
    assert_eq!(
        (&ecc["action"], &ecc["action_gpus"]),
        (&"reset_gpu".into(), &serde_json::json!([3]))
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let failed = dir.path().join("remap_failed.scenario");
    std::fs::write(
        &failed,
        "system driver=570.86.15 nvml=12.570.86.15 cuda=12080\n\
         gpus 4 name=\"NVIDIA A100-SXM4-80GB\"\n\
         gpu 1 remap=0,0,1,0\n\
         gpu 2 remap=0,5,0,1\n",
    )
    .expect("write scenario");
    let (_, doc) = run(&failed, &[], &["--only", "gpu.ecc"]);
    let ecc = result(&doc, "gpu.ecc");
    // The failed remap on GPU 2 outranks the pending one on GPU 1.
    assert_eq!(ecc["status"], "fail", "{ecc}");
    assert_eq!(
        (&ecc["action"], &ecc["action_gpus"]),
        (&"service_hardware".into(), &serde_json::json!([2])),
        "{ecc}"
    );
}

#[test]
fn an_nvml_call_that_hangs_is_reboot_node() {
    let (_, doc) = run(
        &fixture("nvml/hang_ecc.scenario"),
        &[],
        &["--profile", "health", "--timeout", "1"],
    );
    let ecc = result(&doc, "gpu.ecc");
    assert_eq!(ecc["status"], "fail", "{ecc}");
    assert_eq!(ecc["action"], "reboot_node", "{ecc}");
    assert_eq!(doc["action"], "reboot_node");
}

#[test]
fn an_rdma_port_names_itself_and_whose_fault_it_is() {
    let h100 = fixture("nvml/h100x8.scenario");
    let mut seen = BTreeSet::new();
    for (tree, want) in [
        ("port_down", "service_hardware"),
        ("port_init", "contact_provider"),
    ] {
        let envs = [("GPUCHECK_SYSFS_ROOT", fixture(&format!("sysfs/{tree}")))];
        let (_, doc) = run(&h100, &envs, &["--only", "fabric.rdma"]);
        assert_eq!(action_problems(&doc, &mut seen), Vec::<String>::new());
        let rdma = result(&doc, "fabric.rdma");
        assert_eq!(rdma["action"], want, "{tree}: {rdma}");
        let port = rdma["action_port"].as_str().unwrap_or("");
        assert!(port.contains('/'), "{tree}: no port in {rdma}");
    }
}

#[test]
fn the_table_shows_the_action_beside_the_fix_and_junit_as_a_property() {
    let dir = tempfile::tempdir().expect("temp dir");
    let xml = dir.path().join("report.xml");
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", fixture("nvml/ecc_remap.scenario"))
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--only", "gpu.ecc", "--color", "never", "--junit"])
        .arg(&xml)
        .output()
        .expect("run gpucheck");
    let table = stdout(&out);
    assert!(
        table.contains("→ fix (reset_gpu): GPU 3 hit uncorrectable memory errors"),
        "{table}"
    );
    let xml = std::fs::read_to_string(&xml).expect("JUnit written");
    assert!(
        xml.contains("<property name=\"gpucheck.action.gpu.ecc\" value=\"reset_gpu\"/>"),
        "{xml}"
    );
    assert!(
        xml.contains("<property name=\"gpucheck.action_gpus.gpu.ecc\" value=\"3\"/>"),
        "{xml}"
    );
    assert!(xml.contains("<property name=\"gpucheck.action\" value=\"reset_gpu\"/>"));
}

#[test]
fn each_gpu_fault_names_its_own_action_and_gpus() {
    let cases: [(&str, &str, &str, Value); 8] = [
        (
            "nvlink_down",
            "gpu.topology",
            "reset_gpu",
            serde_json::json!([3]),
        ),
        (
            "nvlink_errors",
            "gpu.topology",
            "service_hardware",
            serde_json::json!([4]),
        ),
        (
            "fabric_down",
            "gpu.topology",
            "fix_install",
            serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]),
        ),
        (
            "gpu_lost",
            "gpu.count",
            "reboot_node",
            serde_json::json!([2]),
        ),
        ("mixed", "gpu.count", "fix_config", Value::Null),
        ("zero_gpus", "gpu.count", "fix_config", Value::Null),
        (
            "thermal",
            "gpu.throttle",
            "service_hardware",
            serde_json::json!([6]),
        ),
        (
            "pcie_x8",
            "gpu.pcie",
            "service_hardware",
            serde_json::json!([2, 5, 7]),
        ),
    ];
    for (scenario, id, action, gpus) in cases {
        let path = fixture(&format!("nvml/{scenario}.scenario"));
        let (_, doc) = run(&path, &[], &["--only", "gpu"]);
        let r = result(&doc, id);
        assert_eq!(
            (&r["action"], &r["action_gpus"]),
            (&Value::from(action), &gpus),
            "{scenario}: {r}"
        );
    }
}

//! `env.cuda_visible_devices` through the real binary, cross-checked against
//! the GPUs of a fake libnvidia-ml.so.1 (tests/fixtures/fake_nvml.c) in the
//! scenarios of tests/fixtures/nvml/. Each test sets CUDA_VISIBLE_DEVICES as
//! a user would and asserts what they read: the verdict, the cuda:N -> GPU M
//! mapping, the hint and the exit code. The GPUs' UUIDs are taken from
//! gpucheck's own gpu.count report of the same scenario, not from the check
//! under test.

mod common;

use std::process::Output;

use common::{assert_valid_json_report, fake_nvml, gpucheck, nvml_scenario, result, stdout};
use serde_json::Value;

const ID: &str = "env.cuda_visible_devices";

/// gpucheck `--only only` against the fake NVML in `scenario_name`, with
/// `env` set, in `format` on stdout.
fn gpucheck_in(scenario_name: &str, env: &[(&str, &str)], only: &str, format: &str) -> Output {
    gpucheck()
        .env("FAKE_NVML_SCENARIO", nvml_scenario(scenario_name))
        .envs(env.iter().copied())
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--only", only, "--format", format, "--color", "never"])
        .output()
        .expect("run gpucheck")
}

/// What the check reported, from a validated JSON report.
struct Seen {
    status: String,
    summary: String,
    hint: String,
    result: Value,
    exit: i32,
}

impl Seen {
    fn devices(&self) -> Vec<&Value> {
        self.result["devices"]
            .as_array()
            .map(|d| d.iter().collect())
            .unwrap_or_default()
    }
    fn metric(&self, name: &str) -> Option<f64> {
        self.result["metrics"]
            .as_array()?
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["value"].as_f64())
    }
    fn fact(&self, key: &str) -> String {
        self.result["facts"][key].as_str().unwrap_or("").to_string()
    }
}

fn run_only(scenario_name: &str, env: &[(&str, &str)], only: &str) -> (Seen, Value) {
    let out = gpucheck_in(scenario_name, env, only, "json");
    let doc = assert_valid_json_report(&stdout(&out));
    let r = result(&doc, ID).clone();
    let seen = Seen {
        status: r["status"].as_str().unwrap_or("").to_string(),
        summary: r["summary"].as_str().unwrap_or("").to_string(),
        hint: r["hint"].as_str().unwrap_or("").to_string(),
        result: r,
        exit: out.status.code().unwrap_or(-1),
    };
    (seen, doc)
}

/// The check alone, in `scenario_name`, with `env` set.
fn visible(scenario_name: &str, env: &[(&str, &str)]) -> Seen {
    let (seen, _) = run_only(scenario_name, env, ID);
    let expected_exit = if seen.status == "fail" { 1 } else { 0 };
    assert_eq!(
        seen.exit, expected_exit,
        "exit code does not follow the verdict {}: {}",
        seen.status, seen.summary
    );
    seen
}

/// The UUIDs of the scenario's GPUs in NVML order, as gpu.count reports them.
fn uuids(scenario_name: &str) -> Vec<String> {
    let out = gpucheck_in(scenario_name, &[], "gpu.count", "json");
    let doc = assert_valid_json_report(&stdout(&out));
    result(&doc, "gpu.count")["devices"]
        .as_array()
        .expect("gpu.count lists the GPUs")
        .iter()
        .map(|d| d["uuid"].as_str().expect("a UUID per GPU").to_string())
        .collect()
}

/// A MIG device's UUID as fake_nvml.c's nvmlDeviceGetUUID makes it
/// ("MIG-%08x-aaaa-4bbb-8ccc-%012x" of 0xfa4e0000 + GPU and the slot).
fn fake_mig_uuid(gpu: u32, slot: u32) -> String {
    format!(
        "MIG-{:08x}-aaaa-4bbb-8ccc-{slot:012x}",
        0xfa4e_0000u32 + gpu
    )
}

const PCI: (&str, &str) = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID");

// ---------------------------------------------------------------- the mapping

#[test]
fn unset_on_eight_gpus_maps_every_ordinal() {
    let uuids = uuids("h100x8");
    assert_eq!(uuids.len(), 8);
    let s = visible("h100x8", &[]);
    assert_eq!(s.status, "pass", "{}", s.summary);
    assert_eq!(
        s.summary,
        "CUDA_VISIBLE_DEVICES unset: all 8 GPUs visible (8x NVIDIA H100 80GB HBM3), cuda:N -> GPU N"
    );
    assert_eq!(s.metric("visible_devices"), Some(8.0));
    let devices = s.devices();
    assert_eq!(devices.len(), 8);
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d["index"], i as u64);
        assert_eq!(d["label"], format!("cuda:{i}").as_str());
        assert_eq!(d["uuid"], uuids[i].as_str());
        assert_eq!(
            d["summary"],
            format!("cuda:{i} -> GPU {i} (NVIDIA H100 80GB HBM3, {})", uuids[i]).as_str()
        );
    }
}

#[test]
fn indices_map_onto_the_gpus_in_the_table_a_user_reads() {
    let uuids = uuids("h100x8");
    let out = gpucheck_in("h100x8", &[("CUDA_VISIBLE_DEVICES", "6"), PCI], ID, "table");
    assert_eq!(out.status.code(), Some(0));
    let table = stdout(&out);
    let expected = format!(
        "CUDA_VISIBLE_DEVICES=\"6\": cuda:0 -> GPU 6 (NVIDIA H100 80GB HBM3, {})",
        uuids[6]
    );
    assert!(table.contains(&expected), "{table}");
    // --verbose adds a row per CUDA device, named by its cuda ordinal.
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", nvml_scenario("h100x8"))
        .envs([("CUDA_VISIBLE_DEVICES", "6"), PCI])
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--only", ID, "--verbose", "--color", "never"])
        .output()
        .expect("run gpucheck");
    let table = stdout(&out);
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("cuda:0 "))
        .unwrap_or_else(|| panic!("no device row:\n{table}"));
    assert!(row.contains("cuda:0 -> GPU 6 (NVIDIA H100"), "{row}");
}

#[test]
fn uuids_and_unique_prefixes_map_to_their_gpus() {
    let uuids = uuids("h100x8");
    // A full UUID, then a prefix long enough to name one GPU.
    let prefix = &uuids[2][..12];
    let value = format!("{},{prefix}", uuids[5]);
    let s = visible("h100x8", &[("CUDA_VISIBLE_DEVICES", &value)]);
    assert_eq!(s.status, "pass", "{}", s.summary);
    assert_eq!(
        s.summary,
        format!(
            "CUDA_VISIBLE_DEVICES=\"{value}\": cuda:0 -> GPU 5, cuda:1 -> GPU 2 (2x NVIDIA H100 80GB HBM3)"
        )
    );
    let devices = s.devices();
    assert_eq!(devices[0]["uuid"], uuids[5].as_str());
    assert_eq!(devices[1]["uuid"], uuids[2].as_str());
    assert_eq!(devices[1]["index"], 1);
}

#[test]
fn an_index_beyond_the_gpu_count_fails_and_hides_the_rest() {
    let s = visible("h100x8", &[("CUDA_VISIBLE_DEVICES", "0,9,1"), PCI]);
    assert_eq!(s.status, "fail", "{}", s.summary);
    assert_eq!(
        s.summary,
        r#"CUDA_VISIBLE_DEVICES="0,9,1" names GPU 9 but this machine has 8 GPUs (0-7): CUDA hides it and everything after it ("1"), so it sees only cuda:0 -> GPU 0"#
    );
    assert!(s.hint.contains("use indices 0-7"), "{}", s.hint);
    assert!(
        s.hint.contains("`export CUDA_VISIBLE_DEVICES=0,1`"),
        "{}",
        s.hint
    );
    assert_eq!(s.metric("visible_devices"), Some(1.0));
    assert_eq!(s.devices().len(), 1);
    assert_eq!(s.fact("cuda_visible_effective"), "cuda:0 -> GPU 0");
}

#[test]
fn a_prefix_shared_by_several_gpus_fails_naming_them() {
    let uuids = uuids("h100x8");
    // Every fake UUID starts the same way ("GPU-fa4e000" + the GPU number).
    let shared = &uuids[0][..11];
    assert!(uuids.iter().all(|u| u.starts_with(shared)));
    let s = visible("h100x8", &[("CUDA_VISIBLE_DEVICES", shared)]);
    assert_eq!(s.status, "fail", "{}", s.summary);
    assert!(
        s.summary
            .contains("matches 8 devices (GPU 0, GPU 1, GPU 2, GPU 3, GPU 4, GPU 5, GPU 6, GPU 7), and CUDA needs a prefix that names one"),
        "{}",
        s.summary
    );
    assert!(s.summary.ends_with("so it sees no GPU"), "{}", s.summary);
    assert!(
        s.hint.contains(&format!("GPU 3 is {}", uuids[3])),
        "{}",
        s.hint
    );
    assert_eq!(s.metric("visible_devices"), Some(0.0));
}

#[test]
fn a_uuid_matching_no_gpu_fails_listing_the_real_ones() {
    let uuids = uuids("h100x8");
    let value = format!("{},GPU-0badc0de,3", uuids[1]);
    let s = visible("h100x8", &[("CUDA_VISIBLE_DEVICES", &value), PCI]);
    assert_eq!(s.status, "fail", "{}", s.summary);
    assert!(
        s.summary.contains(
            r#"entry 2 ("GPU-0badc0de") matches no GPU on this machine: CUDA hides it and everything after it ("3"), so it sees only cuda:0 -> GPU 1"#
        ),
        "{}",
        s.summary
    );
    assert!(
        s.hint.contains(&format!(
            "the GPUs here are GPU 0 {}, GPU 1 {}",
            uuids[0], uuids[1]
        )),
        "{}",
        s.hint
    );
    assert!(
        s.hint
            .contains(&format!("`export CUDA_VISIBLE_DEVICES={},3`", uuids[1])),
        "{}",
        s.hint
    );
}

#[test]
fn an_index_and_the_uuid_of_the_same_gpu_leave_no_gpu() {
    let uuids = uuids("h100x8");
    let value = format!("4,{}", uuids[4]);
    let s = visible("h100x8", &[("CUDA_VISIBLE_DEVICES", &value), PCI]);
    assert_eq!(s.status, "fail", "{}", s.summary);
    assert!(
        s.summary
            .ends_with("both name GPU 4: CUDA then sees no GPU at all"),
        "{}",
        s.summary
    );
    assert!(s.hint.contains("list each GPU once"), "{}", s.hint);
    assert_eq!(s.metric("visible_devices"), Some(0.0));
    assert!(s.devices().is_empty());
}

#[test]
fn values_that_hide_every_gpu_still_fail_with_gpus_present() {
    for (value, says) in [("-1", "hides every GPU"), ("", "set but empty")] {
        let s = visible("h100x8", &[("CUDA_VISIBLE_DEVICES", value)]);
        assert_eq!(s.status, "fail", "{value:?}: {}", s.summary);
        assert!(s.summary.contains(says), "{value:?}: {}", s.summary);
        assert_eq!(s.metric("visible_devices"), Some(0.0));
        assert!(s.devices().is_empty());
    }
}

// ---------------------------------------------------------------- order and models

#[test]
fn indices_without_pci_order_on_mixed_models_warn_that_the_mapping_may_be_off() {
    let s = visible("mixed", &[("CUDA_VISIBLE_DEVICES", "4,0")]);
    assert_eq!(s.status, "warn", "{}", s.summary);
    assert!(
        s.summary.starts_with(
            r#"CUDA_VISIBLE_DEVICES="4,0": cuda:0 -> GPU 4, cuda:1 -> GPU 0 (1x NVIDIA A100-SXM4-80GB, 1x NVIDIA H100 80GB HBM3); "#
        ),
        "{}",
        s.summary
    );
    assert!(
        s.summary.contains(
            "this machine mixes models (4x NVIDIA H100 80GB HBM3, 4x NVIDIA A100-SXM4-80GB)"
        ),
        "{}",
        s.summary
    );
    assert!(
        s.hint.contains("export CUDA_DEVICE_ORDER=PCI_BUS_ID"),
        "{}",
        s.hint
    );
    // With PCI order the same value is exact and passes.
    let s = visible("mixed", &[("CUDA_VISIBLE_DEVICES", "4,0"), PCI]);
    assert_eq!(s.status, "pass", "{}", s.summary);
    assert_eq!(s.devices()[0]["name"], "NVIDIA A100-SXM4-80GB");
}

// ---------------------------------------------------------------- MIG

#[test]
fn a_mig_uuid_maps_to_the_gpu_that_owns_it() {
    let uuids = uuids("mig");
    let mig = fake_mig_uuid(1, 1);
    let s = visible("mig", &[("CUDA_VISIBLE_DEVICES", &mig)]);
    assert_eq!(s.status, "pass", "{}", s.summary);
    assert_eq!(
        s.summary,
        format!(
            "CUDA_VISIBLE_DEVICES=\"{mig}\": cuda:0 -> {mig} on GPU 1 (NVIDIA A100-SXM4-40GB, {})",
            uuids[1]
        )
    );
    assert_eq!(s.devices()[0]["uuid"], mig.as_str());
}

#[test]
fn two_mig_devices_fail_because_a_process_uses_one() {
    let value = format!("{},{}", fake_mig_uuid(1, 0), fake_mig_uuid(1, 1));
    let s = visible("mig", &[("CUDA_VISIBLE_DEVICES", &value)]);
    assert_eq!(s.status, "fail", "{}", s.summary);
    assert!(
        s.summary.contains(
            "lists 2 MIG devices, but a CUDA process can use only one MIG device: it sees 1 device, not 2"
        ),
        "{}",
        s.summary
    );
    assert!(
        s.hint.contains("`sudo nvidia-smi -i 1 -mig 0`"),
        "{}",
        s.hint
    );
    assert_eq!(s.metric("visible_devices"), Some(1.0));
}

#[test]
fn a_mig_uuid_of_no_instance_fails_listing_the_real_ones() {
    let s = visible("mig", &[("CUDA_VISIBLE_DEVICES", &fake_mig_uuid(0, 0))]);
    assert_eq!(s.status, "fail", "{}", s.summary);
    assert!(s.summary.contains("matches no MIG device"), "{}", s.summary);
    assert!(
        s.hint.contains(&format!(
            "the MIG devices here are {} (GPU 1), {} (GPU 1)",
            fake_mig_uuid(1, 0),
            fake_mig_uuid(1, 1)
        )),
        "{}",
        s.hint
    );
}

#[test]
fn unset_on_a_mig_machine_says_which_gpu_is_in_mig_mode() {
    let s = visible("mig", &[]);
    assert_eq!(s.status, "pass", "{}", s.summary);
    let devices = s.devices();
    assert_eq!(devices.len(), 2);
    assert!(
        devices[1]["summary"]
            .as_str()
            .unwrap_or("")
            .ends_with("in MIG mode, CUDA uses one of its MIG devices)"),
        "{}",
        devices[1]["summary"]
    );
    assert!(
        !devices[0]["summary"].as_str().unwrap_or("").contains("MIG"),
        "{}",
        devices[0]["summary"]
    );
}

// ---------------------------------------------------------------- without NVML

#[test]
fn a_broken_driver_leaves_the_value_judged_alone() {
    let (s, doc) = run_only(
        "init_driver_not_loaded",
        &[("CUDA_VISIBLE_DEVICES", "0,1"), PCI],
        &format!("gpu.driver,{ID}"),
    );
    assert_eq!(result(&doc, "gpu.driver")["status"], "fail");
    assert_eq!(s.status, "pass", "{}", s.summary);
    assert_eq!(
        s.summary,
        r#"CUDA_VISIBLE_DEVICES="0,1": cuda:0 -> 0, cuda:1 -> 1 (not checked against the GPUs: NVML not usable)"#
    );
    assert_eq!(
        s.fact("gpu_cross_check"),
        "not possible: NVML is not usable (gpu.driver: fail)"
    );
    assert!(s.devices().is_empty());
    // The driver's failure is the exit code's reason, not this check.
    assert_eq!(s.exit, 1);
}

#[test]
fn a_driver_that_cannot_load_is_named_in_the_fact() {
    let s = visible(
        "init_driver_not_loaded",
        &[("CUDA_VISIBLE_DEVICES", "GPU-abc")],
    );
    assert_eq!(s.status, "pass", "{}", s.summary);
    assert!(
        s.fact("gpu_cross_check")
            .contains("NVML_ERROR_DRIVER_NOT_LOADED"),
        "{}",
        s.fact("gpu_cross_check")
    );
}

#[test]
fn a_hung_nvml_does_not_fail_this_check() {
    let s = visible("hang_init", &[("CUDA_VISIBLE_DEVICES", "1"), PCI]);
    assert_eq!(s.status, "pass", "{}", s.summary);
    assert!(
        s.summary
            .ends_with("(not checked against the GPUs: NVML not usable)"),
        "{}",
        s.summary
    );
    assert!(
        s.fact("gpu_cross_check")
            .contains("did not answer within 5 s, stuck in nvmlInit_v2"),
        "{}",
        s.fact("gpu_cross_check")
    );
}

#[test]
fn after_the_gpu_checks_the_same_nvml_answers() {
    let (s, doc) = run_only(
        "h100x8",
        &[("CUDA_VISIBLE_DEVICES", "3,2"), PCI],
        &format!("gpu.driver,gpu.count,{ID}"),
    );
    assert_eq!(result(&doc, "gpu.driver")["status"], "pass");
    assert_eq!(s.status, "pass", "{}", s.summary);
    assert_eq!(
        s.summary,
        r#"CUDA_VISIBLE_DEVICES="3,2": cuda:0 -> GPU 3, cuda:1 -> GPU 2 (2x NVIDIA H100 80GB HBM3)"#
    );
    assert_eq!(s.fact("gpu_cross_check"), "8 GPUs (0-7) from NVML");
    assert_eq!(s.exit, 0);
}

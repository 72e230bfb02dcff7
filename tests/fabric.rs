//! The fabric checks through the real binary: Xid history from real-format
//! kernel logs (`--kernel-log`, GPUs named through the fake NVML), RDMA
//! ports and GPUDirect RDMA from fixture trees standing for /sys and /proc
//! (GPUCHECK_SYSFS_ROOT, GPUCHECK_PROC_ROOT), and this machine as it is.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{
    assert_valid_json_report, fake_nvml, gpucheck, result, root, status_of, stderr, stdout,
    text_field,
};
use serde_json::Value;

fn fixture(rel: &str) -> PathBuf {
    let p = root().join("tests/fixtures").join(rel);
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// `gpucheck --only <only> --format json` with the fake NVML in `scenario`,
/// extra environment and arguments; the report is validated.
fn run(only: &str, scenario: &str, envs: &[(&str, PathBuf)], args: &[&str]) -> (Output, Value) {
    let out = gpucheck()
        .env(
            "FAKE_NVML_SCENARIO",
            fixture(&format!("nvml/{scenario}.scenario")),
        )
        .envs(envs.iter().map(|(k, v)| (*k, v.as_os_str())))
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--only", only, "--format", "json", "--color", "never"])
        .args(args)
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn xid_with_log(scenario: &str, log: &str) -> (Output, Value) {
    let path = fixture(&format!("kernel_log/{log}"));
    let path = path.to_str().expect("utf-8 path");
    run("fabric.xid", scenario, &[], &["--kernel-log", path])
}

fn rdma(tree: &str, envs: &[(&str, PathBuf)]) -> (Output, Value) {
    let mut all = vec![("GPUCHECK_SYSFS_ROOT", fixture(&format!("sysfs/{tree}")))];
    all.extend(envs.iter().cloned());
    run("fabric.rdma", "h100x8", &all, &[])
}

fn gpudirect(tree: &str, proc: &str) -> (Output, Value) {
    run(
        "fabric.gpudirect",
        "h100x8",
        &[
            ("GPUCHECK_SYSFS_ROOT", fixture(&format!("sysfs/{tree}"))),
            ("GPUCHECK_PROC_ROOT", fixture(&format!("proc/{proc}"))),
        ],
        &[],
    )
}

// ---------------------------------------------------------------- fabric.xid

#[test]
fn fallen_off_the_bus_since_boot_fails_naming_the_gpu_and_the_older_boot() {
    let (out, doc) = xid_with_log("h100x8", "kern.log");
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(status_of(&doc, "fabric.xid"), "fail");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.starts_with(
            "GPU 2: Xid 79 (GPU has fallen off the bus) 2 times, last at Dec 1 10:31:22, on 00000000:3A:00.0 (GPU-fa4e0002-"
        ),
        "{summary}"
    );
    assert!(summary.contains("kern.log)"), "{summary}");
    assert!(
        summary.ends_with("; 1 Xid event of earlier boots ignored"),
        "{summary}"
    );
    let hint = text_field(&doc, "fabric.xid", "hint");
    assert!(
        hint.starts_with("drain the node and reboot it: GPU 2 fell off the bus"),
        "{hint}"
    );
    // The job-class Xid 13 on GPU 5 is reported in the hint too.
    assert!(hint.contains("the driver ended the job on GPU 5"), "{hint}");
}

#[test]
fn a_gpu_nvml_no_longer_lists_is_named_by_its_pci_address() {
    let (_, doc) = xid_with_log("gpu_lost", "kern.log");
    assert_eq!(status_of(&doc, "fabric.xid"), "fail");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.starts_with("Xid 79 (GPU has fallen off the bus) 2 times, last at Dec 1 10:31:22, on GPU at PCI 0000:3a:00 (not listed by NVML)"),
        "{summary}"
    );
    assert!(text_field(&doc, "fabric.xid", "hint")
        .contains("the GPU at PCI 0000:3a:00 fell off the bus"));
}

#[test]
fn journal_output_with_ecc_and_gsp_errors_fails_with_the_reset_command() {
    let (out, doc) = xid_with_log("h100x8", "journal.txt");
    assert_eq!(code(&out), 1);
    assert_eq!(status_of(&doc, "fabric.xid"), "fail");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.contains("GPU 3: Xid 48 (Double Bit ECC Error) once, last at 3022.9 s after boot, on 00000000:5D:00.0 (GPU-fa4e0003-1111-4222-8333-000000000003); NVIDIA's immediate action: WORKFLOW_XID_48"),
        "{summary}"
    );
    assert!(
        summary.contains("GPU 7: Xid 119 (GSP RPC Timeout) once"),
        "{summary}"
    );
    let hint = text_field(&doc, "fabric.xid", "hint");
    assert!(
        hint.starts_with(
            "reset GPUs 3, 7 while no job uses it and log the reset: `nvidia-smi -r -i 3,7 | sudo \
             tee /dev/kmsg`"
        ),
        "{hint}"
    );
}

#[test]
fn informational_xids_pass_with_a_note() {
    let (out, doc) = xid_with_log("h100x8", "dmesg.txt");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, "fabric.xid"), "pass");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.starts_with("no Xid errors that need action since boot (read from "),
        "{summary}"
    );
    assert!(summary.contains("noted: Xid 63 (GPU memory remapping event) once, last at 4409.1 s after boot, on 00000000:18:00.0 (GPU-fa4e0000-1111-4222-8333-000000000000); NVIDIA's immediate action: IGNORE"), "{summary}");
    assert!(
        summary.contains("Xid 92 (High single-bit ECC error rate)"),
        "{summary}"
    );
}

/// Every real log in tests/fixtures/kernel_log/real (see its README for
/// sources): the verdict, and each (GPU address, Xid, count) found, none
/// missed. The dated ones are from 2021-2026, so this boot is put before
/// them (an uptime of 12 years).
/// (PCI address, Xid, count) as the event table shows them.
type XidRow = (&'static str, u64, u64);

const REAL_LOGS: &[(&str, &str, &[XidRow])] = &[
    (
        "akash-244-dmesg-T-xid43-31-94.log",
        "warn",
        &[
            ("0000:00:05", 43, 2),
            ("0000:00:07", 31, 1),
            ("0000:00:08", 94, 1),
        ],
    ),
    (
        "bumblebee-554-dmesg-fallen.log",
        "fail",
        &[("0000:01:00", 79, 2)],
    ),
    (
        "bumblebee-677-dmesg-xid32-31.log",
        "warn",
        &[("0000:01:00", 32, 2), ("0000:01:00", 31, 1)],
    ),
    (
        "gpu-operator-1146-syslog-xid48.log",
        "fail",
        &[("0000:07:00", 48, 1)],
    ),
    ("gpud-dmesg-T-xid119.log", "fail", &[("0000:9b:00", 119, 5)]),
    (
        "gpud-dmesg-iso-xid13-43.log",
        "warn",
        &[("0000:38:00", 13, 16), ("0000:38:00", 43, 1)],
    ),
    (
        "gpud-gb200-xid149-154.log",
        "fail",
        &[
            ("0009:01:00", 149, 3),
            ("0009:01:00", 154, 1),
            ("0008:01:00", 149, 2),
            ("0019:01:00", 154, 1),
            ("0018:01:00", 154, 1),
            ("0008:01:00", 154, 1),
        ],
    ),
    ("gpud-kmsg-nvswitch-open.log", "pass", &[]),
    ("gpud-kmsg-peermem-invalid-context.log", "pass", &[]),
    (
        "gpud-pr46-dmesg-ctime-xid13-109.log",
        "fail",
        &[("0000:cb:00", 13, 3), ("0000:cb:00", 109, 1)],
    ),
    (
        "gpud-sxid-readme-xid79.log",
        "fail",
        &[("0000:91:00", 79, 1)],
    ),
    (
        "gpud-sxid-readme-xid79-sxid20034.log",
        "fail",
        &[("0000:91:00", 79, 1)],
    ),
    (
        "mleng-debug-xid63-row-remap.log",
        "pass",
        &[("0000:10:1c", 63, 1)],
    ),
    (
        "nvforum-364958-journal-xid120-154.log",
        "fail",
        &[("0000:01:00", 120, 1), ("0000:01:00", 154, 1)],
    ),
    (
        "nvforum-364958-journal-xid62-154-45.log",
        "fail",
        &[
            ("0000:01:00", 62, 1),
            ("0000:01:00", 154, 1),
            ("0000:01:00", 45, 1),
        ],
    ),
    (
        "nvsentinel-155-dmesg-fallen-multiline.log",
        "fail",
        &[("0000:b3:00", 79, 1)],
    ),
    ("nvtrust-124-dmesg-sxid22013-nonfatal.log", "pass", &[]),
    (
        "ogkm-1151-journal-xid79.log",
        "fail",
        &[("0000:2b:00", 79, 1)],
    ),
    (
        "pastebin-C4RfJB4y-syslog-fallen.log",
        "fail",
        &[("0000:01:00", 79, 2)],
    ),
    (
        "pastebin-jJdbRLSr-dmesg-xid79.log",
        "fail",
        &[("0000:03:00", 79, 1)],
    ),
    (
        "pastebin-xJaypMZt-syslog-fallen-xid3.log",
        "fail",
        &[("0000:01:00", 79, 1), ("0000:01:00", 3, 1)],
    ),
    (
        "pytorch-51382-dmesg-T-xid43-31.log",
        "warn",
        &[("0000:3d:00", 43, 4), ("0000:db:00", 31, 3)],
    ),
    (
        "vllm-40652-dmesg-T-xid119.log",
        "fail",
        &[("0001:6c:00", 119, 1), ("0001:96:00", 119, 1)],
    ),
];

fn real_log(name: &str) -> Value {
    let path = fixture(&format!("kernel_log/real/{name}"));
    let path = path.to_str().expect("utf-8 path");
    let boot = ("GPUCHECK_PROC_ROOT", fixture("proc/booted-2014"));
    run("fabric.xid", "h100x8", &[boot], &["--kernel-log", path]).1
}

/// The rows of fabric.xid's table titled `title`; none without that table.
fn table_rows(doc: &Value, title: &str) -> Vec<Value> {
    let r = result(doc, "fabric.xid");
    let tables = r["tables"].as_array().cloned().unwrap_or_default();
    tables
        .iter()
        .find(|t| t["title"] == title)
        .and_then(|t| t["rows"].as_array().cloned())
        .unwrap_or_default()
}

/// (PCI address, Xid, count) per row of fabric.xid's Xid event table.
fn xid_rows(doc: &Value) -> Vec<(String, u64, u64)> {
    let rows = table_rows(doc, "Xid events since boot");
    rows.iter()
        .map(|row| {
            let cell = |i: usize| row[i].as_str().unwrap_or("").to_string();
            let num = |i: usize| cell(i).parse::<u64>().unwrap_or(u64::MAX);
            (cell(1), num(2), num(4))
        })
        .collect()
}

#[test]
fn every_real_log_gets_its_verdict_with_every_xid_found() {
    let listed = std::fs::read_dir(fixture("kernel_log/real"))
        .expect("real logs")
        .count();
    assert_eq!(listed, REAL_LOGS.len(), "a real log without an expectation");
    for (name, status, expected) in REAL_LOGS {
        let doc = real_log(name);
        assert_eq!(status_of(&doc, "fabric.xid"), *status, "{name}");
        let expected: Vec<(String, u64, u64)> = expected
            .iter()
            .map(|(pci, code, n)| (pci.to_string(), *code, *n))
            .collect();
        assert_eq!(xid_rows(&doc), expected, "{name}");
    }
}

/// (switch, PCI address, SXid, severity, links, count) per row of
/// fabric.xid's SXid table.
fn sxid_rows(doc: &Value) -> Vec<[String; 6]> {
    table_rows(doc, "NVSwitch SXid events since boot")
        .iter()
        .map(|row| [0, 1, 2, 4, 5, 6].map(|i| row[i].as_str().unwrap_or("").to_string()))
        .collect()
}

#[test]
fn a_fatal_nvswitch_sxid_fails_naming_the_switch_and_a_non_fatal_one_is_a_note() {
    let (out, doc) = xid_with_log("h100x8", "nvswitch-sxid.txt");
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(status_of(&doc, "fabric.xid"), "fail");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.starts_with(
            "NVSwitch SXid 20034 (LTSSM fault up: the link went down from active), fatal, 2 \
             times, last at 4120.4 s after boot, on nvidia-nvswitch0 (PCI 0000:05:00.0), links \
             63, 62 (read from "
        ),
        "{summary}"
    );
    assert_eq!(text_field(&doc, "fabric.xid", "action"), "reboot_node");
    let hint = text_field(&doc, "fabric.xid", "hint");
    assert!(
        hint.starts_with("drain the node and restart it: after a fatal NVSwitch error the port of nvidia-nvswitch0 (PCI 0000:05:00.0) stays down until a system restart resets the switch"),
        "{hint}"
    );
    let row = |s: [&str; 6]| s.map(String::from);
    assert_eq!(
        sxid_rows(&doc),
        [
            row([
                "nvidia-nvswitch3",
                "0000:c5:00.0",
                "12028",
                "Non-fatal",
                "41",
                "1"
            ]),
            row([
                "nvidia-nvswitch0",
                "0000:05:00.0",
                "20034",
                "Fatal",
                "63 62",
                "2"
            ]),
        ]
    );
    assert!(xid_rows(&doc).is_empty());
}

#[test]
fn a_real_log_of_only_non_fatal_sxids_passes_with_a_note() {
    let doc = real_log("nvtrust-124-dmesg-sxid22013-nonfatal.log");
    assert_eq!(status_of(&doc, "fabric.xid"), "pass");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.starts_with("no Xid or SXid errors that need action since boot (read from "),
        "{summary}"
    );
    assert!(
        summary.contains(
            "noted: NVSwitch SXid 22013 (Minion link DLREQ interrupt), non-fatal, 3 times, last \
             at 38.2 s after boot, on nvidia-nvswitch3 (PCI 0000:04:00.0), links 44, 45, 46"
        ),
        "{summary}"
    );
    assert_eq!(text_field(&doc, "fabric.xid", "hint"), "");
}

#[test]
fn a_real_fall_off_the_bus_with_fatal_sxids_names_both() {
    let doc = real_log("gpud-sxid-readme-xid79-sxid20034.log");
    assert_eq!(status_of(&doc, "fabric.xid"), "fail");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.contains("Xid 79 (GPU has fallen off the bus)"),
        "{summary}"
    );
    assert!(
        summary.contains("NVSwitch SXid 20034 (LTSSM fault up: the link went down from active), fatal, once, last at 6781753.4 s after boot, on nvidia-nvswitch1 (PCI 0000:06:00.0), link 48"),
        "{summary}"
    );
    let switches: Vec<String> = sxid_rows(&doc).iter().map(|r| r[0].clone()).collect();
    assert_eq!(
        switches,
        ["nvidia-nvswitch1", "nvidia-nvswitch0", "nvidia-nvswitch2"]
    );
}

#[test]
fn a_real_context_switch_timeout_fails_with_the_catalogs_reset() {
    let doc = real_log("gpud-pr46-dmesg-ctime-xid13-109.log");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.starts_with(
            "Xid 109 (Context Switch Timeout Error) once, last at Fri Aug 30 11:43:14 2024, on \
             GPU at PCI 0000:cb:00 (not listed by NVML); NVIDIA's immediate action: RESET_GPU"
        ),
        "{summary}"
    );
    assert!(text_field(&doc, "fabric.xid", "hint")
        .starts_with("reset the GPU at PCI 0000:cb:00 while no job uses it"));
}

#[test]
fn a_real_fall_off_the_bus_told_over_three_lines_fails_with_reboot() {
    let doc = real_log("nvsentinel-155-dmesg-fallen-multiline.log");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.starts_with(
            "Xid 79 (GPU has fallen off the bus) once, last at 1843.3 s after boot, on GPU at \
             PCI 0000:b3:00 (not listed by NVML); NVIDIA's immediate action: RESTART_BM"
        ),
        "{summary}"
    );
}

#[test]
fn a_real_dated_log_from_before_this_boot_is_all_earlier_boots() {
    // This machine's own boot (its real /proc/uptime) is after 2024.
    let path = fixture("kernel_log/real/pytorch-51382-dmesg-T-xid43-31.log");
    let (_, doc) = run(
        "fabric.xid",
        "h100x8",
        &[],
        &["--kernel-log", path.to_str().expect("utf-8")],
    );
    assert_eq!(status_of(&doc, "fabric.xid"), "pass");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.ends_with("; 7 Xid events of earlier boots ignored"),
        "{summary}"
    );
}

#[test]
fn xids_before_a_logged_gpu_reset_no_longer_fail() {
    let (out, doc) = xid_with_log("h100x8", "reset-logged.txt");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, "fabric.xid"), "pass");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.ends_with("reset-logged.txt); 2 Xid events from before a logged GPU reset ignored"),
        "{summary}"
    );
}

#[test]
fn a_log_whose_only_xid_is_from_an_earlier_boot_passes() {
    let (out, doc) = xid_with_log("h100x8", "clean.log");
    assert_eq!(code(&out), 0);
    assert_eq!(status_of(&doc, "fabric.xid"), "pass");
    let summary = text_field(&doc, "fabric.xid", "summary");
    assert!(
        summary.starts_with("no Xid errors since boot (read from "),
        "{summary}"
    );
    assert!(
        summary.ends_with("clean.log); 1 Xid event of earlier boots ignored"),
        "{summary}"
    );
}

#[test]
fn a_missing_kernel_log_is_an_error_and_garbage_is_no_panic() {
    let (out, doc) = run(
        "fabric.xid",
        "h100x8",
        &[],
        &["--kernel-log", "/nonexistent/kern.log"],
    );
    assert_eq!(code(&out), 1);
    assert_eq!(status_of(&doc, "fabric.xid"), "error");
    assert_eq!(
        text_field(&doc, "fabric.xid", "summary"),
        "cannot read --kernel-log /nonexistent/kern.log: No such file or directory (os error 2)"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.log");
    let mut bytes: Vec<u8> = (0..=255u8).cycle().take(64 * 1024).collect();
    bytes.extend_from_slice(b"\nNVRM: Xid (PCI:0000:\xff\xfe:00): 79, x\nNVRM: Xid (PCI:0000:18:00): \xff\n[ 99999999999999999999999.0] NVRM: Xid (PCI:0000:18:00): 31, fault\n");
    std::fs::write(&garbage, bytes).expect("write");
    let (out, doc) = run(
        "fabric.xid",
        "h100x8",
        &[],
        &["--kernel-log", garbage.to_str().expect("utf-8")],
    );
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(status_of(&doc, "fabric.xid"), "warn");
    assert!(text_field(&doc, "fabric.xid", "summary")
        .starts_with("GPU 0: Xid 31 (GPU memory page fault) once"));
}

// ---------------------------------------------------------------- fabric.rdma

#[test]
fn four_active_ndr_ports_pass() {
    let (out, doc) = rdma("ndr_active", &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, "fabric.rdma"), "pass");
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "4 RDMA ports active at 400 Gb/sec (4X NDR): mlx5_0/1, mlx5_1/1, mlx5_2/1, mlx5_3/1"
    );
    let table = &result(&doc, "fabric.rdma")["tables"][0];
    assert_eq!(table["rows"][0][5], "ibp0s0 (MTU 4092)");
}

#[test]
fn a_port_in_init_fails_naming_the_subnet_manager() {
    let (out, doc) = rdma("port_init", &[]);
    assert_eq!(code(&out), 1);
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "mlx5_1/1 is INIT (LinkUp): no subnet manager"
    );
    assert!(text_field(&doc, "fabric.rdma", "hint").contains("`opensm`"));
}

#[test]
fn a_down_port_fails_and_leaving_it_out_of_nccl_ib_hca_passes() {
    let (out, doc) = rdma("port_down", &[]);
    assert_eq!(code(&out), 1);
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "mlx5_3/1 is DOWN (Polling)"
    );
    let hint = text_field(&doc, "fabric.rdma", "hint");
    assert!(
        hint.contains("cable") && hint.contains("NCCL_IB_HCA=^=mlx5_3:1"),
        "{hint}"
    );

    let out = gpucheck()
        .env("GPUCHECK_SYSFS_ROOT", fixture("sysfs/port_down"))
        .env("NCCL_IB_HCA", "^=mlx5_3:1")
        .args(["--only", "fabric.rdma", "--format", "json"])
        .output()
        .expect("run");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(status_of(&doc, "fabric.rdma"), "pass");
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "3 RDMA ports active (NCCL_IB_HCA=\"^=mlx5_3:1\") at 400 Gb/sec (4X NDR): mlx5_0/1, mlx5_1/1, mlx5_2/1"
    );
}

#[test]
fn a_slower_port_warns_naming_both_rates() {
    let (out, doc) = rdma("mixed_rates", &[]);
    assert_eq!(code(&out), 0);
    assert_eq!(status_of(&doc, "fabric.rdma"), "warn");
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "mlx5_2/1 runs at 200 Gb/sec (4X HDR), mlx5_0/1 at 400 Gb/sec (4X NDR)"
    );
    assert!(text_field(&doc, "fabric.rdma", "hint").contains("`mlxlink -d mlx5_2 -p 1`"));
}

#[test]
fn roce_without_a_v2_gid_and_with_a_small_mtu_warns() {
    let (_, doc) = rdma("roce_no_v2", &[]);
    assert_eq!(status_of(&doc, "fabric.rdma"), "warn");
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "mlx5_0/1 (RoCE) has no RoCE v2 GID with an IP address; mlx5_0/1 (RoCE) runs over \
         ens1f0np0 with MTU 1500: RoCE frames smaller than 4096 bytes"
    );
    let hint = text_field(&doc, "fabric.rdma", "hint");
    assert!(
        hint.contains("give ens1f0np0 an IP address") && hint.contains("mtu 9000"),
        "{hint}"
    );
    let (_, doc) = rdma("roce_ok", &[]);
    assert_eq!(status_of(&doc, "fabric.rdma"), "pass");
}

#[test]
fn nccl_ib_hca_naming_a_missing_device_fails() {
    let out = gpucheck()
        .env("GPUCHECK_SYSFS_ROOT", fixture("sysfs/ndr_active"))
        .env("NCCL_IB_HCA", "=mlx5_0,mlx5_9:1")
        .args(["--only", "fabric.rdma", "--format", "json"])
        .output()
        .expect("run");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(code(&out), 1);
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "NCCL_IB_HCA names mlx5_9:1, which matches no RDMA port (this machine has mlx5_0/1, \
         mlx5_1/1, mlx5_2/1, mlx5_3/1)"
    );
}

#[test]
fn no_rdma_in_a_multi_node_run_on_h100s_warns() {
    let empty = tempfile::tempdir().expect("tempdir");
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", fixture("nvml/h100x8.scenario"))
        .env("GPUCHECK_SYSFS_ROOT", empty.path())
        .env("WORLD_SIZE", "16")
        .env("LOCAL_WORLD_SIZE", "8")
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--only", "fabric.rdma", "--format", "json"])
        .output()
        .expect("run");
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(status_of(&doc, "fabric.rdma"), "warn");
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "no RDMA devices in a multi-node run (WORLD_SIZE=16 > LOCAL_WORLD_SIZE=8) on NVIDIA H100 \
         80GB HBM3: NCCL will send the gradients between nodes over TCP sockets, far below what \
         these GPUs need"
    );
}

// ----------------------------------------------------------- fabric.gpudirect

#[test]
fn gpudirect_passes_with_peermem_loaded() {
    let (out, doc) = gpudirect("ndr_active", "proprietary");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        text_field(&doc, "fabric.gpudirect", "summary"),
        "nvidia_peermem is loaded: mlx5_0, mlx5_1, mlx5_2, mlx5_3 can read and write GPU memory directly"
    );
}

#[test]
fn gpudirect_warns_without_peermem_on_the_proprietary_module() {
    let (out, doc) = gpudirect("no_peermem", "proprietary");
    assert_eq!(code(&out), 0);
    assert_eq!(status_of(&doc, "fabric.gpudirect"), "warn");
    let summary = text_field(&doc, "fabric.gpudirect", "summary");
    assert!(
        summary.contains(
            "nvidia_peermem is not loaded, the NVIDIA kernel module is the proprietary one"
        ),
        "{summary}"
    );
    assert!(
        summary.contains("stage inter-node traffic through host memory"),
        "{summary}"
    );
    assert!(text_field(&doc, "fabric.gpudirect", "hint")
        .starts_with("load the peer-memory module: `sudo modprobe nvidia-peermem`"));
}

#[test]
fn gpudirect_passes_through_dma_buf_with_the_open_module() {
    let (_, doc) = gpudirect("no_peermem", "open");
    assert_eq!(status_of(&doc, "fabric.gpudirect"), "pass");
    assert!(text_field(&doc, "fabric.gpudirect", "summary")
        .starts_with("DMA-BUF: kernel 6.8.0-45-generic, open GPU kernel module 570.86.15"));
}

#[test]
fn gpudirect_skips_without_nvidia_gpus() {
    let (_, doc) = run(
        "fabric.gpudirect",
        "zero_gpus",
        &[("GPUCHECK_SYSFS_ROOT", fixture("sysfs/ndr_active"))],
        &[],
    );
    assert_eq!(status_of(&doc, "fabric.gpudirect"), "skip");
    assert_eq!(
        text_field(&doc, "fabric.gpudirect", "summary"),
        "no NVIDIA GPUs: GPUDirect RDMA does not apply"
    );
}

// ------------------------------------------------------------- this machine

#[test]
fn on_a_machine_without_rdma_the_fabric_checks_skip_or_pass_with_reasons() {
    let empty = tempfile::tempdir().expect("tempdir");
    let out = gpucheck()
        .env("GPUCHECK_SYSFS_ROOT", empty.path())
        .args(["--only", "fabric", "--format", "json", "--profile", "quick"])
        .output()
        .expect("run");
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(
        text_field(&doc, "fabric.rdma", "summary"),
        "no RDMA devices: NCCL will use TCP sockets between nodes"
    );
    assert_eq!(status_of(&doc, "fabric.rdma"), "skip");
    assert_eq!(status_of(&doc, "fabric.gpudirect"), "skip");
    assert!(text_field(&doc, "fabric.gpudirect", "summary").starts_with("no RDMA devices"));
    // This machine's kernel log is readable (pass, naming where from) or not
    // (skip, saying how to give access); a real Xid here would be news.
    let xid = status_of(&doc, "fabric.xid");
    let summary = text_field(&doc, "fabric.xid", "summary");
    match xid.as_str() {
        "pass" => assert!(summary.contains("since boot (read from "), "{summary}"),
        "skip" => {
            assert!(summary.starts_with("no readable kernel log"), "{summary}");
            assert!(text_field(&doc, "fabric.xid", "hint").contains("--kernel-log"));
        }
        other => panic!("fabric.xid is {other} on this machine: {summary}"),
    }
}

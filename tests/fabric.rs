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
        summary.contains("GPU 3: Xid 48 (double-bit ECC error) once, last at 3022.9 s after boot"),
        "{summary}"
    );
    assert!(
        summary.contains("GPU 7: Xid 119 (GSP RPC timeout) once"),
        "{summary}"
    );
    let hint = text_field(&doc, "fabric.xid", "hint");
    assert!(
        hint.starts_with("reset GPUs 3, 7 while no job uses it (`nvidia-smi -r -i 3,7`)"),
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
    assert!(summary.contains("noted: Xid 63 (ECC page retirement or row remapping recorded) once, last at 4409.1 s after boot, on 00000000:18:00.0"), "{summary}");
    assert!(
        summary.contains("Xid 92 (high single-bit ECC error rate)"),
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

//! nccl.nic_path through the real binary against the fake libcuda (host
//! memory) and the fake NCCL (sums host memory): the all-reduce again with
//! NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, verified and reported beside
//! nccl.allreduce's figure.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A Python "environment" with no site-packages, so only --nccl-lib counts.
fn empty_python(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let py = dir.join("bin/python");
    std::fs::create_dir_all(py.parent().expect("a folder")).expect("mkdir");
    std::fs::write(&py, "#!/bin/sh\nexit 0\n").expect("write");
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    py
}

/// nccl.library, nccl.allreduce and nccl.nic_path against the fakes, with
/// `envs` added; the JSON report.
fn run(envs: &[(&str, &str)]) -> Value {
    let cuda = common::build_fixture_lib("fake_cuda.c", "cuda", "libcuda.so.1");
    let nccl = common::build_fixture_lib("fake_nccl.c", "nccl", "libnccl.so.2");
    let home = tempfile::tempdir().expect("tempdir");
    let py = empty_python(home.path());
    let out = common::gpucheck()
        .env("LD_LIBRARY_PATH", cuda.parent().expect("a folder"))
        .env("HOME", home.path())
        .envs(envs.iter().copied())
        .args(["--only", "nccl.library,nccl.allreduce,nccl.nic_path"])
        .arg("--nccl-lib")
        .arg(&nccl)
        .arg("--python")
        .arg(&py)
        .args(["--format", "json", "--color", "never"])
        .output()
        .expect("run gpucheck");
    common::assert_valid_json_report(&common::stdout(&out))
}

#[test]
fn a_network_error_on_the_nic_path_is_reported_in_nccls_words() {
    // The error comes only on NCCL's network transport: the NVLink/P2P
    // all-reduce passes, the network one fails with NCCL's own account
    // instead of hanging in cuStreamSynchronize until the timeout.
    let doc = run(&[("FAKE_NCCL_SCENARIO", "net_peer_error")]);
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert_eq!(common::status_of(&doc, "nccl.nic_path"), "fail", "{doc:#}");
    let summary = common::text_field(&doc, "nccl.nic_path", "summary");
    assert!(
        summary.starts_with(
            "ncclAllReduce 256 MiB (warm-up) failed: remote process exited or there was a \
             network error (NET/IB : Got completion from peer"
        ),
        "{summary}"
    );
}

#[test]
fn the_network_path_all_reduce_is_verified_and_reported_beside_nvlink() {
    let doc = run(&[]);
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert_eq!(common::status_of(&doc, "nccl.nic_path"), "pass", "{doc:#}");
    let summary = common::text_field(&doc, "nccl.nic_path", "summary");
    assert!(summary.starts_with("busbw "), "{summary}");
    assert!(
        summary.contains(
            " GB/s at 256 MiB over 2 GPUs with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (NVLink/P2P \
             path: "
        ),
        "{summary}"
    );
    assert!(summary.ends_with(" GB/s), results verified"), "{summary}");
    let child = format!("{} __child nccl.nic_path", common::bin().display());
    assert!(common::processes_matching(&child).is_empty());
}

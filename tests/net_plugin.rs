//! fabric.net_plugin through the real binary: an AWS EFA device in a fixture
//! tree standing for /sys (GPUCHECK_SYSFS_ROOT), a tiny fake plugin library
//! (tests/fixtures/fake_nccl_net.c, exporting `ncclNetPlugin_v8`) found
//! through LD_LIBRARY_PATH the way NCCL finds it, or no plugin at all.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{assert_valid_json_report, build_fixture_lib, gpucheck, root, stdout, text_field};
use serde_json::Value;

fn sysfs(tree: &str) -> PathBuf {
    let p = root().join("tests/fixtures/sysfs").join(tree);
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// The fake plugin built as `soname`; its folder.
fn plugin_dir(soname: &str) -> PathBuf {
    let lib = build_fixture_lib("fake_nccl_net.c", "nccl-net", soname);
    lib.parent().expect("a folder").to_path_buf()
}

fn run(tree: &str, envs: &[(&str, String)]) -> (Output, Value) {
    let out = gpucheck()
        .env("GPUCHECK_SYSFS_ROOT", sysfs(tree))
        .env_remove("LD_LIBRARY_PATH")
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .args(["--only", "fabric.net_plugin", "--format", "json"])
        .args(["--color", "never"])
        .output()
        .expect("run gpucheck");
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

fn field(doc: &Value, name: &str) -> String {
    text_field(doc, "fabric.net_plugin", name)
}

#[test]
fn an_efa_host_with_its_plugin_on_the_loader_path_passes() {
    let dir = plugin_dir("libnccl-net.so");
    let (out, doc) = run("efa", &[("LD_LIBRARY_PATH", dir.display().to_string())]);
    assert_eq!(field(&doc, "status"), "pass", "{doc}");
    assert_eq!(
        field(&doc, "summary"),
        format!(
            "{} loads for EFA devices rdmap16s27: plugin \"FakeLibfabric\", ncclNetPlugin_v8",
            dir.join("libnccl-net.so").display()
        )
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn an_efa_host_without_a_plugin_fails_naming_the_fallback() {
    let (out, doc) = run("efa", &[]);
    assert_eq!(field(&doc, "status"), "fail", "{doc}");
    assert_eq!(
        field(&doc, "summary"),
        "EFA devices rdmap16s27, but no libnccl-net.so on the loader's path: NCCL will fall \
         back to TCP sockets"
    );
    assert!(field(&doc, "hint").contains("aws-ofi-nccl"), "{doc}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn nccl_net_plugin_names_the_library_nccl_loads() {
    let dir = plugin_dir("libnccl-net-fake.so");
    let (_, doc) = run(
        "ndr_active",
        &[
            ("LD_LIBRARY_PATH", dir.display().to_string()),
            ("NCCL_NET_PLUGIN", "fake".into()),
        ],
    );
    assert_eq!(field(&doc, "status"), "pass", "{doc}");
    assert!(
        field(&doc, "summary").contains("libnccl-net-fake.so loads for NCCL_NET_PLUGIN=\"fake\""),
        "{doc}"
    );
    let (_, doc) = run("ndr_active", &[("NCCL_NET_PLUGIN", "absent".into())]);
    assert_eq!(field(&doc, "status"), "fail", "{doc}");
    assert!(
        field(&doc, "summary").contains("no libnccl-net-absent.so, absent on the loader's path"),
        "{doc}"
    );
}

#[test]
fn a_host_that_needs_no_plugin_skips_with_the_reason() {
    let (out, doc) = run("ndr_active", &[]);
    assert_eq!(field(&doc, "status"), "skip", "{doc}");
    assert!(
        field(&doc, "summary").starts_with("no network that needs an NCCL plugin"),
        "{doc}"
    );
    // Named with --only and skipped: nothing verified, so not ready.
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(doc["unverified"], serde_json::json!(["fabric.net_plugin"]));
}

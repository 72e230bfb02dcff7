//! `scripts/release.sh` as a newcomer runs it: with every target it takes
//! over 15 minutes, so before anything is built it says how to build one.
//! Run here with a PATH that has no cargo, so it stops right after.

mod common;

use std::process::Command;

fn release(targets: Option<&str>) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new("bash");
    cmd.arg(common::root().join("scripts/release.sh"))
        .arg(dir.path())
        .env("PATH", "/usr/bin:/bin")
        .env_remove("GPUCHECK_RELEASE_TARGETS");
    if let Some(t) = targets {
        cmd.env("GPUCHECK_RELEASE_TARGETS", t);
    }
    cmd.output().expect("bash runs")
}

#[test]
fn every_target_says_how_to_build_one_first() {
    let out = release(None);
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("release.sh: building every target (")
            && first.contains("over 15 minutes")
            && first.contains(&format!(
                "GPUCHECK_RELEASE_TARGETS={}-unknown-linux-gnu bash scripts/release.sh",
                std::env::consts::ARCH
            )),
        "{err}"
    );
    let out = release(Some("x86_64-unknown-linux-gnu"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("building every target"), "{err}");
}

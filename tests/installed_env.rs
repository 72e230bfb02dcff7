//! `pip install gpucheck` into the training venv puts the binary in
//! `<venv>/bin/`; run from there without activating the venv (no
//! $VIRTUAL_ENV), it judges the Python beside it, not python3 on PATH.

mod common;

use std::path::Path;

use common::{bin, root, stderr, venv_python};

/// The binary placed in `venv/bin/` (a hard link where it can be, as pip's
/// copy would be).
fn install_into(venv: &Path) {
    let target = venv.join("bin/gpucheck");
    if std::fs::hard_link(bin(), &target).is_err() {
        std::fs::copy(bin(), &target).expect("copy gpucheck into the venv");
    }
}

/// The Python torch.import judged, run as `exe` with a bare environment
/// (no $VIRTUAL_ENV, $CONDA_PREFIX or --python; the system's PATH).
fn torch_import_python(exe: &Path) -> (String, String) {
    let out = std::process::Command::new(exe)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .args(["--only", "torch.import", "--json", "-"])
        .output()
        .expect("run the venv's gpucheck");
    let doc = common::assert_valid_json_report(&common::stdout(&out));
    let result = common::result(&doc, "torch.import");
    let python = result["facts"]["python"].as_str().unwrap_or("").to_string();
    (python, stderr(&out))
}

#[test]
fn gpucheck_in_a_venv_judges_that_venvs_python_without_activation() {
    // Under target/, so the hard link stays on one file system.
    let dir = tempfile::tempdir_in(root().join("target")).expect("tempdir");
    let venv = dir.path().join("train-venv");
    let made = std::process::Command::new(venv_python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python -m venv");
    assert!(made.success(), "python -m venv failed");
    install_into(&venv);
    let (python, err) = torch_import_python(&venv.join("bin/gpucheck"));
    assert_eq!(
        python,
        venv.join("bin/python").display().to_string(),
        "{err}"
    );
}

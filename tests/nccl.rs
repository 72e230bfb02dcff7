//! The nccl checks through the real binary: nccl.library against the real
//! libnccl.so.2 of the test virtual environment's PyPI wheel and against a
//! fake one (tests/fixtures/fake_nccl.c), nccl.env against this machine's
//! real network interfaces, and nccl.allreduce end to end against the fake
//! libcuda (tests/fixtures/fake_cuda.c, host-memory backed) plus the fake
//! NCCL that really sums: verification, timing, busbw, a wrong result, and a
//! hang in ncclCommInitAll killed at the timeout.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The fake libnccl.so.2, in its own folder.
fn fake_nccl() -> PathBuf {
    common::build_fixture_lib("fake_nccl.c", "nccl", "libnccl.so.2")
}

/// A Python "environment" with no site-packages at all: an executable in an
/// otherwise empty prefix, so no wheel copy of NCCL is found.
fn empty_python(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let py = dir.join("bin/python");
    std::fs::create_dir_all(py.parent().unwrap()).unwrap();
    std::fs::write(&py, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    py
}

/// gpucheck with a scrubbed environment, no LD_LIBRARY_PATH and a private
/// HOME (no ~/.nccl.conf), reporting JSON on stdout.
fn run(args: &[&str], envs: &[(&str, &str)]) -> (Output, Value) {
    let home = tempfile::tempdir().unwrap();
    let mut cmd: Command = common::gpucheck();
    cmd.env_remove("LD_LIBRARY_PATH")
        .env("HOME", home.path())
        .args(args)
        .args(["--json", "-"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run gpucheck");
    let text = common::stdout(&out);
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{text}\nstderr:\n{}",
            common::stderr(&out)
        )
    });
    (out, doc)
}

fn summary<'a>(doc: &'a Value, id: &str) -> &'a str {
    common::result(doc, id)["summary"].as_str().unwrap_or("")
}

fn hint<'a>(doc: &'a Value, id: &str) -> &'a str {
    common::result(doc, id)["hint"].as_str().unwrap_or("")
}

fn fact<'a>(doc: &'a Value, id: &str, key: &str) -> &'a str {
    common::result(doc, id)["facts"][key].as_str().unwrap_or("")
}

/// The NCCL version pip installed into the venv, from the wheel's
/// dist-info folder name (nvidia_nccl_cu13-2.30.7.dist-info): a source
/// independent of ncclGetVersion.
fn wheel_nccl_version(python: &Path) -> Option<(PathBuf, String)> {
    let prefix = python.parent()?.parent()?;
    for lib in std::fs::read_dir(prefix.join("lib")).ok()?.flatten() {
        let sp = lib.path().join("site-packages");
        let Ok(entries) = std::fs::read_dir(&sp) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name
                .strip_prefix("nvidia_nccl_cu")
                .and_then(|r| r.strip_suffix(".dist-info"))
            {
                let version = rest.split_once('-')?.1.to_string();
                return Some((sp.join("nvidia/nccl/lib/libnccl.so.2"), version));
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------
// nccl.library
// ---------------------------------------------------------------------------

#[test]
fn library_reads_the_real_wheel_nccl_of_the_venv() {
    let py = common::venv_python();
    let (wheel_lib, version) =
        wheel_nccl_version(&py).expect("the test venv has the nvidia-nccl wheel torch needs");
    let (out, doc) = run(
        &["--only", "nccl.library", "--python", py.to_str().unwrap()],
        &[],
    );
    assert_eq!(common::status_of(&doc, "nccl.library"), "pass", "{doc:#}");
    assert_eq!(out.status.code(), Some(0));
    common::assert_valid_json_report(&common::stdout(&out));
    // The wheel's copy is listed with the version pip installed.
    let rows = common::result(&doc, "nccl.library")["tables"][0]["rows"]
        .as_array()
        .unwrap()
        .clone();
    let wheel_real = wheel_lib.canonicalize().unwrap();
    let row = rows
        .iter()
        .find(|r| {
            r[3].as_str()
                .unwrap_or("")
                .contains(&*wheel_real.to_string_lossy())
        })
        .unwrap_or_else(|| panic!("the wheel's libnccl is not listed: {rows:#?}"));
    assert_eq!(row[1], version.as_str());
    assert_eq!(row[2], "Python wheel (site-packages/nvidia)");
    // With nothing on LD_LIBRARY_PATH and no system NCCL, it is the one used.
    if rows.len() == 1 {
        assert_eq!(fact(&doc, "nccl.library", "nccl_version"), version);
        assert_eq!(row[0], "*");
        assert!(
            summary(&doc, "nccl.library").starts_with(&format!("NCCL {version} from ")),
            "{}",
            summary(&doc, "nccl.library")
        );
    }
}

#[test]
fn library_decodes_both_version_encodings_of_an_explicit_copy() {
    let lib = fake_nccl();
    let dir = tempfile::tempdir().unwrap();
    let py = empty_python(dir.path());
    for (code, text) in [("2804", "2.8.4"), ("22707", "2.27.7"), ("20906", "2.9.6")] {
        let (out, doc) = run(
            &[
                "--only",
                "nccl.library",
                "--nccl-lib",
                lib.to_str().unwrap(),
                "--python",
                py.to_str().unwrap(),
            ],
            &[("FAKE_NCCL_VERSION", code)],
        );
        assert_eq!(common::status_of(&doc, "nccl.library"), "pass", "{doc:#}");
        assert_eq!(out.status.code(), Some(0));
        assert!(
            summary(&doc, "nccl.library").starts_with(&format!(
                "NCCL {text} from {} (given explicitly)",
                lib.display()
            )),
            "{}",
            summary(&doc, "nccl.library")
        );
        assert_eq!(fact(&doc, "nccl.library", "nccl_version"), text);
    }
}

#[test]
fn library_given_as_a_missing_path_fails() {
    let (out, doc) = run(
        &[
            "--only",
            "nccl.library",
            "--nccl-lib",
            "/nonexistent/libnccl.so.2",
        ],
        &[],
    );
    assert_eq!(common::status_of(&doc, "nccl.library"), "fail");
    assert_eq!(
        summary(&doc, "nccl.library"),
        "--nccl-lib /nonexistent/libnccl.so.2 is not a file"
    );
    assert_eq!(out.status.code(), Some(1));
    // GPUCHECK_NCCL_LIB is the same setting.
    let (_, doc) = run(
        &["--only", "nccl.library"],
        &[("GPUCHECK_NCCL_LIB", "/nonexistent/libnccl.so.2")],
    );
    assert_eq!(common::status_of(&doc, "nccl.library"), "fail");
}

#[test]
fn library_that_is_not_a_working_nccl_fails() {
    let lib = fake_nccl();
    let (out, doc) = run(
        &[
            "--only",
            "nccl.library",
            "--nccl-lib",
            lib.to_str().unwrap(),
        ],
        &[("FAKE_NCCL_SCENARIO", "no_version")],
    );
    assert_eq!(common::status_of(&doc, "nccl.library"), "fail", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.library"),
        format!(
            "--nccl-lib {} is not a usable NCCL: ncclGetVersion returned error 3",
            lib.display()
        )
    );
    assert_eq!(out.status.code(), Some(1));
}

/// Whether this machine has an NCCL outside any Python environment (a GPU
/// host with libnccl2 installed): then "none found" cannot be produced.
fn system_nccl_present() -> bool {
    let in_cache = Command::new("sh")
        .args(["-c", "ldconfig -p 2>/dev/null | grep -q 'libnccl\\.so'"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let in_dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/cuda/lib64",
    ]
    .iter()
    .any(|d| Path::new(d).join("libnccl.so.2").exists());
    in_cache || in_dirs
}

#[test]
fn no_nccl_anywhere_fails_with_the_install_hint() {
    // The none-found verdict exists only on a host without a system NCCL (CI
    // is one); elsewhere this test fails rather than pass untested.
    assert!(
        !system_nccl_present(),
        "this test needs a host without a system libnccl.so.2 (CI is one), and this one has one"
    );
    let dir = tempfile::tempdir().unwrap();
    let py = empty_python(dir.path());
    let (out, doc) = run(
        &["--only", "nccl.library", "--python", py.to_str().unwrap()],
        &[],
    );
    assert_eq!(common::status_of(&doc, "nccl.library"), "fail", "{doc:#}");
    assert!(
        summary(&doc, "nccl.library").starts_with("no libnccl.so.2 found"),
        "{}",
        summary(&doc, "nccl.library")
    );
    let h = hint(&doc, "nccl.library");
    assert!(h.contains("pip install nvidia-nccl-cu12"), "{h}");
    assert!(h.contains("apt install libnccl2"), "{h}");
    assert!(h.contains("--nccl-lib"), "{h}");
    assert_eq!(out.status.code(), Some(1));
}

/// pyenv's layout without torch: `shims/python3` runs
/// `versions/3.11.7/bin/python3`, which names itself (`sys.executable`) when
/// asked where it is, and has no torch. Returns (shim, the real interpreter).
fn pyenv_shim_without_torch(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let env = dir.join("versions/3.11.7");
    let real = env.join("bin/python3");
    std::fs::create_dir_all(env.join("lib/python3.11/site-packages")).unwrap();
    std::fs::create_dir_all(real.parent().unwrap()).unwrap();
    std::fs::write(&real, "#!/bin/sh\nexit 0\n").unwrap();
    let shim = dir.join("shims/python3");
    std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
    let (env, real_s) = (env.display(), real.display());
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\n\
             case \"$*\" in\n\
             *-c*) echo 'GPUCHECK_PREFIX {env}'; echo 'GPUCHECK_EXECUTABLE {real_s}' ;;\n\
             *) echo 'GPUCHECK_TORCH_INFO {{\"python\": \"{real_s}\", \"not_installed\": true, \
             \"import_error\": \"ModuleNotFoundError: No module named torch\"}}' ;;\n\
             esac\n"
        ),
    )
    .unwrap();
    for p in [&shim, &real] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (shim, real)
}

#[test]
fn without_torch_every_check_names_the_python_alike_and_nccl_skips_naming_torch_import() {
    assert!(
        !system_nccl_present(),
        "this test needs a host without a system libnccl.so.2 (CI is one), and this one has one"
    );
    let dir = tempfile::tempdir().unwrap();
    let (shim, real) = pyenv_shim_without_torch(dir.path());
    let (out, doc) = run(
        &[
            "--only",
            "torch.import,nccl.library",
            "--python",
            shim.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let real = real.display().to_string();
    // torch.import and nccl.library name the interpreter the shim runs.
    assert!(
        summary(&doc, "torch.import").starts_with(&format!("torch is not installed for {real} (")),
        "{}",
        summary(&doc, "torch.import")
    );
    assert!(
        summary(&doc, "nccl.library").contains(&format!("{real}'s site-packages)")),
        "{}",
        summary(&doc, "nccl.library")
    );
    let shim = shim.display().to_string();
    for id in ["torch.import", "nccl.library"] {
        assert!(
            !summary(&doc, id).contains(&shim),
            "{id}: {}",
            summary(&doc, id)
        );
        assert!(!hint(&doc, id).contains(&shim), "{id}: {}", hint(&doc, id));
    }
    // NCCL comes with torch: install torch, with torch.import's own command,
    // not an NCCL wheel for a CUDA version nothing here has.
    let install = hint(&doc, "torch.import")
        .split('`')
        .nth(1)
        .expect("torch.import's hint quotes its command")
        .to_string();
    assert!(
        install.starts_with(&format!("{real} -m pip install torch")),
        "{install}"
    );
    // One cause, counted once: torch.import fails with that command, and
    // nccl.library, which found no NCCL where torch would bring one, skips
    // naming it rather than failing a second time with the same fix.
    assert_eq!(common::status_of(&doc, "nccl.library"), "skip", "{doc:#}");
    assert!(
        summary(&doc, "nccl.library").contains("not judged while torch.import finds no torch"),
        "{}",
        summary(&doc, "nccl.library")
    );
    assert_eq!(doc["counts"]["fail"], 1, "{doc:#}");
}

// ---------------------------------------------------------------------------
// nccl.env, against this machine's interfaces (`lo` always exists)
// ---------------------------------------------------------------------------

fn env_check(envs: &[(&str, &str)]) -> (Output, Value) {
    run(&["--only", "nccl.env"], envs)
}

#[test]
fn env_with_no_settings_passes() {
    let (out, doc) = env_check(&[]);
    assert_eq!(common::status_of(&doc, "nccl.env"), "pass");
    assert_eq!(
        summary(&doc, "nccl.env"),
        "no NCCL_* variables set; NCCL chooses its defaults"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn env_socket_ifname_forms_against_real_interfaces() {
    for ok in [
        "lo",
        "l",
        "=lo",
        "=lo,gpucheck-none0",
        "^gpucheck-none",
        "^=gpucheck-none0",
    ] {
        let (out, doc) = env_check(&[("NCCL_SOCKET_IFNAME", ok)]);
        assert_eq!(
            common::status_of(&doc, "nccl.env"),
            "pass",
            "NCCL_SOCKET_IFNAME={ok}: {}",
            summary(&doc, "nccl.env")
        );
        assert_eq!(out.status.code(), Some(0));
    }
    for bad in ["gpucheck-none0", "=l", "=lo0"] {
        let (out, doc) = env_check(&[("NCCL_SOCKET_IFNAME", bad)]);
        assert_eq!(common::status_of(&doc, "nccl.env"), "fail", "{bad}");
        let s = summary(&doc, "nccl.env");
        assert!(
            s.starts_with(&format!(
                "NCCL_SOCKET_IFNAME={bad} matches no network interface"
            )),
            "{s}"
        );
        assert!(s.contains("this host has: ") && s.contains("lo"), "{s}");
        assert!(hint(&doc, "nccl.env").contains("fails or hangs at init"));
        assert_eq!(out.status.code(), Some(1));
    }
}

/// Whether the real NCCL (the venv wheel's libnccl.so.2) finds a socket
/// interface to bootstrap over with this NCCL_SOCKET_IFNAME: ncclGetUniqueId
/// runs NCCL's own interface search and needs no GPU.
fn real_nccl_finds_an_interface(lib: &Path, ifname: &str) -> bool {
    let home = tempfile::tempdir().unwrap();
    let script = "import ctypes, sys\n\
                  lib = ctypes.CDLL(sys.argv[1])\n\
                  sys.exit(lib.ncclGetUniqueId(ctypes.create_string_buffer(128)))\n";
    let mut cmd = Command::new(common::venv_python());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NCCL_") {
            cmd.env_remove(&k);
        }
    }
    let out = cmd
        .env("HOME", home.path())
        .env("NCCL_SOCKET_IFNAME", ifname)
        .args(["-c", script])
        .arg(lib)
        .output()
        .expect("run python");
    match out.status.code() {
        Some(0) => true,
        // "Bootstrap : no socket interface found": ncclSystemError,
        // ncclInternalError or ncclInvalidUsage depending on the version.
        Some(2) | Some(3) | Some(5) => false,
        other => panic!(
            "ncclGetUniqueId with NCCL_SOCKET_IFNAME={ifname} ended with {other:?}: {}",
            common::stderr(&out)
        ),
    }
}

#[test]
fn env_socket_ifname_verdicts_agree_with_the_real_nccl() {
    let (lib, _) = wheel_nccl_version(&common::venv_python())
        .expect("the test venv has the nvidia-nccl wheel torch needs");
    let mut values: Vec<String> = [
        "lo",
        "=lo",
        "l",
        "^lo",
        "^=lo",
        "=lo:1",
        "gpucheck-none0",
        "=l",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Every interface of this machine by exact name, including any without
    // an IP address (NCCL skips those).
    for e in std::fs::read_dir("/sys/class/net").unwrap().flatten() {
        values.push(format!("={}", e.file_name().to_string_lossy()));
    }
    for value in &values {
        let (_, doc) = env_check(&[("NCCL_SOCKET_IFNAME", value)]);
        let gpucheck_passes = common::status_of(&doc, "nccl.env") == "pass";
        assert_eq!(
            gpucheck_passes,
            real_nccl_finds_an_interface(&lib, value),
            "NCCL_SOCKET_IFNAME={value}: gpucheck says {}",
            summary(&doc, "nccl.env")
        );
    }
}

#[test]
fn env_excluding_every_interface_fails() {
    // Exclude every interface this machine has, by exact name.
    let names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let value = format!("^={}", names.join(","));
    let (_, doc) = env_check(&[("NCCL_SOCKET_IFNAME", &value)]);
    assert_eq!(common::status_of(&doc, "nccl.env"), "fail", "{value}");
}

#[test]
fn env_nccl_version_from_a_cuda_container_image_is_not_a_typo() {
    // nvidia/cuda images set NCCL_VERSION; NCCL itself never reads it.
    let (out, doc) = env_check(&[("NCCL_VERSION", "2.27.3-1")]);
    assert_eq!(common::status_of(&doc, "nccl.env"), "pass", "{doc:#}");
    assert!(
        summary(&doc, "nccl.env").ends_with(
            "; not read by NCCL: NCCL_VERSION (NVIDIA's CUDA container images, recording the \
             NCCL they install)"
        ),
        "{}",
        summary(&doc, "nccl.env")
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn env_misspelled_name_gets_the_real_one() {
    let (out, doc) = env_check(&[("NCCL_SOCKET_IFACE", "lo")]);
    assert_eq!(common::status_of(&doc, "nccl.env"), "warn");
    assert_eq!(
        summary(&doc, "nccl.env"),
        "NCCL_SOCKET_IFACE: did you mean NCCL_SOCKET_IFNAME?"
    );
    assert!(hint(&doc, "nccl.env").contains("NCCL ignores variables it does not know"));
    // A warning alone keeps the exit code 0...
    assert_eq!(out.status.code(), Some(0));
    // ...and makes it 1 under --strict.
    let (out, _) = run(
        &["--only", "nccl.env", "--strict"],
        &[("NCCL_SOCKET_IFACE", "lo")],
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn env_reads_nccl_conf_file() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nccl.conf");
    std::fs::write(
        &conf,
        "# site settings\nNCCL_SOCKET_IFNAME==gpucheck-none0\n",
    )
    .unwrap();
    let (out, doc) = env_check(&[("NCCL_CONF_FILE", conf.to_str().unwrap())]);
    assert_eq!(common::status_of(&doc, "nccl.env"), "fail", "{doc:#}");
    assert!(
        summary(&doc, "nccl.env").starts_with(&format!(
            "NCCL_SOCKET_IFNAME==gpucheck-none0 (from {}) matches no network interface",
            conf.display()
        )),
        "{}",
        summary(&doc, "nccl.env")
    );
    assert_eq!(out.status.code(), Some(1));
    common::assert_valid_json_report(&common::stdout(&out));
    // The environment wins over the file.
    let (_, doc) = env_check(&[
        ("NCCL_CONF_FILE", conf.to_str().unwrap()),
        ("NCCL_SOCKET_IFNAME", "lo"),
    ]);
    assert_eq!(common::status_of(&doc, "nccl.env"), "pass", "{doc:#}");
}

#[test]
fn env_runs_in_the_quick_profile() {
    let (_, doc) = run(&["--profile", "quick"], &[("NCCL_P2P_DISABLE", "1")]);
    assert_eq!(common::status_of(&doc, "nccl.env"), "warn");
    assert_eq!(
        summary(&doc, "nccl.env"),
        "NCCL_P2P_DISABLE=1 turns off direct GPU-to-GPU transfers"
    );
    let ids: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert!(!ids.contains(&"nccl.allreduce") && !ids.contains(&"nccl.library"));
}

#[test]
fn env_reads_the_hcas_from_the_same_sysfs_as_fabric_rdma() {
    // GPUCHECK_SYSFS_ROOT stands for /sys for every check: nccl.env and
    // fabric.rdma judge the same four NDR ports of the fixture tree, not
    // this machine's (which has none).
    let tree = common::root().join("tests/fixtures/sysfs/ndr_active");
    let tree = tree.to_str().unwrap();
    let (_, doc) = run(
        &["--only", "nccl.env,fabric.rdma"],
        &[
            ("GPUCHECK_SYSFS_ROOT", tree),
            ("NCCL_IB_HCA", "mlx5_0,mlx5_1"),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.env"), "pass", "{doc:#}");
    assert_eq!(common::status_of(&doc, "fabric.rdma"), "pass", "{doc:#}");
    let (out, doc) = run(
        &["--only", "nccl.env,fabric.rdma"],
        &[("GPUCHECK_SYSFS_ROOT", tree), ("NCCL_IB_HCA", "=mlx5_9")],
    );
    assert_eq!(common::status_of(&doc, "nccl.env"), "fail", "{doc:#}");
    let s = summary(&doc, "nccl.env");
    assert!(
        s.contains("selects none of this host's HCA ports") && s.contains("mlx5_3:1"),
        "{s}"
    );
    assert_eq!(out.status.code(), Some(1));
}

// ---------------------------------------------------------------------------
// nccl.allreduce without a driver
// ---------------------------------------------------------------------------

fn libcuda_present() -> bool {
    Command::new("sh")
        .args(["-c", "ldconfig -p 2>/dev/null | grep -q 'libcuda\\.so\\.1'"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn allreduce_on_this_machines_gpus_with_the_venvs_nccl_passes() {
    // The counterpart of the no-driver test on a GPU host: the real driver
    // and the test venv's NCCL wheel run and verify the all-reduce.
    let py = common::venv_python();
    let (out, doc) = run(
        &[
            "--only",
            "cuda.driver,nccl.library,nccl.allreduce",
            "--python",
            py.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert!(
        summary(&doc, "nccl.allreduce").contains("results verified"),
        "{doc:#}"
    );
    assert_eq!(out.status.code(), Some(0), "{doc:#}");
}

#[test]
fn allreduce_without_a_driver_skips() {
    // The no-driver skip exists only on a host without libcuda.so.1 (CI is
    // one); elsewhere this test fails rather than pass untested.
    assert!(
        !libcuda_present(),
        "this test needs a host without an NVIDIA driver (CI is one), and this one has \
         libcuda.so.1; on GPU hosts use scripts/gpu-smoke.sh"
    );
    let (out, doc) = run(
        &[
            "--only",
            "nccl.allreduce",
            "--python",
            common::venv_python().to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "skip", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        "no NVIDIA driver: libcuda.so.1 cannot be loaded, so there is no GPU to run NCCL on"
    );
    // Named with --only and skipped: nothing verified, so not ready.
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(doc["unverified"], serde_json::json!(["nccl.allreduce"]));
}

#[test]
fn library_differing_from_torchs_nccl_warns() {
    // torch.nccl reports the venv's real NCCL; --nccl-lib puts an older one first.
    let py = common::venv_python();
    let (_, version) = wheel_nccl_version(&py).expect("the venv has the NCCL wheel");
    let lib = fake_nccl();
    let (out, doc) = run(
        &[
            "--only",
            "torch.import,torch.nccl,nccl.library",
            "--python",
            py.to_str().unwrap(),
            "--nccl-lib",
            lib.to_str().unwrap(),
        ],
        &[("FAKE_NCCL_VERSION", "2804")],
    );
    assert_eq!(fact(&doc, "torch.nccl", "nccl_version"), version, "{doc:#}");
    assert_eq!(common::status_of(&doc, "nccl.library"), "warn", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.library"),
        format!(
            "libnccl.so.2 found first is NCCL 2.8.4 ({}), but torch reports NCCL {version}",
            lib.display()
        )
    );
    assert!(hint(&doc, "nccl.library").contains("nvidia/nccl/lib first on LD_LIBRARY_PATH"));
    assert_eq!(out.status.code(), Some(0));
}

// ---------------------------------------------------------------------------
// nccl.allreduce end to end: fake libcuda (host memory) + fake NCCL (sums)
// ---------------------------------------------------------------------------

/// The all-reduce tests look for leftover `__child nccl.allreduce`
/// processes, so they run one at a time.
static ALLREDUCE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Two H100s with 96 MiB each: 32 MiB buffers fit, 256 MiB do not, which
/// keeps the fake's host memory and time small.
const SMALL_GPUS: &str = "NVIDIA H100 80GB HBM3, 9.0, 96;NVIDIA H100 80GB HBM3, 9.0, 96";

/// Run `checks` (the all-reduce and any others) against the fakes: the fake
/// libcuda on LD_LIBRARY_PATH, the fake NCCL as --nccl-lib unless `args`
/// name another.
fn allreduce(checks: &str, args: &[&str], envs: &[(&str, &str)]) -> (Output, Value) {
    let _one_at_a_time = ALLREDUCE.lock().unwrap_or_else(|e| e.into_inner());
    let cuda = common::build_fixture_lib("fake_cuda.c", "cuda", "libcuda.so.1");
    let cuda_dir = cuda.parent().unwrap().to_str().unwrap().to_string();
    let nccl = fake_nccl();
    let dir = tempfile::tempdir().unwrap();
    let py = empty_python(dir.path());
    let mut all_args = vec!["--only", checks, "--python", py.to_str().unwrap()];
    if !args.contains(&"--nccl-lib") {
        all_args.extend(["--nccl-lib", nccl.to_str().unwrap()]);
    }
    all_args.extend_from_slice(args);
    let mut all_envs = vec![("LD_LIBRARY_PATH", cuda_dir.as_str())];
    all_envs.extend_from_slice(envs);
    let result = run(&all_args, &all_envs);
    // This build's binary only: another checkout's test suite on the same
    // machine may be running its own all-reduce child right now.
    let child = format!("{} __child nccl.allreduce", common::bin().display());
    let left = common::processes_matching(&child);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    result
}

fn table_rows(doc: &Value, id: &str) -> Vec<Vec<String>> {
    common::result(doc, id)["tables"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap_or("").to_string())
                .collect()
        })
        .collect()
}

#[test]
fn allreduce_healthy_two_gpus_runs_verifies_and_reports_busbw() {
    // The fake libcuda's default: two H100 80GB, so the standard 256 MiB runs.
    let (out, doc) = allreduce("cuda.driver,nccl.library,nccl.allreduce", &[], &[]);
    assert_eq!(common::status_of(&doc, "cuda.driver"), "pass", "{doc:#}");
    assert_eq!(common::status_of(&doc, "nccl.library"), "pass", "{doc:#}");
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(s.starts_with("busbw "), "{s}");
    assert!(
        s.ends_with(
            " GB/s at 256 MiB over 2 GPUs (NCCL 2.27.7), results verified; not judged: no \
             reference figure for 2x NVIDIA H100 80GB HBM3 (set one with --min-busbw GBPS)"
        ),
        "{s}"
    );
    let r = common::result(&doc, "nccl.allreduce");
    let busbw = r["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "busbw_gbps")
        .and_then(|m| m["value"].as_f64())
        .expect("busbw_gbps metric");
    assert!(busbw > 0.0);
    let rows = table_rows(&doc, "nccl.allreduce");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][0], "268435456");
    assert_eq!(rows[0][1], "67108864");
    assert_eq!(rows[0][6], "0");
    let devices = r["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert!(devices.iter().all(|d| d["summary"] == "results verified"));
    assert_eq!(out.status.code(), Some(0));
    common::assert_valid_json_report(&common::stdout(&out));
}

#[test]
fn allreduce_busbw_floor_decides_the_verdict() {
    let devices = [("FAKE_CUDA_DEVICES", SMALL_GPUS)];
    let (out, doc) = allreduce("nccl.allreduce", &["--min-busbw", "1000000"], &devices);
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.contains(" at 32 MiB over 2 GPUs (NCCL 2.27.7), below --min-busbw 1000000.0"),
        "{s}"
    );
    assert!(hint(&doc, "nccl.allreduce").contains("nvidia-smi topo -m"));
    assert_eq!(out.status.code(), Some(1));

    let (out, doc) = allreduce("nccl.allreduce", &["--min-busbw", "0.0001"], &devices);
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert!(summary(&doc, "nccl.allreduce").ends_with("results verified; at least --min-busbw 0.0"));
    assert_eq!(out.status.code(), Some(0));

    // No floor and no room for 256 MiB: measured, shown, not judged.
    let (_, doc) = allreduce("nccl.allreduce", &[], &devices);
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert!(
        summary(&doc, "nccl.allreduce").ends_with(
            "bandwidth not judged: the largest size that fit in free GPU memory was 32 MiB (< 256 \
             MiB)"
        ),
        "{}",
        summary(&doc, "nccl.allreduce")
    );
    assert_eq!(
        fact(&doc, "nccl.allreduce", "sizes_skipped_for_memory"),
        "256 MiB"
    );
}

#[test]
fn allreduce_measures_a_low_figure_again_before_failing() {
    // The fake driver's first event timing (rank 0's first timed loop)
    // reads 1000 ms, every later one 0.001 ms: one noisy reading.
    let devices = ("FAKE_CUDA_DEVICES", SMALL_GPUS);
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--min-busbw", "1"],
        &[devices, ("FAKE_CUDA_ELAPSED_MS", "1000, 0.001")],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.ends_with("at least --min-busbw 1.0; low in 1 of 3 runs (the median counts)"),
        "{s}"
    );
    assert_eq!(out.status.code(), Some(0));
    // Low every time: it fails, and says it was measured three times.
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--min-busbw", "1"],
        &[devices, ("FAKE_CUDA_ELAPSED_MS", "1000")],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.ends_with("below --min-busbw 1.0; low in 3 of 3 runs (the median counts)"),
        "{s}"
    );
    assert_eq!(out.status.code(), Some(1));
}

/// The fake NCCL scenario file `tests/fixtures/nccl/<name>.scenario`.
fn nccl_scenario(name: &str) -> String {
    let p = common::root()
        .join("tests/fixtures/nccl")
        .join(format!("{name}.scenario"));
    assert!(p.exists(), "{} missing", p.display());
    p.to_string_lossy().into_owned()
}

// NCCL before 2.23 with every rank in one process writes into the peers' user
// buffers directly; CUDA pool memory (cuMemAllocAsync, which cudarc's
// alloc_zeros uses where the device supports memory pools) is out of a peer's
// reach unless cuMemPoolSetAccess granted it: an illegal address on a healthy
// machine. The fakes model that (tests/fixtures/fake_nccl.c).

#[test]
fn allreduce_on_nccl_before_2_23_passes_on_healthy_h100s() {
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &[],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_NCCL_VERSION", "22005"),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.contains(" at 32 MiB over 2 GPUs (NCCL 2.20.5), results verified"),
        "{s}"
    );
    assert!(!hint(&doc, "nccl.allreduce").contains("reset"), "{doc:#}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn allreduce_on_old_nccl_passes_where_it_does_not_write_peers_buffers() {
    // Direct P2P turned off by the user, and A100 pairs (which read with P2P
    // instead): nothing touches unreachable pool memory.
    let a100s = "NVIDIA A100-SXM4-80GB, 8.0, 96;NVIDIA A100-SXM4-80GB, 8.0, 96";
    let scenario = nccl_scenario("2.20-direct-p2p");
    for envs in [
        vec![
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("NCCL_P2P_DIRECT_DISABLE", "1"),
        ],
        vec![("FAKE_CUDA_DEVICES", a100s)],
    ] {
        let mut envs = envs;
        envs.push(("FAKE_NCCL_SCENARIO", scenario.as_str()));
        let (out, doc) = allreduce("nccl.allreduce", &[], &envs);
        assert_eq!(
            common::status_of(&doc, "nccl.allreduce"),
            "pass",
            "{envs:?}: {doc:#}"
        );
        assert!(
            summary(&doc, "nccl.allreduce")
                .contains(" at 32 MiB over 2 GPUs (NCCL 2.20.5), results verified"),
            "{doc:#}"
        );
        assert_eq!(out.status.code(), Some(0));
    }
}

#[test]
fn allreduce_wrong_sum_fails_and_names_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("report.xml");
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--junit", junit.to_str().unwrap()],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_NCCL_SCENARIO", "wrong"),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.starts_with(
            "all-reduce returned wrong data: 1 of 16777216 elements wrong at 32 MiB (first: GPU \
             1, element 4194304: got "
        ),
        "{s}"
    );
    assert!(hint(&doc, "nccl.allreduce").contains("NCCL_P2P_DISABLE=1"));
    let devices = common::result(&doc, "nccl.allreduce")["devices"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(devices[0]["status"], "pass");
    assert_eq!(devices[1]["status"], "fail");
    assert_eq!(devices[1]["summary"], "1 wrong element");
    assert_eq!(table_rows(&doc, "nccl.allreduce")[0][6], "1");
    assert_eq!(out.status.code(), Some(1));
    common::assert_valid_json_report(&common::stdout(&out));
    common::assert_valid_junit(&junit);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<failure"), "{xml}");
}

#[test]
fn allreduce_catches_data_corrupted_on_the_way_back() {
    // The fake driver flips the first byte of every copy from GPU 1.
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &[],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_CUDA_CORRUPT", "1"),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    assert!(
        summary(&doc, "nccl.allreduce").contains("(first: GPU 1, element 0: got "),
        "{}",
        summary(&doc, "nccl.allreduce")
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn allreduce_hang_in_comm_init_is_killed_at_the_timeout() {
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--timeout", "3"],
        &[("FAKE_NCCL_SCENARIO", "hang_init")],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        "timed out after 3 s in ncclCommInitAll"
    );
    let h = hint(&doc, "nccl.allreduce");
    assert!(
        h.contains("NCCL_P2P_DISABLE=1") && h.contains("NCCL_DEBUG=WARN"),
        "{h}"
    );
    assert_eq!(out.status.code(), Some(1));
    // allreduce() asserted that no `__child nccl.allreduce` survived.
}

#[test]
fn allreduce_hang_in_the_collective_is_killed_naming_the_size() {
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--timeout", "3"],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_NCCL_SCENARIO", "hang_allreduce"),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        "timed out after 3 s in ncclAllReduce 32 MiB (warm-up)"
    );
    assert!(
        hint(&doc, "nccl.allreduce").contains("NCCL_P2P_DISABLE=1"),
        "{doc:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn allreduce_hang_in_the_driver_names_the_gpu_step() {
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--timeout", "3"],
        &[("FAKE_CUDA_HANG", "cuDevicePrimaryCtxRetain")],
    );
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        "timed out after 3 s in cuDevicePrimaryCtxRetain GPU 0",
        "{doc:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn allreduce_nccl_errors_carry_nccls_own_words() {
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &[],
        &[("FAKE_NCCL_SCENARIO", "init_error")],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        "ncclCommInitAll failed: unhandled system error (run with NCCL_DEBUG=INFO for details) \
         (fake: bootstrap could not find a socket interface)"
    );
    assert!(hint(&doc, "nccl.allreduce").contains("NCCL_DEBUG=WARN"));
    assert_eq!(
        common::result(&doc, "nccl.allreduce")["facts"]["nccl_error_code"],
        2
    );
    assert_eq!(out.status.code(), Some(1));

    let (_, doc) = allreduce(
        "nccl.allreduce",
        &[],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_NCCL_SCENARIO", "async_error"),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        "ncclAllReduce 32 MiB (warm-up) failed: remote process exited or there was a network \
         error (fake: peer went away)"
    );
}

#[test]
fn allreduce_loads_the_driver_cuda_driver_judged_not_the_toolkit_stub() {
    // The toolkit's stubs folder first on LD_LIBRARY_PATH: cudarc tries
    // libcuda.so (the stub) before libcuda.so.1 (the driver). cuda.driver
    // warns about the folder; the all-reduce runs on the driver it judged.
    let cuda = common::build_fixture_lib("fake_cuda.c", "cuda", "libcuda.so.1");
    let ld =
        std::env::join_paths([common::stub_libcuda_dir(), cuda.parent().unwrap().into()]).unwrap();
    let (out, doc) = allreduce(
        "cuda.driver,cuda.copy_bandwidth,nccl.library,nccl.allreduce",
        &[],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("LD_LIBRARY_PATH", ld.to_str().unwrap()),
        ],
    );
    assert_eq!(common::status_of(&doc, "cuda.driver"), "warn", "{doc:#}");
    // It measured (host memcpy speed, so a loaded test machine may warn),
    // where the stub would have failed cuInit.
    let copy = common::status_of(&doc, "cuda.copy_bandwidth");
    assert!(copy == "pass" || copy == "warn", "{doc:#}");
    assert!(
        summary(&doc, "cuda.driver").contains("cuda-stub/stubs/libcuda.so"),
        "{doc:#}"
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert!(
        summary(&doc, "nccl.allreduce").contains("results verified"),
        "{doc:#}"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn allreduce_names_the_toolkit_stub_when_it_is_the_libcuda_loaded() {
    // The stub linked as libcuda.so.1 (a container built that way): every
    // loader gets it; the verdict names the file, not just error 34.
    let dir = tempfile::tempdir().unwrap();
    let stub = dir.path().join("libcuda.so.1");
    std::fs::copy(common::stub_libcuda_dir().join("libcuda.so"), &stub).unwrap();
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &[],
        &[("LD_LIBRARY_PATH", dir.path().to_str().unwrap())],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        format!(
            "the libcuda loaded, {}, is the CUDA toolkit's stub, not the NVIDIA driver (cuInit: \
             CUDA_ERROR_STUB_LIBRARY)",
            stub.display()
        )
    );
    assert!(
        hint(&doc, "nccl.allreduce").starts_with(&format!(
            "take {} off LD_LIBRARY_PATH",
            dir.path().display()
        )),
        "{doc:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn allreduce_network_error_reports_nccls_words_instead_of_hanging() {
    // A peer or network error: the kernels never finish and NCCL sets the
    // communicators' asynchronous error. Waiting in cuStreamSynchronize
    // would hang to the timeout; polling reads NCCL's account at once.
    let started = std::time::Instant::now();
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--timeout", "20"],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_NCCL_SCENARIO", "peer_error"),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.starts_with(
            "ncclAllReduce 32 MiB (warm-up) failed: remote process exited or there was a \
             network error (NET/IB : Got completion from peer 10.0.0.2<44103> with status=12"
        ),
        "{s}"
    );
    assert_eq!(
        common::result(&doc, "nccl.allreduce")["facts"]["nccl_error_code"],
        6
    );
    assert!(started.elapsed().as_secs() < 15, "{s}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn allreduce_that_never_completes_is_aborted_naming_the_gpus() {
    // Kernels that never finish and no error from NCCL: the check aborts
    // the communicators itself before the runner's kill, and says which
    // GPUs were still running.
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--timeout", "4"],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_NCCL_SCENARIO", "stall"),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.starts_with("ncclAllReduce 32 MiB (warm-up) had not completed on GPU 0, 1 after "),
        "{s}"
    );
    assert!(
        s.ends_with("and NCCL reported no error; the communicators were aborted"),
        "{s}"
    );
    assert!(hint(&doc, "nccl.allreduce").contains("NCCL_DEBUG=WARN"));
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn allreduce_full_profile_sweeps_what_fits() {
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--profile", "full"],
        &[("FAKE_CUDA_DEVICES", SMALL_GPUS)],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    let rows = table_rows(&doc, "nccl.allreduce");
    // 8 B .. 32 MiB by factors of two; 64 MiB .. 1 GiB do not fit in 96 MiB.
    assert_eq!(rows.len(), 23);
    assert_eq!(rows[0][..3], ["8", "2", "float"]);
    assert_eq!(rows[22][0], "33554432");
    assert!(rows.iter().all(|r| r[6] == "0"));
    assert_eq!(
        fact(&doc, "nccl.allreduce", "sizes_skipped_for_memory"),
        "64 MiB, 128 MiB, 256 MiB, 512 MiB, 1 GiB"
    );
    let header = &common::result(&doc, "nccl.allreduce")["tables"][0]["header"];
    assert_eq!(
        header,
        &serde_json::json!([
            "size (B)",
            "count",
            "type",
            "time (us)",
            "algbw (GB/s)",
            "busbw (GB/s)",
            "#wrong"
        ])
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn allreduce_reports_the_busbw_curve_and_the_algorithm_nccl_logged() {
    // The fake NCCL models nccl-tests' busbw curve on every rank's stream
    // and logs its algorithm choice in NCCL 2.27's words (RING, TREE).
    let scenario = nccl_scenario("busbw-curve-2.27");
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &["--profile", "full"],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_NCCL_SCENARIO", scenario.as_str()),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    let rows = table_rows(&doc, "nccl.allreduce");
    let busbw_at = |bytes: &str| -> f64 {
        let row = rows.iter().find(|r| r[0] == bytes).expect("the size ran");
        row[5].parse().unwrap()
    };
    // The curve's points come back as the table's busbw, within 1%.
    for (bytes, want) in [("1048576", 30.0), ("33554432", 160.0)] {
        let got = busbw_at(bytes);
        assert!((got - want).abs() < want * 0.01, "{bytes}: {got} {rows:?}");
    }
    assert!(busbw_at("8") < 0.01, "{rows:?}");
    assert_eq!(
        fact(&doc, "nccl.allreduce", "nccl_algorithm"),
        "Ring, protocol Simple, at 32 MiB"
    );
    assert_eq!(out.status.code(), Some(0));
    // NCCL 2.19 logs no algorithm: no fact, nothing guessed.
    let scenario = nccl_scenario("busbw-curve-2.19");
    let (_, doc) = allreduce(
        "nccl.allreduce",
        &[],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_NCCL_SCENARIO", scenario.as_str()),
        ],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert_eq!(fact(&doc, "nccl.allreduce", "nccl_algorithm"), "");
    let got = table_rows(&doc, "nccl.allreduce")[0][5]
        .parse::<f64>()
        .unwrap();
    assert!((got - 160.0).abs() < 1.6, "{doc:#}");
}

#[test]
fn allreduce_on_one_gpu_still_runs() {
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &[],
        &[("FAKE_CUDA_DEVICES", "NVIDIA L4, 8.9, 96")],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.starts_with("NCCL 2.27.7 initialised and ran a verified all-reduce on 1 GPU ("),
        "{s}"
    );
    assert!(
        s.ends_with("bus bandwidth is not meaningful with one GPU"),
        "{s}"
    );
    assert_eq!(table_rows(&doc, "nccl.allreduce")[0][5], "n/a");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn allreduce_without_a_gpu_skips() {
    let (out, doc) = allreduce("nccl.allreduce", &[], &[("FAKE_CUDA_INIT", "100")]);
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "skip", "{doc:#}");
    assert!(summary(&doc, "nccl.allreduce").starts_with("CUDA sees no GPU"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(doc["unverified"], serde_json::json!(["nccl.allreduce"]));
}

#[test]
fn allreduce_is_skipped_when_nccl_is_missing() {
    let (out, doc) = allreduce(
        "nccl.library,nccl.allreduce",
        &["--nccl-lib", "/nonexistent/libnccl.so.2"],
        &[],
    );
    assert_eq!(common::status_of(&doc, "nccl.library"), "fail");
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "skip");
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        "needs nccl.library, which failed"
    );
    assert_eq!(out.status.code(), Some(1));
}

/// NVML's view of the fake libcuda's two default GPUs (same UUIDs, as the
/// fake libcuda derives them), on PCIe Gen4 x16 without NVLink.
const PCIE_GEN4_PAIR: &str = "\
system driver=570.86.15 nvml=12.570.86.15 cuda=12080
gpus 2 name=\"NVIDIA H100 80GB HBM3\" mem_mib=81559 cc=9.0 nvlink=none pcie=1/4 width=16/16
gpu 0 uuid=GPU-00102030-4050-6070-8090-a0b0c0d0e0f0
gpu 1 uuid=GPU-01112131-4151-6171-8191-a1b1c1d1e1f1
";

#[test]
fn allreduce_is_judged_against_the_pcie_links_nvml_reports() {
    let nvml = common::build_fixture_lib("fake_nvml.c", "nvml", "libnvidia-ml.so.1");
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("pcie.scenario");
    std::fs::write(&scenario, PCIE_GEN4_PAIR).unwrap();
    let nvml_args = ["--nvml-lib", nvml.to_str().unwrap()];
    let scenario_env = ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap());
    // The fake driver says every timed loop took 1 s: at most 20 iterations
    // of 256 MiB, so busbw <= 5.4 GB/s, under half of the ~17 GB/s a Gen4
    // x16 link gives.
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &nvml_args,
        &[scenario_env, ("FAKE_CUDA_ELAPSED_MS", "1000")],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    let s = summary(&doc, "nccl.allreduce");
    assert!(
        s.contains("% of the expected about 17 GB/s (55% of PCIe Gen4 x16 (31.5 GB/s))"),
        "{s}"
    );
    assert!(hint(&doc, "nccl.allreduce").contains("gpu.pcie"));
    assert_eq!(
        fact(&doc, "nccl.allreduce", "busbw_reference"),
        "55% of PCIe Gen4 x16 (31.5 GB/s)"
    );
    assert_eq!(out.status.code(), Some(1));

    // A fast timer: well above the expectation.
    let (out, doc) = allreduce(
        "nccl.allreduce",
        &nvml_args,
        &[scenario_env, ("FAKE_CUDA_ELAPSED_MS", "0.001")],
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert!(
        summary(&doc, "nccl.allreduce").ends_with(
            "results verified; expected about 17 GB/s (55% of PCIe Gen4 x16 (31.5 GB/s))"
        ),
        "{}",
        summary(&doc, "nccl.allreduce")
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn env_value_that_is_not_utf8_is_reported_not_ignored() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let home = tempfile::tempdir().unwrap();
    let out = common::gpucheck()
        .env_remove("LD_LIBRARY_PATH")
        .env("HOME", home.path())
        .env("NCCL_DEBUG", OsStr::from_bytes(b"WARN\xff"))
        .args(["--only", "nccl.env", "--json", "-"])
        .output()
        .expect("run gpucheck");
    let doc: Value = serde_json::from_str(&common::stdout(&out)).expect("JSON report");
    assert_eq!(common::status_of(&doc, "nccl.env"), "warn", "{doc:#}");
    let s = summary(&doc, "nccl.env");
    assert!(
        s.starts_with("NCCL_DEBUG=\"WARN\u{fffd}\" is not UTF-8 text"),
        "{s}"
    );
    assert!(hint(&doc, "nccl.env").contains("byte for byte"), "{doc:#}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn env_with_huge_unknown_names_finishes_in_the_quick_budget() {
    // A 100 KB name each: the edit distance to every known name used to take
    // seconds per name, and a few made nccl.env time out.
    let names: Vec<String> = (0..3)
        .map(|i| format!("NCCL_{}{i}", "X".repeat(100_000)))
        .collect();
    let envs: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let started = std::time::Instant::now();
    let (_, doc) = env_check(&envs);
    let took = started.elapsed();
    assert_eq!(
        common::status_of(&doc, "nccl.env"),
        "warn",
        "{}",
        summary(&doc, "nccl.env")
    );
    let s = summary(&doc, "nccl.env");
    assert!(
        s.contains("is not an NCCL variable"),
        "{}",
        &s[..s.len().min(300)]
    );
    // The summary shows a cut name, not 100 KB of it.
    assert!(s.len() < 1_000, "summary of {} bytes", s.len());
    assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
}

#[test]
fn env_secret_values_never_reach_a_report() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("report.xml");
    let out = common::gpucheck()
        .env_remove("LD_LIBRARY_PATH")
        .env("HOME", home.path())
        .env("NCCL_IB_PASSWORD", "hunter2")
        .env("NCCL_SOCKET_TOKEN", "hunter2")
        .args(["--only", "nccl.env", "--verbose", "--junit"])
        .arg(&junit)
        .output()
        .expect("run gpucheck");
    let table = common::stdout(&out);
    assert!(table.contains("NCCL_IB_PASSWORD"), "{table}");
    assert!(!table.contains("hunter2"), "{table}");
    let xml = std::fs::read_to_string(&junit).expect("JUnit report");
    assert!(!xml.contains("hunter2"), "{xml}");
    let (_, doc) = env_check(&[
        ("NCCL_IB_PASSWORD", "hunter2"),
        ("NCCL_SOCKET_TOKEN", "hunter2"),
    ]);
    let json = doc.to_string();
    assert!(json.contains("NCCL_IB_PASSWORD=***"), "{json}");
    assert!(!json.contains("hunter2"), "{json}");
}

#[test]
fn allreduce_runs_on_the_gpus_cuda_enumerates_when_one_is_missing() {
    // NVML lists 8 H100s, CUDA enumerates 7 (cuda/seven-of-eight, with its
    // UUIDs and bus ids): cuda.driver fails naming GPU 5, and the all-reduce
    // runs on the other seven instead of skipping. Small devices keep the
    // fake's host memory small.
    let seven =
        std::fs::read_to_string(common::root().join("tests/fixtures/cuda/seven-of-eight.scenario"))
            .unwrap()
            .replace(
                "devices = 7",
                &"device = NVIDIA H100 80GB HBM3, 9.0, 96\n".repeat(7),
            );
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("seven.scenario");
    std::fs::write(&scenario, seven).unwrap();
    let nvml = common::build_fixture_lib("fake_nvml.c", "nvml", "libnvidia-ml.so.1");
    let h100x8 = common::root().join("tests/fixtures/nvml/h100x8.scenario");
    let (out, doc) = allreduce(
        "cuda.driver,nccl.library,nccl.allreduce",
        &["--nvml-lib", nvml.to_str().unwrap()],
        &[
            ("FAKE_CUDA_SCENARIO", scenario.to_str().unwrap()),
            ("FAKE_NVML_SCENARIO", h100x8.to_str().unwrap()),
        ],
    );
    assert_eq!(common::status_of(&doc, "cuda.driver"), "fail", "{doc:#}");
    assert!(
        summary(&doc, "cuda.driver").contains("CUDA does not enumerate GPU 5"),
        "{doc:#}"
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert!(
        summary(&doc, "nccl.allreduce").contains(" over 7 GPUs (NCCL 2.27.7), results verified"),
        "{doc:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn allreduce_skips_when_a_gpu_cuda_enumerates_does_not_work() {
    let (_, doc) = allreduce(
        "cuda.driver,nccl.library,nccl.allreduce",
        &[],
        &[
            ("FAKE_CUDA_DEVICES", SMALL_GPUS),
            ("FAKE_CUDA_FAIL", "cuDevicePrimaryCtxRetain@1=999"),
        ],
    );
    assert_eq!(common::status_of(&doc, "cuda.driver"), "fail", "{doc:#}");
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "skip", "{doc:#}");
    assert_eq!(
        summary(&doc, "nccl.allreduce"),
        "needs cuda.driver, which failed"
    );
}

#[test]
fn with_a_gpu_fallen_off_the_bus_cuda_and_the_allreduce_run_on_the_rest() {
    // nvml/gpu_lost: NVML counts 8 GPUs and cannot open GPU 2; CUDA
    // enumerates the 7 that answer. gpu.count fails naming GPU 2, and the
    // checks after it judge the 7 instead of skipping "needs gpu.count".
    let nvml = common::build_fixture_lib("fake_nvml.c", "nvml", "libnvidia-ml.so.1");
    let lost = common::root().join("tests/fixtures/nvml/gpu_lost.scenario");
    let seven = ["NVIDIA H100 80GB HBM3, 9.0, 96"; 7].join(";");
    let (out, doc) = allreduce(
        "gpu.driver,gpu.count,cuda.driver,nccl.library,nccl.allreduce",
        &["--nvml-lib", nvml.to_str().unwrap()],
        &[
            ("FAKE_CUDA_DEVICES", seven.as_str()),
            ("FAKE_NVML_SCENARIO", lost.to_str().unwrap()),
        ],
    );
    assert_eq!(common::status_of(&doc, "gpu.count"), "fail", "{doc:#}");
    assert!(summary(&doc, "gpu.count").starts_with("GPU 2: "), "{doc:#}");
    assert_eq!(common::status_of(&doc, "cuda.driver"), "pass", "{doc:#}");
    assert!(
        summary(&doc, "cuda.driver").starts_with("CUDA 12.8 driver, 7 devices"),
        "{doc:#}"
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "pass", "{doc:#}");
    assert!(
        summary(&doc, "nccl.allreduce").contains(" over 7 GPUs (NCCL 2.27.7), results verified"),
        "{doc:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_cuda_error_in_the_allreduce_says_reset_only_with_an_xid_behind_it() {
    let log = |name: &str| {
        common::root()
            .join("tests/fixtures/kernel_log")
            .join(name)
            .to_string_lossy()
            .into_owned()
    };
    let fault = [
        ("FAKE_CUDA_DEVICES", SMALL_GPUS),
        ("FAKE_CUDA_FAIL", "cuMemAlloc_v2@1=700"),
    ];
    // No Xid since boot: the error is gpucheck's own, no reset prescribed.
    let clean = log("clean.log");
    let (_, doc) = allreduce(
        "fabric.xid,nccl.allreduce",
        &["--kernel-log", &clean],
        &fault,
    );
    assert_eq!(common::status_of(&doc, "nccl.allreduce"), "fail", "{doc:#}");
    assert!(
        summary(&doc, "nccl.allreduce")
            .starts_with("CUDA could not allocate the send buffer on GPU 1"),
        "{doc:#}"
    );
    let h = hint(&doc, "nccl.allreduce");
    assert!(!h.contains("reset"), "{h}");
    assert!(h.contains("fabric.xid"), "{h}");
    // Reset-class Xids since boot (79 first, then 48): now it says so.
    let kern = log("kern.log");
    let (_, doc) = allreduce(
        "fabric.xid,nccl.allreduce",
        &["--kernel-log", &kern],
        &fault,
    );
    let h = hint(&doc, "nccl.allreduce");
    assert!(
        h.starts_with("fabric.xid found Xid 79 on the GPU at PCI 0000:3a:00"),
        "{h}"
    );
    assert!(h.contains("must be reset"), "{h}");
}

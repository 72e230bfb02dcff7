//! Shared helpers for the integration tests: run the real binary with a clean
//! environment, build the fake driver libraries from tests/fixtures, and
//! validate reports (JUnit against the Jenkins XSD, JSON against the
//! committed schema) with the test virtual environment's Python.
#![allow(dead_code)]

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Start `cmd` with SIGINT at its default: a test harness started as a
/// background job of a non-interactive shell (`cargo test &`, `nohup`)
/// hands its children SIGINT ignored, and gpucheck keeps an ignored signal
/// ignored, as any program should; a test of Ctrl-C wants a terminal's.
pub fn with_sigint_default(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// The real gpucheck binary built by cargo for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpucheck"))
}

/// Environment variables that change gpucheck's verdicts; removed so a test
/// sees only what it sets.
const SCRUBBED: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GPUCHECK_EXPECT_GPUS",
    "GPUCHECK_PYTHON",
    "GPUCHECK_NCCL_LIB",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "NO_COLOR",
    "CUDA_HOME",
    "CUDA_PATH",
    "GITHUB_ACTIONS",
];

/// A `Command` for the real binary with a scrubbed environment (also every
/// NCCL_* and FAKE_* variable removed).
pub fn gpucheck() -> Command {
    let mut cmd = Command::new(bin());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if SCRUBBED.contains(&k.as_str()) || k.starts_with("NCCL_") || k.starts_with("FAKE_") {
            cmd.env_remove(&k);
        }
    }
    cmd
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The Python of the test virtual environment (.venv), created by
/// `scripts/setup-venv.sh`, which the README's test command runs first.
pub fn venv_python() -> PathBuf {
    let p = root().join(".venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup-venv.sh (the README's test command does)",
        p.display()
    );
    p
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// The newest modification time among the fakes' C sources and headers in
/// tests/fixtures (a fake includes fake_scenario.h, fake_nvml_old.c includes
/// fake_nvml.c), so that changing any of them rebuilds every fake.
fn newest_fixture_source() -> Option<std::time::SystemTime> {
    std::fs::read_dir(root().join("tests/fixtures"))
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".c") || name.ends_with(".h")
        })
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .max()
}

/// Compile `tests/fixtures/<source>` into a shared library named `soname` in
/// its own folder under target/fixtures/<dir>/ and return that path. Rebuilds
/// when any fixture source or header is newer. The C compiler (`cc`, or
/// `$CC`) is required: the test fails when it is missing.
pub fn build_fixture_lib(source: &str, dir: &str, soname: &str) -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let src = root().join("tests/fixtures").join(source);
    assert!(src.exists(), "{} missing", src.display());
    let out_dir = root().join("target/fixtures").join(dir);
    std::fs::create_dir_all(&out_dir).expect("create target/fixtures");
    let out = out_dir.join(soname);
    let fresh = match (newest_fixture_source(), std::fs::metadata(&out)) {
        (Some(newest), Ok(o)) => o.modified().is_ok_and(|built| built >= newest),
        _ => false,
    };
    if !fresh {
        // Build to a temporary name and rename, so concurrent test binaries
        // never load a half-written library.
        let tmp = out_dir.join(format!(".{soname}.{}", std::process::id()));
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
            .arg(&tmp)
            .arg(&src)
            .arg(format!("-Wl,-soname,{soname}"))
            .args(["-lpthread", "-ldl"])
            .status()
            .expect("run the C compiler (cc) for the test fixtures");
        assert!(status.success(), "compiling {} failed", src.display());
        std::fs::rename(&tmp, &out).expect("move the built fixture into place");
    }
    out
}

/// The fake NVML, built from tests/fixtures/fake_nvml.c.
pub fn fake_nvml() -> PathBuf {
    build_fixture_lib("fake_nvml.c", "nvml", "libnvidia-ml.so.1")
}

/// A folder named `stubs` holding the CUDA toolkit's stub `libcuda.so`
/// (tests/fixtures/fake_cuda_stub.c: every call returns
/// CUDA_ERROR_STUB_LIBRARY), as the toolkit installs it in lib64/stubs.
pub fn stub_libcuda_dir() -> PathBuf {
    let lib = build_fixture_lib("fake_cuda_stub.c", "cuda-stub/stubs", "libcuda.so");
    lib.parent()
        .expect("fixture lib has a folder")
        .to_path_buf()
}

/// A committed fake NVML scenario: tests/fixtures/nvml/<name>.scenario.
pub fn nvml_scenario(name: &str) -> PathBuf {
    let p = root()
        .join("tests/fixtures/nvml")
        .join(format!("{name}.scenario"));
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// Validate a JUnit XML file against the vendored schema/junit-10.xsd.
/// Panics with the validator's message when it does not validate.
pub fn assert_valid_junit(xml_path: &Path) {
    let xsd = root().join("schema/junit-10.xsd");
    assert!(xsd.exists(), "{} missing", xsd.display());
    let out = Command::new(venv_python())
        .args([
            "-c",
            "import sys, xmlschema; xmlschema.XMLSchema(sys.argv[1]).validate(sys.argv[2]); print('valid')",
        ])
        .arg(&xsd)
        .arg(xml_path)
        .output()
        .expect("run the XSD validator");
    assert!(
        out.status.success() && stdout(&out).contains("valid"),
        "JUnit report {} does not validate:\n{}",
        xml_path.display(),
        stderr(&out)
    );
}

/// Validate a JSON report against the committed schema/report.schema.json.
pub fn assert_valid_json_report(json: &str) -> serde_json::Value {
    let schema_text = std::fs::read_to_string(root().join("schema/report.schema.json"))
        .expect("schema/report.schema.json is committed");
    let schema: serde_json::Value = serde_json::from_str(&schema_text).expect("schema parses");
    let doc: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{json}"));
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "JSON report does not validate: {errors:#?}"
    );
    doc
}

/// The result object for check `id` in a parsed JSON report.
pub fn result<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    doc["results"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["id"] == id))
        .unwrap_or_else(|| panic!("no result for {id} in report"))
}

/// A text field (`summary`, `hint`, `status`...) of check `id`'s result;
/// empty when the field is absent.
pub fn text_field(doc: &serde_json::Value, id: &str, field: &str) -> String {
    result(doc, id)[field].as_str().unwrap_or("").to_string()
}

/// The status string of check `id` in a parsed JSON report.
pub fn status_of(doc: &serde_json::Value, id: &str) -> String {
    result(doc, id)["status"].as_str().unwrap_or("").to_string()
}

/// Processes (pid, cmdline) whose command line contains `needle`, other than
/// this test process. For "nothing left running" assertions.
///
/// The scan covers the whole machine, so a gpucheck built in another checkout
/// (another test run at the same time: `.../other/target/debug/gpucheck
/// __child nccl.allreduce`) is not counted; only this build's binary is.
pub fn processes_matching(needle: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let ours = bin();
    let mut found = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let argv0 = raw.split(|b| *b == 0).next().unwrap_or_default();
            let argv0 = Path::new(std::ffi::OsStr::from_bytes(argv0));
            if argv0.file_name() == ours.file_name() && argv0 != ours {
                continue;
            }
            let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push((pid, cmdline));
            }
        }
    }
    found
}

/// The load checks (tests/qualify.rs): `--only gpu` selects them too, so
/// the suites that judge NVML's answers leave them out with `--skip`.
pub const LOAD_CHECKS: &str = "gpu.compute,gpu.memory,gpu.p2p_bandwidth,gpu.burn";

//! `gpucheck job`, run as root, on a rank of another user: it reads the
//! rank's files with that user's rights only. The test creates the user
//! `gpucheck-test` (once, idempotently) and starts a one-rank "job" as that
//! user: the system python3 (no torch needed: a rank is a process with RANK
//! and WORLD_SIZE in its environment) running code compiled with the file
//! name of a file the test writes, asleep at line 2 of it, with
//! TORCH_FR_DUMP_TEMP_FILE pointing at a Flight Recorder dump the test
//! copies there after the rank started. Where root alone may read the file
//! and the dump, neither the line nor the dump reaches the report, its JSON
//! or the capture, and the report says why; where the rank's user may read
//! them, the line is shown and the dump read.
//!
//! These tests need root (to create the user and start a process as it),
//! which a compile-time attribute cannot tell, so they are ignored by a
//! plain `cargo test`; `scripts/test.sh` runs them with `--ignored` when it
//! runs as root (as CI does), and they fail loudly when run without root.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const USER: &str = "gpucheck-test";

/// The user's uid and gid, creating the user when it does not exist yet
/// (once for the tests that run at once).
fn test_user() -> (u32, u32) {
    static USER_IDS: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *USER_IDS.get_or_init(make_test_user)
}

fn make_test_user() -> (u32, u32) {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "tests/job_user.rs needs root: it creates the user {USER} and starts a rank as it \
         (scripts/test.sh runs it with --ignored where it runs as root)"
    );
    if !id(&["-u", USER]).status.success() {
        let out = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ])
            .output()
            .expect("useradd runs");
        // 9: the user exists (made by a test running beside this one).
        assert!(
            out.status.success() || out.status.code() == Some(9),
            "useradd {USER} failed: {}",
            stderr(&out)
        );
    }
    let num = |flag: &str| -> u32 {
        let out = id(&[flag, USER]);
        stdout(&out).trim().parse().expect("id prints a number")
    };
    (num("-u"), num("-g"))
}

fn id(args: &[&str]) -> std::process::Output {
    Command::new("id").args(args).output().expect("id runs")
}

/// A rank of the test user, killed (with its process group) when dropped.
struct Rank {
    child: Child,
    dir: PathBuf,
}

impl Drop for Rank {
    fn drop(&mut self) {
        let pgid = self.child.id() as i32;
        // SAFETY: kill has no memory preconditions.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The marker on line 2 of the frame's file.
fn marker(case: &str) -> String {
    format!("MARK-{case}-{}", std::process::id())
}

/// Line 2 of the frame's file.
fn line2(case: &str) -> String {
    format!("token = \"{}\"", marker(case))
}

/// Start the rank: its frame names `dir/code.py` (mode `mode`, line 2
/// carries the case's marker) and its recorder dumps under `dir/dumps`
/// (mode `dumps_mode`), where a real dump is copied once it runs.
fn start(case: &str, mode: u32, dumps_mode: u32) -> Rank {
    start_with(case, mode, dumps_mode, &[])
}

/// [`start`], with more variables in the rank's environment.
fn start_with(case: &str, mode: u32, dumps_mode: u32, env: &[(&str, String)]) -> Rank {
    let (uid, gid) = test_user();
    let dir = std::env::temp_dir().join(format!("gpucheck-user-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("dumps")).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        dir.join("dumps"),
        std::fs::Permissions::from_mode(dumps_mode),
    )
    .unwrap();
    let code = dir.join("code.py");
    std::fs::write(&code, format!("import time\n{}\n", line2(case))).unwrap();
    std::fs::set_permissions(&code, std::fs::Permissions::from_mode(mode)).unwrap();
    // The rank holds code of its own under the file's name (it may not
    // read the file): its line 2 sleeps; the file's line 2 is the marker,
    // found nowhere else (not in the rank's command line).
    let program = format!(
        "import ctypes, os\n\
         if os.environ.get('PRELOAD_LIB'): ctypes.CDLL(os.environ['PRELOAD_LIB'])\n\
         exec(compile('import time\\ntime.sleep(120)\\n', {:?}, 'exec'))",
        code.display().to_string()
    );
    let child = Command::new("/usr/bin/python3")
        .args(["-c", &program])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "1")
        .env(
            "TORCHELASTIC_RUN_ID",
            format!("user-{case}-{}", std::process::id()),
        )
        .env(
            "TORCH_FR_DUMP_TEMP_FILE",
            dir.join("dumps/fr_rank_").display().to_string(),
        )
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir("/")
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("python3 starts as the test user");
    let rank = Rank { child, dir };
    wait_in_code(&rank);
    // A dump written after the rank started: the recorder's own.
    let dump = root().join("tests/fixtures/flight_recorder/healthy/comm_lib_trace_rank_0");
    std::fs::copy(dump, rank.dir.join("dumps/fr_rank_0")).unwrap();
    rank
}

/// Wait until the rank runs its compiled code (its command line is up and
/// it sleeps).
fn wait_in_code(rank: &Rank) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let stat = format!("/proc/{}/stat", rank.child.id());
    loop {
        let s = std::fs::read_to_string(&stat).unwrap_or_default();
        let sleeping = s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('S'));
        if sleeping {
            // Past the interpreter's start-up.
            std::thread::sleep(Duration::from_millis(500));
            return;
        }
        assert!(Instant::now() < deadline, "the rank did not start: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `gpucheck job --pid RANK` with the JSON report and a capture: (human
/// report, JSON text, JSON, capture text).
fn look(rank: &Rank) -> (String, String, serde_json::Value, String) {
    look_with(rank, &[])
}

/// [`look`], with more variables in gpucheck's environment.
fn look_with(rank: &Rank, env: &[(&str, String)]) -> (String, String, serde_json::Value, String) {
    let json = rank.dir.join("report.json");
    let capture = rank.dir.join("capture.json");
    let venv_bin = venv_python().parent().unwrap().to_path_buf();
    let path = format!("{}:/usr/bin:/bin", venv_bin.display());
    let out = gpucheck()
        .args(["job", "--pid", &rank.child.id().to_string(), "--json"])
        .arg(&json)
        .arg("--capture")
        .arg(&capture)
        .env("PATH", path)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("gpucheck runs");
    let human = stdout(&out);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "gpucheck job judged the job (exit 0 or 1): {human}{}",
        stderr(&out)
    );
    let text = read(&json);
    let doc = assert_valid_json_report(&text);
    (human, text, doc, read(&capture))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
#[ignore = "needs root to create a second user: scripts/test.sh runs it with --ignored as root"]
fn a_file_only_root_may_read_stays_out_of_the_report_and_the_report_says_why() {
    let rank = start("secret", 0o600, 0o700);
    let (uid, _) = test_user();
    let (human, json, doc, capture) = look(&rank);
    let secret = marker("secret");
    for (what, text) in [("report", &human), ("JSON", &json), ("capture", &capture)] {
        assert!(
            !text.contains(&secret),
            "the {what} holds the secret line: {text}"
        );
    }
    let why = format!(
        "not read: {} is not readable by the rank's user (uid {uid})",
        rank.dir.join("code.py").display()
    );
    assert!(human.contains(&why), "the table says why: {human}");
    assert!(json.contains(&why), "the JSON says why: {json}");
    // The dump under a folder only root may enter is not read either.
    assert_eq!(
        result(&doc, "job.traces")["facts"]["recorders_read"],
        0,
        "{json}"
    );
    let dump_why = format!(
        "{} is not readable by the rank's user (uid {uid})",
        rank.dir.join("dumps/fr_rank_0").display()
    );
    assert!(
        json.contains(&dump_why),
        "the report says why the dump was not read: {json}"
    );
}

#[test]
#[ignore = "needs root to create a second user: scripts/test.sh runs it with --ignored as root"]
fn a_file_the_rank_user_may_read_is_shown() {
    let rank = start("readable", 0o644, 0o755);
    let (human, json, doc, _) = look(&rank);
    let line = line2("readable");
    assert!(human.contains(&line), "the table shows the line: {human}");
    let in_json = serde_json::to_string(&line).unwrap();
    let in_json = in_json.trim_matches('"');
    assert!(json.contains(in_json), "the JSON shows the line: {json}");
    assert!(!json.contains("not readable by the rank's user"), "{json}");
    assert_eq!(
        result(&doc, "job.traces")["facts"]["recorders_read"],
        1,
        "{json}"
    );
}

/// A worker server's socket only root may connect to, that counts the
/// connections it takes (and answers none).
struct RootSocket {
    path: PathBuf,
    taken: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl RootSocket {
    fn bind(path: PathBuf) -> RootSocket {
        use std::sync::atomic::Ordering;
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (t, s) = (taken.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if listener.accept().is_ok() {
                    t.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        RootSocket { path, taken, stop }
    }
}

impl Drop for RootSocket {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
#[ignore = "needs root to create a second user: scripts/test.sh runs it with --ignored as root"]
fn a_worker_socket_only_root_may_use_is_not_connected_to() {
    let (uid, _) = test_user();
    let dir = std::env::temp_dir().join(format!("gpucheck-user-server-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = RootSocket::bind(dir.join("server.sock"));
    let env = [(
        "TORCH_WORKER_SERVER_SOCKET",
        socket.path.display().to_string(),
    )];
    let rank = start_with("sock", 0o644, 0o755, &env);
    let (human, json, _, _) = look(&rank);
    assert_eq!(
        socket.taken.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "gpucheck connected to a socket the rank's user may not: {human}"
    );
    let why = format!(
        "its worker server is not asked: {} is not writable by the rank's user (uid {uid})",
        socket.path.display()
    );
    assert!(json.contains(&why), "the report says why: {json}");
    // Its stack is still read, by py-spy.
    assert!(human.contains(&line2("sock")), "{human}");
    drop(rank);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root to create a second user: scripts/test.sh runs it with --ignored as root"]
fn a_libnccl_of_the_rank_user_is_not_loaded_and_its_version_still_read() {
    let (uid, gid) = test_user();
    let built = build_fixture_lib("user_nccl.c", "user_nccl", "libnccl.so.2");
    let dir = std::env::temp_dir().join(format!("gpucheck-user-nccl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The user's own copy, in a folder of the user's.
    let lib = dir.join("libnccl.so.2");
    std::fs::copy(&built, &lib).unwrap();
    std::os::unix::fs::chown(&lib, Some(uid), Some(gid)).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
    let mark = std::env::temp_dir().join(format!("gpucheck-user-mark-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let env = [
        ("PRELOAD_LIB", lib.display().to_string()),
        // Nothing listens there: RAS is not asked, whatever runs beside.
        ("NCCL_RAS_ADDR", "127.0.0.1:1".to_string()),
    ];
    let rank = start_with("lib", 0o644, 0o755, &env);
    let (human, json, _, _) = look_with(&rank, &[("USER_NCCL_MARK", mark.display().to_string())]);
    let ran_as_root = mark.exists();
    let _ = std::fs::remove_file(&mark);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        !ran_as_root,
        "gpucheck loaded the user's libnccl as root: {human}"
    );
    // Its version came from its version string: 2.27.3 has RAS, and the
    // check went on to the RAS address.
    let summary = text_field(
        &serde_json::from_str(&json).unwrap(),
        "job.nccl_ras",
        "summary",
    );
    assert!(
        summary.contains("nothing listens on the job's RAS address 127.0.0.1:1"),
        "{summary}"
    );
}

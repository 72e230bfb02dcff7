//! `gpucheck exec --watch` and `gpucheck job --watch` on real torchrun jobs
//! of real DDP steps (gloo on CPU, 3 ranks on 127.0.0.1,
//! `tests/fixtures/watch_job/train.py`): a rank that sleeps instead of its
//! step, one that stops itself, one that exits with a code, a job that
//! pauses outside collectives (a slow start and a checkpoint), a rank late
//! at every step. Each asserts the rank named (and no other), the exit
//! code, the time from the fault to the report (generous bounds; the real
//! figures are README's), and that nothing is left running.

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

/// One job at a time: three torch processes each are plenty for two cores.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// A test's folder, its job's settings and what it left.
struct Case {
    dir: tempfile::TempDir,
    env: Vec<(&'static str, String)>,
}

impl Case {
    fn new(env: &[(&'static str, &str)]) -> Case {
        let dir = tempfile::Builder::new()
            .prefix("gpucheck-watch-")
            .tempdir()
            .unwrap();
        let mut env: Vec<(&'static str, String)> =
            env.iter().map(|(k, v)| (*k, v.to_string())).collect();
        env.push(("FAULT_FILE", dir.path().join("fault").display().to_string()));
        env.push(("JOB_LIMIT", "100".into()));
        Case { dir, env }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// torchrun's command line for three ranks of train.py.
    fn torchrun(&self) -> Vec<String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let script = root().join("tests/fixtures/watch_job/train.py");
        vec![
            venv_python().display().to_string(),
            "-m".into(),
            "torch.distributed.run".into(),
            "--nproc-per-node".into(),
            "3".into(),
            "--master-addr".into(),
            "127.0.0.1".into(),
            "--master-port".into(),
            port.to_string(),
            script.display().to_string(),
        ]
    }

    /// torchrun's command line for node `node` of a two-node job of train.py
    /// (2 ranks a node) meeting at 127.0.0.1:`port`.
    fn torchrun_node(&self, node: &str, port: &str) -> Vec<String> {
        let script = root().join("tests/fixtures/watch_job/train.py");
        [venv_python().display().to_string()]
            .into_iter()
            .chain(
                [
                    "-m",
                    "torch.distributed.run",
                    "--nnodes",
                    "2",
                    "--node-rank",
                    node,
                    "--nproc-per-node",
                    "2",
                    "--master-addr",
                    "127.0.0.1",
                    "--master-port",
                    port,
                ]
                .map(String::from),
            )
            .chain([script.display().to_string()])
            .collect()
    }

    /// Two nodes' stderr (node0.err, node1.err), and both for a message.
    fn node_errs(&self) -> (String, String, String) {
        let read = |n: u32| std::fs::read_to_string(self.path(&format!("node{n}.err")));
        let (err0, err1) = (read(0).unwrap_or_default(), read(1).unwrap_or_default());
        let both = format!("node 0:\n{err0}\nnode 1:\n{err1}");
        (err0, err1, both)
    }

    /// The job's own processes still running (by this case's folder, which
    /// every rank's environment and torchrun's command line carry).
    fn left_running(&self) -> Vec<(u32, String)> {
        let marker = self.dir.path().display().to_string();
        processes_matching("train.py")
            .into_iter()
            .filter(|(pid, _)| environ_has(*pid, &marker))
            .collect()
    }

    /// Seconds from the rank's fault (its FAULT_FILE) to `then`.
    fn since_fault(&self, then: SystemTime) -> f64 {
        let text =
            std::fs::read_to_string(self.path("fault")).expect("the rank wrote its fault time");
        let fault: f64 = text.trim().parse().unwrap();
        then.duration_since(UNIX_EPOCH).unwrap().as_secs_f64() - fault
    }
}

fn environ_has(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|e| String::from_utf8_lossy(&e).contains(needle))
        .unwrap_or(false)
}

/// `gpucheck exec --watch ARGS -- torchrun ...` (the gate: host.shm only),
/// run to its end within `limit`; (exit code, stderr, when it ended).
fn exec_watch(case: &Case, args: &[&str], limit: Duration) -> (i32, String, SystemTime) {
    let mut cmd = gpucheck();
    cmd.args(["exec", "--only", "host.shm", "--on-fail", "warn", "--watch"])
        .args(args)
        .arg("--")
        .args(case.torchrun())
        .envs(case.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(case.path("stderr")).unwrap())
        .process_group(0);
    let child = cmd.spawn().unwrap();
    let code = wait_or_kill(child, limit);
    let ended = SystemTime::now();
    let err = std::fs::read_to_string(case.path("stderr")).unwrap_or_default();
    (code, err, ended)
}

/// Wait for `child` within `limit`, else kill its process group and fail.
fn wait_or_kill(mut child: Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("gpucheck did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("the watch wrote its JSON report");
    assert_valid_json_report(&text)
}

fn ranks_of(doc: &serde_json::Value, id: &str) -> Vec<u64> {
    result(doc, id)["ranks"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .unwrap_or_default()
}

#[test]
fn a_rank_asleep_instead_of_its_step_is_named_and_stop_ends_the_job() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let case = Case::new(&[("CASE", "sleep"), ("FAULT_RANK", "1"), ("AT_STEP", "15")]);
    let json = case.path("watch.json");
    let html = case.path("watch.html");
    let args = [
        "--hang-after",
        "6",
        "--on-hang",
        "stop",
        "--json",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ];
    let (code, err, ended) = exec_watch(&case, &args, Duration::from_secs(150));
    assert_eq!(code, 124, "the watch ended a hung job: exit 124\n{err}");
    // The page is rewritten with the JSON: the named rank with its frame.
    let page = std::fs::read_to_string(&html).expect("the HTML report");
    let own = &page[page.find("id=\"rank-1\"").expect("rank 1's section")..];
    assert!(
        own.contains("time.sleep") || own.contains("train.py"),
        "{own}"
    );
    let doc = report(&json);
    assert_eq!(status_of(&doc, "job.watch"), "fail", "{err}");
    assert_eq!(ranks_of(&doc, "job.watch"), vec![1], "{err}");
    assert_eq!(ranks_of(&doc, "job.hang"), vec![1], "{err}");
    let summary = text_field(&doc, "job.watch", "summary");
    assert!(
        summary.contains("rank 1 is asleep in time.sleep") && summary.contains("train.py"),
        "{summary}"
    );
    assert!(summary.contains("the watch ended the job"), "{summary}");
    assert!(err.contains("ending the hung job: SIGTERM"), "{err}");
    let took = case.since_fault(ended);
    eprintln!("fault to the job's end: {took:.1} s (hang after 6 s)");
    assert!(
        took < 6.0 + 40.0,
        "{took:.1} s from the fault to the end\n{err}"
    );
    assert_eq!(
        case.left_running(),
        vec![],
        "nothing of the job may be left"
    );
}

#[test]
fn the_first_rank_to_exit_is_named_with_its_code_and_exec_exits_with_the_commands() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let case = Case::new(&[("CASE", "exit"), ("FAULT_RANK", "2"), ("AT_STEP", "15")]);
    let json = case.path("watch.json");
    let args = ["--hang-after", "6", "--json", json.to_str().unwrap()];
    let (code, err, ended) = exec_watch(&case, &args, Duration::from_secs(120));
    // torchrun's own exit code when a worker failed.
    assert_eq!(code, 1, "{err}");
    let doc = report(&json);
    assert_eq!(status_of(&doc, "job.watch"), "fail", "{err}");
    assert_eq!(ranks_of(&doc, "job.watch"), vec![2], "{err}");
    let summary = text_field(&doc, "job.watch", "summary");
    assert!(
        summary.starts_with("rank 2 (pid ") && summary.contains("exited with code 3 first"),
        "{summary}"
    );
    assert!(!err.contains("diagnosing"), "a crash is no hang\n{err}");
    let took = case.since_fault(ended);
    eprintln!("rank exit to gpucheck's end: {took:.1} s");
    assert!(took < 30.0, "{took:.1} s\n{err}");
    assert_eq!(case.left_running(), vec![]);
}

#[test]
fn a_slow_start_and_a_checkpoint_outside_collectives_are_said_never_alarmed() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let case = Case::new(&[
        ("CASE", "pauses"),
        ("PAUSE", "14"),
        ("AT_STEP", "20"),
        ("STEPS", "40"),
    ]);
    let json = case.path("watch.json");
    let args = [
        "--hang-after",
        "5",
        "--on-hang",
        "stop",
        "--json",
        json.to_str().unwrap(),
    ];
    let (code, err, _) = exec_watch(&case, &args, Duration::from_secs(150));
    assert_eq!(code, 0, "the job ended by itself\n{err}");
    let doc = report(&json);
    assert_eq!(status_of(&doc, "job.watch"), "pass", "{err}");
    assert!(
        !err.contains("diagnosing") && !err.contains("hang confirmed"),
        "{err}"
    );
    assert!(
        err.contains("outside collectives for"),
        "the pauses are said\n{err}"
    );
    assert!(
        err.contains("in save_checkpoint"),
        "where the ranks were is said\n{err}"
    );
    assert!(err.contains("the command ended (exit code 0)"), "{err}");
}

#[test]
fn a_rank_late_at_every_step_is_named_a_straggler_while_the_job_runs() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let case = Case::new(&[
        ("CASE", "straggler"),
        ("FAULT_RANK", "2"),
        ("LATE", "0.4"),
        ("STEPS", "70"),
    ]);
    let json = case.path("watch.json");
    let args = ["--hang-after", "6", "--json", json.to_str().unwrap()];
    let (code, err, _) = exec_watch(&case, &args, Duration::from_secs(150));
    assert_eq!(code, 0, "a straggler does not stop the job\n{err}");
    let doc = report(&json);
    assert_eq!(status_of(&doc, "job.watch"), "warn", "{err}");
    assert_eq!(ranks_of(&doc, "job.watch"), vec![2], "{err}");
    assert!(err.contains("rank 2 straggles"), "{err}");
    assert!(
        !err.contains("rank 0 straggles") && !err.contains("rank 1 straggles"),
        "{err}"
    );
    assert!(!err.contains("diagnosing"), "{err}");
}

#[test]
fn job_watch_names_a_stopped_rank_and_ends_with_the_job() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let case = Case::new(&[("CASE", "stop"), ("FAULT_RANK", "1"), ("AT_STEP", "15")]);
    let argv = case.torchrun();
    let mut job = Command::new(&argv[0]);
    job.args(&argv[1..])
        .envs(case.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let job = job.spawn().unwrap();
    let pgid = job.id() as i32;
    let _kill = KillGroup(job);
    let json = case.path("watch.json");
    let watch = gpucheck()
        .args([
            "job",
            "--watch",
            "--hang-after",
            "6",
            "--pid",
            &pgid.to_string(),
            "--json",
        ])
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(case.path("stderr")).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let named = wait_for(Duration::from_secs(120), || {
        std::fs::read_to_string(&json)
            .ok()
            .filter(|t| t.contains("\"job.hang\""))
            .map(|_| report(&json))
    });
    let err = std::fs::read_to_string(case.path("stderr")).unwrap_or_default();
    let doc = named.unwrap_or_else(|| panic!("no hang report\n{err}"));
    assert_eq!(ranks_of(&doc, "job.watch"), vec![1], "{err}");
    assert_eq!(ranks_of(&doc, "job.hang"), vec![1], "{err}");
    assert!(
        text_field(&doc, "job.traces", "summary").contains("stopped"),
        "{err}"
    );
    // The job ends (killed here): the watch ends by itself with it.
    drop(_kill);
    let code = wait_or_kill(watch, Duration::from_secs(15));
    assert_eq!(code, 1, "a hang was named\n{err}");
}

/// SIGKILL a launcher's process group and reap the launcher when dropped.
struct KillGroup(Child);

impl Drop for KillGroup {
    fn drop(&mut self) {
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

#[test]
fn bad_watch_flags_are_one_line_errors_with_exit_2() {
    let cases: &[&[&str]] = &[
        &["job", "--watch", "--hang-after", "soon"],
        &["job", "--watch", "--hang-after", "0"],
        &["job", "--hang-after", "10"],
        &["job", "--watch", "--on-hang", "kill"],
        &["job", "--watch", "--traces", "/tmp"],
        &["job", "--watch", "--pid", "2147483646"],
    ];
    for args in cases {
        let out = gpucheck()
            .args(*args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
            "{args:?}: {err}"
        );
    }
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// Two nodes of one 4-rank job on 127.0.0.1 (a torchrun launcher each, 2
/// ranks each), each watched by `gpucheck job --watch --nnodes 2`: rank 3,
/// on node 1, sleeps instead of its step. Node 0 sees ranks 0-2 wait for
/// it, asks node 1 for its diagnosis, names rank 3 with its node, and under
/// `--on-hang stop` every node ends its own ranks and exits 124.
#[test]
fn across_two_nodes_the_rank_asleep_on_node_1_is_named_and_every_node_ends_its_ranks() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let case = Case::new(&[("CASE", "sleep"), ("FAULT_RANK", "3"), ("AT_STEP", "15")]);
    let (job_port, watch_port) = (free_port().to_string(), free_port().to_string());
    let mut launchers = Vec::new();
    let mut watches = Vec::new();
    for node in ["0", "1"] {
        let argv = case.torchrun_node(node, &job_port);
        let job = Command::new(&argv[0])
            .args(&argv[1..])
            .envs(case.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = job.id().to_string();
        launchers.push(KillGroup(job));
        let watch = gpucheck()
            .args(["job", "--watch", "--hang-after", "6", "--on-hang", "stop"])
            .args(["--pid", &pid, "--nnodes", "2", "--node-rank", node])
            .args(["--master-addr", "127.0.0.1", "--master-port", &watch_port])
            .arg("--python")
            .arg(venv_python())
            .arg("--json")
            .arg(case.path(&format!("node{node}.json")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(case.path(&format!("node{node}.err"))).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        watches.push(watch);
    }
    let codes: Vec<i32> = watches
        .into_iter()
        .map(|w| wait_or_kill(w, Duration::from_secs(150)))
        .collect();
    let ended = SystemTime::now();
    let (err0, err1, both) = case.node_errs();
    assert_eq!(codes, vec![124, 124], "{both}");
    assert!(err0.contains("not in it: rank 3 on node 1"), "{both}");
    assert!(err1.contains("node 0 found the job hung"), "{both}");
    let doc = report(&case.path("node0.json"));
    assert_eq!(ranks_of(&doc, "job.watch"), vec![3], "{both}");
    let summary = text_field(&doc, "job.watch", "summary");
    assert!(summary.contains("node 1"), "{summary}");
    let took = case.since_fault(ended);
    assert!(
        took < 90.0,
        "{took:.1} s from the fault to both watches' end\n{both}"
    );
    // The watches ended the job: its launchers follow their ranks.
    let gone = wait_for(Duration::from_secs(20), || {
        case.left_running().is_empty().then_some(())
    });
    assert!(
        gone.is_some(),
        "{:?} left running\n{both}",
        case.left_running()
    );
    drop(launchers);
}

/// The same two nodes under `gpucheck exec --cluster --watch` (a container
/// ENTRYPOINT on every node): the gate across nodes, then each node's
/// torchrun watched across nodes; node 0 names rank 3 on node 1 and every
/// node ends its ranks and exits 124.
#[test]
fn exec_cluster_watch_gates_then_watches_across_two_nodes() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let case = Case::new(&[("CASE", "sleep"), ("FAULT_RANK", "3"), ("AT_STEP", "15")]);
    let (job_port, watch_port) = (free_port().to_string(), free_port().to_string());
    let python = venv_python();
    let nodes: Vec<Child> = ["0", "1"]
        .iter()
        .map(|node| {
            gpucheck()
                .args(["exec", "--cluster", "--nnodes", "2", "--node-rank", node])
                .args(["--master-addr", "127.0.0.1", "--master-port", &watch_port])
                .arg("--python")
                .arg(&python)
                .args(["--only", "host.shm", "--on-fail", "warn", "--watch"])
                .args(["--hang-after", "6", "--on-hang", "stop", "--"])
                .args(case.torchrun_node(node, &job_port))
                .envs(case.env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(case.path(&format!("node{node}.err"))).unwrap())
                .process_group(0)
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<i32> = nodes
        .into_iter()
        .map(|n| wait_or_kill(n, Duration::from_secs(180)))
        .collect();
    let (err0, err1, both) = case.node_errs();
    assert!(err0.contains("FLEET READY"), "{both}");
    assert_eq!(codes, vec![124, 124], "{both}");
    assert!(err0.contains("not in it: rank 3 on node 1"), "{both}");
    assert!(err1.contains("node 0 found the job hung"), "{both}");
    assert_eq!(case.left_running(), vec![], "{both}");
}

#[test]
fn across_nodes_the_watch_keeps_no_capture() {
    let out = gpucheck()
        .args(["job", "--watch", "--nnodes", "2", "--node-rank", "1"])
        .args(["--master-addr", "127.0.0.1", "--capture", "/tmp/x.json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("keeps no --capture"), "{err}");
}

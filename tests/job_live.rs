//! `gpucheck job` without `--traces`, on live gloo jobs of three ranks on
//! 127.0.0.1 run by the test Python (`tests/fixtures/live_job/job.py`):
//! the ranks it finds by their environment, the ranks it names and why,
//! the exit code, and that the job is left as it was: every rank alive,
//! not stopped, and a running job still stepping after gpucheck returns.
//! Each job runs under its own `sh` launcher in its own process group,
//! which the test names with `--pid` and kills when done.

mod common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;

/// One job at a time: three torch processes each are plenty for two cores.
static ONE_JOB: Mutex<()> = Mutex::new(());

const WORLD: u32 = 3;

struct Job {
    launcher: Child,
    dir: PathBuf,
}

impl Drop for Job {
    fn drop(&mut self) {
        let pgid = self.launcher.id() as i32;
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.launcher.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Start `case` with `world` ranks (worker servers when `server`), each a
/// plain python under one `sh`; wait until every rank stepped `steps`
/// times.
fn start(case: &str, fault: i64, world: u32, server: bool, steps: usize) -> Job {
    start_some(case, fault, world, world, server, steps)
}

/// [`start`], launching only `launched` of the `world` ranks.
fn start_some(
    case: &str,
    fault: i64,
    launched: u32,
    world: u32,
    server: bool,
    steps: usize,
) -> Job {
    start_with(case, fault, launched, world, server, steps, false)
}

std::thread_local! {
    /// Environment added to every rank of the next job started by this
    /// thread ("NAME=value ...").
    static RANK_ENV: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// [`start_some`], the ranks keeping a dump pipe when `pipe`.
fn start_with(
    case: &str,
    fault: i64,
    launched: u32,
    world: u32,
    server: bool,
    steps: usize,
    pipe: bool,
) -> Job {
    let ranks: Vec<u32> = (0..launched).collect();
    let job = launch(case, fault, &ranks, world, server, pipe, free_port());
    wait_steps(&job, case, &ranks, steps, world);
    job
}

/// `ranks` of a `world`-rank job meeting at `port`, under one `sh` of
/// their own (a node's share of the job), LOCAL_RANK counting from 0.
#[allow(clippy::too_many_arguments)]
fn launch(
    case: &str,
    fault: i64,
    ranks: &[u32],
    world: u32,
    server: bool,
    pipe: bool,
    port: u16,
) -> Job {
    let dir = std::env::temp_dir().join(format!(
        "gpucheck-live-{case}-{}-{}",
        std::process::id(),
        ranks.first().copied().unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = root().join("tests/fixtures/live_job/job.py");
    let mut sh = String::new();
    for (local, r) in ranks.iter().enumerate() {
        let mut socket = if server {
            format!("TORCH_WORKER_SERVER_SOCKET={}/rank{r}.sock ", dir.display())
        } else {
            String::new()
        };
        RANK_ENV.with(|e| socket.push_str(&e.borrow()));
        if pipe {
            socket.push_str(&format!(
                "FAKE_DUMP_PIPE=1 TORCH_NCCL_DEBUG_INFO_PIPE_FILE={0}/pipe_rank_ \
                 TORCH_FR_DUMP_TEMP_FILE={0}/fr_rank_ ",
                dir.display()
            ));
        }
        sh.push_str(&format!(
            "{socket}RANK={r} LOCAL_RANK={local} WORLD_SIZE={world} MASTER_ADDR=127.0.0.1 \
             MASTER_PORT={port} STEP_FILE={}/steps{r} '{}' '{}' 2>{}/log{r} &\n",
            dir.display(),
            venv_python().display(),
            script.display(),
            dir.display(),
        ));
    }
    sh.push_str("wait\n");
    let launcher = Command::new("sh")
        .arg("-c")
        .arg(sh)
        .env("CASE", case)
        .env("FAULT_RANK", fault.to_string())
        .env("JOB_LIMIT", "120")
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("sh starts");
    Job { launcher, dir }
}

/// Wait until each of `ranks` stepped `steps` times.
fn wait_steps(job: &Job, case: &str, ranks: &[u32], steps: usize, world: u32) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while steps > 0 && ranks.iter().any(|r| stepped(job, *r) < steps) {
        assert!(
            Instant::now() < deadline,
            "the {case} job did not reach step {steps}: {}",
            logs(job, world)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn stepped(job: &Job, rank: u32) -> usize {
    std::fs::read_to_string(job.dir.join(format!("steps{rank}")))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn logs(job: &Job, world: u32) -> String {
    (0..world)
        .map(|r| std::fs::read_to_string(job.dir.join(format!("log{r}"))).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `gpucheck job --pid LAUNCHER --json -`.
fn look(job: &Job) -> (Output, serde_json::Value) {
    let out = gpucheck()
        .args([
            "job",
            "--pid",
            &job.launcher.id().to_string(),
            "--json",
            "-",
        ])
        .output()
        .expect("gpucheck runs");
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

fn ranks(doc: &serde_json::Value, id: &str) -> Vec<u64> {
    result(doc, id)["ranks"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .unwrap_or_default()
}

/// The ranks' pids, from /proc: the python processes running the script
/// under this job's launcher.
fn rank_pids(job: &Job) -> Vec<u32> {
    let dir = job.dir.display().to_string();
    processes_matching("live_job/job.py")
        .into_iter()
        .filter(|(pid, _)| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|e| String::from_utf8_lossy(&e).contains(&dir))
        })
        .map(|(pid, _)| pid)
        .collect()
}

fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

/// Every rank is alive and not stopped; when `running`, it still steps.
fn left_as_it_was(job: &Job, world: u32, running: bool) {
    let pids = rank_pids(job);
    assert_eq!(
        pids.len(),
        world as usize,
        "every rank is still there: {pids:?}"
    );
    for pid in &pids {
        let s = state(*pid);
        assert!(
            !matches!(s, 'T' | 't' | 'Z' | '?'),
            "rank pid {pid} is in state {s}"
        );
    }
    if running {
        let before: Vec<usize> = (0..world).map(|r| stepped(job, r)).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while (0..world).any(|r| stepped(job, r) <= before[r as usize]) {
            assert!(
                Instant::now() < deadline,
                "the job stopped stepping after gpucheck looked"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

#[test]
fn a_healthy_running_job_is_no_problem_and_keeps_stepping() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("healthy", -1, WORLD, true, 3);
    let (out, doc) = look(&job);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.hang"), "pass");
    assert!(
        text_field(&doc, "job.hang", "summary").contains("moving"),
        "{}",
        stdout(&out)
    );
    let traces = text_field(&doc, "job.traces", "summary");
    assert!(traces.contains("ranks 0-2 of a 3-rank job"), "{traces}");
    assert!(
        traces.contains("recorders of 3 ranks read from their worker servers"),
        "{traces}"
    );
    for id in ["job.hang", "job.straggler"] {
        assert!(ranks(&doc, id).is_empty(), "{id} blames nobody");
    }
    left_as_it_was(&job, WORLD, true);
}

#[test]
fn a_rank_asleep_instead_of_in_all_reduce_is_named_with_its_frame() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("sleep", 2, WORLD, true, 5);
    std::thread::sleep(Duration::from_millis(500));
    let (out, doc) = look(&job);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.hang"), vec![2]);
    let summary = text_field(&doc, "job.hang", "summary");
    assert!(
        summary.contains("rank 2 never joined all_reduce #6"),
        "{summary}"
    );
    assert!(
        summary.contains("time.sleep(3600)"),
        "the frame is shown: {summary}"
    );
    assert!(summary.contains("job.py:"), "{summary}");
    left_as_it_was(&job, WORLD, false);
}

#[test]
fn a_barrier_in_one_ranks_branch_is_named() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("branch", 0, WORLD, true, 5);
    std::thread::sleep(Duration::from_millis(500));
    let (out, doc) = look(&job);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.hang"), vec![0], "{}", stdout(&out));
    let summary = text_field(&doc, "job.hang", "summary");
    assert!(summary.contains("barrier"), "{summary}");
    left_as_it_was(&job, WORLD, false);
}

#[test]
fn without_worker_servers_py_spy_reads_the_stacks_and_names_the_sleeper() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("sleep", 1, WORLD, false, 5);
    std::thread::sleep(Duration::from_millis(500));
    let (out, doc) = look(&job);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.hang"), vec![1], "{}", stdout(&out));
    let summary = text_field(&doc, "job.hang", "summary");
    assert!(
        summary.contains("rank 1 is asleep in time.sleep"),
        "{summary}"
    );
    assert!(
        summary.contains("ranks 0, 2 wait (in all_reduce)"),
        "{summary}"
    );
    let traces = text_field(&doc, "job.traces", "summary");
    assert!(traces.contains("stacks by py-spy"), "{traces}");
    // No recorder was read: nothing measured lateness, so nothing claims
    // that no rank is late.
    assert_eq!(status_of(&doc, "job.straggler"), "skip", "{}", stdout(&out));
    assert!(
        text_field(&doc, "job.straggler", "summary").starts_with("lateness not measured"),
        "{}",
        stdout(&out)
    );
    left_as_it_was(&job, WORLD, false);
}

#[test]
fn a_rank_late_at_every_step_is_the_straggler_and_the_job_runs_on() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("straggler", 1, WORLD, true, 8);
    let (out, doc) = look(&job);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.hang"), "pass", "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.straggler"), vec![1], "{}", stdout(&out));
    left_as_it_was(&job, WORLD, true);
}

/// `gpucheck job --watch --pid LAUNCHER` with `args` and `env` (its stderr
/// in the job's folder) until its stderr says `said` (`limit` at most),
/// then `then` more; ended by SIGTERM. Its exit code and stderr.
fn watch_until(
    job: &Job,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
    said: &str,
    (limit, then): (Duration, Duration),
) -> (Option<i32>, String) {
    let err_path = job.dir.join("watch.err");
    let watch = gpucheck()
        .args(["job", "--watch", "--pid"])
        .arg(job.launcher.id().to_string())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&err_path).unwrap_or_default();
    let deadline = Instant::now() + limit;
    while !read().contains(said) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(then);
    unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
    let out = watch.wait_with_output().unwrap();
    (out.status.code(), read())
}

/// `gpucheck job --watch` on a job whose ranks serve their recorders (worker
/// servers): rank 1 enters every all_reduce 150 ms late. The watch names it
/// from the recorders' entry times while the job runs, and no other rank.
#[test]
fn the_watch_names_the_rank_late_into_every_collective_from_its_recorder() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("straggler", 1, WORLD, true, 3);
    let json = job.dir.join("watch.json");
    let said = "rank 1 straggles: it starts collectives 15";
    let args = [
        "--hang-after".as_ref(),
        "30".as_ref(),
        "--json".as_ref(),
        json.as_os_str(),
    ];
    let wait = (Duration::from_secs(60), Duration::ZERO);
    let (code, err) = watch_until(&job, &args, &[], said, wait);
    assert!(err.contains(said), "{err}");
    assert!(
        !err.contains("rank 0 straggles") && !err.contains("rank 2 straggles"),
        "{err}"
    );
    assert_eq!(code, Some(0), "a straggler is a warning\n{err}");
    let doc = assert_valid_json_report(&std::fs::read_to_string(&json).unwrap());
    assert_eq!(ranks(&doc, "job.watch"), vec![1], "{err}");
    left_as_it_was(&job, WORLD, true);
}

/// `gpucheck job --watch` with NVML (the fake library): rank 1 stays out of
/// all_reduce #6 while its GPU is 97 % busy (as a rank whose host thread
/// waits on a long kernel), the others wait in it. Not a hang: the watch
/// says they wait for rank 1 at work, and diagnoses nothing.
#[test]
fn the_watch_takes_a_rank_whose_gpu_is_busy_outside_collectives_for_at_work() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("sleep", 1, WORLD, true, 0);
    std::thread::sleep(Duration::from_secs(2));
    let gpus = scenario(&job, 3, &[&[0], &[1], &[2]]);
    let said = "wait for rank 1, at work outside collectives";
    let lib = fake_nvml();
    let args = [
        "--hang-after".as_ref(),
        "6".as_ref(),
        "--nvml-lib".as_ref(),
        lib.as_os_str(),
    ];
    let env = [("FAKE_NVML_SCENARIO", gpus.as_os_str())];
    // Then twice --hang-after more: still no hang suspected.
    let wait = (Duration::from_secs(45), Duration::from_secs(12));
    let (_, err) = watch_until(&job, &args, &env, said, wait);
    assert!(err.contains(said), "{err}");
    assert!(!err.contains("diagnosing"), "{err}");
}

/// One line of NCCL Inspector's verbose output (the format of NCCL's
/// `plugins/profiler/inspector/inspector_json.cc`, as in
/// tests/fixtures/nccl_inspector): `rank` of a `world`-rank communicator
/// in process `pid` started all-reduce `seq` at `start_us`.
fn inspector_line(rank: u32, world: u32, pid: u32, seq: u64, start_us: u64) -> String {
    format!(
        r#"{{"header":{{"id":"0x5eed","comm_name":"DP","rank":{rank},"n_ranks":{world},"nnodes":1}},"metadata":{{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":{start_us},"hostname":"vm","pid":{pid}}},"coll_perf":{{"coll":"AllReduce","coll_sn":{seq},"coll_msg_size_bytes":1048576,"coll_exec_time_us":900,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":1.1,"coll_busbw_gbs":1.5,"event_trace_sn":{{"coll_start_sn":1,"coll_stop_sn":2,"kernel_events":[{{"channel_id":0,"kernel_start_sn":3,"kernel_stop_sn":4,"kernel_record_sn":5}}]}},"event_trace_ts":{{"coll_start_ts":{start_us},"coll_stop_ts":{},"kernel_events":[{{"channel_id":0,"kernel_start_ts":{},"kernel_stop_ts":{},"kernel_record_ts":{}}}]}}}}}}"#,
        start_us + 30,
        start_us + 50,
        start_us + 950,
        start_us + 950
    )
}

/// A job whose ranks' NCCL writes Inspector output (their environment names
/// the plugin and the folder; the lines, as the Inspector writes them, are
/// put there for each rank's pid, rank 1 starting every all-reduce 150 ms
/// late): the watch reads the folder and names rank 1, no other.
#[test]
fn the_watch_names_the_late_rank_from_nccl_inspector_output() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let out_dir = tempfile::tempdir().unwrap();
    let folder = out_dir.path().join("nccl-inspector");
    std::fs::create_dir_all(&folder).unwrap();
    RANK_ENV.with(|e| {
        *e.borrow_mut() = format!(
            "NCCL_PROFILER_PLUGIN=inspector NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR={} ",
            folder.display()
        )
    });
    let job = start("healthy", -1, WORLD, false, 3);
    RANK_ENV.with(|e| e.borrow_mut().clear());
    let base = 1_765_120_000_000_000u64;
    for (rank, pid) in pid_of_rank(&job) {
        let late = if rank == 1 {
            150_000
        } else {
            u64::from(rank) * 300
        };
        let text: String = (1..=20u64)
            .map(|seq| inspector_line(rank, WORLD, pid, seq, base + seq * 200_000 + late) + "\n")
            .collect();
        std::fs::write(folder.join(format!("vm-pid{pid}.log")), text).unwrap();
    }
    let said = "rank 1 straggles: it starts collectives 150 ms after the first rank";
    let args = ["--hang-after".as_ref(), "30".as_ref()];
    let wait = (Duration::from_secs(60), Duration::ZERO);
    let (_, err) = watch_until(&job, &args, &[], said, wait);
    assert!(err.contains(said), "{err}");
    assert!(
        !err.contains("rank 0 straggles") && !err.contains("rank 2 straggles"),
        "{err}"
    );
}

#[test]
fn a_single_process_where_world_size_says_four_is_named() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start_some("lonely", -1, 1, 4, false, 0);
    wait_for_rank(&job);
    // The kernel's OOM killer took a process since the rank started (and
    // one before it did, which is not the job's).
    let log = job.dir.join("dmesg.txt");
    std::fs::write(
        &log,
        format!(
            "[    5.000000] Out of memory: Killed process 77 (old) total-vm:1kB, anon-rss:1kB\n\
             [{:>12.6}] Out of memory: Killed process 99999 (python) total-vm:9kB, anon-rss:8kB\n",
            uptime_s()
        ),
    )
    .unwrap();
    let out = gpucheck()
        .args([
            "job",
            "--pid",
            &job.launcher.id().to_string(),
            "--json",
            "-",
            "--kernel-log",
        ])
        .arg(&log)
        .output()
        .unwrap();
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.traces"), "fail");
    let summary = text_field(&doc, "job.traces", "summary");
    assert!(summary.contains("1 of 4 ranks run here"), "{summary}");
    assert!(summary.contains("local ranks 1-3 not running"), "{summary}");
    assert!(
        summary.contains("OOM killer killed pid 99999 (python)") && !summary.contains("old"),
        "{summary}"
    );
    left_as_it_was(&job, 1, false);
}

/// Wait until the job's one rank has imported torch and waits at init.
fn wait_for_rank(job: &Job) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pids = rank_pids(job);
        let ready = pids.iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/maps")).is_ok_and(|m| m.contains("libtorch"))
        });
        if ready {
            std::thread::sleep(Duration::from_secs(2));
            return;
        }
        assert!(Instant::now() < deadline, "the rank did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn no_job_here_is_a_usage_error_naming_what_was_looked_for() {
    // A process with no rank under it (another test's job may run beside).
    let mut idle = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = idle.id().to_string();
    let out = gpucheck().args(["job", "--pid", &pid]).output().unwrap();
    let _ = idle.kill();
    let _ = idle.wait();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("no job runs here under pid {pid}")),
        "{err}"
    );
    assert!(err.contains("RANK and WORLD_SIZE"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// Each rank's pid, by rank (from the RANK in its environment).
fn pid_of_rank(job: &Job) -> Vec<(u32, u32)> {
    let mut pairs: Vec<(u32, u32)> = rank_pids(job)
        .into_iter()
        .filter_map(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let rank = env
                .split(|b| *b == 0)
                .find_map(|v| v.strip_prefix(b"RANK="))
                .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())?;
            Some((rank, pid))
        })
        .collect();
    pairs.sort_unstable();
    pairs
}

/// A fake NVML scenario of `gpus` H100s where GPU `g` lists the ranks
/// `on[g]` as its processes (busy when it holds any).
fn scenario(job: &Job, gpus: u32, on: &[&[u32]]) -> PathBuf {
    scenario_with(job, gpus, on, &[])
}

/// [`scenario`] with more attributes for some GPUs: (gpu, "key=value ...").
fn scenario_with(job: &Job, gpus: u32, on: &[&[u32]], extra: &[(u32, &str)]) -> PathBuf {
    let pids = pid_of_rank(job);
    let mut text = String::from(
        "system driver=570.86.15 nvml=12.570.86.15 cuda=12080\n\
         gpus 4 name=\"NVIDIA H100 80GB HBM3\" util=0 throttle=none sm_clock=1980 temp_c=55\n",
    )
    .replace("gpus 4", &format!("gpus {gpus}"));
    for g in 0..gpus {
        text.push_str(&format!("gpu {g} bus=00000000:{:02X}:00.0", 0x18 + g));
        for rank in on.get(g as usize).copied().unwrap_or(&[]) {
            let pid = pids
                .iter()
                .find(|(r, _)| r == rank)
                .expect("rank running")
                .1;
            text.push_str(&format!(" util=97 proc={pid}:2048:python"));
        }
        for (_, attrs) in extra.iter().filter(|(i, _)| *i == g) {
            text.push_str(&format!(" {attrs}"));
        }
        text.push('\n');
    }
    let path = job.dir.join(format!("gpus-{}.scenario", on.len()));
    std::fs::write(&path, text).unwrap();
    path
}

/// `gpucheck job --pid ... --nvml-lib FAKE` with a scenario (and a kernel log).
fn look_with(
    job: &Job,
    scenario: &std::path::Path,
    log: Option<&std::path::Path>,
) -> (Output, serde_json::Value) {
    let mut cmd = gpucheck();
    cmd.args([
        "job",
        "--pid",
        &job.launcher.id().to_string(),
        "--json",
        "-",
        "--nvml-lib",
    ])
    .arg(fake_nvml())
    .env("FAKE_NVML_SCENARIO", scenario);
    if let Some(log) = log {
        cmd.arg("--kernel-log").arg(log);
    }
    let out = cmd.output().expect("gpucheck runs");
    let doc = assert_valid_json_report(&stdout(&out));
    (out, doc)
}

fn uptime_s() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse().ok())
        .expect("/proc/uptime")
}

#[test]
fn ranks_on_one_gpu_and_an_xid_since_the_start_are_joined_to_the_ranks() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("healthy", -1, WORLD, true, 3);

    // Every rank on GPU 0, GPUs 1-3 idle: no set_device(LOCAL_RANK).
    let crowded = scenario(&job, 4, &[&[0, 1, 2]]);
    let (out, doc) = look_with(&job, &crowded, None);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.gpus"), "fail", "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.gpus"), vec![0, 1, 2]);
    let summary = text_field(&doc, "job.gpus", "summary");
    assert!(
        summary.contains("ranks 0-2 all run on GPU 0; GPU 1-3 hold no rank"),
        "{summary}"
    );
    assert!(
        text_field(&doc, "job.gpus", "hint").contains("set_device"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        status_of(&doc, "job.hang"),
        "pass",
        "a running job is not hung"
    );

    // One rank per GPU, and GPU 1 fell off the bus after the job started;
    // an Xid from before the job started is not the job's.
    let placed = scenario(&job, 3, &[&[0], &[1], &[2]]);
    let log = job.dir.join("dmesg.txt");
    std::fs::write(
        &log,
        format!(
            "[    5.000000] NVRM: Xid (PCI:0000:1a:00): 79, pid=1, name=old, GPU has fallen off the bus.\n\
             [{:>12.6}] NVRM: Xid (PCI:0000:19:00): 79, pid=0, name=python, GPU has fallen off the bus.\n",
            uptime_s()
        ),
    )
    .unwrap();
    let (out, doc) = look_with(&job, &placed, Some(&log));
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.gpus"), "fail", "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.gpus"), vec![1], "only the rank on GPU 1");
    let summary = text_field(&doc, "job.gpus", "summary");
    assert!(
        summary.contains("GPU 1 (") && summary.contains("00000000:19:00.0"),
        "{summary}"
    );
    assert!(
        summary.contains("Xid 79") && summary.contains("rank 1 runs on it"),
        "{summary}"
    );
    assert_eq!(
        result(&doc, "job.gpus")["action"],
        "reboot_node",
        "{}",
        stdout(&out)
    );

    // Without the Xid: one rank per GPU passes.
    let clean = job.dir.join("clean.txt");
    std::fs::write(&clean, "[    5.000000] NVRM: Xid (PCI:0000:1a:00): 79, pid=1, name=old, GPU has fallen off the bus.\n").unwrap();
    let (out, doc) = look_with(&job, &placed, Some(&clean));
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let summary = text_field(&doc, "job.gpus", "summary");
    assert!(
        summary.contains("rank 0 on GPU 0, rank 1 on GPU 1, rank 2 on GPU 2"),
        "{summary}"
    );
    left_as_it_was(&job, WORLD, true);
}

#[test]
fn a_rank_held_back_by_its_data_loader_is_the_straggler_with_the_loader_named() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("loader", 2, WORLD, true, 8);
    let (out, doc) = look(&job);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.hang"), "pass", "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.straggler"), vec![2], "{}", stdout(&out));
    let summary = text_field(&doc, "job.straggler", "summary");
    assert!(
        summary.contains("rank 2 was caught loading data"),
        "{summary}"
    );
    assert!(
        summary.contains("__getitem__"),
        "the dataset's frame: {summary}"
    );
    assert!(
        text_field(&doc, "job.straggler", "hint").contains("num_workers"),
        "{}",
        stdout(&out)
    );
    left_as_it_was(&job, WORLD, true);
}

#[test]
fn exec_prepares_the_jobs_recorder_paths_and_ras_port_unless_set() {
    let run_id = format!("live-test-{}", std::process::id());
    let out = gpucheck()
        .args(["exec", "--only", "host.shm", "--", "sh", "-c", "env"])
        .env("GPUCHECK_RUN_ID", &run_id)
        .env("NCCL_RAS_ADDR", "localhost:28028")
        .env("TORCH_FR_BUFFER_SIZE", "0")
        .env_remove("TORCH_FR_DUMP_TEMP_FILE")
        .env_remove("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
        .env_remove("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let env = stdout(&out);
    let dir = std::env::temp_dir().join(format!("gpucheck-job-{run_id}"));
    assert!(
        env.contains(&format!(
            "TORCH_FR_DUMP_TEMP_FILE={}/fr_rank_",
            dir.display()
        )),
        "{env}"
    );
    assert!(
        env.contains(&format!(
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE={}/pipe_rank_",
            dir.display()
        )),
        "{env}"
    );
    assert!(
        env.contains("NCCL_RAS_ADDR=localhost:28028\n"),
        "the user's own is kept: {env}"
    );
    assert!(dir.is_dir(), "the dump folder is made");
    let err = stderr(&out);
    assert!(
        err.contains("TORCH_FR_BUFFER_SIZE=0 turns the Flight Recorder off"),
        "{err}"
    );
    assert!(
        err.contains(&format!("dumps go to {}", dir.display())),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // Without a RAS address of its own, the job gets one on a free port.
    let out = gpucheck()
        .args(["exec", "--only", "host.shm", "--", "sh", "-c", "env"])
        .env("GPUCHECK_RUN_ID", &run_id)
        .env_remove("NCCL_RAS_ADDR")
        .output()
        .unwrap();
    let env = stdout(&out);
    let port: Option<u16> = env
        .lines()
        .find_map(|l| l.strip_prefix("NCCL_RAS_ADDR=localhost:"))
        .and_then(|p| p.parse().ok());
    assert!(port.is_some_and(|p| p > 0), "{env}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn through_the_dump_pipe_the_recorders_name_the_rank_that_never_joined() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start_with("sleep", 2, WORLD, WORLD, false, 5, true);
    std::thread::sleep(Duration::from_millis(500));
    let (out, doc) = look(&job);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.hang"), vec![2], "{}", stdout(&out));
    let summary = text_field(&doc, "job.hang", "summary");
    assert!(
        summary.contains("rank 2 never joined all_reduce #6"),
        "{summary}"
    );
    assert!(
        summary.contains("rank 2 is asleep in time.sleep"),
        "{summary}"
    );
    let traces = text_field(&doc, "job.traces", "summary");
    assert!(
        traces.contains("recorders of 3 ranks read from their dump pipes"),
        "{traces}"
    );
    assert!(traces.contains("stacks by py-spy"), "{traces}");
    for r in 0..WORLD {
        assert!(
            job.dir.join(format!("fr_rank_{r}")).is_file(),
            "rank {r} dumped on request"
        );
    }
    left_as_it_was(&job, WORLD, false);
}

#[test]
fn a_healthy_job_read_through_its_dump_pipes_is_moving_and_nobody_is_blamed() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start_with("healthy", -1, WORLD, WORLD, false, 3, true);
    let (out, doc) = look(&job);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        text_field(&doc, "job.hang", "summary").contains("moving"),
        "{}",
        stdout(&out)
    );
    for id in ["job.hang", "job.straggler"] {
        assert!(ranks(&doc, id).is_empty(), "{id} blames nobody");
    }
    left_as_it_was(&job, WORLD, true);
}

#[test]
fn a_jobs_state_is_captured_and_replayed_after_the_job_is_gone() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("sleep", 1, WORLD, true, 5);
    std::thread::sleep(Duration::from_millis(500));
    let capture =
        std::env::temp_dir().join(format!("gpucheck-job-capture-{}.json", std::process::id()));
    let out = gpucheck()
        .args([
            "job",
            "--pid",
            &job.launcher.id().to_string(),
            "--quiet",
            "--capture",
        ])
        .arg(&capture)
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    left_as_it_was(&job, WORLD, false);
    drop(job);

    // The job is gone: the replay judges what was captured.
    let out = gpucheck()
        .args(["job", "--json", "-", "--replay"])
        .arg(&capture)
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let doc = assert_valid_json_report(&stdout(&out));
    assert_eq!(ranks(&doc, "job.hang"), vec![1]);
    let summary = text_field(&doc, "job.hang", "summary");
    assert!(
        summary.contains("rank 1 never joined all_reduce #6"),
        "{summary}"
    );
    assert!(summary.contains("time.sleep(3600)"), "{summary}");

    // A machine run cannot replay it, nor gpucheck job a machine's capture.
    let out = gpucheck().arg("--replay").arg(&capture).output().unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("replay it with gpucheck job --replay FILE"),
        "{}",
        stderr(&out)
    );
    let machine = capture.with_extension("machine.json");
    let out = gpucheck()
        .args(["--profile", "quick", "--only", "host.shm", "--capture"])
        .arg(&machine)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = gpucheck()
        .args(["job", "--replay"])
        .arg(&machine)
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("not by gpucheck job"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_file(&capture);
    let _ = std::fs::remove_file(&machine);
}

#[test]
fn a_straggler_on_a_gpu_in_hw_slowdown_is_joined_to_it() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("straggler", 1, WORLD, true, 8);
    let slow = scenario_with(
        &job,
        3,
        &[&[0], &[1], &[2]],
        &[(1, "throttle=hw_slowdown temp_c=88 sm_clock=1410")],
    );
    let (out, doc) = look_with(&job, &slow, None);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.straggler"), vec![1], "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.gpus"), "fail", "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.gpus"), vec![1]);
    let summary = text_field(&doc, "job.gpus", "summary");
    assert!(summary.contains("rank 1 is the straggler"), "{summary}");
    assert!(
        summary.contains("GPU 1 (") && summary.contains("HW slowdown while at 88 °C"),
        "{summary}"
    );
    assert_eq!(result(&doc, "job.gpus")["action"], "service_hardware");

    // The same job on healthy GPUs: the straggler is named, no GPU is blamed.
    let healthy = scenario(&job, 3, &[&[0], &[1], &[2]]);
    let (out, doc) = look_with(&job, &healthy, None);
    assert_eq!(ranks(&doc, "job.straggler"), vec![1], "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.gpus"), "pass", "{}", stdout(&out));
    left_as_it_was(&job, WORLD, true);
}

#[test]
fn gpus_starved_while_a_rank_loads_data_are_named_with_the_loader_fix() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("loader", 2, WORLD, true, 8);
    let idle = scenario_with(
        &job,
        3,
        &[&[0], &[1], &[2]],
        &[(0, "util=20"), (1, "util=25"), (2, "util=12")],
    );
    let (out, doc) = look_with(&job, &idle, None);
    assert_eq!(status_of(&doc, "job.gpus"), "warn", "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.gpus"), vec![2], "{}", stdout(&out));
    let summary = text_field(&doc, "job.gpus", "summary");
    assert!(
        summary.contains("under 40% busy (at most 25%)") && summary.contains("rank 2 load"),
        "{summary}"
    );
    assert!(
        text_field(&doc, "job.gpus", "hint").contains("num_workers"),
        "{}",
        stdout(&out)
    );
    left_as_it_was(&job, WORLD, true);
}

#[test]
fn nccl_ras_is_asked_once_and_its_faults_named() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("gpucheck-ras-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("ras.json");
    let mut fake = Command::new(venv_python())
        .arg(root().join("tests/fixtures/nccl_ras/fake_ras.py"))
        .args([
            "--port",
            &port.to_string(),
            "--sample",
            "incomplete",
            "--lifetime",
            "90",
            "--log",
        ])
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The fake says where it listens once it does.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(fake.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("listening"), "{line}");
    RANK_ENV.with(|e| *e.borrow_mut() = format!("NCCL_RAS_ADDR=127.0.0.1:{port} "));
    let job = start("healthy", -1, WORLD, true, 3);
    RANK_ENV.with(|e| e.borrow_mut().clear());
    let (out, doc) = look(&job);
    let _ = fake.kill();
    let _ = fake.wait();
    assert_eq!(status_of(&doc, "job.nccl_ras"), "fail", "{}", stdout(&out));
    assert_eq!(code(&out), 1);
    assert!(
        ranks(&doc, "job.nccl_ras").contains(&21),
        "{}",
        stdout(&out)
    );
    let summary = text_field(&doc, "job.nccl_ras", "summary");
    assert!(
        summary.contains("3487984") && summary.contains("172.16.64.213"),
        "{summary}"
    );
    let asked: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!(
        asked["connections"], 1,
        "RAS is asked exactly once: {asked}"
    );
    assert_eq!(
        asked["commands"][0],
        serde_json::json!(["CLIENT PROTOCOL 2", "TIMEOUT 2", "VERBOSE STATUS"])
    );
    left_as_it_was(&job, WORLD, true);
    let _ = std::fs::remove_dir_all(&dir);
    drop(job);

    // Nothing listening on the job's RAS address: skipped, not an error.
    let job = start("healthy", -1, WORLD, true, 3);
    let (out, doc) = look(&job);
    assert_eq!(status_of(&doc, "job.nccl_ras"), "skip", "{}", stdout(&out));
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

#[test]
fn a_gpu_lost_while_the_job_runs_is_named_with_the_rank_that_was_on_it() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("healthy", -1, WORLD, true, 3);
    // GPU 2 fell off the bus: NVML counts it but cannot open it, so its
    // process list (rank 2's) is gone with it.
    let lost = scenario_with(
        &job,
        3,
        &[&[0], &[1]],
        &[(2, "err=nvmlDeviceGetHandleByIndex_v2:GPU_IS_LOST")],
    );
    let (out, doc) = look_with(&job, &lost, None);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.gpus"), "fail", "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.gpus"), vec![2], "{}", stdout(&out));
    let summary = text_field(&doc, "job.gpus", "summary");
    assert!(
        summary.contains("GPU 2 is counted but cannot be opened"),
        "{summary}"
    );
    assert!(summary.contains("rank 2 on no other GPU"), "{summary}");
    assert_eq!(result(&doc, "job.gpus")["action"], "reboot_node");
    left_as_it_was(&job, WORLD, true);
}

/// `gpucheck job --nnodes 2` for one node of a job split in two.
fn node(job: &Job, node_rank: u32, rdzv: u16) -> std::process::Child {
    gpucheck()
        .args([
            "job",
            "--pid",
            &job.launcher.id().to_string(),
            "--json",
            "-",
        ])
        .args(["--nnodes", "2", "--node-rank", &node_rank.to_string()])
        .args([
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            &rdzv.to_string(),
        ])
        .args(["--rdzv-timeout", "60"])
        .arg("--python")
        .arg(venv_python())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpucheck runs")
}

#[test]
fn across_two_nodes_node_0_names_the_rank_of_the_other_node() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    // One 4-rank job: ranks 0, 1 on "node A", ranks 2, 3 on "node B"; rank 3
    // sleeps instead of calling all_reduce #6.
    let port = free_port();
    let a = launch("sleep", 3, &[0, 1], 4, true, false, port);
    let b = launch("sleep", 3, &[2, 3], 4, true, false, port);
    wait_steps(&a, "sleep", &[0, 1], 5, 4);
    wait_steps(&b, "sleep", &[2, 3], 5, 4);
    std::thread::sleep(Duration::from_millis(500));
    let rdzv = free_port();
    let zero = node(&a, 0, rdzv);
    let one = node(&b, 1, rdzv);
    let (zero, one) = (
        zero.wait_with_output().unwrap(),
        one.wait_with_output().unwrap(),
    );
    assert_eq!(code(&zero), 1, "{}{}", stdout(&zero), stderr(&zero));
    assert_eq!(code(&one), 1, "{}{}", stdout(&one), stderr(&one));
    let fleet: serde_json::Value = serde_json::from_str(&stdout(&zero)).expect("the job's JSON");
    let hang = fleet["fleet"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["id"] == "job.hang"))
        .expect("job.hang judged over the whole job")
        .clone();
    assert_eq!(hang["ranks"], serde_json::json!([3]), "{hang}");
    let summary = hang["summary"].as_str().unwrap_or("");
    assert!(
        summary.contains("rank 3 never joined all_reduce #6"),
        "{summary}"
    );
    assert!(
        summary.contains("rank 3 (on node 1 (") && summary.contains(") is asleep in time.sleep"),
        "{summary}"
    );
    // Each node runs its share of the 4 ranks: no node lacks ranks.
    for n in 0..2 {
        let traces = fleet["nodes"][n]["results"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["id"] == "job.traces"))
            .expect("each node's job.traces");
        assert_eq!(traces["status"], "pass", "{traces}");
    }
    // Node A's own look names nobody: rank 3 is not there.
    let node_a = &fleet["nodes"][0];
    let own = node_a["results"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["id"] == "job.hang"))
        .expect("node 0's own job.hang");
    assert!(
        own["ranks"].as_array().is_none_or(|r| r.is_empty()),
        "{own}"
    );
    assert!(
        own["summary"]
            .as_str()
            .unwrap_or("")
            .contains("run on other nodes: no rank here"),
        "{own}"
    );
    assert!(
        !stdout(&zero).contains("job_share"),
        "the shares stay out of the report"
    );
    assert!(
        stdout(&one).contains("JOB: PROBLEM FOUND"),
        "{}",
        stdout(&one)
    );
    left_as_it_was(&a, 2, false);
    left_as_it_was(&b, 2, false);
}

#[test]
fn the_rank_a_hang_waits_for_is_named_with_its_gpu() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let job = start("sleep", 2, WORLD, true, 5);
    std::thread::sleep(Duration::from_millis(500));
    let placed = scenario(&job, 3, &[&[0], &[1], &[2]]);
    let (out, doc) = look_with(&job, &placed, None);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(ranks(&doc, "job.hang"), vec![2], "{}", stdout(&out));
    let summary = text_field(&doc, "job.hang", "summary");
    assert!(
        summary.contains("rank 2 (on GPU 2 (") && summary.contains("00000000:1A:00.0)) is asleep"),
        "{summary}"
    );
    left_as_it_was(&job, WORLD, false);
}

#[test]
fn an_rdma_port_the_jobs_nccl_uses_down_is_named() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    RANK_ENV.with(|e| *e.borrow_mut() = "NCCL_IB_HCA=mlx5_0,mlx5_3 ".to_string());
    let job = start("healthy", -1, WORLD, true, 3);
    RANK_ENV.with(|e| e.borrow_mut().clear());
    // A node whose mlx5_3 port is DOWN (tests/fixtures/sysfs/port_down).
    let look_at = |sysfs: &str| {
        let out = gpucheck()
            .args([
                "job",
                "--pid",
                &job.launcher.id().to_string(),
                "--json",
                "-",
            ])
            .env(
                "GPUCHECK_SYSFS_ROOT",
                root().join("tests/fixtures/sysfs").join(sysfs),
            )
            .output()
            .unwrap();
        let doc = assert_valid_json_report(&stdout(&out));
        (out, doc)
    };
    let (out, doc) = look_at("port_down");
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(status_of(&doc, "job.fabric"), "fail", "{}", stdout(&out));
    let summary = text_field(&doc, "job.fabric", "summary");
    assert!(
        summary.contains("mlx5_3/1") && summary.contains("DOWN"),
        "{summary}"
    );
    assert_eq!(result(&doc, "job.fabric")["action"], "service_hardware");
    let (out, doc) = look_at("ndr_active");
    assert_ne!(status_of(&doc, "job.fabric"), "fail", "{}", stdout(&out));
    left_as_it_was(&job, WORLD, true);
}

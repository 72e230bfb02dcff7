//! GB200 / GB300 NVL72 racks through the real binary: `fabric.mnnvl` on the
//! fake NVML's fabric info (struct v3, v2 and the v1 call, with their
//! version handshake), the fake `nvidia-imex-ctl` and fixture trees standing
//! for /dev, /etc and /proc (tests/fixtures/imex/README.md), and an HGX H100
//! box where the multi-node fabric does not apply.

mod common;

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{
    assert_valid_json_report, build_fixture_lib, fake_nvml, gpucheck, processes_matching, result,
    root, status_of, stderr, stdout, text_field, venv_python, LOAD_CHECKS,
};
use serde_json::Value;

const ID: &str = "fabric.mnnvl";

/// The NCCL settings the check reads, kept out of the tests' environment.
const NCCL_SETTINGS: [&str; 3] = ["NCCL_MNNVL_ENABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"];

fn fixture(rel: &str) -> PathBuf {
    let p = root().join("tests/fixtures").join(rel);
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// The fake NVML as an R525-R545 driver: the v1 fabric call only.
fn fake_nvml_r535() -> PathBuf {
    let built = root().join("target/fixtures/nvml-r535/libnvidia-ml.so.1");
    let source = root().join("tests/fixtures/fake_nvml.c");
    if let (Ok(b), Ok(s)) = (std::fs::metadata(&built), std::fs::metadata(&source)) {
        if s.modified().ok() > b.modified().ok() {
            let _ = std::fs::remove_file(&built);
        }
    }
    build_fixture_lib("fake_nvml_r535.c", "nvml-r535", "libnvidia-ml.so.1")
}

/// The node's NVML-backed checks with `fabric.mnnvl` selected by its group
/// (a check named by id that skips leaves the run "not verified").
const WHOLE_NODE: &str = "gpu,fabric";
const NOT_NVML: &str = "fabric.xid,fabric.rdma,fabric.gpudirect,fabric.net_plugin";

/// How one run is set up.
struct Rack<'a> {
    scenario: &'a str,
    /// tests/fixtures/imex/root/<root>.
    root: &'a str,
    /// tests/fixtures/imex/<imex>, the fake nvidia-imex-ctl's answers.
    imex: &'a str,
    only: &'a str,
    envs: Vec<(&'a str, String)>,
    nvml: PathBuf,
}

impl<'a> Rack<'a> {
    fn new(scenario: &'a str) -> Self {
        Rack {
            scenario,
            root: "ready",
            imex: "ready",
            only: ID,
            envs: Vec::new(),
            nvml: fake_nvml(),
        }
    }

    fn run(&self) -> (Output, Value) {
        let out = self.command(&[]).output().expect("run gpucheck");
        let doc = assert_valid_json_report(&stdout(&out));
        (out, doc)
    }

    /// `gpucheck FIRST...` with this rack's fakes and roots, and the checks
    /// selected.
    fn command(&self, first: &[&str]) -> std::process::Command {
        let base = fixture(&format!("imex/root/{}", self.root));
        let path = format!(
            "{}:{}",
            fixture("imex/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = gpucheck();
        cmd.args(first);
        for name in NCCL_SETTINGS
            .iter()
            .chain(&["NVIDIA_IMEX_CHANNELS", "FAKE_IMEX_HANG"])
        {
            cmd.env_remove(name);
        }
        cmd.env(
            "FAKE_NVML_SCENARIO",
            fixture(&format!("nvml/{}.scenario", self.scenario)),
        )
        .env("GPUCHECK_DEV_ROOT", base.join("dev"))
        .env("GPUCHECK_ETC_ROOT", base.join("etc"))
        .env("GPUCHECK_PROC_ROOT", base.join("proc"))
        .env(
            "FAKE_IMEX_STATE",
            root().join("tests/fixtures/imex").join(self.imex),
        )
        .env("PATH", path)
        .envs(self.envs.iter().map(|(k, v)| (*k, v.as_str())))
        .arg("--nvml-lib")
        .arg(&self.nvml)
        .args([
            "--only",
            self.only,
            "--skip",
            &format!("{LOAD_CHECKS},{NOT_NVML}"),
        ])
        .args(["--format", "json", "--color", "never"]);
        cmd
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn summary(doc: &Value) -> String {
    text_field(doc, ID, "summary")
}

fn hint(doc: &Value) -> String {
    text_field(doc, ID, "hint")
}

fn action(doc: &Value) -> String {
    result(doc, ID)["action"].as_str().unwrap_or("").to_string()
}

/// Every result's id and status that is not pass or skip.
fn not_passing(doc: &Value) -> Vec<(String, String)> {
    doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| !matches!(r["status"].as_str(), Some("pass") | Some("skip")))
        .map(|r| {
            (
                r["id"].as_str().unwrap_or("").to_string(),
                format!("{}: {}", r["status"], r["summary"]),
            )
        })
        .collect()
}

// ------------------------------------------------------------ whole node

#[test]
fn a_healthy_nvl72_tray_is_ready_with_no_warning() {
    let mut rack = Rack::new("gb200_nvl72_tray");
    rack.only = WHOLE_NODE;
    let (out, doc) = rack.run();
    assert_eq!(not_passing(&doc), Vec::<(String, String)>::new());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, ID), "pass");
    assert_eq!(
        summary(&doc),
        "GPUs 0, 1, 2, 3 in NVLink domain cluster 6a130f54-faaa-4b8f-847f-be44ab70f917 clique \
         32766; IMEX channel0, daemon READY, domain UP with 2 nodes"
    );
}

#[test]
fn an_hgx_h100_box_is_ready_and_the_multi_node_fabric_does_not_apply() {
    let mut rack = Rack::new("healthy_h100_sxm_x8");
    rack.only = WHOLE_NODE;
    let (out, doc) = rack.run();
    assert_eq!(not_passing(&doc), Vec::<(String, String)>::new());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, ID), "skip");
    assert_eq!(
        summary(&doc),
        "multi-node NVLink fabric does not apply: 8 GPUs registered with a single-node NVLink \
         fabric (cluster UUID all zeros, as on HGX/DGX)"
    );
}

#[test]
fn pcie_gpus_without_a_fabric_skip_too() {
    let mut rack = Rack::new("healthy_l40s");
    rack.only = WHOLE_NODE;
    let (out, doc) = rack.run();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, ID), "skip");
    assert!(
        summary(&doc).contains("no GPU reports an NVLink fabric"),
        "{}",
        summary(&doc)
    );
}

// ------------------------------------------------------------ fabric info

#[test]
fn an_unhealthy_fabric_fails_naming_each_gpus_fault_and_asks_for_service() {
    let (out, doc) = Rack::new("gb200_fabric_unhealthy").run();
    assert_eq!(code(&out), 1);
    assert_eq!(status_of(&doc, ID), "fail");
    assert_eq!(
        summary(&doc),
        "GPU 0: NVLink fabric health: unhealthy; GPU 1: NVLink fabric health: unhealthy; \
         GPU 2: NVLink fabric health: unhealthy, NVLink fabric route unhealthy"
    );
    assert_eq!(action(&doc), "service_hardware");
    assert!(
        hint(&doc).starts_with("the NVLink fabric reports GPUs 0, 1, 2, 3 unhealthy"),
        "{}",
        hint(&doc)
    );
}

#[test]
fn insufficient_resources_reads_as_its_nvml_name_here_and_in_the_topology() {
    let mut rack = Rack::new("gb200_insufficient_resources");
    rack.only = "gpu.topology,fabric.mnnvl";
    let (out, doc) = rack.run();
    assert_eq!(code(&out), 1);
    assert!(summary(&doc).starts_with(
        "GPU 0: NVLink fabric registration failed: NVML_ERROR_INSUFFICIENT_RESOURCES"
    ));
    assert_eq!(action(&doc), "contact_provider");
    assert!(
        hint(&doc).contains("the NVLink fabric had no room"),
        "{}",
        hint(&doc)
    );
    let topology = text_field(&doc, "gpu.topology", "summary");
    assert!(
        topology.contains("NVML_ERROR_INSUFFICIENT_RESOURCES"),
        "{topology}"
    );
    assert!(!topology.contains("unexpected enum variant"), "{topology}");
}

#[test]
fn in_progress_right_after_boot_warns_and_a_day_later_fails() {
    let mut rack = Rack::new("gb200_in_progress");
    rack.root = "just_booted";
    let (out, doc) = rack.run();
    assert_eq!(code(&out), 0, "a warning exits 0");
    assert_eq!(status_of(&doc, ID), "warn");
    assert!(
        summary(&doc).starts_with("GPU 0: NVLink fabric registration in progress, 95 s after boot")
    );
    assert!(
        hint(&doc).contains("wait and run gpucheck again"),
        "{}",
        hint(&doc)
    );

    let (out, doc) = Rack::new("gb200_in_progress").run();
    assert_eq!(code(&out), 1);
    assert_eq!(status_of(&doc, ID), "fail");
    assert!(summary(&doc)
        .starts_with("GPU 0: NVLink fabric registration still in progress 1440 min after boot"));
    assert_eq!(action(&doc), "reset_gpu");
    assert!(
        hint(&doc).contains("sudo nvidia-smi -r -i 0,1,2,3"),
        "{}",
        hint(&doc)
    );
}

#[test]
fn a_tray_split_across_two_cliques_fails() {
    let (out, doc) = Rack::new("gb200_split_clique").run();
    assert_eq!(code(&out), 1);
    assert_eq!(
        summary(&doc),
        "this node's GPUs are in different NVLink domains: GPUs 0, 1 in cluster \
         6a130f54-faaa-4b8f-847f-be44ab70f917 clique 32766; GPUs 2, 3 in cluster \
         6a130f54-faaa-4b8f-847f-be44ab70f917 clique 32767"
    );
    assert_eq!(action(&doc), "contact_provider");
}

#[test]
fn a_driver_without_struct_v3_answers_through_v2_and_its_mask_is_judged() {
    // The scenario's driver refuses v3 with ARGUMENT_VERSION_MISMATCH; v2
    // carries no summary, so the "unhealthy" summary v3 would show is never
    // read, and GPU 1's mask (route recovery) is.
    let (out, doc) = Rack::new("gb200_r570_v2").run();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, ID), "warn");
    assert_eq!(summary(&doc), "GPU 1: NVLink route recovery in progress");
}

#[test]
fn a_driver_with_only_the_v1_call_still_names_the_domain() {
    let mut rack = Rack::new("gb200_nvl72_tray");
    rack.nvml = fake_nvml_r535();
    let (out, doc) = rack.run();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, ID), "pass");
    assert!(summary(&doc).starts_with(
        "GPUs 0, 1, 2, 3 in NVLink domain cluster 6a130f54-faaa-4b8f-847f-be44ab70f917 clique 32766"
    ));
}

// ------------------------------------------------------------ IMEX

#[test]
fn no_imex_channel_in_the_container_fails_and_says_how_to_get_one() {
    let mut rack = Rack::new("gb200_nvl72_tray");
    rack.root = "no_channel";
    let (out, doc) = rack.run();
    assert_eq!(code(&out), 1);
    assert_eq!(
        summary(&doc),
        "no IMEX channel in /dev/nvidia-caps-imex-channels: fabric memory cannot be shared across \
         trays"
    );
    assert_eq!(action(&doc), "fix_config");
    let h = hint(&doc);
    assert!(h.contains("CUDA_ERROR_NOT_PERMITTED"), "{h}");
    assert!(h.contains("NVIDIA_IMEX_CHANNELS=0"), "{h}");
}

#[test]
fn a_daemon_waiting_for_peers_and_a_domain_down_fail_naming_the_missing_tray() {
    let mut rack = Rack::new("gb200_nvl72_tray");
    rack.imex = "waiting_for_peers";
    let (out, doc) = rack.run();
    assert_eq!(code(&out), 1);
    assert_eq!(
        summary(&doc),
        "IMEX daemon WAITING_FOR_PEERS; IMEX domain DOWN (10.114.0.12 UNAVAILABLE; not connected: \
         10.114.0.11, 10.114.0.12)"
    );
    assert!(hint(&doc).contains("nodes_config.cfg"), "{}", hint(&doc));
}

#[test]
fn a_degraded_domain_warns() {
    let mut rack = Rack::new("gb200_nvl72_tray");
    rack.imex = "degraded";
    let (out, doc) = rack.run();
    assert_eq!(code(&out), 0);
    assert_eq!(status_of(&doc, ID), "warn");
    assert!(summary(&doc).starts_with("IMEX domain DEGRADED (10.114.0.12 UNAVAILABLE"));
    assert_eq!(action(&doc), "contact_provider");
}

#[test]
fn an_imex_ctl_that_never_answers_is_bounded_and_leaves_nothing_behind() {
    let mut rack = Rack::new("gb200_nvl72_tray");
    rack.envs.push(("FAKE_IMEX_HANG", "1".to_string()));
    let started = Instant::now();
    let (out, doc) = rack.run();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status_of(&doc, ID), "warn");
    assert_eq!(summary(&doc), "`nvidia-imex-ctl -q` did not answer in 5 s");
    let fixture_bin = fixture("imex/bin/nvidia-imex-ctl");
    let left = processes_matching(&fixture_bin.display().to_string());
    assert!(left.is_empty(), "left running: {left:?}");
}

#[test]
fn a_host_imex_service_beside_the_dra_drivers_daemon_fails() {
    let mut rack = Rack::new("gb200_nvl72_tray");
    rack.root = "dra_beside_host";
    let (out, doc) = rack.run();
    assert_eq!(code(&out), 1);
    assert_eq!(
        summary(&doc),
        "the host's nvidia-imex.service is enabled beside the Kubernetes DRA driver's IMEX daemon"
    );
    assert_eq!(action(&doc), "fix_config");
    assert!(
        hint(&doc).contains("systemctl disable --now nvidia-imex.service"),
        "{}",
        hint(&doc)
    );
}

// ------------------------------------------------------------ NCCL

#[test]
fn nccl_settings_that_turn_nvlink_between_trays_off_warn_in_nccl_env_with_their_cost() {
    for name in NCCL_SETTINGS {
        let mut rack = Rack::new("gb200_nvl72_tray");
        rack.only = "fabric,nccl.env";
        rack.envs.push((name, "0".to_string()));
        let (out, doc) = rack.run();
        assert_eq!(code(&out), 0, "{name}");
        assert_eq!(status_of(&doc, ID), "pass", "{name}");
        assert_eq!(status_of(&doc, "nccl.env"), "warn", "{name}");
        assert_eq!(
            text_field(&doc, "nccl.env", "summary"),
            format!("{name}=0 on a multi-node NVLink rack")
        );
        let hint = text_field(&doc, "nccl.env", "hint");
        assert!(
            hint.contains("about 50 GB/s per GPU instead of 900"),
            "{hint}"
        );
        assert_eq!(result(&doc, "nccl.env")["action"], "fix_config");
    }
    // The same setting on an HGX H100 box, with no multi-node fabric, is
    // not judged against one.
    let mut rack = Rack::new("healthy_h100_sxm_x8");
    rack.only = "fabric,nccl.env";
    rack.envs.push(("NCCL_CUMEM_ENABLE", "0".to_string()));
    let (_, doc) = rack.run();
    assert_eq!(status_of(&doc, "nccl.env"), "pass");
}

#[test]
fn explain_says_what_the_check_reads() {
    let out = gpucheck().args(["explain", ID]).output().expect("run");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("nvmlDeviceGetGpuFabricInfoV"), "{text}");
    assert!(text.contains("nvidia-imex-ctl -N -j"), "{text}");
}

// ------------------------------------------------------------ across nodes

#[test]
fn a_tray_in_no_nvlink_domain_beside_a_registered_one_fails_the_fleet() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("fleet.json");
    let spawn = |rank: u32, scenario: &str| {
        let mut rack = Rack::new(scenario);
        rack.only = WHOLE_NODE;
        let mut cmd = rack.command(&["cluster"]);
        cmd.args(["--nnodes", "2", "--node-rank", &rank.to_string()])
            .args([
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                &port.to_string(),
            ])
            .args(["--rdzv-timeout", "60", "--python"])
            .arg(venv_python())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if rank == 0 {
            cmd.arg("--json").arg(&json);
        }
        cmd.spawn().expect("start gpucheck cluster")
    };
    let mut nodes = [
        spawn(0, "gb200_nvl72_tray"),
        spawn(1, "gb200_insufficient_resources"),
    ];
    let started = Instant::now();
    while nodes
        .iter_mut()
        .any(|c| c.try_wait().ok().flatten().is_none())
    {
        if started.elapsed() > Duration::from_secs(240) {
            nodes.iter_mut().for_each(|c| drop(c.kill()));
            panic!("the cluster run did not end within 240 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut said = String::new();
    for node in &mut nodes {
        if let Some(mut err) = node.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut said);
        }
    }
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("node 0 wrote no fleet report ({e}): {said}"));
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    let fleet = doc["fleet"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["id"] == "fleet.nvlink_domains"))
        .expect("fleet.nvlink_domains in the report")
        .clone();
    assert_eq!(fleet["status"], "fail", "{fleet}");
    let summary = fleet["summary"].as_str().unwrap_or_default();
    assert!(
        summary.starts_with("node 1 (")
            && summary.contains(") in no NVLink domain beside node 0 (")
            && summary.contains(
                "in NVLink domain cluster 6a130f54-faaa-4b8f-847f-be44ab70f917 clique 32766"
            ),
        "{summary}"
    );
}

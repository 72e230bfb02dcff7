//! The Prometheus report (`--prom FILE`): the run in the text exposition
//! format 0.0.4, for node_exporter's textfile collector
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! Names follow the Prometheus naming rules
//! (<https://prometheus.io/docs/practices/naming/>): a `gpucheck_` prefix,
//! base units in the name (seconds, bytes, ratio), and a verdict as an enum
//! of labelled 0/1 series (one per status, the one that holds is 1), so a
//! rule reads `gpucheck_check_status{status="fail"} == 1`. Per-GPU series
//! carry `gpu` (the index, as DCGM exporter labels it); the UUID NVML read
//! for each index is in `gpucheck_gpu_info{gpu,uuid}`, to join on. A UUID
//! on the per-GPU series would change their identity whenever a GPU is lost
//! (its handle no longer answers, so no UUID): a series without a label
//! that its family's others carry gets it empty from node_exporter's textfile
//! collector, and `uuid=""` is no label to Prometheus. No sample carries a
//! timestamp: the textfile collector refuses them.
//!
//! Every warn-or-worse result's repair action is a `gpucheck_action` series
//! (always 1) with the `action` and the `check`, one per GPU it applies to
//! (`gpu`), or with the `port` it applies to, or with neither when it applies
//! to the node; no label is ever empty. `gpucheck_run_action` is the run's
//! most drastic action as an enum like the verdicts, so a drain rule reads
//! `gpucheck_run_action{action="service_hardware"} == 1`.
//!
//! Every series carries the run's `profile`. node_exporter's textfile
//! collector merges all `*.prom` files of its folder into one scrape and
//! drops a series that a second file repeats (the scrape still succeeds; the
//! error is only logged), so a quick-profile file and a health-profile file
//! side by side would otherwise hide one another's verdicts.

use std::fmt::Write as _;

use gpucheck_checks::domain::action::Action;
use gpucheck_checks::Status;

use super::{Reporter, Run};

pub struct Prom;

/// Every verdict, in the order the series are written.
const STATUSES: [Status; 5] = [
    Status::Pass,
    Status::Warn,
    Status::Fail,
    Status::Skip,
    Status::Error,
];

/// nccl.allreduce reports its bus bandwidth as `busbw_gbps` in GB/s, the
/// decimal gigabytes nccl-tests uses (1 GB/s = 1e9 bytes/s).
const BUSBW_METRIC: (&str, &str) = ("nccl.allreduce", "busbw_gbps");
const BYTES_PER_GB: f64 = 1e9;
/// ddp.benchmark reports its multi-GPU scaling as `scaling_efficiency`, a
/// ratio (1.0 = perfect linear scaling).
const SCALING_METRIC: (&str, &str) = ("ddp.benchmark", "scaling_efficiency");

fn status_name(status: Status) -> &'static str {
    match status {
        Status::Pass => "pass",
        Status::Warn => "warn",
        Status::Fail => "fail",
        Status::Skip => "skip",
        Status::Error => "error",
    }
}

/// A label value escaped as the format asks: backslash, double quote and
/// line feed.
pub fn label_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Significant digits a sample keeps: more than any measurement has, fewer
/// than the float noise of arithmetic on them (0.1 + 0.2 is 0.3 here, not
/// 0.30000000000000004).
const SIGNIFICANT_DIGITS: usize = 12;

/// A sample value as Go's strconv writes it: `+Inf`, `-Inf`, `NaN` spelt
/// out; finite values to [`SIGNIFICANT_DIGITS`].
fn value_text(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        let digits = SIGNIFICANT_DIGITS - 1;
        let rounded: f64 = format!("{value:.digits$e}").parse().unwrap_or(value);
        format!("{rounded}")
    }
}

/// One metric family: its HELP and TYPE lines, then its samples.
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push((labels, value));
    }

    /// Puts `profile` first on every sample (the info family names it already).
    fn with_profile(mut self, profile: &str) -> Self {
        for (labels, _) in &mut self.samples {
            if !labels.iter().any(|(k, _)| *k == "profile") {
                labels.insert(0, ("profile", profile.to_string()));
            }
        }
        self
    }

    fn write(&self, out: &mut String) {
        if self.samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} gauge", self.name);
        for (labels, value) in &self.samples {
            out.push_str(self.name);
            if !labels.is_empty() {
                let inner: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", label_value(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", inner.join(","));
            }
            let _ = writeln!(out, " {}", value_text(*value));
        }
    }
}

/// A check's metric, when the check ran and reported it.
fn metric(run: &Run, (check, name): (&str, &str)) -> Option<f64> {
    run.results
        .iter()
        .find(|r| r.id == check)
        .and_then(|r| r.outcome.metric(name))
}

/// The UUID NVML reported for each GPU index anywhere in the run (a lost
/// GPU has none).
fn uuids_by_index(run: &Run) -> std::collections::BTreeMap<u32, String> {
    let mut uuids = std::collections::BTreeMap::new();
    let rows = run.results.iter().flat_map(|r| &r.outcome.devices);
    for d in rows.filter(|d| d.label.is_none()) {
        if let Some(uuid) = d.uuid.as_ref().filter(|u| !u.is_empty()) {
            uuids.entry(d.index).or_insert_with(|| uuid.clone());
        }
    }
    uuids
}

/// One `gpucheck_action` series per result with a repair action and GPU it
/// applies to (or port, or the node), then the run's most drastic action.
fn action_families(run: &Run) -> [Family; 2] {
    let mut each = Family::new(
        "gpucheck_action",
        "A check's repair action (always 1), per GPU (gpu) or port (port) it applies to, else for the node.",
    );
    for r in &run.results {
        let (Some(action), o) = (r.outcome.action, &r.outcome) else {
            continue;
        };
        let mut labels = vec![("action", action.as_str().into()), ("check", r.id.clone())];
        if let Some(port) = o.action_port.as_ref().filter(|p| !p.is_empty()) {
            labels.push(("port", port.clone()));
        }
        let gpus: std::collections::BTreeSet<u32> = o.action_gpus.iter().copied().collect();
        if gpus.is_empty() {
            each.add(labels.clone(), 1.0);
        }
        for g in gpus {
            let mut labels = labels.clone();
            labels.insert(2, ("gpu", g.to_string()));
            each.add(labels, 1.0);
        }
    }
    let mut headline = Family::new(
        "gpucheck_run_action",
        "The run's most drastic repair action: 1 on the series whose action label holds, 0 on the others.",
    );
    let top = run.action();
    for a in Action::ALL {
        headline.add(
            vec![("action", a.as_str().into())],
            f64::from(u8::from(a == top)),
        );
    }
    [each, headline]
}

impl Reporter for Prom {
    fn render(&self, run: &Run) -> String {
        let run = &run.with_actions();
        let mut info = Family::new(
            "gpucheck_info",
            "gpucheck's version and the profile of the run (always 1).",
        );
        info.add(
            vec![
                ("version", run.tool_version.clone()),
                ("profile", run.profile.as_str().into()),
            ],
            1.0,
        );
        let mut ready = Family::new(
            "gpucheck_ready",
            "1 when the machine is ready for multi-GPU training (exit code 0), else 0.",
        );
        ready.add(Vec::new(), f64::from(u8::from(run.exit_code == 0)));
        let mut exit = Family::new(
            "gpucheck_exit_code",
            "gpucheck's exit code: 0 ready, 1 not ready, 2 usage error.",
        );
        exit.add(Vec::new(), f64::from(run.exit_code));
        let mut stamp = Family::new(
            "gpucheck_last_run_timestamp_seconds",
            "When the run started, in seconds since the Unix epoch.",
        );
        stamp.add(Vec::new(), run.started_at_unix as f64);
        let mut took = Family::new(
            "gpucheck_run_duration_seconds",
            "Wall time of the whole run in seconds.",
        );
        took.add(Vec::new(), run.duration_ms / 1000.0);
        let mut status = Family::new(
            "gpucheck_check_status",
            "A check's verdict: 1 on the series whose status label holds, 0 on the others.",
        );
        let mut duration = Family::new(
            "gpucheck_check_duration_seconds",
            "How long a check took, in seconds.",
        );
        let mut gpu = Family::new(
            "gpucheck_gpu_check_status",
            "A check's verdict for one GPU: 1 on the series whose status label holds, 0 on the others.",
        );
        let mut gpu_info = Family::new(
            "gpucheck_gpu_info",
            "The UUID NVML reported for a GPU index (always 1); a lost GPU has none.",
        );
        for (index, uuid) in uuids_by_index(run) {
            gpu_info.add(vec![("gpu", index.to_string()), ("uuid", uuid)], 1.0);
        }
        for r in &run.results {
            let ids = || vec![("check", r.id.clone()), ("group", r.group.clone())];
            for s in STATUSES {
                let mut labels = ids();
                labels.push(("status", status_name(s).into()));
                status.add(labels, f64::from(u8::from(r.outcome.status == s)));
            }
            duration.add(ids(), r.outcome.duration_ms / 1000.0);
            // GPUs by NVML index only: rows a check labels itself ("rank 1",
            // "cuda:0") count ranks or CUDA ordinals, and a second row for
            // the same GPU would repeat a series, which makes the textfile
            // collector drop the whole file.
            let mut seen = std::collections::BTreeSet::new();
            let gpus = r.outcome.devices.iter().filter(|d| d.label.is_none());
            for d in gpus.filter(|d| seen.insert(d.index)) {
                for s in STATUSES {
                    let labels = vec![
                        ("check", r.id.clone()),
                        ("gpu", d.index.to_string()),
                        ("status", status_name(s).into()),
                    ];
                    gpu.add(labels, f64::from(u8::from(d.status == s)));
                }
            }
        }
        let mut busbw = Family::new(
            "gpucheck_nccl_allreduce_busbw_bytes_per_second",
            "NCCL all-reduce bus bandwidth across the GPUs, in bytes per second.",
        );
        if let Some(gbps) = metric(run, BUSBW_METRIC) {
            busbw.add(Vec::new(), gbps * BYTES_PER_GB);
        }
        let mut scaling = Family::new(
            "gpucheck_ddp_scaling_efficiency_ratio",
            "DDP throughput on all GPUs over N times one GPU's (1 = linear scaling).",
        );
        if let Some(ratio) = metric(run, SCALING_METRIC) {
            scaling.add(Vec::new(), ratio);
        }
        let [action, run_action] = action_families(run);
        let mut out = String::new();
        for family in [
            info, ready, exit, stamp, took, status, duration, gpu, gpu_info, busbw, scaling,
            action, run_action,
        ] {
            family.with_profile(run.profile.as_str()).write(&mut out);
        }
        out
    }
}

/// A watch's own series (`gpucheck exec --watch --prom FILE`), after the
/// run's: per rank, the seconds since it last moved and whether it
/// straggles; the hang threshold in force. Pure: from the watch's memory.
pub fn watch_series(watcher: &gpucheck_checks::domain::watch::Watcher) -> String {
    let mut out = String::new();
    let profile = "profile=\"job\"";
    let _ = writeln!(
        out,
        "# HELP gpucheck_watch_hang_after_seconds How long the ranks waiting in a collective may stay still before a hang is suspected.\n\
         # TYPE gpucheck_watch_hang_after_seconds gauge\n\
         gpucheck_watch_hang_after_seconds{{{profile}}} {}",
        watcher.hang_after_s()
    );
    let still = watcher.still_for();
    if still.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "# HELP gpucheck_watch_rank_still_seconds Seconds since the rank last moved (its recorder, its stack or its CPU time).\n\
         # TYPE gpucheck_watch_rank_still_seconds gauge"
    );
    for (rank, s) in &still {
        let _ = writeln!(
            out,
            "gpucheck_watch_rank_still_seconds{{{profile},rank=\"{rank}\"}} {s:.1}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP gpucheck_watch_rank_straggler 1 when the rank is caught outside collectives while the others wait, again and again.\n\
         # TYPE gpucheck_watch_rank_straggler gauge"
    );
    for (rank, _) in &still {
        let late = u8::from(watcher.stragglers().contains(rank));
        let _ = writeln!(
            out,
            "gpucheck_watch_rank_straggler{{{profile},rank=\"{rank}\"}} {late}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;

    #[test]
    fn every_check_has_one_status_series_set_to_one() {
        let text = Prom.render(&fixtures::every_status());
        let p = "profile=\"standard\"";
        assert!(text.contains(&format!(
            "gpucheck_check_status{{{p},check=\"gpu.ecc\",group=\"gpu\",status=\"fail\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "gpucheck_check_status{{{p},check=\"gpu.ecc\",group=\"gpu\",status=\"pass\"}} 0\n"
        )));
        assert!(
            text.contains(&format!("gpucheck_ready{{{p}}} 0\n")),
            "{text}"
        );
        assert!(text.contains(&format!("gpucheck_exit_code{{{p}}} 1\n")));
        assert!(text.contains(&format!(
            "gpucheck_last_run_timestamp_seconds{{{p}}} 1767225600\n"
        )));
        assert!(text.contains(&format!(
            "gpucheck_gpu_check_status{{{p},check=\"gpu.ecc\",gpu=\"1\",status=\"fail\"}} 1\n"
        )));
    }

    /// Two files in one textfile folder (a quick and a health profile run)
    /// share no series: node_exporter drops a repeated one.
    #[test]
    fn every_series_names_its_profile() {
        use gpucheck_checks::Profile;
        let quick = Prom.render(&fixtures::every_status());
        let mut run = fixtures::every_status();
        run.profile = Profile::Health;
        let health = Prom.render(&run);
        let series = |text: &str| -> std::collections::BTreeSet<String> {
            let lines = text.lines().filter(|l| !l.starts_with('#'));
            lines
                .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string())
                .collect()
        };
        let (quick, health) = (series(&quick), series(&health));
        assert!(!quick.is_empty());
        assert!(
            quick.iter().all(|s| s.contains("profile=\"standard\"")),
            "{quick:?}"
        );
        assert_eq!(quick.intersection(&health).count(), 0);
    }

    /// Per-GPU series carry no UUID (a lost GPU has none, so they would
    /// change identity); gpucheck_gpu_info names each index's UUID once.
    #[test]
    fn uuids_are_in_gpu_info_once_per_gpu_never_on_the_status_series() {
        let mut run = fixtures::every_status();
        let mut again = run.results[1].outcome.devices[0].clone();
        again.uuid = Some("GPU-0aa".into());
        run.results[0].outcome.devices.push(again);
        let text = Prom.render(&run);
        let status_lines = text
            .lines()
            .filter(|l| l.starts_with("gpucheck_gpu_check_status{"));
        assert!(status_lines.clone().count() > 0);
        assert!(status_lines.clone().all(|l| !l.contains("uuid=")), "{text}");
        let info: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("gpucheck_gpu_info{"))
            .collect();
        assert_eq!(
            info,
            ["gpucheck_gpu_info{profile=\"standard\",gpu=\"0\",uuid=\"GPU-0aa\"} 1"],
            "GPU 1 has no UUID: {text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        let text = Prom.render(&fixtures::hostile());
        for line in text.lines() {
            assert!(!line.contains('\n'));
        }
        assert!(text.contains("uuid=\"\u{1}\u{1b}[31m]]><x>&\\\"' \u{FFFF}\""));
    }

    /// The hostile run read back by prometheus_client's parser (the test
    /// venv's): every escaped label value comes back as it went in.
    #[test]
    fn hostile_text_survives_the_prometheus_parser() {
        use std::io::Write;
        let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
        let mut child = std::process::Command::new(python)
            .args([
                "-c",
                "import sys, json\n\
                 from prometheus_client.parser import text_string_to_metric_families as p\n\
                 print(json.dumps([s.labels.get('uuid') for f in p(sys.stdin.read()) for s in f.samples]))",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the test venv's python (scripts/setup-venv.sh)");
        let mut run = fixtures::hostile();
        run.results[0].outcome.devices[0].uuid = Some("a\\b\"c\nd".into());
        let text = Prom.render(&run);
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(text.as_bytes()).expect("write to python");
        }
        let out = child.wait_with_output().expect("python");
        assert!(out.status.success(), "does not parse:\n{text}");
        let uuids: Vec<Option<String>> = serde_json::from_slice(&out.stdout).expect("JSON");
        assert!(uuids.contains(&Some("a\\b\"c\nd".into())), "{uuids:?}");
    }

    #[test]
    fn busbw_is_in_bytes_per_second_and_scaling_a_ratio() {
        use gpucheck_checks::{Outcome, Profile};
        let run = fixtures::run(
            vec![
                fixtures::result(
                    "nccl.allreduce",
                    Profile::Standard,
                    Outcome::pass("busbw 460 GB/s").with_metric("busbw_gbps", 460.0, "GB/s"),
                ),
                fixtures::result(
                    "ddp.benchmark",
                    Profile::Full,
                    Outcome::pass("93% scaling").with_metric("scaling_efficiency", 0.93, "ratio"),
                ),
            ],
            false,
        );
        let text = Prom.render(&run);
        let p = "{profile=\"standard\"}";
        assert!(text.contains(&format!(
            "gpucheck_nccl_allreduce_busbw_bytes_per_second{p} 460000000000\n"
        )));
        assert!(text.contains(&format!("gpucheck_ddp_scaling_efficiency_ratio{p} 0.93\n")));
        assert!(text.contains(&format!("gpucheck_ready{p} 1\n")));
    }

    #[test]
    fn per_gpu_series_are_gpus_by_index_and_never_repeat() {
        let mut run = fixtures::every_status();
        let ecc = &mut run.results[1].outcome.devices;
        let mut rank = ecc[0].clone();
        rank.label = Some("rank 0".into());
        let again = ecc[1].clone();
        ecc.push(rank);
        ecc.push(again);
        let text = Prom.render(&run);
        let gpu1_fail =
            "gpucheck_gpu_check_status{profile=\"standard\",check=\"gpu.ecc\",gpu=\"1\",status=\"fail\"} 1\n";
        assert_eq!(text.matches(gpu1_fail).count(), 1, "{text}");
        let per_gpu = text.matches("gpucheck_gpu_check_status{").count();
        assert_eq!(per_gpu, 2 * STATUSES.len(), "{text}");
    }

    /// Each finding's repair action names its check and each GPU it applies
    /// to; a node-wide one has no gpu label (never an empty one); the run's
    /// most drastic action is the one headline series set to 1.
    #[test]
    fn every_finding_has_its_action_per_gpu_and_the_run_its_headline() {
        let text = Prom.render(&fixtures::every_status());
        let p = "profile=\"standard\"";
        let actions: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("gpucheck_action{"))
            .collect();
        assert_eq!(
            actions,
            [
                format!(
                    "gpucheck_action{{{p},action=\"reset_gpu\",check=\"gpu.ecc\",gpu=\"1\"}} 1"
                ),
                format!("gpucheck_action{{{p},action=\"fix_config\",check=\"host.shm\"}} 1"),
                format!("gpucheck_action{{{p},action=\"fix_config\",check=\"net.master_port\"}} 1"),
            ],
            "{text}"
        );
        assert!(text.contains(&format!(
            "gpucheck_run_action{{{p},action=\"reset_gpu\"}} 1\n"
        )));
        let headline = text
            .lines()
            .filter(|l| l.starts_with("gpucheck_run_action{"));
        assert_eq!(headline.clone().count(), Action::ALL.len());
        assert_eq!(headline.filter(|l| l.ends_with(" 1")).count(), 1);
        assert!(!text.contains("=\"\""), "an empty label: {text}");
    }

    /// An action on a port carries the port; one on several GPUs a series
    /// per GPU, each once; a passing run's headline is `none`.
    #[test]
    fn actions_name_their_port_and_each_gpu_once() {
        let mut run = fixtures::every_status();
        let shm = &mut run.results[2].outcome;
        shm.action = Some(Action::ContactProvider);
        shm.action_port = Some("mlx5_0/1".into());
        let ecc = &mut run.results[1].outcome;
        ecc.action = Some(Action::ServiceHardware);
        ecc.action_gpus = vec![3, 1, 3];
        let text = Prom.render(&run);
        let p = "profile=\"standard\"";
        assert!(text.contains(&format!(
            "gpucheck_action{{{p},action=\"contact_provider\",check=\"host.shm\",port=\"mlx5_0/1\"}} 1\n"
        )));
        let ecc_lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("gpucheck_action{") && l.contains("gpu.ecc"))
            .collect();
        assert_eq!(ecc_lines.len(), 2, "{text}");
        assert!(ecc_lines[0].contains("gpu=\"1\"") && ecc_lines[1].contains("gpu=\"3\""));
        assert!(text
            .contains("gpucheck_run_action{profile=\"standard\",action=\"contact_provider\"} 1\n"));

        let healthy = fixtures::run(vec![fixtures::every_status().results[0].clone()], false);
        let text = Prom.render(&healthy);
        assert!(!text.contains("gpucheck_action{"), "{text}");
        assert!(text.contains("gpucheck_run_action{profile=\"standard\",action=\"none\"} 1\n"));
    }

    #[test]
    fn values_spell_infinities_as_go_does() {
        assert_eq!(value_text(f64::INFINITY), "+Inf");
        assert_eq!(value_text(f64::NEG_INFINITY), "-Inf");
        assert_eq!(value_text(f64::NAN), "NaN");
        assert_eq!(value_text(4.6e11), "460000000000");
    }

    #[test]
    fn values_carry_no_float_noise() {
        assert_eq!(value_text(0.1 + 0.2), "0.3");
        assert_eq!(value_text(1.0 / 3.0), "0.333333333333");
        assert_eq!(value_text(431.2), "431.2");
        assert_eq!(value_text(-2.5e-7), "-0.00000025");
        assert_eq!(value_text(0.0), "0");
    }
}

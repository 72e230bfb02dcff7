//! The progress line as a user sees it: gpucheck in a real pseudo-terminal
//! (a tmux pane: tmux is the terminal, and `capture-pane` reads back its
//! screen), on a fake NVML whose nvmlInit hangs so a check is running long
//! enough to be seen. While it runs the pane shows the check, the count and
//! the time; when it ends the screen holds the report and nothing of the
//! line. A burn on two CPU "GPUs" shows its rounds from its isolated child.
//! In a pipe, under `TERM=dumb` and with `--quiet` nothing is drawn.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{bin, fake_nvml, gpucheck, nvml_scenario, stderr, venv_python};

/// What the line starts with (src/progress.rs).
const LINE: &str = "gpucheck: [";
/// Printed by the pane's shell once gpucheck has exited.
const EXITED: &str = "GPUCHECK-EXITED";

/// A tmux server of its own (its socket in a temporary folder), killed on drop.
struct Pane {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Pane {
    /// Starts `gpucheck --only gpu ARGS` on hang_init in a 120x40 pane
    /// with `TERM=term`.
    fn start(term: &str, args: &str) -> Pane {
        Pane::launch(term, "hang_init", "", &format!("--only gpu {args}"))
    }

    /// Starts `env -i ... ENV gpucheck ARGS` on the fake NVML's `scenario`
    /// in a 120x40 pane with `TERM=term`.
    fn launch(term: &str, scenario: &str, env: &str, args: &str) -> Pane {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("tmux.sock");
        let line = format!(
            "env -i PATH=/usr/bin:/bin TERM={term} FAKE_NVML_SCENARIO='{}' {env} '{}' \
             --nvml-lib '{}' --color never {args}; echo {EXITED}; sleep 60",
            nvml_scenario(scenario).display(),
            bin().display(),
            fake_nvml().display(),
        );
        let status = tmux(&socket)
            .args(["new-session", "-d", "-x", "120", "-y", "40", &line])
            .status()
            .expect("tmux (Debian's tmux package) runs");
        assert!(status.success(), "tmux new-session failed");
        Pane { socket, _dir: dir }
    }

    /// The pane's screen now.
    fn screen(&self) -> String {
        let out = tmux(&self.socket)
            .args(["capture-pane", "-p"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen once `ready` holds for it, within 20 s.
    fn screen_when(&self, ready: impl Fn(&str) -> bool) -> String {
        self.screen_within(Duration::from_secs(20), ready)
    }

    /// The screen once `ready` holds for it, within `limit`.
    fn screen_within(&self, limit: Duration, ready: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) || start.elapsed() > limit {
                return screen;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = tmux(&self.socket).arg("kill-server").status();
    }
}

fn tmux(socket: &Path) -> Command {
    let mut cmd = Command::new("tmux");
    cmd.arg("-S").arg(socket).env_remove("TMUX");
    cmd
}

#[test]
fn a_terminal_shows_the_running_check_then_only_the_report() {
    let pane = Pane::start("xterm-256color", "--timeout 2");
    let running = pane.screen_when(|s| s.contains(LINE) || s.contains(EXITED));
    let line = running
        .lines()
        .find(|l| l.starts_with(LINE))
        .unwrap_or_else(|| panic!("no progress line while gpu.driver hangs:\n{running}"));
    // "gpucheck: [0/9] gpu.driver  0.4 s"
    let (count, rest) = line[LINE.len()..].split_once("] ").expect("[done/total]");
    let (done, total) = count.split_once('/').expect("done/total");
    assert!(
        done.parse::<u32>().unwrap() < total.parse::<u32>().unwrap(),
        "{line}"
    );
    assert!(rest.starts_with("gpu.driver "), "{line}");
    assert!(rest.trim_end().ends_with(" s"), "{line}");

    let done = pane.screen_when(|s| s.contains(EXITED));
    assert!(done.contains(EXITED), "gpucheck did not end:\n{done}");
    assert!(done.contains("NOT READY"), "the report:\n{done}");
    assert!(done.contains("gpu.driver"), "the report:\n{done}");
    assert!(!done.contains(LINE), "progress left on the screen:\n{done}");
}

/// Ctrl-C while a check runs: the terminal echoes `^C` where the cursor is,
/// and the run ends with the interrupted report; the line must be gone
/// from the screen all the same (it once stayed, the echo having wrapped it
/// past the clearing).
#[test]
fn ctrl_c_leaves_the_report_and_no_progress_line() {
    let pane = Pane::start("xterm-256color", "--timeout 20");
    let running = pane.screen_when(|s| s.contains(LINE) || s.contains(EXITED));
    assert!(running.contains(LINE), "no progress line:\n{running}");
    // Let the line be redrawn at least once more, as a user waits.
    std::thread::sleep(Duration::from_millis(500));
    let sent = tmux(&pane.socket)
        .args(["send-keys", "C-c"])
        .status()
        .expect("tmux send-keys");
    assert!(sent.success());
    let done = pane.screen_when(|s| s.contains(EXITED));
    assert!(done.contains(EXITED), "gpucheck did not end:\n{done}");
    assert!(
        done.contains("interrupted by SIGINT"),
        "the report:\n{done}"
    );
    assert!(!done.contains(LINE), "progress left on the screen:\n{done}");
}

/// A burn runs in an isolated child: its rounds reach the line all the same.
#[test]
fn a_burn_shows_its_round_time_left_and_tflops_and_no_report_has_them() {
    let env = "GPUCHECK_LOAD_DEVICE=cpu";
    let args = format!(
        "--python '{}' --profile burn --duration 12s --only gpu.burn",
        venv_python().display()
    );
    let pane = Pane::launch("xterm-256color", "load_steady_x2", env, &args);
    let second = " (round 2 · ";
    let running = pane.screen_within(Duration::from_secs(60), |s| {
        s.contains(second) || s.contains(EXITED)
    });
    let line = running
        .lines()
        .find(|l| l.starts_with(LINE))
        .unwrap_or_else(|| panic!("no progress line during the burn:\n{running}"));
    // "gpucheck: [0/1] gpu.burn (round 2 · 5s done, 7s left · bf16 TFLOPS 0:0.05 1:0.05)  6.1 s"
    let step = line.split_once(second).map(|(_, s)| s).unwrap_or_default();
    assert!(step.contains(" done, "), "{line}");
    assert!(step.contains(" left · bf16 TFLOPS 0:"), "{line}");
    assert!(step.contains(" 1:"), "{line}");

    let done = pane.screen_within(Duration::from_secs(60), |s| s.contains(EXITED));
    assert!(done.contains(EXITED), "the burn did not end:\n{done}");
    assert!(done.contains("gpu.burn"), "the report:\n{done}");
    assert!(!done.contains(LINE), "progress left on the screen:\n{done}");
    assert!(!done.contains(" done, "), "progress in the report:\n{done}");
}

#[test]
fn no_progress_under_term_dumb_or_quiet() {
    for (term, args) in [
        ("dumb", "--timeout 1.5"),
        ("xterm-256color", "--quiet --timeout 1.5"),
    ] {
        let pane = Pane::start(term, args);
        // Sampled while gpu.driver hangs, then at the end.
        std::thread::sleep(Duration::from_millis(700));
        let running = pane.screen();
        assert!(!running.contains(LINE), "TERM={term} {args}:\n{running}");
        let done = pane.screen_when(|s| s.contains(EXITED));
        assert!(done.contains("NOT READY"), "TERM={term} {args}:\n{done}");
        assert!(!done.contains(LINE), "TERM={term} {args}:\n{done}");
    }
}

#[test]
fn a_pipe_gets_no_progress() {
    let out = gpucheck()
        .env("FAKE_NVML_SCENARIO", nvml_scenario("hang_init"))
        .env("TERM", "xterm-256color")
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .args(["--only", "gpu", "--timeout", "1", "--color", "never"])
        .output()
        .expect("run gpucheck");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        !err.contains(LINE) && !err.contains('\r') && !err.contains('\x1b'),
        "{err:?}"
    );
    let text = common::stdout(&out);
    assert!(!text.contains(LINE) && !text.contains('\r'), "{text:?}");
}

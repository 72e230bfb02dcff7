//! Progress on a terminal: while the checks run, one line on stderr says
//! which check is running, how many of how many are done and the time since
//! the run began (`gpucheck: [3/25] gpu.ecc  1.2 s`), redrawn in place and
//! cleared before the report is printed.
//!
//! Only when stderr is a terminal, `TERM` is not `dumb` and the run is not
//! `--quiet`: never in a pipe, a file or a report (a CI log, a health check's
//! output, `2>&1 | tee`). The line is cut short of the terminal's width, so
//! it never wraps (a wrapped line cannot be cleared with a carriage return),
//! and is drawn and cleared with carriage returns and spaces only: no escape
//! sequence, so any terminal (and `NO_COLOR`) is served alike. The cursor
//! rests at the line's start, not its end: the `^C` a terminal echoes at
//! the cursor on Ctrl-C then lands inside the line, where clearing covers
//! it, instead of in the last column, where it wraps and leaves the line
//! above the report. A stop signal clears the line at once (within one
//! redraw), not only when the interrupted run reports.
//!
//! The runner says which check starts ([`check_started`]); a long check
//! may add its step ([`step`]: the burn's round, time left and TFLOPS),
//! shown after the check's id until the next check starts. A check says it
//! with `gpucheck_checks::probe::progress`: in gpucheck's own process
//! through a hook set here, from an isolated child as a protocol line on
//! its stderr that the runner hands on as it comes.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the line is redrawn (the elapsed time moves on).
const REDRAW: Duration = Duration::from_millis(200);
/// Columns assumed when the terminal does not say its width.
const DEFAULT_WIDTH: usize = 80;

/// What the line shows; None while no progress is shown.
struct Line {
    total: usize,
    done: usize,
    check: String,
    step: Option<String>,
    started: Instant,
    width: usize,
}

static LINE: Mutex<Option<Line>> = Mutex::new(None);

fn line() -> MutexGuard<'static, Option<Line>> {
    // A panic while drawing leaves plain data behind: keep using it.
    LINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether progress is shown: stderr a terminal, `TERM` not `dumb`, not `--quiet`.
pub fn wanted(stderr_is_terminal: bool, term: Option<&str>, quiet: bool) -> bool {
    stderr_is_terminal && term != Some("dumb") && !quiet
}

/// The line's text, cut to `width - 1` characters (the last column stays
/// free: some terminals wrap on it).
pub fn render(
    total: usize,
    done: usize,
    check: &str,
    step: Option<&str>,
    elapsed: Duration,
    width: usize,
) -> String {
    let step = step.map(|s| format!(" ({s})")).unwrap_or_default();
    let text = format!(
        "gpucheck: [{done}/{total}] {check}{step}  {:.1} s",
        elapsed.as_secs_f64()
    );
    text.chars().take(width.saturating_sub(1)).collect()
}

/// Shows progress until dropped; does nothing when progress is not wanted.
pub struct Progress {
    stop: Arc<AtomicBool>,
    redraw: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts showing progress for a run of `total` checks, if `quiet` is
    /// false and stderr is a terminal whose `TERM` is not `dumb`.
    pub fn start(total: usize, quiet: bool) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let stderr = std::io::stderr();
        let term = std::env::var("TERM").ok();
        if !wanted(stderr.is_terminal(), term.as_deref(), quiet) {
            return Progress { stop, redraw: None };
        }
        let width = terminal_size::terminal_size_of(&stderr)
            .map(|(w, _)| usize::from(w.0))
            .filter(|&w| w > 0)
            .unwrap_or(DEFAULT_WIDTH);
        gpucheck_checks::probe::set_progress_hook(step);
        *line() = Some(Line {
            total,
            done: 0,
            check: String::new(),
            step: None,
            started: Instant::now(),
            width,
        });
        let flag = Arc::clone(&stop);
        // Without a thread (a low `ulimit -u`) the line is drawn only when a
        // check starts.
        let redraw = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(REDRAW);
                    if crate::interrupt::interrupted().is_some() {
                        clear();
                        break;
                    }
                    draw();
                }
            })
            .ok();
        Progress { stop, redraw }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(redraw) = self.redraw.take() {
            let _ = redraw.join();
        }
        clear();
    }
}

/// Clear the line and stop showing it.
fn clear() {
    if let Some(l) = line().take() {
        write_stderr(&blank(l.width));
    }
}

/// The check numbered `done` (0-based: that many are done) starts.
pub fn check_started(done: usize, check: &str) {
    if let Some(l) = line().as_mut() {
        l.done = done;
        l.check = check.to_string();
        l.step = None;
    }
    draw();
}

/// The running check's own step, shown after its id until the next check.
pub fn step(text: &str) {
    if let Some(l) = line().as_mut() {
        l.step = Some(text.to_string());
    }
    draw();
}

fn draw() {
    let (text, width) = match line().as_ref() {
        Some(l) if !l.check.is_empty() => (
            render(
                l.total,
                l.done,
                &l.check,
                l.step.as_deref(),
                l.started.elapsed(),
                l.width,
            ),
            l.width,
        ),
        _ => return,
    };
    write_stderr(&drawn(&text, width));
}

/// The line as written: over the old one, padded to cover what a longer
/// one left, the cursor back at its start.
fn drawn(text: &str, width: usize) -> String {
    format!("\r{text}{}\r", " ".repeat(pad(text, width)))
}

/// The spaces that overwrite what a longer earlier line left.
fn pad(text: &str, width: usize) -> usize {
    width.saturating_sub(1).saturating_sub(text.chars().count())
}

/// The line cleared: spaces over it, the cursor back at its start.
fn blank(width: usize) -> String {
    format!("\r{}\r", " ".repeat(width.saturating_sub(1)))
}

/// A stderr that cannot be written (closed, full) loses the line, nothing
/// else; a terminal stopped with Ctrl-S holds it only until a stop signal
/// (`output::write_all_or_stop`).
fn write_stderr(text: &str) {
    use std::os::fd::AsFd;
    let mut err = std::io::stderr().lock();
    let chunk = crate::output::chunk_for(&err);
    let _ = err
        .flush()
        .and_then(|_| crate::output::write_all_or_stop(err.as_fd(), text.as_bytes(), chunk));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_only_on_a_terminal_that_is_not_dumb_and_not_quiet() {
        assert!(wanted(true, Some("xterm-256color"), false));
        assert!(wanted(true, None, false));
        assert!(!wanted(false, Some("xterm"), false), "a pipe or a file");
        assert!(!wanted(true, Some("dumb"), false));
        assert!(!wanted(true, Some("xterm"), true), "--quiet");
    }

    #[test]
    fn the_line_names_the_check_the_count_and_the_time() {
        let text = render(25, 3, "gpu.ecc", None, Duration::from_millis(1234), 80);
        assert_eq!(text, "gpucheck: [3/25] gpu.ecc  1.2 s");
        let text = render(
            25,
            12,
            "nccl.allreduce",
            Some("64 MiB"),
            Duration::from_secs(4),
            80,
        );
        assert_eq!(text, "gpucheck: [12/25] nccl.allreduce (64 MiB)  4.0 s");
    }

    #[test]
    fn the_line_never_reaches_the_last_column() {
        let text = render(
            25,
            3,
            "gpu.ecc",
            Some("é".repeat(200).as_str()),
            Duration::ZERO,
            40,
        );
        assert_eq!(text.chars().count(), 39);
        assert_eq!(render(1, 0, "gpu.ecc", None, Duration::ZERO, 0), "");
    }

    #[test]
    fn clearing_overwrites_the_whole_line_with_spaces() {
        assert_eq!(blank(6), "\r     \r");
        let text = render(25, 3, "gpu.ecc", None, Duration::ZERO, 40);
        assert_eq!(text.chars().count() + pad(&text, 40), 39);
    }

    #[test]
    fn the_cursor_rests_at_the_start_of_the_line() {
        // A `^C` echoed at the cursor must not land in the last column.
        let text = render(25, 3, "gpu.ecc", None, Duration::ZERO, 40);
        let line = drawn(&text, 40);
        assert!(line.starts_with('\r') && line.ends_with('\r'), "{line:?}");
        assert_eq!(line.chars().count(), 41);
    }
}

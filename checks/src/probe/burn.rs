//! Probe: the burn's load. One payload process (checks/payloads/qualify.py
//! `burn`) runs the GEMM load and then the memory load, round after round,
//! for the whole duration, so the GPUs never idle between rounds for an
//! interpreter's and CUDA's start. NVML is read every
//! [`SAMPLE_INTERVAL`](super::load::SAMPLE_INTERVAL) throughout; each round
//! reaches the caller as the payload finishes it, with the samples taken
//! during it. The payload's group is killed when it ends, when a round does
//! not come within its timeout, and when gpucheck is interrupted.
//!
//! Through the boundary a round at a time (a day's burn is never held
//! whole): each round is its own answer, then how the burn ended.

use std::cell::RefCell;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::load::{self, ComputeFigures, LoadDevice, LoadError, MemoryFigures, PayloadDoc, Sample};
use super::process::{self, Ending};

/// Prefix of the payload's line for each finished round on stdout.
const ROUND_MARK: &str = "GPUCHECK_QUALIFY_ROUND ";

/// What the burn runs: the payload's arguments (besides its device and
/// GPUs), where and for how long.
pub struct BurnLoad<'a> {
    pub python: &'a Path,
    pub args: Vec<String>,
    pub gpus: Vec<u32>,
    pub device: LoadDevice,
    /// The longest wait for the next round (the first includes the start).
    pub round_timeout: Duration,
    /// The longest the whole burn may run.
    pub timeout: Duration,
    pub nvml_lib: Option<&'a Path>,
}

/// One finished round: its GEMM and memory figures, and NVML's samples of
/// every GPU while it ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BurnRound {
    /// Seconds after the load started when the round ended.
    pub at_s: f64,
    pub compute: PayloadDoc<ComputeFigures>,
    pub memory: PayloadDoc<MemoryFigures>,
    pub samples: Vec<Sample>,
}

/// How the burn ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BurnEnd {
    pub rounds: usize,
    pub elapsed_s: f64,
    /// Why it ended other than by running its duration out.
    pub stopped: Option<LoadError>,
}

/// The round line's document.
#[derive(Deserialize)]
struct RoundLine {
    compute: PayloadDoc<ComputeFigures>,
    memory: PayloadDoc<MemoryFigures>,
}

/// Run the burn, handing each round to `on_round` as it ends.
pub fn burn(load: &BurnLoad, mut on_round: impl FnMut(BurnRound)) -> BurnEnd {
    let ids: Vec<String> = load.gpus.iter().map(u32::to_string).collect();
    let key = format!("burn {} gpus {}", load.args.join(" "), ids.join(","));
    let round_key = |n: usize| crate::seam::nth(&format!("{key} round {n}"));
    if crate::seam::is_replay() {
        let end: BurnEnd =
            crate::seam::answer("load::burn", &crate::seam::nth(&key), BurnEnd::default);
        for n in 1..=end.rounds {
            on_round(crate::seam::answer(
                "load::burn_round",
                &round_key(n),
                BurnRound::default,
            ));
        }
        return end;
    }
    let mut n = 0;
    let end = burn_live(load, |round| {
        n += 1;
        on_round(crate::seam::answer(
            "load::burn_round",
            &round_key(n),
            || round,
        ));
    });
    crate::seam::answer("load::burn", &crate::seam::nth(&key), || end)
}

/// The rounds seen so far and the samples of the round under way.
struct Watch {
    start: Instant,
    next_sample: Instant,
    last_round: Instant,
    samples: Vec<Sample>,
    rounds: usize,
}

impl Watch {
    /// The round lines that came, each with the samples since the one before.
    fn take(&mut self, lines: &mpsc::Receiver<String>, on_round: &mut impl FnMut(BurnRound)) {
        while let Ok(json) = lines.try_recv() {
            let Ok(line) = serde_json::from_str::<RoundLine>(&json) else {
                continue;
            };
            self.last_round = Instant::now();
            self.rounds += 1;
            on_round(BurnRound {
                at_s: self.start.elapsed().as_secs_f64(),
                compute: line.compute,
                memory: line.memory,
                samples: std::mem::take(&mut self.samples),
            });
        }
    }
}

fn burn_live(load: &BurnLoad, mut on_round: impl FnMut(BurnRound)) -> BurnEnd {
    let ended = |stopped| BurnEnd {
        rounds: 0,
        elapsed_s: 0.0,
        stopped: Some(stopped),
    };
    let (_file, child) = match load::spawn(load.python, "burn", &load.args, &load.gpus, load.device)
    {
        Ok(started) => started,
        Err(e) => return ended(e),
    };
    let start = Instant::now();
    let (tx, lines) = mpsc::channel::<String>();
    let watch = RefCell::new(Watch {
        start,
        next_sample: start,
        last_round: start,
        samples: Vec::new(),
        rounds: 0,
    });
    let on_round = RefCell::new(&mut on_round);
    let seen = process::supervise_out_lines(
        child,
        load.timeout,
        || {
            let mut w = watch.borrow_mut();
            if Instant::now() >= w.next_sample {
                w.next_sample += load::SAMPLE_INTERVAL;
                w.samples.extend(load::sample(load.nvml_lib, start));
            }
            w.take(&lines, &mut *on_round.borrow_mut());
            w.last_round.elapsed() > load.round_timeout
        },
        || {},
        move |line| match std::str::from_utf8(line).map(str::trim_end) {
            Ok(l) if l.starts_with(ROUND_MARK) => {
                let _ = tx.send(l[ROUND_MARK.len()..].to_string());
                false
            }
            _ => true,
        },
    );
    let mut w = watch.into_inner();
    // The rounds whose lines came as the payload ended.
    w.take(&lines, &mut *on_round.into_inner());
    let stderr = String::from_utf8_lossy(&seen.stderr);
    let stage = || load::last_stage(&stderr).unwrap_or("start-up").to_string();
    let stopped = match seen.ending {
        Ending::Stopped => Some(LoadError::TimedOut {
            secs: load.round_timeout.as_secs_f64(),
            stage: stage(),
        }),
        Ending::TimedOut => Some(LoadError::TimedOut {
            secs: load.timeout.as_secs_f64(),
            stage: stage(),
        }),
        ending => {
            let stdout = String::from_utf8_lossy(&seen.stdout);
            match load::parse::<serde::de::IgnoredAny>(&stdout) {
                Some(doc) => doc.error.map(LoadError::Reported),
                None => Some(LoadError::NoResult {
                    ending: format!("{ending:?}"),
                    tail: process::tail(&stderr, 3),
                }),
            }
        }
    };
    BurnEnd {
        rounds: w.rounds,
        elapsed_s: start.elapsed().as_secs_f64(),
        stopped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_line_takes_the_samples_since_the_round_before() {
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        let mut w = Watch {
            start,
            next_sample: start,
            last_round: start,
            samples: vec![Sample {
                at_s: 0.1,
                gpus: Vec::new(),
            }],
            rounds: 0,
        };
        tx.send("not json".to_string()).expect("send");
        tx.send(r#"{"round": 1, "compute": {"gpus": {"0": {"bf16_tflops": 2.5}}}, "memory": {"gpus": {}}}"#.to_string())
            .expect("send");
        let mut got = Vec::new();
        w.take(&rx, &mut |r| got.push(r));
        assert_eq!(got.len(), 1);
        assert_eq!(w.rounds, 1);
        assert_eq!(got[0].compute.gpus["0"].bf16_tflops, Some(2.5));
        assert_eq!(got[0].samples.len(), 1);
        assert!(w.samples.is_empty());
    }
}

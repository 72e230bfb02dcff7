//! Judging a DDP benchmark that did not finish: a worker error, a hang, a
//! launcher that could not start.

use super::{rank_list, HANG_HINT};
use crate::domain::text::timed_out;
use crate::probe::ddp::{Ending, Parsed, RunFailure, WorkerError};
use crate::Outcome;

/// Longest first line of a worker's error message shown in the summary.
const MESSAGE_MAX_CHARS: usize = 300;

/// Judge a run that did not finish: a worker error, a hang, a launcher that
/// could not start.
pub fn evaluate_failure(f: &RunFailure) -> Outcome {
    let mut outcome = match f.parsed.errors.first() {
        Some(root) => worker_failed(root, &f.parsed.errors),
        None => run_ended(f),
    };
    if let Some(root) = f.parsed.errors.first() {
        if !root.traceback.is_empty() {
            outcome = outcome.with_fact("worker_traceback", root.traceback.clone());
        }
    }
    if !f.tail.is_empty() {
        outcome = outcome.with_fact("stderr_tail", f.tail.clone());
    }
    outcome
}

/// The first worker that reported an error is the root cause; the others
/// failed after it.
fn worker_failed(root: &WorkerError, errors: &[WorkerError]) -> Outcome {
    let others: Vec<u32> = errors
        .iter()
        .skip(1)
        .map(|e| e.rank)
        .filter(|r| *r != root.rank)
        .collect();
    let then = if others.is_empty() {
        String::new()
    } else {
        format!(" ({} failed after it)", rank_list(&others))
    };
    if root.error == "no_gpu" {
        return Outcome::fail(
            format!("rank {} has no GPU: {}{then}", root.rank, root.message),
            "start at most one process per visible GPU: lower --nproc, or check \
             CUDA_VISIBLE_DEVICES",
        );
    }
    let message = first_line(&root.message, MESSAGE_MAX_CHARS);
    let hint = if message.contains("out of memory") {
        "the model does not fit in GPU memory next to what is already there: free the \
         GPU (`nvidia-smi` shows who holds memory) or use --ddp-model small"
    } else if message.contains("NCCL") || message.contains("nccl") {
        "NCCL failed between the ranks: rerun with NCCL_DEBUG=INFO and --verbose to see \
         the transport and the failing call in the output tail, compare nccl.allreduce, \
         and check `dmesg` for Xid errors"
    } else {
        "a DDP worker died; --verbose (or --json -) shows its traceback and the \
         launcher's output: fix what they name, or rerun with NCCL_DEBUG=INFO \
         TORCH_DISTRIBUTED_DEBUG=DETAIL"
    };
    Outcome::fail(
        format!("rank {} failed: {}: {message}{then}", root.rank, root.error),
        hint,
    )
}

/// No worker said what went wrong: judge by how the run ended and what the
/// launcher printed.
fn run_ended(f: &RunFailure) -> Outcome {
    let tail_has = |needle: &str| f.tail.contains(needle);
    match &f.ending {
        Ending::NotStarted { reason } => Outcome::fail(
            format!("cannot start the benchmark: {reason}"),
            "point gpucheck at the training environment's interpreter with --python PATH",
        ),
        Ending::TimedOut { secs } => Outcome::fail(
            format!(
                "{}: {}",
                timed_out(secs.round_ties_even(), None),
                describe_stages(&f.parsed)
            ),
            HANG_HINT,
        ),
        Ending::Exited { .. }
            if tail_has("No module named torch") || tail_has("No module named 'torch'") =>
        {
            Outcome::fail(
                format!("torch is not installed for {}", f.python),
                format!(
                    "install PyTorch into the training environment (`{} -m pip install \
                     torch`), or point gpucheck at the right interpreter with --python PATH",
                    f.python
                ),
            )
        }
        Ending::Exited { .. } if tail_has("Cuda is not available") => Outcome::fail(
            format!(
                "torch ({}) sees no CUDA GPU, so torchrun cannot start a worker per GPU",
                f.python
            ),
            "install a CUDA build of torch that this driver supports (see the torch checks), \
             check CUDA_VISIBLE_DEVICES, or benchmark on CPUs with --ddp-device cpu",
        ),
        Ending::Exited {
            signal: Some(sig), ..
        } => Outcome::fail(
            format!(
                "torchrun was killed by signal {sig} before the benchmark finished ({})",
                describe_stages(&f.parsed)
            ),
            "check `dmesg` for the kernel's out-of-memory killer, or for whatever else \
             stopped it",
        ),
        Ending::Exited { code: Some(0), .. } => {
            Outcome::error("torchrun exited cleanly but the benchmark reported no result")
                .with_hint(
                "please report this with the output of `gpucheck --only ddp.benchmark --json -`",
            )
        }
        Ending::Exited { code, .. } => exited_early(*code, &f.parsed),
    }
}

/// torchrun exited with an error status.
fn exited_early(code: Option<i32>, parsed: &Parsed) -> Outcome {
    let status = code
        .map(|c| c.to_string())
        .unwrap_or_else(|| "?".to_string());
    let summary = if parsed.done {
        format!(
            "torchrun exited with status {status} after the benchmark finished, while shutting \
             down"
        )
    } else {
        format!(
            "torchrun exited with status {status} before the benchmark finished ({})",
            describe_stages(parsed)
        )
    };
    Outcome::fail(
        summary,
        "--verbose (or --json -) shows the launcher's output tail; fix what it names",
    )
}

/// "ranks 0, 1 at 'world size 2: warm-up'; rank 3 never reported".
fn describe_stages(parsed: &Parsed) -> String {
    if parsed.stages.is_empty() {
        return "before any worker reported (torch import or rendezvous)".to_string();
    }
    let mut by_stage: Vec<(String, Vec<u32>)> = Vec::new();
    for (rank, stage) in &parsed.stages {
        match by_stage.iter_mut().find(|(s, _)| s == stage) {
            Some((_, ranks)) => ranks.push(*rank),
            None => by_stage.push((stage.clone(), vec![*rank])),
        }
    }
    let mut parts: Vec<String> = by_stage
        .iter()
        .map(|(stage, ranks)| format!("{} at '{stage}'", rank_list(ranks)))
        .collect();
    if let Some(setup) = &parsed.setup {
        let silent: Vec<u32> = (0..setup.world_size)
            .filter(|r| !parsed.stages.contains_key(r))
            .collect();
        if !silent.is_empty() {
            parts.push(format!("{} never reported", rank_list(&silent)));
        }
    }
    parts.join("; ")
}

fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() <= max {
        line.to_string()
    } else {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ddp::{exited, failed, interpret, parse_records, GOOD_STDOUT, MARK};
    use crate::probe::process::RunError;
    use crate::Status;

    fn hint(o: &Outcome) -> &str {
        o.hint.as_deref().unwrap_or("")
    }

    // ---- evaluate_failure ---------------------------------------------------

    fn failure(ending: Ending, stdout: &str, tail: &str) -> RunFailure {
        RunFailure {
            ending,
            parsed: parse_records(stdout),
            tail: tail.to_string(),
            python: "/venv/bin/python".to_string(),
        }
    }

    fn error_line(rank: u32, error: &str, message: &str) -> String {
        format!(
            "{MARK}{}\n",
            serde_json::json!({"kind": "error", "rank": rank, "error": error,
                "message": message, "traceback": format!("Traceback\n{error}: {message}")})
        )
    }

    const EXIT_1: Ending = Ending::Exited {
        code: Some(1),
        signal: None,
    };

    #[test]
    fn a_failed_worker_is_named_with_its_error_first() {
        let stdout = error_line(1, "RuntimeError", "boom\nsecond line")
            + &error_line(0, "RuntimeError", "Connection closed by peer");
        let o = evaluate_failure(&failure(EXIT_1, &stdout, "ChildFailedError"));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "rank 1 failed: RuntimeError: boom (rank 0 failed after it)"
        );
        assert!(hint(&o).starts_with("a DDP worker died"), "{}", hint(&o));
        assert_eq!(
            o.facts["worker_traceback"],
            "Traceback\nRuntimeError: boom\nsecond line"
        );
        assert_eq!(o.facts["stderr_tail"], "ChildFailedError");
    }

    #[test]
    fn out_of_memory_and_nccl_errors_get_their_own_hints() {
        let o = evaluate_failure(&failure(
            EXIT_1,
            &error_line(
                0,
                "OutOfMemoryError",
                "CUDA out of memory. Tried to allocate 2 GiB",
            ),
            "",
        ));
        assert!(hint(&o).contains("--ddp-model small"), "{}", hint(&o));
        let o = evaluate_failure(&failure(
            EXIT_1,
            &error_line(
                3,
                "DistBackendError",
                "NCCL error in: ProcessGroupNCCL.cpp, unhandled system error",
            ),
            "",
        ));
        assert!(o
            .summary
            .starts_with("rank 3 failed: DistBackendError: NCCL error"));
        assert!(hint(&o).starts_with("NCCL failed between the ranks: rerun with NCCL_DEBUG=INFO"));
    }

    #[test]
    fn a_rank_without_a_gpu_says_to_lower_nproc() {
        let o = evaluate_failure(&failure(
            EXIT_1,
            &error_line(
                2,
                "no_gpu",
                "local rank 2 has no GPU: torch sees 2 CUDA device(s)",
            ),
            "",
        ));
        assert_eq!(
            o.summary,
            "rank 2 has no GPU: local rank 2 has no GPU: torch sees 2 CUDA device(s)"
        );
        assert!(hint(&o).contains("lower --nproc"), "{}", hint(&o));
    }

    #[test]
    fn a_timeout_says_where_every_rank_was() {
        let stdout = r#"@@gpucheck-ddp@@ {"torch_version":"2","backend":"nccl","device":"cuda","world_size":4,"model":"small","parameters":1,"samples_per_rank":1,"tokens_per_sample":1,"precision":"fp32","warmup_steps":1,"timed_steps":1,"no_sync_steps":1,"kind":"setup","rank":0}
@@gpucheck-ddp@@ {"stage":"world size 4: warm-up","kind":"stage","rank":0}
@@gpucheck-ddp@@ {"stage":"world size 4: warm-up","kind":"stage","rank":1}
@@gpucheck-ddp@@ {"stage":"DDP setup","kind":"stage","rank":2}
"#;
        let o = evaluate_failure(&failure(Ending::TimedOut { secs: 22.5 }, stdout, ""));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "timed out after 22 s: ranks 0, 1 at 'world size 4: warm-up'; rank 2 at 'DDP \
             setup'; rank 3 never reported"
        );
        assert_eq!(hint(&o), HANG_HINT);
        assert!(HANG_HINT.contains("NCCL_DEBUG=INFO"));
        let o = evaluate_failure(&failure(Ending::TimedOut { secs: 60.0 }, "", ""));
        assert_eq!(
            o.summary,
            "timed out after 60 s: before any worker reported (torch import or rendezvous)"
        );
    }

    #[test]
    fn launcher_failures_are_explained() {
        let o = evaluate_failure(&failure(
            EXIT_1,
            "",
            "python: Error while finding module specification for 'torch.distributed.run' \
             (ModuleNotFoundError: No module named 'torch')",
        ));
        assert_eq!(o.summary, "torch is not installed for /venv/bin/python");
        assert!(hint(&o).contains("/venv/bin/python -m pip install torch"));

        let o = evaluate_failure(&failure(EXIT_1, "", "ValueError: Cuda is not available."));
        assert_eq!(o.status, Status::Fail);
        assert!(o.summary.contains("sees no CUDA GPU"), "{}", o.summary);
        assert!(hint(&o).contains("--ddp-device cpu"));

        let o = evaluate_failure(&failure(
            Ending::Exited {
                code: None,
                signal: Some(9),
            },
            "",
            "",
        ));
        assert!(o.summary.starts_with("torchrun was killed by signal 9"));
        assert!(hint(&o).contains("out-of-memory killer"));

        let o = evaluate_failure(&failure(
            Ending::Exited {
                code: Some(2),
                signal: None,
            },
            "",
            "torchrun: error: unrecognized arguments",
        ));
        assert_eq!(
            o.summary,
            "torchrun exited with status 2 before the benchmark finished (before any worker \
             reported (torch import or rendezvous))"
        );
        assert_eq!(
            o.facts["stderr_tail"],
            "torchrun: error: unrecognized arguments"
        );

        let o = evaluate_failure(&failure(EXIT_1, GOOD_STDOUT, "Segmentation fault"));
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "torchrun exited with status 1 after the benchmark finished, while shutting down"
        );

        let o = evaluate_failure(&failure(
            Ending::NotStarted {
                reason: "/x/python: Permission denied".to_string(),
            },
            "",
            "",
        ));
        assert_eq!(
            o.summary,
            "cannot start the benchmark: /x/python: Permission denied"
        );
        assert!(hint(&o).contains("--python PATH"));
    }

    #[test]
    fn a_timeout_and_a_spawn_failure_are_failures() {
        let f = failed(interpret(
            Err(RunError::Timeout {
                secs: 22.5,
                stdout: GOOD_STDOUT.to_string(),
                stderr: String::new(),
            }),
            "python",
        ));
        assert_eq!(f.ending, Ending::TimedOut { secs: 22.5 });
        let f = failed(interpret(
            Err(RunError::Spawn {
                program: "/x/python".to_string(),
                reason: "Permission denied".to_string(),
            }),
            "/x/python",
        ));
        assert!(matches!(f.ending, Ending::NotStarted { .. }));
        // A clean exit that never said "done" is not a finished run either.
        let f = failed(interpret(exited(0, "nothing", ""), "python"));
        assert_eq!(evaluate_failure(&f).status, Status::Error);
    }

    // ---- evaluate: finished runs -------------------------------------------
}

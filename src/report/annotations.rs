//! GitHub Actions annotations: with `GITHUB_ACTIONS=true`, one workflow
//! command per check that failed, errored or warned (`::error
//! title=gpu.ecc::summary — fix: hint`), so the run's page and the pull
//! request show them without a token
//! (<https://docs.github.com/en/actions/reference/workflow-commands-for-github-actions>).
//!
//! `main` prints them on stdout when stdout carries the table, as GitHub
//! documents; when stdout carries a machine report (JSON, JUnit, Prometheus,
//! Markdown) or belongs to `exec`'s command, on stderr, which the runner
//! reads for workflow commands as well, so the machine report stays whole.

use gpucheck_checks::Status;

use super::text::clean;
use super::Run;

/// A command's message escaped as the runner unescapes it: `%`, CR and LF.
/// Other control characters are shown escaped, as in the table.
pub fn escape_data(text: &str) -> String {
    let lines: Vec<String> = text
        .split('\n')
        .map(|l| clean(l.trim_end_matches('\r')))
        .collect();
    lines
        .join("\n")
        .replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A property value (`title=`): as a message, and also `:` and `,`, which
/// would end the value.
pub fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// The workflow commands for a run, one line each; empty when every check
/// passed or was skipped. A warning is an error under `--strict`, where it
/// fails the run.
pub fn render(run: &Run) -> String {
    let run = &super::shown(run);
    let mut out = String::new();
    for r in &run.results {
        let command = match r.outcome.status {
            Status::Fail | Status::Error => "error",
            Status::Warn if run.strict => "error",
            Status::Warn => "warning",
            Status::Pass | Status::Skip => continue,
        };
        let mut message = r.outcome.summary.clone();
        // "— fix (reset_gpu): hint", as the table words it.
        let hint = r.outcome.hint.as_deref().filter(|h| !h.is_empty());
        match (super::text::shown_action(&r.outcome), hint) {
            (Some(action), Some(hint)) => message.push_str(&format!(" — fix ({action}): {hint}")),
            (Some(action), None) => message.push_str(&format!(" — fix ({action})")),
            (None, Some(hint)) => message.push_str(&format!(" — fix: {hint}")),
            (None, None) => {}
        }
        out.push_str(&format!(
            "::{command} title={}::{}\n",
            escape_property(&r.id),
            escape_data(&message)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;

    #[test]
    fn fails_and_errors_are_errors_and_warns_are_warnings() {
        let text = render(&fixtures::every_status());
        assert_eq!(
            text,
            "::error title=gpu.ecc::GPU1 has 3 uncorrectable ECC errors — fix (reset_gpu): drain the \
             node and run `nvidia-smi -q -d ECC`; reset with `nvidia-smi -r -i 1`\n\
             ::warning title=host.shm::/dev/shm is 64 MiB — fix (fix_config): docker run \
             --shm-size=16g (or --ipc=host)\n\
             ::error title=net.master_port::probe crashed: SIGSEGV — fix (fix_config)\n"
        );
        let mut strict = fixtures::every_status();
        strict.strict = true;
        assert!(render(&strict).contains("::error title=host.shm::"));
    }

    #[test]
    fn escapes_follow_the_runner() {
        assert_eq!(escape_data("100% a\r\nb\nc"), "100%25 a%0Ab%0Ac");
        assert_eq!(escape_property("a:b,c%"), "a%3Ab%2Cc%25");
        // A hostile summary stays on its one line, its ESC shown escaped.
        for line in render(&fixtures::hostile()).lines() {
            assert!(
                line.starts_with("::error title=env.") || line.starts_with("::warning title=env.")
            );
            assert!(!line.contains('\u{1b}') && !line.contains('\r'), "{line:?}");
        }
        assert!(escape_data("a\nb").lines().count() == 1);
    }
}

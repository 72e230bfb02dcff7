//! The man page: clap_mangen renders the command line, and a CHECKS section
//! is drawn from the CATALOG, so neither can drift from the code. The
//! committed `man/gpucheck.1` is compared with a fresh render in the tests;
//! regenerate it with `GPUCHECK_UPDATE_MAN=1 cargo test man_page`.

use gpucheck_checks::CATALOG;

/// Escape text for roff: backslashes, and a leading `.` or `'`.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e");
    t.lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every subcommand with its own arguments, on this page: there are no
/// separate gpucheck-SUBCOMMAND pages. `run` and `exec` also take every
/// option above.
fn subcommands_section() -> String {
    let cmd = crate::cli::command();
    let shared: Vec<&str> = cmd.get_arguments().map(|a| a.get_id().as_str()).collect();
    let mut out = String::from(".SH SUBCOMMANDS\n");
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let takes_run_options = shared
            .iter()
            .all(|id| sub.get_arguments().any(|a| a.get_id() == id));
        let own: Vec<&clap::Arg> = sub
            .get_arguments()
            .filter(|a| !(takes_run_options && shared.contains(&a.get_id().as_str())))
            .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
            .collect();
        let positionals: Vec<String> = own
            .iter()
            .filter(|a| a.is_positional())
            .map(|a| {
                let name = a
                    .get_value_names()
                    .and_then(|v| v.first())
                    .map_or_else(|| a.get_id().to_string().to_uppercase(), |v| v.to_string());
                if a.is_last_set() {
                    format!("\\-\\- {name}...")
                } else {
                    name
                }
            })
            .collect();
        out.push_str(&format!(
            ".TP\n\\fBgpucheck {}\\fR{}{}\n{}\n",
            sub.get_name(),
            if takes_run_options { " [OPTIONS]" } else { "" },
            positionals
                .iter()
                .map(|p| format!(" {p}"))
                .collect::<String>(),
            roff(&sub.get_about().map(|a| a.to_string()).unwrap_or_default()),
        ));
        for a in own.iter().filter(|a| !a.is_positional()) {
            let values: Vec<String> = a
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            out.push_str(&format!(
                ".RS\n.TP\n\\fB\\-\\-{}\\fR {}\n{}\n.RE\n",
                a.get_long().unwrap_or_default().replace('-', "\\-"),
                values.join("|"),
                roff(&a.get_help().map(|h| h.to_string()).unwrap_or_default()),
            ));
        }
        if let Some(after) = sub.get_after_help() {
            if sub.get_name() == "exec" {
                out.push_str(&format!(".RS\n.PP\n{}\n.RE\n", roff(&after.to_string())));
            }
        }
    }
    out
}

/// The whole man page as roff.
pub fn render() -> String {
    let cmd = crate::cli::command();
    let man = clap_mangen::Man::new(cmd);
    let mut buf: Vec<u8> = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = man.render_title(&mut buf);
    let _ = man.render_name_section(&mut buf);
    let _ = man.render_synopsis_section(&mut buf);
    let _ = man.render_description_section(&mut buf);
    let _ = man.render_options_section(&mut buf);
    let mut out = String::from_utf8_lossy(&buf).into_owned();
    out.push_str(&subcommands_section());

    out.push_str(".SH CHECKS\nChecks run in this order; \\fB--only\\fR and \\fB--skip\\fR take their ids, groups (\\fBgpu\\fR, \\fBnet.*\\fR) or globs.\n");
    for c in CATALOG {
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR ({}, {} profile)\n{}\n",
            c.id(),
            c.title(),
            c.profile().as_str(),
            roff(c.explain().split("\n\n").next().unwrap_or("").trim())
        ));
    }
    out.push_str(".SS Fleet checks\n\\fBgpucheck cluster\\fR runs these on node rank 0, over every node's report, after each node ran its own checks; no profile of \\fBgpucheck run\\fR selects them.\n");
    for c in gpucheck_checks::fleet::FLEET_CATALOG {
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR ({}, gpucheck cluster)\n{}\n",
            c.id(),
            c.title(),
            roff(c.explain().split("\n\n").next().unwrap_or("").trim())
        ));
    }
    out.push_str(".SH EXIT STATUS\n");
    for (code, text) in [
        ("0", "No check failed (warnings allowed)."),
        ("1", "At least one check failed or errored (or warned, under \\fB--strict\\fR); also when interrupted by SIGINT, SIGTERM, SIGHUP or another catchable stop signal (SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU...)."),
        ("2", "Usage or configuration error: a bad flag value, an unknown check id, an unwritable report path. Under \\fB--profile health\\fR such an error exits 1 (Docker reserves 2)."),
    ] {
        out.push_str(&format!(".TP\n\\fB{code}\\fR\n{text}\n"));
    }
    out.push_str(".PP\n\\fBgpucheck exec\\fR, once the checks pass, becomes CMD and exits with its status; when CMD cannot be started it exits 127 (not found) or 126.\n");
    out.push_str(".SH ENVIRONMENT\n.TP\n\\fBNO_COLOR\\fR\nDisables colour in the table.\n.TP\n\\fBGPUCHECK_EXPECT_GPUS\\fR, \\fBGPUCHECK_PYTHON\\fR, \\fBGPUCHECK_NCCL_LIB\\fR\nDefaults for \\fB--expect-gpus\\fR, \\fB--python\\fR and \\fB--nccl-lib\\fR.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_is_up_to_date() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/man/gpucheck.1");
        let fresh = render();
        if std::env::var_os("GPUCHECK_UPDATE_MAN").is_some() {
            std::fs::write(path, &fresh).expect("write man page");
            return;
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == fresh,
            "man/gpucheck.1 is out of date; run `GPUCHECK_UPDATE_MAN=1 cargo test man_page`"
        );
    }

    #[test]
    fn readme_lists_every_check() {
        let readme = include_str!("../README.md");
        for c in CATALOG {
            assert!(
                readme.contains(&format!("| `{}` |", c.id())),
                "README.md's check table misses {}",
                c.id()
            );
        }
    }

    #[test]
    fn readme_says_what_each_profile_holds() {
        let readme = include_str!("../README.md");
        for (profile, about, ids) in crate::cli::profile_rows() {
            let row = format!("| `{}` | {about} | {ids} |", profile.as_str());
            assert!(
                readme.contains(&row),
                "README.md's profile table differs from the catalog; the row should read\n{row}"
            );
        }
    }

    #[test]
    fn man_page_lists_every_check_and_exit_code() {
        let page = render();
        for c in CATALOG {
            assert!(
                page.contains(&format!("\\fB{}\\fR", c.id())),
                "{} missing",
                c.id()
            );
        }
        for c in gpucheck_checks::fleet::FLEET_CATALOG {
            assert!(
                page.contains(&format!(
                    "\\fB{}\\fR ({}, gpucheck cluster)",
                    c.id(),
                    c.title()
                )),
                "{} missing",
                c.id()
            );
        }
        assert!(page.contains(".SH EXIT STATUS"));
        assert!(page.contains("--only"));
    }

    #[test]
    fn man_page_names_no_page_that_does_not_exist() {
        let page = render();
        // Only this page is installed: no gpucheck-run(1), gpucheck-exec(1).
        assert!(!page.contains("gpucheck\\-"), "{page}");
        assert!(page.contains("\\fB\\-\\-on\\-fail\\fR exit|warn"), "{page}");
        assert!(
            page.contains("\\fBgpucheck exec\\fR [OPTIONS] \\-\\- CMD..."),
            "{page}"
        );
        assert!(!page.contains("__child"));
    }
}

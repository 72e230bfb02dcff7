//! The man page: clap_mangen renders the command line, and a CHECKS section
//! is drawn from the CATALOG, so neither can drift from the code. The
//! committed `man/gpucheck.1` is compared with a fresh render in the tests;
//! regenerate it with `GPUCHECK_UPDATE_MAN=1 cargo test man_page`.

use gpucheck_checks::CATALOG;

/// Every environment variable gpucheck reads, with what it does: the
/// ENVIRONMENT section. A name ending in `*` stands for the family. The test
/// `environment_names_every_variable_the_code_reads` scans the sources for
/// the variables read by name, so one added there cannot be missing here.
const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "GPUCHECK_EXPECT_GPUS, GPUCHECK_PYTHON, GPUCHECK_NCCL_LIB",
        "Defaults for --expect-gpus, --python and --nccl-lib.",
    ),
    (
        "GPUCHECK_CLUSTER_TOKEN",
        "The shared secret of gpucheck cluster and exec --cluster when --token-file is not given.",
    ),
    (
        "GPUCHECK_RUN_ID",
        "The id of a cluster run when --run-id is not given (else SLURM_JOB_ID and SLURM_STEP_ID, \
         else TORCHELASTIC_RUN_ID): every node of one job must name the same.",
    ),
    (
        "GPUCHECK_SYSFS_ROOT, GPUCHECK_PROC_ROOT, GPUCHECK_DEV_ROOT, GPUCHECK_ETC_ROOT",
        "Read /sys, /proc, /dev and /etc facts under these folders instead (a copy of another \
         machine's, or a test's).",
    ),
    (
        "GPUCHECK_LOAD_DEVICE",
        "cpu: the load checks and the burn run their payload on the CPU (gpucheck's own tests).",
    ),
    (
        "NO_COLOR",
        "Set and not empty: no colour in the table under --color auto.",
    ),
    (
        "COLUMNS",
        "The width the table, list and explain wrap to (else the terminal's; a pipe is not wrapped).",
    ),
    ("TERM", "dumb: no progress line on stderr."),
    (
        "GITHUB_ACTIONS",
        "true: the checks that need attention are also printed as GitHub workflow annotations.",
    ),
    (
        "VIRTUAL_ENV, CONDA_PREFIX, PATH",
        "Where the training Python is found when --python is not given (the environment \
         gpucheck is installed in comes first).",
    ),
    (
        "LD_LIBRARY_PATH, CUDA_HOME, CUDA_PATH",
        "Where the CUDA and NCCL libraries are looked for, in the loader's order.",
    ),
    (
        "HOME",
        "Its .nccl.conf is read as NCCL reads it.",
    ),
    (
        "NVIDIA_IMEX_CHANNELS",
        "The IMEX channels the container runtime gives this container; fabric.mnnvl warns for \
         one named that /dev/nvidia-caps-imex-channels lacks.",
    ),
    (
        "CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER",
        "Which GPUs a job sees, judged by env.visible_devices against NVML's.",
    ),
    (
        "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
        "torchrun's launch variables, judged by env.torchrun, env.rank and the net checks.",
    ),
    (
        "TORCHELASTIC_*, PET_*",
        "torchrun's own: a run under torchrun, and the node count, rank and master of \
         gpucheck cluster (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT).",
    ),
    (
        "SLURM_*, SLURMD_NODENAME",
        "SLURM's job: the node count and rank of gpucheck cluster (SLURM_NNODES, SLURM_NODEID, \
         SLURM_JOB_NODELIST), the run id, and the ranks gpucheck job finds (SLURM_PROCID, \
         SLURM_NTASKS).",
    ),
    (
        "NCCL_*",
        "NCCL's settings, judged by nccl.env (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, \
         NCCL_NET_PLUGIN...), with NCCL_CONF_FILE and the configuration files it names; values \
         of names that look secret are never shown.",
    ),
    (
        "TORCH_WORKER_SERVER_SOCKET, TORCH_FR_BUFFER_SIZE, TORCH_NCCL_TRACE_BUFFER_SIZE, \
         TORCH_FR_DEBUG_INFO_PIPE_FILE",
        "Read by gpucheck job from each rank's own environment: the rank's worker server, \
         whether its Flight Recorder records at all, and its dump pipe (with \
         TORCH_NCCL_DEBUG_INFO_PIPE_FILE) and dump path (TORCH_FR_DUMP_TEMP_FILE).",
    ),
    (
        "TORCH_FR_DUMP_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_PIPE_FILE, \
         TORCH_NCCL_DUMP_ON_TIMEOUT",
        "gpucheck exec sets the first and the pipe stem for CMD, under a per-job folder in \
         TMPDIR, when neither is set (and TORCH_FR_BUFFER_SIZE=2000, without which torch makes no \
         pipe, and NCCL_RAS_ADDR to a free local port); it warns when \
         TORCH_NCCL_DUMP_ON_TIMEOUT=0 or a buffer size of 0 turns the recorder off.",
    ),
    (
        "NCCL_PROFILER_PLUGIN, NCCL_INSPECTOR_*",
        "gpucheck exec --watch turns on NCCL's Inspector profiler plugin (NCCL 2.28 and later) where \
         libnccl-profiler-inspector.so lies beside the job's libnccl or in the source tree of a \
         NCCL built in place, and only when none of these is set: NCCL_PROFILER_PLUGIN to it, \
         NCCL_INSPECTOR_ENABLE=1, NCCL_INSPECTOR_DUMP_DIR under the per-job folder, \
         NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 and \
         NCCL_INSPECTOR_DUMP_VERBOSE=1 (start times); the watch reads each rank's start times \
         there for lateness.",
    ),
    (
        "KUBERNETES_SERVICE_HOST, container",
        "Which container runtime gpucheck runs under, for the fixes it gives.",
    ),
];

/// Variables gpucheck sets for its own children and reads back, or that
/// only its tests read: no user sets them.
const INTERNAL_VARIABLES: &[&str] = &[
    "GPUCHECK_CHILD",
    "GPUCHECK_SEAM_RECORD",
    "GPUCHECK_LIBCUDA_STUB",
    "GPUCHECK_CLUSTER_CONFIG",
    "GPUCHECK_CLUSTER_KEY",
    "GPUCHECK_UPDATE_MAN",
    "GPUCHECK_UPDATE_SCHEMA",
];

/// What to type, for the EXAMPLES section.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "gpucheck",
        "The standard profile: is this machine ready for a DDP job?",
    ),
    (
        "gpucheck \\-\\-profile quick \\-\\-only gpu,nccl.env",
        "Only the GPU checks and the NCCL settings, without CUDA or Python.",
    ),
    (
        "gpucheck \\-\\-json report.json \\-\\-junit report.xml",
        "In CI: the table on stdout, both reports in files.",
    ),
    (
        "gpucheck exec \\-\\- torchrun \\-\\-nproc\\-per\\-node 8 train.py",
        "As a container ENTRYPOINT: become the training command when the checks pass.",
    ),
    (
        "gpucheck \\-\\-profile health \\-\\-quiet",
        "As a Docker HEALTHCHECK: is the hardware still healthy? One line, exit 0 or 1.",
    ),
    (
        "gpucheck \\-\\-profile burn \\-\\-duration 2h",
        "Burn-in: the quick checks, then two hours of compute and memory load.",
    ),
    (
        "gpucheck cluster \\-\\-nnodes 4 \\-\\-node\\-rank $NODE_RANK \\-\\-master\\-addr node0",
        "On every node of a job: node rank 0 names the node that is not ready.",
    ),
    (
        "gpucheck capture \\-\\-redact report.capture.json",
        "Keep every probe answer, host and user names replaced, to attach to a bug report; \
         gpucheck \\-\\-replay report.capture.json judges it again anywhere.",
    ),
    (
        "gpucheck explain nccl.allreduce",
        "What a check checks, why it matters for DDP, and how to fix it.",
    ),
];

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
            // A flag (`exec --cluster`) takes no value: its parser's
            // true/false is no value a user types.
            let values: Vec<String> = if a.get_action().takes_values() {
                a.get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_string())
                    .collect()
            } else {
                Vec::new()
            };
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
    // --profile's long help lists the profiles one per line, which roff
    // would run together: OPTIONS gets its one-line help, and the PROFILES
    // section the list, one paragraph each.
    let cmd = crate::cli::command().mut_arg("profile", |a| a.long_help(None));
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
    out.push_str(&profiles_section());

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
        ("1", "At least one check failed or errored (or warned, under \\fB--strict\\fR); also when interrupted by SIGINT, SIGTERM, SIGHUP or another catchable stop signal (SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU...), within a second at every point: a wait for a report FIFO's reader or for a reader of stdout ends too."),
        ("2", "Usage or configuration error: a bad flag value, an unknown check id, an unwritable report path; a file gpucheck reads that is not a regular file (a FIFO, a device, a folder: \\fB--replay\\fR, \\fB--token-file\\fR, \\fB--nvml-lib\\fR, \\fB--nccl-lib\\fR) or is too large; a capture over 8 MiB (64 MiB for \\fBgpucheck job\\fR's), of more than 6 million JSON values, or that describes no real machine (more than 32 GPUs, GPU counts that disagree). Under \\fB--profile health\\fR such an error exits 1 (Docker reserves 2)."),
    ] {
        out.push_str(&format!(".TP\n\\fB{code}\\fR\n{text}\n"));
    }
    out.push_str(".PP\n\\fBgpucheck exec\\fR, once the checks pass, becomes CMD and exits with its status; when CMD cannot be started it exits 127 (not found) or 126.\n");
    out.push_str(".SH ENVIRONMENT\n");
    for (names, what) in ENVIRONMENT {
        let names: Vec<String> = names
            .split(", ")
            .map(|n| format!("\\fB{}\\fR", roff(n)))
            .collect();
        out.push_str(&format!(".TP\n{}\n{}\n", names.join(", "), roff(what)));
    }
    out.push_str(".SH EXAMPLES\n");
    for (command, what) in EXAMPLES {
        out.push_str(&format!(".TP\n\\fB{command}\\fR\n{what}\n"));
    }
    out
}

/// Each profile, what it is for and what it adds, one paragraph each
/// (`cli::profile_rows`, which --help and the README show too).
fn profiles_section() -> String {
    let mut out = String::from(
        ".SH PROFILES\n\\fB\\-\\-profile\\fR chooses the checks (default: standard; under \
         \\fB\\-\\-replay\\fR, the profile the capture ran). quick, standard and full each \
         add to the one before; health and burn are lists of their own.\n",
    );
    for (profile, about, ids) in crate::cli::profile_rows() {
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}: {}\n",
            profile.as_str(),
            roff(&capitalised(about)),
            roff(&ids)
        ));
    }
    out
}

/// `text` with its first letter in upper case.
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
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

    /// README's figures are measured: its Figures section names the
    /// script that prints them and the machine, and has a row for each
    /// figure the script prints.
    #[test]
    fn readme_figures_come_from_the_script_with_the_machine() {
        let readme = include_str!("../README.md");
        let script = include_str!("../scripts/measure-readme.sh");
        let figures = readme
            .split("### Figures\n")
            .nth(1)
            .and_then(|s| s.split("\n#").next())
            .expect("README has a Figures section");
        assert!(
            figures.contains("`bash scripts/measure-readme.sh`"),
            "{figures}"
        );
        assert!(
            figures.contains("2-core") && figures.contains("no GPU"),
            "{figures}"
        );
        for (printed, row) in [
            (
                "\"test venv (.venv)\"",
                "| the test virtual environment `.venv` |",
            ),
            (
                "gpucheck --profile ' + profile",
                "| `gpucheck` (the standard profile",
            ),
            (
                "gpucheck --profile ' + profile",
                "| `gpucheck --profile quick` |",
            ),
            (
                "\"fresh clone: bash scripts/test.sh\"",
                "| `bash scripts/test.sh` on a fresh clone",
            ),
        ] {
            assert!(script.contains(printed), "the script prints no {printed}");
            assert!(figures.contains(row), "README's Figures have no row {row}");
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
    fn the_profiles_are_paragraphs_of_their_own() {
        let page = render();
        let section = page
            .split(".SH PROFILES\n")
            .nth(1)
            .and_then(|s| s.split("\n.SH ").next())
            .expect("a PROFILES section");
        for (profile, _, _) in crate::cli::profile_rows() {
            assert!(
                section.contains(&format!(".TP\n\\fB{}\\fR\n", profile.as_str())),
                "{} is no paragraph of its own:\n{section}",
                profile.as_str()
            );
        }
        // The options list no longer carries the run-together list.
        assert!(!page.contains("quick (NVML"), "{page}");
    }

    #[test]
    fn a_flag_is_documented_without_values_it_does_not_take() {
        let page = render();
        assert!(!page.contains("true|false"), "{page}");
        assert!(page.contains("\\fB\\-\\-cluster\\fR \n"), "{page}");
    }

    #[test]
    fn the_page_has_examples() {
        let page = render();
        assert!(page.contains(".SH EXAMPLES\n"));
        assert!(page.contains("\\fBgpucheck exec \\-\\- torchrun"), "{page}");
    }

    /// Every variable the code reads by name is in ENVIRONMENT (by name or
    /// family) or is gpucheck's own (INTERNAL_VARIABLES): the sources are
    /// scanned for one-argument `var`, `var_os`, `env` and `env_lossy`
    /// calls, `first_var` lists, clap's `env = ...` and `*_ENV` constants.
    #[test]
    fn environment_names_every_variable_the_code_reads() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut names = std::collections::BTreeSet::new();
        let mut files = Vec::new();
        for dir in ["src", "checks/src"] {
            let mut stack = vec![root.join(dir)];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).unwrap().flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") {
                        files.push(p);
                    }
                }
            }
        }
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            // The code, not its unit tests (which set variables of their own).
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            names.extend(variables_read(code));
        }
        assert!(
            names.contains("GPUCHECK_SYSFS_ROOT"),
            "the scan finds nothing: {names:?}"
        );
        let listed: Vec<&str> = ENVIRONMENT
            .iter()
            .flat_map(|(n, _)| n.split(", "))
            .collect();
        let covered = |name: &str| {
            INTERNAL_VARIABLES.contains(&name)
                || listed.iter().any(|l| match l.strip_suffix('*') {
                    Some(family) => name.starts_with(family),
                    None => *l == name,
                })
        };
        let missing: Vec<&String> = names.iter().filter(|n| !covered(n)).collect();
        assert!(
            missing.is_empty(),
            "read by the code but not in man.rs's ENVIRONMENT: {missing:?}"
        );
    }

    /// The names `code` reads: `var("X")`, `var_os("X")`, `env("X")`,
    /// `env_lossy("X")` (one argument: `.env("X", v)` sets a child's),
    /// clap's `env = "X"`, `first_var(env, &["X", "Y"])` and `const
    /// *_ENV: &str = "X"`.
    fn variables_read(code: &str) -> Vec<String> {
        let ident = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        let mut out = Vec::new();
        for call in ["var(\"", "var_os(\"", "env(\"", "env_lossy(\""] {
            for (at, _) in code.match_indices(call) {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                let rest = &code[at + call.len()..];
                let name = ident(rest);
                let after = rest[name.len()..].trim_start_matches('"').trim_start();
                if !name.is_empty() && rest[name.len()..].starts_with('"') && after.starts_with(')')
                {
                    out.push(name);
                }
            }
        }
        for marker in ["env = \"", "_ENV: &str = \""] {
            for (at, _) in code.match_indices(marker) {
                out.push(ident(&code[at + marker.len()..]));
            }
        }
        for (at, _) in code.match_indices("first_var(") {
            let rest = &code[at..];
            let (Some(open), Some(close)) = (rest.find("&["), rest.find(']')) else {
                continue;
            };
            if open < close {
                out.extend(
                    rest[open + 2..close]
                        .split(',')
                        .map(|w| w.trim().trim_matches('"').to_string())
                        .filter(|w| !w.is_empty()),
                );
            }
        }
        out.retain(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        out
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

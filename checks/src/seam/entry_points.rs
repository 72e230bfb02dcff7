//! A new probe cannot forget the boundary: every `pub fn` in
//! `checks/src/probe/*.rs` either goes through [`crate::seam`] (its body
//! calls `seam::answer` or `seam::env`), or is named here as a pure helper
//! (it only parses or formats what a wired entry point fetched, or it is
//! the process machinery that runs probes), or is on the temporary
//! [`NOT_YET_WIRED`] list, which shrinks as those probes are wired.

/// Functions that ask the machine nothing: parsers and formatters of what
/// a wired entry point read, pure judgements, and the process machinery
/// (spawning, supervising, killing) that runs the probes.
const PURE_HELPERS: &[(&str, &[&str])] = &[
    (
        "host.rs",
        &["gpu_minor", "classify_open_error", "shm", "device_nodes"],
    ),
    ("system.rs", &["detect_container"]),
    (
        "net.rs",
        &[
            "if_inet6_has_loopback",
            "is_local",
            "sockets_on_port",
            "shown_command",
        ],
    ),
    (
        "python.rs",
        // choose_python: called by find_python (wired) with its inputs;
        // installed_env: called only inside find_python's live closure;
        // PayloadFile and run_payload: the machinery under torch and ddp.
        &[
            "choose_python",
            "installed_env",
            "describe",
            "write",
            "path",
            "dir",
            "command",
            "remove_payload_dirs_of",
            "python_command",
            "run_payload",
            "name_of",
        ],
    ),
    ("torch.rs", &["cudnn_version_string", "parse_output"]),
    (
        "ddp.rs",
        &[
            "local_addr_flag",
            "parse_records",
            "interpret",
            "exited",
            "failed",
            "comm_wait_share",
            "device_label",
        ],
    ),
    ("sysfs.rs", &["sysfs_root", "proc_root"]),
    ("net_plugin.rs", &["plugin_names", "all_missing"]),
    ("copy_bandwidth.rs", &["parse_cpulist"]),
    // hung_call: this process's own NVML state (empty under replay);
    // gpus: inventory (wired) with the lost GPUs left out.
    ("nvml.rs", &["hung_call", "gpus"]),
    (
        "kernel_log.rs",
        &["parse_kmsg_record", "parse_log", "xid_in"],
    ),
    (
        "process.rs",
        &[
            "capture",
            "finish_by",
            "wait_killed",
            "kill_group",
            "isolate",
            "become_subreaper",
            "stop_being_subreaper",
            "parent_and_group",
            "reap_descendants",
            "run_bounded",
            "supervise",
            "run_bounded_then",
            "proc_pids",
            "pids_with_arg",
            "kill_processes_with_arg",
            "tail",
        ],
    ),
];

/// Functions that read the machine but are reached only inside a wired
/// entry point's live closure (and from unit tests with their own inputs),
/// so their answers are in the wired one's.
const INSIDE_WIRED: &[(&str, &[&str])] = &[(
    "kernel_log.rs",
    // inside read_kernel_log
    &["read_live", "read_file", "read_kmsg"],
)];

/// TEMPORARY: the entry points of the probes that do not go through the
/// boundary yet, as they stand. Under replay the checks that use them are
/// skipped ([`crate::seam::NOT_YET_WIRED_CHECKS`]). Wire one (or name it a
/// pure helper above) and take it off this list.
pub const NOT_YET_WIRED: &[(&str, &[&str])] = &[
    (
        "cuda.rs",
        &[
            "round_trip_pattern",
            "compare_round_trip",
            "libcuda_present",
            "libcuda_candidates",
            "mapped_library",
            "find_mapped",
            "driver_cuda_version",
            "probe_driver",
            "format_uuid",
            "device_uuid",
            "stub_libcuda_first",
            "child_library_path",
            "stub_first_on_path",
            "kernel_driver_version_in",
            "probe",
            "find_runtimes",
            "compat_libcuda_dirs",
            "kernel_driver_version",
            "parse_proc_driver_version",
            "is_compat_path",
        ],
    ),
    (
        "nccl.rs",
        &[
            "from_code",
            "parse",
            "library_facts",
            "get",
            "parse_conf",
            "merge_vars",
            "interface_speed_mbps",
            "ib_devices",
            "env_facts",
            "environment_nccl_vars",
            "parse_tuning_line",
            "nccl_reserve_bytes",
            "max_buffer_bytes",
            "fit_sizes",
            "warm_up_done",
            "timed_iters",
            "size_budget",
            "pattern",
            "fill_pattern",
            "expected_table",
            "verify",
            "format_bytes",
            "run_allreduce",
            "run_allreduce_again",
        ],
    ),
    (
        "libs.rs",
        &[
            "describe",
            "parse_ldconfig",
            "wheel_dirs",
            "env_lib_dirs",
            "from_env",
            "name_matches",
            "find",
            "call_version_fn",
        ],
    ),
    (
        "copy_bandwidth.rs",
        &["measure_all", "buffer_bytes", "locality", "measure_again"],
    ),
];

/// Every `pub fn` of a probe source (tests left out), with its body.
fn public_functions(text: &str) -> Vec<(String, String)> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("pub fn ") {
        let after = &rest[at + 7..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let open = after.find("{\n").unwrap_or(after.len());
        let (mut depth, mut end) = (0usize, after.len());
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((name, after[open..end].to_string()));
        rest = &after[end..];
    }
    out
}

fn listed(list: &[(&str, &[&str])], file: &str, name: &str) -> bool {
    list.iter()
        .any(|(f, names)| *f == file && names.contains(&name))
}

#[test]
fn every_probe_entry_point_goes_through_the_seam() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/probe");
    let mut unwired = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir)
        .expect("checks/src/probe exists")
        .flatten()
    {
        let file = entry.file_name().to_string_lossy().into_owned();
        if !file.ends_with(".rs") || file == "mod.rs" {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for (name, body) in public_functions(&text) {
            let wired = body.contains("seam::");
            let named = listed(PURE_HELPERS, &file, &name)
                || listed(INSIDE_WIRED, &file, &name)
                || listed(NOT_YET_WIRED, &file, &name);
            if !wired && !named {
                unwired.push(format!("probe/{file}: {name}"));
            }
        }
    }
    assert!(
        files >= 10,
        "found only {files} probe files in {}",
        dir.display()
    );
    assert!(
        unwired.is_empty(),
        "these probe entry points reach the machine without crate::seam::answer (wrap the body \
         in it, so --capture keeps the answer and --replay gives it), or name them pure helpers \
         in checks/src/seam/entry_points.rs:\n{}",
        unwired.join("\n")
    );
}

#[test]
fn a_pure_helper_is_not_wired_and_still_exists() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/probe");
    for (file, names) in PURE_HELPERS.iter().chain(INSIDE_WIRED) {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        let fns = public_functions(&text);
        for name in *names {
            let found = fns.iter().find(|(n, _)| n == name);
            assert!(found.is_some(), "probe/{file}: {name} is listed but gone");
        }
    }
}

#[test]
fn a_check_replays_only_when_its_probes_are_wired() {
    // A check's source that calls a not-yet-wired probe function must be
    // on NOT_YET_WIRED_CHECKS, or a replay would ask the replaying machine.
    // Reading their types (GpuInfo) and the facts module (wired) are fine.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = [
        "nvml",
        "cuda",
        "nccl",
        "libs",
        "kernel_log",
        "copy_bandwidth",
    ];
    for check in crate::CATALOG {
        if crate::seam::not_replayable(check.id()).is_some() {
            continue;
        }
        let (group, name) = check.id().split_once('.').unwrap_or_default();
        let file = [
            src.join(group).join(format!("{name}.rs")),
            src.join(group).join(name).join("mod.rs"),
        ]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no source for {}", check.id()));
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for m in modules {
            for call in text.match_indices(&format!("{m}::")) {
                let after = &text[call.0 + m.len() + 2..];
                let ident: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let is_call =
                    after[ident.len()..].starts_with('(') && !text[..call.0].ends_with("facts::");
                let unwired = listed(NOT_YET_WIRED, &format!("{m}.rs"), &ident);
                assert!(
                    !(is_call && unwired),
                    "{} calls {m}::{ident}, which is not wired: add it to NOT_YET_WIRED_CHECKS",
                    check.id()
                );
            }
        }
    }
}

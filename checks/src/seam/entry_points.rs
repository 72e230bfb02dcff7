//! A new probe cannot forget the boundary: every `pub fn` in
//! `checks/src/probe/*.rs` either goes through [`crate::seam`] (its body
//! calls `seam::answer` or `seam::env`), or is named here as a pure helper
//! (it only parses or formats what a wired entry point fetched, or it is
//! the process machinery that runs probes), or is named as reached only
//! inside a wired entry point's live closure.

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
        // PayloadFile and run_payload: the machinery under torch and ddp;
        // InteractivePayload::ended: the cluster front's payload machinery.
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
            "ended",
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
    // boot_epoch: this machine's clock and uptime, the reference a live
    // kernel log's times are read against (a capture keeps the events).
    // uptime_secs: one sysfs::attr (wired) read, parsed.
    (
        "sysfs.rs",
        &["sysfs_root", "proc_root", "boot_epoch", "uptime_secs"],
    ),
    // job_key: a rank's job, from what ranks::find (wired) read.
    ("ranks.rs", &["job_key"]),
    // The Flight Recorder's pickle and JSON decoders: parsers of the bytes
    // fr_dump::read_dump (wired) read.
    ("fr_pickle.rs", &["decode", "decode_folding", "from_json"]),
    ("fr_json.rs", &["decode"]),
    // read_dir runs rank_files and read_dump (both wired) on reader threads.
    // parse: the decoder of a dump's bytes, read by read_dump, by
    // rank_state::dump_via_pipe and dump_written, or asked of a rank's
    // worker server by rank_state::ask_worker (all wired).
    ("fr_dump.rs", &["read_dir", "parse"]),
    // read_dir: read_dir_within (wired) with the default limits;
    // parse_lines: the decoder of a file's bytes read_dir_within read;
    // lateness: a judgement of what it read.
    (
        "nccl_inspector.rs",
        &["read_dir", "parse_lines", "lateness"],
    ),
    ("net_plugin.rs", &["plugin_names", "all_missing"]),
    ("copy_bandwidth.rs", &["parse_cpulist", "buffer_bytes"]),
    // from_env: the variable through seam::env; as_str: a name.
    ("load.rs", &["from_env", "as_str", "parse"]),
    (
        "nccl.rs",
        // run_allreduce: run_allreduce_again (wired) with no repeats.
        &[
            "from_code",
            "parse",
            "get",
            "parse_conf",
            "merge_vars",
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
        ],
    ),
    ("libs.rs", &["describe", "parse_ldconfig", "name_matches"]),
    (
        "cuda.rs",
        // child_library_path: the runner's, for the child it starts.
        &[
            "round_trip_pattern",
            "compare_round_trip",
            "libcuda_candidates",
            "find_mapped",
            "format_uuid",
            "parse_proc_driver_version",
            "is_compat_path",
            "child_library_path",
        ],
    ),
    // hung_call: this process's own NVML state (empty under replay);
    // gpus: inventory (wired) with the lost GPUs left out.
    // nvml_return_name: nvml.h's name of a return code.
    ("nvml.rs", &["hung_call", "gpus", "nvml_return_name"]),
    (
        "kernel_log.rs",
        &["parse_kmsg_record", "parse_log", "xid_in", "oom_in"],
    ),
    (
        "process.rs",
        &[
            "capture",
            "capture_lines",
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
            "supervise_lines",
            "supervise_out_lines",
            "run_bounded_then",
            "proc_pids",
            "pids_with_arg",
            "kill_processes_with_arg",
            "tail",
        ],
    ),
    // The watch's supervision of the job it runs or attached to: each
    // rank's /proc progress and its end, read live every period. Never
    // captured or replayed (--watch refuses --replay); the diagnosis a
    // watch runs on a hang is `gpucheck job`, whose probes are wired.
    (
        "exits.rs",
        &["proc_sample", "add", "is_empty", "wait", "start"],
    ),
];

/// Functions that read the machine but are reached only inside a wired
/// entry point's live closure (and from unit tests with their own inputs),
/// so their answers are in the wired one's.
const INSIDE_WIRED: &[(&str, &[&str])] = &[
    (
        "as_rank.rs",
        // inside rank_state's wired entry points: the rank's files opened
        // with its user's rights (source_line, ask_worker, dump_via_pipe,
        // dump_written, nccl_version), and whether what the rank names may be
        // run or loaded (py_spy, nccl_version)
        &[
            "user_of",
            "acting_for",
            "run",
            "read",
            "modified",
            "open_fifo",
            "connect",
            "trusted",
            "find",
        ],
    ),
    (
        "kernel_log.rs",
        // inside read_kernel_log
        &["read_live", "read_file", "read_kmsg"],
    ),
    (
        "libs.rs",
        // inside nccl::library_facts and cuda::find_runtimes
        &["wheel_dirs", "env_lib_dirs", "find", "call_version_fn"],
    ),
    (
        "cuda.rs",
        // inside probe_driver, the all-reduce, the copy benchmark, DDP's
        // payload and net_plugin::load_plugin; kernel_driver_version_in
        // inside kernel_driver_version
        &[
            "mapped_library",
            "device_uuid",
            "stub_libcuda_first",
            "probe",
            "kernel_driver_version_in",
        ],
    ),
    (
        "nvml.rs",
        // inside load::run: the samples taken while the load runs
        &["load_readings_live"],
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
            let named = listed(PURE_HELPERS, &file, &name) || listed(INSIDE_WIRED, &file, &name);
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

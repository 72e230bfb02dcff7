//! `nccl.library`: every libnccl.so.2 a job could load, the copy it gets
//! first, and whether that is the NCCL torch reports.

use std::path::Path;
use std::time::Duration;

use super::NcclWheel;
use crate::facts::nccl::NcclChoice;
use crate::facts::torch::TorchInfo;
use crate::probe::libs::LibSource;
use crate::probe::nccl::{self as probe, LibraryFacts, NcclCopy, NcclVersion};
use crate::{Cause, Check, Context, DataTable, Isolation, Outcome, Profile};

/// `nccl.library`: find every libnccl.so.2 a job could load and its version.
pub struct Library;

/// The copy a program gets when it asks the loader for libnccl.so.2: the
/// first one, in search order, that loads and answers ncclGetVersion.
pub fn winner(facts: &LibraryFacts) -> Option<&NcclCopy> {
    facts.copies.iter().find(|c| c.version.is_ok())
}

fn source_name(source: LibSource) -> &'static str {
    source.describe()
}

fn copies_table(facts: &LibraryFacts) -> DataTable {
    let chosen = winner(facts).map(|c| c.real_path.clone());
    let rows = facts
        .copies
        .iter()
        .map(|c| {
            vec![
                if Some(&c.real_path) == chosen.as_ref() {
                    "*".to_string()
                } else {
                    String::new()
                },
                match &c.version {
                    Ok(v) => v.to_string(),
                    Err(e) => format!("error: {e}"),
                },
                source_name(c.source).to_string(),
                if c.path == c.real_path {
                    c.path.display().to_string()
                } else {
                    format!("{} -> {}", c.path.display(), c.real_path.display())
                },
            ]
        })
        .collect();
    DataTable {
        title: "NCCL libraries found".to_string(),
        header: vec![
            "used".to_string(),
            "version".to_string(),
            "found via".to_string(),
            "path".to_string(),
        ],
        rows,
        legend: Some(
            "* = the copy a program asking for libnccl.so.2 loads first (search order: \
             --nccl-lib, LD_LIBRARY_PATH, ldconfig cache, system folders, CUDA_HOME, \
             /usr/local/cuda*, the Python environment's nvidia/*/lib and torch/lib, its own lib folder)"
                .to_string(),
        ),
    }
}

/// Judge what was found. `torch_nccl` is the NCCL version torch reports
/// (torch.import's `nccl_version`), when torch was looked at.
pub fn evaluate_library(facts: &LibraryFacts, torch_nccl: Option<&str>) -> Outcome {
    judge_library(facts, torch_nccl, &NcclWheel::default())
}

/// [`evaluate_library`], with the install hint for what this run knows of
/// the training Python's torch and the driver (`wheel`).
pub fn judge_library(facts: &LibraryFacts, torch_nccl: Option<&str>, wheel: &NcclWheel) -> Outcome {
    let chosen = match usable_copy(facts, &wheel.install_hint(), wheel.torch_missing.is_some()) {
        Ok(c) => c,
        Err(o) => return *o,
    };
    let mut outcome = match torch_nccl.and_then(NcclVersion::parse) {
        Some(torch) if torch != chosen.version => torch_mismatch(facts, &chosen, torch, wheel),
        _ => Outcome::pass(found_summary(facts, &chosen)),
    };
    outcome = outcome
        .with_fact("nccl_version", chosen.version.to_string())
        .with_fact("nccl_path", chosen.path.display().to_string())
        .with_fact("nccl_real_path", chosen.real_path.display().to_string())
        .with_fact("nccl_source", chosen.source.clone());
    if let Some(t) = torch_nccl {
        outcome = outcome.with_fact("torch_nccl_version", t);
    }
    outcome
        .with_metric("nccl_copies", facts.copies.len() as f64, "count")
        .with_table(copies_table(facts))
        .publish(&chosen)
}

/// The copy a job gets, or the failure that there is none it can use: an
/// explicit path that is not a file, nothing found, an explicit copy or
/// every copy that does not load.
/// `torch_missing`: torch.import found no torch in the training Python (a
/// finding of none is then a skip that names it, not a second failure).
fn usable_copy(
    facts: &LibraryFacts,
    install: &str,
    torch_missing: bool,
) -> Result<NcclChoice, Box<Outcome>> {
    if let (Some(explicit), true) = (&facts.explicit, facts.explicit_missing) {
        return Err(Box::new(Outcome::fail(
            format!("--nccl-lib {} is not a file", explicit.display()),
            "give the path of the library itself, e.g. \
             .../site-packages/nvidia/nccl/lib/libnccl.so.2 or \
             /usr/lib/x86_64-linux-gnu/libnccl.so.2, or drop --nccl-lib / GPUCHECK_NCCL_LIB \
             to search the usual places",
        )));
    }
    if facts.copies.is_empty() {
        let searched_python = match &facts.python {
            Ok(p) => format!("{}'s site-packages", p.display()),
            Err(e) => format!("no Python environment ({e})"),
        };
        let found = format!(
            "no libnccl.so.2 found (searched LD_LIBRARY_PATH, the ldconfig cache, system \
             library folders, CUDA_HOME, /usr/local/cuda*, {searched_python})"
        );
        if torch_missing {
            // One cause, counted once: torch.import fails with the install
            // command, and torch's CUDA wheels bring NCCL, so no NCCL is
            // what a missing torch looks like here, not a second fault.
            return Err(Box::new(
                Outcome::skip(format!(
                    "{found}; not judged while torch.import finds no torch: torch's CUDA wheels \
                     bring NCCL (nvidia-nccl-cu*), so its fix decides this"
                ))
                .with_cause(Cause::NeedsFailed {
                    need: "torch.import".into(),
                }),
            ));
        }
        return Err(Box::new(Outcome::fail(found, install)));
    }
    let explicit_copy = facts
        .copies
        .iter()
        .find(|c| c.source == LibSource::Explicit);
    if let Some(NcclCopy {
        path,
        version: Err(e),
        ..
    }) = explicit_copy
    {
        return Err(Box::new(
            Outcome::fail(
                format!("--nccl-lib {} is not a usable NCCL: {e}", path.display()),
                "point --nccl-lib at a libnccl.so.2 built for this machine (x86_64/aarch64, \
                 NCCL 2), or drop it to use the copy the loader finds",
            )
            .with_table(copies_table(facts)),
        ));
    }
    match winner(facts) {
        Some(NcclCopy {
            path,
            real_path,
            source,
            version: Ok(version),
        }) => Ok(NcclChoice {
            path: path.clone(),
            real_path: real_path.clone(),
            version: *version,
            source: source_name(*source).to_string(),
            copies: facts.copies.len(),
        }),
        _ => Err(Box::new(none_loads(facts, install))),
    }
}

/// Copies were found but none answers ncclGetVersion.
fn none_loads(facts: &LibraryFacts, install: &str) -> Outcome {
    let first_error = facts
        .copies
        .iter()
        .find_map(|c| c.version.as_ref().err())
        .cloned()
        .unwrap_or_default();
    let n = facts.copies.len();
    Outcome::fail(
        format!(
            "found {n} cop{} of libnccl but none loads: {first_error}",
            if n == 1 { "y" } else { "ies" }
        ),
        format!(
            "a missing dependency or a library for another architecture; check with `ldd \
             {}`, then reinstall: {install}",
            facts
                .copies
                .first()
                .map(|c| c.path.display().to_string())
                .unwrap_or_default()
        ),
    )
    .with_table(copies_table(facts))
}

/// "NCCL 2.27.7 from PATH (how found); 3 copies found (also 2.18.5)".
fn found_summary(facts: &LibraryFacts, chosen: &NcclChoice) -> String {
    let version = chosen.version;
    let others: Vec<String> = facts
        .copies
        .iter()
        .filter_map(|c| c.version.as_ref().ok())
        .filter(|v| **v != version)
        .map(|v| v.to_string())
        .collect();
    let mut summary = format!(
        "NCCL {version} from {} ({})",
        chosen.path.display(),
        chosen.source
    );
    if facts.copies.len() > 1 {
        summary.push_str(&format!("; {} copies found", facts.copies.len()));
        if !others.is_empty() {
            summary.push_str(&format!(" (also {})", others.join(", ")));
        }
    }
    summary
}

/// The copy found first is not the NCCL torch reports: warn, and say how to
/// make them agree.
fn torch_mismatch(
    facts: &LibraryFacts,
    chosen: &NcclChoice,
    torch: NcclVersion,
    wheel: &NcclWheel,
) -> Outcome {
    let version = chosen.version;
    let torch_copy = facts
        .copies
        .iter()
        .find(|c| c.version.as_ref().ok() == Some(&torch));
    let align = match torch_copy {
        Some(c) => format!(
            "put {} first on LD_LIBRARY_PATH (or remove the other copy)",
            c.path.parent().unwrap_or(Path::new("")).display()
        ),
        None => match wheel.torch_cuda {
            Some(cuda) => format!(
                "remove or upgrade the NCCL {version} copy, or install the matching one \
                 (`pip install nvidia-nccl-cu{}=={torch}`: this torch is a CUDA {cuda} build)",
                cuda.major
            ),
            None => format!(
                "remove or upgrade the NCCL {version} copy, or install the matching one \
                 (`pip install nvidia-nccl-cu12=={torch}`, or nvidia-nccl-cu13=={torch} for \
                 a CUDA 13 build of torch)"
            ),
        },
    };
    Outcome::warn(
        format!(
            "libnccl.so.2 found first is NCCL {version} ({}), but torch reports NCCL {torch}",
            chosen.path.display()
        ),
        format!(
            "torch uses the NCCL it was built against; anything else in the job that loads \
             libnccl.so.2 (extensions, nccl-tests, a second framework) gets {version}, and \
             ranks running different NCCL versions can hang or fail at init. Make them \
             agree: {align}"
        ),
    )
}

/// The NCCL version torch reports: torch.import's [`TorchInfo`], unless
/// torch.nccl ran and found torch's NCCL unusable.
fn torch_nccl_version(ctx: &Context) -> Option<String> {
    if ctx
        .earlier("torch.nccl")
        .is_some_and(|o| !o.status.satisfies_needs())
    {
        return None;
    }
    let torch = ctx.fact::<TorchInfo>()?;
    torch
        .nccl_version
        .filter(|_| torch.nccl_available != Some(false))
}

impl Check for Library {
    fn id(&self) -> &'static str {
        "nccl.library"
    }
    fn title(&self) -> &'static str {
        "NCCL library"
    }
    fn profile(&self) -> Profile {
        Profile::Standard
    }
    fn isolation(&self) -> Isolation {
        // Loading libnccl runs its initialisers.
        Isolation::Child
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(20)
    }
    fn explain(&self) -> &'static str {
        "Finds every libnccl.so.2 a training job on this machine could load and reads each one's \
version.\n\n\
It looks where the dynamic loader and Python wheels would: --nccl-lib / GPUCHECK_NCCL_LIB, \
LD_LIBRARY_PATH, the ldconfig cache, the system library folders, CUDA_HOME, /usr/local/cuda*, and \
the chosen Python environment's site-packages/nvidia/*/lib (the nvidia-nccl wheel torch depends \
on) and torch/lib. Each copy is loaded in an isolated process and asked ncclGetVersion, which \
answers without a GPU. The report lists every copy and marks the one a program asking for \
libnccl.so.2 gets first.\n\n\
Why it matters for DDP: torch's NCCL backend cannot start without NCCL, and two NCCL versions in \
one job (torch's own copy plus an older one on LD_LIBRARY_PATH picked up by an extension or by \
other ranks) are a classic cause of hangs at init. When torch.nccl ran, the version torch reports \
is compared with the one found first, and a difference warns.\n\n\
Fixes: no NCCL -> `pip install nvidia-nccl-cu12` (nvidia-nccl-cu13 for CUDA 13 builds; the \
hint names the one for the torch build, else for the driver) in the training environment, or \
`apt install libnccl2`, or --nccl-lib PATH. With no torch in the training Python and no NCCL \
found, nccl.library skips naming torch.import rather than fail a second time: torch's CUDA wheels \
bring NCCL, so torch.import's install command is the one fix. A copy that does not load -> \
check it with `ldd`, reinstall it. Version mismatch with torch -> put torch's copy first on \
LD_LIBRARY_PATH, remove the stale one, or install the matching version."
    }
    fn run(&self, ctx: &Context) -> Outcome {
        let facts = probe::library_facts(
            ctx.options.nccl_lib.as_deref(),
            ctx.options.python.as_deref(),
        );
        // The install hint may ask NVML for the driver: only when needed;
        // torch's build is read from torch.import's facts.
        let wheel = if usable_copy(&facts, "", false).is_err() {
            NcclWheel::for_run(ctx)
        } else {
            NcclWheel::of_torch(ctx)
        };
        judge_library(&facts, torch_nccl_version(ctx).as_deref(), &wheel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;
    use std::path::PathBuf;

    // ---- nccl.library -----------------------------------------------------

    fn v(major: u32, minor: u32, patch: u32) -> NcclVersion {
        NcclVersion {
            major,
            minor,
            patch,
        }
    }

    fn copy(path: &str, source: LibSource, version: Result<NcclVersion, &str>) -> NcclCopy {
        NcclCopy {
            path: PathBuf::from(path),
            real_path: PathBuf::from(path),
            source,
            version: version.map_err(str::to_string),
        }
    }

    fn lib_facts(copies: Vec<NcclCopy>) -> LibraryFacts {
        LibraryFacts {
            explicit: None,
            explicit_missing: false,
            python: Ok(PathBuf::from("/venv/bin/python")),
            copies,
        }
    }

    const WHEEL: &str = "/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2";

    #[test]
    fn library_missing_explicit_path_fails() {
        let mut f = lib_facts(vec![]);
        f.explicit = Some(PathBuf::from("/opt/nccl/libnccl.so.2"));
        f.explicit_missing = true;
        let o = evaluate_library(&f, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(o.summary, "--nccl-lib /opt/nccl/libnccl.so.2 is not a file");
        assert!(o.hint.unwrap().contains("path of the library itself"));
    }

    #[test]
    fn library_none_found_fails_with_install_hint() {
        let o = evaluate_library(&lib_facts(vec![]), None);
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.summary.starts_with("no libnccl.so.2 found"),
            "{}",
            o.summary
        );
        assert!(
            o.summary.contains("/venv/bin/python's site-packages"),
            "{}",
            o.summary
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("pip install nvidia-nccl-cu12"), "{hint}");
        assert!(hint.contains("apt install libnccl2"), "{hint}");
        assert!(hint.contains("--nccl-lib PATH"), "{hint}");
    }

    #[test]
    fn no_nccl_without_torch_is_one_fault_not_two() {
        // torch.import already fails with the install command; torch's
        // CUDA wheels bring NCCL, so nccl.library names it and skips.
        let wheel = NcclWheel {
            torch_missing: Some(PathBuf::from("/venv/bin/python")),
            ..NcclWheel::default()
        };
        let o = judge_library(&lib_facts(vec![]), None, &wheel);
        assert_eq!(o.status, Status::Skip, "{}", o.summary);
        assert!(
            o.summary.starts_with("no libnccl.so.2 found")
                && o.summary
                    .contains("not judged while torch.import finds no torch"),
            "{}",
            o.summary
        );
        assert_eq!(
            o.cause,
            Some(Cause::NeedsFailed {
                need: "torch.import".into()
            })
        );
        // A copy that does not load is a fault of its own, torch or not.
        let broken = lib_facts(vec![copy(
            "/usr/lib/libnccl.so.2",
            LibSource::SystemDir,
            Err("wrong ELF class"),
        )]);
        assert_eq!(judge_library(&broken, None, &wheel).status, Status::Fail);
    }

    #[test]
    fn library_explicit_copy_that_does_not_load_fails() {
        let f = lib_facts(vec![
            copy(
                "/tmp/libnccl.so.2",
                LibSource::Explicit,
                Err("no ncclGetVersion: undefined symbol"),
            ),
            copy(WHEEL, LibSource::PythonWheel, Ok(v(2, 27, 7))),
        ]);
        let o = evaluate_library(&f, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "--nccl-lib /tmp/libnccl.so.2 is not a usable NCCL: no ncclGetVersion: undefined symbol"
        );
        assert!(o.hint.unwrap().contains("drop it"));
    }

    #[test]
    fn library_copies_that_do_not_load_fail() {
        let f = lib_facts(vec![copy(
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
            LibSource::SystemDir,
            Err("cannot load: wrong ELF class"),
        )]);
        let o = evaluate_library(&f, None);
        assert_eq!(o.status, Status::Fail);
        assert_eq!(
            o.summary,
            "found 1 copy of libnccl but none loads: cannot load: wrong ELF class"
        );
        assert!(o
            .hint
            .unwrap()
            .starts_with("a missing dependency or a library for another architecture; check with `ldd /usr/lib/x86_64-linux-gnu/libnccl.so.2`"));
    }

    #[test]
    fn library_first_loading_copy_wins_and_all_are_listed() {
        let f = lib_facts(vec![
            copy(
                "/bad/libnccl.so.2",
                LibSource::LdLibraryPath,
                Err("cannot load: x"),
            ),
            copy(
                "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
                LibSource::LdCache,
                Ok(v(2, 18, 5)),
            ),
            copy(WHEEL, LibSource::PythonWheel, Ok(v(2, 27, 7))),
        ]);
        let o = evaluate_library(&f, None);
        assert_eq!(o.status, Status::Pass);
        assert_eq!(
            o.summary,
            "NCCL 2.18.5 from /usr/lib/x86_64-linux-gnu/libnccl.so.2 (ldconfig cache); 3 copies \
             found (also 2.27.7)"
        );
        assert_eq!(o.facts["nccl_version"], "2.18.5");
        assert_eq!(
            o.facts["nccl_path"],
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
        );
        let t = &o.tables[0];
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.rows[0][1], "error: cannot load: x");
        assert_eq!(t.rows[1][0], "*");
        assert_eq!(t.rows[2][0], "");
        assert_eq!(t.rows[2][2], "Python wheel (site-packages/nvidia)");
    }

    #[test]
    fn library_publishes_the_chosen_copy_for_later_checks() {
        let f = lib_facts(vec![
            copy("/bad/libnccl.so.2", LibSource::LdLibraryPath, Err("x")),
            copy(WHEEL, LibSource::PythonWheel, Ok(v(2, 27, 7))),
        ]);
        let choice = evaluate_library(&f, Some("2.21.5")).fact::<NcclChoice>();
        assert_eq!(
            choice,
            Some(NcclChoice {
                path: PathBuf::from(WHEEL),
                real_path: PathBuf::from(WHEEL),
                version: v(2, 27, 7),
                source: "Python wheel (site-packages/nvidia)".to_string(),
                copies: 2,
            })
        );
        // Nothing usable: nothing to publish.
        let none = lib_facts(vec![copy(
            "/bad/libnccl.so.2",
            LibSource::LdCache,
            Err("x"),
        )]);
        assert_eq!(evaluate_library(&none, None).fact::<NcclChoice>(), None);
    }

    #[test]
    fn torchs_nccl_version_is_read_from_torch_import() {
        let mut ctx = Context::default();
        assert_eq!(torch_nccl_version(&ctx), None);
        let torch: TorchInfo = serde_json::from_value(serde_json::json!({
            "python": "/venv/bin/python", "torch_version": "2.15.0+cu132",
            "cuda_available": true, "device_count": 0, "devices": [], "arch_list": [],
            "nccl_available": true, "nccl_version": "2.27.7",
            "loaded_libraries": [], "query_errors": [],
        }))
        .unwrap();
        ctx.earlier.insert(
            "torch.import".to_string(),
            Outcome::pass("torch").publish(&torch),
        );
        assert_eq!(torch_nccl_version(&ctx).as_deref(), Some("2.27.7"));
    }

    #[test]
    fn library_matching_torch_passes() {
        let f = lib_facts(vec![copy(WHEEL, LibSource::PythonWheel, Ok(v(2, 27, 7)))]);
        let o = evaluate_library(&f, Some("2.27.7"));
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.facts["torch_nccl_version"], "2.27.7");
        // Unreadable torch text is not a mismatch.
        assert_eq!(evaluate_library(&f, Some("unknown")).status, Status::Pass);
    }

    #[test]
    fn library_differing_from_torch_warns_and_names_torchs_copy() {
        let f = lib_facts(vec![
            copy(
                "/opt/nccl/lib/libnccl.so.2",
                LibSource::LdLibraryPath,
                Ok(v(2, 21, 5)),
            ),
            copy(WHEEL, LibSource::PythonWheel, Ok(v(2, 27, 7))),
        ]);
        let o = evaluate_library(&f, Some("2.27.7"));
        assert_eq!(o.status, Status::Warn);
        assert_eq!(
            o.summary,
            "libnccl.so.2 found first is NCCL 2.21.5 (/opt/nccl/lib/libnccl.so.2), but torch \
             reports NCCL 2.27.7"
        );
        let hint = o.hint.unwrap();
        assert!(hint.contains("can hang or fail at init"), "{hint}");
        assert!(
            hint.contains(
                "put /venv/lib/python3.11/site-packages/nvidia/nccl/lib first on LD_LIBRARY_PATH"
            ),
            "{hint}"
        );
        // Torch's version is nowhere on disk: install it, the wheel of
        // torch's CUDA major when torch.import said which.
        let lone = lib_facts(vec![copy(WHEEL, LibSource::PythonWheel, Ok(v(2, 21, 5)))]);
        let cu13 = NcclWheel {
            torch_cuda: Some(crate::domain::compat::CudaVersion::new(13, 2)),
            ..NcclWheel::default()
        };
        let hint = judge_library(&lone, Some("2.27.7"), &cu13)
            .hint
            .unwrap_or_default();
        assert!(
            hint.ends_with(
                "install the matching one (`pip install nvidia-nccl-cu13==2.27.7`: this torch \
                 is a CUDA 13.2 build)"
            ),
            "{hint}"
        );
        assert!(!hint.contains("cu12"), "{hint}");
        let f = lone;
        let o = evaluate_library(&f, Some("(2, 27, 7)"));
        assert_eq!(o.status, Status::Warn);
        let hint = o.hint.unwrap();
        assert!(
            hint.contains("pip install nvidia-nccl-cu12==2.27.7")
                && hint.contains("nvidia-nccl-cu13==2.27.7 for a CUDA 13 build of torch"),
            "{hint}"
        );
    }
}

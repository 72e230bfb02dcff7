//! Who this node is in the job: node count, node rank, master address and
//! port, taken in the order a launcher sets them: the flags, then the
//! variables torchrun reads (`PET_*`), then SLURM's, then
//! `MASTER_ADDR`/`MASTER_PORT`. Pure: the environment is passed in, so the
//! order is unit-tested without touching the process's variables.

use gpucheck_checks::domain::hostlist;

/// torchrun's default master port, used when nothing names one.
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// What the command line said (each None when the flag was not given).
#[derive(Debug, Clone, Default)]
pub struct IdentityFlags {
    pub nnodes: Option<u32>,
    pub node_rank: Option<u32>,
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
}

/// A resolved value and where it came from ("--nnodes", "$SLURM_NODEID").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    pub value: T,
    pub from: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub nnodes: Sourced<u32>,
    pub node_rank: Sourced<u32>,
    pub master_addr: Sourced<String>,
    pub master_port: Sourced<u16>,
}

/// The first of `names` that is set (and not empty), with its name.
fn first_var(env: &dyn Fn(&str) -> Option<String>, names: &[&str]) -> Option<Sourced<String>> {
    names.iter().find_map(|n| {
        env(n)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .map(|value| Sourced {
                value,
                from: format!("${n}"),
            })
    })
}

fn number<T: std::str::FromStr>(s: Sourced<String>, what: &str) -> Result<Sourced<T>, String> {
    // torchrun accepts an elastic range "MIN:MAX" for the node count; the
    // fleet gate needs the one count every node waits for.
    let text = match s.value.split_once(':') {
        Some((lo, hi)) if lo == hi => lo.to_string(),
        _ => s.value.clone(),
    };
    text.parse::<T>()
        .map(|value| Sourced {
            value,
            from: s.from.clone(),
        })
        .map_err(|_| format!("{} is '{}', not a {what}", s.from, s.value))
}

/// Resolve the node's identity from the flags and the environment `env`.
/// The error is one line naming the value and where it came from.
pub fn resolve(
    flags: &IdentityFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Identity, String> {
    let flag = |name: &str, v: String| Sourced {
        value: v,
        from: name.to_string(),
    };
    let nnodes = match flags.nnodes {
        Some(n) => flag("--nnodes", n.to_string()),
        None => first_var(env, &["PET_NNODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"]).ok_or(
            "no node count: give --nnodes N (or run under torchrun's PET_NNODES or SLURM)",
        )?,
    };
    let nnodes: Sourced<u32> = number(nnodes, "node count")?;
    let node_rank = match flags.node_rank {
        Some(r) => flag("--node-rank", r.to_string()),
        None => first_var(env, &["PET_NODE_RANK", "SLURM_NODEID"]).ok_or(
            "no node rank: give --node-rank R (or run under torchrun's PET_NODE_RANK or SLURM)",
        )?,
    };
    let node_rank: Sourced<u32> = number(node_rank, "node rank")?;
    let master_addr = match &flags.master_addr {
        Some(a) => flag("--master-addr", a.trim().to_string()),
        None => master_from_env(env)?.ok_or(
            "no master address: give --master-addr HOST (or set PET_MASTER_ADDR, \
             SLURM_JOB_NODELIST or MASTER_ADDR)",
        )?,
    };
    let master_port = match flags.master_port {
        Some(p) => flag("--master-port", p.to_string()),
        None => first_var(env, &["PET_MASTER_PORT", "MASTER_PORT"]).unwrap_or(Sourced {
            value: DEFAULT_MASTER_PORT.to_string(),
            from: "torchrun's default".to_string(),
        }),
    };
    let master_port: Sourced<u16> = number(master_port, "TCP port (1-65535)")?;
    validate(Identity {
        nnodes,
        node_rank,
        master_addr,
        master_port,
    })
}

/// PET_MASTER_ADDR, then SLURM's first node, then MASTER_ADDR.
fn master_from_env(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Sourced<String>>, String> {
    if let Some(a) = first_var(env, &["PET_MASTER_ADDR"]) {
        return Ok(Some(a));
    }
    if let Some(list) = first_var(env, &["SLURM_JOB_NODELIST", "SLURM_NODELIST"]) {
        let host = hostlist::first_host(&list.value)
            .map_err(|e| format!("cannot read {}: {e}", list.from))?;
        return Ok(Some(Sourced {
            value: host,
            from: format!("the first host of {}", list.from),
        }));
    }
    Ok(first_var(env, &["MASTER_ADDR"]))
}

fn validate(id: Identity) -> Result<Identity, String> {
    if id.nnodes.value == 0 {
        return Err(format!(
            "the node count ({}) must be at least 1",
            id.nnodes.from
        ));
    }
    if id.node_rank.value >= id.nnodes.value {
        return Err(format!(
            "node rank {} ({}) must be below the node count {} ({})",
            id.node_rank.value, id.node_rank.from, id.nnodes.value, id.nnodes.from
        ));
    }
    if id.master_port.value == 0 {
        return Err(format!(
            "master port 0 ({}) is not a port",
            id.master_port.from
        ));
    }
    if id.master_addr.value.is_empty() || id.master_addr.value.contains(char::is_whitespace) {
        return Err(format!(
            "master address '{}' ({}) is not a host name or address",
            id.master_addr.value, id.master_addr.from
        ));
    }
    Ok(id)
}

/// The longest run id accepted (SLURM job and step ids, torchrun's
/// `--rdzv-id`, a Kubernetes uid are all far shorter).
pub const MAX_RUN_ID: usize = 128;

/// The id of this run every node must share, from `--run-id`, then
/// `$GPUCHECK_RUN_ID`, then the launcher's: SLURM's job and step
/// (`$SLURM_JOB_ID.$SLURM_STEP_ID`, every task of one `srun` has the same),
/// then torchrun's `$TORCHELASTIC_RUN_ID` (its `--rdzv-id`; "none", the
/// default, is no id). None: node 0 creates one and the others take it.
pub fn run_id(
    flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Sourced<String>>, String> {
    let found = match flag {
        Some(f) => Some(Sourced {
            value: f.trim().to_string(),
            from: "--run-id".to_string(),
        }),
        None => first_var(env, &["GPUCHECK_RUN_ID"]).or_else(|| {
            let job = first_var(env, &["SLURM_JOB_ID"])?;
            Some(match first_var(env, &["SLURM_STEP_ID"]) {
                Some(step) => Sourced {
                    value: format!("slurm-{}.{}", job.value, step.value),
                    from: "$SLURM_JOB_ID and $SLURM_STEP_ID".to_string(),
                },
                None => Sourced {
                    value: format!("slurm-{}", job.value),
                    from: "$SLURM_JOB_ID".to_string(),
                },
            })
        }),
    };
    let found = found.or_else(|| {
        first_var(env, &["TORCHELASTIC_RUN_ID"]).filter(|s| !s.value.eq_ignore_ascii_case("none"))
    });
    let Some(id) = found else { return Ok(None) };
    let fine = |c: char| c.is_ascii_alphanumeric() || "._:-".contains(c);
    if id.value.is_empty() || id.value.len() > MAX_RUN_ID || !id.value.chars().all(fine) {
        return Err(format!(
            "run id '{}' ({}) must be 1 to {MAX_RUN_ID} letters, digits or . _ : -",
            id.value.escape_debug(),
            id.from
        ));
    }
    Ok(Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn summary(id: &Identity) -> (u32, u32, String, u16) {
        (
            id.nnodes.value,
            id.node_rank.value,
            id.master_addr.value.clone(),
            id.master_port.value,
        )
    }

    #[test]
    fn flags_win_over_every_variable() {
        let flags = IdentityFlags {
            nnodes: Some(4),
            node_rank: Some(2),
            master_addr: Some("node01".into()),
            master_port: Some(29400),
        };
        let env = env_of(&[
            ("PET_NNODES", "8"),
            ("PET_NODE_RANK", "7"),
            ("SLURM_NODEID", "5"),
            ("MASTER_ADDR", "x"),
        ]);
        let id = resolve(&flags, &env).unwrap();
        assert_eq!(summary(&id), (4, 2, "node01".into(), 29400));
        assert_eq!(id.node_rank.from, "--node-rank");
    }

    #[test]
    fn torchrun_variables_before_slurm() {
        let env = env_of(&[
            ("PET_NNODES", "2:2"),
            ("PET_NODE_RANK", "1"),
            ("PET_MASTER_ADDR", "10.0.0.1"),
            ("PET_MASTER_PORT", "29400"),
            ("SLURM_NNODES", "16"),
            ("SLURM_NODEID", "9"),
            ("SLURM_JOB_NODELIST", "gpu-[001-016]"),
        ]);
        let id = resolve(&IdentityFlags::default(), &env).unwrap();
        assert_eq!(summary(&id), (2, 1, "10.0.0.1".into(), 29400));
    }

    #[test]
    fn slurm_gives_count_rank_and_the_first_host() {
        let env = env_of(&[
            ("SLURM_JOB_NUM_NODES", "5"),
            ("SLURM_NODEID", "3"),
            ("SLURM_JOB_NODELIST", "gpu-[007-010],gpu-001"),
            ("MASTER_ADDR", "ignored"),
            ("MASTER_PORT", "12345"),
        ]);
        let id = resolve(&IdentityFlags::default(), &env).unwrap();
        assert_eq!(summary(&id), (5, 3, "gpu-007".into(), 12345));
        assert_eq!(id.master_addr.from, "the first host of $SLURM_JOB_NODELIST");
    }

    #[test]
    fn master_addr_last_and_default_port() {
        let flags = IdentityFlags {
            nnodes: Some(2),
            node_rank: Some(0),
            ..Default::default()
        };
        let id = resolve(&flags, &env_of(&[("MASTER_ADDR", "head")])).unwrap();
        assert_eq!(summary(&id), (2, 0, "head".into(), DEFAULT_MASTER_PORT));
    }

    #[test]
    fn missing_and_bad_values_are_one_line_errors_naming_their_source() {
        let none = IdentityFlags::default();
        let err = resolve(&none, &env_of(&[])).unwrap_err();
        assert!(err.contains("--nnodes"), "{err}");
        let err = resolve(&none, &env_of(&[("SLURM_NNODES", "two")])).unwrap_err();
        assert_eq!(err, "$SLURM_NNODES is 'two', not a node count");
        let err = resolve(
            &none,
            &env_of(&[
                ("PET_NNODES", "2"),
                ("PET_NODE_RANK", "2"),
                ("MASTER_ADDR", "h"),
            ]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "node rank 2 ($PET_NODE_RANK) must be below the node count 2 ($PET_NNODES)"
        );
        let err = resolve(
            &none,
            &env_of(&[
                ("PET_NNODES", "1:4"),
                ("PET_NODE_RANK", "0"),
                ("MASTER_ADDR", "h"),
            ]),
        )
        .unwrap_err();
        assert!(err.contains("'1:4', not a node count"), "{err}");
        let err = resolve(
            &none,
            &env_of(&[
                ("SLURM_NNODES", "2"),
                ("SLURM_NODEID", "0"),
                ("SLURM_JOB_NODELIST", "n[1-"),
            ]),
        )
        .unwrap_err();
        assert!(err.starts_with("cannot read $SLURM_JOB_NODELIST"), "{err}");
        let err = resolve(
            &none,
            &env_of(&[
                ("PET_NNODES", "2"),
                ("PET_NODE_RANK", "0"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "70000"),
            ]),
        )
        .unwrap_err();
        assert!(err.contains("$MASTER_PORT is '70000'"), "{err}");
        let flags = IdentityFlags {
            nnodes: Some(0),
            node_rank: Some(0),
            master_addr: Some("h".into()),
            master_port: None,
        };
        assert!(resolve(&flags, &env_of(&[]))
            .unwrap_err()
            .contains("at least 1"));
        assert!(!err.contains('\n'));
    }

    #[test]
    fn run_id_from_the_flag_then_gpucheck_then_slurm_then_torchrun() {
        let env = env_of(&[
            ("GPUCHECK_RUN_ID", "g1"),
            ("SLURM_JOB_ID", "8841"),
            ("SLURM_STEP_ID", "2"),
            ("TORCHELASTIC_RUN_ID", "t1"),
        ]);
        let id = |flag: Option<&str>, env: &dyn Fn(&str) -> Option<String>| {
            run_id(flag, env).unwrap().map(|s| (s.value, s.from))
        };
        assert_eq!(
            id(Some("mine"), &env),
            Some(("mine".into(), "--run-id".into()))
        );
        assert_eq!(id(None, &env).unwrap().0, "g1");
        let env = env_of(&[("SLURM_JOB_ID", "8841"), ("SLURM_STEP_ID", "2")]);
        assert_eq!(
            id(None, &env),
            Some((
                "slurm-8841.2".into(),
                "$SLURM_JOB_ID and $SLURM_STEP_ID".into()
            ))
        );
        assert_eq!(
            id(None, &env_of(&[("TORCHELASTIC_RUN_ID", "job-7")]))
                .unwrap()
                .0,
            "job-7"
        );
        assert_eq!(id(None, &env_of(&[("TORCHELASTIC_RUN_ID", "none")])), None);
        assert_eq!(id(None, &env_of(&[])), None);
        let err = run_id(Some("a b\x1b[2J"), &env_of(&[])).unwrap_err();
        assert!(
            err.starts_with("run id 'a b\\u{1b}[2J' (--run-id) must be"),
            "{err}"
        );
    }
}

//! The values NCCL accepts for its enumerated and numeric settings, and
//! what it does with the others. Read from NCCL's sources (the parsers
//! named at each entry) and its "Environment Variables" documentation
//! (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).

/// How NCCL reads one variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grammar {
    /// One word of `accepted`; anything else is ignored without a word.
    Word {
        accepted: &'static [&'static str],
        /// NCCL compares with strcmp (true) or strcasecmp (false).
        case_sensitive: bool,
        /// What NCCL does with any other value.
        otherwise: &'static str,
    },
    /// An integer (strtoll, base 0: 10, 0x10, 010), within `min..=max`.
    /// Older NCCL reads a word as 0, newer ones ignore it for the default.
    Integer {
        min: i64,
        max: i64,
        why: &'static str,
    },
    /// A topology level (NCCL_P2P_LEVEL, NCCL_NET_GDR_LEVEL): a path type
    /// name, compared with strcmp, or the old numbers 0-5.
    Level,
    /// NCCL_ALGO / NCCL_PROTO: a comma list of `elems` (any case), `^` to
    /// exclude, and in newer NCCL `function:list` entries after `;`.
    List { elems: &'static [&'static str] },
}

/// NCCL's topology path types, as `topoPathTypeStr` spells them (graph/
/// paths.cc and topo.h, NCCL 2.18-2.30; C2C, PXN and P2C only in newer).
const PATH_LEVELS: &[&str] = &[
    "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "P2C", "PHB", "SYS",
];

/// `ncclAlgoStr` (NCCL 2.4-2.30; "CollNet" before it was split in 2.14).
const ALGORITHMS: &[&str] = &[
    "Tree",
    "Ring",
    "CollNetDirect",
    "CollNetChain",
    "NVLS",
    "NVLSTree",
    "PAT",
    "CollNet",
];

/// `ncclProtoStr`.
const PROTOCOLS: &[&str] = &["LL", "LL128", "Simple"];

/// `ncclFuncStr`: the prefixes of NCCL_ALGO / NCCL_PROTO entries.
const FUNCTIONS: &[&str] = &[
    "Broadcast",
    "Reduce",
    "AllGather",
    "ReduceScatter",
    "AllReduce",
];

const FAMILIES: &[&str] = &["AF_INET", "AF_INET6"];

const fn int(min: i64, max: i64, why: &'static str) -> Grammar {
    Grammar::Integer { min, max, why }
}

/// An integer with no range of its own.
const ANY: Grammar = int(i64::MIN, i64::MAX, "");
/// A count: 1 or more.
const COUNT: Grammar = int(1, i64::MAX, "");

/// The variables whose values are checked, and how NCCL reads each.
#[rustfmt::skip]
pub const GRAMMARS: &[(&str, Grammar)] = &[
    // misc/socket.cc envSocketFamily: strcmp with "AF_INET", "AF_INET6".
    ("NCCL_SOCKET_FAMILY", Grammar::Word {
        accepted: FAMILIES, case_sensitive: true,
        otherwise: "uses whichever address family it finds first",
    }),
    // transport/net_ib.cc: the same words for the RoCE GID's family.
    ("NCCL_IB_ADDR_FAMILY", Grammar::Word {
        accepted: FAMILIES, case_sensitive: true,
        otherwise: "keeps its default, AF_INET",
    }),
    // debug.cc ncclDebugInit: strcasecmp with each level.
    ("NCCL_DEBUG", Grammar::Word {
        accepted: &["VERSION", "WARN", "INFO", "ABORT", "TRACE"], case_sensitive: false,
        otherwise: "prints nothing, not even its warnings and errors",
    }),
    // enqueue.cc: strcasecmp(str, "GROUP"), else PARALLEL.
    ("NCCL_LAUNCH_MODE", Grammar::Word {
        accepted: &["PARALLEL", "GROUP"], case_sensitive: false,
        otherwise: "uses PARALLEL",
    }),
    ("NCCL_P2P_LEVEL", Grammar::Level),
    ("NCCL_NET_GDR_LEVEL", Grammar::Level),
    ("NCCL_IB_GDR_LEVEL", Grammar::Level),
    ("NCCL_ALGO", Grammar::List { elems: ALGORITHMS }),
    ("NCCL_PROTO", Grammar::List { elems: PROTOCOLS }),
    // -1: NCCL picks the GID (2.21 and later); else an index of the GID table.
    ("NCCL_IB_GID_INDEX", int(-1, i64::MAX, "-1 lets NCCL choose, else an index of the port's GID table")),
    // InfiniBand spec: the QP's local ACK timeout is a 5-bit field.
    ("NCCL_IB_TIMEOUT", int(0, 31, "the InfiniBand ACK timeout is 5 bits (4.096 us x 2^value)")),
    // InfiniBand spec: retry count is a 3-bit field.
    ("NCCL_IB_RETRY_CNT", int(0, 7, "the InfiniBand retry count is 3 bits")),
    // InfiniBand spec: service level is 4 bits, traffic class 8 bits.
    ("NCCL_IB_SL", int(0, 15, "the InfiniBand service level is 4 bits")),
    ("NCCL_IB_TC", int(0, 255, "the traffic class is 8 bits")),
    ("NCCL_IB_FIFO_TC", int(0, 255, "the traffic class is 8 bits")),
    ("NCCL_IB_ROCE_VERSION_NUM", int(1, 2, "RoCE v1 or v2")),
    ("NCCL_IB_QPS_PER_CONNECTION", COUNT),
    ("NCCL_IB_AR_THRESHOLD", ANY),
    ("NCCL_IB_ADAPTIVE_ROUTING", ANY),
    ("NCCL_IB_PCI_RELAXED_ORDERING", ANY),
    ("NCCL_IB_DISABLE", ANY),
    ("NCCL_P2P_DISABLE", ANY),
    ("NCCL_P2P_DIRECT_DISABLE", ANY),
    ("NCCL_SHM_DISABLE", ANY),
    ("NCCL_NET_GDR_READ", ANY),
    ("NCCL_CROSS_NIC", ANY),
    ("NCCL_CUMEM_ENABLE", ANY),
    ("NCCL_NVLS_ENABLE", ANY),
    ("NCCL_COLLNET_ENABLE", ANY),
    ("NCCL_DMABUF_ENABLE", ANY),
    ("NCCL_IGNORE_CPU_AFFINITY", ANY),
    ("NCCL_CHECKS_DISABLE", ANY),
    ("NCCL_CHECK_POINTERS", ANY),
    ("NCCL_NTHREADS", COUNT),
    ("NCCL_MIN_NCHANNELS", COUNT),
    ("NCCL_MAX_NCHANNELS", COUNT),
    ("NCCL_MIN_CTAS", COUNT),
    ("NCCL_MAX_CTAS", COUNT),
    ("NCCL_BUFFSIZE", COUNT),
    ("NCCL_NSOCKS_PERTHREAD", COUNT),
    ("NCCL_SOCKET_NTHREADS", COUNT),
    ("NCCL_P2P_NVL_CHUNKSIZE", COUNT),
    ("NCCL_P2P_PCI_CHUNKSIZE", COUNT),
    ("NCCL_P2P_NET_CHUNKSIZE", COUNT),
];

/// What is wrong with a value, for the finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    /// Fail when NCCL refuses to start with it, warn when it ignores it.
    pub rejected: bool,
    pub problem: String,
    /// What NCCL accepts, and what it does with this value.
    pub hint: String,
}

/// The grammar NCCL reads `name` with, if gpucheck knows it.
pub fn grammar_of(name: &str) -> Option<Grammar> {
    GRAMMARS.iter().find(|(n, _)| *n == name).map(|(_, g)| *g)
}

/// Check `value` against `grammar`; `None` when NCCL reads it as meant.
pub fn check_value(grammar: Grammar, value: &str) -> Option<BadValue> {
    match grammar {
        Grammar::Word {
            accepted,
            case_sensitive,
            otherwise,
        } => check_word(accepted, case_sensitive, otherwise, value),
        Grammar::Integer { min, max, why } => check_integer(min, max, why, value),
        Grammar::Level => check_level(value),
        Grammar::List { elems } => check_list(elems, value),
    }
}

fn check_word(
    accepted: &[&str],
    case_sensitive: bool,
    otherwise: &str,
    value: &str,
) -> Option<BadValue> {
    let same = |a: &&str| {
        if case_sensitive {
            *a == value
        } else {
            a.eq_ignore_ascii_case(value)
        }
    };
    if accepted.iter().any(same) {
        return None;
    }
    let case = if case_sensitive {
        " (exactly, in capitals)"
    } else {
        " (any case)"
    };
    Some(BadValue {
        rejected: false,
        problem: "is not a value NCCL knows".into(),
        hint: format!(
            "NCCL accepts {}{case}; with any other value it {otherwise}",
            accepted.join(", ")
        ),
    })
}

/// strtoll with base 0, as NCCL_PARAM reads it; `None` unless the whole
/// value is the number.
fn parse_c_integer(value: &str) -> Option<i64> {
    let t = value.trim();
    let (negative, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (radix, digits) = if let Some(hex) = t.strip_prefix("0x").or(t.strip_prefix("0X")) {
        (16, hex)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    let magnitude = i64::from_str_radix(digits, radix).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

fn check_integer(min: i64, max: i64, why: &str, value: &str) -> Option<BadValue> {
    let range = match (min, max) {
        (i64::MIN, i64::MAX) => "an integer".to_string(),
        (m, i64::MAX) => format!("an integer from {m} up"),
        (m, n) => format!("an integer from {m} to {n}"),
    };
    let why = if why.is_empty() {
        String::new()
    } else {
        format!(" ({why})")
    };
    match parse_c_integer(value) {
        None => Some(BadValue {
            rejected: false,
            problem: "is not an integer".into(),
            hint: format!(
                "NCCL reads {range} here{why}: older NCCL reads a word such as true/yes as 0, \
                 newer NCCL ignores it and keeps its default, so the setting does not do what \
                 it says; write a number (1 for on, 0 for off)"
            ),
        }),
        Some(v) if v < min || v > max => Some(BadValue {
            rejected: false,
            problem: format!("is out of range ({v})"),
            hint: format!(
                "NCCL expects {range} here{why}; a value outside it is passed on to the \
                 driver or network stack, which rejects it when NCCL connects"
            ),
        }),
        Some(_) => None,
    }
}

fn check_level(value: &str) -> Option<BadValue> {
    if PATH_LEVELS.contains(&value) || value.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some(BadValue {
        rejected: false,
        problem: "is not a level NCCL knows".into(),
        hint: format!(
            "NCCL compares the level exactly, in capitals: {} (or the old numbers 0-5); \
             with any other value it ignores the setting and uses its default",
            PATH_LEVELS.join(", ")
        ),
    })
}

/// NCCL's parseList (graph/tuning.cc): `[^]a,b` or, in newer NCCL,
/// `[^]a,b;function:[^]c;...` (only the first entry may lack a prefix).
/// Newer NCCL refuses an unknown name at init (ncclInvalidUsage), older
/// ones ignore it.
fn check_list(elems: &[&str], value: &str) -> Option<BadValue> {
    let mut unknown: Vec<String> = Vec::new();
    for (i, entry) in value.split(';').filter(|e| !e.is_empty()).enumerate() {
        let list = match entry.split_once(':') {
            Some((prefix, list)) => {
                if !FUNCTIONS.iter().any(|f| f.eq_ignore_ascii_case(prefix)) {
                    unknown.push(format!("function {prefix}"));
                }
                list
            }
            None if i > 0 => {
                unknown.push(format!("\"{entry}\" without a function: prefix"));
                continue;
            }
            None => entry,
        };
        let list = list.strip_prefix('^').unwrap_or(list);
        for name in list.split(',') {
            if !elems.iter().any(|e| e.eq_ignore_ascii_case(name)) {
                unknown.push(format!("\"{name}\""));
            }
        }
    }
    if unknown.is_empty() {
        return None;
    }
    Some(BadValue {
        rejected: true,
        problem: format!("names what NCCL does not know: {}", unknown.join(", ")),
        hint: format!(
            "NCCL accepts a comma list of {} (any case, no spaces), `^` before it to exclude \
             them instead, and in newer NCCL per-function entries after `;` \
             (allreduce:ring;broadcast:tree, functions {}). Newer NCCL refuses anything else \
             when the communicator is created (ncclInvalidUsage), older NCCL ignores it",
            elems
                .iter()
                .filter(|e| **e != "CollNet")
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            FUNCTIONS.join(", ")
        ),
    })
}

/// Entries of an NCCL_SOCKET_IFNAME / NCCL_IB_HCA list that NCCL cannot
/// match: NCCL's parseStringList keeps spaces as part of the name, and a
/// `:port` that is not a number names port 0.
pub fn list_entry_problem(value: &str, with_ports: bool) -> Option<String> {
    let body = value.trim_start_matches('^').trim_start_matches('=');
    for entry in body.split(',') {
        if entry.trim() != entry || entry.contains(char::is_whitespace) {
            return Some(format!(
                "entry \"{entry}\" holds a space, which NCCL keeps as part of the name"
            ));
        }
        if let Some((_, port)) = entry.rsplit_once(':') {
            if with_ports && port.parse::<u32>().map_or(true, |p| p == 0) {
                return Some(format!(
                    "entry \"{entry}\" has port \"{port}\", not a port number (1 or more)"
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(name: &str, value: &str) -> Option<BadValue> {
        check_value(grammar_of(name).expect("known"), value)
    }

    #[test]
    fn socket_family_is_exactly_af_inet_or_af_inet6() {
        assert_eq!(bad("NCCL_SOCKET_FAMILY", "AF_INET"), None);
        assert_eq!(bad("NCCL_SOCKET_FAMILY", "AF_INET6"), None);
        for wrong in ["IPv4", "af_inet", "AF_INET4", "inet6"] {
            let b = bad("NCCL_SOCKET_FAMILY", wrong).expect(wrong);
            assert!(!b.rejected);
            assert!(
                b.hint
                    .starts_with("NCCL accepts AF_INET, AF_INET6 (exactly, in capitals)"),
                "{}",
                b.hint
            );
        }
    }

    #[test]
    fn debug_levels_are_read_in_any_case() {
        for ok in ["VERSION", "warn", "Info", "ABORT", "trace"] {
            assert_eq!(bad("NCCL_DEBUG", ok), None, "{ok}");
        }
        let b = bad("NCCL_DEBUG", "DEBUG").expect("DEBUG");
        assert!(b.hint.contains("not even its warnings"), "{}", b.hint);
        assert!(bad("NCCL_DEBUG", "1").is_some());
    }

    #[test]
    fn p2p_level_names_are_exact_capitals_or_old_numbers() {
        for ok in ["NVL", "PIX", "PXB", "PHB", "SYS", "LOC", "3", "0"] {
            assert_eq!(bad("NCCL_P2P_LEVEL", ok), None, "{ok}");
        }
        for wrong in ["nvl", "NVLINK", "PCI"] {
            assert!(bad("NCCL_P2P_LEVEL", wrong).is_some(), "{wrong}");
        }
    }

    #[test]
    fn algo_and_proto_lists_with_exclusion_and_per_function_entries() {
        for ok in [
            "Ring",
            "ring,tree",
            "^tree",
            "NVLS,NVLSTree",
            "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring",
            "allreduce:^ring",
        ] {
            assert_eq!(bad("NCCL_ALGO", ok), None, "{ok}");
        }
        for ok in [
            "LL,LL128,Simple",
            "^LL128",
            "LL,Simple;allreduce:^LL",
            "simple",
        ] {
            assert_eq!(bad("NCCL_PROTO", ok), None, "{ok}");
        }
        let b = bad("NCCL_ALGO", "ring, tree").expect("space");
        assert!(b.rejected);
        assert_eq!(b.problem, "names what NCCL does not know: \" tree\"");
        let b = bad("NCCL_ALGO", "rings;alltoall:ring;tree").expect("three");
        assert_eq!(
            b.problem,
            "names what NCCL does not know: \"rings\", function alltoall, \"tree\" without a \
             function: prefix"
        );
        assert!(bad("NCCL_PROTO", "LL256").is_some());
    }

    #[test]
    fn integers_are_read_as_strtoll_reads_them() {
        for ok in ["3", "0x3", "-1", "07"] {
            assert_eq!(bad("NCCL_IB_GID_INDEX", ok), None, "{ok}");
        }
        let b = bad("NCCL_IB_GID_INDEX", "auto").expect("word");
        assert_eq!(b.problem, "is not an integer");
        assert!(bad("NCCL_IB_GID_INDEX", "-2").is_some());
        let b = bad("NCCL_P2P_DISABLE", "true").expect("true");
        assert!(b.hint.contains("1 for on, 0 for off"), "{}", b.hint);
        let b = bad("NCCL_IB_TIMEOUT", "40").expect("range");
        assert_eq!(b.problem, "is out of range (40)");
        assert!(b.hint.contains("from 0 to 31"), "{}", b.hint);
        assert!(bad("NCCL_IB_RETRY_CNT", "8").is_some());
        assert_eq!(bad("NCCL_IB_TIMEOUT", "22"), None);
    }

    #[test]
    fn list_entries_with_spaces_or_bad_ports_are_named() {
        assert_eq!(list_entry_problem("^docker0", false), None);
        assert_eq!(list_entry_problem("=mlx5_0:1,mlx5_1:1", true), None);
        assert_eq!(list_entry_problem("^=mlx5_2", true), None);
        assert_eq!(
            list_entry_problem("mlx5_0, mlx5_1", true).as_deref(),
            Some("entry \" mlx5_1\" holds a space, which NCCL keeps as part of the name")
        );
        assert_eq!(
            list_entry_problem("mlx5_0:a", true).as_deref(),
            Some("entry \"mlx5_0:a\" has port \"a\", not a port number (1 or more)")
        );
    }
}

//! SLURM hostlist expressions (`SLURM_JOB_NODELIST`): `gpu-[001-004,010]`,
//! `a[1-2],b3`, `rack[1-2]-n[01-02]`. Pure: expands the expression the way
//! `scontrol show hostnames` does, zero padding kept (`[08-10]` gives `08`,
//! `09`, `10`).

/// The most hosts one expression may expand to: far above any cluster, low
/// enough that `n[0-999999999]` is refused instead of filling memory.
pub const MAX_HOSTS: usize = 1 << 20;

/// Every host of `expr`, in order.
pub fn expand(expr: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_top_level(expr)? {
        if item.is_empty() {
            continue;
        }
        let mut expanded = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    expanded.iter_mut().for_each(|h| h.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let close = rest[open..]
                        .find(']')
                        .map(|c| open + c)
                        .ok_or_else(|| format!("'{item}' has a '[' without ']'"))?;
                    let prefix = &rest[..open];
                    let choices = ranges(&rest[open + 1..close], item)?;
                    if expanded.len().saturating_mul(choices.len()) > MAX_HOSTS {
                        return Err(format!("'{expr}' names more than {MAX_HOSTS} hosts"));
                    }
                    expanded = expanded
                        .iter()
                        .flat_map(|h| choices.iter().map(move |c| format!("{h}{prefix}{c}")))
                        .collect();
                    rest = &rest[close + 1..];
                }
            }
        }
        hosts.extend(expanded);
        if hosts.len() > MAX_HOSTS {
            return Err(format!("'{expr}' names more than {MAX_HOSTS} hosts"));
        }
    }
    if hosts.is_empty() {
        return Err("the host list is empty".to_string());
    }
    Ok(hosts)
}

/// The first host of `expr` (SLURM's node 0, where torchrun's master runs).
pub fn first_host(expr: &str) -> Result<String, String> {
    expand(expr).map(|mut h| h.swap_remove(0))
}

/// Split at commas outside brackets.
fn split_top_level(expr: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, ch) in expr.char_indices() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(expr[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("'{expr}' has unbalanced or nested brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("'{expr}' has a '[' without ']'"));
    }
    items.push(expr[start..].trim());
    Ok(items)
}

/// `001-004,010` → 001, 002, 003, 004, 010 (the width of the lower bound
/// is kept, as SLURM does).
fn ranges(inside: &str, item: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in inside.split(',') {
        let part = part.trim();
        let bad = || format!("'{item}' has a bad range '{part}'");
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if lo.is_empty() || !lo.bytes().chain(hi.bytes()).all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if b < a {
            return Err(bad());
        }
        if (b - a) as usize >= MAX_HOSTS || out.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(format!("'{item}' names more than {MAX_HOSTS} hosts"));
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(e: &str) -> Vec<String> {
        expand(e).unwrap_or_else(|err| panic!("{e}: {err}"))
    }

    #[test]
    fn plain_names_and_lists() {
        assert_eq!(hosts("node01"), ["node01"]);
        assert_eq!(hosts("a,b, c"), ["a", "b", "c"]);
    }

    #[test]
    fn ranges_keep_zero_padding() {
        assert_eq!(
            hosts("gpu-[001-004,010]"),
            ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-010"]
        );
        assert_eq!(hosts("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(hosts("n[9-11]"), ["n9", "n10", "n11"]);
    }

    #[test]
    fn several_items_and_suffixes() {
        assert_eq!(hosts("a[1-2],b3"), ["a1", "a2", "b3"]);
        assert_eq!(hosts("gpu[1-2].cluster"), ["gpu1.cluster", "gpu2.cluster"]);
        assert_eq!(
            hosts("rack[1-2]-n[01-02]"),
            ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
        );
    }

    #[test]
    fn first_host_is_slurms_node_zero() {
        assert_eq!(
            first_host("gpu-[003-004],gpu-001").as_deref(),
            Ok("gpu-003")
        );
    }

    #[test]
    fn bad_expressions_are_one_line_errors() {
        for bad in [
            "", "n[1-", "n[3-1]", "n[a-b]", "n[[1]]", "n]1[", "n[]", "n[1-2",
        ] {
            let err = expand(bad).expect_err(bad);
            assert!(!err.contains('\n'), "{err}");
        }
        assert!(expand("n[0-999999999]").unwrap_err().contains("more than"));
        assert!(expand("a[0-999],b[0-999]")
            .map(|h| h.len() == 2000)
            .unwrap_or(false));
    }
}

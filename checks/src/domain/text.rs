//! Text that summaries and hints share: quoting values from the environment,
//! "1 GPU" / "8 GPUs", lists cut after a few entries with "(N in all)", and
//! how a timeout reads.

/// Longest value echoed into a summary before it is cut.
pub const ECHO_MAX_CHARS: usize = 80;

/// An environment value as a summary shows it: quoted, with control
/// characters and quotes escaped, cut at 80 characters.
pub fn quote_value(v: &str) -> String {
    if v.chars().count() > ECHO_MAX_CHARS {
        let cut: String = v.chars().take(ECHO_MAX_CHARS).collect();
        format!("{:?}…", cut)
    } else {
        format!("{v:?}")
    }
}

/// A value as is when it is short and printable, otherwise as
/// [`quote_value`] shows it.
pub fn plain_or_quoted(v: &str) -> String {
    let v = v.trim();
    if v.chars().count() <= ECHO_MAX_CHARS
        && v.chars().all(|c| !c.is_control() && !c.is_whitespace())
    {
        v.to_string()
    } else {
        quote_value(v)
    }
}

/// "1 GPU", "8 GPUs".
pub fn gpu_count(n: usize) -> String {
    counted(n, "GPU", "GPUs")
}

/// "1 node", "3 nodes": a count with the singular or plural noun.
pub fn counted(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// "s" unless `n` is 1.
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// "GPU 3", "GPUs 1, 5".
pub fn gpus_phrase(ids: &[u32]) -> String {
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    if ids.len() == 1 {
        format!("GPU {}", list[0])
    } else {
        format!("GPUs {}", list.join(", "))
    }
}

/// `text` cut to at most `max` characters, saying how much was left out:
/// a string from a file someone else wrote stays readable.
pub fn cut(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}... ({} more characters)", n - max)
}

/// The first `max` items joined with ", ", then ", … (N in all)" when there
/// are more.
pub fn list_cut<S: AsRef<str>>(items: &[S], max: usize) -> String {
    let mut s = items
        .iter()
        .take(max)
        .map(|i| i.as_ref())
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > max {
        s.push_str(&format!(", … ({} in all)", items.len()));
    }
    s
}

/// Seconds as a person gave them: "2", "1.5", "0.005"; never rounded down to
/// "0". Round a measured duration first where a whole number reads better.
pub fn seconds(secs: f64) -> String {
    let s = format!("{secs:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// "timed out after 2 s", "timed out after 0.5 s in cuInit".
pub fn timed_out(secs: f64, stage: Option<&str>) -> String {
    let place = stage.map(|s| format!(" in {s}")).unwrap_or_default();
    format!("timed out after {} s{place}", seconds(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_and_quoted() {
        let v = "x".repeat(200);
        let q = quote_value(&v);
        assert!(q.ends_with('…'));
        assert_eq!(q.chars().count(), 80 + 3);
        assert_eq!(quote_value("a\nb"), "\"a\\nb\"");
        assert_eq!(plain_or_quoted(" eth0 "), "eth0");
        assert_eq!(plain_or_quoted("a b"), "\"a b\"");
    }

    #[test]
    fn counts_and_lists() {
        assert_eq!(gpu_count(1), "1 GPU");
        assert_eq!(gpu_count(8), "8 GPUs");
        assert_eq!(gpus_phrase(&[3]), "GPU 3");
        assert_eq!(gpus_phrase(&[1, 5]), "GPUs 1, 5");
        assert_eq!(list_cut(&["a", "b", "c"], 2), "a, b, … (3 in all)");
        assert_eq!(list_cut(&["a", "b"], 2), "a, b");
    }

    #[test]
    fn timeouts_read_as_given() {
        assert_eq!(timed_out(2.0, None), "timed out after 2 s");
        assert_eq!(
            timed_out(1.25, Some("cuInit")),
            "timed out after 1.25 s in cuInit"
        );
        assert_eq!(timed_out(0.005, None), "timed out after 0.005 s");
        assert_eq!(timed_out(60.0, None), "timed out after 60 s");
        assert_eq!(timed_out(22.4_f64.round(), None), "timed out after 22 s");
    }
}

//! NCCL's interface / HCA list syntax.

/// NCCL's interface / HCA list syntax (NCCL docs, NCCL_SOCKET_IFNAME and
/// NCCL_IB_HCA): a comma list of prefixes; a leading `^` excludes the listed
/// ones instead; a following `=` makes the names exact; each entry may end in
/// `:port` (HCAs only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameFilter {
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<(String, Option<u32>)>,
}

impl NameFilter {
    pub fn parse(value: &str) -> NameFilter {
        let mut rest = value.trim();
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let entries = rest
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| match e.rsplit_once(':') {
                Some((name, port)) if port.parse::<u32>().is_ok() => {
                    (name.to_string(), port.parse().ok())
                }
                _ => (e.to_string(), None),
            })
            .collect();
        NameFilter {
            exclude,
            exact,
            entries,
        }
    }

    fn entry_matches(&self, entry: &(String, Option<u32>), name: &str, port: Option<u32>) -> bool {
        let name_ok = if self.exact {
            name == entry.0
        } else {
            name.starts_with(&entry.0)
        };
        // NCCL's matchPort: a side without a port matches any port, so
        // NCCL_SOCKET_IFNAME=eth0:1 still selects eth0.
        name_ok && (entry.1.is_none() || port.is_none() || entry.1 == port)
    }

    /// Whether NCCL would use `name` (`port` for an HCA port).
    pub fn selects(&self, name: &str, port: Option<u32>) -> bool {
        let listed = self
            .entries
            .iter()
            .any(|e| self.entry_matches(e, name, port));
        listed != self.exclude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifname_filter_syntax() {
        let f = NameFilter::parse("^=docker0,lo");
        assert!(f.exclude && f.exact);
        assert!(!f.selects("docker0", None));
        assert!(f.selects("docker1", None));
        assert!(f.selects("eth0", None));
        let f = NameFilter::parse("mlx5_0:1,mlx5_1");
        assert_eq!(f.entries[0], ("mlx5_0".to_string(), Some(1)));
        assert!(f.selects("mlx5_0", Some(1)));
        assert!(!f.selects("mlx5_0", Some(2)));
        assert!(f.selects("mlx5_1", Some(2)));
        assert!(f.selects("mlx5_10", Some(1)), "prefix match without =");
        // NCCL's matchPort: no port on either side matches any port.
        assert!(f.selects("mlx5_0", None));
        assert!(NameFilter::parse("=eth0:1").selects("eth0", None));
    }
}

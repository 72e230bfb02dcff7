//! NCCL_IB_HCA as NCCL reads it, shared by fabric.rdma (the node before a
//! job) and job.fabric (the node under a running job).

/// NCCL_IB_HCA as NCCL reads it: an optional `^` (exclude the list), an
/// optional `=` (exact names instead of prefixes), then comma-separated
/// `device[:port]` entries (NCCL environment variables documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaFilter {
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<(String, Option<u32>)>,
}

impl HcaFilter {
    pub fn parse(value: &str) -> HcaFilter {
        let v = value.trim();
        let (exclude, v) = v.strip_prefix('^').map_or((false, v), |r| (true, r));
        let (exact, v) = v.strip_prefix('=').map_or((false, v), |r| (true, r));
        let entries = v
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once(':') {
                Some((name, port)) => (name.to_string(), port.trim().parse().ok()),
                None => (e.to_string(), None),
            })
            .collect();
        HcaFilter {
            exclude,
            exact,
            entries,
        }
    }

    /// Whether one `device[:port]` entry names this port.
    pub fn entry_matches(
        &self,
        (name, port): &(String, Option<u32>),
        device: &str,
        p: u32,
    ) -> bool {
        let name_ok = if self.exact {
            device == name
        } else {
            device.starts_with(name.as_str())
        };
        name_ok && port.is_none_or(|n| n == p)
    }

    /// Whether NCCL will use this port.
    pub fn selects(&self, device: &str, port: u32) -> bool {
        self.entries
            .iter()
            .any(|e| self.entry_matches(e, device, port))
            != self.exclude
    }
}

//! The NCCL_* names NCCL reads, the ones other tools read, PyTorch's
//! renamed ones, and the edit distance that turns a typo into a suggestion.

/// Every NCCL_* name NCCL reads. Built from NCCL's "Environment Variables"
/// documentation (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html,
/// current and archived versions, including since-retired names such as
/// NCCL_RINGS and NCCL_IB_GDR_LEVEL) and cross-checked against the
/// parameter names compiled into libnccl.so.2 2.30.7 (the nvidia-nccl wheel),
/// which also reads a number of undocumented ones. Sorted.
#[rustfmt::skip]
pub const KNOWN_NCCL_VARS: &[&str] = &[
    "NCCL_ALGO", "NCCL_ALLGATHERV_ENABLE", "NCCL_ALLOC_HOST", "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
    "NCCL_BUFFSIZE", "NCCL_CGA_CLUSTER_SIZE", "NCCL_CHECKS_DISABLE", "NCCL_CHECK_MODE",
    "NCCL_CHECK_POINTERS", "NCCL_CHUNK_SIZE", "NCCL_COLLNET_ENABLE",
    "NCCL_COLLNET_NODE_THRESHOLD", "NCCL_COMM_BLOCKING", "NCCL_COMM_ID",
    "NCCL_COMM_SHRINK_SHARE_RESOURCES", "NCCL_COMM_SPLIT_SHARE_RESOURCES", "NCCL_CONF_FILE",
    "NCCL_CONNECT_ROUND_MAX_PEERS", "NCCL_CROSS_NIC", "NCCL_CTA_POLICY", "NCCL_CUMEM_ENABLE",
    "NCCL_CUMEM_HOST_ENABLE", "NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_DEV_API_JIT",
    "NCCL_DISABLE_MEM_MANAGER", "NCCL_DMABUF_ENABLE", "NCCL_ELASTIC_BUFFER_REGISTER",
    "NCCL_ENABLE_VERSION_CHECK", "NCCL_ENV_PLUGIN", "NCCL_GDAKI_USE_RELIABLE_DB",
    "NCCL_GDRCOPY_ENABLE", "NCCL_GDRCOPY_FIFO_ENABLE", "NCCL_GDRCOPY_FLUSH_ENABLE",
    "NCCL_GDRCOPY_SYNC_ENABLE", "NCCL_GDR_FLUSH_DISABLE", "NCCL_GIN_ENABLE",
    "NCCL_GIN_ERROR_QUERY_SEC", "NCCL_GIN_GDAKI_GPU_CONTEXT_MAX_SIZE",
    "NCCL_GIN_GDAKI_GPU_CONTEXT_VERSION", "NCCL_GIN_GDAKI_MAX_DEST_RD_ATOMIC",
    "NCCL_GIN_GDAKI_MAX_QP_RD_ATOMIC", "NCCL_GIN_GDAKI_NIC_HANDLER", "NCCL_GIN_GDAKI_QP_DEPTH",
    "NCCL_GIN_IB_ALLGATHER_TAG", "NCCL_GIN_IB_ALLTOALL_TAG", "NCCL_GIN_IB_TC",
    "NCCL_GIN_NCONNECTIONS", "NCCL_GIN_PLUGIN", "NCCL_GIN_PLUGIN_REF_COUNT",
    "NCCL_GIN_PROXY_GPU_CONTEXT_MAX_SIZE", "NCCL_GIN_PROXY_GPU_CONTEXT_VERSION",
    "NCCL_GIN_PROXY_QUEUE_SIZE", "NCCL_GIN_TYPE", "NCCL_GRAPH_DUMP_FILE",
    "NCCL_GRAPH_DUMP_FILE_RANK", "NCCL_GRAPH_FILE", "NCCL_GRAPH_HELPER_DISABLE",
    "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_GRAPH_REGISTER", "NCCL_GRAPH_STREAM_ORDERING",
    "NCCL_GROUP_CUDA_STREAM", "NCCL_HOSTID", "NCCL_IBVERBS_LIB", "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_AR_THRESHOLD", "NCCL_IB_CUDA_SUPPORT",
    "NCCL_IB_DATA_DIRECT", "NCCL_IB_DEVICE_PCI_ORDER", "NCCL_IB_DISABLE", "NCCL_IB_ECE_ENABLE",
    "NCCL_IB_FIFO_TC", "NCCL_IB_GDR_LEVEL", "NCCL_IB_GID_INDEX", "NCCL_IB_HCA",
    "NCCL_IB_MERGE_NICS", "NCCL_IB_MERGE_VFS", "NCCL_IB_MQP_RETRY_ALL", "NCCL_IB_MQP_RETRY_CNT",
    "NCCL_IB_MQP_RETRY_SLEEP_MSEC", "NCCL_IB_OOO_RQ", "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_IB_PKEY", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS", "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_QUERY_PORT_SPEED", "NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME",
    "NCCL_IB_RESILIENCY_PORT_FAILOVER", "NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS",
    "NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY", "NCCL_IB_RESILIENCY_PORT_RECOVERY",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY", "NCCL_IB_RETRY_CNT",
    "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_ROUTABLE_FLID_GID_INDEX",
    "NCCL_IB_SL", "NCCL_IB_SL_DEFAULT", "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_SUBNET_AWARE_ROUTING", "NCCL_IB_SUBNET_PREFIX_LEN", "NCCL_IB_TC",
    "NCCL_IB_TC_DEFAULT", "NCCL_IB_TIMEOUT", "NCCL_IB_USE_INLINE", "NCCL_IB_WARN_RAIL_LOCAL",
    "NCCL_IGNORE_COLLNET_MISMATCH", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_IGNORE_DISABLED_P2P",
    "NCCL_IGNORE_NET_MISMATCH", "NCCL_IPC_COLLECTIVE", "NCCL_IPC_SENDRECV",
    "NCCL_L1_SHARED_MEMORY_CARVEOUT", "NCCL_LAUNCH_MODE", "NCCL_LAUNCH_ORDER_IMPLICIT",
    "NCCL_LAUNCH_RACE_FATAL", "NCCL_LEGACY_CUDA_REGISTER", "NCCL_LL128_BUFFSIZE",
    "NCCL_LL128_C2C", "NCCL_LL128_NTHREADS", "NCCL_LL_BUFFSIZE", "NCCL_LL_THRESHOLD",
    "NCCL_LOCAL_REGISTER", "NCCL_LSA_TEAM_SIZE", "NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS",
    "NCCL_MAX_NRINGS", "NCCL_MAX_P2P_NCHANNELS", "NCCL_MEM_SYNC_DOMAIN", "NCCL_MIN_CTAS",
    "NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MIN_P2P_NCHANNELS", "NCCL_MLOPART_RDMA_ENABLE",
    "NCCL_MNNVL_CLIQUE_ID", "NCCL_MNNVL_CROSS_CLIQUE", "NCCL_MNNVL_ENABLE",
    "NCCL_MNNVL_RAIL_PER_HOST", "NCCL_MNNVL_SCATTER_NETS_ENABLE", "NCCL_MNNVL_UUID",
    "NCCL_MULTI_RANK_GPU_ENABLE", "NCCL_MULTI_SEGMENT_REGISTER", "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_NET", "NCCL_NETDEVS_POLICY", "NCCL_NET_DISABLE_INTRA", "NCCL_NET_FORCE_FLUSH",
    "NCCL_NET_FORCE_MERGE", "NCCL_NET_GDR_C2C", "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_MLOPART",
    "NCCL_NET_GDR_READ", "NCCL_NET_MERGE_LEVEL", "NCCL_NET_MERGE_POLICY",
    "NCCL_NET_OPTIONAL_RECV_COMPLETION", "NCCL_NET_OVERHEAD", "NCCL_NET_PLUGIN",
    "NCCL_NET_PLUGIN_REF_COUNT", "NCCL_NET_SHARED_BUFFERS", "NCCL_NET_SHARED_COMMS",
    "NCCL_NSOCKS_PERTHREAD", "NCCL_NTHREADS", "NCCL_NUM_RMA_CTX", "NCCL_NVB_DISABLE",
    "NCCL_NVB_PRECONNECT", "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "NCCL_NVLSTREE_MAX_CHUNKSIZE",
    "NCCL_NVLS_CHUNKSIZE", "NCCL_NVLS_ENABLE", "NCCL_NVLS_NCHANNELS", "NCCL_NVTX_DISABLE",
    "NCCL_OOB_NET_ENABLE", "NCCL_OOB_NET_IFNAME", "NCCL_P2P_DIRECT_DISABLE", "NCCL_P2P_DISABLE",
    "NCCL_P2P_EPOCH_ENABLE", "NCCL_P2P_LEVEL", "NCCL_P2P_LL_THRESHOLD", "NCCL_P2P_MAX_PEERS",
    "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_P2P_PER_CHANNEL_NET_BW", "NCCL_P2P_PXN_LEVEL", "NCCL_P2P_READ_ENABLE",
    "NCCL_P2P_SCHEDULE_GROUP_SIZE", "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_PAT_ENABLE",
    "NCCL_PROFILER_PLUGIN", "NCCL_PROGRESS_APPENDOP_FREQ", "NCCL_PROTO",
    "NCCL_PROXY_APPEND_BATCH_SIZE", "NCCL_PROXY_CPUSET", "NCCL_PROXY_DUMP_SIGNAL", "NCCL_PXN_C2C",
    "NCCL_PXN_DISABLE", "NCCL_RAS_ADDR", "NCCL_RAS_ENABLE", "NCCL_RAS_TIMEOUT_FACTOR",
    "NCCL_REPORT_CONNECT_PROGRESS", "NCCL_RINGS", "NCCL_RMA_DISABLE", "NCCL_RMA_PLUGIN",
    "NCCL_RMA_PLUGIN_REF_COUNT", "NCCL_RMA_PROXY_DUMP_SIGNAL", "NCCL_RMA_PROXY_QUEUE_SIZE",
    "NCCL_RUNTIME_CONNECT", "NCCL_SET_CPU_STACK_SIZE", "NCCL_SET_STACK_SIZE",
    "NCCL_SET_THREAD_NAME", "NCCL_SHADOW_MEMPOOL_MAX_SIZE", "NCCL_SHM_DISABLE",
    "NCCL_SHM_LOCALITY", "NCCL_SINGLE_PROC_MEM_REG_ENABLE", "NCCL_SINGLE_RING_THRESHOLD",
    "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_INLINE", "NCCL_SOCKET_MIN_TASKSIZE",
    "NCCL_SOCKET_NTHREADS", "NCCL_SOCKET_POLL_TIMEOUT_MSEC", "NCCL_SOCKET_RCVBUF",
    "NCCL_SOCKET_RETRY_CNT", "NCCL_SOCKET_RETRY_SLEEP_MSEC", "NCCL_SOCKET_SNDBUF",
    "NCCL_SYM_CE_THRESHOLD", "NCCL_SYM_CTAS", "NCCL_SYM_GIN_KERNELS_ENABLE", "NCCL_SYM_KERNEL",
    "NCCL_SYM_NOWIN_ENABLE", "NCCL_SYM_REUSE_SYSMEM_HANDLES", "NCCL_SYM_RS_GIN_CHUNK_SIZE",
    "NCCL_SYM_TMA_ENABLE", "NCCL_THREAD_THRESHOLDS", "NCCL_TOPO_DUMP_FILE",
    "NCCL_TOPO_DUMP_FILE_RANK", "NCCL_TOPO_FILE", "NCCL_TOPO_SPLIT_MLOPART", "NCCL_TREE_THRESHOLD",
    "NCCL_TUNER_PLUGIN", "NCCL_UID_STAGGER_RATE", "NCCL_UID_STAGGER_THRESHOLD",
    "NCCL_UNPACK_DOUBLE_NCHANNELS", "NCCL_WARN_ENABLE_DEBUG_INFO", "NCCL_WIN_ENABLE",
    "NCCL_WIN_STRIDE", "NCCL_WORK_ARGS_BYTES", "NCCL_WORK_FIFO_BYTES",
];

/// NCCL_* names PyTorch reads itself, not NCCL: renamed TORCH_NCCL_* in
/// PyTorch 2.2; ProcessGroupNCCL.hpp still accepts each old name as a
/// deprecated alias of the new one.
pub(super) const TORCH_RENAMED: &[(&str, &str)] = &[
    (
        "NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    ),
    ("NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"),
    ("NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG"),
    ("NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING"),
];

/// NCCL_* names that other tools read, not NCCL, and that are commonly set
/// where training runs: not typos, so they do not warn. NVIDIA's CUDA
/// container images (nvidia/cuda runtime/devel Dockerfiles: `ENV
/// NCCL_VERSION=...`) record the libnccl2 they install; PyTorch's build
/// (cmake/Modules/FindNCCL.cmake) reads NCCL_ROOT, NCCL_ROOT_DIR,
/// NCCL_INCLUDE_DIR, NCCL_LIB_DIR and NCCL_VERSION; nccl-tests' Makefile
/// reads NCCL_HOME.
const READ_BY_OTHER_TOOLS: &[(&str, &str)] = &[
    ("NCCL_HOME", "nccl-tests' build"),
    ("NCCL_INCLUDE_DIR", "PyTorch's build"),
    ("NCCL_LIB_DIR", "PyTorch's build"),
    ("NCCL_ROOT", "PyTorch's build"),
    ("NCCL_ROOT_DIR", "PyTorch's build"),
    (
        "NCCL_VERSION",
        "NVIDIA's CUDA container images, recording the NCCL they install",
    ),
    (
        "NCCL_DYNAMIC_CHUNK_SIZE",
        "Google Cloud's GPUDirect-TCPXO stack",
    ),
];

/// Prefixes of NCCL_* names that NCCL network plugins read for themselves,
/// set on every node that uses them (Google Cloud's GPUDirect-TCPX and
/// -TCPXO plugins: NCCL_GPUDIRECTTCPX_SOCKET_IFNAME, NCCL_FASTRAK_IFNAME, ...;
/// GKE and NVIDIA DGX Cloud documentation).
const READ_BY_PLUGINS: &[(&str, &str)] = &[
    (
        "NCCL_FASTRAK_",
        "Google Cloud's GPUDirect-TCPXO NCCL plugin",
    ),
    (
        "NCCL_GPUDIRECTTCPX_",
        "Google Cloud's GPUDirect-TCPX NCCL plugin",
    ),
];

/// Who reads `name`, when NCCL does not but another common tool or an NCCL
/// plugin does.
pub(super) fn other_tool(name: &str) -> Option<&'static str> {
    READ_BY_OTHER_TOOLS
        .iter()
        .find(|(n, _)| *n == name)
        .or_else(|| READ_BY_PLUGINS.iter().find(|(p, _)| name.starts_with(p)))
        .map(|(_, who)| *who)
}

/// Prefix of nccl-tests' own settings (NCCL_TESTS_MIN_BW, ...): not NCCL's.
pub(super) const NCCL_TESTS_PREFIX: &str = "NCCL_TESTS_";

/// Edit distance counting insertions, deletions, substitutions and swaps of
/// two neighbouring characters (optimal string alignment), so `eht0` is one
/// edit from `eth0`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

/// Longest name (or list entry) a suggestion is looked for: past this no
/// typo of a real name is plausible, and the edit distance costs time
/// proportional to the length (a 130 KB name took seconds).
pub const SUGGEST_MAX_CHARS: usize = 256;

/// The closest of `candidates` to `name`, if close enough to be a typo:
/// at most 1 + len/8 edits (NCCL_SOCKET_IFACE -> NCCL_SOCKET_IFNAME is 2).
/// Candidates whose length alone differs by more are not compared, and a
/// name longer than [`SUGGEST_MAX_CHARS`] gets no suggestion.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let chars = name.chars().count();
    if chars > SUGGEST_MAX_CHARS {
        return None;
    }
    let limit = 1 + name.len() / 8;
    candidates
        .into_iter()
        .filter(|c| c.chars().count().abs_diff(chars) <= limit)
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_are_sorted_and_unique() {
        assert!(KNOWN_NCCL_VARS.windows(2).all(|w| w[0] < w[1]));
        assert!(KNOWN_NCCL_VARS.binary_search(&"NCCL_SOCKET_IFNAME").is_ok());
    }

    #[test]
    fn edit_distance_counts_swaps_as_one() {
        assert_eq!(edit_distance("eht0", "eth0"), 1);
        assert_eq!(edit_distance("NCCL_SOCKET_IFACE", "NCCL_SOCKET_IFNAME"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        assert_eq!(closest("lo", ["eth0", "docker0"]), None);
    }

    #[test]
    fn a_huge_name_gets_no_suggestion_and_costs_no_time() {
        let huge = format!("NCCL_{}", "X".repeat(130_000));
        let started = std::time::Instant::now();
        assert_eq!(closest(&huge, KNOWN_NCCL_VARS.iter().copied()), None);
        // Near the cap, names are still compared (and quickly).
        let long = format!("NCCL_SOCKET_IFNAME{}", "X".repeat(200));
        assert_eq!(closest(&long, KNOWN_NCCL_VARS.iter().copied()), None);
        assert!(
            started.elapsed() < std::time::Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        // The length bound keeps every real suggestion.
        assert_eq!(
            closest("NCCL_SOCKET_IFACE", KNOWN_NCCL_VARS.iter().copied()),
            Some("NCCL_SOCKET_IFNAME")
        );
    }
}

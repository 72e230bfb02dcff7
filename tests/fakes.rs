//! The fake driver libraries keep the contracts the checks' tests rely on:
//! each scenario directive answers through the real entry point as the real
//! library would (tests/fixtures/fake_*.c, documented at the top of each).
//! The fakes are driven here through their C ABI with ctypes from the test
//! virtual environment's Python, the way a driver user calls them.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn fixture(source: &str, dir: &str, soname: &str) -> PathBuf {
    common::build_fixture_lib(source, dir, soname)
}

fn scenario(kind: &str, name: &str) -> String {
    let p = common::root()
        .join("tests/fixtures")
        .join(kind)
        .join(format!("{name}.scenario"));
    assert!(p.exists(), "{} missing", p.display());
    p.to_string_lossy().into_owned()
}

/// Run `script` (Python, ctypes) with `envs`; its stdout, one answer a line.
fn poke(script: &str, envs: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = Command::new(common::venv_python());
    cmd.args(["-c", script]);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("FAKE_") || k.starts_with("NCCL_") {
            cmd.env_remove(&k);
        }
    }
    cmd.envs(envs.iter().copied());
    let out = cmd.output().expect("run the test venv's python");
    assert!(
        out.status.success(),
        "{}\n{}",
        common::stdout(&out),
        common::stderr(&out)
    );
    common::stdout(&out).lines().map(str::to_string).collect()
}

const NVML_PRELUDE: &str = r#"
import ctypes, os
nvml = ctypes.CDLL(os.environ["LIB"])
assert nvml.nvmlInit_v2() == 0
def gpu(i):
    h = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    return h
"#;

#[test]
fn nvml_nvlink_error_counters_per_gpu_and_link() {
    let lib = fixture("fake_nvml.c", "nvml", "libnvidia-ml.so.1");
    let script = format!(
        "{NVML_PRELUDE}{}",
        r#"
def counters(i, link):
    out = []
    for c in range(5):
        v = ctypes.c_ulonglong(7)
        r = nvml.nvmlDeviceGetNvLinkErrorCounter(gpu(i), link, c, ctypes.byref(v))
        out.append(str(v.value) if r == 0 else "err%d" % r)
    return " ".join(out)
print(counters(4, 2))
print(counters(1, 0))
print(counters(4, 3))
v = ctypes.c_ulonglong()
print(nvml.nvmlDeviceGetNvLinkErrorCounter(gpu(4), 18, 0, ctypes.byref(v)))
print(nvml.nvmlDeviceGetNvLinkErrorCounter(gpu(4), 2, 5, ctypes.byref(v)))
"#
    );
    let lines = poke(
        &script,
        &[
            ("LIB", lib.to_str().unwrap()),
            ("FAKE_NVML_SCENARIO", &scenario("nvml", "nvlink_errors")),
        ],
    );
    // nvmlNvLinkErrorCounter_t: DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT,
    // DL_CRC_DATA, DL_ECC_DATA; a link or counter out of range is
    // NVML_ERROR_INVALID_ARGUMENT (2).
    assert_eq!(lines, ["1200 3 0 0 0", "2 0 0 0 0", "0 0 0 0 0", "2", "2"]);
}

#[test]
fn nvml_dual_socket_pcie_topology_and_p2p() {
    let lib = fixture("fake_nvml.c", "nvml", "libnvidia-ml.so.1");
    let script = format!(
        "{NVML_PRELUDE}{}",
        r#"
P2P = ["OK", "CNS", "GNS", "TNS", "RK", "NS", "U"]
LEVEL = {0: "INT", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
for a, b in [(0, 1), (0, 3), (5, 7), (6, 7), (0, 4), (3, 7)]:
    lvl = ctypes.c_int()
    assert nvml.nvmlDeviceGetTopologyCommonAncestor(gpu(a), gpu(b), ctypes.byref(lvl)) == 0
    st = []
    for caps in (0, 1, 2):  # read, write, NVLink
        s = ctypes.c_int()
        assert nvml.nvmlDeviceGetP2PStatus(gpu(a), gpu(b), caps, ctypes.byref(s)) == 0
        st.append(P2P[s.value])
    print(a, b, LEVEL[lvl.value], *st)
"#
    );
    let lines = poke(
        &script,
        &[
            ("LIB", lib.to_str().unwrap()),
            ("FAKE_NVML_SCENARIO", &scenario("nvml", "dual_socket_pcie")),
        ],
    );
    assert_eq!(
        lines,
        [
            "0 1 PIX OK OK NS",
            "0 3 PXB OK OK NS",
            "5 7 PXB OK OK NS",
            "6 7 PIX OK OK NS",
            "0 4 SYS CNS CNS NS",
            "3 7 SYS CNS CNS NS",
        ]
    );
}

const CUDA_PRELUDE: &str = r#"
import ctypes, os
cu = ctypes.CDLL(os.environ["LIB"])
assert cu.cuInit(0) == 0
def use(d):
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), d) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
def uuid(fn, d):
    b = (ctypes.c_ubyte * 16)()
    assert fn(b, d) == 0
    return bytes(b).hex()
def free_mib(d):
    use(d)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    r = cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    return "%d %d" % (free.value >> 20, total.value >> 20) if r == 0 else "err%d" % r
"#;

#[test]
fn cuda_free_memory_uuids_and_bus_ids_per_device() {
    let lib = fixture("fake_cuda.c", "cuda", "libcuda.so.1");
    let lib = lib.to_str().unwrap();
    let nearly_full = format!(
        "{CUDA_PRELUDE}{}",
        r#"
print(free_mib(0)); print(free_mib(1))
use(1)
p = ctypes.c_ulonglong()
print(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(200 << 20)))
"#
    );
    let lines = poke(
        &nearly_full,
        &[
            ("LIB", lib),
            ("FAKE_CUDA_SCENARIO", &scenario("cuda", "nearly-full")),
        ],
    );
    // 200 MiB on GPU 1 is CUDA_ERROR_OUT_OF_MEMORY (2).
    assert_eq!(lines, ["81559 81559", "102 81559", "2"]);

    let ids = format!(
        "{CUDA_PRELUDE}{}",
        r#"
n = ctypes.c_int()
assert cu.cuDeviceGetCount(ctypes.byref(n)) == 0
print(n.value)
for d in (0, 5, 6):
    bus = ctypes.create_string_buffer(32)
    assert cu.cuDeviceGetPCIBusId(bus, 32, d) == 0
    print(uuid(cu.cuDeviceGetUuid_v2, d), bus.value.decode())
"#
    );
    let lines = poke(
        &ids,
        &[
            ("LIB", lib),
            ("FAKE_CUDA_SCENARIO", &scenario("cuda", "seven-of-eight")),
        ],
    );
    // The UUIDs and bus ids of nvml/h100x8's GPUs 0, 6 and 7 (5 is missing).
    assert_eq!(
        lines,
        [
            "7",
            "fa4e0000111142228333000000000000 00000000:18:00.0",
            "fa4e0006111142228333000000000006 00000000:BA:00.0",
            "fa4e0007111142228333000000000007 00000000:DB:00.0",
        ]
    );

    let mig = format!(
        "{CUDA_PRELUDE}{}",
        "print(uuid(cu.cuDeviceGetUuid, 0)); print(uuid(cu.cuDeviceGetUuid_v2, 0))\n"
    );
    let lines = poke(
        &mig,
        &[
            ("LIB", lib),
            ("FAKE_CUDA_SCENARIO", &scenario("cuda", "mig-instance")),
        ],
    );
    assert_eq!(
        lines,
        [
            "fa4e0001111142228333000000000001",
            "fa4e0001aaaa4bbb8ccc000000000000"
        ]
    );
}

#[test]
fn cuda_pool_memory_needs_granted_access_and_faults_stick() {
    let lib = fixture("fake_cuda.c", "cuda", "libcuda.so.1");
    let script = format!(
        "{CUDA_PRELUDE}{}",
        r#"
info = cu.fake_cuda_pointer_info
info.argtypes = [ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                 ctypes.POINTER(ctypes.c_ulonglong)]
def describe(p):
    d, pool, peers = ctypes.c_int(), ctypes.c_int(), ctypes.c_ulonglong()
    assert info(p, ctypes.byref(d), ctypes.byref(pool), ctypes.byref(peers)) == 1
    return "dev%d pool%d peers%x" % (d.value, pool.value, peers.value & 0xff)
attr = ctypes.c_int()
assert cu.cuDeviceGetAttribute(ctypes.byref(attr), 115, 0) == 0  # MEMORY_POOLS_SUPPORTED
print(attr.value)
use(0)
pooled, plain = ctypes.c_ulonglong(), ctypes.c_ulonglong()
assert cu.cuMemAllocAsync(ctypes.byref(pooled), ctypes.c_size_t(4096), None) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(plain), ctypes.c_size_t(4096)) == 0
print(describe(pooled.value)); print(describe(plain.value))
pool = ctypes.c_void_p()
assert cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), 0) == 0
class Desc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int), ("flags", ctypes.c_int)]
grant = Desc(1, 1, 3)  # DEVICE 1, PROT_READWRITE
assert cu.cuMemPoolSetAccess(pool, ctypes.byref(grant), ctypes.c_size_t(1)) == 0
print(describe(pooled.value))
cu.fake_cuda_fault(1, 700)
print(free_mib(1), free_mib(0))
name = ctypes.create_string_buffer(64)
print(cu.cuDeviceGetName(name, 64, 1))
assert cu.cuDevicePrimaryCtxReset(1) == 0
print(free_mib(1))
"#
    );
    let lines = poke(&script, &[("LIB", lib.to_str().unwrap())]);
    assert_eq!(
        lines,
        [
            "1",
            "dev0 pool1 peers1",
            "dev0 pool0 peersff",
            "dev0 pool1 peers3",
            "err700 81558 81559",
            "0",
            "81559 81559",
        ]
    );
}

#[test]
fn nccl_before_2_23_faults_on_pool_memory_only_without_access() {
    let cuda = fixture("fake_cuda.c", "cuda", "libcuda.so.1");
    let nccl = fixture("fake_nccl.c", "nccl", "libnccl.so.2");
    let script = format!(
        "{CUDA_PRELUDE}{}",
        r#"
import sys
nccl = ctypes.CDLL(os.environ["NCCL"])
grant = sys.argv[1] == "grant"
comms = (ctypes.c_void_p * 2)()
assert nccl.ncclCommInitAll(comms, 2, None) == 0
count = 1024
bufs = []
for d in (0, 1):
    use(d)
    send, recv = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    assert cu.cuMemAllocAsync(ctypes.byref(send), ctypes.c_size_t(4 * count), None) == 0
    assert cu.cuMemAllocAsync(ctypes.byref(recv), ctypes.c_size_t(4 * count), None) == 0
    ctypes.memset(send.value, 0, 4 * count)
    ctypes.memset(recv.value, 0, 4 * count)
    ctypes.cast(send.value, ctypes.POINTER(ctypes.c_float))[0] = d + 1.0
    if grant:
        pool = ctypes.c_void_p()
        assert cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), d) == 0
        class Desc(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int), ("flags", ctypes.c_int)]
        peer = Desc(1, 1 - d, 3)
        assert cu.cuMemPoolSetAccess(pool, ctypes.byref(peer), ctypes.c_size_t(1)) == 0
    bufs.append((send, recv))
assert nccl.ncclGroupStart() == 0
for d in (0, 1):
    send, recv = bufs[d]
    assert nccl.ncclAllReduce(ctypes.c_void_p(send.value), ctypes.c_void_p(recv.value),
                              ctypes.c_size_t(count), 7, 0, ctypes.c_void_p(comms[d]), None) == 0
assert nccl.ncclGroupEnd() == 0
for d in (0, 1):
    use(d)
    print(cu.cuCtxSynchronize(), ctypes.cast(bufs[d][1].value, ctypes.POINTER(ctypes.c_float))[0])
send, recv = bufs[0]
use(0)
print(nccl.ncclAllReduce(ctypes.c_void_p(send.value), ctypes.c_void_p(recv.value),
                         ctypes.c_size_t(count), 7, 0, ctypes.c_void_p(comms[0]), None))
"#
    );
    let run = |version: &str, grant: &str| {
        let script = script.replace(
            "import sys\n",
            &format!("import sys\nsys.argv = ['', '{grant}']\n"),
        );
        poke(
            &script,
            &[
                ("LIB", cuda.to_str().unwrap()),
                ("NCCL", nccl.to_str().unwrap()),
                ("LD_LIBRARY_PATH", cuda.parent().unwrap().to_str().unwrap()),
                ("FAKE_NCCL_VERSION", version),
            ],
        )
    };
    // NCCL 2.20.5, pool memory no peer may reach: an illegal address (700),
    // sticky on both GPUs, nothing summed, and the next all-reduce is an
    // unhandled CUDA error (1).
    assert_eq!(run("22005", "none"), ["700 0.0", "700 0.0", "1"]);
    // Access granted to the peer, or an NCCL from 2.23 on: summed (1 + 2).
    assert_eq!(run("22005", "grant"), ["0 3.0", "0 3.0", "0"]);
    assert_eq!(run("22300", "none"), ["0 3.0", "0 3.0", "0"]);
}

#[test]
fn cuda_copy_bandwidth_is_what_the_scenario_says() {
    let lib = fixture("fake_cuda.c", "cuda", "libcuda.so.1");
    let script = format!(
        "{CUDA_PRELUDE}{}",
        r#"
n = 8 << 20
host = ctypes.create_string_buffer(n)
def gbps(d):
    """The best of three timed host-to-device copies (a loaded machine may
    preempt any one of them)."""
    use(d)
    p = ctypes.c_ulonglong()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    assert cu.cuMemcpyHtoD_v2(p, host, ctypes.c_size_t(n)) == 0  # touch the pages
    a, b = ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuEventCreate(ctypes.byref(a), 0) == 0 and cu.cuEventCreate(ctypes.byref(b), 0) == 0
    best = 0.0
    for _ in range(3):
        assert cu.cuEventRecord(a, None) == 0
        assert cu.cuMemcpyHtoDAsync_v2(p, host, ctypes.c_size_t(n), None) == 0
        assert cu.cuEventRecord(b, None) == 0
        ms = ctypes.c_float()
        assert cu.cuEventElapsedTime(ctypes.byref(ms), a, b) == 0
        best = max(best, n / (ms.value * 1e6))
    return best
slow = gbps(1)
print("%.3f" % slow)
print(gbps(0) > 2 * slow)
"#
    );
    let lines = poke(
        &script,
        &[
            ("LIB", lib.to_str().unwrap()),
            ("FAKE_CUDA_SCENARIO", &scenario("cuda", "slow-copy-gpu1")),
        ],
    );
    let slow: f64 = lines[0].parse().expect("a number");
    // Never faster than the scenario says; slower only by scheduling delays.
    assert!(
        (0.04..=0.101).contains(&slow),
        "GPU 1 copied at {slow} GB/s"
    );
    assert_eq!(lines[1], "True", "GPU 0 is not limited: {lines:?}");
}

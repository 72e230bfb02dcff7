"""gpucheck payload: the rendezvous of `gpucheck cluster` through torch.distributed.

Run by gpucheck on every node with the Python that will train. The exchange
goes through torch.distributed's TCPStore, the store torchrun's c10d
rendezvous uses: node rank 0 serves it at the master address and port, every
other node connects to it.

Input: the configuration in $GPUCHECK_CLUSTER_CONFIG (JSON: node_rank,
nnodes, master_addr, master_port, rdzv_timeout_s, margin_s, ack_timeout_s); on stdin, line 1 is this node's message (its report, JSON),
and on node 0 line 2 is the fleet verdict (JSON), written once gpucheck has
judged what node 0 printed.

Output: one line per event on stdout, "GPUCHECK_CLUSTER {json}", so nothing
torch prints can break parsing:
  {"event": "joined", ...}                       every node, once in the store
  {"event": "gathered", "nodes": {...}, "missing": [...]}   node 0
  {"event": "verdict", "verdict": {...}}         other nodes
  {"event": "done", "acked": [...]}              node 0, at the end
  {"event": "error", "stage": ..., "detail": ..., ...}
Progress goes to stderr as "GPUCHECK_CLUSTER_STAGE <what>".

Clock offset: node 0 writes its wall clock into the store every TICK_S
while it waits for the others; a node reads it SAMPLES times, brackets each
read with its own clock (t0 before, t1 after) and keeps the tightest: the
true offset lies in [c - t1, c + TICK_S - t0].
"""

import datetime
import json
import os
import socket
import sys
import time

MARK = "GPUCHECK_CLUSTER "
STAGE = "GPUCHECK_CLUSTER_STAGE "
TICK_S = 0.01
SAMPLES = 7
POLL_S = 0.02


def emit(event):
    sys.stdout.write("\n" + MARK + json.dumps(event, ensure_ascii=True) + "\n")
    sys.stdout.flush()


def stage(what):
    sys.stderr.write(STAGE + what + "\n")
    sys.stderr.flush()


def describe(exc):
    text = str(exc).strip().splitlines()
    first = " ".join(t.strip() for t in text[:2]) if text else ""
    return "%s: %s" % (type(exc).__name__, first) if first else type(exc).__name__


def resolve(host):
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as e:
        return [], describe(e)
    seen = []
    for info in infos:
        ip = info[4][0]
        if ip not in seen:
            seen.append(ip)
    return seen, None


def torch_facts(torch):
    facts = {"version": None, "cuda_build": None, "nccl_version": None}
    try:
        facts["version"] = str(torch.__version__)
        facts["cuda_build"] = torch.version.cuda
    except BaseException:
        pass
    try:
        import torch.distributed as dist

        if dist.is_nccl_available():
            v = torch.cuda.nccl.version()
            facts["nccl_version"] = (
                ".".join(str(p) for p in v) if isinstance(v, (tuple, list)) else str(v)
            )
    except BaseException:
        pass
    return facts


def key(rank):
    return "gpucheck/node/%d" % rank


def measure_clock(store):
    best = None
    for _ in range(SAMPLES):
        t0 = time.time()
        c = float(store.get("gpucheck/clock0").decode())
        t1 = time.time()
        lo, hi = c - t1, c + TICK_S - t0
        if best is None or hi - lo < best[1] - best[0]:
            best = (lo, hi)
        time.sleep(TICK_S * 1.5)
    return {"offset_s": (best[0] + best[1]) / 2, "uncertainty_s": (best[1] - best[0]) / 2}


def allreduce(cfg, store):
    """Every node, once all have joined: one all-reduce across the nodes (one
    rank per node: GPU 0 with NCCL, or the CPU with gloo), verified, timed.
    Bus bandwidth as nccl-tests defines it: bytes / time * 2(n-1)/n."""
    import torch
    import torch.distributed as dist

    n, rank = cfg["nnodes"], cfg["node_rank"]
    backend = cfg.get("backend") or ("nccl" if torch.cuda.is_available() else "gloo")
    device = "cuda" if backend == "nccl" else "cpu"
    # 64 MiB on GPUs (NCCL's bus bandwidth is near its plateau there), 8 MiB
    # on CPUs with gloo (a functional check, not a measurement of the fabric).
    nbytes = (64 << 20) if device == "cuda" else (8 << 20)
    result = {"backend": backend, "bytes": nbytes}
    started = False
    try:
        if device == "cuda":
            torch.cuda.set_device(0)
        stage("init_process_group(%s)" % backend)
        dist.init_process_group(
            backend,
            store=dist.PrefixStore("gpucheck/pg", store),
            rank=rank,
            world_size=n,
            timeout=datetime.timedelta(seconds=cfg["allreduce_timeout_s"]),
        )
        started = True
        x = torch.full((nbytes // 4,), float(rank + 1), device=device)
        stage("all_reduce")
        dist.all_reduce(x)  # warm-up: connections are set up here
        times = []
        for _ in range(3):
            x.fill_(float(rank + 1))
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        want = n * (n + 1) / 2
        lo, hi = float(x.min()), float(x.max())
        best = min(times)
        result.update(
            {
                "verified": lo == want and hi == want,
                "seconds": best,
                "busbw_gbps": nbytes / best * 2 * (n - 1) / n / 1e9,
            }
        )
        if not result["verified"]:
            result["error"] = "wrong sum: got %g..%g, want %g" % (lo, hi, want)
    except BaseException as e:
        result["error"] = describe(e)
    finally:
        if started:
            try:
                dist.destroy_process_group()
            except BaseException:
                pass
    return result


def serve(cfg, store, wrapped, started):
    """Node 0: gather every node's message until rdzv_timeout_s after it
    started serving, hand them to gpucheck, publish the verdict, wait until
    every node has read it."""
    nnodes = cfg["nnodes"]
    store.set(key(0), wrapped)
    deadline = started + cfg["rdzv_timeout_s"]
    waiting = set(range(1, nnodes))
    stage("waiting for %d nodes" % len(waiting))
    while waiting and time.monotonic() < deadline:
        store.set("gpucheck/clock0", repr(time.time()))
        for r in sorted(waiting):
            if store.check([key(r)]):
                waiting.discard(r)
        time.sleep(TICK_S)
    reduced = {}
    if not waiting and nnodes > 1 and cfg.get("allreduce"):
        store.set("gpucheck/allreduce/go", "1")
        reduced[0] = allreduce(cfg, store)
        deadline = time.monotonic() + cfg["allreduce_timeout_s"]
        stage("waiting for every node's all-reduce result")
        while len(reduced) < nnodes and time.monotonic() < deadline:
            for r in range(1, nnodes):
                k = "gpucheck/allreduce/%d" % r
                if r not in reduced and store.check([k]):
                    reduced[r] = json.loads(store.get(k).decode())
            time.sleep(POLL_S)
    nodes = {}
    for r in range(nnodes):
        if r not in waiting:
            nodes[str(r)] = json.loads(store.get(key(r)).decode())
            nodes[str(r)]["allreduce"] = reduced.get(r)
    emit({"event": "gathered", "nodes": nodes, "missing": sorted(waiting)})
    stage("waiting for the verdict from gpucheck")
    line = sys.stdin.readline()
    if not line.strip():
        return
    store.set("gpucheck/verdict", line.strip())
    joined = [r for r in range(1, nnodes) if r not in waiting]
    acked = set()
    deadline = time.monotonic() + cfg["ack_timeout_s"]
    stage("waiting for every node to read the verdict")
    while len(acked) < len(joined) and time.monotonic() < deadline:
        for r in joined:
            if r not in acked and store.check(["gpucheck/ack/%d" % r]):
                acked.add(r)
        time.sleep(POLL_S)
    emit({"event": "done", "acked": sorted(acked)})


def join(cfg, store, message, torch_info, started):
    """Another node: measure the clock, hand over the message, wait for the
    verdict until rdzv_timeout_s + margin_s after it started connecting."""
    rank = cfg["node_rank"]
    stage("measuring the clock against node 0")
    try:
        clock = measure_clock(store)
    except BaseException as e:
        clock = None
        stage("clock not measured: %s" % describe(e))
    store.set(key(rank), json.dumps({"message": message, "torch": torch_info, "clock": clock}))
    emit({"event": "joined", "clock": clock})
    deadline = started + cfg["rdzv_timeout_s"] + cfg["margin_s"]
    stage("waiting for node 0's verdict")
    reduced = False
    while time.monotonic() < deadline:
        if not reduced and store.check(["gpucheck/allreduce/go"]):
            reduced = True
            deadline += 2 * cfg["allreduce_timeout_s"]
            result = allreduce(cfg, store)
            store.set("gpucheck/allreduce/%d" % rank, json.dumps(result))
            stage("waiting for node 0's verdict")
        if store.check(["gpucheck/verdict"]):
            verdict = json.loads(store.get("gpucheck/verdict").decode())
            store.set("gpucheck/ack/%d" % rank, "1")
            emit({"event": "verdict", "verdict": verdict})
            return
        time.sleep(POLL_S * 5)
    present = [r for r in range(cfg["nnodes"]) if store.check([key(r)])]
    emit(
        {
            "event": "error",
            "stage": "verdict",
            "detail": "node 0 gave no verdict within %.0f s"
            % (cfg["rdzv_timeout_s"] + cfg["margin_s"]),
            "missing": [r for r in range(cfg["nnodes"]) if r not in present],
        }
    )


def main():
    cfg = json.loads(os.environ["GPUCHECK_CLUSTER_CONFIG"])
    message = json.loads(sys.stdin.readline())
    stage("import torch")
    try:
        import torch
        from torch.distributed import TCPStore
    except BaseException as e:
        emit({"event": "error", "stage": "import", "detail": describe(e)})
        return
    torch_info = torch_facts(torch)
    addr, port, rank = cfg["master_addr"], cfg["master_port"], cfg["node_rank"]
    ips, resolve_error = resolve(addr)
    where = {"address": addr, "port": port, "resolved": ips}
    if resolve_error is not None and rank != 0:
        emit(dict(where, event="error", stage="resolve", detail=resolve_error))
        return
    timeout = datetime.timedelta(seconds=cfg["rdzv_timeout_s"])
    started = time.monotonic()
    stage("%s the store at %s:%d" % ("serving" if rank == 0 else "connecting to", addr, port))
    try:
        store = TCPStore(
            addr,
            port,
            None,
            rank == 0,
            timeout,
            wait_for_workers=False,
        )
    except BaseException as e:
        emit(dict(where, event="error", stage="serve" if rank == 0 else "connect", detail=describe(e)))
        return
    wrapped = json.dumps({"message": message, "torch": torch_info, "clock": None})
    try:
        if rank == 0:
            store.set("gpucheck/clock0", repr(time.time()))
            emit(dict(where, event="joined", clock=None))
            serve(cfg, store, wrapped, started)
        else:
            join(cfg, store, message, torch_info, started)
    except BaseException as e:
        emit(dict(where, event="error", stage="exchange", detail=describe(e)))


if __name__ == "__main__":
    main()

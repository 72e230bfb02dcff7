"""gpucheck payload: the rendezvous of `gpucheck cluster` through torch.distributed.

Run by gpucheck on every node with the Python that will train. The exchange
goes through torch.distributed's TCPStore, the store torchrun's c10d
rendezvous uses: node rank 0 serves it at the master address and port, every
other node connects to it.

Input: the configuration in $GPUCHECK_CLUSTER_CONFIG (JSON: node_rank,
nnodes, master_addr, master_port, rdzv_timeout_s, margin_s, ack_timeout_s,
allreduce, backend, nproc, allreduce_timeout_s, pair_steps); on stdin, line 1
is this node's message (its report, JSON). On node 0 gpucheck then writes one
line per "pairs" event, {"rounds": [[[a, b], ...], ...]} (no rounds: done),
and last the fleet verdict (JSON), once it has judged.

Output: one line per event on stdout, "GPUCHECK_CLUSTER {json}", so nothing
torch prints can break parsing:
  {"event": "joined", ...}                       every node, once in the store
  {"event": "pairs", "pass": k, "results": [...]}  node 0, asking for pair rounds
  {"event": "gathered", "nodes": {...}, "missing": [...], "pairs": [...]}  node 0
  {"event": "verdict", "verdict": {...}}         other nodes
  {"event": "done", "acked": [...]}              node 0, at the end
  {"event": "error", "stage": ..., "detail": ..., ...}
Progress goes to stderr as "GPUCHECK_CLUSTER_STAGE <what>".

The all-reduce: each node says in its store entry how many ranks it runs
(one per GPU torch sees with NCCL, --nproc with gloo on CPU); node 0 gives
every node its first global rank and publishes them with the go signal; each
node starts its ranks as worker processes (this script with --worker, one
rank per process). Step 0 is the all-reduce over every rank; the steps after
it are the pair rounds node 0 publishes, all pairs of a round at once.

Clock offset: node 0 writes its wall clock into the store every TICK_S
while it waits for the others; a node reads it SAMPLES times, brackets each
read with its own clock (t0 before, t1 after) and keeps the tightest: the
true offset lies in [c - t1, c + TICK_S - t0].
"""

import datetime
import json
import os
import socket
import subprocess
import sys
import time

MARK = "GPUCHECK_CLUSTER "
STAGE = "GPUCHECK_CLUSTER_STAGE "
TICK_S = 0.01
SAMPLES = 7
POLL_S = 0.02
# Timed all-reduces after the warm-up; the fastest counts.
REPEATS = 3
# What node 0 waits for a step's results beyond the ranks' own timeouts.
STEP_SLACK_S = 5


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


def die_with_parent(parent):
    """A worker dies with its node's payload (SIGKILL on the parent's death,
    as gpucheck sets for the payload), so nothing outlives a killed node.
    A parent that died before the worker got here (its Python was still
    starting) fires no signal, so the worker checks that its parent is still
    the payload that started it, and ends when it is not."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except BaseException:
        pass
    if os.getppid() != parent:
        os._exit(1)


def wait_json(store, k, deadline):
    """The JSON value of key k, waited for in the store (no polling: every
    rank waits here) until deadline; None when it never came."""
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    try:
        store.wait([k], datetime.timedelta(seconds=left))
        return json.loads(store.get(k).decode())
    except BaseException:
        return None


def measure(torch, dist, device, nbytes, fill, want, group):
    """One warm-up and REPEATS timed all-reduces on `group`, verified."""
    x = torch.full((nbytes // 4,), fill, device=device)
    dist.all_reduce(x, group=group)  # warm-up: connections are set up here
    times = []
    for _ in range(REPEATS):
        x.fill_(fill)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(x, group=group)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    lo, hi = float(x.min()), float(x.max())
    result = {"verified": lo == want and hi == want, "seconds": min(times)}
    if not result["verified"]:
        result["error"] = "wrong sum: got %g..%g, want %g" % (lo, hi, want)
    return result


def ranks_of(go, node):
    return list(range(go["offsets"][node], go["offsets"][node] + go["counts"][node]))


def pair_step(torch, dist, w, go, pairs, timeout):
    """Every rank creates every pair's group in the same order (new_group is
    collective over the world); the ranks of each pair then all-reduce
    within it, all pairs at once."""
    rank = w["rank"]
    mine = None
    groups = []
    for a, b in pairs:
        ranks = ranks_of(go, a) + ranks_of(go, b)
        g = dist.new_group(ranks=ranks, timeout=timeout)
        groups.append(g)
        if rank in ranks:
            mine = (a, b, ranks, g)
    if mine is None:
        return {"idle": True}
    a, b, ranks, g = mine
    want = float(sum(r + 1 for r in ranks))
    result = measure(torch, dist, w["device"], w["bytes"], float(rank + 1), want, g)
    result["pair"] = [a, b]
    dist.destroy_process_group(g)
    return result


def worker():
    """One rank of the cross-node all-reduce: a process of its own (one rank
    per process, as torch.distributed wants), started by its node's payload.
    Step 0 is the all-reduce over every rank; later steps are the pair rounds
    node 0 publishes, until it says stop or the budget runs out."""
    w = json.loads(os.environ["GPUCHECK_CLUSTER_WORKER"])
    die_with_parent(w["parent"])
    import torch
    import torch.distributed as dist
    from torch.distributed import TCPStore

    timeout = datetime.timedelta(seconds=w["timeout_s"])
    deadline = time.monotonic() + w["budget_s"]
    store = TCPStore(w["addr"], w["port"], None, False, timeout, wait_for_workers=False)
    rank, world = w["rank"], w["world"]
    go = w["go"]
    step, started = 0, False
    try:
        if w["device"] == "cuda":
            torch.cuda.set_device(w["local_rank"])
        dist.init_process_group(
            w["backend"],
            store=dist.PrefixStore("gpucheck/pg", store),
            rank=rank,
            world_size=world,
            timeout=timeout,
        )
        started = True
        want = world * (world + 1) / 2
        result = measure(torch, dist, w["device"], w["bytes"], float(rank + 1), want, None)
    except BaseException as e:
        result = {"error": describe(e)}
    store.set("gpucheck/r/0/%d" % rank, json.dumps(result))
    while started and "error" not in result:
        step += 1
        plan = wait_json(store, "gpucheck/step/%d" % step, deadline)
        if plan is None or plan.get("kind") != "pairs":
            break
        try:
            result = pair_step(torch, dist, w, go, plan["pairs"], timeout)
        except BaseException as e:
            result = {"error": describe(e)}
        store.set("gpucheck/r/%d/%d" % (step, rank), json.dumps(result))
    if started:
        try:
            dist.destroy_process_group()
        except BaseException:
            pass


def worker_budget(cfg):
    """How long a worker may live: the all-reduce and every pair step, each
    bounded by allreduce_timeout_s twice over (setup, collective) plus the
    STEP_SLACK_S node 0 waits for the results (gpucheck's collective_budget)."""
    steps = 1 + cfg.get("pair_steps", 0)
    return (2 * cfg["allreduce_timeout_s"] + STEP_SLACK_S) * steps + 10


def start_workers(cfg, go, backend):
    """This node's ranks, one process each: the same script in worker mode,
    in the payload's process group (gpucheck's group kill ends them)."""
    node = cfg["node_rank"]
    device = "cuda" if backend == "nccl" else "cpu"
    procs = []
    for local in range(go["counts"][node]):
        w = {
            "addr": cfg["master_addr"],
            "port": cfg["master_port"],
            "rank": go["offsets"][node] + local,
            "local_rank": local,
            "world": go["world"],
            "go": go,
            "backend": backend,
            "device": device,
            # 64 MiB on GPUs (NCCL's bus bandwidth is near its plateau
            # there), 8 MiB on CPUs with gloo (a functional check).
            "bytes": (64 << 20) if device == "cuda" else (8 << 20),
            "timeout_s": cfg["allreduce_timeout_s"],
            "budget_s": worker_budget(cfg),
            "parent": os.getpid(),
        }
        env = dict(os.environ, GPUCHECK_CLUSTER_WORKER=json.dumps(w))
        env.pop("GPUCHECK_CLUSTER_CONFIG", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        )
    return procs


def stop_workers(procs, grace_s):
    """Wait up to grace_s for the workers to end, then kill what is left."""
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except BaseException:
            pass
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def busbw(nbytes, seconds, n):
    """Bus bandwidth as nccl-tests defines it for all-reduce, GB/s."""
    return nbytes / seconds * 2 * (n - 1) / n / 1e9


def collect(store, step, ranks, deadline):
    """Every rank's result of one step (None for a rank that gave none).
    Once a rank reports an error (its peers' timeout: a rank died), the
    others get STEP_SLACK_S more, not the whole deadline."""
    got = {}
    while len(got) < len(ranks) and time.monotonic() < deadline:
        for r in ranks:
            k = "gpucheck/r/%d/%d" % (step, r)
            if r not in got and store.check([k]):
                got[r] = json.loads(store.get(k).decode())
                if got[r].get("error"):
                    deadline = min(deadline, time.monotonic() + STEP_SLACK_S)
        time.sleep(POLL_S)
    return {r: got.get(r) for r in ranks}


def combine(results, nbytes, world):
    """One node's (or pair's) result from its ranks': verified when every
    rank verified; the time of the slowest rank."""
    silent = sorted(r for r, res in results.items() if res is None)
    errors = [
        "rank %d: %s" % (r, res["error"])
        for r, res in sorted(results.items())
        if res is not None and res.get("error")
    ]
    out = {"verified": not errors and not silent, "silent_ranks": silent}
    if errors:
        more = " (%d ranks in all)" % len(errors) if len(errors) > 3 else ""
        out["error"] = "; ".join(errors[:3]) + more
    if errors or silent:
        return out
    seconds = max(res["seconds"] for res in results.values())
    out.update({"seconds": seconds, "busbw_gbps": busbw(nbytes, seconds, world), "error": None})
    return out


def full_allreduce(cfg, store, go, backend):
    """Node 0: the all-reduce over every rank of every node; per node."""
    nbytes = (64 << 20) if backend == "nccl" else (8 << 20)
    deadline = time.monotonic() + 2 * cfg["allreduce_timeout_s"] + STEP_SLACK_S
    stage("waiting for every rank's all-reduce result")
    results = collect(store, 0, list(range(go["world"])), deadline)
    reduced = {}
    for node in range(cfg["nnodes"]):
        mine = {r: results[r] for r in ranks_of(go, node)}
        res = combine(mine, nbytes, go["world"])
        res.update(
            {
                "backend": go["backends"][node],
                "bytes": nbytes,
                "world_size": go["world"],
                "local_ranks": go["counts"][node],
            }
        )
        reduced[node] = res
    return reduced, nbytes


def pair_rounds(cfg, store, go, nbytes):
    """Node 0: ask gpucheck for pair rounds (on stdin, after a "pairs" event
    with what was measured so far), publish each round as a step, collect
    the pairs' results; until gpucheck answers no rounds."""
    table, step, passes = [], 0, 0
    while True:
        passes += 1
        emit({"event": "pairs", "pass": passes, "results": table})
        line = sys.stdin.readline()
        rounds = json.loads(line).get("rounds", []) if line.strip() else []
        if not rounds:
            break
        for pairs in rounds:
            step += 1
            store.set("gpucheck/step/%d" % step, json.dumps({"kind": "pairs", "pairs": pairs}))
            stage("pair round %d: %d pairs" % (step, len(pairs)))
            ranks = [r for a, b in pairs for r in ranks_of(go, a) + ranks_of(go, b)]
            deadline = time.monotonic() + 2 * cfg["allreduce_timeout_s"] + STEP_SLACK_S
            results = collect(store, step, ranks, deadline)
            failed = False
            for a, b in pairs:
                mine = {r: results[r] for r in ranks_of(go, a) + ranks_of(go, b)}
                res = combine(mine, nbytes, len(mine))
                error = res.get("error")
                if res["silent_ranks"]:
                    silent = ", ".join(str(r) for r in res["silent_ranks"])
                    error = "no result from rank %s" % silent + ("; " + error if error else "")
                table.append({"a": a, "b": b, "busbw_gbps": res.get("busbw_gbps"), "error": error})
                failed = failed or bool(res.get("error"))
            if failed:
                # A broken pair leaves its ranks out of step: stop here.
                return table, step
    return table, step


def allreduce_stage(cfg, store, backend):
    """Node 0, once every node joined: rank offsets from each node's rank
    count, the go signal, the full all-reduce, then the pair rounds."""
    n = cfg["nnodes"]
    entries = [json.loads(store.get(key(r)).decode()) for r in range(n)]
    counts = [max(1, int(e.get("local_ranks") or 1)) for e in entries]
    offsets = [sum(counts[:i]) for i in range(n)]
    backends = [e.get("backend") or backend for e in entries]
    go = {"world": sum(counts), "offsets": offsets, "counts": counts, "backends": backends}
    if go["world"] < 2:
        return {}, [], 0
    store.set("gpucheck/allreduce/go", json.dumps(go))
    procs, step = [], 0
    try:
        procs.extend(start_workers(cfg, go, backend))
        reduced, nbytes = full_allreduce(cfg, store, go, backend)
        table = []
        if all(r.get("verified") for r in reduced.values()):
            # gpucheck decides whether pairs are worth it (not below 3 nodes).
            table, step = pair_rounds(cfg, store, go, nbytes)
    finally:
        store.set("gpucheck/step/%d" % (step + 1), json.dumps({"kind": "stop"}))
        stop_workers(procs, 5)
    return reduced, table, step


def serve(cfg, store, wrapped, started, backend):
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
    reduced, table, steps = {}, [], 0
    if not waiting and cfg.get("allreduce"):
        reduced, table, steps = allreduce_stage(cfg, store, backend)
    nodes = {}
    for r in range(nnodes):
        if r not in waiting:
            nodes[str(r)] = json.loads(store.get(key(r)).decode())
            nodes[str(r)]["allreduce"] = reduced.get(r)
    emit(
        {
            "event": "gathered",
            "nodes": nodes,
            "missing": sorted(waiting),
            "pairs": table,
            "pair_rounds": steps,
        }
    )
    stage("waiting for the verdict from gpucheck")
    line = sys.stdin.readline()
    if not line.strip():
        return
    store.set("gpucheck/verdict", line.strip())
    # A node whose ranks all went silent in the all-reduce is gone (killed,
    # or hung): do not hold the others for its acknowledgement.
    gone = [r for r, res in reduced.items() if len(res.get("silent_ranks") or []) == res.get("local_ranks")]
    joined = [r for r in range(1, nnodes) if r not in waiting and r not in gone]
    acked = set()
    deadline = time.monotonic() + cfg["ack_timeout_s"]
    stage("waiting for every node to read the verdict")
    while len(acked) < len(joined) and time.monotonic() < deadline:
        for r in joined:
            if r not in acked and store.check(["gpucheck/ack/%d" % r]):
                acked.add(r)
        time.sleep(POLL_S)
    emit({"event": "done", "acked": sorted(acked)})


def join(cfg, store, message, torch_info, started, local):
    """Another node: measure the clock, hand over the message, wait for the
    verdict until rdzv_timeout_s + margin_s after it started connecting."""
    rank = cfg["node_rank"]
    stage("measuring the clock against node 0")
    try:
        clock = measure_clock(store)
    except BaseException as e:
        clock = None
        stage("clock not measured: %s" % describe(e))
    entry = dict(local, message=message, torch=torch_info, clock=clock)
    store.set(key(rank), json.dumps(entry))
    emit({"event": "joined", "clock": clock})
    deadline = started + cfg["rdzv_timeout_s"] + cfg["margin_s"]
    stage("waiting for node 0's verdict")
    procs = None
    while time.monotonic() < deadline:
        if procs is None and store.check(["gpucheck/allreduce/go"]):
            go = json.loads(store.get("gpucheck/allreduce/go").decode())
            deadline += worker_budget(cfg)
            stage("all-reduce: %d local ranks of %d" % (go["counts"][rank], go["world"]))
            procs = start_workers(cfg, go, local["backend"])
        if store.check(["gpucheck/verdict"]):
            verdict = json.loads(store.get("gpucheck/verdict").decode())
            store.set("gpucheck/ack/%d" % rank, "1")
            stop_workers(procs or [], 2)
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
    backend = cfg.get("backend") or ("nccl" if torch.cuda.is_available() else "gloo")
    # One rank per GPU torch sees with NCCL; --nproc ranks (default 1) with
    # gloo on CPU, or instead of the GPU count when given.
    count = cfg.get("nproc") or (torch.cuda.device_count() if backend == "nccl" else 1)
    local = {"backend": backend, "local_ranks": max(1, count)}
    wrapped = json.dumps(dict(local, message=message, torch=torch_info, clock=None))
    try:
        if rank == 0:
            store.set("gpucheck/clock0", repr(time.time()))
            emit(dict(where, event="joined", clock=None))
            serve(cfg, store, wrapped, started, backend)
        else:
            join(cfg, store, message, torch_info, started, local)
    except BaseException as e:
        emit(dict(where, event="error", stage="exchange", detail=describe(e)))


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker()
    else:
        main()

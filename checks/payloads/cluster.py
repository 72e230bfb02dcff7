"""gpucheck payload: the rendezvous of `gpucheck cluster` through torch.distributed.

Run by gpucheck on every node with the Python that will train. The exchange
goes through torch.distributed's TCPStore, the store torchrun's c10d
rendezvous uses: node rank 0 serves it at the master address and port, every
other node connects to it.

Input: the configuration in $GPUCHECK_CLUSTER_CONFIG (JSON: node_rank,
nnodes, master_addr, master_port, rdzv_timeout_s, margin_s, ack_timeout_s,
allreduce, backend, nproc, allreduce_timeout_s, pair_steps, run_id,
run_id_from, tool_version, profile, host, watch); the cluster token, when one is
shared, hex-encoded in $GPUCHECK_CLUSTER_KEY. On stdin, line 1 is this
node's message (its report, JSON). On node 0 gpucheck then writes one line
per "pairs" event, {"rounds": [[[a, b], ...], ...]} (no rounds: done), and
last the fleet verdict ({"sealed": "..."}: the store value, sealed by
gpucheck itself), once it has judged.

Output: one line per event on stdout, "GPUCHECK_CLUSTER {json}", so nothing
torch prints can break parsing:
  {"event": "joined", "run_id": ...}             every node, once in the store
  {"event": "pairs", "pass": k, "results": [...]}  node 0, asking for pair rounds
  {"event": "gathered", "nodes": {...}, "missing": [...], "rejected": {...}, ...}
  {"event": "verdict", "sealed": "...", ...}     other nodes: node 0's verdict
  {"event": "done", "acked": [...]}              node 0, at the end
  {"event": "summary", "node": r, "summary": {...}}  node 0 of a watched job
  {"event": "order", "order": ..., "n": k}      other nodes of a watched job
  {"event": "error", "stage": ..., "detail": ..., ...}
A job watched across nodes (watch: true) has no verdict to publish: once
the nodes joined, every other node writes each line gpucheck gives it (its
ranks' summary, {"round": n, ...}) to "watch/<node>", node 0 hands gpucheck
each node's summary once its round is newer, and gpucheck's orders on node
0 ({"order": "diagnose"|"stop"|"end", "n": k}) go to "watch/order" for the
others to read.

Progress goes to stderr as "GPUCHECK_CLUSTER_STAGE <what>".

Trust. Every key lives under the run id ("gpucheck/<run>/..."), which every
node agrees on first: node 0 writes the run record ("gpucheck/run": run id,
node count, versions, profile) and every other node compares it with its
own before it writes anything. A node rank's slot is claimed atomically
(compare_set): a second claimant fails and leaves a note node 0 reports.
Every value is JSON written without NaN and read strictly, and checked
before it is used: an entry or result that cannot be read is its node's
error. With a token every value is sealed with an HMAC-SHA256 over its key
and body ("gpucheck-hmac-sha256:<hex>\\n<body>"); a value that does not
verify is ignored and counted. Without a token, any process that reaches
the port can write any of these keys.

Every store request has a deadline (OP_TIMEOUT_S, inside the overall
bounds): TCPStore's client blocks in recv without one when node 0 is
frozen, so a watchdog thread ends the payload saying node 0 stopped
answering.

The all-reduce: each node says in its store entry how many ranks it runs
(one per GPU torch sees with NCCL, --nproc with gloo on CPU); node 0 gives
every node its first global rank and publishes them with the go signal; each
node starts its ranks as worker processes (this script with --worker, one
rank per process) and records in the store how each of them ended (exit
status or signal, its last stderr line), so node 0 can tell the rank that
stopped first from the ranks that only waited on it. Step 0 is the
all-reduce over every rank; the steps after it are the pair rounds node 0
publishes, all pairs of a round at once.

Clock offset: node 0 writes its wall clock into the store every TICK_S
while it waits for the others; a node reads it SAMPLES times, brackets each
read with its own clock (t0 before, t1 after) and keeps the tightest: the
true offset lies in [c - t1, c + TICK_S - t0].
"""

import datetime
import hashlib
import hmac
import json
import math
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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
# The layout of the keys and values below. A node of another protocol is
# refused at the handshake, naming both.
PROTOCOL = 3
# The longest one store request may go unanswered. Node 0's store is served
# by a thread of its own and answers in milliseconds while node 0 lives; a
# request unanswered this long means node 0 is frozen or unreachable.
OP_TIMEOUT_S = 10.0
# A string read from the store is cut to this before anything prints it.
MAX_TEXT = 400
# The largest value read from the store (a node report with 8 GPUs is 30-40 KB).
MAX_VALUE = 16 << 20
# The shortest all-reduce time believed: a collective across processes costs
# at least a kernel launch or a syscall round trip, microseconds; a time
# below this is not a measurement.
MIN_SECONDS = 1e-6
# The most ranks one node may bring to the all-reduce (GPUs or --nproc).
MAX_LOCAL_RANKS = 1024
SEAL = "gpucheck-hmac-sha256:"
RUN_KEY = "gpucheck/run"
# How often a node writes again the values it owns while it waits.
KEEP_S = 1.0
# How long a follower keeps reading a run record that does not verify with
# its token: a forger's overwrite is replaced by node 0's within KEEP_S, so a
# record that stays unverified this long is sealed with another token.
UNVERIFIED_S = 5 * KEEP_S
# How long node 0, unable to serve its port, asks what serves it.
OCCUPANT_S = 2.0
EXIT_UNANSWERED = 3
# A job watched across nodes: how often node 0 reads the nodes' summaries
# and the other nodes read node 0's orders; how long node 0 waits at the end
# for the others to read its "end".
WATCH_POLL_S = 0.5
WATCH_END_S = 3.0

_out = threading.Lock()


def emit(event):
    text = json.dumps(event, ensure_ascii=True, allow_nan=False)
    with _out:
        sys.stdout.write("\n" + MARK + text + "\n")
        sys.stdout.flush()


def stage(what):
    sys.stderr.write(STAGE + what + "\n")
    sys.stderr.flush()


def clean(text, limit=MAX_TEXT):
    """A string from elsewhere, fit for a terminal: control characters
    (escape sequences among them) dropped, whitespace collapsed, cut."""
    text = "".join(c if c.isprintable() else " " for c in str(text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(exc):
    text = str(exc).strip().splitlines()
    first = " ".join(t.strip() for t in text[:2]) if text else ""
    out = "%s: %s" % (type(exc).__name__, first) if first else type(exc).__name__
    return clean(out)


class Refused(ValueError):
    """A value that cannot be accepted; the text says why."""


class Unverified(Exception):
    """A value whose seal does not verify with this node's token."""


def _no_constant(name):
    raise Refused("%s, which JSON does not allow" % name)


def loads(text):
    """Strict JSON: NaN and Infinity are refused."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except Refused:
        raise
    except ValueError as e:
        raise Refused("not JSON (%s)" % clean(e, 120))


def dumps(obj):
    return json.dumps(obj, allow_nan=False, ensure_ascii=True, separators=(",", ":"))


def positive(value, what, most, least=0.0):
    """A finite number in (least, most] (a positive one by default)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Refused("%s is %s, not a number" % (what, clean(repr(value), 40)))
    if not math.isfinite(value) or value <= least or value > most:
        raise Refused("%s is %r, outside (%g, %g]" % (what, value, least, most))
    return float(value)


def whole(value, what, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise Refused("%s is %s, not a whole number in %d..%d" % (what, clean(repr(value), 40), lo, hi))
    return value


def mac(token, key, body):
    return hmac.new(token, key.encode() + b"\n" + body.encode(), hashlib.sha256).hexdigest()


class Watchdog:
    """Ends this process when a store request outlives its deadline, after
    saying so: TCPStore's client waits in recv for ever on a frozen server."""

    def __init__(self):
        self._lock = threading.Lock()
        self._op = None
        threading.Thread(target=self._watch, daemon=True).start()

    def arm(self, deadline, stage_name, detail):
        with self._lock:
            self._op = (deadline, stage_name, detail)

    def disarm(self):
        with self._lock:
            self._op = None

    def _watch(self):
        while True:
            time.sleep(0.05)
            with self._lock:
                op = self._op
            if op is not None and time.monotonic() > op[0]:
                emit({"event": "error", "stage": op[1], "detail": op[2]})
                os._exit(EXIT_UNANSWERED)


class StoreGone(Exception):
    """A store request failed: node 0's store closed the connection."""


class Link:
    """This node's side of the store: keys under the run id, values sealed
    and opened with the token, every request bounded."""

    def __init__(self, store, run_id, token, dog, where, limit=OP_TIMEOUT_S):
        self.store, self.run_id, self.token, self.dog, self.where = store, run_id, token, dog, where
        self.limit = limit
        self.prefix = "gpucheck/%s/" % run_id
        self.unverified = set()
        self.kept, self.refreshed = {}, time.monotonic()

    def key(self, name):
        return self.prefix + name

    def call(self, what, fn):
        limit = self.limit
        self.dog.arm(
            time.monotonic() + limit,
            "unanswered",
            "node 0 stopped answering: its store at %s gave no reply within %.0f s to %s"
            % (self.where, limit, what),
        )
        try:
            return fn()
        except BaseException as e:
            raise StoreGone(
                "node 0's store at %s closed the connection while %s (node 0 ended or was "
                "killed): %s" % (self.where, what, describe(e))
            )
        finally:
            self.dog.disarm()

    def seal(self, key, body):
        if self.token is None:
            return body
        return SEAL + mac(self.token, key, body) + "\n" + body

    def unseal(self, key, raw):
        if len(raw) > MAX_VALUE:
            raise Refused("%d bytes, more than the %d a value may have" % (len(raw), MAX_VALUE))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused("not UTF-8 text")
        if text.startswith(SEAL):
            head, _, body = text[len(SEAL):].partition("\n")
            if self.token is None:
                return body
            if hmac.compare_digest(head, mac(self.token, key, body)):
                return body
        elif self.token is None:
            return text
        self.unverified.add((key, hashlib.sha256(raw).hexdigest()))
        raise Unverified(key)

    def put_raw(self, key, obj):
        value = self.seal(key, dumps(obj))
        self.call("writing " + key, lambda: self.store.set(key, value))

    def put(self, name, obj):
        self.put_raw(self.key(name), obj)

    def keep_raw(self, key, value):
        """Write a value and keep writing it (refresh) while this node
        waits: the store has no owner for a key, so anyone who reaches the
        port can overwrite it; with a token the owner's value comes back
        within KEEP_S."""
        self.kept[key] = value
        self.call("writing " + key, lambda: self.store.set(key, value))

    def keep(self, name, obj):
        k = self.key(name)
        self.keep_raw(k, self.seal(k, dumps(obj)))

    def refresh(self):
        if time.monotonic() - self.refreshed < KEEP_S:
            return
        self.refreshed = time.monotonic()
        for k, v in list(self.kept.items()):
            self.call("writing " + k, lambda k=k, v=v: self.store.set(k, v))

    def has(self, name):
        k = self.key(name)
        return self.call("asking for " + k, lambda: self.store.check([k]))

    def get_raw(self, key):
        return self.call("reading " + key, lambda: self.store.get(key))

    def take_raw(self, key):
        """The value at key, opened and parsed; Unverified or Refused."""
        return loads(self.unseal(key, self.get_raw(key)))

    def take(self, name):
        return self.take_raw(self.key(name))

    def verified(self, name):
        """The value at name if it is there and verifies, else None."""
        if not self.has(name):
            return None
        try:
            return self.take(name)
        except (Unverified, Refused):
            return None


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


def measure_clock(link):
    best = None
    for _ in range(SAMPLES):
        t0 = time.time()
        c = positive(link.take("clock0"), "node 0's clock", 1e11)
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

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except BaseException:
        pass
    if os.getppid() != parent:
        os._exit(1)


def wait_plan(link, step, deadline):
    """The plan of step `step`, verified, polled for until deadline; None
    when none came."""
    while time.monotonic() < deadline:
        link.refresh()
        plan = link.verified("step/%d" % step)
        if isinstance(plan, dict):
            return plan
        time.sleep(POLL_S * 5)
    return None


def collective(dist, x, group, timeout):
    """One all-reduce, waited for with a deadline: a peer that died or hung
    is an error this rank reports, not a wait for ever."""
    work = dist.all_reduce(x, group=group, async_op=True)
    if not work.wait(timeout):
        raise TimeoutError("the all-reduce did not complete within %s" % timeout)


def measure(torch, dist, w, fill, want, group):
    """One warm-up and REPEATS timed all-reduces on `group`, verified."""
    device, timeout = w["device"], datetime.timedelta(seconds=w["timeout_s"])
    x = torch.full((w["bytes"] // 4,), fill, device=device)
    collective(dist, x, group, timeout)  # warm-up: connections are set up here
    times = []
    for _ in range(REPEATS):
        x.fill_(fill)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        collective(dist, x, group, timeout)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    lo, hi = float(x.min()), float(x.max())
    result = {"verified": lo == want and hi == want, "seconds": max(min(times), 2 * MIN_SECONDS)}
    if not result["verified"]:
        result["error"] = "wrong sum: got %g..%g, want %g" % (lo, hi, want)
    return result


def ranks_of(go, node):
    return list(range(go["offsets"][node], go["offsets"][node] + go["counts"][node]))


def pair_step(torch, dist, w, go, pairs):
    """Every rank creates every pair's group in the same order (new_group is
    collective over the world); the ranks of each pair then all-reduce
    within it, all pairs at once."""
    rank = w["rank"]
    timeout = datetime.timedelta(seconds=w["timeout_s"])
    mine = None
    for a, b in pairs:
        ranks = ranks_of(go, a) + ranks_of(go, b)
        g = dist.new_group(ranks=ranks, timeout=timeout)
        if rank in ranks:
            mine = (a, b, ranks, g)
    if mine is None:
        return {"idle": True}
    a, b, ranks, g = mine
    want = float(sum(r + 1 for r in ranks))
    result = measure(torch, dist, w, float(rank + 1), want, g)
    result["pair"] = [a, b]
    dist.destroy_process_group(g)
    return result


def worker_link(w):
    from torch.distributed import TCPStore

    token = bytes.fromhex(os.environ.get("GPUCHECK_CLUSTER_KEY", "")) or None
    dog = Watchdog()
    where = "%s:%d" % (w["addr"], w["port"])
    timeout = datetime.timedelta(seconds=w["timeout_s"])
    dog.arm(time.monotonic() + w["timeout_s"] + OP_TIMEOUT_S, "connect", "no store")
    store = TCPStore(w["addr"], w["port"], None, False, timeout, wait_for_workers=False)
    dog.disarm()
    return store, Link(store, w["run_id"], token, dog, where)


def worker():
    """One rank of the cross-node all-reduce: a process of its own (one rank
    per process, as torch.distributed wants), started by its node's payload.
    Step 0 is the all-reduce over every rank; later steps are the pair rounds
    node 0 publishes, until it says stop or the budget runs out."""
    w = json.loads(os.environ["GPUCHECK_CLUSTER_WORKER"])
    die_with_parent(w["parent"])
    import torch
    import torch.distributed as dist

    deadline = time.monotonic() + w["budget_s"]
    store, link = worker_link(w)
    rank, world, go = w["rank"], w["world"], w["go"]
    step, started = 0, False
    try:
        if w["device"] == "cuda":
            torch.cuda.set_device(w["local_rank"])
        dist.init_process_group(
            w["backend"],
            store=dist.PrefixStore(link.key("pg"), store),
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=w["timeout_s"]),
        )
        started = True
        want = world * (world + 1) / 2
        result = measure(torch, dist, w, float(rank + 1), want, None)
    except BaseException as e:
        result = {"error": describe(e)}
    link.keep("r/0/%d" % rank, dict(result, rank=rank, step=0))
    while started and "error" not in result:
        step += 1
        plan = wait_plan(link, step, deadline)
        if plan is None or plan.get("kind") != "pairs":
            break
        try:
            result = pair_step(torch, dist, w, go, plan["pairs"])
        except BaseException as e:
            result = {"error": describe(e)}
        link.keep("r/%d/%d" % (step, rank), dict(result, rank=rank, step=step))
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


def last_line(path):
    """The last line a worker wrote to its stderr that says something."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        if line.strip() and not line.startswith(STAGE):
            return clean(line, 240)
    return None


# What NCCL's watchdog prints when it takes a rank down after a collective
# timed out or a peer failed (ProcessGroupNCCL.cpp): such a rank only waited.
WATCHDOG_WORDS = ("watchdog caught collective operation timeout", "processgroupnccl's watchdog")


class Workers:
    """This node's ranks, one process each: the same script in worker mode,
    in the payload's process group (gpucheck's group kill ends them). How
    each ended goes into the store ("w/<rank>") once it has."""

    def __init__(self, cfg, go, backend, link):
        node = cfg["node_rank"]
        device = "cuda" if backend == "nccl" else "cpu"
        self.link, self.procs, self.logs, self.reported = link, [], [], set()
        for local in range(go["counts"][node]):
            rank = go["offsets"][node] + local
            w = {
                "addr": cfg["master_addr"],
                "port": cfg["master_port"],
                "run_id": link.run_id,
                "rank": rank,
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
            # A collective error raises in the rank instead of NCCL's
            # watchdog taking the process down (torch's blocking wait).
            env.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
            log = tempfile.TemporaryFile(prefix="gpucheck-rank-")
            self.logs.append(log)
            p = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            self.procs.append((rank, p, log))

    def reap(self):
        """Record in the store how every rank that ended ended."""
        for rank, p, log in self.procs:
            code = p.poll()
            if code is None or rank in self.reported:
                continue
            self.reported.add(rank)
            log.flush()
            line = last_line("/proc/self/fd/%d" % log.fileno())
            if code < 0:
                try:
                    how = "was killed by %s" % signal.Signals(-code).name
                except ValueError:
                    how = "was killed by signal %d" % -code
            else:
                how = "exited with status %d" % code
            watchdog = any(word in (line or "").lower() for word in WATCHDOG_WORDS)
            record = {"rank": rank, "code": code, "how": how, "last": line, "watchdog": watchdog, "t": time.time()}
            try:
                self.link.put("w/%d" % rank, record)
            except StoreGone:
                pass

    def stop(self, grace_s):
        """Wait up to grace_s for the workers to end, then kill what is left."""
        deadline = time.monotonic() + grace_s
        for _, p, _ in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except BaseException:
                pass
        for _, p, _ in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def busbw(nbytes, seconds, n):
    """Bus bandwidth as nccl-tests defines it for all-reduce, GB/s."""
    return nbytes / seconds * 2 * (n - 1) / n / 1e9


def checked_result(res, rank, step, limit_s):
    """A rank's result as it may be judged: its own rank and step match its
    key; times finite and positive; an error a bounded line."""
    if not isinstance(res, dict):
        raise Refused("not an object")
    if res.get("rank") != rank or res.get("step") != step:
        raise Refused("it claims rank %s, step %s" % (clean(res.get("rank"), 20), clean(res.get("step"), 20)))
    out = {"rank": rank}
    if res.get("error") is not None:
        out["error"] = clean(res["error"])
        return out
    if res.get("idle") is True:
        return {"rank": rank, "idle": True}
    if not isinstance(res.get("verified"), bool):
        raise Refused("'verified' is not true or false")
    out["verified"] = res["verified"]
    out["seconds"] = positive(res.get("seconds"), "'seconds'", limit_s, MIN_SECONDS)
    if "pair" in res:
        out["pair"] = res["pair"]
    return out


def collect(link, step, ranks, deadline, workers, limit_s):
    """Every rank's result of one step (None for a rank that gave none) and
    how each rank that ended without one ended. Once a rank reports an error
    or ended (a rank died: the others' collectives fail), the others get
    STEP_SLACK_S more, not the whole deadline."""
    got, exits = {}, {}
    while time.monotonic() < deadline and len(got) < len(ranks):
        link.refresh()
        if workers is not None:
            workers.reap()
        for r in ranks:
            k = "r/%d/%d" % (step, r)
            if r not in got and link.has(k):
                try:
                    got[r] = checked_result(link.take(k), r, step, limit_s)
                except Unverified:
                    continue
                except Refused as e:
                    got[r] = {"rank": r, "error": "sent an unreadable result: key %s, %s" % (link.key(k), e)}
                if got[r].get("error"):
                    deadline = min(deadline, time.monotonic() + STEP_SLACK_S)
            if r not in got and r not in exits:
                ended = link.verified("w/%d" % r)
                if isinstance(ended, dict) and ended.get("rank") == r:
                    exits[r] = {
                        "rank": r,
                        "how": clean(ended.get("how") or "ended", 60),
                        "last_line": clean(ended["last"], 240) if ended.get("last") else None,
                        "watchdog": ended.get("watchdog") is True,
                    }
                    deadline = min(deadline, time.monotonic() + STEP_SLACK_S)
        time.sleep(POLL_S)
    return {r: got.get(r) for r in ranks}, {r: e for r, e in exits.items() if r not in got}


def culprits(results, exits):
    """The ranks that stopped first: no result, and not taken down by NCCL's
    watchdog (that rank only waited on another)."""
    return sorted(
        r for r, res in results.items() if res is None and not (exits.get(r) or {}).get("watchdog")
    )


def combine(results, exits, nbytes, world, first):
    """One node's (or pair's) result from its ranks': verified when every
    rank verified; the time of the slowest rank. `first` are the ranks of
    the whole step that stopped first; a node without any of them whose
    ranks failed only waited on them."""
    silent = sorted(r for r, res in results.items() if res is None and r not in exits)
    ended = [exits[r] for r in sorted(results) if results[r] is None and r in exits]
    errors = [
        "rank %d: %s" % (r, res["error"])
        for r, res in sorted(results.items())
        if res is not None and res.get("error")
    ]
    out = {"verified": not errors and not silent and not ended, "silent_ranks": silent, "exits": ended}
    out["waited"] = bool(first) and not any(r in first for r in results)
    if errors:
        more = " (%d ranks in all)" % len(errors) if len(errors) > 3 else ""
        out["error"] = "; ".join(errors[:3]) + more
    if errors or silent or ended:
        return out
    seconds = max(res["seconds"] for res in results.values())
    out.update({"seconds": seconds, "busbw_gbps": busbw(nbytes, seconds, world), "error": None})
    return out


def full_allreduce(cfg, link, go, workers):
    """Node 0: the all-reduce over every rank of every node; per node."""
    nbytes = (64 << 20) if go["backends"][0] == "nccl" else (8 << 20)
    limit = 2 * cfg["allreduce_timeout_s"] + STEP_SLACK_S
    stage("waiting for every rank's all-reduce result")
    results, exits = collect(link, 0, list(range(go["world"])), time.monotonic() + limit, workers, limit)
    first = culprits(results, exits)
    reduced = {}
    for node in range(cfg["nnodes"]):
        mine = {r: results[r] for r in ranks_of(go, node)}
        res = combine(mine, exits, nbytes, go["world"], first)
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


_pending = [b""]
# Set once gpucheck closed this payload's input.
_eof = [False]


def read_line(deadline):
    """One line from stdin (gpucheck), waited for until deadline; "" at the
    end of input or the deadline. Read from the descriptor itself, so a
    line already in a buffer is never waited for."""
    while b"\n" not in _pending[0]:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([0], [], [], left)[0]:
            return ""
        chunk = os.read(0, 1 << 20)
        if not chunk:
            _eof[0] = True
            return ""
        _pending[0] += chunk
    line, _, _pending[0] = _pending[0].partition(b"\n")
    return line.decode("utf-8", "replace")


def pair_rounds(cfg, link, go, nbytes, workers):
    """Node 0: ask gpucheck for pair rounds (on stdin, after a "pairs" event
    with what was measured so far), publish each round as a step, collect
    the pairs' results; until gpucheck answers no rounds."""
    table, step, passes = [], 0, 0
    limit = 2 * cfg["allreduce_timeout_s"] + STEP_SLACK_S
    while True:
        passes += 1
        emit({"event": "pairs", "pass": passes, "results": table})
        line = read_line(time.monotonic() + cfg["margin_s"])
        rounds = loads(line).get("rounds", []) if line.strip() else []
        if not rounds:
            break
        for pairs in rounds:
            step += 1
            link.keep("step/%d" % step, {"kind": "pairs", "pairs": pairs})
            stage("pair round %d: %d pairs" % (step, len(pairs)))
            ranks = [r for a, b in pairs for r in ranks_of(go, a) + ranks_of(go, b)]
            results, exits = collect(link, step, ranks, time.monotonic() + limit, workers, limit)
            first = culprits(results, exits)
            failed = False
            for a, b in pairs:
                mine = {r: results[r] for r in ranks_of(go, a) + ranks_of(go, b)}
                res = combine(mine, exits, nbytes, len(mine), first)
                error = res.get("error")
                gone = res["silent_ranks"] + [e["rank"] for e in res["exits"]]
                if gone:
                    silent = ", ".join(str(r) for r in sorted(gone))
                    error = "no result from rank %s" % silent + ("; " + error if error else "")
                table.append({"a": a, "b": b, "busbw_gbps": res.get("busbw_gbps"), "error": error})
                failed = failed or bool(error)
            if failed:
                # A broken pair leaves its ranks out of step: stop here.
                return table, step
    return table, step


def allreduce_stage(cfg, link, entries, backend):
    """Node 0, once every node joined: rank offsets from each node's rank
    count, the go signal, the full all-reduce, then the pair rounds."""
    n = cfg["nnodes"]
    counts = [entries[r]["local_ranks"] for r in range(n)]
    offsets = [sum(counts[:i]) for i in range(n)]
    backends = [entries[r]["backend"] for r in range(n)]
    go = {"world": sum(counts), "offsets": offsets, "counts": counts, "backends": backends}
    if go["world"] < 2:
        return {}, [], 0
    link.keep("allreduce/go", go)
    workers, step = None, 0
    try:
        workers = Workers(cfg, go, backend, link)
        reduced, nbytes = full_allreduce(cfg, link, go, workers)
        table = []
        if all(r.get("verified") for r in reduced.values()):
            # gpucheck decides whether pairs are worth it (not below 3 nodes).
            table, step = pair_rounds(cfg, link, go, nbytes, workers)
    finally:
        link.keep("step/%d" % (step + 1), {"kind": "stop"})
        if workers is not None:
            workers.stop(5)
    return reduced, table, step


def entry_problem(e, rank, link, claim):
    """Why node `rank`'s entry cannot be judged: (problem, ignored). An
    ignored entry (another rank's, another run's, not the claimant's) is
    waited past; any other problem is that node's error."""
    if not isinstance(e, dict):
        return "sent an entry that is not a JSON object", False
    if e.get("node_rank") != rank:
        return "an entry for rank %d claims rank %s: ignored" % (rank, clean(e.get("node_rank"), 20)), True
    if e.get("run_id") != link.run_id:
        return "an entry for rank %d belongs to run %s: ignored" % (rank, clean(e.get("run_id"), 40)), True
    if claim is None or e.get("claim") != claim.get("nonce"):
        return "an entry for rank %d does not come from the node that claimed it: ignored" % rank, True
    if not isinstance(e.get("message"), dict):
        return "sent an entry without its report", False
    try:
        whole(e.get("local_ranks"), "its rank count", 1, MAX_LOCAL_RANKS)
        if e.get("backend") not in ("nccl", "gloo"):
            raise Refused("its backend is %s" % clean(e.get("backend"), 20))
        if e.get("clock") is not None:
            for f in ("offset_s", "uncertainty_s"):
                v = e["clock"].get(f) if isinstance(e["clock"], dict) else None
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise Refused("its clock reading is not a number")
    except Refused as x:
        return "sent an entry this node cannot judge: %s" % x, False
    return None, False


def read_entry(link, r, claims, rejected, ignored):
    """Node 0: node r's entry if it is there and may be judged; None while
    it is waited for. A broken entry goes into `rejected` (r is done), an
    ignored one into `ignored` (r is still waited for)."""
    name = "node/%d" % r
    if not link.has(name):
        return None
    try:
        e = link.take(name)
    except Unverified:
        return None
    except Refused as x:
        rejected[r] = "sent an unreadable entry: key %s, %s" % (link.key(name), x)
        return None
    if claims.get(r) is None:
        claims[r] = link.verified("claim/%d" % r)
    problem, ignore = entry_problem(e, r, link, claims[r])
    if problem is None:
        return e
    if ignore:
        if problem not in ignored:
            ignored.append(problem)
        claims.pop(r, None)
    else:
        rejected[r] = problem
    return None


def notes(link, nnodes, claims):
    """Second claimants and refused nodes that left a note under this run."""
    duplicates, refused = [], {}
    for r in range(nnodes):
        dup = link.verified("dup/%d" % r)
        if isinstance(dup, dict):
            first = dup.get("holder") or claims.get(r) or {}
            duplicates.append(
                {
                    "node_rank": r,
                    "first": clean(first.get("host", "?"), 80),
                    "first_pid": first.get("pid") if isinstance(first.get("pid"), int) else None,
                    "second": clean(dup.get("host", "?"), 80),
                    "second_pid": dup.get("pid") if isinstance(dup.get("pid"), int) else None,
                }
            )
        why = link.verified("refused/%d" % r)
        if isinstance(why, dict) and isinstance(why.get("why"), str):
            refused[str(r)] = clean(why["why"])
    return duplicates, refused


def gather(cfg, link, own, started):
    """Node 0: every node's entry until rdzv_timeout_s after it started
    serving (its clock written into the store as it waits)."""
    nnodes = cfg["nnodes"]
    entries, claims, rejected, ignored = {0: own}, {}, {}, []
    deadline = started + cfg["rdzv_timeout_s"]
    waiting = set(range(1, nnodes))
    stage("waiting for %d nodes" % len(waiting))
    while waiting and time.monotonic() < deadline:
        link.refresh()
        link.put("clock0", time.time())
        for r in sorted(waiting):
            e = read_entry(link, r, claims, rejected, ignored)
            if e is not None:
                entries[r] = e
            if e is not None or r in rejected:
                waiting.discard(r)
        time.sleep(TICK_S)
    return entries, rejected, ignored, sorted(waiting), claims


def publish_verdict(cfg, link, joined):
    """Node 0: gpucheck's verdict (sealed by gpucheck itself) into the
    store; when gpucheck gives none in time, one saying so, so every node
    still there ends with an answer. Then wait for the acknowledgements of
    the nodes that joined."""
    stage("waiting for the verdict from gpucheck")
    line = read_line(time.monotonic() + cfg["margin_s"])
    key = link.key("verdict")
    sealed = None
    try:
        sealed = loads(line).get("sealed") if line.strip() else None
    except Refused:
        pass
    if not isinstance(sealed, str):
        line = "FLEET NOT READY: node 0's gpucheck gave no verdict within %.0f s" % cfg["margin_s"]
        sealed = link.seal(key, dumps({"exit_code": 1, "line": line, "run_id": link.run_id}))
    link.keep_raw(key, sealed)
    acked = set()
    deadline = time.monotonic() + cfg["ack_timeout_s"]
    stage("waiting for every node to read the verdict")
    while len(acked) < len(joined) and time.monotonic() < deadline:
        link.refresh()
        for r in joined:
            if r not in acked:
                ack = link.verified("ack/%d" % r)
                if isinstance(ack, dict) and ack.get("node_rank") == r:
                    acked.add(r)
        time.sleep(POLL_S)
    return sorted(acked)


def serve(cfg, link, own, started, backend):
    """Node 0: gather, run the all-reduce, hand everything to gpucheck,
    publish the verdict, wait until every node has read it."""
    entries, rejected, ignored, missing, claims = gather(cfg, link, own, started)
    reduced, table, steps = {}, [], 0
    if not missing and not rejected and cfg.get("allreduce"):
        reduced, table, steps = allreduce_stage(cfg, link, entries, backend)
    duplicates, refused = notes(link, cfg["nnodes"], claims)
    nodes = {}
    for r, e in sorted(entries.items()):
        nodes[str(r)] = {k: e.get(k) for k in ("message", "torch", "clock")}
        nodes[str(r)]["allreduce"] = reduced.get(r)
    emit(
        {
            "event": "gathered",
            "run_id": link.run_id,
            "nodes": nodes,
            "missing": missing,
            "rejected": {str(r): why for r, why in rejected.items()},
            "refused": refused,
            "ignored": ignored[:20],
            "duplicates": duplicates,
            "unverified": len(link.unverified),
            "pairs": table,
            "pair_rounds": steps,
        }
    )
    joined = [r for r in entries if r != 0]
    if cfg.get("watch"):
        watch_lead(link, joined)
        return
    acked = publish_verdict(cfg, link, joined)
    emit({"event": "done", "acked": acked, "unverified": len(link.unverified)})


WATCH_ORDERS = ("diagnose", "stop", "end")


def watch_order(link, order, n):
    """Node 0 of a watched job: an order for every other node ("diagnose":
    diagnose your ranks, the job looks hung; "stop": end your ranks, the
    job is hung; "end": the watch is over), numbered n."""
    link.keep("watch/order", {"order": order, "n": n, "run_id": link.run_id})


def watch_lead(link, joined):
    """Node 0 of a job watched across nodes: hand gpucheck each node's
    summary once it is newer than the last; put gpucheck's orders into the
    store; at gpucheck's "end" (or the end of its input) wait a moment for
    the others to read it, then end."""
    stage("watching: reading the summaries of %d nodes" % len(joined))
    rounds, ordered = {}, None
    while True:
        line = read_line(time.monotonic() + WATCH_POLL_S)
        order, n = None, 0
        if line.strip():
            try:
                said = loads(line)
                order, n = said.get("order"), said.get("n", 0)
            except (Refused, AttributeError):
                order = None
        elif _eof[0]:
            order = "end"
        if order == "end" and ordered == "stop":
            # The others must still read the stop, not the end.
            break
        if order in WATCH_ORDERS and isinstance(n, int):
            watch_order(link, order, n)
            ordered = order
        if order == "end":
            break
        link.refresh()
        for r in joined:
            value = link.verified("watch/%d" % r)
            if not isinstance(value, dict):
                continue
            n = value.get("round")
            if isinstance(n, int) and not isinstance(n, bool) and n > rounds.get(r, -1):
                rounds[r] = n
                emit({"event": "summary", "node": r, "summary": value})
    deadline = time.monotonic() + WATCH_END_S
    acked = set()
    while len(acked) < len(joined) and time.monotonic() < deadline:
        link.refresh()
        acked.update(r for r in joined if r not in acked and link.has("watch/ack/%d" % r))
        time.sleep(POLL_S * 5)
    emit({"event": "done", "acked": sorted(acked), "unverified": len(link.unverified)})


def watch_follow(link, rank):
    """Another node of a job watched across nodes: each line gpucheck
    writes (this node's summary) into the store for node 0; each new order
    of node 0 handed to gpucheck; until gpucheck closes the input."""
    stage("watching: sending summaries to node 0")
    told, polled = None, 0.0
    while True:
        line = read_line(time.monotonic() + WATCH_POLL_S)
        if line.strip():
            try:
                body = loads(line)
            except Refused:
                body = None
            if isinstance(body, dict):
                link.put("watch/%d" % rank, body)
        elif _eof[0]:
            return
        if time.monotonic() - polled < WATCH_POLL_S:
            continue
        polled = time.monotonic()
        order = link.verified("watch/order")
        if isinstance(order, dict) and order.get("run_id") == link.run_id:
            now = (order.get("order"), order.get("n"))
            if now[0] in WATCH_ORDERS and isinstance(now[1], int) and now != told:
                told = now
                if now[0] in ("stop", "end"):
                    link.put("watch/ack/%d" % rank, {"node_rank": rank})
                emit({"event": "order", "order": now[0], "n": now[1]})


def op_limit(cfg):
    """One store request's deadline: OP_TIMEOUT_S, or the rendezvous
    timeout when that is shorter."""
    return min(OP_TIMEOUT_S, cfg["rdzv_timeout_s"])


def run_record(cfg, run_id):
    return {
        "run_id": run_id,
        "nnodes": cfg["nnodes"],
        "tool_version": cfg["tool_version"],
        "protocol": PROTOCOL,
        "profile": cfg["profile"],
        "host": cfg["host"],
        "run_id_from": cfg.get("run_id_from"),
    }


def read_run(cfg, store, token, dog, where, deadline):
    """Another node: node 0's run record, polled for until deadline; an
    error event (and None) when it never came or does not verify."""
    probe = Link(store, "-", token, dog, where, op_limit(cfg))
    doubted = None
    while time.monotonic() < deadline:
        if probe.call("asking for " + RUN_KEY, lambda: store.check([RUN_KEY])):
            raw = probe.get_raw(RUN_KEY)
            if token is None and raw.startswith(SEAL.encode()):
                fail("run", "%s serves a cluster run with a token (GPUCHECK_CLUSTER_TOKEN or "
                     "--token-file); this node has none" % where)
                return None
            try:
                record = loads(probe.unseal(RUN_KEY, raw))
                if isinstance(record, dict):
                    return record
            except Unverified:
                doubted = doubted or time.monotonic()
                if time.monotonic() - doubted > UNVERIFIED_S:
                    break
            except Refused:
                pass
        time.sleep(POLL_S * 5)
    if probe.unverified:
        fail("run", "the run record at %s does not verify with this node's token: is "
             "GPUCHECK_CLUSTER_TOKEN (or --token-file) the same on every node?" % where)
    else:
        fail("run", "%s gave no gpucheck run record within %.0f s: is another program "
             "serving that port?" % (where, cfg["rdzv_timeout_s"]))
    return None


def fail(stage_name, detail, **more):
    emit(dict(more, event="error", stage=stage_name, detail=clean(detail, 600)))


def confirm(cfg, record, where, link):
    """Another node: is node 0's run this node's run? None when it is; else
    the error (written as a note under the run too when the run is ours but
    the versions or profile differ)."""
    theirs = "%s already serves a gpucheck cluster of %s nodes, run %s" % (
        where, clean(record.get("nnodes"), 12), clean(record.get("run_id"), 60))
    mine = cfg.get("run_id")
    if mine is not None and record.get("run_id") != mine:
        return "%s; this one is run %s (%s)" % (theirs, mine, cfg.get("run_id_from")), False
    if record.get("nnodes") != cfg["nnodes"]:
        return "%s; this one expects %d" % (theirs, cfg["nnodes"]), False
    for field, label in (("protocol", "rendezvous protocol"), ("tool_version", "gpucheck"), ("profile", "profile")):
        ours = PROTOCOL if field == "protocol" else cfg[field]
        if record.get(field) != ours:
            return (
                "node 0 (%s) runs %s %s; node %d (%s) runs %s %s: run the same gpucheck with the "
                "same flags on every node"
                % (clean(record.get("host"), 80), label, clean(record.get(field), 40),
                   cfg["node_rank"], cfg["host"], label, ours),
                True,
            )
    return None, False


def claim(link, rank, me):
    """Take node rank `rank`'s slot (compare_set: the first claimant holds
    it). None when this node holds it, else the holder's claim. A claim that
    does not verify is replaced, atomically."""
    k = link.key("claim/%d" % rank)
    mine = link.seal(k, dumps(me))
    expected = ""
    for _ in range(4):
        got = link.call("claiming " + k, lambda: link.store.compare_set(k, expected, mine))
        if got == mine.encode():
            link.kept[k] = mine
            return None
        try:
            holder = loads(link.unseal(k, got))
            if isinstance(holder, dict):
                return holder
        except (Unverified, Refused):
            pass
        expected = got.decode("utf-8", "replace")
    return {"host": "an unreadable claim"}


def join(cfg, link, entry, started, local):
    """Another node: claim its rank, measure the clock, hand over its entry,
    wait for the verdict until rdzv_timeout_s + margin_s after it started
    connecting (plus the workers' budget once the all-reduce started)."""
    rank = cfg["node_rank"]
    me = {"host": cfg["host"], "pid": os.getpid(), "nonce": secrets.token_hex(8), "node_rank": rank}
    holder = claim(link, rank, me)
    if holder is not None:
        link.put("dup/%d" % rank, dict(me, holder=holder))
        fail(
            "claim",
            "node rank %d of run %s is already taken by %s (pid %s); this node (%s, pid %d) is a "
            "second claimant: give every node its own --node-rank"
            % (rank, link.run_id, clean(holder.get("host", "?"), 80), clean(holder.get("pid", "?"), 12),
               cfg["host"], os.getpid()),
        )
        return
    stage("measuring the clock against node 0")
    try:
        clock = measure_clock(link)
    except (Refused, Unverified) as e:
        clock = None
        stage("clock not measured: %s" % clean(e))
    link.keep("node/%d" % rank, dict(entry, clock=clock, claim=me["nonce"]))
    emit({"event": "joined", "run_id": link.run_id, "clock": clock})
    if cfg.get("watch"):
        watch_follow(link, rank)
        return
    wait_verdict(cfg, link, started, local)


def checked_go(go, cfg, local):
    """The go signal as it may be acted on: counts, offsets and world that
    add up, this node's count the one it asked for."""
    n = cfg["nnodes"]
    if not isinstance(go, dict):
        raise Refused("not an object")
    counts, offsets = go.get("counts"), go.get("offsets")
    if not (isinstance(counts, list) and isinstance(offsets, list) and len(counts) == n == len(offsets)):
        raise Refused("it does not give %d rank counts and offsets" % n)
    for c in counts:
        whole(c, "a rank count", 1, MAX_LOCAL_RANKS)
    if offsets != [sum(counts[:i]) for i in range(n)] or go.get("world") != sum(counts):
        raise Refused("its offsets or world size do not add up")
    if counts[cfg["node_rank"]] != local["local_ranks"]:
        raise Refused("it gives this node %s ranks; it runs %d" % (counts[cfg["node_rank"]], local["local_ranks"]))
    if not (isinstance(go.get("backends"), list) and len(go["backends"]) == n):
        raise Refused("it names no backend per node")
    return go


def wait_verdict(cfg, link, started, local):
    rank = cfg["node_rank"]
    deadline = started + cfg["rdzv_timeout_s"] + cfg["margin_s"]
    stage("waiting for node 0's verdict")
    workers = None
    try:
        while time.monotonic() < deadline:
            link.refresh()
            if workers is None and link.has("allreduce/go"):
                try:
                    go = checked_go(link.take("allreduce/go"), cfg, local)
                    # Node 0 has read the entry: no need to keep writing it.
                    link.kept.pop(link.key("node/%d" % rank), None)
                    deadline += worker_budget(cfg)
                    stage("all-reduce: %d local ranks of %d" % (go["counts"][rank], go["world"]))
                    workers = Workers(cfg, go, local["backend"], link)
                except Unverified:
                    pass
                except Refused as e:
                    stage("a go signal was ignored: %s" % e)
            if workers is not None:
                workers.reap()
            if link.has("verdict"):
                key = link.key("verdict")
                raw = link.get_raw(key)
                try:
                    verdict = loads(link.unseal(key, raw))
                except (Unverified, Refused):
                    verdict = None
                if isinstance(verdict, dict) and verdict.get("run_id") == link.run_id:
                    link.put("ack/%d" % rank, {"node_rank": rank})
                    dup = link.verified("dup/%d" % rank)
                    if workers is not None:
                        workers.stop(2)
                    emit(
                        {
                            "event": "verdict",
                            "sealed": raw.decode("utf-8", "replace"),
                            "key": key,
                            "duplicate": clean(dup.get("host", "?"), 80) if isinstance(dup, dict) else None,
                            "unverified": len(link.unverified),
                        }
                    )
                    return
            time.sleep(POLL_S * 5)
    finally:
        if workers is not None:
            workers.stop(2)
    fail(
        "verdict",
        "node 0 gave no verdict within %.0f s" % (cfg["rdzv_timeout_s"] + cfg["margin_s"]),
        unverified=len(link.unverified),
    )


def connect(cfg, dog, where, started):
    """Another node: the store client, within rdzv_timeout_s. torch's
    client retries a failed connect once, so each try gets half."""
    from torch.distributed import TCPStore

    budget = cfg["rdzv_timeout_s"]
    dog.arm(started + budget + 2, "connect", "no answer from %s within %.0f s" % (where, budget))
    try:
        return TCPStore(
            cfg["master_addr"],
            cfg["master_port"],
            None,
            False,
            datetime.timedelta(seconds=max(0.5, budget / 2)),
            wait_for_workers=False,
        )
    finally:
        dog.disarm()


def occupant(cfg, token, where):
    """Node 0 could not serve: what serves the port, if it is gpucheck (asked
    for at most OCCUPANT_S: whatever holds the port may never answer)."""
    from torch.distributed import TCPStore

    found = []

    def ask():
        store = TCPStore(cfg["master_addr"], cfg["master_port"], None, False,
                         datetime.timedelta(seconds=OCCUPANT_S), wait_for_workers=False)
        if store.check([RUN_KEY]):
            raw = store.get(RUN_KEY)
            text = raw.decode("utf-8", "replace")
            record = loads(text.split("\n", 1)[1] if text.startswith(SEAL) else text)
            found.append("%s already serves a gpucheck cluster of %s nodes, run %s" % (
                where, clean(record.get("nnodes"), 12), clean(record.get("run_id"), 60)))

    def guarded():
        try:
            ask()
        except BaseException:
            pass

    t = threading.Thread(target=guarded, daemon=True)
    t.start()
    t.join(OCCUPANT_S)
    return found[0] if found else None


def lead(cfg, store, token, dog, where, entry, started, backend):
    run_id = cfg.get("run_id") or secrets.token_hex(4)
    link = Link(store, run_id, token, dog, where, op_limit(cfg))
    link.keep_raw(RUN_KEY, link.seal(RUN_KEY, dumps(run_record(cfg, run_id))))
    link.put("claim/0", {"host": cfg["host"], "pid": os.getpid(), "nonce": "node0", "node_rank": 0})
    link.put("clock0", time.time())
    emit({"event": "joined", "run_id": run_id, "clock": None, "address": cfg["master_addr"]})
    serve(cfg, link, dict(entry, claim="node0", clock=None), started, backend)


def follow(cfg, store, token, dog, where, entry, started, local):
    record = read_run(cfg, store, token, dog, where, started + cfg["rdzv_timeout_s"])
    if record is None:
        return
    run_id = record.get("run_id")
    if not isinstance(run_id, str) or not run_id or len(run_id) > 128:
        fail("run", "%s serves a run record without a run id" % where)
        return
    link = Link(store, run_id, token, dog, where, op_limit(cfg))
    problem, ours = confirm(cfg, record, where, link)
    if problem is not None:
        if ours:
            link.put("refused/%d" % cfg["node_rank"], {"why": problem})
        fail("run", problem)
        return
    join(cfg, link, dict(entry, run_id=run_id), started, local)


def main():
    cfg = json.loads(os.environ["GPUCHECK_CLUSTER_CONFIG"])
    message = loads(read_line(time.monotonic() + 60))
    token = bytes.fromhex(os.environ.get("GPUCHECK_CLUSTER_KEY", "")) or None
    stage("import torch")
    try:
        import torch
        from torch.distributed import TCPStore
    except BaseException as e:
        fail("import", describe(e))
        return
    torch_info = torch_facts(torch)
    addr, port, rank = cfg["master_addr"], cfg["master_port"], cfg["node_rank"]
    where = "%s:%d" % (addr, port)
    ips, resolve_error = resolve(addr)
    here = {"address": addr, "port": port, "resolved": ips}
    if resolve_error is not None and rank != 0:
        fail("resolve", resolve_error, **here)
        return
    dog = Watchdog()
    started = time.monotonic()
    stage("%s the store at %s" % ("serving" if rank == 0 else "connecting to", where))
    try:
        if rank == 0:
            store = TCPStore(addr, port, None, True, datetime.timedelta(seconds=cfg["rdzv_timeout_s"]),
                             wait_for_workers=False)
        else:
            store = connect(cfg, dog, where, started)
    except BaseException as e:
        detail = describe(e)
        held = occupant(cfg, token, where) if rank == 0 else None
        if held is not None:
            detail = "%s (%s)" % (held, detail)
        fail("serve" if rank == 0 else "connect", detail, **here)
        return
    backend = cfg.get("backend") or ("nccl" if torch.cuda.is_available() else "gloo")
    # One rank per GPU torch sees with NCCL; --nproc ranks (default 1) with
    # gloo on CPU, or instead of the GPU count when given.
    count = cfg.get("nproc") or (torch.cuda.device_count() if backend == "nccl" else 1)
    local = {"backend": backend, "local_ranks": min(max(1, count), MAX_LOCAL_RANKS)}
    entry = dict(local, node_rank=rank, protocol=PROTOCOL, message=message, torch=torch_info)
    try:
        if rank == 0:
            lead(cfg, store, token, dog, where, dict(entry, run_id=None), started, backend)
        else:
            follow(cfg, store, token, dog, where, entry, started, local)
    except StoreGone as e:
        fail("gone", str(e), **here)
    except BaseException as e:
        fail("exchange", describe(e), **here)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker()
    else:
        main()

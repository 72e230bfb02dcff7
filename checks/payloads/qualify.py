"""gpucheck payload: put every GPU under load and measure it.

Run by gpucheck's load checks (gpu.compute, gpu.memory, gpu.p2p_bandwidth
and the burn profile) with the Python that will train, so the GEMMs run on
the cuBLAS the job will use. One process drives every GPU, one thread per
GPU, all started together behind a barrier (CUDA work releases the GIL).

    qualify.py compute --device cuda|cpu --gpus 0,1 --seconds S --seed N
    qualify.py memory  --device cuda|cpu --gpus 0,1 --seconds S --seed N
                       --pattern-bytes 0:BYTES,1:BYTES
    qualify.py p2p     --device cuda|cpu --gpus 0,1 --seconds S
    qualify.py burn    --device cuda|cpu --gpus 0,1 --seconds S --seed N
                       --memory-seconds S --duration S
                       --pattern-bytes 0:BYTES,1:BYTES

With --device cuda the GPU indices are CUDA ordinals (gpucheck sets
CUDA_DEVICE_ORDER=PCI_BUS_ID and CUDA_VISIBLE_DEVICES so that they are the
NVML indices). With --device cpu every "GPU" is the CPU: the same code path
with small buffers, for gpucheck's tests on machines without a GPU.

Prints exactly one result line on stdout, "GPUCHECK_QUALIFY {json}", and
progress as "GPUCHECK_QUALIFY_STAGE <what>" lines on stderr.

burn runs the compute load and then the memory load, round after round in
this one process, until --duration seconds have passed since it started (a
round started before then finishes), so the GPUs do not idle between rounds
for an interpreter's and CUDA's start. Each finished round is one line on
stdout as it ends, "GPUCHECK_QUALIFY_ROUND {json}" ({"round": N, "compute":
{"gpus": ...}, "memory": {"gpus": ...}}, each as the compute and memory
modes report it); the result line then says how many rounds ran.

Test hooks, honoured only with --device cpu (a CPU cannot be made to
compute wrong or run slow per "GPU" otherwise):
    GPUCHECK_QUALIFY_TEST_SLOW=INDEX:FACTOR   that GPU's loops take FACTOR
                                              times as long
    GPUCHECK_QUALIFY_TEST_SLOW_PAIR=SRC:DST:FACTOR  that pair's copies
                                              take FACTOR times as long
    GPUCHECK_QUALIFY_TEST_CORRUPT=INDEX       one element of that GPU's
                                              GEMM result is wrong
    GPUCHECK_QUALIFY_TEST_BAD_WORD=INDEX      one word of that GPU's pattern
                                              test reads back wrong
    GPUCHECK_QUALIFY_TEST_ROUND_FILE=PATH     burn writes the number of each
                                              round it finished to PATH
    GPUCHECK_QUALIFY_TEST_HANG_ROUND=N        burn hangs at the start of
                                              round N
"""

import json
import os
import sys
import threading
import time

MARK = "GPUCHECK_QUALIFY "
ROUND_MARK = "GPUCHECK_QUALIFY_ROUND "
STAGE = "GPUCHECK_QUALIFY_STAGE "

# Square GEMM sizes: large enough to reach cuBLAS's peak on a data-centre
# GPU (8192^3 runs in ~1 ms at 1 PFLOPS), small on the CPU.
GEMM_N = {"cuda": 8192, "cpu": 256}
# The GEMM compared bit for bit between GPUs and against float64 on the CPU.
SDC_N = {"cuda": 2048, "cpu": 128}
REFERENCE_N = {"cuda": 512, "cpu": 64}
# Bandwidth buffers: well past every GPU's L2 (H100 50 MiB, B200 126 MiB).
STREAM_BYTES = {"cuda": 1 << 30, "cpu": 16 << 20}
# Pattern test: how much to test at most on the CPU; sub-block compared at once.
CPU_PATTERN_CAP = 32 << 20
PATTERN_SLICE_ELEMS = {"cuda": 16 << 20, "cpu": 1 << 20}
P2P_BYTES = {"cuda": 256 << 20, "cpu": 8 << 20}
CPU_TURN = threading.RLock()


def stage(what):
    sys.stderr.write(STAGE + what + "\n")
    sys.stderr.flush()


def emit(result, mark=MARK):
    sys.stdout.write("\n" + mark + json.dumps(result, ensure_ascii=True) + "\n")
    sys.stdout.flush()


def describe(exc):
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return "%s: %s" % (type(exc).__name__, first) if first else type(exc).__name__


def parse_args(argv):
    opts = {"mode": argv[0], "device": "cuda", "gpus": [0], "seconds": 2.0, "seed": 1234, "duration": 0.0}
    opts["pattern_bytes"] = {}
    it = iter(argv[1:])
    for flag in it:
        value = next(it)
        if flag == "--device":
            opts["device"] = value
        elif flag == "--gpus":
            opts["gpus"] = [int(g) for g in value.split(",") if g]
        elif flag == "--seconds":
            opts["seconds"] = float(value)
        elif flag == "--memory-seconds":
            opts["memory_seconds"] = float(value)
        elif flag == "--duration":
            opts["duration"] = float(value)
        elif flag == "--seed":
            opts["seed"] = int(value)
        elif flag == "--pattern-bytes":
            for item in value.split(","):
                if item:
                    gpu, size = item.split(":")
                    opts["pattern_bytes"][int(gpu)] = int(size)
    return opts


def test_hook(opts, name):
    if opts["device"] != "cpu":
        return None
    return os.environ.get(name) or None


def slow_factor(opts, gpu):
    hook = test_hook(opts, "GPUCHECK_QUALIFY_TEST_SLOW")
    if hook:
        index, factor = hook.split(":")
        if int(index) == gpu:
            return float(factor)
    return 1.0


def slow_pair(opts, src, dst):
    hook = test_hook(opts, "GPUCHECK_QUALIFY_TEST_SLOW_PAIR")
    if hook:
        s, t, factor = hook.split(":")
        if (int(s), int(t)) == (src, dst):
            return float(factor)
    return 1.0


def hook_names(opts, name, gpu):
    hook = test_hook(opts, name)
    return hook is not None and int(hook) == gpu


class Device:
    """One GPU (or the CPU standing for one)."""

    def __init__(self, torch, opts, gpu, ordinal):
        self.torch = torch
        self.kind = opts["device"]
        self.gpu = gpu
        self.dev = torch.device("cuda", ordinal) if self.kind == "cuda" else torch.device("cpu")
        self.slow = slow_factor(opts, gpu)

    def sync(self):
        if self.kind == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def timed(self, step, seconds):
        """Run `step` repeatedly for about `seconds`; (iterations, elapsed).
        On the CPU the "GPUs" take turns, so that each figure is one core's
        and not the scheduler's."""
        if self.kind == "cpu":
            with CPU_TURN:
                return self._timed(step, seconds)
        return self._timed(step, seconds)

    def _timed(self, step, seconds):
        step()
        self.sync()
        iters, start = 0, time.perf_counter()
        while True:
            step()
            iters += 1
            if iters % 4 == 0 or self.kind == "cpu":
                self.sync()
                elapsed = time.perf_counter() - start
                if elapsed >= seconds:
                    break
        if self.slow > 1.0:
            time.sleep(elapsed * (self.slow - 1.0))
            elapsed *= self.slow
        return iters, elapsed

    def name(self):
        if self.kind == "cuda":
            return self.torch.cuda.get_device_name(self.dev)
        return "cpu"


def gemm_tflops(d, dtype, seconds):
    torch = d.torch
    n = GEMM_N[d.kind]
    a = torch.randn(n, n, device=d.dev, dtype=torch.float32).to(dtype)
    b = torch.randn(n, n, device=d.dev, dtype=torch.float32).to(dtype)
    out = torch.empty(n, n, device=d.dev, dtype=dtype)
    iters, elapsed = d.timed(lambda: torch.matmul(a, b, out=out), seconds)
    return 2.0 * n * n * n * iters / elapsed / 1e12


def seeded(torch, n, seed, salt):
    gen = torch.Generator().manual_seed(seed * 1000 + salt)
    return torch.randn(n, n, generator=gen, dtype=torch.float32)


def sdc_result(d, seed, opts):
    """The seeded bf16 GEMM on this GPU, back on the CPU as raw bits."""
    torch = d.torch
    n = SDC_N[d.kind]
    a = seeded(torch, n, seed, 1).to(d.dev, torch.bfloat16)
    b = seeded(torch, n, seed, 2).to(d.dev, torch.bfloat16)
    c = torch.matmul(a, b)
    if hook_names(opts, "GPUCHECK_QUALIFY_TEST_CORRUPT", d.gpu):
        c[n // 3, n // 5] += 1.0
    d.sync()
    return c.cpu()


def reference_check(d, seed, opts):
    """A small fp32 GEMM (no TF32) against float64 on the CPU, element by
    element within n * u * (|A| @ |B|), the classic worst-case bound for
    a dot product of length n in unit roundoff u = 2^-24 (Higham,
    Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5)."""
    torch = d.torch
    n = REFERENCE_N[d.kind]
    a = seeded(torch, n, seed, 3)
    b = seeded(torch, n, seed, 4)
    c = torch.matmul(a.to(d.dev), b.to(d.dev))
    if hook_names(opts, "GPUCHECK_QUALIFY_TEST_CORRUPT", d.gpu):
        c[n // 2, n // 7] += 1.0
    d.sync()
    exact = a.double() @ b.double()
    bound = n * 2.0**-24 * (a.double().abs() @ b.double().abs()) + 1e-30
    err = (c.cpu().double() - exact).abs()
    over = err > bound
    return {
        "reference_bad": int(over.sum().item()),
        "reference_max_error": float(err.max().item()),
        "reference_max_ratio": float((err / bound).max().item()),
    }


def run_threads(opts, work):
    """work(Device, barrier) on one thread per GPU; {gpu: result}."""
    import torch

    gpus = opts["gpus"]
    barrier = threading.Barrier(len(gpus))
    results = {}

    def one(gpu, ordinal):
        try:
            d = Device(torch, opts, gpu, ordinal)
            results[gpu] = work(d, barrier)
        except Exception as exc:  # one GPU failing is its result
            barrier.abort()
            results[gpu] = {"error": describe(exc)}

    threads = [threading.Thread(target=one, args=(g, i)) for i, g in enumerate(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def compute(opts):
    import torch

    if opts["device"] == "cpu":
        torch.set_num_threads(1)
    results = {}

    def work(d, barrier):
        out = {"name": d.name()}
        barrier.wait()
        stage("bf16 GEMM")
        out["bf16_tflops"] = gemm_tflops(d, torch.bfloat16, opts["seconds"])
        if d.kind == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
        barrier.wait()
        stage("tf32 GEMM")
        out["tf32_tflops"] = gemm_tflops(d, torch.float32, opts["seconds"])
        if d.kind == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
        stage("seeded GEMM")
        results[d.gpu] = sdc_result(d, opts["seed"], opts)
        out.update(reference_check(d, opts["seed"], opts))
        return out

    per_gpu = run_threads(opts, work)
    compare_results(torch, per_gpu, results)
    return per_gpu


def compare_results(torch, per_gpu, results):
    """Bit-compare each GPU's seeded result with the result most GPUs of its
    model share; one GPU alone is compared with nothing."""
    by_model = {}
    for gpu, out in per_gpu.items():
        if gpu in results and "error" not in out:
            by_model.setdefault(out["name"], []).append(gpu)
    for gpus in by_model.values():
        bits = {g: results[g].view(torch.int16) for g in gpus}
        groups = []
        for g in gpus:
            for group in groups:
                if torch.equal(bits[group[0]], bits[g]):
                    group.append(g)
                    break
            else:
                groups.append([g])
        # The result most GPUs share; between groups of one size (two GPUs
        # that disagree), the one whose GPUs pass the float64 reference.
        def standing(group):
            return (len(group), -sum(per_gpu[g].get("reference_bad", 0) for g in group))

        majority = max(groups, key=standing)[0]
        for g in gpus:
            differ = bits[g] != bits[majority]
            diff = (results[g].float() - results[majority].float()).abs()
            per_gpu[g]["compared_with"] = len(gpus) - 1
            per_gpu[g]["differing_elements"] = int(differ.sum().item())
            per_gpu[g]["largest_difference"] = float(diff.max().item())
            per_gpu[g]["agreeing"] = len([x for x in groups if g in x][0])


def stream(d, seconds):
    torch = d.torch
    elems = STREAM_BYTES[d.kind] // 4
    a = torch.zeros(elems, device=d.dev, dtype=torch.float32)
    b = torch.ones(elems, device=d.dev, dtype=torch.float32)
    c = torch.ones(elems, device=d.dev, dtype=torch.float32)
    iters, elapsed = d.timed(lambda: a.copy_(b), seconds / 2)
    copy = 2.0 * 4 * elems * iters / elapsed / 1e9
    iters, elapsed = d.timed(lambda: torch.add(b, c, alpha=3.0, out=a), seconds / 2)
    triad = 3.0 * 4 * elems * iters / elapsed / 1e9
    return {"copy_gbps": copy, "triad_gbps": triad}


def patterns(seed):
    """(name, function of (torch, start, count, device) -> int64 values)."""
    walking = [1 << k for k in (0, 9, 18, 27, 36, 45, 54, 63)]

    def const(v):
        signed = v - (1 << 64) if v >= 1 << 63 else v
        return lambda torch, start, count, dev: torch.full(
            (count,), signed, dtype=torch.int64, device=dev
        )

    def address(torch, start, count, dev):
        return torch.arange(start, start + count, dtype=torch.int64, device=dev)

    def random(torch, start, count, dev):
        gen = torch.Generator(device=dev).manual_seed(seed + start)
        return torch.randint(
            -(1 << 62), 1 << 62, (count,), generator=gen, dtype=torch.int64, device=dev
        )

    out = [("walking ones 0x%016x" % v, const(v)) for v in walking]
    out += [("walking zeros 0x%016x" % ((1 << 64) - 1 - v), const((1 << 64) - 1 - v)) for v in walking]
    out += [("address in address", address), ("random seed %d" % seed, random)]
    return out


def pattern_test(d, nbytes, seconds, seed, opts):
    """Write each pattern over `nbytes`, read it back, compare; stop starting
    new patterns when `seconds` have passed."""
    torch = d.torch
    if d.kind == "cpu":
        nbytes = min(nbytes, CPU_PATTERN_CAP)
    elems = nbytes // 8
    if elems <= 0:
        return {"pattern_bytes": 0}
    buf = torch.empty(elems, dtype=torch.int64, device=d.dev)
    step = PATTERN_SLICE_ELEMS[d.kind]
    deadline = time.perf_counter() + seconds
    bad, first_bad, done = 0, None, []
    inject = hook_names(opts, "GPUCHECK_QUALIFY_TEST_BAD_WORD", d.gpu)
    for name, values in patterns(seed):
        if time.perf_counter() >= deadline:
            break
        for start in range(0, elems, step):
            count = min(step, elems - start)
            buf[start : start + count] = values(torch, start, count, d.dev)
        if inject and not done:
            buf[elems // 2] ^= 1 << 20
        for start in range(0, elems, step):
            count = min(step, elems - start)
            wrong = (buf[start : start + count] != values(torch, start, count, d.dev)).nonzero()
            if wrong.numel():
                bad += wrong.numel()
                if first_bad is None:
                    lo = int(wrong[0].item()) + start
                    hi = int(wrong[-1].item()) + start
                    first_bad = {
                        "pattern": name,
                        "first": buf.data_ptr() + 8 * lo,
                        "last": buf.data_ptr() + 8 * hi + 7,
                    }
        done.append(name)
    d.sync()
    del buf
    return {
        "pattern_bytes": elems * 8,
        "patterns_done": len(done),
        "patterns_planned": len(patterns(seed)),
        "bad_words": bad,
        "first_bad": first_bad,
    }


def memory(opts):
    import torch

    if opts["device"] == "cpu":
        torch.set_num_threads(1)

    def work(d, barrier):
        barrier.wait()
        if d.kind == "cpu":
            with CPU_TURN:
                return one(d)
        return one(d)

    def one(d):
        stage("copy and triad")
        out = stream(d, opts["seconds"] / 3)
        if d.kind == "cuda":
            # The stream buffers go back to the driver before the patterns
            # take what NVML said was free.
            torch.cuda.empty_cache()
        nbytes = opts["pattern_bytes"].get(d.gpu, 0)
        stage("patterns")
        out.update(pattern_test(d, nbytes, opts["seconds"] * 2 / 3, opts["seed"], opts))
        return out

    return run_threads(opts, work)


def p2p(opts):
    """Copy bandwidth of every ordered pair that can reach each other, one
    pair at a time so each figure is that link's alone."""
    import torch

    kind, gpus = opts["device"], opts["gpus"]
    devs = {g: (torch.device("cuda", i) if kind == "cuda" else torch.device("cpu")) for i, g in enumerate(gpus)}
    pairs = [(s, t) for s in gpus for t in gpus if s != t]
    seconds = opts["seconds"] / max(1, len(pairs))
    nbytes = P2P_BYTES[kind]
    out = []
    for s, t in pairs:
        row = {"src": s, "dst": t}
        try:
            if kind == "cuda" and not torch.cuda.can_device_access_peer(devs[s], devs[t]):
                row["peer_access"] = False
                out.append(row)
                continue
            src = torch.ones(nbytes // 4, device=devs[s])
            dst = torch.empty(nbytes // 4, device=devs[t])
            d = Device(torch, opts, s, gpus.index(s))
            d.slow = max(slow_factor(opts, s), slow_factor(opts, t), slow_pair(opts, s, t))

            def sync_both():
                if kind == "cuda":
                    torch.cuda.synchronize(devs[s])
                    torch.cuda.synchronize(devs[t])

            d.sync = sync_both
            iters, elapsed = d.timed(lambda: dst.copy_(src, non_blocking=True), seconds)
            row["peer_access"] = True
            row["gbps"] = nbytes * iters / elapsed / 1e9
            del src, dst
        except Exception as exc:
            row["error"] = describe(exc)
        out.append(row)
    return {"pairs": out}


def burn(opts, started):
    """The compute load, then the memory load, round after round until
    --duration has passed since `started`; each round's line as it ends."""
    import torch

    rounds = 0
    mark = test_hook(opts, "GPUCHECK_QUALIFY_TEST_ROUND_FILE")
    while rounds == 0 or time.monotonic() - started < opts["duration"]:
        rounds += 1
        stage("burn round %d" % rounds)
        if test_hook(opts, "GPUCHECK_QUALIFY_TEST_HANG_ROUND") == str(rounds):
            time.sleep(24 * 3600)
        done = {"round": rounds, "compute": {"gpus": {str(g): r for g, r in compute(opts).items()}}}
        if opts["device"] == "cuda":
            # The GEMM buffers go back to the driver before the patterns
            # take what NVML said was free when the burn started.
            torch.cuda.empty_cache()
        mem = dict(opts, seconds=opts.get("memory_seconds", opts["seconds"]))
        done["memory"] = {"gpus": {str(g): r for g, r in memory(mem).items()}}
        emit(done, ROUND_MARK)
        if mark:
            with open(mark, "w") as f:
                f.write("%d\n" % rounds)
    return rounds


def main():
    started = time.monotonic()
    opts = parse_args(sys.argv[1:])
    result = {"mode": opts["mode"], "device": opts["device"]}
    try:
        stage("import torch")
        import torch  # noqa: F401

        if opts["device"] == "cuda" and not torch.cuda.is_available():
            result["error"] = "torch.cuda.is_available() is False"
        elif opts["mode"] == "compute":
            result["gpus"] = {str(g): r for g, r in compute(opts).items()}
        elif opts["mode"] == "memory":
            result["gpus"] = {str(g): r for g, r in memory(opts).items()}
        elif opts["mode"] == "p2p":
            result.update(p2p(opts))
        elif opts["mode"] == "burn":
            result["rounds"] = burn(opts, started)
        else:
            result["error"] = "unknown mode %s" % opts["mode"]
    except Exception as exc:
        result["error"] = describe(exc)
    emit(result)


if __name__ == "__main__":
    main()

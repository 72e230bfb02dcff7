"""gpucheck's DDP throughput benchmark (the `ddp.benchmark` check).

gpucheck writes this file to a private temporary path and launches it with
`python -m torch.distributed.run`, the user's own torch and launcher. Every
rank trains the same synthetic model; rank 0 first trains it alone (world
size 1), then all ranks train it under DistributedDataParallel (world size N).

Protocol: every line this program writes to stdout that gpucheck reads starts
with MARK and carries one JSON object with a "kind" field. Anything else on
stdout or stderr (torch warnings, NCCL logs) is noise that gpucheck keeps only
to show its tail when something fails. Each line is written with a single
os.write, so lines from several ranks sharing the pipe never interleave.

Test hooks (used by gpucheck's own test suite, harmless otherwise):
GPUCHECK_DDP_TEST_FAIL_RANK=R makes rank R raise at its first DDP step,
GPUCHECK_DDP_TEST_HANG_RANK=R makes rank R stop there forever, and
GPUCHECK_DDP_TEST_DIVERGE_RANK=R makes rank R perturb one weight after
training, so the synchronisation check must catch it.
"""

import ctypes
import os
import signal


def _die_with_parent():
    # torchrun starts every worker in a session of its own
    # (start_new_session=True in torch.distributed.elastic), so a kill of
    # torchrun's process group misses the workers. Ask the kernel to SIGKILL
    # this worker as soon as torchrun dies, before doing anything slow.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # gpucheck also sweeps for this file's workers when it ends
    if os.getppid() == 1:
        # torchrun died before prctl took effect: nobody is waiting for us.
        os._exit(1)


_die_with_parent()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from datetime import timedelta  # noqa: E402

MARK = "@@gpucheck-ddp@@ "
RANK = int(os.environ.get("RANK", "0"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))

# Model sizes: transformer-style MLP blocks (LayerNorm, Linear d->4d, GELU,
# Linear 4d->d, residual), about 8*d*d parameters per block.
MODELS = {
    "small": {"width": 256, "blocks": 4},  # ~2.1 M parameters
    "medium": {"width": 1024, "blocks": 8},  # ~67 M parameters
    "large": {"width": 2048, "blocks": 8},  # ~268 M parameters
}
# Per-rank batch: (samples, tokens per sample). On GPUs large enough that a
# step is tens of milliseconds of bf16 matmuls on an H100, so gradient
# all-reduce has real compute to overlap with; on CPUs small enough that the
# default model steps in well under a second on one core.
BATCH = {
    "cuda": {"small": (8, 512), "medium": (32, 512), "large": (16, 512)},
    "cpu": {"small": (8, 16), "medium": (2, 16), "large": (1, 16)},
}


def finite_or_none(value):
    """JSON has no NaN or Infinity: send them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def emit(kind, **fields):
    fields = {k: finite_or_none(v) for k, v in fields.items()}
    fields["kind"] = kind
    fields.setdefault("rank", RANK)
    data = (MARK + json.dumps(fields, separators=(",", ":")) + "\n").encode()
    while data:
        written = os.write(1, data)
        data = data[written:]


def stage(name):
    emit("stage", stage=name)


def test_hook(name):
    """True when the test hook GPUCHECK_DDP_TEST_<name>_RANK names this rank."""
    value = os.environ.get("GPUCHECK_DDP_TEST_%s_RANK" % name)
    return value is not None and value.strip() == str(RANK)


def percentile(values, q):
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def cuda_device_uuid(ordinal):
    """CUDA device `ordinal`'s UUID as NVML spells it: "GPU-..." for a whole
    GPU, "MIG-..." for a MIG instance. cuDeviceGetUuid_v2 (CUDA 11.4+) gives
    a MIG instance its own UUID where the v1 entry point (and torch's
    device properties) give the parent GPU's, so v2 differing from v1 marks a
    MIG instance. None when libcuda cannot say."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        if cu.cuInit(0) != 0:
            return None
        dev = ctypes.c_int()
        if cu.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            return None
    except (OSError, AttributeError):
        return None

    def ask(name):
        f = getattr(cu, name, None)
        buf = ctypes.create_string_buffer(16)
        return buf.raw if f is not None and f(buf, dev) == 0 else None

    v1, v2 = ask("cuDeviceGetUuid"), ask("cuDeviceGetUuid_v2")
    own = v2 or v1
    if own is None:
        return None
    prefix = "MIG" if v1 is not None and v2 is not None and v1 != v2 else "GPU"
    h = own.hex()
    return "%s-%s-%s-%s-%s-%s" % (prefix, h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def build_model(torch, width, blocks):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, 4 * width)
            self.down = nn.Linear(4 * width, width)

        def forward(self, x):
            return x + self.down(nn.functional.gelu(self.up(self.norm(x))))

    return nn.Sequential(*[Block() for _ in range(blocks)], nn.LayerNorm(width))


class StepClock:
    """Per-step timings. On CUDA, events on the compute stream (no host sync
    inside the loop); on CPU, wall clock (every op is synchronous there)."""

    def __init__(self, torch, cuda):
        self.torch = torch
        self.cuda = cuda
        self.marks = []  # per step: (start, after_backward, end)

    def now(self):
        if self.cuda:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def elapsed_ms(self, a, b):
        if self.cuda:
            return a.elapsed_time(b)
        return (b - a) * 1000.0

    def steps_ms(self):
        """(step_ms, forward_backward_ms) lists; call after sync()."""
        steps = [self.elapsed_ms(s, e) for (s, _, e) in self.marks]
        fwd_bwd = [self.elapsed_ms(s, b) for (s, b, _) in self.marks]
        return steps, fwd_bwd


def run(args):
    stage("import torch")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = args.device == "cuda"
    if cuda:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if LOCAL_RANK >= count:
            emit(
                "error",
                error="no_gpu",
                message="local rank %d has no GPU: torch sees %d CUDA device(s)"
                % (LOCAL_RANK, count),
            )
            return 3
        torch.cuda.set_device(LOCAL_RANK)
        device = torch.device("cuda", LOCAL_RANK)
        props = torch.cuda.get_device_properties(LOCAL_RANK)
        uuid = getattr(props, "uuid", None)
        device_name = props.name
        device_uuid = cuda_device_uuid(LOCAL_RANK) or (
            ("GPU-%s" % uuid) if uuid is not None else None
        )
        # Native bf16 tensor cores from compute capability 8.0 (Ampere) on;
        # is_bf16_supported() also says yes where bf16 is only emulated.
        bf16 = props.major >= 8
        torch.backends.cuda.matmul.allow_tf32 = True
    else:
        device = torch.device("cpu")
        device_name = "cpu"
        device_uuid = None
        bf16 = False

    stage("init_process_group")
    dist.init_process_group(
        backend=args.backend, timeout=timedelta(seconds=max(10.0, args.pg_timeout_s))
    )
    if dist.get_world_size() != WORLD_SIZE:
        raise RuntimeError("world size %d != WORLD_SIZE %d" % (dist.get_world_size(), WORLD_SIZE))

    # The first collective sets up the communicators (ncclCommInitRank on GPUs).
    stage("first all-reduce")
    probe = torch.ones(1, device=device)
    dist.all_reduce(probe)
    if int(probe.item()) != WORLD_SIZE:
        raise RuntimeError("all-reduce of ones gave %r, expected %d" % (probe.item(), WORLD_SIZE))

    def barrier():
        # NCCL wants to be told the device; gloo refuses device_ids.
        if args.backend == "nccl":
            dist.barrier(device_ids=[LOCAL_RANK])
        else:
            dist.barrier()

    spec = MODELS[args.model]
    samples, tokens = BATCH[args.device][args.model]
    torch.manual_seed(1234)
    model = build_model(torch, spec["width"], spec["blocks"]).to(device)
    params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator(device=device)
    gen.manual_seed(1000 + RANK)
    x = torch.randn(samples, tokens, spec["width"], device=device, generator=gen)
    y = torch.randn(samples, tokens, spec["width"], device=device, generator=gen)

    def autocast():
        if bf16:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return torch.autocast(device_type=args.device, enabled=False)

    def train_step(net, opt, clock, step_opt=True):
        start = clock.now()
        with autocast():
            out = net(x)
        loss = (out.float() - y).pow(2).mean()
        loss.backward()
        after_bwd = clock.now()
        if step_opt:
            opt.step()
        opt.zero_grad(set_to_none=True)
        clock.marks.append((start, after_bwd, clock.now()))

    def timed_loop(net, opt, steps, step_opt=True):
        clock = StepClock(torch, cuda)
        clock.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            train_step(net, opt, clock, step_opt)
        clock.sync()
        wall = time.perf_counter() - t0
        step_ms, fb_ms = clock.steps_ms()
        return wall, step_ms, fb_ms

    if RANK == 0:
        emit(
            "setup",
            torch_version=torch.__version__,
            backend=args.backend,
            device=args.device,
            world_size=WORLD_SIZE,
            model=args.model,
            parameters=params,
            samples_per_rank=samples,
            tokens_per_sample=tokens,
            precision="bf16 autocast" if bf16 else ("fp32 (no bf16)" if cuda else "fp32"),
            warmup_steps=args.warmup,
            timed_steps=args.steps,
            no_sync_steps=args.no_sync_steps,
        )

    # World size 1: rank 0 trains a plain copy of the model alone while the
    # other ranks wait, so its throughput is what one device does by itself.
    if RANK == 0:
        stage("world size 1: warm-up")
        single = build_model(torch, spec["width"], spec["blocks"]).to(device)
        single.load_state_dict(model.state_dict())
        opt1 = torch.optim.SGD(single.parameters(), lr=1e-3)
        timed_loop(single, opt1, args.warmup)
        stage("world size 1: timed steps")
        wall, step_ms, _ = timed_loop(single, opt1, args.steps)
        emit(
            "single",
            samples_per_s=samples * args.steps / wall,
            step_p50_ms=percentile(step_ms, 0.5),
            step_p95_ms=percentile(step_ms, 0.95),
        )
        del single, opt1
        if cuda:
            torch.cuda.empty_cache()
    else:
        stage("waiting for the world-size-1 run")
    barrier()

    # World size N: the same model under DDP (default 25 MB buckets).
    stage("DDP setup")
    ddp = DDP(model, device_ids=[LOCAL_RANK] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

    stage("world size %d: warm-up" % WORLD_SIZE)
    if test_hook("FAIL"):
        raise RuntimeError("gpucheck test hook: rank %d fails on purpose" % RANK)
    if test_hook("HANG"):
        while True:
            time.sleep(3600)
    timed_loop(ddp, opt, args.warmup)

    stage("world size %d: timed steps" % WORLD_SIZE)
    wall, step_ms, fb_sync_ms = timed_loop(ddp, opt, args.steps)

    # The same forward/backward without the gradient all-reduce: the
    # difference is the communication the backward pass could not hide.
    stage("world size %d: no_sync steps" % WORLD_SIZE)
    with ddp.no_sync():
        _, _, fb_local_ms = timed_loop(ddp, opt, args.no_sync_steps, step_opt=False)

    if test_hook("DIVERGE"):
        with torch.no_grad():
            next(model.parameters()).view(-1)[0] += 1.0

    stage("verify parameters")
    param_sum, param_hash = fingerprint(torch, model)
    mine = {
        "rank": RANK,
        "local_rank": LOCAL_RANK,
        "device_name": device_name,
        "device_uuid": device_uuid,
        "device_index": LOCAL_RANK if cuda else None,
        "wall_s": wall,
        "step_p50_ms": percentile(step_ms, 0.5),
        "step_p95_ms": percentile(step_ms, 0.95),
        "fwd_bwd_sync_p50_ms": percentile(fb_sync_ms, 0.5),
        "fwd_bwd_local_p50_ms": percentile(fb_local_ms, 0.5),
        "param_sum": param_sum,
        "param_hash": param_hash,
    }
    everyone = [None] * WORLD_SIZE
    dist.all_gather_object(everyone, mine)
    if RANK == 0:
        for r in everyone:
            emit("rank", **r)
        slowest = max(r["wall_s"] for r in everyone)
        emit(
            "multi",
            world_size=WORLD_SIZE,
            samples_per_s=WORLD_SIZE * samples * args.steps / slowest,
        )
        emit("done")
    stage("finished")
    barrier()
    dist.destroy_process_group()
    return 0


def fingerprint(torch, model):
    """A float64 sum of every parameter and an order-sensitive 64-bit hash of
    their exact bits (sum of bits x odd weights, wrapping), computed on the
    device. Two ranks agree on both only if their parameters are identical."""
    total = torch.zeros((), dtype=torch.float64, device=next(model.parameters()).device)
    digest = torch.zeros((), dtype=torch.int64, device=total.device)
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}
    with torch.no_grad():
        for p in model.parameters():
            flat = p.detach().reshape(-1)
            total += flat.double().sum()
            bits = flat.view(as_int[flat.element_size()]).to(torch.int64)
            weights = torch.arange(flat.numel(), dtype=torch.int64, device=flat.device) * 2 + 1
            digest = digest * 1000003 + (bits * weights).sum()
    return float(total.item()), "%016x" % (int(digest.item()) & 0xFFFFFFFFFFFFFFFF)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--backend", choices=["nccl", "gloo"], required=True)
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--no-sync-steps", type=int, required=True)
    parser.add_argument("--pg-timeout-s", type=float, required=True)
    args = parser.parse_args()
    try:
        code = run(args)
    except BaseException as e:  # noqa: BLE001 - report every way a rank can die
        if isinstance(e, SystemExit) and not e.code:
            raise
        emit(
            "error",
            error=type(e).__name__,
            message=str(e)[:800],
            traceback=traceback.format_exc()[-1500:],
        )
        raise
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()

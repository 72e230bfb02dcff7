"""Writes a job's worth of Flight Recorder dumps for the job benchmark.

    python scripts/lib/fr_dumps.py OUTDIR RANKS ENTRIES [pickle|json] [CULPRIT [LATE_RANK LATE_MS]]

One file per rank (OUTDIR/rank_<r>, or rank_<r>.json), each holding ENTRIES
all-reduces of the default group in the layout torch 2.15 writes (format
2.10): every rank completed them, except that rank CULPRIT (default: the
last rank) never enqueued the last one, which the others wait in. With
LATE_RANK, that rank enqueues every collective LATE_MS milliseconds after
the others (a straggler).

Each entry carries every field torch 2.15's recorder writes (record and
sequence ids, the group, sizes and dtypes of its tensors, its state and
timestamps, thread id and name, and its Python stack: 5 to 30 frames of
name, filename and line, from a training step's call paths). The pickles
are written with Python's pickle at protocol 2 from plain dicts, lists,
strings and numbers, the same opcodes torch's C++ pickler writes for a
dump: strings are shared (a memo reference where one repeats), containers
are new for each entry.
"""

import json
import multiprocessing
import os
import pickle
import sys

SITE = "/opt/venv/lib/python3.11/site-packages"
# The frames a training step's collectives come from, innermost first: the
# c10d call, then DDP's or FSDP's hooks and the module stack, then the
# training script's loop.
C10D = [
    ("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 2806),
    ("wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 83),
]
HOOKS = [
    ("allreduce_hook", f"{SITE}/torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py", 55),
    ("_run_ddp_forward", f"{SITE}/torch/nn/parallel/distributed.py", 1511),
    ("forward", f"{SITE}/torch/nn/parallel/distributed.py", 1657),
    ("_reduce_grad", f"{SITE}/torch/distributed/fsdp/_runtime_utils.py", 1184),
    ("_post_backward_hook", f"{SITE}/torch/distributed/fsdp/_runtime_utils.py", 743),
    ("backward", f"{SITE}/torch/autograd/__init__.py", 347),
    ("backward", f"{SITE}/torch/_tensor.py", 648),
    ("_engine_run_backward", f"{SITE}/torch/autograd/graph.py", 823),
]
MODULES = [
    ("_call_impl", f"{SITE}/torch/nn/modules/module.py", 1762),
    ("_wrapped_call_impl", f"{SITE}/torch/nn/modules/module.py", 1751),
    ("forward", "/workspace/megatron/core/transformer/transformer_block.py", 549),
    ("forward", "/workspace/megatron/core/transformer/transformer_layer.py", 303),
    ("forward", "/workspace/megatron/core/transformer/attention.py", 287),
    ("forward", "/workspace/megatron/core/transformer/mlp.py", 118),
    ("forward", "/workspace/megatron/core/tensor_parallel/layers.py", 732),
    ("linear_with_grad_accumulation_and_async_allreduce",
     "/workspace/megatron/core/tensor_parallel/layers.py", 620),
    ("forward", "/workspace/megatron/core/models/gpt/gpt_model.py", 244),
    ("checkpoint", f"{SITE}/torch/utils/checkpoint.py", 496),
]
SCRIPT = [
    ("forward_backward_no_pipelining", "/workspace/megatron/core/pipeline_parallel/schedules.py", 478),
    ("train_step", "/workspace/megatron/training/training.py", 1157),
    ("train", "/workspace/megatron/training/training.py", 1453),
    ("pretrain", "/workspace/megatron/training/training.py", 381),
    ("main", "/workspace/pretrain_gpt.py", 301),
    ("<module>", "/workspace/pretrain_gpt.py", 312),
]
# Tensor shapes of the gradient buckets, as (shape, dtype).
BUCKETS = [([25 * 1024 * 1024], "BFloat16"), ([4096, 4096], "BFloat16"),
           ([1024, 1024], "Float"), ([8, 1024, 4096], "BFloat16"), ([50304, 4096], "Float")]


def stack(i):
    """The stack of entry `i`: between 5 and 30 frames."""
    depth = 5 + (i * 7919) % 26
    middle = HOOKS + MODULES
    picked = C10D + [middle[(i + k) % len(middle)] for k in range(max(0, depth - 2 - len(SCRIPT)))]
    picked += SCRIPT
    # The c10d call innermost, the script's loop outermost.
    return picked[:2] + picked[len(picked) - (depth - 2):]


def frames(i):
    # New dicts and lists for each entry, strings shared: as torch writes.
    return [{"name": n, "filename": f, "line": line} for n, f, line in stack(i)]


def dump(rank, ranks, entries, culprit=None, late=(None, 0)):
    last = ranks - 1 if culprit is None else culprit
    n = entries - 1 if rank == last else entries
    late_ns = int(late[1] * 1_000_000) if rank == late[0] else 0
    base = 1_796_000_000_000_000_000
    thread = str(139_910_734_502_784 + rank)
    out = []
    for i in range(n):
        seq = i + 1
        waiting = seq == entries
        shape, dtype = BUCKETS[i % len(BUCKETS)]
        created = base + seq * 50_000_000 + rank * 1_000 + late_ns
        out.append({
            "record_id": i,
            "pg_id": 0,
            "process_group": ("0", "default_pg"),
            "collective_seq_id": seq,
            "p2p_seq_id": 0,
            "op_id": seq,
            "profiling_name": "nccl:all_reduce",
            "time_created_ns": created,
            "duration_ms": None if waiting else 1.5 + (i % 13) * 0.25,
            "input_sizes": [list(shape)],
            "input_dtypes": [dtype],
            "output_sizes": [list(shape)],
            "output_dtypes": [dtype],
            "state": "started" if waiting else "completed",
            "time_discovered_started_ns": created + 10_000,
            "time_discovered_completed_ns": None if waiting else created + 1_500_000,
            "retired": not waiting,
            "timeout_ms": 600_000,
            "is_p2p": False,
            "thread_id": thread,
            "thread_name": "pt_autograd_0" if i % 2 else "python",
            "frames": frames(i),
        })
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}},
        "pg_status": {"0": {"last_enqueued_collective": n, "last_started_collective": n,
                            "last_completed_collective": min(n, entries - 1)}},
        "comm_lib_version": "2.27.3",
        "nccl_comm_state": {},
        "entries": out,
    }


def write(job):
    outdir, r, ranks, entries, fmt, culprit, late = job
    d = dump(r, ranks, entries, culprit, late)
    if fmt == "json":
        with open(os.path.join(outdir, f"rank_{r}.json"), "w") as f:
            f.write(json.dumps(d))
    else:
        with open(os.path.join(outdir, f"rank_{r}"), "wb") as f:
            pickle.dump(d, f, protocol=2)


def main():
    outdir, ranks, entries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fmt = sys.argv[4] if len(sys.argv) > 4 else "pickle"
    culprit = int(sys.argv[5]) if len(sys.argv) > 5 else None
    late = (int(sys.argv[6]), float(sys.argv[7])) if len(sys.argv) > 7 else (None, 0)
    os.makedirs(outdir, exist_ok=True)
    jobs = [(outdir, r, ranks, entries, fmt, culprit, late) for r in range(ranks)]
    if ranks * entries < 100_000:
        for j in jobs:
            write(j)
        return
    with multiprocessing.Pool(min(4, os.cpu_count() or 1)) as pool:
        for _ in pool.imap_unordered(write, jobs, chunksize=4):
            pass


if __name__ == "__main__":
    main()

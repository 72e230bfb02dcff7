"""Writes a job's worth of Flight Recorder dumps for the job benchmark.

    python scripts/lib/fr_dumps.py OUTDIR RANKS ENTRIES [pickle|json] [CULPRIT [LATE_RANK LATE_MS]]

One file per rank (OUTDIR/rank_<r>, or rank_<r>.json), each holding ENTRIES
all-reduces of the default group in the layout torch 2.15 writes (format
2.10): every rank completed them, except that rank CULPRIT (default: the
last rank) never enqueued the last one, which the others wait in. With
LATE_RANK, that rank enqueues every collective LATE_MS milliseconds after
the others (a straggler). The pickles are written with
Python's pickle at protocol 2 from plain dicts, lists, strings and numbers,
the same opcodes torch's C++ pickler writes for a dump.
"""

import json
import os
import pickle
import sys


def dump(rank, ranks, entries, culprit=None, late=(None, 0)):
    last = ranks - 1 if culprit is None else culprit
    n = entries - 1 if rank == last else entries
    late_ns = int(late[1] * 1_000_000) if rank == late[0] else 0
    base = 1_796_000_000_000_000_000
    out = []
    for i in range(n):
        seq = i + 1
        waiting = seq == entries
        out.append({
            "record_id": i,
            "pg_id": 0,
            "process_group": ["0", "default_pg"],
            "collective_seq_id": seq,
            "p2p_seq_id": 0,
            "op_id": seq,
            "profiling_name": "nccl:all_reduce",
            "time_created_ns": base + seq * 50_000_000 + rank * 1_000 + late_ns,
            "duration_ms": None if waiting else 1.5,
            "input_sizes": [[1024, 1024]],
            "input_dtypes": ["Float"],
            "output_sizes": [[1024, 1024]],
            "output_dtypes": ["Float"],
            "state": "started" if waiting else "completed",
            "time_discovered_started_ns": base + seq * 50_000_000 + 10_000,
            "time_discovered_completed_ns": None if waiting else base + seq * 50_000_000 + 1_500_000,
            "retired": not waiting,
            "timeout_ms": 600_000,
            "is_p2p": False,
            "frames": [],
        })
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}},
        "pg_status": {"0": {"last_enqueued_collective": n, "last_started_collective": n,
                            "last_completed_collective": min(n, entries - 1)}},
        "entries": out,
    }


def main():
    outdir, ranks, entries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fmt = sys.argv[4] if len(sys.argv) > 4 else "pickle"
    culprit = int(sys.argv[5]) if len(sys.argv) > 5 else None
    late = (int(sys.argv[6]), float(sys.argv[7])) if len(sys.argv) > 7 else (None, 0)
    os.makedirs(outdir, exist_ok=True)
    for r in range(ranks):
        d = dump(r, ranks, entries, culprit, late)
        if fmt == "json":
            with open(os.path.join(outdir, f"rank_{r}.json"), "w") as f:
                json.dump(d, f)
        else:
            with open(os.path.join(outdir, f"rank_{r}"), "wb") as f:
                pickle.dump(d, f, protocol=2)


if __name__ == "__main__":
    main()

"""One rank of the NCCL job scripts/gpu-smoke.sh looks at with `gpucheck job`.

Started per rank with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set, and TORCH_WORKER_SERVER_SOCKET (its worker server, for its
Flight Recorder and stack). CASE=healthy all-reduces on its GPU forever;
CASE=skip has rank FAULT_RANK sleep at step 5 instead of calling all_reduce
#6 (the others hang in it). Each rank ends itself after JOB_LIMIT seconds and
dies with its parent.
"""

import os
import signal
import time

signal.alarm(int(os.environ.get("JOB_LIMIT", "120")))
try:
    import ctypes

    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except OSError:
    pass

import torch
import torch.distributed as dist
from torch.distributed.elastic.control_plane import worker_main

RANK = int(os.environ["RANK"])
FAULT = int(os.environ.get("FAULT_RANK", "-1"))


def train():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    t = torch.ones(1 << 20, device="cuda")
    for step in range(1_000_000):
        if os.environ.get("CASE") == "skip" and RANK == FAULT and step == 5:
            time.sleep(3600)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        time.sleep(0.05)


with worker_main():
    train()

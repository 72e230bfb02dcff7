"""Time what node 0's rendezvous payload does each period of a job watched
across nodes: check and read NODES summaries of SIZE bytes from
torch.distributed's TCPStore on 127.0.0.1 (one check and one get a node,
as the payload's Link.verified does). Prints the time per period."""
import datetime
import sys
import time

from torch.distributed import TCPStore

nodes, size, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
client = TCPStore("127.0.0.1", store.port, None, False, datetime.timedelta(seconds=30))
body = "x" * size
for n in range(nodes):
    store.set("gpucheck/run/watch/%d" % n, body)
for r in range(rounds):
    t = time.monotonic()
    for n in range(nodes):
        key = "gpucheck/run/watch/%d" % n
        if client.check([key]):
            client.get(key)
    print("store: %d summaries of %d bytes checked and read in %.0f ms"
          % (nodes, size, (time.monotonic() - t) * 1000))

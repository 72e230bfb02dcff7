#!/usr/bin/env bash
# Benchmark of node 0's merge in a job watched across nodes (`gpucheck job
# --watch --nnodes N`): NODES generated node summaries of RANKS ranks each
# (default 1,000 x 8), as each node writes them into the store, read,
# merged and judged for ROUNDS periods; prints the bytes per rank, each
# period's time and the peak RSS. A benchmark, not a test.
#   bash scripts/bench-watch-merge.sh [NODES] [RANKS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release --locked --quiet -p gpucheck-checks --example bench_watch_merge -- \
  "${1:-1000}" "${2:-8}" "${3:-5}"
# The store side: node 0's payload reads each node's summary from the
# TCPStore every period (the test venv's torch).
bash scripts/setup-venv.sh >/dev/null
.venv/bin/python scripts/lib/store_read.py "${1:-1000}" "$((${2:-8} * 1050))" 3

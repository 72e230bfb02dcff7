#!/usr/bin/env bash
# Benchmark of `gpucheck job --traces` against PyTorch's own analyzer
# (torchfrtrace, from the test venv's torch) on the same generated dumps:
# RANKS ranks x ENTRIES entries (default 1024 x 2000, the recorder's default
# buffer), one rank that never joined the last all-reduce, entries with
# every field torch 2.15 writes and 5 to 30 stack frames each. Prints wall
# time and peak RSS of each, with CPython's bare pickle.load and json.load
# of the same files (the floor of any Python tool: no judging at all) and
# gpucheck's time as a ratio of theirs; a benchmark, not a test.
#   bash scripts/bench-job.sh [RANKS] [ENTRIES]
# BENCH_DUMPS=DIR reuses dumps written before (DIR/pickle, DIR/json), and
# keeps them; BENCH_NO_TORCHFRTRACE=1 leaves torchfrtrace out (minutes at
# 1,024 ranks). Files are read once before timing (page cache warm).
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS="${1:-1024}"
ENTRIES="${2:-2000}"
bash scripts/setup-venv.sh
cargo build --release --locked --quiet
PY=.venv/bin/python
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -n "${BENCH_DUMPS:-}" ] && [ -d "$BENCH_DUMPS/pickle" ]; then
  # Dumps written by an earlier run (BENCH_DUMPS/pickle and BENCH_DUMPS/json).
  rm -rf "$work"
  work="$BENCH_DUMPS"
  trap - EXIT
else
  if [ -n "${BENCH_DUMPS:-}" ]; then
    rm -rf "$work"
    work="$BENCH_DUMPS"
    trap - EXIT
  fi
  echo "bench-job: writing $RANKS ranks x $ENTRIES entries (pickle and JSON) under $work" >&2
  "$PY" scripts/lib/fr_dumps.py "$work/pickle" "$RANKS" "$ENTRIES" pickle
  "$PY" scripts/lib/fr_dumps.py "$work/json" "$RANKS" "$ENTRIES" json
fi
du -sh "$work/pickle" "$work/json" >&2
cat "$work"/pickle/* "$work"/json/* >/dev/null
out="$(mktemp)"
trap 'rm -f "$out"; [ -n "${BENCH_DUMPS:-}" ] || rm -rf "$work"' EXIT
# The wall seconds of the last measure, for the ratios.
last_wall=0
measure() {
  local label="$1"; shift
  local log
  log="$(mktemp)"
  /usr/bin/time -f '%e %M' -o "$log" "$@" >"$out" 2>&1 || true
  # time(1) puts "Command exited with non-zero status N" first: exit 1 is
  # the verdict on these dumps, not a failure of the command.
  read -r last_wall rss_kib < <(tail -n 1 "$log")
  rm -f "$log"
  printf '| %s | %s s | %s MiB |\n' "$label" "$last_wall" "$((rss_kib / 1024))"
}
# CPython loading each file and dropping it: what any Python reader pays
# before it judges anything.
LOAD='import sys, pickle, json
load = pickle.load if sys.argv[1] == "pickle" else json.load
for f in sys.argv[2:]:
    with open(f, "rb") as fh:
        load(fh)'
# What job.hang says, and the ranks it names.
named() {
  "$PY" -c 'import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    if r["id"] == "job.hang":
        print(r.get("ranks"), "-", r["summary"][:160])' "$out" 2>/dev/null || echo "(no report)"
}
echo "| command | wall | peak RSS |"
echo "|---|---|---|"
measure "gpucheck job --traces (pickle)" target/release/gpucheck job --traces "$work/pickle" --json -
gp_pickle="$last_wall" named_pickle="$(named)"
measure "gpucheck job --traces (JSON)" target/release/gpucheck job --traces "$work/json" --json -
gp_json="$last_wall" named_json="$(named)"
measure "CPython pickle.load of every file" "$PY" -c "$LOAD" pickle "$work"/pickle/*
py_pickle="$last_wall"
measure "CPython json.load of every file" "$PY" -c "$LOAD" json "$work"/json/*
py_json="$last_wall"
if [ -z "${BENCH_NO_TORCHFRTRACE:-}" ]; then
  measure "torchfrtrace (pickle)" .venv/bin/torchfrtrace "$work/pickle" -p rank_
  tft="$last_wall"
  awk -v a="$tft" -v b="$gp_pickle" 'BEGIN { printf "torchfrtrace / gpucheck (pickle): %.1fx\n", a / b }'
fi
awk -v g="$gp_pickle" -v p="$py_pickle" 'BEGIN { printf "gpucheck / CPython pickle.load: %.2f\n", g / p }'
awk -v g="$gp_json" -v p="$py_json" 'BEGIN { printf "gpucheck / CPython json.load: %.2f\n", g / p }'
echo "named (pickle): $named_pickle"
echo "named (JSON): $named_json"
echo "cores: $(nproc)"
# torchfrtrace's -j reads JSON only from files named <prefix><rank>, with no
# .json, and then needs tabulate: it is timed on the pickles alone.

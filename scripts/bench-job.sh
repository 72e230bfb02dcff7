#!/usr/bin/env bash
# Benchmark of `gpucheck job --traces` against PyTorch's own analyzer
# (torchfrtrace, from the test venv's torch) on the same generated dumps:
# RANKS ranks x ENTRIES entries (default 1024 x 2000, the recorder's default
# buffer), one rank that never joined the last all-reduce. Prints wall time
# and peak RSS of each; a benchmark, not a test.
#   bash scripts/bench-job.sh [RANKS] [ENTRIES]
# BENCH_DUMPS=DIR reuses dumps written before (DIR/pickle, DIR/json).
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS="${1:-1024}"
ENTRIES="${2:-2000}"
bash scripts/setup-venv.sh
cargo build --release --locked --quiet
PY=.venv/bin/python
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "bench-job: writing $RANKS ranks x $ENTRIES entries (pickle and JSON) under $work" >&2
if [ -n "${BENCH_DUMPS:-}" ]; then
  # Dumps written by an earlier run (BENCH_DUMPS/pickle and BENCH_DUMPS/json).
  work="$BENCH_DUMPS"
  trap - EXIT
else
  "$PY" scripts/lib/fr_dumps.py "$work/pickle" "$RANKS" "$ENTRIES" pickle
  "$PY" scripts/lib/fr_dumps.py "$work/json" "$RANKS" "$ENTRIES" json
fi
du -sh "$work/pickle" "$work/json" >&2
measure() {
  local label="$1"; shift
  local log="$work/time.log"
  /usr/bin/time -f '%e %M' -o "$log" "$@" >"$work/out.txt" 2>&1 || true
  # time(1) puts "Command exited with non-zero status N" first: exit 1 is
  # the verdict on these dumps, not a failure of the command.
  read -r wall rss_kib < <(tail -n 1 "$log")
  printf '| %s | %s s | %s MiB |\n' "$label" "$wall" "$((rss_kib / 1024))"
}
echo "| command | wall | peak RSS |"
echo "|---|---|---|"
measure "gpucheck job --traces (pickle)" target/release/gpucheck job --traces "$work/pickle" --json -
grep -o '"ranks": *\[[^]]*\]' "$work/out.txt" | head -1 >&2 || true
measure "gpucheck job --traces (JSON)" target/release/gpucheck job --traces "$work/json" --json -
measure "torchfrtrace (pickle)" .venv/bin/torchfrtrace "$work/pickle" -p rank_
# torchfrtrace's -j reads JSON only from files named <prefix><rank>, with no
# .json, and then needs tabulate: it is timed on the pickles alone.

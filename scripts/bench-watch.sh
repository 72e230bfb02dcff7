#!/usr/bin/env bash
# Benchmark of `gpucheck --watch` on a real DDP job (gloo on CPU, 3 ranks of
# tests/fixtures/watch_job/train.py under torchrun on 127.0.0.1):
#   1. the job's step time without a watch and with `gpucheck job --watch`
#      attached (default settings), in the same run, ROUNDS times each;
#   2. the watcher's own CPU (its process and the py-spy reads it started)
#      as a share of one core over the job's run, and its peak RSS;
#   3. the time from a rank's hang (it sleeps instead of its step) to the
#      watch's confirmed report, at --hang-after 10 and at the default.
# A benchmark, not a test: it prints a Markdown table.
#   bash scripts/bench-watch.sh [STEPS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-400}"
ROUNDS="${2:-3}"
bash scripts/setup-venv.sh >&2
GPUCHECK="${GPUCHECK:-target/release/gpucheck}"
[ -x "$GPUCHECK" ] || cargo build --release --locked --quiet
PY="$PWD/.venv/bin/python"
TRAIN="$PWD/tests/fixtures/watch_job/train.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"; kill -9 -- -$$ 2>/dev/null || true' EXIT
port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
torchrun() { setsid "$PY" -m torch.distributed.run --nproc-per-node 3 --master-addr 127.0.0.1 --master-port "$(port)" "$TRAIN"; }

# 1 and 2: step time without and with the watch, alternating.
plain=() watched=() cpu=() rss=()
for round in $(seq "$ROUNDS"); do
  STEPS="$STEPS" STEP_LOG="$work/plain" torchrun >/dev/null 2>&1
  plain+=("$(cat "$work/plain")")
  STEPS="$STEPS" STEP_LOG="$work/watched" torchrun >/dev/null 2>&1 &
  job=$!
  sleep 1
  /usr/bin/time -f '%U %S %e %M' -o "$work/time" "$GPUCHECK" job --watch --pid "$job" --quiet || true
  wait "$job" || true
  watched+=("$(cat "$work/watched")")
  read -r user sys wall rss_kib < "$work/time"
  cpu+=("$("$PY" -c "print(f'{100*($user+$sys)/$wall:.2f}')")")
  rss+=("$((rss_kib / 1024))")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p=$(median "${plain[@]}") w=$(median "${watched[@]}")
echo "| what | figure |"
echo "|---|---|"
echo "| step time without the watch (median of $ROUNDS runs of $STEPS steps) | $("$PY" -c "print(f'{1000*$p:.1f} ms')") |"
echo "| step time under \`gpucheck job --watch\` | $("$PY" -c "print(f'{1000*$w:.1f} ms ({100*($w/$p-1):+.1f} %)')") |"
echo "| every run's step time, without / with the watch | ${plain[*]} / ${watched[*]} s |"
echo "| the watcher's CPU (with its py-spy reads), share of one core | $(median "${cpu[@]}") % (runs: ${cpu[*]}) |"
echo "| the watcher's peak RSS | $(median "${rss[@]}") MiB |"

# 3: time from the hang to the confirmed report.
hang() {
  local label="$1"; shift
  rm -f "$work/fault"
  local start; start=$("$PY" -c 'import time; print(time.time())')
  CASE=sleep FAULT_RANK=1 AT_STEP=60 FAULT_FILE="$work/fault" JOB_LIMIT=400 \
    "$GPUCHECK" exec --only host.shm --on-fail warn --watch "$@" --on-hang stop -- \
    "$PY" -m torch.distributed.run --nproc-per-node 3 --master-addr 127.0.0.1 \
    --master-port "$(port)" "$TRAIN" >/dev/null 2>"$work/err" || true
  local at; at=$(grep -m1 'hang confirmed' "$work/err" | sed -E 's/.*\[ *([0-9.]+) s\].*/\1/')
  echo "| fault to the confirmed report, $label | $("$PY" -c "print(f'{$start+$at-float(open(\"$work/fault\").read()):.1f} s')") |"
}
hang "--hang-after 10" --hang-after 10
hang "default (--hang-after from 60 s)"
echo "(machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(date -u +%Y-%m-%d))"

#!/usr/bin/env bash
# The figures README.md quotes, measured on this machine: what the machine
# is, the test virtual environment's size, how long the default (standard)
# and quick profiles take, and (with MEASURE_TESTS=1) how long a fresh
# clone's `bash scripts/test.sh` takes, its build separately. README's
# figures are copied from this script's output, with the machine beside them.
#
#   bash scripts/measure-readme.sh            (RUNS=5 runs of each profile)
#   MEASURE_TESTS=1 bash scripts/measure-readme.sh
#                                             (adds the test command: a fresh clone,
#                                             its own .venv and target/; 20 min or more)
#
# Env: RUNS (default 5), GPUCHECK_BIN (default target/release/gpucheck, rebuilt
# first when stale), PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}

say() { printf '%-34s %s\n' "$1" "$2"; }

# The machine.
cores=$(nproc)
mem=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
if command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null) && [ -n "$gpus" ]; then
    gpu="$(printf '%s\n' "$gpus" | wc -l) NVIDIA GPU(s): $(printf '%s\n' "$gpus" | head -n 1 | sed 's/ (UUID.*//')"
else
    gpu="no NVIDIA GPU"
fi
os=$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null || true)
say "machine" "$cores cores, $mem memory, $gpu (${os:-unknown OS}), $(date -u +%Y-%m-%d)"

# The test virtual environment.
if [ -d .venv ]; then
    bytes=$(du -sb .venv | cut -f1)
    say "test venv (.venv)" "$(awk -v b="$bytes" 'BEGIN {printf "%.1f GB (%.1f GiB)", b / 1e9, b / 1073741824}')"
else
    say "test venv (.venv)" "absent (bash scripts/setup-venv.sh creates it)"
fi

# The profiles, wall time of whole runs of the release binary.
BIN=${GPUCHECK_BIN:-}
if [ -z "$BIN" ]; then
    cargo build --release --locked --quiet >&2
    BIN=target/release/gpucheck
fi
PY=${PYTHON:-}
if [ -z "$PY" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
python3 - "$RUNS" "$BIN" "${PY:-}" <<'PYEOF'
import statistics, subprocess, sys, time
runs, binary, py = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for profile in ["standard", "quick"]:
    argv = [binary, "--profile", profile, "--quiet"] + (["--python", py] if py else [])
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
    print(f"{'gpucheck --profile ' + profile:34} median {statistics.median(walls):.2f} s, "
          f"min {min(walls):.2f} s, max {max(walls):.2f} s ({runs} runs)")
PYEOF

# The test command, in a fresh clone of HEAD (nothing built, no .venv).
if [ "${MEASURE_TESTS:-0}" = 1 ]; then
    clone=$(mktemp -d)
    trap 'rm -rf "$clone"' EXIT
    git clone --quiet . "$clone/gpucheck"
    start=$(date +%s)
    (cd "$clone/gpucheck" && bash scripts/setup-venv.sh >/dev/null 2>&1)
    venv_done=$(date +%s)
    (cd "$clone/gpucheck" && cargo test --workspace --locked --no-run --quiet >/dev/null 2>&1)
    built=$(date +%s)
    status=0
    (cd "$clone/gpucheck" && bash scripts/test.sh >/dev/null 2>&1) || status=$?
    end=$(date +%s)
    say "fresh clone: bash scripts/test.sh" "$(( (end - start + 30) / 60 )) min in all (exit $status): .venv $(( (venv_done - start + 30) / 60 )) min, build $(( (built - venv_done + 30) / 60 )) min, tests $(( (end - built + 30) / 60 )) min"
else
    say "fresh clone: bash scripts/test.sh" "not measured (MEASURE_TESTS=1 measures it: 20 min or more)"
fi

#!/usr/bin/env bash
# Benchmark, not a test: wall time and peak RSS of `gpucheck --profile quick`
# (the HEALTHCHECK profile) against `python -c "import torch;
# torch.cuda.is_available()"`, the usual first check people run.
#
#   bash scripts/bench.sh [RUNS]        (default 20 runs each)
#
# Env: GPUCHECK_BIN (default target/release/gpucheck, rebuilt first when stale),
# PYTHON (default .venv/bin/python, else python3), BENCH_ARGS (extra gpucheck
# arguments, e.g. "--nvml-lib target/fixtures/nvml/libnvidia-ml.so.1"),
# BENCH_PROFILE (default quick; `full` with the fake 8-GPU NVML and
# GPUCHECK_LOAD_DEVICE=cpu times the full profile's orchestration with the
# load checks' CPU stand-in: see README, Performance).
# Prints median and max wall time and the largest peak RSS for each command.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-20}"
BIN="${GPUCHECK_BIN:-}"
if [ -z "$BIN" ]; then
  # Always (a no-op when up to date): a stale binary would measure old code.
  cargo build --release --locked >&2
  BIN=target/release/gpucheck
fi
[ -x "$BIN" ] || { echo "bench.sh: $BIN is not an executable" >&2; exit 2; }
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
# The measuring itself is done by python3 (os.wait4 gives each run's peak RSS).
python3 - "$RUNS" "$BIN" "$PY" "${BENCH_ARGS:-}" "${BENCH_PROFILE:-quick}" <<'PYEOF'
import os, shlex, statistics, subprocess, sys, time
runs, binary, py, extra, profile = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]

def measure(argv, env=None):
    walls, rss = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        walls.append((time.perf_counter() - t0) * 1000)
        rss.append(usage.ru_maxrss / 1024)  # KiB -> MiB
    return statistics.median(walls), max(walls), max(rss)

rows = [(f"gpucheck --profile {profile} " + extra).strip(),
        [binary, "--profile", profile, "--quiet", "--python", py] + shlex.split(extra)]
res = [(rows[0], *measure(rows[1]))]
torch_cmd = [py, "-c", "import torch; torch.cuda.is_available()"]
if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
    res.append(("python -c 'import torch; torch.cuda.is_available()'", *measure(torch_cmd)))
else:
    print(f"(torch not importable with {py}: skipping the torch comparison)")
print(f"{'command':60} {'median ms':>10} {'max ms':>8} {'peak RSS MiB':>13}   ({runs} runs)")
for name, med, mx, rss in res:
    print(f"{name[:60]:60} {med:10.1f} {mx:8.1f} {rss:13.1f}")
PYEOF

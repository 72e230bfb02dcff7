#!/usr/bin/env bash
# gpu-smoke.sh — run gpucheck's full profile on a machine with NVIDIA GPUs and
# keep everything it said, for the record.
#
# Usage:
#   scripts/gpu-smoke.sh [BINARY [OUTDIR]]
#
#   BINARY  a prebuilt gpucheck (default: target/release/gpucheck next to this
#           script's repository, else the gpucheck in the newest portable
#           release archive dist/gpucheck-<version>-x86_64-unknown-linux-gnu.tar.gz,
#           unpacked into OUTDIR). A GPU host needs no Rust toolchain: copy the
#           release archive (scripts/release.sh builds it) over, not a binary
#           from `cargo build` on another machine, which may need a newer glibc
#           than the GPU host has.
#   OUTDIR  where the results go (default: $OUT when set, else ./gpu-smoke-out).
#
# Environment:
#   GPUCHECK_PYTHON  the Python that trains (torch checks, the DDP benchmark on
#                    NCCL); default: .venv/bin/python in the repository when it
#                    exists, else gpucheck's own choice ($VIRTUAL_ENV, $CONDA_PREFIX,
#                    python3 on PATH).
#   SMOKE_TIMEOUT    seconds for the gpucheck run itself (default 480).
#   SMOKE_BURN       how long the burn-in runs (default 2m; 90s, 10m, ...).
#   Extra gpucheck flags can follow after `--`:
#     scripts/gpu-smoke.sh target/release/gpucheck /tmp/out -- --min-busbw 400
#
# What it writes into OUTDIR:
#   table.txt      the table report (--verbose: metrics, per-GPU rows, the sweep)
#   cluster.txt, fleet.json  `gpucheck cluster --nnodes 1`: the rendezvous and
#                  the fleet checks through this machine's torch (its NCCL version)
#   report.json    the JSON report        report.xml   the JUnit report
#   machine.capture.json  the same run's probe answers, redacted (--capture
#                  --redact): `gpucheck --replay` judges it anywhere; commit
#                  it under results/ and add it to tests/replays/
#   burn.txt, burn.json  `gpucheck --profile burn --duration $SMOKE_BURN`
#                  (default 2m): gpu.burn's rounds per GPU
#   job.txt, job.json  `gpucheck job` on a live NCCL job (scripts/lib/smoke_job.py):
#                  with 2+ GPUs rank 1 skips all_reduce #6 and must be named;
#                  with one GPU, one rank steps on it (placement, NCCL RAS)
#   stderr.txt     gpucheck's stderr      nvidia-smi.txt, topo.txt  the machine
#   summary.txt    GPU model, driver, NCCL busbw per size and the algorithm
#                  NCCL chose (from its tuning log), the DDP benchmark's
#                  throughput and per-rank tables, every verdict
#
# Exit status: 0 when the run completed and no check reported `error`
# (gpucheck could not find out); 1 otherwise. `fail` verdicts are results
# about the machine, not failures of the smoke run; they are in summary.txt.
# Every step is bounded with `timeout` (at most 3 x 25 + 15 + 490 + 65 + 35 +
# 95 s with the defaults), so the script ends within 14 minutes.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"

extra=()
positional=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then
        shift
        extra=("$@")
        break
    fi
    positional+=("$1")
    shift
done

bin="${positional[0]:-$repo/target/release/gpucheck}"
outdir="${positional[1]:-${OUT:-$PWD/gpu-smoke-out}}"
run_timeout="${SMOKE_TIMEOUT:-480}"

mkdir -p "$outdir" || exit 1
if [ ! -x "$bin" ] && [ ${#positional[@]} -eq 0 ]; then
    # No local build: the portable release archive, when one is here.
    archive="$(ls -t "$repo"/dist/gpucheck-*-x86_64-unknown-linux-gnu.tar.gz 2>/dev/null | head -n1)"
    if [ -n "$archive" ] && mkdir -p "$outdir/release" &&
        tar -xzf "$archive" -C "$outdir/release"; then
        found="$(find "$outdir/release" -type f -name gpucheck -perm -u+x | head -n1)"
        [ -n "$found" ] && bin="$found"
    fi
fi
if [ ! -x "$bin" ]; then
    echo "gpu-smoke: no gpucheck binary at $bin: unpack the portable release archive" \
        "(dist/gpucheck-<version>-x86_64-unknown-linux-gnu.tar.gz, made by scripts/release.sh)" \
        "on this host and pass its gpucheck, or build here with: cargo build --release" >&2
    exit 1
fi

python_args=()
if [ -n "${GPUCHECK_PYTHON:-}" ]; then
    python_args=(--python "$GPUCHECK_PYTHON")
elif [ -x "$repo/.venv/bin/python" ]; then
    python_args=(--python "$repo/.venv/bin/python")
fi

step() { echo "gpu-smoke: $*" >&2; }

step "machine facts -> $outdir/nvidia-smi.txt, topo.txt"
timeout -k 5 20 nvidia-smi >"$outdir/nvidia-smi.txt" 2>&1 || true
timeout -k 5 20 nvidia-smi topo -m >"$outdir/topo.txt" 2>&1 || true
gpu_line="$(timeout -k 5 20 nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total \
    --format=csv,noheader 2>/dev/null || true)"
timeout -k 5 10 "$bin" --version >"$outdir/version.txt" 2>&1 || true

step "gpucheck --profile full (at most ${run_timeout} s) -> table.txt, report.json, report.xml, machine.capture.json"
timeout -k 10 "$run_timeout" "$bin" --profile full --verbose \
    --json "$outdir/report.json" --junit "$outdir/report.xml" \
    --capture "$outdir/machine.capture.json" --redact \
    ${python_args[@]+"${python_args[@]}"} ${extra[@]+"${extra[@]}"} \
    >"$outdir/table.txt" 2>"$outdir/stderr.txt"
rc=$?
cat "$outdir/table.txt"
case $rc in
    0 | 1) step "gpucheck exited with $rc" ;;
    124 | 137) step "gpucheck did not finish within ${run_timeout} s (exit $rc)" ;;
    *) step "gpucheck exited with $rc (usage error or crash); see $outdir/stderr.txt" ;;
esac

burn="${SMOKE_BURN:-2m}"
step "gpucheck --profile burn --duration $burn (at most 300 s) -> burn.txt, burn.json"
timeout -k 10 300 "$bin" --profile burn --duration "$burn" --only gpu.burn --verbose \
    --json "$outdir/burn.json" ${python_args[@]+"${python_args[@]}"} \
    >"$outdir/burn.txt" 2>&1
burn_rc=$?
step "gpucheck --profile burn exited with $burn_rc"

step "gpucheck cluster --nnodes 1 (at most 60 s) -> cluster.txt, fleet.json"
timeout -k 5 60 "$bin" cluster --nnodes 1 --node-rank 0 --master-addr 127.0.0.1 \
    --master-port "${SMOKE_CLUSTER_PORT:-29533}" --rdzv-timeout 30 --profile quick \
    --json "$outdir/fleet.json" ${python_args[@]+"${python_args[@]}"} \
    >"$outdir/cluster.txt" 2>&1
cluster_rc=$?
step "gpucheck cluster exited with $cluster_rc"

# gpucheck job on a live NCCL job under this machine's torch: with two GPUs
# or more, rank 1 sleeps instead of calling all_reduce #6 and gpucheck job
# must name it; with one GPU, one rank all-reduces on it and gpucheck job
# must find it on GPU 0 (NVML's process list) and ask NCCL's RAS once.
py="${GPUCHECK_PYTHON:-$repo/.venv/bin/python}"
ngpus="$(printf '%s\n' "$gpu_line" | grep -c . || true)"
job_case=healthy job_world=1
if [ "${ngpus:-0}" -ge 2 ]; then job_case=skip job_world=2; fi
jobdir="$(mktemp -d)"
step "gpucheck job on a live NCCL job ($job_case, $job_world ranks; at most 90 s) -> job.txt, job.json"
launch=""
for r in $(seq 0 $((job_world - 1))); do
    launch+="TORCH_WORKER_SERVER_SOCKET=$jobdir/rank$r.sock RANK=$r LOCAL_RANK=$r "
    launch+="WORLD_SIZE=$job_world MASTER_ADDR=127.0.0.1 MASTER_PORT=${SMOKE_JOB_PORT:-29544} "
    launch+="CASE=$job_case FAULT_RANK=1 JOB_LIMIT=100 '$py' '$here/lib/smoke_job.py' "
    launch+="2>'$jobdir/log$r' &"$'\n'
done
setsid sh -c "${launch}wait" &
job_pid=$!
sleep 30
timeout -k 5 60 "$bin" job --pid "$job_pid" --verbose --json "$outdir/job.json" \
    >"$outdir/job.txt" 2>&1
job_rc=$?
kill -KILL -- "-$job_pid" 2>/dev/null
wait "$job_pid" 2>/dev/null
cat "$jobdir"/log* >>"$outdir/job.txt" 2>/dev/null
rm -rf "$jobdir"
step "gpucheck job exited with $job_rc"

summary="$outdir/summary.txt"
{
    echo "gpucheck smoke run, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    echo "binary: $bin ($(head -n1 "$outdir/version.txt" 2>/dev/null))"
    echo "gpucheck exit code: $rc"
    echo "gpucheck --profile burn --duration $burn exit code: $burn_rc ($(grep -m1 'gpu.burn' "$outdir/burn.txt" 2>/dev/null | sed 's/^ *//'))"
    echo "gpucheck cluster --nnodes 1 exit code: $cluster_rc ($(tail -n1 "$outdir/cluster.txt" 2>/dev/null))"
    echo "gpucheck job on a live NCCL job ($job_case, $job_world ranks) exit code: $job_rc ($(grep -m1 -E 'PROBLEM FOUND|NO PROBLEM FOUND' "$outdir/job.txt" 2>/dev/null))"
    echo "GPUs (index, name, driver, bus id, memory):"
    if [ -n "$gpu_line" ]; then
        echo "$gpu_line" | sed 's/^/  /'
    else
        echo "  (nvidia-smi did not answer)"
    fi
} >"$summary"

errors=1
if [ -s "$outdir/report.json" ] && command -v python3 >/dev/null 2>&1; then
    timeout -k 5 30 python3 - "$outdir/report.json" >>"$summary" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
results = doc.get("results", [])
host = doc.get("host", {})
print("host: {} ({}, kernel {})".format(host.get("hostname", "?"), host.get("os", "?"),
                                        host.get("kernel", "?")))
measured = {"nccl.allreduce": "NCCL all-reduce", "nccl.nic_path": "NCCL all-reduce through the NICs",
            "cuda.copy_bandwidth": "Host-device copies", "ddp.benchmark": "DDP benchmark",
            "gpu.compute": "GEMM under load", "gpu.memory": "Device memory under load",
            "gpu.p2p_bandwidth": "GPU-to-GPU copies"}
for r in results:
    if r.get("id") in measured:
        facts = r.get("facts", {})
        print("{}: {} [{}]".format(measured[r["id"]], r.get("summary", ""), r.get("status")))
        if "nccl_path" in facts:
            print("  NCCL {} at {}; GPUs: {}".format(facts.get("nccl_version", "?"),
                                                    facts["nccl_path"], facts.get("gpus", "?")))
            metrics = {m.get("name"): m.get("value") for m in r.get("metrics", [])}
            print("  busbw {} GB/s; NCCL's algorithm: {}".format(
                metrics.get("busbw_gbps", "?"),
                facts.get("nccl_algorithm", "not recorded (NCCL_DEBUG set, or no tuning log)")))
        if "model" in facts:
            print("  torch {}, {} on {}, model {}".format(facts.get("torch_version", "?"),
                                                          facts.get("backend", "?"),
                                                          facts.get("device", "?"), facts["model"]))
        for t in r.get("tables", []):
            print("  " + t.get("title", ""))
            print("  " + " | ".join(t.get("header", [])))
            for row in t.get("rows", []):
                print("  " + " | ".join(str(c) for c in row))
print("verdicts:")
for r in results:
    print("  {:<6} {:<28} {}".format(r.get("status", "?"), r.get("id", "?"), r.get("summary", "")))
errors = [r["id"] for r in results if r.get("status") == "error"]
print("checks reporting error: {}".format(", ".join(errors) if errors else "none"))
sys.exit(3 if errors else 0)
PY
    case $? in
        0) errors=0 ;;
        3) errors=1 ;;
        *) echo "could not read report.json with python3; it is kept as is" >>"$summary" ;;
    esac
elif [ -s "$outdir/report.json" ]; then
    echo "python3 not found: the JSON report follows" >>"$summary"
    cat "$outdir/report.json" >>"$summary"
    if grep -q '"status": *"error"' "$outdir/report.json"; then errors=1; else errors=0; fi
else
    echo "no JSON report was written (gpucheck exit $rc); see stderr.txt" >>"$summary"
fi

echo
cat "$summary"
step "results in $outdir"
if [ "$errors" -ne 0 ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; }; then
    exit 1
fi
exit 0

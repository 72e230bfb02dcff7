#!/usr/bin/env bash
# Record a capture for tests/replays/ and the verdicts its replay must give.
#
#   scripts/record-replay.sh NAME "WHERE IT CAME FROM" [gpucheck run options]
#
# Runs `gpucheck capture --redact tests/replays/NAME.capture.json` with the
# options given (--profile, --nvml-lib with FAKE_NVML_SCENARIO set, ...),
# replays it with no fake library loaded, and writes the replay's verdicts
# as tests/replays/NAME.expected.json (with the source named, and the
# --skip given, which its replay repeats). Review the
# verdicts before committing them: the test holds every later gpucheck to
# them. GPUCHECK (default target/debug/gpucheck) names the binary.
set -euo pipefail
if [ $# -lt 2 ]; then
    sed -n '2,13p' "$0" >&2
    exit 2
fi
name=$1 source=$2
shift 2
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${GPUCHECK:-$root/target/debug/gpucheck}"
dir="$root/tests/replays"
profile=quick skip=
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    [ "${args[$i]}" = --profile ] && profile="${args[$((i + 1))]}"
    [ "${args[$i]}" = --skip ] && skip="${args[$((i + 1))]}"
done
"$bin" capture --redact "$dir/$name.capture.json" --quiet "$@" || true
env -u FAKE_NVML_SCENARIO "$bin" --replay "$dir/$name.capture.json" --profile "$profile" \
    ${skip:+--skip "$skip"} --json - 2>/dev/null |
    SOURCE="$source" PROFILE="$profile" SKIP="$skip" python3 -c '
import json, os, sys
doc = json.load(sys.stdin)
json.dump({"source": os.environ["SOURCE"], "profile": os.environ["PROFILE"],
           **({"skip": os.environ["SKIP"]} if os.environ["SKIP"] else {}),
           "exit_code": doc["exit_code"],
           "verdicts": {r["id"]: r["status"] for r in doc["results"]}},
          sys.stdout, indent=2)
print()' >"$dir/$name.expected.json"
echo "wrote $dir/$name.capture.json and $name.expected.json" >&2

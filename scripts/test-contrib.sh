#!/usr/bin/env bash
# Tests every file in contrib/ against the real gpucheck binary and the fake
# NVML (tests/fixtures/fake_nvml.c driven by tests/fixtures/nvml/*.scenario):
#   slurm/   the health check and prolog, with fake scontrol and sinfo on PATH
#            that record their arguments and keep the node's reason;
#   k8s/     the manifests validated against the Kubernetes schemas
#            (kubernetes-validate --strict, from PyPI), and the command lines
#            they hold run as written;
#   docker/  the Dockerfile's ENTRYPOINT and HEALTHCHECK commands run as written.
# This machine has no /dev/nvidia* nodes, so host.devices fails everywhere; the
# passing-node cases skip it through GPUCHECK_ARGS.
# Usage: scripts/test-contrib.sh [GPUCHECK_BINARY]  (default: cargo's debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [[ $# -gt 0 ]]; then
    BIN=$(readlink -f "$1")
else
    cargo build --locked --quiet
    BIN=$ROOT/target/debug/gpucheck
fi
NVML_DIR=$ROOT/target/fixtures/nvml
if [[ ! -e $NVML_DIR/libnvidia-ml.so.1 || tests/fixtures/fake_nvml.c -nt $NVML_DIR/libnvidia-ml.so.1 ]]; then
    mkdir -p "$NVML_DIR"
    "${CC:-cc}" -shared -fPIC -O1 -Wall -o "$NVML_DIR/.libnvidia-ml.so.1.$$" tests/fixtures/fake_nvml.c \
        -Wl,-soname,libnvidia-ml.so.1 -lpthread -ldl
    mv -f "$NVML_DIR/.libnvidia-ml.so.1.$$" "$NVML_DIR/libnvidia-ml.so.1"
fi
PY=$ROOT/.tools/venv/bin/python
if ! "$PY" -c 'import kubernetes_validate, yaml, jsonschema, prometheus_client' 2>/dev/null; then
    [[ -x $PY ]] || python3 -m venv .tools/venv
    .tools/venv/bin/pip install --quiet kubernetes-validate pyyaml jsonschema prometheus-client
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/bin" "$WORK/slurm"
ln -s "$BIN" "$WORK/bin/gpucheck"

# Fake SLURM: scontrol records each call (arguments joined by |) and keeps the
# node's reason in a file, as slurmctld would; sinfo -h -n NODE -o %E prints it.
cat >"$WORK/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
(IFS='|'; echo "$*") >>"$FAKE_SLURM/scontrol.log"
for arg; do
    case $arg in
    state=resume) echo none >"$FAKE_SLURM/reason" ;;
    reason=*) echo "${arg#reason=}" >"$FAKE_SLURM/reason" ;;
    esac
done
EOF
cat >"$WORK/bin/sinfo" <<'EOF'
#!/usr/bin/env bash
[[ "$*" == "-h -n $FAKE_NODE -o %E" ]] || { echo "sinfo: unexpected arguments: $*" >&2; exit 2; }
cat "$FAKE_SLURM/reason" 2>/dev/null || echo none
EOF
chmod +x "$WORK/bin/scontrol" "$WORK/bin/sinfo"

# shellcheck source=scripts/lib/harness.sh
source "$ROOT/scripts/lib/harness.sh"

# Run a command as a node would: a clean environment, gpucheck and the fake
# SLURM tools on PATH, the fake NVML as the system's libnvidia-ml.so.1.
# Usage: on_node SCENARIO [VAR=value ...] -- CMD...
on_node() {
    local scenario=$1
    shift
    local vars=()
    while [[ $1 != -- ]]; do
        vars+=("$1")
        shift
    done
    shift
    env -i PATH="$WORK/bin:/usr/bin:/bin" HOME="$WORK" FAKE_SLURM="$WORK/slurm" FAKE_NODE=node07 \
        GPUCHECK_NODE=node07 LD_LIBRARY_PATH="$NVML_DIR" \
        FAKE_NVML_SCENARIO="$ROOT/tests/fixtures/nvml/$scenario.scenario" "${vars[@]}" "$@"
}

HEALTHY_HERE="GPUCHECK_ARGS=--profile health --quiet --skip host.devices"

slurm_node() { # reason: the node's reason before the test ("none": none)
    rm -f "$WORK/slurm/scontrol.log"
    echo "$1" >"$WORK/slurm/reason"
}
scontrol_calls() { cat "$WORK/slurm/scontrol.log" 2>/dev/null || true; }
reason_now() { cat "$WORK/slurm/reason"; }

# --- SLURM -------------------------------------------------------------------
HC=$ROOT/contrib/slurm/gpucheck-healthcheck.sh
PROLOG=$ROOT/contrib/slurm/gpucheck-prolog.sh

slurm_healthy_node_untouched() {
    slurm_node none
    local rc=0
    on_node h100x8 "$HEALTHY_HERE" -- "$HC" 2>/dev/null || rc=$?
    [[ $rc == 0 ]] || fail "exit $rc, want 0"
    [[ -z $(scontrol_calls) ]] || fail "scontrol called: $(scontrol_calls)"
}
slurm_failing_node_drained_with_ids() {
    slurm_node none
    local rc=0
    on_node ecc_remap -- "$HC" 2>/dev/null || rc=$?
    [[ $rc == 1 ]] || fail "exit $rc, want 1"
    local want="update|nodename=node07|state=drain|reason=gpucheck: host.devices, gpu.ecc"
    [[ $(scontrol_calls) == "$want" ]] || fail "scontrol calls: $(scontrol_calls); want $want"
}
slurm_own_drain_resumed() {
    slurm_node "gpucheck: gpu.ecc"
    on_node h100x8 "$HEALTHY_HERE" -- "$HC" 2>/dev/null || fail "exit $?, want 0"
    [[ $(scontrol_calls) == "update|nodename=node07|state=resume" ]] || fail "scontrol calls: $(scontrol_calls)"
    [[ $(reason_now) == none ]] || fail "reason now: $(reason_now)"
}
slurm_admin_drain_kept_when_healthy() {
    slurm_node "replacing PSU, ticket 4711"
    on_node h100x8 "$HEALTHY_HERE" -- "$HC" 2>/dev/null || fail "exit $?, want 0"
    [[ -z $(scontrol_calls) ]] || fail "scontrol called: $(scontrol_calls)"
    [[ $(reason_now) == "replacing PSU, ticket 4711" ]] || fail "reason now: $(reason_now)"
}
slurm_admin_drain_kept_when_failing() {
    slurm_node "replacing PSU, ticket 4711"
    local rc=0
    on_node ecc_remap -- "$HC" 2>/dev/null || rc=$?
    [[ $rc == 1 ]] || fail "exit $rc, want 1"
    [[ -z $(scontrol_calls) ]] || fail "scontrol called: $(scontrol_calls)"
}
slurm_hung_driver_drained_within_limit() {
    slurm_node none
    local rc=0 start=$SECONDS
    on_node hang_init GPUCHECK_TIMEOUT=2 -- "$HC" 2>/dev/null || rc=$?
    [[ $rc == 1 ]] || fail "exit $rc, want 1"
    ((SECONDS - start < 10)) || fail "took $((SECONDS - start)) s with GPUCHECK_TIMEOUT=2"
    [[ $(scontrol_calls) == "update|nodename=node07|state=drain|reason=gpucheck: timed out after 2 s" ]] ||
        fail "scontrol calls: $(scontrol_calls)"
}
slurm_default_timeout_under_60s() {
    # SLURM kills a HealthCheckProgram after 60 s; the default bound must leave room.
    local default
    default=$(sed -n 's/^GPUCHECK_TIMEOUT=\${GPUCHECK_TIMEOUT:-\([0-9]*\)}$/\1/p' "$HC")
    [[ -n $default && $default -lt 60 ]] || fail "default GPUCHECK_TIMEOUT '$default' is not under 60 s"
}
slurm_usage_error_leaves_node() {
    slurm_node none
    local rc=0
    on_node h100x8 "GPUCHECK_ARGS=--no-such-flag" -- "$HC" 2>/dev/null || rc=$?
    [[ $rc == 2 ]] || fail "exit $rc, want 2"
    [[ -z $(scontrol_calls) ]] || fail "scontrol called: $(scontrol_calls)"
}
slurm_bad_setting_leaves_node() {
    # The health profile exits 1 for a run it cannot start: no verdict, no drain.
    slurm_node none
    local rc=0
    on_node h100x8 GPUCHECK_EXPECT_GPUS=eight -- "$HC" 2>/dev/null || rc=$?
    [[ $rc == 2 ]] || fail "health check: exit $rc, want 2"
    [[ -z $(scontrol_calls) ]] || fail "scontrol called: $(scontrol_calls)"
    rc=0
    on_node h100x8 GPUCHECK_EXPECT_GPUS=eight SLURM_JOB_ID=42 -- "$PROLOG" 2>/dev/null || rc=$?
    [[ $rc == 0 ]] || fail "prolog: exit $rc, want 0 (the job runs)"
    [[ -z $(scontrol_calls) ]] || fail "scontrol called: $(scontrol_calls)"
}
slurm_prolog_stops_job_on_bad_node() {
    slurm_node none
    local rc=0
    on_node gpu_lost SLURM_JOB_ID=42 -- "$PROLOG" 2>/dev/null || rc=$?
    [[ $rc == 1 ]] || fail "exit $rc, want 1"
    [[ $(scontrol_calls) == "update|nodename=node07|state=drain|reason=gpucheck: host.devices, gpu.count" ]] ||
        fail "scontrol calls: $(scontrol_calls)"
}
slurm_prolog_lets_job_run() {
    slurm_node none
    on_node h100x8 "$HEALTHY_HERE" SLURM_JOB_ID=42 -- "$PROLOG" 2>/dev/null || fail "exit $?, want 0"
    [[ -z $(scontrol_calls) ]] || fail "scontrol called: $(scontrol_calls)"
}

t "slurm: a healthy node is left alone" slurm_healthy_node_untouched
t "slurm: a failing node is drained, reason gpucheck: <ids>" slurm_failing_node_drained_with_ids
t "slurm: a node gpucheck drained is resumed once healthy" slurm_own_drain_resumed
t "slurm: an administrator's drain is never resumed" slurm_admin_drain_kept_when_healthy
t "slurm: an administrator's reason is never overwritten" slurm_admin_drain_kept_when_failing
t "slurm: a hung driver drains the node within GPUCHECK_TIMEOUT" slurm_hung_driver_drained_within_limit
t "slurm: the default timeout is under SLURM's 60 s" slurm_default_timeout_under_60s
t "slurm: a usage error leaves the node as it is (exit 2)" slurm_usage_error_leaves_node
t "slurm: a bad GPUCHECK_* setting leaves the node as it is (exit 2, the job runs)" slurm_bad_setting_leaves_node
t "slurm: the prolog drains a bad node and stops the job" slurm_prolog_stops_job_on_bad_node
t "slurm: the prolog lets the job run on a good node" slurm_prolog_lets_job_run

# --- Kubernetes ----------------------------------------------------------------
K8S=$ROOT/contrib/k8s

# Prints one field of a container as JSON: k8s_field FILE CONTAINER FIELD
k8s_field() {
    "$PY" - "$@" <<'EOF'
import json, sys, yaml
path, name, field = sys.argv[1:4]
spec = yaml.safe_load(open(path))["spec"]["template"]["spec"]
for c in spec.get("initContainers", []) + spec["containers"]:
    if c["name"] == name:
        print(json.dumps(c.get(field, [])))
        break
else:
    sys.exit(f"no container {name} in {path}")
EOF
}
# The container's command + args as a NUL-separated list, for xargs -0 / mapfile -d ''.
k8s_argv() {
    "$PY" -c 'import json,sys; [print(a, end="\0") for a in json.loads(sys.argv[1]) + json.loads(sys.argv[2])]' \
        "$(k8s_field "$1" "$2" command)" "$(k8s_field "$1" "$2" args)"
}

k8s_manifests_validate() {
    local v
    for v in 1.28.0 1.37.0; do
        "$ROOT/.tools/venv/bin/kubernetes-validate" --strict --quiet -k "$v" \
            "$K8S/daemonset.yaml" "$K8S/training-job.yaml" || fail "not valid against Kubernetes $v"
    done
}
k8s_daemonset_writes_prometheus_file() {
    local argv env_vars mount textfile_dir=$WORK/textfile_collector
    mkdir -p "$textfile_dir"
    mapfile -d '' argv < <(k8s_argv "$K8S/daemonset.yaml" gpucheck)
    # The container's env, with the volume's mountPath mapped to a temporary folder.
    mapfile -t env_vars < <("$PY" -c 'import json,sys; [print("%s=%s" % (e["name"], e["value"])) for e in json.loads(sys.argv[1])]' \
        "$(k8s_field "$K8S/daemonset.yaml" gpucheck env)")
    mount=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])[0]["mountPath"])' \
        "$(k8s_field "$K8S/daemonset.yaml" gpucheck volumeMounts)")
    [[ " ${env_vars[*]} " == *" GPUCHECK_TEXTFILE_DIR=$mount "* ]] ||
        fail "GPUCHECK_TEXTFILE_DIR is not the volume's mountPath $mount: ${env_vars[*]}"
    env_vars=("${env_vars[@]/#GPUCHECK_TEXTFILE_DIR=*/GPUCHECK_TEXTFILE_DIR=$textfile_dir}")
    # The loop runs in a session of its own whose leader writes its pid (=
    # its process group) first, so the whole loop, gpucheck and its sleep
    # included, is stopped afterwards: nothing of the test stays running.
    local pgid_file=$WORK/k8s-daemonset.pgid
    on_node ecc_remap "${env_vars[@]}" -- \
        setsid sh -c 'echo $$ >"$0"; exec "$@"' "$pgid_file" "${argv[@]}" >/dev/null 2>&1 &
    local pid=$! i pgid=
    for i in $(seq 100); do
        [[ -s $textfile_dir/gpucheck.prom ]] && break
        sleep 0.1
    done
    pgid=$(cat "$pgid_file" 2>/dev/null || true)
    [[ -n $pgid ]] && kill -KILL -- -"$pgid" 2>/dev/null
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [[ -n $pgid ]] || fail "the DaemonSet's loop never started"
    # Gone, or zombies only (this machine's init may not reap them).
    for i in $(seq 20); do
        ps -o stat= -g "$pgid" 2>/dev/null | grep -qv '^Z' || break
        sleep 0.1
    done
    ! ps -o stat= -g "$pgid" 2>/dev/null | grep -qv '^Z' || fail "the DaemonSet's loop is still running"
    [[ -s $textfile_dir/gpucheck.prom ]] || fail "no $textfile_dir/gpucheck.prom after 10 s"
    # node_exporter reads every *.prom file in the folder: gpucheck's only,
    # no temporary file left behind.
    [[ $(ls -A "$textfile_dir") == gpucheck.prom ]] || fail "the folder holds: $(ls -A "$textfile_dir" | tr '\n' ' ')"
    "$PY" - "$textfile_dir/gpucheck.prom" <<'EOF' || fail "the metrics do not parse or say the wrong thing"
import sys
from prometheus_client.parser import text_string_to_metric_families
samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(open(sys.argv[1]).read()) for s in fam.samples}
def value(name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]
info = [dict(labels) for name, labels in samples if name == "gpucheck_info"]
assert [i["profile"] for i in info] == ["health"], info
assert value("gpucheck_ready") == 0
assert value("gpucheck_exit_code") == 1
assert value("gpucheck_check_status", check="gpu.ecc", group="gpu", status="fail") == 1
assert value("gpucheck_check_status", check="gpu.ecc", group="gpu", status="pass") == 0
EOF
}
k8s_init_container_stops_training() {
    local argv out rc=0
    mapfile -d '' argv < <(k8s_argv "$K8S/training-job.yaml" gpucheck)
    [[ "${argv[*]}" == "gpucheck --profile standard" ]] || fail "init container runs: ${argv[*]}"
    out=$(on_node ecc_remap -- "${argv[@]}" 2>&1) || rc=$?
    [[ $rc == 1 ]] || fail "exit $rc, want 1 (init container fails, training does not start)"
    [[ $(tail -n 1 <<<"$out") == "NOT READY: "*gpu.ecc* ]] || fail "verdict: $(tail -n 1 <<<"$out")"
}
# The rule's command line, its path taken from contrib/k8s (where the plugin
# script is kept), NUL-separated.
npd_rule_argv() {
    "$PY" -c 'import json,sys,os; r=json.load(open(sys.argv[1]))["rules"][0]; [print(a, end="\0") for a in [os.path.join(sys.argv[2], os.path.basename(r["path"]))] + r["args"]]' \
        "$K8S/node-problem-detector.json" "$K8S"
}
npd_config_consistent() {
    "$PY" - "$K8S/node-problem-detector.json" <<'EOF' || fail "inconsistent plugin config"
import json, sys
c = json.load(open(sys.argv[1]))
secs = lambda s: int(s.rstrip("s"))
assert c["plugin"] == "custom"
rule = c["rules"][0]
assert rule["condition"] in [x["type"] for x in c["conditions"]]
# The plugin script, kept beside the config, where node-problem-detector keeps its own.
assert rule["path"] == "/config/plugin/gpucheck-npd.sh", rule["path"]
assert rule["args"] == ["--profile", "health", "--quiet"], rule["args"]
# The rule's timeout fits in the plugin's, which fits in the interval.
assert secs(rule["timeout"]) < secs(c["pluginConfig"]["timeout"]) <= secs(c["pluginConfig"]["invoke_interval"])
EOF
    [[ -x $K8S/gpucheck-npd.sh ]] || fail "contrib/k8s/gpucheck-npd.sh is not executable"
}
# node-problem-detector reads 0 as OK, 1 as a problem, anything else as
# unknown, and the condition's message from stdout, cut at max_output_length.
# Usage: npd_run SCENARIO [VAR=value ...] [-- EXTRA_ARGS...]; sets NPD_RC and NPD_MESSAGE.
npd_run() {
    local scenario=$1 argv vars=() max out
    shift
    while [[ $# -gt 0 && $1 != -- ]]; do
        vars+=("$1")
        shift
    done
    [[ $# -gt 0 ]] && shift
    mapfile -d '' argv < <(npd_rule_argv)
    max=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["pluginConfig"]["max_output_length"])' "$K8S/node-problem-detector.json")
    NPD_RC=0
    out=$(on_node "$scenario" "${vars[@]}" -- "${argv[@]}" "$@" 2>/dev/null) || NPD_RC=$?
    NPD_MESSAGE=${out:0:max}
}
npd_bad_node_is_a_problem() {
    npd_run ecc_remap
    [[ $NPD_RC == 1 ]] || fail "exit $NPD_RC, want 1 (problem)"
    [[ $NPD_MESSAGE == "NOT HEALTHY: "*"see host.devices, gpu.ecc" ]] || fail "condition message: $NPD_MESSAGE"
}
npd_healthy_node_is_ok() {
    npd_run h100x8 -- --skip host.devices
    [[ $NPD_RC == 0 ]] || fail "exit $NPD_RC, want 0 (OK)"
    [[ $NPD_MESSAGE == "HEALTHY: "* ]] || fail "condition message: $NPD_MESSAGE"
}
npd_hung_driver_is_a_problem() {
    local start=$SECONDS rule_timeout
    rule_timeout=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["rules"][0]["timeout"].rstrip("s"))' "$K8S/node-problem-detector.json")
    npd_run hang_init
    [[ $NPD_RC == 1 ]] || fail "exit $NPD_RC, want 1 (problem)"
    ((SECONDS - start < 10 && 10 < rule_timeout)) || fail "took $((SECONDS - start)) s; the rule allows $rule_timeout s"
    [[ $NPD_MESSAGE == "NOT HEALTHY: NVML did not answer"* ]] || fail "condition message: $NPD_MESSAGE"
}
npd_misconfigured_is_unknown() {
    npd_run h100x8 GPUCHECK_EXPECT_GPUS=eight
    [[ $NPD_RC == 2 ]] || fail "bad setting: exit $NPD_RC, want 2 (unknown)"
    [[ $NPD_MESSAGE == "gpucheck could not run (exit 1): "*GPUCHECK_EXPECT_GPUS* ]] || fail "condition message: $NPD_MESSAGE"
    npd_run h100x8 GPUCHECK=/nonexistent/gpucheck
    [[ $NPD_RC == 2 ]] || fail "no binary: exit $NPD_RC, want 2 (unknown)"
}

t "k8s: daemonset.yaml and training-job.yaml validate (kubernetes-validate --strict)" k8s_manifests_validate
t "k8s: the DaemonSet's command writes node_exporter's gpucheck.prom (prometheus_client parses it)" k8s_daemonset_writes_prometheus_file
t "k8s: the init container's command fails on a bad node" k8s_init_container_stops_training
t "k8s: node-problem-detector.json is consistent" npd_config_consistent
t "k8s: node-problem-detector's rule: 1 (problem) with the failing ids on a bad node" npd_bad_node_is_a_problem
t "k8s: node-problem-detector's rule: 0 (OK) on a healthy node" npd_healthy_node_is_ok
t "k8s: node-problem-detector's rule: a hung driver is a problem, within the health budget" npd_hung_driver_is_a_problem
t "k8s: node-problem-detector's rule: a run that cannot start is unknown (2), with the reason" npd_misconfigured_is_unknown

# --- Docker --------------------------------------------------------------------
DOCKERFILE=$ROOT/contrib/docker/Dockerfile
# The JSON array of a Dockerfile instruction (ENTRYPOINT, CMD, HEALTHCHECK's CMD), NUL-separated.
docker_argv() {
    "$PY" - "$DOCKERFILE" "$1" <<'EOF'
import json, re, sys
text = re.sub(r"\\\n", " ", open(sys.argv[1]).read())
key = sys.argv[2]
for line in text.splitlines():
    words = line.split(None, 1)
    if words and words[0] == key.split()[0]:
        rest = words[1]
        if key == "HEALTHCHECK":
            rest = rest[rest.index(" CMD ") + len(" CMD "):]
        for a in json.loads(rest):
            print(a, end="\0")
        break
else:
    sys.exit(f"no {key} in {sys.argv[1]}")
EOF
}
docker_entrypoint_blocks_bad_node() {
    local argv out rc=0
    mapfile -d '' argv < <(docker_argv ENTRYPOINT)
    [[ ${argv[0]} == gpucheck && ${argv[1]} == exec && ${argv[-1]} == -- ]] || fail "ENTRYPOINT: ${argv[*]}"
    out=$(on_node ecc_remap -- "${argv[@]}" echo TRAINING-STARTED 2>/dev/null) || rc=$?
    [[ $rc == 1 ]] || fail "exit $rc, want 1"
    [[ $out != *TRAINING-STARTED* ]] || fail "the command ran on a failing node"
}
docker_entrypoint_runs_command() {
    # The ENTRYPOINT runs the standard profile, which needs CUDA: run its exec
    # with the quick profile (and without host.devices) to see CMD run.
    local argv out rc=0
    mapfile -d '' argv < <(docker_argv ENTRYPOINT)
    argv=("${argv[@]/#standard/quick}")
    out=$(on_node h100x8 -- "${argv[@]:0:${#argv[@]}-1}" --skip host.devices -- echo TRAINING-STARTED 2>/dev/null) || rc=$?
    [[ $rc == 0 && $out == TRAINING-STARTED ]] || fail "exit $rc, output: $out"
}
docker_healthcheck_exit_codes() {
    # Docker reads 0 as healthy and 1 as unhealthy, and reserves 2.
    local argv rc=0
    mapfile -d '' argv < <(docker_argv HEALTHCHECK)
    on_node ecc_remap -- "${argv[@]}" >/dev/null 2>&1 || rc=$?
    [[ $rc == 1 ]] || fail "failing node: exit $rc, want 1"
    rc=0
    on_node h100x8 GPUCHECK_EXPECT_GPUS=eight -- "${argv[@]}" >/dev/null 2>&1 || rc=$?
    [[ $rc == 1 ]] || fail "usage error: exit $rc, want 1 (Docker reserves 2)"
}

t "docker: the ENTRYPOINT stops before CMD on a bad node" docker_entrypoint_blocks_bad_node
t "docker: gpucheck exec runs CMD on a good node" docker_entrypoint_runs_command
t "docker: the HEALTHCHECK exits 1 when unhealthy, never 2" docker_healthcheck_exit_codes

echo
summary contrib

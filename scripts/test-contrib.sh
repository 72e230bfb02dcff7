#!/usr/bin/env bash
# Tests every file in contrib/ against the real gpucheck binary and the fake
# NVML (tests/fixtures/fake_nvml.c driven by tests/fixtures/nvml/*.scenario):
#   slurm/   the health check and prolog, with fake scontrol and sinfo on PATH
#            that record their arguments and keep the node's reason, then
#            under Debian's real slurmctld and slurmd (slurm-wlm, one node on
#            loopback, installed with apt-get when missing): drain, resume,
#            an administrator's reason, and what a failing prolog does to an
#            srun, an sbatch and a --no-requeue job;
#   k8s/     the manifests validated against the Kubernetes schemas
#            (kubernetes-validate --strict, from PyPI), and the command lines
#            they hold run as written;
#   docker/  the Dockerfile's ENTRYPOINT and HEALTHCHECK commands run as written;
#   --prom   files of two profiles (and of one, twice) in one folder, scraped
#            from Debian's real prometheus-node-exporter (textfile collector
#            only, loopback, installed with apt-get when missing).
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
    local want="update|nodename=node07|state=drain|reason=gpucheck: reset_gpu GPU 3 gpu.ecc, fix_config host.devices"
    [[ $(scontrol_calls) == "$want" ]] || fail "scontrol calls: $(scontrol_calls); want $want"
}
slurm_any_format_drains() {
    # The verdict comes from the exit code and the --prom report, not from
    # the text on stdout: another --format changes nothing.
    local format rc want="update|nodename=node07|state=drain|reason=gpucheck: reset_gpu GPU 3 gpu.ecc, fix_config host.devices"
    for format in json junit markdown table; do
        slurm_node none
        rc=0
        on_node ecc_remap "GPUCHECK_ARGS=--profile health --format $format" -- "$HC" >/dev/null 2>&1 || rc=$?
        [[ $rc == 1 ]] || fail "--format $format: exit $rc, want 1"
        [[ $(scontrol_calls) == "$want" ]] || fail "--format $format: scontrol calls: $(scontrol_calls)"
    done
}
slurm_node_is_slurmds_name() {
    # slurmd sets SLURMD_NODENAME for its health check and prolog; the host
    # name (this machine's) is another.
    [[ $(hostname -s) != node07 ]] || fail "this host is called node07: the test cannot tell the names apart"
    slurm_node "gpucheck: gpu.ecc (GPU 3)"
    on_node h100x8 "$HEALTHY_HERE" GPUCHECK_NODE= SLURMD_NODENAME=node07 -- "$HC" 2>/dev/null || fail "exit $?, want 0"
    [[ $(scontrol_calls) == "update|nodename=node07|state=resume" ]] || fail "scontrol calls: $(scontrol_calls)"
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
    [[ $(scontrol_calls) == "update|nodename=node07|state=drain|reason=gpucheck: reboot_node GPU 2 gpu.count, fix_config host.devices" ]] ||
        fail "scontrol calls: $(scontrol_calls)"
}
slurm_prolog_lets_job_run() {
    slurm_node none
    on_node h100x8 "$HEALTHY_HERE" SLURM_JOB_ID=42 -- "$PROLOG" 2>/dev/null || fail "exit $?, want 0"
    [[ -z $(scontrol_calls) ]] || fail "scontrol called: $(scontrol_calls)"
}

# A gpucheck that writes the --prom report in $STUB_PROM and exits 1.
cat >"$WORK/bin/gpucheck-stub" <<'EOF'
#!/usr/bin/env bash
while [[ $# -gt 0 && $1 != --prom ]]; do shift; done
cp "$STUB_PROM" "$2"
exit 1
EOF
chmod +x "$WORK/bin/gpucheck-stub"
slurm_reason_orders_actions_and_fits() {
    # Twelve failing checks: the most drastic action first (contact_provider
    # on its port), then service_hardware on two GPUs, run order among equals,
    # cut to whole items within the script's 200 characters.
    local prom=$WORK/stub.prom i a reason
    {
        echo '# TYPE gpucheck_check_status gauge'
        for i in $(seq 1 12); do
            echo "gpucheck_check_status{profile=\"health\",check=\"t.check$i\",group=\"t\",status=\"fail\"} 1"
            echo "gpucheck_check_status{profile=\"health\",check=\"t.check$i\",group=\"t\",status=\"pass\"} 0"
        done
        echo 'gpucheck_action{profile="health",action="fix_config",check="t.check1"} 1'
        echo 'gpucheck_action{profile="health",action="service_hardware",check="t.check2",gpu="1"} 1'
        echo 'gpucheck_action{profile="health",action="service_hardware",check="t.check2",gpu="5"} 1'
        echo 'gpucheck_action{profile="health",action="contact_provider",check="t.check3",port="mlx5_0/1"} 1'
        for i in $(seq 4 12); do
            echo "gpucheck_action{profile=\"health\",action=\"fix_install\",check=\"t.check$i\"} 1"
        done
        for a in none fix_config fix_install restart_job reset_gpu reboot_node service_hardware contact_provider; do
            echo "gpucheck_run_action{profile=\"health\",action=\"$a\"} $([[ $a == contact_provider ]] && echo 1 || echo 0)"
        done
    } >"$prom"
    slurm_node none
    on_node h100x8 GPUCHECK=gpucheck-stub STUB_PROM="$prom" -- "$HC" 2>/dev/null && fail "exit 0, want 1"
    reason=$(reason_now)
    [[ $reason == "gpucheck: contact_provider port mlx5_0/1 t.check3, service_hardware GPU 1,5 t.check2, fix_install t.check4, "* ]] ||
        fail "reason: $reason"
    ((${#reason} <= 200)) || fail "reason is ${#reason} characters: $reason"
    [[ $reason == *", fix_install t.check"[0-9]* && $reason != *fix_config* ]] || fail "not cut to whole items: $reason"
}
contrib_reason_programs_agree() {
    # The SLURM health check and the node-problem-detector plugin word a
    # failing node alike: the same function reads the --prom report.
    local npd=$ROOT/contrib/k8s/gpucheck-npd.sh
    program() { sed -n '/^failing_checks() {/,/^}/p' "$1"; }
    [[ -n $(program "$HC") ]] || fail "no failing_checks in $HC"
    [[ $(program "$HC") == "$(program "$npd")" ]] ||
        fail "failing_checks differs: $(diff <(program "$HC") <(program "$npd"))"
}

t "slurm: a healthy node is left alone" slurm_healthy_node_untouched
t "slurm: a failing node is drained, reason gpucheck: <action> GPU <indices> <check>, most drastic first" slurm_failing_node_drained_with_ids
t "slurm: the verdict is read from the exit code and --prom, under any --format" slurm_any_format_drains
t "slurm: the reason puts the most drastic action first, with its port or GPUs, within 200 characters" slurm_reason_orders_actions_and_fits
t "slurm and k8s: the drain reason and the condition message are read from --prom by the same function" contrib_reason_programs_agree
t "slurm: the node is \$SLURMD_NODENAME, not the host name" slurm_node_is_slurmds_name
t "slurm: a node gpucheck drained is resumed once healthy" slurm_own_drain_resumed
t "slurm: an administrator's drain is never resumed" slurm_admin_drain_kept_when_healthy
t "slurm: an administrator's reason is never overwritten" slurm_admin_drain_kept_when_failing
t "slurm: a hung driver drains the node within GPUCHECK_TIMEOUT" slurm_hung_driver_drained_within_limit
t "slurm: the default timeout is under SLURM's 60 s" slurm_default_timeout_under_60s
t "slurm: a usage error leaves the node as it is (exit 2)" slurm_usage_error_leaves_node
t "slurm: a bad GPUCHECK_* setting leaves the node as it is (exit 2, the job runs)" slurm_bad_setting_leaves_node
t "slurm: the prolog drains a bad node and stops the job" slurm_prolog_stops_job_on_bad_node
t "slurm: the prolog lets the job run on a good node" slurm_prolog_lets_job_run

# --- SLURM, for real -----------------------------------------------------------
# Debian's slurmctld and slurmd on loopback (scripts/lib/real-slurm.sh), the
# node named gpunode07 on a host of another name. slurmd runs the health
# check every second and the prolog before each job through the node's own
# wiring (a wrapper that puts gpucheck on PATH, the fake NVML as the
# system's libnvidia-ml.so.1 and the scenario of the moment), and the
# contrib scripts talk to slurmctld with the real scontrol and sinfo.
# shellcheck source=scripts/lib/real-slurm.sh
source "$ROOT/scripts/lib/real-slurm.sh"
REAL=$WORK/real-slurm
mkdir -p "$REAL/bin"
ln -s "$BIN" "$REAL/bin/gpucheck"

# The node's state: real_node SCENARIO [GPUCHECK_ARGS] (health check and prolog alike).
real_node() {
    echo "$1" >"$REAL/scenario"
    echo "${2:---profile health --quiet}" >"$REAL/args"
}
real_healthcheck() { # on or off: off, the health check answers 0 without running gpucheck
    if [[ $1 == off ]]; then touch "$REAL/hc-off"; else rm -f "$REAL/hc-off"; fi
}
# slurmd gives its programs a bare environment (SLURMD_NODENAME and the
# job's variables); a node's wrapper sets what the node needs.
for script in healthcheck prolog; do
    cat >"$REAL/$script" <<WRAPPER
#!/usr/bin/env bash
[[ $script == prolog || ! -e $REAL/hc-off ]] || exit 0
echo "\$(date +%s) \${SLURMD_NODENAME:-unset}" >>"$REAL/$script.runs"
export PATH=$REAL/bin:/usr/sbin:/usr/bin:/bin SLURM_CONF=$REAL/slurm.conf LD_LIBRARY_PATH=$NVML_DIR
export FAKE_NVML_SCENARIO=$ROOT/tests/fixtures/nvml/\$(cat "$REAL/scenario").scenario
GPUCHECK_ARGS=\$(cat "$REAL/args") exec $ROOT/contrib/slurm/gpucheck-$script.sh
WRAPPER
    chmod +x "$REAL/$script"
done
HEALTHY_ARGS="--profile health --quiet --skip host.devices"
ECC_REASON="gpucheck: reset_gpu GPU 3 gpu.ecc, fix_config host.devices"

node_field() { sinfo -h -n "$REAL_SLURM_NODE" -o "$1" 2>/dev/null; }
# Waits up to SECS for CMD to succeed.
within() {
    local secs=$1 i
    shift
    for i in $(seq $((secs * 5))); do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}
reason_is() { [[ $(node_field %E) == "$1" ]]; }
state_is() { [[ $(node_field %T) == "$1" ]]; }
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | head -n 1; }
job_field_is() { [[ $(job_field "$1" "$2") == "$2=$3" ]]; }
job_field_is_not() { [[ $(job_field "$1" "$2") != "$2=$3" ]]; }
# At least N health-check runs started at or after the Unix time MARK.
health_checks_since() { (($(awk -v t="$1" '$1 >= t' "$REAL/healthcheck.runs" 2>/dev/null | wc -l) >= $2)); }

real_slurm_up() {
    need_debian_packages slurmctld slurmctld slurmd slurm-client || return 1
    real_node h100x8 "$HEALTHY_ARGS"
    real_slurm_start "$REAL" "$REAL/healthcheck" "$REAL/prolog" || fail "slurmctld and slurmd did not start"
}
real_slurm_health_check_drains_by_node_name() {
    [[ $(hostname -s) != "$REAL_SLURM_NODE" ]] || fail "the host is named $REAL_SLURM_NODE"
    real_node ecc_remap
    within 20 reason_is "$ECC_REASON" || fail "reason: $(node_field %E)"
    state_is drained || state_is draining || fail "state: $(node_field %T)"
    [[ $(tail -n 1 "$REAL/healthcheck.runs") == *" $REAL_SLURM_NODE" ]] ||
        fail "SLURMD_NODENAME: $(tail -n 1 "$REAL/healthcheck.runs")"
}
real_slurm_health_check_resumes() {
    real_node h100x8 "$HEALTHY_ARGS"
    within 20 state_is idle || fail "state: $(node_field %T), reason: $(node_field %E)"
    reason_is none || fail "reason: $(node_field %E)"
}
real_slurm_admin_drain_kept() {
    local admin="replacing PSU, ticket 4711" mark
    scontrol update nodename="$REAL_SLURM_NODE" state=drain reason="$admin"
    real_node ecc_remap
    mark=$(($(date +%s) + 1))
    within 20 health_checks_since "$mark" 2 || fail "the health check did not run"
    reason_is "$admin" || fail "failing: reason $(node_field %E)"
    real_node h100x8 "$HEALTHY_ARGS"
    mark=$(($(date +%s) + 1))
    within 20 health_checks_since "$mark" 2 || fail "the health check did not run"
    reason_is "$admin" || fail "healthy: reason $(node_field %E)"
    state_is drained || fail "healthy: state $(node_field %T)"
    scontrol update nodename="$REAL_SLURM_NODE" state=resume
}
real_slurm_prolog_runs_job_on_good_node() {
    real_healthcheck off
    real_node h100x8 "$HEALTHY_ARGS"
    within 10 state_is idle || fail "state: $(node_field %T)"
    local out
    out=$(timeout 60 srun -N1 echo TRAINING-STARTED 2>&1) || fail "srun: $out"
    [[ $out == TRAINING-STARTED ]] || fail "srun printed: $out"
}
real_slurm_prolog_cancels_interactive_srun() {
    real_node ecc_remap
    local out rc=0 id
    out=$(timeout 60 srun -N1 -J gpucheck-interactive echo TRAINING-STARTED 2>&1) || rc=$?
    [[ $rc != 0 ]] || fail "srun exit 0"
    [[ $out != *TRAINING-STARTED* ]] || fail "the job ran: $out"
    [[ $out == *"Job prolog failed"* ]] || fail "srun said: $out"
    reason_is "$ECC_REASON" || fail "reason: $(node_field %E)"
    # Not requeued: the job is over.
    id=$(squeue -h -n gpucheck-interactive -o %i)
    [[ -z $id ]] || fail "job $id still queued: $(job_field "$id" JobState)"
    scontrol update nodename="$REAL_SLURM_NODE" state=resume
}
# A batch job on a node whose prolog fails: requeued, held, until released.
real_slurm_prolog_holds_batch_job() {
    real_node ecc_remap
    within 10 state_is idle || fail "state: $(node_field %T)"
    local id
    id=$(sbatch --parsable -N1 -o /dev/null --wrap 'echo TRAINING-STARTED') || fail "sbatch"
    within 20 job_field_is "$id" Reason launch_failed_requeued_held ||
        fail "job $id: $(job_field "$id" JobState) $(job_field "$id" Reason)"
    job_field_is "$id" JobState PENDING || fail "job $id: $(job_field "$id" JobState)"
    job_field_is "$id" Restarts 1 || fail "job $id: $(job_field "$id" Restarts)"
    reason_is "$ECC_REASON" || fail "reason: $(node_field %E)"
    scontrol release "$id"
    within 10 job_field_is_not "$id" Reason launch_failed_requeued_held ||
        fail "job $id still held after scontrol release"
    scancel "$id"
    scontrol update nodename="$REAL_SLURM_NODE" state=resume
}
real_slurm_prolog_ends_no_requeue_job() {
    real_node ecc_remap
    within 10 state_is idle || fail "state: $(node_field %T)"
    local id
    id=$(sbatch --parsable --no-requeue -N1 -o /dev/null --wrap 'echo TRAINING-STARTED') || fail "sbatch"
    within 20 job_field_is "$id" JobState CANCELLED || fail "job $id: $(job_field "$id" JobState) $(job_field "$id" Reason)"
    job_field_is "$id" Restarts 0 || fail "job $id: $(job_field "$id" Restarts)"
    scontrol update nodename="$REAL_SLURM_NODE" state=resume
}
real_slurm_nohold_on_prolog_fail() {
    real_slurm_reconfigure "SchedulerParameters=nohold_on_prolog_fail" || fail "scontrol reconfigure"
    within 10 state_is idle || fail "state: $(node_field %T)"
    real_node ecc_remap
    local id
    id=$(sbatch --parsable -N1 -o /dev/null --wrap 'echo TRAINING-STARTED') || fail "sbatch"
    within 20 job_field_is "$id" Restarts 1 || fail "job $id: $(job_field "$id" Restarts)"
    job_field_is "$id" JobState PENDING || fail "job $id: $(job_field "$id" JobState)"
    job_field_is_not "$id" Reason launch_failed_requeued_held || fail "job $id held"
    scancel "$id"
}

if t "slurm (real): slurmctld and slurmd start (Debian's slurm-wlm, loopback)" real_slurm_up; then
    trap 'real_slurm_stop; rm -rf "$WORK"' EXIT
    t "slurm (real): slurmd's health check drains a failing node, reason gpucheck: <action> GPU <indices> <check>" real_slurm_health_check_drains_by_node_name
    t "slurm (real): the health check resumes the node it drained (its NodeName, not the host name, finds its reason)" real_slurm_health_check_resumes
    t "slurm (real): an administrator's drain and reason are kept, failing or healthy" real_slurm_admin_drain_kept
    t "slurm (real): the prolog lets srun run on a good node" real_slurm_prolog_runs_job_on_good_node
    t "slurm (real): a failing prolog drains the node and cancels an interactive srun" real_slurm_prolog_cancels_interactive_srun
    t "slurm (real): a failing prolog requeues a batch job, held until scontrol release" real_slurm_prolog_holds_batch_job
    t "slurm (real): a failing prolog cancels a --no-requeue batch job" real_slurm_prolog_ends_no_requeue_job
    t "slurm (real): with SchedulerParameters=nohold_on_prolog_fail it is requeued unheld" real_slurm_nohold_on_prolog_fail
    real_slurm_stop
fi

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
        [[ -s $textfile_dir/gpucheck-health.prom ]] && break
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
    [[ -s $textfile_dir/gpucheck-health.prom ]] || fail "no $textfile_dir/gpucheck-health.prom after 10 s"
    # node_exporter reads every *.prom file in the folder: gpucheck's only,
    # no temporary file left behind.
    [[ $(ls -A "$textfile_dir") == gpucheck-health.prom ]] || fail "the folder holds: $(ls -A "$textfile_dir" | tr '\n' ' ')"
    "$PY" - "$textfile_dir/gpucheck-health.prom" <<'EOF' || fail "the metrics do not parse or say the wrong thing"
import sys
from prometheus_client.parser import text_string_to_metric_families
samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(open(sys.argv[1]).read()) for s in fam.samples}
def value(name, **labels):
    return samples[(name, tuple(sorted(dict(labels, profile="health").items())))]
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
    [[ $NPD_MESSAGE == "gpucheck: reset_gpu GPU 3 gpu.ecc, fix_config host.devices; NOT HEALTHY: "*"see host.devices, gpu.ecc" ]] ||
        fail "condition message: $NPD_MESSAGE"
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
    [[ $NPD_MESSAGE == "gpucheck: reboot_node gpu.driver, fix_config host.devices; NOT HEALTHY: NVML did not answer"* ]] ||
        fail "condition message: $NPD_MESSAGE"
}
npd_misconfigured_is_unknown() {
    npd_run h100x8 GPUCHECK_EXPECT_GPUS=eight
    [[ $NPD_RC == 2 ]] || fail "bad setting: exit $NPD_RC, want 2 (unknown)"
    [[ $NPD_MESSAGE == "gpucheck could not run (exit 1): "*GPUCHECK_EXPECT_GPUS* ]] || fail "condition message: $NPD_MESSAGE"
    npd_run h100x8 GPUCHECK=/nonexistent/gpucheck
    [[ $NPD_RC == 2 ]] || fail "no binary: exit $NPD_RC, want 2 (unknown)"
}

t "k8s: daemonset.yaml and training-job.yaml validate (kubernetes-validate --strict)" k8s_manifests_validate
t "k8s: the DaemonSet's command writes node_exporter's gpucheck-health.prom (prometheus_client parses it)" k8s_daemonset_writes_prometheus_file
t "k8s: the init container's command fails on a bad node" k8s_init_container_stops_training
t "k8s: node-problem-detector.json is consistent" npd_config_consistent
t "k8s: node-problem-detector's rule: 1 (problem) with each repair action, GPU and check on a bad node" npd_bad_node_is_a_problem
t "k8s: node-problem-detector's rule: 0 (OK) on a healthy node" npd_healthy_node_is_ok
t "k8s: node-problem-detector's rule: a hung driver is a problem, within the health budget" npd_hung_driver_is_a_problem
t "k8s: node-problem-detector's rule: a run that cannot start is unknown (2), with the reason" npd_misconfigured_is_unknown

# --- node_exporter, for real ----------------------------------------------------
# Debian's prometheus-node-exporter (1.5) with only its textfile collector,
# on loopback, reading a folder of gpucheck .prom files as the README's cron
# line and the DaemonSet write them; the scrape is read back with
# prometheus_client's parser.
NODE_EXPORTER_DIR=$WORK/node-exporter
NODE_EXPORTER_PID=
node_exporter_start() {
    # Above the ports scripts/lib/real-slurm.sh takes (42000-51999).
    local port=$((52000 + $$ % 2000)) i
    mkdir -p "$NODE_EXPORTER_DIR/textfile"
    prometheus-node-exporter --collector.disable-defaults --collector.textfile \
        --collector.textfile.directory="$NODE_EXPORTER_DIR/textfile" \
        --web.listen-address="127.0.0.1:$port" >"$NODE_EXPORTER_DIR/log" 2>&1 &
    NODE_EXPORTER_PID=$!
    NODE_EXPORTER_URL=http://127.0.0.1:$port/metrics
    for i in $(seq 50); do
        "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$NODE_EXPORTER_URL" 2>/dev/null && return 0
        sleep 0.2
    done
    fail "node_exporter did not answer on $NODE_EXPORTER_URL: $(tail -n 3 "$NODE_EXPORTER_DIR/log")"
}
node_exporter_stop() {
    [[ -n $NODE_EXPORTER_PID ]] || return 0
    kill "$NODE_EXPORTER_PID" 2>/dev/null || true
    wait "$NODE_EXPORTER_PID" 2>/dev/null || true
    NODE_EXPORTER_PID=
}
# Writes FILE in the textfile folder: textfile_write FILE SCENARIO GPUCHECK_ARGS...
textfile_write() {
    local file=$1 scenario=$2
    shift 2
    on_node "$scenario" -- gpucheck "$@" --prom "$NODE_EXPORTER_DIR/textfile/$file" >/dev/null 2>&1 || true
    [[ -s $NODE_EXPORTER_DIR/textfile/$file ]] || fail "gpucheck wrote no $file"
}
# Scrapes node_exporter and runs the Python CHECKS on the result: `samples`
# is every (name, labels, value), `value(name, **labels)` the one match.
node_scrape() {
    "$PY" - "$NODE_EXPORTER_URL" "$1" <<'PYEOF'
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
def value(name, **labels):
    hits = [v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {hits}"
    return hits[0]
exec(sys.argv[2])
PYEOF
}

node_exporter_two_profiles() {
    rm -f "$NODE_EXPORTER_DIR/textfile"/*
    textfile_write gpucheck-quick.prom h100x8 --profile quick --quiet --skip host.devices
    textfile_write gpucheck-health.prom ecc_remap --profile health --quiet
    node_scrape '
assert value("node_textfile_scrape_error") == 0
assert value("gpucheck_ready", profile="quick") == 1
assert value("gpucheck_ready", profile="health") == 0
assert value("gpucheck_check_status", profile="health", check="gpu.ecc", status="fail") == 1
assert value("gpucheck_check_status", profile="quick", check="gpu.ecc", status="pass") == 1
assert value("gpucheck_action", profile="health", action="reset_gpu", check="gpu.ecc", gpu="3") == 1
assert value("gpucheck_action", profile="health", action="fix_config", check="host.devices") == 1
assert value("gpucheck_run_action", profile="health", action="reset_gpu") == 1
assert value("gpucheck_run_action", profile="quick", action="reset_gpu") == 0
assert sum(v for n, l, v in samples if n == "gpucheck_run_action" and l["profile"] == "quick") == 1
' || fail "the scrape lost a file's series"
    ! grep -q 'collected before' "$NODE_EXPORTER_DIR/log" || fail "node_exporter logged: $(grep 'collected before' "$NODE_EXPORTER_DIR/log" | head -n 1)"
}
node_exporter_same_profile_twice_collides() {
    # What the README warns of: two files of one profile, a series repeated.
    rm -f "$NODE_EXPORTER_DIR/textfile"/*
    textfile_write gpucheck-a.prom h100x8 --profile health --quiet --skip host.devices
    textfile_write gpucheck-b.prom ecc_remap --profile health --quiet
    node_scrape '
assert len([1 for n, l, v in samples if n == "gpucheck_ready"]) == 1, "both files scraped"
' || fail "node_exporter kept both files' series"
    grep -q 'collected before' "$NODE_EXPORTER_DIR/log" || fail "node_exporter logged nothing: $(tail -n 3 "$NODE_EXPORTER_DIR/log")"
}
node_exporter_lost_gpu_no_empty_uuid() {
    rm -f "$NODE_EXPORTER_DIR/textfile"/*
    textfile_write gpucheck-health.prom gpu_lost --profile health --quiet
    node_scrape '
gpu2 = [l for n, l, v in samples if n == "gpucheck_gpu_check_status" and l.get("gpu") == "2"]
assert gpu2, "GPU 2 has series"
assert all("uuid" not in l for l in gpu2), gpu2
assert value("gpucheck_gpu_check_status", profile="health", check="gpu.count", gpu="2", status="fail") == 1
info = sorted(l["gpu"] for n, l, v in samples if n == "gpucheck_gpu_info")
assert info == ["0", "1", "3", "4", "5", "6", "7"], info
' || fail "GPU 2's series"
}

if need_debian_packages prometheus-node-exporter prometheus-node-exporter && t "node_exporter (real): starts with the textfile collector (Debian's prometheus-node-exporter, loopback)" node_exporter_start; then
    trap 'node_exporter_stop; rm -rf "$WORK"' EXIT
    t "node_exporter (real): a quick and a health profile file side by side keep every series" node_exporter_two_profiles
    t "node_exporter (real): two files of one profile collide, as the README warns" node_exporter_same_profile_twice_collides
    t "node_exporter (real): a lost GPU's series carry no uuid (gpucheck_gpu_info has the others')" node_exporter_lost_gpu_no_empty_uuid
    node_exporter_stop
else
    t "node_exporter (real): prometheus-node-exporter is installed" false
fi

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

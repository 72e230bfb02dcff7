#!/usr/bin/env bash
# SLURM HealthCheckProgram: runs gpucheck's health profile on this node.
#   slurm.conf:  HealthCheckProgram=/usr/local/sbin/gpucheck-healthcheck.sh
#                HealthCheckInterval=300
# On failure it drains the node with the reason "gpucheck: <failing check ids>";
# when the checks pass again it resumes the node, but only if the node's reason
# still starts with "gpucheck:", so a drain set by an administrator is never
# undone (nor is its reason overwritten). gpucheck runs under `timeout`, well
# inside SLURM's 60 s limit for a health check; a run that hangs (a GPU whose
# driver no longer answers) drains the node too.
#
# Exit status: 0 healthy, 1 unhealthy (drained, or an administrator's drain kept),
# 2 gpucheck could not judge (not found, bad arguments or settings): the node is
# left as it is.
#
# Environment (all optional):
#   GPUCHECK          the binary (default: gpucheck on PATH)
#   GPUCHECK_ARGS     its arguments (default: --profile health --quiet; split on spaces)
#   GPUCHECK_TIMEOUT  seconds before the run counts as hung (default: 50)
#   GPUCHECK_NODE     the SLURM node name (default: hostname -s)
set -u

GPUCHECK=${GPUCHECK:-gpucheck}
GPUCHECK_ARGS=${GPUCHECK_ARGS:---profile health --quiet}
GPUCHECK_TIMEOUT=${GPUCHECK_TIMEOUT:-50}
NODE=${GPUCHECK_NODE:-$(hostname -s)}
PREFIX="gpucheck:"
# SLURM keeps the reason on one line; a longer one is cut here.
REASON_MAX=200

log() { echo "gpucheck-healthcheck: $*" >&2; }

# The node's current drain/down reason, or "" when it has none.
current_reason() {
    local reason
    reason=$(sinfo -h -n "$NODE" -o %E 2>/dev/null | head -n 1)
    [[ $reason == none ]] && reason=""
    echo "$reason"
}

drain() {
    local reason="$PREFIX $1" current
    reason=${reason:0:$REASON_MAX}
    current=$(current_reason)
    if [[ -n $current && $current != "$PREFIX"* ]]; then
        log "$NODE failed ($1) but keeps its own reason: $current"
        return
    fi
    scontrol update nodename="$NODE" state=drain reason="$reason"
    log "drained $NODE: $reason"
}

resume_if_ours() {
    local current
    current=$(current_reason)
    if [[ $current == "$PREFIX"* ]]; then
        scontrol update nodename="$NODE" state=resume
        log "resumed $NODE (was: $current)"
    fi
}

main() {
    local out verdict rc exit_code ids
    # shellcheck disable=SC2086 # GPUCHECK_ARGS is a list of words
    out=$(timeout "$GPUCHECK_TIMEOUT" "$GPUCHECK" $GPUCHECK_ARGS 2>&1)
    rc=$?
    exit_code=$rc
    # The verdict line ("NOT HEALTHY: ... — see gpu.ecc"), gpucheck's last on
    # stdout. The health profile exits 1 also for a run it cannot start (a bad
    # GPUCHECK_* setting), with no verdict, only the reason on stderr: no
    # verdict, no drain.
    verdict=$(printf '%s\n' "$out" | grep -E '^(NOT )?(HEALTHY|READY): ' | tail -n 1)
    [[ $rc == 1 && -z $verdict ]] && rc=2
    [[ -n $verdict ]] || verdict=$(printf '%s\n' "$out" | head -n 1)
    case $rc in
    0)
        resume_if_ours
        return 0
        ;;
    1)
        # The verdict line ends "— see <id>, <id>": those are the failing checks.
        ids=${verdict##*— see }
        [[ $ids == "$verdict" ]] && ids=$verdict
        drain "${ids:-failed}"
        return 1
        ;;
    124 | 137)
        drain "timed out after ${GPUCHECK_TIMEOUT} s"
        return 1
        ;;
    *)
        log "gpucheck could not run (exit $exit_code): ${verdict:-no output}; $NODE left as it is"
        return 2
        ;;
    esac
}

main

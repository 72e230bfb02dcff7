#!/usr/bin/env bash
# SLURM HealthCheckProgram: runs gpucheck's health profile on this node.
#   slurm.conf:  HealthCheckProgram=/usr/local/sbin/gpucheck-healthcheck.sh
#                HealthCheckInterval=300
# On failure it drains the node with the reason
# "gpucheck: <action> GPU <indices> <failing check>, <action> <failing check>, ..."
# (gpucheck: reset_gpu GPU 3 gpu.ecc, fix_config host.devices), the most
# drastic repair action first, so a drain policy can tell "reset it" from
# "send it back";
# when the checks pass again it resumes the node, but only if the node's reason
# still starts with "gpucheck:", so a drain set by an administrator is never
# undone (nor is its reason overwritten). gpucheck runs under `timeout`, well
# inside SLURM's 60 s limit for a health check; a run that hangs (a GPU whose
# driver no longer answers) drains the node too.
#
# The verdict is read from gpucheck's exit code and its Prometheus report
# (--prom, one sample per line, read with awk), never from the text on
# stdout, so GPUCHECK_ARGS may choose any --format. A run that cannot start
# writes no report: no report, no drain.
#
# Exit status: 0 healthy, 1 unhealthy (drained, or an administrator's drain kept),
# 2 gpucheck could not judge (not found, bad arguments or settings): the node is
# left as it is.
#
# Environment (all optional):
#   GPUCHECK          the binary (default: gpucheck on PATH)
#   GPUCHECK_ARGS     its arguments (default: --profile health --quiet; split on
#                     spaces; --prom is this script's own)
#   GPUCHECK_TIMEOUT  seconds before the run counts as hung (default: 50)
#   GPUCHECK_NODE     the SLURM node name (default: $SLURMD_NODENAME, which
#                     slurmd sets for its health check and prolog, else hostname -s)
set -u

GPUCHECK=${GPUCHECK:-gpucheck}
GPUCHECK_ARGS=${GPUCHECK_ARGS:---profile health --quiet}
GPUCHECK_TIMEOUT=${GPUCHECK_TIMEOUT:-50}
NODE=${GPUCHECK_NODE:-${SLURMD_NODENAME:-$(hostname -s)}}
PREFIX="gpucheck:"
# The reason is kept to whole items within this many characters (SLURM
# stores longer ones, but `sinfo -R` shows only the first 20 and
# `scontrol show node` one line); the first failing check comes first.
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

# The failing checks of a --prom report, each as its repair action, the GPUs
# (or port) the action applies to, and the check: "reset_gpu GPU 3 gpu.ecc,
# fix_config host.devices", the most drastic action first (the order of
# gpucheck_run_action's series), run order among equals, cut to whole items
# within REASON_MAX. Failed or errored checks; warned ones when none did
# (--strict). A report without gpucheck_action series (an older gpucheck)
# gives "gpu.ecc (GPU 3)".
failing_checks() {
    awk -v max=$((REASON_MAX - ${#PREFIX} - 1)) '
    function label(name,   m) {
        if (!match($0, name "=\"[^\"]*\"")) return ""
        m = substr($0, RSTART + length(name) + 2, RLENGTH - length(name) - 3)
        return m
    }
    function join(list, x) { return list (list == "" ? "" : ",") x }
    /^gpucheck_run_action\{/ { rank[label("action")] = ++nrank; next }
    $NF != 1 { next }
    /^gpucheck_check_status\{/ {
        s = label("status"); c = label("check")
        if (s == "fail" || s == "error") { bad[++nbad] = c }
        else if (s == "warn") { warned[++nwarn] = c }
    }
    /^gpucheck_gpu_check_status\{/ {
        s = label("status"); c = label("check")
        if (s == "fail" || s == "error" || s == "warn") gpus[c, s == "warn"] = join(gpus[c, s == "warn"], label("gpu"))
    }
    /^gpucheck_action\{/ {
        c = label("check"); act[c] = label("action"); port[c] = label("port")
        if (label("gpu") != "") agpus[c] = join(agpus[c], label("gpu"))
    }
    function item(c, w) {
        if (act[c] == "") return c (gpus[c, w] == "" ? "" : " (GPU " gpus[c, w] ")")
        return act[c] (agpus[c] == "" ? "" : " GPU " agpus[c]) (port[c] == "" ? "" : " port " port[c]) " " c
    }
    END {
        w = 0
        if (nbad == 0) { for (i = 1; i <= nwarn; i++) bad[i] = warned[i]; nbad = nwarn; w = 1 }
        for (i = 2; i <= nbad; i++) {
            c = bad[i]
            for (j = i - 1; j >= 1 && rank[act[bad[j]]] < rank[act[c]]; j--) bad[j + 1] = bad[j]
            bad[j + 1] = c
        }
        out = ""
        for (i = 1; i <= nbad; i++) {
            next_out = out == "" ? item(bad[i], w) : out ", " item(bad[i], w)
            if (length(next_out) > max) break
            out = next_out
        }
        print out
    }' "$1"
}

main() {
    local dir out rc ids
    dir=$(mktemp -d "${TMPDIR:-/tmp}/gpucheck-healthcheck.XXXXXX") || {
        log "cannot make a temporary folder; $NODE left as it is"
        return 2
    }
    # shellcheck disable=SC2064 # the folder is known now
    trap "rm -rf '$dir'" EXIT
    # shellcheck disable=SC2086 # GPUCHECK_ARGS is a list of words
    out=$(timeout "$GPUCHECK_TIMEOUT" "$GPUCHECK" $GPUCHECK_ARGS --prom "$dir/result.prom" 2>&1)
    rc=$?
    # The health profile exits 1 also for a run it cannot start (a bad
    # GPUCHECK_* setting): that run writes no report.
    if [[ $rc == 1 && ! -s $dir/result.prom ]]; then
        log "gpucheck could not run (exit 1, no report): $(printf '%s\n' "$out" | tail -n 1); $NODE left as it is"
        return 2
    fi
    case $rc in
    0)
        resume_if_ours
        return 0
        ;;
    1)
        ids=$(failing_checks "$dir/result.prom")
        drain "${ids:-failed}"
        return 1
        ;;
    124 | 137)
        drain "timed out after ${GPUCHECK_TIMEOUT} s"
        return 1
        ;;
    *)
        log "gpucheck could not run (exit $rc): $(printf '%s\n' "$out" | head -n 1); $NODE left as it is"
        return 2
        ;;
    esac
}

main

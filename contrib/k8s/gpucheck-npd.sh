#!/bin/sh
# node-problem-detector custom plugin: gpucheck's verdict as the node
# condition GPUCheckFailed (see node-problem-detector.json, whose rule runs
# this with the arguments for gpucheck: --profile health --quiet).
#
# node-problem-detector reads exit 0 as OK, 1 as a problem and anything else
# as unknown, and takes the condition's message from stdout. On a problem the
# message names each failing check's repair action and the GPUs (or port) it
# applies to, the most drastic first, read from gpucheck's --prom report:
# "gpucheck: reset_gpu GPU 3 gpu.ecc, fix_config host.devices", as the SLURM
# health check's drain reason does, then "; " and gpucheck's verdict line
# (node-problem-detector cuts the message at max_output_length, so the
# actions come first); healthy, the verdict line alone.
#
# gpucheck's health profile exits 1 for unhealthy hardware and also for a run
# it cannot start (a bad GPUCHECK_* setting on the pod, a flag an older binary
# lacks: Docker, its first user, reserves 2), and then says why on stderr
# only. A plugin that cannot run must not mark every node's hardware as
# broken, so a run that ends without its verdict line is unknown (exit 2),
# with gpucheck's error as the message.
#
# Environment: GPUCHECK, the binary (default: gpucheck on PATH; mount it at
# /usr/local/bin/gpucheck in the node-problem-detector pod). Needs sh, grep,
# awk and mktemp in that image.

# node-problem-detector.json's max_output_length: the actions are cut to
# whole items within it.
REASON_MAX=200
PREFIX="gpucheck:"

# The failing checks of a --prom report (the same function as
# contrib/slurm/gpucheck-healthcheck.sh's; scripts/test-contrib.sh keeps the
# two in step), each as its repair action, the GPUs
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

dir=$(mktemp -d "${TMPDIR:-/tmp}/gpucheck-npd.XXXXXX") || {
    echo "gpucheck could not run: cannot make a temporary folder"
    exit 2
}
trap 'rm -rf "$dir"' EXIT
out=$("${GPUCHECK:-gpucheck}" "$@" --prom "$dir/result.prom" 2>&1)
rc=$?
# The verdict, gpucheck's last line on stdout under --quiet:
# "HEALTHY: 9 passed, ..." or "NOT HEALTHY: ... — see gpu.ecc".
verdict=$(printf '%s\n' "$out" | grep -E '^(NOT )?(HEALTHY|READY): ' | tail -n 1)
if [ -n "$verdict" ] && [ "$rc" = 1 ] && [ -s "$dir/result.prom" ]; then
    actions=$(failing_checks "$dir/result.prom")
    if [ -n "$actions" ]; then
        printf '%s %s; %s\n' "$PREFIX" "$actions" "$verdict"
        exit 1
    fi
fi
if [ -n "$verdict" ] && { [ "$rc" = 0 ] || [ "$rc" = 1 ]; }; then
    printf '%s\n' "$verdict"
    exit "$rc"
fi
printf 'gpucheck could not run (exit %s): %s\n' "$rc" "$(printf '%s\n' "$out" | head -n 1)"
exit 2

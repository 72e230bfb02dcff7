#!/bin/sh
# node-problem-detector custom plugin: gpucheck's verdict as the node
# condition GPUCheckFailed (see node-problem-detector.json, whose rule runs
# this with the arguments for gpucheck: --profile health --quiet).
#
# node-problem-detector reads exit 0 as OK, 1 as a problem and anything else
# as unknown, and takes the condition's message from stdout. gpucheck's health
# profile exits 1 for unhealthy hardware and also for a run it cannot start
# (a bad GPUCHECK_* setting on the pod, a flag an older binary lacks: Docker,
# its first user, reserves 2), and then says why on stderr only. A plugin
# that cannot run must not mark every node's hardware as broken, so a run that
# ends without its verdict line is unknown (exit 2), with gpucheck's error as
# the message.
#
# Environment: GPUCHECK, the binary (default: gpucheck on PATH; mount it at
# /usr/local/bin/gpucheck in the node-problem-detector pod).
out=$("${GPUCHECK:-gpucheck}" "$@" 2>&1)
rc=$?
# The verdict, gpucheck's last line on stdout under --quiet:
# "HEALTHY: 9 passed, ..." or "NOT HEALTHY: ... — see gpu.ecc".
verdict=$(printf '%s\n' "$out" | grep -E '^(NOT )?(HEALTHY|READY): ' | tail -n 1)
if [ -n "$verdict" ] && { [ "$rc" = 0 ] || [ "$rc" = 1 ]; }; then
    printf '%s\n' "$verdict"
    exit "$rc"
fi
printf 'gpucheck could not run (exit %s): %s\n' "$rc" "$(printf '%s\n' "$out" | head -n 1)"
exit 2

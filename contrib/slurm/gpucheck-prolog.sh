#!/usr/bin/env bash
# SLURM Prolog: runs gpucheck's health profile before each job on this node.
#   slurm.conf:  Prolog=/usr/local/sbin/gpucheck-prolog.sh
#                (install gpucheck-healthcheck.sh in the same directory)
# A node that fails is drained with the reason
# "gpucheck: <action> GPU <indices> <failing check>, ..." (gpucheck: reboot_node
# GPU 2 gpu.count, fix_config host.devices) and the prolog exits 1, so
# the job does not start on a bad node. What SLURM then does (slurm-wlm 22.05):
# an interactive srun fails ("Job prolog failed") and its job ends; a batch
# job is requeued and held until `scontrol release <jobid>`, or requeued
# without the hold under SchedulerParameters=nohold_on_prolog_fail; a
# --no-requeue job is cancelled. A node whose checks pass again is resumed
# only while its reason starts with "gpucheck:" (an administrator's drain is
# never undone).
# If gpucheck cannot judge (not installed, bad GPUCHECK_ARGS or GPUCHECK_*
# settings) the job runs.
# Same environment as gpucheck-healthcheck.sh (GPUCHECK, GPUCHECK_ARGS,
# GPUCHECK_TIMEOUT, GPUCHECK_NODE; slurmd sets SLURMD_NODENAME for both).
set -u
here=$(dirname "$(readlink -f "$0")")
"$here/gpucheck-healthcheck.sh"
rc=$?
if [[ $rc == 1 ]]; then
    echo "gpucheck-prolog: job ${SLURM_JOB_ID:-?} not started on this node" >&2
    exit 1
fi
exit 0

# A real one-node SLURM cluster for scripts/test-contrib.sh: Debian's
# slurmctld and slurmd (slurm-wlm 22.05), on loopback, as root, with
# auth/none (no munge), their state, spool, logs and config in one folder.
# The node is NodeName=gpunode07 on a host of another name, as on clusters
# whose node names are not their host names.
#   real_slurm_start DIR HEALTHCHECK PROLOG   writes DIR/slurm.conf, starts both daemons
#   real_slurm_stop                          stops both (by pid) and waits for them
#   real_slurm_reconfigure LINE              appends LINE to slurm.conf, scontrol reconfigure
# Exports SLURM_CONF, so scontrol, sinfo, srun and sbatch talk to this cluster.

REAL_SLURM_NODE=gpunode07
REAL_SLURM_PIDS=()

# Installs Debian's packages PKG... when COMMAND is missing (as root, with
# apt-get). Fails with the reason when it cannot.
need_debian_packages() {
    local command=$1
    shift
    command -v "$command" >/dev/null && return 0
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
        echo "    $command is missing: install Debian's $* (apt-get, as root)" >&2
        return 1
    fi
    echo "    installing Debian's $* (apt-get)" >&2
    {
        apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
    } >/dev/null 2>&1 || {
        echo "    apt-get install $* failed" >&2
        return 1
    }
}

real_slurm_start() {
    local dir=$1 healthcheck=$2 prolog=$3
    # Two ports out of the usual range, from this shell's pid: two test runs
    # at once on one machine do not meet.
    local port=$((42000 + ($$ % 5000) * 2))
    mkdir -p "$dir/state" "$dir/spool"
    cat >"$dir/slurm.conf" <<EOF
ClusterName=gpucheck-test
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/linear
SchedulerType=sched/builtin
ReturnToService=2
HealthCheckProgram=$healthcheck
HealthCheckInterval=1
Prolog=$prolog
NodeName=$REAL_SLURM_NODE NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=gpu Nodes=$REAL_SLURM_NODE Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -D -i >"$dir/slurmctld.out" 2>&1 &
    REAL_SLURM_PIDS+=($!)
    local i
    for i in $(seq 50); do
        scontrol ping 2>/dev/null | grep -q 'is UP' && break
        sleep 0.2
    done
    slurmd -D -N "$REAL_SLURM_NODE" >"$dir/slurmd.out" 2>&1 &
    REAL_SLURM_PIDS+=($!)
    for i in $(seq 100); do
        [[ $(sinfo -h -n "$REAL_SLURM_NODE" -o %T 2>/dev/null) == @(idle|drained|draining|mixed) ]] && return 0
        sleep 0.2
    done
    echo "    the cluster did not come up: $(tail -n 3 "$dir/slurmctld.log" "$dir/slurmd.log" 2>&1)" >&2
    return 1
}

real_slurm_reconfigure() {
    echo "$1" >>"$SLURM_CONF"
    scontrol reconfigure
}

real_slurm_stop() {
    local pid
    for pid in "${REAL_SLURM_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${REAL_SLURM_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    REAL_SLURM_PIDS=()
}

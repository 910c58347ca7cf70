#!/usr/bin/env bash
# Start a one-node SLURM cluster on this machine, idempotently, so the SLURM profile can be
# tested for real (tests/test_slurm.py, CI). Needs root. Installs Debian's slurm-wlm and munge
# when they are missing (apt-get), then starts munged, slurmctld and slurmd.
#
# The cluster: one node (this host, all its cores, its memory), partitions `cpu` (default) and
# `gpu` on the same node (docs/cluster.md, "Proving it"). Accounting storage
# is off (no slurmdbd), so `sacct` has nothing; job completions are logged by jobcomp/filetxt and
# the test profile reads job states with the SLURM executor plugin's `squeue` mode. MinJobAge is
# long so that finished jobs stay visible to `squeue` while Snakemake polls. The node declares one
# GPU (type rtx3090, device /dev/null) that SLURM allocates but no job can compute on.
#
# Usage: scripts/slurm_local.sh [--stop]     exit 0 when the node is up and idle/mixed.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
LOG_DIR=/var/log/slurm
NODE="$(hostname -s)"

log() { printf 'slurm_local: %s\n' "$*" >&2; }

if [[ "$(id -u)" != 0 ]]; then
  log "must run as root (starts munged, slurmctld, slurmd)"; exit 2
fi

if [[ "${1:-}" == "--stop" ]]; then
  for d in slurmd slurmctld munged; do
    if pid="$(pgrep -x "$d" | head -1)"; [[ -n "$pid" ]]; then
      kill "$pid"
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done  # state saved
      log "stopped $d ($pid)"
    fi
  done
  exit 0
fi

node_ready() {
  local state
  state="$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -1)" || return 1
  [[ "$state" == idle* || "$state" == mixed* || "$state" == allocated* ]]
}

# Bump when the config written below changes, so a cluster started by an older version is rebuilt.
CONF_VERSION=3
if command -v sinfo >/dev/null && scontrol ping 2>/dev/null | grep -q UP && node_ready \
   && grep -qx "# cqabench-local-version: $CONF_VERSION" "$CONF" 2>/dev/null; then
  log "already up ($NODE)"; exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  log "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q slurm-wlm munge >/dev/null
fi

# --- munge: the key comes with the package; the socket dir must belong to munge.
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge /etc/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- /usr/sbin/munged
  log "started munged"
fi
for _ in $(seq 1 20); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.5; done

# --- slurm.conf for this host.
# MessageTimeout (default 10 s) bounds how long a client waits for a controller that is down.
# The daemons stop when test_slurm ends but this file stays, and the SLURM executor plugin runs
# `scontrol show config` when it is imported, which every Snakemake start does: with the default,
# each later `snakemake` on this host waited 9 s for the stopped controller, with 3 it waits 2 s.
# On one node, an answer from a running controller takes milliseconds.
CPUS="$(nproc)"
MEM_MB="$(awk '/MemTotal/ {printf "%d", $2/1024*0.9}' /proc/meminfo)"
install -d -m 0755 "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
cat >"$CONF.new" <<EOF
# Written by cqabench scripts/slurm_local.sh: a one-node test cluster, not a production config.
# cqabench-local-version: $CONF_VERSION
ClusterName=cqabench-local
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
MinJobAge=3600
MessageTimeout=3
SlurmdTimeout=300
InactiveLimit=0
KillWait=30
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:rtx3090:1 State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$NODE Default=NO MaxTime=INFINITE State=UP
EOF
# One GPU of type rtx3090, as a count without a device file: SLURM allocates it like a card, so
# typed GPU requests (--gpus=rtx3090:1) and the gpu partition are exercised; no job can use it.
printf 'NodeName=%s Name=gpu Type=rtx3090 File=/dev/null\n' "$NODE" >"$CONF_DIR/gres.conf.new"
changed=1
if [[ -f "$CONF" ]] && cmp -s "$CONF" "$CONF.new" && [[ -f "$CONF_DIR/gres.conf" ]] \
   && cmp -s "$CONF_DIR/gres.conf" "$CONF_DIR/gres.conf.new"; then changed=0; fi
mv "$CONF.new" "$CONF"
mv "$CONF_DIR/gres.conf.new" "$CONF_DIR/gres.conf"
chmod 0644 "$CONF" "$CONF_DIR/gres.conf"

if [[ "$changed" == 1 ]]; then
  for d in slurmd slurmctld; do
    if pid="$(pgrep -x "$d" | head -1)"; [[ -n "$pid" ]]; then
      kill "$pid"
      # It saves its state before exiting: wait, or the check below finds it still alive.
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      log "stopped $d ($pid): config changed"
    fi
  done
fi
if ! pgrep -x slurmctld >/dev/null; then
  /usr/sbin/slurmctld -c   # -c: start clean, ignore state from an older config
  log "started slurmctld"
fi
for _ in $(seq 1 30); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.5; done
if ! pgrep -x slurmd >/dev/null; then
  /usr/sbin/slurmd
  log "started slurmd"
fi

for _ in $(seq 1 60); do
  if node_ready; then log "up: node $NODE, $CPUS CPUs, ${MEM_MB} MB, partitions cpu (default), gpu"; exit 0; fi
  state="$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -1 || true)"
  if [[ "$state" == down* || "$state" == drain* ]]; then
    scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
  fi
  sleep 1
done
log "node $NODE did not become ready; see $LOG_DIR/slurmctld.log and $LOG_DIR/slurmd.log"
sinfo >&2 || true
exit 1

#!/usr/bin/env bash
# A one-node SLURM cluster on this machine (Debian): munge, MariaDB + slurmdbd (so that the executor plugin's
# `sacct` status checks work), slurmctld and slurmd, as plain background daemons (no systemd needed). Idempotent.
# The daemons it starts are recorded in $STATE so that scripts/slurm-down.sh stops exactly those (by PID).
# Recipe and pitfalls: in the comments below. Needs root and apt.
set -euo pipefail
STATE=${LWNMT_SLURM_STATE:-/run/lwnmt-slurm-started}
t0=$(date +%s)
log() { echo "[slurm-up +$(( $(date +%s) - t0 ))s] $*"; }
started() { echo "$1 $2" >> "$STATE"; }   # name, pid file

pkgs="slurmctld slurmd slurm-client munge slurmdbd mariadb-server"
if ! dpkg -s $pkgs >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi
log "packages ready"
touch "$STATE"

[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
  started munged /run/munge/munged.pid
fi
log "munged up"

host=$(hostname -s)
node=$(slurmd -C | head -n1)
install -d -m 0755 /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=ci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
ReturnToService=2
MinJobAge=300
KillWait=30
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

install -d -o mysql -g mysql -m 0755 /run/mysqld
if ! mariadb-admin ping >/dev/null 2>&1; then
  setsid /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 >/var/log/mariadbd-ci.log 2>&1 </dev/null &
  for _ in $(seq 100); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.2; done
  started mariadbd /run/mysqld/mysqld.pid
fi
log "mariadb up"
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm-ci';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm-ci
StorageLoc=slurm_acct_db
CONF
chmod 0600 /etc/slurm/slurmdbd.conf   # slurmdbd refuses a config others can read
if ! sacctmgr -n list cluster >/dev/null 2>&1; then
  /usr/sbin/slurmdbd
  for _ in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
  started slurmdbd /run/slurmdbd.pid
fi
log "slurmdbd up"

# A controller this script starts is a throwaway test cluster: `-c` drops the job state a previous, killed run saved
# (CI once found its own earlier job "running" again, so the node stayed `mixed` and never became idle).
if ! scontrol ping 2>/dev/null | grep -q UP; then   # slurmdbd first, so that the cluster registers itself
  /usr/sbin/slurmctld -c
  for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
  started slurmctld /run/slurmctld.pid
fi
if ! { [ -s /run/slurmd.pid ] && kill -0 "$(cat /run/slurmd.pid)" 2>/dev/null; }; then
  /usr/sbin/slurmd -c   # -c: clear the job locks a killed slurmd left behind
  started slurmd /run/slurmd.pid
fi
state=""
for _ in $(seq 150); do
  state=$(sinfo -h -N -o %T 2>/dev/null | head -n1)
  [ "$state" = idle ] && break; sleep 0.2
done
log "node state: $state"
if [ "$state" != idle ]; then
  echo "slurm-up: the node is '${state:-unknown}', not idle, after 30 s; sinfo, squeue and the daemons' logs follow" >&2
  sinfo -N -l >&2 || true; squeue >&2 || true
  tail -n 30 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2
  exit 1
fi

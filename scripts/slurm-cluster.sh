#!/usr/bin/env bash
# A one-node Slurm cluster in a temporary folder, for scripts/slurm-check.sh: munged, MariaDB,
# slurmdbd (so `sacct` answers), slurmctld and slurmd as background processes of this shell, on
# free loopback ports, with no cgroups and no systemd. Source it, then call `slurm_up DIR`;
# `slurm_down` stops every daemon it started, by pid (trap it on EXIT).
#
#   . scripts/slurm-cluster.sh && trap slurm_down EXIT && slurm_up /tmp/slurm && sbatch --wrap 'hostname'
#
# Needs slurmctld, slurmd, slurmdbd, munged and mariadbd (Debian: slurm-wlm slurmdbd munge
# mariadb-server), run as root (the daemons run as root: SlurmUser=root).

SLURM_PIDS=()

slurm_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_wait() { # slurm_wait SECONDS WHAT COMMAND...
  local limit=$1 what=$2
  shift 2
  for _ in $(seq "$limit"); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "slurm-cluster: $what did not come up within ${limit}s" >&2
  return 1
}

slurm_up() {
  local dir=$1 cpus mem mysql_port dbd_port ctld_port d_port
  mkdir -p "$dir"/{state,spool,db,run,log}
  dir=$(cd "$dir" && pwd)
  SLURM_DIR=$dir
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  mysql_port=$(slurm_free_port); dbd_port=$(slurm_free_port); ctld_port=$(slurm_free_port); d_port=$(slurm_free_port)

  # munge: a key of this cluster's own, on a socket of its own.
  dd if=/dev/urandom bs=1 count=1024 of="$dir/run/munge.key" 2>/dev/null
  chmod 400 "$dir/run/munge.key"
  munged --force --key-file="$dir/run/munge.key" --socket="$dir/run/munge.sock" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/run/munge.seed" || return 1
  SLURM_PIDS+=("$(cat "$dir/run/munged.pid")")

  # MariaDB for slurmdbd: on loopback only, a user for Slurm.
  mariadb-install-db --datadir="$dir/db" --user=root --auth-root-authentication-method=normal >"$dir/log/mariadb-install.log" 2>&1 || return 1
  mariadbd --datadir="$dir/db" --user=root --port="$mysql_port" --bind-address=127.0.0.1 \
    --socket="$dir/run/mysql.sock" --pid-file="$dir/run/mysql.pid" --log-error="$dir/log/mariadb.log" &
  SLURM_PIDS+=("$!")
  slurm_wait 60 MariaDB mariadb --socket="$dir/run/mysql.sock" -uroot -e 'select 1' || return 1
  mariadb --socket="$dir/run/mysql.sock" -uroot -e \
    "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON *.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" || return 1

  cat >"$dir/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$mysql_port
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$dir/slurmdbd.conf"
  cat >"$dir/slurm.conf" <<EOF
ClusterName=bertpipe-check
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
MinJobAge=3600
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$dbd_port
AccountingStoragePass=$dir/run/munge.sock
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=check Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  # slurmdbd reads the slurmdbd.conf beside $SLURM_CONF.
  export SLURM_CONF=$dir/slurm.conf
  slurmdbd -D >"$dir/log/slurmdbd.out" 2>&1 &
  SLURM_PIDS+=("$!")
  slurm_wait 60 slurmdbd bash -c "grep -q 'slurmdbd version .* started' '$dir/log/slurmdbd.log'" || return 1
  sacctmgr -i add cluster bertpipe-check >/dev/null 2>&1
  slurmctld -D -i -f "$dir/slurm.conf" >"$dir/log/slurmctld.out" 2>&1 &
  SLURM_PIDS+=("$!")
  slurm_wait 60 slurmctld scontrol ping || return 1
  slurmd -D -f "$dir/slurm.conf" >"$dir/log/slurmd.out" 2>&1 &
  SLURM_PIDS+=("$!")
  slurm_wait 60 "the node" bash -c "sinfo -h -N -o %T | grep -Eq '^idle'" || return 1
  echo "slurm-cluster: one node ($cpus CPUs, $mem MB) up in $dir (slurmctld port $ctld_port)" >&2
}

# Stops the daemons in the reverse order of their start, each before the next (slurmd, then
# slurmctld while slurmdbd still listens, …), by pid.
slurm_down() {
  local pid i
  for ((i = ${#SLURM_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${SLURM_PIDS[$i]}
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null
  done
  SLURM_PIDS=()
}

#!/usr/bin/env bash
# Allot's local Slurm stack for tests and development: the proven recipe of
# shared/reference/slurm/start-local-slurm.sh (see its NOTES.md), kept here so the project owns it.
# Allot's tests seed their own tree: SLURM_SEED defaults to none here.
: "${SLURM_SEED:=none}"
export SLURM_SEED
# start-local-slurm.sh -- run a REAL one-machine Slurm accounting stack from Debian 12 packages
# (MariaDB + munge + slurmdbd + slurmctld + slurmd [+ slurmrestd]) so that code can be tested
# against real sacctmgr / sacct / sshare / sreport instead of mocks.
#
# Usage (as root, Debian 12 bookworm, no systemd needed):
#   start-local-slurm.sh [start]   install (apt), configure, start everything, seed demo tree (idempotent)
#   start-local-slurm.sh stop      stop the daemons this recipe runs (by the PIDs in their pid files)
#   start-local-slurm.sh status    show what is running
#   start-local-slurm.sh reset     stop, drop the accounting database and controller state, then start
#
# Environment knobs (defaults in brackets):
#   SLURM_CLUSTER [lab]  SLURM_NODE [gpu01]  SLURM_GPUS [8]  SLURM_GPU_TYPE [a100]
#   SLURM_EXTRA_GPU_TYPES [h100 h100-mig_1g.10gb h100-mig_3g.40gb]  more GPU types on the node, SLURM_GPUS
#                       of each (fake devices too): Allot's tests use A100s, its demo cluster slurm-lab is H100 —
#                       one stack serves both; the two MIG profiles of an H100 flavor named h100-mig are Allot's
#                       GRES types for a MIG flavor (<flavor>_<profile>: quotas/policy/slurm/slices.py)
#   SLURM_NODE_CPUS [16] SLURM_NODE_MEM_MB [16000]   (advertised, not real: config_overrides)
#   SLURM_DB_NAME [slurm_acct_db] SLURM_DB_USER [slurm] SLURM_DB_PASS [random, kept in slurmdbd.conf]
#   MARIADB_ADMIN_ARGS  extra args for the `mariadb` admin client (default: auto-detect root via
#                       unix socket, then root with empty password on 127.0.0.1:3306)
#   SLURM_SEED [demo]   demo = create the demo org tree / QOS / users; none = cluster only
#   SLURM_DEMO_UNIX_USERS [1]  create local Unix users for Allot's demo members (alice bob carol dave
#                       erin frank) before any association names them (needed for sbatch)
#   SLURM_WITH_RESTD [0]  1 = also run slurmrestd (JWT auth) on 127.0.0.1:6820
#
# Only Debian packages are used. Files written: /etc/slurm/{slurm,slurmdbd,gres}.conf,
# /var/lib/slurm/..., /var/log/slurm/..., /run/local-slurm/... . Exit code != 0 on failure.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # before anything changes directory
CLUSTER=${SLURM_CLUSTER:-lab}
NODE=${SLURM_NODE:-gpu01}
GPUS=${SLURM_GPUS:-8}
GPU_TYPE=${SLURM_GPU_TYPE:-a100}
EXTRA_GPU_TYPES=${SLURM_EXTRA_GPU_TYPES-h100 h100-mig_1g.10gb h100-mig_3g.40gb}
NODE_CPUS=${SLURM_NODE_CPUS:-16}
NODE_MEM=${SLURM_NODE_MEM_MB:-16000}
DB_NAME=${SLURM_DB_NAME:-slurm_acct_db}
DB_USER=${SLURM_DB_USER:-slurm}
SEED=${SLURM_SEED:-demo}
DEMO_UNIX_USERS=${SLURM_DEMO_UNIX_USERS:-1}
WITH_RESTD=${SLURM_WITH_RESTD:-0}
RESTD_ADDR=127.0.0.1:6820

ETC=/etc/slurm
STATE=/var/lib/slurm/slurmctld
SPOOL=/var/lib/slurm/slurmd
FAKEGPU=/var/lib/slurm/fake-gpu
LOGDIR=/var/log/slurm
RUNDIR=/run/local-slurm
JWT_KEY=$STATE/jwt_hs256.key
PKGS=(munge slurmdbd slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin mariadb-client)

T0=$SECONDS
log()  { printf '[local-slurm %3ss] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die()  { printf '[local-slurm] ERROR: %s\n' "$*" >&2; exit 1; }
# shellcheck disable=SC2154
trap 'rc=$?; printf "[local-slurm] ERROR: command failed (rc=%s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2; exit $rc' ERR

[ "$(id -u)" = 0 ] || die "must run as root"
cd / # never depend on the caller's working directory

# wait_for SECONDS DESCRIPTION COMMAND... : poll until COMMAND succeeds
wait_for() {
  local t=$1 what=$2; shift 2
  local end=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.5
  done
  log "ready: $what"
}

# pid_alive PIDFILE NAME : pid file exists and points at a live process called NAME
pid_alive() {
  local pf=$1 name=$2 pid
  [ -s "$pf" ] || return 1
  pid=$(tr -dc 0-9 < "$pf")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$name" ]
}

# stop_pidfile PIDFILE NAME : TERM the process in PIDFILE (only if it is NAME), wait for it to exit
stop_pidfile() {
  local pf=$1 name=$2 pid
  if pid_alive "$pf" "$name"; then
    pid=$(tr -dc 0-9 < "$pf")
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local end=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
      [ $SECONDS -lt $end ] || { log "$name did not exit in 30s, sending KILL"; kill -KILL "$pid" 2>/dev/null || true; break; }
      sleep 0.3
    done
  fi
  rm -f "$pf"
}

# ---------------------------------------------------------------- packages
ensure_packages() {
  local missing=() p
  [ "$WITH_RESTD" = 1 ] && PKGS+=(curl)
  mariadb_reachable || PKGS+=(mariadb-server)
  for p in "${PKGS[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then log "packages already installed"; return; fi
  log "apt-get install ${missing[*]}"
  # keep package postinst scripts from starting daemons (no systemd here); we start them ourselves
  local own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  local ok=1
  apt-get update -qq >/dev/null || ok=0
  [ $ok = 1 ] && { apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || ok=0; }
  [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $ok = 1 ] || die "apt-get install failed for: ${missing[*]}"
  log "installed: $(slurmctld -V 2>/dev/null)"
}

# ---------------------------------------------------------------- mariadb
MYSQL=()
mariadb_reachable() {
  command -v mariadb >/dev/null 2>&1 || command -v mysql >/dev/null 2>&1 || {
    # no client yet: fall back to a plain TCP probe of 127.0.0.1:3306
    (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; return; }
  detect_mysql_admin >/dev/null 2>&1
}
detect_mysql_admin() {
  local cli; cli=$(command -v mariadb || command -v mysql)
  if [ -n "${MARIADB_ADMIN_ARGS:-}" ]; then
    # shellcheck disable=SC2206
    MYSQL=("$cli" $MARIADB_ADMIN_ARGS)
    "${MYSQL[@]}" -N -e 'select 1' >/dev/null 2>&1 && return 0
    return 1
  fi
  MYSQL=("$cli" --protocol=socket -uroot)
  "${MYSQL[@]}" -N -e 'select 1' >/dev/null 2>&1 && return 0
  MYSQL=("$cli" --protocol=tcp -h127.0.0.1 -P3306 -uroot)
  "${MYSQL[@]}" -N -e 'select 1' >/dev/null 2>&1 && return 0
  return 1
}
ensure_mariadb() {
  if detect_mysql_admin; then log "MariaDB already running (admin: ${MYSQL[*]:1})"; return; fi
  if (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; then
    die "something listens on 127.0.0.1:3306 but root login failed; set MARIADB_ADMIN_ARGS='-h127.0.0.1 -uUSER -pPASS'"
  fi
  [ -x /usr/sbin/mariadbd ] || die "mariadb-server is not installed and no MariaDB is reachable"
  mkdir -p "$RUNDIR" /run/mysqld; chown mysql:mysql /run/mysqld
  [ -d /var/lib/mysql/mysql ] || { log "initialising MariaDB datadir"; mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null; }
  log "starting MariaDB"
  # Debian's my.cnf has no user=mysql: mariadbd refuses to run as root without --user
  start-stop-daemon --start --background --make-pidfile --pidfile "$RUNDIR/mariadbd.pid" \
    --exec /usr/sbin/mariadbd -- --user=mysql
  wait_for 60 "MariaDB" detect_mysql_admin || die "MariaDB did not come up (see /var/lib/mysql/*.err or run /usr/sbin/mariadbd --user=mysql by hand)"
}

ensure_db_user() {
  local pass=${SLURM_DB_PASS:-}
  if [ -z "$pass" ] && [ -f "$ETC/slurmdbd.conf" ]; then
    pass=$(sed -n 's/^StoragePass=//p' "$ETC/slurmdbd.conf" | head -1)
  fi
  [ -n "$pass" ] || pass=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  case $pass in *[\'\"\#\\]*) die "SLURM_DB_PASS must not contain quotes, backslash or '#'";; esac
  DB_PASS=$pass
  "${MYSQL[@]}" <<SQL || die "could not create database/user in MariaDB"
CREATE DATABASE IF NOT EXISTS \`$DB_NAME\`;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON \`$DB_NAME\`.* TO '$DB_USER'@'localhost';
GRANT ALL PRIVILEGES ON \`$DB_NAME\`.* TO '$DB_USER'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
  log "database $DB_NAME / user $DB_USER ready"
}

# ---------------------------------------------------------------- munge
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
ensure_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  fi
  if munge_ok; then log "munged already running"; return; fi
  mkdir -p /run/munge; chown munge:munge /run/munge; chmod 0755 /run/munge
  log "starting munged"
  # munged daemonizes itself and writes /run/munge/munged.pid; --force clears a stale socket
  runuser -u munge -- /usr/sbin/munged --force
  wait_for 20 "munged" munge_ok || die "munged did not start (see /var/log/munge/munged.log)"
}

# ---------------------------------------------------------------- config files
CHANGED_DBD=0 CHANGED_CTL=0
# install_file DEST MODE OWNER : stdin -> DEST if content differs; echo 1 if changed
install_file() {
  local dest=$1 mode=$2 owner=$3 tmp
  tmp=$(mktemp); cat > "$tmp"
  if [ -f "$dest" ] && cmp -s "$tmp" "$dest"; then rm -f "$tmp"; echo 0; return; fi
  install -m "$mode" -o "${owner%:*}" -g "${owner#*:}" "$tmp" "$dest"; rm -f "$tmp"; echo 1
}

# gpu:a100:8,gpu:h100:8 — GPUS of each type, the first type first
node_gres() {
  local t out=""
  for t in $GPU_TYPE $EXTRA_GPU_TYPES; do out="$out${out:+,}gpu:$t:$GPUS"; done
  echo "$out"
}

gres_lines() {
  local t first=0
  for t in $GPU_TYPE $EXTRA_GPU_TYPES; do
    echo "NodeName=$NODE Name=gpu Type=$t File=$FAKEGPU/nvidia[$first-$((first + GPUS - 1))]"
    first=$((first + GPUS))
  done
}

# Allot's demo members (quotas/demo.py SLURM_USERS) as Unix users, before sacctmgr names them:
# slurmctld resolves a uid when it learns an association, and a user created later stays unknown
# until `scontrol reconfigure`
ensure_demo_unix_users() {
  [ "$DEMO_UNIX_USERS" = 1 ] || return 0
  local u
  for u in alice bob carol dave erin frank; do id "$u" >/dev/null 2>&1 || useradd -M -s /bin/sh "$u"; done
}

# job_submit.lua once Allot has published a policy snapshot (./dev run does, with this stack up;
# or manage.py allot_slurm_policy): without one it would refuse every job
ensure_job_submit() {
  if [ -f "$ETC/allot-policy.lua" ] && [ -f "$HERE/job_submit.lua" ]; then
    if ! cmp -s "$HERE/job_submit.lua" "$ETC/job_submit.lua" || ! grep -q '^JobSubmitPlugins=lua' "$ETC/slurm.conf"; then
      log "installing Allot's job_submit.lua (a policy snapshot is at $ETC/allot-policy.lua)"
      bash "$HERE/install-job-submit.sh" >/dev/null
    fi
  else
    log "job_submit.lua not installed: no Allot policy snapshot at $ETC/allot-policy.lua yet (./dev run publishes one when this stack is up)"
  fi
}

write_configs() {
  mkdir -p "$ETC" "$STATE" "$SPOOL" "$LOGDIR" "$FAKEGPU" "$RUNDIR"
  chown slurm:slurm "$STATE" "$SPOOL" "$LOGDIR"
  # fake GPUs: gres/gpu needs one device file per GPU; a File-less gpu gres is dropped by slurmd
  # ("Removing file-less GPU"), and regular files are rejected ("not a valid character or block
  # device"). Symlinks to /dev/null are accepted.
  local i
  local types=($GPU_TYPE $EXTRA_GPU_TYPES)
  for ((i = 0; i < GPUS * ${#types[@]}; i++)); do ln -sfn /dev/null "$FAKEGPU/nvidia$i"; done
  if [ ! -s "$JWT_KEY" ]; then
    (umask 077; head -c 32 /dev/urandom > "$JWT_KEY"); chown slurm:slurm "$JWT_KEY"; chmod 0600 "$JWT_KEY"
  fi

  local c
  c=$(install_file "$ETC/slurmdbd.conf" 0600 slurm:slurm <<EOF
# slurmdbd.conf -- generated by start-local-slurm.sh (must be 0600 and owned by SlurmUser)
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
DbdHost=localhost
SlurmUser=slurm
LogFile=$LOGDIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageLoc=$DB_NAME
StorageUser=$DB_USER
StoragePass=$DB_PASS
EOF
)
  CHANGED_DBD=$c

  c=$(install_file "$ETC/slurm.conf" 0644 root:root <<EOF
# slurm.conf -- generated by start-local-slurm.sh: one-machine cluster with fake GPUs
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: plain process tracking, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
MailProg=/bin/true
# advertise NODE_CPUS/NODE_MEM even if the machine is smaller (else node is drained "Low CPUs")
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
# short scheduling passes: preemption (reclaim) is decided in a scheduling pass, default 60s apart
SchedulerParameters=sched_interval=10,bf_interval=10
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
# accounting
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu,gres/gpu:$GPU_TYPE$(for t in $EXTRA_GPU_TYPES; do printf ',gres/gpu:%s' "$t"; done)
JobCompType=jobcomp/none
# fair share (multifactor, fair tree is the default algorithm)
PriorityType=priority/multifactor
PriorityDecayHalfLife=7-0
PriorityCalcPeriod=1
PriorityWeightFairshare=10000
# QOS weight above fairshare+age so guaranteed jobs always queue ahead of burst jobs
PriorityWeightQOS=20000
PriorityWeightAge=1000
PriorityWeightJobSize=0
PriorityWeightPartition=0
# preemption: QOS based, preempted jobs are requeued
PreemptType=preempt/qos
PreemptMode=REQUEUE
# Allot's submission check, kept across restarts once deploy/slurm/install-job-submit.sh installed it
$([ -f "$ETC/job_submit.lua" ] && echo "JobSubmitPlugins=lua" || echo "# (no job_submit.lua installed)")
# generic resources
GresTypes=gpu
NodeName=$NODE NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$NODE_CPUS RealMemory=$NODE_MEM Gres=$(node_gres) State=UNKNOWN
PartitionName=gpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP TRESBillingWeights="CPU=1.0,Mem=0.25G,GRES/gpu=10.0"
EOF
)
  CHANGED_CTL=$c
  local g
  g=$(install_file "$ETC/gres.conf" 0644 root:root <<EOF
# gres.conf -- fake GPUs: symlinks to /dev/null (created by start-local-slurm.sh)
$(gres_lines)
EOF
)
  [ "$g" = 1 ] && CHANGED_CTL=1
  log "config written (slurmdbd.conf changed=$CHANGED_DBD, slurm.conf/gres.conf changed=$CHANGED_CTL)"
}

# ---------------------------------------------------------------- slurm daemons
dbd_ok()  { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }
ctld_ok() { [[ $(scontrol ping 2>/dev/null) == *'is UP'* ]]; }
node_state() { sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -1; }
# registered = slurmctld has heard from slurmd: state known and not flagged '*' (not responding)
node_registered() { local s; s=$(node_state); [[ -n $s && $s != *'*' && $s != unknown* ]]; }

ensure_slurmdbd() {
  if pid_alive /run/slurmdbd.pid slurmdbd; then
    if [ "$CHANGED_DBD" = 1 ]; then stop_pidfile /run/slurmdbd.pid slurmdbd; else log "slurmdbd already running"; fi
  fi
  if ! pid_alive /run/slurmdbd.pid slurmdbd; then
    log "starting slurmdbd"
    slurmdbd || die "slurmdbd failed to start (see $LOGDIR/slurmdbd.log)"
  fi
  wait_for 60 "slurmdbd" dbd_ok || die "slurmdbd not answering (see $LOGDIR/slurmdbd.log)"
}

ensure_cluster() {
  local out; out=$(sacctmgr -n -P show cluster format=cluster) || die "sacctmgr show cluster failed"
  if grep -qx "$CLUSTER" <<<"$out"; then
    log "cluster $CLUSTER exists"
  else
    sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER failed"
    log "cluster $CLUSTER added"
  fi
}

ensure_slurmctld() {
  if pid_alive /run/slurmctld.pid slurmctld; then
    if [ "$CHANGED_CTL" = 1 ] || [ "$CHANGED_DBD" = 1 ]; then stop_pidfile /run/slurmctld.pid slurmctld; else log "slurmctld already running"; fi
  fi
  if ! pid_alive /run/slurmctld.pid slurmctld; then
    log "starting slurmctld"
    slurmctld || die "slurmctld failed to start (see $LOGDIR/slurmctld.log)"
  fi
  wait_for 60 "slurmctld" ctld_ok || die "slurmctld not answering (see $LOGDIR/slurmctld.log)"
  # gres/gpu TRES rows are created in the DB when slurmctld registers; limits on gres/gpu need them
  wait_for 60 "TRES gres/gpu registered" bash -c 'o=$(sacctmgr -n -P show tres format=type,name) && grep -qx "gres|gpu" <<<"$o"' \
    || die "TRES gres/gpu never appeared in the accounting DB (AccountingStorageTRES / slurmctld registration)"
}

ensure_slurmd() {
  if pid_alive /run/slurmd.pid slurmd; then
    if [ "$CHANGED_CTL" = 1 ]; then stop_pidfile /run/slurmd.pid slurmd; else log "slurmd already running"; fi
  fi
  if ! pid_alive /run/slurmd.pid slurmd; then
    log "starting slurmd -N $NODE"
    slurmd -N "$NODE" || die "slurmd failed to start (see $LOGDIR/slurmd.log)"
  fi
  wait_for 60 "node $NODE registered" node_registered || die "node $NODE never registered (see $LOGDIR/slurmd.log)"
  local s; s=$(node_state)
  if [[ $s == *drain* || $s == down* ]]; then
    # a node drained by an earlier bad config stays drained across restarts: resume it
    log "node $NODE is '$s' (reason: $(sinfo -h -n "$NODE" -o '%E')); resuming"
    scontrol update nodename="$NODE" state=resume || true
    sleep 1; s=$(node_state)
  fi
  [[ $s =~ ^(idle|mixed|allocated|completing) ]] || die "node $NODE is '$s': $(sinfo -h -n "$NODE" -o '%E')"
  log "node $NODE is $s with $(sinfo -h -n "$NODE" -o '%G')"
}

restd_ok() { local t; t=$(scontrol token username=root lifespan=60 2>/dev/null | cut -d= -f2);
  curl -sf -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $t" "http://$RESTD_ADDR/slurmdb/v0.0.38/qos" >/dev/null; }
ensure_slurmrestd() {
  [ "$WITH_RESTD" = 1 ] || return 0
  # slurmrestd refuses to run as root or as SlurmUser
  id slurmrestd >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin slurmrestd
  if pid_alive "$RUNDIR/slurmrestd.pid" slurmrestd; then
    if [ "$CHANGED_CTL" = 1 ]; then stop_pidfile "$RUNDIR/slurmrestd.pid" slurmrestd; else log "slurmrestd already running"; fi
  fi
  if ! pid_alive "$RUNDIR/slurmrestd.pid" slurmrestd; then
    log "starting slurmrestd (rest_auth/jwt) on $RESTD_ADDR"
    SLURM_JWT=daemon start-stop-daemon --start --background --make-pidfile --pidfile "$RUNDIR/slurmrestd.pid" \
      --chuid slurmrestd --output "$LOGDIR/slurmrestd.log" --exec /usr/sbin/slurmrestd -- -a rest_auth/jwt "$RESTD_ADDR"
  fi
  wait_for 30 "slurmrestd" restd_ok || die "slurmrestd not answering on $RESTD_ADDR (see $LOGDIR/slurmrestd.log)"
}

# ---------------------------------------------------------------- accounting objects (idempotent)
SACCTMGR=(sacctmgr -i)
# ensure_qos NAME [Key=Value ...]
ensure_qos() {
  local name=$1; shift
  local out; out=$(sacctmgr -n -P show qos format=name) || die "sacctmgr show qos failed"
  if grep -qx "$name" <<<"$out"; then
    "${SACCTMGR[@]}" modify qos where name="$name" set "$@" >/dev/null || die "modify qos $name failed"
  else
    "${SACCTMGR[@]}" add qos "$name" "$@" >/dev/null || die "add qos $name failed"
  fi
}
# ensure_account NAME PARENT [Key=Value ...]  (Description/Organization + association settings)
ensure_account() {
  local name=$1 parent=$2; shift 2
  local out cur
  out=$(sacctmgr -n -P show assoc where cluster="$CLUSTER" account="$name" format=account,user,parentname) || die "sacctmgr show assoc failed"
  cur=$(grep -m1 "^$name||" <<<"$out" || true)
  if [ -z "$cur" ]; then
    "${SACCTMGR[@]}" add account "$name" cluster="$CLUSTER" parent="$parent" "$@" >/dev/null || die "add account $name failed"
  else
    if [ "${cur##*|}" != "$parent" ]; then
      "${SACCTMGR[@]}" modify account where name="$name" cluster="$CLUSTER" set parent="$parent" >/dev/null || die "reparent $name failed"
    fi
    [ $# -eq 0 ] || "${SACCTMGR[@]}" modify account where name="$name" cluster="$CLUSTER" set "$@" >/dev/null || die "modify account $name failed"
  fi
}
# ensure_user USER ACCOUNT [Key=Value ...]   (association settings for USER in ACCOUNT)
ensure_user() {
  local user=$1 acct=$2; shift 2
  if [ -n "$(sacctmgr -n -P show assoc where cluster="$CLUSTER" account="$acct" user="$user" format=user)" ]; then
    [ $# -eq 0 ] || "${SACCTMGR[@]}" modify user where name="$user" account="$acct" cluster="$CLUSTER" set "$@" >/dev/null || die "modify user $user/$acct failed"
  else
    "${SACCTMGR[@]}" add user "$user" account="$acct" cluster="$CLUSTER" "$@" >/dev/null || die "add user $user/$acct failed"
  fi
}
ensure_default_account() { "${SACCTMGR[@]}" modify user where name="$1" set DefaultAccount="$2" >/dev/null || die "default account $1 failed"; }

seed_demo() {
  log "seeding demo org tree (acme -> dept -> team -> project), QOS and users"
  local u
  if [ "$DEMO_UNIX_USERS" = 1 ]; then
    # create Unix users BEFORE the sacctmgr users: slurmctld resolves uids when it learns the
    # association; a user created later is unknown until `scontrol reconfigure`
    ensure_demo_unix_users
  fi
  # QOS: one 'guar-<team>' QOS per guaranteed pool (GrpTRES = the guarantee, counts only jobs in
  # that QOS) and one preemptible 'burst' QOS shared by everybody (MaxTRESPerAccount = borrow cap per
  # account). No gres/gpu GrpTRES on associations: association usage counts burst jobs too, so it
  # would let a team's borrowing block guaranteed jobs (see research/slurm.md).
  ensure_qos burst Description="preemptible borrowing above guarantee" Priority=10 \
    PreemptMode=requeue GraceTime=20 PreemptExemptTime=00:00:30 UsageFactor=0.5 MaxTRESPerAccount=gres/gpu=4
  ensure_qos guar-nlp     Description="guaranteed gpu quota research/nlp"   Priority=1000 Preempt=burst GrpTRES=gres/gpu=3
  ensure_qos guar-vision  Description="guaranteed gpu quota research/vision" Priority=1000 Preempt=burst GrpTRES=gres/gpu=2
  ensure_qos guar-serving Description="guaranteed gpu quota prod/serving"   Priority=1000 Preempt=burst GrpTRES=gres/gpu=3
  # accounts: org -> department -> team -> project
  ensure_account acme     root     Description="acme corp" Organization=acme Fairshare=100
  ensure_account research acme     Description="research department" Organization=acme Fairshare=60
  ensure_account prod     acme     Description="production department" Organization=acme Fairshare=40
  ensure_account nlp      research Description="team nlp" Organization=acme Fairshare=50 \
    MaxTRES=gres/gpu=4 QOS=guar-nlp,burst DefaultQOS=guar-nlp
  ensure_account vision   research Description="team vision" Organization=acme Fairshare=50 \
    MaxTRES=gres/gpu=4 QOS=guar-vision,burst DefaultQOS=guar-vision
  ensure_account serving  prod     Description="team serving" Organization=acme Fairshare=100 \
    MaxTRES=gres/gpu=4 QOS=guar-serving,burst DefaultQOS=guar-serving
  ensure_account llm-pretrain nlp  Description="project llm-pretrain" Organization=acme Fairshare=70
  ensure_account llm-eval     nlp  Description="project llm-eval" Organization=acme Fairshare=30
  # users
  ensure_user alice nlp Fairshare=1
  ensure_user alice llm-pretrain Fairshare=1
  ensure_user dave  nlp Fairshare=2
  ensure_user dave  llm-eval Fairshare=1
  ensure_user bob   vision Fairshare=1
  ensure_user carol serving Fairshare=1
  ensure_default_account alice nlp
  ensure_default_account dave nlp
  ensure_default_account bob vision
  ensure_default_account carol serving
  scontrol reconfigure >/dev/null 2>&1 || true
  log "demo tree ready: $(sacctmgr -n -P show assoc where cluster="$CLUSTER" format=account | sort -u | tr '\n' ' ')"
}

# ---------------------------------------------------------------- commands
do_start() {
  ensure_packages
  ensure_mariadb
  ensure_db_user
  ensure_munge
  ensure_demo_unix_users
  write_configs
  ensure_slurmdbd
  ensure_cluster
  ensure_slurmctld
  ensure_slurmd
  ensure_slurmrestd
  case $SEED in demo) seed_demo ;; none) ;; *) die "SLURM_SEED must be demo or none" ;; esac
  ensure_job_submit
  log "OK: Slurm $(sinfo -V | awk '{print $2}') cluster '$CLUSTER' up; node $NODE $(node_state); took $((SECONDS - T0))s"
}

do_stop() {
  stop_pidfile "$RUNDIR/slurmrestd.pid" slurmrestd
  stop_pidfile /run/slurmd.pid slurmd
  stop_pidfile /run/slurmctld.pid slurmctld
  stop_pidfile /run/slurmdbd.pid slurmdbd
  stop_pidfile /run/munge/munged.pid munged
  # MariaDB only if this script started it
  stop_pidfile "$RUNDIR/mariadbd.pid" mariadbd
  log "stopped"
}

do_status() {
  local d pf
  for d in mariadbd:$RUNDIR/mariadbd.pid munged:/run/munge/munged.pid slurmdbd:/run/slurmdbd.pid \
           slurmctld:/run/slurmctld.pid slurmd:/run/slurmd.pid slurmrestd:$RUNDIR/slurmrestd.pid; do
    pf=${d#*:}; d=${d%%:*}
    if pid_alive "$pf" "$d"; then echo "$d: running (pid $(tr -dc 0-9 < "$pf"))"; else echo "$d: not running (by its pid file)"; fi
  done
  sinfo 2>/dev/null || true
}

do_reset() {
  do_stop
  detect_mysql_admin || ensure_mariadb
  log "dropping database $DB_NAME and controller state"
  "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS \`$DB_NAME\`" || die "drop database failed"
  rm -rf "${STATE:?}"/* "${SPOOL:?}"/*
  do_start
}

# The GPU types changed since the stack last started: slurmctld's saved usage is kept per TRES and no longer
# fits (slurmctld 22.05 was seen to die resetting an account's usage with it), so such a stack starts anew.
tres_changed() {
  local want
  want="AccountingStorageTRES=gres/gpu,gres/gpu:$GPU_TYPE$(for t in $EXTRA_GPU_TYPES; do printf ',gres/gpu:%s' "$t"; done)"
  [ -f "$ETC/slurm.conf" ] && grep -q '^AccountingStorageTRES=' "$ETC/slurm.conf" && ! grep -qxF "$want" "$ETC/slurm.conf"
}

case ${1:-start} in
  start)  if tres_changed; then log "the GPU types changed: starting anew (reset)"; do_reset; else do_start; fi ;;
  stop)   do_stop ;;
  status) do_status ;;
  reset)  do_reset ;;
  *) echo "usage: $0 [start|stop|status|reset]" >&2; exit 2 ;;
esac

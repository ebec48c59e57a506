#!/usr/bin/env bash
# A cluster on one Linux machine, for the `cluster` test tier and for trying multi-node runs without a second
# server (docs/launch.md, "A cluster on one machine"). Hosts h1..hN are network + UTS namespaces, each with
# its own hostname and eth0 (10.77.0.i/24), joined by veth pairs to a bridge in a switch namespace; h1 runs
# slurmctld and h2..hN slurmd (munge authenticates). Needs root, iproute2, util-linux (nsenter, unshare),
# and for Slurm the Debian packages slurmd slurmctld slurm-client munge (scripts/bootstrap.sh).
#
#   cluster.sh up [N]          bring up N hosts (default 3: h1 = controller, h2 h3 = compute), Slurm included;
#                              what an earlier run whose owner died left (namespaces, bridge, daemons) is
#                              removed first; a cluster whose owner lives stops it with exit code 75 (busy)
#   cluster.sh down            stop what `up` started, delete the namespaces (and their hosts' Open MPI session dirs)
#   cluster.sh on hN CMD...    run CMD on host hN
#   cluster.sh mpirun ARGS...  Open MPI's mpirun on h1, its daemons started on the hosts ARGS names
#                              (--host h2:2,h3:2) over their eth0
#   cluster.sh shape RATE      every host's eth0 limited to RATE (tc tbf: 1gbit, 10gbit, ...); "off" removes it
#   cluster.sh link hN up|down cut or restore host hN's link
#   cluster.sh check           exit 0 when this machine can run the cluster (root, namespaces), else say why
# State and logs: $RP_CLUSTER_DIR (default /tmp/rp-cluster). Slurm clients need SLURM_CONF=$RP_CLUSTER_DIR/slurm.conf,
# which `on` and `mpirun` set. The namespaces' names are fixed, so one cluster at a time per machine: `up` writes
# its owner (RP_CLUSTER_OWNER, default the calling process) and state directory to $owner_file.
set -euo pipefail
self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
dir="${RP_CLUSTER_DIR:-/tmp/rp-cluster}"
export SLURM_CONF="$dir/slurm.conf"
owner_file=/run/roundpipe-cluster.owner
lock_file=/run/roundpipe-cluster.lock

say() { echo "cluster: $*" >&2; }
die() { say "$*"; exit 1; }

# until <seconds> CMD...: retries CMD every 0.1 s; false when time runs out.
until_ok() {
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 0.1
  done
}

hosts() { cat "$dir/hosts" 2>/dev/null || echo 0; }

# Why this machine cannot run the cluster, or nothing.
unable() {
  [[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)"; return; }
  for tool in ip nsenter unshare tc; do command -v "$tool" >/dev/null || { echo "needs $tool"; return; }; done
  # A name of this process's: two checks at once (two suites) must not collide on it and read as unable.
  ip netns add "rp-probe-$$" 2>/dev/null || { echo "cannot create network namespaces here"; return; }
  ip netns del "rp-probe-$$"
}

# The host's network namespace, its own hostname, and /etc/hosts naming every host. (`ip netns exec` would
# remount /sys and hide the cgroup tree, which slurmd needs.)
on() {
  local h="$1"; shift
  [[ -e /run/netns/$h ]] || die "no host $h (cluster.sh up)"
  exec nsenter --net="/run/netns/$h" unshare --mount --uts /bin/sh -c \
    'mount --bind "/etc/netns/$0/hosts" /etc/hosts && hostname "$0" && exec "$@"' "$h" "$@"
}

slurm_conf() {
  local n="$1"
  cat <<EOF
ClusterName=rp
SlurmctldHost=h1(10.77.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=0
KillOnBadExit=1
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=h[2-$n] NodeAddr=10.77.0.[2-$n] CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=30 State=UP OverSubscribe=FORCE:4
EOF
}

up() {
  local n="${1:-3}"
  ((n >= 2)) || die "up needs at least 2 hosts, got $n"
  local why; why="$(unable)"
  [[ -z $why ]] || die "$why"
  # The owner check and the owner write are one step under an exclusive lock: two runs starting together
  # (two suites on one machine) cannot both find the machine free.
  exec 9>"$lock_file"
  flock -w 60 9 || die "$lock_file: another cluster.sh up held it for 60 s"
  local owner="" owner_dir=""
  [[ -f $owner_file ]] && read -r owner owner_dir <"$owner_file"
  if [[ -n $owner ]] && kill -0 "$owner" 2>/dev/null; then
    say "a cluster is already up, owned by the live process $owner (state in $owner_dir): wait for it, or cluster.sh down"
    exit 75
  fi
  local left; left="$(leftovers)"
  if [[ -n $left ]]; then
    say "removing what an earlier run (owner ${owner:-unknown}, no longer running) left: $left"
    remove "${owner_dir:-$dir}" "$left"
  fi
  echo "${RP_CLUSTER_OWNER:-$PPID} $dir" >"$owner_file"
  flock -u 9
  exec 9>&-
  rm -rf "$dir"
  mkdir -p "$dir"/{state,log,spool,tmp}
  echo "$n" >"$dir/hosts"
  if command -v munged >/dev/null && ! (munge -n | unmunge) >/dev/null 2>&1; then
    install -d -o munge -g munge -m 755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    until_ok 10 sh -c 'munge -n | unmunge' || die "munged did not start"
    cp /run/munge/munged.pid "$dir/munged.pid"
  fi
  ip netns add rp-sw
  ip -n rp-sw link add br0 type bridge
  ip -n rp-sw link set br0 up
  for i in $(seq 1 "$n"); do
    local h="h$i"
    ip netns add "$h"
    ip link add "rp-$h" type veth peer name "sw-$h"
    ip link set "rp-$h" netns "$h"
    ip link set "sw-$h" netns rp-sw
    ip -n "$h" link set "rp-$h" name eth0
    ip -n "$h" addr add "10.77.0.$i/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    ip -n rp-sw link set "sw-$h" master br0
    ip -n rp-sw link set "sw-$h" up
    mkdir -p "/etc/netns/$h" "$dir/spool/$h" "$dir/tmp/$h"
    { echo "127.0.0.1 localhost"; for j in $(seq 1 "$n"); do echo "10.77.0.$j h$j"; done; } >"/etc/netns/$h/hosts"
  done
  if command -v slurmctld >/dev/null; then
    slurm_conf "$n" >"$SLURM_CONF"
    "$self" on h1 slurmctld -D -i >"$dir/log/slurmctld.out" 2>&1 &
    echo $! >"$dir/slurmctld.bgpid"
    until_ok 30 "$self" on h1 scontrol ping || { cat "$dir/log/slurmctld.out" >&2; die "slurmctld did not answer"; }
    for i in $(seq 2 "$n"); do
      "$self" on "h$i" slurmd -D >"$dir/log/slurmd-h$i.out" 2>&1 &
      echo $! >"$dir/slurmd-h$i.bgpid"
    done
    until_ok 60 sh -c "[ \"\$('$self' on h1 sinfo -h -o %T | sort -u)\" = idle ]" ||
      { tail -n 20 "$dir"/log/*.out >&2; die "the slurmd hosts did not come up idle"; }
    say "up: $n hosts, Slurm controller on h1, compute hosts h2..h$n"
  else
    say "up: $n hosts (no Slurm: slurmctld is not installed)"
  fi
}

# The namespaces a cluster of ours makes (rp-sw and h1..hN), as they exist now.
leftovers() {
  ip netns list 2>/dev/null | awk '$1 ~ /^(rp-sw|h[0-9]+)$/ { print $1 }' | sort | tr '\n' ' ' | sed 's/ $//'
}

# remove <state dir> <namespaces>: stops the daemons the state directory names and everything still running in
# the namespaces (job steps, ranks of an aborted run), then deletes the namespaces and their /etc/netns files.
remove() {
  local state="$1" names="$2"
  for f in "$state"/slurmd-h*.bgpid "$state"/slurmctld.bgpid; do
    [[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 0.5
  for ns in $names; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  [[ -f $state/munged.pid ]] && kill "$(cat "$state/munged.pid")" 2>/dev/null
  for ns in $names; do
    ip netns del "$ns" 2>/dev/null
    # Open MPI's session directories of that host's mpirun (ompi.<host>.<uid>: `on` shares this /tmp), which
    # a job that ended by a signal or a cut link leaves behind.
    [[ $ns == rp-sw ]] || rm -rf "/etc/netns/$ns" "${TMPDIR:-/tmp}/ompi.$ns."*
  done
  rm -f "$state"/*.bgpid "$state/munged.pid" "$state/hosts"
  return 0
}

down() {
  remove "$dir" "$(leftovers)"
  rm -f "$owner_file"
}

# Open MPI's remote launcher: mpirun runs `<agent> <host> <orted words>`, the words quoted for a remote
# shell as for ssh.
agent() {
  local h="$1"; shift
  on "$h" /bin/sh -c "$*"
}

run_mpirun() {
  on h1 mpirun --mca plm_rsh_agent "$self agent" --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    --mca mpi_yield_when_idle 1 --bind-to none "$@"
}

shape() {
  local rate="$1" n; n="$(hosts)"
  for i in $(seq 1 "$n"); do
    ip netns exec "h$i" tc qdisc del dev eth0 root 2>/dev/null || true
    [[ $rate == off ]] || ip netns exec "h$i" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 20ms
  done
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down) down ;;
  on) shift; on "$@" ;;
  agent) shift; agent "$@" ;;
  mpirun) shift; run_mpirun "$@" ;;
  shape) shape "${2:?shape RATE (1gbit, 10gbit, off)}" ;;
  link) ip -n "${2:?link hN up|down}" link set eth0 "${3:?up or down}" ;;
  check) why="$(unable)"; [[ -z $why ]] || { echo "$why"; exit 1; } ;;
  *) sed -n '2,17p' "$self" >&2; exit 2 ;;
esac

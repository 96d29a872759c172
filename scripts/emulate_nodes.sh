#!/usr/bin/env bash
# Runs an MPI program with its ranks as emulated nodes of this one machine, so that the multi-node
# path (separate hosts, a real network stack, NCCL between hosts) runs where only one machine or
# one GPU exists. It checks that path; it does not measure scaling.
#
#   scripts/emulate_nodes.sh [--nodes N] [--ranks-per-node P] [--rate RATE] -- trainbench --devices=cpu:1,mpi:N --link=measured ...
#     CPU ranks: N network namespaces, P ranks each (default 1), joined by a veth pair (N = 2) or a
#     bridge (N > 2), each node's outgoing traffic shaped by tc's token bucket (tbf) to RATE (tc's
#     units: 1gbit, 500mbit; unshaped without --rate). Open MPI talks TCP over that link only
#     (pml ob1, btl tcp,self, oob and btl on the node's interface), and with P > 1 shared memory
#     between the ranks of a node (btl vader): the two levels of a cluster, N x P ranks in all.
#   scripts/emulate_nodes.sh --check [--nodes N] [--rate RATE]
#     Only checks that this machine can run N CPU ranks as emulated nodes (root, CAP_SYS_ADMIN and
#     CAP_NET_ADMIN, network namespaces that ip netns exec can enter, veth, a bridge past two nodes,
#     tc's tbf with --rate or --check alone, unshare --uts): exit 0, or 2 with one line naming what
#     is missing and why. The same checks run before every CPU run.
#   scripts/emulate_nodes.sh --gpu N -- trainbench --devices=gpu:1,gpu:N ...
#     N GPU ranks sharing GPU 0 (the first of CUDA_VISIBLE_DEVICES): each rank has its own
#     NCCL_HOSTID (tb-emulated-node-K), so NCCL takes them for N hosts and talks over its socket
#     transport on the loopback (NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1). No namespaces.
#
# In both modes node K is host tb-emulated-node-K (a UTS namespace of its own) with its share of
# this machine's cores (taskset), and runs rank K (ranks K x P to K x P + P - 1 with
# --ranks-per-node); mpirun's launcher enters each node through an agent script instead of ssh
# (plm_rsh_agent), so Open MPI sees N hosts with P ranks each. Every rank gets TB_EMULATED_NODES=N. Needs Open MPI's mpirun,
# unshare and taskset (util-linux), and for CPU ranks root (namespaces), ip and tc (iproute2).
# Namespaces, links, qdiscs and processes are removed on exit, error, Ctrl-C or SIGTERM.
# Exit status: the program's (mpirun's); 2 for bad usage or a machine that cannot emulate nodes;
# 128 + the signal's number when interrupted.
set -euo pipefail

readonly HOST_PREFIX=tb-emulated-node-
readonly SUBNET=10.213.0      # the emulated nodes' network, inside their namespaces only
readonly IFACE=tbnet          # each node's interface, the same name in every namespace
readonly QUEUE=20ms           # how long tbf holds what TCP hands it (make_network says why)

nodes=2 per_node=1 rate="" gpu_mode=0 check_only=0
command_args=()
run_id="tbemu$$"              # names this run's namespaces and links; TB_EMULATE_RUN marks its processes
work=""                       # the agent, the rank wrapper and the hostfile
namespaces=() root_links=()
mpirun_pid=""

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

die() {
  echo "emulate_nodes.sh: error: $*" >&2
  exit 2
}

say() { echo "emulate_nodes.sh: $*" >&2; }

parse_args() {
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=${2:-}; shift 2 || usage ;;
      --nodes=*) nodes=${1#--nodes=}; shift ;;
      --ranks-per-node) per_node=${2:-}; shift 2 || usage ;;
      --ranks-per-node=*) per_node=${1#--ranks-per-node=}; shift ;;
      --rate) rate=${2:-}; shift 2 || usage ;;
      --rate=*) rate=${1#--rate=}; shift ;;
      --gpu) gpu_mode=1; nodes=${2:-}; shift 2 || usage ;;
      --gpu=*) gpu_mode=1; nodes=${1#--gpu=}; shift ;;
      --check) check_only=1; shift ;;
      -h | --help) usage 0 ;;
      --) shift; command_args=("$@"); break ;;
      *) die "unknown option '$1' (options: --nodes N, --ranks-per-node P, --rate RATE, --gpu N, --check, then -- and the program)" ;;
    esac
  done
  if [ $check_only -eq 1 ]; then
    [ ${#command_args[@]} -eq 0 ] || die "--check runs no program: leave out -- and what follows"
    [ $gpu_mode -eq 0 ] || die "--check is for CPU ranks (--nodes); --gpu needs no namespaces"
  else
    [ ${#command_args[@]} -gt 0 ] || die "no program: give it after --, e.g. -- trainbench --devices=cpu:1,mpi:2"
  fi
  if ! [[ $nodes =~ ^[0-9]+$ ]] || [ "$nodes" -lt 2 ] || [ "$nodes" -gt 250 ]; then
    die "--nodes/--gpu: '$nodes' is not a number of nodes from 2 to 250"
  fi
  if ! [[ $per_node =~ ^[0-9]+$ ]] || [ "$per_node" -lt 1 ] || [ "$per_node" -gt 64 ]; then
    die "--ranks-per-node: '$per_node' is not a number of ranks from 1 to 64"
  fi
  [ "$per_node" -eq 1 ] || [ $gpu_mode -eq 0 ] || die "--ranks-per-node is for CPU ranks (--nodes); --gpu runs one rank per emulated node"
  if [ -n "$rate" ]; then
    [ $gpu_mode -eq 0 ] || die "--rate shapes the namespaces' link; --gpu ranks talk over the loopback, unshaped"
    rate_bits "$rate" >/dev/null || die "--rate: '$rate' is not a rate in tc's units (e.g. 1gbit, 500mbit)"
  fi
}

# A tc rate (1gbit, 500mbit, 10kbit) in bits per second.
rate_bits() {
  [[ $1 =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit)$ ]] || return 1
  local scale
  case ${BASH_REMATCH[3]} in
    bit) scale=1 ;; kbit) scale=1e3 ;; mbit) scale=1e6 ;; gbit) scale=1e9 ;; tbit) scale=1e12 ;;
  esac
  awk -v n="${BASH_REMATCH[1]}" -v s="$scale" 'BEGIN { printf "%.0f\n", n * s }'
}

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install ${PACKAGE_OF[$tool]:-$tool})"
  done
}
declare -A PACKAGE_OF=([ip]=iproute2 [tc]=iproute2 [unshare]=util-linux [taskset]=util-linux [mpirun]=openmpi-bin)

# This machine's allowed cores split among the nodes: node K's list (cores shared where fewer
# than nodes).
node_cpus() {
  local k=$1 list range ranges cpus=()
  list=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  IFS=, read -r -a ranges <<<"$list"
  for range in "${ranges[@]}"; do
    if [[ $range == *-* ]]; then mapfile -t -O ${#cpus[@]} cpus < <(seq "${range%-*}" "${range#*-}"); else cpus+=("$range"); fi
  done
  local total=${#cpus[@]}
  if [ "$total" -lt "$nodes" ]; then
    echo "${cpus[k % total]}"
    return
  fi
  local first=$((k * total / nodes)) last=$(((k + 1) * total / nodes - 1)) out=() i
  for ((i = first; i <= last; i++)); do out+=("${cpus[i]}"); done
  (IFS=,; echo "${out[*]}")
}

# The script Open MPI's launcher runs instead of ssh: AGENT HOST COMMAND..., like ssh it joins
# COMMAND into one shell line, and runs it on emulated node HOST (its namespace, host name, cores).
write_agent() {
  local uts=$1 k enter
  {
    echo '#!/bin/sh'
    echo '# Written by scripts/emulate_nodes.sh: Open MPI starts its daemon on an emulated node through this.'
    echo 'host=$1; shift'
    echo 'case $host in'
    for ((k = 0; k < nodes; k++)); do
      enter=""
      [ $gpu_mode -eq 1 ] || enter="ip netns exec ${namespaces[k]} "
      echo "  $HOST_PREFIX$k) enter='$enter' cpus=$(node_cpus "$k") ;;"
    done
    echo '  *) echo "emulate_nodes.sh agent: no emulated node $host" >&2; exit 255 ;;'
    echo 'esac'
    if [ "$uts" -eq 1 ]; then
      echo 'exec $enter taskset -c "$cpus" unshare --uts sh -c '\''hostname "$0" && exec sh -c "$1"'\'' "$host" "$*"'
    else
      echo 'exec $enter taskset -c "$cpus" sh -c "$*"'
    fi
  } >"$work/agent"
  chmod +x "$work/agent"
}

# GPU mode: each rank's own NCCL host id and GPU, read from Open MPI's rank number.
write_rank_wrapper() {
  local gpu=${CUDA_VISIBLE_DEVICES:-0}
  cat >"$work/rank" <<EOF
#!/bin/sh
# Written by scripts/emulate_nodes.sh: one rank's environment on an emulated node, then the program.
export NCCL_HOSTID=$HOST_PREFIX\${OMPI_COMM_WORLD_RANK:?not started by mpirun}
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 CUDA_VISIBLE_DEVICES=${gpu%%,*}
exec "\$@"
EOF
  chmod +x "$work/rank"
}

# CPU mode: what the machine must allow, tried on a throwaway namespace of this run (removed by
# cleanup whatever happens); exits 2 with one line naming what is missing and why.
cannot() {
  die "this machine cannot run emulated nodes: $*"
}

has_capability() {
  local mask
  mask=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
  (( (16#$mask >> $1) & 1 ))
}

check_cpu_machine() {
  need ip tc unshare
  [ "$(id -u)" -eq 0 ] || cannot "network namespaces need root (run it as root or with sudo)"
  has_capability 21 || cannot "no CAP_SYS_ADMIN (a container without it cannot make namespaces or mounts; docker run --cap-add SYS_ADMIN)"
  has_capability 12 || cannot "no CAP_NET_ADMIN (a container without it cannot make network links; docker run --cap-add NET_ADMIN)"
  unshare --uts true 2>/dev/null || cannot "unshare --uts is not permitted here: the nodes cannot have host names of their own"
  local probe="$run_id-probe" err
  namespaces+=("$probe")
  err=$(ip netns add "$probe" 2>&1) || cannot "ip netns add failed (${err:-no message}); /run/netns must be writable"
  if ! err=$(ip netns exec "$probe" true 2>&1); then
    if [[ $err == *make-rslave* ]]; then
      cannot "'/' is not a mount point here (a chroot?), so ip netns exec cannot make it a slave mount to enter a namespace; run it where '/' is a mount point: a machine, a container, systemd-nspawn, or scripts/clean_root.sh"
    fi
    cannot "ip netns exec cannot enter a namespace: ${err:-no message}"
  fi
  err=$(ip -n "$probe" link add tbprobe0 type veth peer name tbprobe1 2>&1) ||
    cannot "no veth links (${err:-no message}); the kernel needs CONFIG_VETH (modprobe veth)"
  if [ "$nodes" -gt 2 ]; then
    err=$(ip -n "$probe" link add tbprobebr type bridge 2>&1) ||
      cannot "no bridge for $nodes nodes (${err:-no message}); the kernel needs CONFIG_BRIDGE (modprobe bridge)"
  fi
  if [ -n "$rate" ] || [ $check_only -eq 1 ]; then
    err=$(ip -n "$probe" link set dev tbprobe0 gso_max_size 16384 2>&1) ||
      cannot "ip cannot cut a link's packets to 16 KiB (${err:-no message}); gso_max_size needs iproute2 and a kernel of 4.16 or later"
    err=$(tc -n "$probe" qdisc add dev tbprobe0 root tbf rate "${rate:-1gbit}" burst 32768 latency $QUEUE 2>&1) ||
      cannot "tc cannot shape a link with tbf (${err:-no message}); the kernel needs sch_tbf (modprobe sch_tbf)"
  fi
  ip netns del "$probe"
  unset 'namespaces[-1]'
}

# CPU mode: the namespaces, their link and its shaping.
make_network() {
  local k
  for ((k = 0; k < nodes; k++)); do
    namespaces+=("$run_id-$k")
    ip netns add "$run_id-$k"
    ip -n "$run_id-$k" link set lo up
  done
  if [ "$nodes" -eq 2 ]; then
    root_links+=("${run_id/tbemu/te}a0" "${run_id/tbemu/te}a1")
    ip link add "${root_links[0]}" type veth peer name "${root_links[1]}"
    for k in 0 1; do ip link set "${root_links[k]}" netns "$run_id-$k"; done
    for k in 0 1; do ip -n "$run_id-$k" link set "${root_links[k]}" name $IFACE; done
  else
    namespaces+=("$run_id-switch")
    ip netns add "$run_id-switch"
    ip -n "$run_id-switch" link add tbbridge type bridge
    ip -n "$run_id-switch" link set tbbridge up
    for ((k = 0; k < nodes; k++)); do
      local node_end="${run_id/tbemu/te}a$k" switch_end="${run_id/tbemu/te}b$k"
      root_links+=("$node_end" "$switch_end")
      ip link add "$node_end" type veth peer name "$switch_end"
      ip link set "$node_end" netns "$run_id-$k"
      ip -n "$run_id-$k" link set "$node_end" name $IFACE
      ip link set "$switch_end" netns "$run_id-switch"
      ip -n "$run_id-switch" link set "$switch_end" master tbbridge up
    done
  fi
  for ((k = 0; k < nodes; k++)); do
    ip -n "$run_id-$k" addr add "$SUBNET.$((k + 1))/24" dev $IFACE
    ip -n "$run_id-$k" link set $IFACE up
  done
  [ -z "$rate" ] && return 0
  # A wire at the rate, not a bucket of credit: a veth hands tbf GSO packets of up to 64 KiB, and
  # tbf's bucket must hold one, so each node's packets are cut to what the link carries in about
  # 100 us (16 to 64 KiB) and the bucket holds two of them. A bucket of 1 ms (128 KiB at 1 Gbit/s)
  # let an all-reduce that followed a pause, as a training step's does, send its first 128 KiB
  # unshaped: 321 KB all-reduced between two nodes in 1.8 ms after 7.6 ms idle, 2.7 back to back,
  # where the rate allows 2.6. The queue holds 20 ms, as a host's holds what TCP hands it: with 2
  # ms tbf dropped packets that TCP sent again (LeNet-5's mpi:2 over 1 Gbit/s: 145 and 283 dropped,
  # 46 and 55 segments sent again, 0.80 of its point; 0.55 in a check), with 20 ms none.
  local bits packet
  bits=$(rate_bits "$rate")
  packet=$((bits / 8 / 10000))
  [ "$packet" -ge 16384 ] || packet=16384
  [ "$packet" -le 65536 ] || packet=65536
  for ((k = 0; k < nodes; k++)); do
    ip -n "$run_id-$k" link set dev $IFACE gso_max_size "$packet" ||
      die "ip could not set gso_max_size on $IFACE (iproute2 and a kernel of 4.16 or later needed)"
    tc -n "$run_id-$k" qdisc add dev $IFACE root tbf rate "$rate" burst $((2 * packet)) latency $QUEUE ||
      die "tc could not shape $IFACE with tbf (is sch_tbf in this kernel?)"
  done
}

# Bytes each node sent over its link, after the run: the ranks' traffic went there, not through
# shared memory.
report_traffic() {
  local k sent
  for ((k = 0; k < nodes; k++)); do
    sent=$(ip netns exec "$run_id-$k" cat /sys/class/net/$IFACE/statistics/tx_bytes 2>/dev/null) || continue
    say "$HOST_PREFIX$k sent $sent bytes over its link${rate:+ (tbf $rate)}"
  done
}

cleanup() {
  local status=$?
  # A second signal during the cleanup (a TERM after an interrupt, the caller's pipe gone) must
  # not end it before the namespaces are removed: ignored until it is done.
  trap - EXIT
  trap '' INT TERM HUP PIPE
  if [ -n "$mpirun_pid" ] && kill -0 "$mpirun_pid" 2>/dev/null; then
    kill -TERM "$mpirun_pid" 2>/dev/null || true
    local i
    for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.5; done
  fi
  # Whatever is left of the run: processes in its namespaces or carrying its mark.
  local ns pids=()
  for ns in "${namespaces[@]}"; do
    mapfile -t -O ${#pids[@]} pids < <(ip netns pids "$ns" 2>/dev/null)
  done
  mapfile -t -O ${#pids[@]} pids < <(grep -l -s -z -x "TB_EMULATE_RUN=$run_id" /proc/[0-9]*/environ | cut -d/ -f3)
  [ ${#pids[@]} -eq 0 ] || kill -KILL "${pids[@]}" 2>/dev/null || true
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  local link
  for link in "${root_links[@]}"; do ip link del "$link" 2>/dev/null || true; done
  [ -z "$work" ] || rm -rf "$work"
  return $status
}

on_signal() {
  say "interrupted by SIG$1: stopping the ranks and removing the emulated nodes"
  cleanup
  exit $((128 + $2))
}

main() {
  parse_args "$@"
  trap cleanup EXIT
  trap 'on_signal INT 2' INT
  trap 'on_signal TERM 15' TERM
  trap 'on_signal HUP 1' HUP
  if [ $check_only -eq 1 ]; then
    check_cpu_machine
    say "this machine can run $nodes CPU ranks as emulated nodes (namespaces, veth$([ "$nodes" -le 2 ] || echo ", a bridge"), tbf)"
    return 0
  fi
  need mpirun unshare taskset
  [ $gpu_mode -eq 1 ] || check_cpu_machine
  work=$(mktemp -d "${TMPDIR:-/tmp}/$run_id.XXXXXX")

  local uts=1 k hosts=()
  for ((k = 0; k < nodes; k++)); do
    hosts+=("$HOST_PREFIX$k")
    echo "$HOST_PREFIX$k slots=$per_node" >>"$work/hostfile"
  done
  if ! unshare --uts true 2>/dev/null; then
    [ $gpu_mode -eq 1 ] || die "unshare --uts is not permitted here: the nodes cannot have host names of their own"
    uts=0
    say "unshare --uts is not permitted here: the ranks keep this machine's host name; NCCL_HOSTID still tells the nodes apart"
  fi
  local iface=lo program=("${command_args[@]}")
  if [ $gpu_mode -eq 1 ]; then
    write_rank_wrapper
    program=("$work/rank" "${command_args[@]}")
    local gpu=${CUDA_VISIBLE_DEVICES:-0}
    say "$nodes GPU ranks as emulated nodes ${hosts[*]} sharing GPU ${gpu%%,*} (CUDA_VISIBLE_DEVICES's" \
        "first), NCCL over sockets on lo; TB_EMULATED_NODES=$nodes"
  else
    make_network
    iface=$IFACE
    local link="a veth pair" shaping="unshaped"
    [ "$nodes" -eq 2 ] || link="a bridge"
    [ -z "$rate" ] || shaping="shaped to $rate (tbf)"
    local ranks="one rank each"
    [ "$per_node" -eq 1 ] || ranks="$per_node ranks each, shared memory between them"
    say "$nodes emulated nodes ${hosts[*]} in network namespaces ${namespaces[*]}, $ranks, joined by $link" \
        "($SUBNET.0/24) $shaping; Open MPI over TCP; TB_EMULATED_NODES=$nodes"
  fi
  write_agent $uts

  # P ranks of a node are consecutive ranks (a ring crosses the network once per node) and talk
  # through shared memory (vader); between nodes, TCP over the emulated link only.
  local btl="tcp,self" map_by=node
  [ "$per_node" -eq 1 ] || btl="tcp,self,vader" map_by=slot
  local mpirun_args=(-np "$((nodes * per_node))" --hostfile "$work/hostfile" --map-by "$map_by" --bind-to none
    --mca plm rsh --mca plm_rsh_agent "$work/agent" --mca pml ob1 --mca btl "$btl"
    --mca btl_tcp_if_include "$iface" --mca oob_tcp_if_include "$iface" -x TB_EMULATED_NODES)
  [ "$(id -u)" -ne 0 ] || mpirun_args+=(--allow-run-as-root)
  if [ $gpu_mode -eq 1 ]; then
    # Every node is remote to mpirun: the agent starts each one's daemon.
    TB_EMULATE_RUN=$run_id TB_EMULATED_NODES=$nodes mpirun "${mpirun_args[@]}" "${program[@]}" &
  else
    # mpirun runs on node 0 (rank 0 is its child there); the agent starts the other nodes' daemons.
    local name_node=(sh -c 'hostname "$0" && exec "$@"' "${HOST_PREFIX}0")
    TB_EMULATE_RUN=$run_id TB_EMULATED_NODES=$nodes ip netns exec "$run_id-0" taskset -c "$(node_cpus 0)" unshare --uts "${name_node[@]}" \
      mpirun "${mpirun_args[@]}" "${program[@]}" &
  fi
  mpirun_pid=$!
  local status=0
  wait "$mpirun_pid" || status=$?
  mpirun_pid=""
  [ $gpu_mode -eq 1 ] || report_traffic
  [ $status -eq 0 ] || say "mpirun exited with status $status"
  return $status
}

main "$@"

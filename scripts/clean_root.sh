#!/usr/bin/env bash
# Runs a command in a clean Debian 12 root that looks like a freshly installed machine, then
# removes every trace of it: for trying what a new user's machine does with an install script, a
# .deb or a binary bundle, without this machine's packages, build trees or mounts.
#
#   scripts/clean_root.sh [options] -- COMMAND [ARG...]
#     --dir DIR            build the root in DIR (absent or empty; default a new /tmp/tb-root.XXXXXX)
#     --keep               leave the root in place afterwards (its path is printed)
#     --reuse DIR          run in an existing root (one left by --keep, say) as it is; never removed
#     --tar FILE           unpack the root from FILE (a tarball of a root, e.g. one mmdebstrap
#                          wrote) instead of building it with mmdebstrap
#     --mirror URL         the Debian mirror (default: the one apt-get uses here, else deb.debian.org)
#     --include PKG,...    packages mmdebstrap adds to its minimal set (default: none)
#     --upload SRC:DEST    copy SRC (a file or a folder's contents) from this machine to DEST, an
#                          absolute path in the root, before COMMAND runs (repeatable)
#     --env NAME=VALUE     set NAME in COMMAND's environment (repeatable)
#     --hostname NAME      the root's host name (default tb-clean-root)
#     --grace SECONDS      on SIGINT/SIGTERM, how long COMMAND may take to stop before it and
#                          everything it started is killed (default 10)
#
# The root: mmdebstrap --variant=apt bookworm (apt and Debian's essential packages, nothing
# else). COMMAND runs in it as root, through chroot, in namespaces of its own (mount, PID, UTS,
# IPC, cgroup) and this machine's network, with what a fresh Debian 12 machine has: `/` a mount
# point, /proc (its own PIDs), /sys with /sys/fs/cgroup (cgroup2; where this machine's kernel is
# in hybrid mode, its cgroup v1 hierarchies and cgroup2 under a tmpfs, as the machine has them,
# since Slurm refuses cgroup2 alone beside v1 hierarchies), a /dev of its own (null,
# zero, full, random, urandom, tty, net/tun, pts, shm), /run a tmpfs, /tmp a folder on the root's
# filesystem (Debian 12 has no tmpfs /tmp), /etc/hosts naming localhost and the host, and a login
# environment (PATH, HOME=/root, TERM). Every mount is made inside the root's own mount namespace
# and nothing propagates out, so mounts made by COMMAND (`ip netns add`'s, say) go with it.
# When COMMAND ends, fails, or this script gets SIGINT, SIGTERM or SIGHUP, every process left in
# the root is stopped (SIGTERM, then SIGKILL after --grace), the namespaces end with them, and the
# script checks that no mount under the root and no process inside it is left before it removes
# the root (unless --keep or --reuse). SIGKILL of this script itself cannot be caught: the root's
# processes then get SIGKILL (unshare --kill-child), and its folder stays.
#
# Needs root, unshare, mount, chroot (util-linux, coreutils) and, to build a root, mmdebstrap
# (installed with apt-get where missing). Other scripts use it: scripts/check_fresh.sh runs the
# README's two commands in such a root. tests/scripts/test_clean_root.py checks the namespaces and
# the teardown on a tiny root of this machine's own binaries.
#
# Exit status: COMMAND's; 128 + the signal's number when interrupted; 2 for bad usage or a machine
# that cannot make the root (not root, namespaces not permitted); 125 when the root could not be
# built or entered, or something of it could not be removed.
set -euo pipefail

readonly LOGIN_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

dir="" keep=0 reuse="" tar="" mirror="" include="" hostname=tb-clean-root grace=10
uploads=() envs=() command_args=()
root="" made_root=0 work="" builder_pid="" unshare_pid=""

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}
say() { echo "clean_root.sh: $*" >&2; }
die() {
  echo "clean_root.sh: error: $*" >&2
  exit 2
}
fail() {
  echo "clean_root.sh: error: $*" >&2
  exit 125
}

parse_args() {
  while [ $# -gt 0 ]; do
    case $1 in
      --dir) dir=${2:-}; shift 2 || usage ;;
      --dir=*) dir=${1#--dir=}; shift ;;
      --keep) keep=1; shift ;;
      --reuse) reuse=${2:-}; shift 2 || usage ;;
      --reuse=*) reuse=${1#--reuse=}; shift ;;
      --tar) tar=${2:-}; shift 2 || usage ;;
      --tar=*) tar=${1#--tar=}; shift ;;
      --mirror) mirror=${2:-}; shift 2 || usage ;;
      --mirror=*) mirror=${1#--mirror=}; shift ;;
      --include) include=${2:-}; shift 2 || usage ;;
      --include=*) include=${1#--include=}; shift ;;
      --upload) uploads+=("${2:-}"); shift 2 || usage ;;
      --upload=*) uploads+=("${1#--upload=}"); shift ;;
      --env) envs+=("${2:-}"); shift 2 || usage ;;
      --env=*) envs+=("${1#--env=}"); shift ;;
      --hostname) hostname=${2:-}; shift 2 || usage ;;
      --hostname=*) hostname=${1#--hostname=}; shift ;;
      --grace) grace=${2:-}; shift 2 || usage ;;
      --grace=*) grace=${1#--grace=}; shift ;;
      -h | --help) usage 0 ;;
      --) shift; command_args=("$@"); break ;;
      *) die "unknown option '$1' (see scripts/clean_root.sh --help)" ;;
    esac
  done
  [ ${#command_args[@]} -gt 0 ] || die "no command: give it after --, e.g. -- /bin/bash -c 'cat /etc/os-release'"
  if [ -n "$reuse" ]; then
    if [ -n "$dir$tar$include" ] || [ $keep -eq 1 ]; then die "--reuse runs in a root as it is: --dir, --tar, --include and --keep do not apply"; fi
    [ -e "$reuse/bin/sh" ] || die "--reuse: '$reuse' is not a root (no $reuse/bin/sh)"
  fi
  [ -z "$tar" ] || [ -f "$tar" ] || die "--tar: '$tar' is not a file"
  if [ -n "$dir" ] && [ -e "$dir" ]; then
    if [ ! -d "$dir" ] || [ -n "$(ls -A "$dir")" ]; then die "--dir: '$dir' exists and is not an empty folder (give a new path)"; fi
  fi
  local upload
  for upload in "${uploads[@]}"; do
    [[ $upload == *:/* ]] || die "--upload: '$upload' is not SRC:DEST with DEST an absolute path in the root"
    [ -e "${upload%%:/*}" ] || die "--upload: '${upload%%:/*}' does not exist on this machine"
  done
  local assignment
  for assignment in "${envs[@]}"; do
    [[ $assignment =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env: '$assignment' is not NAME=VALUE"
  done
  [[ $hostname =~ ^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$ ]] || die "--hostname: '$hostname' is not a host name"
  [[ $grace =~ ^[0-9]+$ ]] || die "--grace: '$grace' is not a number of seconds"
}

# What this machine must have and allow.
check_machine() {
  [ "$(id -u)" -eq 0 ] || die "run as root: the root's mounts and namespaces need it (sudo scripts/clean_root.sh ...)"
  local tool
  for tool in unshare mount chroot findmnt; do
    command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install ${PACKAGE_OF[$tool]})"
  done
  local err
  if ! err=$(unshare --mount --pid --fork --uts --ipc --cgroup --propagation private true 2>&1); then
    die "this machine does not permit new mount, PID, UTS, IPC and cgroup namespaces (unshare: ${err:-failed}); a container needs CAP_SYS_ADMIN for them"
  fi
  if [ -z "$reuse$tar" ] && ! command -v mmdebstrap >/dev/null; then
    say "installing mmdebstrap on this machine (it builds the root)"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap; }; then
      fail "could not install mmdebstrap (apt-get install mmdebstrap)"
    fi
  fi
}
declare -A PACKAGE_OF=([unshare]=util-linux [mount]=mount [chroot]=coreutils [findmnt]=util-linux)

# The mirror apt-get uses on this machine (deb822 or one-line sources), else Debian's.
default_mirror() {
  local found
  found=$(grep -h -m1 -oE '^URIs: *[^ ]+/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 |
          sed 's/^URIs: *//') || true
  if [ -z "$found" ]; then
    found=$(grep -h -m1 -oE '^deb +[^ ]+/debian/? +bookworm' /etc/apt/sources.list 2>/dev/null | head -1 |
            awk '{print $2}') || true
  fi
  echo "${found:-http://deb.debian.org/debian}"
}

# Runs a step in the background so that a signal is handled at once, not when the step ends.
run_step() {
  "$@" &
  builder_pid=$!
  local status=0
  wait "$builder_pid" || status=$?
  builder_pid=""
  return $status
}

make_root() {
  if [ -n "$reuse" ]; then
    root=$(cd "$reuse" && pwd)
    say "running in the existing root $root (kept afterwards)"
    return
  fi
  if [ -n "$dir" ]; then
    mkdir -p "$dir"
    root=$(cd "$dir" && pwd)
  else
    root=$(mktemp -d /tmp/tb-root.XXXXXX)
  fi
  made_root=1
  chmod 755 "$root"
  local start=$SECONDS
  if [ -n "$tar" ]; then
    say "unpacking $tar into $root"
    run_step tar -C "$root" --numeric-owner -xf "$tar" || fail "could not unpack $tar into $root"
  else
    mirror=${mirror:-$(default_mirror)}
    say "building a minimal Debian 12 root (mmdebstrap --variant=apt bookworm${include:+ --include=$include}, $mirror) in $root"
    # In a mount and PID namespace of its own: whatever it mounts in the root while it builds,
    # and whatever it starts, ends with it, even if it is killed.
    run_step unshare --mount --pid --fork --mount-proc --propagation private --kill-child=SIGKILL \
      mmdebstrap --quiet --variant=apt --mode=root ${include:+--include="$include"} bookworm "$root" "$mirror" ||
      fail "mmdebstrap could not build the root in $root (its messages are above; --mirror URL to try another mirror)"
  fi
  [ -e "$root/bin/sh" ] || fail "$root has no /bin/sh: not a root"
  say "root ready in $((SECONDS - start)) s"
}

# What a fresh machine has in /etc and /tmp, where the root lacks it; then the uploads.
prepare_root() {
  if [ ! -e "$root/etc/hosts" ]; then
    printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$hostname" >"$root/etc/hosts"
  fi
  [ $made_root -eq 0 ] || echo "$hostname" >"$root/etc/hostname"
  mkdir -p "$root/tmp" && chmod 1777 "$root/tmp"
  local upload src dest
  for upload in "${uploads[@]}"; do
    src=${upload%%:/*}
    dest=/${upload#*:/}
    mkdir -p "$root$(dirname "$dest")"
    if [ -d "$src" ]; then
      mkdir -p "$root$dest"
      cp -a "$src/." "$root$dest/" || fail "could not copy $src to $dest in the root"
    else
      cp -a "$src" "$root$dest" || fail "could not copy $src to $dest in the root"
    fi
    say "uploaded $src to $dest"
  done
}

# The root's PID 1 (this machine's bash, outside the chroot): makes the mounts in the root's own
# mount namespace, runs COMMAND through chroot with a login environment, and on SIGTERM/SIGINT/
# SIGHUP passes SIGTERM to every process in the root, waiting up to the grace period. When it
# exits the kernel kills whatever is left in the PID namespace, and the mount namespace ends.
write_init() {
  cat >"$work/init.sh" <<'EOF'
#!/bin/bash
# Written by scripts/clean_root.sh: PID 1 of the clean root's namespaces.
set -euo pipefail
root=$1 hostname=$2 grace=$3
shift 3
fail() { echo "clean_root.sh: error: $*" >&2; exit 125; }
trap 'fail "setting up the root failed (line $LINENO of the root'"'"'s init: $BASH_COMMAND)"' ERR
mnt() { mount "$@" || fail "could not mount in the root: mount $*"; }

mnt --bind "$root" "$root"                       # `/` a mount point, as on a machine
mnt -t proc -o nosuid,nodev,noexec proc "$root/proc"
mnt -t sysfs -o nosuid,nodev,noexec sysfs "$root/sys"
# /sys/fs/cgroup as this machine's kernel has it: cgroup2 alone (a fresh Debian 12), or, where the
# kernel is in hybrid mode, the same v1 hierarchies and cgroup2 under a tmpfs (/proc/self/cgroup
# lists the v1 hierarchies whatever the root mounts, and Slurm refuses cgroup2 alone beside them).
if [ "$(findmnt -n -o FSTYPE /sys/fs/cgroup 2>/dev/null)" = tmpfs ]; then
  mnt -t tmpfs -o nosuid,nodev,noexec,mode=755 tmpfs "$root/sys/fs/cgroup"
  while read -r target fstype options; do
    mkdir -p "$root$target"
    options=,$options,
    options=${options//,rw,/,}
    options=${options#,}
    options=${options%,}
    mnt -t "$fstype" -o "nosuid,nodev,noexec${options:+,$options}" "$fstype" "$root$target"
  done < <(findmnt -rn -o TARGET,FSTYPE,FS-OPTIONS -R /sys/fs/cgroup | awk '$1 != "/sys/fs/cgroup" && ($2 == "cgroup" || $2 == "cgroup2")')
else
  mnt -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$root/sys/fs/cgroup"
fi
mnt -t tmpfs -o nosuid,mode=755 tmpfs "$root/dev"
for node in null zero full random urandom tty net/tun; do
  [ -c "/dev/$node" ] || continue
  mkdir -p "$(dirname "$root/dev/$node")"
  touch "$root/dev/$node"
  mnt --bind "/dev/$node" "$root/dev/$node"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mnt -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$root/dev/pts"
mnt -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$root/dev/shm"
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mnt -t tmpfs -o nosuid,nodev,mode=755 tmpfs "$root/run"
mkdir -m 1777 "$root/run/lock"
hostname "$hostname"

# Every process in the root but this one (this PID namespace's /proc, mounted in the root).
others() {
  local p
  for p in "$root"/proc/[0-9]*; do
    p=${p##*/}
    [ "$p" = 1 ] || [ "$p" = "$BASHPID" ] || echo "$p"
  done
}

stop_all() {
  # kill -1 from PID 1 reaches every other process of its PID namespace.
  kill -TERM -1 2>/dev/null || true
  local waited=0
  while [ -n "$(others)" ] && [ $waited -lt $((grace * 10)) ]; do sleep 0.1; waited=$((waited + 1)); done
}

trap - ERR
signalled=""
trap 'signalled=TERM' TERM
trap 'signalled=INT' INT
trap 'signalled=HUP' HUP
# A background job of this shell would start with SIGINT and SIGQUIT ignored, and pass that on to
# everything it starts (a script could not trap them): the command starts with every signal at
# its default, as from a login shell; where env cannot reset them, in a process group of its own.
default_signals=(--default-signal)
env --default-signal true 2>/dev/null || { default_signals=(); set -m; }
env "${default_signals[@]}" -i PATH="$LOGIN_PATH" HOME=/root TERM="${TERM:-dumb}" "$@" &
command_pid=$!
status=0
while :; do
  wait "$command_pid" && status=0 || status=$?
  if [ -n "$signalled" ]; then
    echo "clean_root.sh: stopping every process in the root (SIGTERM, SIGKILL after ${grace} s)" >&2
    stop_all
    case $signalled in TERM) exit 143 ;; INT) exit 130 ;; HUP) exit 129 ;; esac
  fi
  kill -0 "$command_pid" 2>/dev/null || break
done
left=""
for p in $(others); do
  read -r name <"$root/proc/$p/comm" 2>/dev/null || continue
  left+=" $name[$p]"
done
if [ -n "$left" ]; then
  echo "clean_root.sh: the command left processes running in the root, stopped now:$left" >&2
  stop_all
fi
exit $status
EOF
}

# Runs COMMAND in the root; its exit status.
enter_root() {
  local env_args=() assignment
  for assignment in "${envs[@]}"; do env_args+=("$assignment"); done
  say "running in the root (host $hostname): ${command_args[*]}"
  env LOGIN_PATH="$LOGIN_PATH" unshare --mount --pid --fork --uts --ipc --cgroup --propagation private --kill-child=SIGKILL \
    /bin/bash "$work/init.sh" "$root" "$hostname" "$grace" "${env_args[@]}" "$(command -v chroot)" "$root" "${command_args[@]}" &
  unshare_pid=$!
  local status=0
  wait "$unshare_pid" || status=$?
  unshare_pid=""
  return $status
}

# Stops what runs under `unshare --fork --kill-child` with process id $1 (unshare itself ignores
# SIGTERM and SIGINT): $2 to its child, up to $3 seconds to end, then SIGKILL to unshare, which
# kills the child, and with it, the child being a PID namespace's init, every process in it.
stop_unshared() {
  local pid=$1 signal=$2 seconds=$3 child waited=0
  kill -0 "$pid" 2>/dev/null || return 0
  child=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null) || true
  # shellcheck disable=SC2086
  [ -z "$child" ] || kill -"$signal" $child 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ $waited -lt $((seconds * 10)) ]; do sleep 0.1; waited=$((waited + 1)); done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# Processes of this machine whose root folder is the root: the same folder, by device and inode
# (its path reads differently from another mount namespace, as when this script runs in a root).
processes_in_root() {
  find -L /proc/[0-9]*/root -maxdepth 0 -samefile "$root" 2>/dev/null | sed -e 's|^/proc/||' -e 's|/root$||' || true
}

mounts_under_root() {
  findmnt -rn -o TARGET | awk -v r="$root" '$0 == r || index($0, r "/") == 1'
}

teardown() {
  local status=$?
  # Only this script tears down, never a child of it that failed before its exec.
  [ "$BASHPID" = "$$" ] || exit $status
  trap - EXIT INT TERM HUP
  # Still running only when interrupted: the root's init stops its processes within the grace
  # period (it got the signal from on_signal); mmdebstrap or tar gets SIGTERM.
  [ -z "$unshare_pid" ] || stop_unshared "$unshare_pid" 0 $((grace + 5))
  if [ -n "$builder_pid" ]; then
    if [ -z "$tar" ]; then stop_unshared "$builder_pid" TERM 30; else kill -TERM "$builder_pid" 2>/dev/null || true; fi
    wait "$builder_pid" 2>/dev/null || true
  fi
  if [ -n "$root" ]; then
    local left waited=0
    # A PID namespace's processes die a moment after its init.
    while left=$(processes_in_root) && [ -n "$left" ] && [ $waited -lt 50 ]; do sleep 0.1; waited=$((waited + 1)); done
    if [ -n "$left" ]; then
      say "processes still inside $root, killed now: ${left//$'\n'/ }"
      # shellcheck disable=SC2086
      kill -KILL $left 2>/dev/null || true
      sleep 0.5
    fi
    local mounts
    mounts=$(mounts_under_root)
    left=$(processes_in_root)
    if [ -n "$mounts" ] || [ -n "$left" ]; then
      say "error: left behind: mounts [${mounts//$'\n'/ }] processes [${left//$'\n'/ }]; $root not removed"
      status=125
    elif [ $made_root -eq 1 ] && [ $keep -eq 0 ]; then
      rm -rf --one-file-system "$root" || { say "error: could not remove $root"; status=125; }
      say "torn down: no mount under $root, no process in it; the root is removed"
    else
      say "torn down: no mount under $root, no process in it; the root is kept in $root"
    fi
  fi
  [ -z "$work" ] || rm -rf "$work"
  exit $status
}

on_signal() {
  say "interrupted by SIG$1: stopping the root"
  # SIGTERM whatever the signal: the root's init, started in the background, ignores SIGINT.
  if [ -n "$unshare_pid" ]; then
    local init
    init=$(cat "/proc/$unshare_pid/task/$unshare_pid/children" 2>/dev/null) || true
    # shellcheck disable=SC2086
    [ -z "$init" ] || kill -TERM $init 2>/dev/null || true
  fi
  exit $((128 + $2))
}

main() {
  parse_args "$@"
  check_machine
  trap teardown EXIT
  trap 'on_signal INT 2' INT
  trap 'on_signal TERM 15' TERM
  trap 'on_signal HUP 1' HUP
  work=$(mktemp -d /tmp/tb-clean-root-work.XXXXXX)
  make_root
  prepare_root
  write_init
  local status=0
  enter_root || status=$?
  say "the command exited with status $status"
  return $status
}

main "$@"

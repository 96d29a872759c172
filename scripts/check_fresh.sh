#!/usr/bin/env bash
# Proves that the README's two commands set up everything themselves: in a minimal Debian 12 root
# that looks like a fresh machine (scripts/clean_root.sh: mmdebstrap's apt and essential packages,
# nothing of ours; `/` a mount point, /proc, /sys with /sys/fs/cgroup, /dev, /run of its own), it
# copies a clean clone of this repository's HEAD and runs there, as a new user would,
#   scripts/bench.sh with a short filter, then scripts/test.sh,
# printing each command's wall time and ctest's summary; afterwards it checks that the tests left
# no network namespace in the root (ip netns list, findmnt -t nsfs) and that no mount of the root
# is left on this machine (findmnt), and says so. Not part of
# CI (30-60 minutes: both commands build everything; a few GB of packages); run it before changing
# scripts/deps.sh or the build's dependencies.
#
#   scripts/check_fresh.sh            # as root (the root's mounts and namespaces need it)
#
# Environment: TB_FRESH_DIR (where the root goes: a new or empty folder; default a new folder
# under /tmp, removed at the end unless TB_FRESH_KEEP=1), TB_FRESH_MIRROR (default: the mirror
# apt-get uses here), TB_FRESH_TESTS (extra arguments to scripts/test.sh, e.g. '-R Models' for a
# quicker check), TB_FRESH_FILES (paths whose working-tree versions replace the clone's, to check a
# change to them before it is committed), TB_FRESH_CUDA_FROM_PYPI=1 (both commands run with
# TB_CUDA_FROM_PYPI=1, as on a GPU machine with only a driver: the CUDA toolkit, cuDNN and NCCL
# come from PyPI's wheels, the CUDA backend must build, and its binaries must find those
# libraries without LD_LIBRARY_PATH; about 2 GB more).
# Exit status: 0 when both commands succeeded (and, with PyPI's CUDA, the backend was built) and
# nothing of the tests or the root is left behind, else 1; 2 when this machine cannot make the root.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

if [ "$(id -u)" -ne 0 ]; then
  echo "check_fresh.sh: error: run as root (scripts/clean_root.sh's mounts and namespaces need it)" >&2
  exit 2
fi
# What this script itself needs on the host: git for the clean clone, ip to list the network
# namespaces (clean_root.sh installs mmdebstrap where it is missing).
need=()
command -v git >/dev/null || need+=(git)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  echo "check_fresh.sh: installing ${need[*]} on this machine"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

work=$(mktemp -d /tmp/tb-fresh-work.XXXXXX)
trap 'rm -rf "$work"' EXIT
clone=$work/clone
git clone -q --no-local "$repo" "$clone"
echo "check_fresh.sh: clean clone of $(git -C "$clone" rev-parse --short HEAD) in $clone"
for path in ${TB_FRESH_FILES:-}; do
  cp -a "$repo/$path" "$clone/$path"
  echo "check_fresh.sh: $path as in the working tree"
done
pypi_cuda=${TB_FRESH_CUDA_FROM_PYPI:-0}

# The two commands, timed, inside the root. bench.sh with a short filter (the MLP on one thread,
# a device its default set leaves out) so that the check is about set-up, not about
# benchmarking; test.sh as CI runs it.
inside=$work/inside.sh
cat >"$inside" <<EOF
#!/bin/bash
set -uo pipefail
cd /root/trainbench
EOF
# pip inside the root (ReFrame for test.sh; PyPI's CUDA wheels with TB_FRESH_CUDA_FROM_PYPI=1)
# trusts what this machine trusts (an HTTPS proxy's own CA, say), whatever CA bundle this
# machine's environment names.
host_ca=/etc/ssl/certs/ca-certificates.crt
uploads=(--upload "$clone:/root/trainbench" --upload "$inside:/root/inside.sh")
if [ -f "$host_ca" ]; then
  uploads+=(--upload "$host_ca:/root/host-ca-certificates.crt")
  echo 'export PIP_CERT=/root/host-ca-certificates.crt REQUESTS_CA_BUNDLE=/root/host-ca-certificates.crt' >>"$inside"
fi
if [ "$pypi_cuda" = 1 ]; then
  echo 'export TB_CUDA_FROM_PYPI=1' >>"$inside"
fi
cat >>"$inside" <<EOF
status=0
start=\$(date +%s)
TB_FILTER='train/mlp/mnist/cpu:1/' scripts/bench.sh --devices=cpu:1 --benchmark_min_time=0.2 || status=1
bench_s=\$(( \$(date +%s) - start ))
echo "check_fresh.sh: scripts/bench.sh exited \$status after \${bench_s} s"
start=\$(date +%s)
tstatus=0
scripts/test.sh ${TB_FRESH_TESTS:-} 2>&1 | tee /root/test.log || tstatus=1
test_s=\$(( \$(date +%s) - start ))
echo "check_fresh.sh: scripts/test.sh exited \$tstatus after \${test_s} s"
grep -E 'tests passed|tests failed' /root/test.log | tail -1
# What the tests leave in the root: no network namespace, no nsfs mount (ip netns add's).
if command -v ip >/dev/null; then
  left_netns=\$(ip netns list | awk '{print \$1}' | tr '\\n' ' ')
  left_nsfs=\$(findmnt -rn -t nsfs -o TARGET | tr '\\n' ' ')
  if [ -n "\${left_netns// /}\${left_nsfs// /}" ]; then
    echo "check_fresh.sh: in the root after the tests: network namespaces [\$left_netns] nsfs mounts [\$left_nsfs] left behind"
    tstatus=1
  else
    echo "check_fresh.sh: in the root after the tests: ip netns list empty, no nsfs mount (findmnt -t nsfs)"
  fi
fi
EOF
if [ "$pypi_cuda" = 1 ]; then
  # The backend was required and built from the wheels, and its test binary finds every CUDA
  # library through its RPATH alone.
  cat >>"$inside" <<'EOF'
grep -q 'trainbench: CUDA backend ON' /root/test.log || { echo "check_fresh.sh: the CUDA backend was not built"; status=1; }
readelf -d build/debug/tests/test_cuda | grep -E 'RUNPATH|RPATH'
env -u LD_LIBRARY_PATH ldd build/debug/tests/test_cuda | grep -E 'libcud|libnccl|libcublas|not found'
if env -u LD_LIBRARY_PATH ldd build/debug/tests/test_cuda | grep -q 'not found'; then status=1; fi
echo "check_fresh.sh: build/cuda-wheels takes $(du -sh build/cuda-wheels | cut -f1)"
EOF
fi
cat >>"$inside" <<EOF
[ \$status -eq 0 ] && [ \$tstatus -eq 0 ]
EOF
chmod +x "$inside"

if [ "$pypi_cuda" = 1 ]; then echo "check_fresh.sh: TB_CUDA_FROM_PYPI=1: the CUDA backend from PyPI's NVIDIA wheels"; fi
root_dir=${TB_FRESH_DIR:-/tmp/tb-fresh-root.$$}
options=(--dir "$root_dir")
[ "${TB_FRESH_KEEP:-0}" != 1 ] || options+=(--keep)
[ -z "${TB_FRESH_MIRROR:-}" ] || options+=(--mirror "$TB_FRESH_MIRROR")
# What this machine has before: afterwards it must have the same network namespaces, and no mount
# under the root.
netns_before=$(ip netns list 2>/dev/null | awk '{print $1}' | sort) || true
start=$(date +%s)
status=0
# In the background, so that SIGTERM or SIGINT reaches clean_root.sh, which stops the root's
# processes and removes it.
scripts/clean_root.sh "${options[@]}" "${uploads[@]}" -- /bin/bash /root/inside.sh &
clean_root_pid=$!
trap 'kill -TERM $clean_root_pid 2>/dev/null' TERM HUP
trap 'kill -INT $clean_root_pid 2>/dev/null' INT
while kill -0 $clean_root_pid 2>/dev/null; do wait $clean_root_pid || true; done
trap - TERM HUP INT
wait $clean_root_pid && status=0 || status=$?
total_s=$(( $(date +%s) - start ))
if [ $status -eq 2 ]; then
  echo "check_fresh.sh: this machine cannot make the clean root (scripts/clean_root.sh's reason is above)" >&2
  exit 2
fi
[ $status -eq 0 ] || status=1

# Nothing of the root on this machine: no mount whose target or source names its folder (which is
# gone unless kept; a mount of the root's run/netns would be there). The root's network
# namespaces lived on its own /run, a tmpfs of its own mount namespace: any new in this machine's
# `ip netns list` is another program's, said with the processes holding it.
left_mounts=$(findmnt -rn -o TARGET,SOURCE | grep -F "$root_dir" || true)
netns_after=$(ip netns list 2>/dev/null | awk '{print $1}' | sort) || true
new_netns=$(comm -13 <(echo "$netns_before") <(echo "$netns_after") | tr '\n' ' ')
if [ -n "$left_mounts" ]; then
  echo "check_fresh.sh: left behind on this machine: mounts $left_mounts"
  status=1
else
  echo "check_fresh.sh: findmnt: no mount of the root ($root_dir) left on this machine"
fi
if [ "${TB_FRESH_KEEP:-0}" != 1 ] && [ -e "$root_dir" ]; then
  echo "check_fresh.sh: the root is still in $root_dir"
  status=1
fi
if [ -n "${new_netns// /}" ]; then
  holders=()
  for ns in $new_netns; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do holders+=("$(cat "/proc/$pid/comm" 2>/dev/null)[$pid]"); done
  done
  echo "check_fresh.sh: ip netns list on this machine: ${new_netns}appeared during the run, held by" \
       "${holders[*]:-no process}: another program's, not the root's (its /run/netns went with its mount namespace)"
else
  echo "check_fresh.sh: ip netns list on this machine: none new (as before the run: ${netns_after:-none})"
fi
echo "check_fresh.sh: total ${total_s} s (root, packages, both commands); exit $status"
exit $status

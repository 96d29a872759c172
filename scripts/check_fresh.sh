#!/usr/bin/env bash
# Proves that the README's two commands set up everything themselves: builds a minimal Debian 12
# root with mmdebstrap (apt and the essential packages, nothing of ours), copies a clean clone of
# this repository's HEAD into it, and runs there, as a new user would,
#   scripts/bench.sh with a short filter, then scripts/test.sh,
# printing each command's wall time and ctest's summary. Not part of CI (about 10 minutes and a
# few GB of packages); run it before changing scripts/deps.sh or the build's dependencies.
#
#   scripts/check_fresh.sh            # as root (mmdebstrap's root mode needs it)
#
# Environment: TB_FRESH_DIR (where the root goes; default a new folder under /tmp, removed at
# the end unless TB_FRESH_KEEP=1), TB_FRESH_MIRROR (default: the mirror apt-get uses here),
# TB_FRESH_TESTS (extra arguments to scripts/test.sh, e.g. '-R Models' for a quicker check),
# TB_FRESH_FILES (paths whose working-tree versions replace the clone's, to check a change to
# them before it is committed), TB_FRESH_CUDA_FROM_PYPI=1 (both commands run with
# TB_CUDA_FROM_PYPI=1, as on a GPU machine with only a driver: the CUDA toolkit, cuDNN and NCCL
# come from PyPI's wheels, the CUDA backend must build, and its binaries must find those
# libraries without LD_LIBRARY_PATH; about 2 GB more).
# Exit status: 0 when both commands succeeded (and, with PyPI's CUDA, the backend was built), else 1.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

if [ "$(id -u)" -ne 0 ]; then
  echo "check_fresh.sh: error: run as root (mmdebstrap builds the root and chroots into it)" >&2
  exit 2
fi
# What this script itself needs on the host: mmdebstrap, and git for the clean clone.
need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v git >/dev/null || need+=(git)
if [ ${#need[@]} -gt 0 ]; then
  echo "check_fresh.sh: installing ${need[*]} on this machine"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

dir=${TB_FRESH_DIR:-$(mktemp -d /tmp/tb-fresh.XXXXXX)}
cleanup() {
  if [ "${TB_FRESH_KEEP:-0}" != 1 ]; then rm -rf "$dir"; else echo "check_fresh.sh: kept $dir"; fi
}
trap cleanup EXIT
mkdir -p "$dir"
clone=$dir/clone
root=$dir/root
git clone -q --no-local "$repo" "$clone"
echo "check_fresh.sh: clean clone of $(git -C "$clone" rev-parse --short HEAD) in $clone"
for path in ${TB_FRESH_FILES:-}; do
  cp -a "$repo/$path" "$clone/$path"
  echo "check_fresh.sh: $path as in the working tree"
done
pypi_cuda=${TB_FRESH_CUDA_FROM_PYPI:-0}

# The mirror apt-get uses on this machine (deb822 or one-line sources), else Debian's.
mirror=${TB_FRESH_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -h -m1 -oE '^URIs: *[^ ]+/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 |
           sed 's/^URIs: *//') || true
fi
if [ -z "$mirror" ]; then
  mirror=$(grep -h -m1 -oE '^deb +[^ ]+/debian/? +bookworm' /etc/apt/sources.list 2>/dev/null | head -1 |
           awk '{print $2}') || true
fi
mirror=${mirror:-http://deb.debian.org/debian}

# The two commands, timed, inside the root. bench.sh with a short filter (the MLP on one thread,
# a device its default set leaves out) so that the check is about set-up, not about
# benchmarking; test.sh as CI runs it.
inside=$dir/inside.sh
cat >"$inside" <<EOF
#!/bin/bash
set -uo pipefail
cd /root/trainbench
EOF
# pip inside the root trusts what this machine trusts (an HTTPS proxy's own CA, say), whatever
# CA bundle this machine's environment names.
host_ca=/etc/ssl/certs/ca-certificates.crt
hooks=()
if [ "$pypi_cuda" = 1 ]; then
  echo 'export TB_CUDA_FROM_PYPI=1' >>"$inside"
  if [ -f "$host_ca" ]; then
    hooks+=(--customize-hook="upload $host_ca /root/host-ca-certificates.crt")
    echo 'export PIP_CERT=/root/host-ca-certificates.crt REQUESTS_CA_BUNDLE=/root/host-ca-certificates.crt' >>"$inside"
  fi
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

echo "check_fresh.sh: building a minimal Debian 12 root (mmdebstrap --variant=apt bookworm, $mirror) in $root"
if [ "$pypi_cuda" = 1 ]; then echo "check_fresh.sh: TB_CUDA_FROM_PYPI=1: the CUDA backend from PyPI's NVIDIA wheels"; fi
start=$(date +%s)
status=0
mmdebstrap --variant=apt --mode=root \
  --customize-hook='mkdir -p "$1/root/trainbench"' \
  --customize-hook="sync-in '$clone' /root/trainbench" \
  --customize-hook="upload '$inside' /root/inside.sh" \
  "${hooks[@]}" \
  --customize-hook='chroot "$1" /bin/bash /root/inside.sh' \
  bookworm "$root" "$mirror" || status=1
echo "check_fresh.sh: total $(( $(date +%s) - start )) s (root, packages, both commands); exit $status"
exit $status

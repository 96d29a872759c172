#!/usr/bin/env bash
# Proves that scripts/gpu_bundle.sh's archive runs on a machine that has none of trainbench's
# build dependencies and no Open MPI, as the GPU machines it is made for: in a clean Debian 12
# root (scripts/clean_root.sh: apt and the essential packages) given only what such a machine
# has besides (python3, standing for PyTorch's; this machine's CUDA runtime libraries, standing
# for the machine's toolkit or PyTorch's nvidia-* wheels), it unpacks the bundle and runs from it
#   run.sh ompi_info                        Open MPI found where the bundle put it (OPAL_PREFIX)
#   run.sh mpirun -np 2 test_mpi            MPI's collectives and data parallelism over 2 ranks
#   run.sh mpirun -np 2 trainbench --devices=cpu:1,mpi:2 ...   a data-parallel row over 2 ranks
#   run.sh check --out /tmp/check           the check's GPU-less form, then its check.md
# and fails if any of them fails, or if a program of the bundle finds a library neither the
# bundle nor the root has. There is no GPU here: what needs one is proved on a GPU machine.
#
#   scripts/check_bundle.sh [--bundle FILE] [--log FILE]      # as root; about 3 minutes
#
# --bundle: the archive (default build-bundle/bundle.tgz; scripts/gpu_bundle.sh makes it).
# --log: where the whole output also goes (default build-bundle/check_bundle-log.txt).
# Exit status: 0 when everything above ran in the root; 1 when something failed there; 2 for bad
# usage or a machine that cannot make the root (clean_root.sh's own statuses pass through).
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=build-bundle/bundle.tgz
log=build-bundle/check_bundle-log.txt
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}
die() { echo "check_bundle.sh: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=${2:-}; shift 2 || usage ;;
    --bundle=*) bundle=${1#--bundle=}; shift ;;
    --log) log=${2:-}; shift 2 || usage ;;
    --log=*) log=${1#--log=}; shift ;;
    -h | --help) usage 0 ;;
    *) die "unknown argument '$1' (options: --bundle FILE, --log FILE)" ;;
  esac
done
[ -f "$bundle" ] || die "no bundle at $bundle: make it with scripts/gpu_bundle.sh, or name one with --bundle"
[ "$(id -u)" -eq 0 ] || die "run as root: scripts/clean_root.sh needs it"
mkdir -p "$(dirname "$log")"

# The CUDA libraries the bundle's programs load, from this machine's toolkit: ldd on the programs
# as they are in the archive.
peek=$(mktemp -d)
trap 'rm -rf "$peek"' EXIT
tar xzf "$bundle" -C "$peek" tb/libexec
uploads=(--upload "$bundle:/root/bundle.tgz")
cuda=()
while read -r name path; do
  case $name in
    libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libcudnn*.so.* | libnccl.so.* | libnvrtc*.so.*)
      [ -e "$path" ] || die "the bundle's programs need $name, which this machine lacks (the CUDA toolkit with cuDNN and NCCL)"
      uploads+=(--upload "$(readlink -f "$path"):/usr/local/cuda/lib64/$name")
      cuda+=("$name")
      ;;
  esac
done < <(ldd "$peek"/tb/libexec/* | awk '$2 == "=>" {print $1, $3}' | sort -u)
echo "check_bundle.sh: $bundle ($(du -h "$bundle" | cut -f1)); the root gets python3 and ${cuda[*]} in /usr/local/cuda/lib64"

inside=$peek/inside.sh
cat >"$inside" <<'EOF'
#!/bin/bash
# Run in the clean root by scripts/check_bundle.sh.
set -uo pipefail
failed=0
step() {  # title, command...
  local title=$1 status=0
  shift
  echo
  echo "=== $title: $*"
  "$@" || status=$?
  echo "=== exit status $status"
  [ $status -eq 0 ] || failed=1
}
echo "the root: $(. /etc/os-release && echo "$PRETTY_NAME"), $(nproc) cores; mpirun: $(command -v mpirun || echo none);" \
  "libmpi: $(ldconfig -p | grep -c libmpi) in ldconfig; python3: $(python3 --version 2>&1)"
cd /tmp && tar xzf /root/bundle.tgz && echo "unpacked: $(du -sh /tmp/tb | cut -f1) in /tmp/tb ($(cat /tmp/tb/VERSION))"
# Every program of the bundle finds every library: the bundle's own, the root's, the CUDA ones.
missing=$(for f in /tmp/tb/libexec/* /tmp/tb/mpi/usr/bin/orterun /tmp/tb/mpi/usr/bin/orted; do
  TB_BUNDLE=/tmp/tb sh -c '. /tmp/tb/env.sh; ldd "$1"' _ "$f" | grep 'not found' | sed "s|^|$f: |"; done)
if [ -n "$missing" ]; then echo "=== not found: $missing"; failed=1; else echo "=== every program finds its libraries"; fi
step "Open MPI, relocated" /tmp/tb/run.sh ompi_info --path prefix --path libdir --path pkgdatadir
step "test_mpi on 2 ranks" /tmp/tb/run.sh mpirun -np 2 --oversubscribe --allow-run-as-root test_mpi
step "trainbench on 2 ranks" /tmp/tb/run.sh mpirun -np 2 --oversubscribe --allow-run-as-root trainbench \
  --devices=cpu:1,mpi:2 --benchmark_filter='^train/mlp/mnist/' --iterations=20 --csv=/tmp/mpi.csv
step "the check without a GPU" /tmp/tb/run.sh check --out /tmp/check
echo
echo "=== check.md"
cat /tmp/check/check-*/check.md
exit $failed
EOF
chmod +x "$inside"
uploads+=(--upload "$inside:/root/inside.sh")

status=0
scripts/clean_root.sh --include python3 "${uploads[@]}" -- /root/inside.sh 2>&1 | tee "$log" || status=$?
echo "check_bundle.sh: exit status $status; the whole output is in $log"
exit "$status"

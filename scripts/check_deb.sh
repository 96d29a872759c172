#!/usr/bin/env bash
# Proves that trainbench's Debian package installs and runs on a fresh Debian 12 machine: builds
# the package from this checkout (a Release build for any x86-64 CPU, without the CUDA backend:
# cmake/Package.cmake says why, then `cpack -G DEB`, its dependencies from dpkg-shlibdeps),
# installs it with apt-get (--no-install-recommends: its Depends line alone must do) in a clean
# Debian 12 root (scripts/clean_root.sh), and there, from a folder outside any checkout, runs
#   trainbench --version, a short CPU benchmark (the MLP on cpu:1) twice,
#   trainbench-plot on the first CSV (with the installed reference runs), and
#   trainbench-compare on the two,
# printing each command and its output. Not part of CI (about 15 minutes on 2 cores: the build,
# the root and its packages); run it before changing the install rules or the package.
#
#   scripts/check_deb.sh [--log FILE]     # as root (the clean root needs it)
#
# --log FILE also writes everything printed to FILE (results/fresh/check_deb.log is the one kept).
# Environment: TB_DEB_BUILD (the build folder, default build/deb; reused when there), TB_DEB_JOBS
# (build jobs, default all cores), and scripts/clean_root.sh's TB_ variables where it has any.
# Exit status: 0 when the package was built, installed and every command in the root succeeded;
# 1 when one failed; 2 for bad usage or not root.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

log=""
case ${1:-} in
  --log) log=${2:?check_deb.sh: --log needs a file}; shift 2 ;;
  --log=*) log=${1#--log=}; shift ;;
  "") ;;
  *) echo "check_deb.sh: unknown argument '$1' (usage: scripts/check_deb.sh [--log FILE])" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "check_deb.sh: error: run as root (scripts/clean_root.sh makes the clean root with namespaces and chroot)" >&2
  exit 2
fi
if [ -n "$log" ]; then
  mkdir -p "$(dirname "$log")"
  exec > >(tee "$log") 2>&1
fi

build=${TB_DEB_BUILD:-build/deb}
echo "check_deb.sh: trainbench at $(git rev-parse --short=12 HEAD)$(git status --porcelain --untracked-files=no |
  grep -q . && echo ' (with local changes)'), on $(. /etc/os-release && echo "$PRETTY_NAME"), $(date -u +%Y-%m-%dT%H:%MZ)"
start=$(date +%s)
# TB_NATIVE=OFF: a package runs on CPUs other than the build machine's. No tests: only the
# program, the scripts and the data go into the package.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTB_CUDA=OFF -DTB_NATIVE=OFF -DTB_TESTS=OFF -DTB_REQUIRE_MPI=ON \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
grep 'trainbench: CUDA backend' "$build.configure.log"
cmake --build "$build" -j "${TB_DEB_JOBS:-$(nproc)}" >"$build.build.log" 2>&1 || { tail -50 "$build.build.log"; exit 1; }
rm -f "$build"/trainbench_*.deb
(cd "$build" && cpack -G DEB) | grep -v '^CPack: - Install' || exit 1
deb=$(ls "$build"/trainbench_*.deb)
echo "check_deb.sh: built $(basename "$deb") ($(du -h "$deb" | cut -f1)) in $(( $(date +%s) - start )) s"
dpkg-deb --field "$deb" Package Version Architecture Depends Recommends Suggests Installed-Size
echo "check_deb.sh: its files:"
dpkg-deb --contents "$deb" | awk '{print $6}' | grep -v '/$' | sed 's|^\./|/|'
if dpkg-deb --fsys-tarfile "$deb" | tar -xO | grep -q -a -F "$repo"; then
  echo "check_deb.sh: error: a file of the package names this checkout ($repo)" >&2
  exit 1
fi
echo "check_deb.sh: no file of the package names this checkout ($repo)"

# Inside the root: apt-get installs the package and what it depends on, then the commands run
# from /root/work, a folder outside any checkout.
inside=$(mktemp /tmp/tb-check-deb.XXXXXX)
trap 'rm -f "$inside"' EXIT
cat >"$inside" <<'EOF'
#!/bin/bash
set -uo pipefail
step() { echo; echo "+ $*"; "$@"; }
status=0
step apt-get update -qq || exit 1
cd /root/deb || exit 1
echo "+ apt-get install -y --no-install-recommends ./$(ls *.deb)   (its output in /root/apt.log)"
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ./*.deb >/root/apt.log 2>&1 ||
  { tail -30 /root/apt.log; exit 1; }
echo "apt-get installed $(grep -c '^Setting up' /root/apt.log) packages"
step dpkg-query -W -f='${Package} ${Version} ${Status}\n' trainbench || status=1
mkdir -p /root/work && cd /root/work || exit 1
step test ! -e .git || status=1
step command -v trainbench trainbench-plot trainbench-compare || status=1
step trainbench --version || status=1
for name in a b; do
  step trainbench --benchmark_filter='^train/mlp/mnist/cpu:1/' --devices=cpu:1 --benchmark_min_time=0.2 \
    --csv=$name.csv || status=1
done
step trainbench-plot a.csv --reference all --out charts || status=1
step ls charts || status=1
step grep -m1 -o 'the reference run of H100' charts/report.md || status=1
step trainbench-compare a.csv b.csv || status=1
step ls /usr/share/trainbench /usr/share/trainbench/reframe /usr/libexec/trainbench || status=1
echo
echo "inside the root: exit $status"
exit $status
EOF
status=0
scripts/clean_root.sh --upload "$(realpath "$deb"):/root/deb/$(basename "$deb")" --upload "$inside:/root/inside.sh" \
  -- /bin/bash /root/inside.sh || status=1
echo "check_deb.sh: $(basename "$deb") in a clean Debian 12 root: $([ $status -eq 0 ] && echo ok || echo FAILED)," \
     "$(( $(date +%s) - start )) s in all"
exit $status

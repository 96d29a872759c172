#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs on a bare GPU machine into one archive: trainbench,
# test_cuda, test_mpi and test_parallel (a Release build for generic x86-64 with the CUDA backend
# and MPI), the libraries they need that such a machine may lack, Open MPI (Debian 12's packages
# unpacked into the bundle, relocated with OPAL_PREFIX) and the scripts the check calls. The GPU
# machine needs only the NVIDIA driver, the CUDA libraries (a CUDA toolkit, or PyTorch's nvidia-*
# wheels) and a python3; it needs no Open MPI, compiler or package registry.
#
#   scripts/gpu_bundle.sh [--archs LIST] [--jobs N]     # from the project root, on Debian 12
#
# --archs: the CUDA architectures to compile for (default 90: H100, H200); --jobs: parallel
# compile jobs (default: the cores). Output: build-bundle/bundle.tgz (git-ignored), at most 60 MiB
# so that it travels with the working tree to a machine that takes 64 MiB. On the GPU machine:
#
#   tar xzf build-bundle/bundle.tgz -C /tmp
#   /tmp/tb/run.sh check --out /tmp/check      # scripts/gpu_check.sh with the bundle's programs
#   /tmp/tb/run.sh mpirun -np 2 trainbench --devices=gpu:1,gpu:2 --benchmark_filter=train/mlp/
#   /tmp/tb/run.sh test_cuda                   # any bundled program: trainbench, test_cuda,
#                                              # test_mpi, test_parallel, mpirun, ompi_info
#
# The bundle: run.sh (puts bin/ first on PATH and sets TB_BIN and TB_TESTS_DIR for the check),
# bin/ (a wrapper per program: it sources env.sh, which adds the bundle's libraries and the
# machine's CUDA libraries to LD_LIBRARY_PATH for that program and its children only, so that a
# python3 with PyTorch run beside it keeps its own), libexec/ (the programs), lib/ (libbenchmark,
# libfmt, libdnnl, libOpenCL, libgomp and whatever else they need beyond glibc, libstdc++ and
# zlib), mpi/ (Open MPI and PMIx, their components, help files and launcher), scripts/ (this
# repository's scripts). The CUDA libraries are not carried: env.sh finds them as
# ../shared/gpu-bundle.sh's run.sh does, in /usr/local/cuda and in python3's nvidia-* wheels.
# scripts/check_bundle.sh unpacks the bundle in a clean Debian 12 root without Open MPI and runs
# the check's GPU-less form and `mpirun -np 2` from it.
#
# Needs: Debian 12 with trainbench's build dependencies (scripts/deps.sh), the CUDA toolkit with
# cuDNN and NCCL, and apt-get download (network) for Open MPI's packages, kept in
# build-bundle/debs/ for the next run.
# Environment: TB_BUNDLE_DIR (default build-bundle: the build folder, debs and the archive).
# Exit status: 0 with the archive written; 1 when the build, a package or a size check fails;
# 2 for bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

archs=90
jobs=$(nproc)
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}
die() { echo "gpu_bundle.sh: error: $*" >&2; exit "${2:-1}"; }
say() { echo "gpu_bundle.sh: $*"; }

while [ $# -gt 0 ]; do
  case $1 in
    --archs) archs=${2:-}; shift 2 || usage ;;
    --archs=*) archs=${1#--archs=}; shift ;;
    --jobs) jobs=${2:-}; shift 2 || usage ;;
    --jobs=*) jobs=${1#--jobs=}; shift ;;
    -h | --help) usage 0 ;;
    *) die "unknown argument '$1' (options: --archs LIST, --jobs N)" 2 ;;
  esac
done
[[ $archs =~ ^[0-9]+[a-z]?(\;[0-9]+[a-z]?)*$ ]] || die "--archs: '$archs' is not a list of CUDA architectures such as 90 or '80;90'" 2
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs: '$jobs' is not a whole number >= 1" 2
[ -f CMakeLists.txt ] && [ -d engine/cuda ] || die "run it from the trainbench project root" 2
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "apt-get and dpkg-deb are needed (Debian 12)"

out=$root/${TB_BUNDLE_DIR:-build-bundle}
build=$out/build
debs=$out/debs
max_mib=60  # the device machine carries 64 MiB with the working tree

# Open MPI 4.1 and what it loads beyond glibc and zlib, as Debian 12 packages. Its transports for
# InfiniBand, UCX, libfabric and PSM are left out (their components are removed below): ranks on
# one machine talk over shared memory and TCP, NCCL over its own transports.
MPI_PACKAGES=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libudev1 libmunge2 libnuma1 libltdl7)
# Libraries every machine the bundle is for has (glibc's, the C++ runtime, zlib), and the CUDA
# libraries the GPU machine provides (its driver's, its toolkit's or PyTorch's wheels).
BASE_LIBS='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libutil\.so\.1|libresolv\.so\.2|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libz\.so\.1)$'
CUDA_LIBS='^(libcuda\.so\.1|libcudart\.so\..*|libcublas\.so\..*|libcublasLt\.so\..*|libcudnn.*\.so\..*|libnccl\.so\..*|libnvidia-ml\.so\.1|libnvrtc.*\.so\..*)$'
PROGRAMS=(trainbench test_cuda test_mpi test_parallel)

# ---- the build ----------------------------------------------------------------------------------
say "building ${PROGRAMS[*]} for CUDA architectures $archs in $build (Release, generic x86-64, MPI on)"
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTB_NATIVE=OFF -DTB_REQUIRE_CUDA=ON -DTB_REQUIRE_MPI=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$archs" >"$build/configure.log" 2>&1 ||
  { tail -20 "$build/configure.log" >&2; die "CMake's configuration failed (all of it in $build/configure.log)"; }
cmake --build "$build" -j "$jobs" --target "${PROGRAMS[@]}"

# ---- Open MPI's packages ------------------------------------------------------------------------
mkdir -p "$debs"
missing=()
for p in "${MPI_PACKAGES[@]}"; do
  compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "downloading ${missing[*]} (Debian's packages) into $debs"
  # apt-get download runs as the _apt user where it can: the folder must be writable by it.
  (cd "$debs" && chmod 777 . && apt-get download -q "${missing[@]}") ||
    die "apt-get download of ${missing[*]} failed (apt-get update? network?)"
fi

stage_parent=$(mktemp -d "${TMPDIR:-/tmp}/tb-bundle.XXXXXX")
trap 'rm -rf "$stage_parent"' EXIT
tb=$stage_parent/tb
mkdir -p "$tb/bin" "$tb/libexec" "$tb/lib" "$tb/mpi"
for p in "${MPI_PACKAGES[@]}"; do
  deb=$(compgen -G "$debs/${p}_*.deb" | sort | tail -1)
  dpkg-deb -x "$deb" "$tb/mpi"
done
mpi_usr=$tb/mpi/usr
mpi_lib=$mpi_usr/lib/x86_64-linux-gnu
components=$mpi_lib/openmpi/lib/openmpi3
[ -x "$mpi_usr/bin/orterun" ] && [ -d "$components" ] || die "Open MPI's packages did not unpack as expected ($mpi_usr/bin/orterun, $components)"
# What the bundle does not need: headers, manuals, compiler wrappers, Java, documentation, and the
# components whose libraries it does not carry (a component that cannot load is noise at start-up).
rm -rf "$tb/mpi/usr/share/man" "$tb/mpi/usr/share/doc" "$tb/mpi/usr/share/lintian" "$mpi_lib/openmpi/include" \
  "$mpi_lib/pkgconfig" "$mpi_lib/openmpi/lib/pkgconfig"
find "$mpi_usr/bin" -name 'mpi*' ! -name 'mpirun.openmpi' ! -name 'mpiexec.openmpi' -delete
find "$mpi_usr/bin" \( -name 'osh*' -o -name 'shmem*' -o -name 'opal*' -o -name 'orte[cC]*' -o -name 'profile2mat' \
  -o -name 'aggregate_profile' \) -delete
find "$mpi_lib" -name '*java*' -delete

# The libraries a program or library needs (its NEEDED entries).
needed() { objdump -p "$1" 2>/dev/null | awk '$1 == "NEEDED" {print $2}'; }
# True when library $1 is in the bundle's Open MPI, or is one of the base or CUDA libraries.
provided() {
  [[ $1 =~ $BASE_LIBS ]] || [[ $1 =~ $CUDA_LIBS ]] || [ -e "$mpi_lib/$1" ] || [ -e "$mpi_lib/openmpi/lib/$1" ] ||
    [ -e "$tb/lib/$1" ]
}
removed=()
for component in "$components"/*.so "$mpi_lib"/pmix2/lib/pmix/*.so "$mpi_lib"/libmca_common_*.so.*; do
  [ -e "$component" ] || continue
  for lib in $(needed "$component"); do
    if ! provided "$lib"; then
      removed+=("$(basename "$component") ($lib)")
      rm -f "$component"
      break
    fi
  done
done
say "left out ${#removed[@]} Open MPI components whose libraries are not carried: ${removed[*]}"

# ---- the programs and their libraries -----------------------------------------------------------
for p in "${PROGRAMS[@]}"; do
  src=$build/bench/$p
  [ -x "$src" ] || src=$build/tests/$p
  [ -x "$src" ] || die "the build made no $p"
  cp "$src" "$tb/libexec/$p"
done
# Every library ldd resolves for the programs, beyond the base, CUDA and Open MPI ones, with what
# those need in turn (ldd lists the whole tree).
for p in "${PROGRAMS[@]}"; do
  while read -r name path; do
    provided "$name" && continue
    [ -n "$path" ] && [ -e "$path" ] || die "ldd finds no $name for $p here"
    cp -L "$path" "$tb/lib/$name"
  done < <(ldd "$tb/libexec/$p" | awk '$2 == "=>" {print $1, $3}')
done
# Every program and library of the bundle must find what it needs inside the bundle, among the
# base libraries or among the CUDA ones: checked here by name (scripts/check_bundle.sh proves it
# on a clean root).
unresolved=()
while IFS= read -r -d '' elf; do
  head -c 4 "$elf" | grep -q 'ELF' || continue
  for lib in $(needed "$elf"); do
    provided "$lib" || unresolved+=("${elf#"$tb"/} needs $lib")
  done
done < <(find "$tb/libexec" "$tb/lib" "$mpi_usr/bin" "$mpi_lib" -type f -print0)
[ ${#unresolved[@]} -eq 0 ] || die "not carried: ${unresolved[*]}"

# ---- environment, wrappers, scripts -------------------------------------------------------------
cat >"$tb/env.sh" <<'EOF'
# Sourced by the bundle's wrappers (bin/): the environment its programs run in. The bundle's
# libraries and Open MPI, then the machine's CUDA libraries: /usr/local/cuda's, and those of
# python3's nvidia-* wheels (PyTorch's cuDNN, NCCL, cuBLAS). Computed once per process tree.
if [ -z "${TB_BUNDLE_LD_PATH:-}" ]; then
  tb_dirs=$TB_BUNDLE/lib:$TB_BUNDLE/mpi/usr/lib/x86_64-linux-gnu:$TB_BUNDLE/mpi/usr/lib/x86_64-linux-gnu/openmpi/lib
  for tb_d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$tb_d" ] && tb_dirs=$tb_dirs:$tb_d
  done
  tb_py=$(command -v python3 || true)
  if [ -n "$tb_py" ]; then
    for tb_s in $(env -u LD_LIBRARY_PATH "$tb_py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
      for tb_d in "$tb_s"/nvidia/*/lib "$tb_s"/nvidia/cu*/lib; do [ -d "$tb_d" ] && tb_dirs=$tb_dirs:$tb_d; done
    done
  fi
  export TB_BUNDLE_LD_PATH=$tb_dirs
  export TB_MACHINE_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  unset tb_dirs tb_d tb_py tb_s
fi
export LD_LIBRARY_PATH=$TB_BUNDLE_LD_PATH${TB_MACHINE_LD_LIBRARY_PATH:+:$TB_MACHINE_LD_LIBRARY_PATH}
# Open MPI and PMIx installed under the bundle (their own prefixes relocated); Debian's defaults
# (/etc/openmpi/openmpi-mca-params.conf, absent here) as variables; a launcher agent that exists,
# for runs on this machine alone (scripts/emulate_nodes.sh names its own).
export OPAL_PREFIX=$TB_BUNDLE/mpi/usr
export PMIX_PREFIX=$TB_BUNDLE/mpi/usr/lib/x86_64-linux-gnu/pmix2
export PMIX_MCA_mca_base_component_path=$PMIX_PREFIX/lib/pmix
export OMPI_MCA_plm_rsh_agent=${OMPI_MCA_plm_rsh_agent:-false}
export OMPI_MCA_btl_base_warn_component_unused=0
export OMPI_MCA_pml=${OMPI_MCA_pml:-^ucx} OMPI_MCA_osc=${OMPI_MCA_osc:-^ucx,pt2pt} OMPI_MCA_mtl=${OMPI_MCA_mtl:-^ofi}
export PATH=$TB_BUNDLE/bin:$OPAL_PREFIX/bin:$PATH
EOF
wrapper() {  # name, program path relative to the bundle
  cat >"$tb/bin/$1" <<EOF
#!/bin/sh
# The bundle's $1 with the bundle's libraries and the machine's CUDA libraries (env.sh).
TB_BUNDLE=\$(cd "\$(dirname "\$0")/.." && pwd)
export TB_BUNDLE
. "\$TB_BUNDLE/env.sh"
exec "\$TB_BUNDLE/$2" "\$@"
EOF
  chmod +x "$tb/bin/$1"
}
for p in "${PROGRAMS[@]}"; do wrapper "$p" "libexec/$p"; done
wrapper mpirun mpi/usr/bin/orterun
wrapper mpiexec mpi/usr/bin/orterun
wrapper ompi_info mpi/usr/bin/ompi_info

cat >"$tb/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs one of the bundle's programs, or the GPU check, on this machine:
#   run.sh check [gpu_check.sh's options]     scripts/gpu_check.sh with the bundle's programs
#   run.sh PROGRAM [ARGS]                     trainbench, test_cuda, test_mpi, test_parallel,
#                                             mpirun, ompi_info, or any command (bin/ comes first
#                                             on its PATH: `run.sh scripts/emulate_nodes.sh ...`)
# Made by scripts/gpu_bundle.sh; see its header for what the bundle holds.
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
export PATH=$here/bin:$PATH TB_BIN=$here/bin/trainbench TB_TESTS_DIR=$here/bin
prog=$1; shift
case $prog in
  check) exec "$here/scripts/gpu_check.sh" "$@" ;;
  */*) exec "$prog" "$@" ;;
  *) if [ -x "$here/bin/$prog" ]; then exec "$here/bin/$prog" "$@"; else exec "$prog" "$@"; fi ;;
esac
EOF
chmod +x "$tb/run.sh"

# The scripts, as in this working tree (tracked and untracked files, not ignored ones).
git ls-files -z --cached --others --exclude-standard -- scripts | while IFS= read -r -d '' f; do
  [ -e "$f" ] || continue
  mkdir -p "$tb/$(dirname "$f")"
  cp -p "$f" "$tb/$f"
done
git describe --always --dirty >"$tb/VERSION" 2>/dev/null || echo unknown >"$tb/VERSION"

# ---- the archive --------------------------------------------------------------------------------
archive=$out/bundle.tgz
tar czf "$archive.tmp" -C "$stage_parent" tb
mv "$archive.tmp" "$archive"
bytes=$(stat -c %s "$archive")
say "wrote $archive: $((bytes / 1024 / 1024)) MiB ($(du -sh "$tb" | cut -f1) unpacked; $(cat "$tb/VERSION"))"
du -sh "$tb"/* | sed 's/^/  /'
if [ "$bytes" -gt $((max_mib * 1024 * 1024)) ]; then
  die "the archive is over $max_mib MiB: it would not travel with the working tree"
fi

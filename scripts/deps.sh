#!/usr/bin/env bash
# Installs trainbench's required packages on Debian 12 where they are missing, and, on a machine
# with an NVIDIA driver but no CUDA toolkit, the CUDA toolkit with cuDNN and NCCL from PyPI's
# NVIDIA wheels; sourced by bench.sh and test.sh. Safe to run again: it installs nothing that is
# already there. scripts/check_fresh.sh proves both on a minimal Debian 12 root.
set -euo pipefail

TB_PACKAGES=(
  build-essential cmake git pkg-config
  libbenchmark-dev libfmt-dev libdnnl-dev libgtest-dev googletest zlib1g-dev
  # Debian's libdnnl-dev is built with oneDNN's OpenCL GPU runtime: its CMake package asks for
  # the OpenCL headers and the ICD loader, but the package does not depend on them.
  ocl-icd-opencl-dev opencl-c-headers
  libopenmpi-dev openmpi-bin
  python3 python3-pytest python3-matplotlib python3-numpy python3-scipy
  clang-format-14
  dataset-fashion-mnist
)
# What only the tests need, installed by test.sh beside TB_PACKAGES (bench.sh leaves a benchmark
# machine's scheduler alone): a one-node Slurm with munge for tests/test_slurm.py (Debian's
# slurm-wlm-basic-plugins, pulled in by slurm-wlm, has srun's pmix plugin), ip and tc for the
# emulated nodes of scripts/emulate_nodes.sh (unshare and taskset are util-linux, always there),
# mount, which every installed Debian has but a root of essential packages lacks, for the
# tests of scripts/clean_root.sh and of emulate_nodes.sh in a chroot, and Environment Modules for
# the installed modulefile (tests/test_install.py).
TB_TEST_PACKAGES=(slurm-wlm munge iproute2 mount environment-modules)

# ReFrame, for the ReFrame check's test (tests/test_reframe.py), from PyPI at this version, in a
# virtual environment of its own under build/ (Debian's pip installs nothing into the system
# Python: PEP 668). scripts/test.sh installs it (tb_install_reframe); the test finds it there.
TB_REFRAME_VERSION=4.10.4
TB_REFRAME_DIR=${TB_REFRAME_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/reframe}

# The CUDA pieces the backend needs, as PyPI's NVIDIA wheels, newest set first: the lowest CUDA
# version the driver must support, a label, then the pinned wheels. CUDA 13.0 Update 2 with the
# cuBLAS it ships and the cuDNN and NCCL that trainbench is tested with; a 13.0 toolkit runs on
# every 13.x driver (no PTX newer than the driver). nvrtc is there for cuDNN's runtime-compiled
# (fused) engines. PyPI has no CUDA 12 compiler (nvidia-cuda-nvcc-cu12 holds only ptxas), so a
# driver older than CUDA 13.0 (R580) gets no set.
TB_CUDA_WHEEL_SETS=(
  "13.0 CUDA-13.0,cuBLAS-13.1,cuDNN-9.19,NCCL-2.28 nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 \
   nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 \
   nvidia-cublas==13.1.0.3 nvidia-cudnn-cu13==9.19.0.56 nvidia-nccl-cu13==2.28.9"
)
# Where an installed toolkit is looked for besides CUDACXX and PATH (as cmake/Optional.cmake does).
TB_CUDA_PREFIXES=(/usr/local/cuda /usr)
# Where the wheels go: a virtual environment, and the toolkit tree CMake is pointed at.
TB_CUDA_WHEELS_DIR=${TB_CUDA_WHEELS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/cuda-wheels}

# The packages (TB_PACKAGES unless named) that dpkg does not list as installed.
tb_missing_packages() {
  [ $# -gt 0 ] || set -- "${TB_PACKAGES[@]}"
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# apt-get install, as root or through sudo; warns and returns 0 where it fails (the caller
# checks what is still missing).
tb_apt_install() {
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  if ! command -v apt-get >/dev/null; then
    echo "trainbench: error: apt-get not found; trainbench's set-up supports Debian 12" >&2
    return 0
  fi
  "${sudo[@]}" apt-get update -qq || echo "trainbench: warning: apt-get update failed" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" ||
    echo "trainbench: warning: apt-get install failed" >&2
}

# Prints one line saying what it is about to install (or that nothing is missing), installs it,
# and stops with the names of the packages still missing if apt-get could not install them.
# Then sets up CUDA (tb_setup_cuda).
tb_install_deps() {
  local missing
  mapfile -t missing < <(tb_missing_packages "${TB_PACKAGES[@]}")
  if [ ${#missing[@]} -eq 0 ]; then
    echo "trainbench: all ${#TB_PACKAGES[@]} required packages are installed"
  else
    echo "trainbench: installing ${missing[*]}"
    tb_apt_install "${missing[@]}"
    mapfile -t missing < <(tb_missing_packages "${TB_PACKAGES[@]}")
    if [ ${#missing[@]} -gt 0 ]; then
      echo "trainbench: error: required packages are still missing: ${missing[*]}" >&2
      echo "trainbench: install them (as root: apt-get install ${missing[*]}) and run this again" >&2
      return 1
    fi
  fi
  tb_setup_cuda
}

# The CUDA version the NVIDIA driver supports ("13.0"), from nvidia-smi or else from libcuda.so.1
# itself; "unknown" where a driver is there but says no version; nothing where there is no driver.
tb_driver_cuda_version() {
  local out version
  if out=$(nvidia-smi 2>/dev/null); then
    version=$(sed -n -E 's/.*CUDA Version *: *([0-9]+\.[0-9]+).*/\1/p' <<<"$out" | head -1)
    echo "${version:-unknown}"
    return 0
  fi
  local ldconfig
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
  "$ldconfig" -p 2>/dev/null | grep -q 'libcuda\.so\.1' || return 0
  local python=python3
  [ -x /usr/bin/python3 ] && python=/usr/bin/python3
  version=$("$python" -c 'import ctypes; v = ctypes.c_int(); lib = ctypes.CDLL("libcuda.so.1")
assert lib.cuDriverGetVersion(ctypes.byref(v)) == 0; print(f"{v.value // 1000}.{v.value % 1000 // 10}")' \
            2>/dev/null) || version=""
  echo "${version:-unknown}"
}

# The root of an installed toolkit that can build the backend: nvcc (CUDACXX, a prefix's bin/ or
# PATH, in the order CMake tries them) with cuDNN's and NCCL's headers and libraries beside it
# or under one of TB_CUDA_PREFIXES. Prints nothing and fails where one is missing.
tb_cuda_toolkit_root() {
  local nvcc="" p
  if [ -n "${CUDACXX:-}" ]; then
    nvcc=$CUDACXX
  else
    for p in "${TB_CUDA_PREFIXES[@]}"; do
      if [ -x "$p/bin/nvcc" ]; then nvcc=$p/bin/nvcc; break; fi
    done
    [ -n "$nvcc" ] || nvcc=$(command -v nvcc) || return 1
  fi
  [ -x "$nvcc" ] || return 1
  local root
  root=$(cd "$(dirname "$nvcc")/.." && pwd)
  local dirs=() file found
  for p in "$root" "${TB_CUDA_PREFIXES[@]}"; do
    dirs+=("$p/include" "$p/include/x86_64-linux-gnu" "$p/targets/x86_64-linux/include"
           "$p/lib64" "$p/lib" "$p/lib/x86_64-linux-gnu" "$p/targets/x86_64-linux/lib")
  done
  for file in cudnn.h nccl.h libcudnn.so libnccl.so; do
    found=0
    for p in "${dirs[@]}"; do
      if [ -e "$p/$file" ]; then found=1; break; fi
    done
    [ $found -eq 1 ] || return 1
  done
  echo "$root"
}

# The wheel set for a driver's CUDA version ("13.2"): the newest whose lowest version it reaches.
tb_cuda_wheel_set() {
  local driver=$1 entry need
  for entry in "${TB_CUDA_WHEEL_SETS[@]}"; do
    read -r need _ <<<"$entry"
    if tb_version_at_least "$driver" "$need"; then echo "$entry"; return 0; fi
  done
  return 1
}

tb_version_at_least() {
  local a_major=${1%%.*} a_minor=${1#*.} b_major=${2%%.*} b_minor=${2#*.}
  [ $((10#$a_major * 1000 + 10#$a_minor)) -ge $((10#$b_major * 1000 + 10#$b_minor)) ]
}

# What CUDA the build gets, as one line: "none" (no driver: as before, the backend is built where
# a toolkit is installed), "system ROOT", "wheels DRIVER SET..." or "cpu DRIVER". TB_CUDA_FROM_PYPI=1
# takes the newest wheel set whatever the driver and the installed toolkit (a machine without a
# driver proves the path with it); TB_CUDA_FROM_PYPI=0 never installs wheels.
tb_cuda_plan() {
  local forced=${TB_CUDA_FROM_PYPI:-}
  if [ "$forced" = 1 ]; then
    echo "wheels forced ${TB_CUDA_WHEEL_SETS[0]}"
    return 0
  fi
  local driver root set
  driver=$(tb_driver_cuda_version)
  if [ -z "$driver" ]; then echo none; return 0; fi
  if root=$(tb_cuda_toolkit_root); then echo "system $root"; return 0; fi
  if [ "$forced" = 0 ] || [ "$driver" = unknown ]; then echo "cpu $driver"; return 0; fi
  if set=$(tb_cuda_wheel_set "$driver"); then echo "wheels $driver $set"; else echo "cpu $driver"; fi
}

# Acts on tb_cuda_plan, saying so in one line: uses an installed toolkit as it is, or installs
# the wheel set into TB_CUDA_WHEELS_DIR and exports TB_CUDA_ROOT (what cmake/Optional.cmake
# builds with) and PATH (so that test.sh finds nvcc and requires the backend), or says why the
# build goes without the CUDA backend.
tb_setup_cuda() {
  local plan kind driver
  plan=$(tb_cuda_plan)
  read -r kind driver _ <<<"$plan"
  case $kind in
    none) return 0 ;;
    system)
      echo "trainbench: building the CUDA backend with the toolkit in $driver"
      return 0 ;;
    cpu)
      if [ "${TB_CUDA_FROM_PYPI:-}" = 0 ]; then
        echo "trainbench: an NVIDIA driver is present but no CUDA toolkit with cuDNN and NCCL, and" \
             "TB_CUDA_FROM_PYPI=0: building without the CUDA backend"
      elif [ "$driver" = unknown ]; then
        echo "trainbench: an NVIDIA driver is present but its CUDA version could not be read:" \
             "building without the CUDA backend; install the CUDA toolkit with cuDNN and NCCL to build it"
      else
        echo "trainbench: the NVIDIA driver supports CUDA $driver, older than the CUDA" \
             "${TB_CUDA_WHEEL_SETS[-1]%% *} that PyPI's NVIDIA toolkit wheels need (driver 580 or later):" \
             "building without the CUDA backend; install a newer driver, or the CUDA toolkit with cuDNN and NCCL"
      fi
      return 0 ;;
  esac
  local -a entry
  read -r -a entry <<<"${plan#wheels }"
  # entry: driver (or "forced"), the set's lowest driver version, its label, its wheels.
  tb_install_cuda_wheels "$driver" "${entry[2]}" "${entry[@]:3}"
}

# Installs the wheels (arguments 3...) into TB_CUDA_WHEELS_DIR/venv and makes the toolkit tree
# TB_CUDA_WHEELS_DIR/toolkit from them, unless the same set is there; exports TB_CUDA_ROOT and
# PATH. The binaries find the libraries in toolkit/lib through the RPATH CMake gives them.
tb_install_cuda_wheels() {
  local driver=$1 label=${2//,/, } dir=$TB_CUDA_WHEELS_DIR
  shift 2
  local wheels=("$@")
  local why="the driver supports CUDA $driver and no CUDA toolkit with cuDNN and NCCL is installed"
  [ "$driver" = forced ] && why="TB_CUDA_FROM_PYPI=1"
  if [ -x "$dir/toolkit/bin/nvcc" ] && [ "$(cat "$dir/wheels.txt" 2>/dev/null)" = "${wheels[*]}" ]; then
    echo "trainbench: building the CUDA backend with ${label//-/ } from PyPI's NVIDIA wheels in $dir ($why)"
  else
    echo "trainbench: installing ${label//-/ } from PyPI's NVIDIA wheels into $dir (1.8 GB; $why)"
    if ! tb_pip_install_cuda "$dir" "${wheels[@]}"; then
      if [ "$driver" = forced ]; then
        echo "trainbench: error: the CUDA wheels could not be installed into $dir (see above)" >&2
        return 1
      fi
      echo "trainbench: warning: the CUDA wheels could not be installed into $dir (see above):" \
           "building without the CUDA backend" >&2
      return 0
    fi
  fi
  export TB_CUDA_ROOT=$dir/toolkit
  export PATH=$TB_CUDA_ROOT/bin:$PATH
}

tb_pip_install_cuda() {
  local dir=$1
  shift
  local python=python3
  [ -x /usr/bin/python3 ] && python=/usr/bin/python3
  # Debian's Python makes virtual environments only with python3-venv.
  if [ "$python" = /usr/bin/python3 ] && [ -n "$(tb_missing_packages python3-venv)" ]; then
    tb_apt_install python3-venv
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  "$python" -m venv "$dir/venv" || return 1
  "$dir/venv/bin/python" -m pip install -q --no-cache-dir --no-deps --disable-pip-version-check "$@" || return 1
  local site
  site=$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  tb_cuda_toolkit_tree "$site" "$dir/toolkit" || return 1
  echo "$*" >"$dir/wheels.txt"
}

# Merges the nvidia/*/ trees of the wheels in SITE (site-packages) into TOOLKIT, laid out like
# /usr/local/cuda: nvcc finds its nvvm/ and headers beside it, every library sits in one lib/
# (the wheels' libraries find each other through $ORIGIN), and lib/ has the unversioned names
# the linker needs (libcudnn.so).
tb_cuda_toolkit_tree() {
  local site=$1 toolkit=$2 tree
  rm -rf "$toolkit"
  mkdir -p "$toolkit"
  # Hard links cost no disk; a copy where the file system has none.
  for tree in "$site"/nvidia/*/; do
    cp -al "$tree." "$toolkit/" 2>/dev/null || { rm -rf "$toolkit"; break; }
  done
  if [ ! -d "$toolkit" ]; then
    mkdir "$toolkit"
    for tree in "$site"/nvidia/*/; do cp -a "$tree." "$toolkit/" || return 1; done
  fi
  rm -rf "$toolkit/.metadata"
  find "$toolkit" \( -name '__init__.py' -o -name '__pycache__' \) -prune -exec rm -rf {} +
  # nvcc looks for headers and libraries in targets/x86_64-linux/.
  mkdir -p "$toolkit/targets/x86_64-linux"
  ln -s ../../include "$toolkit/targets/x86_64-linux/include"
  ln -s ../../lib "$toolkit/targets/x86_64-linux/lib"
  ln -s lib "$toolkit/lib64"
  local lib
  for lib in "$toolkit"/lib/lib*.so.*; do
    [ -e "${lib%%.so.*}.so" ] || ln -s "$(basename "$lib")" "${lib%%.so.*}.so"
  done
}

# Installs reframe-hpc==TB_REFRAME_VERSION into a virtual environment at TB_REFRAME_DIR (Debian's
# Python with python3-venv), unless that version is there; says which in one line. Returns 1,
# saying why, where pip cannot install it (no registry, say).
tb_install_reframe() {
  local dir=$TB_REFRAME_DIR
  if [ "$("$dir/bin/reframe" --version 2>/dev/null)" = "$TB_REFRAME_VERSION" ]; then
    echo "trainbench: ReFrame $TB_REFRAME_VERSION is installed in $dir"
    return 0
  fi
  echo "trainbench: installing ReFrame $TB_REFRAME_VERSION (reframe-hpc from PyPI) into $dir"
  if [ -n "$(tb_missing_packages python3-venv)" ]; then tb_apt_install python3-venv; fi
  rm -rf "$dir"
  if ! /usr/bin/python3 -m venv "$dir" ||
     ! "$dir/bin/python" -m pip install -q --disable-pip-version-check "reframe-hpc==$TB_REFRAME_VERSION"; then
    echo "trainbench: error: ReFrame could not be installed into $dir (see above); the reframe test needs it:" \
         "run this again where PyPI can be reached" >&2
    return 1
  fi
}

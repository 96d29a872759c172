#!/usr/bin/env bash
# Installs what is missing (and ReFrame, pinned, into build/reframe), builds the debug preset
# (AddressSanitizer + UBSan) and runs every test with ctest.
# Usage: scripts/test.sh [extra ctest arguments, e.g. -R Models]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
TB_PACKAGES+=("${TB_TEST_PACKAGES[@]}")
tb_install_deps
tb_install_reframe  # for the reframe test

jobs=$(nproc)
# Where the CUDA toolkit is installed, the CUDA backend must build (every .cu and cuDNN call is
# compiled on every run, GPU or not); elsewhere it is left out and the GPU rows say why.
require_cuda=OFF
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null; then require_cuda=ON; fi
# MPI (Open MPI, installed by deps.sh) must build too, so that the mpirun tests run.
cmake --preset debug -DTB_REQUIRE_CUDA="$require_cuda" -DTB_REQUIRE_MPI=ON
cmake --build --preset debug -j "$jobs"
# AddressSanitizer: CUDA's driver needs the shadow gap unprotected, and it and cuDNN keep
# allocations for the process's life, which LeakSanitizer would report; leaks are checked
# where no driver is loaded (the CUDA code paths then stop at cudaGetDeviceCount).
leaks=1
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then leaks=0; fi
export ASAN_OPTIONS="detect_leaks=$leaks:protect_shadow_gap=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# Tests run as many at a time as there are cores (they assert no timings; the cluster tests lock
# one another out): one at a time, the whole run took 16.5 minutes of a 2-core machine.
ctest --preset debug -j "$jobs" "$@"

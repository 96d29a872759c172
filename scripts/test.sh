#!/usr/bin/env bash
# Installs what is missing, builds the debug preset (AddressSanitizer + UBSan) and runs every
# test with ctest. Usage: scripts/test.sh [extra ctest arguments, e.g. -R Models]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
tb_install_deps

jobs=$(nproc)
cmake --preset debug
cmake --build --preset debug -j "$jobs"
# Tests run one at a time: several use all cores for oneDNN, and timing-free but heavy.
ctest --preset debug "$@"

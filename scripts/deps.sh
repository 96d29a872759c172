#!/usr/bin/env bash
# Installs trainbench's required packages on Debian 12 where they are missing; sourced by
# bench.sh and test.sh. Safe to run again: it installs nothing that is already there.
# scripts/check_fresh.sh proves the list complete on a minimal Debian 12 root.
set -euo pipefail

TB_PACKAGES=(
  build-essential cmake git pkg-config
  libbenchmark-dev libfmt-dev libdnnl-dev libgtest-dev googletest zlib1g-dev
  # Debian's libdnnl-dev is built with oneDNN's OpenCL GPU runtime: its CMake package asks for
  # the OpenCL headers and the ICD loader, but the package does not depend on them.
  ocl-icd-opencl-dev opencl-c-headers
  libopenmpi-dev openmpi-bin
  python3 python3-pytest python3-matplotlib python3-numpy
  clang-format-14
  dataset-fashion-mnist
)

tb_missing_packages() {
  local p
  for p in "${TB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# Prints one line saying what it is about to install (or that nothing is missing), installs it,
# and stops with the names of the packages still missing if apt-get could not install them.
tb_install_deps() {
  local missing
  mapfile -t missing < <(tb_missing_packages)
  if [ ${#missing[@]} -eq 0 ]; then
    echo "trainbench: all ${#TB_PACKAGES[@]} required packages are installed"
    return 0
  fi
  echo "trainbench: installing ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  if ! command -v apt-get >/dev/null; then
    echo "trainbench: error: apt-get not found; trainbench's set-up supports Debian 12" >&2
  else
    "${sudo[@]}" apt-get update -qq || echo "trainbench: warning: apt-get update failed" >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
      echo "trainbench: warning: apt-get install failed" >&2
  fi
  mapfile -t missing < <(tb_missing_packages)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "trainbench: error: required packages are still missing: ${missing[*]}" >&2
    echo "trainbench: install them (as root: apt-get install ${missing[*]}) and run this again" >&2
    return 1
  fi
}

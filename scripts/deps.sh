#!/usr/bin/env bash
# Installs trainbench's required packages on Debian/Ubuntu where they are missing; sourced by
# bench.sh and test.sh. Safe to run again: it installs nothing that is already there.
set -euo pipefail

TB_PACKAGES=(
  build-essential cmake git pkg-config
  libbenchmark-dev libfmt-dev libdnnl-dev libgtest-dev googletest zlib1g-dev
  libopenmpi-dev openmpi-bin
  python3 python3-pytest python3-matplotlib python3-numpy
  dataset-fashion-mnist
)

tb_install_deps() {
  local missing=()
  for p in "${TB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "trainbench: installing ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

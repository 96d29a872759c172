#!/usr/bin/env bash
# Formats trainbench's C++ and CUDA sources with .clang-format (clang-format 14, which deps.sh
# installs), or with --check lists the files that are not formatted and exits 1 (ctest `format`).
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${TB_CLANG_FORMAT:-clang-format-14}
if ! command -v "$tool" >/dev/null; then
  echo "format.sh: error: $tool not found (scripts/deps.sh installs it: apt-get install clang-format-14)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' |
                     while read -r f; do [ -f "$f" ] && echo "$f"; done)
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$tool" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format.sh: ${#bad[@]} of ${#files[@]} files are not formatted with .clang-format: ${bad[*]}" >&2
    echo "format.sh: run scripts/format.sh to format them" >&2
    exit 1
  fi
  echo "format.sh: all ${#files[@]} files are formatted"
else
  "$tool" --style=file -i "${files[@]}"
fi

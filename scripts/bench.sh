#!/usr/bin/env bash
# Installs what is missing, builds the release preset and runs the default benchmark set,
# appending to a CSV under results/<machine>/, and draws its charts beside it (<csv>-charts/).
# Extra arguments go to trainbench, e.g.
#   scripts/bench.sh --benchmark_filter='train/mlp/' --benchmark_repetitions=3
# Environment: TB_FILTER (default 'train/.*/cpu/'), TB_CSV (default results/<host>/<date>.csv).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
tb_install_deps

cmake --preset release
cmake --build --preset release -j "$(nproc)"

machine=${TB_MACHINE:-$(hostname -s)}
csv=${TB_CSV:-results/$machine/$(date -u +%Y%m%dT%H%M%SZ).csv}
mkdir -p "$(dirname "$csv")"
status=0
build/release/bench/trainbench --benchmark_filter="${TB_FILTER:-train/.*/cpu/}" --csv="$csv" "$@" || status=$?
echo "trainbench: results in $csv"
# The charts of this run; the distribution's Python is the one with matplotlib.
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
"$python" scripts/plot.py "$csv" --out "${csv%.csv}-charts" || status=$?
exit $status

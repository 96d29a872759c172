#!/usr/bin/env bash
# Installs what is missing, builds the release preset and runs the default benchmark set: every
# model on cpu, gpu:1 and gpu:all (every GPU, when two or more), fp32 on the CPU and fp32 plus the
# card's fastest precision on the GPU, in one invocation. Rows are appended to a CSV under
# results/<machine>/; the summary table ends the run, and the charts and report.md/report.html
# are drawn beside the CSV (<csv>-charts/). The headline draws this machine's rows beside the
# reference runs kept under results/ (results/*/reference.json: today an H100 and its 16-core
# host), and the run ends with this machine's cpu rows against them, a table also appended to
# the summary. About 1-3 minutes on a 2-core CPU-only machine (GPU configurations print one skip
# line each).
# Extra arguments go to trainbench, e.g.
#   scripts/bench.sh --benchmark_filter='train/mlp/' --benchmark_repetitions=3
#   scripts/bench.sh --devices=cpu,cpu:1 --precisions=fp32
# Environment: TB_FILTER (default 'train/'), TB_CSV (default results/<host>/<date>.csv),
# TB_MACHINE (the results folder's name), TB_BIN (a prebuilt trainbench: no set-up, no build,
# for GPU machines that reach no package registry), TB_REFERENCE (the reference runs: 'all', the
# default, is every results/*/reference.json; 'none' turns them off; or folders holding a
# reference.json, separated by commas).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${TB_BIN:-}" ]; then
  [ -x "$TB_BIN" ] || { echo "bench.sh: TB_BIN=$TB_BIN is not an executable trainbench" >&2; exit 2; }
  bin=$TB_BIN
else
  source scripts/deps.sh
  tb_install_deps
  cmake --preset release
  cmake --build --preset release -j "$(nproc)"
  bin=build/release/bench/trainbench
fi

machine=${TB_MACHINE:-$(hostname -s)}
csv=${TB_CSV:-results/$machine/$(date -u +%Y%m%dT%H%M%SZ).csv}
summary=""
# The default set, unless the arguments name their own filter, devices, precisions, CSV or
# summary (trainbench refuses a flag given twice).
defaults=()
for arg in "$@"; do
  case $arg in
    --csv=*) csv=${arg#--csv=} ;;
    --summary=*) summary=${arg#--summary=} ;;
  esac
done
case " $* " in *" --benchmark_filter="*) ;; *) defaults+=(--benchmark_filter="${TB_FILTER:-train/}") ;; esac
case " $* " in *" --devices="*) ;; *) defaults+=(--devices=cpu,gpu:1,gpu:all) ;; esac
case " $* " in *" --precisions="*) ;; *) defaults+=(--precisions=fp32,fastest) ;; esac
case " $* " in *" --csv="*) ;; *) defaults+=(--csv="$csv") ;; esac
[ -n "$summary" ] || { summary=${csv%.csv}-summary.md; defaults+=(--summary="$summary"); }
mkdir -p "$(dirname "$csv")"
status=0
"$bin" "${defaults[@]}" "$@" || status=$?
# A usage error (exit 2) measured nothing: no results to name, no charts to draw.
if [ "$status" -eq 2 ] || [ ! -s "$csv" ]; then
  echo "bench.sh: trainbench measured nothing (exit status $status): no results, no charts" >&2
  exit "$status"
fi
echo "trainbench: results in $csv, summary in $summary"
# The charts and the report of this run, drawn by a Python that has matplotlib (Debian's here;
# on a GPU image often the one on PATH).
python=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import matplotlib' 2>/dev/null; then python=$candidate; break; fi
done
reference=${TB_REFERENCE:-all}
if [ -n "$python" ]; then
  "$python" scripts/plot.py "$csv" --out "${csv%.csv}-charts" --reference "$reference" || status=$?
else
  echo "bench.sh: no Python with matplotlib: no charts (install python3-matplotlib, or run scripts/plot.py elsewhere)" >&2
fi
# Last, this machine against the reference runs: printed, and appended to the summary. Any
# Python 3 will do (no matplotlib needed).
for candidate in "$python" /usr/bin/python3 python3; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null; then
    echo
    "$candidate" scripts/reference_table.py "$csv" --reference "$reference" \
      --append "$summary" || status=$?
    break
  fi
done
exit $status

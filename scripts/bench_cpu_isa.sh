#!/usr/bin/env bash
# trainbench's own CPU kernels in each instruction set this machine runs (TB_MAX_CPU_ISA), and a
# generic build beside the native one, on the default set's cpu rows: every binary and ISA takes
# its turn in each round (interleaved, so that the machine's drift falls on all alike), all rows
# in one CSV, then a table of each one's median samples/s over the native build at the machine's
# best ISA (docs/cpu-kernels.md shows a run). Ratios within one run only.
#
#   scripts/bench_cpu_isa.sh [--onednn] [--generic BIN] [--rounds N] [--out CSV] [-- trainbench flags...]
#
# --onednn: cap oneDNN alike at each ISA (ONEDNN_MAX_CPU_ISA=AVX2 at avx2, SSE41 at sse2), so that
# each column is what a machine of that ISA runs: oneDNN's kernels and the layouts they choose
# change too. Without it only trainbench's own kernels change.
# --generic: a trainbench built with -DTB_NATIVE=OFF (e.g. cmake -S . -B build/generic
# -DCMAKE_BUILD_TYPE=Release -DTB_NATIVE=OFF -DTB_TESTS=OFF && cmake --build build/generic
# --target trainbench); its rows run at the machine's best ISA. --rounds: 3 by default. --out:
# results/<host>/cpu-isa-<UTC time>.csv. TB_BIN: the native binary (build/release/bench/trainbench).
# Flags after -- go to every run (default: --benchmark_filter=train/ --devices=cpu
# --precisions=fp32 --benchmark_min_time=2). Each run's output goes to <CSV>-log.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
native=${TB_BIN:-build/release/bench/trainbench}
generic="" rounds=3 out="" onednn=0
while [ $# -gt 0 ]; do
  case $1 in
    --onednn) onednn=1; shift ;;
    --generic) generic=${2:?--generic needs a trainbench}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_cpu_isa.sh: error: unknown argument '$1' (--onednn, --generic BIN, --rounds N, --out CSV, -- flags)" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_cpu_isa.sh: error: --rounds: '$rounds' is not a whole number >= 1" >&2; exit 2; }
for bin in "$native" ${generic:+"$generic"}; do
  [ -x "$bin" ] || { echo "bench_cpu_isa.sh: error: no trainbench at $bin (build it, or name it with TB_BIN / --generic)" >&2; exit 2; }
done
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--benchmark_filter=train/ --devices=cpu --precisions=fp32 --benchmark_min_time=2)
out=${out:-results/$(hostname -s)/cpu-isa-$(date -u +%Y%m%dT%H%M%SZ).csv}
mkdir -p "$(dirname "$out")"
log=${out%.csv}-log.txt

# The ISAs this machine runs, as the native binary lists them.
read -r -a isas <<<"$("$native" --list_configs --json | /usr/bin/python3 -c \
  'import json, sys; print(" ".join(json.load(sys.stdin).get("cpu_isas", [])))')"
[ ${#isas[@]} -gt 0 ] || { echo "bench_cpu_isa.sh: error: $native --list_configs --json names no cpu_isas" >&2; exit 2; }
best=${isas[-1]}
echo "bench_cpu_isa.sh: ISAs ${isas[*]} (best $best)$([ $onednn = 1 ] && echo ", oneDNN capped alike"), ${generic:+a generic build ($generic), }$rounds round(s); rows in $out, output in $log"
for ((r = 1; r <= rounds; ++r)); do
  for isa in "${isas[@]}"; do
    echo "round $r/$rounds: native, $isa"
    caps=("TB_MAX_CPU_ISA=$isa")
    if [ $onednn = 1 ]; then
      case $isa in
        avx2) caps+=(ONEDNN_MAX_CPU_ISA=AVX2) ;;
        sse2) caps+=(ONEDNN_MAX_CPU_ISA=SSE41) ;;
      esac
    fi
    env "${caps[@]}" "$native" "${flags[@]}" --csv="$out" >>"$log" 2>&1
  done
  if [ -n "$generic" ]; then
    echo "round $r/$rounds: generic, $best"
    "$generic" "${flags[@]}" --csv="$out" >>"$log" 2>&1
  fi
done
/usr/bin/python3 scripts/cpu_isa_table.py "$out"

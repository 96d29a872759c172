#!/usr/bin/env bash
# Checks trainbench's N-device predictions against every multi-rank run this machine can make,
# at one commit, and rewrites the table of docs/prediction.md with what it found:
#   mpi:2 on this machine (mpirun -np 2, shared memory),
#   mpi:2 across two emulated nodes joined by a link shaped to 1 Gbit/s, then 10 Gbit/s
#   (scripts/emulate_nodes.sh: network namespaces, tc's token bucket; needs root),
#   gpu:2 across two emulated nodes sharing this machine's GPU (scripts/emulate_nodes.sh --gpu 2;
#   only where a GPU can run: elsewhere the table says it was not run).
# Each runs the cpu:1 (gpu:1) row, the prediction made from it over the link measured at start-up,
# and the measured mpi:2 (gpu:2) row, for the MLP, LeNet-5, the LSTM and ResNet-152 32x32 (batch
# 32 per rank). Then the checks at N = 4 and 8 (docs/prediction.md, "Replay"): the cpu:1 rows
# replayed (trainbench --replay_from) on N = 2, 4 and 8 ranks across emulated nodes at 1 and 10
# Gbit/s, one rank per node (flat) and two (shared memory within a node, the shaped link between),
# each against the two-level prediction made in the same run from the links measured at N = 2:
# within a node the shared memory of two ranks on one machine, between nodes the shaped link of
# two nodes of one rank. Each replay at N = 4 and 8 is run again for a step, predicted over the link
# its ranks measure among themselves: where that prediction's communication leaves the band of
# the checked one's communication term, this machine did not deliver the links at that N, and the
# table counts the line as no check of the model. With --replays-only the mpi:2 settings are left
# out. CSVs and logs go to results/<machine>/predictions-<UTC time>/.
#   scripts/check_predictions.sh [--no-docs] [--replays-only]     (about 40 minutes on 2 cores)
# Installed (<prefix>/libexec/trainbench/check_predictions.sh), it runs the prefix's trainbench,
# writes results/ under the working folder and prints the table (docs/ is the checkout's).
# Environment: TB_BIN (default build/release/bench/trainbench, installed <prefix>/bin/trainbench),
# TB_MACHINE, TB_ITERATIONS (20). Exit status: 0 when every measured row is within its target, 1
# when one is off it (predictions_table.py --check) or mpi:2 on this machine did not run, 2 without a
# trainbench.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
write_docs=1 replays_only=0 busy=""
for arg in "$@"; do
  case $arg in
    --no-docs) write_docs=0 ;;
    --replays-only) replays_only=1 ;;
    *) echo "check_predictions.sh: unknown option '$arg' (--no-docs, --replays-only)" >&2; exit 2 ;;
  esac
done
if [ -f "$here/tbinstalled.py" ]; then
  # tbinstalled.py (written by cmake --install) holds the paths from here to the prefix's bin/.
  field() { sed -n "s/^$1 = \"\(.*\)\"\$/\1/p" "$here/tbinstalled.py"; }
  default_bin=$(realpath -m "$here/$(field TO_PREFIX)/$(field BINDIR)/trainbench")
  fix="reinstall trainbench there (cmake --install, or the Debian package), or name one with TB_BIN"
  scripts=$here
  write_docs=0 installed=1
  commit=$(field COMMIT)
else
  installed=0
  cd "$here/.."
  default_bin=build/release/bench/trainbench
  fix="cmake --build --preset release, or TB_BIN"
  scripts=scripts
  commit=$(git rev-parse --short=12 HEAD)
fi
bin=${TB_BIN:-$default_bin}
[ -x "$bin" ] || { echo "check_predictions.sh: no trainbench at $bin ($fix)" >&2; exit 2; }
bin=$(realpath "$bin")
out=results/${TB_MACHINE:-$(hostname -s)}/predictions-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
iterations=${TB_ITERATIONS:-20}
python=/usr/bin/python3
mpi=(mpirun -np 2 --allow-run-as-root --oversubscribe)
# The workloads of every setting, in three runs: the MLP and LeNet-5, the LSTM, ResNet-152 32x32.
# Timed steps per run: TB_ITERATIONS, ten times that for the LSTM (20 of its 0.2-ms steps are 4 ms
# of timing, where one late wake-up moves the figure by more than its band), a quarter of it for
# ResNet-152's replays (its all-reduce at 1 Gbit/s takes seconds).
models=("train/(mlp/mnist|lenet5/cifar10)/" "train/lstm/sine/" "train/resnet152/cifar10/")
batch_flag=("" "" "--batch=32")  # ResNet-152 at 32 a rank
steps=("$iterations" "$((iterations * 10))" "$iterations")
replay_steps=("$iterations" "$((iterations * 10))" "$((iterations / 4 > 3 ? iterations / 4 : 3))")

# The runs of one setting: its command prefix, its CSV, the devices.
run_setting() {
  local csv=$1 devices=$2
  shift 2
  for k in 0 1 2; do
    # shellcheck disable=SC2086
    "$@" "$bin" --benchmark_filter="${models[$k]}" --devices="$devices" --link=measured \
      --iterations="${steps[$k]}" --csv="$csv" ${batch_flag[$k]} >>"${csv%.csv}-log.txt" 2>&1 || return 1
  done
}

# The replays of one setting: the sources' rows on the ranks of the command prefix, predicted over
# the given links (--link=... [--nodes=M --network=...]), ResNet-152 with fewer steps (its
# all-reduce at 1 Gbit/s takes seconds).
# A replay's compute is slept through, so this machine stands for N machines only while its cores
# keep up with the ranks' communication: `busy` is how busy they were over the replay (from
# /proc/stat; the setting's name carries it).
run_replay() {
  local csv=$1 links=$2
  shift 2
  local before
  before=$(cpu_ticks)
  for k in 0 1 2; do
    # shellcheck disable=SC2086
    "$@" "$bin" --replay_from="$out/sources.csv" --benchmark_filter="${models[$k]}" $links \
      --iterations="${replay_steps[$k]}" --csv="$csv" >>"${csv%.csv}-log.txt" 2>&1 || return 1
  done
  busy=$(cpu_busy "$before" "$(cpu_ticks)")
}

# What this machine delivers of the links at N: the replays of one setting again on the same ranks,
# one step each, predicted over the link those ranks measure among themselves at start-up. Where
# that prediction's communication leaves the band of the checked one's communication term (made
# from the links measured at N = 2), the machine, not the model, sets the replay's pace
# (predictions_table.py counts the line apart): on 2 cores the per-step latency of 8 ranks was 6
# times that of 2, each rank waiting for a core.
run_probe() {
  local csv=$1
  shift
  local replay_steps=(1 1 1)  # run_replay's steps, here (bash scopes a local for the functions it calls)
  run_replay "$csv" --link=measured "$@"
}

# The machine's CPU ticks so far, busy and all ("busy total"), from /proc/stat's first line.
cpu_ticks() {
  awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9; exit}' /proc/stat 2>/dev/null
}

# ", cores N% busy" between two cpu_ticks readings; nothing where /proc/stat was not read.
cpu_busy() {
  # shellcheck disable=SC2086
  set -- $1 $2
  [ $# -eq 4 ] && [ "$4" -gt "$2" ] || return 0
  echo ", cores $(((100 * ($3 - $1) + ($4 - $2) / 2) / ($4 - $2)))% busy"
}

# The measured link of a replay's CSV (its predictions over link=measured), as --link and
# --network take it, band included: BUSBW:LOW-HIGH,LATENCY_US:LOW-HIGH (the message's "as figures").
measured_link() {
  "$python" - "$1" <<'PYEOF'
import csv, re, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["link"] == "measured" and r["measurement"] == "predicted"]
figures = [m.group(1) for r in rows for m in [re.search(r"as figures: ([0-9.eE+:,-]+)", r["message"])] if m]
if not figures:
    sys.exit("check_predictions.sh: no prediction over the measured link, with its figures, in " + sys.argv[1])
print(figures[0])
PYEOF
}

# "=PROBE_CSV" for a setting's entry: run_probe on the command prefix given, into the CSV named
# after the setting's ($csv); nothing, with a warning, where the probe did not run.
probe() {
  local at_n=${csv%.csv}-link-at-n.csv
  echo "check_predictions.sh: the same ranks' own link, the replays predicted over it" >&2
  if run_probe "$at_n" "$@"; then
    echo "=$at_n"
  else
    echo "check_predictions.sh: the link at N did not run: see ${at_n%.csv}-log.txt" >&2
  fi
}

settings=()
if [ $replays_only -eq 0 ]; then
echo "check_predictions.sh: mpi:2 on this machine"
# mpirun on this machine needs neither root nor iproute2: where it did not run, the check fails.
if run_setting "$out/one-machine.csv" cpu:1,mpi:2 "${mpi[@]}"; then
  settings+=("mpi:2, one machine=$out/one-machine.csv")
else
  echo "check_predictions.sh: mpi:2 on this machine did not run: see $out/one-machine-log.txt" >&2
  missing=1
fi
for rate in 1gbit 10gbit; do
  echo "check_predictions.sh: mpi:2 across emulated nodes at $rate"
  if run_setting "$out/emulated-$rate.csv" cpu:1,mpi:2 "$scripts/emulate_nodes.sh" --nodes 2 --rate "$rate" --; then
    settings+=("mpi:2, emulated nodes, $rate=$out/emulated-$rate.csv")
  else
    echo "check_predictions.sh: emulated nodes at $rate did not run (root, iproute2?): see $out/emulated-$rate-log.txt" >&2
  fi
done
fi

# The replays: the sources first (one-device rows, no mpirun), then N = 2 for the links, then
# N = 4 and 8 against the two-level model.
echo "check_predictions.sh: the one-device rows the replays step"
for k in 0 1 2; do
  # shellcheck disable=SC2086
  "$bin" --benchmark_filter="${models[$k]}" --devices=cpu:1 --iterations="${steps[$k]}" --timeline=on \
    --csv="$out/sources.csv" ${batch_flag[$k]} >>"$out/sources-log.txt" 2>&1 ||
    { echo "check_predictions.sh: the sources did not run: see $out/sources-log.txt" >&2; exit 1; }
done
echo "check_predictions.sh: replayed on 2 ranks of this machine (the link within a node)"
if run_replay "$out/replay-shm-2.csv" --link=measured "${mpi[@]}"; then
  settings+=("replayed mpi:2, one machine$busy=$out/replay-shm-2.csv")
  intra=$(measured_link "$out/replay-shm-2.csv")
  for rate in 1gbit 10gbit; do
    echo "check_predictions.sh: replayed on 2 emulated nodes at $rate (the link between nodes)"
    run_replay "$out/replay-$rate-2.csv" --link=measured "$scripts/emulate_nodes.sh" --nodes 2 --rate "$rate" -- ||
      { echo "check_predictions.sh: emulated nodes at $rate did not run: see $out/replay-$rate-2-log.txt" >&2; continue; }
    settings+=("replayed mpi:2, 2 nodes, $rate$busy=$out/replay-$rate-2.csv")
    inter=$(measured_link "$out/replay-$rate-2.csv")
    for n in 4 8; do
      for per_node in 1 2; do
        nodes=$((n / per_node))
        csv=$out/replay-$rate-$n-$per_node.csv
        echo "check_predictions.sh: replayed on $n ranks, $nodes emulated nodes of $per_node, at $rate" \
          "(predicted over $intra within a node, $inter between)"
        emulated=("$scripts/emulate_nodes.sh" --nodes "$nodes" --ranks-per-node "$per_node" --rate "$rate" --)
        if run_replay "$csv" "--link=$intra --nodes=$nodes --network=$inter" "${emulated[@]}"; then
          settings+=("replayed mpi:$n, $nodes nodes of $per_node, $rate$busy=$csv$(probe "${emulated[@]}")")
        else
          echo "check_predictions.sh: $n ranks on $nodes emulated nodes did not run: see ${csv%.csv}-log.txt" >&2
        fi
      done
    done
  done
  # How much waiting ranks distort a replay of 8 on 2 cores: the last setting again with Open MPI
  # yielding the core while it waits (mpi_yield_when_idle).
  if [ -n "${inter:-}" ]; then
    csv=$out/replay-10gbit-8-2-yield.csv
    echo "check_predictions.sh: replayed on 8 ranks, 4 emulated nodes of 2, at 10gbit, Open MPI yielding when idle"
    emulated=("$scripts/emulate_nodes.sh" --nodes 4 --ranks-per-node 2 --rate 10gbit --)
    if OMPI_MCA_mpi_yield_when_idle=1 run_replay "$csv" "--link=$intra --nodes=4 --network=$inter" "${emulated[@]}"; then
      settings+=("replayed mpi:8, 4 nodes of 2, 10gbit, yield when idle$busy=$csv$(OMPI_MCA_mpi_yield_when_idle=1 probe "${emulated[@]}")")
    fi
  fi
else
  echo "check_predictions.sh: the replay on 2 ranks did not run: see $out/replay-shm-2-log.txt" >&2
fi

gpu_note="gpu:2 across emulated nodes sharing one GPU: not run (no GPU here)"
if nvidia-smi -L >/dev/null 2>&1 && [ $replays_only -eq 0 ]; then
  echo "check_predictions.sh: gpu:2 across emulated nodes sharing one GPU"
  if run_setting "$out/emulated-gpu.csv" gpu:1,gpu:2 "$scripts/emulate_nodes.sh" --gpu 2 --; then
    settings+=("gpu:2, emulated nodes on one GPU=$out/emulated-gpu.csv")
    gpu_note=""
  fi
fi

table=$("$python" "$scripts/predictions_table.py" "${settings[@]}") || true
{
  echo "$table"
  [ -z "$gpu_note" ] || echo "$gpu_note."
  echo
  where=$out
  [ $installed -eq 1 ] || where="[$out]($(realpath --relative-to=docs "$out"))"
  echo "Made by \`scripts/check_predictions.sh\` at $commit on $(hostname -s)," \
    "$(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'));" \
    "CSVs and logs in $where."
} >"$out/table.md"
cat "$out/table.md"
"$python" "$scripts/predictions_table.py" --check "${settings[@]}" >/dev/null || status=$?
if [ $write_docs -eq 1 ]; then
  "$python" - "$out/table.md" <<'EOF'
import re, sys
doc = "docs/prediction.md"
text = open(doc).read()
table = open(sys.argv[1]).read()
begin, end = "<!-- predictions table: scripts/check_predictions.sh -->", "<!-- end of predictions table -->"
if begin not in text:
    sys.exit(f"check_predictions.sh: {doc} has no '{begin}' marker")
text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{table}{end}", text, flags=re.S)
open(doc, "w").write(text)
print(f"check_predictions.sh: {doc} rewritten")
EOF
fi
[ "${missing:-0}" -eq 0 ] || status=${status:-1}
exit "${status:-0}"

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
# 32 per rank). CSVs and logs go to results/<machine>/predictions-<UTC time>/.
#   scripts/check_predictions.sh [--no-docs]     (about 15 minutes on 2 cores)
# Installed (<prefix>/libexec/trainbench/check_predictions.sh), it runs the prefix's trainbench,
# writes results/ under the working folder and prints the table (docs/ is the checkout's).
# Environment: TB_BIN (default build/release/bench/trainbench, installed <prefix>/bin/trainbench),
# TB_MACHINE, TB_ITERATIONS (20). Exit status: 0 when every measured row is within its target, 1
# when one is off it (predictions_table.py --check), 2 without a trainbench.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
write_docs=1
[ "${1:-}" = "--no-docs" ] && write_docs=0
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

# The runs of one setting: its command prefix, its CSV, the devices.
run_setting() {
  local csv=$1 devices=$2
  shift 2
  local models=("train/(mlp/mnist|lenet5/cifar10|lstm/sine)/" "train/resnet152/cifar10/")
  local extra=("" "--batch=32")
  for k in 0 1; do
    # shellcheck disable=SC2086
    "$@" "$bin" --benchmark_filter="${models[$k]}" --devices="$devices" --link=measured \
      --iterations="$iterations" --csv="$csv" ${extra[$k]} >>"${csv%.csv}-log.txt" 2>&1 || return 1
  done
}

settings=()
echo "check_predictions.sh: mpi:2 on this machine"
run_setting "$out/one-machine.csv" cpu:1,mpi:2 "${mpi[@]}" && settings+=("mpi:2, one machine=$out/one-machine.csv")
for rate in 1gbit 10gbit; do
  echo "check_predictions.sh: mpi:2 across emulated nodes at $rate"
  if run_setting "$out/emulated-$rate.csv" cpu:1,mpi:2 "$scripts/emulate_nodes.sh" --nodes 2 --rate "$rate" --; then
    settings+=("mpi:2, emulated nodes, $rate=$out/emulated-$rate.csv")
  else
    echo "check_predictions.sh: emulated nodes at $rate did not run (root, iproute2?): see $out/emulated-$rate-log.txt" >&2
  fi
done
gpu_note="gpu:2 across emulated nodes sharing one GPU: not run (no GPU here)"
if nvidia-smi -L >/dev/null 2>&1; then
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
exit "${status:-0}"

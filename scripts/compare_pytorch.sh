#!/usr/bin/env bash
# trainbench against PyTorch on the same benchmarks (issue 7: a fair framework baseline, on the
# CPU; issue 16: on a GPU).
#
#   scripts/compare_pytorch.sh                                   # the CPU rows
#   TB_COMPARE_DEVICE=gpu scripts/compare_pytorch.sh             # one GPU, four precisions
#   TB_COMPARE_DEVICE=gpu TB_TRAINBENCH='/tmp/tb/run.sh trainbench' scripts/compare_pytorch.sh
#
# First PyTorch's settings (issue 20): for each benchmark below, scripts/peers/pytorch_train.py
# tries its grid of settings (CPU: intra-op threads, BLAS threads, OMP_WAIT_POLICY, and for
# images the layout; GPU: the layout of images), a short timed trial each (TB_TRIAL_TIME
# seconds, default 0.5), and writes the fastest with every trial's figure to
# ...-pytorch-settings.json. Then for each benchmark and each of TB_ROUNDS rounds (default 5),
# runs trainbench and then the peer under its chosen setting (or the other way round: the order
# alternates every round, so that neither always runs on a machine the other has just warmed
# or heated), each in a process of its own, on all cores, on synthetic data of the same shape,
# resident on both sides (the peer's pool of batches made before timing; trainbench
# --data_on_device: a step copies a prepared batch into the network's input, without the
# loader's work), TB_REPETITIONS repetitions per round (default 1). Rows go to a fresh pair of CSVs,
# results/<host>/trainbench-vs-pytorch-<UTC time>-{trainbench,pytorch}.csv (one file per
# framework, as scripts/compare.py compares two files), the runs' output to ...-log.txt beside
# them.
#
# One clock on both sides: the comparison is of wall_step_time_s, the wall time of the timed
# steps per step, host gaps between steps included, which both write with the same meaning
# (it equals step_time_s). On a GPU, scripts/compare.py also compares
# device_step_time_s, the device time of a step from CUDA events around each step on both sides
# (schema 5's column; scripts/tbcsv.py moves an older row's device-clock step_time_s there). It prints
# scripts/compare.py's comparison (BASE = PyTorch, NEW = trainbench, one --filters pair per
# variant; with 4 or more values a side, rounds x repetitions, its U test can call a difference
# beyond noise at p < 0.05, with 3 or fewer it cannot), then the table of issue 7: samples/s of
# each side on the wall clock (median over the rounds), the ratio trainbench/PyTorch, its
# target, whether it is met, compare.py's noise verdict, trainbench's utilisation and the
# setting PyTorch ran with.
#
# PyTorch and an optimised BLAS are optional for trainbench, so scripts/deps.sh leaves them
# out; this script installs Debian's python3-torch when `import torch` fails and the OpenMP
# build of OpenBLAS when it is missing (torch's Linear and LSTM layers call the BLAS, and
# Debian's fallback reference BLAS would make PyTorch about 40x slower at them).
#
# On a GPU (TB_COMPARE_DEVICE=gpu) both sides train on gpu:1 with the data resident on the
# device (trainbench --data_on_device; the peer's pool on the GPU), in fp32, tf32, fp16 and bf16,
# the convolutional models in the layout PyTorch's search found faster; the target is 1x (at
# least PyTorch's samples/s). Nothing is installed there: the interpreter must already import
# torch with CUDA.
#
# Environment: TB_COMPARE_DEVICE (cpu or gpu), TB_TRAINBENCH (the trainbench command, split on
# spaces; default build/release/bench/trainbench; the peer asks it for the workloads and the CSV
# header, so both sides train what one binary defines), TB_PYTHON (default /usr/bin/python3 on
# the CPU, python3 on a GPU machine), TB_ROUNDS (5), TB_MIN_TIME (seconds of timed steps per run, 1),
# TB_TRIAL_TIME (seconds of each settings trial, 0.5), TB_COMPARE_FILTER (a regular expression:
# only the benchmarks it matches), TB_MACHINE (default `hostname -s`), TB_RESULTS_DIR (default
# results/$TB_MACHINE), TB_REPETITIONS (1; on a GPU, where each run's start-up costs more than
# its timing, TB_ROUNDS=1 TB_REPETITIONS=5 gives the same five values a side in a third of the
# time, without the interleaving). On a 2-core machine about 7 minutes of settings search and 8
# of rounds.
# Exit status: 0, or 1 when a run failed (its benchmark then has no ratio).
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- what to run -----------------------------------------------------------------------------
# The environment variables into globals (device, python, trainbench, peer, rounds, repetitions,
# min_time, trial_time), each checked: a bad one exits 2 before anything runs.
read_environment() {
  local pair
  device=${TB_COMPARE_DEVICE:-cpu}
  if [ "$device" != cpu ] && [ "$device" != gpu ]; then
    echo "compare_pytorch.sh: error: TB_COMPARE_DEVICE='$device': use cpu or gpu" >&2
    exit 2
  fi
  # The distribution's interpreter on the CPU (Debian's torch is installed for it); on a GPU
  # machine the one on PATH, whose torch has CUDA.
  python=${TB_PYTHON:-$([ "$device" = gpu ] && echo python3 || echo /usr/bin/python3)}
  read -r -a trainbench <<<"${TB_TRAINBENCH:-build/release/bench/trainbench}"
  peer=scripts/peers/pytorch_train.py
  # 5 rounds: scripts/compare.py's Mann-Whitney U test needs 4 or more repetitions a side before
  # even a complete separation reaches p < 0.05 (its smallest_p: 2/C(8,4) = 0.029 at 4, 0.008 at 5).
  rounds=${TB_ROUNDS:-5}
  repetitions=${TB_REPETITIONS:-1}
  min_time=${TB_MIN_TIME:-1}
  trial_time=${TB_TRIAL_TIME:-0.5}
  for pair in "TB_ROUNDS=$rounds" "TB_REPETITIONS=$repetitions"; do
    if ! [[ ${pair#*=} =~ ^[1-9][0-9]*$ ]]; then
      echo "compare_pytorch.sh: error: ${pair%%=*}='${pair#*=}' is not a whole number >= 1" >&2
      exit 2
    fi
  done
  for pair in "TB_MIN_TIME=$min_time" "TB_TRIAL_TIME=$trial_time"; do
    if ! [[ ${pair#*=} =~ ^[0-9]+([.][0-9]+)?$ ]]; then
      echo "compare_pytorch.sh: error: ${pair%%=*}='${pair#*=}' is not a number of seconds" >&2
      exit 2
    fi
  done
  if ((rounds * repetitions < 4)); then
    echo "compare_pytorch.sh: note: TB_ROUNDS=$rounds x TB_REPETITIONS=$repetitions: with fewer than 4 values" \
         "a side compare.py's U test cannot reach p < 0.05, it says only whether the ranges overlap" >&2
  fi
}

# The global benchmarks: "benchmark optimizer target" (trainbench samples/s over PyTorch's, issue
# 7) for the device, those TB_COMPARE_FILTER matches. SGD with momentum everywhere but LeNet-5:
# with SGD its stacked sigmoids stay on their initial plateau past the 200 warm-up steps in both
# frameworks, so the loss check fails both rows; its own optimizer, Adam, learns, and the update
# of 75k parameters is a small part of its step.
choose_benchmarks() {
  local p entry chosen=()
  if [ "$device" = cpu ]; then
    benchmarks=(
      "train/mlp/mnist/cpu/fp32/bs:100 sgd 1.5"
      "train/lenet5/cifar10/cpu/fp32/bs:100 adam 2"
      "train/lstm/sine/cpu/fp32/bs:20 sgd 10"
      "train/resnet152/cifar10/cpu/fp32/bs:128 sgd 1.5"
      "train/resnet152/imagenet/cpu/fp32/bs:8 sgd 1.2"
    )
  else
    # Issue 16: ResNet-152 at 224 at or above PyTorch channels-last in every precision, and
    # everything ahead of PyTorch staying ahead.
    benchmarks=()
    for p in fp32 tf32 fp16 bf16; do
      benchmarks+=("train/resnet152/imagenet/gpu:1/$p/bs:128 sgd 1"
                   "train/resnet152/cifar10/gpu:1/$p/bs:128 sgd 1"
                   "train/mlp/mnist/gpu:1/$p/bs:100 sgd 1"
                   "train/lenet5/cifar10/gpu:1/$p/bs:100 adam 1"
                   "train/lstm/sine/gpu:1/$p/bs:20 sgd 1")
    done
  fi
  [ -n "${TB_COMPARE_FILTER:-}" ] || return 0
  for entry in "${benchmarks[@]}"; do
    if [[ ${entry%% *} =~ $TB_COMPARE_FILTER ]]; then chosen+=("$entry"); fi
  done
  if [ ${#chosen[@]} -eq 0 ]; then
    echo "compare_pytorch.sh: error: TB_COMPARE_FILTER='$TB_COMPARE_FILTER' matches none of" \
         "${benchmarks[*]%% *}" >&2
    exit 2
  fi
  benchmarks=("${chosen[@]}")
}

# ---- what the comparison needs ---------------------------------------------------------------
# trainbench built, torch importable (installed on the CPU), the OpenMP OpenBLAS on the CPU.
ensure_tools() {
  local extra=()
  # shellcheck source=scripts/deps.sh
  source scripts/deps.sh  # tb_install_deps: dpkg checks, apt-get through sudo unless root
  if [ -z "${TB_TRAINBENCH:-}" ] && [ ! -x "${trainbench[0]}" ]; then
    echo "compare_pytorch.sh: ${trainbench[0]} is missing: building the release preset"
    tb_install_deps
    cmake --preset release
    cmake --build --preset release -j "$(nproc)"
  fi
  if [ "$device" = gpu ]; then
    if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
      echo "compare_pytorch.sh: error: $python cannot import torch with a usable GPU (nothing is installed" \
           "on a GPU machine; set TB_PYTHON to an interpreter whose torch has CUDA)" >&2
      exit 2
    fi
  elif ! "$python" -c 'import torch' 2>/dev/null; then
    echo "compare_pytorch.sh: PyTorch is not importable by $python: installing Debian's python3-torch"
    extra+=(python3-torch)
  fi
  if [ "$device" = cpu ] && ! dpkg-query -W -f='${Status}' libopenblas0-openmp 2>/dev/null | grep -q "install ok installed"; then
    echo "compare_pytorch.sh: installing libopenblas0-openmp, the BLAS PyTorch's Linear and LSTM layers" \
         "will call (it also becomes the system's default libblas.so.3)"
    extra+=(libopenblas0-openmp)
  fi
  if [ ${#extra[@]} -gt 0 ]; then
    # shellcheck disable=SC2034  # read by tb_install_deps
    TB_PACKAGES=("${extra[@]}")
    tb_install_deps
  fi
  if ! "$python" -c 'import torch' >/dev/null; then
    echo "compare_pytorch.sh: error: $python still cannot import torch (see the error above)" >&2
    exit 2
  fi
}

# ---- the runs --------------------------------------------------------------------------------
# The globals the runs share: the files of this comparison, the cores, an empty data folder,
# the trainbench path the peer is given, and whether a run failed.
prepare_runs() {
  local machine out_dir stamp prefix
  machine=${TB_MACHINE:-$(hostname -s)}
  out_dir=${TB_RESULTS_DIR:-results/$machine}
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  prefix=$out_dir/trainbench-vs-pytorch-$stamp
  tb_csv=$prefix-trainbench.csv
  pt_csv=$prefix-pytorch.csv
  settings=$prefix-pytorch-settings.json
  log=$prefix-log.txt
  mkdir -p "$out_dir"
  threads=$(nproc)  # trainbench's `cpu` device: every core this process may use
  # Both sides on synthetic data: an empty data folder keeps trainbench off any real files.
  nodata=$(mktemp -d)
  tools=$(mktemp -d)
  trap 'rm -rf "$nodata" "$tools"' EXIT
  # The peer takes trainbench as one path (--trainbench): a command of several words (a bundle's
  # run.sh and its argument) goes behind a wrapper that runs it.
  peer_trainbench=${trainbench[0]}
  if [ ${#trainbench[@]} -gt 1 ]; then
    peer_trainbench=$tools/trainbench
    printf '#!/usr/bin/env bash\nexec %s"$@"\n' "$(printf '%q ' "${trainbench[@]}")" >"$peer_trainbench"
    chmod +x "$peer_trainbench"
  fi
  failed=0
  report=scripts/peers/pytorch_report.py  # reads the CSVs and the settings file back
}

# Both tools append the variant of their flags to a name (.../optimizer:sgd, .../data_on_device):
# the filters take a benchmark with whatever variant its flags give it.
run_trainbench() {  # benchmark optimizer
  # The data resident as the peer's pool: prepared once, no loader work in the step (on the
  # CPU in host memory, on the GPU in device memory, with the benchmark's precision).
  local status=0 where=(--devices=cpu --data_on_device)
  [ "$device" = gpu ] && where=(--devices=gpu:1 "--precisions=$(cut -d/ -f5 <<<"$1")" --data_on_device)
  # Google Benchmark names a manually timed GPU row .../manual_time: the filter allows it.
  "${trainbench[@]}" --benchmark_filter="^$1(/.*)?\$" "${where[@]}" --optimizer="$2" \
    --benchmark_min_time="$min_time" --benchmark_repetitions="$repetitions" --data_dir="$nodata" \
    --csv="$tb_csv" >>"$log" 2>&1 || status=$?
  [ $status -eq 0 ] || failed=1
  echo "  trainbench  $("$python" "$report" last "$tb_csv" "$1")$([ $status -eq 0 ] || echo " (exit status $status)")"
}

# The peer's flags for a benchmark: the cores (CPU) or its precision (GPU), its optimizer.
peer_flags() {  # benchmark optimizer
  if [ "$device" = gpu ]; then
    echo --device=cuda "--precisions=$(cut -d/ -f5 <<<"$1")" --optimizer="$2"
  else
    echo --threads="$threads" --optimizer="$2"
  fi
}

# The settings search: the peer's trials of its grid, the chosen setting into $settings.
search_pytorch() {  # benchmark optimizer
  local status=0 flags
  read -r -a flags <<<"$(peer_flags "$1" "$2")"
  "$python" "$peer" --trainbench="$peer_trainbench" --filter="^$1(/.*)?\$" "${flags[@]}" \
    --search_only --settings_out="$settings" --trial_time="$trial_time" >>"$log" 2>&1 || status=$?
  [ $status -eq 0 ] || failed=1
  echo "  pytorch     $("$python" "$report" setting "$settings" "$1")$([ $status -eq 0 ] || echo " (exit status $status)")"
}

run_pytorch() {  # benchmark optimizer
  local status=0 peak flags
  read -r -a flags <<<"$(peer_flags "$1" "$2")"
  peak=$("$python" "$report" peak "$tb_csv" "$1")
  "$python" "$peer" --trainbench="$peer_trainbench" --filter="^$1(/.*)?\$" "${flags[@]}" \
    --settings="@$settings" --min_time="$min_time" --repetitions="$repetitions" --csv="$pt_csv" \
    ${peak:+--peak_gflops="$peak"} >>"$log" 2>&1 || status=$?
  [ $status -eq 0 ] || failed=1
  echo "  pytorch     $("$python" "$report" last "$pt_csv" "$1")$([ $status -eq 0 ] || echo " (exit status $status)")"
}

# Every benchmark's setting first, so that each round's peer runs read them from $settings.
search_settings() {
  local entry name optimizer
  echo "compare_pytorch.sh: PyTorch's settings search on the $device, a trial of ${trial_time}s per setting;" \
       "trials in $settings and $log"
  for entry in "${benchmarks[@]}"; do
    read -r name optimizer _ <<<"$entry"
    echo "search: $name ($optimizer)"
    search_pytorch "$name" "$optimizer"
  done
}

# One round: each benchmark on both sides, trainbench first in odd rounds, the peer first in
# even ones.
run_round() {  # round
  local entry name optimizer
  for entry in "${benchmarks[@]}"; do
    read -r name optimizer _ <<<"$entry"
    echo "round $1/$rounds: $name ($optimizer)"
    if (($1 % 2)); then
      run_trainbench "$name" "$optimizer"
      run_pytorch "$name" "$optimizer"
    else
      run_pytorch "$name" "$optimizer"
      run_trainbench "$name" "$optimizer"
    fi
  done
}

run_rounds() {
  local round
  echo "compare_pytorch.sh: $rounds round(s) of $repetitions repetition(s) on the $device ($([ "$device" = gpu ] && echo gpu:1 || echo "$threads thread(s)")), min time ${min_time}s; log in $log"
  for ((round = 1; round <= rounds; round++)); do
    run_round "$round"
  done
}

# ---- the comparison --------------------------------------------------------------------------
# One clock on both sides: the wall time per timed step (lower is better), host gaps included;
# on a GPU also the device time per step. compare.py keeps frameworks apart, so each is one
# side of --filters, once per variant the benchmarks' flags give.
compare_clocks() {
  local metric side_pt side_tb metrics=(wall_step_time_s)
  [ "$device" = cpu ] || metrics+=(device_step_time_s)
  for metric in "${metrics[@]}"; do
    if [ "$metric" = wall_step_time_s ]; then
      echo "== wall clock: wall_step_time_s, the wall time of the timed steps per step on both sides"
    else
      echo "== device clock: device_step_time_s, CUDA events around each step on both sides"
    fi
    while IFS=$'\t' read -r side_pt side_tb; do
      "$python" scripts/compare.py --metric="$metric" "$pt_csv" "$tb_csv" --filters "$side_pt" "$side_tb" || true
    done < <("$python" "$report" filters "$pt_csv" "$tb_csv")
  done
}

# The table of issue 7: each side's samples/s, the ratio against its target, and the verdict.
final_table() {
  local entry name target clock=() targets=()
  [ "$device" = cpu ] || clock=(--device_clock)
  # The CSV has no BLAS column; the peer prints the one torch loaded.
  grep -m1 "^pytorch_train.py: BLAS:" "$log" || true
  echo
  for entry in "${benchmarks[@]}"; do
    read -r name _ target <<<"$entry"
    targets+=("$name=$target")
  done
  "$python" "$report" table "$pt_csv" "$tb_csv" "${clock[@]}" "${targets[@]}" || failed=1
}

compare_sides() {
  echo
  if [ -s "$tb_csv" ] && [ -s "$pt_csv" ]; then
    compare_clocks
    final_table
  else
    echo "compare_pytorch.sh: no comparison: a side wrote no rows (see $log)"
    failed=1
  fi
  echo
  echo "compare_pytorch.sh: rows in $tb_csv and $pt_csv; PyTorch's settings in $settings; the runs' output in $log"
}

main() {
  read_environment
  choose_benchmarks
  ensure_tools
  prepare_runs
  search_settings
  run_rounds
  compare_sides
  exit "$failed"
}

main "$@"

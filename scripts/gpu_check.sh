#!/usr/bin/env bash
# Checks a GPU machine end to end in one command: whether trainbench works there, and what the
# machine does, before anyone trusts a benchmark of it. Steps, most valuable first (6 runs right
# after 3), each under a time bound (none can hang the check), with the time each is planned to
# take on one H100 (from the check's runs on one H100 on 2026-11-27 and one H200 on 2026-11-28;
# steps 1 to 6 fit 8 minutes, step 7 is a second command: --steps 7 --budget 290):
#   1   the machine: GPU, driver, CUDA, cuDNN, cuBLAS, NCCL, NVML; a step loop on the GPU with
#       NVML's instantaneous power sampled by nvidia-smi beside its 1-s average and trainbench's
#       gpu_power_w (without a GPU: the loop on the CPU, and trainbench's reason for no gpu:1)  20 s
#   2a  test_cuda: every GPU unit test, NcclOneRank in fp32 only (its tf32, fp16 and bf16 take
#       25 s each and passed on the H100; TB_CHECK_CUDA_FILTER='*' runs them)                  40 s
#   2b  compute-sanitizer --tool memcheck over the CUDA layer tests in fp32, where the tool is
#       (a runtime that refuses it, as gVisor does, makes this step skipped, in its words)     10 s
#   3   the default set (scripts/bench.sh's devices and precisions, 0.3 s per benchmark: a shorter
#       window left a row of one step of 0.2-0.3 s without its probe): gpu:1 in fp32 and bf16
#       beside the cpu rows, wall clock and device clock, gpu:1 x cpu, and each gpu:1 row's
#       data-parallel overhead as a share of its step (fails above 5%)                        120 s
#   4   gpu:1/jobs:2 and gpu:1/threads:2 on the MLP and LeNet-5 (one window), and the memory
#       bound refusing gpu:1/jobs:1000                                                         20 s
#   5a  emulated nodes: scripts/emulate_nodes.sh --gpu 2 running gpu:1,gpu:2 --link=measured
#       (NCCL's sweep) on the MLP, LeNet-5 and ResNet-152 32x32 in fp32 and bf16, each gpu:2
#       row beside its prediction (120 s on the H200)                                         120 s
#   5b  test_mpi's NCCL-rank equivalence tests (mpirun -np 2)                                  10 s
#   5c  one rank of an emulated-node gpu:2 row killed mid-row: the job must end within 10 s,
#       after NCCL's start-up over the emulated link (its sweep; 61 s on the H200)              60 s
#   6   --timeline=off against on, for the MLP and the LSTM (off, on, off, on: 2 repetitions
#       each, their windows pooled): fails where the timeline costs more than 3% of a step     25 s
#   7   the PyTorch peer on the GPU (scripts/compare_pytorch.sh, TB_COMPARE_DEVICE=gpu) on the
#       MLP, LeNet-5, the LSTM and ResNet-152 224 at batch 128, one process a side with 2
#       repetitions of 1 s after settings trials of 1 s, where torch imports: bf16 (165 s on
#       the H100, 220 s on an H200 beside a slower host), then fp32 and tf32 while the budget
#       lasts (the step takes what is left of it; fp32 took over 190 s)                       240 s
#   8   with two or more GPUs: real gpu:2 against its prediction over NVLink 4 (one process   40 s
#       measures no link)
# A step that needs a GPU (2a to 8) is skipped on a machine without one, saying why. When the
# budget runs out, the steps left are `skipped: budget`; check.md and the archive are still
# written, and rewritten after every step, so that a check stopped from outside keeps what ran.
#
#   scripts/gpu_check.sh [--budget SECONDS] [--out DIR] [--steps LIST]
#
# --budget: the whole check's seconds (default 480). --out: where the check's folder goes
# (default results/<gpu name>/, or results/<host>/ without a GPU). --steps: only these steps
# (e.g. 1,5c), the others skipped as not selected. Writes DIR/check-<UTC time>/ with every CSV and
# log and check.md (one line per step: passed, failed with the first error line, or skipped with
# the reason; then the headline figures), and DIR/check-<UTC time>.tar.gz, the folder packed.
# On a GPU machine without build tools, run it from the bundle of scripts/gpu_bundle.sh:
#   tar xzf build-bundle/bundle.tgz -C /tmp && /tmp/tb/run.sh check --out /tmp/check
#
# Environment: TB_BIN (trainbench; default build/release/bench/trainbench), TB_TESTS_DIR (where
# test_cuda and test_mpi are; default the build's tests/ beside TB_BIN's bench/, else TB_BIN's
# folder), TB_PYTHON (the interpreter that reads the CSVs and runs the PyTorch peer; default
# python3, 3.9 or newer), TB_MACHINE (the results folder's name), TB_CHECK_CUDA_FILTER
# (test_cuda's --gtest_filter in step 2a), TB_CHECK_PEER_PRECISIONS (default 'bf16 fp32 tf32'),
# TB_CHECK_CPU_RANKS=1 (for tests without a GPU: step 5c kills a rank of cpu:1,mpi:2 under mpirun).
# Exit status: 0 when no step failed, 1 when one did, 2 for bad usage or a machine that cannot run
# the check (no trainbench, no Python); 128 + the signal's number when interrupted.
set -uo pipefail

PROG=gpu_check.sh
caller_dir=$(pwd)
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)

# ---- the steps: id, what, planned seconds on one H100, time bound, what it needs ---------------
STEPS=(1 2a 2b 3 4 5a 5b 5c 6 7 8)
# The order they run in: step 6 (the timeline's cost, 25 s) right after the default set, so that a
# budget that runs short in the emulated nodes does not take it.
RUN_ORDER=(1 2a 2b 3 6 4 5a 5b 5c 7 8)
declare -A TITLE PLAN BOUND NEEDS
step_def() { TITLE[$1]=$2; PLAN[$1]=$3; BOUND[$1]=$4; NEEDS[$1]=$5; }
step_def 1 "the machine" 20 60 none
step_def 2a "test_cuda" 40 150 gpu
step_def 2b "compute-sanitizer memcheck over the CUDA layer tests" 10 90 gpu
step_def 3 "the default set: gpu:1 beside cpu" 120 180 gpu
step_def 4 "gpu:1/jobs:2, gpu:1/threads:2 and the memory bound" 20 90 gpu
step_def 5a "emulated nodes: gpu:1,gpu:2 with --link=measured" 120 180 gpu
step_def 5b "test_mpi's NCCL ranks" 10 60 gpu
step_def 5c "a rank killed mid-row" 60 120 gpu
step_def 6 "--timeline=off against on" 25 60 gpu
step_def 7 "the PyTorch peer on the GPU" 240 0 gpu
step_def 8 "real gpu:2 against its prediction" 40 120 gpus
RESERVE=5  # seconds kept for check.md and the archive at the end
KILL_LIMIT=10  # a killed rank must end the job within this many seconds (step 5c)
TIMELINE_LIMIT=3  # percent of a step the timeline may cost (step 6)
DP_OVERHEAD_LIMIT=5  # percent of a gpu:1 step the data-parallel path may add (step 3)

declare -A STATUS SECONDS_TAKEN FIGURES

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}
die() { echo "$PROG: error: $*" >&2; exit 2; }

# ---- arguments and what the check needs --------------------------------------------------------
budget=480 out="" selected=""
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=${2:-}; shift 2 || usage ;;
    --budget=*) budget=${1#--budget=}; shift ;;
    --out) out=${2:-}; shift 2 || usage ;;
    --out=*) out=${1#--out=}; shift ;;
    --steps) selected=${2:-}; shift 2 || usage ;;
    --steps=*) selected=${1#--steps=}; shift ;;
    -h | --help) usage 0 ;;
    *) die "unknown argument '$1' (options: --budget SECONDS, --out DIR, --steps LIST; --help)" ;;
  esac
done
[[ $budget =~ ^[1-9][0-9]*$ ]] || die "--budget: '$budget' is not a whole number of seconds >= 1 (e.g. --budget 480)"
declare -A WANTED
if [ -n "$selected" ]; then
  IFS=, read -r -a picks <<<"$selected"
  for s in "${picks[@]}"; do
    [ -n "${TITLE[$s]+x}" ] || die "--steps: no step '$s' (the steps: ${STEPS[*]})"
    WANTED[$s]=1
  done
fi
# Paths the caller gave are relative to where it ran the check.
absolute() { case $1 in /*) echo "$1" ;; *) echo "$caller_dir/$1" ;; esac; }
bin=$(absolute "${TB_BIN:-$root/build/release/bench/trainbench}")
[ -x "$bin" ] && [ -f "$bin" ] ||
  die "no trainbench at $bin: build it (cmake --preset release && cmake --build --preset release) or name one with TB_BIN (a bundle's run.sh sets it)"
if [ -n "${TB_TESTS_DIR:-}" ]; then
  tests=$(absolute "$TB_TESTS_DIR")
elif [ -d "$(dirname "$bin")/../tests" ]; then
  tests=$(cd "$(dirname "$bin")/../tests" && pwd)
else
  tests=$(dirname "$bin")
fi
python=${TB_PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then python=$candidate; break; fi
  done
fi
[ -n "$python" ] && "$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null ||
  die "no Python 3.9 or newer (python3, or TB_PYTHON): the check reads trainbench's CSVs with scripts/tbcsv.py"
reader=("$python" "$root/scripts/gpu_check.py")
cuda_filter=${TB_CHECK_CUDA_FILTER:--*NcclOneRank*/tf32:*NcclOneRank*/fp16:*NcclOneRank*/bf16}
read -r -a peer_precisions <<<"${TB_CHECK_PEER_PRECISIONS:-bf16 fp32 tf32}"

# The GPUs: nvidia-smi's list (CUDA_VISIBLE_DEVICES narrows it); why there are none.
gpu_count=0 gpu_why="" gpu_name="" smi_index=0
if ! command -v nvidia-smi >/dev/null; then
  gpu_why="nvidia-smi not found (no NVIDIA driver)"
else
  listing=$(timeout 30 nvidia-smi -L 2>&1)
  gpu_count=$(grep -c '^GPU [0-9]' <<<"$listing")
  if [ "$gpu_count" -eq 0 ]; then
    gpu_why="nvidia-smi -L: $(head -1 <<<"${listing:-no answer in 30 s}")"
  else
    gpu_name=$(sed -n 's/^GPU [0-9]*: \(.*\) (UUID.*/\1/p' <<<"$listing" | head -1)
  fi
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ] && [ "$gpu_count" -gt 0 ]; then
    IFS=, read -r -a visible <<<"$CUDA_VISIBLE_DEVICES"
    if [ ${#visible[@]} -eq 0 ] || [ "${visible[0]}" = "-1" ]; then
      gpu_count=0 gpu_why="CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU"
    else
      [ ${#visible[@]} -ge "$gpu_count" ] || gpu_count=${#visible[@]}
      smi_index=${visible[0]}
    fi
  fi
fi
# The results folder's name: the GPU's model (h100 for "NVIDIA H100 80GB HBM3"), else the host.
machine_name() {
  if [ -n "${TB_MACHINE:-}" ]; then echo "$TB_MACHINE"; return; fi
  if [ -z "$gpu_name" ]; then hostname -s; return; fi
  local words=() w prev="" name=""
  read -r -a words <<<"$(tr '[:upper:]' '[:lower:]' <<<"$gpu_name")"
  for w in "${words[@]}"; do
    case $w in nvidia | tesla | geforce | quadro) continue ;; esac
    if [[ $w =~ [0-9] ]]; then name=${prev:+$prev-}$w; break; fi
    prev=$w
  done
  name=$(tr -c 'a-z0-9.\n-' '-' <<<"${name:-$gpu_name}")
  echo "${name:-gpu}"
}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
started_at=$(date -u -d "${stamp:0:8} ${stamp:9:2}:${stamp:11:2}:${stamp:13:2}" +%Y-%m-%dT%H:%M:%SZ)
parent=$(absolute "${out:-$root/results/$(machine_name)}")
dir=$parent/check-$stamp
mkdir -p "$dir" || die "cannot make $dir (--out names a folder the check can write)"
archive=$parent/check-$stamp.tar.gz
run_mark=gpucheck-$$
export TB_GPU_CHECK_RUN=$run_mark  # every process the check starts carries it (leftover sweep)

# ---- the report --------------------------------------------------------------------------------
say() { echo "$PROG: $*" | tee -a "$dir/gpu_check-log.txt"; }

one_line() { tr '\n|' ' /' <<<"$1" | sed 's/  */ /g; s/ $//' | cut -c1-400; }

write_report() {
  local s used=$((SECONDS - started)) failed=0
  for s in "${STEPS[@]}"; do [[ ${STATUS[$s]:-} == failed* ]] && failed=1; done
  {
    echo "# trainbench GPU check: ${gpu_name:-no GPU} on $(hostname -s), $started_at"
    echo
    echo "\`scripts/gpu_check.sh --budget $budget${selected:+ --steps $selected}\` with \`$bin\`" \
      "(the scripts at $(git -C "$root" describe --always --dirty 2>/dev/null || cat "$root/VERSION" 2>/dev/null || echo '?')):" \
      "$used of $budget s used${finished:+; exit status ${interrupted_status:-$failed}}. Planned times are for one H100."
    echo "${gpu_count} GPU(s)${gpu_why:+: $gpu_why}."
    echo
    echo "## Steps"
    echo
    for s in "${STEPS[@]}"; do
      local timing=""
      [ -z "${SECONDS_TAKEN[$s]:-}" ] || timing=" (${SECONDS_TAKEN[$s]} s; planned ${PLAN[$s]} s)"
      echo "- $s ${TITLE[$s]}: ${STATUS[$s]:-not run yet}$timing"
    done
    echo
    echo "## Figures"
    for s in "${STEPS[@]}"; do
      [ -n "${FIGURES[$s]:-}" ] || continue
      echo
      echo "### $s ${TITLE[$s]}"
      echo
      echo "${FIGURES[$s]}"
    done
    echo
    echo "## Files"
    echo
    # shellcheck disable=SC2016  # the backquotes are Markdown's
    (cd "$dir" && find . -type f ! -name 'check.md*' | sort | sed 's|^\./|- `|; s|$|`|')
  } >"$dir/check.md.tmp"
  mv "$dir/check.md.tmp" "$dir/check.md"
  for s in "${STEPS[@]}"; do
    printf '%s\t%s\t%s\t%s\n' "$s" "${STATUS[$s]:-not run yet}" "${SECONDS_TAKEN[$s]:-}" "${PLAN[$s]}"
  done >"$dir/steps.tsv"
  tar czf "$archive.tmp" -C "$parent" "check-$stamp" 2>/dev/null && mv "$archive.tmp" "$archive"
}

# ---- running a step's commands under its bound -------------------------------------------------
current=""         # the pid of the bounded command running now
step_deadline=0    # SECONDS at which the running step must end
timed_out=""       # the bound, in seconds, of the last command stopped by it

# bounded [-a] LOG COMMAND...: the command under the step's remaining time, its output in LOG
# (appended with -a), killed with its process group when the time is up; its exit status.
bounded() {
  local mode=">" log
  [ "$1" = -a ] && { mode=">>"; shift; }
  log=$dir/$1
  shift
  local left=$((step_deadline - SECONDS))
  timed_out=""
  if [ "$left" -lt 1 ]; then
    echo "$PROG: not started: the step's time was used up" >>"$log"
    timed_out=0
    return 124
  fi
  if [ "$mode" = ">>" ]; then
    timeout --kill-after=10 "$left" "$@" >>"$log" 2>&1 &
  else
    timeout --kill-after=10 "$left" "$@" >"$log" 2>&1 &
  fi
  current=$!
  local status=0
  wait "$current" || status=$?
  current=""
  if [ "$status" -eq 124 ] || { [ "$status" -eq 137 ] && [ "$SECONDS" -ge "$step_deadline" ]; }; then
    timed_out=$left
  fi
  return "$status"
}

# Reads the reader's output (verdict, then figures) into the step's status and figures.
# The reader's notes on stderr (a row cut short, left out) go after its figures: first, they took
# the verdict's place.
judge() {  # step, reader arguments...
  local step=$1 output notes
  shift
  output=$("${reader[@]}" "$@" 2>"$dir/.reader-notes")
  notes=$(cat "$dir/.reader-notes" 2>/dev/null)
  rm -f "$dir/.reader-notes"
  [ -n "$output" ] || output=$notes notes=""
  STATUS[$step]=$(one_line "$(head -1 <<<"$output")")
  case ${STATUS[$step]} in passed* | failed* | skipped*) ;; *) STATUS[$step]="failed: the reader: ${STATUS[$step]}" ;; esac
  FIGURES[$step]=$(tail -n +2 <<<"$output")
  [ -z "$notes" ] || FIGURES[$step]+=$'\n'"$notes"
}


# Processes the check started that outlived their step: killed, and named.
sweep() {
  local pids=() pid names=()
  # The search itself runs without the mark, so that it does not find itself.
  mapfile -t pids < <(env -u TB_GPU_CHECK_RUN grep -l -s -z -x "TB_GPU_CHECK_RUN=$run_mark" /proc/[0-9]*/environ |
    env -u TB_GPU_CHECK_RUN cut -d/ -f3)
  for pid in "${pids[@]}"; do
    [ "$pid" != $$ ] && [ -e "/proc/$pid" ] || continue
    names+=("$(cat "/proc/$pid/comm" 2>/dev/null || echo '?')[$pid]")
    kill -KILL "$pid" 2>/dev/null
  done
  [ ${#names[@]} -eq 0 ] || echo "${names[*]}"
}

need_tool() {  # step, program, why it is needed
  command -v "$2" >/dev/null || { STATUS[$1]="skipped: no $2 on PATH ($3)"; return 1; }
}
need_test() {  # step, test binary
  [ -x "$tests/$2" ] || { STATUS[$1]="skipped: no $2 in $tests (a build without $([ "$2" = test_cuda ] && echo 'the CUDA backend' || echo 'MPI'))"; return 1; }
}
mpirun_flags() {
  local flags=(-np 2 --oversubscribe)
  [ "$(id -u)" -ne 0 ] || flags+=(--allow-run-as-root)
  echo "${flags[@]}"
}

# ---- the steps ---------------------------------------------------------------------------------
step_1() {
  {
    echo "# The machine, $stamp"
    echo "host: $(hostname -s); $(uname -srm)"
    grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores available"
    grep -m1 MemTotal /proc/meminfo
    echo "trainbench: $bin; tests: $tests; python: $python ($("$python" --version 2>&1))"
    for tool in nvcc compute-sanitizer mpirun; do
      echo "$tool: $(command -v "$tool" >/dev/null && timeout 20 "$tool" --version 2>&1 | grep -m1 -iE 'release|version|Open MPI' || echo 'not found')"
    done
  } >"$dir/machine.txt"
  if [ "$gpu_count" -gt 0 ]; then
    timeout 30 nvidia-smi >>"$dir/machine.txt" 2>&1
    timeout 30 nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,compute_cap,power.limit,clocks.max.sm \
      --format=csv >>"$dir/machine.txt" 2>&1
  else
    echo "GPU: none: $gpu_why" >>"$dir/machine.txt"
  fi
  timeout 30 "$bin" --list_configs >"$dir/list_configs.txt" 2>&1
  local status=0
  if [ "$gpu_count" -gt 0 ]; then
    # NVML's power every 100 ms during the loop: instantaneous where the driver has the field.
    local fields=power.draw.instant,power.draw.average
    timeout 20 nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits -i "$smi_index" >/dev/null 2>&1 || fields=power.draw
    echo "# timestamp,$fields,utilization.gpu,clocks.sm" >"$dir/power.csv"
    timeout $((step_deadline - SECONDS)) nvidia-smi --query-gpu="timestamp,$fields,utilization.gpu,clocks.sm" \
      --format=csv,noheader,nounits -lms 100 -i "$smi_index" >>"$dir/power.csv" 2>/dev/null &
    local sampler=$!
    bounded machine-log.txt "$bin" --devices=gpu:1 --precisions=fastest --benchmark_filter='^train/resnet152/cifar10/' \
      --benchmark_min_time=3 --csv="$dir/machine.csv" || status=$?
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    judge 1 machine "$dir/machine.csv" --gpu --power "$dir/power.csv" --status "$status" --log "$dir/machine-log.txt" --timed-out="$timed_out"
    # trainbench's own view decides the GPU steps: a GPU it cannot use is no GPU for them.
    if [[ ${STATUS[1]} == "failed: trainbench cannot use the GPU"* ]]; then
      gpu_count=0 gpu_why="trainbench cannot use the GPU nvidia-smi lists (step 1)"
    fi
  else
    bounded machine-log.txt "$bin" --devices=cpu:1,gpu:1 --precisions=fp32 --benchmark_filter='^train/mlp/mnist/' \
      --benchmark_min_time=0.2 --csv="$dir/machine.csv" || status=$?
    judge 1 machine "$dir/machine.csv" --status "$status" --log "$dir/machine-log.txt" --timed-out="$timed_out"
  fi
}

step_2a() {
  need_test 2a test_cuda || return
  local status=0
  bounded test_cuda-log.txt "$tests/test_cuda" --gtest_color=no --gtest_filter="$cuda_filter" || status=$?
  judge 2a gtest "$dir/test_cuda-log.txt" "$status" --what "test_cuda --gtest_filter='$cuda_filter'" --timed-out="$timed_out"
}

step_2b() {
  need_test 2b test_cuda || return
  local sanitizer
  # On PATH, else where CUDA toolkits and NVIDIA's images put it.
  sanitizer=$(command -v compute-sanitizer ||
    find /usr/local/cuda/bin /usr/local/cuda*/compute-sanitizer /opt/nvidia -maxdepth 3 -name compute-sanitizer -type f \
      -perm -u+x 2>/dev/null | head -1)
  [ -n "$sanitizer" ] || { STATUS[2b]="skipped: compute-sanitizer not found (it comes with the CUDA toolkit)"; return; }
  local status=0
  bounded memcheck-log.txt "$sanitizer" --tool memcheck --target-processes all --error-exitcode 99 --print-limit 20 \
    "$tests/test_cuda" --gtest_color=no --gtest_filter='Precisions/CudaLayers.*/fp32' || status=$?
  judge 2b sanitizer "$dir/memcheck-log.txt" "$status" --timed-out="$timed_out"
}

step_3() {
  local status=0
  bounded default-log.txt "$bin" --benchmark_filter=train/ --devices=cpu,gpu:1,gpu:all --precisions=fp32,fastest \
    --benchmark_min_time=0.3 --csv="$dir/default.csv" --summary="$dir/default-summary.md" || status=$?
  judge 3 default "$dir/default.csv" --dp-limit "$DP_OVERHEAD_LIMIT" --status "$status" --log "$dir/default-log.txt" \
    --timed-out="$timed_out"
}

step_4() {
  local status=0
  bounded jobs-log.txt "$bin" --devices=gpu:1/jobs:2,gpu:1/threads:2,gpu:1/jobs:1000 --precisions=fp32 \
    --benchmark_filter='^train/(mlp/mnist|lenet5/cifar10)/' --benchmark_min_time=0.5 --csv="$dir/jobs.csv" || status=$?
  judge 4 jobs "$dir/jobs.csv" --max-runnable 16 --status "$status" --log "$dir/jobs-log.txt" --timed-out="$timed_out"
}

step_5a() {
  need_tool 5a mpirun "Open MPI: scripts/gpu_bundle.sh carries it" || return
  local status=0
  bounded emulated-log.txt "$root/scripts/emulate_nodes.sh" --gpu 2 -- "$bin" --devices=gpu:1,gpu:2 --link=measured \
    --precisions=fp32,fastest --benchmark_filter='^train/(mlp/mnist|lenet5/cifar10|resnet152/cifar10)/' \
    --iterations=20 --csv="$dir/emulated.csv" || status=$?
  judge 5a spanning "$dir/emulated.csv" --device gpu:2 --emulated --expect 6 --what "emulate_nodes.sh" \
    --status "$status" --log "$dir/emulated-log.txt" --timed-out="$timed_out"
}

step_5b() {
  need_tool 5b mpirun "Open MPI: scripts/gpu_bundle.sh carries it" || return
  need_test 5b test_mpi || return
  local status=0
  # shellcheck disable=SC2046  # the flags are words
  bounded test_mpi-log.txt mpirun $(mpirun_flags) "$tests/test_mpi" --gtest_color=no --gtest_filter='*NcclRanks*' || status=$?
  judge 5b gtest "$dir/test_mpi-log.txt" "$status" --ranks 2 --what "test_mpi --gtest_filter='*NcclRanks*' on 2 ranks" \
    --timed-out="$timed_out"
}

# /proc/PID of each process named trainbench, whatever started it (a bundle's wrapper, ip netns
# exec).
trainbench_procs() {
  local proc
  for proc in /proc/[0-9]*; do
    [ "$(cat "$proc/comm" 2>/dev/null)" != trainbench ] || echo "$proc"
  done
}

# The pid of rank $1's trainbench whose command line holds the argument $2.
rank_pid() {
  local proc
  for proc in $(trainbench_procs); do
    # grep -z reads the NUL-separated files itself: a pipe from tr, under pipefail, could fail the
    # match when grep's early exit cut tr short (SIGPIPE): a race, on an environment of over 8 KiB.
    grep -qzxF -- "$2" "$proc/cmdline" 2>/dev/null || continue
    grep -qzx "OMPI_COMM_WORLD_RANK=$1" "$proc/environ" 2>/dev/null || continue
    echo "${proc#/proc/}"
    return
  done
}

# Stops step 5c's job $1 (SIGTERM to its timeout, which passes it on), waits for it, and forgets it
# as the running command.
stop_job() {
  kill -TERM "$1" 2>/dev/null
  wait "$1"
  current=""
}

step_5c() {
  need_tool 5c mpirun "Open MPI: scripts/gpu_bundle.sh carries it" || return
  local csv=$dir/killed.csv log=$dir/killed-log.txt status=0 launcher one two filter steps share delay
  # The kill comes a share of the one-device row's time after that row: inside the two ranks' row,
  # which must take longer than that share (its step against the one-device step, and its start).
  if [ "${TB_CHECK_CPU_RANKS:-0}" = 1 ]; then
    # For tests on a machine without a GPU: the same kill, of CPU ranks under mpirun (the LSTM).
    # Its mpi:2 step has taken from 0.9 to 4 times its cpu:1 step (two ranks on a loaded 2-core
    # machine): a third of the cpu:1 row. At 80% the kill once came after the mpi:2 row had ended.
    # shellcheck disable=SC2207  # the flags are words
    launcher=(mpirun $(mpirun_flags)) one=cpu:1 two=mpi:2 filter='^train/lstm/sine/' steps=1000 share=0.3
  else
    # The MLP's 20,000 steps: a few seconds of gpu:1 on rank 0 alone, far longer over sockets.
    launcher=("$root/scripts/emulate_nodes.sh" --gpu 2 --) one=gpu:1 two=gpu:2 filter='^train/mlp/mnist/'
    steps=20000 share=0.8
  fi
  local one_row="/$one/fp32/bs:[0-9]*,.*,ok,"
  local launched=$SECONDS
  timeout --kill-after=10 $((step_deadline - SECONDS)) "${launcher[@]}" "$bin" --devices="$one,$two" --precisions=fp32 \
    --benchmark_filter="$filter" --iterations="$steps" --csv="$csv" >"$log" 2>&1 &
  current=$!
  local job=$current
  while kill -0 "$job" 2>/dev/null && ! grep -q "$one_row" "$csv" 2>/dev/null && [ "$SECONDS" -lt "$step_deadline" ]; do
    sleep 0.2
  done
  if ! kill -0 "$job" 2>/dev/null; then
    wait "$job"; status=$?
    current=""
    STATUS[5c]="failed: the job ended (exit status $status) before a rank could be killed: $(one_line "$(grep -aiE 'error|skipped|killed' "$log" | tail -1)")"
    return
  fi
  if ! grep -q "$one_row" "$csv" 2>/dev/null; then
    stop_job "$job"
    STATUS[5c]="failed: timed out: the $one row did not come in the step's $((step_deadline - step_start)) s"
    return
  fi
  # Into the two ranks' row: the share of the one-device row's time (its step times its steps), at
  # most 8 s, so that the kill lands in the training loop, past the ranks' NCCL start-up, where
  # trainbench's own poll must see it.
  delay=$("$python" - "$csv" "$one" "$steps" "$share" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["device"] == sys.argv[2] and r["status"] == "ok"]
step = float(rows[0]["step_time_s"] or 0) if rows else 0
print(f"{min(8.0, max(0.05, float(sys.argv[4]) * int(sys.argv[3]) * step)):.2f}")
PY
)
  # The kill needs the delay and the job's KILL_LIMIT s to end, inside the step's time: the start-up
  # (each rank's link sweep, NCCL's over the emulated sockets included) and the row came first.
  local first_row=$((SECONDS - launched))
  if [ $((step_deadline - SECONDS)) -lt $((${delay%.*} + 1 + KILL_LIMIT + 2)) ]; then
    stop_job "$job"
    STATUS[5c]="failed: timed out: the start-up and the $one row took $first_row s of the step's $((step_deadline - step_start)) s, leaving too little to kill a rank and watch the job end"
    return
  fi
  sleep "${delay:-1}"
  if ! kill -0 "$job" 2>/dev/null; then
    wait "$job"; status=$?
    current=""
    STATUS[5c]="failed: the job ended (exit status $status) in the ${delay:-1} s before the kill, no rank was killed: $(one_line "$(grep -aiE 'error|skipped|killed' "$log" | tail -1)")"
    return
  fi
  local pid ended
  pid=$(rank_pid 1 "--csv=$csv")
  if [ -z "$pid" ]; then
    # What was there instead, for the log: each trainbench's pid, MPI rank and arguments.
    local proc
    for proc in $(trainbench_procs); do
      echo "gpu_check.sh: no rank 1 of --csv=$csv; trainbench ${proc#/proc/}:" \
        "$(tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep '^OMPI_COMM_WORLD_RANK=')" \
        "$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null)" >>"$log"
    done
    stop_job "$job"
    ended=$("${reader[@]}" ended "$csv" "$two")
    STATUS[5c]="failed: no trainbench process of rank 1 was found to kill"
    [ -z "$ended" ] || STATUS[5c]+=" (the $two row had ended in the $delay s: $ended is in $csv)"
    return
  fi
  kill -KILL "$pid"
  local killed=$EPOCHREALTIME
  while kill -0 "$job" 2>/dev/null; do
    if awk -v a="$killed" -v b="$EPOCHREALTIME" -v l="$KILL_LIMIT" 'BEGIN { exit !(b - a > l) }'; then break; fi
    sleep 0.1
  done
  local took
  took=$(awk -v a="$killed" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  if kill -0 "$job" 2>/dev/null; then
    stop_job "$job"
    STATUS[5c]="failed: the job was still running $KILL_LIMIT s after rank 1 (pid $pid) was killed"
    return
  fi
  wait "$job"; status=$?
  current=""
  local named
  named=$("${reader[@]}" killed "$log" 1)
  # A two-rank row that ended ok was over when the kill came (its last step done, or its ranks
  # already leaving), whatever mpirun then said of the killed rank.
  ended=$("${reader[@]}" ended "$csv" "$two")
  FIGURES[5c]="- the $one row came $first_row s after the launch (start-up included); rank 1 (pid $pid) killed $delay s after it: the job ended $took s later, exit status $status"
  [ -z "$named" ] || FIGURES[5c]+=$'\n'"- mpirun: $named"
  if [ -n "$ended" ]; then
    STATUS[5c]="failed: the kill came after the $two row had ended ($ended is in $csv), not mid-row"
  elif [ "$status" -eq 0 ]; then
    STATUS[5c]="failed: the job exited 0 after a rank was killed"
  elif [ -z "$named" ]; then
    STATUS[5c]="failed: the job ended in $took s but its output names neither rank 1 nor the signal"
  elif ! grep -q "$one_row" "$csv"; then
    STATUS[5c]="failed: the $one row written before the kill is not in $csv any more"
  else
    STATUS[5c]="passed: the job ended $took s after rank 1 was killed, naming it; the $one row kept"
  fi
}

# Off, on, off, on: a drift of the machine over the step (12-25% between the repetitions of one
# process on the H100 and the H200) falls on both sides, not on the one that ran second.
step_6() {
  local status=0 timeline append=""
  local common=(--devices=gpu:1 --precisions=fp32 '--benchmark_filter=^train/(mlp/mnist|lstm/sine)/'
    --benchmark_repetitions=2 --benchmark_min_time=0.3 --csv="$dir/timeline.csv")
  for timeline in off on off on; do
    bounded $append timeline-log.txt "$bin" "${common[@]}" --timeline=$timeline || status=$?
    append=-a
    [ "$status" -eq 0 ] || break
  done
  judge 6 timeline "$dir/timeline.csv" --limit "$TIMELINE_LIMIT" --status "$status" --log "$dir/timeline-log.txt" \
    --timed-out="$timed_out"
}

step_7() {
  local peer_python=${TB_PYTHON:-python3} probe
  if ! probe=$(timeout 120 "$peer_python" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1); then
    STATUS[7]="skipped: $peer_python cannot import torch: $(one_line "$(tail -1 <<<"$probe")")"
    return
  fi
  if [[ $(tail -1 <<<"$probe") != *" True" ]]; then
    STATUS[7]="skipped: PyTorch $(tail -1 <<<"$probe" | cut -d' ' -f1) sees no GPU (torch.cuda.is_available() is False)"
    return
  fi
  local p status csvs=() done_ran=() left_out=() results failures=()
  for p in "${peer_precisions[@]}"; do
    # One precision of the four workloads takes about 120 s on an H100 (a process per settings
    # trial and per side, torch's import, ResNet-152 224's cuDNN plans on both sides); a later
    # one starts only if that much is left.
    if [ ${#done_ran[@]} -gt 0 ] && [ $((step_deadline - SECONDS)) -lt "${PLAN[7]}" ]; then
      left_out+=("$p")
      continue
    fi
    results=$dir/peer-$p
    status=0
    # A second of each trial and repetition: ResNet-152 224's step is 50-75 ms, and trials of 0.2 s
    # (2-3 steps) chose its layout on the H200 at 1,774 samples/s where a script of its own ran
    # 1,984.
    TB_COMPARE_DEVICE=gpu TB_TRAINBENCH="$bin" TB_PYTHON="$peer_python" TB_ROUNDS=1 TB_REPETITIONS=2 TB_MIN_TIME=1 \
      TB_TRIAL_TIME=1 TB_RESULTS_DIR="$results" \
      TB_COMPARE_FILTER="^train/(mlp/mnist|lenet5/cifar10|lstm/sine|resnet152/imagenet)/gpu:1/$p/" \
      bounded "peer-$p-log.txt" "$root/scripts/compare_pytorch.sh" || status=$?
    done_ran+=("$p")
    local tb pt
    tb=$(find "$results" -name 'trainbench-vs-pytorch-*-trainbench.csv' 2>/dev/null | head -1)
    pt=${tb%-trainbench.csv}-pytorch.csv
    [ -z "$tb" ] || [ ! -s "$tb" ] || [ ! -s "$pt" ] || csvs+=("$tb" "$pt")
    if [ -n "$timed_out" ]; then
      failures+=("$p did not finish in the $timed_out s the budget left it (a hang, or a plan too short: peer-$p-log.txt)")
    elif [ "$status" -ne 0 ]; then
      failures+=("$p: compare_pytorch.sh exited $status: $(one_line "$(grep -aE 'exit status|error' "$dir/peer-$p-log.txt" | head -1)")")
    fi
  done
  if [ ${#csvs[@]} -gt 0 ]; then
    judge 7 peer "${csvs[@]}" --what compare_pytorch.sh
  else
    STATUS[7]="failed: no rows of both sides"
  fi
  if [ ${#failures[@]} -gt 0 ]; then
    STATUS[7]="failed: ${failures[0]}${STATUS[7]:+ (${STATUS[7]})}"
  elif [ ${#left_out[@]} -gt 0 ] && [[ ${STATUS[7]} == passed* ]]; then
    STATUS[7]+="; ${done_ran[*]} ran, ${left_out[*]} left out for the budget"
  fi
}

step_8() {
  local status=0
  bounded gpu2-log.txt "$bin" --devices=gpu:1,gpu:2 --precisions=fp32,fastest \
    --benchmark_filter='^train/(mlp/mnist|resnet152/cifar10)/' --benchmark_min_time=0.5 --csv="$dir/gpu2.csv" || status=$?
  judge 8 spanning "$dir/gpu2.csv" --device gpu:2 --expect 2 --status "$status" --log "$dir/gpu2-log.txt" --timed-out="$timed_out"
}

# ---- the run -----------------------------------------------------------------------------------
started=$SECONDS
finished=""
interrupted_status=""  # 128 + the signal's number, once a signal stopped the check
running_step=""
on_signal() {
  trap - INT TERM HUP
  say "interrupted by SIG$1: stopping step ${running_step:-none}, writing check.md and the archive"
  if [ -n "$current" ]; then
    kill -TERM "$current" 2>/dev/null
    wait "$current" 2>/dev/null
  fi
  local s
  [ -z "$running_step" ] || STATUS[$running_step]="failed: interrupted by SIG$1"
  for s in "${STEPS[@]}"; do [ -n "${STATUS[$s]:-}" ] || STATUS[$s]="skipped: the check was interrupted (SIG$1)"; done
  sweep >/dev/null
  finished=1 interrupted_status=$((128 + $2))
  write_report
  exit "$interrupted_status"
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

say "checking ${gpu_name:-a machine without a GPU ($gpu_why)} in $dir (budget $budget s)"
write_report
out_of_budget=""
for step in "${RUN_ORDER[@]}"; do
  left=$((budget - (SECONDS - started) - RESERVE))
  if [ -n "$selected" ] && [ -z "${WANTED[$step]:-}" ]; then
    STATUS[$step]="skipped: not selected (--steps $selected)"
  elif [ -n "$out_of_budget" ] || [ "$left" -lt "${PLAN[$step]}" ]; then
    [ -n "$out_of_budget" ] ||
      out_of_budget="$left s left at step $step, which plans ${PLAN[$step]} s: run the steps left with --steps and a budget of their plans"
    STATUS[$step]="skipped: budget ($out_of_budget)"
    # Said too where the machine could not have run it anyway.
    if [ "${NEEDS[$step]}" = gpu ] && [ "$gpu_count" -eq 0 ]; then
      STATUS[$step]+="; no GPU either"
    elif [ "${NEEDS[$step]}" = gpus ] && [ "$gpu_count" -lt 2 ]; then
      STATUS[$step]+="; real gpu:2 needs two GPUs, this machine has $gpu_count"
    fi
  elif [ "${NEEDS[$step]}" = gpu ] && [ "$gpu_count" -eq 0 ]; then
    STATUS[$step]="skipped: no GPU ($gpu_why)"
  elif [ "${NEEDS[$step]}" = gpus ] && [ "$gpu_count" -eq 0 ]; then
    STATUS[$step]="skipped: no GPU ($gpu_why)"
  elif [ "${NEEDS[$step]}" = gpus ] && [ "$gpu_count" -lt 2 ]; then
    STATUS[$step]="skipped: one GPU: real gpu:2 needs two or more"
  else
    bound=${BOUND[$step]}
    if [ "$step" = 7 ]; then
      # The peer takes what is left, less step 8's time where it will run.
      bound=$left
      [ "$gpu_count" -lt 2 ] || bound=$((left - PLAN[8]))
    fi
    [ "$bound" -le "$left" ] || bound=$left
    running_step=$step
    step_start=$SECONDS
    step_deadline=$((SECONDS + bound))
    say "step $step, ${TITLE[$step]} (planned ${PLAN[$step]} s, at most $bound s)"
    STATUS[$step]=""
    FIGURES[$step]=""
    "step_$step"
    [ -n "${STATUS[$step]}" ] || STATUS[$step]="failed: the step gave no verdict"
    leftovers=$(sweep)
    if [ -n "$leftovers" ]; then
      if [[ ${STATUS[$step]} == passed* ]]; then
        STATUS[$step]="failed: processes outlived the step (killed): $leftovers"
      else
        STATUS[$step]+="; processes it left were killed: $leftovers"
      fi
    fi
    SECONDS_TAKEN[$step]=$((SECONDS - step_start))
    running_step=""
  fi
  say "  $step: ${STATUS[$step]}"
  write_report
done
finished=1
write_report
status=0
for step in "${STEPS[@]}"; do [[ ${STATUS[$step]} == failed* ]] && status=1; done
say "check.md and every CSV and log in $dir; packed as $archive"
exit $status

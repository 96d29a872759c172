#!/usr/bin/python3
"""Trains trainbench's models with PyTorch on the CPU or a GPU and writes trainbench's CSV rows.

    /usr/bin/python3 scripts/peers/pytorch_train.py [--filter REGEX] [--threads N]
        [--device cpu|cuda] [--precisions LIST] [--batch N] [--optimizer sgd|adam] [--lr X]
        [--warmup_steps N] [--min_time S] [--repetitions R] [--csv FILE] [--peak_gflops X]
        [--blas auto|system|DIR] [--trainbench PATH]
        [--settings search|SETTING|@FILE] [--settings_out FILE] [--search_only] [--trial_time S]
    /usr/bin/python3 scripts/peers/pytorch_train.py --list_models

Settings (issue 20): PyTorch is timed with the settings that make it fastest on the workload,
found by a search (settings_search.py): on the CPU intra-op threads {all, 1} x BLAS threads
{all, 1} (not above the intra-op threads) x OMP_WAIT_POLICY {active, passive}, x layout {nchw,
channels_last} for images; on a GPU the layout of images. Each setting gets a short timed trial (--trial_time, wall clock) in a
child process of its own, the fastest is timed properly in another, and its rows name it in
peer_settings (`layout:channels_last/threads:2/blas_threads:1/omp_wait:passive`). --settings
SETTING times that one instead (fields left out take the defaults: NCHW, --threads threads, as
many BLAS threads, libgomp's wait policy); --settings @FILE the ones an earlier search wrote
with --settings_out FILE (benchmarks it lacks are searched); --search_only searches and times
nothing.

On a GPU (--device cuda: the row's device is gpu:1) PyTorch runs as its users run it for speed:
eager, cudnn.benchmark on, the data resident on the GPU (so its rows carry trainbench's
data_on_device variant), fp32 (TF32 off everywhere), tf32 (TF32 on in convolutions and
matmuls), fp16 (autocast with a GradScaler) and bf16 (autocast), peak memory from
torch.cuda.max_memory_allocated in mem_peak_bytes. Two clocks, as trainbench's: step_time_s
(and samples_per_s, wall_step_time_s) is the wall time of the timed steps, host gaps between
steps included; device_step_time_s (and device_samples_per_s) is device time, CUDA events
recorded around each step (from before the batch is taken to the end of the optimizer update),
summed. ResNet-152 at 224x224 runs at batch 128
there, as trainbench's GPU rows do.

The framework baseline of issue 7: the same layer shapes, batch sizes, optimizer, fp32 and
synthetic data of the same shape as trainbench, timed the way Google Benchmark times
trainbench (whole steps, repeated until --min_time seconds), and reported under the same
benchmark names (train/<model>/<dataset>/<device>/fp32/bs:<n>[/<variant>]) in trainbench's CSV
schema (results/SCHEMA.md), version included, so scripts/compare.py and scripts/plot.py read both. The
variant is trainbench's for the same flags (`optimizer:sgd`, `lr:0.01`, and `data_on_device`:
the peer's batches are a pool made before timing, in host memory or on the GPU), so that a row
matches the trainbench row of the same flags.
scripts/compare_pytorch.sh runs the two side by side.

The trainbench binary (--trainbench, $TRAINBENCH, else build/release/bench/trainbench) is
the one source of what to train: `trainbench --list_models --json` gives each workload's
input shape, sequence length, classes, batch and GPU batch, warm-up, optimizer, parameters
and FLOPs, and `trainbench --csv_header --json` the CSV schema: the schema_version every row
carries and the columns. This script only adds a PyTorch definition of each model (BUILDERS in
torchpeer/models.py, keyed by model name), so a model added to trainbench is measured here once
it has one; until then its benchmarks are skipped
with one line on stderr. Workloads trainbench runs on real data only are skipped too (this
script generates synthetic data). Before a row is timed, the PyTorch model's parameters and
its own count of FLOPs (on the meta device) must equal trainbench's, or the row fails naming
both counts: a definition that drifted from trainbench's gives no comparison.

Optimizer: without --optimizer or --lr, each workload's own (kind, learning rate scaled with
the batch where trainbench scales it, momentum, weight decay, Adam's betas and eps), as a
trainbench run without those flags trains it. --optimizer and --lr override it exactly as
trainbench's flags of the same names do (the kind, and the learning rate: sgd 0.01 and adam
0.001 unless --lr; the rest stays the workload's), so that the peer given the flags
trainbench was given trains the same way: scripts/compare_pytorch.sh passes both tools the
same --optimizer.

PyTorch is measured at its best as users run it: eager mode, oneDNN on (torch's default), the
searched settings, denormals flushed, gradients freed with set_to_none, data generated
beforehand into a pool of tensors (no loader cost). The script re-executes itself once with an
environment that does not cripple it: no OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE (a forced core
type can select slow kernels: on an AVX-512 machine Haswell's are slower than the ones OpenBLAS
picks), glibc malloc told to keep large buffers instead of unmapping and faulting them in
again every step, and, where Debian's OpenMP build of OpenBLAS is installed, that BLAS (torch's
Linear and LSTM layers call the BLAS; the reference BLAS Debian falls back to is an order of
magnitude slower), and the setting's OPENBLAS_NUM_THREADS and OMP_WAIT_POLICY.

The parts beside this script (docs/scripts.md): settings_search.py, the settings search, and
torchpeer/: cli (flags), trainbench and workloads (what to train and its names), environment
(the re-exec's), csvout (rows), and after the re-exec, with torch: models (and their counts),
data, session, timing, machine (the rows' context, the BLAS report) and run (a benchmark's
rows, a trial).

Exit status: 0 (skipped benchmarks included), 1 when a row failed (loss not finite or not
falling, or the PyTorch model's counts differ from trainbench's), 2 for bad flags, a filter
that matches nothing, a CSV with another header, or no trainbench binary that answers
--list_models --json and --csv_header --json with schema 6's columns. Standard library and torch
only.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The peer's parts beside this file. These are standard library only; the parts that import
# torch are imported in main, in the re-executed process.
import settings_search  # noqa: E402
from torchpeer import PROG, InputError  # noqa: E402
from torchpeer.cli import (fail, parse_args, per_benchmark_processes,  # noqa: E402
                           report_skipped, select_benchmarks)
from torchpeer.csvout import CsvWriter, check_csv_file  # noqa: E402
from torchpeer.environment import (cpu_setting, machine_cores,  # noqa: E402
                                   reexec_with_tuned_environment)
from torchpeer.trainbench import read_schema, read_workloads  # noqa: E402
from torchpeer.workloads import batch_of  # noqa: E402

SCRIPT = Path(__file__).resolve()  # what the re-exec and each benchmark's child process run


def settle(argv: list[str]):
    """Flags, trainbench's workloads and CSV header, and the environment, settled before torch
    loads: a typo, a missing binary or a refused CSV answers at once, and the re-exec must
    happen before glibc and the loader set up. (The re-executed process asks trainbench
    again.) Exits where nothing is left for this process to do: the filter matched only what
    it cannot run, or each benchmark runs in a child process of its own."""
    args = parse_args(argv, __doc__.split("\n\n")[1])
    args.workloads = read_workloads(Path(args.trainbench))
    if not args.list_models:
        args.chosen, args.skipped = select_benchmarks(args)
        args.schema = read_schema(Path(args.trainbench))
        args.write_header = check_csv_file(args.csv, args.schema.columns) if args.csv else False
        if not args.chosen:  # the filter matched only what this script cannot run
            report_skipped(args.skipped)
            sys.exit(0)
        if per_benchmark_processes(args):
            report_skipped(args.skipped)
            sys.exit(settings_search.run_each(SCRIPT, args, args.chosen,
                                              lambda line: print(line, flush=True)))
    reexec_with_tuned_environment(args, SCRIPT)
    return args


def main(args) -> int:
    """The run, in the re-executed process: torch loads here, under the tuned environment."""
    import torch

    from torchpeer.machine import machine_context, report_environment
    from torchpeer.models import list_models
    from torchpeer.run import run_benchmark, run_trial, write_skipped

    cuda = args.device == "cuda"
    torch.set_num_threads(args.threads if cuda else cpu_setting(args).threads)
    torch.set_num_interop_threads(1)  # one training stream: no inter-op parallelism to use
    # Denormal floats take a slow microcode path on x86 (up to ~100x per operation); PyTorch's
    # own CPU performance advice is to flush them, so its best run does.
    torch.set_flush_denormal(True)
    torch.autograd.set_detect_anomaly(False)
    if args.list_models:
        return list_models(args)
    if cuda and not torch.cuda.is_available():
        raise InputError("--device cuda: torch sees no usable GPU (torch.cuda.is_available() is False: no "
                         "driver, no device, or a CPU-only build of torch)")
    if args.trial:
        return 0 if all(run_trial(w, p, name, batch_of(w, args), args)
                        for (w, p), name in args.chosen) else 1
    report_environment(args)
    print(f"{PROG}: workloads and CSV columns from {args.trainbench}", file=sys.stderr)
    report_skipped(args.skipped)
    writer = CsvWriter(args.csv, args.schema.columns, args.write_header) if args.csv else None
    context = machine_context()
    if args.threads > machine_cores() and not cuda:
        write_skipped(args, writer, context)
        return 0
    failures = 0
    for (w, precision), name in args.chosen:
        failures += not run_benchmark(w, precision, name, batch_of(w, args), args, context, writer)
    if failures:
        print(f"{PROG}: {failures} benchmark(s) had failed rows; see the messages above", file=sys.stderr)
    if args.csv:
        print(f"{PROG}: rows appended to {args.csv}", file=sys.stderr)
    return 1 if failures else 0


def guarded(step, *step_args):
    """step(*step_args): an InputError is one line on stderr and exit status 2, never a
    traceback; Ctrl-C exits with 130."""
    try:
        return step(*step_args)
    except InputError as e:
        fail(str(e))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    ARGS = guarded(settle, sys.argv[1:])
    sys.exit(guarded(main, ARGS))

"""Running the benchmarks a process was given: a benchmark's warm-up, timed repetitions and
rows (a median of two or more), a settings trial's one line, and the skipped rows of a CPU
run given more threads than cores. Imports torch: only after the re-exec."""
from __future__ import annotations

import json
import math
import statistics
import sys

import torch

import settings_search
import tbcsv
import tbdevices
from settings_search import Setting
from torchpeer import CheckFailed
from torchpeer.csvout import formatted, iteration_values, load_average, number, number_or_empty
from torchpeer.environment import machine_cores
from torchpeer.models import count_mismatch, count_model
from torchpeer.session import Session, make_session
from torchpeer.timing import run_repetition
from torchpeer.workloads import Workload, batch_of, device_name, optimizer_of, variant_of


def row_setting(w: Workload, args) -> Setting:
    """The setting a workload runs with here: this process' one, resolved for its input."""
    return settings_search.resolved(args.setting, settings_search.is_images(w), args.threads,
                                    args.device == "cuda")


def row_threads(args) -> int:
    """The row's threads column: a GPU row's is 1, as trainbench writes it."""
    return 1 if args.device == "cuda" else args.threads


def row_identity(w: Workload, precision: str, name: str, batch: int, args, context) -> dict[str, str]:
    """The columns every row of a benchmark shares, in the schema of the trainbench asked
    (args.schema), version included."""
    cuda = args.device == "cuda"
    device = device_name(args.threads, machine_cores(), cuda)
    variant = variant_of(w, batch, args)
    # A row of schema 6 on says its kind in columns, which readers take instead of its device
    # text; tbdevices holds trainbench's table of kinds.
    kind = tbdevices.kind_of(device, variant)
    identity = {"schema_version": args.schema.version, "benchmark": name, "kind": "train", "model": w.model,
                "dataset": w.dataset,
                "data_source": "generated" if w.task == "regression" else "synthetic",
                "device": device, "device_kind": kind.name, "backend": kind.backend,
                "data_parallel": str(kind.data_parallel or ""),
                "threads": str(row_threads(args)), "precision": precision, "batch": str(batch),
                "optimizer": optimizer_of(w, batch, args).kind, "framework": "pytorch",
                "params": str(w.params), "train_flops_per_sample": number(w.train_flops_per_sample),
                "warmup_steps": str(w.warmup_steps if args.warmup_steps is None else args.warmup_steps),
                "variant": variant, "measurement": "measured", "data_on_device": "1",
                "peer_settings": row_setting(w, args).text(), **context}
    if cuda and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        identity.update({"gpu_name": props.name, "gpu_cc": f"{props.major}.{props.minor}",
                         "cuda_graph": "0"})
    return identity


def time_repetitions(session: Session, w: Workload, batch: int, args, emit) -> tuple[list, bool]:
    """args.repetitions timed runs, a row each; the good ones' values, and whether one failed."""
    ok_values: list[dict[str, float]] = []
    failed = False
    steps = 1
    for rep in range(args.repetitions):
        load = load_average()
        row = {"run_type": "iteration", "repetition": str(rep), "load_avg_1m": number_or_empty(load)}
        try:
            trial = run_repetition(session, steps, args.min_time)
            steps = trial.steps  # later repetitions start from the count found
            loss_last = session.check()
        except CheckFailed as e:
            failed = True
            emit({**row, "status": "failed", "message": str(e)}, f"FAILED: {e}")
            continue
        values = iteration_values(trial, batch, w.train_flops_per_sample, args.peak_gflops,
                                  session.loss_first, loss_last)
        if session.cuda:
            values["mem_peak_bytes"] = torch.cuda.max_memory_allocated()
            values["mem_reserved_bytes"] = torch.cuda.max_memory_reserved()
        ok_values.append(values)
        # The verdicts of trainbench's one-device repetitions that the peer can judge itself, by
        # the rules the scripts judge older rows with (tbcsv): readers of a schema 6 row take its
        # verdicts column as written. Each process of the peer runs one row's threads.
        verdicts = []
        if tbcsv.started_loaded(load, row_threads(args)):
            verdicts.append("loaded")
        if tbcsv.above_peak(values.get("utilisation")):
            verdicts.append("above_peak")
        util = f" utilisation {values['utilisation']:.3f}" if "utilisation" in values else ""
        wall = (f" (device {values['device_step_time_s'] * 1e3:.2f})" if session.cuda else "")
        emit({**row, "status": "ok", "verdicts": tbcsv.join_verdicts(verdicts), **formatted(values)},
             f"{values['samples_per_s']:>12.1f} samples/s  {values['step_time_s'] * 1e3:9.2f} ms/step{wall} "
             f"({trial.steps} steps) host_cpu_util {values['host_cpu_util']:.2f}{util} "
             f"loss {loss_last:.4g}")
    return ok_values, failed


def run_benchmark(w: Workload, precision: str, name: str, batch: int, args, context, writer) -> bool:
    cuda = args.device == "cuda"
    identity = row_identity(w, precision, name, batch, args, context)

    def emit(row: dict[str, str], shown: str) -> None:
        print(f"{name:<45} {shown}", flush=True)
        if writer:
            writer.write({**identity, **row})

    ok_values: list[dict[str, float]] = []
    failed = False
    session = None
    try:
        # A PyTorch model that drifted from trainbench's would time another workload.
        mismatch = count_mismatch(w, *count_model(w))
        if mismatch:
            raise CheckFailed(mismatch)
        session = make_session(w, batch, optimizer_of(w, batch, args), args, precision,
                               row_setting(w, args).layout)
        session.steps(int(identity["warmup_steps"]))
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        ok_values, failed = time_repetitions(session, w, batch, args, emit)
    except (CheckFailed, RuntimeError, MemoryError) as e:
        # Before any timed step: counts that differ, no data for the workload; or an error
        # such as out of memory: this row fails, not the run.
        failed = True
        message = str(e) if isinstance(e, CheckFailed) else f"{type(e).__name__}: {e}"[:500]
        emit({"run_type": "iteration", "repetition": "0", "status": "failed", "message": message,
              "load_avg_1m": number_or_empty(load_average())}, f"FAILED: {e}")
    finally:
        session = None  # free the model before the next benchmark builds its own
        if cuda:
            torch.cuda.empty_cache()
    if len(ok_values) >= 2:  # Google Benchmark aggregates two or more good repetitions
        median = {k: statistics.median(v[k] for v in ok_values) for k in ok_values[0]}
        emit({"run_type": "aggregate", "aggregate": "median", "status": "ok", **formatted(median)},
             f"{median['samples_per_s']:>12.1f} samples/s  (median of {len(ok_values)})")
    return not failed


def run_trial(w: Workload, precision: str, name: str, batch: int, args) -> bool:
    """--trial (a child of the settings search): one short timed run under this process'
    setting, the result on one line that settings_search.parse_trial_output reads. Wall-clock
    samples/s, the clock the comparison uses; the loss must be finite, not yet falling."""
    try:
        session = make_session(w, batch, optimizer_of(w, batch, args), args, precision,
                               row_setting(w, args).layout)
        session.steps(w.warmup_steps if args.warmup_steps is None else args.warmup_steps)
        trial = run_repetition(session, 1, args.min_time)
        loss = float(session.last_loss)
        if not math.isfinite(loss):
            raise CheckFailed(f"loss is not finite: {loss}")
    except (CheckFailed, RuntimeError, MemoryError) as e:
        print(f"{name}: trial failed: {type(e).__name__}: {e}"[:500], file=sys.stderr)
        return False
    result = {"samples_per_s": batch * trial.steps / trial.wall, "steps": trial.steps,
              "seconds": trial.wall}
    print(settings_search.TRIAL_PREFIX + json.dumps(result), flush=True)
    return True


def write_skipped(args, writer, context) -> None:
    """A CPU run given more threads than the machine has: a skipped row per benchmark."""
    cores = machine_cores()
    message = f"{device_name(args.threads, cores)} needs {args.threads} cores, this machine has {cores}"
    for (w, precision), name in args.chosen:
        print(f"{name:<45} skipped: {message}")
        if writer:
            identity = row_identity(w, precision, name, batch_of(w, args), args, context)
            writer.write({**identity, "run_type": "iteration", "repetition": "0",
                          "status": "skipped", "message": message})

"""pytorch_train.py's flags, checked before torch loads so that a typo answers at once, and
the benchmarks they select among trainbench's workloads. Standard library only."""
from __future__ import annotations

import argparse
import math
import os
import re
import sys

import settings_search
from torchpeer import PROG, InputError
from torchpeer.environment import machine_cores
from torchpeer.trainbench import DEFAULT_TRAINBENCH
from torchpeer.workloads import (Workload, batch_of, benchmark_name, device_name, skip_reason,
                                 variant_of)

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: status 2, one line
        raise InputError(message)


def parser(description: str) -> Parser:
    p = Parser(prog=PROG, description=description)
    p.add_argument("--filter", default=".", metavar="REGEX",
                   help="benchmarks to run, searched in train/<model>/<dataset>/<device>/fp32/"
                        "bs:<n>[/<variant>] (default: all)")
    p.add_argument("--threads", type=int, default=machine_cores(), metavar="N",
                   help="intra-op threads (default: all cores, device `cpu`; otherwise `cpu:N`)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default), or cuda: one GPU, device gpu:1 in the rows")
    p.add_argument("--precisions", default=None, metavar="LIST",
                   help="fp32, tf32, fp16, bf16 (default: fp32 on the CPU, all four on a GPU; the "
                        "CPU runs fp32 only)")
    p.add_argument("--batch", type=int, metavar="N",
                   help="batch size of every model (default: trainbench's, its GPU batch on a GPU)")
    p.add_argument("--optimizer", choices=("sgd", "adam"),
                   help="override each model's optimizer as trainbench --optimizer does: sgd (SGD "
                        "with the model's momentum) or adam, lr 0.01 or 0.001 unless --lr "
                        "(default: each model's own, from trainbench)")
    p.add_argument("--lr", type=float, help="override each model's learning rate, as trainbench --lr "
                                            "(default: the model's own, scaled with the batch where "
                                            "trainbench scales it)")
    p.add_argument("--warmup_steps", type=int, metavar="N",
                   help="untimed steps first (default: trainbench's for the workload)")
    p.add_argument("--min_time", type=float, default=0.5, metavar="SECONDS",
                   help="time whole steps until at least this long, at least one (default 0.5)")
    p.add_argument("--repetitions", type=int, default=1, metavar="R")
    p.add_argument("--seed", type=int, default=1, help="weights and data (default 1)")
    p.add_argument("--csv", metavar="FILE", help="append rows in trainbench's CSV schema")
    p.add_argument("--peak_gflops", type=float, metavar="X",
                   help="the machine's sgemm rate for the utilisation column (e.g. trainbench's "
                        "peak_gflops of the same thread count)")
    p.add_argument("--trainbench", default=os.environ.get("TRAINBENCH", str(DEFAULT_TRAINBENCH)),
                   metavar="PATH", help="the trainbench binary asked for the workloads and the "
                                        "CSV header (default: $TRAINBENCH, else "
                                        "build/release/bench/trainbench)")
    p.add_argument("--blas", default="auto", metavar="auto|system|DIR",
                   help="auto: Debian's OpenMP OpenBLAS when installed (default); system: "
                        "whatever libblas.so.3 resolves to; DIR: the libblas.so.3 in DIR")
    p.add_argument("--list_models", action="store_true",
                   help="print the PyTorch models' parameters and FLOPs as trainbench --list_models "
                        "does, and exit (status 1 where they differ from trainbench's)")
    settings_search.add_flags(p)
    return p


def check_settings_args(args) -> None:
    try:
        settings_search.check_flags(args)
    except ValueError as e:
        raise InputError(str(e)) from None


def per_benchmark_processes(args) -> bool:
    """Whether each benchmark runs in a child process of its own, under the setting searched or
    read for it (this process then never loads torch)."""
    if args.list_models or args.trial or not settings_search.per_benchmark(args):
        return False
    # A CPU run given more threads than cores writes skipped rows: nothing to search.
    return args.device == "cuda" or args.threads <= machine_cores()


def parse_args(argv: list[str], description: str):
    """The flags, checked; description: --help's text above the flags."""
    args = parser(description).parse_args(argv)
    for name in ("threads", "batch", "repetitions"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InputError(f"--{name}: {value} is not an integer >= 1")
    if args.warmup_steps is not None and args.warmup_steps < 0:
        raise InputError(f"--warmup_steps: {args.warmup_steps} is not an integer >= 0")
    if not (args.min_time >= 0 and math.isfinite(args.min_time)):
        raise InputError(f"--min_time: {args.min_time} is not a number of seconds >= 0")
    for name in ("lr", "peak_gflops"):
        value = getattr(args, name)
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise InputError(f"--{name}: {value} is not a positive number")
    if args.precisions is None:
        args.precision_list = list(PRECISIONS) if args.device == "cuda" else ["fp32"]
    else:
        args.precision_list = [p for p in args.precisions.split(",") if p]
        for p_ in args.precision_list:
            if p_ not in PRECISIONS:
                raise InputError(f"--precisions: unknown precision {p_!r}; use fp32, tf32, fp16 or bf16")
        if args.device == "cpu" and args.precision_list != ["fp32"]:
            raise InputError("--precisions: the CPU runs fp32 only, as trainbench's CPU backend")
    try:
        args.filter_re = re.compile(args.filter)
    except re.error as e:
        raise InputError(f"--filter {args.filter!r}: not a regular expression ({e})") from None
    check_settings_args(args)
    return args


def select_benchmarks(args) -> tuple[list[tuple[tuple[Workload, str], str]], list[tuple[str, str]]]:
    """The (workload, precision) pairs whose names --filter matches, at --threads, that this
    script can run; and the names it matches that it cannot, each with the reason."""
    device = device_name(args.threads, machine_cores(), args.device == "cuda")
    named = [((w, p), benchmark_name(w, device, batch_of(w, args), p,
                                     variant_of(w, batch_of(w, args), args)))
             for w in args.workloads for p in args.precision_list]
    matched = [(wp, n) for wp, n in named if args.filter_re.search(n)]
    if not matched:
        raise InputError(f"no benchmark matches --filter {args.filter!r}; with --threads "
                         f"{args.threads} they are {', '.join(n for _, n in named)}")
    chosen = [(wp, n) for wp, n in matched if skip_reason(wp[0]) is None]
    skipped = [(n, skip_reason(wp[0])) for wp, n in matched if skip_reason(wp[0]) is not None]
    return chosen, skipped


def report_skipped(skipped: list[tuple[str, str]]) -> None:
    """One line on stderr per reason, naming the benchmarks it skips."""
    names: dict[str, list[str]] = {}
    for name, reason in skipped:
        names.setdefault(reason, []).append(name)
    for reason, which in names.items():
        print(f"{PROG}: skipped {', '.join(which)}: {reason}", file=sys.stderr, flush=True)


def fail(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)

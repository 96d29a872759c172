"""The PyTorch peer's settings and their search (issue 20): how fast PyTorch trains a workload
depends on settings its users tune (intra-op threads, BLAS threads, the OpenMP wait policy, the
memory layout of images), and the best ones differ by model and machine.

Each setting of a small grid is tried in a child process of pytorch_train.py of its own
(OMP_WAIT_POLICY and OPENBLAS_NUM_THREADS are read when the libraries load, so one process
cannot try two) with a short timed trial; the fastest by wall clock is then timed properly,
again in a child, and named in its rows' peer_settings column. Standard library only: the
process that searches never loads torch."""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

LAYOUTS = ("nchw", "channels_last")
WAIT_POLICIES = ("active", "passive")  # OMP_WAIT_POLICY; "default" leaves it unset
KEYS = ("layout", "threads", "blas_threads", "omp_wait")  # the order of a setting's text
TRIAL_WARMUP_STEPS = 2  # untimed steps of a trial, at most (oneDNN and cuDNN pick their kernels)
TRIAL_PREFIX = "peer-trial: "  # the line a trial child prints its result on
TRIAL_TIMEOUT_S = 900
SETTINGS_FORMAT = 1  # of the --settings_out JSON


@dataclass(frozen=True)
class Setting:
    """How the peer runs a workload. None: the default (see resolved)."""
    layout: str | None = None        # images: nchw or channels_last; other inputs have none
    threads: int | None = None       # intra-op threads (torch.set_num_threads)
    blas_threads: int | None = None  # OPENBLAS_NUM_THREADS
    omp_wait: str | None = None      # OMP_WAIT_POLICY: active, passive, or default (unset)

    def text(self) -> str:
        """`layout:channels_last/threads:2/blas_threads:1/omp_wait:passive`, the fields set."""
        return "/".join(f"{k}:{getattr(self, k)}" for k in KEYS if getattr(self, k) is not None)


def parse(text: str, cuda: bool) -> Setting:
    """A setting's text (the fields in any order, each at most once); ValueError saying what is
    wrong. On a GPU only the layout applies."""
    fields: dict[str, object] = {}
    for part in filter(None, text.split("/")):
        key, _, value = part.partition(":")
        if key not in KEYS or key in fields:
            raise ValueError(f"{part!r}: {'repeated' if key in fields else 'unknown'} field (use "
                             f"{', '.join(k + ':...' for k in KEYS)}, joined by /)")
        if key == "layout" and value not in LAYOUTS:
            raise ValueError(f"{part!r}: the layout is {' or '.join(LAYOUTS)}")
        elif key == "omp_wait" and value not in WAIT_POLICIES + ("default",):
            raise ValueError(f"{part!r}: the wait policy is active, passive or default")
        elif key in ("threads", "blas_threads"):
            if not re.fullmatch(r"[1-9][0-9]*", value):
                raise ValueError(f"{part!r}: not a whole number >= 1")
            value = int(value)
        fields[key] = value
    if cuda and set(fields) - {"layout"}:
        raise ValueError(f"{text!r}: on a GPU only the layout is a setting")
    return Setting(**fields)


def resolved(s: Setting, images: bool, threads: int, cuda: bool) -> Setting:
    """Every field a run applies, filled in: NCHW where no layout is named (and no layout for
    inputs that are not images), --threads intra-op threads, as many BLAS threads, libgomp's
    own wait policy. On a GPU only the layout."""
    layout = (s.layout or "nchw") if images else None
    if cuda:
        return Setting(layout=layout)
    t = s.threads or threads
    return Setting(layout, t, s.blas_threads or t, s.omp_wait or "default")


def environment(s: Setting, env: dict[str, str]) -> dict[str, str]:
    """env with a resolved CPU setting's variables, to be in force before torch loads. The
    OpenMP build of OpenBLAS follows torch's thread count unless its own is 1."""
    env = dict(env)
    if s.blas_threads is not None:
        env["OPENBLAS_NUM_THREADS"] = str(s.blas_threads)
    if s.omp_wait in WAIT_POLICIES:
        env["OMP_WAIT_POLICY"] = s.omp_wait.upper()
    elif s.omp_wait == "default":
        env.pop("OMP_WAIT_POLICY", None)
    return env


def grid(images: bool, threads: int, cuda: bool) -> list[Setting]:
    """The settings tried for a workload, resolved. CPU: intra-op threads {all, 1} x BLAS
    threads {all, 1} x wait policy {active, passive} (x layout {nchw, channels_last} for
    images), BLAS threads at most the intra-op threads: the OpenMP OpenBLAS the peer loads
    runs min(OPENBLAS_NUM_THREADS, torch's threads), so more would be a duplicate under a
    false name. GPU: the layouts of images, else the one setting. First: the nearest to the
    peer's defaults, which wins ties."""
    layouts = LAYOUTS if images else (None,)
    if cuda:
        return [Setting(layout=layout) for layout in layouts]
    counts = sorted({threads, 1}, reverse=True)
    return [Setting(layout, t, b, wait) for layout in layouts for t in counts for b in counts
            if b <= t for wait in WAIT_POLICIES]


# ---- the flags -----------------------------------------------------------------------------

def add_flags(p: argparse.ArgumentParser) -> None:
    """pytorch_train.py's settings flags."""
    p.add_argument("--settings", default="search", metavar="search|SETTING|@FILE",
                   help="search (default): try the grid of settings per benchmark and time the "
                        "fastest; SETTING: time that one, e.g. layout:channels_last/threads:2/"
                        "blas_threads:1/omp_wait:passive (on a GPU: layout:nchw); @FILE: the "
                        "settings FILE (written by --settings_out) holds, searching the others")
    p.add_argument("--settings_out", metavar="FILE",
                   help="write each searched benchmark's chosen setting and trial figures (JSON)")
    p.add_argument("--search_only", action="store_true",
                   help="search and write --settings_out, time nothing")
    p.add_argument("--trial_time", type=float, default=0.5, metavar="SECONDS",
                   help="timed steps of each setting's trial, at least this long (default 0.5)")
    p.add_argument("--trial", action="store_true", help=argparse.SUPPRESS)  # a search's child


def per_benchmark(args) -> bool:
    """--settings search or @FILE: a setting per benchmark, so a child process per benchmark."""
    return args.settings == "search" or args.settings.startswith("@")


def check_flags(args) -> None:
    """The settings flags, ValueError naming the one that is wrong; sets args.setting, the one
    setting of a run in one process (empty where each benchmark gets its own)."""
    cuda = args.device == "cuda"
    args.setting = Setting()
    if per_benchmark(args):
        if args.trial:
            raise ValueError("--trial: needs one --settings SETTING")
        if args.settings.startswith("@"):
            try:
                read_choices(args.settings[1:], cuda)
            except ValueError as e:
                raise ValueError(f"--settings {args.settings}: {e}") from None
    else:
        try:
            args.setting = parse(args.settings, cuda)
        except ValueError as e:
            raise ValueError(f"--settings: {e}") from None
        if args.setting.threads and args.setting.threads > args.threads:
            raise ValueError(f"--settings: threads:{args.setting.threads} is more than --threads "
                             f"{args.threads}, the cores the run is given")
    if args.search_only and not (args.settings == "search" and args.settings_out):
        raise ValueError("--search_only: needs --settings search (the default) and --settings_out FILE")
    if not (args.trial_time > 0 and math.isfinite(args.trial_time)):
        raise ValueError(f"--trial_time: {args.trial_time} is not a number of seconds > 0")


# ---- trials and the choice -----------------------------------------------------------------

@dataclass
class TrialResult:
    setting: Setting
    samples_per_s: float | None  # batch x steps / wall time; None when the trial failed
    steps: int = 0
    seconds: float = 0.0         # wall time of the timed steps
    error: str = ""

    def line(self) -> str:
        if self.samples_per_s is None:
            return f"{self.setting.text() or '(defaults)':<58} failed: {self.error}"
        return (f"{self.setting.text() or '(defaults)':<58} {self.samples_per_s:>12.1f} samples/s "
                f"({self.steps} steps in {self.seconds:.2f} s)")

    def as_json(self) -> dict:
        return {"settings": self.setting.text(), "samples_per_s": self.samples_per_s,
                "steps": self.steps, "seconds": self.seconds, "error": self.error}


def choose(results: Iterable[TrialResult]) -> TrialResult | None:
    """The fastest trial that ran; of equal ones the first (the grid's order); None when every
    trial failed."""
    best = None
    for r in results:
        if r.samples_per_s is not None and (best is None or r.samples_per_s > best.samples_per_s):
            best = r
    return best


def search(settings: list[Setting], run_trial: Callable[[Setting], TrialResult],
           log: Callable[[str], None]) -> tuple[Setting, list[TrialResult]]:
    """Tries each setting and returns the fastest with every trial. One setting is not tried.
    Where every trial failed, the first setting: its timed run then fails its row with the
    error."""
    if len(settings) == 1:
        log(f"  {settings[0].text() or '(defaults)'}: the only setting, not searched")
        return settings[0], []
    results = []
    for s in settings:
        results.append(run_trial(s))
        log(f"  trial {results[-1].line()}")
    best = choose(results)
    if best is None:
        log(f"  every trial failed: timing {settings[0].text()}, which reports the error")
        return settings[0], results
    log(f"  chosen: {best.setting.text()} ({best.samples_per_s:.1f} samples/s in its trial)")
    return best.setting, results


def parse_trial_output(setting: Setting, returncode: int, stdout: str, stderr: str) -> TrialResult:
    """A trial child's result from its output: the line after TRIAL_PREFIX, else why not."""
    for line in stdout.splitlines():
        if line.startswith(TRIAL_PREFIX):
            try:
                r = json.loads(line[len(TRIAL_PREFIX):])
                return TrialResult(setting, float(r["samples_per_s"]), int(r["steps"]),
                                   float(r["seconds"]))
            except (ValueError, KeyError, TypeError) as e:
                return TrialResult(setting, None, error=f"unreadable result ({e}): {line[:120]}")
    said = [x.strip() for x in (stderr + stdout).splitlines() if x.strip()]
    return TrialResult(setting, None, error=f"exit status {returncode}: "
                                            f"{(said or ['no message'])[-1][:200]}")


# ---- the child processes -------------------------------------------------------------------

def common_flags(args, precision: str) -> list[str]:
    """The flags of the run that a child needs to train the same workload the same way."""
    flags = [f"--trainbench={args.trainbench}", f"--device={args.device}",
             f"--threads={args.threads}", f"--precisions={precision}", f"--seed={args.seed}",
             f"--blas={args.blas}"]
    for name in ("batch", "optimizer", "lr"):
        if getattr(args, name) is not None:
            flags.append(f"--{name}={getattr(args, name)}")
    return flags


def child_env() -> dict[str, str]:
    """This process' environment for a child that re-executes itself with its own setting."""
    return {k: v for k, v in os.environ.items() if k != "TB_PYTORCH_TRAIN_ENV"}


def trial_runner(script: Path, args, workload, precision: str, name: str):
    """A function that runs one trial of a setting in a child process."""
    warmup = min(workload.warmup_steps, TRIAL_WARMUP_STEPS)
    if args.warmup_steps is not None:
        warmup = min(args.warmup_steps, TRIAL_WARMUP_STEPS)

    def run_trial(s: Setting) -> TrialResult:
        argv = [sys.executable, str(script), *common_flags(args, precision),
                f"--filter=^{re.escape(name)}$", f"--settings={s.text()}", "--trial",
                f"--warmup_steps={warmup}", f"--min_time={args.trial_time}"]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                               env=child_env(), timeout=TRIAL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return TrialResult(s, None, error=f"no result within {TRIAL_TIMEOUT_S} s")
        except OSError as e:
            return TrialResult(s, None, error=f"cannot start it: {e}")
        return parse_trial_output(s, r.returncode, r.stdout, r.stderr)
    return run_trial


def timed_child(script: Path, args, precision: str, name: str, s: Setting) -> int:
    """Times one benchmark under its setting in a child that writes its rows; its status."""
    argv = [sys.executable, str(script), *common_flags(args, precision),
            f"--filter=^{re.escape(name)}$", f"--settings={s.text()}",
            f"--min_time={args.min_time}", f"--repetitions={args.repetitions}"]
    for name_, value in (("warmup_steps", args.warmup_steps), ("csv", args.csv),
                         ("peak_gflops", args.peak_gflops)):
        if value is not None:
            argv.append(f"--{name_}={value}")
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run(argv, env=child_env()).returncode


# ---- the settings file ---------------------------------------------------------------------

def read_choices(path: str, cuda: bool) -> dict[str, Setting]:
    """benchmark -> the setting an earlier search chose, from a --settings_out file;
    ValueError saying what is wrong with it."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"cannot read it ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != SETTINGS_FORMAT or \
            not isinstance(doc.get("benchmarks"), dict):
        raise ValueError(f"not a settings file of format {SETTINGS_FORMAT} (written by --settings_out)")
    out = {}
    for name, entry in doc["benchmarks"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("settings"), str):
            raise ValueError(f"{name}: no settings text")
        out[name] = parse(entry["settings"], cuda)
    return out


def write_choice(path: str, name: str, chosen: Setting, trials: list[TrialResult]) -> None:
    """Adds (or replaces) a benchmark's choice and its trial figures in the file, atomically."""
    p = Path(path)
    doc = {"format": SETTINGS_FORMAT, "benchmarks": {}}
    if p.exists() and p.stat().st_size > 0:
        doc = json.loads(p.read_text(encoding="utf-8"))
    doc["benchmarks"][name] = {"settings": chosen.text(), "trials": [t.as_json() for t in trials]}
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, p)


# ---- one child per benchmark ---------------------------------------------------------------

def is_images(workload) -> bool:
    return len(workload.input_shape) == 3 and not workload.seq_len


def run_each(script: Path, args, chosen, log: Callable[[str], None]) -> int:
    """--settings search or @FILE: for each benchmark its setting (searched, or the file's),
    then its timed run in a child process (none with --search_only). Exit status: 2 when a
    child refused its flags, else 1 when a row failed, else 0."""
    cuda = args.device == "cuda"
    choices = read_choices(args.settings[1:], cuda) if args.settings.startswith("@") else {}
    status = 0
    for (w, precision), name in chosen:
        if name in choices:
            s = resolved(choices[name], is_images(w), args.threads, cuda)
            log(f"{name}: {s.text() or '(defaults)'}, from {args.settings[1:]}")
        else:
            settings = grid(is_images(w), args.threads, cuda)
            log(f"{name}: searching {len(settings)} settings, a trial of {args.trial_time:g} s each")
            s, trials = search(settings, trial_runner(script, args, w, precision, name), log)
            if args.settings_out:
                write_choice(args.settings_out, name, s, trials)
        if not args.search_only:
            rc = timed_child(script, args, precision, name, s)
            status = max(status, rc if rc in (0, 1, 2) else 1)
    return status

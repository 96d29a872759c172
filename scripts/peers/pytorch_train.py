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
(and samples_per_s) is device time, CUDA events recorded around each step (from before the
batch is taken to the end of the optimizer update), summed; wall_step_time_s is the wall time
of the timed steps, host gaps between steps included. ResNet-152 at 224x224 runs at batch 128
there, as trainbench's GPU rows do.

The framework baseline of issue 7: the same layer shapes, batch sizes, optimizer, fp32 and
synthetic data of the same shape as trainbench, timed the way Google Benchmark times
trainbench (whole steps, repeated until --min_time seconds), and reported under the same
benchmark names (train/<model>/<dataset>/<device>/fp32/bs:<n>[/<variant>]) in trainbench's CSV
schema (results/SCHEMA.md, version 4), so scripts/compare.py and scripts/plot.py read both. The
variant is trainbench's for the same flags (`optimizer:sgd`, `lr:0.01`, and `data_on_device` on
a GPU), so that a row matches the trainbench row of the same flags.
scripts/compare_pytorch.sh runs the two side by side.

The trainbench binary (--trainbench, $TRAINBENCH, else build/release/bench/trainbench) is
the one source of what to train: `trainbench --list_models --json` gives each workload's
input shape, sequence length, classes, batch and GPU batch, warm-up, optimizer, parameters
and FLOPs, and `trainbench --csv_header` the CSV columns. This script only adds a PyTorch
definition of each model (BUILDERS, keyed by model name), so a model added to trainbench
is measured here once it has one; until then its benchmarks are skipped with one line on
stderr. Workloads trainbench runs on real data only are skipped too (this script generates
synthetic data). Before a row is timed, the PyTorch model's parameters and its own count of
FLOPs (on the meta device) must equal trainbench's, or the row fails naming both counts:
a definition that drifted from trainbench's gives no comparison.

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

Exit status: 0 (skipped benchmarks included), 1 when a row failed (loss not finite or not
falling, or the PyTorch model's counts differ from trainbench's), 2 for bad flags, a filter
that matches nothing, a CSV with another header, or no trainbench binary that answers
--list_models --json and --csv_header with schema 4's columns. Standard library and torch only.
"""
from __future__ import annotations

import argparse
import csv
import ctypes
import json
import math
import os
import platform
import re
import resource
import socket
import statistics
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import settings_search  # noqa: E402  (beside this file; standard library only)
from settings_search import Setting  # noqa: E402

PROG = "pytorch_train.py"
ROOT = Path(__file__).resolve().parents[2]
# The schema_version trainbench writes (bench/columns.hpp kSchemaVersion, results/SCHEMA.md),
# and the columns of version 4 this script fills: a trainbench without them is refused.
SCHEMA_VERSION = "4"
SCHEMA_4_COLUMNS = ("variant", "load_avg_1m", "measurement", "peer_settings")
DEFAULT_TRAINBENCH = ROOT / "build" / "release" / "bench" / "trainbench"

# Set in the re-executed process, so that it does not re-execute again.
REEXEC_MARKER = "TB_PYTORCH_TRAIN_ENV"

# glibc malloc: without these, every freed buffer above the (dynamic) mmap threshold goes
# back to the kernel and the next step faults it in again, page by page; trainbench's
# buffers live for the whole run, so PyTorch would pay a cost trainbench does not.
MMAP_THRESHOLD_CANDIDATES = (17179869184, 1073741824, 33554432)
MALLOC_SETTINGS = {"MALLOC_TRIM_THRESHOLD_": "17179869184", "MALLOC_TOP_PAD_": "536870912"}
# OpenBLAS settings a user's shell may carry that would make it pick slower kernels.
CRIPPLING_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


class InputError(Exception):
    """Bad flags or files: one line on stderr, exit status 2."""


# ---- the workloads: trainbench --list_models --json ----------------------------------------

# The models BUILDERS defines in PyTorch (below: it needs torch, which loads after the
# re-exec); the benchmarks of any other model are skipped with a note. Named here so that a
# run that matches only those answers before torch loads.
PYTORCH_MODELS = ("mlp", "lenet5", "lstm", "resnet152")
JSON_FORMAT = 1  # the "format" of trainbench --list_models --json that this script reads
# datasets/sine.hpp: the wave the LSTM learns (its window, seq_len, comes from the JSON).
SINE_PERIOD = 25.0
SINE_TRAIN_LENGTH = 20000


@dataclass(frozen=True)
class Optimizer:
    """A workload's optimizer, as trainbench's OptimizerConfig; the names are the JSON's."""
    kind: str                # sgd (with momentum) or adam
    lr: float                # at lr_reference_batch when that is > 0, else at any batch
    momentum: float          # sgd's
    weight_decay: float      # L2 added to the gradient in both kinds (torch's weight_decay)
    beta1: float             # adam's
    beta2: float
    eps: float
    lr_reference_batch: int  # > 0: trainbench scales lr linearly with the batch


@dataclass(frozen=True)
class Workload:
    """One workload of trainbench --list_models --json; the names are the JSON's."""
    model: str
    dataset: str
    task: str                 # classification or regression
    classes: int              # 0 for regression
    input_shape: tuple        # one sample's (a sequence model's: one time step's)
    seq_len: int              # > 0: a sequence model, input (seq_len, N, *input_shape)
    batch: int
    gpu_batch: int            # the GPU rows' batch (equal to batch where there is no other)
    warmup_steps: int         # LeNet-5's sigmoids need ~100 steps to start learning
    real_data_only: bool      # trainbench has no synthetic data for it
    optimizer: Optimizer
    params: int
    forward_flops_per_sample: float
    train_flops_per_sample: float


JSON_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def json_fields(obj, where: str, **kinds) -> dict:
    """The named members of a JSON object, each checked to be of its kind (int, float, str,
    bool); members not named are ignored, so that trainbench can add some."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is {json.dumps(obj)[:40]}, not an object")
    out = {}
    for key, kind in kinds.items():
        if key not in obj:
            raise ValueError(f"{where} has no {key!r}")
        v = obj[key]
        if kind is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        else:
            ok = isinstance(v, kind) and (kind is bool or not isinstance(v, bool))
        if not ok:
            raise ValueError(f"{where}: {key} is {json.dumps(v)[:40]}, not {JSON_KINDS[kind]}")
        out[key] = float(v) if kind is float else v
    return out


def workload_from_json(entry, index: int) -> Workload:
    names = json_fields(entry, f"workloads[{index}]", model=str, dataset=str)
    where = f"workload {names['model']}/{names['dataset']}"
    f = json_fields(entry, where, model=str, dataset=str, task=str, classes=int, seq_len=int,
                    batch=int, gpu_batch=int, warmup_steps=int, real_data_only=bool, params=int,
                    forward_flops_per_sample=float, train_flops_per_sample=float)
    shape = entry.get("input_shape")
    if not (isinstance(shape, list) and shape and
            all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
        raise ValueError(f"{where}: input_shape is {json.dumps(shape)[:40]}, not a list of "
                         f"positive integers")
    o = json_fields(entry.get("optimizer"), f"{where} optimizer", kind=str, lr=float,
                    momentum=float, weight_decay=float, beta1=float, beta2=float, eps=float,
                    lr_reference_batch=int)
    if f["task"] not in ("classification", "regression"):
        raise ValueError(f"{where}: task {f['task']!r} is not classification or regression")
    if o["kind"] not in ("sgd", "adam"):
        raise ValueError(f"{where}: optimizer kind {o['kind']!r} is not sgd or adam")
    if f["batch"] < 1 or f["gpu_batch"] < 1 or f["seq_len"] < 0 or f["warmup_steps"] < 0:
        raise ValueError(f"{where}: batch {f['batch']}, gpu_batch {f['gpu_batch']}, seq_len "
                         f"{f['seq_len']}, warmup_steps {f['warmup_steps']}: one is out of range")
    return Workload(**f, input_shape=tuple(shape), optimizer=Optimizer(**o))


def how_to_get_trainbench(verb: str) -> str:
    return (f"{verb} it with `cmake --build build/release` (or scripts/bench.sh, which also runs "
            f"it), or give another with --trainbench PATH or $TRAINBENCH")


def ask_trainbench(binary: Path, *flags: str) -> str:
    """What `binary flags` prints; an InputError naming the binary and the fix when it cannot
    answer."""
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise InputError(f"{binary}: no trainbench binary there (this script reads its workloads "
                         f"and CSV columns from it): {how_to_get_trainbench('build')}")
    command = " ".join([str(binary), *flags])
    try:
        r = subprocess.run([str(binary), *flags], capture_output=True, text=True,
                           errors="replace", timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise InputError(f"{command}: cannot run it ({e}): {how_to_get_trainbench('rebuild')}") from None
    if r.returncode != 0:
        said = ([line for line in r.stderr.splitlines() if line.strip()] or ["no message"])[-1]
        raise InputError(f"{command} exited with status {r.returncode} ({said.strip()[:200]}), as "
                         f"a trainbench older than that flag does: {how_to_get_trainbench('rebuild')}")
    return r.stdout


def read_workloads(binary: Path) -> list[Workload]:
    """trainbench --list_models --json: every workload trainbench defines, in its order."""
    out = ask_trainbench(binary, "--list_models", "--json")
    command = f"{binary} --list_models --json"
    if not out.lstrip().startswith("{"):
        first = (out.strip().splitlines() or [""])[0]
        raise InputError(f"{command} printed no JSON (its first line: {first[:60]!r}): a trainbench "
                         f"older than --json; {how_to_get_trainbench('rebuild')}")
    try:
        doc = json.loads(out)
        fmt = json_fields(doc, "the JSON", format=int)["format"]
        if fmt != JSON_FORMAT:
            raise ValueError(f"format {fmt}, and this script reads format {JSON_FORMAT}")
        entries = doc.get("workloads")
        if not isinstance(entries, list) or not entries:
            raise ValueError("no list of workloads")
        return [workload_from_json(entry, i) for i, entry in enumerate(entries)]
    except ValueError as e:  # json.JSONDecodeError is one
        raise InputError(f"{command}: not the workload list this script reads ({e}); "
                         f"{how_to_get_trainbench('rebuild')}, or update {PROG}") from None


def read_csv_header(binary: Path) -> list[str]:
    """trainbench --csv_header: the columns trainbench writes, in its order."""
    out = ask_trainbench(binary, "--csv_header")
    line = (out.strip().splitlines() or [""])[0]
    if not line.startswith("schema_version,"):
        raise InputError(f"{binary} --csv_header printed {line[:60]!r}, not trainbench's CSV header "
                         f"(schema_version,...): {how_to_get_trainbench('rebuild')}")
    columns = line.split(",")
    missing = [c for c in SCHEMA_4_COLUMNS if c not in columns]
    if missing:
        raise InputError(f"{binary} --csv_header has no {', '.join(missing)} column(s): a trainbench "
                         f"older than schema {SCHEMA_VERSION}, which this script writes; "
                         f"{how_to_get_trainbench('rebuild')}")
    return columns


def machine_cores() -> int:
    """Processors this process may run on: what trainbench's `cpu` device uses (OpenMP's
    omp_get_num_procs honours the affinity mask too)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def device_name(threads: int, cores: int, gpu: bool = False) -> str:
    if gpu:
        return "gpu:1"
    return "cpu" if threads == cores else f"cpu:{threads}"


def batch_of(w: Workload, args) -> int:
    """trainbench's rule: --batch, else the GPU batch on a GPU, else the workload's batch."""
    return args.batch or (w.gpu_batch if args.device == "cuda" else w.batch)


def optimizer_of(w: Workload, batch: int, args) -> Optimizer:
    """What trainbench trains the workload with at this batch under the same --optimizer and
    --lr (bench/registry.cpp): the workload's own, its lr scaled with the batch where it has a
    reference batch; --optimizer changes the kind and resets lr to sgd 0.01, adam 0.001;
    --lr sets lr. Momentum, weight decay, betas and eps stay the workload's."""
    o = w.optimizer
    lr = o.lr * batch / o.lr_reference_batch if o.lr_reference_batch > 0 else o.lr
    kind = o.kind
    if args.optimizer:
        kind = args.optimizer
        lr = 1e-3 if kind == "adam" else 0.01
    if args.lr is not None:
        lr = args.lr
    return replace(o, kind=kind, lr=lr)


def variant_of(w: Workload, batch: int, args) -> str:
    """trainbench's variant (bench/configs.cpp variant_of) for the flags this script shares
    with it: the optimizer and learning rate where they differ from the workload's own, and on a
    GPU data_on_device (this script's data is always resident there). The peer's own settings
    are not part of it: they are in peer_settings."""
    own = optimizer_of(w, batch, SimpleNamespace(optimizer=None, lr=None))
    used = optimizer_of(w, batch, args)
    parts = []
    if used.kind != own.kind:
        parts.append(f"optimizer:{used.kind}")
    if used.lr != own.lr:
        parts.append(f"lr:{used.lr:g}")
    if args.device == "cuda":
        parts.append("data_on_device")
    return "/".join(parts)


def benchmark_name(w: Workload, device: str, batch: int, precision: str = "fp32",
                   variant: str = "") -> str:
    name = f"train/{w.model}/{w.dataset}/{device}/{precision}/bs:{batch}"
    return f"{name}/{variant}" if variant else name


# ---- the CSV schema ------------------------------------------------------------------------

def check_csv_file(path: str, columns: list[str]) -> bool:
    """Refuses a file whose header is not ours, as trainbench does; True when the header
    must be written (a new or empty file)."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return True
    if p.is_dir():
        raise InputError(f"--csv {path}: is a directory")
    with open(p, newline="", encoding="utf-8", errors="replace") as f:
        first = f.readline().rstrip("\r\n")
    if first != ",".join(columns):
        fields = next(csv.reader([first]), [])
        ours = bool(fields) and fields[0] == "schema_version"
        what = "another trainbench schema" if ours else "a header that is not trainbench's"
        raise InputError(f"--csv {path}: the file exists with {what} ({len(fields)} columns); "
                         f"this trainbench schema has {len(columns)} columns. Nothing was "
                         f"written: give a new file name, or move the old file away.")
    return False


class CsvWriter:
    """Appends rows by column name and flushes each, so an interrupted run keeps them."""

    def __init__(self, path: str, columns: list[str], write_header: bool):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.columns = columns
        self.file = open(path, "a", newline="", encoding="utf-8")
        self.writer = csv.writer(self.file, lineterminator="\n")
        if write_header:
            self.file.write(",".join(columns) + "\n")
            self.file.flush()

    def write(self, row: dict[str, str]) -> None:
        self.writer.writerow([row.get(c, "") for c in self.columns])
        self.file.flush()


def number(v: float) -> str:
    """trainbench's {:.6g}."""
    return f"{v:.6g}"


# ---- the environment -----------------------------------------------------------------------

def accepted_mmap_threshold(env: dict[str, str]) -> str:
    """The largest candidate glibc takes for MALLOC_MMAP_THRESHOLD_.

    glibc drops a value it finds too large without a word, so ask a child process: with the
    setting in force a 48 MiB malloc comes from the heap (mallinfo2's mmapped block count
    stays put); with the setting dropped, it is mmapped."""
    probe = ("import ctypes\n"
             "class M(ctypes.Structure):\n"
             "    _fields_ = [(n, ctypes.c_size_t) for n in 'a b c hblks d e f g h i'.split()]\n"
             "libc = ctypes.CDLL(None)\n"
             "libc.mallinfo2.restype = M\n"
             "libc.malloc.restype = ctypes.c_void_p\n"
             "libc.malloc.argtypes = [ctypes.c_size_t]\n"
             "before = libc.mallinfo2().hblks\n"
             "libc.malloc(48 << 20)\n"
             "print('heap' if libc.mallinfo2().hblks == before else 'mmap')\n")
    for value in MMAP_THRESHOLD_CANDIDATES:
        trial = dict(env, MALLOC_MMAP_THRESHOLD_=str(value))
        try:
            r = subprocess.run([sys.executable, "-c", probe], env=trial, capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            break
        if r.returncode != 0:
            break  # no mallinfo2 (glibc < 2.33): keep the last candidate, it is accepted there
        if r.stdout.strip() == "heap" or value <= 48 << 20:
            return str(value)
    return str(MMAP_THRESHOLD_CANDIDATES[-1])


def openblas_openmp_dir() -> Path | None:
    """Debian's OpenMP build of OpenBLAS (package libopenblas0-openmp), if installed."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    folder = Path("/usr/lib") / multiarch / "openblas-openmp"
    return folder if (folder / "libblas.so.3").exists() else None


def tuned_environment(args) -> dict[str, str]:
    env = dict(os.environ)
    for name in CRIPPLING_VARIABLES:
        env.pop(name, None)
    if "MALLOC_MMAP_THRESHOLD_" not in env:
        env["MALLOC_MMAP_THRESHOLD_"] = accepted_mmap_threshold(env)
    for name, value in MALLOC_SETTINGS.items():
        env.setdefault(name, value)
    # The OpenMP build shares torch's libgomp pool and follows torch.set_num_threads; the
    # pthreads build would start a second pool of spinning threads on the same cores.
    blas_dir = None
    if args.blas == "auto":
        blas_dir = openblas_openmp_dir()
    elif args.blas != "system":
        blas_dir = Path(args.blas)
        if not (blas_dir / "libblas.so.3").exists():
            raise InputError(f"--blas {args.blas}: no libblas.so.3 in that folder")
    if blas_dir is not None:
        paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
        env["LD_LIBRARY_PATH"] = ":".join([str(blas_dir)] + [p for p in paths if p != str(blas_dir)])
    # A BLAS with its own threads (OpenBLAS pthreads, BLIS) would otherwise use every core
    # whatever --threads says; on the CPU the setting names the BLAS threads and wait policy.
    if args.device == "cuda":
        env.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    else:
        env = settings_search.environment(cpu_setting(args), env)
    env[REEXEC_MARKER] = "1"
    return env


def cpu_setting(args) -> Setting:
    """The threads, BLAS threads and wait policy this process runs every benchmark with."""
    return settings_search.resolved(args.setting, False, args.threads, False)


def reexec_with_tuned_environment(args) -> None:
    """Replaces this process by itself under the tuned environment, once: glibc reads its
    malloc settings, and the dynamic loader LD_LIBRARY_PATH, only when a process starts."""
    if os.environ.get(REEXEC_MARKER) == "1":
        return
    env = tuned_environment(args)
    sys.stdout.flush()
    sys.stderr.flush()
    script = str(Path(__file__).resolve())
    os.execve(sys.executable, [sys.executable, script, *sys.argv[1:]], env)


# ---- flags ---------------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: status 2, one line
        raise InputError(message)


def parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[1])
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


def parse_args(argv: list[str]):
    args = parser().parse_args(argv)
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


def skip_reason(w: Workload) -> str | None:
    """Why this script cannot train a workload of trainbench's, or None."""
    if w.model not in PYTORCH_MODELS:
        return (f"{PROG} has no PyTorch definition of model '{w.model}' (add one to its BUILDERS "
                f"to compare with it)")
    if w.real_data_only:
        return (f"trainbench runs {w.model}/{w.dataset} on real data only, and {PROG} trains on "
                f"synthetic data")
    return None


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


# Flags, trainbench's workloads and CSV header, and the environment are settled before torch
# loads: a typo, a missing binary or a refused CSV answers at once, and the re-exec must
# happen before glibc and the loader set up. (The re-executed process asks trainbench again.)
if __name__ == "__main__":
    try:
        ARGS = parse_args(sys.argv[1:])
        ARGS.workloads = read_workloads(Path(ARGS.trainbench))
        if not ARGS.list_models:
            ARGS.chosen, ARGS.skipped = select_benchmarks(ARGS)
            ARGS.columns = read_csv_header(Path(ARGS.trainbench))
            ARGS.write_header = check_csv_file(ARGS.csv, ARGS.columns) if ARGS.csv else False
            if not ARGS.chosen:  # the filter matched only what this script cannot run
                report_skipped(ARGS.skipped)
                sys.exit(0)
            if per_benchmark_processes(ARGS):
                report_skipped(ARGS.skipped)
                sys.exit(settings_search.run_each(Path(__file__).resolve(), ARGS, ARGS.chosen,
                                                  lambda line: print(line, flush=True)))
        reexec_with_tuned_environment(ARGS)
    except InputError as e:
        fail(str(e))
    except KeyboardInterrupt:
        sys.exit(130)

import torch  # noqa: E402  (after the re-exec above, on purpose)
from torch import nn  # noqa: E402


# ---- the models ----------------------------------------------------------------------------

def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(784, 1000), nn.ReLU(), nn.Linear(1000, 1000), nn.ReLU(),
                         nn.Linear(1000, 10))


def lenet5() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 6, 5), nn.Sigmoid(), nn.MaxPool2d(2),      # 6x28x28 -> 6x14x14
        nn.Conv2d(6, 16, 5), nn.Sigmoid(), nn.MaxPool2d(2),     # 16x10x10 -> 16x5x5
        nn.Conv2d(16, 120, 4), nn.Sigmoid(), nn.Flatten(),      # 120x2x2 = 480
        nn.Linear(480, 84), nn.Sigmoid(), nn.Linear(84, 10))


class SineLSTM(nn.Module):
    """Linear 1->5, LSTM(5, 5) over time-major (T, N, 5), linear 5->1 at every step."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1, 5)
        self.lstm = nn.LSTM(5, 5)
        self.fc2 = nn.Linear(5, 1)
        # PyTorch's LSTM adds two bias vectors per gate where trainbench (and the textbook
        # cell) has one; their sum is the same function. Holding the second at zero, out of
        # training, gives the same parameters as trainbench (236) at the cost of one add.
        with torch.no_grad():
            self.lstm.bias_hh_l0.zero_()
        self.lstm.bias_hh_l0.requires_grad_(False)

    def forward(self, x):
        out, _ = self.lstm(self.fc1(x))  # zero initial state, as trainbench
        return self.fc2(out)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 carrying the stride, 1x1 expand x4."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        nn.init.zeros_(self.bn3.weight)  # the residual branch starts as zero (gamma = 0)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        y += x if self.shortcut is None else self.shortcut(x)
        return self.relu(y)


def resnet152(classes: int) -> nn.Module:
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, blocks in enumerate((3, 8, 36, 3)):
        width = 64 << stage
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, 2 if stage > 0 and b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):  # He initialisation for ReLU networks, as torchvision
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


# A PyTorch definition of each of trainbench's models that this script can train, by model
# name; it gets the workload (for its classes). A new model of trainbench's is measured here
# once it has an entry (and its name is in PYTORCH_MODELS, which is read before torch loads).
BUILDERS = {
    "mlp": lambda w: mlp(),
    "lenet5": lambda w: lenet5(),
    "lstm": lambda w: SineLSTM(),
    "resnet152": lambda w: resnet152(w.classes),
}
assert tuple(BUILDERS) == PYTORCH_MODELS, "BUILDERS and PYTORCH_MODELS name the same models"


def build_model(w: Workload) -> nn.Module:
    return BUILDERS[w.model](w)


def example_input(w: Workload, batch: int) -> torch.Tensor:
    """A batch of the workload's input: (N, *input_shape), or time-major (T, N, *input_shape)."""
    if w.seq_len:
        return torch.zeros(w.seq_len, batch, *w.input_shape)
    return torch.zeros(batch, *w.input_shape)


# ---- parameters and FLOPs (results/SCHEMA.md) ----------------------------------------------

def parameter_count(model: nn.Module) -> int:
    """Trained parameters: BatchNorm's gamma and beta count, its running statistics are
    buffers and do not (as trainbench)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_model(w: Workload) -> tuple[int, int, int]:
    """Parameters, forward multiply-accumulates per sample of the workload's model, and of
    those the products with the model's input (engine/core/spec.cpp model_cost).

    MACs of the Linear, Conv2d and LSTM layers come from the shapes that a forward pass of
    one sample gives each layer (pooling, batch norm, activations, adds and the loss are not
    counted, as in trainbench). The pass runs on a copy of the model on the meta device:
    shapes without arithmetic, so counting ResNet-152 at 224x224 costs no compute."""
    with torch.random.fork_rng():  # building the copy must not move the training seed
        model = build_model(w).to("meta")
    example = example_input(w, 1).to("meta")
    macs, input_macs = [], []

    def hook(module, inputs, output):
        fed_by_input = inputs[0] is example
        if isinstance(module, nn.Linear):
            rows = output.numel() // module.out_features  # 1, or T for a sequence
            macs.append(rows * module.in_features * module.out_features)
        elif isinstance(module, nn.Conv2d):
            cout, h, wd = output.shape[1:]
            kh, kw = module.kernel_size
            macs.append(cout * h * wd * (module.in_channels // module.groups) * kh * kw)
        elif isinstance(module, nn.LSTM):
            steps = output[0].shape[0]
            i, h = module.input_size, module.hidden_size
            macs.append(module.num_layers * steps * 4 * h * (i + h))
            if fed_by_input:  # only the input-to-gate products take the model's input
                input_macs.append(steps * 4 * h * i)
            return
        if fed_by_input:
            input_macs.append(macs[-1])

    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.LSTM)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        try:
            model.eval()(example)
        except RuntimeError as e:  # e.g. a layer that no longer fits trainbench's input shape
            raise CheckFailed(f"{w.model}: the PyTorch definition does not take trainbench's input "
                              f"{list(w.input_shape)} ({e})") from None
    return parameter_count(model), sum(macs), sum(input_macs)


def train_flops_per_sample(macs: int, input_macs: int) -> int:
    """Forward, weight gradients and input gradients of every layer but those fed by the
    model's input (nothing upstream needs theirs): 2 x (3 x MACs - input layers' MACs)."""
    return 2 * (3 * macs - input_macs)


def count_mismatch(w: Workload, params: int, macs: int, input_macs: int) -> str | None:
    """What differs between the PyTorch model's counts and trainbench's JSON, or None. FLOPs
    are compared to one part in 10^9: the JSON carries them as floating-point numbers, and any
    layer that drifted changes them far more."""
    drift = []
    if params != w.params:
        drift.append(f"{params} parameters in PyTorch, {w.params} in trainbench")
    if not math.isclose(2 * macs, w.forward_flops_per_sample, rel_tol=1e-9):
        drift.append(f"{2 * macs} forward FLOPs per sample in PyTorch, "
                     f"{w.forward_flops_per_sample:.17g} in trainbench")
    train = train_flops_per_sample(macs, input_macs)
    if not math.isclose(train, w.train_flops_per_sample, rel_tol=1e-9):
        drift.append(f"{train} training FLOPs per sample in PyTorch, "
                     f"{w.train_flops_per_sample:.17g} in trainbench")
    if not drift:
        return None
    return (f"{w.model}/{w.dataset}: {'; '.join(drift)}: {PROG}'s definition of {w.model} no longer "
            f"matches trainbench's (fix its builder in BUILDERS)")


def list_models(args) -> int:
    """trainbench --list_models' table, from the torch models of trainbench's workloads; 1
    when a model's counts differ from trainbench's (said on stderr)."""
    print(f"{'model':<10} {'dataset':<9} {'batch':>6} {'params':>12} {'fwd GFLOP/sample':>16} "
          f"{'train GFLOP/step':>16}")
    status = 0
    for w in args.workloads:
        if w.model not in BUILDERS:
            print(f"{PROG}: {w.model}/{w.dataset} not listed: {skip_reason(w)}", file=sys.stderr)
            continue
        try:
            params, macs, input_macs = count_model(w)
        except CheckFailed as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            status = 1
            continue
        b = args.batch or w.batch
        print(f"{w.model:<10} {w.dataset:<9} {b:>6} {params:>12} "
              f"{2 * macs * 1e-9:>16.6g} {train_flops_per_sample(macs, input_macs) * b * 1e-9:>16.6g}")
        mismatch = count_mismatch(w, params, macs, input_macs)
        if mismatch:
            print(f"{PROG}: {mismatch}", file=sys.stderr)
            status = 1
    return status


# ---- synthetic data (datasets/sources.cpp, datasets/sine.cpp) ------------------------------

def synthetic_pool(w: Workload, batch: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Whole batches of class-dependent images, normalised, made before timing starts.

    As trainbench: each class has a fixed random pattern (128 + N(0, 48^2) per pixel) and a
    sample is its class's pattern plus N(0, 48^2) noise, clipped to bytes; 8192 samples (256
    at 224x224), at least two batches; each channel normalised with the set's mean and
    standard deviation. The patterns come from their own generator per class, so the 1000
    ImageNet classes never need to be held at once."""
    features = math.prod(w.input_shape)
    count = max(8192 if features <= 4096 else 256, 2 * batch)
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, w.classes, (count,), generator=gen)
    images = torch.empty(count, features)
    for c in labels.unique().tolist():
        where = (labels == c).nonzero().flatten()
        pattern = 128 + 48 * torch.randn(features, generator=torch.Generator().manual_seed(12345 + c))
        images[where] = pattern + 48 * torch.randn(len(where), features, generator=gen)
    images.clamp_(0, 255).floor_()  # the byte a uint8 pixel holds
    images = images.view(count, *w.input_shape)
    channels = w.input_shape[0] if len(w.input_shape) == 3 else 1
    per_channel = images.view(count, channels, -1).transpose(0, 1).reshape(channels, -1)
    mean, std = per_channel.mean(dim=1), per_channel.std(dim=1)
    view = (1, channels, 1, 1) if len(w.input_shape) == 3 else (1, 1)
    images = (images - mean.view(view)) / std.view(view)
    steps = count // batch  # the samples past the last whole batch are dropped, as trainbench
    return [(images[s * batch:(s + 1) * batch].contiguous(), labels[s * batch:(s + 1) * batch].clone())
            for s in range(steps)]


def sine_pool(seq_len: int, batch: int, seed: int, steps: int = 64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Windows of sin(2 pi t / 25) at random phases over t in [0, 20000): input (T, N, 1),
    target the wave one step later."""
    gen = torch.Generator().manual_seed(seed)
    pool = []
    t = torch.arange(seq_len, dtype=torch.float64).view(seq_len, 1)
    for _ in range(steps):
        start = torch.randint(0, SINE_TRAIN_LENGTH - seq_len - 1, (1, batch), generator=gen)
        x = (start + t) * (2 * math.pi / SINE_PERIOD)
        step = 2 * math.pi / SINE_PERIOD
        pool.append((torch.sin(x).float().unsqueeze(2).contiguous(),
                     torch.sin(x + step).float().unsqueeze(2).contiguous()))
    return pool


# ---- training and timing -------------------------------------------------------------------

class CheckFailed(Exception):
    """A row that ran but must not count: loss not finite, or not falling."""


@dataclass
class Trial:
    steps: int
    wall: float                  # wall time of the steps, host gaps between them included
    cpu: float                   # this process' CPU time over them
    device: float | None = None  # GPU: the steps' device time, CUDA events around each step

    @property
    def time(self) -> float:
        """The clock of step_time_s and samples_per_s: the device's on a GPU, as trainbench's
        (Google Benchmark's manual time), else the wall's."""
        return self.wall if self.device is None else self.device


@dataclass
class Session:
    """One benchmark's model, optimiser and data, kept across its repetitions (warm-up once),
    as trainbench keeps its training session across Google Benchmark's runs. On a GPU the
    steps run under autocast in fp16 and bf16, fp16's with a GradScaler."""
    model: nn.Module
    loss_fn: nn.Module
    optimizer: torch.optim.Optimizer
    pool: list
    position: int = 0
    loss_first: float | None = None
    last_loss: torch.Tensor | None = field(default=None, repr=False)
    autocast: torch.dtype | None = None
    scaler: object | None = None
    cuda: bool = False

    def _loss(self, x, y):
        if self.autocast is None:
            return self.loss_fn(self.model(x), y)
        with torch.autocast("cuda", dtype=self.autocast):
            return self.loss_fn(self.model(x), y)

    def steps(self, n: int, events: list | None = None) -> None:
        """n training steps, with a pair of CUDA events recorded around each where given; the
        benchmark's very first one also records loss_first, the loss of the first batch before
        any update (the check's reference)."""
        if n > 0 and self.loss_first is None:
            self._run(1, events)
            self.loss_first = float(self.last_loss)
            n -= 1
            events = events[1:] if events else events
        if n > 0:
            self._run(n, events)

    def _run(self, n: int, events: list | None) -> None:
        # The loop holds nothing but PyTorch's own work: batches come from the pool, the
        # loss stays a tensor until the run ends. A step's events span what trainbench's
        # device time spans: taking the batch to the end of the update.
        model, loss_fn, opt, pool = self.model, self.loss_fn, self.optimizer, self.pool
        position, size = self.position, len(pool)
        loss = None
        scaler = self.scaler
        for i in range(n):
            if events is not None:
                events[i][0].record()
            x, y = pool[position]
            position = position + 1 if position + 1 < size else 0
            opt.zero_grad(set_to_none=True)
            if self.autocast is None:
                loss = loss_fn(model(x), y)
            else:
                loss = self._loss(x, y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            if events is not None:
                events[i][1].record()
        self.position = position
        self.last_loss = loss

    def check(self) -> float:
        """The last loss, after checking it is finite and that training lowered the loss of
        the first batch (a training-mode forward on it now, outside the timing)."""
        last = float(self.last_loss)
        if not math.isfinite(last):
            raise CheckFailed(f"loss is not finite: {last}")
        x, y = self.pool[0]
        with torch.no_grad():
            after = float(self._loss(x, y))
        if not after < self.loss_first:
            raise CheckFailed(f"loss did not fall: {self.loss_first:.5g} on the first batch "
                              f"before training, {after:.5g} after (a model still on its initial "
                              f"plateau needs more steps: raise --warmup_steps)")
        return last


def make_session(w: Workload, batch: int, optimizer: Optimizer, args, precision: str = "fp32",
                 layout: str | None = None) -> Session:
    """The model, optimizer and data of a benchmark; images and the model in the layout named
    (nchw when None, channels_last), on the CPU or the GPU."""
    if w.dataset == "sine":
        pool, loss_fn = sine_pool(w.seq_len, batch, args.seed), nn.MSELoss()
    elif w.task == "classification" and not w.seq_len:
        pool, loss_fn = synthetic_pool(w, batch, args.seed), nn.CrossEntropyLoss()
    else:
        raise CheckFailed(f"{PROG} has no synthetic data for {w.model}/{w.dataset} ({w.task}"
                          f"{', sequences' if w.seq_len else ''}): add a generator to make_session")
    torch.manual_seed(args.seed)
    model = build_model(w)
    model.train()
    cuda = args.device == "cuda"
    memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        model = model.cuda()
    if layout == "channels_last":  # the 4-d weights and the images; nothing else changes
        model = model.to(memory_format=memory_format)
        pool = [(x.contiguous(memory_format=memory_format), y) for x, y in pool]
    params = [p for p in model.parameters() if p.requires_grad]
    # The same update as trainbench's (engine/optim/optimizer.cpp): weight decay added to the
    # gradient, SGD's momentum without dampening, Adam's bias-corrected moments.
    o = optimizer
    if o.kind == "adam":
        opt = torch.optim.Adam(params, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                               weight_decay=o.weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    if not cuda:
        return Session(model, loss_fn, opt, pool)
    # The data resident on the GPU (as trainbench --data_on_device), in the layout chosen.
    pool = [(x.cuda().contiguous(memory_format=memory_format) if x.dim() == 4 else x.cuda(), y.cuda())
            for x, y in pool]
    autocast = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    return Session(model, loss_fn, opt, pool, autocast=autocast, scaler=scaler, cuda=True)


def timed(session: Session, n: int) -> Trial:
    """n steps: their wall time (on a GPU until the device has finished them) and on a GPU
    also their device time, the sum of each step's CUDA events, as trainbench measures its
    own (bench/harness.cpp run_train): the host's gaps between steps count in the wall time
    only. The events are made before the clock starts."""
    if not session.cuda:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        session.steps(n)
        return Trial(n, time.perf_counter() - wall0, time.process_time() - cpu0)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
    torch.cuda.synchronize()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    session.steps(n, events)
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    device = sum(start.elapsed_time(end) for start, end in events) * 1e-3
    return Trial(n, wall, cpu, device)


def next_step_count(trial: Trial, min_time: float) -> int:
    """Google Benchmark's rule: grow the count towards 1.4 x min_time, by at most 10x after
    a run too short to predict from, and always by at least one step."""
    multiplier = min_time * 1.4 / max(trial.time, 1e-9)
    if trial.time / min_time <= 0.1:
        multiplier = min(10.0, multiplier)
    if multiplier <= 1.0:
        multiplier = 2.0
    return max(round(multiplier * trial.steps), trial.steps + 1)


def run_repetition(session: Session, steps: int, min_time: float) -> Trial:
    """Whole steps until they take at least min_time; the last run counts, as in Google
    Benchmark (its earlier, shorter runs only size it)."""
    while True:
        trial = timed(session, steps)
        if trial.time >= min_time or steps >= 1_000_000_000:
            return trial
        steps = next_step_count(trial, min_time)


# ---- rows ----------------------------------------------------------------------------------

def onednn_version() -> str:
    """oneDNN's version as torch reports its build ("Intel(R) MKL-DNN v2.6.3"): 2.6.3."""
    m = re.search(r"(?:oneDNN|MKL-DNN)\s+v?(\d+(?:\.\d+)*)", torch.__config__.show())
    return m.group(1) if m else ("available" if torch.backends.mkldnn.is_available() else "none")


def git_commit() -> str:
    """The repository's commit as trainbench records its own (-dirty with local changes);
    read-only git commands, no lock taken."""
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=30)
        if commit.returncode != 0 or not commit.stdout.strip():
            return "unknown"
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(ROOT), "status",
                                "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30)
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine_context() -> dict[str, str]:
    u = os.uname()
    return {"host": socket.gethostname(), "os": f"{u.sysname} {u.release} {u.machine}",
            "cpu_model": cpu_model(), "cores": str(machine_cores()),
            "compiler": f"python {platform.python_version()} / torch {torch.__version__}",
            "onednn": onednn_version(), "benchmark_lib": PROG, "git_commit": git_commit(),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def iteration_values(trial: Trial, batch: int, flops: int, peak: float | None,
                     loss_first: float, loss_last: float) -> dict[str, float]:
    """A repetition's measurements (results/SCHEMA.md): step_time_s and samples_per_s on the
    device's clock on a GPU, wall_step_time_s on the wall's (the same on the CPU)."""
    samples_per_s = batch * trial.steps / trial.time
    tflops = flops * samples_per_s * 1e-12
    values = {"iterations": trial.steps, "step_time_s": trial.time / trial.steps,
              "wall_step_time_s": trial.wall / trial.steps, "samples_per_s": samples_per_s, "model_tflops": tflops,
              "host_cpu_s_per_step": trial.cpu / trial.steps,
              "host_cpu_util": trial.cpu / trial.wall, "peak_rss_bytes": peak_rss_bytes(),
              "loss_first": loss_first, "loss_last": loss_last}
    if peak:
        values["peak_gflops"] = peak
        values["utilisation"] = tflops * 1e3 / peak
    return values


def formatted(values: dict[str, float]) -> dict[str, str]:
    out = {}
    for k, v in values.items():
        out[k] = str(int(v)) if k in ("iterations", "peak_rss_bytes", "mem_peak_bytes", "mem_reserved_bytes") else number(v)
    return out


# ---- the environment report ----------------------------------------------------------------

class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def loaded_blas() -> str | None:
    """The file whose sgemm_ torch calls.

    Several BLAS builds can be mapped at once (libblas.so.3 from one, liblapack.so.3 from
    another), so the answer is the symbol as torch's library resolves it: dlsym through
    libtorch_cpu's handle searches its dependencies in load order, and dladdr names the
    file that holds the address."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = {line.split()[-1] for line in f if len(line.split()) >= 6}
        torch_cpu = next((p for p in paths if re.search(r"/libtorch_cpu\.so[^/]*$", p)), None)
        if torch_cpu is None:
            return None
        address = ctypes.cast(ctypes.CDLL(torch_cpu).sgemm_, ctypes.c_void_p).value
        libc = ctypes.CDLL(None)
        libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        if address and libc.dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode())
    except (OSError, AttributeError, ValueError):
        pass  # no sgemm_ reachable (a BLAS linked in statically): torch's config says below
    return None


def describe_blas() -> str:
    try:
        from threadpoolctl import threadpool_info  # optional; richer when present
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                return (f"{info.get('internal_api')} {info.get('version')} ({info.get('filepath')}, "
                        f"threading {info.get('threading_layer')}, core {info.get('architecture')})")
    except Exception:  # noqa: BLE001  (threadpoolctl absent or unable: fall back below)
        pass
    path = loaded_blas()
    if path is None:
        m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
        return f"BLAS_INFO={m.group(1) if m else '?'} (no sgemm_ found through libtorch_cpu)"
    try:
        lib = ctypes.CDLL(path)
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        parallel = {0: "sequential", 1: "pthreads", 2: "OpenMP"}.get(lib.openblas_get_parallel(), "?")
        return (f"{lib.openblas_get_config().decode()} ({path}, {parallel}, core "
                f"{lib.openblas_get_corename().decode()})")
    except (OSError, AttributeError):
        pass
    if "/blas/libblas.so" in path:
        return (f"reference BLAS ({path}): unoptimised, torch's Linear and LSTM layers will be slow; "
                f"install libopenblas0-openmp (scripts/compare_pytorch.sh does)")
    return path


def report_environment(args) -> None:
    unset = [n for n in CRIPPLING_VARIABLES if n not in os.environ]
    malloc = ", ".join(f"{n}={os.environ.get(n, '(unset)')}" for n in
                       ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"))
    threads = args.threads if args.device == "cuda" else cpu_setting(args).threads
    print(f"{PROG}: torch {torch.__version__} (python {platform.python_version()}), oneDNN "
          f"{onednn_version()} (enabled: {torch.backends.mkldnn.enabled}), {threads} thread(s), "
          f"inter-op 1; settings {args.setting.text() or '(defaults)'}", file=sys.stderr)
    print(f"{PROG}: BLAS: {describe_blas()}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', '(unset)')}", file=sys.stderr)
    print(f"{PROG}: {' and '.join(unset) or 'nothing'} unset"
          f"{'' if len(unset) == len(CRIPPLING_VARIABLES) else ' (the re-exec did not run?)'}; "
          f"{malloc}", file=sys.stderr)


# ---- main ----------------------------------------------------------------------------------

def row_setting(w: Workload, args) -> Setting:
    """The setting a workload runs with here: this process' one, resolved for its input."""
    return settings_search.resolved(args.setting, settings_search.is_images(w), args.threads,
                                    args.device == "cuda")


def row_identity(w: Workload, precision: str, name: str, batch: int, args, context) -> dict[str, str]:
    """The columns every row of a benchmark shares."""
    cuda = args.device == "cuda"
    identity = {"schema_version": SCHEMA_VERSION, "benchmark": name, "kind": "train", "model": w.model,
                "dataset": w.dataset,
                "data_source": "generated" if w.task == "regression" else "synthetic",
                "device": device_name(args.threads, machine_cores(), cuda),
                "threads": "1" if cuda else str(args.threads), "precision": precision, "batch": str(batch),
                "optimizer": optimizer_of(w, batch, args).kind, "framework": "pytorch",
                "params": str(w.params), "train_flops_per_sample": number(w.train_flops_per_sample),
                "warmup_steps": str(w.warmup_steps if args.warmup_steps is None else args.warmup_steps),
                "variant": variant_of(w, batch, args), "measurement": "measured",
                "peer_settings": row_setting(w, args).text(), **context}
    if cuda and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        identity.update({"gpu_name": props.name, "gpu_cc": f"{props.major}.{props.minor}",
                         "data_on_device": "1", "cuda_graph": "0"})
    return identity


def load_average() -> str:
    """The machine's 1-minute load average now (load_avg_1m)."""
    try:
        return number(os.getloadavg()[0])
    except OSError:
        return ""


def time_repetitions(session: Session, w: Workload, batch: int, args, emit) -> tuple[list, bool]:
    """args.repetitions timed runs, a row each; the good ones' values, and whether one failed."""
    ok_values: list[dict[str, float]] = []
    failed = False
    steps = 1
    for rep in range(args.repetitions):
        row = {"run_type": "iteration", "repetition": str(rep), "load_avg_1m": load_average()}
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
        util = f" utilisation {values['utilisation']:.3f}" if "utilisation" in values else ""
        wall = (f" (wall {values['wall_step_time_s'] * 1e3:.2f})" if session.cuda else "")
        emit({**row, "status": "ok", **formatted(values)},
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
              "load_avg_1m": load_average()}, f"FAILED: {e}")
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


def main(args) -> int:
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
    writer = CsvWriter(args.csv, args.columns, args.write_header) if args.csv else None
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


if __name__ == "__main__":
    try:
        sys.exit(main(ARGS))
    except InputError as e:
        fail(str(e))
    except KeyboardInterrupt:
        sys.exit(130)

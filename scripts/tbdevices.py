"""Device names, device kinds and variant words as trainbench writes them: the one module of the
scripts that parses a row's device (`gpu:1/jobs:2`), names a kind (`gpu:N over NCCL`) or reads a
variant's items (`shared_device`, `predicted:nvlink4`). Its tables are the C++ ones
(bench/plan/device_kinds.cpp, bench/plan/configs.cpp variant_flags), held against
`trainbench --list_configs --json` by tests/scripts/test_devices.py and test_tables.py.

Since schema 6 a row says what it is in columns of its own (device_kind, backend, data_parallel,
baseline, cpu_baseline, ...); tbcsv's upgrade gives older rows those columns by asking this module
(kind_of, the *_variant rules), and every other script reads the columns, or asks this module
about a kind's name or a variant. tests/scripts/test_no_device_parsing.py holds the other
scripts to that.

    cpu               all cores, one replica            cpu:T             T threads
    cpu:T/jobs:K      K processes of T threads          gpu:1             one GPU
    gpu:N             N GPUs, or N ranks' GPUs, or N replicas sharing one GPU, or N ranks as
                      emulated nodes sharing one GPU (four kinds: the row's columns say which)
    gpu:1/threads:K   K replicas as threads on one GPU  gpu:1/jobs:K      K processes on one GPU
    mpi:N             N MPI ranks, a CPU replica each

Standard library only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# What computes a row's steps (the `backend` column).
CPU, GPU = "cpu", "gpu"


@dataclass(frozen=True)
class Kind:
    """One entry of the C++ table of device kinds: its name (the `device_kind` column), the
    pattern a row's device of this kind matches, its backend and run, and the variant word of
    kinds whose rows check a path rather than measure (empty for the others)."""
    name: str
    pattern: str
    backend: str
    run: str  # one_replica, replicas, processes
    check_word: str = ""


# The C++ table's kinds, in its order (bench/plan/device_kinds.cpp kKinds).
KINDS = (
    Kind("cpu", "^cpu$", CPU, "one_replica"),
    Kind("cpu:T", "^cpu:(?P<threads>[0-9]+)$", CPU, "one_replica"),
    Kind("cpu:T/jobs:K", "^cpu:(?P<threads>[0-9]+)/jobs:(?P<jobs>[0-9]+)$", CPU, "processes"),
    Kind("gpu:1", "^gpu:1$", GPU, "one_replica"),
    Kind("gpu:N over NCCL", "^gpu:(?P<devices>[0-9]+)$", GPU, "replicas"),
    Kind("gpu:N sharing one GPU", "^gpu:(?P<devices>[0-9]+)$", GPU, "replicas", "shared_device"),
    Kind("gpu:N as emulated nodes", "^gpu:(?P<devices>[0-9]+)$", GPU, "replicas", "emulated_nodes"),
    Kind("gpu:N across ranks", "^gpu:(?P<devices>[0-9]+)$", GPU, "replicas"),
    Kind("gpu:1/threads:K", "^gpu:1/threads:(?P<replicas>[0-9]+)$", GPU, "replicas"),
    Kind("gpu:1/jobs:K", "^gpu:1/jobs:(?P<jobs>[0-9]+)$", GPU, "processes"),
    Kind("mpi:N", "^mpi:(?P<ranks>[0-9]+)$", CPU, "replicas"),
)
_BY_NAME = {k.name: k for k in KINDS}
ALL_CORES, CPU_THREADS, CPU_JOBS = "cpu", "cpu:T", "cpu:T/jobs:K"
ONE_GPU, NCCL, SHARING, EMULATED, ACROSS_RANKS = ("gpu:1", "gpu:N over NCCL", "gpu:N sharing one GPU",
                                                  "gpu:N as emulated nodes", "gpu:N across ranks")
GPU_THREADS, GPU_JOBS, MPI = "gpu:1/threads:K", "gpu:1/jobs:K", "mpi:N"
# The patterns, each once (the four gpu:N kinds share one), in the table's order.
_COMPILED = tuple((re.compile(p), k.backend, k.run)
                  for p, k in {k.pattern: k for k in reversed(KINDS)}.items())[::-1]
# A device and, where it has one, its /jobs:K or /threads:K, inside a benchmark name.
SPLIT_PREFIXES = ("jobs:", "threads:")


# ---- device names ------------------------------------------------------------------------

@dataclass(frozen=True)
class Device:
    text: str
    backend: str  # cpu, gpu
    run: str  # one_replica, replicas, processes
    threads: int | None = None  # cpu:T's
    devices: int | None = None  # gpu:N's GPUs (1 for gpu:1)
    ranks: int | None = None  # mpi:N's
    jobs: int | None = None  # /jobs:K's processes
    replicas: int | None = None  # /threads:K's

    @property
    def prefix(self) -> str:
        return self.text.partition(":")[0]

    @property
    def data_parallel(self) -> int | None:
        """N of gpu:N or mpi:N for N >= 2: replicas sharing their gradients."""
        n = self.devices if self.prefix == "gpu" and self.run == "replicas" else self.ranks
        return n if n is not None and n >= 2 else None


def parse(device: str) -> Device | None:
    """The device a row names, or None for text no kind takes."""
    for pattern, backend, run in _COMPILED:
        m = pattern.fullmatch(device)
        if m:
            counts = {k: int(v) for k, v in m.groupdict().items()}
            if device == "gpu:1":
                counts["devices"] = 1
            if counts.get("devices") == 1 and run == "replicas":
                continue  # gpu:1 is one replica
            return Device(device, backend, run, **counts)
    return None


def device_count(device: str) -> int | None:
    """N of a `gpu:N` device (N GPUs), None for anything else."""
    d = parse(device)
    return d.devices if d else None


def sort_key(device: str) -> tuple:
    """cpu, cpu:1, cpu:1/jobs:2, cpu:2, ..., gpu:1, gpu:1/threads:2, gpu:1/jobs:2, gpu:2, ...,
    mpi:2: by kind, then all cores before N, then N (one GPU for gpu:1/threads:K and
    gpu:1/jobs:K), then the plain device, its threads and its jobs (the kinds' order), each by K."""
    d = parse(device)
    n = None if d is None else (d.threads or d.devices or d.ranks or (1 if d.backend == GPU else None))
    split = (0, 0) if d is None else (d.jobs or 0, d.replicas or 0)
    prefix = device.partition(":")[0]
    return (prefix != "cpu", prefix, n is not None, n or 0, split, device)


def split_name(parts: list[str]) -> list[str]:
    """A benchmark name's parts with the device's /jobs:K or /threads:K joined to it."""
    if len(parts) > 4 and parts[4].startswith(SPLIT_PREFIXES):
        return parts[:3] + [parts[3] + "/" + parts[4]] + parts[5:]
    return parts


NAME_PARTS = ("kind", "model", "dataset", "device", "precision", "batch")


def name_parts(benchmark: str) -> dict[str, str]:
    """Splits `<kind>/<model>/<dataset>/<device>/<precision>/bs:<batch>` into its parts (empty
    strings for parts a name lacks). The devices `gpu:1/jobs:K`, `gpu:1/threads:K` and
    `cpu:T/jobs:K` hold a slash of their own."""
    parts = split_name(benchmark.split("/"))
    out = dict.fromkeys(NAME_PARTS, "")
    for key, part in zip(NAME_PARTS, parts):
        out[key] = part.removeprefix("bs:") if key == "batch" else part
    return out


def one_device(backend: str, threads: str) -> str:
    """The one-device configuration a data-parallel row's scaling is over: gpu:1 for GPUs, cpu:T
    for MPI ranks of T threads each (bench/plan/baselines.cpp scaling_baseline)."""
    return "gpu:1" if backend == GPU else f"cpu:{threads}"


# The smallest run that has a scaling efficiency on the CPU: one thread, and two MPI ranks of one
# thread each (the ReFrame check's default devices).
ONE_CPU_AND_TWO_RANKS = "cpu:1,mpi:2"


# ---- kinds --------------------------------------------------------------------------------

@dataclass(frozen=True)
class KindFacts:
    """What schema 6 writes of a row's kind: `device_kind`, `backend`, `data_parallel`."""
    name: str
    backend: str
    data_parallel: int | None


def kind_of(device: str, variant: str = "", *, shared_device: bool = False,
            emulated_nodes: bool = False, ranks: int = 1, measurement: str = "measured") -> KindFacts:
    """The kind of an older row (before schema 6) as trainbench plans it (device_kinds.cpp
    plan_device): from its device, its variant's words and the columns that said the same
    (shared_device, emulated_nodes), the MPI ranks of its run, and whether it is a prediction
    (a predicted row stands for gpu:N over NCCL, or mpi:N). Empty name and backend for a device
    no kind takes; `gpu:all` (written where no GPU could run it) is gpu:N over NCCL, with no N."""
    items = set(variant_flags_of(variant))
    if device == "gpu:all":
        return KindFacts(NCCL, GPU, None)
    d = parse(device)
    if d is None:
        return KindFacts("", "", None)
    if measurement in ("predicted", "replayed") and d.data_parallel:
        return KindFacts(NCCL if d.backend == GPU else MPI, d.backend, d.data_parallel)
    count = d.devices if d.prefix == "gpu" else None
    if d.run == "one_replica":
        name = ALL_CORES if d.threads is None and d.backend == CPU else (CPU_THREADS if d.backend == CPU else ONE_GPU)
    elif d.jobs is not None:
        name = CPU_JOBS if d.backend == CPU else GPU_JOBS
    elif d.replicas is not None:
        name = GPU_THREADS
    elif d.ranks is not None:
        return KindFacts(MPI, CPU, d.ranks)  # across ranks: N = the ranks (mpi:1 too)
    elif shared_device or "shared_device" in items:
        name = SHARING
    elif ranks > 1 and (emulated_nodes or "emulated_nodes" in items):
        name = EMULATED
    elif ranks > 1:
        name = ACROSS_RANKS
    else:
        name = NCCL
    # N devices of their own sharing gradients: the kinds with a wiring that share no device.
    parallel = count if name in (NCCL, ACROSS_RANKS) else None
    return KindFacts(name, d.backend, parallel)


def _cell_is_one(row: dict[str, str], column: str) -> bool:
    return (row.get(column) or "").strip() == "1"


def older_row_kind(device: str, row: dict[str, str]) -> KindFacts:
    """kind_of for a row written before schema 6, from its columns: its variant, the columns
    that said what a variant word says (shared_device since version 4, emulated_nodes since
    version 5), its run's MPI ranks and its measurement."""
    ranks = (row.get("ranks") or "").strip()
    return kind_of(device, row.get("variant", ""), shared_device=_cell_is_one(row, "shared_device"),
                   emulated_nodes=_cell_is_one(row, "emulated_nodes"),
                   ranks=int(ranks) if ranks.isdigit() else 1,
                   measurement=row.get("measurement") or "measured")


def older_row_variant(row: dict[str, str], legacy: bool) -> str:
    """The variant of a row as version 4 writes it: `legacy` (a row of versions 1-3) from the two
    run option columns it had, else as written; with the items a shared-device row (its
    shared_device column) or a predicted row (its measurement and link) must carry, where a
    writer forgot them."""
    if legacy:
        variant = legacy_variant(_cell_is_one(row, "data_on_device"), _cell_is_one(row, "cuda_graph"))
    else:
        variant = (row.get("variant") or "").strip()
    return repaired_variant(variant, _cell_is_one(row, "shared_device"),
                            row.get("measurement") == "predicted", (row.get("link") or "").strip())


def on_emulated_nodes(row: dict[str, str]) -> bool:
    """The row's ranks ran as emulated nodes of one machine (its `emulated_nodes` column, beside
    the variant word of the same name)."""
    return row.get("emulated_nodes", "") == "1"


def kind_named(name: str) -> Kind | None:
    return _BY_NAME.get(name)


def checks_only(kind: str) -> bool:
    """Rows of the kind check a path (replicas sharing one GPU, GPU ranks as emulated nodes):
    no speedup, no scaling (the table's check_word)."""
    k = _BY_NAME.get(kind)
    return bool(k and k.check_word)


def check_word(kind: str) -> str:
    k = _BY_NAME.get(kind)
    return k.check_word if k else ""


def what_it_checks(kind: str, device: str = "") -> str:
    """What the rows of a kind that checks a path are, in a few words: `2 replicas on one GPU:
    correctness, not scaling`; '' for a kind whose rows measure."""
    n = device_count(device) or "N"
    return {"shared_device": f"{n} replicas on one GPU: correctness, not scaling",
            "emulated_nodes": f"{n} ranks as emulated nodes on one GPU: the multi-node path, not "
                              f"scaling"}.get(check_word(kind), "")


def is_all_cores(kind: str) -> bool:
    """The `cpu` kind: all of the machine's cores, one replica (the speedups' baseline)."""
    return kind == ALL_CORES


def is_one_gpu(kind: str) -> bool:
    return kind == ONE_GPU


def is_one_replica(kind: str) -> bool:
    k = _BY_NAME.get(kind)
    return bool(k and k.run == "one_replica")


# ---- variants -----------------------------------------------------------------------------

# The items a variant names, in the order trainbench writes them (bench/plan/configs.cpp
# variant_flags: `name:value`, or bare `name` for a switch, joined by `/`).
VARIANT_FLAGS = ("optimizer", "lr", "data_on_device", "cuda_graph", "gpu_memory_limit",
                 "gpu_layout", "loader_workers", "prefetch", "augment", "shared_device",
                 "emulated_nodes", "nodes", "timeline", "replayed", "predicted", "network", "from")
# Rows of versions 1-3 recorded two of them as columns of their own, in this order.
LEGACY_VARIANT_COLUMNS = ("data_on_device", "cuda_graph")
# What a variant loses for each comparison, as the C++ drops it: the one-device row of scaling
# efficiency lacks where the ranks ran (baselines.cpp scaling_baseline); the cpu row of a
# speedup lacks what only a GPU row has (cpu_row); a prediction and the measured row it is for
# differ only in where the ranks ran and what the prediction assumed (predict.cpp where_item).
SCALING_DROPS = ("emulated_nodes", "nodes")
CPU_ROW_DROPS = ("data_on_device", "cuda_graph", "gpu_memory_limit", "gpu_layout",
                 "emulated_nodes", "nodes")
PREDICTION_DROPS = ("emulated_nodes", "predicted", "network", "from", "replayed")
# What makes a row a prediction or a replay rather than the measurement of its configuration.
_NOT_MEASURED = ("predicted", "network", "from", "replayed")


def variant_items(variant: str) -> list[str]:
    """The items of a variant: `data_on_device/cuda_graph` -> ['data_on_device', 'cuda_graph']."""
    return [item for item in (variant or "").split("/") if item]


def variant_flags_of(variant: str) -> list[str]:
    """The flags of a variant's items: `optimizer:adam/augment` -> ['optimizer', 'augment']."""
    return [item.partition(":")[0] for item in variant_items(variant)]


def variant_order(item: str) -> tuple:
    """Sort key of a variant item: trainbench's fixed order, unknown flags last by name."""
    flag = item.partition(":")[0]
    return (VARIANT_FLAGS.index(flag) if flag in VARIANT_FLAGS else len(VARIANT_FLAGS), item)


def join_variant(items) -> str:
    """Items as a variant: in trainbench's order, each once, joined by `/`."""
    return "/".join(sorted(dict.fromkeys(items), key=variant_order))


def without(variant: str, flags) -> str:
    """The variant less the items of the flags named."""
    return "/".join(i for i in variant_items(variant) if i.partition(":")[0] not in flags)


def scaling_variant(variant: str) -> str:
    return without(variant, SCALING_DROPS)


def cpu_row_variant(variant: str) -> str:
    return without(variant, CPU_ROW_DROPS)


def comparable_variant(variant: str) -> str:
    return without(variant, PREDICTION_DROPS)


def measured_variant(variant: str) -> str:
    """The variant of the measured configuration a predicted or replayed row stands for."""
    return without(variant, _NOT_MEASURED)


def is_flag(term: str) -> bool:
    """A variant item of a flag trainbench writes (`optimizer:adam`, `cuda_graph`)."""
    return term.partition(":")[0] in VARIANT_FLAGS


def names_a_prediction(term: str) -> bool:
    """A variant item only predicted rows carry (`predicted:nvlink4`, `network:ib`, `from:cpu:1`)."""
    return term.partition(":")[0] in ("predicted", "network", "from")


# The flags of measured rows (a compare.py filter may name them).
MEASURED_FLAGS = tuple(f for f in VARIANT_FLAGS if not names_a_prediction(f))


def variant_value(variant: str, flag: str) -> str | None:
    """The value of a flag's item in a variant (`off` of `timeline:off`, '' of a bare switch),
    None where the variant lacks the flag."""
    return next((i.partition(":")[2] for i in variant_items(variant) if i.partition(":")[0] == flag), None)


def predicted_link(variant: str) -> str:
    """`nvlink4` of a variant holding `predicted:nvlink4`, else ''."""
    return variant_value(variant, "predicted") or ""


def legacy_variant(data_on_device: bool, cuda_graph: bool) -> str:
    """A version 1-3 row's variant, from the two run option columns it had."""
    on = {"data_on_device": data_on_device, "cuda_graph": cuda_graph}
    return "/".join(c for c in LEGACY_VARIANT_COLUMNS if on[c])


def repaired_variant(variant: str, shared_device: bool, predicted: bool, link: str) -> str:
    """The variant with the items a shared-device or predicted row must carry, where a writer
    forgot them: such a row must never pass for a plain one."""
    missing = []
    if shared_device and "shared_device" not in variant_flags_of(variant):
        missing.append("shared_device")
    if predicted and not predicted_link(variant):
        missing.append("predicted:" + (link or "unknown"))
    return join_variant(variant_items(variant) + missing) if missing else variant


def variant_words(variant: str, device: str = "") -> list[str]:
    """A variant as short lines for a label: `shared_device` says what it means (N replicas on
    one GPU), `predicted:nvlink4` becomes `predicted (nvlink4)`, other items stay as written."""
    words = []
    for item in variant_items(variant):
        flag, _, value = item.partition(":")
        if flag == "shared_device":
            words += [f"{device_count(device) or 'N'} replicas", "on one GPU"]
        elif flag == "predicted":
            words.append(f"predicted ({value})")
        else:
            words.append(item)
    return words

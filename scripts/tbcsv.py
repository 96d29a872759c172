"""Reading and validating trainbench CSV files (results/SCHEMA.md, schema_versions 1 to 5).

Shared by scripts/plot.py and scripts/compare.py so that both accept and refuse the same
files with the same messages. Columns are read by name and unknown columns are kept, so files
written by later trainbench versions with extra columns (GPU, per-epoch, memory, comm) load
unchanged, and files of different versions can be read together. The one column whose meaning
changed between versions (driver_version, see _upgrade_row) is moved to its new name on read,
and rows before version 4 get the row identity version 4 writes (variant, measurement; see
_upgrade_identity), so a row's identity reads the same whatever version wrote it. Rows before
version 5 are read on the wall clock (_upgrade_clock): a GPU row's samples_per_s and step_time_s
were the device clock's (CUDA events) then, and version 5 moved that clock to columns of its
own. Every row says which clock its throughput is on in a derived field, row["clock"] (never a
CSV column), and the Table lists what was read differently from the file in its notes.
Standard library only: compare.py must run without matplotlib.
"""
from __future__ import annotations

import csv
import math
import statistics
import sys
from dataclasses import dataclass, field

import tbdevices

# Version 2 added the GPU context and measurement columns to version 1, version 3 appended the
# NVML telemetry columns (GPU_TELEMETRY_COLUMNS) to version 2, version 4 the identity and link
# columns, version 5 the device clock's own columns (its samples_per_s is the wall clock's on
# every row); all read the same way (by column name, older GPU rows moved to the wall clock), so
# files of any of them can be compared and plotted together.
SCHEMA_VERSIONS = ("1", "2", "3", "4", "5")

# The columns version 3 appended, in header order (SCHEMA.md "GPU telemetry"): per-row
# measurements sampled over the timed steps, then the CUDA driver API version that
# driver_version held before version 3.
GPU_TELEMETRY_COLUMNS = ("gpu_util", "gpu_mem_used_bytes", "gpu_sm_clock_min_mhz",
                         "gpu_sm_clock_median_mhz", "gpu_power_w", "energy_j_per_sample",
                         "gpu_temp_max_c", "gpu_throttle", "gpu_samples", "host_cpu_util_per_job")
SCHEMA_3_COLUMNS = GPU_TELEMETRY_COLUMNS + ("cuda_driver_version",)
# The columns version 4 appended after cuda_driver_version, in header order: the row's variant
# and measurement kind (identity), machine load and sgemm rate, and the link of data-parallel
# and predicted rows.
SCHEMA_4_COLUMNS = ("variant", "load_avg_1m", "sgemm_gflops", "peak_spread", "shared_device",
                    "measurement", "link", "link_busbw_gbps", "link_latency_us",
                    "predicted_from", "peer_settings")
# The columns version 5 appended after peer_settings, in header order: the device clock of GPU
# rows (samples_per_s and step_time_s are the wall clock's on every row since version 5), a
# prediction's band and the term that dominates it, the window jobs ran in together, and the
# hosts of the MPI ranks.
SCHEMA_5_COLUMNS = ("device_step_time_s", "device_samples_per_s", "samples_per_s_low",
                    "samples_per_s_high", "dominant_term", "jobs_window_s", "nodes", "rank_hosts",
                    "emulated_nodes")

# Which clock a row's samples_per_s and step_time_s are on: row[CLOCK], a derived field (never a
# CSV column) that every row read gets. Version 5 rows, CPU rows and epochs/ rows are on the wall
# clock as written; an older GPU train/ row is read on it from its wall_step_time_s, an older
# predicted GPU row is re-derived from its source row's wall clock, and one that cannot be (no
# wall_step_time_s, no source row) keeps the device clock and says so.
CLOCK = "clock"
CLOCK_WALL = "wall"
CLOCK_READ = "wall (read from wall_step_time_s)"
CLOCK_REDERIVED = "wall (re-derived from its source row's wall_step_time_s)"
CLOCK_DEVICE = "device (no wall clock recorded)"

# The flags a variant names, in the fixed order trainbench writes them (`name:value`, or bare
# `name` for on/off flags, joined by `/`). Rows of versions 1-3 record two of them as columns.
VARIANT_FLAGS = ("optimizer", "lr", "data_on_device", "cuda_graph", "gpu_memory_limit",
                 "gpu_layout", "loader_workers", "prefetch", "augment", "shared_device",
                 "timeline", "predicted")
LEGACY_VARIANT_COLUMNS = ("data_on_device", "cuda_graph")
# Flags that only a GPU row can carry: a GPU variant's speedup is taken over the CPU row
# without them (the CPU has no CUDA graph), while optimizer or lr stay part of the match.
GPU_ONLY_FLAGS = ("data_on_device", "cuda_graph", "gpu_memory_limit", "gpu_layout",
                  "shared_device", "predicted")

# Columns every row has; the scripts cannot interpret a row without them.
REQUIRED_COLUMNS = ("schema_version", "benchmark", "run_type", "status")

# The machine context written on every row (SCHEMA.md "Machine context"), in the order the
# scripts show it. timestamp is handled separately because it is shown as a range.
MACHINE_COLUMNS = ("host", "cpu_model", "cores", "os", "compiler", "onednn", "benchmark_lib",
                   "git_commit")

# GPU context columns are recognised by name so that a context column added later shows up
# without a change here: any column whose name mentions one of these is treated as machine
# context, unless its suffix says it is a measurement (e.g. comm_s_per_step) or it is one of
# the telemetry measurements of version 3 (gpu_sm_clock_min_mhz is a measurement, while
# gpu_clock_mhz, the maximum clock, is context: no suffix tells them apart).
CONTEXT_KEYWORDS = ("gpu", "driver", "cuda", "cudnn", "cublas", "nccl", "mpi")
# Run options that mention a keyword but describe the run, not the machine.
RUN_OPTION_COLUMNS = ("cuda_graph", "data_on_device", "shared_device")
MEASUREMENT_SUFFIXES = ("_s", "_bytes", "_per_step", "_util", "_flops", "_ratio", "_pct")


class InputError(Exception):
    """Input the scripts refuse: reported as one line on stderr with exit status 2."""


@dataclass
class Table:
    """One trainbench CSV: its path, header and rows (dicts of column -> text)."""
    path: str
    columns: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)
    # What was read differently from what the file says (older rows moved to the wall clock),
    # one line each, for the scripts to print once per file.
    notes: list[str] = field(default_factory=list)


def read_table(path: str) -> Table:
    """Reads and validates one CSV; raises InputError naming the file on anything wrong."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return _parse(path, f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a CSV file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a trainbench CSV (not UTF-8 text)") from None
    except csv.Error as e:
        raise InputError(f"{path}: not a readable CSV ({e})") from None


def _parse(path: str, f) -> Table:
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None or not any(cell.strip() for cell in header):
        raise InputError(f"{path}: empty file (no header, no rows)")
    if "schema_version" not in header:
        raise InputError(f"{path}: not a trainbench CSV (no schema_version column)")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: not a trainbench CSV (missing column {', '.join(missing)})")
    table = Table(path, list(header))
    # Before version 3, driver_version held the CUDA driver API version (13.0); version 3 moved
    # that to cuda_driver_version and gave driver_version the NVIDIA driver's (580.159.04).
    legacy_driver = "driver_version" in header and "cuda_driver_version" not in header
    if legacy_driver:
        table.columns.append("cuda_driver_version")
    for cells in reader:
        line = reader.line_num
        if not cells:
            continue  # a blank line, e.g. a trailing newline added by an editor
        if cells == header:
            continue  # a file concatenated without `tail -n +2`: same header, harmless
        if len(cells) != len(header):
            raise InputError(f"{path}: line {line} has {len(cells)} fields, the header has "
                             f"{len(header)}")
        row = dict(zip(header, cells))
        version = row["schema_version"]
        if version not in SCHEMA_VERSIONS:
            raise InputError(f"{path}: line {line}: unknown schema_version {version!r} "
                             f"(these scripts read versions {', '.join(SCHEMA_VERSIONS)})")
        if legacy_driver:
            _upgrade_row(row)
        _upgrade_identity(row)
        table.rows.append(row)
    if not table.rows:
        raise InputError(f"{path}: empty CSV (a header but no rows)")
    _upgrade_clock(table)
    return table


def _upgrade_row(row: dict[str, str]) -> None:
    """Gives a version 1 or 2 row the version 3 meaning of driver_version: its value moves to
    cuda_driver_version and driver_version is left empty (not recorded then). Without this, a
    machine's v2 and v3 rows would show two "driver versions" (13.0 and 580.159.04) that are
    two different things, and compare.py would call the same driver a difference."""
    if row["schema_version"] in ("1", "2"):
        row["cuda_driver_version"] = row["driver_version"]
        row["driver_version"] = ""


def _upgrade_identity(row: dict[str, str]) -> None:
    """Gives every row version 4's identity: a variant, a measurement kind, and a benchmark
    name that ends with the variant. Before version 4 the variant is derived from the run
    option columns (cuda_graph=1, data_on_device=1), so that a run with --data_on_device and
    one without no longer merge into one bar or one comparison; an --optimizer that differs
    from the model's default left no trace then and cannot be recovered."""
    if row["schema_version"] in ("1", "2", "3") or "variant" not in row:
        row["variant"] = "/".join(c for c in LEGACY_VARIANT_COLUMNS
                                  if (row.get(c) or "").strip() == "1")
    row["variant"] = written = row["variant"].strip()
    row["measurement"] = (row.get("measurement") or "").strip() or "measured"
    # A shared-device or predicted row must never pass for a plain one, even if a writer
    # forgot its variant item.
    missing = []
    if (row.get("shared_device") or "").strip() == "1" and not is_shared_device(row["variant"]):
        missing.append("shared_device")
    if is_predicted(row) and not predicted_link(row["variant"]):
        missing.append("predicted:" + ((row.get("link") or "").strip() or "unknown"))
    if missing:
        row["variant"] = "/".join(sorted(variant_items(row["variant"]) + missing,
                                         key=variant_order))
    name = row["benchmark"].removesuffix("/" + written) if written else row["benchmark"]
    if row["variant"]:
        row["benchmark"] = f"{name}/{row['variant']}"


# ---- the wall clock (schema 5) -------------------------------------------------------------

def on_device_clock(row: dict[str, str]) -> bool:
    """True when the row's samples_per_s could not be read on the wall clock."""
    return row.get(CLOCK, CLOCK_WALL).startswith("device")


def _upgrade_clock(table: Table) -> None:
    """Puts every row on version 5's wall clock and marks which clock it is on (row[CLOCK]).

    Before version 5 a GPU train/ row's step_time_s was the device clock (CUDA events summed
    over the timed steps) and samples_per_s = batch x replicas over it; wall_step_time_s (since
    version 2) held the wall clock, host gaps included. Version 5 writes the wall clock in
    step_time_s and samples_per_s on every row and the device clock in device_step_time_s and
    device_samples_per_s; older rows are read the same way, so that a GPU's figure is never
    compared with a CPU's on another clock. Predicted rows are made from their source row's
    step, so they follow it (_rederive_predicted)."""
    moved: dict[str, int] = {}  # what was upgraded, by kind: the table's notes count them
    measured_n = []  # gpu:N rows whose written scaling_efficiency needs the new rates
    for row in table.rows:
        row[CLOCK] = CLOCK_WALL
        if not _device_clock_row(row) or is_predicted(row):
            continue
        if _read_wall_clock(row):
            kind = "jobs" if "/jobs:" in field_of(row, "device") else "gpu"
            moved[kind] = moved.get(kind, 0) + 1
            if number(row, "scaling_efficiency") is not None:
                measured_n.append(row)
        else:
            _keep_device_clock(row)
            moved["device"] = moved.get("device", 0) + 1
    _rescale_efficiency(table, measured_n)
    rederived, kept = _rederive_predicted(table)
    if moved or rederived or kept:
        table.columns += [c for c in ("device_step_time_s", "device_samples_per_s")
                          if c not in table.columns]
    versions = "/".join(sorted({r["schema_version"] for r in table.rows if r["schema_version"] < "5"}))
    path = table.path
    if moved.get("gpu"):
        table.notes.append(f"{path}: schema {versions} GPU rows: samples_per_s read on the wall "
                           f"clock from wall_step_time_s (the device clock is kept as "
                           f"device_samples_per_s)")
    if moved.get("jobs"):
        table.notes.append(f"{path}: schema {versions} gpu:1/jobs:K rows: samples_per_s is the sum "
                           f"of the jobs' own rates, each job timed in its own window (the jobs' "
                           f"windows did not line up), scaled to the wall clock by step_time_s / "
                           f"wall_step_time_s")
    if rederived:
        table.notes.append(f"{path}: schema {versions} predicted GPU rows: re-derived on the wall "
                           f"clock from their source row's wall_step_time_s plus the exposed "
                           f"communication they predict (the device-clock prediction is kept as "
                           f"device_samples_per_s)")
    if moved.get("device") or kept:
        table.notes.append(f"{path}: {moved.get('device', 0) + kept} GPU rows have no wall clock "
                           f"(no wall_step_time_s, or a prediction without its source row): their "
                           f"samples_per_s stays on the device clock, and the charts say so")


def _device_clock_row(row: dict[str, str]) -> bool:
    """A row written before version 5 whose samples_per_s was on the device clock: a GPU train/
    row (epochs/ rows were always the wall clock's)."""
    return (row["schema_version"] in SCHEMA_VERSIONS[:-1]
            and field_of(row, "device").startswith("gpu")
            and field_of(row, "kind") == "train" and not is_epoch_row(row)
            and number(row, "samples_per_s") is not None)


def _set(row: dict[str, str], column: str, value: float | None) -> None:
    row[column] = "" if value is None else f"{value:.6g}"


def _keep_device_clock(row: dict[str, str]) -> None:
    """A row that cannot be read on the wall clock: its figures are the device clock's, in its
    own columns too, so that a device-clock comparison finds them where version 5 puts them."""
    row["device_step_time_s"], row["device_samples_per_s"] = row["step_time_s"], row["samples_per_s"]
    row[CLOCK] = CLOCK_DEVICE


def _read_wall_clock(row: dict[str, str]) -> bool:
    """Moves one measured row's device clock to the device_* columns and reads its throughput
    from wall_step_time_s; False (row unchanged) where the row has no wall clock."""
    step, rate, wall = (number(row, c) for c in ("step_time_s", "samples_per_s",
                                                  "wall_step_time_s"))
    if not (step and rate and wall and step > 0 and wall > 0):
        return False
    row["device_step_time_s"], row["device_samples_per_s"] = row["step_time_s"], row["samples_per_s"]
    row["step_time_s"] = row["wall_step_time_s"]
    row[CLOCK] = CLOCK_READ
    aggregate = row.get("aggregate", "") if row.get("run_type") == "aggregate" else ""
    if aggregate in ("stddev", "cv"):
        # A spread's ratio is not the ratio of two spreads: left empty (no script reads them).
        row["samples_per_s"] = row["model_tflops"] = row["utilisation"] = ""
        return True
    # samples/s = batch x replicas / step on either clock, so the wall clock's rate is the
    # device's times step / wall. An aggregate row (mean, median) is scaled by its own two
    # steps: the median of the ratios would need the repetitions, and the two differ little.
    factor = step / wall
    _set(row, "samples_per_s", rate * factor)
    for column in ("model_tflops", "utilisation"):  # both are samples_per_s times a constant
        value = number(row, column)
        if value is not None:
            _set(row, column, value * factor)
    comm = number(row, "comm_s_per_step")
    if comm is not None and number(row, "comm_share") is not None:
        _set(row, "comm_share", comm / wall)
    return True


def _one_device_key(row: dict[str, str], device: str) -> tuple:
    return (field_of(row, "kind"), field_of(row, "model"), field_of(row, "dataset"), device,
            field_of(row, "precision"), field_of(row, "batch"), row.get("variant", ""),
            row.get("framework", "") or "trainbench", row.get("host", ""))


def _rescale_efficiency(table: Table, rows: list[dict[str, str]]) -> None:
    """A measured gpu:N row's scaling_efficiency (samples/s over N x the gpu:1 row's) on the wall
    clock: over the same file's gpu:1 row, now on the wall clock too; empty without one."""
    if not rows:
        return
    ones = samples(table.rows, lambda r: _one_device_key(r, field_of(r, "device")),
                   "samples_per_s")
    for row in rows:
        n = device_count(field_of(row, "device"))
        one = ones.get(_one_device_key(row, "gpu:1"))
        rate = number(row, "samples_per_s")
        ok = n and one and one.center > 0 and rate is not None
        _set(row, "scaling_efficiency", rate / (n * one.center) if ok else None)


def _rederive_predicted(table: Table) -> tuple[int, int]:
    """Re-derives the predicted GPU rows of an older file on the wall clock: their step is the
    source row's (predicted_from, in the same file: the median wall step over its ok
    repetitions) plus the exposed communication the row predicts (comm_s_per_step), as version
    5 computes it. Returns (re-derived, kept on the device clock for want of a source row)."""
    wanted = [r for r in table.rows if is_predicted(r) and _device_clock_row(r)]
    if not wanted:
        return 0, 0
    steps = samples(table.rows, lambda r: r["benchmark"], "wall_step_time_s")
    done = kept = 0
    for row in wanted:
        source = steps.get((row.get("predicted_from") or "").strip())
        comm = number(row, "comm_s_per_step")
        replicas = number(row, "replicas") or device_count(field_of(row, "device"))
        batch = number(row, "batch") or number(parse_name(row["benchmark"]), "batch")
        if source is None or comm is None or not replicas or not batch:
            _keep_device_clock(row)
            kept += 1
            continue
        wall = source.center
        step = wall + comm
        row["device_step_time_s"], row["device_samples_per_s"] = (row["step_time_s"],
                                                                  row["samples_per_s"])
        _set(row, "step_time_s", step)
        _set(row, "samples_per_s", replicas * batch / step)
        _set(row, "scaling_efficiency", wall / step)
        _set(row, "comm_share", comm / step)
        row[CLOCK] = CLOCK_REDERIVED
        done += 1
    return done, kept


def read_tables(paths: list[str]) -> list[Table]:
    return [read_table(p) for p in paths]


def all_rows(tables: list[Table]) -> list[dict[str, str]]:
    return [row for t in tables for row in t.rows]


def all_columns(tables: list[Table]) -> list[str]:
    """Union of the tables' headers, in first-seen order."""
    seen: dict[str, None] = {}
    for t in tables:
        seen.update(dict.fromkeys(t.columns))
    return list(seen)


# ---- cells ---------------------------------------------------------------------------------

def number(row: dict[str, str], column: str) -> float | None:
    """The cell as a finite float, or None when missing, empty or not a number."""
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def has_values(rows: list[dict[str, str]], column: str) -> bool:
    """True when at least one row has a number in the column (absent columns have none)."""
    return any(number(r, column) is not None for r in rows)


def is_ok(row: dict[str, str]) -> bool:
    return row.get("status", "") == "ok"


def is_iteration(row: dict[str, str]) -> bool:
    return row.get("run_type", "") == "iteration"


def is_median_aggregate(row: dict[str, str]) -> bool:
    return row.get("run_type", "") == "aggregate" and row.get("aggregate", "") == "median"


def is_epoch_row(row: dict[str, str]) -> bool:
    """Per-epoch rows (time-to-accuracy runs) are curves, not steady-state steps."""
    return row.get("benchmark", "").startswith("epochs/") or bool(row.get("epoch", "").strip())


def parse_name(benchmark: str) -> dict[str, str]:
    """Splits `<kind>/<model>/<dataset>/<device>/<precision>/bs:<batch>` into its parts
    (empty strings for parts a name lacks); used where a row's own columns are empty. The
    devices `gpu:1/jobs:K` (K processes sharing a GPU), `gpu:1/threads:K` (K threads of one
    process) and `cpu:T/jobs:K` hold a slash of their own."""
    parts = tbdevices.split_name(benchmark.split("/"))
    keys = ("kind", "model", "dataset", "device", "precision", "batch")
    out = dict.fromkeys(keys, "")
    for key, part in zip(keys, parts):
        out[key] = part.removeprefix("bs:") if key == "batch" else part
    return out


def variant_items(variant: str) -> list[str]:
    """The flags of a variant: `data_on_device/cuda_graph` -> ['data_on_device', 'cuda_graph']."""
    return [item for item in (variant or "").split("/") if item]


def variant_order(item: str) -> tuple:
    """Sort key of a variant item: trainbench's fixed order, unknown flags last by name."""
    flag = item.partition(":")[0]
    return (VARIANT_FLAGS.index(flag) if flag in VARIANT_FLAGS else len(VARIANT_FLAGS), item)


def without_gpu_flags(variant: str) -> str:
    """The variant with the GPU-only flags removed: the CPU row a GPU variant is compared with."""
    return "/".join(i for i in variant_items(variant) if i.partition(":")[0] not in GPU_ONLY_FLAGS)


def is_predicted(row: dict[str, str]) -> bool:
    """A prediction of N-device scaling (schema 4, issue 24), never a measured figure."""
    return row.get("measurement", "") == "predicted"


def is_shared_device(variant: str) -> bool:
    """N replicas on one GPU: a correctness check, never a scaling figure."""
    return "shared_device" in variant_items(variant)


def predicted_link(variant: str) -> str:
    """`nvlink4` of a variant holding `predicted:nvlink4`, else ''."""
    return next((i.partition(":")[2] for i in variant_items(variant)
                 if i.startswith("predicted")), "")


def field_of(row: dict[str, str], column: str) -> str:
    """A row's identity column, falling back to the part of the benchmark name."""
    value = (row.get(column) or "").strip()
    return value or parse_name(row.get("benchmark", ""))[column]


# The device grammar is tbdevices.py's, the one the scripts share.
device_count = tbdevices.device_count
device_sort_key = tbdevices.sort_key


# ---- samples -------------------------------------------------------------------------------

@dataclass
class Sample:
    """The values of one metric for one benchmark: the ok repetitions, or when a side has
    only aggregates, the single median aggregate."""
    values: list[float]
    source: str  # "iterations" or "median aggregate"

    @property
    def center(self) -> float:
        return statistics.median(self.values)

    @property
    def repetitions(self) -> int:
        return len(self.values) if self.source == "iterations" else 0


def samples(rows, key, metric: str) -> dict:
    """Groups rows by key(row) and returns key -> Sample of the metric.

    Uses the ok iteration rows that have a value; a key with none of those falls back to its
    ok `median` aggregate rows (files written with --benchmark_report_aggregates_only). Other
    aggregates are never used: `cv` is a ratio in every column and `stddev` is not a level.
    """
    iterations: dict = {}
    medians: dict = {}
    for row in rows:
        if not is_ok(row):
            continue
        value = number(row, metric)
        if value is None:
            continue
        if is_iteration(row):
            iterations.setdefault(key(row), []).append(value)
        elif is_median_aggregate(row):
            medians.setdefault(key(row), []).append(value)
    out = {k: Sample(v, "iterations") for k, v in iterations.items()}
    for k, v in medians.items():
        out.setdefault(k, Sample(v, "median aggregate"))
    return out


def statuses(rows, key) -> dict:
    """key -> set of statuses of its iteration rows; tells failed/skipped from absent."""
    out: dict = {}
    for row in rows:
        if is_iteration(row):
            out.setdefault(key(row), set()).add(row.get("status", ""))
    return out


# ---- metric direction ----------------------------------------------------------------------

# Measurements better lower that no suffix rule catches: energy, power and heat for the same
# work, and the host CPU one job of gpu:1/jobs:K burns to drive its share of the GPU (user
# story 000: 150-180% per process). gpu_util and the SM clocks stay higher-is-better.
LOWER_IS_BETTER_COLUMNS = ("energy_j_per_sample", "gpu_power_w", "gpu_temp_max_c",
                           "host_cpu_util_per_job")


def lower_is_better(column: str) -> bool:
    """Times, byte counts, losses, energy, power and temperature are better lower; rates
    (`*_per_s`) and the rest higher.

    `samples_per_s` ends in `_s` too, so rates are recognised first."""
    if column in LOWER_IS_BETTER_COLUMNS:
        return True
    if column.endswith("_per_s"):
        return False
    return column.endswith(("_s", "_s_per_step", "_bytes")) or "loss" in column


# ---- machine load --------------------------------------------------------------------------

# How far load_avg_1m may exceed the machine's cores before a row counts as loaded.
LOAD_SLACK = 0.5


def loaded(row: dict[str, str]) -> bool:
    """True when the machine was busier than its cores when the row started: load_avg_1m >
    cores + 0.5 (threads + 0.5 where cores is missing).

    Not load_avg_1m > threads + 0.5: the load average is a one-minute moving average, so at
    the start of a cpu:1 row it still holds the threads of the cpu (all cores) row that ran
    just before, and every cpu:1 row would be called loaded. trainbench's own earlier rows use
    at most all cores, so a load above the cores means someone else's work was runnable."""
    load = number(row, "load_avg_1m")
    if load is None:
        return False
    cores = number(row, "cores") or number(row, "threads")
    return cores is not None and load > cores + LOAD_SLACK


# ---- machine context -----------------------------------------------------------------------

def context_columns(columns: list[str]) -> list[str]:
    """Machine columns present in the header, then any GPU/driver/CUDA context columns."""
    base = [c for c in MACHINE_COLUMNS if c in columns]
    extra = [c for c in columns
             if c not in base and any(k in c for k in CONTEXT_KEYWORDS)
             and not c.endswith(MEASUREMENT_SUFFIXES) and c not in RUN_OPTION_COLUMNS
             and c not in GPU_TELEMETRY_COLUMNS]
    return base + extra


def distinct(rows, column: str) -> list[str]:
    """Distinct non-empty values of a column, in first-seen order."""
    return list(dict.fromkeys(v for r in rows if (v := (r.get(column) or "").strip())))


def timestamp_range(rows) -> str:
    """`first – last` of the timestamp column (ISO 8601 UTC sorts as text), or one value."""
    stamps = sorted(distinct(rows, "timestamp"))
    if not stamps:
        return "?"
    return stamps[0] if len(stamps) == 1 else f"{stamps[0]} – {stamps[-1]}"


# ---- command-line plumbing -----------------------------------------------------------------

def run_main(main, prog: str) -> int:
    """Runs main() and turns bad input into one line on stderr and exit status 2, so no
    user error ever ends in a traceback."""
    try:
        return main()
    except InputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Output piped into `head`: the reader left, nothing is wrong with the input.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130

"""Reading and validating trainbench CSV files (results/SCHEMA.md, schema_versions 1 to 7).

Shared by scripts/plot.py, compare.py, check_readme.py, predictions_table.py and
reference_table.py so that all accept and refuse the same files with the same messages, and read
a figure the same way (samples: the median over a benchmark's ok repetitions, else its median
aggregate row). Columns are read by name and unknown columns are kept, so files written by later
trainbench versions with extra columns load unchanged, and files of different versions can be
read together.

Every row is read as version 7 writes it: one function, upgrade(), gives older rows what later
versions added, in the order the versions added it: driver_version's version 3 meaning
(_upgrade_driver), version 4's identity (_upgrade_identity: variant, measurement), the facts of
its device kind (_upgrade_kind: device_kind, backend, data_parallel, from tbdevices), version 5's
wall clock (_upgrade_clock: a GPU row's samples_per_s and step_time_s were the device clock's
before), and version 6's comparisons (_upgrade_comparisons: baseline, cpu_baseline,
speedup_vs_cpu, speedup_differs, scaling_efficiency where missing, verdicts, prediction), each by
the rule the C++ writes it with, and version 7's columns (_upgrade_isa: instruction sets,
prediction model, windows), empty where a row did not say. Rows of version 6 and 7 keep what they
wrote. Every row says which clock its throughput is on in a derived field, row["clock"] (never a
CSV column), and the Table lists what was read differently from the file in its notes.

After the upgrade no script parses a device name or a variant word: they read the columns, or
ask tbdevices.py (tests/scripts/test_no_device_parsing.py). Standard library only: compare.py
must run without matplotlib.
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
# every row), version 6 what a row is and what it is compared with; all read the same way (by
# column name, older rows upgraded), so files of any of them can be compared and plotted
# together.
SCHEMA_VERSIONS = ("1", "2", "3", "4", "5", "6", "7")
CURRENT = SCHEMA_VERSIONS[-1]

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
# The columns version 6 appended after emulated_nodes, in header order (SCHEMA.md "Version 6: a
# row says what it is"): its kind's facts, what it is compared with, what the run concluded of
# it, a prediction's algorithm and network, and what a prediction needs of a one-device row.
SCHEMA_6_COLUMNS = ("device_kind", "backend", "data_parallel", "baseline", "cpu_baseline",
                    "speedup_vs_cpu", "speedup_differs", "verdicts", "prediction", "algorithm",
                    "network", "network_busbw_gbps", "network_latency_us", "network_nics",
                    "prediction_inputs")

# The columns version 7 appended after prediction_inputs: the instruction sets oneDNN's kernels and
# trainbench's own CPU kernels ran (machine context), the version of the prediction model that
# made a predicted row, and the samples/s of consecutive windows of a repetition's timed steps
# (what the noise test takes where a row has too few repetitions); empty on older rows, which did
# not say.
SCHEMA_7_COLUMNS = ("onednn_isa", "cpu_isa", "prediction_model", "window_samples_per_s")

# The columns each version appended, by the version that added them (columns of versions 1 and 2
# are in every file these scripts read).
COLUMNS_ADDED_BY = {"3": SCHEMA_3_COLUMNS, "4": SCHEMA_4_COLUMNS, "5": SCHEMA_5_COLUMNS,
                    "6": SCHEMA_6_COLUMNS, "7": SCHEMA_7_COLUMNS}


def version_adding(column: str) -> str | None:
    """The schema version that added a column, or None for one every version has (or none)."""
    return next((v for v, columns in COLUMNS_ADDED_BY.items() if column in columns), None)

# The words of the verdicts column, in the order of trainbench's table (bench/schema/columns.cpp
# verdicts(), `trainbench --list_configs --json`, SCHEMA.md's table of verdicts).
VERDICTS = ("loaded", "above_peak", "slower_than_fp32", "not_scaling", "inside_band",
            "outside_band", "replicas_differ")
# The variant's items in the order trainbench writes them: tbdevices' table, the C++ one.
VARIANT_FLAGS = tbdevices.VARIANT_FLAGS

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

# Columns every row has; the scripts cannot interpret a row without them.
REQUIRED_COLUMNS = ("schema_version", "benchmark", "run_type", "status")

# The machine context written on every row (SCHEMA.md "Machine context"), in the order the
# scripts show it. timestamp is handled separately because it is shown as a range.
MACHINE_COLUMNS = ("host", "cpu_model", "cores", "os", "compiler", "onednn", "onednn_isa", "cpu_isa", "benchmark_lib",
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


def with_module(module: str, install: str) -> str:
    """The fix for a module this Python lacks: Debian's /usr/bin/python3 where that one has it
    (a pyenv or venv python3 first on PATH is the usual cause), else `install`."""
    import os
    import subprocess
    other = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(other) and os.access(other, os.X_OK):
        try:
            if subprocess.run([other, "-c", f"import {module}"], capture_output=True, timeout=60).returncode == 0:
                return f"run it with {other}, which has it"
        except (OSError, subprocess.SubprocessError):
            pass
    return install


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
        if any(any(cell.strip() for cell in cells) for cells in reader):
            raise InputError(f"{path}: not a trainbench CSV (line 1 is blank where the header "
                             f"starting with schema_version should be)")
        raise InputError(f"{path}: empty file (no header, no rows)")
    if "schema_version" not in header:
        raise InputError(f"{path}: not a trainbench CSV (no schema_version column)")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: not a trainbench CSV (missing column {', '.join(missing)})")
    table = Table(path, list(header))
    for cells in reader:
        line = reader.line_num
        if not cells:
            continue  # a blank line, e.g. a trailing newline added by an editor
        if cells == header:
            continue  # a file concatenated without `tail -n +2`: same header, harmless
        if len(cells) < len(header):
            # A row cut short (a full disk, a killed run) that the next run left on its own line
            # (trainbench's CsvWriter): the rows around it are whole.
            print(f"note: {path}: line {line} has {len(cells)} of the header's {len(header)} fields, a row "
                  f"cut short (a full disk, a killed run?): left out", file=sys.stderr)
            continue
        if len(cells) > len(header):
            raise InputError(f"{path}: line {line} has {len(cells)} fields, the header has "
                             f"{len(header)} (rows glued together, or edited?)")
        row = dict(zip(header, cells))
        version = row["schema_version"]
        if version not in SCHEMA_VERSIONS:
            raise InputError(f"{path}: line {line}: unknown schema_version {version!r} "
                             f"(these scripts read versions {', '.join(SCHEMA_VERSIONS)})")
        table.rows.append(row)
    if not table.rows:
        raise InputError(f"{path}: empty CSV (a header but no rows)")
    upgrade(table)
    return table


# ---- the upgrade: every row as version 7 writes it ------------------------------------------

def older(row: dict[str, str]) -> bool:
    """A row of a version before 6, which said what it is: the upgrade gives it version 6's
    columns, comparisons and verdicts."""
    return row["schema_version"] in SCHEMA_VERSIONS[:SCHEMA_VERSIONS.index("6")]


def upgrade(table: Table) -> None:
    """Gives every older row of a file what the later versions added, one version's change after
    another (each step reads what the earlier ones gave): driver_version's meaning (version 3),
    the row's identity (version 4), its kind's facts (version 6's device_kind, backend and
    data_parallel, which the clock needs to tell a GPU row), the wall clock (version 5), then what
    version 6 compares it with and concludes of it, over the file's rows as the wall clock left
    them. Rows of version 6 keep what they wrote."""
    for row in table.rows:
        _upgrade_driver(row)
        _upgrade_identity(row)
        _upgrade_kind(row)
    if any(older(r) for r in table.rows):
        if "cuda_driver_version" not in table.columns and "driver_version" in table.columns:
            table.columns.append("cuda_driver_version")
        table.columns += [c for c in ("variant", "measurement") + SCHEMA_6_COLUMNS
                          if c not in table.columns]
    _upgrade_clock(table)
    _upgrade_comparisons(table)
    _upgrade_isa(table)


def _upgrade_isa(table: Table) -> None:
    """Gives a row without them version 7's columns (instruction sets, prediction model), empty: it
    did not say."""
    lacking = [r for r in table.rows if any(c not in r for c in SCHEMA_7_COLUMNS)]
    for row in lacking:
        for column in SCHEMA_7_COLUMNS:
            row.setdefault(column, "")
    if lacking:
        table.columns += [c for c in SCHEMA_7_COLUMNS if c not in table.columns]


def _upgrade_driver(row: dict[str, str]) -> None:
    """Gives a version 1 or 2 row the version 3 meaning of driver_version: its value moves to
    cuda_driver_version and driver_version is left empty (not recorded then). Without this, a
    machine's v2 and v3 rows would show two "driver versions" (13.0 and 580.159.04) that are
    two different things, and compare.py would call the same driver a difference."""
    if row["schema_version"] in ("1", "2") and "cuda_driver_version" not in row:
        row["cuda_driver_version"] = row.get("driver_version", "")
        row["driver_version"] = ""


def _upgrade_identity(row: dict[str, str]) -> None:
    """Gives every row version 4's identity: a variant, a measurement kind, and a benchmark
    name that ends with the variant. Before version 4 the variant is derived from the run
    option columns (cuda_graph=1, data_on_device=1), so that a run with --data_on_device and
    one without no longer merge into one bar or one comparison; an --optimizer that differs
    from the model's default left no trace then and cannot be recovered. A shared-device or
    predicted row must never pass for a plain one, even if a writer forgot its variant item."""
    legacy = row["schema_version"] in ("1", "2", "3") or "variant" not in row
    written = "" if legacy else row["variant"].strip()
    row["measurement"] = (row.get("measurement") or "").strip() or "measured"
    row["variant"] = tbdevices.older_row_variant(row, legacy)
    name = row["benchmark"].removesuffix("/" + written) if written else row["benchmark"]
    if row["variant"]:
        row["benchmark"] = f"{name}/{row['variant']}"


def _upgrade_kind(row: dict[str, str]) -> None:
    """Gives an older row version 6's facts of its kind, as trainbench's table of kinds plans
    them (tbdevices.kind_of), and empty cells for the rest of version 6's columns, which
    _upgrade_comparisons fills."""
    if not older(row):
        return
    facts = tbdevices.older_row_kind(field_of(row, "device"), row)
    for column in SCHEMA_6_COLUMNS:
        row[column] = ""
    row["device_kind"], row["backend"] = facts.name, facts.backend
    row["data_parallel"] = str(facts.data_parallel) if facts.data_parallel else ""


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
    compared with a CPU's on another clock. A measured row's scaling_efficiency was over the
    device clock's rates: it is left empty here, and taken again on the wall clock by the
    comparisons that follow (_upgrade_comparisons). Predicted rows are made from their source
    row's step, so they follow it (_rederive_predicted)."""
    moved: dict[str, int] = {}  # what was upgraded, by kind: the table's notes count them
    for row in table.rows:
        row[CLOCK] = CLOCK_WALL
        if not _device_clock_row(row) or is_predicted(row):
            continue
        if _read_wall_clock(row):
            kind = "jobs" if row["device_kind"] == tbdevices.GPU_JOBS else "measured"
            moved[kind] = moved.get(kind, 0) + 1
            row["scaling_efficiency"] = ""  # the device clock's: taken again on the wall clock
        else:
            _keep_device_clock(row)
            moved["device"] = moved.get("device", 0) + 1
    rederived, kept = _rederive_predicted(table)
    if moved or rederived or kept:
        table.columns += [c for c in ("device_step_time_s", "device_samples_per_s")
                          if c not in table.columns]
    versions = "/".join(sorted({r["schema_version"] for r in table.rows if r["schema_version"] < "5"}))
    path = table.path
    if moved.get("measured"):
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
    return (row["schema_version"] in SCHEMA_VERSIONS[:4] and on_gpu(row)
            and field_of(row, "kind") == "train" and not is_epoch_row(row)
            and number(row, "samples_per_s") is not None)


def _set(row: dict[str, str], column: str, value: float | None) -> None:
    """A figure as trainbench writes it ({:.6g}), or an empty cell."""
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
        replicas = number(row, "replicas") or number(row, "data_parallel")
        batch = number(row, "batch") or number(parse_name(row["benchmark"]), "batch")
        if source is None or comm is None or not replicas or not batch:
            _keep_device_clock(row)
            kept += 1
            continue
        wall = source.center
        step = wall + comm
        rate = replicas * batch / step
        row["device_step_time_s"], row["device_samples_per_s"] = (row["step_time_s"],
                                                                  row["samples_per_s"])
        _set(row, "step_time_s", step)
        _set(row, "samples_per_s", rate)
        # N x batch / step over N x (batch / wall), as predict.cpp takes it: the two steps' ratio.
        _set(row, "scaling_efficiency", scaling_efficiency(rate, replicas, batch / wall))
        _set(row, "comm_share", comm / step)
        row[CLOCK] = CLOCK_REDERIVED
        done += 1
    return done, kept


# ---- version 6's comparisons -----------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """What a speedup pairs: the workload, precision, batch and variant of a row."""
    kind: str
    model: str
    dataset: str
    precision: str
    batch: str
    variant: str


def workload_of(row: dict[str, str]) -> Workload:
    return Workload(*(field_of(row, c) for c in ("kind", "model", "dataset", "precision", "batch")),
                    row.get("variant", ""))


def cpu_pair(wanted: Workload, cpus) -> Workload | None:
    """The one rule of a speedup over the CPU (bench/plan/baselines.cpp cpu_row): among the cpu
    rows (all cores) given, in their order, the one of the same workload and variant without
    what only a GPU row has (tbdevices.cpu_row_variant), in the wanted precision where the CPU
    ran it (else fp32, the CPU's only one), in its batch where the CPU ran it (else the first
    cpu row's). trainbench pairs a run's own rows with it when it plans them (the
    cpu_baseline column; the upgrade pairs older rows alike); the scripts use it for what the
    C++ never sees, a row of a reference machine over this machine's cpu row."""
    variant = tbdevices.cpu_row_variant(wanted.variant)
    best, best_score = None, -1
    for c in cpus:
        # Both sides without what only a GPU row has: a cpu row under --data_on_device carries it.
        if (c.kind, c.model, c.dataset, tbdevices.cpu_row_variant(c.variant)) != (
                wanted.kind, wanted.model, wanted.dataset, variant):
            continue
        if c.precision != wanted.precision and c.precision != "fp32":
            continue
        score = 4 * (c.variant == wanted.variant) + 2 * (c.precision == wanted.precision) + (c.batch == wanted.batch)
        if score > best_score:
            best, best_score = c, score
    return best


def pair_differs(wanted: Workload, cpu: Workload) -> str:
    """What differs between a row and its cpu row, as the speedup_differs column says it:
    `bf16 vs fp32, bs 128 vs 8`; empty where precision and batch agree."""
    parts = []
    if cpu.precision != wanted.precision:
        parts.append(f"{wanted.precision} vs {cpu.precision}")
    if cpu.batch != wanted.batch:
        parts.append(f"bs {wanted.batch} vs {cpu.batch}")
    return ", ".join(parts)


def _machine_run(row: dict[str, str]) -> tuple:
    """Rows compared with each other: one machine and build of one file, one framework (the C++
    pairs a run's own rows; an older file's cpu row may come from another run of the machine)."""
    return (row.get("host", ""), row.get("cpu_model", ""), row.get("cores", ""),
            row.get("git_commit", ""), row.get("framework", "") or "trainbench")


def _upgrade_comparisons(table: Table) -> None:
    """Gives the older rows of a file what version 6 compares them with and concludes of them,
    by the C++'s rules, over the rows of the same machine, build and framework in the file:
    baseline (bench/plan/baselines.cpp), cpu_baseline and speedup_differs (cpu_pair),
    speedup_vs_cpu and scaling_efficiency where missing (bench/run/run.cpp comparisons: over
    the median samples/s of the baseline's ok repetitions), and the verdicts of the
    repetitions: loaded (bench/run/harness.cpp), above_peak, not_scaling, slower_than_fp32, and
    inside_band or outside_band with the prediction they were compared with
    (bench/predict/predict.cpp compare). replicas_differ cannot be recovered: older rows said it
    in their message only."""
    groups: dict = {}
    for row in table.rows:
        groups.setdefault(_machine_run(row), []).append(row)
    for rows in groups.values():
        if any(older(r) for r in rows):
            _compare_group(rows)
    _verdict_loaded(table.rows)


def _compare_group(rows: list[dict[str, str]]) -> None:
    measured = [r for r in rows if not is_predicted(r)]
    rates = samples(measured, lambda r: r["benchmark"], "samples_per_s")
    median = {name: s.center for name, s in rates.items() if s.center > 0}
    cpus: dict[Workload, str] = {}  # the cpu rows (all cores) not skipped, by workload
    for r in measured:
        if tbdevices.is_all_cores(r["device_kind"]) and r.get("status") != "skipped":
            cpus.setdefault(workload_of(r), r["benchmark"])
    ones: dict[tuple, str] = {}  # the one-device rows, by device and workload
    for r in measured:
        if tbdevices.is_one_replica(r["device_kind"]):
            ones.setdefault((field_of(r, "device"), workload_of(r)), r["benchmark"])
    predictions = [r for r in rows if is_predicted(r) and is_iteration(r)]
    for row in rows:
        if not older(row):
            continue
        _pair(row, cpus, ones)
        if is_predicted(row):
            continue
        _figures(row, median)
        if is_iteration(row) and is_ok(row):
            _verdicts(row, median, ones, measured, predictions)


def _pair(row: dict[str, str], cpus: dict, ones: dict) -> None:
    """baseline, cpu_baseline and speedup_differs: what the row's figures are over."""
    n = data_parallel(row)
    w = workload_of(row)
    if is_predicted(row):
        row["baseline"] = (row.get("predicted_from") or "").strip()
    elif n and n >= 2:
        device = tbdevices.one_device(row["backend"], (row.get("threads") or "").strip())
        one = ones.get((device, Workload(w.kind, w.model, w.dataset, w.precision, w.batch,
                                         tbdevices.scaling_variant(w.variant))))
        row["baseline"] = one or ""
    if (w.kind != "train" or tbdevices.is_all_cores(row["device_kind"]) or is_predicted(row)
            or tbdevices.checks_only(row["device_kind"])):
        return
    cpu = cpu_pair(w, list(cpus))
    if cpu is not None:
        row["cpu_baseline"] = cpus[cpu]
        row["speedup_differs"] = pair_differs(w, cpu)


def _figures(row: dict[str, str], median: dict) -> None:
    """speedup_vs_cpu, and scaling_efficiency where the row did not write one: the row's
    samples/s over its cpu row's median, over N times its baseline's median. An aggregate row
    holds the statistic of its repetitions' figures: the mean, median and standard deviation
    scale as samples/s does, the cv is samples/s's."""
    rate = number(row, "samples_per_s")
    if rate is None or row.get("status") != "ok":
        return
    cv = row.get("run_type") == "aggregate" and row.get("aggregate") == "cv"
    cpu = median.get(row["cpu_baseline"])
    if cpu:
        _set(row, "speedup_vs_cpu", rate if cv else rate / cpu)
    n = data_parallel(row)
    one = median.get(row["baseline"])
    if n and n > 1 and one and number(row, "scaling_efficiency") is None:
        _set(row, "scaling_efficiency", rate if cv else scaling_efficiency(rate, n, one))


def _verdicts(row, median: dict, ones: dict, measured: list, predictions: list) -> None:
    """An ok repetition's verdicts but `loaded` (_verdict_loaded), in the order trainbench reaches
    them, and the prediction it was compared with."""
    words = []
    rate = number(row, "samples_per_s") or 0
    if above_peak(number(row, "utilisation")):
        words.append("above_peak")
    n = data_parallel(row)
    one = median.get(row["baseline"])
    if n and n > 1 and one and rate < one:
        words.append("not_scaling")
    if _slower_than_fp32(row, rate, median, ones):
        words.append("slower_than_fp32")
    prediction = _prediction_of(row, predictions) if n and n >= 2 and rate > 0 else None
    if prediction is not None:
        low, high = number(prediction, "samples_per_s_low"), number(prediction, "samples_per_s_high")
        row["prediction"] = prediction["benchmark"]
        words.append("inside_band" if low <= rate <= high else "outside_band")
    row["verdicts"] = join_verdicts(verdicts(row) + words)


def _slower_than_fp32(row, rate: float, median: dict, ones: dict) -> bool:
    """A GPU one-device train/ row in a precision other than fp32 with fewer samples/s than the
    median of the same row in fp32 (bench/run/run_train.cpp note_slower_than_fp32)."""
    w = workload_of(row)
    if not (on_gpu(row) and tbdevices.is_one_replica(row["device_kind"]) and w.kind == "train"
            and w.precision != "fp32"):
        return False
    fp32 = ones.get((field_of(row, "device"), Workload(w.kind, w.model, w.dataset, "fp32", w.batch,
                                                       w.variant)))
    return bool(fp32 and median.get(fp32) and rate < median[fp32])


def _prediction_of(row: dict[str, str], predictions: list) -> dict[str, str] | None:
    """The predicted row a measured data-parallel row is compared with (predict.cpp compare): of
    the same model, dataset, precision, batch, device and variant less where the ranks ran and
    what a prediction assumes, made from a one-device row of the ranks' threads, the one over
    the measured link where there is one, else the first; None without one, or without a band
    (rows before version 5)."""
    key = _prediction_key(row)
    chosen = None
    for p in predictions:
        if _prediction_key(p) != key or p.get("threads", "") != row.get("threads", ""):
            continue
        if chosen is None or (p.get("link") == MEASURED_LINK and chosen.get("link") != MEASURED_LINK):
            chosen = p
    if chosen is None or None in (number(chosen, "samples_per_s_low"),
                                  number(chosen, "samples_per_s_high")):
        return None
    return chosen


# The link of a prediction over this run's own measured link (--link=measured).
MEASURED_LINK = "measured"


def _prediction_key(row: dict[str, str]) -> tuple:
    return (field_of(row, "model"), field_of(row, "dataset"), field_of(row, "precision"),
            field_of(row, "batch"), tbdevices.comparable_variant(row.get("variant", "")),
            field_of(row, "device"))


# How far load_avg_1m may exceed the threads a run used before a row counts as loaded
# (bench/run/harness.cpp kSlack).
LOAD_SLACK = 1.0


def started_loaded(load: float | None, threads_used: float) -> bool:
    """The rule of the `loaded` verdict (bench/run/harness.cpp Harness::loaded): the load average
    when the row started, above the most threads (and loader workers) its run had used so far,
    this row's included, + LOAD_SLACK. The upgrade judges older rows by it, and the PyTorch peer
    its own rows."""
    return load is not None and load > threads_used + LOAD_SLACK


def above_peak(utilisation: float | None) -> bool:
    """The `above_peak` verdict of a row that names no more than its utilisation (older rows, the
    PyTorch peer's): above 1, so the peak it is over was measured low or the FLOP count is high.
    trainbench's own rows first take out the convolutions' products with their zero padding,
    which its small-plane convolutions skip (bench/run/run.cpp note_utilisation)."""
    return utilisation is not None and utilisation > 1


def _verdict_loaded(rows: list[dict[str, str]]) -> None:
    """`loaded` on the older ok repetitions that started with the machine's load average above
    the most threads (and loader workers) the run had used so far, this row's included, + 1
    (bench/run/harness.cpp loaded): a run is a machine's rows of one start time, in file order;
    a skipped row used none."""
    used: dict[tuple, float] = {}
    for row in rows:
        if not is_iteration(row) or is_predicted(row) or row.get("status") == "skipped":
            continue
        run = (row.get("host", ""), row.get("timestamp", ""), row.get("git_commit", ""))
        threads = (number(row, "threads") or 0) + (number(row, "loader_workers") or 0)
        used[run] = max(used.get(run, 0), threads)
        if older(row) and is_ok(row) and started_loaded(number(row, "load_avg_1m"), used[run]):
            row["verdicts"] = join_verdicts(["loaded"] + verdicts(row))



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


def context_numbers(rows, column: str) -> list[float]:
    """A context column's numbers (load_avg_1m, sgemm_gflops) over the rows of single runs:
    repetitions and epochs, not Google Benchmark's aggregate rows, whose counters are the mean,
    median, stddev or cv of the repetitions' (a load's stddev or cv is no load). Where the rows
    are aggregates only (--benchmark_report_aggregates_only), their median aggregates'."""
    single = [v for r in rows if r.get("run_type", "") != "aggregate"
              and (v := number(r, column)) is not None]
    return single or [v for r in rows if is_median_aggregate(r)
                      and (v := number(r, column)) is not None]


def is_epoch_row(row: dict[str, str]) -> bool:
    """Per-epoch rows (time-to-accuracy runs) are curves, not steady-state steps."""
    return row.get("benchmark", "").startswith("epochs/") or bool(row.get("epoch", "").strip())


def parse_name(benchmark: str) -> dict[str, str]:
    """The parts of a benchmark name (kind, model, dataset, device, precision, batch; empty
    strings for parts a name lacks), as tbdevices reads trainbench's names; used where a row's
    own columns are empty."""
    return tbdevices.name_parts(benchmark)


def is_predicted(row: dict[str, str]) -> bool:
    """A prediction of N-device scaling (schema 4, issue 24), never a measured figure."""
    return row.get("measurement", "") == "predicted"


def is_replayed(row: dict[str, str]) -> bool:
    """A one-device row's steps replayed across ranks (schema 6, --replay_from)."""
    return row.get("measurement", "") == "replayed"


# ---- what a row is (schema 6's columns; older rows get them from upgrade) --------------------

def on_gpu(row: dict[str, str]) -> bool:
    """A GPU computed the row's steps (a predicted row: its source's GPU)."""
    return row.get("backend", "") == tbdevices.GPU


def data_parallel(row: dict[str, str]) -> int | None:
    """N devices of their own sharing gradients (the N of scaling_efficiency), else None."""
    n = number(row, "data_parallel")
    return int(n) if n else None


def scaling_efficiency(samples_per_s: float, devices: float, one_device_samples_per_s: float) -> float:
    """Scaling efficiency, the one definition the scripts use: the samples/s of N devices sharing
    gradients over N times one device's samples/s alone (1: perfect scaling). It is the same
    definition as trainbench's (engine/core/stats.hpp scaling_efficiency), which a measured row's
    (bench/run/run.cpp comparisons) and a predicted row's (engine/parallel/predict.cpp) take; the
    upgrade gives older rows the column by it."""
    return samples_per_s / (devices * one_device_samples_per_s)


def checks_only(row: dict[str, str]) -> bool:
    """A row that checks a path (replicas sharing one GPU, GPU ranks as emulated nodes): no
    speedup, no scaling."""
    return tbdevices.checks_only(row.get("device_kind", ""))


def verdicts(row: dict[str, str]) -> list[str]:
    """The row's verdicts column as words (VERDICTS)."""
    return [w for w in (row.get("verdicts") or "").split("+") if w]


def join_verdicts(words) -> str:
    """Words as the verdicts column holds them: each once, joined by `+`, in the order given."""
    return "+".join(dict.fromkeys(words))


def loaded(row: dict[str, str]) -> bool:
    """The machine was busy with other work when the row started: its `loaded` verdict (load
    average above the threads the run had used so far + 1, bench/run/harness.cpp; older rows get
    it from the upgrade by the same rule)."""
    return "loaded" in verdicts(row)


def field_of(row: dict[str, str], column: str) -> str:
    """A row's identity column, falling back to the part of the benchmark name."""
    value = (row.get(column) or "").strip()
    return value or parse_name(row.get("benchmark", ""))[column]


# A device's place among devices (cpu, cpu:1, ..., gpu:1, ...), as tbdevices orders them.
device_sort_key = tbdevices.sort_key


# ---- samples -------------------------------------------------------------------------------

@dataclass
class Sample:
    """The values of one metric for one benchmark: the ok repetitions, or when a side has
    only aggregates, the single median aggregate; and the windows of its repetitions' timed
    steps, where the rows have them (schema 7: window_samples_per_s)."""
    values: list[float]
    source: str  # "iterations" or "median aggregate"
    windows: list[float] = field(default_factory=list)

    @property
    def center(self) -> float:
        return statistics.median(self.values)

    @property
    def repetitions(self) -> int:
        return len(self.values) if self.source == "iterations" else 0


# The metrics a row's windows can be read in: its samples/s as written, its step times derived.
WINDOW_METRICS = ("samples_per_s", "step_time_s", "wall_step_time_s")


def window_values(row: dict[str, str], metric: str) -> list[float]:
    """The metric over each window of the row's timed steps (window_samples_per_s, schema 7):
    samples/s as written; a step time as the row's step time scaled by the row's samples/s over
    the window's. Empty for another metric or a row without windows."""
    text = row.get("window_samples_per_s") or ""
    if metric not in WINDOW_METRICS or not text:
        return []
    try:
        rates = [float(v) for v in text.split(";") if v]
    except ValueError:
        return []
    if metric == "samples_per_s":
        return rates
    step, sps = number(row, metric), number(row, "samples_per_s")
    if not step or not sps:
        return []
    return [step * sps / r for r in rates if r > 0]


def samples(rows, key, metric: str) -> dict:
    """Groups rows by key(row) and returns key -> Sample of the metric.

    Uses the ok iteration rows that have a value; a key with none of those falls back to its
    ok `median` aggregate rows (files written with --benchmark_report_aggregates_only). Other
    aggregates are never used: `cv` is a ratio in every column and `stddev` is not a level.
    Each Sample also holds its iteration rows' window values (window_values).
    """
    iterations: dict = {}
    medians: dict = {}
    windows: dict = {}
    for row in rows:
        if not is_ok(row):
            continue
        value = number(row, metric)
        if value is None:
            continue
        if is_iteration(row):
            iterations.setdefault(key(row), []).append(value)
            windows.setdefault(key(row), []).extend(window_values(row, metric))
        elif is_median_aggregate(row):
            medians.setdefault(key(row), []).append(value)
    out = {k: Sample(v, "iterations", windows.get(k, [])) for k, v in iterations.items()}
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


# ---- machine context -----------------------------------------------------------------------

def context_columns(columns: list[str]) -> list[str]:
    """Machine columns present in the header, then any GPU/driver/CUDA context columns."""
    base = [c for c in MACHINE_COLUMNS if c in columns]
    extra = [c for c in columns
             if c not in base and any(k in c for k in CONTEXT_KEYWORDS)
             and not c.endswith(MEASUREMENT_SUFFIXES) and c not in RUN_OPTION_COLUMNS
             and c not in GPU_TELEMETRY_COLUMNS]
    return base + extra


def figure(x: float) -> str:
    """A figure as the tables and labels write it: 3 significant digits, whole numbers with
    separators from 100 (`17,560`, `999.7` as `1,000`, never `1e+03`)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


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

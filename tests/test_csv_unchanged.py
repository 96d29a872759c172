"""The CSV a fixed-seed run writes, held against one committed from the same run (issue 55: a
change to how rows are made must leave behaviour and CSV byte-for-byte unchanged). Compared:
every column but the machine's context and what a clock, the load or this CPU's floating-point
path decides (EXCLUDED below says which and why). Two runs: the CPU rows of three models,
with repetitions (aggregate rows) and a configuration this machine skips (mpi:2 outside
mpirun), and --predict_from over the H100 reference CSV (predicted rows: every figure they
hold is arithmetic over the file, so all of them are compared); a third, rows of epochs and of
jobs (processes timed on one window: their message says each job's rate, and is left out).

When a change is meant to change the CSV (a new column, a new note), regenerate the files with
TB_UPDATE_CSV=1 and say why in the commit: the diff of tests/csv_unchanged/ shows what moved.
The binary comes from $TRAINBENCH (set by ctest)."""
import csv
import io
import os
import subprocess
from pathlib import Path

import pytest

BINARY = os.environ.get("TRAINBENCH", "build/release/bench/trainbench")
HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "csv_unchanged"
REFERENCE = HERE.parent / "results" / "h100" / "default-20261127T060200Z.csv"

# The machine's context (results/SCHEMA.md): another machine, build or day writes others.
CONTEXT = {"host", "os", "cpu_model", "cores", "compiler", "onednn", "benchmark_lib", "git_commit", "timestamp",
           "gpu_name", "gpu_cc", "gpu_sms", "gpu_memory_gib", "gpu_clock_mhz", "gpu_memory_clock_mhz",
           "driver_version", "cuda_version", "cudnn_version", "cublas_version", "nccl_version",
           "cuda_driver_version", "sgemm_gflops", "onednn_isa", "cpu_isa"}
# What a clock measured (times, rates, what is derived from them), the load, the memory the
# process reached, and the loss after the timed steps (its last digits follow the kernels this
# CPU's instruction set picks; the first batch's loss does not, and is compared).
MEASURED = {"step_time_s", "wall_step_time_s", "samples_per_s", "model_tflops", "peak_gflops", "utilisation",
            "host_cpu_s_per_step", "host_cpu_util", "peak_rss_bytes", "data_s_per_step", "forward_s_per_step",
            "backward_s_per_step", "update_s_per_step", "data_wait_s_per_step", "load_avg_1m", "peak_spread",
            "window_samples_per_s", "prediction_inputs", "loss_last"}
EXCLUDED = CONTEXT | MEASURED

RUN = ["--benchmark_filter=train/(mlp/mnist|lenet5/cifar10|lstm/sine)/", "--devices=cpu:1,mpi:2", "--iterations=6",
       "--seed=3", "--benchmark_repetitions=2"]
# Epochs train one replica: on cpu:1 (on cpu:1/jobs:2 they are skipped since 2026-11-29).
EPOCHS_AND_JOBS = ["--benchmark_filter=(epochs/(lstm/sine|mlp/mnist)/cpu:1/fp32|train/mlp/mnist/cpu:1/jobs:2/)",
                   "--devices=cpu:1,cpu:1/jobs:2", "--epochs=2", "--iterations=4", "--seed=3"]
# What else a clock or the instruction set decides in those rows (a jobs row's iterations: the
# steps the jobs completed in their common window).
EPOCHS_AND_JOBS_MEASURED = {"elapsed_s", "train_loss", "val_loss", "jobs_window_s", "host_cpu_util_per_job",
                            "iterations"}
PREDICT = [f"--predict_from={REFERENCE}", "--devices=gpu:8", "--link=nvlink4", "--gpus_per_node=4", "--nodes=2",
           "--network=ib_ndr400x8"]


def compared(path: Path, excluded: set[str]) -> tuple[list[str], list[list[str]]]:
    """The compared columns of the CSV at `path` and its rows' cells in them. The 'loaded'
    verdict follows the machine's load when a row started, so it is taken out of verdicts; a
    jobs row's message says each job's rate, and is left out."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
        header = list(rows[0].keys()) if rows else []
    columns = [c for c in header if c not in excluded]
    cells = []
    for row in rows:
        words = [w for w in row["verdicts"].split("+") if w and w != "loaded"]
        row["verdicts"] = "+".join(words)
        if "/jobs:" in row["benchmark"] and row["status"] == "ok":
            row["message"] = ""
        cells.append([row[c] for c in columns])
    return columns, cells


def as_text(columns: list[str], cells: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(cells)
    return out.getvalue()


def differences(columns: list[str], cells: list[list[str]], expected: list[list[str]], where: str) -> list[str]:
    """What differs between a run's compared cells and the expected file's rows (its header
    first), each naming the row and the column; empty where nothing does."""
    if columns != expected[0]:
        return [f"the compared columns changed (added: {sorted(set(columns) - set(expected[0]))}, gone: "
                f"{sorted(set(expected[0]) - set(columns))}): a schema change regenerates {where} with TB_UPDATE_CSV=1"]
    if len(cells) != len(expected) - 1:
        return [f"{len(cells)} rows where {where} has {len(expected) - 1}"]
    out = []
    for i, (got, want) in enumerate(zip(cells, expected[1:])):
        for c, g, w in zip(columns, got, want):
            if g != w:
                out.append(f"row {i + 1} ({want[columns.index('benchmark')]}, {want[columns.index('run_type')]}) "
                           f"{c}: {w!r} in {where}, {g!r} now")
    return out


def read_expected(name: str) -> tuple[Path, list[list[str]]]:
    path = EXPECTED / f"{name}.csv"
    with open(path, newline="") as f:
        return path, list(csv.reader(f))


@pytest.mark.parametrize("name, args, excluded", [("fixed-seed-run", RUN, EXCLUDED),
                                                   ("epochs-and-jobs", EPOCHS_AND_JOBS, EXCLUDED | EPOCHS_AND_JOBS_MEASURED),
                                                   ("predicted-from-h100", PREDICT, EXCLUDED)])
def test_the_csv_is_what_it_was(tmp_path, name, args, excluded):
    out = tmp_path / f"{name}.csv"
    r = subprocess.run([BINARY, *args, f"--csv={out}"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    columns, cells = compared(out, excluded)
    assert len(cells) >= 7, f"{out}: {len(cells)} rows"
    if os.environ.get("TB_UPDATE_CSV") == "1":
        EXPECTED.mkdir(exist_ok=True)
        (EXPECTED / f"{name}.csv").write_text(as_text(columns, cells))
        pytest.skip(f"TB_UPDATE_CSV=1: wrote {EXPECTED / name}.csv")
    path, expected = read_expected(name)
    differ = differences(columns, cells, expected, str(path))
    assert not differ, f"{len(differ)} difference(s):\n" + "\n".join(differ[:20])


def test_a_changed_cell_a_lost_row_and_a_new_column_are_each_named():
    """The comparison can fail: a copy of the expected rows with one cell changed, one row
    fewer or one column more is reported, naming what moved."""
    path, expected = read_expected("predicted-from-h100")
    columns, cells = expected[0], [list(r) for r in expected[1:]]
    assert differences(columns, cells, expected, "x") == []
    band = columns.index("samples_per_s_low")
    assert cells[0][band], "the predicted rows carry their band"
    cells[0][band] = "1"
    [line] = differences(columns, cells, expected, "x")
    assert line.startswith("row 1 (train/") and "samples_per_s_low" in line and "'1' now" in line
    assert "rows where x has" in differences(columns, cells[1:], expected, "x")[0]
    assert "added: ['new_column']" in differences(columns + ["new_column"], cells, expected, "x")[0]

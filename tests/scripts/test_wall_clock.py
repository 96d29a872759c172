"""Schema 5's wall clock (issue 31): tbcsv reads version 5 as written and moves older GPU rows to
the wall clock on read (measured rows from their wall_step_time_s, jobs rows by the same ratio,
predicted rows re-derived from their source row), marks each row's clock and notes what it did
once per file; a row it cannot move keeps the device clock and says so. Small CSVs written here,
and the committed H100 run."""
import csv
import statistics
from pathlib import Path

import pytest

from conftest import ROOT, load_generator, run_script

GENERATE = load_generator()
H100_RUN = ROOT / "results" / "h100" / "default-20261124.csv"
MLP_GPU = "train/mlp/mnist/gpu:1/fp32/bs:100"


def approx(value):
    """The CSV's 6 significant digits."""
    return pytest.approx(value, rel=1e-5)


def gpu_row(version="4", device="gpu:1", step=0.001, wall=0.002, batch=100, replicas=1, **cells):
    """One ok repetition of the MLP: samples/s = batch x replicas / step (the device clock
    before version 5); wall=None leaves wall_step_time_s empty."""
    rate = batch * replicas / step
    row = {"schema_version": version, "benchmark": f"train/mlp/mnist/{device}/fp32/bs:{batch}",
           "kind": "train", "model": "mlp", "dataset": "mnist", "device": device,
           "precision": "fp32", "batch": str(batch), "framework": "trainbench",
           "run_type": "iteration", "repetition": "0", "status": "ok", "step_time_s": f"{step:g}",
           "samples_per_s": f"{rate:g}", "wall_step_time_s": "" if wall is None else f"{wall:g}",
           "model_tflops": f"{rate * 1e7 / 1e12:g}", "utilisation": f"{rate * 1e7 / 1e12 / 67:g}",
           "replicas": str(replicas), "host": "h", "measurement": "measured"}
    row.update({k: str(v) for k, v in cells.items()})
    return row


def write(tmp_path: Path, rows, header=None, name="run.csv") -> str:
    path = tmp_path / name
    header = header or GENERATE.V4_HEADER
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, header, restval="", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return str(path)


def read(tbcsv_mod, tmp_path, rows, **kw):
    return tbcsv_mod.read_table(write(tmp_path, rows, **kw))


def test_a_schema_4_gpu_row_is_read_on_the_wall_clock(tbcsv_mod, tmp_path):
    table = read(tbcsv_mod, tmp_path, [gpu_row(step=0.001, wall=0.0025)])
    row, = table.rows
    assert row["clock"] == tbcsv_mod.CLOCK_READ == "wall (read from wall_step_time_s)"
    assert float(row["samples_per_s"]) == approx(100 / 0.0025)  # 40,000, not 100,000
    assert float(row["step_time_s"]) == approx(0.0025)
    assert float(row["device_samples_per_s"]) == approx(100 / 0.001)
    assert float(row["device_step_time_s"]) == approx(0.001)
    assert float(row["model_tflops"]) == approx(40000 * 1e7 / 1e12)
    assert float(row["utilisation"]) == approx(40000 * 1e7 / 1e12 / 67)
    assert not tbcsv_mod.on_device_clock(row)
    assert table.notes == [f"{table.path}: schema 4 GPU rows: samples_per_s read on the wall "
                           f"clock from wall_step_time_s (the device clock is kept as "
                           f"device_samples_per_s)"]
    assert table.columns[-6:] == ["device_step_time_s", "device_samples_per_s", "onednn_isa", "cpu_isa",
                                  "prediction_model", "window_samples_per_s"]


def test_cpu_epoch_and_schema_5_rows_are_left_as_written(tbcsv_mod, tmp_path):
    cpu = gpu_row(device="cpu", step=0.01, wall=0.01)
    epoch = gpu_row(step=0.001, wall=0.002, epoch=1, run_type="epoch")
    epoch["benchmark"] = epoch["benchmark"].replace("train/", "epochs/")
    epoch["kind"] = "epochs"
    table = read(tbcsv_mod, tmp_path, [cpu, epoch])
    assert [r["samples_per_s"] for r in table.rows] == [cpu["samples_per_s"], epoch["samples_per_s"]]
    assert {r["clock"] for r in table.rows} == {"wall"} and table.notes == []
    # Version 5: step_time_s is the wall clock already, the device clock has its own columns.
    v5 = gpu_row(version="5", step=0.002, wall=0.002, device_step_time_s=0.001,
                 device_samples_per_s=100000)
    table = read(tbcsv_mod, tmp_path, [v5], header=GENERATE.V5_HEADER)
    row, = table.rows
    assert (row["samples_per_s"], row["device_samples_per_s"]) == ("50000", "100000")
    assert row["clock"] == "wall" and table.notes == []


@pytest.mark.parametrize("wall", [None, -0.002])  # a negative step is no wall clock either
def test_a_gpu_row_without_a_wall_clock_keeps_the_device_clock_and_says_so(tbcsv_mod, tmp_path, wall):
    table = read(tbcsv_mod, tmp_path, [gpu_row(wall=wall), gpu_row(device="cpu", wall=0.01)])
    gpu, cpu = table.rows
    assert gpu["samples_per_s"] == "100000" and gpu["device_samples_per_s"] == "100000"
    assert gpu["clock"] == "device (no wall clock recorded)" and tbcsv_mod.on_device_clock(gpu)
    assert not tbcsv_mod.on_device_clock(cpu)
    assert len(table.notes) == 1 and "1 GPU rows have no wall clock" in table.notes[0]
    assert "stays on the device clock" in table.notes[0]


def test_aggregates_scale_by_their_own_steps_and_spreads_are_left_empty(tbcsv_mod, tmp_path):
    median = gpu_row(run_type="aggregate", aggregate="median", repetition="")
    cv = gpu_row(step=0.01, wall=0.02, run_type="aggregate", aggregate="cv", repetition="")
    cv["samples_per_s"] = "0.011"
    table = read(tbcsv_mod, tmp_path, [median, cv])
    assert float(table.rows[0]["samples_per_s"]) == approx(50000)
    assert table.rows[1]["samples_per_s"] == "" and table.rows[1]["step_time_s"] == "0.02"
    assert table.rows[1]["device_samples_per_s"] == "0.011"


def test_jobs_rows_scale_alike_and_the_note_says_their_windows_did_not_line_up(tbcsv_mod,
                                                                               tmp_path):
    # Two jobs: samples_per_s is the sum of the jobs' own device-clock rates.
    jobs = gpu_row(device="gpu:1/jobs:2", step=0.001, wall=0.00125, replicas=2)
    table = read(tbcsv_mod, tmp_path, [jobs])
    row, = table.rows
    assert float(row["samples_per_s"]) == approx(200000 * 0.001 / 0.00125)
    assert row["clock"] == tbcsv_mod.CLOCK_READ
    assert table.notes == [f"{table.path}: schema 4 gpu:1/jobs:K rows: samples_per_s is the sum "
                           f"of the jobs' own rates, each job timed in its own window (the jobs' "
                           f"windows did not line up), scaled to the wall clock by step_time_s / "
                           f"wall_step_time_s"]


def test_a_measured_gpu_n_rows_efficiency_is_taken_again_on_the_wall_clock(tbcsv_mod, tmp_path):
    one = gpu_row(step=0.001, wall=0.002)  # 50,000 samples/s on the wall clock
    two = gpu_row(device="gpu:2", step=0.0011, wall=0.0025, replicas=2, scaling_efficiency=0.909,
                  comm_s_per_step=0.0005, comm_share=0.4545)
    table = read(tbcsv_mod, tmp_path, [one, two])
    row = table.rows[1]
    assert float(row["samples_per_s"]) == approx(200 / 0.0025)
    assert float(row["scaling_efficiency"]) == approx((200 / 0.0025) / (2 * 50000))
    assert float(row["comm_share"]) == approx(0.0005 / 0.0025)


def predicted_row(source=MLP_GPU, n=4, comm=0.0001, step=0.0011, **cells):
    return gpu_row(device=f"gpu:{n}", step=step, wall=None, replicas=n, measurement="predicted",
                   variant="predicted:nvlink4", link="nvlink4", predicted_from=source,
                   comm_s_per_step=comm, scaling_efficiency=0.001 / step, **cells)


def test_a_predicted_gpu_row_is_re_derived_from_its_source_rows_wall_clock(tbcsv_mod, tmp_path):
    # The source: three repetitions, the median wall step 0.002 s; the prediction adds 0.0001 s
    # of exposed communication to the device step of 0.001 s.
    walls = (0.0019, 0.002, 0.0023)
    sources = [gpu_row(step=0.001, wall=w, repetition=i) for i, w in enumerate(walls)]
    predicted = predicted_row()
    table = read(tbcsv_mod, tmp_path, sources + [predicted])
    row = table.rows[-1]
    step = statistics.median(walls) + 0.0001
    assert row["clock"] == tbcsv_mod.CLOCK_REDERIVED
    assert float(row["step_time_s"]) == approx(step)
    assert float(row["samples_per_s"]) == approx(4 * 100 / step)
    assert float(row["scaling_efficiency"]) == approx(0.002 / step)
    assert float(row["comm_share"]) == approx(0.0001 / step)
    assert row["device_samples_per_s"] == predicted["samples_per_s"]
    assert row["benchmark"].endswith("/predicted:nvlink4")
    assert any("predicted GPU rows: re-derived on the wall clock" in n for n in table.notes)


def test_a_predicted_row_without_its_source_keeps_the_device_clock(tbcsv_mod, tmp_path):
    table = read(tbcsv_mod, tmp_path, [predicted_row(source="train/lstm/sine/gpu:1/fp32/bs:20")])
    row, = table.rows
    assert row["clock"] == tbcsv_mod.CLOCK_DEVICE and row["samples_per_s"] == "363636"
    assert len(table.notes) == 1 and "a prediction without its source row" in table.notes[0]


def raw_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_committed_h100_run_reads_the_wall_clock(tbcsv_mod):
    """Issue 31: the MLP's gpu:1 fp32 row was 481,784 samples/s on the device clock and
    ~368,370 on the wall clock; the scripts now show the latter."""
    raw = next(r for r in raw_rows(H100_RUN) if r["benchmark"] == MLP_GPU)
    wall = float(raw["batch"]) / float(raw["wall_step_time_s"])
    device = float(raw["samples_per_s"])
    assert device / wall > 1.2  # the two clocks differ here: this test can fail
    table = tbcsv_mod.read_table(str(H100_RUN))
    row = next(r for r in table.rows if r["benchmark"] == MLP_GPU)
    assert float(row["samples_per_s"]) == approx(wall)
    assert 368e3 < float(row["samples_per_s"]) < 369e3
    assert float(row["device_samples_per_s"]) == device
    # Every measured GPU row has its wall clock; every predicted one its source.
    gpu = [r for r in table.rows if r["device"].startswith("gpu") and r["status"] == "ok"]
    assert {r["clock"] for r in gpu} == {tbcsv_mod.CLOCK_READ, tbcsv_mod.CLOCK_REDERIVED}
    predicted = next(r for r in table.rows
                     if r["benchmark"] == "train/mlp/mnist/gpu:8/fp32/bs:100/predicted:nvlink4")
    comm = float(predicted["comm_s_per_step"])
    assert float(predicted["samples_per_s"]) == approx(
        800 / (float(raw["wall_step_time_s"]) + comm))


def test_plot_prints_each_files_notes_once(tmp_path):
    path = write(tmp_path, [gpu_row(), gpu_row(repetition=1), gpu_row(device="cpu", wall=0.01)])
    r = run_script("plot.py", path, path, "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    note = f"{path}: schema 4 GPU rows: samples_per_s read on the wall clock"
    assert r.stdout.count(note) == 1, r.stdout

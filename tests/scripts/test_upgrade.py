"""Version 6's columns on every row (issue 40, items 1 and 6): a schema 6 file is read as
trainbench wrote it, and tbcsv.upgrade gives older rows the same columns by the C++'s rules
(device_kind, backend, data_parallel: bench/plan/device_kinds.cpp; baseline, cpu_baseline,
speedup_differs: bench/plan/baselines.cpp; speedup_vs_cpu and scaling_efficiency:
bench/run/run.cpp comparisons; loaded: bench/run/harness.cpp; inside_band/outside_band and
prediction: bench/predict/predict.cpp compare). Checked three ways: the binary's own schema 6
runs (fixtures/binary/, written by `trainbench` at f1ff15d: see the README there) told as schema
5 get back what trainbench wrote; the committed results of schemas 2, 4 and 5 get the figures
worked out here by hand from their raw cells; small runs written here pin each rule."""
import csv
import math
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, load_generator

GENERATE = load_generator()
BINARY_RUNS = FIXTURES / "binary"
RUNS = ["cpu-links.csv", "mpi2-measured-link.csv"]
IDENTITY = ("device_kind", "backend", "data_parallel", "baseline", "cpu_baseline",
            "speedup_differs", "verdicts", "prediction")
FIGURES = ("speedup_vs_cpu", "scaling_efficiency")


def raw_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write(path: Path, header, rows) -> str:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, header, restval="", extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return str(path)


def as_schema_5(src: Path, dst: Path) -> str:
    """The run as schema 5 would have held it: no version 6 columns, and no scaling_efficiency
    on measured rows either, so that the upgrade must work it out."""
    rows = raw_rows(src)
    for r in rows:
        r["schema_version"] = "5"
        if r["measurement"] == "measured":
            r["scaling_efficiency"] = ""
    return write(dst, GENERATE.V5_HEADER, rows)


@pytest.mark.parametrize("name", RUNS)
def test_a_schema_6_file_is_read_as_written_with_version_7s_columns_empty(tbcsv_mod, name):
    path = BINARY_RUNS / name
    table = tbcsv_mod.read_table(str(path))
    raw = raw_rows(path)
    assert GENERATE.V6_HEADER == list(raw[0])
    assert table.columns == GENERATE.V7_HEADER
    assert len(table.rows) == len(raw) and not table.notes
    for got, want in zip(table.rows, raw):
        assert {c: got[c] for c in want} == want
        assert got["clock"] == tbcsv_mod.CLOCK_WALL
        assert (got["onednn_isa"], got["cpu_isa"], got["prediction_model"], got["window_samples_per_s"]) == \
            ("", "", "", "")  # it did not say


@pytest.mark.parametrize("name", RUNS)
def test_a_schema_6_run_told_as_schema_5_gets_back_what_trainbench_wrote(tbcsv_mod, tmp_path, name):
    raw = raw_rows(BINARY_RUNS / name)
    got = tbcsv_mod.read_table(as_schema_5(BINARY_RUNS / name, tmp_path / name)).rows
    assert len(got) == len(raw)
    compared = 0
    for g, r in zip(got, raw):
        where = (r["benchmark"], r["run_type"], r["aggregate"], r["repetition"])
        for column in IDENTITY:
            assert g[column] == r[column], (where, column)
        for column in FIGURES:
            assert bool(g[column]) == bool(r[column]), (where, column)
            if r[column]:
                compared += 1
                # The repetitions' figures are trainbench's to its 6 digits; a spread over the
                # repetitions is of their rounded figures there, of the rates here.
                rel = 1e-3 if r["aggregate"] in ("stddev", "cv") else 2e-5
                assert float(g[column]) == pytest.approx(float(r[column]), rel=rel), (where, column)
    assert compared > 10
    words = {w for r in raw for w in r["verdicts"].split("+") if w}
    if name.startswith("mpi2"):  # the run holds every rule's case: this test can fail
        assert {"loaded", "not_scaling", "inside_band", "outside_band"} <= words
        assert any(r["prediction"] for r in raw) and any(r["baseline"] for r in raw)


# ---- the committed results, worked out by hand ------------------------------------------------

def row_of(table, benchmark, run_type="iteration"):
    return next(r for r in table.rows if r["benchmark"] == benchmark and r["run_type"] == run_type)


def test_the_committed_schema_4_h100_run(tbcsv_mod):
    """results/h100/default-20261124.csv (schema 4): every gpu:1 row's speedup over the cpu row
    of its workload on the wall clock, the pair's difference, and the predictions' baselines."""
    path = ROOT / "results" / "h100" / "default-20261124.csv"
    table = tbcsv_mod.read_table(str(path))
    raw = {r["benchmark"]: r for r in raw_rows(path)}
    mlp = row_of(table, "train/mlp/mnist/gpu:1/fp32/bs:100")
    assert (mlp["device_kind"], mlp["backend"], mlp["data_parallel"]) == ("gpu:1", "gpu", "")
    assert mlp["cpu_baseline"] == "train/mlp/mnist/cpu/fp32/bs:100" and mlp["speedup_differs"] == ""
    # 100 samples / 0.000271466 s on the wall clock over the cpu row's 49,934.6 samples/s: 7.377.
    wall = float(raw["train/mlp/mnist/gpu:1/fp32/bs:100"]["wall_step_time_s"])
    assert float(mlp["speedup_vs_cpu"]) == pytest.approx(100 / wall / 49934.6, rel=1e-5)
    assert float(mlp["speedup_vs_cpu"]) == pytest.approx(7.377, abs=5e-4)
    bf16 = row_of(table, "train/resnet152/imagenet/gpu:1/bf16/bs:128")
    assert bf16["cpu_baseline"] == "train/resnet152/imagenet/cpu/fp32/bs:8"
    assert bf16["speedup_differs"] == "bf16 vs fp32, bs 128 vs 8"
    wall = float(raw["train/resnet152/imagenet/gpu:1/bf16/bs:128"]["wall_step_time_s"])
    assert float(bf16["speedup_vs_cpu"]) == pytest.approx(128 / wall / 12.0708, rel=1e-5)
    cpu = row_of(table, "train/mlp/mnist/cpu/fp32/bs:100")
    assert (cpu["device_kind"], cpu["cpu_baseline"], cpu["speedup_vs_cpu"]) == ("cpu", "", "")
    predicted = row_of(table, "train/mlp/mnist/gpu:8/fp32/bs:100/predicted:nvlink4")
    assert (predicted["device_kind"], predicted["data_parallel"], predicted["baseline"]) == (
        "gpu:N over NCCL", "8", "train/mlp/mnist/gpu:1/fp32/bs:100")
    assert predicted["cpu_baseline"] == "" and predicted["verdicts"] == ""
    skipped = row_of(table, "train/mlp/mnist/gpu:all/fp32/bs:100")
    assert (skipped["device_kind"], skipped["data_parallel"]) == ("gpu:N over NCCL", "")
    # 16 cores, loads of 0.9 to 3.5 after rows of 16 threads: nothing was loaded.
    assert not any("loaded" in r["verdicts"] for r in table.rows)


def test_the_committed_schema_5_runs(tbcsv_mod):
    """results/vm/default-20261126.csv (a CPU-only VM: the GPU rows skipped, paired with the cpu
    row as trainbench pairs them when it plans), and the mpi:2 run across two emulated nodes of
    results/vm/predictions-20261126T102553Z: scaling over cpu:1, the band's verdicts."""
    vm = tbcsv_mod.read_table(str(ROOT / "results" / "vm" / "default-20261126.csv"))
    gpu = row_of(vm, "train/resnet152/imagenet/gpu:1/fp32/bs:128")
    assert gpu["status"] == "skipped" and gpu["speedup_vs_cpu"] == ""
    assert gpu["cpu_baseline"] == "train/resnet152/imagenet/cpu/fp32/bs:8"
    assert gpu["speedup_differs"] == "bs 128 vs 8"
    emulated = tbcsv_mod.read_table(str(ROOT / "results" / "vm" / "predictions-20261126T102553Z"
                                        / "emulated-1gbit.csv"))
    mlp = row_of(emulated, "train/mlp/mnist/mpi:2/fp32/bs:100/emulated_nodes")
    assert (mlp["device_kind"], mlp["backend"], mlp["data_parallel"]) == ("mpi:N", "cpu", "2")
    assert mlp["baseline"] == "train/mlp/mnist/cpu:1/fp32/bs:100"
    # 1,485.67 samples/s on two ranks over 2 x 11,487.1 of cpu:1: 6.5%, fewer than one device.
    assert float(mlp["scaling_efficiency"]) == pytest.approx(1485.67 / (2 * 11487.1), rel=1e-5)
    assert mlp["prediction"] == "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:measured"
    assert mlp["verdicts"] == "not_scaling+inside_band"  # 1,446.81 <= 1,485.67 <= 1,595.67
    lstm = row_of(emulated, "train/lstm/sine/mpi:2/fp32/bs:20/emulated_nodes")
    assert lstm["verdicts"] == "not_scaling+outside_band"  # 47,329.9 < 74,835.9
    lenet = row_of(emulated, "train/lenet5/cifar10/mpi:2/fp32/bs:100/emulated_nodes")
    assert lenet["verdicts"] == "inside_band"  # 18,130.7: more than one rank's 14,508.8


def test_a_rate_above_its_band_is_outside_it_and_its_high_end_inside(tbcsv_mod, tmp_path):
    """bench/predict/predict.cpp compare: inside_band is low <= rate <= high, so a rate above
    the band's high end is outside it as one below its low end is; the ends are inside. The mpi:2
    MLP of emulated-1gbit.csv, whose band is 1,446.81 to 1,595.67."""
    path = ROOT / "results" / "vm" / "predictions-20261126T102553Z" / "emulated-1gbit.csv"
    benchmark = "train/mlp/mnist/mpi:2/fp32/bs:100/emulated_nodes"
    rows = raw_rows(path)
    for rate, verdict in (("1600", "outside_band"), ("1595.67", "inside_band"),
                          ("1446.81", "inside_band"), ("1446", "outside_band")):
        for r in rows:
            if r["benchmark"] == benchmark:
                r["samples_per_s"] = rate
        table = tbcsv_mod.read_table(write(tmp_path / "run.csv", list(rows[0]), rows))
        mlp = row_of(table, benchmark)
        assert mlp["prediction"] == "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:measured"
        assert mlp["verdicts"] == f"not_scaling+{verdict}", rate



def test_the_prediction_over_the_runs_measured_link_is_the_one_a_row_is_compared_with(tbcsv_mod,
                                                                                     tmp_path):
    """bench/predict/predict.cpp compare: where predictions over several links match a row, the
    one over this run's measured link, wherever it lies in the file; the mpi:2 MLP of
    emulated-1gbit.csv, with a prediction over another link (and its own band) before it."""
    path = ROOT / "results" / "vm" / "predictions-20261126T102553Z" / "emulated-1gbit.csv"
    rows = raw_rows(path)
    measured = "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:measured"
    [i] = [k for k, r in enumerate(rows) if r["benchmark"] == measured]
    other = {**rows[i], "benchmark": measured.replace(":measured", ":nvlink4"), "link": "nvlink4",
             "samples_per_s_low": "1", "samples_per_s_high": "2"}
    table = tbcsv_mod.read_table(write(tmp_path / "run.csv", list(rows[0]),
                                       rows[:i] + [other] + rows[i:]))
    mlp = row_of(table, "train/mlp/mnist/mpi:2/fp32/bs:100/emulated_nodes")
    assert mlp["prediction"] == measured

def test_a_written_efficiency_is_kept(tbcsv_mod):
    """results/vm/data-parallel-mpi.csv (schema 2): its mpi:2 rows wrote their efficiency (over
    a cpu:1 rate of the time): kept as written, the baseline named."""
    table = tbcsv_mod.read_table(str(ROOT / "results" / "vm" / "data-parallel-mpi.csv"))
    row = row_of(table, "train/mlp/mnist/mpi:2/fp32/bs:100")
    assert row["scaling_efficiency"] == "0.639745"
    assert row["baseline"] == "train/mlp/mnist/cpu:1/fp32/bs:100" and row["data_parallel"] == "2"


# ---- each rule, on small runs ---------------------------------------------------------------

def v5_row(device, rate, threads="1", load="", precision="fp32", batch="100", **cells):
    row = {"schema_version": "5", "benchmark": f"train/mlp/mnist/{device}/{precision}/bs:{batch}",
           "kind": "train", "model": "mlp", "dataset": "mnist", "device": device,
           "threads": threads, "precision": precision, "batch": batch, "framework": "trainbench",
           "run_type": "iteration", "repetition": "0", "status": "ok", "host": "h",
           "cpu_model": "Fixture CPU", "cores": "4", "git_commit": "0000000",
           "timestamp": "2026-12-27T00:00:00Z", "load_avg_1m": load, "loader_workers": "0",
           "samples_per_s": f"{rate:g}", "step_time_s": f"{int(batch) / rate:g}",
           "wall_step_time_s": f"{int(batch) / rate:g}", "measurement": "measured"}
    row.update(cells)
    return row


def read(tbcsv_mod, tmp_path, rows):
    return tbcsv_mod.read_table(write(tmp_path / "run.csv", GENERATE.V5_HEADER, rows)).rows


def test_loaded_is_a_load_above_the_threads_the_run_used_so_far(tbcsv_mod, tmp_path):
    """bench/run/harness.cpp: the most threads (and loader workers) the run had used, this row's
    included, + 1; a run is a start time; a skipped row used none, and gets no verdict."""
    later = {"timestamp": "2026-12-27T01:00:00Z"}
    rows = [v5_row("cpu", 100, threads="4", load="5.5"),  # 5.5 > 4 + 1
            v5_row("cpu:1", 200, load="4.5"),  # 4.5 < 4 + 1: the cpu row's 4 threads count
            v5_row("cpu:2", 200, threads="2", load="2.5", **later),  # another run: 2.5 < 2 + 1
            v5_row("gpu:1", 1, threads="9", load="9", status="skipped", samples_per_s="", **later),
            v5_row("cpu:1", 200, load="3.5", **later),  # 3.5 > 2 + 1: the skipped row ran nothing
            v5_row("cpu:1", 200, load="3.5", loader_workers="2", repetition="1", **later)]  # < 3 + 1
    got = [r["verdicts"] for r in read(tbcsv_mod, tmp_path, rows)]
    assert got == ["loaded", "", "", "", "loaded", ""]


def test_above_peak_not_scaling_and_slower_than_fp32(tbcsv_mod, tmp_path):
    rows = [v5_row("cpu", 100, threads="4", utilisation="1.2"),
            v5_row("gpu:1", 1000, gpu_name="G"),
            v5_row("gpu:1", 900, precision="bf16", gpu_name="G"),  # fewer than fp32's 1,000
            v5_row("gpu:1", 1100, precision="tf32", gpu_name="G"),
            v5_row("gpu:2", 900, replicas="2", gpu_name="G")]  # fewer than one GPU's
    cpu, fp32, bf16, tf32, two = read(tbcsv_mod, tmp_path, rows)
    assert cpu["verdicts"] == "above_peak" and fp32["verdicts"] == "" and tf32["verdicts"] == ""
    assert bf16["verdicts"] == "slower_than_fp32" and bf16["speedup_differs"] == "bf16 vs fp32"
    assert float(bf16["speedup_vs_cpu"]) == pytest.approx(9)
    assert two["baseline"] == "train/mlp/mnist/gpu:1/fp32/bs:100" and two["verdicts"] == "not_scaling"
    assert float(two["scaling_efficiency"]) == pytest.approx(900 / (2 * 1000))



def test_as_many_samples_per_s_as_the_baseline_is_neither_not_scaling_nor_slower_than_fp32(
        tbcsv_mod, tmp_path):
    """bench/run/run.cpp and run_train.cpp give those verdicts to fewer samples/s only."""
    rows = [v5_row("gpu:1", 1000, gpu_name="G"),
            v5_row("gpu:1", 1000, precision="bf16", gpu_name="G"),
            v5_row("gpu:2", 1000, replicas="2", gpu_name="G")]
    _, bf16, two = read(tbcsv_mod, tmp_path, rows)
    assert two["baseline"] == "train/mlp/mnist/gpu:1/fp32/bs:100"
    assert bf16["verdicts"] == "" and two["verdicts"] == ""


def test_a_skipped_cpu_row_is_no_rows_cpu_baseline(tbcsv_mod, tmp_path):
    """bench/plan/baselines.cpp cpu_row passes over a cpu row with a skip reason."""
    rows = [v5_row("cpu", 100, threads="4", status="skipped", samples_per_s=""),
            v5_row("gpu:1", 1000)]
    _, gpu = read(tbcsv_mod, tmp_path, rows)
    assert gpu["cpu_baseline"] == "" and gpu["speedup_vs_cpu"] == ""


def test_a_load_or_utilisation_at_its_bound_gets_no_verdict(tbcsv_mod, tmp_path):
    """bench/run/harness.cpp and run.cpp: loaded above the threads used + 1, above_peak above 1;
    a load of 4 + 1 and a utilisation of 1 are neither."""
    [row] = read(tbcsv_mod, tmp_path, [v5_row("cpu", 100, threads="4", load="5", utilisation="1")])
    assert row["verdicts"] == ""

def test_rows_that_check_a_path_are_compared_with_nothing(tbcsv_mod, tmp_path):
    """Replicas sharing one GPU, GPU ranks as emulated nodes: no speedup, no scaling."""
    rows = [v5_row("cpu", 100, threads="4"), v5_row("gpu:1", 1000),
            v5_row("gpu:2", 900, replicas="2", shared_device="1", variant="shared_device",
                   benchmark="train/mlp/mnist/gpu:2/fp32/bs:100/shared_device"),
            v5_row("gpu:2", 900, replicas="2", ranks="2", emulated_nodes="1",
                   variant="emulated_nodes", benchmark="train/mlp/mnist/gpu:2/fp32/bs:100/emulated_nodes")]
    _, one, shared, emulated = read(tbcsv_mod, tmp_path, rows)
    assert one["cpu_baseline"] and one["speedup_vs_cpu"]
    for row, kind in ((shared, "gpu:N sharing one GPU"), (emulated, "gpu:N as emulated nodes")):
        assert row["device_kind"] == kind
        assert not any(row[c] for c in ("data_parallel", "baseline", "cpu_baseline",
                                         "speedup_vs_cpu", "scaling_efficiency", "verdicts"))
        assert tbcsv_mod.checks_only(row)
    assert math.isclose(float(one["speedup_vs_cpu"]), 10)

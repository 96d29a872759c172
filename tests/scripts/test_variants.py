"""Row identity includes the variant (issue 21): runs of one benchmark that differ in a flag
(--optimizer, --data_on_device, --cuda_graph) are two bars in plot.py and two unmatched rows in
compare.py, never one. Version 4 rows carry the variant; rows of versions 1-3 get it from their
cuda_graph and data_on_device columns (tbcsv), including the committed H100 files where
issue 21 saw 342k and 520k samples/s drawn as one bar of 431k."""
import csv
import statistics
from pathlib import Path

import pytest

from conftest import ROOT, data_file, run_script
from tbplot.figures import si
from tbplot.model import Data

SGD, ADAM = data_file("optimizer_sgd_v4.csv"), data_file("optimizer_adam_v4.csv")
MERGED = data_file("h100_data_on_device_v3.csv")
PLAIN, GRAPH = data_file("h100_plain_v3.csv"), data_file("h100_cuda_graph_v3.csv")
MLP_CPU = "train/mlp/mnist/cpu/fp32/bs:100"
MLP_GPU = "train/mlp/mnist/gpu:1/fp32/bs:100"


def raw_medians(paths, key, column="samples_per_s") -> dict:
    """key(row) -> median of the column (samples/s) over the ok iteration rows, read without
    tbcsv."""
    values: dict = {}
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r["status"] == "ok" and r["run_type"] == "iteration" and r.get(column):
                    values.setdefault(key(r), []).append(float(r[column]))
    return {k: statistics.median(v) for k, v in values.items()}


def bars(tbcsv_mod, *paths) -> dict:
    """(model, device, precision, variant, framework) -> the median samples/s plot.py draws."""
    data = Data([tbcsv_mod.read_table(p) for p in paths])
    got = tbcsv_mod.samples(data.step_rows, data.key, "samples_per_s")
    return {(c.model, c.device, c.precision, c.variant, s.split(" · ")[-1]): v.center
            for (s, c), v in got.items()}


def svg_words(path: Path) -> list[str]:
    import xml.etree.ElementTree as ET
    return [t.strip() for t in ET.parse(path).getroot().itertext() if t.strip()]


# ---- reading: the variant of every version --------------------------------------------------

def test_old_rows_get_their_variant_from_the_run_option_columns(tbcsv_mod):
    rows = tbcsv_mod.read_table(MERGED).rows + tbcsv_mod.read_table(GRAPH).rows
    variants = {(r["data_on_device"], r["cuda_graph"], r["variant"], r["benchmark"]) for r in rows
                if r["device"] == "gpu:1"}
    assert variants == {("0", "0", "", MLP_GPU),
                        ("1", "0", "data_on_device", MLP_GPU + "/data_on_device"),
                        ("1", "1", "data_on_device/cuda_graph",
                         MLP_GPU + "/data_on_device/cuda_graph")}
    assert {r["measurement"] for r in rows} == {"measured"}


def test_v4_rows_keep_their_variant_and_guard_shared_and_predicted(tbcsv_mod, tmp_path):
    adam = [r for r in tbcsv_mod.read_table(ADAM).rows if r["model"] == "mlp"]
    assert {(r["variant"], r["benchmark"]) for r in adam} == {
        ("optimizer:adam", MLP_CPU + "/optimizer:adam")}
    # A writer that forgot the variant item of a shared-device or predicted row.
    lines = open(data_file("report_gpu_v4.csv")).read().splitlines()
    header = lines[0].split(",")
    shared = next(line for line in lines if "/shared_device," in line)
    cells = dict(zip(header, next(csv.reader([shared]))))
    cells["variant"] = ""
    cells["benchmark"] = cells["benchmark"].removesuffix("/shared_device")
    predicted = dict(cells, shared_device="", measurement="predicted", link="pcie5",
                     device="gpu:8", benchmark="train/mlp/mnist/gpu:8/fp32/bs:100")
    path = tmp_path / "forgot.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, header, lineterminator="\n")
        w.writeheader()
        w.writerows([cells, predicted])
    got = [(r["variant"], r["benchmark"]) for r in tbcsv_mod.read_table(str(path)).rows]
    assert got == [("shared_device", "train/mlp/mnist/gpu:2/fp32/bs:100/shared_device"),
                   ("predicted:pcie5", "train/mlp/mnist/gpu:8/fp32/bs:100/predicted:pcie5")]


def test_versions_1_to_4_are_read_together(tbcsv_mod):
    paths = [data_file("machine_a.csv"), data_file("gpu_v2.csv"), MERGED, SGD]
    rows = tbcsv_mod.all_rows(tbcsv_mod.read_tables(paths))
    assert {r["schema_version"] for r in rows} == {"1", "2", "3", "4"}
    assert all("variant" in r and r["measurement"] == "measured" for r in rows)


# ---- issue 21's cases -----------------------------------------------------------------------

def test_an_optimizer_variant_is_a_bar_of_its_own(tbcsv_mod, tmp_path):
    got = bars(tbcsv_mod, SGD, ADAM)
    want = raw_medians([SGD, ADAM], lambda r: r["optimizer"] if r["model"] == "mlp" else None)
    assert got[("mlp", "cpu", "fp32", "", "vm")] == pytest.approx(want["sgd"])
    assert got[("mlp", "cpu", "fp32", "optimizer:adam", "vm")] == pytest.approx(want["adam"])
    r = run_script("plot.py", SGD, ADAM, "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    words = svg_words(tmp_path / "samples_per_s.svg")
    assert "optimizer:adam" in words  # the second bar's tick label names its variant
    assert si(want["sgd"]) in words and si(want["adam"]) in words


def test_an_optimizer_variant_is_unmatched_in_compare():
    r = run_script("compare.py", SGD, ADAM)
    assert r.returncode == 0, r.stderr
    assert f"only in BASE (1):\n  {MLP_CPU}\n" in r.stdout
    assert f"only in NEW (1):\n  {MLP_CPU}/optimizer:adam\n" in r.stdout
    assert not any(line.startswith(MLP_CPU) for line in r.stdout.splitlines())
    assert "compare them with --filters '' 'optimizer:adam'" in r.stdout
    assert "differs: variant, optimizer" in r.stdout


def test_data_on_device_rows_of_a_v3_file_are_two_bars(tbcsv_mod, tmp_path):
    got = bars(tbcsv_mod, MERGED)
    want = raw_medians([MERGED], lambda r: r["data_on_device"])
    assert got == {("mlp", "gpu:1", "fp32", "", "h100-node"): pytest.approx(want["0"]),
                   ("mlp", "gpu:1", "fp32", "data_on_device", "h100-node"):
                       pytest.approx(want["1"])}
    assert 500e3 < want["0"] < 540e3 and 330e3 < want["1"] < 350e3
    r = run_script("plot.py", MERGED, "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    words = svg_words(tmp_path / "samples_per_s.svg")
    assert si(want["0"]) in words and si(want["1"]) in words
    pooled = raw_medians([MERGED], lambda r: "both runs")["both runs"]
    assert 420e3 < pooled < 440e3
    assert si(pooled) not in words  # not the 431k of the two runs pooled
    assert "data_on_device" in words


def test_a_plain_run_and_a_cuda_graph_run_are_unmatched_in_compare():
    r = run_script("compare.py", PLAIN, GRAPH)
    assert r.returncode == 0, r.stderr
    assert f"only in BASE (1):\n  {MLP_GPU}\n" in r.stdout
    assert f"only in NEW (1):\n  {MLP_GPU}/data_on_device/cuda_graph\n" in r.stdout
    table = [line for line in r.stdout.splitlines() if line.startswith("train/")]
    assert table == [line for line in table if line.startswith(MLP_CPU)]  # only the cpu row
    assert "better" not in table[0]
    assert "--filters '' 'data_on_device/cuda_graph'" in r.stdout


def test_the_committed_h100_results_keep_their_variants_apart(tbcsv_mod, tmp_path):
    paths = sorted(str(p) for p in (ROOT / "results" / "h100").glob("*.csv"))
    if not paths:
        pytest.skip("results/h100 holds no CSV")
    got = bars(tbcsv_mod, *paths)
    plain = got[("mlp", "gpu:1", "fp32", "", "vm @ 3ea1e586d172")]
    resident = got[("mlp", "gpu:1", "fp32", "data_on_device", "vm @ 3ea1e586d172")]
    # Schema 2 rows, read on the wall clock: batch / wall_step_time_s of the one repetition each.
    walls = raw_medians(paths, lambda r: (r["git_commit"], r["framework"], r["data_on_device"],
                                          r["benchmark"]), "wall_step_time_s")
    mlp = ("3ea1e586d172-dirty", "trainbench")
    assert plain == pytest.approx(100 / walls[mlp + ("0", MLP_GPU)], rel=1e-5)
    assert resident == pytest.approx(100 / walls[mlp + ("1", MLP_GPU)], rel=1e-5)
    assert 420e3 < plain < 450e3 and 300e3 < resident < 330e3  # two bars, far apart
    # The PyTorch peer ran with its data on the GPU too: its rows say so.
    assert ("mlp", "gpu:1", "fp32", "data_on_device", "pytorch") in got
    r = run_script("plot.py", *paths, "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    words = svg_words(tmp_path / "samples_per_s.svg")
    assert si(plain) in words and si(resident) in words

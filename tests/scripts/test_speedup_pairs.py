"""x cpu pairs (issue 31, item 3): a non-cpu row is compared with its machine's cpu row of the
same workload and variant, of the same precision where the CPU ran it (else fp32), of the same
batch where there is one (else the cpu row's): one rule, tbcsv.cpu_pair (trainbench's
bench/plan/baselines.cpp cpu_row), which gives older rows their cpu_baseline, speedup_vs_cpu and
speedup_differs; every place that shows the ratio reads them and says what differs: the
report's summary, the headline's bars, the speedup chart."""
import csv
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import load_generator, run_script
from tbcsv import Workload, cpu_pair, pair_differs
from tbplot.model import Data, speedup_pairs

GENERATE = load_generator()
# (benchmark, device, precision, batch, samples/s): ResNet-152 224 trains batch 128 on the GPU
# and 8 on the CPU (fp32 only); the MLP the same batch everywhere; LeNet-5's GPU 1,234 times
# its CPU (an 8-GPU machine's bf16 against a small CPU's fp32 is above a thousand).
ROWS = [("train/resnet152/imagenet/cpu/fp32/bs:8", "cpu", "fp32", 8, 4.0),
        ("train/resnet152/imagenet/gpu:1/fp32/bs:128", "gpu:1", "fp32", 128, 400.0),
        ("train/resnet152/imagenet/gpu:1/bf16/bs:128", "gpu:1", "bf16", 128, 2200.0),
        ("train/mlp/mnist/cpu/fp32/bs:100", "cpu", "fp32", 100, 50000.0),
        ("train/mlp/mnist/gpu:1/fp32/bs:100", "gpu:1", "fp32", 100, 350000.0),
        ("train/lenet5/cifar10/cpu/fp32/bs:100", "cpu", "fp32", 100, 100.0),
        ("train/lenet5/cifar10/gpu:1/fp32/bs:100", "gpu:1", "fp32", 100, 123400.0)]


@pytest.fixture(scope="module")
def run_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("pairs") / "pairs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, GENERATE.V5_HEADER, restval="", lineterminator="\n")
        w.writeheader()
        for benchmark, device, precision, batch, rate in ROWS:
            _, model, dataset = benchmark.split("/")[:3]
            step = batch / rate
            w.writerow({"schema_version": "5", "benchmark": benchmark, "kind": "train",
                        "model": model, "dataset": dataset, "device": device,
                        "precision": precision, "batch": batch, "framework": "trainbench",
                        "run_type": "iteration", "repetition": 0, "status": "ok",
                        "step_time_s": step, "wall_step_time_s": step, "samples_per_s": rate,
                        "host_cpu_s_per_step": step, "peak_rss_bytes": 1e9, "host": "pairs-host",
                        "cpu_model": "Fixture CPU (test data)", "cores": 16,
                        "gpu_name": "Fixture GPU", "measurement": "measured",
                        "git_commit": "0000000", "timestamp": "2026-12-27T00:00:00Z"})
    return str(path)


def workload(precision, batch, model="resnet152", dataset="imagenet", variant=""):
    return Workload("train", model, dataset, precision, str(batch), variant)


def test_the_baseline_is_same_precision_else_fp32_and_same_batch_else_the_cpus():
    cpus = [workload("fp32", 8)]
    gpu = workload("bf16", 128)
    assert cpu_pair(gpu, cpus) == cpus[0]
    assert pair_differs(gpu, cpus[0]) == "bf16 vs fp32, bs 128 vs 8"
    assert pair_differs(workload("fp32", 128), cpus[0]) == "bs 128 vs 8"
    assert pair_differs(workload("bf16", 8), cpus[0]) == "bf16 vs fp32"
    # The same precision and batch win where the CPU ran them; fp32 before another precision;
    # between two cpu rows alike for the pair, the first (trainbench's order).
    cpus += [workload("bf16", 8), workload("fp32", 128), workload("fp16", 128)]
    assert cpu_pair(gpu, cpus) == workload("bf16", 8)
    assert cpu_pair(workload("tf32", 128), cpus) == workload("fp32", 128)
    assert cpu_pair(workload("tf32", 64), cpus) == workload("fp32", 8)
    assert pair_differs(workload("fp32", 128), workload("fp32", 128)) == ""
    # Another workload or variant is never the baseline; what only a GPU row has is left out.
    assert cpu_pair(workload("fp32", 128, "mlp", "mnist"), cpus) is None
    assert cpu_pair(workload("fp32", 8, variant="optimizer:adam"), cpus) is None
    assert cpu_pair(workload("fp32", 8, variant="data_on_device/cuda_graph"), cpus) == cpus[0]


def test_speedups_carry_the_pair(tbcsv_mod, run_csv):
    data = Data([tbcsv_mod.read_table(run_csv)])
    got = {(c.model, c.device, c.precision): p for (_, c), p in speedup_pairs(data).items()}
    resnet = got[("resnet152", "gpu:1", "bf16")]
    assert resnet.ratio == pytest.approx(2200 / 4) and resnet.label == "bf16 vs fp32, bs 128 vs 8"
    assert resnet.text() == "550× (bf16 vs fp32, bs 128 vs 8)"
    assert got[("resnet152", "gpu:1", "fp32")].label == "bs 128 vs 8"
    mlp = got[("mlp", "gpu:1", "fp32")]
    assert mlp.ratio == pytest.approx(7) and mlp.label == "" and mlp.text() == "7×"


@pytest.fixture(scope="module")
def drawn(tmp_path_factory, run_csv):
    out = tmp_path_factory.mktemp("pairs_out")
    r = run_script("plot.py", run_csv, "--out", out)
    assert r.returncode == 0, r.stderr
    return out


def svg_words(path) -> list[str]:
    return [t.strip() for t in ET.parse(path).getroot().itertext() if t.strip()]


def test_the_summary_says_what_differs_beside_the_figure(drawn):
    md = (drawn / "report.md").read_text()
    lines = [line for line in md.splitlines() if line.startswith("| resnet152 · imagenet | bf16")
             or line.startswith("| mlp · mnist | fp32")]
    assert len(lines) == 2, md
    assert "| 550 (bf16 vs fp32, bs 128 vs 8) |" in lines[0]
    assert re.search(r"\| 7 \|", lines[1]) and "vs" not in lines[1]


@pytest.mark.parametrize("chart", ["headline", "speedup_vs_cpu"])
def test_the_bars_say_what_differs(drawn, chart):
    words = svg_words(drawn / f"{chart}.svg")
    # Each pair's label sits under its ratio: the bf16 bar both, the fp32 bar its batch.
    assert words.count("bf16 vs fp32") == 1 and words.count("bs 128 vs 8") == 2, words
    assert "550×" in words and "100×" in words and "7×" in words


def test_a_speedup_of_a_thousand_or_more_is_written_whole(drawn):
    """As the headline writes a ratio (model.times): `1,234`, never `1.23e+03` (the H100
    reference's report said `1.16e+03 (bf16 vs fp32, bs 128 vs 8)` for its gpu:8 prediction)."""
    md = (drawn / "report.md").read_text()
    lenet, = [line for line in md.splitlines() if line.startswith("| lenet5 · cifar10 | fp32")]
    assert "| 1,234 |" in lenet and "e+" not in lenet, lenet
    for chart in ("headline", "speedup_vs_cpu"):
        words = svg_words(drawn / f"{chart}.svg")
        assert "1,234×" in words and not any("e+03" in w for w in words), (chart, words)

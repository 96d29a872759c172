"""Tests of scripts/peers/pytorch_train.py, the PyTorch baseline of issue 7: its models count
the parameters and FLOPs trainbench counts (its --list_models against trainbench's), a short
run writes rows trainbench's readers take (trainbench's columns, its benchmark names, one row
per repetition and a median), and a CSV with another header is refused untouched.

Skipped, with the reason, where the distribution's Python cannot import torch (it is optional:
scripts/compare_pytorch.sh installs it). Runs on one thread to stay short on shared machines."""
import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SCRIPTS

PEER = SCRIPTS / "peers" / "pytorch_train.py"
MLP_PARAMS, LSTM_PARAMS = 1796010, 236

# results/SCHEMA.md's table, for machines without a trainbench binary to ask.
SCHEMA_PARAMS = {("mlp", "mnist"): 1796010, ("lenet5", "cifar10"): 74966, ("lstm", "sine"): 236,
                 ("resnet152", "cifar10"): 58164298, ("resnet152", "imagenet"): 60192808}


def torch_importable() -> bool:
    try:
        r = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


pytestmark = pytest.mark.skipif(
    not torch_importable(),
    reason=f"PyTorch is not importable by {sys.executable} (optional: apt install python3-torch, "
           f"or run scripts/compare_pytorch.sh, which installs it)")


def trainbench_binary() -> Path | None:
    """$TRAINBENCH, else a build of the repository (release first)."""
    candidates = [os.environ.get("TRAINBENCH", "")]
    candidates += [str(ROOT / "build" / "release" / "bench" / "trainbench")]
    candidates += sorted(str(p) for p in (ROOT / "build").glob("*/bench/trainbench"))
    for c in candidates:
        if c and os.access(c, os.X_OK) and Path(c).is_file():
            return Path(c)
    return None


def trainbench_columns() -> list[str]:
    """trainbench's header: the binary's --csv_header where it has one, else the list in the
    source (bench/csv.cpp), read here independently of the script."""
    binary = trainbench_binary()
    if binary:
        r = subprocess.run([str(binary), "--csv_header"], capture_output=True, text=True, timeout=60)
        if r.returncode == 0 and r.stdout.startswith("schema_version,"):
            return r.stdout.strip().split(",")
    text = (ROOT / "bench" / "csv.cpp").read_text()
    body = re.search(r"csv_columns\(\)\s*\{.*?\{(.*?)\};", text, re.S).group(1)
    return re.findall(r'"([^"]+)"', body)


def run_peer(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PEER), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def model_table(stdout: str) -> dict:
    """(model, dataset) -> (params, fwd GFLOP/sample, train GFLOP/step) from a --list_models
    table, as the printed text, so the two tools must agree digit for digit."""
    rows = {}
    for line in stdout.splitlines()[1:]:
        cells = line.split()
        if len(cells) == 6:
            rows[(cells[0], cells[1])] = (int(cells[3]), cells[4], cells[5])
    return rows


@pytest.fixture(scope="module")
def peer_models():
    r = run_peer("--list_models")
    assert r.returncode == 0, r.stderr
    return model_table(r.stdout)


def test_list_models_counts_what_trainbench_counts(peer_models):
    assert set(peer_models) == set(SCHEMA_PARAMS)
    for key, params in SCHEMA_PARAMS.items():
        assert peer_models[key][0] == params, key
    binary = trainbench_binary()
    if binary is None:
        pytest.skip("no trainbench binary to compare FLOPs with (build the release preset)")
    r = subprocess.run([str(binary), "--list_models"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    theirs = model_table(r.stdout)
    for key, ours in peer_models.items():
        assert ours == theirs[key], (key, ours, theirs[key])


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """mlp and lstm, one thread, two short repetitions, into a new CSV."""
    out = tmp_path_factory.mktemp("peer") / "pytorch.csv"
    r = run_peer("--filter", "train/(mlp|lstm)/", "--threads", 1, "--min_time", 0.05,
                 "--repetitions", 2, "--peak_gflops", 100, "--csv", out)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out, newline="") as f:
        header = next(csv.reader(f))
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    return r, out, header, rows


def test_rows_have_trainbench_columns_names_and_values(short_run, peer_models):
    r, _, header, rows = short_run
    assert header == trainbench_columns()
    cores = len(os.sched_getaffinity(0))
    device = "cpu" if cores == 1 else "cpu:1"
    expected = {f"train/mlp/mnist/{device}/fp32/bs:100": (MLP_PARAMS, ("mlp", "mnist")),
                f"train/lstm/sine/{device}/fp32/bs:20": (LSTM_PARAMS, ("lstm", "sine"))}
    assert {row["benchmark"] for row in rows} == set(expected)
    for name, (params, key) in expected.items():
        mine = [row for row in rows if row["benchmark"] == name]
        iterations = [row for row in mine if row["run_type"] == "iteration"]
        medians = [row for row in mine if row["run_type"] == "aggregate"]
        assert [row["repetition"] for row in iterations] == ["0", "1"]
        assert [row["aggregate"] for row in medians] == ["median"]
        for row in mine:
            assert row["schema_version"] == "2" and row["status"] == "ok", row
            assert row["kind"] == "train" and row["device"] == device and row["threads"] == "1"
            assert row["precision"] == "fp32" and row["optimizer"] == "sgd"
            assert row.get("framework", "pytorch") == "pytorch"
            assert int(row["params"]) == params
            # trainbench's training FLOPs: 3 x its forward GFLOP/sample of --list_models
            fwd = float(peer_models[key][1]) * 1e9
            assert float(row["train_flops_per_sample"]) == pytest.approx(3 * fwd, rel=1e-5)
            assert float(row["samples_per_s"]) > 0 and int(row["iterations"]) >= 1
            if row["run_type"] == "iteration":  # a median of each column is not a product
                assert float(row["samples_per_s"]) * float(row["step_time_s"]) == pytest.approx(
                    int(row["batch"]), rel=1e-4)
            assert float(row["model_tflops"]) == pytest.approx(
                float(row["train_flops_per_sample"]) * float(row["samples_per_s"]) * 1e-12, rel=1e-4)
            assert float(row["peak_gflops"]) == 100
            assert float(row["utilisation"]) == pytest.approx(float(row["model_tflops"]) * 10, rel=1e-4)
            assert float(row["host_cpu_s_per_step"]) > 0 and float(row["host_cpu_util"]) > 0
            assert int(row["peak_rss_bytes"]) > 10 * 2**20
            assert float(row["loss_first"]) > 0 and float(row["loss_last"]) >= 0
            assert row["benchmark_lib"] == "pytorch_train.py"
            assert row["compiler"].startswith("python ") and " / torch " in row["compiler"]
            for column in ("host", "os", "cpu_model", "cores", "onednn", "git_commit", "timestamp"):
                assert row[column], column
    # What the run says about its environment: the re-exec cleared OpenBLAS' overrides.
    assert "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset" in r.stderr
    assert "BLAS:" in r.stderr


def test_appending_keeps_one_header(short_run):
    _, out, header, rows = short_run
    before = out.read_text().splitlines()
    r = run_peer("--filter", "lstm", "--threads", 1, "--min_time", 0, "--csv", out)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert lines[:len(before)] == before and len(lines) == len(before) + 1
    assert sum(line.startswith("schema_version,") for line in lines) == 1


@pytest.mark.parametrize("header", ["a,b,c", "trainbench-minus-one"])
def test_refuses_a_csv_with_another_header(tmp_path, header):
    if header == "trainbench-minus-one":
        header = ",".join(trainbench_columns()[:-1])  # another trainbench schema
    path = tmp_path / "other.csv"
    path.write_text(header + "\n")
    r = run_peer("--filter", "lstm", "--csv", path, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Nothing was written" in lines[0], r.stderr
    assert path.read_text() == header + "\n"


def test_bad_flags_answer_in_one_line():
    for args in (["--filter", "no-such-model"], ["--threads", "0"], ["--optimizer", "lbfgs"]):
        r = run_peer(*args, timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr

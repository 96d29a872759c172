"""scripts/compare_pytorch.sh run end to end with stand-ins for trainbench and the PyTorch peer
(no torch, no build): PyTorch's settings are searched once per benchmark before the rounds and
every round's peer run reads them back; 5 rounds by default, one repetition each, so that
compare.py's U test can reach a verdict (it cannot below 4, and the script says so; TB_REPETITIONS
count too); both
sides are compared on one clock, wall_step_time_s (lower is better), and on a GPU also on the
device clock, step_time_s; names carrying a variant (`/optimizer:sgd`) still match the
script's benchmarks; and the table's ratio is of the wall clock, with PyTorch's setting.

Also scripts/peers/pytorch_report.py, which the script reads its files back with."""
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SCRIPTS

HEADER = ("schema_version,benchmark,kind,model,dataset,device,threads,precision,batch,optimizer,"
          "framework,run_type,aggregate,repetition,status,message,iterations,step_time_s,"
          "samples_per_s,utilisation,peak_gflops,wall_step_time_s,host,cpu_model,cores,variant,"
          "measurement,peer_settings")
CHOSEN = "threads:2/blas_threads:1/omp_wait:passive"
SCHEMA_VERSION = "4"  # the stand-ins' rows are of schema 4: the readers upgrade them

# What both stand-ins share: the call log, the benchmark a filter names, and writing a row.
COMMON = f"""
import csv, json, os, sys
HEADER = {HEADER!r}.split(",")
SCHEMA_VERSION = {SCHEMA_VERSION!r}
CALLS = os.environ["STUB_CALLS"]
with open(CALLS, "a") as f:
    f.write(json.dumps(sys.argv) + "\\n")
with open(CALLS) as f:
    k = sum(1 for _ in f)  # a different value each run, so that repetitions spread
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
gpu = "gpu" in flags.get("devices", "") or flags.get("device") == "cuda"

def benchmark(regex):
    assert regex.startswith("^") and regex.endswith("(/.*)?$"), regex  # takes any variant
    return regex[1:-len("(/.*)?$")]

def write_row(path, name, framework, wall, device_share, settings=""):
    new = not os.path.exists(path)
    step = wall * device_share if gpu else wall
    variant = "optimizer:" + flags["optimizer"] + "/data_on_device"
    batch = int(name.rsplit("bs:", 1)[1])
    row = {{"schema_version": SCHEMA_VERSION, "benchmark": name + "/" + variant, "kind": "train",
           "framework": framework, "run_type": "iteration", "repetition": "0", "status": "ok",
           "batch": str(batch), "step_time_s": str(step), "wall_step_time_s": str(wall),
           "samples_per_s": str(batch / step), "utilisation": "0.5", "peak_gflops": "200",
           "variant": variant, "measurement": "measured", "peer_settings": settings,
           "host": "stub", "cores": "2"}}
    with open(path, "a", newline="") as f:
        if new:
            f.write(",".join(HEADER) + "\\n")
        csv.writer(f, lineterminator="\\n").writerow([row.get(c, "") for c in HEADER])
"""

TRAINBENCH = COMMON + """
if sys.argv[1:] == ["--csv_header", "--json"]:  # as trainbench answers the peer (this one's stand-in does not ask)
    print(json.dumps({"schema_version": SCHEMA_VERSION, "columns": HEADER}))
    sys.exit(0)
write_row(flags["csv"], benchmark(flags["benchmark_filter"]), "trainbench", 0.005 * (1 + 0.01 * k), 0.8)
"""

PEER = COMMON + """
name = benchmark(flags["filter"])
if "--search_only" in sys.argv:
    path = flags["settings_out"]
    doc = json.load(open(path)) if os.path.exists(path) else {"format": 1, "benchmarks": {}}
    doc["benchmarks"][name + "/optimizer:" + flags["optimizer"]] = {"settings": %r, "trials": []}
    json.dump(doc, open(path, "w"))
    sys.exit(0)
chosen = json.load(open(flags["settings"][1:]))["benchmarks"]
[settings] = [v["settings"] for n, v in chosen.items() if n.startswith(name + "/")]
write_row(flags["csv"], name, "pytorch", 0.008 * (1 + 0.01 * k), 0.6, settings)
""" % CHOSEN


def stub(path: Path, body: str, interpreter: str = sys.executable) -> Path:
    path.write_text(f"#!{interpreter}\n{body}")
    path.chmod(0o755)
    return path


def run_script(tmp_path: Path, device: str, **env) -> tuple[subprocess.CompletedProcess, list]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # libopenblas0-openmp counts as installed: nothing is installed by the test.
    stub(bin_dir / "dpkg-query", "echo 'install ok installed'", "/bin/sh")
    peer = stub(tmp_path / "fake_peer.py", PEER)
    # The interpreter the script is given: the stand-in peer for the peer, a yes to `import
    # torch`, the real Python for the rest (compare.py, pytorch_report.py).
    python = stub(tmp_path / "python", f'case "$1" in\n  */pytorch_train.py) shift; exec "{sys.executable}" '
                                       f'"{peer}" "$@";;\n  -c) exit 0;;\nesac\nexec "{sys.executable}" "$@"\n',
                  "/bin/bash")
    calls = tmp_path / "calls.jsonl"
    environment = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", STUB_CALLS=str(calls),
                       TB_COMPARE_DEVICE=device, TB_PYTHON=str(python),
                       TB_TRAINBENCH=str(stub(tmp_path / "trainbench", TRAINBENCH)),
                       TB_RESULTS_DIR=str(tmp_path / "results"), **{"TB_COMPARE_FILTER": "mlp", **env})
    r = subprocess.run(["bash", str(SCRIPTS / "compare_pytorch.sh")], capture_output=True, text=True,
                       env=environment, timeout=300, cwd=ROOT)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return r, [json.loads(line) for line in lines]


def runs(calls: list, who: str) -> list[list[str]]:
    return [c for c in calls if Path(c[0]).name == who]


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_settings_first_then_five_rounds_compared_on_one_clock(tmp_path, device):
    r, calls = run_script(tmp_path, device)
    assert r.returncode == 0, r.stdout + r.stderr
    benchmarks = 1 if device == "cpu" else 4  # the MLP; on a GPU in four precisions
    peer, trainbench = runs(calls, "fake_peer.py"), runs(calls, "trainbench")
    # One search per benchmark before any timed run, then 5 rounds of one repetition a side.
    searches = [i for i, c in enumerate(peer) if "--search_only" in c]
    assert searches == list(range(benchmarks))
    assert len(peer) == benchmarks * (1 + 5) and len(trainbench) == benchmarks * 5
    settings = next(a.split("=", 1)[1] for a in peer[0] if a.startswith("--settings_out="))
    assert settings.endswith("-pytorch-settings.json")
    assert all(f"--settings=@{settings}" in c and "--repetitions=1" in c for c in peer[benchmarks:])
    assert all("--benchmark_repetitions=1" in c for c in trainbench)
    # Compared on the wall clock, lower better, with a verdict at n=5/5 (PyTorch 1.6x slower).
    out = r.stdout
    assert "wall_step_time_s (lower is better)" in out
    assert "beyond noise (U test p=" in out and "underpowered" not in out
    lines = [x for x in out.splitlines() if x.startswith("train/mlp/mnist/") and CHOSEN in x]
    assert len(lines) == benchmarks
    for line in lines:
        ratios = [float(x[:-1]) for x in line.split() if re.fullmatch(r"[0-9.]+x", x)]
        target = 1.5 if device == "cpu" else 1.0  # the script's targets
        assert ratios[0] == pytest.approx(1.6, abs=0.05) and ratios[1] == target and " yes " in line
        # On a GPU, the device clock too: trainbench 0.8 of its wall, PyTorch 0.6 of its: 1.2x.
        assert len(ratios) == (3 if device == "gpu" else 2)
        assert device == "cpu" or ratios[2] == pytest.approx(1.2, abs=0.05)
    assert ("step_time_s (lower is better)" in out.replace("wall_step_time_s", "")) == (device == "gpu")
    with open(next((tmp_path / "results").glob("*-pytorch.csv")), newline="") as f:
        assert {row["peer_settings"] for row in csv.DictReader(f)} == {CHOSEN}


def test_fewer_than_four_rounds_are_said_to_give_no_verdict(tmp_path):
    r, calls = run_script(tmp_path, "cpu", TB_ROUNDS="3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(runs(calls, "trainbench")) == 3
    assert "with fewer than 4 values a side compare.py's U test cannot reach p < 0.05" in r.stderr
    assert "too few repetitions (n=3/3: p cannot go below 0.1)" in r.stdout


def test_repetitions_within_a_round_count_towards_the_verdict(tmp_path):
    """TB_ROUNDS=1 TB_REPETITIONS=5 (the GPU's cheaper way to five values a side): each side
    runs once, with five repetitions."""
    r, calls = run_script(tmp_path, "gpu", TB_ROUNDS="1", TB_REPETITIONS="5", TB_COMPARE_FILTER="mlp/mnist/gpu:1/fp32")
    assert r.returncode == 0, r.stdout + r.stderr
    [trainbench] = runs(calls, "trainbench")
    [search, peer] = runs(calls, "fake_peer.py")
    assert "--benchmark_repetitions=5" in trainbench and "--repetitions=5" in peer
    assert "--search_only" in search
    assert "fewer than 4 values" not in r.stderr


@pytest.mark.parametrize("env, needle", [
    ({"TB_ROUNDS": "0"}, "TB_ROUNDS='0' is not a whole number >= 1"),
    ({"TB_REPETITIONS": "two"}, "TB_REPETITIONS='two' is not a whole number >= 1"),
    ({"TB_TRIAL_TIME": "-1"}, "TB_TRIAL_TIME='-1' is not a number of seconds"),
])
def test_bad_settings_of_the_script_are_refused(tmp_path, env, needle):
    r, calls = run_script(tmp_path, "cpu", **env)
    assert r.returncode == 2 and needle in r.stderr and calls == []


def test_the_report_matches_a_benchmark_with_any_variant(tmp_path):
    report = SCRIPTS / "peers" / "pytorch_report.py"
    rows = tmp_path / "rows.csv"
    rows.write_text(f"{HEADER}\n" + "\n".join(
        f"4,train/mlp/mnist/cpu/fp32/bs:100{suffix},,,,,,,100,,pytorch,iteration,,0,{status},"
        f"{message},,0.01,{rate},,{peak},0.01,,,,,measured,{CHOSEN}"
        for suffix, status, message, rate, peak in (
            ("/optimizer:sgd", "ok", "", "10000", "210"),
            ("0/optimizer:sgd", "ok", "", "1", "1"),      # bs:1000: another benchmark
            ("/optimizer:sgd", "failed", "loss is not finite: nan", "", ""))) + "\n")

    def ask(*args):
        r = subprocess.run([sys.executable, str(report), *map(str, args)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()
    name = "train/mlp/mnist/cpu/fp32/bs:100"
    assert ask("last", rows, name) == "failed: loss is not finite: nan"
    assert ask("peak", rows, name) == "210"
    assert ask("last", rows, "train/lstm/sine/cpu/fp32/bs:20") == "no row written"
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"format": 1, "benchmarks": {name + "/optimizer:sgd": {"settings": CHOSEN}}}))
    assert ask("setting", settings, name) == CHOSEN
    assert ask("setting", settings, "train/lstm/sine/cpu/fp32/bs:20").startswith("no setting chosen")


def test_the_peak_comes_from_repetitions_or_their_median_never_a_stddev_row(tmp_path):
    """On the H100 (2026-11-24) trainbench's last row of a benchmark with repetitions was its
    stddev aggregate, whose peak_gflops is 0: the peer was handed --peak_gflops=0 and refused."""
    report = SCRIPTS / "peers" / "pytorch_report.py"
    rows = tmp_path / "rows.csv"
    rows.write_text(f"{HEADER}\n" + "\n".join(
        f"4,train/mlp/mnist/cpu/fp32/bs:100,,,,,,,100,,trainbench,{run_type},{aggregate},,ok,"
        f",,0.01,10000,,{peak},0.01,,,,,measured,"
        for run_type, aggregate, peak in (("iteration", "", "67000"), ("aggregate", "mean", "67000"),
                                          ("aggregate", "median", "67000"), ("aggregate", "stddev", "0"),
                                          ("aggregate", "cv", "0"))) + "\n")
    r = subprocess.run([sys.executable, str(report), "peak", str(rows), "train/mlp/mnist/cpu/fp32/bs:100"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "67000"

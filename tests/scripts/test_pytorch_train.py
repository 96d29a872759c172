"""Tests of scripts/peers/pytorch_train.py, the PyTorch baseline of issue 7, with torch: its
models count the parameters and FLOPs trainbench counts (its --list_models against
`trainbench --list_models --json` and trainbench's own table), a short run writes rows
trainbench's readers take (the schema trainbench reports, version included, its benchmark names
and kinds, the workload's optimizer, parameters and FLOPs from the JSON, one row per repetition
and a median), a PyTorch definition
that drifted from trainbench's fails its row naming both counts, a model without one is skipped
while the others run, and --optimizer and --lr override as trainbench's do. Issue 20: the settings
search tries both layouts of an image model in child processes and times the fastest, naming it
in peer_settings; rows carry both clocks (step_time_s, wall_step_time_s), and on a GPU the
device time is the sum of CUDA events recorded around each step (checked here with stand-in
events). (What the script does before it loads torch, test_pytorch_flags.py tests without it;
the search's choice with stubbed timing, test_pytorch_settings.py.)

Skipped, with the reason, where the distribution's Python cannot import torch (it is optional:
scripts/compare_pytorch.sh installs it); the tests that ask the real trainbench skip where no
build answers --list_models --json. Runs on one thread to stay short on shared machines."""
import copy
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, SCRIPTS
from test_pytorch_flags import FIFTH, TODAY, fake_trainbench

PEER = SCRIPTS / "peers" / "pytorch_train.py"
sys.path.insert(0, str(SCRIPTS / "peers"))
# The peer's parts without torch; those with torch are imported by the peer fixture below.
from torchpeer.csvout import iteration_values  # noqa: E402
from torchpeer.workloads import optimizer_of, workload_from_json  # noqa: E402
PYTORCH_MODELS = {"mlp", "lenet5", "lstm", "resnet152"}  # the models the peer defines


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


@pytest.fixture(scope="module")
def trainbench() -> Path:
    """The repository's trainbench, when one is built recently enough to have --json."""
    binary = trainbench_binary()
    if binary is None:
        pytest.skip("no trainbench binary to compare with (build the release preset, or set $TRAINBENCH)")
    r = subprocess.run([str(binary), "--list_models", "--json"], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0 or not r.stdout.lstrip().startswith("{"):
        pytest.skip(f"{binary} has no --list_models --json yet (a stale build: rebuild it)")
    return binary


@pytest.fixture(scope="module")
def trainbench_workloads(trainbench) -> dict:
    """(model, dataset) -> the binary's JSON entry."""
    r = subprocess.run([str(trainbench), "--list_models", "--json"], capture_output=True, text=True,
                       timeout=60)
    return {(w["model"], w["dataset"]): w for w in json.loads(r.stdout)["workloads"]}


def trainbench_schema(binary: Path) -> dict:
    """trainbench --csv_header --json: {"schema_version": ..., "columns": [...]}."""
    r = subprocess.run([str(binary), "--csv_header", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{binary} --csv_header --json: {r.stderr} (a stale build: rebuild it)"
    return json.loads(r.stdout)


def run_peer(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PEER), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def model_table(stdout: str) -> dict:
    """(model, dataset) -> (params, fwd GFLOP/sample, train GFLOP/step) from a --list_models
    table, as the printed text, so the two tools must agree digit for digit."""
    rows = {}
    for line in stdout.splitlines()[1:]:
        cells = line.split()
        # trainbench's table adds gradient MiB and buckets after the six columns both print.
        if len(cells) in (6, 8) and cells[3].isdigit():
            rows[(cells[0], cells[1])] = (int(cells[3]), cells[4], cells[5])
        elif not cells:
            break  # trainbench's memory plans follow its table
    return rows


@pytest.fixture(scope="module")
def peer_models(trainbench):
    r = run_peer("--list_models", "--trainbench", trainbench)
    assert r.returncode == 0, r.stderr
    return model_table(r.stdout)


def test_list_models_counts_what_trainbench_counts(trainbench, trainbench_workloads, peer_models):
    ours = {key for key in trainbench_workloads if key[0] in PYTORCH_MODELS}
    assert set(peer_models) == ours
    for key, (params, forward, _) in peer_models.items():
        w = trainbench_workloads[key]
        assert params == w["params"], key
        assert forward == f"{w['forward_flops_per_sample'] * 1e-9:.6g}", key
        # Training: 3 x forward, less the input gradient of the layers fed by the input.
        assert 2 * w["forward_flops_per_sample"] < w["train_flops_per_sample"] < 3 * w["forward_flops_per_sample"]
    r = subprocess.run([str(trainbench), "--list_models"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    theirs = model_table(r.stdout)
    for key, row in peer_models.items():
        assert row == theirs[key], (key, row, theirs[key])


ONE_THREAD = "threads:1/blas_threads:1/omp_wait:passive"  # a setting, so that nothing is searched


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, trainbench):
    """mlp and lstm, one thread, two short repetitions, into a new CSV."""
    out = tmp_path_factory.mktemp("peer") / "pytorch.csv"
    r = run_peer("--filter", "train/(mlp/mnist|lstm)/", "--threads", 1, "--min_time", 0.05,
                 "--repetitions", 2, "--peak_gflops", 100, "--csv", out, "--trainbench", trainbench,
                 "--settings", ONE_THREAD)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out, newline="") as f:
        header = next(csv.reader(f))
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    return r, out, header, rows


def test_rows_have_trainbench_columns_names_and_values(short_run, trainbench, trainbench_workloads):
    r, _, header, rows = short_run
    schema = trainbench_schema(trainbench)
    assert header == schema["columns"]
    cores = len(os.sched_getaffinity(0))
    device = "cpu" if cores == 1 else "cpu:1"
    expected = {}
    for key in (("mlp", "mnist"), ("lstm", "sine")):
        w = trainbench_workloads[key]
        expected[f"train/{key[0]}/{key[1]}/{device}/fp32/bs:{w['batch']}/data_on_device"] = w
    assert {row["benchmark"] for row in rows} == set(expected)
    for name, w in expected.items():
        mine = [row for row in rows if row["benchmark"] == name]
        iterations = [row for row in mine if row["run_type"] == "iteration"]
        medians = [row for row in mine if row["run_type"] == "aggregate"]
        assert [row["repetition"] for row in iterations] == ["0", "1"]
        assert [row["aggregate"] for row in medians] == ["median"]
        for row in mine:
            assert row["schema_version"] == schema["schema_version"] and row["status"] == "ok", row
            # The kind's facts trainbench writes for a one-thread CPU row (tbdevices' table).
            assert (row["device_kind"], row["backend"], row["data_parallel"]) == (
                "cpu:T" if device == "cpu:1" else "cpu", "cpu", ""), row
            # The peer's batches are a pool made before timing: trainbench's data_on_device.
            assert row["measurement"] == "measured" and row["variant"] == "data_on_device"
            assert row["data_on_device"] == "1"
            assert row["peer_settings"] == ONE_THREAD  # no layout: neither takes images
            # The CPU has one clock: the wall's, and no device columns.
            assert float(row["step_time_s"]) == pytest.approx(float(row["wall_step_time_s"]), rel=1e-9)
            assert row["device_step_time_s"] == row["device_samples_per_s"] == ""
            assert row["kind"] == "train" and row["device"] == device and row["threads"] == "1"
            assert row["precision"] == "fp32" and row["batch"] == str(w["batch"])
            assert row["optimizer"] == w["optimizer"]["kind"]  # no --optimizer: the workload's
            assert row["warmup_steps"] == str(w["warmup_steps"])
            assert row["data_source"] == ("generated" if w["task"] == "regression" else "synthetic")
            assert row.get("framework", "pytorch") == "pytorch"
            assert int(row["params"]) == w["params"]
            assert float(row["train_flops_per_sample"]) == pytest.approx(w["train_flops_per_sample"], rel=1e-5)
            assert float(row["samples_per_s"]) > 0 and int(row["iterations"]) >= 1
            if row["run_type"] == "iteration":  # a median of each column is not a product
                assert float(row["samples_per_s"]) * float(row["step_time_s"]) == pytest.approx(
                    int(row["batch"]), rel=1e-4)
                assert float(row["load_avg_1m"]) >= 0
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
    # What the run says about its environment: the re-exec cleared OpenBLAS' overrides and
    # put the setting's variables in force.
    assert "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset" in r.stderr
    assert "BLAS:" in r.stderr
    assert "OPENBLAS_NUM_THREADS=1, OMP_WAIT_POLICY=PASSIVE" in r.stderr


def test_appending_keeps_one_header_and_optimizer_overrides(short_run, trainbench):
    _, out, header, rows = short_run
    before = out.read_text().splitlines()
    r = run_peer("--filter", "lstm", "--threads", 1, "--min_time", 0, "--optimizer", "sgd",
                 "--csv", out, "--trainbench", trainbench, "--settings", ONE_THREAD)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert lines[:len(before)] == before and len(lines) == len(before) + 1
    assert sum(line.startswith("schema_version,") for line in lines) == 1
    with open(out, newline="") as f:
        last = list(csv.DictReader(f))[-1]
    assert last["benchmark"].startswith("train/lstm/") and last["optimizer"] == "sgd"
    # trainbench's variant of the same flags ends the name and fills the column.
    assert last["variant"] == "optimizer:sgd/data_on_device"
    assert last["benchmark"].endswith("/bs:20/optimizer:sgd/data_on_device")


def test_a_drifted_definition_fails_its_row_naming_both_counts(tmp_path):
    drifted = copy.deepcopy(TODAY)
    drifted[0]["params"] += 1                          # mlp/mnist
    drifted[3]["forward_flops_per_sample"] = 14800.0   # lstm/sine; PyTorch's count is 14700
    out = tmp_path / "rows.csv"
    r = run_peer("--filter", "train/(mlp/mnist|lstm)/", "--threads", 1, "--min_time", 0,
                 "--csv", out, "--trainbench", fake_trainbench(tmp_path, drifted), "--settings", ONE_THREAD)
    assert r.returncode == 1, r.stdout + r.stderr
    with open(out, newline="") as f:
        rows = {row["model"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"mlp", "lstm"}
    assert all(row["status"] == "failed" for row in rows.values()), rows
    assert "mlp/mnist: 1796010 parameters in PyTorch, 1796011 in trainbench" in rows["mlp"]["message"]
    assert "14700 forward FLOPs per sample in PyTorch, 14800 in trainbench" in rows["lstm"]["message"]
    assert "FAILED: mlp/mnist: 1796010 parameters" in r.stdout


def test_a_model_without_a_definition_is_skipped_while_the_others_run(tmp_path):
    out = tmp_path / "rows.csv"
    r = run_peer("--filter", "train/(toymodel|lstm)/", "--threads", 1, "--min_time", 0.05,
                 "--csv", out, "--trainbench", fake_trainbench(tmp_path, TODAY + [FIFTH]),
                 "--settings", ONE_THREAD)
    assert r.returncode == 0, r.stdout + r.stderr
    skipped = [line for line in r.stderr.splitlines() if "toymodel" in line]
    assert len(skipped) == 1 and "no PyTorch definition of model 'toymodel'" in skipped[0], r.stderr
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["model"], row["status"]) for row in rows] == [("lstm", "ok")]


def test_rows_carry_the_schema_version_trainbench_reports(tmp_path):
    """The version is the binary's, not one the peer keeps: a trainbench that says it writes
    schema 99 gets rows of schema 99."""
    out = tmp_path / "rows.csv"
    r = run_peer("--filter", "train/lstm/", "--threads", 1, "--min_time", 0.02, "--repetitions", 2,
                 "--csv", out, "--trainbench", fake_trainbench(tmp_path, schema_version="99"),
                 "--settings", ONE_THREAD)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["run_type"], row["status"]) for row in rows] == [
        ("iteration", "ok"), ("iteration", "ok"), ("aggregate", "ok")], rows
    assert {row["schema_version"] for row in rows} == {"99"}


@pytest.fixture(scope="module")
def peer():
    """The peer's parts that import torch, imported here rather than at the top: a Python
    without torch must reach this file's skip, not fail to collect it."""
    import torch
    from torchpeer import session, timing
    return SimpleNamespace(torch=torch, session=session, timing=timing)


@pytest.mark.parametrize("flags, model, dataset, batch, kind, lr", [
    ({}, "resnet152", "cifar10", 128, "sgd", 0.1 * 128 / 256),   # scaled with the batch
    ({}, "resnet152", "imagenet", 8, "sgd", 0.1 * 8 / 256),
    ({}, "lstm", "sine", 20, "adam", 0.01),
    ({"optimizer": "sgd"}, "mlp", "mnist", 100, "sgd", 0.01),     # trainbench --optimizer's lr
    ({"optimizer": "adam"}, "resnet152", "cifar10", 128, "adam", 0.001),
    ({"lr": 0.5}, "resnet152", "cifar10", 128, "sgd", 0.5),       # --lr alone: not scaled
    ({"optimizer": "sgd", "lr": 0.2}, "lstm", "sine", 20, "sgd", 0.2),
])
def test_the_optimizer_is_trainbench_s(flags, model, dataset, batch, kind, lr):
    entry = next(w for w in TODAY if (w["model"], w["dataset"]) == (model, dataset))
    w = workload_from_json(entry, 0)
    o = optimizer_of(w, batch, SimpleNamespace(**{"optimizer": None, "lr": None, **flags}))
    assert (o.kind, o.lr) == (kind, pytest.approx(lr))
    # What --optimizer does not reset stays the workload's, as in trainbench.
    j = entry["optimizer"]
    assert (o.momentum, o.weight_decay, o.beta1, o.beta2, o.eps) == (
        j["momentum"], j["weight_decay"], j["beta1"], j["beta2"], j["eps"])


def read_settings(path: Path) -> dict:
    return json.loads(path.read_text())["benchmarks"]


def test_the_search_tries_both_layouts_in_child_processes(tmp_path):
    """LeNet-5 on one thread, --search_only: four trials (two layouts x two wait policies),
    each in a child process of its own that ran; the fastest is the choice."""
    settings = tmp_path / "settings.json"
    r = run_peer("--filter", "train/lenet5/", "--threads", 1, "--trial_time", 0.05, "--search_only",
                 "--settings_out", settings, "--trainbench", fake_trainbench(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    [(name, entry)] = read_settings(settings).items()
    trials = entry["trials"]
    assert sorted(t["settings"] for t in trials) == sorted(
        f"layout:{layout}/threads:1/blas_threads:1/omp_wait:{wait}"
        for layout in ("nchw", "channels_last") for wait in ("active", "passive"))
    assert all(t["samples_per_s"] > 0 and t["steps"] >= 1 and not t["error"] for t in trials), trials
    fastest = max(trials, key=lambda t: t["samples_per_s"])["settings"]
    assert entry["settings"] == fastest
    assert f"chosen: {fastest}" in r.stdout and r.stdout.count("  trial layout:") == 4
    assert r.stdout.strip().splitlines()[-1].startswith("  chosen:")  # nothing timed after it


def test_the_searched_setting_is_timed_and_named_in_the_rows(tmp_path):
    """The LSTM on one thread: its two settings tried, the fastest timed in a child that
    writes the rows, which name it; run again from the settings file, nothing is searched."""
    out, settings = tmp_path / "rows.csv", tmp_path / "settings.json"
    binary = fake_trainbench(tmp_path)
    r = run_peer("--filter", "train/lstm/", "--threads", 1, "--min_time", 0.05, "--trial_time", 0.05,
                 "--csv", out, "--settings_out", settings, "--trainbench", binary)
    assert r.returncode == 0, r.stdout + r.stderr
    [(name, entry)] = read_settings(settings).items()
    assert len(entry["trials"]) == 2
    assert entry["settings"] == max(entry["trials"], key=lambda t: t["samples_per_s"])["settings"]
    again = run_peer("--filter", "train/lstm/", "--threads", 1, "--min_time", 0.05,
                     f"--settings=@{settings}", "--csv", out, "--trainbench", binary)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "trial" not in again.stdout and f"{name}: {entry['settings']}, from {settings}" in again.stdout
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["benchmark"], row["status"], row["peer_settings"]) for row in rows] == [
        (name, "ok", entry["settings"])] * 2


def test_both_clocks_go_into_the_row(peer):
    """As trainbench writes them (schema 5 on): step_time_s, wall_step_time_s and samples_per_s
    on the wall clock, host gaps included; on a GPU the device clock (CUDA events) in
    device_step_time_s and device_samples_per_s; on the CPU no device columns."""
    gpu = peer.timing.Trial(steps=10, wall=0.5, cpu=0.4, device=0.3)
    v = iteration_values(gpu, 100, 1e6, None, 2.0, 1.0)
    assert v["step_time_s"] == pytest.approx(0.05) and v["wall_step_time_s"] == pytest.approx(0.05)
    assert v["samples_per_s"] == pytest.approx(100 / 0.05)
    assert v["device_step_time_s"] == pytest.approx(0.03) and v["device_samples_per_s"] == pytest.approx(100 / 0.03)
    assert v["host_cpu_util"] == pytest.approx(0.4 / 0.5)
    cpu = iteration_values(peer.timing.Trial(10, 0.5, 0.4), 100, 1e6, None, 2.0, 1.0)
    assert cpu["step_time_s"] == cpu["wall_step_time_s"] == pytest.approx(0.05)
    assert "device_step_time_s" not in cpu


class FakeEvent:
    """A stand-in for torch.cuda.Event: the host clock when recorded."""
    made = []

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None
        FakeEvent.made.append(self)

    def record(self):
        assert self.at is None, "an event recorded twice"
        self.at = time.perf_counter()

    def elapsed_time(self, end):  # milliseconds, as torch's
        return (end.at - self.at) * 1e3


def stand_in_gpu_session(peer, monkeypatch):
    """A tiny CPU model in a session marked cuda, with FakeEvent for torch.cuda.Event."""
    torch = peer.torch
    model = torch.nn.Linear(4, 2)
    session = peer.session.Session(model, torch.nn.CrossEntropyLoss(),
                                   torch.optim.SGD(model.parameters(), lr=0.1),
                                   [(torch.randn(8, 4), torch.randint(0, 2, (8,)))], cuda=True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    FakeEvent.made = []
    return session


def test_gpu_steps_record_a_pair_of_events_each(peer, monkeypatch):
    """timed() on a GPU session: a pair of events per step, each recorded once, the start
    before the step's work and the end after it, the next step's start after that end."""
    session = stand_in_gpu_session(peer, monkeypatch)
    trial = peer.timing.timed(session, 6)
    assert trial.steps == 6 and len(FakeEvent.made) == 12
    assert all(e.at is not None for e in FakeEvent.made)
    times = [e.at for e in FakeEvent.made]
    assert times == sorted(times)  # start_0 < end_0 <= start_1 < end_1 ...
    assert trial.device == pytest.approx(sum(times[1::2]) - sum(times[0::2]), rel=1e-6)
    assert trial.device <= trial.wall


def test_gpu_device_time_is_summed_from_events_around_each_step(peer, monkeypatch):
    """The device time is the sum of each step's events: a sleep between steps (a host gap)
    counts only in the wall time."""
    session = stand_in_gpu_session(peer, monkeypatch)
    gap = 0.02
    run = session._run

    def with_host_gaps(n, events):
        for i in range(n):
            run(1, events[i:i + 1])
            time.sleep(gap)
    monkeypatch.setattr(session, "_run", with_host_gaps)
    trial = peer.timing.timed(session, 5)
    assert trial.steps == 5 and len(FakeEvent.made) == 10
    assert all(e.at is not None for e in FakeEvent.made)  # every step's pair recorded
    starts, ends = FakeEvent.made[0::2], FakeEvent.made[1::2]
    assert all(s.at < e.at for s, e in zip(starts, ends))
    assert trial.device == pytest.approx(sum(e.at - s.at for s, e in zip(starts, ends)), rel=1e-6)
    assert trial.wall >= trial.device + 5 * gap * 0.9  # the gaps: wall clock only

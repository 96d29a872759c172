"""End-to-end tests of the trainbench binary: runs it with filters and flags, reads the CSV
it wrote, and feeds it bad input. The binary comes from $TRAINBENCH (set by ctest)."""
import csv
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from processes import marked_processes

BINARY = os.environ.get("TRAINBENCH", "build/release/bench/trainbench")
FAST = ["--benchmark_min_time=0.05"]
# For a row whose learning is not the point: LeNet-5 warms up 200 steps by default (its sigmoids'
# plateau), 6 of the 9 s its row takes under AddressSanitizer; after 4 steps the loss of the first
# batch has still fallen, as every row checks.
FEW_STEPS = ["--warmup_steps=2", "--iterations=2"]


def run(*args, timeout=600):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


def console_lines(stdout):
    """The console's lines without Google Benchmark's colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", stdout).splitlines()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_cpu_row_in_lanes_says_so_and_a_bad_tb_cpu_lanes_fails_naming_it(tmp_path):
    """A cpu row whose batch ran as lanes (engine/cpu/network.hpp: slices of the batch, each
    through the network on a thread of its own) says so in its message; TB_CPU_LANES=1 runs the
    batch through one network and says nothing of lanes; a value that is no number of lanes fails
    the row, naming the variable and what to give."""
    def lenet(lanes, out):
        env = dict(os.environ, TB_CPU_LANES=lanes)
        return subprocess.run([BINARY, "--benchmark_filter=train/lenet5/cifar10/cpu/", "--devices=cpu",
                               "--precisions=fp32", "--timeline=off", f"--csv={out}", *FEW_STEPS],
                              capture_output=True, text=True, timeout=600, env=env)
    runs = {lanes: (lenet(lanes, tmp_path / f"{lanes}.csv"), tmp_path / f"{lanes}.csv") for lanes in ("2", "1", "two")}
    for lanes in ("2", "1"):
        r, out = runs[lanes]
        assert r.returncode == 0, r.stderr
        [row] = [row for row in read_csv(out) if row["aggregate"] == ""]
        assert row["status"] == "ok"
        said = "ran as 2 lanes of 50 samples" in row["message"]
        assert said == (lanes == "2"), row["message"]
    r, out = runs["two"]
    assert r.returncode != 0
    [row] = read_csv(out)
    assert row["status"] == "failed"
    assert "TB_CPU_LANES='two': give a whole number of lanes from 1 to 1024" in row["message"]
    assert "TB_CPU_LANES='two'" in r.stdout + r.stderr


def test_mlp_run_writes_a_checked_csv_row(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/cpu/", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    assert "train/mlp/mnist/cpu/fp32/bs:100" in r.stdout
    rows = read_csv(out)
    assert len(rows) == 1
    row = rows[0]
    assert row["schema_version"] == "7"
    assert (row["device_kind"], row["backend"], row["data_parallel"]) == ("cpu", "cpu", "")
    assert row["cpu_isa"] in ("sse2", "avx2", "avx512") and row["onednn_isa"] != ""
    assert row["baseline"] == "" and row["cpu_baseline"] == ""  # the cpu row is compared with nothing
    assert row["prediction_inputs"].startswith("v1;buckets=")
    assert row["variant"] == "" and row["measurement"] == "measured" and row["shared_device"] == ""
    assert float(row["sgemm_gflops"]) > 0 and float(row["load_avg_1m"]) >= 0
    # (max - min) / median of sgemm's rounds: 1.35 on a machine loaded by other tests, so no bound above.
    assert 0 <= float(row["peak_spread"]) < math.inf
    assert row["benchmark"] == "train/mlp/mnist/cpu/fp32/bs:100"
    assert (row["model"], row["dataset"], row["device"], row["precision"]) == ("mlp", "mnist", "cpu", "fp32")
    assert row["data_source"] == "synthetic"
    # An empty message, or the note of a utilisation above a peak measured low on a loaded machine
    # (below): a full ctest run at -j2 saw "utilisation 1.06 exceeds 1 ... (67.0 GFLOP/s, spread 128%)" here.
    assert row["status"] == "ok", row["message"]
    assert row["message"] == "" or (float(row["utilisation"]) > 1 and row["message"].startswith("utilisation ")), row[
        "message"
    ]
    assert row["run_type"] == "iteration"
    assert int(row["iterations"]) >= 1
    assert float(row["samples_per_s"]) > 0
    assert float(row["step_time_s"]) > 0
    assert abs(float(row["samples_per_s"]) * float(row["step_time_s"]) - 100) < 1.0
    assert int(row["params"]) == 1796010
    assert float(row["loss_last"]) < float(row["loss_first"])
    # Above the sgemm peak only with a note saying why the figure cannot be taken as it is.
    assert 0 < float(row["utilisation"]) <= 1 or "exceeds 1" in row["message"], row["message"]
    assert float(row["peak_gflops"]) > 0
    assert float(row["host_cpu_s_per_step"]) > 0
    assert int(float(row["peak_rss_bytes"])) > 10 * 2**20
    for column in ("host", "os", "cpu_model", "compiler", "onednn", "git_commit", "timestamp"):
        assert row[column], column
    assert int(row["cores"]) >= 1


def test_the_prediction_probes_steps_after_the_window_are_not_the_rows(tmp_path):
    """With the timeline on (the default) a one-device row's first repetition is followed by the
    prediction probes' steps (at least 0.5 s of them); its loss_last is still the last timed
    step's: the same 5 steps from the same seed give the same loss with the timeline off, where
    no probe runs. Before, loss_last was the probes' last (0.00123 against 0.529 for the LSTM)."""
    losses = {}
    for timeline in ("on", "off"):
        out = tmp_path / f"{timeline}.csv"
        r = run("--benchmark_filter=train/lstm/", "--devices=cpu:1", "--precisions=fp32", "--iterations=5",
                f"--timeline={timeline}", f"--csv={out}")
        assert r.returncode == 0, r.stderr
        [row] = read_csv(out)
        assert (row["prediction_inputs"] != "") == (timeline == "on"), row["prediction_inputs"]
        losses[timeline] = (float(row["loss_first"]), float(row["loss_last"]))
    assert losses["on"] == pytest.approx(losses["off"], rel=1e-6), losses


def test_repetitions_add_aggregate_rows_and_appending_keeps_one_header(tmp_path):
    """Two runs onto one --csv: one header, each run's repetitions and aggregates; the run's last
    lines say how many rows it wrote where, and the second that the file already held rows."""
    out = tmp_path / "run.csv"
    for second in (False, True):
        before = len(read_csv(out)) if second else 0
        r = run("--benchmark_filter=train/lstm/sine/cpu/", f"--csv={out}", "--benchmark_repetitions=2", *FAST)
        assert r.returncode == 0, r.stderr
        said = f"trainbench: {len(read_csv(out)) - before} rows written to {out}" + (
            ", after the rows it already held (--csv appends; give a new file for this run alone)" if second else "")
        assert said + "\n" in r.stderr, r.stderr
    lines = out.read_text().splitlines()
    assert sum(line.startswith("schema_version,") for line in lines) == 1
    rows = read_csv(out)
    iterations = [r for r in rows if r["run_type"] == "iteration"]
    aggregates = {r["aggregate"] for r in rows if r["run_type"] == "aggregate"}
    assert len(iterations) == 4
    assert {"mean", "median", "stddev"} <= aggregates
    assert all(r["batch"] == "20" for r in rows)


def test_list_tests_names_every_model_and_device():
    r = run("--benchmark_list_tests", "--devices=cpu,cpu:1")
    assert r.returncode == 0, r.stderr
    names = r.stdout.split()
    for expected in ("train/mlp/mnist/cpu/fp32/bs:100", "train/lenet5/cifar10/cpu:1/fp32/bs:100",
                     "train/lstm/sine/cpu/fp32/bs:20", "train/resnet152/cifar10/cpu/fp32/bs:128",
                     "train/resnet152/imagenet/cpu/fp32/bs:8"):
        assert expected in names


def test_epochs_of_several_replicas_are_skipped_and_two_rows_replayed_as_one_are_refused(tmp_path):
    """An epochs/ run trains one replica: on cpu:1/jobs:2 (or mpi:N) it was written under that
    device's name with cpu:1's very losses; it is skipped, saying so. Two saved rows of one
    workload (cpu and cpu:1) replay under one name: the second was pooled with the first, never
    run; --replay_from refuses them, naming both."""
    out = tmp_path / "epochs.csv"
    r = run("--benchmark_filter=epochs/lstm/", "--devices=cpu:1,cpu:1/jobs:2", "--epochs=1", f"--csv={out}")
    assert r.returncode == 0, r.stderr
    rows = {row["device"]: row for row in read_csv(out) if row["run_type"] != "epoch"}
    assert rows["cpu:1"]["status"] == "ok"
    assert rows["cpu:1/jobs:2"]["status"] == "skipped"
    assert "epochs/ rows train one replica" in rows["cpu:1/jobs:2"]["message"]
    saved = tmp_path / "saved.csv"
    assert run("--benchmark_filter=train/lstm/", "--devices=cpu,cpu:1", "--iterations=3", f"--csv={saved}").returncode == 0
    r = run(f"--replay_from={saved}", "--iterations=2")
    assert r.returncode == 2, r.stderr
    assert ("train/lstm/sine/cpu/fp32/bs:20 and train/lstm/sine/cpu:1/fp32/bs:20 both replay as "
            "train/lstm/sine/mpi:1/fp32/bs:20/replayed: pick one with --benchmark_filter") in r.stderr, r.stderr


def test_a_listing_writes_no_file(tmp_path):
    """--benchmark_list_tests lists and does nothing else: Google Benchmark took the flag before
    trainbench looked for it, so a listing created --csv with its header, emptied --summary and
    measured the CPU's peaks."""
    csv_file, summary = tmp_path / "list.csv", tmp_path / "list.md"
    r = run("--benchmark_list_tests", "--benchmark_filter=train/lstm/", "--devices=cpu:1", f"--csv={csv_file}",
            f"--summary={summary}")
    assert r.returncode == 0 and r.stdout.split() == ["train/lstm/sine/cpu:1/fp32/bs:20"], r.stdout + r.stderr
    assert not csv_file.exists() and not summary.exists()


def test_batch_flag_renames_and_resizes(tmp_path):
    r = run("--benchmark_list_tests", "--batch=7")
    assert "train/mlp/mnist/cpu/fp32/bs:7" in r.stdout.split()


def test_filter_that_matches_nothing_is_an_error():
    r = run("--benchmark_filter=train/nosuchmodel/")
    assert r.returncode == 2
    assert "no benchmark matches" in r.stderr
    assert "mlp, lenet5, lstm, resnet152" in r.stderr


@pytest.mark.parametrize("flag,needle", [
    ("--batch=abc", "--batch"),
    ("--batch=0", "--batch"),
    ("--lr=-1", "--lr"),
    ("--optimizer=rmsprop", "--optimizer"),
    ("--devices=tpu", "unknown device 'tpu'"),
    ("--devices=cpu:zero", "cpu:zero"),
    ("--devices=cpu:99999999999999999999", "99999999999999999999 is more than any machine has"),
    ("--frobnicate", "unknown flag '--frobnicate' (see trainbench --help)"),
    ("--filter=mlp", "unknown flag '--filter=mlp' (did you mean --benchmark_filter? see"),
    ("--repetitions=3", "(did you mean --benchmark_repetitions? see"),
    ("--devics=cpu", "(did you mean --devices? see"),
    ("--lrr=0.1", "(did you mean --lr? see"),
    ("--csv", "--csv needs a value"),
    ("--precisions=fp8", "unknown precision 'fp8'"),
    ("--devices=gpu:0", "gpu:0"),
    ("--gpus=x", "--gpus"),
    ("--gpu_memory_limit=lots", "--gpu_memory_limit"),
    ("--gpu_memory_limit=1.5", "--gpu_memory_limit"),
    ("--devices=gpu:2/jobs:2", "jobs are K processes on one GPU"),
    ("--devices=cpu/jobs:2", "cpu:T/jobs:K"),
    ("--devices=gpu:all/jobs:2", "'gpu:all/jobs:2': jobs are K processes on one GPU"),
    ("--nodes=2", "--network"),
    ("--network=10,50", "give the nodes too"),
    ("--devices=mpi:x", "mpi:x"),
    ("--iterations=0", "--iterations"),
    ("--gpus=0,1,1", "--gpus=0,1,1"),
    ("--benchmark_format=xml", "--benchmark_format"),
    ("--precisions=quickest", "unknown precision 'quickest'"),
    ("--link=pcie4+", "--link: '' is neither a preset"),
    ("--link=measured", "this run has one rank: run it under mpirun -np N (N >= 2)"),
])
def test_bad_flags_are_refused_with_the_flag_named(flag, needle):
    r = run(flag, "--benchmark_filter=train/mlp/mnist/cpu/")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("flags,needle", [
    (["--predict_allreduce=1GiB", "--predict_from=x.csv"], "--predict_allreduce predicts one all-reduce"),
    (["--predict_allreduce=1GiB", "--replay_from=x.csv"], "--predict_allreduce predicts one all-reduce"),
    (["--predict_from=x.csv", "--replay_from=y.csv"], "--predict_from and --replay_from are two runs"),
])
def test_flags_that_exclude_each_other_are_refused_naming_both(flags, needle):
    r = run(*flags)
    assert r.returncode == 2 and needle in r.stderr, (r.returncode, r.stderr)


def test_csv_with_another_schema_is_refused_and_left_untouched(tmp_path):
    out = tmp_path / "other.csv"
    out.write_text("name,value\nx,1\n")
    r = run("--benchmark_filter=train/mlp/mnist/cpu/", f"--csv={out}", *FAST)
    assert r.returncode == 2
    assert str(out) in r.stderr and "Nothing was written" in r.stderr
    assert out.read_text() == "name,value\nx,1\n"
    assert "train/mlp" not in r.stdout  # refused before measuring anything


def test_device_the_machine_lacks_is_a_skipped_row(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/", "--devices=cpu:4096", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    rows = read_csv(out)
    assert [row["status"] for row in rows] == ["skipped"]
    assert "cpu:4096 needs 4096 cores" in rows[0]["message"]


def gpu_available(tmp_path):
    """Whether this machine can run gpu:1 rows: the binary's own verdict, from the row of a short run."""
    out = tmp_path / "probe.csv"
    run("--benchmark_filter=train/mlp/mnist/gpu:1/fp32/", "--benchmark_min_time=0.01", f"--csv={out}")
    return any(row["status"] == "ok" for row in read_csv(out)) if out.exists() else False


def test_gpu_rows_without_a_gpu_are_skipped_with_the_reason_and_cpu_rows_still_run(tmp_path):
    if gpu_available(tmp_path):
        pytest.skip("this machine has a usable GPU: the gpu:1 rows run (tests/test_cuda.cpp covers them)")
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/", f"--csv={out}", *FAST)  # default devices
    assert r.returncode == 0, r.stderr
    rows = {row["benchmark"]: row for row in read_csv(out)}
    assert rows["train/mlp/mnist/cpu/fp32/bs:100"]["status"] == "ok"
    gpu = rows["train/mlp/mnist/gpu:1/fp32/bs:100"]
    assert gpu["status"] == "skipped"
    # The reason: a build without the backend, no driver, or no device.
    assert any(reason in gpu["message"] for reason in ("no CUDA backend", "driver", "no CUDA device")), gpu
    assert len(rows) == 3  # cpu, cpu:1 (or cpu alone on one core) and one skipped gpu:1 row
    # A CPU row carries no NVML measurement, and no driver is claimed.
    for column in ("gpu_util", "energy_j_per_sample", "gpu_throttle", "driver_version"):
        assert rows["train/mlp/mnist/cpu/fp32/bs:100"][column] == "", column
    # The console says it once, as a skip, not as an error a new user reads as a failure.
    assert "ERROR OCCURRED" not in r.stdout
    assert "GPU rows have no NVML columns" not in r.stderr, "no GPU row ran: NVML is neither loaded nor missed"
    skipped = [line for line in console_lines(r.stdout) if line.startswith("skipped ")]
    assert len(skipped) == 1 and skipped[0].startswith("skipped gpu:1: "), r.stdout
    assert "1 benchmark(s) skipped" in r.stderr


def test_skipped_configurations_are_one_console_line_each(tmp_path):
    """Every model on a device the machine lacks, and a precision the CPU cannot run: one line per
    configuration, each benchmark still a skipped row in the CSV."""
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/(mlp|lstm)/", "--devices=cpu,cpu:4096", "--precisions=fp32,fp16",
            f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    assert "ERROR OCCURRED" not in r.stdout
    lines = sorted(line for line in console_lines(r.stdout) if line.startswith("skipped "))
    cores = len(os.sched_getaffinity(0))
    assert lines == ["skipped cpu fp16: the CPU backend trains in fp32 only, not fp16",
                     f"skipped cpu:4096: needs 4096 cores, this machine has {cores}"], r.stdout
    rows = read_csv(out)
    workloads = {(row["model"], row["dataset"]) for row in rows}  # mlp/fashion-mnist too where its files are
    assert {("mlp", "mnist"), ("lstm", "sine")} <= workloads
    skipped = [row for row in rows if row["status"] == "skipped"]
    assert len(skipped) == 3 * len(workloads)  # each workload: cpu fp16, cpu:4096 fp32 and fp16
    assert {row["status"] for row in rows if (row["device"], row["precision"]) == ("cpu", "fp32")} == {"ok"}


def test_precision_a_device_cannot_run_is_a_skipped_row(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/cpu/", "--devices=cpu", "--precisions=fp32,bf16",
            f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    rows = {row["precision"]: row for row in read_csv(out)}
    assert rows["fp32"]["status"] == "ok"
    assert rows["bf16"]["status"] == "skipped" and "fp32 only" in rows["bf16"]["message"]


def test_more_gpus_than_the_machine_has_is_a_skipped_row(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/", "--devices=gpu:64", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    rows = read_csv(out)
    assert [row["status"] for row in rows] == ["skipped"]
    assert "gpu:64" in rows[0]["message"]


def test_diverging_run_fails_its_row_and_the_next_benchmark_still_runs(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/", "--devices=cpu,cpu:1", "--optimizer=sgd", "--lr=1e6",
            f"--csv={out}", *FAST)
    assert r.returncode == 1
    rows = read_csv(out)
    assert [row["device"] for row in rows] == ["cpu", "cpu:1"]
    for row in rows:
        assert row["status"] == "failed"
        assert "loss is NaN" in row["message"] or "loss is inf" in row["message"]
        assert row["iterations"] == "0", "a failed row counts no timed steps"
    assert "benchmark(s) failed" in r.stderr


def test_a_loss_that_blew_up_fails_its_row_though_the_first_batch_looks_learnt(tmp_path):
    """The loss check re-scores the first batch after training; a model that blew up on every
    other batch could pass it (the MLP at --lr=1e5 ended at a loss of 8e17 with status ok). A last
    step's loss above 100 times the first's fails the row, saying so."""
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/", "--devices=cpu:1", "--lr=10", "--iterations=30", "--timeline=off",
            f"--csv={out}")
    assert r.returncode == 1, r.stderr
    [row] = read_csv(out)
    assert row["status"] == "failed" and row["message"].startswith("loss blew up: 2.3194 at the first step"), row


def test_help_lists_trainbench_flags():
    r = run("--help")
    assert r.returncode == 0
    for flag in ("--csv", "--batch", "--devices", "--warmup_steps", "--optimizer", "--lr", "--seed"):
        assert flag in r.stdout


# ---- Datasets, the loader and epochs/ benchmarks ----

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "scripts")


def write_cifar_like(folder, records):
    r = subprocess.run(["/usr/bin/python3", os.path.join(SCRIPTS, "synthetic_cifar10.py"), f"--out={folder}",
                        f"--records={records}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_epochs_benchmark_writes_one_row_per_epoch_and_a_final_row(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=epochs/lstm/sine/cpu/", "--epochs=3", f"--csv={out}")
    assert r.returncode == 0, r.stderr
    assert "epoch 3:" in r.stdout
    rows = read_csv(out)
    epochs = [row for row in rows if row["run_type"] == "epoch"]
    assert [row["epoch"] for row in epochs] == ["1", "2", "3"]
    for row in epochs:
        assert row["benchmark"] == "epochs/lstm/sine/cpu/fp32/bs:20"
        assert float(row["train_loss"]) > 0 and float(row["val_loss"]) > 0
        assert row["val_acc"] == ""  # regression: no accuracy
        assert float(row["elapsed_s"]) > 0
    assert float(epochs[-1]["elapsed_s"]) > float(epochs[0]["elapsed_s"])
    assert float(epochs[-1]["val_loss"]) < float(epochs[0]["val_loss"])
    final = [row for row in rows if row["run_type"] == "iteration"]
    assert len(final) == 1 and final[0]["status"] == "ok" and final[0]["epoch"] == "3"
    assert final[0]["data_source"] == "generated"
    # Its step is a training step, validation left out: the training steps together took less than
    # the run, which validated after each epoch.
    assert float(final[0]["step_time_s"]) * int(epochs[-1]["iterations"]) < float(epochs[-1]["elapsed_s"]), final[0]


def test_target_accuracy_reports_the_time_it_took(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=epochs/mlp/mnist/cpu/", "--epochs=3", "--target_accuracy=0.5", f"--csv={out}")
    assert r.returncode == 0, r.stderr
    final = [row for row in read_csv(out) if row["run_type"] == "iteration"][0]
    assert final["status"] == "ok"
    assert float(final["time_to_target_s"]) > 0
    assert float(final["val_acc"]) >= 0.5
    assert final["target_acc"] == "0.5"


def test_a_target_accuracy_not_reached_fails_the_row_naming_the_accuracy_epochs_and_target(tmp_path):
    """LeNet-5 cannot reach 99.9% on CIFAR-10 in one epoch: its row fails, saying the accuracy it
    reached after how many epochs (not steps), and the run's exit status says a benchmark failed."""
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=epochs/lenet5/cifar10/cpu/", "--epochs=1", "--target_accuracy=0.999", f"--csv={out}")
    assert r.returncode == 1, r.stderr
    [failed] = [row for row in read_csv(out) if row["status"] == "failed"]
    assert re.fullmatch(r"validation accuracy 0\.\d{4} after 1 epoch never reached the target 0\.9990",
                        failed["message"]), failed["message"]


def test_a_target_accuracy_is_no_regressions_and_synthetic_data_says_so(tmp_path):
    """--target_accuracy skips the LSTM's epochs, a regression with no accuracy (they failed, 'accuracy
    -1 never reached the target'); a row on synthetic data under the default ./data says so once."""
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=epochs/lstm/", "--devices=cpu:1", "--epochs=1", "--target_accuracy=0.5",
            f"--csv={out}")
    assert r.returncode == 0, r.stderr
    [row] = read_csv(out)
    assert row["status"] == "skipped" and "lstm/sine is a regression, with no accuracy to reach" in row["message"]
    r = subprocess.run([BINARY, "--benchmark_filter=train/mlp/mnist/cpu:1/", *FAST], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("no mnist/ under ./data: its rows train on synthetic data") == 1, r.stderr


def test_synthetic_data_is_said_once_for_a_dataset_with_files_to_fetch_and_never_for_imagenet(tmp_path):
    """Under the default ./data, MNIST's rows say once that they train on synthetic data, however many
    rows and repetitions it has; ImageNet, which has no files to fetch (always synthetic), says
    nothing. The note is said as a row starts: TB_CPU_LANES='bad' fails each row at once, so that
    ResNet-152 never steps."""
    env = dict(os.environ, TB_CPU_LANES="bad")
    r = subprocess.run([BINARY, "--benchmark_filter=train/(mlp/mnist|resnet152/imagenet)/cpu:1/", "--devices=cpu:1",
                        "--batch=1", "--benchmark_repetitions=2", "--timeline=off", f"--csv={tmp_path / 'run.csv'}"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert r.returncode == 1, r.stderr
    rows = read_csv(tmp_path / "run.csv")
    assert sorted(row["model"] for row in rows) == ["mlp", "mlp", "resnet152", "resnet152"]
    assert all(row["status"] == "failed" and "TB_CPU_LANES='bad'" in row["message"] for row in rows), rows
    assert r.stderr.count("no mnist/ under ./data: its rows train on synthetic data") == 1, r.stderr
    assert "under ./data" not in r.stderr.replace("no mnist/ under ./data", ""), r.stderr


def test_real_format_data_on_disk_with_loader_workers(tmp_path):
    write_cifar_like(tmp_path / "cifar10", 300)
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/lenet5/cifar10/cpu/", f"--data_dir={tmp_path}", "--loader_workers=2",
            "--prefetch=3", "--augment", "--warmup_steps=2", "--batch=50", "--lr=0.01", f"--csv={out}")
    rows = read_csv(out)
    assert len(rows) == 1
    row = rows[0]
    assert row["data_source"] == str(tmp_path / "cifar10")
    assert row["loader_workers"] == "2"
    # The loss check may fail this short run of a slow starter; the loader's figures must be there.
    if row["status"] == "ok":
        assert float(row["data_wait_s_per_step"]) >= 0
    else:
        # The check's two messages: a plateau, or (the loss above where it began) divergence.
        assert "loss did not fall" in row["message"] or "loss rose" in row["message"], row["message"]


def test_corrupt_dataset_file_fails_its_row_naming_the_file(tmp_path):
    write_cifar_like(tmp_path / "cifar10", 50)
    (tmp_path / "cifar10" / "data_batch_3.bin").write_bytes(b"\x01" * 3000)
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/(lenet5|lstm)/.*/cpu/", f"--data_dir={tmp_path}", f"--csv={out}", *FAST)
    assert r.returncode == 1
    rows = {row["model"]: row for row in read_csv(out)}
    assert rows["lenet5"]["status"] == "failed"
    assert "data_batch_3.bin" in rows["lenet5"]["message"] and "3073" in rows["lenet5"]["message"]
    assert rows["lstm"]["status"] == "ok"  # the other benchmarks still ran


def test_missing_dataset_folder_means_synthetic_data(tmp_path):
    r = run("--benchmark_list_tests", f"--data_dir={tmp_path}")
    names = r.stdout.split()
    assert "train/lenet5/cifar10/cpu/fp32/bs:100" in names
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/cpu/", f"--data_dir={tmp_path}", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    assert read_csv(out)[0]["data_source"] == "synthetic"


def test_a_data_folder_named_by_tb_data_dir_is_checked_as_the_flags_is(tmp_path):
    """TB_DATA_DIR names the data folder as --data_dir does, and is checked alike: a folder that is
    not there, or a file, is refused naming the variable (it trained every row on synthetic data
    without a word); one without a dataset says so once."""
    for where, says in ((tmp_path / "no-such", "no such folder"), ("/etc/passwd", "is not a folder")):
        r = subprocess.run([BINARY, "--benchmark_filter=train/mlp/mnist/cpu:1/", *FAST], capture_output=True,
                           text=True, timeout=600, env=dict(os.environ, TB_DATA_DIR=str(where)))
        assert r.returncode == 2 and f"TB_DATA_DIR={where}: {says}" in r.stderr, r.stderr
    r = subprocess.run([BINARY, "--benchmark_list_tests", "--benchmark_filter=train/mlp/mnist/cpu:1/"],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, TB_DATA_DIR=str(tmp_path)))
    assert r.returncode == 0 and f"no mnist/ under TB_DATA_DIR={tmp_path}" in r.stderr, r.stderr


@pytest.mark.parametrize("flag,needle", [
    ("--loader_workers=-1", "--loader_workers"),
    ("--prefetch=0", "--prefetch"),
    # The queue of the loader's threads, taken and ignored without them.
    ("--prefetch=4", "--prefetch=4 is the queue of the loader's threads: give --loader_workers=N with it"),
    ("--epochs=0", "--epochs"),
    ("--target_accuracy=1.5", "--target_accuracy"),
    ("--data_dir=", "--data_dir"),
])
def test_bad_loader_flags_are_refused(flag, needle):
    r = run(flag, "--benchmark_filter=train/mlp/mnist/cpu/")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr


def test_mpi_device_outside_mpirun_is_a_skipped_row_naming_the_command(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/", "--devices=mpi:2", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    rows = read_csv(out)
    assert [row["status"] for row in rows] == ["skipped"]
    assert "mpirun -np 2" in rows[0]["message"]


def test_the_own_kernels_isa_is_capped_recorded_and_a_bad_cap_refused(tmp_path):
    out = tmp_path / "run.csv"
    env = dict(os.environ, TB_MAX_CPU_ISA="sse2")
    r = subprocess.run([BINARY, "--benchmark_filter=train/lenet5/cifar10/cpu/", *FEW_STEPS, f"--csv={out}"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "trainbench's own CPU kernels sse2" in r.stderr + r.stdout
    row, = [row for row in read_csv(out) if row["measurement"] == "measured"]
    assert row["cpu_isa"] == "sse2" and row["status"] == "ok"
    listing = json.loads(subprocess.run([BINARY, "--list_configs", "--json"], capture_output=True, text=True,
                                        timeout=60, env=env).stdout)
    assert listing["cpu_isa"] == "sse2" and listing["cpu_isas"][0] == "sse2"
    bad = subprocess.run([BINARY, "--benchmark_filter=train/mlp/mnist/cpu/", "--iterations=3"], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, TB_MAX_CPU_ISA="avx9"))
    assert bad.returncode == 2
    assert bad.stderr.startswith("trainbench: error: TB_MAX_CPU_ISA: 'avx9' is not an instruction set of "
                                 "trainbench's own CPU kernels (sse2, avx2, avx512; e.g. TB_MAX_CPU_ISA=avx2)")
    assert "train/mlp" not in bad.stdout, "nothing was run"


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_mpirun_two_ranks_train_one_data_parallel_row_written_by_rank_0(tmp_path):
    """Without warm-up steps too: rank 1 stands by through rank 0's cpu:1 row (its timed steps and
    its counters, which it skips), then joins the sharing probe, with no step of its own before."""
    out = tmp_path / "run.csv"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")  # Open MPI's lifetime allocations
    r = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", BINARY,
                        "--benchmark_filter=(train/mlp/mnist|epochs/lstm/sine)/", "--iterations=4", "--epochs=1",
                        "--warmup_steps=0", f"--csv={out}"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    rows = read_csv(out)
    assert sum(line.startswith("schema_version,") for line in out.read_text().splitlines()) == 1
    ok = {row["benchmark"]: row for row in rows if row["status"] == "ok" and row["measurement"] == "measured"}
    # Rank 0's rows only: the one-replica baseline (rank 0 alone), then the data-parallel run; the
    # epochs/ row of one replica is rank 0's alone (the other ranks skip it, and wait for no one).
    assert list(ok) == ["train/mlp/mnist/cpu:1/fp32/bs:100", "train/mlp/mnist/mpi:2/fp32/bs:100",
                        "epochs/lstm/sine/cpu:1/fp32/bs:20"]
    epochs = [row for row in rows if row["benchmark"] == "epochs/lstm/sine/cpu:1/fp32/bs:20"]
    assert [(row["run_type"], row["epoch"]) for row in epochs] == [("epoch", "1"), ("iteration", "1")], epochs
    row = ok["train/mlp/mnist/mpi:2/fp32/bs:100"]
    assert (row["ranks"], row["replicas"], row["iterations"]) == ("2", "2", "4")
    # Both ranks on this machine: one node, each rank's host and rank on it.
    host = row["host"]
    assert (row["nodes"], row["rank_hosts"], row["emulated_nodes"]) == ("1", f"{host}:0;{host}:1", "")
    assert float(row["allreduce_bytes_per_step"]) >= 4 * 1796010  # every gradient, once
    assert float(row["comm_s_per_step"]) > 0 and 0 < float(row["comm_share"]) < 1
    # The global batch: 2 x 100 samples per step.
    assert abs(float(row["samples_per_s"]) * float(row["step_time_s"]) - 200) < 1
    assert float(row["loss_last"]) < float(row["loss_first"])
    baseline = float(ok["train/mlp/mnist/cpu:1/fp32/bs:100"]["samples_per_s"])
    assert abs(float(row["scaling_efficiency"]) - float(row["samples_per_s"]) / (2 * baseline)) < 1e-3
    # Printed once, by rank 0 (a second line compares it with its prediction).
    assert sum(line.startswith("train/mlp/mnist/mpi:2/fp32/bs:100") for line in r.stdout.splitlines()) == 1
    # The cpu:1 row's prediction of mpi:2, from the sharing probe both ranks stepped.
    predicted = [row for row in rows if row["measurement"] == "predicted"]
    assert [row["benchmark"] for row in predicted] == [
        "train/mlp/mnist/mpi:2/fp32/bs:100/predicted:measured/from:cpu:1"], predicted
    assert ";sharing_ranks=2;sharing_hosts=1" in ok["train/mlp/mnist/cpu:1/fp32/bs:100"]["prediction_inputs"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_ranks_that_set_up_apart_all_stop_at_once_naming_the_rank_and_the_row(tmp_path):
    """Rank 0's --csv that cannot be written, and a row one rank skips (a rank bound to fewer cores)
    that another runs: every rank stops with exit status 2 before any row, rank 0 naming the rank
    and the row. Both hung for ever: the other ranks waited in a collective that never came."""
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")  # Open MPI's lifetime allocations
    blocked = tmp_path / "file"
    blocked.write_text("")
    r = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", BINARY,
                        "--benchmark_filter=train/lstm/", "--devices=mpi:2", "--iterations=2",
                        f"--csv={blocked / 'x.csv'}"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "rank 0: --csv=" in r.stderr, (r.returncode, r.stderr[-2000:])
    one_core = tmp_path / "one_core.sh"  # rank 1 on one core, rank 0 on the node's
    one_core.write_text('#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && exec taskset -c 0 "$@"\nexec "$@"\n')
    one_core.chmod(0o755)
    r = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                        str(one_core), BINARY, "--benchmark_filter=train/lstm/", "--devices=cpu:2",
                        "--iterations=2"], capture_output=True, text=True, timeout=300, env=env)
    if (os.cpu_count() or 1) >= 2:
        assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
        # The first row planned that way (planning covers every model; the filter picks later).
        assert ("/cpu:2/fp32/bs:" in r.stderr and ": rank 0 runs it and rank 1 skipped: cpu:2 needs 2 cores" in r.stderr
                and "--bind-to none" in r.stderr), r.stderr[-2000:]


def write_small_mnist(folder, images=300, test_images=None):
    """An MNIST folder of `images` training and `test_images` (as many) test images (idx files),
    enough for --batch=100."""
    folder.mkdir(parents=True)
    for split, count in (("train", images), ("t10k", test_images or images)):
        (folder / f"{split}-images-idx3-ubyte").write_bytes(
            struct.pack(">4I", 0x803, count, 28, 28) + bytes((i * 7) % 256 for i in range(count * 784)))
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(
            struct.pack(">2I", 0x801, count) + bytes(i % 10 for i in range(count)))


def test_epochs_rows_fail_for_a_validation_split_under_one_batch_or_a_loss_that_did_not_fall(tmp_path):
    """epochs/ rows check what train/ rows check, and validate: MNIST's 50 test images are fewer
    than one batch of 100, and a learning rate too small to move the LSTM's loss fails it."""
    write_small_mnist(tmp_path / "mnist", test_images=50)
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=epochs/(mlp/mnist|lstm/sine)/cpu:1/", "--devices=cpu:1", f"--data_dir={tmp_path}",
            "--epochs=1", "--lr=1e-30", f"--csv={out}")
    assert r.returncode == 1, r.stderr[-2000:]
    rows = {row["model"]: row for row in read_csv(out) if row["run_type"] == "iteration"}
    assert rows["mlp"]["status"] == "failed" and rows["mlp"]["message"].startswith(
        f"mnist: its validation split ({tmp_path / 'mnist' / 't10k-images-idx3-ubyte'}) holds 50 samples, fewer than "
        "one batch of 100"), rows["mlp"]
    assert rows["lstm"]["status"] == "failed" and rows["lstm"]["message"].startswith("loss did not fall"), rows["lstm"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_a_rank_that_cannot_set_up_a_row_fails_it_on_every_rank_and_the_next_rows_run(tmp_path):
    """Rank 1 sees a truncated MNIST file where rank 0 sees a whole one (a node whose copy is
    broken: a file bind-mounted over it in rank 1's own mount namespace). Its MLP rows fail on
    every rank, rank 0's row naming rank 1 and the file, rank 1 saying its error, and the LSTM's rows
    after them run. Before, rank 0 waited for ever in the mpi:2 row's MPI_Comm_dup, which rank 1
    never reached, and rank 1 said nothing."""
    good = tmp_path / "data" / "mnist"
    write_small_mnist(good)
    bad = tmp_path / "truncated"
    bad.write_bytes(struct.pack(">4I", 0x803, 300, 28, 28) + bytes(10))
    if os.geteuid() != 0 or not shutil.which("unshare") or subprocess.run(
            ["unshare", "-m", "mount", "--bind", str(bad), str(good / "train-images-idx3-ubyte")],
            capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount a file in a mount namespace of its own here (needs root and unshare(1))")
    rank_1_broken = tmp_path / "rank_1_broken.sh"
    rank_1_broken.write_text(
        '#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && exec unshare -m sh -c '
        f'\'mount --bind {bad} {good / "train-images-idx3-ubyte"} && exec "$@"\' sh "$@"\nexec "$@"\n')
    rank_1_broken.chmod(0o755)
    out = tmp_path / "run.csv"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")
    r = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", str(rank_1_broken), BINARY,
                        f"--data_dir={tmp_path / 'data'}", "--benchmark_filter=train/(mlp/mnist|lstm/sine)/",
                        "--devices=cpu:1,mpi:2", "--iterations=2", f"--csv={out}"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    rows = {row["benchmark"]: row for row in read_csv(out) if row["measurement"] == "measured"}
    for device in ("cpu:1", "mpi:2"):
        row = rows[f"train/mlp/mnist/{device}/fp32/bs:100"]
        assert row["status"] == "failed", row
        assert row["message"].startswith("rank 1 could not set up this row: ") and "train-images-idx3-ubyte" in \
            row["message"], row["message"]
    for device in ("cpu:1", "mpi:2"):
        assert rows[f"train/lstm/sine/{device}/fp32/bs:20"]["status"] == "ok", rows
    # Rank 1 says its own error, once a row; rank 0's rows name it.
    said = [line for line in r.stderr.splitlines() if line.startswith("trainbench rank 1: ")]
    assert [line.split(" failed: ")[0] for line in said] == [
        "trainbench rank 1: train/mlp/mnist/cpu:1/fp32/bs:100", "trainbench rank 1: train/mlp/mnist/mpi:2/fp32/bs:100"
    ], said
    assert all("train-images-idx3-ubyte" in line for line in said), said


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
@pytest.mark.parametrize("timeline", ["off", "on"])
def test_rows_that_rank_0_alone_fails_keep_the_ranks_together_over_repetitions(tmp_path, timeline):
    """A learning rate too small to move the loss fails each cpu:1 row on rank 0 alone (only rank 0
    checks it) and each mpi:2 row on every rank, at each of two repetitions: every row is written,
    failed with the loss's message, and the job ends of itself. Before, the ranks standing by kept
    their run of the cpu:1 row where rank 0 built a new one, their collectives paired across rows,
    and the job died (MPI_ERR_TRUNCATE; with the timeline on, it hung)."""
    out = tmp_path / "run.csv"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")
    r = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", BINARY,
                        "--benchmark_filter=train/(mlp/mnist|lstm/sine)/", "--devices=cpu:1,mpi:2", "--lr=1e-30",
                        f"--timeline={timeline}", "--iterations=2", "--benchmark_repetitions=2", f"--csv={out}"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 1 and "MPI_ERR" not in r.stderr, (r.returncode, r.stderr[-2000:])
    rows = [row for row in read_csv(out) if row["measurement"] == "measured" and row["run_type"] == "iteration"]
    assert sorted((row["device"], row["model"], row["repetition"]) for row in rows) == sorted(
        (device, model, rep) for device in ("cpu:1", "mpi:2") for model in ("mlp", "lstm") for rep in ("0", "1"))
    assert all(row["status"] == "failed" and "loss did not fall" in row["message"] for row in rows), rows


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_a_data_parallel_row_that_diverges_under_mpirun_fails_and_the_job_ends_normally(tmp_path):
    """Ranks share the gradients, so a diverging loss is not finite on every rank in the same
    step: the mpi:2 row fails with the loss's message, as a one-device row does, and the job ends
    of itself (exit status 1), not by a rank's MPI_Abort, which would lose the later rows."""
    out = tmp_path / "run.csv"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")
    r = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", BINARY,
                        "--benchmark_filter=train/mlp/mnist/", "--devices=mpi:2", "--optimizer=sgd", "--lr=1e6",
                        f"--csv={out}", *FAST], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    assert "MPI_ABORT" not in r.stderr, r.stderr[-2000:]
    rows = {row["device"]: row for row in read_csv(out)}
    assert rows["mpi:2"]["status"] == "failed", rows["mpi:2"]
    assert re.search(r"loss is (NaN|inf) at training step \d+", rows["mpi:2"]["message"]), rows["mpi:2"]["message"]


def rank_pids(marker: str) -> dict[int, int]:
    """MPI rank -> pid of the trainbench processes whose command line holds `marker`."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if not any(marker.encode() in arg for arg in cmdline) or not cmdline[0].endswith(b"trainbench"):
            continue
        for item in env:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(item.split(b"=")[1])] = int(pid)
    return out


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_a_killed_rank_ends_the_run_on_every_rank_naming_it_and_the_rows_written_stay(tmp_path):
    """No hangs: rank 1 killed in the middle of the data-parallel row ends the job within 60 s,
    with the rank and the signal named, and the one-device row already written kept."""
    out = tmp_path / "run.csv"
    steps = 3000
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")
    marker = f"--csv={out}"
    job = subprocess.Popen(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", BINARY,
                            "--benchmark_filter=train/lstm/sine/", "--devices=cpu:1,mpi:2", f"--iterations={steps}",
                            "--warmup_steps=2", marker], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)
    try:
        # The cpu:1 row (a few seconds of LSTM steps) is written before mpi:2 starts.
        deadline = time.monotonic() + 400
        while not (out.exists() and "/cpu:1/" in out.read_text()):
            assert job.poll() is None and time.monotonic() < deadline, "the one-device row never came"
            time.sleep(0.2)
        # Into the data-parallel row, whose steps take about as long as the cpu:1 row's (the same
        # replica on each rank, and an all-reduce): 30% of the cpu:1 row's steps' time, at most
        # 2 s, as scripts/gpu_check.sh's step 5c waits (here 1.5 s into a row of 4.8 s).
        [one] = [row for row in read_csv(out) if row["device"] == "cpu:1"]
        time.sleep(min(2.0, 0.3 * steps * float(one["step_time_s"])))
        pids = rank_pids(marker)
        assert set(pids) == {0, 1}, pids
        os.kill(pids[1], 9)
        killed = time.monotonic()
        stdout, stderr = job.communicate(timeout=60)
        assert time.monotonic() - killed < 60
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode != 0
    assert re.search(r"rank 1 .*(signal 9|Killed)", stdout + stderr), (stdout[-1500:], stderr[-1500:])
    rows = read_csv(out)
    assert [r["status"] for r in rows if r["device"] == "cpu:1"] == ["ok"]
    assert not [r for r in rows if r["device"] == "mpi:2" and r["measurement"] == "measured"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_ranks_started_with_different_flags_stop_before_measuring_naming_the_flags(tmp_path):
    """Tried as a new user would: two ranks with different batches once wrote one ok mpi:2 row
    of no real run."""
    out = tmp_path / "run.csv"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")
    common = ["--benchmark_filter=train/mlp/mnist/", "--devices=cpu:1,mpi:2", "--iterations=2", f"--csv={out}"]
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "1", BINARY, "--batch=50", *common,
                        ":", "-np", "1", BINARY, "--batch=100", "--lr=0.05", *common],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0
    assert "started with different flags" in r.stderr
    assert "rank 0 has --batch=50, rank 1 has --batch=100" in r.stderr
    assert "rank 0 has --lr=default, rank 1 has --lr=0.05" in r.stderr
    assert not out.exists()  # nothing measured, nothing written


def test_mpirun_compares_mpi2_with_its_prediction_and_the_row_says_inside_or_outside(tmp_path):
    """The check against the truth, as machinery: in one invocation, the mpi:2 row predicted from
    the cpu:1 row's timeline, step times, data-parallel overhead and sharing probe and the MPI link
    swept at start-up, and the measured mpi:2 row, whose columns name that prediction and say
    whether it fell inside the band, as the console line says. Where a measured figure lands is the
    benchmark's to say (scripts/check_predictions.sh --check), never a test's."""
    out = tmp_path / "run.csv"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")
    r = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", BINARY,
                        "--benchmark_filter=train/mlp/mnist/", "--devices=cpu:1,mpi:2", "--iterations=6",
                        f"--csv={out}"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    rows = read_csv(out)
    measured = [row for row in rows if row["device"] == "mpi:2" and row["measurement"] == "measured"
                and row["status"] == "ok"]
    predicted = [row for row in rows if row["device"] == "mpi:2" and row["measurement"] == "predicted"]
    assert len(measured) == 1 and len(predicted) == 1
    m, p = measured[0], predicted[0]
    assert p["link"] == "measured" and float(p["link_busbw_gbps"]) > 0 and p["algorithm"]
    assert p["predicted_from"] == "train/mlp/mnist/cpu:1/fp32/bs:100" == p["baseline"] == m["baseline"]
    assert p["benchmark"].endswith("/predicted:measured/from:cpu:1") and "assumes" in p["message"]
    assert "2 ranks stepping together" in p["message"]
    assert "steps through the data-parallel path with one replica" in p["message"]
    low, point, high = (float(p[c]) for c in ("samples_per_s_low", "samples_per_s", "samples_per_s_high"))
    assert low <= point <= high and p["dominant_term"] in (
        "compute", "sharing", "stragglers", "data-parallel overhead", "communication")
    # The measured row names its prediction; its verdict and the console agree with the figures.
    assert m["prediction"] == p["benchmark"]
    got = float(m["samples_per_s"])
    inside = low <= got <= high
    words = m["verdicts"].split("+")
    assert ("inside_band" in words) == inside and ("outside_band" in words) == (not inside), m["verdicts"]
    where = "inside" if inside else "outside"
    assert f"measured / predicted = {got / point:.2f}, {where} the band" in r.stdout
    assert float(m["scaling_efficiency"]) > 0 and m["data_parallel"] == "2" and m["device_kind"] == "mpi:N"
    # Its communication: the seconds of a step backward did not hide, and their share of the step.
    share = float(m["comm_s_per_step"]) / float(m["step_time_s"])
    assert float(m["comm_share"]) == pytest.approx(share, rel=1e-4), (m["comm_share"], share)


def test_a_prediction_asked_after_the_run_equals_the_runs_own(tmp_path):
    """--predict_from: a CPU run's CSV, predicted again for 8 ranks on 4 nodes over 10 GB/s and 50 us
    between them, gives the very row the run predicted for the same links: one model, one path from
    the rows to the prediction (the row's prediction_inputs)."""
    run_csv, after_csv = tmp_path / "run.csv", tmp_path / "after.csv"
    links = ["--link=20,2", "--nodes=4", "--network=10,50"]
    r = run("--benchmark_filter=train/mlp/mnist/cpu:1/", "--devices=cpu:1", "--iterations=5", *links,
            f"--csv={run_csv}")
    assert r.returncode == 0, r.stderr
    in_run = {row["benchmark"]: row for row in read_csv(run_csv) if row["measurement"] == "predicted"}
    name = "train/mlp/mnist/mpi:8/fp32/bs:100/nodes:4/predicted:custom/network:custom/from:cpu:1"
    assert sorted(in_run) == sorted(f"train/mlp/mnist/mpi:{n}/fp32/bs:100/nodes:4/predicted:custom/network:custom/from:cpu:1"
                                    for n in (4, 8, 16, 32))
    a = run(f"--predict_from={run_csv}", "--devices=mpi:8", *links, f"--csv={after_csv}")
    assert a.returncode == 0, a.stderr
    [after] = read_csv(after_csv)
    assert after["benchmark"] == name
    for column in ("samples_per_s", "samples_per_s_low", "samples_per_s_high", "step_time_s", "scaling_efficiency",
                   "algorithm", "nodes", "network", "network_busbw_gbps", "network_latency_us", "link",
                   "link_busbw_gbps", "dominant_term", "message", "predicted_from", "device_kind",
                   "prediction_model"):
        assert after[column] == in_run[name][column], column
    assert after["prediction_model"] == "3", "every predicted row names the model that made it"
    # Asked of a file whose own predictions are there, it sets each beside the file's, by its model.
    assert f"the file's own: {float(in_run[name]['samples_per_s']):.0f} samples/s, by this model (this prediction " \
           "+0.0%)" in a.stdout
    assert float(after["samples_per_s_low"]) <= float(after["samples_per_s"]) <= float(after["samples_per_s_high"])
    assert after["algorithm"] in ("ring", "tree", "ring+tree", "tree+ring")
    assert "--link=20,2" in after["message"] and "--network=10,50" in after["message"]
    assert "4 nodes of 2" in after["message"]
    assert "predicted mpi:8 on 4 nodes over custom" in a.stdout
    assert f"trainbench: 1 predicted row written to {after_csv}\n" in a.stdout
    again = run(f"--predict_from={run_csv}", "--devices=mpi:8", *links, f"--csv={after_csv}")
    assert again.returncode == 0, again.stderr
    assert f"trainbench: 1 predicted row written to {after_csv}, after the rows it already held" in again.stdout
    assert len(read_csv(after_csv)) == 2
    # What cannot be predicted after the run is refused, saying why.
    for bad, says in ((["--devices=gpu:1", "--link=20,2"], "gpu:N (from GPU rows) or mpi:N"),
                      (["--link=measured"], "--link=measured"),
                      (["--nodes=4"], "--network"),
                      (["--benchmark_filter=lstm"], "no one-device train/ row")):
        b = run(f"--predict_from={run_csv}", *bad)
        assert b.returncode == 2 and says in b.stderr, (bad, b.stderr)
    missing = run(f"--predict_from={tmp_path / 'none.csv'}")
    assert missing.returncode == 2 and "--predict_from=" in missing.stderr


def test_every_link_and_network_preset_help_names_is_taken_and_nvlink_nodes_are_bounded(tmp_path):
    """--help names the presets from the model's own tables: each one --help names is accepted by
    --predict_from (of a GPU row: the H100 reference), and 64 GPUs over nvlink4 on one node are
    refused, naming --nodes and --gpus_per_node."""
    help_text = run("--help").stdout

    def presets(after, until):
        block = help_text[help_text.index(after):help_text.index(until)]
        names = re.findall(r"\b(?:nvlink\w*|pcie\d|ib_\w+|\d+gbe)\b", block)
        return sorted({re.sub(r"x\d+$", "", name) for name in names})  # ib_ndr400x8: the preset with its NICs

    links = presets("--link=L", "--nodes=M")
    networks = presets("--nodes=M", "--gpus_per_node=K")
    assert {"nvlink4", "nvlink4_nvls", "nvlink3", "pcie3", "pcie4", "pcie5"} <= set(links), links
    assert {"ib_ndr400", "100gbe", "25gbe", "10gbe"} <= set(networks), networks
    reference = os.path.join(os.path.dirname(__file__), "..", "results", "h100", "default-20261127T060200Z.csv")
    one = "--benchmark_filter=train/lstm/sine/gpu:1/fp32/"
    for link in links:
        r = run(f"--predict_from={reference}", one, f"--link={link}", "--devices=gpu:2")
        assert r.returncode == 0 and "predicted gpu:2" in r.stdout, (link, r.stderr)
    for network in networks:
        r = run(f"--predict_from={reference}", one, "--link=nvlink4", "--nodes=2", f"--network={network}x8",
                "--devices=gpu:16")
        assert r.returncode == 0 and "predicted gpu:16 on 2 nodes" in r.stdout, (network, r.stderr)
    big = run(f"--predict_from={reference}", one, "--link=nvlink4", "--devices=gpu:64")
    assert big.returncode == 2
    assert "64 devices over nvlink4: an NVLink link joins at most 8 GPUs of one node (--gpus_per_node=8)" in big.stderr
    ok = run(f"--predict_from={reference}", one, "--link=nvlink4", "--devices=gpu:64", "--gpus_per_node=64")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_a_saved_row_replayed_on_two_ranks(tmp_path):
    """--replay_from: the LSTM's cpu:1 row stepped on 2 ranks without its model: every step waits
    out the saved compute and all-reduces the saved buckets for real. The replayed rows carry the
    saved row's bytes, name the prediction made for them in the same run, and say inside or
    outside its band, the console naming the saved row it was made from; without mpirun the
    configuration is a skipped row saying how to run it."""
    saved, replayed = tmp_path / "saved.csv", tmp_path / "replayed.csv"
    r = run("--benchmark_filter=train/lstm/sine/cpu:1/", "--devices=cpu:1", "--iterations=30", f"--csv={saved}")
    assert r.returncode == 0, r.stderr
    [source] = [row for row in read_csv(saved) if row["run_type"] == "iteration"]
    buckets = re.search(r"buckets=([^;]*)", source["prediction_inputs"]).group(1).split(",")
    gradient_bytes = sum(float(b.split("@")[0]) for b in buckets)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")
    m = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", BINARY, f"--replay_from={saved}",
                        "--iterations=10", "--benchmark_repetitions=2", f"--csv={replayed}"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert m.returncode == 0, (m.stdout[-2000:], m.stderr[-2000:])
    rows = read_csv(replayed)
    name = "train/lstm/sine/mpi:2/fp32/bs:20/replayed"
    runs = [row for row in rows if row["benchmark"] == name and row["run_type"] == "iteration"]
    [predicted] = [row for row in rows if row["measurement"] == "predicted"]
    assert len(runs) == 2 and {row["measurement"] for row in runs} == {"replayed"}
    assert predicted["device"] == "mpi:2" and predicted["link"] == "measured"
    for row in runs:
        assert row["status"] == "ok", row["message"]
        assert row["iterations"] == "10" and row["replicas"] == "2" and row["data_parallel"] == "2"
        assert row["baseline"] == source["benchmark"] == row["predicted_from"] and row["backend"] == "cpu"
        assert float(row["allreduce_bytes_per_step"]) == pytest.approx(gradient_bytes, rel=0.01)
        assert float(row["comm_s_per_step"]) >= 0 and float(row["samples_per_s"]) > 0
        assert float(row["scaling_efficiency"]) == pytest.approx(
            float(row["samples_per_s"]) / (2 * float(source["samples_per_s"])), rel=1e-4)
        assert row["prediction"] == predicted["benchmark"]
        low, high = float(predicted["samples_per_s_low"]), float(predicted["samples_per_s_high"])
        inside = low <= float(row["samples_per_s"]) <= high
        assert ("inside_band" in row["verdicts"]) == inside and ("outside_band" in row["verdicts"]) == (not inside)
        assert "steps replayed on 2 ranks" in row["message"]
    # The console's comparison names the saved row the prediction was made from, not the replay.
    assert f") from {source['benchmark']} over measured (" in m.stdout, m.stdout[-2000:]
    alone = run(f"--replay_from={saved}", f"--csv={tmp_path / 'alone.csv'}")
    assert alone.returncode == 0, alone.stderr
    [skipped] = read_csv(tmp_path / "alone.csv")
    assert skipped["status"] == "skipped" and "mpirun -np N" in skipped["message"]
    nothing = run(f"--replay_from={saved}", "--benchmark_filter=resnet")
    assert nothing.returncode == 2 and "--replay_from=" in nothing.stderr and "holds prediction_inputs" in nothing.stderr


def test_one_device_rows_predict_gpu_or_mpi_scaling_over_named_links(tmp_path):
    out = tmp_path / "run.csv"
    # LeNet-5's own 200 warm-up steps: after 2, its loss on the first batch rose on a loaded machine's
    # 27 timed steps ("loss did not fall"), a failed row and exit status 1 beside the cli tests.
    r = run("--benchmark_filter=train/lenet5/cifar10/cpu/", "--link=pcie5+100,5", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    rows = read_csv(out)
    predicted = [row for row in rows if row["measurement"] == "predicted"]
    assert {(row["device"], row["link"]) for row in predicted} == {
        (f"mpi:{n}", link) for n in (2, 4, 8) for link in ("pcie5", "custom")}
    [source] = [row for row in rows if row["benchmark"] == predicted[0]["predicted_from"]]
    step = float(source["step_time_s"])  # the measured row's wall-clock step
    for row in predicted:
        assert float(row["allreduce_bytes_per_step"]) > 4 * 60000  # LeNet-5's gradients, once
        # N devices each at the measured step, lengthened by the terms: the exposed communication
        # among them; efficiency is over the measured row's own step, on the wall clock.
        n, exposed, predicted_step = int(row["replicas"]), float(row["comm_s_per_step"]), float(row["step_time_s"])
        assert predicted_step >= (step + exposed) * (1 - 1e-5)  # the CSV's 6 significant digits
        assert float(row["scaling_efficiency"]) == pytest.approx(step / predicted_step, rel=1e-4)
        assert float(row["samples_per_s"]) == pytest.approx(n * 100 / predicted_step, rel=1e-4)
        low, high = float(row["samples_per_s_low"]), float(row["samples_per_s_high"])
        assert low <= float(row["samples_per_s"]) <= high and row["dominant_term"]
    assert "predictions assume" in r.stdout and "predicted N-device scaling" in r.stdout
    off = run("--benchmark_list_tests", "--timeline=off", "--benchmark_filter=train/lenet5/cifar10/cpu/")
    assert off.stdout.split() == ["train/lenet5/cifar10/cpu/fp32/bs:100/timeline:off"]
    bad = run("--link=warp9", "--benchmark_filter=train/lenet5/cifar10/cpu/")
    assert bad.returncode == 2 and "--link: 'warp9'" in bad.stderr


def test_cpu_predictions_never_hide_the_all_reduce_whatever_the_link(tmp_path):
    """CPU ranks all-reduce on the cores backward computes on, so a prediction over a preset or
    numeric link counts every bucket's all-reduce as exposed: ResNet-152's ten or so 25 MiB
    buckets, which on a GPU could hide behind backward, all lengthen the step."""
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/resnet152/cifar10/cpu/", "--batch=4", "--warmup_steps=2",
            "--benchmark_min_time=0", "--link=pcie5+20,40", f"--csv={out}")
    assert r.returncode == 0, r.stderr
    rows = read_csv(out)
    predicted = [row for row in rows if row["measurement"] == "predicted"]
    assert len(predicted) == 6
    [source] = [row for row in rows if row["benchmark"] == predicted[0]["predicted_from"]]
    buckets = [float(b.split("@")[0]) for b in
               re.search(r"buckets=([^;]*)", source["prediction_inputs"]).group(1).split(",")]
    assert len(buckets) > 5 and sum(buckets) == pytest.approx(float(predicted[0]["allreduce_bytes_per_step"]))
    for row in predicted:
        n = int(row["replicas"])
        busbw, latency = float(row["link_busbw_gbps"]) * 1e9, float(row["link_latency_us"]) * 1e-6
        exposed = float(row["comm_s_per_step"])
        if row["link"] == "custom":
            # Each bucket as MPI runs it: from 64 KiB a ring (2(N-1) steps of a 1/N share), below a
            # binomial tree (2 log2 N steps of the whole bucket), every one of them after backward:
            # the model's own arithmetic, redone here.
            steps = 2 * math.ceil(math.log2(n))
            every_bucket = sum(2 * (n - 1) * latency + 2 * (n - 1) / n * b / busbw if b >= 64 * 1024
                               else steps * (latency + b / busbw) for b in buckets)
            assert exposed == pytest.approx(every_bucket, rel=1e-3), row["benchmark"]
        else:
            # NCCL's protocols on PCIe: at least every bucket's bytes at the bus bandwidth, exposed.
            assert exposed >= 2 * (n - 1) / n * sum(buckets) / busbw, row["benchmark"]


# ---- The workloads as JSON, for other tools (scripts/peers/pytorch_train.py) ----

def list_models_json(*args):
    r = run("--list_models", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_list_models_json_describes_the_workloads_the_binary_registers(tmp_path):
    data = list_models_json()
    assert data["format"] == 1
    workloads = data["workloads"]
    names = {(w["model"], w["dataset"]) for w in workloads}
    assert len(names) == len(workloads), "each workload once"
    # The same workloads the benchmarks are registered for (fashion-mnist only with its files).
    listed = run("--benchmark_list_tests", "--devices=cpu")
    registered = {tuple(line.split("/")[1:3]) for line in listed.stdout.splitlines() if line.startswith("train/")}
    assert registered <= names and names - registered <= {(w["model"], w["dataset"]) for w in workloads
                                                          if w["real_data_only"]}
    for w in workloads:
        assert w["task"] in ("classification", "regression")
        assert (w["classes"] > 0) == (w["task"] == "classification")
        assert w["input_shape"] and all(d > 0 for d in w["input_shape"])
        assert w["batch"] > 0 and w["gpu_batch"] >= w["batch"] or w["gpu_batch"] > 0
        assert w["optimizer"]["kind"] in ("sgd", "adam") and w["optimizer"]["lr"] > 0
        assert w["params"] > 0
        # 3x forward, less the input gradient of layers fed by the model's input (never computed).
        assert 2 * w["forward_flops_per_sample"] < w["train_flops_per_sample"] < 3 * w["forward_flops_per_sample"]
    # What a run writes agrees with what the JSON says: parameters, FLOPs, batch, optimizer.
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/(mlp|lstm)/", "--devices=cpu", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    by_name = {(w["model"], w["dataset"]): w for w in workloads}
    for row in read_csv(out):
        w = by_name[(row["model"], row["dataset"])]
        assert int(row["params"]) == w["params"]
        assert float(row["train_flops_per_sample"]) == pytest.approx(w["train_flops_per_sample"], rel=1e-5)
        assert int(row["batch"]) == w["batch"]
        assert row["optimizer"] == w["optimizer"]["kind"]
    # The MLP's 784-1000-1000-10 GEMMs: forward 3.588 MFLOP, weight gradients as much, input
    # gradients of fc2 and fc3 only (2.02 MFLOP): 9.196 MFLOP, the README's figure.
    assert by_name[("mlp", "mnist")]["train_flops_per_sample"] == 2 * (3 * 1794000 - 784000)
    lstm = by_name[("lstm", "sine")]
    assert lstm["seq_len"] == 35 and lstm["input_shape"] == [1] and lstm["task"] == "regression"
    resnet = by_name[("resnet152", "imagenet")]
    assert resnet["input_shape"] == [3, 224, 224] and resnet["classes"] == 1000 and resnet["gpu_batch"] > resnet["batch"]


def test_list_models_json_takes_batch_and_json_alone_is_refused():
    for w in list_models_json("--batch=4")["workloads"]:
        assert w["batch"] == 4 and w["gpu_batch"] == 4
    r = run("--json")
    assert r.returncode == 2 and "--json goes with --list_models" in r.stderr


# ---- What nvidia-smi shows, in every GPU row (NVML) ----

def test_gpu_rows_have_nvml_columns_and_positive_energy(tmp_path):
    if not gpu_available(tmp_path):
        pytest.skip("no usable GPU here: the gpu:1 rows are skipped, so they have no NVML columns to check")
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/(mlp|resnet152)/(mnist|cifar10)/gpu:1/(fp32|bf16)/", f"--csv={out}",
            "--benchmark_min_time=0.5")
    assert r.returncode == 0, r.stderr
    rows = read_csv(out)
    assert rows and all(row["status"] == "ok" for row in rows), rows
    for row in rows:
        name = row["benchmark"]
        assert 0 <= float(row["gpu_util"]) <= 100, name
        assert int(float(row["gpu_samples"])) >= 2, name
        # The driver's view of this process: at least what the allocator held at its peak.
        assert float(row["gpu_mem_used_bytes"]) >= float(row["mem_peak_bytes"]), name
        assert 0 < float(row["gpu_sm_clock_min_mhz"]) <= float(row["gpu_sm_clock_median_mhz"]), name
        assert float(row["gpu_power_w"]) > 0, name
        assert float(row["energy_j_per_sample"]) > 0, name
        assert float(row["gpu_temp_max_c"]) > 0, name
        assert row["gpu_throttle"], name
        # The driver's own version (580.159.04), not the CUDA driver API's (13.0).
        assert row["driver_version"].count(".") >= 1 and row["driver_version"] != row["cuda_driver_version"], row
    resnet = [row for row in rows if row["model"] == "resnet152"]
    assert all(float(row["gpu_util"]) > 50 for row in resnet), "ResNet-152 keeps the GPU busy"


def test_stdout_to_a_file_or_pipe_has_no_escape_bytes_unless_colour_is_forced(tmp_path):
    plain = run("--benchmark_filter=train/lstm/sine/cpu/", *FAST)
    assert plain.returncode == 0, plain.stderr
    assert "\x1b" not in plain.stdout and "train/lstm/sine/cpu/fp32/bs:20" in plain.stdout
    forced = run("--benchmark_filter=train/lstm/sine/cpu/", "--benchmark_color=true", *FAST)
    assert "\x1b[" in forced.stdout


def test_console_columns_carry_units_and_plain_numbers():
    r = run("--benchmark_filter=train/mlp/mnist/cpu/", *FAST)
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if line.startswith("Benchmark"))
    for unit in ("samples/s", "TFLOP/s", "util %"):
        assert unit in header
    row = next(line for line in r.stdout.splitlines() if line.startswith("train/mlp/mnist/cpu/"))
    # No SI suffixes such as 8.82562m or 265.8u: every cell is a plain or scientific number (the
    # time's unit aside). A note may follow the cells (on a busy machine: utilisation above 1).
    columns = re.split(r"\s{2,}", header.strip())
    for cell in row.split()[1:1 + len(columns)]:  # the time takes two cells, its value and unit
        assert re.fullmatch(r"[-+0-9.e]+|ms|s|us|ns", cell), cell


def test_benchmark_format_json_is_json_on_stdout_with_the_machine_context(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/lstm/sine/", "--benchmark_format=json", "--devices=cpu,gpu:1",
            "--precisions=fp32", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # nothing but JSON: skip lines and the summary go to stderr
    assert doc["context"]["trainbench_schema_version"] == "7"
    for key in ("trainbench_host", "trainbench_cpu_model", "trainbench_git_commit", "trainbench_onednn"):
        assert doc["context"][key], key
    [cpu] = [b for b in doc["benchmarks"] if b["name"] == "train/lstm/sine/cpu/fp32/bs:20"]
    # A row's message is its label there (on two cores or more the cpu row's says it ran as lanes).
    [row] = [row for row in read_csv(out) if row["device"] == "cpu"]
    assert cpu.get("label", "") == row["message"], (cpu, row["message"])
    assert "Summary" in r.stderr
    if not any(b["name"].startswith("train/lstm/sine/gpu:1/") and not b.get("error_occurred") for b in doc["benchmarks"]):
        assert "skipped gpu:1" in r.stderr


def test_benchmark_time_unit_sets_every_rows_unit(tmp_path):
    """Each row's own unit (ms for train/, s for epochs/) stands only where the flag is not
    given: a benchmark's unit overrides Google Benchmark's --benchmark_time_unit, which was
    checked and then ignored."""
    r = run("--benchmark_filter=train/lstm/sine/cpu", "--benchmark_format=json", "--benchmark_time_unit=us",
            f"--csv={tmp_path / 'run.csv'}", *FAST)
    assert r.returncode == 0, r.stderr
    units = {b["name"]: b["time_unit"] for b in json.loads(r.stdout)["benchmarks"]}
    assert units and set(units.values()) == {"us"}, units


def test_benchmark_out_json_carries_the_context_too(tmp_path):
    out = tmp_path / "gb.json"
    r = run("--benchmark_filter=train/lstm/sine/cpu/", f"--benchmark_out={out}", *FAST)
    assert r.returncode == 0, r.stderr
    context = json.loads(out.read_text())["context"]
    assert context["trainbench_sgemm_gflops"] and context["trainbench_git_commit"]


def test_runs_that_differ_in_a_flag_are_two_rows_that_never_share_a_name(tmp_path):
    out = tmp_path / "run.csv"
    for extra in ([], ["--optimizer=sgd"]):
        r = run("--benchmark_filter=train/mlp/mnist/cpu/", f"--csv={out}", *extra, *FAST)
        assert r.returncode == 0, r.stderr
    rows = read_csv(out)
    assert [row["benchmark"] for row in rows] == ["train/mlp/mnist/cpu/fp32/bs:100",
                                                  "train/mlp/mnist/cpu/fp32/bs:100/optimizer:sgd/lr:0.01"]
    assert [row["variant"] for row in rows] == ["", "optimizer:sgd/lr:0.01"]
    # The model's own optimizer named again is no variant.
    same = run("--benchmark_list_tests", "--optimizer=adam", "--benchmark_filter=train/mlp/mnist/cpu/")
    assert same.stdout.split() == ["train/mlp/mnist/cpu/fp32/bs:100"]


def test_summary_ends_the_run_and_is_written_as_markdown(tmp_path):
    out, md = tmp_path / "run.csv", tmp_path / "summary.md"
    r = run("--benchmark_filter=train/(mlp|lstm)/", "--devices=cpu,cpu:1,gpu:1,gpu:all",
            "--precisions=fp32,fastest", f"--csv={out}", f"--summary={md}", *FAST)
    assert r.returncode == 0, r.stderr
    tail = r.stdout[r.stdout.index("Summary"):]
    assert "cpu samples/s" in tail and "cpu:1 x cpu" in tail and "peak GiB" in tail
    assert "mlp/mnist" in tail and "lstm/sine" in tail
    text = md.read_text()
    assert text.startswith("# trainbench summary") and "| workload | precision | cpu samples/s |" in text
    rows = read_csv(out)
    cpu = {row["model"]: float(row["samples_per_s"]) for row in rows if row["device"] == "cpu"}
    lstm = cpu["lstm"]
    assert (f"{lstm:.0f}" if lstm >= 1e4 else f"{lstm:.4g}") in text  # the figures are the CSV's
    if not any(row["device"].startswith("gpu") and row["status"] == "ok" for row in rows):
        assert "## Skipped" in text and "gpu:1" in text and "gpu:all" in text


def test_fastest_precision_is_fp32_on_the_cpu_once():
    r = run("--benchmark_list_tests", "--devices=cpu", "--precisions=fp32,fastest",
            "--benchmark_filter=train/mlp/mnist/")
    assert r.stdout.split() == ["train/mlp/mnist/cpu/fp32/bs:100"]


def test_repeated_gpu_ordinal_names_gpu_n_as_shared_device_replicas():
    r = run("--benchmark_list_tests", "--devices=gpu:1,gpu:2", "--gpus=0,0", "--benchmark_filter=train/mlp/mnist/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["train/mlp/mnist/gpu:1/fp32/bs:100", "train/mlp/mnist/gpu:2/fp32/bs:100/shared_device"]
    short = run("--benchmark_list_tests", "--devices=gpu:4", "--gpus=0,0", "--benchmark_filter=train/mlp/mnist/")
    assert short.returncode == 0 and "/shared_device" in short.stdout


def test_jobs_are_separate_processes_each_measured_on_its_own(tmp_path):
    """Story 000: K separate programs sharing a device, each seen on its own. cpu:1/jobs:2 runs
    the mechanism of gpu:1/jobs:K without a GPU: two copies of trainbench, timed together."""
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/lstm/sine/", "--devices=cpu:1/jobs:2", f"--csv={out}")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    [row] = [row for row in read_csv(out) if row["device"] == "cpu:1/jobs:2"]
    assert row["status"] == "ok" and row["replicas"] == "2"
    # Both jobs timed one agreed window of 2 s, ending with the step that crossed its end: the
    # row counts what they did while both ran (tests/test_bench.cpp checks that count).
    window = float(row["jobs_window_s"])
    assert 1.9 <= window < 2.5
    assert f"one window of {window:.3g} s" in row["message"]
    in_window = re.search(r"samples/s per job in it ([0-9, ]+) \(", row["message"]).group(1).split(",")
    assert len(in_window) == 2 and all(float(x) > 0 for x in in_window)
    assert float(row["samples_per_s"]) * float(row["step_time_s"]) == pytest.approx(2 * 20, rel=1e-4)
    # Its iterations: the steps both jobs completed inside the window (it held Google Benchmark's 1).
    assert int(row["iterations"]) == round(float(row["samples_per_s"]) * window / 20)
    assert 0 < float(row["host_cpu_util_per_job"]) <= 1.5
    assert "2 processes" in row["message"]
    # The in-process variant keeps its own name.
    listed = run("--benchmark_list_tests", "--devices=gpu:1/threads:2,gpu:1/jobs:2", "--benchmark_filter=train/lstm/")
    assert listed.stdout.split() == ["train/lstm/sine/gpu:1/threads:2/fp32/bs:20",
                                     "train/lstm/sine/gpu:1/jobs:2/fp32/bs:20"]


def test_jobs_end_with_the_trainbench_that_started_them(tmp_path):
    """A SIGTERM to trainbench kills it at once (the rows written stay): its jobs get SIGTERM too,
    instead of training on, and the next run with jobs removes the folder it left. Before, both
    jobs ran on, re-parented to init, and /tmp/trainbench-jobs-* stayed."""
    p = subprocess.Popen([BINARY, "--benchmark_filter=train/lstm/sine/", "--devices=cpu:1/jobs:2",
                          "--benchmark_repetitions=20", f"--csv={tmp_path / 'killed.csv'}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(marked_processes("TB_JOB_PARENT", str(p.pid))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(marked_processes("TB_JOB_PARENT", str(p.pid))) == 2, "the jobs never started"
    [folder] = Path("/tmp").glob(f"trainbench-jobs-{p.pid}-*")
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    deadline = time.monotonic() + 10
    while marked_processes("TB_JOB_PARENT", str(p.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked_processes("TB_JOB_PARENT", str(p.pid)), "a job outlived trainbench"
    assert folder.exists()
    r = run("--benchmark_filter=train/lstm/sine/", "--devices=cpu:1/jobs:2", "--benchmark_min_time=0.05")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not folder.exists(), "the folder of the killed run stayed"


def test_jobs_still_warming_up_end_with_the_trainbench_that_started_them(tmp_path):
    """As above, with jobs that would run for hours (10 million warm-up steps each): trainbench
    killed (SIGKILL, which leaves it no time to stop them) as soon as both jobs run, the kernel's
    parent-death signal ends them. Above, each job's row ends on its own seconds later, so the
    jobs left over were gone within its 10 s whether they were told to stop or not."""
    p = subprocess.Popen([BINARY, "--benchmark_filter=train/lstm/sine/", "--devices=cpu:1/jobs:2",
                          "--warmup_steps=10000000", f"--csv={tmp_path / 'killed.csv'}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Killed once both jobs print Google Benchmark's context, which they do after binding
        # themselves to trainbench: earlier, a job finds its parent gone and ends itself.
        def warming_up():
            logs = list(Path("/tmp").glob(f"trainbench-jobs-{p.pid}-*/job*.log"))
            return len(logs) == 2 and all("Load Average" in log.read_text(errors="replace") for log in logs)

        deadline = time.monotonic() + 120
        while not warming_up() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert warming_up() and len(marked_processes("TB_JOB_PARENT", str(p.pid))) == 2, "the jobs never started"
        p.kill()
        p.wait(timeout=60)
        deadline = time.monotonic() + 60
        while marked_processes("TB_JOB_PARENT", str(p.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = marked_processes("TB_JOB_PARENT", str(p.pid))
    finally:
        for pid in marked_processes("TB_JOB_PARENT", str(p.pid)):
            os.kill(int(pid), signal.SIGKILL)
        for folder in Path("/tmp").glob(f"trainbench-jobs-{p.pid}-*"):
            shutil.rmtree(folder, ignore_errors=True)
    assert not left, "a job outlived trainbench"


def test_cpu_rows_train_on_resident_data_with_data_on_device(tmp_path):
    """--data_on_device on the CPU: batches prepared once and kept in host memory (the PyTorch
    peer's pool); the row says so in its name and column, and it trains. Without the flag a cpu
    row leaves the column empty, as before."""
    out = tmp_path / "run.csv"
    # The plain row only names itself; the resident one must learn, past LeNet-5's plateau.
    for extra in (FEW_STEPS, ["--data_on_device", *FAST]):
        r = run("--benchmark_filter=train/lenet5/cifar10/cpu/", "--devices=cpu", f"--csv={out}", *extra)
        assert r.returncode == 0, r.stderr
    plain, resident = read_csv(out)
    assert plain["benchmark"] == "train/lenet5/cifar10/cpu/fp32/bs:100" and plain["data_on_device"] == ""
    assert resident["benchmark"] == "train/lenet5/cifar10/cpu/fp32/bs:100/data_on_device"
    assert resident["variant"] == "data_on_device" and resident["data_on_device"] == "1"
    assert resident["status"] == "ok" and float(resident["loss_last"]) < float(resident["loss_first"])


def test_a_filter_matching_nothing_gives_the_name_grammar_and_the_nearest_names():
    """Tried as a new user would: with --optimizer=sgd the MLP's name ends with its variant, so
    a filter ending at bs:100$ matches nothing; the error must say why and what is near."""
    r = run("--optimizer=sgd", "--benchmark_filter=train/mlp/mnist/cpu/fp32/bs:100$")
    assert r.returncode == 2
    assert "bs:<n>[/<variant>]" in r.stderr and "a filter ending in bs:<n>$ misses it" in r.stderr
    nearest = r.stderr.split("Nearest names with these flags: ")[1].split(". List them")[0].split(", ")
    assert nearest[0] == "train/mlp/mnist/cpu/fp32/bs:100/optimizer:sgd/lr:0.01", nearest


def test_a_summary_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    out = tmp_path / "run.csv"
    # /proc is a folder that exists, where no file can be created (tried as a new user would: it was
    # accepted, reported after the run, and the run exited 0).
    for bad, why in ((tmp_path / "no-such-folder" / "s.md", "does not exist"), (tmp_path, "is a folder"),
                     ("/proc/x.md", "cannot be created")):
        r = run("--benchmark_filter=train/lstm/sine/cpu/", f"--summary={bad}", f"--csv={out}", *FAST)
        assert r.returncode == 2 and f"--summary={bad}" in r.stderr and why in r.stderr, r.stderr
        assert not out.exists(), "nothing measured, nothing written"


def test_no_output_file_overwrites_another_or_a_csv_and_a_flag_is_given_once(tmp_path):
    """--csv, --summary and --benchmark_out are three files, and a trainbench CSV given as the
    summary or Google Benchmark's output is refused before anything runs, left as it was: each had
    overwritten it whole (the summary file was emptied at start-up, even when the run then
    stopped). A flag given twice, a device listed twice and Google Benchmark's output flags with
    values it does not know are refused (exit 2; they were taken last-wins, pooled as two
    repetitions, or made Google Benchmark print its usage and exit 0 having run nothing)."""
    lstm = ["--benchmark_filter=train/lstm/sine/cpu:1/", "--benchmark_min_time=0.02"]
    rows = tmp_path / "rows.csv"
    assert run(*lstm, f"--csv={rows}").returncode == 0
    kept = rows.read_bytes()
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    for args, says in [
        ([f"--summary={rows}"], "the file holds trainbench rows"),
        ([f"--benchmark_out={rows}"], "the file holds trainbench rows"),
        ([f"--csv={tmp_path / 'new.csv'}", f"--summary={tmp_path / 'new.csv'}"], "are one file"),
        ([f"--csv={rows}", f"--benchmark_out={rows}"], "are one file"),
        ([f"--benchmark_out={tmp_path}"], "is a folder"),
        ([f"--csv={tmp_path / 'a.csv'}", f"--csv={tmp_path / 'b.csv'}"], "--csv is given twice"),
        (["--devices=cpu:1,cpu:1"], "cpu:1 is given twice"),
        (["--benchmark_out_format=xml"], "--benchmark_out_format: 'xml'"),
        (["--benchmark_time_unit=xs"], "--benchmark_time_unit: 'xs'"),
    ]:
        r = run(*lstm, *args)
        assert r.returncode == 2 and says in r.stderr, (args, r.returncode, r.stderr)
    assert rows.read_bytes() == kept
    r = run("--benchmark_filter=train/nosuchmodel/", f"--summary={notes}")
    assert r.returncode == 2 and notes.read_text() == "my notes\n", "a run that stops leaves the summary file be"
    r = run(*lstm, "--summary=/dev/full")
    assert r.returncode == 1 and "--summary=/dev/full: cannot write the summary" in r.stderr, r.stderr


def test_a_filter_that_is_no_regular_expression_or_no_value_and_mpi_1_say_what_they_are():
    """Said for what they are: a filter Google Benchmark cannot compile (it matched nothing, and
    trainbench said no name matched), --benchmark_filter without a value ('unknown flag'), and mpi:1
    (it asked for mpirun -np 1, under which it is skipped again)."""
    r = run("--benchmark_filter=(")
    assert r.returncode == 2 and "--benchmark_filter='(': not a regular expression" in r.stderr, r.stderr
    r = run("--benchmark_filter")
    assert r.returncode == 2 and "--benchmark_filter needs a value" in r.stderr, r.stderr
    r = run("--benchmark_filter=train/lstm/", "--devices=mpi:1", "--benchmark_min_time=0.02")
    assert "mpi:1: one rank all-reduces with no one: mpi:N takes N >= 2 ranks" in r.stdout + r.stderr, r.stdout


def test_google_benchmarks_debug_warning_is_said_for_what_it_is():
    r = run("--benchmark_filter=train/lstm/sine/cpu/", *FAST)
    assert r.returncode == 0, r.stderr
    assert "***WARNING*** Library was built as DEBUG" not in r.stdout + r.stderr
    # Debian's libbenchmark is a debug build: the note replaces its warning (absent elsewhere).
    if "debug build" in r.stderr:
        assert "every figure trainbench prints or writes comes from trainbench's own wall clock" in r.stderr


def test_jobs_beyond_the_cores_are_refused_before_any_process_starts(tmp_path):
    """A typo such as cpu:1/jobs:100000 once started processes without bound."""
    out = tmp_path / "run.csv"
    cores = os.cpu_count()
    r = run("--benchmark_filter=train/mlp/mnist/", f"--devices=cpu:1/jobs:{cores + 1}", f"--csv={out}", timeout=60)
    assert r.returncode == 0, r.stderr
    [row] = read_csv(out)
    assert row["status"] == "skipped"
    assert f"{cores + 1} jobs of 1 thread(s) need {cores + 1} cores, this machine has {cores}" in row["message"]
    assert f"at most {cores} such jobs" in row["message"]


def test_a_job_that_fails_fails_the_row_with_its_own_message(tmp_path):
    out = tmp_path / "run.csv"
    # The MLP under SGD at a learning rate of 1e6 diverges at its third step.
    r = run("--benchmark_filter=train/mlp/mnist/", "--devices=cpu:1/jobs:2", "--optimizer=sgd", "--lr=1e6",
            f"--csv={out}")
    [row] = [row for row in read_csv(out) if row["device"] == "cpu:1/jobs:2"]
    assert row["status"] == "failed" and "job 0 of 2" in row["message"] and "loss" in row["message"]
    assert r.returncode == 1
    # Its exit status and the end of its output, both streams: its row's error (its console) and
    # trainbench's last words (its stderr).
    assert row["message"].startswith("job 0 of 2: exit status 1; its output ends: "), row["message"]
    assert "FAILED: loss is NaN at training step" in row["message"], row["message"]
    assert "benchmark(s) failed; see the messages above" in row["message"], row["message"]


def run_killing_a_job(out, killed, preexec_fn=None):
    """Runs cpu:1/jobs:2 of the LSTM writing `out`, kills job `killed` (SIGKILL) as soon as it is
    running, long before it is ready to time its steps, and returns trainbench's exit status and
    output. The timeout only guards against the other job's wait for it (10 minutes)."""
    p = subprocess.Popen([BINARY, "--benchmark_filter=train/lstm/sine/", "--devices=cpu:1/jobs:2", f"--csv={out}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
    try:
        victim = None
        deadline = time.monotonic() + 120
        while victim is None and p.poll() is None and time.monotonic() < deadline:
            for pid in marked_processes("TB_JOB_PARENT", str(p.pid)):
                try:
                    if f"TB_JOB_INDEX={killed}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                        victim = int(pid)
                except OSError:
                    continue
            time.sleep(0.05)
        assert victim is not None, f"job {killed} never started"
        os.kill(victim, signal.SIGKILL)
        stdout, stderr = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            for pid in marked_processes("TB_JOB_PARENT", str(p.pid)):
                os.kill(int(pid), signal.SIGKILL)
            p.kill()
            p.communicate()
    return p.returncode, stdout, stderr


def expect_the_killed_job_failed_the_row(tmp_path, killed, preexec_fn=None):
    """run_killing_a_job's run: exit status 1 and the row failed, its message first naming job
    `killed` and its signal (exit status 128 + 9)."""
    out = tmp_path / "run.csv"
    returncode, stdout, stderr = run_killing_a_job(out, killed, preexec_fn)
    assert returncode == 1, (stdout[-2000:], stderr[-2000:])
    [row] = [row for row in read_csv(out) if row["device"] == "cpu:1/jobs:2"]
    assert row["status"] == "failed"
    assert row["message"].startswith(f"job {killed} of 2: exit status 137; its output ends: "), row["message"]


@pytest.mark.parametrize("killed", [0, 1])
def test_a_killed_job_fails_the_row_naming_it_and_its_signal_and_the_other_job_stops(tmp_path, killed):
    """One job of cpu:1/jobs:2 killed as soon as it is running: the row fails naming that job and
    its signal (exit status 128 + 9), before the other job's failure, whichever ended first; and
    the other job, which would wait for it at their meeting point for 10 minutes, is told to stop
    and does; the run ends with exit status 1."""
    expect_the_killed_job_failed_the_row(tmp_path, killed)


def test_a_job_killed_where_sigchld_is_ignored_fails_the_row_and_the_other_job_stops(tmp_path):
    """SIGCHLD ignored by whoever started trainbench (a disposition its processes inherit): the
    kernel reaped the jobs itself, so trainbench learnt of none until all had ended, and a killed
    job left the other waiting for it at their meeting point for 10 minutes. trainbench reaps its
    jobs itself whatever it inherited: the row fails naming the killed job, as it does otherwise."""
    expect_the_killed_job_failed_the_row(tmp_path, 1,
                                         preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN))


def test_a_jobs_run_removes_its_folder_and_leaves_a_live_runs_and_other_folders_alone(tmp_path):
    """Under /tmp, a jobs row's folder (trainbench-jobs-<its pid>-XXXXXX) is gone once the run
    ends; the folder of another trainbench still running (here: named after this test's own
    process, which is alive) stays, and so does a folder that only looks like one (no '-' after the
    process id), even where that id is of a process that has ended. Only the folders of runs that
    ended (killed before they could remove their own) are removed."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    live = Path(f"/tmp/trainbench-jobs-{os.getpid()}-livetest")
    other = Path(f"/tmp/trainbench-jobs-{ended.pid}.not-a-run")
    try:
        for folder in (live, other):
            folder.mkdir()
            (folder / "ready.0.0").write_text("1.0\n")
        p = subprocess.Popen([BINARY, "--benchmark_filter=train/lstm/sine/", "--devices=cpu:1/jobs:2",
                              "--benchmark_min_time=0.05", f"--csv={tmp_path / 'run.csv'}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr[-2000:]
        [row] = [row for row in read_csv(tmp_path / "run.csv") if row["device"] == "cpu:1/jobs:2"]
        assert row["status"] == "ok", row["message"]
        assert not list(Path("/tmp").glob(f"trainbench-jobs-{p.pid}-*")), "the run's own folder stayed"
        assert (live / "ready.0.0").exists(), "the folder of a live run was removed"
        assert (other / "ready.0.0").exists(), "a folder not named as a run's was removed"
    finally:
        for folder in (live, other):
            shutil.rmtree(folder, ignore_errors=True)


def test_the_published_measurements_table_is_what_its_commands_predict():
    """docs/prediction.md's "Published measurements": each row's command, run here, prints the
    prediction and band the table shows, and the table's "inside" is whether the published figure
    (or range) meets that band."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    page = open(os.path.join(root, "docs", "prediction.md")).read()
    table = page[page.index("<!-- published measurements"):].split("\n\n")[0].splitlines()[1:]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")))) for line in table[2:]]
    assert len(rows) >= 5 and header[-1] == "inside", header

    def numbers(text):
        return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text.replace(",", ""))]

    for row in rows:
        command = re.fullmatch(r"`(.*)`", row["trainbench's command"]).group(1).split()
        r = subprocess.run([os.path.abspath(BINARY), *command], capture_output=True, text=True, timeout=120, cwd=root)
        assert r.returncode == 0, (command, r.stderr)
        if command[0].startswith("--predict_allreduce"):
            got = re.search(r"busbw ([\d.]+) GB/s \(([\d.]+) to ([\d.]+)\)", r.stdout)
        else:
            got = re.search(r"(\d+)% efficiency \((\d+)% to (\d+)%\)", r.stdout)
        assert got, (command, r.stdout)
        point, low, high = (float(x) for x in got.groups())
        shown = numbers(row["predicted (band)"])
        assert shown == [point, low, high], (row["what was measured"], shown, got.group(0))
        published = numbers(row["published"])
        inside = published[0] <= high and published[-1] >= low  # a range: where it meets the band
        assert row["inside"] == ("yes" if inside else "no"), (row["what was measured"], published, low, high)


@pytest.mark.skipif(shutil.which("taskset") is None, reason="util-linux's taskset is not installed")
def test_a_row_whose_core_another_process_takes_is_loaded(tmp_path):
    """A busy process started with the run, on the one core the run may use: the load average read
    at the row's start does not see it (a minute's average), the row's thread's wait for the CPU
    does (the kernel's run delay): the row is `loaded`, and the console says how long it waited."""
    out = tmp_path / "run.csv"
    hog = subprocess.Popen(["taskset", "-c", "0", "/usr/bin/python3", "-c", "while True: pass"])
    try:
        r = subprocess.run(["taskset", "-c", "0", BINARY, "--benchmark_filter=train/lstm/sine/cpu:1/", "--devices=cpu:1",
                            "--precisions=fp32", "--benchmark_min_time=0.5", f"--csv={out}"],
                           capture_output=True, text=True, timeout=300)
    finally:
        hog.kill()
        hog.wait()
    assert r.returncode == 0, r.stderr
    [row] = [row for row in read_csv(out) if row["run_type"] == "iteration"]
    assert row["status"] == "ok", row["message"]
    assert "loaded" in row["verdicts"].split("+"), row
    waited = re.search(r"train/lstm/sine/cpu:1/fp32/bs:20's threads waited for a CPU ([\d.]+) s a second of its timed "
                       r"steps", r.stderr)
    assert waited and 0.2 < float(waited.group(1)) <= 1.0, r.stderr
    assert "waited" not in row["message"], "the message says what the row measured, busy or not"

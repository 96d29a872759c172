"""End-to-end tests of the trainbench binary: runs it with filters and flags, reads the CSV
it wrote, and feeds it bad input. The binary comes from $TRAINBENCH (set by ctest)."""
import csv
import os
import shutil
import subprocess

import pytest

BINARY = os.environ.get("TRAINBENCH", "build/release/bench/trainbench")
FAST = ["--benchmark_min_time=0.05"]


def run(*args, timeout=600):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_mlp_run_writes_a_checked_csv_row(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=train/mlp/mnist/cpu/", f"--csv={out}", *FAST)
    assert r.returncode == 0, r.stderr
    assert "train/mlp/mnist/cpu/fp32/bs:100" in r.stdout
    rows = read_csv(out)
    assert len(rows) == 1
    row = rows[0]
    assert row["schema_version"] == "2"
    assert row["benchmark"] == "train/mlp/mnist/cpu/fp32/bs:100"
    assert (row["model"], row["dataset"], row["device"], row["precision"]) == ("mlp", "mnist", "cpu", "fp32")
    assert row["data_source"] == "synthetic"
    assert row["status"] == "ok" and row["message"] == ""
    assert row["run_type"] == "iteration"
    assert int(row["iterations"]) >= 1
    assert float(row["samples_per_s"]) > 0
    assert float(row["step_time_s"]) > 0
    assert abs(float(row["samples_per_s"]) * float(row["step_time_s"]) - 100) < 1.0
    assert int(row["params"]) == 1796010
    assert float(row["loss_last"]) < float(row["loss_first"])
    assert 0 < float(row["utilisation"]) < 2
    assert float(row["peak_gflops"]) > 0
    assert float(row["host_cpu_s_per_step"]) > 0
    assert int(float(row["peak_rss_bytes"])) > 10 * 2**20
    for column in ("host", "os", "cpu_model", "compiler", "onednn", "git_commit", "timestamp"):
        assert row[column], column
    assert int(row["cores"]) >= 1


def test_repetitions_add_aggregate_rows_and_appending_keeps_one_header(tmp_path):
    out = tmp_path / "run.csv"
    for _ in range(2):
        r = run("--benchmark_filter=train/lstm/sine/cpu/", f"--csv={out}", "--benchmark_repetitions=2", *FAST)
        assert r.returncode == 0, r.stderr
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
    ("--frobnicate", "unknown flag '--frobnicate'"),
    ("--csv", "--csv needs a value"),
    ("--precisions=fp8", "unknown precision 'fp8'"),
    ("--devices=gpu:0", "gpu:0"),
    ("--gpus=x", "--gpus"),
    ("--gpu_memory_limit=lots", "--gpu_memory_limit"),
    ("--gpu_memory_limit=1.5", "--gpu_memory_limit"),
    ("--devices=gpu:2/jobs:2", "jobs share one GPU"),
    ("--devices=mpi:x", "mpi:x"),
    ("--iterations=0", "--iterations"),
])
def test_bad_flags_are_refused_with_the_flag_named(flag, needle):
    r = run(flag, "--benchmark_filter=train/mlp/mnist/cpu/")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


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


def gpu_available():
    """Whether this machine can run gpu:1 rows: the binary's own verdict, from a listing run."""
    r = run("--benchmark_filter=train/mlp/mnist/gpu:1/fp32/", "--benchmark_min_time=0.01")
    return "skipped:" not in r.stdout


def test_gpu_rows_without_a_gpu_are_skipped_with_the_reason_and_cpu_rows_still_run(tmp_path):
    if gpu_available():
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
    assert "run(s) failed" in r.stderr


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


def test_target_accuracy_reports_the_time_it_took(tmp_path):
    out = tmp_path / "run.csv"
    r = run("--benchmark_filter=epochs/mlp/mnist/cpu/", "--epochs=3", "--target_accuracy=0.5", f"--csv={out}")
    assert r.returncode == 0, r.stderr
    final = [row for row in read_csv(out) if row["run_type"] == "iteration"][0]
    assert final["status"] == "ok"
    assert float(final["time_to_target_s"]) > 0
    assert float(final["val_acc"]) >= 0.5
    assert final["target_acc"] == "0.5"


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


@pytest.mark.parametrize("flag,needle", [
    ("--loader_workers=-1", "--loader_workers"),
    ("--prefetch=0", "--prefetch"),
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


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_mpirun_two_ranks_train_one_data_parallel_row_written_by_rank_0(tmp_path):
    out = tmp_path / "run.csv"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:protect_shadow_gap=0")  # Open MPI's lifetime allocations
    r = subprocess.run(["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", BINARY,
                        "--benchmark_filter=train/mlp/mnist/", "--iterations=4", f"--csv={out}"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    rows = read_csv(out)
    assert sum(line.startswith("schema_version,") for line in out.read_text().splitlines()) == 1
    ok = {row["benchmark"]: row for row in rows if row["status"] == "ok"}
    # Rank 0's rows only: the one-replica baseline (rank 0 alone), then the data-parallel run.
    assert list(ok) == ["train/mlp/mnist/cpu:1/fp32/bs:100", "train/mlp/mnist/mpi:2/fp32/bs:100"]
    row = ok["train/mlp/mnist/mpi:2/fp32/bs:100"]
    assert (row["ranks"], row["replicas"], row["iterations"]) == ("2", "2", "4")
    assert float(row["allreduce_bytes_per_step"]) >= 4 * 1796010  # every gradient, once
    assert float(row["comm_s_per_step"]) > 0 and 0 < float(row["comm_share"]) < 1
    # The global batch: 2 x 100 samples per step.
    assert abs(float(row["samples_per_s"]) * float(row["step_time_s"]) - 200) < 1
    assert float(row["loss_last"]) < float(row["loss_first"])
    baseline = float(ok["train/mlp/mnist/cpu:1/fp32/bs:100"]["samples_per_s"])
    assert abs(float(row["scaling_efficiency"]) - float(row["samples_per_s"]) / (2 * baseline)) < 1e-3
    assert r.stdout.count("train/mlp/mnist/mpi:2/fp32/bs:100") == 1  # printed once, by rank 0

"""scripts/gpu_check.py, the reader of scripts/gpu_check.sh's steps: each step's verdict (passed,
failed with the first error line, skipped with the reason) and its figures, from GoogleTest's and
compute-sanitizer's output and trainbench's CSVs. The inputs are the committed H100 and VM runs,
and rows made from them where no GPU run of that kind exists yet (jobs, emulated GPU nodes)."""
import csv
import subprocess
import sys

import pytest

from conftest import ROOT, SCRIPTS

READER = SCRIPTS / "gpu_check.py"
H100 = ROOT / "results" / "h100"
VM = ROOT / "results" / "vm"
EMULATED = VM / "predictions-20261126T102553Z" / "emulated-1gbit.csv"


def judge(*args):
    """The reader's verdict line and its figures."""
    r = subprocess.run([sys.executable, str(READER), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    return lines[0], lines[1:]


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_rows(path, rows, header=None):
    header = header or list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)
    return path


# ---- GoogleTest and compute-sanitizer ------------------------------------------------------------

def test_a_passing_gtest_run_counts_its_tests_and_the_skip_reason():
    verdict, figures = judge("gtest", H100 / "test_cuda.log", 0, "--what", "test_cuda")
    assert verdict == "passed: 97 passed, 1 skipped (needs two GPUs (NCCL puts one rank on each))"
    assert figures == ["- test_cuda: " + verdict.removeprefix("passed: ")]


def test_a_failing_gtest_run_names_its_first_failed_test_and_the_failure():
    verdict, _ = judge("gtest", H100 / "test_cuda-20261124-shared-device.log", 1, "--what", "test_cuda")
    assert verdict.startswith("failed: 2 failed, first AllPrecisions/NcclOneRank.TrainsLikeAPlainNetwork/fp32: ")
    assert "tests/test_cuda.cpp:1436: Expected equality of these values: replica.param_checksum()" in verdict


def test_a_stopped_gtest_run_says_which_test_was_running(tmp_path):
    log = tmp_path / "log"
    log.write_text("[==========] Running 2 tests from 1 test suite.\n[ RUN      ] A.First\n[       OK ] A.First (5 ms)\n"
                   "[ RUN      ] A.Second\n")
    verdict, _ = judge("gtest", log, 124, "--timed-out", 80, "--what", "test_cuda")
    assert verdict == "failed: test_cuda timed out after 80 s in A.Second (1 tests had finished)"


def test_a_crashed_run_without_failures_is_failed_with_its_last_words(tmp_path):
    log = tmp_path / "log"
    log.write_text("[ RUN      ] A.First\nterminate called after throwing an instance of 'tb::CudaError'\n")
    verdict, _ = judge("gtest", log, 134)
    assert verdict == "failed: the tests exited 134: terminate called after throwing an instance of 'tb::CudaError'"


def test_every_test_skipping_itself_is_a_skipped_step_with_the_reason(tmp_path):
    log = tmp_path / "log"
    log.write_text("[ RUN      ] NcclRanks.X/fp32\n/src/tests/test_mpi.cpp:102: Skipped\nno usable GPU: no CUDA-capable "
                   "device is detected\n\n[  SKIPPED ] NcclRanks.X/fp32 (0 ms)\n[==========] 1 test from 1 test suite "
                   "ran. (0 ms total)\n[  PASSED  ] 0 tests.\n[  SKIPPED ] 1 test, listed below:\n")
    verdict, _ = judge("gtest", log, 0)
    assert verdict == "skipped: every test skipped itself: no usable GPU: no CUDA-capable device is detected"


def test_a_binary_that_ran_no_test_is_failed_not_skipped(tmp_path):
    """A filter that matched nothing, or a binary that printed nothing, exited 0 having tested
    nothing: failed with its last words, not `every test skipped itself`."""
    log = tmp_path / "log"
    log.write_text("Note: Google Test filter = Nccl*\n[==========] Running 0 tests from 0 test suites.\n"
                   "[==========] 0 tests from 0 test suites ran. (0 ms total)\n[  PASSED  ] 0 tests.\n")
    assert judge("gtest", log, 0, "--what", "test_mpi")[0] == "failed: test_mpi ran no test: [ PASSED ] 0 tests."
    log.write_text("")
    assert judge("gtest", log, 0)[0] == "failed: the tests ran no test: (no output)"


def test_two_ranks_interleaved_count_once_per_rank(tmp_path):
    log = tmp_path / "log"
    one = ["[==========] 2 tests from 1 test suite ran. (9 ms total)", "[  PASSED  ] 2 tests."]
    log.write_text("[ RUN      ] P/NcclRanks.A/fp32[ RUN      ] P/NcclRanks.A/fp32\n" + "\n".join(one + one) + "\n")
    verdict, _ = judge("gtest", log, 0, "--ranks", 2)
    assert verdict == "passed: 2 passed on each of 2 ranks"


def test_colours_mpirun_gives_googletest_are_read_through(tmp_path):
    # Open MPI gives each rank a pseudo-terminal, so GoogleTest colours its lines.
    log = tmp_path / "log"
    log.write_text("\x1b[0;32m[ RUN      ] \x1b[mM.Collectives\n\x1b[0;32m[       OK ] \x1b[mM.Collectives (1 ms)\n"
                   "\x1b[0;32m[==========] \x1b[m1 test from 1 test suite ran. (1 ms total)\n"
                   "\x1b[0;32m[  PASSED  ] \x1b[m1 test.\n")
    assert judge("gtest", log, 0)[0] == "passed: 1 passed"


def test_a_runtime_that_refuses_the_sanitizer_makes_the_step_skipped_in_its_words(tmp_path):
    # What compute-sanitizer did on the H200's gVisor runtime (KINDS.md, 2026-11-04): refused the
    # device, then the program's first allocation failed with error 999.
    log = tmp_path / "memcheck.log"
    log.write_text("========= COMPUTE-SANITIZER\n========= Error: Device not supported\n[ RUN      ] L.Linear/fp32\n"
                   "/src/tests/test_cuda.cpp:100: Failure\ncudaMalloc: unknown error (999)\n"
                   "[  FAILED  ] L.Linear/fp32 (1 ms)\n========= ERROR SUMMARY: 0 errors\n")
    verdict, _ = judge("sanitizer", log, 1)
    assert verdict == "skipped: compute-sanitizer: Error: Device not supported"


def test_a_memcheck_error_fails_the_step_with_the_tools_first_line(tmp_path):
    log = tmp_path / "memcheck.log"
    log.write_text("========= COMPUTE-SANITIZER\n[ RUN      ] L.Linear/fp32\n========= Invalid __global__ write of "
                   "size 4 bytes\n=========     at bias_add+0x70\n[       OK ] L.Linear/fp32 (90 ms)\n"
                   "[==========] 1 test from 1 test suite ran.\n[  PASSED  ] 1 test.\n========= ERROR SUMMARY: 1 error\n")
    verdict, _ = judge("sanitizer", log, 99)
    assert verdict == "failed: memcheck found 1 error(s), the first: Invalid __global__ write of size 4 bytes"


def test_a_clean_memcheck_run_passes_and_a_run_without_its_summary_does_not(tmp_path):
    body = "[ RUN      ] L.Linear/fp32\n[       OK ] L.Linear/fp32 (90 ms)\n[==========] 1 test from 1 test suite ran.\n" \
           "[  PASSED  ] 1 test.\n"
    log = tmp_path / "memcheck.log"
    log.write_text("========= COMPUTE-SANITIZER\n" + body + "========= ERROR SUMMARY: 0 errors\n")
    assert judge("sanitizer", log, 0)[0] == "passed: 0 memcheck errors, 1 passed"
    log.write_text(body)
    assert judge("sanitizer", log, 0)[0].startswith("failed: compute-sanitizer printed no ERROR SUMMARY")


def test_a_crash_is_named_by_its_last_error_line_not_its_first_or_last_line(tmp_path):
    """A run's last words: its last line of an error word (terminate among them), before the
    `what():` that follows it and after an earlier error line."""
    log = tmp_path / "log"
    log.write_text("[ RUN      ] A.First\ncudaMalloc: error 2, retrying with a smaller workspace\n"
                   "terminate called after throwing an instance of 'tb::CudaError'\n  what():  out of memory\n")
    verdict, _ = judge("gtest", log, 134)
    assert verdict == "failed: the tests exited 134: terminate called after throwing an instance of 'tb::CudaError'"


def test_a_failing_run_names_its_first_failure_and_each_failed_test_once(tmp_path):
    """Two ranks failing the same test count one failed test; the detail is the first failure's
    lines up to GoogleTest's own `[ ... ]` line."""
    log = tmp_path / "log"
    rank = ("[ RUN      ] A.One\n/src/a.cpp:10: Failure\nValue of: x\n[  FAILED  ] A.One (1 ms)\n"
            "[ RUN      ] A.Two\n/src/a.cpp:20: Failure\nValue of: y\n[  FAILED  ] A.Two (1 ms)\n"
            "[==========] 2 tests from 1 test suite ran. (2 ms total)\n[  PASSED  ] 0 tests.\n")
    log.write_text(rank + rank)
    verdict, _ = judge("gtest", log, 1, "--ranks", 2)
    assert verdict == "failed: 2 failed, first A.One: /src/a.cpp:10: Value of: x"


def test_a_stopped_run_is_timed_out_though_a_test_had_failed_and_names_the_last_started(tmp_path):
    """The timeout says more than a failure before it; the test that was running is the last one
    started (one whose end line was lost is not it)."""
    log = tmp_path / "log"
    log.write_text("[ RUN      ] A.Lost\n[ RUN      ] A.First\n/src/a.cpp:10: Failure\nValue of: x\n"
                   "[  FAILED  ] A.First (5 ms)\n[ RUN      ] A.Second\n")
    verdict, _ = judge("gtest", log, 124, "--timed-out", 80, "--what", "test_cuda")
    assert verdict == "failed: test_cuda timed out after 80 s in A.Second (1 tests had finished)"


def test_skips_count_once_per_rank_with_the_first_reason(tmp_path):
    log = tmp_path / "log"
    rank = ("[ RUN      ] N.A\n[       OK ] N.A (1 ms)\n[ RUN      ] N.B\n"
            "/src/t.cpp:1: Skipped\nneeds two GPUs\n[  SKIPPED ] N.B (0 ms)\n[ RUN      ] N.C\n/src/t.cpp:2: Skipped\n"
            "needs NCCL\n[  SKIPPED ] N.C (0 ms)\n[==========] 3 tests from 1 test suite ran. (1 ms total)\n"
            "[  PASSED  ] 1 test.\n[  SKIPPED ] 2 tests, listed below:\n")
    log.write_text(rank + rank)
    verdict, _ = judge("gtest", log, 0, "--ranks", 2)
    assert verdict == "passed: 1 passed, 2 skipped (needs two GPUs) on each of 2 ranks"


def test_a_gtest_step_without_its_log_fails_saying_so(tmp_path):
    verdict, _ = judge("gtest", tmp_path / "missing-log.txt", 0, "--what", "test_cuda")
    assert verdict == f"failed: {tmp_path / 'missing-log.txt'}: no such file (the step wrote no log)"


def test_a_stopped_run_counts_skipped_tests_as_finished_and_reads_two_ranks_on_one_line(tmp_path):
    """Two ranks' `[ RUN ]` on one line of the log (mpirun): the first name ended at the second's
    bracket, which it took, and the second test was never read as started."""
    log = tmp_path / "log"
    log.write_text("[ RUN      ] A.Skip\n[  SKIPPED ] A.Skip (0 ms)\n[ RUN      ] A.One[ RUN      ] A.Two\n"
                   "[       OK ] A.One (3 ms)\n")
    verdict, _ = judge("gtest", log, 124, "--timed-out", 80)
    assert verdict == "failed: the tests timed out after 80 s in A.Two (2 tests had finished)"


def test_a_killed_run_is_named_by_its_killed_line(tmp_path):
    log = tmp_path / "log"
    log.write_text("[ RUN      ] A.First\nKilled\nrun_with_timeout: the command's output ends here\n")
    assert judge("gtest", log, 137)[0] == "failed: the tests exited 137: Killed"


def test_a_memcheck_run_without_its_summary_names_the_failed_test_first(tmp_path):
    """A run that crashed before compute-sanitizer's summary: its failed test says more than the
    missing summary."""
    log = tmp_path / "memcheck.log"
    log.write_text("========= COMPUTE-SANITIZER\n[ RUN      ] L.Linear/fp32\n/src/tests/test_cuda.cpp:100: Failure\n"
                   "Expected: ok\n[  FAILED  ] L.Linear/fp32 (1 ms)\n")
    assert judge("sanitizer", log, 1)[0] == "failed: 1 failed, first L.Linear/fp32: /src/tests/test_cuda.cpp:100: " \
                                            "Expected: ok"


def test_a_run_whose_tests_passed_but_that_exited_1_is_failed(tmp_path):
    """Every test passed, yet the binary exited 1 (LeakSanitizer at exit, an MPI rank's finalize):
    the step is failed with the last error line, not passed."""
    log = tmp_path / "log"
    log.write_text("[ RUN      ] A.One\n[       OK ] A.One (1 ms)\n[==========] 1 test from 1 test suite ran. (1 ms "
                   "total)\n[  PASSED  ] 1 test.\n==4242==ERROR: LeakSanitizer: detected memory leaks\n")
    verdict, _ = judge("gtest", log, 1, "--what", "test_cuda")
    assert verdict == "failed: test_cuda exited 1: ==4242==ERROR: LeakSanitizer: detected memory leaks"


def test_a_run_the_check_did_not_start_for_want_of_time_is_timed_out_after_0_s(tmp_path):
    """gpu_check.sh's bounded gives --timed-out 0 (and status 124) where the step's time was used
    up before the command started: that is a timeout, not an exit status."""
    log = tmp_path / "log"
    log.write_text("gpu_check.sh: not started: the step's time was used up\n")
    verdict, _ = judge("gtest", log, 124, "--timed-out", 0, "--what", "test_cuda")
    assert verdict == "failed: test_cuda timed out after 0 s (0 tests had finished)"


# ---- trainbench's CSVs ---------------------------------------------------------------------------

def with_dp_overhead(rows, share):
    """Schema 6 rows, each gpu:1 row's probe saying the data-parallel path added `share` of its
    step (a function of the row's benchmark name)."""
    out = []
    for r in rows:
        r = dict(r)
        if "/gpu:1/" in r["benchmark"] and r.get("status") == "ok" and r.get("step_time_s"):
            dp = float(r["step_time_s"]) * share(r["benchmark"])
            inputs = [f for f in r["prediction_inputs"].split(";") if not f.startswith("dp=")]
            r["prediction_inputs"] = ";".join(inputs + [f"dp={dp:.6g},{0.9 * dp:.6g},{1.1 * dp:.6g}"])
        out.append(r)
    return out


H100_DEFAULT = H100 / "default-20261127T060200Z.csv"


def test_the_default_set_puts_gpu1_on_both_clocks_beside_cpu():
    verdict, figures = judge("default", H100 / "default-20261124.csv")
    # The README's table of that run, re-derived on the wall clock by tbcsv.
    assert "| mlp/mnist | fp32 | 49,935 | 368,370 | 481,784 | 7.38x |" in figures
    assert "| resnet152/imagenet | bf16 | 12.07 | 2,245 | 2,257 | 186.01x |" in figures
    assert any(f.startswith("- skipped gpu:all fp32: gpu:all: this machine has 1 GPU") for f in figures)
    # Those rows predate the data-parallel probe: they prove nothing of its overhead.
    assert verdict.startswith("failed: no data-parallel overhead measured for 10 gpu:1 row(s) (no dp= in "
                              "prediction_inputs: ")
    assert any(f.startswith("| train/lstm/sine/gpu:1/fp32/bs:20 | 1.27 | not measured | - | ") for f in figures)


def test_each_gpu1_rows_data_parallel_overhead_is_a_share_of_its_step_at_most_5_percent(tmp_path):
    # The H100's check of 2026-11-27: the MLP's bf16 step 82% longer through the data-parallel path.
    verdict, figures = judge("default", H100_DEFAULT)
    assert verdict.startswith("failed: the data-parallel path adds more than 5% to 6 gpu:1 step(s): "
                              "train/mlp/mnist/gpu:1/fp32/bs:100 38.6%; train/mlp/mnist/gpu:1/bf16/bs:100 82.0%; ")
    assert "| train/mlp/mnist/gpu:1/bf16/bs:100 | 0.2918 | 0.2392 (0.2232 to 0.2552) | 82.0% | 43.5% (8, nvlink4) |" \
        in figures
    # Beside each, what it costs at scale: issue 52's 93% for ResNet-152 224 bf16 on 8 GPUs.
    assert "| train/resnet152/imagenet/gpu:1/bf16/bs:128 | 56.52 | 18.45 (18.31 to 18.59) | 32.6% | 75.2% (8, nvlink4) |" \
        in figures
    assert judge("default", H100_DEFAULT, "--dp-limit", 150)[0].startswith("passed: ")
    # The same rows with an overhead of 1% of each step pass.
    rows = with_dp_overhead(rows_of(H100_DEFAULT), lambda name: 0.01)
    verdict, figures = judge("default", write_rows(tmp_path / "default.csv", rows))
    assert verdict == "passed: 10 gpu:1 rows beside 5 cpu rows; the data-parallel path adds at most 5% to each"
    assert "| train/mlp/mnist/gpu:1/fp32/bs:100 | 0.2982 | 0.002982 (0.002684 to 0.003281) | 1.0% | 51.3% (8, nvlink4) |" \
        in figures
    # Without the run's predicted rows, the efficiency is not made up.
    alone = [r for r in rows if r.get("measurement") != "predicted"]
    _, figures = judge("default", write_rows(tmp_path / "alone.csv", alone))
    assert "| train/mlp/mnist/gpu:1/fp32/bs:100 | 0.2982 | 0.002982 (0.002684 to 0.003281) | 1.0% | - |" in figures


def test_clocks_mixed_up_or_a_failed_row_fail_the_default_set(tmp_path):
    rows = rows_of(H100 / "default-20261124.csv")
    mixed = [dict(r) for r in rows]
    for r in mixed:  # schema 4: wall_step_time_s is the wall clock, step_time_s the device's
        if r["benchmark"] == "train/mlp/mnist/gpu:1/fp32/bs:100":
            r["wall_step_time_s"] = str(float(r["step_time_s"]) / 2)
    verdict, _ = judge("default", write_rows(tmp_path / "mixed.csv", mixed))
    assert verdict.startswith("failed: train/mlp/mnist/gpu:1/fp32/bs:100: the wall clock's")
    assert verdict.endswith("the two clocks are mixed up")
    failed = [dict(r) for r in rows]
    for r in failed:
        if r["benchmark"] == "train/lenet5/cifar10/gpu:1/bf16/bs:100":
            r.update(status="failed", message="cudaErrorIllegalAddress: an illegal memory access was encountered")
    verdict, _ = judge("default", write_rows(tmp_path / "failed.csv", failed))
    assert verdict == "failed: train/lenet5/cifar10/gpu:1/bf16/bs:100: cudaErrorIllegalAddress: an illegal memory " \
                      "access was encountered"


def test_a_gpu1_row_without_the_device_clock_fails_the_default_set(tmp_path):
    """A schema 6 gpu:1 row whose device_samples_per_s is empty: its two clocks cannot be held
    against each other."""
    rows = with_dp_overhead(rows_of(H100_DEFAULT), lambda name: 0.01)
    for r in rows:
        if r["benchmark"] == "train/lenet5/cifar10/gpu:1/fp32/bs:100":
            r["device_samples_per_s"] = ""
    verdict, _ = judge("default", write_rows(tmp_path / "nodevice.csv", rows))
    assert verdict == "failed: train/lenet5/cifar10/gpu:1/fp32/bs:100: no device clock (device_samples_per_s is empty)"


def test_a_command_that_stopped_before_writing_rows_is_failed_with_its_error(tmp_path):
    log = tmp_path / "log"
    log.write_text("trainbench 0123 on host\ntrainbench: error: --devices: 'gpu:1/jobz:2': after the slash, jobs:K\n")
    verdict, _ = judge("jobs", tmp_path / "none.csv", "--status", 2, "--log", log)
    assert verdict == "failed: trainbench exited 2: trainbench: error: --devices: 'gpu:1/jobz:2': after the slash, jobs:K"
    rows = with_dp_overhead(rows_of(H100_DEFAULT), lambda name: 0.01)
    verdict, _ = judge("default", write_rows(tmp_path / "default.csv", rows), "--status", 0, "--timed-out", 150)
    assert verdict == "failed: trainbench timed out after 150 s"


def test_a_command_that_exited_non_zero_after_good_rows_is_failed_with_its_error(tmp_path):
    """Rows that pass do not explain a non-zero exit status: the step is failed with the log's
    error line."""
    log = tmp_path / "log"
    log.write_text("trainbench 0123 on host\nterminate called after throwing an instance of 'tb::CudaError'\n")
    assert judge("jobs", jobs_rows(tmp_path))[0].startswith("passed: ")
    verdict, _ = judge("jobs", jobs_rows(tmp_path), "--status", 134, "--log", log)
    assert verdict == "failed: trainbench exited 134: terminate called after throwing an instance of 'tb::CudaError'"
    verdict, _ = judge("timeline", H100 / "resnet224-timeline-20261124.csv", "--status", 1, "--log", log)
    assert verdict == "failed: trainbench exited 1: terminate called after throwing an instance of 'tb::CudaError'"


def test_a_machine_without_a_gpu_trains_on_the_cpu_and_says_why_not_the_gpu():
    verdict, figures = judge("machine", VM / "default-20261126.csv")
    assert verdict == "passed: no GPU; trainbench trains on the CPU"
    assert figures[1].startswith("- step loop: train/mlp/mnist/cpu/fp32/bs:100 ")
    assert figures[2].startswith("- trainbench's gpu:1 here: gpu:1: ")


def power_samples(path, instant, average, busy=95):
    lines = ["# timestamp,power.draw.instant,power.draw.average,utilization.gpu,clocks.sm"]
    lines += ["2026/11/27 00:00:00.000, 80.0, 75.0, 0, 345"]  # start-up: idle, left out
    lines += [f"2026/11/27 00:00:0{i}.100, {p}, {a}, {busy}, 1980" for i, (p, a) in enumerate(zip(instant, average))]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_machine_step_sets_nvml_instantaneous_power_beside_the_average(tmp_path):
    rows = [r for r in rows_of(H100 / "default-20261124.csv")
            if r["benchmark"] == "train/resnet152/cifar10/gpu:1/bf16/bs:128"]
    csv_path = write_rows(tmp_path / "machine.csv", rows)
    smi = power_samples(tmp_path / "power.csv", [600.0, 700.0, 650.0], [610.0, 620.0, 630.0])
    verdict, figures = judge("machine", csv_path, "--gpu", "--power", smi)
    assert verdict == "passed: NVIDIA H100 80GB HBM3; gpu_power_w instantaneous"
    assert figures[0].startswith("- GPU: NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs")
    assert "driver 580.159.04" in figures[0] and "cuDNN 9.19.0" in figures[0]
    assert ("- NVML through nvidia-smi during the step loop (every 100 ms, 3 samples with the GPU busy): "
            "instantaneous power median 650 W, max 700 W; averaged over 1 s, median 620 W") in figures
    # Where trainbench wrote no power although nvidia-smi reads it, its NVML sampling did not run.
    for r in rows:
        r["gpu_power_w"] = ""
    verdict, _ = judge("machine", write_rows(tmp_path / "nopower.csv", rows), "--gpu", "--power", smi)
    assert verdict.startswith("failed: trainbench's gpu_power_w is empty while nvidia-smi reads the board's power")


def test_the_machine_steps_rate_is_its_measured_row_not_its_predictions():
    # The H100's step loop of 2026-11-27: one gpu:1 row at 16,298 samples/s and its gpu:2/4/8
    # predictions; check.md said 36,441 on the wall clock, the median of all four rows.
    csv_path = H100 / "check-20261127T060400Z" / "machine.csv"
    measured = [r for r in rows_of(csv_path) if r["measurement"] == "measured"]
    assert len(measured) == 1 and len(rows_of(csv_path)) == 4
    verdict, figures = judge("machine", csv_path, "--gpu", "--power", H100 / "check-20261127T060400Z" / "power.csv")
    assert verdict.startswith("passed: NVIDIA H100 80GB HBM3"), verdict
    loop = next(f for f in figures if f.startswith("- step loop:"))
    assert f"{float(measured[0]['samples_per_s']):,.0f} samples/s on the wall clock" in loop, loop
    assert "16,298 samples/s on the wall clock, 16,363 on the device clock" in loop, loop


def test_a_gpu_trainbench_cannot_use_fails_the_machine_step_with_its_reason():
    verdict, _ = judge("machine", VM / "default-20261126.csv", "--gpu")
    assert verdict.startswith("failed: trainbench cannot use the GPU nvidia-smi lists: skipped: gpu:1: ")


def test_a_machine_step_without_a_measured_cpu_row_fails(tmp_path):
    """On a machine without a GPU, a CSV holding only the skipped gpu:1 and gpu:all rows."""
    rows = [r for r in rows_of(VM / "default-20261126.csv") if r["device"] != "cpu"]
    assert rows and all(r["status"] == "skipped" for r in rows)
    verdict, _ = judge("machine", write_rows(tmp_path / "nocpu.csv", rows))
    assert verdict == "failed: trainbench measured no cpu row"


VM_MLP_GPU1 = "train/mlp/mnist/gpu:1/fp32/bs:100"


def test_a_failed_gpu_row_fails_the_machine_step_without_a_gpu(tmp_path):
    """Without a GPU trainbench must skip its GPU rows saying why; a gpu:1 row that failed (a CUDA
    error) fails the step, and the gpu:1 line is that row's, not the gpu:all row's."""
    rows = rows_of(VM / "default-20261126.csv")
    for r in rows:
        if r["benchmark"] == VM_MLP_GPU1:
            r.update(status="failed", message="cudaErrorUnknown")
    verdict, figures = judge("machine", write_rows(tmp_path / "failed.csv", rows))
    assert verdict == f"failed: {VM_MLP_GPU1}: cudaErrorUnknown"
    assert figures[1].startswith("- step loop: train/mlp/mnist/cpu/fp32/bs:100 ")
    assert figures[2] == "- trainbench's gpu:1 here: failed: cudaErrorUnknown"


def test_the_machine_steps_gpu1_line_is_the_gpu1_rows_reason(tmp_path):
    """The gpu:all row first in the file: the line still gives gpu:1's reason; without any gpu:1
    row it says so, and gives the gpu:all row's."""
    rows = rows_of(VM / "default-20261126.csv")
    for r in rows:
        if r["device"] == "gpu:1":
            r["message"] = "skipped: gpu:1: the gpu:1 reason"
    rows.sort(key=lambda r: r["device"] != "gpu:all")
    verdict, figures = judge("machine", write_rows(tmp_path / "sorted.csv", rows))
    assert verdict == "passed: no GPU; trainbench trains on the CPU"
    assert figures[2] == "- trainbench's gpu:1 here: gpu:1: the gpu:1 reason"
    rows = [r for r in rows if r["device"] != "gpu:1"]
    verdict, figures = judge("machine", write_rows(tmp_path / "nogpu1.csv", rows))
    assert verdict == "passed: no GPU; trainbench trains on the CPU"
    assert figures[2].startswith("- trainbench's gpu:1 here: no gpu:1 row; its gpu:all row: gpu:all: no usable ")


def test_a_failed_cpu_repetition_fails_the_machine_step_without_a_gpu(tmp_path):
    """Beside measured cpu rows, one that failed fails the step (first_failed of the cpu rows)."""
    rows = rows_of(VM / "default-20261126.csv")
    lstm = next(r for r in rows if r["benchmark"] == "train/lstm/sine/cpu/fp32/bs:20")
    rows.append(dict(lstm, repetition="1", status="failed", message="std::bad_alloc"))
    verdict, _ = judge("machine", write_rows(tmp_path / "failed.csv", rows))
    assert verdict == "failed: train/lstm/sine/cpu/fp32/bs:20: std::bad_alloc"


def test_a_failed_gpu_repetition_fails_the_machine_step_beside_a_good_one(tmp_path):
    """The H100's step loop, a second repetition of its one row failed."""
    rows = [r for r in rows_of(H100 / "default-20261124.csv")
            if r["benchmark"] == "train/resnet152/cifar10/gpu:1/bf16/bs:128"]
    rows.append(dict(rows[0], repetition="1", status="failed",
                     message="cudaErrorIllegalAddress: an illegal memory access was encountered"))
    verdict, _ = judge("machine", write_rows(tmp_path / "machine.csv", rows), "--gpu")
    assert verdict == "failed: train/resnet152/cifar10/gpu:1/bf16/bs:128: cudaErrorIllegalAddress: an illegal " \
                      "memory access was encountered"


def jobs_rows(tmp_path, refused_message="skipped: gpu:1/jobs:1000: 1000 jobs of 0.05 GiB planned (bs 100, fp32) and "
              "about 1 GiB of CUDA context each need 1050.0 GiB, GPU 0 has 79.1 GiB free: at most 75 such jobs"):
    """gpu:1/jobs:2, gpu:1/threads:2 and gpu:1/jobs:1000 rows of the MLP, made from the VM's cpu row
    (no GPU has run them yet)."""
    base = next(r for r in rows_of(VM / "default-20261126.csv") if r["benchmark"] == "train/mlp/mnist/cpu/fp32/bs:100")
    out = []
    for dev, status, message, window in (("gpu:1/jobs:2", "ok", "", "1.52"), ("gpu:1/threads:2", "ok", "", ""),
                                         ("gpu:1/jobs:1000", "skipped", refused_message, "")):
        r = dict(base, device=dev, benchmark=f"train/mlp/mnist/{dev}/fp32/bs:100", status=status, message=message,
                 jobs_window_s=window, replicas=dev.rsplit(":", 1)[1])
        if status != "ok":
            r["samples_per_s"] = r["step_time_s"] = ""
        out.append(r)
    return write_rows(tmp_path / "jobs.csv", out)


def test_jobs_and_threads_run_in_one_window_and_the_memory_bound_refuses_too_many(tmp_path):
    verdict, figures = judge("jobs", jobs_rows(tmp_path))
    assert verdict == "passed: 1 jobs rows and 1 threads rows; the memory bound refused 1"
    assert any("over a common window of 1.52 s" in f for f in figures)
    assert any(f.endswith("at most 75 such jobs") for f in figures)
    verdict, _ = judge("jobs", jobs_rows(tmp_path, refused_message="skipped: something else"))
    assert verdict.startswith("failed: train/mlp/mnist/gpu:1/jobs:1000/fp32/bs:100: the memory bound did not refuse 1000")


def jobs_edited(tmp_path, changes):
    """jobs_rows' rows, the row of each device in `changes` updated by its dict (None: left out)."""
    rows = [dict(r, **changes.get(r["device"], {})) for r in rows_of(jobs_rows(tmp_path))
            if changes.get(r["device"], {}) is not None]
    return write_rows(tmp_path / "edited.csv", rows)


JOBS2 = "train/mlp/mnist/gpu:1/jobs:2/fp32/bs:100"


@pytest.mark.parametrize("window", ["", "0", "-1.5"])
def test_a_jobs_row_without_a_common_window_fails(tmp_path, window):
    verdict, _ = judge("jobs", jobs_edited(tmp_path, {"gpu:1/jobs:2": {"jobs_window_s": window}}))
    assert verdict == f"failed: {JOBS2}: no common window (jobs_window_s is empty)"


def test_jobs_or_threads_rows_missing_fail_the_jobs_step(tmp_path):
    verdict, _ = judge("jobs", jobs_edited(tmp_path, {"gpu:1/threads:2": None}))
    assert verdict == "failed: expected measured gpu:1/jobs:K and gpu:1/threads:K rows, found {'jobs': 1, 'threads': 0}"
    verdict, _ = judge("jobs", jobs_edited(tmp_path, {"gpu:1/jobs:2": None}))
    assert verdict == "failed: expected measured gpu:1/jobs:K and gpu:1/threads:K rows, found {'jobs': 0, 'threads': 1}"


def test_a_jobs_step_that_never_tried_the_memory_bound_fails(tmp_path):
    verdict, _ = judge("jobs", jobs_edited(tmp_path, {"gpu:1/jobs:1000": None}))
    assert verdict == "failed: no row of more than 16 jobs: the memory bound was not tried"
    # A bound of 1000 makes the jobs:1000 row one that must run: it did not measure.
    verdict, _ = judge("jobs", jobs_rows(tmp_path), "--max-runnable", 1000)
    assert verdict.startswith("failed: train/mlp/mnist/gpu:1/jobs:1000/fp32/bs:100: skipped: gpu:1/jobs:1000: ")


def test_a_jobs_or_threads_row_that_measured_nothing_fails_with_its_reason(tmp_path):
    """A skipped row within the bound (a failed one is first_failed's)."""
    skip = {"status": "skipped", "message": "skipped: no usable GPU", "samples_per_s": "", "step_time_s": ""}
    verdict, _ = judge("jobs", jobs_edited(tmp_path, {"gpu:1/jobs:2": skip}))
    assert verdict == f"failed: {JOBS2}: skipped: no usable GPU"
    verdict, _ = judge("jobs", jobs_edited(tmp_path, {"gpu:1/threads:2": skip}))
    assert verdict == "failed: train/mlp/mnist/gpu:1/threads:2/fp32/bs:100: skipped: no usable GPU"


def test_a_failed_jobs_repetition_fails_the_jobs_step_beside_a_good_one(tmp_path):
    rows = rows_of(jobs_rows(tmp_path))
    threads = next(r for r in rows if r["device"] == "gpu:1/threads:2")
    rows.append(dict(threads, repetition="1", status="failed",
                     message="cudaErrorLaunchFailure: unspecified launch failure"))
    verdict, _ = judge("jobs", write_rows(tmp_path / "failed.csv", rows))
    assert verdict == "failed: train/mlp/mnist/gpu:1/threads:2/fp32/bs:100: cudaErrorLaunchFailure: unspecified " \
                      "launch failure"


def test_emulated_nodes_against_their_prediction_and_their_mark():
    verdict, figures = judge("spanning", EMULATED, "--device", "mpi:2", "--emulated", "--expect", 4)
    assert verdict == "passed: 4 mpi:2 rows measured, 3 inside their predicted band"
    assert ("| mlp/mnist | fp32 | 11,487 | 1,474 (1,447 to 1,596; communication) | 0.05859 | 1,486 | yes |"
            in figures)
    assert any(f.startswith("| lstm/sine | fp32 |") and f.endswith("| no |") for f in figures)
    verdict, _ = judge("spanning", EMULATED, "--device", "mpi:2", "--emulated", "--expect", 6)
    assert verdict == "failed: 4 mpi:2 rows measured, 6 expected"


def test_rows_not_marked_as_emulated_nodes_fail_the_emulated_step(tmp_path):
    rows = rows_of(EMULATED)
    for r in rows:
        r["emulated_nodes"] = ""
    verdict, _ = judge("spanning", write_rows(tmp_path / "plain.csv", rows), "--device", "mpi:2", "--emulated")
    assert verdict == "failed: train/mlp/mnist/mpi:2/fp32/bs:100/emulated_nodes: not marked as emulated nodes " \
                      "(emulated_nodes is empty)"


def test_a_failed_row_fails_the_spanning_step_with_its_message(tmp_path):
    rows = rows_of(EMULATED)
    for r in rows:
        if r["benchmark"] == "train/lstm/sine/mpi:2/fp32/bs:20/emulated_nodes":
            r.update(status="failed", message="MPI_Allreduce: rank 1 lost")
    verdict, _ = judge("spanning", write_rows(tmp_path / "failed.csv", rows), "--device", "mpi:2")
    assert verdict == "failed: train/lstm/sine/mpi:2/fp32/bs:20/emulated_nodes: MPI_Allreduce: rank 1 lost"


def test_the_timeline_cost_is_read_from_rows_with_and_without_it():
    verdict, figures = judge("timeline", H100 / "resnet224-timeline-20261124.csv")
    assert verdict == "passed: 2 workloads with and without the timeline, each at most 3% apart"
    assert any(f.startswith("- train/resnet152/imagenet/gpu:1/bf16/bs:128: 2,246 samples/s with the timeline, "
                            "2,253 without") for f in figures)


def test_a_timeline_that_costs_more_than_3_percent_of_a_step_fails(tmp_path):
    rows = rows_of(H100 / "resnet224-timeline-20261124.csv")
    for r in rows:  # the H200's MLP at 7049d87: 313,618 samples/s with the timeline, 408,523 without
        if "timeline:off" not in r.get("variant", "") and "/bf16/" in r["benchmark"] and r.get("samples_per_s"):
            r["samples_per_s"] = str(float(r["samples_per_s"]) * 0.77)
    verdict, figures = judge("timeline", write_rows(tmp_path / "costly.csv", rows))
    assert verdict.startswith("failed: the timeline costs more than 3% of the step: "
                              "train/resnet152/imagenet/gpu:1/bf16/bs:128 23")
    assert judge("timeline", write_rows(tmp_path / "costly.csv", rows), "--limit", 30)[0].startswith("passed: ")


def test_the_timeline_cost_pools_every_window_of_every_repetition(tmp_path):
    """Where rows keep their windows (schema 7), the cost is the medians' of every window on each
    side, not of a few repetitions; the figure is given to a tenth, as the 3% bar is met or not."""
    rows = rows_of(H100 / "resnet224-timeline-20261124.csv")
    for r in rows:
        if r.get("samples_per_s") and r.get("run_type") == "iteration":
            rate = float(r["samples_per_s"])
            on = "timeline:off" not in r.get("variant", "")
            r["window_samples_per_s"] = ";".join(str(rate * (0.95 if on else 1) * f) for f in (0.99, 1, 1.01))
    verdict, figures = judge("timeline", write_rows(tmp_path / "windows.csv", rows))
    assert verdict.startswith("failed: the timeline costs more than 3% of the step: "), verdict
    assert any("medians of 9 and 9 windows of 3 and 3 repetitions" in f and "costs 5.1% of the step" in f
               for f in figures), figures


def test_a_timeline_step_without_both_sides_of_a_benchmark_fails(tmp_path):
    rows = rows_of(H100 / "resnet224-timeline-20261124.csv")
    on = [r for r in rows if "timeline:off" not in r.get("variant", "")]
    verdict, _ = judge("timeline", write_rows(tmp_path / "on.csv", on))
    assert verdict == "failed: no benchmark has both a --timeline=on and a --timeline=off row"
    for r in rows:  # the off side skipped: its reason is given
        if "timeline:off" in r.get("variant", ""):
            r.update(status="skipped", message="skipped: gpu:1: no usable GPU", samples_per_s="")
    verdict, _ = judge("timeline", write_rows(tmp_path / "skipped.csv", rows))
    assert verdict == "failed: no benchmark has both a --timeline=on and a --timeline=off row: " \
                      "skipped: gpu:1: no usable GPU"


def test_a_failed_timeline_repetition_fails_the_timeline_step_beside_good_ones(tmp_path):
    rows = rows_of(H100 / "resnet224-timeline-20261124.csv")
    on = next(r for r in rows if "timeline:off" not in r.get("variant", "") and r.get("samples_per_s")
              and r.get("run_type") == "iteration")
    rows.append(dict(on, repetition="9", status="failed", message="cudaErrorIllegalAddress", samples_per_s=""))
    verdict, _ = judge("timeline", write_rows(tmp_path / "failed.csv", rows))
    assert verdict == f"failed: {on['benchmark']}: cudaErrorIllegalAddress"


def test_the_peer_sets_trainbench_beside_pytorch_on_both_clocks():
    tb = H100 / "trainbench-vs-pytorch-20261123T050007Z-trainbench.csv"
    pt = H100 / "trainbench-vs-pytorch-20261123T050007Z-pytorch.csv"
    verdict, figures = judge("peer", tb, pt)
    assert verdict == "passed: 10 benchmarks measured on both sides"
    assert "| train/resnet152/imagenet/gpu:1/fp32/bs:128 | 394.7 | 379.4 | 1.04x | 1.04x | - |" in figures


def test_a_peer_without_a_benchmark_measured_on_both_sides_fails(tmp_path):
    tb = H100 / "trainbench-vs-pytorch-20261123T050007Z-trainbench.csv"
    pt = rows_of(H100 / "trainbench-vs-pytorch-20261123T050007Z-pytorch.csv")
    for r in pt:
        r.update(status="skipped", message="skipped: torch.cuda.is_available() is False", samples_per_s="")
    verdict, figures = judge("peer", tb, write_rows(tmp_path / "pytorch.csv", pt))
    assert verdict == "failed: no benchmark has rows of both trainbench and PyTorch"
    assert not any(f.startswith("| train/") for f in figures)


@pytest.mark.parametrize("side", ["trainbench", "pytorch"])
def test_a_failed_row_on_either_side_fails_the_peer_beside_measured_pairs(tmp_path, side):
    paths = {s: H100 / f"trainbench-vs-pytorch-20261123T050007Z-{s}.csv" for s in ("trainbench", "pytorch")}
    rows = rows_of(paths[side])
    good = next(r for r in rows if r.get("status") == "ok" and r.get("samples_per_s")
                and r.get("run_type", "iteration") == "iteration")
    rows.append(dict(good, repetition="9", status="failed", message="CUDA out of memory", samples_per_s=""))
    paths[side] = write_rows(tmp_path / f"{side}.csv", rows)
    verdict, figures = judge("peer", paths["trainbench"], paths["pytorch"])
    # The reader names the row as tbcsv does (these schema 2 rows gain /data_on_device).
    assert verdict.startswith(f"failed: {good['benchmark']}") and verdict.endswith(": CUDA out of memory"), verdict
    assert any(f.startswith("| train/") for f in figures)


@pytest.mark.parametrize("command", ["machine", "default", "jobs", "timeline"])
def test_an_unreadable_csv_is_a_failed_step_not_a_traceback(tmp_path, command):
    bad = tmp_path / "bad.csv"
    bad.write_text("not,a,trainbench,csv\n1,2,3,4\n")
    verdict, _ = judge(command, bad)
    assert verdict == f"failed: trainbench wrote no rows to read ({bad}: not a trainbench CSV (no schema_version column))"


def one_percent_default(tmp_path, edit=None):
    """The H100's default set of 2026-11-27 with an overhead of 1% of each gpu:1 step, its rows
    passed through `edit` (rows -> rows) before they are written."""
    rows = with_dp_overhead(rows_of(H100_DEFAULT), lambda name: 0.01)
    return write_rows(tmp_path / "default.csv", edit(rows) if edit else rows)


MLP_GPU1 = "train/mlp/mnist/gpu:1/fp32/bs:100"


def test_the_cpu_column_is_the_median_of_the_measured_all_core_rows(tmp_path):
    """Beside the `cpu` row: a second repetition like it and a third far off (the median, not the
    mean), a skipped repetition and a cpu:1 row each as far off (either would move the median)
    leave the cpu column as it was."""
    line = next(f for f in judge("default", one_percent_default(tmp_path))[1] if f.startswith("| mlp/mnist | fp32 |"))
    cpu = next(r for r in rows_of(H100_DEFAULT) if r["device"] == "cpu" and r["benchmark"].startswith("train/mlp/"))
    rate = float(cpu["samples_per_s"])

    def more_cpu_rows(rows):
        return rows + [dict(cpu, repetition="1"), dict(cpu, repetition="2", samples_per_s=str(100 * rate)),
                       dict(cpu, repetition="3", status="skipped", message="skipped: load",
                            samples_per_s=str(100 * rate)),
                       dict(cpu, device="cpu:1", device_kind="cpu:T", benchmark="train/mlp/mnist/cpu:1/fp32/bs:100",
                            samples_per_s=str(100 * rate))]
    verdict, figures = judge("default", one_percent_default(tmp_path, more_cpu_rows))
    assert verdict.startswith("passed: 10 gpu:1 rows beside 5 cpu rows"), verdict
    assert line in figures


def test_the_default_sets_table_holds_the_gpu1_rows_only(tmp_path):
    """A measured gpu:2 row (the default set's gpu:all on a machine of two GPUs) is neither in the
    table nor held to the data-parallel bar."""
    def with_gpu2(rows):
        gpu1 = next(r for r in rows if r["benchmark"] == MLP_GPU1)
        return rows + [dict(gpu1, device="gpu:2", device_kind="gpu:N over NCCL", prediction_inputs="",
                            benchmark="train/mlp/mnist/gpu:2/fp32/bs:100")]
    verdict, figures = judge("default", one_percent_default(tmp_path, with_gpu2))
    assert verdict == "passed: 10 gpu:1 rows beside 5 cpu rows; the data-parallel path adds at most 5% to each"
    assert not any("gpu:2/" in f for f in figures)


@pytest.mark.parametrize("ratio, passes", [(1.01, True), (1.05, False)])
def test_the_wall_clock_may_be_above_the_device_clock_by_2_percent_only(tmp_path, ratio, passes):
    def faster_wall(rows):
        for r in rows:
            if r["benchmark"] == MLP_GPU1:
                r["device_samples_per_s"] = str(float(r["samples_per_s"]) / ratio)
        return rows
    verdict, _ = judge("default", one_percent_default(tmp_path, faster_wall))
    assert verdict.startswith("passed: ") if passes else verdict.startswith(f"failed: {MLP_GPU1}: the wall clock's")


def test_a_data_parallel_overhead_exactly_at_the_bar_passes(tmp_path):
    import gpu_check
    import tbcsv
    rows = with_dp_overhead(rows_of(H100_DEFAULT), lambda name: 0.05 if name == MLP_GPU1 else 0.01)
    path = write_rows(tmp_path / "default.csv", rows)
    rows = [r for r in tbcsv.read_table(str(path)).rows if r["benchmark"] == MLP_GPU1 and tbcsv.is_iteration(r)]
    share = 100 * gpu_check.prediction_input(rows[0], "dp")[0] / gpu_check.median(rows, "step_time_s")
    assert judge("default", path, "--dp-limit", repr(share))[0].startswith("passed: ")
    assert judge("default", path, "--dp-limit", repr(share * 0.999))[0].startswith(
        "failed: the data-parallel path adds more than")


def test_the_data_parallel_figure_is_any_repetitions_and_a_row_over_the_bar_is_named_first(tmp_path):
    """A first repetition without dp= (its probe did not run) beside one with it is measured; where
    rows are over the bar and others lack the figure, the verdict names those over it."""
    def probe_in_second_repetition(rows):
        gpu1 = next(r for r in rows if r["benchmark"] == MLP_GPU1)
        first = dict(gpu1, prediction_inputs=";".join(f for f in gpu1["prediction_inputs"].split(";")
                                                      if not f.startswith("dp=")))
        return [first] + [dict(r, repetition="1") if r is gpu1 else r for r in rows]
    assert judge("default", one_percent_default(tmp_path, probe_in_second_repetition))[0].startswith("passed: ")
    rows = rows_of(H100_DEFAULT)
    for r in rows:
        if r["benchmark"] == "train/lstm/sine/gpu:1/fp32/bs:20":
            r["prediction_inputs"] = ";".join(f for f in r["prediction_inputs"].split(";") if not f.startswith("dp="))
    verdict, _ = judge("default", write_rows(tmp_path / "both.csv", rows))
    assert verdict.startswith("failed: the data-parallel path adds more than 5% to "), verdict


def test_a_refused_jobs_row_beside_a_measured_repetition_fails(tmp_path):
    """The memory bound must refuse every repetition of too many jobs: one that measured fails the
    step though the first says `at most`."""
    rows = rows_of(jobs_rows(tmp_path))
    refused = next(r for r in rows if r["device"] == "gpu:1/jobs:1000")
    measured = next(r for r in rows if r["device"] == "gpu:1/jobs:2")
    rows.append(dict(measured, device=refused["device"], benchmark=refused["benchmark"], repetition="1"))
    verdict, _ = judge("jobs", write_rows(tmp_path / "both.csv", rows))
    assert verdict.startswith("failed: train/mlp/mnist/gpu:1/jobs:1000/fp32/bs:100: the memory bound did not refuse "
                              "1000 jobs"), verdict


def test_a_measured_rate_on_its_bands_edge_is_inside_it(tmp_path):
    rows = rows_of(EMULATED)
    measured = {r["benchmark"].split("/")[1]: r["samples_per_s"] for r in rows
                if r["measurement"] == "measured" and "/mpi:2/" in r["benchmark"]}
    for r in rows:
        if r["measurement"] == "predicted" and r["benchmark"].startswith("train/mlp/"):
            r["samples_per_s_low"] = measured["mlp"]
        if r["measurement"] == "predicted" and r["benchmark"].startswith("train/lenet5/"):
            r["samples_per_s_high"] = measured["lenet5"]
    verdict, _ = judge("spanning", write_rows(tmp_path / "edges.csv", rows), "--device", "mpi:2", "--expect", 4)
    assert verdict == "passed: 4 mpi:2 rows measured, 3 inside their predicted band"


@pytest.mark.parametrize("column, value", [("precision", "bf16"), ("batch", "200")])
def test_a_measured_row_is_held_against_the_prediction_of_its_own_precision_and_batch(tmp_path, column, value):
    rows = rows_of(EMULATED)
    mlp = next(r for r in rows if r["measurement"] == "predicted" and r["benchmark"].startswith("train/mlp/"))
    name = mlp["benchmark"].replace("/fp32/", "/bf16/") if column == "precision" else \
        mlp["benchmark"].replace("/bs:100", "/bs:200")
    other = dict(mlp, benchmark=name, samples_per_s="1", samples_per_s_low="0.5", samples_per_s_high="2",
                 **{column: value})
    verdict, figures = judge("spanning", write_rows(tmp_path / "other.csv", [other] + rows), "--device", "mpi:2")
    assert "| mlp/mnist | fp32 | 11,487 | 1,474 (1,447 to 1,596; communication) | 0.05859 | 1,486 | yes |" in figures
    assert verdict == "passed: 4 mpi:2 rows measured, 3 inside their predicted band"


def test_a_timeline_cost_exactly_at_the_bar_passes_and_one_not_measured_fails(tmp_path):
    import gpu_check
    import tbcsv
    path = H100 / "resnet224-timeline-20261124.csv"
    rows = [r for r in tbcsv.read_table(str(path)).rows if tbcsv.is_iteration(r) and tbcsv.is_ok(r)
            and not tbcsv.is_predicted(r)]
    sides = {}
    for r in rows:
        sides.setdefault(gpu_check.configuration(r), {}).setdefault(gpu_check.timeline_off(r), []).append(r)
    costs = [100 * (1 - gpu_check.median_of(gpu_check.window_rates(s[False]))
                    / gpu_check.median_of(gpu_check.window_rates(s[True]))) for s in sides.values()]
    assert len(costs) == 2 and max(costs) > 0
    assert judge("timeline", path, "--limit", repr(max(costs)))[0].startswith("passed: 2 workloads")
    assert judge("timeline", path, "--limit", repr(max(costs) * 0.999))[0].startswith("failed: the timeline costs")
    # An ok row without a rate: its cost cannot be read, and is not taken for a pass.
    blank = rows_of(path)
    for r in blank:
        if "timeline:off" not in r.get("variant", "") and r["measurement"] != "predicted":
            r.update(samples_per_s="", step_time_s="", wall_step_time_s="", device_samples_per_s="")
    verdict, _ = judge("timeline", write_rows(tmp_path / "blank.csv", blank))
    assert verdict.startswith("failed: the timeline costs more than 3% of the step: "), verdict
    assert verdict.endswith(" -%"), verdict


def test_a_timeline_off_row_of_another_variant_is_not_the_partner(tmp_path):
    """Off rows that differ in another variant item (cuda_graph) measure something else: they are
    not pooled with the plain off rows."""
    rows = rows_of(H100 / "resnet224-timeline-20261124.csv")
    other = [dict(r, variant="timeline:off/cuda_graph", benchmark=r["benchmark"] + "/cuda_graph", samples_per_s="1e6")
             for r in rows if "timeline:off" in r.get("variant", "") and r.get("samples_per_s")
             and r["measurement"] != "predicted"]
    assert other
    verdict, _ = judge("timeline", write_rows(tmp_path / "graphs.csv", rows + other))
    assert verdict == "passed: 2 workloads with and without the timeline, each at most 3% apart"


def test_a_peer_given_an_odd_number_of_files_fails_asking_for_pairs():
    tb = H100 / "trainbench-vs-pytorch-20261123T050007Z-trainbench.csv"
    assert judge("peer", tb)[0] == "failed: peer: give TRAINBENCH.csv PYTORCH.csv pairs"


def test_a_timed_out_step_with_a_failed_row_says_both_and_an_empty_timeout_is_none(tmp_path):
    rows = rows_of(H100 / "default-20261124.csv")
    for r in rows:
        if r["benchmark"] == "train/lenet5/cifar10/gpu:1/bf16/bs:100":
            r.update(status="failed", message="cudaErrorIllegalAddress")
    verdict, _ = judge("default", write_rows(tmp_path / "failed.csv", rows), "--timed-out", 150)
    assert verdict == "failed: trainbench timed out after 150 s; train/lenet5/cifar10/gpu:1/bf16/bs:100: " \
                      "cudaErrorIllegalAddress"
    # gpu_check.sh passes --timed-out= for a command that was not stopped.
    assert judge("default", one_percent_default(tmp_path), "--timed-out=")[0].startswith("passed: ")


def test_rows_without_a_message_are_named_so(tmp_path):
    silent = {"status": "skipped", "message": "", "samples_per_s": "", "step_time_s": ""}
    verdict, _ = judge("jobs", jobs_edited(tmp_path, {"gpu:1/jobs:2": silent}))
    assert verdict == f"failed: {JOBS2}: skipped: no message"
    verdict, _ = judge("jobs", jobs_edited(tmp_path, {"gpu:1/jobs:2": dict(silent, status="failed")}))
    assert verdict == f"failed: {JOBS2}: failed, no message"


def test_the_jobs_step_reads_its_kinds_alone_and_gives_the_bounds_words(tmp_path):
    """A plain gpu:1 row beside the jobs rows is not one of them; a refused row's figure is its
    message without `skipped: `."""
    rows = rows_of(jobs_rows(tmp_path))
    jobs2 = next(r for r in rows if r["device"] == "gpu:1/jobs:2")
    plain = dict(jobs2, device="gpu:1", benchmark="train/mlp/mnist/gpu:1/fp32/bs:100", replicas="1")
    verdict, figures = judge("jobs", write_rows(tmp_path / "plain.csv", rows + [plain]))
    assert verdict == "passed: 1 jobs rows and 1 threads rows; the memory bound refused 1"
    assert "- train/mlp/mnist/gpu:1/jobs:1000/fp32/bs:100: gpu:1/jobs:1000: 1000 jobs of 0.05 GiB planned (bs 100, " \
           "fp32) and about 1 GiB of CUDA context each need 1050.0 GiB, GPU 0 has 79.1 GiB free: at most 75 such " \
           "jobs" in figures


def test_the_default_set_names_workloads_without_a_cpu_row_and_a_gpu1_rows_reason(tmp_path):
    def no_lstm_cpu(rows):
        return [r for r in rows if not (r["device"] == "cpu" and r["benchmark"].startswith("train/lstm/"))]
    verdict, _ = judge("default", one_percent_default(tmp_path, no_lstm_cpu))
    assert verdict == "passed: 10 gpu:1 rows beside 4 cpu rows (no cpu row for lstm/sine); the " \
                      "data-parallel path adds at most 5% to each"
    # Without a GPU: the gpu:1 row's reason, not the measured cpu row's.
    verdict, _ = judge("default", VM / "default-20261126.csv")
    assert verdict.startswith("failed: trainbench measured no gpu:1 row: skipped: gpu:1: "), verdict


def test_a_spanning_step_short_of_rows_gives_a_reason_and_every_row_carries_the_mark(tmp_path):
    rows = rows_of(EMULATED)
    lstm = "train/lstm/sine/mpi:2/fp32/bs:20/emulated_nodes"
    for r in rows:
        if r["benchmark"] == lstm:
            r.update(status="skipped", message="skipped: mpi:2: a rank lost its peer", samples_per_s="")
    path = write_rows(tmp_path / "short.csv", rows)
    verdict, _ = judge("spanning", path, "--device", "mpi:2", "--emulated", "--expect", 4)
    assert verdict == "failed: 3 mpi:2 rows measured, 4 expected: skipped: mpi:2: a rank lost its peer"
    for r in rows:
        if r["benchmark"] == lstm:
            r["emulated_nodes"] = ""
    verdict, _ = judge("spanning", write_rows(tmp_path / "unmarked.csv", rows), "--device", "mpi:2", "--emulated")
    assert verdict == f"failed: {lstm}: not marked as emulated nodes (emulated_nodes is empty)"


def test_a_prediction_that_did_not_measure_is_no_prediction(tmp_path):
    rows = rows_of(EMULATED)
    for r in rows:
        if r["measurement"] == "predicted" and r["benchmark"].startswith("train/mlp/"):
            r.update(status="skipped", message="skipped: no link measured")
    verdict, figures = judge("spanning", write_rows(tmp_path / "unpredicted.csv", rows), "--device", "mpi:2")
    assert verdict == "passed: 4 mpi:2 rows measured, 2 inside their predicted band"
    assert "| mlp/mnist | fp32 | - | no prediction | - | 1,486 | - |" in figures


def test_a_stopped_command_without_rows_is_timed_out_and_a_failed_rows_reason_beats_the_exit_status(tmp_path):
    log = tmp_path / "log"
    log.write_text("trainbench 0123 on host\nKilled\n")
    verdict, _ = judge("jobs", tmp_path / "none.csv", "--status", 124, "--timed-out", 60, "--log", log)
    assert verdict == f"failed: trainbench timed out after 60 s; trainbench wrote no rows to read " \
                      f"({tmp_path / 'none.csv'}: no such file)"
    rows = rows_of(H100 / "default-20261124.csv")
    for r in rows:
        if r["benchmark"] == "train/lenet5/cifar10/gpu:1/bf16/bs:100":
            r.update(status="failed", message="cudaErrorIllegalAddress")
    verdict, _ = judge("default", write_rows(tmp_path / "failed.csv", rows), "--status", 1, "--log", log)
    assert verdict == "failed: train/lenet5/cifar10/gpu:1/bf16/bs:100: cudaErrorIllegalAddress"


def test_a_gpu_without_power_readings_anywhere_passes_saying_so(tmp_path):
    rows = [dict(r, gpu_power_w="", energy_j_per_sample="") for r in rows_of(H100 / "default-20261124.csv")
            if r["benchmark"] == "train/resnet152/cifar10/gpu:1/bf16/bs:128"]
    verdict, _ = judge("machine", write_rows(tmp_path / "machine.csv", rows), "--gpu")
    assert verdict == "passed: NVML gives no power reading here (nvidia-smi neither)"


# ---- step 5c: the line that names the killed rank -------------------------------------------

KILLED_LOG = H100 / "check-20261127T060400Z" / "killed-log.txt"


def killed(log, rank):
    r = subprocess.run([sys.executable, str(READER), "killed", str(log), str(rank)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_killed_rank_is_found_in_a_log_that_holds_nul_bytes():
    # The H100's log of step 5c (2026-11-27): mpirun's and PMIx's output held NUL bytes, grep took
    # the file for binary, and the step failed although mpirun had named rank 1 and signal 9.
    assert b"\0" in KILLED_LOG.read_bytes()
    assert killed(KILLED_LOG, 1) == ("orterun noticed that process rank 1 with PID 9699 on node tb-emulated-node-1 "
                                     "exited on signal 9 (Killed).")


def test_no_line_names_a_rank_that_was_not_killed(tmp_path):
    assert killed(KILLED_LOG, 0) == ""
    log = tmp_path / "log.txt"
    log.write_text("rank 1 finished\nprocess rank 2 exited on signal 9 (Killed).\n")
    assert killed(log, 1) == ""
    assert killed(log, 2) == "process rank 2 exited on signal 9 (Killed)."
    assert killed(tmp_path / "missing.txt", 1) == ""


def test_the_killed_line_is_the_first_naming_that_rank_exactly_without_its_nul_bytes(tmp_path):
    log = tmp_path / "log.txt"
    log.write_bytes(b"process rank 10 with PID 7 on node n1 exited on signal 9 (Killed).\n"
                    b"process rank 1 with PID 9\0\0 on node n1 exited on signal 9 (Killed).\n"
                    b"process rank 1 with PID 9 on node n2 exited on signal 9 (Killed), again.\n")
    assert killed(log, 1) == "process rank 1 with PID 9 on node n1 exited on signal 9 (Killed)."
    assert killed(log, 10) == "process rank 10 with PID 7 on node n1 exited on signal 9 (Killed)."


# ---- the reader's own rules ------------------------------------------------------------------

def test_a_verdict_is_one_line_of_at_most_400_characters():
    import gpu_check
    assert gpu_check.one_line("a\n  b") == "a b"
    assert gpu_check.one_line("x" * 400) == "x" * 400
    assert gpu_check.one_line("x" * 401) == "x" * 397 + "..."


@pytest.mark.parametrize("value, shown", [(None, "-"), (0.2918, "0.2918"), (12.07, "12.07"), (999.96, "1,000"),
                                          (1234.4, "1,234"), (9999.7, "10,000"), (16298.4, "16,298")])
def test_a_figure_has_four_significant_digits_and_separators_never_an_exponent(value, shown):
    import gpu_check
    assert gpu_check.fmt(value) == shown


def test_power_samples_at_half_utilisation_are_the_busy_ones(tmp_path):
    rows = [r for r in rows_of(H100 / "default-20261124.csv")
            if r["benchmark"] == "train/resnet152/cifar10/gpu:1/bf16/bs:128"]
    smi = power_samples(tmp_path / "power.csv", [600.0, 700.0, 650.0], [610.0, 620.0, 630.0], busy=50)
    _, figures = judge("machine", write_rows(tmp_path / "machine.csv", rows), "--gpu", "--power", smi)
    assert any(f.startswith("- NVML through nvidia-smi during the step loop (every 100 ms, 3 samples with the GPU "
                            "busy): instantaneous power median 650 W") for f in figures), figures


def test_without_a_gpu_the_gpu1_line_gives_a_repetition_that_did_not_measure(tmp_path):
    """A gpu:1 repetition that measured, first in the file, beside one skipped: the line gives the
    skipped one's reason."""
    rows = rows_of(VM / "default-20261126.csv")
    gpu1 = next(r for r in rows if r["benchmark"] == VM_MLP_GPU1)
    cpu = next(r for r in rows if r["benchmark"] == "train/mlp/mnist/cpu/fp32/bs:100")
    measured = dict(cpu, device=gpu1["device"], benchmark=VM_MLP_GPU1, repetition="1")
    _, figures = judge("machine", write_rows(tmp_path / "machine.csv", [measured] + rows))
    assert figures[2].startswith("- trainbench's gpu:1 here: gpu:1: "), figures[2]


# ---- step 5c: a two-rank row that ended before the kill ------------------------------------------

def ended(path, device):
    r = subprocess.run([sys.executable, str(READER), "ended", str(path), device], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_measured_ok_row_of_the_device_is_named_and_nothing_else_counts(tmp_path):
    # The first measured row of the device that ended ok; its predicted row, written before it, is
    # no run of the two ranks.
    assert ended(EMULATED, "mpi:2") == "train/mlp/mnist/mpi:2/fp32/bs:100/emulated_nodes"
    rows = rows_of(EMULATED)
    predicted = [r for r in rows if r["measurement"] == "predicted" or r["device"] == "cpu:1"]
    assert ended(write_rows(tmp_path / "predicted.csv", predicted), "mpi:2") == ""
    # A row the kill failed is one the kill came in.
    failed = [dict(r, status="failed") if r["device"] == "mpi:2" else r for r in rows]
    assert ended(write_rows(tmp_path / "failed.csv", failed), "mpi:2") == ""
    assert ended(EMULATED, "gpu:2") == ""
    assert ended(tmp_path / "missing.csv", "mpi:2") == ""


def test_real_gpu2_rows_need_no_emulated_mark(tmp_path):
    """Step 8 reads real gpu:2 rows without --emulated: rows not marked as emulated nodes pass
    there, where step 5a's --emulated fails them."""
    rows = [dict(r, emulated_nodes="") for r in rows_of(EMULATED)]
    path = write_rows(tmp_path / "plain.csv", rows)
    assert judge("spanning", path, "--device", "mpi:2", "--expect", 4)[0] == \
        "passed: 4 mpi:2 rows measured, 3 inside their predicted band"
    assert judge("spanning", path, "--device", "mpi:2", "--emulated")[0].startswith("failed: ")


def test_a_csv_step_not_started_for_want_of_time_is_timed_out_after_0_s(tmp_path):
    """gpu_check.sh gives --timed-out 0 with status 124 where the step's time was used up before
    its command started: the step is timed out, with the missing CSV as its cause."""
    log = tmp_path / "log"
    log.write_text("gpu_check.sh: not started: the step's time was used up\n")
    verdict, _ = judge("timeline", tmp_path / "none.csv", "--status", 124, "--timed-out", 0, "--log", log)
    assert verdict == f"failed: trainbench timed out after 0 s; trainbench wrote no rows to read " \
                      f"({tmp_path / 'none.csv'}: no such file)"

"""scripts/gpu_check.sh, the one command that checks a GPU machine, in the form it takes on a
machine without a GPU (issue 42): the machine step runs and says there is no GPU, every GPU step
is skipped saying why, and it exits 0; a step that fails is reported failed with its first error
line (a stand-in trainbench that fails); a budget too small for the steps skips them as `budget`
and still writes the folder, check.md and the archive; an interrupted check writes them too and
leaves no process behind; bad usage exits 2 naming the flag. With a stand-in nvidia-smi listing
two GPUs that trainbench cannot use, GPU steps run their real commands here, and each fails with
trainbench's reason, not with a refused flag. The binary comes from $TRAINBENCH (ctest). No
assertion here is about a measured figure."""
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from processes import marked_processes

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
BINARY = os.environ.get("TRAINBENCH", str(ROOT / "build" / "release" / "bench" / "trainbench"))
GPU_STEPS = ["2a", "2b", "3", "4", "5a", "5b", "5c", "6", "7", "8"]


def has_gpu():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = pytest.mark.skipif(has_gpu(), reason="this machine has a GPU: these tests check the GPU-less form")


def environment(**extra):
    env = {**os.environ, "TB_BIN": BINARY, **extra}
    env.pop("TB_MACHINE", None)
    return env


def marked(pid):
    """Processes of the check with process id `pid` (it marks them TB_GPU_CHECK_RUN=gpucheck-<pid>)."""
    return marked_processes("TB_GPU_CHECK_RUN", f"gpucheck-{pid}")


def wait_for_marked(p, name):
    """Waits (at most 60 s) until a process named `name` of the check `p` runs; the check must not
    end first."""
    deadline = time.monotonic() + 60
    while not any(Path(f"/proc/{pid}/comm").read_text().strip() == name
                  for pid in marked(p.pid) if Path(f"/proc/{pid}/comm").exists()):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate(timeout=60)
        time.sleep(0.1)


def start_step_2a(tmp_path, smi):
    """The check of step 2a alone, started in the background with the stand-in nvidia-smi's folder
    `smi` and the stand-in test programs of tmp_path/tests: its output folder and its process."""
    out = tmp_path / "out"
    p = subprocess.Popen([str(SCRIPT), "--out", str(out), "--steps", "2a"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=environment(PATH=f"{smi}:{os.environ['PATH']}", TB_TESTS_DIR=str(tmp_path / "tests")))
    return out, p


def kill_marked(p):
    """Kills what is left of the check `p`'s processes, so that a test leaves none."""
    for pid in marked(p.pid):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_check(out, *args, env=None, timeout=240):
    p = subprocess.Popen([str(SCRIPT), "--out", str(out), *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env or environment())
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
        pytest.fail(f"gpu_check.sh ran past {timeout} s")
    assert not marked(p.pid), "the check left processes behind"
    return p.returncode, stdout, stderr


def the_check(out):
    """The one folder the check wrote under `out`, the archive beside it, and its steps by id."""
    folders = [d for d in out.iterdir() if d.is_dir()]
    assert len(folders) == 1 and folders[0].name.startswith("check-"), list(out.iterdir())
    folder = folders[0]
    archive = out / f"{folder.name}.tar.gz"
    assert archive.is_file(), list(out.iterdir())
    with open(folder / "steps.tsv", newline="") as f:
        steps = {row[0]: row[1] for row in csv.reader(f, delimiter="\t")}
    assert list(steps) == ["1", *GPU_STEPS]
    return folder, archive, steps


def check_md_lines(folder):
    """check.md's line per step, by step id."""
    lines = {}
    for line in (folder / "check.md").read_text().splitlines():
        if line.startswith("- ") and line[2:].split(" ", 1)[0] in ["1", *GPU_STEPS]:
            lines[line[2:].split(" ", 1)[0]] = line
    return lines


def archived(archive):
    with tarfile.open(archive) as t:
        return {Path(name).name for name in t.getnames()}


def test_without_a_gpu_the_machine_step_runs_and_every_gpu_step_says_why(tmp_path):
    status, stdout, stderr = run_check(tmp_path)
    assert status == 0, stdout + stderr
    folder, archive, steps = the_check(tmp_path)
    assert steps["1"] == "passed: no GPU; trainbench trains on the CPU"
    for step in GPU_STEPS:
        assert steps[step].startswith("skipped: no GPU ("), (step, steps[step])
    # check.md: one line per step, with its verdict; the machine step's figures.
    lines = check_md_lines(folder)
    assert lines["1"].startswith("- 1 the machine: passed: no GPU; trainbench trains on the CPU (")
    assert all(steps[s] in lines[s] for s in GPU_STEPS)
    text = (folder / "check.md").read_text()
    assert "- step loop: train/mlp/mnist/cpu:1/fp32/bs:100 " in text
    assert "- trainbench's gpu:1 here: gpu:1: " in text
    # The step loop's CSV: a cpu:1 row measured and a gpu:1 row skipped with the reason.
    with open(folder / "machine.csv", newline="") as f:
        rows = {r["device"]: r for r in csv.DictReader(f)}
    assert rows["cpu:1"]["status"] == "ok" and rows["gpu:1"]["status"] == "skipped", rows
    assert {"check.md", "steps.tsv", "machine.csv", "machine-log.txt", "machine.txt"} <= archived(archive)


def test_a_failing_step_is_reported_failed_with_its_first_error_line(tmp_path):
    stand_in = tmp_path / "trainbench"
    stand_in.write_text("#!/bin/sh\necho 'stand-in trainbench: error: failing on purpose' >&2\nexit 1\n")
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    status, stdout, stderr = run_check(out, env=environment(TB_BIN=str(stand_in)))
    assert status == 1, stdout + stderr
    folder, archive, steps = the_check(out)
    assert steps["1"] == "failed: trainbench exited 1: stand-in trainbench: error: failing on purpose"
    assert check_md_lines(folder)["1"].startswith("- 1 the machine: " + steps["1"])
    assert all(steps[s].startswith("skipped: ") for s in GPU_STEPS)
    assert "check.md" in archived(archive)


def test_the_timelines_step_runs_before_the_emulated_nodes_that_a_short_budget_cannot_hold(tmp_path):
    """Step 6 (25 s planned) runs right after step 3, before 5a (120 s): with 60 s of budget it is
    reached (and skipped here for want of a GPU), where 5a and the steps after it are out of budget."""
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", "5a,6,7", "--budget", 60)
    assert status == 0, stdout + stderr
    _, _, steps = the_check(tmp_path / "out")
    assert steps["6"].startswith("skipped: no GPU"), steps["6"]
    for step in ("5a", "7"):
        assert steps[step].startswith("skipped: budget (") and "at step 5a, which plans 120 s" in steps[step], \
            (step, steps[step])
    assert stdout.index("  6: skipped") < stdout.index("  5a: skipped"), stdout


def test_a_budget_too_small_skips_the_steps_left_and_still_writes_the_folder(tmp_path):
    # 44 s: the machine step (planned 20 s) runs, within 39 s (5 s are kept for the report); then
    # at most 39 s are left, and test_cuda plans 40.
    status, stdout, stderr = run_check(tmp_path / "some", "--budget", 44)
    assert status == 0, stdout + stderr
    folder, archive, steps = the_check(tmp_path / "some")
    assert steps["1"].startswith("passed"), steps["1"]
    for step in GPU_STEPS:
        assert steps[step].startswith("skipped: budget ("), (step, steps[step])
    assert "which plans 40 s" in steps["2a"] and steps["2a"].endswith("; no GPU either")
    assert {"check.md", "machine.csv"} <= archived(archive)
    # Less than the first step plans: nothing runs, and the folder and archive are still written.
    status, stdout, stderr = run_check(tmp_path / "none", "--budget", 3)
    assert status == 0, stdout + stderr
    folder, archive, steps = the_check(tmp_path / "none")
    assert all(s.startswith("skipped: budget (") for s in steps.values()), steps
    assert "check.md" in archived(archive)


def test_an_interrupted_check_writes_what_it_has_and_leaves_no_process(tmp_path):
    p = subprocess.Popen([str(SCRIPT), "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=environment())
    try:
        # Interrupted while the machine step's trainbench runs.
        wait_for_marked(p, "trainbench")
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 143, stdout + stderr
    assert "interrupted by SIGTERM" in stdout
    folder, archive, steps = the_check(tmp_path)
    assert steps["1"] == "failed: interrupted by SIGTERM"
    assert all(steps[s] == "skipped: the check was interrupted (SIGTERM)" for s in GPU_STEPS), steps
    assert "check.md" in archived(archive)
    assert not marked(p.pid)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_the_gpu_steps_commands_run_here_and_fail_with_trainbenchs_own_reason(tmp_path):
    """Their flags, the emulated nodes' launch and the readers of their CSVs, tried where a GPU
    step's command can run but measure nothing: each step must fail naming why trainbench skipped
    its rows (no GPU, or no CUDA backend), never a flag trainbench or a script refused."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n# A stand-in: two GPUs that do not exist.\ncase \"$*\" in\n"
                   "  -L) echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'; echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)' ;;\n"
                   "  *) echo \"stand-in nvidia-smi: $*\" >&2; exit 9 ;;\nesac\n")
    smi.chmod(0o755)
    out = tmp_path / "out"
    env = environment(PATH=f"{smi.parent}:{os.environ['PATH']}")
    status, stdout, stderr = run_check(out, "--steps", "4,5a,6,8", env=env, timeout=300)
    assert status == 1, stdout + stderr
    folder, _, steps = the_check(out)
    assert folder.parent.name == "out" and "NVIDIA H100 80GB HBM3" in (folder / "check.md").read_text()
    reason = re.compile(r"(skipped: gpu:\S+: (no usable NVIDIA driver|no usable GPU|this build of trainbench has no "
                        r"CUDA backend))")
    for step in ("4", "5a", "6", "8"):
        assert steps[step].startswith("failed: ") and reason.search(steps[step]), (step, steps[step])
        assert "exited 2" not in steps[step] and "timed out" not in steps[step], (step, steps[step])
    assert all(steps[s] == "skipped: not selected (--steps 4,5a,6,8)" for s in ("1", "2a", "3", "5c", "7"))
    with open(folder / "emulated.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["rank_hosts"] for r in rows} == {"tb-emulated-node-0:0;tb-emulated-node-1:0"}, rows


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_the_killed_rank_step_says_when_the_job_ended_before_the_kill(tmp_path):
    """Step 5c where the job ends in the delay before the kill (a stand-in whose rank 0 writes the
    one-device row, a step of 8 ms whose 1,000 steps make a delay of 30% of them, 2.4 s, and both
    ranks exit at once): the step says the job ended and how, with its last error line, not that
    no rank 1 was found to kill."""
    smi = stand_in_smi(tmp_path, ONE_GPU)
    stand_in = stand_in_program(
        tmp_path, "trainbench", "for a; do case $a in --csv=*) csv=${a#--csv=} ;; esac; done\n"
        "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then\n"
        "  printf 'benchmark,device,status,step_time_s\\ntrain/lstm/sine/cpu:1/fp32/bs:20,cpu:1,ok,0.008\\n' >\"$csv\"\n"
        "  sleep 0.5; echo 'stand-in trainbench: error: ended early on purpose' >&2\nfi")
    out = tmp_path / "out"
    env = environment(PATH=f"{smi}:{os.environ['PATH']}", TB_CHECK_CPU_RANKS="1", TB_BIN=str(stand_in))
    status, stdout, stderr = run_check(out, "--steps", "5c", env=env, timeout=180)
    _, _, steps = the_check(out)
    assert steps["5c"] == ("failed: the job ended (exit status 0) in the 2.40 s before the kill, no rank was killed: "
                           "stand-in trainbench: error: ended early on purpose"), steps["5c"]
    assert status == 1, stdout + stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_the_killed_rank_step_fails_a_kill_that_came_after_the_two_rank_row(tmp_path):
    """Step 5c where the two ranks' row has ended before the kill, its ranks still there (as in
    the debug build's leak check at exit, which once took the kill after the mpi:2 row had been
    written): rank 1 is killed and mpirun names it, yet the step fails saying the kill was not
    mid-row, naming the row. A stand-in whose rank 0 writes both rows of the real header."""
    smi = stand_in_smi(tmp_path, ONE_GPU)
    header = subprocess.run([BINARY, "--csv_header"], capture_output=True, text=True, check=True).stdout.strip()
    columns = header.split(",")

    def row(device):
        values = {"schema_version": "7", "benchmark": f"train/lstm/sine/{device}/fp32/bs:20", "device": device,
                  "status": "ok", "measurement": "measured", "run_type": "iteration", "step_time_s": "0.008"}
        assert set(values) <= set(columns), header
        return ",".join(values.get(c, "") for c in columns) + "\n"

    (tmp_path / "one.csv").write_text(header + "\n" + row("cpu:1"))
    (tmp_path / "two.csv").write_text(row("mpi:2"))
    stand_in = stand_in_program(
        tmp_path, "trainbench", "for a; do case $a in --csv=*) csv=${a#--csv=} ;; esac; done\n"
        f"if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then\n  cat {tmp_path}/one.csv >\"$csv\"; sleep 0.3\n"
        f"  cat {tmp_path}/two.csv >>\"$csv\"\nfi\n"
        # Both ranks stay, as if at their exit, in steps of 0.1 s: no long sleep outlives the kill.
        "i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done")
    out = tmp_path / "out"
    env = environment(PATH=f"{smi}:{os.environ['PATH']}", TB_CHECK_CPU_RANKS="1", TB_BIN=str(stand_in))
    status, stdout, stderr = run_check(out, "--steps", "5c", env=env, timeout=180)
    folder, _, steps = the_check(out)
    assert steps["5c"] == (f"failed: the kill came after the mpi:2 row had ended (train/lstm/sine/mpi:2/fp32/bs:20 is "
                           f"in {folder / 'killed.csv'}), not mid-row"), steps["5c"]
    assert re.search(r"- mpirun: .*rank 1 .*(signal 9|Killed)", (folder / "check.md").read_text())
    assert status == 1, stdout + stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_the_killed_rank_step_kills_rank_1_mid_row_and_times_the_end(tmp_path):
    """Step 5c's kill on CPU ranks (TB_CHECK_CPU_RANKS=1: cpu:1,mpi:2 under mpirun, the same
    code that kills a GPU rank): rank 1's trainbench found and killed after the one-device row,
    the job ending within 10 s, mpirun naming the rank and the signal, the row kept."""
    smi = stand_in_smi(tmp_path, ONE_GPU)
    out = tmp_path / "out"
    env = environment(PATH=f"{smi}:{os.environ['PATH']}", TB_CHECK_CPU_RANKS="1")
    status, stdout, stderr = run_check(out, "--steps", "5c", env=env, timeout=180)
    folder, _, steps = the_check(out)
    assert re.fullmatch(r"passed: the job ended \d+\.\d s after rank 1 was killed, naming it; the cpu:1 row kept",
                        steps["5c"]), steps["5c"]
    assert status == 0, stdout + stderr
    text = (folder / "check.md").read_text()
    assert re.search(r"- mpirun: .*rank 1 .*(signal 9|Killed)", text), text
    with open(folder / "killed.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["device"] for r in rows if r["measurement"] == "measured"] == ["cpu:1"], rows


@pytest.mark.parametrize("args, env, message", [
    (["--budget", "8m"], {}, "--budget: '8m' is not a whole number of seconds"),
    (["--steps", "1,9"], {}, "--steps: no step '9'"),
    (["--colour"], {}, "unknown argument '--colour'"),
    ([], {"TB_BIN": "/nonexistent/trainbench"}, "no trainbench at /nonexistent/trainbench"),
    # The same checks of the --flag=value forms, a budget of 0 and a TB_BIN that is a folder.
    (["--budget=8m"], {}, "--budget: '8m' is not a whole number of seconds"),
    (["--budget", "0"], {}, "--budget: '0' is not a whole number of seconds >= 1"),
    (["--steps=1,9"], {}, "--steps: no step '9'"),
    ([], {"TB_BIN": "/tmp"}, "no trainbench at /tmp:"),
])
def test_bad_usage_exits_2_naming_what_to_fix(tmp_path, args, env, message):
    r = subprocess.run([str(SCRIPT), "--out", str(tmp_path), *args], capture_output=True, text=True, timeout=60,
                       env=environment(**env))
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    assert not list(tmp_path.iterdir()), "nothing is written before the arguments are checked"


def stand_in_smi(tmp_path, listing):
    """A folder to put first on PATH holding an nvidia-smi whose `-L` prints `listing` (exit 0
    where it lists a GPU, else 9) and which fails every other query."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text("#!/bin/sh\nif [ \"$1\" = -L ]; then\n  cat <<'EOF'\n" + listing + "\nEOF\n"
                   "  case '" + listing + "' in GPU\\ [0-9]*) exit 0 ;; esac\nfi\nexit 9\n")
    smi.chmod(0o755)
    return smi.parent


ONE_GPU = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"
TWO_GPUS = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"


def stand_in_program(folder, name, body):
    """An executable shell script `folder/name` running `body`."""
    folder.mkdir(exist_ok=True)
    program = folder / name
    program.write_text("#!/bin/sh\n" + body + "\n")
    program.chmod(0o755)
    return program


# A program that runs for up to a minute in steps of 0.1 s (no long sleep outlives it).
WAITS = "i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done"


@pytest.mark.parametrize("listing, visible, step, verdict", [
    # A GPU fallen off the bus: nvidia-smi -L names a GPU in its error, and lists none.
    ("Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error", None, "2a",
     "skipped: no GPU (nvidia-smi -L: Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error)"),
    (TWO_GPUS, "-1", "2a", "skipped: no GPU (CUDA_VISIBLE_DEVICES='-1' hides every GPU)"),
    # Two GPUs listed, one visible: real gpu:2 is not tried.
    (TWO_GPUS, "1", "8", "skipped: one GPU: real gpu:2 needs two or more"),
])
def test_the_gpus_the_check_counts_are_nvidia_smis_list_narrowed_by_cuda_visible_devices(tmp_path, listing, visible,
                                                                                         step, verdict):
    """The GPU steps are skipped, saying why, where nvidia-smi -L lists no GPU (in its own words)
    or CUDA_VISIBLE_DEVICES hides them; step 8 where one GPU is left visible."""
    extra = {"PATH": f"{stand_in_smi(tmp_path, listing)}:{os.environ['PATH']}"}
    if visible is not None:
        extra["CUDA_VISIBLE_DEVICES"] = visible
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", step, env=environment(**extra), timeout=60)
    assert status == 0, stdout + stderr
    _, _, steps = the_check(tmp_path / "out")
    assert steps[step] == verdict, steps[step]


def test_five_seconds_of_the_budget_are_kept_for_the_report(tmp_path):
    """A budget of 24 s leaves at most 19 s for the steps: the machine step (planned 20 s) is
    skipped for the budget, and check.md says the check exited 0."""
    status, stdout, stderr = run_check(tmp_path, "--steps", "1", "--budget", 24, timeout=60)
    assert status == 0, stdout + stderr
    folder, _, steps = the_check(tmp_path)
    assert steps["1"].startswith("skipped: budget (") and "at step 1, which plans 20 s" in steps["1"], steps["1"]
    assert "of 24 s used; exit status 0." in (folder / "check.md").read_text()


def test_a_gpu_that_trainbench_cannot_use_is_no_gpu_for_the_later_steps(tmp_path):
    """nvidia-smi lists a GPU that trainbench cannot use: the machine step fails with trainbench's
    reason, and the GPU steps after it are skipped as on a machine without a GPU, naming step 1."""
    env = environment(PATH=f"{stand_in_smi(tmp_path, ONE_GPU)}:{os.environ['PATH']}")
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", "1,6", env=env, timeout=120)
    assert status == 1, stdout + stderr
    _, _, steps = the_check(tmp_path / "out")
    assert steps["1"].startswith("failed: trainbench cannot use the GPU nvidia-smi lists: skipped: gpu:1: "), steps["1"]
    assert steps["6"] == "skipped: no GPU (trainbench cannot use the GPU nvidia-smi lists (step 1))", steps["6"]


def test_a_relative_out_is_taken_from_where_the_check_was_run(tmp_path):
    """`--out check` from another folder writes there, not under the repository the script is in
    (it runs from the repository's root)."""
    r = subprocess.run([str(SCRIPT), "--out", "check", "--steps", "2a"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env=environment())
    assert r.returncode == 0, r.stdout + r.stderr
    _, _, steps = the_check(tmp_path / "check")
    assert steps["1"] == "skipped: not selected (--steps 2a)", steps


@pytest.mark.parametrize("passing", [True, False])
def test_processes_a_step_leaves_behind_are_killed_and_named_in_its_verdict(tmp_path, passing):
    """A trainbench that leaves a process running: the check kills it after the step and says so,
    failing a step that had passed, adding to one that had failed; check.md gives exit status 1."""
    stand_in = tmp_path / "trainbench"
    run = f'"{BINARY}" "$@"' if passing else "echo 'stand-in trainbench: error: failing on purpose' >&2; false"
    stand_in.write_text(f"#!/bin/sh\nsleep 120 &\n{run}\n")
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    status, stdout, stderr = run_check(out, "--steps", "1", env=environment(TB_BIN=str(stand_in)))
    assert status == 1, stdout + stderr
    folder, _, steps = the_check(out)
    if passing:
        verdict = r"failed: processes outlived the step \(killed\): "
    else:
        verdict = (r"failed: trainbench exited 1: stand-in trainbench: error: failing on purpose; processes it left "
                   r"were killed: ")
    # Step 1 runs trainbench twice (--list_configs, then the step loop): a sleep of each.
    assert re.fullmatch(verdict + r"sleep\[\d+\]( sleep\[\d+\])*", steps["1"]), steps["1"]
    assert "; exit status 1." in (folder / "check.md").read_text()


@pytest.mark.parametrize("name, number", [("INT", 2), ("HUP", 1)])
def test_a_check_interrupted_by_sigint_or_sighup_writes_what_it_has(tmp_path, name, number):
    """As for SIGTERM: the running step failed naming the signal, the others skipped, the report
    and archive written, exit status 128 + the signal's number (check.md says that one, not 1), no
    process left."""
    p = subprocess.Popen([str(SCRIPT), "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=environment())
    try:
        wait_for_marked(p, "trainbench")
        p.send_signal(getattr(signal, f"SIG{name}"))
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 128 + number, stdout + stderr
    folder, archive, steps = the_check(tmp_path)
    assert steps["1"] == f"failed: interrupted by SIG{name}"
    assert f"; exit status {128 + number}." in (folder / "check.md").read_text()
    assert all(steps[s] == f"skipped: the check was interrupted (SIG{name})" for s in GPU_STEPS), steps
    assert "check.md" in archived(archive)
    assert not marked(p.pid)


def test_an_interrupted_check_stops_the_running_command_and_kills_what_it_left(tmp_path):
    """Interrupted while step 2a's test_cuda runs (a stand-in that has started a process of its
    own, deaf to SIGTERM): the check sends the command SIGTERM rather than waiting for it, and kills
    the process it left before exiting."""
    smi = stand_in_smi(tmp_path, ONE_GPU)
    stopped = tmp_path / "stopped"
    stand_in_program(tmp_path / "tests", "test_cuda", f"trap 'echo TERM >{stopped}; exit 143' TERM\n(trap '' TERM; exec sleep 300) &\n"
                     "i=0; while [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done")
    out, p = start_step_2a(tmp_path, smi)
    try:
        wait_for_marked(p, "sleep")
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=60)
        left = marked(p.pid)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        kill_marked(p)  # a process the check left, so that the test leaves none
    assert p.returncode == 143, stdout + stderr
    _, _, steps = the_check(out)
    assert steps["2a"] == "failed: interrupted by SIGTERM", steps
    assert stopped.read_text() == "TERM\n"
    assert not left, "the check left processes behind"


def test_a_check_killed_outright_keeps_the_report_of_the_steps_before(tmp_path):
    """check.md, steps.tsv and the archive are rewritten after every step: a check killed with
    SIGKILL while step 2a runs (a stand-in test_cuda that waits) leaves step 1's verdict."""
    smi = stand_in_smi(tmp_path, ONE_GPU)
    stand_in_program(tmp_path / "tests", "test_cuda", WAITS)
    out, p = start_step_2a(tmp_path, smi)
    try:
        wait_for_marked(p, "test_cuda")
    finally:
        p.kill()
        p.communicate()
        kill_marked(p)  # what the killed check could not sweep
    _, archive, steps = the_check(out)
    assert steps["1"] == "skipped: not selected (--steps 2a)", steps
    assert steps["2a"] == "not run yet", steps
    assert {"check.md", "steps.tsv"} <= archived(archive)


def test_a_step_that_hangs_is_stopped_at_the_budget_and_failed_as_timed_out(tmp_path):
    """A compute-sanitizer that never ends (step 2b, planned 10 s): with a budget of 18 s the step
    gets what is left of it (at most 13 s) and fails as timed out, not with the exit status of the
    kill."""
    smi = stand_in_smi(tmp_path, ONE_GPU)
    stand_in_program(smi, "compute-sanitizer", WAITS)
    stand_in_program(tmp_path / "tests", "test_cuda", "exit 0")
    env = environment(PATH=f"{smi}:{os.environ['PATH']}", TB_TESTS_DIR=str(tmp_path / "tests"))
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", "2b", "--budget", 18, env=env, timeout=60)
    assert status == 1, stdout + stderr
    _, _, steps = the_check(tmp_path / "out")
    assert re.fullmatch(r"failed: test_cuda under memcheck timed out after 1[0-3] s \(0 tests had finished\)",
                        steps["2b"]), steps["2b"]


def test_a_reader_that_crashes_fails_the_step(tmp_path):
    """Where gpu_check.py dies with a traceback instead of a verdict (a stand-in interpreter that
    does so for it alone), the step is failed naming the reader, and the check exits 1."""
    python = stand_in_program(tmp_path / "bin", "python3", 'case "$1" in\n  */gpu_check.py)\n'
                              "    echo 'Traceback (most recent call last):' >&2; echo 'KeyError: x' >&2; exit 1 ;;\n"
                              f'esac\nexec "{sys.executable}" "$@"')
    stand_in = stand_in_program(tmp_path / "bin", "trainbench", "exit 1")
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", "1",
                                       env=environment(TB_PYTHON=str(python), TB_BIN=str(stand_in)), timeout=60)
    assert status == 1, stdout + stderr
    _, _, steps = the_check(tmp_path / "out")
    assert steps["1"] == "failed: the reader: Traceback (most recent call last):", steps["1"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (scripts/deps.sh installs it)")
def test_the_killed_rank_step_says_when_the_job_ended_before_its_first_row(tmp_path):
    """Step 5c where trainbench refuses the job before any row: the step says the job ended, with
    mpirun's exit status and trainbench's error line, not that the row did not come in time."""
    stand_in = tmp_path / "trainbench"
    stand_in.write_text("#!/bin/sh\necho 'stand-in trainbench: error: refusing on purpose' >&2\nexit 2\n")
    stand_in.chmod(0o755)
    env = environment(PATH=f"{stand_in_smi(tmp_path, ONE_GPU)}:{os.environ['PATH']}", TB_CHECK_CPU_RANKS="1",
                      TB_BIN=str(stand_in))
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", "5c", env=env, timeout=180)
    assert status == 1, stdout + stderr
    _, _, steps = the_check(tmp_path / "out")
    assert re.fullmatch(r"failed: the job ended \(exit status [1-9]\d*\) before a rank could be killed: "
                        r"stand-in trainbench: error: refusing on purpose", steps["5c"]), steps["5c"]


def stand_in_ranks(tmp_path, said, on_term="", devices=("cpu:1",), rank1=""):
    """PATH and TB_BIN for step 5c on two stand-in ranks under a stand-in mpirun: rank 0 writes
    rows of `devices` in the real header (a step of 8 ms: the kill comes 2.4 s after the cpu:1 row)
    and both wait (rank 1 first runs `rank1`); when rank 1 ends, mpirun stops rank 0 (SIGTERM,
    where it runs `on_term`) and prints `said`."""
    header = subprocess.run([BINARY, "--csv_header"], capture_output=True, text=True, check=True).stdout.strip()

    def row(device):
        values = {"schema_version": "7", "benchmark": f"train/lstm/sine/{device}/fp32/bs:20", "device": device,
                  "status": "ok", "measurement": "measured", "run_type": "iteration", "step_time_s": "0.008"}
        return ",".join(values.get(c, "") for c in header.split(",")) + "\n"
    (tmp_path / "row.csv").write_text(header + "\n" + "".join(row(d) for d in devices))
    (tmp_path / "header.csv").write_text(header + "\n")
    bin_dir = stand_in_smi(tmp_path, ONE_GPU)
    stand_in_program(bin_dir, "mpirun", "while [ \"${1#-}\" != \"$1\" ]; do case $1 in -np) shift 2 ;; *) shift ;; esac; done\n"
                     "OMPI_COMM_WORLD_RANK=0 \"$@\" & zero=$!\nOMPI_COMM_WORLD_RANK=1 \"$@\" & one=$!\n"
                     f"wait $one; kill $zero; wait $zero; echo '{said}'; exit 1")
    trainbench = stand_in_program(
        tmp_path / "ranks", "trainbench", "for a; do case $a in --csv=*) csv=${a#--csv=} ;; esac; done\n"
        f"if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then\n  cp {tmp_path / 'row.csv'} \"$csv\"\n"
        f"  trap '{on_term} exit 143' TERM\nfi\n[ \"$OMPI_COMM_WORLD_RANK\" = 0 ] || {rank1 or ':'}\n{WAITS}")
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TB_BIN": str(trainbench), "TB_CHECK_CPU_RANKS": "1"}


def test_the_killed_rank_step_fails_a_job_whose_output_does_not_name_the_killed_rank(tmp_path):
    """Step 5c where the job ends after the kill but mpirun names neither rank 1 nor the signal
    (a stand-in mpirun): the step fails saying so, not passed."""
    env = environment(**stand_in_ranks(tmp_path, "stand-in mpirun: the job ended"))
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", "5c", env=env, timeout=120)
    assert status == 1, stdout + stderr
    _, _, steps = the_check(tmp_path / "out")
    assert re.fullmatch(r"failed: the job ended in \d+\.\d s but its output names neither rank 1 nor the signal",
                        steps["5c"]), steps["5c"]


def test_the_killed_rank_step_fails_where_the_kill_lost_the_row_written_before_it(tmp_path):
    """Step 5c where rank 1 is killed and named, but the cpu:1 row written before the kill is gone
    from the CSV when the job has ended (rank 0 rewrites it when stopped): failed saying so."""
    said = "process rank 1 with PID 1 on node n1 exited on signal 9 (Killed)."
    env = environment(**stand_in_ranks(tmp_path, said, on_term=f'cp {tmp_path / "header.csv"} "$csv";'))
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", "5c", env=env, timeout=120)
    assert status == 1, stdout + stderr
    folder, _, steps = the_check(tmp_path / "out")
    assert steps["5c"] == f"failed: the cpu:1 row written before the kill is not in {folder / 'killed.csv'} any more", \
        steps["5c"]


def test_the_killed_rank_step_without_a_rank_1_to_kill_says_the_two_rank_row_had_ended(tmp_path):
    """Step 5c where no trainbench of rank 1 is there at the kill (the stand-in's rank 1 has become
    another program) and the mpi:2 row is already in the CSV: the step says both."""
    env = environment(**stand_in_ranks(tmp_path, "stand-in mpirun: the job ended", devices=("cpu:1", "mpi:2"),
                                       rank1=f"exec sh -c '{WAITS}'"))
    status, stdout, stderr = run_check(tmp_path / "out", "--steps", "5c", env=env, timeout=120)
    assert status == 1, stdout + stderr
    folder, _, steps = the_check(tmp_path / "out")
    assert steps["5c"] == ("failed: no trainbench process of rank 1 was found to kill (the mpi:2 row had ended in "
                           f"the 2.40 s: train/lstm/sine/mpi:2/fp32/bs:20 is in {folder / 'killed.csv'})"), steps["5c"]

"""The ReFrame check (scripts/reframe/trainbench_check.py) as a site runs it (issue 44): this build
installed into a temporary prefix, ReFrame (reframe-hpc, pinned in scripts/deps.sh, from
$TB_REFRAME) run from a folder outside the checkout with the installed check and settings.py on
  - the local partition (ranks under mpirun): the MLP on cpu:1 and mpi:2 passes its sanity and
    logs samples/s per configuration and mpi:2's efficiency;
  - the same with a reference far above what any machine does (1e12 samples/s): ReFrame fails
    the performance check, naming the figure;
  - a workload that matches nothing: the sanity check fails;
  - the Slurm partition, on the one-node Slurm of test_slurm.py (sbatch, squeue, srun --mpi=pmix):
    passes as on the local one;
and the sanity function alone on rows written by hand refuses each failed check (replicas, loss,
status, missing rows).
Pass or fail is ReFrame's (its exit status and its report); this test asserts no timing of its
own. ReFrame's files (stage, output, perflogs, its ~/.reframe) stay in the test's temporary
folder. The build folder comes from $TB_BUILD_DIR, cmake from $CMAKE (ctest sets them)."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from installed import install_prefix
from test_slurm import cluster, logs  # noqa: F401  (the one-node Slurm fixture)

SOURCE = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("TB_BUILD_DIR", SOURCE / "build" / "release")).resolve()
REFRAME = os.environ.get("TB_REFRAME", str(SOURCE / "build" / "reframe" / "bin" / "reframe"))
# A tiny run: the MLP, 5 timed steps a rank, one and two ranks.
VARIABLES = ["-S", "workload=train/mlp/mnist/", "-S", "devices=cpu:1,mpi:2", "-S", "batch=100", "-S", "iterations=5"]
SAMPLES = "samples_per_s_cpu_1_fp32_bs_100"
EFFICIENCY = "efficiency_mpi_2_fp32_bs_100"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not os.access(REFRAME, os.X_OK):
        pytest.fail(f"{REFRAME}: no ReFrame there; scripts/test.sh installs it (bash -c 'source scripts/deps.sh && "
                    "tb_install_reframe'), or name one with TB_REFRAME=/path/to/reframe")
    with install_prefix(BUILD, tmp_path_factory.mktemp("reframe-install") / "prefix") as installed:
        yield installed


def reframe(prefix, folder, system, *args, env=None, timeout=600):
    """ReFrame on the installed check, in `folder` (its HOME too: ReFrame keeps reports there)."""
    share = prefix / "share" / "trainbench" / "reframe"
    command = [REFRAME, "-C", str(share / "settings.py"), "-c", str(share / "trainbench_check.py"),
               f"--system={system}", "--prefix", str(folder / "rfm"), "--report-file", str(folder / "report.json"),
               "--nocolor", *VARIABLES, *args, "-r"]
    environment = dict(env or os.environ, HOME=str(folder), TMPDIR=str(folder), RFM_ENABLE_RESULTS_STORAGE="0")
    r = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True, timeout=timeout)
    return r, r.stdout + r.stderr


def case(folder):
    """The one test case of the report ReFrame wrote."""
    report = json.loads((folder / "report.json").read_text())
    cases = [c for run in report["runs"] for c in run["testcases"]]
    assert len(cases) == 1, cases
    return cases[0]


def figures(result):
    """The performance variables of a report's test case: name -> (value, unit, ReFrame's verdict)."""
    prefix = f"{result['system']}:{result['partition']}:"
    return {key[len(prefix):]: (v[0], v[4], v[5]) for key, v in result["perfvalues"].items()}


def test_the_check_passes_on_the_local_partition(prefix, tmp_path):
    r, out = reframe(prefix, tmp_path, "cluster:local")
    assert r.returncode == 0, out
    assert re.search(r"\[ +PASSED +\] Ran 1/1 test case", out), out
    result = case(tmp_path)
    assert result["result"] == "pass" and result["partition"] == "local", result
    logged = figures(result)
    assert set(logged) == {SAMPLES, "samples_per_s_mpi_2_fp32_bs_100", EFFICIENCY}, logged
    assert logged[SAMPLES][0] > 0 and logged[SAMPLES][1] == "samples/s", logged
    assert logged[EFFICIENCY][0] > 0, logged
    job_script = next((tmp_path / "rfm" / "output").rglob("rfm_job.sh")).read_text()
    assert f"mpirun -np 2 {prefix}/bin/trainbench " in job_script, job_script


def test_a_reference_above_the_machine_fails_the_performance_check(prefix, tmp_path):
    references = tmp_path / "references.json"
    references.write_text(json.dumps({"cluster:local": {SAMPLES: [1e12, -0.1, None, "samples/s"]}}))
    r, out = reframe(prefix, tmp_path, "cluster:local", "-S", f"reference_file={references}")
    assert r.returncode != 0, out
    assert re.search(r"\[ +FAILED +\] Ran 1/1 test case", out), out
    failure = [line for line in out.splitlines() if "failed to meet reference" in line]
    assert failure and f"{SAMPLES}=" in failure[0] and "expected 1000000000000.0" in failure[0], out
    print(failure[0])  # the line the report quotes
    result = case(tmp_path)
    assert result["result"] == "fail" and result["fail_phase"] == "performance", result
    assert figures(result)[SAMPLES][2] == "fail", figures(result)


def test_a_workload_that_runs_nothing_fails_the_sanity_check(prefix, tmp_path):
    r, out = reframe(prefix, tmp_path, "cluster:local", "-S", "workload=train/nosuchmodel/")
    assert r.returncode != 0, out
    result = case(tmp_path)
    assert result["result"] == "fail" and result["fail_phase"] == "sanity", result
    assert "trainbench exited with an error" in result["fail_reason"], result["fail_reason"]


def test_the_check_passes_on_the_slurm_partition(cluster, prefix, tmp_path):  # noqa: F811
    # sbatch reaches the test's Slurm through SLURM_CONF; Open MPI's files stay in its folder.
    env = dict(cluster.job_env(), TB_SLURM_ACCESS="--partition=tb")
    r, out = reframe(prefix, tmp_path, "cluster:slurm", env=env)
    assert r.returncode == 0, f"{out}\n{logs(cluster.folder)}"
    assert re.search(r"\[ +PASSED +\] Ran 1/1 test case", out), out
    result = case(tmp_path)
    assert result["result"] == "pass" and result["partition"] == "slurm", result
    logged = figures(result)
    assert logged[SAMPLES][0] > 0 and logged[EFFICIENCY][0] > 0, logged
    job_script = next((tmp_path / "rfm" / "output").rglob("rfm_job.sh")).read_text()
    assert f"--mpi=pmix --kill-on-bad-exit=1 {prefix}/bin/trainbench " in job_script, job_script


SANITY_CASES = r'''
import json, sys
import trainbench_check as check
from reframe.core.exceptions import SanityError
ok = {"benchmark": "train/mlp/mnist/mpi:2/fp32/bs:100", "device": "mpi:2", "device_kind": "mpi:N",
      "data_parallel": "2", "status": "ok", "measurement": "measured", "run_type": "iteration", "loss_first": "2.3",
      "loss_last": "0.1", "replicas": "2", "message": ""}
cases = {"ok": [ok], "one replica": [dict(ok, replicas="1")],
         "replicas_differ": [dict(ok, verdicts="loaded+replicas_differ")], "nan loss": [dict(ok, loss_last="nan")],
         "failed row": [dict(ok, status="failed", message="the 2 replicas' weights differ after training")],
         "predicted only": [dict(ok, measurement="predicted")], "no rows": []}
out = {}
for name, rows in cases.items():
    try:
        out[name] = str(check.check_rows(rows, ["mpi:2"], "train/mlp/mnist/").evaluate())
    except SanityError as e:
        out[name] = f"SanityError: {e}"
print(json.dumps(out))
'''


def test_the_sanity_refuses_rows_that_failed_a_check():
    """The sanity function on rows written by hand, one check failing in each (under ReFrame's
    Python, with the check in the checkout)."""
    python = Path(REFRAME).parent / "python"
    if not os.access(python, os.X_OK):
        pytest.fail(f"{python}: no ReFrame there; scripts/test.sh installs it")
    r = subprocess.run([str(python), "-c", SANITY_CASES], cwd=SOURCE / "scripts" / "reframe", capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, TMPDIR=os.environ.get("TMPDIR", "/tmp")))
    assert r.returncode == 0, r.stderr
    verdicts = json.loads(r.stdout)
    assert verdicts.pop("ok") == "True", verdicts
    expected = {"one replica": "the replica check did not pass on 2 replicas",
                "replicas_differ": "the replica check did not pass on 2 replicas",
                "nan loss": "loss_last is 'nan', not a finite loss",
                "failed row": "failed: the 2 replicas' weights differ",
                "predicted only": "no measured row of mpi:2", "no rows": "has no rows"}
    for name, words in expected.items():
        assert verdicts[name].startswith("SanityError: ") and words in verdicts[name], (name, verdicts[name])

"""scripts/slurm/trainbench.sbatch on a real Slurm: Debian's slurm-wlm and munge run here as a
one-node cluster of 2 CPUs (munged, slurmctld and slurmd on localhost, with a key, a slurm.conf,
state, spool, logs and pid files of this test's own in one temporary folder; free ports, so a
system Slurm is left alone). The script is submitted as users do (sbatch --wait, trainbench's
flags after it), as installed: this build is installed (cmake --install) into a temporary prefix
and its share/trainbench/trainbench.sbatch submitted from folders outside the checkout, running
the prefix's bin/trainbench through srun --mpi=pmix on 2 ranks; an array job sweeps a flag
(%a), and TB_MPI picks srun's MPI plugin. Afterwards no daemon, step or rank of the test's
cluster is left, nor its folders. Runs as root (scripts/test.sh installs slurm-wlm and munge);
skipped, saying why, elsewhere, and where slurmd cannot start: without a cgroup filesystem on
/sys/fs/cgroup (a chroot), or with cgroup2 alone there beside the kernel's v1 hierarchies. The
build folder comes from $TB_BUILD_DIR, cmake from $CMAKE (ctest sets both)."""
import csv
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from installed import install_prefix

SOURCE = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("TB_BUILD_DIR", SOURCE / "build" / "release")).resolve()
CLUSTER = "tbtest"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo")
SEARCH_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
# The jobs' own limit (minutes): Slurm ends a job that outlives it, whatever happens here.
JOB_MINUTES = "10"


def wait_for(what, check, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def pids_with_env(entry):
    """Live processes whose environment holds `entry` (NAME=VALUE); a zombie's is empty."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if entry.encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def names_of(pids):
    names = {}
    for pid in pids:
        try:
            names[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
    return names


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def complete_lines(path):
    """The CSV's lines that have been written whole (rank 0 writes each row with one write)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return text[: text.rfind("\n") + 1].splitlines(keepends=True)


def rows_of(lines):
    return list(csv.DictReader(io.StringIO("".join(lines))))


@dataclass
class Cluster:
    folder: Path
    conf: Path
    node: str
    env: dict

    def run(self, *args, timeout=60, **kwargs):
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout, **kwargs)

    def job_env(self):
        """The submitter's environment: Open MPI's session and shared-memory files in the test's
        folder (a killed rank leaves no file behind elsewhere); no TB_BIN, so the installed
        template runs its prefix's binary."""
        env = dict(self.env, TMPDIR=str(self.folder / "jobs"),
                   OMPI_MCA_btl_vader_backing_directory=str(self.folder / "jobs"))
        env.pop("TB_BIN", None)
        return env


def slurm_conf(folder: Path, node: str) -> str:
    return f"""# A one-node Slurm for tests/test_slurm.py: everything in {folder}.
ClusterName={CLUSTER}
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/munge.socket
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
# sbatch --wait polls every 2 s while its job's record may be purged no sooner than this.
MinJobAge=4
KillWait=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName={node} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=tb Nodes=ALL Default=YES MaxTime={JOB_MINUTES} State=UP
"""


def why_slurmd_cannot_start():
    """Why this machine's cgroups keep slurmd from starting, or None. Slurm 22.05 (Debian 12) always
    loads a cgroup plugin (CgroupPlugin has no 'disabled'): it needs a cgroup filesystem on
    /sys/fs/cgroup, and stops on cgroup2 alone there while /proc/self/cgroup lists v1 hierarchies
    ("Hybrid mode is not supported")."""
    on_cgroup_dir = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/sys/fs/cgroup":
            on_cgroup_dir = fields[fields.index("-") + 1]  # the file system type; the last mount is on top
    if on_cgroup_dir not in ("cgroup2", "tmpfs", "cgroup"):
        return ("nothing is mounted on /sys/fs/cgroup (a chroot?), and slurmd 22.05 needs a cgroup file system there; "
                "run it where /sys/fs/cgroup is mounted: a machine, a container, scripts/clean_root.sh")
    v1 = [line for line in Path("/proc/self/cgroup").read_text().splitlines() if not line.startswith("0::")]
    if on_cgroup_dir == "cgroup2" and v1:
        return ("/sys/fs/cgroup has cgroup2 alone while this kernel has cgroup v1 hierarchies "
                f"({', '.join(line.split(':')[1] for line in v1)}): slurmd 22.05 stops on that (hybrid mode)")
    return None


def stop(process: subprocess.Popen):
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("a Slurm cluster of the test's own needs root (its daemons run as root)")
    missing = [tool for tool in TOOLS if not shutil.which(tool, path=SEARCH_PATH)]
    if missing:
        if shutil.which("apt-get"):
            pytest.fail(f"{', '.join(missing)} not found: install slurm-wlm and munge "
                        "(apt-get install slurm-wlm munge; scripts/test.sh installs them)")
        pytest.skip(f"{', '.join(missing)} not found and no apt-get to install slurm-wlm and munge")
    why = why_slurmd_cannot_start()
    if why:
        pytest.skip(why)
    # munged wants every folder above its socket searchable by all (pytest's are 0700).
    folder = Path(tempfile.mkdtemp(prefix="tb-slurm-"))
    folder.chmod(0o755)
    for sub in ("munge", "state", "spool", "log", "jobs"):
        (folder / sub).mkdir()
    node = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    env = dict(os.environ, SLURM_CONF=str(conf), PATH=SEARCH_PATH)
    daemons, outputs = [], []

    def output(name):
        outputs.append(open(folder / "log" / name, "w"))
        return outputs[-1]
    try:
        key = folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        munge = folder / "munge"
        daemons.append(subprocess.Popen(
            ["munged", "--foreground", f"--socket={munge}/munge.socket", f"--key-file={key}",
             f"--log-file={munge}/munged.log", f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/munged.seed"],
            env=env, stdout=subprocess.DEVNULL, stderr=output("munged.err")))
        wait_for("munged's socket", lambda: (munge / "munge.socket").exists(), 20)
        conf.write_text(slurm_conf(folder, node))
        for daemon in ("slurmctld", "slurmd"):
            daemons.append(subprocess.Popen([daemon, "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL,
                                            stderr=output(f"{daemon}.err")))
        def idle():
            assert all(d.poll() is None for d in daemons), logs(folder)
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True)
            return r.stdout.strip() == "idle"
        wait_for("the node to be idle in sinfo", idle, 60, interval=0.5)
        # The check in tear_down finds this cluster's daemons by their environment.
        assert set(names_of(pids_with_env(f"SLURM_CONF={conf}")).values()) >= {"munged", "slurmctld", "slurmd"}
        yield Cluster(folder, conf, node, env)
    finally:
        tear_down(folder, env, daemons, outputs)


def logs(folder: Path) -> str:
    text = []
    for log in sorted((folder / "log").glob("*")):
        text.append(f"--- {log.name}\n" + log.read_text()[-3000:])
    return "\n".join(text)


def tear_down(folder, env, daemons, outputs):
    """Cancels every job, stops the daemons, kills whatever ran under this cluster, removes the
    folder; then checks that none of it is left. Every process of this cluster (daemons, steps,
    srun, ranks) has its SLURM_CONF in its environment: another Slurm on the machine, or another
    run of this test, is no concern of this one."""
    try:
        jobs = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                              timeout=30).stdout.split()
        if jobs:
            subprocess.run(["scancel", *jobs], env=env, capture_output=True, timeout=30)
            try:
                wait_for("the cancelled jobs to end", lambda: not subprocess.run(
                    ["squeue", "-h"], env=env, capture_output=True, text=True, timeout=30).stdout.strip(), 30)
            except AssertionError:
                pass
    except (OSError, subprocess.TimeoutExpired):
        pass
    for daemon in reversed(daemons):  # slurmd, slurmctld, then munged
        stop(daemon)
    for out in outputs:
        out.close()
    marker = f"SLURM_CONF={folder}/slurm.conf"
    for pid in pids_with_env(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(folder, ignore_errors=True)
    try:
        wait_for("no process of the test's cluster", lambda: not pids_with_env(marker), 10)
    except AssertionError:
        pass
    left = names_of(pids_with_env(marker))
    assert not left, f"processes of the test's cluster left behind: {left}"
    assert all(d.poll() is not None for d in daemons), "a daemon of the test's cluster is still running"
    assert not folder.exists(), f"{folder} left behind"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """This build, installed into a temporary prefix (removed afterwards)."""
    with install_prefix(BUILD, tmp_path_factory.mktemp("slurm-install") / "prefix") as installed:
        yield installed


def submit(cluster, prefix, cwd, sbatch_args, flags, env=None, **popen):
    """sbatch --wait of the installed script from `cwd`, trainbench's flags after it."""
    script = prefix / "share" / "trainbench" / "trainbench.sbatch"
    return subprocess.Popen(["sbatch", "--wait", f"--time={JOB_MINUTES}", *sbatch_args, str(script), *flags],
                            cwd=cwd, env=dict(cluster.job_env(), **(env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def job_id_of(cluster, name):
    def find():
        r = cluster.run("squeue", "-h", "-n", name, "-o", "%i")
        return r.stdout.strip()
    return wait_for(f"job {name} in squeue", find, 30)


def test_sbatch_runs_two_ranks_and_rank_0_writes_the_csv(cluster, prefix, tmp_path):
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    job = submit(cluster, prefix, submit_dir, ["--job-name=tb-ok"],
                 ["--devices=cpu:1,mpi:2", "--benchmark_filter=^train/(mlp/mnist|lstm/sine)/", "--iterations=3"])
    out, err = job.communicate(timeout=240)
    job_id = re.search(r"Submitted batch job (\d+)", out).group(1)
    log = submit_dir / f"trainbench-{job_id}.out"
    assert job.returncode == 0, f"{out}{err}\n{log.read_text() if log.exists() else 'no job output'}\n{logs(cluster.folder)}"
    text = log.read_text()
    assert f"job {job_id} on 1 node(s) ({cluster.node}), 2 ranks" in text, text
    assert f"; {prefix}/bin/trainbench; --mpi=pmix;" in text, text
    assert "srun exited with status 0" in text, text
    # The default place: results/<cluster>/slurm-<job id>.csv under the submit folder, and the summary.
    csv_path = submit_dir / "results" / CLUSTER / f"slurm-{job_id}.csv"
    assert f"CSV results/{CLUSTER}/slurm-{job_id}.csv" in text
    assert (submit_dir / "results" / CLUSTER / f"slurm-{job_id}-summary.md").stat().st_size > 0
    lines = complete_lines(csv_path)
    # Written once, by rank 0: one header, each run once.
    assert sum(line.startswith("schema_version,") for line in lines) == 1
    rows = rows_of(lines)
    keys = [(r["benchmark"], r["run_type"], r["aggregate"], r["repetition"]) for r in rows]
    assert len(keys) == len(set(keys)), keys
    host = socket.gethostname()
    for model in ("mlp/mnist", "lstm/sine"):
        one = [r for r in rows if r["benchmark"].startswith(f"train/{model}/cpu:1/")]
        measured = [r for r in rows if r["benchmark"].startswith(f"train/{model}/mpi:2/") and r["measurement"] == "measured"]
        predicted = [r for r in rows if r["benchmark"].startswith(f"train/{model}/mpi:2/") and r["measurement"] == "predicted"]
        assert len(one) == 1 and len(measured) == 1 and len(predicted) == 1, [r["benchmark"] for r in rows]
        for r in one + measured + predicted:
            assert r["status"] == "ok", (r["benchmark"], r["message"])
            assert r["ranks"] == "2", r["benchmark"]
            assert r["host"] == host, r["host"]
        m = measured[0]
        assert m["replicas"] == "2" and m["device"] == "mpi:2"
        assert int(m["iterations"]) == 3 and float(m["samples_per_s"]) > 0
        assert float(m["loss_last"]) < float(m["loss_first"])
        assert predicted[0]["link"] == "measured" and float(predicted[0]["link_busbw_gbps"]) > 0
    # Schema 5: the ranks' hosts (one node here, node-local ranks 0 and 1).
    for r in rows:
        assert "nodes" in r and "rank_hosts" in r, "the CSV has no nodes/rank_hosts columns (schema 5)"
        assert r["nodes"] == "1", (r["benchmark"], r["nodes"])
        assert r["rank_hosts"] == f"{host}:0;{host}:1", (r["benchmark"], r["rank_hosts"])


def test_a_killed_rank_ends_the_job_with_the_reason_and_keeps_the_rows_before(cluster, prefix, tmp_path):
    csv_path = tmp_path / "killed.csv"
    # Far more repetitions than the job will live for: it ends only because a rank dies.
    job = submit(cluster, prefix, tmp_path, ["--job-name=tb-kill"],
                 ["--devices=mpi:2", "--benchmark_filter=^train/mlp/mnist/", "--iterations=3",
                  "--benchmark_repetitions=100000", f"--csv={csv_path}"])
    try:
        job_id = job_id_of(cluster, "tb-kill")

        def two_rows():
            assert job.poll() is None, f"the job ended before the kill: {job.communicate()}"
            return len(complete_lines(csv_path)) >= 3
        wait_for("two rows in the CSV", two_rows, 180)
        kept = complete_lines(csv_path)

        def rank_1():
            r = cluster.run("scontrol", "listpids", job_id)
            for line in r.stdout.splitlines()[1:]:
                pid, _, step, _, task = (line.split() + [""] * 5)[:5]
                if step == "0" and task == "1":
                    return int(pid)
            return None
        pid = wait_for("rank 1's pid in scontrol listpids", rank_1, 30)
        assert "SLURM_PROCID=1" in Path(f"/proc/{pid}/environ").read_text().split("\0")
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        # The job ends (srun --kill-on-bad-exit stops rank 0); sbatch --wait says so.
        job.communicate(timeout=120)
        ended_s = time.monotonic() - killed_at
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode != 0
    assert ended_s < 60, f"the job took {ended_s:.0f} s to end after rank 1 was killed"
    text = (tmp_path / f"trainbench-{job_id}.out").read_text()
    assert re.search(r"srun: error: \S+: task 1: Killed", text), text
    assert "srun exited with status" in text and "srun exited with status 0" not in text, text
    # The rows written before the kill are kept as they were; the run never finished (no aggregates).
    after = complete_lines(csv_path)
    assert after[: len(kept)] == kept
    rows = rows_of(after)
    assert len(rows) >= 2 and all(r["status"] == "ok" and r["ranks"] == "2" for r in rows)
    assert all(r["run_type"] == "iteration" for r in rows), [r["aggregate"] for r in rows]
    assert not pids_with_env(f"SLURM_JOB_ID={job_id}"), "a rank of the killed job is still running"


def test_an_array_job_sweeps_a_flag_and_writes_a_csv_per_task(cluster, prefix, tmp_path):
    """sbatch --array=1,2 with --devices=cpu:%a: task 1 runs cpu:1, task 2 cpu:2, each one rank,
    each its own CSV named after the array job and the task."""
    job = submit(cluster, prefix, tmp_path, ["--job-name=tb-array", "--array=1,2", "--ntasks=1"],
                 ["--devices=cpu:%a", "--benchmark_filter=^train/mlp/mnist/", "--benchmark_min_time=0.05"])
    out, err = job.communicate(timeout=240)
    array_id = re.search(r"Submitted batch job (\d+)", out).group(1)
    outputs = sorted(tmp_path.glob("trainbench-*.out"))
    texts = "\n".join(f"--- {o.name}\n{o.read_text()}" for o in outputs)
    assert job.returncode == 0, f"{out}{err}\n{texts}\n{logs(cluster.folder)}"
    assert len(outputs) == 2, texts
    for task in (1, 2):
        csv_path = tmp_path / "results" / CLUSTER / f"slurm-{array_id}_{task}.csv"
        assert f"(array task {array_id}_{task})" in texts and f"CSV results/{CLUSTER}/slurm-{array_id}_{task}.csv" in texts
        rows = rows_of(complete_lines(csv_path))
        assert [r["benchmark"] for r in rows] == [f"train/mlp/mnist/cpu:{task}/fp32/bs:100"], rows
        assert rows[0]["status"] == "ok" and rows[0]["ranks"] == "1", rows[0]
        assert (tmp_path / "results" / CLUSTER / f"slurm-{array_id}_{task}-summary.md").stat().st_size > 0


def test_the_mpi_plugin_is_a_parameter(cluster, prefix, tmp_path):
    """TB_MPI=pmi2 makes srun start the ranks through PMI-2 (Debian's Open MPI has no PMI-2
    client, so the ranks here are a script that prints what srun gave it); a plugin srun lacks
    stops the job before srun, naming the variable and the plugins there are."""
    probe = tmp_path / "probe.sh"
    probe.write_text("#!/bin/sh\necho \"probe: rank=${PMI_RANK:-none} pmi2_fd=${PMI_FD:+set} pmix=${PMIX_RANK:-none}\"\n")
    probe.chmod(0o755)
    job = submit(cluster, prefix, tmp_path, ["--job-name=tb-pmi2", "--ntasks=2"], ["--devices=cpu:1"],
                 env={"TB_MPI": "pmi2", "TB_BIN": str(probe)})
    out, err = job.communicate(timeout=120)
    job_id = re.search(r"Submitted batch job (\d+)", out).group(1)
    text = (tmp_path / f"trainbench-{job_id}.out").read_text()
    assert job.returncode == 0, f"{out}{err}\n{text}"
    assert f"; {probe}; --mpi=pmi2;" in text, text
    for rank in (0, 1):
        assert f"probe: rank={rank} pmi2_fd=set pmix=none" in text, text

    job = submit(cluster, prefix, tmp_path, ["--job-name=tb-nosuch"], ["--devices=cpu:1"], env={"TB_MPI": "nosuch"})
    out, err = job.communicate(timeout=120)
    job_id = re.search(r"Submitted batch job (\d+)", out).group(1)
    text = (tmp_path / f"trainbench-{job_id}.out").read_text()
    assert job.returncode != 0, text
    assert "TB_MPI=nosuch: srun has no such MPI plugin here" in text and "pmix" in text, text
    assert "srun exited" not in text, text

"""trainbench as a ReFrame check (reframe-hpc 4.10): one run of a chosen workload on a system
partition, on every device configuration given, read back from trainbench's CSV.

    reframe -C settings.py -c trainbench_check.py -r                       # the defaults
    reframe -C settings.py -c trainbench_check.py --system=cluster:slurm -r \\
        -S workload=train/lenet5/cifar10/ -S devices=cpu:1,mpi:4 -S reference_file=refs.json

Installed, this file and settings.py (an example configuration: a local partition under
mpirun, a Slurm partition under srun) are in <prefix>/share/trainbench/reframe/, and the check
runs <prefix>/bin/trainbench unless -S trainbench=PATH names another (or -S modules=NAME loads a
module that puts one on PATH, with -S trainbench=trainbench). Variables (-S NAME=VALUE):
  workload        the benchmarks, a prefix of their names (default train/mlp/mnist/)
  devices         trainbench --devices (default cpu:1,mpi:2); the job has as many tasks as the
                  largest mpi:N (one without mpi:N runs one task)
  batch           trainbench --batch (default 0: each model's own)
  iterations      trainbench --iterations, the timed steps of each run (default 20)
  extra_flags     more trainbench flags, separated by spaces
  mpi_plugin      srun --mpi= on a partition whose launcher is srun (default pmix; or pmi2)
  reference_file  a JSON file of references per system (below); default none: the figures are
                  logged, never judged
Sanity (every one must hold, each failure names what): trainbench exited 0; the CSV has a
measured row of every configuration asked for; every row's status is ok (a failed row's message
is quoted); the loss is finite at the first and the last step of every measured row; every
mpi:N row has N replicas and passed trainbench's replica check (its replicas' weights hash alike
on every rank after training, which fails the row otherwise).
Performance variables, one per configuration (the benchmark's name after the workload, its
':', '/' and other non-word characters as '_'): samples_per_s_<config> (samples/s on the wall
clock, the median over repetitions) for every measured row, and efficiency_<config> for mpi:N
rows (scaling efficiency over cpu:1 in the same run, which needs cpu:1 in devices). ReFrame
prints each with its value; the names are what the reference file gives figures for:
    {"cluster:slurm": {"samples_per_s_mpi_2_fp32_bs_100": [19000, -0.15, null, "samples/s"],
                       "efficiency_mpi_2_fp32_bs_100": [0.6, -0.2, null, ""]},
     "*": {}}
Each entry is ReFrame's (value, lower bound, upper bound, unit), the bounds as fractions of the
value (-0.15: at most 15% below). Keys are system:partition, or '*' for every system; a figure
with no reference is logged only. A site fills in its own from a run it trusts.
"""
from __future__ import annotations

import json
import math
import re
import shlex
import statistics
import sys
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_after, run_before, sanity_function, variable
from reframe.core.exceptions import SanityError

CSV = "trainbench.csv"
# Where an installed copy finds the prefix's binary, relative to this file's folder; cmake
# --install writes it (cmake/InstallLayout.cmake.in). None in a checkout: trainbench on PATH.
BIN_FROM_HERE = None  # written by cmake --install
# Where tbcsv.py and tbdevices.py are, relative to this file's folder: scripts/ in a checkout,
# the prefix's libexec/trainbench/ once installed (cmake --install writes that path).
SCRIPTS_FROM_HERE = ".."  # written by cmake --install
sys.path.insert(0, str((Path(__file__).resolve().parent / SCRIPTS_FROM_HERE).resolve()))
import tbcsv  # noqa: E402
import tbdevices  # noqa: E402


def default_trainbench() -> str:
    if BIN_FROM_HERE is None:
        return "trainbench"
    return str((Path(__file__).resolve().parent / BIN_FROM_HERE / "trainbench").resolve())


def config_name(benchmark: str, workload: str) -> str:
    """A benchmark's configuration as a ReFrame variable name: its name after the kind, model
    and dataset where the workload names them ('train/mlp/mnist/mpi:2/fp32/bs:100' under
    workload train/mlp/mnist/ -> 'mpi_2_fp32_bs_100'; under train/ -> 'mlp_mnist_mpi_2_fp32_bs_100')."""
    named = len([p for p in workload.split("/") if p])
    parts = tbdevices.name_parts(benchmark)
    head = "/".join(parts[p] for p in tbdevices.NAME_PARTS[:min(named, 3)])
    return re.sub(r"\W+", "_", benchmark[len(head):]).strip("_")


def ranks_of(devices: str) -> int:
    """The tasks the job needs: the largest mpi:N of the devices, else 1."""
    parsed = [tbdevices.parse(d) for d in devices.split(",")]
    return max((d.ranks for d in parsed if d and d.ranks), default=1)


@sn.deferrable
def read_rows(path: str) -> list:
    if not Path(path).is_file():
        raise SanityError(f"{path}: trainbench wrote no CSV; see the job's output")
    try:
        return tbcsv.read_table(path).rows
    except tbcsv.InputError as e:
        raise SanityError(str(e)) from None


def measured(rows: list) -> dict:
    """The measured rows by benchmark (not predicted or replayed ones): the median aggregate where
    there are repetitions, else the iteration rows."""
    out: dict = {}
    for r in rows:
        if r.get("measurement", "") not in ("", "measured") or r.get("run_type") == "epoch":
            continue
        if r.get("run_type") == "aggregate" and r.get("aggregate") != "median":
            continue
        out.setdefault(r["benchmark"], []).append(r)
    for name, group in out.items():
        medians = [r for r in group if r.get("run_type") == "aggregate"]
        out[name] = medians or group
    return out


@sn.deferrable
def check_rows(rows: list, devices: list, workload: str) -> bool:
    """Raises SanityError naming the first check that fails; True when every one holds."""
    if not rows:
        raise SanityError(f"{CSV} has no rows: no benchmark matched {workload} on {','.join(devices)}")
    not_ok = [r for r in rows if r.get("status") != "ok"]
    if not_ok:
        raise SanityError("; ".join(f"{r['benchmark']}: {r.get('status')}: {r.get('message', '')}" for r in not_ok))
    runs = measured(rows)
    for device in devices:
        if not any(group[0].get("device") == device for group in runs.values()):
            raise SanityError(f"no measured row of {device} in {CSV} (rows: {', '.join(runs)})")
    for name, group in runs.items():
        for r in group:
            for column in ("loss_first", "loss_last"):
                try:
                    finite = math.isfinite(float(r.get(column, "")))
                except ValueError:
                    finite = False
                if not finite:
                    raise SanityError(f"{name}: {column} is {r.get(column)!r}, not a finite loss")
        if group[0].get("device_kind") == tbdevices.MPI:
            n = str(tbcsv.data_parallel(group[0]))
            # The row fails when the replicas' weights differ; its message says so, and from
            # schema 6 on its verdicts too.
            if any(r.get("replicas") != n or "weights differ" in r.get("message", "")
                   or "replicas_differ" in r.get("verdicts", "").split("+") for r in group):
                raise SanityError(f"{name}: the replica check did not pass on {n} replicas "
                                  f"(replicas {group[0].get('replicas')!r}: {group[0].get('message', '')})")
    return True


@sn.deferrable
def column_median(rows: list, benchmark: str, column: str) -> float:
    values = [float(r[column]) for r in measured(rows).get(benchmark, []) if r.get(column)]
    if not values:
        raise SanityError(f"{benchmark}: no {column} in {CSV}")
    return statistics.median(values)


@rfm.simple_test
class TrainbenchCheck(rfm.RunOnlyRegressionTest):
    descr = "trainbench: training throughput of one workload on the partition's device configurations"
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    tags = {"trainbench", "benchmark"}
    maintainers = ["trainbench"]

    trainbench = variable(str, value=default_trainbench())
    workload = variable(str, value="train/mlp/mnist/")
    devices = variable(str, value=tbdevices.ONE_CPU_AND_TWO_RANKS)
    batch = variable(int, value=0)
    iterations = variable(int, value=20)
    extra_flags = variable(str, value="")
    mpi_plugin = variable(str, value="pmix")
    reference_file = variable(str, value="")
    time_limit = "10m"

    @run_after("init")
    def set_up_run(self):
        self.executable = self.trainbench
        self.num_tasks = ranks_of(self.devices)
        self.num_tasks_per_node = self.num_tasks
        flags = [f"--benchmark_filter=^{self.workload}", f"--devices={self.devices}",
                 f"--iterations={self.iterations}", f"--csv={CSV}"]
        if self.batch:
            flags.append(f"--batch={self.batch}")
        self.executable_opts = flags + shlex.split(self.extra_flags)
        self.postrun_cmds = ['echo "trainbench exited with status $?"']
        self.keep_files = [CSV]

    # In the pipeline (not at load time, where ReFrame would skip the check and pass): a file
    # that cannot be read fails the check, naming it.
    @run_after("setup")
    def load_references(self):
        if not self.reference_file:
            return
        path = Path(self.reference_file)
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"-S reference_file={path}: not a readable JSON file of references ({e}); "
                             f"trainbench_check.py's header shows its form") from None
        self.reference = {system: {name: tuple(value) for name, value in figures.items()}
                          for system, figures in table.items()}

    @run_before("run")
    def set_launcher(self):
        if type(self.job.launcher).registered_name == "srun":
            self.job.launcher.options += [f"--mpi={self.mpi_plugin}", "--kill-on-bad-exit=1"]

    @sanity_function
    def validate(self):
        devices = [d for d in self.devices.split(",") if d]
        return sn.all([
            sn.assert_found(r"trainbench exited with status 0$", self.stdout,
                            msg="trainbench exited with an error (see the job's output)"),
            sn.assert_not_found(r"trainbench: \d+ run\(s\) failed", self.stderr,
                                msg="trainbench reported failed runs (stderr names them)"),
            sn.assert_not_found(r"trainbench: error:", self.stderr, msg="trainbench stopped with an error (see stderr)"),
            check_rows(read_rows(str(Path(self.stagedir) / CSV)), devices, self.workload),
        ])

    @run_before("performance")
    def set_performance_variables(self):
        rows = read_rows(str(Path(self.stagedir) / CSV)).evaluate()
        variables = {}
        for name, group in measured(rows).items():
            config = config_name(name, self.workload)
            variables[f"samples_per_s_{config}"] = sn.make_performance_function(
                column_median(rows, name, "samples_per_s"), "samples/s")
            if tbcsv.data_parallel(group[0]) and group[0].get("scaling_efficiency"):
                variables[f"efficiency_{config}"] = sn.make_performance_function(
                    column_median(rows, name, "scaling_efficiency"), "")
        self.perf_variables = variables

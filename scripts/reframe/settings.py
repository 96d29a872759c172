"""A ReFrame configuration (reframe-hpc 4.10) for trainbench_check.py: one system, `cluster`, on
whatever host ReFrame runs, with two partitions:
  local  runs on this host, the ranks started by mpirun (Open MPI)
  slurm  submits to Slurm with sbatch and starts the ranks with srun; it polls with squeue, so a
         cluster without accounting (sacct) will do
    reframe -C settings.py -c trainbench_check.py --system=cluster:local -r
    reframe -C settings.py -c trainbench_check.py --system=cluster:slurm -r
A site copies it and sets its own: the system's name and hostnames, the Slurm partition, account
and options (TB_SLURM_ACCESS below), modules that put trainbench on PATH (environs), the
references (trainbench_check.py's -S reference_file). Environment:
  TB_SLURM_ACCESS  sbatch options of the slurm partition, separated by spaces (e.g.
                   '--partition=gpu --account=proj'; default none: Slurm's default partition)
As root (containers, CI), Open MPI's mpirun is allowed to run, as it refuses to by default.
"""
import os
import shlex

mpirun_env = []
if os.geteuid() == 0:
    mpirun_env = [["OMPI_ALLOW_RUN_AS_ROOT", "1"], ["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"]]

site_configuration = {
    "systems": [
        {
            "name": "cluster",
            "descr": "trainbench's example system: this host and its Slurm",
            "hostnames": [".*"],
            "partitions": [
                {
                    "name": "local",
                    "descr": "this host, ranks under mpirun",
                    "scheduler": "local",
                    "launcher": "mpirun",
                    "environs": ["trainbench"],
                    "env_vars": mpirun_env + [["OMPI_MCA_rmaps_base_oversubscribe", "1"]],
                    "max_jobs": 1,
                },
                {
                    "name": "slurm",
                    "descr": "Slurm: sbatch, ranks under srun",
                    "scheduler": "squeue",
                    "launcher": "srun",
                    "access": shlex.split(os.environ.get("TB_SLURM_ACCESS", "")),
                    "environs": ["trainbench"],
                    "max_jobs": 4,
                },
            ],
        }
    ],
    "environments": [
        {
            # trainbench's environment: the modules that put it on PATH go here.
            "name": "trainbench",
            "modules": [],
        }
    ],
}

"""A row's device as trainbench names it: the one parser the scripts share (tbcsv, tbfilters,
tbplot), held against the C++ table of device kinds (bench/plan/device_kinds.cpp) by
tests/scripts/test_devices.py, which compares KINDS with `trainbench --list_configs --json`.

    cpu               all cores, one replica            cpu:T             T threads
    cpu:T/jobs:K      K processes of T threads          gpu:1             one GPU
    gpu:N             N GPUs, or N ranks' GPUs, or N replicas sharing one GPU (the variant says)
    gpu:1/threads:K   K replicas as threads on one GPU  gpu:1/jobs:K      K processes on one GPU
    mpi:N             N MPI ranks, a CPU replica each

Standard library only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Each kind's pattern over a row's device, with what it runs on and how: the patterns are the C++
# table's (kinds that share a pattern, the four of gpu:N, are one line here).
KINDS = (
    ("^cpu$", "cpu", "one_replica"),
    ("^cpu:(?P<threads>[0-9]+)$", "cpu", "one_replica"),
    ("^cpu:(?P<threads>[0-9]+)/jobs:(?P<jobs>[0-9]+)$", "cpu", "processes"),
    ("^gpu:1$", "gpu", "one_replica"),
    ("^gpu:(?P<devices>[0-9]+)$", "gpu", "replicas"),
    ("^gpu:1/threads:(?P<replicas>[0-9]+)$", "gpu", "replicas"),
    ("^gpu:1/jobs:(?P<jobs>[0-9]+)$", "gpu", "processes"),
    ("^mpi:(?P<ranks>[0-9]+)$", "cpu", "replicas"),
)
_COMPILED = tuple((re.compile(p), backend, run) for p, backend, run in KINDS)
# A device and, where it has one, its /jobs:K or /threads:K, inside a benchmark name.
SPLIT_PREFIXES = ("jobs:", "threads:")


@dataclass(frozen=True)
class Device:
    text: str
    backend: str  # cpu, gpu
    run: str  # one_replica, replicas, processes
    threads: int | None = None  # cpu:T's
    devices: int | None = None  # gpu:N's GPUs (1 for gpu:1)
    ranks: int | None = None  # mpi:N's
    jobs: int | None = None  # /jobs:K's processes
    replicas: int | None = None  # /threads:K's

    @property
    def prefix(self) -> str:
        return self.text.partition(":")[0]

    @property
    def data_parallel(self) -> int | None:
        """N of gpu:N or mpi:N for N >= 2: replicas sharing their gradients."""
        n = self.devices if self.prefix == "gpu" and self.run == "replicas" else self.ranks
        return n if n is not None and n >= 2 else None


def parse(device: str) -> Device | None:
    """The device a row names, or None for text no kind takes."""
    for pattern, backend, run in _COMPILED:
        m = pattern.fullmatch(device)
        if m:
            counts = {k: int(v) for k, v in m.groupdict().items()}
            if device == "gpu:1":
                counts["devices"] = 1
            if counts.get("devices") == 1 and run == "replicas":
                continue  # gpu:1 is one replica
            return Device(device, backend, run, **counts)
    return None


def device_count(device: str) -> int | None:
    """N of a `gpu:N` device (N GPUs), None for anything else."""
    d = parse(device)
    return d.devices if d else None


def data_parallel_count(device: str) -> int | None:
    """N of gpu:N and mpi:N for N >= 2, None for anything else."""
    d = parse(device)
    return d.data_parallel if d else None


def sort_key(device: str) -> tuple:
    """cpu, cpu:1, cpu:2, ..., gpu:1, gpu:2, ..., mpi:2: by kind, then all-cores before N, then N."""
    d = parse(device)
    n = None if d is None else (d.threads or d.devices or d.ranks)
    prefix = device.partition(":")[0]
    return (prefix != "cpu", prefix, n is not None, n or 0, device)


def split_name(parts: list[str]) -> list[str]:
    """A benchmark name's parts with the device's /jobs:K or /threads:K joined to it."""
    if len(parts) > 4 and parts[4].startswith(SPLIT_PREFIXES):
        return parts[:3] + [parts[3] + "/" + parts[4]] + parts[5:]
    return parts

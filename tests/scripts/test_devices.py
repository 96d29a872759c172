"""The scripts' device grammar (scripts/tbdevices.py) against the C++ table of device kinds
(bench/plan/device_kinds.cpp, `trainbench --list_configs --json`): one grammar, two languages."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import SCRIPTS

import tbdevices

ROOT = SCRIPTS.parent
BINARY = Path(os.environ.get("TRAINBENCH", ROOT / "build" / "release" / "bench" / "trainbench"))


def cpp_kinds():
    if not BINARY.exists():
        pytest.skip(f"no trainbench at {BINARY} to hold the grammar against (build it, or set $TRAINBENCH)")
    r = subprocess.run([str(BINARY), "--list_configs", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["format"] == 1
    return doc["kinds"]


def test_the_scripts_parse_every_device_the_cpp_table_writes_alike():
    """Every kind's pattern, backend and run are the scripts' too, and nothing more: a kind added
    to bench/plan/device_kinds.cpp fails here until tbdevices.KINDS has it."""
    cpp = {(k["pattern"], k["backend"], k["run"]) for k in cpp_kinds()}
    assert cpp == set(tbdevices.KINDS)


@pytest.mark.parametrize("device, fields", [
    ("cpu", dict(backend="cpu", run="one_replica")),
    ("cpu:2", dict(backend="cpu", run="one_replica", threads=2)),
    ("cpu:1/jobs:2", dict(backend="cpu", run="processes", threads=1, jobs=2)),
    ("gpu:1", dict(backend="gpu", run="one_replica", devices=1)),
    ("gpu:8", dict(backend="gpu", run="replicas", devices=8)),
    ("gpu:1/threads:4", dict(backend="gpu", run="replicas", replicas=4)),
    ("gpu:1/jobs:4", dict(backend="gpu", run="processes", jobs=4)),
    ("mpi:2", dict(backend="cpu", run="replicas", ranks=2)),
])
def test_each_device_reads_as_its_kind(device, fields):
    d = tbdevices.parse(device)
    assert d is not None
    for name, value in fields.items():
        assert getattr(d, name) == value, name


def test_what_is_no_device_and_the_counts_scripts_ask_for():
    for text in ("", "gpu", "tpu:1", "gpu:all", "gpu:2/jobs:2", "cpu/jobs:2", "mpi:x"):
        assert tbdevices.parse(text) is None, text
    assert [tbdevices.data_parallel_count(d) for d in ("gpu:1", "gpu:2", "mpi:4", "cpu:2", "gpu:1/threads:2")] == [
        None, 2, 4, None, None]
    assert tbdevices.device_count("gpu:4") == 4 and tbdevices.device_count("mpi:4") is None
    assert sorted(["mpi:2", "gpu:2", "cpu:2", "gpu:1", "cpu", "cpu:1"], key=tbdevices.sort_key) == [
        "cpu", "cpu:1", "cpu:2", "gpu:1", "gpu:2", "mpi:2"]
    assert tbdevices.split_name("train/mlp/mnist/gpu:1/jobs:2/fp32/bs:100".split("/"))[3] == "gpu:1/jobs:2"

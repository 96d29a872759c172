"""The scripts' device grammar and kinds (scripts/tbdevices.py) against the C++ table of device
kinds (bench/plan/device_kinds.cpp, `trainbench --list_configs --json`, format 2): one table, two
languages; and the kind tbcsv's upgrade gives an older row (tbdevices.kind_of), as the C++ plans
it."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import SCRIPTS

import tbdevices

ROOT = SCRIPTS.parent
BINARY = Path(os.environ.get("TRAINBENCH", ROOT / "build" / "release" / "bench" / "trainbench"))


def list_configs() -> dict:
    """`trainbench --list_configs --json`, format 2: kinds, variant_flags, verdicts."""
    if not BINARY.exists():
        pytest.skip(f"no trainbench at {BINARY} to hold the grammar against (build it, or set $TRAINBENCH)")
    r = subprocess.run([str(BINARY), "--list_configs", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["format"] == 2, "a new format of --list_configs --json: teach tests/scripts what changed"
    return doc


def test_the_scripts_know_every_kind_of_the_cpp_table_alike():
    """Every kind's name, pattern, backend, run and check word are the scripts' too, in the
    table's order, and nothing more: a kind added to bench/plan/device_kinds.cpp fails here until
    tbdevices.KINDS has it."""
    cpp = [(k["name"], k["pattern"], k["backend"], k["run"], k["check_word"])
           for k in list_configs()["kinds"]]
    assert cpp == [(k.name, k.pattern, k.backend, k.run, k.check_word) for k in tbdevices.KINDS]


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
    for text in ("", "gpu", "tpu:1", "gpu:all", "gpu:2/jobs:2", "cpu/jobs:2", "mpi:x", "gpu:01"):
        assert tbdevices.parse(text) is None, text
    assert [tbdevices.parse(d).data_parallel
            for d in ("gpu:1", "gpu:2", "mpi:4", "mpi:1", "cpu:2", "gpu:1/threads:2")] == [
        None, 2, 4, None, None, None]
    assert tbdevices.device_count("gpu:4") == 4 and tbdevices.device_count("mpi:4") is None
    assert sorted(["mpi:2", "gpu:2", "cpu:16", "cpu:2", "gpu:1", "cpu", "cpu:1"], key=tbdevices.sort_key) == [
        "cpu", "cpu:1", "cpu:2", "cpu:16", "gpu:1", "gpu:2", "mpi:2"]
    # A GPU's jobs and threads are one GPU's: after gpu:1, before gpu:2, K by number (they sorted
    # before gpu:1, as if all cores); a CPU's jobs after their cpu:T alike.
    split = ["cpu:1", "cpu:1/jobs:2", "cpu:1/jobs:10", "cpu:2", "gpu:1", "gpu:1/threads:2", "gpu:1/threads:10",
             "gpu:1/jobs:2", "gpu:1/jobs:10", "gpu:2"]
    assert sorted(reversed(split), key=tbdevices.sort_key) == split
    assert tbdevices.split_name("train/mlp/mnist/gpu:1/jobs:2/fp32/bs:100".split("/"))[3] == "gpu:1/jobs:2"


@pytest.mark.parametrize("device, cells, kind, backend, parallel", [
    ("cpu", {}, "cpu", "cpu", None),
    ("cpu:2", {}, "cpu:T", "cpu", None),
    ("cpu:1/jobs:2", {}, "cpu:T/jobs:K", "cpu", None),
    ("gpu:1", {}, "gpu:1", "gpu", None),
    ("gpu:4", {}, "gpu:N over NCCL", "gpu", 4),
    ("gpu:2", {"variant": "shared_device"}, "gpu:N sharing one GPU", "gpu", None),
    ("gpu:2", {"shared_device": True}, "gpu:N sharing one GPU", "gpu", None),
    ("gpu:2", {"ranks": 2}, "gpu:N across ranks", "gpu", 2),
    ("gpu:2", {"ranks": 2, "emulated_nodes": True}, "gpu:N as emulated nodes", "gpu", None),
    ("gpu:2", {"emulated_nodes": True}, "gpu:N over NCCL", "gpu", 2),  # emulated nodes need ranks
    ("gpu:1/threads:2", {}, "gpu:1/threads:K", "gpu", None),
    ("gpu:1/jobs:2", {}, "gpu:1/jobs:K", "gpu", None),
    ("mpi:2", {"ranks": 2}, "mpi:N", "cpu", 2),
    ("mpi:2", {"ranks": 2, "variant": "emulated_nodes"}, "mpi:N", "cpu", 2),  # CPU ranks scale
    ("gpu:8", {"variant": "predicted:nvlink4", "measurement": "predicted"}, "gpu:N over NCCL", "gpu", 8),
    ("mpi:2", {"variant": "predicted:measured", "measurement": "predicted"}, "mpi:N", "cpu", 2),
    ("gpu:2", {"variant": "emulated_nodes/replayed", "ranks": 2, "emulated_nodes": True,
               "measurement": "replayed"}, "gpu:N over NCCL", "gpu", 2),
    ("gpu:all", {}, "gpu:N over NCCL", "gpu", None),  # skipped where no GPU: no N
    ("tpu:1", {}, "", "", None),
])
def test_an_older_row_gets_the_kind_trainbench_plans(device, cells, kind, backend, parallel):
    """bench/plan/device_kinds.cpp plan_device: the kinds' order, what each needs (ranks, a
    repeated --gpus, emulated nodes), and data_parallel only where N devices of their own share
    gradients; a predicted row stands for gpu:N over NCCL, or mpi:N."""
    facts = tbdevices.kind_of(device, **cells)
    assert (facts.name, facts.backend, facts.data_parallel) == (kind, backend, parallel)
    assert tbdevices.checks_only(facts.name) == (facts.name in ("gpu:N sharing one GPU",
                                                                "gpu:N as emulated nodes"))


def test_variant_rules_are_the_cpps():
    """What each comparison drops of a variant (baselines.cpp, predict.cpp where_item), and the
    order items are joined in (configs.cpp join_variant)."""
    v = "optimizer:adam/data_on_device/cuda_graph/emulated_nodes/nodes:2"
    assert tbdevices.scaling_variant(v) == "optimizer:adam/data_on_device/cuda_graph"
    assert tbdevices.cpu_row_variant(v) == "optimizer:adam"
    assert tbdevices.comparable_variant("augment/emulated_nodes/predicted:10gbit/network:ib") == "augment"
    assert tbdevices.measured_variant("augment/nodes:2/predicted:10gbit/network:ib") == "augment/nodes:2"
    assert tbdevices.join_variant(["predicted:x", "nodes:2", "optimizer:adam", "nodes:2"]) == (
        "optimizer:adam/nodes:2/predicted:x")
    assert tbdevices.repaired_variant("", True, False, "") == "shared_device"
    assert tbdevices.repaired_variant("augment", False, True, "pcie5") == "augment/predicted:pcie5"
    assert tbdevices.variant_words("shared_device/predicted:nvlink4", "gpu:2") == [
        "2 replicas", "on one GPU", "predicted (nvlink4)"]


def test_a_names_parts_hold_the_devices_slash_and_the_batch_without_its_prefix():
    assert tbdevices.name_parts("train/mlp/mnist/gpu:1/threads:4/fp32/bs:100") == dict(
        kind="train", model="mlp", dataset="mnist", device="gpu:1/threads:4", precision="fp32", batch="100")
    assert tbdevices.name_parts("train/mlp/mnist/cpu:2/jobs:2/fp32/bs:100")["device"] == "cpu:2/jobs:2"


def test_an_older_rows_cells_are_read_as_trainbench_wrote_them():
    """older_row_kind from a row's cells: no ranks column is one rank, a predicted row stands for
    gpu:N over NCCL whatever its ranks ran as, a `1` with spaces is a 1; on_emulated_nodes takes
    `1` only."""
    assert tbdevices.older_row_kind("gpu:2", {}).name == "gpu:N over NCCL"
    assert tbdevices.older_row_kind("gpu:2", {"shared_device": " 1 "}).name == "gpu:N sharing one GPU"
    predicted = {"variant": "emulated_nodes/predicted:nvlink4", "ranks": "2", "emulated_nodes": "1",
                 "measurement": "predicted"}
    assert tbdevices.older_row_kind("gpu:2", predicted) == tbdevices.KindFacts("gpu:N over NCCL", "gpu", 2)
    emulated = [tbdevices.on_emulated_nodes({"emulated_nodes": v}) for v in ("1", "0", "")]
    assert emulated == [True, False, False]


def test_what_a_kind_that_checks_a_path_checks():
    shared = "gpu:N sharing one GPU"
    assert tbdevices.what_it_checks(shared, "gpu:2") == "2 replicas on one GPU: correctness, not scaling"
    assert tbdevices.what_it_checks("gpu:N as emulated nodes", "gpu:4") == (
        "4 ranks as emulated nodes on one GPU: the multi-node path, not scaling")
    assert tbdevices.what_it_checks(shared) == "N replicas on one GPU: correctness, not scaling"
    assert tbdevices.what_it_checks("gpu:N over NCCL", "gpu:2") == ""


def test_which_kinds_are_one_replica_one_gpu_and_all_cores():
    kinds = [k.name for k in tbdevices.KINDS]
    assert [k for k in kinds if tbdevices.is_one_replica(k)] == ["cpu", "cpu:T", "gpu:1"]
    assert [k for k in kinds if tbdevices.is_one_gpu(k)] == ["gpu:1"]
    assert [k for k in kinds if tbdevices.is_all_cores(k)] == ["cpu"]


def test_a_variants_items_flags_and_values():
    """A replay drops out of the comparable and the measured variant like a prediction; unknown
    flags join last; a flag's value is None where the variant lacks it, '' for a bare switch; a
    predicted row without a link gets `predicted:unknown`, one with a link keeps it."""
    assert tbdevices.comparable_variant("augment/replayed") == "augment"
    assert tbdevices.measured_variant("augment/nodes:2/replayed") == "augment/nodes:2"
    assert tbdevices.join_variant(["zeta", "optimizer:adam"]) == "optimizer:adam/zeta"
    assert [tbdevices.is_flag(t) for t in ("optimizer:adam", "cuda_graph", "tpu:1")] == [True, True, False]
    assert tbdevices.names_a_prediction("from:cpu:1") and not tbdevices.names_a_prediction("nodes:2")
    assert tbdevices.MEASURED_FLAGS == tuple(f for f in tbdevices.VARIANT_FLAGS
                                             if f not in ("predicted", "network", "from"))
    v = "timeline:off/augment"
    assert [tbdevices.variant_value(v, f) for f in ("timeline", "augment", "nodes")] == ["off", "", None]
    assert tbdevices.predicted_link("network:ib/predicted:nvlink4") == "nvlink4"
    assert tbdevices.repaired_variant("", False, True, "") == "predicted:unknown"
    assert tbdevices.repaired_variant("predicted:nvlink4", False, True, "pcie5") == "predicted:nvlink4"

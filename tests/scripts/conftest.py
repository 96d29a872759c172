"""Shared helpers of the tests of scripts/plot.py and scripts/compare.py: where the scripts
and fixtures are, running a script as a user would, and importing it as a module."""
import csv
import importlib
import importlib.util
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Bad inputs: fixture file (None: a path that does not exist) and a word the message must hold.
BAD_INPUTS = {
    "missing": (None, "no such file"),
    "empty": ("bad_empty.csv", "empty"),
    "header_only": ("bad_header_only.csv", "empty"),
    "not_trainbench": ("bad_not_trainbench.csv", "no schema_version column"),
    "schema_v9": ("bad_schema_v9.csv", "unknown schema_version '9'"),
    "ragged": ("bad_ragged.csv", "fields"),
}

if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))


def load_generator():
    """fixtures/generate.py as a module: its headers and machines are what the fixtures hold."""
    spec = importlib.util.spec_from_file_location("generate", FIXTURES / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    return generate


def data_file(name: str) -> str:
    return str(FIXTURES / name)


def bad_path(kind: str, tmp_path: Path) -> str:
    name = BAD_INPUTS[kind][0]
    return str(tmp_path / "does_not_exist.csv") if name is None else data_file(name)


def run_script(script: str, *args, env=None) -> subprocess.CompletedProcess:
    """Runs scripts/<script> with the distribution's Python, as the docs tell users to."""
    return subprocess.run([sys.executable, str(SCRIPTS / script), *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit status 2 and a single line on stderr naming what is wrong, never a traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def rewrite_csv(src: str, dst: Path, drop=(), keep_row=lambda row: True,
                change=lambda row: {}) -> str:
    """A copy of a fixture without some columns or rows: 'the columns present' cases; change(row)
    gives the cells to set on each row kept."""
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    header = [c for c in rows[0] if c not in drop]
    with open(dst, "w", newline="") as f:
        w = csv.DictWriter(f, header, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows({**r, **change(r)} for r in rows if keep_row(r))
    return str(dst)


def written(rows: list[dict], path) -> str:
    """The rows written to path as a CSV, with their header."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return str(path)


@pytest.fixture(scope="session")
def compare_mod():
    return importlib.import_module("compare")


@pytest.fixture(scope="session")
def tbcsv_mod():
    return importlib.import_module("tbcsv")


def medians(path: str) -> dict:
    """benchmark -> median samples/s of the ok iteration rows, read without the scripts."""
    values: dict = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["status"] == "ok" and r["run_type"] == "iteration" and r["samples_per_s"]:
                values.setdefault(r["benchmark"], []).append(float(r["samples_per_s"]))
    return {k: statistics.median(v) for k, v in values.items()}

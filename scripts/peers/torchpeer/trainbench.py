"""Asking the trainbench binary what to train and what to write: `--list_models --json` for
the workloads, `--csv_header --json` for the schema (its version and columns). An InputError
naming the binary and the fix where it cannot answer. Standard library only."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import NamedTuple

from torchpeer import PROG, InputError, tbprefix
from torchpeer.workloads import Workload, json_fields, workload_from_json

# The schema version and columns come from the binary (`--csv_header --json`), so that the peer's
# rows are always of the schema the trainbench beside it writes. What the peer needs of that
# schema: the columns it fills beyond the first versions', added by version 4 (variant to
# peer_settings), 5 (the device clock) and 6 (the kind's facts); a trainbench without them is
# older than OLDEST_SCHEMA and is refused.
SCHEMA_COLUMNS = ("variant", "load_avg_1m", "measurement", "peer_settings", "device_step_time_s",
                  "device_samples_per_s", "device_kind", "backend", "data_parallel", "verdicts")
OLDEST_SCHEMA = "6"
DEFAULT_TRAINBENCH = tbprefix.TRAINBENCH  # build/release/bench/trainbench, or <prefix>/bin/trainbench
JSON_FORMAT = 1  # the "format" of trainbench --list_models --json that the peer reads


def how_to_get_trainbench(verb: str) -> str:
    if tbprefix.INSTALLED:
        return (f"{tbprefix.REINSTALL}, or give another trainbench with --trainbench PATH or "
                f"$TRAINBENCH")
    return (f"{verb} it with `cmake --build build/release` (or scripts/bench.sh, which also runs "
            f"it), or give another with --trainbench PATH or $TRAINBENCH")


def ask_trainbench(binary: Path, *flags: str) -> str:
    """What `binary flags` prints; an InputError naming the binary and the fix when it cannot
    answer."""
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise InputError(f"{binary}: no trainbench binary there (this script reads its workloads "
                         f"and CSV columns from it): {how_to_get_trainbench('build')}")
    command = " ".join([str(binary), *flags])
    try:
        r = subprocess.run([str(binary), *flags], capture_output=True, text=True,
                           errors="replace", timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise InputError(f"{command}: cannot run it ({e}): {how_to_get_trainbench('rebuild')}") from None
    if r.returncode != 0:
        said = ([line for line in r.stderr.splitlines() if line.strip()] or ["no message"])[-1]
        raise InputError(f"{command} exited with status {r.returncode} ({said.strip()[:200]}), as "
                         f"a trainbench older than {' '.join(flags)} does: {how_to_get_trainbench('rebuild')}")
    return r.stdout


def read_workloads(binary: Path) -> list[Workload]:
    """trainbench --list_models --json: every workload trainbench defines, in its order."""
    out = ask_trainbench(binary, "--list_models", "--json")
    command = f"{binary} --list_models --json"
    if not out.lstrip().startswith("{"):
        first = (out.strip().splitlines() or [""])[0]
        raise InputError(f"{command} printed no JSON (its first line: {first[:60]!r}): a trainbench "
                         f"older than --json; {how_to_get_trainbench('rebuild')}")
    try:
        doc = json.loads(out)
        fmt = json_fields(doc, "the JSON", format=int)["format"]
        if fmt != JSON_FORMAT:
            raise ValueError(f"format {fmt}, and this script reads format {JSON_FORMAT}")
        entries = doc.get("workloads")
        if not isinstance(entries, list) or not entries:
            raise ValueError("no list of workloads")
        return [workload_from_json(entry, i) for i, entry in enumerate(entries)]
    except ValueError as e:  # json.JSONDecodeError is one
        raise InputError(f"{command}: not the workload list this script reads ({e}); "
                         f"{how_to_get_trainbench('rebuild')}, or update {PROG}") from None


class Schema(NamedTuple):
    """What trainbench writes (results/SCHEMA.md): the schema_version every row carries, and the
    columns in header order."""
    version: str
    columns: list[str]


def read_schema(binary: Path) -> Schema:
    """trainbench --csv_header --json: the schema trainbench writes, version included, which the
    peer's rows take as their own."""
    out = ask_trainbench(binary, "--csv_header", "--json")
    command = f"{binary} --csv_header --json"
    try:
        doc = json_fields(json.loads(out), "the JSON", schema_version=str, columns=list)
        version, columns = doc["schema_version"], doc["columns"]
        if not version:
            raise ValueError("an empty schema_version")
        if not all(isinstance(c, str) and c for c in columns) or columns[:1] != ["schema_version"]:
            raise ValueError("columns is not a list of names starting with schema_version")
    except ValueError as e:  # json.JSONDecodeError is one
        raise InputError(f"{command}: not the schema this script reads ({e}); "
                         f"{how_to_get_trainbench('rebuild')}, or update {PROG}") from None
    missing = [c for c in SCHEMA_COLUMNS if c not in columns]
    if missing:
        raise InputError(f"{command}: schema {version} has no {', '.join(missing)} column(s), "
                         f"which this script fills: a trainbench older than schema {OLDEST_SCHEMA}; "
                         f"{how_to_get_trainbench('rebuild')}")
    return Schema(version, columns)

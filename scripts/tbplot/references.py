"""Reference runs (issue 37): default-set runs of known machines kept under results/, each with
a small index, results/<machine>/reference.json, that says what ran where and which clock its
throughput is on. bench.sh and plot.py (--reference) draw them beside this machine's rows in the
headline, and the report and the run's summary compare this machine's cpu row with them
(tbplot/versus.py), so that a machine without a GPU still sees what a GPU does for its
workloads. No matplotlib here: scripts/reference_table.py runs without it.

The index (JSON, every key required; `csv` is relative to the index's folder):
  name     what the charts and tables call the machine ("H100")
  machine  one line on the machine and how it was lent
  cpu, gpu the CPU model and cores, the GPU ("" for none)
  date     the run's date; commit: the git_commit its rows carry
  csv      the run's CSV
  clock    "wall": samples_per_s on the wall clock in the file (schema 5 and later); "device": a GPU row's
           samples_per_s is the device clock's in the file (schema 4 and earlier) and tbcsv reads
           it on the wall clock from wall_step_time_s
  about    what ran (the set, the devices, the precisions), one line
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import tbcsv
import tbprefix

INDEX = "reference.json"
FIELDS = ("name", "machine", "cpu", "gpu", "date", "commit", "csv", "clock", "about")
CLOCKS = {"wall": "samples/s on the wall clock in the file",
          "device": "a GPU row's samples/s on the device clock in the file (CUDA events), read "
                    "on the wall clock from wall_step_time_s"}
# Where `all` looks: every index under the repository's results/, or, installed, under
# <prefix>/share/trainbench/results/ (tbprefix.py).
RESULTS = tbprefix.RESULTS
# TB_REFERENCE's and --reference's words besides folders.
ALL, NONE = "all", "none"


@dataclass
class Reference:
    """One reference run: its index's fields and its CSV, read by tbcsv (on the wall clock)."""
    index: Path
    name: str
    machine: str
    cpu: str
    gpu: str
    date: str
    commit: str
    csv: Path
    clock: str
    about: str
    table: tbcsv.Table

    def describe(self) -> str:
        """One line for a chart's notes and the report: what, where, when, which clock."""
        return (f"{self.name}: {self.machine}; {self.about}; {display(self.csv)} ({self.date}, "
                f"commit {self.commit}); {CLOCKS[self.clock]}")


def display(path: Path) -> str:
    """A path as the user would type it: relative to the repository where it lies in it (in a
    checkout), else in full."""
    if tbprefix.INSTALLED:
        return str(path)
    try:
        return str(path.resolve().relative_to(RESULTS.parent))
    except ValueError:
        return str(path)


def find_indexes(root: Path = RESULTS) -> list[Path]:
    """Every reference index under root, in path order."""
    return sorted(root.glob(f"**/{INDEX}"))


def chosen_indexes(choices: list[str] | None) -> list[Path]:
    """The indexes that TB_REFERENCE or --reference name: words separated by commas (the option
    may also be repeated); `all` is every index under results/, `none` (or nothing) none, any
    other word a folder holding a reference.json, or the index itself."""
    words = [w.strip() for c in choices or [] for w in c.split(",") if w.strip()]
    if NONE in words:
        if len(words) > 1:
            raise tbcsv.InputError(f"--reference: '{NONE}' cannot be combined with "
                                   f"{', '.join(w for w in words if w != NONE)}")
        return []
    out: list[Path] = []
    for word in words:
        if word == ALL:
            if not RESULTS.is_dir():
                raise tbcsv.InputError(f"--reference {ALL}: {RESULTS} does not exist (the reference "
                                       f"runs of {tbprefix.where()}): {tbprefix.REINSTALL}, or "
                                       f"pass --reference {NONE} (TB_REFERENCE={NONE})")
            out += find_indexes()
            continue
        path = Path(word)
        index = path / INDEX if path.is_dir() else path
        if not index.is_file():
            raise tbcsv.InputError(f"{word}: no {INDEX} there (a reference run's index, see "
                                   f"docs/scripts.md; '{ALL}' takes every one under results/, "
                                   f"'{NONE}' none)")
        out.append(index)
    return list(dict.fromkeys(p.resolve() for p in out))


def load(index: Path) -> Reference:
    """Reads one index and its CSV; InputError naming the file on anything missing."""
    try:
        fields = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise tbcsv.InputError(f"{index}: not a readable reference index ({e})") from None
    if not isinstance(fields, dict):
        raise tbcsv.InputError(f"{index}: not a reference index (a JSON object is expected)")
    missing = [f for f in FIELDS if not isinstance(fields.get(f), str)]
    if missing:
        raise tbcsv.InputError(f"{index}: missing {', '.join(missing)} (a reference index has "
                               f"{', '.join(FIELDS)})")
    if fields["clock"] not in CLOCKS:
        raise tbcsv.InputError(f"{index}: clock {fields['clock']!r} is neither "
                               f"{' nor '.join(map(repr, CLOCKS))}")
    csv = index.parent / fields["csv"]
    values = {f: fields[f] for f in FIELDS if f != "csv"}
    return Reference(index=index, csv=csv, table=tbcsv.read_table(near(csv)), **values)


def near(path: Path) -> str:
    """The path as messages should name it: relative to the working folder where it lies
    under it (results/h100/default-20261124.csv from the repository), else absolute."""
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else str(path)


def load_references(choices: list[str] | None, inputs: list[str] = ()) -> tuple[list, list]:
    """The chosen references, less those whose CSV is among the inputs (their rows are drawn as
    this machine's already); returns (references, lines saying which were left out)."""
    given = {Path(p).resolve() for p in inputs}
    refs, said = [], []
    for index in chosen_indexes(choices):
        ref = load(index)
        if ref.csv.resolve() in given:
            said.append(f"reference {ref.name}: {display(ref.csv)} is among the inputs, not "
                        f"drawn twice")
            continue
        refs.append(ref)
    return refs, said

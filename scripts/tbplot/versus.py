"""This machine against the reference runs (issue 37): per workload, each reference's cpu, gpu:1
and predicted gpu:N samples/s over this machine's cpu row ("H100 gpu:1 / this cpu = 584x"), on
the wall clock, paired as x cpu is (tbcsv.cpu_pair, the rule trainbench pairs a run's own rows
with and tbcsv's upgrade pairs older rows with: the same precision and batch where this
machine's CPU ran them, else fp32 and its cpu row's batch) and labelled with what differs
(`bf16 vs fp32`, `bs 128 vs 8`), and what differs in versions between the two runs.
The headline labels the reference bars with the same figures; the report, scripts/bench.sh's
summary (scripts/reference_table.py) and the console show the table. No matplotlib here."""
from __future__ import annotations

from dataclasses import dataclass

import tbcsv
import tbdevices
from tbplot.figures import si
from tbplot.model import (Config, Data, Speedup, config_name, config_of, config_sort_key,
                          panel_title, times)

# The version columns two runs are compared on: the code, the file's schema and the libraries.
VERSION_COLUMNS = ("git_commit", "schema_version", "compiler", "onednn", "benchmark_lib")


def reference_bars(data: Data) -> dict:
    """(reference, config) -> Sample: each reference's plain cpu and gpu:1 rows, and of its
    predictions the largest N per workload, precision, batch and link (the others are in its own
    summary)."""
    rows = [r for r in data.reference_rows if tbcsv.is_ok(r)]
    measured = tbcsv.samples([r for r in rows if not tbcsv.is_predicted(r)], data.key,
                             "samples_per_s")
    predicted = tbcsv.samples([r for r in rows if tbcsv.is_predicted(r)], data.key,
                              "samples_per_s")
    out = {k: v for k, v in measured.items() if not k[1].variant
           and (k[1].all_cores or tbdevices.is_one_gpu(k[1].device_kind))}
    largest: dict = {}
    for (s, c), sample in predicted.items():
        n = c.data_parallel
        if not n or not c.on_gpu:
            continue
        group = (s, c.panel, c.precision, c.batch, c.variant)
        if group not in largest or n > largest[group][0]:
            largest[group] = (n, (s, c), sample)
    out.update({k: sample for _, k, sample in largest.values()})
    return out


def own_cpu_rates(data: Data, series: str) -> dict:
    """config -> median samples/s of the series' cpu rows (all cores)."""
    got = tbcsv.samples(data.step_rows, data.key, "samples_per_s")
    return {c: v.center for (s, c), v in got.items() if s == series and c.all_cores}


def over_this_cpu(data: Data, series: str, bars: dict) -> dict:
    """(reference, config) -> Speedup over the series' cpu row of the workload (its base: that
    row's configuration), for the reference bars that have one: the pair two files make, which
    trainbench never sees, by its rule (tbcsv.cpu_pair)."""
    cpus = own_cpu_rates(data, series)
    by_workload = {c.workload: c for c in cpus}
    out = {}
    for (ref, c), sample in bars.items():
        # A predicted bar stands for its configuration measured: paired as that would be.
        wanted = c.but(variant=tbdevices.measured_variant(c.variant)).workload
        pair = tbcsv.cpu_pair(wanted, list(by_workload))
        base = by_workload.get(pair) if pair is not None else None
        if base is not None and cpus[base] > 0:
            out[(ref, c)] = Speedup(sample.center / cpus[base], base,
                                    tbcsv.pair_differs(wanted, pair))
    return out


def version_differences(data: Data, series: str, reference: str) -> str:
    """`git_commit 34b96b97c433-dirty vs 85df7dcc82b3-dirty; schema_version 4 vs 5` (the
    reference's first), or '' when the two runs' versions agree."""
    own = [r for r in data.rows if data.series_of(r) == series]
    ref = [r for r in data.reference_rows if data.series_of(r) == reference]
    parts = []
    for column in VERSION_COLUMNS:
        theirs, ours = tbcsv.distinct(ref, column), tbcsv.distinct(own, column)
        if theirs and ours and theirs != ours:
            parts.append(f"{column} {', '.join(theirs)} vs {', '.join(ours)}")
    return "; ".join(parts)


@dataclass
class VersusTable:
    """This machine (series) against the reference runs: a line per workload and cpu row."""
    series: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str]


def column_of(ref: str, c: Config) -> tuple:
    """A reference configuration's column: reference, device (and variant), precision."""
    return (ref, c.but(kind="", model="", dataset="", batch=""))


def versus_tables(data: Data) -> list[VersusTable]:
    """One table per input machine that has cpu rows, when reference runs are given."""
    if not data.references:
        return []
    bars = reference_bars(data)
    refs = [ref.name for ref in data.references]
    out = []
    for series in data.own_series:
        cpus = own_cpu_rates(data, series)
        if not cpus:
            continue
        pairs = over_this_cpu(data, series, bars)
        columns = sorted({column_of(r, c) for r, c in pairs},
                         key=lambda k: (refs.index(k[0]), config_sort_key(k[1])))
        order = {p: i for i, p in enumerate(dict.fromkeys(config_of(r).panel for r in data.rows))}
        lines = []
        for base in sorted(cpus, key=lambda c: (order.get(c.panel, len(order)),
                                                 config_sort_key(c))):
            cells = {column_of(r, c): f"{times(p.ratio, 'x')} ({si(bars[(r, c)].center)}/s"
                     + (f", {p.label})" if p.label else ")")
                     for (r, c), p in pairs.items() if p.base == base}
            lines.append([panel_title(base.panel), f"{base.precision}, bs {base.batch}"
                          + (f", {base.variant}" if base.variant else ""),
                          tbcsv.figure(cpus[base])]
                         + [cells.get(k, "") for k in columns])
        headers = (["workload", "this cpu row", "this cpu samples/s"]
                   + [f"{r} {config_name(c)} {c.precision} / this cpu" for r, c in columns])
        notes = [f"This machine: {data.machine_name(series)}. Each figure is a reference row's samples/s over this "
                 f"machine's cpu row (all cores) of the workload, medians on the wall clock, "
                 f"paired as x cpu is (the same precision and batch where this CPU ran them, "
                 f"else fp32 and this cpu row's batch; what differs in brackets), with the "
                 f"reference's samples/s. Predicted columns are the reference's largest N, "
                 f"predicted from its gpu:1 row (not measured); its other N are in its own "
                 f"summary. An empty cell: the reference has no such row."]
        for ref in data.references:
            notes.append("Reference " + ref.describe() + ".")
            differs = version_differences(data, series, ref.name)
            if differs:
                notes.append(f"Versions differ between {ref.name} and this machine ({ref.name}'s "
                             f"first): {differs}.")
        out.append(VersusTable(series, headers, lines, notes))
    return out


def render_markdown(tables: list[VersusTable]) -> str:
    """The tables as Markdown under one heading, for the run's summary file and the console."""
    if not tables:
        return ""
    out = ["## This machine against the reference runs", ""]
    for t in tables:
        out.append("| " + " | ".join(t.headers) + " |")
        out.append("| " + " | ".join(["---", "---"] + ["---:"] * (len(t.headers) - 2)) + " |")
        out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in t.rows]
        out += [""] + [n + "\n" for n in t.notes]
    return "\n".join(out).rstrip() + "\n"

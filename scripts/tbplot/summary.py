"""The report's summary table (issue 22): a line per machine, model, precision and batch, and
per device configuration (device and variant) its samples/s (on the wall clock), speedup over
the same machine's cpu row (with what differs between the pair: `bf16 vs fp32`, `bs 128 vs 8`),
scaling efficiency over its one-device row (gpu:N, mpi:N), peak memory and communication share.
It renders the figures the rows carry (speedup_vs_cpu, speedup_differs, scaling_efficiency,
...: trainbench writes them, tbcsv gives older rows them by the same rules), medians over the
repetitions as the charts read them, and computes none of its own. Predicted rows get columns of
their own, named so; rows that check a path (N replicas on one GPU) carry no speedup and no
scaling efficiency."""
from __future__ import annotations

from dataclasses import dataclass, field

import tbcsv
from tbplot.model import (Config, batch_number, config_name, config_sort_key, efficiencies,
                          precision_key, speedup_pairs, times)

GIB = 2 ** 30
# (metric title with its unit, formatter) in the order the table shows them.
METRICS = ("samples/s", "speedup over cpu (x)", "scaling efficiency (%)", "peak memory (GiB)",
           "comm share (%)")


def fmt_rate(v: float) -> str:
    return tbcsv.figure(v)


FORMATS = {"samples/s": fmt_rate, "speedup over cpu (x)": lambda v: times(v, ""),
           "scaling efficiency (%)": lambda v: f"{100 * v:.0f}",
           "peak memory (GiB)": lambda v: f"{v / GIB:.3g}",
           "comm share (%)": lambda v: f"{100 * v:.1f}"}


@dataclass
class Line:
    """One line of the table: who and what, and (metric, configuration) -> value."""
    series: str
    config: Config  # device, variant empty: the line's model, precision and batch
    values: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)  # (metric, configuration) -> note beside the value


@dataclass
class Summary:
    lines: list[Line]
    columns: list[tuple[str, str]]  # (metric, configuration name), in table order
    predicted: set  # configuration names that are predictions
    several_series: bool


def column_config(c: Config) -> Config:
    """The configuration a column stands for: device and variant (and its kind's facts)."""
    return c.but(kind="", model="", dataset="", precision="", batch="")


def line_config(c: Config) -> Config:
    return Config(c.kind, c.model, c.dataset, "", c.precision, c.batch, "")


def peak_memory(data, rows: list) -> dict:
    """(series, config) -> peak bytes: the device's (mem_peak_bytes) on a GPU, the process's
    resident set (peak_rss_bytes) on the CPU."""
    device = tbcsv.samples(rows, data.key, "mem_peak_bytes")
    rss = tbcsv.samples(rows, data.key, "peak_rss_bytes")
    out = {k: v.center for k, v in rss.items() if not k[1].on_gpu}
    out.update({k: v.center for k, v in device.items() if k[1].on_gpu})
    return out


def summarise(data) -> Summary:
    rows = data.step_rows + data.predicted_rows
    rates = {k: v.center for k, v in tbcsv.samples(rows, data.key, "samples_per_s").items()}
    pairs = speedup_pairs(data, rows)
    per_metric = {"samples/s": rates,
                  "speedup over cpu (x)": {k: v.ratio for k, v in pairs.items()},
                  "scaling efficiency (%)": efficiencies(data, rows),
                  "peak memory (GiB)": peak_memory(data, rows),
                  "comm share (%)": {k: v.center for k, v in
                                     tbcsv.samples(rows, data.key, "comm_share").items()
                                     if k[1].data_parallel}}
    lines: dict = {}
    used: dict = {}
    for metric in METRICS:
        for (s, c), value in per_metric[metric].items():
            if (s, c) not in rates:
                continue
            line = lines.setdefault((s, line_config(c)), Line(s, line_config(c)))
            name = config_name(column_config(c)).strip()
            line.values[(metric, name)] = value
            if metric == "speedup over cpu (x)" and pairs[(s, c)].label:
                line.notes[(metric, name)] = pairs[(s, c)].label
            used.setdefault(metric, {})[name] = column_config(c)
    columns = [(metric, name) for metric in METRICS
               for name, _ in sorted(used.get(metric, {}).items(),
                                     key=lambda kv: config_sort_key(kv[1]))]
    predicted = {name for got in used.values() for name, c in got.items() if c.predicted}
    # Machines in input order, models in the order trainbench ran them.
    series = {s: i for i, s in enumerate(data.series)}
    panels = {p: i for i, p in enumerate(dict.fromkeys(data.key(r)[1].panel for r in rows))}
    ordered = sorted(lines.values(), key=lambda ln: (
        series.get(ln.series, 0), panels.get(ln.config.panel, 0),
        precision_key(ln.config.precision), batch_number(ln.config.batch), ln.config.batch))
    return Summary(ordered, columns, predicted, len({ln.series for ln in ordered}) > 1)


def cell(summary: Summary, line: Line, column: tuple[str, str]) -> str:
    value = line.values.get(column)
    if value is None:
        return ""
    note = line.notes.get(column)
    return FORMATS[column[0]](value) + (f" ({note})" if note else "")

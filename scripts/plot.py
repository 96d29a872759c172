#!/usr/bin/env python3
"""Draws the trainbench charts from one or more CSVs (results/SCHEMA.md), headless.

    scripts/plot.py results/*/*.csv --out charts/
    scripts/plot.py --latest results/*/*.csv --out charts/   # the newest rows per machine

--latest keeps, for each benchmark, only the newest run's rows of each machine and framework
(a machine: host, CPU model and GPU, not the driver: see machine_of), so that a folder of many
runs draws one series per machine instead of one per commit; the README's charts are drawn so.

Writes each chart as PNG and SVG into the --out folder:
  samples_per_s       samples/s per model and device configuration (log scale)
  speedup_vs_cpu      speedup of each configuration over the `cpu` row of the same machine
  scaling_efficiency  multi-GPU scaling efficiency against the number of devices (gpu:N rows)
  time_to_accuracy    validation accuracy against elapsed seconds (epochs/ rows)
  peak_memory         peak memory per benchmark, broken down when the mem_* columns exist
  host_cpu_per_step   host CPU time per training step per benchmark
  energy_per_sample   GPU energy per trained sample per model and configuration (gpu:* rows of
                      schema_version 3); hatched bars and a note line name throttled runs
A chart whose columns are absent or empty is skipped with a one-line note (and an old file of
that chart in --out is removed, so the folder never mixes runs). Exit status 2 on bad input.
See docs/scripts.md.
"""
from __future__ import annotations

import argparse
import io
import math
import re
import statistics
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402  (the shared reader lives next to this script)

PROG = "plot.py"
MATPLOTLIB_FIX = "install python3-matplotlib (apt) or pip install matplotlib"

RSS = "peak RSS (no breakdown)"
DEVICE_PEAK = "device peak (no breakdown)"
MEMORY_PARTS = [("mem_weights_bytes", "weights"), ("mem_grads_bytes", "gradients"),
                ("mem_optimizer_bytes", "optimizer state"),
                ("mem_activations_bytes", "activations"), ("mem_workspace_bytes", "workspace"),
                ("mem_data_bytes", "data"), ("mem_context_bytes", "CUDA context and libraries")]

# Figure geometry, in inches and points.
MAX_WIDTH = 18.0
MIN_WIDTH = 9.0
SUBTITLE_PT = 8.5
LINE_IN = 0.19  # height of one subtitle line
MAX_MACHINE_LINES = 6
# Value labels sit on a white box so reference lines and grid lines never cross the digits.
LABEL_BOX = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
             "alpha": 0.85}
# The hatch of bars whose GPU reported a throttle reason (gpu_throttle), so a slow run says why.
HATCH = "////"


class Skip(Exception):
    """A chart that cannot be drawn from these rows; the message says why, in one line."""


# ---- data ----------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Config:
    """What a benchmark ran, without the machine: the parts of its name."""
    kind: str
    model: str
    dataset: str
    device: str
    precision: str
    batch: str

    @property
    def panel(self) -> tuple[str, str, str]:
        return (self.kind, self.model, self.dataset)


def config_of(row) -> Config:
    return Config(*(tbcsv.field_of(row, c)
                    for c in ("kind", "model", "dataset", "device", "precision", "batch")))


def batch_number(batch: str) -> float:
    try:
        return float(batch)
    except ValueError:
        return math.inf


def config_sort_key(c: Config):
    return (tbcsv.device_sort_key(c.device), c.precision, batch_number(c.batch), c.batch)


def panel_title(panel: tuple[str, str, str]) -> str:
    kind, model, dataset = panel
    parts = ([kind] if kind not in ("train", "epochs") else []) + [model, dataset]
    return " · ".join(p for p in parts if p)


class Data:
    """All rows of the input files, split into steady-state and per-epoch rows, with one
    series per machine (host; host @ commit when a host appears at several commits, so that
    runs of different builds are not pooled), and per framework where rows of a peer
    framework (scripts/peers/) are given: "host · pytorch"."""

    def __init__(self, tables: list[tbcsv.Table], latest: bool = False):
        self.rows = tbcsv.all_rows(tables)
        self.latest = latest
        if latest:
            self.rows = newest_rows(self.rows)
        self.step_rows = [r for r in self.rows if not tbcsv.is_epoch_row(r)]
        self.epoch_rows = [r for r in self.rows if tbcsv.is_epoch_row(r)]
        commits: dict[str, set[str]] = {}
        for r in self.rows:
            if (r.get("framework", "") or "trainbench") == "trainbench":
                commits.setdefault(r.get("host", "") or "?", set()).add(r.get("git_commit", ""))
        self._split = set() if latest else {h for h, c in commits.items() if len(c) > 1}
        # Hosts that name several machines (the same hostname on a CPU VM and a GPU machine)
        # are told apart by their GPU, else their CPU model.
        machines: dict[str, set] = {}
        for r in self.rows:
            machines.setdefault(r.get("host", "") or "?", set()).add(machine_of(r)[1:])
        self._ambiguous = {h for h, m in machines.items() if len(m) > 1}
        self.series = list(dict.fromkeys(self.series_of(r) for r in self.rows))

    def series_of(self, row) -> str:
        host = row.get("host", "") or "?"
        if host in self._ambiguous:
            _, cpu, gpu = machine_of(row)
            host = f"{host} ({gpu or cpu})"
        if host.split(" (")[0] in self._split:
            host = f"{host} @ {(row.get('git_commit') or '?')[:12]}"
        framework = row.get("framework", "") or "trainbench"
        return host if framework == "trainbench" else f"{host} · {framework}"

    def colour(self, series: str) -> str:
        return f"C{self.series.index(series) % 10}"

    def key(self, row):
        return (self.series_of(row), config_of(row))


def machine_of(row) -> tuple[str, str, str]:
    """A machine's identity: host, CPU model and GPU name. Driver, CUDA and library versions
    are left out on purpose: they change with an upgrade of the same machine, and
    driver_version changed meaning in schema_version 3 (the CUDA driver API version 13.0
    before, the NVIDIA driver 580.159.04 since; tbcsv moves the old value to
    cuda_driver_version), so keying on them would split one machine into two series."""
    return (row.get("host", "") or "?", row.get("cpu_model", "") or "", row.get("gpu_name", "") or "")


def newest_rows(rows) -> list:
    """Per benchmark configuration, machine and framework, the rows of the newest run that
    measured it (the latest timestamp among rows not skipped): history stays in the files, the
    charts show the present, and a machine that cannot run a configuration (a CPU-only
    machine's GPU rows) shows nothing for it."""
    def key(r):
        return (machine_of(r), r.get("framework", "") or "trainbench", config_of(r))
    newest: dict = {}
    for r in rows:
        if r.get("status") != "skipped":
            newest[key(r)] = max(newest.get(key(r), ""), r.get("timestamp", "") or "")
    return [r for r in rows if key(r) in newest and (r.get("timestamp", "") or "") == newest[key(r)]]


def describe_machines(data: Data, rows) -> list[str]:
    """One subtitle line per series: machine (host, cpu_model, cores, GPU context) and run
    (git_commit, timestamp range) of the rows a chart shows."""
    present = list(dict.fromkeys(c for r in rows for c in r))  # files may differ in columns
    columns = [c for c in tbcsv.context_columns(present) if c not in tbcsv.MACHINE_COLUMNS]
    by_series: dict[str, list] = {}
    for r in rows:
        by_series.setdefault(data.series_of(r), []).append(r)
    lines = []
    for series, rs in by_series.items():
        machine = ", ".join(tbcsv.distinct(rs, "cpu_model")) or "cpu ?"
        cores = ", ".join(tbcsv.distinct(rs, "cores"))
        if cores:
            machine += f", {cores} cores"
        for c in columns:
            values = tbcsv.distinct(rs, c)
            if values:
                machine += f", {c} {', '.join(values)}"
        commit = ", ".join(tbcsv.distinct(rs, "git_commit")) or "?"
        lines.append(f"{series}: {machine} · commit {commit} · {tbcsv.timestamp_range(rs)}")
    if len(lines) > MAX_MACHINE_LINES:
        rest = len(lines) - MAX_MACHINE_LINES + 1
        lines = lines[:MAX_MACHINE_LINES - 1] + [f"… and {rest} more machines"]
    return lines


# ---- figure scaffolding --------------------------------------------------------------------

class Figures:
    """Builds figures with a header (title, machine lines, notes, legend) above a grid of
    panels. The header has a fixed height in inches computed from its lines, and the panels
    use constrained layout, so the header text never collides with the axes."""

    def __init__(self, plt, data: Data):
        self.plt = plt
        self.data = data

    def new(self, title: str, rows, notes: list[str], panel_widths: list[float],
            panel_h: float, legend=None):
        """A figure with one axes per entry of panel_widths (inches), packed into rows of
        at most three; panels keep their width, so bars are equally wide in every panel."""
        packed = pack_rows(panel_widths)
        width = min(MAX_WIDTH, max(MIN_WIDTH, *(sum(r) for r in packed)))
        chars = int(width * 72 / (0.58 * SUBTITLE_PT))  # DejaVu Sans is ~0.58 em wide
        lines = [w for line in describe_machines(self.data, rows) + notes
                 for w in textwrap.wrap(line, chars, subsequent_indent="    ")]
        legend = legend or []
        legend_cols, legend_rows = self._legend_shape(legend, width)
        header_h = 0.5 + LINE_IN * len(lines) + 0.28 * legend_rows + 0.08
        body_h = len(packed) * panel_h
        fig = self.plt.figure(figsize=(width, header_h + body_h), layout="constrained")
        head, body = fig.subfigures(2, 1, height_ratios=[header_h, body_h])
        top = 1 - 0.12 / header_h
        head.text(0.012, top, title, fontsize=13, fontweight="bold", va="top")
        y = top - 0.38 / header_h
        for line in lines:
            head.text(0.012, y, line, fontsize=SUBTITLE_PT, va="top", color="0.25")
            y -= LINE_IN / header_h
        if legend:
            handles, labels = zip(*legend)
            head.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.005, 0.0),
                        ncol=legend_cols, frameon=False, fontsize=8.5, handlelength=1.6,
                        columnspacing=1.4, borderaxespad=0.2)
        row_figs = body.subfigures(len(packed), 1) if len(packed) > 1 else [body]
        axes = []
        for row_fig, widths in zip(row_figs, packed):
            # A filler column keeps a short row's panels at their own width.
            filler = max(0.0, width - sum(widths))
            ratios = widths + ([filler] if filler > 0.05 else [])
            row_axes = row_fig.subplots(1, len(ratios), squeeze=False,
                                        width_ratios=ratios)[0]
            if len(ratios) > len(widths):
                row_axes[-1].remove()
            axes += list(row_axes[:len(widths)])
        return fig, axes

    @staticmethod
    def _legend_shape(legend, width: float) -> tuple[int, int]:
        if not legend:
            return 1, 0
        widths = [(len(label) * 0.55 * 8.5 + 40) / 72 for _, label in legend]
        if sum(widths) <= width - 0.3:
            return len(legend), 1
        cols = max(1, min(len(legend), int((width - 0.3) / max(widths))))
        return cols, math.ceil(len(legend) / cols)

    @staticmethod
    def patch(colour: str):
        from matplotlib.patches import Patch
        return Patch(color=colour)

    def series_legend(self, series: list[str]):
        return [(self.patch(self.data.colour(s)), s) for s in series]


def pack_rows(widths: list[float]) -> list[list[float]]:
    """Greedy rows of panel widths: at most three panels and MAX_WIDTH inches per row."""
    rows: list[list[float]] = []
    for w in widths:
        if rows and len(rows[-1]) < 3 and sum(rows[-1]) + w <= MAX_WIDTH:
            rows[-1].append(w)
        else:
            rows.append([w])
    return rows


def si(value: float) -> str:
    """3 significant digits with a k/M/G suffix: bar labels stay short."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def log_scale(ax, axis: str, low: float, high: float) -> None:
    """A log axis labelled with plain numbers (5k, 10k, 20k) instead of powers of ten;
    1-2-5 ticks while the range is short enough for them not to crowd."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    subs = (1.0, 2.0, 5.0) if high / low < 1e4 else (1.0,)
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(FuncFormatter(lambda v, _: si(v)))
    target.set_minor_formatter(NullFormatter())


def config_labels(configs: list[Config]) -> list[str]:
    """Tick labels: the device, plus precision and batch only where they vary in the panel."""
    vary_p = len({c.precision for c in configs}) > 1
    vary_b = len({c.batch for c in configs}) > 1
    out = []
    for c in configs:
        extra = " ".join(([c.precision] if vary_p else []) + ([f"bs:{c.batch}"] if vary_b else []))
        out.append(c.device + (f"\n{extra}" if extra else ""))
    return out


def grouped_bars(ax, data: Data, configs: list[Config], series: list[str], values: dict,
                 markers: dict, label, log: bool, hatched=frozenset()) -> None:
    """One group of bars per configuration, one bar per series. values[(s, c)] is
    (center, low, high); markers[(s, c)] names a status (failed, skipped) drawn as text
    where a series has rows but no value; the bars of the (s, c) in hatched are hatched."""
    n = max(1, len(series))
    width = 0.8 / n
    tops = []
    for i, s in enumerate(series):
        for j, c in enumerate(configs):
            x = j - 0.4 + width * (i + 0.5)
            v = values.get((s, c))
            if v is None:
                if (s, c) in markers:
                    ax.text(x, 0.03, markers[(s, c)], rotation=90, ha="center", va="bottom",
                            fontsize=7, color=data.colour(s), transform=ax.get_xaxis_transform())
                continue
            center, lo, hi = v
            if log and lo <= 0:
                continue  # a zero has no place on a log axis; its label would mislead
            if (s, c) in hatched:
                ax.bar(x, center, width * 0.92, color=data.colour(s), hatch=HATCH,
                       edgecolor="white", linewidth=0, zorder=2)
            else:
                ax.bar(x, center, width * 0.92, color=data.colour(s), zorder=2)
            if hi > lo:
                ax.errorbar(x, center, yerr=[[center - lo], [hi - center]], fmt="none",
                            ecolor="0.15", elinewidth=0.8, capsize=2, zorder=3)
            ax.annotate(label(center), (x, hi), xytext=(0, 4), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7, rotation=90 if n > 1 else 0,
                        zorder=4, bbox=LABEL_BOX)
            tops.append((lo, hi))
    ax.set_xticks(range(len(configs)), config_labels(configs), fontsize=8)
    ax.set_xlim(-0.6, len(configs) - 0.4)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    if not tops:
        return
    low, high = min(t[0] for t in tops), max(t[1] for t in tops)
    room = 4.0 if n > 1 else 2.2  # space above the highest bar for its label
    if log:
        log_scale(ax, "y", low / 3, high * room)
        ax.set_ylim(low / 3, high * room)
    else:
        ax.set_ylim(0, high * (1 + (room - 1) / 4))


def style_legend(ax, entries) -> None:
    """A legend of line styles (label, linestyle, marker) in neutral grey, outside the axes
    on the right so it can never hide a curve; the colours (machines) are in the header."""
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color="0.3", linestyle=ls, marker=m, markersize=4, label=label)
               for label, ls, m in entries]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0, frameon=False)


def bar_panel_width(configs, series) -> float:
    """Inches for a bar panel: room for the y axis, then each group of bars."""
    return 1.4 + len(configs) * (0.5 + 0.35 * len(series))


def spread(sample: tbcsv.Sample) -> tuple[float, float, float]:
    return sample.center, min(sample.values), max(sample.values)


def status_markers(data: Data, rows, have: dict) -> dict:
    """(series, config) -> 'failed'/'skipped' for configurations with no ok value."""
    out = {}
    for k, found in tbcsv.statuses(rows, data.key).items():
        if k not in have and found - {"ok"}:
            out[k] = "/".join(sorted(found - {"ok"}))
    return out


def panels_of(keys) -> dict:
    """panel -> sorted configurations, over (series, config) keys; panels in the order the
    keys come (trainbench's registration order), configurations cpu first, then by N."""
    out: dict = {}
    for _, c in keys:
        out.setdefault(c.panel, set()).add(c)
    return {p: sorted(cs, key=config_sort_key) for p, cs in out.items()}


# ---- charts --------------------------------------------------------------------------------

def chart_samples_per_s(figs: Figures, data: Data):
    """(a) samples/s per model and device configuration, one panel per model and dataset."""
    got = tbcsv.samples(data.step_rows, data.key, "samples_per_s")
    if not got:
        raise Skip("no ok row has a samples_per_s value")
    markers = status_markers(data, data.step_rows, got)
    panels = panels_of(list(got) + list(markers))
    series = [s for s in data.series if any(k[0] == s for k in got)]
    rows = [r for r in data.step_rows if data.key(r) in got or data.key(r) in markers]
    fig, axes = figs.new(
        "Training throughput (samples/s)", rows,
        ["Bars: median over ok repetitions (or the median aggregate row); whiskers: min–max of "
         "the repetitions. Log scale. LSTM samples are sequences."],
        [bar_panel_width(cs, series) for cs in panels.values()], 3.6,
        figs.series_legend(series) if len(series) > 1 else None)
    values = {k: spread(s) for k, s in got.items()}
    for ax, (panel, configs) in zip(axes, panels.items()):
        grouped_bars(ax, data, configs, series, values, markers, si, log=True)
        ax.set_title(panel_title(panel), fontsize=10)
        ax.set_ylabel("samples/s (log scale)", fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
    return fig


def baseline_config(c: Config, available) -> Config | None:
    """The `cpu` configuration a speedup is taken against: same model, dataset, batch and
    precision, or any cpu precision (fp32 first) when the precision has no cpu row."""
    same = Config(c.kind, c.model, c.dataset, "cpu", c.precision, c.batch)
    if same in available:
        return same
    others = sorted((a for a in available if a.panel == c.panel and a.device == "cpu"
                     and a.batch == c.batch), key=lambda a: (a.precision != "fp32", a))
    return others[0] if others else None


def speedups(data: Data) -> dict:
    """(series, config) -> samples/s over the machine's cpu samples/s, for non-cpu configs."""
    got = tbcsv.samples(data.step_rows, data.key, "samples_per_s")
    by_series: dict = {}
    for (s, c), sample in got.items():
        by_series.setdefault(s, {})[c] = sample.center
    out = {}
    for s, configs in by_series.items():
        for c, value in configs.items():
            if c.device == "cpu":
                continue
            base = baseline_config(c, configs)
            if base is not None and configs[base] > 0 and value > 0:
                out[(s, c)] = value / configs[base]
    return out


def chart_speedup(figs: Figures, data: Data):
    """(b) speedup of every configuration over the `cpu` row of the same machine."""
    ratios = speedups(data)
    if not ratios:
        raise Skip("no configuration besides cpu has a cpu row of the same machine, model, "
                   "dataset and batch")
    panels = panels_of(ratios)
    series = [s for s in data.series if any(k[0] == s for k in ratios)]
    low, high = min(ratios.values()), max(ratios.values())
    log = high / low > 10
    rows = [r for r in data.step_rows if data.series_of(r) in series and tbcsv.is_ok(r)]
    fig, axes = figs.new(
        "Speedup over the cpu row (all cores) of the same machine", rows,
        ["Speedup = median samples/s of the configuration / median samples/s of `cpu` "
         "(same model, dataset and batch); dashed line: 1× (no speedup)."
         + (" Log scale." if log else "")],
        [bar_panel_width(cs, series) for cs in panels.values()], 3.6,
        figs.series_legend(series) if len(series) > 1 else None)
    values = {k: (v, v, v) for k, v in ratios.items()}
    for ax, (panel, configs) in zip(axes, panels.items()):
        grouped_bars(ax, data, configs, series, values, {}, lambda v: f"{v:.3g}×", log=log)
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1, zorder=1)
        # Keep the 1x reference in view even when every configuration is slower than cpu.
        bottom, top = ax.get_ylim()
        ax.set_ylim(min(bottom, 0.8) if log else bottom, max(top, 1.15))
        ax.set_title(panel_title(panel), fontsize=10)
        ax.set_ylabel("speedup over cpu (×)", fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
    return fig


def scaling_lines(data: Data) -> dict:
    """(series, panel, precision, batch label) -> {N: efficiency} from gpu:N rows.

    efficiency(N) = samples/s on N devices / (N × samples/s on 1). Rows are matched on the
    batch; when each N has a single batch (weak scaling written with the global batch) the
    batches are matched by N instead."""
    got = tbcsv.samples(data.step_rows, data.key, "samples_per_s")
    groups: dict = {}
    for (s, c), sample in got.items():
        n = tbcsv.device_count(c.device)
        if n is not None:
            by_n = groups.setdefault((s, c.panel, c.precision), {})
            by_n.setdefault(n, {})[c.batch] = sample.center
    out = {}
    for (s, panel, precision), by_n in groups.items():
        if 1 not in by_n or len(by_n) < 2:
            continue
        if all(len(b) == 1 for b in by_n.values()):
            batches = {n: next(iter(b)) for n, b in by_n.items()}
            label = (f"bs:{batches[1]}" if len(set(batches.values())) == 1
                     else "bs:" + "→".join(batches[n] for n in sorted(by_n)))
            curves = {label: {n: next(iter(b.values())) for n, b in by_n.items()}}
        else:
            curves = {f"bs:{batch}": {n: b[batch] for n, b in by_n.items() if batch in b}
                      for batch in by_n[1]}
        for label, sps in curves.items():
            if len(sps) >= 2 and sps[1] > 0:
                out[(s, panel, precision, label)] = {n: v / (n * sps[1])
                                                     for n, v in sorted(sps.items())}
    return out


def chart_scaling(figs: Figures, data: Data):
    """(c) scaling efficiency against the number of devices, from gpu:N rows."""
    lines = scaling_lines(data)
    if not lines:
        raise Skip("no gpu:1 row with a gpu:N (N >= 2) row of the same machine and model")
    panels = list(dict.fromkeys(k[1] for k in lines))
    series = [s for s in data.series if any(k[0] == s for k in lines)]
    rows = [r for r in data.step_rows if tbcsv.device_count(config_of(r).device) is not None
            and tbcsv.is_ok(r)]
    fig, axes = figs.new(
        "Multi-GPU scaling efficiency", rows,
        ["Efficiency = samples/s on N devices / (N × samples/s on 1 device), from the gpu:N "
         "rows (medians); dashed line: perfect scaling (100%)."],
        [5.6] * len(panels), 3.6, figs.series_legend(series) if len(series) > 1 else None)
    markers = "os^Dvx"
    for ax, panel in zip(axes, panels):
        mine = sorted((k, v) for k, v in lines.items() if k[1] == panel)
        styles = list(dict.fromkeys((k[2], k[3]) for k, _ in mine))
        ns = sorted({n for _, v in mine for n in v})
        top = 1.0
        for (s, _, precision, label), eff in mine:
            style = styles.index((precision, label))
            xs, ys = list(eff), [100 * e for e in eff.values()]
            ax.plot(xs, ys, marker=markers[style % len(markers)], color=data.colour(s))
            # Alternate labels above and below the points so two close lines keep both.
            above = series.index(s) % 2 == 0
            for x, y in zip(xs[1:], ys[1:]):
                ax.annotate(f"{y:.0f}%", (x, y), textcoords="offset points",
                            xytext=(0, 6 if above else -6), va="bottom" if above else "top",
                            ha="center", fontsize=7, color=data.colour(s), bbox=LABEL_BOX)
            top = max(top, max(eff.values()))
        ax.axhline(100, color="0.3", linestyle="--", linewidth=1)
        ax.set_xticks(ns)
        ax.set_xlim(min(ns) - 0.3, max(ns) + 0.3)
        ax.set_ylim(0, max(115, 100 * top + 15))
        ax.set_xlabel("devices (N of gpu:N)", fontsize=8.5)
        ax.set_ylabel("scaling efficiency (%)", fontsize=8.5)
        ax.set_title(panel_title(panel), fontsize=10)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        style_legend(ax, [(f"{p} {b}", "-", markers[i % len(markers)])
                          for i, (p, b) in enumerate(styles)])
    return fig


def accuracy_curves(data: Data) -> dict:
    """(series, config) -> [(elapsed_s, val_acc)] per epoch, medians over repetitions."""
    points: dict = {}
    for r in data.epoch_rows:
        if not tbcsv.is_ok(r) or r.get("run_type", "iteration") == "aggregate":
            continue
        t, acc, epoch = (tbcsv.number(r, c) for c in ("elapsed_s", "val_acc", "epoch"))
        if t is None or acc is None or epoch is None:
            continue
        points.setdefault(data.key(r), {}).setdefault(epoch, []).append((t, acc))
    out = {}
    for k, by_epoch in points.items():
        out[k] = [(statistics.median([p[0] for p in ps]), statistics.median([p[1] for p in ps]))
                  for _, ps in sorted(by_epoch.items())]
    return out


def chart_time_to_accuracy(figs: Figures, data: Data):
    """(d) validation accuracy against elapsed seconds, from epochs/ rows."""
    if not data.epoch_rows:
        raise Skip("no epochs/ rows")
    curves = accuracy_curves(data)
    if not curves:
        raise Skip("the epochs/ rows have no ok epoch, elapsed_s and val_acc values")
    panels = panels_of(curves)
    series = [s for s in data.series if any(k[0] == s for k in curves)]
    rows = [r for r in data.epoch_rows if data.key(r) in curves]
    ratio = max(a for pts in curves.values() for _, a in pts) <= 1.0
    fig, axes = figs.new(
        "Time to accuracy", rows,
        ["Validation accuracy after each epoch against wall time since the start of training "
         "(median over repetitions); one line style per device configuration."],
        [6.0] * len(panels), 3.8, figs.series_legend(series) if len(series) > 1 else None)
    from matplotlib.ticker import PercentFormatter
    styles = ["-", "--", ":", "-."]
    marks = "os^Dvx"
    for ax, (panel, configs) in zip(axes, panels.items()):
        labels = config_labels(configs)
        for s in series:
            for i, c in enumerate(configs):
                pts = curves.get((s, c))
                if not pts:
                    continue
                xs, ys = zip(*pts)
                ax.plot(xs, ys, linestyle=styles[i % len(styles)], marker=marks[i % len(marks)],
                        markersize=3.5, color=data.colour(s))
        if ratio:
            # Whole percents repeat on a narrow range (86.2% and 86.4% both read "86%"):
            # add decimals as the visible range shrinks.
            low, high = ax.get_ylim()
            span = (high - low) * 100
            decimals = 0 if span >= 10 else 1 if span >= 1 else 2
            ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=decimals))
        # A GPU run can finish before the CPU one's first epoch: a log time axis keeps
        # both curves readable when their lengths differ by more than 10x.
        ends = [pts[-1][0] for (s, c), pts in curves.items() if c in configs]
        starts = [pts[0][0] for (s, c), pts in curves.items() if c in configs]
        log = max(ends) > 10 * min(ends) and min(starts) > 0
        if log:
            log_scale(ax, "x", min(starts), max(ends))
        else:
            ax.set_xlim(left=0)
        ax.set_xlabel("elapsed time (s" + (", log scale)" if log else ")"), fontsize=8.5)
        ax.set_ylabel("validation accuracy" + (" (%)" if ratio else ""), fontsize=8.5)
        ax.set_title(panel_title(panel), fontsize=10)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        style_legend(ax, [(label.replace("\n", " "), styles[i % len(styles)], marks[i % len(marks)])
                          for i, label in enumerate(labels)])
    return fig


def byte_unit(largest: float) -> tuple[float, str]:
    for factor, unit in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if largest >= factor:
            return factor, unit
    return 1, "bytes"


def benchmark_key(data: Data):
    return lambda r: (data.series_of(r), r["benchmark"])


@dataclass
class HBar:
    """One horizontal bar: stacked (value, colour) segments, a label after its end, and
    optionally min-max whiskers around the total."""
    segments: list[tuple[float, str]]
    text: str
    whisker: tuple[float, float] | None = None

    @property
    def total(self) -> float:
        return sum(v for v, _ in self.segments)


def ordered_benchmarks(data: Data, keys) -> list[str]:
    """Benchmarks that have a bar, in the order of the input rows."""
    wanted = {b for _, b in keys}
    return [b for b in dict.fromkeys(r["benchmark"] for r in data.step_rows) if b in wanted]


def grouped_hbars(figs: Figures, title: str, rows, notes, bars: dict, legend, xlabel: str,
                  log: bool):
    """A figure of bars[(series, benchmark)]: one group per benchmark (named on the y axis),
    holding a bar for each series that has one, in series order."""
    benchmarks = ordered_benchmarks(figs.data, bars)
    series = [s for s in figs.data.series if any(k[0] == s for k in bars)]
    slots, centres, y = [], [], 0.0
    for b in benchmarks:
        mine = [(s, b) for s in series if (s, b) in bars]
        slots += [(y + i, k) for i, k in enumerate(mine)]
        centres.append(y + (len(mine) - 1) / 2)
        y += len(mine) + 0.5  # half a bar between benchmarks
    fig, (ax,) = figs.new(title, rows, notes, [11.0], 0.9 + 0.27 * y, legend)
    ends, starts = [], []
    for y, k in slots:
        bar = bars[k]
        left = 0.0
        for value, colour in bar.segments:
            ax.barh(y, value, 0.82, left=left, color=colour, zorder=2)
            left += value
        end = left
        if bar.whisker and bar.whisker[1] > bar.whisker[0]:
            lo, hi = bar.whisker
            ax.errorbar(left, y, xerr=[[left - lo], [hi - left]], fmt="none",
                        ecolor="0.15", elinewidth=0.8, capsize=2, zorder=3)
            end = hi
            starts.append(lo)
        ax.annotate(bar.text, (end, y), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=7)
        ends.append(end)
        starts.append(bar.segments[0][0] if bar.segments else end)
    ax.set_yticks(centres, benchmarks, fontsize=8)
    ax.set_ylim(slots[-1][0] + 0.7, -0.7)
    # Keep about 1.7 inches right of the longest bar for its label.
    free = 1.7 / 8.0
    high = max(ends)
    if log:
        low = min(starts) / 2
        log_scale(ax, "x", low, high)
        ax.set_xlim(low, high * (high / low) ** (free / (1 - free)))
    else:
        ax.set_xlim(0, high / (1 - free))
    ax.set_xlabel(xlabel, fontsize=9)
    ax.grid(axis="x", alpha=0.3, zorder=0)
    ax.tick_params(axis="x", labelsize=8)
    return fig


def fmt_bytes(value: float) -> str:
    factor, unit = byte_unit(value)
    return f"{value / factor:.3g} {unit}"


def chart_peak_memory(figs: Figures, data: Data):
    """(e) peak memory per benchmark: the mem_* breakdown where the rows have it, else the
    device's peak alone (mem_peak_bytes: a peer framework's GPU rows), else peak RSS (one bar)."""
    key = benchmark_key(data)
    parts = [(c, name) for c, name in MEMORY_PARTS if tbcsv.has_values(data.step_rows, c)]
    part_samples = {c: tbcsv.samples(data.step_rows, key, c) for c, _ in parts}
    device_peak = tbcsv.samples(data.step_rows, key, "mem_peak_bytes")
    rss = tbcsv.samples(data.step_rows, key, "peak_rss_bytes")
    keys = list(dict.fromkeys(k for got in [*part_samples.values(), device_peak, rss] for k in got))
    if not keys:
        raise Skip("no ok row has peak_rss_bytes or mem_*_bytes values")
    stacks = {}
    for k in keys:
        have = [(name, part_samples[c][k].center) for c, name in parts if k in part_samples[c]]
        if not have and k in device_peak:
            have = [(DEVICE_PEAK, device_peak[k].center)]
        stacks[k] = have or [(RSS, rss[k].center)]
    factor, unit = byte_unit(max(sum(v for _, v in st) for st in stacks.values()))
    several = len({s for s, _ in keys}) > 1
    if parts:
        # Colours name the parts; the machine goes into the bar's label.
        names = [name for _, name in parts] + [DEVICE_PEAK, RSS]
        colour = {n: f"C{i}" for i, n in enumerate(names[:-2])} | {DEVICE_PEAK: "0.3", RSS: "0.55"}
        used = [n for n in names if any(n == m for st in stacks.values() for m, _ in st)]
        legend = [(figs.patch(colour[n]), n) for n in used]
    else:
        legend = figs.series_legend(list(dict.fromkeys(s for s, _ in keys))) if several else None
    bars = {}
    for (s, b), stack in stacks.items():
        total = sum(v for _, v in stack) / factor
        segments = [(v / factor, colour[n] if parts else data.colour(s)) for n, v in stack]
        text = fmt_bytes(total * factor) + (f" · {s}" if parts and several else "")
        bars[(s, b)] = HBar(segments, text)
    notes = ["Median over ok repetitions. " + (
        "Stacked: the mem_* columns (bytes allocated, by purpose). " if parts else "")
        + "Peak RSS is the process's peak so far, so it includes earlier benchmarks of the "
          "same run."]
    rows = [r for r in data.step_rows if key(r) in stacks and tbcsv.is_ok(r)]
    return grouped_hbars(figs, "Peak memory per benchmark", rows, notes, bars, legend,
                         f"peak memory ({unit})", log=False)


def chart_host_cpu(figs: Figures, data: Data):
    """(f) host CPU time per training step per benchmark (process CPU time, all threads)."""
    key = benchmark_key(data)
    got = tbcsv.samples(data.step_rows, key, "host_cpu_s_per_step")
    if not got:
        raise Skip("no ok row has a host_cpu_s_per_step value")
    util = tbcsv.samples(data.step_rows, key, "host_cpu_util")
    highest = max(max(s.values) for s in got.values())
    factor, unit = (1e-3, "ms") if highest < 1 else (1.0, "s")
    bars = {}
    for (s, b), sample in got.items():
        center, lo, hi = (v / factor for v in spread(sample))
        if lo <= 0:
            continue  # no CPU time measured: nothing to show on a log axis
        u = util.get((s, b))
        text = f"{center:.3g} {unit}" + (f" · {u.center:.2f} cores busy" if u else "")
        bars[(s, b)] = HBar([(center, data.colour(s))], text, (lo, hi))
    series = [s for s in data.series if any(k[0] == s for k in got)]
    rows = [r for r in data.step_rows if key(r) in got and tbcsv.is_ok(r)]
    return grouped_hbars(
        figs, "Host CPU time per training step", rows,
        ["Process CPU time of all threads over the timed steps / steps (median over ok "
         "repetitions; whiskers: min–max); label: time and host_cpu_util (cores busy). Log "
         "scale."],
        bars, figs.series_legend(series) if len(series) > 1 else None,
        f"host CPU time per step ({unit}, log scale)", log=True)


def is_gpu_row(row) -> bool:
    return tbcsv.field_of(row, "device").startswith("gpu")


def energy_per_sample(data: Data) -> dict:
    """(series, config) -> Sample of energy_j_per_sample (J) over the gpu:* rows."""
    rows = [r for r in data.step_rows if is_gpu_row(r)]
    return tbcsv.samples(rows, data.key, "energy_j_per_sample")


def throttling(data: Data, got: dict) -> dict:
    """(series, config) -> ({gpu_throttle value: rows}, rows) over the rows behind each Sample
    of got (its ok repetitions, or its median aggregate rows), for the keys where a row reported
    a throttle reason ("none" and empty cells do not count)."""
    out: dict = {}
    for r in data.step_rows:
        k = data.key(r)
        sample = got.get(k)
        if sample is None or not tbcsv.is_ok(r) or tbcsv.number(r, "energy_j_per_sample") is None:
            continue
        if not (tbcsv.is_iteration(r) if sample.source == "iterations"
                else tbcsv.is_median_aggregate(r)):
            continue
        reasons, total = out.get(k, ({}, 0))
        reason = (r.get("gpu_throttle") or "").strip()
        if reason not in ("", "none"):
            reasons[reason] = reasons.get(reason, 0) + 1
        out[k] = (reasons, total + 1)
    return {k: v for k, v in out.items() if v[0]}


def energy_unit(smallest: float) -> tuple[float, str]:
    """J, mJ or µJ for a whole chart (panels side by side read alike): the largest unit in
    which the smallest bar is still 0.1 or more, so labels keep their 3 digits (0.274 mJ next
    to 332 mJ, not 0.000274 J)."""
    for factor, unit in ((1.0, "J"), (1e-3, "mJ")):
        if smallest >= 0.1 * factor:
            return factor, unit
    return 1e-6, "µJ"


def listed(items: list[str], most: int = 6) -> str:
    """items joined by '; ', the ones past `most` counted instead of listed."""
    shown = items[:most] + ([f"and {len(items) - most} more"] if len(items) > most else [])
    return "; ".join(shown)


def chart_energy(figs: Figures, data: Data):
    """(g) GPU energy per trained sample per model and configuration, gpu:* rows only."""
    gpu_rows = [r for r in data.step_rows if is_gpu_row(r)]
    if not gpu_rows:
        raise Skip("no gpu:* rows")
    got = energy_per_sample(data)
    if not got:
        raise Skip("no ok gpu:* row has an energy_j_per_sample value (schema_version 3 rows "
                   "of a machine where NVML could be loaded)")
    panels = panels_of(got)
    series = [s for s in data.series if any(k[0] == s for k in got)]
    throttled = throttling(data, got)
    notes = ["Energy per sample = the GPU's energy counter (NVML) over the timed steps, summed "
             "over the row's GPUs / samples trained (gpu:1/jobs:K: the K jobs together). Bars: "
             "median over ok repetitions (or the median aggregate row); whiskers: min–max."]
    if throttled:
        by_benchmark = []
        for (s, c), (reasons, total) in sorted(throttled.items(), key=lambda kv: (
                data.series.index(kv[0][0]), kv[0][1].panel, config_sort_key(kv[0][1]))):
            name = next(r["benchmark"] for r in gpu_rows if data.key(r) == (s, c))
            rows_word = ("repetitions" if got[(s, c)].source == "iterations"
                         else "median aggregate rows")
            why = ", ".join(f"{reason} in {n} of {total} {rows_word}"
                            for reason, n in sorted(reasons.items()))
            by_benchmark.append(f"{name} on {s}: {why}")
        notes.append("Throttled (hatched bars; gpu_throttle): " + listed(by_benchmark))
    # GPU rows measured without the column: files before schema_version 3, or no NVML.
    lacking: dict[str, set] = {}
    for r in gpu_rows:
        if tbcsv.is_ok(r) and data.key(r) not in got:
            lacking.setdefault(data.series_of(r), set()).add(config_of(r))
    if lacking:
        notes.append("No energy_j_per_sample (rows before schema_version 3, or NVML not "
                     "loaded), not drawn: " + listed([f"{s} ({len(cs)} configuration"
                                                       f"{'s' * (len(cs) != 1)})"
                                                       for s, cs in lacking.items()]))
    legend = figs.series_legend(series) if len(series) > 1 else []
    if throttled:
        from matplotlib.patches import Patch
        legend.append((Patch(facecolor="0.55", edgecolor="white", hatch=HATCH, linewidth=0),
                       "throttled in a repetition (gpu_throttle)"))
    rows = [r for r in gpu_rows if data.key(r) in got and tbcsv.is_ok(r)]
    fig, axes = figs.new("GPU energy per sample", rows, notes,
                         [bar_panel_width(cs, series) for cs in panels.values()], 3.6,
                         legend or None)
    factor, unit = energy_unit(min(sample.center for sample in got.values()))
    values = {k: tuple(v / factor for v in spread(sample)) for k, sample in got.items()}
    for ax, (panel, configs) in zip(axes, panels.items()):
        grouped_bars(ax, data, configs, series, values, {}, lambda v: f"{v:.3g}", log=False,
                     hatched=set(throttled))
        ax.set_title(panel_title(panel), fontsize=10)
        ax.set_ylabel(f"energy per sample ({unit})", fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
    return fig


CHARTS = [("samples_per_s", chart_samples_per_s), ("speedup_vs_cpu", chart_speedup),
          ("scaling_efficiency", chart_scaling), ("time_to_accuracy", chart_time_to_accuracy),
          ("peak_memory", chart_peak_memory), ("host_cpu_per_step", chart_host_cpu),
          ("energy_per_sample", chart_energy)]


# ---- main ----------------------------------------------------------------------------------

def import_pyplot():
    """pyplot on the headless Agg backend; InputError-like exit with the fix when missing."""
    try:
        import matplotlib
    except ImportError:
        print(f"{PROG}: error: matplotlib is not installed for {sys.executable}; "
              f"{MATPLOTLIB_FIX}", file=sys.stderr)
        sys.exit(1)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Same input, same SVG bytes: fixed ids and no creation date.
    plt.rcParams["svg.hashsalt"] = "trainbench"
    # Text stays text in the SVG: searchable, selectable and much smaller than glyph paths.
    plt.rcParams["svg.fonttype"] = "none"
    return plt


# matplotlib names each clip path after a hash of its exact float bounds, and the constrained
# layout's solver can differ in the last bits between runs when a header has a legend: the
# same chart would get other ids (the coordinates written, rounded, are the same).
CLIP_ID = re.compile(r'(?<=url\(#)p[0-9a-f]{10}(?=\))|(?<=<clipPath id=")p[0-9a-f]{10}(?=")')


def stable_clip_ids(svg: str) -> str:
    """The SVG with its clip path ids numbered in order of first use: clip1, clip2, ..."""
    ids: dict[str, str] = {}
    return CLIP_ID.sub(lambda m: ids.setdefault(m.group(0), f"clip{len(ids) + 1}"), svg)


def write_svg(fig, path: Path) -> None:
    """The figure as SVG, the same bytes for the same input (no date, stable ids)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    path.write_text(stable_clip_ids(buffer.getvalue()), encoding="utf-8")


def write_charts(plt, data: Data, out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    figs = Figures(plt, data)
    written = []
    for name, draw in CHARTS:
        try:
            fig = draw(figs, data)
        except Skip as why:
            print(f"skipped {name}: {why}")
            for ext in ("png", "svg"):
                stale = out / f"{name}.{ext}"
                if stale.exists():
                    stale.unlink()
                    print(f"  removed the old {stale}")
            continue
        paths = [out / f"{name}.png", out / f"{name}.svg"]
        fig.savefig(paths[0], dpi=130)
        write_svg(fig, paths[1])
        plt.close(fig)
        print(f"wrote {paths[0]} {paths[1]}")
        written.append(name)
    return written


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("csv", nargs="+", metavar="CSV", help="trainbench CSV files")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the PNG and SVG files")
    p.add_argument("--latest", action="store_true",
                   help="per benchmark, only the newest run of each machine and framework")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        data = Data(tbcsv.read_tables(args.csv), latest=args.latest)
        plt = import_pyplot()
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise tbcsv.InputError(f"{out}: exists and is not a folder (--out)")
        written = write_charts(plt, data, out)
        if not written:
            print(f"{PROG}: no chart could be drawn: no ok measurements in "
                  f"{', '.join(args.csv)}", file=sys.stderr)
        return 0

    return tbcsv.run_main(run, PROG)


if __name__ == "__main__":
    sys.exit(main())

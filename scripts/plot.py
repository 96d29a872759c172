#!/usr/bin/env python3
"""Draws the trainbench charts and a report from one or more CSVs (results/SCHEMA.md), headless.

    scripts/plot.py results/*/*.csv --out charts/
    scripts/plot.py --latest results/*/*.csv --out charts/   # the newest rows per machine

--latest keeps, for each benchmark, only the newest run's rows of each machine and framework
(a machine: host, CPU model and GPU, not the driver: see machine_of), so that a folder of many
runs draws one series per machine instead of one per commit; the README's charts are drawn so.

A row's configuration is its device, precision, batch and variant (the flags that change what
it measures, results/SCHEMA.md schema 4; derived from cuda_graph/data_on_device in older
rows): runs that differ in any of them are separate bars, labelled with the variant.

Writes each chart as PNG and SVG into the --out folder:
  headline            per model, samples/s of cpu / gpu:1 / gpu:N (or the CPU configurations of
                      a machine without GPU rows), the speedup over cpu on each bar;
                      predicted rows hatched beside the measured ones
  samples_per_s       samples/s per model and device configuration (log scale)
  speedup_vs_cpu      speedup of each configuration over the `cpu` row of the same machine
  scaling_efficiency  multi-GPU scaling efficiency against the number of devices (gpu:N rows)
  time_to_accuracy    validation accuracy against elapsed seconds (epochs/ rows)
  peak_memory         peak memory per benchmark, broken down when the mem_* columns exist
  host_cpu_per_step   host CPU time per training step per benchmark
  energy_per_sample   GPU energy per trained sample per model and configuration (gpu:* rows of
                      schema_version 3); hatched bars and a note line name throttled runs
and report.md and report.html (self-contained: the PNGs inlined) with the machines, a summary
table, every chart with the question it answers, and what was skipped and why.
A chart whose columns are absent or empty is skipped with a one-line note (and an old file of
that chart in --out is removed, so the folder never mixes runs). Exit status 2 on bad input.
See docs/scripts.md.
"""
from __future__ import annotations

import argparse
import io
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The shared reader and the tbplot package live next to this script; names of tbplot used by
# callers of plot.py (its tests) stay importable from here.
import tbcsv  # noqa: E402
from tbplot import headline, report  # noqa: E402
from tbplot.figures import (HATCH, LABEL_BOX, Figures, Skip, bar_panel_width,  # noqa: E402,F401
                            config_labels, describe_machines, grouped_bars, log_scale,
                            panels_of, si, status_markers, style_legend)
from tbplot.model import (Config, Data, baseline_config, config_of,  # noqa: E402,F401
                          config_sort_key, machine_of, newest_rows, panel_title,
                          scaling_lines, speedups, spread)

PROG = "plot.py"
MATPLOTLIB_FIX = "install python3-matplotlib (apt) or pip install matplotlib"

RSS = "peak RSS (no breakdown)"
DEVICE_PEAK = "device peak (no breakdown)"
MEMORY_PARTS = [("mem_weights_bytes", "weights"), ("mem_grads_bytes", "gradients"),
                ("mem_optimizer_bytes", "optimizer state"),
                ("mem_activations_bytes", "activations"), ("mem_workspace_bytes", "workspace"),
                ("mem_data_bytes", "data"), ("mem_context_bytes", "CUDA context and libraries")]

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


def chart_scaling(figs: Figures, data: Data):
    """(c) scaling efficiency against the number of devices, from gpu:N rows."""
    lines = scaling_lines(data)
    if not lines:
        raise Skip("no gpu:1 row with a gpu:N (N >= 2) row of the same machine and model")
    panels = list(dict.fromkeys(k[1] for k in lines))
    series = [s for s in data.series if any(k[0] == s for k in lines)]
    rows = [r for r in data.step_rows if tbcsv.device_count(config_of(r).device) is not None
            and not config_of(r).shared_device and tbcsv.is_ok(r)]
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


CHARTS = [("headline", headline.chart_headline), ("samples_per_s", chart_samples_per_s),
          ("speedup_vs_cpu", chart_speedup), ("scaling_efficiency", chart_scaling),
          ("time_to_accuracy", chart_time_to_accuracy), ("peak_memory", chart_peak_memory),
          ("host_cpu_per_step", chart_host_cpu), ("energy_per_sample", chart_energy)]


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


def write_charts(plt, data: Data, out: Path, skipped: dict | None = None) -> list[str]:
    """Draws every chart into out; the names of those written, in order. A chart that cannot
    be drawn is noted, its old files removed, and its reason put into skipped[name]."""
    out.mkdir(parents=True, exist_ok=True)
    figs = Figures(plt, data)
    written = []
    for name, draw in CHARTS:
        try:
            fig = draw(figs, data)
        except Skip as why:
            print(f"skipped {name}: {why}")
            if skipped is not None:
                skipped[name] = str(why)
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
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for the PNG and SVG files and report.md/report.html")
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
        skipped: dict[str, str] = {}
        written = write_charts(plt, data, out, skipped)
        if not written:
            print(f"{PROG}: no chart could be drawn: no ok measurements in "
                  f"{', '.join(args.csv)}", file=sys.stderr)
        for path in report.write_report(data, out, written, skipped):
            print(f"wrote {path}")
        return 0

    return tbcsv.run_main(run, PROG)


if __name__ == "__main__":
    sys.exit(main())

"""The energy chart: GPU energy per trained sample (energy_j_per_sample, schema_version 3) per
model and configuration, gpu:* rows only; bars of a configuration whose GPU reported a throttle
reason are hatched and named in a note, and the GPU rows without the column are counted."""
from __future__ import annotations

import tbcsv
from tbplot.figures import HATCH, Figures, Skip, bar_panel_width, grouped_bars, panels_of
from tbplot.model import Data, config_of, config_sort_key, panel_title, spread

QUESTION = "How much GPU energy does one trained sample cost, and did a GPU throttle?"


def is_gpu_row(row) -> bool:
    return tbcsv.on_gpu(row)


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


def throttle_notes(data: Data, got: dict, gpu_rows, throttled: dict) -> list[str]:
    """The note naming each throttled benchmark with its reasons and in how many of its rows;
    none when no GPU reported a throttle reason."""
    if not throttled:
        return []
    by_benchmark = []
    for (s, c), (reasons, total) in sorted(throttled.items(), key=lambda kv: (
            data.series.index(kv[0][0]), kv[0][1].panel, config_sort_key(kv[0][1]))):
        name = next(r["benchmark"] for r in gpu_rows if data.key(r) == (s, c))
        rows_word = ("repetitions" if got[(s, c)].source == "iterations"
                     else "median aggregate rows")
        why = ", ".join(f"{reason} in {n} of {total} {rows_word}"
                        for reason, n in sorted(reasons.items()))
        by_benchmark.append(f"{name} on {s}: {why}")
    return ["Throttled (hatched bars; gpu_throttle): " + listed(by_benchmark)]


def lacking_notes(data: Data, got: dict, gpu_rows) -> list[str]:
    """The note counting, per series, the configurations whose ok GPU rows have no value:
    files before schema_version 3, or no NVML. None when every one has."""
    lacking: dict[str, set] = {}
    for r in gpu_rows:
        if tbcsv.is_ok(r) and data.key(r) not in got:
            lacking.setdefault(data.series_of(r), set()).add(config_of(r))
    if not lacking:
        return []
    return ["No energy_j_per_sample (rows before schema_version 3, or NVML not loaded), not "
            "drawn: " + listed([f"{s} ({len(cs)} configuration{'s' * (len(cs) != 1)})"
                                for s, cs in lacking.items()])]


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
    notes += throttle_notes(data, got, gpu_rows, throttled) + lacking_notes(data, got, gpu_rows)
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
        grouped_bars(ax, data, configs, series, values, {}, tbcsv.figure, log=False,
                     hatched=set(throttled))
        ax.set_title(panel_title(panel), fontsize=10)
        ax.set_ylabel(f"energy per sample ({unit})", fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
    return fig

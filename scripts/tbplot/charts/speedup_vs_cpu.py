"""The speedup chart: each configuration's samples/s over the samples/s of the `cpu` row (all
cores) of the same machine and workload (the rows' speedup_vs_cpu over their cpu_baseline: the
same precision and batch where the CPU ran them, else fp32 and the cpu row's batch, said under
the bar from speedup_differs), on the wall clock, with the 1x line kept in view."""
from __future__ import annotations

import tbcsv
from tbplot.figures import Figures, Skip, bar_panel_width, grouped_bars, panels_of
from tbplot.model import Data, clock_notes, panel_title, speedup_pairs, times

QUESTION = ("How much faster than the same machine's cpu row (all cores) is each "
            "configuration?")


def chart_speedup(figs: Figures, data: Data):
    """(b) speedup of every configuration over the `cpu` row of the same machine."""
    pairs = speedup_pairs(data, data.step_rows)
    ratios = {k: v.ratio for k, v in pairs.items()}
    if not ratios:
        raise Skip("no configuration besides cpu has a cpu row of the same machine, model and "
                   "dataset")
    panels = panels_of(ratios)
    series = [s for s in data.series if any(k[0] == s for k in ratios)]
    low, high = min(ratios.values()), max(ratios.values())
    log = high / low > 10
    rows = [r for r in data.step_rows if data.series_of(r) in series and tbcsv.is_ok(r)]
    fig, axes = figs.new(
        "Speedup over the cpu row (all cores) of the same machine", rows,
        ["Speedup = median samples/s of the configuration / median samples/s of `cpu` "
         "(same model and dataset; same precision and batch where the CPU ran them, else fp32 "
         "and the cpu row's batch, said under the bar: bf16 vs fp32, bs 128 vs 8); dashed "
         "line: 1× (no speedup)." + (" Log scale." if log else "")] + clock_notes(data, rows),
        [bar_panel_width(cs, series) for cs in panels.values()], 3.6,
        figs.series_legend(series) if len(series) > 1 else None)
    values = {k: (v, v, v) for k, v in ratios.items()}
    for ax, (panel, configs) in zip(axes, panels.items()):
        grouped_bars(ax, data, configs, series, values, {}, times, log=log,
                     notes={k: v.label.replace(", ", "\n") for k, v in pairs.items()})
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1, zorder=1)
        # Keep the 1x reference in view even when every configuration is slower than cpu.
        bottom, top = ax.get_ylim()
        ax.set_ylim(min(bottom, 0.8) if log else bottom, max(top, 1.15))
        ax.set_title(panel_title(panel), fontsize=10)
        ax.set_ylabel("speedup over cpu (×)", fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
    return fig

"""The samples/s chart: training throughput of every device configuration, one panel per model
and dataset, one colour per machine, log scale, on the wall clock; failed and skipped
configurations marked where their bar would be."""
from __future__ import annotations

import tbcsv
from tbplot.figures import (Figures, Skip, bar_panel_width, grouped_bars, panels_of, si,
                            status_markers)
from tbplot.model import Data, clock_notes, panel_title, spread

QUESTION = ("How many samples per second does each benchmark train, per machine and device "
            "configuration?")


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
         "the repetitions. Log scale. LSTM samples are sequences."] + clock_notes(data, rows),
        [bar_panel_width(cs, series) for cs in panels.values()], 3.6,
        figs.series_legend(series) if len(series) > 1 else None)
    values = {k: spread(s) for k, s in got.items()}
    for ax, (panel, configs) in zip(axes, panels.items()):
        grouped_bars(ax, data, configs, series, values, markers, si, log=True)
        ax.set_title(panel_title(panel), fontsize=10)
        ax.set_ylabel("samples/s (log scale)", fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
    return fig

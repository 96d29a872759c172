"""The multi-GPU scaling chart: efficiency (samples/s on N devices over N times one device)
against N, one line per machine, precision and batch, from the gpu:N rows' own
scaling_efficiency (tbplot.model.scaling_lines)."""
from __future__ import annotations

import tbcsv
import tbdevices
from tbplot.figures import LABEL_BOX, Figures, Skip, style_legend
from tbplot.model import Data, clock_notes, config_of, panel_title, scaling_lines

QUESTION = "How close to N times one device do N devices get (gpu:N)?"


def chart_scaling(figs: Figures, data: Data):
    """(c) scaling efficiency against the number of devices, from gpu:N rows."""
    lines = scaling_lines(data)
    if not lines:
        raise Skip("no gpu:1 row with a gpu:N (N >= 2) row of the same machine and model")
    panels = list(dict.fromkeys(k[1] for k in lines))
    series = [s for s in data.series if any(k[0] == s for k in lines)]
    rows = [r for r in data.step_rows if config_of(r).on_gpu and tbcsv.is_ok(r)
            and (config_of(r).data_parallel or tbdevices.is_one_gpu(config_of(r).device_kind))]
    fig, axes = figs.new(
        "Multi-GPU scaling efficiency", rows,
        ["Efficiency = samples/s on N devices / (N × samples/s on 1 device): the gpu:N rows' "
         "scaling_efficiency over their gpu:1 row (medians); dashed line: perfect scaling "
         "(100%)."] + clock_notes(data, rows),
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

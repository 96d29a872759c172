"""Horizontal bar figures with one group per benchmark (named on the y axis) and a bar per series:
the scaffolding of the peak memory and host CPU charts, whose benchmarks are too many and too
differently named for a panel per model."""
from __future__ import annotations

from dataclasses import dataclass

from tbplot.figures import Figures, log_scale
from tbplot.model import Data


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

"""The time-to-accuracy chart: validation accuracy after each epoch against elapsed seconds, from
the epochs/ rows, one line per machine and device configuration."""
from __future__ import annotations

import statistics

import tbcsv
from tbplot.figures import Figures, Skip, config_labels, log_scale, panels_of, style_legend
from tbplot.model import Data, panel_title

# A line style and a marker per device configuration of a panel.
STYLES = ["-", "--", ":", "-."]
MARKS = "os^Dvx"

QUESTION = "How long does each configuration take to reach a validation accuracy?"


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


def draw_panel(ax, data: Data, panel, configs, series: list[str], curves: dict,
               ratio: bool) -> None:
    """One model's panel: a line per series and configuration (a line style per
    configuration); ratio: accuracies are fractions, shown as percents."""
    from matplotlib.ticker import PercentFormatter
    labels = config_labels(configs)
    for s in series:
        for i, c in enumerate(configs):
            pts = curves.get((s, c))
            if not pts:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, ys, linestyle=STYLES[i % len(STYLES)], marker=MARKS[i % len(MARKS)],
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
    style_legend(ax, [(label.replace("\n", " "), STYLES[i % len(STYLES)], MARKS[i % len(MARKS)])
                      for i, label in enumerate(labels)])


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
    for ax, (panel, configs) in zip(axes, panels.items()):
        draw_panel(ax, data, panel, configs, series, curves, ratio)
    return fig

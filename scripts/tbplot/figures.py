"""The figure scaffolding every chart shares: a header of machine lines and notes above a
grid of panels (Figures), grouped bar panels with value labels, log axes labelled in plain
numbers, and the tick labels of a configuration (device, variant, precision, batch)."""
from __future__ import annotations

import math
import textwrap

import tbcsv
from tbplot.model import Config, Data, config_sort_key, cores_text, variant_words

# Figure geometry, in inches and points.
MAX_WIDTH = 18.0
MIN_WIDTH = 9.0
SUBTITLE_PT = 8.5
LINE_IN = 0.19  # height of one subtitle line
MAX_MACHINE_LINES = 6
TALL_IN = 12.0  # a figure taller than this keeps this one's space between rows
# Value labels sit on a white box so reference lines and grid lines never cross the digits.
LABEL_BOX = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
             "alpha": 0.85}
# The hatch of bars whose GPU reported a throttle reason (gpu_throttle), so a slow run says why.
HATCH = "////"


def legend_height(rows: int, text_pt: float) -> float:
    """Inches the header's legend takes: its first row with the legend's padding (0.28 at the
    subtitle's size), then about 1.5 lines of its text a row."""
    return 0.0 if not rows else 0.28 * text_pt / SUBTITLE_PT + (rows - 1) * (1.5 * text_pt + 2) / 72


class Skip(Exception):
    """A chart that cannot be drawn from these rows; the message says why, in one line."""


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
            machine += f", {cores_text(cores)}"
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
            panel_h: float, legend=None, grow: bool = False, machines: bool = True,
            max_width: float = MAX_WIDTH, text_pt: float = SUBTITLE_PT,
            handle: tuple[float, float] = (1.6, 0.7)):
        """A figure with one axes per entry of panel_widths (inches), packed into rows of
        at most three and max_width inches; panels keep their width, so bars are equally wide
        in every panel. grow: a panel wider than max_width widens the figure instead of being
        squeezed (a group of bars too wide to split, whose tick labels would overlap).
        machines: a line per machine above the notes (the headline leaves them to the report).
        text_pt: the size of the notes and the legend; handle: the length and height of the
        legend's patches, in font sizes."""
        packed = pack_rows(panel_widths, max_width)
        widest = max(max_width, *panel_widths) if grow else max_width
        width = min(widest, max(MIN_WIDTH, *(sum(r) for r in packed)))
        chars = int(width * 72 / (0.58 * text_pt))  # DejaVu Sans is ~0.58 em wide
        line_in = LINE_IN * text_pt / SUBTITLE_PT
        described = describe_machines(self.data, rows) if machines else []
        lines = [w for line in described + notes
                 for w in textwrap.wrap(line, chars, subsequent_indent="    ")]
        legend = legend or []
        legend_cols, legend_rows = self._legend_shape(legend, width, text_pt, handle[0])
        header_h = 0.5 + line_in * len(lines) + legend_height(legend_rows, text_pt) + 0.08
        body_h = len(packed) * panel_h
        fig = self.plt.figure(figsize=(width, header_h + body_h), layout="constrained")
        if header_h + body_h > TALL_IN:
            # Constrained layout spaces rows by a share of the figure's height: a tall figure's
            # rows keep the space a TALL_IN figure gives them, not inches of blank paper.
            fig.get_layout_engine().set(hspace=0.02 * TALL_IN / (header_h + body_h))
        head, body = fig.subfigures(2, 1, height_ratios=[header_h, body_h])
        top = 1 - 0.12 / header_h
        head.text(0.012, top, title, fontsize=13, fontweight="bold", va="top")
        y = top - 0.38 / header_h
        for line in lines:
            head.text(0.012, y, line, fontsize=text_pt, va="top", color="0.25")
            y -= line_in / header_h
        if legend:
            handles, labels = zip(*legend)
            head.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.005, 0.0),
                        ncol=legend_cols, frameon=False, fontsize=text_pt, handlelength=handle[0],
                        handleheight=handle[1],
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
    def _legend_shape(legend, width: float, text_pt: float = SUBTITLE_PT,
                      handle: float = 1.6) -> tuple[int, int]:
        """Columns and rows of the legend: as many columns as fit in the width, each as wide
        as its widest label (matplotlib fills them column by column)."""
        if not legend:
            return 1, 0
        # A label's characters, then its patch, the pad after it and the space between columns.
        pad = (handle + 0.8 + 1.4) * text_pt + 4
        widths = [(len(label) * 0.6 * text_pt + pad) / 72 for _, label in legend]
        for cols in range(len(legend), 0, -1):
            rows = math.ceil(len(legend) / cols)
            if sum(max(widths[i:i + rows]) for i in range(0, len(widths), rows)) <= width - 0.3:
                return cols, rows
        return 1, len(legend)

    @staticmethod
    def patch(colour: str):
        from matplotlib.patches import Patch
        return Patch(color=colour)

    def series_legend(self, series: list[str]):
        return [(self.patch(self.data.colour(s)), s) for s in series]


def pack_rows(widths: list[float], max_width: float = MAX_WIDTH) -> list[list[float]]:
    """Greedy rows of panel widths: at most three panels and max_width inches per row."""
    rows: list[list[float]] = []
    for w in widths:
        if rows and len(rows[-1]) < 3 and sum(rows[-1]) + w <= max_width:
            rows[-1].append(w)
        else:
            rows.append([w])
    return rows


def si(value: float) -> str:
    """3 significant digits with a k/M/G suffix: bar labels stay short. The suffix is the
    rounded value's (999,700 is `1M`, never `1e+03k`)."""
    rounded = abs(float(f"{value:.3g}"))
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if rounded >= factor:
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
    """Tick labels: the device and its variant (a line per flag), plus precision and batch
    only where they vary in the panel."""
    vary_p = len({c.precision for c in configs}) > 1
    vary_b = len({c.batch for c in configs}) > 1
    out = []
    for c in configs:
        extra = " ".join(([c.precision] if vary_p else []) + ([f"bs:{c.batch}"] if vary_b else []))
        lines = [c.device] + variant_words(c.variant, c.device) + ([extra] if extra else [])
        out.append("\n".join(lines))
    return out


def grouped_bars(ax, data: Data, configs: list[Config], series: list[str], values: dict,
                 markers: dict, label, log: bool, hatched=frozenset(), notes=None) -> None:
    """One group of bars per configuration, one bar per series. values[(s, c)] is
    (center, low, high); markers[(s, c)] names a status (failed, skipped) drawn as text
    where a series has rows but no value; the bars of the (s, c) in hatched are hatched;
    notes[(s, c)] is a line under a bar's value label."""
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
            text = label(center) + (f"\n{notes[(s, c)]}" if notes and notes.get((s, c)) else "")
            ax.annotate(text, (x, hi), xytext=(0, 4), textcoords="offset points",
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
    shown = [notes[k] for k in values if notes and notes.get(k) and k[1] in configs]
    room *= 1.8 ** max((note.count("\n") + 1 for note in shown), default=0)  # note lines
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

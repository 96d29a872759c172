"""The headline chart (issues 22, 31, 37): one panel per workload, on one axis every machine's
samples/s of its device configurations (cpu, gpu:1, gpu:N; a machine without GPU rows shows its
CPU configurations: cpu, cpu:N, mpi:N), on the wall clock, grouped by precision and machine
(named under its group), one colour per configuration, each bar labelled with its samples/s
and its speedup over its machine's cpu row (with what differs between the pair: `bf16 vs fp32`,
`bs 128 vs 8`). Reference runs (tbplot.references) add their cpu, gpu:1 and largest predicted
gpu:N bars in this machine's workloads and precisions, labelled with their samples/s over this
machine's cpu row (`584× this cpu`). Predicted rows (issue 24) are hatched bars beside the
measured ones; shared-device rows (N replicas on one GPU) are left out: they check correctness,
and a bar among the gpu:N ones would read as scaling."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import tbcsv
import tbdevices
from tbplot.figures import LABEL_BOX, Skip, log_scale, si
from tbplot.model import (Config, clock_notes, config_name, config_sort_key, panel_title,
                          precision_key, speedup_pairs, times)
from tbplot.versus import over_this_cpu, reference_bars, version_differences

# Colours of the device configurations by family, in device order: greys for the CPU's threads,
# purples for CPU replicas sharing gradients (MPI ranks), saturated colours for the GPUs, so a cpu
# bar never looks like a gpu one.
PALETTES = {"cpu threads": ("#7f7f7f", "#bdbdbd", "#525252", "#a3a3a3"),
            "cpu replicas": ("#9467bd", "#c5b0d5", "#6a3d9a"),
            "gpus": ("#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#17becf", "#8c564b", "#e377c2",
                     "#bcbd22")}
PREDICTED_HATCH = "///"
QUESTION = ("How fast does each model train on each device configuration of this machine, and "
            "how much faster than its CPU (all cores)?")
# Geometry, in inches: a bar's slot (labels horizontal, or turned upright in a crowded group),
# the gap between groups, the y axis, the panel's height.
SLOT_IN, NARROW_SLOT_IN, GAP_IN, AXIS_IN, PANEL_H = 0.8, 0.5, 0.35, 0.9, 4.2
CROWDED = 3  # bars in a group above which their labels stand upright
CHAR_IN = 0.07  # a character of the 8.5 pt tick labels
LABEL_LINE_IN = 0.135  # a line of the 7 pt bar labels


@dataclass
class Selection:
    """What the headline shows: the (series, config) -> Sample of its bars, per series whether
    it had GPU rows, which series are reference runs, and the configurations left out with the
    reason."""
    bars: dict
    predicted: set
    gpu_series: set
    left_out: list[str]
    references: set
    bands: dict = field(default_factory=dict)  # predicted bar -> (low, high) samples/s


def shown_device(c: Config, has_gpu: bool) -> bool:
    """cpu, gpu:1 and gpu:N on a machine with GPUs (not jobs or threads sharing a GPU); the CPU
    configurations on one without."""
    if has_gpu:
        return c.all_cores or (c.on_gpu and (tbdevices.is_one_replica(c.device_kind)
                                             or bool(c.data_parallel)))
    return bool(c.device_kind) and not c.on_gpu


def select(data) -> Selection:
    measured = tbcsv.samples(data.step_rows, data.key, "samples_per_s")
    predicted = tbcsv.samples(data.predicted_rows, data.key, "samples_per_s")
    gpu_series = {s for s, c in measured if c.on_gpu}
    bars, left_out = {}, []
    for (s, c), sample in list(measured.items()) + list(predicted.items()):
        if c.checks_only:
            left_out.append(f"the {tbdevices.check_word(c.device_kind)} rows of {c.device} on {s} "
                            f"({tbdevices.what_it_checks(c.device_kind, c.device)})")
        elif shown_device(c, s in gpu_series):
            bars[(s, c)] = sample
    # The reference runs' bars of the workloads and precisions drawn for the input machines.
    wanted = {(c.panel, c.precision) for _, c in bars}
    refs = {k: v for k, v in reference_bars(data).items() if (k[1].panel, k[1].precision) in wanted}
    bars.update(refs)
    gpu_series |= {s for s, c in refs if c.on_gpu}
    predicted_keys = {k for k in bars if k[1].predicted}
    return Selection(bars, predicted_keys, gpu_series, list(dict.fromkeys(left_out)),
                     {s for s, _ in refs}, prediction_bands(data, predicted_keys))


def prediction_bands(data, keys: set) -> dict:
    """Predicted bar -> (low, high): the band its row wrote (schema 5), where it has one."""
    rows = [r for r in data.predicted_rows + data.reference_rows if tbcsv.is_predicted(r)]
    low = tbcsv.samples(rows, data.key, "samples_per_s_low")
    high = tbcsv.samples(rows, data.key, "samples_per_s_high")
    return {k: (low[k].center, high[k].center) for k in keys if k in low and k in high}


def this_machine(data, chosen: Selection) -> str | None:
    """The one input machine the reference bars are compared with, if there is one."""
    own = list(dict.fromkeys(s for s, _ in chosen.bars if s not in chosen.references))
    return own[0] if len(own) == 1 and chosen.references else None


def caption(data) -> str:
    """The report's one line under the chart: the question, and what the bars are."""
    chosen = select(data)
    series = list(dict.fromkeys(s for s, _ in chosen.bars))
    cpu_only = [s for s in series if s not in chosen.gpu_series]
    text = QUESTION + " Samples/s on the wall clock."
    if cpu_only:
        devices = sorted({c.device for s, c in chosen.bars if s in cpu_only},
                         key=tbcsv.device_sort_key)
        text += (f" No GPU rows for {', '.join(cpu_only)}: drawn with the CPU configurations "
                 f"it has ({', '.join(devices)}).")
    if chosen.references:
        names = ", ".join(sorted(chosen.references, key=data.series.index))
        text += (f" Beside them, the reference run of {names} in the same workloads and "
                 f"precisions, its bars labelled with their samples/s over this machine's cpu row.")
    if chosen.predicted:
        text += " Hatched bars are predicted (measurement=predicted), not measured."
    # The chart carries two lines of notes; the report keeps them all.
    rows = [r for r in data.step_rows + data.predicted_rows + data.reference_rows
            if data.key(r) in chosen.bars and tbcsv.is_ok(r)]
    return text + " " + " ".join(notes(chosen, data, rows))


def brief_notes(chosen: Selection) -> list[str]:
    """The chart's own notes, two short lines at most: what a bar and its label are, and what
    hatched bars and reference runs are; the rest (machines, versions, every definition) is the
    report's."""
    first = ("Bars: median samples/s on the wall clock. Labels: samples/s and the speedup over "
             "the machine's own cpu row (what differs in brackets).")
    second = []
    if chosen.predicted:
        second.append("Hatched: predicted, not measured" + (" (whiskers: its band)" if chosen.bands else ""))
    if chosen.references:
        second.append("reference runs over this machine's cpu row")
    second.append("machines, versions and notes: report.md")
    text = "; ".join(second)
    return [first, text[0].upper() + text[1:] + "."]


def colour_keys(bars) -> dict:
    """Device configuration (device and measured variant) -> colour; a predicted bar takes
    the colour of the configuration it predicts."""
    keys = sorted({measured_config(c) for _, c in bars}, key=config_sort_key)
    families = dict.fromkeys((config_name(k), family(k)) for k in keys)
    used: dict = {}
    out = {}
    for name, kind in families:
        palette = PALETTES[kind]
        out[name] = palette[used.get(kind, 0) % len(palette)]
        used[kind] = used.get(kind, 0) + 1
    return out


def family(c: Config) -> str:
    """The palette of a configuration: the GPUs', the CPU's replicas sharing gradients (MPI
    ranks), or the CPU's threads."""
    if c.on_gpu:
        return "gpus"
    return "cpu replicas" if c.data_parallel else "cpu threads"


def measured_config(c: Config) -> Config:
    """The configuration a bar stands for, without what a prediction assumed (its link), its
    precision and batch."""
    return c.but(precision="", batch="", variant=tbdevices.measured_variant(c.variant))


@dataclass
class Group:
    """One group of bars on a panel's x axis: a precision, of one machine where several are
    drawn, its bars' (series, config) keys in configuration order, and their labels' lines
    (set_labels), which decide the width of the group's slots."""
    label: str
    keys: list
    texts: dict = None

    @property
    def crowded(self) -> bool:
        return len(self.keys) > CROWDED

    @property
    def slot(self) -> float:
        """A bar's slot: wide enough for its label's longest line, unless the labels stand."""
        if self.crowded:
            return NARROW_SLOT_IN
        longest = max(len(line) for lines in self.texts.values() for line in lines)
        return max(SLOT_IN, longest * 0.062 + 0.12)

    def label_height(self) -> float:
        """Inches the tallest label takes above its bar."""
        if self.crowded:
            return max(len(line) for lines in self.texts.values() for line in lines) * 0.06 + 0.1
        return max(len(lines) for lines in self.texts.values()) * LABEL_LINE_IN + 0.1


def panels(data, chosen: Selection) -> dict:
    """workload panel -> [Group]: by precision, then by machine (input machines first, then
    the references, in data.series order); a group's tick names its machine where several are
    drawn."""
    several = len({s for s, _ in chosen.bars}) > 1
    by_panel: dict = {}
    for s, c in chosen.bars:
        by_panel.setdefault(c.panel, {}).setdefault((c.precision, s), []).append((s, c))
    out = {}
    for panel, groups in by_panel.items():
        ordered = sorted(groups.items(), key=lambda kv: (precision_key(kv[0][0]),
                                                         data.series.index(kv[0][1])))
        out[panel] = [Group(tick_label(data, s, precision, several),
                            sorted(keys, key=lambda k: config_sort_key(k[1])))
                      for (precision, s), keys in ordered]
    return out


def tick_label(data, series: str, precision: str, several: bool) -> str:
    if not several:
        return precision
    return "\n".join(textwrap.wrap(data.machine_name(series), 16) + [precision])


def group_width(group: Group) -> float:
    """A group's width in inches: its bars' slots, or its tick label where that is wider."""
    label = max(len(line) for line in group.label.split("\n")) * CHAR_IN + 0.1
    return max(len(group.keys) * group.slot, label)


def set_labels(by_panel: dict, chosen: Selection, labels: "Labels") -> None:
    """Each group's bar labels: the samples/s, then the ratio and what differs, a line each."""
    for groups in by_panel.values():
        batches = {c.batch for g in groups for _, c in g.keys}
        for g in groups:
            g.texts = {k: [si(chosen.bars[k].center)] + labels.lines(k, batches) for k in g.keys}


def panel_width(title: str, groups: list[Group]) -> float:
    body = sum(group_width(g) for g in groups) + GAP_IN * len(groups)
    return max(AXIS_IN + body, AXIS_IN + len(title) * 0.1)


@dataclass
class Labels:
    """Each bar's label lines beneath its samples/s: own bars their speedup over their machine's
    cpu row, reference bars their samples/s over this machine's cpu row."""
    own: dict  # (series, config) -> Speedup
    versus: dict  # (reference, config) -> Speedup over this machine's cpu row

    def lines(self, key, batches: set) -> list[str]:
        s, c = key
        if key in self.versus:
            pair = self.versus[key]
            lines = [times(pair.ratio) + " this cpu"]
        elif c.all_cores and not c.variant:
            pair, lines = None, ["1× (cpu)"]
        else:
            pair = self.own.get(key)
            lines = [times(pair.ratio)] if pair else []
        if pair and pair.label:
            lines += pair.label.split(", ")  # `bf16 vs fp32`, `bs 128 vs 8`: a line each
        if len(batches) > 1 and not (pair and "bs " in pair.label):
            lines.append(f"bs:{c.batch}")
        return lines


def draw_panel(ax, groups: list[Group], chosen: Selection, colours: dict, log: bool) -> None:
    """The panel's groups side by side, one bar per configuration, in inch-proportional
    x units so that every panel's bars are equally wide."""
    x, ticks, heights = GAP_IN / 2, [], []
    bar = min(SLOT_IN, *(g.slot for g in groups)) * 0.82  # one bar width on the panel
    for group in groups:
        width, slot = group_width(group), group.slot
        start = x + (width - slot * len(group.keys)) / 2
        for i, k in enumerate(group.keys):
            s, c = k
            value = chosen.bars[k].center
            centre = start + slot * (i + 0.5)
            predicted = k in chosen.predicted
            ax.bar(centre, value, bar, color=colours[config_name(measured_config(c))],
                   hatch=PREDICTED_HATCH if predicted else None,
                   edgecolor="white" if predicted else None, linewidth=0, zorder=2)
            if k in chosen.bands:  # the prediction's band, a whisker over the hatched bar
                lo, hi = chosen.bands[k]
                ax.errorbar(centre, value, yerr=[[max(0.0, value - lo)], [max(0.0, hi - value)]], fmt="none",
                            ecolor="#333333", elinewidth=0.9, capsize=2.5, zorder=3)
                value = max(value, hi)
            ax.annotate("\n".join(group.texts[k]), (centre, value), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7,
                        zorder=4, bbox=LABEL_BOX, rotation=90 if group.crowded else 0,
                        linespacing=1.1)
            heights.append(value)
        ticks.append(x + width / 2)
        x += width + GAP_IN
    tallest = max(g.label_height() for g in groups)
    ax.set_xticks(ticks, [g.label for g in groups], fontsize=8.5)
    ax.set_xlim(0, x - GAP_IN / 2)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    # Room above the highest bar for its label: the share of the axes' height the label takes.
    share = min(0.6, tallest / (PANEL_H - 1.4))
    low, high = min(heights), max(heights)
    if log:
        decades = math.log10(high / (low / 3))
        top = high * 10 ** (share * decades / (1 - share))
        log_scale(ax, "y", low / 3, top)
        ax.set_ylim(low / 3, top)
    else:
        from matplotlib.ticker import FuncFormatter
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: si(v)))
        ax.set_ylim(0, high / (1 - share))


def legend_entries(figs, chosen: Selection, colours: dict) -> list:
    """A solid patch per measured configuration, a hatched one per predicted configuration
    and link: `gpu:8 predicted for nvlink4 (not measured)`."""
    from matplotlib.patches import Patch
    measured = {config_name(measured_config(c)) for k in chosen.bars
                if k not in chosen.predicted for c in [k[1]]}
    entries = [(figs.patch(colour), name) for name, colour in colours.items() if name in measured]
    predicted = sorted({(measured_config(c), c.link) for _, c in chosen.predicted},
                       key=lambda p: (config_sort_key(p[0]), p[1]))  # the link too: no set order
    said = set()  # one entry per configuration and link, whatever the models and precisions
    for c, link in predicted:
        name = config_name(c)
        if (name, link) in said:
            continue
        said.add((name, link))
        entries.append((Patch(facecolor=colours[name], edgecolor="white", hatch=PREDICTED_HATCH,
                              linewidth=0), f"{name} predicted for {link} (not measured)"))
    return entries


def notes(chosen: Selection, data, rows) -> list[str]:
    out = ["Bars: median samples/s over ok repetitions (or the median aggregate row); label: "
           "samples/s and the speedup over the same machine's cpu row (all cores) of the "
           "workload, in the same precision and batch where the CPU ran them, else fp32 and the "
           "cpu row's batch, with what differs (bf16 vs fp32, bs 128 vs 8)."]
    out += clock_notes(data, rows)
    series = list(dict.fromkeys(s for s, _ in chosen.bars))
    cpu_only = [s for s in series if s not in chosen.gpu_series]
    if cpu_only:
        out.append(f"No GPU rows for {', '.join(cpu_only)}: its CPU configurations are shown "
                   f"(cpu = all cores, cpu:N = N threads, mpi:N = N ranks).")
    this = this_machine(data, chosen)
    for ref in data.references:
        if ref.name not in chosen.references:
            continue
        against = (f"labelled with their samples/s over {data.machine_name(this)}'s cpu row "
                   "(× this cpu)" if this else "labelled with their speedup over their own cpu "
                   "row")
        out.append(f"Reference run {ref.name}: {ref.gpu or ref.cpu} ({ref.cpu}), {ref.date}, "
                   f"{ref.csv.name}; its cpu, gpu:1 and largest predicted gpu:N in these "
                   f"workloads and precisions, {against}.")
        differs = version_differences(data, this, ref.name) if this else ""
        if differs:
            out.append(f"Versions differ between {ref.name} and this machine ({ref.name}'s "
                       f"first): {differs}.")
    if chosen.predicted:
        froms = tbcsv.distinct([r for r in data.predicted_rows + data.reference_rows
                                if tbcsv.is_predicted(r) and data.key(r) in chosen.bars],
                               "predicted_from")
        out.append("Hatched: predicted scaling (measurement=predicted) from the timeline of "
                   + (", ".join(froms[:3]) + (" and others" if len(froms) > 3 else "")
                      if froms else "a one-device row")
                   + " and a link model; not a measurement"
                   + ("; whiskers: the prediction's band (docs/prediction.md)." if chosen.bands else "."))
    if chosen.left_out:
        out.append("Left out: " + "; ".join(chosen.left_out[:4])
                   + (f"; and {len(chosen.left_out) - 4} more" if len(chosen.left_out) > 4
                      else ""))
    return out


def bar_labels(data, chosen: Selection) -> Labels:
    own = speedup_pairs(data)
    this = this_machine(data, chosen)
    versus = {}
    if this:
        refs = {k: v for k, v in chosen.bars.items() if k[0] in chosen.references}
        versus = over_this_cpu(data, this, refs)
    elif chosen.references:
        # Several input machines: each reference bar over its own machine's cpu row.
        own.update(speedup_pairs(data, data.reference_rows))
    return Labels(own, versus)


def chart_headline(figs, data):
    """The headline: per workload, every machine's grouped bars of samples/s per device
    configuration on one axis."""
    chosen = select(data)
    if not chosen.bars:
        raise Skip("no ok row of cpu, gpu:N, cpu:N or mpi:N has a samples_per_s value")
    by_panel = panels(data, chosen)
    set_labels(by_panel, chosen, bar_labels(data, chosen))
    colours = colour_keys(chosen.bars)
    widths = [panel_width(panel_title(p), groups) for p, groups in by_panel.items()]
    rows = [r for r in data.step_rows + data.predicted_rows + data.reference_rows
            if data.key(r) in chosen.bars and tbcsv.is_ok(r)]
    series = list(dict.fromkeys(s for s, _ in chosen.bars))
    machines = ", ".join(data.machine_name(s) for s in series)
    title = "Training throughput per device configuration" + (f": {machines}" if len(machines) <= 70 else "")
    fig, axes = figs.new(title, rows, brief_notes(chosen), widths, PANEL_H,
                         legend_entries(figs, chosen, colours), grow=True, machines=False)
    for ax, (panel, groups) in zip(axes, by_panel.items()):
        # A log axis only where a panel's bars differ by more than 20x (cpu against gpu).
        values = [chosen.bars[k].center for g in groups for k in g.keys]
        log = max(values) / max(min(values), 1e-12) > 20
        draw_panel(ax, groups, chosen, colours, log)
        ax.set_title(panel_title(panel), fontsize=10)
        ax.set_ylabel("samples/s, wall clock" + (" (log scale)" if log else ""), fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
    return fig

"""The headline chart (issues 22, 31, 37): one panel per workload, on one axis every machine's
samples/s of its device configurations (cpu, gpu:1, gpu:N; a machine without GPU rows shows its
CPU configurations: cpu, cpu:N, mpi:N), on the wall clock, grouped by precision and machine
(named under its group; a GPU machine's cpu bars in a group of their own naming its host CPU),
one colour per device and one pattern per flag of its variant, so that every configuration in a
panel looks different, each bar labelled with its samples/s and its speedup over its machine's
cpu row (with what differs between the pair: `bf16 vs fp32`, `bs 128 vs 8`), its whiskers the
min-max of its repetitions. Reference runs (tbplot.references) add their cpu, gpu:1 and largest
predicted gpu:N bars in this machine's workloads and precisions, labelled with their samples/s
over this machine's cpu row (`584× this cpu`). Predicted rows (issue 24) are diagonally hatched
bars, one direction per link, beside the measured ones, their whiskers the prediction's band;
shared-device rows (N replicas on one GPU) are left out: they check correctness, and a bar among
the gpu:N ones would read as scaling. A panel wider than MAX_WIDTH_IN is split into parts on rows
of their own, on one y scale, so that the text stays legible where the README shows the chart."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import tbcsv
import tbdevices
from tbplot.figures import LABEL_BOX, Skip, log_scale, si
from tbplot.model import (Config, clock_notes, config_name, config_sort_key, cpu_name,
                          host_cpu, panel_title, precision_key, speedup_pairs, spread, times)
from tbplot.versus import over_this_cpu, reference_bars, version_differences

# Colours of the devices by family, in device order: greys for the CPU's threads, purples for
# CPU replicas sharing gradients (MPI ranks), saturated colours for the GPUs, so a cpu bar never
# looks like a gpu one. A variant (data_on_device, optimizer:sgd, ...) keeps its device's colour
# and adds a pattern per flag (VARIANT_HATCHES, overlaid where it has several); a prediction is
# hatched diagonally, one direction per link and source (PREDICTED_HATCHES). The three sets of
# hatch characters and WRAP_HATCH do not overlap, so no two configurations share a look (looks).
PALETTES = {"cpu threads": ("#808080", "#c8c8c8", "#3c3c3c", "#a89a8a", "#6e6255"),
            "cpu replicas": ("#9467bd", "#c5b0d5", "#5b2c8f"),
            "gpus": ("#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#17becf", "#8c564b", "#e377c2",
                     "#bcbd22")}
PREDICTED_HATCHES = ("///", "\\\\\\", "xxx", "//", "\\\\", "xx")
VARIANT_HATCHES = ("..", "--", "oo", "**", "O", "|")  # one a variant's flag, overlaid
WRAP_HATCH = "+"  # added to a look past a palette's or a list's end, until it is unique
QUESTION = ("How fast does each model train on each device configuration of this machine, and "
            "how much faster than its CPU (all cores)?")
# Text, in points: the bars' labels, the groups' tick labels, the panels' titles and axes, the
# header's notes and legend; large enough to read where the README shows the chart (about
# 0.6 of its size).
LABEL_PT, TICK_PT, TITLE_PT, AXIS_PT, HEADER_PT = 8.0, 9.5, 11.0, 9.0, 9.5
# Geometry, in inches: a bar's slot (labels horizontal, or turned upright in a crowded group),
# the gap between groups, the y axis, the panel's height, and the figure's widest (a panel wider
# is split into parts, a row each).
SLOT_IN, NARROW_SLOT_IN, GAP_IN, AXIS_IN, PANEL_H, MAX_WIDTH_IN = 0.8, 0.5, 0.35, 1.0, 4.2, 14.0
CROWDED = 3  # bars in a group above which their labels stand upright
CHAR_IN = 0.6 * TICK_PT / 72  # a character of the tick labels (DejaVu Sans is ~0.6 em wide)
LABEL_CHAR_IN = 0.63 * LABEL_PT / 72  # a character of the bar labels
LABEL_LINE_IN = 1.39 * LABEL_PT / 72  # a line of the bar labels (line spacing 1.1)
TICK_WRAP = 16  # characters of a machine's name per tick label line


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

    def whisker(self, key) -> tuple[float, float] | None:
        """A bar's whisker: a predicted bar's band, a measured bar's min-max over its
        repetitions (model.spread, as samples_per_s draws them); None for one value."""
        if key in self.predicted:
            return self.bands.get(key)
        sample = self.bars[key]
        if sample.repetitions < 2:
            return None
        _, low, high = spread(sample)
        return (low, high) if high > low else None


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
    text = QUESTION
    if cpu_only:
        devices = sorted({c.device for s, c in chosen.bars if s in cpu_only},
                         key=tbcsv.device_sort_key)
        text += (f" No GPU rows for {', '.join(cpu_only)}: drawn with the CPU configurations "
                 f"it has ({', '.join(devices)}; cpu = all cores, cpu:N = N threads, mpi:N = N "
                 f"ranks).")
    if chosen.references:
        names = ", ".join(sorted(chosen.references, key=data.series.index))
        text += (f" Beside them, the reference run of {names} in the same workloads and "
                 f"precisions, its bars labelled with their samples/s over this machine's cpu row.")
    if any(tbdevices.measured_variant(c.variant) for _, c in chosen.bars):
        text += (" A dotted, lined or circled bar is a variant of its device (its flags: the "
                 "legend).")
    # The chart carries two lines of notes; the report keeps them all (what hatching and whiskers
    # mean among them).
    rows = [r for r in data.step_rows + data.predicted_rows + data.reference_rows
            if data.key(r) in chosen.bars and tbcsv.is_ok(r)]
    return text + " " + " ".join(notes(chosen, data, rows))


def brief_notes(chosen: Selection) -> list[str]:
    """The chart's own notes, two short lines at most: what a bar and its label are, and what
    hatched bars and reference runs are; the rest (machines, versions, every definition) is the
    report's."""
    first = ("Bars: median samples/s on the wall clock. Labels: samples/s and the speedup over "
             "the machine's own cpu row (what differs in brackets).")
    second = [whiskers_said(chosen).rstrip(".")] if whiskers_said(chosen) else []
    if chosen.predicted:
        second.append("diagonal hatching: predicted, not measured")
    if chosen.references:
        second.append("reference runs over this machine's cpu row")
    second.append("machines, versions and notes: report.md")
    text = "; ".join(second)
    return [first, text[0].upper() + text[1:] + "."]


def whiskers_said(chosen: Selection, long: bool = False) -> str:
    """What the whiskers are, where some bar has one: `Whiskers: min-max of the repetitions
    (measured), the prediction's band (predicted).`"""
    have = [k for k in chosen.bars if chosen.whisker(k)]
    measured = any(k not in chosen.predicted for k in have)
    predicted = any(k in chosen.predicted for k in have)
    if not have:
        return ""
    parts = ([("min–max of the repetitions" if long else "min–max over repetitions")
              + (" (measured bars)" if predicted else "")] if measured else [])
    parts += (["the prediction's band (hatched bars" + (", docs/prediction.md)" if long else ")")]
              if predicted else [])
    return "Whiskers: " + ", ".join(parts) + "."


@dataclass(frozen=True)
class Look:
    """How a configuration's bars are drawn: a fill colour (its device), a hatch (its variant,
    or the link a prediction assumes; '' for none) and the colour the hatch is drawn in (white
    on a dark fill, dark on a light one)."""
    colour: str
    hatch: str = ""

    @property
    def hatch_colour(self) -> str:
        from matplotlib.colors import to_rgb
        r, g, b = to_rgb(self.colour)
        return "#222222" if 0.299 * r + 0.587 * g + 0.114 * b > 0.6 else "white"

    def patch(self):
        from matplotlib.patches import Patch
        return Patch(facecolor=self.colour, hatch=self.hatch or None,
                     edgecolor=self.hatch_colour if self.hatch else self.colour, linewidth=0)


def look_key(c: Config) -> tuple[str, str]:
    """What a bar's look and its legend entry stand for: its configuration (device and
    measured variant) and, for a prediction, what it assumes (the variant items no measured
    row has: `predicted:nvlink4/from:gpu:1`; '' for a measured bar)."""
    measured = measured_config(c)
    assumed = "/".join(i for i in tbdevices.variant_items(c.variant)
                       if i not in tbdevices.variant_items(measured.variant)) if c.predicted else ""
    return config_name(measured), assumed


def looks(bars) -> dict:
    """look_key -> Look, in legend order (measured configurations by device, then the
    predictions): a colour per device within its family's palette, a pattern per flag of its
    measured variant and a diagonal hatch per prediction's assumptions, so that no two keys look
    alike."""
    configs = sorted({c for _, c in bars}, key=lambda c: (c.predicted, config_sort_key(
        measured_config(c)), look_key(c)))
    devices = dict.fromkeys((c.device, family(c)) for c in sorted(
        {measured_config(c).but(variant="") for c in configs}, key=config_sort_key))
    colours, used = {}, {}
    for device, kind in devices:
        palette = PALETTES[kind]
        colours[device] = palette[used.get(kind, 0) % len(palette)]
        used[kind] = used.get(kind, 0) + 1
    items = sorted({i for c in configs
                    for i in tbdevices.variant_items(tbdevices.measured_variant(c.variant))},
                   key=lambda i: (tbdevices.variant_order(i), i))
    assumed = list(dict.fromkeys(look_key(c)[1] for c in configs if c.predicted))
    out: dict = {}
    for c in configs:
        if look_key(c) in out:
            continue
        hatch = PREDICTED_HATCHES[assumed.index(look_key(c)[1]) % len(PREDICTED_HATCHES)] \
            if c.predicted else ""
        hatch += "".join(VARIANT_HATCHES[items.index(i) % len(VARIANT_HATCHES)] for i in
                         tbdevices.variant_items(tbdevices.measured_variant(c.variant)))
        look = Look(colours[c.device], hatch)
        while look in out.values():  # past a palette's or a list's end: crossed as well
            look = Look(look.colour, look.hatch + WRAP_HATCH)
        out[look_key(c)] = look
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
        """A bar's slot: wide enough for its label's longest line, or, where the labels stand,
        for its lines side by side."""
        if self.crowded:
            lines = max(len(lines) for lines in self.texts.values())
            return max(NARROW_SLOT_IN, lines * LABEL_LINE_IN + 0.06)
        longest = max(len(line) for lines in self.texts.values() for line in lines)
        return max(SLOT_IN, longest * LABEL_CHAR_IN + 0.12)

    def label_height(self) -> float:
        """Inches the tallest label takes above its bar."""
        if self.crowded:
            return max(len(line) for lines in self.texts.values()
                       for line in lines) * LABEL_CHAR_IN * 0.97 + 0.1
        return max(len(lines) for lines in self.texts.values()) * LABEL_LINE_IN + 0.1


def panels(data, chosen: Selection) -> dict:
    """workload panel -> [Group]: by precision, then by machine (input machines first, then
    the references, in data.series order); a group's tick names its machine where several are
    drawn, and a GPU machine's cpu bars are then a group of their own that names its host CPU
    (`H100 host: 16-core Intel Xeon`) where its name does not, so that a cpu bar is never read
    as its GPU's."""
    several = len({s for s, _ in chosen.bars}) > 1
    hosts = {s: host_of(data, s) for s in chosen.gpu_series} if several else {}
    by_panel: dict = {}
    for s, c in chosen.bars:
        host = "" if c.on_gpu else hosts.get(s, "")
        by_panel.setdefault(c.panel, {}).setdefault((c.precision, s, host), []).append((s, c))
    out = {}
    for panel, groups in by_panel.items():
        ordered = sorted(groups.items(), key=lambda kv: (precision_key(kv[0][0]),
                                                         data.series.index(kv[0][1]),
                                                         not kv[0][2]))
        out[panel] = [Group(tick_label(data, s, precision, several, host),
                            sorted(keys, key=lambda k: config_sort_key(k[1])))
                      for (precision, s, host), keys in ordered]
    return out


def tick_label(data, series: str, precision: str, several: bool, host: str = "") -> str:
    """A group's tick: its precision, under its machine's name where several are drawn, and
    for a GPU machine's cpu bars the host CPU its rows name (host)."""
    if not several:
        return precision
    if not host:
        return "\n".join(textwrap.wrap(data.machine_name(series), TICK_WRAP) + [precision])
    return "\n".join(textwrap.wrap(f"{data.machine_name(series)} host:", TICK_WRAP)
                     + textwrap.wrap(host, TICK_WRAP + 2) + [precision])


def host_of(data, series: str) -> str:
    """A GPU machine's host CPU as its rows say it (`16-core Intel Xeon`), or '' where the
    machine's name says it already (`gpu-node (AMD EPYC 7V13 64-Core, 16 cores)`)."""
    rows = [r for r in data.rows + data.reference_rows if data.series_of(r) == series]
    cpus = list(dict.fromkeys(((r.get("cpu_model") or "").strip(), (r.get("cores") or "").strip())
                              for r in rows))
    if all(cpu_name(model) in data.machine_name(series) for model, _ in cpus):
        return ""
    return " / ".join(host_cpu(model, cores) for model, cores in cpus)


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
    return max(AXIS_IN + body, AXIS_IN + len(title) * 0.6 * TITLE_PT / 72)


def split_panel(groups: list[Group], max_width: float = MAX_WIDTH_IN) -> list[list[Group]]:
    """A panel's groups in as few parts as keep each within max_width inches (a group wider
    than that alone in its part), in order, the widest part as narrow as can be: a panel of
    many machines becomes rows of legible bars instead of a figure too wide to read."""
    widths = [group_width(g) + GAP_IN for g in groups]
    room = max_width - AXIS_IN
    for n in range(max(1, math.ceil(sum(widths) / room)), len(groups) + 1):
        cuts = balanced_cuts(widths, n)
        spans = list(zip([0] + cuts, cuts + [len(groups)]))
        if all(sum(widths[a:b]) <= room or b - a == 1 for a, b in spans):
            return [groups[a:b] for a, b in spans]
    return [[g] for g in groups]


def balanced_cuts(widths: list[float], n: int) -> list[int]:
    """Where to cut widths, in order, into n parts whose widest is as narrow as can be (the
    linear partition problem, by dynamic programming over a panel's few groups)."""
    prefix = [0.0]
    for w in widths:
        prefix.append(prefix[-1] + w)
    k = len(widths)
    # best[j][i]: (the widest part, the cuts) of the first i widths in j parts
    best = [[(math.inf, [])] * (k + 1) for _ in range(n + 1)]
    best[0][0] = (0.0, [])
    for j in range(1, n + 1):
        for i in range(j, k + 1):
            best[j][i] = min(((max(best[j - 1][m][0], prefix[i] - prefix[m]),
                               best[j - 1][m][1] + ([m] if m else []))
                              for m in range(j - 1, i)), key=lambda t: t[0])
    return best[n][k][1]


@dataclass(frozen=True)
class Scale:
    """A panel's y axis, the same on each of its parts: log or linear, and its limits."""
    log: bool
    low: float
    top: float

    @property
    def said(self) -> str:
        return "log scale" if self.log else "linear scale"


def panel_scale(groups: list[Group], chosen: Selection) -> Scale:
    """A log axis only where a panel's bars differ by more than 20x (cpu against gpu); room
    above the highest bar or whisker for its label: the share of the axes' height it takes."""
    keys = [k for g in groups for k in g.keys]
    values = [chosen.bars[k].center for k in keys]
    whiskers = [w for w in map(chosen.whisker, keys) if w]
    log = max(values) / max(min(values), 1e-12) > 20
    high = max(values + [hi for _, hi in whiskers])
    share = min(0.6, max(g.label_height() for g in groups) / (PANEL_H - 1.6))
    if not log:
        return Scale(False, 0.0, high / (1 - share))
    low = min(v for v in values + [lo for lo, _ in whiskers] if v > 0) / 3
    return Scale(True, low, high * 10 ** (share * math.log10(high / low) / (1 - share)))


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


def draw_panel(ax, groups: list[Group], chosen: Selection, drawn: dict, scale: Scale) -> None:
    """The groups side by side, one bar per configuration, in inch-proportional x units so
    that every panel's bars are equally wide; whiskers where a bar has them (Selection.whisker)."""
    x, ticks = GAP_IN / 2, []
    bar = min(SLOT_IN, *(g.slot for g in groups)) * 0.82  # one bar width on the panel
    for group in groups:
        width, slot = group_width(group), group.slot
        start = x + (width - slot * len(group.keys)) / 2
        for i, k in enumerate(group.keys):
            value = chosen.bars[k].center
            centre = start + slot * (i + 0.5)
            look = drawn[look_key(k[1])]
            ax.bar(centre, value, bar, color=look.colour, hatch=look.hatch or None,
                   edgecolor=look.hatch_colour if look.hatch else None, linewidth=0, zorder=2)
            whisker = chosen.whisker(k)
            if whisker:
                lo, hi = whisker
                ax.errorbar(centre, value, yerr=[[max(0.0, value - lo)], [max(0.0, hi - value)]],
                            fmt="none", ecolor="#222222", elinewidth=1.0, capsize=3, zorder=3)
                value = max(value, hi)
            ax.annotate("\n".join(group.texts[k]), (centre, value), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=LABEL_PT,
                        zorder=4, bbox=LABEL_BOX, rotation=90 if group.crowded else 0,
                        linespacing=1.1)
        ticks.append(x + width / 2)
        x += width + GAP_IN
    ax.set_xticks(ticks, [g.label for g in groups], fontsize=TICK_PT)
    ax.set_xlim(0, x - GAP_IN / 2)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    if scale.log:
        log_scale(ax, "y", scale.low, scale.top)
    else:
        from matplotlib.ticker import FuncFormatter
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: si(v)))
    ax.set_ylim(scale.low, scale.top)
    ax.set_ylabel(f"samples/s, wall clock ({scale.said})", fontsize=AXIS_PT)
    ax.tick_params(axis="y", labelsize=AXIS_PT)


def legend_entries(drawn: dict) -> list:
    """A patch per look, in looks' order: `cpu`, `cpu data_on_device` (dotted), `gpu:8
    predicted for nvlink4 (not measured)` (hatched; another link, another direction)."""
    assumptions = [tbdevices.variant_items(assumed) for _, assumed in drawn if assumed]
    common = set.intersection(*map(set, assumptions)) if assumptions else set()
    return [(look.patch(), legend_label(name, assumed, common))
            for (name, assumed), look in drawn.items()]


def legend_label(name: str, assumed: str, common=frozenset()) -> str:
    """`gpu:8`, `gpu:8 predicted for nvlink4 (not measured)`, `gpu:16 nodes:2 predicted for
    nvlink4, network ib_ndr400x8, from gpu:1 (not measured)`; what every prediction of the
    chart assumes alike (common: `from:gpu:1`) is left unsaid, the link always said."""
    if not assumed:
        return name
    link = tbdevices.predicted_link(assumed)
    rest = [f"{flag} {value}" for item in tbdevices.variant_items(assumed) if item not in common
            for flag, _, value in [item.partition(":")] if flag != "predicted"]
    return f"{name} predicted for {', '.join([link] + rest)} (not measured)"


def notes(chosen: Selection, data, rows) -> list[str]:
    out = ["Bars: median samples/s over ok repetitions (or the median aggregate row); label: "
           "samples/s and the speedup over the same machine's cpu row (all cores) of the "
           "workload, in the same precision and batch where the CPU ran them, else fp32 and the "
           "cpu row's batch, with what differs (bf16 vs fp32, bs 128 vs 8)."]
    out += clock_notes(data, rows)
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
        out.append("Diagonally hatched (one direction per link and source): predicted scaling "
                   "(measurement=predicted) from the timeline of "
                   + (", ".join(froms[:3]) + (" and others" if len(froms) > 3 else "")
                      if froms else "a one-device row")
                   + " and a link model; not a measurement.")
    said = whiskers_said(chosen, long=True)
    if said:
        out.append(said)
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
    configuration on one axis (split into parts on rows of their own where wider than
    MAX_WIDTH_IN, on one y scale)."""
    chosen = select(data)
    if not chosen.bars:
        raise Skip("no ok row of cpu, gpu:N, cpu:N or mpi:N has a samples_per_s value")
    by_panel = panels(data, chosen)
    set_labels(by_panel, chosen, bar_labels(data, chosen))
    drawn = looks(chosen.bars)
    scales = {p: panel_scale(groups, chosen) for p, groups in by_panel.items()}
    mixed = len({sc.log for sc in scales.values()}) > 1
    parts = []  # (title, groups, scale) per axes
    for panel, groups in by_panel.items():
        split = split_panel(groups)
        for i, part in enumerate(split):
            title = panel_title(panel) + (f" ({i + 1} of {len(split)})" if len(split) > 1 else "")
            title += f" · {scales[panel].said}" if mixed else ""
            parts.append((title, part, scales[panel]))
    widths = [panel_width(title, groups) for title, groups, _ in parts]
    rows = [r for r in data.step_rows + data.predicted_rows + data.reference_rows
            if data.key(r) in chosen.bars and tbcsv.is_ok(r)]
    series = list(dict.fromkeys(s for s, _ in chosen.bars))
    machines = ", ".join(data.machine_name(s) for s in series)
    title = "Training throughput per device configuration" + (f": {machines}" if len(machines) <= 70 else "")
    fig, axes = figs.new(title, rows, brief_notes(chosen), widths, PANEL_H, legend_entries(drawn),
                         grow=True, machines=False, max_width=MAX_WIDTH_IN, text_pt=HEADER_PT,
                         handle=(2.4, 1.2))  # patches large enough to show their hatches
    for ax, (title, groups, scale) in zip(axes, parts):
        draw_panel(ax, groups, chosen, drawn, scale)
        ax.set_title(title, fontsize=TITLE_PT)
    return fig

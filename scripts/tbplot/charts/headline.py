"""The headline chart (issue 22): per model, the samples/s of the machine's device
configurations side by side (cpu, gpu:1, gpu:N; a machine without GPU rows shows its CPU
configurations: cpu, cpu:N, mpi:N), one colour per configuration, each bar labelled with its
samples/s and its speedup over the same machine's cpu row. Predicted rows (issue 24) are
hatched bars beside the measured ones; shared-device rows (N replicas on one GPU) are left out:
they check correctness, and a bar among the gpu:N ones would read as scaling."""
from __future__ import annotations

from dataclasses import dataclass

import tbcsv
from tbplot.figures import LABEL_BOX, Skip, log_scale, si
from tbplot.model import (Config, config_name, config_sort_key, panel_title, precision_key,
                          speedups)

# Colours of the device configurations by kind, in device order: greys for the CPU's threads,
# purples for MPI ranks, saturated colours for the GPUs, so a cpu bar never looks like a gpu one.
PALETTES = {"cpu": ("#7f7f7f", "#bdbdbd", "#525252", "#a3a3a3"),
            "mpi": ("#9467bd", "#c5b0d5", "#6a3d9a"),
            "gpu": ("#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#17becf", "#8c564b", "#e377c2",
                    "#bcbd22")}
PREDICTED_HATCH = "///"
QUESTION = ("How fast does each model train on each device configuration of this machine, and "
            "how much faster than its CPU (all cores)?")


@dataclass
class Selection:
    """What the headline shows: the (series, config) -> Sample of its bars, per series whether
    it had GPU rows, and the configurations left out with the reason."""
    bars: dict
    predicted: set
    gpu_series: set
    left_out: list[str]


def shown_device(device: str, has_gpu: bool) -> bool:
    """cpu / gpu:N on a machine with GPUs (gpu:1/jobs:K is no device count); the CPU
    configurations on one without."""
    if has_gpu:
        return device == "cpu" or tbcsv.device_count(device) is not None
    return device == "cpu" or device.startswith(("cpu:", "mpi:"))


def select(data) -> Selection:
    measured = tbcsv.samples(data.step_rows, data.key, "samples_per_s")
    predicted = tbcsv.samples(data.predicted_rows, data.key, "samples_per_s")
    gpu_series = {s for s, c in measured if c.device.startswith("gpu")}
    bars, left_out = {}, []
    for (s, c), sample in list(measured.items()) + list(predicted.items()):
        if c.shared_device:
            left_out.append(f"the shared_device rows of {c.device} on {s} "
                            f"({tbcsv.device_count(c.device) or 'N'} replicas on one GPU: "
                            f"correctness, not scaling)")
        elif shown_device(c.device, s in gpu_series):
            bars[(s, c)] = sample
    return Selection(bars, {k for k in predicted if k in bars}, gpu_series,
                     list(dict.fromkeys(left_out)))


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
                 f"it has ({', '.join(devices)}).")
    if chosen.predicted:
        text += " Hatched bars are predicted (measurement=predicted), not measured."
    return text


def colour_keys(bars) -> dict:
    """Device configuration (device and measured variant) -> colour; a predicted bar takes
    the colour of the configuration it predicts."""
    keys = sorted({measured_config(c) for _, c in bars}, key=config_sort_key)
    names = list(dict.fromkeys(config_name(k) for k in keys))
    used: dict = {}
    out = {}
    for name in names:
        kind = name.partition(":")[0].split(" ")[0]
        palette = PALETTES.get(kind, PALETTES["gpu"])
        out[name] = palette[used.get(kind, 0) % len(palette)]
        used[kind] = used.get(kind, 0) + 1
    return out


def measured_config(c: Config) -> Config:
    """The configuration without its predicted:<link> item, precision and batch."""
    variant = "/".join(i for i in tbcsv.variant_items(c.variant) if not i.startswith("predicted"))
    return Config(c.kind, c.model, c.dataset, c.device, "", "", variant)


def panels(chosen: Selection, several: bool) -> dict:
    """(series, model panel) -> {precision: [configs]}; the series only where several."""
    out: dict = {}
    for s, c in chosen.bars:
        key = (s if several else "", c.panel)
        out.setdefault(key, {}).setdefault(c.precision, []).append((s, c))
    for groups in out.values():
        for precision, keys in groups.items():
            keys.sort(key=lambda k: config_sort_key(k[1]))
    return {k: dict(sorted(v.items(), key=lambda kv: precision_key(kv[0])))
            for k, v in out.items()}


def bar_label(value: float, speedup: float | None, baseline: bool, several_batches: bool,
              c: Config) -> str:
    parts = [si(value)]
    if baseline:
        parts.append("1× (cpu)")
    elif speedup is not None:
        parts.append(f"{speedup:.3g}×")
    if several_batches:
        parts.append(f"bs:{c.batch}")
    return "\n".join(parts)


def draw_panel(ax, groups: dict, chosen: Selection, ratios: dict, colours: dict,
               log: bool) -> list[float]:
    """One group of bars per precision, one bar per configuration; returns the bar heights."""
    widest = max(len(keys) for keys in groups.values())
    width = 0.8 / widest
    batches = {c.batch for keys in groups.values() for _, c in keys}
    heights = []
    for j, (precision, keys) in enumerate(groups.items()):
        start = j - width * len(keys) / 2
        for i, k in enumerate(keys):
            s, c = k
            value = chosen.bars[k].center
            x = start + width * (i + 0.5)
            predicted = k in chosen.predicted
            ax.bar(x, value, width * 0.9, color=colours[config_name(measured_config(c))],
                   hatch=PREDICTED_HATCH if predicted else None,
                   edgecolor="white" if predicted else None, linewidth=0, zorder=2)
            text = bar_label(value, ratios.get(k), c.device == "cpu" and not c.variant,
                             len(batches) > 1, c)
            ax.annotate(text, (x, value), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7, zorder=4, bbox=LABEL_BOX,
                        rotation=90 if widest > 4 else 0, linespacing=1.1)
            heights.append(value)
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8.5)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    low, high = min(heights), max(heights)
    room = 6.0 if widest > 4 else 3.5  # above the highest bar for its two-line label
    if log:
        log_scale(ax, "y", low / 3, high * room)
        ax.set_ylim(low / 3, high * room)
    else:
        from matplotlib.ticker import FuncFormatter
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: si(v)))
        ax.set_ylim(0, high * (1 + (room - 1) / 5))
    return heights


def legend_entries(figs, chosen: Selection, colours: dict) -> list:
    """A solid patch per measured configuration, a hatched one per predicted configuration
    and link: `gpu:8 predicted for nvlink4 (not measured)`."""
    from matplotlib.patches import Patch
    measured = {config_name(measured_config(c)) for k in chosen.bars
                if k not in chosen.predicted for c in [k[1]]}
    entries = [(figs.patch(colour), name) for name, colour in colours.items() if name in measured]
    predicted = sorted({(measured_config(c), tbcsv.predicted_link(c.variant))
                        for _, c in chosen.predicted},
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


def notes(chosen: Selection, data) -> list[str]:
    out = ["Bars: median samples/s over ok repetitions (or the median aggregate row); label: "
           "samples/s and the speedup over the same machine's cpu row (all cores, same model, "
           "batch and precision, else fp32)."]
    series = list(dict.fromkeys(s for s, _ in chosen.bars))
    cpu_only = [s for s in series if s not in chosen.gpu_series]
    if cpu_only:
        out.append(f"No GPU rows for {', '.join(cpu_only)}: its CPU configurations are shown "
                   f"(cpu = all cores, cpu:N = N threads, mpi:N = N ranks).")
    if chosen.predicted:
        froms = tbcsv.distinct([r for r in data.predicted_rows], "predicted_from")
        out.append("Hatched: predicted scaling (measurement=predicted) from the timeline of "
                   + (", ".join(froms[:3]) if froms else "a one-device row")
                   + " and a link model; not a measurement.")
    if chosen.left_out:
        out.append("Left out: " + "; ".join(chosen.left_out[:4])
                   + (f"; and {len(chosen.left_out) - 4} more" if len(chosen.left_out) > 4
                      else ""))
    return out


def chart_headline(figs, data):
    """The headline: per model, grouped bars of samples/s per device configuration."""
    chosen = select(data)
    if not chosen.bars:
        raise Skip("no ok row of cpu, gpu:N, cpu:N or mpi:N has a samples_per_s value")
    several = len({s for s, _ in chosen.bars}) > 1
    by_panel = panels(chosen, several)
    ratios = speedups(data, data.predicted_rows)
    colours = colour_keys(chosen.bars)
    widths = [1.5 + sum(0.5 + 0.62 * len(keys) for keys in groups.values())
              for groups in by_panel.values()]
    rows = [r for r in data.step_rows + data.predicted_rows
            if data.key(r) in chosen.bars and tbcsv.is_ok(r)]
    fig, axes = figs.new("Training throughput per device configuration", rows,
                         notes(chosen, data), widths, 3.9,
                         legend_entries(figs, chosen, colours))
    for ax, ((series, panel), groups) in zip(axes, by_panel.items()):
        # A log axis only where a panel's bars differ by more than 20x (cpu against gpu).
        values = [chosen.bars[k].center for keys in groups.values() for k in keys]
        log = max(values) / max(min(values), 1e-12) > 20
        draw_panel(ax, groups, chosen, ratios, colours, log)
        title = panel_title(panel) + (f" — {series}" if series else "")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("samples/s" + (" (log scale)" if log else ""), fontsize=8.5)
        ax.tick_params(axis="y", labelsize=8)
    return fig

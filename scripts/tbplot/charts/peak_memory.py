"""The peak memory chart: per benchmark, the mem_* columns stacked by purpose where the rows have
them, else the device's peak (mem_peak_bytes), else the peak RSS, in one byte unit."""
from __future__ import annotations

import tbcsv
from tbplot.figures import Figures, Skip
from tbplot.hbars import HBar, benchmark_key, grouped_hbars
from tbplot.model import Data

QUESTION = "How much memory does each benchmark need, and for what?"

RSS = "peak RSS (no breakdown)"
DEVICE_PEAK = "device peak (no breakdown)"
MEMORY_PARTS = [("mem_weights_bytes", "weights"), ("mem_grads_bytes", "gradients"),
                ("mem_optimizer_bytes", "optimizer state"),
                ("mem_activations_bytes", "activations"), ("mem_workspace_bytes", "workspace"),
                ("mem_data_bytes", "data"), ("mem_context_bytes", "CUDA context and libraries")]


def byte_unit(largest: float) -> tuple[float, str]:
    for factor, unit in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if largest >= factor:
            return factor, unit
    return 1, "bytes"


def fmt_bytes(value: float) -> str:
    factor, unit = byte_unit(value)
    return f"{tbcsv.figure(value / factor)} {unit}"


def chart_peak_memory(figs: Figures, data: Data):
    """(e) peak memory per benchmark: the mem_* breakdown where the rows have it, else the
    device's peak alone (mem_peak_bytes: a peer framework's GPU rows), else peak RSS (one bar)."""
    key = benchmark_key(data)
    parts = [(c, name) for c, name in MEMORY_PARTS if tbcsv.has_values(data.step_rows, c)]
    part_samples = {c: tbcsv.samples(data.step_rows, key, c) for c, _ in parts}
    device_peak = tbcsv.samples(data.step_rows, key, "mem_peak_bytes")
    rss = tbcsv.samples(data.step_rows, key, "peak_rss_bytes")
    keys = list(dict.fromkeys(k for got in [*part_samples.values(), device_peak, rss] for k in got))
    if not keys:
        raise Skip("no ok row has peak_rss_bytes or mem_*_bytes values")
    stacks = {}
    for k in keys:
        have = [(name, part_samples[c][k].center) for c, name in parts if k in part_samples[c]]
        if not have and k in device_peak:
            have = [(DEVICE_PEAK, device_peak[k].center)]
        stacks[k] = have or [(RSS, rss[k].center)]
    factor, unit = byte_unit(max(sum(v for _, v in st) for st in stacks.values()))
    several = len({s for s, _ in keys}) > 1
    if parts:
        # Colours name the parts; the machine goes into the bar's label.
        names = [name for _, name in parts] + [DEVICE_PEAK, RSS]
        colour = {n: f"C{i}" for i, n in enumerate(names[:-2])} | {DEVICE_PEAK: "0.3", RSS: "0.55"}
        used = [n for n in names if any(n == m for st in stacks.values() for m, _ in st)]
        legend = [(figs.patch(colour[n]), n) for n in used]
    else:
        legend = figs.series_legend(list(dict.fromkeys(s for s, _ in keys))) if several else None
    bars = {}
    for (s, b), stack in stacks.items():
        total = sum(v for _, v in stack) / factor
        segments = [(v / factor, colour[n] if parts else data.colour(s)) for n, v in stack]
        text = fmt_bytes(total * factor) + (f" · {s}" if parts and several else "")
        bars[(s, b)] = HBar(segments, text)
    notes = ["Median over ok repetitions. " + (
        "Stacked: the mem_* columns (bytes allocated, by purpose). " if parts else "")
        + "Peak RSS is the process's peak so far, so it includes earlier benchmarks of the "
          "same run."]
    rows = [r for r in data.step_rows if key(r) in stacks and tbcsv.is_ok(r)]
    return grouped_hbars(figs, "Peak memory per benchmark", rows, notes, bars, legend,
                         f"peak memory ({unit})", log=False)

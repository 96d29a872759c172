"""The host CPU chart: process CPU time (all threads) per training step per benchmark, log scale,
each bar labelled with the cores busy (host_cpu_util)."""
from __future__ import annotations

import tbcsv
from tbplot.figures import Figures, Skip
from tbplot.hbars import HBar, benchmark_key, grouped_hbars
from tbplot.model import Data, spread

QUESTION = "How much host CPU time does one training step cost?"


def fmt_seconds(seconds: float) -> str:
    """A bar's time in its own unit, s, ms or µs: the axis's unit is the longest bar's, and a
    GPU step's 87.3 µs beside a CPU step's seconds read 8.73e-05 s."""
    for factor, unit in ((1.0, "s"), (1e-3, "ms")):
        if seconds >= factor:
            return f"{tbcsv.figure(seconds / factor)} {unit}"
    return f"{tbcsv.figure(seconds * 1e6)} µs"


def chart_host_cpu(figs: Figures, data: Data):
    """(f) host CPU time per training step per benchmark (process CPU time, all threads)."""
    key = benchmark_key(data)
    got = tbcsv.samples(data.step_rows, key, "host_cpu_s_per_step")
    if not got:
        raise Skip("no ok row has a host_cpu_s_per_step value")
    util = tbcsv.samples(data.step_rows, key, "host_cpu_util")
    highest = max(max(s.values) for s in got.values())
    factor, unit = (1e-3, "ms") if highest < 1 else (1.0, "s")
    bars = {}
    for (s, b), sample in got.items():
        center, lo, hi = (v / factor for v in spread(sample))
        if lo <= 0:
            continue  # no CPU time measured: nothing to show on a log axis
        u = util.get((s, b))
        text = fmt_seconds(center * factor) + (f" · {u.center:.2f} cores busy" if u else "")
        bars[(s, b)] = HBar([(center, data.colour(s))], text, (lo, hi))
    series = [s for s in data.series if any(k[0] == s for k in got)]
    rows = [r for r in data.step_rows if key(r) in got and tbcsv.is_ok(r)]
    return grouped_hbars(
        figs, "Host CPU time per training step", rows,
        ["Process CPU time of all threads over the timed steps / steps (median over ok "
         "repetitions; whiskers: min–max); label: time and host_cpu_util (cores busy). Log "
         "scale."],
        bars, figs.series_legend(series) if len(series) > 1 else None,
        f"host CPU time per step ({unit}, log scale)", log=True)

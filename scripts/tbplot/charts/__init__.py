"""The charts plot.py draws, one module per chart named as its files are (peak_memory.py draws
peak_memory.png and .svg), and CHARTS, their registry in the order they are drawn and reported.
Each module has the function that draws its chart, (figs: Figures, data: Data) -> a matplotlib
figure, raising Skip (tbplot.figures) with a one-line reason when the rows cannot draw it, and
the QUESTION the chart answers, which the report puts under it.
To add a chart: add a module here and a line to CHARTS."""
from __future__ import annotations

from typing import Callable, NamedTuple

from tbplot.charts import (energy_per_sample, headline, host_cpu_per_step, peak_memory,
                           samples_per_s, scaling_efficiency, speedup_vs_cpu, time_to_accuracy)


class Chart(NamedTuple):
    name: str  # of its files (<name>.png, <name>.svg) and of its section in the report
    draw: Callable  # (figs, data) -> figure; raises Skip
    caption: Callable  # data -> the report's line under the chart


def asks(question: str) -> Callable:
    """The caption of a chart whose question is the same whatever the rows."""
    return lambda data: question


CHARTS = [
    # The headline's caption also says what its bars are: CPU configurations, predicted rows.
    Chart("headline", headline.chart_headline, headline.caption),
    Chart("samples_per_s", samples_per_s.chart_samples_per_s, asks(samples_per_s.QUESTION)),
    Chart("speedup_vs_cpu", speedup_vs_cpu.chart_speedup, asks(speedup_vs_cpu.QUESTION)),
    Chart("scaling_efficiency", scaling_efficiency.chart_scaling,
          asks(scaling_efficiency.QUESTION)),
    Chart("time_to_accuracy", time_to_accuracy.chart_time_to_accuracy,
          asks(time_to_accuracy.QUESTION)),
    Chart("peak_memory", peak_memory.chart_peak_memory, asks(peak_memory.QUESTION)),
    Chart("host_cpu_per_step", host_cpu_per_step.chart_host_cpu,
          asks(host_cpu_per_step.QUESTION)),
    Chart("energy_per_sample", energy_per_sample.chart_energy, asks(energy_per_sample.QUESTION)),
]

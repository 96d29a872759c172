"""The charts plot.py draws, one module per chart named as its files are (peak_memory.py draws
peak_memory.png and .svg), and CHARTS, their registry in the order they are drawn and reported.
A chart is a function (figs: Figures, data: Data) -> matplotlib figure that raises Skip
(tbplot.figures) with a one-line reason when its rows cannot draw it.
To add a chart: add a module here and a line to CHARTS."""
from tbplot.charts import (energy_per_sample, headline, host_cpu_per_step, peak_memory,
                           samples_per_s, scaling_efficiency, speedup_vs_cpu, time_to_accuracy)

CHARTS = [("headline", headline.chart_headline),
          ("samples_per_s", samples_per_s.chart_samples_per_s),
          ("speedup_vs_cpu", speedup_vs_cpu.chart_speedup),
          ("scaling_efficiency", scaling_efficiency.chart_scaling),
          ("time_to_accuracy", time_to_accuracy.chart_time_to_accuracy),
          ("peak_memory", peak_memory.chart_peak_memory),
          ("host_cpu_per_step", host_cpu_per_step.chart_host_cpu),
          ("energy_per_sample", energy_per_sample.chart_energy)]

"""What scripts/plot.py draws with, one job per module; plot.py itself only parses its
arguments, loads the CSVs, runs the charts and writes the report.

  model.py    what the charts are drawn from: a row's configuration and series (machine and
              framework), --latest, the clock's notes, and the derived figures (speedup over
              cpu with the pair it is taken over, scaling)
  figures.py  the scaffolding every chart shares: the header of machine lines and notes above a
              grid of panels, grouped bars, log axes, configuration labels, Skip
  hbars.py    horizontal bars, one group per benchmark (peak memory, host CPU)
  charts/     one module per chart, and CHARTS, their registry in order.
              To add a chart: add a module there and a line to the registry.
  svg.py      a figure as SVG with the same bytes for the same input
  summary.py  the summary table's numbers; report.py writes report.md and report.html
  references.py  the reference runs (results/*/reference.json) plot.py --reference adds
  versus.py   this machine's cpu rows against the reference runs: the headline's labels of
              their bars, the report's table and scripts/reference_table.py's

Imported with scripts/ on sys.path, as plot.py does (tbcsv.py, the reader shared with
compare.py, lives there)."""

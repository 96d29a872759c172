"""scripts/plot.py's parts: model (configurations, series, derived figures), figures (the
scaffolding every chart shares), headline (the headline chart), summary and report (report.md
and report.html). Imported with scripts/ on sys.path, as plot.py does."""

#!/usr/bin/env python3
"""Draws the trainbench charts and a report from one or more CSVs (results/SCHEMA.md), headless.

    scripts/plot.py run.csv                                  # into run-charts/, beside run.csv
    scripts/plot.py results/*/*.csv --out charts/
    scripts/plot.py --latest results/*/*.csv --out charts/   # the newest rows per machine
    scripts/plot.py run.csv --reference all --out charts/    # beside results/*/reference.json

--latest keeps, for each benchmark, only the newest run's rows of each machine and framework
(a machine: host, CPU model and GPU, not the driver: see machine_of), so that a folder of many
runs draws one series per machine instead of one per commit; the README's charts are drawn so.

A row's configuration is its device, precision, batch and variant (the flags that change what
it measures, results/SCHEMA.md schema 4; derived from cuda_graph/data_on_device in older
rows): runs that differ in any of them are separate bars, labelled with the variant.

Throughput is on the wall clock: tbcsv reads GPU rows written before schema 5 (the device clock
then) from their wall_step_time_s, and prints what it read differently once per file.

--reference DIR[,DIR] (repeatable; 'all': every results/*/reference.json; 'none', the default)
draws reference runs beside these rows in the headline, and adds to the report this machine's
cpu rows against them (tbplot/references.py, tbplot/versus.py; scripts/bench.sh passes
TB_REFERENCE, default all).

Writes each chart as PNG and SVG into the --out folder (for one CSV, by default <csv stem>-charts/
beside it, as scripts/bench.sh draws them; several CSVs need --out):
  headline            per workload, every machine's samples/s of cpu / gpu:1 / gpu:N (or the
                      CPU configurations of a machine without GPU rows) on one axis, the
                      speedup over its machine's cpu row on each bar (and what differs: bf16
                      vs fp32, bs 128 vs 8), a colour and pattern per configuration, whiskers
                      the min-max of the repetitions; predicted rows diagonally hatched beside
                      the measured ones (whiskers: their band); reference runs' bars over this
                      machine's cpu row; at most 14 inches wide (wider panels split in parts)
  samples_per_s       samples/s per model and device configuration (log scale)
  speedup_vs_cpu      speedup of each configuration over the `cpu` row of the same machine
  scaling_efficiency  multi-GPU scaling efficiency against the number of devices (gpu:N rows)
  time_to_accuracy    validation accuracy against elapsed seconds (epochs/ rows)
  peak_memory         peak memory per benchmark, broken down when the mem_* columns exist
  host_cpu_per_step   host CPU time per training step per benchmark
  energy_per_sample   GPU energy per trained sample per model and configuration (gpu:* rows of
                      schema_version 3); hatched bars and a note line name throttled runs
and report.md and report.html (self-contained: the PNGs inlined) with the machines, a summary
table, every chart with the question it answers, and what was skipped and why.
A chart whose columns are absent or empty is skipped with a one-line note (and an old file of
that chart in --out is removed, so the folder never mixes runs). Exit status 2 on bad input,
1 when matplotlib is missing. See docs/scripts.md.

This file is the command line only: arguments, loading (tbplot.model over tbcsv.py), running
the charts of the registry (tbplot/charts/, one module per chart) and writing the report
(tbplot/report.py). tbplot/__init__.py says where each job lives.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The shared reader and the tbplot package live next to this script.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402
from tbplot import references, report  # noqa: E402
from tbplot.charts import CHARTS  # noqa: E402
from tbplot.figures import Figures, Skip  # noqa: E402
from tbplot.model import Data  # noqa: E402
from tbplot.svg import write_svg  # noqa: E402

PROG = "plot.py"
MATPLOTLIB_FIX = "install python3-matplotlib (apt) or pip install matplotlib"


def import_pyplot():
    """pyplot on the headless Agg backend; InputError-like exit with the fix when missing."""
    try:
        import matplotlib
    except ImportError:
        print(f"{PROG}: error: matplotlib is not installed for {sys.executable}; "
              f"{tbcsv.with_module('matplotlib', MATPLOTLIB_FIX)}", file=sys.stderr)
        sys.exit(1)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Same input, same SVG bytes: fixed ids and no creation date.
    plt.rcParams["svg.hashsalt"] = "trainbench"
    # Text stays text in the SVG: searchable, selectable and much smaller than glyph paths.
    plt.rcParams["svg.fonttype"] = "none"
    return plt


def write_charts(plt, data: Data, out: Path, skipped: dict | None = None) -> list[str]:
    """Draws every chart into out; the names of those written, in order. A chart that cannot
    be drawn is noted, its old files removed, and its reason put into skipped[name]."""
    out.mkdir(parents=True, exist_ok=True)
    figs = Figures(plt, data)
    written = []
    everything = []  # the rows --latest left out, once one chart needs them (latest_note)
    for name, draw, _ in CHARTS:
        try:
            fig = draw(figs, data)
        except Skip as skip:
            why = f"{skip}{latest_note(plt, data, draw, everything)}"
            print(f"skipped {name}: {why}")
            if skipped is not None:
                skipped[name] = why
            for ext in ("png", "svg"):
                stale = out / f"{name}.{ext}"
                if stale.exists():
                    stale.unlink()
                    print(f"  removed the old {stale}")
            continue
        paths = [out / f"{name}.png", out / f"{name}.svg"]
        fig.savefig(paths[0], dpi=130)
        write_svg(fig, paths[1])
        plt.close(fig)
        print(f"wrote {paths[0]} {paths[1]}")
        written.append(name)
    return written


def latest_note(plt, data: Data, draw, everything: list) -> str:
    """For a chart --latest could not draw: where the rows it left out (older runs, other builds
    of the benchmarks a machine's main build measured, configurations only skipped) would draw
    it, a note saying so, else ''. everything caches the data without --latest across the
    charts."""
    if not data.latest or not data.left_out:
        return ""
    if not everything:
        everything.append(Data(data.tables))
    try:
        fig = draw(Figures(plt, everything[0]), everything[0])
    except Skip:
        return ""
    plt.close(fig)
    return (f" among the rows --latest kept; it left out {data.left_out:,} rows (older runs, "
            f"other builds, configurations only skipped), with which this chart is drawn: run "
            f"without --latest")


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("csv", nargs="+", metavar="CSV", help="trainbench CSV files")
    p.add_argument("--out", metavar="DIR",
                   help="folder for the PNG and SVG files and report.md/report.html (default for "
                        "one CSV: <csv stem>-charts/ beside it)")
    p.add_argument("--latest", action="store_true",
                   help="per benchmark, only the newest run of each machine and framework")
    p.add_argument("--reference", action="append", metavar="DIR",
                   help="reference runs to draw beside these rows in the headline and compare "
                        "in the report (tbplot/references.py): a folder holding a "
                        "reference.json, several separated by commas or given again; 'all': "
                        "every one under results/; 'none' (the default): none")
    args = p.parse_args(argv)
    if args.out is None:
        if len(args.csv) != 1:
            p.error(f"{len(args.csv)} CSVs: say where their charts go with --out DIR (one CSV's go "
                    f"to <csv stem>-charts/ beside it)")
        csv = Path(args.csv[0])
        args.out = str(csv.with_name(csv.stem + "-charts"))
        print(f"{PROG}: charts and report into {args.out}/ (beside {csv}; --out DIR for another folder)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        tables = tbcsv.read_tables(args.csv)
        refs, said = references.load_references(args.reference, args.csv)
        for note in dict.fromkeys([n for t in tables + [r.table for r in refs]
                                   for n in t.notes] + said):  # once per file
            print(f"note: {note}")
        data = Data(tables, latest=args.latest, references=refs)
        plt = import_pyplot()
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise tbcsv.InputError(f"{out}: exists and is not a folder (--out)")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # below a file, on a read-only or virtual file system
            raise tbcsv.InputError(f"--out {out}: the folder cannot be made ({e.strerror}); give a folder you may "
                                   f"write") from None
        skipped: dict[str, str] = {}
        written = write_charts(plt, data, out, skipped)
        if not written:
            print(f"{PROG}: no chart could be drawn: no ok measurements in "
                  f"{', '.join(args.csv)}", file=sys.stderr)
        for path in report.write_report(data, out, written, skipped):
            print(f"wrote {path}")
        return 0

    return tbcsv.run_main(run, PROG)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Prints this machine's cpu rows against the reference runs (results/*/reference.json): per
workload, each reference's cpu, gpu:1 and predicted gpu:N samples/s over this machine's cpu row,
on the wall clock, as a Markdown table, and with --append adds it to a file (the run's
<csv>-summary.md). scripts/bench.sh runs it last, so that a run ends with how this machine
compares with the reference machines. Standard library only (no matplotlib).

    scripts/reference_table.py results/vm/20261126T081417Z.csv                # every reference
    scripts/reference_table.py run.csv --reference results/h100 --append run-summary.md
    scripts/reference_table.py run.csv --reference none                      # prints nothing

The table is tbplot/versus.py's, the same the report of scripts/plot.py --reference shows.
Exit status 2 on bad input (a CSV or an index that cannot be read), else 0, also when there is
nothing to compare (no cpu row, no reference: a line on stderr says so).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402
from tbplot import references  # noqa: E402
from tbplot.model import Data  # noqa: E402
from tbplot.versus import render_markdown, versus_tables  # noqa: E402

PROG = "reference_table.py"


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("csv", nargs="+", metavar="CSV", help="this machine's trainbench CSV files")
    p.add_argument("--reference", action="append", metavar="DIR",
                   help="a folder holding a reference.json, several separated by commas or "
                        "given again; 'all' (the default): every one under results/; 'none': "
                        "none")
    p.add_argument("--append", metavar="FILE",
                   help="also append the table to FILE (created where missing)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        choices = args.reference or [references.ALL]
        tables = tbcsv.read_tables(args.csv)
        refs, said = references.load_references(choices, args.csv)
        for note in said:
            print(f"{PROG}: {note}", file=sys.stderr)
        if not refs:
            if references.chosen_indexes(choices):  # all of them among the inputs
                print(f"{PROG}: no reference run to compare with", file=sys.stderr)
            return 0
        text = render_markdown(versus_tables(Data(tables, references=refs)))
        if not text:
            print(f"{PROG}: no ok cpu row in {', '.join(args.csv)} to compare with the "
                  f"references", file=sys.stderr)
            return 0
        print(text, end="")
        if args.append:
            try:
                with open(args.append, "a", encoding="utf-8") as f:
                    f.write("\n" + text)
            except OSError as e:
                raise tbcsv.InputError(f"{args.append}: cannot append ({e.strerror})") from None
        return 0

    return tbcsv.run_main(run, PROG)


if __name__ == "__main__":
    sys.exit(main())

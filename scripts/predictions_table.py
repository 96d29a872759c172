#!/usr/bin/env python3
"""The table that holds trainbench's N-device predictions against every multi-rank run made
(docs/prediction.md): one line per measured data-parallel row of the CSVs, beside the prediction
made for it in the same invocation (the predicted row of the same workload, precision, batch and
device, from the one-device row of the ranks' threads, over the run's measured link), with the
band, whether the measurement fell inside it, and the term that dominates it.

    scripts/predictions_table.py SETTING=CSV [SETTING=CSV ...] [--check]

SETTING names where the CSV's runs ran ("mpi:2, one machine", "mpi:2, emulated nodes, 1 Gbit/s").
--check exits 1 when a measured row lies outside its band, or more than 10% from the point where
the one-device step is over 1 ms (the targets of docs/prediction.md). Standard library only.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402

PROG = "predictions_table.py"
POINT_TOLERANCE = 0.10  # within 10% of the point, for steps over 1 ms
LONG_STEP_S = 1e-3


@dataclass
class Line:
    setting: str
    benchmark: str
    step_ms: float  # the one-device row's step
    measured: float
    predicted: float
    low: float
    high: float
    dominant: str
    link: str

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted

    @property
    def inside(self) -> bool:
        return self.low <= self.measured <= self.high

    @property
    def on_target(self) -> bool:
        return self.inside and (self.step_ms <= LONG_STEP_S * 1e3 or abs(self.ratio - 1) <= POINT_TOLERANCE)


def median_of(rows, benchmark: str, column: str) -> float | None:
    values = [v for r in rows if r["benchmark"] == benchmark and tbcsv.is_ok(r) and tbcsv.is_iteration(r)
              and (v := tbcsv.number(r, column)) is not None]
    return statistics.median(values) if values else None


def base_name(benchmark: str) -> str:
    """A measured row's name without the variant items that say where it ran."""
    parts = [p for p in benchmark.split("/") if p != "emulated_nodes"]
    return "/".join(parts)


def lines_of(setting: str, table: tbcsv.Table) -> list[Line]:
    """Each measured data-parallel row (its first repetition's line) beside the prediction over
    the measured link made from the one-device row of its per-rank threads."""
    rows = table.rows
    threads = {r["benchmark"]: r.get("threads") or "" for r in rows}
    predicted = {}
    for p in rows:
        if tbcsv.is_predicted(p) and p.get("link") == "measured":
            key = (p["benchmark"].removesuffix("/predicted:measured"), threads.get(p["predicted_from"], ""))
            predicted[key] = p
    out = []
    for row in rows:
        device = tbcsv.field_of(row, "device")
        if (tbcsv.is_predicted(row) or not tbcsv.is_ok(row) or not tbcsv.is_iteration(row)
                or not device.startswith(("mpi:", "gpu:")) or (row.get("repetition") or "0") != "0"):
            continue
        p = predicted.get((base_name(row["benchmark"]), row.get("threads") or ""))
        if p is None:
            continue
        step = median_of(rows, p["predicted_from"], "step_time_s")
        measured = median_of(rows, row["benchmark"], "samples_per_s")
        if step is None or measured is None:
            continue
        out.append(Line(setting, row["benchmark"], step * 1e3, measured, tbcsv.number(p, "samples_per_s"),
                        tbcsv.number(p, "samples_per_s_low"), tbcsv.number(p, "samples_per_s_high"),
                        p.get("dominant_term") or "", f"{tbcsv.number(p, 'link_busbw_gbps'):.3g} GB/s"))
    return out


def markdown(lines: list[Line]) -> str:
    out = ["| setting | benchmark | one-device step (ms) | measured samples/s | predicted (band) | "
           "measured / predicted | in band | dominant term | link |",
           "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for ln in lines:
        out.append(f"| {ln.setting} | `{ln.benchmark}` | {ln.step_ms:.3g} | {ln.measured:,.0f} | "
                   f"{ln.predicted:,.0f} ({ln.low:,.0f} to {ln.high:,.0f}) | {ln.ratio:.2f} | "
                   f"{'yes' if ln.inside else '**no**'} | {ln.dominant} | {ln.link} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="SETTING=CSV")
    p.add_argument("--check", action="store_true", help="exit 1 on a row off its target")
    args = p.parse_args(argv)

    def run() -> int:
        lines = []
        for item in args.runs:
            setting, sep, path = item.partition("=")
            if not sep or not path:
                raise tbcsv.InputError(f"{item!r}: give SETTING=CSV, e.g. 'mpi:2, one machine=run.csv'")
            found = lines_of(setting, tbcsv.read_table(path))
            if not found:
                raise tbcsv.InputError(f"{path}: no measured data-parallel row with a prediction over the "
                                       f"measured link beside it (run mpirun ... --devices=cpu:1,mpi:2)")
            lines += found
        print(markdown(lines), end="")
        off = [ln for ln in lines if not ln.on_target]
        for ln in off:
            why = ("outside its band" if not ln.inside else
                   f"{abs(ln.ratio - 1):.0%} from the point with a {ln.step_ms:.3g} ms step")
            print(f"{PROG}: {ln.setting}: {ln.benchmark} {why}", file=sys.stderr)
        return 1 if args.check and off else 0

    return tbcsv.run_main(run, PROG)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The table that holds trainbench's N-device predictions against every multi-rank run made
(docs/prediction.md): one line per measured (or replayed) data-parallel benchmark of the CSVs,
beside the prediction trainbench compared it with in the same invocation, as its rows say: their
`prediction` column names the predicted row (of the same file, made from the one-device row of
the ranks' threads, over the run's measured link where there was one), their verdicts say
whether each repetition fell inside its band (inside_band, outside_band). The line shows the
measured median, the band, the verdicts and the term that dominates the prediction. Files
before schema 6 get those columns from tbcsv's upgrade, by trainbench's rule.

    scripts/predictions_table.py SETTING=CSV [SETTING=CSV ...] [--check]

SETTING names where the CSV's runs ran ("mpi:2, one machine", "mpi:2, emulated nodes, 1 Gbit/s").
--check exits 1 when a measured repetition lies outside its band, or the median is more than 10%
from the point where the one-device step is over 1 ms (the targets of docs/prediction.md).
Standard library only.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402

PROG = "predictions_table.py"
POINT_TOLERANCE = 0.10  # within 10% of the point, for steps over 1 ms
LONG_STEP_S = 1e-3
INSIDE, OUTSIDE = "inside_band", "outside_band"


@dataclass
class Line:
    setting: str
    benchmark: str
    step_ms: float  # the one-device row's step
    measured: float  # the median over the ok repetitions
    predicted: float
    low: float
    high: float
    dominant: str
    link: str
    verdicts: list[str] = field(default_factory=list)  # each ok repetition's: inside or outside

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted

    @property
    def inside(self) -> bool:
        """Every repetition inside the band, as trainbench judged each."""
        return bool(self.verdicts) and all(v == INSIDE for v in self.verdicts)

    @property
    def in_band(self) -> str:
        """`yes`, `**no**`, or `2 of 3` where the repetitions disagree."""
        inside = self.verdicts.count(INSIDE)
        if inside == len(self.verdicts):
            return "yes"
        return "**no**" if inside == 0 else f"{inside} of {len(self.verdicts)}"

    @property
    def on_target(self) -> bool:
        return self.inside and (self.step_ms <= LONG_STEP_S * 1e3 or abs(self.ratio - 1) <= POINT_TOLERANCE)


def compared(row: dict[str, str]) -> str:
    """The row's verdict on its prediction's band, or '' where it was not compared."""
    return next((v for v in tbcsv.verdicts(row) if v in (INSIDE, OUTSIDE)), "")


def prediction_of(row: dict[str, str], predicted: dict) -> dict[str, str] | None:
    """The predicted row a measured row names in its `prediction` column: of the rows of that
    name in the file, the first made from a one-device row of the measured row's threads (names
    repeat where the run predicted from two one-device rows, cpu and cpu:1 under mpirun)."""
    rows = predicted.get((row.get("prediction") or "").strip(), [])
    return next((p for p in rows if p.get("threads") == row.get("threads")), rows[0] if rows else None)


def lines_of(setting: str, table: tbcsv.Table) -> list[Line]:
    """Each measured or replayed data-parallel benchmark whose repetitions were compared with a
    prediction, beside that prediction."""
    rows = table.rows
    predicted: dict = {}
    for r in rows:
        if tbcsv.is_predicted(r) and tbcsv.is_iteration(r):
            predicted.setdefault(r["benchmark"], []).append(r)
    by_benchmark: dict = {}
    for r in rows:
        if (not tbcsv.is_predicted(r) and tbcsv.is_iteration(r) and tbcsv.is_ok(r)
                and compared(r) and r.get("prediction")):
            by_benchmark.setdefault(r["benchmark"], []).append(r)
    steps = tbcsv.samples(rows, lambda r: r["benchmark"], "step_time_s")
    rates = tbcsv.samples(rows, lambda r: r["benchmark"], "samples_per_s")
    out = []
    for benchmark, reps in by_benchmark.items():
        p = prediction_of(reps[0], predicted)
        if p is None or benchmark not in rates:
            continue
        # The one-device step: its row's, where the file has it; a replay's file has only the
        # prediction, whose efficiency is that step over its own.
        source = steps.get(p.get("predicted_from", ""))
        efficiency, predicted_step = tbcsv.number(p, "scaling_efficiency"), tbcsv.number(p, "step_time_s")
        step_s = source.center if source else efficiency * predicted_step if efficiency and predicted_step else None
        if step_s is None:
            continue
        out.append(Line(setting, benchmark, step_s * 1e3, rates[benchmark].center,
                        tbcsv.number(p, "samples_per_s"), tbcsv.number(p, "samples_per_s_low"),
                        tbcsv.number(p, "samples_per_s_high"), p.get("dominant_term") or "",
                        link_text(p),
                        [compared(r) for r in reps]))
    return out


def link_text(p: dict[str, str]) -> str:
    """The prediction's link: its bus bandwidth, and over nodes the network's per NIC beside it."""
    text = f"{tbcsv.number(p, 'link_busbw_gbps'):.3g} GB/s"
    network = tbcsv.number(p, "network_busbw_gbps")
    if network is not None:
        text += f", {tbcsv.number(p, 'network_busbw_gbps'):.3g} GB/s between {p.get('nodes')} nodes"
    return text


def markdown(lines: list[Line]) -> str:
    out = ["| setting | benchmark | one-device step (ms) | measured samples/s | predicted (band) | "
           "measured / predicted | in band | dominant term | link |",
           "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for ln in lines:
        out.append(f"| {ln.setting} | `{ln.benchmark}` | {ln.step_ms:.3g} | {ln.measured:,.0f} | "
                   f"{ln.predicted:,.0f} ({ln.low:,.0f} to {ln.high:,.0f}) | {ln.ratio:.2f} | "
                   f"{ln.in_band} | {ln.dominant} | {ln.link} |")
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
                raise tbcsv.InputError(f"{path}: no measured data-parallel row compared with a prediction "
                                       f"(its prediction column and an inside_band or outside_band "
                                       f"verdict: run mpirun ... --devices=cpu:1,mpi:2 --link=measured)")
            lines += found
        print(markdown(lines), end="")
        off = [ln for ln in lines if not ln.on_target]
        for ln in off:
            why = (f"outside its band ({ln.verdicts.count(OUTSIDE)} of {len(ln.verdicts)} repetitions)"
                   if not ln.inside else
                   f"{abs(ln.ratio - 1):.0%} from the point with a {ln.step_ms:.3g} ms step")
            print(f"{PROG}: {ln.setting}: {ln.benchmark} {why}", file=sys.stderr)
        return 1 if args.check and off else 0

    return tbcsv.run_main(run, PROG)


if __name__ == "__main__":
    sys.exit(main())

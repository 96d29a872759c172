#!/usr/bin/env python3
"""The table that holds trainbench's N-device predictions against every multi-rank run made
(docs/prediction.md): one line per measured (or replayed) data-parallel benchmark of the CSVs,
beside the prediction trainbench compared it with in the same invocation, as its rows say: their
`prediction` column names the predicted row (of the same file, made from the one-device row of
the ranks' threads, over the run's measured link where there was one), their verdicts say
whether each repetition fell inside its band (inside_band, outside_band). The line shows the
measured median, the band, the verdicts and the term that dominates the prediction. Files
before schema 6 get those columns from tbcsv's upgrade, by trainbench's rule.

    scripts/predictions_table.py SETTING=CSV[=PROBE_CSV] [SETTING=CSV[=PROBE_CSV] ...] [--check]

SETTING names where the CSV's runs ran ("mpi:2, one machine", "mpi:2, emulated nodes, 1 Gbit/s").
PROBE_CSV, for replays on more ranks than the links were measured with, is the same replays run
on the same ranks over the link they measured among themselves at start-up (--link=measured):
its predictions say what this machine delivers at that N. Where such a prediction's
communication (its exposed all-reduce time a step) leaves the band of the checked prediction's
communication term, the machine's link at N, not the model, sets the replay's pace (8 ranks on 2
cores): the line says the link fell short and is no check of the model; with probes the
table ends with counts per group (measured and replayed at N = 2, replayed at N > 2 where the
machine carried the link and where it fell short).
--check exits 1 when a measured repetition lies outside its band, or the median is more than 10%
from the point where the one-device step is over 1 ms (the targets of docs/prediction.md), on a
line that is a check (not one whose link fell short). Standard library only.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402

PROG = "predictions_table.py"
POINT_TOLERANCE = 0.10  # within 10% of the point, for steps over 1 ms
LONG_STEP_S = 1e-3
INSIDE, OUTSIDE = "inside_band", "outside_band"
TERM_ROUNDING = 0.005  # a message's terms have 3 significant digits


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
    ranks: int  # N, the devices sharing gradients: the measured row's data_parallel
    replayed: bool  # a one-device row's steps replayed across the ranks (measurement=replayed)
    verdicts: list[str] = field(default_factory=list)  # each ok repetition's: inside or outside
    communication: tuple[float, float, float] | None = None  # the prediction's term: point, low, high (s)
    at_n: Line | None = None  # the same, predicted over the link its ranks measured (a probe)

    @property
    def carried(self) -> bool | None:
        """Whether this machine delivered the links at N as the prediction assumed them: over the
        link its ranks measured, the communication lies inside the band of the checked
        prediction's communication term (the other terms are the same one-device row's). Rows
        without the terms in their message: the whole prediction inside the whole band. None
        without a probe."""
        if self.at_n is None:
            return None
        if self.communication is None or self.at_n.communication is None:
            return self.low <= self.at_n.predicted <= self.high
        _, low, high = self.communication
        return low * (1 - TERM_ROUNDING) <= self.at_n.communication[0] <= high * (1 + TERM_ROUNDING)

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
    def long_step(self) -> bool:
        """The one-device step is over 1 ms: the point itself is a target."""
        return self.step_ms > LONG_STEP_S * 1e3

    @property
    def near_point(self) -> bool:
        return abs(self.ratio - 1) <= POINT_TOLERANCE

    @property
    def on_target(self) -> bool:
        return self.inside and (not self.long_step or self.near_point)


def communication(p: dict[str, str]) -> tuple[float, float, float] | None:
    """A predicted row's communication term, from its message ("communication +2.66 (2.54 to
    2.76) ms", trainbench's terms_text): point, low, high in seconds; None where it has none."""
    m = re.search(r"communication \+([-+.\de]+) \(([-+.\de]+) to ([-+.\de]+)\)[^;]* ms", p.get("message", ""))
    return tuple(float(x) * 1e-3 for x in m.groups()) if m else None


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
                        link_text(p), tbcsv.data_parallel(reps[0]) or 0, tbcsv.is_replayed(reps[0]),
                        [compared(r) for r in reps], communication(p)))
    return out


def with_probe(lines: list[Line], probe: list[Line]) -> None:
    """Gives each line the point its probe predicted for the same benchmark."""
    at_n = {ln.benchmark: ln for ln in probe}
    for ln in lines:
        ln.at_n = at_n.get(ln.benchmark)


def compared_lines(setting: str, path: str) -> list[Line]:
    found = lines_of(setting, tbcsv.read_table(path))
    if not found:
        raise tbcsv.InputError(f"{path}: no measured data-parallel row compared with a prediction "
                               f"(its prediction column and an inside_band or outside_band "
                               f"verdict: run mpirun ... --devices=cpu:1,mpi:2 --link=measured)")
    return found


def link_text(p: dict[str, str]) -> str:
    """The prediction's link: its bus bandwidth, and over nodes the network's per NIC beside it."""
    text = f"{tbcsv.number(p, 'link_busbw_gbps'):.3g} GB/s"
    network = tbcsv.number(p, "network_busbw_gbps")
    if network is not None:
        text += f", {tbcsv.number(p, 'network_busbw_gbps'):.3g} GB/s between {p.get('nodes')} nodes"
    return text


def markdown(lines: list[Line]) -> str:
    probed = any(ln.at_n is not None for ln in lines)
    head = ("| setting | benchmark | one-device step (ms) | measured samples/s | predicted (band) | "
            "measured / predicted | in band | dominant term | link |")
    out = [head + (" over the link measured at N |" if probed else ""),
           "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- |" + (" --- |" if probed else "")]
    for ln in lines:
        row = (f"| {ln.setting} | `{ln.benchmark}` | {ln.step_ms:.3g} | {ln.measured:,.0f} | "
               f"{ln.predicted:,.0f} ({ln.low:,.0f} to {ln.high:,.0f}) | {ln.ratio:.2f} | "
               f"{ln.in_band} | {ln.dominant} | {ln.link} |")
        if probed:
            verdict = "carried" if ln.carried else "**fell short**"
            row += " - |" if ln.at_n is None else f" {at_n_figures(ln)}, {verdict} |"
        out.append(row)
    if probed:
        out += ["", *counts(lines)]
    return "\n".join(out) + "\n"


def at_n_figures(ln: Line) -> str:
    """The probe's prediction and, where both have the terms, its communication beside the
    checked term's band."""
    if ln.communication is None or ln.at_n.communication is None:
        return f"{ln.at_n.predicted:,.0f}"
    _, low, high = ln.communication
    return (f"{ln.at_n.predicted:,.0f}; communication {milliseconds(ln.at_n.communication[0])} ms against "
            f"{milliseconds(low)} to {milliseconds(high)}")


def milliseconds(seconds: float) -> str:
    """3 significant digits, whole numbers from 100 ms (`3,270`, never `3.27e+03`)."""
    return tbcsv.figure(seconds * 1e3)


def counts(lines: list[Line]) -> list[str]:
    """Per group, how many lines lie inside their bands and, of those whose one-device step is
    over 1 ms, how many lie within 10% of the point."""
    groups = [("measured, N = 2", lambda ln: not ln.replayed and ln.ranks == 2),
              ("replayed, N = 2", lambda ln: ln.replayed and ln.ranks == 2),
              ("replayed, N > 2, links carried at N", lambda ln: ln.replayed and ln.ranks > 2 and ln.carried),
              ("replayed, N > 2, links fell short at N (no check of the model)",
               lambda ln: ln.replayed and ln.ranks > 2 and ln.carried is False),
              ("replayed, N > 2, links not measured at N", lambda ln: ln.replayed and ln.ranks > 2 and ln.carried is None)]
    out = []
    for name, member in groups:
        group = [ln for ln in lines if member(ln)]
        if not group:
            continue
        long = [ln for ln in group if ln.long_step]
        out.append(f"- {name}: {sum(ln.inside for ln in group)} of {len(group)} inside their bands; "
                   f"steps over 1 ms: {sum(ln.near_point for ln in long)} of "
                   f"{len(long)} within 10% of the point")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="SETTING=CSV")
    p.add_argument("--check", action="store_true", help="exit 1 on a row off its target")
    args = p.parse_args(argv)

    def run() -> int:
        lines = []
        for item in args.runs:
            setting, sep, paths = item.partition("=")
            path, _, probe = paths.partition("=")
            if not sep or not path:
                raise tbcsv.InputError(f"{item!r}: give SETTING=CSV, e.g. 'mpi:2, one machine=run.csv'")
            found = compared_lines(setting, path)
            if probe:
                with_probe(found, compared_lines(setting, probe))
            lines += found
        print(markdown(lines), end="")
        for ln in lines:
            if ln.carried is False:
                print(f"{PROG}: {ln.setting}: {ln.benchmark} is no check of the model: over the link its "
                      f"ranks measured, {at_n_figures(ln)}: outside the band", file=sys.stderr)
        off = [ln for ln in lines if ln.carried is not False and not ln.on_target]
        for ln in off:
            why = (f"outside its band ({ln.verdicts.count(OUTSIDE)} of {len(ln.verdicts)} repetitions)"
                   if not ln.inside else
                   f"{abs(ln.ratio - 1):.0%} from the point with a {ln.step_ms:.3g} ms step")
            print(f"{PROG}: {ln.setting}: {ln.benchmark} {why}", file=sys.stderr)
        return 1 if args.check and off else 0

    return tbcsv.run_main(run, PROG)


if __name__ == "__main__":
    sys.exit(main())

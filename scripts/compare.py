#!/usr/bin/env python3
"""Compares two trainbench CSVs (results/SCHEMA.md) benchmark by benchmark.

    scripts/compare.py BASE.csv NEW.csv [--metric COLUMN] [--format text|markdown]
                       [--fail-if-slower PCT] [--alpha 0.05]

The two files may be of different schema versions (1, 2 or 3): columns are matched by name.
For every benchmark name present in both files it prints the median of the metric on each
side, the ratio NEW/BASE and whether the difference is beyond run-to-run noise (a two-sided
Mann-Whitney U test over the repetitions, or when there are too few repetitions for that test
to ever reach the significance level, whether the two ranges overlap), then the geometric mean
of the ratios, after a header that shows how the two machines differ.

Exit status: 0, or 1 when --fail-if-slower is given and some benchmark is worse than BASE by
more than PCT percent, or 2 on bad input (one line on stderr). Standard library only; see
docs/scripts.md.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402  (the shared reader lives next to this script)

PROG = "compare.py"

# Exact U distributions are enumerated up to this many values per side; beyond that (or with
# ties) the normal approximation is accurate and much cheaper.
EXACT_MAX_PER_SIDE = 25


# ---- Mann-Whitney U ------------------------------------------------------------------------

def midranks(values: list[float]) -> tuple[list[float], list[int]]:
    """1-based ranks with ties given their average rank, and the sizes of the tie groups."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def u_distribution(n1: int, n2: int) -> list[int]:
    """counts[u] = number of orderings of n1 + n2 distinct values whose U (pairs with the
    first sample's value above the second's) equals u.

    Recurrence on the largest value: from the first sample it beats all j values of the
    second (U grows by j), from the second it beats none."""
    prev = [[1] for _ in range(n2 + 1)]  # no first-sample values: U is 0
    for i in range(1, n1 + 1):
        cur = [[1]]  # no second-sample values: U is 0
        for j in range(1, n2 + 1):
            poly = [0] * (i * j + 1)
            for u, c in enumerate(prev[j]):
                poly[u + j] += c
            for u, c in enumerate(cur[j - 1]):
                poly[u] += c
            cur.append(poly)
        prev = cur
    return prev[n2]


def mann_whitney_u(a: list[float], b: list[float]) -> tuple[float, float]:
    """U statistic of `a` and the two-sided p-value of the Mann-Whitney U test.

    Exact when there are no ties and both samples are small; otherwise the normal
    approximation with the tie correction of the variance and a continuity correction."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    ranks, ties = midranks(list(a) + list(b))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    if max(ties) == 1 and max(n1, n2) <= EXACT_MAX_PER_SIDE:
        counts = u_distribution(n1, n2)
        total = sum(counts)
        k = round(u1)
        lower = sum(counts[:k + 1]) / total
        upper = sum(counts[k:]) / total
        return u1, min(1.0, 2 * min(lower, upper))
    n = n1 + n2
    tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1))
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:
        return u1, 1.0  # every value is the same: nothing to tell apart
    z = max(0.0, abs(u1 - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return u1, min(1.0, math.erfc(z / math.sqrt(2)))


def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided p the exact test can give with these sample sizes (all of one
    sample above all of the other): 2 / C(n1 + n2, n1)."""
    return min(1.0, 2 / math.comb(n1 + n2, n1))


@dataclass
class NoiseVerdict:
    beyond: bool | None  # None: not tested
    text: str


def noise_test(base: tbcsv.Sample, new: tbcsv.Sample, alpha: float) -> NoiseVerdict:
    n1, n2 = base.repetitions, new.repetitions
    if n1 < 2 or n2 < 2:
        why = "median aggregate only" if 0 in (n1, n2) else f"n={n1}/{n2}"
        return NoiseVerdict(None, f"untested ({why})")
    if smallest_p(n1, n2) > alpha:
        # With 3 vs 3 repetitions even complete separation gives p = 0.1: the test cannot
        # say anything at alpha 0.05, so say whether the ranges are apart instead.
        apart = max(base.values) < min(new.values) or max(new.values) < min(base.values)
        words = "ranges do not overlap" if apart else "ranges overlap"
        return NoiseVerdict(apart, f"{words} (U test underpowered at n={n1}/{n2})")
    _, p = mann_whitney_u(base.values, new.values)
    words = "beyond noise" if p < alpha else "within noise"
    return NoiseVerdict(p < alpha, f"{words} (U test p={p:.3g}, n={n1}/{n2})")


# ---- matching ------------------------------------------------------------------------------

def row_key(row: dict[str, str]) -> str:
    """Rows are matched by benchmark name; per-epoch rows also by their epoch."""
    epoch = (row.get("epoch") or "").strip()
    return f"{row['benchmark']} epoch {epoch}" if epoch else row["benchmark"]


@dataclass
class Result:
    benchmark: str
    base: tbcsv.Sample
    new: tbcsv.Sample
    noise: NoiseVerdict
    lower_better: bool

    @property
    def ratio(self) -> float | None:
        b, n = self.base.center, self.new.center
        if b == 0:
            return None if n != 0 else 1.0
        return n / b

    @property
    def worse_pct(self) -> float | None:
        """How much worse NEW is than BASE, in percent of BASE (negative: better)."""
        r = self.ratio
        if r is None:
            return None
        return (r - 1) * 100 if self.lower_better else (1 - r) * 100


@dataclass
class Comparison:
    metric: str
    lower_better: bool
    results: list[Result]
    only_base: list[str]
    only_new: list[str]
    no_value: list[str]  # in both files, but one side has no ok value of the metric

    def geomean(self) -> tuple[float, int] | None:
        logs = [math.log(r.ratio) for r in self.results if r.ratio and r.ratio > 0]
        return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else None


def failure_notes(rows, key: str) -> str:
    """Why a benchmark has no ok value: its failed/skipped messages, shortened."""
    notes = tbcsv.distinct([r for r in rows if row_key(r) == key and not tbcsv.is_ok(r)],
                           "message")
    return "; ".join(notes)[:80]


def compare(base: tbcsv.Table, new: tbcsv.Table, metric: str, alpha: float,
            lower_better: bool) -> Comparison:
    base_names = list(dict.fromkeys(row_key(r) for r in base.rows))
    new_names = list(dict.fromkeys(row_key(r) for r in new.rows))
    base_samples = tbcsv.samples(base.rows, row_key, metric)
    new_samples = tbcsv.samples(new.rows, row_key, metric)
    in_base, in_new = set(base_names), set(new_names)
    results, no_value = [], []
    for name in base_names:
        if name not in in_new:
            continue
        b, n = base_samples.get(name), new_samples.get(name)
        if b is None or n is None:
            sides = [(side, rows) for side, rows, sample in
                     (("BASE", base.rows, b), ("NEW", new.rows, n)) if sample is None]
            whys = [failure_notes(rows, name) for _, rows in sides]
            if len(sides) == 2 and whys[0] == whys[1]:
                sides, whys = [("BASE or NEW", None)], whys[:1]
            notes = [f"none in {side}" + (f": {why}" if why else "")
                     for (side, _), why in zip(sides, whys)]
            no_value.append(f"{name} ({'; '.join(notes)})")
            continue
        results.append(Result(name, b, n, noise_test(b, n, alpha), lower_better))
    return Comparison(metric, lower_better, results,
                      [x for x in base_names if x not in in_new],
                      [x for x in new_names if x not in in_base], no_value)


def check_metric(tables: list[tbcsv.Table], metric: str) -> None:
    for t in tables:
        if metric not in t.columns:
            older = (metric in tbcsv.SCHEMA_3_COLUMNS
                     and all(r["schema_version"] != "3" for r in t.rows))
            why = (f": schema_version 3 added it and this file is version "
                   f"{', '.join(tbcsv.distinct(t.rows, 'schema_version'))}; give two files of "
                   f"version 3" if older else "")
            raise tbcsv.InputError(f"{t.path}: no column {metric!r} to compare (--metric){why}")
    if not any(tbcsv.has_values(t.rows, metric) for t in tables):
        raise tbcsv.InputError(f"{tables[0].path}, {tables[1].path}: column {metric!r} has no "
                               f"numeric values (--metric takes a measurement column)")


# ---- formatting ----------------------------------------------------------------------------

def fmt_value(v: float) -> str:
    """Four significant digits, thousands separated so throughputs stay readable."""
    if 1000 <= abs(v) < 1e15:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def fmt_side(s: tbcsv.Sample) -> str:
    return fmt_value(s.center)


def fmt_change(r: Result) -> str:
    ratio, worse = r.ratio, r.worse_pct
    if ratio is None or worse is None:
        return "n/a"
    if abs(worse) < 0.05:
        return f"{(ratio - 1) * 100:+.1f}%"
    return f"{(ratio - 1) * 100:+.1f}% {'worse' if worse > 0 else 'better'}"


def fmt_ratio(r: Result) -> str:
    return "n/a" if r.ratio is None else f"{r.ratio:.3f}"


def context_rows(base: tbcsv.Table, new: tbcsv.Table) -> list[tuple[str, str, str, bool]]:
    """(column, BASE values, NEW values, differs) for the machine context columns; the
    schema versions first, since a version change can explain a context column's change."""
    columns = (["schema_version"] + tbcsv.context_columns(tbcsv.all_columns([base, new]))
               + ["timestamp"])
    out = []
    for c in columns:
        if c == "timestamp":
            b, n = tbcsv.timestamp_range(base.rows), tbcsv.timestamp_range(new.rows)
        else:
            b = ", ".join(tbcsv.distinct(base.rows, c)) or "-"
            n = ", ".join(tbcsv.distinct(new.rows, c)) or "-"
        out.append((c, b, n, b != n))
    return out


def pooled_notes(base: tbcsv.Table, new: tbcsv.Table) -> list[str]:
    notes = []
    for side, t in (("BASE", base), ("NEW", new)):
        hosts = tbcsv.distinct(t.rows, "host")
        if len(hosts) > 1:
            notes.append(f"note: {side} holds rows of {len(hosts)} machines ({', '.join(hosts)}); "
                         f"their repetitions are pooled per benchmark")
    return notes


def direction_words(c: Comparison) -> str:
    return "lower is better" if c.lower_better else "higher is better"


def summary_lines(c: Comparison) -> list[str]:
    lines = []
    g = c.geomean()
    if g:
        value, count = g
        worse = (value - 1) * 100 if c.lower_better else (1 - value) * 100
        word = "" if abs(worse) < 0.05 else (", worse" if worse > 0 else ", better")
        lines.append(f"geometric mean NEW/BASE over {count} benchmark{'s' * (count != 1)}: "
                     f"{value:.3f} ({(value - 1) * 100:+.1f}%{word})")
    tested = [r for r in c.results if r.noise.beyond is not None]
    beyond = [r for r in tested if r.noise.beyond]
    better = sum(1 for r in beyond if (r.worse_pct or 0) < 0)
    lines.append(f"beyond noise: {better} better, {len(beyond) - better} worse; within noise: "
                 f"{len(tested) - len(beyond)}; untested: {len(c.results) - len(tested)}")
    return lines


def unmatched(c: Comparison) -> list[tuple[str, list[str]]]:
    """The benchmarks left out of the table, by reason; empty groups are dropped."""
    groups = [("only in BASE", c.only_base), ("only in NEW", c.only_new),
              (f"no ok {c.metric} value", c.no_value)]
    return [(label, names) for label, names in groups if names]


def table_rows(c: Comparison) -> list[list[str]]:
    return [[r.benchmark, fmt_side(r.base), fmt_side(r.new), fmt_ratio(r), fmt_change(r),
             r.noise.text] for r in c.results]


HEADINGS = ["benchmark", "BASE", "NEW", "NEW/BASE", "change", "noise test"]


def render_text(c: Comparison, base: tbcsv.Table, new: tbcsv.Table, alpha: float) -> str:
    out = [f"trainbench compare: {c.metric} ({direction_words(c)}), median over ok "
           f"repetitions; noise test at alpha {alpha:g}",
           f"BASE: {base.path}", f"NEW:  {new.path}", ""]
    ctx = context_rows(base, new)
    w0 = max(len(x[0]) for x in ctx)
    w1 = max(len("BASE"), *(len(x[1]) for x in ctx))
    w2 = max(len("NEW"), *(len(x[2]) for x in ctx))
    out.append(f"{'machine':<{w0}}  {'BASE':<{w1}}  NEW")
    for col, b, n, differs in ctx:
        out.append(f"{col:<{w0}}  {b:<{w1}}  {n:<{w2}}  {'differs' if differs else ''}".rstrip())
    out += pooled_notes(base, new)
    out.append("")
    rows = [HEADINGS] + table_rows(c)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADINGS))]
    right = {1, 2, 3, 4}  # numbers line up on the right
    for k, r in enumerate(rows):
        cells = [f"{x:>{w}}" if i in right else f"{x:<{w}}"
                 for i, (x, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    out.append("")
    out += summary_lines(c)
    for label, names in unmatched(c):
        out.append(f"{label} ({len(names)}):")
        out += [f"  {name}" for name in names]
    return "\n".join(out)


def md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(c: Comparison, base: tbcsv.Table, new: tbcsv.Table, alpha: float) -> str:
    out = [f"### trainbench compare: `{c.metric}` ({direction_words(c)})", "",
           f"Median over ok repetitions; noise test: Mann-Whitney U, two-sided, "
           f"alpha {alpha:g}.", "",
           "| machine | BASE | NEW | |", "| --- | --- | --- | --- |",
           f"| file | `{md_cell(base.path)}` | `{md_cell(new.path)}` | |"]
    for col, b, n, differs in context_rows(base, new):
        out.append(f"| {col} | {md_cell(b)} | {md_cell(n)} | {'**differs**' if differs else ''} |")
    out.append("")
    out += [f"_{md_cell(x)}_" for x in pooled_notes(base, new)]
    out += ["| " + " | ".join(HEADINGS) + " |",
            "| --- | ---: | ---: | ---: | ---: | --- |"]
    for r in table_rows(c):
        r[0] = f"`{r[0]}`"
        out.append("| " + " | ".join(md_cell(x) for x in r) + " |")
    out.append("")
    for line in summary_lines(c):
        out += [md_cell(line), ""]
    for label, names in unmatched(c):
        out += [f"{label} ({len(names)}):", ""] + [f"- {md_cell(name)}" for name in names] + [""]
    return "\n".join(out).rstrip() + "\n"


# ---- main ----------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("base", metavar="BASE.csv")
    p.add_argument("new", metavar="NEW.csv")
    p.add_argument("--metric", default="samples_per_s",
                   help="numeric column to compare (default samples_per_s)")
    p.add_argument("--format", choices=("text", "markdown"), default="text")
    p.add_argument("--fail-if-slower", type=float, metavar="PCT",
                   help="exit 1 when a benchmark is worse than BASE by more than PCT percent")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    p.add_argument("--direction", choices=("auto", "higher", "lower"), default="auto",
                   help="which way is better; auto: columns ending in _s, _s_per_step or "
                        "_bytes (but not _per_s), losses, energy_j_per_sample, gpu_power_w, "
                        "gpu_temp_max_c and host_cpu_util_per_job are better lower")
    args = p.parse_args(argv)
    if args.fail_if_slower is not None and not args.fail_if_slower >= 0:
        p.error("--fail-if-slower takes a percentage >= 0")
    if not 0 < args.alpha < 1:
        p.error("--alpha must be between 0 and 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        base, new = tbcsv.read_table(args.base), tbcsv.read_table(args.new)
        check_metric([base, new], args.metric)
        lower = (tbcsv.lower_is_better(args.metric) if args.direction == "auto"
                 else args.direction == "lower")
        c = compare(base, new, args.metric, args.alpha, lower)
        if not c.results:
            raise tbcsv.InputError(f"no benchmark of {base.path} has a {args.metric} value to "
                                   f"match in {new.path} (only in BASE: {len(c.only_base)}, "
                                   f"only in NEW: {len(c.only_new)}, without a value: "
                                   f"{len(c.no_value)})")
        render = render_markdown if args.format == "markdown" else render_text
        print(render(c, base, new, args.alpha))
        if args.fail_if_slower is None:
            return 0
        slow = [r for r in c.results if (r.worse_pct or 0) > args.fail_if_slower]
        if slow:
            names = ", ".join(f"{r.benchmark} ({fmt_change(r)})" for r in slow)
            print(f"{PROG}: {len(slow)} benchmark(s) worse than BASE by more than "
                  f"{args.fail_if_slower:g}%: {names}", file=sys.stderr)
            return 1
        return 0

    return tbcsv.run_main(run, PROG)


if __name__ == "__main__":
    sys.exit(main())

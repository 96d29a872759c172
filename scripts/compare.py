#!/usr/bin/env python3
"""Compares two trainbench CSVs (results/SCHEMA.md), or two configurations within CSVs.

    scripts/compare.py BASE.csv NEW.csv [--metric COLUMN] [--format text|markdown]
                       [--fail-if-slower PCT] [--alpha 0.05]
    scripts/compare.py CSV [CSV...] --filters A B [options]   # e.g. --filters cpu gpu:1

The files may be of different schema versions (1 to 4): columns are matched by name. A row's
identity is its benchmark name, which ends with its variant (the flags that change what it
measures; tbcsv derives it from cuda_graph/data_on_device in rows before version 4), so a run
with --cuda_graph never matches a plain one. With two files, benchmarks are matched by name;
with --filters A B, side A is the rows of all CSVs that match filter A, side B those matching
B, matched by model, dataset, batch and what the filters leave free (tbfilters.py has the
syntax). For every benchmark on both sides it prints the median of the metric on each side,
the ratio NEW/BASE and whether the difference is beyond run-to-run noise (a two-sided
Mann-Whitney U test over the repetitions, or when there are too few repetitions for that test
to ever reach the significance level, whether the two ranges overlap, with how to get a real
verdict), then the geometric mean of the ratios, after a header that shows what differs between
the sides (machine, GPU, commit, flags, sgemm rate, load) and warns when the sgemm rates differ
by more than 15% or a side ran on a loaded machine. Predicted rows (measurement=predicted) are
never compared.

Exit status: 0, or 1 when --fail-if-slower is given and some benchmark is worse than BASE by
more than PCT percent, or 2 on bad input or nothing to compare (one line on stderr). Standard
library only; see docs/scripts.md.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The shared reader and the filters live next to this script.
import tbcsv  # noqa: E402
import tbfilters  # noqa: E402

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


# ---- sides and matching --------------------------------------------------------------------

def row_key(row: dict[str, str]) -> str:
    """Rows of two files are matched by benchmark name, which ends with the variant (tbcsv
    derives it for rows before schema 4), so a --cuda_graph run never matches a plain one;
    per-epoch rows also by their epoch."""
    epoch = (row.get("epoch") or "").strip()
    return f"{row['benchmark']} epoch {epoch}" if epoch else row["benchmark"]


def framework_key(row: dict[str, str]) -> str:
    """row_key with the framework, for sides that hold rows of several frameworks."""
    framework = (row.get("framework") or "").strip() or "trainbench"
    return row_key(row) + (f" [{framework}]" if framework != "trainbench" else "")


@dataclass
class Side:
    """The rows of one side: a file, or with --filters the rows of the files that match one
    filter. path names it in the header. Predicted rows are never among them."""
    path: str
    rows: list[dict[str, str]]
    predicted: int = 0  # predicted rows left out


def side_of(path: str, rows: list, keep=lambda row: True) -> Side:
    kept = [r for r in rows if keep(r)]
    return Side(path, [r for r in kept if not tbcsv.is_predicted(r)],
                sum(1 for r in kept if tbcsv.is_predicted(r)))


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

    @property
    def fewest(self) -> int:
        """The fewer repetitions of the two sides (0: a median aggregate only)."""
        return min(self.base.repetitions, self.new.repetitions)


@dataclass
class Comparison:
    metric: str
    lower_better: bool
    results: list[Result]
    only_base: list[str]
    only_new: list[str]
    no_value: list[str]  # in both files, but one side has no ok value of the metric
    ambiguous: list[str] = field(default_factory=list)  # rows a filter cannot tell apart
    hint: str | None = None  # --filters that would match what is unmatched

    def geomean(self) -> tuple[float, int] | None:
        logs = [math.log(r.ratio) for r in self.results if r.ratio and r.ratio > 0]
        return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else None


def failure_notes(rows, name: str, key=row_key) -> str:
    """Why a benchmark has no ok value: its failed/skipped messages, shortened."""
    notes = tbcsv.distinct([r for r in rows if key(r) == name and not tbcsv.is_ok(r)],
                           "message")
    return "; ".join(notes)[:80]


def no_value_line(name: str, base, new, b, n, key) -> str:
    sides = [(side, rows) for side, rows, sample in
             (("BASE", base.rows, b), ("NEW", new.rows, n)) if sample is None]
    whys = [failure_notes(rows, name, key) for _, rows in sides]
    if len(sides) == 2 and whys[0] == whys[1]:
        sides, whys = [("BASE or NEW", None)], whys[:1]
    notes = [f"none in {side}" + (f": {why}" if why else "") for (side, _), why in zip(sides, whys)]
    return f"{name} ({'; '.join(notes)})"


def compare(base, new, metric: str, alpha: float, lower_better: bool, key=None,
            ambiguous: dict | None = None) -> Comparison:
    """Compares two sides (Tables or Sides) benchmark by benchmark: key(row) names what is
    matched (row_key by default, so a PyTorch file matches a trainbench file by name, as
    compare_pytorch.sh compares them; framework_key where a side mixes frameworks, so that one
    side never pools two frameworks' rows); the keys in ambiguous are listed with their reason
    instead of compared."""
    if key is None:
        mixed = any(len({(r.get("framework") or "trainbench") for r in side.rows}) > 1
                    for side in (base, new))
        key = framework_key if mixed else row_key
    ambiguous = ambiguous or {}
    base_rows = [r for r in base.rows if not tbcsv.is_predicted(r)]
    new_rows = [r for r in new.rows if not tbcsv.is_predicted(r)]
    base_names = list(dict.fromkeys(key(r) for r in base_rows))
    new_names = list(dict.fromkeys(key(r) for r in new_rows))
    base_samples = tbcsv.samples(base_rows, key, metric)
    new_samples = tbcsv.samples(new_rows, key, metric)
    in_base, in_new = set(base_names), set(new_names)
    results, no_value = [], []
    for name in base_names:
        if name not in in_new or name in ambiguous:
            continue
        b, n = base_samples.get(name), new_samples.get(name)
        if b is None or n is None:
            no_value.append(no_value_line(name, base, new, b, n, key))
            continue
        results.append(Result(name, b, n, noise_test(b, n, alpha), lower_better))
    only_base = [x for x in base_names if x not in in_new and x not in ambiguous]
    only_new = [x for x in new_names if x not in in_base and x not in ambiguous]
    c = Comparison(metric, lower_better, results, only_base, only_new, no_value,
                   [f"{k} ({why})" for k, why in ambiguous.items()])
    if only_base and only_new and key in (row_key, framework_key):
        c.hint = tbfilters.suggest([r for r in base_rows if key(r) in only_base],
                                   [r for r in new_rows if key(r) in only_new])
    return c


def check_metric(tables: list[tbcsv.Table], metric: str) -> None:
    for t in tables:
        if metric not in t.columns:
            raise tbcsv.InputError(f"{t.path}: no column {metric!r} to compare "
                                   f"(--metric){added_by(metric, t)}")
    if not any(tbcsv.has_values(t.rows, metric) for t in tables):
        raise tbcsv.InputError(f"{', '.join(t.path for t in tables)}: column {metric!r} has no "
                               f"numeric values (--metric takes a measurement column)")


def added_by(metric: str, table: tbcsv.Table) -> str:
    """Why an older file lacks a column a later schema version added, or ''."""
    for version, columns in (("3", tbcsv.SCHEMA_3_COLUMNS), ("4", tbcsv.SCHEMA_4_COLUMNS)):
        versions = tbcsv.distinct(table.rows, "schema_version")
        if metric in columns and all(v < version for v in versions):
            return (f": schema_version {version} added it and this file is version "
                    f"{', '.join(versions)}; give files of version {version} or later")
    return ""


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


# Identity columns the header shows per side: what ran (the flags), beside the machine.
IDENTITY_COLUMNS = ("device", "precision", "variant", "optimizer", "framework")
# sgemm_gflops of the two sides more than this apart: the CPUs ran at different rates.
SGEMM_TOLERANCE = 0.15
# Below this many repetitions per side the U test cannot reach alpha 0.05 (smallest_p).
MIN_REPETITIONS = 4


def side_text(rows, column: str) -> str:
    """A side's values of a header column: distinct values, a range or a median."""
    if column == "timestamp":
        return tbcsv.timestamp_range(rows)
    if column == "variant":
        return ", ".join(dict.fromkeys((r.get("variant") or "plain") for r in rows)) or "-"
    if column in ("device", "precision"):
        return ", ".join(dict.fromkeys(v for r in rows if (v := tbcsv.field_of(r, column)))) or "-"
    if column == "framework":
        return ", ".join(dict.fromkeys((r.get("framework") or "trainbench") for r in rows))
    numbers = sorted(v for r in rows if (v := tbcsv.number(r, column)) is not None)
    if column == "sgemm_gflops" and numbers:
        return f"{numbers[len(numbers) // 2]:.1f} GFLOP/s"
    if column == "load_avg_1m" and numbers:
        return f"{numbers[0]:.2f}" + (f"-{numbers[-1]:.2f}" if numbers[-1] > numbers[0] else "")
    return ", ".join(tbcsv.distinct(rows, column)) or "-"


def sgemm_gap(base, new) -> tuple[float, float, float] | None:
    """(BASE, NEW, relative gap) of the sides' median sgemm_gflops, when both have one."""
    medians = []
    for side in (base, new):
        values = sorted(v for r in side.rows if (v := tbcsv.number(r, "sgemm_gflops")))
        if not values:
            return None
        medians.append(values[len(values) // 2])
    b, n = medians
    return b, n, max(b, n) / min(b, n) - 1 if min(b, n) > 0 else math.inf


def loaded_rows(side) -> list[dict[str, str]]:
    return [r for r in side.rows if tbcsv.loaded(r)]


def marker(column: str, b: str, n: str, base, new) -> str:
    """What the header says beside a line: differs, or for the machine's rate and load
    whether the difference matters (sgemm beyond 15%, a side loaded)."""
    if column == "sgemm_gflops":
        gap = sgemm_gap(base, new)
        return f"differs by {gap[2]:.0%}" if gap and gap[2] > SGEMM_TOLERANCE else ""
    if column == "load_avg_1m":
        sides = [name for name, side in (("BASE", base), ("NEW", new)) if loaded_rows(side)]
        return " and ".join(sides) + " loaded" if sides else ""
    return "differs" if b != n else ""


def context_rows(base, new) -> list[tuple[str, str, str, str]]:
    """(column, BASE values, NEW values, marker) for the header: the schema versions first
    (a version change can explain a context column's change), what ran (device, precision,
    variant, optimizer, framework), the machine context, its sgemm rate and load, and the
    timestamps."""
    present = list(dict.fromkeys(c for r in base.rows + new.rows for c in r))
    columns = (["schema_version"] + [c for c in IDENTITY_COLUMNS if c in present or c in
                                     ("device", "precision", "framework")]
               + tbcsv.context_columns(present)
               + [c for c in ("sgemm_gflops", "load_avg_1m") if c in present] + ["timestamp"])
    out = []
    for c in columns:
        b, n = side_text(base.rows, c), side_text(new.rows, c)
        if b != "-" or n != "-":  # a column neither side filled (GPU context of CPU rows)
            out.append((c, b, n, marker(c, b, n, base, new)))
    return out


def differing(ctx) -> list[str]:
    return [c for c, _, _, mark in ctx if mark and c != "timestamp"]


def warnings(base, new) -> list[str]:
    """What makes the ratios less than a code comparison: different CPU rates, a loaded
    machine, predicted rows left out."""
    out = []
    gap = sgemm_gap(base, new)
    if gap and gap[2] > SGEMM_TOLERANCE:
        out.append(f"warning: sgemm_gflops differs by {gap[2]:.0%} (BASE {gap[0]:.1f}, NEW "
                   f"{gap[1]:.1f} GFLOP/s, more than {SGEMM_TOLERANCE:.0%}): the CPUs ran at "
                   f"different rates (another machine, clocks or load), so CPU rows compare the "
                   f"machines as much as the code")
    for name, side in (("BASE", base), ("NEW", new)):
        rows = loaded_rows(side)
        if rows:
            worst = max(rows, key=lambda r: tbcsv.number(r, "load_avg_1m") or 0)
            out.append(f"warning: {name} was loaded: {len(rows)} of {len(side.rows)} rows started "
                       f"with load_avg_1m above the machine's cores + {tbcsv.LOAD_SLACK:g} (up to "
                       f"{worst['load_avg_1m']} on {worst.get('cores') or '?'} cores): their "
                       f"timings share the CPU with other work; rerun on an idle machine")
        if getattr(side, "predicted", 0):
            out.append(f"note: {side.predicted} predicted rows of {name} left out "
                       f"(measurement=predicted: compare.py compares measurements only)")
    return out


def pooled_notes(base, new) -> list[str]:
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
        few = all(r.fewest < MIN_REPETITIONS for r in c.results)
        lines.append(f"geometric mean NEW/BASE over {count} benchmark{'s' * (count != 1)}: "
                     f"{value:.3f} ({(value - 1) * 100:+.1f}%{word})"
                     + (" - not a verdict, see below" if few else ""))
    tested = [r for r in c.results if r.noise.beyond is not None]
    beyond = [r for r in tested if r.noise.beyond]
    better = sum(1 for r in beyond if (r.worse_pct or 0) < 0)
    lines.append(f"beyond noise: {better} better, {len(beyond) - better} worse; within noise: "
                 f"{len(tested) - len(beyond)}; untested: {len(c.results) - len(tested)}")
    return lines + repetition_advice(c)


def repetition_advice(c: Comparison) -> list[str]:
    """How to get a verdict where the repetitions are too few for the U test to reach 0.05."""
    few = [r for r in c.results if r.fewest < MIN_REPETITIONS]
    if not few:
        return []
    counts = ", ".join(dict.fromkeys(
        "median aggregate only" if r.fewest == 0 else f"n={r.base.repetitions}/{r.new.repetitions}"
        for r in few))
    which = "every one" if len(few) == len(c.results) else f"{len(few)} of {len(c.results)}"
    return [f"too few repetitions for a verdict: {which} of these benchmarks has fewer than "
            f"{MIN_REPETITIONS} on a side ({counts}), where no U test can reach alpha 0.05, so "
            f"their ratios may be noise. For a verdict, run both sides with "
            f"--benchmark_repetitions=5 (at least {MIN_REPETITIONS} per side, iteration rows "
            f"kept: not --benchmark_report_aggregates_only)."]


def unmatched(c: Comparison) -> list[tuple[str, list[str]]]:
    """The benchmarks left out of the table, by reason; empty groups are dropped."""
    groups = [("only in BASE", c.only_base), ("only in NEW", c.only_new),
              (f"no ok {c.metric} value", c.no_value),
              ("not compared (a side holds several of what the filters leave open)", c.ambiguous)]
    return [(label, names) for label, names in groups if names]


def hint_lines(c: Comparison) -> list[str]:
    if not c.hint:
        return []
    return [f"hint: the benchmarks only in BASE and only in NEW differ in their device, "
            f"variant or framework; compare them with {c.hint} (see --help)"]


def table_rows(c: Comparison) -> list[list[str]]:
    return [[r.benchmark, fmt_side(r.base), fmt_side(r.new), fmt_ratio(r), fmt_change(r),
             r.noise.text] for r in c.results]


HEADINGS = ["benchmark", "BASE", "NEW", "NEW/BASE", "change", "noise test"]


def header_lines(base, new) -> list[str]:
    """The two sides' context, a line per column with its marker, then what differs and the
    warnings: whether the ratios compare code, or machines, load and flags."""
    ctx = context_rows(base, new)
    w0 = max(len(x[0]) for x in ctx)
    w1 = max(len("BASE"), *(len(x[1]) for x in ctx))
    w2 = max(len("NEW"), *(len(x[2]) for x in ctx))
    out = [f"{'machine':<{w0}}  {'BASE':<{w1}}  NEW"]
    for col, b, n, mark in ctx:
        out.append(f"{col:<{w0}}  {b:<{w1}}  {n:<{w2}}  {mark}".rstrip())
    diff = differing(ctx)
    out.append("differs: " + (", ".join(diff) if diff else "nothing above but the timestamps"))
    return out + pooled_notes(base, new) + warnings(base, new)


def render_text(c: Comparison, base, new, alpha: float) -> str:
    out = [f"trainbench compare: {c.metric} ({direction_words(c)}), median over ok "
           f"repetitions; noise test at alpha {alpha:g}",
           f"BASE: {base.path}", f"NEW:  {new.path}", ""]
    out += header_lines(base, new) + [""]
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
    return "\n".join(out + hint_lines(c))


def md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(c: Comparison, base, new, alpha: float) -> str:
    out = [f"### trainbench compare: `{c.metric}` ({direction_words(c)})", "",
           f"Median over ok repetitions; noise test: Mann-Whitney U, two-sided, "
           f"alpha {alpha:g}.", "",
           "| machine | BASE | NEW | |", "| --- | --- | --- | --- |",
           f"| file | `{md_cell(base.path)}` | `{md_cell(new.path)}` | |"]
    ctx = context_rows(base, new)
    for col, b, n, mark in ctx:
        out.append(f"| {col} | {md_cell(b)} | {md_cell(n)} | {f'**{mark}**' if mark else ''} |")
    out.append("")
    diff = differing(ctx)
    out += ["differs: " + (", ".join(f"`{d}`" for d in diff) if diff else "nothing but the "
                           "timestamps"), ""]
    out += [f"_{md_cell(x)}_\n" for x in pooled_notes(base, new) + warnings(base, new)]
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
    out += [md_cell(line) for line in hint_lines(c)]
    return "\n".join(out).rstrip() + "\n"


# ---- main ----------------------------------------------------------------------------------

FILTERS_HELP = """compare two configurations within the CSVs (pooled): A is BASE, B is NEW. A filter
is terms joined by '/': a device (cpu, cpu:N, gpu:N, gpu:1/jobs:K, mpi:N), a precision (fp32,
tf32, fp16, bf16), framework:NAME, host:NAME, and the variant's flags (data_on_device,
cuda_graph, optimizer:adam, shared_device, ...); a row matches a filter only with exactly its
flags, so '' (or plain) is the plain variant. Rows are matched by kind, model, dataset, batch
and whatever neither filter names. Examples: --filters cpu gpu:1; --filters gpu:1 gpu:8;
--filters '' cuda_graph; --filters gpu:1 gpu:1/data_on_device/cuda_graph; --filters
framework:pytorch framework:trainbench/data_on_device"""


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                usage="%(prog)s BASE.csv NEW.csv [options]\n"
                                      "       %(prog)s CSV [CSV...] --filters A B [options]")
    p.add_argument("csv", nargs="+", metavar="CSV",
                   help="BASE.csv NEW.csv; with --filters, any number of CSVs")
    p.add_argument("--filters", nargs=2, metavar=("A", "B"), help=FILTERS_HELP)
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
    if args.filters is None and len(args.csv) != 2:
        p.error(f"give two CSVs (BASE.csv NEW.csv), or one or more with --filters A B "
                f"(got {len(args.csv)})")
    if args.fail_if_slower is not None and not args.fail_if_slower >= 0:
        p.error("--fail-if-slower takes a percentage >= 0")
    if not 0 < args.alpha < 1:
        p.error("--alpha must be between 0 and 1")
    return args


def filtered_sides(tables: list[tbcsv.Table], texts: list[str]):
    """BASE and NEW of --filters A B over the pooled rows: (base, new, key, ambiguous)."""
    pair = tbfilters.FilterPair(*(tbfilters.parse_filter(t) for t in texts))
    rows = tbcsv.all_rows(tables)
    paths = ", ".join(t.path for t in tables)
    base = side_of(f"{paths} --filters {pair.base.text!r}: {pair.base.describe()}", rows,
                   pair.base.matches)
    new = side_of(f"{paths} --filters {pair.new.text!r}: {pair.new.describe()}", rows,
                  pair.new.matches)
    for side, f in ((base, pair.base), (new, pair.new)):
        if not side.rows:
            raise tbcsv.InputError(
                f"--filters {f.text!r} matches no row of {paths} (devices there: "
                f"{side_text(rows, 'device')}; variants: {side_text(rows, 'variant')})")
    ambiguous = {**pair.ambiguous(base.rows, pair.base), **pair.ambiguous(new.rows, pair.new)}
    return base, new, pair.key, ambiguous


def no_match(c: Comparison, base, new, metric: str, filters) -> tbcsv.InputError:
    counts = (f"only in BASE: {len(c.only_base)}, only in NEW: {len(c.only_new)}, without a "
              f"value: {len(c.no_value)}")
    if c.ambiguous:
        counts += (f", not compared: {len(c.ambiguous)}, e.g. {c.ambiguous[0]}")
    if filters:
        return tbcsv.InputError(f"no benchmark has a {metric} value on both sides of --filters "
                                f"{filters[0]!r} {filters[1]!r} ({counts})")
    fix = (f"they hold different configurations: compare them with {c.hint} (the two files, "
           f"or one holding both)" if c.hint else
           "to compare device configurations or variants, give --filters A B (see --help)")
    return tbcsv.InputError(f"no benchmark of {base.path} has a {metric} value to match in "
                            f"{new.path} ({counts}); {fix}")


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        tables = tbcsv.read_tables(args.csv)
        check_metric(tables, args.metric)
        key, ambiguous = None, {}
        if args.filters:
            base, new, key, ambiguous = filtered_sides(tables, args.filters)
        else:
            base, new = (side_of(t.path, t.rows) for t in tables)
        lower = (tbcsv.lower_is_better(args.metric) if args.direction == "auto"
                 else args.direction == "lower")
        c = compare(base, new, args.metric, args.alpha, lower, key, ambiguous)
        if not c.results:
            raise no_match(c, base, new, args.metric, args.filters)
        render = render_markdown if args.format == "markdown" else render_text
        print(render(c, base, new, args.alpha))
        return slower_status(c, args.fail_if_slower)

    return tbcsv.run_main(run, PROG)


def slower_status(c: Comparison, pct: float | None) -> int:
    """1 when --fail-if-slower PCT is given and a benchmark is worse than that, else 0."""
    if pct is None:
        return 0
    slow = [r for r in c.results if (r.worse_pct or 0) > pct]
    if slow:
        names = ", ".join(f"{r.benchmark} ({fmt_change(r)})" for r in slow)
        print(f"{PROG}: {len(slow)} benchmark(s) worse than BASE by more than {pct:g}%: {names}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

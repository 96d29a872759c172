#!/usr/bin/env python3
"""Compares two trainbench CSVs (results/SCHEMA.md), or two configurations within CSVs.

    scripts/compare.py BASE.csv NEW.csv [--metric COLUMN] [--format text|markdown]
                       [--fail-if-slower PCT] [--alpha 0.05] [--correction bh|holm|none]
    scripts/compare.py CSV [CSV...] --filters A B [options]   # e.g. --filters cpu gpu:1

The files may be of different schema versions (1 to 7): columns are matched by name, older
rows read as version 7 writes them (tbcsv.upgrade). A row's
identity is its benchmark name, which ends with its variant (the flags that change what it
measures; tbcsv derives it from cuda_graph/data_on_device in rows before version 4), so a run
with --cuda_graph never matches a plain one. With two files, benchmarks are matched by name;
with --filters A B, side A is the rows of all CSVs that match filter A, side B those matching
B, matched by model, dataset, batch and what the filters leave free (tbfilters.py has the
syntax). For every benchmark on both sides it prints the median of the metric on each side,
the ratio NEW/BASE and the noise verdict, after a header that shows what differs between the
sides (machine, GPU, commit, flags, sgemm rate, load) and warns when the sgemm rates differ by
more than 15% or a side ran on a loaded machine (rows whose verdicts say `loaded`). Predicted rows (measurement=predicted) are
never compared.

The verdict: a two-sided Mann-Whitney U test (SciPy's, as Google Benchmark's compare.py uses)
over each benchmark's repetitions, its p adjusted across all the benchmarks tested
(--correction: Benjamini-Hochberg by default, which keeps false verdicts to a share alpha of the
verdicts; Holm, which keeps the chance of any false verdict below alpha; or none) and held to
alpha. "beyond noise" (adjusted p < alpha) is the only verdict: only there does the change say
"better" or "worse"; "within noise" says "~".

Where a side has too few repetitions for the test ever to go below alpha (all of one side above
all of the other gives p = 2 / C(n1 + n2, n1): 1 at 1 against 1, 0.1 at 3 against 3), the test
takes the windows of their timed steps instead, where both sides' rows have enough of them
(schema 7, window_samples_per_s: each repetition's timed steps in up to ten consecutive parts,
each part's mean samples/s; --metric samples_per_s or a step time): 10 against 10 for one
repetition a side, "n=10/10 windows". The windows of a row are parts of one run, so such a
verdict, "beyond noise within a run", says that the two runs differ by more than each varied
within itself, not that the code did. A shift of the windows' medians no larger than the wider
of the two sides' interquartile ranges of windows stays "within noise" even with p below alpha,
and says so ("p below alpha, but the shift lies inside the windows' spread"). A benchmark with
neither enough repetitions nor enough windows (rows before schema 7, rows of a step or two), or
with median aggregates only, is "too few repetitions": not tested, not counted, its change "~",
and the summary says how to get a verdict.

The geometric mean of all the ratios is printed as a summary, never as a verdict ("~"): it mixes
the ratios within noise and those untested with the rest, and no test was run on it. The
geometric mean of the benchmarks beyond noise follows on its own line, "better" or "worse" when
all of them moved that way and "mixed" when they did not.

Exit status: 0, or 1 when --fail-if-slower is given and a benchmark beyond noise is worse than
BASE by more than PCT percent (worse by more without a verdict: a warning on stderr), or 2 on
bad input, nothing to compare or no SciPy (one line on stderr). Needs SciPy (python3-scipy);
see docs/scripts.md.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The shared reader and the filters live next to this script.
import tbcsv  # noqa: E402
import tbfilters  # noqa: E402

PROG = "compare.py"


# ---- the noise verdict ---------------------------------------------------------------------

NO_SCIPY = "needs SciPy for its U test: apt-get install python3-scipy (or pip install scipy)"

BEYOND, WITHIN, TOO_FEW = "beyond noise", "within noise", "too few repetitions"

# --correction: how the p of the benchmarks' tests are adjusted before they are held to alpha.
CORRECTIONS = {
    "bh": "Benjamini-Hochberg correction (false discovery rate)",
    "holm": "Holm correction (family-wise)",
    "none": "no correction",
}
DEFAULT_CORRECTION = "bh"


def scipy_mannwhitneyu():
    """scipy.stats.mannwhitneyu, or an InputError (exit 2) naming the package to install."""
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:
        raise tbcsv.InputError(NO_SCIPY.replace("apt-get install python3-scipy (or pip install scipy)",
                                                tbcsv.with_module("scipy.stats",
                                                                  "apt-get install python3-scipy (or pip install scipy)"))
                               ) from None
    return mannwhitneyu


def mann_whitney(base: list[float], new: list[float]) -> tuple[float, float]:
    """(U of BASE, two-sided p) of SciPy's Mann-Whitney U test, called as Google Benchmark's
    compare.py calls it (method auto: exact for small samples without ties)."""
    result = scipy_mannwhitneyu()(base, new, alternative="two-sided")
    p = float(result.pvalue)
    # Every value the same on both sides: nothing to tell apart (some versions give nan).
    return float(result.statistic), 1.0 if math.isnan(p) else p


def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided p the exact test can give with these sample sizes (all of one
    sample above all of the other): 2 / C(n1 + n2, n1)."""
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def repetitions_for(alpha: float) -> int:
    """The fewest repetitions a side (the same on both) whose smallest p is below alpha."""
    n = 1
    while smallest_p(n, n) >= alpha:
        n += 1
    return n


def adjust(p_values: list[float], correction: str) -> list[float]:
    """Each test's p after the correction across all m tests, in the order given.

    holm: the k-th smallest p times (m - k + 1), never below the one before it; below alpha,
    the chance of any false verdict is at most alpha. bh (Benjamini-Hochberg): the k-th
    smallest p times m / k, never above the one after it; below alpha, false verdicts are on
    average at most a share alpha of the verdicts (for independent or positively related
    tests, as benchmarks of one machine are)."""
    m = len(p_values)
    if correction == "none":
        return list(p_values)
    order = sorted(range(m), key=p_values.__getitem__)
    out = [1.0] * m
    if correction == "holm":
        running = 0.0
        for k, i in enumerate(order):
            running = max(running, (m - k) * p_values[i])
            out[i] = min(1.0, running)
    else:
        running = 1.0
        for k in reversed(range(m)):
            running = min(running, m / (k + 1) * p_values[order[k]])
            out[order[k]] = running
    return out


@dataclass
class NoiseVerdict:
    """One benchmark's noise test: TOO_FEW where it cannot reach alpha (never tested), else
    BEYOND or WITHIN once decide() has held its adjusted p to alpha."""
    kind: str
    n1: int  # repetitions (or windows) of BASE and NEW; 0: a median aggregate only
    n2: int
    p: float | None = None  # the raw two-sided p
    unit: str = ""  # "" for repetitions; " windows" where the test took the rows' windows
    p_adjusted: float | None = None
    u_base: float | None = None  # U of BASE's repetitions: which side tends larger
    adjusted_shown: bool = True  # False with --correction none: the two p are one
    # Windows only: the medians' difference is inside the rows' own spread (the larger
    # interquartile range of their windows), so it stays within noise whatever its p.
    inside_spread: bool = False
    below_alpha: bool = False  # the adjusted p is below alpha (decide)
    alpha: float | None = None
    # TOO_FEW only: how many windows each side's rows had (too few, or none, to test instead)
    windows: tuple[int, int] = (0, 0)

    @property
    def beyond(self) -> bool:
        return self.kind == BEYOND

    @property
    def counted(self) -> bool:
        return self.kind != TOO_FEW

    @property
    def text(self) -> str:
        if self.kind == TOO_FEW:
            if 0 in (self.n1, self.n2):
                return f"{TOO_FEW} (median aggregate only)"
            if smallest_p(self.n1, self.n2) >= 1:
                return (f"{TOO_FEW} (n={self.n1}/{self.n2}: one repetition a side cannot be "
                        f"tested, {self.windows_text()})")
            return (f"{TOO_FEW} (n={self.n1}/{self.n2}: p cannot go below "
                    f"{smallest_p(self.n1, self.n2):.2g})")
        adjusted = f", adjusted {self.p_adjusted:.3g}" if self.adjusted_shown else ""
        within_run = " within a run" if self.unit and self.kind == BEYOND else ""
        spread = ""
        if self.inside_spread and self.below_alpha and self.kind == WITHIN:
            which = "adjusted p" if self.adjusted_shown else "p"
            spread = (f": {which} below alpha {self.alpha:g}, but the shift lies inside the "
                      f"windows' spread, so it is not called a change")
        return (f"{self.kind}{within_run} (U test p={self.p:.3g}{adjusted}, n={self.n1}/{self.n2}{self.unit}"
                f"{spread})")

    def windows_text(self) -> str:
        """Why the windows of the rows' timed steps were not tested instead."""
        w1, w2 = self.windows
        if not w1 and not w2:
            return "and the rows have no windows to test instead"
        if not w1 or not w2:
            return f"and {'BASE' if not w1 else 'NEW'}'s rows have no windows to test instead"
        return f"and their windows, n={w1}/{w2}, are too few as well"


def interquartile_range(values: list[float]) -> float:
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    return quartiles[2] - quartiles[0]


def noise_test(base: tbcsv.Sample, new: tbcsv.Sample, alpha: float) -> NoiseVerdict:
    """The U test of one benchmark, before the correction across benchmarks (decide): over the
    repetitions, or where they are too few on a side for the test to reach alpha, over the
    windows of their timed steps (schema 7), where both sides have enough of them."""
    n1, n2 = base.repetitions, new.repetitions
    if n1 == 0 or n2 == 0 or smallest_p(n1, n2) >= alpha:
        w1, w2 = len(base.windows), len(new.windows)
        if n1 and n2 and w1 and w2 and smallest_p(w1, w2) < alpha:
            # A row's windows are consecutive parts of one run: they share its machine's state,
            # so the verdict says the runs differ beyond the noise within a run.
            u, p = mann_whitney(base.windows, new.windows)
            # Windows of one run vary less than runs do: a shift smaller than a row's own spread
            # of windows is no difference between the runs worth a verdict.
            shift = abs(statistics.median(new.windows) - statistics.median(base.windows))
            spread = max(interquartile_range(base.windows), interquartile_range(new.windows))
            return NoiseVerdict(WITHIN, w1, w2, p=p, u_base=u, unit=" windows", inside_spread=shift <= spread)
        # 3 against 3 repetitions: even all of NEW above all of BASE gives p = 0.1, so the
        # test cannot tell that from chance at 0.05 (chance alone parts the two ranges in a
        # tenth of such comparisons). No test, no verdict.
        return NoiseVerdict(TOO_FEW, n1, n2, windows=(w1, w2))
    u, p = mann_whitney(base.values, new.values)
    return NoiseVerdict(WITHIN, n1, n2, p=p, u_base=u)


def decide(verdicts: list[NoiseVerdict], alpha: float, correction: str) -> None:
    """Adjusts the tested benchmarks' p across all of them and calls beyond noise those
    whose adjusted p is below alpha."""
    tested = [v for v in verdicts if v.counted]
    for v, p in zip(tested, adjust([v.p for v in tested], correction)):
        v.p_adjusted = p
        v.adjusted_shown = correction != "none"
        v.alpha, v.below_alpha = alpha, p < alpha
        v.kind = BEYOND if p < alpha and not v.inside_spread else WITHIN


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
    def direction(self) -> str | None:
        """'better' or 'worse' where the difference is beyond noise, else None: by the
        medians' change, or where the medians are equal by the side the U test found larger
        (its U of BASE against half its pairs: of repetitions, or of windows where it took them)."""
        if not self.noise.beyond:
            return None
        worse = self.worse_pct
        if not worse:
            base_larger = self.noise.u_base > self.noise.n1 * self.noise.n2 / 2
            worse = 1 if base_larger != self.lower_better else -1
        return "worse" if worse > 0 else "better"


def geomean(results: list[Result]) -> tuple[float, int] | None:
    """(geometric mean of the ratios NEW/BASE, how many) over the results with a ratio > 0."""
    logs = [math.log(r.ratio) for r in results if r.ratio and r.ratio > 0]
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else None


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
    # Where no --filters would: the unmatched configurations without a value, and why
    # ("NEW's gpu:1 rows were all skipped (...)").
    unusable: list[str] = field(default_factory=list)
    alpha: float = 0.05
    correction: str = DEFAULT_CORRECTION

    def geomean(self) -> tuple[float, int] | None:
        return geomean(self.results)

    @property
    def tests(self) -> int:
        """How many U tests the correction ran over: the benchmarks not TOO_FEW."""
        return sum(1 for r in self.results if r.noise.counted)


def shorten(text: str, width: int = 80) -> str:
    """The text, or where longer than width its words that fit, ending with '...'."""
    if len(text) <= width:
        return text
    room = width - len("...")
    head = text[:room]
    if not text[room].isspace() and " " in head:  # a word cut short: leave it out
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:(") + "..."


def failure_messages(rows) -> str:
    """Why rows have no ok value: the messages of those failed or skipped, each once."""
    return "; ".join(tbcsv.distinct([r for r in rows if not tbcsv.is_ok(r)], "message"))


def failure_notes(rows, name: str, key=row_key) -> str:
    """Why a benchmark has no ok value: its failed/skipped messages, shortened."""
    return shorten(failure_messages([r for r in rows if key(r) == name]))


def no_value_line(name: str, base, new, b, n, key) -> str:
    sides = [(side, rows) for side, rows, sample in
             (("BASE", base.rows, b), ("NEW", new.rows, n)) if sample is None]
    whys = [failure_notes(rows, name, key) for _, rows in sides]
    if len(sides) == 2 and whys[0] == whys[1]:
        sides, whys = [("BASE or NEW", None)], whys[:1]
    notes = [f"none in {side}" + (f": {why}" if why else "") for (side, _), why in zip(sides, whys)]
    return f"{name} ({'; '.join(notes)})"


def compare(base, new, metric: str, alpha: float, lower_better: bool, key=None,
            ambiguous: dict | None = None, correction: str = DEFAULT_CORRECTION) -> Comparison:
    """Compares two sides (Tables or Sides) benchmark by benchmark: key(row) names what is
    matched (row_key by default, so a PyTorch file matches a trainbench file by name, as
    compare_pytorch.sh compares them; framework_key where a side mixes frameworks, so that one
    side never pools two frameworks' rows); the keys in ambiguous are listed with their reason
    instead of compared. The noise verdicts are corrected across all the results."""
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
    decide([r.noise for r in results], alpha, correction)
    c = Comparison(metric, lower_better, results, only_base, only_new, no_value,
                   [f"{k} ({why})" for k, why in ambiguous.items()], alpha=alpha,
                   correction=correction)
    if only_base and only_new and key in (row_key, framework_key):
        # Only rows with a value: --filters over rows that were all skipped cannot succeed.
        c.hint = tbfilters.suggest([r for r in base_rows if key(r) in only_base and has_value(r, metric)],
                                   [r for r in new_rows if key(r) in only_new and has_value(r, metric)])
        if c.hint is None:
            c.unusable = (unusable_lines("BASE", [r for r in base_rows if key(r) in only_base],
                                         metric)
                          + unusable_lines("NEW", [r for r in new_rows if key(r) in only_new],
                                           metric))
    return c


def has_value(row, metric: str) -> bool:
    """An ok row with a number in the metric's column: what a comparison can use."""
    return tbcsv.is_ok(row) and tbcsv.number(row, metric) is not None


def unusable_lines(side: str, rows: list, metric: str) -> list[str]:
    """Per configuration of the rows (device, variant, framework) none of which has an ok
    value of the metric: what they were and why, from their message column."""
    by_config: dict = {}
    for r in rows:
        by_config.setdefault(tbfilters.configuration(r), []).append(r)
    out = []
    for config, rs in by_config.items():
        if any(has_value(r, metric) for r in rs):
            continue
        what = [s for s in tbcsv.distinct(rs, "status") if s != "ok"]
        if any(tbcsv.is_ok(r) for r in rs):
            what.append(f"without a {metric} value")
        why = failure_messages(rs)
        out.append(f"{side}'s {config} rows were all {' or '.join(what) or 'empty'}"
                   + (f" ({shorten(why, 160)})" if why else ""))
    return out


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
    version = tbcsv.version_adding(metric)
    versions = tbcsv.distinct(table.rows, "schema_version")
    if version is None or not versions or not all(v < version for v in versions):
        return ""
    return (f": schema_version {version} added it and this file is version "
            f"{', '.join(versions)}; give files of version {version} or later")


# ---- formatting ----------------------------------------------------------------------------

def fmt_value(v: float) -> str:
    """Four significant digits, thousands separated so throughputs stay readable."""
    if 1000 <= abs(v) < 1e15:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def fmt_side(s: tbcsv.Sample) -> str:
    return fmt_value(s.center)


def fmt_pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def fmt_change(r: Result) -> str:
    """The signed change of the medians, then 'better' or 'worse' where the difference is
    beyond noise and '~' (no verdict) where it is within noise or untested."""
    return f"{fmt_pct(r.ratio)} {r.direction or '~'}"


def fmt_ratio(r: Result) -> str:
    return "n/a" if r.ratio is None else f"{r.ratio:.3f}"


# Identity columns the header shows per side: what ran (the flags), beside the machine.
IDENTITY_COLUMNS = ("device", "precision", "variant", "optimizer", "framework")
# sgemm_gflops of the two sides more than this apart: the CPUs ran at different rates.
SGEMM_TOLERANCE = 0.15


def side_text(rows, column: str) -> str:
    """A side's values of a header column: distinct values, a range or a median."""
    if column == "timestamp":
        return tbcsv.timestamp_range(rows)
    if column == "variant":
        return ", ".join(dict.fromkeys((r.get("variant") or "plain") for r in rows)) or "-"
    if column in ("device", "precision"):  # what ran: a skipped configuration did not
        return ", ".join(dict.fromkeys(v for r in rows if r.get("status") != "skipped"
                                       and (v := tbcsv.field_of(r, column)))) or "-"
    if column == "framework":
        return ", ".join(dict.fromkeys((r.get("framework") or "trainbench") for r in rows))
    numbers = sorted(tbcsv.context_numbers(rows, column))
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
                       f"with load_avg_1m above the threads their run had used + "
                       f"{tbcsv.LOAD_SLACK:g} (their verdict `loaded`; up to "
                       f"{worst['load_avg_1m']} on {worst.get('cores') or '?'} cores): their "
                       f"timings share the CPU with other work; rerun on an idle machine")
        if getattr(side, "predicted", 0):
            out.append(f"note: {side.predicted} predicted rows of {name} left out "
                       f"(measurement=predicted: compare.py compares measurements only)")
    return out


WALL_CLOCK_NOTE = ("note: samples_per_s is the wall clock (host gaps included); --metric "
                   "device_samples_per_s compares the GPU rows' device clock (CUDA events)")


def clock_notes(base, new, metric: str) -> list[str]:
    """Which clock samples_per_s is where a side holds GPU rows (schema 5: the wall clock on
    every row, the device clock in device_samples_per_s)."""
    gpu = any(tbcsv.on_gpu(r) for side in (base, new) for r in side.rows)
    return [WALL_CLOCK_NOTE] if metric == "samples_per_s" and gpu else []


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


def verdict_words(c: Comparison) -> str:
    """How the verdicts were reached: the correction, over how many tests, at what alpha."""
    return (f"{CORRECTIONS[c.correction]} over {c.tests} test{'s' * (c.tests != 1)} at alpha "
            f"{c.alpha:g}")


def geomean_lines(c: Comparison) -> list[str]:
    """The geometric mean of all the ratios, '~': a summary that no test was run on, mixing
    ratios within noise and untested with the rest; then that of the benchmarks beyond noise,
    'better' or 'worse' where all of them moved that way, 'mixed' where they did not."""
    g = c.geomean()
    if not g:
        return []
    value, count = g
    head = f"geometric mean NEW/BASE over {count} benchmark{'s' * (count != 1)}"
    beyond = [r for r in c.results if r.noise.beyond]
    directions = [r.direction for r in beyond]
    word = (directions[0] if len(set(directions)) == 1 else
            f"mixed: {directions.count('better')} better, {directions.count('worse')} worse")
    if len(beyond) == len(c.results):
        return [f"{head}, all beyond noise: {value:.3f} ({fmt_pct(value)} {word})"]
    if not beyond:
        return [f"{head}: {value:.3f} ({fmt_pct(value)} ~, no verdict: no benchmark is beyond "
                f"noise)"]
    lines = [f"{head}: {value:.3f} ({fmt_pct(value)} ~, not a verdict: it includes the ratios "
             f"within noise or untested)"]
    g = geomean(beyond)
    if g:
        value, count = g
        lines.append(f"geometric mean NEW/BASE over the {count} benchmark{'s' * (count != 1)} "
                     f"beyond noise: {value:.3f} ({fmt_pct(value)} {word})")
    return lines


def summary_lines(c: Comparison) -> list[str]:
    beyond = [r for r in c.results if r.noise.beyond]
    worse = sum(1 for r in beyond if r.direction == "worse")
    few = len(c.results) - c.tests
    counts = (f"beyond noise: {len(beyond) - worse} better, {worse} worse; within noise: "
              f"{c.tests - len(beyond)}; {TOO_FEW} (not counted): {few}; {verdict_words(c)}")
    return geomean_lines(c) + [counts] + window_note(c) + repetition_advice(c) + correction_note(c)


def window_note(c: Comparison) -> list[str]:
    """What a verdict from windows says: that the two runs differ, not why."""
    windows = [r for r in c.results if r.noise.counted and r.noise.unit]
    if not windows:
        return []
    return [f"{len(windows)} verdict(s) from windows (too few repetitions a side, each row's timed "
            f"steps in tenths): they say whether the two runs differ by more than each varied "
            f"within itself, which two runs of the same code on a busy machine can; both sides "
            f"with --benchmark_repetitions=5 ask whether the code did."]


def repetition_advice(c: Comparison) -> list[str]:
    """How to get a verdict where the repetitions are too few for the U test to reach alpha."""
    few = [r for r in c.results if not r.noise.counted]
    if not few:
        return []
    need = repetitions_for(c.alpha)
    counts = ", ".join(dict.fromkeys(
        "median aggregate only" if 0 in (r.noise.n1, r.noise.n2)
        else f"n={r.noise.n1}/{r.noise.n2}" for r in few))
    which = "every one" if len(few) == len(c.results) else f"{len(few)} of {len(c.results)}"
    return [f"too few repetitions for a verdict: {which} of these benchmarks has fewer than "
            f"{need} on a side ({counts}), where no U test can reach alpha {c.alpha:g}: not "
            f"counted, their ratios may be noise. For a verdict, run both sides with "
            f"--benchmark_repetitions={max(need, 5)} (at least {need} per side, iteration rows "
            f"kept: not --benchmark_report_aggregates_only)."]


def correction_note(c: Comparison) -> list[str]:
    """Where the correction puts a verdict out of reach of a difference in one benchmark
    alone: over m tests the smallest p must be below alpha / m (Holm's first step, and
    Benjamini-Hochberg's with a single difference), below what few repetitions can give."""
    m = c.tests
    if c.correction == "none" or m < 2:
        return []
    bar = c.alpha / m
    floors = dict.fromkeys(f"n={r.noise.n1}/{r.noise.n2}: {smallest_p(r.noise.n1, r.noise.n2):.2g}"
                           for r in c.results if r.noise.counted
                           and smallest_p(r.noise.n1, r.noise.n2) >= bar)
    if not floors:
        return []
    return [f"note: over {m} tests a benchmark is beyond noise on its own only with p < "
            f"{bar:.2g} (alpha / {m}), and the U test's p cannot go below that at "
            f"{', '.join(floors)} (all of one side above the other); for such a verdict, run "
            f"both sides with --benchmark_repetitions={repetitions_for(bar)}."]


def unmatched(c: Comparison) -> list[tuple[str, list[str]]]:
    """The benchmarks left out of the table, by reason; empty groups are dropped."""
    groups = [("only in BASE", c.only_base), ("only in NEW", c.only_new),
              (f"no ok {c.metric} value", c.no_value),
              ("not compared (a side holds several of what the filters leave open)", c.ambiguous)]
    return [(label, names) for label, names in groups if names]


def hint_lines(c: Comparison) -> list[str]:
    if c.unusable:
        return [f"note: {'; '.join(c.unusable)}: nothing of them to compare"]
    if not c.hint:
        return []
    return [f"hint: the benchmarks only in BASE and only in NEW differ in their device, "
            f"variant or framework; compare them with {c.hint} (see --help)"]


def table_rows(c: Comparison) -> list[list[str]]:
    return [[r.benchmark, fmt_side(r.base), fmt_side(r.new), fmt_ratio(r), fmt_change(r),
             r.noise.text] for r in c.results]


HEADINGS = ["benchmark", "BASE", "NEW", "NEW/BASE", "change", "noise test"]


def notes(base, new, metric: str) -> list[str]:
    return clock_notes(base, new, metric) + pooled_notes(base, new) + warnings(base, new)


def header_lines(base, new, metric: str) -> list[str]:
    """The two sides' context, a line per column with its marker, then what differs, the notes
    and the warnings: whether the ratios compare code, or machines, load and flags."""
    ctx = context_rows(base, new)
    w0 = max(len(x[0]) for x in ctx)
    w1 = max(len("BASE"), *(len(x[1]) for x in ctx))
    w2 = max(len("NEW"), *(len(x[2]) for x in ctx))
    out = [f"{'machine':<{w0}}  {'BASE':<{w1}}  NEW"]
    for col, b, n, mark in ctx:
        out.append(f"{col:<{w0}}  {b:<{w1}}  {n:<{w2}}  {mark}".rstrip())
    diff = differing(ctx)
    out.append("differs: " + (", ".join(diff) if diff else "nothing above but the timestamps"))
    return out + notes(base, new, metric)


def render_text(c: Comparison, base, new) -> str:
    out = [f"trainbench compare: {c.metric} ({direction_words(c)}), median over ok "
           f"repetitions; noise test: two-sided Mann-Whitney U, {verdict_words(c)}",
           f"BASE: {base.path}", f"NEW:  {new.path}", ""]
    out += header_lines(base, new, c.metric) + [""]
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


def render_markdown(c: Comparison, base, new) -> str:
    out = [f"### trainbench compare: `{c.metric}` ({direction_words(c)})", "",
           f"Median over ok repetitions; noise test: Mann-Whitney U, two-sided, "
           f"{verdict_words(c)}.", "",
           "| machine | BASE | NEW | |", "| --- | --- | --- | --- |",
           f"| file | `{md_cell(base.path)}` | `{md_cell(new.path)}` | |"]
    ctx = context_rows(base, new)
    for col, b, n, mark in ctx:
        out.append(f"| {col} | {md_cell(b)} | {md_cell(n)} | {f'**{mark}**' if mark else ''} |")
    out.append("")
    diff = differing(ctx)
    out += ["differs: " + (", ".join(f"`{d}`" for d in diff) if diff else "nothing but the "
                           "timestamps"), ""]
    out += [f"_{md_cell(x)}_\n" for x in notes(base, new, c.metric)]
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


VERDICT_HELP = """the verdict: a two-sided Mann-Whitney U test (SciPy) over each benchmark's
repetitions, its p adjusted across the benchmarks tested (--correction) and held to --alpha.
Only 'beyond noise' is a verdict, and only there does the change say better or worse ('~'
elsewhere). Where the repetitions are too few for the test ever to reach alpha (1 against 1;
3 against 3 at 0.05: complete separation gives p = 0.1), it takes the windows of the rows'
timed steps instead where both sides have enough (schema 7, window_samples_per_s: up to ten
consecutive parts of each repetition, each part's mean samples/s; 'n=10/10 windows' for one
repetition a side): 'beyond noise within a run' says the two runs differ by more than each
varied within itself, not that the code did, and a shift of the windows' medians no larger than
the wider of the two sides' interquartile ranges of windows stays 'within noise' even with p
below alpha (the line says so). Neither enough repetitions nor windows (rows before schema 7,
rows of a step or two), or median aggregates only, is 'too few repetitions': not tested and not
counted. The geometric mean of all ratios is a summary ('~'); that of the benchmarks beyond
noise is on its own line."""


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                epilog=VERDICT_HELP,
                                usage="%(prog)s BASE.csv NEW.csv [options]\n"
                                      "       %(prog)s CSV [CSV...] --filters A B [options]")
    p.add_argument("csv", nargs="+", metavar="CSV",
                   help="BASE.csv NEW.csv; with --filters, any number of CSVs")
    p.add_argument("--filters", nargs=2, metavar=("A", "B"), help=FILTERS_HELP)
    p.add_argument("--metric", default="samples_per_s",
                   help="numeric column to compare (default samples_per_s)")
    p.add_argument("--format", choices=("text", "markdown"), default="text")
    p.add_argument("--fail-if-slower", type=float, metavar="PCT",
                   help="exit 1 when a benchmark beyond noise is worse than BASE by more than "
                        "PCT percent; one worse by more without a verdict is a warning")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    p.add_argument("--correction", choices=tuple(CORRECTIONS), default=DEFAULT_CORRECTION,
                   help="across the benchmarks tested: bh (Benjamini-Hochberg, the default: "
                        "false verdicts are at most a share alpha of the verdicts), holm (the "
                        "chance of any false verdict is at most alpha) or none")
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
           f"{'; '.join(c.unusable)}: nothing of them to compare" if c.unusable else
           "to compare device configurations or variants, give --filters A B (see --help)")
    return tbcsv.InputError(f"no benchmark of {base.path} has a {metric} value to match in "
                            f"{new.path} ({counts}); {fix}")


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        scipy_mannwhitneyu()  # before reading anything: no SciPy, no verdicts
        tables = tbcsv.read_tables(args.csv)
        check_metric(tables, args.metric)
        key, ambiguous = None, {}
        if args.filters:
            base, new, key, ambiguous = filtered_sides(tables, args.filters)
        else:
            base, new = (side_of(t.path, t.rows) for t in tables)
        lower = (tbcsv.lower_is_better(args.metric) if args.direction == "auto"
                 else args.direction == "lower")
        c = compare(base, new, args.metric, args.alpha, lower, key, ambiguous, args.correction)
        if not c.results:
            raise no_match(c, base, new, args.metric, args.filters)
        render = render_markdown if args.format == "markdown" else render_text
        print(render(c, base, new))
        return slower_status(c, args.fail_if_slower)

    return tbcsv.run_main(run, PROG)


def slower_status(c: Comparison, pct: float | None) -> int:
    """1 when --fail-if-slower PCT is given and a benchmark beyond noise is worse than that,
    else 0; those worse by more without a verdict are warned about, not counted."""
    if pct is None:
        return 0
    slow = [r for r in c.results if (r.worse_pct or 0) > pct]
    for r in slow:
        if not r.noise.beyond:
            why = WITHIN if r.noise.counted else TOO_FEW
            print(f"{PROG}: warning: {r.benchmark} worse by {r.worse_pct:.1f}% but {why}: "
                  f"not counted", file=sys.stderr)
    failed = [r for r in slow if r.noise.beyond]
    if failed:
        names = ", ".join(f"{r.benchmark} ({fmt_change(r)})" for r in failed)
        print(f"{PROG}: {len(failed)} benchmark(s) beyond noise and worse than BASE by more than "
              f"{pct:g}%: {names}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tests of scripts/compare.py: ratios and geometric mean on a hand-made pair of CSVs, that the
U test is SciPy's called as Google Benchmark calls it, the noise verdicts, --fail-if-slower in
both metric directions, Markdown output, schema_version 2 against 3 (and --metric
energy_j_per_sample), and every kind of bad input. test_compare_verdicts.py holds the verdicts
on seeded samples (the correction, too few repetitions)."""
import csv
import math
import random
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import BAD_INPUTS, ROOT, assert_one_line_error, bad_path, data_file, rewrite_csv, run_script

BASE, NEW = data_file("compare_base.csv"), data_file("compare_new.csv")
MLP = "train/mlp/mnist/cpu/fp32/bs:100"           # 100 -> 200, 5 repetitions each side
LENET = "train/lenet5/cifar10/cpu/fp32/bs:100"    # 50 -> 50, identical repetitions
LSTM = "train/lstm/sine/cpu/fp32/bs:20"           # 10 -> 40, 3 repetitions each side
MLP1 = "train/mlp/mnist/cpu:1/fp32/bs:100"        # 30 -> 15, median aggregates only


def table_line(stdout: str, benchmark: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith(benchmark + " ")]
    assert len(lines) == 1, (benchmark, stdout)
    return lines[0]


def ratio_column(line: str) -> float:
    # Columns: benchmark, BASE, NEW, NEW/BASE, change...; separated by two or more spaces.
    return float(re.split(r"\s{2,}", line.strip())[3])


# ---- the hand-made example ---------------------------------------------------------------

def test_ratios_and_geometric_mean_match_the_hand_made_example():
    r = run_script("compare.py", BASE, NEW)
    assert r.returncode == 0, r.stderr
    expected = {MLP: 2.0, LENET: 1.0, LSTM: 4.0, MLP1: 0.5}
    for benchmark, ratio in expected.items():
        assert ratio_column(table_line(r.stdout, benchmark)) == pytest.approx(ratio, abs=1e-3)
    # (2 x 1 x 4 x 0.5) ** (1/4) = sqrt(2): a summary of ratios, two of them untested, so no
    # verdict; the one benchmark beyond noise has its own line.
    assert ("geometric mean NEW/BASE over 4 benchmarks: 1.414 (+41.4% ~, not a verdict"
            in r.stdout)
    assert ("geometric mean NEW/BASE over the 1 benchmark beyond noise: 2.000 (+100.0% better)"
            in r.stdout)


def test_comparison_values_are_the_medians(compare_mod, tbcsv_mod):
    c = compare_mod.compare(tbcsv_mod.read_table(BASE), tbcsv_mod.read_table(NEW),
                            "samples_per_s", 0.05, lower_better=False)
    by_name = {x.benchmark: x for x in c.results}
    assert (by_name[MLP].base.center, by_name[MLP].new.center) == (100, 200)
    assert (by_name[MLP1].base.center, by_name[MLP1].new.center) == (30, 15)
    assert by_name[MLP1].base.source == "median aggregate"
    assert by_name[MLP1].worse_pct == pytest.approx(50)
    value, count = c.geomean()
    assert count == 4 and value == pytest.approx(math.sqrt(2), rel=1e-9)



def test_a_ratio_over_a_median_of_zero_is_1_where_both_are_zero_else_none(compare_mod, tbcsv_mod):
    """A count such as skipped_steps is 0 on both sides: no change; from 0 to 5 has no ratio."""
    def ratio(base, new):
        noise = compare_mod.NoiseVerdict(compare_mod.TOO_FEW, 1, 1)
        return compare_mod.Result(MLP, tbcsv_mod.Sample([base], "iterations"),
                                  tbcsv_mod.Sample([new], "iterations"), noise, True).ratio
    assert (ratio(0.0, 0.0), ratio(0.0, 5.0), ratio(4.0, 5.0)) == (1.0, None, 1.25)



def test_the_geometric_mean_is_over_the_ratios_there_are(compare_mod, tbcsv_mod):
    """A benchmark without a ratio (from 0 to 5) is left out of the mean and of its count."""
    noise = compare_mod.NoiseVerdict(compare_mod.TOO_FEW, 1, 1)
    results = [compare_mod.Result(MLP, tbcsv_mod.Sample([base], "iterations"),
                                  tbcsv_mod.Sample([new], "iterations"), noise, False)
               for base, new in ((1.0, 2.0), (1.0, 8.0), (0.0, 5.0))]
    value, count = compare_mod.geomean(results)
    assert value == pytest.approx(4.0) and count == 2


def comparison_of(compare_mod, tbcsv_mod, *ratios_and_kinds):
    """A Comparison of one result per (ratio NEW/BASE, verdict kind), higher better."""
    results = [compare_mod.Result(f"b{i}", tbcsv_mod.Sample([1.0], "iterations"),
                                  tbcsv_mod.Sample([ratio], "iterations"),
                                  compare_mod.NoiseVerdict(kind, 5, 5, p=0.001, u_base=0), False)
               for i, (ratio, kind) in enumerate(ratios_and_kinds)]
    return compare_mod.Comparison("samples_per_s", False, results, [], [], [])


def test_the_geometric_mean_of_benchmarks_beyond_noise_that_moved_both_ways_is_mixed(compare_mod,
                                                                                    tbcsv_mod):
    c = comparison_of(compare_mod, tbcsv_mod, (2.0, compare_mod.BEYOND), (0.5, compare_mod.BEYOND))
    assert compare_mod.geomean_lines(c) == [
        "geometric mean NEW/BASE over 2 benchmarks, all beyond noise: 1.000 (+0.0% mixed: 1 "
        "better, 1 worse)"]


def test_a_benchmark_within_noise_makes_the_geometric_mean_no_verdict(compare_mod, tbcsv_mod):
    """Two of three beyond noise: the mean of all three is a summary, the two have their own."""
    c = comparison_of(compare_mod, tbcsv_mod, (2.0, compare_mod.BEYOND), (4.0, compare_mod.BEYOND),
                      (1.0, compare_mod.WITHIN))
    assert compare_mod.geomean_lines(c) == [
        "geometric mean NEW/BASE over 3 benchmarks: 2.000 (+100.0% ~, not a verdict: it includes "
        "the ratios within noise or untested)",
        "geometric mean NEW/BASE over the 2 benchmarks beyond noise: 2.828 (+182.8% better)"]

def test_a_sides_rows_of_several_frameworks_are_told_apart_by_all_but_trainbenchs(compare_mod):
    """framework_key: a PyTorch row's name says its framework; a trainbench row's, written or
    left empty, is its benchmark as row_key has it, so it still matches the other side's."""
    row = {"benchmark": MLP, "epoch": ""}
    assert compare_mod.framework_key({**row, "framework": "trainbench"}) == MLP
    assert compare_mod.framework_key({**row, "framework": ""}) == MLP
    assert compare_mod.framework_key({**row, "framework": "pytorch"}) == f"{MLP} [pytorch]"

def test_unmatched_benchmarks_are_listed_and_the_rest_compared():
    r = run_script("compare.py", BASE, NEW)
    assert r.returncode == 0
    out = r.stdout
    assert "only in BASE (1):\n  train/lenet5/cifar10/cpu:1/fp32/bs:100" in out
    assert "only in NEW (1):\n  train/lstm/sine/cpu:1/fp32/bs:20" in out
    assert ("train/resnet152/cifar10/cpu/fp32/bs:128 (none in NEW: loss is not finite at step 3)"
            in out)


def test_header_shows_how_the_machines_differ():
    r = run_script("compare.py", BASE, NEW)
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.strip()}
    assert lines["git_commit"].endswith("differs") and "1111111" in lines["git_commit"]
    assert lines["compiler"].endswith("differs") and "gcc 13.1.0" in lines["compiler"]
    for same in ("host", "cpu_model", "cores", "os", "onednn", "benchmark_lib"):
        assert not lines[same].endswith("differs"), lines[same]



def sgemm_side(compare_mod, *rates):
    return compare_mod.Side("x.csv", [{"sgemm_gflops": str(v)} for v in rates])


def test_a_sides_sgemm_rate_is_the_median_of_its_rows(compare_mod):
    """One slow sgemm probe among three rows moves neither the header's rate nor the gap the
    15% warning weighs."""
    base, new = sgemm_side(compare_mod, 100, 200, 300), sgemm_side(compare_mod, 200)
    assert compare_mod.side_text(base.rows, "sgemm_gflops") == "200.0 GFLOP/s"
    assert compare_mod.sgemm_gap(base, new) == (200, 200, 0)



@pytest.mark.parametrize("base, new, mark", [(100, 130, "differs by 30%"),
                                             (130, 100, "differs by 30%"), (100, 110, "")])
def test_sgemm_rates_more_than_15_percent_apart_either_way_are_marked_and_warned(compare_mod,
                                                                                 base, new, mark):
    sides = sgemm_side(compare_mod, base), sgemm_side(compare_mod, new)
    assert compare_mod.marker("sgemm_gflops", "", "", *sides) == mark
    warned = [w for w in compare_mod.warnings(*sides) if w.startswith("warning: sgemm_gflops")]
    assert len(warned) == bool(mark)


def test_each_loaded_side_is_marked_and_warned_naming_its_highest_load(compare_mod):
    """Both sides of one machine, two of three rows loaded: each side says so once, with the
    highest load among them; one host is no pooling, no predicted row left out no note."""
    rows = [{"verdicts": "loaded", "load_avg_1m": "3.5", "cores": "2", "host": "vm"},
            {"verdicts": "loaded", "load_avg_1m": "6.25", "cores": "2", "host": "vm"},
            {"verdicts": "", "load_avg_1m": "0.5", "cores": "2", "host": "vm"}]
    base, new = compare_mod.Side("base.csv", rows), compare_mod.Side("new.csv", rows)
    assert compare_mod.marker("load_avg_1m", "", "", base, new) == "BASE and NEW loaded"
    assert compare_mod.warnings(base, new) == [
        f"warning: {side} was loaded: 2 of 3 rows started with load_avg_1m above the threads "
        f"their run had used + 1 (their verdict `loaded`; up to 6.25 on 2 cores): their timings "
        f"share the CPU with other work; rerun on an idle machine" for side in ("BASE", "NEW")]
    assert compare_mod.pooled_notes(base, new) == []

def test_figures_from_1000_have_thousands_separators(compare_mod):
    assert [compare_mod.fmt_value(v) for v in (999.5, 1000, 12345.6)] == \
        ["999.5", "1,000", "12,346"]

def test_gpu_context_columns_appear_in_the_header():
    gpu = data_file("gpu_epochs.csv")
    r = run_script("compare.py", gpu, gpu)
    assert r.returncode == 0, r.stderr
    for column in ("gpu_model", "gpu_driver", "cuda"):
        assert re.search(rf"^{column}\s", r.stdout, re.M), column
    assert "NVIDIA H100 80GB HBM3" in r.stdout


def test_per_epoch_rows_are_matched_by_epoch():
    gpu = data_file("gpu_epochs.csv")
    r = run_script("compare.py", gpu, gpu, "--metric", "val_acc")
    assert r.returncode == 0, r.stderr
    assert "epochs/lenet5/cifar10/gpu:2/fp32/bs:100 epoch 8 " in r.stdout
    assert "over 24 benchmarks: 1.000" in r.stdout  # 3 devices x 8 epochs


# ---- the noise test ------------------------------------------------------------------------

def test_noise_verdicts_depend_on_the_repetitions():
    """Two U tests (mlp and lenet5, 5 repetitions a side), Benjamini-Hochberg over both: mlp's
    p of 0.00794 doubles. lstm's 3 against 3 (ranges apart) and the aggregates-only mlp cpu:1
    are too few repetitions: no test, no better or worse, not counted."""
    r = run_script("compare.py", BASE, NEW)
    assert "+100.0% better  beyond noise (U test p=0.00794, adjusted 0.0159, n=5/5)" in \
        table_line(r.stdout, MLP)
    assert "+0.0% ~  within noise (U test p=1, adjusted 1, n=5/5)" in table_line(r.stdout, LENET)
    assert "+300.0% ~  too few repetitions (n=3/3: p cannot go below 0.1)" in \
        table_line(r.stdout, LSTM)
    assert "-50.0% ~  too few repetitions (median aggregate only)" in table_line(r.stdout, MLP1)
    assert ("beyond noise: 1 better, 0 worse; within noise: 1; too few repetitions (not "
            "counted): 2; Benjamini-Hochberg correction (false discovery rate) over 2 tests at "
            "alpha 0.05") in r.stdout


def test_the_u_test_is_scipys_two_sided_test(compare_mod):
    """compare.py's p is SciPy's mannwhitneyu, two-sided, with its default method (exact for
    small samples without ties, the normal approximation otherwise), as Google Benchmark's
    compare.py calls it; every value equal on both sides is p = 1, never nan."""
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(11)
    for n1, n2, tie in ((4, 4, False), (5, 7, False), (8, 8, False), (12, 9, True), (30, 30, True)):
        a = [round(rng.gauss(0, 1), 1 if tie else 6) for _ in range(n1)]
        b = [round(rng.gauss(0.8, 1), 1 if tie else 6) for _ in range(n2)]
        want = stats.mannwhitneyu(a, b, alternative="two-sided")
        assert compare_mod.mann_whitney(a, b) == (pytest.approx(want.statistic),
                                                  pytest.approx(want.pvalue, rel=1e-12))
    # All of one side below the other: the exact test's most extreme ordering, both ways.
    assert compare_mod.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == \
        (0, pytest.approx(2 / math.comb(10, 5)))
    assert compare_mod.mann_whitney([6, 7, 8, 9, 10], [1, 2, 3, 4, 5])[1] == \
        pytest.approx(2 / math.comb(10, 5))
    assert compare_mod.mann_whitney([5.0] * 6, [5.0] * 6)[1] == 1.0


def test_underpowered_sizes_are_those_where_significance_is_unreachable(compare_mod):
    assert compare_mod.smallest_p(3, 3) > 0.05       # 0.1
    assert compare_mod.smallest_p(3, 4) > 0.05       # 0.057
    assert compare_mod.smallest_p(4, 4) < 0.05       # 0.029
    assert compare_mod.smallest_p(3, 5) < 0.05       # 0.036



def test_three_repetitions_a_side_are_too_few_at_alpha_0_1_and_four_are_asked_for(compare_mod,
                                                                                 tbcsv_mod):
    """3 against 3 gives p = 0.1 at best, which is not below an alpha of 0.1: no test, and the
    advice asks for 4 a side."""
    assert compare_mod.smallest_p(3, 3) == 0.1
    assert compare_mod.repetitions_for(0.1) == 4
    verdict = compare_mod.noise_test(tbcsv_mod.Sample([1.0, 2.0, 3.0], "iterations"),
                                     tbcsv_mod.Sample([4.0, 5.0, 6.0], "iterations"), 0.1)
    assert verdict.kind == compare_mod.TOO_FEW


def test_repetitions_against_a_median_aggregate_are_too_few_on_either_side(compare_mod, tbcsv_mod):
    repetitions = tbcsv_mod.Sample([1.0, 2.0, 3.0, 4.0, 5.0], "iterations")
    aggregate = tbcsv_mod.Sample([3.0], "median aggregate")
    for base, new in ((repetitions, aggregate), (aggregate, repetitions)):
        assert compare_mod.noise_test(base, new, 0.05).text == \
            "too few repetitions (median aggregate only)"


def test_a_u_test_whose_p_is_nan_counts_as_no_difference(compare_mod, monkeypatch):
    """Some SciPy versions give nan where every value on both sides is the same."""
    def nan_test(base, new, alternative):
        return SimpleNamespace(statistic=12.5, pvalue=math.nan)
    monkeypatch.setattr(compare_mod, "scipy_mannwhitneyu", lambda: nan_test)
    assert compare_mod.mann_whitney([5.0] * 5, [5.0] * 5) == (12.5, 1.0)

# ---- --fail-if-slower and metric direction ------------------------------------------------

@pytest.mark.parametrize("metric, pct, code, lstm_worse", [
    ("samples_per_s", 40, 1, "75.0"),  # NEW to BASE: mlp from 200 to 100 samples/s, 50% slower
    ("samples_per_s", 60, 0, "75.0"),
    ("samples_per_s", 50, 0, "75.0"),  # exactly 50% slower: not more than 50
    ("step_time_s", 90, 1, "300.0"),   # its step time doubled: 100% slower
    ("step_time_s", 110, 0, "300.0"),
])
def test_fail_if_slower_exit_status(metric, pct, code, lstm_worse):
    """NEW.csv as BASE: mlp (5 repetitions a side, beyond noise) got slower and fails the run
    beyond PCT; lstm (3 against 3) got slower by more still, but is too few repetitions for a
    verdict: a warning; mlp cpu:1 got faster: nothing."""
    r = run_script("compare.py", NEW, BASE, "--metric", metric, "--fail-if-slower", pct)
    assert r.returncode == code, (r.stdout, r.stderr)
    failed = (f"compare.py: 1 benchmark(s) beyond noise and worse than BASE by more than {pct}%: "
              f"{MLP} (")
    assert r.stderr.splitlines()[0] == (f"compare.py: warning: {LSTM} worse by {lstm_worse}% but "
                                        f"too few repetitions: not counted")
    assert [line.startswith(failed) for line in r.stderr.splitlines()[1:]] == [True] * code


@pytest.mark.parametrize("metric, pct, worse", [
    ("samples_per_s", 40, "50.0"),  # mlp cpu:1 went from 30 to 15 samples/s
    ("step_time_s", 90, "100.0"),   # its step time doubled
])
def test_fail_if_slower_warns_of_a_slower_benchmark_without_a_verdict(metric, pct, worse):
    """mlp cpu:1 has median aggregates only: worse by more than PCT, but too few repetitions
    for a verdict, so a warning and exit 0 (the old compare.py failed the run on it)."""
    r = run_script("compare.py", BASE, NEW, "--metric", metric, "--fail-if-slower", pct)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [
        f"compare.py: warning: {MLP1} worse by {worse}% but too few repetitions: not counted"]


def test_time_metrics_are_better_lower(tbcsv_mod):
    lower = ["step_time_s", "host_cpu_s_per_step", "peak_rss_bytes", "forward_s_per_step",
             "elapsed_s", "mem_weights_bytes", "loss_last", "val_loss"]
    lower += ["energy_j_per_sample", "gpu_mem_used_bytes", "gpu_power_w", "gpu_temp_max_c",
              "host_cpu_util_per_job"]
    higher = ["samples_per_s", "model_tflops", "utilisation", "val_acc", "peak_gflops",
              "gpu_util", "gpu_sm_clock_min_mhz", "gpu_sm_clock_median_mhz"]
    assert all(tbcsv_mod.lower_is_better(c) for c in lower)
    assert not any(tbcsv_mod.lower_is_better(c) for c in higher)



def test_direction_says_which_way_is_better_whatever_the_columns_name():
    r = run_script("compare.py", BASE, NEW, "--direction", "lower")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("trainbench compare: samples_per_s (lower is better)")
    assert "+100.0% worse  beyond noise" in table_line(r.stdout, MLP)


@pytest.mark.parametrize("flags", [("--alpha", "0"), ("--alpha", "1"), ("--fail-if-slower", "nan"),
                                   ("--fail-if-slower", "-1")])
def test_an_alpha_outside_0_to_1_or_a_percentage_not_at_least_0_is_a_usage_error(compare_mod,
                                                                                  flags):
    """An alpha of 0 would never be reached by any number of repetitions (the advice's search
    for them would not end); a nan percentage would fail no run."""
    with pytest.raises(SystemExit) as e:
        compare_mod.parse_args([BASE, NEW, *flags])
    assert e.value.code == 2

def test_step_time_ratios_read_the_other_way():
    r = run_script("compare.py", BASE, NEW, "--metric", "step_time_s")
    assert "(lower is better)" in r.stdout.splitlines()[0]
    line = table_line(r.stdout, MLP)
    assert ratio_column(line) == pytest.approx(0.5, abs=1e-3) and "-50.0% better" in line


# ---- output formats ------------------------------------------------------------------------

def test_markdown_output_is_a_table(compare_mod):
    r = run_script("compare.py", BASE, NEW, "--format", "markdown")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    start = lines.index("| benchmark | BASE | NEW | NEW/BASE | change | noise test |")
    assert re.fullmatch(r"\|( -+:? \|)+", lines[start + 1].replace("---:", "---:"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    assert len(rows) == 4
    assert all(row.count("|") == 7 for row in rows)
    assert any(f"`{MLP}`" in row and "| 2.000 |" in row for row in rows)
    assert "| machine | BASE | NEW | |" in lines
    assert any(line.startswith("| git_commit |") and line.endswith("| **differs** |")
               for line in lines)
    assert compare_mod.md_cell("a|b") == "a\\|b"  # a pipe in a name or path splits no cell
    assert any(line.startswith("geometric mean NEW/BASE over 4") for line in lines)


def test_other_metric_and_text_alignment():
    r = run_script("compare.py", BASE, NEW, "--metric", "peak_rss_bytes")
    assert r.returncode == 0
    assert "peak_rss_bytes (lower is better)" in r.stdout
    assert "70,000,000" in table_line(r.stdout, MLP)


def test_two_real_machines_compare_with_noise_verdicts():
    r = run_script("compare.py", data_file("machine_a.csv"), data_file("machine_b.csv"))
    assert r.returncode == 0, r.stderr
    assert "beyond noise" in table_line(r.stdout, "train/mlp/mnist/cpu/fp32/bs:100")
    # cpu:4 was skipped on the 2-core machine, lenet5 cpu:1 lost one repetition to a failure.
    assert ("train/mlp/mnist/cpu:4/fp32/bs:100 (none in BASE: skipped: cpu:4 needs 4 cores"
            in r.stdout)
    assert "n=5/4" in table_line(r.stdout, "train/lenet5/cifar10/cpu:1/fp32/bs:100")


def test_aggregates_only_file_falls_back_to_the_median_rows():
    r = run_script("compare.py", data_file("aggregates_only.csv"), data_file("machine_a.csv"))
    assert r.returncode == 0, r.stderr
    line = table_line(r.stdout, "train/lstm/sine/cpu/fp32/bs:20")
    assert "too few repetitions (median aggregate only)" in line
    assert ratio_column(line) == pytest.approx(1.0, abs=1e-3)  # same run, median both ways


# ---- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
@pytest.mark.parametrize("side", ["base", "new"])
def test_bad_input_is_one_line_and_exit_2(kind, side, tmp_path):
    bad = bad_path(kind, tmp_path)
    args = (bad, NEW) if side == "base" else (BASE, bad)
    r = run_script("compare.py", *args)
    assert_one_line_error(r, bad, BAD_INPUTS[kind][1])


def test_no_benchmark_in_common_is_exit_2():
    a, b = data_file("machine_a.csv"), data_file("no_match.csv")
    r = run_script("compare.py", a, b)
    assert_one_line_error(r, a, b, "only in BASE: 9", "only in NEW: 9")


def test_unknown_or_non_numeric_metric_is_exit_2(tmp_path):
    assert_one_line_error(run_script("compare.py", BASE, NEW, "--metric", "nope"),
                          BASE, "'nope'")
    assert_one_line_error(run_script("compare.py", BASE, NEW, "--metric", "host"),
                          "'host'", "no numeric values")
    # A metric column the NEW file lacks names NEW.
    trimmed = rewrite_csv(NEW, tmp_path / "new.csv", drop=("loss_last",))
    assert_one_line_error(run_script("compare.py", BASE, trimmed, "--metric", "loss_last"),
                          trimmed)


def test_concatenated_files_with_a_repeated_header_are_read(tmp_path):
    text = open(BASE).read()
    doubled = tmp_path / "doubled.csv"
    doubled.write_text(text + text)  # `cat a.csv a.csv` instead of `tail -n +2`
    r = run_script("compare.py", BASE, str(doubled))
    assert r.returncode == 0, r.stderr
    assert "n=5/10" in table_line(r.stdout, MLP)


def test_binary_file_is_refused(tmp_path):
    blob = tmp_path / "image.csv"
    blob.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    assert_one_line_error(run_script("compare.py", str(blob), NEW), str(blob))


# ---- schema_version 2 against 3 ------------------------------------------------------------

GPU_V2, GPU_V3 = data_file("gpu_v2.csv"), data_file("gpu_v3.csv")
RESNET_BF16 = "train/resnet152/cifar10/gpu:1/bf16/bs:128"


def medians(path: str, column: str) -> dict:
    """benchmark -> median of the ok iteration rows' column, read without tbcsv."""
    values: dict = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["status"] == "ok" and r["run_type"] == "iteration" and r.get(column):
                values.setdefault(r["benchmark"], []).append(float(r[column]))
    return {b: sorted(v)[len(v) // 2] for b, v in values.items()}  # 3 repetitions: the middle


def context_line(stdout: str, column: str) -> list[str]:
    """The cells of a header line (column, BASE, NEW[, differs])."""
    lines = [line for line in stdout.splitlines() if line.split(" ", 1)[0] == column]
    assert len(lines) == 1, (column, stdout)
    return re.split(r"\s{2,}", lines[0].strip())


def test_a_v2_file_compares_against_a_v3_file_by_column_name():
    r = run_script("compare.py", GPU_V2, GPU_V3)
    assert r.returncode == 0, r.stderr
    base, new = medians(GPU_V2, "samples_per_s"), medians(GPU_V3, "samples_per_s")
    assert set(base) == set(new) and len(base) == 9  # 8 GPU benchmarks and the cpu one
    for benchmark in base:
        line = table_line(r.stdout, benchmark)
        assert ratio_column(line) == pytest.approx(new[benchmark] / base[benchmark], abs=1e-3)
    assert "over 9 benchmarks" in r.stdout


def test_the_header_says_which_schema_and_keeps_driver_versions_apart():
    """v2's driver_version (13.0) is v3's cuda_driver_version: the same driver is no
    difference, while v3's new NVIDIA driver version is one the v2 file never recorded."""
    r = run_script("compare.py", GPU_V2, GPU_V3)
    assert context_line(r.stdout, "schema_version") == ["schema_version", "2", "3", "differs"]
    assert context_line(r.stdout, "cuda_driver_version") == ["cuda_driver_version", "13.0", "13.0"]
    assert context_line(r.stdout, "driver_version") == ["driver_version", "-", "580.159.04",
                                                        "differs"]
    assert context_line(r.stdout, "gpu_name")[-1] == "NVIDIA H100 80GB HBM3"
    for telemetry in ("gpu_util", "gpu_power_w", "gpu_sm_clock_min_mhz", "gpu_temp_max_c",
                      "gpu_throttle", "gpu_samples", "gpu_mem_used_bytes"):
        assert not re.search(rf"^{telemetry}\s", r.stdout, re.M), telemetry


def more_energy(path: Path, benchmark: str, factor: float) -> str:
    """A copy of gpu_v3.csv whose benchmark used `factor` times the energy per sample."""
    with open(GPU_V3, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["benchmark"] == benchmark and row["energy_j_per_sample"] and \
                row["aggregate"] != "cv":
            row["energy_j_per_sample"] = f"{float(row['energy_j_per_sample']) * factor:.6g}"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return str(path)


def test_energy_per_sample_is_better_lower(tmp_path):
    hungrier = more_energy(tmp_path / "new.csv", RESNET_BF16, 2.0)
    r = run_script("compare.py", GPU_V3, hungrier, "--metric", "energy_j_per_sample")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith(
        "trainbench compare: energy_j_per_sample (lower is better)")
    # 3 repetitions a side: the energy doubled, but that is no verdict.
    line = table_line(r.stdout, RESNET_BF16)
    assert ratio_column(line) == pytest.approx(2.0, abs=1e-3) and "+100.0% ~" in line
    assert "too few repetitions (n=3/3" in line
    same = table_line(r.stdout, "train/mlp/mnist/gpu:1/fp32/bs:100")
    assert ratio_column(same) == pytest.approx(1.0)
    # The cpu row has no energy: listed, not compared.
    assert "train/mlp/mnist/cpu/fp32/bs:100 (none in BASE or NEW)" in r.stdout
    assert "over 8 benchmarks" in r.stdout
    # Less energy is better, and --fail-if-slower reads it so: doubled is worse by 100%
    # (a warning: too few repetitions to fail on), halved is no warning at all.
    r = run_script("compare.py", GPU_V3, hungrier, "--metric", "energy_j_per_sample",
                   "--fail-if-slower", 50)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [f"compare.py: warning: {RESNET_BF16} worse by 100.0% but "
                                     f"too few repetitions: not counted"]
    r = run_script("compare.py", hungrier, GPU_V3, "--metric", "energy_j_per_sample",
                   "--fail-if-slower", 5)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "-50.0% ~" in table_line(r.stdout, RESNET_BF16)


def test_energy_of_a_v2_file_names_the_schema_version():
    r = run_script("compare.py", GPU_V2, GPU_V3, "--metric", "energy_j_per_sample")
    assert_one_line_error(r, GPU_V2, "no column 'energy_j_per_sample'",
                          "schema_version 3 added it and this file is version 2")



def test_a_column_missing_from_a_file_of_the_version_that_added_it_names_no_version(compare_mod,
                                                                                   tbcsv_mod):
    """A version 3 file without energy_j_per_sample was edited: 'version 3 added it and this file
    is version 3' would be no reason."""
    def file_of(version):
        return tbcsv_mod.Table("x.csv", ["schema_version"], [{"schema_version": version}])
    assert compare_mod.added_by("energy_j_per_sample", file_of("3")) == ""
    assert compare_mod.added_by("energy_j_per_sample", file_of("2")).startswith(
        ": schema_version 3 added it and this file is version 2")


def test_a_column_of_versions_5_to_7_missing_from_an_older_file_names_the_version_that_added_it(
        compare_mod, tbcsv_mod):
    """Not only versions 3 and 4: a version 4 file asked for version 5's device clock was refused
    as 'no column' without a reason."""
    r = run_script("compare.py", data_file("report_cpu_v4.csv"), data_file("report_cpu_v4.csv"),
                   "--metric", "device_samples_per_s")
    assert_one_line_error(r, data_file("report_cpu_v4.csv"), "no column 'device_samples_per_s'",
                          "schema_version 5 added it and this file is version 4; give files "
                          "of version 5 or later")

    def file_of(*versions):
        return tbcsv_mod.Table("x.csv", ["schema_version"],
                               [{"schema_version": v} for v in versions])
    for column, version in (("variant", "4"), ("samples_per_s_low", "5"),
                            ("prediction_inputs", "6"), ("window_samples_per_s", "7")):
        before = str(int(version) - 1)
        assert compare_mod.added_by(column, file_of("2", before)).startswith(
            f": schema_version {version} added it and this file is version 2, {before}"), column
        assert compare_mod.added_by(column, file_of(before, version)) == "", column
    # A column every version has, and a file with no rows, have no version to name.
    assert compare_mod.added_by("samples_per_s", file_of("1")) == ""
    assert compare_mod.added_by("window_samples_per_s", file_of()) == ""

# ---- windows: a verdict for rows of one repetition -------------------------------------------

def one_repetition(src: str, dst: Path, windows: dict) -> str:
    """The fixture's first ok iteration row of each benchmark alone (one repetition), as schema 7
    with the given window samples/s (benchmark -> list), or none."""
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    seen, out = set(), []
    for r in rows:
        if r["run_type"] != "iteration" or r["status"] != "ok" or r["benchmark"] in seen:
            continue
        seen.add(r["benchmark"])
        out.append({**r, "schema_version": "7",
                    "window_samples_per_s": ";".join(f"{v:g}" for v in windows.get(r["benchmark"], []))})
    header = list(out[0])
    with open(dst, "w", newline="") as f:
        w = csv.DictWriter(f, header, lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    return str(dst)


def test_rows_of_one_repetition_are_tested_over_their_windows(tmp_path):
    rng = random.Random(7)
    # The MLP's ten windows around 100 against around 200: beyond noise; the LeNet's around 50 on
    # both sides: within noise; the LSTM without windows: still too few.
    base = one_repetition(BASE, tmp_path / "base.csv", {
        MLP: [100 * rng.uniform(0.97, 1.03) for _ in range(10)], LENET: [50 * rng.uniform(0.97, 1.03) for _ in range(10)]})
    new = one_repetition(NEW, tmp_path / "new.csv", {
        MLP: [200 * rng.uniform(0.97, 1.03) for _ in range(10)], LENET: [50 * rng.uniform(0.97, 1.03) for _ in range(10)]})
    r = run_script("compare.py", base, new)
    assert r.returncode == 0, r.stderr
    assert "better  beyond noise within a run (U test p=" in table_line(r.stdout, MLP)
    assert table_line(r.stdout, MLP).endswith("n=10/10 windows)")
    # The counts say what a verdict from windows means, and how to ask about the code.
    assert "2 verdict(s) from windows" in r.stdout and "--benchmark_repetitions=5 ask whether the code did" in r.stdout
    assert "within noise (U test p=" in table_line(r.stdout, LENET)
    assert "too few repetitions (n=1/1" in table_line(r.stdout, LSTM)
    # The ratio is still the rows' own figures', not the windows'.
    assert ratio_column(table_line(r.stdout, MLP)) == pytest.approx(2.0, abs=0.05)



def test_the_windows_spread_is_their_interquartile_range_between_the_values(compare_mod):
    """Q3 - Q1, the quartiles interpolated between the values themselves (statistics'
    'inclusive' method, numpy's default): 4.5 over 1 to 10, where 'exclusive' would say 5.5."""
    assert compare_mod.interquartile_range([float(v) for v in range(1, 11)]) == 4.5

def test_a_shift_inside_the_windows_own_spread_stays_within_noise(tmp_path):
    """Windows that never overlap (p < alpha), but apart by less than a row's own spread: within
    noise by the spread rule alone, saying why; steady windows apart by 10%: beyond. BASE's run
    slowed by a tenth for half its windows (interquartile range 9.95); NEW's windows all lie
    above BASE's, their median 5.5 above BASE's."""
    steady = [100 + 0.2 * k for k in range(10)]  # 100.0 to 101.8: interquartile range 0.9
    halves = [90 + 0.1 * k for k in range(5)] + [100 + 0.1 * k for k in range(5)]  # median 95.2
    above = [100.5 + 0.05 * k for k in range(10)]  # 100.5 to 100.95: median 100.725
    base = one_repetition(BASE, tmp_path / "base.csv", {MLP: halves, LENET: steady})
    new = one_repetition(NEW, tmp_path / "new.csv", {MLP: above, LENET: [v + 10 for v in steady]})
    r = run_script("compare.py", base, new)
    assert r.returncode == 0, r.stderr
    line = table_line(r.stdout, MLP)
    assert "within noise (U test p=" in line
    # Its p (and adjusted p) is below alpha: the spread rule, not the test, kept it within noise,
    # and the line says so rather than read as a contradiction.
    assert line.endswith("n=10/10 windows: adjusted p below alpha 0.05, but the shift lies "
                         "inside the windows' spread, so it is not called a change)"), line
    p, adjusted = map(float, re.search(r"p=(\S+), adjusted (\S+),", line).groups())
    assert p < 0.05 and adjusted < 0.05, line
    assert "beyond noise within a run" in table_line(r.stdout, LENET)
    # Without a correction there is one p; a p above alpha needs no word on the spread.
    r = run_script("compare.py", base, new, "--correction", "none")
    assert table_line(r.stdout, MLP).endswith(
        "n=10/10 windows: p below alpha 0.05, but the shift lies inside the windows' spread, so "
        "it is not called a change)")
    r = run_script("compare.py", base, new, "--alpha", "0.0001")
    assert table_line(r.stdout, MLP).endswith("n=10/10 windows)")


@pytest.mark.parametrize("base_windows, new_windows, why", [
    ([], [], "and the rows have no windows to test instead"),
    ([], [100, 101, 102], "and BASE's rows have no windows to test instead"),
    ([100, 101], [200, 201], "and their windows, n=2/2, are too few as well"),
])
def test_one_repetition_a_side_without_windows_says_why_it_is_not_tested(
        tmp_path, base_windows, new_windows, why):
    """1 against 1 can give no p below 1 ('p cannot go below 1' said it so): the line says that
    one repetition a side cannot be tested, and why the windows were not tested instead."""
    base = one_repetition(BASE, tmp_path / "base.csv", {MLP: base_windows})
    new = one_repetition(NEW, tmp_path / "new.csv", {MLP: new_windows})
    r = run_script("compare.py", base, new)
    assert r.returncode == 0, r.stderr
    assert table_line(r.stdout, MLP).endswith(
        f"too few repetitions (n=1/1: one repetition a side cannot be tested, {why})")
    assert "cannot go below 1" not in r.stdout


def test_the_help_describes_the_windows_and_the_spread_rule():
    """--help said too few repetitions is 'not tested', while 1 against 1 rows of schema 7 are
    tested over their windows; the spread rule was only in docs/scripts.md."""
    r = run_script("compare.py", "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "it takes the windows of the rows' timed steps instead" in text
    assert "window_samples_per_s" in text and "'n=10/10 windows' for one repetition a side" in text
    assert ("a shift of the windows' medians no larger than the wider of the two sides' "
            "interquartile ranges of windows stays 'within noise' even with p below alpha") in text
    assert ("Neither enough repetitions nor windows (rows before schema 7, rows of a step or "
            "two), or median aggregates only, is 'too few repetitions': not tested") in text



def windows_verdict(compare_mod, tbcsv_mod, base: list, new: list, alpha: float = 0.05):
    """The verdict on one repetition a side with these windows, after the correction."""
    verdict = compare_mod.noise_test(tbcsv_mod.Sample([1.0], "iterations", base),
                                     tbcsv_mod.Sample([1.0], "iterations", new), alpha)
    compare_mod.decide([verdict], alpha, "bh")
    return verdict


def test_one_outlying_window_does_not_move_the_shift_the_spread_rule_weighs(compare_mod, tbcsv_mod):
    """The shift is the windows' medians' difference: NEW's one window at 300 (a hiccup of the
    clock) would move their means' by 25, past BASE's spread of 9.95; the medians' 5.5 is inside
    it."""
    halves = [90 + 0.1 * k for k in range(5)] + [100 + 0.1 * k for k in range(5)]
    above = [100.5 + 0.05 * k for k in range(9)] + [300.0]
    verdict = windows_verdict(compare_mod, tbcsv_mod, halves, above)
    assert verdict.p < 0.05 and verdict.inside_spread and verdict.kind == compare_mod.WITHIN


def test_a_shift_as_large_as_the_windows_spread_stays_within_noise(compare_mod, tbcsv_mod):
    """'No larger than' the spread: medians 105 and 115, interquartile ranges 10, p 0.0024."""
    base = [100.0] * 5 + [110.0] * 5
    verdict = windows_verdict(compare_mod, tbcsv_mod, base, [v + 10 for v in base])
    assert verdict.p < 0.05 and verdict.inside_spread and verdict.kind == compare_mod.WITHIN


def test_three_windows_a_side_are_too_few_at_alpha_0_1(compare_mod, tbcsv_mod):
    """Rows of a few steps have fewer windows: 3 against 3 cannot go below p = 0.1."""
    verdict = windows_verdict(compare_mod, tbcsv_mod, [1.0, 2.0, 3.0], [4.0, 5.0, 6.0], alpha=0.1)
    assert verdict.kind == compare_mod.TOO_FEW and verdict.windows == (3, 3)


def test_the_u_of_repetitions_is_bases(compare_mod, tbcsv_mod):
    """U counts the pairs where BASE is the larger: 0 where all of BASE is below all of NEW."""
    low, high = ([float(v) for v in values] for values in (range(1, 6), range(6, 11)))
    verdict = compare_mod.noise_test(tbcsv_mod.Sample(low, "iterations"),
                                     tbcsv_mod.Sample(high, "iterations"), 0.05)
    assert (verdict.n1, verdict.n2, verdict.u_base) == (5, 5, 0)

@pytest.mark.parametrize("metric", ["samples_per_s", "step_time_s"])
def test_equal_medians_take_their_direction_from_the_windows_u(tmp_path, metric):
    """The LeNet's rows are 50 samples/s on both sides, but eight of NEW's ten windows are above
    all of BASE's (and two below): beyond noise with U of BASE 20 of 100 pairs, so NEW is the
    faster, and the change says so whichever way the files are given and the metric is read.
    (The U of windows was held to half the pairs of repetitions, 1 x 1 / 2, which any U above 0
    passed: 'worse' here.)"""
    steady = [50 + 0.1 * k for k in range(10)]
    mostly_faster = [40, 40.1] + [60 + 0.1 * k for k in range(8)]
    slow = one_repetition(BASE, tmp_path / "slow.csv", {LENET: steady})
    fast = one_repetition(NEW, tmp_path / "fast.csv", {LENET: mostly_faster})
    for base, new, change in ((slow, fast, "+0.0% better"), (fast, slow, "+0.0% worse")):
        r = run_script("compare.py", base, new, "--metric", metric)
        assert r.returncode == 0, r.stderr
        line = table_line(r.stdout, LENET)
        assert ratio_column(line) == 1.0 and "beyond noise within a run (U test p=0.0257" in line
        assert f"{change}  beyond noise" in line, (base, new, line)


def test_equal_medians_of_repetitions_take_their_direction_from_the_u(compare_mod, tbcsv_mod):
    """The same rule over repetitions: U of BASE below half its pairs (5 x 5 / 2) is NEW larger."""
    same = tbcsv_mod.Sample([50.0] * 5, "iterations")
    for u_base, lower_better, direction in ((3, False, "better"), (22, False, "worse"),
                                            (3, True, "worse"), (22, True, "better")):
        noise = compare_mod.NoiseVerdict(compare_mod.BEYOND, 5, 5, p=0.03, u_base=u_base)
        result = compare_mod.Result(LENET, same, same, noise, lower_better)
        assert result.direction == direction, (u_base, lower_better)


def test_window_values_of_a_step_time_follow_the_rows_samples_per_s(tbcsv_mod):
    row = {"samples_per_s": "100", "step_time_s": "1", "window_samples_per_s": "50;100;200"}
    assert tbcsv_mod.window_values(row, "samples_per_s") == [50, 100, 200]
    assert tbcsv_mod.window_values(row, "step_time_s") == [2, 1, 0.5]
    assert tbcsv_mod.window_values(row, "host_cpu_s_per_step") == []
    assert tbcsv_mod.window_values({**row, "window_samples_per_s": ""}, "samples_per_s") == []


def test_skip_messages_are_cut_at_a_word_with_an_ellipsis(compare_mod):
    """They were cut at 80 characters, mid-word: '(cudaErrorInsufficientDriver: no driver,)',
    '(--gpus=0,0 ru)'."""
    r = run_script("compare.py", str(ROOT / "results/vm/20261128T115501Z.csv"),
                   str(ROOT / "results/vm/20261128T115659Z.csv"))
    assert r.returncode == 0, r.stderr
    assert ("  train/mlp/mnist/gpu:1/fp32/bs:100 (none in BASE or NEW: skipped: gpu:1: no usable "
            "NVIDIA driver (cudaErrorInsufficientDriver: no...)\n") in r.stdout
    assert "driver,)" not in r.stdout and "no drive)" not in r.stdout
    gpus = ("skipped: gpu:all: this machine has 1 GPU, gpu:N needs two or more (--gpus=0,0 runs "
            "gpu:2 as two replicas on one GPU: a correctness check)")
    assert compare_mod.shorten(gpus) == ("skipped: gpu:all: this machine has 1 GPU, gpu:N needs "
                                         "two or more (--gpus=0,0...")
    assert compare_mod.shorten("a short message") == "a short message"
    assert compare_mod.shorten("x" * 100) == "x" * 77 + "..."  # one word: cut where it must be
    assert compare_mod.shorten("y" * 80) == "y" * 80  # as long as the width: whole
    # Cut after a word's comma: the ellipsis follows the word, not its punctuation.
    assert compare_mod.shorten("word, " * 20) == "word, " * 12 + "word..."



def test_why_rows_have_no_value_is_the_messages_of_those_not_ok_once_each(compare_mod):
    """A benchmark without a value on a side (in the table's 'no ok value' list, cut to 80
    characters) and a configuration without one (the note where nothing matched, cut to 160)
    say why in their failed and skipped rows' messages, each once, in file order; an ok row's
    message is no reason."""
    name = "train/mlp/mnist/gpu:1/fp32/bs:100"
    oom = ("failed: cudaErrorMemoryAllocation: out of memory allocating the activations of "
           "layer 12 (2.1 GiB)")
    rows = [{"benchmark": name, "device": "gpu:1", "run_type": "iteration", "status": status,
             "message": message, "samples_per_s": ""}
            for status, message in (("ok", "ran on 1 thread"), ("skipped", "skipped: no GPU"),
                                    ("failed", oom), ("failed", oom), ("skipped", ""))]
    both = f"skipped: no GPU; {oom}"
    assert compare_mod.failure_notes(rows, name) == compare_mod.shorten(both) == (
        "skipped: no GPU; failed: cudaErrorMemoryAllocation: out of memory allocating...")
    side = compare_mod.Side("side.csv", rows)
    assert compare_mod.no_value_line(name, side, side, None, None, compare_mod.row_key) == (
        f"{name} (none in BASE or NEW: skipped: no GPU; failed: cudaErrorMemoryAllocation: out "
        f"of memory allocating...)")
    assert compare_mod.unusable_lines("NEW", rows, "samples_per_s") == [
        f"NEW's gpu:1 rows were all skipped or failed or without a samples_per_s value ({both})"]

def test_the_header_names_the_devices_that_ran_not_those_skipped(tmp_path):
    """A side's device line says what ran: gpu rows skipped on a machine without a GPU are not
    among them (two CPU-only runs said 'cpu, gpu:1, gpu:all' on both sides)."""
    r = run_script("compare.py", str(ROOT / "results/vm/20261128T115501Z.csv"),
                   str(ROOT / "results/vm/20261128T115659Z.csv"))
    assert r.returncode == 0, r.stderr
    [device] = [line for line in r.stdout.splitlines() if line.split()[:1] == ["device"]]
    assert device.split() == ["device", "cpu", "cpu"], device

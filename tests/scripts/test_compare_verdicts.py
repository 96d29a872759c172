"""compare.py's verdicts on seeded synthetic repetitions (issue 31, item 5): no verdict between
two draws of one distribution, a real 10% slowdown called and failing --fail-if-slower, ranges
apart at 2 and 3 repetitions a side never counted, the correction across benchmarks changing a
verdict, the adjusted p against hand-computed values, the wall-clock note of GPU rows and the
one-line error without SciPy. The CSVs are fixtures/generate.py's rows, written to tmp_path."""
import random
import re

import pytest

from conftest import load_generator, run_script

GEN = load_generator()
REPETITIONS = 5
CV = 0.03  # run-to-run spread of the synthetic repetitions, like the fixtures' noise


def benchmark(i: int, device: str = "cpu") -> str:
    """The name of the i-th synthetic benchmark: mlp at batch 10 (i + 1)."""
    return GEN.name("mlp", device, batch=10 * (i + 1))


def write_side(path, repetitions: dict, device: str = "cpu", extra=None) -> str:
    """A CSV of generate.py's rows: one ok iteration row per value of repetitions[i] (the i-th
    benchmark's samples_per_s), with extra[column] = list of values where given."""
    rows = []
    for i, values in repetitions.items():
        ident = GEN.identity("mlp", device, 2 if device == "cpu" else 1, GEN.VM,
                             batch=10 * (i + 1))
        for rep, value in enumerate(values):
            row = {**ident, "run_type": "iteration", "aggregate": "", "repetition": str(rep),
                   "status": "ok", "message": "", "samples_per_s": value}
            row.update((column, v[i][rep]) for column, v in (extra or {}).items())
            rows.append(row)
    GEN.write(path, GEN.HEADER + list(extra or {}), rows)
    return str(path)


def draws(rng: random.Random, n: int, center: float = 1000.0) -> list[float]:
    return [rng.gauss(center, CV * center) for _ in range(n)]


def table_line(stdout: str, name: str) -> str:
    [line] = [x for x in stdout.splitlines() if x.startswith(name + " ")]
    return line


def counts(stdout: str) -> str:
    [line] = [x for x in stdout.splitlines() if x.startswith("beyond noise: ")]
    return line


# ---- no difference, many benchmarks --------------------------------------------------------

# Both sides are draws of one distribution, yet with this seed the uncorrected U tests call 3
# of the 20 benchmarks beyond noise (p 0.0079, 0.0159 and 0.0317): the false alarms the old
# compare.py printed at alpha 0.05 per benchmark. At 5 against 5 a benchmark's p is below 0.05
# by chance with probability 8/252, so one of 20 or more is, in about half the seeds (11 of
# seeds 1 to 19).
NULL_SEED = 2


@pytest.fixture
def same_distribution(tmp_path):
    rng = random.Random(NULL_SEED)
    base = {i: draws(rng, REPETITIONS) for i in range(20)}
    new = {i: draws(rng, REPETITIONS) for i in range(20)}
    return write_side(tmp_path / "base.csv", base), write_side(tmp_path / "new.csv", new)


def test_one_distribution_on_both_sides_gives_no_verdict(same_distribution):
    r = run_script("compare.py", *same_distribution)
    assert r.returncode == 0, r.stderr
    assert counts(r.stdout) == ("beyond noise: 0 better, 0 worse; within noise: 20; too few "
                                "repetitions (not counted): 0; Benjamini-Hochberg correction "
                                "(false discovery rate) over 20 tests at alpha 0.05")
    lines = [table_line(r.stdout, benchmark(i)) for i in range(20)]
    assert all("% ~  within noise (U test p=" in line for line in lines), lines
    geomean = next(x for x in r.stdout.splitlines() if x.startswith("geometric mean"))
    assert geomean.startswith("geometric mean NEW/BASE over 20 benchmarks: ")
    assert geomean.endswith("~, no verdict: no benchmark is beyond noise)")
    # Without the correction the same draws give false alarms: what the correction is for.
    raw = run_script("compare.py", *same_distribution, "--correction", "none")
    called = re.match(r"beyond noise: (\d+) better, (\d+) worse; within noise: 17;",
                      counts(raw.stdout))
    assert called and int(called[1]) + int(called[2]) == 3, raw.stdout


def test_fail_if_slower_passes_between_draws_of_one_distribution(same_distribution):
    """Medians of 5 draws at cv 3% differ by more than 1% by chance: warned about, not
    failed."""
    r = run_script("compare.py", *same_distribution, "--fail-if-slower", 1)
    assert r.returncode == 0, (r.stdout, r.stderr)
    warnings = r.stderr.splitlines()
    assert warnings and all(re.fullmatch(r"compare\.py: warning: \S+ worse by \d+\.\d% but within "
                                         r"noise: not counted", line) for line in warnings)


def test_a_lone_difference_among_many_tests_names_the_repetitions_it_needs(same_distribution):
    """Over 20 tests a benchmark alone is called only with p < 0.0025, below what 5 against 5
    can give (0.0079); the note names 6 a side, and 6 a side calls a 10% slowdown."""
    r = run_script("compare.py", *same_distribution)
    note = next(x for x in r.stdout.splitlines() if x.startswith("note: over 20 tests"))
    assert "only with p < 0.0025 (alpha / 20)" in note and "n=5/5: 0.0079" in note
    needed = int(re.search(r"--benchmark_repetitions=(\d+)", note).group(1))
    assert needed == 6


@pytest.mark.parametrize("repetitions, verdict", [
    (5, "% ~  within noise (U test p=0.00794, adjusted 0.159, n=5/5)"),  # 0.00794 x 20
    (6, "% worse  beyond noise (U test p=0.00216, adjusted 0.0433, n=6/6)"),
])
def test_a_lone_slowdown_among_20_benchmarks(tmp_path, repetitions, verdict):
    """One benchmark 10% slower, all of its NEW repetitions below all of BASE's, among 19
    unchanged: Benjamini-Hochberg multiplies its p by 20."""
    rng = random.Random(4)
    base = {i: draws(rng, repetitions) for i in range(20)}
    new = {i: draws(rng, repetitions, 900.0 if i == 7 else 1000.0) for i in range(20)}
    r = run_script("compare.py", write_side(tmp_path / "base.csv", base),
                   write_side(tmp_path / "new.csv", new), "--fail-if-slower", 5)
    called = "beyond noise" in verdict
    assert r.returncode == int(called), (r.stdout, r.stderr)
    assert table_line(r.stdout, benchmark(7)).endswith(verdict)
    assert (f"{benchmark(7)} worse by" in r.stderr) != called  # the warning, or the failure


# ---- a real slowdown -----------------------------------------------------------------------

def test_a_real_10_percent_slowdown_is_called_and_fails_the_run(tmp_path):
    rng = random.Random(2)
    base = {i: draws(rng, REPETITIONS) for i in range(4)}
    new = {i: draws(rng, REPETITIONS, 900.0 if i == 2 else 1000.0) for i in range(4)}
    paths = write_side(tmp_path / "base.csv", base), write_side(tmp_path / "new.csv", new)
    r = run_script("compare.py", *paths)
    assert r.returncode == 0, r.stderr
    line = table_line(r.stdout, benchmark(2))
    # All of NEW below all of BASE: p = 2 / C(10, 5), times 4 tests / rank 1.
    assert re.search(r"  0\.9\d\d  +-\d+\.\d% worse  beyond noise \(U test p=0\.00794, adjusted "
                     r"0\.0317, n=5/5\)$", line), line
    assert counts(r.stdout).startswith("beyond noise: 0 better, 1 worse; within noise: 3; too "
                                       "few repetitions (not counted): 0;")
    assert all("% ~  within noise" in table_line(r.stdout, benchmark(i)) for i in (0, 1, 3))
    assert re.search(r"^geometric mean NEW/BASE over the 1 benchmark beyond noise: 0\.9\d\d "
                     r"\(-\d+\.\d% worse\)$", r.stdout, re.M)
    r = run_script("compare.py", *paths, "--fail-if-slower", 5)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.startswith("compare.py: 1 benchmark(s) beyond noise and worse than BASE by "
                               f"more than 5%: {benchmark(2)} (-")
    assert all(benchmark(i) not in r.stderr for i in (0, 1, 3))


# ---- too few repetitions -------------------------------------------------------------------

def test_ranges_apart_at_2_and_3_repetitions_are_too_few_and_never_counted(tmp_path):
    """Chance alone parts the ranges of 2 against 2 draws in a third of comparisons and of 3
    against 3 in a tenth: the U test cannot reach 0.05 there (smallest p 0.33 and 0.1)."""
    base = {0: [1000.0, 1010.0], 1: [1000.0, 1010.0, 1020.0]}
    new = {0: [800.0, 810.0], 1: [850.0, 860.0, 870.0]}
    paths = write_side(tmp_path / "base.csv", base), write_side(tmp_path / "new.csv", new)
    r = run_script("compare.py", *paths)
    assert r.returncode == 0, r.stderr
    assert table_line(r.stdout, benchmark(0)).endswith(
        "-19.9% ~  too few repetitions (n=2/2: p cannot go below 0.33)")
    assert table_line(r.stdout, benchmark(1)).endswith(
        "-14.9% ~  too few repetitions (n=3/3: p cannot go below 0.1)")
    assert counts(r.stdout) == ("beyond noise: 0 better, 0 worse; within noise: 0; too few "
                                "repetitions (not counted): 2; Benjamini-Hochberg correction "
                                "(false discovery rate) over 0 tests at alpha 0.05")
    [geomean] = [x for x in r.stdout.splitlines() if x.startswith("geometric mean")]
    assert geomean.endswith("(-17.4% ~, no verdict: no benchmark is beyond noise)")
    r = run_script("compare.py", *paths, "--fail-if-slower", 5)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [
        f"compare.py: warning: {benchmark(0)} worse by 19.9% but too few repetitions: not counted",
        f"compare.py: warning: {benchmark(1)} worse by 14.9% but too few repetitions: not counted"]



def test_a_smallest_p_equal_to_alpha_over_the_tests_is_out_of_reach(compare_mod, tbcsv_mod):
    """Two tests of 3 against 3 at alpha 0.2: counted (0.1 is below 0.2), but on its own a
    benchmark needs p below 0.2 / 2 = 0.1, which 3 against 3 cannot give, and the note says so."""
    noise = [compare_mod.NoiseVerdict(compare_mod.WITHIN, 3, 3, p=0.1, u_base=0) for _ in range(2)]
    results = [compare_mod.Result(f"b{i}", tbcsv_mod.Sample([1.0, 2.0, 3.0], "iterations"),
                                  tbcsv_mod.Sample([4.0, 5.0, 6.0], "iterations"), v, False)
               for i, v in enumerate(noise)]
    c = compare_mod.Comparison("samples_per_s", False, results, [], [], [], alpha=0.2)
    assert compare_mod.correction_note(c) == [
        "note: over 2 tests a benchmark is beyond noise on its own only with p < 0.1 (alpha / 2), "
        "and the U test's p cannot go below that at n=3/3: 0.1 (all of one side above the other); "
        "for such a verdict, run both sides with --benchmark_repetitions=4."]

# ---- the correction ------------------------------------------------------------------------

# Six benchmarks at 5 repetitions a side (no ties: SciPy's exact test), NEW slower in three:
# all of NEW below all of BASE in two (p = 0.00794 each), all but one pair in one (p = 0.0317),
# NEW interleaved with BASE in three (p = 0.69).
CORRECTION_BASE = {i: [100.0, 101.0, 102.0, 103.0, 104.0] for i in range(6)}
CORRECTION_NEW = {0: [90.0, 91.0, 92.0, 93.0, 94.0], 1: [91.0, 92.0, 93.0, 94.0, 95.0],
                  2: [95.0, 96.0, 97.0, 98.0, 101.5],
                  **{i: [99.5, 100.5, 101.5, 102.5, 103.5] for i in (3, 4, 5)}}


@pytest.mark.parametrize("flags, verdict", [
    (("--correction", "none"), "-4.9% worse  beyond noise (U test p=0.0317, n=5/5)"),
    # Benjamini-Hochberg: 0.0317 x 6 tests / rank 3 = 0.0635.
    ((), "-4.9% ~  within noise (U test p=0.0317, adjusted 0.0635, n=5/5)"),
    (("--correction", "bh"), "-4.9% ~  within noise (U test p=0.0317, adjusted 0.0635, n=5/5)"),
    # Holm: 0.0317 x (6 - 3 + 1) = 0.127.
    (("--correction", "holm"), "-4.9% ~  within noise (U test p=0.0317, adjusted 0.127, n=5/5)"),
])
def test_the_correction_across_benchmarks_changes_a_verdict(tmp_path, flags, verdict):
    paths = (write_side(tmp_path / "base.csv", CORRECTION_BASE),
             write_side(tmp_path / "new.csv", CORRECTION_NEW))
    r = run_script("compare.py", *paths, *flags)
    assert r.returncode == 0, r.stderr
    assert table_line(r.stdout, benchmark(2)).endswith(verdict)
    # The two clear slowdowns stay beyond noise under every correction.
    assert all(" worse  beyond noise (U test p=0.00794" in table_line(r.stdout, benchmark(i))
               for i in (0, 1))
    called = 3 if flags == ("--correction", "none") else 2
    correction = {"none": "no correction", "holm": "Holm correction (family-wise)"}.get(
        flags[-1] if flags else "bh", "Benjamini-Hochberg correction (false discovery rate)")
    assert counts(r.stdout) == (f"beyond noise: 0 better, {called} worse; within noise: "
                                f"{6 - called}; too few repetitions (not counted): 0; "
                                f"{correction} over 6 tests at alpha 0.05")
    assert r.stdout.splitlines()[0].endswith(f"{correction} over 6 tests at alpha 0.05")
    md = run_script("compare.py", *paths, *flags, "--format", "markdown")
    assert f"{correction} over 6 tests at alpha 0.05." in md.stdout


@pytest.mark.parametrize("p, correction, want", [
    ([0.01, 0.02, 0.03, 0.04, 0.05], "bh", [0.05] * 5),
    ([0.01, 0.02, 0.03, 0.04, 0.05], "holm", [0.05, 0.08, 0.09, 0.09, 0.09]),
    ([0.04, 0.001, 0.03], "bh", [0.04, 0.003, 0.04]),     # in the order given, not sorted
    ([0.04, 0.001, 0.03], "holm", [0.06, 0.003, 0.06]),
    ([0.5, 0.9], "holm", [1.0, 1.0]),                     # never above 1
    ([0.6, 0.7], "holm", [1.0, 1.0]),                     # 2 x 0.6 = 1.2, capped at 1
    ([0.04, 0.001, 0.03], "none", [0.04, 0.001, 0.03]),
    ([], "bh", []),
])
def test_adjusted_p_match_hand_computed_values(compare_mod, p, correction, want):
    assert compare_mod.adjust(p, correction) == pytest.approx(want)



def test_a_p_equal_to_alpha_is_not_below_it(compare_mod):
    verdict = compare_mod.NoiseVerdict(compare_mod.WITHIN, 5, 5, p=0.05, u_base=0)
    compare_mod.decide([verdict], 0.05, "none")
    assert verdict.kind == compare_mod.WITHIN and not verdict.below_alpha

# ---- the clock of samples_per_s ------------------------------------------------------------

WALL_CLOCK_NOTE = ("note: samples_per_s is the wall clock (host gaps included); --metric "
                   "device_samples_per_s compares the GPU rows' device clock (CUDA events)")


def gpu_sides(tmp_path, device: str) -> tuple[str, str]:
    """5 repetitions a side; device_samples_per_s 20% above samples_per_s (no host gaps)."""
    rng = random.Random(6)
    sides = []
    for name, center in (("base", 1000.0), ("new", 1000.0)):
        wall = {0: draws(rng, REPETITIONS, center)}
        device_clock = {0: [v * 1.2 for v in wall[0]]}
        sides.append(write_side(tmp_path / f"{name}.csv", wall, device,
                                {"device_samples_per_s": device_clock}))
    return sides[0], sides[1]


def test_gpu_rows_say_which_clock_samples_per_s_is(tmp_path, tbcsv_mod):
    gpu = gpu_sides(tmp_path, "gpu:1")
    r = run_script("compare.py", *gpu)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(WALL_CLOCK_NOTE) == 1
    md = run_script("compare.py", *gpu, "--format", "markdown")
    assert md.stdout.count(WALL_CLOCK_NOTE) == 1
    # The device clock compares like any rate: higher is better, and no note.
    assert not tbcsv_mod.lower_is_better("device_samples_per_s")
    r = run_script("compare.py", *gpu, "--metric", "device_samples_per_s")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("trainbench compare: device_samples_per_s (higher is better)")
    assert "n=5/5" in table_line(r.stdout, GEN.name("mlp", "gpu:1", batch=10))
    assert WALL_CLOCK_NOTE not in r.stdout


def test_cpu_rows_get_no_clock_note(tmp_path):
    r = run_script("compare.py", *gpu_sides(tmp_path, "cpu"))
    assert r.returncode == 0, r.stderr
    assert "wall clock" not in r.stdout


# ---- without SciPy -------------------------------------------------------------------------

def test_without_scipy_it_is_one_line_naming_the_package(tmp_path):
    """A scipy package that cannot be imported, ahead of the installed one on the path."""
    (tmp_path / "scipy").mkdir()
    (tmp_path / "scipy" / "__init__.py").write_text("raise ImportError('no scipy here')\n")
    paths = (write_side(tmp_path / "base.csv", CORRECTION_BASE),
             write_side(tmp_path / "new.csv", CORRECTION_NEW))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    r = run_script("compare.py", *paths, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert r.stderr == ("compare.py: error: needs SciPy for its U test: apt-get install "
                        "python3-scipy (or pip install scipy)\n")

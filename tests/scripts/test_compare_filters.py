"""compare.py's --filters A B (issue 21): two device configurations or variants within one or
more CSVs, matched by model, dataset, precision and batch; the header names what differs and
warns about machines of different sgemm rates or under load; too few repetitions say how to
get a verdict; predicted rows are never compared and shared-device rows only with their like;
a side of two frameworks is compared per framework, and the hint names --filters only where they
could match (those last in process, on rows made here)."""
import csv
import re

import pytest

from conftest import ROOT, assert_one_line_error, data_file, medians, rewrite_csv, run_script

import tbfilters  # scripts/, which conftest puts on sys.path

GPU = data_file("report_gpu_v4.csv")  # cpu, gpu:1, gpu:2 (+ shared), gpu:8 predicted
PLAIN, GRAPH = data_file("h100_plain_v3.csv"), data_file("h100_cuda_graph_v3.csv")
SGD, ADAM = data_file("optimizer_sgd_v4.csv"), data_file("optimizer_adam_v4.csv")


def table(stdout: str) -> dict:
    """benchmark -> NEW/BASE of the comparison table's lines."""
    out = {}
    for line in stdout.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if line.startswith(("train/", "epochs/")) and len(cells) >= 4:
            out[cells[0]] = float(cells[3])
    return out


def edited(path: str, dst, **changes) -> str:
    """A copy of a CSV with columns set on every row: changes[column] = value or f(row)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for column, value in changes.items():
            r[column] = value(r) if callable(value) else value
    with open(dst, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return str(dst)


# ---- the syntax -----------------------------------------------------------------------------

def test_cpu_against_gpu_within_one_file():
    r = run_script("compare.py", GPU, "--filters", "cpu", "gpu:1")
    assert r.returncode == 0, r.stderr
    m = medians(GPU)
    assert table(r.stdout) == {
        "train/mlp/mnist/fp32/bs:100": pytest.approx(
            m["train/mlp/mnist/gpu:1/fp32/bs:100"] / m["train/mlp/mnist/cpu/fp32/bs:100"],
            abs=1e-3),
        "train/resnet152/cifar10/fp32/bs:128": pytest.approx(
            m["train/resnet152/cifar10/gpu:1/fp32/bs:128"]
            / m["train/resnet152/cifar10/cpu/fp32/bs:128"], abs=1e-3)}
    assert "BASE: " + GPU + " --filters 'cpu': cpu (plain)" in r.stdout
    assert re.search(r"^device\s+cpu\s+gpu:1\s+differs$", r.stdout, re.M)
    assert "only in NEW (2):" in r.stdout  # the bf16 rows have no cpu row


def test_gpu_1_against_gpu_2_leaves_the_shared_device_rows_out():
    r = run_script("compare.py", GPU, "--filters", "gpu:1", "gpu:2")
    assert r.returncode == 0, r.stderr
    m = medians(GPU)
    got = table(r.stdout)
    assert len(got) == 4  # two models x fp32, bf16
    # gpu:2 is the data-parallel run alone, never pooled with the 2 replicas on one GPU.
    assert got["train/mlp/mnist/fp32/bs:100"] == pytest.approx(
        m["train/mlp/mnist/gpu:2/fp32/bs:100"] / m["train/mlp/mnist/gpu:1/fp32/bs:100"],
        abs=1e-3)
    shared = run_script("compare.py", GPU, "--filters", "gpu:2", "gpu:2/shared_device")
    assert table(shared.stdout) == {"train/mlp/mnist/fp32/bs:100": pytest.approx(
        m["train/mlp/mnist/gpu:2/fp32/bs:100/shared_device"]
        / m["train/mlp/mnist/gpu:2/fp32/bs:100"], abs=1e-3)}


def test_plain_against_a_variant_across_two_files():
    r = run_script("compare.py", PLAIN, GRAPH, "--filters", "", "data_on_device/cuda_graph")
    assert r.returncode == 0, r.stderr
    plain, graph = medians(PLAIN), medians(GRAPH)  # version 3: names without the variant
    name = "train/mlp/mnist/gpu:1/fp32/bs:100"
    assert table(r.stdout) == {name: pytest.approx(graph[name] / plain[name], abs=1e-3)}
    assert re.search(r"^variant\s+plain\s+data_on_device/cuda_graph\s+differs$", r.stdout, re.M)
    # The flags in either order, or the same filter by another name, pick the same rows.
    again = run_script("compare.py", PLAIN, GRAPH, "--filters", "plain",
                       "cuda_graph/data_on_device")
    assert table(again.stdout) == table(r.stdout)


def test_files_of_two_configurations_point_at_filters(tmp_path):
    cpu = rewrite_csv(GPU, tmp_path / "cpu.csv", keep_row=lambda row: row["device"] == "cpu")
    gpu = rewrite_csv(GPU, tmp_path / "gpu.csv", keep_row=lambda row: row["device"] == "gpu:1")
    r = run_script("compare.py", cpu, gpu)
    assert_one_line_error(r, "no benchmark", "only in BASE: 2", "--filters 'cpu' 'gpu:1'")
    r = run_script("compare.py", cpu, gpu, "--filters", "cpu", "gpu:1")
    assert r.returncode == 0 and len(table(r.stdout)) == 2, r.stderr


@pytest.mark.parametrize("message, why", [
    ("skipped: gpu:1: no usable NVIDIA driver (cudaErrorInsufficientDriver: no driver)",
     " (skipped: gpu:1: no usable NVIDIA driver (cudaErrorInsufficientDriver: no driver))"),
    ("", "")])
def test_files_whose_other_configuration_was_skipped_say_so_not_filters(tmp_path, message, why):
    """NEW's gpu:1 rows all skipped (no GPU): --filters cpu gpu:1 could only fail, so it is not
    recommended; the error says the rows were skipped, and why where their message says."""
    cpu = rewrite_csv(GPU, tmp_path / "cpu.csv", keep_row=lambda row: row["device"] == "cpu")
    skipped = rewrite_csv(GPU, tmp_path / "gpu.csv", keep_row=lambda row: row["device"] == "gpu:1",
                          change=lambda row: {"status": "skipped", "message": message,
                                              "samples_per_s": ""})
    r = run_script("compare.py", cpu, skipped)
    assert_one_line_error(r, "no benchmark", f"; NEW's gpu:1 rows were all skipped{why}: nothing "
                             f"of them to compare")
    assert "--filters" not in r.stderr
    r = run_script("compare.py", cpu, skipped, "--filters", "cpu", "gpu:1")
    assert r.returncode == 2  # what the hint said to run


@pytest.mark.parametrize("filters, needle", [
    (("gpu:x", "gpu:1"), "'gpu:x' is not a term a filter knows"),
    (("cpu/gpu:1", "gpu:2"), "names two of device"),
    (("gpu:1", "gpu:8/predicted:nvlink4"), "predicted rows are predictions"),
    (("gpu:3", "gpu:1"), "--filters 'gpu:3' matches no row"),
    (("gpu:1", "bf16"), "devices gpu:1, gpu:2: name one in the filter"),
])
def test_bad_filters_are_one_line_and_exit_2(filters, needle):
    assert_one_line_error(run_script("compare.py", GPU, "--filters", *filters), needle)


def test_one_file_without_filters_is_a_usage_error():
    r = run_script("compare.py", GPU)
    assert r.returncode == 2 and "--filters A B" in r.stderr and "Traceback" not in r.stderr


# ---- what the header says -----------------------------------------------------------------

def test_the_header_names_every_flag_and_context_that_differs(tmp_path):
    other = edited(GPU, tmp_path / "other.csv", git_commit="1234567",
                   gpu_name="NVIDIA H200", optimizer="adam", load_avg_1m="0.6")
    r = run_script("compare.py", GPU, other)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("differs: "))
    # The load differs too, but neither side was loaded: not a difference worth naming.
    assert line == "differs: optimizer, git_commit, gpu_name"
    assert re.search(r"^gpu_name\s+NVIDIA H100 80GB HBM3\s+NVIDIA H200\s+differs$", r.stdout,
                     re.M)
    r = run_script("compare.py", SGD, ADAM)
    assert "differs: variant, optimizer\n" in r.stdout


@pytest.mark.parametrize("factor, warned", [(1.3, True), (1.1, False)])
def test_a_different_sgemm_rate_is_a_warning(tmp_path, factor, warned):
    faster = edited(SGD, tmp_path / "faster.csv",
                    sgemm_gflops=lambda row: f"{float(row['sgemm_gflops']) * factor:g}")
    r = run_script("compare.py", SGD, faster)
    assert r.returncode == 0, r.stderr
    assert ("warning: sgemm_gflops differs by 30% (BASE 94.9, NEW 123.4 GFLOP/s" in r.stdout) \
        == warned
    assert bool(re.search(r"^sgemm_gflops .*differs by 30%$", r.stdout, re.M)) == warned


@pytest.mark.parametrize("load, warned", [("3.2", True), ("2.9", False)])
def test_a_loaded_side_is_a_warning(tmp_path, load, warned):
    """A row is loaded above the most threads its run had used so far + 1 (trainbench's rule,
    bench/run/harness.cpp; its `loaded` verdict, which older rows get from tbcsv): 3 on these
    rows of 2 threads, not above cores + 0.5 (2.5), the scripts' second threshold before. The
    10 repetitions are loaded, not the 8 aggregate rows (trainbench gives them no verdict)."""
    busy = edited(ADAM, tmp_path / "busy.csv", load_avg_1m=load)
    r = run_script("compare.py", SGD, busy)
    assert r.returncode == 0, r.stderr
    assert ("warning: NEW was loaded: 10 of 18 rows started with load_avg_1m above the "
            f"threads their run had used + 1 (their verdict `loaded`; up to {load} on 2 cores)"
            in r.stdout) == warned
    assert "BASE was loaded" not in r.stdout


def loads_with_aggregates(row: dict) -> str:
    """load_avg_1m as Google Benchmark aggregates it: repetitions at 0.60 to 1.00, their mean
    and median 0.80, their stddev 0.16 and cv 0.2 (a spread and a ratio, no load at all)."""
    if row["run_type"] == "iteration":
        return f"{0.6 + 0.1 * int(row['repetition']):.2f}"
    return {"mean": "0.8", "median": "0.8", "stddev": "0.16", "cv": "0.2"}[row["aggregate"]]


def test_the_load_range_is_over_the_repetitions_not_the_aggregates(tmp_path, compare_mod):
    """The aggregate rows' load is the mean, median, stddev or cv of the repetitions': the
    range is the repetitions' (it said 0.16-1.00, the stddev its low)."""
    loads = edited(SGD, tmp_path / "loads.csv", load_avg_1m=loads_with_aggregates)
    r = run_script("compare.py", loads, loads)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^load_avg_1m\s+0\.60-1\.00\s+0\.60-1\.00$", r.stdout, re.M), r.stdout
    # Rows without a run_type (not a trainbench file's) are all read, as before.
    assert compare_mod.side_text([{"load_avg_1m": "0.3"}, {"load_avg_1m": "1.2"}],
                                 "load_avg_1m") == "0.30-1.20"
    # A file of aggregates only: its median aggregates' loads.
    medians_only = rewrite_csv(loads, tmp_path / "medians.csv",
                               keep_row=lambda row: row["run_type"] == "aggregate")
    r = run_script("compare.py", medians_only, medians_only)
    assert re.search(r"^load_avg_1m\s+0\.80\s+0\.80$", r.stdout, re.M), r.stdout


# ---- verdicts -------------------------------------------------------------------------------

def test_too_few_repetitions_say_how_to_get_a_verdict():
    r = run_script("compare.py", PLAIN, GRAPH, "--filters", "", "data_on_device/cuda_graph")
    lines = r.stdout.splitlines()
    geomean = next(line for line in lines if line.startswith("geometric mean"))
    assert geomean.endswith("(+90.5% ~, no verdict: no benchmark is beyond noise)")
    assert any(line.startswith("too few repetitions for a verdict: every one of these "
                               "benchmarks has fewer than 4 on a side (n=3/3)")
               and "--benchmark_repetitions=5" in line for line in lines)
    # Mixed: 2 of the hand-made example's 4 benchmarks have 5 repetitions a side.
    r = run_script("compare.py", data_file("compare_base.csv"), data_file("compare_new.csv"))
    assert "too few repetitions for a verdict: 2 of 4 of these benchmarks" in r.stdout
    assert "(n=3/3, median aggregate only)" in r.stdout
    # Enough everywhere: no advice.
    r = run_script("compare.py", SGD, data_file("optimizer_adam_v4.csv"))
    assert "too few repetitions for a verdict" not in r.stdout
    assert "too few repetitions (not counted): 0;" in r.stdout
    assert "--benchmark_repetitions" not in r.stdout


def test_predicted_rows_never_enter_the_verdicts():
    r = run_script("compare.py", GPU, GPU)
    assert r.returncode == 0, r.stderr
    assert not any("gpu:8" in name for name in table(r.stdout))
    assert "predicted:nvlink4" not in r.stdout
    # 2 models x 2 precisions x (gpu:1, gpu:2), 2 cpu rows and the shared-device one.
    assert "over 11 benchmarks" in r.stdout
    assert "note: 1 predicted rows of BASE left out" in r.stdout


# ---- a peer framework (scripts/compare_pytorch.sh) -----------------------------------------

def test_a_pytorch_file_still_matches_a_trainbench_file_by_name():
    """compare_pytorch.sh compares the peer's file with trainbench's by name; both ran with the
    data on the GPU (version 2 rows: data_on_device=1 on both sides, so the same variant)."""
    runs = ROOT / "results" / "h100"
    pt = runs / "trainbench-vs-pytorch-20261123T050007Z-pytorch.csv"
    tb = runs / "trainbench-vs-pytorch-20261123T050007Z-trainbench.csv"
    if not (pt.exists() and tb.exists()):
        pytest.skip("results/h100 lacks the PyTorch comparison")
    r = run_script("compare.py", pt, tb)
    assert r.returncode == 0, r.stderr
    assert len(table(r.stdout)) == 10 and all(
        name.endswith("/data_on_device") for name in table(r.stdout))
    # The same pairs through --filters, from the two files pooled.
    r2 = run_script("compare.py", pt, tb, "--filters", "framework:pytorch/data_on_device",
                    "framework:trainbench/data_on_device")
    assert r2.returncode == 0, r2.stderr
    assert sorted(table(r2.stdout).values()) == sorted(table(r.stdout).values())


def test_a_side_of_two_frameworks_never_pools_them(compare_mod):
    """A file of trainbench's rows and the peer's under one name (compare_pytorch.sh's pair
    concatenated) is compared per framework: the peer's rows are their own benchmark, only in
    NEW, rather than pooled with trainbench's into one median."""
    name = "train/mlp/mnist/gpu:1/fp32/bs:100"

    def rows(framework, rate):
        return [{"benchmark": name, "framework": framework, "run_type": "iteration",
                 "status": "ok", "samples_per_s": str(rate)} for _ in range(5)]
    base = compare_mod.Side("base.csv", rows("trainbench", 100))
    new = compare_mod.Side("new.csv", rows("trainbench", 200) + rows("pytorch", 50))
    c = compare_mod.compare(base, new, "samples_per_s", 0.05, lower_better=False)
    [result] = c.results
    assert (result.benchmark, result.new.center) == (name, 200)
    assert c.only_new == [f"{name} [pytorch]"]


# ---- what is matched, and the hint when nothing is ------------------------------------------

def mlp_rows(device, status="ok", rate="100", message="", reps=3, **cells):
    return [{"benchmark": f"train/mlp/mnist/{device}/fp32/bs:100", "device": device,
             "run_type": "iteration", "status": status, "message": message,
             "samples_per_s": rate, **cells} for _ in range(reps)]


def compared(compare_mod, base, new, **kw):
    return compare_mod.compare(compare_mod.Side("base.csv", base), compare_mod.Side("new.csv", new),
                               "samples_per_s", 0.05, False, **kw)


def test_no_filters_are_suggested_for_a_configuration_whose_rows_all_failed_on_either_side(
        compare_mod):
    """Rows that failed after they measured keep a number, but no ok value: --filters over
    them could only fail, whichever side they are on; the note says why instead."""
    cpu = mlp_rows("cpu")
    failed = mlp_rows("gpu:1", "failed", "5", "loss is not finite at step 3")
    for base, new, side in ((cpu, failed, "NEW"), (failed, cpu, "BASE")):
        c = compared(compare_mod, base, new)
        assert c.hint is None
        assert c.unusable == [f"{side}'s gpu:1 rows were all failed (loss is not finite at step 3)"]


def test_filters_are_suggested_only_where_both_sides_have_benchmarks_of_their_own(compare_mod):
    c = compared(compare_mod, mlp_rows("cpu") + mlp_rows("gpu:1", "skipped", ""), mlp_rows("cpu"))
    assert len(c.only_base) == 1 and not c.only_new
    assert c.hint is None and c.unusable == []


def test_no_filters_are_suggested_to_a_comparison_already_under_filters(compare_mod):
    """--filters cpu gpu:1 over trainbench's cpu rows and the peer's gpu:1 rows: their keys
    differ in the framework, which the hint would name; under --filters it is never given."""
    pair = tbfilters.FilterPair(tbfilters.parse_filter("cpu"), tbfilters.parse_filter("gpu:1"))
    c = compared(compare_mod, mlp_rows("cpu"), mlp_rows("gpu:1", framework="pytorch"),
                 key=pair.key)
    assert c.only_base and c.only_new and c.hint is None


def test_a_benchmark_a_filter_cannot_tell_apart_is_listed_only_as_not_compared(compare_mod):
    name = "train/mlp/mnist/gpu:1/fp32/bs:100"
    c = compared(compare_mod, mlp_rows("cpu") + mlp_rows("gpu:1"), mlp_rows("cpu"),
                 ambiguous={name: "devices gpu:1, gpu:2: name one in the filter"})
    assert c.only_base == [] and c.ambiguous == [
        f"{name} (devices gpu:1, gpu:2: name one in the filter)"]


def test_a_configuration_with_one_ok_value_is_usable(compare_mod):
    rows = mlp_rows("gpu:1", reps=1) + mlp_rows("gpu:1", "failed", "", "out of memory", reps=2)
    assert compare_mod.unusable_lines("NEW", rows, "samples_per_s") == []


def test_other_epochs_of_the_same_benchmark_get_no_filters_hint(compare_mod):
    """Per-epoch rows match by epoch: epochs only one side ran differ in nothing a filter names."""
    def epochs(*numbers):
        return [{**mlp_rows("gpu:1", reps=1)[0], "epoch": str(e)} for e in numbers]
    c = compared(compare_mod, epochs(1, 2), epochs(3))
    assert c.only_base and c.only_new and c.hint is None


def test_a_row_without_a_framework_is_trainbenchs():
    row = mlp_rows("gpu:1", reps=1)[0]
    assert tbfilters.dimension({**row, "framework": ""}, "framework") == "trainbench"
    assert tbfilters.parse_filter("gpu:1/framework:trainbench").matches(row)
    assert tbfilters.configuration({**row, "framework": "pytorch", "variant": "data_on_device"}) \
        == "gpu:1/data_on_device/framework:pytorch"


@pytest.mark.parametrize("term", ["framework:", "host:"])
def test_a_framework_or_host_term_without_a_name_is_refused(tbcsv_mod, term):
    with pytest.raises(tbcsv_mod.InputError, match=f"'{term}' is not a term a filter knows"):
        tbfilters.parse_filter(f"gpu:1/{term}")

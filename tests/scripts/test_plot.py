"""Tests of scripts/plot.py: which charts it writes for which columns, that every PNG and SVG
is a real, non-blank image naming the machines and the run, the numbers behind the speedup,
scaling, time-to-accuracy and energy charts, schema_version 2 and 3 files together, bad input,
the message when matplotlib is missing, and the headline's drawing: a look per configuration,
a width that stays legible, its machines' names, measured whiskers and each panel's scale."""
import csv
import filecmp
import re
import os
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import (BAD_INPUTS, FIXTURES, ROOT, SCRIPTS, assert_one_line_error, bad_path,
                      data_file, load_generator, rewrite_csv, run_script)
from tbplot import references
from tbplot.charts import CHARTS
from tbplot.charts.headline import (MAX_WIDTH_IN, bar_labels, brief_notes, caption, chart_headline,
                                    legend_entries, look_key, looks, panels, select, set_labels,
                                    whiskers_said)
from tbplot.charts.energy_per_sample import chart_energy, energy_per_sample, energy_unit, throttling
from tbplot.charts.time_to_accuracy import accuracy_curves
from tbplot.figures import describe_machines
from tbplot.model import (Config, Data, config_of, host_cpu, machine_of, newest_rows, panel_title,
                          scaling_lines, short_cpu, speedups, spread)
from tbplot.svg import stable_clip_ids

# Every chart plot.py draws: the registry's, so that a chart added there is tested here.
ALL_CHARTS = [chart.name for chart in CHARTS]
CPU_CHARTS = ["headline", "samples_per_s", "speedup_vs_cpu", "peak_memory", "host_cpu_per_step"]
# gpu_epochs.csv predates the telemetry columns: every chart but energy_per_sample.
GPU_EPOCH_CHARTS = [c for c in ALL_CHARTS if c != "energy_per_sample"]
TWO_MACHINES = [data_file("machine_a.csv"), data_file("machine_b.csv")]
GPU = data_file("gpu_epochs.csv")
GPU_V2, GPU_V3 = data_file("gpu_v2.csv"), data_file("gpu_v3.csv")
THROTTLED = "train/resnet152/cifar10/gpu:1/fp32/bs:128"  # one repetition of three in gpu_v3.csv


def plot(out: Path, *csvs):
    r = run_script("plot.py", *csvs, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return r


def charts_in(out: Path) -> set[str]:
    """The charts in out (their PNG and SVG files); the report is checked on its own."""
    return {p.stem for p in out.iterdir() if p.suffix in (".png", ".svg")}


def assert_real_png(path: Path) -> None:
    """A PNG of a sensible size whose pixels are not one flat colour."""
    import matplotlib.image
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > 20_000, (path, len(data))
    pixels = matplotlib.image.imread(str(path))
    height, width = pixels.shape[:2]
    assert width >= 1000 and height >= 400, (path, pixels.shape)
    assert pixels[..., :3].std() > 0.05, path  # not blank


def svg_text(path: Path) -> str:
    """All text of an SVG (which must parse), joined with spaces."""
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    assert path.stat().st_size > 10_000
    return " ".join(t for t in root.itertext() if t.strip())


# ---- which charts ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_machines(tmp_path_factory):
    out = tmp_path_factory.mktemp("two_machines")
    return out, plot(out, *TWO_MACHINES)


@pytest.fixture(scope="module")
def gpu_charts(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    return out, plot(out, GPU)


def test_cpu_only_files_give_the_cpu_charts_and_say_why_the_others_are_skipped(two_machines):
    out, r = two_machines
    assert charts_in(out) == set(CPU_CHARTS)
    skipped = [line for line in r.stdout.splitlines() if line.startswith("skipped ")]
    assert [line.split()[1].rstrip(":") for line in skipped] == ["scaling_efficiency",
                                                                "time_to_accuracy",
                                                                "energy_per_sample"]
    assert "gpu:" in skipped[0] and "epochs/" in skipped[1] and "gpu:" in skipped[2]


def test_every_chart_is_written_as_a_real_png_and_svg(two_machines):
    out, _ = two_machines
    for name in CPU_CHARTS:
        assert_real_png(out / f"{name}.png")
        svg_text(out / f"{name}.svg")


MACHINE_LINES = ("vm: AMD EPYC, 2 cores", "commit a1d1702", "2026-11-20T09:00:00Z",
                 "ws-alpha: Intel(R) Xeon(R) Gold 6230", "commit b2e2f13-dirty")


def test_titles_name_the_machines_and_the_run(two_machines):
    """Every chart but the headline names its machines and runs above its panels; the headline
    leaves them to the report, which keeps every one."""
    out, _ = two_machines
    for name in CPU_CHARTS:
        if name == "headline":
            continue
        text = svg_text(out / f"{name}.svg")
        for needle in MACHINE_LINES:
            assert needle in text, (name, needle)
    report = (out / "report.md").read_text()
    for needle in ("| cpu_model | AMD EPYC | Intel(R) Xeon(R) Gold 6230", "| git_commit | a1d1702 | b2e2f13-dirty |",
                   "| timestamp | 2026-11-20T09:00:00Z |"):
        assert needle in report, needle


def test_the_headline_carries_a_title_a_legend_and_at_most_two_lines_of_notes(two_machines):
    out, _ = two_machines
    text = svg_text(out / "headline.svg")
    assert ("Training throughput per device configuration: vm (AMD EPYC, 2 cores), ws-alpha (Intel Xeon Gold 6230, "
            "8 cores)") in text
    assert "commit a1d1702" not in text and "2026-11-20T09:00:00Z" not in text, "versions and times are the report's"
    # The notes: the first says what a bar and its label are, the last where the rest is.
    first, last = text.index("Bars: median samples/s"), text.index("report.md.")
    notes = text[first:last]
    assert len(notes) < 2 * 150, notes  # two lines of the figure's width at most
    assert "cpu" in text  # the legend names the configurations


def test_one_csv_without_out_draws_beside_it_and_says_where(tmp_path):
    run_csv = tmp_path / "run.csv"
    run_csv.write_bytes(Path(TWO_MACHINES[0]).read_bytes())
    r = run_script("plot.py", run_csv)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "run-charts"
    assert f"charts and report into {out}/ (beside {run_csv}" in r.stdout
    assert "headline" in charts_in(out) and (out / "report.html").is_file()
    several = run_script("plot.py", *TWO_MACHINES)
    assert several.returncode == 2 and "2 CSVs: say where their charts go with --out DIR" in several.stderr


def test_axes_have_units(two_machines):
    out, _ = two_machines
    assert "samples/s (log scale)" in svg_text(out / "samples_per_s.svg")
    assert "host CPU time per step (ms, log scale)" in svg_text(out / "host_cpu_per_step.svg")
    assert "peak memory (MiB)" in svg_text(out / "peak_memory.svg")


def test_failed_and_skipped_rows_are_marked_not_plotted(two_machines, tmp_path):
    out, _ = two_machines
    text = svg_text(out / "samples_per_s.svg")
    assert text.count("skipped") == 3  # cpu:4 of the 2-core machine, once per model
    assert "failed" not in text  # lenet5 cpu:1 lost one repetition of five, not the bar
    plot(tmp_path, data_file("compare_new.csv"))  # resnet152 failed every repetition
    text = svg_text(tmp_path / "samples_per_s.svg")
    assert "resnet152 · cifar10" in text and text.count("failed") == 1


def test_gpu_and_epoch_columns_give_every_chart_but_energy(gpu_charts):
    out, r = gpu_charts
    assert charts_in(out) == set(GPU_EPOCH_CHARTS)
    skipped = [line for line in r.stdout.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and skipped[0].startswith("skipped energy_per_sample: "), r.stdout
    assert "energy_j_per_sample" in skipped[0]
    for name in GPU_EPOCH_CHARTS:
        assert_real_png(out / f"{name}.png")
    assert "NVIDIA H100 80GB HBM3" in svg_text(out / "scaling_efficiency.svg")
    memory = svg_text(out / "peak_memory.svg")
    for part in ("weights", "gradients", "optimizer state", "activations", "workspace",
                 "context", "peak RSS (no breakdown)"):
        assert part in memory
    assert "validation accuracy (%)" in svg_text(out / "time_to_accuracy.svg")


def test_the_registry_names_each_chart_once_after_its_module():
    names = [chart.name for chart in CHARTS]
    assert len(names) == len(set(names)) >= 8
    for chart in CHARTS:
        assert chart.draw.__module__ == f"tbplot.charts.{chart.name}", chart.name


def test_machines_from_several_files_share_each_chart(tmp_path):
    # Schema versions 1 and 3 together.
    r = plot(tmp_path, *TWO_MACHINES, GPU, GPU_V3)
    assert charts_in(tmp_path) == set(ALL_CHARTS), r.stdout
    text = svg_text(tmp_path / "samples_per_s.svg")
    for host in ("vm", "ws-alpha", "gpu-node", "h100-node"):
        assert f"{host}:" in text  # one subtitle line per machine


@pytest.mark.parametrize("drop, missing", [
    (("host_cpu_s_per_step",), "host_cpu_per_step"),
    (("peak_rss_bytes",), "peak_memory"),
    (("samples_per_s",), "samples_per_s"),
])
def test_a_chart_whose_column_is_absent_is_skipped_with_a_note(tmp_path, drop, missing):
    src = rewrite_csv(data_file("machine_a.csv"), tmp_path / "trimmed.csv", drop=drop)
    r = plot(tmp_path / "out", src)
    assert missing not in charts_in(tmp_path / "out")
    notes = [line for line in r.stdout.splitlines() if line.startswith(f"skipped {missing}:")]
    assert len(notes) == 1, r.stdout


def test_aggregate_only_files_plot_the_median_rows(tmp_path, tbcsv_mod):
    plot(tmp_path, data_file("aggregates_only.csv"))
    assert "samples_per_s" in charts_in(tmp_path)
    data = Data([tbcsv_mod.read_table(data_file("aggregates_only.csv"))])
    medians = [r for r in data.rows if r["aggregate"] == "median"
               and r["benchmark"] == "train/mlp/mnist/cpu:1/fp32/bs:100"]
    ratio = speedups(data)[("vm", config_of(medians[0]))]
    cpu = [r for r in data.rows if r["aggregate"] == "median"
           and r["benchmark"] == "train/mlp/mnist/cpu/fp32/bs:100"]
    want = float(medians[0]["samples_per_s"]) / float(cpu[0]["samples_per_s"])
    assert ratio == pytest.approx(want)


def test_only_failed_rows_draw_nothing_but_do_not_fail(tmp_path):
    src = rewrite_csv(data_file("machine_a.csv"), tmp_path / "failed.csv",
                      keep_row=lambda row: row["status"] != "ok")
    r = plot(tmp_path / "out", src)
    assert list((tmp_path / "out").iterdir()) == []
    assert "no chart could be drawn" in r.stderr


def test_old_charts_of_a_skipped_kind_are_removed(tmp_path):
    plot(tmp_path, GPU)
    assert (tmp_path / "scaling_efficiency.png").exists()
    r = plot(tmp_path, *TWO_MACHINES)
    assert charts_in(tmp_path) == set(CPU_CHARTS)
    assert "removed the old" in r.stdout


def test_output_is_reproducible(tmp_path):
    # Several machines: every chart has a legend in its header, where the layout's floats
    # (and so matplotlib's clip path ids) varied between runs.
    for run in ("a", "b", "c"):
        plot(tmp_path / run, *TWO_MACHINES, GPU, GPU_V3)
    for other in ("b", "c"):
        same, different, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / other,
                                                   [f"{n}.svg" for n in ALL_CHARTS],
                                                   shallow=False)
        assert not different and not errors


def test_clip_ids_are_numbered_in_order_of_use():
    svg = ('<g clip-path="url(#p0123456789)"/><g clip-path="url(#pabcdefabcd)"/>'
           '<g clip-path="url(#p0123456789)"/><defs><clipPath id="p0123456789"><rect/></clipPath>'
           '<clipPath id="pabcdefabcd"><rect/></clipPath><pattern id="h0123456789"/></defs>')
    assert stable_clip_ids(svg) == (
        '<g clip-path="url(#clip1)"/><g clip-path="url(#clip2)"/>'
        '<g clip-path="url(#clip1)"/><defs><clipPath id="clip1"><rect/></clipPath>'
        '<clipPath id="clip2"><rect/></clipPath><pattern id="h0123456789"/></defs>')


# ---- the numbers behind the charts ----------------------------------------------------------

def medians_by_benchmark(rows, column="samples_per_s"):
    values = {}
    for r in rows:
        if r["status"] == "ok" and r["run_type"] == "iteration" and r.get(column):
            values.setdefault((r["host"], r["benchmark"]), []).append(float(r[column]))
    return {k: statistics.median(v) for k, v in values.items()}


def test_speedup_is_over_the_cpu_row_of_the_same_machine(tbcsv_mod):
    data = Data([tbcsv_mod.read_table(p) for p in TWO_MACHINES])
    medians = medians_by_benchmark(data.rows)
    got = {(s, c.model, c.device): v for (s, c), v in speedups(data).items()}
    want = medians[("ws-alpha", "train/lenet5/cifar10/cpu:4/fp32/bs:100")] / \
        medians[("ws-alpha", "train/lenet5/cifar10/cpu/fp32/bs:100")]
    assert got[("ws-alpha", "lenet5", "cpu:4")] == pytest.approx(want)
    assert ("vm", "lenet5", "cpu:4") not in got  # skipped there
    assert not any(device == "cpu" for _, _, device in got)
    assert len(got) == 9  # vm: 3 models x cpu:1; ws-alpha: 3 x (cpu:1, cpu:4)


def test_scaling_efficiency_is_throughput_over_n_times_one_device(tbcsv_mod):
    data = Data([tbcsv_mod.read_table(GPU)])
    medians = medians_by_benchmark(data.rows)
    lines = scaling_lines(data)
    key = ("gpu-node", ("train", "resnet152", "cifar10"), "fp32", "bs:128")
    assert set(lines) == {key, ("gpu-node", ("train", "mlp", "mnist"), "fp32", "bs:100")}
    one = medians[("gpu-node", "train/resnet152/cifar10/gpu:1/fp32/bs:128")]
    four = medians[("gpu-node", "train/resnet152/cifar10/gpu:4/fp32/bs:128")]
    assert lines[key][1] == pytest.approx(1.0)
    assert lines[key][4] == pytest.approx(four / (4 * one))
    assert 0.8 < lines[key][4] < 0.9  # the fixture scales at 85%


def test_time_to_accuracy_uses_the_epoch_rows(tbcsv_mod):
    data = Data([tbcsv_mod.read_table(GPU)])
    assert len(data.epoch_rows) == 48 and all(r["kind"] != "epochs" for r in data.step_rows)
    curves = accuracy_curves(data)
    assert {c.device for _, c in curves} == {"cpu", "gpu:1", "gpu:2"}
    for points in curves.values():
        assert len(points) == 8
        times = [t for t, _ in points]
        assert times == sorted(times)


def test_device_order_puts_cpu_first_then_by_count(tbcsv_mod):
    devices = ["gpu:2", "cpu:4", "gpu:1", "cpu", "cpu:1", "gpu:10"]
    assert sorted(devices, key=tbcsv_mod.device_sort_key) == ["cpu", "cpu:1", "cpu:4", "gpu:1",
                                                              "gpu:2", "gpu:10"]


# ---- bad input and environment ----------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(kind, tmp_path):
    bad = bad_path(kind, tmp_path)
    r = run_script("plot.py", data_file("machine_a.csv"), bad, "--out", tmp_path / "out")
    assert_one_line_error(r, bad, BAD_INPUTS[kind][1])
    assert not (tmp_path / "out").exists()  # nothing drawn from half the input


def test_out_that_is_a_file_is_exit_2(tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    assert_one_line_error(run_script("plot.py", TWO_MACHINES[0], "--out", target), str(target))
    # A folder below that file, or one on a file system where none can be made: one line, no traceback.
    for below in (target / "sub", Path("/proc/trainbench-charts")):
        assert_one_line_error(run_script("plot.py", TWO_MACHINES[0], "--out", below), f"--out {below}")


def test_missing_matplotlib_names_the_fix(tmp_path):
    # A matplotlib package that fails to import stands in for one that is not installed.
    fake = tmp_path / "matplotlib"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = run_script("plot.py", TWO_MACHINES[0], "--out", tmp_path / "out", env=env)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "install python3-matplotlib (apt) or pip install matplotlib" in r.stderr


def test_scripts_are_executable_with_a_portable_shebang():
    for name in ("plot.py", "compare.py"):
        path = SCRIPTS / name
        assert os.access(path, os.X_OK), name
        assert path.read_text().splitlines()[0] == "#!/usr/bin/env python3"


def test_fixtures_are_what_the_generator_writes(tmp_path):
    written = [p.name for p in load_generator().generate(tmp_path)]
    committed = sorted(p.name for p in FIXTURES.glob("*.csv"))
    assert sorted(written) == committed
    same, different, errors = filecmp.cmpfiles(tmp_path, FIXTURES, written, shallow=False)
    assert not different and not errors, "run tests/scripts/fixtures/generate.py"


# ---- --latest: the newest run per machine and framework (the README's charts) ----------------

def latest_rows():
    base = {"kind": "train", "model": "mlp", "dataset": "mnist", "precision": "fp32", "batch": "100",
            "framework": "", "status": "ok", "host": "vm"}
    amd = {**base, "cpu_model": "AMD EPYC", "gpu_name": ""}
    h100 = {**base, "cpu_model": "Intel Xeon", "gpu_name": "NVIDIA H100"}
    return [
        {**amd, "device": "cpu", "timestamp": "2026-11-01T00:00:00Z", "samples_per_s": "1"},
        {**amd, "device": "cpu", "timestamp": "2026-11-02T00:00:00Z", "samples_per_s": "2"},
        {**amd, "device": "gpu:1", "timestamp": "2026-11-02T00:00:00Z", "status": "skipped"},
        {**h100, "device": "gpu:1", "timestamp": "2026-11-03T00:00:00Z", "samples_per_s": "3"},
        {**h100, "device": "gpu:1", "framework": "pytorch", "timestamp": "2026-11-01T00:00:00Z",
         "samples_per_s": "4"},
    ]


def test_latest_keeps_each_machines_newest_measured_rows():
    kept = newest_rows(latest_rows())
    assert [r["samples_per_s"] for r in kept] == ["2", "3", "4"]  # the older run and the skip go


def test_latest_keeps_each_machines_main_build():
    """An experiment's other build run last (a generic x86-64 or ISA-capped trainbench, as
    bench_cpu_isa.sh runs them) is not the machine's present: its main build's newest rows are."""
    native = {"compiler": "gcc 12.2.0, -march=native", "cpu_isa": "avx512"}
    rows = [{**r, **native} for r in latest_rows()]
    amd = rows[1]
    rows += [{**amd, "timestamp": "2026-11-05T00:00:00Z", "samples_per_s": "9",
              "compiler": "gcc 12.2.0, generic x86-64"},
             {**amd, "timestamp": "2026-11-06T00:00:00Z", "samples_per_s": "8", "cpu_isa": "avx2"}]
    kept = newest_rows(rows)
    assert [r["samples_per_s"] for r in kept] == ["2", "3", "4"]


def test_latest_keeps_a_benchmark_that_only_another_build_measured():
    """The main build's rule holds among the rows of a benchmark it measured: a benchmark only
    another build ran keeps its newest rows (results/vm's epochs/ run, built before -march=native,
    had vanished from the charts), and the other build's rows of the main build's benchmarks
    still go."""
    native = {"compiler": "gcc 12.2.0, -march=native", "cpu_isa": "avx512"}
    rows = [{**r, **native} for r in latest_rows()]
    amd = rows[1]
    rows += [{**amd, "timestamp": "2026-11-05T00:00:00Z", "samples_per_s": "9",
              "compiler": "gcc 12.2.0", "cpu_isa": ""},
             {**amd, "kind": "epochs", "timestamp": "2026-10-01T00:00:00Z", "samples_per_s": "5",
              "compiler": "gcc 12.2.0", "cpu_isa": ""}]
    kept = newest_rows(rows)
    assert [r["samples_per_s"] for r in kept] == ["2", "3", "4", "5"]


def test_latest_counts_a_builds_measured_rows_not_its_skips():
    """A generic build run last on a CPU machine skips every GPU benchmark: its skips do not make
    it the machine's main build."""
    native = {"compiler": "gcc 12.2.0, -march=native", "cpu_isa": "avx512"}
    rows = [{**r, **native} for r in latest_rows()]
    generic = {**rows[1], "timestamp": "2026-11-05T00:00:00Z", "compiler": "gcc 12.2.0"}
    rows += [{**generic, "samples_per_s": "9"}] + [
        {**generic, "device": f"gpu:{n}", "status": "skipped", "samples_per_s": ""}
        for n in (1, 2, 4)]
    assert [r["samples_per_s"] for r in newest_rows(rows)] == ["2", "3", "4"]


def epochs_of_another_build(tmp_path) -> str:
    """gpu_epochs.csv with its epochs/ rows of another build than its 56 train/ rows (48 rows:
    not the machine's main build), as results/vm/fashion-mnist-epochs.csv is."""
    return rewrite_csv(GPU, tmp_path / "builds.csv", change=lambda row: {
        "compiler": "gcc 12.2.0" if row["benchmark"].startswith("epochs/")
        else "gcc 12.2.0, -march=native"})


def test_latest_draws_epochs_rows_of_another_build(tmp_path):
    r = plot(tmp_path / "out", "--latest", epochs_of_another_build(tmp_path))
    assert "skipped time_to_accuracy" not in r.stdout
    assert "time_to_accuracy" in charts_in(tmp_path / "out")


def test_a_chart_the_rows_latest_left_out_would_draw_says_so(tmp_path):
    """A newer run whose epochs/ rows all failed is the present --latest keeps: the chart is
    skipped, and the note says that the rows --latest left out would draw it."""
    builds = epochs_of_another_build(tmp_path)
    failed = rewrite_csv(builds, tmp_path / "failed.csv",
                         keep_row=lambda row: row["benchmark"].startswith("epochs/"),
                         change=lambda row: {"status": "failed", "message": "out of memory",
                                             "val_acc": "", "timestamp": "2026-12-02T08:00:00Z"})
    r = plot(tmp_path / "out", "--latest", builds, failed)
    line, = [x for x in r.stdout.splitlines() if x.startswith("skipped time_to_accuracy")]
    # 48 epochs/ rows of the older run, 3 configurations only skipped.
    assert line.endswith("among the rows --latest kept; it left out 51 rows (older runs, other "
                         "builds, configurations only skipped), with which this chart is drawn: "
                         "run without --latest"), line
    report = (tmp_path / "out" / "report.md").read_text()
    assert "it left out 51 rows" in report
    # Charts that the left-out rows would not draw either say nothing of them.
    assert not any("--latest" in x for x in r.stdout.splitlines()
                   if x.startswith("skipped ") and "time_to_accuracy" not in x)
    r = plot(tmp_path / "all", builds, failed)
    assert "skipped time_to_accuracy" not in r.stdout


def test_latest_names_machines_that_share_a_hostname_by_their_gpu_or_cpu():
    class Table:
        rows = latest_rows()

    data = Data([Table()], latest=True)
    assert data.series == ["vm (AMD EPYC)", "vm (H100)", "vm (H100) · pytorch"]


# ---- energy per sample, throttling, schema versions 2 and 3 together ------------------------

def csv_rows(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def energy_repetitions(path: str) -> dict:
    """benchmark -> the ok iteration rows' energy_j_per_sample values, read without tbcsv."""
    out: dict = {}
    for r in csv_rows(path):
        if r["status"] == "ok" and r["run_type"] == "iteration" and r["energy_j_per_sample"]:
            out.setdefault(r["benchmark"], []).append(float(r["energy_j_per_sample"]))
    return out


@pytest.fixture(scope="module")
def energy_chart(tmp_path_factory):
    out = tmp_path_factory.mktemp("energy")
    return out, plot(out, GPU_V3)


def test_energy_per_sample_is_drawn_from_a_v3_file(energy_chart):
    out, r = energy_chart
    assert f"wrote {out / 'energy_per_sample.png'}" in r.stdout
    assert_real_png(out / "energy_per_sample.png")
    text = svg_text(out / "energy_per_sample.svg")
    assert "GPU energy per sample" in text
    assert "energy per sample (mJ)" in text  # the smallest bar, mlp bf16, is ~0.27 mJ
    # Each bar's label is the median of its repetitions, in mJ.
    for benchmark, values in energy_repetitions(GPU_V3).items():
        assert f"{statistics.median(values) * 1e3:.3g}" in text.split(), benchmark
    # The machine line names the NVIDIA driver (v3's driver_version) and the CUDA driver API.
    assert "driver_version 580.159.04" in text and "cuda_driver_version 13.0" in text
    # Telemetry is a measurement, not machine context.
    assert "gpu_power_w" not in text and "gpu_sm_clock_min_mhz" not in text


def test_energy_values_are_the_medians_of_the_gpu_rows(tbcsv_mod):
    data = Data([tbcsv_mod.read_table(GPU_V3)])
    got = energy_per_sample(data)
    want = energy_repetitions(GPU_V3)
    assert len(want) == 8 and not any("/cpu/" in b for b in want)  # the cpu row has none
    names = {c: r["benchmark"] for r in data.rows for c in [config_of(r)]}
    assert {names[c] for _, c in got} == set(want)
    for (series, config), sample in got.items():
        values = want[names[config]]
        assert series == "h100-node"
        assert sample.center == pytest.approx(statistics.median(values))
        assert spread(sample)[1:] == (pytest.approx(min(values)), pytest.approx(max(values)))
    jobs = next(s for (_, c), s in got.items() if c.device == "gpu:1/jobs:2")
    assert len(jobs.values) == 3


def test_a_throttled_repetition_is_hatched_and_named(tbcsv_mod, energy_chart):
    data = Data([tbcsv_mod.read_table(GPU_V3)])
    throttled = throttling(data, energy_per_sample(data))
    assert [(s, c.model, c.device, c.precision) for s, c in throttled] == \
        [("h100-node", "resnet152", "gpu:1", "fp32")]
    assert list(throttled.values()) == [({"sw_power_cap+sw_thermal_slowdown": 1}, 3)]
    out, _ = energy_chart
    text = svg_text(out / "energy_per_sample.svg")
    assert (f"Throttled (hatched bars; gpu_throttle): {THROTTLED} on h100-node: "
            "sw_power_cap+sw_thermal_slowdown in 1 of 3 repetitions") in text
    assert "throttled in a repetition (gpu_throttle)" in text  # the legend entry
    svg = (out / "energy_per_sample.svg").read_text()
    assert svg.count('<pattern id="h') == 2  # the bar's hatch and the legend's


def test_no_throttle_no_hatch(tmp_path):
    calm = rewrite_csv(GPU_V3, tmp_path / "calm.csv",
                       keep_row=lambda row: row["benchmark"] != THROTTLED)
    plot(tmp_path / "out", calm)
    text = svg_text(tmp_path / "out" / "energy_per_sample.svg")
    assert "hrottled" not in text
    assert "<pattern" not in (tmp_path / "out" / "energy_per_sample.svg").read_text()


def test_energy_is_skipped_with_a_note_for_v2_files_and_its_old_chart_removed(tmp_path):
    plot(tmp_path, GPU_V3)
    assert (tmp_path / "energy_per_sample.svg").exists()
    r = plot(tmp_path, GPU_V2)
    notes = [line for line in r.stdout.splitlines() if line.startswith("skipped energy")]
    assert notes == ["skipped energy_per_sample: no ok gpu:* row has an energy_j_per_sample "
                     "value (schema_version 3 rows of a machine where NVML could be loaded)"]
    assert f"removed the old {tmp_path / 'energy_per_sample.png'}" in r.stdout
    assert charts_in(tmp_path) == set(GPU_EPOCH_CHARTS) - {"time_to_accuracy"}


@pytest.mark.parametrize("smallest, unit", [(2.5, "J"), (0.1, "J"), (0.0999, "mJ"),
                                            (2.7e-4, "mJ"), (9e-5, "µJ")])
def test_energy_unit_keeps_the_smallest_bar_readable(smallest, unit):
    factor, name = energy_unit(smallest)
    assert name == unit
    assert smallest / factor >= 0.1 or unit == "µJ"


def test_v2_and_v3_rows_of_one_machine_are_one_machine(tbcsv_mod, tmp_path):
    """driver_version changed meaning in v3 (13.0 -> 580.159.04); the machine must not split."""
    v2, v3 = tbcsv_mod.read_table(GPU_V2), tbcsv_mod.read_table(GPU_V3)
    assert machine_of(v2.rows[0]) == machine_of(v3.rows[0])
    # Two commits are two series (builds are never pooled), named by commit, not by driver.
    assert Data([v2, v3]).series == ["h100-node @ d4e5f60", "h100-node @ e5f6a7b"]
    # --latest: resnet152 measured only by the v2 run still belongs to the same machine.
    no_resnet = rewrite_csv(GPU_V3, tmp_path / "v3.csv",
                            keep_row=lambda row: "resnet152" not in row["benchmark"])
    data = Data([v2, tbcsv_mod.read_table(no_resnet)], latest=True)
    assert data.series == ["h100-node"]
    assert {r["schema_version"] for r in data.rows} == {"2", "3"}
    line, = describe_machines(data, data.rows)
    assert "driver_version 580.159.04" in line and "cuda_driver_version 13.0" in line
    assert not re.search(r"(?<!cuda_)driver_version 13\.0", line), line


def test_energy_notes_the_rows_without_the_column(tmp_path):
    no_resnet = rewrite_csv(GPU_V3, tmp_path / "v3.csv",
                            keep_row=lambda row: "resnet152" not in row["benchmark"])
    r = plot(tmp_path / "out", "--latest", GPU_V2, no_resnet)
    assert "wrote" in r.stdout and "skipped energy_per_sample" not in r.stdout
    text = svg_text(tmp_path / "out" / "energy_per_sample.svg")
    assert ("No energy_j_per_sample (rows before schema_version 3, or NVML not loaded), not "
            "drawn: h100-node (3 configurations)") in text  # resnet152 gpu:1 x2, gpu:2
    assert "resnet152" not in text  # no panel for it


# ---- the headline: looks, size, machines, whiskers, scales ------------------------------------

TIMELINE = str(ROOT / "results/h100/resnet224-timeline-20261124.csv")  # nvlink4 and pcie5
H100_DIR = ROOT / "results" / "h100"


def draw_headline(data: Data):
    """The headline's figure, drawn in this process (Agg), and its selection."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tbplot.figures import Figures
    return plt, chart_headline(Figures(plt, data), data), select(data)


def bar_patches(fig) -> list:
    """The bars of every panel (the legend's patches are the header's, not the axes')."""
    return [p for ax in fig.axes for p in ax.patches]


def texts_of(fig) -> list[str]:
    import matplotlib.text
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]


def conf(device, variant="", *, gpu=False, n=None, link=""):
    backend = "gpu" if gpu else "cpu"
    return Config("train", "mlp", "mnist", device, "fp32", "100", variant, "", backend, n,
                  "predicted" if link else "measured", link)


def test_every_configuration_of_the_headline_looks_different():
    """Seven CPU variants, more GPU devices than the palette has colours, and predictions of
    one N over two links and from two sources: no two configurations share colour and hatch,
    and the legend names each once (the newcomer's cpu:1 and cpu lr:0.01 looked alike, as did
    gpu:2 over pcie5 and over nvlink4)."""
    cpus = [conf("cpu", v) for v in ("", "data_on_device", "optimizer:sgd", "lr:0.01",
                                      "optimizer:sgd/lr:0.01", "lr:0.01/data_on_device")]
    cpus += [conf("cpu:1"), conf("cpu:2"), conf("cpu:1", "lr:0.01"), conf("mpi:2", n=2)]
    gpus = [conf(f"gpu:{n}", gpu=True, n=n) for n in range(1, 11)] + [
        conf("gpu:1", "data_on_device", gpu=True), conf("gpu:1", "timeline:off", gpu=True)]
    predicted = [conf(f"gpu:{n}", f"predicted:{link}{source}", gpu=True, n=n, link=link)
                 for n in (2, 4, 8) for link in ("nvlink4", "pcie5")
                 for source in ("", "/from:gpu:1")]
    bars = {("m", c): None for c in cpus + gpus + predicted}
    drawn = looks(bars)
    assert len(drawn) == len(bars)  # every configuration has its own legend entry
    assert len(set(drawn.values())) == len(drawn), drawn
    assert drawn[look_key(conf("cpu:1"))] != drawn[look_key(conf("cpu", "lr:0.01"))]
    pcie5, nvlink4 = (drawn[look_key(conf("gpu:2", f"predicted:{link}", gpu=True, n=2, link=link))]
                      for link in ("pcie5", "nvlink4"))
    assert pcie5.colour == nvlink4.colour and pcie5.hatch != nvlink4.hatch  # one N, two links
    # A variant keeps its device's colour; a cpu bar never takes a GPU's colour.
    assert drawn[look_key(conf("cpu", "lr:0.01"))].colour == drawn[look_key(conf("cpu"))].colour
    cpu_colours = {drawn[look_key(c)].colour for c in cpus if not c.data_parallel}
    assert not cpu_colours & {drawn[look_key(c)].colour for c in gpus}
    labels = [label for _, label in legend_entries(drawn)]
    assert len(set(labels)) == len(labels), labels
    assert "gpu:2 predicted for pcie5 (not measured)" in labels
    assert "gpu:2 predicted for nvlink4, from gpu:1 (not measured)" in labels


def test_the_drawn_headline_gives_each_configuration_its_look(tbcsv_mod):
    """Drawn from files with CPU variants and predictions over two links: every bar is drawn,
    in its configuration's look, and distinct configurations in distinct looks."""
    files = [TIMELINE, data_file("optimizer_sgd_v4.csv"), data_file("optimizer_adam_v4.csv"),
             TWO_MACHINES[0]]
    data = Data([tbcsv_mod.read_table(f) for f in files])
    plt, fig, chosen = draw_headline(data)
    drawn = looks(chosen.bars)
    patches = bar_patches(fig)
    assert len(patches) == len(chosen.bars)  # nothing dropped
    from matplotlib.colors import to_rgba
    styles = {(to_rgba(p.get_facecolor()), p.get_hatch() or "") for p in patches}
    assert styles == {(to_rgba(look.colour), look.hatch) for look in drawn.values()}
    assert len(styles) == len({look_key(c) for _, c in chosen.bars}) >= 6
    links = {c.link for _, c in chosen.predicted}
    assert links == {"nvlink4", "pcie5"}
    plt.close(fig)


def many_machines(tmp_path, count=6) -> list[str]:
    """report_gpu_v4.csv as if run on `count` machines: a headline too wide for one row."""
    return [rewrite_csv(data_file("report_gpu_v4.csv"), tmp_path / f"node{i}.csv",
                        change=lambda row, i=i: {"host": f"node-{i}"}) for i in range(count)]


def test_a_headline_of_many_machines_stays_legible(tmp_path, tbcsv_mod):
    """Many machines: the figure stays within the width where its text reads as the README
    shows it, the panels too wide for it split into parts on one y scale (named 1 of N), and
    every bar is still drawn; text no smaller than the README's headline needs."""
    data = Data([tbcsv_mod.read_table(f) for f in many_machines(tmp_path)])
    plt, fig, chosen = draw_headline(data)
    width, _ = fig.get_size_inches()
    assert width <= MAX_WIDTH_IN + 1e-6, width
    assert len(bar_patches(fig)) == len(chosen.bars)
    titles = [ax.get_title() for ax in fig.axes]
    parts = [t for t in titles if " of " in t]
    assert parts and any("(1 of " in t for t in parts), titles
    # The parts of one panel share its y axis, so their bars compare.
    by_panel: dict = {}
    for ax in fig.axes:
        by_panel.setdefault(ax.get_title().split(" (")[0], set()).add(
            (ax.get_yscale(), tuple(round(v, 9) for v in ax.get_ylim())))
    assert all(len(scales) == 1 for scales in by_panel.values()), by_panel
    for ax in fig.axes:
        assert all(t.get_fontsize() >= 9 for t in ax.get_xticklabels())
        assert all(t.get_fontsize() >= 8 for t in ax.texts)  # the bars' labels
    plt.close(fig)
    # The README's headline (one machine) keeps two panels a row, within the same width.
    plt, fig, _ = draw_headline(Data([tbcsv_mod.read_table(data_file("report_gpu_v4.csv"))]))
    assert fig.get_size_inches()[0] <= MAX_WIDTH_IN and not any(" of " in ax.get_title()
                                                                for ax in fig.axes)
    plt.close(fig)


def test_one_core_is_one_core(tmp_path, tbcsv_mod):
    assert short_cpu("AMD EPYC 7B13", "1") == "AMD EPYC 7B13, 1 core"
    assert short_cpu("AMD EPYC 7B13", "2") == "AMD EPYC 7B13, 2 cores"
    assert host_cpu("Intel(R) Xeon(R) Processor", "16") == "16-core Intel Xeon"
    one = rewrite_csv(TWO_MACHINES[0], tmp_path / "one.csv", change=lambda row: {"cores": "1"})
    data = Data([tbcsv_mod.read_table(p) for p in (TWO_MACHINES[0], one)])
    names = [data.machine_name(s) for s in data.series]
    assert names == ["vm (AMD EPYC, 2 cores)", "vm (AMD EPYC, 1 core)"], names
    assert any(line.startswith("vm (AMD EPYC, 1 core): AMD EPYC, 1 core ·")
               for line in describe_machines(data, data.rows))
    plt, fig, _ = draw_headline(data)
    text = " ".join(texts_of(fig))
    assert "1 core)" in text and "1 cores" not in text
    plt.close(fig)


def test_a_gpu_machines_cpu_bar_names_its_host(tbcsv_mod):
    """The reference's cpu bar is its GPU machine's host CPU, and its group says so from what
    the rows say of the machine (`H100 host: 16-core Intel Xeon`); its GPU bars stay `H100`."""
    refs, _ = references.load_references([str(H100_DIR)])
    data = Data([tbcsv_mod.read_table(data_file("default_cpu_v5.csv"))], references=refs)
    chosen = select(data)
    rows = [r for r in data.reference_rows if config_of(r).device == "cpu"]
    host = host_cpu(rows[0]["cpu_model"], rows[0]["cores"])
    assert host.endswith("-core Intel Xeon"), host
    for panel, groups in panels(data, chosen).items():
        theirs = [g for g in groups if {s for s, _ in g.keys} == {"H100"}]
        cpu, = [g for g in theirs if all(not c.on_gpu for _, c in g.keys)]
        gpu, = [g for g in theirs if all(c.on_gpu for _, c in g.keys)]
        assert cpu.label == f"H100 host:\n{host}\nfp32", cpu.label
        assert gpu.label == "H100\nfp32", gpu.label
        # This machine has no GPU: its cpu bars are its own, named as before.
        assert any(g.label.startswith("vm (") and "host" not in g.label for g in groups), panel
    # A GPU machine named by its CPU (no gpu_name in its rows) is not named twice.
    data = Data([tbcsv_mod.read_table(p) for p in TWO_MACHINES + [GPU, GPU_V3]])
    labels = [g.label.replace("\n", " ") for groups in panels(data, select(data)).values()
              for g in groups]
    assert "h100-node (H100 80GB HBM3) host: 16-core Intel Xeon Platinum 8480+ fp32" in labels
    assert not any("gpu-node" in label and "host:" in label for label in labels), labels


def noisy(tmp_path) -> str:
    """machine_a.csv with its mlp cpu:1 repetitions spread to a coefficient of variation of
    56% (the newcomer's noisy row)."""
    rates = iter(["3000", "6000", "9000", "12000", "16500"])
    return rewrite_csv(TWO_MACHINES[0], tmp_path / "noisy.csv", change=lambda row: (
        {"samples_per_s": next(rates)} if row["benchmark"] == "train/mlp/mnist/cpu:1/fp32/bs:100"
        and row["run_type"] == "iteration" else {}))


def test_measured_bars_carry_the_min_max_of_their_repetitions(tmp_path, tbcsv_mod):
    src = noisy(tmp_path)
    values: dict = {}
    for r in csv_rows(src):
        if r["status"] == "ok" and r["run_type"] == "iteration":
            values.setdefault(r["benchmark"], []).append(float(r["samples_per_s"]))
    spread_ = values["train/mlp/mnist/cpu:1/fp32/bs:100"]
    assert statistics.stdev(spread_) / statistics.mean(spread_) == pytest.approx(0.56, abs=0.02)
    data = Data([tbcsv_mod.read_table(src)])
    plt, fig, chosen = draw_headline(data)
    names = {data.key(r): r["benchmark"] for r in data.step_rows}
    want = {k: (min(values[names[k]]), max(values[names[k]])) for k in chosen.bars}
    assert {k: chosen.whisker(k) for k in chosen.bars} == pytest.approx(want)
    # Each bar's whisker is drawn from its min to its max.
    drawn = []
    for ax in fig.axes:
        for container in ax.containers:
            if hasattr(container, "has_yerr") and container.has_yerr:
                (x, low), (_, high) = container.lines[2][0].get_segments()[0]
                drawn.append((low, high))
    assert sorted(drawn) == pytest.approx(sorted(want.values()))
    noisy_low, noisy_high = want[next(k for k, b in names.items()
                                      if b == "train/mlp/mnist/cpu:1/fp32/bs:100")]
    assert (noisy_low, noisy_high) == (3000, 16500)  # visible as noisy
    # The chart and the report say what the whiskers are.
    assert "Whiskers: min–max over repetitions" in " ".join(brief_notes(chosen))
    assert "Whiskers: min–max of the repetitions" in caption(data)
    plt.close(fig)


def test_a_median_aggregate_or_one_repetition_has_no_whisker(tbcsv_mod):
    data = Data([tbcsv_mod.read_table(data_file("aggregates_only.csv"))])
    chosen = select(data)
    assert chosen.bars and not any(chosen.whisker(k) for k in chosen.bars)
    assert "Whiskers" not in " ".join(brief_notes(chosen))


def test_each_panel_says_its_scale(tbcsv_mod):
    """A CPU-only machine's panels are linear, those with GPU bars log: each y axis names its
    scale, and where a chart mixes them, each panel's title does too."""
    data = Data([tbcsv_mod.read_table(p)
                 for p in (TWO_MACHINES[0], data_file("report_gpu_v4.csv"))])
    plt, fig, _ = draw_headline(data)
    scales = set()
    for ax in fig.axes:
        said = "log scale" if ax.get_yscale() == "log" else "linear scale"
        scales.add(said)
        assert ax.get_ylabel().endswith(f"({said})"), ax.get_ylabel()
        assert ax.get_title().endswith(f" · {said}"), ax.get_title()
    assert scales == {"log scale", "linear scale"}
    plt.close(fig)
    plt, fig, _ = draw_headline(Data([tbcsv_mod.read_table(TWO_MACHINES[0])]))
    assert all(ax.get_ylabel().endswith("(linear scale)") and "scale" not in ax.get_title()
               for ax in fig.axes)
    plt.close(fig)


# ---- the charts' scaffolding and what each says (found by the report audit) --------------------

def draw_chart(draw, data: Data):
    """A chart's figure, drawn in this process (Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tbplot.figures import Figures
    return plt, draw(Figures(plt, data), data)


def test_bar_labels_are_plain_numbers_with_a_suffix_from_a_thousand():
    from tbplot.figures import si
    assert [si(v) for v in (999, 1000, 1500, 12345, 2.5e6, 3e9, 0.5)] == [
        "999", "1k", "1.5k", "12.3k", "2.5M", "3G", "0.5"]
    assert [si(v) for v in (999.7, 999_700, -1500)] == ["1k", "1M", "-1.5k"]  # not 1e+03k


def test_a_log_axis_is_labelled_in_plain_numbers_on_its_own_axis():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tbplot.figures import log_scale
    fig, ax = plt.subplots()
    log_scale(ax, "y", 1, 1e4)
    assert ax.get_yscale() == "log" and ax.yaxis.get_major_formatter()(1000, 0) == "1k"
    assert ax.get_xscale() == "linear" and ax.xaxis.get_major_formatter()(1000, 0) != "1k"
    plt.close(fig)


def test_the_machine_lines_show_six_machines_and_count_the_rest(tmp_path, tbcsv_mod):
    six = Data([tbcsv_mod.read_table(f) for f in many_machines(tmp_path, 6)])
    lines = describe_machines(six, six.rows)
    assert [line.split(":")[0] for line in lines] == [f"node-{i}" for i in range(6)]
    seven = Data([tbcsv_mod.read_table(f) for f in many_machines(tmp_path, 7)])
    lines = describe_machines(seven, seven.rows)
    assert len(lines) == 6 and lines[-1] == "… and 2 more machines", lines


def test_a_bar_panel_names_each_group_under_its_bars(tbcsv_mod):
    """samples_per_s: configurations cpu first, then by N, each tick under its own bars (one a
    machine), precision and batch named only where they vary, and skipped marked where a bar
    would be."""
    from tbplot.charts.samples_per_s import chart_samples_per_s
    data = Data([tbcsv_mod.read_table(p) for p in TWO_MACHINES])
    plt, fig = draw_chart(chart_samples_per_s, data)
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["cpu", "cpu:1", "cpu:4"], ticks
    assert ax.get_yscale() == "log"
    # Each bar stands within its tick's group, the first machine's left of the second's.
    bars = sorted((p.get_x() + p.get_width() / 2, p.get_facecolor()) for p in ax.patches)
    for tick, (x, _) in zip([0, 0, 1, 1, 2], bars):
        assert abs(x - tick) < 0.4, (tick, x)
    assert bars[0][1] == bars[2][1] != bars[1][1]  # one colour per machine, in order
    assert [t.get_text() for t in ax.texts].count("skipped") == 1  # vm's cpu:4
    # Whiskers: each bar's min-max over its repetitions.
    got = tbcsv_mod.samples(data.step_rows, data.key, "samples_per_s")
    want = sorted((low, high) for (_, c), sample in got.items() if c.model == "mlp"
                  for _, low, high in [spread(sample)] if high > low)
    drawn = sorted(tuple(y for _, y in c.lines[2][0].get_segments()[0])
                   for c in ax.containers if getattr(c, "has_yerr", False))
    assert want and drawn == pytest.approx(want)
    plt.close(fig)
    from tbplot.figures import config_labels
    configs = [Config("train", "mlp", "mnist", "cpu", p, b) for p, b in
               (("fp32", "100"), ("fp32", "8"), ("bf16", "100"))]
    assert config_labels(configs[:2]) == ["cpu\nbs:100", "cpu\nbs:8"]
    assert config_labels([configs[0], configs[2]]) == ["cpu\nfp32", "cpu\nbf16"]


def test_a_speedup_bar_says_what_differs_from_its_cpu_row(tbcsv_mod):
    """speedup_vs_cpu: a bf16 bar over the fp32 cpu row says `bf16 vs fp32` under its ratio; the
    1× line is drawn at 1 on a log axis (ratios of 1 to 234) that the notes call log."""
    from tbplot.charts.speedup_vs_cpu import chart_speedup
    data = Data([tbcsv_mod.read_table(data_file("report_gpu_v4.csv"))])
    plt, fig = draw_chart(chart_speedup, data)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "124×\nbf16 vs fp32" in texts and "234×\nbf16 vs fp32" in texts, texts
    for ax in fig.axes:
        assert ax.get_yscale() == "log" and ax.get_ylabel() == "speedup over cpu (×)"
        assert any(list(line.get_ydata()) == [1.0, 1.0] for line in ax.get_lines())
    assert "dashed line: 1× (no speedup). Log scale." in " ".join(texts_of(fig))
    plt.close(fig)


def test_a_horizontal_bar_chart_keeps_the_benchmarks_order_top_down(tbcsv_mod):
    """host_cpu_per_step: benchmarks in the order of the rows from the top, each name at the
    middle of its group, the machines' bars in their order within it."""
    from tbplot.charts.host_cpu_per_step import chart_host_cpu
    data = Data([tbcsv_mod.read_table(p) for p in TWO_MACHINES])
    plt, fig = draw_chart(chart_host_cpu, data)
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_yticklabels()]
    ok = {r["benchmark"] for r in data.step_rows if r["status"] == "ok"}
    assert names == [b for b in dict.fromkeys(r["benchmark"] for r in data.step_rows)
                     if b in ok], names
    bottom, top = ax.get_ylim()
    assert bottom > top  # the first benchmark at the top
    ys = sorted(p.get_y() + p.get_height() / 2 for p in ax.patches)
    ticks = list(ax.get_yticks())
    for tick in ticks:
        mine = [y for y in ys if abs(y - tick) <= 0.5]
        assert mine and abs(sum(mine) / len(mine) - tick) < 1e-9, (tick, mine)
    from matplotlib.colors import to_rgba
    first = sorted(ax.patches, key=lambda p: p.get_y())[:2]  # the first benchmark's
    assert [p.get_facecolor() for p in first] == [to_rgba(data.colour(s)) for s in data.series]
    assert ax.texts[0].get_text().endswith("cores busy") and " ms" in ax.texts[0].get_text()
    plt.close(fig)


def test_the_scaling_chart_draws_percent_against_the_perfect_line(tbcsv_mod):
    """scaling_efficiency: each line in percent from its gpu:1 point, a label per N >= 2 point,
    the dashed 100% line, and a legend naming each line's precision and batch."""
    from tbplot.charts.scaling_efficiency import chart_scaling
    data = Data([tbcsv_mod.read_table(GPU)])
    lines = scaling_lines(data)
    plt, fig = draw_chart(chart_scaling, data)
    for ax in fig.axes:
        (_, _, precision, batch), eff = next((k, v) for k, v in lines.items()
                                             if panel_title(k[1]) == ax.get_title())
        curve, perfect = ax.get_lines()
        assert list(curve.get_xdata()) == sorted(eff)
        assert list(curve.get_ydata()) == pytest.approx([100 * e for _, e in sorted(eff.items())])
        assert list(perfect.get_ydata()) == [100, 100]
        assert [t.get_text() for t in ax.texts] == [f"{100 * e:.0f}%" for n, e in sorted(eff.items())
                                                    if n > 1]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"{precision} {batch}"]
        assert ax.get_xlabel() == "devices (N of gpu:N)"
        assert ax.get_ylabel() == "scaling efficiency (%)"
    plt.close(fig)


def test_time_to_accuracy_names_each_configurations_line_style(tbcsv_mod):
    """time_to_accuracy: the legend names the configurations in their line styles, cpu first;
    a time axis over more than 10x is log and says so."""
    from tbplot.charts.time_to_accuracy import chart_time_to_accuracy
    data = Data([tbcsv_mod.read_table(GPU)])
    curves = accuracy_curves(data)
    plt, fig = draw_chart(chart_time_to_accuracy, data)
    for ax in fig.axes:
        legend = ax.get_legend()
        names = [t.get_text() for t in legend.get_texts()]
        assert names == ["cpu", "gpu:1", "gpu:2"]
        styles = [h.get_linestyle() for h in legend.get_lines()]
        drawn = {line.get_linestyle(): (list(line.get_xdata()), list(line.get_ydata()))
                 for line in ax.get_lines()}
        for name, style in zip(names, styles):
            points = next(p for (_, c), p in curves.items()
                          if c.device == name and panel_title(c.panel) == ax.get_title())
            assert drawn[style] == ([t for t, _ in points], [a for _, a in points]), name
        assert ax.get_xscale() == "log" and ax.get_xlabel() == "elapsed time (s, log scale)"
    plt.close(fig)


def test_an_accuracy_of_one_is_a_fraction_shown_in_percent(tmp_path, tbcsv_mod):
    from tbplot.charts.time_to_accuracy import chart_time_to_accuracy
    perfect = rewrite_csv(GPU, tmp_path / "perfect.csv", change=lambda row: (
        {"val_acc": "1"} if row["val_acc"] else {}))
    data = Data([tbcsv_mod.read_table(perfect)])
    plt, fig = draw_chart(chart_time_to_accuracy, data)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "validation accuracy (%)"
    assert ax.yaxis.get_major_formatter()(1.0, 0) == "100%"
    plt.close(fig)


def headline_texts(data: Data) -> dict:
    """(series, device, variant, precision) -> the lines of the headline's bar label."""
    chosen = select(data)
    by_panel = panels(data, chosen)
    set_labels(by_panel, chosen, bar_labels(data, chosen))
    return {(k[0], k[1].device, k[1].variant, k[1].precision): g.texts[k]
            for groups in by_panel.values() for g in groups for k in g.keys
            if k[1].model == "mlp"}


def test_the_headline_labels_a_bar_with_its_rate_its_speedup_and_what_differs(tbcsv_mod):
    texts = headline_texts(Data([tbcsv_mod.read_table(data_file("report_gpu_v4.csv"))]))
    host = "fixture-host"
    assert texts == {(host, "cpu", "", "fp32"): ["35.5k", "1× (cpu)"],
                     (host, "gpu:1", "", "fp32"): ["518k", "14.6×"],
                     (host, "gpu:2", "", "fp32"): ["748k", "21.1×"],
                     (host, "gpu:1", "", "bf16"): ["1.24M", "35.1×", "bf16 vs fp32"],
                     (host, "gpu:2", "", "bf16"): ["1.79M", "50.6×", "bf16 vs fp32"]}, texts


def test_a_cpu_variants_bar_is_not_labelled_as_the_cpu_row(tbcsv_mod):
    """`1× (cpu)` is the plain cpu row's: a cpu optimizer:adam bar is another configuration."""
    data = Data([tbcsv_mod.read_table(data_file(f))
                 for f in ("optimizer_sgd_v4.csv", "optimizer_adam_v4.csv")])
    texts = headline_texts(data)
    assert texts[("vm", "cpu", "", "fp32")] == ["10.5k", "1× (cpu)"]
    assert "1× (cpu)" not in texts[("vm", "cpu", "optimizer:adam", "fp32")]
    assert "A dotted, lined or circled bar is a variant of its device" in caption(data)


def test_the_headline_says_what_its_whiskers_and_hatching_are(tbcsv_mod):
    measured = select(Data([tbcsv_mod.read_table(data_file("report_cpu_v4.csv"))]))
    assert whiskers_said(measured) == "Whiskers: min–max over repetitions."
    assert "hatching" not in " ".join(brief_notes(measured))
    both = select(Data([tbcsv_mod.read_table(str(H100_DIR / "check-20261127T060400Z/timeline.csv"))]))
    assert whiskers_said(both) == ("Whiskers: min–max over repetitions (measured bars), the "
                                   "prediction's band (hatched bars).")
    assert "diagonal hatching: predicted, not measured" in brief_notes(both)[1]


def test_peak_memory_labels_each_bar_with_its_stacks_total_in_binary_units(tbcsv_mod):
    """peak_memory: a bar's label is the sum of its stacked parts (not one part), in GiB, MiB or
    KiB of 1024, naming its machine where several are drawn; the notes say what is stacked."""
    from tbplot.charts.peak_memory import byte_unit, chart_peak_memory, fmt_bytes
    assert [fmt_bytes(v) for v in (2 ** 30, 1.5 * 2 ** 30, 2 ** 20, 1010 * 2 ** 20)] == [
        "1 GiB", "1.5 GiB", "1 MiB", "1,010 MiB"]  # not 1.01e+03 MiB
    assert byte_unit(2 ** 10) == (2 ** 10, "KiB")
    data = Data([tbcsv_mod.read_table(p) for p in (GPU, GPU_V3)])
    plt, fig = draw_chart(chart_peak_memory, data)
    ax = fig.axes[0]
    factor, unit = byte_unit(max(p.get_x() + p.get_width() for p in ax.patches) * 2 ** 30)
    assert unit == "GiB" and ax.get_xlabel() == "peak memory (GiB)"
    ends: dict = {}
    for p in ax.patches:  # a bar's segments share its y; the last ends where the bar does
        y = round(p.get_y() + p.get_height() / 2, 6)
        ends[y] = max(ends.get(y, 0.0), p.get_x() + p.get_width())
    labels = {round(t.xy[1], 6): t.get_text() for t in ax.texts}
    assert set(labels) == set(ends)
    for y, end in ends.items():
        total, machine = labels[y].split(" · ")
        assert total == fmt_bytes(end * 2 ** 30) and machine in data.series, labels[y]
    assert "Stacked: the mem_* columns (bytes allocated, by purpose)." in " ".join(texts_of(fig))
    plt.close(fig)


def test_an_energy_label_of_a_thousand_or_more_is_written_whole(tmp_path, tbcsv_mod):
    """The unit keeps the smallest bar readable, so the largest can pass 1,000 of it: written
    whole (1,660), as the H100's and H200's charts read 1.42e+03 and 1.87e+03."""
    heavy = rewrite_csv(GPU_V3, tmp_path / "heavy.csv", change=lambda row: (
        {"energy_j_per_sample": str(5 * float(row["energy_j_per_sample"]))}
        if "resnet152" in row["benchmark"] and row["energy_j_per_sample"] else {}))
    data = Data([tbcsv_mod.read_table(heavy)])
    got = energy_per_sample(data)
    plt, fig = draw_chart(chart_energy, data)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert fig.axes[0].get_ylabel() == "energy per sample (mJ)"
    want = [f"{1e3 * sample.center:,.0f}" for (_, c), sample in got.items()
            if c.model == "resnet152"]
    assert want and all(w in texts for w in want) and any(len(w) > 3 for w in want), (want, texts)
    assert not any("e+" in t for t in texts), texts
    plt.close(fig)


def test_host_cpu_labels_give_the_time_its_unit_and_the_cores_busy(tbcsv_mod):
    """The axis in milliseconds while every step takes under a second (machine_a.csv), else in
    seconds (gpu_epochs.csv's resnet152 on the CPU); each label in its own bar's unit, so a GPU
    step beside seconds reads 87.3 µs, not 8.73e-05 s."""
    from tbplot.charts.host_cpu_per_step import chart_host_cpu, fmt_seconds
    assert [fmt_seconds(v) for v in (2.5, 0.0123, 8.73e-05, 1234.0)] == [
        "2.5 s", "12.3 ms", "87.3 µs", "1,234 s"]
    for path, unit, units in ((TWO_MACHINES[0], "ms", {"ms", "µs"}), (GPU, "s", {"s", "ms", "µs"})):
        plt, fig = draw_chart(chart_host_cpu, Data([tbcsv_mod.read_table(path)]))
        ax = fig.axes[0]
        assert ax.get_xlabel() == f"host CPU time per step ({unit}, log scale)"
        said = set()
        for t in ax.texts:
            got = re.fullmatch(r"[\d.,]+ (s|ms|µs) · \d+\.\d\d cores busy", t.get_text())
            assert got, t.get_text()
            said.add(got.group(1))
        assert said == units, said
        plt.close(fig)


def test_energy_counts_one_configuration_without_the_column_in_the_singular(tmp_path, tbcsv_mod):
    from tbplot.charts.energy_per_sample import is_gpu_row, lacking_notes
    no_resnet = rewrite_csv(GPU_V3, tmp_path / "v3.csv",
                            keep_row=lambda row: "resnet152" not in row["benchmark"])
    one = rewrite_csv(GPU_V2, tmp_path / "v2.csv",
                      keep_row=lambda row: row["benchmark"].startswith("train/resnet152/cifar10/gpu:2/"))
    data = Data([tbcsv_mod.read_table(one), tbcsv_mod.read_table(no_resnet)], latest=True)
    gpu_rows = [r for r in data.step_rows if is_gpu_row(r)]
    note, = lacking_notes(data, energy_per_sample(data), gpu_rows)
    assert note.endswith("not drawn: h100-node (1 configuration)"), note


def test_a_trainbench_gpu_row_is_stacked_by_purpose_though_it_has_the_devices_peak(tbcsv_mod):
    """trainbench's GPU rows have both the mem_* breakdown and mem_peak_bytes: their bars are the
    breakdown; the device's peak alone is for a peer framework's rows, which have no breakdown."""
    from tbplot.charts.peak_memory import DEVICE_PEAK, chart_peak_memory
    data = Data([tbcsv_mod.read_table(str(H100_DIR / "default-20261127T060200Z.csv"))])
    assert any(r.get("mem_peak_bytes") and r.get("mem_weights_bytes") for r in data.step_rows)
    plt, fig = draw_chart(chart_peak_memory, data)
    legend = texts_of(fig)
    assert "weights" in legend and "activations" in legend and DEVICE_PEAK not in legend, legend
    plt.close(fig)


def test_time_to_accuracy_reads_epochs_in_order_and_never_an_aggregate(tmp_path, tbcsv_mod):
    """The curves of gpu_epochs.csv are the same with its rows in reverse order and with a
    stddev aggregate row after each epoch row (whose val_acc and elapsed_s are spreads)."""
    with open(GPU, newline="") as f:
        rows = list(csv.DictReader(f))
    want = accuracy_curves(Data([tbcsv_mod.read_table(GPU)]))

    def curves_of(name, body):
        path = tmp_path / name
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(body)
        return accuracy_curves(Data([tbcsv_mod.read_table(str(path))]))

    assert curves_of("reversed.csv", rows[::-1]) == want
    spreads = [r for row in rows for r in ([row] + ([{**row, "run_type": "aggregate",
                                                       "aggregate": "stddev", "repetition": "",
                                                       "val_acc": "0.001", "elapsed_s": "0.5"}]
                                                     if row["epoch"] else []))]
    assert curves_of("aggregates.csv", spreads) == want


def test_repetitions_that_agree_have_no_whisker_and_the_notes_none(tmp_path, tbcsv_mod):
    same = rewrite_csv(data_file("report_cpu_v4.csv"), tmp_path / "same.csv",
                       change=lambda row: {"samples_per_s": "1000"} if row["samples_per_s"] else {})
    chosen = select(Data([tbcsv_mod.read_table(same)]))
    assert chosen.bars and all(chosen.bars[k].repetitions >= 2 for k in chosen.bars)
    assert not any(chosen.whisker(k) for k in chosen.bars) and whiskers_said(chosen) == ""


def test_a_bar_whose_pair_differs_in_batch_says_it_once(tbcsv_mod):
    """The H200's ImageNet bars (bs 128 over the cpu row's bs 8) in a panel of two batches: the
    pair's `bs 128 vs 8` says the batch, no `bs:128` line besides."""
    data = Data([tbcsv_mod.read_table(str(ROOT / "results/h200/default-20261128T062641Z.csv"))])
    chosen = select(data)
    by_panel = panels(data, chosen)
    set_labels(by_panel, chosen, bar_labels(data, chosen))
    texts = [g.texts[k] for groups in by_panel.values() for g in groups for k in g.keys
             if k[1].dataset == "imagenet" and k[1].on_gpu and not k[1].predicted]
    assert texts and all("bs 128 vs 8" in t for t in texts), texts
    assert not any("bs:128" in t for t in texts), texts


def test_reference_bars_are_over_this_cpu_only_beside_one_input_machine(tbcsv_mod):
    from tbplot.charts.headline import this_machine
    one = Data([tbcsv_mod.read_table(TWO_MACHINES[0])],
               references=references.load_references([str(H100_DIR)])[0])
    assert this_machine(one, select(one)) == "vm"
    two = Data([tbcsv_mod.read_table(p) for p in TWO_MACHINES],
               references=references.load_references([str(H100_DIR)])[0])
    chosen = select(two)
    assert chosen.references and this_machine(two, chosen) is None


def test_a_split_panels_parts_are_numbered_from_one(tmp_path, tbcsv_mod):
    data = Data([tbcsv_mod.read_table(f) for f in many_machines(tmp_path)])
    plt, fig, _ = draw_headline(data)
    parts: dict = {}
    for ax in fig.axes:
        found = re.search(r"^(.*) \((\d+) of (\d+)\)", ax.get_title())
        if found:
            parts.setdefault(found.group(1), []).append((int(found.group(2)), int(found.group(3))))
    assert parts, [ax.get_title() for ax in fig.axes]
    for numbers in parts.values():
        assert numbers == [(i + 1, len(numbers)) for i in range(len(numbers))], numbers
    plt.close(fig)


def test_the_headlines_caption_lists_cpu_configurations_in_device_order(tmp_path, tbcsv_mod):
    """`cpu, cpu:4, cpu:16`: by device, not as text (where cpu:16 comes before cpu:4)."""
    def renamed(row):
        names = {"cpu:1": "cpu:16", "mpi:2": "cpu:4"}
        device = names.get(row["device"], row["device"])
        return {"device": device, "benchmark": row["benchmark"].replace(f"/{row['device']}/", f"/{device}/")}
    threads = rewrite_csv(data_file("report_cpu_v4.csv"), tmp_path / "threads.csv", change=renamed)
    said = caption(Data([tbcsv_mod.read_table(threads)]))
    assert "drawn with the CPU configurations it has (cpu, cpu:4, cpu:16;" in said, said

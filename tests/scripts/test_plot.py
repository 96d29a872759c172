"""Tests of scripts/plot.py: which charts it writes for which columns, that every PNG and SVG
is a real, non-blank image naming the machines and the run, the numbers behind the speedup,
scaling and time-to-accuracy charts, bad input, and the message when matplotlib is missing."""
import filecmp
import os
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import (BAD_INPUTS, FIXTURES, SCRIPTS, assert_one_line_error, bad_path, data_file,
                      rewrite_csv, run_script)

ALL_CHARTS = ["samples_per_s", "speedup_vs_cpu", "scaling_efficiency", "time_to_accuracy",
              "peak_memory", "host_cpu_per_step"]
CPU_CHARTS = ["samples_per_s", "speedup_vs_cpu", "peak_memory", "host_cpu_per_step"]
TWO_MACHINES = [data_file("machine_a.csv"), data_file("machine_b.csv")]
GPU = data_file("gpu_epochs.csv")


def plot(out: Path, *csvs):
    r = run_script("plot.py", *csvs, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return r


def charts_in(out: Path) -> set[str]:
    return {p.stem for p in out.iterdir()}


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
                                                                "time_to_accuracy"]
    assert "gpu:" in skipped[0] and "epochs/" in skipped[1]


def test_every_chart_is_written_as_a_real_png_and_svg(two_machines):
    out, _ = two_machines
    for name in CPU_CHARTS:
        assert_real_png(out / f"{name}.png")
        svg_text(out / f"{name}.svg")


def test_titles_name_the_machines_and_the_run(two_machines):
    out, _ = two_machines
    for name in CPU_CHARTS:
        text = svg_text(out / f"{name}.svg")
        for needle in ("vm: AMD EPYC, 2 cores", "commit a1d1702", "2026-11-20T09:00:00Z",
                       "ws-alpha: Intel(R) Xeon(R) Gold 6230", "commit b2e2f13-dirty"):
            assert needle in text, (name, needle)


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


def test_gpu_and_epoch_columns_give_all_six_charts(gpu_charts):
    out, r = gpu_charts
    assert charts_in(out) == set(ALL_CHARTS)
    assert "skipped" not in r.stdout
    for name in ALL_CHARTS:
        assert_real_png(out / f"{name}.png")
    assert "NVIDIA H100 80GB HBM3" in svg_text(out / "scaling_efficiency.svg")
    memory = svg_text(out / "peak_memory.svg")
    for part in ("weights", "gradients", "optimizer state", "activations", "workspace",
                 "context", "peak RSS (no breakdown)"):
        assert part in memory
    assert "validation accuracy (%)" in svg_text(out / "time_to_accuracy.svg")


def test_machines_from_several_files_share_each_chart(tmp_path):
    plot(tmp_path, *TWO_MACHINES, GPU)
    assert charts_in(tmp_path) == set(ALL_CHARTS)
    text = svg_text(tmp_path / "samples_per_s.svg")
    for host in ("vm", "ws-alpha", "gpu-node"):
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


def test_aggregate_only_files_plot_the_median_rows(tmp_path, plot_mod, tbcsv_mod):
    plot(tmp_path, data_file("aggregates_only.csv"))
    assert "samples_per_s" in charts_in(tmp_path)
    data = plot_mod.Data([tbcsv_mod.read_table(data_file("aggregates_only.csv"))])
    medians = [r for r in data.rows if r["aggregate"] == "median"
               and r["benchmark"] == "train/mlp/mnist/cpu:1/fp32/bs:100"]
    ratio = plot_mod.speedups(data)[("vm", plot_mod.config_of(medians[0]))]
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
    plot(tmp_path / "a", GPU)
    plot(tmp_path / "b", GPU)
    same, different, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b",
                                               [f"{n}.svg" for n in ALL_CHARTS], shallow=False)
    assert not different and not errors


# ---- the numbers behind the charts ----------------------------------------------------------

def medians_by_benchmark(rows, column="samples_per_s"):
    values = {}
    for r in rows:
        if r["status"] == "ok" and r["run_type"] == "iteration" and r.get(column):
            values.setdefault((r["host"], r["benchmark"]), []).append(float(r[column]))
    return {k: statistics.median(v) for k, v in values.items()}


def test_speedup_is_over_the_cpu_row_of_the_same_machine(plot_mod, tbcsv_mod):
    data = plot_mod.Data([tbcsv_mod.read_table(p) for p in TWO_MACHINES])
    medians = medians_by_benchmark(data.rows)
    got = {(s, c.model, c.device): v for (s, c), v in plot_mod.speedups(data).items()}
    want = medians[("ws-alpha", "train/lenet5/cifar10/cpu:4/fp32/bs:100")] / \
        medians[("ws-alpha", "train/lenet5/cifar10/cpu/fp32/bs:100")]
    assert got[("ws-alpha", "lenet5", "cpu:4")] == pytest.approx(want)
    assert ("vm", "lenet5", "cpu:4") not in got  # skipped there
    assert not any(device == "cpu" for _, _, device in got)
    assert len(got) == 9  # vm: 3 models x cpu:1; ws-alpha: 3 x (cpu:1, cpu:4)


def test_scaling_efficiency_is_throughput_over_n_times_one_device(plot_mod, tbcsv_mod):
    data = plot_mod.Data([tbcsv_mod.read_table(GPU)])
    medians = medians_by_benchmark(data.rows)
    lines = plot_mod.scaling_lines(data)
    key = ("gpu-node", ("train", "resnet152", "cifar10"), "fp32", "bs:128")
    assert set(lines) == {key, ("gpu-node", ("train", "mlp", "mnist"), "fp32", "bs:100")}
    one = medians[("gpu-node", "train/resnet152/cifar10/gpu:1/fp32/bs:128")]
    four = medians[("gpu-node", "train/resnet152/cifar10/gpu:4/fp32/bs:128")]
    assert lines[key][1] == pytest.approx(1.0)
    assert lines[key][4] == pytest.approx(four / (4 * one))
    assert 0.8 < lines[key][4] < 0.9  # the fixture scales at 85%


def test_time_to_accuracy_uses_the_epoch_rows(plot_mod, tbcsv_mod):
    data = plot_mod.Data([tbcsv_mod.read_table(GPU)])
    assert len(data.epoch_rows) == 48 and all(r["kind"] != "epochs" for r in data.step_rows)
    curves = plot_mod.accuracy_curves(data)
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
    import importlib.util
    spec = importlib.util.spec_from_file_location("generate", FIXTURES / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    written = [p.name for p in generate.generate(tmp_path)]
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


def test_latest_keeps_each_machines_newest_measured_rows(plot_mod):
    kept = plot_mod.newest_rows(latest_rows())
    assert [r["samples_per_s"] for r in kept] == ["2", "3", "4"]  # the older run and the skip go


def test_latest_names_machines_that_share_a_hostname_by_their_gpu_or_cpu(plot_mod):
    class Table:
        rows = latest_rows()

    data = plot_mod.Data([Table()], latest=True)
    assert data.series == ["vm (AMD EPYC)", "vm (NVIDIA H100)", "vm (NVIDIA H100) · pytorch"]

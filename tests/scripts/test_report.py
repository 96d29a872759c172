"""The headline chart and the report plot.py writes beside the charts (issue 22), and the
predicted and shared-device rows of schema 4 (issue 24): on a fixture machine with cpu, gpu:1
and gpu:2 rows (gpu:4 skipped, a gpu:8 prediction, a shared-device run) and on a CPU-only one."""
import base64
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import data_file, medians, rewrite_csv, run_script
from tbplot import report
from tbplot.model import Data, config_of, scaling_lines, speedups
from tbplot.summary import summarise

GPU, CPU = data_file("report_gpu_v4.csv"), data_file("report_cpu_v4.csv")
SKIP_REASON = "skipped: gpu:4 needs 4 GPUs, this machine has 2"


def plot(out: Path, *csvs):
    r = run_script("plot.py", *csvs, "--out", out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r


def svg_text(path: Path) -> str:
    return " ".join(t for t in ET.parse(path).getroot().itertext() if t.strip())


def md_table(text: str, first_header: str) -> tuple[list[str], list[list[str]]]:
    """The Markdown table whose header starts with first_header: headers and rows."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    split = lambda line: [c.strip() for c in line.strip("|").split(" | ")]  # noqa: E731
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(split(line))
    return split(lines[start]), rows


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_report")
    return out, plot(out, GPU)


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu_report")
    return out, plot(out, CPU)


# ---- the files ------------------------------------------------------------------------------

def test_headline_and_report_are_written(gpu_report):
    out, r = gpu_report
    for name in ("headline.png", "headline.svg", "report.md", "report.html"):
        assert (out / name).is_file(), name
        assert f"wrote {out / name}" in r.stdout or name.endswith(".svg")
    assert (out / "headline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_names_the_machine_configurations_and_skips(gpu_report):
    out, _ = gpu_report
    md = (out / "report.md").read_text()
    title = md.splitlines()[0]
    assert title == ("# trainbench report: fixture-host · Fixture Xeon 8480+ (test data, not a "
                     "real run) · NVIDIA H100 80GB HBM3")
    headers, _ = md_table(md, "model")
    for device in ("cpu", "gpu:1", "gpu:2"):
        assert f"samples/s: {device}" in headers
    assert "## Skipped configurations" in md
    skips = [line for line in md.splitlines() if SKIP_REASON in line]
    assert skips == [f"- gpu:4 on fixture-host: {SKIP_REASON} (mlp · mnist fp32, resnet152 · "
                     f"cifar10 fp32)"]  # once per configuration, not per row
    for field in ("| git_commit | 0f1x7e5 |", "| sgemm_gflops | 1900.0 GFLOP/s (median) |",
                  "| driver_version | 580.159.04 |", "| schema_version | 4 |"):
        assert field in md, field


def test_summary_numbers_are_the_medians_and_their_ratios(gpu_report):
    out, _ = gpu_report
    headers, rows = md_table((out / "report.md").read_text(), "model")
    line = dict(zip(headers, next(r for r in rows if r[:2] == ["mlp · mnist", "fp32"])))
    m = medians(GPU)
    cpu, one, two = (m[f"train/mlp/mnist/{d}/fp32/bs:100"] for d in ("cpu", "gpu:1", "gpu:2"))
    assert line["samples/s: cpu"] == f"{cpu:,.0f}"
    assert line["samples/s: gpu:1"] == f"{one:,.0f}"
    assert line["speedup over cpu (x): gpu:1"] == f"{one / cpu:.3g}"
    assert line["speedup over cpu (x): gpu:2"] == f"{two / cpu:.3g}"
    assert line["scaling efficiency (%): gpu:2"] == "71"  # the rows' scaling_efficiency
    assert line["peak memory (GiB): gpu:1"] == f"{(4 * 4 * 1796010 + 6.4e7) / 2 ** 30:.3g}"
    assert line["peak memory (GiB): cpu"] == f"{1.2e9 / 2 ** 30:.3g}"  # peak_rss_bytes
    assert line["comm share (%): gpu:2"] == "14.5"
    assert "scaling efficiency (%): gpu:1" not in headers  # one device: no scaling


def test_html_is_self_contained_with_every_chart_inlined(gpu_report):
    out, r = gpu_report
    html = (out / "report.html").read_text()
    charts = [line.split()[1] for line in r.stdout.splitlines()
              if line.startswith("wrote ") and line.endswith(".svg")]
    images = re.findall(r'<img src="([^"]*)"', html)
    assert len(images) == len(charts) >= 6
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r'(src|href)="(?!data:)', html)  # nothing fetched from elsewhere
    assert "<script" not in html and "<link" not in html
    assert "<title>trainbench report: fixture-host" in html
    assert SKIP_REASON in html


def test_each_chart_has_its_question(gpu_report):
    out, _ = gpu_report
    md = (out / "report.md").read_text()
    for name in ("headline", "samples_per_s", "speedup_vs_cpu", "scaling_efficiency",
                 "peak_memory", "host_cpu_per_step"):
        block = md.split(f"### {name}\n\n", 1)[1].split("\n\n")
        assert block[0].startswith("_") and "?" in block[0], (name, block[0])
        assert block[1] == f"![{name}]({name}.png)"
    assert "- time_to_accuracy: no epochs/ rows" in md  # the charts not drawn, and why


# ---- the headline chart ---------------------------------------------------------------------

def test_headline_bars_carry_the_speedup_over_cpu(gpu_report):
    out, _ = gpu_report
    text = svg_text(out / "headline.svg")
    m = medians(GPU)
    for model, batch in (("mlp/mnist", 100), ("resnet152/cifar10", 128)):
        cpu = m[f"train/{model}/cpu/fp32/bs:{batch}"]
        for device in ("gpu:1", "gpu:2"):
            value = m[f"train/{model}/{device}/fp32/bs:{batch}"]
            assert f"{value / cpu:.3g}×" in text, (model, device)
    assert "1× (cpu)" in text
    for legend in ("cpu", "gpu:1", "gpu:2"):
        assert re.search(rf"(^| ){re.escape(legend)} ", text), legend


def test_predicted_rows_are_hatched_and_named_never_measured(gpu_report, tbcsv_mod):
    out, _ = gpu_report
    text = svg_text(out / "headline.svg")
    assert "gpu:8 predicted for nvlink4 (not measured)" in text
    svg = (out / "headline.svg").read_text()
    assert '<pattern id="h' in svg and svg.count('url(#h') >= 2  # the bar and its legend entry
    assert "gpu:8" not in svg_text(out / "samples_per_s.svg")  # no measured chart has it
    assert "gpu:8" not in svg_text(out / "scaling_efficiency.svg")
    headers, rows = md_table((out / "report.md").read_text(), "model")
    line = dict(zip(headers, next(r for r in rows if r[:2] == ["resnet152 · cifar10", "fp32"])))
    predicted = medians(GPU)["train/resnet152/cifar10/gpu:8/fp32/bs:128/predicted:nvlink4"]
    assert line["samples/s: gpu:8 predicted (nvlink4)"] == f"{predicted:,.0f}"
    assert line["scaling efficiency (%): gpu:8 predicted (nvlink4)"] == "88"
    data = Data([tbcsv_mod.read_table(GPU)])
    assert len(data.predicted_rows) == 1 and not any(
        tbcsv_mod.is_predicted(r) for r in data.step_rows)


def test_the_headlines_caption_says_each_thing_once(gpu_report, cpu_report):
    """What hatching, whiskers, the clock and a machine without GPU rows mean, once each: the
    caption's opening and the chart's notes after it said all four twice."""
    for out, _ in (gpu_report, cpu_report):
        md = (out / "report.md").read_text()
        caption = md.split("### headline\n\n", 1)[1].split("\n\n")[0]
        sentences = [s for s in re.split(r"(?<=[.)])\s+(?=[A-Z])", caption.strip("_")) if s]
        assert len(sentences) == len(set(sentences)), caption
        for said in ("Whiskers:", "No GPU rows", "Diagonally hatched", "Samples/s on the wall clock"):
            assert caption.count(said) <= 1, (said, caption)
    gpu_caption = (gpu_report[0] / "report.md").read_text().split("### headline\n\n", 1)[1]
    assert "Diagonally hatched" in gpu_caption.split("\n\n")[0]


def test_shared_device_rows_are_never_scaling(gpu_report, tbcsv_mod):
    out, _ = gpu_report
    assert "Left out: the shared_device rows of gpu:2 on fixture-host (2 replicas on one GPU: " \
           "correctness, not scaling)" in " ".join((out / "report.md").read_text().split())
    assert "replicas" not in svg_text(out / "scaling_efficiency.svg")
    assert "replicas" not in svg_text(out / "speedup_vs_cpu.svg")
    data = Data([tbcsv_mod.read_table(GPU)])
    shared = [r for r in data.step_rows if config_of(r).checks_only]
    assert shared and not any(r["cpu_baseline"] or r["scaling_efficiency"] for r in shared)
    assert not any(c.checks_only for _, c in speedups(data))
    assert all("replicas" not in label for _, _, _, label in scaling_lines(data))
    headers, _ = md_table((out / "report.md").read_text(), "model")
    shared = [h for h in headers if "replicas on one GPU" in h]
    assert shared == ["samples/s: gpu:2 2 replicas on one GPU",
                      "peak memory (GiB): gpu:2 2 replicas on one GPU"]


def test_a_cpu_only_machine_draws_its_cpu_configurations(cpu_report):
    out, _ = cpu_report
    text = svg_text(out / "headline.svg")
    for device in ("cpu", "cpu:1", "mpi:2"):
        assert re.search(rf"(^| ){re.escape(device)} ", text), device
    md = (out / "report.md").read_text()
    caption = md.split("### headline\n\n", 1)[1].split("\n\n")[0]
    assert "No GPU rows for fixture-cpu-host: drawn with the CPU configurations it has (cpu, " \
           "cpu:1, mpi:2; cpu = all cores, cpu:N = N threads, mpi:N = N ranks)" in caption
    headers, rows = md_table(md, "model")
    line = dict(zip(headers, rows[0]))
    assert line["scaling efficiency (%): mpi:2"] == "80" and line["comm share (%): mpi:2"] == "12.0"
    assert "gpu:1 on fixture-cpu-host: skipped: gpu:1: no usable NVIDIA driver" in md


def test_a_report_of_nothing_is_not_written_and_an_old_one_goes(tmp_path):
    plot(tmp_path, CPU)
    assert (tmp_path / "report.html").exists()
    only_skipped = tmp_path / "skipped.csv"
    lines = open(CPU).read().splitlines()
    only_skipped.write_text("\n".join([lines[0]] + [x for x in lines if ",skipped," in x]) + "\n")
    r = run_script("plot.py", only_skipped, "--out", tmp_path)
    assert r.returncode == 0 and "no chart could be drawn" in r.stderr
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "report.md").exists()


def test_headline_is_the_same_whatever_the_hash_seed(tmp_path):
    """Predicted entries for two links (nvlink4 and pcie5 in the H100 timeline run) are ordered
    by configuration and link, not by a set's iteration order: the same input draws the same
    headline under any PYTHONHASHSEED."""
    import os
    source = Path(__file__).resolve().parents[2] / "results/h100/resnet224-timeline-20261124.csv"
    drawn = []
    for seed in ("0", "1", "2", "3"):
        out = tmp_path / seed
        r = run_script("plot.py", source, "--out", out, env={**os.environ, "PYTHONHASHSEED": seed})
        assert r.returncode == 0, r.stderr
        drawn.append((out / "headline.svg").read_bytes())
    assert "predicted for pcie5" in svg_text(tmp_path / "0" / "headline.svg")
    assert all(d == drawn[0] for d in drawn[1:])


def test_the_report_gives_the_repetitions_load_range_not_the_aggregates(tmp_path):
    """The machines table's load_avg_1m range leaves out the aggregate rows, whose load is the
    repetitions' mean, median, stddev or cv (it said 0.16 – 1.00, the stddev its low)."""
    def load(row):
        if row["run_type"] == "iteration":
            return f"{0.6 + 0.1 * int(row['repetition']):.2f}"
        return {"mean": "0.8", "median": "0.8", "stddev": "0.16", "cv": "0.2"}[row["aggregate"]]

    loads = rewrite_csv(data_file("optimizer_sgd_v4.csv"), tmp_path / "loads.csv",
                        change=lambda row: {"load_avg_1m": load(row)})
    plot(tmp_path / "out", loads)
    text = (tmp_path / "out" / "report.md").read_text()
    assert re.search(r"^\| load_avg_1m \| 0\.60 – 1\.00 \|$", text, re.M), text


# ---- the report's parts, from the rows (found by the report audit) ---------------------------

def report_data(tbcsv_mod, *paths) -> Data:
    return Data([tbcsv_mod.read_table(p) for p in paths])


def test_the_title_names_four_machines_and_counts_the_rest(tmp_path, tbcsv_mod):
    files = [rewrite_csv(CPU, tmp_path / f"node{i}.csv", change=lambda row, i=i: {"host": f"node-{i}"})
             for i in range(5)]
    four = report.title(report_data(tbcsv_mod, *files[:4]))
    assert [f"node-{i}" in four for i in range(4)] == [True] * 4 and "more" not in four, four
    five = report.title(report_data(tbcsv_mod, *files))
    assert five.count("node-") == 4 and five.endswith(" and 1 more"), five


def test_the_machines_table_has_a_column_per_machine_and_a_line_per_field_any_has(tmp_path, tbcsv_mod):
    """Columns in the machines' order (ws-alpha's file first), a field only one machine has kept
    with '-' for the other, the sgemm median and a load that did not vary written once."""
    sgemm = iter([10.0, 300.0])
    cpu = rewrite_csv(CPU, tmp_path / "cpu.csv", change=lambda row: {
        "sgemm_gflops": str(next(sgemm, 90.0)) if row["run_type"] == "iteration" else "1"})
    _, headers, lines, _ = report.machines_table(report_data(tbcsv_mod, data_file("machine_b.csv"), cpu))
    assert headers == ["field", "ws-alpha", "fixture-cpu-host"]
    line = {fields[0]: fields[1:] for fields in lines}
    assert line["cpu_model"] == ["Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz",
                                 "Fixture EPYC (test data, not a real run)"]
    assert line["sgemm_gflops"] == ["-", "90.0 GFLOP/s (median)"]  # not 10 (the lowest)
    assert line["load_avg_1m"] == ["-", "0.20"]  # one load: no range


def test_the_summary_of_several_machines_names_each_lines_machine(tbcsv_mod):
    """The lead columns (machine, model, precision, batch) and, in the HTML, a header over each
    metric's columns with the configurations' names under it."""
    table = report.summary_table(summarise(report_data(tbcsv_mod, data_file("machine_b.csv"), CPU)))
    _, headers, rows, (_, names) = table
    assert headers[:4] == ["machine", "model", "precision", "batch"]
    assert rows[0][:4] == ["ws-alpha", "mlp · mnist", "fp32", "100"]
    html = "\n".join(report.html_table(table))
    spans = [(metric, int(n)) for n, metric in
             re.findall(r'<th class="group" colspan="(\d+)">([^<]*)</th>', html)]
    assert spans[0] == ("", 4)
    column = 4
    for metric, n in spans[1:]:
        assert all(h.startswith(f"{metric}: ") for h in headers[column:column + n]), metric
        column += n
    assert column == len(headers)
    under = re.findall(r"<th>([^<]*)</th>", html)
    assert under == names and under[4] == "cpu", under[:6]


def test_the_summary_says_what_predicted_and_shared_device_columns_are(gpu_report):
    md = (gpu_report[0] / "report.md").read_text()
    summary = md.split("## Summary\n", 1)[1].split("\n## ", 1)[0]
    assert "Columns named predicted are predictions of N-device scaling" in summary
    assert "N replicas on one GPU (shared_device) check correctness, not scaling" in summary


def test_the_report_counts_every_row_predictions_included(gpu_report, tbcsv_mod):
    with open(GPU) as f:
        count = sum(1 for _ in f) - 1
    assert len(report_data(tbcsv_mod, GPU).step_rows) < count  # the prediction's row counts too
    assert f"Drawn by scripts/plot.py from {count} rows;" in (gpu_report[0] / "report.md").read_text()


def test_failed_rows_are_listed_with_their_message(tmp_path, tbcsv_mod):
    data = report_data(tbcsv_mod, data_file("compare_new.csv"))
    md = report.render_markdown(report.blocks(data, tmp_path, [], {}))
    failed = md.split("## Failed rows\n\n", 1)[1].splitlines()
    assert failed[0] == "- cpu on vm: loss is not finite at step 3 (resnet152 · cifar10 fp32)"
    assert "## Skipped configurations" not in md


def test_cells_are_escaped_and_numbers_right_aligned(tmp_path):
    """A '|' in a Markdown cell and '<' in an HTML one stay text; a column is right-aligned only
    where every cell is a number; an image's alt text is its caption."""
    image = tmp_path / "chart.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    doc = [("h1", "t"),
           ("table", ["name", "rate", "mixed"], [["a|b", "1,234", "12"], ["<b>", "5.5", "fp32"]], None),
           ("img", image, "What is <this>?")]
    md = report.render_markdown(doc)
    assert "| a\\|b | 1,234 | 12 |" in md and "| --- | ---: | --- |" in md
    html = report.render_html(doc)
    assert "<td>&lt;b&gt;</td>" in html and '<td class="n">5.5</td>' in html
    assert "<td>fp32</td>" in html and "<b>" not in html
    assert 'alt="What is &lt;this&gt;?"' in html

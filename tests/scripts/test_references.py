"""Reference runs (issue 37): a machine without a GPU sees itself beside the committed H100 run.
The headline drawn from a CPU-only default-set run (fixtures/default_cpu_v5.csv) and
results/h100's reference, the table bench.sh prints and appends to the summary
(scripts/reference_table.py, the report's section), TB_REFERENCE/--reference's choices, the
index kept honest against its CSV, and two machines' CSVs drawn on shared panels. Ratios are
computed here from the two files (the H100's on the wall clock: batch / wall_step_time_s)."""
import csv
import json
import os
import re
import statistics
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tbcsv
import tbdevices
from conftest import ROOT, SCRIPTS, assert_one_line_error, data_file, rewrite_csv, run_script
from tbplot import references, versus
from tbplot.charts.headline import panels, select
from tbplot.model import Data, config_of, times

CPU_RUN = data_file("default_cpu_v5.csv")
H100_DIR = ROOT / "results" / "h100"
# The reference run its index names (it moves when a new run becomes the reference).
H100_REF = json.loads((H100_DIR / "reference.json").read_text())
H100_RUN = H100_DIR / H100_REF["csv"]
H100_SCHEMA = {r["schema_version"] for r in csv.DictReader(H100_RUN.open())}.pop()
LENET_CPU = "train/lenet5/cifar10/cpu/fp32/bs:100"
LENET_GPU = "train/lenet5/cifar10/gpu:1/fp32/bs:100"


def raw(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cpu_median(benchmark: str) -> float:
    """The fixture's median samples/s of an ok repetition set, read without the scripts."""
    return statistics.median(float(r["samples_per_s"]) for r in raw(CPU_RUN)
                             if r["benchmark"] == benchmark and r["status"] == "ok"
                             and r["run_type"] == "iteration")


def h100(benchmark: str) -> dict:
    """The H100 run's one repetition of a benchmark, as the file holds it."""
    row, = [r for r in raw(H100_RUN) if r["benchmark"] == benchmark and r["run_type"] == "iteration"]
    return row


def h100_wall_rate(benchmark: str) -> float:
    """samples/s on the wall clock: batch / wall_step_time_s (one replica)."""
    row = h100(benchmark)
    return float(row["batch"]) / float(row["wall_step_time_s"])


def svg_text(path: Path) -> str:
    return " ".join(t for t in ET.parse(path).getroot().itertext() if t.strip())


def plot(out: Path, *args):
    r = run_script("plot.py", *args, "--out", out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r


@pytest.fixture(scope="module")
def beside_h100(tmp_path_factory):
    out = tmp_path_factory.mktemp("beside_h100")
    return out, plot(out, CPU_RUN, "--reference", H100_DIR)


# ---- the headline -------------------------------------------------------------------------

def test_the_headline_draws_this_machine_beside_the_h100_with_labels_and_ratios(beside_h100):
    out, r = beside_h100
    text = svg_text(out / "headline.svg")
    # Each group of bars is named by its machine: this VM by its hardware, the reference by name.
    assert "vm (Intel Xeon," in text and "2 cores)" in text  # a tick label on two lines
    assert re.search(r"(^| )H100 fp32( |$)", text), text
    # One ratio, from the two files: the H100's LeNet-5 gpu:1 on the wall clock over this cpu.
    ratio = h100_wall_rate(LENET_GPU) / cpu_median(LENET_CPU)
    assert 5 < ratio < 20 and f"{times(ratio)} this cpu" in text, ratio
    if H100_REF["clock"] == "device":
        # The device clock's figure would read differently: the test can tell them apart.
        device = float(h100(LENET_GPU)["samples_per_s"]) / cpu_median(LENET_CPU)
        assert times(device) != times(ratio) and f"{times(device)} this cpu" not in text
    # ResNet-152 224: batch 128 on the H100's GPU against 8 on this CPU, said on the bar.
    assert "bs 128 vs 8" in text
    assert "1× (cpu)" in text
    # The chart's two lines of notes; the machines, versions and the rest are the report's.
    assert "Bars: median samples/s on the wall clock" in text and "reference runs over this machine's cpu row" in text
    report = " ".join((out / "report.md").read_text().split())
    assert "Reference run H100: NVIDIA H100 80GB HBM3" in report
    assert "Samples/s on the wall clock" in report
    assert "Versions differ between H100 and this machine" in report
    assert f"schema_version {H100_SCHEMA} vs 5" in report
    if H100_REF["clock"] == "device":
        # The reference file's notes are printed once.
        assert r.stdout.count("schema 4 GPU rows: samples_per_s read on the wall clock") == 1


def test_reference_bars_are_this_machines_workloads_and_precisions(tbcsv_mod):
    refs, _ = references.load_references([str(H100_DIR)])
    data = Data([tbcsv_mod.read_table(CPU_RUN)], references=refs)
    chosen = select(data)
    mine = {c.panel for s, c in chosen.bars if s == "vm"}
    theirs = {(c.panel, c.device, c.precision) for s, c in chosen.bars if s == "H100"}
    assert chosen.references == {"H100"} and len(mine) == 5
    assert {p for p, _, _ in theirs} == mine
    assert {precision for _, _, precision in theirs} == {"fp32"}  # the CPU trains fp32 only
    devices = {d for _, d, _ in theirs}
    assert devices == {"cpu", "gpu:1", "gpu:8"}  # the largest prediction only
    # One panel per workload, both machines' groups on its axis.
    for panel, groups in panels(data, chosen).items():
        assert {s for g in groups for s, _ in g.keys} == {"vm", "H100"}, panel


def test_reference_none_draws_this_machine_alone(tmp_path):
    plot(tmp_path, CPU_RUN, "--reference", "none")
    text = svg_text(tmp_path / "headline.svg")
    assert "H100" not in text and "this cpu" not in text
    assert "reference" not in (tmp_path / "report.md").read_text().lower()


def test_a_reference_among_the_inputs_is_not_drawn_twice(tmp_path):
    r = plot(tmp_path, H100_RUN, "--reference", "all")
    assert f"reference H100: results/h100/{H100_RUN.name} is among the inputs, not drawn " \
           "twice" in r.stdout
    assert "this cpu" not in svg_text(tmp_path / "headline.svg")


@pytest.mark.parametrize("choice, needle", [
    ("results/nowhere", "results/nowhere: no reference.json there"),
    ("none,all", "'none' cannot be combined with all"),
])
def test_a_bad_reference_choice_is_one_line_and_exit_2(tmp_path, choice, needle):
    r = run_script("plot.py", CPU_RUN, "--reference", choice, "--out", tmp_path / "out")
    assert_one_line_error(r, needle)


def test_a_broken_index_is_named(tmp_path):
    (tmp_path / "reference.json").write_text(json.dumps({"name": "X", "csv": "x.csv"}))
    r = run_script("plot.py", CPU_RUN, "--reference", tmp_path, "--out", tmp_path / "out")
    assert_one_line_error(r, "reference.json: missing machine, cpu, gpu, date, commit, clock, "
                             "about")


def test_a_path_is_named_from_the_working_folder_where_it_lies_under_it_else_in_full():
    assert references.near(Path.cwd() / "results" / "x.csv") == os.path.join("results", "x.csv")
    outside = Path.cwd().parent / "x.csv"
    assert references.near(outside) == str(outside)


def test_a_reference_given_as_an_input_by_a_relative_path_is_not_drawn_twice(monkeypatch):
    monkeypatch.chdir(ROOT)
    refs, said = references.load_references([str(H100_DIR)], [os.path.relpath(H100_RUN)])
    assert refs == [] and said == [f"reference H100: results/h100/{H100_RUN.name} is among the "
                                   "inputs, not drawn twice"]


def test_a_reference_is_chosen_by_its_folder_or_its_index_once_each():
    index = (H100_DIR / "reference.json").resolve()
    assert references.chosen_indexes([str(H100_DIR), f"{index}, {H100_DIR}"]) == [index]
    assert references.chosen_indexes(["none"]) == references.chosen_indexes(None) == []


@pytest.mark.parametrize("change, needle", [
    ({"date": 20261127}, "missing date"),  # a number is not the text an index holds
    ({"clock": "gpu"}, "clock 'gpu' is neither 'wall' nor 'device'"),
])
def test_an_index_with_a_field_of_the_wrong_kind_is_named(tmp_path, change, needle):
    fields = {**H100_REF, "csv": str(H100_RUN), **change}
    (tmp_path / "reference.json").write_text(json.dumps(fields))
    with pytest.raises(tbcsv.InputError, match=re.escape(needle)):
        references.load(tmp_path / "reference.json")


# ---- the table: the summary, the console, the report ----------------------------------------

def table_lines(text: str) -> dict:
    """workload -> {header: cell} of the Markdown table that text holds."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    split = lambda line: [c.strip() for c in line.strip("|").split(" | ")]  # noqa: E731
    headers = split(lines[0])
    return {cells[0]: dict(zip(headers, cells)) for cells in map(split, lines[2:])}


def test_the_table_compares_this_cpu_with_each_reference_row(tmp_path):
    summary = tmp_path / "run-summary.md"
    summary.write_text("# trainbench summary\n")
    r = run_script("reference_table.py", CPU_RUN, "--reference", H100_DIR, "--append", summary)
    assert r.returncode == 0, r.stderr
    assert summary.read_text() == "# trainbench summary\n" + "\n" + r.stdout  # a blank line between
    lines = table_lines(r.stdout)
    assert set(lines) == {"mlp · mnist", "lenet5 · cifar10", "lstm · sine",
                          "resnet152 · cifar10", "resnet152 · imagenet"}
    lenet = lines["lenet5 · cifar10"]
    ratio = h100_wall_rate(LENET_GPU) / cpu_median(LENET_CPU)
    assert lenet["H100 gpu:1 fp32 / this cpu"].startswith(f"{times(ratio, 'x')} (")
    assert lenet["this cpu samples/s"] == f"{cpu_median(LENET_CPU):,.0f}"
    bf16 = h100_wall_rate("train/lenet5/cifar10/gpu:1/bf16/bs:100") / cpu_median(LENET_CPU)
    assert lenet["H100 gpu:1 bf16 / this cpu"].startswith(f"{times(bf16, 'x')} (")
    assert lenet["H100 gpu:1 bf16 / this cpu"].endswith(", bf16 vs fp32)")
    assert lenet["H100 cpu fp32 / this cpu"].endswith("/s)")  # nothing differs: no label
    imagenet = lines["resnet152 · imagenet"]
    assert imagenet["this cpu row"] == "fp32, bs 8"
    assert imagenet["H100 gpu:1 fp32 / this cpu"].endswith("/s, bs 128 vs 8)")
    assert any(re.fullmatch(r"H100 gpu:8 predicted \(nvlink4\)( from:gpu:1)? fp32 / this cpu", k) for k in lenet), lenet
    assert "Versions differ between H100 and this machine (H100's first): git_commit " \
           f"{H100_REF['commit']} vs 5c4e5f1; schema_version {H100_SCHEMA} vs 5." in r.stdout
    # Which clock the reference's file is on.
    assert ("wall_step_time_s" if H100_REF["clock"] == "device" else "samples/s on the wall clock in the file") \
        in r.stdout


def test_reference_none_prints_nothing(tmp_path):
    r = run_script("reference_table.py", CPU_RUN, "--reference", "none")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


def test_without_a_choice_every_reference_under_results_is_compared():
    r = run_script("reference_table.py", CPU_RUN)
    assert r.returncode == 0, r.stderr
    assert r.stdout == run_script("reference_table.py", CPU_RUN, "--reference", "all").stdout
    assert "H100 gpu:1 fp32 / this cpu" in r.stdout


def test_a_reference_among_the_inputs_leaves_nothing_to_compare():
    """Its rows are this machine's: it is not compared with itself, and the run says so."""
    r = run_script("reference_table.py", H100_RUN, "--reference", H100_DIR)
    assert (r.returncode, r.stdout) == (0, "")
    note, last = r.stderr.splitlines()
    assert note.startswith("reference_table.py: reference H100: ") and note.endswith(
        f"{H100_REF['csv']} is among the inputs, not drawn twice")
    assert last == "reference_table.py: no reference run to compare with"


def test_a_run_without_an_ok_cpu_row_has_no_table(tmp_path):
    failed = rewrite_csv(CPU_RUN, tmp_path / "failed.csv", change=lambda row: {"status": "error"})
    r = run_script("reference_table.py", failed, "--reference", H100_DIR)
    assert (r.returncode, r.stdout) == (0, "")
    assert r.stderr == f"reference_table.py: no ok cpu row in {failed} to compare with the references\n"


def test_a_summary_that_cannot_be_appended_to_is_one_line(tmp_path):
    r = run_script("reference_table.py", CPU_RUN, "--reference", H100_DIR, "--append", tmp_path)
    assert_one_line_error(r, f"reference_table.py: error: {tmp_path}: cannot append (Is a directory)")


def test_the_report_has_the_table(beside_h100):
    out, _ = beside_h100
    md = (out / "report.md").read_text()
    section = md.split("## This machine against the reference runs\n", 1)[1].split("\n## ")[0]
    lines = table_lines(section)
    ratio = h100_wall_rate(LENET_GPU) / cpu_median(LENET_CPU)
    assert lines["lenet5 · cifar10"]["H100 gpu:1 fp32 / this cpu"].startswith(
        f"{times(ratio, 'x')} (")
    assert "This machine: vm (Intel Xeon, 2 cores)." in section


def test_bench_sh_draws_and_prints_the_references(tmp_path):
    """bench.sh with a stand-in trainbench that writes the CPU fixture: the headline beside the
    H100, and the run ends with the table, also appended to the summary; TB_REFERENCE=none
    turns both off."""
    fake = tmp_path / "trainbench"
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do case $a in\n"
                    f"  --csv=*) cp '{CPU_RUN}' \"${{a#--csv=}}\" ;;\n"
                    "  --summary=*) echo '# trainbench summary' > \"${a#--summary=}\" ;;\n"
                    "esac; done\n")
    fake.chmod(0o755)
    for reference in ("all", "none"):
        csv_path = tmp_path / reference / "run.csv"
        env = {**os.environ, "TB_BIN": str(fake), "TB_CSV": str(csv_path),
               "TB_REFERENCE": reference}
        r = subprocess.run(["bash", str(SCRIPTS / "bench.sh")], capture_output=True, text=True,
                           env=env, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        summary = (tmp_path / reference / "run-summary.md").read_text()
        headline = svg_text(tmp_path / reference / "run-charts" / "headline.svg")
        if reference == "all":
            last = r.stdout.rstrip().splitlines()[-1]
            assert last.startswith("Versions differ between H100 and this machine"), last
            assert "## This machine against the reference runs" in summary
            assert "H100 gpu:1 fp32 / this cpu" in r.stdout and "this cpu" in headline
        else:
            assert "reference" not in summary and "H100" not in headline


# ---- the index ----------------------------------------------------------------------------

def test_every_reference_index_agrees_with_its_csv(tbcsv_mod):
    indexes = references.find_indexes()
    assert H100_DIR / "reference.json" in indexes
    for index in indexes:
        ref = references.load(index)
        rows = raw(ref.csv)
        gpu = [r for r in ref.table.rows if r["device"].startswith("gpu") and r["status"] == "ok"]
        assert {r["git_commit"] for r in rows} == {ref.commit}, index
        assert {r["timestamp"][:10] for r in rows} == {ref.date}, index
        assert {r["gpu_name"] for r in rows} == {ref.gpu}, index
        assert {f"{r['cpu_model']}, {r['cores']} cores" for r in rows} == {ref.cpu}, index
        # The clock it names is the one its file is on, and every GPU row reads on the wall.
        versions = {r["schema_version"] for r in rows}
        assert (ref.clock == "wall") == all(int(v) >= 5 for v in versions), index
        assert gpu and not any(tbcsv_mod.on_device_clock(r) for r in gpu), index
        if ref.clock == "device":
            assert {r["clock"] for r in gpu} <= {tbcsv_mod.CLOCK_READ, tbcsv_mod.CLOCK_REDERIVED}


# ---- two machines' CSVs: shared panels (issue 37, item 3) ------------------------------------

def test_two_machines_csvs_share_one_panel_per_workload(tbcsv_mod, tmp_path):
    data = Data([tbcsv_mod.read_table(CPU_RUN), tbcsv_mod.read_table(str(H100_RUN))])
    # Both hosts are `vm` on an `Intel(R) Xeon(R) Processor`: told apart by GPU and cores.
    assert data.series == ["vm (Intel Xeon, 2 cores)", "vm (H100 80GB HBM3)"]
    by_panel = panels(data, select(data))
    assert len(by_panel) == 5
    for panel, groups in by_panel.items():
        assert {s for g in groups for s, _ in g.keys} == set(data.series), panel
    plot(tmp_path, CPU_RUN, H100_RUN)
    text = svg_text(tmp_path / "headline.svg")
    for title in ("mlp · mnist", "lenet5 · cifar10", "resnet152 · imagenet"):
        assert text.count(title) == 1, title  # one panel, not one per machine
    assert "— vm" not in text
    # Each machine's bars keep their own machine's speedup (x cpu).
    one = h100_wall_rate(LENET_GPU) / h100_wall_rate(LENET_CPU)
    assert times(one) in text.split()


def test_a_reference_named_like_an_input_machine_is_told_apart(tbcsv_mod):
    refs, _ = references.load_references([str(H100_DIR)])
    table = tbcsv_mod.read_table(CPU_RUN)
    for row in table.rows:
        row["host"] = "H100"
    data = Data([table], references=refs)
    assert data.series == ["H100", "H100 (reference)"]
    assert {config_of(r).device for r in data.reference_rows} >= {"cpu", "gpu:1"}


# ---- this machine against the references, row by row (tbplot/versus.py) ----------------------

def rate_row(device, rate, variant="", precision="fp32", host="vm", status="ok", **cells) -> dict:
    """One ok repetition of mlp · mnist as schema 6 writes it, its kind's facts from tbdevices."""
    measurement = "predicted" if "predicted" in variant else "measured"
    kind = tbdevices.kind_of(device, variant, measurement=measurement)
    return {"schema_version": "6", "benchmark": f"train/mlp/mnist/{device}/{precision}/bs:100",
            "kind": "train", "model": "mlp", "dataset": "mnist", "device": device,
            "precision": precision, "batch": "100", "variant": variant,
            "device_kind": kind.name, "backend": kind.backend,
            "data_parallel": str(kind.data_parallel or ""), "measurement": measurement,
            "run_type": "iteration", "status": status, "host": host, "framework": "trainbench",
            "samples_per_s": str(rate), **cells}


def reference_of(name: str, *rows) -> references.Reference:
    return references.Reference(index=Path(f"{name}/reference.json"), name=name, machine="m",
                                cpu="c", gpu="g", date="d", commit="c0", csv=Path(f"{name}.csv"),
                                clock="wall", about="a",
                                table=tbcsv.Table(f"{name}.csv", list(rows[0]), list(rows)))


def versus_data(own: list, *refs) -> Data:
    return Data([tbcsv.Table("own.csv", list(own[0]), own)], references=refs)


def test_reference_bars_are_plain_cpu_and_gpu1_rows_and_each_links_largest_prediction():
    ref = reference_of("REF", rate_row("cpu", 100, host="ref"), rate_row("cpu:1", 20, host="ref"),
                       rate_row("gpu:1", 5000, host="ref"),
                       rate_row("gpu:1", 6000, "data_on_device", host="ref"),
                       rate_row("gpu:1", 9000, precision="bf16", host="ref", status="failed"),
                       rate_row("gpu:2", 9000, host="ref"),
                       rate_row("gpu:2", 9500, "predicted:nvlink4", host="ref"),
                       rate_row("gpu:8", 36000, "predicted:nvlink4", host="ref"),
                       rate_row("gpu:4", 15000, "predicted:pcie5", host="ref"),
                       rate_row("mpi:4", 300, "predicted:tcp", host="ref"))
    bars = versus.reference_bars(versus_data([rate_row("cpu", 50)], ref))
    assert sorted((c.device, c.variant, sample.center) for (_, c), sample in bars.items()) == [
        ("cpu", "", 100), ("gpu:1", "", 5000), ("gpu:4", "predicted:pcie5", 15000),
        ("gpu:8", "predicted:nvlink4", 36000)]


def test_each_cpu_row_of_this_machine_has_a_line_and_a_machine_without_one_no_table():
    ref = reference_of("REF", rate_row("gpu:1", 5000, host="ref"))
    epoch = {**rate_row("cpu", 90), "benchmark": "epochs/mlp/mnist/cpu/fp32/bs:100",
             "kind": "epochs", "epoch": "1"}  # a curve's point, not a steady-state rate
    own = [rate_row("cpu", 4.125), rate_row("cpu", 400, "optimizer:adam"), epoch,
           rate_row("gpu:1", 4000, host="gpu-box")]
    tables = versus.versus_tables(versus_data(own, ref))
    assert [t.series for t in tables] == ["vm"]  # gpu-box has no cpu row
    assert [line[1:3] for line in tables[0].rows] == [["fp32, bs 100", "4.12"],
                                                      ["fp32, bs 100, optimizer:adam", "400"]]
    assert tables[0].rows[0][3] == "1,212x (5k/s)" and tables[0].rows[1][3] == ""
    assert versus.versus_tables(versus_data(own)) == []  # no reference, no table


def test_columns_follow_the_references_order_then_the_device_order():
    first = reference_of("Zeta", rate_row("gpu:1", 5000, host="z"))
    second = reference_of("Alpha", rate_row("cpu", 500, host="a"), rate_row("gpu:1", 900, host="a"))
    table, = versus.versus_tables(versus_data([rate_row("cpu", 50)], first, second))
    assert table.headers[3:] == ["Zeta gpu:1 fp32 / this cpu", "Alpha cpu fp32 / this cpu",
                                 "Alpha gpu:1 fp32 / this cpu"]


def test_only_versions_both_runs_name_and_that_differ_are_said():
    ref = reference_of("REF", rate_row("gpu:1", 5000, host="ref", git_commit="aaa",
                                       compiler="gcc 12", onednn="3.6"))
    data = versus_data([rate_row("cpu", 50, git_commit="bbb", compiler="gcc 12", onednn="")], ref)
    assert versus.version_differences(data, "vm", "REF") == "git_commit aaa vs bbb"
    same = versus_data([rate_row("cpu", 50, git_commit="aaa", compiler="gcc 12")], ref)
    table, = versus.versus_tables(same)
    assert not any(n.startswith("Versions differ") for n in table.notes), table.notes


def test_a_references_epoch_rows_are_not_its_bars():
    epoch = {**rate_row("cpu", 90, host="ref"), "benchmark": "epochs/mlp/mnist/cpu/fp32/bs:100",
             "kind": "epochs", "epoch": "1"}
    data = versus_data([rate_row("cpu", 50)], reference_of("REF", rate_row("cpu", 100, host="ref"),
                                                           epoch))
    assert [r["kind"] for r in data.reference_rows] == ["train"]


def test_the_markdown_table_aligns_figures_right_and_escapes_a_pipe():
    table = versus.VersusTable("vm", ["workload", "this cpu row", "this cpu samples/s", "H100"],
                               [["mlp · mnist", "fp32, bs 100", "50", "a|b"]], ["A note."])
    assert versus.render_markdown([table]).splitlines()[2:5] == [
        "| workload | this cpu row | this cpu samples/s | H100 |", "| --- | --- | ---: | ---: |",
        "| mlp · mnist | fp32, bs 100 | 50 | a\\|b |"]

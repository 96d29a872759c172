"""scripts/cpu_isa_table.py, the table scripts/bench_cpu_isa.sh ends with: each build and ISA's
median samples/s over its rounds, their range and the median of the rounds' ratios over the native
build at the best ISA, from the committed run of docs/cpu-kernels.md and copies of it with rows
left out or added; and its refusals (exit 2, one line)."""
import csv
import re

from conftest import FIXTURES, ROOT, run_script, written

RUN = ROOT / "results" / "vm" / "cpu-isa-20261128.csv"
DOC = ROOT / "docs" / "cpu-kernels.md"
HEAD = "| benchmark | native avx512 | native avx2 | native sse2 | generic avx512 |"
MLP = "train/mlp/mnist/cpu/fp32/bs:100"
LSTM = "train/lstm/sine/cpu/fp32/bs:20"
NATIVE, GENERIC = "gcc 12.2.0, -march=native", "gcc 12.2.0, generic x86-64"


def table_lines(text: str) -> dict:
    """benchmark -> the cells of its line, in the order of the table."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| train/"):
            out[cells[0]] = cells[1:]
    return out


def committed_rows() -> list[dict]:
    with open(RUN, newline="") as f:
        return list(csv.DictReader(f))


def test_the_committed_run_gives_each_columns_median_range_and_ratio():
    r = run_script("cpu_isa_table.py", RUN)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[:2] == [HEAD, "| --- | ---: | ---: | ---: | ---: |"]
    # The benchmarks in the file's order, the native build at the best ISA first and without a ratio.
    assert list(table_lines(r.stdout)) == [
        MLP, "train/mlp/fashion-mnist/cpu/fp32/bs:100", "train/lenet5/cifar10/cpu/fp32/bs:100", LSTM,
        "train/resnet152/cifar10/cpu/fp32/bs:128", "train/resnet152/imagenet/cpu/fp32/bs:8"]
    # The ratios pair the k-th round of each column with the k-th of the native avx512 one.
    assert table_lines(r.stdout)[MLP] == ["18,188 (11,649-18,539)", "18,152 (11,084-18,610, 1.00x)",
                                          "9,150 (7,006-16,724, 0.68x)", "17,697 (12,214-18,653, 1.00x)"]
    assert table_lines(r.stdout)[LSTM] == ["149,648 (143,953-150,267)", "116,296 (114,986-117,491, 0.78x)",
                                           "98,213 (97,814-98,486, 0.66x)",
                                           "148,440 (147,981-149,048, 0.99x)"]
    assert out[-1] == ("samples/s on the wall clock: the median of up to 5 runs per column; in brackets "
                       "their lowest and highest and the median of the rounds' ratios over the native build "
                       f"at avx512 ({RUN})")


def test_the_medians_are_the_ones_docs_cpu_kernels_md_shows():
    doc = DOC.read_text(encoding="utf-8")
    shown = doc[doc.index(HEAD):].split("\n\n")[0]
    r = run_script("cpu_isa_table.py", RUN)
    ours = {name: [cell.split(" (")[0] for cell in cells] for name, cells in table_lines(r.stdout).items()}
    theirs = table_lines(shown)
    assert theirs and all(ours[name] == cells for name, cells in theirs.items()), shown


def test_rows_that_are_no_measured_ok_repetition_with_an_isa_are_left_out(tmp_path):
    """A failed row, a median aggregate, a prediction and a row without cpu_isa, each of 99,999
    samples/s at the native build's avx512, change nothing."""
    rows = committed_rows()
    row = next(r for r in rows
               if r["benchmark"] == MLP and r["compiler"] == NATIVE and r["cpu_isa"] == "avx512")
    extra = [{**row, "status": "error"}, {**row, "run_type": "aggregate", "aggregate": "median"},
             {**row, "measurement": "predicted"}, {**row, "cpu_isa": ""}]
    r = run_script("cpu_isa_table.py", written(rows + [{**x, "samples_per_s": "99999"} for x in extra],
                                               tmp_path / "extra.csv"))
    assert r.returncode == 0, r.stderr
    assert table_lines(r.stdout) == table_lines(run_script("cpu_isa_table.py", RUN).stdout)


def test_a_column_a_benchmark_lacks_is_a_dash_and_the_runs_are_the_most_of_a_column(tmp_path):
    """The LSTM without its generic rows, and the MLP's sse2 with two of its five rounds: the
    ratios pair the rounds that both columns ran."""
    rows = [r for r in committed_rows() if not (r["benchmark"] == LSTM and r["compiler"] == GENERIC)]
    sse2 = [r for r in rows if r["benchmark"] == MLP and r["cpu_isa"] == "sse2"]
    rows = [r for r in rows if r not in sse2[2:]]
    r = run_script("cpu_isa_table.py", written(rows, tmp_path / "fewer.csv"))
    assert r.returncode == 0, r.stderr
    assert table_lines(r.stdout)[LSTM][3] == "-"
    cell = table_lines(r.stdout)[MLP][2]
    assert re.fullmatch(r"[\d,]+ \([\d,]+-[\d,]+, [\d.]+x\)", cell), cell
    assert "the median of up to 5 runs per column" in r.stdout


def test_a_run_of_the_generic_build_alone_is_a_table_over_its_best_isa(tmp_path):
    """A file without native rows (bench_cpu_isa.sh with TB_BIN a generic build) was a
    StopIteration traceback."""
    generic = [r for r in committed_rows() if r["compiler"] == GENERIC]
    path = written(generic, tmp_path / "generic.csv")
    r = run_script("cpu_isa_table.py", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "| benchmark | generic avx512 |"
    assert table_lines(r.stdout)[LSTM] == ["148,440 (147,981-149,048)"]
    assert r.stdout.endswith(f"over the generic build at avx512 ({path})\n")


def test_no_file_two_files_an_unreadable_file_and_no_isa_are_refused(tmp_path):
    for args in ([], [RUN, RUN]):
        r = run_script("cpu_isa_table.py", *args)
        assert (r.returncode, r.stderr) == (2, "Markdown on stdout. Usage: cpu_isa_table.py CSV\n")
    r = run_script("cpu_isa_table.py", tmp_path / "missing.csv")
    assert r.returncode == 2 and r.stderr.startswith("cpu_isa_table.py: error: ")
    assert len(r.stderr.splitlines()) == 1
    before_isa = FIXTURES / "binary" / "cpu-links.csv"
    r = run_script("cpu_isa_table.py", before_isa)
    assert (r.returncode, r.stderr) == (
        2, f"cpu_isa_table.py: error: {before_isa}: no ok cpu rows with a cpu_isa (schema 7)\n")

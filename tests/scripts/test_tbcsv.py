"""Tests of scripts/tbcsv.py, the reader plot.py and compare.py share: schema_version 3 files
alone and mixed with version 2 (driver_version's change of meaning), unknown versions refused
with the file and line, which columns count as machine context, and that the fixtures' v2/v3
headers are the ones bench/ writes."""
import re

import pytest

from conftest import ROOT, data_file, load_generator, rewrite_csv

GPU_V2, GPU_V3 = data_file("gpu_v2.csv"), data_file("gpu_v3.csv")


def test_a_v3_file_is_read_with_its_telemetry(tbcsv_mod):
    t = tbcsv_mod.read_table(GPU_V3)
    assert {r["schema_version"] for r in t.rows} == {"3"}
    # The file's header, then what the upgrade gave its rows: version 4's identity, version 6's
    # columns, the device clock's columns its GPU rows were moved to on read, version 7's.
    header = load_generator().V3_HEADER
    moved = ["device_step_time_s", "device_samples_per_s"]
    assert t.columns == (header + ["variant", "measurement"] + list(tbcsv_mod.SCHEMA_6_COLUMNS) + moved
                         + list(tbcsv_mod.SCHEMA_7_COLUMNS))
    assert header[-len(tbcsv_mod.SCHEMA_3_COLUMNS):] == list(tbcsv_mod.SCHEMA_3_COLUMNS)
    gpu = [r for r in t.rows if tbcsv_mod.is_iteration(r) and tbcsv_mod.on_gpu(r)]
    cpu = [r for r in t.rows if r["device_kind"] == "cpu"]
    assert len(gpu) == 24 and cpu
    for column in ("gpu_util", "gpu_mem_used_bytes", "gpu_power_w", "energy_j_per_sample",
                   "gpu_sm_clock_min_mhz", "gpu_sm_clock_median_mhz", "gpu_temp_max_c",
                   "gpu_samples"):
        assert all(tbcsv_mod.number(r, column) is not None for r in gpu), column
        assert not any(r[column] for r in cpu), column  # CPU rows leave them empty
    assert {r["gpu_throttle"] for r in gpu} == {"none", "sw_power_cap+sw_thermal_slowdown"}
    jobs = [r for r in gpu if r["device_kind"] == "gpu:1/jobs:K"]
    assert jobs and all(tbcsv_mod.number(r, "host_cpu_util_per_job") ==
                        pytest.approx(tbcsv_mod.number(r, "host_cpu_util") / 2, rel=1e-5)
                        for r in jobs)
    assert {r["driver_version"] for r in t.rows} == {"580.159.04"}  # v3 rows are left as written
    assert {r["cuda_driver_version"] for r in t.rows} == {"13.0"}


def test_v2_and_v3_files_are_read_together(tbcsv_mod):
    tables = tbcsv_mod.read_tables([GPU_V2, GPU_V3])
    rows = tbcsv_mod.all_rows(tables)
    assert {r["schema_version"] for r in rows} == {"2", "3"}
    columns = tbcsv_mod.all_columns(tables)
    assert columns.count("cuda_driver_version") == 1 and "energy_j_per_sample" in columns
    # v2's driver_version was the CUDA driver API version: moved to v3's name for it.
    v2 = [r for r in rows if r["schema_version"] == "2"]
    assert {r["cuda_driver_version"] for r in v2} == {"13.0"}
    assert {r["driver_version"] for r in v2} == {""}
    assert tbcsv_mod.distinct(rows, "driver_version") == ["580.159.04"]
    assert tbcsv_mod.distinct(rows, "cuda_driver_version") == ["13.0"]
    # Measurements by column name, whichever file a row came from.
    sps = tbcsv_mod.samples(rows, lambda r: (r["schema_version"], r["benchmark"]), "samples_per_s")
    energy = tbcsv_mod.samples(rows, lambda r: (r["schema_version"], r["benchmark"]),
                               "energy_j_per_sample")
    assert len(sps) == 18 and {v for v, _ in energy} == {"3"}


@pytest.mark.parametrize("version", ["9", "8", "", "3.0"])
def test_an_unknown_version_is_refused_naming_the_file_and_line(tbcsv_mod, tmp_path, version):
    lines = open(GPU_V3).read().splitlines()
    lines[3] = version + lines[3][1:]  # the third row (line 4 of the file)
    bad = tmp_path / "v3_edited.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(tbcsv_mod.InputError) as e:
        tbcsv_mod.read_table(str(bad))
    assert str(e.value) == (f"{bad}: line 4: unknown schema_version {version!r} (these scripts "
                            f"read versions 1, 2, 3, 4, 5, 6, 7)")


def test_a_row_cut_short_is_left_out_saying_so_and_rows_glued_together_are_refused(tbcsv_mod, tmp_path, capsys):
    """A row cut short, which trainbench's next run leaves on its own line, is left out with a
    note and the rows around it read (before, the whole file was refused); a line with more
    fields than the header is refused, naming it."""
    lines = open(GPU_V3).read().splitlines()
    cut = tmp_path / "cut.csv"
    cut.write_text("\n".join([lines[0], lines[1], lines[2][:40], *lines[3:]]) + "\n")
    table = tbcsv_mod.read_table(str(cut))
    assert len(table.rows) == len(lines) - 2
    assert f"{cut}: line 3 has" in capsys.readouterr().err
    glued = tmp_path / "glued.csv"
    glued.write_text("\n".join([lines[0], lines[1] + "," + lines[2], *lines[3:]]) + "\n")
    with pytest.raises(tbcsv_mod.InputError, match="line 2 has .* fields, the header has"):
        tbcsv_mod.read_table(str(glued))



def test_rows_before_version_4_read_as_measured_as_version_4_writes_them(tbcsv_mod):
    assert {r["measurement"] for r in tbcsv_mod.read_table(GPU_V3).rows} == {"measured"}

def test_a_number_is_a_finite_float_or_none(tbcsv_mod):
    """tbcsv.number: a cell that is empty, missing, not a number or not finite is no value (an
    inf or nan rate would poison every median, ratio and band it reached)."""
    for text in ("inf", "-inf", "+inf", "Infinity", "nan", "NaN", "-nan", "", "  ", "fast"):
        assert tbcsv_mod.number({"samples_per_s": text}, "samples_per_s") is None, text
    assert tbcsv_mod.number({}, "samples_per_s") is None
    assert tbcsv_mod.number({"samples_per_s": " 1e3 "}, "samples_per_s") == 1000.0
    assert tbcsv_mod.number({"samples_per_s": "-0.5"}, "samples_per_s") == -0.5



def test_a_sample_is_the_ok_repetitions_values_never_a_failed_ones(tbcsv_mod):
    """A repetition that failed after it measured (a loss that went nan) keeps its figures in
    the file; they are no measurement of the benchmark."""
    rows = [{"benchmark": "b", "run_type": "iteration", "status": status, "samples_per_s": rate}
            for status, rate in (("ok", "100"), ("failed", "5"), ("ok", "110"))]
    [sample] = tbcsv_mod.samples(rows, lambda r: r["benchmark"], "samples_per_s").values()
    assert sample.values == [100.0, 110.0] and sample.source == "iterations"

def test_telemetry_is_measurement_not_machine_context(tbcsv_mod):
    header = tbcsv_mod.read_table(GPU_V3).columns
    context = tbcsv_mod.context_columns(header)
    for column in ("gpu_name", "gpu_clock_mhz", "driver_version", "cuda_version",
                   "cuda_driver_version", "nccl_version"):
        assert column in context, column
    for column in tbcsv_mod.GPU_TELEMETRY_COLUMNS + ("cuda_graph", "data_on_device"):
        assert column not in context, column
    # A later column that names a GPU is context unless its suffix says it is a measurement.
    assert tbcsv_mod.context_columns(["gpu_bus", "gpu_kernel_s", "nccl_wait_pct"]) == ["gpu_bus"]


def test_distinct_values_are_the_non_empty_cells_stripped_in_first_seen_order(tbcsv_mod):
    rows = [{"host": " b "}, {"host": "a"}, {"host": ""}, {}, {"host": "b"}]
    assert tbcsv_mod.distinct(rows, "host") == ["b", "a"]


def test_a_timestamp_range_runs_from_the_first_to_the_last(tbcsv_mod):
    stamps = ["2026-11-28T11:57:00Z", "2026-11-28T11:55:01Z", "2026-11-28T11:56:00Z"]
    assert tbcsv_mod.timestamp_range([{"timestamp": t} for t in stamps]) == \
        "2026-11-28T11:55:01Z – 2026-11-28T11:57:00Z"


def source_columns() -> tuple[str, list[str]]:
    """kSchemaVersion and the CSV's column names as bench/ spells them: the X(name, type, kind)
    entries of TB_ROW_COLUMNS in bench/schema/row.hpp, in the CSV's order."""
    schema = ROOT / "bench" / "schema"
    headers = " ".join(p.read_text() for p in sorted(schema.glob("*.hpp")))
    version = re.search(r'kSchemaVersion\s*=\s*"([^"]*)"', headers)
    names = re.findall(r"^\s*X\((\w+), (?:Text|Count|Number), (?:Identity|Counter|Context)\)",
                       (schema / "row.hpp").read_text(), re.M)
    assert version and names and names[0] == "schema_version", (
        "cannot find kSchemaVersion and the column list in bench/schema/ (columns.hpp, row.hpp): "
        "update source_columns() in tests/scripts/test_tbcsv.py to where they moved")
    return version.group(1), names


def test_fixture_headers_are_what_trainbench_writes(tbcsv_mod):
    """The fixtures stand for real files only while their headers are trainbench's: version 3
    is version 2 with SCHEMA_3_COLUMNS appended, version 4 is version 3 with SCHEMA_4_COLUMNS
    appended, version 5 is version 4 with SCHEMA_5_COLUMNS appended, version 6 is version 5 with
    SCHEMA_6_COLUMNS appended, and bench/ writes the header of the version its kSchemaVersion
    names."""
    generate = load_generator()
    assert generate.V3_HEADER[:len(generate.V2_HEADER)] == generate.V2_HEADER
    assert tuple(generate.V3_HEADER[len(generate.V2_HEADER):]) == tbcsv_mod.SCHEMA_3_COLUMNS
    assert generate.V4_HEADER[:len(generate.V3_HEADER)] == generate.V3_HEADER
    assert tuple(generate.V4_HEADER[len(generate.V3_HEADER):]) == tbcsv_mod.SCHEMA_4_COLUMNS
    assert generate.V5_HEADER[:len(generate.V4_HEADER)] == generate.V4_HEADER
    assert tuple(generate.V5_HEADER[len(generate.V4_HEADER):]) == tbcsv_mod.SCHEMA_5_COLUMNS
    assert generate.V6_HEADER[:len(generate.V5_HEADER)] == generate.V5_HEADER
    assert tuple(generate.V6_HEADER[len(generate.V5_HEADER):]) == tbcsv_mod.SCHEMA_6_COLUMNS
    assert generate.V7_HEADER[:len(generate.V6_HEADER)] == generate.V6_HEADER
    assert tuple(generate.V7_HEADER[len(generate.V6_HEADER):]) == tbcsv_mod.SCHEMA_7_COLUMNS
    version, columns = source_columns()
    assert version in tbcsv_mod.SCHEMA_VERSIONS, (
        f"bench/ writes schema_version {version}: teach scripts/tbcsv.py to read it")
    headers = {"2": generate.V2_HEADER, "3": generate.V3_HEADER, "4": generate.V4_HEADER,
               "5": generate.V5_HEADER, "6": generate.V6_HEADER, "7": generate.V7_HEADER}
    assert version in headers, f"no fixture header for schema_version {version}"
    assert columns == headers[version], (
        f"bench/'s columns differ from tests/scripts/fixtures/generate.py's "
        f"V{version}_HEADER: update the fixtures and results/SCHEMA.md with the schema")


def test_a_missing_module_names_debians_python_where_that_one_has_it(tbcsv_mod, monkeypatch):
    """Run by another python3 first on PATH (pyenv's, a venv), a script that lacks matplotlib or
    SciPy names /usr/bin/python3 where that one has the module, rather than a package that is
    already installed; where it has not either, the install command."""
    monkeypatch.setattr(tbcsv_mod.sys, "executable", "/nonexistent/python3")
    assert tbcsv_mod.with_module("json", "pip install json") == "run it with /usr/bin/python3, which has it"
    assert tbcsv_mod.with_module("no_such_module_anywhere", "pip install it") == "pip install it"


def test_a_row_one_field_short_is_left_out_and_one_field_too_many_is_refused(tbcsv_mod, tmp_path, capsys):
    """The edges of the rule above: a row missing only its last field is as cut short as one
    missing most of them, and a single field too many is as glued as a whole row."""
    lines = open(GPU_V3).read().splitlines()
    short = tmp_path / "short.csv"
    short.write_text("\n".join([lines[0], lines[1].rsplit(",", 1)[0], *lines[2:]]) + "\n")
    table = tbcsv_mod.read_table(str(short))
    assert len(table.rows) == len(lines) - 2
    assert f"{short}: line 2 has {lines[0].count(',')} of the header's" in capsys.readouterr().err
    long = tmp_path / "long.csv"
    long.write_text("\n".join([lines[0], lines[1] + ",", *lines[2:]]) + "\n")
    with pytest.raises(tbcsv_mod.InputError, match="line 2 has .* fields, the header has"):
        tbcsv_mod.read_table(str(long))



@pytest.mark.parametrize("first, message", [
    ("", "not a trainbench CSV (line 1 is blank where the header starting with schema_version "
         "should be)"),
    (",,,", "not a trainbench CSV (line 1 is blank where the header starting with schema_version "
            "should be)"),
    (None, "empty file (no header, no rows)")])
def test_a_blank_first_line_is_called_empty_only_where_nothing_follows(tbcsv_mod, tmp_path,
                                                                       first, message):
    """A blank line, or one of commas, before a run's header and rows was called an empty file
    (no header, no rows); trainbench's reader calls it not a trainbench CSV."""
    text = open(GPU_V3).read() if first is not None else ""
    path = tmp_path / "blank_first.csv"
    path.write_text(f"{first or ''}\n{text}\n\n")
    with pytest.raises(tbcsv_mod.InputError) as e:
        tbcsv_mod.read_table(str(path))
    assert str(e.value) == f"{path}: {message}"

@pytest.mark.parametrize("column", ["benchmark", "run_type", "status"])
def test_a_file_without_a_column_every_row_needs_is_refused_naming_it(tbcsv_mod, tmp_path, column):
    path = rewrite_csv(GPU_V3, tmp_path / "without.csv", drop=(column,))
    with pytest.raises(tbcsv_mod.InputError) as e:
        tbcsv_mod.read_table(path)
    assert str(e.value) == f"{path}: not a trainbench CSV (missing column {column})"


def test_a_row_with_some_of_version_7s_columns_gets_the_others_empty(tbcsv_mod, tmp_path):
    """Early version 7 files have the instruction sets but not the windows (window_samples_per_s
    came later in version 7): the reader gives their rows and header the columns they lack."""
    generate = load_generator()
    lacking = ("prediction_model", "window_samples_per_s")
    header = [c for c in generate.V7_HEADER if c not in lacking]
    row = {**generate.identity("mlp", "cpu", 2, generate.VM), "schema_version": "7",
           "run_type": "iteration", "status": "ok", "samples_per_s": 100, "onednn_isa": "avx2"}
    path = tmp_path / "early_v7.csv"
    generate.write(path, header, [row])
    table = tbcsv_mod.read_table(str(path))
    assert [table.rows[0][c] for c in tbcsv_mod.SCHEMA_7_COLUMNS] == ["avx2", "", "", ""]
    assert table.columns[-2:] == list(lacking)

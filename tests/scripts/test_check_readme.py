"""scripts/check_readme.py: the figures of the README and of every docs/ page match the result
files they are quoted from; a copy with one figure changed, or with a marker naming a file that
does not exist, fails and names it; the rounding rule that decides a match; and the README stays
a front page of at most 250 visible lines."""
import re
from pathlib import Path

import pytest

import check_readme
from conftest import ROOT, run_script

README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MOST_VISIBLE_LINES = 250  # issue 56: the README is a front page, the detail lives in docs/


def figures(page: Path = README):
    found, _ = check_readme.check(page, ROOT)
    return found


def altered(shown: str) -> str:
    """shown with its last digit moved by 5: a different figure at any rounding."""
    digits = [i for i, c in enumerate(shown) if c.isdigit()]
    assert digits, shown
    i = digits[-1]
    return shown[:i] + str((int(shown[i]) + 5) % 10) + shown[i + 1:]


def check_copy(text: str, tmp_path: Path):
    copy = tmp_path / "README.md"
    copy.write_text(text, encoding="utf-8")
    return run_script("check_readme.py", copy, "--root", ROOT)


def test_the_readme_matches_its_files():
    r = run_script("check_readme.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"all \d+ figures in README.md match their files", r.stdout), r.stdout


def test_every_docs_page_matches_its_files_and_its_links_resolve():
    """Without arguments every docs/ page is checked too, each with one summary line."""
    r = run_script("check_readme.py")
    assert r.returncode == 0, r.stdout + r.stderr
    for page in DOCS:
        name = f"docs/{page.name}"
        assert (re.search(rf"all \d+ figures in {re.escape(name)} match their files", r.stdout)
                or f"no figures in {name}; its links resolve" in r.stdout), (name, r.stdout)
    assert re.search(r"all \d+ figures in docs/results.md match their files", r.stdout), r.stdout


def test_the_readme_has_at_most_250_visible_lines():
    """Visible: outside HTML comments, which hold the figure markers and GitHub does not show."""
    visible = check_readme.visible_lines(README.read_text(encoding="utf-8"))
    assert visible <= MOST_VISIBLE_LINES, \
        f"README.md has {visible} visible lines: move the detail to docs/"


def test_visible_lines_leave_out_comments_only():
    text = "a\n<!-- figures X = 1\n\"{1}\" = X -->\n\nb <!-- c --> b\n<!-- d -->e\n<!-- one -->\n"
    assert check_readme.visible_lines(text) == 4  # a, the blank line, b ... b, e


def test_every_results_section_figure_is_marked():
    """Wherever the results live (the README's short Results, docs/results.md with the rest), they
    hold markers, covering tables and paragraphs alike, and each of the checked sections of
    docs/results.md (those above its older runs) has its marker."""
    for page, least in ((README, 10), (RESULTS, 50)):
        kinds = {f.label[0] for f in figures(page)}
        assert kinds == {"[", '"'}, (page.name, kinds)
        assert len(figures(page)) >= least, page.name
    checked = RESULTS.read_text(encoding="utf-8").split("\n## Charts of the newest run")[0]
    for section in checked.split("\n## ")[1:]:
        assert "<!-- figures" in section, "a results section without markers: " + section[:80]


def candidate(kind: str, page: Path = README):
    """A figure of one kind ("[": a table cell, '"': in a paragraph) that one edit of its page's
    line changes alone: a unique label, shown once on its line."""
    found = figures(page)
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    for f in found:
        line = lines[f.shown_line - 1]
        has_digits = any(c.isdigit() for c in f.shown or "")
        if (f.label[0] == kind and has_digits and line.count(f.shown) == 1
                and sum(g.label == f.label for g in found) == 1):
            return f, lines
    raise AssertionError(f"no figure of kind {kind} to change")


@pytest.mark.parametrize("kind", ["[", '"'])
def test_a_changed_figure_fails_naming_it(kind, tmp_path):
    figure, lines = candidate(kind)
    changed = altered(figure.shown)
    lines[figure.shown_line - 1] = lines[figure.shown_line - 1].replace(figure.shown, changed)
    r = check_copy("".join(lines), tmp_path)
    assert r.returncode == 1, r.stdout
    assert f"figure {figure.label}: the README shows {changed!r}" in r.stdout, r.stdout


def docs_copy(tmp_path: Path, text: str) -> Path:
    """docs/results.md with text instead, in a tree of links to this checkout's files, so that its
    markers and its ../ links resolve as in the checkout (a link out of the checkout does not)."""
    (tmp_path / "docs").mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("docs", ".git"):
            (tmp_path / entry.name).symlink_to(entry)
    for page in DOCS:
        if page != RESULTS:
            (tmp_path / "docs" / page.name).symlink_to(page)
    copy = tmp_path / "docs" / RESULTS.name
    copy.write_text(text, encoding="utf-8")
    return copy


def test_a_changed_figure_on_a_docs_page_fails_naming_it(tmp_path):
    figure, lines = candidate("[", RESULTS)
    changed = altered(figure.shown)
    lines[figure.shown_line - 1] = lines[figure.shown_line - 1].replace(figure.shown, changed)
    r = run_script("check_readme.py", docs_copy(tmp_path, "".join(lines)), "--root", tmp_path)
    assert r.returncode == 1, r.stdout
    where = f"docs/results.md:{figure.shown_line}"
    assert f"{where}: figure {figure.label}: the page shows {changed!r}" in r.stdout, r.stdout
    summary = r"check_readme.py: 1 of \d+ figures in docs/results.md do not match"
    assert re.search(summary, r.stdout), r.stdout


def test_a_broken_link_on_a_docs_page_fails(tmp_path):
    """A page's links are relative to its own folder: ../results/ from docs/, results/ is not."""
    text = RESULTS.read_text(encoding="utf-8")
    r = run_script("check_readme.py", docs_copy(tmp_path, text + "\n[wrong](results/vm/)\n"),
                   "--root", tmp_path)
    assert r.returncode == 1 and "link to results/vm/, which does not exist" in r.stdout, r.stdout


def test_a_link_out_of_the_repository_fails_though_it_resolves(tmp_path):
    """A link that leaves the checkout works only where the checkout lies beside what it names
    (docs/results.md once linked ../../shared/measurements/): nobody reading the repository can
    follow it."""
    text = RESULTS.read_text(encoding="utf-8")
    r = run_script("check_readme.py", docs_copy(tmp_path, text + "\n[outside](../../)\n"), "--root", tmp_path)
    assert (tmp_path / "docs" / "../..").exists()
    assert r.returncode == 1 and "link to ../../, which leads out of the repository" in r.stdout, r.stdout


def test_a_changed_copied_table_cell_fails_naming_it(tmp_path):
    """A cell of a table copied from a summary file, its row and column named (a README of its
    own: the project's README quotes its tables cell by cell now)."""
    summary = tmp_path / "summary.md"
    summary.write_text("| workload | precision | gpu:1 samples/s |\n| --- | --- | ---: |\n"
                       "| mlp/mnist | fp32 | 368370 |\n| lstm/sine | fp32 | 15743 |\n", encoding="utf-8")
    table = ("| workload | precision | gpu:1 samples/s |\n| --- | --- | ---: |\n"
             "| mlp/mnist | fp32 | {mlp} |\n| lstm/sine | fp32 | 15743 |\n")
    readme = tmp_path / "README.md"
    marker = f'# Results\n\n<!-- figures table "{summary.name}" by workload, precision -->\n'
    readme.write_text(marker + table.format(mlp="368370"), encoding="utf-8")
    ok = run_script("check_readme.py", readme, "--root", tmp_path)
    assert ok.returncode == 0, ok.stdout
    readme.write_text(marker + table.format(mlp="368375"), encoding="utf-8")
    r = run_script("check_readme.py", readme, "--root", tmp_path)
    assert r.returncode == 1, r.stdout
    assert "mlp/mnist" in r.stdout and "gpu:1 samples/s" in r.stdout and "368375" in r.stdout, r.stdout


def test_a_marker_naming_a_missing_file_fails_naming_the_file(tmp_path):
    text = README.read_text(encoding="utf-8")
    m = re.search(r'^(<!-- figures )?(\w+) = "(results/[^"]+\.csv)"', text, re.M)
    assert m, "no marker names a CSV file"
    missing = "results/h100/no-such-file.csv"
    r = check_copy(text.replace(f'"{m.group(3)}"', f'"{missing}"'), tmp_path)
    assert r.returncode == 1, r.stdout
    assert f"{missing}: no such file" in r.stdout, r.stdout


def test_a_figure_whose_text_left_the_paragraph_fails(tmp_path):
    figure, lines = candidate('"')
    lines[figure.shown_line - 1] = "A sentence that says something else.\n"
    r = check_copy("".join(lines), tmp_path)
    assert r.returncode == 1, r.stdout
    message = f"figure {figure.label}: the paragraph after the marker does not contain this text"
    assert message in r.stdout, r.stdout


def test_a_broken_link_fails(tmp_path):
    text = README.read_text(encoding="utf-8") + "\n[gone](results/h100/gone.csv)\n"
    r = check_copy(text, tmp_path)
    assert r.returncode == 1 and "link to results/h100/gone.csv" in r.stdout, r.stdout


@pytest.mark.parametrize("shown,value,ok", [
    ("3,167", 3167.29, True), ("3,168", 3167.29, False), ("100%", 99.9949, True),
    ("99.9%", 99.8648, True), ("99.9%", 99.84, False), ("1.04x", 1.04136, True),
    ("342k", 341950.0, True), ("343k", 341950.0, False), ("0.14", 0.141788, True),
    ("187.00x", 187.0, True), ("none", "none", True), ("none", "sw_power_cap", False),
    ("", "", True), ("", 12475.0, False), ("12475", "", False),
])
def test_a_shown_figure_matches_within_its_rounding(shown, value, ok):
    assert check_readme.matches(shown, value) is ok


def test_expressions_allow_arithmetic_and_the_functions_only(tmp_path):
    evaluate = check_readme.Evaluator(check_readme.Sources(tmp_path))
    assert evaluate("100 * (1 - 3 / 4)") == 25
    assert evaluate('"a/" + "b"') == "a/b"
    for bad in ("__import__('os')", "open('x')", "(1).real", "[1, 2]"):
        with pytest.raises(check_readme.FigureError):
            evaluate(bad)


# ---- the marker language's rules, on pages and files of a test's own ------------------------

FIXTURES = ROOT / "tests" / "scripts" / "fixtures"
MLP = "train/mlp/mnist/cpu/fp32/bs:100"


def page_check(tmp_path: Path, text: str):
    """check() of a page holding text, its markers' files under tmp_path: the figures that do not
    match, as {label: error or what the page shows}."""
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    found, _ = check_readme.check(page, tmp_path)
    return {f.label: f.error or f.shown for f in found
            if f.error or not check_readme.matches(f.shown or "", f.value)}


def with_failed_rows(tmp_path: Path) -> Path:
    """compare_base.csv with three failed repetitions of the MLP far off its rate."""
    import csv
    with open(FIXTURES / "compare_base.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    mlp = next(r for r in rows if r["benchmark"] == MLP and r["run_type"] == "iteration")
    rows += [dict(mlp, repetition=str(9 + i), status="failed", samples_per_s="1000000")
             for i in range(3)]
    path = tmp_path / "base.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_a_figure_reads_the_ok_iteration_rows_else_the_median_aggregates(tmp_path):
    with_failed_rows(tmp_path)
    (tmp_path / "agg.csv").write_bytes((FIXTURES / "aggregates_only.csv").read_bytes())
    text = (f'<!-- figures F = "base.csv"\nA = "agg.csv"\n'
            f'"ok {{100}}" = median(F, "samples_per_s", b="{MLP}")\n'
            f'"aggregates {{10,043}}" = median(A, "samples_per_s", b="{MLP}") -->\n'
            'ok 100, aggregates 10,043\n')
    assert page_check(tmp_path, text) == {}


@pytest.mark.parametrize("expr, error", [
    ('median(F, "samples_per_s", b="nope")', "base.csv: no ok row with benchmark=nope"),
    ('median(F, "no_such_column", b="nope")', "base.csv: no column 'no_such_column'"),
    ('median(F, "samples_per_s", no_such_column="x")', "base.csv: no column 'no_such_column'"),
    (f'one(F, "samples_per_s", b="{MLP}")', "base.csv: 5 rows match, one() needs exactly one"),
    (f'same(F, "samples_per_s", b="{MLP}")',
     "base.csv: samples_per_s differs between the matching rows"),
    ('md("two.md", "mlp", "rate")', "two.md: 2 cells in row 'mlp', column 'rate' (need one)"),
    ('md("gone.md", "mlp", "rate")', "gone.md: no such file"),
    ("X + 1", "unknown name 'X'"),
    ('"a" * 2', "arithmetic on text"),
])
def test_a_figure_that_cannot_be_told_apart_or_read_is_an_error(tmp_path, expr, error):
    with_failed_rows(tmp_path)
    table = "| name | rate |\n| --- | --- |\n| mlp | {} |\n"
    (tmp_path / "two.md").write_text(table.format(1) + "\n" + table.format(2), encoding="utf-8")
    failed = page_check(tmp_path, f'<!-- figures F = "base.csv"\n"x {{1}}" = {expr} -->\nx 1\n')
    assert list(failed) == ["\"x {1}\""] and failed["\"x {1}\""].startswith(error), failed


def test_a_table_figure_needs_one_row_of_its_label(tmp_path):
    text = ('<!-- figures [mlp | rate] = 1 -->\n'
            '| name | rate |\n| --- | --- |\n| mlp | 1 |\n| **mlp** | 2 |\n')
    assert page_check(tmp_path, text) == \
        {"[mlp | rate]": "the table after the marker has 2 rows 'mlp' (need one)"}


def test_a_copied_table_may_hold_some_columns_and_each_of_its_rows_must_be_in_the_source(tmp_path):
    (tmp_path / "summary.md").write_text("| workload | precision | rate | note |\n"
                                         "| --- | --- | ---: | --- |\n| mlp | fp32 | 1,234 | a |\n",
                                         encoding="utf-8")
    marker = '<!-- figures table "summary.md" by workload, precision -->\n'
    header = "| workload | precision | rate |\n| --- | --- | ---: |\n"
    assert page_check(tmp_path, marker + header + "| mlp | fp32 | 1,234 |\n") == {}
    assert page_check(tmp_path, marker + header + "| lstm | fp32 | 1,234 |\n") == \
        {"[lstm fp32 | rate]": "summary.md: no row lstm fp32"}


def test_the_block_after_a_marker_skips_other_comments_and_ends_at_one(tmp_path):
    lines = ["<!-- figures X = 1 -->", "<!-- another", "comment -->", "", "text one", "<!-- b -->",
             "text two"]
    assert check_readme.target_block(lines, 0).lines == ["text one"]
    # Whitespace counts as one space, in the marker's text as on the page.
    text = '<!-- figures "a  {1} b" = 1\n"a  1" = "a 1" -->\n<!-- a note -->\nsome a\n1 b\n'
    assert page_check(tmp_path, text) == {}


def test_a_marker_without_its_end_is_an_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('<!-- figures X = 1\n"{1}" = X\n\n1\n', encoding="utf-8")
    with pytest.raises(check_readme.FigureError, match="line 1: a figures marker without its -->"):
        check_readme.check(page, tmp_path)


def test_tables_and_blocks_are_read_as_markdown_writes_them():
    assert check_readme.table_rows(["| a \\| b | **c** |", "| --- | :---: |", "| 1 | 2 |"]) == \
        [["a \\| b", "**c**"], ["1", "2"]]
    assert check_readme.normal(" `a \\| b` **c** ") == "a | b c"
    fenced = check_readme.blocks(["```", "one", "", "two", "```", "", "three"])
    assert [b.lines for b in fenced] == [["```", "one", "", "two", "```"], ["three"]]


def test_links_to_anchors_and_links_in_fenced_code_are_not_checked(tmp_path):
    lines = ["[top](#results)", "```", "[example](no/such/file.md)", "```"]
    assert check_readme.broken_links(lines, tmp_path, tmp_path) == []


@pytest.mark.parametrize("shown, value, ok", [
    (" none ", "none", True), ("1", float("nan"), False), ("100%", "100%", True),
    ("1,234", "1,234", True),
    ("99%", "100%", False), ("100.0%", "100%", True), ("1,234.0", "1,234", True),
])
def test_a_shown_figure_matches_a_files_text_as_a_number_where_it_is_one(shown, value, ok):
    assert check_readme.matches(shown, value) is ok


def test_expressions_negate_and_refuse_unknown_names(tmp_path):
    evaluate = check_readme.Evaluator(check_readme.Sources(tmp_path))
    assert evaluate("-2 + 3") == 1
    with pytest.raises(check_readme.FigureError, match="unknown name 'nothing'"):
        evaluate("nothing")


def test_a_readme_without_markers_fails_and_a_missing_page_exits_2(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# A README\n\nNo figures.\n", encoding="utf-8")
    r = run_script("check_readme.py", readme, "--root", tmp_path)
    assert r.returncode == 1 and "no figure markers in" in r.stdout, r.stdout
    r = run_script("check_readme.py", tmp_path / "missing.md")
    assert r.returncode == 2 and "missing.md: no such file" in r.stderr, r.stderr


def test_a_page_outside_the_checkout_reads_its_files_beside_it(tmp_path):
    (tmp_path / "data.md").write_text("| name | rate |\n| --- | --- |\n| mlp | 7 |\n", encoding="utf-8")
    page = tmp_path / "notes.md"
    page.write_text('<!-- figures "rate {7}" = md("data.md", "mlp", "rate") -->\nrate 7\n',
                    encoding="utf-8")
    r = run_script("check_readme.py", page)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all 1 figures in notes.md match their files" in r.stdout, r.stdout

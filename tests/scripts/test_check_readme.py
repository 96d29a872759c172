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

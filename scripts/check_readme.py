"""Checks the figures README.md and the docs/ pages quote from result files: each figure is tied to
its source by a marker (an HTML comment, invisible on GitHub) placed before the paragraph or table
that shows it; this script recomputes every marked figure from its file and compares it with the
page's text, within the rounding the page shows it with. It also checks that each page's relative
links point at files that exist. Standard library only.

Usage: scripts/check_readme.py [FILE] [--root DIR]   (exit 1 naming each figure that no longer
matches its file, or whose file is missing; 2 for a FILE that cannot be read)

Without FILE it checks README.md and every docs/*.md of this checkout, one summary line per page;
with FILE, that page alone. Markers name their files relative to DIR (default: this checkout, or
FILE's folder for a FILE outside it), whichever page they are on; a page's links are relative to
its own folder (for a FILE outside DIR, to DIR). README.md must hold figures; a docs page need not.

A marker is a comment opening with `<!-- figures` whose lines (until `-->`) are each one of:

  NAME = EXPR                  a name for later lines (usually a file: F = "results/x.csv")
  "text {1,234} text" = EXPR   a figure in the next paragraph: the text must occur there
                               (whitespace and line breaks count as one space); the figure is
                               the part in braces (the whole text without braces)
  [ROW | COLUMN] = EXPR        a figure in the next table: the cell of the row whose first cell
                               is ROW, in the column headed COLUMN; [ROW | C1, C2] = EXPR is one
                               figure per column, {column} in EXPR's text standing for its name
  table "FILE.md" by COL, ...  every cell of the next table equals the same cell of the table in
                               FILE.md that has its headers, rows matched by the COL cells

The next paragraph or table is the first block of non-blank lines after the marker, other
markers skipped; a marker inside fenced code (```) is an example and is not read. EXPR is
arithmetic (+ - * / and parentheses over numbers, names and strings; + also joins strings) over
these functions:

  median(F, COLUMN, **where)   median of COLUMN over the rows of CSV file F that match where
  lo(...), hi(...)             the same rows' minimum, maximum
  first(...), last(...)        the first, the last matching row's value
  one(...)                     the value of the only matching row
  same(...)                    the value every matching row has (text such as "none" allowed)
  count(F, **where)            how many rows match
  sps(F, BENCHMARK)            median(F, "samples_per_s", benchmark=BENCHMARK)
  md(F, ROW, COLUMN)           a cell of a Markdown table in F (as [ROW | COLUMN] above)
  js(F, KEY, ...)              a value inside a JSON file
  min(...), max(...), GiB (2**30), MiB (2**20)

where: column=value pairs, all of which a row must hold (b=... is short for benchmark=...).
Rows must have status ok unless status="any" is given; unless run_type or aggregate is given,
the iteration rows are used, or where there are none the median aggregate rows, as
scripts/compare.py and scripts/plot.py read a benchmark. CSV files are read by tbcsv.py, as the
other scripts read them: older rows as version 7 writes them (a GPU row's samples_per_s of a
file before version 5 on the wall clock, its device clock in device_samples_per_s; the columns
of version 6), the median as theirs.

A shown figure is a number with optional thousands commas, decimals and a k or M suffix, and
anything around it (x, %, units) ignored: 395.93, 3,167, 1.04x, 99.9%, 342k. It matches when the
computed value rounds to it: |value - shown| <= half a unit of its last digit. A text figure
(EXPR gives text that is not a number) must be equal.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402

MARKER_OPEN = "<!-- figures"
NUMBER = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*([kM](?![A-Za-z]))?")
CELL_SPLIT = re.compile(r"(?<!\\)\|")
SEPARATOR_CELL = re.compile(r"^:?-{3,}:?$")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SYNTAX = 'expected NAME = EXPR, [ROW | COLUMN] = EXPR, "text" = EXPR or table "FILE.md" by COLUMNS'


class FigureError(Exception):
    """A figure that cannot be computed or found: the message says why, naming the file."""


@dataclass
class Figure:
    label: str  # how messages name it: the text snippet, [ROW | COLUMN], or a table cell
    expr: str  # the expression, or a description for table comparisons
    marker_line: int  # 1-based line of the marker line that defines it
    shown: str | None = None  # the page's text of the figure, once located
    shown_line: int | None = None  # 1-based line of the page that shows it, once located
    value: object = None  # what the file gives, once computed
    error: str | None = None


@dataclass
class Block:
    start: int  # 0-based index of its first line
    lines: list[str] = field(default_factory=list)

    @property
    def is_table(self) -> bool:
        return bool(self.lines) and self.lines[0].lstrip().startswith("|")


# ---- shown figures -----------------------------------------------------------------------------


def shown_number(text: str) -> tuple[float, float] | None:
    """(value, tolerance) of the first number in text, as the page shows it, or None."""
    m = NUMBER.search(text)
    if not m:
        return None
    digits, suffix = m.group(1).replace(",", ""), m.group(2) or ""
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    scale = {"": 1.0, "k": 1e3, "M": 1e6}[suffix]
    return float(digits) * scale, 0.5 * 10.0 ** -decimals * scale


def matches(shown: str, value: object) -> bool:
    """Whether the page's text shows value (a number within its rounding, or equal text)."""
    number = value if isinstance(value, (int, float)) else as_number(str(value))
    if number is None:
        return shown.strip() == str(value).strip()
    parsed = shown_number(shown)
    if parsed is None or math.isnan(number):
        return False
    shown_value, tolerance = parsed
    return abs(number - shown_value) <= tolerance * (1 + 1e-9) + 1e-12


def as_number(text: str) -> float | None:
    """A file's cell as a number where it is one ("18034", "100%", "187.00x", "1.2e+06")."""
    t = text.strip().replace(",", "")
    t = t[:-1] if t.endswith(("%", "x")) else t
    try:
        return float(t)
    except ValueError:
        return None


def display(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


# ---- sources -----------------------------------------------------------------------------------


class Sources:
    """The result files the expressions read, relative to root, each read once."""

    def __init__(self, root: Path):
        self.root = root
        self.cache: dict[str, object] = {}
        self.used: list[str] = []  # the files read since the caller last emptied it

    def path(self, name: object) -> Path:
        if not isinstance(name, str):
            raise FigureError(f"a file name must be text, got {name!r}")
        path = self.root / name
        if not path.is_file():
            raise FigureError(f"{name}: no such file")
        if name not in self.used:
            self.used.append(name)
        return path

    def csv_rows(self, name: str) -> tuple[list[str], list[dict]]:
        """The columns and rows of a trainbench CSV, as tbcsv reads it (upgraded to version 7)."""
        path = self.path(name)
        if name not in self.cache:
            try:
                table = tbcsv.read_table(str(path))
            except tbcsv.InputError as e:
                raise FigureError(str(e).replace(str(path), name, 1)) from None
            self.cache[name] = (table.columns, table.rows)
        return self.cache[name]

    def md_tables(self, name: str) -> list[list[list[str]]]:
        key = "md:" + name
        self.path(name)
        if key not in self.cache:
            lines = self.path(name).read_text(encoding="utf-8").splitlines()
            self.cache[key] = [table_rows(b.lines) for b in blocks(lines) if b.is_table]
        return self.cache[key]

    def json_doc(self, name: str) -> object:
        key = "json:" + name
        self.path(name)
        if key not in self.cache:
            try:
                self.cache[key] = json.loads(self.path(name).read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise FigureError(f"{name}: not JSON ({e})") from None
        return self.cache[key]

    # The functions expressions call.

    def select(self, name: str, where: dict) -> list[dict]:
        header, rows = self.csv_rows(name)
        where = dict(where)
        if "b" in where:
            where["benchmark"] = where.pop("b")
        status = where.pop("status", "ok")
        for column in where:
            if column not in header:
                raise FigureError(f"{name}: no column {column!r}")
        picked = [r for r in rows if (status == "any" or r.get("status") == status)
                  and all(r.get(k, "") == str(v) for k, v in where.items())]
        if "run_type" not in where and "aggregate" not in where:
            picked = ([r for r in picked if tbcsv.is_iteration(r)]
                      or [r for r in picked if tbcsv.is_median_aggregate(r)])
        if not picked:
            shown = ", ".join(f"{k}={v}" for k, v in where.items())
            kind = "" if status == "any" else status + " "
            raise FigureError(f"{name}: no {kind}row with {shown}")
        return picked

    def column(self, name: str, column: str, where: dict, numeric=True) -> list:
        header, _ = self.csv_rows(name)
        if column not in header:
            raise FigureError(f"{name}: no column {column!r}")
        cells = [r.get(column, "") for r in self.select(name, where)]
        if not numeric:
            return cells
        try:
            return [float(c) for c in cells]
        except ValueError:
            raise FigureError(f"{name}: {column} is not a number in every matching row: {cells}") \
                from None

    def md_cell(self, name: str, row: str, column: str) -> object:
        found = []
        for table in self.md_tables(name):
            if column in [normal(c) for c in table[0]]:
                i = [normal(c) for c in table[0]].index(column)
                found += [r[i] for r in table[1:] if normal(r[0]) == row and i < len(r)]
        if len(found) != 1:
            raise FigureError(f"{name}: {len(found)} cells in row {row!r}, column {column!r} "
                              "(need one)")
        number = as_number(found[0])
        return found[0].strip() if number is None else number

    def json_value(self, name: str, keys: tuple) -> object:
        value = self.json_doc(name)
        for key in keys:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                raise FigureError(f"{name}: no {key!r} in {'/'.join(map(str, keys))}") from None
        return value

    def functions(self) -> dict:
        def exactly_one(name, column, **where):
            values = self.column(name, column, where, numeric=False)
            if len(values) != 1:
                raise FigureError(f"{name}: {len(values)} rows match, one() needs exactly one")
            return as_number(values[0]) if as_number(values[0]) is not None else values[0]

        def same(name, column, **where):
            values = set(self.column(name, column, where, numeric=False))
            if len(values) != 1:
                raise FigureError(f"{name}: {column} differs between the matching rows: "
                                  f"{sorted(values)}")
            value = values.pop()
            return as_number(value) if as_number(value) is not None else value

        return {
            "median": lambda n, c, **w: median(self.column(n, c, w)),
            "sps": lambda n, b: median(self.column(n, "samples_per_s", {"benchmark": b})),
            "lo": lambda n, c, **w: min(self.column(n, c, w)),
            "hi": lambda n, c, **w: max(self.column(n, c, w)),
            "first": lambda n, c, **w: self.column(n, c, w)[0],
            "last": lambda n, c, **w: self.column(n, c, w)[-1],
            "one": exactly_one,
            "same": same,
            "count": lambda n, **w: len(self.select(n, w)),
            "md": lambda n, r, c: self.md_cell(n, r, c),
            "js": lambda n, *keys: self.json_value(n, keys),
            "min": min,
            "max": max,
        }


def median(values: list[float]) -> float:
    """The median the other scripts read a benchmark with (tbcsv.Sample)."""
    return tbcsv.Sample(values, "iterations").center


class Evaluator:
    """Evaluates an expression of the marker language: no Python beyond arithmetic and calls."""

    OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
                 ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}

    def __init__(self, sources: Sources):
        self.functions = sources.functions()
        self.names: dict[str, object] = {"GiB": float(2**30), "MiB": float(2**20)}
        self.column = ""  # the column of a [ROW | C1, C2] figure while it is computed

    def fill(self, value: object) -> object:
        """Text with {column} standing for the column of the figure being computed."""
        if isinstance(value, str) and self.column:
            return value.replace("{column}", self.column)
        return value

    def __call__(self, text: str) -> object:
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as e:
            raise FigureError(f"cannot read the expression {text.strip()!r}: {e.msg}") from None
        return self.node(tree.body)

    def node(self, n: ast.AST) -> object:
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float, str)):
            return self.fill(n.value)
        if isinstance(n, ast.Name):
            if n.id not in self.names:
                raise FigureError(f"unknown name {n.id!r}")
            return self.fill(self.names[n.id])
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -self.node(n.operand)
        if isinstance(n, ast.BinOp) and type(n.op) in self.OPERATORS:
            left, right = self.node(n.left), self.node(n.right)
            if isinstance(n.op, ast.Add) and isinstance(left, str) and isinstance(right, str):
                return left + right
            if not all(isinstance(v, (int, float)) for v in (left, right)):
                raise FigureError(f"arithmetic on text: {left!r}, {right!r}")
            try:
                return self.OPERATORS[type(n.op)](left, right)
            except ZeroDivisionError:
                raise FigureError("division by zero") from None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.functions:
            args = [self.node(a) for a in n.args]
            kwargs = {k.arg: self.node(k.value) for k in n.keywords if k.arg}
            try:
                return self.functions[n.func.id](*args, **kwargs)
            except TypeError as e:
                raise FigureError(f"{n.func.id}(): {e}") from None
        raise FigureError(f"not allowed in a figure's expression: {ast.dump(n)[:60]}")


# ---- the pages ---------------------------------------------------------------------------------


def normal(cell: str) -> str:
    """A table cell as anchors name it: without spaces around it, backticks and bold marks."""
    return cell.strip().replace("`", "").replace("**", "").replace("\\|", "|")


def table_rows(lines: list[str]) -> list[list[str]]:
    """A Markdown table's rows of cells (header first, the --- row left out)."""
    rows = []
    for line in lines:
        cells = CELL_SPLIT.split(line.strip())
        cells = cells[1:] if cells and cells[0].strip() == "" else cells
        cells = cells[:-1] if cells and cells[-1].strip() == "" else cells
        if cells and all(SEPARATOR_CELL.match(c.strip()) for c in cells):
            continue
        rows.append([c.strip() for c in cells])
    return rows


def blocks(lines: list[str]) -> list[Block]:
    """Runs of non-blank lines, fenced code kept whole."""
    out, current, fenced = [], None, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if line.strip() == "" and not fenced:
            current = None
            continue
        if current is None:
            current = Block(i)
            out.append(current)
        current.lines.append(line)
    return out


def markers(lines: list[str]) -> list[tuple[int, int, list[tuple[int, str]]]]:
    """(first line, last line, [(line, text)]) of every figure marker outside fenced code,
    0-based."""
    found, i, fenced = [], 0, False
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and lines[i].lstrip().startswith(MARKER_OPEN):
            start, body = i, []
            body.append((i, lines[i].split(MARKER_OPEN, 1)[1]))
            while "-->" not in lines[i]:
                i += 1
                if i == len(lines):
                    raise FigureError(f"line {start + 1}: a figures marker without its -->")
                body.append((i, lines[i]))
            body[-1] = (body[-1][0], body[-1][1].split("-->")[0])
            found.append((start, i, [(n, t.strip()) for n, t in body if t.strip()]))
        i += 1
    return found


def target_block(lines: list[str], after: int) -> Block | None:
    """The first block of non-blank lines after line `after`, markers skipped."""
    i = after + 1
    while i < len(lines):
        line = lines[i]
        if line.strip() == "":
            i += 1
            continue
        if line.lstrip().startswith("<!--"):
            while "-->" not in lines[i]:
                i += 1
                if i == len(lines):
                    return None
            i += 1
            continue
        block = Block(i)
        while i < len(lines) and lines[i].strip() and not lines[i].lstrip().startswith("<!--"):
            block.lines.append(lines[i])
            i += 1
        return block
    return None


def split_location(text: str) -> tuple[str, str]:
    """'LOCATION = EXPR' -> (LOCATION, EXPR), LOCATION being "..." or [...]."""
    close = {"[": "]", '"': '"'}[text[0]]
    end = text.find(close, 1)
    if end < 0 or not text[end + 1:].lstrip().startswith("="):
        raise FigureError(f"expected {text[0]}...{close} = EXPR: {text!r}")
    return text[: end + 1], text[end + 1:].lstrip()[1:].strip()


def locate_cell(block: Block, row: str, column: str) -> tuple[str, int]:
    rows = table_rows(block.lines)
    header = [normal(c) for c in rows[0]]
    if column not in header:
        raise FigureError(f"the table after the marker has no column {column!r}")
    at = header.index(column)
    hits = [(n, r) for n, r in enumerate(rows[1:]) if normal(r[0]) == row]
    if len(hits) != 1:
        raise FigureError(f"the table after the marker has {len(hits)} rows {row!r} (need one)")
    n, cells = hits[0]
    if at >= len(cells):
        raise FigureError(f"row {row!r} has no cell in column {column!r}")
    return cells[at], table_lines(block)[n + 1]


def table_lines(block: Block) -> list[int]:
    """The 1-based lines of a table's rows (header first, the --- row left out)."""
    return [block.start + i + 1 for i, line in enumerate(block.lines) if table_rows([line])]


def check(page: Path, root: Path, base: Path | None = None) -> tuple[list[Figure], list[str]]:
    """Every marked figure of a page, computed from the files under root; and the page's links
    (relative to base: the page's folder where it lies under root, else root) to files that do
    not exist."""
    lines = page.read_text(encoding="utf-8").splitlines()
    if base is None:
        base = page.resolve().parent if inside(page, root) else root
    sources = Sources(root)
    evaluate = Evaluator(sources)
    figures: list[Figure] = []
    for start, end, body in markers(lines):
        block = target_block(lines, end)
        for n, text in body:
            if text.startswith("table "):
                figures += compare_table(text, n, block, sources)
                continue
            if text[0] in '["':
                try:
                    location, expr = split_location(text)
                except FigureError as e:
                    figures.append(Figure(text, "", n + 1, error=str(e)))
                    continue
                for column, location in expand(location):
                    figure = Figure(location, expr, n + 1)
                    figures.append(figure)
                    evaluate.column, sources.used = column, []
                    try:
                        locate(figure, block)
                        figure.value = evaluate(expr)
                    except FigureError as e:
                        figure.error = str(e)
                    figure.expr = f"{', '.join(sources.used)}: {expr}" if sources.used else expr
                    evaluate.column = ""
                continue
            name, sep, expr = text.partition("=")
            if not sep or not name.strip().isidentifier():
                figures.append(Figure(text, "", n + 1, error=SYNTAX))
                continue
            try:
                evaluate.names[name.strip()] = evaluate(expr)
            except FigureError as e:
                figures.append(Figure(name.strip(), expr.strip(), n + 1, error=str(e)))
    return figures, broken_links(lines, base, root)


def expand(location: str) -> list[tuple[str, str]]:
    """[ROW | C1, C2] is one figure per column: (column, [ROW | column]); else ("", location)."""
    if not location.startswith("[") or "|" not in location:
        return [("", location)]
    row, _, columns = location[1:-1].partition("|")
    return [(c.strip(), f"[{row.strip()} | {c.strip()}]") for c in columns.split(",")]


def locate(figure: Figure, block: Block | None) -> None:
    """Finds the figure's text in the block after its marker."""
    location = figure.label
    if block is None:
        raise FigureError("nothing follows the marker")
    if location.startswith("["):
        parts = [p.strip() for p in location[1:-1].split("|")]
        if len(parts) != 2:
            raise FigureError("a table figure is [ROW | COLUMN]")
        if not block.is_table:
            raise FigureError("the block after the marker is not a table")
        figure.shown, figure.shown_line = locate_cell(block, parts[0], parts[1])
        return
    snippet = location[1:-1]
    flat = " ".join(" ".join(block.lines).split())
    plain = " ".join(snippet.replace("{", "").replace("}", "").split())
    inner = re.search(r"\{([^}]*)\}", snippet)
    at = flat.find(plain)
    if at >= 0:
        figure.shown = inner.group(1) if inner else plain
        before = flat[:at + (inner.start() if inner else 0)]
    else:
        # The text around the figure is there, the figure changed: say what the page shows.
        around = None
        if inner:
            left, right = (re.sub(r"\s+", " ", part) for part in (snippet[:inner.start()],
                                                                   snippet[inner.end():]))
            around = re.search(re.escape(left) + r"(\S+?)" + re.escape(right), flat)
        if not around:
            raise FigureError("the paragraph after the marker does not contain this text")
        figure.shown = around.group(1)
        before = flat[:around.start(1)]
    # The page's line of the figure: count the block's words up to it.
    words, line = len(before.split()), block.start
    for i, text in enumerate(block.lines):
        if words < len(text.split()) or i == len(block.lines) - 1:
            line = block.start + i
            break
        words -= len(text.split())
    figure.shown_line = line + 1


def compare_table(text: str, n: int, block: Block | None, sources: Sources) -> list[Figure]:
    """`table "FILE.md" by COL, ...`: every cell of the next table against FILE's table."""
    m = re.fullmatch(r'table\s+"([^"]+)"\s+by\s+(.+)', text)
    if not m:
        return [Figure(text, "", n + 1, error='expected table "FILE.md" by COLUMN, ...')]
    name, keys = m.group(1), [k.strip() for k in m.group(2).split(",")]
    try:
        if block is None or not block.is_table:
            raise FigureError("the block after the marker is not a table")
        mine = table_rows(block.lines)
        header = [normal(c) for c in mine[0]]
        theirs = [t for t in sources.md_tables(name) if set(header) <= {normal(c) for c in t[0]}]
        if not theirs:
            raise FigureError(f"{name}: no table with the columns {header}")
        if any(k not in header for k in keys):
            absent = [k for k in keys if k not in header]
            raise FigureError(f"the table after the marker has no column {absent}")
    except FigureError as e:
        return [Figure(text, "", n + 1, error=str(e))]
    source = theirs[0]
    source_header = [normal(c) for c in source[0]]
    index = {tuple(normal(r[source_header.index(k)]) for k in keys): r for r in source[1:]}
    figures = []
    for row, line in zip(mine[1:], table_lines(block)[1:]):
        key = tuple(normal(row[header.index(k)]) for k in keys)
        for column, cell in zip(header, row):
            if column in keys:
                continue
            figure = Figure(f"[{' '.join(key)} | {column}]", f"{name}, row {' '.join(key)}", n + 1,
                            shown=cell, shown_line=line)
            figures.append(figure)
            if key not in index:
                figure.error = f"{name}: no row {' '.join(key)}"
                continue
            theirs_cell = index[key][source_header.index(column)].strip()
            number = as_number(theirs_cell)
            figure.value = theirs_cell if number is None else number
    return figures


def broken_links(lines: list[str], base: Path, root: Path) -> list[str]:
    """Relative links (](path)) whose file or folder does not exist, or that lead out of root (the
    checkout): a reader of the repository cannot follow them."""
    broken, fenced = [], False
    folder, checkout = base.resolve(), root.resolve()
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#")[0]
            if not path:
                continue
            if not Path(os.path.normpath(folder / path)).is_relative_to(checkout):
                broken.append(f"line {n}: link to {path}, which leads out of the repository")
            elif not (base / path).exists():
                broken.append(f"line {n}: link to {path}, which does not exist")
    return broken


def inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def visible_lines(text: str) -> int:
    """Lines of a Markdown page outside HTML comments: what GitHub shows (blank lines count)."""
    count, in_comment = 0, False
    for line in text.splitlines():
        outside, rest = False, line
        while True:
            if in_comment:
                end = rest.find("-->")
                if end < 0:
                    break
                in_comment, rest = False, rest[end + 3:]
            else:
                start = rest.find("<!--")
                outside = outside or bool(rest[:start if start >= 0 else len(rest)].strip())
                if start < 0:
                    break
                in_comment, rest = True, rest[start + 4:]
        if outside or (not in_comment and line.strip() == ""):
            count += 1
    return count


def pages(checkout: Path) -> list[Path]:
    """What is checked without a FILE: the README and every page of docs/."""
    return [checkout / "README.md"] + sorted((checkout / "docs").glob("*.md"))


def report(page: Path, root: Path) -> bool:
    """Checks one page and prints what does not match and one summary line; True if it passed."""
    name = (page.resolve().relative_to(root.resolve()).as_posix() if inside(page, root)
            else page.name)
    shows = "the README" if page.name == "README.md" else "the page"
    try:
        figures, links = check(page, root)
    except FigureError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return False
    bad = 0
    for f in figures:
        where = f"{name}:{f.shown_line or f.marker_line}"
        if f.error:
            print(f"{where}: figure {f.label}: {f.error}")
            bad += 1
        elif not matches(f.shown or "", f.value):
            print(f"{where}: figure {f.label}: {shows} shows {f.shown!r}, "
                  f"its file gives {display(f.value)} ({f.expr})")
            bad += 1
    for link in links:
        print(f"{name}: {link}")
    if not figures and page.name == "README.md":
        print(f"check_readme.py: no figure markers in {name}")
        return False
    if bad or links:
        print(f"check_readme.py: {bad} of {len(figures)} figures in {name} do not match their files"
              + (f"; {len(links)} broken links" if links else ""))
        return False
    if figures:
        print(f"check_readme.py: all {len(figures)} figures in {name} match their files")
    else:
        print(f"check_readme.py: no figures in {name}; its links resolve")
    return True


def main(argv=None) -> int:
    checkout = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("page", nargs="?", metavar="FILE",
                        help="the one page to check (default: README.md and docs/*.md)")
    parser.add_argument("--root", help="folder the markers' file names are relative to "
                                       "(default: this checkout, or FILE's folder outside it)")
    args = parser.parse_args(argv)
    if args.page is None:
        checked = pages(checkout)
    else:
        checked = [Path(args.page)]
        if not checked[0].is_file():
            print(f"check_readme.py: {args.page}: no such file", file=sys.stderr)
            return 2
    if args.root:
        root = Path(args.root)
    elif args.page is None or inside(checked[0], checkout):
        root = checkout
    else:
        root = checked[0].resolve().parent
    passed = [report(page, root) for page in checked]
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())

"""No script parses a device name or a variant word outside scripts/tbdevices.py (issue 40, item
2): since schema 6 a row says what it is (device_kind, backend, data_parallel, baseline,
cpu_baseline, verdicts, ...), tbcsv's upgrade gives older rows those columns by asking
tbdevices, and every other script reads the columns or asks tbdevices. This test reads every
scripts/**/*.py but tbdevices.py and fails naming file:line for each string literal that names a
device or a device prefix (`"gpu:1"`, `"cpu"`, `f"cpu:{t}"`, `"/jobs:"`), a variant word
(`"shared_device"`, `"emulated_nodes"`) or a variant item (`"predicted:"`, `"nodes:2"`), and each
split of a device, variant or benchmark name by hand (`variant.split("/")`).

Left out, on purpose:
- docstrings and other bare string statements (prose), and the tuples of column names assigned
  to *_COLUMNS (a column named like a variant word, such as shared_device, is read as a column);
- scripts/peers/: the PyTorch peer is a writer of rows beside the C++ one: it names its rows'
  devices and variants by trainbench's grammar (torchpeer/workloads.py: `gpu:1`, `cpu:T`,
  `optimizer:sgd`, ...), and its own --device flag says `cpu` or `cuda` (torchpeer/cli.py);
  pytorch_report.py reads rows back through tbcsv and parses no device. Its rows say
  schema_version 5, so tbcsv gives them version 6's columns by the same rules as trainbench's
  older rows.
"""
import ast
import re
from pathlib import Path

from conftest import SCRIPTS

import tbdevices

# A device with its count, a device kind's name or a device's split (named anywhere, it is a
# device's text), and a backend's or device's bare word (tested against a row's text).
DEVICE = re.compile(r"(cpu|gpu|mpi):\S*|/?(jobs|threads):\S*")
BARE = re.compile(r"cpu|gpu|mpi")
# A variant's items: a switch that is only a variant word, or `flag:value` of any flag.
VARIANT_WORDS = {"shared_device", "emulated_nodes"}
VARIANT_ITEM = re.compile(r"(%s):\S*" % "|".join(tbdevices.VARIANT_FLAGS))
# What tests a text against a literal, and what a name is split by where a script parses it.
TESTS = ("startswith", "endswith", "removeprefix", "removesuffix", "find", "index", "count")
SEPARATORS = {"/", ":"}
NAMES = re.compile(r"variant|device|benchmark")
EXCLUDED = (SCRIPTS / "tbdevices.py",)
EXCLUDED_DIRS = (SCRIPTS / "peers",)


def literal_problem(text: str, tested: bool) -> str | None:
    if DEVICE.fullmatch(text) or (tested and BARE.fullmatch(text)):
        return f"the device {text!r}"
    if text in VARIANT_WORDS or VARIANT_ITEM.fullmatch(text):
        return f"the variant word {text!r}"
    return None


def compared_constants(tree: ast.AST) -> set[int]:
    """ids of the constants a text is compared with (==, in, startswith(...)), alone or in a
    tuple of them."""
    out: set[int] = set()

    def add(node):
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        out.update(id(n) for n in items if isinstance(n, ast.Constant))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for n in [node.left] + node.comparators:
                add(n)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in TESTS):
            for n in node.args:
                add(n)
    return out


def problems(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place in a module's source that parses a device or variant."""
    tree = ast.parse(source)
    skipped: set[int] = set()  # ids of constant nodes that are prose or column names
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.add(id(node.value))
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id.endswith("_COLUMNS") for t in node.targets):
            skipped.update(id(n) for n in ast.walk(node.value))
    tested = compared_constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            for v in node.values:
                skipped.add(id(v))
            what = literal_problem(text.replace("{}", "N"), False)
            if what:
                found.append((node.lineno, f"builds {what}"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in skipped):
            what = literal_problem(node.value, id(node) in tested)
            if what:
                found.append((node.lineno, f"names {what}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("split", "partition", "rpartition") and node.args
              and isinstance(node.args[0], ast.Constant) and node.args[0].value in SEPARATORS
              and NAMES.search(ast.unparse(node.func.value))):
            found.append((node.lineno, f"splits {ast.unparse(node.func.value)} by "
                                       f"{node.args[0].value!r}"))
    return sorted(found)


def scripts() -> list[Path]:
    return sorted(p for p in SCRIPTS.rglob("*.py")
                  if p not in EXCLUDED and not any(d in p.parents for d in EXCLUDED_DIRS))


def test_the_check_finds_what_it_looks_for():
    """The check itself can fail: each way of parsing a device or variant is caught, and reading
    the columns or asking tbdevices is not."""
    bad = '''
if row["device"].startswith("gpu"):
    pass
cpu = [r for r in rows if r["device"] == "cpu"]
one = f"cpu:{threads}"
jobs = "/jobs:" in device
shared = "shared_device" in variant
link = item.startswith("predicted:")
items = row["variant"].split("/")
gpus = [r for r in rows if r["device"][:3] in ("gpu", "mpi")]
'''
    assert [line for line, _ in problems(bad)] == [2, 4, 5, 6, 7, 8, 9, 10, 10]
    good = '''
"""A docstring may say gpu:1 and shared_device."""
SCHEMA_4_COLUMNS = ("variant", "shared_device")
gpu = row["backend"] == tbdevices.GPU
kind = tbdevices.checks_only(row["device_kind"])
parts = text.split("/")
FIELDS = ("name", "cpu", "gpu")
kind = "gpus" if c.on_gpu else "cpu"
'''
    assert problems(good) == []


def test_no_script_parses_a_device_or_a_variant_word():
    assert scripts(), f"no scripts found under {SCRIPTS}"
    found = [f"{path.relative_to(SCRIPTS.parent)}:{line}: {what}"
             for path in scripts() for line, what in problems(path.read_text(encoding="utf-8"))]
    assert not found, ("these parse a device or a variant word outside scripts/tbdevices.py: read "
                       "the row's columns (device_kind, backend, data_parallel, baseline, "
                       "cpu_baseline, verdicts, ...) or ask tbdevices instead:\n  "
                       + "\n  ".join(found))

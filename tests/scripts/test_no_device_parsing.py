r"""No script parses a device name or a variant word outside scripts/tbdevices.py (issue 40, item
2): since schema 6 a row says what it is (device_kind, backend, data_parallel, baseline,
cpu_baseline, verdicts, ...), tbcsv's upgrade gives older rows those columns by asking
tbdevices, and every other script reads the columns or asks tbdevices. This test reads every
scripts/**/*.py but tbdevices.py and fails naming file:line for each string literal that names a
device or a device prefix (`"gpu:1"`, `"cpu"`, `f"cpu:{t}"`, `"/jobs:"`), a variant word
(`"shared_device"`, `"emulated_nodes"`) or a variant item (`"predicted:"`, `"nodes:2"`), and each
split of a device, variant or benchmark name by hand (`variant.split("/")`).

It also fails on every regex over device text, in every script under scripts/ but tbdevices.py
(scripts/peers, tbplot, reframe and slurm included, shell scripts too): a device word, alone or in
an alternation, followed by `:` and a class of what follows (`gpu:\d+`, `(mpi|gpu):(\d+)`,
`/(jobs|threads):([0-9]+)`), or an alternation of device words (`(cpu|gpu)`). A row's N is its
data_parallel column, its kind device_kind, and tbdevices.parse reads a device where a row has
no column for a count.

Left out of the literal check, on purpose:
- docstrings and other bare string statements (prose), and the tuples of column names assigned
  to *_COLUMNS (a column named like a variant word, such as shared_device, is read as a column);
- scripts/peers/: the PyTorch peer is a writer of rows beside the C++ one: it names its rows'
  devices and variants by trainbench's grammar (torchpeer/workloads.py: `gpu:1`, `cpu:T`,
  `optimizer:sgd`, ...), and its own --device flag says `cpu` or `cuda` (torchpeer/cli.py);
  pytorch_report.py reads rows back through tbcsv and parses no device. Its rows carry the
  schema_version of the trainbench it asks, with their kind's facts from tbdevices.kind_of. The
  regex check covers it: a writer of rows has no device text to match.
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
# A regex over device text: a device word, alone or with the rest of an alternation and its
# group's end, then `:` (escaped or not), a group's start, and a class of what follows: `\d`,
# `\w`, `\S`, `[0-9]`, `[^/]`, `.`. Or a group that alternates a device word with others (a device
# word alone in parentheses is a label: `1x (cpu)`).
WORDS = r"(?:cpu|gpu|mpi|jobs|threads)"
DEVICE_REGEX = re.compile(
    rf"(?<![A-Za-z_]){WORDS}(?:\|[\w|-]*)?\)?\\?:\(?(?:\?P<\w+>|\?:)?(?:\\[dwS]|\[|\.)"
    rf"|\((?=[^()]*\|)(?:\?P<\w+>|\?:)?(?:[\w-]+\|)*{WORDS}(?:\|[\w-]+)*\)")
# Shell scripts are read line by line, comments aside.
SHELL_SUFFIXES = (".sh", ".sbatch")


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


def strings(tree: ast.AST):
    """(line, text) of each string a module holds but its prose (docstrings and other bare
    strings): constants, f-strings with `{}` for what they format, and sums of them."""
    prose = {id(n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}

    def text(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = text(node.left), text(node.right)
            return None if left is None or right is None else left + right
        return None
    for node in ast.walk(tree):
        if id(node) not in prose and isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)):
            value = text(node)
            if value is not None:
                yield node.lineno, value


def regex_problems(source: str, shell: bool = False) -> list[tuple[int, str]]:
    """(line, what) for each regex over device text in a script's source (Python, or a shell
    script's lines but its comments)."""
    if shell:
        texts = [(i, line) for i, line in enumerate(source.splitlines(), 1)
                 if not line.lstrip().startswith("#")]
    else:
        texts = list(strings(ast.parse(source)))
    found: dict[int, str] = {}  # one per line: an f-string's parts are strings of their own too
    for line, text in texts:
        if (m := DEVICE_REGEX.search(text)) and line not in found:
            found[line] = f"matches device text with the regex {m.group(0)!r} in {text.strip()[:60]!r}"
    return sorted(found.items())


def all_scripts() -> list[Path]:
    """Every script under scripts/ but tbdevices.py: Python and shell."""
    return sorted(p for p in SCRIPTS.rglob("*")
                  if p.is_file() and p.suffix in (".py",) + SHELL_SUFFIXES and p not in EXCLUDED
                  and "__pycache__" not in p.parts)


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


def test_the_regex_check_finds_what_it_looks_for():
    """Each regex over device text is caught, wherever the pattern sits, and the scripts' other
    regexes (log lines, versions, numbers) and prose are not."""
    bad = r'''
m = re.search(r"/(?:mpi|gpu):(\d+)/", self.benchmark)
m = re.search(r"/(jobs|threads):(\d+)$", d)
GPUS = re.compile(r"^gpu:([0-9]+)$")
n = re.match("cpu:" + r"(?P<threads>\d+)", device)
one = re.fullmatch(rf"{prefix}/mpi\:[1-9]\d*", name)
any_gpu = re.search(r"/(cpu|gpu)/", name)
ranks = [int(x) for x in re.findall(r"mpi:(\S+?)/", text)]
'''
    assert [line for line, _ in regex_problems(bad)] == [2, 3, 4, 5, 6, 7, 8]
    good = r'''
r"""A docstring may say that gpu:(\d+) was parsed here once."""
m = re.search(r"(?:oneDNN|MKL-DNN)\s+v?(\d+(?:\.\d+)*)", text)
ended = re.compile(r"\[ +(OK|FAILED|SKIPPED) +\] ([^\s,]+)[^[]*?\(\d+ ms\)")
errors = re.search(r"\b(error|Error|ERROR|abort|Abort|terminate|Killed)\b", line)
flag = "--devices=gpu:1/jobs:2,gpu:1/threads:2"
label = f"{speedup:.1f}x (cpu)"
help = "--device cpu|cuda"
threads = re.search(r"threads: (\d+)", log)
'''
    assert regex_problems(good) == []
    shell = r'''
# a comment may say grep -E 'gpu:[0-9]+'
"$bin" --devices=gpu:1/jobs:2,gpu:1/threads:2 --csv="$dir/jobs.csv"
n=$(grep -oE 'mpi:[0-9]+' <<<"$name")
[[ $device =~ ^gpu:([0-9]+)$ ]] && echo "$device"
'''
    assert [line for line, _ in regex_problems(shell, shell=True)] == [4, 5]


def test_no_script_matches_device_text_with_a_regex():
    assert all_scripts(), f"no scripts found under {SCRIPTS}"
    found = [f"{path.relative_to(SCRIPTS.parent)}:{line}: {what}"
             for path in all_scripts()
             for line, what in regex_problems(path.read_text(encoding="utf-8"),
                                              shell=path.suffix in SHELL_SUFFIXES)]
    assert not found, ("these match a row's device text with a regex outside scripts/tbdevices.py: "
                       "read the row's columns (data_parallel for N, device_kind, backend, replicas) "
                       "or ask tbdevices (parse, kind_of) instead:\n  " + "\n  ".join(found))

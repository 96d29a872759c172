"""cmake --install of this build into a temporary prefix, used as an admin would use it (issue 44):
the layout (bin/, libexec/trainbench/, share/trainbench/, share/doc/trainbench/), `module load
trainbench` with the installed modulefile, no installed file naming the source or the build
tree, `trainbench --version`, and from a folder outside the checkout a tiny benchmark (the MLP on
cpu:1), trainbench-plot and trainbench-compare on its CSVs, after the prefix has been moved (the
scripts find their data from their own place). The build
folder comes from $TB_BUILD_DIR, cmake from $CMAKE (ctest sets both)."""
import csv
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from installed import install_prefix

SOURCE = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("TB_BUILD_DIR", SOURCE / "build" / "release")).resolve()
TINY = ["--benchmark_filter=^train/mlp/mnist/cpu:1/", "--devices=cpu:1", "--benchmark_min_time=0.05"]


def run(*args, cwd, timeout=300, env=None):
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


# The H100 reference run its index names (installed beside the index).
H100_RUN = json.loads((SOURCE / "results" / "h100" / "reference.json").read_text())["csv"]
MODULES_INIT = Path("/usr/share/modules/init/bash")  # Environment Modules (scripts/test.sh installs it)


def check_the_modulefile(installed: Path):
    """`module load trainbench` puts the prefix's bin/ on PATH (the modulefile names the prefix it
    was installed into, as does the sbatch template: checked before the prefix moves)."""
    if not MODULES_INIT.is_file():
        pytest.fail(f"{MODULES_INIT} not found: install environment-modules (scripts/test.sh does)")
    script = (f"source {MODULES_INIT} && module use {installed}/share/trainbench/modulefiles && "
              "module load trainbench && command -v trainbench && trainbench --version")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"{installed}/bin/trainbench\ntrainbench "), r.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """The build installed, then the prefix moved elsewhere: nothing may depend on where it was."""
    folder = tmp_path_factory.mktemp("install")
    with install_prefix(BUILD, folder / "first") as first:
        check_the_modulefile(first)
        moved = folder / "moved"
        first.rename(moved)
        try:
            yield moved
        finally:
            shutil.rmtree(moved, ignore_errors=True)


@pytest.fixture
def outside(tmp_path):
    """A working folder outside any checkout."""
    folder = tmp_path / "work"
    folder.mkdir()
    assert not any((p / ".git").exists() for p in [folder, *folder.parents]), folder
    return folder


def test_the_layout(prefix):
    expected = [
        "bin/trainbench", "bin/trainbench-plot", "bin/trainbench-compare",
        "libexec/trainbench/plot.py", "libexec/trainbench/compare.py", "libexec/trainbench/tbcsv.py",
        "libexec/trainbench/tbfilters.py", "libexec/trainbench/tbdevices.py", "libexec/trainbench/tbprefix.py",
        "libexec/trainbench/tbinstalled.py", "libexec/trainbench/tbplot/references.py",
        "libexec/trainbench/tbplot/charts/headline.py", "libexec/trainbench/reference_table.py",
        "libexec/trainbench/emulate_nodes.sh", "libexec/trainbench/check_predictions.sh",
        "libexec/trainbench/predictions_table.py", "libexec/trainbench/peers/pytorch_train.py",
        "libexec/trainbench/peers/torchpeer/__init__.py",
        "share/trainbench/trainbench.sbatch", "share/trainbench/SCHEMA.md",
        "share/trainbench/results/h100/reference.json", f"share/trainbench/results/h100/{H100_RUN}",
        "share/trainbench/reframe/trainbench_check.py", "share/trainbench/reframe/settings.py",
        "share/doc/trainbench/README.md", "share/doc/trainbench/docs/running.md",
    ]
    missing = [p for p in expected if not (prefix / p).is_file()]
    assert not missing, f"not installed: {missing}"
    for program in ("bin/trainbench", "bin/trainbench-plot", "bin/trainbench-compare", "libexec/trainbench/plot.py",
                    "libexec/trainbench/emulate_nodes.sh", "share/trainbench/trainbench.sbatch"):
        assert os.access(prefix / program, os.X_OK), f"{program} is not executable"
    assert not list(prefix.rglob("__pycache__")), "Python caches were installed"


def strings_around(data: bytes, needle: bytes):
    """Each NUL-delimited string of `data` that holds `needle`."""
    start = data.find(needle)
    while start != -1:
        begin = data.rfind(b"\0", 0, start) + 1
        end = data.find(b"\0", start)
        yield data[begin:end if end != -1 else len(data)]
        start = data.find(needle, end if end != -1 else len(data))


def asan_source_name(path: Path, string: bytes) -> bool:
    """GCC's AddressSanitizer describes each instrumented global by the path of the file that
    declares it (a translation unit, or a header as the include path spelt it), which
    -ffile-prefix-map does not map: in a sanitized build (the debug preset), the binary holds the
    full paths of such source files of the tree, and nothing else of it."""
    if os.environ.get("TB_SANITIZE") != "ON" or path.name != "trainbench":
        return False
    # The name may follow other bytes of read-only data with no NUL between them (a switch's jump
    # table laid out just before it): those must not be text that runs on into the path.
    at = string.find(bytes(f"{SOURCE}/", "utf-8"))
    if at < 0 or (at > 0 and 0x20 <= string[at - 1] <= 0x7e):
        return False
    text = string[at:].decode(errors="replace")
    return text.endswith((".cpp", ".cu", ".hpp", ".cuh", ".h", ".inc")) and Path(text).is_file()


def test_nothing_installed_names_the_source_or_the_build_tree(prefix):
    needles = {bytes(str(SOURCE), "utf-8"), bytes(str(BUILD), "utf-8")}
    found = []
    for path in prefix.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path.relative_to(prefix)}: {string[:200]!r}" for n in needles
                      for string in set(strings_around(data, n)) if not asan_source_name(path, string)]
    assert not found, "installed files that name the source or build tree:\n" + "\n".join(sorted(found))


def test_version_names_the_commit_and_the_backends(prefix, outside):
    r = run(prefix / "bin" / "trainbench", "--version", cwd=outside)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("trainbench ") and lines[0].split()[1][0].isdigit(), r.stdout
    # The commit the build recorded at its last build (cmake/WriteGitCommit.cmake), a commit of this
    # repository.
    recorded = re.search(r'return "([^"]+)"', (BUILD / "generated" / "git_commit.cpp").read_text()).group(1)
    assert lines[1] == f"commit {recorded}", (r.stdout, recorded)
    commit = recorded.removesuffix("-dirty")
    assert subprocess.run(["git", "-C", str(SOURCE), "cat-file", "-e", f"{commit}^{{commit}}"]).returncode == 0, commit
    assert lines[2].startswith("backends: cpu (oneDNN "), r.stdout
    # What CMake built (ctest passes it on): each backend is named, built or not.
    for name, built in (("cuda (CUDA ", os.environ.get("TB_HAVE_CUDA")), ("mpi (MPI ", os.environ.get("TB_HAVE_MPI"))):
        if built is not None:
            assert (name in lines[2]) == (built == "ON"), (r.stdout, name, built)
            assert (name.split()[0] in lines[2].partition("not built:")[2]) == (built != "ON"), r.stdout
    # The install records the same commit for the scripts (the PyTorch peer's rows carry it).
    installed = (prefix / "libexec" / "trainbench" / "tbinstalled.py").read_text()
    assert f'COMMIT = "{lines[1].split()[1]}"' in installed, installed


def test_a_benchmark_then_plot_and_compare_from_outside_the_checkout(prefix, outside):
    runs = []
    for name in ("a", "b"):
        csv_path = outside / f"{name}.csv"
        r = run(prefix / "bin" / "trainbench", *TINY, f"--csv={csv_path.name}", cwd=outside)
        assert r.returncode == 0, r.stdout + r.stderr
        rows = list(csv.DictReader(csv_path.open()))
        assert [row["benchmark"] for row in rows] == ["train/mlp/mnist/cpu:1/fp32/bs:100"], rows
        assert rows[0]["status"] == "ok" and float(rows[0]["samples_per_s"]) > 0, rows[0]
        runs.append(csv_path.name)

    # The charts and the report, with the installed reference runs beside this machine's rows.
    r = run(prefix / "bin" / "trainbench-plot", runs[0], "--reference", "all", "--out", "charts", cwd=outside)
    assert r.returncode == 0, r.stdout + r.stderr
    for chart in ("headline.png", "headline.svg", "samples_per_s.png", "report.md", "report.html"):
        assert (outside / "charts" / chart).stat().st_size > 0, chart
    # The reference run read from the prefix, and drawn beside this machine's row.
    assert "reference run of H100" in (outside / "charts" / "report.md").read_text()
    # The report names the reference's file: the one installed beside its index.
    assert (prefix / "share" / "trainbench" / "results" / "h100" / H100_RUN).is_file()
    assert H100_RUN in (outside / "charts" / "report.md").read_text()

    r = run(prefix / "bin" / "trainbench-compare", *runs, cwd=outside)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "train/mlp/mnist/cpu:1/fp32/bs:100" in r.stdout, r.stdout
    assert "too few repetitions" in r.stdout, r.stdout
    # Arguments pass through as they are: compare.py's own usage error.
    r = run(prefix / "bin" / "trainbench-compare", runs[0], "--correction", "nosuch", cwd=outside)
    assert r.returncode == 2 and "--correction" in r.stderr, r.stderr


def test_missing_reference_runs_name_the_folder_and_the_fix(prefix, outside, tmp_path):
    # A copy of the prefix without its reference runs.
    broken = tmp_path / "broken"
    shutil.copytree(prefix, broken, symlinks=True)
    shutil.rmtree(broken / "share" / "trainbench" / "results")
    r = run(prefix / "bin" / "trainbench", *TINY, "--csv=run.csv", cwd=outside)
    assert r.returncode == 0, r.stderr
    r = run(broken / "bin" / "trainbench-plot", "run.csv", "--reference", "all", "--out", "charts", cwd=outside)
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(broken / "share" / "trainbench" / "results") in r.stderr, r.stderr
    assert "reinstall trainbench" in r.stderr and "--reference none" in r.stderr, r.stderr

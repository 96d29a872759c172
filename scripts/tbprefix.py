"""Where trainbench's files lie, for every script, in a checkout and in an installed prefix.

In a checkout the scripts sit in scripts/ and find the repository around them: results/ (the
reference runs, SCHEMA.md), build/release/bench/trainbench. Installed (cmake --install, the
Debian package), the scripts sit in <prefix>/libexec/trainbench/ beside tbinstalled.py, which
cmake/Install.cmake writes there and nowhere else: it holds the paths from that folder to the
prefix, the binary's folder and the data's (share/trainbench/), all relative, so that a prefix
can be moved or mounted elsewhere. Nothing here names the source or the build tree of an
install. Standard library only; imported with this folder on sys.path.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

try:
    sys.path.insert(0, str(HERE))
    import tbinstalled  # noqa: E402  (only in an installed prefix)
except ImportError:
    tbinstalled = None
finally:
    sys.path.remove(str(HERE))

INSTALLED = tbinstalled is not None
if tbinstalled is not None:
    PREFIX = (HERE / tbinstalled.TO_PREFIX).resolve()
    DATA = PREFIX / tbinstalled.DATADIR
    RESULTS = DATA / "results"
    TRAINBENCH = PREFIX / tbinstalled.BINDIR / "trainbench"
    VERSION = tbinstalled.VERSION
    COMMIT = tbinstalled.COMMIT
    # How a user would reinstall what is missing, for error messages.
    REINSTALL = (f"reinstall trainbench into {PREFIX} (cmake --install BUILD --prefix {PREFIX}, "
                 "or the Debian package)")
else:
    ROOT = HERE.parent
    PREFIX = None
    DATA = ROOT
    RESULTS = ROOT / "results"
    TRAINBENCH = ROOT / "build" / "release" / "bench" / "trainbench"
    VERSION = None
    COMMIT = None
    REINSTALL = "restore it from git (git checkout -- results)"


def where() -> str:
    """One line for messages: which trainbench these scripts belong to."""
    if INSTALLED:
        return f"trainbench {VERSION} installed in {PREFIX}"
    return f"the checkout in {HERE.parent}"

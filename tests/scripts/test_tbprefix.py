"""scripts/tbprefix.py, where the scripts find trainbench's files: in this checkout, and in an
installed prefix laid out as cmake/InstallLayout.cmake.in writes its tbinstalled.py (a copy of
the module beside one, in a temporary prefix; tests/test_install.py installs a real build)."""
import importlib.util
import shutil
import sys

from conftest import ROOT, SCRIPTS

import tbprefix


def test_in_the_checkout_the_files_are_the_repositorys():
    assert not tbprefix.INSTALLED and tbprefix.PREFIX is None and tbprefix.VERSION is None
    assert tbprefix.RESULTS == ROOT / "results"
    assert tbprefix.TRAINBENCH == ROOT / "build" / "release" / "bench" / "trainbench"
    assert tbprefix.where() == f"the checkout in {ROOT}"
    assert tbprefix.REINSTALL == "restore it from git (git checkout -- results)"


def installed_copy(prefix):
    """tbprefix.py imported from <prefix>/libexec/trainbench/ beside a tbinstalled.py (of a
    prefix whose binaries went to sbin/)."""
    libexec = prefix / "libexec" / "trainbench"
    libexec.mkdir(parents=True)
    shutil.copy(SCRIPTS / "tbprefix.py", libexec / "tbprefix.py")
    (libexec / "tbinstalled.py").write_text('TO_PREFIX = "../.."\nBINDIR = "sbin"\n'
                                            'DATADIR = "share/trainbench"\n'
                                            'VERSION = "1.2.3"\nCOMMIT = "abc1234"\n')
    spec = importlib.util.spec_from_file_location("tbprefix_installed", libexec / "tbprefix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    del sys.modules["tbinstalled"]  # the checkout's own tbprefix imports never find it
    return module


def test_installed_the_files_are_the_prefixs_from_its_tbinstalled(tmp_path):
    path_before = list(sys.path)
    prefix = (tmp_path / "opt").resolve()
    installed = installed_copy(tmp_path / "opt")
    assert sys.path == path_before  # the prefix's folder is not left on the path
    assert installed.INSTALLED and installed.PREFIX == prefix
    assert installed.DATA == prefix / "share" / "trainbench"
    assert installed.RESULTS == prefix / "share" / "trainbench" / "results"
    assert installed.TRAINBENCH == prefix / "sbin" / "trainbench"  # as -DCMAKE_INSTALL_BINDIR=sbin
    assert (installed.VERSION, installed.COMMIT) == ("1.2.3", "abc1234")
    assert installed.where() == f"trainbench 1.2.3 installed in {prefix}"
    assert installed.REINSTALL == (f"reinstall trainbench into {prefix} (cmake --install BUILD --prefix "
                                   f"{prefix}, or the Debian package)")

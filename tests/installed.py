"""cmake --install of a build folder into a temporary prefix, for the tests that use trainbench
as installed (test_install.py, test_slurm.py, test_reframe.py); the prefix is removed afterwards,
whatever happens. cmake is $CMAKE (ctest sets it to the one that configured the build), else
the one on PATH."""
import contextlib
import os
import shutil
import subprocess
from pathlib import Path


@contextlib.contextmanager
def install_prefix(build: Path, prefix: Path):
    cmake = os.environ.get("CMAKE", "cmake")
    try:
        r = subprocess.run([cmake, "--install", str(build), "--prefix", str(prefix)], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, f"cmake --install {build} --prefix {prefix} failed:\n{r.stdout}{r.stderr}"
        yield prefix
    finally:
        # The test may have moved it: whatever is left at either place goes.
        shutil.rmtree(prefix, ignore_errors=True)

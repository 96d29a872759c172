"""scripts/deps.sh, the set-up both README commands run first: it says what it installs, and it
stops naming the packages still missing when apt-get cannot install them."""
import os
import subprocess
from pathlib import Path

from conftest import SCRIPTS


def run_deps(tmp_path: Path, packages: str, apt_get: str) -> subprocess.CompletedProcess:
    """Sources deps.sh with TB_PACKAGES replaced and apt-get replaced by `apt_get` (a script)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text("#!/bin/sh\n" + apt_get + "\n")
    fake.chmod(0o755)
    script = f'source "{SCRIPTS / "deps.sh"}"; TB_PACKAGES=({packages}); tb_install_deps'
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)


def test_nothing_missing_is_said_and_installs_nothing(tmp_path):
    r = run_deps(tmp_path, "bash coreutils", "echo apt-get ran; exit 1")
    assert r.returncode == 0, r.stderr
    assert "all 2 required packages are installed" in r.stdout
    assert "apt-get ran" not in r.stdout


def test_a_package_apt_get_cannot_install_is_named(tmp_path):
    r = run_deps(tmp_path, "bash tb-no-such-package", "exit 100")
    assert r.returncode != 0
    assert "trainbench: installing tb-no-such-package" in r.stdout  # the one line before installing
    assert "required packages are still missing: tb-no-such-package" in r.stderr
    assert "apt-get install tb-no-such-package" in r.stderr  # the fix
    assert "CMake" not in r.stdout + r.stderr

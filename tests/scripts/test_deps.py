"""scripts/deps.sh, the set-up both README commands run first: it says what it installs, and it
stops naming the packages still missing when apt-get cannot install them. On a machine with an
NVIDIA driver it picks the CUDA toolkit: an installed one as it is, else PyPI's NVIDIA wheels
that the driver can run, else none, saying why. nvidia-smi and ldconfig are fakes here."""
import ctypes
import os
import subprocess
from pathlib import Path

import pytest

from conftest import SCRIPTS

NO_DRIVER_SMI = "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9"


def smi_banner(cuda: str) -> str:
    """nvidia-smi's first table lines, as a driver supporting CUDA `cuda` prints them."""
    return ("cat <<'EOF'\n"
            "+-----------------------------------------------------------------------------------------+\n"
            f"| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: {cuda}     |\n"
            "+-----------------------------------------+------------------------+----------------------+\n"
            "EOF")


def fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def run_deps(tmp_path: Path, packages: str, apt_get: str) -> subprocess.CompletedProcess:
    """Sources deps.sh with TB_PACKAGES replaced and apt-get replaced by `apt_get` (a script), on
    a machine without an NVIDIA driver."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "apt-get", apt_get)
    fake(bin_dir, "nvidia-smi", NO_DRIVER_SMI)
    fake(bin_dir, "ldconfig", "exit 0")
    script = f'source "{SCRIPTS / "deps.sh"}"; TB_PACKAGES=({packages}); tb_install_deps'
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    env.pop("TB_CUDA_FROM_PYPI", None)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)


def test_nothing_missing_is_said_and_installs_nothing(tmp_path):
    r = run_deps(tmp_path, "bash coreutils", "echo apt-get ran; exit 1")
    assert r.returncode == 0, r.stderr
    assert "all 2 required packages are installed" in r.stdout
    assert "apt-get ran" not in r.stdout
    assert "CUDA" not in r.stdout + r.stderr  # no driver: nothing about CUDA


def test_a_package_apt_get_cannot_install_is_named(tmp_path):
    r = run_deps(tmp_path, "bash tb-no-such-package", "exit 100")
    assert r.returncode != 0
    assert "trainbench: installing tb-no-such-package" in r.stdout  # the one line before installing
    assert "required packages are still missing: tb-no-such-package" in r.stderr
    assert "apt-get install tb-no-such-package" in r.stderr  # the fix
    assert "CMake" not in r.stdout + r.stderr


# ---- CUDA: which toolkit the build gets ------------------------------------------------------

def make_toolkit(root: Path, without: str = "") -> Path:
    """An installed toolkit as deps.sh checks it: bin/nvcc with cuDNN's and NCCL's headers and
    libraries (less the file named `without`)."""
    for rel in ("bin/nvcc", "include/cudnn.h", "include/nccl.h", "lib64/libcudnn.so", "lib64/libnccl.so"):
        if rel.endswith(without) and without:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return root


def run_cuda(tmp_path: Path, call: str, smi: str = NO_DRIVER_SMI, libcuda: bool = False,
             prefixes=(), **env_extra) -> subprocess.CompletedProcess:
    """Sources deps.sh and runs `call` with fake nvidia-smi and ldconfig, TB_CUDA_PREFIXES set to
    `prefixes`, the wheels' folder in tmp_path, and a PATH without any real CUDA."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake(bin_dir, "nvidia-smi", smi)
    listing = "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1" if libcuda else ""
    fake(bin_dir, "ldconfig", f"echo '1 libs found in cache `/etc/ld.so.cache'\necho '{listing}'")
    quoted = " ".join(f'"{p}"' for p in prefixes)
    script = (f'source "{SCRIPTS / "deps.sh"}"; TB_CUDA_PREFIXES=({quoted}); '
              f'TB_CUDA_WHEELS_DIR="{tmp_path / "cuda-wheels"}"; {call}')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TB_", "CUDA"))}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", **env_extra)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)


def plan(r: subprocess.CompletedProcess) -> list:
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.parametrize("cuda", ["13.0", "13.2", "14.1"])
def test_a_cuda13_driver_without_toolkit_gets_the_cuda13_wheels(tmp_path, cuda):
    words = plan(run_cuda(tmp_path, "tb_cuda_plan", smi=smi_banner(cuda)))
    assert words[:3] == ["wheels", cuda, "13.0"]  # a 13.0 toolkit: no PTX newer than any 13.x driver
    wheels = dict(w.split("==") for w in words[4:])
    assert wheels["nvidia-cuda-nvcc"].startswith("13.0.")
    assert wheels["nvidia-cuda-runtime"].startswith("13.0.")
    assert wheels["nvidia-cublas"].startswith("13.")
    assert {"nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cuda-cccl", "nvidia-nvvm"} <= wheels.keys()
    assert not any("cu12" in name for name in wheels)


@pytest.mark.parametrize("cuda", ["12.9", "12.2", "11.8"])
def test_a_driver_older_than_cuda13_builds_cpu_only_and_says_why(tmp_path, cuda):
    r = run_cuda(tmp_path, 'tb_setup_cuda; echo "root=${TB_CUDA_ROOT:-}"', smi=smi_banner(cuda))
    assert r.returncode == 0, r.stderr
    assert f"the NVIDIA driver supports CUDA {cuda}, older than the CUDA 13.0" in r.stdout
    assert "building without the CUDA backend" in r.stdout
    assert "root=\n" in r.stdout
    assert not (tmp_path / "cuda-wheels").exists()


def test_an_installed_toolkit_is_used_as_it_is(tmp_path):
    toolkit = make_toolkit(tmp_path / "cuda")
    r = run_cuda(tmp_path, 'tb_setup_cuda; echo "root=${TB_CUDA_ROOT:-}"', smi=smi_banner("13.0"),
                 prefixes=[toolkit])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"trainbench: building the CUDA backend with the toolkit in {toolkit}",
                                     "root="]
    assert not (tmp_path / "cuda-wheels").exists()


def test_an_installed_toolkit_on_path_counts(tmp_path):
    toolkit = make_toolkit(tmp_path / "opt-cuda")
    r = run_cuda(tmp_path, f'PATH="{toolkit}/bin:$PATH"; tb_cuda_plan', smi=smi_banner("13.0"))
    assert plan(r) == ["system", str(toolkit)]


@pytest.mark.parametrize("missing", ["nccl.h", "libcudnn.so"])
def test_a_toolkit_without_cudnn_or_nccl_is_not_enough(tmp_path, missing):
    toolkit = make_toolkit(tmp_path / "cuda", without=missing)
    words = plan(run_cuda(tmp_path, "tb_cuda_plan", smi=smi_banner("13.0"), prefixes=[toolkit]))
    assert words[0] == "wheels"


def test_no_driver_changes_nothing(tmp_path):
    toolkit = make_toolkit(tmp_path / "cuda")
    for prefixes in ([], [toolkit]):  # as before: CMake builds the backend where it finds a toolkit
        r = run_cuda(tmp_path, 'tb_cuda_plan; tb_setup_cuda; echo "root=${TB_CUDA_ROOT:-}"', prefixes=prefixes)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "none\nroot=\n"


def test_a_driver_seen_only_by_ldconfig_counts(tmp_path):
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a real libcuda.so.1 answers the version here")
    except OSError:
        pass
    r = run_cuda(tmp_path, "tb_driver_cuda_version; tb_setup_cuda", libcuda=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "unknown"
    assert "an NVIDIA driver is present but its CUDA version could not be read" in r.stdout
    assert "building without the CUDA backend" in r.stdout


def test_forced_mode_takes_the_newest_wheels_without_a_driver_or_despite_a_toolkit(tmp_path):
    toolkit = make_toolkit(tmp_path / "cuda")
    words = plan(run_cuda(tmp_path, "tb_cuda_plan", prefixes=[toolkit], TB_CUDA_FROM_PYPI="1"))
    assert words[:3] == ["wheels", "forced", "13.0"]


def test_pypi_off_never_installs(tmp_path):
    r = run_cuda(tmp_path, "tb_setup_cuda", smi=smi_banner("13.0"), TB_CUDA_FROM_PYPI="0")
    assert r.returncode == 0, r.stderr
    assert "TB_CUDA_FROM_PYPI=0: building without the CUDA backend" in r.stdout
    assert not (tmp_path / "cuda-wheels").exists()


def test_installed_wheels_are_reused_and_their_nvcc_is_on_path(tmp_path):
    """A second run installs nothing, and test.sh (which requires the backend where it finds
    nvcc) finds the wheels' nvcc."""
    dir = tmp_path / "cuda-wheels"
    pins = plan(run_cuda(tmp_path, "tb_cuda_plan", smi=smi_banner("13.0")))[4:]
    make_toolkit(dir / "toolkit")
    (dir / "wheels.txt").write_text(" ".join(pins) + "\n")
    r = run_cuda(tmp_path, 'tb_setup_cuda; echo "root=$TB_CUDA_ROOT"; command -v nvcc', smi=smi_banner("13.0"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "trainbench: building the CUDA backend with CUDA 13.0, cuBLAS 13.1, cuDNN 9.19, NCCL 2.28 from PyPI's "
        f"NVIDIA wheels in {dir} (the driver supports CUDA 13.0 and no CUDA toolkit with cuDNN and NCCL is "
        "installed)",
        f"root={dir}/toolkit",
        f"{dir}/toolkit/bin/nvcc"]

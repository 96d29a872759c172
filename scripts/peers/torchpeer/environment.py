"""The environment the peer runs under, put in force by re-executing itself before torch loads:
no OpenBLAS variables that select slow kernels, glibc malloc that keeps large buffers, the
OpenMP build of OpenBLAS where installed, the setting's BLAS threads and OpenMP wait policy.
Standard library only."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

import settings_search
from settings_search import Setting
from torchpeer import InputError

# Set in the re-executed process, so that it does not re-execute again.
REEXEC_MARKER = "TB_PYTORCH_TRAIN_ENV"

# glibc malloc: without these, every freed buffer above the (dynamic) mmap threshold goes
# back to the kernel and the next step faults it in again, page by page; trainbench's
# buffers live for the whole run, so PyTorch would pay a cost trainbench does not.
MMAP_THRESHOLD_CANDIDATES = (17179869184, 1073741824, 33554432)
MALLOC_SETTINGS = {"MALLOC_TRIM_THRESHOLD_": "17179869184", "MALLOC_TOP_PAD_": "536870912"}
# OpenBLAS settings a user's shell may carry that would make it pick slower kernels.
CRIPPLING_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def machine_cores() -> int:
    """Processors this process may run on: what trainbench's `cpu` device uses (OpenMP's
    omp_get_num_procs honours the affinity mask too)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def accepted_mmap_threshold(env: dict[str, str]) -> str:
    """The largest candidate glibc takes for MALLOC_MMAP_THRESHOLD_.

    glibc drops a value it finds too large without a word, so ask a child process: with the
    setting in force a 48 MiB malloc comes from the heap (mallinfo2's mmapped block count
    stays put); with the setting dropped, it is mmapped."""
    probe = ("import ctypes\n"
             "class M(ctypes.Structure):\n"
             "    _fields_ = [(n, ctypes.c_size_t) for n in 'a b c hblks d e f g h i'.split()]\n"
             "libc = ctypes.CDLL(None)\n"
             "libc.mallinfo2.restype = M\n"
             "libc.malloc.restype = ctypes.c_void_p\n"
             "libc.malloc.argtypes = [ctypes.c_size_t]\n"
             "before = libc.mallinfo2().hblks\n"
             "libc.malloc(48 << 20)\n"
             "print('heap' if libc.mallinfo2().hblks == before else 'mmap')\n")
    for value in MMAP_THRESHOLD_CANDIDATES:
        trial = dict(env, MALLOC_MMAP_THRESHOLD_=str(value))
        try:
            r = subprocess.run([sys.executable, "-c", probe], env=trial, capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            break
        if r.returncode != 0:
            break  # no mallinfo2 (glibc < 2.33): keep the last candidate, it is accepted there
        if r.stdout.strip() == "heap" or value <= 48 << 20:
            return str(value)
    return str(MMAP_THRESHOLD_CANDIDATES[-1])


def openblas_openmp_dir() -> Path | None:
    """Debian's OpenMP build of OpenBLAS (package libopenblas0-openmp), if installed."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    folder = Path("/usr/lib") / multiarch / "openblas-openmp"
    return folder if (folder / "libblas.so.3").exists() else None


def tuned_environment(args) -> dict[str, str]:
    env = dict(os.environ)
    for name in CRIPPLING_VARIABLES:
        env.pop(name, None)
    if "MALLOC_MMAP_THRESHOLD_" not in env:
        env["MALLOC_MMAP_THRESHOLD_"] = accepted_mmap_threshold(env)
    for name, value in MALLOC_SETTINGS.items():
        env.setdefault(name, value)
    # The OpenMP build shares torch's libgomp pool and follows torch.set_num_threads; the
    # pthreads build would start a second pool of spinning threads on the same cores.
    blas_dir = None
    if args.blas == "auto":
        blas_dir = openblas_openmp_dir()
    elif args.blas != "system":
        blas_dir = Path(args.blas)
        if not (blas_dir / "libblas.so.3").exists():
            raise InputError(f"--blas {args.blas}: no libblas.so.3 in that folder")
    if blas_dir is not None:
        paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
        env["LD_LIBRARY_PATH"] = ":".join([str(blas_dir)] + [p for p in paths if p != str(blas_dir)])
    # A BLAS with its own threads (OpenBLAS pthreads, BLIS) would otherwise use every core
    # whatever --threads says; on the CPU the setting names the BLAS threads and wait policy.
    if args.device == "cuda":
        env.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    else:
        env = settings_search.environment(cpu_setting(args), env)
    env[REEXEC_MARKER] = "1"
    return env


def cpu_setting(args) -> Setting:
    """The threads, BLAS threads and wait policy this process runs every benchmark with."""
    return settings_search.resolved(args.setting, False, args.threads, False)


def reexec_with_tuned_environment(args, script: Path) -> None:
    """Replaces this process by the script, itself, under the tuned environment, once: glibc
    reads its malloc settings, and the dynamic loader LD_LIBRARY_PATH, only when a process
    starts."""
    if os.environ.get(REEXEC_MARKER) == "1":
        return
    env = tuned_environment(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, str(script), *sys.argv[1:]], env)

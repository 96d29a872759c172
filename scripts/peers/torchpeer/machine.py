"""What a row says about the machine and the software it ran on (host, CPU, torch, oneDNN, the
commit), and the environment report on stderr: the BLAS torch calls, its threads and wait
policy, what the re-exec unset. Imports torch: only after the re-exec."""
from __future__ import annotations

import ctypes
import os
import platform
import re
import socket
import subprocess
import sys
import time

import torch

from torchpeer import PROG, ROOT, tbprefix
from torchpeer.environment import CRIPPLING_VARIABLES, cpu_setting, machine_cores


def onednn_version() -> str:
    """oneDNN's version as torch reports its build ("Intel(R) MKL-DNN v2.6.3"): 2.6.3."""
    m = re.search(r"(?:oneDNN|MKL-DNN)\s+v?(\d+(?:\.\d+)*)", torch.__config__.show())
    return m.group(1) if m else ("available" if torch.backends.mkldnn.is_available() else "none")


def git_commit() -> str:
    """The repository's commit as trainbench records its own (-dirty with local changes);
    read-only git commands, no lock taken. Installed, the commit it was installed from."""
    if tbprefix.INSTALLED:
        return tbprefix.COMMIT
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=30)
        if commit.returncode != 0 or not commit.stdout.strip():
            return "unknown"
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(ROOT), "status",
                                "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30)
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine_context() -> dict[str, str]:
    u = os.uname()
    return {"host": socket.gethostname(), "os": f"{u.sysname} {u.release} {u.machine}",
            "cpu_model": cpu_model(), "cores": str(machine_cores()),
            "compiler": f"python {platform.python_version()} / torch {torch.__version__}",
            "onednn": onednn_version(), "benchmark_lib": PROG, "git_commit": git_commit(),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ---- the environment report ----------------------------------------------------------------

class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def loaded_blas() -> str | None:
    """The file whose sgemm_ torch calls.

    Several BLAS builds can be mapped at once (libblas.so.3 from one, liblapack.so.3 from
    another), so the answer is the symbol as torch's library resolves it: dlsym through
    libtorch_cpu's handle searches its dependencies in load order, and dladdr names the
    file that holds the address."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = {line.split()[-1] for line in f if len(line.split()) >= 6}
        torch_cpu = next((p for p in paths if re.search(r"/libtorch_cpu\.so[^/]*$", p)), None)
        if torch_cpu is None:
            return None
        address = ctypes.cast(ctypes.CDLL(torch_cpu).sgemm_, ctypes.c_void_p).value
        libc = ctypes.CDLL(None)
        libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        if address and libc.dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode())
    except (OSError, AttributeError, ValueError):
        pass  # no sgemm_ reachable (a BLAS linked in statically): torch's config says below
    return None


def describe_blas() -> str:
    try:
        from threadpoolctl import threadpool_info  # optional; richer when present
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                return (f"{info.get('internal_api')} {info.get('version')} ({info.get('filepath')}, "
                        f"threading {info.get('threading_layer')}, core {info.get('architecture')})")
    except Exception:  # noqa: BLE001  (threadpoolctl absent or unable: fall back below)
        pass
    path = loaded_blas()
    if path is None:
        m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
        return f"BLAS_INFO={m.group(1) if m else '?'} (no sgemm_ found through libtorch_cpu)"
    try:
        lib = ctypes.CDLL(path)
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        parallel = {0: "sequential", 1: "pthreads", 2: "OpenMP"}.get(lib.openblas_get_parallel(), "?")
        return (f"{lib.openblas_get_config().decode()} ({path}, {parallel}, core "
                f"{lib.openblas_get_corename().decode()})")
    except (OSError, AttributeError):
        pass
    if "/blas/libblas.so" in path:
        return (f"reference BLAS ({path}): unoptimised, torch's Linear and LSTM layers will be slow; "
                f"install libopenblas0-openmp (scripts/compare_pytorch.sh does)")
    return path


def report_environment(args) -> None:
    unset = [n for n in CRIPPLING_VARIABLES if n not in os.environ]
    malloc = ", ".join(f"{n}={os.environ.get(n, '(unset)')}" for n in
                       ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"))
    threads = args.threads if args.device == "cuda" else cpu_setting(args).threads
    print(f"{PROG}: torch {torch.__version__} (python {platform.python_version()}), oneDNN "
          f"{onednn_version()} (enabled: {torch.backends.mkldnn.enabled}), {threads} thread(s), "
          f"inter-op 1; settings {args.setting.text() or '(defaults)'}", file=sys.stderr)
    print(f"{PROG}: BLAS: {describe_blas()}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', '(unset)')}", file=sys.stderr)
    print(f"{PROG}: {' and '.join(unset) or 'nothing'} unset"
          f"{'' if len(unset) == len(CRIPPLING_VARIABLES) else ' (the re-exec did not run?)'}; "
          f"{malloc}", file=sys.stderr)

"""The processes a script marked with an environment variable of its own, found through /proc:
what a test of an interrupted script checks is gone (test_emulate_nodes.py, test_gpu_check.py)."""
from pathlib import Path


def marked_processes(variable: str, value: str) -> list[str]:
    """The process ids whose environment holds `variable=value`."""
    mark = f"{variable}={value}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in environ.read_bytes().split(b"\0"):
                found.append(environ.parent.name)
        except OSError:
            continue
    return found

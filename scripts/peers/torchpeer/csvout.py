"""trainbench's CSV as the peer writes it: the file refused unless its header is this
trainbench's, rows appended by column name, and a repetition's measurements as the row's
values (results/SCHEMA.md). Standard library only."""
from __future__ import annotations

import csv
import os
import resource
from pathlib import Path
from typing import TYPE_CHECKING

from torchpeer import InputError

if TYPE_CHECKING:  # timing imports torch; a row's values need only the trial's numbers
    from torchpeer.timing import Trial


def check_csv_file(path: str, columns: list[str]) -> bool:
    """Refuses a file whose header is not ours, as trainbench does; True when the header
    must be written (a new or empty file)."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return True
    if p.is_dir():
        raise InputError(f"--csv {path}: is a directory")
    with open(p, newline="", encoding="utf-8", errors="replace") as f:
        first = f.readline().rstrip("\r\n")
    if first != ",".join(columns):
        fields = next(csv.reader([first]), [])
        ours = bool(fields) and fields[0] == "schema_version"
        what = "another trainbench schema" if ours else "a header that is not trainbench's"
        raise InputError(f"--csv {path}: the file exists with {what} ({len(fields)} columns); "
                         f"this trainbench schema has {len(columns)} columns. Nothing was "
                         f"written: give a new file name, or move the old file away.")
    return False


class CsvWriter:
    """Appends rows by column name and flushes each, so an interrupted run keeps them."""

    def __init__(self, path: str, columns: list[str], write_header: bool):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.columns = columns
        self.file = open(path, "a", newline="", encoding="utf-8")
        self.writer = csv.writer(self.file, lineterminator="\n")
        if write_header:
            self.file.write(",".join(columns) + "\n")
            self.file.flush()

    def write(self, row: dict[str, str]) -> None:
        self.writer.writerow([row.get(c, "") for c in self.columns])
        self.file.flush()


def number(v: float) -> str:
    """trainbench's {:.6g}."""
    return f"{v:.6g}"


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def iteration_values(trial: Trial, batch: int, flops: int, peak: float | None,
                     loss_first: float, loss_last: float) -> dict[str, float]:
    """A repetition's measurements (results/SCHEMA.md, version 5): step_time_s and samples_per_s
    on the wall clock, as trainbench's; on a GPU the device clock (CUDA events) in
    device_step_time_s and device_samples_per_s."""
    samples_per_s = batch * trial.steps / trial.wall
    tflops = flops * samples_per_s * 1e-12
    values = {"iterations": trial.steps, "step_time_s": trial.wall / trial.steps,
              "wall_step_time_s": trial.wall / trial.steps, "samples_per_s": samples_per_s, "model_tflops": tflops,
              "host_cpu_s_per_step": trial.cpu / trial.steps,
              "host_cpu_util": trial.cpu / trial.wall, "peak_rss_bytes": peak_rss_bytes(),
              "loss_first": loss_first, "loss_last": loss_last}
    if trial.device is not None:
        values["device_step_time_s"] = trial.device / trial.steps
        values["device_samples_per_s"] = batch * trial.steps / trial.device
    if peak:
        values["peak_gflops"] = peak
        values["utilisation"] = tflops * 1e3 / peak
    return values


def formatted(values: dict[str, float]) -> dict[str, str]:
    out = {}
    for k, v in values.items():
        out[k] = str(int(v)) if k in ("iterations", "peak_rss_bytes", "mem_peak_bytes", "mem_reserved_bytes") else number(v)
    return out


def load_average() -> float | None:
    """The machine's 1-minute load average now (load_avg_1m); None where the system cannot say."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def number_or_empty(v: float | None) -> str:
    """number(v), or the empty cell of a figure not known."""
    return "" if v is None else number(v)

#!/usr/bin/python3
"""What scripts/compare_pytorch.sh reads back from its CSVs and settings file, one subcommand
each: the newest result of a benchmark, trainbench's peak_gflops for it, the setting PyTorch's
search chose for it, the --filters pairs that set each framework's rows against the other's in
scripts/compare.py, and issue 7's table of ratios against targets on one clock.

    pytorch_report.py last CSV BENCHMARK
    pytorch_report.py peak CSV BENCHMARK
    pytorch_report.py setting SETTINGS.json BENCHMARK
    pytorch_report.py filters PYTORCH.csv TRAINBENCH.csv
    pytorch_report.py table PYTORCH.csv TRAINBENCH.csv [--device_clock] BENCHMARK=TARGET...

BENCHMARK is named as the script names it, without the variant both tools append for its
flags (`/optimizer:sgd`, `/lr:0.01`, `/data_on_device`): a row is the benchmark's when its name
is that or begins with it and a slash. compare.py keeps the frameworks of two files apart
(a row's identity holds its framework), so each framework is one side of --filters, one call
per variant. Standard library, and scripts/compare.py's modules for the table.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1]
# The clock the table compares: the wall time per timed step, host gaps included, which both
# tools write with the same meaning (results/SCHEMA.md wall_step_time_s).
WALL = "wall_step_time_s"
# On a GPU: device time per step, CUDA events around each step (schema 5's column; tbcsv moves an
# older row's device-clock step_time_s there on read).
DEVICE = "device_step_time_s"


def belongs(row_name: str, name: str) -> bool:
    return row_name == name or row_name.startswith(name + "/")


def plain_name(row: dict[str, str]) -> str:
    """The benchmark's name without its variant: what both frameworks' rows share."""
    variant = (row.get("variant") or "").strip()
    return row["benchmark"].removesuffix("/" + variant) if variant else row["benchmark"]


def read_rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def rows_of(path: str, name: str) -> list[dict[str, str]]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [r for r in csv.DictReader(f) if belongs(r.get("benchmark", ""), name)]
    except OSError:
        return []


def last(path: str, name: str) -> str:
    """The newest repetition's (or median's) samples/s and wall time per step, or why it has
    none."""
    found = [r for r in rows_of(path, name)
             if r.get("run_type") != "aggregate" or r.get("aggregate") == "median"]
    if not found:
        return "no row written"
    row = found[-1]
    if row["status"] != "ok":
        return f"{row['status']}: {row['message']}"
    wall = row.get(WALL) or row.get("step_time_s")
    text = f"{float(row['samples_per_s']):.1f} samples/s"
    if wall:
        text += f", wall {float(wall) * 1e3:.3g} ms/step"
    if row.get("peer_settings"):
        text += f" ({row['peer_settings']})"
    return text


def peak(path: str, name: str) -> str:
    """The newest peak_gflops of the benchmark's ok rows (the CPU's sgemm at the same thread
    count, a GPU's datasheet peak of the precision), so both sides' utilisation use it."""
    # Repetitions' rows and their median only: a stddev or cv aggregate holds 0 or a ratio.
    values = [r["peak_gflops"] for r in rows_of(path, name)
              if r.get("status") == "ok" and r.get("peak_gflops")
              and (r.get("run_type") == "iteration" or r.get("aggregate") == "median")]
    return values[-1] if values else ""


def setting(path: str, name: str) -> str:
    """The setting the search chose for the benchmark, from its settings file."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        chosen = [e["settings"] for n, e in doc["benchmarks"].items() if belongs(n, name)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        chosen = []
    if not chosen:
        return "no setting chosen (see the log)"
    return chosen[-1] or "(defaults: nothing to search)"


def filters(pt_path: str, tb_path: str) -> list[tuple[str, str]]:
    """compare.py --filters pairs (PyTorch's side, trainbench's), one per variant of the
    benchmarks both files hold, in the order trainbench's rows first name them."""
    pt_variants = {plain_name(r): (r.get("variant") or "").strip() for r in read_rows(pt_path)}
    pairs = {}
    for r in read_rows(tb_path):
        if plain_name(r) in pt_variants:
            sides = [f"framework:{fw}" + (f"/{v}" if v else "") for fw, v in
                     (("pytorch", pt_variants[plain_name(r)]),
                      ("trainbench", (r.get("variant") or "").strip()))]
            pairs.setdefault(tuple(sides), None)
    return list(pairs)


def table(pt_path: str, tb_path: str, targets: dict[str, float], device_clock: bool) -> list[list[str]]:
    """Issue 7's table, header first: per benchmark both sides' samples/s on the wall clock
    (batch / median wall_step_time_s over the rounds), trainbench/PyTorch, its target and
    whether it is met, compare.py's noise verdict; on a GPU also the ratio on the device clock;
    trainbench's utilisation; the setting PyTorch ran with. Rows are matched by plain_name."""
    sys.path.insert(0, str(SCRIPTS))
    import compare  # noqa: E402  (scripts/, beside this folder)
    import tbcsv  # noqa: E402

    pt, tb = tbcsv.read_table(pt_path), tbcsv.read_table(tb_path)

    def results(metric: str) -> dict:
        c = compare.compare(pt, tb, metric, 0.05, lower_better=True, key=plain_name)
        return {r.benchmark: r for r in c.results}
    wall, device = results(WALL), results(DEVICE)
    util = tbcsv.samples(tb.rows, plain_name, "utilisation")
    head = ["benchmark", "trainbench samples/s", "pytorch samples/s", "trainbench/pytorch",
            "target", "met", "noise"] + (["on device clock"] if device_clock else []) + \
           ["trainbench utilisation", "pytorch settings"]
    out = [head]
    for name, target in targets.items():
        r = wall.get(name)
        if r is None or not r.base.center or not r.new.center:
            out.append([name, "-", "-", "-", f"{target:g}x", "no result", "-"] +
                       (["-"] if device_clock else []) + ["-", "-"])
            continue
        batch = float(next(row["batch"] for row in tb.rows if plain_name(row) == name))
        speedup = r.base.center / r.new.center  # PyTorch's step time over trainbench's
        row = [name, f"{batch / r.new.center:,.1f}", f"{batch / r.base.center:,.1f}",
               f"{speedup:.2f}x", f"{target:g}x", "yes" if speedup >= target else "no", r.noise.text]
        if device_clock:
            d = device.get(name)
            row.append(f"{d.base.center / d.new.center:.2f}x" if d and d.new.center else "-")
        u = util.get(name)
        settings = [x["peer_settings"] for x in pt.rows if plain_name(x) == name and x.get("peer_settings")]
        out.append(row + [f"{u.center:.3f}" if u else "-", settings[-1] if settings else "-"])
    return out


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print("  ".join(x.ljust(w) if i in (0, len(row) - 1) else x.rjust(w)
                        for i, (x, w) in enumerate(zip(row, widths))).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] in ("last", "peak", "setting"):
        print({"last": last, "peak": peak, "setting": setting}[argv[0]](argv[1], argv[2]))
        return 0
    if len(argv) == 3 and argv[0] == "filters":
        for pair in filters(argv[1], argv[2]):
            print("\t".join(pair))
        return 0
    if len(argv) >= 3 and argv[0] == "table":
        device_clock = "--device_clock" in argv[3:]
        targets = dict(a.rsplit("=", 1) for a in argv[3:] if a != "--device_clock")
        print_table(table(argv[1], argv[2], {k: float(v) for k, v in targets.items()}, device_clock))
        print(f"\nsamples/s = batch / median {WALL} over the rounds (the wall clock, host gaps "
              f"included, on both sides); trainbench/pytorch > 1: trainbench is faster"
              + (f"; on device clock: the same ratio of {DEVICE} (CUDA events per step)"
                 if device_clock else ""))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

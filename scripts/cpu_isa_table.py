#!/usr/bin/env python3
"""The table of scripts/bench_cpu_isa.sh: for each cpu row of a CSV, the median samples/s of each
build (the compiler column's target: -march=native or generic x86-64) and ISA of trainbench's own
kernels (cpu_isa), its lowest and highest, and its ratio over the native build at the best ISA in
the file (the generic build's, in a file of that build alone): the median of the rounds' ratios,
the k-th run of each column against the k-th of that one (bench_cpu_isa.sh runs them interleaved,
so each pair shares the machine's state of its round).
Markdown on stdout. Usage: cpu_isa_table.py CSV"""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402

ORDER = ("avx512", "avx2", "sse2")


def build(row: dict[str, str]) -> str:
    compiler = row.get("compiler", "")
    return "generic" if compiler.endswith("generic x86-64") else "native"


def shown(x: float) -> str:
    return tbcsv.figure(x)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        table = tbcsv.read_table(argv[0])
    except tbcsv.InputError as e:
        print(f"cpu_isa_table.py: error: {e}", file=sys.stderr)
        return 2
    samples: dict[tuple[str, str, str], list[float]] = {}
    for r in table.rows:
        if not (tbcsv.is_iteration(r) and tbcsv.is_ok(r)) or tbcsv.is_predicted(r) or not r.get("cpu_isa"):
            continue
        sps = tbcsv.number(r, "samples_per_s")
        if sps:
            samples.setdefault((r["benchmark"], build(r), r["cpu_isa"]), []).append(sps)
    if not samples:
        print(f"cpu_isa_table.py: error: {argv[0]}: no ok cpu rows with a cpu_isa (schema 7)", file=sys.stderr)
        return 2
    columns = sorted({(b, isa) for _, b, isa in samples}, key=lambda c: (c[0] != "native", ORDER.index(c[1])))
    # The native build at the best ISA, or the generic build's best where the file has no native rows.
    best = columns[0]
    names = list(dict.fromkeys(name for name, _, _ in samples))
    head = " | ".join(f"{b} {isa}" for b, isa in columns)
    print(f"| benchmark | {head} |")
    print("| --- |" + " ---: |" * len(columns))
    for name in names:
        base = samples.get((name, *best))
        cells = []
        for c in columns:
            values = samples.get((name, *c))
            if not values:
                cells.append("-")
                continue
            pairs = [v / b for v, b in zip(values, base or [])]
            ratio = f", {statistics.median(pairs):.2f}x" if pairs and c != best else ""
            cells.append(f"{shown(statistics.median(values))} ({shown(min(values))}-{shown(max(values))}{ratio})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    runs = max(len(v) for v in samples.values())
    print(f"\nsamples/s on the wall clock: the median of up to {runs} runs per column; in brackets their lowest and "
          f"highest and the median of the rounds' ratios over the {best[0]} build at {best[1]} ({argv[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

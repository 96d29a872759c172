#!/usr/bin/env python3
"""bench/'s folders are layers, each including only those before it (bench/CMakeLists.txt):
schema, cli, plan, output, predict, run. Fails naming every file that includes a folder of its own
layer's successors, so that no two folders include each other. Usage: check_bench_layers.py
BENCH_DIR"""
import re
import sys
from pathlib import Path

LAYERS = ("schema", "cli", "plan", "output", "predict", "run")
INCLUDE = re.compile(r'^#include "bench/([a-z_]+)/', re.M)


def violations(bench: Path) -> list[str]:
    found = []
    for layer, name in enumerate(LAYERS):
        for source in sorted((bench / name).glob("*.[ch]pp")):
            for folder in INCLUDE.findall(source.read_text()):
                if folder in LAYERS and LAYERS.index(folder) > layer:
                    found.append(f"{source.relative_to(bench.parent)} includes bench/{folder}/, a later layer "
                                 f"({' < '.join(LAYERS)})")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    bench = Path(argv[0])
    missing = [name for name in LAYERS if not (bench / name).is_dir()]
    if missing:
        print(f"check_bench_layers.py: error: {bench} has no folder {', '.join(missing)}", file=sys.stderr)
        return 2
    found = violations(bench)
    for line in found:
        print(line)
    print(f"check_bench_layers.py: {len(found)} include(s) against the layers" if found else
          f"check_bench_layers.py: every folder of {bench} includes only earlier layers ({' < '.join(LAYERS)})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

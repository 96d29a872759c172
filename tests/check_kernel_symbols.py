"""Checks the object files of trainbench's own CPU kernels (engine/cpu/kernels/isa_*.cpp, one per
instruction set, each compiled with its ISA's flags): none may define a symbol the linker could
merge with another file's (a weak or unique symbol: an inline function or template instantiated
there), since the linker keeps one copy and another ISA's callers would run it, and each defines
its table, the only global, in its own namespace. Usage: check_kernel_symbols.py OBJECT..."""
import re
import subprocess
import sys


def main(objects: list[str]) -> int:
    if not objects:
        print("check_kernel_symbols.py: give the kernels' object files", file=sys.stderr)
        return 2
    problems = []
    for path in objects:
        isa = re.search(r"isa_(\w+)\.cpp\.o$", path)
        if not isa:
            problems.append(f"{path}: not a kernels object (isa_<name>.cpp.o)")
            continue
        out = subprocess.run(["nm", "-C", "--defined-only", path], capture_output=True, text=True, check=True).stdout
        table = f"tb::cpu::kernels::{isa.group(1)}::kTable"
        has_table = False
        for line in out.splitlines():
            parts = line.split(maxsplit=2)
            if len(parts) < 3:
                continue
            kind, name = parts[1], parts[2]
            if kind in ("W", "w", "V", "v", "u"):
                problems.append(f"{path}: shared symbol ({kind}) {name}")
            elif kind.isupper() and name != table and not name.startswith("__odr_asan"):  # ASan's own
                problems.append(f"{path}: global symbol ({kind}) {name} beside {table}")
            has_table |= name == table
        if not has_table:
            problems.append(f"{path}: no {table}")
    for p in problems:
        print(p)
    print(f"check_kernel_symbols.py: {len(objects)} objects, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

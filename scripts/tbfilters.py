"""compare.py's --filters A B: two sides drawn from the same CSVs by device configuration,
variant, precision, framework or host, matched by what the filters leave free (issue 21).

A filter is terms joined by `/`, the way a benchmark name ends (`gpu:1/fp32/bs:100/cuda_graph`):

    cpu, cpu:N, gpu:N, gpu:1/jobs:K, mpi:N   the device
    fp32, tf32, fp16, bf16                   the precision
    framework:NAME, host:NAME                the framework (trainbench, pytorch) or the host
    data_on_device, cuda_graph, optimizer:adam, shared_device, ...
                                             the variant (results/SCHEMA.md): a row matches
                                             only with exactly these flags; none = plain
    '' or plain                              nothing but the plain variant

Rows match across the sides by kind, model, dataset and batch (and epoch), plus each of device,
precision and framework that neither filter names. Standard library only."""
from __future__ import annotations

from dataclasses import dataclass

import tbcsv
import tbdevices

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# What the filters may name, besides the variant; host is never part of the match.
DIMENSIONS = ("device", "precision", "framework", "host")
MATCHED = ("device", "precision", "framework")
SYNTAX = ("cpu, cpu:N, gpu:N, gpu:1/jobs:K, mpi:N, a precision (fp32, tf32, fp16, bf16), "
          "framework:NAME, host:NAME, or a variant flag (" + ", ".join(tbdevices.MEASURED_FLAGS)
          + ")")


def dimension(row: dict[str, str], name: str) -> str:
    if name == "framework":
        return (row.get("framework") or "").strip() or "trainbench"
    if name == "host":
        return (row.get("host") or "").strip()
    return tbcsv.field_of(row, name)


@dataclass(frozen=True)
class Filter:
    text: str
    dims: tuple[tuple[str, str], ...]  # (dimension, value) it names
    variant: tuple[str, ...]  # the variant's flags, sorted

    def names(self, dim: str) -> bool:
        return any(d == dim for d, _ in self.dims)

    def matches(self, row: dict[str, str]) -> bool:
        if tuple(sorted(tbdevices.variant_items(row.get("variant", "")))) != self.variant:
            return False
        return all(dimension(row, d) == v for d, v in self.dims)

    def describe(self) -> str:
        parts = [v for _, v in self.dims] + list(self.variant)
        plain = "" if self.variant else " (plain)"
        return ("/".join(parts) or "any device") + plain


def parse_filter(text: str) -> Filter:
    """A filter from its text; InputError naming the term it cannot read."""
    dims: dict[str, str] = {}
    variant: list[str] = []
    for term in (t.strip() for t in text.split("/")):
        if not term or term == "plain":
            continue
        if term.startswith(tbdevices.SPLIT_PREFIXES) and tbdevices.parse(f"{dims.get('device', '')}/{term}"):
            dims["device"] += "/" + term
            continue
        flag = term.partition(":")[0]
        if tbdevices.parse(term) is not None:
            name, value = "device", term
        elif term in PRECISIONS:
            name, value = "precision", term
        elif flag in ("framework", "host") and term.partition(":")[2]:
            name, value = flag, term.partition(":")[2]
        elif tbdevices.names_a_prediction(term):
            raise tbcsv.InputError(f"--filters {text!r}: predicted rows are predictions, not "
                                   f"measurements: compare.py never compares them")
        elif tbdevices.is_flag(term):
            variant.append(term)
            continue
        else:
            raise tbcsv.InputError(f"--filters {text!r}: {term!r} is not a term a filter "
                                   f"knows: use {SYNTAX}, joined by '/'")
        if name in dims:
            raise tbcsv.InputError(f"--filters {text!r} names two of {name} ({dims[name]}, "
                                   f"{value}): a side is one of each")
        dims[name] = value
    return Filter(text, tuple(sorted(dims.items())), tuple(sorted(variant)))


@dataclass
class FilterPair:
    """The two filters, and the key that matches a row of one side with one of the other."""
    base: Filter
    new: Filter

    def free(self) -> list[str]:
        """The dimensions neither filter names: rows match only with the same value."""
        return [d for d in MATCHED if not self.base.names(d) and not self.new.names(d)]

    def key(self, row: dict[str, str]) -> str:
        """A name like the benchmark's, without what the filters set: `train/mlp/mnist/fp32/
        bs:100` for --filters cpu gpu:1; the framework in brackets when it is free and not
        trainbench; per-epoch rows with their epoch."""
        free = self.free()
        parts = [tbcsv.field_of(row, "kind"), tbcsv.field_of(row, "model"),
                 tbcsv.field_of(row, "dataset")]
        parts += [tbcsv.field_of(row, d) for d in ("device", "precision") if d in free]
        name = "/".join(parts + [f"bs:{tbcsv.field_of(row, 'batch')}"])
        framework = dimension(row, "framework")
        if "framework" in free and framework != "trainbench":
            name += f" [{framework}]"
        epoch = (row.get("epoch") or "").strip()
        return f"{name} epoch {epoch}" if epoch else name

    def ambiguous(self, rows: list, side: Filter) -> dict[str, str]:
        """key -> why, for keys whose rows on this side differ in a dimension that this side
        leaves open while the other names it (--filters gpu:1 cuda_graph, and the cuda_graph
        side holds gpu:1 and gpu:2 rows): such rows cannot be pooled into one value."""
        open_dims = [d for d in MATCHED if d not in self.free() and not side.names(d)]
        seen: dict = {}
        for r in rows:
            for d in open_dims:
                seen.setdefault((self.key(r), d), set()).add(dimension(r, d))
        return {k: f"{d}s {', '.join(sorted(v))}: name one in the filter"
                for (k, d), v in seen.items() if len(v) > 1}


# ---- the hint when nothing matches ---------------------------------------------------------

def core(row: dict[str, str]) -> tuple:
    return tuple(tbcsv.field_of(row, c) for c in ("kind", "model", "dataset", "precision",
                                                  "batch"))


def side_terms(row: dict[str, str], other: dict[str, str]) -> str:
    """The filter that picks `row` against `other`: its device and framework where they
    differ, and its variant (a filter without one means the plain variant)."""
    terms = []
    for d in ("device", "framework"):
        if dimension(row, d) != dimension(other, d):
            terms.append(dimension(row, d) if d == "device" else f"framework:{dimension(row, d)}")
    return "/".join(terms + tbdevices.variant_items(row.get("variant", "")))


def configuration(row: dict[str, str]) -> str:
    """The filter that names a row's configuration: its device, variant and framework (where
    not trainbench), `gpu:1/cuda_graph`."""
    framework = dimension(row, "framework")
    return "/".join([dimension(row, "device")] + tbdevices.variant_items(row.get("variant", ""))
                    + ([f"framework:{framework}"] if framework != "trainbench" else []))


def suggest(base_rows: list, new_rows: list) -> str | None:
    """`--filters 'cpu' 'gpu:1'` for two sides whose benchmarks differ only in device,
    variant or framework (the same model, dataset, precision and batch), else None."""
    new_by_core = {}
    for r in new_rows:
        new_by_core.setdefault(core(r), r)
    for r in base_rows:
        other = new_by_core.get(core(r))
        if other is not None and r["benchmark"] != other["benchmark"]:
            return f"--filters '{side_terms(r, other)}' '{side_terms(other, r)}'"
    return None

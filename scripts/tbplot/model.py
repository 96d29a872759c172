"""What the charts and the report are drawn from: a row's configuration (its name's parts and
its variant), the series (machine and framework) it belongs to, and the figures derived from
the medians (speedup over the cpu row, scaling efficiency). No matplotlib here."""
from __future__ import annotations

import math
from dataclasses import dataclass

import tbcsv


@dataclass(frozen=True, order=True)
class Config:
    """What a benchmark ran, without the machine: the parts of its name and its variant (the
    flags that change what it measures: results/SCHEMA.md, schema 4), so that a run with
    --data_on_device or --optimizer=adam is never merged with one without."""
    kind: str
    model: str
    dataset: str
    device: str
    precision: str
    batch: str
    variant: str = ""

    @property
    def panel(self) -> tuple[str, str, str]:
        return (self.kind, self.model, self.dataset)

    @property
    def shared_device(self) -> bool:
        return tbcsv.is_shared_device(self.variant)

    @property
    def predicted(self) -> bool:
        return bool(tbcsv.predicted_link(self.variant))


def config_of(row) -> Config:
    return Config(*(tbcsv.field_of(row, c)
                    for c in ("kind", "model", "dataset", "device", "precision", "batch")),
                  (row.get("variant") or "").strip())


def batch_number(batch: str) -> float:
    try:
        return float(batch)
    except ValueError:
        return math.inf


def variant_sort_key(variant: str) -> tuple:
    """Plain first, then measured variants by their flags, predicted ones last."""
    items = tbcsv.variant_items(variant)
    return (bool(tbcsv.predicted_link(variant)), len(items),
            [tbcsv.variant_order(i) for i in items])


PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def precision_key(precision: str) -> tuple:
    """fp32, tf32, fp16, bf16 (trainbench's order), then any other by name."""
    return (PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS),
            precision)


def config_sort_key(c: Config):
    return (tbcsv.device_sort_key(c.device), variant_sort_key(c.variant),
            precision_key(c.precision), batch_number(c.batch), c.batch)


def variant_words(variant: str, device: str = "") -> list[str]:
    """A variant as short lines for a label: `shared_device` says what it means (N replicas on
    one GPU), `predicted:nvlink4` becomes `predicted (nvlink4)`, other flags stay as written."""
    words = []
    for item in tbcsv.variant_items(variant):
        flag, _, value = item.partition(":")
        if flag == "shared_device":
            n = tbcsv.device_count(device)
            words += [f"{n or 'N'} replicas", "on one GPU"]
        elif flag == "predicted":
            words.append(f"predicted ({value})")
        else:
            words.append(item)
    return words


def config_name(c: Config, sep: str = " ") -> str:
    """The device configuration with its variant: `gpu:1 data_on_device cuda_graph`."""
    return sep.join([c.device] + variant_words(c.variant, c.device))


def panel_title(panel: tuple[str, str, str]) -> str:
    kind, model, dataset = panel
    parts = ([kind] if kind not in ("train", "epochs") else []) + [model, dataset]
    return " · ".join(p for p in parts if p)


class Data:
    """All rows of the input files, split into steady-state and per-epoch rows, with one
    series per machine (host; host @ commit when a host appears at several commits, so that
    runs of different builds are not pooled), and per framework where rows of a peer
    framework (scripts/peers/) are given: "host · pytorch". Predicted rows (schema 4,
    measurement=predicted) are kept apart in predicted_rows: no measured chart draws them.
    Reference runs (tbplot.references: known machines' default-set runs drawn beside these rows
    by the headline and the report's reference table) are kept apart in reference_rows, each
    reference one series named by its index; no other chart draws them."""

    def __init__(self, tables: list[tbcsv.Table], latest: bool = False, references=()):
        self.rows = tbcsv.all_rows(tables)
        self.latest = latest
        if latest:
            self.rows = newest_rows(self.rows)
        measured = [r for r in self.rows if not tbcsv.is_predicted(r)]
        self.predicted_rows = [r for r in self.rows if tbcsv.is_predicted(r)]
        self.step_rows = [r for r in measured if not tbcsv.is_epoch_row(r)]
        self.epoch_rows = [r for r in measured if tbcsv.is_epoch_row(r)]
        # A machine at several commits: one series per commit. Per machine, not per host name:
        # two machines sharing a host name, each at its own commit, are two series already.
        commits: dict[tuple, set[str]] = {}
        for r in self.rows:
            if (r.get("framework", "") or "trainbench") == "trainbench":
                commits.setdefault(machine_key(r), set()).add(r.get("git_commit", ""))
        self._split = set() if latest else {m for m, c in commits.items() if len(c) > 1}
        # Hosts that name several machines (the same hostname on a CPU VM and a GPU machine)
        # are told apart by their hardware (machine_label).
        machines: dict[str, set] = {}
        for r in self.rows:
            machines.setdefault(r.get("host", "") or "?", set()).add(machine_key(r)[1:])
        self._labels = {h: machine_labels(m) for h, m in machines.items() if len(m) > 1}
        self.series = list(dict.fromkeys(self.series_of(r) for r in self.rows))
        self.references = []
        self.reference_rows = []
        for ref in references:
            if ref.name in self.series:  # a reference never passes for an input machine
                ref.name = f"{ref.name} (reference)"
            self.references.append(ref)
            for r in ref.table.rows:
                r[REFERENCE] = ref.name
                if not tbcsv.is_epoch_row(r):
                    self.reference_rows.append(r)
        self.series += [ref.name for ref in self.references]

    @property
    def own_series(self) -> list[str]:
        """The series of the input files, without the reference runs'."""
        names = {ref.name for ref in self.references}
        return [s for s in self.series if s not in names]

    def series_of(self, row) -> str:
        if row.get(REFERENCE):
            return row[REFERENCE]
        host = row.get("host", "") or "?"
        if host in self._labels:
            host = f"{host} ({self._labels[host][machine_key(row)[1:]]})"
        if machine_key(row) in self._split:
            host = f"{host} @ {(row.get('git_commit') or '?')[:12]}"
        framework = row.get("framework", "") or "trainbench"
        return host if framework == "trainbench" else f"{host} · {framework}"

    def machine_name(self, series: str) -> str:
        """The series with its hardware where its name does not say it (a host name alone):
        `vm (Intel Xeon, 2 cores)`, `h100-node (H100 80GB HBM3)`; a reference's own name."""
        if series in {ref.name for ref in self.references}:
            return series
        rows = [r for r in self.rows if self.series_of(r) == series]
        host = (rows[0].get("host", "") or "?") if rows else ""
        if not rows or host in self._labels:
            return series
        hardware = machine_labels({machine_key(r)[1:] for r in rows})
        return series.replace(host, f"{host} ({' / '.join(dict.fromkeys(hardware.values()))})", 1)

    def colour(self, series: str) -> str:
        return f"C{self.series.index(series) % 10}"

    def key(self, row):
        return (self.series_of(row), config_of(row))


# The derived field (never a CSV column) that marks a reference run's rows with its name.
REFERENCE = "reference"


def machine_of(row) -> tuple[str, str, str]:
    """A machine's identity: host, CPU model and GPU name. Driver, CUDA and library versions
    are left out on purpose: they change with an upgrade of the same machine, and
    driver_version changed meaning in schema_version 3 (the CUDA driver API version 13.0
    before, the NVIDIA driver 580.159.04 since; tbcsv moves the old value to
    cuda_driver_version), so keying on them would split one machine into two series."""
    return (row.get("host", "") or "?", row.get("cpu_model", "") or "", row.get("gpu_name", "") or "")


def machine_key(row) -> tuple[str, str, str, str]:
    """machine_of and the number of cores: a 2-core and a 16-core VM of one image share host
    name and CPU model (the committed H100 run's host and this repository's CPU VM are both
    `vm` on an `Intel(R) Xeon(R) Processor`)."""
    return machine_of(row) + ((row.get("cores", "") or "").strip(),)


def short_gpu(name: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `H100 80GB HBM3`."""
    return " ".join(name.removeprefix("NVIDIA ").split())


def short_cpu(model: str, cores: str = "") -> str:
    """`Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz`, 8 cores -> `Intel Xeon Gold 6230, 8 cores`."""
    text = model.split(" @ ")[0]
    for noise in ("(R)", "(TM)", "(tm)", " CPU", " Processor"):
        text = text.replace(noise, "")
    text = " ".join(text.split()) or "CPU ?"
    return f"{text}, {cores} cores" if cores else text


def machine_labels(machines) -> dict:
    """Short, distinct names for the machines (cpu_model, gpu_name, cores) one host name stands
    for: the GPU where the machine has one, else the CPU and its cores; both where that is not
    enough to tell them apart."""
    def label(m, full):
        cpu, gpu, cores = m
        if gpu and not full:
            return short_gpu(gpu)
        return ", ".join(p for p in (short_gpu(gpu) if gpu else "", short_cpu(cpu, cores)) if p)
    labels = {m: label(m, False) for m in machines}
    if len(set(labels.values())) < len(labels):
        labels = {m: label(m, True) for m in machines}
    return labels


def newest_rows(rows) -> list:
    """Per benchmark configuration, machine and framework, the rows of the newest run that
    measured it (the latest timestamp among rows not skipped): history stays in the files, the
    charts show the present, and a machine that cannot run a configuration (a CPU-only
    machine's GPU rows) shows nothing for it."""
    def key(r):
        return (machine_key(r), r.get("framework", "") or "trainbench", config_of(r))
    newest: dict = {}
    for r in rows:
        if r.get("status") != "skipped":
            newest[key(r)] = max(newest.get(key(r), ""), r.get("timestamp", "") or "")
    return [r for r in rows if key(r) in newest and (r.get("timestamp", "") or "") == newest[key(r)]]


def spread(sample: tbcsv.Sample) -> tuple[float, float, float]:
    return sample.center, min(sample.values), max(sample.values)


# ---- the clock -------------------------------------------------------------------------------

WALL_CLOCK = ("samples/s on the wall clock (host gaps included; a GPU step ends when the device "
              "is done)")


def clock_notes(data: Data, rows) -> list[str]:
    """The chart's line on the clock of its throughput (schema 5: the wall clock on every row;
    tbcsv reads older GPU rows on it), and one naming the rows that could only be read on the
    device clock (no wall_step_time_s), which are not comparable with the others."""
    device: dict = {}
    for r in rows:
        if tbcsv.on_device_clock(r) and tbcsv.is_ok(r):
            c = config_of(r)
            device.setdefault(data.series_of(r), {})[
                f"{panel_title(c.panel)} {config_name(c)} {c.precision}"] = None
    notes = [WALL_CLOCK[0].upper() + WALL_CLOCK[1:] + "."]
    if device:
        said = "; ".join(f"{s}: " + ", ".join(list(cs)[:4])
                         + (f" and {len(cs) - 4} more" if len(cs) > 4 else "")
                         for s, cs in device.items())
        notes.append("On the device clock only (CUDA events; no wall_step_time_s recorded), not "
                     f"comparable with the wall clock's bars: {said}.")
    return notes


# ---- derived figures -----------------------------------------------------------------------

def baseline_config(c: Config, available) -> Config | None:
    """The `cpu` configuration a speedup (x cpu) is taken against, among the same machine's
    available configurations: the same model and dataset, the variant without its GPU-only flags
    (a CUDA graph's speedup is over the plain cpu row, an --optimizer=adam run's over the cpu row
    with adam); of the same precision where the CPU ran it, else fp32, else any; of the same
    batch where there is one, else the cpu row's own (ResNet-152 224 trains batch 128 on a GPU
    and 8 on a CPU). pair_label says what differs. trainbench's summary follows the same rule."""
    variant = tbcsv.without_gpu_flags(c.variant)
    cpus = [a for a in available if a.panel == c.panel and a.device == "cpu"
            and a.variant == variant]

    def preference(a: Config) -> tuple:
        precision = 0 if a.precision == c.precision else 1 if a.precision == "fp32" else 2
        return (precision, precision_key(a.precision), a.batch != c.batch,
                batch_distance(a.batch, c.batch), a)
    return min(cpus, key=preference) if cpus else None


def batch_distance(a: str, b: str) -> float:
    """How far two batches are apart (by ratio): the nearest cpu batch is the baseline."""
    x, y = batch_number(a), batch_number(b)
    return abs(math.log(x / y)) if 0 < x < math.inf and 0 < y < math.inf else math.inf


def pair_label(c: Config, base: Config) -> str:
    """What differs between a configuration and the cpu row its speedup is over, as the label
    beside the ratio says it: `bf16 vs fp32`, `bs 128 vs 8`, both joined by `, `; '' when the
    pair is alike."""
    parts = []
    if c.precision != base.precision:
        parts.append(f"{c.precision} vs {base.precision}")
    if c.batch != base.batch:
        parts.append(f"bs {c.batch} vs {base.batch}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Speedup:
    """x cpu: samples/s of a configuration over the samples/s of its machine's cpu row (base),
    and what differs between the two (label, empty when nothing does)."""
    ratio: float
    base: Config
    label: str

    def text(self) -> str:
        """`7.4×`, or `7.4× (bf16 vs fp32)` where the pair differs."""
        ratio = times(self.ratio)
        return f"{ratio} ({self.label})" if self.label else ratio


def times(ratio: float, sign: str = "×") -> str:
    """A ratio as a label says it: 3 significant digits, whole numbers from 100 (`3,956×`)."""
    return f"{ratio:,.0f}{sign}" if ratio >= 100 else f"{ratio:.3g}{sign}"


def speedup_pairs(data: Data, rows=None, measured=None) -> dict:
    """(series, config) -> Speedup over the machine's cpu row, for non-cpu configs.
    Shared-device rows (N replicas on one GPU) get none: they check correctness, and a
    speedup bar would read as N GPUs' worth. `rows` adds rows to rate (predicted ones);
    `measured` are the rows holding the cpu rows (data.step_rows unless given)."""
    got = tbcsv.samples(data.step_rows if measured is None else measured, data.key,
                        "samples_per_s")
    extra = tbcsv.samples(rows or [], data.key, "samples_per_s")
    by_series: dict = {}
    for (s, c), sample in got.items():
        by_series.setdefault(s, {})[c] = sample.center
    out = {}
    for (s, c), sample in list(got.items()) + list(extra.items()):
        configs = by_series.get(s, {})
        if c.device == "cpu" or c.shared_device:
            continue
        base = baseline_config(c, configs)
        if base is not None and configs[base] > 0 and sample.center > 0:
            out[(s, c)] = Speedup(sample.center / configs[base], base, pair_label(c, base))
    return out


def speedups(data: Data, rows=None) -> dict:
    """(series, config) -> samples/s over the machine's cpu samples/s (speedup_pairs' ratios)."""
    return {k: v.ratio for k, v in speedup_pairs(data, rows).items()}


def scaling_lines(data: Data) -> dict:
    """(series, panel, precision, batch label) -> {N: efficiency} from gpu:N rows; the label
    names the variant when there is one, and shared-device rows are never scaling.

    efficiency(N) = samples/s on N devices / (N × samples/s on 1). Rows are matched on the
    batch; when each N has a single batch (weak scaling written with the global batch) the
    batches are matched by N instead."""
    got = tbcsv.samples(data.step_rows, data.key, "samples_per_s")
    groups: dict = {}
    for (s, c), sample in got.items():
        n = tbcsv.device_count(c.device)
        if n is not None and not c.shared_device:
            by_n = groups.setdefault((s, c.panel, c.precision, c.variant), {})
            by_n.setdefault(n, {})[c.batch] = sample.center
    out = {}
    for (s, panel, precision, variant), by_n in groups.items():
        if 1 not in by_n or len(by_n) < 2:
            continue
        if all(len(b) == 1 for b in by_n.values()):
            batches = {n: next(iter(b)) for n, b in by_n.items()}
            label = (f"bs:{batches[1]}" if len(set(batches.values())) == 1
                     else "bs:" + "→".join(batches[n] for n in sorted(by_n)))
            curves = {label: {n: next(iter(b.values())) for n, b in by_n.items()}}
        else:
            curves = {f"bs:{batch}": {n: b[batch] for n, b in by_n.items() if batch in b}
                      for batch in by_n[1]}
        for label, sps in curves.items():
            if len(sps) >= 2 and sps[1] > 0:
                name = " ".join([label] + variant_words(variant))
                out[(s, panel, precision, name)] = {n: v / (n * sps[1])
                                                    for n, v in sorted(sps.items())}
    return out

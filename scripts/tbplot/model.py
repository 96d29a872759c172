"""What the charts and the report are drawn from: a row's configuration (its name's parts, its
variant, and what schema 6 says its kind is), the series (machine and framework) it belongs to,
and the figures the rows carry, read as medians over their repetitions: the speedup over the cpu
row (speedup_vs_cpu, cpu_baseline, speedup_differs) and scaling efficiency (scaling_efficiency,
data_parallel). Nothing here pairs rows or parses a device: tbcsv gives older rows the columns.
No matplotlib here."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import tbcsv
import tbdevices


@dataclass(frozen=True, order=True)
class Config:
    """What a benchmark ran, without the machine: the parts of its name and its variant (the
    flags that change what it measures: results/SCHEMA.md, schema 4), so that a run with
    --data_on_device or --optimizer=adam is never merged with one without. Beside them, not part
    of its identity, what its rows say of their kind (schema 6): device_kind, backend,
    data_parallel, measurement and the link of a prediction."""
    kind: str
    model: str
    dataset: str
    device: str
    precision: str
    batch: str
    variant: str = ""
    device_kind: str = field(default="", compare=False)
    backend: str = field(default="", compare=False)
    data_parallel: int | None = field(default=None, compare=False)
    measurement: str = field(default="measured", compare=False)
    link: str = field(default="", compare=False)

    @property
    def panel(self) -> tuple[str, str, str]:
        return (self.kind, self.model, self.dataset)

    @property
    def checks_only(self) -> bool:
        """Replicas sharing one GPU, GPU ranks as emulated nodes: a check, never a figure of
        speed or scaling."""
        return tbdevices.checks_only(self.device_kind)

    @property
    def predicted(self) -> bool:
        return self.measurement == "predicted"

    @property
    def on_gpu(self) -> bool:
        return self.backend == tbdevices.GPU

    @property
    def all_cores(self) -> bool:
        return tbdevices.is_all_cores(self.device_kind)

    @property
    def workload(self) -> tbcsv.Workload:
        return tbcsv.Workload(self.kind, self.model, self.dataset, self.precision, self.batch,
                              self.variant)

    def but(self, **changes) -> "Config":
        """The configuration with some fields changed, its kind's facts kept."""
        return dataclasses.replace(self, **changes)


def config_of(row) -> Config:
    return Config(*(tbcsv.field_of(row, c)
                    for c in ("kind", "model", "dataset", "device", "precision", "batch")),
                  (row.get("variant") or "").strip(), row.get("device_kind", ""),
                  row.get("backend", ""), tbcsv.data_parallel(row),
                  row.get("measurement", "") or "measured", (row.get("link") or "").strip())


def batch_number(batch: str) -> float:
    try:
        return float(batch)
    except ValueError:
        return math.inf


def variant_sort_key(variant: str) -> tuple:
    """Plain first, then measured variants by their flags, predicted ones last."""
    items = tbdevices.variant_items(variant)
    return (bool(tbdevices.predicted_link(variant)), len(items),
            [tbdevices.variant_order(i) for i in items])


PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def precision_key(precision: str) -> tuple:
    """fp32, tf32, fp16, bf16 (trainbench's order), then any other by name."""
    return (PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS),
            precision)


def config_sort_key(c: Config):
    return (tbcsv.device_sort_key(c.device), variant_sort_key(c.variant),
            precision_key(c.precision), batch_number(c.batch), c.batch)


# A variant as short lines for a label (`2 replicas`, `on one GPU`; `predicted (nvlink4)`).
variant_words = tbdevices.variant_words


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
        self.tables = tables
        self.latest = latest
        self.left_out = 0  # rows --latest left out: older runs, other builds of a benchmark
        if latest:
            kept = newest_rows(self.rows)
            self.left_out = len(self.rows) - len(kept)
            self.rows = kept
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


def cores_text(cores: str) -> str:
    """`8 cores`, `1 core`; several counts (`1, 2`) keep the plural."""
    cores = cores.strip()
    return f"{cores} core" if cores == "1" else f"{cores} cores"


def cpu_name(model: str) -> str:
    """`Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz` -> `Intel Xeon Gold 6230`."""
    text = model.split(" @ ")[0]
    for noise in ("(R)", "(TM)", "(tm)", " CPU", " Processor"):
        text = text.replace(noise, "")
    return " ".join(text.split()) or "CPU ?"


def short_cpu(model: str, cores: str = "") -> str:
    """`Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz`, 8 cores -> `Intel Xeon Gold 6230, 8 cores`
    (`1 core` for one)."""
    text = cpu_name(model)
    return f"{text}, {cores_text(cores)}" if cores else text


def host_cpu(model: str, cores: str = "") -> str:
    """A GPU machine's host CPU as a label says it: `16-core Intel Xeon`."""
    text = cpu_name(model)
    return f"{cores.strip()}-core {text}" if cores.strip() else text


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


def build_of(row) -> tuple[str, str]:
    """The build a row ran: its compiler line (flags included: -march=native or generic x86-64)
    and the ISA trainbench's own CPU kernels ran at (capped by TB_MAX_CPU_ISA in experiments)."""
    return ((row.get("compiler") or "").strip(), (row.get("cpu_isa") or "").strip())


def newest_rows(rows) -> list:
    """Per benchmark configuration, machine and framework, the rows of the newest run that
    measured it (the latest timestamp among rows not skipped): history stays in the files, the
    charts show the present, and a machine that cannot run a configuration (a CPU-only
    machine's GPU rows) shows nothing for it. Of the builds a machine ran, only its main one (the
    build of most of its rows) where it measured the benchmark: an experiment's generic or
    ISA-capped build, run last, had become the machine's present (the 2-core VM's MLP at 13,382
    samples/s where its own build ran 17,560). A benchmark that only another build measured
    keeps its rows (the 2-core VM's time-to-accuracy run, older than its -march=native build)."""
    builds: dict = {}
    for r in rows:
        if r.get("status") != "skipped":
            counts = builds.setdefault(machine_key(r), {})
            counts[build_of(r)] = counts.get(build_of(r), 0) + 1
    main = {m: max(counts, key=counts.get) for m, counts in builds.items()}

    def key(r):
        return (machine_key(r), r.get("framework", "") or "trainbench", config_of(r))

    def on_main(r) -> bool:
        return build_of(r) == main[machine_key(r)]
    measured = [r for r in rows if r.get("status") != "skipped"]
    main_measured = {key(r) for r in measured if on_main(r)}

    def of_its_build(r) -> bool:
        """The main build's row where the benchmark has some, else any build's."""
        return key(r) not in main_measured or on_main(r)
    newest: dict = {}
    for r in measured:
        if of_its_build(r):
            newest[key(r)] = max(newest.get(key(r), ""), r.get("timestamp", "") or "")
    return [r for r in rows if key(r) in newest and (r.get("timestamp", "") or "") == newest[key(r)]
            and (r.get("status") == "skipped" or of_its_build(r))]


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


# ---- the figures the rows carry -------------------------------------------------------------

@dataclass(frozen=True)
class Speedup:
    """x cpu: samples/s of a configuration over the samples/s of its machine's cpu row (base:
    the cpu row's benchmark, or its configuration), and what differs between the two (label,
    empty when nothing does)."""
    ratio: float
    base: object
    label: str

    def text(self) -> str:
        """`7.4×`, or `7.4× (bf16 vs fp32)` where the pair differs."""
        ratio = times(self.ratio)
        return f"{ratio} ({self.label})" if self.label else ratio


def times(ratio: float, sign: str = "×") -> str:
    """A ratio as a label says it: 3 significant digits, whole numbers from 100 (`3,956×`)."""
    return tbcsv.figure(ratio) + sign


def speedup_pairs(data: Data, rows=None) -> dict:
    """(series, config) -> Speedup: the rows' own speedup over their machine's cpu row
    (speedup_vs_cpu, the median over the repetitions), the cpu row it is over (cpu_baseline) and
    what differs between the two (speedup_differs), as trainbench pairs them
    (bench/plan/baselines.cpp; tbcsv gives older rows the columns by the same rule). Rows that
    check a path (N replicas on one GPU) have none; predicted rows have the one trainbench wrote
    (the predicted rate over the source run's cpu row, from schema 6; older files' have none). `rows`: the rows to read
    (data.step_rows and data.predicted_rows unless given)."""
    rows = data.step_rows + data.predicted_rows if rows is None else rows
    got = tbcsv.samples(rows, data.key, "speedup_vs_cpu")
    pairs: dict = {}
    for r in rows:
        if data.key(r) in got and (r.get("cpu_baseline") or "").strip():
            pairs.setdefault(data.key(r), (r["cpu_baseline"].strip(),
                                           (r.get("speedup_differs") or "").strip()))
    return {k: Speedup(sample.center, *pairs.get(k, ("", ""))) for k, sample in got.items()
            if sample.center > 0}


def speedups(data: Data, rows=None) -> dict:
    """(series, config) -> samples/s over the machine's cpu samples/s (speedup_pairs' ratios)."""
    return {k: v.ratio for k, v in speedup_pairs(data, rows).items()}


def efficiencies(data: Data, rows=None) -> dict:
    """(series, config) -> scaling efficiency: the rows' own scaling_efficiency (the median over
    the repetitions) of the data-parallel configurations (gpu:N, mpi:N; predicted ones too), over
    N times their one-device row (the baseline column). Rows that check a path have none."""
    rows = data.step_rows + data.predicted_rows if rows is None else rows
    got = tbcsv.samples(rows, data.key, "scaling_efficiency")
    return {k: v.center for k, v in got.items() if k[1].data_parallel and not k[1].checks_only}


def scaling_lines(data: Data) -> dict:
    """(series, panel, precision, batch label) -> {N: efficiency} of the measured gpu:N rows
    against their gpu:1 row (N = 1: 100%); the label names the variant when there is one. The
    efficiencies are the rows' own (efficiencies), on the batch of their baseline row: the same,
    by trainbench's rule."""
    out: dict = {}
    for (s, c), value in sorted(efficiencies(data, data.step_rows).items(),
                                key=lambda kv: kv[0][1].data_parallel):
        if not c.on_gpu:
            continue
        name = " ".join([f"bs:{c.batch}"] + variant_words(c.variant))
        line = out.setdefault((s, c.panel, c.precision, name), {1: 1.0})
        line[c.data_parallel] = value
    return out

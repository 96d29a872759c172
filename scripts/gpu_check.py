#!/usr/bin/env python3
"""The verdicts and headline figures of scripts/gpu_check.sh's steps, read from what each step
left in the check's folder: GoogleTest's and compute-sanitizer's output, and trainbench's CSVs
(through scripts/tbcsv.py, the reader plot.py and compare.py share).

    gpu_check.py gtest LOG STATUS [--timed-out S] [--what NAME] [--ranks N]   test_cuda; test_mpi
    gpu_check.py sanitizer LOG STATUS [--timed-out S]             compute-sanitizer over test_cuda
    gpu_check.py machine CSV [--gpu] [--power SMI.csv]            the machine step's step loop
    gpu_check.py default CSV                                      the default set: gpu:1 beside cpu
    gpu_check.py jobs CSV [--max-runnable K]                      gpu:1/jobs:K and gpu:1/threads:K
    gpu_check.py spanning CSV --device D [--emulated] [--expect N]   gpu:N against its prediction
    gpu_check.py timeline CSV                                     --timeline=on against off
    gpu_check.py peer TRAINBENCH.csv PYTORCH.csv [...]            the PyTorch peer on the GPU
    gpu_check.py killed LOG RANK             mpirun's line naming RANK killed by signal 9, or nothing

The commands that read CSVs also take --status N (the exit status of the step's command),
--timed-out S (the check stopped it after S seconds; empty: it was not stopped) and --log FILE (its output, for the line
that says why it failed). Each command prints the verdict on its first line: `passed`,
`passed: NOTE`, `failed: THE FIRST ERROR` or `skipped: WHY`; then the step's figures as Markdown
lines for check.md (those found before a failure too).
Exit status: 0 with a verdict printed, whatever it is; 2 for bad usage. Standard library only.
"""
from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbcsv  # noqa: E402
import tbdevices  # noqa: E402

PROG = "gpu_check.py"


class Verdict(Exception):
    """A step's outcome decided before its figures are complete: `failed: ...` or `skipped: ...`."""

    def __init__(self, status: str, why: str):
        super().__init__(f"{status}: {why}")
        self.status = status
        self.line = f"{status}: {one_line(why)}"


class NoRows(Verdict):
    """The step's command wrote no CSV to read (it stopped before measuring)."""


def one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def fmt(value: float | None, digits: int = 4) -> str:
    """A figure as the README writes them: thousands separated, about `digits` significant."""
    if value is None:
        return "-"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:,.{digits}g}"


def exact(percent: float | None) -> str:
    """A percentage held against a limit, to a tenth: fmt's two digits showed 92.6% as 93% beside a
    93% bar, and a 5.04% share that failed as 5%."""
    return "-" if percent is None else f"{percent:.1f}"


# GoogleTest colours its lines where its output is a terminal, as under mpirun (Open MPI gives
# each rank a pseudo-terminal).
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def read_lines(path: str | None) -> list[str]:
    if not path:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return COLOUR.sub("", text).splitlines()


def last_words(lines: list[str]) -> str:
    """The line that says why a program stopped: its last error line, else its last line."""
    errors = [x.strip() for x in lines if re.search(r"\b(error|Error|ERROR|abort|Abort|terminate|Killed)\b", x)]
    if errors:
        return errors[-1]
    return next((x.strip() for x in reversed(lines) if x.strip()), "(no output)")


# ---- GoogleTest and compute-sanitizer ------------------------------------------------------------

# A test's name ends at the next `[`: two ranks' `[ RUN ]` can share one line of the log.
RUN = re.compile(r"\[ RUN +\] ([^\s[]+)")
# `[  FAILED  ] Suite.Name (12 ms)`, or for a parameterised test `..., where GetParam() = fp32 (12 ms)`
ENDED = re.compile(r"\[ +(OK|FAILED|SKIPPED) +\] ([^\s,]+)[^[]*?\(\d+ ms\)")
RAN = re.compile(r"\[=+\] (\d+) tests? from .* ran\.")
PASSED = re.compile(r"\[ +PASSED +\] (\d+) tests?")
SKIPPED = re.compile(r"\[ +SKIPPED +\] (\d+) tests?")
FAILURE = re.compile(r"^(\S+:\d+): Failure$")
SKIP_NOTE = re.compile(r"^\S+:\d+: Skipped$")


def gtest_summary(lines: list[str]) -> dict:
    """What a GoogleTest run says about itself; several ranks' runs (mpirun) add up."""
    s = {"ran": 0, "passed": 0, "skipped": 0, "failed": [], "first_failure": "", "skip_reason": "",
         "started": [], "ended": set()}
    for i, raw in enumerate(lines):
        line = raw.strip()
        for m in RUN.finditer(line):  # two ranks' lines can share one line of the log
            s["started"].append(m.group(1))
        for m in ENDED.finditer(line):
            s["ended"].add(m.group(2))
            if m.group(1) == "FAILED" and m.group(2) not in s["failed"]:
                s["failed"].append(m.group(2))
        if m := RAN.search(line):
            s["ran"] += int(m.group(1))
        if m := PASSED.search(line):
            s["passed"] += int(m.group(1))
        if m := SKIPPED.search(line):
            s["skipped"] += int(m.group(1))
        if (m := FAILURE.match(line)) and not s["first_failure"]:
            detail = " ".join(x.strip() for x in lines[i + 1:i + 4] if x.strip() and not x.startswith("["))
            s["first_failure"] = f"{m.group(1)}: {detail}"
        if SKIP_NOTE.match(line) and not s["skip_reason"]:
            s["skip_reason"] = next((x.strip() for x in lines[i + 1:i + 3] if x.strip()), "")
    return s


def gtest_verdict(lines: list[str], status: int, timed_out: int | None, what: str, figures: list[str],
                  ranks: int = 1) -> str:
    s = gtest_summary(lines)
    if timed_out is not None:
        running = [t for t in s["started"] if t not in s["ended"]]
        raise Verdict("failed", f"{what} timed out after {timed_out} s"
                      + (f" in {running[-1]}" if running else "") + f" ({len(s['ended'])} tests had finished)")
    if s["failed"]:
        raise Verdict("failed", f"{len(s['failed'])} failed, first {s['failed'][0]}"
                      + (f": {s['first_failure']}" if s["first_failure"] else ""))
    if status != 0:
        raise Verdict("failed", f"{what} exited {status}: {last_words(lines)}")
    if s["ran"] == 0:
        raise Verdict("failed", f"{what} ran no test: {last_words(lines)}")
    if s["passed"] == 0:
        raise Verdict("skipped", f"every test skipped itself: {s['skip_reason'] or 'no reason given'}")
    each = f" on each of {ranks} ranks" if ranks > 1 else ""
    note = (f"{s['passed'] // ranks} passed" + (f", {s['skipped'] // ranks} skipped ({s['skip_reason']})"
                                                if s["skipped"] else "") + each)
    figures.append(f"- {what}: {note}")
    return f"passed: {note}"


def cmd_gtest(args, figures: list[str]) -> str:
    if not Path(args.log).exists():
        raise Verdict("failed", f"{args.log}: no such file (the step wrote no log)")
    return gtest_verdict(read_lines(args.log), args.status, args.timed_out, args.what, figures, args.ranks)


# compute-sanitizer marks its own lines with a run of '='.
TOOL_LINE = re.compile(r"^=+ ?(.*)$")


def cmd_sanitizer(args, figures: list[str]) -> str:
    lines = read_lines(args.log)
    tool = [m.group(1).strip() for line in lines if (m := TOOL_LINE.match(line.strip()))]
    # A runtime that refuses the tool (gVisor: "Device not supported") says nothing about
    # trainbench: the step is skipped with the tool's own words.
    refused = next((t for t in tool if "not supported" in t.lower()), None)
    if refused:
        raise Verdict("skipped", f"compute-sanitizer: {refused}")
    summary = next((t for t in tool if t.startswith("ERROR SUMMARY")), None)
    errors = int(m.group(1)) if summary and (m := re.search(r"(\d+) error", summary)) else None
    if errors:
        first = next((t for t in tool if t and not t.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY"))), "")
        raise Verdict("failed", f"memcheck found {errors} error(s), the first: {first}")
    verdict = gtest_verdict(lines, args.status, args.timed_out, "test_cuda under memcheck", figures)
    if errors is None:
        raise Verdict("failed", f"compute-sanitizer printed no ERROR SUMMARY: {last_words(lines)}")
    return verdict.replace("passed: ", "passed: 0 memcheck errors, ", 1)


# ---- trainbench's CSVs ---------------------------------------------------------------------------

def table_of(path: str) -> tbcsv.Table:
    try:
        return tbcsv.read_table(path)
    except tbcsv.InputError as e:
        raise NoRows("failed", f"trainbench wrote no rows to read ({e})")


def iterations(path: str) -> list[dict[str, str]]:
    return [r for r in table_of(path).rows if tbcsv.is_iteration(r)]


def device(row: dict[str, str]) -> str:
    return tbcsv.field_of(row, "device")


def one_gpu(row: dict[str, str]) -> bool:
    return tbdevices.is_one_gpu(row.get("device_kind", ""))


def all_cores(row: dict[str, str]) -> bool:
    return tbdevices.is_all_cores(row.get("device_kind", ""))


def timeline_off(row: dict[str, str]) -> bool:
    """A row measured with --timeline=off."""
    return tbdevices.variant_value(row.get("variant", ""), "timeline") == "off"


def configuration(row: dict[str, str]) -> tuple:
    """What a row measured, whether the timeline was on or off."""
    return (tuple(tbcsv.field_of(row, c) for c in tbdevices.NAME_PARTS)
            + (tbdevices.without(row.get("variant", ""), ("timeline",)),))


def workload(row: dict[str, str]) -> str:
    return f"{tbcsv.field_of(row, 'model')}/{tbcsv.field_of(row, 'dataset')}"


def precision(row: dict[str, str]) -> str:
    return tbcsv.field_of(row, "precision")


def why(row: dict[str, str]) -> str:
    """`skipped: <reason>` or `failed: <reason>` of a row that did not measure (its message may
    already begin with its status)."""
    status, message = row.get("status", "?"), (row.get("message") or "").strip()
    return message if message.startswith(f"{status}:") else f"{status}: {message or 'no message'}"


def first_failed(rows: list[dict[str, str]]) -> None:
    bad = next((r for r in rows if r.get("status") == "failed"), None)
    if bad:
        raise Verdict("failed", f"{bad['benchmark']}: {bad.get('message') or 'failed, no message'}")


def median(rows: list[dict[str, str]], column: str) -> float | None:
    values = [v for r in rows if tbcsv.is_ok(r) and (v := tbcsv.number(r, column)) is not None]
    return statistics.median(values) if values else None


def by_benchmark(rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        out.setdefault(r["benchmark"], []).append(r)
    return out


def read_power(path: str | None) -> list[dict[str, float]]:
    """nvidia-smi's samples (--format=csv,noheader,nounits) under a `# name,name,...` line, one
    dict per sample of the fields it could read (an [N/A] or [Not Supported] is left out). Where
    some samples show the GPU busy (utilization.gpu 50% or more), only those: the step loop's own,
    not its start-up."""
    lines = read_lines(path)
    if not lines or not lines[0].startswith("#"):
        return []
    names = [n.strip() for n in lines[0].lstrip("#").split(",")]
    samples = []
    for cells in csv.reader(lines[1:]):
        sample = {}
        for name, cell in zip(names, cells):
            try:
                sample[name] = float(cell.strip())
            except ValueError:
                pass
        if sample:
            samples.append(sample)
    busy = [x for x in samples if x.get("utilization.gpu", 0) >= 50]
    return busy or samples


def median_of(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def no_gpu_here(gpu_rows: list[dict[str, str]]) -> str:
    """The figure of what trainbench did with gpu:1 on a machine without a GPU: its gpu:1 row's
    reason (a repetition that did not measure first); where it wrote none, another GPU row's."""
    gpu1 = [r for r in gpu_rows if one_gpu(r)]
    pick = gpu1 or gpu_rows
    row = next((r for r in pick if not tbcsv.is_ok(r)), pick[0] if pick else None)
    if row is None:
        said = "trainbench wrote no gpu:1 row"
    elif tbcsv.is_ok(row):
        said = f"measured {fmt(median(pick, 'samples_per_s'))} samples/s"
    else:
        said = why(row).removeprefix("skipped: ")
    if row is not None and not gpu1:
        said = f"no gpu:1 row; its {device(row)} row: {said}"
    return f"- trainbench's gpu:1 here: {said}"


def cmd_machine(args, figures: list[str]) -> str:
    # The step loop's measured rows: its gpu:N predictions are other devices' rates.
    rows = [r for r in iterations(args.csv) if not tbcsv.is_predicted(r)]
    first = rows[0] if rows else {}
    figures.append(f"- host `{first.get('host', '?')}`: {first.get('cpu_model', '?')}, {first.get('cores', '?')} "
                   f"cores; trainbench `{first.get('git_commit', '?')}`, {first.get('compiler', '?')}, "
                   f"oneDNN {first.get('onednn', '?')}")
    gpu_rows = [r for r in rows if tbcsv.on_gpu(r)]
    if not args.gpu:
        cpu = [r for r in rows if r.get("backend") == tbdevices.CPU]
        first_failed(cpu)
        ok = [r for r in cpu if tbcsv.is_ok(r)]
        if not ok:
            raise Verdict("failed", "trainbench measured no cpu row")
        figures.append(f"- step loop: {ok[0]['benchmark']} {fmt(median(ok, 'samples_per_s'))} samples/s")
        figures.append(no_gpu_here(gpu_rows))
        # Without a GPU, trainbench must skip its GPU rows saying why: one that failed (a CUDA
        # error) fails the step.
        first_failed(gpu_rows)
        return "passed: no GPU; trainbench trains on the CPU"
    first_failed(gpu_rows)
    ok = [r for r in gpu_rows if tbcsv.is_ok(r)]
    if not ok:
        reason = next((why(r) for r in gpu_rows), "it wrote no gpu:1 row")
        raise Verdict("failed", f"trainbench cannot use the GPU nvidia-smi lists: {reason}")
    r = ok[0]
    context = ", ".join(f"{label} {r[c]}" for c, label in (
        ("driver_version", "driver"), ("cuda_driver_version", "CUDA driver API"), ("cuda_version", "CUDA runtime"),
        ("cudnn_version", "cuDNN"), ("cublas_version", "cuBLAS"), ("nccl_version", "NCCL")) if r.get(c))
    figures.insert(0, f"- GPU: {r.get('gpu_name', '?')} (compute capability {r.get('gpu_cc', '?')}, "
                      f"{r.get('gpu_sms', '?')} SMs, {r.get('gpu_memory_gib', '?')} GiB); {context}")
    figures.append(f"- step loop: {r['benchmark']} {fmt(median(ok, 'samples_per_s'))} samples/s on the wall clock, "
                   f"{fmt(median(ok, 'device_samples_per_s'))} on the device clock; GPU util "
                   f"{fmt(median(ok, 'gpu_util'))}%, SM clock median {fmt(median(ok, 'gpu_sm_clock_median_mhz'))} MHz, "
                   f"throttle {r.get('gpu_throttle') or '-'}")
    smi = read_power(args.power)
    instant_smi = [x["power.draw.instant"] for x in smi if "power.draw.instant" in x]
    average_smi = [x.get("power.draw.average", x.get("power.draw")) for x in smi
                   if "power.draw.average" in x or "power.draw" in x]
    if instant_smi or average_smi:
        figures.append(f"- NVML through nvidia-smi during the step loop (every 100 ms, {len(smi)} samples "
                       f"with the GPU busy): instantaneous power median "
                       f"{fmt(median_of(instant_smi))} W, max {fmt(max(instant_smi, default=None))} W; averaged "
                       f"over 1 s, median {fmt(median_of(average_smi))} W")
    power = median(ok, "gpu_power_w")
    if power is None:
        if instant_smi or average_smi:
            raise Verdict("failed", "trainbench's gpu_power_w is empty while nvidia-smi reads the board's power: "
                                    "its NVML sampling did not run")
        return "passed: NVML gives no power reading here (nvidia-smi neither)"
    instant = "no instantaneous power field" not in r.get("message", "")
    figures.append(f"- trainbench's gpu_power_w: {fmt(power)} W ({'instantaneous' if instant else 'averaged over 1 s'}, "
                   f"{fmt(median(ok, 'gpu_samples'))} samples), {fmt(median(ok, 'energy_j_per_sample'))} J per sample")
    return f"passed: {r.get('gpu_name', 'the GPU')}; gpu_power_w {'instantaneous' if instant else 'averaged'}"


def cmd_default(args, figures: list[str]) -> str:
    rows = iterations(args.csv)
    measured = [r for r in rows if not tbcsv.is_predicted(r)]
    skipped = sorted({f"{device(r)} {precision(r)}: {r.get('message', '').removeprefix('skipped: ')}"
                      for r in measured if r.get("status") == "skipped"})
    first_failed(measured)
    ok_gpu = [r for r in measured if one_gpu(r) and tbcsv.is_ok(r)]
    if not ok_gpu:
        reason = next((why(r) for r in measured if one_gpu(r)), "it wrote no gpu:1 row")
        raise Verdict("failed", f"trainbench measured no gpu:1 row: {reason}")
    figures += ["| workload | precision | cpu samples/s | gpu:1 samples/s (wall clock) | gpu:1 (device clock) "
                "| gpu:1 x cpu |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    cpu = {workload(r) for r in measured if all_cores(r) and tbcsv.is_ok(r)}
    for name, group in by_benchmark(ok_gpu).items():
        w = workload(group[0])
        wall, dev = median(group, "samples_per_s"), median(group, "device_samples_per_s")
        cpu_sps = median([r for r in measured if all_cores(r) and workload(r) == w], "samples_per_s")
        figures.append(f"| {w} | {precision(group[0])} | {fmt(cpu_sps)} | {fmt(wall)} | {fmt(dev)} "
                       f"| {f'{wall / cpu_sps:.2f}x' if wall and cpu_sps else '-'} |")
    figures += [f"- skipped {s}" for s in skipped]
    # The two clocks: a step's device time (CUDA events) lies inside its wall time, so the wall
    # clock's rate is never above the device clock's (2% for the events' rounding).
    for name, group in by_benchmark(ok_gpu).items():
        wall, dev = median(group, "samples_per_s"), median(group, "device_samples_per_s")
        if dev is None:
            raise Verdict("failed", f"{name}: no device clock (device_samples_per_s is empty)")
        if wall is None or wall > 1.02 * dev:
            raise Verdict("failed", f"{name}: the wall clock's {fmt(wall)} samples/s is above the device "
                                    f"clock's {fmt(dev)}: the two clocks are mixed up")
    missing = sorted({workload(r) for r in ok_gpu} - cpu)
    predicted = [r for r in rows if tbcsv.is_predicted(r)]
    over, unmeasured = dp_overhead_table(ok_gpu, predicted, args.dp_limit, figures)
    if over:
        raise Verdict("failed", f"the data-parallel path adds more than {fmt(args.dp_limit)}% to {len(over)} gpu:1 "
                                f"step(s): {'; '.join(over)}")
    if unmeasured:
        raise Verdict("failed", f"no data-parallel overhead measured for {len(unmeasured)} gpu:1 row(s) (no dp= in "
                                f"prediction_inputs: a run with --timeline=off, or a probe that failed): "
                                f"{', '.join(unmeasured)}")
    return (f"passed: {len(by_benchmark(ok_gpu))} gpu:1 rows beside {len(cpu)} cpu rows"
            + (f" (no cpu row for {', '.join(missing)})" if missing else "")
            + f"; the data-parallel path adds at most {fmt(args.dp_limit)}% to each")


def prediction_input(row: dict[str, str], key: str) -> list[float] | None:
    """The numbers of `key=` in a row's prediction_inputs (bench/predict/inputs.hpp: `KEY=V,LOW,HIGH`
    among `;`-separated fields); None where the row has none."""
    for field in (row.get("prediction_inputs") or "").split(";"):
        name, _, values = field.partition("=")
        if name == key:
            try:
                return [float(v) for v in values.split(",") if v]
            except ValueError:
                return None
    return None


def dp_overhead_table(rows: list[dict[str, str]], predicted: list[dict[str, str]], limit: float,
                      figures: list[str]) -> tuple[list[str], list[str]]:
    """Each row's data-parallel overhead (its probe's `dp=` in prediction_inputs) as a share of its
    step on the wall clock, beside the efficiency predicted from the row for the most devices
    (what that overhead costs at scale), as a table under `figures`; the rows above `limit`
    percent, described, and the rows without the figure."""
    figures += ["", "| gpu:1 row | step ms (wall clock) | data-parallel overhead ms (band) | share of the step "
                "| predicted efficiency (devices, link) |", "| --- | ---: | ---: | ---: | ---: |"]
    over, unmeasured = [], []
    for name, group in by_benchmark(rows).items():
        step = median(group, "step_time_s")
        dp = next((v for r in group if (v := prediction_input(r, "dp"))), None)
        scaled = widest_prediction(name, predicted)
        if not step or not dp:
            figures.append(f"| {name} | {fmt(step * 1e3 if step else None)} | not measured | - | {scaled} |")
            unmeasured.append(name)
            continue
        share = 100 * dp[0] / step
        band = f" ({fmt(dp[1] * 1e3)} to {fmt(dp[2] * 1e3)})" if len(dp) >= 3 else ""
        figures.append(f"| {name} | {fmt(step * 1e3)} | {fmt(dp[0] * 1e3)}{band} | {exact(share)}% | {scaled} |")
        if share > limit:
            over.append(f"{name} {exact(share)}%")
    return over, unmeasured


def widest_prediction(source: str, predicted: list[dict[str, str]]) -> str:
    """The scaling efficiency predicted from the one-device row `source` for the most devices, as
    `96% (8, nvlink4)`; `-` where the run predicted nothing from it."""
    made = [r for r in predicted if (r.get("predicted_from") or "").strip() == source
            and tbcsv.number(r, "scaling_efficiency") is not None and tbcsv.number(r, "replicas")]
    if not made:
        return "-"
    widest = max(made, key=lambda r: tbcsv.number(r, "replicas"))
    return (f"{exact(100 * tbcsv.number(widest, 'scaling_efficiency'))}% "
            f"({fmt(tbcsv.number(widest, 'replicas'))}, {widest.get('link') or '?'})")


# The kinds the jobs step runs, by the word its figures name them with.
JOBS_KINDS = {tbdevices.GPU_JOBS: "jobs", tbdevices.GPU_THREADS: "threads"}


def cmd_jobs(args, figures: list[str]) -> str:
    rows = [r for r in iterations(args.csv) if not tbcsv.is_predicted(r)]
    first_failed(rows)
    ran = {"jobs": 0, "threads": 0}
    refused = 0
    for name, group in by_benchmark(rows).items():
        kind = JOBS_KINDS.get(group[0].get("device_kind", ""))
        if kind is None:
            continue
        # K of gpu:1/jobs:K. A refused row has no replicas column (a measurement), so K comes from
        # its device by tbdevices' grammar.
        count = tbdevices.parse(device(group[0])).jobs if kind == "jobs" else None
        ok = [r for r in group if tbcsv.is_ok(r)]
        message = group[0].get("message", "")
        if kind == "jobs" and count > args.max_runnable:
            # The memory bound: so many jobs cannot fit the device, and trainbench must refuse
            # them before starting any.
            if ok or "at most" not in message:
                raise Verdict("failed", f"{name}: the memory bound did not refuse {count} jobs ({why(group[0])})")
            figures.append(f"- {name}: {message.removeprefix('skipped: ')}")
            refused += 1
            continue
        if not ok:
            raise Verdict("failed", f"{name}: {why(group[0])}")
        ran[kind] += 1
        line = f"- {name}: {fmt(median(ok, 'samples_per_s'))} samples/s"
        if kind == "jobs":
            window = median(ok, "jobs_window_s")
            if not window or window <= 0:
                raise Verdict("failed", f"{name}: no common window (jobs_window_s is empty)")
            line += (f" over a common window of {fmt(window)} s; host CPU {fmt(median(ok, 'host_cpu_util_per_job'))} "
                     f"cores per job, GPU util {fmt(median(ok, 'gpu_util'))}%")
        figures.append(line)
    if not ran["jobs"] or not ran["threads"]:
        raise Verdict("failed", f"expected measured gpu:1/jobs:K and gpu:1/threads:K rows, found {ran}")
    if not refused:
        raise Verdict("failed", f"no row of more than {args.max_runnable} jobs: the memory bound was not tried")
    return f"passed: {ran['jobs']} jobs rows and {ran['threads']} threads rows; the memory bound refused {refused}"


def cmd_spanning(args, figures: list[str]) -> str:
    """gpu:N as measured, against what its one-device row predicted for it."""
    rows = iterations(args.csv)
    measured = [r for r in rows if device(r) == args.device and not tbcsv.is_predicted(r)]
    predicted = [r for r in rows if device(r) == args.device and tbcsv.is_predicted(r)]
    ok = [r for r in measured if tbcsv.is_ok(r)]
    figures += [f"| workload | precision | one device samples/s | predicted {args.device} (band; dominant term) "
                f"| link busbw GB/s | measured {args.device} | inside the band |",
                "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    inside = 0
    for name, group in by_benchmark(ok).items():
        w, p, batch = workload(group[0]), precision(group[0]), tbcsv.field_of(group[0], "batch")
        pred = [r for r in predicted if workload(r) == w and precision(r) == p and tbcsv.field_of(r, "batch") == batch
                and tbcsv.is_ok(r)]
        got = median(group, "samples_per_s")
        if not pred:
            figures.append(f"| {w} | {p} | - | no prediction | - | {fmt(got)} | - |")
            continue
        source = [r for r in rows if r["benchmark"] == pred[0].get("predicted_from")]
        low, high = tbcsv.number(pred[0], "samples_per_s_low"), tbcsv.number(pred[0], "samples_per_s_high")
        within = low is not None and high is not None and got is not None and low <= got <= high
        inside += within
        figures.append(f"| {w} | {p} | {fmt(median(source, 'samples_per_s'))} "
                       f"| {fmt(tbcsv.number(pred[0], 'samples_per_s'))} ({fmt(low)} to {fmt(high)}; "
                       f"{pred[0].get('dominant_term') or '-'}) | {fmt(tbcsv.number(pred[0], 'link_busbw_gbps'))} "
                       f"| {fmt(got)} | {'yes' if within else 'no'} |")
    first_failed(rows)
    if args.emulated:
        unmarked = [r["benchmark"] for r in measured if not tbdevices.on_emulated_nodes(r)]
        if unmarked:
            raise Verdict("failed", f"{unmarked[0]}: not marked as emulated nodes (emulated_nodes is empty)")
    if len(by_benchmark(ok)) < args.expect:
        reason = next((why(r) for r in measured if not tbcsv.is_ok(r)), "")
        raise Verdict("failed", f"{len(by_benchmark(ok))} {args.device} rows measured, {args.expect} expected"
                                + (f": {reason}" if reason else ""))
    return f"passed: {len(by_benchmark(ok))} {args.device} rows measured, {inside} inside their predicted band"


def window_rates(rows: list[dict[str, str]]) -> list[float]:
    """The samples/s of every window of the rows (schema 7), else each row's own."""
    return [w for r in rows for w in (tbcsv.window_values(r, "samples_per_s") or [tbcsv.number(r, "samples_per_s")])
            if w]


def cmd_timeline(args, figures: list[str]) -> str:
    rows = [r for r in iterations(args.csv) if not tbcsv.is_predicted(r)]
    first_failed(rows)
    off = [r for r in rows if timeline_off(r) and tbcsv.is_ok(r)]
    on = [r for r in rows if not timeline_off(r) and tbcsv.is_ok(r)]
    pairs = 0
    costly = []
    for name, group in by_benchmark(on).items():
        partner = [r for r in off if configuration(r) == configuration(group[0])]
        if not partner:
            continue
        # Every window of every repetition, pooled: more than a median of a few repetitions.
        with_windows, without = window_rates(group), window_rates(partner)
        marked, unmarked = median_of(with_windows), median_of(without)
        cost = 100 * (1 - marked / unmarked) if marked and unmarked else None
        pairs += 1
        figures.append(f"- {name}: {fmt(marked)} samples/s with the timeline, {fmt(unmarked)} without (medians of "
                       f"{len(with_windows)} and {len(without)} windows of {len(group)} and {len(partner)} "
                       f"repetitions): the timeline costs {exact(cost)}% of the step")
        if cost is None or cost > args.limit:
            costly.append(f"{name} {exact(cost)}%")
    if not pairs:
        reason = next((why(r) for r in rows if not tbcsv.is_ok(r)), "")
        raise Verdict("failed", "no benchmark has both a --timeline=on and a --timeline=off row"
                                + (f": {reason}" if reason else ""))
    if costly:
        raise Verdict("failed", f"the timeline costs more than {fmt(args.limit)}% of the step: {'; '.join(costly)}")
    return f"passed: {pairs} workloads with and without the timeline, each at most {fmt(args.limit)}% apart"


def cmd_peer(args, figures: list[str]) -> str:
    if len(args.csvs) % 2:
        raise Verdict("failed", "peer: give TRAINBENCH.csv PYTORCH.csv pairs")
    sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
    from pytorch_report import plain_name  # noqa: E402  (the names both tools' rows share)
    figures += ["| benchmark | trainbench samples/s | PyTorch samples/s | trainbench / PyTorch "
                "| on the device clock | PyTorch's setting |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    pairs = 0
    failed = []
    for tb_path, pt_path in zip(args.csvs[::2], args.csvs[1::2]):
        tb, pt = iterations(tb_path), iterations(pt_path)
        failed += [r for r in tb + pt if r.get("status") == "failed"]
        for name, group in by_benchmark([{**r, "benchmark": plain_name(r)} for r in tb]).items():
            other = [r for r in pt if plain_name(r) == name]
            a, b = median(group, "samples_per_s"), median(other, "samples_per_s")
            da, db = median(group, "device_samples_per_s"), median(other, "device_samples_per_s")
            if a is None or b is None:
                continue
            pairs += 1
            setting = next((r["peer_settings"] for r in other if r.get("peer_settings")), "-")
            figures.append(f"| {name} | {fmt(a)} | {fmt(b)} | {a / b:.2f}x "
                           f"| {f'{da / db:.2f}x' if da and db else '-'} | {setting} |")
    first_failed(failed)
    if not pairs:
        raise Verdict("failed", "no benchmark has rows of both trainbench and PyTorch")
    return f"passed: {pairs} benchmarks measured on both sides"


CSV_COMMANDS = ("machine", "default", "jobs", "spanning", "timeline", "peer")


def decide(args, figures: list[str]) -> str:
    """The command's verdict, with what the step's command itself said: a timeout or an exit
    status the rows do not explain fails the step."""
    command = globals()[f"cmd_{args.command}"]
    try:
        verdict = command(args, figures)
    except NoRows as v:
        if args.command in CSV_COMMANDS and args.status and args.timed_out is None:
            verdict = f"failed: {args.what} exited {args.status}: {last_words(read_lines(args.log))}"
        else:
            verdict = v.line
    except Verdict as v:
        verdict = v.line
    if args.command not in CSV_COMMANDS:
        return verdict
    if args.timed_out is not None:
        cause = verdict.removeprefix("failed: ") if verdict.startswith("failed") else ""
        return f"failed: {args.what} timed out after {args.timed_out} s" + (f"; {cause}" if cause else "")
    if args.status and not verdict.startswith("failed"):
        return f"failed: {args.what} exited {args.status}: {last_words(read_lines(args.log))}"
    return verdict


# mpirun's line for a rank that a signal ended: "process rank 1 with PID 9699 on node n1 exited on
# signal 9 (Killed)". Its output can hold NUL bytes (PMIx's messages on the GPU machine), which
# made grep take the log for binary and find nothing.
KILLED_RANK = r"rank {rank} .*(signal 9|Killed)"


def killed_line(path: str, rank: int) -> str:
    """The first line of the log that names rank `rank` ended by signal 9; empty when none does."""
    pattern = re.compile(KILLED_RANK.format(rank=rank))
    for line in read_lines(path):
        line = line.replace("\0", "")
        if pattern.search(line):
            return line.strip()
    return ""


def ended_row(path: str, device_name: str) -> str:
    """The benchmark of the CSV's first measured row of `device_name` that ended ok (its run was
    over before the step's kill); empty when there is none, or no CSV to read."""
    try:
        rows = iterations(path)
    except NoRows:
        return ""
    return next((r["benchmark"] for r in rows
                 if r.get("measurement") == "measured" and device(r) == device_name and tbcsv.is_ok(r)), "")


def seconds(text: str) -> int | None:
    """--timed-out's value: seconds, or empty for a command that was not stopped."""
    return int(text) if text else None


def main() -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("gtest", "sanitizer"):
        s = sub.add_parser(name)
        s.add_argument("log")
        s.add_argument("status", type=int)
        s.add_argument("--timed-out", type=seconds, default=None)
        s.add_argument("--what", default="test_cuda" if name == "sanitizer" else "the tests")
        s.add_argument("--ranks", type=int, default=1, help="MPI ranks whose output the log holds")
    killed = sub.add_parser("killed", help="print mpirun's line that names a rank killed by signal 9 (none: nothing)")
    killed.add_argument("log")
    killed.add_argument("rank", type=int)
    ended = sub.add_parser("ended", help="print the benchmark of a measured ok row of DEVICE in the CSV (none: nothing)")
    ended.add_argument("csv")
    ended.add_argument("device")
    parsers = {name: sub.add_parser(name) for name in CSV_COMMANDS}
    for name, s in parsers.items():
        if name == "peer":
            s.add_argument("csvs", nargs="+")
        else:
            s.add_argument("csv")
        s.add_argument("--status", type=int, default=0, help="exit status of the step's command")
        s.add_argument("--timed-out", type=seconds, default=None, help="the check stopped the command after S s")
        s.add_argument("--log", help="the command's output")
        s.add_argument("--what", default="trainbench", help="the command, as the verdict names it")
    parsers["machine"].add_argument("--gpu", action="store_true", help="the step loop ran on this machine's GPU")
    parsers["machine"].add_argument("--power", help="nvidia-smi's power samples taken during the step loop")
    parsers["jobs"].add_argument("--max-runnable", type=int, default=16,
                                 help="a jobs:K row with more jobs must be refused by the memory bound")
    parsers["default"].add_argument("--dp-limit", type=float, default=5,
                                    help="percent of a gpu:1 step the data-parallel path may add")
    parsers["timeline"].add_argument("--limit", type=float, default=3,
                                     help="percent of a step the timeline may cost")
    parsers["spanning"].add_argument("--device", required=True, help="the measured data-parallel device, e.g. gpu:2")
    parsers["spanning"].add_argument("--emulated", action="store_true", help="its rows must be marked emulated nodes")
    parsers["spanning"].add_argument("--expect", type=int, default=1, help="rows of the device that must be ok")
    args = p.parse_args()
    if args.command == "killed":
        print(killed_line(args.log, args.rank))
        return 0
    if args.command == "ended":
        print(ended_row(args.csv, args.device))
        return 0
    figures: list[str] = []
    print(one_line(decide(args, figures)))
    for line in figures:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

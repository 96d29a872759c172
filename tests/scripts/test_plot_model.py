"""What the charts and the report are drawn from (scripts/tbplot/model.py and summary.py), read
without drawing, on rows made by hand: the order of configurations and panels, series and machine
names, the clock note, which rows carry a speedup or a scaling efficiency and how they are
written, and the summary table's columns, lines and cells. Each case is small enough to say by
hand what it must give."""
import pytest

import tbcsv
import tbdevices
from conftest import data_file
from tbplot.model import (Config, Data, clock_notes, config_of, config_sort_key, efficiencies,
                          host_cpu, panel_title, scaling_lines, short_cpu, speedup_pairs, times)
from tbplot.summary import cell, fmt_rate, summarise

GPU, CPU = data_file("report_gpu_v4.csv"), data_file("report_cpu_v4.csv")


def config(device, precision="fp32", batch="100", variant=""):
    return Config("train", "mlp", "mnist", device, precision, batch, variant)


def row(device, variant="", host="node", precision="fp32", batch="100", **cells) -> dict:
    """One ok repetition as schema 6 writes it, its kind's facts from tbdevices."""
    measurement = "predicted" if "predicted" in variant else "measured"
    kind = tbdevices.kind_of(device, variant, measurement=measurement)
    return {"schema_version": "6", "benchmark": f"train/mlp/mnist/{device}/{precision}/bs:{batch}",
            "kind": "train", "model": "mlp", "dataset": "mnist", "device": device,
            "precision": precision, "batch": batch, "variant": variant,
            "device_kind": kind.name, "backend": kind.backend,
            "data_parallel": str(kind.data_parallel or ""), "measurement": measurement,
            "run_type": "iteration", "status": "ok", "host": host, "framework": "trainbench",
            "samples_per_s": "1000", **{k: str(v) for k, v in cells.items()}}


def data_of(*rows) -> Data:
    return Data([tbcsv.Table("in-memory.csv", list(rows[0]), list(rows))])


# ---- configurations and panels ---------------------------------------------------------------

def test_configurations_sort_by_device_variant_precision_then_batch_by_number():
    # Plain first, then measured variants (fewer flags first, then by flag), predictions last;
    # fp32, tf32, fp16, bf16 and then any other precision; batch 8 before 128, a batch that is
    # not a number last.
    want = [config("cpu"),
            config("gpu:1", batch="8"), config("gpu:1", batch="128"), config("gpu:1", batch="?"),
            config("gpu:1", "tf32"), config("gpu:1", "fp16"), config("gpu:1", "bf16"),
            config("gpu:1", "fp8"),
            config("gpu:1", variant="cuda_graph"),
            config("gpu:1", variant="data_on_device/cuda_graph"),
            config("gpu:1", variant="predicted:nvlink4")]
    assert sorted(reversed(want), key=config_sort_key) == want


def test_a_variant_with_blanks_around_it_is_the_same_configuration():
    # A hand-edited CSV: the variant is the row's identity, as field_of reads the others.
    plain = {"benchmark": "train/mlp/mnist/gpu:1/fp32/bs:100", "variant": "data_on_device"}
    assert config_of({**plain, "variant": " data_on_device "}) == config_of(plain)


def test_a_panel_title_names_a_kind_other_than_training_and_leaves_out_empty_parts():
    assert panel_title(("train", "mlp", "mnist")) == "mlp · mnist"
    assert panel_title(("epochs", "lenet5", "cifar10")) == "lenet5 · cifar10"
    assert panel_title(("infer", "mlp", "")) == "infer · mlp"


# ---- series, machine names and the clock note ------------------------------------------------

def test_a_machine_at_two_commits_is_two_series_unless_latest_and_peer_rows_never_split_it():
    older = {**row("cpu"), "git_commit": "aaa", "timestamp": "2026-11-01T00:00:00Z"}
    newer = {**row("gpu:1"), "git_commit": "2465388134a9b1c2d3e4",
             "timestamp": "2026-11-02T00:00:00Z"}
    assert data_of(older, newer).series == ["node @ aaa", "node @ 2465388134a9"]
    assert Data([tbcsv.Table("in-memory.csv", list(older), [older, newer])],
                latest=True).series == ["node"]
    pytorch = {**row("gpu:1"), "framework": "pytorch", "git_commit": ""}
    assert data_of(older, pytorch).series == ["node", "node · pytorch"]


def test_a_machine_is_named_by_its_hardware_once():
    vm = row("cpu", host="vm", cpu_model="Intel(R) Xeon(R) Processor", cores="2")
    gpu_vm = row("gpu:1", host="vm", cpu_model="Intel(R) Xeon(R) Processor", cores="16",
                 gpu_name="NVIDIA H100 80GB HBM3")
    alone = data_of(vm)
    assert alone.machine_name("vm") == "vm (Intel Xeon, 2 cores)"
    # One host name, two machines: the series says the hardware already.
    two = data_of(vm, gpu_vm)
    assert two.series == ["vm (Intel Xeon, 2 cores)", "vm (H100 80GB HBM3)"]
    assert [two.machine_name(s) for s in two.series] == two.series
    # Two of them with the same GPU: the CPU and its cores tell them apart.
    eight = {**gpu_vm, "cores": "8", "benchmark": "train/mlp/mnist/gpu:1/bf16/bs:100"}
    assert data_of(gpu_vm, eight).series == ["vm (H100 80GB HBM3, Intel Xeon, 16 cores)",
                                             "vm (H100 80GB HBM3, Intel Xeon, 8 cores)"]


def test_a_cpu_is_named_without_its_clock_and_trademarks_and_its_cores_only_when_known():
    gold = "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"
    assert short_cpu(gold, "8") == "Intel Xeon Gold 6230, 8 cores"
    assert short_cpu(gold) == "Intel Xeon Gold 6230"
    assert short_cpu("") == "CPU ?"
    assert host_cpu(gold, " 16 ") == "16-core Intel Xeon Gold 6230"
    assert host_cpu(gold, "") == "Intel Xeon Gold 6230"


def test_the_clock_note_names_the_ok_rows_on_the_device_clock_four_at_most():
    device = [row(f"gpu:{n}", clock=tbcsv.CLOCK_DEVICE) for n in (1, 2, 3, 4, 5, 6)]
    failed = {**row("gpu:7", clock=tbcsv.CLOCK_DEVICE), "status": "failed"}
    data = data_of(row("cpu"), *device, failed)
    wall, said = clock_notes(data, data.rows)
    assert wall == "Samples/s on the wall clock (host gaps included; a GPU step ends when the " \
                   "device is done)."
    assert said.endswith(": node: mlp · mnist gpu:1 fp32, mlp · mnist gpu:2 fp32, mlp · mnist "
                         "gpu:3 fp32, mlp · mnist gpu:4 fp32 and 2 more."), said
    assert clock_notes(data, [row("cpu")]) == [wall]


# ---- speedups and scaling --------------------------------------------------------------------

def test_a_speedup_is_shown_where_it_is_positive_predictions_included():
    cpu = "train/mlp/mnist/cpu/fp32/bs:100"
    pairs = speedup_pairs(data_of(
        row("gpu:1", speedup_vs_cpu=0, cpu_baseline=cpu),
        row("gpu:2", speedup_vs_cpu=3, cpu_baseline=cpu),
        row("gpu:8", "predicted:nvlink4", speedup_vs_cpu=11, cpu_baseline=cpu)))
    assert [(c.device, p.ratio) for (_, c), p in pairs.items()] == [("gpu:2", 3), ("gpu:8", 11)]


def test_a_ratio_is_written_whole_from_100_and_with_3_digits_below():
    assert [times(v) for v in (3956.2, 999.7, 550.0, 7.44)] == [
        "3,956×", "1,000×", "550×", "7.44×"]


def test_only_devices_of_their_own_sharing_gradients_have_a_scaling_efficiency():
    # A file that carries a figure where trainbench writes none (one GPU, replicas sharing one)
    # still shows none there.
    data = data_of(row("gpu:1", scaling_efficiency=1), row("gpu:2", scaling_efficiency=0.9),
                   row("gpu:2", "shared_device", scaling_efficiency=0.5))
    assert [(c.device, c.variant, e) for (_, c), e in efficiencies(data).items()] == [
        ("gpu:2", "", 0.9)]


def test_gpu_scaling_lines_start_at_one_device_and_leave_mpi_out(tbcsv_mod):
    lines = scaling_lines(Data([tbcsv_mod.read_table(GPU)]))
    mlp = ("fixture-host", ("train", "mlp", "mnist"), "fp32", "bs:100")
    assert lines[mlp] == {1: 1.0, 2: pytest.approx(0.71)}
    assert len(lines) == 4  # mlp and resnet152, fp32 and bf16; the gpu:8 prediction is not one
    # The CPU machine's mpi:2 rows have an efficiency, but no GPU line.
    cpu = Data([tbcsv_mod.read_table(CPU)])
    assert {c.device for _, c in efficiencies(cpu)} == {"mpi:2"}
    assert scaling_lines(cpu) == {}


def test_a_scaling_line_runs_from_the_fewest_devices_whatever_the_rows_order():
    # The chart draws a line through its points in this order.
    lines = scaling_lines(data_of(row("gpu:4", scaling_efficiency=0.8),
                                  row("gpu:2", scaling_efficiency=0.9)))
    line, = lines.values()
    assert list(line.items()) == [(1, 1.0), (2, 0.9), (4, 0.8)]


def test_a_variants_scaling_is_a_line_of_its_own():
    lines = scaling_lines(data_of(row("gpu:2", scaling_efficiency=0.9),
                                  row("gpu:2", "data_on_device", scaling_efficiency=0.8)))
    panel = ("train", "mlp", "mnist")
    assert lines == {("node", panel, "fp32", "bs:100"): {1: 1.0, 2: 0.9},
                     ("node", panel, "fp32", "bs:100 data_on_device"): {1: 1.0, 2: 0.8}}


# ---- the report's summary table --------------------------------------------------------------

def test_columns_follow_the_device_order_not_the_names():
    s = summarise(data_of(row("cpu"), row("gpu:10"), row("gpu:2"), row("gpu:1", "cuda_graph"),
                          row("gpu:1", "optimizer:adam/data_on_device")))
    assert [name for metric, name in s.columns if metric == "samples/s"] == [
        "cpu", "gpu:1 cuda_graph", "gpu:1 optimizer:adam data_on_device", "gpu:2", "gpu:10"]


def test_lines_follow_the_machines_the_models_and_trainbenchs_precisions():
    rows = [row("cpu", host=h, precision=p) for h in ("zeta", "alpha") for p in ("bf16", "fp32")]
    rows += [{**row("cpu", host="zeta", precision="bf16"), "model": "lenet5",
              "dataset": "cifar10", "benchmark": "train/lenet5/cifar10/cpu/bf16/bs:100"}]
    rows.insert(0, rows.pop())  # lenet5 ran first
    s = summarise(data_of(*rows))
    assert s.several_series
    assert [(ln.series, ln.config.model, ln.config.precision) for ln in s.lines] == [
        ("zeta", "lenet5", "bf16"), ("zeta", "mlp", "fp32"), ("zeta", "mlp", "bf16"),
        ("alpha", "mlp", "fp32"), ("alpha", "mlp", "bf16")]
    assert not summarise(data_of(row("cpu"), row("gpu:1"))).several_series


def test_a_workloads_lines_run_from_the_smaller_batch_to_the_larger():
    # ResNet-152 224 trains batch 8 on the CPU and 128 on the GPU: two lines, 8 first (as text,
    # "128" came before "8").
    s = summarise(data_of(row("gpu:1", batch="128"), row("cpu", batch="8")))
    assert [ln.config.batch for ln in s.lines] == ["8", "128"]


def test_only_prediction_columns_are_named_predictions():
    assert summarise(data_of(row("cpu"), row("gpu:2"))).predicted == set()
    s = summarise(data_of(row("gpu:1"), row("gpu:8", "predicted:nvlink4", comm_share=0.2)))
    assert s.predicted == {"gpu:8 predicted (nvlink4)"}


def test_peak_memory_is_the_devices_on_a_gpu_and_the_processs_on_the_cpu():
    s = summarise(data_of(row("cpu", peak_rss_bytes=2 ** 30, mem_peak_bytes=5 * 2 ** 30),
                          row("gpu:1", peak_rss_bytes=3 * 2 ** 30, mem_peak_bytes=2 ** 31),
                          row("gpu:2", peak_rss_bytes=3 * 2 ** 30)))
    line, = s.lines
    assert line.values[("peak memory (GiB)", "cpu")] == 2 ** 30
    assert line.values[("peak memory (GiB)", "gpu:1")] == 2 ** 31
    # A GPU row without the device's peak has none: its process's is not the GPU's memory.
    assert ("peak memory (GiB)", "gpu:2") not in line.values


def test_a_rate_is_written_whole_from_100_and_with_3_digits_below():
    assert [fmt_rate(v) for v in (17560.4, 999.7, 100.0, 99.94, 4.125)] == [
        "17,560", "1,000", "100", "99.9", "4.12"]


def test_comm_share_is_a_data_parallel_figure_and_zero_is_written():
    s = summarise(data_of(row("gpu:1", comm_share=0), row("gpu:2", comm_share=0)))
    line, = s.lines
    assert [name for metric, name in s.columns if metric == "comm share (%)"] == ["gpu:2"]
    assert cell(s, line, ("comm share (%)", "gpu:2")) == "0.0"

// The table of the CSV's columns (columns.hpp), in schema version 7's order: version 2's
// columns, then the NVML ones (telemetry/), then version 4's identity, load and link columns,
// then version 5's device clock, prediction band, jobs window and nodes, then version 6's kind
// facts, comparisons, verdicts and prediction inputs, then version 7's instruction sets,
// prediction model and windows.
#include "bench/output/columns.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "telemetry/sampler.hpp"

namespace tb::bench {
namespace {

std::string accuracy(double v) { return v < 0 ? "" : number(v); }        // -1: a regression task has none
std::string time_to_target(double v) { return v < 0 ? "" : number(v); }  // -1: never reached
std::string throttle(double mask) { return telemetry::throttle_reason_names(std::uint64_t(mask)); }

constexpr ColumnKind I = ColumnKind::Identity, M = ColumnKind::Counter, X = ColumnKind::Context;

// Schema version 2's columns: what the row is, and what its timed steps and epochs measured.
std::vector<Column> run_columns() {
  return {
      {"schema_version", I},
      {"benchmark", I},
      {"kind", I},
      {"model", I},
      {"dataset", I},
      {"data_source", I},
      {"device", I},
      {"threads", I},
      {"precision", I},
      {"batch", I},
      {"optimizer", I},
      {"framework", I},
      {"run_type", I},
      {"aggregate", I},
      {"repetition", I},
      {"status", I},
      {"message", I},
      {"iterations", I},
      {"warmup_steps", I},
      {"step_time_s", M},
      {"samples_per_s", M, true, nullptr, true, "samples/s"},
      {"params", I},
      {"train_flops_per_sample", I},
      {"model_tflops", M, true, nullptr, true, "TFLOP/s"},
      {"peak_gflops", M},
      {"utilisation", M, true, nullptr, true, "util %", 100},
      {"host_cpu_s_per_step", M},
      {"host_cpu_util", M, true, nullptr, true, "CPU cores"},
      {"peak_rss_bytes", M},
      {"loss_first", M},
      {"loss_last", M, true, nullptr, true, "loss"},
      {"data_s_per_step", M},
      {"forward_s_per_step", M},
      {"backward_s_per_step", M},
      {"update_s_per_step", M},
      {"data_wait_s_per_step", M},
      {"loader_workers", I},
      {"epoch", M},
      {"train_loss", M},
      {"val_loss", M, true, nullptr, true, "val loss"},
      {"train_acc", M, false, accuracy},
      {"val_acc", M, true, accuracy, true, "val acc %", 100},
      {"elapsed_s", M, true, nullptr, true, "elapsed s"},
      {"target_acc", I},
      {"time_to_target_s", M, false, time_to_target},
      {"wall_step_time_s", M},
  };
}

// Version 2's columns of memory, data parallelism and the machine.
std::vector<Column> machine_columns() {
  return {
      {"cuda_graph", I},
      {"data_on_device", I},
      {"mem_peak_bytes", M},
      {"mem_reserved_bytes", M},
      {"mem_limit_bytes", M},
      {"mem_weights_bytes", M},
      {"mem_grads_bytes", M},
      {"mem_optimizer_bytes", M},
      {"mem_activations_bytes", M},
      {"mem_workspace_bytes", M},
      {"mem_data_bytes", M},
      {"mem_context_bytes", M},
      {"loss_scale", M},
      {"skipped_steps", M},
      {"peak_source", I},
      {"ranks", I},
      {"replicas", M},
      {"comm_s_per_step", M},
      {"comm_share", M},
      {"allreduce_bytes_per_step", M},
      {"busbw_gbps", M},
      {"comm_overlap", M},
      {"scaling_efficiency", M},
      {"host", X},
      {"os", X},
      {"cpu_model", X},
      {"cores", X},
      {"compiler", X},
      {"onednn", X},
      {"benchmark_lib", X},
      {"git_commit", X},
      {"timestamp", X},
      {"gpu_name", X},
      {"gpu_cc", X},
      {"gpu_sms", X},
      {"gpu_memory_gib", X},
      {"gpu_clock_mhz", X},
      {"gpu_memory_clock_mhz", X},
      {"driver_version", X},
      {"cuda_version", X},
      {"cudnn_version", X},
      {"cublas_version", X},
      {"nccl_version", X},
  };
}

// Version 3: what nvidia-smi shows, sampled by NVML over the timed steps.
std::vector<Column> nvml_columns() {
  return {
      {"gpu_util", M, true, nullptr, true, "GPU util %"},
      {"gpu_mem_used_bytes", M},
      {"gpu_sm_clock_min_mhz", M},
      {"gpu_sm_clock_median_mhz", M},
      {"gpu_power_w", M},
      {"energy_j_per_sample", M},
      {"gpu_temp_max_c", M},
      {"gpu_throttle", M, false, throttle, false},
      {"gpu_samples", M},
      {"host_cpu_util_per_job", M},
      {"cuda_driver_version", X},
  };
}

// Version 4: what makes a row what it is (variant, shared device, measured or predicted), the
// machine's load and sgemm rate, and the link a prediction assumed.
std::vector<Column> identity_columns() {
  return {
      {"variant", I},         {"load_avg_1m", M},    {"sgemm_gflops", X},  {"peak_spread", M},
      {"shared_device", I},   {"measurement", I},    {"link", I},          {"link_busbw_gbps", M},
      {"link_latency_us", M}, {"predicted_from", I}, {"peer_settings", I},
  };
}

// Version 5: every samples_per_s is on the wall clock, the device clock has columns of its own;
// a prediction's band and the term that dominates it; the window jobs ran in together; the
// hosts of the ranks.
std::vector<Column> wall_clock_columns() {
  return {
      {"device_step_time_s", M},
      {"device_samples_per_s", M},
      {"samples_per_s_low", M},
      {"samples_per_s_high", M},
      {"dominant_term", I},
      {"jobs_window_s", M},
      {"nodes", I},
      {"rank_hosts", I},
      {"emulated_nodes", I},
  };
}

// Version 6: a row says what it is (its kind's facts, what it is compared with, what the run
// concluded of it) and keeps what a prediction needs; predictions over two levels of links.
std::vector<Column> kind_columns() {
  return {
      {"device_kind", I},        {"backend", I},        {"data_parallel", I},     {"baseline", I},
      {"cpu_baseline", I},       {"speedup_vs_cpu", M}, {"speedup_differs", I},   {"verdicts", I},
      {"prediction", I},         {"algorithm", I},      {"network", I},           {"network_busbw_gbps", M},
      {"network_latency_us", M}, {"network_nics", M},   {"prediction_inputs", I},
  };
}

// Version 7: the instruction sets oneDNN's kernels and trainbench's own CPU kernels ran; the
// version of the prediction model a predicted row was made by; the samples/s of consecutive
// windows of a repetition's timed steps.
std::vector<Column> isa_columns() {
  return {
      {"onednn_isa", X},
      {"cpu_isa", X},
      {"prediction_model", I},
      {"window_samples_per_s", I},
  };
}

}  // namespace

std::string number(double value) { return fmt::format("{:.6g}", value); }

const std::vector<Column>& columns() {
  static const std::vector<Column> all = [] {
    std::vector<Column> out;
    for (const auto& part : {run_columns(), machine_columns(), nvml_columns(), identity_columns(), wall_clock_columns(),
                             kind_columns(), isa_columns()})
      out.insert(out.end(), part.begin(), part.end());
    return out;
  }();
  return all;
}

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Column& c : columns()) out.emplace_back(c.name);
    return out;
  }();
  return names;
}

namespace {
const Column* find(std::string_view name) {
  for (const Column& c : columns())
    if (name == c.name) return &c;
  return nullptr;
}
}  // namespace

bool is_counter(std::string_view name) {
  const Column* c = find(name);
  return c && c->kind == ColumnKind::Counter;
}

bool shown_on_console(std::string_view name) {
  const Column* c = find(name);
  return c && c->on_console;
}

std::map<std::string, std::string> counter_cells(const std::map<std::string, double>& counters, bool aggregate) {
  std::map<std::string, std::string> cells;
  for (const auto& [name, value] : counters) {
    const Column* c = find(name);
    // A counter that is no column is a misspelt name (or a column not yet in the table): it
    // would be lost from every row, so it stops the run where it is written.
    if (!c || c->kind != ColumnKind::Counter)
      throw Error(
          fmt::format("counter '{}' is not a measurement column of the CSV: spell it as bench/output/columns.cpp does, "
                      "or add it there "
                      "and to results/SCHEMA.md",
                      name));
    if (aggregate && !c->aggregates) continue;
    cells[name] = c->format ? c->format(value) : number(value);
  }
  return cells;
}

const std::vector<Verdict>& verdicts() {
  static const std::vector<Verdict> all{
      {"loaded", "the machine's load average when the row started was above the threads this run used so far + 1"},
      {"above_peak", "utilisation above 1: the peak it is over was measured low, or the FLOP count is high"},
      {"slower_than_fp32", "a GPU precision meant to be faster than fp32 was slower than the fp32 row of the run"},
      {"not_scaling", "a data-parallel row with fewer samples/s than its one-device baseline"},
      {"inside_band", "a measured or replayed row inside the band of the prediction made for it in the run"},
      {"outside_band", "a measured or replayed row outside the band of the prediction made for it in the run"},
      {"replicas_differ", "the replicas' weights differed after the timed steps (the row failed)"},
  };
  return all;
}

std::string verdicts_cell(const std::vector<std::string>& words) {
  std::string cell;
  for (const std::string& w : words) {
    const bool known = std::any_of(verdicts().begin(), verdicts().end(), [&](const Verdict& v) { return w == v.word; });
    if (!known) throw Error(fmt::format("verdict '{}' is not in verdicts() (bench/output/columns.cpp)", w));
    if (cell.find(w) == std::string::npos) cell += (cell.empty() ? "" : "+") + w;
  }
  return cell;
}

std::string skip_message(const std::string& reason) { return std::string(kSkippedPrefix) + reason; }

bool is_skip(std::string_view message) { return message.substr(0, kSkippedPrefix.size()) == kSkippedPrefix; }

}  // namespace tb::bench

// Writing the CSV, and refusing to mix schemas in one file.
#include "bench/csv.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"

namespace tb::bench {

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> columns{
      "schema_version", "benchmark", "kind", "model", "dataset", "data_source", "device", "threads",
      "precision", "batch", "optimizer", "framework", "run_type", "aggregate", "repetition", "status", "message",
      "iterations", "warmup_steps", "step_time_s", "samples_per_s", "params", "train_flops_per_sample",
      "model_tflops", "peak_gflops", "utilisation", "host_cpu_s_per_step", "host_cpu_util",
      "peak_rss_bytes", "loss_first", "loss_last", "data_s_per_step", "forward_s_per_step",
      "backward_s_per_step", "update_s_per_step", "data_wait_s_per_step", "loader_workers", "epoch",
      "train_loss", "val_loss", "train_acc", "val_acc", "elapsed_s", "target_acc", "time_to_target_s",
      "wall_step_time_s", "cuda_graph", "data_on_device", "mem_peak_bytes", "mem_reserved_bytes", "mem_limit_bytes",
      "mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes", "mem_workspace_bytes",
      "mem_data_bytes", "mem_context_bytes", "loss_scale", "skipped_steps", "peak_source", "ranks", "replicas",
      "comm_s_per_step", "comm_share", "allreduce_bytes_per_step", "busbw_gbps", "comm_overlap",
      "scaling_efficiency", "host", "os",
      "cpu_model", "cores", "compiler", "onednn", "benchmark_lib", "git_commit", "timestamp", "gpu_name", "gpu_cc",
      "gpu_sms", "gpu_memory_gib", "gpu_clock_mhz", "gpu_memory_clock_mhz", "driver_version", "cuda_version",
      "cudnn_version", "cublas_version", "nccl_version"};
  return columns;
}

std::string csv_escape(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

CsvWriter::CsvWriter(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  const std::string header = fmt::format("{}", fmt::join(csv_columns(), ","));
  bool write_header = true;
  std::error_code ec;
  if (fs::exists(path, ec) && fs::file_size(path, ec) > 0) {
    std::ifstream in(path);
    std::string first;
    std::getline(in, first);
    if (!first.empty() && first.back() == '\r') first.pop_back();
    if (first != header) {
      const auto fields = csv_split(first);
      const bool ours = !fields.empty() && fields[0] == "schema_version";
      throw InputError(fmt::format(
          "--csv={}: the file exists with {} ({} columns); trainbench schema {} has {} columns. "
          "Nothing was written: give a new file name, or move the old file away.",
          path, ours ? "another trainbench schema" : "a header that is not trainbench's", fields.size(),
          kSchemaVersion, csv_columns().size()));
    }
    write_header = false;
  } else if (auto parent = fs::path(path).parent_path(); !parent.empty()) {
    fs::create_directories(parent, ec);
  }
  out_.open(path, std::ios::app);
  if (!out_) throw InputError(fmt::format("--csv={}: cannot open the file for writing", path));
  if (write_header) out_ << header << '\n' << std::flush;
}

void CsvWriter::write_row(const Row& row) {
  for (const auto& [column, value] : row)
    TB_CHECK(std::find(csv_columns().begin(), csv_columns().end(), column) != csv_columns().end(),
             "CSV row has a value for '{}', which is not a column", column);
  std::string line;
  for (std::size_t i = 0; i < csv_columns().size(); ++i) {
    if (i) line += ',';
    auto it = row.find(csv_columns()[i]);
    if (it != row.end()) line += csv_escape(it->second);
  }
  out_ << line << '\n' << std::flush;  // an interrupted run keeps every finished row
}

}  // namespace tb::bench

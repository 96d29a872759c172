// The columns every row of a benchmark shares, and the log every row goes through (rows.hpp).
#include "bench/output/rows.hpp"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/backends.hpp"
#include "engine/core/stats.hpp"
#include "engine/parallel/world.hpp"

namespace tb::bench {
namespace {

// The GPU a row ran on (`gpu`: a GPU row), or for a CPU row the machine's first GPU (empty
// without one).
void add_gpu_context(Row& row, const BenchInfo& info, bool gpu, const MachineContext& machine) {
  const GpuInventory& inv = gpu_inventory();
  const int ordinal = gpu ? info.gpu_ordinal : 0;
  if (ordinal < 0 || ordinal >= int(inv.devices.size())) return;
  const GpuDevice& g = inv.devices[std::size_t(ordinal)];
  row.gpu_name = g.name;
  row.gpu_cc = g.cc;
  row.gpu_sms = g.sms;
  row.gpu_memory_gib = fmt::format("{:.1f}", g.memory_gib);
  row.gpu_clock_mhz = g.clock_mhz;
  row.gpu_memory_clock_mhz = g.memory_clock_mhz;
  row.driver_version = machine.nvidia_driver;
  row.cuda_driver_version = g.cuda_driver;
  row.cuda_version = g.cuda;
  row.cudnn_version = g.cudnn;
  row.cublas_version = g.cublas;
  row.nccl_version = g.nccl;
  if (gpu && !info.precision.empty() && info.skip_reason.empty())
    row.peak_source = gpu_peak(ordinal, info.precision).source;
}

}  // namespace

Row identity_row(const BenchInfo& info, const MachineContext& machine) {
  const bool gpu = info.gpu();
  Row row;
  row.schema_version = std::string(kSchemaVersion);  // assigning the char* gave GCC 12 a false -Wrestrict
  row.benchmark = info.name;
  row.kind = kind_name(info.kind);
  row.model = info.model;
  row.dataset = info.dataset;
  row.data_source = info.data_source;
  row.device = info.device;
  row.threads = info.threads;
  row.precision = info.precision;
  row.batch = info.batch;
  row.optimizer = optimizer_name(info.optimizer.kind);
  row.framework = "trainbench";
  row.warmup_steps = info.warmup_steps;
  row.params = info.cost.parameters;
  row.train_flops_per_sample = info.cost.train_flops_per_sample();
  row.loader_workers = info.loader.workers;
  if (info.target_accuracy > 0) row.target_acc = info.target_accuracy;
  row.host = machine.host;
  row.os = machine.os;
  row.cpu_model = machine.cpu_model;
  row.cores = machine.cores;
  row.compiler = machine.compiler;
  row.onednn = machine.onednn;
  row.onednn_isa = machine.onednn_isa;
  row.cpu_isa = machine.cpu_isa;
  row.benchmark_lib = machine.benchmark_lib;
  row.git_commit = machine.git_commit;
  row.timestamp = machine.timestamp;
  const parallel::World& world = parallel::world();
  row.ranks = world.size;
  if (world.size > 1) {
    row.nodes = world.nodes;
    row.rank_hosts = fmt::format("{}", fmt::join(world.rank_hosts, ";"));
  }
  if (info.emulated_nodes) row.emulated_nodes = 1;
  row.variant = info.variant;
  row.measurement = "measured";
  if (info.device_kind) {
    if (std::string_view(info.device_kind->check_word) == "shared_device") row.shared_device = 1;
    row.device_kind = info.device_kind->name;
    row.backend = gpu ? "gpu" : "cpu";
  }
  if (info.data_parallel > 0) row.data_parallel = info.data_parallel;
  if (info.replay) {  // the steps stand for the saved row's, on its backend
    row.measurement = "replayed";
    row.backend = info.replay->backend;
    row.predicted_from = info.replay->of;
  }
  row.baseline = info.baseline;
  row.cpu_baseline = info.cpu_baseline;
  row.speedup_differs = info.speedup_differs;
  if (machine.sgemm_gflops > 0) row.sgemm_gflops = machine.sgemm_gflops;
  if (gpu) row.cuda_graph = int(info.cuda_graph);
  // A cpu row says it only where its training data was resident (the PyTorch peer's are).
  if (gpu || (info.data_on_device && info.kind == Kind::Train)) row.data_on_device = int(info.data_on_device);
  add_gpu_context(row, info, gpu, machine);
  if (!gpu && info.skip_reason.empty())
    row.peak_source = "oneDNN sgemm 1024^3 measured at start-up (median of 5 rounds)";
  return row;
}

void set_epoch_figures(Row& figures, const EpochRecord& r) {
  figures.epoch = double(r.epoch);
  figures.train_loss = r.train_loss;
  figures.val_loss = r.val_loss;
  figures.train_acc = r.train_acc;
  figures.val_acc = r.val_acc;
  figures.elapsed_s = r.elapsed_s;
}

void RowLog::keep(const Row& row) {
  // Kept as the CSV holds it, so that what is made of the run's rows (the summary, the console,
  // the aggregates, predictions) is what a reader of the file would make of them.
  rows_.push_back(as_written(row));
  if (csv_) csv_->write_row(rows_.back());
}

Row RowLog::repetition(const BenchInfo& info, const Measurement& measured, std::vector<std::string> lines) {
  Row row = identity_row(info, machine_);
  row.run_type = "iteration";
  row.repetition = repetitions_[info.name]++;
  set_measurement(row, measured);
  keep(row);
  for (std::string& line : lines) lines_[info.name].push_back(std::move(line));
  return rows_.back();
}

namespace {

// Google Benchmark's statistics of one counter over repetitions: mean, median, the sample
// standard deviation and the coefficient of variation (stddev / mean, a ratio in every column).
double statistic(const std::string& name, std::vector<double> v) {
  double mean = 0;
  for (double x : v) mean += x / double(v.size());
  if (name == "mean") return mean;
  if (name == "median") return tb::median(v);
  double squares = 0;
  for (double x : v) squares += (x - mean) * (x - mean);
  const double stddev = std::sqrt(squares / double(v.size() - 1));
  return name == "stddev" ? stddev : mean != 0 ? stddev / mean : 0;
}

}  // namespace

void RowLog::aggregates(const BenchInfo& info) {
  std::vector<Row> ok;  // copies: keep() below moves rows_
  for (const Row* r : rows_of(info.name))
    if (is_ok_iteration(*r)) ok.push_back(*r);
  if (ok.size() < 2) return;
  for (const char* name : {"mean", "median", "stddev", "cv"}) {
    Row row = identity_row(info, machine_);
    row.run_type = "aggregate";
    row.aggregate = name;
    row.status = "ok";
    row.iterations = std::int64_t(ok.size());
    // Every number counter all the repetitions hold.
    for (const Column& c : columns()) {
      if (c.kind != ColumnKind::Counter || c.type != CellType::Number || !c.aggregates) continue;
      std::vector<double> values;
      for (const Row& r : ok)
        if (const Number v = r.*c.number; v && !std::isnan(*v)) values.push_back(*v);
      if (values.size() == ok.size()) row.*c.number = statistic(name, values);
    }
    keep(row);
  }
}

void RowLog::epoch(const BenchInfo& info, const EpochRecord& r) {
  notes_ << fmt::format("  {} epoch {}: train loss {:.4f}{}, val loss {:.4f}{}, {:.1f} s\n", info.name, r.epoch,
                        r.train_loss, r.train_acc < 0 ? "" : fmt::format(" acc {:.4f}", r.train_acc), r.val_loss,
                        r.val_acc < 0 ? "" : fmt::format(" acc {:.4f}", r.val_acc), r.elapsed_s)
         << std::flush;
  Row row = identity_row(info, machine_);
  row.run_type = "epoch";
  Measurement m{.steps = r.steps};
  set_epoch_figures(m.figures, r);
  m.figures.samples_per_s = double(r.steps * info.batch) / r.train_s;
  set_measurement(row, m);
  keep(row);
}

const std::vector<std::string>& RowLog::notes_of(const std::string& benchmark) const {
  static const std::vector<std::string> none;
  const auto it = lines_.find(benchmark);
  return it == lines_.end() ? none : it->second;
}

std::vector<const Row*> RowLog::rows_of(const std::string& benchmark) const {
  std::vector<const Row*> out;
  for (const Row& r : rows_)
    if (r.benchmark == benchmark) out.push_back(&r);
  return out;
}

}  // namespace tb::bench

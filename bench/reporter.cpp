// Console and CSV reporting of each run.
#include "bench/reporter.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/columns.hpp"
#include "engine/backends.hpp"
#include "engine/parallel/predict.hpp"
#include "engine/parallel/world.hpp"

namespace tb::bench {
namespace {

// The counter columns among `counters`, formatted, into `row` (aggregate: a mean, median, ... row).
void add_counters(Row& row, const std::map<std::string, double>& counters, bool aggregate) {
  for (auto& [column, cell] : counter_cells(counters, aggregate)) row[column] = std::move(cell);
}

// The GPU a row ran on, or for a CPU row the machine's first GPU (empty without one).
void add_gpu_context(Row& row, const BenchInfo& info, const MachineContext& machine) {
  const GpuInventory& inv = gpu_inventory();
  const int ordinal = info.gpu() ? info.gpu_ordinal : 0;
  if (ordinal < 0 || ordinal >= int(inv.devices.size())) return;
  const GpuDevice& g = inv.devices[std::size_t(ordinal)];
  row["gpu_name"] = g.name;
  row["gpu_cc"] = g.cc;
  row["gpu_sms"] = std::to_string(g.sms);
  row["gpu_memory_gib"] = fmt::format("{:.1f}", g.memory_gib);
  row["gpu_clock_mhz"] = std::to_string(g.clock_mhz);
  row["gpu_memory_clock_mhz"] = std::to_string(g.memory_clock_mhz);
  row["driver_version"] = machine.nvidia_driver;
  row["cuda_driver_version"] = g.cuda_driver;
  row["cuda_version"] = g.cuda;
  row["cudnn_version"] = g.cudnn;
  row["cublas_version"] = g.cublas;
  row["nccl_version"] = g.nccl;
  if (info.gpu() && !info.precision.empty() && info.skip_reason.empty())
    row["peak_source"] = gpu_peak(ordinal, info.precision).source;
}

}  // namespace

Row identity_row(const BenchInfo& info, const MachineContext& machine) {
  Row row{{"schema_version", kSchemaVersion},
          {"benchmark", info.name},
          {"kind", kind_name(info.kind)},
          {"model", info.model},
          {"dataset", info.dataset},
          {"data_source", info.data_source},
          {"device", info.device},
          {"threads", std::to_string(info.threads)},
          {"precision", info.precision},
          {"batch", std::to_string(info.batch)},
          {"optimizer", optimizer_name(info.optimizer.kind)},
          {"framework", "trainbench"},
          {"warmup_steps", std::to_string(info.warmup_steps)},
          {"params", std::to_string(info.cost.parameters)},
          {"train_flops_per_sample", number(info.cost.train_flops_per_sample())},
          {"loader_workers", std::to_string(info.loader.workers)},
          {"target_acc", info.target_accuracy > 0 ? number(info.target_accuracy) : ""},
          {"host", machine.host},
          {"os", machine.os},
          {"cpu_model", machine.cpu_model},
          {"cores", std::to_string(machine.cores)},
          {"compiler", machine.compiler},
          {"onednn", machine.onednn},
          {"benchmark_lib", machine.benchmark_lib},
          {"git_commit", machine.git_commit},
          {"timestamp", machine.timestamp}};
  const parallel::World& world = parallel::world();
  row["ranks"] = std::to_string(world.size);
  if (world.size > 1) {
    row["nodes"] = std::to_string(world.nodes);
    row["rank_hosts"] = fmt::format("{}", fmt::join(world.rank_hosts, ";"));
  }
  if (info.emulated_nodes) row["emulated_nodes"] = "1";
  row["variant"] = info.variant;
  row["measurement"] = "measured";
  if (info.shared_device) row["shared_device"] = "1";
  if (machine.sgemm_gflops > 0) row["sgemm_gflops"] = number(machine.sgemm_gflops);
  if (info.gpu()) {
    row["cuda_graph"] = std::to_string(int(info.cuda_graph));
    row["data_on_device"] = std::to_string(int(info.data_on_device));
  }
  add_gpu_context(row, info, machine);
  if (!info.gpu() && info.skip_reason.empty())
    row["peak_source"] = "oneDNN sgemm 1024^3 measured at start-up (median of 5 rounds)";
  return row;
}

DisplayOptions display_options(const Flags& flags) {
  DisplayOptions d;
  d.format = flags.benchmark_format;
  const std::string& c = flags.benchmark_color;
  const bool forced = c == "true" || c == "yes" || c == "1" || c == "always";
  const bool refused = c == "false" || c == "no" || c == "0" || c == "never";
  const char* term = std::getenv("TERM");
  // Under mpirun a rank's stdout is a pseudo-terminal whatever the launcher's own stdout is, so
  // a terminal there says nothing: no colour unless asked for.
  const bool terminal = ::isatty(STDOUT_FILENO) && term && std::string(term) != "dumb" && !std::getenv("NO_COLOR") &&
                        parallel::world().size == 1;
  d.colour = d.format == "console" && (forced || (!refused && terminal));
  return d;
}

Reporter::Reporter(const Harness& harness, const MachineContext& machine, CsvWriter* csv, DisplayOptions display)
    : harness_(harness), machine_(machine), csv_(csv), display_(std::move(display)) {
  if (display_.format == "json") structured_ = std::make_unique<benchmark::JSONReporter>();
  if (display_.format == "csv") structured_ = std::make_unique<benchmark::CSVReporter>();
  for (const BenchInfo& b : harness_.benchmarks()) name_width_ = std::max(name_width_, b.name.size() + 8);
}

bool Reporter::ReportContext(const Context& context) {
  std::cerr << describe(machine_);
  if (structured_) {
    structured_->SetOutputStream(&GetOutputStream());
    structured_->SetErrorStream(&GetErrorStream());
    return structured_->ReportContext(context);
  }
  print_basic_context(GetErrorStream(), context);
  return true;
}

// Google Benchmark's context (date, CPU caches, load), where a Google Benchmark built without
// NDEBUG (Debian's libbenchmark) adds "Library was built as DEBUG. Timings may be affected.":
// true of its own loop's bookkeeping, and of no figure here, which trainbench times itself (the
// wall clock of the timed steps, handed to Google Benchmark as manual time). Said so instead.
void Reporter::print_basic_context(std::ostream& out, const Context& context) {
  std::ostringstream theirs;
  PrintBasicContext(&theirs, context);
  std::istringstream lines(theirs.str());
  bool debug = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("Library was built as DEBUG") != std::string::npos) {
      debug = true;
      continue;
    }
    out << line << "\n";
  }
  if (debug)
    out << "Note: this Google Benchmark library is a debug build (its own warning: \"timings may be affected\"). "
           "That touches its bookkeeping around the timed loop, not the steps: every figure trainbench prints or "
           "writes comes from trainbench's own wall clock of the timed steps.\n";
}

void Reporter::Finalize() {
  if (structured_) structured_->Finalize();
}

std::ostream& Reporter::notes_stream() { return structured_ ? GetErrorStream() : GetOutputStream(); }

namespace {

// A console cell: plain digits (no SI suffixes): whole numbers from 1000, else four significant
// figures (scientific notation only below 0.001).
std::string console_number(double v) {
  if (std::abs(v) >= 1000) return fmt::format("{:.0f}", v);
  return fmt::format("{:.4g}", v);
}

// A run's name as trainbench names its benchmark, with the aggregate: Google Benchmark's own
// suffixes (/manual_time: every train row hands it trainbench's wall clock; /iterations:1) say
// nothing to a reader.
std::string display_name(const benchmark::BenchmarkReporter::Run& run) {
  const std::string& name = run.run_name.function_name;
  return run.run_type == benchmark::BenchmarkReporter::Run::RT_Aggregate ? name + "_" + run.aggregate_name : name;
}

// The Time column: a train row's step as trainbench timed it (step_time_s: the wall clock of the
// timed steps), in the row's unit; Google Benchmark's own time elsewhere (a run of epochs).
double shown_time(const benchmark::BenchmarkReporter::Run& run) {
  const auto step = run.counters.find("step_time_s");
  if (step == run.counters.end() || run.run_name.function_name.rfind("train/", 0) != 0 ||
      run.aggregate_unit == benchmark::kPercentage)  // cv: a ratio, not a time
    return run.GetAdjustedRealTime();
  return step->second.value * benchmark::GetTimeUnitMultiplier(run.time_unit);
}

constexpr const char* kGreen = "\033[32m";
constexpr const char* kRed = "\033[31m";
constexpr const char* kReset = "\033[0m";

}  // namespace

void Reporter::print_console(const std::vector<Run>& runs) {
  std::ostream& out = GetOutputStream();
  // The console columns these runs have: a new header where they differ from the last one's.
  std::vector<const Column*> shown;
  for (const Column& c : columns())
    if (c.on_console && std::any_of(runs.begin(), runs.end(), [&](const Run& r) { return r.counters.count(c.name); }))
      shown.push_back(&c);
  auto header_of = [](const Column* c) { return std::string(*c->console_name ? c->console_name : c->name); };
  std::string header = fmt::format("{:<{}} {:>12} {:>10}", "Benchmark", name_width_, "Time", "Iterations");
  for (const Column* c : shown)
    header += fmt::format(" {:>{}}", header_of(c), std::max<std::size_t>(10, header_of(c).size()));
  if (header != last_header_ && !shown.empty()) {
    out << std::string(header.size(), '-') << "\n" << header << "\n" << std::string(header.size(), '-') << "\n";
    last_header_ = header;
  }
  for (const Run& run : runs) {
    const std::string name = display_name(run);
    const std::string colour_on = display_.colour ? (run.error_occurred ? kRed : kGreen) : "";
    const std::string colour_off = display_.colour ? kReset : "";
    if (run.error_occurred) {
      out << fmt::format("{}{:<{}} FAILED: {}{}\n", colour_on, name, name_width_, run.error_message, colour_off);
      continue;
    }
    std::string line = fmt::format("{}{:<{}}{} {:>9.4g} {:<2} {:>10}", colour_on, name, name_width_, colour_off,
                                   shown_time(run), benchmark::GetTimeUnitString(run.time_unit), run.iterations);
    for (const Column* c : shown) {
      const auto it = run.counters.find(c->name);
      const std::size_t width = std::max<std::size_t>(10, header_of(c).size());
      const bool blank = it == run.counters.end() || (c->format && c->format(it->second.value).empty());
      line += fmt::format(" {:>{}}", blank ? "" : console_number(it->second.value * c->console_scale), width);
    }
    out << line;
    if (!run.report_label.empty()) out << "  " << run.report_label;
    out << "\n";
  }
  out << std::flush;
}

void Reporter::report_skipped(const Run& run) {
  const BenchInfo* info = harness_.find(run.run_name.function_name);
  const std::string scope = info ? info->skip_scope : run.run_name.function_name;
  if (!skipped_said_.insert(scope).second) return;
  std::string reason = run.error_message.substr(kSkippedPrefix.size());
  // "gpu:1: no CUDA device", "cpu:64 needs 64 cores": the scope is said once.
  if (reason.starts_with(scope + ": "))
    reason.erase(0, scope.size() + 2);
  else if (reason.starts_with(scope + " "))
    reason.erase(0, scope.size() + 1);
  if (std::ostream& out = notes_stream(); out) out << fmt::format("skipped {}: {}\n", scope, reason) << std::flush;
}

void Reporter::ReportRuns(const std::vector<Run>& runs) {
  std::vector<Run> shown;
  for (const Run& r : runs) {
    if (r.error_occurred && is_skip(r.error_message)) {
      report_skipped(r);
      if (!structured_) continue;
    }
    shown.push_back(r);
  }
  if (!shown.empty()) {
    if (structured_)
      structured_->ReportRuns(shown);
    else
      print_console(shown);
  }
  if (!GetOutputStream() && !stdout_closed_) {
    // SIGPIPE is ignored (defer_signals_during_writes): a reader that went away is said here.
    stdout_closed_ = true;
    if (!csv_) {
      std::cerr << "trainbench: error: stdout was closed (its reader, such as `head`, went away) and no --csv file "
                   "records the rows: stopping\n";
      std::exit(1);
    }
    std::cerr << fmt::format(
        "trainbench: note: stdout was closed (its reader, such as `head`, went away); the run "
        "goes on, every row goes to --csv={}\n",
        csv_->path());
  }
  for (const Run& run : runs) {
    if (run.error_occurred) {
      if (is_skip(run.error_message))
        ++skipped_;
      else
        ++failed_;
    }
    const std::string& name = run.run_name.function_name;
    const bool early = run.run_type == Run::RT_Iteration && run.repetition_index < written_early_[name];
    if (!early) keep(csv_row(run));
  }
  for (const Run& run : runs) written_early_.erase(run.run_name.function_name);
  report_predictions(runs);
}

namespace {

// A prediction and the measured row it is for share this key: the workload, precision, batch,
// the variant but for emulated_nodes (where the ranks ran, not what they ran) and the device.
std::string prediction_key(const BenchInfo& info, const std::string& device) {
  std::string variant = info.variant;
  for (const char* where : {"/emulated_nodes", "emulated_nodes"})
    if (const auto at = variant.find(where); at != std::string::npos) variant.erase(at, std::strlen(where));
  return fmt::format("{}/{}/{}/{}/{}/{}", info.model, info.dataset, info.precision, info.batch, variant, device);
}

// The rate a benchmark's runs give: the median aggregate where there are repetitions.
double run_rate(const std::vector<benchmark::BenchmarkReporter::Run>& runs, const std::string& name) {
  double rate = -1;
  for (const auto& r : runs) {
    if (r.run_name.function_name != name || r.error_occurred) continue;
    const auto it = r.counters.find("samples_per_s");
    if (it == r.counters.end()) continue;
    const bool median = r.run_type == benchmark::BenchmarkReporter::Run::RT_Aggregate && r.aggregate_name == "median";
    if (median || r.run_type == benchmark::BenchmarkReporter::Run::RT_Iteration) rate = it->second.value;
    if (median) break;
  }
  return rate;
}

}  // namespace

void Reporter::report_predictions(const std::vector<Run>& runs) {
  std::set<std::string> seen;
  for (const Run& run : runs) {
    const std::string& name = run.run_name.function_name;
    const BenchInfo* info = harness_.find(name);
    if (!info || !seen.insert(name).second || info->kind != Kind::Train || info->parallel != parallel::Mode::None)
      continue;
    // With repetitions Google Benchmark reports the iterations, then the aggregates: predict
    // once, from the median.
    const bool has_median = std::any_of(runs.begin(), runs.end(), [&](const Run& r) {
      return r.run_name.function_name == name && r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
    });
    if (run.repetitions > 1 && !has_median) continue;
    if (const double rate = run_rate(runs, name); rate > 0) {
      const std::vector<PredictedRow> predicted = harness_.predictions(*info, rate);
      if (!predicted.empty() && !assumptions_said_) {
        notes_stream() << fmt::format("  predictions assume: {}\n", parallel::kPredictionAssumptions);
        assumptions_said_ = true;
      }
      for (const PredictedRow& p : predicted) {
        Row row = identity_row(*info, machine_);
        const std::string variant = info->variant.empty() ? "" : info->variant + "/";
        row["benchmark"] = fmt::format("{}/{}/{}/{}/{}/bs:{}/{}predicted:{}", kind_name(info->kind), info->model,
                                       info->dataset, p.device, info->precision, info->batch, variant, p.link.name);
        row["device"] = p.device;
        row["variant"] = variant + "predicted:" + p.link.name;
        row["measurement"] = "predicted";
        row["link"] = p.link.name;
        row["predicted_from"] = info->name;
        row["run_type"] = "iteration";
        row["status"] = "ok";
        row["iterations"] = std::to_string(p.timeline.steps);
        row["message"] = fmt::format("predicted from {}'s timeline over {} ({}); assumes {}", info->name, p.link.name,
                                     p.link.source, parallel::kPredictionAssumptions);
        const parallel::Prediction& q = p.prediction;
        add_counters(row,
                     {{"samples_per_s", q.samples_per_s},
                      {"step_time_s", q.step_s},
                      {"scaling_efficiency", q.efficiency},
                      {"comm_s_per_step", q.exposed_comm_s},
                      {"comm_share", q.exposed_comm_s / q.step_s},
                      {"allreduce_bytes_per_step", p.timeline.gradient_bytes()},
                      {"replicas", double(q.devices)},
                      {"link_busbw_gbps", p.link.busbw_gbps},
                      {"link_latency_us", p.link.latency_us}},
                     false);
        keep(row);
        predicted_[prediction_key(*info, p.device)].push_back(Made{info->name, info->threads, p.link, q.samples_per_s});
        notes_stream() << fmt::format(
            "  predicted {} over {} ({:.3g} GB/s, {:.3g} us): {:.0f} samples/s, {:.0f}% efficiency, exposed "
            "communication {:.3g} ms of {:.3g} ms per step\n",
            p.device, p.link.name, p.link.busbw_gbps, p.link.latency_us, q.samples_per_s, 100 * q.efficiency,
            q.exposed_comm_s * 1e3, q.comm_s * 1e3);
      }
    }
  }
  for (const Run& run : runs) {
    const BenchInfo* info = harness_.find(run.run_name.function_name);
    if (info && info->kind == Kind::Train && info->parallel != parallel::Mode::None && !info->shared_device &&
        run.run_type == Run::RT_Iteration && !run.error_occurred && run.repetition_index <= 0)
      compare_with_prediction(*info, run_rate(runs, info->name));
  }
}

// Each prediction of the measured row's device made from a row of its per-replica threads (mpi:2
// of one thread per rank from cpu:1, not from cpu), named with the row and the link it assumed.
void Reporter::compare_with_prediction(const BenchInfo& info, double samples_per_s) {
  const auto it = predicted_.find(prediction_key(info, info.device));
  if (it == predicted_.end() || samples_per_s <= 0) return;
  for (const Made& made : it->second)
    if (made.threads == info.threads)
      notes_stream() << fmt::format(
          "  {}: measured {:.0f} samples/s; predicted {:.0f} from {} over {} ({:.3g} GB/s, {:.3g} us): measured / "
          "predicted = {:.2f}\n",
          info.name, samples_per_s, made.samples_per_s, made.from, made.link.name, made.link.busbw_gbps,
          made.link.latency_us, samples_per_s / made.samples_per_s);
}

void Reporter::keep(const Row& row) {
  rows_.push_back(row);
  if (csv_) csv_->write_row(row);
}

void Reporter::report_repetition(const BenchInfo& info, const Repetition& r) {
  Row row = identity_row(info, machine_);
  row["run_type"] = "iteration";
  row["repetition"] = std::to_string(written_early_[info.name]);
  row["status"] = r.failed ? "failed" : "ok";
  row["message"] = r.message;
  row["iterations"] = std::to_string(r.iterations);
  if (!r.failed) add_counters(row, r.counters, false);
  keep(row);
  ++written_early_[info.name];
}

void Reporter::report_epoch(const BenchInfo& info, const EpochRecord& r) {
  notes_stream() << fmt::format("  {} epoch {}: train loss {:.4f}{}, val loss {:.4f}{}, {:.1f} s\n", info.name, r.epoch,
                                r.train_loss, r.train_acc < 0 ? "" : fmt::format(" acc {:.4f}", r.train_acc),
                                r.val_loss, r.val_acc < 0 ? "" : fmt::format(" acc {:.4f}", r.val_acc), r.elapsed_s)
                 << std::flush;
  Row row = identity_row(info, machine_);
  row["run_type"] = "epoch";
  row["status"] = "ok";
  row["iterations"] = std::to_string(r.steps);
  const std::map<std::string, double> counters{{"epoch", double(r.epoch)},
                                               {"train_loss", r.train_loss},
                                               {"val_loss", r.val_loss},
                                               {"train_acc", r.train_acc},
                                               {"val_acc", r.val_acc},
                                               {"elapsed_s", r.elapsed_s},
                                               {"samples_per_s", double(r.steps * info.batch) / r.train_s}};
  add_counters(row, counters, false);
  keep(row);
}

Row Reporter::csv_row(const Run& run) const {
  const BenchInfo* info = harness_.find(run.run_name.function_name);
  BenchInfo unknown;
  if (!info) info = &unknown;
  Row row = identity_row(*info, machine_);
  const bool aggregate = run.run_type == Run::RT_Aggregate;
  const bool skipped = run.error_occurred && is_skip(run.error_message);
  row["run_type"] = aggregate ? "aggregate" : "iteration";
  row["aggregate"] = aggregate ? run.aggregate_name : "";
  row["repetition"] = aggregate ? "" : std::to_string(run.repetition_index < 0 ? 0 : run.repetition_index);
  row["status"] = !run.error_occurred ? "ok" : skipped ? "skipped" : "failed";
  // An ok row's message is its notes (a label: why a precision was slower than fp32, say).
  row["message"] = run.error_occurred ? run.error_message : run.report_label;
  row["iterations"] = std::to_string(run.iterations);
  if (run.error_occurred) return row;
  std::map<std::string, double> counters;
  for (const auto& [name, counter] : run.counters) counters[name] = counter.value;
  add_counters(row, counters, aggregate);
  return row;
}

}  // namespace tb::bench

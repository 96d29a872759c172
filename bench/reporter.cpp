// Console and CSV reporting of each run.
#include "bench/reporter.hpp"

#include <iostream>
#include <set>

#include <fmt/format.h>

#include "bench/registry.hpp"

namespace tb::bench {
namespace {

// Counters shown on the console; the CSV gets all of them.
const std::set<std::string> kShown{"samples_per_s", "model_tflops", "utilisation", "host_cpu_util", "loss_last"};

std::string number(double v) { return fmt::format("{:.6g}", v); }

}  // namespace

bool Reporter::ReportContext(const Context& context) {
  std::cerr << describe(machine_);
  return ConsoleReporter::ReportContext(context);
}

void Reporter::ReportRuns(const std::vector<Run>& runs) {
  std::vector<Run> shown = runs;
  for (Run& r : shown) {
    for (auto it = r.counters.begin(); it != r.counters.end();)
      it = kShown.count(it->first) ? std::next(it) : r.counters.erase(it);
  }
  ConsoleReporter::ReportRuns(shown);
  for (const Run& run : runs) {
    if (run.error_occurred) {
      if (run.error_message.rfind("skipped:", 0) == 0) ++skipped_;
      else ++failed_;
    }
    if (csv_) csv_->write_row(csv_row(run));
  }
}

std::vector<std::string> Reporter::csv_row(const Run& run) const {
  const BenchInfo* info = find_benchmark(run.run_name.function_name);
  BenchInfo unknown;
  if (!info) info = &unknown;
  const bool aggregate = run.run_type == Run::RT_Aggregate;
  auto counter = [&](const char* name) -> std::string {
    auto it = run.counters.find(name);
    if (run.error_occurred || it == run.counters.end()) return "";
    return number(it->second.value);
  };
  const bool skipped = run.error_occurred && run.error_message.rfind("skipped:", 0) == 0;
  const std::string status = !run.error_occurred ? "ok" : skipped ? "skipped" : "failed";
  return {kSchemaVersion,
          info->name,
          info->kind,
          info->model,
          info->dataset,
          info->data_source,
          info->device,
          std::to_string(info->threads),
          info->precision,
          std::to_string(info->batch),
          optimizer_name(info->optimizer.kind),
          aggregate ? "aggregate" : "iteration",
          aggregate ? run.aggregate_name : "",
          aggregate ? "" : std::to_string(run.repetition_index < 0 ? 0 : run.repetition_index),
          status,
          run.error_message,
          std::to_string(run.iterations),
          std::to_string(info->warmup_steps),
          counter("step_time_s"),
          counter("samples_per_s"),
          std::to_string(info->cost.parameters),
          number(info->cost.train_flops_per_sample()),
          counter("model_tflops"),
          counter("peak_gflops"),
          counter("utilisation"),
          counter("host_cpu_s_per_step"),
          counter("host_cpu_util"),
          counter("peak_rss_bytes"),
          counter("loss_first"),
          counter("loss_last"),
          counter("data_s_per_step"),
          counter("forward_s_per_step"),
          counter("backward_s_per_step"),
          counter("update_s_per_step"),
          machine_.host,
          machine_.os,
          machine_.cpu_model,
          std::to_string(machine_.cores),
          machine_.compiler,
          machine_.onednn,
          machine_.benchmark_lib,
          machine_.git_commit,
          machine_.timestamp};
}

}  // namespace tb::bench

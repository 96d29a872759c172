// Console and CSV reporting of each run.
#include "bench/output/reporter.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/output/columns.hpp"
#include "bench/output/rows.hpp"
#include "bench/predict/predict.hpp"
#include "engine/backends.hpp"
#include "engine/parallel/world.hpp"

namespace tb::bench {

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

Reporter::Reporter(Harness& harness, RowLog& rows, DisplayOptions display)
    : harness_(harness), rows_(rows), display_(std::move(display)) {
  if (display_.format == "json") structured_ = std::make_unique<benchmark::JSONReporter>();
  if (display_.format == "csv") structured_ = std::make_unique<benchmark::CSVReporter>();
  for (const BenchInfo& b : harness_.benchmarks()) name_width_ = std::max(name_width_, b.name.size() + 8);
}

bool Reporter::ReportContext(const Context& context) {
  std::cerr << describe(rows_.machine());
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
    if (!rows_.csv()) {
      std::cerr << "trainbench: error: stdout was closed (its reader, such as `head`, went away) and no --csv file "
                   "records the rows: stopping\n";
      std::exit(1);
    }
    std::cerr << fmt::format(
        "trainbench: note: stdout was closed (its reader, such as `head`, went away); the run "
        "goes on, every row goes to --csv={}\n",
        rows_.csv()->path());
  }
  for (const Run& run : runs) {
    if (run.error_occurred) {
      if (is_skip(run.error_message))
        ++skipped_;
      else
        ++failed_;
    }
  }
  // Every repetition that ran went to the CSV through the harness (the last one now); Google
  // Benchmark's aggregates and the skipped rows go from here.
  if (!runs.empty()) harness_.finish_repetition(runs.front().run_name.function_name);
  for (const Run& run : runs)
    if (run.run_type == Run::RT_Aggregate || (run.error_occurred && is_skip(run.error_message)))
      rows_.keep(csv_row(run));
  report_predictions(runs);
}

namespace {

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

// The predicted rows of each one-device train benchmark in `runs` (bench/predict/predict.hpp), written
// and shown after it; and each measured multi-device row beside the predictions made for it.
void Reporter::report_predictions(const std::vector<Run>& runs) {
  std::set<std::string> seen;
  for (const Run& run : runs) {
    const std::string& name = run.run_name.function_name;
    const BenchInfo* info = harness_.find(name);
    if (!info || !seen.insert(name).second || info->kind != Kind::Train || info->run() != RunKind::OneReplica) continue;
    // With repetitions Google Benchmark reports the iterations, then the aggregates: predict
    // once, from the median.
    const bool has_median = std::any_of(runs.begin(), runs.end(), [&](const Run& r) {
      return r.run_name.function_name == name && r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
    });
    if (run.repetitions > 1 && !has_median) continue;
    const double rate = run_rate(runs, name);
    if (rate <= 0) continue;
    const std::vector<PredictedRow> predicted = harness_.predictor().predict(*info, rate, rows_.machine());
    if (!predicted.empty() && !assumptions_said_) {
      notes_stream() << fmt::format("  predictions assume: {}\n", parallel::kPredictionAssumptions);
      assumptions_said_ = true;
    }
    for (const PredictedRow& p : predicted) {
      rows_.keep(p.row);
      notes_stream() << p.line << "\n";
    }
  }
  for (const Run& run : runs) {
    const BenchInfo* info = harness_.find(run.run_name.function_name);
    if (info && info->kind == Kind::Train && info->run() != RunKind::OneReplica && !info->shared_device &&
        run.run_type == Run::RT_Iteration && !run.error_occurred && run.repetition_index <= 0)
      for (const std::string& line : harness_.predictor().compare(*info, run_rate(runs, info->name)))
        notes_stream() << line << "\n";
  }
}

Row Reporter::csv_row(const Run& run) const {
  const BenchInfo* info = harness_.find(run.run_name.function_name);
  BenchInfo unknown;
  if (!info) info = &unknown;
  Row row = identity_row(*info, rows_.machine());
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

// The console's reporting of each run (reporter.hpp): the CSV is written by the RowLog, not here.
#include "bench/run/reporter.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/output/rows.hpp"
#include "bench/schema/columns.hpp"
#include "engine/backends.hpp"
#include "engine/parallel/predict.hpp"
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

Reporter::Reporter(const Harness& harness, const RowLog& rows, DisplayOptions display)
    : harness_(harness), rows_(rows), display_(std::move(display)) {
  if (display_.format == "json") structured_ = std::make_unique<benchmark::JSONReporter>();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  // Google Benchmark's own CSV (--benchmark_format=csv): deprecated there, kept for those who read
  // it; trainbench's CSV is --csv.
  if (display_.format == "csv") structured_ = std::make_unique<benchmark::CSVReporter>();
#pragma GCC diagnostic pop
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

// A row's name on the console: its benchmark, with the aggregate it is.
std::string display_name(const Row& row) {
  return row.aggregate.empty() ? row.benchmark : row.benchmark + "_" + row.aggregate;
}

// The Time column: a row's step (step_time_s: the wall clock of the timed steps) in ms, an epochs/
// row's whole run of epochs in s (elapsed_s, validation included); a cv row's is a ratio, shown
// in percent.
std::string time_text(const Row& row, bool epochs) {
  const double v = (epochs && row.aggregate != "cv" ? row.elapsed_s : row.step_time_s).value_or(NAN);
  if (std::isnan(v)) return fmt::format("{:>12}", "");
  if (row.aggregate == "cv") return fmt::format("{:>9.4g} % ", 100 * v);
  return fmt::format("{:>9.4g} {:<2}", epochs ? v : v * 1e3, epochs ? "s" : "ms");
}

constexpr const char* kGreen = "\033[32m";
constexpr const char* kRed = "\033[31m";
constexpr const char* kReset = "\033[0m";

}  // namespace

void Reporter::print_console(const std::vector<const Row*>& rows, bool epochs) {
  std::ostream& out = GetOutputStream();
  // The console columns these rows have: a new header where they differ from the last one's.
  std::vector<const Column*> shown;
  for (const Column& c : columns())
    if (c.on_console && std::any_of(rows.begin(), rows.end(), [&](const Row* r) { return !c.cell(*r).empty(); }))
      shown.push_back(&c);
  auto header_of = [](const Column* c) { return std::string(*c->console_name ? c->console_name : c->name); };
  std::string header = fmt::format("{:<{}} {:>12} {:>10}", "Benchmark", name_width_, "Time", "Iterations");
  for (const Column* c : shown)
    header += fmt::format(" {:>{}}", header_of(c), std::max<std::size_t>(10, header_of(c).size()));
  if (header != last_header_ && !shown.empty()) {
    out << std::string(header.size(), '-') << "\n" << header << "\n" << std::string(header.size(), '-') << "\n";
    last_header_ = header;
  }
  for (const Row* row : rows) {
    const std::string name = display_name(*row);
    const bool failed = row->status == "failed";
    const std::string colour_on = display_.colour ? (failed ? kRed : kGreen) : "";
    const std::string colour_off = display_.colour ? kReset : "";
    if (failed) {
      out << fmt::format("{}{:<{}} FAILED: {}{}\n", colour_on, name, name_width_, row->message, colour_off);
      continue;
    }
    std::string line = fmt::format("{}{:<{}}{} {} {:>10}", colour_on, name, name_width_, colour_off,
                                   time_text(*row, epochs), row->iterations ? std::to_string(*row->iterations) : "");
    for (const Column* c : shown) {
      const std::optional<double> v = c->value(*row);
      const std::size_t width = std::max<std::size_t>(10, header_of(c).size());
      line += fmt::format(" {:>{}}", !v || std::isnan(*v) ? "" : console_number(*v * c->console_scale), width);
    }
    out << line;
    if (!row->message.empty()) out << "  " << row->message;
    out << "\n";
  }
  out << std::flush;
}

void Reporter::report_skipped(const Row& row) {
  const BenchInfo* info = harness_.find(row.benchmark);
  const std::string scope = info ? info->skip_scope : row.benchmark;
  if (!skipped_said_.insert(scope).second) return;
  std::string reason = row.message.substr(kSkippedPrefix.size());
  // "gpu:1: no CUDA device", "cpu:64 needs 64 cores": the scope is said once.
  if (reason.starts_with(scope + ": "))
    reason.erase(0, scope.size() + 2);
  else if (reason.starts_with(scope + " "))
    reason.erase(0, scope.size() + 1);
  if (std::ostream& out = notes_stream(); out) out << fmt::format("skipped {}: {}\n", scope, reason) << std::flush;
}

void Reporter::ReportRuns(const std::vector<Run>& runs) {
  if (runs.empty()) return;
  const std::string name = runs.front().run_name.function_name;
  if (structured_) structured_->ReportRuns(runs);
  // Google Benchmark reports a benchmark's repetitions, then its aggregates: by then the harness
  // has written every row of it, shown here once.
  if (!shown_.insert(name).second) return;
  std::vector<const Row*> table;
  bool skipped = false, failed = false;  // benchmarks are counted, not their repetitions' rows
  for (const Row* row : rows_.rows_of(name)) {
    const std::string& status = row->status;
    if (row->run_type == "epoch" || row->measurement == "predicted") continue;  // said as they came, or in the notes
    if (status == "skipped") {
      skipped = true;
      report_skipped(*row);
      continue;
    }
    failed = failed || status == "failed";
    table.push_back(row);
  }
  skipped_ += skipped ? 1 : 0;
  failed_ += failed ? 1 : 0;
  if (!structured_ && !table.empty()) print_console(table, name.rfind("epochs/", 0) == 0);
  const std::vector<std::string>& notes = rows_.notes_of(name);
  const bool predicted =
      std::any_of(notes.begin(), notes.end(), [](const std::string& l) { return l.rfind("  predicted ", 0) == 0; });
  if (predicted && !assumptions_said_) {
    notes_stream() << fmt::format("  predictions assume: {}\n", parallel::kPredictionAssumptions);
    assumptions_said_ = true;
  }
  for (const std::string& line : notes) notes_stream() << line << "\n";
  notes_stream() << std::flush;
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
}

}  // namespace tb::bench

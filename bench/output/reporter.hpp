// The display reporter: Google Benchmark's console output with a trainbench header and the
// counters bench/output/columns.cpp marks for the console, one line per skipped configuration, and one
// CSV row per run with every counter and the machine context.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/cli/context.hpp"
#include "bench/cli/flags.hpp"
#include "bench/output/csv.hpp"
#include "bench/output/rows.hpp"
#include "bench/run/harness.hpp"
#include "engine/train/epochs.hpp"

namespace tb::bench {

// How the run is shown on stdout: Google Benchmark's --benchmark_format and whether colour is
// wanted (--benchmark_color, and stdout being a terminal).
struct DisplayOptions {
  std::string format = "console";  // console, json, csv
  bool colour = false;
};
DisplayOptions display_options(const Flags& flags);

class Reporter : public benchmark::BenchmarkReporter {
 public:
  // Shows the run on the console (or as JSON/CSV on stdout) and hands `rows` what Google
  // Benchmark reports beyond the repetitions the harness wrote: aggregates, skipped rows, and
  // the predictions made from each one-device row.
  Reporter(Harness& harness, RowLog& rows, DisplayOptions display);
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;
  int failed() const { return failed_; }
  int skipped() const { return skipped_; }

 private:
  Row csv_row(const Run& run) const;
  // Says once per configuration (device, or device and precision) that its benchmarks are skipped
  // and why, instead of an error line per benchmark.
  void report_skipped(const Run& run);
  // The console table: a header with units once, then a line per run.
  void print_console(const std::vector<Run>& runs);
  std::ostream& notes_stream();  // skip lines: stdout on the console, stderr under json/csv
  static void print_basic_context(std::ostream& out, const Context& context);
  Harness& harness_;
  RowLog& rows_;
  DisplayOptions display_;
  std::unique_ptr<benchmark::BenchmarkReporter> structured_;  // json or csv on stdout
  std::size_t name_width_ = 10;
  std::string last_header_;  // the console header printed last
  int failed_ = 0, skipped_ = 0;
  std::set<std::string> skipped_said_;  // configurations whose skip was printed
  bool stdout_closed_ = false;
  void report_predictions(const std::vector<Run>& runs);
  bool assumptions_said_ = false;
};

}  // namespace tb::bench

// The display reporter: it renders the console and nothing else. When Google Benchmark reports a
// benchmark, it shows that benchmark's rows as the harness wrote them to the RowLog (the same
// figures as the CSV): a trainbench header, the counters bench/schema/columns.cpp marks for the
// console, one line per skipped configuration, then the benchmark's notes (its predictions, the
// measured row against its prediction). Under --benchmark_format=json|csv it hands Google
// Benchmark's own runs to Google Benchmark's reporter instead.
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
  // Shows the run on the console (or as JSON/CSV on stdout) from `rows`.
  Reporter(const Harness& harness, const RowLog& rows, DisplayOptions display);
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;
  int failed() const { return failed_; }
  int skipped() const { return skipped_; }

 private:
  // Says once per configuration (device, or device and precision) that its benchmarks are skipped
  // and why, instead of an error line per benchmark.
  void report_skipped(const Row& row);
  // The console table: a header with units where the columns change, then a line per row.
  void print_console(const std::vector<const Row*>& rows, bool epochs);
  std::ostream& notes_stream();  // skip lines and notes: stdout on the console, stderr under json/csv
  static void print_basic_context(std::ostream& out, const Context& context);
  const Harness& harness_;
  const RowLog& rows_;
  std::set<std::string> shown_;  // benchmarks whose rows were shown
  DisplayOptions display_;
  std::unique_ptr<benchmark::BenchmarkReporter> structured_;  // json or csv on stdout
  std::size_t name_width_ = 10;
  std::string last_header_;  // the console header printed last
  int failed_ = 0, skipped_ = 0;
  std::set<std::string> skipped_said_;  // configurations whose skip was printed
  bool stdout_closed_ = false;
  bool assumptions_said_ = false;
};

}  // namespace tb::bench

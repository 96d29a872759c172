// The display reporter: Google Benchmark's console output with a trainbench header and a
// short set of counters, plus one CSV row per run with every counter and the machine context.
#pragma once

#include <memory>

#include <benchmark/benchmark.h>

#include "bench/context.hpp"
#include "bench/csv.hpp"

namespace tb::bench {

class Reporter : public benchmark::ConsoleReporter {
 public:
  Reporter(const MachineContext& machine, CsvWriter* csv) : machine_(machine), csv_(csv) {}
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  int failed() const { return failed_; }
  int skipped() const { return skipped_; }

 private:
  std::vector<std::string> csv_row(const Run& run) const;
  const MachineContext& machine_;
  CsvWriter* csv_;
  int failed_ = 0, skipped_ = 0;
};

}  // namespace tb::bench

// The display reporter: Google Benchmark's console output with a trainbench header and a
// short set of counters, plus one CSV row per run with every counter and the machine context.
#pragma once

#include <memory>

#include <benchmark/benchmark.h>

#include "bench/context.hpp"
#include "bench/csv.hpp"
#include "bench/registry.hpp"
#include "engine/train/epochs.hpp"

namespace tb::bench {

class Reporter : public benchmark::ConsoleReporter {
 public:
  Reporter(const MachineContext& machine, CsvWriter* csv) : machine_(machine), csv_(csv) {}
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  // A row of an epochs/ benchmark, written as its epoch ends.
  void report_epoch(const BenchInfo& info, const EpochRecord& record);
  int failed() const { return failed_; }
  int skipped() const { return skipped_; }

 private:
  Row csv_row(const Run& run) const;
  const MachineContext& machine_;
  CsvWriter* csv_;
  int failed_ = 0, skipped_ = 0;
};

// The columns every row of a benchmark shares: its identity and the machine context.
Row identity_row(const BenchInfo& info, const MachineContext& machine);

}  // namespace tb::bench

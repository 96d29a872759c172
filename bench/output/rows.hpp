// The rows of a run: the columns every row of a benchmark shares (its identity and the machine
// context), a row's counter cells, and the one place every row goes through on its way to the
// CSV and the summary (RowLog).
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "bench/cli/context.hpp"
#include "bench/output/csv.hpp"
#include "bench/plan/configs.hpp"
#include "engine/train/epochs.hpp"

namespace tb::bench {

// The identity columns of `info`'s rows and the machine context.
Row identity_row(const BenchInfo& info, const MachineContext& machine);
// The counter columns among `counters`, formatted, into `row` (aggregate: a mean, median, ... row).
void add_counters(Row& row, const std::map<std::string, double>& counters, bool aggregate);

// An epoch's counters: epoch, train and validation loss and accuracy, elapsed seconds.
std::map<std::string, double> epoch_counters(const EpochRecord& r);

// One repetition of a benchmark as it ended: its counters, iterations, and whether it failed.
struct Repetition {
  std::map<std::string, double> counters;
  std::int64_t iterations = 0;
  bool failed = false;
  std::string message;  // the failure, or an ok row's notes
};

// Where every row of a run goes, the moment it is known: the CSV (--csv, on rank 0), so that an
// interrupted run keeps every row it finished, and the list the summary is made of. Made before
// the harness (which hands it each repetition and epoch as it ends) and the reporter (which
// hands it Google Benchmark's aggregates, skipped rows and the predictions).
class RowLog {
 public:
  // `notes`: where the epochs' lines go (stdout beside the console table, stderr under json/csv).
  RowLog(const MachineContext& machine, CsvWriter* csv, std::ostream& notes)
      : machine_(machine), csv_(csv), notes_(notes) {}
  void keep(const Row& row);
  // A repetition of `info` that ended: its iteration row, numbered in the order they end.
  void repetition(const BenchInfo& info, const Repetition& r);
  // An epoch of an epochs/ benchmark, as it ends: its row and a line of notes.
  void epoch(const BenchInfo& info, const EpochRecord& r);
  const std::vector<Row>& rows() const { return rows_; }
  const MachineContext& machine() const { return machine_; }
  CsvWriter* csv() const { return csv_; }

 private:
  const MachineContext& machine_;
  CsvWriter* csv_;
  std::ostream& notes_;
  std::vector<Row> rows_;
  std::map<std::string, int> repetitions_;  // per benchmark, the rows written
};

}  // namespace tb::bench

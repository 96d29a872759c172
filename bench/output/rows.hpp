// The rows of a run: the columns every row of a benchmark shares (its identity, its kind's facts
// and the machine context), a row's counter cells, and the one place every row goes through on
// its way to the CSV, the console and the summary (RowLog).
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

// The identity columns of `info`'s rows, its kind's facts and the machine context.
Row identity_row(const BenchInfo& info, const MachineContext& machine);

// An epoch's figures in their fields: epoch, train and validation loss and accuracy (-1: none),
// elapsed seconds.
void set_epoch_figures(Row& figures, const EpochRecord& r);

// A row's one-word facts, as every stage asks them.
inline bool is_ok_iteration(const Row& r) { return r.run_type == "iteration" && r.status == "ok"; }

// Where every row of a run goes, the moment it is final: the CSV (--csv, on rank 0), so that an
// interrupted run keeps every row it finished, the list the console and the summary are made of,
// and the lines the console shows after a benchmark's rows (its predictions, say). The harness
// hands it every row; the reporter only reads it.
class RowLog {
 public:
  // `notes`: where the epochs' lines go (stdout beside the console table, stderr under json/csv).
  RowLog(const MachineContext& machine, CsvWriter* csv, std::ostream& notes)
      : machine_(machine), csv_(csv), notes_(notes) {}
  void keep(const Row& row);
  // A repetition of `info` that ended: its iteration row, numbered in the order they end, and
  // the lines its run had for the console after the benchmark's rows. Returns the row as kept.
  Row repetition(const BenchInfo& info, const Measurement& measured, std::vector<std::string> lines = {});
  // The aggregates over `info`'s ok repetitions (mean, median, stddev, cv of every counter), as
  // Google Benchmark computes them; nothing for fewer than two.
  void aggregates(const BenchInfo& info);
  // An epoch of an epochs/ benchmark, as it ends: its row and a line of notes.
  void epoch(const BenchInfo& info, const EpochRecord& r);
  // A line the console shows after `benchmark`'s rows.
  void note(const std::string& benchmark, std::string line) { lines_[benchmark].push_back(std::move(line)); }
  const std::vector<std::string>& notes_of(const std::string& benchmark) const;

  const std::vector<Row>& rows() const { return rows_; }
  // The rows of `benchmark` (by name), in the order they were kept; valid until the next keep().
  std::vector<const Row*> rows_of(const std::string& benchmark) const;
  const MachineContext& machine() const { return machine_; }
  CsvWriter* csv() const { return csv_; }

 private:
  const MachineContext& machine_;
  CsvWriter* csv_;
  std::ostream& notes_;
  std::vector<Row> rows_;
  std::map<std::string, int> repetitions_;  // per benchmark, the rows written
  std::map<std::string, std::vector<std::string>> lines_;
};

}  // namespace tb::bench

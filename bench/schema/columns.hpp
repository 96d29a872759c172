// The CSV's columns in one table (results/SCHEMA.md), made from the row's fields (row.hpp): each
// column's name, kind and type, the field that holds it, and how the console shows it. The CSV
// writer and reader, the console and the aggregates read this table; the code that makes or reads
// a row uses its fields by name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "bench/schema/row.hpp"

namespace tb::bench {

inline constexpr const char* kSchemaVersion = "7";

struct Column {
  const char* name;
  ColumnKind kind;
  CellType type;
  // The field that holds it: one of the three, by type.
  Text Row::*text = nullptr;
  Count Row::*count = nullptr;
  Number Row::*number = nullptr;
  bool on_console = false;  // counters the console shows (the CSV has them all)
  // False for a value that means nothing averaged over repetitions: aggregate rows leave it empty.
  bool aggregates = true;
  // A counter whose negative value means none (-1: a regression task has no accuracy, a target
  // was never reached): left empty.
  bool negative_is_none = false;
  // The console's header for it, with its unit, and the factor from the CSV's value (a ratio
  // shown in percent: 100); empty: the CSV's name.
  const char* console_name = "";
  double console_scale = 1;

  // The CSV's text of this column of `row` ("" where it holds nothing).
  std::string cell(const Row& row) const;
  // Sets this column of `row` from the CSV's text; false (the row unchanged) where the text is
  // not of the column's type (a count that is no whole number, a number that is none).
  bool set(Row& row, std::string_view text) const;
  // This column of `row` as a number, where it is a count or a number and holds one.
  std::optional<double> value(const Row& row) const;
};

// Every column, in the CSV's order.
const std::vector<Column>& columns();
// The CSV's text of every column of `row`, in the CSV's order: the cells of its line.
std::vector<std::string> cells(const Row& row);
// The column named `name`; null where there is none.
const Column* column_named(std::string_view name);
const std::vector<std::string>& csv_columns();

// A figure the engine or telemetry reports by name (a network's memory report, NVML's sampler),
// or a test's, set in its field of `row`. Throws tb::Error naming a counter that is not a
// measurement column (a misspelt name). A negative value of a column whose negative means none
// stays empty; the throttle mask is written as its reasons' names.
void add_counters(Row& row, const std::map<std::string, double>& counters);
std::string number(double value);  // {:.6g}, as every number column
// `value` as its number cell reads back: what a reader of the CSV has of it.
double as_written(double value);
// `row` with every number as its cell reads back.
Row as_written(Row row);

// What a run concludes of a row, as words in its `verdicts` column (joined by '+'): data a
// reader filters on, where the message says why in a sentence. results/SCHEMA.md lists them.
struct Verdict {
  const char* word;
  const char* meaning;
};
const std::vector<Verdict>& verdicts();
// `words` as the column's text, each checked against verdicts() (tb::Error for a misspelt one).
std::string verdicts_cell(const std::vector<std::string>& words);

// What one repetition of a benchmark measured, as its run ends it (or as it failed or was
// skipped): the cells of its row that are not the benchmark's identity.
struct Measurement {
  Row figures{};  // what it measured, in the counter fields (the rest are left empty)
  std::int64_t steps = 0;
  std::string status = "ok";  // ok, failed, skipped
  std::string message{};      // why it failed or was skipped, or an ok row's notes
  std::vector<std::string> verdicts{};
  std::string prediction{};         // the predicted row it was compared with, if any
  std::string prediction_inputs{};  // one-device train rows (bench/predict/inputs.hpp)
  std::vector<double> windows{};    // samples/s of consecutive parts of its timed steps (window_rates)
  // How many of this process's threads were waiting for a CPU, on average over the timed steps
  // (their run delay over the wall clock); < 0: unknown. The harness's "loaded" reads it.
  double cpu_waiting = -1;
};
// `m` in its fields of `row`: status, message (a skipped row's with its prefix), iterations,
// verdicts, prediction, windows and, for an ok row, every counter field its figures hold (a
// negative one of a column whose negative means none stays empty).
void set_measurement(Row& row, const Measurement& m);

// A benchmark registered but not run (the machine cannot run its configuration) reports an
// error message with this prefix; the console and the CSV call it skipped, not failed.
inline constexpr std::string_view kSkippedPrefix = "skipped: ";
std::string skip_message(const std::string& reason);
bool is_skip(std::string_view message);

}  // namespace tb::bench

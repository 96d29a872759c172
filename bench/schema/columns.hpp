// The CSV's columns in one table (results/SCHEMA.md): what each is (a benchmark's identity, a
// counter its run measured, the machine's context), whether the console shows it, and how a
// counter's value is written. The CSV writer, the CSV rows and the console all read this table.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tb::bench {

inline constexpr const char* kSchemaVersion = "7";

enum class ColumnKind { Identity, Counter, Context };

struct Column {
  const char* name;
  ColumnKind kind;
  bool on_console = false;  // counters the console shows (the CSV has them all)
  // A counter's cell from its value; null: {:.6g}.
  std::string (*format)(double value) = nullptr;
  // False for a value that means nothing averaged over repetitions (a bit mask): aggregate
  // rows leave it empty.
  bool aggregates = true;
  // The console's header for it, with its unit, and the factor from the CSV's value (a ratio
  // shown in percent: 100); empty: the CSV's name.
  const char* console_name = "";
  double console_scale = 1;
};

// Every column, in the CSV's order.
const std::vector<Column>& columns();
const std::vector<std::string>& csv_columns();
bool is_counter(std::string_view name);
bool shown_on_console(std::string_view name);

// The cells of `counters`, for a repetition's row or (`aggregate`) a mean, median, stddev or cv
// row. Throws tb::Error naming a counter that is not a measurement column (a misspelt name).
std::map<std::string, std::string> counter_cells(const std::map<std::string, double>& counters, bool aggregate);
std::string number(double value);  // {:.6g}, as every counter without a format of its own

// What a run concludes of a row, as words in its `verdicts` column (joined by '+'): data a
// reader filters on, where the message says why in a sentence. results/SCHEMA.md lists them.
struct Verdict {
  const char* word;
  const char* meaning;
};
const std::vector<Verdict>& verdicts();
// `words` as the column's text, each checked against verdicts() (tb::Error for a misspelt one).
std::string verdicts_cell(const std::vector<std::string>& words);

// A benchmark registered but not run (the machine cannot run its configuration) reports an
// error message with this prefix; the console and the CSV call it skipped, not failed.
inline constexpr std::string_view kSkippedPrefix = "skipped: ";
std::string skip_message(const std::string& reason);
bool is_skip(std::string_view message);

}  // namespace tb::bench

// The table of the CSV's columns (columns.hpp), made from the row's fields (row.hpp), with how
// the console shows the counters it shows.
#include "bench/schema/columns.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"
#include "telemetry/sampler.hpp"

namespace tb::bench {
namespace {

// A column's place in a row: its field, by type.
Column column(const char* name, ColumnKind kind, Text Row::*field) {
  return Column{.name = name, .kind = kind, .type = CellType::Text, .text = field};
}
Column column(const char* name, ColumnKind kind, Count Row::*field) {
  return Column{.name = name, .kind = kind, .type = CellType::Count, .count = field};
}
Column column(const char* name, ColumnKind kind, Number Row::*field) {
  return Column{.name = name, .kind = kind, .type = CellType::Number, .number = field};
}

// How the console shows a counter: its header with the unit, and the factor from the CSV's value.
struct Shown {
  const char* name;
  const char* console_name;
  double console_scale = 1;
};
const Shown kShown[] = {
    {"samples_per_s", "samples/s"}, {"model_tflops", "TFLOP/s"}, {"utilisation", "util %", 100},
    {"host_cpu_util", "CPU cores"}, {"loss_last", "loss"},       {"val_loss", "val loss"},
    {"val_acc", "val acc %", 100},  {"elapsed_s", "elapsed s"},  {"gpu_util", "GPU util %"},
};

// A counter's value as its field holds it: none for a negative value of a column whose negative
// means none.
Number figure(const Column& c, double value) { return value < 0 && c.negative_is_none ? Number() : Number(value); }

}  // namespace

std::string number(double value) { return fmt::format("{:.6g}", value); }

double as_written(double value) { return std::strtod(number(value).c_str(), nullptr); }

Row as_written(Row row) {
  for (const Column& c : columns())
    if (c.type == CellType::Number)
      if (Number& v = row.*c.number) v = as_written(*v);
  return row;
}

const std::vector<Column>& columns() {
  static const std::vector<Column> all = [] {
    std::vector<Column> out{
#define TB_ROW_COLUMN(name, type, kind) column(#name, ColumnKind::kind, &Row::name),
        TB_ROW_COLUMNS(TB_ROW_COLUMN)
#undef TB_ROW_COLUMN
    };
    const auto counter = [&](std::string_view name) -> Column& {
      const auto c = std::find_if(out.begin(), out.end(), [&](const Column& c) { return name == c.name; });
      TB_CHECK(c != out.end() && c->kind == ColumnKind::Counter, "'{}' is no counter column", name);
      return *c;
    };
    for (const Shown& shown : kShown) {
      Column& c = counter(shown.name);
      c.on_console = true;
      c.console_name = shown.console_name;
      c.console_scale = shown.console_scale;
    }
    counter("gpu_throttle").aggregates = false;  // a bit mask means nothing averaged over repetitions
    for (const char* name : {"train_acc", "val_acc", "time_to_target_s"}) counter(name).negative_is_none = true;
    return out;
  }();
  return all;
}

const Column* column_named(std::string_view name) {
  const auto c = std::find_if(columns().begin(), columns().end(), [&](const Column& c) { return name == c.name; });
  return c == columns().end() ? nullptr : &*c;
}

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Column& c : columns()) out.emplace_back(c.name);
    return out;
  }();
  return names;
}

std::string Column::cell(const Row& row) const {
  switch (type) {
    case CellType::Text:
      return row.*text;
    case CellType::Count:
      return (row.*count) ? std::to_string(*(row.*count)) : "";
    case CellType::Number:
      return (row.*number) ? bench::number(*(row.*number)) : "";
  }
  return "";
}

std::vector<std::string> cells(const Row& row) {
  std::vector<std::string> out;
  out.reserve(columns().size());
  for (const Column& c : columns()) out.push_back(c.cell(row));
  return out;
}

bool Column::set(Row& row, std::string_view cell) const {
  if (type == CellType::Text) {
    row.*text = std::string(cell);
    return true;
  }
  if (cell.empty()) {
    if (type == CellType::Count) row.*count = std::nullopt;
    if (type == CellType::Number) row.*number = std::nullopt;
    return true;
  }
  if (type == CellType::Count) {
    std::int64_t v = 0;
    const auto [end, error] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
    if (error == std::errc() && end == cell.data() + cell.size()) {
      row.*count = v;
      return true;
    }
  }
  const std::string text(cell);  // strtod reads nan, inf and hexadecimal as the writer's {:.6g} and Python do
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return false;
  if (type == CellType::Number) {
    row.*number = v;
    return true;
  }
  // A count written as a number ("1.79601e+06": params in some older files) is taken where it is
  // a whole one.
  if (!std::isfinite(v) || v != std::floor(v) || std::abs(v) > 9e15) return false;
  row.*count = std::int64_t(v);
  return true;
}

std::optional<double> Column::value(const Row& row) const {
  if (type == CellType::Count && (row.*count)) return double(*(row.*count));
  if (type == CellType::Number) return row.*number;
  return std::nullopt;
}

void add_counters(Row& row, const std::map<std::string, double>& counters) {
  for (const auto& [name, value] : counters) {
    const Column* c = column_named(name);
    // A counter that is no column is a misspelt name (or a column not yet in the table): it
    // would be lost from every row, so it stops the run where it is written.
    if (!c || c->kind != ColumnKind::Counter)
      throw Error(
          fmt::format("counter '{}' is not a measurement column of the CSV: spell it as bench/schema/row.hpp does, "
                      "or add it there and to results/SCHEMA.md",
                      name));
    if (c->type == CellType::Text)  // the throttle mask, as the names of its reasons
      row.*(c->text) = telemetry::throttle_reason_names(std::uint64_t(value));
    else
      row.*(c->number) = figure(*c, value);
  }
}

const std::vector<Verdict>& verdicts() {
  static const std::vector<Verdict> all{
      {"loaded",
       "the machine's load average when the row started was above the threads this run used so far + 1, or the row's "
       "threads (no more than the cores) waited for a CPU over 0.2 s a second of its timed steps (the kernel's run "
       "delay; the console's warning says how long)"},
      {"above_peak",
       "utilisation above 1 without the convolutions' products with their zero padding: the peak it is over was "
       "measured low, or the FLOP count is high"},
      {"slower_than_fp32", "a GPU precision meant to be faster than fp32 was slower than the fp32 row of the run"},
      {"not_scaling", "a data-parallel row with fewer samples/s than its one-device baseline"},
      {"inside_band", "a measured or replayed row inside the band of the prediction made for it in the run"},
      {"outside_band", "a measured or replayed row outside the band of the prediction made for it in the run"},
      {"replicas_differ", "the replicas' weights differed after the timed steps (the row failed)"},
  };
  return all;
}

std::string verdicts_cell(const std::vector<std::string>& words) {
  std::vector<std::string> kept;  // each word once, in the order first given
  for (const std::string& w : words) {
    const bool known = std::any_of(verdicts().begin(), verdicts().end(), [&](const Verdict& v) { return w == v.word; });
    if (!known) throw Error(fmt::format("verdict '{}' is not in verdicts() (bench/schema/columns.cpp)", w));
    // Whole words are compared: a word inside another ("band" in "inside_band") is still its own.
    if (std::find(kept.begin(), kept.end(), w) == kept.end()) kept.push_back(w);
  }
  return fmt::format("{}", fmt::join(kept, "+"));
}

void set_measurement(Row& row, const Measurement& m) {
  row.status = m.status;
  row.message = m.status == "skipped" ? skip_message(m.message) : m.message;
  row.iterations = m.steps;
  row.verdicts = verdicts_cell(m.verdicts);
  row.prediction = m.prediction;
  row.prediction_inputs = m.prediction_inputs;
  std::string windows;
  for (double w : m.windows) {  // appended piece by piece: GCC 12's -Wrestrict misreads "x" + string&&
    if (!windows.empty()) windows += ';';
    windows += number(w);
  }
  row.window_samples_per_s = windows;
  if (m.status != "ok") return;
  for (const Column& c : columns()) {
    if (c.kind != ColumnKind::Counter) continue;
    if (c.type == CellType::Text) {
      if (!(m.figures.*c.text).empty()) row.*c.text = m.figures.*c.text;
    } else if (const Number v = m.figures.*c.number) {
      row.*c.number = figure(c, *v);
    }
  }
}

std::string skip_message(const std::string& reason) { return std::string(kSkippedPrefix) + reason; }

bool is_skip(std::string_view message) { return message.substr(0, kSkippedPrefix.size()) == kSkippedPrefix; }

}  // namespace tb::bench

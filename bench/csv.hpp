// trainbench's CSV: one row per benchmark run, flushed as it finishes, with the machine context
// in every row. The columns are documented in results/SCHEMA.md.
#pragma once

#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace tb::bench {

inline constexpr const char* kSchemaVersion = "2";
const std::vector<std::string>& csv_columns();
// Values by column name; columns without a value are written empty.
using Row = std::map<std::string, std::string>;

class CsvWriter {
 public:
  // Opens FILE for appending. A new or empty file gets the header; a file whose header differs
  // is refused with tb::InputError and left untouched.
  explicit CsvWriter(const std::string& path);
  // Throws tb::Error for a value whose column is not in the schema.
  void write_row(const Row& row);

 private:
  std::string path_;
  std::ofstream out_;
};

std::string csv_escape(const std::string& field);
// Splits one CSV line (RFC 4180 quoting) into fields.
std::vector<std::string> csv_split(const std::string& line);

}  // namespace tb::bench

// trainbench's CSV: one row per benchmark run, written to the file (one write call) as it
// finishes, with the machine context in every row. The columns are documented in
// results/SCHEMA.md.
#pragma once

#include <string>
#include <vector>

#include "bench/schema/columns.hpp"
#include "bench/schema/row.hpp"
#include "engine/core/error.hpp"

namespace tb::bench {

// A row that could not be written (disk full, I/O error): the run stops, naming the file and the
// last row that is on disk.
class CsvWriteError : public Error {
 public:
  using Error::Error;
};

class CsvWriter {
 public:
  // Opens FILE for appending: a regular file, or a new one (anything else, a directory, a device,
  // a pipe, is refused with tb::InputError saying what it is). Under an exclusive lock, so that
  // two runs creating one file write one header: a new or empty file gets the header; a file
  // whose first line (read up to 64 KiB) is another header is refused and left untouched; a file
  // whose last byte is not a line break (a row cut short) gets one first, and a note says so.
  explicit CsvWriter(const std::string& path);
  ~CsvWriter();
  CsvWriter(const CsvWriter&) = delete;
  CsvWriter& operator=(const CsvWriter&) = delete;
  // Writes the row with one write call and returns once the kernel has it. Throws CsvWriteError
  // when the write fails. SIGINT and SIGTERM wait for a row being written (see
  // defer_signals_during_writes).
  void write_row(const Row& row);
  const std::string& path() const { return path_; }
  // Where the rows went, for the run's last line: how many this writer wrote, and whether the file
  // held rows before it opened (--csv appends: a second run on one file adds to the first's rows).
  std::string rows_written_line(const std::string& what = "") const;

 private:
  std::string path_;
  int fd_ = -1;
  std::string last_;  // benchmark of the last row written, for messages
  std::size_t written_ = 0;
  bool held_rows_ = false;  // the file had rows below its header when opened
};

// Installs SIGINT and SIGTERM handlers that let a row being written finish, then end the process
// as the signal would (exit status 128 + the signal), so that an interrupted run loses no row it
// finished; and ignores SIGPIPE, so that a closed stdout (`trainbench | head`) is an error the
// run can report instead of a silent death.
void defer_signals_during_writes();

std::string csv_escape(const std::string& field);
// Splits one CSV line (RFC 4180 quoting) into fields.
std::vector<std::string> csv_split(const std::string& line);

// Every row of a trainbench CSV at `path`, each cell into its field (a quoted field may span
// lines). `flag` names where the path came from in errors (--predict_from, a job's CSV). Throws
// tb::InputError naming the file and what is wrong: missing, not a trainbench CSV, a line with
// more fields than the header, a cell not of its column's type (a count or a number that is
// none). A row cut short (fewer fields, or a quoted field the file ends in) is left out with a note
// on stderr. Rows of any schema are read: columns this schema lacks are left out, columns the file
// lacks stay empty; what a caller needs of them it checks.
std::vector<Row> read_csv(const std::string& path, const std::string& flag);

}  // namespace tb::bench

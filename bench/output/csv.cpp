// Writing the CSV, and refusing to mix schemas in one file.
#include "bench/output/csv.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"

namespace tb::bench {

std::string csv_escape(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

namespace {

// The signal that arrived while a row was being written, delivered once the write is done.
std::atomic<int> g_writing{0};
volatile std::sig_atomic_t g_deferred = 0;

void on_signal(int sig) {
  if (g_writing.load()) {
    g_deferred = sig;
    // Delivered on another thread, the write may have ended between the two lines above, its
    // guard finding nothing deferred: the signal would wait for the next row's write.
    if (g_writing.load()) return;
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Marks a row's write: a SIGINT or SIGTERM that comes meanwhile is delivered after it.
class WriteGuard {
 public:
  WriteGuard() { g_writing.store(1); }
  ~WriteGuard() {
    g_writing.store(0);
    if (const int sig = g_deferred) {
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
  }
  WriteGuard(const WriteGuard&) = delete;
  WriteGuard& operator=(const WriteGuard&) = delete;
};

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device (/dev/null, a terminal?)";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a pipe (a FIFO, or /dev/stdout into a pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Whether a file ends inside a quoted field: every complete row holds its quotes in pairs (a
// quote inside a field is doubled), so an odd count over the file is the last row's open quote.
bool ends_inside_quotes(int fd, off_t size) {
  char buffer[1 << 16];
  std::size_t quotes = 0;
  for (off_t at = 0; at < size;) {
    const ssize_t got = ::pread(fd, buffer, std::size_t(std::min<off_t>(size - at, off_t(sizeof buffer))), at);
    if (got <= 0) break;
    quotes += std::size_t(std::count(buffer, buffer + got, '"'));
    at += got;
  }
  return quotes % 2 == 1;
}

// Everything of `data` to `fd`, through interruptions; false on an error (errno says which).
bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= std::size_t(n);
  }
  return true;
}

// Holds flock's exclusive lock for its life.
class FileLock {
 public:
  explicit FileLock(int fd) : fd_(fd) {
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

constexpr std::size_t kMaxHeaderBytes = 64 * 1024;

}  // namespace

void defer_signals_during_writes() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
}

CsvWriter::CsvWriter(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  const std::string header = fmt::format("{}", fmt::join(csv_columns(), ","));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      throw InputError(fmt::format("--csv={}: is {}, not a file; give a file name (e.g. results/run.csv)", path,
                                   kind_of(st.st_mode)));
  } else if (errno == ELOOP) {
    throw InputError(fmt::format("--csv={}: a loop of symbolic links", path));
  } else if (errno == ENOENT) {
    std::error_code ec;
    if (auto parent = fs::path(path).parent_path(); !parent.empty()) fs::create_directories(parent, ec);
  }
  // Non-blocking, so that a FIFO put there since the check cannot hang the open; fstat decides.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw InputError(
        fmt::format("--csv={}: cannot be opened for reading and appending ({})", path, std::strerror(errno)));
  try {
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
      throw InputError(fmt::format("--csv={}: is {}, not a file", path, kind_of(st.st_mode)));
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    const FileLock lock(fd_);  // one header, however many runs start on the file at once
    ::fstat(fd_, &st);
    if (st.st_size == 0) {
      const std::string line = header + "\n";
      if (!write_all(fd_, line.data(), line.size()))
        throw InputError(fmt::format("--csv={}: cannot write the header ({})", path, std::strerror(errno)));
      return;
    }
    std::string head(std::min<std::size_t>(std::size_t(st.st_size), kMaxHeaderBytes), '\0');
    const ssize_t got = ::pread(fd_, head.data(), head.size(), 0);
    if (got < 0) throw InputError(fmt::format("--csv={}: cannot be read ({})", path, std::strerror(errno)));
    head.resize(std::size_t(got));
    const std::size_t eol = head.find('\n');
    std::string first = head.substr(0, eol);
    if (!first.empty() && first.back() == '\r') first.pop_back();
    if (first != header) {
      const auto fields = csv_split(first);
      const bool ours = !fields.empty() && fields[0] == "schema_version";
      // An empty first line is no header of one column.
      const std::string what =
          first.empty()
              ? "an empty first line"
              : fmt::format(
                    "{} ({} column{}{})", ours ? "another trainbench schema" : "a header that is not trainbench's",
                    fields.size(), fields.size() == 1 ? "" : "s",
                    eol == std::string::npos && head.size() == kMaxHeaderBytes ? ", a first line over 64 KiB" : "");
      throw InputError(
          fmt::format("--csv={}: the file exists with {}; trainbench schema {} has {} columns. "
                      "Nothing was written: give a new file name, or move the old file away.",
                      path, what, kSchemaVersion, csv_columns().size()));
    }
    // A last row cut short (a full disk, a killed run) stays on its own line: never glued. Cut
    // inside a quoted field (a message, the prediction inputs), its quote is closed first, or the
    // line break would be part of that field and the next row glued to it.
    held_rows_ = eol != std::string::npos && std::size_t(st.st_size) > eol + 1;
    char last = '\n';
    if (::pread(fd_, &last, 1, st.st_size - 1) == 1 && last != '\n') {
      const bool open_quote = ends_inside_quotes(fd_, st.st_size);
      const std::string repair = open_quote ? "\"\n" : "\n";
      if (!write_all(fd_, repair.data(), repair.size()))
        throw InputError(fmt::format("--csv={}: cannot repair its last line ({})", path, std::strerror(errno)));
      std::cerr << fmt::format(
          "trainbench: note: --csv={} did not end with a line break (a row cut short by an "
          "earlier run?); that line stays as it was{}, and new rows start on the next line\n",
          path, open_quote ? " (its last field's quote closed)" : "");
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

CsvWriter::~CsvWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void CsvWriter::write_row(const Row& row) {
  std::string line;
  for (const std::string& cell : cells(row)) line += csv_escape(cell) + ',';
  line.back() = '\n';
  const std::string benchmark = row.benchmark.empty() ? "?" : row.benchmark;
  const WriteGuard guard;  // a SIGINT now waits for the row
  if (!write_all(fd_, line.data(), line.size())) {
    const int error = errno;
    throw CsvWriteError(
        fmt::format("--csv={}: writing the row of {} failed ({}){}; the last row on disk is {}. The run stops here.",
                    path_, benchmark, std::strerror(error), error == ENOSPC ? ": the disk is full" : "",
                    last_.empty() ? "none of this run's" : "the one of " + last_));
  }
  last_ = benchmark;
  ++written_;
}

std::string CsvWriter::rows_written_line(const std::string& what) const {
  return fmt::format(
      "trainbench: {} {}row{} written to {}{}\n", written_, what.empty() ? "" : what + " ", written_ == 1 ? "" : "s",
      path_, held_rows_ ? ", after the rows it already held (--csv appends; give a new file for this run alone)" : "");
}

namespace {
// A row of trainbench's is a few KiB (its prediction inputs the most of it): a record of more is
// no trainbench CSV, and reading a line of gigabytes whole (a binary file, a file with no line
// break) ran out of memory.
constexpr std::size_t kMaxRecordBytes = std::size_t(16) << 20;

// std::getline's, up to `cap` bytes: false at the end of the file; throws past `cap`.
bool read_line(std::istream& in, std::string& line, std::size_t cap, const std::string& where, int number) {
  line.clear();
  std::streambuf* buffer = in.rdbuf();
  bool any = false;
  for (int c = buffer->sbumpc(); c != std::char_traits<char>::eof(); c = buffer->sbumpc()) {
    any = true;
    if (c == '\n') return true;
    if (line.size() >= cap)
      throw InputError(fmt::format("{}: line {} runs past {} MiB: not a trainbench CSV (its rows are a few KiB)", where,
                                   number, kMaxRecordBytes >> 20));
    line += char(c);
  }
  return any;
}
}  // namespace

std::vector<Row> read_csv(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}={}: cannot be read ({})", flag, path, std::strerror(errno)));
  std::vector<Row> rows;
  std::vector<std::string> header;
  std::vector<const Column*> by_header;  // the column of each of the header's fields; null: not this schema's
  std::string line, record;
  int number = 0, first = 0;
  bool open_quote = false;  // whether the record so far holds an odd count of quotes
  const std::string where = fmt::format("{}={}", flag, path);
  while (read_line(in, line, kMaxRecordBytes - std::min(record.size(), kMaxRecordBytes), where, number + 1)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (record.empty()) first = number;
    record += record.empty() ? line : "\n" + line;
    // A quoted field that holds a line break goes on: quotes come in pairs in a whole record. Only
    // the new line's quotes are counted: recounting the record's made a file with one stray quote
    // take minutes (its every later line rescanned the megabytes before it).
    if (std::count(line.begin(), line.end(), '"') % 2 != 0) open_quote = !open_quote;
    if (open_quote) continue;
    const std::vector<std::string> fields = csv_split(record);
    record.clear();
    if (header.empty()) {
      if (fields.empty() || fields[0] != "schema_version")
        throw InputError(
            fmt::format("{}={}: not a trainbench CSV (its first line is not a header starting with "
                        "schema_version)",
                        flag, path));
      header = fields;
      for (const std::string& name : header) by_header.push_back(column_named(name));
      continue;
    }
    if (fields.size() == 1 && fields[0].empty()) continue;  // a blank line
    if (fields == header) continue;                         // files concatenated with their headers
    // A row cut short (a full disk, a killed run) that a later run left on its own line (CsvWriter)
    // is left out, saying so: the rows around it are whole.
    if (fields.size() < header.size()) {
      std::cerr << fmt::format(
          "trainbench: note: {}={}: line {} has {} of the header's {} fields, a row cut short (a full disk, a "
          "killed run?): left out\n",
          flag, path, first, fields.size(), header.size());
      continue;
    }
    if (fields.size() > header.size())
      throw InputError(fmt::format("{}={}: line {} has {} fields, the header has {} (rows glued together, or edited?)",
                                   flag, path, first, fields.size(), header.size()));
    Row row;
    for (std::size_t k = 0; k < header.size(); ++k) {
      const Column* c = by_header[k];
      if (c && !c->set(row, fields[k]))
        throw InputError(fmt::format("{}={}: line {}: {} is '{}', not a {} (a row edited by hand, or another tool's?)",
                                     flag, path, first, c->name, fields[k],
                                     c->type == CellType::Count ? "whole number" : "number"));
    }
    rows.push_back(std::move(row));
  }
  if (header.empty()) throw InputError(fmt::format("{}={}: empty file (no header, no rows)", flag, path));
  // A quote opened early (a hand edit) holds every later line in its field: the note says how many
  // it left out, so that rows lost after it are not taken for one row cut short.
  if (!record.empty() && number == first)
    std::cerr << fmt::format(
        "trainbench: note: {}={}: line {} ends inside a quoted field, a row cut short (a full disk, a killed run?): "
        "left out\n",
        flag, path, first);
  else if (!record.empty())
    std::cerr << fmt::format(
        "trainbench: note: {}={}: a quoted field opened on line {} is never closed: lines {} to {} ({} lines) are "
        "left out; if rows follow that line, close or remove its stray quote (\") and read the file again\n",
        flag, path, first, first, number, number - first + 1);
  return rows;
}

}  // namespace tb::bench

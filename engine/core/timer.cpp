// Clocks read through POSIX; the peak resident set from /proc/self/status (VmHWM, which
// clear_refs resets), else getrusage's lifetime peak.
#include "engine/core/timer.hpp"

#include <sys/resource.h>
#include <time.h>

#include <fstream>
#include <string>

namespace tb {

namespace {
double read_clock(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}
}  // namespace

double wall_seconds() { return read_clock(CLOCK_MONOTONIC); }
double process_cpu_seconds() { return read_clock(CLOCK_PROCESS_CPUTIME_ID); }

std::int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:  123 kB"
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return std::int64_t(usage.ru_maxrss) * 1024;
}

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return bool(clear);
}

}  // namespace tb

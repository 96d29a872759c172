// Clocks read through POSIX; getrusage reports the peak resident set in KiB on Linux.
#include "engine/core/timer.hpp"

#include <sys/resource.h>
#include <time.h>

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
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return std::int64_t(usage.ru_maxrss) * 1024;
}

}  // namespace tb

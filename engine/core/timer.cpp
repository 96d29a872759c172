// Clocks read through POSIX; the peak resident set from /proc/self/status (VmHWM, which
// clear_refs resets), else getrusage's lifetime peak.
#include "engine/core/timer.hpp"

#include <dirent.h>
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

double process_cpu_wait_seconds() {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return -1;
  double waited = 0;
  bool any = false;
  while (const dirent* task = readdir(tasks)) {
    if (task->d_name[0] == '.') continue;
    // "on-CPU ns, run-queue wait ns, time slices"; a thread that ended meanwhile has no file.
    std::ifstream stat(std::string("/proc/self/task/") + task->d_name + "/schedstat");
    double on_cpu_ns = 0, wait_ns = 0;
    if (stat >> on_cpu_ns >> wait_ns) waited += wait_ns * 1e-9, any = true;
  }
  closedir(tasks);
  return any ? waited : -1;
}

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

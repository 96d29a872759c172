// Wall-clock and process-CPU clocks, and the process's peak resident memory.
#pragma once

#include <cstdint>

namespace tb {

double wall_seconds();         // monotonic
double process_cpu_seconds();  // all threads of this process
// The seconds this process's threads have spent runnable but waiting for a CPU (the scheduler's
// run delay, summed over /proc/self/task/*/schedstat); < 0 where the kernel does not say.
double process_cpu_wait_seconds();
// The process's peak resident set since start or the last reset_peak_rss() (VmHWM).
std::int64_t peak_rss_bytes();
// Starts a new peak at the current resident set (Linux: 5 to /proc/self/clear_refs), so that each
// benchmark row reports its own peak; false where the kernel does not allow it.
bool reset_peak_rss();

}  // namespace tb

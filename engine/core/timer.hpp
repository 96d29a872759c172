// Wall-clock and process-CPU clocks, and the process's peak resident memory.
#pragma once

#include <cstdint>

namespace tb {

double wall_seconds();         // monotonic
double process_cpu_seconds();  // all threads of this process
std::int64_t peak_rss_bytes();

}  // namespace tb

// Reading the machine context.
#include "bench/cli/context.hpp"

#include <omp.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "engine/backends.hpp"

namespace tb {
const char* git_commit();  // generated at build time
}

#ifndef TB_BENCHMARK_VERSION
#define TB_BENCHMARK_VERSION "unknown"
#endif

namespace tb::bench {

namespace {
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}
}  // namespace

MachineContext read_machine_context() {
  MachineContext c;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  c.host = host;
  utsname u{};
  if (uname(&u) == 0) c.os = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  c.cpu_model = cpu_model_name();
  c.cores = omp_get_num_procs();
#if defined(__clang__)
  c.compiler = fmt::format("clang {}, {}", __clang_version__, TB_BUILD_TARGET);
#elif defined(__GNUC__)
  c.compiler = fmt::format("gcc {}, {}", __VERSION__, TB_BUILD_TARGET);
#endif
  c.onednn = cpu_library_version();
  c.onednn_isa = cpu_library_isa();
  c.cpu_isa = own_cpu_isa();
  c.benchmark_lib = TB_BENCHMARK_VERSION;
  c.git_commit = git_commit();
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  c.timestamp = buf;
  return c;
}

std::string describe(const MachineContext& c) {
  return fmt::format(
      "trainbench {} on {} ({})\n  CPU: {}, {} cores, fp32 sgemm {:.1f} GFLOP/s (oneDNN, all cores)\n"
      "  oneDNN {} ({}), trainbench's own CPU kernels {}, Google Benchmark {}, {}\n",
      c.git_commit, c.host, c.os, c.cpu_model, c.cores, c.sgemm_gflops, c.onednn, c.onednn_isa, c.cpu_isa,
      c.benchmark_lib, c.compiler);
}

}  // namespace tb::bench

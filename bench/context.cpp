// Reading the machine context and measuring the CPU's sgemm rate.
#include "bench/context.hpp"

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
#include <oneapi/dnnl/dnnl.h>

#include "engine/core/timer.hpp"

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
  c.compiler = fmt::format("clang {}", __clang_version__);
#elif defined(__GNUC__)
  c.compiler = fmt::format("gcc {}", __VERSION__);
#endif
  const dnnl_version_t* v = dnnl_version();
  c.onednn = fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
  c.benchmark_lib = TB_BENCHMARK_VERSION;
  c.git_commit = git_commit();
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  c.timestamp = buf;
  return c;
}

double measure_sgemm_gflops(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  const int previous = omp_get_max_threads();
  omp_set_num_threads(threads);
  constexpr dnnl_dim_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), out(n * n, 0.0f);
  auto gemm = [&] { dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, out.data(), n); };
  gemm();  // warm-up: JIT and first touch
  std::vector<double> rates;
  const double start = wall_seconds();
  while (wall_seconds() - start < 0.25 || rates.size() < 3) {
    const double t0 = wall_seconds();
    gemm();
    rates.push_back(2.0 * n * n * n / (wall_seconds() - t0) * 1e-9);
  }
  std::sort(rates.begin(), rates.end());
  omp_set_num_threads(previous);
  return cache[threads] = rates[rates.size() / 2];  // the median call
}

std::string describe(const MachineContext& c) {
  return fmt::format(
      "trainbench {} on {} ({})\n  CPU: {}, {} cores, fp32 sgemm {:.1f} GFLOP/s (oneDNN, all cores)\n"
      "  oneDNN {}, Google Benchmark {}, {}\n",
      c.git_commit, c.host, c.os, c.cpu_model, c.cores, c.sgemm_gflops, c.onednn, c.benchmark_lib, c.compiler);
}

}  // namespace tb::bench

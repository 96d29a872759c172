// Measuring the CPU's sgemm rate (peak.hpp).
#include "engine/cpu/peak.hpp"

#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "engine/core/timer.hpp"

namespace tb::cpu {

double measure_sgemm_gflops(int threads) {
  static std::mutex mutex;
  static std::map<int, double> cache;
  const std::lock_guard lock(mutex);
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

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

}  // namespace tb::cpu

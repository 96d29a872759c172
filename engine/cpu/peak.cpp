// Measuring the CPU's sgemm rate (peak.hpp).
#include "engine/cpu/peak.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "engine/core/timer.hpp"

namespace tb::cpu {

namespace {

constexpr int kRounds = 5;
constexpr double kRoundSeconds = 0.2;
constexpr double kOutlier = 0.15;  // a round 15% off the median is another process's doing

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

SgemmRate measure_sgemm(int threads) {
  static std::mutex mutex;
  static std::map<int, SgemmRate> cache;
  const std::lock_guard lock(mutex);
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  const int previous = omp_get_max_threads();
  omp_set_num_threads(threads);
  constexpr dnnl_dim_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), out(n * n, 0.0f);
  auto gemm = [&] { dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, out.data(), n); };
  auto round = [&] {
    std::vector<double> rates;
    const double start = wall_seconds();
    while (wall_seconds() - start < kRoundSeconds || rates.size() < 3) {
      const double t0 = wall_seconds();
      gemm();
      rates.push_back(2.0 * n * n * n / (wall_seconds() - t0) * 1e-9);
    }
    return median(rates);
  };
  gemm();  // warm-up: JIT and first touch
  std::vector<double> rounds;
  for (int r = 0; r < kRounds; ++r) rounds.push_back(round());
  const SgemmRate rate = rate_of_rounds(std::move(rounds), round);
  omp_set_num_threads(previous);
  return cache[threads] = rate;
}

SgemmRate rate_of_rounds(std::vector<double> rounds, const std::function<double()>& another_round) {
  SgemmRate rate;
  for (std::size_t retry = 0; retry < rounds.size(); ++retry) {
    const double mid = median(rounds);
    auto off = std::find_if(rounds.begin(), rounds.end(), [&](double x) { return std::abs(x - mid) > kOutlier * mid; });
    if (off == rounds.end()) break;
    *off = another_round();
    ++rate.dropped;
  }
  rate.gflops = median(rounds);
  rate.spread =
      (*std::max_element(rounds.begin(), rounds.end()) - *std::min_element(rounds.begin(), rounds.end())) / rate.gflops;
  rate.rounds = int(rounds.size());
  return rate;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return fmt::format("isa {}", int(dnnl_get_effective_cpu_isa()));
  }
}

}  // namespace tb::cpu

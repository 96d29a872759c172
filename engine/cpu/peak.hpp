// The CPU's measured fp32 GEMM rate, the denominator of a CPU row's utilisation, and the oneDNN
// version the CPU backend runs on.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tb::cpu {

// fp32 GEMM rate of this machine with `threads` OpenMP threads, measured with oneDNN's sgemm on
// 1024^3 products: kRounds rounds of about 0.2 s each, each round's rate its median call; the
// rate is the median round, the spread (max - min) / median over the rounds. A round more than
// kOutlier away from the median (a burst of another process) is dropped and measured again,
// at most kRounds more times. Cached per thread count.
struct SgemmRate {
  double gflops = 0;
  double spread = 0;  // (max - min) / median of the kept rounds
  int rounds = 0, dropped = 0;
};
SgemmRate measure_sgemm(int threads);
// How measure_sgemm makes one rate of its rounds' GFLOP/s (apart, so that tests can give it
// rounds): each round more than kOutlier off the median is replaced by another_round(), at most as
// many times as there are rounds; then the rate and the spread as above.
SgemmRate rate_of_rounds(std::vector<double> rounds, const std::function<double()>& another_round);
inline double measure_sgemm_gflops(int threads) { return measure_sgemm(threads).gflops; }
std::string onednn_version();  // "2.6.3"
// The instruction set oneDNN's kernels run here, after ONEDNN_MAX_CPU_ISA ("avx512_core",
// "avx2"; oneDNN's names).
std::string onednn_isa();

}  // namespace tb::cpu

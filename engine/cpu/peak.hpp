// The CPU's measured fp32 GEMM rate, the denominator of a CPU row's utilisation, and the oneDNN
// version the CPU backend runs on.
#pragma once

#include <string>

namespace tb::cpu {

// fp32 GEMM rate of this machine with `threads` OpenMP threads, measured with oneDNN's sgemm on
// 1024^3 products for about a quarter of a second (the median call); cached per thread count.
double measure_sgemm_gflops(int threads);
std::string onednn_version();  // "2.6.3"

}  // namespace tb::cpu

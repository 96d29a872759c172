// The machine context written into the header of a run and into every CSV row, so that CSVs
// from different machines can be concatenated and compared.
#pragma once

#include <string>

namespace tb::bench {

struct MachineContext {
  std::string host, os, cpu_model, compiler, onednn, benchmark_lib, git_commit, timestamp;
  int cores = 0;
  double sgemm_gflops = 0;  // all cores, measured at start-up
};

MachineContext read_machine_context();
// fp32 GEMM rate of this machine with `threads` OpenMP threads, measured with oneDNN's sgemm
// on 1024^3 products for about a quarter of a second; cached per thread count.
double measure_sgemm_gflops(int threads);
std::string describe(const MachineContext& ctx);

}  // namespace tb::bench

// The machine context written into the header of a run and into every CSV row, so that CSVs
// from different machines can be concatenated and compared.
#pragma once

#include <string>

namespace tb::bench {

struct MachineContext {
  std::string host, os, cpu_model, compiler, onednn, benchmark_lib, git_commit, timestamp;
  // The instruction sets oneDNN's kernels and trainbench's own CPU kernels run ("avx512_core",
  // "avx512"), after ONEDNN_MAX_CPU_ISA and TB_MAX_CPU_ISA.
  std::string onednn_isa, cpu_isa;
  std::string nvidia_driver;  // NVML's driver version, where GPU rows run and NVML loads
  int cores = 0;
  double sgemm_gflops = 0;  // all cores, measured at start-up
};

MachineContext read_machine_context();
std::string describe(const MachineContext& ctx);

}  // namespace tb::bench

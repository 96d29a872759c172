// The trainbench binary: parses flags, registers the benchmarks, runs them under Google
// Benchmark and exits non-zero if any row failed.
#include <omp.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <set>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/context.hpp"
#include "bench/gpu.hpp"
#include "bench/csv.hpp"
#include "bench/flags.hpp"
#include "bench/registry.hpp"
#include "bench/replicas.hpp"
#include "bench/reporter.hpp"
#include "engine/core/error.hpp"
#include "engine/cpu/network.hpp"
#include "models/models.hpp"

namespace {

constexpr int kUsageError = 2;

bool has_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == name || arg == std::string(name) + "=true" || arg == std::string(name) + "=1") return true;
  }
  return false;
}

// Ranks other than 0 of an MPI job run every benchmark (collectives need them) but report
// nothing: rank 0 prints and writes the CSV.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.error_occurred && r.error_message.rfind("skipped:", 0) != 0) ++failed;
  }
  int failed = 0;
};

// --list_models' memory plans: what each workload needs before it runs, so that a batch can be
// picked for a card. The arena (values and gradients sharing bytes by lifetime) is exactly what
// the networks allocate; weights, gradients, optimizer state and batch buffers are counted from
// the parameters; on a GPU the cuDNN workspace cap and cuBLAS's workspace come on top.
void print_memory_plans(const tb::bench::Flags& flags) {
  using tb::bench::GpuPlan;
  using tb::bench::gpu_memory_plan;
  constexpr double GB = 1e9;
  std::cout << "\nMemory plan (GB; GPU rows at the workload's GPU batch, which trainbench lowers to what fits "
               "the card; --batch sets both):\n"
            << fmt::format("{:<10} {:<9} {:<4} {:<9} {:>6} {:>9} {:>9} {:>9}\n", "model", "dataset", "dev",
                           "precision", "batch", "arena", "fixed", "total");
  for (const auto& w : tb::models::workloads()) {
    const bool adam = w.optimizer.kind == tb::OptimizerConfig::Kind::Adam;
    const tb::i64 cpu_batch = flags.batch.value_or(w.batch);
    const double arena = double(tb::cpu::plan_network_memory(w.spec, cpu_batch).arena_bytes);
    const double fixed = double(tb::model_cost(w.spec).parameters) * 4 * (adam ? 4 : 3) +
                         double(tb::product(tb::infer_shapes(w.spec, cpu_batch)[0])) * 4;
    std::cout << fmt::format("{:<10} {:<9} {:<4} {:<9} {:>6} {:>9.3f} {:>9.3f} {:>9.3f}\n", w.model, w.dataset,
                             "cpu", "fp32", cpu_batch, arena / GB, fixed / GB, (arena + fixed) / GB);
    const tb::i64 gpu = flags.batch.value_or(w.gpu_batch > 0 ? w.gpu_batch : w.batch);
    for (const char* precision : {"fp32", "tf32", "fp16", "bf16"}) {
      const GpuPlan p = gpu_memory_plan(w.spec, gpu, precision, adam);
      std::cout << fmt::format("{:<10} {:<9} {:<4} {:<9} {:>6} {:>9.3f} {:>9.3f} {:>9.3f}\n", w.model, w.dataset,
                               "gpu", precision, gpu, double(p.arena) / GB, double(p.fixed + p.workspace) / GB,
                               double(p.total()) / GB);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tb::bench;
  start_world();  // MPI, when started by mpirun
  defer_signals_during_writes();
  Flags flags;
  try {
    flags = parse_flags(argc, argv);
  } catch (const tb::InputError& e) {
    std::cerr << "trainbench: error: " << e.what() << "\n";
    return kUsageError;
  }
  if (flags.help) {
    std::cout << usage();
    return 0;
  }
  if (flags.csv_header) {
    std::cout << fmt::format("{}\n", fmt::join(csv_columns(), ","));
    return 0;
  }
  if (flags.list_models) {
    std::cout << fmt::format("{:<10} {:<9} {:>6} {:>12} {:>16} {:>16}\n", "model", "dataset", "batch",
                             "params", "fwd GFLOP/sample", "train GFLOP/step");
    for (const auto& w : tb::models::workloads()) {
      const tb::ModelCost c = tb::model_cost(w.spec);
      const auto batch = flags.batch.value_or(w.batch);
      std::cout << fmt::format("{:<10} {:<9} {:>6} {:>12} {:>16.6g} {:>16.6g}\n", w.model, w.dataset, batch,
                               c.parameters, c.forward_flops_per_sample() * 1e-9,
                               c.train_flops_per_sample() * double(batch) * 1e-9);
    }
    print_memory_plans(flags);
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (argc > 1) {
    std::cerr << fmt::format("trainbench: error: unknown flag '{}' (see trainbench --help)\n", argv[1]);
    return kUsageError;
  }
  const bool listing = has_flag(argc, argv, "--benchmark_list_tests");

  MachineContext machine = read_machine_context();
  std::unique_ptr<CsvWriter> csv;
  Reporter* sink = nullptr;  // the reporter below, before anything runs
  try {
    const auto& benchmarks = register_benchmarks(
        flags, machine.cores, [&sink](const BenchInfo& info, const tb::EpochRecord& r) { sink->report_epoch(info, r); },
        [&sink](const BenchInfo& info, const Repetition& r) { sink->report_repetition(info, r); });
    if (!flags.csv.empty() && !listing && world().rank == 0) csv = std::make_unique<CsvWriter>(flags.csv);
    if (!listing) {
      std::set<int> thread_counts;
      for (const BenchInfo& b : benchmarks)
        if (b.skip_reason.empty()) thread_counts.insert(b.threads);
      machine.sgemm_gflops = measure_sgemm_gflops(machine.cores);
      for (int t : thread_counts) measure_sgemm_gflops(t);
    }
  } catch (const tb::Error& e) {
    std::cerr << "trainbench: error: " << e.what() << "\n";
    return kUsageError;
  }

  Reporter reporter(machine, csv.get());
  sink = &reporter;
  if (world().rank != 0) {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
    benchmark::Shutdown();
    release_sessions();
    return silent.failed > 0 ? 1 : 0;
  }
  std::size_t ran = 0;
  try {
    ran = benchmark::RunSpecifiedBenchmarks(&reporter);
  } catch (const CsvWriteError& e) {
    // Rows that cannot be written are hours lost: stop, and say what is on disk.
    std::cout << std::flush;
    std::cerr << "trainbench: error: " << e.what() << "\n";
    release_sessions();
    return 1;
  }
  benchmark::Shutdown();
  release_sessions();
  if (ran == 0) {
    std::cerr << fmt::format(
        "trainbench: error: no benchmark matches --benchmark_filter='{}'. Names are "
        "<train|epochs>/<model>/<dataset>/<device>/<precision>/bs:<n> with models {}; list them with "
        "--benchmark_list_tests\n",
        flags.benchmark_filter, fmt::join(tb::models::model_names(), ", "));
    return kUsageError;
  }
  if (reporter.failed() > 0) {
    std::cerr << fmt::format("trainbench: {} run(s) failed; see the messages above{}\n", reporter.failed(),
                             csv ? fmt::format(" and the status column of {}", flags.csv) : "");
    return 1;
  }
  return 0;
}

// The benchmarks of one run under Google Benchmark, owned by main: it registers them and, for
// each call of a benchmark's body (one repetition: every train/ benchmark takes its own number of
// steps, bench/run/run.hpp StepBudget), hands the benchmark's run (prepare, warm up, timed steps,
// counters, notes, verdicts, the comparison with its prediction) Google Benchmark's state, and writes the repetition's
// row to the RowLog the moment it ends: the one writer of rows. After a benchmark's last repetition it writes the
// aggregates and asks the predictor's policy for the predicted rows. Between rows it holds what one row needs of
// another: the rates of the baselines and NVML.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "bench/cli/flags.hpp"
#include "bench/output/rows.hpp"
#include "bench/plan/configs.hpp"
#include "bench/predict/predict.hpp"
#include "bench/run/run.hpp"
#include "engine/train/epochs.hpp"

namespace benchmark {
class State;
}

namespace tb::telemetry {
class Nvml;
class GpuSampler;
}  // namespace tb::telemetry

namespace tb::bench {

// The threads a row keeps busy on this host, with `local_ranks` ranks of the run here: each
// replica's (K jobs of T threads, K threads driving K GPUs) and its loader's, in every rank. Counted
// by the row's threads alone, K jobs of cpu:1 were "at most 1 thread", and their own load made
// the next row's verdict "loaded".
int threads_on_this_host(const BenchInfo& info, int local_ranks);

// Whether another process took the CPU from a row ("loaded" in its verdicts), by either of two
// signs, each said once per benchmark on rank 0's `console`.
class LoadCheck {
 public:
  explicit LoadCheck(std::ostream& console) : console_(console) {}
  // A load average read at the start of the row (`load`; negative where it could not be read)
  // above the most threads this run has kept busy so far, plus one.
  bool loaded(const BenchInfo& info, double load, int local_ranks);
  // The row's threads waited for a CPU in its timed steps (`waiting`: Measurement's cpu_waiting),
  // though no more of them than the `cores`: more wait on each other.
  bool waited(const BenchInfo& info, double waiting, int local_ranks, int cores);

 private:
  std::ostream& console_;
  int threads_used_ = 0;               // the most this run has used so far
  std::set<std::string> warned_load_;  // benchmarks whose load was said
  std::set<std::string> warned_wait_;  // benchmarks whose threads' wait for a CPU was said
};

class Harness {
 public:
  // Plans the run's benchmarks (plan_benchmarks: throws tb::InputError on flags that cannot
  // apply) and, where a GPU benchmark can run, loads NVML.
  Harness(const Flags& flags, int cores);
  ~Harness();
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  // Registers every benchmark with Google Benchmark; the harness and `rows` must outlive the
  // run. Every row goes to `rows` as it ends.
  void register_benchmarks(RowLog& rows);
  const std::vector<BenchInfo>& benchmarks() const { return benchmarks_; }
  const BenchInfo* find(const std::string& name) const;
  // The NVIDIA driver's version as NVML reports it ("580.159.04"); empty without NVML.
  std::string nvidia_driver() const;
  // Frees the benchmark kept between Google Benchmark's invocations (before MPI is finalised).
  void release_sessions();
  // What the runs measured for predictions, and the predictions made (bench/predict/predict.hpp).
  Predictor& predictor() { return predictor_; }

 private:
  void run_benchmark(benchmark::State& st, const BenchInfo& info);
  // Under mpirun, how this rank's repetition of `info` ended ("" well, "failed", "stop"), told
  // to every rank (harness.cpp); throws CsvWriteError where rank 0 stopped.
  void finish_together(const BenchInfo& info, const std::string& how);
  // The repetition's row (and the lines its run had for the console), and after the
  // benchmark's last one its aggregates and predictions.
  void write(const BenchInfo& info, const Measurement& measured, std::vector<std::string> lines = {});

  Flags flags_;
  std::vector<BenchInfo> benchmarks_;
  int repetitions_ = 1;  // --benchmark_repetitions: calls of each benchmark
  RowLog* rows_ = nullptr;
  EpochSink on_epoch_;
  std::map<std::string, int> calls_;  // per benchmark, its calls so far
  // The benchmark now running, kept across Google Benchmark's calls of it.
  std::unique_ptr<BenchmarkRun> run_;
  Baselines baselines_;
  LoadCheck load_check_;
  std::set<std::string> said_synthetic_;  // datasets said to be synthetic, under the default ./data
  Predictor predictor_;
  std::unique_ptr<telemetry::Nvml> nvml_;
  std::string nvml_unavailable_;  // why nvml_ is null where GPU rows run
};

}  // namespace tb::bench

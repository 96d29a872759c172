// The benchmarks of one run under Google Benchmark, owned by main: it registers them and, for
// each call of a benchmark's body, hands the benchmark's run (bench/run/run.hpp: prepare, warm up,
// timed steps, counters, report) Google Benchmark's state, then keeps the repetition it
// reported, or the failure that ended it, for the CSV. Between rows it holds what one row needs
// of another: the baselines of scaling efficiency, the timelines predictions are made from, and
// NVML.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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

class Harness {
 public:
  // Plans the run's benchmarks (plan_benchmarks: throws tb::InputError on flags that cannot
  // apply) and, where a GPU benchmark can run, loads NVML.
  Harness(const Flags& flags, int cores);
  ~Harness();
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  // Registers every benchmark with Google Benchmark; the harness and `rows` must outlive the
  // run. Each repetition goes to `rows` once it is known to be final (when the next call of its
  // benchmark starts, or finish_repetition), each epoch as it ends.
  void register_benchmarks(RowLog& rows);
  // The last repetition of `name` is final: Google Benchmark reports its runs (the reporter calls
  // this before it writes the benchmark's aggregates).
  void finish_repetition(const std::string& name);
  const std::vector<BenchInfo>& benchmarks() const { return benchmarks_; }
  const BenchInfo* find(const std::string& name) const;
  // The NVIDIA driver's version as NVML reports it ("580.159.04"); empty without NVML.
  std::string nvidia_driver() const;
  // Frees the benchmark kept between Google Benchmark's invocations (before MPI is finalised).
  void release_sessions();
  // What the runs measured for predictions, and the predictions made (bench/predict/predict.hpp).
  Predictor& predictor() { return predictor_; }

 private:
  // The last call of a benchmark's body, which Google Benchmark may still discard (a call that
  // sized the iteration count) or keep (the last call of a repetition).
  struct Pending {
    std::string name;
    std::int64_t iterations = -1;
    Repetition repetition;
  };

  void run_benchmark(benchmark::State& st, const BenchInfo& info);
  void fail_row(benchmark::State& st, const std::string& message);
  void warn_if_loaded(const BenchInfo& info, double load);

  Flags flags_;
  std::vector<BenchInfo> benchmarks_;
  RowLog* rows_ = nullptr;
  EpochSink on_epoch_;
  Pending pending_;
  // The benchmark now running, kept across Google Benchmark's calls of it.
  std::unique_ptr<BenchmarkRun> run_;
  Baselines baselines_;
  int threads_used_ = 0;               // the most this run has used so far
  std::set<std::string> warned_load_;  // benchmarks whose load was said
  Predictor predictor_;
  std::unique_ptr<telemetry::Nvml> nvml_;
  std::string nvml_unavailable_;  // why nvml_ is null where GPU rows run
};

}  // namespace tb::bench

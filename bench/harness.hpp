// The benchmarks of one run under Google Benchmark, owned by main: it registers them, runs each
// body (a training session kept across Google Benchmark's invocations so that warm-up happens
// once, replicas for data parallelism, whole runs of epochs), makes the checks every run makes
// and fills the counters of its row. It reaches the engines only through engine/backends.hpp,
// the capabilities of engine/core/network.hpp and engine/parallel.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench/configs.hpp"
#include "bench/flags.hpp"
#include "engine/parallel/predict.hpp"
#include "engine/train/epochs.hpp"

namespace benchmark {
class State;
}

namespace tb::telemetry {
class Nvml;
class GpuSampler;
}  // namespace tb::telemetry

namespace tb::bench {

// One repetition of a benchmark as it ended: its counters, iterations, and whether it failed.
struct Repetition {
  std::map<std::string, double> counters;
  std::int64_t iterations = 0;
  bool failed = false;
  std::string message;  // the failure, or an ok row's notes
};

// A predicted N-device row made from a one-device row's timeline (engine/parallel/predict.hpp).
struct PredictedRow {
  std::string device;  // gpu:N or mpi:N
  parallel::Link link;
  parallel::Prediction prediction;
  parallel::StepTimeline timeline;
};

using EpochSink = std::function<void(const BenchInfo&, const EpochRecord&)>;
// Receives each repetition of a benchmark run with several, once it is known to be final (when
// the next one starts), so that an interrupted run keeps every repetition it finished.
using RepetitionSink = std::function<void(const BenchInfo&, const Repetition&)>;

class Harness {
 public:
  // Plans the run's benchmarks (plan_benchmarks: throws tb::InputError on flags that cannot
  // apply) and, where a GPU benchmark can run, loads NVML.
  Harness(const Flags& flags, int cores);
  ~Harness();
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  // Registers every benchmark with Google Benchmark; the harness must outlive the run.
  // `on_epoch` receives each epoch of the epochs/ benchmarks as it ends.
  void register_benchmarks(EpochSink on_epoch, RepetitionSink on_repetition);
  const std::vector<BenchInfo>& benchmarks() const { return benchmarks_; }
  const BenchInfo* find(const std::string& name) const;
  // The NVIDIA driver's version as NVML reports it ("580.159.04"); empty without NVML.
  std::string nvidia_driver() const;
  // Frees the benchmark kept between Google Benchmark's invocations (before MPI is finalised).
  void release_sessions();
  // The link of the MPI world, measured at start-up (a collective: every rank calls it), which
  // --link=measured and CPU rows under mpirun predict with.
  void measure_world_link();
  // Predicted N-device rows for a one-device train row that recorded its timeline and ran at
  // `samples_per_s` (its median); empty where it has none or no link applies.
  std::vector<PredictedRow> predictions(const BenchInfo& info, double samples_per_s) const;

 private:
  struct Session;
  struct ParallelSession;
  // The last call of a benchmark's body, which Google Benchmark may still discard (a call that
  // sized the iteration count) or keep (the last call of a repetition).
  struct Pending {
    std::string name;
    std::int64_t iterations = -1;
    Repetition repetition;
  };

  void run_benchmark(benchmark::State& st, const BenchInfo& info);
  void run_train(benchmark::State& st, const BenchInfo& info);
  void run_parallel(benchmark::State& st, const BenchInfo& info);
  void run_epochs(benchmark::State& st, const BenchInfo& info);
  void run_processes(benchmark::State& st, const BenchInfo& info);
  void fail_row(benchmark::State& st, const std::string& message);

  std::unique_ptr<Session> make_session(const BenchInfo& info);
  Session& train_session(const BenchInfo& info);
  ParallelSession& parallel_session(const BenchInfo& info);
  void prepare_gpus(const BenchInfo& info);
  // NVML's sampler over the row's GPUs; null for a CPU row or without NVML (a note says why).
  std::unique_ptr<telemetry::GpuSampler> sampler_for(const BenchInfo& info, std::vector<std::string>& notes);
  // A GPU precision slower than fp32 in this run says so, and why (empty otherwise).
  std::string note_slower_than_fp32(const BenchInfo& info, double samples_per_s, double step_time_s) const;

  Flags flags_;
  std::vector<BenchInfo> benchmarks_;
  EpochSink on_epoch_;
  RepetitionSink on_repetition_;
  Pending pending_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<ParallelSession> parallel_;
  // The samples/s of each one-device row of this invocation, by what a multi-device row of the
  // same workload compares with: scaling efficiency comes from the same run.
  std::map<std::string, std::vector<double>> single_rates_;  // every repetition's: the median is the baseline
  int threads_used_ = 0;                                     // the most this run has used so far
  std::set<std::string> warned_load_;                        // benchmarks whose load was said
  void warn_if_loaded(const BenchInfo& info, double load);
  std::map<std::string, parallel::StepTimeline> timelines_;  // by benchmark: its last timed steps
  std::optional<parallel::Link> world_link_;
  std::unique_ptr<telemetry::Nvml> nvml_;
  std::string nvml_unavailable_;  // why nvml_ is null where GPU rows run
};

}  // namespace tb::bench

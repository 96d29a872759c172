// Registration of trainbench's benchmarks: one per (kind, model, dataset, device, precision,
// batch), and the benchmark bodies that drive the engine's trainer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/flags.hpp"
#include "bench/replicas.hpp"
#include "datasets/loader.hpp"
#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"
#include "engine/train/epochs.hpp"

namespace tb::bench {

// The static facts of one registered benchmark, also written into its CSV rows.
struct BenchInfo {
  std::string name;  // <kind>/<model>/<dataset>/<device>/<precision>/bs:<n>
  std::string kind;  // "train" or "epochs"
  std::string model, dataset, device, precision;
  std::string data_folder;  // real files, or empty for synthetic data
  std::string data_source;  // the folder, "synthetic" or "generated"
  int threads = 0;
  bool gpu = false;     // a GPU configuration (CUDA backend)
  int gpu_ordinal = 0;  // the CUDA device it runs on
  bool cuda_graph = false, data_on_device = false;
  double gpu_memory_limit = 0;
  Parallel parallel = Parallel::None;
  int replicas = 1;                // replicas in this process (threads)
  std::vector<int> gpu_ordinals;   // one per local replica on GPUs
  i64 batch = 0;                   // per replica
  i64 warmup_steps = 0;
  i64 epochs = 0;
  double target_accuracy = 0;
  data::LoaderConfig loader;
  OptimizerConfig optimizer;
  ModelSpec spec;
  ModelCost cost;
  std::string skip_reason;  // non-empty: registered, reported as skipped with this reason
};

struct DeviceConfig {
  std::string name;  // "cpu", "cpu:2", "gpu:1", "gpu:4", "gpu:1/jobs:2", "mpi:2"
  int threads = 0;   // CPU threads
  bool gpu = false;
  int gpu_ordinal = 0;
  Parallel parallel = Parallel::None;
  int replicas = 1;
  std::vector<int> gpu_ordinals;
  std::string skip_reason;
};

// Parses --devices entries; throws tb::InputError on an unknown device. A configuration this
// machine cannot run is returned with the reason in skip_reason.
std::vector<DeviceConfig> device_configs(const Flags& flags, int cores);
// The precisions registered for a device: --precisions, else fp32 on the CPU and all four on a
// GPU; with the reason a precision is skipped there (empty: it runs).
std::vector<std::pair<std::string, std::string>> device_precisions(const Flags& flags, const DeviceConfig& device);

using EpochSink = std::function<void(const BenchInfo&, const EpochRecord&)>;

// One repetition of a benchmark as it ended: its counters, iterations, and whether it failed.
struct Repetition {
  std::map<std::string, double> counters;
  std::int64_t iterations = 0;
  bool failed = false;
  std::string message;  // the failure, or an ok row's note
};
// Receives each repetition of a benchmark run with several, once it is known to be final (when
// the next one starts), so that an interrupted run keeps every repetition it finished.
using RepetitionSink = std::function<void(const BenchInfo&, const Repetition&)>;

// Registers every benchmark with Google Benchmark; the returned list stays valid for the run.
// `on_epoch` receives each epoch of the epochs/ benchmarks as it ends.
const std::vector<BenchInfo>& register_benchmarks(const Flags& flags, int cores, EpochSink on_epoch,
                                                  RepetitionSink on_repetition);
const BenchInfo* find_benchmark(const std::string& name);
// Frees the benchmark kept between Google Benchmark's invocations (before MPI is finalised).
void release_sessions();

}  // namespace tb::bench

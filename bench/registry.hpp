// Registration of trainbench's benchmarks: one per (model, dataset, device, precision, batch).
#pragma once

#include <string>
#include <vector>

#include "bench/flags.hpp"
#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"

namespace tb::bench {

// The static facts of one registered benchmark, also written into its CSV rows.
struct BenchInfo {
  std::string name;  // train/<model>/<dataset>/<device>/<precision>/bs:<n>
  std::string kind = "train";
  std::string model, dataset, data_source, device, precision;
  int threads = 0;
  i64 batch = 0;
  i64 warmup_steps = 0;
  OptimizerConfig optimizer;
  ModelSpec spec;
  ModelCost cost;
  std::string skip_reason;  // non-empty: registered, reported as skipped with this reason
};

struct DeviceConfig {
  std::string name;  // "cpu", "cpu:2", "gpu:1"
  int threads = 0;   // CPU threads
  std::string skip_reason;
};

// Parses --devices entries; throws tb::InputError on an unknown device.
std::vector<DeviceConfig> device_configs(const Flags& flags, int cores);

// Registers every benchmark with Google Benchmark; the returned list stays valid for the run.
const std::vector<BenchInfo>& register_benchmarks(const Flags& flags, int cores);
const BenchInfo* find_benchmark(const std::string& name);

}  // namespace tb::bench

// What a run registers: one benchmark per (kind, workload, device configuration, precision),
// with the batch, optimizer and data each uses, planned from the flags and this machine before
// anything runs. A configuration the machine cannot run is kept, with the reason, and reported
// as skipped.
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/cli/flags.hpp"
#include "bench/plan/device_kinds.hpp"
#include "bench/schema/row.hpp"
#include "datasets/loader.hpp"
#include "engine/backends.hpp"
#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"
#include "engine/parallel/world.hpp"

namespace tb::bench {

// train: steady-state steps timed by Google Benchmark; epochs: whole epochs from scratch.
enum class Kind { Train, Epochs };
const char* kind_name(Kind kind);

// The static facts of one registered benchmark, also written into its CSV rows.
struct BenchInfo {
  std::string name;  // <kind>/<model>/<dataset>/<device>/<precision>/bs:<n>[/<variant>]
  // Every flag that changes what the row measures and differs from its default, canonically
  // (variant_of): part of the row's identity, so that differently configured runs never merge.
  std::string variant;
  Kind kind = Kind::Train;
  std::string model, dataset, device, precision;
  std::string data_folder;  // real files, or empty for synthetic data
  std::string data_source;  // the folder, "synthetic" or "generated"
  int threads = 0;
  Backend backend = Backend::Cpu;
  int gpu_ordinal = 0;  // the CUDA device it runs on
  bool cuda_graph = false, data_on_device = false;
  std::string gpu_layout = "auto";
  double gpu_memory_limit = 0;              // bytes (> 1), a fraction of the device (<= 1), 0: none
  const DeviceKind* device_kind = nullptr;  // what its device configuration is (device_kinds.hpp)
  int replicas = 1;                         // replicas in this process (threads), or jobs
  std::vector<int> gpu_ordinals;            // one per local replica on GPUs
  int data_parallel = 0;                    // N devices of their own sharing gradients; 0: not a scaling figure
  std::string job_device;                   // jobs rows: the one-device configuration each job runs
  bool emulated_nodes = false;              // ranks of emulated nodes on one machine (world.hpp)
  bool timeline = true;                     // one-device train rows record their bucket timeline
  i64 batch = 0;                            // per replica
  i64 warmup_steps = 0;
  i64 epochs = 0;
  double target_accuracy = 0;
  std::uint64_t seed = 1;  // the weights'
  data::LoaderConfig loader;
  OptimizerConfig optimizer;
  ModelSpec spec;
  ModelCost cost;
  std::string skip_reason;  // non-empty: registered, reported as skipped with this reason
  std::string skip_scope;   // what the reason is about: the device ("gpu:1"), or the device and precision
  // What its figures are over (pair_baselines, plan/baselines.cpp), as benchmark names of this
  // run: the one-device row of scaling efficiency, the cpu row of the speed-up over the CPU and
  // what differs between that pair ("bf16 vs fp32, bs 128 vs 8"). Empty: none in this run.
  std::string baseline, cpu_baseline, speedup_differs;
  std::string fp32_row;   // GPU rows in another precision: the same row in fp32, where the run has it
  std::string plan_note;  // what the plan says of every row of it (batch 1 under batch norm), or ""
  // A replay (--replay_from): the saved one-device row it replays (its benchmark, backend, median
  // samples/s and prediction_inputs), and that row's CSV rows for the prediction made of it.
  struct Replay {
    std::string of, backend, inputs;
    double samples_per_s = 0;
    std::vector<Row> rows{};  // the saved rows replayed
  };
  std::optional<Replay> replay;

  bool gpu() const { return backend == Backend::Cuda; }
  RunKind run() const { return device_kind->run; }
  // Its rows check a path rather than measure (replicas sharing one GPU, GPU ranks as emulated
  // nodes): no speed-up, no scaling.
  bool checks_only() const { return *device_kind->check_word != '\0'; }
};

// The flags a variant names, in the order variant_of writes them (results/SCHEMA.md, `variant`;
// scripts/tbcsv.py VARIANT_FLAGS): each flag's name and what it says.
struct VariantFlag {
  const char* name;
  const char* meaning;
};
const std::vector<VariantFlag>& variant_flags();

// The canonical text of what differs from the defaults in `b` (flags already applied) against
// its workload's defaults: "optimizer:adam/lr:0.001/data_on_device/...", "" for none. The order
// is fixed (results/SCHEMA.md, `variant`).
std::string variant_of(const BenchInfo& b, const OptimizerConfig& workload_optimizer);
// `items` as a variant: in variant_flags()'s order, each once, joined by "/" (tb::Error for an
// item whose flag the table lacks).
std::string join_variant(std::vector<std::string> items);
// `variant` without the items whose flag `drop` names: what two rows compared share.
std::string variant_without(const std::string& variant, std::initializer_list<std::string_view> drop);

// The --devices entries (or the default set) planned by their kinds (device_kinds.hpp); throws
// tb::InputError on an unknown device. A configuration this machine cannot run is returned with
// the reason in skip_reason.
std::vector<DeviceConfig> device_configs(const Flags& flags, int cores);
// The precisions registered for a device: --precisions, else fp32 on the CPU and all four on a
// GPU; with the reason a precision is skipped there (empty: it runs).
std::vector<std::pair<std::string, std::string>> device_precisions(const Flags& flags, const DeviceConfig& device);

// The baselines of every benchmark in `benchmarks` (plan/baselines.cpp): each row's baseline,
// cpu_baseline and speedup_differs, and the order they run in, each baseline before the rows
// compared with it (a stable order otherwise).
void pair_baselines(std::vector<BenchInfo>& benchmarks);

// Every benchmark of this run, in registration order (train/ before epochs/, workloads in their
// order, devices as --devices lists them, a row's baselines before it). Throws tb::InputError on a flag that cannot
// apply here (a --data_dir that is not a folder, a --gpu_memory_limit above a GPU's memory).
std::vector<BenchInfo> plan_benchmarks(const Flags& flags, int cores);

}  // namespace tb::bench

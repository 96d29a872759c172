// Planning a run's benchmarks (configs.hpp) from the flags, the workloads and this machine.
#include "bench/plan/configs.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <set>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "datasets/sources.hpp"
#include "engine/core/error.hpp"
#include "models/models.hpp"

namespace tb::bench {

using parallel::World;
using parallel::world;

const char* kind_name(Kind kind) { return kind == Kind::Train ? "train" : "epochs"; }

namespace {

// A workload's batch on a GPU: its GPU batch, lowered on a device (or under a cap) too small for
// the planned footprint to the largest power of two that fits. Where no GPU can run, the row is
// named (and skipped) at the GPU batch.
i64 gpu_batch(const models::Workload& w, const DeviceConfig& d, const std::string& precision, const Flags& flags) {
  if (w.gpu_batch <= 0) return w.batch;
  const GpuInventory& inv = gpu_inventory();
  if (!d.skip_reason.empty() || d.gpu_ordinal >= int(inv.devices.size())) return w.gpu_batch;
  const double device_bytes = inv.devices[std::size_t(d.gpu_ordinal)].memory_gib * double(1 << 30);
  constexpr double kContext = double(1 << 30);  // the CUDA context and libraries' kernels, outside the cap
  const double cap = flags.gpu_memory_limit > 1   ? flags.gpu_memory_limit
                     : flags.gpu_memory_limit > 0 ? flags.gpu_memory_limit * device_bytes
                                                  : device_bytes - kContext;
  return gpu_batch_that_fits(w.spec, w.gpu_batch, precision, w.optimizer.kind == OptimizerConfig::Kind::Adam,
                             std::size_t(std::max(cap, 0.0)));
}

// Google Benchmark's `/arg:value` convention: the variant ends the name, so that runs with
// different flags never share one.
std::string benchmark_name(const BenchInfo& b) {
  std::string name =
      fmt::format("{}/{}/{}/{}/{}/bs:{}", kind_name(b.kind), b.model, b.dataset, b.device, b.precision, b.batch);
  if (!b.variant.empty()) name += "/" + b.variant;
  return name;
}

}  // namespace

std::vector<DeviceConfig> device_configs(const Flags& flags, int cores) {
  const World& w = world();
  std::vector<std::string> names = flags.devices;
  if (names.empty() && w.size > 1) {
    // The one-device baselines (on rank 0) first, so that the data-parallel rows after them
    // get their scaling efficiency from this invocation.
    const int threads_per_rank = std::max(1, cores / std::max(1, w.local_size));
    names = {fmt::format("cpu:{}", threads_per_rank), fmt::format("mpi:{}", w.size), "gpu:1",
             fmt::format("gpu:{}", w.size)};
  } else if (names.empty()) {
    names = {"cpu"};
    if (cores > 1) names.push_back("cpu:1");
    names.push_back("gpu:1");
    const int gpus = int(gpu_inventory().devices.size());
    for (int n = 2; n <= gpus; ++n) names.push_back(fmt::format("gpu:{}", n));  // scaling from 2 to all
  }
  std::vector<DeviceConfig> out;
  const Machine machine{flags, cores, w, gpu_inventory()};
  for (const std::string& name : names) out.push_back(plan_device(name, machine));
  return out;
}

namespace {
// bf16 from compute capability 8.0 (Ampere), fp16 from 7.0 (Volta), else fp32.
std::string fastest_gpu_precision(const DeviceConfig& d) {
  for (const char* p : {"bf16", "fp16"})
    if (gpu_precision_unsupported(d.gpu_ordinal, p).empty()) return p;
  return "fp32";
}
}  // namespace

const std::vector<VariantFlag>& variant_flags() {
  static const std::vector<VariantFlag> flags{
      {"optimizer", "optimizer:adam or optimizer:sgd, against the workload's own (--optimizer)"},
      {"lr", "lr:0.001, against the workload's own learning rate for its batch (--lr)"},
      {"data_on_device",
       "the dataset prepared once and resident on the device, or for cpu rows in host memory (--data_on_device)"},
      {"cuda_graph", "GPU rows: each step replayed as one CUDA graph (--cuda_graph)"},
      {"gpu_memory_limit", "GPU rows: gpu_memory_limit:0.5 (a fraction) or bytes (--gpu_memory_limit)"},
      {"gpu_layout", "GPU rows: gpu_layout:nhwc or nchw, against auto (--gpu_layout)"},
      {"loader_workers", "loader_workers:2 (--loader_workers)"},
      {"prefetch", "prefetch:4, with loader workers (--prefetch)"},
      {"augment", "CIFAR-10 augmented (--augment)"},
      {"shared_device", "gpu:N whose N replicas share one GPU (--gpus=0,0): a check, not scaling"},
      {"emulated_nodes", "MPI ranks as emulated nodes of one machine (scripts/emulate_nodes.sh)"},
      {"nodes", "nodes:M, ranks (or predicted devices) on M hosts"},
      {"timeline", "timeline:off, no bucket timeline and no predictions (--timeline=off)"},
      {"replayed", "a one-device row's steps replayed across ranks (--replay_from)"},
      {"predicted", "predicted:<link>, a prediction over a link within a node (--link)"},
      {"network", "network:<name>, a prediction's link between nodes (--network)"},
      {"from", "from:<device>, the one-device row a prediction was made from (cpu:1, cpu, gpu:1)"},
  };
  return flags;
}

std::string join_variant(std::vector<std::string> items) {
  const auto& flags = variant_flags();
  const auto rank = [&](const std::string& item) {
    const std::string name = item.substr(0, item.find(':'));
    for (std::size_t k = 0; k < flags.size(); ++k)
      if (name == flags[k].name) return k;
    throw Error(fmt::format("variant item '{}' names no flag of variant_flags() (bench/plan/configs.cpp)", item));
  };
  for (const std::string& item : items) rank(item);  // every item is checked, however many
  std::stable_sort(items.begin(), items.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  items.erase(std::unique(items.begin(), items.end()), items.end());
  return fmt::format("{}", fmt::join(items, "/"));
}

std::string variant_without(const std::string& variant, std::initializer_list<std::string_view> drop) {
  std::vector<std::string> kept;
  std::size_t start = 0;
  while (start < variant.size()) {
    std::size_t slash = variant.find('/', start);
    if (slash == std::string::npos) slash = variant.size();
    const std::string item = variant.substr(start, slash - start);
    const std::string_view flag = std::string_view(item).substr(0, item.find(':'));
    if (!item.empty() && std::find(drop.begin(), drop.end(), flag) == drop.end()) kept.push_back(item);
    start = slash + 1;
  }
  return fmt::format("{}", fmt::join(kept, "/"));
}

std::string variant_of(const BenchInfo& b, const OptimizerConfig& workload) {
  std::vector<std::string> parts;
  if (b.optimizer.kind != workload.kind) parts.push_back(fmt::format("optimizer:{}", optimizer_name(b.optimizer.kind)));
  if (b.optimizer.lr != workload.lr) parts.push_back(fmt::format("lr:{:g}", b.optimizer.lr));
  if (b.data_on_device && b.kind == Kind::Train) parts.emplace_back("data_on_device");
  if (b.gpu()) {
    if (b.cuda_graph) parts.emplace_back("cuda_graph");
    if (b.gpu_memory_limit > 1) parts.push_back(fmt::format("gpu_memory_limit:{:.0f}", b.gpu_memory_limit));  // bytes
    if (b.gpu_memory_limit > 0 && b.gpu_memory_limit <= 1)
      parts.push_back(fmt::format("gpu_memory_limit:{:g}", b.gpu_memory_limit));  // a fraction
    if (b.gpu_layout != "auto") parts.push_back(fmt::format("gpu_layout:{}", b.gpu_layout));
  }
  if (b.loader.workers != 0) parts.push_back(fmt::format("loader_workers:{}", b.loader.workers));
  if (b.loader.workers != 0 && b.loader.prefetch != 2) parts.push_back(fmt::format("prefetch:{}", b.loader.prefetch));
  if (b.loader.augment) parts.emplace_back("augment");
  if (b.device_kind && std::string_view(b.device_kind->check_word) == "shared_device")
    parts.emplace_back("shared_device");
  if (b.emulated_nodes) parts.emplace_back("emulated_nodes");
  if (b.device_kind && b.device_kind->across_ranks && world().nodes > 1)
    parts.push_back(fmt::format("nodes:{}", world().nodes));
  if (!b.timeline) parts.emplace_back("timeline:off");
  return join_variant(parts);
}

std::vector<std::pair<std::string, std::string>> device_precisions(const Flags& flags, const DeviceConfig& d) {
  std::vector<std::string> names = flags.precisions;
  // By default a GPU gets all four, unless it cannot run at all: then one skipped row says why.
  const bool gpu = d.kind->backend == Backend::Cuda;
  if (names.empty() && gpu && d.skip_reason.empty()) names = {"fp32", "tf32", "fp16", "bf16"};
  if (names.empty()) names = {"fp32"};
  // fastest: the quickest precision the device runs (fp32 on the CPU, where it is a duplicate).
  std::vector<std::string> resolved;
  for (const std::string& p : names) {
    const std::string q = p != "fastest" ? p : gpu && d.skip_reason.empty() ? fastest_gpu_precision(d) : "fp32";
    if (std::find(resolved.begin(), resolved.end(), q) == resolved.end()) resolved.push_back(q);
  }
  names = resolved;
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& p : names) {
    std::string reason;
    if (!gpu && p != "fp32")
      reason = fmt::format("the CPU backend trains in fp32 only, not {}", p);
    else if (gpu && d.skip_reason.empty())
      reason = gpu_precision_unsupported(d.gpu_ordinal, p);
    out.emplace_back(p, reason);
  }
  return out;
}

namespace {

// A folder given explicitly must be there: a typo would otherwise measure synthetic data.
// Where the data folder was named: "--data_dir", "TB_DATA_DIR" or "" (the default ./data, which
// may be absent).
std::string data_dir_named_by(const Flags& flags) {
  if (!flags.data_dir.empty()) return "--data_dir";
  if (const char* env = std::getenv("TB_DATA_DIR"); env && *env) return "TB_DATA_DIR";
  return "";
}

// A folder named by the flag or the variable must be one: a typo in TB_DATA_DIR trained every row
// on synthetic data without a word.
void check_data_dir(const std::string& named_by, const std::string& dir) {
  if (named_by.empty()) return;
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec))
    throw InputError(
        fmt::format("{}={}: no such folder (leave it out to train on synthetic data, "
                    "or give the folder that holds mnist/, fashion-mnist/, cifar10/)",
                    named_by, dir));
  if (!std::filesystem::is_directory(dir, ec)) throw InputError(fmt::format("{}={}: is not a folder", named_by, dir));
}

// A cap in bytes above a GPU's memory is a typo (1e30, inf are refused while parsing).
void check_gpu_memory_limit(const Flags& flags, const std::vector<DeviceConfig>& devices) {
  for (const DeviceConfig& d : devices) {
    const GpuInventory& inv = gpu_inventory();
    if (d.kind->backend != Backend::Cuda || !d.skip_reason.empty() || flags.gpu_memory_limit <= 1) continue;
    for (int ordinal : d.gpu_ordinals)
      if (ordinal < int(inv.devices.size()) &&
          flags.gpu_memory_limit > inv.devices[std::size_t(ordinal)].memory_gib * double(1 << 30))
        throw InputError(
            fmt::format("--gpu_memory_limit: {:.0f} bytes is more than CUDA device {}'s {:.1f} GiB; give "
                        "at most that, or a fraction (0.5)",
                        flags.gpu_memory_limit, ordinal, inv.devices[std::size_t(ordinal)].memory_gib));
  }
}

// gpu:1/jobs:K: empty where K jobs' planned memory, each beside its own CUDA context, fits the
// device's free memory now, before any job starts; else the reason, with how many fit.
std::string jobs_memory_skip(const BenchInfo& b) {
  constexpr double kContext = double(1 << 30);  // a CUDA context with cuDNN's and cuBLAS's kernels
  const double plan =
      double(memory_plan(Backend::Cuda, b.spec, b.batch, b.precision, b.optimizer.kind == OptimizerConfig::Kind::Adam)
                 .total());
  const double free_bytes = double(gpu_free_bytes(b.gpu_ordinal)), gib = double(1 << 30);
  const double need = double(b.replicas) * (plan + kContext);
  if (need <= free_bytes) return "";
  return fmt::format(
      "{}: {} jobs of {:.2f} GiB planned (bs {}, {}) and about 1 GiB of CUDA context each need {:.1f} GiB, GPU {} has "
      "{:.1f} GiB free: at most {} such jobs",
      b.device, b.replicas, plan / gib, b.batch, b.precision, need / gib, b.gpu_ordinal, free_bytes / gib,
      int(free_bytes / (plan + kContext)));
}

// Batch norm normalises each channel over the batch and the positions of its map: at batch 1 a
// channel of a 1x1 map has one value (PyTorch refuses to train so), and a few values give noisy
// statistics. Said in the rows; empty where the batch is above 1 or the model has no batch norm.
std::string batch_norm_note(const ModelSpec& spec, i64 batch) {
  if (batch != 1) return "";
  const std::vector<Dims> shapes = infer_shapes(spec, batch);
  i64 fewest = -1;
  for (std::size_t k = 0; k < spec.nodes.size(); ++k) {
    if (!std::holds_alternative<BatchNormSpec>(spec.nodes[k].spec)) continue;
    const Dims& in = shapes.at(std::size_t(spec.nodes[k].inputs.at(0)));
    i64 values = 1;
    for (std::size_t d = 0; d < in.size(); ++d)
      if (d != 1) values *= in[d];
    if (fewest < 0 || values < fewest) fewest = values;
  }
  if (fewest < 0) return "";
  return fmt::format(
      "batch 1 under batch norm: each channel's statistics come from one sample, as few as {} value(s) per channel "
      "(PyTorch refuses to train with one); the loss and the step are not those of a real batch",
      fewest);
}

// The benchmark of workload `w` (its data in `folder`, empty for synthetic) on device
// configuration `d` in `precision`, everything the flags change applied.
BenchInfo make_benchmark(Kind kind, const models::Workload& w, const std::string& folder, const DeviceConfig& d,
                         const std::string& precision, const std::string& precision_skip, const Flags& flags) {
  BenchInfo b;
  b.kind = kind;
  b.model = w.model;
  b.dataset = w.dataset;
  b.data_folder = folder;
  b.data_source = w.spec.task == Task::Regression ? "generated" : folder.empty() ? "synthetic" : folder;
  b.device = d.name;
  b.precision = precision;
  b.threads = d.threads;
  b.backend = d.kind->backend;
  b.gpu_ordinal = d.gpu_ordinal;
  // Replicas run without them (a CUDA graph cannot hold the all-reduces' hook, and a resident
  // dataset is not sharded): their rows say so, not that they applied.
  const bool one_device = d.kind->run != RunKind::Replicas;
  b.cuda_graph = flags.cuda_graph && one_device;
  b.data_on_device = flags.data_on_device && one_device;
  b.gpu_memory_limit = flags.gpu_memory_limit;
  b.device_kind = d.kind;
  b.replicas = d.replicas;
  b.gpu_ordinals = d.gpu_ordinals;
  b.data_parallel = d.data_parallel;
  b.job_device = d.job_device;
  b.emulated_nodes = world().emulated_nodes && d.kind->across_ranks;
  b.timeline = flags.timeline;
  b.batch = flags.batch.value_or(b.gpu() ? gpu_batch(w, d, precision, flags) : w.batch);
  b.warmup_steps = b.kind == Kind::Train ? flags.warmup_steps.value_or(w.warmup_steps) : 0;
  b.epochs = flags.epochs.value_or(w.epochs);
  b.target_accuracy = flags.target_accuracy;
  b.loader = data::LoaderConfig{.batch = b.batch,
                                .workers = flags.loader_workers,
                                .prefetch = flags.prefetch,
                                .shuffle = true,
                                .augment = flags.augment && w.dataset == "cifar10",
                                .seed = flags.seed};
  b.optimizer = w.optimizer_for(b.batch);
  if (flags.optimizer) {
    const bool adam = *flags.optimizer == "adam";
    b.optimizer.kind = adam ? OptimizerConfig::Kind::Adam : OptimizerConfig::Kind::SGD;
    if (!flags.lr) b.optimizer.lr = adam ? 1e-3 : 0.01;
  }
  if (flags.lr) b.optimizer.lr = *flags.lr;
  b.seed = flags.seed;
  b.gpu_layout = flags.gpu_layout;
  b.spec = w.spec;
  b.cost = model_cost(w.spec);
  b.skip_reason = d.skip_reason.empty() ? precision_skip : d.skip_reason;
  if (b.skip_reason.empty() && b.gpu() && b.run() == RunKind::Processes && kind == Kind::Train)
    b.skip_reason = jobs_memory_skip(b);
  // An epochs/ run trains one replica (run_epochs.cpp): on a device of several it was written as
  // that device's row, cpu:1's losses under mpi:2's name.
  if (b.skip_reason.empty() && kind == Kind::Epochs && d.kind->run != RunKind::OneReplica)
    b.skip_reason = fmt::format("{}: epochs/ rows train one replica; train/ rows measure {}", d.name, d.name);
  // A regression has no accuracy to reach: its epochs failed "accuracy -1 never reached the target".
  if (b.skip_reason.empty() && kind == Kind::Epochs && b.target_accuracy > 0 && w.spec.task == Task::Regression)
    b.skip_reason = fmt::format(
        "--target_accuracy: {}/{} is a regression, with no accuracy to reach (the "
        "classifiers' epochs take it)",
        w.model, w.dataset);
  b.skip_scope = d.skip_reason.empty() ? d.name + " " + precision : d.name;
  b.variant = variant_of(b, w.optimizer_for(b.batch));
  b.name = benchmark_name(b);
  if (b.skip_reason.empty()) b.plan_note = batch_norm_note(b.spec, b.batch);
  return b;
}

}  // namespace

std::vector<BenchInfo> plan_benchmarks(const Flags& flags, int cores) {
  std::vector<BenchInfo> benchmarks;
  const std::string dir = data::data_dir(flags.data_dir);
  const std::string named_by = data_dir_named_by(flags);
  check_data_dir(named_by, dir);
  const auto devices = device_configs(flags, cores);
  check_gpu_memory_limit(flags, devices);
  std::set<std::string> noted;  // datasets absent under --data_dir, said once
  for (const Kind kind : {Kind::Train, Kind::Epochs}) {
    for (const models::Workload& w : models::workloads()) {
      const std::string folder = data::find_dataset(w.dataset, dir);
      // Under a folder named explicitly, a dataset it lacks is said once (its rows say
      // "synthetic" in data_source).
      if (!named_by.empty() && folder.empty() && data::has_files(w.dataset) && !w.real_data_only &&
          noted.insert(w.dataset).second)
        std::cerr << fmt::format("trainbench: note: no {}/ under {}={}: its rows train on synthetic data\n", w.dataset,
                                 named_by, dir);
      if (w.real_data_only && folder.empty()) continue;
      for (const DeviceConfig& d : devices)
        for (const auto& [precision, precision_skip] : device_precisions(flags, d))
          benchmarks.push_back(make_benchmark(kind, w, folder, d, precision, precision_skip, flags));
    }
  }
  // Two configurations that come to one name (gpu:all beside gpu:2 on two GPUs) would be pooled as
  // repetitions of one row, the second never run.
  std::set<std::string> names;
  for (const BenchInfo& b : benchmarks)
    if (!names.insert(b.name).second)
      throw InputError(fmt::format("--devices: two of its configurations are both {} here: give it once", b.name));
  pair_baselines(benchmarks);
  return benchmarks;
}

}  // namespace tb::bench

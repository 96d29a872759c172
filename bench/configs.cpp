// Planning a run's benchmarks (configs.hpp) from the flags, the workloads and this machine.
#include "bench/configs.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "datasets/sources.hpp"
#include "engine/core/error.hpp"
#include "models/models.hpp"

namespace tb::bench {

using parallel::Mode;
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

int parse_count(const std::string& name, const std::string& text, const char* example) {
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1)
    throw InputError(fmt::format("--devices: '{}' needs a count >= 1, e.g. {}", name, example));
  return n;
}

// The device every --gpus entry names when the list repeats one (--gpus=0,0: replicas sharing
// device 0), else -1. A list that repeats some ordinals but not all is refused.
int shared_gpus_ordinal(const Flags& flags) {
  std::vector<int> sorted = flags.gpus;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) return -1;
  if (sorted.front() != sorted.back())
    throw InputError(
        fmt::format("--gpus={}: an ordinal appears twice among others; list distinct devices (--gpus=0,1) for "
                    "gpu:N on N GPUs, or one device repeated (--gpus=0,0) for N replicas sharing it",
                    fmt::join(flags.gpus, ",")));
  if (world().size > 1)
    throw InputError(
        fmt::format("--gpus={}: replicas sharing one GPU run in one process; start trainbench without mpirun",
                    fmt::join(flags.gpus, ",")));
  return sorted.front();
}

// gpu:all: gpu:N for every GPU the run may use (the --gpus entries, else the visible devices);
// skipped, with the reason, where that is fewer than two.
std::string resolve_gpu_all(DeviceConfig& d, const Flags& flags) {
  const GpuInventory& inv = gpu_inventory();
  const int n = !flags.gpus.empty() ? int(flags.gpus.size()) : int(inv.devices.size());
  if (n >= 2) return fmt::format("gpu:{}", n);
  d.backend = Backend::Cuda;
  d.threads = 1;
  d.skip_reason = !inv.unavailable.empty()
                      ? fmt::format("gpu:all: {}", inv.unavailable)
                      : fmt::format(
                            "gpu:all: this machine has {} GPU, gpu:N needs two or more (--gpus=0,0 runs gpu:2 as "
                            "two replicas on one GPU: a correctness check, not scaling)",
                            n);
  return "";
}

// gpu:N (N GPUs of this process, or under mpirun one GPU per rank) and gpu:1/jobs:K.
void gpu_config(DeviceConfig& d, const Flags& flags) {
  const std::string& name = d.name;
  // gpu:1/jobs:K: K processes sharing the GPU (story 000); gpu:1/threads:K: K threads of this one.
  const std::size_t slash = name.find('/');
  const bool processes = name.find("/jobs:") != std::string::npos;
  const int gpus =
      parse_count(name, name.substr(4, slash == std::string::npos ? std::string::npos : slash - 4), "gpu:1");
  int jobs = 0;
  if (slash != std::string::npos) {
    const std::string kind = processes ? "/jobs:" : "/threads:";
    if (name.compare(slash, kind.size(), kind) != 0)
      throw InputError(fmt::format("--devices: '{}': use gpu:1/jobs:K (processes) or gpu:1/threads:K", name));
    jobs = parse_count(name, name.substr(slash + kind.size()), processes ? "gpu:1/jobs:2" : "gpu:1/threads:2");
  }
  if (jobs && gpus != 1) throw InputError(fmt::format("--devices: '{}': jobs share one GPU, e.g. gpu:1/jobs:2", name));
  const World& w = world();
  d.threads = 1;  // one host thread drives each GPU
  d.backend = Backend::Cuda;
  // Under mpirun, gpu:N (N > 1) is one GPU per rank; gpu:1 is rank 0's one-GPU baseline.
  const bool across_ranks = w.size > 1 && gpus > 1;
  const int local_gpus = across_ranks ? 1 : gpus;
  // --gpus=0,0: gpu:N runs its N replicas on device 0 (shared_gpus_ordinal checked the list).
  const int shared = shared_gpus_ordinal(flags);
  if (shared >= 0 && !jobs && local_gpus > 1) {
    d.shared_device = true;
    if (local_gpus > int(flags.gpus.size()))
      d.skip_reason = fmt::format("{} with --gpus={}: give one entry per replica sharing device {}, e.g. --gpus={}",
                                  name, fmt::join(flags.gpus, ","), shared,
                                  fmt::join(std::vector<int>(std::size_t(local_gpus), shared), ","));
  }
  std::vector<int> ordinals = flags.gpus;
  for (int k = int(ordinals.size()); k < std::max(local_gpus, w.local_rank + 1); ++k) ordinals.push_back(k);
  if (across_ranks) ordinals = {ordinals[std::size_t(w.local_rank)]};  // this rank's GPU
  ordinals.resize(std::size_t(local_gpus));
  d.gpu_ordinal = ordinals[0];
  d.replicas = jobs ? jobs : local_gpus;
  d.gpu_ordinals = jobs ? std::vector<int>(std::size_t(jobs), ordinals[0]) : ordinals;
  d.parallel = jobs && processes ? Mode::Processes
               : jobs            ? Mode::Jobs
               : across_ranks    ? Mode::NcclMpi
               : d.shared_device ? Mode::SharedDevice
               : gpus > 1        ? Mode::NcclThreads
                                 : Mode::None;
  const GpuInventory& inv = gpu_inventory();
  const int highest = *std::max_element(ordinals.begin(), ordinals.end());
  if (!d.skip_reason.empty())
    return;
  else if (!inv.unavailable.empty())
    d.skip_reason = fmt::format("{}: {}", name, inv.unavailable);
  else if (across_ranks && gpus != w.size)
    d.skip_reason = fmt::format(
        "{}: under mpirun -np {} the GPU configurations are gpu:1 (rank 0) and gpu:{} (one "
        "GPU per rank)",
        name, w.size, w.size);
  else if (!across_ranks && !d.shared_device && gpus > int(inv.devices.size()))
    d.skip_reason = fmt::format("{} needs {} GPUs, this machine has {}", name, gpus, inv.devices.size());
  else if (highest >= int(inv.devices.size()))
    d.skip_reason = fmt::format(
        "{}: CUDA device {} (--gpus, or the rank's local index) does not exist; this machine "
        "has devices 0 to {}",
        name, highest, int(inv.devices.size()) - 1);
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
  for (const std::string& name : names) {
    DeviceConfig d;
    d.name = name;
    if (name == "cpu") {
      d.threads = cores;
    } else if (name.rfind("cpu:", 0) == 0 && name.find("/jobs:") != std::string::npos) {
      // cpu:T/jobs:K: K processes of T threads each, sharing this machine's cores.
      const std::size_t slash = name.find('/');
      d.threads = parse_count(name, name.substr(4, slash - 4), "cpu:1/jobs:2");
      d.replicas = parse_count(name, name.substr(slash + 6), "cpu:1/jobs:2");
      d.parallel = Mode::Processes;
      // Checked before any process starts: a typo (jobs:100000) must not start them.
      if (d.threads * std::int64_t(d.replicas) > cores)
        d.skip_reason =
            fmt::format("{}: {} jobs of {} thread(s) need {} cores, this machine has {}: at most {} such jobs", name,
                        d.replicas, d.threads, d.threads * std::int64_t(d.replicas), cores, cores / d.threads);
    } else if (name.rfind("cpu:", 0) == 0) {
      d.threads = parse_count(name, name.substr(4), "cpu:2");
      if (d.threads > cores)
        d.skip_reason = fmt::format("{} needs {} cores, this machine has {}", name, d.threads, cores);
    } else if (name == "gpu:all") {
      d.name = resolve_gpu_all(d, flags);
      if (d.name.empty())
        d.name = name;  // skipped: the reason says why
      else
        gpu_config(d, flags);
    } else if (name.rfind("gpu:", 0) == 0) {
      gpu_config(d, flags);
    } else if (name.rfind("mpi:", 0) == 0) {
      const int ranks = parse_count(name, name.substr(4), "mpi:2");
      d.parallel = Mode::Mpi;
      d.threads = std::max(1, cores / std::max(1, w.local_size));  // the node's cores shared by its ranks
      if (w.size == 1)
        d.skip_reason = fmt::format("{}: start trainbench with mpirun -np {} for MPI data parallelism", name, ranks);
      else if (ranks != w.size)
        d.skip_reason = fmt::format("{}: this job has {} ranks (mpi:{})", name, w.size, w.size);
    } else {
      throw InputError(
          fmt::format("--devices: unknown device '{}'; use cpu, cpu:N, cpu:T/jobs:K, gpu:N, gpu:all, gpu:1/jobs:K, "
                      "gpu:1/threads:K or mpi:N",
                      name));
    }
    if (w.size > 1 && (d.parallel == Mode::Jobs || d.parallel == Mode::NcclThreads || d.parallel == Mode::Processes) &&
        d.skip_reason.empty())
      d.skip_reason = fmt::format("{} runs in one process: start it without mpirun", name);
    out.push_back(d);
  }
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

std::string variant_of(const BenchInfo& b, const OptimizerConfig& workload) {
  std::vector<std::string> parts;
  if (b.optimizer.kind != workload.kind) parts.push_back(fmt::format("optimizer:{}", optimizer_name(b.optimizer.kind)));
  if (b.optimizer.lr != workload.lr) parts.push_back(fmt::format("lr:{:g}", b.optimizer.lr));
  if (b.gpu()) {
    if (b.data_on_device && b.kind == Kind::Train) parts.emplace_back("data_on_device");
    if (b.cuda_graph) parts.emplace_back("cuda_graph");
    if (b.gpu_memory_limit > 1) parts.push_back(fmt::format("gpu_memory_limit:{:.0f}", b.gpu_memory_limit));  // bytes
    if (b.gpu_memory_limit > 0 && b.gpu_memory_limit <= 1)
      parts.push_back(fmt::format("gpu_memory_limit:{:g}", b.gpu_memory_limit));  // a fraction
    if (b.gpu_layout != "auto") parts.push_back(fmt::format("gpu_layout:{}", b.gpu_layout));
  }
  if (b.loader.workers != 0) parts.push_back(fmt::format("loader_workers:{}", b.loader.workers));
  if (b.loader.workers != 0 && b.loader.prefetch != 2) parts.push_back(fmt::format("prefetch:{}", b.loader.prefetch));
  if (b.loader.augment) parts.emplace_back("augment");
  if (b.shared_device) parts.emplace_back("shared_device");
  if (b.emulated_nodes) parts.emplace_back("emulated_nodes");
  if (!b.timeline) parts.emplace_back("timeline:off");
  return fmt::format("{}", fmt::join(parts, "/"));
}

std::vector<std::pair<std::string, std::string>> device_precisions(const Flags& flags, const DeviceConfig& d) {
  std::vector<std::string> names = flags.precisions;
  // By default a GPU gets all four, unless it cannot run at all: then one skipped row says why.
  const bool gpu = d.backend == Backend::Cuda;
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
void check_data_dir(const Flags& flags, const std::string& dir) {
  if (flags.data_dir.empty()) return;
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec))
    throw InputError(
        fmt::format("--data_dir={}: no such folder (leave the flag out to train on synthetic data, "
                    "or give the folder that holds mnist/, fashion-mnist/, cifar10/)",
                    dir));
  if (!std::filesystem::is_directory(dir, ec)) throw InputError(fmt::format("--data_dir={}: is not a folder", dir));
}

// A cap in bytes above a GPU's memory is a typo (1e30, inf are refused while parsing).
void check_gpu_memory_limit(const Flags& flags, const std::vector<DeviceConfig>& devices) {
  for (const DeviceConfig& d : devices) {
    const GpuInventory& inv = gpu_inventory();
    if (d.backend != Backend::Cuda || !d.skip_reason.empty() || flags.gpu_memory_limit <= 1) continue;
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
  b.backend = d.backend;
  b.gpu_ordinal = d.gpu_ordinal;
  // Replicas run without them (a CUDA graph cannot hold the all-reduces' hook, and a resident
  // dataset is not sharded): their rows say so, not that they applied.
  const bool one_device = d.parallel == Mode::None || d.parallel == Mode::Processes;
  b.cuda_graph = flags.cuda_graph && one_device;
  b.data_on_device = flags.data_on_device && one_device;
  b.gpu_memory_limit = flags.gpu_memory_limit;
  b.parallel = d.parallel;
  b.replicas = d.replicas;
  b.gpu_ordinals = d.gpu_ordinals;
  b.shared_device = d.shared_device;
  b.emulated_nodes = world().emulated_nodes && parallel::spans_ranks(d.parallel);
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
  if (b.skip_reason.empty() && b.gpu() && b.parallel == Mode::Processes && kind == Kind::Train)
    b.skip_reason = jobs_memory_skip(b);
  b.skip_scope = d.skip_reason.empty() ? d.name + " " + precision : d.name;
  b.variant = variant_of(b, w.optimizer_for(b.batch));
  b.name = benchmark_name(b);
  return b;
}

}  // namespace

std::vector<BenchInfo> plan_benchmarks(const Flags& flags, int cores) {
  std::vector<BenchInfo> benchmarks;
  const std::string dir = data::data_dir(flags.data_dir);
  check_data_dir(flags, dir);
  const auto devices = device_configs(flags, cores);
  check_gpu_memory_limit(flags, devices);
  std::set<std::string> noted;  // datasets absent under --data_dir, said once
  for (const Kind kind : {Kind::Train, Kind::Epochs}) {
    for (const models::Workload& w : models::workloads()) {
      const std::string folder = data::find_dataset(w.dataset, dir);
      // Under a --data_dir given explicitly, a dataset it lacks is said once (its rows say
      // "synthetic" in data_source).
      if (!flags.data_dir.empty() && folder.empty() && data::has_files(w.dataset) && !w.real_data_only &&
          noted.insert(w.dataset).second)
        std::cerr << fmt::format("trainbench: note: no {}/ under --data_dir={}: its rows train on synthetic data\n",
                                 w.dataset, dir);
      if (w.real_data_only && folder.empty()) continue;
      for (const DeviceConfig& d : devices)
        for (const auto& [precision, precision_skip] : device_precisions(flags, d))
          benchmarks.push_back(make_benchmark(kind, w, folder, d, precision, precision_skip, flags));
    }
  }
  return benchmarks;
}

}  // namespace tb::bench

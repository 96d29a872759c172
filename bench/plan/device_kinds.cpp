// The table of device kinds (device_kinds.hpp): each kind's grammar, needs, counts, wiring and
// label, one entry each, tried in order.
#include "bench/plan/device_kinds.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"

namespace tb::bench {

namespace {

constexpr const char* kGrammar = "cpu, cpu:T, cpu:T/jobs:K, gpu:N, gpu:all, gpu:1/jobs:K, gpu:1/threads:K or mpi:N";

int parse_count(const std::string& entry, const std::string& text) {
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc::result_out_of_range)
    throw InputError(fmt::format("--devices: '{}': {} is more than any machine has (use {})", entry, text, kGrammar));
  if (ec != std::errc() || end != text.data() + text.size() || n < 1)
    throw InputError(
        fmt::format("--devices: '{}' needs a count >= 1 where it has '{}' (use {})", entry, text, kGrammar));
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
  return sorted.front();
}

// ---- what kinds ask of the machine ----

// Why no GPU row can run here, or a --gpus ordinal the machine lacks; empty where all is well.
std::string gpu_missing(const DeviceConfig& d, const Machine& m) {
  if (!m.gpus.unavailable.empty()) return fmt::format("{}: {}", d.name, m.gpus.unavailable);
  const int highest = *std::max_element(d.gpu_ordinals.begin(), d.gpu_ordinals.end());
  if (highest >= int(m.gpus.devices.size()))
    return fmt::format(
        "{}: CUDA device {} (--gpus, or the rank's local index) does not exist; this machine has devices 0 to {}",
        d.name, highest, int(m.gpus.devices.size()) - 1);
  return "";
}

// The --gpus entries, else 0, 1, ...: the first `n` of them.
std::vector<int> first_gpus(const Flags& flags, int n) {
  std::vector<int> ordinals = flags.gpus;
  for (int k = int(ordinals.size()); k < n; ++k) ordinals.push_back(k);
  ordinals.resize(std::size_t(n));
  return ordinals;
}

void one_gpu(DeviceConfig& d, const std::vector<int>& ordinals) {
  d.threads = 1;  // the host thread that drives it
  d.gpu_ordinals = ordinals;
  d.gpu_ordinal = ordinals.at(0);
  d.replicas = int(ordinals.size());
}

bool is(const DeviceEntry& e, const char* device, const char* split = "") {
  return e.device == device && e.split == split;
}

// ---- the kinds ----

bool cpu_matches(const DeviceEntry& e, const Machine&) { return is(e, "cpu") && e.count == 0 && !e.all; }
void cpu_configure(const DeviceEntry&, const Machine& m, DeviceConfig& d) { d.threads = m.cores; }

bool cpu_threads_matches(const DeviceEntry& e, const Machine&) { return is(e, "cpu") && e.count > 0; }
void cpu_threads_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  d.threads = e.count;
  if (e.count > m.cores)
    d.skip_reason = fmt::format("{} needs {} cores, this machine has {}{}", d.name, e.count, m.cores,
                                m.world.size > 1 ? " (under mpirun, those its rank is bound to: --bind-to none)" : "");
}

bool cpu_jobs_matches(const DeviceEntry& e, const Machine&) { return is(e, "cpu", "jobs") && e.count > 0; }
void cpu_jobs_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  d.threads = e.count;
  d.replicas = e.split_count;
  d.job_device = fmt::format("cpu:{}", e.count);
  // Checked before any process starts: a typo (jobs:100000) must not start them.
  const std::int64_t need = std::int64_t(e.count) * e.split_count;
  if (need > m.cores)
    d.skip_reason = fmt::format("{}: {} jobs of {} thread(s) need {} cores, this machine has {}{}", d.name,
                                e.split_count, e.count, need, m.cores,
                                m.cores / e.count > 0 ? fmt::format(": at most {} such jobs", m.cores / e.count)
                                                      : fmt::format(": one job of {} threads does not fit", e.count));
}

// The GPU of this rank: its own among --gpus (or its node-local index) under mpirun, where each
// rank has one; the first elsewhere, and for emulated nodes, which all share it.
int own_gpu(const Machine& m) {
  if (m.world.size == 1 || m.world.emulated_nodes) return first_gpus(m.flags, 1).at(0);
  return first_gpus(m.flags, m.world.local_rank + 1).at(std::size_t(m.world.local_rank));
}

bool gpu_one_matches(const DeviceEntry& e, const Machine&) { return is(e, "gpu") && e.count == 1; }
void gpu_one_configure(const DeviceEntry&, const Machine& m, DeviceConfig& d) {
  one_gpu(d, {own_gpu(m)});  // under mpirun rank 0's row; the other ranks' probe on their own
  d.skip_reason = gpu_missing(d, m);
}

bool gpu_nccl_matches(const DeviceEntry& e, const Machine& m) {
  return is(e, "gpu") && e.count >= 2 && m.world.size == 1 && shared_gpus_ordinal(m.flags) < 0;
}
void gpu_nccl_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  one_gpu(d, first_gpus(m.flags, e.count));
  const int listed = int(m.flags.gpus.size());
  if (m.gpus.unavailable.empty() && e.count > int(m.gpus.devices.size()))
    d.skip_reason = fmt::format("{} needs {} GPUs, this machine has {}", d.name, e.count, m.gpus.devices.size());
  else if (listed > 0 && e.count > listed)
    // first_gpus would fill the rest with 0, 1, ...: --gpus=1 made gpu:2 two NCCL ranks on GPU 1.
    d.skip_reason = fmt::format(
        "{} with --gpus={}: --gpus names {} device(s) for {} replicas; list {} distinct devices "
        "or leave --gpus out",
        d.name, fmt::join(m.flags.gpus, ","), listed, e.count, e.count);
  else
    d.skip_reason = gpu_missing(d, m);
}

bool gpu_shared_matches(const DeviceEntry& e, const Machine& m) {
  return is(e, "gpu") && e.count >= 2 && m.world.size == 1 && shared_gpus_ordinal(m.flags) >= 0;
}
void gpu_shared_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  const int shared = shared_gpus_ordinal(m.flags);
  one_gpu(d, std::vector<int>(std::size_t(e.count), shared));
  if (e.count > int(m.flags.gpus.size()))
    d.skip_reason = fmt::format("{} with --gpus={}: give one entry per replica sharing device {}, e.g. --gpus={}",
                                d.name, fmt::join(m.flags.gpus, ","), shared,
                                fmt::join(std::vector<int>(std::size_t(e.count), shared), ","));
  else
    d.skip_reason = gpu_missing(d, m);
}

// Under mpirun -np N: the one GPU of this rank, the rank's own among --gpus (or its node-local
// index).
bool gpu_ranks_matches(const DeviceEntry& e, const Machine& m) {
  return is(e, "gpu") && e.count >= 2 && m.world.size > 1;
}
void gpu_ranks_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  if (shared_gpus_ordinal(m.flags) >= 0)
    throw InputError(fmt::format(
        "--gpus={}: replicas sharing one GPU run in one process; start trainbench without mpirun (ranks sharing one "
        "GPU run as emulated nodes: scripts/emulate_nodes.sh --gpu N)",
        fmt::join(m.flags.gpus, ",")));
  one_gpu(d, {own_gpu(m)});
  if (e.count != m.world.size)
    d.skip_reason =
        fmt::format("{}: under mpirun -np {} the GPU configurations are gpu:1 (rank 0) and gpu:{} (one GPU per rank)",
                    d.name, m.world.size, m.world.size);
  else
    d.skip_reason = gpu_missing(d, m);
}

// Ranks as emulated nodes sharing one GPU (scripts/emulate_nodes.sh --gpu N gives each its own
// NCCL_HOSTID): every rank on the same, explicit GPU.
bool gpu_emulated_matches(const DeviceEntry& e, const Machine& m) {
  return is(e, "gpu") && e.count >= 2 && m.world.size > 1 && m.world.emulated_nodes;
}
void gpu_emulated_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  one_gpu(d, {own_gpu(m)});
  if (e.count != m.world.size)
    d.skip_reason =
        fmt::format("{}: {} ranks as emulated nodes run gpu:1 (rank 0) and gpu:{}", d.name, m.world.size, m.world.size);
  else
    d.skip_reason = gpu_missing(d, m);
}

bool gpu_threads_matches(const DeviceEntry& e, const Machine&) { return is(e, "gpu", "threads") && e.count == 1; }
void gpu_threads_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  one_gpu(d, std::vector<int>(std::size_t(e.split_count), first_gpus(m.flags, 1).at(0)));
  d.skip_reason = gpu_missing(d, m);
}

bool gpu_jobs_matches(const DeviceEntry& e, const Machine&) { return is(e, "gpu", "jobs") && e.count == 1; }
void gpu_jobs_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  one_gpu(d, std::vector<int>(std::size_t(e.split_count), first_gpus(m.flags, 1).at(0)));
  d.job_device = "gpu:1";
  d.skip_reason = gpu_missing(d, m);  // their memory is checked per workload (configs.cpp)
}

bool mpi_matches(const DeviceEntry& e, const Machine&) { return is(e, "mpi") && e.count > 0; }
void mpi_configure(const DeviceEntry& e, const Machine& m, DeviceConfig& d) {
  d.threads = std::max(1, m.cores / std::max(1, m.world.local_size));  // the node's cores shared by its ranks
  if (e.count == 1)
    d.skip_reason = fmt::format(
        "{}: one rank all-reduces with no one: mpi:N takes N >= 2 ranks (one process on "
        "the CPU is cpu or cpu:T)",
        d.name);
  else if (m.world.size == 1)
    d.skip_reason = fmt::format("{}: start trainbench with mpirun -np {} for MPI data parallelism", d.name, e.count);
  else if (e.count != m.world.size)
    d.skip_reason = fmt::format("{}: this job has {} ranks (mpi:{})", d.name, m.world.size, m.world.size);
}

using parallel::mpi_wiring, parallel::nccl_ranks_wiring, parallel::nccl_threads_wiring, parallel::shared_device_wiring;
constexpr Backend kCpu = Backend::Cpu, kGpu = Backend::Cuda;
constexpr RunKind kOne = RunKind::OneReplica, kReplicas = RunKind::Replicas, kProcesses = RunKind::Processes;

// Tried in this order. Fields left out keep their defaults: no wiring, in one process of its own
// under no mpirun, devices of their own, no check word.
const std::vector<DeviceKind> kKinds{
    {.name = "cpu",
     .grammar = "cpu",
     .pattern = "^cpu$",
     .label = "all of this machine's cores, one replica",
     .backend = kCpu,
     .run = kOne,
     .matches = cpu_matches,
     .configure = cpu_configure},
    {.name = "cpu:T",
     .grammar = "cpu:T",
     .pattern = "^cpu:(?P<threads>[0-9]+)$",
     .label = "T threads, one replica",
     .backend = kCpu,
     .run = kOne,
     .matches = cpu_threads_matches,
     .configure = cpu_threads_configure},
    {.name = "cpu:T/jobs:K",
     .grammar = "cpu:T/jobs:K",
     .pattern = "^cpu:(?P<threads>[0-9]+)/jobs:(?P<jobs>[0-9]+)$",
     .label = "K separate processes of T threads each, timed on one window",
     .backend = kCpu,
     .run = kProcesses,
     .matches = cpu_jobs_matches,
     .configure = cpu_jobs_configure,
     .one_process = true},
    {.name = "gpu:1",
     .grammar = "gpu:1",
     .pattern = "^gpu:1$",
     .label = "one GPU, one replica",
     .backend = kGpu,
     .run = kOne,
     .matches = gpu_one_matches,
     .configure = gpu_one_configure},
    {.name = "gpu:N over NCCL",
     .grammar = "gpu:N (N >= 2), gpu:all",
     .pattern = "^gpu:(?P<devices>[0-9]+)$",
     .label = "N GPUs of this process, a thread each, gradients all-reduced by NCCL",
     .backend = kGpu,
     .run = kReplicas,
     .matches = gpu_nccl_matches,
     .configure = gpu_nccl_configure,
     .wiring = nccl_threads_wiring,
     .one_process = true},
    {.name = "gpu:N sharing one GPU",
     .grammar = "gpu:N with --gpus=D,D,...",
     .pattern = "^gpu:(?P<devices>[0-9]+)$",
     .label = "N replicas on one GPU averaged by a kernel: checks the data-parallel path, not scaling",
     .backend = kGpu,
     .run = kReplicas,
     .matches = gpu_shared_matches,
     .configure = gpu_shared_configure,
     .wiring = shared_device_wiring,
     .one_process = true,
     .shares_device = true,
     .check_word = "shared_device"},
    {.name = "gpu:N as emulated nodes",
     .grammar = "gpu:N under scripts/emulate_nodes.sh --gpu N",
     .pattern = "^gpu:(?P<devices>[0-9]+)$",
     .label = "N ranks as emulated nodes sharing one GPU over NCCL's socket transport: checks the multi-node path, "
              "not scaling",
     .backend = kGpu,
     .run = kReplicas,
     .matches = gpu_emulated_matches,
     .configure = gpu_emulated_configure,
     .wiring = nccl_ranks_wiring,
     .across_ranks = true,
     .shares_device = true,
     .check_word = "emulated_nodes"},
    {.name = "gpu:N across ranks",
     .grammar = "gpu:N under mpirun -np N",
     .pattern = "^gpu:(?P<devices>[0-9]+)$",
     .label = "one GPU per MPI rank, NCCL bootstrapped over MPI",
     .backend = kGpu,
     .run = kReplicas,
     .matches = gpu_ranks_matches,
     .configure = gpu_ranks_configure,
     .wiring = nccl_ranks_wiring,
     .across_ranks = true},
    {.name = "gpu:1/threads:K",
     .grammar = "gpu:1/threads:K",
     .pattern = "^gpu:1/threads:(?P<replicas>[0-9]+)$",
     .label = "K independent replicas as threads of one process sharing one GPU",
     .backend = kGpu,
     .run = kReplicas,
     .matches = gpu_threads_matches,
     .configure = gpu_threads_configure,
     .one_process = true,
     .shares_device = true},
    {.name = "gpu:1/jobs:K",
     .grammar = "gpu:1/jobs:K",
     .pattern = "^gpu:1/jobs:(?P<jobs>[0-9]+)$",
     .label = "K separate processes sharing one GPU, timed on one window",
     .backend = kGpu,
     .run = kProcesses,
     .matches = gpu_jobs_matches,
     .configure = gpu_jobs_configure,
     .one_process = true,
     .shares_device = true},
    {.name = "mpi:N",
     .grammar = "mpi:N under mpirun -np N",
     .pattern = "^mpi:(?P<ranks>[0-9]+)$",
     .label = "one CPU replica per MPI rank, MPI all-reduce",
     .backend = kCpu,
     .run = kReplicas,
     .matches = mpi_matches,
     .configure = mpi_configure,
     .wiring = mpi_wiring,
     .across_ranks = true},
};

// gpu:all: gpu:N for every GPU the run may use (the --gpus entries, else the visible devices);
// 0 where that is fewer than two.
int all_gpus(const Machine& m) {
  const int n = !m.flags.gpus.empty() ? int(m.flags.gpus.size()) : int(m.gpus.devices.size());
  return n >= 2 ? n : 0;
}

}  // namespace

const std::vector<DeviceKind>& device_kinds() { return kKinds; }

const DeviceKind& kind_named(std::string_view name) {
  for (const DeviceKind& k : kKinds)
    if (name == k.name) return k;
  throw Error(fmt::format("no device kind named {}", name));
}

DeviceEntry parse_device_entry(const std::string& text) {
  DeviceEntry e{.text = text};
  const std::size_t slash = text.find('/');
  const std::string head = text.substr(0, slash);
  const std::size_t colon = head.find(':');
  e.device = head.substr(0, colon);
  if (e.device != "cpu" && e.device != "gpu" && e.device != "mpi")
    throw InputError(fmt::format("--devices: unknown device '{}'; use {}", text, kGrammar));
  if (colon != std::string::npos) {
    const std::string count = head.substr(colon + 1);
    e.all = e.device == "gpu" && count == "all";
    if (!e.all) e.count = parse_count(text, count);
  }
  if (slash != std::string::npos) {
    const std::string tail = text.substr(slash + 1);
    const std::size_t split_colon = tail.find(':');
    e.split = tail.substr(0, split_colon);
    if ((e.split != "jobs" && e.split != "threads") || split_colon == std::string::npos)
      throw InputError(fmt::format("--devices: '{}': after the slash, jobs:K or threads:K (use {})", text, kGrammar));
    e.split_count = parse_count(text, tail.substr(split_colon + 1));
  }
  return e;
}

DeviceConfig plan_device(const std::string& text, const Machine& m) {
  DeviceEntry e = parse_device_entry(text);
  if (e.device == "gpu") shared_gpus_ordinal(m.flags);  // refuses a --gpus list no GPU kind can take
  DeviceConfig d{.name = text};
  // gpu:all with jobs or threads is refused below, as gpu:N with them is, on every machine.
  if (e.all && e.split.empty()) {
    e.count = all_gpus(m);
    if (e.count == 0) {
      d.kind = &kind_named("gpu:N over NCCL");  // where gpu:all would have run
      d.threads = 1;
      d.skip_reason = !m.gpus.unavailable.empty()
                          ? fmt::format("gpu:all: {}", m.gpus.unavailable)
                          : fmt::format(
                                "gpu:all: this machine has {} GPU, gpu:N needs two or more (--gpus=0,0 runs gpu:2 as "
                                "two replicas on one GPU: a correctness check, not scaling)",
                                m.gpus.devices.size());
      return d;
    }
    d.name = fmt::format("gpu:{}", e.count);
  }
  for (const DeviceKind& kind : kKinds)
    if (kind.matches(e, m)) {
      d.kind = &kind;
      kind.configure(e, m, d);
      // N replicas of a device each, sharing gradients: what scaling efficiency divides by.
      if (kind.wiring && !kind.shares_device) d.data_parallel = kind.across_ranks ? e.count : d.replicas;
      if (d.skip_reason.empty() && kind.one_process && m.world.size > 1)
        d.skip_reason = fmt::format("{} runs in one process: start it without mpirun", d.name);
      return d;
    }
  if (e.split == "jobs")
    throw InputError(
        fmt::format("--devices: '{}': jobs are K processes on one GPU (gpu:1/jobs:K) or of T threads each on the CPU "
                    "(cpu:T/jobs:K), e.g. gpu:1/jobs:2 or cpu:1/jobs:2",
                    text));
  if (e.split == "threads")
    throw InputError(fmt::format("--devices: '{}': threads share one GPU, e.g. gpu:1/threads:2", text));
  throw InputError(fmt::format("--devices: '{}' names no device configuration; use {}", text, kGrammar));
}

const char* run_kind_name(RunKind r) {
  switch (r) {
    case RunKind::OneReplica:
      return "one_replica";
    case RunKind::Replicas:
      return "replicas";
    case RunKind::Processes:
      return "processes";
  }
  return "";
}

const char* device_grammar() { return kGrammar; }

}  // namespace tb::bench

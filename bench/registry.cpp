// The benchmark bodies: a training session per train/ benchmark, kept across Google
// Benchmark's invocations of it (so warm-up happens once), and whole runs of epochs for the
// epochs/ benchmarks, each with its checks and counters.
#include "bench/registry.hpp"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/context.hpp"
#include "bench/csv.hpp"
#include "bench/gpu.hpp"
#include "datasets/sources.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "engine/cpu/network.hpp"
#include "engine/train/trainer.hpp"
#include "models/models.hpp"

namespace tb::bench {
namespace {

std::vector<BenchInfo> g_benchmarks;
Flags g_flags;
EpochSink g_on_epoch;
RepetitionSink g_on_repetition;

// The last call of a benchmark's body, which Google Benchmark may still discard (a call that
// sized the iteration count) or keep (the last call of a repetition).
struct PendingRepetition {
  std::string name;
  benchmark::IterationCount iterations = -1;
  Repetition repetition;
};
PendingRepetition g_pending;

struct Session {
  std::string name;
  std::unique_ptr<Trainer> trainer;
  data::Splits splits;  // what the trainer's data left behind: the validation split
};
std::unique_ptr<Session> g_session;

// The samples/s of each one-device row of this invocation, by what a multi-device row of the
// same workload compares with: scaling efficiency comes from the same run.
std::map<std::string, double> g_single_rates;
std::string rate_key(const BenchInfo& b) {
  return fmt::format("{}/{}/{}/{}/{}", b.model, b.dataset, b.gpu ? "gpu" : "cpu", b.precision, b.batch);
}

struct ParallelSession {
  std::string name;
  std::unique_ptr<ReplicaRun> run;
};
std::unique_ptr<ParallelSession> g_parallel;

// With --data_on_device the trainer pulls these: batch k is the network's resident batch k,
// with no host data at all.
class ResidentBatches final : public Dataset {
 public:
  ResidentBatches(std::string name, i64 batch, i64 batches) : name_(std::move(name)), batches_(batches) {
    batch_.batch = batch;
  }
  const Batch& next() override {
    batch_.resident = step_++;
    return batch_;
  }
  std::string name() const override { return name_; }
  std::string source() const override { return "device"; }
  i64 steps_per_epoch() const override { return batches_; }

 private:
  std::string name_;
  i64 batches_;
  i64 step_ = 0;
  Batch batch_;
};

constexpr std::size_t kResidentMaxBytes = std::size_t(2) << 30;

GpuOptions gpu_options(const BenchInfo& info) {
  return GpuOptions{.ordinal = info.gpu_ordinal,
                    .precision = info.precision,
                    .cuda_graph = info.cuda_graph,
                    .memory_limit = info.gpu_memory_limit,
                    .layout = g_flags.gpu_layout};
}

std::unique_ptr<Session> make_session(const BenchInfo& info) {
  std::unique_ptr<Network> network;
  if (info.gpu) {
    gpu_prepare(gpu_options(info));
    network = make_gpu_network(info.spec, info.batch, info.optimizer, g_flags.seed, gpu_options(info));
  } else {
    network = std::make_unique<cpu::CpuNetwork>(
        info.spec, cpu::NetworkConfig{.batch = info.batch, .optimizer = info.optimizer, .seed = g_flags.seed});
  }
  auto session = std::make_unique<Session>();
  session->name = info.name;
  session->splits = data::make_splits(info.dataset, info.data_folder, info.spec, info.loader);
  std::unique_ptr<Dataset> train = std::move(session->splits.train);
  if (info.gpu && info.data_on_device && info.kind == "train") {
    const i64 batches = gpu_make_resident(*network, *train, kResidentMaxBytes);
    train = std::make_unique<ResidentBatches>(train->name(), info.batch, batches);
  }
  session->trainer = std::make_unique<Trainer>(std::move(network), std::move(train));
  return session;
}

Session& train_session(const BenchInfo& info) {
  if (g_session && g_session->name == info.name) return *g_session;
  g_session.reset();  // free the previous model before building the next
  auto session = make_session(info);
  for (std::int64_t i = 0; i < info.warmup_steps; ++i) session->trainer->step();
  g_session = std::move(session);
  return *g_session;
}

// The run fails unless training lowered the loss of the first training batch: its loss at the
// first step (before any update) against a training-mode forward on it now (no update). The
// same samples before and after, so a falling loss is not an artefact of easier batches.
void check_loss_fell(Trainer& trainer) {
  const float before = trainer.losses().front(), after = trainer.first_batch_loss();
  if (after < before) return;
  // A loss well above where it started diverged; one about where it started sits on a plateau.
  constexpr float kRose = 1.05f;
  if (!(after <= before * kRose))
    throw CheckFailed(fmt::format("loss rose: {:.5g} on the first batch before training, {:.5g} after {} steps "
                                  "(training diverged: lower the learning rate with --lr)", before, after,
                                  trainer.losses().size()));
  throw CheckFailed(fmt::format("loss did not fall: {:.5g} on the first batch before training, {:.5g} after {} "
                                "steps (a model still on its initial plateau needs more steps: raise "
                                "--warmup_steps)", before, after, trainer.losses().size()));
}

// The timed steps of one benchmark, however many replicas ran them.
struct Timed {
  double steps = 0, step_time = 0, wall = 0, cpu = 0;
  double samples_per_step = 0;  // the global batch
  double peak_gflops = 0;       // of every device the step used
  double replicas = 1;          // for host CPU per replica (per job)
};

// Counters of the timed steps: throughput, utilisation, host CPU, losses, phases.
void timed_counters(benchmark::State& st, const Timed& t, const BenchInfo& info, const Trainer& trainer,
                    const PhaseTimes& p0) {
  const double samples_per_s = t.samples_per_step / t.step_time;
  const double tflops = info.cost.train_flops_per_sample() * samples_per_s * 1e-12;
  const PhaseTimes& p = trainer.phases();
  auto& c = st.counters;
  c["samples_per_s"] = samples_per_s;
  c["step_time_s"] = t.step_time;
  c["wall_step_time_s"] = t.wall / t.steps;
  c["model_tflops"] = tflops;
  c["peak_gflops"] = t.peak_gflops;
  c["utilisation"] = tflops * 1e3 / t.peak_gflops;
  c["host_cpu_s_per_step"] = t.cpu / t.steps / t.replicas;
  c["host_cpu_util"] = t.cpu / t.wall;
  c["peak_rss_bytes"] = double(peak_rss_bytes());
  c["loss_first"] = trainer.losses().front();
  c["loss_last"] = trainer.losses().back();
  c["data_s_per_step"] = (p.data - p0.data) / t.steps;
  c["data_wait_s_per_step"] = (p.data_wait - p0.data_wait) / t.steps;
  if (p.split) {  // a step replayed as one CUDA graph has no phases
    c["forward_s_per_step"] = (p.forward - p0.forward) / t.steps;
    c["backward_s_per_step"] = (p.backward - p0.backward) / t.steps;
    c["update_s_per_step"] = (p.update - p0.update) / t.steps;
  }
}

double device_peak_gflops(const BenchInfo& info) {
  return info.gpu ? gpu_peak(info.gpu_ordinal, info.precision).gflops : measure_sgemm_gflops(info.threads);
}

// One replica. On a GPU the step time is the device's (CUDA events from the batch upload to
// the end of the update), which Google Benchmark also reports (manual time);
// wall_step_time_s adds the host's share between steps.
void step_counters(benchmark::State& st, const BenchInfo& info, Trainer& trainer, const PhaseTimes& p0,
                   double steps, double wall, double cpu) {
  const PhaseTimes& p = trainer.phases();
  const double step_time = info.gpu && info.kind == "train" ? (p.device - p0.device) / steps : wall / steps;
  timed_counters(st,
                 Timed{.steps = steps, .step_time = step_time, .wall = wall, .cpu = cpu,
                       .samples_per_step = double(info.batch), .peak_gflops = device_peak_gflops(info)},
                 info, trainer, p0);
  if (info.gpu)
    for (const auto& [name, value] : gpu_counters(trainer.network(), gpu_options(info))) st.counters[name] = value;
}

// A precision meant to be faster than fp32 that was not, in this invocation, says so and why in
// its row (the label becomes the CSV's message): tensor cores shorten matrix work, and where a
// step is short kernels bound by launches and memory, the casts of mixed precision and the
// loss-scale check (or TF32's other kernel choices) cost about what they save.
std::string note_slower_than_fp32(benchmark::State& st, const BenchInfo& info) {
  if (!info.gpu || info.precision == "fp32") return "";
  BenchInfo fp32 = info;
  fp32.precision = "fp32";
  const auto it = g_single_rates.find(rate_key(fp32));
  const double rate = st.counters["samples_per_s"];
  if (it == g_single_rates.end() || rate >= it->second) return "";
  const double step_ms = double(st.counters["step_time_s"]) * 1e3;
  constexpr double kShortStepMs = 5;  // a step of small kernels: launches and memory set its pace
  std::string note;
  if (step_ms < kShortStepMs)
    note = fmt::format("{:.2f}x fp32's samples/s in this run: a step of {:.3g} ms of small kernels is bound "
                            "by launches and memory, not matrix work, so {} gains nothing from tensor cores{}",
                            rate / it->second, step_ms, info.precision,
                            info.precision == "tf32" ? "" : " and pays for its casts and loss-scale checks");
  else
    note = fmt::format("{:.2f}x fp32's samples/s in this run; TB_CUDA_LAYER_TIMES=<file> writes where each "
                       "layer's time goes", rate / it->second);
  st.SetLabel(note);
  return note;
}

void run_train(benchmark::State& st, const BenchInfo& info) {
  omp_set_num_threads(info.threads);
  g_parallel.reset();
  Trainer& trainer = *train_session(info).trainer;
  const PhaseTimes p0 = trainer.phases();
  const double wall0 = wall_seconds(), cpu0 = process_cpu_seconds();
  if (info.gpu) {
    for (auto _ : st) {
      trainer.step();
      st.SetIterationTime(trainer.last_device_seconds());
    }
  } else {
    for (auto _ : st) trainer.step();
  }
  const double wall = wall_seconds() - wall0, cpu = process_cpu_seconds() - cpu0;
  check_loss_fell(trainer);
  step_counters(st, info, trainer, p0, double(st.iterations()), wall, cpu);
  g_single_rates[rate_key(info)] = st.counters["samples_per_s"];
  g_pending.repetition.message = note_slower_than_fp32(st, info);
}


ReplicaRun& parallel_session(const BenchInfo& info) {
  if (g_parallel && g_parallel->name == info.name) return *g_parallel->run;
  g_parallel.reset();
  g_session.reset();
  if (info.gpu) {
    std::vector<int> prepared;
    for (int ordinal : info.gpu_ordinals) {
      if (std::find(prepared.begin(), prepared.end(), ordinal) != prepared.end()) continue;
      GpuOptions o = gpu_options(info);
      o.ordinal = ordinal;
      gpu_prepare(o);
      prepared.push_back(ordinal);
    }
  }
  const int rank = world().rank;
  auto make = [&](int k) {
    const int replica = rank * info.replicas + k;  // a different shard of the data each
    data::LoaderConfig loader = info.loader;
    loader.seed = info.loader.seed + 7919 * std::uint64_t(replica);
    std::unique_ptr<Network> net;
    if (info.gpu) {
      GpuOptions o = gpu_options(info);
      o.ordinal = info.gpu_ordinals[std::size_t(k)];
      net = make_gpu_network(info.spec, info.batch, info.optimizer, g_flags.seed, o);
    } else {
      net = std::make_unique<cpu::CpuNetwork>(
          info.spec, cpu::NetworkConfig{.batch = info.batch, .optimizer = info.optimizer, .seed = g_flags.seed});
    }
    auto splits = data::make_splits(info.dataset, info.data_folder, info.spec, loader);
    return std::make_pair(std::move(net), std::move(splits.train));
  };
  auto session = std::make_unique<ParallelSession>();
  session->name = info.name;
  session->run = std::make_unique<ReplicaRun>(info.parallel, info.replicas, info.gpu_ordinals, make);
  session->run->warm_up(info.warmup_steps);
  g_parallel = std::move(session);
  return *g_parallel->run;
}

// Several replicas: the step is the slowest replica's (on every rank), the samples are the
// global batch's, and the communication of one replica is reported.
void run_parallel(benchmark::State& st, const BenchInfo& info) {
  omp_set_num_threads(info.threads);
  ReplicaRun& run = parallel_session(info);
  Trainer& first = *run.replicas()[0].trainer;
  const PhaseTimes p0 = first.phases();
  const parallel::CommStats c0 = run.comm_stats();
  const double wall0 = wall_seconds(), cpu0 = process_cpu_seconds();
  double step_total = 0;
  for (auto _ : st) {
    const double s = run.step();
    step_total += s;
    st.SetIterationTime(s);
  }
  const double wall = wall_seconds() - wall0, cpu = process_cpu_seconds() - cpu0;
  run.check(check_loss_fell);
  const double steps = double(st.iterations());
  const int total = run.communicating_ranks();
  const double step_time = step_total / steps;
  const int devices = info.parallel == Parallel::Jobs ? 1 : total;
  timed_counters(st,
                 Timed{.steps = steps, .step_time = step_time, .wall = wall, .cpu = cpu,
                       .samples_per_step = double(info.batch) * total,
                       .peak_gflops = device_peak_gflops(info) * devices, .replicas = double(info.replicas)},
                 info, first, p0);
  auto& c = st.counters;
  const double samples_per_s = c["samples_per_s"];
  c["replicas"] = total;
  if (info.parallel != Parallel::Jobs) {
    const parallel::CommStats cs = run.comm_stats();
    const double comm = (cs.wait_s - c0.wait_s) / steps, bytes = (cs.bytes - c0.bytes) / steps;
    c["comm_s_per_step"] = comm;
    c["comm_share"] = comm / step_time;
    c["allreduce_bytes_per_step"] = bytes;
    // nccl-tests' bus bandwidth: what each link carried, from the communication not hidden by
    // backward (a lower bound on the links' rate when buckets overlapped).
    if (comm > 0) c["busbw_gbps"] = bytes / comm * 2.0 * (total - 1) / total * 1e-9;
    const double buckets = double(cs.buckets - c0.buckets);
    if (buckets > 0) c["comm_overlap"] = double(cs.buckets_early - c0.buckets_early) / buckets;
    if (auto it = g_single_rates.find(rate_key(info)); it != g_single_rates.end())
      c["scaling_efficiency"] = samples_per_s / (total * it->second);
  }
  if (info.gpu)
    for (const auto& [name, value] : gpu_counters(*run.replicas()[0].backend, gpu_options(info))) c[name] = value;
}

void run_epochs(benchmark::State& st, const BenchInfo& info) {
  omp_set_num_threads(info.threads);
  g_session.reset();
  for (auto _ : st) {  // one iteration: the whole run of epochs
    auto session = make_session(info);
    Trainer& trainer = *session->trainer;
    const double wall0 = wall_seconds(), cpu0 = process_cpu_seconds();
    const EpochResult result = train_epochs(
        trainer, *session->splits.validation, session->splits.validation_steps,
        EpochOptions{.epochs = info.epochs, .target_accuracy = info.target_accuracy},
        [&](const EpochRecord& r) { g_on_epoch(info, r); });
    const double wall = wall_seconds() - wall0, cpu = process_cpu_seconds() - cpu0;
    check_loss_fell(trainer);
    const EpochRecord& last = result.records.back();
    step_counters(st, info, trainer, PhaseTimes{}, double(last.steps), last.train_s, cpu * last.train_s / wall);
    auto& c = st.counters;
    c["epoch"] = double(last.epoch);
    c["train_loss"] = last.train_loss;
    c["val_loss"] = last.val_loss;
    c["train_acc"] = last.train_acc;
    c["val_acc"] = last.val_acc;
    c["elapsed_s"] = last.elapsed_s;
    c["time_to_target_s"] = result.time_to_target_s;
    if (info.target_accuracy > 0 && result.time_to_target_s < 0)
      throw CheckFailed(fmt::format("validation accuracy {:.4f} after {} epochs never reached the target {:.4f}",
                                    last.val_acc, last.epoch, info.target_accuracy));
  }
}

// A row that failed: its session goes (the next benchmark starts clean), the run goes on.
void fail_row(benchmark::State& st, const std::string& message) {
  g_session.reset();
  g_parallel.reset();
  st.SkipWithError(message.c_str());
  g_pending.repetition = Repetition{{}, st.iterations(), true, message};
}

// What the body left in `st`, as a repetition.
Repetition repetition_of(benchmark::State& st, bool failed, std::string message) {
  Repetition r;
  for (const auto& [name, counter] : st.counters) r.counters[name] = counter.value;
  r.iterations = st.iterations();
  r.failed = failed;
  r.message = std::move(message);
  return r;
}

void run_benchmark(benchmark::State& st, const BenchInfo& info) {
  // Google Benchmark grows the iteration count while it sizes a benchmark's first repetition
  // and keeps it for the others: a call with as many iterations as the last one of this
  // benchmark means the last one ended a repetition, which goes to the CSV now.
  if (g_pending.name == info.name && g_pending.iterations == st.max_iterations && g_on_repetition)
    g_on_repetition(info, g_pending.repetition);
  g_pending = PendingRepetition{};
  if (!info.skip_reason.empty()) {
    st.SkipWithError(("skipped: " + info.skip_reason).c_str());
    return;
  }
  // Under mpirun, one-replica benchmarks are the baselines: rank 0 runs them alone (the other
  // ranks wait for the next data-parallel benchmark) and only rank 0 reports anyway.
  if (world().size > 1 && info.parallel == Parallel::None && world().rank != 0) {
    st.SkipWithError("skipped: one-replica baseline, run by rank 0");
    return;
  }
  g_pending.name = info.name;
  g_pending.iterations = st.max_iterations;
  try {
    // Each row reports its own peak resident set, not an earlier row's (a ResNet-152 before it):
    // another benchmark's session goes first (a train/ row keeps its own across Google
    // Benchmark's invocations of it).
    if (g_session && g_session->name != info.name) g_session.reset();
    if (g_parallel && g_parallel->name != info.name) g_parallel.reset();
    reset_peak_rss();
    if (info.kind == "epochs") run_epochs(st, info);
    else if (info.parallel != Parallel::None) run_parallel(st, info);
    else run_train(st, info);
    const std::string note = g_pending.repetition.message;
    g_pending.repetition = repetition_of(st, false, note);
  } catch (const CsvWriteError&) {
    throw;  // the run stops (main)
  } catch (const std::bad_alloc&) {
    fail_row(st, "out of host memory (std::bad_alloc) while building or training this benchmark: lower --batch, "
                 "--loader_workers or --prefetch, or run it on a machine with more memory");
  } catch (const std::exception& e) {
    fail_row(st, e.what());
  }
}

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

std::string benchmark_name(const BenchInfo& b) {
  return fmt::format("{}/{}/{}/{}/{}/bs:{}", b.kind, b.model, b.dataset, b.device, b.precision, b.batch);
}

}  // namespace

namespace {

int parse_count(const std::string& name, const std::string& text, const char* example) {
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1)
    throw InputError(fmt::format("--devices: '{}' needs a count >= 1, e.g. {}", name, example));
  return n;
}

// gpu:N (N GPUs of this process, or under mpirun one GPU per rank) and gpu:1/jobs:K.
void gpu_config(DeviceConfig& d, const Flags& flags) {
  const std::string& name = d.name;
  const std::size_t jobs_at = name.find("/jobs:");
  const int gpus = parse_count(name, name.substr(4, jobs_at == std::string::npos ? std::string::npos : jobs_at - 4),
                               "gpu:1");
  const int jobs = jobs_at == std::string::npos ? 0 : parse_count(name, name.substr(jobs_at + 6), "gpu:1/jobs:2");
  if (jobs && gpus != 1) throw InputError(fmt::format("--devices: '{}': jobs share one GPU, e.g. gpu:1/jobs:2", name));
  const World& w = world();
  d.threads = 1;  // one host thread drives each GPU
  d.gpu = true;
  // Under mpirun, gpu:N (N > 1) is one GPU per rank; gpu:1 is rank 0's one-GPU baseline.
  const bool across_ranks = w.size > 1 && gpus > 1;
  const int local_gpus = across_ranks ? 1 : gpus;
  std::vector<int> ordinals = flags.gpus;
  for (int k = int(ordinals.size()); k < std::max(local_gpus, w.local_rank + 1); ++k) ordinals.push_back(k);
  if (across_ranks) ordinals = {ordinals[std::size_t(w.local_rank)]};  // this rank's GPU
  ordinals.resize(std::size_t(local_gpus));
  d.gpu_ordinal = ordinals[0];
  d.replicas = jobs ? jobs : local_gpus;
  d.gpu_ordinals = jobs ? std::vector<int>(std::size_t(jobs), ordinals[0]) : ordinals;
  d.parallel = jobs ? Parallel::Jobs : across_ranks ? Parallel::NcclMpi : gpus > 1 ? Parallel::NcclThreads
                                                                                  : Parallel::None;
  const GpuInventory& inv = gpu_inventory();
  const int highest = *std::max_element(ordinals.begin(), ordinals.end());
  if (!inv.unavailable.empty())
    d.skip_reason = fmt::format("{}: {}", name, inv.unavailable);
  else if (across_ranks && gpus != w.size)
    d.skip_reason = fmt::format("{}: under mpirun -np {} the GPU configurations are gpu:1 (rank 0) and gpu:{} (one "
                                "GPU per rank)", name, w.size, w.size);
  else if (!across_ranks && gpus > int(inv.devices.size()))
    d.skip_reason = fmt::format("{} needs {} GPUs, this machine has {}", name, gpus, inv.devices.size());
  else if (highest >= int(inv.devices.size()))
    d.skip_reason = fmt::format("{}: CUDA device {} (--gpus, or the rank's local index) does not exist; this machine "
                                "has devices 0 to {}", name, highest, int(inv.devices.size()) - 1);
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
    } else if (name.rfind("cpu:", 0) == 0) {
      d.threads = parse_count(name, name.substr(4), "cpu:2");
      if (d.threads > cores)
        d.skip_reason = fmt::format("{} needs {} cores, this machine has {}", name, d.threads, cores);
    } else if (name.rfind("gpu:", 0) == 0) {
      gpu_config(d, flags);
    } else if (name.rfind("mpi:", 0) == 0) {
      const int ranks = parse_count(name, name.substr(4), "mpi:2");
      d.parallel = Parallel::Mpi;
      d.threads = std::max(1, cores / std::max(1, w.local_size));  // the node's cores shared by its ranks
      if (w.size == 1)
        d.skip_reason = fmt::format("{}: start trainbench with mpirun -np {} for MPI data parallelism", name, ranks);
      else if (ranks != w.size)
        d.skip_reason = fmt::format("{}: this job has {} ranks (mpi:{})", name, w.size, w.size);
    } else {
      throw InputError(fmt::format("--devices: unknown device '{}'; use cpu, cpu:N, gpu:N, gpu:1/jobs:K or mpi:N",
                                   name));
    }
    if (w.size > 1 && (d.parallel == Parallel::Jobs || d.parallel == Parallel::NcclThreads) && d.skip_reason.empty())
      d.skip_reason = fmt::format("{} runs in one process: start it without mpirun", name);
    out.push_back(d);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> device_precisions(const Flags& flags, const DeviceConfig& d) {
  std::vector<std::string> names = flags.precisions;
  // By default a GPU gets all four, unless it cannot run at all: then one skipped row says why.
  if (names.empty() && d.gpu && d.skip_reason.empty()) names = {"fp32", "tf32", "fp16", "bf16"};
  if (names.empty()) names = {"fp32"};
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& p : names) {
    std::string reason;
    if (!d.gpu && p != "fp32") reason = fmt::format("the CPU backend trains in fp32 only, not {}", p);
    else if (d.gpu && d.skip_reason.empty()) reason = gpu_precision_unsupported(d.gpu_ordinal, p);
    out.emplace_back(p, reason);
  }
  return out;
}

const std::vector<BenchInfo>& register_benchmarks(const Flags& flags, int cores, EpochSink on_epoch,
                                                  RepetitionSink on_repetition) {
  g_flags = flags;
  g_on_epoch = std::move(on_epoch);
  g_on_repetition = std::move(on_repetition);
  const std::string dir = data::data_dir(flags.data_dir);
  // A folder given explicitly must be there: a typo would otherwise measure synthetic data.
  if (!flags.data_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec))
      throw InputError(fmt::format("--data_dir={}: no such folder (leave the flag out to train on synthetic data, "
                                   "or give the folder that holds mnist/, fashion-mnist/, cifar10/)", dir));
    if (!std::filesystem::is_directory(dir, ec))
      throw InputError(fmt::format("--data_dir={}: is not a folder", dir));
  }
  const auto devices = device_configs(flags, cores);
  std::set<std::string> noted;  // datasets absent under --data_dir, said once
  // A cap in bytes above a GPU's memory is a typo (1e30, inf are refused while parsing).
  for (const DeviceConfig& d : devices) {
    const GpuInventory& inv = gpu_inventory();
    if (!d.gpu || !d.skip_reason.empty() || flags.gpu_memory_limit <= 1) continue;
    for (int ordinal : d.gpu_ordinals)
      if (ordinal < int(inv.devices.size()) &&
          flags.gpu_memory_limit > inv.devices[std::size_t(ordinal)].memory_gib * double(1 << 30))
        throw InputError(fmt::format("--gpu_memory_limit: {:.0f} bytes is more than CUDA device {}'s {:.1f} GiB; give "
                                     "at most that, or a fraction (0.5)", flags.gpu_memory_limit, ordinal,
                                     inv.devices[std::size_t(ordinal)].memory_gib));
  }
  for (const char* kind : {"train", "epochs"}) {
    for (const models::Workload& w : models::workloads()) {
      const std::string folder = data::find_dataset(w.dataset, dir);
      // Under a --data_dir given explicitly, a dataset it lacks is said once (its rows say
      // "synthetic" in data_source).
      const bool readable = w.dataset == "mnist" || w.dataset == "fashion-mnist" || w.dataset == "cifar10";
      if (!flags.data_dir.empty() && folder.empty() && readable && !w.real_data_only && noted.insert(w.dataset).second)
        std::cerr << fmt::format("trainbench: note: no {}/ under --data_dir={}: its rows train on synthetic data\n",
                                 w.dataset, dir);
      if (w.real_data_only && folder.empty()) continue;
      for (const DeviceConfig& d : devices) {
        for (const auto& [precision, precision_skip] : device_precisions(flags, d)) {
          BenchInfo b;
          b.kind = kind;
          b.model = w.model;
          b.dataset = w.dataset;
          b.data_folder = folder;
          b.data_source = w.spec.task == Task::Regression ? "generated" : folder.empty() ? "synthetic" : folder;
          b.device = d.name;
          b.precision = precision;
          b.threads = d.threads;
          b.gpu = d.gpu;
          b.gpu_ordinal = d.gpu_ordinal;
          b.cuda_graph = flags.cuda_graph;
          b.data_on_device = flags.data_on_device;
          b.gpu_memory_limit = flags.gpu_memory_limit;
          b.parallel = d.parallel;
          b.replicas = d.replicas;
          b.gpu_ordinals = d.gpu_ordinals;
          b.batch = flags.batch.value_or(d.gpu ? gpu_batch(w, d, precision, flags) : w.batch);
          b.warmup_steps = b.kind == "train" ? flags.warmup_steps.value_or(w.warmup_steps) : 0;
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
        b.spec = w.spec;
        b.cost = model_cost(w.spec);
        b.skip_reason = d.skip_reason.empty() ? precision_skip : d.skip_reason;
        b.name = benchmark_name(b);
        g_benchmarks.push_back(std::move(b));
        }
      }
    }
  }
  for (const BenchInfo& b : g_benchmarks) {
    auto* registered = benchmark::RegisterBenchmark(b.name.c_str(), [&b](benchmark::State& st) { run_benchmark(st, b); });
    if (b.kind == "epochs") registered->Iterations(1)->Unit(benchmark::kSecond);
    else registered->Unit(benchmark::kMillisecond);
    const bool parallel = b.parallel != Parallel::None;
    if ((b.gpu || parallel) && b.kind == "train" && b.skip_reason.empty()) registered->UseManualTime();
    // Every rank must run the same number of steps: no adaptive iteration count under MPI.
    if (world().size > 1 && b.kind == "train") registered->Iterations(flags.iterations);
  }
  return g_benchmarks;
}

void release_sessions() {
  g_session.reset();
  g_parallel.reset();
}

const BenchInfo* find_benchmark(const std::string& name) {
  for (const BenchInfo& b : g_benchmarks)
    if (b.name == name) return &b;
  return nullptr;
}

}  // namespace tb::bench

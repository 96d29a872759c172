// The benchmark bodies: a training session per train/ benchmark, kept across Google
// Benchmark's invocations of it (so warm-up happens once), and whole runs of epochs for the
// epochs/ benchmarks, each with its checks and counters.
#include "bench/registry.hpp"

#include <omp.h>

#include <charconv>
#include <memory>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/context.hpp"
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

struct Session {
  std::string name;
  std::unique_ptr<Trainer> trainer;
  data::Splits splits;  // what the trainer's data left behind: the validation split
};
std::unique_ptr<Session> g_session;

std::unique_ptr<Session> make_session(const BenchInfo& info) {
  auto network = std::make_unique<cpu::CpuNetwork>(
      info.spec, cpu::NetworkConfig{.batch = info.batch, .optimizer = info.optimizer, .seed = g_flags.seed});
  auto session = std::make_unique<Session>();
  session->name = info.name;
  session->splits = data::make_splits(info.dataset, info.data_folder, info.spec, info.loader);
  session->trainer = std::make_unique<Trainer>(std::move(network), std::move(session->splits.train));
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
  Network& net = trainer.network();
  net.set_batch(trainer.first_batch().view());
  const float before = trainer.losses().front(), after = net.forward();
  if (!(after < before))
    throw CheckFailed(fmt::format("loss did not fall: {:.5g} on the first batch before training, {:.5g} after {} "
                                  "steps (a model still on its initial plateau needs more steps: raise "
                                  "--warmup_steps)", before, after, trainer.losses().size()));
}

// Counters of the timed steps: throughput, utilisation, host CPU, phases.
void step_counters(benchmark::State& st, const BenchInfo& info, const Trainer& trainer, const PhaseTimes& p0,
                   double steps, double wall, double cpu) {
  const double samples_per_s = double(info.batch) * steps / wall;
  const double tflops = info.cost.train_flops_per_sample() * samples_per_s * 1e-12;
  const double peak_gflops = measure_sgemm_gflops(info.threads);
  const PhaseTimes& p = trainer.phases();
  auto& c = st.counters;
  c["samples_per_s"] = samples_per_s;
  c["step_time_s"] = wall / steps;
  c["model_tflops"] = tflops;
  c["peak_gflops"] = peak_gflops;
  c["utilisation"] = tflops * 1e3 / peak_gflops;
  c["host_cpu_s_per_step"] = cpu / steps;
  c["host_cpu_util"] = cpu / wall;
  c["peak_rss_bytes"] = double(peak_rss_bytes());
  c["loss_first"] = trainer.losses().front();
  c["loss_last"] = trainer.losses().back();
  c["data_s_per_step"] = (p.data - p0.data) / steps;
  c["data_wait_s_per_step"] = (p.data_wait - p0.data_wait) / steps;
  c["forward_s_per_step"] = (p.forward - p0.forward) / steps;
  c["backward_s_per_step"] = (p.backward - p0.backward) / steps;
  c["update_s_per_step"] = (p.update - p0.update) / steps;
}

void run_train(benchmark::State& st, const BenchInfo& info) {
  omp_set_num_threads(info.threads);
  Trainer& trainer = *train_session(info).trainer;
  const PhaseTimes p0 = trainer.phases();
  const double wall0 = wall_seconds(), cpu0 = process_cpu_seconds();
  for (auto _ : st) trainer.step();
  const double wall = wall_seconds() - wall0, cpu = process_cpu_seconds() - cpu0;
  check_loss_fell(trainer);
  step_counters(st, info, trainer, p0, double(st.iterations()), wall, cpu);
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

void run_benchmark(benchmark::State& st, const BenchInfo& info) {
  if (!info.skip_reason.empty()) {
    st.SkipWithError(("skipped: " + info.skip_reason).c_str());
    return;
  }
  try {
    if (info.kind == "epochs") run_epochs(st, info);
    else run_train(st, info);
  } catch (const std::exception& e) {
    g_session.reset();
    st.SkipWithError(e.what());
  }
}

std::string benchmark_name(const BenchInfo& b) {
  return fmt::format("{}/{}/{}/{}/{}/bs:{}", b.kind, b.model, b.dataset, b.device, b.precision, b.batch);
}

}  // namespace

std::vector<DeviceConfig> device_configs(const Flags& flags, int cores) {
  std::vector<std::string> names = flags.devices;
  if (names.empty()) {
    names = {"cpu"};
    if (cores > 1) names.push_back("cpu:1");
  }
  std::vector<DeviceConfig> out;
  for (const std::string& name : names) {
    DeviceConfig d;
    d.name = name;
    if (name == "cpu") {
      d.threads = cores;
    } else if (name.rfind("cpu:", 0) == 0) {
      const std::string n = name.substr(4);
      int threads = 0;
      auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), threads);
      if (ec != std::errc() || end != n.data() + n.size() || threads < 1)
        throw InputError(fmt::format("--devices: '{}' needs a thread count >= 1, e.g. cpu:2", name));
      d.threads = threads;
      if (threads > cores)
        d.skip_reason = fmt::format("{} needs {} cores, this machine has {}", name, threads, cores);
    } else if (name.rfind("gpu", 0) == 0) {
      d.threads = 1;
      d.skip_reason = fmt::format("{}: this build of trainbench has no CUDA backend", name);
    } else {
      throw InputError(fmt::format("--devices: unknown device '{}'; use cpu, cpu:N or gpu:N", name));
    }
    out.push_back(d);
  }
  return out;
}

const std::vector<BenchInfo>& register_benchmarks(const Flags& flags, int cores, EpochSink on_epoch) {
  g_flags = flags;
  g_on_epoch = std::move(on_epoch);
  const std::string dir = data::data_dir(flags.data_dir);
  const auto devices = device_configs(flags, cores);
  for (const char* kind : {"train", "epochs"}) {
    for (const models::Workload& w : models::workloads()) {
      const std::string folder = data::find_dataset(w.dataset, dir);
      if (w.real_data_only && folder.empty()) continue;
      for (const DeviceConfig& d : devices) {
        BenchInfo b;
        b.kind = kind;
        b.model = w.model;
        b.dataset = w.dataset;
        b.data_folder = folder;
        b.data_source = w.spec.task == Task::Regression ? "generated" : folder.empty() ? "synthetic" : folder;
        b.device = d.name;
        b.precision = "fp32";
        b.threads = d.threads;
        b.batch = flags.batch.value_or(w.batch);
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
        b.skip_reason = d.skip_reason;
        b.name = benchmark_name(b);
        g_benchmarks.push_back(std::move(b));
      }
    }
  }
  for (const BenchInfo& b : g_benchmarks) {
    auto* registered = benchmark::RegisterBenchmark(b.name.c_str(), [&b](benchmark::State& st) { run_benchmark(st, b); });
    if (b.kind == "epochs") registered->Iterations(1)->Unit(benchmark::kSecond);
    else registered->Unit(benchmark::kMillisecond);
  }
  return g_benchmarks;
}

const BenchInfo* find_benchmark(const std::string& name) {
  for (const BenchInfo& b : g_benchmarks)
    if (b.name == name) return &b;
  return nullptr;
}

}  // namespace tb::bench

// The benchmark body: a training session per benchmark, kept across Google Benchmark's
// invocations of it (so warm-up happens once), with its checks and counters.
#include "bench/registry.hpp"

#include <omp.h>

#include <charconv>
#include <memory>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/context.hpp"
#include "datasets/synthetic.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "engine/cpu/network.hpp"
#include "engine/train/trainer.hpp"
#include "models/models.hpp"

namespace tb::bench {
namespace {

std::vector<BenchInfo> g_benchmarks;

struct Session {
  std::string name;
  std::unique_ptr<Trainer> trainer;
};
std::unique_ptr<Session> g_session;

Trainer& session_for(const BenchInfo& info, const Flags& flags) {
  if (g_session && g_session->name == info.name) return *g_session->trainer;
  g_session.reset();  // free the previous model before building the next
  auto network = std::make_unique<cpu::CpuNetwork>(
      info.spec, cpu::NetworkConfig{.batch = info.batch, .optimizer = info.optimizer, .seed = flags.seed});
  auto data = data::synthetic_for(info.dataset, info.spec, info.batch, flags.seed);
  auto session = std::make_unique<Session>(Session{info.name, std::make_unique<Trainer>(std::move(network), std::move(data))});
  for (std::int64_t i = 0; i < flags.warmup_steps; ++i) session->trainer->step();
  g_session = std::move(session);
  return *g_session->trainer;
}

// The run fails unless the loss fell: the mean of the last few steps against the first step of
// the session (a warm-up step when there is one).
void check_loss_fell(const std::vector<float>& losses) {
  if (losses.size() < 2) return;
  const std::size_t tail = std::min<std::size_t>(3, losses.size() - 1);
  double last = 0;
  for (std::size_t i = losses.size() - tail; i < losses.size(); ++i) last += losses[i];
  last /= double(tail);
  if (!(last < losses.front()))
    throw CheckFailed(fmt::format("loss did not fall: {:.5g} at the first step, {:.5g} (mean of the last {}) "
                                  "after {} steps", losses.front(), last, tail, losses.size()));
}

void run_train(benchmark::State& st, const BenchInfo& info, const Flags& flags) {
  if (!info.skip_reason.empty()) {
    st.SkipWithError(("skipped: " + info.skip_reason).c_str());
    return;
  }
  try {
    omp_set_num_threads(info.threads);
    Trainer& trainer = session_for(info, flags);
    const PhaseTimes p0 = trainer.phases();
    const double wall0 = wall_seconds(), cpu0 = process_cpu_seconds();
    for (auto _ : st) trainer.step();
    const double wall = wall_seconds() - wall0, cpu = process_cpu_seconds() - cpu0;
    check_loss_fell(trainer.losses());

    const double steps = double(st.iterations());
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
    c["forward_s_per_step"] = (p.forward - p0.forward) / steps;
    c["backward_s_per_step"] = (p.backward - p0.backward) / steps;
    c["update_s_per_step"] = (p.update - p0.update) / steps;
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

const std::vector<BenchInfo>& register_benchmarks(const Flags& flags, int cores) {
  static Flags kept_flags;
  kept_flags = flags;
  const auto devices = device_configs(flags, cores);
  for (const models::Workload& w : models::workloads()) {
    for (const DeviceConfig& d : devices) {
      BenchInfo b;
      b.model = w.model;
      b.dataset = w.dataset;
      b.data_source = "synthetic";
      b.device = d.name;
      b.precision = "fp32";
      b.threads = d.threads;
      b.batch = flags.batch.value_or(w.batch);
      b.warmup_steps = flags.warmup_steps;
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
  for (const BenchInfo& b : g_benchmarks) {
    benchmark::RegisterBenchmark(b.name.c_str(), [&b](benchmark::State& st) { run_train(st, b, kept_flags); })
        ->Unit(benchmark::kMillisecond);
  }
  return g_benchmarks;
}

const BenchInfo* find_benchmark(const std::string& name) {
  for (const BenchInfo& b : g_benchmarks)
    if (b.name == name) return &b;
  return nullptr;
}

}  // namespace tb::bench

// What every kind of run shares (run.hpp): the walk through the stages, the timed window with
// NVML's sampler, and the counters of the timed steps.
#include "bench/run/run.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/predict/predict.hpp"
#include "bench/run/jobs.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/world.hpp"
#include "engine/train/trainer.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/sampler.hpp"

namespace tb::bench {

namespace {

std::vector<int> distinct(std::vector<int> ordinals) {
  std::sort(ordinals.begin(), ordinals.end());
  ordinals.erase(std::unique(ordinals.begin(), ordinals.end()), ordinals.end());
  return ordinals;
}

RowDevices row_devices(const BenchInfo& info) {
  RowDevices d;
  if (info.replay) return d;  // nothing computes
  if (!info.gpu()) {
    d.peak_gflops = cpu_peak_gflops(info.threads);
    d.peak_spread = cpu_peak_spread(info.threads);
    return d;
  }
  d.peak_gflops = gpu_peak(info.gpu_ordinal, info.precision).gflops;
  for (int ordinal : distinct(info.gpu_ordinals))
    d.buses.push_back(gpu_inventory().devices.at(std::size_t(ordinal)).pci_bus_id);
  return d;
}

}  // namespace

// NVML's sampler over the row's GPUs; null for a CPU row or without NVML (a note in the row says
// why: its NVML columns are empty, as docs/internals.md says).
std::unique_ptr<telemetry::GpuSampler> sampler_for(const std::vector<std::string>& buses, const RunEnv& env,
                                                   std::vector<std::string>& notes) {
  if (buses.empty()) return nullptr;
  telemetry::Nvml* nvml = env.nvml;
  if (!nvml) {
    const std::string why = env.nvml_unavailable ? *env.nvml_unavailable : "";
    const std::string note = fmt::format("no NVML columns: {}", why.empty() ? "NVML was not loaded" : why);
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
    return nullptr;
  }
  try {
    return std::make_unique<telemetry::GpuSampler>(*nvml, buses, unsigned(::getpid()));
  } catch (const Error& e) {
    notes.push_back(fmt::format("no NVML columns: {}", e.what()));
    return nullptr;
  }
}

void Baselines::add(const std::string& benchmark, double samples_per_s) { rates_[benchmark].push_back(samples_per_s); }

double Baselines::median(const std::string& benchmark) const {
  const auto found = rates_.find(benchmark);
  return found == rates_.end() ? 0 : tb::median(found->second);
}

StepBudget step_budget(const Flags& flags) {
  StepBudget b;
  if (flags.iterations_given || parallel::world().size > 1) b.fixed = flags.iterations;
  if (!flags.benchmark_min_time.empty()) b.min_time_s = std::strtod(flags.benchmark_min_time.c_str(), nullptr);
  return b;
}

bool on_rank_0_alone(const BenchInfo& info) {
  return parallel::world().size > 1 && info.run() == RunKind::OneReplica && info.kind == Kind::Epochs;
}

std::unique_ptr<BenchmarkRun> make_run(const BenchInfo& info, RunEnv env) {
  if (info.kind == Kind::Epochs) return make_epochs_run(info, env);
  if (info.replay) return make_replay_run(info, env);
  switch (info.run()) {
    case RunKind::OneReplica:
      return make_train_run(info, env);
    case RunKind::Replicas:
      return make_replicas_run(info, env);
    case RunKind::Processes:
      return make_jobs_run(info, env);
  }
  throw Error("make_run: a device kind without a run");
}

// Work per OpenMP thread below which a step's parallel regions cost more than they save: the
// LSTM's step (0.88 MFLOP) ran at 145,000-151,000 sequences/s on one thread of the 2-core VM and
// 94,000-132,000 on both; on a 16-core host, where each region wakes 16 threads, it ran at 4,600.
// Lanes (engine/cpu/network.hpp) open one region per pass instead of several per layer: the
// LSTM on two lanes of 10 sequences ran 191,000-195,000 (TB_CPU_LANES=1: 150,000).
constexpr double kFlopsPerThread = 10e6;

int BenchmarkRun::step_threads() {
  if (info_.backend != Backend::Cpu || info_.device_kind->name != std::string("cpu")) return info_.threads;
  const double flops = info_.cost.train_flops_per_sample() * double(info_.batch);
  const int fit = std::max(1, int(flops / kFlopsPerThread));
  if (fit >= info_.threads || lanes_at(info_.threads) > 1) return info_.threads;
  note(
      fmt::format("ran on {} of the {} cores: its step of {:.2g} MFLOP is too small to share (an OpenMP "
                  "parallel region would cost more than its part of the work)",
                  fit, info_.threads, flops * 1e-6));
  return fit;
}

int BenchmarkRun::lanes_at(int threads) {
  if (const auto it = lanes_.find(threads); it != lanes_.end()) return it->second;
  return lanes_[threads] = cpu_network_lanes(info_.spec, info_.batch, threads);  // nothing kept if it throws
}

std::vector<double> window_rates(const std::vector<double>& step_seconds, double samples_per_s) {
  const std::size_t n = step_seconds.size(), parts = std::min<std::size_t>(kWindows, n);
  if (parts < 2 || samples_per_s <= 0) return {};
  double total = 0;
  for (double s : step_seconds) total += s;
  std::vector<double> out;
  for (std::size_t k = 0; k < parts; ++k) {
    const std::size_t first = n * k / parts, last = n * (k + 1) / parts;
    double part = 0;
    for (std::size_t i = first; i < last; ++i) part += step_seconds[i];
    // The row's rate over the whole window, scaled by how much longer this part's steps took.
    if (part > 0) out.push_back(samples_per_s * (total / double(n)) / (part / double(last - first)));
  }
  return out;
}

Outcome BenchmarkRun::walk(benchmark::State& st) {
  notes_.clear();
  omp_set_num_threads(step_threads());
  verdicts_.clear();
  figures_ = Row{};
  prediction_inputs_.clear();
  if (!prepared_) {
    const auto local = [this] {
      devices_ = row_devices(info_);
      prepare();
    };
    if (on_rank_0_alone(info_))
      local();
    else
      parallel::set_up_together(info_.name, local);
    connect();
    warm_up();
    prepared_ = true;
  }
  note_lanes();
  const Window window = timed_steps(st);
  counters(window);
  if (!info_.plan_note.empty()) note(info_.plan_note);
  // Google Benchmark's own reporters (--benchmark_out) are given the figures as its counters.
  for (const Column& c : columns())
    if (c.kind == ColumnKind::Counter && c.type == CellType::Number)
      if (const Number v = figures_.*c.number) st.counters[c.name] = *v;
  Outcome out;
  Measurement& m = out.measured;
  m.figures = figures_;
  // A run of epochs is one iteration (results/SCHEMA.md: its epoch rows count the steps).
  m.steps = info_.kind == Kind::Epochs ? 1 : std::int64_t(window.steps);
  m.message = fmt::format("{}", fmt::join(notes_, "; "));
  m.verdicts = verdicts_;
  m.prediction_inputs = prediction_inputs_;
  const double rate = figures_.samples_per_s.value_or(0);
  m.windows = window_rates(window.step_seconds, rate);
  if (window.cpu_wait >= 0 && window.wall > 0) m.cpu_waiting = window.cpu_wait / window.wall;
  // What later rows are compared with (their baselines), and what this one is: the prediction
  // made for it in this run, on rank 0.
  if (rate > 0) env_.baselines->add(info_.name, rate);
  if (info_.kind == Kind::Train && parallel::world().rank == 0)
    if (const auto c = env_.predictor->compare(info_, rate)) {
      m.verdicts.push_back(c->verdict);
      m.prediction = c->prediction;
      out.lines.push_back(c->line);
    }
  return out;
}

void BenchmarkRun::comparisons(int devices) {
  Row& c = figures_;
  const double rate = c.samples_per_s.value_or(0);
  if (const double one = env_.baselines->median(info_.baseline); one > 0 && devices > 1) {
    c.scaling_efficiency = scaling_efficiency(rate, devices, one);
    if (rate < one) verdict("not_scaling");  // N devices did less than one
  }
  if (const double cpu = env_.baselines->median(info_.cpu_baseline); cpu > 0) c.speedup_vs_cpu = rate / cpu;
}

void BenchmarkRun::prepare_gpus() const {
  if (!info_.gpu()) return;
  for (int ordinal : distinct(info_.gpu_ordinals)) gpu_prepare(ordinal, info_.gpu_memory_limit);
}

std::unique_ptr<Network> BenchmarkRun::make_network(int device) const {
  return tb::make_network(info_.backend, info_.spec,
                          NetworkOptions{.batch = info_.batch,
                                         .optimizer = info_.optimizer,
                                         .seed = info_.seed,
                                         .device = device,
                                         .precision = parse_precision(info_.precision),
                                         .cuda_graph = info_.cuda_graph,
                                         .layout = parse_layout(info_.gpu_layout)});
}

BenchmarkRun::TrainerAt BenchmarkRun::TrainerAt::now(const Trainer& trainer) {
  return {.phases = trainer.phases(), .loss = trainer.losses().empty() ? NAN : trainer.losses().back()};
}

// Counters of the timed steps: throughput, utilisation, host CPU, losses, phases.
void BenchmarkRun::timed_counters(const Window& w, const Timed& t, const Trainer& trainer, const PhaseTimes& p0,
                                  const TrainerAt& end) {
  const double samples_per_s = t.samples_per_step / w.step_time();
  const double tflops = info_.cost.train_flops_per_sample() * samples_per_s * 1e-12;
  const PhaseTimes& p = end.phases;
  Row& c = figures_;
  c.samples_per_s = samples_per_s;
  c.step_time_s = w.step_time();
  c.wall_step_time_s = w.step_time();
  if (w.device_step_time > 0) {
    c.device_step_time_s = w.device_step_time;
    c.device_samples_per_s = t.samples_per_step / w.device_step_time;
  }
  c.model_tflops = tflops;
  c.peak_gflops = t.peak_gflops;
  c.utilisation = tflops * 1e3 / t.peak_gflops;
  if (!info_.gpu()) c.peak_spread = devices_.peak_spread;
  c.host_cpu_s_per_step = w.cpu / w.steps / t.replicas;
  c.host_cpu_util = w.cpu / w.wall;
  c.peak_rss_bytes = double(peak_rss_bytes());
  c.loss_first = trainer.losses().front();
  c.loss_last = end.loss;
  c.data_s_per_step = (p.data - p0.data) / w.steps;
  c.data_wait_s_per_step = (p.data_wait - p0.data_wait) / w.steps;
  if (p.split) {  // a step replayed as one CUDA graph has no phases
    c.forward_s_per_step = (p.forward - p0.forward) / w.steps;
    c.backward_s_per_step = (p.backward - p0.backward) / w.steps;
    c.update_s_per_step = (p.update - p0.update) / w.steps;
  }
}

// A CPU row whose batch ran as lanes (engine/cpu/network.hpp) says so: its step is the same
// training step, computed as slices.
void BenchmarkRun::note_lanes() {
  if (info_.backend != Backend::Cpu) return;
  const int lanes = lanes_at(omp_get_max_threads());
  if (lanes > 1)
    note(
        fmt::format("ran as {} lanes of {} samples: each slice of the batch through the whole network on a thread "
                    "of its own, the slices' weight gradients then summed (engine/cpu/network.hpp)",
                    lanes, info_.batch / lanes));
}

// A row above its peak says why that cannot be taken at face value. The FLOP count includes the
// convolutions' products with their zero padding, which trainbench's small-plane convolutions
// skip (a quarter of ResNet-152 32x32's): only the work that remains without them is held
// against the peak.
void BenchmarkRun::note_utilisation() {
  const double nominal = figures_.utilisation.value_or(0), u = nominal * info_.cost.needed_share();
  if (u <= 1) {
    if (nominal > 1)
      note(
          fmt::format("utilisation {:.2f} counts the convolutions' products with their zero padding, which "
                      "trainbench's small-plane convolutions skip; without them {:.2f}",
                      nominal, u));
    return;
  }
  verdict("above_peak");
  note(fmt::format(
      "utilisation {:.2f} exceeds 1 without the products with padding: the model's kernels ran faster than the peak "
      "({:.1f} GFLOP/s, spread {:.0f}%), so that peak was measured low (a busy machine?) or the FLOP count is high",
      u, figures_.peak_gflops.value_or(0), 100 * devices_.peak_spread));
}

// The same samples before and after, so a falling loss is not an artefact of easier batches: the
// loss of the first training batch at the first step (before any update) against a
// training-mode forward on it now (no update).
void check_loss_fell(Trainer& trainer) {
  const float before = trainer.losses().front(), after = trainer.first_batch_loss();
  // The first batch alone can look learnt by a model that blew up on every other (the MLP at
  // --lr=1e5: 2.3 on it before, less after, 8e17 on the last step's batch).
  constexpr float kBlewUp = 100;
  if (const float last = trainer.losses().back(); !(last <= before * kBlewUp))
    throw CheckFailed(
        fmt::format("loss blew up: {:.5g} at the first step, {:.5g} at the last of {} steps (training "
                    "diverged: lower the learning rate with --lr)",
                    before, last, trainer.losses().size()));
  if (after < before) return;
  // A loss well above where it started diverged; one about where it started sits on a plateau.
  constexpr float kRose = 1.05f;
  if (!(after <= before * kRose))
    throw CheckFailed(
        fmt::format("loss rose: {:.5g} on the first batch before training, {:.5g} after {} steps "
                    "(training diverged: lower the learning rate with --lr)",
                    before, after, trainer.losses().size()));
  throw CheckFailed(
      fmt::format("loss did not fall: {:.5g} on the first batch before training, {:.5g} after {} "
                  "steps (a model still on its initial plateau needs more steps: raise "
                  "--warmup_steps)",
                  before, after, trainer.losses().size()));
}

void memory_counters(Row& figures, const Network& network) {
  if (const MemoryReport* report = network.memory_report()) add_counters(figures, report->memory_counters());
}

TimedWindow::TimedWindow(BenchmarkRun& run)
    : run_(run), sampler_(sampler_for(run.devices_.buses, run.env_, run.notes_)) {}

TimedWindow::~TimedWindow() = default;

void TimedWindow::open() {
  if (sampler_) sampler_->start();
  wall0_ = wall_seconds();
  cpu0_ = process_cpu_seconds();
  cpu_wait0_ = process_cpu_wait_seconds();
}

Window TimedWindow::close(double steps, double samples) {
  Window w{.steps = steps, .wall = wall_seconds() - wall0_, .cpu = process_cpu_seconds() - cpu0_};
  // A thread that ended in the window took its wait with it: never below none.
  if (const double waited = process_cpu_wait_seconds(); cpu_wait0_ >= 0 && waited >= 0)
    w.cpu_wait = std::max(0.0, waited - cpu_wait0_);
  if (!sampler_) return w;
  const telemetry::GpuSummary summary = sampler_->stop();
  w.cpu -= summary.thread_cpu_s;
  add_counters(run_.figures_, summary.counters(samples));
  if (summary.mem_used_bytes && !summary.mem_is_process) run_.note(kDeviceWideMemoryNote);
  // A short row's median of 1 s averages reaches back before its timed steps.
  if (summary.power_median_w && !summary.power_instant)
    run_.note(
        "gpu_power_w from nvmlDeviceGetPowerUsage, which this driver averages over the last second (no "
        "instantaneous power field): a row of a few seconds includes power drawn before its timed steps");
  if (summary.throttle_known && summary.throttle_mask != 0)
    run_.note(fmt::format("GPU clocks held back during the timed steps: {}",
                          telemetry::throttle_reason_names(summary.throttle_mask)));
  return w;
}

}  // namespace tb::bench

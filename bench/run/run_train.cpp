// One replica's run of a train/ benchmark: a network and its data, warmed up once and kept
// across Google Benchmark's calls. Its step is the wall clock (host gaps included; a GPU step
// ends when the device is done: the step reads its loss back); on a GPU the device clock (CUDA
// events from the batch upload to the end of the update) has columns of its own.
#include <algorithm>
#include <chrono>
#include <thread>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/predict/inputs.hpp"
#include "bench/run/jobs.hpp"
#include "bench/run/run.hpp"
#include "datasets/sources.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/stats.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/probe.hpp"
#include "engine/parallel/timeline.hpp"
#include "engine/parallel/world.hpp"
#include "engine/train/trainer.hpp"

namespace tb::bench {

namespace {

// With --data_on_device the trainer pulls these: batch k is the network's resident batch k
// (ResidentData), with no host data at all.
class ResidentBatches final : public Dataset {
 public:
  ResidentBatches(std::string name, i64 batch, i64 batches) : name_(std::move(name)), batches_(batches) {
    batch_.batch = batch;
  }
  const Batch& next() override {
    batch_.index = step_++;
    return batch_;
  }
  void feed(Network& net, const Batch& batch) const override { net.resident_data()->use_resident(batch.index); }
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

// Keeps up to one epoch of `data` (at most kResidentMaxBytes) on the network's device and
// returns the dataset that names those batches.
std::unique_ptr<Dataset> make_resident(Network& network, Dataset& data, i64 batch) {
  ResidentData* resident = network.resident_data();
  TB_CHECK(resident, "--data_on_device: this backend cannot keep a dataset on its device");
  const std::size_t per_batch = resident->batch_bytes();
  const i64 fit = std::max<i64>(1, i64(kResidentMaxBytes / per_batch));
  const i64 batches = std::min(data.steps_per_epoch() > 0 ? data.steps_per_epoch() : fit, fit);
  resident->make_resident(data, batches);
  return std::make_unique<ResidentBatches>(data.name(), batch, batches);
}

class TrainRun final : public BenchmarkRun {
 public:
  using BenchmarkRun::BenchmarkRun;

 private:
  void prepare() override {
    prepare_gpus();
    std::unique_ptr<Network> network = make_network(info_.gpu_ordinal);
    splits_ = data::make_splits(info_.dataset, info_.data_folder, info_.spec, info_.loader);
    std::unique_ptr<Dataset> train = std::move(splits_.train);
    if (info_.data_on_device) train = make_resident(*network, *train, info_.batch);
    trainer_ = std::make_unique<Trainer>(std::move(network), std::move(train));
  }

  // The sharing probe's communicator, made before any rank times anything: MPI makes it in a
  // collective that spins while it waits, which made the ranks standing by take a core from rank
  // 0's timed steps.
  void connect() override {
    if (predicting() && parallel::world().size > 1 && !world_) world_ = parallel::world_comm();
  }

  void warm_up() override {
    for (i64 i = 0; i < info_.warmup_steps; ++i) trainer_->step();
  }

  Window timed_steps(benchmark::State& st) override {
    if (in_job()) return job_steps(st);
    TimedWindow window(*this);
    // When each gradient bucket becomes ready, for predicted N-device rows (a CUDA graph replays
    // backward without the hook that marks them).
    std::unique_ptr<parallel::TimelineRecorder> timeline;
    if (predicting() && !bystander()) timeline = std::make_unique<parallel::TimelineRecorder>(trainer_->network());
    p0_ = trainer_->phases();
    std::vector<double> times;  // each step's wall clock, host gaps included
    std::int64_t steps = 0;
    const StepBudget budget = this->budget();
    for (auto _ : st) {  // one iteration: the repetition's window of steps
      window.open();
      const double start = wall_seconds();
      double last = start;
      for (; budget.more(steps, last - start); ++steps) {
        if (bystander()) continue;
        if (timeline) timeline->before_step();
        trainer_->step();
        if (timeline) timeline->after_step();
        const double now = wall_seconds();
        times.push_back(now - last);
        last = now;
      }
    }
    Window w = window.close(double(steps), double(steps) * double(info_.batch));
    add_device_clock(w);
    end_ = TrainerAt::now(*trainer_);
    w.step_seconds = times;
    if (predicting()) measure_for_predictions(std::move(timeline), std::move(times), w);
    return w;
  }

  // Under mpirun a one-device row is rank 0's alone: the other ranks stand by during its timed
  // steps, then join its sharing probe.
  static bool bystander() { return parallel::world().rank != 0; }
  bool predicting() const { return info_.timeline && !info_.cuda_graph; }

  // What predictions of this row need beside its timeline: once per benchmark, on the first
  // window of a few steps or more, the data-parallel path's overhead and (under mpirun, on every
  // rank) how much slower the ranks compute together than rank 0 alone.
  void measure_for_predictions(std::unique_ptr<parallel::TimelineRecorder> timeline, std::vector<double> times,
                               const Window& w) {
    // The timeline first, and off: the probes' steps are not watched.
    if (timeline) measured_.timeline = timeline->timeline();
    timeline.reset();
    constexpr double kEnoughSeconds = 0.3;
    const bool enough = times.size() >= 3 || w.wall >= kEnoughSeconds;
    if (!probed_ && (parallel::world().size > 1 || enough)) {
      // Rank 0's probes first, while the other ranks wait at the sharing probe's barrier (which
      // sleeps between polls: a rank busy in an MPI call would slow rank 0's cores). Plain steps
      // unwatched by the timeline, timed as the probes time theirs (an untimed step, then at
      // least 5 steps and 0.5 s), once for both probes that need them: on a device the
      // data-parallel probe's (the timeline's marks are event records of microseconds against
      // steps as short as 0.3 ms), under mpirun the sharing probe's rank 0 alone (the row's
      // window, watched and its first, had made the ranks together look up to a quarter faster
      // than rank 0 alone: a slow-down of 0.77, efficiency 110%).
      const bool device_clock = trainer_->network().comm_endpoint().has_value();
      std::vector<double> plain;
      if (!bystander() && (device_clock || parallel::world().size > 1))
        plain = parallel::time_steps(*trainer_, parallel::ProbeSteps{});
      if (!bystander()) probe_dp_overhead(device_clock ? plain : times, device_clock);
      // A collective under mpirun: every rank, every benchmark, once.
      probe_sharing(plain.empty() ? w.step_time() : mean(plain));
      probed_ = true;
    }
    if (bystander()) return;
    measured_.step_times = std::move(times);
    prediction_inputs_ = format_prediction_inputs(measured_, sharing_ranks_, sharing_hosts_);
  }

  // Steps through the data-parallel path with a communicator of one replica (bucket bookkeeping,
  // collective launches, the device's wait for them), after an untimed one, at least 5 steps and
  // 0.5 s of them (parallel::time_replica_steps), against `plain` steps unwatched by the timeline.
  // On a device (`device_clock`) those are timed the same way just before; on the host, whose
  // timeline marks take about 100 ns, they are the row's own (a ResNet-152 step on the CPU takes
  // seconds).
  void probe_dp_overhead(const std::vector<double>& plain, bool device_clock) {
    const double step = tb::median(plain);
    std::vector<double> wrapped;
    try {
      wrapped = parallel::time_replica_steps(*trainer_, parallel::one_replica_comm(trainer_->network()),
                                             parallel::ProbeSteps{});
    } catch (const Error& e) {
      measured_.dp_overhead_source = fmt::format("not measured ({})", e.what());
      return;
    }
    // The noise of either set of steps (half its spread: how far a median of them may move)
    // bounds what the difference can tell.
    const double overhead = tb::median(wrapped) - step;
    const double noise = std::max(interquartile_range(plain), interquartile_range(wrapped)) / 2;
    measured_.dp_overhead = {std::max(0.0, overhead), std::max(0.0, overhead - noise), std::max(0.0, overhead + noise)};
    measured_.dp_overhead_source = fmt::format(
        "{} steps through the data-parallel path with one replica after an untimed one, {:.3g} ms, against {} "
        "plain steps {}, {:.3g} ms (noise {:.2g} ms)",
        wrapped.size(), tb::median(wrapped) * 1e3, plain.size(),
        device_clock ? "timed the same way just before" : "of the row", step * 1e3, noise * 1e3);
  }

  // Under mpirun: every rank steps its own replica at once, with no communication, as rank 0's
  // alone took `alone` seconds a step; the slow-down of the fastest and the slowest rank is the
  // range the ranks' compute shares this machine's cores, caches and memory bandwidth (or, for
  // emulated nodes on one GPU, the GPU).
  void probe_sharing(double alone) {
    if (parallel::world().size < 2) {
      measured_.sharing_source = "no ranks shared this machine in this run";
      return;
    }
    if (!world_) world_ = parallel::world_comm();
    // The ranks standing by wait here, sleeping between polls, until rank 0 has timed its steps
    // (their untimed step would share its cores); then, as the data-parallel probe, an untimed
    // step, then at least 5 steps and 0.5 s of them, timed from a barrier so that the ranks step
    // together.
    world_->barrier();
    const std::vector<double> steps =
        parallel::time_steps(*trainer_, parallel::ProbeSteps{}, [this] { world_->barrier(); });
    const double mine = mean(steps);
    const double slowest = world_->max(mine), fastest = world_->min(mine);
    const parallel::World& w = parallel::world();
    if (bystander()) return;
    measured_.sharing = {(slowest + fastest) / 2 / alone, fastest / alone, slowest / alone};
    sharing_ranks_ = w.size;
    sharing_hosts_ = w.nodes;
    measured_.sharing_source = fmt::format(
        "{} ranks stepping together on {} host(s): {:.3g} to {:.3g} ms a step against rank 0's {:.3g} ms "
        "alone, timed alike",
        w.size, w.nodes, fastest * 1e3, slowest * 1e3, alone * 1e3);
  }

  // A job of gpu:1/jobs:K (bench/run/jobs.hpp): its steps run in the window every job agreed on,
  // and when each ended goes to the process that started the jobs.
  Window job_steps(benchmark::State& st) {
    TimedWindow window(*this);
    p0_ = trainer_->phases();
    std::vector<double> ends;
    double first_start = 0;
    JobWindow agreed;
    for (auto _ : st) {  // one iteration: a job's benchmark runs its window once per repetition
      agreed = job_window();
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, agreed.start - wall_seconds())));
      window.open();
      first_start = wall_seconds();
      do {
        trainer_->step();
        ends.push_back(wall_seconds());
      } while (ends.back() < agreed.end);
    }
    record_job_steps(agreed, first_start, ends);
    Window w = window.close(double(ends.size()), double(ends.size()) * double(info_.batch));
    add_device_clock(w);
    end_ = TrainerAt::now(*trainer_);
    return w;
  }

  void add_device_clock(Window& w) const {
    if (info_.gpu()) w.device_step_time = (trainer_->phases().device - p0_.device) / w.steps;
  }

  void counters(const Window& w) override {
    if (bystander()) return;  // rank 0 reports the row
    check_loss_fell(*trainer_);
    timed_counters(w, Timed{.samples_per_step = double(info_.batch), .peak_gflops = devices_.peak_gflops}, *trainer_,
                   p0_, end_);
    memory_counters(figures_, trainer_->network());
    note_utilisation();
    comparisons(1);
    const double rate = figures_.samples_per_s.value_or(0);
    if (std::string slower = note_slower_than_fp32(rate, w.step_time()); !slower.empty()) {
      verdict("slower_than_fp32");
      note_first(slower);
    }
  }

  // A precision meant to be faster than fp32 that was not, in this invocation, says so and why
  // in its row: tensor cores shorten matrix work, and where a step is short kernels bound by
  // launches and memory, the casts of mixed precision and the loss-scale check (or TF32's other
  // kernel choices) cost about what they save.
  std::string note_slower_than_fp32(double rate, double step_time_s) const {
    const double fp32 = env_.baselines->median(info_.fp32_row);
    if (fp32 <= 0 || rate >= fp32) return "";
    const double step_ms = step_time_s * 1e3;
    constexpr double kShortStepMs = 5;  // a step of small kernels: launches and memory set its pace
    if (step_ms < kShortStepMs)
      return fmt::format(
          "{:.2f}x fp32's samples/s in this run: a step of {:.3g} ms of small kernels is bound by "
          "launches and memory, not matrix work, so {} gains nothing from tensor cores{}",
          rate / fp32, step_ms, info_.precision,
          info_.precision == "tf32" ? "" : " and pays for its casts and loss-scale checks");
    return fmt::format(
        "{:.2f}x fp32's samples/s in this run; TB_CUDA_LAYER_TIMES=<file> writes where each layer's "
        "time goes",
        rate / fp32);
  }

  data::Splits splits_;  // what the trainer's data left behind: the validation split
  std::unique_ptr<Trainer> trainer_;
  PhaseTimes p0_;
  TrainerAt end_;                              // at the window's close, before the prediction probes' steps
  parallel::OneDevice measured_;               // for predictions: the probes' results, kept across calls
  int sharing_ranks_ = 0, sharing_hosts_ = 0;  // the sharing probe's ranks and hosts (0: none)
  bool probed_ = false;
  std::unique_ptr<parallel::Communicator> world_;  // under mpirun: the sharing probe's
};

}  // namespace

std::unique_ptr<BenchmarkRun> make_train_run(const BenchInfo& info, RunEnv env) {
  return std::make_unique<TrainRun>(info, env);
}

}  // namespace tb::bench

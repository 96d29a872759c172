// One replica's run of a train/ benchmark: a network and its data, warmed up once and kept
// across Google Benchmark's calls. Its step is the wall clock (host gaps included; a GPU step
// ends when the device is done: the step reads its loss back); on a GPU the device clock (CUDA
// events from the batch upload to the end of the update) has columns of its own.
#include <chrono>
#include <thread>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/jobs.hpp"
#include "bench/run.hpp"
#include "datasets/sources.hpp"
#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "engine/parallel/timeline.hpp"
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
    if (info_.data_on_device && info_.gpu()) train = make_resident(*network, *train, info_.batch);
    trainer_ = std::make_unique<Trainer>(std::move(network), std::move(train));
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
    if (info_.timeline && !info_.cuda_graph)
      timeline = std::make_unique<parallel::TimelineRecorder>(trainer_->network());
    p0_ = trainer_->phases();
    window.open();
    for (auto _ : st) {
      if (timeline) timeline->before_step();
      trainer_->step();
      if (timeline) timeline->after_step();
    }
    Window w = window.close(st, double(st.iterations()), double(st.iterations()) * double(info_.batch));
    if (timeline) (*env_.timelines)[info_.name] = timeline->timeline();
    add_device_clock(w);
    return w;
  }

  // A job of gpu:1/jobs:K (bench/jobs.hpp): its steps run in the window every job agreed on,
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
    Window w = window.close(st, double(ends.size()), double(ends.size()) * double(info_.batch));
    add_device_clock(w);
    return w;
  }

  void add_device_clock(Window& w) const {
    if (info_.gpu()) w.device_step_time = (trainer_->phases().device - p0_.device) / w.steps;
  }

  void counters(benchmark::State& st, const Window& w) override {
    check_loss_fell(*trainer_);
    timed_counters(st, w, Timed{.samples_per_step = double(info_.batch), .peak_gflops = devices_.peak_gflops},
                   *trainer_, p0_);
    memory_counters(st, trainer_->network());
    note_utilisation(st);
    const double rate = st.counters["samples_per_s"];
    env_.baselines->add(info_, rate);
    if (std::string slower = note_slower_than_fp32(rate, w.step_time()); !slower.empty()) note_first(slower);
  }

  // A precision meant to be faster than fp32 that was not, in this invocation, says so and why
  // in its row: tensor cores shorten matrix work, and where a step is short kernels bound by
  // launches and memory, the casts of mixed precision and the loss-scale check (or TF32's other
  // kernel choices) cost about what they save.
  std::string note_slower_than_fp32(double rate, double step_time_s) const {
    if (!info_.gpu() || info_.precision == "fp32") return "";
    const double fp32 = env_.baselines->median(info_, "fp32");
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
};

}  // namespace

std::unique_ptr<BenchmarkRun> make_train_run(const BenchInfo& info, RunEnv env) {
  return std::make_unique<TrainRun>(info, env);
}

}  // namespace tb::bench

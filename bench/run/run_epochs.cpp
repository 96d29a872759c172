// The run of an epochs/ benchmark: whole epochs from scratch in Google Benchmark's one iteration,
// each epoch reported as it ends, with the time to the target accuracy. Every call trains a new
// network, so the network is built inside the iteration and the run is not kept across calls.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "bench/output/rows.hpp"
#include "bench/run/run.hpp"
#include "datasets/sources.hpp"
#include "engine/core/error.hpp"
#include "engine/train/trainer.hpp"

namespace tb::bench {

namespace {

class EpochsRun final : public BenchmarkRun {
 public:
  using BenchmarkRun::BenchmarkRun;
  bool kept_across_calls() const override { return false; }

 private:
  Window timed_steps(benchmark::State& st) override {
    for (auto _ : st) {  // one iteration: the whole run of epochs
      build();
      if (!splits_.validation) throw InputError(splits_.no_validation);
      TimedWindow window(*this);
      window.open();
      result_ = train_epochs(*trainer_, *splits_.validation, splits_.validation_steps,
                             EpochOptions{.epochs = info_.epochs, .target_accuracy = info_.target_accuracy},
                             [&](const EpochRecord& r) { (*env_.on_epoch)(info_, r); });
      const EpochRecord& last = result_.records.back();
      // The energy of training and of the validation passes, over the samples of both.
      const double validated = double(last.epoch * splits_.validation_steps * info_.batch);
      window_ = window.close(double(st.iterations()), double(last.steps * info_.batch) + validated);
    }
    // The timed steps are the training of every epoch, validation left out: its wall and CPU
    // time, each measured over the training steps alone (the CPU time was the window's scaled by
    // the training's share of its wall time, as if validation used the cores alike). A GPU row's
    // includes NVML's sampling thread over those steps (milliseconds a second).
    const EpochRecord& last = result_.records.back();
    const double steps = double(last.steps);
    return Window{.steps = steps, .wall = last.train_s, .cpu = last.train_cpu_s};
  }

  void counters(const Window& w) override {
    check_loss_fell(*trainer_);
    timed_counters(w, Timed{.samples_per_step = double(info_.batch), .peak_gflops = devices_.peak_gflops}, *trainer_,
                   PhaseTimes{}, TrainerAt::now(*trainer_));
    memory_counters(figures_, trainer_->network());
    const EpochRecord& last = result_.records.back();
    set_epoch_figures(figures_, last);
    figures_.time_to_target_s = result_.time_to_target_s;
    if (info_.target_accuracy > 0 && result_.time_to_target_s < 0)
      throw CheckFailed(fmt::format("validation accuracy {:.4f} after {} epoch{} never reached the target {:.4f}",
                                    last.val_acc, last.epoch, last.epoch == 1 ? "" : "s", info_.target_accuracy));
  }

  void build() {
    prepare_gpus();
    std::unique_ptr<Network> network = make_network(info_.gpu_ordinal);
    splits_ = data::make_splits(info_.dataset, info_.data_folder, info_.spec, info_.loader);
    trainer_ = std::make_unique<Trainer>(std::move(network), std::move(splits_.train));
  }

  data::Splits splits_;
  std::unique_ptr<Trainer> trainer_;
  EpochResult result_;
  Window window_;
};

}  // namespace

std::unique_ptr<BenchmarkRun> make_epochs_run(const BenchInfo& info, RunEnv env) {
  return std::make_unique<EpochsRun>(info, env);
}

}  // namespace tb::bench

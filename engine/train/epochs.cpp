// The epoch loop.
#include "engine/train/epochs.hpp"

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb {

EpochResult train_epochs(Trainer& trainer, Dataset& validation, i64 validation_steps, const EpochOptions& options,
                         const std::function<void(const EpochRecord&)>& on_epoch) {
  const i64 steps_per_epoch = trainer.dataset().steps_per_epoch();
  TB_CHECK(steps_per_epoch > 0, "{}: the training data has no epochs", trainer.dataset().name());
  TB_CHECK(validation_steps > 0, "{}: the validation split holds no whole batch", validation.name());
  EpochResult result;
  const double start = wall_seconds();
  double train_s = 0, train_cpu_s = 0;
  for (i64 epoch = 1; epoch <= options.epochs; ++epoch) {
    trainer.reset_tally();
    const double t0 = wall_seconds(), cpu0 = process_cpu_seconds();
    for (i64 s = 0; s < steps_per_epoch; ++s) trainer.step();
    train_s += wall_seconds() - t0;
    train_cpu_s += process_cpu_seconds() - cpu0;
    const Tally train = trainer.tally();
    const Tally val = trainer.evaluate(validation, validation_steps);
    EpochRecord r;
    r.epoch = epoch;
    r.train_loss = train.mean_loss();
    r.val_loss = val.mean_loss();
    r.train_acc = train.accuracy();
    r.val_acc = val.accuracy();
    r.elapsed_s = wall_seconds() - start;
    r.train_s = train_s;
    r.train_cpu_s = train_cpu_s;
    r.steps = epoch * steps_per_epoch;
    result.records.push_back(r);
    if (on_epoch) on_epoch(r);
    if (options.target_accuracy > 0 && r.val_acc >= options.target_accuracy) {
      result.time_to_target_s = r.elapsed_s;
      break;
    }
  }
  return result;
}

}  // namespace tb

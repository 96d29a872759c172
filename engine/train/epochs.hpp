// Training to the end of E epochs with a validation pass after each (user story 003's table),
// optionally stopping once the validation accuracy reaches a target.
#pragma once

#include <functional>

#include "engine/train/trainer.hpp"

namespace tb {

struct EpochRecord {
  i64 epoch = 0;  // 1-based
  double train_loss = 0, val_loss = 0;
  double train_acc = -1, val_acc = -1;  // -1 for regression
  double elapsed_s = 0;                 // since training started, validation passes included
  double train_s = 0;                   // the training steps alone, summed so far
  double train_cpu_s = 0;               // this process's CPU time over those steps, summed so far
  i64 steps = 0;                        // training steps so far
};

struct EpochOptions {
  i64 epochs = 1;
  double target_accuracy = 0;  // > 0: stop at the first epoch whose validation accuracy reaches it
};

struct EpochResult {
  std::vector<EpochRecord> records;
  double time_to_target_s = -1;  // elapsed seconds when the target was reached, -1 if never
};

EpochResult train_epochs(Trainer& trainer, Dataset& validation, i64 validation_steps, const EpochOptions& options,
                         const std::function<void(const EpochRecord&)>& on_epoch);

}  // namespace tb

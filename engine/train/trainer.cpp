// One training step and its checks; evaluation passes.
#include "engine/train/trainer.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb {

namespace {
void check_finite(float loss, std::size_t step, const char* phase) {
  if (!std::isfinite(loss))
    throw CheckFailed(fmt::format("loss is {} at {} step {} (diverged: lower the learning rate with --lr)",
                                  std::isnan(loss) ? "NaN" : "inf", phase, step));
}
}  // namespace

void Tally::add(float loss, i64 batch_correct, i64 batch_samples) {
  loss_sum += loss;
  ++steps;
  if (batch_correct < 0)
    correct = -1;
  else if (correct >= 0)
    correct += batch_correct;
  samples += batch_samples;
}

Trainer::Trainer(std::unique_ptr<Network> network, std::unique_ptr<Dataset> data)
    : network_(std::move(network)), data_(std::move(data)) {
  losses_.reserve(1024);
}

float Trainer::step() {
  // This step's batch: fetched ahead during the last step, or now, on the step's critical path.
  if (!staged_) {
    const double t0 = wall_seconds();
    const Batch& batch = data_->next();
    const double t1 = wall_seconds();
    data_->feed(*network_, batch);
    phases_.data_wait += t1 - t0;
    phases_.data += wall_seconds() - t0;
    staged_ = &batch;
  }
  const Batch& batch = *staged_;
  if (losses_.empty()) first_batch_ = batch;  // before a fetch may reuse the dataset's buffer
  const i64 samples = batch.samples();
  network_->start_step();
  staged_ = nullptr;
  if (network_->asynchronous()) {
    try {
      staged_ = &data_->next();
      data_->feed(*network_, *staged_);
    } catch (...) {
      // The step in flight is not waited for: the network forgets it and can step again.
      staged_ = nullptr;
      network_->abandon_step();
      throw;
    }
  }
  StepTimes times;
  const float loss = network_->finish_step(times);
  check_finite(loss, losses_.size() + 1, "training");
  if (times.data >= 0) phases_.data += times.data;  // what the device still waited for
  if (times.forward >= 0) {
    phases_.forward += times.forward;
    phases_.backward += times.backward;
    phases_.update += times.update;
  } else {
    phases_.split = false;
  }
  if (times.device >= 0) phases_.device += times.device;
  last_device_seconds_ = times.device;
  losses_.push_back(loss);
  tally_.add(loss, network_->correct(), samples);
  return loss;
}

void Trainer::restage() {
  if (staged_) data_->feed(*network_, *staged_);
}

float Trainer::first_batch_loss() {
  data_->feed(*network_, first_batch_);
  const float loss = network_->forward();
  restage();
  return loss;
}

Tally Trainer::evaluate(Dataset& data, i64 steps) {
  Tally t;
  for (i64 s = 0; s < steps; ++s) {
    const Batch& batch = data.next();
    data.feed(*network_, batch);
    const float loss = network_->evaluate();
    check_finite(loss, std::size_t(s + 1), "validation");
    t.add(loss, network_->correct(), batch.samples());
  }
  restage();
  return t;
}

}  // namespace tb

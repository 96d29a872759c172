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
i64 batch_samples(const Batch& b) { return i64(b.labels.size()); }
}  // namespace

void Tally::add(float loss, i64 batch_correct, i64 batch_samples) {
  loss_sum += loss;
  ++steps;
  if (batch_correct < 0) correct = -1;
  else if (correct >= 0) correct += batch_correct;
  samples += batch_samples;
}

Trainer::Trainer(std::unique_ptr<Network> network, std::unique_ptr<Dataset> data)
    : network_(std::move(network)), data_(std::move(data)) {
  losses_.reserve(1024);
}

float Trainer::step() {
  const double t0 = wall_seconds();
  const Batch& batch = data_->next();
  const double t1 = wall_seconds();
  network_->set_batch(batch.view());
  const double t2 = wall_seconds();
  const float loss = network_->forward();
  const double t3 = wall_seconds();
  check_finite(loss, losses_.size() + 1, "training");
  network_->backward();
  const double t4 = wall_seconds();
  network_->update();
  const double t5 = wall_seconds();
  phases_.data_wait += t1 - t0;
  phases_.data += t2 - t0;
  phases_.forward += t3 - t2;
  phases_.backward += t4 - t3;
  phases_.update += t5 - t4;
  if (losses_.empty()) first_batch_ = batch;
  losses_.push_back(loss);
  tally_.add(loss, network_->correct(), batch_samples(batch));
  return loss;
}

Tally Trainer::evaluate(Dataset& data, i64 steps) {
  Tally t;
  for (i64 s = 0; s < steps; ++s) {
    const Batch& batch = data.next();
    network_->set_batch(batch.view());
    const float loss = network_->evaluate();
    check_finite(loss, std::size_t(s + 1), "validation");
    t.add(loss, network_->correct(), batch_samples(batch));
  }
  return t;
}

}  // namespace tb

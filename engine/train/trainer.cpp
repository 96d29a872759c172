// One training step and its checks.
#include "engine/train/trainer.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb {

Trainer::Trainer(std::unique_ptr<Network> network, std::unique_ptr<Dataset> data)
    : network_(std::move(network)), data_(std::move(data)) {
  losses_.reserve(1024);
}

float Trainer::step() {
  const double t0 = wall_seconds();
  network_->set_batch(data_->next().view());
  const double t1 = wall_seconds();
  const float loss = network_->forward();
  const double t2 = wall_seconds();
  if (!std::isfinite(loss))
    throw CheckFailed(fmt::format("loss is {} at step {} (diverged: lower the learning rate with --lr)",
                                  std::isnan(loss) ? "NaN" : "inf", losses_.size() + 1));
  network_->backward();
  const double t3 = wall_seconds();
  network_->update();
  const double t4 = wall_seconds();
  phases_.data += t1 - t0;
  phases_.forward += t2 - t1;
  phases_.backward += t3 - t2;
  phases_.update += t4 - t3;
  losses_.push_back(loss);
  return loss;
}

}  // namespace tb

// The trainer: pulls a batch, runs forward, backward and the optimizer step, checks the loss,
// and keeps the time each phase took.
#pragma once

#include <memory>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/network.hpp"

namespace tb {

struct PhaseTimes {
  double data = 0, forward = 0, backward = 0, update = 0;  // seconds, summed over steps
};

class Trainer {
 public:
  Trainer(std::unique_ptr<Network> network, std::unique_ptr<Dataset> data);

  // One training step; returns its loss. Throws CheckFailed on a non-finite loss.
  float step();

  const std::vector<float>& losses() const { return losses_; }
  const PhaseTimes& phases() const { return phases_; }
  Network& network() { return *network_; }
  const Dataset& dataset() const { return *data_; }

 private:
  std::unique_ptr<Network> network_;
  std::unique_ptr<Dataset> data_;
  std::vector<float> losses_;
  PhaseTimes phases_;
};

}  // namespace tb

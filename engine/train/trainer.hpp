// The trainer: pulls a batch, runs forward, backward and the optimizer step, checks the loss,
// keeps the time each phase took, and evaluates on a validation split.
#pragma once

#include <memory>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/network.hpp"

namespace tb {

struct PhaseTimes {
  double data_wait = 0;                          // waiting for the loader's next batch
  double data = 0;                               // the wait plus copying the batch into the network
  double forward = 0, backward = 0, update = 0;  // seconds, summed over steps
  bool split = true;                             // false once a step could not be split into phases (a CUDA graph)
  double device = 0;                             // the steps measured on the device clock (GPU backends)
};

// Loss and accuracy summed over steps.
struct Tally {
  double loss_sum = 0;
  i64 steps = 0;
  i64 correct = 0;  // -1 when the task has no accuracy (regression)
  i64 samples = 0;
  double mean_loss() const { return steps ? loss_sum / double(steps) : 0.0; }
  double accuracy() const { return correct >= 0 && samples ? double(correct) / double(samples) : -1.0; }
  void add(float loss, i64 batch_correct, i64 batch_samples);
};

class Trainer {
 public:
  Trainer(std::unique_ptr<Network> network, std::unique_ptr<Dataset> data);

  // One training step; returns its loss. Throws CheckFailed on a non-finite loss. On an
  // asynchronous backend the next batch is fetched and set (uploaded) while the step computes,
  // as an input pipeline does, so the step waits only for what is not ready by its start; where
  // that batch cannot be had, the network abandons the step in flight and the error propagates.
  float step();
  // The training-mode loss of the first batch trained on, now (no update): for the check that
  // training lowered it.
  float first_batch_loss();
  // Inference-mode loss and accuracy over the next `steps` batches of `data`.
  Tally evaluate(Dataset& data, i64 steps);

  const std::vector<float>& losses() const { return losses_; }
  const PhaseTimes& phases() const { return phases_; }
  // The last step measured on the device clock, negative on a backend without one.
  double last_device_seconds() const { return last_device_seconds_; }
  // Loss and accuracy of the training steps since the last reset (an epoch's figures).
  const Tally& tally() const { return tally_; }
  void reset_tally() { tally_ = Tally{}; }
  Network& network() { return *network_; }
  // Trains through `network` from now on (the same weights and batch buffers: a wrapper of the
  // network it had, or that network back); returns the one it had.
  std::unique_ptr<Network> swap_network(std::unique_ptr<Network> network) {
    std::swap(network, network_);
    return network;
  }
  Dataset& dataset() { return *data_; }

 private:
  // Gives the network the batch fetched ahead again, after something else set another one.
  void restage();

  std::unique_ptr<Network> network_;
  std::unique_ptr<Dataset> data_;
  const Batch* staged_ = nullptr;  // fetched and set ahead for the next step (the dataset's buffer)
  std::vector<float> losses_;
  Batch first_batch_;  // a copy of the first batch trained on; losses_.front() is its loss before any update
  PhaseTimes phases_;
  double last_device_seconds_ = -1;
  Tally tally_;
};

}  // namespace tb

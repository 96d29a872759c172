// The sine wave of the LSTM workload: sin(2 pi t / 25), with a training range and a later
// validation range. Training windows start at random points of the training range;
// validation windows tile the validation range in order.
#pragma once

#include "engine/core/dataset.hpp"

namespace tb::data {

class SineWave final : public Dataset {
 public:
  static constexpr double kPeriod = 25.0;
  static constexpr i64 kTrainLength = 20000, kValidationLength = 5000;

  SineWave(i64 seq_len, i64 batch, bool validation, std::uint64_t seed);
  const Batch& next() override;
  std::string name() const override { return "sine"; }
  std::string source() const override { return "generated"; }
  i64 steps_per_epoch() const override { return steps_per_epoch_; }
  double wait_seconds() const override { return wait_seconds_; }

 private:
  i64 seq_len_, batch_;
  bool validation_;
  std::uint64_t seed_;
  i64 steps_per_epoch_;
  i64 step_ = 0;
  double wait_seconds_ = 0;
  Batch batch_data_;
};

}  // namespace tb::data

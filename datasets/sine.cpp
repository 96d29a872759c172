// Windows of the sine wave: input (T, N, 1) is the wave, the target the wave one step later.
#include "datasets/sine.hpp"

#include <cmath>
#include <random>

#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"

namespace tb::data {

SineWave::SineWave(i64 seq_len, i64 batch, bool validation, std::uint64_t seed)
    : seq_len_(seq_len), batch_(batch), validation_(validation), seed_(seed) {
  const i64 length = validation ? kValidationLength : kTrainLength;
  steps_per_epoch_ = (length - 1) / (seq_len * batch);
  if (steps_per_epoch_ == 0)
    throw InputError(fmt::format("sine: {} windows of {} steps do not fit in {} points", batch, seq_len, length));
  batch_data_.input.resize(std::size_t(seq_len * batch));
  batch_data_.targets.resize(std::size_t(seq_len * batch));
  batch_data_.batch = batch;
}

const Batch& SineWave::next() {
  const double t0 = wall_seconds();
  const i64 step = step_++;
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + std::uint64_t(step));
  const i64 first = validation_ ? kTrainLength : 0;
  const i64 length = validation_ ? kValidationLength : kTrainLength;
  for (i64 n = 0; n < batch_; ++n) {
    const i64 start = validation_ ? ((step % steps_per_epoch_) * batch_ + n) * seq_len_
                                  : i64(rng() % std::uint64_t(length - seq_len_ - 1));
    for (i64 t = 0; t < seq_len_; ++t) {
      const double x = double(first + start + t);
      batch_data_.input[t * batch_ + n] = float(std::sin(2 * M_PI * x / kPeriod));
      batch_data_.targets[t * batch_ + n] = float(std::sin(2 * M_PI * (x + 1) / kPeriod));
    }
  }
  wait_seconds_ += wall_seconds() - t0;
  return batch_data_;
}

}  // namespace tb::data

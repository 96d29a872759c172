// Synthetic, learnable data for every model: images and vectors drawn around a fixed pattern
// per class, and the sine wave for the LSTM. Batches are generated once into a small pool and
// cycled, so that data preparation costs nothing on the step path.
#pragma once

#include <memory>
#include <string>

#include "engine/core/dataset.hpp"
#include "engine/core/spec.hpp"

namespace tb::data {

// Classification: sample = prototype[label] + N(0, 1) noise, prototypes ~ N(0, 0.5^2).
std::unique_ptr<Dataset> synthetic_images(const std::string& name, const Dims& sample_dims, i64 classes,
                                          i64 batch, std::uint64_t seed, int pool_batches = 8);

// Regression: windows of sin(2 pi t / 25) with a random phase; input (T, N, 1) is the wave,
// target (T, N, 1) the wave one step later.
std::unique_ptr<Dataset> sine_wave(i64 seq_len, i64 batch, std::uint64_t seed, int pool_batches = 8);

// The synthetic dataset of a workload's model spec.
std::unique_ptr<Dataset> synthetic_for(const std::string& name, const ModelSpec& model, i64 batch,
                                       std::uint64_t seed);

}  // namespace tb::data

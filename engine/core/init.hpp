// Deterministic parameter initialisation in canonical layouts, the same for every backend.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/spec.hpp"

namespace tb {

// Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) as PyTorch's Linear default, He normal
// N(0, 2/fan_in) for convolutions, constants for biases and batch norm.
std::vector<float> init_param(const ParamSpec& param, std::uint64_t seed);

}  // namespace tb

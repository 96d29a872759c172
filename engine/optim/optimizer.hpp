// Optimizers as one fused pass over the flat parameter, gradient and state buffers.
#pragma once

#include <cstdint>

#include "engine/core/buffer.hpp"
#include "engine/core/network.hpp"
#include "engine/cpu/kernels/kernels.hpp"

namespace tb {

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, std::int64_t n);
  // params (n), grads (n): updated in place; state lives here, laid out like params.
  void step(float* params, const float* grads);
  // Every gradient is multiplied by `scale` inside step()'s pass (1 by default): a mean over
  // data-parallel replicas whose communicator left sums costs no pass of its own.
  void set_gradient_scale(float scale) { grad_scale_ = scale; }
  const OptimizerConfig& config() const { return config_; }
  std::int64_t state_bytes() const { return (first_.size() + second_.size()) * std::int64_t(sizeof(float)); }

 private:
  OptimizerConfig config_;
  std::int64_t n_;
  std::int64_t steps_ = 0;
  float grad_scale_ = 1.0f;
  HostBuffer first_;                    // SGD velocity, Adam first moment
  HostBuffer second_;                   // Adam second moment
  const cpu::kernels::Table& kernels_;  // the ISA active when the optimizer was made
};

}  // namespace tb

// SGD with momentum and Adam over flat buffers: the kernels of the ISA found at run time
// (engine/cpu/kernels), parallel with OpenMP, vectorised per thread.
#include "engine/optim/optimizer.hpp"

#include <cmath>

namespace tb {

const char* optimizer_name(OptimizerConfig::Kind kind) { return kind == OptimizerConfig::Kind::Adam ? "adam" : "sgd"; }

Optimizer::Optimizer(const OptimizerConfig& config, std::int64_t n)
    : config_(config),
      n_(n),
      first_(n),
      second_(config.kind == OptimizerConfig::Kind::Adam ? n : 0),
      kernels_(cpu::kernels::active()) {}

void Optimizer::step(float* params, const float* grads) {
  ++steps_;
  cpu::kernels::Update u{.n = n_,
                         .params = params,
                         .grads = grads,
                         .first = first_.data(),
                         .second = second_.data(),
                         .lr = float(config_.lr),
                         .weight_decay = float(config_.weight_decay),
                         .grad_scale = grad_scale_};
  if (config_.kind == OptimizerConfig::Kind::SGD) {
    u.momentum = float(config_.momentum);
    kernels_.sgd(u);
    return;
  }
  u.beta1 = float(config_.beta1), u.beta2 = float(config_.beta2), u.eps = float(config_.eps);
  u.bias1 = float(1.0 / (1.0 - std::pow(config_.beta1, double(steps_))));
  u.bias2 = float(1.0 / (1.0 - std::pow(config_.beta2, double(steps_))));
  kernels_.adam(u);
}

}  // namespace tb

// SGD with momentum and Adam over flat buffers, parallel with OpenMP, vectorised per thread.
#include "engine/optim/optimizer.hpp"

#include <cmath>

namespace tb {
namespace {
// Elements per piece of work: the threads take pieces as they finish the last, because their
// shares are not equally fast. After backward the gradients and weights of the first layers
// (the last to be computed) are still in cache and the others are not: with equal static
// halves one thread waited for the other (on the MLP, perf counted the second thread twice as
// long in this loop as the first).
constexpr std::int64_t kChunk = 16384;
}  // namespace

const char* optimizer_name(OptimizerConfig::Kind kind) { return kind == OptimizerConfig::Kind::Adam ? "adam" : "sgd"; }

Optimizer::Optimizer(const OptimizerConfig& config, std::int64_t n)
    : config_(config), n_(n), first_(n), second_(config.kind == OptimizerConfig::Kind::Adam ? n : 0) {}

void Optimizer::step(float* params, const float* grads) {
  ++steps_;
  const std::int64_t n = n_;
  const float lr = float(config_.lr), wd = float(config_.weight_decay), scale = grad_scale_;
  float* m = first_.data();
  if (config_.kind == OptimizerConfig::Kind::SGD) {
    const float mu = float(config_.momentum);
#pragma omp parallel for simd schedule(dynamic, kChunk)
    for (std::int64_t i = 0; i < n; ++i) {
      const float g = grads[i] * scale + wd * params[i];
      m[i] = mu * m[i] + g;
      params[i] -= lr * m[i];
    }
    return;
  }
  float* v = second_.data();
  const float b1 = float(config_.beta1), b2 = float(config_.beta2), eps = float(config_.eps);
  const float c1 = float(1.0 / (1.0 - std::pow(config_.beta1, double(steps_))));
  const float c2 = float(1.0 / (1.0 - std::pow(config_.beta2, double(steps_))));
#pragma omp parallel for simd schedule(dynamic, kChunk)
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * scale + wd * params[i];
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    params[i] -= lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
  }
}

}  // namespace tb

// The default training step of a backend that runs synchronously on the host.
#include "engine/core/network.hpp"

#include "engine/core/timer.hpp"

namespace tb {

float Network::train_step(StepTimes& times) {
  const double t0 = wall_seconds();
  const float loss = forward();
  const double t1 = wall_seconds();
  backward();
  const double t2 = wall_seconds();
  update();
  const double t3 = wall_seconds();
  times = StepTimes{.forward = t1 - t0, .backward = t2 - t1, .update = t3 - t2, .device = -1};
  return loss;
}

std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

}  // namespace tb

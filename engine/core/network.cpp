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

}  // namespace tb

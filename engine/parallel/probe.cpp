// Probes of a one-device row's steps (probe.hpp).
#include "engine/parallel/probe.hpp"

#include "engine/core/timer.hpp"
#include "engine/parallel/replica.hpp"

namespace tb::parallel {

std::vector<double> time_steps(Trainer& trainer, ProbeSteps count, const std::function<void()>& before_timing) {
  trainer.step();
  if (before_timing) before_timing();
  std::vector<double> times;
  const double start = wall_seconds();
  double last = start;
  while (int(times.size()) < count.steps || last - start < count.seconds) {
    trainer.step();
    const double now = wall_seconds();
    times.push_back(now - last);
    last = now;
  }
  return times;
}

std::vector<double> time_replica_steps(Trainer& trainer, std::unique_ptr<Communicator> comm, ProbeSteps count) {
  std::unique_ptr<Network> plain = trainer.swap_network(nullptr);
  try {
    trainer.swap_network(std::make_unique<ReplicaNetwork>(std::move(plain), std::move(comm)));
  } catch (...) {
    trainer.swap_network(std::move(plain));  // the replica did not take it (replica.hpp)
    throw;
  }
  // The trainer gets its own network back, unwrapped, whatever happens.
  auto unwrap = [&] {
    std::unique_ptr<Network> wrapper = trainer.swap_network(nullptr);
    trainer.swap_network(static_cast<ReplicaNetwork&>(*wrapper).release());
  };
  try {
    std::vector<double> times = time_steps(trainer, count);
    unwrap();
    return times;
  } catch (...) {
    unwrap();
    throw;
  }
}

}  // namespace tb::parallel

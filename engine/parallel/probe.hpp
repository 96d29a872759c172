// The probes a one-device row runs for its predictions (bench/run/run_train.cpp): steps timed one
// by one after an untimed one, plain or through the data-parallel path with a communicator of
// one replica, on the trainer's own upload path (its prefetch included).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/parallel/communicator.hpp"
#include "engine/train/trainer.hpp"

namespace tb::parallel {

// How many steps a probe times: at least `steps` and at least `seconds` of them, after one
// untimed step (its first through a new path pays that path's first use: NCCL's lazy set-up, a
// batch uploaded before the path was put in).
struct ProbeSteps {
  int steps = 5;
  double seconds = 0.5;
};

// Each timed step's wall clock (host gaps included), after the untimed one; `before_timing` runs
// between the two (a barrier, so that ranks start timing together).
std::vector<double> time_steps(Trainer& trainer, ProbeSteps count, const std::function<void()>& before_timing = {});

// The same through ReplicaNetwork over `comm`: the trainer's network is wrapped for the probe
// and given back, unwrapped, after it (also when a step throws).
std::vector<double> time_replica_steps(Trainer& trainer, std::unique_ptr<Communicator> comm, ProbeSteps count);

}  // namespace tb::parallel

// --replay_from=CSV: the benchmarks of a saved run's one-device rows replayed on this MPI world's
// ranks (replays.cpp). In predict/ beside the prediction inputs it reads, so that plan/ reads no
// CSV.
#pragma once

#include <vector>

#include "bench/cli/flags.hpp"
#include "bench/plan/configs.hpp"

namespace tb::bench {

// A benchmark per one-device train/ row of the file that the filter takes and that holds
// prediction_inputs, as mpi:N over this MPI world. Throws tb::InputError on a file that cannot be
// read or holds no such row.
std::vector<BenchInfo> plan_replays(const Flags& flags);

}  // namespace tb::bench

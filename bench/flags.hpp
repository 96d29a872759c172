// trainbench's own command-line flags (Google Benchmark's --benchmark_* flags pass through).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tb::bench {

struct Flags {
  std::string csv;                    // --csv=FILE
  std::optional<std::int64_t> batch;  // --batch=N, overrides every model's default
  std::vector<std::string> devices;   // --devices=cpu,cpu:1
  std::int64_t warmup_steps = 2;      // --warmup_steps=N
  std::optional<std::string> optimizer;  // --optimizer=sgd|adam
  std::optional<double> lr;           // --lr=X
  std::uint64_t seed = 1;             // --seed=N
  bool help = false;
  bool list_models = false;  // --list_models
};

// Removes trainbench's flags from argv (leaving argv[0] and everything else in order) and
// returns them. Throws tb::InputError naming the flag and an example on a bad value.
Flags parse_flags(int& argc, char** argv);
std::string usage();

}  // namespace tb::bench

// Parameter initialisation from a counter-based seed, so every replica and backend agrees.
#include "engine/core/init.hpp"

#include <cmath>
#include <random>

namespace tb {

std::vector<float> init_param(const ParamSpec& param, std::uint64_t seed) {
  std::vector<float> v(std::size_t(param.count()));
  std::mt19937_64 rng(seed);
  auto uniform01 = [&] { return (double(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
  switch (param.init) {
    case Init::Zeros:
      break;
    case Init::Ones:
      std::fill(v.begin(), v.end(), 1.0f);
      break;
    case Init::UniformFanIn: {
      const double bound = 1.0 / std::sqrt(double(param.fan_in));
      for (float& x : v) x = float((2 * uniform01() - 1) * bound);
      break;
    }
    case Init::HeNormal: {
      const double stddev = std::sqrt(2.0 / double(param.fan_in));
      for (float& x : v)  // Box-Muller: the same numbers with every standard library
        x = float(stddev * std::sqrt(-2 * std::log(uniform01())) * std::cos(2 * M_PI * uniform01()));
      break;
    }
  }
  return v;
}

}  // namespace tb

// Test inputs the layer suites share (test_cpu_layers.cpp, test_cuda.cpp): random tensors,
// optionally rounded onto a coarser grid (the GPU suite uses bf16's, so that every precision
// holds the same inputs exactly), distinct values for max pooling, identity matrices.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "engine/core/spec.hpp"

namespace tb::testing_support {

using Grid = float (*)(float);
inline float exact(float x) { return x; }

inline std::vector<float> uniform(std::mt19937& rng, i64 n, float lo = -1.f, float hi = 1.f, Grid grid = exact) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& e : v) e = grid(dist(rng));
  return v;
}

// Magnitudes in [0.05, 1], positive with probability `positive`: no value sits at ReLU's kink,
// and most of ReLU's output is non-zero.
inline std::vector<float> signed_away_from_zero(std::mt19937& rng, i64 n, double positive, Grid grid = exact) {
  std::vector<float> v = uniform(rng, n, 0.05f, 1.f, grid);
  std::bernoulli_distribution pos(positive);
  for (float& e : v)
    if (!pos(rng)) e = -e;
  return v;
}

// Distinct multiples of `spacing` centred on zero, in random order: no max-pool window has a
// tie, so the argmax (and so the gradient's destination) is unambiguous.
inline std::vector<float> distinct(std::mt19937& rng, i64 n, double spacing) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t e = 0; e < v.size(); ++e) v[e] = float((double(e) - double(n) / 2) * spacing);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

inline std::vector<float> eye(i64 n) {
  std::vector<float> v(static_cast<std::size_t>(n * n), 0.f);
  for (i64 i = 0; i < n; ++i) v[i * n + i] = 1.f;
  return v;
}

}  // namespace tb::testing_support

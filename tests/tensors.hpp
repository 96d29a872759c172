// Test inputs the layer suites share (test_cpu_layers.cpp, test_cpu_kernels.cpp, test_cuda.cpp):
// random tensors, optionally rounded onto a coarser grid (the GPU suite uses bf16's, so that every
// precision holds the same inputs exactly), distinct values for max pooling, identity matrices;
// and the comparison of an fp32 tensor with its double reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
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

// fp32 against a double reference computed from the same fp32 inputs. oneDNN reorders the
// reductions (blocked channels, split batch and spatial loops, gemm-based kernels, Winograd
// where it chooses it), and trainbench's own kernels sum in vector lanes, so results differ from
// any fixed summation order by a few ulps per term; with fp32 accumulation over up to ~1e4 terms
// of O(1) values that is ~1e-5 absolute at worst. 1e-4 + 1e-3 |ref| per element and 1e-4 in the
// whole-tensor norm leave margin over that noise, while a wrong index, a missing term or a wrong
// layout is off by O(1).
inline constexpr double kAtol = 1e-4;
inline constexpr double kRtol = 1e-3;
inline constexpr double kNormTol = 1e-4;
// Zero trust (benchdnn's idea): a comparison where most of the reference is exactly zero says
// little, so it fails unless the test says that many zeros are expected.
inline constexpr double kMaxZeroFraction = 0.5;

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Compares a backend tensor with its reference: same size, all finite, not mostly zero (unless
// `max_zero_fraction` allows it), every element within atol + rtol |ref|, and the whole tensor
// within kNormTol in relative L2 norm.
inline testing::AssertionResult close(const std::vector<float>& got, const std::vector<double>& ref,
                                      double max_zero_fraction = kMaxZeroFraction) {
  if (got.size() != ref.size())
    return testing::AssertionFailure() << "size " << got.size() << ", reference " << ref.size();
  if (ref.empty()) return testing::AssertionFailure() << "empty tensor";
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i]))
      return testing::AssertionFailure() << "non-finite value at " << i << ": " << got[i] << " vs reference " << ref[i];
    zeros += ref[i] == 0.0;
  }
  if (double(zeros) > max_zero_fraction * double(ref.size()))
    return testing::AssertionFailure() << zeros << " of " << ref.size()
                                       << " reference values are exactly zero: the check would prove little";
  std::ostringstream bad;
  std::size_t mismatches = 0;
  double diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(double(got[i]) - ref[i]);
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    if (d > kAtol + kRtol * std::abs(ref[i]) && mismatches++ < 8)
      bad << "\n  [" << i << "] " << got[i] << " vs reference " << ref[i];
  }
  const double norm_err = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (mismatches > 0 || norm_err > kNormTol)
    return testing::AssertionFailure() << mismatches << " of " << ref.size()
                                       << " elements out of tolerance, normalised error " << norm_err << bad.str();
  return testing::AssertionSuccess();
}

}  // namespace tb::testing_support

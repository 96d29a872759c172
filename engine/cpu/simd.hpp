// 16 floats (one AVX-512 register; two AVX2 ones elsewhere) as GCC vector extensions, for
// trainbench's own CPU loops (conv2d_small.cpp, pooling.cpp): portable code the compiler
// maps onto the build machine's vector instructions, without intrinsics.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/core/spec.hpp"

namespace tb::cpu::simd {

inline constexpr i64 kLanes = 16;
using vf = float __attribute__((vector_size(kLanes * sizeof(float))));
using vi = std::int32_t __attribute__((vector_size(kLanes * sizeof(std::int32_t))));

// Unaligned loads and stores.
inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }
inline float sum_lanes(vf v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

}  // namespace tb::cpu::simd

// trainbench's own CUDA kernels: casts, the residual add and gradient accumulation, bias rows,
// the losses, loss scaling and the fused optimizer updates (contracts in kernels.hpp).
// T = storage type of a tensor (float, __half, __nv_bfloat16); every sum and product is in fp32.
#include "engine/cuda/kernels.hpp"

#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tb::cuda::kernels {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill an H100 many times over; grid-stride loops cover the rest.
constexpr i64 kMaxBlocks = 4096;
// Single-block reductions use the largest block so that one pass over ~1000 rows is quick.
constexpr int kReduceThreads = 1024;
constexpr int kWarpSize = 32;
constexpr int kReduceWarps = kReduceThreads / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;
// The largest loss scale: beyond it fp16 gradients of ordinary size would overflow anyway.
constexpr float kMaxScale = 16777216.0f;  // 2^24

int blocks_for(i64 n) { return static_cast<int>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks)); }

template <class T>
struct Tag {
  using type = T;
};

// Calls fn(Tag<T>{}) with the storage type that `type` names.
template <class Fn>
void dispatch(DType type, Fn&& fn) {
  switch (type) {
    case DType::F32:
      fn(Tag<float>{});
      return;
    case DType::F16:
      fn(Tag<__half>{});
      return;
    case DType::BF16:
      fn(Tag<__nv_bfloat16>{});
      return;
  }
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ i64 first_index() { return static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 grid_stride() { return static_cast<i64>(gridDim.x) * blockDim.x; }

// Sum of a value held by every thread of a kReduceThreads block, valid in thread 0. The order of
// additions is fixed, so the result is the same on every run.
__device__ float block_sum(float value) {
  __shared__ float warp_sums[kReduceWarps];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_down_sync(kFullMask, value, offset);
  if (threadIdx.x % kWarpSize == 0) warp_sums[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < kReduceWarps; ++w) total += warp_sums[w];
  return total;
}

template <class Dst, class Src>
__global__ void cast_kernel(const Src* src, Dst* dst, i64 n) {
  for (i64 i = first_index(); i < n; i += grid_stride()) dst[i] = from_f32<Dst>(to_f32(src[i]));
}

// No __restrict__: out may alias a or b, and each element is read before it is written.
template <class T>
__global__ void add_kernel(const T* a, const T* b, T* out, i64 n) {
  for (i64 i = first_index(); i < n; i += grid_stride()) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

// Replicas sharing one device: every buffer's element i becomes the mean over the buffers,
// summed in fp32 in buffer order (the same result in every buffer, on every run).
constexpr int kMaxSharedReplicas = 16;
struct ReplicaBuffers {
  void* data[kMaxSharedReplicas];
};
template <class T>
__global__ void average_replicas_kernel(ReplicaBuffers buffers, int replicas, i64 n) {
  const float inv = 1.0f / float(replicas);
  for (i64 i = first_index(); i < n; i += grid_stride()) {
    float sum = 0.0f;
    for (int k = 0; k < replicas; ++k) sum += to_f32(static_cast<const T*>(buffers.data[k])[i]);
    const T mean = from_f32<T>(sum * inv);
    for (int k = 0; k < replicas; ++k) static_cast<T*>(buffers.data[k])[i] = mean;
  }
}

__device__ __forceinline__ float relu(float x) { return x <= 0.0f ? 0.0f : x; }  // NaN stays NaN

template <class T>
__global__ void activation_forward_kernel(Activation f, const T* x, T* y, i64 n) {
  for (i64 i = first_index(); i < n; i += grid_stride()) {
    const float v = to_f32(x[i]);
    y[i] = from_f32<T>(f == Activation::ReLU ? relu(v) : 1.0f / (1.0f + expf(-v)));
  }
}

template <class T>
__global__ void activation_backward_kernel(Activation f, const T* y, const T* dy, T* dx, i64 n) {
  for (i64 i = first_index(); i < n; i += grid_stride()) {
    const float out = to_f32(y[i]), g = to_f32(dy[i]);
    dx[i] = from_f32<T>(f == Activation::ReLU ? (out > 0.0f ? g : 0.0f) : g * out * (1.0f - out));
  }
}

// Eight 16-bit or four 32-bit values in one 16-byte access where the buffers allow it.
template <class T>
__global__ void add_relu_kernel(T* y, const T* z, i64 n) {
  constexpr int kPack = 16 / sizeof(T);
  const i64 packs = n / kPack;
  for (i64 p = first_index(); p < packs; p += grid_stride()) {
    uint4 yv = reinterpret_cast<const uint4*>(y)[p];
    uint4 zv = z ? reinterpret_cast<const uint4*>(z)[p] : uint4{0, 0, 0, 0};
    T* ye = reinterpret_cast<T*>(&yv);
    const T* ze = reinterpret_cast<const T*>(&zv);
#pragma unroll
    for (int k = 0; k < kPack; ++k) ye[k] = from_f32<T>(relu(to_f32(ye[k]) + (z ? to_f32(ze[k]) : 0.0f)));
    reinterpret_cast<uint4*>(y)[p] = yv;
  }
  for (i64 i = packs * kPack + first_index(); i < n; i += grid_stride())
    y[i] = from_f32<T>(relu(to_f32(y[i]) + (z ? to_f32(z[i]) : 0.0f)));
}

template <class T>
__global__ void nchw_to_nhwc_kernel(const float* x, T* y, i64 n, i64 c, i64 hw) {
  const i64 total = n * c * hw;
  for (i64 i = first_index(); i < total; i += grid_stride()) {  // i indexes y: ((n, hw), c)
    const i64 ch = i % c, rest = i / c, pos = rest % hw, img = rest / hw;
    y[i] = from_f32<T>(x[(img * c + ch) * hw + pos]);
  }
}

template <class T>
__global__ void add_channel_bias_kernel(T* y, const T* bias, i64 c, i64 hw, i64 total) {
  for (i64 i = first_index(); i < total; i += grid_stride())
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[(i / hw) % c]));
}

// One block per channel sums its N planes in a fixed order: deterministic, no atomics.
template <class T>
__global__ void channel_sum_kernel(const T* dy, T* dbias, i64 n, i64 c, i64 hw) {
  const i64 ch = blockIdx.x;
  float sum = 0.0f;
  for (i64 i = threadIdx.x; i < n * hw; i += kReduceThreads) sum += to_f32(dy[((i / hw) * c + ch) * hw + i % hw]);
  const float total = block_sum(sum);
  if (threadIdx.x == 0) dbias[ch] = from_f32<T>(total);
}

template <class T>
__global__ void batchnorm_relu_apply_kernel(bool nhwc, const T* x, const float* mean, const float* inv_std,
                                            const float* gamma, const float* beta, T* y, i64 c, i64 hw, i64 total) {
  for (i64 i = first_index(); i < total; i += grid_stride()) {
    const i64 ch = nhwc ? i % c : (i / hw) % c;
    y[i] = from_f32<T>(relu(gamma[ch] * (to_f32(x[i]) - mean[ch]) * inv_std[ch] + beta[ch]));
  }
}

template <class T>
__global__ void add_bias_kernel(T* y, const T* bias, i64 rows, i64 cols) {
  const i64 n = rows * cols;
  for (i64 i = first_index(); i < n; i += grid_stride()) y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[i % cols]));
}

// A block owns kBiasCols adjacent columns (so each row read is coalesced) and splits the rows
// among kBiasRowGroups threads per column in a fixed pattern: deterministic without atomics.
constexpr int kBiasCols = 32;
constexpr int kBiasRowGroups = kThreads / kBiasCols;

template <class T>
__global__ void bias_grad_kernel(const T* dy, T* dbias, i64 rows, i64 cols) {
  __shared__ float partial[kBiasRowGroups][kBiasCols];
  for (i64 first_col = static_cast<i64>(blockIdx.x) * kBiasCols; first_col < cols;
       first_col += static_cast<i64>(gridDim.x) * kBiasCols) {
    const i64 c = first_col + threadIdx.x;
    float sum = 0.0f;
    if (c < cols)
      for (i64 r = threadIdx.y; r < rows; r += kBiasRowGroups) sum += to_f32(dy[r * cols + c]);
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      float total = 0.0f;
      for (int g = 0; g < kBiasRowGroups; ++g) total += partial[g][threadIdx.x];
      dbias[c] = from_f32<T>(total);
    }
    __syncthreads();  // partial is rewritten by the next group of columns
  }
}

// Whether (value, index) beats (best, best_index) as the argmax: larger, or equal at a lower
// index. NaN never wins.
__device__ __forceinline__ bool beats(float value, i64 index, float best, i64 best_index) {
  return value > best || (value == best && index < best_index);
}

// One warp per row (lanes read the row's classes coalesced), rows dealt to warps in a fixed
// pattern and summed in a fixed order.
template <class T>
__global__ void xent_loss_kernel(const T* log_probs, const std::int32_t* labels, i64 rows, i64 classes, float* loss,
                                 std::int32_t* correct) {
  __shared__ float warp_loss[kReduceWarps];
  __shared__ std::int32_t warp_correct[kReduceWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  float loss_sum = 0.0f;
  std::int32_t hits = 0;
  for (i64 r = warp; r < rows; r += kReduceWarps) {
    const T* row = log_probs + r * classes;
    float best = -INFINITY;
    i64 best_index = classes;  // past every class, so any real class beats it on a tie
    for (i64 c = lane; c < classes; c += kWarpSize) {
      const float value = to_f32(row[c]);
      if (beats(value, c, best, best_index)) {
        best = value;
        best_index = c;
      }
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const float other = __shfl_down_sync(kFullMask, best, offset);
      const i64 other_index = __shfl_down_sync(kFullMask, best_index, offset);
      if (beats(other, other_index, best, best_index)) {
        best = other;
        best_index = other_index;
      }
    }
    if (lane == 0) {
      const std::int32_t label = labels[r];
      // A label outside the classes has no log-prob to read; NaN makes the run's finite-loss
      // check fail instead of reading out of bounds.
      if (label < 0 || label >= classes) {
        loss_sum += __int_as_float(0x7fc00000);
      } else {
        loss_sum -= to_f32(row[label]);
        hits += best_index == label;
      }
    }
  }
  if (lane == 0) {
    warp_loss[warp] = loss_sum;
    warp_correct[warp] = hits;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    std::int32_t total_hits = 0;
    for (int w = 0; w < kReduceWarps; ++w) {
      total += warp_loss[w];
      total_hits += warp_correct[w];
    }
    *loss = total / static_cast<float>(rows);
    *correct = total_hits;
  }
}

template <class T>
__global__ void xent_grad_kernel(const T* log_probs, const std::int32_t* labels, i64 rows, i64 classes,
                                 const float* scale, T* dlogits) {
  const float factor = *scale / static_cast<float>(rows);
  const i64 n = rows * classes;
  for (i64 i = first_index(); i < n; i += grid_stride()) {
    const i64 r = i / classes, c = i - r * classes;
    const std::int32_t label = labels[r];
    // As in xent_loss: a row with an invalid label gets NaN gradients rather than a silent
    // update towards no class.
    const float grad = label < 0 || label >= classes
                           ? __int_as_float(0x7fc00000)
                           : (expf(to_f32(log_probs[i])) - (c == label ? 1.0f : 0.0f)) * factor;
    dlogits[i] = from_f32<T>(grad);
  }
}

template <class T>
__global__ void mse_loss_kernel(const T* pred, const float* target, i64 n, float* loss) {
  float sum = 0.0f;
  for (i64 i = threadIdx.x; i < n; i += kReduceThreads) {
    const float d = to_f32(pred[i]) - target[i];
    sum += d * d;
  }
  const float total = block_sum(sum);
  if (threadIdx.x == 0) *loss = total / static_cast<float>(n);
}

template <class T>
__global__ void mse_grad_kernel(const T* pred, const float* target, i64 n, const float* scale, T* dpred) {
  const float factor = 2.0f * *scale / static_cast<float>(n);
  for (i64 i = first_index(); i < n; i += grid_stride()) dpred[i] = from_f32<T>((to_f32(pred[i]) - target[i]) * factor);
}

__global__ void init_step_state_kernel(StepState* state, float scale) {
  state->scale = scale;
  state->good_steps = 0;
  state->found_nonfinite = 0;
  state->steps = 0;
  state->skipped = 0;
}

// Indices [0, n) are grads, [n, n + n_f32) are grads_f32. Only ever sets the flag, so that
// several calls (one per bucket) combine by "or".
template <class T>
__global__ void find_nonfinite_kernel(const T* grads, i64 n, const float* grads_f32, i64 n_f32, StepState* state) {
  const i64 total = n + n_f32;
  bool bad = false;
  for (i64 i = first_index(); i < total && !bad; i += grid_stride())
    bad = !isfinite(i < n ? to_f32(grads[i]) : grads_f32[i - n]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) state->found_nonfinite = 1;
}

// The gradient of parameter i, unscaled.
template <class T>
__device__ __forceinline__ float gradient(const OptimizerArgs& args, i64 i, float scale) {
  const float g =
      i < args.n_compute ? to_f32(static_cast<const T*>(args.grads)[i]) : args.grads_f32[i - args.n_compute];
  return g / scale;
}

template <class T>
__device__ __forceinline__ void store_param(const OptimizerArgs& args, i64 i, float p) {
  args.params[i] = p;
  if (args.params_compute != nullptr && i < args.n_compute) static_cast<T*>(args.params_compute)[i] = from_f32<T>(p);
}

template <class T>
__global__ void sgd_kernel(OptimizerArgs args) {
  if (args.state->found_nonfinite) return;
  const float scale = args.state->scale;
  for (i64 i = first_index(); i < args.n; i += grid_stride()) {
    const float p = args.params[i];
    const float g = gradient<T>(args, i, scale) + args.weight_decay * p;
    const float v = args.momentum * args.first[i] + g;
    args.first[i] = v;
    store_param<T>(args, i, p - args.lr * v);
  }
}

template <class T>
__global__ void adam_kernel(OptimizerArgs args) {
  if (args.state->found_nonfinite) return;
  const float scale = args.state->scale;
  // finish_step counts this step after the update, so it is number steps + 1.
  const float t = static_cast<float>(args.state->steps + 1);
  const float correction1 = 1.0f - powf(args.beta1, t);
  const float correction2 = 1.0f - powf(args.beta2, t);
  for (i64 i = first_index(); i < args.n; i += grid_stride()) {
    const float p = args.params[i];
    const float g = gradient<T>(args, i, scale) + args.weight_decay * p;
    const float m = args.beta1 * args.first[i] + (1.0f - args.beta1) * g;
    const float v = args.beta2 * args.second[i] + (1.0f - args.beta2) * g * g;
    args.first[i] = m;
    args.second[i] = v;
    store_param<T>(args, i, p - args.lr * (m / correction1) / (sqrtf(v / correction2) + args.eps));
  }
}

__global__ void finish_step_kernel(StepState* state, bool dynamic, std::int32_t growth_interval) {
  if (state->found_nonfinite) {
    ++state->skipped;
    if (dynamic) {
      state->scale = fmaxf(state->scale * 0.5f, 1.0f);
      state->good_steps = 0;
    }
  } else {
    ++state->steps;
    if (dynamic && ++state->good_steps >= growth_interval) {
      state->scale = fminf(state->scale * 2.0f, kMaxScale);
      state->good_steps = 0;
    }
  }
  state->found_nonfinite = 0;
}

}  // namespace

void cast_from_f32(DType dst_type, const float* src, void* dst, i64 n, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch(dst_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cast_kernel<T, float><<<blocks_for(n), kThreads, 0, stream>>>(src, static_cast<T*>(dst), n);
  });
  TB_CU(cudaGetLastError());
}

void cast_to_f32(DType src_type, const void* src, float* dst, i64 n, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch(src_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cast_kernel<float, T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src), dst, n);
  });
  TB_CU(cudaGetLastError());
}

void add(DType type, const void* a, const void* b, void* out, i64 n, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                          static_cast<T*>(out), n);
  });
  TB_CU(cudaGetLastError());
}

void average_replicas(DType type, void* const* buffers, int replicas, i64 n, cudaStream_t stream) {
  TB_CHECK(replicas >= 1 && replicas <= kMaxSharedReplicas, "average_replicas: {} buffers; 1 to {} are supported",
           replicas, kMaxSharedReplicas);
  if (n <= 0) return;
  ReplicaBuffers b{};
  for (int k = 0; k < replicas; ++k) b.data[k] = buffers[k];
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    average_replicas_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(b, replicas, n);
  });
  TB_CU(cudaGetLastError());
}

void accumulate(DType type, void* into, const void* from, i64 n, cudaStream_t stream) {
  add(type, into, from, into, n, stream);
}

void activation_forward(Activation f, DType type, const void* x, void* y, i64 n, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    activation_forward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream>>>(f, static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  TB_CU(cudaGetLastError());
}

void activation_backward(Activation f, DType type, const void* y, const void* dy, void* dx, i64 n,
                         cudaStream_t stream) {
  if (n <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    activation_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        f, static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), n);
  });
  TB_CU(cudaGetLastError());
}

void add_relu(DType type, void* y, const void* z, i64 n, cudaStream_t stream) {
  if (n <= 0) return;
  // The packed path needs 16-byte aligned buffers (the allocator's and the arena's are).
  TB_CHECK(reinterpret_cast<std::uintptr_t>(y) % 16 == 0 && reinterpret_cast<std::uintptr_t>(z) % 16 == 0,
           "add_relu: buffers must be 16-byte aligned");
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const i64 packs = std::max<i64>(n * i64(sizeof(T)) / 16, 1);
    add_relu_kernel<T><<<blocks_for(packs), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(z), n);
  });
  TB_CU(cudaGetLastError());
}

void nchw_to_nhwc(DType type, const float* x, void* y, i64 n, i64 c, i64 hw, cudaStream_t stream) {
  if (n * c * hw <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    nchw_to_nhwc_kernel<T><<<blocks_for(n * c * hw), kThreads, 0, stream>>>(x, static_cast<T*>(y), n, c, hw);
  });
  TB_CU(cudaGetLastError());
}

void add_channel_bias(DType type, void* y, const void* bias, i64 n, i64 c, i64 hw, cudaStream_t stream) {
  if (n * c * hw <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_channel_bias_kernel<T><<<blocks_for(n * c * hw), kThreads, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), c, hw, n * c * hw);
  });
  TB_CU(cudaGetLastError());
}

void channel_sum(DType type, const void* dy, void* dbias, i64 n, i64 c, i64 hw, cudaStream_t stream) {
  if (c <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    channel_sum_kernel<T><<<static_cast<unsigned>(c), kReduceThreads, 0, stream>>>(static_cast<const T*>(dy),
                                                                                   static_cast<T*>(dbias), n, c, hw);
  });
  TB_CU(cudaGetLastError());
}

void batchnorm_relu_apply(DType type, Layout layout, const void* x, const float* mean, const float* inv_std,
                          const float* gamma, const float* beta, void* y, i64 n, i64 c, i64 hw, cudaStream_t stream) {
  const i64 total = n * c * hw;
  if (total <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    batchnorm_relu_apply_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        layout == Layout::NHWC, static_cast<const T*>(x), mean, inv_std, gamma, beta, static_cast<T*>(y), c, hw, total);
  });
  TB_CU(cudaGetLastError());
}

void add_bias(DType type, void* y, const void* bias, i64 rows, i64 cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_bias_kernel<T>
        <<<blocks_for(rows * cols), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(bias), rows, cols);
  });
  TB_CU(cudaGetLastError());
}

// Launched even for rows == 0, since the sum over no rows is a defined zero.
void bias_grad(DType type, const void* dy, void* dbias, i64 rows, i64 cols, cudaStream_t stream) {
  if (cols <= 0) return;
  const int blocks = static_cast<int>(std::min((cols + kBiasCols - 1) / kBiasCols, kMaxBlocks));
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_grad_kernel<T><<<blocks, dim3(kBiasCols, kBiasRowGroups), 0, stream>>>(static_cast<const T*>(dy),
                                                                                static_cast<T*>(dbias), rows, cols);
  });
  TB_CU(cudaGetLastError());
}

void xent_loss(DType type, const void* log_probs, const std::int32_t* labels, i64 rows, i64 classes, float* loss,
               std::int32_t* correct, cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    xent_loss_kernel<T>
        <<<1, kReduceThreads, 0, stream>>>(static_cast<const T*>(log_probs), labels, rows, classes, loss, correct);
  });
  TB_CU(cudaGetLastError());
}

void xent_grad(DType type, const void* log_probs, const std::int32_t* labels, i64 rows, i64 classes, const float* scale,
               void* dlogits, cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    xent_grad_kernel<T><<<blocks_for(rows * classes), kThreads, 0, stream>>>(
        static_cast<const T*>(log_probs), labels, rows, classes, scale, static_cast<T*>(dlogits));
  });
  TB_CU(cudaGetLastError());
}

void mse_loss(DType type, const void* pred, const float* target, i64 n, float* loss, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    mse_loss_kernel<T><<<1, kReduceThreads, 0, stream>>>(static_cast<const T*>(pred), target, n, loss);
  });
  TB_CU(cudaGetLastError());
}

void mse_grad(DType type, const void* pred, const float* target, i64 n, const float* scale, void* dpred,
              cudaStream_t stream) {
  if (n <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    mse_grad_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(pred), target, n, scale, static_cast<T*>(dpred));
  });
  TB_CU(cudaGetLastError());
}

void init_step_state(StepState* state, float scale, cudaStream_t stream) {
  init_step_state_kernel<<<1, 1, 0, stream>>>(state, scale);
  TB_CU(cudaGetLastError());
}

void find_nonfinite(DType type, const void* grads, i64 n, const float* grads_f32, i64 n_f32, StepState* state,
                    cudaStream_t stream) {
  if (n + n_f32 <= 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    find_nonfinite_kernel<T>
        <<<blocks_for(n + n_f32), kThreads, 0, stream>>>(static_cast<const T*>(grads), n, grads_f32, n_f32, state);
  });
  TB_CU(cudaGetLastError());
}

void sgd_step(const OptimizerArgs& args, cudaStream_t stream) {
  if (args.n <= 0) return;
  dispatch(args.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sgd_kernel<T><<<blocks_for(args.n), kThreads, 0, stream>>>(args);
  });
  TB_CU(cudaGetLastError());
}

void adam_step(const OptimizerArgs& args, cudaStream_t stream) {
  if (args.n <= 0) return;
  dispatch(args.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    adam_kernel<T><<<blocks_for(args.n), kThreads, 0, stream>>>(args);
  });
  TB_CU(cudaGetLastError());
}

void finish_step(StepState* state, bool dynamic, std::int32_t growth_interval, cudaStream_t stream) {
  finish_step_kernel<<<1, 1, 0, stream>>>(state, dynamic, growth_interval);
  TB_CU(cudaGetLastError());
}

}  // namespace tb::cuda::kernels

// trainbench's own CUDA kernels (kernels.cu), for what cuDNN and cuBLAS do not provide: the
// losses, the residual add and gradient accumulation, bias rows, casts between fp32 and the
// 16-bit storage types, dynamic loss scaling, the fused optimizer updates over the flat
// parameter buffer.
//
// Every launcher takes the stream to run on and returns at once (no synchronisation, no
// allocation), so that a training step can be captured as a CUDA graph. `DType` names how the
// 16- or 32-bit tensors are stored; accumulation is always in fp32. Launchers throw
// tb::BackendError if a launch fails.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "engine/cuda/context.hpp"

namespace tb::cuda::kernels {

// dst[i] = src[i] converted (round to nearest even).
void cast_from_f32(DType dst_type, const float* src, void* dst, i64 n, cudaStream_t stream);
void cast_to_f32(DType src_type, const void* src, float* dst, i64 n, cudaStream_t stream);

// Each of the `replicas` buffers (n elements of `type`, on one device) becomes their mean
// (fp32 sums): the all-reduce of replicas sharing one GPU. At most 16 buffers.
void average_replicas(DType type, void* const* buffers, int replicas, i64 n, cudaStream_t stream);

// out[i] = a[i] + b[i]; out may alias a or b.
void add(DType type, const void* a, const void* b, void* out, i64 n, cudaStream_t stream);
// into[i] += from[i].
void accumulate(DType type, void* into, const void* from, i64 n, cudaStream_t stream);
// Elementwise activations; y may be x (forward in place) and dx may be dy (backward in place).
// ReLU keeps NaN (so that a NaN reaches the loss check); backward reads only y.
enum class Activation { ReLU, Sigmoid };
void activation_forward(Activation f, DType type, const void* x, void* y, i64 n, cudaStream_t stream);
// dx = dy * f'(x), with f' from y: ReLU (y > 0), Sigmoid y (1 - y).
void activation_backward(Activation f, DType type, const void* y, const void* dy, void* dx, i64 n, cudaStream_t stream);
// y = relu(y + z) in place; z may be null (y = relu(y)).
void add_relu(DType type, void* y, const void* z, i64 n, cudaStream_t stream);
// The model input at the edge of a channels-last network: x (N, C, HW) fp32 to y (N, HW, C) in `type`.
void nchw_to_nhwc(DType type, const float* x, void* y, i64 n, i64 c, i64 hw, cudaStream_t stream);
// y (N, C, HW) += bias (C), and dbias (C) = sum over N and HW of dy (N, C, HW), for NCHW tensors
// (channels-last tensors are (rows, cols) for add_bias and bias_grad).
void add_channel_bias(DType type, void* y, const void* bias, i64 n, i64 c, i64 hw, cudaStream_t stream);
void channel_sum(DType type, const void* dy, void* dbias, i64 n, i64 c, i64 hw, cudaStream_t stream);

// Batch norm with saved batch statistics, then ReLU: y = relu(gamma (x - mean) inv_std + beta),
// per channel of x (N, C, HW) stored NCHW or (N, HW, C) NHWC; mean, inv_std, gamma, beta (C) fp32.
void batchnorm_relu_apply(DType type, Layout layout, const void* x, const float* mean, const float* inv_std,
                          const float* gamma, const float* beta, void* y, i64 n, i64 c, i64 hw, cudaStream_t stream);

// y (rows, cols) += bias (cols) broadcast over rows.
void add_bias(DType type, void* y, const void* bias, i64 rows, i64 cols, cudaStream_t stream);
// dbias[c] = sum over rows of dy[r, c] (accumulated in fp32, stored as `type`).
void bias_grad(DType type, const void* dy, void* dbias, i64 rows, i64 cols, cudaStream_t stream);

// Softmax cross-entropy from log-probabilities (rows N, classes C; cuDNN's log-softmax output):
// *loss = mean over rows of -log_probs[r, label[r]]; *correct = rows whose largest log-prob is
// at the label (ties: the lowest index).
void xent_loss(DType type, const void* log_probs, const std::int32_t* labels, i64 rows, i64 classes, float* loss,
               std::int32_t* correct, cudaStream_t stream);
// dlogits = (exp(log_probs) - onehot(label)) * (*scale) / rows.
void xent_grad(DType type, const void* log_probs, const std::int32_t* labels, i64 rows, i64 classes, const float* scale,
               void* dlogits, cudaStream_t stream);
// *loss = mean over n of (pred - target)^2.
void mse_loss(DType type, const void* pred, const float* target, i64 n, float* loss, cudaStream_t stream);
// dpred = 2 (pred - target) * (*scale) / n.
void mse_grad(DType type, const void* pred, const float* target, i64 n, const float* scale, void* dpred,
              cudaStream_t stream);

// Device-resident state of dynamic loss scaling and of the optimizer's step count, so that a
// step needs no value from the host (and can be replayed as a graph).
struct StepState {
  float scale;                   // loss scale (1 and fixed without mixed precision)
  std::int32_t good_steps;       // consecutive steps with finite gradients
  std::int32_t found_nonfinite;  // set by find_nonfinite, cleared by finish_step
  std::int64_t steps;            // optimizer steps taken (skipped steps excluded)
  std::int64_t skipped;          // steps skipped for non-finite gradients
};
void init_step_state(StepState* state, float scale, cudaStream_t stream);
// Sets state->found_nonfinite if any of the gradients is inf or NaN.
void find_nonfinite(DType type, const void* grads, i64 n, const float* grads_f32, i64 n_f32, StepState* state,
                    cudaStream_t stream);

// The flat buffers of one optimizer step. Parameters [0, n_compute) have their gradients in
// `grads` (stored as `type`) and, with mixed precision, a compute copy in `params_compute`
// that the step refreshes; parameters [n_compute, n) keep fp32 gradients in grads_f32 (offset
// by n_compute, i.e. grads_f32[i - n_compute]). Without mixed precision n_compute == n,
// type == F32 and params_compute is null.
struct OptimizerArgs {
  DType type = DType::F32;
  float* params = nullptr;  // fp32 master weights (n)
  void* params_compute = nullptr;
  const void* grads = nullptr;
  const float* grads_f32 = nullptr;
  i64 n_compute = 0, n = 0;
  float* first = nullptr;   // SGD velocity, Adam first moment (n)
  float* second = nullptr;  // Adam second moment (n), null for SGD
  float lr = 0.01f, momentum = 0.9f, weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  StepState* state = nullptr;
};
// Gradients are divided by state->scale; the whole step is skipped if state->found_nonfinite.
// SGD: v = momentum v + (g + wd p); p -= lr v. Adam (L2 weight decay added to g): bias-corrected
// with state->steps + 1.
void sgd_step(const OptimizerArgs& args, cudaStream_t stream);
void adam_step(const OptimizerArgs& args, cudaStream_t stream);
// After the update: counts the step or the skip; with `dynamic`, halves the scale after a
// non-finite step and doubles it after `growth_interval` finite ones. Clears found_nonfinite.
void finish_step(StepState* state, bool dynamic, std::int32_t growth_interval, cudaStream_t stream);

}  // namespace tb::cuda::kernels

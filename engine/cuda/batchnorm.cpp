// BatchNorm on cuDNN's batch normalization, per channel (spatial mode) for (N, C, H, W) inputs
// and for (N, C) inputs seen as (N, C, 1, 1). Scale and shift, their gradients, the running and
// the saved statistics are fp32 whatever the precision (cuDNN's derived descriptor is float for
// 16-bit data).
// N = batch, C = channels, H, W = height, width.
//
// Statistics, as in the CPU backend: training normalises with the batch mean and the biased
// batch variance and updates running = (1 - momentum) running + momentum batch, where the
// running variance takes the unbiased batch variance (cuDNN applies Bessel's factor
// m / (m - 1), m = N*H*W, as the CPU backend does). One difference: with m == 1 the CPU backend
// skips the factor, while cuDNN's factor is undefined there (a batch of one vector in training).
#include <vector>

#include "engine/cuda/layer.hpp"

namespace tb::cuda {
namespace {

// CUDNN_BATCHNORM_SPATIAL_PERSISTENT can be faster but, by cuDNN's own note, limits the range
// of values it handles (it may overflow on some inputs); a benchmark that checks its losses
// takes the mode that is right for every input.
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

class BatchNorm final : public Layer {
 public:
  BatchNorm(Context& ctx, const BatchNormSpec& s, const Inputs& in) : spec_(s) {
    const Dims& shape = in.at(0).shape;
    TB_CHECK(shape.size() == 2 || shape.size() == 4, "batchnorm: the input must be (N, C) or (N, C, H, W), got {}",
             to_string(shape));
    const Nchw x = as_nchw(shape);
    TB_CHECK(x.c == s.channels, "batchnorm: the input {} has {} channels, the layer expects {}", to_string(shape),
             x.c, s.channels);
    TB_CHECK(s.eps >= CUDNN_BN_MIN_EPSILON, "batchnorm: eps {} is below cuDNN's minimum {}", s.eps,
             CUDNN_BN_MIN_EPSILON);
    x_desc_.set4d(ctx.cudnn_dtype, x.n, x.c, x.h, x.w);
    TB_CU(cudnnDeriveBNTensorDescriptor(stats_desc_, x_desc_, kMode));

    const std::size_t stats_bytes = std::size_t(s.channels) * sizeof(float);
    running_mean_ = DeviceBuffer(ctx.allocator, stats_bytes, MemoryKind::Activations);
    running_var_ = DeviceBuffer(ctx.allocator, stats_bytes, MemoryKind::Activations);
    saved_mean_ = DeviceBuffer(ctx.allocator, stats_bytes, MemoryKind::Activations);
    saved_inv_std_ = DeviceBuffer(ctx.allocator, stats_bytes, MemoryKind::Activations);
    // cuDNN writes dx with the parameter gradients; where nobody needs it, it goes here.
    if (!in[0].needs_grad) {
      const std::size_t x_bytes = std::size_t(product(shape)) * ctx.elem_bytes();
      scratch_dx_ = DeviceBuffer(ctx.allocator, x_bytes, MemoryKind::Activations);
    }

    // Running statistics start at mean 0, variance 1. Copied on the layer's stream and waited
    // for, so that no later step can see them unset and the host vectors may go.
    const std::vector<float> zeros(std::size_t(s.channels), 0.0f), ones(std::size_t(s.channels), 1.0f);
    TB_CU(cudaMemcpyAsync(running_mean_.get(), zeros.data(), stats_bytes, cudaMemcpyHostToDevice, ctx.stream));
    TB_CU(cudaMemcpyAsync(running_var_.get(), ones.data(), stats_bytes, cudaMemcpyHostToDevice, ctx.stream));
    TB_CU(cudaStreamSynchronize(ctx.stream));
  }

  // gamma (C), beta (C), both fp32.
  std::vector<ParamSlot> param_slots() const override { return {{spec_.channels, true}, {spec_.channels, true}}; }

  void bind(Context&, const Bindings& b) override {
    x_ = b.inputs.at(0);
    void* dinput = b.dinputs.empty() ? nullptr : b.dinputs[0];
    dx_ = dinput ? dinput : scratch_dx_.get();
    TB_CHECK(dx_, "batchnorm: the input needs a gradient but none is bound");
    y_ = b.output;
    dy_ = b.doutput;
    gamma_ = b.params.at(0);
    beta_ = b.params.at(1);
    dgamma_ = b.dparams.at(0);
    dbeta_ = b.dparams.at(1);
  }

  void forward(Context& ctx) override {
    TB_CU(cudnnBatchNormalizationForwardTraining(ctx.cudnn, kMode, &kOne, &kZero, x_desc_, x_, x_desc_, y_,
                                                 stats_desc_, gamma_, beta_, spec_.momentum, running_mean_.get(),
                                                 running_var_.get(), spec_.eps, saved_mean_.get(),
                                                 saved_inv_std_.get()));
  }

  void forward_eval(Context& ctx) override {
    TB_CU(cudnnBatchNormalizationForwardInference(ctx.cudnn, kMode, &kOne, &kZero, x_desc_, x_, x_desc_, y_,
                                                  stats_desc_, gamma_, beta_, running_mean_.get(),
                                                  running_var_.get(), spec_.eps));
  }

  // Data gradient and parameter gradients both overwritten (alpha 1, beta 0).
  void backward(Context& ctx) override {
    TB_CU(cudnnBatchNormalizationBackward(ctx.cudnn, kMode, &kOne, &kZero, &kOne, &kZero, x_desc_, x_, x_desc_, dy_,
                                          x_desc_, dx_, stats_desc_, gamma_, dgamma_, dbeta_, spec_.eps,
                                          saved_mean_.get(), saved_inv_std_.get()));
  }

  std::size_t own_bytes() const override {
    return running_mean_.bytes() + running_var_.bytes() + saved_mean_.bytes() + saved_inv_std_.bytes() +
           scratch_dx_.bytes();
  }

 private:
  BatchNormSpec spec_;
  TensorDesc x_desc_;      // x, y and their gradients: (N, C, H, W)
  TensorDesc stats_desc_;  // (1, C, 1, 1), float
  DeviceBuffer running_mean_, running_var_;  // (C), across steps
  // (C), of the last training forward, for backward. cuDNN calls the second "inverse variance";
  // it holds 1 / sqrt(var + eps).
  DeviceBuffer saved_mean_, saved_inv_std_;
  DeviceBuffer scratch_dx_;                  // (N, C, H, W), only where the input needs no gradient

  const void* x_ = nullptr;
  void* dx_ = nullptr;
  void* y_ = nullptr;
  const void* dy_ = nullptr;
  const void* gamma_ = nullptr;  // (C), fp32
  const void* beta_ = nullptr;   // (C), fp32
  void* dgamma_ = nullptr;       // (C), fp32
  void* dbeta_ = nullptr;        // (C), fp32
};

}  // namespace

std::unique_ptr<Layer> make_batchnorm(Context& ctx, const BatchNormSpec& s, const Inputs& in, const Dims&) {
  return std::make_unique<BatchNorm>(ctx, s, in);
}

}  // namespace tb::cuda

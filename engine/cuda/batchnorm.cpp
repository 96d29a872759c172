// BatchNorm on cuDNN's batch normalization, per channel, for (N, C, H, W) inputs and for (N, C)
// inputs seen as (N, C, 1, 1). Scale and shift, their gradients, the running and the saved
// statistics are fp32 whatever the precision (cuDNN's derived descriptor is float for 16-bit data).
// N = batch, C = channels, H, W = height, width.
//
// NCHW (fp32 networks): cudnnBatchNormalization{ForwardTraining,Backward} in spatial mode; the
// fused add and ReLU are trainbench's kernels around them (forward: relu(y + z) in place on
// cuDNN's output; backward: the ReLU's mask applied to dy into the shortcut's gradient, or into
// the shared workspace without a shortcut, which cuDNN's backward then reads).
// NHWC (channels-last networks): the *Ex calls in persistent spatial mode, the only batch norm
// cuDNN runs fast on channels-last data (on an H100, 128x256x56x56 in bf16: 0.36 ms forward and
// 0.47 ms backward, against 12 and 17 ms for the plain calls on NHWC), and the one that fuses:
// batch norm, then the residual add, then ReLU in one kernel each way (BN_ADD_ACTIVATION), or
// batch norm then ReLU (BN_ACTIVATION). cuDNN notes that the persistent mode may overflow on some
// inputs; every run checks its losses, and mixed precision its gradients.
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

// What follows the normalisation inside the layer.
enum class Tail { None, Relu, AddRelu };

class BatchNorm final : public Layer {
 public:
  BatchNorm(Context& ctx, const BatchNormSpec& s, const Inputs& in, Tail tail)
      : spec_(s), tail_(tail), layout_(ctx.layout) {
    const Dims& shape = in.at(0).shape;
    TB_CHECK(shape.size() == 2 || shape.size() == 4, "batchnorm: the input must be (N, C) or (N, C, H, W), got {}",
             to_string(shape));
    const Nchw x = as_nchw(shape);
    TB_CHECK(x.c == s.channels, "batchnorm: the input {} has {} channels, the layer expects {}", to_string(shape), x.c,
             s.channels);
    TB_CHECK(s.eps >= CUDNN_BN_MIN_EPSILON, "batchnorm: eps {} is below cuDNN's minimum {}", s.eps,
             CUDNN_BN_MIN_EPSILON);
    TB_CHECK(in.size() == (tail == Tail::AddRelu ? 2u : 1u), "batchnorm: {} inputs", in.size());
    if (tail == Tail::AddRelu)
      TB_CHECK(in[1].shape == shape, "batchnorm-add-relu: the shortcut {} is not shaped like the input {}",
               to_string(in[1].shape), to_string(shape));
    count_ = product(shape);
    shape_ = x;
    x_desc_.set4d(ctx.cudnn_dtype, x.n, x.c, x.h, x.w, layout_);
    if (fused_api()) {
      mode_ = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
      ops_ = tail == Tail::None   ? CUDNN_BATCHNORM_OPS_BN
             : tail == Tail::Relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
                                  : CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
      TB_CU(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    }
    TB_CU(cudnnDeriveBNTensorDescriptor(stats_desc_, x_desc_, mode_));

    const std::size_t stats_bytes = std::size_t(s.channels) * sizeof(float);
    running_mean_ = DeviceBuffer(ctx.allocator, stats_bytes, MemoryKind::Activations);
    running_var_ = DeviceBuffer(ctx.allocator, stats_bytes, MemoryKind::Activations);
    saved_mean_ = DeviceBuffer(ctx.allocator, stats_bytes, MemoryKind::Activations);
    saved_inv_std_ = DeviceBuffer(ctx.allocator, stats_bytes, MemoryKind::Activations);
    // cuDNN writes dx with the parameter gradients; where nobody needs it, it goes here.
    if (!in[0].needs_grad)
      scratch_dx_ = DeviceBuffer(ctx.allocator, std::size_t(count_) * ctx.elem_bytes(), MemoryKind::Activations);
    if (!fused_api() && tail == Tail::Relu) ctx.need_workspace(std::size_t(count_) * ctx.elem_bytes());
    if (fused_api()) {
      const cudnnTensorDescriptor_t z = tail == Tail::AddRelu ? cudnnTensorDescriptor_t(x_desc_) : nullptr;
      const cudnnActivationDescriptor_t act = activation();
      std::size_t forward_ws = 0, backward_ws = 0, reserve = 0;
      TB_CU(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(ctx.cudnn, mode_, ops_, x_desc_, z, x_desc_,
                                                                     stats_desc_, act, &forward_ws));
      TB_CU(cudnnGetBatchNormalizationBackwardExWorkspaceSize(ctx.cudnn, mode_, ops_, x_desc_, x_desc_, x_desc_, z,
                                                              x_desc_, stats_desc_, act, &backward_ws));
      TB_CU(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(ctx.cudnn, mode_, ops_, act, x_desc_, &reserve));
      ctx.need_workspace(std::max(forward_ws, backward_ws));
      // What forward keeps for backward (the ReLU's mask), kept by the layer.
      if (reserve > 0) reserve_ = DeviceBuffer(ctx.allocator, reserve, MemoryKind::Activations);
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

  // Backward reads x; the fused layer also reads its output (the ReLU's), never the shortcut.
  BackwardReads backward_reads() const override {
    if (tail_ == Tail::None) return BackwardReads::only_inputs();
    return BackwardReads{{true, false}, true};
  }

  void bind(Context& ctx, const Bindings& b) override {
    x_ = b.inputs.at(0);
    z_ = tail_ == Tail::AddRelu ? b.inputs.at(1) : nullptr;
    void* dinput = b.dinputs.empty() ? nullptr : b.dinputs[0];
    dx_ = dinput ? dinput : scratch_dx_.get();
    TB_CHECK(dx_, "batchnorm: the input needs a gradient but none is bound");
    dz_ = tail_ == Tail::AddRelu ? b.dinputs.at(1) : nullptr;
    TB_CHECK(tail_ != Tail::AddRelu || dz_, "batchnorm-add-relu: the shortcut needs a gradient but none is bound");
    y_ = b.output;
    dy_ = b.doutput;
    gamma_ = b.params.at(0);
    beta_ = b.params.at(1);
    dgamma_ = b.dparams.at(0);
    dbeta_ = b.dparams.at(1);
    workspace_ = ctx.workspace;
    workspace_bytes_ = ctx.workspace_bytes;
  }

  void forward(Context& ctx) override {
    if (!fused_api()) {
      TB_CU(cudnnBatchNormalizationForwardTraining(
          ctx.cudnn, mode_, &kOne, &kZero, x_desc_, x_, x_desc_, y_, stats_desc_, gamma_, beta_, spec_.momentum,
          running_mean_.get(), running_var_.get(), spec_.eps, saved_mean_.get(), saved_inv_std_.get()));
      if (tail_ != Tail::None) kernels::add_relu(ctx.dtype, y_, z_, count_, ctx.stream);
      return;
    }
    TB_CU(cudnnBatchNormalizationForwardTrainingEx(
        ctx.cudnn, mode_, ops_, &kOne, &kZero, x_desc_, x_, z_ ? desc() : nullptr, z_, x_desc_, y_, stats_desc_, gamma_,
        beta_, spec_.momentum, running_mean_.get(), running_var_.get(), spec_.eps, saved_mean_.get(),
        saved_inv_std_.get(), activation(), workspace_, workspace_bytes_, reserve_.get(), reserve_.bytes()));
  }

  void forward_eval(Context& ctx) override {
    TB_CU(cudnnBatchNormalizationForwardInference(ctx.cudnn, mode_, &kOne, &kZero, x_desc_, x_, x_desc_, y_,
                                                  stats_desc_, gamma_, beta_, running_mean_.get(), running_var_.get(),
                                                  spec_.eps));
    if (tail_ != Tail::None) kernels::add_relu(ctx.dtype, y_, z_, count_, ctx.stream);
  }

  // Data gradient(s) and parameter gradients all overwritten (alpha 1, beta 0); with the add,
  // the shortcut's gradient is the gradient after the ReLU.
  void backward(Context& ctx) override {
    if (!fused_api()) {
      // dy after the ReLU's mask: the shortcut's gradient itself where there is an add.
      const void* dnorm = dy_;
      if (tail_ != Tail::None) {
        void* masked = tail_ == Tail::AddRelu ? dz_ : workspace_;
        kernels::activation_backward(kernels::Activation::ReLU, ctx.dtype, y_, dy_, masked, count_, ctx.stream);
        dnorm = masked;
      }
      TB_CU(cudnnBatchNormalizationBackward(ctx.cudnn, mode_, &kOne, &kZero, &kOne, &kZero, x_desc_, x_, x_desc_, dnorm,
                                            x_desc_, dx_, stats_desc_, gamma_, dgamma_, dbeta_, spec_.eps,
                                            saved_mean_.get(), saved_inv_std_.get()));
      return;
    }
    const bool relu = tail_ != Tail::None;
    TB_CU(cudnnBatchNormalizationBackwardEx(
        ctx.cudnn, mode_, ops_, &kOne, &kZero, &kOne, &kZero, x_desc_, x_, relu ? desc() : nullptr, relu ? y_ : nullptr,
        x_desc_, dy_, dz_ ? desc() : nullptr, dz_, x_desc_, dx_, stats_desc_, gamma_, beta_, dgamma_, dbeta_, spec_.eps,
        saved_mean_.get(), saved_inv_std_.get(), activation(), workspace_, workspace_bytes_, reserve_.get(),
        reserve_.bytes()));
  }

  // Batch norm + ReLU (no add) makes its output again in backward (the planner lends its bytes to
  // others meanwhile) from x and the statistics forward saved; the ReLU's mask stays in reserve_.
  bool recomputes_output() const override { return tail_ == Tail::Relu; }
  void recompute(Context& ctx) override {
    TB_CHECK(tail_ == Tail::Relu, "batchnorm: only batch norm + ReLU recomputes its output");
    kernels::batchnorm_relu_apply(ctx.dtype, layout_, x_, saved_mean_.as<float>(), saved_inv_std_.as<float>(),
                                  static_cast<const float*>(gamma_), static_cast<const float*>(beta_), y_, shape_.n,
                                  shape_.c, shape_.h * shape_.w, ctx.stream);
  }

  std::size_t own_bytes() const override {
    return running_mean_.bytes() + running_var_.bytes() + saved_mean_.bytes() + saved_inv_std_.bytes() +
           scratch_dx_.bytes() + reserve_.bytes();
  }

 private:
  bool fused_api() const { return layout_ == Layout::NHWC; }
  cudnnActivationDescriptor_t activation() const {
    return tail_ == Tail::None ? nullptr : cudnnActivationDescriptor_t(relu_);
  }
  cudnnTensorDescriptor_t desc() const { return x_desc_; }

  BatchNormSpec spec_;
  Tail tail_;
  Layout layout_;
  i64 count_ = 0;
  Nchw shape_{};
  cudnnBatchNormMode_t mode_ = CUDNN_BATCHNORM_SPATIAL;
  cudnnBatchNormOps_t ops_ = CUDNN_BATCHNORM_OPS_BN;
  TensorDesc x_desc_;      // x, z, y and their gradients: (N, C, H, W) in the layout
  TensorDesc stats_desc_;  // (1, C, 1, 1), float
  ActivationDesc relu_;
  DeviceBuffer running_mean_, running_var_;  // (C), across steps
  // (C), of the last training forward, for backward. cuDNN calls the second "inverse variance";
  // it holds 1 / sqrt(var + eps).
  DeviceBuffer saved_mean_, saved_inv_std_;
  DeviceBuffer scratch_dx_;  // (N, C, H, W), only where the input needs no gradient
  DeviceBuffer reserve_;     // the fused calls' forward-to-backward state
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;

  const void* x_ = nullptr;
  const void* z_ = nullptr;  // the shortcut (AddRelu)
  void* dx_ = nullptr;
  void* dz_ = nullptr;
  void* y_ = nullptr;
  const void* dy_ = nullptr;
  const void* gamma_ = nullptr;  // (C), fp32
  const void* beta_ = nullptr;   // (C), fp32
  void* dgamma_ = nullptr;       // (C), fp32
  void* dbeta_ = nullptr;        // (C), fp32
};

}  // namespace

std::unique_ptr<Layer> make_batchnorm(Context& ctx, const BatchNormSpec& s, const Inputs& in, const Dims&) {
  return std::make_unique<BatchNorm>(ctx, s, in, Tail::None);
}

std::unique_ptr<Layer> make_batchnorm_add_relu(Context& ctx, const BatchNormSpec& s, const Inputs& in, const Dims&) {
  return std::make_unique<BatchNorm>(ctx, s, in, in.size() == 2 ? Tail::AddRelu : Tail::Relu);
}

}  // namespace tb::cuda

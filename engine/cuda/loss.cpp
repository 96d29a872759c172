// The losses: softmax cross-entropy (cuDNN's log-softmax, then trainbench's kernels for the
// mean negative log-likelihood, the correct count and the gradient) and mean squared error.
// The gradient is multiplied by the loss scale (1 unless mixed precision scales it).
#include "engine/cuda/layer.hpp"

namespace tb::cuda {
namespace {

class SoftmaxCrossEntropy final : public Layer {
 public:
  SoftmaxCrossEntropy(Context& ctx, const SoftmaxCrossEntropySpec& s, const Inputs& in)
      : rows_(in[0].shape[0]),
        classes_(s.classes),
        needs_dinput_(in[0].needs_grad),
        log_probs_(ctx.allocator, std::size_t(rows_ * classes_) * ctx.elem_bytes(), MemoryKind::Activations) {
    desc_.set4d(ctx.cudnn_dtype, rows_, classes_, 1, 1);
  }

  void bind(Context&, const Bindings& b) override {
    logits_ = b.inputs[0];
    dlogits_ = b.dinputs[0];
    labels_ = b.targets->labels;
    loss_ = b.loss;
    correct_ = b.correct;
    scale_ = &b.state->scale;
  }
  // Backward reads the log-probabilities the layer keeps itself.
  BackwardReads backward_reads() const override { return BackwardReads::nothing(1); }

  void forward(Context& ctx) override {
    TB_CU(cudnnSoftmaxForward(ctx.cudnn, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, desc_, logits_, &kZero,
                              desc_, log_probs_.get()));
    kernels::xent_loss(ctx.dtype, log_probs_.get(), labels_, rows_, classes_, loss_, correct_, ctx.stream);
  }
  void backward(Context& ctx) override {
    if (needs_dinput_)
      kernels::xent_grad(ctx.dtype, log_probs_.get(), labels_, rows_, classes_, scale_, dlogits_, ctx.stream);
  }
  std::size_t own_bytes() const override { return log_probs_.bytes(); }

 private:
  i64 rows_, classes_;
  bool needs_dinput_;
  DeviceBuffer log_probs_;
  TensorDesc desc_;
  const void* logits_ = nullptr;
  void* dlogits_ = nullptr;
  const std::int32_t* labels_ = nullptr;
  float* loss_ = nullptr;
  std::int32_t* correct_ = nullptr;
  const float* scale_ = nullptr;
};

class Mse final : public Layer {
 public:
  explicit Mse(const Inputs& in) : count_(product(in[0].shape)), needs_dinput_(in[0].needs_grad) {}

  void bind(Context&, const Bindings& b) override {
    pred_ = b.inputs[0];
    dpred_ = b.dinputs[0];
    targets_ = b.targets->targets;
    loss_ = b.loss;
    scale_ = &b.state->scale;
  }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }

  void forward(Context& ctx) override { kernels::mse_loss(ctx.dtype, pred_, targets_, count_, loss_, ctx.stream); }
  void backward(Context& ctx) override {
    if (needs_dinput_) kernels::mse_grad(ctx.dtype, pred_, targets_, count_, scale_, dpred_, ctx.stream);
  }

 private:
  i64 count_;
  bool needs_dinput_;
  const void* pred_ = nullptr;
  void* dpred_ = nullptr;
  const float* targets_ = nullptr;
  float* loss_ = nullptr;
  const float* scale_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_softmax_cross_entropy(Context& ctx, const SoftmaxCrossEntropySpec& s, const Inputs& in) {
  return std::make_unique<SoftmaxCrossEntropy>(ctx, s, in);
}

std::unique_ptr<Layer> make_mse(Context&, const Inputs& in) { return std::make_unique<Mse>(in); }

}  // namespace tb::cuda

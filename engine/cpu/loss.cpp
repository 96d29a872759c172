// Softmax cross-entropy and mean squared error: small loops over plain (N, K) or (n) data,
// written here because oneDNN has no loss primitives. Both return the mean over the batch.
#include "engine/cpu/layer.hpp"

#include <cmath>

namespace tb::cpu {
namespace {

// What both losses share: their input brought to a plain layout, the batch's labels or
// targets, and the loss of the last forward.
class LossLayer : public Layer {
 public:
  md output_desc() const override { return plain_desc({1}); }
  void bind(Context& ctx, const Bindings& b) override {
    input_.bind(ctx, b.inputs[0], b.dinputs[0]);
    batch_ = b.batch;
    first_sample_ = b.first_sample;
  }
  float loss() const override { return loss_; }

 protected:
  LossLayer(Context& ctx, const LayerInput& in, const dnnl::memory::dims& plain_dims)
      : needs_dinput_(in.needs_grad), input_(ctx, in.desc, plain_desc(plain_dims)) {}
  const float* x() { return static_cast<const float*>(input_.value().get_data_handle()); }
  float* dx() { return static_cast<float*>(input_.grad().get_data_handle()); }

  bool needs_dinput_;
  InputAdapter input_;
  const BatchView* batch_ = nullptr;
  i64 first_sample_ = 0;
  float loss_ = 0;
};

class SoftmaxCrossEntropy final : public LossLayer {
 public:
  SoftmaxCrossEntropy(Context& ctx, const SoftmaxCrossEntropySpec& s, const Inputs& in)
      : LossLayer(ctx, in[0], {in[0].shape[0], s.classes}), N_(in[0].shape[0]), K_(s.classes) {}

  void forward(Context& ctx) override {
    input_.forward(ctx);
    const float* logits = x();
    const std::int32_t* labels = batch_->labels;
    double total = 0;
    correct_ = 0;
    for (i64 n = 0; n < N_; ++n) {
      const float* row = logits + n * K_;
      float mx = row[0];
      i64 argmax = 0;
      for (i64 k = 1; k < K_; ++k)
        if (row[k] > mx) mx = row[argmax = k];
      double sum = 0;
      for (i64 k = 0; k < K_; ++k) sum += std::exp(double(row[k] - mx));
      const std::int32_t label = labels[n];
      TB_CHECK(label >= 0 && label < K_, "label {} of sample {} is outside [0, {})", label, first_sample_ + n, K_);
      total += std::log(sum) - double(row[label] - mx);
      correct_ += argmax == label;
    }
    loss_ = float(total / double(N_));
  }

  void backward(Context& ctx) override {
    if (!needs_dinput_) return;
    const float* logits = x();
    float* dlogits = dx();
    const float inv_n = 1.0f / float(N_);
    for (i64 n = 0; n < N_; ++n) {
      const float* row = logits + n * K_;
      float* drow = dlogits + n * K_;
      float mx = row[0];
      for (i64 k = 1; k < K_; ++k) mx = std::max(mx, row[k]);
      float sum = 0;
      for (i64 k = 0; k < K_; ++k) sum += (drow[k] = std::exp(row[k] - mx));
      for (i64 k = 0; k < K_; ++k) drow[k] = drow[k] / sum * inv_n;
      drow[batch_->labels[n]] -= inv_n;
    }
    input_.backward(ctx);
  }
  i64 correct() const override { return correct_; }

 private:
  i64 N_, K_;
  i64 correct_ = 0;
};

class MeanSquaredError final : public LossLayer {
 public:
  // The predictions' own dims, plain: a blocked producer (a convolution's channel blocks) is
  // reordered to them, and read as one flat run of n values either way.
  MeanSquaredError(Context& ctx, const Inputs& in) : LossLayer(ctx, in[0], in[0].shape), n_(product(in[0].shape)) {}

  void forward(Context& ctx) override {
    input_.forward(ctx);
    const float* p = x();
    double total = 0;
    for (i64 i = 0; i < n_; ++i) {
      const double e = double(p[i]) - double(batch_->targets[i]);
      total += e * e;
    }
    loss_ = float(total / double(n_));
  }
  void backward(Context& ctx) override {
    if (!needs_dinput_) return;
    const float* p = x();
    float* dp = dx();
    const float scale = 2.0f / float(n_);
    for (i64 i = 0; i < n_; ++i) dp[i] = scale * (p[i] - batch_->targets[i]);
    input_.backward(ctx);
  }

 private:
  i64 n_;
};

}  // namespace

std::unique_ptr<Layer> make_softmax_cross_entropy(Context& ctx, const SoftmaxCrossEntropySpec& s, const Inputs& in) {
  return std::make_unique<SoftmaxCrossEntropy>(ctx, s, in);
}

std::unique_ptr<Layer> make_mse(Context& ctx, const Inputs& in) { return std::make_unique<MeanSquaredError>(ctx, in); }

}  // namespace tb::cpu

// Softmax cross-entropy and mean squared error: small loops over plain (N, K) or (n) data,
// written here because oneDNN has no loss primitives. Both return the mean over the batch.
#include "engine/cpu/layer.hpp"

#include <cmath>

namespace tb::cpu {
namespace {

class SoftmaxCrossEntropy final : public Layer {
 public:
  SoftmaxCrossEntropy(Context& ctx, const SoftmaxCrossEntropySpec& s, const Inputs& in)
      : N_(in[0].shape[0]), K_(s.classes), needs_dinput_(in[0].needs_grad) {
    logits_ = InputAdapter(ctx, in[0].desc, plain_desc({N_, K_}));
  }
  md output_desc() const override { return plain_desc({1}); }

  void bind(Context& ctx, const Bindings& b) override {
    logits_.bind(ctx, b.inputs[0], b.dinputs[0]);
    batch_ = b.batch;
  }

  void forward(Context& ctx) override {
    logits_.forward(ctx);
    const float* x = static_cast<const float*>(logits_.value().get_data_handle());
    const std::int32_t* labels = batch_->labels;
    double total = 0;
    correct_ = 0;
    for (i64 n = 0; n < N_; ++n) {
      const float* row = x + n * K_;
      float mx = row[0];
      i64 argmax = 0;
      for (i64 k = 1; k < K_; ++k)
        if (row[k] > mx) mx = row[argmax = k];
      double sum = 0;
      for (i64 k = 0; k < K_; ++k) sum += std::exp(double(row[k] - mx));
      const std::int32_t label = labels[n];
      TB_CHECK(label >= 0 && label < K_, "label {} of sample {} is outside [0, {})", label, n, K_);
      total += std::log(sum) - double(row[label] - mx);
      correct_ += argmax == label;
    }
    loss_ = float(total / double(N_));
  }

  void backward(Context& ctx) override {
    if (!needs_dinput_) return;
    const float* x = static_cast<const float*>(logits_.value().get_data_handle());
    float* dx = static_cast<float*>(logits_.grad().get_data_handle());
    const float inv_n = 1.0f / float(N_);
    for (i64 n = 0; n < N_; ++n) {
      const float* row = x + n * K_;
      float* drow = dx + n * K_;
      float mx = row[0];
      for (i64 k = 1; k < K_; ++k) mx = std::max(mx, row[k]);
      float sum = 0;
      for (i64 k = 0; k < K_; ++k) sum += (drow[k] = std::exp(row[k] - mx));
      for (i64 k = 0; k < K_; ++k) drow[k] = drow[k] / sum * inv_n;
      drow[batch_->labels[n]] -= inv_n;
    }
    logits_.backward(ctx);
  }
  float loss() const override { return loss_; }
  i64 correct() const override { return correct_; }

 private:
  i64 N_, K_;
  i64 correct_ = 0;
  bool needs_dinput_;
  InputAdapter logits_;
  const BatchView* batch_ = nullptr;
  float loss_ = 0;
};

class MeanSquaredError final : public Layer {
 public:
  MeanSquaredError(Context& ctx, const Inputs& in)
      : n_(product(in[0].shape)), needs_dinput_(in[0].needs_grad) {
    pred_ = InputAdapter(ctx, in[0].desc, plain_desc({n_}));
  }
  md output_desc() const override { return plain_desc({1}); }

  void bind(Context& ctx, const Bindings& b) override {
    pred_.bind(ctx, b.inputs[0], b.dinputs[0]);
    batch_ = b.batch;
  }
  void forward(Context& ctx) override {
    pred_.forward(ctx);
    const float* p = static_cast<const float*>(pred_.value().get_data_handle());
    double total = 0;
    for (i64 i = 0; i < n_; ++i) {
      const double e = double(p[i]) - double(batch_->targets[i]);
      total += e * e;
    }
    loss_ = float(total / double(n_));
  }
  void backward(Context& ctx) override {
    if (!needs_dinput_) return;
    const float* p = static_cast<const float*>(pred_.value().get_data_handle());
    float* dp = static_cast<float*>(pred_.grad().get_data_handle());
    const float scale = 2.0f / float(n_);
    for (i64 i = 0; i < n_; ++i) dp[i] = scale * (p[i] - batch_->targets[i]);
    pred_.backward(ctx);
  }
  float loss() const override { return loss_; }

 private:
  i64 n_;
  bool needs_dinput_;
  InputAdapter pred_;
  const BatchView* batch_ = nullptr;
  float loss_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_softmax_cross_entropy(Context& ctx, const SoftmaxCrossEntropySpec& s, const Inputs& in) {
  return std::make_unique<SoftmaxCrossEntropy>(ctx, s, in);
}

std::unique_ptr<Layer> make_mse(Context& ctx, const Inputs& in) {
  return std::make_unique<MeanSquaredError>(ctx, in);
}

}  // namespace tb::cpu

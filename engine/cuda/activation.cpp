// ReLU and Sigmoid on cuDNN's activation descriptor, on any shape seen as plain NCHW, with the
// output in a buffer of its own (backward reads x and y).
// N = batch, C = channels (or all features), H, W = height, width (1 for non-images).
#include <utility>

#include "engine/cuda/layer.hpp"

namespace tb::cuda {
namespace {

class Activation final : public UnaryLayer {
 public:
  Activation(Context& ctx, cudnnActivationMode_t mode, const Inputs& in) {
    const Nchw x = as_nchw(in.at(0).shape);
    desc_.set4d(ctx.cudnn_dtype, x.n, x.c, x.h, x.w);
    // NaN propagates, as in the CPU backend, so that a NaN reaches the loss and its check
    // instead of ReLU turning it into 0. The coefficient is only for clipped ReLU and ELU.
    TB_CU(cudnnSetActivationDescriptor(activation_, mode, CUDNN_PROPAGATE_NAN, 0.0));
  }

  void forward(Context& ctx) override {
    TB_CU(cudnnActivationForward(ctx.cudnn, activation_, &kOne, desc_, x_, &kZero, desc_, y_));
  }

  void backward(Context& ctx) override {
    if (!dx_) return;
    TB_CU(cudnnActivationBackward(ctx.cudnn, activation_, &kOne, desc_, y_, desc_, dy_, desc_, x_, &kZero, desc_, dx_));
  }

 private:
  ActivationDesc activation_;
  TensorDesc desc_;           // x, y and their gradients: (N, C, H, W)
};

}  // namespace

std::unique_ptr<Layer> make_relu(Context& ctx, const Inputs& in, const Dims&) {
  return std::make_unique<Activation>(ctx, CUDNN_ACTIVATION_RELU, in);
}

std::unique_ptr<Layer> make_sigmoid(Context& ctx, const Inputs& in, const Dims&) {
  return std::make_unique<Activation>(ctx, CUDNN_ACTIVATION_SIGMOID, in);
}

}  // namespace tb::cuda

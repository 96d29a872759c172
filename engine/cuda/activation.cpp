// ReLU and Sigmoid on trainbench's elementwise kernels, on any shape in any layout. Backward reads
// only the output, so the planner may put the output over the input and the input gradient over
// the output gradient (the kernels allow both).
#include "engine/cuda/layer.hpp"

namespace tb::cuda {
namespace {

class Activation final : public UnaryLayer {
 public:
  Activation(kernels::Activation f, const Inputs& in) : f_(f), count_(product(in.at(0).shape)) {}

  void forward(Context& ctx) override { kernels::activation_forward(f_, ctx.dtype, x_, y_, count_, ctx.stream); }
  void backward(Context& ctx) override {
    if (dx_) kernels::activation_backward(f_, ctx.dtype, y_, dy_, dx_, count_, ctx.stream);
  }
  BackwardReads backward_reads() const override { return BackwardReads::only_output(1); }
  bool output_over_input() const override { return true; }
  bool dinput_over_doutput() const override { return true; }

 private:
  kernels::Activation f_;
  i64 count_;
};

}  // namespace

std::unique_ptr<Layer> make_relu(Context&, const Inputs& in, const Dims&) {
  return std::make_unique<Activation>(kernels::Activation::ReLU, in);
}

std::unique_ptr<Layer> make_sigmoid(Context&, const Inputs& in, const Dims&) {
  return std::make_unique<Activation>(kernels::Activation::Sigmoid, in);
}

}  // namespace tb::cuda

// The CUDA layer interface, the counterpart of engine/cpu/layer.hpp: each layer is planned once
// for its input shapes (creating descriptors, choosing algorithms, asking for workspace), then
// bound to device memory the network owns, then run on the context's stream.
//
// Tensors are row-major in the context's storage type (ctx.dtype), images in the context's
// layout (NCHW or NHWC). Gradients: backward overwrites (=) every gradient it writes, parameter
// and input alike; the network sums where one tensor feeds several layers. Values and gradients
// live in the network's arena for the lives the planner (engine/core/planner.hpp) gives them: a
// layer's backward may read only what backward_reads() declares, and a layer that says it may
// run in place must work when its output is its input (or its input gradient its output's).
//
// Parameters live in storage slots the layer declares. A slot is either in the compute type
// (a 16-bit copy of the fp32 master under mixed precision; its gradient also in the compute
// type) or kept in fp32 (batch norm's scale, shift; its gradient in fp32). The canonical
// parameters of tb::node_params map onto the slots through canonical()/set_canonical(); by
// default slot k holds canonical parameter k in its canonical layout.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/planner.hpp"
#include "engine/core/spec.hpp"
#include "engine/cuda/context.hpp"
#include "engine/cuda/kernels.hpp"

namespace tb::cuda {

struct LayerInput {
  Dims shape;       // logical shape (spec shape inference)
  bool needs_grad;  // false for the model input: its gradient is never computed
};

struct ParamSlot {
  i64 elements = 0;
  bool fp32 = false;  // kept in fp32 whatever the precision
};

// The batch's targets on the device, for the losses.
struct DeviceTargets {
  const std::int32_t* labels = nullptr;  // classification (N)
  const float* targets = nullptr;        // regression, shaped like the prediction
};

// Device memory a layer is bound to. dinputs[j] is null where the input needs no gradient.
// params/dparams point into the flat buffers: compute-type slots at their compute copy and
// compute-type gradient, fp32 slots at the fp32 master and fp32 gradient.
struct Bindings {
  std::vector<const void*> inputs;
  std::vector<void*> dinputs;
  void* output = nullptr;
  void* doutput = nullptr;
  std::vector<void*> params, dparams;
  const DeviceTargets* targets = nullptr;
  float* loss = nullptr;                      // losses: where the loss goes (device, one float)
  std::int32_t* correct = nullptr;            // classification losses: correct predictions (device)
  const kernels::StepState* state = nullptr;  // losses: the loss scale to multiply gradients by
};

class Layer {
 public:
  Layer() = default;
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  virtual std::vector<ParamSlot> param_slots() const { return {}; }
  virtual void bind(Context& ctx, const Bindings& b) = 0;
  virtual void forward(Context& ctx) = 0;
  // Inference mode (batch norm with its running statistics); the same as forward elsewhere.
  virtual void forward_eval(Context& ctx) { forward(ctx); }
  virtual void backward(Context& ctx) = 0;

  // Canonical parameter `index` (row-major, as tb::node_params shapes it) from the slots' fp32
  // values, and back. `slots` holds every slot of this layer as fp32 host values.
  virtual std::vector<float> canonical(int index, const std::vector<std::vector<float>>& slots) const {
    return slots.at(std::size_t(index));
  }
  virtual void set_canonical(int index, const std::vector<float>& value, std::vector<std::vector<float>>& slots) const {
    slots.at(std::size_t(index)) = value;
  }
  // Device memory the layer holds outside the network's buffers (saved statistics, RNN
  // reserve space), counted as activations.
  virtual std::size_t own_bytes() const { return 0; }

  // For the memory planner: what backward reads (by default everything) and whether the layer
  // may run in place.
  virtual BackwardReads backward_reads() const { return BackwardReads::all(); }
  virtual bool output_over_input() const { return false; }
  virtual bool dinput_over_doutput() const { return false; }
  // A layer that can make its output again from what its backward keeps (inputs it reads, its
  // own saved state) does it here, where the planner dropped the output between forward and
  // backward.
  virtual bool recomputes_output() const { return false; }
  virtual void recompute(Context&) { TB_CHECK(false, "this layer cannot recompute its output"); }
};

// A layer of one input without parameters (activations, pooling): binds x, y and their
// gradients.
class UnaryLayer : public Layer {
 public:
  void bind(Context&, const Bindings& b) override {
    x_ = b.inputs.at(0);
    dx_ = b.dinputs.empty() ? nullptr : b.dinputs[0];
    y_ = b.output;
    dy_ = b.doutput;
  }

 protected:
  const void* x_ = nullptr;
  void* dx_ = nullptr;  // null where the input needs no gradient
  void* y_ = nullptr;
  const void* dy_ = nullptr;
};

using Inputs = std::vector<LayerInput>;
std::unique_ptr<Layer> make_layer(Context& ctx, const LayerSpec& spec, const Inputs& inputs, const Dims& out_shape);

// One factory per layer file (engine/cuda/<layer>.cpp), as in engine/cpu.
std::unique_ptr<Layer> make_linear(Context&, const LinearSpec&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_conv2d(Context&, const Conv2dSpec&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_maxpool2d(Context&, const MaxPool2dSpec&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_global_avgpool(Context&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_batchnorm(Context&, const BatchNormSpec&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_relu(Context&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_sigmoid(Context&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_lstm(Context&, const LSTMSpec&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_add(Context&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_softmax_cross_entropy(Context&, const SoftmaxCrossEntropySpec&, const Inputs&);
std::unique_ptr<Layer> make_mse(Context&, const Inputs&);
// Batch norm, then (with a shortcut) the residual add, then ReLU, as one layer (batchnorm.cpp):
// inputs {x} or {x, shortcut}; the output is the ReLU's. The network makes it where the graph
// has that chain and nothing else reads its intermediate values (network_plan.cpp).
std::unique_ptr<Layer> make_batchnorm_add_relu(Context&, const BatchNormSpec&, const Inputs&, const Dims&);

// An image shape (N, C, H, W) or any other shape seen as (N, C, 1, 1) with C = the rest.
struct Nchw {
  i64 n, c, h, w;
};
Nchw as_nchw(const Dims& shape);
// Values of a tensor of shape `s` in NCHW order to NHWC (N, H, W, C) order, or back: an image in
// a channels-last network, or a filter (K, C, R, S) to (K, R, S, C).
std::vector<float> to_channels_last(const std::vector<float>& nchw, const Nchw& s);
std::vector<float> from_channels_last(const std::vector<float>& nhwc, const Nchw& s);

}  // namespace tb::cuda

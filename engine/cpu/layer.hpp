// The CPU layer interface: each layer is planned once for its input layouts (choosing oneDNN
// primitives and the layouts they prefer), then bound to memories the network owns, then run.
//
// Gradients: backward overwrites (=) every gradient it writes, parameter and input alike; the
// network sums where one tensor feeds several layers. Values and gradients live in the
// network's arena for the lives the planner gives them: a layer may read in backward only what
// backward_reads() declares.
#pragma once

#include <omp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/planner.hpp"
#include "engine/core/spec.hpp"
#include "engine/cpu/context.hpp"

namespace tb::cpu {

// What a layer knows of one input when it is planned.
struct LayerInput {
  md desc;          // layout of the producer's output
  Dims shape;       // logical shape (spec shape inference)
  bool needs_grad;  // false for the model input: its gradient is never computed
};

// Memories a layer is bound to; gradient memories have the layout of their values.
struct Bindings {
  std::vector<dnnl::memory> inputs;
  std::vector<dnnl::memory> dinputs;  // empty memory where !needs_grad
  dnnl::memory output, doutput;
  std::vector<dnnl::memory> params, dparams;
  const BatchView* batch = nullptr;  // labels and targets, for the losses
  // The index of `batch`'s first sample in the whole batch (a lane's slice of it starts at its
  // lane's index x the lane's batch): the losses name a sample by it.
  i64 first_sample = 0;
};

class Layer {
 public:
  Layer() = default;
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  virtual md output_desc() const = 0;
  // Layouts the layer wants its parameters in, in the order of tb::node_params.
  virtual std::vector<md> param_descs() const { return {}; }
  virtual void bind(Context& ctx, const Bindings& b) = 0;
  virtual void forward(Context& ctx) = 0;
  // Inference mode (batch norm with its running statistics); the same as forward elsewhere.
  virtual void forward_eval(Context& ctx) { forward(ctx); }
  virtual void backward(Context& ctx) = 0;
  virtual float loss() const { return 0.0f; }

  // For the memory planner (engine/core/planner.hpp): what backward reads, and whether the
  // layer may run in place. By default it reads its inputs and output and never runs in place.
  virtual BackwardReads backward_reads() const { return BackwardReads::all(); }
  virtual bool output_over_input() const { return false; }    // output written over input 0
  virtual bool dinput_over_doutput() const { return false; }  // input 0's gradient over the output's
  // Correct predictions of the last forward (classification losses); -1 elsewhere.
  virtual i64 correct() const { return -1; }
};

// [0, n) split into one share per OpenMP thread, work(first, last) on each.
template <class Work>
void on_threads(i64 n, const Work& work) {
#pragma omp parallel
  {
    const i64 t = omp_get_thread_num(), threads = omp_get_num_threads();
    work(n * t / threads, n * (t + 1) / threads);
  }
}

std::unique_ptr<Layer> make_layer(Context& ctx, const LayerSpec& spec, const std::vector<LayerInput>& inputs,
                                  const Dims& out_shape);

// One factory per layer file (engine/cpu/<layer>.cpp).
using Inputs = std::vector<LayerInput>;
std::unique_ptr<Layer> make_linear(Context&, const LinearSpec&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_conv2d(Context&, const Conv2dSpec&, const Inputs&, const Dims&);
// Convolutions on the model input with at most this many input and output channels (stride 1,
// kernel 3, 5 or 7, output rows of 16 or more) run as conv2d_small.cpp's direct loops, where
// oneDNN's channel blocks would be mostly padding.
inline constexpr i64 kSmallConvInChannels = 4;
inline constexpr i64 kSmallConvOutChannels = 8;
bool conv_is_small(const Conv2dSpec& s, const LayerInput& in, const Dims& out);
std::unique_ptr<Layer> make_small_conv2d(Context&, const Conv2dSpec&, const Inputs&, const Dims&);
// The layout oneDNN's convolution gives the output of `s` (16-channel blocks on AVX-512, 8 on
// AVX2), or plain where its blocks would pad the channels.
md convolution_output_desc(Context& ctx, const Conv2dSpec& s, const Dims& in, const Dims& out);
// Convolutions without a bias over input planes of at most 4 positions (and at most K x K) run
// as one matrix product over a kernel laid out per output position (conv2d_expanded.cpp).
bool conv_is_expanded(const Conv2dSpec& s, const LayerInput& in, const Dims& out);
std::unique_ptr<Layer> make_expanded_conv2d(Context&, const Conv2dSpec&, const Inputs&, const Dims&);
// Other convolutions with kernels of 2 or more and output planes of at most 4 positions run as
// one inner product over their patches (conv2d_patches.cpp).
bool conv_is_patches(const Conv2dSpec& s, const LayerInput& in, const Dims& out);
std::unique_ptr<Layer> make_patch_conv2d(Context&, const Conv2dSpec&, const Inputs&, const Dims&);
// Convolutions on oneDNN whose forward reads a plain input and writes blocks of output channels
// (stride 1, no padding) compute their weight gradient in a loop of trainbench's own (conv2d.cpp).
bool conv_weight_grad_is_own(const Conv2dSpec& s, const LayerInput& in, const Dims& out);
// Of those, the ones with an input gradient and a 3x3, 5x5 or 7x7 kernel compute it in a loop of
// trainbench's own too, where its kernels run AVX-512.
bool conv_data_grad_is_own(const Conv2dSpec& s, const LayerInput& in, const Dims& out);
std::unique_ptr<Layer> make_maxpool2d(Context&, const MaxPool2dSpec&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_global_avgpool(Context&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_batchnorm(Context&, const BatchNormSpec&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_relu(Context&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_sigmoid(Context&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_lstm(Context&, const LSTMSpec&, const Inputs&, const Dims&);
// LSTMs of at most this many multiply-adds per sample and time step (4H x (I + H)) run as
// trainbench's own fused loop (lstm_small.cpp), where oneDNN's per-step overhead dominates.
inline constexpr i64 kSmallLstmMacs = 4096;
bool lstm_is_small(const LSTMSpec& s);
std::unique_ptr<Layer> make_small_lstm(Context&, const LSTMSpec&, const Inputs&);
std::unique_ptr<Layer> make_add(Context&, const Inputs&, const Dims&);
std::unique_ptr<Layer> make_softmax_cross_entropy(Context&, const SoftmaxCrossEntropySpec&, const Inputs&);
std::unique_ptr<Layer> make_mse(Context&, const Inputs&);

// Feeds a primitive that wants the layout `wanted` from a producer that gives `given`: the same
// memory, a reshaped view of the same bytes (both plain), or a reorder into a buffer of its own
// (and a reorder of the gradient back in backward).
class InputAdapter {
 public:
  InputAdapter() = default;
  InputAdapter(Context& ctx, const md& given, const md& wanted);
  void bind(Context& ctx, const dnnl::memory& value, const dnnl::memory& grad);
  const dnnl::memory& value() const { return value_; }
  const dnnl::memory& grad() const { return grad_; }
  void forward(Context& ctx) const { to_wanted_(ctx); }
  void backward(Context& ctx) const { to_given_(ctx); }

 private:
  md given_, wanted_;
  bool copy_ = false;
  dnnl::memory value_, grad_;
  Reorder to_wanted_, to_given_;
};

// A tensor in the layout a primitive wants: the bound memory itself where the layouts agree,
// else a buffer of its own with a reorder in (before the primitive) or out (after it), which
// binding records in Context::implementations as kBackwardReorder.
// Backward primitives are created with "any" layouts and may want other layouts than forward.
inline constexpr const char* kBackwardReorder = "reorder between forward's and backward's layouts";
class Relayout {
 public:
  Relayout() = default;
  explicit Relayout(const md& wanted) : wanted_(wanted) {}
  void bind_in(Context& ctx, const dnnl::memory& source);
  // As bind_in, but where `earlier` (bound in from the same source and run before this one's
  // reader) wants the same layout, its buffer is read and nothing is reordered twice.
  void bind_in(Context& ctx, const dnnl::memory& source, const Relayout& earlier);
  void bind_out(Context& ctx, const dnnl::memory& target);
  const dnnl::memory& mem() const { return mem_; }
  void operator()(Context& ctx) const { reorder_(ctx); }

 private:
  md wanted_;
  dnnl::memory mem_;
  Reorder reorder_;
};

// The backward pass of a layer with weights (convolution, inner product): the data gradient
// and the weight gradients, each primitive created with "any" layouts (hinted by forward) so
// that oneDNN picks an optimised implementation, with reorders only where its layouts differ
// from the forward ones. Without set_weights the layer computes its weight gradients itself.
class WeightedBackward {
 public:
  template <class DataPd>
  void set_data(Context& ctx, const DataPd& pd, dnnl::primitive p) {
    data_.create(ctx, pd, std::move(p));
    data_ddst_ = Relayout(pd.diff_dst_desc());
    data_weights_ = Relayout(pd.weights_desc());
    dsrc_ = Relayout(pd.diff_src_desc());
  }
  template <class WeightsPd>
  void set_weights(Context& ctx, const WeightsPd& pd, dnnl::primitive p) {
    weights_.create(ctx, pd, std::move(p));
    weights_src_ = Relayout(pd.src_desc());
    weights_ddst_ = Relayout(pd.diff_dst_desc());
    dweights_ = Relayout(pd.diff_weights_desc());
  }
  // src: the forward source; dsrc: where the input gradient goes (empty: not needed).
  void bind(Context& ctx, const dnnl::memory& src, const dnnl::memory& dsrc, const Bindings& b, bool bias);
  void run(Context& ctx) const;

 private:
  Step data_, weights_;
  Relayout data_ddst_, data_weights_, dsrc_, weights_src_, weights_ddst_, dweights_;
};

// A primitive descriptor in the layouts the layer prefers (`make(true)`) where oneDNN has more
// than a reference loop for them, else in the layouts oneDNN prefers (`make(false)`, "any").
// Inner products ask for their forward's layouts in backward, so that nothing is reordered
// between the two every step: with "any", LeNet-5's third convolution and first inner product
// reordered their weights, input and input gradient, 0.17 ms of a 3.3-ms step.
template <class Make>
auto preferred_layouts(const Make& make) -> decltype(make(true)) {
  try {
    auto pd = make(true);
    if (std::string(pd.impl_info_str()).rfind("ref", 0) != 0) return pd;
  } catch (const dnnl::error&) {
  }
  decltype(make(true)) pd;
  TB_DNNL(pd = make(false));
  return pd;
}

// A weight gradient summed over the batch by every OpenMP thread at once: each thread adds its
// share of the samples into buffers of its own (`add(first, last, dweights, dbias)`, dbias null
// without a bias), then the buffers' sums are written into the layer's gradients.
class ThreadPartials {
 public:
  using Add = std::function<void(i64 first, i64 last, float* dweights, float* dbias)>;
  ThreadPartials() = default;
  ThreadPartials(i64 weights, i64 biases);
  // Moved, never copied: parts_ points into partial_'s buffers, which a move keeps.
  ThreadPartials(ThreadPartials&&) = default;
  ThreadPartials& operator=(ThreadPartials&&) = default;
  ThreadPartials(const ThreadPartials&) = delete;
  ThreadPartials& operator=(const ThreadPartials&) = delete;
  void sum(i64 samples, float* dweights, float* dbias, const Add& add);

 private:
  i64 weights_ = 0, biases_ = 0;
  std::vector<std::vector<float>> partial_;  // per thread: the weights' gradient, then the biases'
  std::vector<const float*> parts_;          // each thread's buffer, as the sum_parts kernel takes them
};

// A layer with weights and an optional bias (convolution, inner product). The subclass's
// constructor creates the primitives (set_forward, then backward_.set_data/set_weights); this
// class binds and runs them the same way for both.
class WeightedLayer : public Layer {
 public:
  md output_desc() const override { return dst_desc_; }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }
  std::vector<md> param_descs() const override;
  void bind(Context& ctx, const Bindings& b) override;
  void forward(Context& ctx) override;
  void backward(Context& ctx) override;

 protected:
  WeightedLayer(bool bias, bool needs_dinput) : bias_(bias), needs_dinput_(needs_dinput) {}
  // given_src: the producer's layout, reordered into the primitive's where they differ.
  template <class ForwardPd>
  void set_forward(Context& ctx, const ForwardPd& pd, dnnl::primitive p, const md& given_src) {
    forward_.create(ctx, pd, std::move(p));
    dst_desc_ = pd.dst_desc();
    weights_desc_ = pd.weights_desc();
    bias_desc_ = pd.bias_desc();
    input_ = InputAdapter(ctx, given_src, pd.src_desc());
  }
  // The forward source in the layout the forward primitive read it.
  const dnnl::memory& source() const { return input_.value(); }
  // Its gradient in that layout, which backward() reorders into the producer's.
  const dnnl::memory& source_grad() const { return input_.grad(); }
  bool bias_, needs_dinput_;
  WeightedBackward backward_;

 private:
  md dst_desc_, weights_desc_, bias_desc_;
  InputAdapter input_;
  Step forward_;
};

}  // namespace tb::cpu

// Conv2d on oneDNN: source, weights and destination in the layouts oneDNN prefers ("any"),
// weights kept in that layout in the flat parameter buffer, so nothing is reordered per step
// in forward. Where forward reads a plain input and writes 8- or 16-channel blocks (LeNet-5's
// second convolution, 6 -> 16 channels over 14x14), the weight gradient and (on AVX-512, for
// 3x3, 5x5 and 7x7 kernels) the input gradient are loops of trainbench's own over those layouts
// (kernels.inc: every vector lane an output channel). oneDNN's backward for that shape reordered the input and
// the output gradient into 8-channel blocks and ran its AVX2 kernels, on AVX-512 machines too:
// weight gradient 0.50 ms and 0.18 ms of reorders, input gradient 0.46 ms and a reorder of it
// into the plain input's layout, a step at batch 100 on the 2-core VM (ONEDNN_VERBOSE).

#include "engine/cpu/layer.hpp"

#include "engine/cpu/kernels/kernels.hpp"

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;
using algo = dnnl::algorithm;

// The channel block (8 or 16) of forward's output where the layer computes its weight gradient
// itself, or 0: stride 1, no padding, a plain source, output and weights in blocks of B output
// channels, and B a multiple of the kernels' vector width.
i64 own_weight_grad_block(const Conv2dSpec& s, const dnnl::convolution_forward::primitive_desc& pd,
                          const Dims& in_shape) {
  if (s.stride != 1 || s.padding != 0 || pd.src_desc() != plain_desc(to_dnnl(in_shape))) return 0;
  for (const i64 B : {16, 8}) {
    if (s.out_channels % B != 0 || B % kernels::active().lanes != 0) continue;
    const md dst = channel_blocks(pd.dst_desc().dims(), B);
    const md weights({s.out_channels, s.in_channels, s.kernel, s.kernel}, dt::f32,
                     B == 16 ? tag::Acdb16a : tag::Acdb8a);
    if (pd.dst_desc() == dst && pd.weights_desc() == weights) return B;
  }
  return 0;
}

// Where the own data gradient runs: kernel sizes it is compiled for (kernels.inc), on an ISA with
// 32 vector registers (AVX-512), where it holds four input rows at a time. With 16 (AVX2, SSE2)
// it holds two, and ran no faster than oneDNN's jit:avx2 kernel on LeNet-5's second convolution
// (6 interleaved rounds on the 2-core VM: 0.977-1.006x of the step; AVX-512: 1.012-1.031x).
// The kernel's stack buffers bound the output channels and the output's width.
bool own_data_grad_runs(const Conv2dSpec& s, i64 B, i64 OW) {
  const kernels::Table& k = kernels::active();
  return B > 0 && (s.kernel == 3 || s.kernel == 5 || s.kernel == 7) && k.registers >= 32 &&
         s.kernel * s.out_channels / k.lanes <= kernels::kDataGradMaxTerms && OW * B <= kernels::kDataGradMaxRow;
}

// The output's (and its gradient's) layout as primitives are asked for it. oneDNN picks 16-wide
// channel blocks for any output; with at most 8 channels (LeNet-5's first convolution has 6)
// that computes twice the channels it needs. 8-wide blocks halve the padding (measured: LeNet-5
// about 11-16% faster on two cores).
md output_any(const Conv2dSpec& s, const Dims& out) {
  return md(to_dnnl(out), dt::f32, s.out_channels <= 8 ? tag::aBcd8b : tag::any);
}

// The forward primitive: source, weights and destination in the layouts oneDNN prefers.
dnnl::convolution_forward::primitive_desc forward_pd(Context& ctx, const Conv2dSpec& s, const Dims& in,
                                                     const Dims& out) {
  const md src_any(to_dnnl(in), dt::f32, tag::any);
  const md weights_any({s.out_channels, s.in_channels, s.kernel, s.kernel}, dt::f32, tag::any);
  const md bias_desc = s.bias ? md({s.out_channels}, dt::f32, tag::a) : md();
  const md dst_any = output_any(s, out);
  const dnnl::memory::dims strides{s.stride, s.stride}, pad{s.padding, s.padding};
  dnnl::convolution_forward::desc d(prop::forward_training, algo::convolution_direct, src_any, weights_any, bias_desc,
                                    dst_any, strides, pad, pad);
  dnnl::convolution_forward::primitive_desc pd;
  TB_DNNL(pd = dnnl::convolution_forward::primitive_desc(d, ctx.attr, ctx.engine));
  return pd;
}

class Conv2d final : public WeightedLayer {
 public:
  Conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out)
      : WeightedLayer(s.bias, in[0].needs_grad) {
    const dnnl::convolution_forward::primitive_desc fwd_pd = forward_pd(ctx, s, in[0].shape, out);
    // Backward's layouts: "any", hinted by forward's.
    const md weights_any({s.out_channels, s.in_channels, s.kernel, s.kernel}, dt::f32, tag::any);
    const md dst_any = output_any(s, out);
    const md src_any(to_dnnl(in[0].shape), dt::f32, tag::any);
    const md bias_desc = s.bias ? md({s.out_channels}, dt::f32, tag::a) : md();
    const dnnl::memory::dims strides{s.stride, s.stride}, pad{s.padding, s.padding};
    set_forward(ctx, fwd_pd, dnnl::convolution_forward(fwd_pd), in[0].desc);

    grad_.B = own_weight_grad_block(s, fwd_pd, in[0].shape);
    own_data_grad_ = needs_dinput_ && own_data_grad_runs(s, grad_.B, out[3]);
    if (needs_dinput_ && !own_data_grad_) {
      // The same for an input gradient of at most 8 channels (LeNet-5's conv2: ONEDNN_VERBOSE
      // timed it at 0.61 ms in 16-wide blocks, 0.50 ms in 8-wide ones), unless oneDNN has only
      // its reference loop for that layout (SSE4.1: 47 ms a step).
      const auto pd = preferred_layouts([&](bool preferred) {
        const md dsrc_any(to_dnnl(in[0].shape), dt::f32, preferred && s.in_channels <= 8 ? tag::aBcd8b : tag::any);
        dnnl::convolution_backward_data::desc d(algo::convolution_direct, dsrc_any, weights_any, dst_any, strides, pad,
                                                pad);
        return dnnl::convolution_backward_data::primitive_desc(d, ctx.attr, ctx.engine, fwd_pd);
      });
      backward_.set_data(ctx, pd, dnnl::convolution_backward_data(pd));
    }
    if (grad_.B > 0) {
      grad_.N = in[0].shape[0], grad_.C = s.in_channels, grad_.H = in[0].shape[2], grad_.W = in[0].shape[3];
      grad_.O = s.out_channels, grad_.K = s.kernel, grad_.OH = out[2], grad_.OW = out[3];
      // Per thread: its samples' weight gradient (O / B, K, K, C, B: Acdb16a or Acdb8a), then its bias
      // gradient (O).
      partial_ = ThreadPartials(grad_.O * grad_.C * grad_.K * grad_.K, grad_.O);
      return;
    }
    dnnl::convolution_backward_weights::desc w(algo::convolution_direct, src_any, weights_any, bias_desc, dst_any,
                                               strides, pad, pad);
    dnnl::convolution_backward_weights::primitive_desc wpd;
    TB_DNNL(wpd = dnnl::convolution_backward_weights::primitive_desc(w, ctx.attr, ctx.engine, fwd_pd));
    backward_.set_weights(ctx, wpd, dnnl::convolution_backward_weights(wpd));
  }

  void bind(Context& ctx, const Bindings& b) override {
    WeightedLayer::bind(ctx, b);
    if (grad_.B == 0) return;
    grad_.x = static_cast<const float*>(source().get_data_handle());
    grad_.dy = static_cast<const float*>(b.doutput.get_data_handle());
    w_ = static_cast<const float*>(b.params[0].get_data_handle());
    dx_ = own_data_grad_ ? static_cast<float*>(source_grad().get_data_handle()) : nullptr;
    dw_ = static_cast<float*>(b.dparams[0].get_data_handle());
    db_ = bias_ ? static_cast<float*>(b.dparams[1].get_data_handle()) : nullptr;
  }

  void backward(Context& ctx) override {
    if (grad_.B > 0) weight_grad();
    if (own_data_grad_) data_grad();
    WeightedLayer::backward(ctx);
  }

 private:
  void weight_grad() {
    partial_.sum(grad_.N, dw_, db_, [this](i64 first, i64 last, float* dw, float* db) {
      kernels_.blocked_conv_weight_grad(grad_, first, last, dw, db);
    });
  }

  // The input gradient of the threads' samples, written whole (plain NCHW: the layer's input).
  void data_grad() const {
    on_threads(grad_.N, [this](i64 first, i64 last) { kernels_.blocked_conv_data_grad(grad_, w_, first, last, dx_); });
  }

  const kernels::Table& kernels_ = kernels::active();  // the ISA active when the layer was made
  kernels::BlockedConvGrad grad_;                      // B = 0: oneDNN's weight gradient
  bool own_data_grad_ = false;                         // the input gradient too, from grad_'s layouts
  ThreadPartials partial_;
  const float* w_ = nullptr;
  float* dx_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

}  // namespace

md convolution_output_desc(Context& ctx, const Conv2dSpec& s, const Dims& in, const Dims& out) {
  const md dst = forward_pd(ctx, s, in, out).dst_desc();
  return dst.get_size() == std::size_t(product(out)) * sizeof(float) ? dst : plain_desc(to_dnnl(out));
}

// The channel block of the own gradients of the Conv2d layer make_conv2d would make, or 0.
i64 own_grad_block(const Conv2dSpec& s, const LayerInput& in, const Dims& out) {
  if (conv_is_small(s, in, out) || conv_is_expanded(s, in, out) || conv_is_patches(s, in, out)) return 0;
  Context ctx;
  return own_weight_grad_block(s, forward_pd(ctx, s, in.shape, out), in.shape);
}

bool conv_weight_grad_is_own(const Conv2dSpec& s, const LayerInput& in, const Dims& out) {
  return own_grad_block(s, in, out) > 0;
}

bool conv_data_grad_is_own(const Conv2dSpec& s, const LayerInput& in, const Dims& out) {
  return in.needs_grad && own_data_grad_runs(s, own_grad_block(s, in, out), out[3]);
}

std::unique_ptr<Layer> make_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  if (conv_is_small(s, in[0], out)) return make_small_conv2d(ctx, s, in, out);
  if (conv_is_expanded(s, in[0], out)) return make_expanded_conv2d(ctx, s, in, out);
  if (conv_is_patches(s, in[0], out)) return make_patch_conv2d(ctx, s, in, out);
  return std::make_unique<Conv2d>(ctx, s, in, out);
}

}  // namespace tb::cpu

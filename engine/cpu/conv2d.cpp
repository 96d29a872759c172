// Conv2d on oneDNN: source, weights and destination in the layouts oneDNN prefers ("any"),
// weights kept in that layout in the flat parameter buffer, so nothing is reordered per step
// in forward.
#include "engine/cpu/layer.hpp"

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;
using algo = dnnl::algorithm;

class Conv2d final : public WeightedLayer {
 public:
  Conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out)
      : WeightedLayer(s.bias, in[0].needs_grad) {
    const md src_any(to_dnnl(in[0].shape), dt::f32, tag::any);
    const md weights_any({s.out_channels, s.in_channels, s.kernel, s.kernel}, dt::f32, tag::any);
    const md bias_desc = s.bias ? md({s.out_channels}, dt::f32, tag::a) : md();
    // oneDNN picks 16-wide channel blocks for any output; with at most 8 channels (LeNet-5's
    // first convolution has 6) that computes twice the channels it needs. 8-wide blocks halve
    // the padding (measured: LeNet-5 about 11-16% faster on two cores).
    const md dst_any(to_dnnl(out), dt::f32, s.out_channels <= 8 ? tag::aBcd8b : tag::any);
    const dnnl::memory::dims strides{s.stride, s.stride}, pad{s.padding, s.padding};

    dnnl::convolution_forward::desc fwd_desc(prop::forward_training, algo::convolution_direct, src_any, weights_any,
                                             bias_desc, dst_any, strides, pad, pad);
    dnnl::convolution_forward::primitive_desc fwd_pd;
    TB_DNNL(fwd_pd = dnnl::convolution_forward::primitive_desc(fwd_desc, ctx.attr, ctx.engine));
    set_forward(ctx, fwd_pd, dnnl::convolution_forward(fwd_pd), in[0].desc);

    if (needs_dinput_) {
      // The same for an input gradient of at most 8 channels (LeNet-5's conv2: ONEDNN_VERBOSE
      // timed it at 0.61 ms in 16-wide blocks, 0.50 ms in 8-wide ones).
      const md dsrc_any(to_dnnl(in[0].shape), dt::f32, s.in_channels <= 8 ? tag::aBcd8b : tag::any);
      dnnl::convolution_backward_data::desc d(algo::convolution_direct, dsrc_any, weights_any, dst_any, strides, pad,
                                              pad);
      dnnl::convolution_backward_data::primitive_desc pd;
      TB_DNNL(pd = dnnl::convolution_backward_data::primitive_desc(d, ctx.attr, ctx.engine, fwd_pd));
      backward_.set_data(ctx, pd, dnnl::convolution_backward_data(pd));
    }
    dnnl::convolution_backward_weights::desc w(algo::convolution_direct, src_any, weights_any, bias_desc, dst_any,
                                               strides, pad, pad);
    dnnl::convolution_backward_weights::primitive_desc wpd;
    TB_DNNL(wpd = dnnl::convolution_backward_weights::primitive_desc(w, ctx.attr, ctx.engine, fwd_pd));
    backward_.set_weights(ctx, wpd, dnnl::convolution_backward_weights(wpd));
  }
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  if (conv_is_small(s, in[0], out)) return make_small_conv2d(ctx, s, in, out);
  if (conv_is_expanded(s, in[0], out)) return make_expanded_conv2d(ctx, s, in, out);
  if (conv_is_patches(s, in[0], out)) return make_patch_conv2d(ctx, s, in, out);
  return std::make_unique<Conv2d>(ctx, s, in, out);
}

}  // namespace tb::cpu

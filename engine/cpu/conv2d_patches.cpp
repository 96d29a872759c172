// A convolution with an output plane of at most four positions over a larger input (LeNet-5's
// third: 16 -> 120 channels, 4x4 over 5x5, output 2x2), as one inner product over its patches:
// each output position's C x K x K inputs are copied into a row (im2col), and the rows of the
// whole batch times the kernel are the output. oneDNN's direct convolution ran that layer at 57
// GFLOP/s on the 2-core AVX-512 VM, 0.65 ms a step for the forward and both gradients, where the
// same work as matrix products took 0.38 ms. The output comes out a sample's positions by
// channels (channels-last); the data gradient of the patches is added back into the input's
// (col2im). The patches are the layer's own, so backward reads neither its input nor its output.
#include "engine/cpu/layer.hpp"

#include <omp.h>

#include <algorithm>

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;

// At most this many output positions (and more input positions than taps: conv_is_expanded
// takes the rest).
constexpr i64 kMaxOutputs = 4;

class PatchConv2d final : public Layer {
 public:
  PatchConv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out)
      : bias_(s.bias),
        needs_dinput_(in[0].needs_grad),
        N_(in[0].shape[0]),
        C_(s.in_channels),
        H_(in[0].shape[2]),
        W_(in[0].shape[3]),
        O_(s.out_channels),
        K_(s.kernel),
        S_(s.stride),
        P_(s.padding),
        OH_(out[2]),
        OW_(out[3]) {
    const md patches({rows(), C_, K_, K_}, dt::f32, tag::abcd);
    const md weights_any({O_, C_, K_, K_}, dt::f32, tag::any);
    const md bias = bias_ ? md({O_}, dt::f32, tag::a) : md();
    const md dst({rows(), O_}, dt::f32, tag::ab);  // the output's bytes, channels-last
    dnnl::inner_product_forward::primitive_desc fwd_pd;
    TB_DNNL(fwd_pd = dnnl::inner_product_forward::primitive_desc(
                dnnl::inner_product_forward::desc(prop::forward_training, patches, weights_any, bias, dst), ctx.attr,
                ctx.engine));
    forward_.create(ctx, fwd_pd, dnnl::inner_product_forward(fwd_pd));
    weights_desc_ = fwd_pd.weights_desc();
    if (needs_dinput_) {
      const auto pd = preferred_layouts([&](bool same) {
        dnnl::inner_product_backward_data::desc d(patches, same ? weights_desc_ : weights_any, dst);
        return dnnl::inner_product_backward_data::primitive_desc(d, ctx.attr, ctx.engine, fwd_pd);
      });
      backward_.set_data(ctx, pd, dnnl::inner_product_backward_data(pd));
      dpatches_ = dnnl::memory(patches, ctx.engine);
    }
    const auto wpd = preferred_layouts([&](bool same) {
      dnnl::inner_product_backward_weights::desc w(patches, same ? weights_desc_ : weights_any, bias, dst);
      return dnnl::inner_product_backward_weights::primitive_desc(w, ctx.attr, ctx.engine, fwd_pd);
    });
    backward_.set_weights(ctx, wpd, dnnl::inner_product_backward_weights(wpd));
    input_ = InputAdapter(ctx, in[0].desc, plain_desc(to_dnnl(in[0].shape)));
    patches_ = dnnl::memory(patches, ctx.engine);
  }

  md output_desc() const override { return md({N_, O_, OH_, OW_}, dt::f32, tag::acdb); }
  BackwardReads backward_reads() const override { return BackwardReads::nothing(1); }
  std::vector<md> param_descs() const override {
    std::vector<md> d{weights_desc_};
    if (bias_) d.push_back(md({O_}, dt::f32, tag::a));
    return d;
  }

  void bind(Context& ctx, const Bindings& b) override {
    input_.bind(ctx, b.inputs[0], needs_dinput_ ? b.dinputs[0] : dnnl::memory());
    const md dst({rows(), O_}, dt::f32, tag::ab);
    forward_.args = {{DNNL_ARG_SRC, patches_},
                     {DNNL_ARG_WEIGHTS, b.params[0]},
                     {DNNL_ARG_DST, dnnl::memory(dst, ctx.engine, b.output.get_data_handle())}};
    if (bias_) forward_.args[DNNL_ARG_BIAS] = b.params[1];
    forward_.bind_scratch(ctx);
    Bindings rows_of = b;  // the output's gradient as the product's rows
    rows_of.doutput = dnnl::memory(dst, ctx.engine, b.doutput.get_data_handle());
    backward_.bind(ctx, patches_, dpatches_, rows_of, bias_);
  }

  void forward(Context& ctx) override {
    input_.forward(ctx);
    ctx.stream.wait();
    im2col();
    forward_.run(ctx);
  }

  void backward(Context& ctx) override {
    backward_.run(ctx);
    if (!needs_dinput_) return;
    ctx.stream.wait();
    col2im();
    input_.backward(ctx);
  }

 private:
  i64 rows() const { return N_ * OH_ * OW_; }

  // Calls f(row's offset, c * K * K + kh * K + kw, input's offset) for every tap of every row
  // inside the input (the padding's taps are left alone), a sample per thread.
  template <class F>
  void each_tap(F f) const {
#pragma omp parallel for schedule(static)
    for (i64 n = 0; n < N_; ++n)
      for (i64 oh = 0; oh < OH_; ++oh)
        for (i64 ow = 0; ow < OW_; ++ow) {
          const i64 row = ((n * OH_ + oh) * OW_ + ow) * C_ * K_ * K_;
          for (i64 c = 0; c < C_; ++c)
            for (i64 kh = 0; kh < K_; ++kh) {
              const i64 ih = oh * S_ - P_ + kh;
              if (ih < 0 || ih >= H_) continue;
              for (i64 kw = 0; kw < K_; ++kw) {
                const i64 iw = ow * S_ - P_ + kw;
                if (iw >= 0 && iw < W_) f(row + (c * K_ + kh) * K_ + kw, ((n * C_ + c) * H_ + ih) * W_ + iw);
              }
            }
        }
  }

  void im2col() {
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    float* patches = static_cast<float*>(patches_.get_data_handle());
    if (P_ > 0) std::fill_n(patches, rows() * C_ * K_ * K_, 0.0f);
    each_tap([&](i64 to, i64 from) { patches[to] = x[from]; });
  }

  // Each input's gradient: the sum over the patches' entries that copied it.
  void col2im() {
    float* dx = static_cast<float*>(input_.grad().get_data_handle());
    const float* dpatches = static_cast<const float*>(dpatches_.get_data_handle());
    std::fill_n(dx, N_ * C_ * H_ * W_, 0.0f);
    each_tap([&](i64 from, i64 to) { dx[to] += dpatches[from]; });
  }

  const bool bias_, needs_dinput_;
  const i64 N_, C_, H_, W_, O_, K_, S_, P_, OH_, OW_;
  md weights_desc_;
  InputAdapter input_;  // the input, plain
  Step forward_;
  WeightedBackward backward_;
  dnnl::memory patches_, dpatches_;  // (rows, C, K, K), plain
};

}  // namespace

bool conv_is_patches(const Conv2dSpec& s, const LayerInput& in, const Dims& out) {
  if (s.kernel < 2 || in.shape.size() != 4 || out.size() != 4) return false;
  return out[2] * out[3] <= kMaxOutputs && !conv_is_expanded(s, in, out);
}

std::unique_ptr<Layer> make_patch_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<PatchConv2d>(ctx, s, in, out);
}

}  // namespace tb::cpu

// Linear on oneDNN's inner product. After a convolution the input stays 4-D in its blocked
// layout and the weights take the matching 4-D layout, so the flatten costs nothing; over a
// sequence (T, N, F) the rows are T*N.
#include "engine/cpu/layer.hpp"

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;

class Linear final : public WeightedLayer {
 public:
  Linear(Context& ctx, const LinearSpec& s, const Inputs& in, const Dims& out)
      : WeightedLayer(s.bias, in[0].needs_grad) {
    const Dims& x = in[0].shape;
    const i64 O = s.out_features;
    md src, weights_any;
    if (x.back() == s.in_features) {
      // Rows of features: the producer's bytes must be plain, seen as (rows, in).
      const i64 rows = product(x) / s.in_features;
      src = plain_view(in[0].desc, {rows, s.in_features});
      weights_any = md({O, s.in_features}, dt::f32, tag::any);
    } else {
      src = in[0].desc;  // (N, C, H, W) in the producer's layout
      weights_any = md({O, x[1], x[2], x[3]}, dt::f32, tag::any);
    }
    md bias_desc = s.bias ? md({O}, dt::f32, tag::a) : md();
    md dst = plain_desc({src.dims()[0], O});

    auto make_fwd = [&](const md& src_desc) {
      dnnl::inner_product_forward::desc d(prop::forward_training, src_desc, weights_any, bias_desc, dst);
      return dnnl::inner_product_forward::primitive_desc(d, ctx.attr, ctx.engine);
    };
    dnnl::inner_product_forward::primitive_desc fwd_pd;
    try {
      fwd_pd = make_fwd(src);
    } catch (const dnnl::error&) {
      // No implementation for the producer's layout: let oneDNN choose and reorder into it.
      TB_DNNL(fwd_pd = make_fwd(md(src.dims(), dt::f32, tag::any)));
    }
    set_forward(ctx, fwd_pd, dnnl::inner_product_forward(fwd_pd), in[0].desc);

    const md src_any(src.dims(), dt::f32, tag::any), dst_any(dst.dims(), dt::f32, tag::any);
    if (needs_dinput_) {
      const auto pd = preferred_layouts([&](bool same) {
        dnnl::inner_product_backward_data::desc d(same ? fwd_pd.src_desc() : src_any,
                                                  same ? fwd_pd.weights_desc() : weights_any,
                                                  same ? fwd_pd.dst_desc() : dst_any);
        return dnnl::inner_product_backward_data::primitive_desc(d, ctx.attr, ctx.engine, fwd_pd);
      });
      backward_.set_data(ctx, pd, dnnl::inner_product_backward_data(pd));
    }
    const auto wpd = preferred_layouts([&](bool same) {
      dnnl::inner_product_backward_weights::desc w(same ? fwd_pd.src_desc() : src_any,
                                                   same ? fwd_pd.weights_desc() : weights_any, bias_desc,
                                                   same ? fwd_pd.dst_desc() : dst_any);
      return dnnl::inner_product_backward_weights::primitive_desc(w, ctx.attr, ctx.engine, fwd_pd);
    });
    backward_.set_weights(ctx, wpd, dnnl::inner_product_backward_weights(wpd));
    (void)out;
  }
};

}  // namespace

std::unique_ptr<Layer> make_linear(Context& ctx, const LinearSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<Linear>(ctx, s, in, out);
}

}  // namespace tb::cpu

// MaxPool2d and global average pooling on oneDNN's pooling primitive, in the producer's layout.
// Max pooling keeps oneDNN's workspace (the argmax) from forward for backward.
#include "engine/cpu/layer.hpp"

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;
using algo = dnnl::algorithm;

class Pooling final : public Layer {
 public:
  Pooling(Context& ctx, algo alg, i64 kernel_h, i64 kernel_w, i64 stride, i64 pad, const Inputs& in,
          const Dims& out)
      : needs_dinput_(in[0].needs_grad) {
    const md src = in[0].desc;
    md dst_any(to_dnnl(out), dt::f32, tag::any);
    dnnl::memory::dims kernel{kernel_h, kernel_w}, strides{stride, stride}, padding{pad, pad};
    dnnl::pooling_forward::desc d(prop::forward_training, alg, src, dst_any, strides, kernel, padding, padding);
    TB_DNNL(fwd_pd_ = dnnl::pooling_forward::primitive_desc(d, ctx.attr, ctx.engine));
    fwd_.create(ctx, fwd_pd_, dnnl::pooling_forward(fwd_pd_));
    if (needs_dinput_) {
      dnnl::pooling_backward::desc bd(alg, src, fwd_pd_.dst_desc(), strides, kernel, padding, padding);
      dnnl::pooling_backward::primitive_desc pd;
      TB_DNNL(pd = dnnl::pooling_backward::primitive_desc(bd, ctx.attr, ctx.engine, fwd_pd_));
      bwd_.create(ctx, pd, dnnl::pooling_backward(pd));
    }
    if (fwd_pd_.workspace_desc().get_size() > 0) workspace_ = dnnl::memory(fwd_pd_.workspace_desc(), ctx.engine);
  }

  md output_desc() const override { return fwd_pd_.dst_desc(); }

  void bind(Context& ctx, const Bindings& b) override {
    fwd_.args = {{DNNL_ARG_SRC, b.inputs[0]}, {DNNL_ARG_DST, b.output}};
    if (workspace_) fwd_.args[DNNL_ARG_WORKSPACE] = workspace_;
    fwd_.bind_scratch(ctx);
    if (needs_dinput_) {
      bwd_.args = {{DNNL_ARG_DIFF_DST, b.doutput}, {DNNL_ARG_DIFF_SRC, b.dinputs[0]}};
      if (workspace_) bwd_.args[DNNL_ARG_WORKSPACE] = workspace_;
      bwd_.bind_scratch(ctx);
    }
  }
  void forward(Context& ctx) override { fwd_.run(ctx); }
  void backward(Context& ctx) override {
    if (needs_dinput_) bwd_.run(ctx);
  }

 private:
  bool needs_dinput_;
  dnnl::pooling_forward::primitive_desc fwd_pd_;
  dnnl::memory workspace_;
  Step fwd_, bwd_;
};

}  // namespace

std::unique_ptr<Layer> make_maxpool2d(Context& ctx, const MaxPool2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<Pooling>(ctx, algo::pooling_max, s.kernel, s.kernel, s.stride, s.padding, in, out);
}

std::unique_ptr<Layer> make_global_avgpool(Context& ctx, const Inputs& in, const Dims& out) {
  const Dims& x = in[0].shape;  // (N, C, H, W)
  return std::make_unique<Pooling>(ctx, algo::pooling_avg_exclude_padding, x[2], x[3], 1, 0, in, out);
}

}  // namespace tb::cpu

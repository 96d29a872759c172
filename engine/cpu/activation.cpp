// ReLU and Sigmoid on oneDNN's eltwise primitive, in the producer's layout. Backward reads the
// forward output (the *_use_dst_for_bwd algorithms), so the input need not be kept.
#include "engine/cpu/layer.hpp"

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;
using algo = dnnl::algorithm;

class Eltwise final : public Layer {
 public:
  Eltwise(Context& ctx, algo alg, const Inputs& in) : needs_dinput_(in[0].needs_grad) {
    const md data = in[0].desc;
    dnnl::eltwise_forward::desc d(prop::forward_training, alg, data, 0.f, 0.f);
    TB_DNNL(fwd_pd_ = dnnl::eltwise_forward::primitive_desc(d, ctx.attr, ctx.engine));
    fwd_.create(ctx, fwd_pd_, dnnl::eltwise_forward(fwd_pd_));
    if (needs_dinput_) {
      dnnl::eltwise_backward::desc bd(alg, data, fwd_pd_.dst_desc(), 0.f, 0.f);
      dnnl::eltwise_backward::primitive_desc pd;
      TB_DNNL(pd = dnnl::eltwise_backward::primitive_desc(bd, ctx.attr, ctx.engine, fwd_pd_));
      bwd_.create(ctx, pd, dnnl::eltwise_backward(pd));
    }
  }

  md output_desc() const override { return fwd_pd_.dst_desc(); }

  void bind(Context& ctx, const Bindings& b) override {
    fwd_.args = {{DNNL_ARG_SRC, b.inputs[0]}, {DNNL_ARG_DST, b.output}};
    fwd_.bind_scratch(ctx);
    if (needs_dinput_) {
      bwd_.args = {{DNNL_ARG_DST, b.output}, {DNNL_ARG_DIFF_DST, b.doutput}, {DNNL_ARG_DIFF_SRC, b.dinputs[0]}};
      bwd_.bind_scratch(ctx);
    }
  }
  void forward(Context& ctx) override { fwd_.run(ctx); }
  void backward(Context& ctx) override {
    if (needs_dinput_) bwd_.run(ctx);
  }

 private:
  bool needs_dinput_;
  dnnl::eltwise_forward::primitive_desc fwd_pd_;
  Step fwd_, bwd_;
};

}  // namespace

std::unique_ptr<Layer> make_relu(Context& ctx, const Inputs& in, const Dims&) {
  return std::make_unique<Eltwise>(ctx, algo::eltwise_relu_use_dst_for_bwd, in);
}

std::unique_ptr<Layer> make_sigmoid(Context& ctx, const Inputs& in, const Dims&) {
  return std::make_unique<Eltwise>(ctx, algo::eltwise_logistic_use_dst_for_bwd, in);
}

}  // namespace tb::cpu

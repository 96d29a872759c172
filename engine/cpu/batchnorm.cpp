// BatchNorm on oneDNN in the producer's layout. Training mode normalises with the batch
// statistics and updates the running averages after each forward (with the unbiased variance,
// as PyTorch does); inference mode normalises with the running averages.
#include "engine/cpu/layer.hpp"

#include <vector>

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;
using flags = dnnl::normalization_flags;

class BatchNorm final : public Layer {
 public:
  BatchNorm(Context& ctx, const BatchNormSpec& s, const Inputs& in)
      : spec_(s), needs_dinput_(in[0].needs_grad), running_mean_(s.channels, 0.f), running_var_(s.channels, 1.f) {
    const Dims& x = in[0].shape;
    per_channel_count_ = x[0] * x[2] * x[3];
    const md data = in[0].desc;
    const flags f = flags::use_scale | flags::use_shift;
    dnnl::batch_normalization_forward::desc d(prop::forward_training, data, float(s.eps), f);
    TB_DNNL(fwd_pd_ = dnnl::batch_normalization_forward::primitive_desc(d, ctx.attr, ctx.engine));
    fwd_.create(ctx, fwd_pd_, dnnl::batch_normalization_forward(fwd_pd_));
    dnnl::batch_normalization_backward::desc bd(prop::backward, fwd_pd_.dst_desc(), data, float(s.eps), f);
    dnnl::batch_normalization_backward::primitive_desc pd;
    TB_DNNL(pd = dnnl::batch_normalization_backward::primitive_desc(bd, ctx.attr, ctx.engine, fwd_pd_));
    bwd_.create(ctx, pd, dnnl::batch_normalization_backward(pd));
    dnnl::batch_normalization_forward::desc id(prop::forward_inference, data, float(s.eps),
                                               f | flags::use_global_stats);
    dnnl::batch_normalization_forward::primitive_desc ipd;
    TB_DNNL(ipd = dnnl::batch_normalization_forward::primitive_desc(id, ctx.attr, ctx.engine));
    infer_.create(ctx, ipd, dnnl::batch_normalization_forward(ipd));
    mean_ = dnnl::memory(fwd_pd_.mean_desc(), ctx.engine);
    variance_ = dnnl::memory(fwd_pd_.variance_desc(), ctx.engine);
    if (!needs_dinput_) scratch_dsrc_ = dnnl::memory(data, ctx.engine);
  }

  md output_desc() const override { return fwd_pd_.dst_desc(); }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }
  std::vector<md> param_descs() const override {
    md c({spec_.channels}, dt::f32, tag::a);
    return {c, c};
  }

  void bind(Context& ctx, const Bindings& b) override {
    fwd_.args = {{DNNL_ARG_SRC, b.inputs[0]},   {DNNL_ARG_DST, b.output}, {DNNL_ARG_SCALE, b.params[0]},
                 {DNNL_ARG_SHIFT, b.params[1]}, {DNNL_ARG_MEAN, mean_},   {DNNL_ARG_VARIANCE, variance_}};
    // oneDNN computes the input gradient with the parameter gradients; where nobody needs it,
    // it goes to a buffer of the layer's own.
    bwd_.args = {{DNNL_ARG_SRC, b.inputs[0]},
                 {DNNL_ARG_MEAN, mean_},
                 {DNNL_ARG_VARIANCE, variance_},
                 {DNNL_ARG_DIFF_DST, b.doutput},
                 {DNNL_ARG_SCALE, b.params[0]},
                 {DNNL_ARG_SHIFT, b.params[1]},
                 {DNNL_ARG_DIFF_SRC, needs_dinput_ ? b.dinputs[0] : scratch_dsrc_},
                 {DNNL_ARG_DIFF_SCALE, b.dparams[0]},
                 {DNNL_ARG_DIFF_SHIFT, b.dparams[1]}};
    const md stats({spec_.channels}, dt::f32, tag::a);
    infer_.args = {{DNNL_ARG_SRC, b.inputs[0]},
                   {DNNL_ARG_DST, b.output},
                   {DNNL_ARG_SCALE, b.params[0]},
                   {DNNL_ARG_SHIFT, b.params[1]},
                   {DNNL_ARG_MEAN, dnnl::memory(stats, ctx.engine, running_mean_.data())},
                   {DNNL_ARG_VARIANCE, dnnl::memory(stats, ctx.engine, running_var_.data())}};
    fwd_.bind_scratch(ctx);
    bwd_.bind_scratch(ctx);
    infer_.bind_scratch(ctx);
  }

  void forward(Context& ctx) override {
    fwd_.run(ctx);
    update_running_stats();
  }
  void forward_eval(Context& ctx) override { infer_.run(ctx); }
  void backward(Context& ctx) override { bwd_.run(ctx); }

 private:
  void update_running_stats() {
    const float m = float(spec_.momentum);
    const float unbias = per_channel_count_ > 1 ? float(per_channel_count_) / float(per_channel_count_ - 1) : 1.f;
    const float* mean = static_cast<const float*>(mean_.get_data_handle());
    const float* var = static_cast<const float*>(variance_.get_data_handle());
    for (i64 c = 0; c < spec_.channels; ++c) {
      running_mean_[c] = (1 - m) * running_mean_[c] + m * mean[c];
      running_var_[c] = (1 - m) * running_var_[c] + m * var[c] * unbias;
    }
  }

  BatchNormSpec spec_;
  bool needs_dinput_;
  i64 per_channel_count_;
  std::vector<float> running_mean_, running_var_;  // (C)
  dnnl::batch_normalization_forward::primitive_desc fwd_pd_;
  dnnl::memory mean_, variance_;  // (C), batch statistics of the last forward
  dnnl::memory scratch_dsrc_;
  Step fwd_, bwd_, infer_;
};

}  // namespace

std::unique_ptr<Layer> make_batchnorm(Context& ctx, const BatchNormSpec& s, const Inputs& in, const Dims&) {
  return std::make_unique<BatchNorm>(ctx, s, in);
}

}  // namespace tb::cpu

// LSTM on oneDNN's lstm primitives: one layer, one direction, zero initial state, time-major
// (T, N, F) sequences. (Small LSTMs run as lstm_small.cpp's fused loop instead.) Parameters stay in the canonical
// ldigo/ldgo layouts; oneDNN's backward wants the weights in its own layout, reordered from the parameters before each
// backward.
#include "engine/cpu/layer.hpp"

#include <cstring>

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;
constexpr auto direction = dnnl::rnn_direction::unidirectional_left2right;

class Lstm final : public Layer {
 public:
  Lstm(Context& ctx, const LSTMSpec& s, const Inputs& in, const Dims& out) : needs_dinput_(in[0].needs_grad) {
    const i64 T = in[0].shape[0], N = in[0].shape[1], I = s.input_size, H = s.hidden_size;
    src_ = plain_view(in[0].desc, {T, N, I});
    const md dst = plain_desc({T, N, H});
    const md weights_layer({1, 1, I, 4, H}, dt::f32, tag::ldigo);
    const md weights_iter({1, 1, H, 4, H}, dt::f32, tag::ldigo);
    const md bias({1, 1, 4, H}, dt::f32, tag::ldgo);
    const md none;
    // The zero initial state is given explicitly: with no src_iter, oneDNN 2.6's backward reads
    // an h(-1) that forward never zeroed in the workspace, and diff_weights_iter gets a spurious
    // h(-1)^T dgates(0) term (seen as a non-zero recurrent gradient for T = 1).
    const md state({1, 1, N, H}, dt::f32, tag::ldnc);

    dnnl::lstm_forward::desc d(prop::forward_training, direction, src_, state, state, weights_layer, weights_iter, bias,
                               dst, none, none);
    TB_DNNL(fwd_pd_ = dnnl::lstm_forward::primitive_desc(d, ctx.attr, ctx.engine));
    fwd_.create(ctx, fwd_pd_, dnnl::lstm_forward(fwd_pd_));
    workspace_ = dnnl::memory(fwd_pd_.workspace_desc(), ctx.engine);

    const md any_wl({1, 1, I, 4, H}, dt::f32, tag::any), any_wi({1, 1, H, 4, H}, dt::f32, tag::any);
    dnnl::lstm_backward::desc bd(prop::backward, direction, src_, state, state, any_wl, any_wi, bias, dst, none, none,
                                 src_, state, state, weights_layer, weights_iter, bias, dst, none, none);
    TB_DNNL(bwd_pd_ = dnnl::lstm_backward::primitive_desc(bd, ctx.attr, ctx.engine, fwd_pd_));
    bwd_.create(ctx, bwd_pd_, dnnl::lstm_backward(bwd_pd_));
    bwd_weights_layer_ = dnnl::memory(bwd_pd_.weights_layer_desc(), ctx.engine);
    bwd_weights_iter_ = dnnl::memory(bwd_pd_.weights_iter_desc(), ctx.engine);
    if (!needs_dinput_) scratch_dsrc_ = dnnl::memory(src_, ctx.engine);
    for (dnnl::memory* m : {&h0_, &c0_, &dh0_, &dc0_}) {
      *m = dnnl::memory(state, ctx.engine);
      std::memset(m->get_data_handle(), 0, state.get_size());
    }
    (void)out;
  }

  md output_desc() const override { return fwd_pd_.dst_layer_desc(); }
  std::vector<md> param_descs() const override {
    return {fwd_pd_.weights_layer_desc(), fwd_pd_.weights_iter_desc(), fwd_pd_.bias_desc()};
  }

  void bind(Context& ctx, const Bindings& b) override {
    dnnl::memory src(src_, ctx.engine, b.inputs[0].get_data_handle());
    dnnl::memory dsrc = needs_dinput_ ? dnnl::memory(src_, ctx.engine, b.dinputs[0].get_data_handle()) : scratch_dsrc_;
    fwd_.args = {{DNNL_ARG_SRC_LAYER, src},
                 {DNNL_ARG_WEIGHTS_LAYER, b.params[0]},
                 {DNNL_ARG_WEIGHTS_ITER, b.params[1]},
                 {DNNL_ARG_BIAS, b.params[2]},
                 {DNNL_ARG_DST_LAYER, b.output},
                 {DNNL_ARG_WORKSPACE, workspace_},
                 {DNNL_ARG_SRC_ITER, h0_},
                 {DNNL_ARG_SRC_ITER_C, c0_}};
    bwd_.args = {{DNNL_ARG_SRC_LAYER, src},
                 {DNNL_ARG_WEIGHTS_LAYER, bwd_weights_layer_},
                 {DNNL_ARG_WEIGHTS_ITER, bwd_weights_iter_},
                 {DNNL_ARG_BIAS, b.params[2]},
                 {DNNL_ARG_DST_LAYER, b.output},
                 {DNNL_ARG_DIFF_DST_LAYER, b.doutput},
                 {DNNL_ARG_WORKSPACE, workspace_},
                 {DNNL_ARG_DIFF_SRC_LAYER, dsrc},
                 {DNNL_ARG_DIFF_WEIGHTS_LAYER, b.dparams[0]},
                 {DNNL_ARG_DIFF_WEIGHTS_ITER, b.dparams[1]},
                 {DNNL_ARG_DIFF_BIAS, b.dparams[2]},
                 {DNNL_ARG_SRC_ITER, h0_},
                 {DNNL_ARG_SRC_ITER_C, c0_},
                 {DNNL_ARG_DIFF_SRC_ITER, dh0_},  // the initial state's gradient: unused
                 {DNNL_ARG_DIFF_SRC_ITER_C, dc0_}};
    to_bwd_layer_ = Reorder(b.params[0], bwd_weights_layer_);
    to_bwd_iter_ = Reorder(b.params[1], bwd_weights_iter_);
    dparams_ = b.dparams;
    fwd_.bind_scratch(ctx);
    bwd_.bind_scratch(ctx);
  }

  void forward(Context& ctx) override { fwd_.run(ctx); }
  void backward(Context& ctx) override {
    to_bwd_layer_(ctx);
    to_bwd_iter_(ctx);
    // oneDNN's RNN backward accumulates into the weight gradients; this layer overwrites.
    for (const dnnl::memory& g : dparams_) std::memset(g.get_data_handle(), 0, g.get_desc().get_size());
    bwd_.run(ctx);
  }

 private:
  bool needs_dinput_;
  md src_;  // (T, N, I) view of the producer's plain output
  dnnl::lstm_forward::primitive_desc fwd_pd_;
  dnnl::lstm_backward::primitive_desc bwd_pd_;
  dnnl::memory workspace_, bwd_weights_layer_, bwd_weights_iter_, scratch_dsrc_;
  dnnl::memory h0_, c0_, dh0_, dc0_;  // (1, 1, N, H): zero initial state and its gradient
  std::vector<dnnl::memory> dparams_;
  Reorder to_bwd_layer_, to_bwd_iter_;
  Step fwd_, bwd_;
};

}  // namespace

std::unique_ptr<Layer> make_lstm(Context& ctx, const LSTMSpec& s, const Inputs& in, const Dims& out) {
  if (lstm_is_small(s)) return make_small_lstm(ctx, s, in);
  return std::make_unique<Lstm>(ctx, s, in, out);
}

}  // namespace tb::cpu

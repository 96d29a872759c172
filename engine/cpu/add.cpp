// Residual add on oneDNN's binary primitive. Both inputs are brought to the first input's
// layout; backward hands the output gradient to both inputs.
#include "engine/cpu/layer.hpp"

namespace tb::cpu {
namespace {

class Add final : public Layer {
 public:
  Add(Context& ctx, const Inputs& in) : needs_(2) {
    const md a = in[0].desc;
    second_ = InputAdapter(ctx, in[1].desc, a);
    dnnl::binary::desc d(dnnl::algorithm::binary_add, a, a, a);
    dnnl::binary::primitive_desc pd;
    TB_DNNL(pd = dnnl::binary::primitive_desc(d, ctx.attr, ctx.engine));
    fwd_.create(ctx, pd, dnnl::binary(pd));
    out_desc_ = pd.dst_desc();
    for (int i = 0; i < 2; ++i) needs_[i] = in[i].needs_grad;
  }

  md output_desc() const override { return out_desc_; }
  BackwardReads backward_reads() const override { return BackwardReads::nothing(2); }
  // The first input's gradient may be the output gradient itself (same layout): then there is
  // nothing to copy for it.
  bool dinput_over_doutput() const override { return true; }

  void bind(Context& ctx, const Bindings& b) override {
    second_.bind(ctx, b.inputs[1], b.dinputs[1]);
    fwd_.args = {{DNNL_ARG_SRC_0, b.inputs[0]}, {DNNL_ARG_SRC_1, second_.value()}, {DNNL_ARG_DST, b.output}};
    fwd_.bind_scratch(ctx);
    const bool first_in_place = b.dinputs[0] && b.dinputs[0].get_data_handle() == b.doutput.get_data_handle();
    if (needs_[0] && !first_in_place) to_first_ = Reorder(b.doutput, b.dinputs[0]);
    if (needs_[1]) to_second_ = Reorder(b.doutput, second_.grad());
  }
  void forward(Context& ctx) override {
    second_.forward(ctx);
    fwd_.run(ctx);
  }
  void backward(Context& ctx) override {
    to_first_(ctx);
    if (needs_[1]) {
      to_second_(ctx);
      second_.backward(ctx);
    }
  }

 private:
  std::vector<bool> needs_;
  InputAdapter second_;
  md out_desc_;
  Step fwd_;
  Reorder to_first_, to_second_;
};

}  // namespace

std::unique_ptr<Layer> make_add(Context& ctx, const Inputs& in, const Dims&) { return std::make_unique<Add>(ctx, in); }

}  // namespace tb::cpu

// ReLU and Sigmoid on oneDNN's eltwise primitive, in the producer's layout. Backward reads the
// forward output (the *_use_dst_for_bwd algorithms), so the input need not be kept, and the
// planner may put the output over the input and the input gradient over the output gradient.
#include "engine/cpu/layer.hpp"

#include <cstring>
#include <optional>

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;
using algo = dnnl::algorithm;

// Where a 4-D layout blocks the channels in one block that the channel count does not fill
// (6 channels in nChw16c), the lanes past the last channel of the last block: oneDNN keeps them
// zero, and consumers rely on it.
struct ChannelPadding {
  i64 N = 0, H = 0, W = 0, stride_n = 0, stride_h = 0, stride_w = 0, last_block = 0;
  i64 first_lane = 0, block = 0;  // lanes [first_lane, block) of the last block are padding

  static std::optional<ChannelPadding> of(const md& desc) {
    const dnnl_memory_desc_t& d = desc.data;
    if (d.ndims != 4 || d.format_kind != dnnl_blocked) return std::nullopt;
    const dnnl_blocking_desc_t& b = d.format_desc.blocking;
    if (b.inner_nblks != 1 || b.inner_idxs[0] != 1 || d.padded_dims[1] == d.dims[1]) return std::nullopt;
    ChannelPadding p;
    p.N = d.dims[0], p.H = d.dims[2], p.W = d.dims[3];
    p.stride_n = b.strides[0], p.stride_h = b.strides[2], p.stride_w = b.strides[3];
    p.block = b.inner_blks[0];
    p.last_block = (d.padded_dims[1] / p.block - 1) * b.strides[1];
    p.first_lane = d.dims[1] % p.block;
    return p;
  }
  void zero(float* data) const {
#pragma omp parallel for collapse(2) schedule(static)
    for (i64 n = 0; n < N; ++n)
      for (i64 h = 0; h < H; ++h)
        for (i64 w = 0; w < W; ++w)
          std::memset(data + n * stride_n + last_block + h * stride_h + w * stride_w + first_lane, 0,
                      std::size_t(block - first_lane) * sizeof(float));
  }
};

class Eltwise final : public Layer {
 public:
  Eltwise(Context& ctx, algo alg, const Inputs& in) : needs_dinput_(in[0].needs_grad), data_(in[0].desc) {
    // oneDNN 2.6 runs eltwise forward on padded layouts with its reference loops; there the
    // forward runs (jit) on the whole buffer seen as one vector, and the padding it turns into
    // f(0) is put back to zero. Backward is jit on padded layouts.
    padding_ = ChannelPadding::of(data_);
    const md forward_data = padding_ ? plain_desc({padded_floats(data_)}) : data_;
    dnnl::eltwise_forward::desc d(prop::forward_training, alg, forward_data, 0.f, 0.f);
    TB_DNNL(fwd_pd_ = dnnl::eltwise_forward::primitive_desc(d, ctx.attr, ctx.engine));
    fwd_.create(ctx, fwd_pd_, dnnl::eltwise_forward(fwd_pd_));
    if (needs_dinput_) {
      dnnl::eltwise_forward::desc hint_desc(prop::forward_training, alg, data_, 0.f, 0.f);
      dnnl::eltwise_forward::primitive_desc hint;
      TB_DNNL(hint = dnnl::eltwise_forward::primitive_desc(hint_desc, ctx.attr, ctx.engine));
      dnnl::eltwise_backward::desc bd(alg, data_, data_, 0.f, 0.f);
      dnnl::eltwise_backward::primitive_desc pd;
      TB_DNNL(pd = dnnl::eltwise_backward::primitive_desc(bd, ctx.attr, ctx.engine, hint));
      bwd_.create(ctx, pd, dnnl::eltwise_backward(pd));
    }
  }

  md output_desc() const override { return data_; }
  BackwardReads backward_reads() const override { return BackwardReads::only_output(1); }
  // oneDNN's eltwise runs in place in both directions (src == dst, diff_dst == diff_src).
  bool output_over_input() const override { return true; }
  bool dinput_over_doutput() const override { return true; }

  void bind(Context& ctx, const Bindings& b) override {
    const md forward_data = fwd_pd_.src_desc();
    fwd_.args = {{DNNL_ARG_SRC, dnnl::memory(forward_data, ctx.engine, b.inputs[0].get_data_handle())},
                 {DNNL_ARG_DST, dnnl::memory(forward_data, ctx.engine, b.output.get_data_handle())}};
    output_ = static_cast<float*>(b.output.get_data_handle());
    fwd_.bind_scratch(ctx);
    if (needs_dinput_) {
      bwd_.args = {{DNNL_ARG_DST, b.output}, {DNNL_ARG_DIFF_DST, b.doutput}, {DNNL_ARG_DIFF_SRC, b.dinputs[0]}};
      bwd_.bind_scratch(ctx);
    }
  }
  void forward(Context& ctx) override {
    fwd_.run(ctx);
    if (padding_) padding_->zero(output_);
  }
  void backward(Context& ctx) override {
    if (needs_dinput_) bwd_.run(ctx);
  }

 private:
  bool needs_dinput_;
  md data_;
  std::optional<ChannelPadding> padding_;
  dnnl::eltwise_forward::primitive_desc fwd_pd_;
  float* output_ = nullptr;
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

// MaxPool2d and global average pooling on oneDNN's pooling primitive, in the producer's layout.
// Max pooling keeps oneDNN's workspace (the argmax) from forward for backward. Max pooling over
// non-overlapping windows of a plain input, or of 8- or 16-channel blocks, is a loop of
// trainbench's own (PlainMaxPool, BlockedMaxPool).
#include <cstdint>
#include <vector>

#include "engine/cpu/kernels/kernels.hpp"
#include "engine/cpu/layer.hpp"

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;
using algo = dnnl::algorithm;

class Pooling final : public Layer {
 public:
  Pooling(Context& ctx, algo alg, i64 kernel_h, i64 kernel_w, i64 stride, i64 pad, const Inputs& in, const Dims& out)
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
  // Max pooling's backward reads oneDNN's workspace (the argmax), average pooling nothing.
  BackwardReads backward_reads() const override { return BackwardReads::nothing(1); }

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

// An own max pooling's buffers (kernels::PlainPool, kernels::BlockedPool) from its bindings.
template <class Pool>
void bind_pool(Pool& pool, const Bindings& b, bool needs_dinput) {
  pool.x = static_cast<const float*>(b.inputs[0].get_data_handle());
  pool.y = static_cast<float*>(b.output.get_data_handle());
  pool.dy = static_cast<const float*>(b.doutput.get_data_handle());
  pool.dx = needs_dinput ? static_cast<float*>(b.dinputs[0].get_data_handle()) : nullptr;
}

// Max pooling with non-overlapping windows (kernel = stride, no padding) over a plain NCHW input,
// as after LeNet-5's first convolution (plain: conv2d_small.cpp). oneDNN's pooling is slow on
// plain layouts (ONEDNN_VERBOSE: 0.26-0.39 ms forward, 0.29-0.34 ms backward for LeNet-5's
// pool1 at batch 100 on this 2-core VM); this is one pass over each plane that keeps the
// position of each window's maximum for backward, a kernel of the ISA found at run time
// (kernels.inc: 2x2 windows a register's width of outputs at a time, branch-free).
class PlainMaxPool final : public Layer {
 public:
  PlainMaxPool(const MaxPool2dSpec& s, const Inputs& in, const Dims& out)
      : kernels_(kernels::active()),
        needs_dinput_(in[0].needs_grad),
        out_(out),
        argmax_(std::size_t(in[0].shape[0] * in[0].shape[1] * out[2] * out[3])) {
    pool_.planes = in[0].shape[0] * in[0].shape[1];
    pool_.K = s.kernel, pool_.H = in[0].shape[2], pool_.W = in[0].shape[3], pool_.OH = out[2], pool_.OW = out[3];
    pool_.argmax = argmax_.data();
  }

  md output_desc() const override { return plain_desc(to_dnnl(out_)); }
  BackwardReads backward_reads() const override { return BackwardReads::nothing(1); }  // its own argmax

  void bind(Context&, const Bindings& b) override { bind_pool(pool_, b, needs_dinput_); }

  void forward(Context&) override {
    on_threads(pool_.planes * pool_.OH,
               [this](i64 first, i64 last) { kernels_.plain_pool_forward(pool_, first, last); });
  }

  void backward(Context&) override {
    if (!needs_dinput_) return;
    on_threads(pool_.planes, [this](i64 first, i64 last) { kernels_.plain_pool_backward(pool_, first, last); });
  }

 private:
  const kernels::Table& kernels_;  // the ISA active when the layer was made
  const bool needs_dinput_;
  const Dims out_;
  std::vector<std::int32_t> argmax_;  // offset of each window's maximum, row-major in the window
  kernels::PlainPool pool_;
};

// Max pooling with non-overlapping windows over 8- or 16-channel blocks (oneDNN's convolution
// output), as after LeNet-5's second convolution. oneDNN's backward for it zeroes the whole
// input gradient and then scatters into it: 0.10 ms on AVX-512 and 0.18 ms on AVX2 a step at
// batch 100 on the 2-core VM (ONEDNN_VERBOSE), against a forward of 0.07. This writes each
// window's pieces once, every lane a channel (kernels.inc).
class BlockedMaxPool final : public Layer {
 public:
  BlockedMaxPool(const MaxPool2dSpec& s, const Inputs& in, const Dims& out, i64 block)
      : kernels_(kernels::active()),
        needs_dinput_(in[0].needs_grad),
        output_desc_(channel_blocks(to_dnnl(out), block)),
        argmax_(std::size_t(product(out))) {
    pool_.planes = in[0].shape[0] * in[0].shape[1] / block;
    pool_.B = block, pool_.K = s.kernel, pool_.H = in[0].shape[2], pool_.W = in[0].shape[3];
    pool_.OH = out[2], pool_.OW = out[3];
    pool_.argmax = argmax_.data();
  }

  md output_desc() const override { return output_desc_; }
  BackwardReads backward_reads() const override { return BackwardReads::nothing(1); }  // its own argmax

  void bind(Context&, const Bindings& b) override { bind_pool(pool_, b, needs_dinput_); }

  void forward(Context&) override {
    on_threads(pool_.planes, [this](i64 first, i64 last) { kernels_.blocked_pool_forward(pool_, first, last); });
  }
  void backward(Context&) override {
    if (!needs_dinput_) return;
    on_threads(pool_.planes, [this](i64 first, i64 last) { kernels_.blocked_pool_backward(pool_, first, last); });
  }

 private:
  const kernels::Table& kernels_;  // the ISA active when the layer was made
  const bool needs_dinput_;
  const md output_desc_;
  std::vector<std::int32_t> argmax_;  // each output float's window offset, row-major in the window
  kernels::BlockedPool pool_;
};

// The channel block of a layout BlockedMaxPool takes (8 or 16, the channels a multiple of it and
// of the kernels' vector width), else 0.
i64 pool_block(const md& desc, const Dims& shape) {
  for (const i64 B : {16, 8})
    if (shape[1] % B == 0 && B % kernels::active().lanes == 0 && desc == channel_blocks(to_dnnl(shape), B)) return B;
  return 0;
}

}  // namespace

std::unique_ptr<Layer> make_maxpool2d(Context& ctx, const MaxPool2dSpec& s, const Inputs& in, const Dims& out) {
  if (s.kernel == s.stride && s.padding == 0 && s.kernel <= 16 && in[0].desc == plain_desc(to_dnnl(in[0].shape)))
    return std::make_unique<PlainMaxPool>(s, in, out);
  if (s.kernel == s.stride && s.padding == 0 && in[0].shape.size() == 4)
    if (const i64 B = pool_block(in[0].desc, in[0].shape)) return std::make_unique<BlockedMaxPool>(s, in, out, B);
  return std::make_unique<Pooling>(ctx, algo::pooling_max, s.kernel, s.kernel, s.stride, s.padding, in, out);
}

std::unique_ptr<Layer> make_global_avgpool(Context& ctx, const Inputs& in, const Dims& out) {
  const Dims& x = in[0].shape;  // (N, C, H, W)
  return std::make_unique<Pooling>(ctx, algo::pooling_avg_exclude_padding, x[2], x[3], 1, 0, in, out);
}

}  // namespace tb::cpu

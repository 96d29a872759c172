// MaxPool2d and global average pooling on oneDNN's pooling primitive, in the producer's layout.
// Max pooling keeps oneDNN's workspace (the argmax) from forward for backward. Max pooling over
// non-overlapping windows of a plain input is a loop of trainbench's own (PlainMaxPool).
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/cpu/layer.hpp"
#include "engine/cpu/simd.hpp"

namespace tb::cpu {
namespace {

using namespace simd;

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

// Max pooling with non-overlapping windows (kernel = stride, no padding) over a plain NCHW input,
// as after LeNet-5's first convolution (plain: conv2d_small.cpp). oneDNN's pooling is slow on
// plain layouts (ONEDNN_VERBOSE: 0.26-0.39 ms forward, 0.29-0.34 ms backward for LeNet-5's
// pool1 at batch 100 on this 2-core VM); this is one pass over each plane that keeps the
// position of each window's maximum for backward.
class PlainMaxPool final : public Layer {
 public:
  PlainMaxPool(const MaxPool2dSpec& s, const Inputs& in, const Dims& out)
      : K_(s.kernel),
        planes_(in[0].shape[0] * in[0].shape[1]),
        H_(in[0].shape[2]),
        W_(in[0].shape[3]),
        OH_(out[2]),
        OW_(out[3]),
        needs_dinput_(in[0].needs_grad),
        out_(out),
        argmax_(std::size_t(planes_ * OH_ * OW_)) {}

  md output_desc() const override { return plain_desc(to_dnnl(out_)); }
  BackwardReads backward_reads() const override { return BackwardReads::nothing(1); }  // its own argmax

  void bind(Context&, const Bindings& b) override {
    x_ = static_cast<const float*>(b.inputs[0].get_data_handle());
    y_ = static_cast<float*>(b.output.get_data_handle());
    dy_ = static_cast<const float*>(b.doutput.get_data_handle());
    dx_ = needs_dinput_ ? static_cast<float*>(b.dinputs[0].get_data_handle()) : nullptr;
  }

  void forward(Context&) override {
    const i64 rows = planes_ * OH_;
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), threads = omp_get_num_threads();
      forward_rows(rows * t / threads, rows * (t + 1) / threads);
    }
  }

  void backward(Context&) override {
    if (!needs_dinput_) return;
#pragma omp parallel for schedule(static)
    for (i64 p = 0; p < planes_; ++p) {
      float* dx = dx_ + p * H_ * W_;
      std::fill(dx, dx + H_ * W_, 0.0f);
      for (i64 oh = 0; oh < OH_; ++oh)
        for (i64 ow = 0; ow < OW_; ++ow) {
          const i64 o = (p * OH_ + oh) * OW_ + ow, at = argmax_[std::size_t(o)];
          dx[(oh * K_ + at / K_) * W_ + ow * K_ + at % K_] = dy_[o];
        }
    }
  }

 private:
  // Branch-free: on random values "is this the largest so far" is a coin toss, and mispredicting
  // it took most of the layer's time. 2x2 windows (LeNet-5's) 16 outputs at a time: the even and
  // odd columns of the two input rows are four vectors, compared in row-major order.
  void forward_rows(i64 first, i64 last) {
    for (i64 r = first; r < last; ++r) {  // r: plane * OH + output row
      const i64 p = r / OH_, oh = r % OH_;
      const float* row = x_ + (p * H_ + oh * K_) * W_;
      float* y = y_ + r * OW_;
      std::int32_t* arg = &argmax_[std::size_t(r * OW_)];
      i64 ow = 0;
      if (K_ == 2)
        for (; ow < OW_; ow += kLanes) {
          // A row's last piece (or a row narrower than 16) through a zeroed copy of its inputs.
          const i64 count = std::min(kLanes, OW_ - ow);
          float part[4][2 * kLanes] = {};
          const float* src[4] = {row + 2 * ow, row + 2 * ow + kLanes, row + W_ + 2 * ow, row + W_ + 2 * ow + kLanes};
          if (count < kLanes) {
            std::memcpy(part[0], row + 2 * ow, sizeof(float) * std::size_t(2 * count));
            std::memcpy(part[2], row + W_ + 2 * ow, sizeof(float) * std::size_t(2 * count));
            src[0] = part[0], src[1] = part[0] + kLanes, src[2] = part[2], src[3] = part[2] + kLanes;
          }
          const vf cand[4] = {even(load(src[0]), load(src[1])), odd(load(src[0]), load(src[1])),
                              even(load(src[2]), load(src[3])), odd(load(src[2]), load(src[3]))};
          vf best = cand[0];
          vi at = vi{} + 0;
          for (int k = 1; k < 4; ++k) {
            const vi take = (cand[k] > best) | ((cand[k] != cand[k]) & (best == best));
            best = take ? cand[k] : best;
            at = take ? vi{} + k : at;
          }
          std::memcpy(y + ow, &best, sizeof(float) * std::size_t(count));
          std::memcpy(arg + ow, &at, sizeof(std::int32_t) * std::size_t(count));
        }
      for (; ow < OW_; ++ow) {
        float best = row[ow * K_];
        std::int32_t at = 0;
        for (i64 i = 0; i < K_; ++i)
          for (i64 j = 0; j < K_; ++j) {
            const float v = row[i * W_ + ow * K_ + j];
            const bool take = v > best || (v != v && best == best);
            best = take ? v : best;
            at = take ? std::int32_t(i * K_ + j) : at;
          }
        y[ow] = best;
        arg[ow] = at;
      }
    }
  }

  // Lanes 0, 2, .. 30 (even) or 1, 3, .. 31 (odd) of the 32 values in a then b.
  static vf even(vf a, vf b) {
    return __builtin_shuffle(a, b, vi{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30});
  }
  static vf odd(vf a, vf b) {
    return __builtin_shuffle(a, b, vi{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31});
  }

  const i64 K_, planes_, H_, W_, OH_, OW_;
  const bool needs_dinput_;
  const Dims out_;
  std::vector<std::int32_t> argmax_;  // offset of each window's maximum, row-major in the window
  const float* x_ = nullptr;
  float* y_ = nullptr;
  const float* dy_ = nullptr;
  float* dx_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_maxpool2d(Context& ctx, const MaxPool2dSpec& s, const Inputs& in, const Dims& out) {
  if (s.kernel == s.stride && s.padding == 0 && s.kernel <= 16 && in[0].desc == plain_desc(to_dnnl(in[0].shape)))
    return std::make_unique<PlainMaxPool>(s, in, out);
  return std::make_unique<Pooling>(ctx, algo::pooling_max, s.kernel, s.kernel, s.stride, s.padding, in, out);
}

std::unique_ptr<Layer> make_global_avgpool(Context& ctx, const Inputs& in, const Dims& out) {
  const Dims& x = in[0].shape;  // (N, C, H, W)
  return std::make_unique<Pooling>(ctx, algo::pooling_avg_exclude_padding, x[2], x[3], 1, 0, in, out);
}

}  // namespace tb::cpu

// A convolution over an input plane of at most four positions (ResNet-152's last two stages on
// 32x32 images: 2x2 and 1x1 planes), as one inner product. Every output position p and input
// position q meet at one tap of the kernel (or at none, where the tap would lie in the padding),
// so the convolution is dst[n][o][p] = sum over c, q of src[n][c][q] * big[o][p][c][q], with
// big[o][p][c][q] = w[o][c][tap(p, q)], 0 where there is no tap: a matrix product over the
// input's C x positions values. oneDNN's direct convolutions run these shapes far from the
// machine's rate, most of all for the weight gradient, and compute every tap, padding included:
// a 3x3 kernel on a 2x2 plane uses 4 of its 9 taps at each output position. Measured on the
// 2-core AVX-512 VM (batch 128, forward + data gradient + weight gradient): 256 -> 256 channels,
// 3x3 on 2x2, 7.9 ms as a convolution, 3.7 ms as this product; 512 -> 512, 3x3 on 1x1, 6.1 and
// 0.9 ms. The layer lays the kernel out as `big` before each forward, in the layout the
// product's primitive chose, and adds big's gradient back into the kernel's taps. The product
// reads its input in the producer's layout, and its columns are ordered so that its output is
// the layout a convolution would give (16-channel blocks), so nothing around it is reordered.
#include "engine/cpu/layer.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

namespace tb::cpu {
namespace {

using prop = dnnl::prop_kind;

// At most this many input positions: `big` holds O x outputs x C x inputs values.
constexpr i64 kMaxPositions = 4;

// Where the element (i0, i1, i2, i3) of a 4-D tensor lies among `d`'s floats: the sum of one part
// per index (a blocked layout's offset is: each index's outer part times its stride, plus its
// digits in the inner blocks), tabulated per dimension. Empty tables for a layout that is not
// blocked.
struct Offsets {
  std::vector<i64> dim[4];
  explicit Offsets(const md& d) {
    const dnnl_memory_desc_t& m = d.data;
    if (m.format_kind != dnnl_blocked || m.ndims != 4) return;
    const dnnl_blocking_desc_t& b = m.format_desc.blocking;
    for (int k = 0; k < 4; ++k)
      for (i64 i = 0; i < m.dims[k]; ++i) {
        i64 outer = i, inner = 0, step = 1;
        for (int t = b.inner_nblks - 1; t >= 0; --t) {
          if (b.inner_idxs[t] == k) {
            inner += outer % b.inner_blks[t] * step;
            outer /= b.inner_blks[t];
          }
          step *= b.inner_blks[t];
        }
        dim[k].push_back((k == 0 ? m.offset0 : 0) + outer * b.strides[k] + inner);
      }
  }
  bool blocked() const { return !dim[0].empty(); }
};

class ExpandedConv2d final : public Layer {
 public:
  ExpandedConv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out)
      : needs_dinput_(in[0].needs_grad),
        N_(in[0].shape[0]),
        C_(s.in_channels),
        O_(s.out_channels),
        K_(s.kernel),
        IH_(in[0].shape[2]),
        IW_(in[0].shape[3]),
        OH_(out[2]),
        OW_(out[3]),
        // The layout a convolution gives these channels (16-wide blocks), else plain.
        output_desc_(to_dnnl(out), dt::f32, O_ % 16 == 0 ? tag::aBcd16b : tag::abcd) {
    // Each (output, input) pair's tap, -1 where it would lie in the padding.
    for (i64 oh = 0; oh < OH_; ++oh)
      for (i64 ow = 0; ow < OW_; ++ow)
        for (i64 ih = 0; ih < IH_; ++ih)
          for (i64 iw = 0; iw < IW_; ++iw) {
            const i64 kh = ih - oh * s.stride + s.padding, kw = iw - ow * s.stride + s.padding;
            taps_.push_back(kh >= 0 && kh < K_ && kw >= 0 && kw < K_ ? int(kh * K_ + kw) : -1);
          }
    // The product's column of output channel o at output position p: where the output's layout
    // puts it within a sample (no padding in either layout: O is a multiple of the blocks).
    const Offsets y(output_desc_);
    for (i64 o = 0; o < O_; ++o)
      for (i64 p = 0; p < outputs(); ++p) column_.push_back(y.dim[1][o] + y.dim[2][p / OW_] + y.dim[3][p % OW_]);

    const md big_any({O_ * outputs(), C_, IH_, IW_}, dt::f32, tag::any);
    const md dst({N_, O_ * outputs()}, dt::f32, tag::ab);  // the output's bytes, a sample per row
    // The input as its producer lays it out where the product takes that, else as it chooses.
    dnnl::inner_product_forward::primitive_desc fwd_pd;
    for (const md& src : {in[0].desc, md(to_dnnl(in[0].shape), dt::f32, tag::any)}) {
      try {
        fwd_pd = dnnl::inner_product_forward::primitive_desc(
            dnnl::inner_product_forward::desc(prop::forward_training, src, big_any, md(), dst), ctx.attr, ctx.engine);
        break;
      } catch (const dnnl::error&) {
        if (src != in[0].desc) throw;
      }
    }
    forward_.create(ctx, fwd_pd, dnnl::inner_product_forward(fwd_pd));
    const md src = fwd_pd.src_desc();
    input_ = InputAdapter(ctx, in[0].desc, src);
    md data_weights;
    if (needs_dinput_) {
      dnnl::inner_product_backward_data::desc d(src, big_any, dst);
      dnnl::inner_product_backward_data::primitive_desc pd;
      TB_DNNL(pd = dnnl::inner_product_backward_data::primitive_desc(d, ctx.attr, ctx.engine, fwd_pd));
      data_.create(ctx, pd, dnnl::inner_product_backward_data(pd));
      data_weights = pd.weights_desc();
    }
    dnnl::inner_product_backward_weights::desc w(src, big_any, md(), dst);
    dnnl::inner_product_backward_weights::primitive_desc wpd;
    TB_DNNL(wpd = dnnl::inner_product_backward_weights::primitive_desc(w, ctx.attr, ctx.engine, fwd_pd));
    weights_.create(ctx, wpd, dnnl::inner_product_backward_weights(wpd));

    // `big` is laid out in a layout whose rows are contiguous (each row's C x inputs values in
    // one run: written a row at a time), the data gradient's where it is one, else plain; the
    // forward's layout (the gemm's prefers rows in blocks) is reordered from it, into the shared
    // staging buffer. The weight gradient goes to the staging buffer too, in its own layout,
    // and is folded from there.
    const md plain({O_ * outputs(), C_, IH_, IW_}, dt::f32, tag::oihw);
    big_ = Expanded(data_weights && Expanded::rows_contiguous(data_weights) ? data_weights : plain, IW_);
    big_.mem = dnnl::memory(big_.desc, ctx.engine);
    std::fill_n(static_cast<float*>(big_.mem.get_data_handle()), big_.desc.get_size() / sizeof(float), 0.0f);
    if (fwd_pd.weights_desc() != big_.desc) forward_big_ = fwd_pd.weights_desc();
    if (data_ && data_weights != big_.desc) data_big_ = dnnl::memory(data_weights, ctx.engine);
    dbig_ = Expanded(wpd.diff_weights_desc(), IW_);
    for (const md& staged : {forward_big_, dbig_.desc})
      ctx.staging_bytes = std::max(ctx.staging_bytes, staged.get_size());
  }

  md output_desc() const override { return output_desc_; }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }
  std::vector<md> param_descs() const override { return {md({O_, C_, K_, K_}, dt::f32, tag::oihw)}; }

  void bind(Context& ctx, const Bindings& b) override {
    input_.bind(ctx, b.inputs[0], needs_dinput_ ? b.dinputs[0] : dnnl::memory());
    w_ = static_cast<const float*>(b.params[0].get_data_handle());
    dw_ = static_cast<float*>(b.dparams[0].get_data_handle());
    const md dst({N_, O_ * outputs()}, dt::f32, tag::ab);
    const dnnl::memory output(dst, ctx.engine, b.output.get_data_handle());
    const dnnl::memory doutput(dst, ctx.engine, b.doutput.get_data_handle());
    dnnl::memory forward_big = big_.mem;
    if (forward_big_) {
      forward_big = dnnl::memory(forward_big_, ctx.engine, ctx.staging);
      to_forward_ = Reorder(big_.mem, forward_big);
    }
    forward_.args = {{DNNL_ARG_SRC, input_.value()}, {DNNL_ARG_WEIGHTS, forward_big}, {DNNL_ARG_DST, output}};
    forward_.bind_scratch(ctx);
    dbig_.mem = dnnl::memory(dbig_.desc, ctx.engine, ctx.staging);
    weights_.args = {{DNNL_ARG_SRC, input_.value()}, {DNNL_ARG_DIFF_DST, doutput}, {DNNL_ARG_DIFF_WEIGHTS, dbig_.mem}};
    weights_.bind_scratch(ctx);
    if (data_) {
      if (data_big_) to_data_ = Reorder(big_.mem, data_big_);
      data_.args = {{DNNL_ARG_DIFF_DST, doutput},
                    {DNNL_ARG_WEIGHTS, data_big_ ? data_big_ : big_.mem},
                    {DNNL_ARG_DIFF_SRC, input_.grad()}};
      data_.bind_scratch(ctx);
    }
  }

  void forward(Context& ctx) override {
    expand();
    if (to_forward_) to_forward_(ctx);
    if (to_data_) to_data_(ctx);
    input_.forward(ctx);
    forward_.run(ctx);
  }

  void backward(Context& ctx) override {
    weights_.run(ctx);
    ctx.stream.wait();
    fold();
    if (data_) {
      data_.run(ctx);
      input_.backward(ctx);
    }
  }

 private:
  // `big` (or its gradient) in a layout, and where its (row, c, q) elements lie in it.
  struct Expanded {
    md desc;
    dnnl::memory mem;
    std::vector<i64> row, channel, position;  // offsets: row (O x outputs), c, q (ih * IW + iw)
    Expanded() = default;
    Expanded(const md& d, i64 IW) : desc(d) {
      const Offsets at(d);
      TB_CHECK(at.blocked(), "conv2d_expanded: oneDNN chose a weights layout that is not blocked");
      row = at.dim[0], channel = at.dim[1];
      for (std::size_t ih = 0; ih < at.dim[2].size(); ++ih)
        for (i64 iw = 0; iw < IW; ++iw) position.push_back(at.dim[2][ih] + at.dim[3][std::size_t(iw)]);
    }
    // Whether each row's values lie in one run of their own: no blocks across rows.
    static bool rows_contiguous(const md& d) {
      const dnnl_memory_desc_t& m = d.data;
      if (m.format_kind != dnnl_blocked) return false;
      const dnnl_blocking_desc_t& b = m.format_desc.blocking;
      for (int t = 0; t < b.inner_nblks; ++t)
        if (b.inner_idxs[t] == 0) return false;
      return b.strides[0] * m.dims[0] == i64(d.get_size() / sizeof(float));
    }
  };

  i64 inputs() const { return IH_ * IW_; }
  i64 outputs() const { return OH_ * OW_; }

  // big[column(o, p)][c][q] = w[o][c][tap(p, q)], 0 without a tap, a row at a time.
  void expand() {
    const Expanded& e = big_;
    float* big = static_cast<float*>(e.mem.get_data_handle());
    const i64 P = outputs(), Q = inputs(), T = K_ * K_;
#pragma omp parallel for schedule(static)
    for (i64 o = 0; o < O_; ++o)
      for (i64 p = 0; p < P; ++p) {
        float* row = big + e.row[std::size_t(column_[std::size_t(o * P + p)])];
        const int* taps = taps_.data() + p * Q;
        for (i64 c = 0; c < C_; ++c) {
          const float* w = w_ + (o * C_ + c) * T;
          float* at = row + e.channel[std::size_t(c)];
          for (i64 q = 0; q < Q; ++q) at[e.position[std::size_t(q)]] = taps[q] < 0 ? 0.0f : w[taps[q]];
        }
      }
  }

  // Each tap's gradient: the sum of big's gradient over the (p, q) pairs that meet at it (0 for
  // a tap that only ever lies in the padding).
  void fold() {
    const float* dbig = static_cast<const float*>(dbig_.mem.get_data_handle());
    const i64 P = outputs(), Q = inputs(), T = K_ * K_;
#pragma omp parallel for schedule(static)
    for (i64 o = 0; o < O_; ++o) {
      std::fill(dw_ + o * C_ * T, dw_ + (o + 1) * C_ * T, 0.0f);
      for (i64 p = 0; p < P; ++p) {
        const float* row = dbig + dbig_.row[std::size_t(column_[std::size_t(o * P + p)])];
        const int* taps = taps_.data() + p * Q;
        for (i64 c = 0; c < C_; ++c) {
          float* dw = dw_ + (o * C_ + c) * T;
          const float* at = row + dbig_.channel[std::size_t(c)];
          for (i64 q = 0; q < Q; ++q)
            if (taps[q] >= 0) dw[taps[q]] += at[dbig_.position[std::size_t(q)]];
        }
      }
    }
  }

  const bool needs_dinput_;
  const i64 N_, C_, O_, K_, IH_, IW_, OH_, OW_;
  const md output_desc_;
  std::vector<int> taps_;    // [p][q]
  std::vector<i64> column_;  // [o][p]: the product's column, the output's offset within a sample
  InputAdapter input_;
  Step forward_, data_, weights_;
  Expanded big_, dbig_;    // the kernel laid out per output position; its gradient (staged)
  md forward_big_;         // the forward's layout of big where it is another (staged)
  dnnl::memory data_big_;  // the data gradient's, where it is another and not row by row
  Reorder to_forward_, to_data_;
  const float* w_ = nullptr;
  float* dw_ = nullptr;
};

}  // namespace

bool conv_is_expanded(const Conv2dSpec& s, const LayerInput& in, const Dims& out) {
  if (s.bias || in.shape.size() != 4 || out.size() != 4) return false;
  const i64 inputs = in.shape[2] * in.shape[3], outputs = out[2] * out[3];
  // Where it computes no more than the convolution's every tap would: at most K x K inputs.
  return inputs <= kMaxPositions && outputs <= kMaxPositions && inputs <= s.kernel * s.kernel;
}

std::unique_ptr<Layer> make_expanded_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<ExpandedConv2d>(ctx, s, in, out);
}

}  // namespace tb::cpu

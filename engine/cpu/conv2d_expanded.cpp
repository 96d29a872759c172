// A convolution over an input plane of at most four positions (ResNet-152's last two stages on
// 32x32 images: 2x2 and 1x1 planes), as one matrix product per pair of positions. Every output
// position p and input position q meet at one tap t of the kernel (or at none, where the tap
// would lie in the padding), so with the input, the output and the kernel each laid out as
// matrices per position or tap (X_q: N x C, Y_p: N x O, W_t: O x C),
//   Y_p = sum over q of X_q W_t(p,q)^T,   dX_q = sum over p of dY_p W_t(p,q),
//   dW_t = sum over the (p, q) that meet at t of dY_p^T X_q,
// each term one call of oneDNN's sgemm. oneDNN's direct convolutions run these shapes far from
// the machine's rate, most of all for the weight gradient, and compute every tap, padding
// included: a 3x3 kernel on a 2x2 plane uses 4 of its 9 taps at each output position. Measured
// on the 2-core AVX-512 VM (batch 128, forward + data gradient + weight gradient): 256 -> 256
// channels, 3x3 on 2x2, 7.9 ms as a convolution, 3.7 ms as oneDNN's inner product over the kernel
// laid out per output position; 512 -> 512, 3x3 on 1x1, 6.1 and 0.9 ms. That inner product
// reordered the 4-MB kernel every step, and under AVX2 ran its forward at a quarter of sgemm's
// rate (5.4 ms against 1.3); sgemm over that kernel still wrote it out and folded its gradient
// back every step (1.5 ms a layer). Per pair, the kernel is the parameter itself, kept tap-major
// (each tap's O x C matrix in one run). Where oneDNN's sgemm runs AVX-512 the input and output
// are channels last, each position's matrix N rows H x W x C apart, and nothing is reordered
// between these layers; a 1x1 kernel at stride 1 over such a plane (ResNet-152's 1024 -> 256
// and back at 2x2) is then one product over every position. Elsewhere the input, the output and
// their gradients (0.5 MB each) are reordered to and from one matrix per position.
#include "engine/cpu/layer.hpp"

#include <algorithm>
#include <vector>

namespace tb::cpu {
namespace {

// At most this many input and output positions.
constexpr i64 kMaxPositions = 4;

// Where oneDNN's sgemm runs AVX-512, the layer keeps its input and output channels last and
// runs 1x1 kernels at stride 1 too; elsewhere one matrix per position, staged, and 1x1 kernels
// on oneDNN's convolution. Measured in ResNet-152 32x32's step (batch 128) on the 2-core VM:
// at AVX-512, 1024 -> 256 and back over 2x2 took 3.9 ms each as three sgemm calls, 5.3 and 4.8
// as oneDNN's convolution (ONEDNN_VERBOSE), and channels last cost the 3x3 kernels nothing.
// Capped at AVX2 the same calls took 5.3 ms (the weight gradient's transposed-A products at
// 100 GFLOP/s), oneDNN's convolution 4.0-4.1 standalone, and over rows 4 x C apart the 3x3
// kernel's weight gradient took 3.5 ms: that step was 15-18% slower in 3 interleaved rounds.
bool channels_last_runs() {
  return (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;  // a bit mask
}

// (N, C, H, W) as the layer keeps it: channels last, (N, H, W, C); or one N x C matrix per
// position, row-major, the positions outermost.
md position_rows(const Dims& d, bool channels_last) {
  const i64 N = d[0], C = d[1], W = d[3];
  if (channels_last) return md(to_dnnl(d), dt::f32, tag::nhwc);
  return md(to_dnnl(d), dt::f32, dnnl::memory::dims{C, 1, W * N * C, N * C});
}

// In a tensor laid out by position_rows: where position q's N x C matrix starts (q x the
// width's stride, the height's being W times it in both layouts), and how far apart its rows
// (samples) are.
struct Rows {
  i64 position, stride;
};
Rows rows_of(const md& d) {
  const auto& strides = d.data.format_desc.blocking.strides;
  return Rows{strides[3], strides[0]};
}

// A 1x1 kernel at stride 1 without padding pairs each position with itself only.
bool pointwise(const Conv2dSpec& s) { return s.kernel == 1 && s.stride == 1 && s.padding == 0; }

void sgemm(char ta, char tb, i64 m, i64 n, i64 k, const float* a, i64 lda, const float* b, i64 ldb, float beta,
           float* c, i64 ldc) {
  const dnnl_status_t status = dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  TB_CHECK(status == dnnl_success, "conv2d_expanded: dnnl_sgemm failed (status {})", int(status));
}

class ExpandedConv2d final : public Layer {
 public:
  ExpandedConv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out)
      : needs_dinput_(in[0].needs_grad),
        N_(in[0].shape[0]),
        C_(s.in_channels),
        O_(s.out_channels),
        K_(s.kernel),
        Q_(in[0].shape[2] * in[0].shape[3]),
        P_(out[2] * out[3]),
        channels_last_(channels_last_runs()),
        // Each tap's matrix kept C x O where C > O at AVX-512: the weight gradient is then
        // X_q^T dY_p with the larger of C and O as its rows, which oneDNN's sgemm ran at about
        // 200 GFLOP/s there, against 130-150 with the smaller (1024 -> 256 over 2x2).
        transposed_(channels_last_ && C_ > O_),
        pointwise_(pointwise(s)),
        x_rows_(rows_of(position_rows(in[0].shape, channels_last_))),
        y_rows_(rows_of(position_rows(out, channels_last_))),
        out_(out),
        // Channels last, which batch normalization runs on its own kernels and the next
        // small-plane convolution reads as it is; else the layout oneDNN's convolution would
        // give, so the layers after it read what they expect (batch normalization's AVX2 kernels
        // take 8-channel blocks only: given 16, it ran oneDNN's reference loop, 27% of
        // ResNet-152 32x32's step under an AVX2 cap).
        output_desc_(channels_last_ ? position_rows(out, true) : convolution_output_desc(ctx, s, in[0].shape, out)) {
    // Each (output, input) pair's tap, -1 where it would lie in the padding.
    const i64 IW = in[0].shape[3], OW = out[3];
    for (i64 p = 0; p < P_; ++p)
      for (i64 q = 0; q < Q_; ++q) {
        const i64 kh = q / IW - p / OW * s.stride + s.padding, kw = q % IW - p % OW * s.stride + s.padding;
        taps_.push_back(kh >= 0 && kh < K_ && kw >= 0 && kw < K_ ? kh * K_ + kw : -1);
      }
    input_ = InputAdapter(ctx, in[0].desc, position_rows(in[0].shape, channels_last_));
    tap_written_.resize(std::size_t(K_ * K_));
    // One matrix per position: the output (forward) and its gradient (backward), staged.
    if (!channels_last_) ctx.staging_bytes = std::max(ctx.staging_bytes, std::size_t(N_ * O_ * P_) * sizeof(float));
  }

  md output_desc() const override { return output_desc_; }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }
  // Tap-major, each tap's O x C matrix (or C x O, transposed_) in one run.
  std::vector<md> param_descs() const override {
    const i64 o_stride = transposed_ ? 1 : C_, c_stride = transposed_ ? O_ : 1;
    return {md({O_, C_, K_, K_}, dt::f32, dnnl::memory::dims{o_stride, c_stride, K_ * O_ * C_, O_ * C_})};
  }

  void bind(Context& ctx, const Bindings& b) override {
    input_.bind(ctx, b.inputs[0], needs_dinput_ ? b.dinputs[0] : dnnl::memory());
    w_ = static_cast<const float*>(b.params[0].get_data_handle());
    dw_ = static_cast<float*>(b.dparams[0].get_data_handle());
    if (channels_last_) {
      y_ = static_cast<float*>(b.output.get_data_handle());
      dy_ = static_cast<const float*>(b.doutput.get_data_handle());
      return;
    }
    const dnnl::memory staged(position_rows(out_, false), ctx.engine, ctx.staging);
    to_output_ = Reorder(staged, b.output);
    from_doutput_ = Reorder(b.doutput, staged);
    y_ = static_cast<float*>(ctx.staging);
    dy_ = y_;
  }

  void forward(Context& ctx) override {
    input_.forward(ctx);
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    if (pointwise_) {
      product(x, C_, 0, y_, O_, N_ * P_, 0.0f);
    } else {
      for (i64 p = 0; p < P_; ++p) {
        float* y = y_ + p * y_rows_.position;
        sum_over_taps(
            Q_, [&](i64 q) { return tap(p, q); },
            [&](i64 q, i64 t, float beta) {
              product(x + q * x_rows_.position, x_rows_.stride, t, y, y_rows_.stride, N_, beta);
            },
            [&] { zero_rows(y, y_rows_.stride, O_); });
      }
    }
    to_output_(ctx);
  }

  void backward(Context& ctx) override {
    from_doutput_(ctx);
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    std::vector<char>& written = tap_written_;
    std::fill(written.begin(), written.end(), 0);
    if (pointwise_) {
      weight_grad(dy_, O_, x, C_, N_ * P_, 0, 0.0f);
      written[0] = 1;
    } else {
      for (i64 p = 0; p < P_; ++p)
        for (i64 q = 0; q < Q_; ++q)
          if (const i64 t = tap(p, q); t >= 0) {
            weight_grad(dy_ + p * y_rows_.position, y_rows_.stride, x + q * x_rows_.position, x_rows_.stride, N_, t,
                        written[std::size_t(t)] ? 1.0f : 0.0f);
            written[std::size_t(t)] = 1;
          }
    }
    for (i64 t = 0; t < K_ * K_; ++t)  // taps that only ever lie in the padding
      if (!written[std::size_t(t)]) std::fill(dw_ + t * O_ * C_, dw_ + (t + 1) * O_ * C_, 0.0f);
    if (!needs_dinput_) return;
    float* dx = static_cast<float*>(input_.grad().get_data_handle());
    if (pointwise_) {
      data_grad(dy_, O_, 0, dx, C_, N_ * P_, 0.0f);
    } else {
      for (i64 q = 0; q < Q_; ++q) {
        float* dxq = dx + q * x_rows_.position;
        sum_over_taps(
            P_, [&](i64 p) { return tap(p, q); },
            [&](i64 p, i64 t, float beta) {
              data_grad(dy_ + p * y_rows_.position, y_rows_.stride, t, dxq, x_rows_.stride, N_, beta);
            },
            [&] { zero_rows(dxq, x_rows_.stride, C_); });
      }
    }
    input_.backward(ctx);
  }

 private:
  i64 tap(i64 p, i64 q) const { return taps_[std::size_t(p * Q_ + q)]; }
  // One position's sum over the `others` positions it meets at a tap (tap_of(other), -1 in the
  // padding): term(other, tap, beta), beta 0 for the first term and 1 after; zero() where no
  // tap reaches it.
  template <class TapOf, class Term, class Zero>
  static void sum_over_taps(i64 others, const TapOf& tap_of, const Term& term, const Zero& zero) {
    float beta = 0.0f;
    for (i64 o = 0; o < others; ++o)
      if (const i64 t = tap_of(o); t >= 0) {
        term(o, t, beta);
        beta = 1.0f;
      }
    if (beta == 0.0f) zero();
  }
  // One position's N rows of `width` values, `stride` apart, set to zero.
  void zero_rows(float* first, i64 stride, i64 width) const {
    for (i64 n = 0; n < N_; ++n) std::fill_n(first + n * stride, width, 0.0f);
  }
  const float* tap_weights(i64 t) const { return w_ + t * O_ * C_; }

  // y (rows x O, rows ldy apart) (+)= x (rows x C) W_t^T.
  void product(const float* x, i64 ldx, i64 t, float* y, i64 ldy, i64 rows, float beta) const {
    if (transposed_)
      sgemm('N', 'N', rows, O_, C_, x, ldx, tap_weights(t), O_, beta, y, ldy);
    else
      sgemm('N', 'T', rows, O_, C_, x, ldx, tap_weights(t), C_, beta, y, ldy);
  }
  // dx (rows x C) (+)= dy (rows x O) W_t.
  void data_grad(const float* dy, i64 ldy, i64 t, float* dx, i64 ldx, i64 rows, float beta) const {
    if (transposed_)
      sgemm('N', 'T', rows, C_, O_, dy, ldy, tap_weights(t), O_, beta, dx, ldx);
    else
      sgemm('N', 'N', rows, C_, O_, dy, ldy, tap_weights(t), C_, beta, dx, ldx);
  }
  // dW_t (+)= dy^T x (O x C), or x^T dy where the taps are kept C x O.
  void weight_grad(const float* dy, i64 ldy, const float* x, i64 ldx, i64 rows, i64 t, float beta) const {
    float* dw = dw_ + t * O_ * C_;
    if (transposed_)
      sgemm('T', 'N', C_, O_, rows, x, ldx, dy, ldy, beta, dw, O_);
    else
      sgemm('T', 'N', O_, C_, rows, dy, ldy, x, ldx, beta, dw, C_);
  }

  const bool needs_dinput_;
  const i64 N_, C_, O_, K_, Q_, P_;  // Q_, P_: input and output positions
  const bool channels_last_;         // else one matrix per position, the output staged
  const bool transposed_;            // each tap's matrix kept C x O
  const bool pointwise_;             // one product over every position
  const Rows x_rows_, y_rows_;       // where each position's rows of the input and output lie
  const Dims out_;
  const md output_desc_;
  std::vector<i64> taps_;             // [p][q]: the tap where they meet, -1 in the padding
  std::vector<char> tap_written_;     // backward: whether a tap's gradient has its first term
  InputAdapter input_;                // the input as the layer keeps it
  Reorder to_output_, from_doutput_;  // from and to the staged output where not channels last
  const float* w_ = nullptr;
  float* dw_ = nullptr;
  float* y_ = nullptr;         // the output, or where it is staged
  const float* dy_ = nullptr;  // its gradient, likewise
};

}  // namespace

bool conv_is_expanded(const Conv2dSpec& s, const LayerInput& in, const Dims& out) {
  if (s.bias || in.shape.size() != 4 || out.size() != 4) return false;
  const i64 inputs = in.shape[2] * in.shape[3], outputs = out[2] * out[3];
  if (inputs > kMaxPositions || outputs > kMaxPositions) return false;
  // Where it computes no more than the convolution's every tap would: at most K x K inputs, or
  // (channels last) a 1x1 kernel without padding, each output position one product with the
  // input it reads (ResNet-152's stride-2 projection from 2x2 to 1x1 at 32x32, 1024 -> 2048: on
  // oneDNN its weight gradient took 10.7 ms, 50 GFLOP/s, its input gradient 6.8 and forward 5.9).
  return inputs <= s.kernel * s.kernel || (s.kernel == 1 && s.padding == 0 && channels_last_runs());
}

std::unique_ptr<Layer> make_expanded_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<ExpandedConv2d>(ctx, s, in, out);
}

}  // namespace tb::cpu

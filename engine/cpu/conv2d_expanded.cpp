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
// (each tap's O x C matrix in one run), and only the input, the output and their gradients
// (0.5 MB each) are reordered, between the producer's layout and one matrix per position.
#include "engine/cpu/layer.hpp"

#include <algorithm>
#include <vector>

namespace tb::cpu {
namespace {

// At most this many input and output positions.
constexpr i64 kMaxPositions = 4;

// (N, C, H, W) with the positions outermost, then the samples, then the channels: one N x C
// matrix per position, row-major.
md position_major(const Dims& d) {
  const i64 N = d[0], C = d[1], W = d[3];
  return md(to_dnnl(d), dt::f32, dnnl::memory::dims{C, 1, W * N * C, N * C});
}

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
        out_(out),
        // The layout oneDNN's convolution would give, so the layers after it read what they
        // expect (batch normalization's AVX2 kernels take 8-channel blocks only: given 16, it
        // ran oneDNN's reference loop, 27% of ResNet-152 32x32's step under an AVX2 cap).
        output_desc_(convolution_output_desc(ctx, s, in[0].shape, out)) {
    // Each (output, input) pair's tap, -1 where it would lie in the padding.
    const i64 IW = in[0].shape[3], OW = out[3];
    for (i64 p = 0; p < P_; ++p)
      for (i64 q = 0; q < Q_; ++q) {
        const i64 kh = q / IW - p / OW * s.stride + s.padding, kw = q % IW - p % OW * s.stride + s.padding;
        taps_.push_back(kh >= 0 && kh < K_ && kw >= 0 && kw < K_ ? kh * K_ + kw : -1);
      }
    input_ = InputAdapter(ctx, in[0].desc, position_major(in[0].shape));
    tap_written_.resize(std::size_t(K_ * K_));
    // The output (forward) and its gradient (backward) one matrix per position, staged.
    ctx.staging_bytes = std::max(ctx.staging_bytes, std::size_t(N_ * O_ * P_) * sizeof(float));
  }

  md output_desc() const override { return output_desc_; }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }
  // Tap-major: (kh, kw, o, c), each tap's O x C matrix in one run.
  std::vector<md> param_descs() const override {
    return {md({O_, C_, K_, K_}, dt::f32, dnnl::memory::dims{C_, 1, K_ * O_ * C_, O_ * C_})};
  }

  void bind(Context& ctx, const Bindings& b) override {
    input_.bind(ctx, b.inputs[0], needs_dinput_ ? b.dinputs[0] : dnnl::memory());
    w_ = static_cast<const float*>(b.params[0].get_data_handle());
    dw_ = static_cast<float*>(b.dparams[0].get_data_handle());
    const dnnl::memory staged(position_major(out_), ctx.engine, ctx.staging);
    to_output_ = Reorder(staged, b.output);
    from_doutput_ = Reorder(b.doutput, staged);
    staged_ = static_cast<float*>(ctx.staging);
  }

  void forward(Context& ctx) override {
    input_.forward(ctx);
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    for (i64 p = 0; p < P_; ++p) {
      float* y = staged_ + p * N_ * O_;
      float beta = 0.0f;
      for (i64 q = 0; q < Q_; ++q)
        if (const i64 t = tap(p, q); t >= 0) {
          sgemm('N', 'T', N_, O_, C_, x + q * N_ * C_, C_, w_ + t * O_ * C_, C_, beta, y, O_);
          beta = 1.0f;
        }
      if (beta == 0.0f) std::fill(y, y + N_ * O_, 0.0f);  // no tap reaches this position
    }
    to_output_(ctx);
  }

  void backward(Context& ctx) override {
    from_doutput_(ctx);
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    const float* dy = staged_;
    std::vector<char>& written = tap_written_;
    std::fill(written.begin(), written.end(), 0);
    for (i64 p = 0; p < P_; ++p)
      for (i64 q = 0; q < Q_; ++q)
        if (const i64 t = tap(p, q); t >= 0) {
          sgemm('T', 'N', O_, C_, N_, dy + p * N_ * O_, O_, x + q * N_ * C_, C_, written[std::size_t(t)] ? 1.0f : 0.0f,
                dw_ + t * O_ * C_, C_);
          written[std::size_t(t)] = 1;
        }
    for (i64 t = 0; t < K_ * K_; ++t)  // taps that only ever lie in the padding
      if (!written[std::size_t(t)]) std::fill(dw_ + t * O_ * C_, dw_ + (t + 1) * O_ * C_, 0.0f);
    if (!needs_dinput_) return;
    float* dx = static_cast<float*>(input_.grad().get_data_handle());
    for (i64 q = 0; q < Q_; ++q) {
      float beta = 0.0f;
      for (i64 p = 0; p < P_; ++p)
        if (const i64 t = tap(p, q); t >= 0) {
          sgemm('N', 'N', N_, C_, O_, dy + p * N_ * O_, O_, w_ + t * O_ * C_, C_, beta, dx + q * N_ * C_, C_);
          beta = 1.0f;
        }
      if (beta == 0.0f) std::fill(dx + q * N_ * C_, dx + (q + 1) * N_ * C_, 0.0f);
    }
    input_.backward(ctx);
  }

 private:
  i64 tap(i64 p, i64 q) const { return taps_[std::size_t(p * Q_ + q)]; }

  const bool needs_dinput_;
  const i64 N_, C_, O_, K_, Q_, P_;  // Q_, P_: input and output positions
  const Dims out_;
  const md output_desc_;
  std::vector<i64> taps_;          // [p][q]: the tap where they meet, -1 in the padding
  std::vector<char> tap_written_;  // backward: whether a tap's gradient has its first term
  InputAdapter input_;             // the input one matrix per position
  Reorder to_output_, from_doutput_;
  const float* w_ = nullptr;
  float* dw_ = nullptr;
  float* staged_ = nullptr;  // the output (forward) or its gradient (backward), one matrix per position
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

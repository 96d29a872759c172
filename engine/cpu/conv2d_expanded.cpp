// A convolution over an input plane of at most four positions (ResNet-152's last two stages on
// 32x32 images: 2x2 and 1x1 planes), as one matrix product. Every output position p and input
// position q meet at one tap of the kernel (or at none, where the tap would lie in the padding),
// so the convolution is dst[n][o][p] = sum over c, q of src[n][c][q] * big[o][p][c][q], with
// big[o][p][c][q] = w[o][c][tap(p, q)], 0 where there is no tap: a matrix product over the
// input's C x positions values. oneDNN's direct convolutions run these shapes far from the
// machine's rate, most of all for the weight gradient, and compute every tap, padding included:
// a 3x3 kernel on a 2x2 plane uses 4 of its 9 taps at each output position. Measured on the
// 2-core AVX-512 VM (batch 128, forward + data gradient + weight gradient): 256 -> 256 channels,
// 3x3 on 2x2, 7.9 ms as a convolution, 3.7 ms as oneDNN's inner product; 512 -> 512, 3x3 on 1x1,
// 6.1 and 0.9 ms. The layer lays the kernel out as `big` before each forward and adds big's
// gradient back into the kernel's taps. big's rows and columns are in the order of the output's
// and the input's layouts within a sample, so the three products (oneDNN's sgemm) read the
// input and write the output where they lie: nothing is reordered. The inner product primitive
// this replaced reordered big into its own layout every step (1.5 ms of 4 MB a layer, 36 layers)
// and, under AVX2, ran its forward at a quarter of the machine's rate (5.4 ms against sgemm's 1.3).
#include "engine/cpu/layer.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

namespace tb::cpu {
namespace {

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

// Whether each sample's values are one run of their own, in a blocked layout without padding:
// the tensor is then a matrix of a sample per row, its columns in the layout's order.
bool sample_rows(const md& d) {
  const dnnl_memory_desc_t& m = d.data;
  if (m.format_kind != dnnl_blocked || m.ndims != 4) return false;
  const dnnl_blocking_desc_t& b = m.format_desc.blocking;
  for (int t = 0; t < b.inner_nblks; ++t)
    if (b.inner_idxs[t] == 0) return false;
  const i64 floats = m.dims[0] * m.dims[1] * m.dims[2] * m.dims[3];
  return i64(d.get_size() / sizeof(float)) == floats && b.strides[0] * m.dims[0] == floats;
}

// Y = A^T for a row-major A of `rows` x `cols`, in tiles that stay in the cache.
void transpose(const float* a, i64 rows, i64 cols, float* y) {
  constexpr i64 kTile = 32;
#pragma omp parallel for collapse(2) schedule(static)
  for (i64 r0 = 0; r0 < rows; r0 += kTile)
    for (i64 c0 = 0; c0 < cols; c0 += kTile)
      for (i64 c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (i64 r = r0; r < std::min(rows, r0 + kTile); ++r) y[c * rows + r] = a[r * cols + c];
}

void sgemm(char ta, char tb, i64 m, i64 n, i64 k, const float* a, i64 lda, const float* b, i64 ldb, float* c, i64 ldc) {
  const dnnl_status_t status = dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  TB_CHECK(status == dnnl_success, "conv2d_expanded: dnnl_sgemm failed (status {})", int(status));
}

// The output's layout: oneDNN's convolution's where that is a sample per row, else plain.
md output_layout(Context& ctx, const Conv2dSpec& s, const Dims& in, const Dims& out) {
  const md conv = convolution_output_desc(ctx, s, in, out);
  return sample_rows(conv) ? conv : plain_desc(to_dnnl(out));
}

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
        // The layout oneDNN's convolution would give, so the layers after it read what they
        // expect (batch normalization's AVX2 kernels take 8-channel blocks only: given 16, it
        // ran oneDNN's reference loop, 27% of ResNet-152 32x32's step under an AVX2 cap).
        output_desc_(output_layout(ctx, s, in[0].shape, out)) {
    // Each (output, input) pair's tap, -1 where it would lie in the padding.
    for (i64 oh = 0; oh < OH_; ++oh)
      for (i64 ow = 0; ow < OW_; ++ow)
        for (i64 ih = 0; ih < IH_; ++ih)
          for (i64 iw = 0; iw < IW_; ++iw) {
            const i64 kh = ih - oh * s.stride + s.padding, kw = iw - ow * s.stride + s.padding;
            taps_.push_back(kh >= 0 && kh < K_ && kw >= 0 && kw < K_ ? int(kh * K_ + kw) : -1);
          }
    // big's row of output channel o at output position p: where the output's layout puts it
    // within a sample. Its column of input channel c at input position q: where the input's does.
    const Offsets y(output_desc_);
    for (i64 o = 0; o < O_; ++o)
      for (i64 p = 0; p < outputs(); ++p) row_.push_back(y.dim[1][o] + y.dim[2][p / OW_] + y.dim[3][p % OW_]);
    // The input as its producer lays it out where that is a sample per row, else plain.
    const md src = sample_rows(in[0].desc) ? in[0].desc : plain_desc(to_dnnl(in[0].shape));
    input_ = InputAdapter(ctx, in[0].desc, src);
    const Offsets x(src);
    channel_ = x.dim[1];
    for (i64 ih = 0; ih < IH_; ++ih)
      for (i64 iw = 0; iw < IW_; ++iw) position_.push_back(x.dim[2][std::size_t(ih)] + x.dim[3][std::size_t(iw)]);
    big_.assign(std::size_t(rows() * cols()), 0.0f);
    ctx.staging_bytes = std::max(ctx.staging_bytes, std::size_t(rows() * std::max(cols(), N_)) * sizeof(float));
  }

  md output_desc() const override { return output_desc_; }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }
  std::vector<md> param_descs() const override { return {md({O_, C_, K_, K_}, dt::f32, tag::oihw)}; }

  void bind(Context& ctx, const Bindings& b) override {
    input_.bind(ctx, b.inputs[0], needs_dinput_ ? b.dinputs[0] : dnnl::memory());
    w_ = static_cast<const float*>(b.params[0].get_data_handle());
    dw_ = static_cast<float*>(b.dparams[0].get_data_handle());
    y_ = static_cast<float*>(b.output.get_data_handle());
    dy_ = static_cast<const float*>(b.doutput.get_data_handle());
    staging_ = static_cast<float*>(ctx.staging);
  }

  // Y^T = big . X^T, then transposed into the output. oneDNN 2.6's sgemm runs this form at
  // the machine's rate under both AVX-512 and AVX2, where Y = X . big^T took twice as long
  // under AVX-512 (batch 128, 1024 x 1024 on the 2-core VM: 1.49 ms against 2.55).
  void forward(Context& ctx) override {
    expand();
    input_.forward(ctx);
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    sgemm('N', 'T', rows(), N_, cols(), big_.data(), cols(), x, cols(), staging_, N_);
    transpose(staging_, rows(), N_, y_);
  }

  // big's gradient dY^T . X (staged), folded into the kernel's taps; the input's dY . big.
  void backward(Context& ctx) override {
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    sgemm('T', 'N', rows(), cols(), N_, dy_, rows(), x, cols(), staging_, cols());
    fold();
    if (!needs_dinput_) return;
    float* dx = static_cast<float*>(input_.grad().get_data_handle());
    sgemm('N', 'N', N_, cols(), rows(), dy_, rows(), big_.data(), cols(), dx, cols());
    input_.backward(ctx);
  }

 private:
  i64 inputs() const { return IH_ * IW_; }
  i64 outputs() const { return OH_ * OW_; }
  i64 rows() const { return O_ * outputs(); }  // big's: the output's values in a sample
  i64 cols() const { return C_ * inputs(); }   // the input's

  // big[row(o, p)][column(c, q)] = w[o][c][tap(p, q)], 0 without a tap.
  void expand() {
    float* big = big_.data();
    const i64 P = outputs(), Q = inputs(), T = K_ * K_;
#pragma omp parallel for schedule(static)
    for (i64 o = 0; o < O_; ++o)
      for (i64 p = 0; p < P; ++p) {
        float* row = big + row_[std::size_t(o * P + p)] * cols();
        const int* taps = taps_.data() + p * Q;
        for (i64 c = 0; c < C_; ++c) {
          const float* w = w_ + (o * C_ + c) * T;
          float* at = row + channel_[std::size_t(c)];
          for (i64 q = 0; q < Q; ++q) at[position_[std::size_t(q)]] = taps[q] < 0 ? 0.0f : w[taps[q]];
        }
      }
  }

  // Each tap's gradient: the sum of big's gradient over the (p, q) pairs that meet at it (0 for
  // a tap that only ever lies in the padding).
  void fold() {
    const float* dbig = staging_;
    const i64 P = outputs(), Q = inputs(), T = K_ * K_;
#pragma omp parallel for schedule(static)
    for (i64 o = 0; o < O_; ++o) {
      std::fill(dw_ + o * C_ * T, dw_ + (o + 1) * C_ * T, 0.0f);
      for (i64 p = 0; p < P; ++p) {
        const float* row = dbig + row_[std::size_t(o * P + p)] * cols();
        const int* taps = taps_.data() + p * Q;
        for (i64 c = 0; c < C_; ++c) {
          float* dw = dw_ + (o * C_ + c) * T;
          const float* at = row + channel_[std::size_t(c)];
          for (i64 q = 0; q < Q; ++q)
            if (taps[q] >= 0) dw[taps[q]] += at[position_[std::size_t(q)]];
        }
      }
    }
  }

  const bool needs_dinput_;
  const i64 N_, C_, O_, K_, IH_, IW_, OH_, OW_;
  const md output_desc_;
  std::vector<int> taps_;                // [p][q]
  std::vector<i64> row_;                 // [o][p]: big's row, the output's offset within a sample
  std::vector<i64> channel_, position_;  // [c], [q]: the input's offsets within a sample
  InputAdapter input_;
  std::vector<float> big_;  // the kernel laid out per output position
  const float* w_ = nullptr;
  float* dw_ = nullptr;
  float* y_ = nullptr;
  const float* dy_ = nullptr;
  float* staging_ = nullptr;  // Y^T in forward, big's gradient in backward
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

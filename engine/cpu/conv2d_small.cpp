// A convolution on the model's input with few input channels (an image's three colours), as
// trainbench's own direct loops over plain NCHW. oneDNN blocks channels by 8 or 16, so a layer
// with 3 input and 6 output channels (LeNet-5's first) computes in a padded layout, and its
// kernels for such shapes run at a fraction of the machine's rate: on this 2-core VM (sgemm 211
// GFLOP/s), LeNet-5's first convolution took oneDNN 1.3-1.7 ms forward and 1.3 ms for the weight
// gradient (batch 100, 70.6 MFLOP each; ONEDNN_VERBOSE and a timing loop); these loops take
// 0.45-0.5 ms (about 150 GFLOP/s) and 0.6-0.8 ms.
// Here the vector lanes run along the output row instead, 16 outputs at a time, which needs no
// channel padding at all. The layer reads the model input, so no input gradient is computed.
//
// Forward: each task is one output row of one sample; a tile of up to 6 output channels by two
// 16-wide pieces of the row (12 accumulators) sums C x K x K taps, each tap one load shared by
// the 6 channels. A row whose width is not a multiple of 16 ends with a piece shifted left to
// end at the row's end, overlapping the one before: the overlap is computed twice, identically.
// Weight gradient: each thread takes a share of the batch and sums, per (input channel, kernel
// row), a tile of output channels by the K kernel columns as vectors along the row (the
// overlapped lanes masked out), then the threads' partial sums are added.
#include "engine/cpu/layer.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/cpu/simd.hpp"

namespace tb::cpu {
namespace {

using namespace simd;

constexpr i64 kForwardChannels = 6;  // output channels per forward tile (x 2 pieces: 12 registers)
// Weight-gradient tiles: 6 output channels x 3 kernel columns accumulators, with the 6 channels'
// output gradients: 24 of the 32 vector registers.
constexpr i64 kWeightChannels = 6, kColumns = 3;

class SmallConv2d final : public Layer {
 public:
  SmallConv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out)
      : N_(in[0].shape[0]),
        C_(s.in_channels),
        O_(s.out_channels),
        K_(s.kernel),
        P_(s.padding),
        H_(in[0].shape[2]),
        W_(in[0].shape[3]),
        OH_(out[2]),
        OW_(out[3]),
        bias_(s.bias),
        input_(ctx, in[0].desc, plain_desc(to_dnnl(in[0].shape))) {
    // Start of each 16-wide piece of an output row, the last one ending at the row's end, and the
    // lanes of each that an earlier piece already covers (masked out of the weight gradient).
    for (i64 c = 0; c * kLanes < OW_; ++c) {
      const i64 start = std::min(c * kLanes, OW_ - kLanes);
      pieces_.push_back(start);
      vf mask;
      for (int l = 0; l < kLanes; ++l) mask[l] = start + l >= c * kLanes ? 1.0f : 0.0f;
      masks_.push_back(mask);
    }
    overlap_ = OW_ % kLanes != 0;
    const i64 padded = N_ * C_ * (H_ + 2 * P_) * (W_ + 2 * P_);
    if (P_ > 0) padded_.assign(std::size_t(padded), 0.0f);
    const i64 G = kWeightChannels;
    zero_plane_.assign(std::size_t(OH_ * OW_), 0.0f);
    zero_weights_.assign(std::size_t(C_ * K_ * K_), 0.0f);
    partial_.resize(std::size_t(omp_get_max_threads()));
    for (auto& p : partial_) p.assign(std::size_t(((O_ + G - 1) / G * G) * C_ * K_ * K_ + O_), vf{});
  }

  md output_desc() const override { return plain_desc({N_, O_, OH_, OW_}); }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }
  std::vector<md> param_descs() const override {
    std::vector<md> d{md({O_, C_, K_, K_}, dt::f32, tag::oihw)};
    if (bias_) d.push_back(md({O_}, dt::f32, tag::a));
    return d;
  }

  void bind(Context& ctx, const Bindings& b) override {
    input_.bind(ctx, b.inputs[0], dnnl::memory());
    y_ = static_cast<float*>(b.output.get_data_handle());
    dy_ = static_cast<const float*>(b.doutput.get_data_handle());
    w_ = static_cast<const float*>(b.params[0].get_data_handle());
    dw_ = static_cast<float*>(b.dparams[0].get_data_handle());
    if (bias_) {
      b_ = static_cast<const float*>(b.params[1].get_data_handle());
      db_ = static_cast<float*>(b.dparams[1].get_data_handle());
    }
  }

  void forward(Context& ctx) override {
    input_.forward(ctx);
    ctx.stream.wait();
    const float* x = pad_source();
    const i64 HP = H_ + 2 * P_, WP = W_ + 2 * P_;
    const i64 pieces = i64(pieces_.size());
#pragma omp parallel for schedule(static)
    for (i64 task = 0; task < N_ * OH_; ++task) {
      const i64 n = task / OH_, oh = task % OH_;
      const float* xn = x + n * C_ * HP * WP + oh * WP;
      float* yn = y_ + n * O_ * OH_ * OW_ + oh * OW_;
      for (i64 o0 = 0; o0 < O_; o0 += kForwardChannels) {
        const i64 oc = std::min(kForwardChannels, O_ - o0);
        for (i64 p = 0; p < pieces; p += 2)
          forward_tile(xn, yn, o0, oc, pieces_[p], pieces_[std::min(p + 1, pieces - 1)]);
      }
    }
  }

  void backward(Context&) override {
    const float* x = P_ > 0 ? padded_.data() : static_cast<const float*>(input_.value().get_data_handle());
    const i64 HP = H_ + 2 * P_, WP = W_ + 2 * P_, G = kWeightChannels;
    const i64 groups = (O_ + G - 1) / G, taps = C_ * K_ * K_;
#pragma omp parallel num_threads(int(partial_.size()))
    {
      const int t = omp_get_thread_num(), threads = omp_get_num_threads();
      std::vector<vf>& acc = partial_[std::size_t(t)];
      std::fill(acc.begin(), acc.end(), vf{});
      for (i64 n = N_ * t / threads; n < N_ * (t + 1) / threads; ++n) {
        const float* xn = x + n * C_ * HP * WP;
        const float* dyn = dy_ + n * O_ * OH_ * OW_;
        for (i64 g = 0; g < groups; ++g)
          for (i64 c = 0; c < C_; ++c)
            for (i64 kh = 0; kh < K_; ++kh)
              weight_tile(xn + (c * HP + kh) * WP, WP, dyn, g * G, std::min(G, O_ - g * G),
                          &acc[std::size_t(g * G * taps + (c * K_ + kh) * K_)], taps);
        if (bias_)
          for (i64 o = 0; o < O_; ++o) {
            vf s{};
            for (i64 oh = 0; oh < OH_; ++oh)
              for (std::size_t p = 0; p < pieces_.size(); ++p)
                s += load(dyn + (o * OH_ + oh) * OW_ + pieces_[p]) * masks_[p];
            acc[std::size_t(groups * G * taps + o)] += s;
          }
      }
#pragma omp barrier
#pragma omp for schedule(static)
      for (i64 k = 0; k < O_ * taps + (bias_ ? O_ : 0); ++k) {
        const std::size_t at = std::size_t(k < O_ * taps ? k : groups * G * taps + (k - O_ * taps));
        vf s{};
        for (const auto& part : partial_) s += part[at];
        (k < O_ * taps ? dw_[k] : db_[k - O_ * taps]) = sum_lanes(s);
      }
    }
  }

 private:
  // The input, copied inside its zero padding where the layer pads (the borders were zeroed at
  // construction; backward reads the same copy).
  const float* pad_source() {
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    if (P_ == 0) return x;
    float* xp = padded_.data();
    const i64 HP = H_ + 2 * P_, WP = W_ + 2 * P_;
#pragma omp parallel for schedule(static)
    for (i64 plane = 0; plane < N_ * C_; ++plane)
      for (i64 h = 0; h < H_; ++h)
        std::memcpy(xp + (plane * HP + h + P_) * WP + P_, x + (plane * H_ + h) * W_, sizeof(float) * W_);
    return xp;
  }

  // Output channels o0 .. o0 + oc (oc <= 6) of one row, at the pieces starting at a and b (a == b
  // for a row's last, unpaired piece); x: the sample's input at the row's first input row.
  void forward_tile(const float* x, float* y, i64 o0, i64 oc, i64 a, i64 b) const {
    const i64 HP = H_ + 2 * P_, WP = W_ + 2 * P_, taps = C_ * K_ * K_;
    const float* w[kForwardChannels];
    vf acc[kForwardChannels][2];
    for (i64 o = 0; o < kForwardChannels; ++o) {
      w[o] = o < oc ? w_ + (o0 + o) * taps : zero_weights_.data();
      acc[o][0] = acc[o][1] = splat(o < oc && bias_ ? b_[o0 + o] : 0.0f);
    }
    for (i64 c = 0; c < C_; ++c)
      for (i64 kh = 0; kh < K_; ++kh) {
        const float* row = x + (c * HP + kh) * WP;
        const i64 tap = (c * K_ + kh) * K_;
        for (i64 kw = 0; kw < K_; ++kw) {
          const vf xa = load(row + a + kw), xb = load(row + b + kw);
          for (i64 o = 0; o < kForwardChannels; ++o) {
            const float wv = w[o][tap + kw];
            acc[o][0] += wv * xa;
            acc[o][1] += wv * xb;
          }
        }
      }
    for (i64 o = 0; o < oc; ++o) {
      store(y + (o0 + o) * OH_ * OW_ + a, acc[o][0]);
      store(y + (o0 + o) * OH_ * OW_ + b, acc[o][1]);
    }
  }

  // Adds to out (the tile's [oc][K] kernel columns, channels `taps` apart) the weight gradient
  // of output channels o0 .. o0 + oc from one sample's input row kh of channel c (x: that row at
  // output row 0) and the sample's output gradient dy, kColumns kernel columns at a time.
  void weight_tile(const float* x, i64 WP, const float* dy, i64 o0, i64 oc, vf* out, i64 taps) const {
    for (i64 kw = 0; kw < K_; kw += kColumns) {
      switch (std::min(kColumns, K_ - kw)) {
        case 1:
          weight_columns<1>(x + kw, WP, dy, o0, oc, out + kw, taps);
          break;
        case 2:
          weight_columns<2>(x + kw, WP, dy, o0, oc, out + kw, taps);
          break;
        default:
          weight_columns<3>(x + kw, WP, dy, o0, oc, out + kw, taps);
          break;
      }
    }
  }

  template <int KC>
  void weight_columns(const float* x, i64 WP, const float* dy, i64 o0, i64 oc, vf* out, i64 taps) const {
    constexpr i64 G = kWeightChannels;
    const float* d[G];
    for (i64 o = 0; o < G; ++o) d[o] = o < oc ? dy + (o0 + o) * OH_ * OW_ : zero_plane_.data();
    vf acc[G][KC] = {};
    for (i64 oh = 0; oh < OH_; ++oh)
      for (std::size_t p = 0; p < pieces_.size(); ++p) {
        const i64 at = oh * OW_ + pieces_[p];
        vf g[G];
        for (i64 o = 0; o < G; ++o) g[o] = load(d[o] + at);
        if (p + 1 == pieces_.size() && overlap_)
          for (i64 o = 0; o < G; ++o) g[o] *= masks_[p];
        const float* row = x + oh * WP + pieces_[p];
        for (i64 kw = 0; kw < KC; ++kw) {
          const vf xv = load(row + kw);
          for (i64 o = 0; o < G; ++o) acc[o][kw] += g[o] * xv;
        }
      }
    for (i64 o = 0; o < oc; ++o)
      for (i64 kw = 0; kw < KC; ++kw) out[o * taps + kw] += acc[o][kw];
  }

  const i64 N_, C_, O_, K_, P_, H_, W_, OH_, OW_;
  const bool bias_;
  InputAdapter input_;
  std::vector<i64> pieces_;
  std::vector<vf> masks_;
  bool overlap_ = false;  // the last piece overlaps the one before (masks_.back() applies)
  std::vector<float> padded_, zero_plane_, zero_weights_;
  std::vector<std::vector<vf>> partial_;  // per thread: [group x G][C][K][K] then [O] for the bias
  float* y_ = nullptr;
  const float* dy_ = nullptr;
  const float* w_ = nullptr;
  float* dw_ = nullptr;
  const float* b_ = nullptr;
  float* db_ = nullptr;
};

}  // namespace

bool conv_is_small(const Conv2dSpec& s, const LayerInput& in, const Dims& out) {
  return !in.needs_grad && s.stride == 1 && (s.kernel == 3 || s.kernel == 5 || s.kernel == 7) &&
         s.in_channels <= kSmallConvInChannels && s.out_channels <= kSmallConvOutChannels && out.size() == 4 &&
         out[3] >= kLanes;
}

std::unique_ptr<Layer> make_small_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<SmallConv2d>(ctx, s, in, out);
}

}  // namespace tb::cpu

// A convolution on the model's input with few input channels (an image's three colours), as
// trainbench's own direct loops over plain NCHW. oneDNN blocks channels by 8 or 16, so a layer
// with 3 input and 6 output channels (LeNet-5's first) computes in a padded layout, and its
// kernels for such shapes run at a fraction of the machine's rate: on this 2-core VM (sgemm 211
// GFLOP/s), LeNet-5's first convolution took oneDNN 1.3-1.7 ms forward and 1.3 ms for the weight
// gradient (batch 100, 70.6 MFLOP each; ONEDNN_VERBOSE and a timing loop); these loops take
// 0.45-0.5 ms (about 150 GFLOP/s) and 0.6-0.8 ms.
// Here the vector lanes run along the output row instead, a register's width of outputs at a
// time, which needs no channel padding at all. The layer reads the model input, so no input
// gradient is computed. The loops are kernels of the ISA found at run time (kernels.inc: tiles of
// output channels by pieces of a row, sized for the ISA's registers); each thread takes a share of
// the rows forward, and a share of the batch for the weight gradient, whose partial sums are
// then added.
#include "engine/cpu/layer.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/cpu/kernels/kernels.hpp"

namespace tb::cpu {
namespace {

// Every ISA's widest vector (AVX-512's 16 floats) fits in an output row, and at most 64 of the
// narrowest (SSE2's 4) cover it (kernels.inc's pieces).
constexpr i64 kMinWidth = 16, kMaxWidth = 256;

class SmallConv2d final : public Layer {
 public:
  SmallConv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out)
      : kernels_(kernels::active()),
        P_(s.padding),
        H_(in[0].shape[2]),
        W_(in[0].shape[3]),
        bias_(s.bias),
        input_(ctx, in[0].desc, plain_desc(to_dnnl(in[0].shape))) {
    conv_.N = in[0].shape[0], conv_.C = s.in_channels, conv_.O = s.out_channels, conv_.K = s.kernel;
    conv_.HP = H_ + 2 * P_, conv_.WP = W_ + 2 * P_, conv_.OH = out[2], conv_.OW = out[3];
    if (P_ > 0) padded_.assign(std::size_t(conv_.N * conv_.C * conv_.HP * conv_.WP), 0.0f);
    // Per thread: its samples' weight gradient (O, C, K, K), then its bias gradient (O).
    partial_ = ThreadPartials(conv_.O * taps(), conv_.O);
  }

  md output_desc() const override { return plain_desc({conv_.N, conv_.O, conv_.OH, conv_.OW}); }
  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }
  std::vector<md> param_descs() const override {
    std::vector<md> d{md({conv_.O, conv_.C, conv_.K, conv_.K}, dt::f32, tag::oihw)};
    if (bias_) d.push_back(md({conv_.O}, dt::f32, tag::a));
    return d;
  }

  void bind(Context& ctx, const Bindings& b) override {
    input_.bind(ctx, b.inputs[0], dnnl::memory());
    conv_.y = static_cast<float*>(b.output.get_data_handle());
    conv_.dy = static_cast<const float*>(b.doutput.get_data_handle());
    conv_.w = static_cast<const float*>(b.params[0].get_data_handle());
    dw_ = static_cast<float*>(b.dparams[0].get_data_handle());
    if (bias_) {
      conv_.bias = static_cast<const float*>(b.params[1].get_data_handle());
      db_ = static_cast<float*>(b.dparams[1].get_data_handle());
    }
  }

  void forward(Context& ctx) override {
    input_.forward(ctx);
    ctx.stream.wait();
    kernels::SmallConv c = conv_;
    c.x = pad_source();
    on_threads(c.N * c.OH, [&](i64 first, i64 last) { kernels_.small_conv_forward(c, first, last); });
  }

  void backward(Context&) override {
    kernels::SmallConv c = conv_;
    c.x = P_ > 0 ? padded_.data() : static_cast<const float*>(input_.value().get_data_handle());
    partial_.sum(c.N, dw_, bias_ ? db_ : nullptr, [&](i64 first, i64 last, float* dw, float* db) {
      kernels_.small_conv_weight_grad(c, first, last, dw, db);
    });
  }

 private:
  i64 taps() const { return conv_.C * conv_.K * conv_.K; }

  // The input, copied inside its zero padding where the layer pads (the borders were zeroed at
  // construction; backward reads the same copy).
  const float* pad_source() {
    const float* x = static_cast<const float*>(input_.value().get_data_handle());
    if (P_ == 0) return x;
    float* xp = padded_.data();
    const i64 HP = conv_.HP, WP = conv_.WP;
#pragma omp parallel for schedule(static)
    for (i64 plane = 0; plane < conv_.N * conv_.C; ++plane)
      for (i64 h = 0; h < H_; ++h)
        std::memcpy(xp + (plane * HP + h + P_) * WP + P_, x + (plane * H_ + h) * W_, sizeof(float) * W_);
    return xp;
  }

  const kernels::Table& kernels_;  // the ISA active when the layer was made
  kernels::SmallConv conv_;        // shapes and bound buffers; x is set per pass
  const i64 P_, H_, W_;
  const bool bias_;
  InputAdapter input_;
  std::vector<float> padded_;
  ThreadPartials partial_;
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

}  // namespace

bool conv_is_small(const Conv2dSpec& s, const LayerInput& in, const Dims& out) {
  return !in.needs_grad && s.stride == 1 && (s.kernel == 3 || s.kernel == 5 || s.kernel == 7) &&
         s.in_channels <= kSmallConvInChannels && s.out_channels <= kSmallConvOutChannels && out.size() == 4 &&
         out[3] >= kMinWidth && out[3] <= kMaxWidth;
}

std::unique_ptr<Layer> make_small_conv2d(Context& ctx, const Conv2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<SmallConv2d>(ctx, s, in, out);
}

}  // namespace tb::cpu

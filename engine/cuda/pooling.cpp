// MaxPool2d and global average pooling on cuDNN's pooling descriptor, in the network's layout.
// Backward recomputes where the maximum was from x and y, so nothing is kept between the passes.
// N = batch, C = channels, H, W = height, width.
#include <utility>

#include "engine/cuda/layer.hpp"

namespace tb::cuda {
namespace {

// A square stride and padding; the window may be rectangular (global pooling over H x W).
struct Window {
  i64 height, width, stride, padding;
};

class Pooling final : public UnaryLayer {
 public:
  Pooling(Context& ctx, const char* name, cudnnPoolingMode_t mode, const Window& window, const Inputs& in,
          const Dims& out_shape) {
    const Dims& shape = in.at(0).shape;
    TB_CHECK(shape.size() == 4, "{}: the input must be (N, C, H, W), got {}", name, to_string(shape));
    const Nchw x = as_nchw(shape), y = as_nchw(out_shape);  // global pooling's (N, C) is (N, C, 1, 1)
    x_desc_.set4d(ctx.cudnn_dtype, x.n, x.c, x.h, x.w, ctx.layout);
    y_desc_.set4d(ctx.cudnn_dtype, y.n, y.c, y.h, y.w, ctx.layout);
    TB_CU(cudnnSetPooling2dDescriptor(pool_, mode, CUDNN_NOT_PROPAGATE_NAN, int(window.height), int(window.width),
                                      int(window.padding), int(window.padding), int(window.stride),
                                      int(window.stride)));
    int n = 0, c = 0, h = 0, w = 0;
    TB_CU(cudnnGetPooling2dForwardOutputDim(pool_, x_desc_, &n, &c, &h, &w));
    TB_CHECK(n == y.n && c == y.c && h == y.h && w == y.w,
             "{}: cuDNN makes ({}, {}, {}, {}) of the input {}, the model expects {}", name, n, c, h, w,
             to_string(shape), to_string(out_shape));
  }

  void forward(Context& ctx) override {
    TB_CU(cudnnPoolingForward(ctx.cudnn, pool_, &kOne, x_desc_, x_, &kZero, y_desc_, y_));
  }

  void backward(Context& ctx) override {
    if (!dx_) return;
    TB_CU(cudnnPoolingBackward(ctx.cudnn, pool_, &kOne, y_desc_, y_, y_desc_, dy_, x_desc_, x_, &kZero, x_desc_, dx_));
  }

 private:
  PoolingDesc pool_;
  TensorDesc x_desc_, y_desc_;  // (N, C, H, W) and (N, C, OH, OW)
};

}  // namespace

// The deterministic max: backward routes each gradient to one input, the same on every run.
std::unique_ptr<Layer> make_maxpool2d(Context& ctx, const MaxPool2dSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<Pooling>(ctx, "maxpool2d", CUDNN_POOLING_MAX_DETERMINISTIC,
                                   Window{s.kernel, s.kernel, s.stride, s.padding}, in, out);
}

// One window of H x W without padding, so including or excluding padding in the count is the
// same (the CPU backend excludes it).
std::unique_ptr<Layer> make_global_avgpool(Context& ctx, const Inputs& in, const Dims& out) {
  const Dims& x = in.at(0).shape;  // (N, C, H, W)
  TB_CHECK(x.size() == 4, "global_avgpool: the input must be (N, C, H, W), got {}", to_string(x));
  return std::make_unique<Pooling>(ctx, "global_avgpool", CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                   Window{x[2], x[3], 1, 0}, in, out);
}

}  // namespace tb::cuda

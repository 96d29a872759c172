// Fully connected layer on cuBLAS (cublasGemmEx in the precision's storage and compute types):
// y = x W^T + b over rows of in_features, the bias and its gradient by trainbench's kernels.
//
// Row-major tensors are column-major transposes to cuBLAS: x (rows, K) is x^T (K x rows), W (M, K)
// is W^T (K x M), y (rows, M) is y^T (M x rows). So y^T = (W^T)^T x^T, dx^T = W^T dy^T and
// dW^T = x^T dy.
#include "engine/cuda/layer.hpp"

namespace tb::cuda {
namespace {

class Linear final : public Layer {
 public:
  Linear(const LinearSpec& s, const Inputs& in)
      : k_(s.in_features),
        m_(s.out_features),
        rows_(product(in[0].shape) / s.in_features),
        bias_(s.bias),
        needs_dinput_(in[0].needs_grad) {}

  BackwardReads backward_reads() const override { return BackwardReads::only_inputs(); }

  std::vector<ParamSlot> param_slots() const override {
    std::vector<ParamSlot> p{{m_ * k_, false}};
    if (bias_) p.push_back({m_, false});
    return p;
  }

  void bind(Context&, const Bindings& b) override {
    x_ = b.inputs[0];
    dx_ = b.dinputs[0];
    y_ = b.output;
    dy_ = b.doutput;
    w_ = b.params[0];
    dw_ = b.dparams[0];
    if (bias_) {
      bias_ptr_ = b.params[1];
      dbias_ = b.dparams[1];
    }
  }

  void forward(Context& ctx) override {
    gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, m_, rows_, k_, w_, k_, x_, k_, y_, m_);
    if (bias_) kernels::add_bias(ctx.dtype, y_, bias_ptr_, rows_, m_, ctx.stream);
  }

  void backward(Context& ctx) override {
    gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, k_, m_, rows_, x_, k_, dy_, m_, dw_, k_);
    if (bias_) kernels::bias_grad(ctx.dtype, dy_, dbias_, rows_, m_, ctx.stream);
    if (needs_dinput_) gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, k_, rows_, m_, w_, k_, dy_, m_, dx_, k_);
  }

 private:
  // C (m x n) = op(A) op(B), column-major, overwriting C.
  static void gemm(Context& ctx, cublasOperation_t ta, cublasOperation_t tb, i64 m, i64 n, i64 k, const void* a,
                   i64 lda, const void* b, i64 ldb, void* c, i64 ldc) {
    TB_CU(cublasGemmEx(ctx.cublas, ta, tb, int(m), int(n), int(k), &kOne, a, ctx.blas_dtype, int(lda), b,
                       ctx.blas_dtype, int(ldb), &kZero, c, ctx.blas_dtype, int(ldc), ctx.blas_compute,
                       CUBLAS_GEMM_DEFAULT));
  }

  i64 k_, m_, rows_;
  bool bias_, needs_dinput_;
  const void* x_ = nullptr;
  void *dx_ = nullptr, *y_ = nullptr, *dy_ = nullptr, *w_ = nullptr, *dw_ = nullptr;
  void *bias_ptr_ = nullptr, *dbias_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_linear(Context& ctx, const LinearSpec& s, const Inputs& in, const Dims&) {
  // The flatten of an image: features in (C, H, W) order, which channels-last storage has only
  // where H = W = 1 (after global pooling).
  const Dims& x = in.at(0).shape;
  TB_CHECK(ctx.layout == Layout::NCHW || x.size() != 4 || x[2] * x[3] == 1,
           "linear over a channels-last image {} would flatten it in (H, W, C) order; the network keeps such a "
           "model in NCHW",
           to_string(x));
  return std::make_unique<Linear>(s, in);
}

}  // namespace tb::cuda

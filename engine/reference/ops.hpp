// Plain-loop reference implementation of every op trainbench trains with: the oracle that the
// oneDNN (and later cuDNN) layers are tested against. Never on a fast path.
//
// Legend: N = batch, C = channels, H, W = height, width, K = classes, T = time steps,
// I = input features, G = 4 LSTM gates (i, f, c~, o: oneDNN's order), Hd = LSTM hidden size.
// Every tensor is dense and row-major in the order its comment gives.
//
// Gradients: every backward function overwrites (=) what it writes, parameters and
// activations alike; the caller sums where a tensor feeds several consumers.
#pragma once

#include <cstdint>
#include <vector>

namespace tb::ref {

using i64 = std::int64_t;

// ---- Linear: y = x w^T + b ----
template <class T>
void linear_forward(const T* x,  // (N, I)
                    const T* w,  // (O, I)
                    const T* b,  // (O) or nullptr
                    T* y,        // (N, O)
                    i64 N, i64 I, i64 O);
template <class T>
void linear_backward(const T* x, const T* w, const T* dy,  // dy (N, O)
                     T* dx,                                // (N, I) or nullptr
                     T* dw,                                // (O, I)
                     T* db,                                // (O) or nullptr
                     i64 N, i64 I, i64 O);

// ---- Conv2d, square kernel, cross-correlation as in every framework ----
struct ConvShape {
  i64 N, C, H, W;  // input
  i64 O;           // output channels
  i64 kernel, stride, pad;
  i64 out_h() const { return (H + 2 * pad - kernel) / stride + 1; }
  i64 out_w() const { return (W + 2 * pad - kernel) / stride + 1; }
};
template <class T>
void conv2d_forward(const T* x,  // (N, C, H, W)
                    const T* w,  // (O, C, k, k)
                    const T* b,  // (O) or nullptr
                    T* y,        // (N, O, OH, OW)
                    const ConvShape& s);
template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx /* or nullptr */, T* dw, T* db /* or nullptr */,
                     const ConvShape& s);

// ---- MaxPool2d, square window; padding never wins the max; ties go to the first ----
struct PoolShape {
  i64 N, C, H, W;
  i64 kernel, stride, pad;
  i64 out_h() const { return (H + 2 * pad - kernel) / stride + 1; }
  i64 out_w() const { return (W + 2 * pad - kernel) / stride + 1; }
};
template <class T>
void maxpool2d_forward(const T* x, T* y, const PoolShape& s);  // (N,C,H,W) -> (N,C,OH,OW)
template <class T>
void maxpool2d_backward(const T* x, const T* dy, T* dx, const PoolShape& s);

// ---- Global average pooling: (N, C, H, W) -> (N, C, 1, 1) ----
template <class T>
void global_avgpool_forward(const T* x, T* y, i64 N, i64 C, i64 H, i64 W);
template <class T>
void global_avgpool_backward(const T* dy, T* dx, i64 N, i64 C, i64 H, i64 W);

// ---- BatchNorm over (N, H, W) per channel, training mode (batch statistics) ----
// mean, var (C): outputs of forward, biased variance, used by backward.
// running_mean, running_var (C): updated in place as r = (1 - momentum) r + momentum * batch,
// with the unbiased variance (as PyTorch does). Pass nullptr to skip the update.
template <class T>
void batchnorm_forward_train(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* var, T* running_mean,
                             T* running_var, i64 N, i64 C, i64 HW, double eps, double momentum);
template <class T>
void batchnorm_backward(const T* x, const T* gamma, const T* mean, const T* var, const T* dy, T* dx, T* dgamma,
                        T* dbeta, i64 N, i64 C, i64 HW, double eps);
// Inference mode: normalise with the running statistics.
template <class T>
void batchnorm_forward_infer(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                             T* y, i64 N, i64 C, i64 HW, double eps);

// ---- Elementwise activations; backward takes the forward output y ----
template <class T>
void relu_forward(const T* x, T* y, i64 n);
template <class T>
void relu_backward(const T* y, const T* dy, T* dx, i64 n);
template <class T>
void sigmoid_forward(const T* x, T* y, i64 n);
template <class T>
void sigmoid_backward(const T* y, const T* dy, T* dx, i64 n);

// ---- Residual add: y = a + b; backward: da = db = dy ----
template <class T>
void add_forward(const T* a, const T* b, T* y, i64 n);
template <class T>
void add_backward(const T* dy, T* da, T* db, i64 n);

// ---- LSTM, one layer, one direction, zero initial state ----
// x (T, N, I), wx (I, G, Hd), wh (Hd, G, Hd), bias (G, Hd), h (T, N, Hd).
// Gates: i = s(.), f = s(.), c~ = tanh(.), o = s(.); c_t = f c_{t-1} + i c~; h_t = o tanh(c_t),
// where (.) = x_t wx[:, g, :] + h_{t-1} wh[:, g, :] + bias[g].
struct LstmShape {
  i64 T, N, I, Hd;
};
// Saved forward state for backward: gates (T, N, G, Hd) after activation, c (T, N, Hd).
template <class T>
struct LstmCache {
  std::vector<T> gates, c;
};
template <class T>
void lstm_forward(const T* x, const T* wx, const T* wh, const T* bias, T* h, LstmCache<T>& cache, const LstmShape& s);
template <class T>
void lstm_backward(const T* x, const T* wx, const T* wh, const T* h, const LstmCache<T>& cache,
                   const T* dh,  // (T, N, Hd)
                   T* dx,        // (T, N, I) or nullptr
                   T* dwx, T* dwh, T* dbias, const LstmShape& s);

// ---- Losses: return the mean loss; backward gives the gradient of that mean ----
// logits (N, K), labels (N) in [0, K). Returns mean over N of -log softmax(logits)[label].
template <class T>
T softmax_cross_entropy_forward(const T* logits, const std::int32_t* labels, i64 N, i64 K);
template <class T>
void softmax_cross_entropy_backward(const T* logits, const std::int32_t* labels, T* dlogits, i64 N,
                                    i64 K);  // (softmax - onehot) / N
// pred, target (n). Returns mean((pred - target)^2); backward 2 (pred - target) / n.
template <class T>
T mse_forward(const T* pred, const T* target, i64 n);
template <class T>
void mse_backward(const T* pred, const T* target, T* dpred, i64 n);

// ---- Optimizers, one pass over flat buffers of n elements ----
// SGD with momentum and weight decay (PyTorch's form): v = mu v + (g + wd p); p -= lr v.
template <class T>
void sgd_momentum_update(T* param, const T* grad, T* velocity, i64 n, double lr, double momentum, double weight_decay);
// Adam (Kingma & Ba) with bias correction; step counts from 1.
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
template <class T>
void adam_update(T* param, const T* grad, T* m, T* v, i64 n, double lr, double beta1, double beta2, double eps,
                 std::int64_t step);

}  // namespace tb::ref

// Plain-loop reference ops: the test oracle for the oneDNN and cuDNN layers. Each loop follows
// the maths of its op as directly as possible; speed only matters enough to keep tests quick.
// Sums accumulate in double so that the float oracle is more accurate than what it checks.
#include "engine/reference/ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tb::ref {

namespace {

constexpr i64 kGates = 4;  // G: i, f, c~, o
constexpr i64 kGateI = 0, kGateF = 1, kGateC = 2, kGateO = 3;

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

// ---- Linear ----

template <class T>
void linear_forward(const T* x, const T* w, const T* b, T* y, i64 N, i64 I, i64 O) {
  for (i64 n = 0; n < N; ++n) {
    for (i64 o = 0; o < O; ++o) {
      double sum = b ? double(b[o]) : 0.0;
      for (i64 i = 0; i < I; ++i) sum += double(x[n * I + i]) * double(w[o * I + i]);
      y[n * O + o] = T(sum);
    }
  }
}

template <class T>
void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, i64 N, i64 I, i64 O) {
  if (dx) {
    for (i64 n = 0; n < N; ++n) {
      for (i64 i = 0; i < I; ++i) {
        double sum = 0.0;
        for (i64 o = 0; o < O; ++o) sum += double(dy[n * O + o]) * double(w[o * I + i]);
        dx[n * I + i] = T(sum);
      }
    }
  }
  for (i64 o = 0; o < O; ++o) {
    for (i64 i = 0; i < I; ++i) {
      double sum = 0.0;
      for (i64 n = 0; n < N; ++n) sum += double(dy[n * O + o]) * double(x[n * I + i]);
      dw[o * I + i] = T(sum);
    }
  }
  if (db) {
    for (i64 o = 0; o < O; ++o) {
      double sum = 0.0;
      for (i64 n = 0; n < N; ++n) sum += double(dy[n * O + o]);
      db[o] = T(sum);
    }
  }
}

// ---- Conv2d ----
// Backward is written as a gather (each gradient element sums everything that reads it), so
// every output is written exactly once and no separate zeroing pass is needed.

template <class T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const ConvShape& s) {
  const i64 OH = s.out_h(), OW = s.out_w(), k = s.kernel;
  for (i64 n = 0; n < s.N; ++n) {
    for (i64 o = 0; o < s.O; ++o) {
      for (i64 oh = 0; oh < OH; ++oh) {
        for (i64 ow = 0; ow < OW; ++ow) {
          double sum = b ? double(b[o]) : 0.0;
          for (i64 c = 0; c < s.C; ++c) {
            for (i64 kh = 0; kh < k; ++kh) {
              const i64 ih = oh * s.stride - s.pad + kh;
              if (ih < 0 || ih >= s.H) continue;  // zero padding contributes nothing
              for (i64 kw = 0; kw < k; ++kw) {
                const i64 iw = ow * s.stride - s.pad + kw;
                if (iw < 0 || iw >= s.W) continue;
                sum += double(x[((n * s.C + c) * s.H + ih) * s.W + iw]) * double(w[((o * s.C + c) * k + kh) * k + kw]);
              }
            }
          }
          y[((n * s.O + o) * OH + oh) * OW + ow] = T(sum);
        }
      }
    }
  }
}

template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const ConvShape& s) {
  const i64 OH = s.out_h(), OW = s.out_w(), k = s.kernel;
  auto dy_at = [&](i64 n, i64 o, i64 oh, i64 ow) { return double(dy[((n * s.O + o) * OH + oh) * OW + ow]); };

  if (dx) {
    for (i64 n = 0; n < s.N; ++n) {
      for (i64 c = 0; c < s.C; ++c) {
        for (i64 ih = 0; ih < s.H; ++ih) {
          for (i64 iw = 0; iw < s.W; ++iw) {
            double sum = 0.0;
            for (i64 kh = 0; kh < k; ++kh) {
              // Invert ih = oh * stride - pad + kh; only exact multiples of stride were read.
              const i64 oh_scaled = ih + s.pad - kh;
              if (oh_scaled < 0 || oh_scaled % s.stride != 0) continue;
              const i64 oh = oh_scaled / s.stride;
              if (oh >= OH) continue;
              for (i64 kw = 0; kw < k; ++kw) {
                const i64 ow_scaled = iw + s.pad - kw;
                if (ow_scaled < 0 || ow_scaled % s.stride != 0) continue;
                const i64 ow = ow_scaled / s.stride;
                if (ow >= OW) continue;
                for (i64 o = 0; o < s.O; ++o) {
                  sum += dy_at(n, o, oh, ow) * double(w[((o * s.C + c) * k + kh) * k + kw]);
                }
              }
            }
            dx[((n * s.C + c) * s.H + ih) * s.W + iw] = T(sum);
          }
        }
      }
    }
  }

  for (i64 o = 0; o < s.O; ++o) {
    for (i64 c = 0; c < s.C; ++c) {
      for (i64 kh = 0; kh < k; ++kh) {
        for (i64 kw = 0; kw < k; ++kw) {
          double sum = 0.0;
          for (i64 n = 0; n < s.N; ++n) {
            for (i64 oh = 0; oh < OH; ++oh) {
              const i64 ih = oh * s.stride - s.pad + kh;
              if (ih < 0 || ih >= s.H) continue;
              for (i64 ow = 0; ow < OW; ++ow) {
                const i64 iw = ow * s.stride - s.pad + kw;
                if (iw < 0 || iw >= s.W) continue;
                sum += dy_at(n, o, oh, ow) * double(x[((n * s.C + c) * s.H + ih) * s.W + iw]);
              }
            }
          }
          dw[((o * s.C + c) * k + kh) * k + kw] = T(sum);
        }
      }
    }
  }

  if (db) {
    for (i64 o = 0; o < s.O; ++o) {
      double sum = 0.0;
      for (i64 n = 0; n < s.N; ++n)
        for (i64 oh = 0; oh < OH; ++oh)
          for (i64 ow = 0; ow < OW; ++ow) sum += dy_at(n, o, oh, ow);
      db[o] = T(sum);
    }
  }
}

// ---- MaxPool2d ----

namespace {

// Flat index into x of the winning element of one window, or -1 when the window holds only
// padding (possible only when pad >= kernel, which frameworks reject).
template <class T>
i64 maxpool_argmax(const T* x, const PoolShape& s, i64 n, i64 c, i64 oh, i64 ow) {
  i64 best = -1;
  for (i64 kh = 0; kh < s.kernel; ++kh) {
    const i64 ih = oh * s.stride - s.pad + kh;
    if (ih < 0 || ih >= s.H) continue;
    for (i64 kw = 0; kw < s.kernel; ++kw) {
      const i64 iw = ow * s.stride - s.pad + kw;
      if (iw < 0 || iw >= s.W) continue;
      const i64 at = ((n * s.C + c) * s.H + ih) * s.W + iw;
      if (best < 0 || x[at] > x[best]) best = at;  // strict > keeps the first of equal maxima
    }
  }
  return best;
}

}  // namespace

template <class T>
void maxpool2d_forward(const T* x, T* y, const PoolShape& s) {
  const i64 OH = s.out_h(), OW = s.out_w();
  for (i64 n = 0; n < s.N; ++n)
    for (i64 c = 0; c < s.C; ++c)
      for (i64 oh = 0; oh < OH; ++oh)
        for (i64 ow = 0; ow < OW; ++ow) {
          const i64 best = maxpool_argmax(x, s, n, c, oh, ow);
          y[((n * s.C + c) * OH + oh) * OW + ow] = best >= 0 ? x[best] : -std::numeric_limits<T>::infinity();
        }
}

template <class T>
void maxpool2d_backward(const T* x, const T* dy, T* dx, const PoolShape& s) {
  const i64 OH = s.out_h(), OW = s.out_w();
  for (i64 at = 0; at < s.N * s.C * s.H * s.W; ++at) dx[at] = T(0);
  // Scatter, because overlapping windows can share a winner and its gradients must add up.
  for (i64 n = 0; n < s.N; ++n)
    for (i64 c = 0; c < s.C; ++c)
      for (i64 oh = 0; oh < OH; ++oh)
        for (i64 ow = 0; ow < OW; ++ow) {
          const i64 best = maxpool_argmax(x, s, n, c, oh, ow);
          if (best >= 0) dx[best] += dy[((n * s.C + c) * OH + oh) * OW + ow];
        }
}

// ---- Global average pooling ----

template <class T>
void global_avgpool_forward(const T* x, T* y, i64 N, i64 C, i64 H, i64 W) {
  const i64 HW = H * W;
  for (i64 nc = 0; nc < N * C; ++nc) {
    double sum = 0.0;
    for (i64 p = 0; p < HW; ++p) sum += double(x[nc * HW + p]);
    y[nc] = T(sum / double(HW));
  }
}

template <class T>
void global_avgpool_backward(const T* dy, T* dx, i64 N, i64 C, i64 H, i64 W) {
  const i64 HW = H * W;
  for (i64 nc = 0; nc < N * C; ++nc)
    for (i64 p = 0; p < HW; ++p) dx[nc * HW + p] = T(double(dy[nc]) / double(HW));
}

// ---- BatchNorm ----

template <class T>
void batchnorm_forward_train(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* var, T* running_mean,
                             T* running_var, i64 N, i64 C, i64 HW, double eps, double momentum) {
  const i64 count = N * HW;
  for (i64 c = 0; c < C; ++c) {
    double sum = 0.0;
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) sum += double(x[(n * C + c) * HW + p]);
    const double mu = sum / double(count);
    // Two passes rather than E[x^2] - E[x]^2, which cancels badly when |mean| >> std.
    double sq = 0.0;
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) {
        const double d = double(x[(n * C + c) * HW + p]) - mu;
        sq += d * d;
      }
    const double biased = sq / double(count);
    const double inv_std = 1.0 / std::sqrt(biased + eps);
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) {
        const i64 at = (n * C + c) * HW + p;
        y[at] = T(double(gamma[c]) * (double(x[at]) - mu) * inv_std + double(beta[c]));
      }
    mean[c] = T(mu);
    var[c] = T(biased);
    if (running_mean) running_mean[c] = T((1.0 - momentum) * running_mean[c] + momentum * mu);
    if (running_var) {
      // One value per channel has no unbiased variance; keep the biased 0 rather than divide by 0.
      const double unbiased = count > 1 ? sq / double(count - 1) : biased;
      running_var[c] = T((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
}

template <class T>
void batchnorm_backward(const T* x, const T* gamma, const T* mean, const T* var, const T* dy, T* dx, T* dgamma,
                        T* dbeta, i64 N, i64 C, i64 HW, double eps) {
  const double count = double(N * HW);
  for (i64 c = 0; c < C; ++c) {
    const double mu = mean[c];
    const double inv_std = 1.0 / std::sqrt(double(var[c]) + eps);
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) {
        const i64 at = (n * C + c) * HW + p;
        sum_dy += dy[at];
        sum_dy_xhat += double(dy[at]) * (double(x[at]) - mu) * inv_std;
      }
    dbeta[c] = T(sum_dy);
    dgamma[c] = T(sum_dy_xhat);
    // The batch mean and variance depend on every x, hence the two correction terms.
    const double scale = double(gamma[c]) * inv_std / count;
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) {
        const i64 at = (n * C + c) * HW + p;
        const double xhat = (double(x[at]) - mu) * inv_std;
        dx[at] = T(scale * (count * double(dy[at]) - sum_dy - xhat * sum_dy_xhat));
      }
  }
}

template <class T>
void batchnorm_forward_infer(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                             T* y, i64 N, i64 C, i64 HW, double eps) {
  for (i64 n = 0; n < N; ++n)
    for (i64 c = 0; c < C; ++c) {
      const double inv_std = 1.0 / std::sqrt(double(running_var[c]) + eps);
      for (i64 p = 0; p < HW; ++p) {
        const i64 at = (n * C + c) * HW + p;
        y[at] = T(double(gamma[c]) * (double(x[at]) - double(running_mean[c])) * inv_std + double(beta[c]));
      }
    }
}

// ---- Activations ----

template <class T>
void relu_forward(const T* x, T* y, i64 n) {
  for (i64 e = 0; e < n; ++e) y[e] = x[e] > T(0) ? x[e] : T(0);
}

template <class T>
void relu_backward(const T* y, const T* dy, T* dx, i64 n) {
  for (i64 e = 0; e < n; ++e) dx[e] = y[e] > T(0) ? dy[e] : T(0);
}

template <class T>
void sigmoid_forward(const T* x, T* y, i64 n) {
  // exp(-x) overflowing to inf for very negative x still yields the right limit, 0.
  for (i64 e = 0; e < n; ++e) y[e] = T(sigmoid(double(x[e])));
}

template <class T>
void sigmoid_backward(const T* y, const T* dy, T* dx, i64 n) {
  for (i64 e = 0; e < n; ++e) dx[e] = T(double(dy[e]) * double(y[e]) * (1.0 - double(y[e])));
}

// ---- Residual add ----

template <class T>
void add_forward(const T* a, const T* b, T* y, i64 n) {
  for (i64 e = 0; e < n; ++e) y[e] = a[e] + b[e];
}

template <class T>
void add_backward(const T* dy, T* da, T* db, i64 n) {
  for (i64 e = 0; e < n; ++e) {
    da[e] = dy[e];
    db[e] = dy[e];
  }
}

// ---- LSTM ----

template <class T>
void lstm_forward(const T* x, const T* wx, const T* wh, const T* bias, T* h, LstmCache<T>& cache, const LstmShape& s) {
  const i64 G = kGates, N = s.N, I = s.I, Hd = s.Hd;
  cache.gates.assign(static_cast<std::size_t>(s.T * N * G * Hd), T(0));  // (T, N, G, Hd)
  cache.c.assign(static_cast<std::size_t>(s.T * N * Hd), T(0));          // (T, N, Hd)
  for (i64 t = 0; t < s.T; ++t) {
    const T* x_t = x + t * N * I;                              // (N, I)
    const T* h_prev = t > 0 ? h + (t - 1) * N * Hd : nullptr;  // (N, Hd); null: zero state
    const T* c_prev = t > 0 ? cache.c.data() + (t - 1) * N * Hd : nullptr;
    T* gates_t = cache.gates.data() + t * N * G * Hd;  // (N, G, Hd)
    for (i64 n = 0; n < N; ++n) {
      for (i64 g = 0; g < G; ++g) {
        for (i64 j = 0; j < Hd; ++j) {
          double pre = bias[g * Hd + j];
          for (i64 i = 0; i < I; ++i) pre += double(x_t[n * I + i]) * double(wx[(i * G + g) * Hd + j]);
          if (h_prev)
            for (i64 k = 0; k < Hd; ++k) pre += double(h_prev[n * Hd + k]) * double(wh[(k * G + g) * Hd + j]);
          gates_t[(n * G + g) * Hd + j] = T(g == kGateC ? std::tanh(pre) : sigmoid(pre));
        }
      }
      for (i64 j = 0; j < Hd; ++j) {
        auto gate = [&](i64 g) { return double(gates_t[(n * G + g) * Hd + j]); };
        const double c_before = c_prev ? double(c_prev[n * Hd + j]) : 0.0;
        const double c_now = gate(kGateF) * c_before + gate(kGateI) * gate(kGateC);
        cache.c[(t * N + n) * Hd + j] = T(c_now);
        h[(t * N + n) * Hd + j] = T(gate(kGateO) * std::tanh(c_now));
      }
    }
  }
}

template <class T>
void lstm_backward(const T* x, const T* wx, const T* wh, const T* h, const LstmCache<T>& cache, const T* dh, T* dx,
                   T* dwx, T* dwh, T* dbias, const LstmShape& s) {
  const i64 G = kGates, N = s.N, I = s.I, Hd = s.Hd;
  // Parameter gradients sum over every time step, so they accumulate from zero in double.
  std::vector<double> dwx_sum(static_cast<std::size_t>(I * G * Hd), 0.0);   // (I, G, Hd)
  std::vector<double> dwh_sum(static_cast<std::size_t>(Hd * G * Hd), 0.0);  // (Hd, G, Hd)
  std::vector<double> dbias_sum(static_cast<std::size_t>(G * Hd), 0.0);     // (G, Hd)
  // Gradients flowing back into step t from step t + 1.
  std::vector<double> dh_next(static_cast<std::size_t>(N * Hd), 0.0);  // (N, Hd)
  std::vector<double> dc_next(static_cast<std::size_t>(N * Hd), 0.0);  // (N, Hd)
  std::vector<double> dpre(static_cast<std::size_t>(N * G * Hd));      // (N, G, Hd)

  for (i64 t = s.T - 1; t >= 0; --t) {
    const T* gates_t = cache.gates.data() + t * N * G * Hd;  // (N, G, Hd)
    const T* c_t = cache.c.data() + t * N * Hd;              // (N, Hd)
    const T* c_prev = t > 0 ? cache.c.data() + (t - 1) * N * Hd : nullptr;
    const T* h_prev = t > 0 ? h + (t - 1) * N * Hd : nullptr;

    for (i64 n = 0; n < N; ++n) {
      for (i64 j = 0; j < Hd; ++j) {
        auto gate = [&](i64 g) { return double(gates_t[(n * G + g) * Hd + j]); };
        const i64 nj = n * Hd + j;
        const double dh_total = double(dh[t * N * Hd + nj]) + dh_next[nj];
        const double tanh_c = std::tanh(double(c_t[nj]));
        const double dc = dc_next[nj] + dh_total * gate(kGateO) * (1.0 - tanh_c * tanh_c);
        const double c_before = c_prev ? double(c_prev[nj]) : 0.0;
        // Gradients w.r.t. the activated gates, then through sigmoid' = s (1 - s) and
        // tanh' = 1 - tanh^2 to the pre-activations.
        const double d_i = dc * gate(kGateC), d_f = dc * c_before;
        const double d_c_tilde = dc * gate(kGateI), d_o = dh_total * tanh_c;
        dpre[(n * G + kGateI) * Hd + j] = d_i * gate(kGateI) * (1.0 - gate(kGateI));
        dpre[(n * G + kGateF) * Hd + j] = d_f * gate(kGateF) * (1.0 - gate(kGateF));
        dpre[(n * G + kGateC) * Hd + j] = d_c_tilde * (1.0 - gate(kGateC) * gate(kGateC));
        dpre[(n * G + kGateO) * Hd + j] = d_o * gate(kGateO) * (1.0 - gate(kGateO));
        dc_next[nj] = dc * gate(kGateF);
      }
    }

    for (i64 n = 0; n < N; ++n) {
      for (i64 g = 0; g < G; ++g) {
        for (i64 j = 0; j < Hd; ++j) {
          const double d = dpre[(n * G + g) * Hd + j];
          dbias_sum[g * Hd + j] += d;
          for (i64 i = 0; i < I; ++i) dwx_sum[(i * G + g) * Hd + j] += double(x[(t * N + n) * I + i]) * d;
          if (h_prev)
            for (i64 k = 0; k < Hd; ++k) dwh_sum[(k * G + g) * Hd + j] += double(h_prev[n * Hd + k]) * d;
        }
      }
      if (dx) {
        for (i64 i = 0; i < I; ++i) {
          double sum = 0.0;
          for (i64 g = 0; g < G; ++g)
            for (i64 j = 0; j < Hd; ++j) sum += double(wx[(i * G + g) * Hd + j]) * dpre[(n * G + g) * Hd + j];
          dx[(t * N + n) * I + i] = T(sum);
        }
      }
      // The zero initial state has no gradient to receive, so step 0 passes nothing back.
      for (i64 k = 0; k < Hd; ++k) {
        double sum = 0.0;
        if (t > 0)
          for (i64 g = 0; g < G; ++g)
            for (i64 j = 0; j < Hd; ++j) sum += double(wh[(k * G + g) * Hd + j]) * dpre[(n * G + g) * Hd + j];
        dh_next[n * Hd + k] = sum;
      }
    }
  }

  for (std::size_t e = 0; e < dwx_sum.size(); ++e) dwx[e] = T(dwx_sum[e]);
  for (std::size_t e = 0; e < dwh_sum.size(); ++e) dwh[e] = T(dwh_sum[e]);
  for (std::size_t e = 0; e < dbias_sum.size(); ++e) dbias[e] = T(dbias_sum[e]);
}

// ---- Losses ----

template <class T>
T softmax_cross_entropy_forward(const T* logits, const std::int32_t* labels, i64 N, i64 K) {
  double total = 0.0;
  for (i64 n = 0; n < N; ++n) {
    const T* row = logits + n * K;
    // Shifting by the row max keeps exp() from overflowing on large logits.
    double max_logit = row[0];
    for (i64 k = 1; k < K; ++k) max_logit = std::max(max_logit, double(row[k]));
    double sum_exp = 0.0;
    for (i64 k = 0; k < K; ++k) sum_exp += std::exp(double(row[k]) - max_logit);
    total += std::log(sum_exp) - (double(row[labels[n]]) - max_logit);
  }
  return T(total / double(N));
}

template <class T>
void softmax_cross_entropy_backward(const T* logits, const std::int32_t* labels, T* dlogits, i64 N, i64 K) {
  for (i64 n = 0; n < N; ++n) {
    const T* row = logits + n * K;
    double max_logit = row[0];
    for (i64 k = 1; k < K; ++k) max_logit = std::max(max_logit, double(row[k]));
    double sum_exp = 0.0;
    for (i64 k = 0; k < K; ++k) sum_exp += std::exp(double(row[k]) - max_logit);
    for (i64 k = 0; k < K; ++k) {
      const double softmax = std::exp(double(row[k]) - max_logit) / sum_exp;
      const double onehot = k == labels[n] ? 1.0 : 0.0;
      dlogits[n * K + k] = T((softmax - onehot) / double(N));
    }
  }
}

template <class T>
T mse_forward(const T* pred, const T* target, i64 n) {
  double sum = 0.0;
  for (i64 e = 0; e < n; ++e) {
    const double d = double(pred[e]) - double(target[e]);
    sum += d * d;
  }
  return T(sum / double(n));
}

template <class T>
void mse_backward(const T* pred, const T* target, T* dpred, i64 n) {
  for (i64 e = 0; e < n; ++e) dpred[e] = T(2.0 * (double(pred[e]) - double(target[e])) / double(n));
}

// ---- Optimizers ----

template <class T>
void sgd_momentum_update(T* param, const T* grad, T* velocity, i64 n, double lr, double momentum, double weight_decay) {
  for (i64 e = 0; e < n; ++e) {
    const double g = double(grad[e]) + weight_decay * double(param[e]);
    const double v = momentum * double(velocity[e]) + g;
    velocity[e] = T(v);
    param[e] = T(double(param[e]) - lr * v);
  }
}

template <class T>
void adam_update(T* param, const T* grad, T* m, T* v, i64 n, double lr, double beta1, double beta2, double eps,
                 std::int64_t step) {
  const double correction1 = 1.0 - std::pow(beta1, double(step));
  const double correction2 = 1.0 - std::pow(beta2, double(step));
  for (i64 e = 0; e < n; ++e) {
    const double g = grad[e];
    const double m_new = beta1 * double(m[e]) + (1.0 - beta1) * g;
    const double v_new = beta2 * double(v[e]) + (1.0 - beta2) * g * g;
    m[e] = T(m_new);
    v[e] = T(v_new);
    param[e] = T(double(param[e]) - lr * (m_new / correction1) / (std::sqrt(v_new / correction2) + eps));
  }
}

// ---- Explicit instantiations ----

#define TB_REF_INSTANTIATE(Scalar)                                                                                    \
  template void linear_forward<Scalar>(const Scalar*, const Scalar*, const Scalar*, Scalar*, i64, i64, i64);          \
  template void linear_backward<Scalar>(const Scalar*, const Scalar*, const Scalar*, Scalar*, Scalar*, Scalar*, i64,  \
                                        i64, i64);                                                                    \
  template void conv2d_forward<Scalar>(const Scalar*, const Scalar*, const Scalar*, Scalar*, const ConvShape&);       \
  template void conv2d_backward<Scalar>(const Scalar*, const Scalar*, const Scalar*, Scalar*, Scalar*, Scalar*,       \
                                        const ConvShape&);                                                            \
  template void maxpool2d_forward<Scalar>(const Scalar*, Scalar*, const PoolShape&);                                  \
  template void maxpool2d_backward<Scalar>(const Scalar*, const Scalar*, Scalar*, const PoolShape&);                  \
  template void global_avgpool_forward<Scalar>(const Scalar*, Scalar*, i64, i64, i64, i64);                           \
  template void global_avgpool_backward<Scalar>(const Scalar*, Scalar*, i64, i64, i64, i64);                          \
  template void batchnorm_forward_train<Scalar>(const Scalar*, const Scalar*, const Scalar*, Scalar*, Scalar*,        \
                                                Scalar*, Scalar*, Scalar*, i64, i64, i64, double, double);            \
  template void batchnorm_backward<Scalar>(const Scalar*, const Scalar*, const Scalar*, const Scalar*, const Scalar*, \
                                           Scalar*, Scalar*, Scalar*, i64, i64, i64, double);                         \
  template void batchnorm_forward_infer<Scalar>(const Scalar*, const Scalar*, const Scalar*, const Scalar*,           \
                                                const Scalar*, Scalar*, i64, i64, i64, double);                       \
  template void relu_forward<Scalar>(const Scalar*, Scalar*, i64);                                                    \
  template void relu_backward<Scalar>(const Scalar*, const Scalar*, Scalar*, i64);                                    \
  template void sigmoid_forward<Scalar>(const Scalar*, Scalar*, i64);                                                 \
  template void sigmoid_backward<Scalar>(const Scalar*, const Scalar*, Scalar*, i64);                                 \
  template void add_forward<Scalar>(const Scalar*, const Scalar*, Scalar*, i64);                                      \
  template void add_backward<Scalar>(const Scalar*, Scalar*, Scalar*, i64);                                           \
  template void lstm_forward<Scalar>(const Scalar*, const Scalar*, const Scalar*, const Scalar*, Scalar*,             \
                                     LstmCache<Scalar>&, const LstmShape&);                                           \
  template void lstm_backward<Scalar>(const Scalar*, const Scalar*, const Scalar*, const Scalar*,                     \
                                      const LstmCache<Scalar>&, const Scalar*, Scalar*, Scalar*, Scalar*, Scalar*,    \
                                      const LstmShape&);                                                              \
  template Scalar softmax_cross_entropy_forward<Scalar>(const Scalar*, const std::int32_t*, i64, i64);                \
  template void softmax_cross_entropy_backward<Scalar>(const Scalar*, const std::int32_t*, Scalar*, i64, i64);        \
  template Scalar mse_forward<Scalar>(const Scalar*, const Scalar*, i64);                                             \
  template void mse_backward<Scalar>(const Scalar*, const Scalar*, Scalar*, i64);                                     \
  template void sgd_momentum_update<Scalar>(Scalar*, const Scalar*, Scalar*, i64, double, double, double);            \
  template void adam_update<Scalar>(Scalar*, const Scalar*, Scalar*, Scalar*, i64, double, double, double, double,    \
                                    std::int64_t);

TB_REF_INSTANTIATE(float)
TB_REF_INSTANTIATE(double)

#undef TB_REF_INSTANTIATE

}  // namespace tb::ref

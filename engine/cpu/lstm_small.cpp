// A small LSTM (a few hidden units, as in the sine-wave model) as one fused loop over time on
// the calling thread. oneDNN's RNN primitive synchronises its threads at every time step and
// runs a GEMM per gate block, which for 4H x (I + H) = 120 multiply-adds per sample and step is
// all overhead; here each step is a few vectorised passes over 4H gate values. Same layouts
// and semantics as the oneDNN layer (lstm.cpp): time-major (T, N, I) in, (T, N, H) out, zero
// initial state, canonical ldigo weights and ldgo bias, gates in the order i, f, c~, o.
#include "engine/cpu/layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tb::cpu {
namespace {

// e^x for |x| <= 87 to about 2 ulp, as arithmetic the compiler vectorises (libm's expf and
// tanhf are scalar calls, and were most of this layer's time): 2^n e^r with n = round(x /
// ln 2), r = x - n ln 2 in two parts (Cody and Waite), e^r by its degree-6 Taylor polynomial.
inline float fast_exp(float x) {
  x = std::clamp(x, -87.0f, 87.0f);
  const float n = std::nearbyint(x * 1.44269504f);
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (std::int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// a = 1: sigmoid(x); a = 2: tanh(x) = 2 sigmoid(2x) - 1. One formula, so that one loop applies
// the four gates' activations.
inline float activate(float x, float a) { return a / (1.0f + fast_exp(-a * x)) - (a - 1.0f); }

class SmallLstm final : public Layer {
 public:
  SmallLstm(const LSTMSpec& s, const Inputs& in)
      : T_(in[0].shape[0]),
        N_(in[0].shape[1]),
        I_(s.input_size),
        H_(s.hidden_size),
        G_(4 * s.hidden_size),
        needs_dinput_(in[0].needs_grad) {
    src_ = plain_view(in[0].desc, {T_, N_, I_});
    // Saved for backward: the gate activations and the cell state of every (t, n).
    gates_.resize(std::size_t(T_ * N_ * G_));
    cells_.resize(std::size_t(T_ * N_ * H_));
    tanh_cells_.resize(cells_.size());
    // Gates i, f and o are sigmoids, c~ a tanh (activate()'s a = 1 or 2).
    act_scale_.assign(std::size_t(G_), 1.0f);
    std::fill(act_scale_.begin() + 2 * H_, act_scale_.begin() + 3 * H_, 2.0f);
    dgates_.resize(std::size_t(N_ * G_));
    dh_next_.resize(std::size_t(N_ * H_));
    dc_next_.resize(std::size_t(N_ * H_));
  }

  md output_desc() const override { return plain_desc({T_, N_, H_}); }
  std::vector<md> param_descs() const override {
    return {md({1, 1, I_, 4, H_}, dt::f32, tag::ldigo), md({1, 1, H_, 4, H_}, dt::f32, tag::ldigo),
            md({1, 1, 4, H_}, dt::f32, tag::ldgo)};
  }

  void bind(Context&, const Bindings& b) override {
    x_ = static_cast<const float*>(b.inputs[0].get_data_handle());
    dx_ = needs_dinput_ ? static_cast<float*>(b.dinputs[0].get_data_handle()) : nullptr;
    h_ = static_cast<float*>(b.output.get_data_handle());
    dh_ = static_cast<const float*>(b.doutput.get_data_handle());
    wx_ = static_cast<const float*>(b.params[0].get_data_handle());
    wh_ = static_cast<const float*>(b.params[1].get_data_handle());
    bias_ = static_cast<const float*>(b.params[2].get_data_handle());
    dwx_ = static_cast<float*>(b.dparams[0].get_data_handle());
    dwh_ = static_cast<float*>(b.dparams[1].get_data_handle());
    dbias_ = static_cast<float*>(b.dparams[2].get_data_handle());
  }

  void forward(Context&) override {
    const i64 G = G_, H = H_, N = N_;
    for (i64 t = 0; t < T_; ++t) {
      float* g = &gates_[std::size_t(t * N * G)];
      // Pre-activations of every sample's gates: bias + x Wx + h(t-1) Wh.
      for (i64 n = 0; n < N; ++n) {
        float* gn = g + n * G;
        std::copy(bias_, bias_ + G, gn);
        const float* x = x_ + (t * N + n) * I_;
        for (i64 i = 0; i < I_; ++i) axpy(x[i], wx_ + i * G, gn, G);
        if (t > 0) {
          const float* h_prev = h_ + ((t - 1) * N + n) * H;
          for (i64 j = 0; j < H; ++j) axpy(h_prev[j], wh_ + j * G, gn, G);
        }
      }
      for (i64 n = 0; n < N; ++n) {
        float* gn = g + n * G;
#pragma omp simd
        for (i64 k = 0; k < G; ++k) gn[k] = activate(gn[k], act_scale_[std::size_t(k)]);
      }
      // Cell and output: c = i c~ + f c(t-1), h = o tanh(c).
      float* c = &cells_[std::size_t(t * N * H)];
      float* tc = &tanh_cells_[std::size_t(t * N * H)];
      for (i64 n = 0; n < N; ++n) {
        const float* gn = g + n * G;
        const float* c_prev = t > 0 ? c - N * H + n * H : nullptr;
        float* cn = c + n * H;
        float* tcn = tc + n * H;
        float* h = h_ + (t * N + n) * H;
#pragma omp simd
        for (i64 k = 0; k < H; ++k) {
          cn[k] = gn[k] * gn[2 * H + k] + (c_prev ? gn[H + k] * c_prev[k] : 0.0f);
          tcn[k] = activate(cn[k], 2.0f);
          h[k] = gn[3 * H + k] * tcn[k];
        }
      }
    }
  }

  void backward(Context&) override {
    const i64 G = G_, H = H_;
    std::memset(dwx_, 0, sizeof(float) * std::size_t(I_ * G));
    std::memset(dwh_, 0, sizeof(float) * std::size_t(H * G));
    std::memset(dbias_, 0, sizeof(float) * std::size_t(G));
    std::fill(dh_next_.begin(), dh_next_.end(), 0.0f);
    std::fill(dc_next_.begin(), dc_next_.end(), 0.0f);
    for (i64 t = T_ - 1; t >= 0; --t) {
      for (i64 n = 0; n < N_; ++n) {
        const i64 tn = t * N_ + n;
        const float* g = &gates_[std::size_t(tn * G)];
        const float* tanh_c = &tanh_cells_[std::size_t(tn * H)];
        const float* c_prev = t > 0 ? &cells_[std::size_t((tn - N_) * H)] : nullptr;
        float* dg = &dgates_[std::size_t(n * G)];
        float* dh_next = &dh_next_[std::size_t(n * H)];
        float* dc_next = &dc_next_[std::size_t(n * H)];
        for (i64 k = 0; k < H; ++k) {
          const float in = g[k], forget = g[H + k], cand = g[2 * H + k], out = g[3 * H + k];
          const float tc = tanh_c[k];
          const float dh = dh_[tn * H + k] + dh_next[k];
          const float dc = dh * out * (1 - tc * tc) + dc_next[k];
          dg[k] = dc * cand * in * (1 - in);
          dg[H + k] = c_prev ? dc * c_prev[k] * forget * (1 - forget) : 0.0f;
          dg[2 * H + k] = dc * in * (1 - cand * cand);
          dg[3 * H + k] = dh * tc * out * (1 - out);
          dc_next[k] = dc * forget;
        }
        // Parameter gradients: outer products with this step's inputs.
        const float* x = x_ + tn * I_;
        for (i64 i = 0; i < I_; ++i) axpy(x[i], dg, dwx_ + i * G, G);
        if (t > 0) {
          const float* h_prev = h_ + (tn - N_) * H;
          for (i64 j = 0; j < H; ++j) axpy(h_prev[j], dg, dwh_ + j * G, G);
        }
        for (i64 k = 0; k < G; ++k) dbias_[k] += dg[k];
        // Gradients of this step's inputs: x, and h(t-1) for the step before.
        if (dx_)
          for (i64 i = 0; i < I_; ++i) dx_[tn * I_ + i] = dot(wx_ + i * G, dg, G);
        for (i64 j = 0; j < H; ++j) dh_next[j] = t > 0 ? dot(wh_ + j * G, dg, G) : 0.0f;
      }
    }
  }

 private:
  static void axpy(float a, const float* x, float* y, i64 n) {
#pragma omp simd
    for (i64 k = 0; k < n; ++k) y[k] += a * x[k];
  }
  static float dot(const float* a, const float* b, i64 n) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (i64 k = 0; k < n; ++k) s += a[k] * b[k];
    return s;
  }

  i64 T_, N_, I_, H_, G_;
  bool needs_dinput_;
  md src_;
  std::vector<float> gates_, cells_, tanh_cells_, dgates_, dh_next_, dc_next_, act_scale_;
  const float *x_ = nullptr, *dh_ = nullptr, *wx_ = nullptr, *wh_ = nullptr, *bias_ = nullptr;
  float *dx_ = nullptr, *h_ = nullptr, *dwx_ = nullptr, *dwh_ = nullptr, *dbias_ = nullptr;
};

}  // namespace

bool lstm_is_small(const LSTMSpec& s) { return 4 * s.hidden_size * (s.input_size + s.hidden_size) <= kSmallLstmMacs; }

std::unique_ptr<Layer> make_small_lstm(Context&, const LSTMSpec& s, const Inputs& in) {
  return std::make_unique<SmallLstm>(s, in);
}

}  // namespace tb::cpu

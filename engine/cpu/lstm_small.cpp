// A small LSTM (a few hidden units, as in the sine-wave model) as one fused loop over time on
// the calling thread. oneDNN's RNN primitive synchronises its threads at every time step and
// runs a GEMM per gate block, which for 4H x (I + H) = 120 multiply-adds per sample and step is
// all overhead; here each step is a few vectorised passes over 4H gate values (a kernel of the ISA
// found at run time: kernels.inc). Same layouts and semantics as the oneDNN layer (lstm.cpp):
// time-major (T, N, I) in, (T, N, H) out, zero initial state, canonical ldigo weights and ldgo
// bias, gates in the order i, f, c~, o.
#include "engine/cpu/layer.hpp"

#include <algorithm>
#include <vector>

#include "engine/cpu/kernels/kernels.hpp"

namespace tb::cpu {
namespace {

class SmallLstm final : public Layer {
 public:
  SmallLstm(const LSTMSpec& s, const Inputs& in) : kernels_(kernels::active()), needs_dinput_(in[0].needs_grad) {
    lstm_.T = in[0].shape[0], lstm_.N = in[0].shape[1], lstm_.I = s.input_size, lstm_.H = s.hidden_size;
    const i64 T = lstm_.T, N = lstm_.N, H = lstm_.H, G = 4 * H;
    // Saved for backward: the gate activations and the cell state of every (t, n).
    gates_.resize(std::size_t(T * N * G));
    cells_.resize(std::size_t(T * N * H));
    tanh_cells_.resize(cells_.size());
    // Gates i, f and o are sigmoids, c~ a tanh (the kernel's activation scale: 1 or 2).
    act_scale_.assign(std::size_t(G), 1.0f);
    std::fill(act_scale_.begin() + 2 * H, act_scale_.begin() + 3 * H, 2.0f);
    dgates_.resize(std::size_t(N * G));
    dh_next_.resize(std::size_t(N * H));
    dc_next_.resize(std::size_t(N * H));
    lstm_.gates = gates_.data(), lstm_.cells = cells_.data(), lstm_.tanh_cells = tanh_cells_.data();
    lstm_.act_scale = act_scale_.data();
    lstm_.dgates = dgates_.data(), lstm_.dh_next = dh_next_.data(), lstm_.dc_next = dc_next_.data();
  }

  md output_desc() const override { return plain_desc({lstm_.T, lstm_.N, lstm_.H}); }
  std::vector<md> param_descs() const override {
    const i64 I = lstm_.I, H = lstm_.H;
    return {md({1, 1, I, 4, H}, dt::f32, tag::ldigo), md({1, 1, H, 4, H}, dt::f32, tag::ldigo),
            md({1, 1, 4, H}, dt::f32, tag::ldgo)};
  }

  void bind(Context&, const Bindings& b) override {
    lstm_.x = static_cast<const float*>(b.inputs[0].get_data_handle());
    lstm_.dx = needs_dinput_ ? static_cast<float*>(b.dinputs[0].get_data_handle()) : nullptr;
    lstm_.h = static_cast<float*>(b.output.get_data_handle());
    lstm_.dh = static_cast<const float*>(b.doutput.get_data_handle());
    lstm_.wx = static_cast<const float*>(b.params[0].get_data_handle());
    lstm_.wh = static_cast<const float*>(b.params[1].get_data_handle());
    lstm_.bias = static_cast<const float*>(b.params[2].get_data_handle());
    lstm_.dwx = static_cast<float*>(b.dparams[0].get_data_handle());
    lstm_.dwh = static_cast<float*>(b.dparams[1].get_data_handle());
    lstm_.dbias = static_cast<float*>(b.dparams[2].get_data_handle());
  }

  void forward(Context&) override { kernels_.small_lstm_forward(lstm_); }
  void backward(Context&) override { kernels_.small_lstm_backward(lstm_); }

 private:
  const kernels::Table& kernels_;  // the ISA active when the layer was made
  bool needs_dinput_;
  kernels::SmallLstm lstm_;
  std::vector<float> gates_, cells_, tanh_cells_, dgates_, dh_next_, dc_next_, act_scale_;
};

}  // namespace

bool lstm_is_small(const LSTMSpec& s) { return 4 * s.hidden_size * (s.input_size + s.hidden_size) <= kSmallLstmMacs; }

std::unique_ptr<Layer> make_small_lstm(Context&, const LSTMSpec& s, const Inputs& in) {
  return std::make_unique<SmallLstm>(s, in);
}

}  // namespace tb::cpu

// LSTM on cuDNN's RNN API (cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8):
// one layer, one direction, zero initial state, time-major (T, N, F) sequences. The parameters
// are cuDNN's own weight space in one slot, mapped to the canonical ldigo/ldgo layouts on the host.
//
// T = time steps, N = batch, I = input features, H = hidden size; gates g in cuDNN's and the
// canonical order alike: i, f, c~ (cuDNN's "new memory"), o.
#include "engine/cuda/layer.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace tb::cuda {
namespace {

constexpr int kGates = 4;

int to_int(i64 value, const char* what) {
  TB_CHECK(value > 0 && value <= std::numeric_limits<int>::max(), "cuDNN LSTM: {} = {} does not fit an int", what,
           value);
  return int(value);
}

// One canonical parameter seen as (cols, 4, H): weight_x with cols = I, weight_h with cols = H,
// bias with cols = 1. Gate g is the (H, cols) row-major block at element offsets[g] of the
// weight space.
struct CanonicalParam {
  i64 cols = 0;
  std::array<i64, kGates> offsets{};
};

class Lstm final : public Layer {
 public:
  Lstm(Context& ctx, const LSTMSpec& s, const Inputs& in, const Dims& out)
      : T_(in[0].shape[0]), N_(in[0].shape[1]), I_(s.input_size), H_(s.hidden_size) {
    TB_CHECK(in[0].shape.size() == 3 && in[0].shape[2] == I_ && out == (Dims{T_, N_, H_}),
             "cuDNN LSTM: input (T, N, {}) to output (T, N, {}) expected", I_, H_);
    const int T = to_int(T_, "sequence length"), N = to_int(N_, "batch"), I = to_int(I_, "input size"),
              H = to_int(H_, "hidden size");

    // Dropout applies between layers only, so with one layer it is never used; the descriptor
    // with dropout 0 needs no random states.
    TB_CU(cudnnSetDropoutDescriptor(dropout_, ctx.cudnn, 0.0f, nullptr, 0, 0));
    // Padded I/O is what permits the unpacked layout; with every sequence T long there is no
    // padding. Compute precision is fp32 for every storage type (cuDNN allows half or float for
    // half data, float only for float data).
    TB_CU(cudnnSetRNNDescriptor_v8(rnn_, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_SINGLE_INP_BIAS,
                                   CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, ctx.cudnn_dtype, CUDNN_DATA_FLOAT,
                                   ctx.math, I, H, /*projSize=*/H, /*numLayers=*/1, dropout_,
                                   CUDNN_RNN_PADDED_IO_ENABLED));

    const std::vector<int> seq_lengths(std::size_t(N), T);
    TB_CU(cudnnSetRNNDataDescriptor(x_desc_, ctx.cudnn_dtype, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, N, I,
                                    seq_lengths.data(), nullptr));
    TB_CU(cudnnSetRNNDataDescriptor(y_desc_, ctx.cudnn_dtype, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, N, H,
                                    seq_lengths.data(), nullptr));
    // The kernels read the lengths asynchronously from device memory; planning may synchronise.
    dev_seq_lengths_ = DeviceBuffer(ctx.allocator, std::size_t(N) * sizeof(std::int32_t), MemoryKind::Activations);
    TB_CU(cudaMemcpyAsync(dev_seq_lengths_.get(), seq_lengths.data(), dev_seq_lengths_.bytes(), cudaMemcpyHostToDevice,
                          ctx.stream));
    TB_CU(cudaStreamSynchronize(ctx.stream));  // before seq_lengths goes out of scope

    // h and c states (layers x directions, N, H): required even though hx, cx, hy, cy are null.
    const int state_dims[3] = {1, N, H}, state_strides[3] = {N * H, H, 1};
    TB_CU(cudnnSetTensorNdDescriptor(state_desc_, ctx.cudnn_dtype, 3, state_dims, state_strides));

    std::size_t train_workspace = 0, infer_workspace = 0, infer_reserve = 0;
    TB_CU(cudnnGetRNNTempSpaceSizes(ctx.cudnn, rnn_, CUDNN_FWD_MODE_TRAINING, x_desc_, &train_workspace,
                                    &reserve_bytes_));
    TB_CU(cudnnGetRNNTempSpaceSizes(ctx.cudnn, rnn_, CUDNN_FWD_MODE_INFERENCE, x_desc_, &infer_workspace,
                                    &infer_reserve));
    // The training size covers forward, backward data and backward weights.
    workspace_bytes_ = std::max(train_workspace, infer_workspace);
    ctx.need_workspace(workspace_bytes_);
    if (reserve_bytes_ > 0) reserve_ = DeviceBuffer(ctx.allocator, reserve_bytes_, MemoryKind::Activations);
    if (!in[0].needs_grad) scratch_dx_ = DeviceBuffer(ctx.allocator, dx_bytes(ctx), MemoryKind::Activations);

    TB_CU(cudnnGetRNNWeightSpaceSize(ctx.cudnn, rnn_, &weight_bytes_));
    const std::size_t elem = ctx.elem_bytes();
    TB_CHECK(weight_bytes_ % elem == 0, "cuDNN LSTM: weight space of {} bytes is not whole elements", weight_bytes_);
    elements_ = i64(weight_bytes_ / elem);
    locate_params(ctx);
  }

  std::vector<ParamSlot> param_slots() const override { return {ParamSlot{elements_, false}}; }

  void bind(Context& ctx, const Bindings& b) override {
    TB_CHECK(b.params.size() == 1 && b.dparams.size() == 1, "cuDNN LSTM: one weight space slot expected");
    x_ = b.inputs[0];
    y_ = b.output;
    dy_ = b.doutput;
    weights_ = b.params[0];
    dweights_ = b.dparams[0];
    if (b.dinputs[0] == nullptr && !scratch_dx_)
      scratch_dx_ = DeviceBuffer(ctx.allocator, dx_bytes(ctx), MemoryKind::Activations);
    // Backward data runs even where the input needs no gradient: backward weights reads what it
    // leaves in the reserve space.
    dx_ = b.dinputs[0] != nullptr ? b.dinputs[0] : scratch_dx_.get();
  }

  void forward(Context& ctx) override { run_forward(ctx, CUDNN_FWD_MODE_TRAINING, reserve_bytes_, reserve_.get()); }
  void forward_eval(Context& ctx) override { run_forward(ctx, CUDNN_FWD_MODE_INFERENCE, 0, nullptr); }

  void backward(Context& ctx) override {
    const auto dev_seq_lengths = dev_seq_lengths_.as<const std::int32_t>();
    TB_CU(cudnnRNNBackwardData_v8(ctx.cudnn, rnn_, dev_seq_lengths, y_desc_, y_, dy_, x_desc_, dx_, state_desc_,
                                  /*hx=*/nullptr, /*dhy=*/nullptr, /*dhx=*/nullptr, state_desc_, /*cx=*/nullptr,
                                  /*dcy=*/nullptr, /*dcx=*/nullptr, weight_bytes_, weights_, workspace_bytes_,
                                  ctx.workspace, reserve_bytes_, reserve_.get()));
    // cuDNN's RNN weight gradient supports CUDNN_WGRAD_MODE_ADD only (it refuses SET); this layer
    // overwrites, so it adds to zeros, which also keeps any weight-space padding's gradient zero.
    TB_CU(cudaMemsetAsync(dweights_, 0, weight_bytes_, ctx.stream));
    TB_CU(cudnnRNNBackwardWeights_v8(ctx.cudnn, rnn_, CUDNN_WGRAD_MODE_ADD, dev_seq_lengths, x_desc_, x_, state_desc_,
                                     /*hx=*/nullptr, y_desc_, y_, weight_bytes_, dweights_, workspace_bytes_,
                                     ctx.workspace, reserve_bytes_, reserve_.get()));
  }

  std::vector<float> canonical(int index, const std::vector<std::vector<float>>& slots) const override {
    const std::vector<float>& space = slots.at(0);
    TB_CHECK(i64(space.size()) == elements_, "cuDNN LSTM: weight space of {} values, expected {}", space.size(),
             elements_);
    std::vector<float> value(std::size_t(canonical_count(index)));
    for_each_element(index, [&](i64 at, i64 element) { value[std::size_t(at)] = space[std::size_t(element)]; });
    return value;
  }

  void set_canonical(int index, const std::vector<float>& value,
                     std::vector<std::vector<float>>& slots) const override {
    TB_CHECK(i64(value.size()) == canonical_count(index), "cuDNN LSTM: parameter {} has {} values, expected {}", index,
             value.size(), canonical_count(index));
    std::vector<float>& space = slots.at(0);
    if (i64(space.size()) != elements_) space.assign(std::size_t(elements_), 0.0f);
    for_each_element(index, [&](i64 at, i64 element) { space[std::size_t(element)] = value[std::size_t(at)]; });
    // No canonical parameter maps onto the gaps: they stay zero whatever was there before.
    for (const auto& [begin, end] : gaps_) std::fill(space.begin() + begin, space.begin() + end, 0.0f);
  }

  std::size_t own_bytes() const override { return reserve_.bytes() + dev_seq_lengths_.bytes() + scratch_dx_.bytes(); }

 private:
  std::size_t dx_bytes(const Context& ctx) const { return std::size_t(T_ * N_ * I_) * ctx.elem_bytes(); }

  void run_forward(Context& ctx, cudnnForwardMode_t mode, std::size_t reserve_bytes, void* reserve) {
    TB_CU(cudnnRNNForward(ctx.cudnn, rnn_, mode, dev_seq_lengths_.as<const std::int32_t>(), x_desc_, x_, y_desc_, y_,
                          state_desc_, /*hx=*/nullptr, /*hy=*/nullptr, state_desc_, /*cx=*/nullptr, /*cy=*/nullptr,
                          weight_bytes_, weights_, workspace_bytes_, ctx.workspace, reserve_bytes, reserve));
  }

  // Where each gate's matrices and bias lie in the weight space. cuDNN computes the addresses
  // from a weight space pointer, so a temporary buffer of that size stands in for the slot; the
  // offsets in elements hold for the fp32 master and the compute copy alike.
  void locate_params(Context& ctx) {
    const DeviceBuffer space(ctx.allocator, weight_bytes_, MemoryKind::Other);
    const auto base = static_cast<const char*>(space.get());
    TensorDesc matrix_desc, bias_desc;
    auto element_offset = [&](const void* addr, const TensorDesc& desc, i64 rows, i64 cols, int id) {
      TB_CHECK(addr != nullptr, "cuDNN LSTM: no weight block for linLayerID {}", id);
      cudnnDataType_t type;
      int nb_dims = 0, dims[3] = {}, strides[3] = {};
      TB_CU(cudnnGetTensorNdDescriptor(desc, 3, &type, &nb_dims, dims, strides));
      TB_CHECK(
          nb_dims == 3 && dims[0] == 1 && dims[1] == rows && dims[2] == cols && strides[1] == cols && strides[2] == 1,
          "cuDNN LSTM: linLayerID {} is not a dense ({}, {}) row-major block", id, rows, cols);
      const std::ptrdiff_t bytes = static_cast<const char*>(addr) - base;
      TB_CHECK(bytes >= 0 && std::size_t(bytes) % ctx.elem_bytes() == 0, "cuDNN LSTM: linLayerID {} misaligned", id);
      return i64(std::size_t(bytes) / ctx.elem_bytes());
    };

    params_ = {CanonicalParam{I_, {}}, CanonicalParam{H_, {}}, CanonicalParam{1, {}}};
    for (int g = 0; g < kGates; ++g) {
      // linLayerID g: the input-side matrix W_g (H, I) and the one bias b_g (H).
      void *matrix = nullptr, *bias = nullptr;
      TB_CU(cudnnGetRNNWeightParams(ctx.cudnn, rnn_, 0, weight_bytes_, space.get(), g, matrix_desc, &matrix, bias_desc,
                                    &bias));
      params_[0].offsets[std::size_t(g)] = element_offset(matrix, matrix_desc, H_, I_, g);
      params_[2].offsets[std::size_t(g)] = element_offset(bias, bias_desc, H_, 1, g);
      // linLayerID 4 + g: the recurrent matrix R_g (H, H); single input bias leaves it no bias.
      matrix = bias = nullptr;
      TB_CU(cudnnGetRNNWeightParams(ctx.cudnn, rnn_, 0, weight_bytes_, space.get(), kGates + g, matrix_desc, &matrix,
                                    bias_desc, &bias));
      params_[1].offsets[std::size_t(g)] = element_offset(matrix, matrix_desc, H_, H_, kGates + g);
      TB_CHECK(bias == nullptr, "cuDNN LSTM: a recurrent bias for linLayerID {} with a single input bias", kGates + g);
    }

    std::vector<std::pair<i64, i64>> covered;
    for (const CanonicalParam& p : params_)
      for (i64 offset : p.offsets) covered.emplace_back(offset, offset + H_ * p.cols);
    std::sort(covered.begin(), covered.end());
    i64 next = 0;
    for (const auto& [begin, end] : covered) {
      TB_CHECK(begin >= next, "cuDNN LSTM: weight blocks overlap at element {}", begin);
      if (begin > next) gaps_.emplace_back(next, begin);
      next = std::max(next, end);
    }
    TB_CHECK(next <= elements_, "cuDNN LSTM: weight blocks end at {} of {} elements", next, elements_);
    if (next < elements_) gaps_.emplace_back(next, elements_);
  }

  i64 canonical_count(int index) const { return params_.at(std::size_t(index)).cols * kGates * H_; }

  // f(canonical index, weight space element) for every element of canonical parameter `index`:
  // canonical[c][g][h] = gate g's block [h][c].
  template <class F>
  void for_each_element(int index, F f) const {
    const CanonicalParam& p = params_.at(std::size_t(index));
    for (i64 c = 0; c < p.cols; ++c)
      for (int g = 0; g < kGates; ++g)
        for (i64 h = 0; h < H_; ++h) f((c * kGates + g) * H_ + h, p.offsets[std::size_t(g)] + h * p.cols + c);
  }

  i64 T_, N_, I_, H_;
  DropoutDesc dropout_;  // declared before rnn_, which refers to it, so destroyed after
  RnnDesc rnn_;
  RnnDataDesc x_desc_, y_desc_;   // (T, N, I) and (T, N, H), every sequence T long
  TensorDesc state_desc_;         // (1, N, H) for h and c
  DeviceBuffer dev_seq_lengths_;  // (N) int32, all T
  DeviceBuffer reserve_;          // written by forward, read by backward
  DeviceBuffer scratch_dx_;       // (T, N, I): dx where the input needs no gradient
  std::size_t weight_bytes_ = 0, workspace_bytes_ = 0, reserve_bytes_ = 0;
  i64 elements_ = 0;                       // of the weight space
  std::array<CanonicalParam, 3> params_;   // weight_x, weight_h, bias
  std::vector<std::pair<i64, i64>> gaps_;  // weight space elements no parameter covers
  const void* x_ = nullptr;                // (T, N, I)
  void *y_ = nullptr, *dy_ = nullptr;      // (T, N, H)
  void* dx_ = nullptr;                     // (T, N, I)
  const void* weights_ = nullptr;
  void* dweights_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_lstm(Context& ctx, const LSTMSpec& s, const Inputs& in, const Dims& out) {
  return std::make_unique<Lstm>(ctx, s, in, out);
}

}  // namespace tb::cuda

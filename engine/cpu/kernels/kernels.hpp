// trainbench's own CPU loops, compiled once per instruction set (isa.hpp) with that ISA's flags
// and vector width, whatever the build's flags, and chosen at run time: a table of functions per
// ISA. Tiles are sized for each ISA's registers: AVX-512's 32 of 16 floats, AVX2's and SSE2's 16
// of 8 and of 4. The code is engine/cpu/kernels/kernels.inc, included by isa_<name>.cpp.
// Callers pass plain pointers; each function says which threads it uses.
// Legend: N = batch, C = input channels, O = output channels, K = kernel size, H, W = the input's
// height and width (HP, WP: with its padding), OH, OW = the output's.
#pragma once

#include <cstdint>

// Isa (isa.hpp), declared here so that the kernels' translation units, compiled with other ISAs'
// flags, include no library header that could instantiate code they would share.
namespace tb::cpu {
enum class Isa : int;
}

namespace tb::cpu::kernels {

using i64 = std::int64_t;

// A stride-1 convolution of few channels over a plain NCHW input copied inside its padding
// (conv2d_small.cpp); OW at least 16 (every ISA's widest vector).
struct SmallConv {
  i64 N = 0, C = 0, O = 0, K = 0, HP = 0, WP = 0, OH = 0, OW = 0;
  const float* x = nullptr;     // (N, C, HP, WP)
  const float* w = nullptr;     // (O, C, K, K)
  const float* bias = nullptr;  // (O), or null
  float* y = nullptr;           // (N, O, OH, OW)
  const float* dy = nullptr;    // (N, O, OH, OW)
};
inline constexpr i64 kSmallConvMaxTaps = 4 * 7 * 7;  // C x K x K of the largest small convolution

// The weight gradient of a stride-1 convolution without padding from a plain NCHW input and an
// output gradient in B-channel blocks (conv2d.cpp: oneDNN's forward chose those layouts, and its
// backward on them computes in narrower blocks after reordering both).
struct BlockedConvGrad {
  i64 N = 0, C = 0, H = 0, W = 0, O = 0, K = 0, OH = 0, OW = 0, B = 0;  // B: 8 or 16
  const float* x = nullptr;                                             // (N, C, H, W)
  const float* dy = nullptr;                                            // (N, O / B, OH, OW, B)
};

// Max pooling over non-overlapping K x K windows of plain planes (pooling.cpp).
struct PlainPool {
  i64 planes = 0, K = 0, H = 0, W = 0, OH = 0, OW = 0;
  const float* x = nullptr;        // (planes, H, W)
  float* y = nullptr;              // (planes, OH, OW)
  std::int32_t* argmax = nullptr;  // (planes, OH, OW): each window's maximum, row-major in it
  const float* dy = nullptr;
  float* dx = nullptr;
};

// Max pooling with non-overlapping K x K windows (kernel = stride, no padding) over channel
// blocks: `planes` = N x C / B planes of H x W x B floats (oneDNN's aBcd8b, aBcd16b), each
// output lane's window read as B-float pieces. `argmax` holds each output float's window offset,
// row-major in the window.
struct BlockedPool {
  i64 planes = 0, B = 0, K = 0, H = 0, W = 0, OH = 0, OW = 0;
  const float* x = nullptr;        // (planes, H, W, B)
  float* y = nullptr;              // (planes, OH, OW, B)
  std::int32_t* argmax = nullptr;  // (planes, OH, OW, B)
  const float* dy = nullptr;
  float* dx = nullptr;
};

// A small LSTM over time (lstm_small.cpp): time-major (T, N, I) in, (T, N, H) out, G = 4H gates
// in the order i, f, c~, o, canonical ldigo weights.
struct SmallLstm {
  i64 T = 0, N = 0, I = 0, H = 0;
  const float *x = nullptr, *wx = nullptr, *wh = nullptr, *bias = nullptr;  // (T,N,I), (I,G), (H,G), (G)
  float* h = nullptr;                                                       // (T, N, H)
  float *gates = nullptr, *cells = nullptr, *tanh_cells = nullptr;          // saved: (T,N,G), (T,N,H), (T,N,H)
  const float* act_scale = nullptr;                                         // (G): 1 for a sigmoid gate, 2 for tanh's
  // Backward: the output gradient in, the gradients out (dx may be null), and scratch per sample.
  const float* dh = nullptr;
  float *dx = nullptr, *dwx = nullptr, *dwh = nullptr, *dbias = nullptr;
  float *dgates = nullptr, *dh_next = nullptr, *dc_next = nullptr;  // (N, G), (N, H), (N, H)
};

// SGD with momentum or Adam over flat buffers (engine/optim): n elements, every gradient times
// grad_scale first.
struct Update {
  i64 n = 0;
  float* params = nullptr;
  const float* grads = nullptr;
  float *first = nullptr, *second = nullptr;  // velocity / first moment; second moment (Adam)
  float lr = 0, weight_decay = 0, grad_scale = 1;
  float momentum = 0;                                         // SGD
  float beta1 = 0, beta2 = 0, eps = 0, bias1 = 1, bias2 = 1;  // Adam: 1 / (1 - beta^t)
};

// blocked_conv_data_grad's limits: an input row's terms (K x O / lanes) and a row of output
// gradient (OW x B floats), which it keeps on its stack.
inline constexpr i64 kDataGradMaxTerms = 7 * 64, kDataGradMaxRow = 1024;

struct Table {
  Isa isa{};
  int lanes = 4;       // floats per vector register
  int registers = 16;  // vector registers
  // Output rows [first, last) of N x OH (all threads' work split by the caller).
  void (*small_conv_forward)(const SmallConv&, i64 first, i64 last);
  // Samples [first, last): adds their weight gradient (O, C, K, K) into dw and, with a bias, their
  // bias gradient (O) into db (scalars, one thread).
  void (*small_conv_weight_grad)(const SmallConv&, i64 first, i64 last, float* dw, float* db);
  // Samples [first, last): adds their weight gradient (O / B, K, K, C, B) into dw and, if db is not
  // null, their bias gradient (O) into db (one thread). Only for a B that is a multiple of `lanes`.
  void (*blocked_conv_weight_grad)(const BlockedConvGrad&, i64 first, i64 last, float* dw, float* db);
  // Samples [first, last): their input gradient dx (N, C, H, W), overwritten, from dy and the
  // weights w (O / B, K, K, C, B). Only for K of 3, 5 or 7, a B that is a multiple of `lanes`,
  // K x O / lanes <= kDataGradMaxTerms and OW x B <= kDataGradMaxRow.
  void (*blocked_conv_data_grad)(const BlockedConvGrad&, const float* w, i64 first, i64 last, float* dx);
  // Output rows [first, last) of planes x OH, keeping each window's argmax.
  void (*plain_pool_forward)(const PlainPool&, i64 first, i64 last);
  // Planes [first, last): the input gradient from dy and the argmax.
  void (*plain_pool_backward)(const PlainPool&, i64 first, i64 last);
  // Planes [first, last) of BlockedPool, forward keeping the argmax and backward from it (the
  // whole input gradient written, unread rows and columns zero). Only for a B that is a multiple
  // of `lanes`.
  void (*blocked_pool_forward)(const BlockedPool&, i64 first, i64 last);
  void (*blocked_pool_backward)(const BlockedPool&, i64 first, i64 last);
  void (*small_lstm_forward)(const SmallLstm&);        // on the calling thread
  void (*small_lstm_backward)(const SmallLstm&);       // on the calling thread
  void (*sgd)(const Update&);                          // every OpenMP thread
  void (*adam)(const Update&);                         // every OpenMP thread
  void (*add)(float* into, const float* from, i64 n);  // into += from, every OpenMP thread
  // out[i] = the sum over u < count of parts[u][offset + i], for i < n (the calling thread).
  void (*sum_parts)(float* out, const float* const* parts, int count, i64 offset, i64 n);
};

// The kernels of `isa` (which the machine must support), and those active_isa() names now.
const Table& table(Isa isa);
const Table& active();

}  // namespace tb::cpu::kernels

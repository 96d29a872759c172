// trainbench's own CPU kernels (engine/cpu/kernels) in every instruction set this machine runs,
// against the plain-loop reference ops in double, in every shape the models give them and the
// edges of their tiles: LeNet-5's first convolution and pooling, its second convolution's weight
// gradient, the sine LSTM, the optimizers over flat buffers, gradient sums; forward and backward. Also the ISA's
// choice, its cap (TB_MAX_CPU_ISA) and the networks that take it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/cpu/isa.hpp"
#include "engine/cpu/kernels/kernels.hpp"
#include "engine/cpu/network.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/reference/ops.hpp"
#include "models/models.hpp"
#include "tests/small_lstm_buffers.hpp"
#include "tests/tensors.hpp"

namespace tb {
namespace {

using cpu::Isa;
using testing_support::close;
using testing_support::to_double;
using testing_support::uniform;
using Vec = std::vector<float>;
using DVec = std::vector<double>;

// Every ISA the machine runs, by name, for the parameterised suites.
std::vector<Isa> isas() { return cpu::runnable_isas(); }
std::string isa_label(const testing::TestParamInfo<Isa>& i) { return cpu::isa_name(i.param); }

// Restores the ISA cap a test changed.
class IsaCap {
 public:
  explicit IsaCap(Isa isa) : before_(cpu::active_isa()) { cpu::cap_isa(isa); }
  ~IsaCap() { cpu::cap_isa(before_); }
  IsaCap(const IsaCap&) = delete;
  IsaCap& operator=(const IsaCap&) = delete;

 private:
  Isa before_;
};

class CpuKernels : public testing::TestWithParam<Isa> {
 protected:
  const cpu::kernels::Table& k() const { return cpu::kernels::table(GetParam()); }
};

// ---- small convolutions ----

struct SmallConvCase {
  i64 N, C, H, W, O, K, pad;
  bool bias;
  std::string what;
};

// The layer's kernels on `c` against the reference: the output and the weight (and bias) gradient.
void check_small_conv(const cpu::kernels::Table& k, const SmallConvCase& c) {
  SCOPED_TRACE(c.what);
  std::mt19937 rng(17);
  const i64 HP = c.H + 2 * c.pad, WP = c.W + 2 * c.pad, OH = HP - c.K + 1, OW = WP - c.K + 1;
  const Vec x = uniform(rng, c.N * c.C * c.H * c.W), w = uniform(rng, c.O * c.C * c.K * c.K, -0.5f, 0.5f),
            b = uniform(rng, c.O, -0.5f, 0.5f), dy = uniform(rng, c.N * c.O * OH * OW);
  // The input inside its zero padding, as the layer gives it.
  Vec xp(static_cast<std::size_t>(c.N * c.C * HP * WP), 0.0f);
  for (i64 plane = 0; plane < c.N * c.C; ++plane)
    for (i64 h = 0; h < c.H; ++h)
      for (i64 v = 0; v < c.W; ++v)
        xp[std::size_t((plane * HP + h + c.pad) * WP + v + c.pad)] = x[std::size_t((plane * c.H + h) * c.W + v)];
  Vec y(static_cast<std::size_t>(c.N * c.O * OH * OW), std::numeric_limits<float>::quiet_NaN());
  Vec dw(w.size(), 0.0f), db(b.size(), 0.0f);
  cpu::kernels::SmallConv s{.N = c.N, .C = c.C, .O = c.O, .K = c.K, .HP = HP, .WP = WP, .OH = OH, .OW = OW};
  s.x = xp.data(), s.w = w.data(), s.bias = c.bias ? b.data() : nullptr, s.y = y.data(), s.dy = dy.data();
  // In two shares, as two threads take them.
  k.small_conv_forward(s, 0, c.N * OH / 2);
  k.small_conv_forward(s, c.N * OH / 2, c.N * OH);
  k.small_conv_weight_grad(s, 0, c.N / 2, dw.data(), c.bias ? db.data() : nullptr);
  k.small_conv_weight_grad(s, c.N / 2, c.N, dw.data(), c.bias ? db.data() : nullptr);

  const ref::ConvShape shape{c.N, c.C, c.H, c.W, c.O, c.K, 1, c.pad};
  const DVec xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
  DVec yr(y.size()), dwr(w.size()), dbr(b.size());
  ref::conv2d_forward(xd.data(), wd.data(), c.bias ? bd.data() : nullptr, yr.data(), shape);
  ref::conv2d_backward(xd.data(), wd.data(), dyd.data(), static_cast<double*>(nullptr), dwr.data(),
                       c.bias ? dbr.data() : nullptr, shape);
  EXPECT_TRUE(close(y, yr)) << "output";
  EXPECT_TRUE(close(dw, dwr)) << "weight gradient";
  if (c.bias) {
    EXPECT_TRUE(close(db, dbr)) << "bias gradient";
  }
}

// LeNet-5's first convolution as the model runs it, and the tiles' edges: rows of one, two and
// several vector-wide pieces, the last overlapping or not (16, 18, 28, 37, 64 wide), output
// channels a multiple of the tiles' or not (5, 6, 7, 8), kernels 3, 5, 7, padding, one channel in.
TEST_P(CpuKernels, SmallConvolutionsMatchTheReference) {
  for (const SmallConvCase& c : {SmallConvCase{4, 3, 32, 32, 6, 5, 0, true, "LeNet-5's conv1"},
                                 SmallConvCase{3, 3, 18, 18, 7, 3, 0, false, "18 wide, 7 channels"},
                                 SmallConvCase{2, 1, 20, 20, 8, 7, 2, true, "padded 7x7, 8 channels"},
                                 SmallConvCase{2, 4, 37, 37, 5, 5, 1, true, "37 wide, padded"},
                                 SmallConvCase{2, 3, 16, 18, 6, 3, 0, true, "16 wide: one piece"},
                                 SmallConvCase{2, 2, 8, 68, 3, 5, 0, true, "64 wide"}})
    check_small_conv(k(), c);
}

// ---- weight gradients into channel blocks ----

struct BlockedGradCase {
  i64 N, C, H, W, O, K, B;
  bool bias;
  std::string what;
};

// blocked_conv_weight_grad on `c` against the reference: the gradient (O / B, K, K, C, B) and
// the bias's (O), from a plain input and an output gradient in B-channel blocks; and
// blocked_conv_data_grad: the input gradient (plain), from the output gradient and weights in
// those blocks.
void check_blocked_grad(const cpu::kernels::Table& k, const BlockedGradCase& c) {
  SCOPED_TRACE(c.what + ", blocks of " + std::to_string(c.B));
  std::mt19937 rng(31);
  const i64 OH = c.H - c.K + 1, OW = c.W - c.K + 1;
  const Vec x = uniform(rng, c.N * c.C * c.H * c.W), dy = uniform(rng, c.N * c.O * OH * OW);
  // dy (N, O, OH, OW) in blocks: (N, O / B, OH, OW, B).
  Vec blocked(dy.size());
  for (i64 n = 0; n < c.N; ++n)
    for (i64 o = 0; o < c.O; ++o)
      for (i64 p = 0; p < OH * OW; ++p)
        blocked[std::size_t(((n * (c.O / c.B) + o / c.B) * OH * OW + p) * c.B + o % c.B)] =
            dy[std::size_t((n * c.O + o) * OH * OW + p)];
  Vec dw(std::size_t(c.O * c.C * c.K * c.K), 0.0f), db(std::size_t(c.O), 0.0f);
  const cpu::kernels::BlockedConvGrad s{.N = c.N,
                                        .C = c.C,
                                        .H = c.H,
                                        .W = c.W,
                                        .O = c.O,
                                        .K = c.K,
                                        .OH = OH,
                                        .OW = OW,
                                        .B = c.B,
                                        .x = x.data(),
                                        .dy = blocked.data()};
  // In two shares, as two threads take them.
  k.blocked_conv_weight_grad(s, 0, c.N / 2, dw.data(), c.bias ? db.data() : nullptr);
  k.blocked_conv_weight_grad(s, c.N / 2, c.N, dw.data(), c.bias ? db.data() : nullptr);

  // (O, C, K, K) in the kernels' blocks, (O / B, K, K, C, B).
  auto to_blocks = [&](const auto& w) {
    std::vector<typename std::decay_t<decltype(w)>::value_type> out(w.size());
    for (i64 o = 0; o < c.O; ++o)
      for (i64 ci = 0; ci < c.C; ++ci)
        for (i64 t = 0; t < c.K * c.K; ++t)
          out[std::size_t(((o / c.B * c.K * c.K + t) * c.C + ci) * c.B + o % c.B)] =
              w[std::size_t((o * c.C + ci) * c.K * c.K + t)];
    return out;
  };
  const Vec w = uniform(rng, c.O * c.C * c.K * c.K);
  Vec dx(x.size(), 1.0f);  // every value must be written
  if (c.K == 3 || c.K == 5 || c.K == 7) {
    k.blocked_conv_data_grad(s, to_blocks(w).data(), 0, c.N / 2, dx.data());
    k.blocked_conv_data_grad(s, to_blocks(w).data(), c.N / 2, c.N, dx.data());
  }

  const ref::ConvShape shape{c.N, c.C, c.H, c.W, c.O, c.K, 1, 0};
  const DVec xd = to_double(x), dyd = to_double(dy), wd = to_double(w);
  DVec dxr(x.size()), dwr(dw.size()), dbr(db.size());
  ref::conv2d_backward(xd.data(), wd.data(), dyd.data(), dxr.data(), dwr.data(), c.bias ? dbr.data() : nullptr, shape);
  EXPECT_TRUE(close(dw, to_blocks(dwr))) << "weight gradient";
  if (c.K == 3 || c.K == 5 || c.K == 7) {
    EXPECT_TRUE(close(dx, dxr)) << "input gradient";
  }
  if (c.bias) {
    EXPECT_TRUE(close(db, dbr)) << "bias gradient";
  } else {
    EXPECT_EQ(db, Vec(db.size(), 0.0f)) << "no bias: its gradient is not touched";
  }
}

// LeNet-5's second convolution as the model runs it, and the tiles' edges: kernels whose columns
// fill no tile, one tile or more than one (3, 5, 7 columns; an ISA takes 8, 6 or 3 a tile),
// two blocks of channels, one input channel; input rows of whole vectors (40 columns) and of one
// column past them (17: the input gradient's last lanes summed alone); blocks of 8 and of 16
// wherever the ISA's vectors divide them.
TEST_P(CpuKernels, BlockedWeightGradientsMatchTheReference) {
  int checked = 0;
  for (const i64 B : {8, 16}) {
    if (B % k().lanes != 0) continue;
    for (const BlockedGradCase& c :
         {BlockedGradCase{4, 6, 14, 14, 16, 5, B, true, "LeNet-5's conv2"},
          BlockedGradCase{3, 2, 9, 11, 32, 3, B, false, "two blocks, 3x3"},
          BlockedGradCase{2, 1, 12, 10, 16, 7, B, true, "7x7, one channel in"},
          BlockedGradCase{2, 3, 5, 40, 16, 3, B, false, "40 columns: whole rows of lanes"},
          BlockedGradCase{2, 2, 6, 17, 16, 3, B, true, "17 columns: one past whole rows of lanes"}}) {
      check_blocked_grad(k(), c);
      ++checked;
    }
  }
  EXPECT_GE(checked, 3) << "every ISA runs blocks of 16";
}

// ---- plain max pooling ----

TEST_P(CpuKernels, PlainMaxPoolingMatchesTheReferenceAndKeepsItsArgmax) {
  struct Case {
    i64 planes, H, W, K;
    std::string what;
  };
  for (const Case& c : {Case{6, 28, 28, 2, "LeNet-5's pool1 (a sample's 6 planes)"},
                        Case{3, 10, 26, 2, "13 outputs a row: a short last piece"},
                        Case{2, 12, 66, 2, "33 outputs a row"}, Case{2, 9, 9, 3, "3x3 windows"},
                        Case{2, 11, 11, 2, "a row and a column unread (their gradient must be written as zero)"}}) {
    SCOPED_TRACE(c.what);
    std::mt19937 rng(29);
    const i64 OH = c.H / c.K, OW = c.W / c.K;
    const Vec x = testing_support::distinct(rng, c.planes * c.H * c.W, 1.0 / 64);
    const Vec dy = uniform(rng, c.planes * OH * OW);
    Vec y(static_cast<std::size_t>(c.planes * OH * OW)), dx(x.size(), 1.0f);
    std::vector<std::int32_t> arg(y.size());
    cpu::kernels::PlainPool p{.planes = c.planes, .K = c.K, .H = c.H, .W = c.W, .OH = OH, .OW = OW};
    p.x = x.data(), p.y = y.data(), p.argmax = arg.data(), p.dy = dy.data(), p.dx = dx.data();
    k().plain_pool_forward(p, 0, c.planes * OH);
    k().plain_pool_backward(p, 0, c.planes);
    const ref::PoolShape shape{1, c.planes, c.H, c.W, c.K, c.K, 0};
    const DVec xd = to_double(x), dyd = to_double(dy);
    DVec yr(y.size()), dxr(x.size());
    ref::maxpool2d_forward(xd.data(), yr.data(), shape);
    ref::maxpool2d_backward(xd.data(), dyd.data(), dxr.data(), shape);
    EXPECT_TRUE(close(y, yr)) << "output";
    // One input of every K x K window receives the gradient, none outside the windows.
    EXPECT_TRUE(close(dx, dxr, 1.0 - double(OH * OW) / double(c.H * c.W) + 1e-9)) << "input gradient";
  }
  // A NaN wins its window wherever it lies (a NaN input gives a NaN output). The reference's
  // strict > lets it win only as its window's first element, so this is checked by hand.
  Vec x(16, 0.0f), y(4), dy(4, 1.0f), dx(16);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::int32_t> arg(4);
  cpu::kernels::PlainPool p{.planes = 1, .K = 2, .H = 4, .W = 4, .OH = 2, .OW = 2};
  p.x = x.data(), p.y = y.data(), p.argmax = arg.data();
  k().plain_pool_forward(p, 0, 2);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(arg[0], 3);
  // The same in 3x3 windows, which take the scalar loop: the NaN in the middle of the first.
  Vec x3(36, 0.0f), y3(4);
  x3[7] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::int32_t> arg3(4);
  cpu::kernels::PlainPool p3{.planes = 1, .K = 3, .H = 6, .W = 6, .OH = 2, .OW = 2};
  p3.x = x3.data(), p3.y = y3.data(), p3.argmax = arg3.data();
  k().plain_pool_forward(p3, 0, 2);
  EXPECT_TRUE(std::isnan(y3[0]));
  EXPECT_EQ(arg3[0], 4);
  EXPECT_EQ(y3[1], 0.0f);
}

// Ties: inputs of three levels, so that most windows hold equal maxima. The window's first
// maximum in row-major order takes the gradient, as in the reference (its strict >): on the
// vector path for 2x2 windows, 13 outputs a row (a short last piece on every ISA), and on the
// scalar path for 3x3.
TEST_P(CpuKernels, PlainMaxPoolingGivesATiesGradientToItsFirstMaximum) {
  for (const i64 K : {2, 3}) {
    SCOPED_TRACE("windows of " + std::to_string(K));
    std::mt19937 rng(61);
    const i64 planes = 2, OH = 4, OW = 13, H = OH * K, W = OW * K;
    Vec x(std::size_t(planes * H * W));
    std::uniform_int_distribution<int> level(0, 2);
    for (float& e : x) e = float(level(rng));
    const Vec dy = uniform(rng, planes * OH * OW);
    Vec y(dy.size()), dx(x.size(), 1.0f);
    std::vector<std::int32_t> arg(y.size());
    cpu::kernels::PlainPool p{.planes = planes, .K = K, .H = H, .W = W, .OH = OH, .OW = OW};
    p.x = x.data(), p.y = y.data(), p.argmax = arg.data(), p.dy = dy.data(), p.dx = dx.data();
    k().plain_pool_forward(p, 0, planes * OH);
    k().plain_pool_backward(p, 0, planes);
    const ref::PoolShape shape{1, planes, H, W, K, K, 0};
    const DVec xd = to_double(x), dyd = to_double(dy);
    DVec yr(y.size()), dxr(x.size());
    ref::maxpool2d_forward(xd.data(), yr.data(), shape);
    ref::maxpool2d_backward(xd.data(), dyd.data(), dxr.data(), shape);
    EXPECT_TRUE(close(y, yr)) << "output";
    EXPECT_TRUE(close(dx, dxr, 1.0 - 1.0 / double(K * K) + 1e-9)) << "input gradient";
  }
}

// ---- max pooling over channel blocks ----

// NCHW <-> (N, C / B, H, W, B), the layout BlockedPool reads and writes.
Vec to_blocks(const Vec& plain, i64 N, i64 C, i64 HW, i64 B) {
  Vec out(plain.size());
  for (i64 n = 0; n < N; ++n)
    for (i64 c = 0; c < C; ++c)
      for (i64 q = 0; q < HW; ++q)
        out[std::size_t(((n * (C / B) + c / B) * HW + q) * B + c % B)] = plain[std::size_t((n * C + c) * HW + q)];
  return out;
}
Vec from_blocks(const Vec& blocked, i64 N, i64 C, i64 HW, i64 B) {
  Vec out(blocked.size());
  for (i64 n = 0; n < N; ++n)
    for (i64 c = 0; c < C; ++c)
      for (i64 q = 0; q < HW; ++q)
        out[std::size_t((n * C + c) * HW + q)] = blocked[std::size_t(((n * (C / B) + c / B) * HW + q) * B + c % B)];
  return out;
}

// LeNet-5's second pooling (16 channels over 10x10, in one block of 16 or two of 8), a row and a
// column no window reads (their gradient must be written as zero), 3x3 windows; blocks of 8 and
// 16 wherever the ISA's vectors divide them.
TEST_P(CpuKernels, BlockedMaxPoolingMatchesTheReference) {
  struct Case {
    i64 N, C, H, K;
    std::string what;
  };
  int checked = 0;
  for (const i64 B : {8, 16}) {
    if (B % k().lanes != 0) continue;
    for (const Case& c : {Case{3, 16, 10, 2, "LeNet-5's pool2"}, Case{2, 32, 11, 2, "a row and a column unread"},
                          Case{2, 16, 9, 3, "3x3 windows"}}) {
      SCOPED_TRACE(c.what + ", blocks of " + std::to_string(B));
      std::mt19937 rng(37);
      const i64 OH = c.H / c.K, HW = c.H * c.H, OHW = OH * OH;
      const Vec x = testing_support::distinct(rng, c.N * c.C * HW, 1.0 / 64);
      const Vec dy = uniform(rng, c.N * c.C * OHW);
      const Vec xb = to_blocks(x, c.N, c.C, HW, B), dyb = to_blocks(dy, c.N, c.C, OHW, B);
      Vec yb(dy.size()), dxb(x.size(), 1.0f);  // every input gradient must be written
      std::vector<std::int32_t> arg(dy.size());
      cpu::kernels::BlockedPool p{.planes = c.N * c.C / B, .B = B, .K = c.K, .H = c.H, .W = c.H, .OH = OH, .OW = OH};
      p.x = xb.data(), p.y = yb.data(), p.argmax = arg.data(), p.dy = dyb.data(), p.dx = dxb.data();
      k().blocked_pool_forward(p, 0, p.planes);
      k().blocked_pool_backward(p, 0, p.planes);
      const ref::PoolShape shape{c.N, c.C, c.H, c.H, c.K, c.K, 0};
      const DVec xd = to_double(x), dyd = to_double(dy);
      DVec yr(dy.size()), dxr(x.size());
      ref::maxpool2d_forward(xd.data(), yr.data(), shape);
      ref::maxpool2d_backward(xd.data(), dyd.data(), dxr.data(), shape);
      EXPECT_TRUE(close(from_blocks(yb, c.N, c.C, OHW, B), yr)) << "output";
      EXPECT_TRUE(close(from_blocks(dxb, c.N, c.C, HW, B), dxr, 0.9)) << "input gradient";
      ++checked;
    }
    // Equal values: the window's first takes the gradient; a NaN wins its window.
    Vec x(std::size_t(4 * 4 * B), 0.5f), y(std::size_t(4 * B)), dy(y.size(), 1.0f), dx(x.size());
    x[std::size_t(5 * B + 1)] = std::numeric_limits<float>::quiet_NaN();  // (1, 1), lane 1
    std::vector<std::int32_t> arg(y.size());
    cpu::kernels::BlockedPool p{.planes = 1, .B = B, .K = 2, .H = 4, .W = 4, .OH = 2, .OW = 2};
    p.x = x.data(), p.y = y.data(), p.argmax = arg.data(), p.dy = dy.data(), p.dx = dx.data();
    k().blocked_pool_forward(p, 0, 1);
    k().blocked_pool_backward(p, 0, 1);
    EXPECT_TRUE(std::isnan(y[1]));
    EXPECT_EQ(arg[1], 3);
    EXPECT_EQ(arg[0], 0);
    EXPECT_EQ(dx[0], 1.0f);
    EXPECT_EQ(dx[std::size_t(B)], 0.0f) << "a tie's second position";
    EXPECT_EQ(dx[std::size_t(5 * B + 1)], 1.0f) << "the NaN's position";
  }
  EXPECT_GE(checked, 3) << "every ISA runs blocks of 16";
}

// ---- the small LSTM ----

TEST_P(CpuKernels, TheSmallLstmMatchesTheReference) {
  struct Case {
    i64 T, N, I, H;
    std::string what;
  };
  for (const Case& c : {Case{35, 20, 5, 5, "the sine model's (35 steps, batch 20, 5 units)"},
                        Case{4, 3, 2, 7, "4H = 28 gates"}, Case{3, 2, 1, 1, "one unit"}}) {
    SCOPED_TRACE(c.what);
    std::mt19937 rng(31);
    const i64 G = 4 * c.H;
    const Vec x = uniform(rng, c.T * c.N * c.I), wx = uniform(rng, c.I * G, -0.5f, 0.5f),
              wh = uniform(rng, c.H * G, -0.5f, 0.5f), bias = uniform(rng, G, -0.5f, 0.5f),
              dh = uniform(rng, c.T * c.N * c.H);
    testing_support::SmallLstmBuffers b(c.T, c.N, c.I, c.H, x, wx, wh, bias, dh);
    const cpu::kernels::SmallLstm s = b.view();
    k().small_lstm_forward(s);
    k().small_lstm_backward(s);
    const ref::LstmShape shape{c.T, c.N, c.I, c.H};
    const DVec xd = to_double(x), wxd = to_double(wx), whd = to_double(wh), bd = to_double(bias), dhd = to_double(dh);
    DVec hr(b.h.size()), dxr(x.size()), dwxr(wx.size()), dwhr(wh.size()), dbr(bias.size());
    ref::LstmCache<double> cache;
    ref::lstm_forward(xd.data(), wxd.data(), whd.data(), bd.data(), hr.data(), cache, shape);
    ref::lstm_backward(xd.data(), wxd.data(), whd.data(), hr.data(), cache, dhd.data(), dxr.data(), dwxr.data(),
                       dwhr.data(), dbr.data(), shape);
    EXPECT_TRUE(close(b.h, hr)) << "output";
    EXPECT_TRUE(close(b.dx, dxr)) << "input gradient";
    EXPECT_TRUE(close(b.dwx, dwxr)) << "input weights' gradient";
    EXPECT_TRUE(close(b.dwh, dwhr)) << "recurrent weights' gradient";
    EXPECT_TRUE(close(b.dbias, dbr)) << "bias gradient";
  }
}

// The gates' activations across their range, to a few ulp (kernels.inc computes e^x to about
// 2 ulp): one step of one unit whose four gates all see the input, from -40 to 40. A sigmoid is
// compared relatively (its small values carry the exponential's error whole), a tanh absolutely
// (2 sigmoid(2x) - 1 keeps no more than 1's precision near 0).
TEST_P(CpuKernels, TheSmallLstmsActivationsHoldAFewUlpAcrossTheirRange) {
  const i64 N = 111;
  Vec x(std::size_t(N), 0.0f);
  for (i64 n = 0; n < N; ++n) x[std::size_t(n)] = float(n - 55) * 0.72f;
  testing_support::SmallLstmBuffers b(1, N, 1, 1, x, Vec(4, 1.0f), Vec(4, 0.0f), Vec(4, 0.0f), Vec(x.size(), 0.0f));
  k().small_lstm_forward(b.view());
  for (i64 n = 0; n < N; ++n) {
    const double v = double(x[std::size_t(n)]), sigmoid = 1.0 / (1.0 + std::exp(-v));
    for (const i64 gate : {0, 1, 3})
      EXPECT_NEAR(b.gates[std::size_t(n * 4 + gate)], sigmoid, 2e-6 * sigmoid)
          << "sigmoid gate " << gate << " at " << v;
    EXPECT_NEAR(b.gates[std::size_t(n * 4 + 2)], std::tanh(v), 2e-6) << "tanh gate at " << v;
  }
}

// ---- the optimizers and sums over flat buffers ----

// Three steps over 40,003 elements (several of the kernels' pieces of work, and an end that fills
// no vector), with a gradient scale (a data-parallel mean folded in), against the reference given
// the scaled gradients; compared on the steps taken, not the parameters, which barely move.
testing::AssertionResult same_steps(const Vec& after, const DVec& reference, const Vec& before) {
  Vec moved(after.size());
  DVec moved_ref(after.size());
  for (std::size_t e = 0; e < after.size(); ++e) {
    moved[e] = after[e] - before[e];
    moved_ref[e] = reference[e] - double(before[e]);
  }
  return close(moved, moved_ref);
}

TEST_P(CpuKernels, SgdMatchesTheReferenceWithWeightDecayAndAGradientScale) {
  const i64 n = 40003;
  std::mt19937 rng(37);
  Vec p = uniform(rng, n), m(static_cast<std::size_t>(n), 0.0f);
  const Vec before = p;
  DVec pr = to_double(p), mr(m.size(), 0.0);
  for (int step = 1; step <= 3; ++step) {
    const Vec g = uniform(rng, n);
    k().sgd(cpu::kernels::Update{.n = n,
                                 .params = p.data(),
                                 .grads = g.data(),
                                 .first = m.data(),
                                 .lr = 0.01f,
                                 .weight_decay = 1e-3f,
                                 .grad_scale = 0.5f,
                                 .momentum = 0.9f});
    DVec gd = to_double(g);
    for (double& e : gd) e *= 0.5;
    ref::sgd_momentum_update(pr.data(), gd.data(), mr.data(), n, 0.01, 0.9, 1e-3);
  }
  EXPECT_TRUE(same_steps(p, pr, before)) << "SGD's steps";
}

TEST_P(CpuKernels, AdamMatchesTheReferenceWithAGradientScale) {
  const i64 n = 40003;
  std::mt19937 rng(41);
  Vec p = uniform(rng, n), m(static_cast<std::size_t>(n), 0.0f), v(m.size(), 0.0f);
  const Vec before = p;
  DVec pr = to_double(p), mr(m.size(), 0.0), vr(m.size(), 0.0);
  for (int step = 1; step <= 3; ++step) {
    const Vec g = uniform(rng, n);
    cpu::kernels::Update u{.n = n,
                           .params = p.data(),
                           .grads = g.data(),
                           .first = m.data(),
                           .second = v.data(),
                           .lr = 0.01f,
                           .grad_scale = 0.5f,
                           .beta1 = 0.9f,
                           .beta2 = 0.999f,
                           .eps = 1e-8f};
    u.bias1 = float(1.0 / (1.0 - std::pow(0.9, step)));
    u.bias2 = float(1.0 / (1.0 - std::pow(0.999, step)));
    k().adam(u);
    DVec gd = to_double(g);
    for (double& e : gd) e *= 0.5;
    ref::adam_update(pr.data(), gd.data(), mr.data(), vr.data(), n, 0.01, 0.9, 0.999, 1e-8, step);
  }
  EXPECT_TRUE(same_steps(p, pr, before)) << "Adam's steps";
}

// The optimizer (engine/optim) hands the kernels every term of its configuration, step after
// step: each hyperparameter changes the steps, so a term dropped or swapped on the way is seen.
// Few elements: the kernels' own tests above cover sizes and ISAs.
TEST(Optimizer, SgdStepsWithItsLearningRateMomentumWeightDecayAndGradientScale) {
  const i64 n = 37;
  std::mt19937 rng(53);
  Vec p = uniform(rng, n);
  const Vec before = p;
  DVec pr = to_double(p), vr(p.size(), 0.0);
  Optimizer sgd(OptimizerConfig{.kind = OptimizerConfig::Kind::SGD, .lr = 0.1, .momentum = 0.8, .weight_decay = 0.05},
                n);
  sgd.set_gradient_scale(0.5f);
  for (int step = 1; step <= 3; ++step) {
    const Vec g = uniform(rng, n);
    sgd.step(p.data(), g.data());
    DVec gd = to_double(g);
    for (double& e : gd) e *= 0.5;
    ref::sgd_momentum_update(pr.data(), gd.data(), vr.data(), n, 0.1, 0.8, 0.05);
  }
  EXPECT_TRUE(same_steps(p, pr, before)) << "SGD's steps";
}

// Adam's weight decay is added to the gradient (L2, as PyTorch's Adam, not AdamW's decoupled
// decay), so the reference is given g * scale + wd * p. Element 0 has no gradient and no weight:
// its moments stay 0 and only eps keeps its step 0 / (0 + eps) = 0 rather than NaN.
TEST(Optimizer, AdamStepsWithItsBetasBiasCorrectionEpsWeightDecayAndGradientScale) {
  const i64 n = 37;
  const double lr = 0.01, beta1 = 0.8, beta2 = 0.9, eps = 1e-8, wd = 0.05;
  std::mt19937 rng(59);
  Vec p = uniform(rng, n);
  p[0] = 0.0f;
  const Vec before = p;
  DVec pr = to_double(p), mr(p.size(), 0.0), vr(p.size(), 0.0);
  Optimizer adam(OptimizerConfig{.kind = OptimizerConfig::Kind::Adam,
                                 .lr = lr,
                                 .weight_decay = wd,
                                 .beta1 = beta1,
                                 .beta2 = beta2,
                                 .eps = eps},
                 n);
  adam.set_gradient_scale(0.5f);
  for (int step = 1; step <= 3; ++step) {
    Vec g = uniform(rng, n);
    g[0] = 0.0f;
    adam.step(p.data(), g.data());
    DVec gd = to_double(g);
    for (std::size_t e = 0; e < gd.size(); ++e) gd[e] = gd[e] * 0.5 + wd * pr[e];
    ref::adam_update(pr.data(), gd.data(), mr.data(), vr.data(), n, lr, beta1, beta2, eps, step);
  }
  EXPECT_TRUE(same_steps(p, pr, before)) << "Adam's steps";
  EXPECT_EQ(p[0], 0.0f) << "a weight with no gradient and no decay stays";
}

// SGD keeps one buffer of state (the velocity), Adam two (the moments); each is named as the
// command line and the CSV name it.
TEST(Optimizer, KeepsOneStateBufferPerMomentAndIsNamedByItsKind) {
  const i64 n = 37;
  EXPECT_EQ(Optimizer(OptimizerConfig{.kind = OptimizerConfig::Kind::SGD}, n).state_bytes(), n * 4);
  EXPECT_EQ(Optimizer(OptimizerConfig{.kind = OptimizerConfig::Kind::Adam}, n).state_bytes(), 2 * n * 4);
  EXPECT_STREQ(optimizer_name(OptimizerConfig::Kind::SGD), "sgd");
  EXPECT_STREQ(optimizer_name(OptimizerConfig::Kind::Adam), "adam");
}

TEST_P(CpuKernels, AddSumsEveryElement) {
  std::mt19937 rng(43);
  const i64 n = 128 * 256 + 3;
  Vec a = uniform(rng, n);
  const Vec b = uniform(rng, n);
  DVec sum(a.size());
  for (std::size_t e = 0; e < a.size(); ++e) sum[e] = double(a[e]) + double(b[e]);
  k().add(a.data(), b.data(), n);
  EXPECT_TRUE(close(a, sum));
}

// Each element's sum over the parts from `offset` on, for counts of 1 to 3 parts and lengths
// around the vector width; nothing past `n` written.
TEST_P(CpuKernels, SumPartsAddsEachElementOfEveryPart) {
  std::mt19937 rng(47);
  const i64 lanes = k().lanes;
  for (int count = 1; count <= 3; ++count)
    for (const i64 n : {i64(0), i64(1), lanes - 1, lanes, lanes + 1, 3 * lanes + 5})
      for (const i64 offset : {i64(0), i64(3)}) {
        std::vector<Vec> parts;
        std::vector<const float*> pointers;
        for (int u = 0; u < count; ++u) parts.push_back(uniform(rng, offset + n));
        for (const Vec& p : parts) pointers.push_back(p.data());
        Vec out(std::size_t(n + 1), -7.0f);
        k().sum_parts(out.data(), pointers.data(), count, offset, n);
        for (i64 i = 0; i < n; ++i) {
          double sum = 0;
          for (const Vec& p : parts) sum += double(p[std::size_t(offset + i)]);
          EXPECT_NEAR(out[std::size_t(i)], sum, 1e-5) << "count " << count << ", n " << n << ", element " << i;
        }
        EXPECT_EQ(out[std::size_t(n)], -7.0f) << "written past n = " << n;
      }
}

// ---- networks on each ISA ----

// LeNet-5 (the small convolution, the plain pooling, Adam) and the sine LSTM trained a few
// steps with each ISA's kernels take the same steps as with the machine's best, to fp32 noise.
TEST_P(CpuKernels, ModelsTrainAlikeOnEveryIsa) {
  for (const auto& [model, dataset] : {std::pair{"lenet5", "cifar10"}, std::pair{"lstm", "sine"}}) {
    SCOPED_TRACE(model);
    const models::Workload w = models::workload(model, dataset);
    const i64 batch = 8;
    std::vector<float> losses[2];
    for (int run = 0; run < 2; ++run) {
      IsaCap cap(run == 0 ? cpu::machine_isa() : GetParam());
      cpu::CpuNetwork net(w.spec, NetworkOptions{.batch = batch, .optimizer = w.optimizer, .seed = 5});
      std::mt19937 rng(47);
      const std::vector<i64> shape = infer_shapes(w.spec, batch).front();
      const Vec input = uniform(rng, product(shape));
      std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
      for (auto& l : labels) l = std::int32_t(rng() % 10);
      const Vec targets = uniform(rng, product(target_shape(w.spec, batch)));
      net.set_batch(BatchView{input.data(), labels.data(), targets.data()});
      for (int step = 0; step < 4; ++step) {
        StepTimes t;
        losses[run].push_back(net.train_step(t));
      }
    }
    for (std::size_t s = 0; s < losses[0].size(); ++s)
      EXPECT_NEAR(losses[1][s], losses[0][s], 1e-4 * (1 + std::abs(losses[0][s]))) << "step " << s;
    EXPECT_LT(losses[0].back(), losses[0].front()) << "training on one batch lowers its loss";
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, CpuKernels, testing::ValuesIn(isas()), isa_label);

// ---- the choice and its cap ----

TEST(CpuIsa, TheCapChoosesAnIsaTheMachineRunsAndBadNamesAreRefused) {
  const Isa best = cpu::machine_isa();
  EXPECT_EQ(cpu::runnable_isas().back(), best);
  EXPECT_EQ(cpu::runnable_isas().front(), Isa::Sse2) << "every x86-64 runs the baseline";
  {
    IsaCap cap(Isa::Sse2);
    EXPECT_EQ(cpu::active_isa(), Isa::Sse2);
    EXPECT_EQ(cpu::kernels::active().isa, Isa::Sse2);
    EXPECT_EQ(cpu::kernels::active().lanes, 4);
  }
  {
    IsaCap cap(Isa::Avx512);  // above the machine's best: its best
    EXPECT_EQ(cpu::active_isa(), best);
  }
  for (Isa isa : cpu::runnable_isas()) {
    EXPECT_EQ(cpu::parse_isa(cpu::isa_name(isa), "TB_MAX_CPU_ISA"), isa);
    EXPECT_EQ(cpu::kernels::table(isa).isa, isa);
  }
  try {
    cpu::parse_isa("avx512_core", "TB_MAX_CPU_ISA");
    FAIL() << "an unknown ISA was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("TB_MAX_CPU_ISA: 'avx512_core' is not an instruction set"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("sse2, avx2, avx512"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tb

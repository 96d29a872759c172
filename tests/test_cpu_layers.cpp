// Checks every oneDNN layer of the CPU backend (engine/cpu) against the plain-loop reference ops
// in double: forward output, input gradient and every parameter gradient, in the layouts oneDNN
// picks (plain and blocked), through the CpuNetwork that plans and binds them; then the network
// itself: what it lets a caller read and refuses, evaluation, resident batches, its hook and lanes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/cpu/context.hpp"
#include "engine/cpu/isa.hpp"
#include "engine/cpu/kernels/kernels.hpp"
#include "engine/cpu/network.hpp"
#include "engine/cpu/peak.hpp"
#include "engine/reference/ops.hpp"
#include "tests/tensors.hpp"

namespace tb {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

using testing_support::close;
using testing_support::kMaxZeroFraction;
using testing_support::to_double;

// An absent optional tensor (bias, input gradient) of the double reference ops; typed, so that
// the templates can deduce their scalar.
constexpr double* kNoTensor = nullptr;

using testing_support::eye;
using testing_support::signed_away_from_zero;
using testing_support::uniform;

// Values 1/64 apart (exact in fp32).
Vec distinct(std::mt19937& rng, i64 n) { return testing_support::distinct(rng, n, 1.0 / 64); }

ModelSpec named(const std::string& name, i64 classes = 0, Task task = Task::Classification) {
  ModelSpec m;
  m.name = name;
  m.classes = classes;
  m.task = task;
  return m;
}

// Values and gradients kept whole (keep_values): these tests read the ones in the middle.
std::unique_ptr<cpu::CpuNetwork> make_net(const ModelSpec& model, i64 batch) {
  NetworkOptions config;
  config.batch = batch;
  config.keep_values = true;
  config.poison_unwritten = true;
  return std::make_unique<cpu::CpuNetwork>(model, config);
}

// ---- One op under test in a graph without a loss: Input -> [feeder] -> op ----
//
// The model input's gradient is never computed, so an op's input gradient is only seen when
// the op reads another layer's output. The feeder is an identity layer without bias (a Linear,
// or a 1x1 Conv2d for images): it passes the input through exactly, in the layout oneDNN chose
// for it (blocked for 16-channel images), and read_grad(feeder) is then the op's input gradient.
// A plain feeder is a padded 3x3 Conv2d with the identity at the centre tap, which for a few
// channels runs as conv2d_small.cpp's loops and so gives the op a plain NCHW input.
struct OpCase {
  ModelSpec model;  // the op is the last node; node 1 is the feeder when there is one
  i64 batch;
  Vec input;
  std::vector<Vec> params;  // in tb::node_params order
  Vec dy;                   // gradient given for the op's output
};

OpCase op_case(ModelSpec model, i64 batch) {
  OpCase c;
  c.model = std::move(model);
  c.batch = batch;
  return c;
}

struct OpResult {
  Vec x;   // what the op read
  Vec y;   // its output
  Vec dx;  // its input gradient (empty without a feeder)
  std::vector<Vec> dparams;
  std::vector<std::string> implementations;  // the network's oneDNN primitives
};

// Runs two identical training passes (forward, backward) and returns the second: gradients must
// be overwritten, not accumulated from step to step, so both passes must agree.
OpResult run_op(const OpCase& c, bool feeder = true) {
  auto net = make_net(c.model, c.batch);
  const int op = int(c.model.nodes.size()) - 1;
  if (feeder) {
    const i64 width = infer_shapes(c.model, c.batch)[0][c.model.input().seq_len > 0 ? 2 : 1];
    const auto* conv = std::get_if<Conv2dSpec>(&c.model.nodes[1].spec);
    if (conv && conv->kernel == 3) {
      Vec w(std::size_t(width * width * 9), 0.0f);
      for (i64 k = 0; k < width; ++k) w[std::size_t((k * width + k) * 9 + 4)] = 1.0f;
      net->write_param(1, 0, w);
    } else {
      net->write_param(1, 0, eye(width));
    }
  }
  for (std::size_t k = 0; k < c.params.size(); ++k) {
    net->write_param(op, int(k), c.params[k]);
    // The canonical <-> backend layout round trip must be exact.
    EXPECT_EQ(net->read_param(op, int(k)), c.params[k]) << "parameter " << k << " round trip";
  }
  net->set_batch(BatchView{c.input.data(), nullptr, nullptr});

  std::vector<OpResult> passes(2);
  for (OpResult& r : passes) {
    net->forward();
    r.x = feeder ? net->read_output(1) : c.input;
    r.y = net->read_output(op);
    net->set_output_grad(c.dy);
    net->backward();
    if (feeder) r.dx = net->read_grad(1);
    for (std::size_t k = 0; k < c.params.size(); ++k) r.dparams.push_back(net->read_param_grad(op, int(k)));
  }
  EXPECT_EQ(passes[0].x, c.input) << "the identity feeder must pass the input through exactly";
  EXPECT_TRUE(close(passes[1].y, to_double(passes[0].y), 1.0)) << "forward differs between passes";
  if (feeder) {
    EXPECT_TRUE(close(passes[1].dx, to_double(passes[0].dx), 1.0)) << "dx differs between passes";
  }
  for (std::size_t k = 0; k < c.params.size(); ++k)
    EXPECT_TRUE(close(passes[1].dparams[k], to_double(passes[0].dparams[k]), 1.0))
        << "gradient of parameter " << k << " differs between passes (accumulated?)";
  passes[1].implementations = net->implementations();
  return passes[1];
}

enum class Feeder { None, Identity, Plain };

ModelSpec image_op(const std::string& name, i64 C, i64 H, i64 W, LayerSpec op, Feeder feeder = Feeder::Identity) {
  ModelSpec m = named(name);
  int x = m.add("input", InputSpec{{C, H, W}}, {});
  if (feeder == Feeder::Identity) x = m.add("feeder", Conv2dSpec{C, C, 1, 1, 0, false}, {x});
  if (feeder == Feeder::Plain) x = m.add("feeder", Conv2dSpec{C, C, 3, 1, 1, false}, {x});
  m.add("op", std::move(op), {x});
  return m;
}

ModelSpec vector_op(const std::string& name, const InputSpec& in, LayerSpec op) {
  ModelSpec m = named(name);
  const i64 F = in.sample_dims.back();
  int x = m.add("input", in, {});
  x = m.add("feeder", LinearSpec{F, F, false}, {x});
  m.add("op", std::move(op), {x});
  return m;
}

// ---- Linear ----

struct LinearCase {
  InputSpec in;  // (F), sequence of (F), or (C, H, W) flattened
  i64 batch, out;
  bool bias;
};

// Readable parameters in test names (and ctest's), rather than gtest's byte dumps.
void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << "in " << to_string(c.in.sample_dims) << " T" << c.in.seq_len << " N" << c.batch << " out " << c.out
      << (c.bias ? " bias" : "");
}

// How many tensors the op's network reorders between a layer's forward and backward layouts
// every step.
long backward_reorders(const OpResult& r) {
  return long(std::count(r.implementations.begin(), r.implementations.end(), std::string(cpu::kBackwardReorder)));
}

class CpuLayersLinear : public testing::TestWithParam<LinearCase> {};

TEST_P(CpuLayersLinear, MatchesReference) {
  const LinearCase& p = GetParam();
  std::mt19937 rng(11);
  const i64 I = product(p.in.sample_dims);
  const bool image = p.in.sample_dims.size() == 3;
  const Dims& d = p.in.sample_dims;
  OpCase c = op_case(image ? image_op("linear", d[0], d[1], d[2], LinearSpec{I, p.out, p.bias})
                           : vector_op("linear", p.in, LinearSpec{I, p.out, p.bias}),
                     p.batch);
  const i64 rows = p.batch * std::max<i64>(1, p.in.seq_len);
  c.input = uniform(rng, rows * I);
  c.params.push_back(uniform(rng, p.out * I, -0.5f, 0.5f));
  if (p.bias) c.params.push_back(uniform(rng, p.out, -0.5f, 0.5f));
  c.dy = uniform(rng, rows * p.out);
  const OpResult r = run_op(c);

  // An image input is flattened in NCHW order: each sample's C*H*W values are one row.
  const DVec x = to_double(r.x), w = to_double(c.params[0]), dy = to_double(c.dy);
  const DVec b = p.bias ? to_double(c.params[1]) : DVec();
  DVec y(rows * p.out), dx(rows * I), dw(p.out * I), db(p.out);
  ref::linear_forward(x.data(), w.data(), p.bias ? b.data() : nullptr, y.data(), rows, I, p.out);
  ref::linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), p.bias ? db.data() : nullptr, rows, I,
                       p.out);
  EXPECT_TRUE(close(r.y, y)) << "output";
  EXPECT_TRUE(close(r.dx, dx)) << "input gradient";
  EXPECT_TRUE(close(r.dparams[0], dw)) << "weight gradient";
  // Backward in forward's layouts: nothing (weights, input, gradients) reordered between them.
  // oneDNN's SSE4.1 inner product has no backward for forward's channel blocks.
  if (cpu::onednn_isa() != "sse41") {
    EXPECT_EQ(backward_reorders(r), 0) << "the inner product's backward in layouts of its own";
  }
  if (p.bias) {
    EXPECT_TRUE(close(r.dparams[1], db)) << "bias gradient";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CpuLayersLinear,
    testing::Values(LinearCase{InputSpec{{20}}, 4, 12, true},         // rows of features
                    LinearCase{InputSpec{{33}}, 3, 17, false},        // odd sizes, no bias
                    LinearCase{InputSpec{{6}, 5}, 3, 4, true},        // time-major sequence (T, N, F)
                    LinearCase{InputSpec{{16, 4, 4}}, 3, 10, true},   // flatten of a blocked conv output
                    LinearCase{InputSpec{{32, 2, 2}}, 2, 7, false},   // blocked, no bias
                    LinearCase{InputSpec{{6, 3, 3}}, 4, 5, true},     // flatten of a plain conv output
                    LinearCase{InputSpec{{256, 1, 1}}, 3, 10, true},  // ResNet's classifier after pooling
                    LinearCase{InputSpec{{16, 3, 2}}, 2, 5, true},    // blocked, a plane of 3x2
                    LinearCase{InputSpec{{6, 2, 3}}, 3, 4, false}),   // plain, a plane of 2x3
    [](const testing::TestParamInfo<LinearCase>& i) { return "case" + std::to_string(i.index); });

// ---- Conv2d ----

struct ConvCase {
  i64 N, C, H, O, kernel, stride, pad;
  bool bias;
  bool feeder = true;     // false: the conv reads the model input and computes no input gradient
  bool small = false;     // runs as conv2d_small.cpp's direct loops rather than on oneDNN
  bool expanded = false;  // runs as conv2d_expanded.cpp's matrix product
  bool patches = false;   // runs as conv2d_patches.cpp's inner product
  // On oneDNN with its weight gradient in trainbench's own loop over oneDNN's forward layouts
  // (a plain input, blocks of output channels): whether it does depends on the layouts oneDNN
  // chooses, so this names the cases that must where oneDNN and trainbench run one ISA.
  bool own_weight_grad = false;
};

// A 1x1 kernel at stride 1 over a plane of at most 4 positions is one matrix product where
// oneDNN runs AVX-512 (conv2d_expanded.cpp keeps such layers channels last there).
const bool kPointwise = cpu::onednn_isa().rfind("avx512", 0) == 0;

void PrintTo(const ConvCase& c, std::ostream* os) {
  *os << "N" << c.N << " C" << c.C << " H" << c.H << " O" << c.O << " k" << c.kernel << " s" << c.stride << " p"
      << c.pad << (c.bias ? " bias" : "") << (c.feeder ? "" : " on the input") << (c.small ? " (direct loops)" : "")
      << (c.expanded ? " (expanded)" : "") << (c.patches ? " (patches)" : "")
      << (c.own_weight_grad ? " (own weight gradient)" : "");
}

// Whether oneDNN runs the ISA trainbench's own kernels run (both capped alike, or neither): the
// layouts oneDNN chooses, and so the paths that follow from them, are then those of a machine
// of that ISA.
bool same_isa_on_both_sides() {
  const std::string onednn = cpu::onednn_isa(), own = cpu::isa_name(cpu::active_isa());
  return own == "sse2" ? onednn == "sse41" : onednn.rfind(own, 0) == 0;
}

class CpuLayersConv2d : public testing::TestWithParam<ConvCase> {};

TEST_P(CpuLayersConv2d, MatchesReference) {
  const ConvCase& p = GetParam();
  std::mt19937 rng(23);
  const ref::ConvShape s{p.N, p.C, p.H, p.H, p.O, p.kernel, p.stride, p.pad};
  const Conv2dSpec spec{p.C, p.O, p.kernel, p.stride, p.pad, p.bias};
  OpCase c = op_case(image_op("conv", p.C, p.H, p.H, spec, p.feeder ? Feeder::Identity : Feeder::None), p.N);
  const i64 out = p.N * p.O * s.out_h() * s.out_w();
  c.input = uniform(rng, p.N * p.C * p.H * p.H);
  c.params.push_back(uniform(rng, p.O * p.C * p.kernel * p.kernel, -0.5f, 0.5f));
  if (p.bias) c.params.push_back(uniform(rng, p.O, -0.5f, 0.5f));
  c.dy = uniform(rng, out);
  const OpResult r = run_op(c, p.feeder);
  const cpu::LayerInput in{cpu::md(), {p.N, p.C, p.H, p.H}, p.feeder};
  EXPECT_EQ(cpu::conv_is_small(spec, in, {p.N, p.O, s.out_h(), s.out_w()}), p.small) << "the cases cover every path";
  EXPECT_EQ(cpu::conv_is_expanded(spec, in, {p.N, p.O, s.out_h(), s.out_w()}), p.expanded)
      << "the cases cover every path";
  EXPECT_EQ(cpu::conv_is_patches(spec, in, {p.N, p.O, s.out_h(), s.out_w()}), p.patches)
      << "the cases cover every path";
  // oneDNN's SSE4.1 kernels choose other layouts; there oneDNN keeps the weight gradient.
  if (same_isa_on_both_sides()) {
    EXPECT_EQ(cpu::conv_weight_grad_is_own(spec, in, {p.N, p.O, s.out_h(), s.out_w()}),
              p.own_weight_grad && cpu::onednn_isa() != "sse41")
        << "the cases cover every path";
    EXPECT_EQ(cpu::conv_data_grad_is_own(spec, in, {p.N, p.O, s.out_h(), s.out_w()}),
              p.own_weight_grad && p.feeder && cpu::onednn_isa() != "sse41" && cpu::kernels::active().registers >= 32)
        << "the cases cover every path (own input gradient)";
  }

  if (p.patches && cpu::onednn_isa() != "sse41") {  // as for Linear
    EXPECT_EQ(backward_reorders(r), 0) << "the patches' inner product's backward in layouts of its own";
  }

  const DVec x = to_double(r.x), w = to_double(c.params[0]), dy = to_double(c.dy);
  const DVec b = p.bias ? to_double(c.params[1]) : DVec();
  DVec y(out), dx(x.size()), dw(w.size()), db(p.O);
  ref::conv2d_forward(x.data(), w.data(), p.bias ? b.data() : nullptr, y.data(), s);
  ref::conv2d_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), p.bias ? db.data() : nullptr, s);
  EXPECT_TRUE(close(r.y, y)) << "output";
  if (p.feeder) {
    // A strided 1x1 convolution never reads 3 of every 4 inputs: their gradient is zero.
    EXPECT_TRUE(close(r.dx, dx, p.kernel < p.stride ? 0.8 : kMaxZeroFraction)) << "input gradient";
  }
  // A 3x3 kernel on a 1x1 plane (or strided to one) reaches the input with few of its taps: the
  // others only ever meet the padding and their gradient is zero (8 of 9 on a 1x1 plane).
  EXPECT_TRUE(close(r.dparams[0], dw, p.expanded ? 0.9 : kMaxZeroFraction)) << "weight gradient";
  if (p.bias) {
    EXPECT_TRUE(close(r.dparams[1], db)) << "bias gradient";
  }
}

// Kernels 1, 3, 5, 7; strides 1 and 2; with and without padding and bias; channel counts that
// oneDNN blocks (16, 32) and that it cannot (3, 6), in both positions.
INSTANTIATE_TEST_SUITE_P(
    Cases, CpuLayersConv2d,
    testing::Values(ConvCase{2, 3, 12, 6, 5, 1, 0, true},                                     // LeNet's conv1
                    ConvCase{2, 6, 10, 16, 5, 1, 0, true, true, false, false, false, true},   // LeNet's conv2
                    ConvCase{2, 2, 9, 32, 3, 1, 0, false, true, false, false, false, true},   // 2 blocks
                    ConvCase{2, 4, 13, 16, 7, 1, 0, false, true, false, false, false, true},  // 7x7
                    ConvCase{2, 6, 10, 16, 5, 1, 0, true, false, false, false, false, true},  // no input gradient
                    ConvCase{2, 16, 8, 32, 3, 1, 1, false},                                   // ResNet 3x3
                    ConvCase{2, 32, 6, 16, 1, 1, 0, false},                                   // ResNet 1x1 reduce
                    ConvCase{2, 16, 9, 16, 3, 2, 1, false},                                   // strided 3x3, odd size
                    ConvCase{2, 32, 8, 32, 1, 2, 0, true},                                    // strided 1x1 projection
                    ConvCase{2, 3, 16, 16, 7, 2, 3, false},                                   // ResNet's stem
                    ConvCase{3, 6, 7, 6, 3, 1, 1, true},                                      // neither side blocked
                    ConvCase{2, 16, 9, 6, 7, 1, 3, true},                                     // blocked in, plain out
                    ConvCase{2, 6, 8, 32, 3, 2, 0, false},          // plain in, blocked out, stride 2
                    ConvCase{2, 64, 4, 256, 1, 1, 0, false},        // ResNet's widths: 1x1 expand
                    ConvCase{2, 128, 5, 128, 3, 2, 1, false},       // strided 3x3 at width 128
                    ConvCase{2, 256, 2, 64, 1, 1, 0, true},         // 1x1 reduce from 256
                    ConvCase{2, 3, 16, 16, 7, 2, 3, false, false},  // stem on the model input
                    ConvCase{2, 16, 6, 16, 3, 1, 1, true, false},   // blocked conv on the model input
                    // Direct loops: rows of two 16-wide pieces overlapping (28 wide), of one (16),
                    // of three (35); output channels a multiple of the tiles' or not; padding.
                    ConvCase{2, 3, 32, 6, 5, 1, 0, true, false, true},   // LeNet's conv1 on the input
                    ConvCase{3, 3, 18, 7, 3, 1, 0, false, false, true},  // one piece, 7 channels
                    ConvCase{2, 1, 20, 8, 7, 1, 2, true, false, true},   // padded 7x7, 8 channels
                    ConvCase{2, 4, 37, 5, 5, 1, 1, true, false, true},   // three pieces, padded
                    ConvCase{2, 3, 12, 6, 5, 1, 0, true, false},         // rows under 16: oneDNN
                    // One matrix product per pair of positions over planes of at most 4
                    // (ResNet-152 at 32x32): a 3x3 kernel on 2x2 and on 1x1 planes, strided
                    // from 2x2 to 1x1, a 1x1 kernel on a 1x1 plane, and on the model input; a
                    // 1x1 kernel on a 2x2 plane, fewer channels out than in and more, on the
                    // model input, and at stride 2 to a 1x1 plane, which run there where the
                    // layer keeps its input channels last (oneDNN at AVX-512), and on oneDNN
                    // elsewhere.
                    ConvCase{3, 16, 2, 32, 3, 1, 1, false, true, false, true},
                    ConvCase{2, 32, 1, 24, 3, 1, 1, false, true, false, true},
                    ConvCase{2, 16, 2, 32, 3, 2, 1, false, true, false, true},
                    ConvCase{2, 48, 1, 64, 1, 1, 0, false, true, false, true},
                    ConvCase{2, 3, 2, 8, 3, 1, 1, false, false, false, true},
                    ConvCase{2, 32, 2, 16, 1, 1, 0, false, true, false, kPointwise},
                    ConvCase{3, 16, 2, 48, 1, 1, 0, false, true, false, kPointwise},
                    ConvCase{2, 24, 2, 8, 1, 1, 0, false, false, false, kPointwise},
                    ConvCase{2, 32, 2, 64, 1, 2, 0, false, true, false, kPointwise},  // stride 2, 2x2 to 1x1
                    // One inner product over the patches of outputs of at most 4 positions from
                    // larger planes: LeNet-5's third (16 -> 120, 4x4 over 5x5), a strided 3x3
                    // from 4x4 to 2x2 (ResNet-152's stage 3 at 32x32), one on the model input,
                    // and a 3x3 with a bias on a 2x2 plane (the other path takes no bias).
                    ConvCase{2, 16, 5, 120, 4, 1, 0, true, true, false, false, true},
                    ConvCase{3, 32, 4, 16, 3, 2, 1, false, true, false, false, true},
                    ConvCase{2, 3, 5, 8, 4, 1, 0, true, false, false, false, true},
                    ConvCase{2, 16, 2, 32, 3, 1, 1, true, true, false, false, true}),
    [](const testing::TestParamInfo<ConvCase>& i) { return "case" + std::to_string(i.index); });

// ---- Pooling ----

struct PoolCase {
  i64 N, C, H, kernel, stride, pad;
  bool plain = false;  // a plain NCHW input (max pooling: PlainMaxPool's loop where kernel = stride)
  // Max pooling in BlockedMaxPool's loop over oneDNN's channel blocks, where oneDNN and trainbench
  // run one ISA (kernel = stride, channels a multiple of the block): no oneDNN pooling primitive.
  bool blocked = false;
  // In blocks of 8 (8 channels): BlockedMaxPool's loop only where the kernels' vectors are at
  // most 8 floats wide; on AVX-512 (16) oneDNN's pooling.
  bool eight = false;
};

void PrintTo(const PoolCase& c, std::ostream* os) {
  *os << "N" << c.N << " C" << c.C << " H" << c.H << " k" << c.kernel << " s" << c.stride << " p" << c.pad
      << (c.plain ? " plain" : "") << (c.blocked ? " blocked" : "") << (c.eight ? " blocks of 8" : "");
}

bool runs_onednn_pooling(const OpResult& r) {
  return std::any_of(r.implementations.begin(), r.implementations.end(),
                     [](const std::string& impl) { return impl.find("pool") != std::string::npos; });
}

class CpuLayersMaxPool : public testing::TestWithParam<PoolCase> {};

TEST_P(CpuLayersMaxPool, MatchesReference) {
  const PoolCase& p = GetParam();
  std::mt19937 rng(31);
  const ref::PoolShape s{p.N, p.C, p.H, p.H, p.kernel, p.stride, p.pad};
  OpCase c = op_case(image_op("maxpool", p.C, p.H, p.H, MaxPool2dSpec{p.kernel, p.stride, p.pad},
                              p.plain ? Feeder::Plain : Feeder::Identity),
                     p.N);
  const i64 out = p.N * p.C * s.out_h() * s.out_w();
  c.input = distinct(rng, p.N * p.C * p.H * p.H);
  c.dy = uniform(rng, out);
  const OpResult r = run_op(c);

  const DVec x = to_double(r.x), dy = to_double(c.dy);
  DVec y(out), dx(x.size());
  ref::maxpool2d_forward(x.data(), y.data(), s);
  ref::maxpool2d_backward(x.data(), dy.data(), dx.data(), s);
  EXPECT_TRUE(close(r.y, y)) << "output";
  // Only the argmax of each window gets a gradient: most of dx is zero by construction, but at
  // least one element in kernel*kernel (less the overlap) must be set.
  EXPECT_TRUE(close(r.dx, dx, 1.0 - 1.0 / double(p.kernel * p.kernel + 1))) << "input gradient";
  // Plain non-overlapping windows run PlainMaxPool on every ISA.
  const bool own =
      p.plain ? p.kernel == p.stride && p.pad == 0 : p.blocked || (p.eight && cpu::kernels::active().lanes <= 8);
  if (p.plain || same_isa_on_both_sides()) {
    EXPECT_EQ(runs_onednn_pooling(r), !own) << "the cases cover every path";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuLayersMaxPool,
                         testing::Values(PoolCase{2, 6, 8, 2, 2, 0},  // 6 channels in blocks of 8: oneDNN
                                         PoolCase{2, 16, 10, 2, 2, 0, false, true},  // blocked, as LeNet's pool2
                                         PoolCase{3, 32, 11, 2, 2, 0, false, true},  // two blocks, a row unread
                                         PoolCase{2, 16, 9, 3, 3, 0, false, true},   // blocked 3x3 windows
                                         PoolCase{2, 16, 8, 3, 2, 1},                // ResNet's stem pool
                                         PoolCase{3, 6, 9, 3, 2, 1},                 // plain, odd size
                                         PoolCase{2, 3, 7, 3, 2, 1},
                                         PoolCase{2, 4, 16, 2, 2, 0, true},  // plain, as LeNet's pool1
                                         PoolCase{3, 3, 17, 2, 2, 0, true},  // plain, odd: a row and column unread
                                         PoolCase{2, 2, 18, 3, 3, 0, true},  // plain 3x3 windows
                                         PoolCase{2, 3, 16, 3, 2, 1, true},  // plain, overlapping: oneDNN
                                         PoolCase{2, 3, 16, 2, 2, 1, true},  // plain, padded 2x2 windows: oneDNN
                                         PoolCase{2, 16, 9, 2, 2, 1},        // blocked, padded 2x2 windows: oneDNN
                                         PoolCase{2, 8, 10, 2, 2, 0, false, false, true}),  // blocks of 8
                         [](const testing::TestParamInfo<PoolCase>& i) { return "case" + std::to_string(i.index); });

class CpuLayersAvgPool : public testing::TestWithParam<PoolCase> {};

TEST_P(CpuLayersAvgPool, MatchesReference) {
  const PoolCase& p = GetParam();
  std::mt19937 rng(37);
  OpCase c = op_case(image_op("avgpool", p.C, p.H, p.H, GlobalAvgPoolSpec{}), p.N);
  c.input = uniform(rng, p.N * p.C * p.H * p.H, -0.5f, 1.f);  // a non-zero mean per channel
  c.dy = uniform(rng, p.N * p.C);
  const OpResult r = run_op(c);

  const DVec x = to_double(r.x), dy = to_double(c.dy);
  DVec y(p.N * p.C), dx(x.size());
  ref::global_avgpool_forward(x.data(), y.data(), p.N, p.C, p.H, p.H);
  ref::global_avgpool_backward(dy.data(), dx.data(), p.N, p.C, p.H, p.H);
  EXPECT_TRUE(close(r.y, y)) << "output";
  EXPECT_TRUE(close(r.dx, dx)) << "input gradient";
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuLayersAvgPool,
                         testing::Values(PoolCase{2, 16, 4, 0, 0, 0},   // blocked
                                         PoolCase{3, 6, 7, 0, 0, 0},    // plain, odd size
                                         PoolCase{2, 32, 1, 0, 0, 0}),  // ResNet at 32x32: 1x1
                         [](const testing::TestParamInfo<PoolCase>& i) { return "case" + std::to_string(i.index); });

// ---- BatchNorm (training mode: batch statistics) ----

struct BnCase {
  i64 N, C, H;
};

void PrintTo(const BnCase& c, std::ostream* os) { *os << "N" << c.N << " C" << c.C << " H" << c.H; }

class CpuLayersBatchNorm : public testing::TestWithParam<BnCase> {};

TEST_P(CpuLayersBatchNorm, MatchesReference) {
  const BnCase& p = GetParam();
  std::mt19937 rng(41);
  const BatchNormSpec spec{.channels = p.C};
  const i64 HW = p.H * p.H, n = p.N * p.C * HW;
  OpCase c = op_case(image_op("batchnorm", p.C, p.H, p.H, spec), p.N);
  // Each channel with its own mean and scale, so that normalising does something.
  c.input = uniform(rng, n);
  const Vec shift = uniform(rng, p.C, -2.f, 2.f), scale = uniform(rng, p.C, 0.5f, 3.f);
  for (i64 i = 0; i < n; ++i) {
    const i64 ch = (i / HW) % p.C;
    c.input[i] = c.input[i] * scale[ch] + shift[ch];
  }
  c.params = {uniform(rng, p.C, 0.5f, 1.5f), uniform(rng, p.C, -0.5f, 0.5f)};
  c.dy = uniform(rng, n);
  const OpResult r = run_op(c);

  const DVec x = to_double(r.x), gamma = to_double(c.params[0]), beta = to_double(c.params[1]), dy = to_double(c.dy);
  DVec y(n), mean(p.C), var(p.C), dx(n), dgamma(p.C), dbeta(p.C);
  ref::batchnorm_forward_train(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(), kNoTensor,
                               kNoTensor, p.N, p.C, HW, spec.eps, spec.momentum);
  ref::batchnorm_backward(x.data(), gamma.data(), mean.data(), var.data(), dy.data(), dx.data(), dgamma.data(),
                          dbeta.data(), p.N, p.C, HW, spec.eps);
  EXPECT_TRUE(close(r.y, y)) << "output";
  EXPECT_TRUE(close(r.dx, dx)) << "input gradient";
  EXPECT_TRUE(close(r.dparams[0], dgamma)) << "gamma gradient";
  EXPECT_TRUE(close(r.dparams[1], dbeta)) << "beta gradient";
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuLayersBatchNorm,
                         testing::Values(BnCase{2, 16, 4},                     // blocked
                                         BnCase{3, 6, 5},                      // plain
                                         BnCase{4, 32, 2},                     // blocked, few values per channel
                                         BnCase{2, 3, 7}, BnCase{2, 256, 3}),  // ResNet's widths
                         [](const testing::TestParamInfo<BnCase>& i) { return "case" + std::to_string(i.index); });

// Each training forward moves the running averages toward the batch's mean and unbiased
// variance by the momentum, in every channel (PyTorch's rule), and evaluation normalises with
// them: three training batches, then an evaluated fourth, against the reference's running
// statistics. The second case makes every term tell: a momentum of 0.9 lets the batches' small
// variances (channels scaled by 0.01 to 0.03) outweigh the initial 1, so that eps counts in
// evaluation, and a 1x1 plane at batch 2 leaves 2 values a channel, whose unbiased variance is
// twice the biased one.
TEST(CpuLayersBatchNorm, RunningStatisticsFollowTheTrainingBatchesAndNormaliseEvaluation) {
  struct Case {
    i64 H;
    double momentum;
    float min_scale, max_scale;
  };
  for (const Case& p : {Case{3, 0.1, 0.5f, 3.f}, Case{1, 0.9, 0.01f, 0.03f}}) {
    SCOPED_TRACE("H " + std::to_string(p.H) + ", momentum " + std::to_string(p.momentum));
    const i64 N = 2, C = 6, HW = p.H * p.H, n = N * C * HW;
    BatchNormSpec spec{.channels = C};
    spec.momentum = p.momentum;
    ModelSpec m = named("bn_running");
    const int bn = m.add("bn", spec, {m.add("input", InputSpec{{C, p.H, p.H}}, {})});
    std::mt19937 rng(103);
    const Vec gamma = uniform(rng, C, 0.5f, 1.5f), beta = uniform(rng, C, -0.1f, 0.1f),
              shift = uniform(rng, C, -2.f, 2.f), scale = uniform(rng, C, p.min_scale, p.max_scale);
    auto next_batch = [&] {
      Vec v = uniform(rng, n);
      for (i64 i = 0; i < n; ++i) v[i] = v[i] * scale[(i / HW) % C] + shift[(i / HW) % C];
      return v;
    };
    auto net = make_net(m, N);
    net->write_param(bn, 0, gamma);
    net->write_param(bn, 1, beta);
    const DVec gd = to_double(gamma), bd = to_double(beta);
    DVec running_mean(C, 0.0), running_var(C, 1.0), y(n), mean(C), var(C);
    for (int step = 0; step < 3; ++step) {
      const Vec input = next_batch();
      net->set_batch(BatchView{input.data(), nullptr, nullptr});
      net->forward();
      const DVec xd = to_double(input);
      ref::batchnorm_forward_train(xd.data(), gd.data(), bd.data(), y.data(), mean.data(), var.data(),
                                   running_mean.data(), running_var.data(), N, C, HW, spec.eps, spec.momentum);
    }
    const Vec input = next_batch();
    net->set_batch(BatchView{input.data(), nullptr, nullptr});
    net->evaluate();
    const DVec xd = to_double(input);
    ref::batchnorm_forward_infer(xd.data(), gd.data(), bd.data(), running_mean.data(), running_var.data(), y.data(), N,
                                 C, HW, spec.eps);
    EXPECT_TRUE(close(net->read_output(bn), y)) << "evaluated with the running statistics";
  }
}

// ---- ReLU and Sigmoid, on images (blocked and plain) and on rows of features ----

struct EltwiseCase {
  bool relu;
  InputSpec in;
  i64 batch;
};

void PrintTo(const EltwiseCase& c, std::ostream* os) {
  *os << (c.relu ? "relu " : "sigmoid ") << to_string(c.in.sample_dims) << " N" << c.batch;
}

class CpuLayersEltwise : public testing::TestWithParam<EltwiseCase> {};

TEST_P(CpuLayersEltwise, MatchesReference) {
  const EltwiseCase& p = GetParam();
  std::mt19937 rng(43);
  const LayerSpec op = p.relu ? LayerSpec(ReLUSpec{}) : LayerSpec(SigmoidSpec{});
  const Dims& d = p.in.sample_dims;
  OpCase c =
      op_case(d.size() == 3 ? image_op("eltwise", d[0], d[1], d[2], op) : vector_op("eltwise", p.in, op), p.batch);
  const i64 n = p.batch * product(d);
  // ReLU: 70% positive, so that its output and gradient are mostly non-zero; sigmoid: across
  // its curved range.
  c.input = p.relu ? signed_away_from_zero(rng, n, 0.7) : uniform(rng, n, -4.f, 4.f);
  c.dy = uniform(rng, n);
  const OpResult r = run_op(c);

  const DVec x = to_double(r.x), dy = to_double(c.dy);
  DVec y(n), dx(n);
  if (p.relu) {
    ref::relu_forward(x.data(), y.data(), n);
    ref::relu_backward(y.data(), dy.data(), dx.data(), n);
  } else {
    ref::sigmoid_forward(x.data(), y.data(), n);
    ref::sigmoid_backward(y.data(), dy.data(), dx.data(), n);
  }
  EXPECT_TRUE(close(r.y, y)) << "output";
  EXPECT_TRUE(close(r.dx, dx)) << "input gradient";
  // oneDNN runs its eltwise forward on layouts with a part-filled channel block as a reference
  // loop; the layer runs it on the whole buffer as one vector instead.
  for (const std::string& impl : r.implementations) {
    if (impl.rfind("eltwise", 0) == 0) {
      EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CpuLayersEltwise,
    testing::Values(EltwiseCase{true, InputSpec{{16, 5, 5}}, 2}, EltwiseCase{true, InputSpec{{6, 4, 4}}, 3},
                    EltwiseCase{true, InputSpec{{37}}, 4}, EltwiseCase{false, InputSpec{{16, 5, 5}}, 2},
                    EltwiseCase{false, InputSpec{{3, 6, 6}}, 2}, EltwiseCase{false, InputSpec{{37}}, 4},
                    // channels that leave padding in 8- and 16-wide blocks
                    EltwiseCase{false, InputSpec{{6, 5, 5}}, 3}, EltwiseCase{false, InputSpec{{120, 2, 2}}, 3},
                    EltwiseCase{true, InputSpec{{120, 2, 2}}, 2}),
    [](const testing::TestParamInfo<EltwiseCase>& i) {
      return std::string(i.param.relu ? "relu" : "sigmoid") + std::to_string(i.index);
    });

// A sigmoid over channels that leave the last block part-filled (20 channels: 12 lanes of a
// second 16-channel block, 4 of a third 8-channel one) turns those lanes into sigmoid(0) = 0.5
// unless it puts them back to zero. A linear layer after it keeps the input's blocked layout and
// its weights the matching one, so nonzero padding gives its weights' padding lanes a gradient;
// an update then makes them nonzero, and the next forward adds padding x padding to the output.
// So: one SGD step, then the output must be the reference's of the weights read back. The plane
// is 3x2, neither square nor one row, and the batch 2, so that every lane of every sample's
// every position counts.
TEST(CpuLayersEltwise, PaddingLanesOfAPartBlockStayZeroThroughAnUpdate) {
  const i64 N = 2, C = 20, H = 3, W = 2, I = C * H * W, O = 5;
  ModelSpec m = named("sigmoid_padding");
  const int x = m.add("input", InputSpec{{C, H, W}}, {});
  const int feeder = m.add("feeder", Conv2dSpec{C, C, 1, 1, 0, false}, {x});
  const int act = m.add("sigmoid", SigmoidSpec{}, {feeder});
  const int fc = m.add("fc", LinearSpec{I, O, false}, {act});
  std::mt19937 rng(107);
  const Vec input = uniform(rng, N * I), dy = uniform(rng, N * O);
  NetworkOptions config;
  config.batch = N;
  config.keep_values = true;
  config.poison_unwritten = true;
  config.optimizer = OptimizerConfig{.lr = 0.5, .momentum = 0.0};
  cpu::CpuNetwork net(m, config);
  net.write_param(feeder, 0, eye(C));
  net.write_param(fc, 0, uniform(rng, O * I, -0.5f, 0.5f));
  net.set_batch(BatchView{input.data(), nullptr, nullptr});
  net.forward();
  net.set_output_grad(dy);
  net.backward();
  net.update();
  net.forward();

  const ref::ConvShape s{N, C, H, W, C, 1, 1, 0};
  const DVec xd = to_double(input), conv_w = to_double(net.read_param(feeder, 0)),
             fc_w = to_double(net.read_param(fc, 0));
  DVec a(N * I), b(N * I), y(N * O);
  ref::conv2d_forward(xd.data(), conv_w.data(), kNoTensor, a.data(), s);
  ref::sigmoid_forward(a.data(), b.data(), N * I);
  ref::linear_forward(b.data(), fc_w.data(), kNoTensor, y.data(), N, I, O);
  EXPECT_TRUE(close(net.read_output(act), b)) << "sigmoid";
  EXPECT_TRUE(close(net.read_output(fc), y)) << "linear after the update";
}

// ---- LSTM: time-major (T, N, I) -> (T, N, H), zero initial state ----

struct LstmCase {
  i64 T, N, I, H;
};

void PrintTo(const LstmCase& c, std::ostream* os) { *os << "T" << c.T << " N" << c.N << " I" << c.I << " H" << c.H; }

class CpuLayersLstm : public testing::TestWithParam<LstmCase> {};

TEST_P(CpuLayersLstm, MatchesReference) {
  const LstmCase& p = GetParam();
  std::mt19937 rng(47);
  const ref::LstmShape s{p.T, p.N, p.I, p.H};
  OpCase c = op_case(vector_op("lstm", InputSpec{{p.I}, p.T}, LSTMSpec{p.I, p.H}), p.N);
  c.input = uniform(rng, p.T * p.N * p.I);
  c.params = {uniform(rng, p.I * 4 * p.H, -0.5f, 0.5f), uniform(rng, p.H * 4 * p.H, -0.5f, 0.5f),
              uniform(rng, 4 * p.H, -0.5f, 0.5f)};
  c.dy = uniform(rng, p.T * p.N * p.H);
  EXPECT_EQ(cpu::lstm_is_small(LSTMSpec{p.I, p.H}), GetParam().H <= 16) << "the cases cover both paths";
  const OpResult r = run_op(c);
  const bool onednn_lstm = std::any_of(r.implementations.begin(), r.implementations.end(),
                                       [](const std::string& impl) { return impl.rfind("rnn", 0) == 0; });
  EXPECT_EQ(onednn_lstm, !cpu::lstm_is_small(LSTMSpec{p.I, p.H})) << "small LSTMs run as the fused loop";

  const DVec x = to_double(r.x), wx = to_double(c.params[0]), wh = to_double(c.params[1]),
             bias = to_double(c.params[2]), dy = to_double(c.dy);
  DVec h(p.T * p.N * p.H), dx(x.size()), dwx(wx.size()), dwh(wh.size()), dbias(bias.size());
  ref::LstmCache<double> cache;
  ref::lstm_forward(x.data(), wx.data(), wh.data(), bias.data(), h.data(), cache, s);
  ref::lstm_backward(x.data(), wx.data(), wh.data(), h.data(), cache, dy.data(), dx.data(), dwx.data(), dwh.data(),
                     dbias.data(), s);
  EXPECT_TRUE(close(r.y, h)) << "output";
  EXPECT_TRUE(close(r.dx, dx)) << "input gradient";
  EXPECT_TRUE(close(r.dparams[0], dwx)) << "input weight gradient";
  EXPECT_TRUE(close(r.dparams[1], dwh)) << "recurrent weight gradient";
  EXPECT_TRUE(close(r.dparams[2], dbias)) << "bias gradient";
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuLayersLstm,
                         // The first three run as the fused small-LSTM loop, the others on oneDNN.
                         testing::Values(LstmCase{4, 3, 5, 7},     // odd sizes
                                         LstmCase{3, 2, 5, 5},     // the model's LSTM
                                         LstmCase{6, 2, 16, 16},   // vector-friendly sizes
                                         LstmCase{4, 3, 9, 33},    // odd sizes, oneDNN
                                         LstmCase{3, 2, 32, 32}),  // vector-friendly, oneDNN
                         [](const testing::TestParamInfo<LstmCase>& i) { return "case" + std::to_string(i.index); });

// ---- Residual add and gradient accumulation over tensors with several consumers ----

// x -> conv a -> relu b; y = add(b, a): a feeds two layers, so its gradient is the sum of the
// one through ReLU and the one straight from the add.
TEST(CpuLayersAdd, ResidualAccumulatesGradient) {
  for (const i64 C : {16, 6}) {
    SCOPED_TRACE("channels " + std::to_string(C));
    const i64 N = 2, H = 5, n = N * C * H * H;
    ModelSpec m = named("residual");
    const int x = m.add("input", InputSpec{{C, H, H}}, {});
    const int a = m.add("a", Conv2dSpec{C, C, 3, 1, 1, true}, {x});
    const int b = m.add("b", ReLUSpec{}, {a});
    const int y = m.add("y", AddSpec{}, {b, a});
    std::mt19937 rng(53);
    const Vec input = uniform(rng, n), w = uniform(rng, C * C * 9, -0.3f, 0.3f), bias = uniform(rng, C, 0.f, 0.3f),
              dy = uniform(rng, n);
    auto net = make_net(m, N);
    net->write_param(a, 0, w);
    net->write_param(a, 1, bias);
    net->set_batch(BatchView{input.data(), nullptr, nullptr});
    net->forward();
    net->set_output_grad(dy);
    net->backward();

    const ref::ConvShape s{N, C, H, H, C, 3, 1, 1};
    const DVec xd = to_double(input), wd = to_double(w), bd = to_double(bias), dyd = to_double(dy);
    DVec av(n), bv(n), yv(n), dbv(n), dav(n), dav_relu(n), dw(wd.size()), db(C);
    ref::conv2d_forward(xd.data(), wd.data(), bd.data(), av.data(), s);
    ref::relu_forward(av.data(), bv.data(), n);
    ref::add_forward(bv.data(), av.data(), yv.data(), n);
    ref::add_backward(dyd.data(), dbv.data(), dav.data(), n);
    ref::relu_backward(bv.data(), dbv.data(), dav_relu.data(), n);
    for (i64 i = 0; i < n; ++i) dav[i] += dav_relu[i];
    ref::conv2d_backward(xd.data(), wd.data(), dav.data(), kNoTensor, dw.data(), db.data(), s);

    EXPECT_TRUE(close(net->read_output(a), av)) << "conv output";
    EXPECT_TRUE(close(net->read_output(y), yv)) << "sum";
    EXPECT_TRUE(close(net->read_grad(b), dbv)) << "gradient of the ReLU output";
    EXPECT_TRUE(close(net->read_grad(a), dav)) << "accumulated gradient of the conv output";
    EXPECT_TRUE(close(net->read_param_grad(a, 0), dw)) << "conv weight gradient";
    EXPECT_TRUE(close(net->read_param_grad(a, 1), db)) << "conv bias gradient";
  }
}

// a feeds two single-input layers (ReLU and Sigmoid) whose outputs are added: the gradient of
// the first consumer to run goes to the accumulation buffer, the other's is added to it.
TEST(CpuLayersAdd, TwoConsumersOfOneTensor) {
  const i64 N = 2, C = 16, H = 4, n = N * C * H * H;
  ModelSpec m = named("fork");
  const int x = m.add("input", InputSpec{{C, H, H}}, {});
  const int a = m.add("a", Conv2dSpec{C, C, 1, 1, 0, false}, {x});
  const int r = m.add("relu", ReLUSpec{}, {a});
  const int s = m.add("sigmoid", SigmoidSpec{}, {a});
  const int y = m.add("y", AddSpec{}, {r, s});
  std::mt19937 rng(59);
  const Vec input = signed_away_from_zero(rng, n, 0.7), dy = uniform(rng, n);
  auto net = make_net(m, N);
  net->write_param(a, 0, eye(C));
  net->set_batch(BatchView{input.data(), nullptr, nullptr});
  net->forward();
  net->set_output_grad(dy);
  net->backward();

  const DVec av = to_double(input), dyd = to_double(dy);  // a is the identity of the input
  DVec rv(n), sv(n), yv(n), dr(n), ds(n), dav(n);
  ref::relu_forward(av.data(), rv.data(), n);
  ref::sigmoid_forward(av.data(), sv.data(), n);
  ref::add_forward(rv.data(), sv.data(), yv.data(), n);
  ref::relu_backward(rv.data(), dyd.data(), dr.data(), n);
  ref::sigmoid_backward(sv.data(), dyd.data(), ds.data(), n);
  for (i64 i = 0; i < n; ++i) dav[i] = dr[i] + ds[i];
  EXPECT_TRUE(close(net->read_output(y), yv)) << "sum";
  EXPECT_TRUE(close(net->read_grad(r), to_double(dy))) << "gradient into the ReLU output";
  EXPECT_TRUE(close(net->read_grad(s), to_double(dy))) << "gradient into the sigmoid output";
  EXPECT_TRUE(close(net->read_grad(a), dav)) << "sum of both consumers' gradients";
}

// add(f, relu(x)): f in the conv's (blocked) layout, relu(x) in the input's plain one, so the
// add reorders its second input forward and its gradient backward.
TEST(CpuLayersAdd, MixedLayouts) {
  const i64 N = 2, C = 16, H = 3, n = N * C * H * H;
  ModelSpec m = named("mixed");
  const int x = m.add("input", InputSpec{{C, H, H}}, {});
  const int f = m.add("f", Conv2dSpec{C, C, 1, 1, 0, false}, {x});
  const int r = m.add("relu", ReLUSpec{}, {x});
  const int y = m.add("y", AddSpec{}, {f, r});
  std::mt19937 rng(61);
  const Vec input = signed_away_from_zero(rng, n, 0.7), w = uniform(rng, C * C, -0.5f, 0.5f), dy = uniform(rng, n);
  auto net = make_net(m, N);
  net->write_param(f, 0, w);
  net->set_batch(BatchView{input.data(), nullptr, nullptr});
  net->forward();
  net->set_output_grad(dy);
  net->backward();

  const ref::ConvShape s{N, C, H, H, C, 1, 1, 0};
  const DVec xd = to_double(input), wd = to_double(w), dyd = to_double(dy);
  DVec fv(n), rv(n), yv(n), dw(wd.size());
  ref::conv2d_forward(xd.data(), wd.data(), kNoTensor, fv.data(), s);
  ref::relu_forward(xd.data(), rv.data(), n);
  ref::add_forward(fv.data(), rv.data(), yv.data(), n);
  ref::conv2d_backward(xd.data(), wd.data(), dyd.data(), kNoTensor, dw.data(), kNoTensor, s);
  EXPECT_TRUE(close(net->read_output(y), yv)) << "sum";
  EXPECT_TRUE(close(net->read_grad(f), dyd)) << "gradient of the first input";
  EXPECT_TRUE(close(net->read_grad(r), dyd)) << "gradient of the second input";
  EXPECT_TRUE(close(net->read_param_grad(f, 0), dw)) << "conv weight gradient";
}

// p (blocked) and q (plain) both feed two adds: s = add(p, q) runs backward after t = add(p, q),
// so both of its input gradients must be set aside and added, each in its own layout.
TEST(CpuLayersAdd, BothInputsFeedLaterLayers) {
  const i64 N = 2, C = 16, H = 3, n = N * C * H * H;
  ModelSpec m = named("diamond");
  const int x = m.add("input", InputSpec{{C, H, H}}, {});
  const int p = m.add("p", Conv2dSpec{C, C, 1, 1, 0, false}, {x});
  const int q = m.add("q", ReLUSpec{}, {x});
  const int s = m.add("s", AddSpec{}, {p, q});
  const int t = m.add("t", SigmoidSpec{}, {s});
  const int u = m.add("u", AddSpec{}, {p, q});
  const int v = m.add("v", AddSpec{}, {t, u});
  std::mt19937 rng(63);
  const Vec input = signed_away_from_zero(rng, n, 0.7), w = uniform(rng, C * C, -0.5f, 0.5f), dy = uniform(rng, n);
  auto net = make_net(m, N);
  net->write_param(p, 0, w);
  net->set_batch(BatchView{input.data(), nullptr, nullptr});
  net->forward();
  net->set_output_grad(dy);
  net->backward();

  // v = sigmoid(p + q) + (p + q): dp = dq = dy * (sigmoid' + 1).
  const ref::ConvShape cs{N, C, H, H, C, 1, 1, 0};
  const DVec xd = to_double(input), wd = to_double(w), dyd = to_double(dy);
  DVec pv(n), qv(n), sv(n), tv(n), vv(n), ds(n), dpq(n), dw(wd.size());
  ref::conv2d_forward(xd.data(), wd.data(), kNoTensor, pv.data(), cs);
  ref::relu_forward(xd.data(), qv.data(), n);
  ref::add_forward(pv.data(), qv.data(), sv.data(), n);
  ref::sigmoid_forward(sv.data(), tv.data(), n);
  ref::add_forward(tv.data(), sv.data(), vv.data(), n);
  ref::sigmoid_backward(tv.data(), dyd.data(), ds.data(), n);
  for (i64 i = 0; i < n; ++i) dpq[i] = ds[i] + dyd[i];
  ref::conv2d_backward(xd.data(), wd.data(), dpq.data(), kNoTensor, dw.data(), kNoTensor, cs);
  EXPECT_TRUE(close(net->read_output(v), vv)) << "output";
  EXPECT_TRUE(close(net->read_grad(p), dpq)) << "gradient of the blocked input";
  EXPECT_TRUE(close(net->read_grad(q), dpq)) << "gradient of the plain input";
  EXPECT_TRUE(close(net->read_param_grad(p, 0), dw)) << "conv weight gradient";
}

// One training step of y = add(first, second) over the model input x and a = x through an
// identity linear layer (N = 3, F = 8): the tests below choose the add's inputs.
struct AddStep {
  static constexpr i64 N = 3, F = 8;
  std::unique_ptr<cpu::CpuNetwork> net;
  int a = 0, y = 0;
  Vec input, dy;
};
AddStep add_step(const char* name, bool first_is_input, unsigned seed) {
  AddStep s;
  ModelSpec m = named(name);
  const int x = m.add("input", InputSpec{{AddStep::F}}, {});
  s.a = m.add("a", LinearSpec{AddStep::F, AddStep::F, false}, {x});
  s.y = m.add("y", AddSpec{}, {first_is_input ? x : s.a, s.a});
  std::mt19937 rng(seed);
  s.input = uniform(rng, AddStep::N * AddStep::F);
  s.dy = uniform(rng, AddStep::N * AddStep::F);
  s.net = make_net(m, AddStep::N);
  s.net->write_param(s.a, 0, eye(AddStep::F));
  s.net->set_batch(BatchView{s.input.data(), nullptr, nullptr});
  s.net->forward();
  s.net->set_output_grad(s.dy);
  s.net->backward();
  return s;
}

// y = add(a, a) = 2a: both of the add's gradients go to the same tensor and must be summed.
TEST(CpuLayersAdd, SameTensorTwice) {
  const AddStep s = add_step("double", false, 67);
  DVec yv(s.input.size()), dav(s.input.size());
  for (std::size_t i = 0; i < s.input.size(); ++i) {
    yv[i] = 2.0 * s.input[i];
    dav[i] = 2.0 * s.dy[i];
  }
  EXPECT_TRUE(close(s.net->read_output(s.y), yv)) << "sum";
  EXPECT_TRUE(close(s.net->read_grad(s.a), dav)) << "gradient of a tensor added to itself";
}

// y = add(x, a) with x the model input: the add computes no gradient for its first input, and
// must still give the second its own.
TEST(CpuLayersAdd, OnlyTheSecondInputNeedsAGradient) {
  const AddStep s = add_step("input_shortcut", true, 109);
  DVec yv(s.input.size());
  for (std::size_t i = 0; i < s.input.size(); ++i) yv[i] = 2.0 * s.input[i];
  EXPECT_TRUE(close(s.net->read_output(s.y), yv)) << "sum";
  EXPECT_TRUE(close(s.net->read_grad(s.a), to_double(s.dy))) << "gradient of the second input";
}

// ---- ThreadPartials: a weight gradient summed over the batch by every OpenMP thread ----

// Each thread adds its share of the samples into a buffer of its own, then writes its share of
// the buffers' sums: every sample counted once, every weight and bias written, nothing past
// them, and no bias where none is given. Sizes of a few elements, on 1 to 3 threads, so that a
// thread's share of the weights or of the biases is one element or none. Sums of small integers,
// exact in fp32.
TEST(CpuThreadPartials, SumEverySampleIntoEveryWeightAndBiasOnce) {
  const int threads = omp_get_max_threads();
  const i64 samples = 5;
  for (const int team : {1, 2, 3})
    for (const auto& [weights, biases] : std::vector<std::pair<i64, i64>>{{3, 1}, {5, 2}, {1, 1}, {6, 0}})
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE(std::to_string(team) + " threads, " + std::to_string(weights) + " weights, " +
                     std::to_string(biases) + " biases" + (with_bias ? "" : ", no bias given"));
        omp_set_num_threads(team);
        cpu::ThreadPartials partials(weights, biases);
        Vec dweights(std::size_t(weights), NAN), dbias(std::size_t(biases), NAN);
        // Twice: a step's sums start afresh, not from the last step's buffers.
        for (int step = 0; step < 2; ++step)
          partials.sum(samples, dweights.data(), with_bias ? dbias.data() : nullptr,
                       [&](i64 first, i64 last, float* dw, float* db) {
                         for (i64 s = first; s < last; ++s) {
                           for (i64 i = 0; i < weights; ++i) dw[i] += float((s + 1) * (i + 1));
                           if (db)
                             for (i64 j = 0; j < biases; ++j) db[j] += float((s + 1) * (j + 100));
                         }
                       });
        const i64 each = samples * (samples + 1) / 2;  // 1 + 2 + ... + samples
        Vec want_weights(static_cast<std::size_t>(weights)), want_bias(static_cast<std::size_t>(biases));
        for (i64 i = 0; i < weights; ++i) want_weights[std::size_t(i)] = float(each * (i + 1));
        for (i64 j = 0; j < biases; ++j) want_bias[std::size_t(j)] = float(each * (j + 100));
        EXPECT_EQ(dweights, want_weights);
        if (with_bias) {
          EXPECT_EQ(dbias, want_bias);
        } else {
          EXPECT_TRUE(std::all_of(dbias.begin(), dbias.end(), [](float b) { return std::isnan(b); }))
              << "no bias given, none written";
        }
      }
  omp_set_num_threads(threads);
}

// ---- Losses: the value forward returns and the gradient of the logits or predictions ----

// The message of the Error that `act` throws, or "" where it throws none.
template <class Act>
std::string refusal(Act act) {
  try {
    act();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool mentions(const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; }

TEST(CpuLayersLoss, SoftmaxCrossEntropy) {
  for (const auto& [N, K] : std::vector<std::pair<i64, i64>>{{5, 7}, {8, 10}, {3, 1000}}) {
    SCOPED_TRACE("N " + std::to_string(N) + ", K " + std::to_string(K));
    ModelSpec m = named("sce", K);
    const int x = m.add("input", InputSpec{{K}}, {});
    const int logits = m.add("logits", LinearSpec{K, K, false}, {x});
    m.add("loss", SoftmaxCrossEntropySpec{K}, {logits});
    std::mt19937 rng(71);
    const Vec input = uniform(rng, N * K, -3.f, 3.f);
    std::vector<std::int32_t> labels(N);
    std::uniform_int_distribution<std::int32_t> label(0, std::int32_t(K - 1));
    for (auto& l : labels) l = label(rng);

    auto net = make_net(m, N);
    net->write_param(logits, 0, eye(K));
    net->set_batch(BatchView{input.data(), labels.data(), nullptr});
    const float loss = net->forward();
    net->backward();

    const DVec xd = to_double(input);
    DVec dlogits(N * K);
    const double ref_loss = ref::softmax_cross_entropy_forward(xd.data(), labels.data(), N, K);
    ref::softmax_cross_entropy_backward(xd.data(), labels.data(), dlogits.data(), N, K);
    EXPECT_TRUE(close({loss}, {ref_loss})) << "loss";
    EXPECT_TRUE(close(net->read_output(m.loss_node()), {ref_loss})) << "loss node output";
    EXPECT_TRUE(close(net->read_grad(logits), dlogits)) << "gradient of the logits";
  }
}

// One step of `m`, whose node `pred` (a linear or 1x1 convolution of `features` in and out) gets
// identity weights, so that its predictions are `input`: the mean squared error against `targets`
// and the predictions' gradient are the reference's.
void expect_reference_mse(const ModelSpec& m, int pred, i64 batch, i64 features, const Vec& input, const Vec& targets) {
  auto net = make_net(m, batch);
  net->write_param(pred, 0, eye(features));
  net->set_batch(BatchView{input.data(), nullptr, targets.data()});
  const float loss = net->forward();
  net->backward();
  const i64 n = i64(input.size());
  const DVec pd = to_double(input), td = to_double(targets);
  DVec dpred(n);
  const double ref_loss = ref::mse_forward(pd.data(), td.data(), n);
  ref::mse_backward(pd.data(), td.data(), dpred.data(), n);
  EXPECT_TRUE(close({loss}, {ref_loss})) << "loss";
  EXPECT_TRUE(close(net->read_grad(pred), dpred)) << "gradient of the predictions";
}

// Predictions in a blocked layout (a 16-channel convolution's output) are brought to a plain one
// for the loss and their gradient taken back; a loss straight on the model input computes no
// gradient.
TEST(CpuLayersLoss, MeanSquaredErrorOfBlockedPredictionsAndOfTheModelInput) {
  const i64 N = 2, C = 16, H = 2, n = N * C * H * H;
  ModelSpec m = named("mse_blocked", 0, Task::Regression);
  const int x = m.add("input", InputSpec{{C, H, H}}, {});
  const int pred = m.add("pred", Conv2dSpec{C, C, 1, 1, 0, false}, {x});
  m.add("loss", MSESpec{}, {pred});
  std::mt19937 rng(113);
  const Vec input = uniform(rng, n), targets = uniform(rng, n);
  expect_reference_mse(m, pred, N, C, input, targets);

  ModelSpec bare = named("mse_input", 0, Task::Regression);
  bare.add("loss", MSESpec{}, {bare.add("input", InputSpec{{4}}, {})});
  auto direct = make_net(bare, N);
  direct->set_batch(BatchView{input.data(), nullptr, targets.data()});
  const float direct_loss = direct->forward();
  EXPECT_EQ(refusal([&] { direct->backward(); }), "");
  EXPECT_TRUE(close({direct_loss}, {ref::mse_forward(to_double(input).data(), to_double(targets).data(), N * 4)}))
      << "loss on the model input";
}

TEST(CpuLayersLoss, MeanSquaredError) {
  // Rows of features, and a time-major sequence of scalars as the LSTM model predicts.
  for (const InputSpec& in : {InputSpec{{6}}, InputSpec{{1}, 5}}) {
    SCOPED_TRACE("sequence length " + std::to_string(in.seq_len));
    const i64 N = 4, F = in.sample_dims[0], n = N * F * std::max<i64>(1, in.seq_len);
    ModelSpec m = named("mse", 0, Task::Regression);
    const int x = m.add("input", in, {});
    const int pred = m.add("pred", LinearSpec{F, F, false}, {x});
    m.add("loss", MSESpec{}, {pred});
    std::mt19937 rng(73);
    const Vec input = uniform(rng, n), targets = uniform(rng, n);
    expect_reference_mse(m, pred, N, F, input, targets);
  }
}

// correct() counts the samples whose largest logit is their label's, the first of equal largest
// ones, afresh in every forward. Logits 800 apart overflow exp() in float and in double unless
// each row is shifted by its largest: the loss and the gradient must stay finite and right. A
// label equal to the class count is refused.
TEST(CpuLayersLoss, SoftmaxCrossEntropyCountsCorrectAnswersAndTakesLogitsFarApart) {
  const i64 N = 4, K = 5;
  ModelSpec m = named("sce_correct", K);
  const int x = m.add("input", InputSpec{{K}}, {});
  const int logits = m.add("logits", LinearSpec{K, K, false}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{K}, {logits});
  const Vec input{0.5f,   -1.f,  0.25f, 1.f,  2.f,     // the last class largest, label 4: right
                  0.f,    1.5f,  -2.f,  1.5f, 0.75f,   // classes 1 and 3 tie, label 1: right
                  0.5f,   -0.5f, 3.f,   1.f,  -1.f,    // class 2 largest, label 0: wrong
                  -400.f, 200.f, 400.f, 0.f,  100.f};  // class 2 largest, label 2: right
  std::vector<std::int32_t> labels{4, 1, 0, 2};
  auto net = make_net(m, N);
  net->write_param(logits, 0, eye(K));
  net->set_batch(BatchView{input.data(), labels.data(), nullptr});
  const DVec xd = to_double(input);
  DVec dlogits(N * K);
  const double ref_loss = ref::softmax_cross_entropy_forward(xd.data(), labels.data(), N, K);
  ref::softmax_cross_entropy_backward(xd.data(), labels.data(), dlogits.data(), N, K);
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    const float loss = net->forward();
    EXPECT_EQ(net->correct(), 3);
    net->backward();
    EXPECT_TRUE(close({loss}, {ref_loss})) << "loss";
    EXPECT_TRUE(close(net->read_grad(logits), dlogits)) << "gradient of the logits";
  }
  labels[1] = std::int32_t(K);
  net->set_batch(BatchView{input.data(), labels.data(), nullptr});
  const std::string message = refusal([&] { net->forward(); });
  EXPECT_TRUE(mentions(message, "label 5 of sample 1 is outside [0, 5)")) << message;
}
// ---- The network itself: what it lets a caller read, what it refuses, its hook and lanes ----

// x -> a -> b (bias-free linears) -> c = add(b, b) -> mean squared error. b's value is last read
// by the add's forward (an add's backward reads nothing), b's gradient by b's backward: after
// those, their bytes may be given to other values.
ModelSpec doubled_chain() {
  ModelSpec m = named("chain", 0, Task::Regression);
  const int x = m.add("input", InputSpec{{4}}, {});
  const int a = m.add("a", LinearSpec{4, 4, false}, {x});
  const int b = m.add("b", LinearSpec{4, 4, false}, {a});
  const int c = m.add("c", AddSpec{}, {b, b});
  m.add("loss", MSESpec{}, {c});
  return m;
}

// A network of `batch` sharing memory as planned (no keep_values), on `lanes` (0: its choice).
NetworkOptions planned(i64 batch, int lanes = 0) {
  NetworkOptions c;
  c.batch = batch;
  c.lanes = lanes;
  return c;
}

// With identity weights: a = b = x, c = 2x.
std::unique_ptr<cpu::CpuNetwork> identity_chain(const ModelSpec& m, i64 batch, bool poison_dead) {
  NetworkOptions c = planned(batch);
  c.poison_dead = poison_dead;
  auto net = std::make_unique<cpu::CpuNetwork>(m, c);
  net->write_param(1, 0, eye(4));
  net->write_param(2, 0, eye(4));
  return net;
}

// The identity chain of a batch of 3 after forward, its input drawn from `seed`.
struct ForwardedChain {
  Vec input;
  std::unique_ptr<cpu::CpuNetwork> net;
};
ForwardedChain forwarded_identity_chain(bool poison_dead, unsigned seed) {
  const i64 N = 3;
  std::mt19937 rng(seed);
  ForwardedChain chain{uniform(rng, N * 4), identity_chain(doubled_chain(), N, poison_dead)};
  const Vec targets = uniform(rng, N * 4);
  chain.net->set_batch(BatchView{chain.input.data(), nullptr, targets.data()});
  chain.net->forward();
  return chain;
}

// With dead blocks poisoned, a value read after its last use in forward, or a gradient after its
// last use in backward, is refused by name with the way out; what is still alive is read.
TEST(CpuNetwork, AValueOrGradientReadAfterItsLifeIsRefusedWhereDeadBlocksArePoisoned) {
  auto [input, net] = forwarded_identity_chain(true, 79);
  EXPECT_TRUE(mentions(refusal([&] { net->read_output(2); }),
                       "chain/b: its output shares bytes with others after its last use in the step; build the "
                       "network with keep_values to read it"))
      << refusal([&] { net->read_output(2); });
  EXPECT_EQ(net->read_output(1), input) << "a is read by b's backward, so it lives on";
  Vec doubled(input.size());
  for (std::size_t k = 0; k < input.size(); ++k) doubled[k] = 2 * input[k];
  EXPECT_EQ(net->read_output(3), doubled) << "c is read by the loss";
  net->backward();
  EXPECT_TRUE(mentions(refusal([&] { net->read_grad(2); }), "chain/b: its gradient shares bytes with others"))
      << refusal([&] { net->read_grad(2); });
  EXPECT_EQ(refusal([&] { net->read_grad(1); }), "") << "a's gradient is read by a's backward, the last";
}

// Without poison, a value past its last use is read while no other block has had its bytes:
// after forward no gradient has been written yet, so b is still x.
TEST(CpuNetwork, ADeadValueWhoseBytesNoOneReusedIsReadWhereBlocksAreNotPoisoned) {
  const ForwardedChain chain = forwarded_identity_chain(false, 83);
  EXPECT_EQ(chain.net->read_output(2), chain.input);
}

// evaluate() runs each layer's inference pass: a batch norm normalises with its running
// statistics (mean 0, variance 1 before any training step), not with the batch's own.
TEST(CpuNetwork, EvaluationNormalisesWithTheRunningStatisticsNotTheBatchs) {
  const i64 N = 2, C = 2, H = 2, n = N * C * H * H;
  ModelSpec m = named("bn");
  const int x = m.add("input", InputSpec{{C, H, H}}, {});
  const int bn = m.add("bn", BatchNormSpec{C}, {x});
  std::mt19937 rng(89);
  const Vec input = uniform(rng, n, 1.0f, 3.0f);
  auto net = make_net(m, N);
  net->set_batch(BatchView{input.data(), nullptr, nullptr});
  EXPECT_EQ(net->evaluate(), 0.0f) << "a model without a loss";
  DVec want(n);
  for (i64 k = 0; k < n; ++k) want[std::size_t(k)] = input[std::size_t(k)] / std::sqrt(1.0 + 1e-5);
  EXPECT_TRUE(close(net->read_output(bn), want));
}

// A dataset whose batches hold first, first + 1, ... in every value (4 features a sample).
class Numbered final : public Dataset {
 public:
  Numbered(i64 batch, float first) : value_(first) { batch_.batch = batch; }
  const Batch& next() override {
    batch_.input.assign(std::size_t(batch_.batch * 4), value_++);
    return batch_;
  }
  std::string name() const override { return "numbered"; }
  std::string source() const override { return "synthetic"; }

 private:
  Batch batch_;
  float value_;
};

// make_resident keeps the batches of its last call only, and at least one; use_resident(k) gives
// batch k of them, round and round.
TEST(CpuNetwork, ResidentBatchesAreTheLastCallsAndAtLeastOne) {
  ModelSpec m = named("resident");
  const int x = m.add("input", InputSpec{{4}}, {});
  m.add("fc", LinearSpec{4, 2}, {x});
  cpu::CpuNetwork net(m, planned(2));
  Numbered first(2, 10.0f), second(2, 20.0f);
  EXPECT_TRUE(mentions(refusal([&] { net.make_resident(first, 0); }), "a resident dataset needs at least one batch"));
  net.make_resident(first, 2);
  net.make_resident(second, 2);
  for (i64 k = 0; k < 3; ++k) {
    net.use_resident(k);
    EXPECT_EQ(net.read_output(0), Vec(8, 20.0f + float(k % 2))) << "resident batch " << k;
  }
}

// The output gradient is given only to a model without a loss, and only of the output's size; such
// a model counts no correct answers.
TEST(CpuNetwork, AnOutputGradientIsGivenOnlyWithoutALossAndOfTheOutputsSize) {
  ModelSpec plain = named("plain");
  plain.add("fc", LinearSpec{4, 2}, {plain.add("input", InputSpec{{4}}, {})});
  cpu::CpuNetwork net(plain, planned(3));
  EXPECT_TRUE(mentions(refusal([&] { net.set_output_grad(Vec(5)); }), "output gradient has 5 values, expected 6"));
  EXPECT_EQ(refusal([&] { net.set_output_grad(Vec(6)); }), "");
  EXPECT_EQ(net.correct(), -1);
  cpu::CpuNetwork with_loss(doubled_chain(), planned(3));
  EXPECT_TRUE(
      mentions(refusal([&] { with_loss.set_output_grad(Vec(12)); }), "the gradient of a loss is computed, not given"));
}

// Parameters are named by node and index; one a node does not have is refused by name, as is a
// value of the wrong size.
TEST(CpuNetwork, AParameterTheNodeDoesNotHaveIsRefused) {
  ModelSpec m = named("params");
  m.add("fc", LinearSpec{4, 2}, {m.add("input", InputSpec{{4}}, {})});
  cpu::CpuNetwork net(m, planned(1));
  EXPECT_EQ(net.read_param(1, 1).size(), 2u) << "the bias";
  EXPECT_TRUE(mentions(refusal([&] { net.read_param(1, 2); }), "node 1 has no parameter 2"));
  EXPECT_TRUE(mentions(refusal([&] { net.read_param_grad(0, 0); }), "node 0 has no parameter 0"));
  EXPECT_TRUE(mentions(refusal([&] { net.read_param(2, 0); }), "node 2 has no parameter 0"));
  EXPECT_TRUE(mentions(refusal([&] { net.write_param(1, 0, Vec(7)); }), "parameter 0 of node 1: 7 values given"));
}

// x -> a -> relu -> b -> softmax cross-entropy, which the network may cut into lanes.
ModelSpec small_classifier() {
  ModelSpec m = named("small", 3);
  const int x = m.add("input", InputSpec{{4}}, {});
  const int a = m.add("a", LinearSpec{4, 6}, {x});
  const int b = m.add("b", LinearSpec{6, 3}, {m.add("relu", ReLUSpec{}, {a})});
  m.add("loss", SoftmaxCrossEntropySpec{3}, {b});
  return m;
}

struct ClassifierBatch {
  Vec input;
  std::vector<std::int32_t> labels;
  BatchView view() const { return BatchView{input.data(), labels.data(), nullptr}; }
};

ClassifierBatch classifier_batch(i64 N) {
  std::mt19937 rng(97);
  ClassifierBatch c{uniform(rng, N * 4), std::vector<std::int32_t>(std::size_t(N))};
  for (i64 k = 0; k < N; ++k) c.labels[std::size_t(k)] = std::int32_t(k % 3);
  return c;
}

// Two lanes give a node's gradient of the whole batch's mean loss, as one network does (each
// lane's is of its own half's mean), and leave the caller's OpenMP threads as they found them
// (each lane's layers are made for one thread).
TEST(CpuNetwork, LanesGiveTheWholeBatchsNodeGradientsAndLeaveTheCallersThreads) {
  const ModelSpec m = small_classifier();
  const i64 N = 4;
  const ClassifierBatch batch = classifier_batch(N);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);
  NetworkOptions one = planned(N, 1), two = planned(N, 2);
  one.keep_values = two.keep_values = true;
  cpu::CpuNetwork whole(m, one), lanes(m, two);
  ASSERT_EQ(lanes.lanes(), 2);
  EXPECT_EQ(omp_get_max_threads(), 3) << "after making two lanes";
  for (cpu::CpuNetwork* net : {&whole, &lanes}) {
    net->set_batch(batch.view());
    net->forward();
    net->backward();
  }
  EXPECT_EQ(omp_get_max_threads(), 3) << "after a step on two lanes";
  omp_set_num_threads(threads);
  const Vec want = whole.read_grad(1);
  EXPECT_TRUE(close(lanes.read_grad(1), DVec(want.begin(), want.end()))) << "the gradient of a's output";
}

// The step hook hears each node with parameters once its gradients are final, last node first,
// then backward's end and the update's, with one lane and with two.
TEST(CpuNetwork, TheStepHookHearsEachNodeWithParametersInBackwardOrderThenTheStepsEnds) {
  const ModelSpec m = small_classifier();
  const ClassifierBatch batch = classifier_batch(4);
  for (const int lanes : {1, 2}) {
    SCOPED_TRACE(std::to_string(lanes) + " lanes");
    cpu::CpuNetwork net(m, planned(4, lanes));
    ASSERT_EQ(net.lanes(), lanes);
    std::vector<int> heard;
    net.set_step_hook([&](int node) { heard.push_back(node); });
    net.set_batch(batch.view());
    net.forward();
    net.backward();
    net.update();
    EXPECT_EQ(heard, (std::vector<int>{3, 1, kBackwardDone, kStepEnqueued}));
  }
}

// A gradient scale given to the update (a data-parallel mean folded into it) scales every lane's
// step: plain SGD moves each weight by lr x scale x its gradient.
TEST(CpuNetwork, AGradientScaleInTheUpdateScalesTheStep) {
  const ModelSpec m = small_classifier();
  const ClassifierBatch batch = classifier_batch(4);
  for (const int lanes : {1, 2}) {
    SCOPED_TRACE(std::to_string(lanes) + " lanes");
    NetworkOptions c = planned(4, lanes);
    c.optimizer = OptimizerConfig{.lr = 0.1, .momentum = 0.0};
    cpu::CpuNetwork net(m, c);
    net.set_batch(batch.view());
    net.forward();
    net.backward();
    const Vec before = net.read_param(3, 0), grad = net.read_param_grad(3, 0);
    EXPECT_TRUE(net.scale_gradients_in_update(0.5f));
    net.update();
    DVec want(before.size());
    for (std::size_t k = 0; k < want.size(); ++k) want[k] = double(before[k]) - 0.1 * 0.5 * double(grad[k]);
    EXPECT_TRUE(close(net.read_param(3, 0), want));
  }
}

// With keep_values every node is the model's own: a max pool after a ReLU is not moved before
// it (as pools_before_activations moves it where values are not read), so the ReLU node holds
// the ReLU of the whole input and the pool node its 2x2 maxima.
TEST(CpuNetwork, KeptValuesAreTheModelsOwnNodesWithTheirPoolsAfterTheirActivations) {
  const i64 N = 2, H = 4, n = N * H * H;
  ModelSpec m = named("relu_pool");
  const int x = m.add("input", InputSpec{{1, H, H}}, {});
  const int relu = m.add("relu", ReLUSpec{}, {x});
  const int pool = m.add("pool", MaxPool2dSpec{2, 2}, {relu});
  std::mt19937 rng(101);
  const Vec input = signed_away_from_zero(rng, n, 0.5);
  auto net = make_net(m, N);
  net->set_batch(BatchView{input.data(), nullptr, nullptr});
  net->forward();
  Vec relu_want(input.size()), pool_want(std::size_t(n / 4), 0.0f);
  for (i64 k = 0; k < n; ++k) {
    relu_want[std::size_t(k)] = std::max(input[std::size_t(k)], 0.0f);
    const i64 sample = k / (H * H), row = k / H % H, column = k % H;
    float& window = pool_want[std::size_t(sample * 4 + row / 2 * 2 + column / 2)];
    window = std::max(window, relu_want[std::size_t(k)]);
  }
  EXPECT_EQ(net->read_output(relu), relu_want);
  EXPECT_EQ(net->read_output(pool), pool_want);
}

// A lane's failure reaches the caller: a label outside the classes, in the second half of the
// batch, is refused by forward with two lanes as with one, naming the sample by its place in the
// whole batch (the second lane called sample 3 its sample 1).
TEST(CpuNetwork, ALanesFailureReachesTheCaller) {
  const ModelSpec m = small_classifier();
  ClassifierBatch batch = classifier_batch(4);
  batch.labels[3] = 7;
  for (const int lanes : {1, 2}) {
    SCOPED_TRACE(std::to_string(lanes) + " lanes");
    cpu::CpuNetwork net(m, planned(4, lanes));
    ASSERT_EQ(net.lanes(), lanes);
    net.set_batch(batch.view());
    const std::string message = refusal([&] { net.forward(); });
    EXPECT_TRUE(mentions(message, "label 7 of sample 3 is outside [0, 3)")) << message;
  }
}

// The comparison itself must catch what it is there to catch.
TEST(CpuLayersHarness, ComparisonRejectsBadResults) {
  const DVec ref{1.0, -2.0, 3.0, 0.5};
  EXPECT_TRUE(close({1.f, -2.f, 3.f, 0.5f}, ref));
  EXPECT_FALSE(close({1.f, -2.f, 3.01f, 0.5f}, ref)) << "an element out of tolerance";
  EXPECT_FALSE(close({1.f, -2.f, NAN, 0.5f}, ref)) << "NaN";
  EXPECT_FALSE(close({1.f, -2.f, INFINITY, 0.5f}, ref)) << "Inf";
  EXPECT_FALSE(close({1.f, -2.f, 3.f}, ref)) << "size";
  EXPECT_FALSE(close({0.f, 0.f, 0.f, 1.f}, {0.0, 0.0, 0.0, 1.0})) << "mostly zero";
  EXPECT_TRUE(close({0.f, 0.f, 0.f, 1.f}, {0.0, 0.0, 0.0, 1.0}, 1.0)) << "zeros allowed";
}

// ---- The sgemm rate from its rounds (engine/cpu/peak.cpp) ----

// The rate is the median round, and the spread (max - min) / median; a round more than 15% off
// the median (another process's burst) is measured again, at most once per round, so that a
// machine that stays busy still gets a rate.
TEST(SgemmRate, TheMedianRoundWithOutliersMeasuredAgain) {
  int measured = 0;
  const auto another = [&measured](double gflops) {
    return [&measured, gflops] {
      ++measured;
      return gflops;
    };
  };
  const cpu::SgemmRate steady = cpu::rate_of_rounds({100, 104, 98, 101, 97}, another(0));
  EXPECT_EQ(steady.gflops, 100);
  EXPECT_NEAR(steady.spread, 0.07, 1e-12);
  EXPECT_EQ(steady.rounds, 5);
  EXPECT_EQ(steady.dropped, 0);
  EXPECT_EQ(measured, 0);

  const cpu::SgemmRate burst = cpu::rate_of_rounds({100, 40, 98, 101, 97}, another(99));
  EXPECT_EQ(burst.gflops, 99);
  EXPECT_NEAR(burst.spread, 4.0 / 99, 1e-12);
  EXPECT_EQ(burst.dropped, 1);
  EXPECT_EQ(measured, 1);

  const cpu::SgemmRate busy = cpu::rate_of_rounds({100, 10, 98, 101, 97}, another(10));
  EXPECT_EQ(busy.gflops, 98);
  EXPECT_EQ(busy.dropped, 5);
  EXPECT_EQ(measured, 6);
}

// ---- The CPU backend's oneDNN helpers (engine/cpu/context.cpp) ----

// oneDNN's out-of-memory status becomes tb::OutOfMemory and any other tb::BackendError, with
// oneDNN's text and status; blocks of 8 or 16 channels pad the channels up to a whole block; a
// reshape keeps a plain tensor's bytes and is refused for a blocked one or another element count.
TEST(CpuContext, StatusesLayoutsAndReshapes) {
  EXPECT_THROW(check_status(dnnl::error(dnnl_out_of_memory, "could not allocate"), "f(x)", __FILE__, 1), OutOfMemory);
  try {
    check_status(dnnl::error(dnnl_unimplemented, "no implementation"), "g(y)", __FILE__, 2);
    ADD_FAILURE() << "did not throw";
  } catch (const BackendError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("oneDNN failed: no implementation (status {}) (tests/test_cpu_layers.cpp:2) [g(y)]",
                          int(dnnl_unimplemented)));
  }

  const cpu::md blocked8 = cpu::channel_blocks({1, 3, 2, 2}, 8), blocked16 = cpu::channel_blocks({1, 3, 2, 2}, 16);
  EXPECT_EQ(cpu::padded_floats(blocked8), 8 * 2 * 2);
  EXPECT_EQ(cpu::padded_floats(blocked16), 16 * 2 * 2);
  EXPECT_EQ(cpu::padded_floats(cpu::plain_desc({1, 3, 2, 2})), 3 * 2 * 2);
  EXPECT_THROW(cpu::channel_blocks({1, 3, 2, 2}, 4), Error);

  const cpu::md plain = cpu::plain_desc({2, 6});
  EXPECT_TRUE(cpu::is_plain(plain));
  EXPECT_FALSE(cpu::is_plain(blocked8));
  EXPECT_EQ(cpu::plain_view(plain, {3, 4}).dims(), (dnnl::memory::dims{3, 4}));
  EXPECT_THROW(cpu::plain_view(plain, {3, 3}), Error);
  EXPECT_THROW(cpu::plain_view(cpu::channel_blocks({1, 8, 2, 2}, 8), {32}), Error);
  EXPECT_EQ(cpu::plain_desc({1, 2, 3, 4, 5}).get_size(), 120 * sizeof(float));
}

}  // namespace
}  // namespace tb

// Checks the four models of trainbench: as specs (shapes, parameter counts and FLOPs against
// numbers worked out by hand or published, errors on bad graphs) and on the CPU backend (a few
// training steps lower the loss; the gradients of whole models, the MLP, LeNet-5, the LSTM and
// ResNet blocks, match a double-precision run of the reference ops).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "datasets/sources.hpp"
#include "engine/core/error.hpp"
#include "engine/core/init.hpp"
#include "engine/cpu/network.hpp"
#include "engine/reference/ops.hpp"
#include "engine/train/trainer.hpp"
#include "models/models.hpp"

namespace tb {
namespace {

ModelSpec named(const std::string& name, i64 classes = 0, Task task = Task::Classification) {
  ModelSpec m;
  m.name = name;
  m.classes = classes;
  m.task = task;
  return m;
}

NetworkOptions config(i64 batch, const OptimizerConfig& optimizer = {}, std::uint64_t seed = 1) {
  NetworkOptions c;
  c.batch = batch;
  c.optimizer = optimizer;
  c.seed = seed;
  return c;
}

int node_index(const ModelSpec& m, const std::string& name) {
  for (std::size_t i = 0; i < m.nodes.size(); ++i)
    if (m.nodes[i].name == name) return int(i);
  ADD_FAILURE() << m.name << " has no node " << name;
  return 0;
}

Dims shape_of(const ModelSpec& m, i64 batch, const std::string& node) {
  return infer_shapes(m, batch).at(node_index(m, node));
}

int count_kind(const ModelSpec& m, const char* kind) {
  int n = 0;
  for (const Node& node : m.nodes) n += std::string(kind_name(node.spec)) == kind;
  return n;
}

// ---- Shapes, parameters, FLOPs ----

TEST(ModelsSpec, Mlp) {
  const ModelSpec m = models::workload("mlp", "mnist").spec;
  EXPECT_EQ(shape_of(m, 7, "input"), (Dims{7, 784}));
  EXPECT_EQ(shape_of(m, 7, "fc1"), (Dims{7, 1000}));
  EXPECT_EQ(shape_of(m, 7, "fc3"), (Dims{7, 10}));
  EXPECT_EQ(shape_of(m, 7, "loss"), (Dims{1}));
  EXPECT_EQ(target_shape(m, 7), (Dims{7}));
  const ModelCost c = model_cost(m);
  EXPECT_EQ(c.parameters, 784 * 1000 + 1000 + 1000 * 1000 + 1000 + 1000 * 10 + 10);
  EXPECT_EQ(c.parameters, 1'796'010);
  EXPECT_EQ(c.forward_macs_per_sample, 784.0 * 1000 + 1000.0 * 1000 + 1000.0 * 10);  // 1,794,000
  EXPECT_EQ(c.forward_flops_per_sample(), 2 * c.forward_macs_per_sample);
  // Training: forward, weight gradients, and input gradients of fc2 and fc3 only (fc1's input
  // is the model's: no gradient for it): 2 x (3 x 1,794,000 - 784,000) = 9,196,000.
  EXPECT_EQ(c.input_layer_macs_per_sample, 784.0 * 1000);
  EXPECT_EQ(c.train_flops_per_sample(), 9'196'000.0);
}

TEST(ModelsSpec, Lenet5) {
  const ModelSpec m = models::workload("lenet5", "cifar10").spec;
  EXPECT_EQ(shape_of(m, 3, "conv1"), (Dims{3, 6, 28, 28}));
  EXPECT_EQ(shape_of(m, 3, "pool1"), (Dims{3, 6, 14, 14}));
  EXPECT_EQ(shape_of(m, 3, "conv2"), (Dims{3, 16, 10, 10}));
  EXPECT_EQ(shape_of(m, 3, "pool2"), (Dims{3, 16, 5, 5}));
  EXPECT_EQ(shape_of(m, 3, "conv3"), (Dims{3, 120, 2, 2}));
  EXPECT_EQ(shape_of(m, 3, "fc4"), (Dims{3, 84}));  // the 120x2x2 flattened
  EXPECT_EQ(shape_of(m, 3, "fc5"), (Dims{3, 10}));
  const ModelCost c = model_cost(m);
  // conv1 6*3*5*5 + 6     =    456
  // conv2 16*6*5*5 + 16   =  2,416
  // conv3 120*16*4*4 + 120 = 30,840
  // fc4   84*480 + 84     = 40,404
  // fc5   10*84 + 10      =    850
  //                   total 74,966
  EXPECT_EQ(c.parameters, 74'966);
  // MACs: conv1 6*28*28 outputs x 3*5*5 = 352,800; conv2 16*10*10 x 6*5*5 = 240,000;
  // conv3 120*2*2 x 16*4*4 = 122,880; fc4 480*84 = 40,320; fc5 84*10 = 840; total 756,840.
  EXPECT_EQ(c.forward_macs_per_sample, 756'840.0);
  EXPECT_EQ(c.input_layer_macs_per_sample, 352'800.0);  // conv1's input gradient is never computed
  EXPECT_EQ(c.train_flops_per_sample(), 2 * (3 * 756'840.0 - 352'800.0));
  // No convolution of LeNet-5 pads its input.
  EXPECT_EQ(c.padding_macs_per_sample, 0.0);
  EXPECT_EQ(c.needed_train_flops_per_sample(), c.train_flops_per_sample());
  EXPECT_EQ(c.needed_share(), 1.0);
}

// The graph the CPU network runs: each max pool before the increasing activation it was the only
// consumer of, the other nodes where they were, and the same shape after the pair.
TEST(ModelsSpec, PoolsBeforeActivations) {
  const ModelSpec m = models::workload("lenet5", "cifar10").spec;
  const ModelSpec g = pools_before_activations(m);
  ASSERT_EQ(g.nodes.size(), m.nodes.size());
  std::vector<std::string> order;
  for (const Node& node : g.nodes) order.push_back(node.name + ":" + kind_name(node.spec));
  EXPECT_EQ(order, (std::vector<std::string>{"input:input", "conv1:conv2d", "pool1:maxpool2d", "sigmoid1:sigmoid",
                                             "conv2:conv2d", "pool2:maxpool2d", "sigmoid2:sigmoid", "conv3:conv2d",
                                             "sigmoid3:sigmoid", "fc4:linear", "sigmoid4:sigmoid", "fc5:linear",
                                             "loss:softmax_cross_entropy"}));
  // Every node reads the same indices: the pool where the activation was, the activation where
  // the pool was.
  for (std::size_t i = 0; i < g.nodes.size(); ++i) EXPECT_EQ(g.nodes[i].inputs, m.nodes[i].inputs) << g.nodes[i].name;
  const auto before = infer_shapes(m, 3), after = infer_shapes(g, 3);
  EXPECT_EQ(after[2], (Dims{3, 6, 14, 14}));  // pool1 over conv1's 28x28
  EXPECT_EQ(after[5], (Dims{3, 16, 5, 5}));   // pool2 over conv2's 10x10
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (i != 2 && i != 5) {
      EXPECT_EQ(after[i], before[i]) << g.nodes[i].name;
    }
  }

  // An activation with a second consumer, or a pool after anything but an activation, stays.
  ModelSpec shared = named("shared", 10);
  int x = shared.add("input", InputSpec{{4, 8, 8}}, {});
  x = shared.add("relu", ReLUSpec{}, {x});
  const int pool = shared.add("pool", MaxPool2dSpec{2, 2}, {x});
  const int sum = shared.add("pool_after_add", MaxPool2dSpec{2, 2}, {shared.add("add", AddSpec{}, {x, x})});
  shared.add("out", AddSpec{}, {pool, sum});
  const ModelSpec kept = pools_before_activations(shared);
  for (std::size_t i = 0; i < shared.nodes.size(); ++i) {
    EXPECT_EQ(kept.nodes[i].name, shared.nodes[i].name);
    EXPECT_EQ(kept.nodes[i].inputs, shared.nodes[i].inputs);
  }
}

TEST(ModelsSpec, Lstm) {
  const ModelSpec m = models::workload("lstm", "sine").spec;
  EXPECT_EQ(m.input().seq_len, 35);
  EXPECT_EQ(shape_of(m, 20, "input"), (Dims{35, 20, 1}));  // time-major
  EXPECT_EQ(shape_of(m, 20, "fc1"), (Dims{35, 20, 5}));
  EXPECT_EQ(shape_of(m, 20, "lstm"), (Dims{35, 20, 5}));
  EXPECT_EQ(shape_of(m, 20, "fc2"), (Dims{35, 20, 1}));
  EXPECT_EQ(target_shape(m, 20), (Dims{35, 20, 1}));
  const ModelCost c = model_cost(m);
  // fc1 5*1 + 5 = 10; LSTM wx 5*4*5 + wh 5*4*5 + bias 4*5 = 220; fc2 1*5 + 1 = 6.
  EXPECT_EQ(c.parameters, 236);
  // Per sequence of 35 steps: fc1 35*5, LSTM 35 * 4 gates * 5 * (5 + 5), fc2 35*5.
  EXPECT_EQ(c.forward_macs_per_sample, 35.0 * 5 + 35.0 * 4 * 5 * 10 + 35.0 * 5);  // 7,350
}

// An LSTM fed by the model input: its products with that input (4 gates x hidden x features a
// time step) are the input layer's, not its recurrent ones; every tensor of it is initialised
// from the hidden size, as PyTorch's U(-1/sqrt(hidden), 1/sqrt(hidden)); a zero-init batch
// norm starts its gamma at zero.
TEST(ModelsSpec, AnLstmsInputProductsAndFanInAndAZeroInitGamma) {
  ModelSpec m = named("lstm_only", 0, Task::Regression);
  int x = m.add("input", InputSpec{{3}, 7}, {});
  x = m.add("lstm", LSTMSpec{3, 5}, {x});
  m.add("loss", MSESpec{}, {x});
  const ModelCost c = model_cost(m);
  EXPECT_EQ(c.forward_macs_per_sample, 7.0 * 4 * 5 * (3 + 5));
  EXPECT_EQ(c.input_layer_macs_per_sample, 7.0 * 4 * 5 * 3);
  for (const ParamSpec& p : node_params(LSTMSpec{3, 5}, {7, 1, 3})) EXPECT_EQ(p.fan_in, 5) << p.name;
  const std::vector<ParamSpec> bn = node_params(BatchNormSpec{.channels = 4, .zero_init_gamma = true}, {1, 4, 2, 2});
  ASSERT_EQ(bn.size(), 2u);
  EXPECT_EQ(bn[0].init, Init::Zeros) << bn[0].name;
  EXPECT_EQ(bn[1].init, Init::Zeros) << bn[1].name;
  EXPECT_EQ(node_params(BatchNormSpec{.channels = 4}, {1, 4, 2, 2})[0].init, Init::Ones);
}

TEST(ModelsSpec, Resnet152Imagenet) {
  const ModelSpec m = models::workload("resnet152", "imagenet").spec;
  // 1 stem conv + 50 bottlenecks x 3 + 4 projections; a batch norm after each; 50 adds.
  EXPECT_EQ(count_kind(m, "conv2d"), 155);
  EXPECT_EQ(count_kind(m, "batchnorm"), 155);
  EXPECT_EQ(count_kind(m, "add"), 50);
  EXPECT_EQ(shape_of(m, 2, "stem.conv"), (Dims{2, 64, 112, 112}));
  EXPECT_EQ(shape_of(m, 2, "stem.pool"), (Dims{2, 64, 56, 56}));
  EXPECT_EQ(shape_of(m, 2, "layer1.2.relu"), (Dims{2, 256, 56, 56}));
  EXPECT_EQ(shape_of(m, 2, "layer2.7.relu"), (Dims{2, 512, 28, 28}));
  EXPECT_EQ(shape_of(m, 2, "layer3.35.relu"), (Dims{2, 1024, 14, 14}));
  EXPECT_EQ(shape_of(m, 2, "layer4.2.relu"), (Dims{2, 2048, 7, 7}));
  EXPECT_EQ(shape_of(m, 2, "avgpool"), (Dims{2, 2048, 1, 1}));
  EXPECT_EQ(shape_of(m, 2, "fc"), (Dims{2, 1000}));
  const ModelCost c = model_cost(m);
  // torchvision's resnet152().parameters() (BN gamma and beta, no running statistics).
  EXPECT_NEAR(double(c.parameters), 60.2e6, 60.2e6 * 1e-3);
  EXPECT_EQ(c.parameters, 60'192'808);
  // Published: 11.5 GMACs (23 GFLOPs) per 224x224 image.
  EXPECT_GE(c.forward_macs_per_sample, 11.3e9);
  EXPECT_LE(c.forward_macs_per_sample, 11.7e9);
}

TEST(ModelsSpec, Resnet152Cifar) {
  const ModelSpec m = models::workload("resnet152", "cifar10").spec;
  EXPECT_EQ(shape_of(m, 4, "stem.conv"), (Dims{4, 64, 16, 16}));
  EXPECT_EQ(shape_of(m, 4, "stem.pool"), (Dims{4, 64, 8, 8}));
  EXPECT_EQ(shape_of(m, 4, "layer1.2.relu"), (Dims{4, 256, 8, 8}));
  EXPECT_EQ(shape_of(m, 4, "layer2.7.relu"), (Dims{4, 512, 4, 4}));
  EXPECT_EQ(shape_of(m, 4, "layer3.35.relu"), (Dims{4, 1024, 2, 2}));
  EXPECT_EQ(shape_of(m, 4, "layer4.2.relu"), (Dims{4, 2048, 1, 1}));
  EXPECT_EQ(shape_of(m, 4, "fc"), (Dims{4, 10}));
  const ModelCost small = model_cost(m), big = model_cost(models::workload("resnet152", "imagenet").spec);
  // Only the classifier differs from the ImageNet model: 2048*10 + 10 instead of 2048*1000 + 1000.
  EXPECT_EQ(small.parameters, 60'192'808 - (2048 * 1000 + 1000) + (2048 * 10 + 10));  // 58,164,298
  // Every feature map is exactly 1/7 of the 224x224 model's on each side (112 -> 16, 56 -> 8,
  // 28 -> 4, 14 -> 2, 7 -> 1), so the convolutions cost exactly 1/49 of theirs.
  EXPECT_EQ(small.forward_macs_per_sample, (big.forward_macs_per_sample - 2048.0 * 1000) / 49 + 2048.0 * 10);
  // Products with the zero padding: the 3x3 kernels lose a ring of taps on every plane, and the
  // smaller the plane the more (a 2x2 plane meets 16 of each 36, a 1x1 plane 1 of 9). Counted
  // for these shapes by a separate script over the same layers: 485,127,424 at 224x224 (4.2%
  // of the products), 58,905,856 at 32x32 (25.1%). The stem's 7x7 at stride 2 over 32 columns
  // meets the input with 106 of its 16 x 7 (output, tap) pairs along each axis.
  EXPECT_EQ(big.padding_macs_per_sample, 485'127'424.0);
  EXPECT_EQ(small.padding_macs_per_sample, 58'905'856.0);
  EXPECT_EQ(small.input_layer_padding_macs_per_sample, 64.0 * 3 * (16 * 16 * 49 - 106 * 106));
  EXPECT_EQ(small.needed_train_flops_per_sample(),
            small.train_flops_per_sample() -
                2 * (3 * small.padding_macs_per_sample - small.input_layer_padding_macs_per_sample));
  // What the above-peak check holds against the peak (bench/run/run.cpp): three quarters of the
  // 32x32 model's count, 96% of the 224x224 one's.
  EXPECT_NEAR(small.needed_share(), 0.7492, 1e-3);
  EXPECT_NEAR(big.needed_share(), 0.9579, 1e-3);
}

// Every registered workload (one file per model, models/*.cpp) is one the harness can run.
TEST(ModelsSpec, Workloads) {
  const auto& all = models::workloads();
  ASSERT_FALSE(all.empty());
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& wl : all) {
    SCOPED_TRACE(wl.model + "/" + wl.dataset);
    EXPECT_TRUE(seen.insert({wl.model, wl.dataset}).second) << "registered twice";
    EXPECT_EQ(wl.spec.name, wl.model);
    EXPECT_GT(wl.batch, 0);
    EXPECT_GE(wl.gpu_batch, 0);
    EXPECT_NO_THROW(infer_shapes(wl.spec, wl.batch));
    EXPECT_NO_THROW(infer_shapes(wl.spec, wl.batch_on_gpu()));
    EXPECT_TRUE(is_loss(wl.spec.nodes.back().spec));
    EXPECT_GE(wl.epochs, 1);
    EXPECT_GE(wl.warmup_steps, 0);
    EXPECT_GT(wl.optimizer.lr, 0);
    EXPECT_GT(model_cost(wl.spec).parameters, 0);
    EXPECT_GE(wl.check_steps, 1);
    EXPECT_GE(wl.check_batch, 1);
    EXPECT_EQ(&models::workload(wl.model, wl.dataset), &wl);
  }
  // The names are derived: each model once, in workload order.
  std::vector<std::string> names;
  for (const auto& wl : all)
    if (std::find(names.begin(), names.end(), wl.model) == names.end()) names.push_back(wl.model);
  EXPECT_EQ(models::model_names(), names);
  // A name that is not registered is refused naming the ones that are.
  try {
    models::workload("mlp", "no-such-dataset");
    ADD_FAILURE() << "an unknown workload was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mlp/mnist"), std::string::npos) << e.what();
  }
}

// ---- Bad graphs are refused with the offending node's name ----

// Runs `build` (which must throw tb::Error) and checks that the message names `node`.
template <class F>
void expect_error_naming(F build, const std::string& node) {
  try {
    build();
    ADD_FAILURE() << "no tb::Error for a bad graph at " << node;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(node), std::string::npos) << "message: " << e.what();
  }
}

// Checks shape inference and the CPU network's planning, which must refuse the graph too.
void expect_bad_graph(const ModelSpec& m, const std::string& node) {
  SCOPED_TRACE(node);
  expect_error_naming([&] { infer_shapes(m, 2); }, node);
  expect_error_naming([&] { cpu::CpuNetwork net(m, config(2)); }, node);
}

TEST(ModelsBadGraph, LinearWithWrongInFeatures) {
  ModelSpec m = named("bad", 5);
  int x = m.add("input", InputSpec{{10}}, {});
  x = m.add("fc_wrong", LinearSpec{12, 5}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{5}, {x});
  expect_bad_graph(m, "fc_wrong");
}

TEST(ModelsBadGraph, LinearCannotFlattenImage) {
  ModelSpec m = named("bad", 5);
  int x = m.add("input", InputSpec{{3, 4, 4}}, {});
  x = m.add("flatten_wrong", LinearSpec{3 * 4 * 5, 5}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{5}, {x});
  expect_bad_graph(m, "flatten_wrong");
}

TEST(ModelsBadGraph, AddOfMismatchedShapes) {
  ModelSpec m = named("bad", 8);
  const int x = m.add("input", InputSpec{{3, 8, 8}}, {});
  const int a = m.add("a", Conv2dSpec{3, 8, 3, 1, 1}, {x});
  const int b = m.add("b", Conv2dSpec{3, 8, 3, 2, 1}, {x});  // half the size
  const int s = m.add("sum_wrong", AddSpec{}, {a, b});
  const int p = m.add("pool", GlobalAvgPoolSpec{}, {s});
  const int f = m.add("fc", LinearSpec{8, 8}, {p});
  m.add("loss", SoftmaxCrossEntropySpec{8}, {f});
  expect_bad_graph(m, "sum_wrong");
}

TEST(ModelsBadGraph, ConvWithWrongChannels) {
  ModelSpec m = named("bad", 4);
  int x = m.add("input", InputSpec{{3, 8, 8}}, {});
  x = m.add("conv_wrong", Conv2dSpec{4, 8, 3}, {x});
  x = m.add("pool", GlobalAvgPoolSpec{}, {x});
  x = m.add("fc", LinearSpec{8, 4}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{4}, {x});
  expect_bad_graph(m, "conv_wrong");
}

TEST(ModelsBadGraph, ConvKernelLargerThanInput) {
  ModelSpec m = named("bad", 4);
  int x = m.add("input", InputSpec{{3, 4, 4}}, {});
  x = m.add("conv_too_big", Conv2dSpec{3, 4, 7}, {x});
  x = m.add("pool", GlobalAvgPoolSpec{}, {x});
  x = m.add("fc", LinearSpec{4, 4}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{4}, {x});
  expect_bad_graph(m, "conv_too_big");
}

// A window that does not fit, short of it by less than its stride: C++'s division rounded the
// shortfall up to one output position, which the pooling kernels then read past the input for.
TEST(ModelsBadGraph, StridedWindowsLargerThanTheirInput) {
  {
    ModelSpec m = named("bad", 4);
    int x = m.add("input", InputSpec{{3, 1, 6}}, {});
    x = m.add("pool_too_big", MaxPool2dSpec{2, 2}, {x});
    x = m.add("pool", GlobalAvgPoolSpec{}, {x});
    x = m.add("fc", LinearSpec{3, 4}, {x});
    m.add("loss", SoftmaxCrossEntropySpec{4}, {x});
    expect_bad_graph(m, "pool_too_big");
  }
  {
    ModelSpec m = named("bad", 4);
    int x = m.add("input", InputSpec{{3, 2, 2}}, {});
    x = m.add("conv_too_big", Conv2dSpec{3, 4, 3, 2}, {x});
    x = m.add("pool", GlobalAvgPoolSpec{}, {x});
    x = m.add("fc", LinearSpec{4, 4}, {x});
    m.add("loss", SoftmaxCrossEntropySpec{4}, {x});
    expect_bad_graph(m, "conv_too_big");
  }
}

// A window that fits the height but not the width is refused, and so is a batch of none.
TEST(ModelsBadGraph, AWindowTooWideForItsInputAndAnEmptyBatch) {
  ModelSpec m = named("bad", 4);
  int x = m.add("input", InputSpec{{3, 8, 2}}, {});
  x = m.add("conv_too_wide", Conv2dSpec{3, 4, 3}, {x});
  x = m.add("pool", GlobalAvgPoolSpec{}, {x});
  x = m.add("fc", LinearSpec{4, 4}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{4}, {x});
  expect_bad_graph(m, "conv_too_wide");
  expect_error_naming([&] { infer_shapes(models::workload("mlp", "mnist").spec, 0); }, "batch must be positive");
}

TEST(ModelsBadGraph, LstmWithWrongFeaturesAndImageInput) {
  {
    ModelSpec m = named("bad", 0, Task::Regression);
    int x = m.add("input", InputSpec{{3}, 5}, {});
    x = m.add("lstm_wrong", LSTMSpec{4, 6}, {x});
    m.add("loss", MSESpec{}, {x});
    expect_bad_graph(m, "lstm_wrong");
  }
  {
    ModelSpec m = named("bad", 0, Task::Regression);
    int x = m.add("input", InputSpec{{3, 4, 4}}, {});
    x = m.add("lstm_on_image", LSTMSpec{4, 6}, {x});
    m.add("loss", MSESpec{}, {x});
    expect_bad_graph(m, "lstm_on_image");
  }
}

TEST(ModelsBadGraph, BatchNormAndLossShapes) {
  {
    ModelSpec m = named("bad", 4);
    int x = m.add("input", InputSpec{{3, 4, 4}}, {});
    x = m.add("bn_wrong", BatchNormSpec{.channels = 5}, {x});
    x = m.add("fc", LinearSpec{48, 4}, {x});
    m.add("loss", SoftmaxCrossEntropySpec{4}, {x});
    expect_bad_graph(m, "bn_wrong");
  }
  {
    ModelSpec m = named("bad", 4);
    int x = m.add("input", InputSpec{{10}}, {});
    x = m.add("fc", LinearSpec{10, 5}, {x});
    m.add("loss_wrong", SoftmaxCrossEntropySpec{4}, {x});
    expect_bad_graph(m, "loss_wrong");
  }
}

TEST(ModelsBadGraph, WrongArityAndLossNotLast) {
  {
    ModelSpec m = named("bad", 4);
    int x = m.add("input", InputSpec{{4}}, {});
    x = m.add("add_one_input", AddSpec{}, {x});
    m.add("loss", SoftmaxCrossEntropySpec{4}, {x});
    expect_bad_graph(m, "add_one_input");
  }
  {
    ModelSpec m = named("bad", 0, Task::Regression);
    int x = m.add("input", InputSpec{{4}}, {});
    x = m.add("early_loss", MSESpec{}, {x});
    x = m.add("fc", LinearSpec{1, 1}, {x});
    m.add("loss", MSESpec{}, {x});
    expect_bad_graph(m, "early_loss");
  }
  // An input that is not an earlier node is refused when the node is added.
  ModelSpec m = named("bad");
  m.add("input", InputSpec{{4}}, {});
  expect_error_naming([&] { m.add("forward_ref", ReLUSpec{}, {3}); }, "forward_ref");
}

TEST(ModelsBadGraph, UnusedOutput) {
  ModelSpec m = named("bad", 4);
  const int x = m.add("input", InputSpec{{4}}, {});
  m.add("dangling", LinearSpec{4, 4}, {x});
  const int f = m.add("fc", LinearSpec{4, 4}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{4}, {f});
  SCOPED_TRACE("dangling");
  expect_error_naming([&] { cpu::CpuNetwork net(m, config(2)); }, "dangling");
}

// ---- The CPU backend runs oneDNN's optimised kernels ----

// No layer of any workload falls to one of oneDNN's reference loops, which oneDNN picks where
// none of its kernels for the machine's ISA takes a layout. Given 16-channel blocks under AVX2,
// its batch normalization did: 27% of ResNet-152 32x32's step on the 2-core VM, and under SSE4.1
// LeNet-5's second convolution's input gradient, 47 ms of a 55-ms step. CMake runs this test
// again under AVX2 and SSE4.1 caps (tests/CMakeLists.txt), so it covers those machines on any.
TEST(ModelsCpu, NoLayerRunsAReferenceLoop) {
  for (const models::Workload& w : models::workloads()) {
    // The default batch where it is small; the layouts oneDNN picks do not depend on it.
    const cpu::CpuNetwork net(w.spec, config(std::min<i64>(w.batch, 16)));
    ASSERT_FALSE(net.implementations().empty()) << w.model << " created no oneDNN primitive";
    for (const std::string& impl : net.implementations())
      EXPECT_EQ(impl.find("ref"), std::string::npos) << w.model << "/" << w.dataset << ": " << impl;
  }
}

// ---- Training lowers the loss on the CPU backend ----

// The first workload of each registered model: its file says how many steps of which batch
// show it learning (Workload::check_steps, check_batch).
std::vector<std::string> first_workloads() {
  std::vector<std::string> out;
  for (const std::string& model : models::model_names())
    for (const models::Workload& w : models::workloads())
      if (w.model == model) {
        out.push_back(w.model + "/" + w.dataset);
        break;
      }
  return out;
}

class ModelsTraining : public testing::TestWithParam<std::string> {};

// Steps with the workload's own optimizer on its synthetic data, at small batches to keep the
// test short (ResNet-152 at 32x32 included). The loss on a fixed validation batch (training-mode
// forward, no update) must be lower after the steps than before: a sign error, a gradient that
// does not reach the parameters or a broken optimizer leaves it flat or makes it grow. A fixed
// batch, because the losses of different batches of 4 differ more than a few steps change them.
// LeNet-5 gets many steps of 32: its stacked sigmoids learn nothing for the first hundred or so.
TEST_P(ModelsTraining, LossFalls) {
  const std::string& name = GetParam();
  const std::size_t slash = name.find('/');
  const models::Workload* w = &models::workload(name.substr(0, slash), name.substr(slash + 1));
  const i64 kBatch = w->check_batch;
  const int steps = int(w->check_steps);
  // The workload's optimizer at this batch: ResNet-152's SGD rate scales linearly with the batch
  // (at batch 4 with the rate of batch 128 its loss jumps between 2 and 70 from step to step).
  const OptimizerConfig optimizer = w->optimizer_for(kBatch);

  const auto start = std::chrono::steady_clock::now();
  data::Splits splits = data::make_splits(w->dataset, "", w->spec, data::LoaderConfig{.batch = kBatch, .seed = 1});
  const Batch probe = splits.validation->next();
  Trainer trainer(std::make_unique<cpu::CpuNetwork>(w->spec, config(kBatch, optimizer, 1)), std::move(splits.train));
  auto probe_loss = [&] {
    trainer.network().set_batch(probe.view());
    return trainer.network().forward();
  };
  const float before = probe_loss();
  for (int s = 0; s < steps; ++s) trainer.step();  // throws CheckFailed on a non-finite loss
  const float after = probe_loss();
  ASSERT_EQ(trainer.losses().size(), std::size_t(steps));
  ASSERT_TRUE(std::isfinite(before) && std::isfinite(after));
  EXPECT_GT(before, 0.f) << "a zero first loss proves nothing";
  EXPECT_LT(after, before);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %d steps in %.2f s, loss on a fixed batch %.4f -> %.4f\n", name.c_str(), steps, seconds, before,
              after);
}

INSTANTIATE_TEST_SUITE_P(Workloads, ModelsTraining, testing::ValuesIn(first_workloads()),
                         [](const testing::TestParamInfo<std::string>& i) {
                           return i.param.substr(0, i.param.find('/'));
                         });

// ---- Whole models against double-precision runs of the reference ops ----

using DVec = std::vector<double>;

// Tolerances of test_cpu_layers.cpp (fp32 sums in another order than the reference's), applied
// to a whole model: every element within 1e-4 + 1e-3 |ref|, the tensor within 1e-4 in relative
// L2 norm, nothing non-finite, not mostly zero.
testing::AssertionResult close(const std::vector<float>& got, const DVec& want) {
  if (got.size() != want.size()) return testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  double diff2 = 0, ref2 = 0;
  std::size_t bad = 0, zeros = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return testing::AssertionFailure() << "non-finite value at " << i;
    const double d = std::abs(got[i] - want[i]);
    diff2 += d * d;
    ref2 += want[i] * want[i];
    zeros += want[i] == 0.0;
    if (d > 1e-4 + 1e-3 * std::abs(want[i]) && bad++ < 5) first << "\n  [" << i << "] " << got[i] << " vs " << want[i];
  }
  if (double(zeros) > 0.5 * double(want.size()))
    return testing::AssertionFailure() << zeros << " of " << want.size() << " reference values are zero";
  const double norm_err = std::sqrt(diff2 / ref2);
  if (bad > 0 || norm_err > 1e-4)
    return testing::AssertionFailure() << bad << " of " << want.size() << " out of tolerance, normalised error "
                                       << norm_err << first.str();
  return testing::AssertionSuccess();
}

// The MLP, spelled out with the reference ops.
TEST(ModelsMlpGradient, MatchesDoubleReference) {
  constexpr i64 N = 8, I = 784, H = 1000, K = 10;
  const ModelSpec m = models::workload("mlp", "mnist").spec;
  const int fc[3] = {node_index(m, "fc1"), node_index(m, "fc2"), node_index(m, "fc3")};
  NetworkOptions c = config(N, {}, 3);
  c.keep_values = true;  // the test reads values in the middle of the network
  cpu::CpuNetwork net(m, c);
  // The initial biases are zero; give them values so that the bias path of forward is checked.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> small(-0.05f, 0.05f);
  const i64 widths[3] = {H, H, K};
  for (int l = 0; l < 3; ++l) {
    std::vector<float> b(widths[l]);
    for (float& v : b) v = small(rng);
    net.write_param(fc[l], 1, b);
  }
  auto data = data::synthetic_for("mnist", m, N, 7);
  const Batch& batch = data->next();
  net.set_batch(batch.view());
  const float loss = net.forward();
  net.backward();

  auto param = [&](int l, int k) {
    const auto v = net.read_param(fc[l], k);
    return DVec(v.begin(), v.end());
  };
  const DVec x(batch.input.begin(), batch.input.end());
  const DVec w1 = param(0, 0), b1 = param(0, 1), w2 = param(1, 0), b2 = param(1, 1), w3 = param(2, 0), b3 = param(2, 1);
  DVec h1(N * H), r1(N * H), h2(N * H), r2(N * H), logits(N * K);
  ref::linear_forward(x.data(), w1.data(), b1.data(), h1.data(), N, I, H);
  ref::relu_forward(h1.data(), r1.data(), N * H);
  ref::linear_forward(r1.data(), w2.data(), b2.data(), h2.data(), N, H, H);
  ref::relu_forward(h2.data(), r2.data(), N * H);
  ref::linear_forward(r2.data(), w3.data(), b3.data(), logits.data(), N, H, K);
  const double ref_loss = ref::softmax_cross_entropy_forward(logits.data(), batch.labels.data(), N, K);

  DVec dlogits(N * K), dr2(N * H), dh2(N * H), dr1(N * H), dh1(N * H);
  DVec dw1(w1.size()), db1(H), dw2(w2.size()), db2(H), dw3(w3.size()), db3(K);
  ref::softmax_cross_entropy_backward(logits.data(), batch.labels.data(), dlogits.data(), N, K);
  ref::linear_backward(r2.data(), w3.data(), dlogits.data(), dr2.data(), dw3.data(), db3.data(), N, H, K);
  ref::relu_backward(r2.data(), dr2.data(), dh2.data(), N * H);
  ref::linear_backward(r1.data(), w2.data(), dh2.data(), dr1.data(), dw2.data(), db2.data(), N, H, H);
  ref::relu_backward(r1.data(), dr1.data(), dh1.data(), N * H);
  ref::linear_backward(x.data(), w1.data(), dh1.data(), static_cast<double*>(nullptr), dw1.data(), db1.data(), N, I, H);

  EXPECT_TRUE(close({loss}, {ref_loss})) << "loss";
  EXPECT_TRUE(close(net.read_output(fc[2]), logits)) << "logits";
  EXPECT_TRUE(close(net.read_param_grad(fc[0], 0), dw1)) << "fc1 weight gradient";
  EXPECT_TRUE(close(net.read_param_grad(fc[0], 1), db1)) << "fc1 bias gradient";
  EXPECT_TRUE(close(net.read_param_grad(fc[1], 0), dw2)) << "fc2 weight gradient";
  EXPECT_TRUE(close(net.read_param_grad(fc[1], 1), db2)) << "fc2 bias gradient";
  EXPECT_TRUE(close(net.read_param_grad(fc[2], 0), dw3)) << "fc3 weight gradient";
  EXPECT_TRUE(close(net.read_param_grad(fc[2], 1), db3)) << "fc3 bias gradient";
}

// Any graph, run node by node on the reference ops. What the run gives: every node's output,
// the loss, and the gradient of every parameter (in tb::node_params order).
struct ReferenceRun {
  std::vector<DVec> out;
  double loss = 0;
  std::vector<std::vector<DVec>> dparams;
};

// Runs forward and backward of a graph ending in a loss, node by node, on the plain-loop ops in
// double, with the given parameters. Gradients of tensors read by several nodes are summed.
// The reference's forward and backward of a whole model, node by node, in double.
class ReferenceRunner {
 public:
  ReferenceRunner(const ModelSpec& m, i64 batch, const std::vector<std::vector<DVec>>& params, const Batch& data)
      : m(m), shapes(infer_shapes(m, batch)), params(params), data(data), n(int(m.nodes.size())) {
    r.out.resize(n);
    r.dparams.resize(n);
    mean.resize(n);
    var.resize(n);
    lstm.resize(n);
    r.out[0].assign(data.input.begin(), data.input.end());
  }

  ReferenceRun run() {
    for (int i = 1; i < n; ++i) forward(i);
    grad.resize(n);
    for (int i = 0; i < n; ++i) grad[i].assign(r.out[i].size(), 0.0);
    for (int i = n - 1; i >= 1; --i) backward(i);
    return std::move(r);
  }

 private:
  static constexpr double* none = nullptr;

  void forward(int i) {
    const Node& node = m.nodes[i];
    const DVec& x = r.out[node.inputs[0]];
    const Dims& in = shapes[node.inputs[0]];
    DVec& y = r.out[i];
    y.assign(std::size_t(product(shapes[i])), 0.0);
    const auto& w = params[i];
    if (auto* s = std::get_if<LinearSpec>(&node.spec)) {
      ref::linear_forward(x.data(), w[0].data(), s->bias ? w[1].data() : none, y.data(), product(in) / s->in_features,
                          s->in_features, s->out_features);
    } else if (auto* s = std::get_if<Conv2dSpec>(&node.spec)) {
      const ref::ConvShape cs{in[0], in[1], in[2], in[3], s->out_channels, s->kernel, s->stride, s->padding};
      ref::conv2d_forward(x.data(), w[0].data(), s->bias ? w[1].data() : none, y.data(), cs);
    } else if (auto* s = std::get_if<MaxPool2dSpec>(&node.spec)) {
      ref::maxpool2d_forward(x.data(), y.data(),
                             ref::PoolShape{in[0], in[1], in[2], in[3], s->kernel, s->stride, s->padding});
    } else if (std::holds_alternative<GlobalAvgPoolSpec>(node.spec)) {
      ref::global_avgpool_forward(x.data(), y.data(), in[0], in[1], in[2], in[3]);
    } else if (auto* s = std::get_if<BatchNormSpec>(&node.spec)) {
      mean[i].resize(in[1]);
      var[i].resize(in[1]);
      ref::batchnorm_forward_train(x.data(), w[0].data(), w[1].data(), y.data(), mean[i].data(), var[i].data(), none,
                                   none, in[0], in[1], in[2] * in[3], s->eps, s->momentum);
    } else if (std::holds_alternative<ReLUSpec>(node.spec)) {
      ref::relu_forward(x.data(), y.data(), product(in));
    } else if (std::holds_alternative<SigmoidSpec>(node.spec)) {
      ref::sigmoid_forward(x.data(), y.data(), product(in));
    } else if (auto* s = std::get_if<LSTMSpec>(&node.spec)) {
      ref::lstm_forward(x.data(), w[0].data(), w[1].data(), w[2].data(), y.data(), lstm[i],
                        ref::LstmShape{in[0], in[1], s->input_size, s->hidden_size});
    } else if (std::holds_alternative<AddSpec>(node.spec)) {
      ref::add_forward(x.data(), r.out[node.inputs[1]].data(), y.data(), product(in));
    } else if (auto* s = std::get_if<SoftmaxCrossEntropySpec>(&node.spec)) {
      r.loss = ref::softmax_cross_entropy_forward(x.data(), data.labels.data(), in[0], s->classes);
    } else if (std::holds_alternative<MSESpec>(node.spec)) {
      const DVec t(data.targets.begin(), data.targets.end());
      r.loss = ref::mse_forward(x.data(), t.data(), product(in));
    }
  }

  void backward(int i) {
    const Node& node = m.nodes[i];
    const DVec& x = r.out[node.inputs[0]];
    const Dims& in = shapes[node.inputs[0]];
    const DVec& y = r.out[i];
    const DVec& dy = grad[i];
    DVec dx(x.size(), 0.0);
    const auto& w = params[i];
    auto& dw = r.dparams[i];
    for (const DVec& p : w) dw.emplace_back(p.size(), 0.0);
    if (auto* s = std::get_if<LinearSpec>(&node.spec)) {
      ref::linear_backward(x.data(), w[0].data(), dy.data(), dx.data(), dw[0].data(), s->bias ? dw[1].data() : none,
                           product(in) / s->in_features, s->in_features, s->out_features);
    } else if (auto* s = std::get_if<Conv2dSpec>(&node.spec)) {
      const ref::ConvShape cs{in[0], in[1], in[2], in[3], s->out_channels, s->kernel, s->stride, s->padding};
      ref::conv2d_backward(x.data(), w[0].data(), dy.data(), dx.data(), dw[0].data(), s->bias ? dw[1].data() : none,
                           cs);
    } else if (auto* s = std::get_if<MaxPool2dSpec>(&node.spec)) {
      ref::maxpool2d_backward(x.data(), dy.data(), dx.data(),
                              ref::PoolShape{in[0], in[1], in[2], in[3], s->kernel, s->stride, s->padding});
    } else if (std::holds_alternative<GlobalAvgPoolSpec>(node.spec)) {
      ref::global_avgpool_backward(dy.data(), dx.data(), in[0], in[1], in[2], in[3]);
    } else if (auto* s = std::get_if<BatchNormSpec>(&node.spec)) {
      ref::batchnorm_backward(x.data(), w[0].data(), mean[i].data(), var[i].data(), dy.data(), dx.data(), dw[0].data(),
                              dw[1].data(), in[0], in[1], in[2] * in[3], s->eps);
    } else if (std::holds_alternative<ReLUSpec>(node.spec)) {
      ref::relu_backward(y.data(), dy.data(), dx.data(), product(in));
    } else if (std::holds_alternative<SigmoidSpec>(node.spec)) {
      ref::sigmoid_backward(y.data(), dy.data(), dx.data(), product(in));
    } else if (auto* s = std::get_if<LSTMSpec>(&node.spec)) {
      ref::lstm_backward(x.data(), w[0].data(), w[1].data(), y.data(), lstm[i], dy.data(), dx.data(), dw[0].data(),
                         dw[1].data(), dw[2].data(), ref::LstmShape{in[0], in[1], s->input_size, s->hidden_size});
    } else if (std::holds_alternative<AddSpec>(node.spec)) {
      DVec& db = grad[node.inputs[1]];
      for (std::size_t k = 0; k < dy.size(); ++k) db[k] += dy[k];
      dx = dy;
    } else if (auto* s = std::get_if<SoftmaxCrossEntropySpec>(&node.spec)) {
      ref::softmax_cross_entropy_backward(x.data(), data.labels.data(), dx.data(), in[0], s->classes);
    } else if (std::holds_alternative<MSESpec>(node.spec)) {
      const DVec t(data.targets.begin(), data.targets.end());
      ref::mse_backward(x.data(), t.data(), dx.data(), product(in));
    }
    DVec& into = grad[node.inputs[0]];
    for (std::size_t k = 0; k < dx.size(); ++k) into[k] += dx[k];
  }

  const ModelSpec& m;
  const std::vector<Dims> shapes;
  const std::vector<std::vector<DVec>>& params;
  const Batch& data;
  const int n;
  ReferenceRun r;
  std::vector<DVec> mean, var, grad;
  std::vector<ref::LstmCache<double>> lstm;
};

ReferenceRun run_reference(const ModelSpec& m, i64 batch, const std::vector<std::vector<DVec>>& params,
                           const Batch& data) {
  return ReferenceRunner(m, batch, params, data).run();
}

// One training batch through the CPU network and through run_reference with the network's own
// parameters: the loss, the prediction and every parameter gradient must agree. Batch norms get
// gammas around 1 (not the zero of a residual branch's last one) so that every path carries a
// gradient. The network shares memory as planned and, in the second run, fills every block with
// NaN when its planned life ends: a layer reading memory after its planned last use would turn
// the loss or a gradient into NaN.
void check_whole_model(const ModelSpec& m, i64 batch, const std::string& dataset, const NetworkOptions& c);
void check_whole_model(const ModelSpec& m, i64 batch, const std::string& dataset) {
  for (const bool poison : {false, true}) {
    SCOPED_TRACE(poison ? "dead blocks poisoned" : "planned sharing");
    NetworkOptions c = config(batch, {}, 2);
    c.poison_dead = poison;
    check_whole_model(m, batch, dataset, c);
  }
}

void check_whole_model(const ModelSpec& m, i64 batch, const std::string& dataset, const NetworkOptions& c) {
  cpu::CpuNetwork net(m, c);
  const int n = int(m.nodes.size());
  const auto shapes = infer_shapes(m, batch);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> around_one(0.5f, 1.5f), small(-0.2f, 0.2f);
  std::vector<std::vector<DVec>> params(n);
  for (int i = 1; i < n; ++i) {
    const auto specs = node_params(m.nodes[i].spec, shapes[m.nodes[i].inputs[0]]);
    for (std::size_t k = 0; k < specs.size(); ++k) {
      std::vector<float> v = net.read_param(i, int(k));
      if (std::holds_alternative<BatchNormSpec>(m.nodes[i].spec)) {
        for (float& e : v) e = k == 0 ? around_one(rng) : small(rng);
      } else if (specs[k].init == Init::Zeros) {
        for (float& e : v) e = small(rng);  // non-zero biases, so that the bias path is checked
      }
      net.write_param(i, int(k), v);
      params[i].emplace_back(v.begin(), v.end());
    }
  }
  auto data = data::synthetic_for(dataset, m, batch, 5);
  const Batch& b = data->next();
  net.set_batch(b.view());
  const float loss = net.forward();
  const int prediction = m.nodes.back().inputs[0];
  const std::vector<float> predicted = net.read_output(prediction);  // alive until the loss's backward
  net.backward();
  const ReferenceRun r = run_reference(m, batch, params, b);

  EXPECT_TRUE(close({loss}, {r.loss})) << "loss";
  EXPECT_TRUE(close(predicted, r.out[prediction])) << m.nodes[prediction].name;
  for (int i = 1; i < n; ++i)
    for (std::size_t k = 0; k < params[i].size(); ++k)
      EXPECT_TRUE(close(net.read_param_grad(i, int(k)), r.dparams[i][k]))
          << m.nodes[i].name << " gradient of parameter " << k;
}

// --data_on_device on the CPU: batches kept in host memory train exactly as the same batches given
// one by one, round and round the pool; a network asked for a resident batch before it has any
// refuses.
TEST(CpuResidentData, TrainsAsTheSameBatchesGivenOneByOne) {
  const models::Workload w = models::workload("lenet5", "cifar10");
  const i64 batch = 4, pooled = 3;
  cpu::CpuNetwork given(w.spec, config(batch, w.optimizer, 3)), resident(w.spec, config(batch, w.optimizer, 3));
  EXPECT_THROW(resident.use_resident(0), Error);
  ASSERT_EQ(resident.resident_data(), &resident);
  auto data = data::synthetic_for("cifar10", w.spec, batch, 5), same = data::synthetic_for("cifar10", w.spec, batch, 5);
  resident.make_resident(*same, pooled);
  EXPECT_EQ(resident.batch_bytes(), std::size_t(batch * 3 * 32 * 32 + batch) * 4);
  std::vector<Batch> batches;
  for (i64 k = 0; k < pooled; ++k) batches.push_back(data->next());
  for (i64 step = 0; step < 5; ++step) {
    given.set_batch(batches[std::size_t(step % pooled)].view());
    resident.use_resident(step);
    const float loss = given.forward();
    EXPECT_EQ(resident.forward(), loss) << "step " << step;
    given.backward();
    resident.backward();
    given.update();
    resident.update();
  }
  EXPECT_EQ(given.param_checksum(), resident.param_checksum());
}

TEST(ModelsWholeGradient, Lenet5) { check_whole_model(models::workload("lenet5", "cifar10").spec, 4, "cifar10"); }

TEST(ModelsWholeGradient, Lstm) { check_whole_model(models::workload("lstm", "sine").spec, 3, "sine"); }

// Lanes (cpu/network.hpp): the batch cut into slices, each through the whole network on a
// thread of its own with layers and weights of its own, trains as one network of the whole
// batch: the loss, the prediction and every parameter gradient agree with the double reference,
// with 2 and 4 lanes, on LeNet-5 (batch-major) and on the LSTM (time-major input and targets),
// with and without every lane's dead blocks poisoned.
TEST(CpuLanes, MatchTheDoubleReference) {
  for (const char* name : {"lenet5", "lstm"}) {
    const models::Workload w = models::workload(name, name == std::string("lstm") ? "sine" : "cifar10");
    for (const int lanes : {2, 4})
      for (const bool poison : {false, true}) {
        SCOPED_TRACE(fmt::format("{}, {} lanes{}", name, lanes, poison ? ", dead blocks poisoned" : ""));
        NetworkOptions c = config(8, {}, 2);
        c.lanes = lanes;
        c.poison_dead = poison;
        EXPECT_EQ(cpu::CpuNetwork(w.spec, c).lanes(), lanes);
        check_whole_model(w.spec, 8, w.dataset, c);
      }
  }
}

// Every lane updates its own copy of the weights with the batch's gradients: over steps of Adam,
// two lanes keep the losses and weights of one network of the whole batch (a lane whose copy
// drifted would change its half of the loss), also after weights written from outside
// (param_segments, then params_written, as a data-parallel replica is given rank 0's).
TEST(CpuLanes, TrainAsOneNetwork) {
  const models::Workload w = models::workload("lenet5", "cifar10");
  const i64 batch = 8;
  NetworkOptions one = config(batch, w.optimizer, 3), two = one;
  one.lanes = 1;
  two.lanes = 2;
  cpu::CpuNetwork whole(w.spec, one), lanes(w.spec, two);
  ASSERT_EQ(whole.lanes(), 1);
  ASSERT_EQ(lanes.lanes(), 2);
  // New weights for both, written through the segments: the second lane must take them too.
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  const std::vector<FlatSegment> a = whole.param_segments(), b = lanes.param_segments();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(a[s].count, b[s].count);
    for (i64 k = 0; k < a[s].count; ++k) static_cast<float*>(a[s].data)[k] = static_cast<float*>(b[s].data)[k] = u(rng);
  }
  whole.params_written();
  lanes.params_written();
  auto data = data::synthetic_for("cifar10", w.spec, batch, 5);
  for (int step = 0; step < 6; ++step) {
    const Batch& next = data->next();
    whole.set_batch(next.view());
    lanes.set_batch(next.view());
    const float expected = whole.forward();
    EXPECT_NEAR(lanes.forward(), expected, 1e-5 * std::max(1.0f, std::abs(expected))) << "step " << step;
    EXPECT_EQ(lanes.correct(), whole.correct()) << "step " << step;
    whole.backward();
    lanes.backward();
    whole.update();
    lanes.update();
  }
  const int fc5 = node_index(w.spec, "fc5");
  const std::vector<float> want = whole.read_param(fc5, 0);
  EXPECT_TRUE(close(lanes.read_param(fc5, 0), DVec(want.begin(), want.end()))) << "fc5 weights after 6 steps";
}

// Where OpenMP gives fewer threads than there are lanes (here none: no parallel region may be
// active), the lanes run in turn, every one of them.
TEST(CpuLanes, RunInTurnOnFewerThreads) {
  const models::Workload w = models::workload("lenet5", "cifar10");
  NetworkOptions one = config(8, w.optimizer, 3), four = one;
  one.lanes = 1;
  four.lanes = 4;
  cpu::CpuNetwork whole(w.spec, one), lanes(w.spec, four);
  auto data = data::synthetic_for("cifar10", w.spec, 8, 5);
  const Batch& b = data->next();
  whole.set_batch(b.view());
  const float expected = whole.forward();
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(0);
  lanes.set_batch(b.view());
  const float loss = lanes.forward();
  omp_set_max_active_levels(levels);
  EXPECT_NEAR(loss, expected, 1e-5 * std::max(1.0f, std::abs(expected)));
  EXPECT_EQ(lanes.correct(), whole.correct());
}

// A cpu:N row runs on its N threads: lanes asked for beyond them (TB_CPU_LANES) run in turn on
// the caller's OpenMP threads, never on a team of their own count (a num_threads clause of the
// lanes' count overrode the row's threads: a cpu:1 row with TB_CPU_LANES=2 ran on two cores).
TEST(CpuLanes, RunOnTheCallersThreadsOnly) {
  const models::Workload w = models::workload("lenet5", "cifar10");
  NetworkOptions four = config(8, w.optimizer, 3);
  four.lanes = 4;
  cpu::CpuNetwork lanes(w.spec, four);
  ASSERT_EQ(lanes.lanes(), 4);
  auto data = data::synthetic_for("cifar10", w.spec, 8, 5);
  const int threads = omp_get_max_threads();
  for (int n : {1, 2}) {
    omp_set_num_threads(n);
    lanes.set_batch(data->next().view());
    StepTimes t;
    lanes.train_step(t);
    EXPECT_EQ(lanes.lane_threads(), n) << "with " << n << " OpenMP threads";
  }
  omp_set_num_threads(threads);
}

// Which models get lanes: the batch must divide evenly, no layer may mix samples (batch norm),
// the model needs a loss, and (unless asked for) one lane's activations must take more bytes
// than the weights.
TEST(CpuLanes, OnlyWhereTheModelAllows) {
  const ModelSpec lenet = models::workload("lenet5", "cifar10").spec;
  EXPECT_EQ(cpu::cpu_lanes(lenet, 100, 2), 2);
  EXPECT_EQ(cpu::cpu_lanes(lenet, 100, 4), 4);
  EXPECT_EQ(cpu::cpu_lanes(lenet, 100, 1), 1);
  EXPECT_EQ(cpu::cpu_lanes(lenet, 99, 2), 1) << "an odd batch";
  EXPECT_EQ(cpu::cpu_lanes(lenet, 100, 2, 1), 1) << "asked for none";
  EXPECT_EQ(cpu::cpu_lanes(lenet, 4, 2), 1) << "two images' activations take fewer bytes than LeNet-5's weights";
  EXPECT_EQ(cpu::cpu_lanes(lenet, 4, 2, 2), 2) << "asked for";
  const models::Workload mlp = models::workload("mlp", "mnist");
  EXPECT_EQ(cpu::cpu_lanes(mlp.spec, mlp.batch, 2), 1) << "the MLP's weights outweigh its activations";
  EXPECT_EQ(cpu::cpu_lanes(models::workload("resnet152", "cifar10").spec, 128, 2, 2), 1) << "batch norm";
  ModelSpec no_loss = named("no_loss", 0);
  const int x = no_loss.add("input", InputSpec{{6}}, {});
  no_loss.add("fc", LinearSpec{6, 4}, {x});
  EXPECT_EQ(cpu::cpu_lanes(no_loss, 8, 2, 2), 1) << "no loss";
}

// ResNet-152's structure at a size the double reference runs in a moment: the stem, a
// bottleneck with a strided projection shortcut and one with an identity shortcut (the input
// feeding both the branch and the add), global pooling and the classifier, built like
// models::resnet152 (bias-free convolutions, each followed by batch norm).
TEST(ModelsWholeGradient, ResnetBlocks) {
  ModelSpec m = named("resnet_blocks", 10);
  auto conv_bn = [&](const std::string& name, int x, i64 in, i64 out, i64 k, i64 stride, bool relu) {
    x = m.add(name + ".conv", Conv2dSpec{in, out, k, stride, k / 2, false}, {x});
    BatchNormSpec bn;
    bn.channels = out;
    x = m.add(name + ".bn", bn, {x});
    return relu ? m.add(name + ".relu", ReLUSpec{}, {x}) : x;
  };
  auto bottleneck = [&](const std::string& name, int x, i64 in, i64 width, i64 stride) {
    int y = conv_bn(name + ".a", x, in, width, 1, 1, true);
    y = conv_bn(name + ".b", y, width, width, 3, stride, true);
    y = conv_bn(name + ".c", y, width, 4 * width, 1, 1, false);
    const bool project = stride != 1 || in != 4 * width;
    const int shortcut = project ? conv_bn(name + ".proj", x, in, 4 * width, 1, stride, false) : x;
    return m.add(name + ".relu", ReLUSpec{}, {m.add(name + ".add", AddSpec{}, {y, shortcut})});
  };
  int x = m.add("input", InputSpec{{3, 16, 16}}, {});
  x = conv_bn("stem", x, 3, 16, 7, 2, true);            // 16 x 8 x 8
  x = m.add("stem.pool", MaxPool2dSpec{3, 2, 1}, {x});  // 16 x 4 x 4
  x = bottleneck("block1", x, 16, 8, 2);                // 32 x 2 x 2, projection
  x = bottleneck("block2", x, 32, 8, 1);                // 32 x 2 x 2, identity
  x = m.add("avgpool", GlobalAvgPoolSpec{}, {x});
  x = m.add("fc", LinearSpec{32, 10}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{10}, {x});
  check_whole_model(m, 4, "cifar10");
}

// The one format of a failed library call, its typed errors, and source files named relative to
// the tree (a CSV row shared from one machine carries no build machine's paths).
TEST(Errors, OneFormatForEveryLibraryWithRelativeFiles) {
  try {
    fail_call(CallFailure::Backend, "cuDNN", "CUDNN_STATUS_BAD_PARAM", "cudnnSomething(x)", __FILE__, 42);
    ADD_FAILURE() << "did not throw";
  } catch (const BackendError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cuDNN failed: CUDNN_STATUS_BAD_PARAM (tests/test_models.cpp:42) [cudnnSomething(x)]");
  }
  EXPECT_THROW(fail_call(CallFailure::OutOfMemory, "CUDA", "cudaErrorMemoryAllocation", "cudaMalloc(p)", __FILE__, 1),
               OutOfMemory);
  try {
    TB_CHECK(1 + 1 == 3, "arithmetic");
    ADD_FAILURE() << "did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("failed at tests/test_models.cpp:"), std::string::npos) << message;
    EXPECT_EQ(message.find("/tests/test_models.cpp"), std::string::npos) << "an absolute path: " << message;
  }
}

// ---- Initial parameters (engine/core/init.cpp and initialize_parameters) ----

// Each Init draws what init.hpp says: constants exactly, uniform values inside and filling
// +-1/sqrt(fan_in) around 0, He normal values around 0 with standard deviation sqrt(2/fan_in) and
// about 68% of them within one; the same seed the same values, another seed others. The draws are
// seeded, so the bounds on their statistics hold on every run (each is several standard errors
// wide: 0.0016 for the uniform mean, 0.0055 and 0.004 for the normal mean and deviation, 0.005 for
// the fraction).
TEST(InitialParameters, EachInitDrawsWhatItSays) {
  const auto spec = [](Init init, i64 count, i64 fan_in) { return ParamSpec{"p", {count}, init, fan_in}; };
  const auto mean = [](const std::vector<float>& v) {
    double sum = 0;
    for (float e : v) sum += e;
    return sum / double(v.size());
  };
  constexpr i64 n = 8192;
  EXPECT_EQ(init_param(spec(Init::Zeros, 5, 3), 1), std::vector<float>(5, 0.0f));
  EXPECT_EQ(init_param(spec(Init::Ones, 5, 3), 1), std::vector<float>(5, 1.0f));

  const std::vector<float> uniform = init_param(spec(Init::UniformFanIn, n, 16), 7);  // bound 1/4
  const auto [low, high] = std::minmax_element(uniform.begin(), uniform.end());
  EXPECT_GE(*low, -0.25f);
  EXPECT_LE(*high, 0.25f);
  EXPECT_LT(*low, -0.245f);
  EXPECT_GT(*high, 0.245f);
  EXPECT_NEAR(mean(uniform), 0.0, 0.01);

  const std::vector<float> normal = init_param(spec(Init::HeNormal, n, 8), 7);  // deviation 1/2
  const double normal_mean = mean(normal);
  double square = 0;
  i64 within_one = 0;
  for (float e : normal) {
    square += (e - normal_mean) * (e - normal_mean);
    within_one += std::abs(e) < 0.5f;
  }
  EXPECT_NEAR(normal_mean, 0.0, 0.03);
  EXPECT_NEAR(std::sqrt(square / double(n)), 0.5, 0.025);
  EXPECT_NEAR(double(within_one) / double(n), 0.6827, 0.025);
  EXPECT_TRUE(std::all_of(normal.begin(), normal.end(), [](float e) { return std::isfinite(e); }));

  EXPECT_EQ(init_param(spec(Init::HeNormal, 16, 8), 7), init_param(spec(Init::HeNormal, 16, 8), 7));
  EXPECT_NE(init_param(spec(Init::HeNormal, 16, 8), 7), init_param(spec(Init::HeNormal, 16, 8), 8));
}

// initialize_parameters writes every layer's parameters, each tensor from a seed of its own: two
// layers alike (3 -> 3, no bias) get different weights, and so do two networks whose seeds are
// 1 and 2 (seeds that only counted up from the network's seed would give the second network's
// fc2 the first's fc3 weights).
TEST(InitialParameters, EveryLayerIsWrittenEachTensorFromASeedOfItsOwn) {
  ModelSpec m = named("three_linear", 3);
  int x = m.add("input", InputSpec{{4}}, {});
  x = m.add("fc1", LinearSpec{4, 3, false}, {x});
  x = m.add("fc2", LinearSpec{3, 3, false}, {x});
  x = m.add("fc3", LinearSpec{3, 3, false}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{3}, {x});
  cpu::CpuNetwork one(m, config(2, {}, 1)), two(m, config(2, {}, 2));
  std::vector<std::vector<float>> weights;
  for (const cpu::CpuNetwork* net : {&one, &two}) {
    for (const char* layer : {"fc1", "fc2", "fc3"}) {
      const std::vector<float> w = net->read_param(node_index(m, layer), 0);
      SCOPED_TRACE(layer);
      EXPECT_LT(*std::min_element(w.begin(), w.end()), 0.0f);
      EXPECT_GT(*std::max_element(w.begin(), w.end()), 0.0f);
      weights.push_back(w);
    }
  }
  for (std::size_t a = 0; a < weights.size(); ++a)
    for (std::size_t b = a + 1; b < weights.size(); ++b)
      EXPECT_NE(weights[a], weights[b]) << "weights " << a << " and " << b << " (fc1..fc3 of seed 1, then seed 2)";
}

// rethrow_for_node puts "<model>/<node> (<kind>): " before the message and keeps the type, so
// that an out-of-memory is still reported as one and a bad input as the user's.
TEST(Errors, ANodesFailureIsNamedAndKeepsItsType) {
  ModelSpec m = named("tiny", 3);
  const int x = m.add("input", InputSpec{{4}}, {});
  m.add("loss", SoftmaxCrossEntropySpec{3}, {m.add("fc", LinearSpec{4, 3}, {x})});
  const auto rethrown = [&](auto error) {
    try {
      try {
        throw error;
      } catch (...) {
        rethrow_for_node(m, 1);
      }
    } catch (const OutOfMemory& e) {
      return "OutOfMemory: " + std::string(e.what());
    } catch (const BackendError& e) {
      return "BackendError: " + std::string(e.what());
    } catch (const InputError& e) {
      return "InputError: " + std::string(e.what());
    } catch (const CheckFailed& e) {
      return "CheckFailed: " + std::string(e.what());
    } catch (const Error& e) {
      return "Error: " + std::string(e.what());
    }
    return std::string("nothing");
  };
  EXPECT_EQ(rethrown(OutOfMemory("x")), "OutOfMemory: tiny/fc (linear): x");
  EXPECT_EQ(rethrown(BackendError("x")), "BackendError: tiny/fc (linear): x");
  EXPECT_EQ(rethrown(InputError("x")), "InputError: tiny/fc (linear): x");
  EXPECT_EQ(rethrown(CheckFailed("x")), "CheckFailed: tiny/fc (linear): x");
  EXPECT_EQ(rethrown(Error("x")), "Error: tiny/fc (linear): x");
}

// fnv1a is FNV-1a: from the published 64-bit offset basis, its default start (kFnvOffset had lost
// the basis's last digit), it gives the published values ("a": af63dc4c8601ec8c, "foobar":
// 85944171f73967e8), and a hash continued over a second buffer is the hash of both.
TEST(Checksum, Fnv1aGivesThePublishedValues) {
  constexpr std::uint64_t kBasis = 14695981039346656037ull;
  EXPECT_EQ(kFnvOffset, kBasis);
  EXPECT_EQ(fnv1a("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("", 0, kBasis), kBasis);
  EXPECT_EQ(fnv1a("a", 1, kBasis), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar", 6, kBasis), 0x85944171f73967e8ull);
  EXPECT_EQ(fnv1a("bar", 3, fnv1a("foo", 3, kBasis)), 0x85944171f73967e8ull);
  EXPECT_EQ(fnv1a("bar", 3, fnv1a("foo", 3)), fnv1a("foobar", 6));
}

// An out-of-memory failure says so and what to change; TB_CHECK's message is its own text, then
// the condition that failed and where.
TEST(Errors, AnOutOfMemorySaysWhatToChangeAndACheckGivesItsMessageAndCondition) {
  try {
    fail_call(CallFailure::OutOfMemory, "CUDA", "cudaErrorMemoryAllocation", "cudaMalloc(p)", __FILE__, 7);
    ADD_FAILURE() << "did not throw";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(std::string(e.what()),
              "CUDA failed: cudaErrorMemoryAllocation (tests/test_models.cpp:7) [cudaMalloc(p)]; the device is out of "
              "memory (lower --batch, or raise --gpu_memory_limit if it is set)");
  }
  try {
    TB_CHECK(1 + 1 == 3, "arithmetic is {}", "off");
    ADD_FAILURE() << "did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("arithmetic is off (1 + 1 == 3 failed at tests/test_models.cpp:", 0), 0u) << message;
  }
}

}  // namespace
}  // namespace tb

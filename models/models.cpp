// Builders of the four fixed models. Layer shapes follow user story 003 (Chainer's MLP, LeNet5
// and LSTM examples) and torchvision's ResNet-152 (v1.5: the stride sits on the 3x3 conv).
#include "models/models.hpp"

#include <fmt/format.h>

namespace tb::models {

ModelSpec mlp() {
  ModelSpec m;
  m.name = "mlp";
  int x = m.add("input", InputSpec{{784}}, {});
  x = m.add("fc1", LinearSpec{784, 1000}, {x});
  x = m.add("relu1", ReLUSpec{}, {x});
  x = m.add("fc2", LinearSpec{1000, 1000}, {x});
  x = m.add("relu2", ReLUSpec{}, {x});
  x = m.add("fc3", LinearSpec{1000, 10}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{10}, {x});
  m.classes = 10;
  return m;
}

ModelSpec lenet5() {
  ModelSpec m;
  m.name = "lenet5";
  int x = m.add("input", InputSpec{{3, 32, 32}}, {});
  x = m.add("conv1", Conv2dSpec{3, 6, 5}, {x});       // 6x28x28
  x = m.add("sigmoid1", SigmoidSpec{}, {x});
  x = m.add("pool1", MaxPool2dSpec{2, 2}, {x});       // 6x14x14
  x = m.add("conv2", Conv2dSpec{6, 16, 5}, {x});      // 16x10x10
  x = m.add("sigmoid2", SigmoidSpec{}, {x});
  x = m.add("pool2", MaxPool2dSpec{2, 2}, {x});       // 16x5x5
  x = m.add("conv3", Conv2dSpec{16, 120, 4}, {x});    // 120x2x2
  x = m.add("sigmoid3", SigmoidSpec{}, {x});
  x = m.add("fc4", LinearSpec{480, 84}, {x});
  x = m.add("sigmoid4", SigmoidSpec{}, {x});
  x = m.add("fc5", LinearSpec{84, 10}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{10}, {x});
  m.classes = 10;
  return m;
}

ModelSpec lstm(i64 seq_len) {
  ModelSpec m;
  m.name = "lstm";
  m.task = Task::Regression;
  int x = m.add("input", InputSpec{{1}, seq_len}, {});
  x = m.add("fc1", LinearSpec{1, 5}, {x});
  x = m.add("lstm", LSTMSpec{5, 5}, {x});
  x = m.add("fc2", LinearSpec{5, 1}, {x});
  m.add("loss", MSESpec{}, {x});
  return m;
}

namespace {

int conv_bn(ModelSpec& m, const std::string& name, int x, i64 in, i64 out, i64 kernel, i64 stride,
            bool relu, bool zero_gamma = false) {
  x = m.add(name + ".conv", Conv2dSpec{in, out, kernel, stride, kernel / 2, false}, {x});
  x = m.add(name + ".bn", BatchNormSpec{.channels = out, .zero_init_gamma = zero_gamma}, {x});
  if (relu) x = m.add(name + ".relu", ReLUSpec{}, {x});
  return x;
}

// 1x1 reduce, 3x3 (carrying the stride), 1x1 expand; projection shortcut where the shape changes.
int bottleneck(ModelSpec& m, const std::string& name, int x, i64 in, i64 width, i64 stride) {
  const i64 out = width * 4;
  int y = conv_bn(m, name + ".a", x, in, width, 1, 1, true);
  y = conv_bn(m, name + ".b", y, width, width, 3, stride, true);
  y = conv_bn(m, name + ".c", y, width, out, 1, 1, false, /*zero_gamma=*/true);
  int shortcut = x;
  if (stride != 1 || in != out) shortcut = conv_bn(m, name + ".proj", x, in, out, 1, stride, false);
  int sum = m.add(name + ".add", AddSpec{}, {y, shortcut});
  return m.add(name + ".relu", ReLUSpec{}, {sum});
}

}  // namespace

ModelSpec resnet152(i64 image_size, i64 classes) {
  ModelSpec m;
  m.name = "resnet152";
  int x = m.add("input", InputSpec{{3, image_size, image_size}}, {});
  x = m.add("stem.conv", Conv2dSpec{3, 64, 7, 2, 3, false}, {x});
  x = m.add("stem.bn", BatchNormSpec{.channels = 64}, {x});
  x = m.add("stem.relu", ReLUSpec{}, {x});
  x = m.add("stem.pool", MaxPool2dSpec{3, 2, 1}, {x});
  const i64 blocks[] = {3, 8, 36, 3};
  i64 in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const i64 width = 64 << stage;
    for (i64 b = 0; b < blocks[stage]; ++b) {
      const i64 stride = (stage > 0 && b == 0) ? 2 : 1;
      x = bottleneck(m, fmt::format("layer{}.{}", stage + 1, b), x, in, width, stride);
      in = width * 4;
    }
  }
  x = m.add("avgpool", GlobalAvgPoolSpec{}, {x});
  x = m.add("fc", LinearSpec{in, classes}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{classes}, {x});
  m.classes = classes;
  return m;
}

std::vector<Workload> workloads() {
  using Kind = OptimizerConfig::Kind;
  const OptimizerConfig adam{.kind = Kind::Adam, .lr = 1e-3};
  // Goyal et al. 2017: lr 0.1 per 256 samples, scaled linearly with the batch.
  const OptimizerConfig resnet_sgd{.kind = Kind::SGD, .lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4};
  const OptimizerConfig lstm_adam{.kind = Kind::Adam, .lr = 1e-2};
  // LeNet-5's stacked sigmoids sit on a plateau for its first 100 or so steps at batch 100 (the
  // loss stays at ln 10, then falls fast); its warm-up covers that, so that a train/ run can
  // check that the loss falls.
  //  model        dataset         batch optimizer   spec             lr@batch epochs real-only warm-up
  return {
      {"mlp", "mnist", 100, adam, mlp(), 0, 5, false, 2},
      {"mlp", "fashion-mnist", 100, adam, mlp(), 0, 5, true, 2},
      {"lenet5", "cifar10", 100, adam, lenet5(), 0, 5, false, 200},
      {"lstm", "sine", 20, lstm_adam, lstm(kLstmSeqLen), 0, 20, false, 2},
      {"resnet152", "cifar10", 128, resnet_sgd, resnet152(32, 10), 256, 1, false, 2},
      {"resnet152", "imagenet", 8, resnet_sgd, resnet152(224, 1000), 256, 1, false, 2, 128},
  };
}

OptimizerConfig Workload::optimizer_for(i64 batch_size) const {
  OptimizerConfig c = optimizer;
  if (lr_reference_batch > 0) c.lr = optimizer.lr * double(batch_size) / double(lr_reference_batch);
  return c;
}

std::vector<std::string> model_names() { return {"mlp", "lenet5", "lstm", "resnet152"}; }

}  // namespace tb::models

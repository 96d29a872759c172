// ResNet-152 (torchvision's v1.5: the stride sits on the 3x3 convolution) with bottleneck blocks
// [3, 8, 36, 3], on CIFAR-10 at 32x32 and on ImageNet-shaped 224x224 images, trained with SGD
// and momentum at Goyal et al.'s rate (0.1 per 256 samples, scaled linearly with the batch).
#include <fmt/format.h>

#include "models/models.hpp"

namespace tb::models {
namespace {

int conv_bn(ModelSpec& m, const std::string& name, int x, i64 in, i64 out, i64 kernel, i64 stride, bool relu,
            bool zero_gamma = false) {
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

// At 224x224 batch 8 is a CPU batch (an H100 runs it at 1.7% of its peak): GPU rows train at
// 128, lowered to what fits the device.
std::vector<Workload> workloads() {
  const OptimizerConfig sgd{.kind = OptimizerConfig::Kind::SGD, .lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4};
  return {Workload{.model = "resnet152",
                   .dataset = "cifar10",
                   .batch = 128,
                   .optimizer = sgd,
                   .spec = resnet152(32, 10),
                   .lr_reference_batch = 256,
                   .check_steps = 12},
          Workload{.model = "resnet152",
                   .dataset = "imagenet",
                   .batch = 8,
                   .optimizer = sgd,
                   .spec = resnet152(224, 1000),
                   .lr_reference_batch = 256,
                   .gpu_batch = 128}};
}

const RegisterWorkloads kRegistered(40, workloads);

}  // namespace
}  // namespace tb::models

// LeNet-5 of user story 003 (Chainer's example, sigmoid activations) on 3x32x32 CIFAR-10 images,
// trained with Adam.
#include "models/models.hpp"

namespace tb::models {
namespace {

ModelSpec lenet5() {
  ModelSpec m;
  m.name = "lenet5";
  int x = m.add("input", InputSpec{{3, 32, 32}}, {});
  x = m.add("conv1", Conv2dSpec{3, 6, 5}, {x});  // 6x28x28
  x = m.add("sigmoid1", SigmoidSpec{}, {x});
  x = m.add("pool1", MaxPool2dSpec{2, 2}, {x});   // 6x14x14
  x = m.add("conv2", Conv2dSpec{6, 16, 5}, {x});  // 16x10x10
  x = m.add("sigmoid2", SigmoidSpec{}, {x});
  x = m.add("pool2", MaxPool2dSpec{2, 2}, {x});     // 16x5x5
  x = m.add("conv3", Conv2dSpec{16, 120, 4}, {x});  // 120x2x2
  x = m.add("sigmoid3", SigmoidSpec{}, {x});
  x = m.add("fc4", LinearSpec{480, 84}, {x});
  x = m.add("sigmoid4", SigmoidSpec{}, {x});
  x = m.add("fc5", LinearSpec{84, 10}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{10}, {x});
  m.classes = 10;
  return m;
}

// The stacked sigmoids sit on a plateau for the first 100 or so steps at batch 100 (the loss
// stays at ln 10, then falls fast): the warm-up covers that, so that a train/ run can check
// that the loss falls, and the unit test's short run takes 300 steps of 32.
std::vector<Workload> workloads() {
  return {Workload{.model = "lenet5",
                   .dataset = "cifar10",
                   .batch = 100,
                   .optimizer = OptimizerConfig{.kind = OptimizerConfig::Kind::Adam, .lr = 1e-3},
                   .spec = lenet5(),
                   .epochs = 5,
                   .warmup_steps = 200,
                   .check_steps = 300,
                   .check_batch = 32}};
}

const RegisterWorkloads kRegistered(20, workloads);

}  // namespace
}  // namespace tb::models

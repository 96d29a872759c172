// The MLP of user story 003 (Chainer's MNIST example): 784-1000-1000-10 with ReLU, trained with
// Adam on MNIST and, where its files are found, Fashion-MNIST.
#include "models/models.hpp"

namespace tb::models {
namespace {

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

std::vector<Workload> workloads() {
  const OptimizerConfig adam{.kind = OptimizerConfig::Kind::Adam, .lr = 1e-3};
  return {Workload{.model = "mlp", .dataset = "mnist", .batch = 100, .optimizer = adam, .spec = mlp(), .epochs = 5},
          Workload{.model = "mlp",
                   .dataset = "fashion-mnist",
                   .batch = 100,
                   .optimizer = adam,
                   .spec = mlp(),
                   .epochs = 5,
                   .real_data_only = true}};
}

const RegisterWorkloads kRegistered(10, workloads);

}  // namespace
}  // namespace tb::models

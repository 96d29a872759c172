// The LSTM of user story 003 (Chainer's example at the size of the sine task): linear 1->5,
// LSTM 5, linear 5->1 at every step, MSE against the wave one step later, over windows of 35
// steps (truncated backpropagation through time), trained with Adam.
#include "models/models.hpp"

namespace tb::models {
namespace {

constexpr i64 kSeqLen = 35;

ModelSpec lstm() {
  ModelSpec m;
  m.name = "lstm";
  m.task = Task::Regression;
  int x = m.add("input", InputSpec{{1}, kSeqLen}, {});
  x = m.add("fc1", LinearSpec{1, 5}, {x});
  x = m.add("lstm", LSTMSpec{5, 5}, {x});
  x = m.add("fc2", LinearSpec{5, 1}, {x});
  m.add("loss", MSESpec{}, {x});
  return m;
}

std::vector<Workload> workloads() {
  return {Workload{.model = "lstm",
                   .dataset = "sine",
                   .batch = 20,
                   .optimizer = OptimizerConfig{.kind = OptimizerConfig::Kind::Adam, .lr = 1e-2},
                   .spec = lstm(),
                   .epochs = 20,
                   .check_steps = 60}};
}

const RegisterWorkloads kRegistered(30, workloads);

}  // namespace
}  // namespace tb::models

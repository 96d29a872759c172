// trainbench's models as backend-agnostic specs and the workloads (model, dataset, batch,
// optimizer) the harness registers. Each model is one file, models/<name>.cpp, holding its
// builder and its workloads and registering them (RegisterWorkloads); everything else (the
// harness, the tests, the PyTorch peer through `trainbench --list_models --json`) iterates over
// workloads().
#pragma once

#include <string>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"

namespace tb::models {

struct Workload {
  std::string model;    // "mlp", "lenet5", "lstm", "resnet152"
  std::string dataset;  // a dataset datasets/sources.cpp can make: "mnist", "cifar10", "sine", "imagenet"
  i64 batch;            // default batch (sequences for the LSTM)
  OptimizerConfig optimizer;
  ModelSpec spec;
  i64 lr_reference_batch = 0;   // > 0: optimizer.lr is for this batch, scaled linearly to others
  i64 epochs = 1;               // default of the epochs/ benchmarks
  bool real_data_only = false;  // registered only where the dataset's files are found
  i64 warmup_steps = 2;         // default steps before timing the train/ benchmarks
  // Default batch on a GPU (0: `batch`). The harness lowers it to the largest power of two
  // whose planned footprint fits the device.
  i64 gpu_batch = 0;
  // A short CPU run that must lower the loss on a fixed batch (tests/test_models.cpp): the
  // steps and batch that show this model learning within seconds.
  i64 check_steps = 20, check_batch = 4;

  OptimizerConfig optimizer_for(i64 batch_size) const;
  i64 batch_on_gpu() const { return gpu_batch > 0 ? gpu_batch : batch; }
};

// Every registered workload, in the order of their files' `order` (then as each file lists them).
const std::vector<Workload>& workloads();
// The workload of `model` on `dataset`; throws tb::InputError naming the registered ones.
const Workload& workload(const std::string& model, const std::string& dataset);
// The registered models, each once, in workload order.
std::vector<std::string> model_names();

// A model file's registration, at namespace scope:
//   const RegisterWorkloads kRegistered(10, [] { return std::vector<Workload>{...}; });
// `order` places the file's workloads among the others (the benchmarks run in this order).
class RegisterWorkloads {
 public:
  RegisterWorkloads(int order, std::vector<Workload> (*make)());
};

}  // namespace tb::models

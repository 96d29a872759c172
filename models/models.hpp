// The four fixed models of trainbench (user story 003) as backend-agnostic specs, and the
// workloads (model, dataset, batch, optimizer) the harness registers.
#pragma once

#include <string>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"

namespace tb::models {

ModelSpec mlp();                                 // 784-1000-1000-10, ReLU
ModelSpec lenet5();                              // 3x32x32 input, sigmoid, 10 classes
ModelSpec lstm(i64 seq_len);                     // linear 1->5, LSTM 5, linear 5->1, MSE
ModelSpec resnet152(i64 image_size, i64 classes);  // bottleneck blocks [3, 8, 36, 3]

struct Workload {
  std::string model;    // "mlp", "lenet5", "lstm", "resnet152"
  std::string dataset;  // "mnist", "cifar10", "sine", "imagenet"
  i64 batch;            // default batch (sequences for the LSTM)
  OptimizerConfig optimizer;
  ModelSpec spec;
  i64 lr_reference_batch = 0;  // > 0: optimizer.lr is for this batch, scaled linearly to others
  i64 epochs = 1;               // default of the epochs/ benchmarks
  bool real_data_only = false;  // registered only where the dataset's files are found
  i64 warmup_steps = 2;         // default steps before timing the train/ benchmarks
  // Default batch on a GPU (0: `batch`). ResNet-152 at 224x224 trains at a GPU's batch there (8
  // is a CPU batch: an H100 runs it at 1.7% of its peak); the harness lowers it to the largest
  // power of two whose planned footprint fits the device (bench/registry.cpp).
  i64 gpu_batch = 0;

  OptimizerConfig optimizer_for(i64 batch_size) const;
};

constexpr i64 kLstmSeqLen = 35;  // truncated BPTT length

std::vector<Workload> workloads();
std::vector<std::string> model_names();

}  // namespace tb::models

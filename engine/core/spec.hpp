// Models as data: a graph of layer specs that every backend turns into executable layers.
// The specs know their shapes, parameters and FLOPs; they know nothing of any backend.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace tb {

using i64 = std::int64_t;
using Dims = std::vector<i64>;

// Input of the model. Images and vectors are batch-major (N, dims...); sequences (seq_len > 0)
// are time-major (T, N, dims...), the layout RNN libraries want.
struct InputSpec {
  Dims sample_dims;
  i64 seq_len = 0;
};
// y = x w^T + b over the last dimension, or over all but the batch dimension when the input is
// an image (N, C, H, W) with C*H*W == in_features (the flatten between convolutions and FCs).
struct LinearSpec {
  i64 in_features, out_features;
  bool bias = true;
};
struct Conv2dSpec {
  i64 in_channels, out_channels, kernel, stride = 1, padding = 0;
  bool bias = true;
};
struct MaxPool2dSpec {
  i64 kernel, stride, padding = 0;
};
struct GlobalAvgPoolSpec {};
struct BatchNormSpec {
  i64 channels;
  double eps = 1e-5, momentum = 0.1;
  bool zero_init_gamma = false;  // last BN of a residual branch (Goyal et al. 2017)
};
struct ReLUSpec {};
struct SigmoidSpec {};
struct LSTMSpec {
  i64 input_size, hidden_size;
};
struct AddSpec {};
struct SoftmaxCrossEntropySpec {
  i64 classes;
};
struct MSESpec {};

using LayerSpec = std::variant<InputSpec, LinearSpec, Conv2dSpec, MaxPool2dSpec, GlobalAvgPoolSpec, BatchNormSpec,
                               ReLUSpec, SigmoidSpec, LSTMSpec, AddSpec, SoftmaxCrossEntropySpec, MSESpec>;

const char* kind_name(const LayerSpec& spec);
bool is_loss(const LayerSpec& spec);

struct Node {
  std::string name;
  LayerSpec spec;
  std::vector<int> inputs;  // indices of earlier nodes
};

// How a parameter is initialised; the canonical shape is what tests and checkpoints see.
enum class Init { Zeros, Ones, UniformFanIn, HeNormal };

struct ParamSpec {
  std::string name;  // "weight", "bias", "gamma", ...
  Dims shape;        // canonical, row-major
  Init init;
  i64 fan_in;
  i64 count() const;
};

enum class Task { Classification, Regression };

struct ModelSpec {
  std::string name;
  std::vector<Node> nodes;  // topological order; node 0 is the input, the last is the loss
                            // (or, in layer tests, an output whose gradient is given)
  Task task = Task::Classification;
  i64 classes = 0;  // classification only

  int add(std::string node_name, LayerSpec spec, std::vector<int> inputs);
  const InputSpec& input() const;
  int loss_node() const { return static_cast<int>(nodes.size()) - 1; }
};

// The same function of the input with every max pool that is the only consumer of an increasing
// activation (ReLU, sigmoid) moved before it: the pool takes the activation's input and the
// activation the pool's output. max(f(x)) = f(max(x)), and both orders take each window's gradient
// at the same position with f's derivative there, so the values after the pair and every
// gradient outside it are the model's, while f runs on a pool's output (a quarter of the values
// after a 2x2 pool). The pair's first node is then the pool, named as the model's pool, and its
// second the activation; every other node keeps its index. A max pool pads with -infinity,
// which no window's maximum takes, so padding does not change this.
ModelSpec pools_before_activations(const ModelSpec& model);

// Shape of every node's output for batch N (the loss node's is {1}); throws tb::Error on a
// graph whose shapes do not fit, naming the node.
std::vector<Dims> infer_shapes(const ModelSpec& model, i64 batch);
// Shape of the targets: labels (N) for classification, the prediction's shape for regression.
Dims target_shape(const ModelSpec& model, i64 batch);

std::vector<ParamSpec> node_params(const LayerSpec& spec, const Dims& input_shape);

struct ModelCost {
  i64 parameters = 0;
  // Multiply-accumulates of Linear, Conv2d and LSTM in one forward pass, per sample.
  // Everything else (activations, pooling, batch norm, losses) is not counted.
  double forward_macs_per_sample = 0;
  // Of those, the products whose input is the model's input: their backward computes the
  // weight gradient but no input gradient (nothing upstream needs one).
  double input_layer_macs_per_sample = 0;
  // Of those, the convolutions' products with their zero padding (a 3x3 kernel over a 2x2 plane
  // meets the input with 16 of its 36 products), and of these the input layers'. Counted in the
  // totals, as a model's FLOPs are usually quoted; a kernel may skip them.
  double padding_macs_per_sample = 0;
  double input_layer_padding_macs_per_sample = 0;
  double forward_flops_per_sample() const { return 2 * forward_macs_per_sample; }
  // Training step = forward + weight gradients + input gradients of every layer but those fed
  // by the model's input = 3 x forward - the input layers' input-gradient products.
  double train_flops_per_sample() const { return 2 * (3 * forward_macs_per_sample - input_layer_macs_per_sample); }
  // The same without the products with padding: the least work a step can do.
  double needed_train_flops_per_sample() const {
    return train_flops_per_sample() - 2 * (3 * padding_macs_per_sample - input_layer_padding_macs_per_sample);
  }
  // Their share of the FLOP count (1 where nothing is counted).
  double needed_share() const {
    const double all = train_flops_per_sample();
    return all > 0 ? needed_train_flops_per_sample() / all : 1.0;
  }
};
ModelCost model_cost(const ModelSpec& model);

i64 product(const Dims& dims);
std::string to_string(const Dims& dims);

}  // namespace tb

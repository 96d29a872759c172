// Shape inference, parameter lists and FLOP counts for model specs.
#include "engine/core/spec.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

#include "engine/core/error.hpp"

namespace tb {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

i64 product(const Dims& dims) {
  i64 p = 1;
  for (i64 d : dims) p *= d;
  return p;
}

std::string to_string(const Dims& dims) { return fmt::format("({})", fmt::join(dims, ", ")); }

i64 ParamSpec::count() const { return product(shape); }

const char* kind_name(const LayerSpec& spec) {
  static constexpr const char* names[] = {"input",
                                          "linear",
                                          "conv2d",
                                          "maxpool2d",
                                          "avgpool",
                                          "batchnorm",
                                          "relu",
                                          "sigmoid",
                                          "lstm",
                                          "add",
                                          "softmax_cross_entropy",
                                          "mse"};
  return names[spec.index()];
}

bool is_loss(const LayerSpec& spec) {
  return std::holds_alternative<SoftmaxCrossEntropySpec>(spec) || std::holds_alternative<MSESpec>(spec);
}

int ModelSpec::add(std::string node_name, LayerSpec spec, std::vector<int> inputs) {
  for (int in : inputs)
    TB_CHECK(in >= 0 && in < static_cast<int>(nodes.size()), "{}: input {} is not an earlier node", node_name, in);
  nodes.push_back(Node{std::move(node_name), std::move(spec), std::move(inputs)});
  return static_cast<int>(nodes.size()) - 1;
}

const InputSpec& ModelSpec::input() const {
  TB_CHECK(!nodes.empty() && std::holds_alternative<InputSpec>(nodes[0].spec), "model {}: node 0 must be the input",
           name);
  return std::get<InputSpec>(nodes[0].spec);
}

namespace {

// Positions of a window sliding over `size` padded on both sides: none where it does not fit
// (C++'s division would round a shortfall smaller than the stride up to one position).
i64 window_out(i64 size, i64 kernel, i64 stride, i64 pad) {
  const i64 span = size + 2 * pad - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

// The NCHW output of a window (a convolution's or a pool's: `what` names it for the error, "kernel"
// or "a pooling window of") over image input `x` into `channels`; refuses an input the window does
// not fit in either dimension.
Dims window_dims(const Dims& x, i64 channels, i64 kernel, i64 stride, i64 pad, const char* what,
                 const std::string& where) {
  Dims d{x[0], channels, window_out(x[2], kernel, stride, pad), window_out(x[3], kernel, stride, pad)};
  if (d[2] <= 0 || d[3] <= 0)
    throw Error(fmt::format("{}: input {} too small for {} {}", where, to_string(x), what, kernel));
  return d;
}

// Output shape of one node given its input shapes; `where` names the node for errors.
Dims output_shape(const LayerSpec& spec, const std::vector<Dims>& in, i64 batch, const std::string& where) {
  auto need_rank = [&](const Dims& d, size_t rank) {
    if (d.size() != rank) throw Error(fmt::format("{}: expects a rank-{} input, got {}", where, rank, to_string(d)));
  };
  return std::visit(
      Overloaded{
          [&](const InputSpec& s) {
            Dims d;
            if (s.seq_len > 0)
              d = {s.seq_len, batch};
            else
              d = {batch};
            d.insert(d.end(), s.sample_dims.begin(), s.sample_dims.end());
            return d;
          },
          [&](const LinearSpec& s) {
            const Dims& x = in[0];
            if (x.back() == s.in_features) {
              Dims d = x;
              d.back() = s.out_features;
              return d;
            }
            if (x.size() == 4 && x[1] * x[2] * x[3] == s.in_features) return Dims{x[0], s.out_features};
            throw Error(fmt::format("{}: linear with {} inputs cannot take {}", where, s.in_features, to_string(x)));
          },
          [&](const Conv2dSpec& s) {
            need_rank(in[0], 4);
            if (in[0][1] != s.in_channels)
              throw Error(fmt::format("{}: conv expects {} channels, got {}", where, s.in_channels, to_string(in[0])));
            return window_dims(in[0], s.out_channels, s.kernel, s.stride, s.padding, "kernel", where);
          },
          [&](const MaxPool2dSpec& s) {
            need_rank(in[0], 4);
            return window_dims(in[0], in[0][1], s.kernel, s.stride, s.padding, "a pooling window of", where);
          },
          [&](const GlobalAvgPoolSpec&) {
            need_rank(in[0], 4);
            return Dims{in[0][0], in[0][1], 1, 1};
          },
          [&](const BatchNormSpec& s) {
            need_rank(in[0], 4);
            if (in[0][1] != s.channels)
              throw Error(fmt::format("{}: batch norm over {} channels got {}", where, s.channels, to_string(in[0])));
            return in[0];
          },
          [&](const ReLUSpec&) { return in[0]; },
          [&](const SigmoidSpec&) { return in[0]; },
          [&](const LSTMSpec& s) {
            need_rank(in[0], 3);
            if (in[0][2] != s.input_size)
              throw Error(fmt::format("{}: LSTM expects {} features, got {}", where, s.input_size, to_string(in[0])));
            return Dims{in[0][0], in[0][1], s.hidden_size};
          },
          [&](const AddSpec&) {
            if (in[0] != in[1])
              throw Error(fmt::format("{}: add of {} and {}", where, to_string(in[0]), to_string(in[1])));
            return in[0];
          },
          [&](const SoftmaxCrossEntropySpec& s) {
            if (in[0].size() != 2 || in[0][1] != s.classes)
              throw Error(fmt::format("{}: expects logits (N, {}), got {}", where, s.classes, to_string(in[0])));
            return Dims{1};
          },
          [&](const MSESpec&) { return Dims{1}; },
      },
      spec);
}

size_t arity(const LayerSpec& spec) {
  if (std::holds_alternative<InputSpec>(spec)) return 0;
  if (std::holds_alternative<AddSpec>(spec)) return 2;
  return 1;
}

}  // namespace

std::vector<Dims> infer_shapes(const ModelSpec& model, i64 batch) {
  TB_CHECK(batch > 0, "batch must be positive, got {}", batch);
  model.input();
  std::vector<Dims> shapes;
  shapes.reserve(model.nodes.size());
  for (const Node& node : model.nodes) {
    std::string where = fmt::format("{}/{}", model.name, node.name);
    if (node.inputs.size() != arity(node.spec))
      throw Error(fmt::format("{}: {} takes {} inputs, has {}", where, kind_name(node.spec), arity(node.spec),
                              node.inputs.size()));
    // A graph may end without a loss (its output gradient is then given, as layer tests do),
    // but a loss anywhere else would leave the nodes after it without a gradient.
    if (is_loss(node.spec) && &node != &model.nodes.back())
      throw Error(fmt::format("{}: a loss must be the last node", where));
    std::vector<Dims> in;
    for (int i : node.inputs) in.push_back(shapes.at(i));
    shapes.push_back(output_shape(node.spec, in, batch, where));
  }
  return shapes;
}

ModelSpec pools_before_activations(const ModelSpec& model) {
  ModelSpec out = model;
  std::vector<int> consumers(model.nodes.size(), 0);
  for (const Node& node : model.nodes)
    for (int in : node.inputs) ++consumers[std::size_t(in)];
  for (std::size_t b = 0; b < out.nodes.size(); ++b) {
    Node& pool = out.nodes[b];
    if (!std::holds_alternative<MaxPool2dSpec>(pool.spec) || pool.inputs.size() != 1) continue;
    const int a = pool.inputs[0];
    Node& activation = out.nodes[std::size_t(a)];
    const bool increasing =
        std::holds_alternative<ReLUSpec>(activation.spec) || std::holds_alternative<SigmoidSpec>(activation.spec);
    if (!increasing || consumers[std::size_t(a)] != 1) continue;
    // Node a becomes the pool over a's input; node b the activation over node a.
    std::swap(activation.name, pool.name);
    std::swap(activation.spec, pool.spec);
  }
  return out;
}

Dims target_shape(const ModelSpec& model, i64 batch) {
  auto shapes = infer_shapes(model, batch);
  const Node& loss = model.nodes.back();
  TB_CHECK(is_loss(loss.spec), "model {}: no loss node, so no targets", model.name);
  if (model.task == Task::Classification) return Dims{shapes[loss.inputs[0]][0]};
  return shapes[loss.inputs[0]];
}

std::vector<ParamSpec> node_params(const LayerSpec& spec, const Dims& input_shape) {
  return std::visit(
      Overloaded{
          [&](const LinearSpec& s) {
            std::vector<ParamSpec> p{{"weight", {s.out_features, s.in_features}, Init::UniformFanIn, s.in_features}};
            if (s.bias) p.push_back({"bias", {s.out_features}, Init::Zeros, s.in_features});
            return p;
          },
          [&](const Conv2dSpec& s) {
            i64 fan_in = s.in_channels * s.kernel * s.kernel;
            std::vector<ParamSpec> p{
                {"weight", {s.out_channels, s.in_channels, s.kernel, s.kernel}, Init::HeNormal, fan_in}};
            if (s.bias) p.push_back({"bias", {s.out_channels}, Init::Zeros, fan_in});
            return p;
          },
          [&](const BatchNormSpec& s) {
            return std::vector<ParamSpec>{
                {"gamma", {s.channels}, s.zero_init_gamma ? Init::Zeros : Init::Ones, s.channels},
                {"beta", {s.channels}, Init::Zeros, s.channels}};
          },
          [&](const LSTMSpec& s) {
            // Canonical layouts follow oneDNN's ldigo with one layer and one direction.
            return std::vector<ParamSpec>{
                {"weight_x", {s.input_size, 4, s.hidden_size}, Init::UniformFanIn, s.hidden_size},
                {"weight_h", {s.hidden_size, 4, s.hidden_size}, Init::UniformFanIn, s.hidden_size},
                {"bias", {4, s.hidden_size}, Init::Zeros, s.hidden_size}};
          },
          [&](const auto&) { return std::vector<ParamSpec>{}; },
      },
      spec);
}

namespace {

// Over one axis of a convolution: how many (output, tap) pairs land on the input rather than
// on its padding, summed over the outputs.
double taps_on_input(i64 in, i64 out, const Conv2dSpec& s) {
  i64 n = 0;
  for (i64 o = 0; o < out; ++o)
    for (i64 t = 0; t < s.kernel; ++t) {
      const i64 i = o * s.stride - s.padding + t;
      n += i >= 0 && i < in;
    }
  return double(n);
}

}  // namespace

ModelCost model_cost(const ModelSpec& model) {
  constexpr i64 batch = 1;
  auto shapes = infer_shapes(model, batch);
  ModelCost cost;
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node& node = model.nodes[i];
    const Dims in = node.inputs.empty() ? Dims{} : shapes[node.inputs[0]];
    for (const ParamSpec& p : node_params(node.spec, in)) cost.parameters += p.count();
    const Dims& out = shapes[i];
    const bool fed_by_input =
        !node.inputs.empty() && std::holds_alternative<InputSpec>(model.nodes[std::size_t(node.inputs[0])].spec);
    double macs = 0, input_macs = 0;  // input_macs: the products with the layer's input
    double padding = 0;               // the products with a convolution's zero padding
    if (auto* s = std::get_if<LinearSpec>(&node.spec)) {
      macs = input_macs = double(product(out) / s->out_features) * s->in_features * s->out_features;
    } else if (auto* s = std::get_if<Conv2dSpec>(&node.spec)) {
      macs = input_macs = double(product(out)) * s->in_channels * s->kernel * s->kernel;
      padding =
          macs - double(out[1]) * s->in_channels * taps_on_input(in[2], out[2], *s) * taps_on_input(in[3], out[3], *s);
    } else if (auto* s = std::get_if<LSTMSpec>(&node.spec)) {
      // Per time step: 4 gates x (input + recurrent) matrix products.
      const double steps = double(product(out) / s->hidden_size);
      macs = steps * 4 * s->hidden_size * (s->input_size + s->hidden_size);
      input_macs = steps * 4 * s->hidden_size * s->input_size;
    }
    cost.forward_macs_per_sample += macs;
    cost.padding_macs_per_sample += padding;
    if (fed_by_input) {
      cost.input_layer_macs_per_sample += input_macs;
      cost.input_layer_padding_macs_per_sample += padding;
    }
  }
  return cost;
}

}  // namespace tb
